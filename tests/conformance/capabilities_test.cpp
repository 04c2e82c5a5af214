// The capability tiers the conformance suite did not yet assert: FAIR, PUSH_WAIT and QUORUM. Each
// test runs on every backend and skips unless the backend's client reports the capability, so a
// backend is held to exactly what it claims:
//   FAIR      — waiters that arrive in a known order acquire in that order;
//   PUSH_WAIT — a waiter on a held lock costs the servers nothing while it waits (no polling);
//   QUORUM    — the target has enough servers to lose a minority, and with a minority killed,
//               acquire, renew and release still work.
#include "backends.hpp"
#include "support.hpp"

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef DLOCK_WITH_LAB
#include "dlock/lab/gtest.hpp"
#include "dlock/lab/operation_counts.hpp"
#endif

using namespace std::chrono_literals;
using dlock::conformance::backend_case;

namespace dlock::conformance {
void PrintTo(const backend_case& c, std::ostream* os);  // defined in conformance_test.cpp
}  // namespace dlock::conformance

namespace {

using clock_type = std::chrono::steady_clock;

const dlock::acquire_options try_once = dlock::acquire_options().with_wait(0ms);

std::string capability_names(uint64_t caps) {
    static const std::pair<uint64_t, const char*> names[] = {
        {DLOCK_CAP_FENCING, "FENCING"}, {DLOCK_CAP_FAIR, "FAIR"},     {DLOCK_CAP_PUSH_WAIT, "PUSH_WAIT"},
        {DLOCK_CAP_TTL, "TTL"},         {DLOCK_CAP_SESSION_BOUND, "SESSION_BOUND"}, {DLOCK_CAP_QUORUM, "QUORUM"},
        {DLOCK_CAP_REENTRANT, "REENTRANT"}, {DLOCK_CAP_SEMAPHORE, "SEMAPHORE"}, {DLOCK_CAP_SHARED, "SHARED"},
        {DLOCK_CAP_LIST, "LIST"},           {DLOCK_CAP_BREAK, "BREAK"}};
    std::string out;
    for (const auto& [bit, name] : names)
        if (caps & bit) out += (out.empty() ? "" : " ") + std::string(name);
    return out;
}

// Context switches of one thread of this process: a thread asleep in the kernel makes none, a
// thread that polls makes one per sleep.
int64_t context_switches(pid_t tid) {
    std::ifstream status("/proc/self/task/" + std::to_string(tid) + "/status");
    int64_t total = 0;
    for (std::string line; std::getline(status, line);)
        if (line.rfind("voluntary_ctxt_switches:", 0) == 0 || line.rfind("nonvoluntary_ctxt_switches:", 0) == 0)
            total += std::stoll(line.substr(line.find(':') + 1));
    return total;
}

#ifdef DLOCK_WITH_LAB
dlock::lab::backend lab_backend_of(const backend_case& c) { return *dlock::lab::parse_backend(c.servers.at(0)); }
#endif

class Capabilities : public ::testing::TestWithParam<backend_case> {
protected:
    void SetUp() override {
        DLOCK_CONFORMANCE_REQUIRE_SERVERS(GetParam());
        // One scratch directory and config per backend for the whole run.
        static std::map<std::string, std::pair<std::unique_ptr<dlock::test::scratch_dir>, std::string>> setups;
        auto& setup = setups[GetParam().label];
        if (!setup.first) {
            setup.first = std::make_unique<dlock::test::scratch_dir>("dlock-capabilities-" + GetParam().label);
            setup.second = GetParam().make_config(setup.first->path());
        }
        config_ = setup.second;
        client_ = dlock::client::open(config_);
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        name_ = std::string("capabilities/") + info->name() + "/x";
    }

    dlock::client open() { return dlock::client::open(config_); }
    bool has(uint64_t cap) const { return client_.has(cap); }
    const std::string& label() const { return GetParam().label; }

