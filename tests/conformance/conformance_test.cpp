// The conformance suite: the contract of docs/design/contract.md, asserted identically on every backend.
//
// Basic tier (every backend): acquire/release, try-lock and timeouts, waiters woken on release,
// owner-only and idempotent release, non-aliasing names, bad names/options/configs, inspect,
// cancellation on close and of one wait, reentrancy, mutual exclusion across >= 8 processes
// judged by the overlap checker and a read-sleep-write counter (docs/design/faults.md §1), recovery after a holder's SIGKILL (2),
// stale release (4), owner-only release (5), bad input (15).
// Capability tiers skip by capability, never by accident: FENCING (token order), TTL (expiry,
// renewal, stale release after expiry).
#include "backends.hpp"
#include "support.hpp"

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fcntl.h>
#include <cstdlib>
#include <fstream>
#include <map>
#include <thread>
#include <unistd.h>

using namespace std::chrono_literals;
using dlock::conformance::backend_case;

namespace {

using clock_type = std::chrono::steady_clock;

}  // namespace

namespace dlock::conformance {
// Test names show the backend, not the bytes of the parameter.
void PrintTo(const backend_case& c, std::ostream* os) { *os << c.label; }
}  // namespace dlock::conformance

namespace {

// One scratch directory and config per backend for the whole run.
struct backend_setup {
    std::unique_ptr<dlock::test::scratch_dir> scratch;
    std::string config;
};

backend_setup& setup_for(const backend_case& c) {
    static std::map<std::string, backend_setup> setups;
    auto& s = setups[c.label];
    if (!s.scratch) {
        s.scratch = std::make_unique<dlock::test::scratch_dir>("dlock-conformance-" + c.label);
        s.config = c.make_config(s.scratch->path());
    }
    return s;
}

class Conformance : public ::testing::TestWithParam<backend_case> {
protected:
    void SetUp() override {
        DLOCK_CONFORMANCE_REQUIRE_SERVERS(GetParam());
        config_ = setup_for(GetParam()).config;
        scratch_ = setup_for(GetParam()).scratch->path();
        client_ = dlock::client::open(config_);
        // Names are unique per test so tests never see each other's locks.
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        prefix_ = std::string("conformance/") + info->name() + "/";
    }

    dlock::client open() { return dlock::client::open(config_); }
    std::string name(const std::string& suffix) const { return prefix_ + suffix; }
    bool has(uint64_t cap) const { return client_.has(cap); }

