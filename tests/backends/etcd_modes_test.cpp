// The `etcd` backend's semaphores, shared locks, holders, list and break (plugin ABI version 2), on
// the lab's real etcd: N permits at once and the N+1st waits; a killed holder's permit returns
// after about its ttl; a mismatched limit is refused, and forgotten once the semaphore is idle;
// shared holders together, exclusive and shared exclude each other, a waiting writer is not
// starved; holders and list report kinds, owners and tokens (names with `/` recovered); break
// fences and the broken holder becomes LOST; a failed acquire leaves no key; and `etcdctl lock`
// (etcd's own concurrency mutex) and dlock exclude each other on one name.
#include "backend_test.hpp"
#include "support.hpp"

#include "dlock/lab/operation_counts.hpp"
#include "dlock/lab/gtest.hpp"
#include "dlock/lab/proxy.hpp"
#include "dlock/lab/secured.hpp"

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <sstream>
#include <chrono>
#include <functional>
#include <future>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using dlock::lab::backend;
using dlock::test::child_process;
using dlock::test::expect_line;
using clock_type = std::chrono::steady_clock;

namespace {

using dlock::test::eventually;

// Runs etcdctl (v3 API) against `endpoint` and returns its stdout lines; fails the test on a
// non-zero exit.
std::vector<std::string> etcdctl(const std::string& endpoint, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"etcdctl", "--endpoints=" + endpoint, "--dial-timeout=2s", "--command-timeout=5s"};
    argv.insert(argv.end(), args.begin(), args.end());
    child_process p(argv, true, {"ETCDCTL_API=3"});
    std::vector<std::string> lines;
    for (std::string line; p.read_line(line, 10000);) lines.push_back(line);
    EXPECT_EQ(p.wait(), 0) << "etcdctl " << args.front();
    return lines;
}

dlock::acquire_options permits(uint32_t n, std::chrono::milliseconds wait = 0ms) {
    return dlock::acquire_options().with_permits(n).with_wait(wait);
}

dlock::acquire_options shared(std::chrono::milliseconds wait = 0ms) { return dlock::acquire_options().with_shared(true).with_wait(wait); }

dlock::acquire_options exclusive(std::chrono::milliseconds wait = 0ms) { return dlock::acquire_options().with_wait(wait); }

std::string fmt_count(size_t broken) { return std::to_string(broken) + " broken"; }

class EtcdModes : public dlock::test::lab_backend_test {
protected:
    EtcdModes() : lab_backend_test({backend::etcd}) {}

    std::string endpoint() { return lab_->etcd().client_endpoint().to_string(); }

    // Every key under `prefix` on the server.
    std::vector<std::string> keys_under(const std::string& prefix) {
        std::vector<std::string> keys;
        for (const auto& k : etcdctl(endpoint(), {"get", "--prefix", prefix, "--keys-only"}))
            if (!k.empty()) keys.push_back(k);
        return keys;
    }

    dlock::client open() { return dlock::client::open(config(backend::etcd)); }

    // A client reaching the server through `proxy`, with extra option lines.
    static dlock::client open_through(const dlock::lab::tcp_proxy& proxy, const std::vector<std::string>& extra) {
        std::string yaml = "backend: etcd\noptions:\n  endpoints: [\"" + proxy.listen_endpoint().to_string() + "\"]\n";
        for (const auto& line : extra) yaml += "  " + line + "\n";
        return dlock::client::from_yaml(yaml);
    }
};

// ---- semaphores --------------------------------------------------------------------------------

TEST_F(EtcdModes, SemaphoreNPermitsHeldAtOnceAndTheNextWaitsForARelease) {
    auto c = open();
    ASSERT_TRUE(c.capabilities() & DLOCK_CAP_SEMAPHORE);
    std::vector<dlock::lease> held;
    std::set<uint64_t> tokens;
    for (int i = 0; i < 3; ++i) {
        held.push_back(c.acquire("v2/stalls", permits(3)));
        tokens.insert(held.back().fencing_token());
    }
    EXPECT_EQ(tokens.size(), 3u) << "each permit has its own fencing token";
    std::error_code ec;
    auto fourth = c.acquire("v2/stalls", permits(3), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "the 4th permit of 3 is not free";
    EXPECT_FALSE(fourth);
    // A lock of the same name is another object.
    EXPECT_TRUE(c.acquire("v2/stalls", exclusive()));

    auto waiter = std::async(std::launch::async, [&] { return c.acquire("v2/stalls", permits(3, 20s)); });
    EXPECT_EQ(waiter.wait_for(500ms), std::future_status::timeout) << "no permit is free yet";
    const auto released = clock_type::now();
    held[1].release();
    auto next = waiter.get();
    const auto handoff = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - released);
    std::cout << "[etcd] permit handed over " << handoff.count() << " ms after a release\n";
    EXPECT_GT(next.fencing_token(), *tokens.rbegin());
    // Pushed by a watch, not by a poll or etcd's 100 ms catch-up loop; generous under load.
    EXPECT_LT(handoff, 2000ms);
}