    std::string config_, name_;
    dlock::client client_;
};

// The claims as the backend's client reports them, printed for the record; a QUORUM claim needs at
// least three servers (a quorum of N/2+1 outlives the loss of one only from N = 3).
TEST_P(Capabilities, ClaimsOnlyWhatItsDeploymentAllows) {
    std::cout << "[" << label() << "] capabilities: " << capability_names(client_.capabilities()) << "\n";
    if (!has(DLOCK_CAP_QUORUM)) return;
#ifdef DLOCK_WITH_LAB
    ASSERT_FALSE(GetParam().servers.empty()) << "QUORUM claimed by a backend without servers";
    const auto servers = dlock::lab::lab_environment::instance().access(lab_backend_of(GetParam())).endpoints.size();
    EXPECT_GE(servers, 3u) << "claims QUORUM with " << servers << " server(s): losing any one of them stops it";
#else
    FAIL() << "QUORUM claimed by a backend without servers";
#endif
}

// ---- FAIR ----------------------------------------------------------------------------------------

// Waiters, each with its own client, arrive one after another while the lock is held; each is given
// time to be queued before the next arrives: a generous multiple of what one try-once attempt (the
// same requests an arrival sends) takes here, so the margin grows with the machine's slowness.
TEST_P(Capabilities, FairWaitersAcquireInArrivalOrder) {
    if (!has(DLOCK_CAP_FAIR)) GTEST_SKIP() << "backend has no FAIR capability";
    constexpr int waiters = 4;
    auto holder = client_.acquire(name_, try_once);
    std::vector<dlock::client> clients;
    for (int i = 0; i < waiters; ++i) clients.push_back(open());

    std::error_code ec;
    const auto probe_start = clock_type::now();
    clients[0].acquire(name_, try_once, ec);
    ASSERT_EQ(ec, dlock::errc::timeout) << dlock_last_error();
    const auto attempt = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - probe_start);
    const auto margin = std::max<std::chrono::milliseconds>(300ms, attempt * 20);

    std::mutex mutex;
    std::vector<int> order;
    std::vector<std::string> failures;
    std::vector<std::thread> threads;
    for (int i = 0; i < waiters; ++i) {
        threads.emplace_back([&, i] {
            std::error_code wait_ec;
            auto lease = clients[i].acquire(name_, dlock::acquire_options().with_wait(60s).with_fair(true), wait_ec);
            {
                std::lock_guard<std::mutex> lock(mutex);
                if (wait_ec) failures.push_back("waiter " + std::to_string(i) + ": " + wait_ec.message() + ": " + dlock_last_error());
                else order.push_back(i);
            }
            std::this_thread::sleep_for(10ms);
        });
        std::this_thread::sleep_for(margin);
    }
    {
        std::lock_guard<std::mutex> lock(mutex);
        EXPECT_TRUE(order.empty() && failures.empty()) << "a waiter returned while the lock was held";
    }
    holder.release();
    for (auto& t : threads) t.join();
    std::cout << "[" << label() << "] " << waiters << " waiters " << margin.count() << " ms apart (one attempt took "
              << attempt.count() << " ms)\n";
    EXPECT_TRUE(failures.empty()) << failures.front();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3})) << "waiters acquired out of their arrival order";
}

// ---- PUSH_WAIT -----------------------------------------------------------------------------------