    std::string config_, scratch_, prefix_;
    dlock::client client_;
};

const dlock::acquire_options try_once = dlock::acquire_options().with_wait(0ms);

// ---- basic tier ------------------------------------------------------------------------------

TEST_P(Conformance, AcquireReleaseRoundTrip) {
    auto lease = client_.acquire(name("x"), try_once);
    ASSERT_TRUE(lease);
    EXPECT_EQ(lease.name(), name("x"));
    EXPECT_EQ(lease.owner().size(), 32u);
    EXPECT_EQ(lease.state(), dlock::lease_state::held);
    EXPECT_GT(lease.valid_until(), clock_type::now());
    if (has(DLOCK_CAP_FENCING)) {
        EXPECT_GT(lease.fencing_token(), 0u);
    }
    else EXPECT_EQ(lease.fencing_token(), 0u);
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
    EXPECT_EQ(lease.state(), dlock::lease_state::released);
    EXPECT_EQ(lease.release(), dlock::release_outcome::released) << "release is idempotent";
}

TEST_P(Conformance, OwnerTokensAreFreshForEveryAcquisition) {
    std::string previous;
    for (int i = 0; i < 5; ++i) {
        auto lease = client_.acquire(name("x"), try_once);
        EXPECT_NE(std::string(lease.owner()), previous);
        previous = lease.owner();
    }
}

TEST_P(Conformance, TryLockOnAHeldLockTimesOutAtOnceAndLeavesNothing) {
    auto holder = client_.acquire(name("x"), try_once);
    auto other = open();
    const auto start = clock_type::now();
    std::error_code ec;
    auto lease = other.acquire(name("x"), try_once, ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    EXPECT_FALSE(lease);
    EXPECT_LT(clock_type::now() - start, 1s);
    const auto info = other.inspect(name("x"));
    EXPECT_TRUE(info.held);
    if (!info.holder.empty()) {
        EXPECT_EQ(info.holder, holder.owner()) << "the failed attempt left no trace";
    }
}

TEST_P(Conformance, WaitTimesOutWithinBounds) {
    auto holder = client_.acquire(name("x"), try_once);
    auto other = open();
    const auto start = clock_type::now();
    std::error_code ec;
    other.acquire(name("x"), dlock::acquire_options().with_wait(300ms), ec);
    const auto waited = clock_type::now() - start;
    EXPECT_EQ(ec, dlock::errc::timeout);
    EXPECT_GE(waited, 300ms);
    EXPECT_LT(waited, 2300ms);
    EXPECT_EQ(holder.state(), dlock::lease_state::held);
}

TEST_P(Conformance, WaiterProceedsWhenTheHolderReleases) {
    auto holder = client_.acquire(name("x"), try_once);
    auto other = open();
    std::atomic<bool> acquired{false};
    clock_type::time_point got;
    std::thread waiter([&] {
        auto lease = other.acquire(name("x"), dlock::acquire_options().with_wait(10s));
        got = clock_type::now();
        acquired = true;
    });
    std::this_thread::sleep_for(200ms);
    EXPECT_FALSE(acquired.load()) << "acquired a held lock";
    const auto released = clock_type::now();
    holder.release();
    waiter.join();
    EXPECT_TRUE(acquired.load());
    EXPECT_LT(got - released, 2s) << "the waiter must be woken, not left to time out";
}

TEST_P(Conformance, StaleLeaseReleaseNeverTouchesTheNextHolder) {
    auto first = client_.acquire(name("x"), try_once);
    EXPECT_EQ(first.release(), dlock::release_outcome::released);
    auto other = open();
    auto second = other.acquire(name("x"), try_once);
    EXPECT_EQ(first.release(), dlock::release_outcome::released) << "a repeated release is a no-op";
    auto third_client = open();
    std::error_code ec;
    third_client.acquire(name("x"), try_once, ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "the second holder must still hold it";
    const auto info = third_client.inspect(name("x"));
    EXPECT_TRUE(info.held);
    if (!info.holder.empty()) {
        EXPECT_EQ(info.holder, second.owner());
    }
}

TEST_P(Conformance, DistinctNamesNeverAlias) {
    const std::vector<std::string> names = {
        "a", "a/b", "a%2Fb", ".", "..", "/", "A", "caf\xc3\xa9" /* NFC */, "cafe\xcc\x81" /* NFD */, "sp ace", "ctl\x01",
        "quote'\";--", "%00", "x~y", "zookeeper"};
    std::vector<std::string> full;
    for (const auto& n : names) full.push_back(name(n));
    // The longest names allowed, differing only in their last byte.
    full.push_back(name(std::string(1024 - prefix_.size(), 'n')));
    full.push_back(name(std::string(1023 - prefix_.size(), 'n') + "m"));
    std::vector<dlock::lease> held;
    for (const auto& n : full) {
        std::error_code ec;
        held.push_back(client_.acquire(n, try_once, ec));
        EXPECT_FALSE(ec) << "`" << n << "` collided with an earlier name: " << dlock_last_error();
    }
    std::vector<dlock::lease> again;
    auto other = open();
    for (const auto& n : full) {
        std::error_code ec;
        other.acquire(n, try_once, ec);
        EXPECT_EQ(ec, dlock::errc::timeout) << "`" << n << "` is held and must not be acquired twice";
    }
}

TEST_P(Conformance, BadNamesAreRejectedPrecisely) {
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"", "empty"},
        {std::string(1025, 'x'), "1025 bytes"},
        {std::string(1 << 20, 'x'), "1048576 bytes"},
        {"\xff\xfe", "not UTF-8"},
        {"\xc0\xaf", "not UTF-8"},
        {"\xed\xa0\x80", "surrogate"},
    };
    for (const auto& [n, why] : bad) {
        std::error_code ec;
        client_.acquire(n, try_once, ec);
        EXPECT_EQ(ec, dlock::errc::invalid_argument) << why;
        EXPECT_NE(std::string(dlock_last_error()).find(why), std::string::npos) << dlock_last_error();
    }
    std::error_code ec;
    client_.acquire(std::string("nul\0inside", 10), try_once, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument) << "an embedded NUL";
    EXPECT_THROW(client_.inspect(""), std::system_error);
}

TEST_P(Conformance, BadOptionsAreRejectedPrecisely) {
    dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
    dlock_lease* lease = nullptr;
    const std::string n = name("x");
    for (int64_t ttl : {int64_t(0), int64_t(-5), int64_t(366LL * 24 * 3600 * 1000), INT64_MAX}) {
        o = DLOCK_ACQUIRE_OPTIONS_INIT;
        o.ttl_ms = ttl;
        EXPECT_EQ(dlock_acquire(client_.handle(), n.c_str(), &o, &lease), DLOCK_INVALID_ARGUMENT) << "ttl " << ttl;
        EXPECT_NE(std::string(dlock_last_error()).find("ttl_ms"), std::string::npos);
    }
    o = DLOCK_ACQUIRE_OPTIONS_INIT;
    o.wait_ms = -3;
    EXPECT_EQ(dlock_acquire(client_.handle(), n.c_str(), &o, &lease), DLOCK_INVALID_ARGUMENT);
    o = DLOCK_ACQUIRE_OPTIONS_INIT;
    o.renew = 2;
    EXPECT_EQ(dlock_acquire(client_.handle(), n.c_str(), &o, &lease), DLOCK_INVALID_ARGUMENT);
    o = DLOCK_ACQUIRE_OPTIONS_INIT;
    o.struct_size = 0;
    EXPECT_EQ(dlock_acquire(client_.handle(), n.c_str(), &o, &lease), DLOCK_INVALID_ARGUMENT);
    EXPECT_EQ(lease, nullptr) << "out-parameters are untouched on failure";
}

TEST_P(Conformance, BadConfigsAreRejectedPrecisely) {
    const std::string backend = std::string(client_.backend());
    struct bad_config {
        std::string yaml;
        int status;
        std::string fragment;
    };
    const std::vector<bad_config> cases = {
        {"backend: [unclosed\n", DLOCK_CONFIG, "bad.yaml:2:1: malformed YAML"},
        {"backend: " + backend + "\ntimeout: 3s\n", DLOCK_CONFIG, "bad.yaml:2:1: unknown key `timeout`"},
        {"backend: " + backend + "\noptions:\n  no_such_option: 1\n", DLOCK_CONFIG, "bad.yaml:3:3: unknown option `no_such_option`"},
        {"backend: " + backend + "\ndefaults: {ttl: 10}\n", DLOCK_CONFIG, "has no unit"},
        {"backend: " + backend + "\ndefaults: {ttl: -1s}\n", DLOCK_CONFIG, "negative"},
        {"backend: " + backend + "\ndefaults: {renew: maybe}\n", DLOCK_CONFIG, "not a boolean"},
        {"defaults: {ttl: 1s}\n", DLOCK_CONFIG, "`backend` is missing"},
        {"backend: nosuchbackend\n", DLOCK_PLUGIN, "libdlock-nosuchbackend.so was not found"},
        {"backend: ../../etc\n", DLOCK_INVALID_ARGUMENT, "is not a backend name"},
    };
    for (const auto& c : cases) {
        dlock_client* client = nullptr;
        EXPECT_EQ(dlock_client_open_yaml(c.yaml.c_str(), "bad.yaml", &client), c.status) << c.yaml;
        EXPECT_NE(std::string(dlock_last_error()).find(c.fragment), std::string::npos)
            << "expected `" << c.fragment << "` in: " << dlock_last_error();
        EXPECT_EQ(client, nullptr);
    }
}

TEST_P(Conformance, InspectShowsTheHolder) {
    auto lease = client_.acquire(name("x"), try_once);
    auto other = open();
    const auto info = other.inspect(name("x"));
    EXPECT_TRUE(info.held);
    if (!info.holder.empty()) {
        EXPECT_EQ(info.holder, lease.owner());
    }
    if (has(DLOCK_CAP_FENCING)) {
        EXPECT_EQ(info.fencing_token, lease.fencing_token());
    }
    lease.release();
    EXPECT_FALSE(other.inspect(name("x")).held);
    EXPECT_FALSE(other.inspect(name("never-taken")).held);
}

TEST_P(Conformance, ClosingTheClientCancelsItsWaiters) {
    auto holder = client_.acquire(name("x"), try_once);
    dlock_client* other = nullptr;
    ASSERT_EQ(dlock_client_open(config_.c_str(), &other), DLOCK_OK);
    std::atomic<bool> done{false};
    int status = DLOCK_OK;
    const std::string n = name("x");
    std::thread waiter([&] {
        dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
        o.wait_ms = DLOCK_WAIT_FOREVER;
        dlock_lease* lease = nullptr;
        status = dlock_acquire(other, n.c_str(), &o, &lease);
        done = true;
    });
    std::this_thread::sleep_for(200ms);
    EXPECT_FALSE(done.load());
    const auto start = clock_type::now();
    dlock_client_close(other);  // from this thread, while the waiter waits
    waiter.join();
    EXPECT_EQ(status, DLOCK_CANCELLED);
    EXPECT_LT(clock_type::now() - start, 2s);
    EXPECT_EQ(holder.state(), dlock::lease_state::held);
}

TEST_P(Conformance, ClosingTheClientReleasesItsLeases) {
    auto other = open();
    auto lease = other.acquire(name("x"), try_once);
    other.close();
    EXPECT_EQ(lease.state(), dlock::lease_state::released);
    auto again = client_.acquire(name("x"), dlock::acquire_options().with_wait(2s));
    EXPECT_TRUE(again);
}

TEST_P(Conformance, ReentrantAcquisitionsCountHolds) {
    const auto reentrant = dlock::acquire_options().with_wait(0ms).with_reentrant(true);
    auto outer = client_.acquire(name("x"), reentrant);
    auto inner = client_.acquire(name("x"), reentrant);
    EXPECT_EQ(inner.fencing_token(), outer.fencing_token()) << "the same hold";
    auto other = open();
    std::error_code ec;
    EXPECT_EQ(inner.release(), dlock::release_outcome::released);
    other.acquire(name("x"), try_once, ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "still held by the outer acquisition";
    EXPECT_EQ(outer.release(), dlock::release_outcome::released);
    EXPECT_TRUE(other.acquire(name("x"), try_once));
}

TEST_P(Conformance, NonReentrantSecondAcquireContends) {
    auto first = client_.acquire(name("x"), try_once);
    std::error_code ec;
    client_.acquire(name("x"), try_once, ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "two acquisitions in one client exclude each other unless reentrant";
}

TEST_P(Conformance, MutexMeetsTimedLockable) {
    dlock::mutex m(client_, name("m"));
    {
        std::unique_lock<dlock::mutex> guard(m);
        EXPECT_TRUE(guard.owns_lock());
        auto other = open();
        dlock::mutex contender(other, name("m"));
        EXPECT_FALSE(contender.try_lock());
        EXPECT_FALSE(contender.try_lock_for(100ms));
        EXPECT_FALSE(contender.try_lock_until(clock_type::now() + 50ms));
    }
    std::unique_lock<dlock::mutex> again(m, std::try_to_lock);
    EXPECT_TRUE(again.owns_lock());
    if (has(DLOCK_CAP_FENCING)) {
        EXPECT_GT(m.fencing_token(), 0u);
    }
}

// docs/design/faults.md §1: >= 8 processes, many acquisitions, try-lock and timeouts mixed; the checker
// judges the intervals, and a read-sleep-write counter catches lost updates.
TEST_P(Conformance, MutualExclusionAcrossProcesses) {
    constexpr int processes = 8;
    constexpr int iterations = 60;
    const std::string n = name("shared");
    const std::string counter = scratch_ + "/counter-" + GetParam().label;
    {
        std::ofstream(counter, std::ios::binary | std::ios::trunc).write("\0\0\0\0\0\0\0\0", 8);
    }
    std::vector<std::unique_ptr<dlock::test::child_process>> workers;
    for (int p = 0; p < processes; ++p) {
        workers.push_back(std::make_unique<dlock::test::child_process>(std::vector<std::string>{
            DLOCK_CONFORMANCE_WORKER, "contend", config_, n, std::to_string(iterations),
            scratch_ + "/history-" + std::to_string(p), counter, std::to_string(p + 1)}));
    }
    for (auto& w : workers) EXPECT_EQ(w->wait(), 0);
    dlock::test::history h;
    for (int p = 0; p < processes; ++p) dlock::test::read_history(scratch_ + "/history-" + std::to_string(p), h);
    EXPECT_TRUE(h.failures.empty()) << h.failures.front();
    const auto v = dlock::test::check_mutual_exclusion(h.held, has(DLOCK_CAP_FENCING));
    std::cout << "[" << GetParam().label << "] " << v.summary() << "; " << h.timeouts << " attempts timed out\n";
    EXPECT_EQ(v.overlaps, 0u) << v.first_problem;
    EXPECT_EQ(v.fence_inversions, 0u) << v.first_problem;
    EXPECT_GE(v.intervals, size_t(processes)) << "every process should get the lock at least once";
    uint64_t value = 0;
    std::ifstream(counter, std::ios::binary).read(reinterpret_cast<char*>(&value), 8);
    EXPECT_EQ(value, h.held.size()) << "lost updates in the read-sleep-write counter";
}

// docs/design/faults.md §2: the holder is SIGKILLed; the next acquirer gets the lock within the backend's bound.
TEST_P(Conformance, HolderKilledNextHolderProceeds) {
    const std::string n = name("x");
    const auto ttl = 1500ms;
    dlock::test::child_process holder({DLOCK_CONFORMANCE_WORKER, "hold", config_, n, std::to_string(ttl.count())}, true);
    std::string line;
    ASSERT_TRUE(holder.read_line(line, 10000)) << "the holder never acquired";
    ASSERT_EQ(line.rfind("held", 0), 0u) << line;
    std::error_code ec;
    client_.acquire(n, try_once, ec);
    ASSERT_EQ(ec, dlock::errc::timeout);

    const auto killed = clock_type::now();
    holder.kill(SIGKILL);
    holder.wait();
    const auto bound = (has(DLOCK_CAP_SESSION_BOUND) ? 0ms : ttl) + GetParam().recovery_slack;
    auto lease = client_.acquire(n, dlock::acquire_options().with_wait(std::chrono::duration_cast<std::chrono::milliseconds>(bound)), ec);
    const auto recovery = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - killed);
    std::cout << "[" << GetParam().label << "] next holder " << recovery.count() << " ms after the holder's SIGKILL (bound "
              << bound.count() << " ms)\n";
    EXPECT_FALSE(ec) << dlock_last_error();
    if (has(DLOCK_CAP_FENCING)) {
        EXPECT_GT(lease.fencing_token(), std::stoull(line.substr(5)));
    }
}

// ---- FENCING tier ------------------------------------------------------------------------------

TEST_P(Conformance, FencingTokensStrictlyIncreaseAcrossHolders) {
    if (!has(DLOCK_CAP_FENCING)) GTEST_SKIP() << "backend has no FENCING capability";
    auto other = open();
    uint64_t last = 0;
    for (int i = 0; i < 10; ++i) {
        auto lease = (i % 2 ? other : client_).acquire(name("x"), try_once);
        EXPECT_GT(lease.fencing_token(), last);
        last = lease.fencing_token();
    }
}

// ---- TTL tier ----------------------------------------------------------------------------------

TEST_P(Conformance, UnrenewedLeaseExpiresAndIsReportedLost) {
    if (!has(DLOCK_CAP_TTL)) GTEST_SKIP() << "backend has no TTL capability";
    auto lease = client_.acquire(name("x"), dlock::acquire_options().with_wait(0ms).with_ttl(500ms).with_renew(false));
    std::atomic<int> lost{0};
    lease.on_lost([&] { ++lost; });
    auto other = open();
    auto next = other.acquire(name("x"), dlock::acquire_options().with_wait(5s));
    EXPECT_TRUE(next);
    EXPECT_GE(clock_type::now(), lease.valid_until()) << "acquired before the first lease's validity ended";
    for (int i = 0; i < 100 && !lost; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(lost.load(), 1);
    // docs/design/faults.md §4: the stale holder's release reports ALREADY_LOST and leaves the new holder alone.
    EXPECT_EQ(lease.release(), dlock::release_outcome::already_lost);
    EXPECT_TRUE(open().inspect(name("x")).held);
}

TEST_P(Conformance, RenewedLeaseOutlivesItsTtl) {
    if (!has(DLOCK_CAP_TTL)) GTEST_SKIP() << "backend has no TTL capability";
    auto lease = client_.acquire(name("x"), dlock::acquire_options().with_wait(0ms).with_ttl(400ms));
    std::this_thread::sleep_for(1500ms);
    EXPECT_EQ(lease.state(), dlock::lease_state::held);
    std::error_code ec;
    open().acquire(name("x"), try_once, ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
}

// Cancelling one wait: the waiter returns CANCELLED promptly, the holder keeps its lock, another
// wait on the same client goes on, and nothing of the cancelled wait is left on the server: once
// the holder releases, a third client's single try gets the lock.
TEST_P(Conformance, CancellingOneWaitLeavesNothingBehind) {
    auto holder = client_.acquire(name("x"), try_once);
    auto held_too = client_.acquire(name("y"), try_once);
    auto waiters = open();  // both waits below run on this one client
    dlock::cancellation cancel;
    std::error_code cancelled_ec, other_ec;
    std::atomic<bool> cancelled_done{false}, other_done{false};
    dlock::lease cancelled_lease, other_lease;
    std::thread cancelled_waiter([&] {
        cancelled_lease = waiters.acquire(name("x"), dlock::acquire_options().with_wait(30s).with_cancel(cancel), cancelled_ec);
        cancelled_done = true;
    });
    std::thread other_waiter([&] {
        other_lease = waiters.acquire(name("y"), dlock::acquire_options().with_wait(30s), other_ec);
        other_done = true;
    });
    std::this_thread::sleep_for(400ms);
    EXPECT_FALSE(cancelled_done.load());
    const auto start = clock_type::now();
    cancel.cancel();
    cancelled_waiter.join();
    const auto cancel_took = clock_type::now() - start;
    RecordProperty("cancel_ms", int(std::chrono::duration_cast<std::chrono::milliseconds>(cancel_took).count()));
    EXPECT_LT(cancel_took, 2s);
    EXPECT_EQ(cancelled_ec, dlock::errc::cancelled) << cancelled_ec.message();
    EXPECT_FALSE(cancelled_lease);
    EXPECT_TRUE(cancel.cancelled());

    // The other wait on the same client was not cancelled, and the holder still holds.
    std::this_thread::sleep_for(300ms);
    EXPECT_FALSE(other_done.load());
    EXPECT_EQ(holder.state(), dlock::lease_state::held);
    EXPECT_TRUE(client_.inspect(name("x")).held);
    held_too.release();
    other_waiter.join();
    EXPECT_FALSE(other_ec) << other_ec.message();
    EXPECT_TRUE(other_lease);

    // Nothing left behind: after the release, a third client gets the lock on its first try.
    holder.release();
    auto third = open();
    std::error_code third_ec;
    auto taken = third.acquire(name("x"), try_once, third_ec);
    EXPECT_FALSE(third_ec) << third_ec.message();
    EXPECT_TRUE(taken);

    // A cancelled token stays cancelled: a later wait with it does not start, even on a free lock.
    std::error_code again_ec;
    auto again = waiters.acquire(name("free"), dlock::acquire_options().with_wait(30s).with_cancel(cancel), again_ec);
    EXPECT_EQ(again_ec, dlock::errc::cancelled);
    EXPECT_FALSE(again);
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::ValuesIn(dlock::conformance::backend_cases()),
                         [](const ::testing::TestParamInfo<backend_case>& info) { return info.param.label; });

}  // namespace
