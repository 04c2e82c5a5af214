// The `redis` and `redlock` backends under the faults of docs/design/faults.md that concern them, on real
// servers from the lab. (Holder killed — scenario 2 — is in the conformance suite for every backend.)
// Where a backend breaks safety by design, the test demonstrates the violation (EV) and asserts
// that it happened, so the docs' guarantees table stays true.
#include "backend_test.hpp"
#include "support.hpp"

#include "dlock/lab/gtest.hpp"
#include "dlock/lab/proxy.hpp"

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <iostream>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <unistd.h>

using namespace std::chrono_literals;
using dlock::lab::backend;
using dlock::test::child_process;
using dlock::test::expect_line;
using dlock::test::expect_resumed_holder_fenced_off;
using dlock::test::fenced_resource;

namespace {


class RedisFaults : public dlock::test::lab_backend_test {
protected:
    RedisFaults() : lab_backend_test({backend::redis, backend::redlock}) {}

public:
    using lab_backend_test::config;
    dlock::lab::redis_client redis() { return lab_->redis().client(); }
    void retry_release_after_another_took_the_name(bool shared, dlock::release_outcome expected);
};


// docs/design/faults.md §3 and 4 with fencing: holder A is paused past its ttl right after checking its lease;
// B acquires; A resumes. A's fenced write is refused, A learns it lost the lease, and A's stale
// release leaves B's lock alone.
TEST_F(RedisFaults, HolderPausedPastTtlIsFencedOff) {
    child_process a({DLOCK_CONFORMANCE_WORKER, "script", config(backend::redis), "faults/pause", "600"}, true, {}, true);
    const std::string held = expect_line(a);
    ASSERT_EQ(held.rfind("held ", 0), 0u) << held;
    a.write_line("state");
    EXPECT_EQ(expect_line(a), "held");  // A checked: it believes it holds the lock...
    a.kill(SIGSTOP);                     // ...and stalls (a GC pause, a page fault storm)
    std::this_thread::sleep_for(900ms);

    auto client = dlock::client::open(config(backend::redis));
    auto b = client.acquire("faults/pause", dlock::acquire_options().with_wait(3s));
    expect_resumed_holder_fenced_off(a, client, b, "faults/pause");
}

// docs/design/faults.md §3 for redlock: EV. Without fencing tokens the resource cannot tell the stalled holder
// from the new one: both writes are accepted, an overlap the client library cannot prevent.
TEST_F(RedisFaults, RedlockHolderPausedPastTtlOverlapsWithoutFencing) {
    child_process a({DLOCK_CONFORMANCE_WORKER, "script", config(backend::redlock), "faults/pause", "600"}, true, {}, true);
    ASSERT_EQ(expect_line(a).rfind("held ", 0), 0u);
    a.write_line("state");
    EXPECT_EQ(expect_line(a), "held");
    a.kill(SIGSTOP);
    std::this_thread::sleep_for(900ms);
    auto client = dlock::client::open(config(backend::redlock));
    auto b = client.acquire("faults/pause", dlock::acquire_options().with_wait(3s));
    fenced_resource resource;
    EXPECT_TRUE(resource.write(b.fencing_token()));
    a.kill(SIGCONT);
    a.write_line("token");
    const uint64_t stale = std::stoull(expect_line(a));
    EXPECT_EQ(stale, 0u);
    EXPECT_EQ(b.fencing_token(), 0u);
    EXPECT_TRUE(resource.write(stale)) << "EV expected: without tokens the stale write goes through";
    std::cout << "[redlock] EV demonstrated: a holder paused past its ttl wrote after the next holder, undetected\n";
    a.write_line("release");
    EXPECT_EQ(expect_line(a), "already_lost");
    EXPECT_EQ(client.inspect("faults/pause").holder, b.owner()) << "A's stale release touched B's lock";
    a.write_line("exit");
    a.wait();
}

// docs/design/faults.md §5: a release with a forged owner token is refused by the compare-owner script.
TEST_F(RedisFaults, ForgedTokenCannotRelease) {
    auto client = dlock::client::open(config(backend::redis));
    auto lease = client.acquire("faults/forged", dlock::acquire_options().with_wait(0ms));
    auto raw = redis();
    const auto reply = raw.checked({"EVAL",
                                    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
                                    "1", "dlock:{faults/forged}:lock", std::string(32, 'f')});
    EXPECT_EQ(reply.integer, 0);
    EXPECT_TRUE(client.inspect("faults/forged").held);
    EXPECT_EQ(raw.checked({"GET", "dlock:{faults/forged}:lock"}).text, lease.owner());
}

// docs/design/faults.md §6: EV. Redis restarted without persistence right after an acquire forgets the lock:
// a second client acquires while the first still believes it holds it. The first learns of it at
// its next renewal.
TEST_F(RedisFaults, RestartWithoutPersistenceLosesLocks) {
    auto client = dlock::client::open(config(backend::redis));
    auto a = client.acquire("faults/restart", dlock::acquire_options().with_wait(0ms).with_ttl(3s));
    lab_->redis().restart(dlock::lab::data_policy::keep);  // persistence is off: nothing is kept
    auto other = dlock::client::open(config(backend::redis));
    std::error_code ec;
    auto b = other.acquire("faults/restart", dlock::acquire_options().with_wait(2s), ec);
    EXPECT_FALSE(ec) << "EV expected: the restarted server granted the lock again";
    EXPECT_EQ(a.state(), dlock::lease_state::held) << "the first holder cannot know yet";
    std::cout << "[redis] EV demonstrated: after a restart without persistence two clients hold `faults/restart`\n";
    for (int i = 0; i < 300 && a.state() != dlock::lease_state::lost; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(a.state(), dlock::lease_state::lost) << "the next renewal (at ttl/3) must report the loss";
}

// docs/design/faults.md §6, safe variant: with appendonly + appendfsync always, a lock survives a crash.
TEST_F(RedisFaults, AppendfsyncAlwaysKeepsLocksAcrossACrash) {
    dlock::lab::lab_options options;
    options.redis.appendonly = true;
    options.redis.appendfsync = "always";
    dlock::lab::lab durable({backend::redis}, options);
    const std::string cfg = durable.config_path(backend::redis).string();
    auto client = dlock::client::open(cfg);
    auto a = client.acquire("faults/durable", dlock::acquire_options().with_wait(0ms).with_ttl(30s));
    durable.redis().kill();
    durable.redis().restart(dlock::lab::data_policy::keep);
    auto other = dlock::client::open(cfg);
    std::error_code ec;
    other.acquire("faults/durable", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "the lock must survive the crash";
    EXPECT_EQ(other.inspect("faults/durable").holder, a.owner());
}

// docs/design/faults.md §7: Redlock keeps working with 2 of 5 nodes down and fails cleanly with 3 down.
TEST_F(RedisFaults, RedlockToleratesAMinorityDownAndFailsCleanlyWithout) {
    auto& nodes = lab_->redlock();
    nodes.node(0).kill();
    nodes.node(1).kill();
    auto client = dlock::client::open(config(backend::redlock));
    {
        std::error_code ec;
        auto lease = client.acquire("faults/minority", dlock::acquire_options().with_wait(0ms), ec);
        EXPECT_FALSE(ec) << "3 of 5 nodes are a quorum: " << dlock_last_error();
    }
    nodes.node(2).kill();
    std::error_code ec;
    auto lease = client.acquire("faults/majority", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::unavailable) << "never a false success";
    EXPECT_FALSE(lease);
    EXPECT_NE(std::string(dlock_last_error()).find("quorum"), std::string::npos) << dlock_last_error();
    for (size_t i = 3; i < 5; ++i) {
        auto raw = nodes.node(i).client();
        EXPECT_EQ(raw.checked({"EXISTS", "dlock:{faults/majority}:lock"}).integer, 0) << "a failed acquire left a key on node " << i;
    }
    for (size_t i = 0; i < 3; ++i) nodes.node(i).restart(dlock::lab::data_policy::keep);
}

// docs/design/faults.md §7: nodes that answer late, and a round that outlasts the ttl. Nodes 0-2 answer
// through a proxy adding 100 ms each way and nodes 3-4 are paused: the quorum's grants arrive after
// the 150 ms ttl, so no validity is left (as when the client itself stalls mid-acquisition). The
// lock is given back on every node, the paused ones included, which run SET then release when
// they wake.
TEST_F(RedisFaults, RedlockRoundOutlastingTheTtlGivesTheLockBackEverywhere) {
    auto& nodes = lab_->redlock();
    std::vector<std::unique_ptr<dlock::lab::tcp_proxy>> slow;
    std::string endpoints;
    for (size_t i = 0; i < 5; ++i) {
        dlock::lab::endpoint where = nodes.node(i).client_endpoint();
        if (i < 3) {
            slow.push_back(std::make_unique<dlock::lab::tcp_proxy>(where));
            where = slow.back()->listen_endpoint();
        }
        endpoints += (i ? ", \"" : "\"") + where.to_string() + "\"";
    }
    dlock::test::scratch_dir dir("dlock-redlock-late");
    const std::string cfg = dir.path() + "/late.yaml";
    std::ofstream(cfg) << "backend: redlock\noptions:\n  endpoints: [" << endpoints << "]\n  command_timeout: 1s\n";
    auto client = dlock::client::open(cfg);  // connects to every node while all are up and fast
    for (auto& p : slow) p->set_delay(100ms);
    nodes.node(3).pause();
    nodes.node(4).pause();
    std::error_code ec;
    auto lease = client.acquire("faults/late", dlock::acquire_options().with_wait(0ms).with_ttl(150ms), ec);
    const std::string message = dlock_last_error();
    nodes.node(3).resume();
    nodes.node(4).resume();
    EXPECT_EQ(ec, dlock::errc::timeout) << "a round longer than the ttl must not succeed: " << message;
    EXPECT_NE(message.find("granted by 3 of 5 nodes"), std::string::npos) << "a quorum granted it, but no validity was left: " << message;
    EXPECT_FALSE(lease);
    for (auto& p : slow) p->set_delay(0us);
    std::this_thread::sleep_for(500ms);
    for (size_t i = 0; i < 5; ++i) {
        auto raw = nodes.node(i).client();
        EXPECT_EQ(raw.checked({"EXISTS", "dlock:{faults/late}:lock"}).integer, 0) << "our key is left on node " << i;
    }
    std::error_code again;
    auto next = client.acquire("faults/late", dlock::acquire_options().with_wait(2s).with_ttl(5s), again);
    EXPECT_FALSE(again) << dlock_last_error();
}

// docs/design/faults.md §8: a forward clock jump on a Redis node makes its keys expire early (produced directly:
// libfaketime cannot run Debian's redis-server). EV for `redis`; for `redlock` one node's jump is
// harmless, a majority's is not.
TEST_F(RedisFaults, ClockJumpOnTheServerExpiresTheLockEarly) {
    auto client = dlock::client::open(config(backend::redis));
    auto a = client.acquire("faults/clock", dlock::acquire_options().with_wait(0ms).with_ttl(30s));
    EXPECT_GE(lab_->redis().expire_keys_early("dlock:*:lock", 60s), 1);
    auto other = dlock::client::open(config(backend::redis));
    std::error_code ec;
    other.acquire("faults/clock", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_FALSE(ec) << "EV expected: the jump freed the lock under its holder";
    std::cout << "[redis] EV demonstrated: a clock jump on the server let a second client in\n";
}

TEST_F(RedisFaults, RedlockSurvivesOneNodesClockJumpButNotAMajoritys) {
    auto& nodes = lab_->redlock();
    auto client = dlock::client::open(config(backend::redlock));
    auto a = client.acquire("faults/clock", dlock::acquire_options().with_wait(0ms).with_ttl(30s));
    nodes.node(0).expire_keys_early("dlock:*:lock", 60s);
    auto other = dlock::client::open(config(backend::redlock));
    std::error_code ec;
    other.acquire("faults/clock", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "one node's jump must not free the lock";
    nodes.node(1).expire_keys_early("dlock:*:lock", 60s);
    nodes.node(2).expire_keys_early("dlock:*:lock", 60s);
    other.acquire("faults/clock", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_FALSE(ec) << "EV expected: jumps on a majority free the lock under its holder";
    std::cout << "[redlock] EV demonstrated: clock jumps on 3 of 5 nodes let a second client in\n";
}

// docs/design/faults.md §14: server errors are clear errors, never "held".
TEST_F(RedisFaults, NoscriptAfterScriptFlushRecovers) {
    auto client = dlock::client::open(config(backend::redis));
    { auto warm = client.acquire("faults/noscript-warm", dlock::acquire_options().with_wait(0ms)); }
    redis().checked({"SCRIPT", "FLUSH"});
    auto lease = client.acquire("faults/noscript", dlock::acquire_options().with_wait(0ms));
    EXPECT_GT(lease.fencing_token(), 0u);
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
}

TEST_F(RedisFaults, ReadOnlyReplicaIsAClearError) {
    auto client = dlock::client::open(config(backend::redis));
    auto raw = redis();
    const auto master = lab_->redlock().node(0).client_endpoint();
    raw.checked({"REPLICAOF", master.host, std::to_string(master.port)});
    std::error_code ec;
    client.acquire("faults/readonly", dlock::acquire_options().with_wait(0ms), ec);
    const std::string message = dlock_last_error();
    raw.checked({"REPLICAOF", "NO", "ONE"});
    EXPECT_EQ(ec, dlock::errc::backend);
    EXPECT_NE(message.find("read-only replica"), std::string::npos) << message;
}

TEST_F(RedisFaults, OutOfMemoryIsAClearError) {
    auto client = dlock::client::open(config(backend::redis));
    auto raw = redis();
    raw.checked({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
    raw.checked({"CONFIG", "SET", "maxmemory", "1"});
    std::error_code ec;
    client.acquire("faults/oom", dlock::acquire_options().with_wait(0ms), ec);
    const std::string message = dlock_last_error();
    raw.checked({"CONFIG", "SET", "maxmemory", "0"});
    EXPECT_EQ(ec, dlock::errc::backend);
    EXPECT_NE(message.find("out of memory"), std::string::npos) << message;
}

TEST_F(RedisFaults, ForeignKeyTypesAreClearErrors) {
    auto client = dlock::client::open(config(backend::redis));
    auto raw = redis();
    raw.checked({"HSET", "dlock:{faults/wrongtype}:lock", "field", "value"});
    std::error_code ec;
    client.acquire("faults/wrongtype", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::backend);
    EXPECT_NE(std::string(dlock_last_error()).find("another type"), std::string::npos) << dlock_last_error();
    raw.checked({"SET", "dlock:{faults/badfence}:fence", "not-a-number"});
    client.acquire("faults/badfence", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::backend);
    EXPECT_EQ(raw.checked({"EXISTS", "dlock:{faults/badfence}:lock"}).integer, 0) << "no lock without a token";
}

TEST_F(RedisFaults, AuthenticationFailuresAreConfigErrors) {
    auto raw = redis();
    raw.checked({"CONFIG", "SET", "requirepass", "s3cret"});
    raw.checked({"AUTH", "s3cret"});
    const auto where = lab_->redis().client_endpoint();
    const std::string base = "redis://" + where.host + ":" + std::to_string(where.port);
    dlock_client* c = nullptr;
    EXPECT_EQ(dlock_client_open((base).c_str(), &c), DLOCK_CONFIG);
    EXPECT_NE(std::string(dlock_last_error()).find("authentication failed"), std::string::npos) << dlock_last_error();
    EXPECT_EQ(dlock_client_open(("redis://:wrong@" + where.host + ":" + std::to_string(where.port)).c_str(), &c), DLOCK_CONFIG);
    EXPECT_EQ(dlock_client_open(("redis://:s3cret@" + where.host + ":" + std::to_string(where.port)).c_str(), &c), DLOCK_OK)
        << dlock_last_error();
    dlock_client_close(c);
    raw.checked({"CONFIG", "SET", "requirepass", ""});
}

// Hazards are reported when a client opens: an eviction policy that can drop lock keys, and no
// persistence (the lab's servers run without it).
TEST_F(RedisFaults, HazardsAreWarnedAboutAtOpen) {
    auto raw = redis();
    raw.checked({"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"});
    int pipe_fds[2];
    ASSERT_EQ(pipe(pipe_fds), 0);
    const int saved = dup(STDERR_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);  // dlock logs to stderr
    {
        auto client = dlock::client::open(config(backend::redis));
    }
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(pipe_fds[1]);
    std::string logged;
    char buf[4096];
    for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof buf)) > 0;) logged.append(buf, size_t(n));
    close(pipe_fds[0]);
    raw.checked({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
    EXPECT_NE(logged.find("maxmemory-policy is `allkeys-lru`"), std::string::npos) << logged;
    EXPECT_NE(logged.find("persistence is off"), std::string::npos) << logged;
}

// ---- connections across a restart, pool exhaustion, paused servers -----------------------------

// A DSN for the lab's single Redis with extra query options ("pool_size=1&command_timeout=300ms").
std::string redis_dsn(const dlock::lab::endpoint& where, const std::string& query = "", const std::string& userinfo = "") {
    return "redis://" + (userinfo.empty() ? "" : userinfo + "@") + where.host + ":" + std::to_string(where.port) +
           (query.empty() ? "" : "?" + query);
}

// Runs `body` on a thread of its own and waits at most `limit` for it. A body still running then
// (a deadlock) is reported and abandoned with everything it captured — leaked on purpose, so the
// test binary can still finish and report instead of hanging.
bool finishes_within(std::chrono::milliseconds limit, std::function<void()> body) {
    auto done = std::make_shared<std::promise<void>>();
    auto finished = done->get_future();
    std::thread([done, body = std::move(body)] {
        body();
        done->set_value();
    }).detach();
    return finished.wait_for(limit) == std::future_status::ready;
}

// pool_size 1: an acquire whose pooled connection died with the server (restart) or whose command
// timed out on a paused server must not wait for a second connection of the full pool; each
// acquire returns within its wait + command_timeout, and close() returns too.
TEST_F(RedisFaults, PoolOfOneNeverDeadlocksAfterARestartOrATimeout) {
    const auto where = lab_->redis().client_endpoint();
    // Shared with the acquiring threads, which keep them alive if they never return.
    auto client = std::make_shared<dlock::client>(dlock::client::open(redis_dsn(where, "pool_size=1&command_timeout=300ms")));
    struct outcome {
        std::error_code ec;
        double seconds = -1;
    };
    auto acquire_on_thread = [](const std::shared_ptr<dlock::client>& client, const char* name, std::chrono::milliseconds wait,
                                std::chrono::milliseconds ttl, std::chrono::milliseconds limit, const std::shared_ptr<outcome>& out) {
        return finishes_within(limit, [client, name, wait, ttl, out] {
            const auto start = std::chrono::steady_clock::now();
            auto lease = client->acquire(name, dlock::acquire_options().with_wait(wait).with_ttl(ttl), out->ec);
            out->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        });
    };
    { auto warm = client->acquire("faults/pool1-warm", dlock::acquire_options().with_wait(0ms)); }  // its one connection is idle now
    lab_->redis().restart(dlock::lab::data_policy::keep);

    auto after_restart = std::make_shared<outcome>();
    ASSERT_TRUE(acquire_on_thread(client, "faults/pool1", 3s, 5s, 3s + 300ms + 5s, after_restart))
        << "acquire after a restart with pool_size 1 did not return (deadlock)";
    EXPECT_FALSE(after_restart->ec) << "the server is back: the acquire must succeed: " << after_restart->ec.message();
    EXPECT_LT(after_restart->seconds, 3.3 + 2.0) << "within wait + command_timeout (+ margin)";

    lab_->redis().pause();
    auto paused = std::make_shared<outcome>();
    const bool paused_done = acquire_on_thread(client, "faults/pool1-paused", 0ms, 30s, 300ms + 5s, paused);
    lab_->redis().resume();
    ASSERT_TRUE(paused_done) << "acquire on a paused server with pool_size 1 did not return (deadlock)";
    EXPECT_TRUE(paused->ec) << "the server was paused: the acquire cannot have succeeded";

    auto closing = std::make_shared<std::shared_ptr<dlock::client>>(std::move(client));
    ASSERT_TRUE(finishes_within(5s, [closing] { closing->reset(); })) << "close() did not return";
}

// An acquire whose reply is lost to a paused server (command timeout) gives the lock back by owner
// token. The release travels behind the still-queued acquire script, on the same connection, so
// the server runs them in order when it wakes: no key is left behind.
TEST_F(RedisFaults, TimedOutAcquireOnAPausedServerLeavesNoKey) {
    const auto where = lab_->redis().client_endpoint();
    auto client = dlock::client::open(redis_dsn(where, "command_timeout=300ms"));
    { auto warm = client.acquire("faults/paused-warm", dlock::acquire_options().with_wait(0ms)); }
    lab_->redis().pause();
    std::error_code ec;
    auto lease = client.acquire("faults/paused", dlock::acquire_options().with_wait(0ms).with_ttl(30s), ec);
    std::this_thread::sleep_for(200ms);  // a best-effort release on another connection would queue too
    lab_->redis().resume();
    EXPECT_EQ(ec, dlock::errc::unknown) << "the reply was lost: the outcome is unknown";
    EXPECT_FALSE(lease);
    auto raw = redis();
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i) {  // the server catches up with its queued requests
        gone = raw.checked({"EXISTS", "dlock:{faults/paused}:lock"}).integer == 0;
        if (!gone) std::this_thread::sleep_for(20ms);
    }
    EXPECT_TRUE(gone) << "the failed acquire left its key (ttl " << raw.checked({"PTTL", "dlock:{faults/paused}:lock"}).integer
                      << " ms) behind";
    std::error_code again;
    auto next = client.acquire("faults/paused", dlock::acquire_options().with_wait(0ms), again);
    EXPECT_FALSE(again) << "the name is free: " << again.message();
}

// Pooled connections that the server closed (a restart, or its idle `timeout`) are found dead
// before they are used: the next try-once acquire succeeds instead of answering UNKNOWN.
TEST_F(RedisFaults, StalePooledConnectionsAreNotAnError) {
    auto client = dlock::client::open(config(backend::redis));
    { auto warm = client.acquire("faults/stale-warm", dlock::acquire_options().with_wait(0ms)); }
    lab_->redis().restart(dlock::lab::data_policy::keep);
    std::error_code ec;
    auto a = client.acquire("faults/stale-restart", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_FALSE(ec) << "first acquire after a restart: " << ec.message() << ": " << dlock_last_error();
    if (a) a.release();

    redis().checked({"CONFIG", "SET", "timeout", "1"});
    struct restore_timeout {
        RedisFaults& test;
        ~restore_timeout() { test.redis().checked({"CONFIG", "SET", "timeout", "0"}); }  // a fresh connection: idle ones are closed
    } restore{*this};
    { auto warm = client.acquire("faults/stale-warm", dlock::acquire_options().with_wait(0ms)); }
    std::this_thread::sleep_for(2500ms);  // the server closes connections idle for more than 1 s
    auto b = client.acquire("faults/stale-timeout", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_FALSE(ec) << "first acquire after the server's idle timeout: " << ec.message() << ": " << dlock_last_error();
}

// The first renewal after a restart without persistence meets a dead pooled connection; it must
// go through on a fresh one and report LOST at once, not an unconfirmed renewal (SUSPECT) that
// delays the loss by another renewal period.
TEST_F(RedisFaults, FirstRenewalAfterARestartReportsLost) {
    auto client = dlock::client::open(config(backend::redis));
    auto a = client.acquire("faults/renew-restart", dlock::acquire_options().with_wait(0ms).with_ttl(30s));
    lab_->redis().restart(dlock::lab::data_policy::keep);
    std::error_code ec;
    a.renew(ec);
    EXPECT_EQ(a.state(), dlock::lease_state::lost) << "renewal answered " << ec.message() << ": " << dlock_last_error();
}

// A connection reset under a command (here by a proxy, before the request reached the server): the
// server runs nothing more from that connection, so the outcome is settled. A try-once acquire
// releases by owner and retries once on a fresh connection, and a renewal retries once: neither
// answers UNKNOWN.
TEST_F(RedisFaults, ConnectionResetUnderACommandIsRetriedOnAFreshOne) {
    dlock::lab::tcp_proxy proxy(lab_->redis().client_endpoint());
    auto client = dlock::client::open(redis_dsn(proxy.listen_endpoint()));
    auto held = client.acquire("faults/reset-renew", dlock::acquire_options().with_wait(0ms).with_ttl(30s));
    proxy.set_delay(150ms, 0us);  // requests wait in the proxy: the reset comes before they reach the server
    auto cut_soon = [&] {
        return std::thread([&] {
            std::this_thread::sleep_for(50ms);
            proxy.cut_all();
        });
    };
    std::error_code ec;
    std::thread cutter = cut_soon();
    auto lease = client.acquire("faults/reset", dlock::acquire_options().with_wait(0ms).with_ttl(30s), ec);
    cutter.join();
    EXPECT_FALSE(ec) << "acquire under a reset: " << ec.message() << ": " << dlock_last_error();
    EXPECT_GE(proxy.stats().cut, 1u) << "the reset happened under the acquire";

    cutter = cut_soon();
    held.renew(ec);
    cutter.join();
    EXPECT_FALSE(ec) << "renewal under a reset: " << ec.message() << ": " << dlock_last_error();
    EXPECT_EQ(held.state(), dlock::lease_state::held);
    proxy.set_delay(0us);
}

// A waiter whose pub/sub connection is down (killed, and it cannot reconnect: the server refuses
// new clients) must not sleep until the holder's ttl: the release is noticed within a bounded
// time by timed retries while the subscription is not confirmed.
TEST_F(RedisFaults, WaiterNoticesAReleaseWhileItsSubscriptionIsDown) {
    auto holder = dlock::client::open(config(backend::redis));
    auto waiter = dlock::client::open(config(backend::redis));
    auto a = holder.acquire("faults/wakeup", dlock::acquire_options().with_wait(0ms).with_ttl(20s));
    auto raw = redis();
    std::error_code ec;
    double waited_after_release = -1;
    std::chrono::steady_clock::time_point released_at;
    std::thread b([&] {
        auto lease = waiter.acquire("faults/wakeup", dlock::acquire_options().with_wait(15s).with_ttl(5s), ec);
        waited_after_release = std::chrono::duration<double>(std::chrono::steady_clock::now() - released_at).count();
    });
    // Once the waiter's subscription is confirmed, cut it and keep it from coming back.
    bool subscribed = false;
    for (int i = 0; i < 200 && !subscribed; ++i) {
        // A fair waiter (the default) listens on its own channel under the name's keys.
        subscribed = raw.checked({"PUBSUB", "CHANNELS", "dlock:{faults/wakeup}:*"}).elements.size() == 1;
        if (!subscribed) std::this_thread::sleep_for(10ms);
    }
    EXPECT_TRUE(subscribed) << "the waiter never subscribed";
    struct restore_maxclients {
        dlock::lab::redis_client& raw;
        std::string value;
        ~restore_maxclients() { raw.checked({"CONFIG", "SET", "maxclients", value}); }
    } restore{raw, raw.checked({"CONFIG", "GET", "maxclients"}).elements.at(1).text};
    raw.checked({"CONFIG", "SET", "maxclients", "1"});  // the clients connected stay; new ones are refused
    raw.checked({"CLIENT", "KILL", "TYPE", "pubsub"});
    std::this_thread::sleep_for(300ms);  // the waiter retried once (its wake-up on the drop) and waits again
    released_at = std::chrono::steady_clock::now();
    EXPECT_EQ(a.release(), dlock::release_outcome::released);
    b.join();
    EXPECT_FALSE(ec) << ec.message() << ": " << dlock_last_error();
    EXPECT_LT(waited_after_release, 2.0) << "the waiter slept through the release (holder's ttl was 20 s)";
}

// ---- the waiter queue (fair: true) ---------------------------------------------------------------

// Owner tokens queued on `name` (the waiter queue's sorted set), first first.
std::vector<std::string> queued(dlock::lab::redis_client& raw, const std::string& name) {
    std::vector<std::string> out;
    for (const auto& e : raw.checked({"ZRANGE", "dlock:{" + name + "}:queue", "0", "-1"}).elements) out.push_back(e.text);
    return out;
}

// A waiter process killed while it waits leaves its entry first in the queue, where nothing will
// ever take it out but its lapse (the holder's ttl and more). After the holder's release, returns
// how long the next waiter waited; the dead entry must be gone by then. `age`: how long after the
// dead waiter queued the holder releases.
double next_waiter_wait_behind_a_dead_one(RedisFaults& t, const std::string& name, std::chrono::milliseconds age) {
    auto holder = dlock::client::open(t.config(backend::redis));
    auto a = holder.acquire(name, dlock::acquire_options().with_wait(0ms).with_ttl(20s));
    child_process dead({DLOCK_CONFORMANCE_WORKER, "hold", t.config(backend::redis), name, "20000"}, true);
    auto raw = t.redis();
    for (int i = 0; i < 300 && queued(raw, name).empty(); ++i) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(queued(raw, name).size(), 1u) << "the waiting process never queued";
    const auto dead_queued = std::chrono::steady_clock::now();
    dead.kill(SIGKILL);
    dead.wait();

    auto waiter = dlock::client::open(t.config(backend::redis));
    std::error_code ec;
    std::chrono::steady_clock::time_point released_at, acquired_at;
    std::thread b([&] {
        auto lease = waiter.acquire(name, dlock::acquire_options().with_wait(30s).with_ttl(5s), ec);
        acquired_at = std::chrono::steady_clock::now();
    });
    for (int i = 0; i < 300 && queued(raw, name).size() < 2; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(queued(raw, name).size(), 2u) << "the live waiter never queued behind the dead one";
    std::this_thread::sleep_until(std::max(dead_queued + age, std::chrono::steady_clock::now() + 300ms));  // subscribed
    released_at = std::chrono::steady_clock::now();
    EXPECT_EQ(a.release(), dlock::release_outcome::released);
    b.join();
    EXPECT_FALSE(ec) << ec.message() << ": " << dlock_last_error();
    EXPECT_TRUE(queued(raw, name).empty()) << "the dead waiter's entry is still queued";
    return std::chrono::duration<double>(acquired_at - released_at).count();
}

// The dead waiter queued long ago (more than its claim time, command_timeout: 2 s here): nobody
// hears its channel, so the release drops it and wakes the next waiter at once.
TEST_F(RedisFaults, WaiterKilledInTheQueueIsSkippedAtTheRelease) {
    const double waited = next_waiter_wait_behind_a_dead_one(*this, "faults/queue-dead-old", 2500ms);
    std::cout << "next waiter acquired " << waited << " s after the release, behind a dead waiter\n";
    EXPECT_LT(waited, 1.0) << "held up by a dead waiter whose channel nobody hears";
}

// The dead waiter queued just before the release (a live waiter subscribes to its channel only
// after it queued, so a young unheard entry is kept): the next waiter, woken with it, takes over
// when the dead one's claim time (2 s) runs out — not after the holder's ttl nor the entry's lapse.
TEST_F(RedisFaults, WaiterKilledJustAfterQueueingHoldsTheNextOneUpForItsClaimAtMost) {
    const double waited = next_waiter_wait_behind_a_dead_one(*this, "faults/queue-dead-young", 0ms);
    std::cout << "next waiter acquired " << waited << " s after the release, behind a dead waiter\n";
    EXPECT_LT(waited, 2.0 + 2.0) << "held up longer than the dead waiter's claim time (2 s) and a margin";
}

// A waiter that gives up (its wait ran out) leaves the queue: no entry and no queue key remain.
TEST_F(RedisFaults, TimedOutWaiterLeavesNothingInTheQueue) {
    const std::string name = "faults/queue-timeout";
    auto holder = dlock::client::open(config(backend::redis));
    auto waiter = dlock::client::open(config(backend::redis));
    auto a = holder.acquire(name, dlock::acquire_options().with_wait(0ms).with_ttl(20s));
    std::error_code ec;
    waiter.acquire(name, dlock::acquire_options().with_wait(300ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << dlock_last_error();
    auto raw = redis();
    EXPECT_EQ(raw.checked({"EXISTS", "dlock:{" + name + "}:queue", "dlock:{" + name + "}:queue-lapses"}).integer, 0);
    EXPECT_EQ(a.release(), dlock::release_outcome::released);
}

// fair: true keeps a free lock for the waiter queued first: a newcomer's try fails while a queued
// waiter has yet to take it. fair: false barges: the newcomer takes a free lock whoever waits.
TEST_F(RedisFaults, FairTriesRespectTheQueueAndUnfairOnesBarge) {
    const std::string name = "faults/queue-barge";
    auto raw = redis();
    auto newcomer = dlock::client::open(config(backend::redis));
    // A queued waiter whose turn has come but who has not taken the lock yet: an entry that lapses
    // in 10 s, first in the queue of a free lock.
    const std::string time = raw.checked({"TIME"}).elements.at(0).text;
    const std::string lapses = std::to_string((std::stoll(time) + 10) * 1000);
    raw.checked({"ZADD", "dlock:{" + name + "}:queue", "1", "0123456789abcdef0123456789abcdef"});
    raw.checked({"ZADD", "dlock:{" + name + "}:queue-lapses", lapses, "0123456789abcdef0123456789abcdef"});
    std::error_code ec;
    newcomer.acquire(name, dlock::acquire_options().with_wait(0ms).with_fair(true), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a fair try took the lock before the waiter queued first";
    auto barged = newcomer.acquire(name, dlock::acquire_options().with_wait(0ms).with_fair(false), ec);
    EXPECT_FALSE(ec) << "an unfair try must barge: " << dlock_last_error();
    if (!ec) {
        EXPECT_EQ(barged.release(), dlock::release_outcome::released);
    }
    raw.checked({"DEL", "dlock:{" + name + "}:queue", "dlock:{" + name + "}:queue-lapses"});
}

// ---- ACL users (Redis 6+; the lab runs Redis 7) ---------------------------------------------------

// The commands dlock runs; a test user gets these plus the key and channel patterns under test.
const std::vector<std::string> dlock_commands = {"+eval", "+evalsha", "+script|load", "+get", "+set", "+incr", "+pttl",
                                                 "+pexpire", "+del", "+publish", "+subscribe", "+unsubscribe", "+time",
                                                 "+zadd", "+zrem", "+zrange", "+zrangebyscore", "+zscore",
                                                 "+ping", "+config|get"};

class RedisAcl : public RedisFaults {
protected:
    void TearDown() override {
        auto raw = redis();
        for (const auto& user : users_) raw.command({"ACL", "DELUSER", user});
    }
    // Creates ACL user `name` with password `pw`, the commands above and `rules` (key/channel patterns).
    void make_user(const std::string& name, const std::vector<std::string>& rules) {
        std::vector<std::string> cmd = {"ACL", "SETUSER", name, "reset", "on", ">pw-" + name};
        cmd.insert(cmd.end(), dlock_commands.begin(), dlock_commands.end());
        cmd.insert(cmd.end(), rules.begin(), rules.end());
        redis().checked(cmd);
        users_.push_back(name);
    }
    std::string dsn_for(const std::string& user) {
        return redis_dsn(lab_->redis().client_endpoint(), "", user + ":pw-" + user);
    }
    std::vector<std::string> users_;
};

TEST_F(RedisAcl, UserWithoutChannelRightsIsRefusedAtOpen) {
    make_user("dlock-nochannels", {"~dlock:*", "resetchannels"});
    dlock_client* c = nullptr;
    EXPECT_EQ(dlock_client_open(dsn_for("dlock-nochannels").c_str(), &c), DLOCK_PERMISSION);
    const std::string message = dlock_last_error();
    EXPECT_NE(message.find("dlock-nochannels"), std::string::npos) << "names the user: " << message;
    EXPECT_NE(message.find("PUBLISH"), std::string::npos) << "names what is denied: " << message;
    EXPECT_NE(message.find("SUBSCRIBE"), std::string::npos) << "names what is denied: " << message;
    EXPECT_NE(message.find("&dlock:*"), std::string::npos) << "says what to grant: " << message;
    EXPECT_EQ(message.find("pw-dlock-nochannels"), std::string::npos) << "the password is never echoed: " << message;
    if (c) dlock_client_close(c);
}

TEST_F(RedisAcl, UserWithoutKeyRightsIsRefusedAtOpen) {
    make_user("dlock-otherkeys", {"~other:*", "&dlock:*"});
    dlock_client* c = nullptr;
    EXPECT_EQ(dlock_client_open(dsn_for("dlock-otherkeys").c_str(), &c), DLOCK_PERMISSION);
    const std::string message = dlock_last_error();
    EXPECT_NE(message.find("dlock-otherkeys"), std::string::npos) << message;
    EXPECT_NE(message.find("~dlock:*"), std::string::npos) << "says what to grant: " << message;
    if (c) dlock_client_close(c);
}

// Exactly dlock's keys and channels (`~dlock:*`, `&dlock:*`) and its commands are enough: acquire,
// wait (woken by the release's PUBLISH), release, nothing left behind.
TEST_F(RedisAcl, UserWithExactlyDlocksRightsWorks) {
    make_user("dlock-exact", {"~dlock:*", "&dlock:*"});
    auto holder = dlock::client::open(dsn_for("dlock-exact"));
    auto waiter = dlock::client::open(dsn_for("dlock-exact"));
    auto a = holder.acquire("faults/acl", dlock::acquire_options().with_wait(0ms).with_ttl(20s));
    std::error_code ec;
    std::thread b([&] {
        auto lease = waiter.acquire("faults/acl", dlock::acquire_options().with_wait(10s), ec);
        if (lease) {
            EXPECT_EQ(lease.release(), dlock::release_outcome::released);
        }
    });
    std::this_thread::sleep_for(200ms);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(a.release(), dlock::release_outcome::released);
    b.join();
    EXPECT_FALSE(ec) << ec.message() << ": " << dlock_last_error();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0)
        << "the waiter was not woken by the release";
    EXPECT_EQ(redis().checked({"EXISTS", "dlock:{faults/acl}:lock"}).integer, 0);
}

// A channel right revoked while a lease is held: the release is refused as a whole (the script
// publishes before it deletes, and a script's writes are not rolled back), with a precise error;
// the lock is still ours, and once the right is back the release answers RELEASED.
TEST_F(RedisAcl, ReleaseRefusedByTheAclChangesNothing) {
    make_user("dlock-revoked", {"~dlock:*", "&dlock:*"});
    auto client = dlock::client::open(dsn_for("dlock-revoked"));
    auto a = client.acquire("faults/acl-revoked", dlock::acquire_options().with_wait(0ms).with_ttl(20s));
    redis().checked({"ACL", "SETUSER", "dlock-revoked", "resetchannels"});
    std::error_code ec;
    const auto first = a.release(ec);
    const std::string message = dlock_last_error();
    // The release contract has three outcomes: a refusal is UNKNOWN (the lease is still ours, the
    // call safe to retry), and the message names the permission that is missing.
    EXPECT_EQ(first, dlock::release_outcome::unknown);
    EXPECT_NE(message.find("permission"), std::string::npos) << message;
    EXPECT_EQ(redis().checked({"GET", "dlock:{faults/acl-revoked}:lock"}).text, a.owner()) << "the refused release deleted the lock";
    redis().checked({"ACL", "SETUSER", "dlock-revoked", "&dlock:*"});
    EXPECT_EQ(a.release(ec), dlock::release_outcome::released) << ec.message() << ": " << dlock_last_error();
    EXPECT_EQ(redis().checked({"EXISTS", "dlock:{faults/acl-revoked}:lock"}).integer, 0);
}

// Issue 28: the server runs a release but its answer is lost (the proxy blackholes server →
// client): the client reports UNKNOWN. The retry finds the key no longer ours — because the first
// attempt, sent while the lease was valid, deleted it — and must answer RELEASED, not ALREADY_LOST
// (docs/guarantees.md, "Releases in doubt"). For an exclusive and a shared hold.
TEST_F(RedisFaults, ReleaseRetriedAfterAnUnansweredReleaseAnswersReleased) {
    dlock::lab::tcp_proxy proxy(lab_->redis().client_endpoint());
    auto client = dlock::client::open(redis_dsn(proxy.listen_endpoint(), "command_timeout=500ms"));
    for (const bool shared : {false, true}) {
        const std::string name = shared ? "faults/release-unanswered-shared" : "faults/release-unanswered";
        auto lease = client.acquire(name, dlock::acquire_options().with_wait(0ms).with_ttl(30s).with_shared(shared));
        ASSERT_TRUE(lease);
        proxy.blackhole(dlock::lab::direction::downstream);
        std::error_code ec;
        EXPECT_EQ(lease.release(ec), dlock::release_outcome::unknown) << (shared ? "shared: " : "") << "the answer was lost";
        EXPECT_EQ(redis().checked({"EXISTS", "dlock:{" + name + "}:lock"}).integer, 0) << "the server did run the first attempt";
        proxy.heal();
        EXPECT_EQ(lease.release(ec), dlock::release_outcome::released)
            << (shared ? "shared: " : "") << ec.message() << ": " << dlock_last_error();
        EXPECT_EQ(lease.state(), dlock::lease_state::released);
    }
}

// Issue 28 (review of the fix above): A's release is sent while the lease is valid, but the proxy
// holds client → server traffic, so it never reaches the server (UNKNOWN). A's lease ends; another
// client takes the name; the proxy's connections are reset (the held release is discarded) and
// healed; A retries. Exclusive: B takes the expired key, and A's retry finds B's key — which it
// cannot tell from B having taken the name after A's first attempt ran (the test below): RELEASED,
// as on etcd, zookeeper and sql (docs/guarantees.md, "Releases in doubt"). Shared: reader B joins
// while A is valid, so A's expired member is still in the set at the retry — proof the first
// attempt never ran: ALREADY_LOST.
void RedisFaults::retry_release_after_another_took_the_name(bool shared, dlock::release_outcome expected) {
    dlock::lab::tcp_proxy proxy(lab_->redis().client_endpoint());
    auto client = dlock::client::open(redis_dsn(proxy.listen_endpoint(), "command_timeout=500ms"));
    auto other = dlock::client::open(config(backend::redis));
    const std::string name = shared ? "faults/release-retried-other-shared" : "faults/release-retried-other";
    const std::string what = shared ? "shared: " : "exclusive: ";
    const auto opts = dlock::acquire_options().with_wait(0ms).with_ttl(2s).with_renew(false).with_shared(shared);
    auto a = client.acquire(name, opts);
    ASSERT_TRUE(a);
    const auto acquired_at = std::chrono::steady_clock::now();
    proxy.blackhole(dlock::lab::direction::upstream);
    std::error_code ec;
    EXPECT_EQ(a.release(ec), dlock::release_outcome::unknown) << what << "the release never reached the server";
    dlock::lease b;
    if (shared) {  // joins A while A's member is live: A's member stays in the set, expired
        b = other.acquire(name, dlock::acquire_options().with_wait(0ms).with_ttl(30s).with_shared(true));
        ASSERT_TRUE(b) << what << dlock_last_error();
    }
    std::this_thread::sleep_until(acquired_at + 2500ms);  // A's lease is over
    if (!shared) {
        b = other.acquire(name, dlock::acquire_options().with_wait(2s).with_ttl(30s));
        ASSERT_TRUE(b) << what << dlock_last_error();
    }
    EXPECT_EQ(b.state(), dlock::lease_state::held);
    proxy.cut_all();  // the held release is dropped with the connection: it never runs
    proxy.heal();
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(a.release(ec), expected) << what << ec.message() << ": " << dlock_last_error();
    EXPECT_EQ(b.state(), dlock::lease_state::held) << what;
    b.renew(ec);
    EXPECT_FALSE(ec) << what << "B still holds the name: " << ec.message();
    EXPECT_EQ(b.release(), dlock::release_outcome::released) << what;
}

TEST_F(RedisFaults, RetriedReleaseFindingAnotherHoldersKeyAnswersReleasedAsOnSql) {
    retry_release_after_another_took_the_name(false, dlock::release_outcome::released);
}

TEST_F(RedisFaults, RetriedReleaseFindingOurExpiredMemberAnswersAlreadyLost) {
    retry_release_after_another_took_the_name(true, dlock::release_outcome::already_lost);
}

// Issue 28 (the contended case): A's release runs but its answer is lost (the proxy drops server →
// client): UNKNOWN. The release woke fair waiter W, who takes the name at once. A's retry, with 28 s
// of A's validity left, finds W's key (or W's member): A's first attempt is what freed the name, so
// the answer is RELEASED, not ALREADY_LOST (docs/guarantees.md, "Releases in doubt").
TEST_F(RedisFaults, RetriedReleaseAfterAWaiterTookTheNameAnswersReleased) {
    dlock::lab::tcp_proxy proxy(lab_->redis().client_endpoint());
    auto client = dlock::client::open(redis_dsn(proxy.listen_endpoint(), "command_timeout=500ms"));
    auto other = dlock::client::open(config(backend::redis));
    for (const bool shared : {false, true}) {
        const std::string name = shared ? "faults/release-retried-waiter-shared" : "faults/release-retried-waiter";
        const std::string what = shared ? "shared: " : "exclusive: ";
        auto a = client.acquire(name, dlock::acquire_options().with_wait(0ms).with_ttl(30s).with_renew(false).with_shared(shared));
        ASSERT_TRUE(a);
        dlock::lease w;
        std::thread waiter([&] {  // exclusive and fair: queued behind A, woken by A's release
            w = other.acquire(name, dlock::acquire_options().with_wait(20s).with_ttl(30s).with_fair(true));
        });
        std::this_thread::sleep_for(500ms);  // W is queued
        proxy.blackhole(dlock::lab::direction::downstream);
        std::error_code ec;
        EXPECT_EQ(a.release(ec), dlock::release_outcome::unknown) << what << "the answer was lost";
        waiter.join();
        ASSERT_TRUE(w) << what << "W was granted once A's release ran: " << dlock_last_error();
        proxy.heal();
        EXPECT_EQ(a.release(ec), dlock::release_outcome::released) << what << ec.message() << ": " << dlock_last_error();
        EXPECT_EQ(a.state(), dlock::lease_state::released) << what;
        EXPECT_EQ(w.state(), dlock::lease_state::held) << what;
        EXPECT_EQ(w.release(), dlock::release_outcome::released) << what;
    }
}

// A fence key whose value INCR refuses ("1.5", " 7", a negative number, INT64_MAX: it would
// overflow) is a clear error, and no lock key is set without a token.
TEST_F(RedisFaults, MalformedFenceKeysLeaveNoLockBehind) {
    auto client = dlock::client::open(config(backend::redis));
    auto raw = redis();
    for (const std::string value : {"1.5", " 7", "-3", "007", "9223372036854775807"}) {
        raw.checked({"SET", "dlock:{faults/fence}:fence", value});
        std::error_code ec;
        auto lease = client.acquire("faults/fence", dlock::acquire_options().with_wait(0ms), ec);
        EXPECT_EQ(ec, dlock::errc::backend) << "fence `" << value << "`: " << ec.message();
        EXPECT_NE(std::string(dlock_last_error()).find("fence"), std::string::npos) << dlock_last_error();
        EXPECT_EQ(raw.checked({"EXISTS", "dlock:{faults/fence}:lock"}).integer, 0) << "fence `" << value << "` left a lock key";
        EXPECT_EQ(raw.checked({"GET", "dlock:{faults/fence}:fence"}).text, value) << "the fence key was changed";
        raw.checked({"DEL", "dlock:{faults/fence}:lock"});
    }
}

TEST_F(RedisFaults, UnreachableServerIsUnavailableAtOpen) {
    dlock_client* c = nullptr;
    EXPECT_EQ(dlock_client_open("redis://127.0.0.1:1", &c), DLOCK_UNAVAILABLE);
    EXPECT_NE(std::string(dlock_last_error()).find("127.0.0.1:1"), std::string::npos) << dlock_last_error();
}

}  // namespace

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    dlock::lab::add_lab_environment({backend::redis, backend::redlock});
    return RUN_ALL_TESTS();
}