// The server operations a waiter costs while it waits on a held lock, after its arrival: none but
// what passes anyway. The same clients are counted for an equal window with nobody waiting (session
// pings, keepalives, the holder's renewals — the holder's ttl is long, so it renews rarely) and the
// waiting window may exceed that by a few operations of timing jitter only. A waiter polling more
// often than every ~300 ms exceeds it. `file` has no server: the waiting thread's context switches
// are counted instead (a thread asleep in the kernel makes none).
TEST_P(Capabilities, PushWaiterCostsTheServerNothingWhileItWaits) {
    if (!has(DLOCK_CAP_PUSH_WAIT)) GTEST_SKIP() << "backend has no PUSH_WAIT capability";
    constexpr auto window = 2s;
    constexpr int64_t jitter_allowance = 6;
    auto holder = client_.acquire(name_, dlock::acquire_options().with_wait(0ms).with_ttl(120s));
    auto waiter_client = open();
    std::error_code ec;
    waiter_client.acquire(name_, try_once, ec);  // its connections and sessions exist from here on
    ASSERT_EQ(ec, dlock::errc::timeout) << dlock_last_error();

    std::atomic<pid_t> waiter_tid{0};
    std::function<int64_t()> count;
    std::string source;
#ifdef DLOCK_WITH_LAB
    std::unique_ptr<dlock::lab::statement_sampler> sampler;
#endif
    if (GetParam().servers.empty()) {
        source = "context switches of the waiting thread";
        count = [&] { return waiter_tid.load() ? context_switches(waiter_tid.load()) : 0; };
    } else {
#ifdef DLOCK_WITH_LAB
        const auto access = dlock::lab::lab_environment::instance().access(lab_backend_of(GetParam()));
        if (access.kind == dlock::lab::backend::sql) {
            source = "statements begun (pg_stat_activity sampled every 5 ms)";
            sampler = std::make_unique<dlock::lab::statement_sampler>(access.dsn);
            count = [&] {
                EXPECT_EQ(sampler->error(), "");
                return sampler->count();
            };
        } else {
            source = access.kind == dlock::lab::backend::redis || access.kind == dlock::lab::backend::redlock
                         ? "INFO commandstats calls"
                     : access.kind == dlock::lab::backend::etcd || access.kind == dlock::lab::backend::etcd_cluster
                         ? "etcd unary RPCs + stream messages received"
                     : access.kind == dlock::lab::backend::mariadb
                         ? "MariaDB Questions (statements run)"
                         : "mntr zk_packets_received";
            count = [access] { return dlock::lab::server_operations(access); };
        }
#endif
    }

    int64_t idle = 0;
    if (!GetParam().servers.empty()) {  // the file backend's waiting thread does not exist yet
        const int64_t before = count();
        std::this_thread::sleep_for(window);
        idle = count() - before;
    }

    std::atomic<bool> acquired{false};
    clock_type::time_point got;
    const int64_t before_arrival = count();
    std::thread waiter([&] {
        waiter_tid = static_cast<pid_t>(syscall(SYS_gettid));
        auto lease = waiter_client.acquire(name_, dlock::acquire_options().with_wait(60s), ec);
        got = clock_type::now();
        acquired = true;
    });
    std::this_thread::sleep_for(1s);  // its arrival: first attempt, subscription or watch
    const int64_t before = count();
    // The count sees this client's requests: its arrival sent some (no server for `file`).
    if (!GetParam().servers.empty()) {
        EXPECT_GT(before - before_arrival, 0) << "the count missed the waiter's arrival";
    }
    std::this_thread::sleep_for(window);
    const int64_t waiting = count() - before;
    EXPECT_FALSE(acquired.load()) << "acquired a held lock";
    const auto released = clock_type::now();
    holder.release();
    waiter.join();
    EXPECT_FALSE(ec) << dlock_last_error();
    EXPECT_LT(got - released, 5s) << "the waiter must be woken by the release";
    std::cout << "[" << label() << "] " << source << " in " << std::chrono::milliseconds(window).count()
              << " ms: " << waiting << " while a waiter waits, " << idle << " with nobody waiting; " << before - before_arrival
              << " for its arrival\n";
    EXPECT_LE(waiting - idle, jitter_allowance) << "the waiter polls (" << source << ")";
}

#ifdef DLOCK_WITH_LAB
// The server's own count of the operations this test's clients cause: commands, requests and
// messages (server_operations), or PostgreSQL statements begun (statement_sampler). `count()`
// reads the running total.
struct server_counter {
    std::function<int64_t()> count;
    std::string source;
    std::unique_ptr<dlock::lab::statement_sampler> sampler;

    explicit server_counter(const dlock::lab::backend_access& access) {
        if (access.kind == dlock::lab::backend::sql) {
            source = "statements begun (pg_stat_activity sampled every 5 ms)";
            sampler = std::make_unique<dlock::lab::statement_sampler>(access.dsn);
            count = [this] {
                EXPECT_EQ(sampler->error(), "");
                return sampler->count();
            };
        } else {
            source = "server operations";
            count = [access] { return dlock::lab::server_operations(access); };
        }
    }
};
#endif