// Holders leave in any order. N = 2, holders A and B, waiters C then W: A goes, C holds; C goes,
// and W must hold though B, the key two places ahead of it, is still there.
TEST_F(EtcdModes, SemaphoreWaiterIsAdmittedWhateverOrderHoldersLeaveIn) {
    auto c = open();
    auto a = c.acquire("v2/order", permits(2));
    auto b = c.acquire("v2/order", permits(2));
    std::promise<dlock::lease> c_held;
    std::promise<void> c_release;
    std::thread third([&] {
        auto lease = c.acquire("v2/order", permits(2, 20s));
        c_held.set_value(std::move(lease));
        c_release.get_future().wait();
    });
    std::this_thread::sleep_for(200ms);  // C queues before W
    auto w = std::async(std::launch::async, [&] { return c.acquire("v2/order", permits(2, 20s)); });
    EXPECT_EQ(w.wait_for(300ms), std::future_status::timeout);
    a.release();
    auto c_lease = c_held.get_future().get();
    EXPECT_EQ(w.wait_for(300ms), std::future_status::timeout) << "B and C hold";
    c_lease.release();
    c_release.set_value();
    third.join();
    ASSERT_EQ(w.wait_for(5s), std::future_status::ready) << "W waits though only B holds";
    EXPECT_GT(w.get().fencing_token(), c_lease.fencing_token());
}

// A release wakes the first waiter only, and each admission the next one: with 16 waiters a
// release costs a handful of Txns on the server, not one per waiter.
TEST_F(EtcdModes, SemaphoreReleaseWakesOneWaiterNotAll) {
    auto c = open();
    auto a = c.acquire("v2/herd", permits(2));
    auto b = c.acquire("v2/herd", permits(2));
    constexpr int waiters = 16;
    std::atomic<int> admitted{0};
    std::promise<void> go;
    std::shared_future<void> released_all = go.get_future().share();
    std::vector<std::thread> threads;
    for (int i = 0; i < waiters; ++i)
        threads.emplace_back([&, released_all] {
            auto lease = c.acquire("v2/herd", permits(2, 60s));
            ++admitted;
            released_all.wait();  // hold until the measurement is over
        });
    ASSERT_TRUE(eventually([&] { return keys_under("dlock/%semaphores/v2%2Fherd/").size() == waiters + 2; }, 10s));
    std::this_thread::sleep_for(500ms);  // every waiter's watch is in place
    const auto member = lab_->etcd().client_endpoint();
    const std::vector<std::string> txn = {"grpc_method=\"Txn\""};
    const double before = dlock::lab::prometheus_metric_sum(member, "grpc_server_handled_total", txn);
    a.release();
    ASSERT_TRUE(eventually([&] { return admitted.load() >= 1; }, 5s));
    std::this_thread::sleep_for(500ms);  // any other waiter woken would have read by now
    const double spent = dlock::lab::prometheus_metric_sum(member, "grpc_server_handled_total", txn) - before;
    std::cout << "[etcd] one permit release with " << waiters << " waiters: " << spent << " Txn on the server\n";
    // The release, the first waiter's read and its touch, the next waiter's read after that touch:
    // about 4, against one read per waiter (16) if all were woken.
    EXPECT_EQ(admitted.load(), 1);
    EXPECT_LE(spent, 9) << "a release woke more than the waiters it can admit";
    go.set_value();
    b.release();
    for (auto& t : threads) t.join();
    EXPECT_EQ(admitted.load(), waiters);
}

// Round trips of an uncontended cycle (acquire + release), counted on the server: an exclusive
// lock's stays at one Txn each way with the shared layout in place; a shared hold's is the same;
// a permit's too, plus one Txn when its release leaves the semaphore idle (the limit forgotten).
TEST_F(EtcdModes, UncontendedCyclesCostOneTxnEachWay) {
    auto c = open();
    { auto warm = c.acquire("v2/cycle-warm", exclusive()); }  // the session lease is granted once
    const auto member = lab_->etcd().client_endpoint();
    auto txns = [&] { return dlock::lab::prometheus_metric_sum(member, "grpc_server_handled_total", {"grpc_method=\"Txn\""}); };
    auto cycle = [&](const std::string& name, const dlock::acquire_options& options) {
        const double before = txns();
        c.acquire(name, options).release();
        return txns() - before;
    };
    EXPECT_EQ(cycle("v2/cycle-x", exclusive()), 2);
    EXPECT_EQ(cycle("v2/cycle-s", shared()), 2);
    auto other = c.acquire("v2/cycle-p", permits(3));
    EXPECT_EQ(cycle("v2/cycle-p", permits(3)), 2) << "not idle after the release: the limit stays";
    other.release();
    EXPECT_EQ(cycle("v2/cycle-p", permits(3)), 3) << "idle after the release: one Txn forgets the limit";
}

TEST_F(EtcdModes, SemaphoreKilledHoldersPermitReturnsAfterAboutTheTtl) {
    child_process holder({DLOCK_CONFORMANCE_WORKER, "hold", config(backend::etcd), "v2/killed", "2000", "permits:1"}, true);
    const std::string line = expect_line(holder);
    ASSERT_EQ(line.rfind("held ", 0), 0u) << line;
    auto c = open();
    std::error_code ec;
    c.acquire("v2/killed", permits(1), ec);
    ASSERT_EQ(ec, dlock::errc::timeout);
    const auto killed = clock_type::now();
    holder.kill(SIGKILL);
    holder.wait();
    auto lease = c.acquire("v2/killed", permits(1, 15s));
    const auto recovery = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - killed);
    std::cout << "[etcd] permit back " << recovery.count() << " ms after the holder's SIGKILL (ttl 2000 ms)\n";
    EXPECT_GE(recovery, 1000ms) << "the permit was free before the dead holder's lease expired";
    EXPECT_LE(recovery, 2000ms + 1500ms + 2000ms);  // ttl, etcd's 500 ms expiry sweep, load
    EXPECT_GT(lease.fencing_token(), std::stoull(line.substr(5)));
}

TEST_F(EtcdModes, SemaphoreWithAnotherLimitIsRefusedAndTheLimitIsForgottenWhenIdle) {
    auto c = open();
    auto first = c.acquire("v2/limit", permits(3));
    std::error_code ec;
    auto other = c.acquire("v2/limit", permits(5), ec);
    const std::string message = dlock_last_error();
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    EXPECT_FALSE(other);
    for (const char* part : {"v2/limit", "3", "5"}) EXPECT_NE(message.find(part), std::string::npos) << message;
    EXPECT_EQ(keys_under("dlock/%semaphores/v2%2Flimit/").size(), 1u) << "the refused acquire left a key";
    first.release();
    EXPECT_TRUE(keys_under("dlock/%semaphores/v2%2Flimit").empty()) << "the idle semaphore's limit is forgotten";
    auto now_five = c.acquire("v2/limit", permits(5), ec);
    EXPECT_FALSE(ec) << dlock_last_error();
}