// `waiters` clients wait on one held lock; then the holder releases, and each waiter, once it holds
// the lock, releases it after `hold` — `waiters` handoffs in a row. Returns the server operations
// counted from the first release until every waiter released, per handoff.
double operations_per_handoff(const std::string& config, const std::string& name, int waiters,
                              const std::function<int64_t()>& count) {
    constexpr auto hold = 2ms;
    auto holder_client = dlock::client::open(config);
    auto holder = holder_client.acquire(name, dlock::acquire_options().with_wait(0ms).with_ttl(60s));
    std::vector<dlock::client> clients;
    for (int i = 0; i < waiters; ++i) clients.push_back(dlock::client::open(config));
    std::atomic<int> failures{0};
    std::atomic<int> done{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < waiters; ++i) {
        threads.emplace_back([&, i] {
            std::error_code ec;
            auto lease = clients[i].acquire(name, dlock::acquire_options().with_wait(60s).with_ttl(60s), ec);
            if (ec) {
                ADD_FAILURE() << "waiter " << i << ": " << ec.message() << ": " << dlock_last_error();
                ++failures;
            } else {
                std::this_thread::sleep_for(hold);
                lease.release();
            }
            ++done;
        });
    }
    // Every waiter has arrived and settled into its wait (first attempt, subscription or watch).
    std::this_thread::sleep_for(1s + 100ms * waiters);
    EXPECT_EQ(done.load(), 0) << "a waiter returned while the lock was held";
    const int64_t before = count();
    holder.release();
    for (auto& t : threads) t.join();
    const int64_t after = count();
    EXPECT_EQ(failures.load(), 0);
    return double(after - before) / waiters;
}

// A release wakes the next waiter only: the server work per handoff does not grow with the number
// of waiters (no thundering herd). Measured with few and with many waiters queued on one name; the
// many-waiter figure may exceed the few-waiter one only by a generous margin (a herd makes it grow
// about in proportion to the waiters: 4x here).
TEST_P(Capabilities, PushWaitHandoffCostDoesNotGrowWithWaiters) {
    if (!has(DLOCK_CAP_PUSH_WAIT)) GTEST_SKIP() << "backend has no PUSH_WAIT capability";
    if (GetParam().servers.empty()) GTEST_SKIP() << "no server to count operations on";
#ifdef DLOCK_WITH_LAB
    constexpr int few = 4, many = 16;
    server_counter counter(dlock::lab::lab_environment::instance().access(lab_backend_of(GetParam())));
    const double per_handoff_few = operations_per_handoff(config_, name_ + "-few", few, counter.count);
    const double per_handoff_many = operations_per_handoff(config_, name_ + "-many", many, counter.count);
    std::cout << "[" << label() << "] " << counter.source << " per handoff: " << per_handoff_few << " with " << few
              << " waiters, " << per_handoff_many << " with " << many << "\n";
    EXPECT_LE(per_handoff_many, 1.5 * per_handoff_few + 3)
        << "the server work per handoff grows with the waiters: a release wakes more than the next waiter";
#endif
}

// ---- QUORUM --------------------------------------------------------------------------------------

#ifdef DLOCK_WITH_LAB
// Kills (SIGKILL) a minority of a lab backend's servers — the leader among them where there is one
// — and on destruction restarts them on their data and waits until every server serves again, so the
// tests after it find the backend whole.
class downed_minority {
public:
    downed_minority(dlock::lab::lab& lab, dlock::lab::backend which) : lab_(lab), which_(which) {
        using dlock::lab::backend;
        if (which == backend::redlock) {
            auto& nodes = lab.redlock();
            for (size_t i = 0; i < (nodes.size() - 1) / 2; ++i) down_.push_back(&nodes.node(i));
        } else if (which == backend::zookeeper_ensemble) {
            down_.push_back(&lab.zookeeper_ensemble().leader());
        } else if (which == backend::etcd_cluster) {
            down_.push_back(&lab.etcd_cluster().leader());
        }
        for (auto* s : down_) s->kill();
    }
    ~downed_minority() {
        try {
            for (auto* s : down_) s->restart(dlock::lab::data_policy::keep, 60s);
            if (which_ == dlock::lab::backend::zookeeper_ensemble) lab_.zookeeper_ensemble().wait_for_leader(60s);
            if (which_ == dlock::lab::backend::etcd_cluster) lab_.etcd_cluster().wait_for_leader(60s);
        } catch (const std::exception& e) {
            ADD_FAILURE() << "the killed servers did not come back: " << e.what();
        }
    }
    const std::vector<dlock::lab::server*>& servers() const { return down_; }

private:
    dlock::lab::lab& lab_;
    dlock::lab::backend which_;
    std::vector<dlock::lab::server*> down_;
};
#endif