// A stored limit binds only while a permit key (a holder's or a waiter's) is left. The holder of
// semaphore N = 1 dies (SIGKILL, so no release forgets the limit): while it lives N = 2 is refused
// and nothing is put; once its key went with its lease, N = 2 is accepted and replaces the limit,
// and from then on N = 1 is refused and at most two hold.
TEST_F(EtcdModes, StaleSemaphoreLimitGoesWithTheLastKeyAndNeverAdmitsNPlusOne) {
    const std::string dir = "dlock/%semaphores/v2%2Fstale/", limit_key = "dlock/%semaphores/v2%2Fstale";
    child_process holder({DLOCK_CONFORMANCE_WORKER, "hold", config(backend::etcd), "v2/stale", "2000", "permits:1"}, true);
    const std::string line = expect_line(holder);
    ASSERT_EQ(line.rfind("held ", 0), 0u) << line;
    auto c = open();
    std::error_code ec;
    auto early = c.acquire("v2/stale", permits(2), ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument) << "N = 2 beside a live holder of N = 1: " << dlock_last_error();
    EXPECT_FALSE(early);
    EXPECT_EQ(keys_under(dir).size(), 1u) << "the refused acquire put nothing";
    holder.kill(SIGKILL);
    holder.wait();
    ASSERT_TRUE(eventually([&] { return keys_under(dir).empty(); }, 15s)) << "the dead holder's key goes with its lease";
    EXPECT_EQ(etcdctl(endpoint(), {"get", limit_key, "--print-value-only"}).at(0), "1") << "no release forgot the limit";

    auto first = c.acquire("v2/stale", permits(2), ec);
    ASSERT_FALSE(ec) << "nobody holds or waits: the stale limit must not refuse N = 2: " << dlock_last_error();
    EXPECT_EQ(etcdctl(endpoint(), {"get", limit_key, "--print-value-only"}).at(0), "2");
    auto old_n = c.acquire("v2/stale", permits(1), ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument) << "N = 1 beside a holder of N = 2: " << dlock_last_error();
    EXPECT_FALSE(old_n);
    auto second = c.acquire("v2/stale", permits(2));
    c.acquire("v2/stale", permits(2), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a third permit of two";
    EXPECT_EQ(keys_under(dir).size(), 2u);
}

// The limit key of a semaphore is deleted by hand (etcdctl) while a holder of N = 1 is there: the
// holder's N is no longer known, so no acquire may store its own N beside it. N = 2 is refused
// (BACKEND, saying the limit key is missing while a permit key is there, and what to do), puts
// nothing and stores no limit; once the holder released, N = 2 is accepted and stores its limit.
TEST_F(EtcdModes, SemaphoreWithItsLimitKeyDeletedBesideAHolderIsRefused) {
    const std::string dir = "dlock/%semaphores/v2%2Fno-limit/", limit_key = "dlock/%semaphores/v2%2Fno-limit";
    auto c = open();
    auto holder = c.acquire("v2/no-limit", permits(1));
    etcdctl(endpoint(), {"del", limit_key});
    ASSERT_TRUE(etcdctl(endpoint(), {"get", limit_key, "--print-value-only"}).empty());
    std::error_code ec;
    auto beside = c.acquire("v2/no-limit", permits(2), ec);
    const std::string message = dlock_last_error();
    EXPECT_FALSE(beside) << "a permit of N = 2 beside a holder whose N is unknown";
    EXPECT_EQ(ec, dlock::errc::backend) << message;
    for (const char* part : {"v2/no-limit", limit_key.c_str(), "missing", "break"}) EXPECT_NE(message.find(part), std::string::npos) << message;
    EXPECT_EQ(keys_under(dir).size(), 1u) << "the refused acquire put nothing";
    EXPECT_TRUE(etcdctl(endpoint(), {"get", limit_key, "--print-value-only"}).empty()) << "no limit stored beside the holder";
    c.acquire("v2/no-limit", permits(1, 300ms), ec);
    EXPECT_EQ(ec, dlock::errc::backend) << "the holder's own N is refused too (nothing tells it is the holder's): " << dlock_last_error();
    EXPECT_EQ(holder.state(), dlock::lease_state::held);
    holder.release();
    auto after = c.acquire("v2/no-limit", permits(2), ec);
    ASSERT_FALSE(ec) << "nobody holds or waits: N = 2 is accepted: " << dlock_last_error();
    EXPECT_EQ(etcdctl(endpoint(), {"get", limit_key, "--print-value-only"}).at(0), "2");
}

// A permit waiter admitted when its acquire's deadline is nearly over still wakes the waiter
// behind it. N = 2: H1 and H2 hold, W1 (through a proxy whose answers arrive 1 s late) is the first
// waiter, W2 waits behind W1 for W1's touch. H1 goes; W1 learns it 1 s later, reads the queue
// (answered 1 s later still) and is admitted 0.5 s before its deadline; its touch is held back by
// the proxy until that deadline passes, and dropped with the connection. H2 then goes: a permit is
// free, and W2 must get it promptly, not when W1 releases.
TEST_F(EtcdModes, PermitAdmittedAtItsDeadlineStillWakesTheNextWaiter) {
    auto c = open();
    auto h1 = c.acquire("v2/late", permits(2));
    auto h2 = c.acquire("v2/late", permits(2));
    dlock::lab::tcp_proxy proxy(lab_->etcd().client_endpoint());
    auto slow = open_through(proxy, {"session_ttl: 20s", "request_timeout: 5s", "dial_timeout: 5s"});
    slow.acquire("v2/late-warm-up", exclusive()).release();  // the session and its streams exist
    proxy.set_delay(0us, 1000us * 1000);
    const auto t0 = clock_type::now();
    auto w1 = std::async(std::launch::async, [&] {
        std::error_code ec;
        auto lease = slow.acquire("v2/late", permits(2, 8000ms), ec);
        return std::make_pair(std::move(lease), ec ? std::string(dlock_last_error()) : std::string());
    });
    std::this_thread::sleep_until(t0 + 2500ms);  // W1's key is put at once (only answers are late)
    auto w2 = std::async(std::launch::async, [&] { return c.acquire("v2/late", permits(2, 30s)); });
    std::this_thread::sleep_until(t0 + 5500ms);
    h1.release();  // W1: the event at +1 s, the read's answer at +2 s, its deadline at +2.5 s
    std::this_thread::sleep_until(t0 + 7000ms);
    proxy.blackhole(dlock::lab::direction::upstream);  // the read has gone up, the touch will not
    auto [w1_lease, w1_error] = w1.get();
    ASSERT_TRUE(w1_lease) << "W1 should be admitted before its deadline (timing off?): " << w1_error;
    std::cout << "[etcd] W1 admitted " << std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count()
              << " ms after its acquire began (deadline 8000 ms)\n";
    proxy.cut_all();  // the touch held back is dropped with the connection
    proxy.set_delay(0us);
    proxy.heal();
    EXPECT_EQ(w2.wait_for(0ms), std::future_status::timeout) << "H2 and W1 hold";
    const auto freed = clock_type::now();
    h2.release();
    const bool granted = w2.wait_for(1000ms) == std::future_status::ready;
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - freed);
    std::cout << "[etcd] W2 " << (granted ? "granted " : "still waiting after ") << waited.count() << " ms after a permit was freed\n";
    EXPECT_TRUE(granted) << "a permit is free and W2 stays parked behind W1's missing touch";
    w1_lease.release();
    auto w2_lease = w2.get();
    EXPECT_GT(w2_lease.fencing_token(), w1_lease.fencing_token());
}

// ---- shared locks ------------------------------------------------------------------------------

TEST_F(EtcdModes, SharedHoldersTogetherExclusiveExcludesThemAndTheyExcludeIt) {
    auto c = open();
    ASSERT_TRUE(c.capabilities() & DLOCK_CAP_SHARED);
    auto r1 = c.acquire("v2/rw", shared());
    auto r2 = c.acquire("v2/rw", shared());
    EXPECT_LT(r1.fencing_token(), r2.fencing_token());
    std::error_code ec;
    c.acquire("v2/rw", exclusive(), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "an exclusive acquire must not pass shared holders";
    r1.release();
    c.acquire("v2/rw", exclusive(), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "one shared holder is left";
    r2.release();
    auto w = c.acquire("v2/rw", exclusive());
    EXPECT_GT(w.fencing_token(), r2.fencing_token()) << "shared and exclusive holds share the token counter";
    c.acquire("v2/rw", shared(), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a shared acquire must not pass the exclusive holder";
    auto reader = std::async(std::launch::async, [&] { return c.acquire("v2/rw", shared(20s)); });
    EXPECT_EQ(reader.wait_for(300ms), std::future_status::timeout);
    w.release();
    EXPECT_GT(reader.get().fencing_token(), w.fencing_token());
}

// A SIGKILLed shared holder's hold goes with its session lease: an exclusive acquirer gets the
// lock after about the ttl, not before.
TEST_F(EtcdModes, SharedHolderKilledHoldReturnsAfterAboutTheTtl) {
    child_process holder({DLOCK_CONFORMANCE_WORKER, "hold", config(backend::etcd), "v2/killed-shared", "2000", "shared"}, true);
    const std::string line = expect_line(holder);
    ASSERT_EQ(line.rfind("held ", 0), 0u) << line;
    auto c = open();
    EXPECT_TRUE(c.acquire("v2/killed-shared", shared())) << "shared holders share";
    std::error_code ec;
    c.acquire("v2/killed-shared", exclusive(), ec);
    ASSERT_EQ(ec, dlock::errc::timeout);
    const auto killed = clock_type::now();
    holder.kill(SIGKILL);
    holder.wait();
    auto lease = c.acquire("v2/killed-shared", exclusive(15s));
    const auto recovery = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - killed);
    std::cout << "[etcd] exclusive lock " << recovery.count() << " ms after the shared holder's SIGKILL (ttl 2000 ms)\n";
    EXPECT_GE(recovery, 1000ms) << "the shared hold vanished before the dead holder's lease expired";
    EXPECT_LE(recovery, 2000ms + 1500ms + 2000ms);
    EXPECT_GT(lease.fencing_token(), std::stoull(line.substr(5)));
}

TEST_F(EtcdModes, WaitingWriterIsNotStarvedByLaterReaders) {
    auto c = open();
    auto r1 = c.acquire("v2/starve", shared());
    auto writer = std::async(std::launch::async, [&] { return c.acquire("v2/starve", exclusive(20s)); });
    EXPECT_EQ(writer.wait_for(300ms), std::future_status::timeout);
    std::error_code ec;
    auto late = c.acquire("v2/starve", shared(), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a shared acquire after a waiting writer must queue behind it";
    auto late_waiting = std::async(std::launch::async, [&] { return c.acquire("v2/starve", shared(20s)); });
    EXPECT_EQ(late_waiting.wait_for(300ms), std::future_status::timeout);
    r1.release();
    auto w = writer.get();
    EXPECT_EQ(late_waiting.wait_for(300ms), std::future_status::timeout) << "the writer holds: the late reader waits";
    w.release();
    auto late_holder = late_waiting.get();
    EXPECT_GT(late_holder.fencing_token(), 0u);
}

// ---- holders, list, break ----------------------------------------------------------------------

TEST_F(EtcdModes, HoldersAndListReportKindsOwnersAndTokens) {
    auto c = open();
    ASSERT_TRUE(c.capabilities() & DLOCK_CAP_LIST);
    auto x = c.acquire("v2/list/x", exclusive());
    auto s1 = c.acquire("v2/list/s", shared());
    auto s2 = c.acquire("v2/list/s", shared());
    auto p1 = c.acquire("v2/list/p", permits(2));
    // Waiters are not holders.
    auto xw = std::async(std::launch::async, [&] { return c.acquire("v2/list/x", exclusive(3s)); });
    auto pw1 = c.acquire("v2/list/p", permits(2));
    auto pw = std::async(std::launch::async, [&] { return c.acquire("v2/list/p", permits(2, 3s)); });
    std::this_thread::sleep_for(300ms);

    auto hx = c.holders("v2/list/x");
    ASSERT_EQ(hx.size(), 1u);
    EXPECT_EQ(hx[0].kind, dlock::hold_kind::exclusive);
    EXPECT_EQ(hx[0].holder, x.owner());
    EXPECT_EQ(hx[0].fencing_token, x.fencing_token());
    EXPECT_EQ(hx[0].name, "v2/list/x");
    ASSERT_TRUE(hx[0].ttl_left.has_value());
    EXPECT_GT(hx[0].ttl_left->count(), 0);

    auto hs = c.holders("v2/list/s");
    ASSERT_EQ(hs.size(), 2u);
    for (const auto& h : hs) EXPECT_EQ(h.kind, dlock::hold_kind::shared);
    EXPECT_EQ(hs[0].fencing_token, s1.fencing_token());
    EXPECT_EQ(hs[1].fencing_token, s2.fencing_token());
    EXPECT_EQ(hs[1].holder, s2.owner());

    auto hp = c.holders("v2/list/p", true);
    ASSERT_EQ(hp.size(), 2u);
    for (const auto& h : hp) {
        EXPECT_EQ(h.kind, dlock::hold_kind::permit);
        EXPECT_EQ(h.permits, 2u);
    }
    EXPECT_EQ(hp[0].holder, p1.owner());
    EXPECT_EQ(hp[1].holder, pw1.owner());
    EXPECT_TRUE(c.holders("v2/list/p").empty()) << "the lock `v2/list/p` is not the semaphore";

    auto all = c.list("v2/list/");
    EXPECT_EQ(all.size(), 5u);
    std::multiset<std::string> names;
    for (const auto& h : all) names.insert(h.name);
    EXPECT_EQ(names, (std::multiset<std::string>{"v2/list/x", "v2/list/s", "v2/list/s", "v2/list/p", "v2/list/p"}));
    EXPECT_EQ(c.list("v2/list/s").size(), 2u);
    EXPECT_TRUE(c.list("v2/nothing").empty());
    EXPECT_GE(c.list("").size(), 5u);

    x.release();
    p1.release();
    EXPECT_TRUE(xw.get());
    EXPECT_TRUE(pw.get());
}

TEST_F(EtcdModes, BreakFencesTheNextHolderAndTheBrokenHolderIsLost) {
    auto c = open();
    ASSERT_TRUE(c.capabilities() & DLOCK_CAP_BREAK);
    auto other = open();
    auto victim = other.acquire("v2/break", exclusive());
    auto waiter = std::async(std::launch::async, [&] { return c.acquire("v2/break", exclusive(20s)); });
    EXPECT_EQ(waiter.wait_for(200ms), std::future_status::timeout);
    EXPECT_EQ(c.break_lock("v2/break"), 1u);
    std::error_code lost;
    victim.renew(lost);
    EXPECT_EQ(lost, dlock::errc::lost) << "the broken hold's very next renewal answers LOST: " << dlock_last_error();
    auto next = waiter.get();
    EXPECT_GT(next.fencing_token(), victim.fencing_token());
    EXPECT_TRUE(eventually([&] { return victim.state() == dlock::lease_state::lost; }, 5s)) << "the broken holder learns it";
    EXPECT_EQ(victim.release(), dlock::release_outcome::already_lost);
    EXPECT_EQ(c.holders("v2/break").at(0).holder, next.owner()) << "the broken holder's release touched nothing";

    // Shared holders and permits are broken all at once.
    next.release();
    auto s1 = other.acquire("v2/break", shared());
    auto s2 = other.acquire("v2/break", shared());
    EXPECT_EQ(c.break_lock("v2/break"), 2u);
    auto p1 = other.acquire("v2/break", permits(2));
    auto p2 = other.acquire("v2/break", permits(2));
    EXPECT_EQ(c.break_lock("v2/break", true), 2u);
    EXPECT_TRUE(eventually([&] {
        return s1.state() == dlock::lease_state::lost && s2.state() == dlock::lease_state::lost &&
               p1.state() == dlock::lease_state::lost && p2.state() == dlock::lease_state::lost;
    }, 5s));
    auto p3 = c.acquire("v2/break", permits(2));
    EXPECT_GT(p3.fencing_token(), p2.fencing_token());
    EXPECT_EQ(c.break_lock("v2/free-one"), 0u);
}

// A break that fails part-way says how many holds it broke before the failure. Three permits are
// held; the breaker reaches the server through a proxy whose answers arrive 500 ms late: its read
// of the holders is answered at +0.5 s, the first delete at +1 s; at +0.75 s nothing passes upward
// any more, so the second delete gets no answer and the break fails after one key: UNKNOWN, as that
// delete may have happened.
TEST_F(EtcdModes, BreakFailingPartWaySaysHowManyItBroke) {
    auto c = open();
    std::vector<dlock::lease> held;
    for (int i = 0; i < 3; ++i) held.push_back(c.acquire("v2/break-midway", permits(3)));
    dlock::lab::tcp_proxy proxy(lab_->etcd().client_endpoint());
    auto breaker = open_through(proxy, {"request_timeout: 1s", "dial_timeout: 2s"});
    proxy.set_delay(0us, 500us * 1000);
    const auto t0 = clock_type::now();
    auto broke = std::async(std::launch::async, [&] {
        try {
            return std::make_pair(std::error_code(), fmt_count(breaker.break_lock("v2/break-midway", true)));
        } catch (const std::system_error& e) {
            return std::make_pair(e.code(), std::string(dlock_last_error()));
        }
    });
    std::this_thread::sleep_until(t0 + 750ms);
    proxy.blackhole(dlock::lab::direction::upstream);
    auto [ec, message] = broke.get();
    proxy.cut_all();  // the delete held back is dropped, not carried out late
    proxy.heal();
    const auto left = c.holders("v2/break-midway", true);
    ASSERT_EQ(left.size(), 2u) << "the timing was off: the break should delete one key before the cut (" << message << ")";
    EXPECT_EQ(ec, dlock::errc::unknown) << "the delete that got no answer may have happened" << message;
    std::cout << "[etcd] " << message << "\n";
    EXPECT_NE(message.find("1 of 3"), std::string::npos) << "the message must say how many were broken: " << message;
}

// ---- nothing left behind -----------------------------------------------------------------------

TEST_F(EtcdModes, FailedAndTimedOutAcquiresLeaveNoKey) {
    auto c = open();
    auto p = c.acquire("v2/left", permits(1));
    auto w = c.acquire("v2/left", exclusive());
    std::error_code ec;
    c.acquire("v2/left", permits(1), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    c.acquire("v2/left", permits(1, 300ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    c.acquire("v2/left", shared(), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    c.acquire("v2/left", shared(300ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    EXPECT_TRUE(eventually([&] { return keys_under("dlock/%semaphores/v2%2Fleft/").size() == 1u; }, 3s));
    EXPECT_TRUE(eventually([&] { return keys_under("dlock/v2%2Fleft/").size() == 1u; }, 3s));
}

// ---- living beside etcd's own mutex (`etcdctl lock`, Go's clientv3/concurrency) -----------------

// With the default key_prefix `dlock/`, the dlock lock `NAME` (no `/`, `%` or control byte in it)
// and `etcdctl lock dlock/NAME` are one lock: both put a key under `dlock/NAME/` and the lowest
// create_revision holds.
TEST_F(EtcdModes, EtcdctlLockAndDlockExcludeEachOther) {
    auto c = open();
    {
        // etcdctl holds: dlock waits until it lets go.
        child_process holder({"etcdctl", "--endpoints=" + endpoint(), "lock", "dlock/interop"}, true, {"ETCDCTL_API=3"});
        std::string key;
        ASSERT_TRUE(holder.read_line(key, 10000)) << "etcdctl lock did not get the lock";
        EXPECT_EQ(key.rfind("dlock/interop/", 0), 0u) << key;
        std::error_code ec;
        c.acquire("interop", exclusive(), ec);
        EXPECT_EQ(ec, dlock::errc::timeout) << "dlock passed etcdctl's lock";
        c.acquire("interop", shared(), ec);
        EXPECT_EQ(ec, dlock::errc::timeout) << "a shared dlock hold passed etcdctl's lock";
        EXPECT_EQ(c.holders("interop").size(), 1u) << "etcdctl's key is listed as the holder";
        auto waiter = std::async(std::launch::async, [&] { return c.acquire("interop", exclusive(20s)); });
        EXPECT_EQ(waiter.wait_for(300ms), std::future_status::timeout);
        holder.kill(SIGINT);  // etcdctl revokes its session lease on SIGINT
        holder.wait();
        EXPECT_TRUE(waiter.get());
    }
    {
        // dlock holds: `etcdctl lock` waits until dlock releases.
        auto lease = c.acquire("interop", exclusive());
        child_process waiter({"etcdctl", "--endpoints=" + endpoint(), "lock", "dlock/interop", "echo", "got-it"}, true,
                             {"ETCDCTL_API=3"});
        std::string line;
        EXPECT_FALSE(waiter.read_line(line, 1000)) << "etcdctl got the lock while dlock held it: " << line;
        lease.release();
        ASSERT_TRUE(waiter.read_line(line, 10000)) << "etcdctl did not get the lock after dlock's release";
        EXPECT_EQ(line, "got-it");
        EXPECT_EQ(waiter.wait(), 0);
    }
}

// With `key_prefix: ""` the dlock lock `NAME` is `etcdctl lock NAME`, and list("") finds it (the
// whole keyspace is read; keys that are no queue keys are skipped).
TEST_F(EtcdModes, EmptyKeyPrefixMeetsEtcdctlLockUnderTheSameNameAndListsIt) {
    etcdctl(endpoint(), {"put", "unrelated/config", "x"});
    auto c = dlock::client::from_yaml("backend: etcd\noptions:\n  endpoints: [\"" + endpoint() + "\"]\n  key_prefix: \"\"\n");
    auto lease = c.acquire("plain", exclusive());
    auto permit = c.acquire("plain", permits(1));
    child_process waiter({"etcdctl", "--endpoints=" + endpoint(), "lock", "plain", "echo", "got-it"}, true, {"ETCDCTL_API=3"});
    std::string line;
    EXPECT_FALSE(waiter.read_line(line, 1000)) << "etcdctl got `plain` while dlock held it: " << line;
    auto all = c.list("");
    ASSERT_EQ(all.size(), 2u);
    std::multiset<std::string> names;
    for (const auto& h : all) names.insert(h.name);
    EXPECT_EQ(names, (std::multiset<std::string>{"plain", "plain"}));
    lease.release();
    ASSERT_TRUE(waiter.read_line(line, 10000)) << "etcdctl did not get the lock after dlock's release";
    EXPECT_EQ(line, "got-it");
    EXPECT_EQ(waiter.wait(), 0);
}

// ---- the privilege to break -----------------------------------------------------------------

// On the secured etcd (client-certificate TLS, RBAC): an identity whose role may only read the
// prefix sees the holders but may not break them (PERMISSION, the holder untouched); a role with
// readwrite on the prefix may. A server that cannot start fails the test (never a skip).
TEST(EtcdModesSecured, BreakNeedsWriteOnThePrefixReadIsEnoughToList) {
    auto& server = dlock::lab::shared_secured_server(dlock::lab::secured_backend::etcd);
    const auto& owner = server.tenant_a();  // readwrite on `dlock/`
    const auto& pki = server.certificates();
    const auto auditor_cert = pki.issue("etcd-auditor", "auditor", {});
    const std::string password = "auditor-pw-not-a-secret";
    // The lab's root certificate (CN root) authenticates as root over client-certificate TLS.
    auto as_root = [&](std::vector<std::string> args) {
        std::vector<std::string> argv = {"--cacert=" + pki.ca_cert().string(), "--cert=" + (pki.dir() / "etcd-root.crt").string(),
                                         "--key=" + (pki.dir() / "etcd-root.key").string()};
        argv.insert(argv.end(), args.begin(), args.end());
        etcdctl("https://" + server.client_endpoint().to_string(), argv);
    };
    as_root({"role", "add", "auditor"});
    as_root({"role", "grant-permission", "auditor", "--prefix=true", "read", owner.territory});
    as_root({"user", "add", "auditor:" + password});
    as_root({"user", "grant-role", "auditor", "auditor"});

    auto holder_client = dlock::client::open(owner.config.string());
    auto held = holder_client.acquire("v2/guarded", exclusive());
    auto auditor = dlock::client::from_yaml(server.config_text(
        owner, {{"username", std::string("auditor")}, {"password", password},
                {"cert_file", "\"" + auditor_cert.cert.string() + "\""}, {"key_file", "\"" + auditor_cert.key.string() + "\""}}));
    const auto seen = auditor.holders("v2/guarded");
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].fencing_token, held.fencing_token());
    EXPECT_FALSE(auditor.list("v2/").empty());
    std::error_code ec;
    std::string message;
    try {
        auditor.break_lock("v2/guarded");
    } catch (const std::system_error& e) {
        ec = e.code();
        message = e.what();
    }
    EXPECT_EQ(ec, dlock::errc::permission) << message;
    EXPECT_NE(message.find("permission denied"), std::string::npos) << message;
    EXPECT_NE(message.find("auditor"), std::string::npos) << "the message names the user: " << message;
    std::cout << "[etcd] break without write: " << message << "\n";
    std::error_code renewed;
    held.renew(renewed);
    EXPECT_FALSE(renewed) << "the refused break touched the holder: " << dlock_last_error();

    // The tenant's own readwrite role is the administrator's role for its prefix.
    auto admin = dlock::client::open(owner.config.string());
    EXPECT_EQ(admin.break_lock("v2/guarded"), 1u);
    held.renew(renewed);
    EXPECT_EQ(renewed, dlock::errc::lost);
}

}  // namespace

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    dlock::lab::add_lab_environment({backend::etcd});
    return RUN_ALL_TESTS();
}