// With a minority of the target's servers killed (the leader among them where there is one), a
// client opened then acquires, renews and releases, and a lease taken before the fault is still
// held, renews and releases; the locks stay exclusive meanwhile.
TEST_P(Capabilities, QuorumTargetWorksWithAMinorityDown) {
    if (!has(DLOCK_CAP_QUORUM)) GTEST_SKIP() << "backend has no QUORUM capability";
#ifdef DLOCK_WITH_LAB
    auto* lab = dlock::lab::lab_environment::instance().owned_lab();
    if (!lab) GTEST_SKIP() << "attached to a `dlock-lab up` whose servers this process cannot kill";
    const auto which = lab_backend_of(GetParam());
    const auto servers = lab->access(which).endpoints.size();
    ASSERT_GE(servers, 3u) << "claims QUORUM with " << servers << " server(s): no minority can be lost";
    // A lease taken before the fault must outlive it too.
    auto before = client_.acquire(name_ + "-before", dlock::acquire_options().with_wait(0ms).with_ttl(10s));
    const auto start = clock_type::now();
    {
        downed_minority fault(*lab, which);
        ASSERT_FALSE(fault.servers().empty());
        if (which == dlock::lab::backend::zookeeper_ensemble) lab->zookeeper_ensemble().wait_for_leader(60s);
        if (which == dlock::lab::backend::etcd_cluster) lab->etcd_cluster().wait_for_leader(60s);
        std::string down;
        for (auto* s : fault.servers()) {
            EXPECT_FALSE(s->running() || s->probe()) << s->name() << " still serves";
            down += " " + s->name();
        }
        std::cout << "[" << label() << "] killed" << down << " of " << servers << " servers\n";

        auto client = open();
        std::error_code ec;
        auto lease = client.acquire(name_, dlock::acquire_options().with_wait(30s).with_ttl(10s), ec);
        ASSERT_FALSE(ec) << "acquire with a minority down: " << dlock_last_error();
        lease.renew(ec);
        EXPECT_FALSE(ec) << "renew with a minority down: " << dlock_last_error();
        EXPECT_EQ(lease.state(), dlock::lease_state::held);
        auto other = open();
        other.acquire(name_, try_once, ec);
        EXPECT_EQ(ec, dlock::errc::timeout) << "the lock must stay exclusive: " << dlock_last_error();
        EXPECT_EQ(lease.release(ec), dlock::release_outcome::released) << dlock_last_error();
        auto next = other.acquire(name_, dlock::acquire_options().with_wait(10s), ec);
        EXPECT_FALSE(ec) << "acquire after the release: " << dlock_last_error();

        // Its client may have been connected to a server that went down: on a session-bound
        // backend the lease is then SUSPECT until the session moves to a member that serves
        // (ZooKeeper: within the session timeout), and must be HELD again, never LOST.
        EXPECT_TRUE(dlock::test::eventually([&] { return before.state() == dlock::lease_state::held; }, 15s, 20ms))
            << "the lease taken before the fault is not HELD again (state " << int(before.state()) << ")";
        before.renew(ec);
        EXPECT_FALSE(ec) << "renew of a lease taken before the fault: " << dlock_last_error();
        EXPECT_EQ(before.state(), dlock::lease_state::held);
        other.acquire(name_ + "-before", try_once, ec);
        EXPECT_EQ(ec, dlock::errc::timeout) << "the lease taken before the fault must still exclude: " << dlock_last_error();
        EXPECT_EQ(before.release(ec), dlock::release_outcome::released) << dlock_last_error();
    }
    std::cout << "[" << label() << "] minority down and back in "
              << std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - start).count() << " ms\n";
#endif
}

INSTANTIATE_TEST_SUITE_P(Backends, Capabilities, ::testing::ValuesIn(dlock::conformance::backend_cases()),
                         [](const ::testing::TestParamInfo<backend_case>& info) { return info.param.label; });

}  // namespace
