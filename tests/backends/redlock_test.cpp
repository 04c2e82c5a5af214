// The `redlock` backend under faults that concern its rounds, its fan-out and its waiters, on the
// lab's five independent Redis nodes: a late node that executes a failed round's requests after
// the next round won, one node paused for longer than several ttls, waiters whose watched node
// misses the release, a failed acquisition on paused nodes, a release a quorum refuses, and a
// waiter woken by a release, which must retry without the split-vote pause.
// (The docs/design/faults.md scenarios redlock shares with `redis` are in redis_test.cpp.)
#include "backend_test.hpp"
#include "redis_common.hpp"
#include "support.hpp"

#include "dlock/lab/gtest.hpp"
#include "dlock/lab/proxy.hpp"

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <functional>
#include <future>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using dlock::lab::backend;

namespace {

using steady = std::chrono::steady_clock;

std::string lock_key(const std::string& name) { return "dlock:{" + name + "}:lock"; }

// Runs `action` when the scope ends (a paused node must be resumed however a test ends).
struct on_exit {
    std::function<void()> action;
    ~on_exit() { action(); }
};

// Starts `client.acquire(name)` on another thread; the future yields the lease (empty when the
// acquire failed) and when the acquire returned.
std::future<std::pair<dlock::lease, steady::time_point>> acquire_in_background(dlock::client& client, const std::string& name,
                                                                              std::chrono::milliseconds wait,
                                                                              std::chrono::milliseconds ttl) {
    return std::async(std::launch::async, [&client, name, wait, ttl] {
        std::error_code ec;
        auto lease = client.acquire(name, dlock::acquire_options().with_wait(wait).with_ttl(ttl), ec);
        return std::make_pair(std::move(lease), steady::now());
    });
}

class RedlockFaults : public dlock::test::lab_backend_test {
protected:
    RedlockFaults() : lab_backend_test({backend::redlock}) {}

    std::string config() { return lab_backend_test::config(backend::redlock); }
    dlock::lab::redis_server& node(size_t i) { return lab_->redlock().node(i); }
    bool key_exists(size_t i, const std::string& name) {
        return node(i).client().checked({"EXISTS", lock_key(name)}).integer == 1;
    }
    void retry_release_after_another_took_the_name(bool shared, dlock::release_outcome expected);
    // A key of some other client on node i (the lock as another, failed or expiring, holder left it).
    void foreign_key(size_t i, const std::string& name) {
        node(i).client().checked({"SET", lock_key(name), std::string(32, 'e'), "PX", "60000"});
    }
    // A config reaching node 0 at `node0` (a proxy) and the other nodes directly.
    std::string config_with_node0_at(const dlock::lab::endpoint& node0, const std::string& extra_options) {
        std::string endpoints = "\"" + node0.to_string() + "\"";
        for (size_t i = 1; i < 5; ++i) endpoints += ", \"" + node(i).client_endpoint().to_string() + "\"";
        const std::string path = dir_.path() + "/redlock.yaml";
        std::ofstream(path) << "backend: redlock\noptions:\n  endpoints: [" << endpoints << "]\n" << extra_options;
        return path;
    }

    // Commands the clients sent to the five nodes so far (INFO commandstats: not the commands the
    // scripts ran, nor INFO itself); only `command` when one is named.
    int64_t commands_sent_by_clients(const std::string& command_named = "") {
        static const std::set<std::string> run_by_scripts = {"get",  "set",    "incr",  "del",    "publish",
                                                             "pttl", "pexpire", "time", "zadd",  "zrem",
                                                             "zrange", "zrangebyscore", "zscore", "zcard", "exists"};
        int64_t total = 0;
        for (size_t i = 0; i < 5; ++i) {
            std::istringstream lines(node(i).client().checked({"INFO", "commandstats"}).text);
            for (std::string line; std::getline(lines, line);) {
                if (line.rfind("cmdstat_", 0) != 0) continue;
                const std::string command = line.substr(8, line.find(':') - 8);
                if (command == "info" || run_by_scripts.count(command)) continue;
                if (!command_named.empty() && command != command_named) continue;
                total += std::stoll(line.substr(line.find("calls=") + 6));
            }
        }
        return total;
    }

    dlock::test::scratch_dir dir_{"dlock-redlock-test"};
};

// Every round of one acquisition writes its own value. Round 1's requests to node 0 are held back
// by a proxy (1.5 s, client to server only) so the round fails: nodes 1 and 2 hold another
// client's key, nodes 3 and 4 grant, node 0 is late. Round 1's release is pipelined behind its SET
// on node 0's connection, which is then given up. Round 2 reaches node 0 on a fresh connection and
// wins with exactly a quorum (0, 3, 4). Then round 1's held-back SET and release reach node 0: the
// release must not delete round 2's key there, or a third client gets a quorum from nodes 0, 1, 2
// once the other client's keys go away — two holders at once.
TEST_F(RedlockFaults, StaleReleaseOfAFailedRoundSparesTheNextRoundsKey) {
    const std::string name = "redlock/stale-round";
    dlock::lab::tcp_proxy proxy(node(0).client_endpoint());
    auto client = dlock::client::open(config_with_node0_at(proxy.listen_endpoint(), "  command_timeout: 300ms\n"));
    foreign_key(1, name);
    foreign_key(2, name);

    proxy.set_delay(1500ms, 0us);
    const auto started = steady::now();
    auto acquiring = std::async(std::launch::async, [&] {
        return client.acquire(name, dlock::acquire_options().with_wait(5s).with_ttl(20s));
    });
    std::this_thread::sleep_for(200ms);  // round 1 is sent (and held back); round 2 starts at >= 300 ms
    proxy.set_delay(0us, 0us);
    dlock::lease a = acquiring.get();
    const auto acquired_after = steady::now() - started;
    ASSERT_TRUE(a);
    EXPECT_GE(acquired_after, 300ms) << "round 1 should have failed on its late node";
    EXPECT_LT(acquired_after, 1500ms) << "round 2 should have won before round 1's requests reached node 0";

    std::this_thread::sleep_for(steady::duration(2200ms) - (steady::now() - started));  // round 1's bytes arrived
    EXPECT_GT(proxy.stats().bytes_upstream, 0u);
    EXPECT_TRUE(key_exists(0, name)) << "round 1's late release deleted round 2's key on node 0";
    node(1).client().checked({"DEL", lock_key(name)});
    node(2).client().checked({"DEL", lock_key(name)});
    auto other = dlock::client::open(config());
    std::error_code ec;
    auto b = other.acquire(name, dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a second client got a quorum while the first holds the lock";
    EXPECT_FALSE(b);
    EXPECT_EQ(a.state(), dlock::lease_state::held);
    EXPECT_EQ(client.inspect(name).holder, a.owner());
    EXPECT_EQ(a.release(), dlock::release_outcome::released);
}

// One node SIGSTOPped for 30 s (three ttls): the four others are a quorum, so every renewal must
// succeed and the release must answer RELEASED, however long reconnecting to the paused node takes.
TEST_F(RedlockFaults, OneNodePausedKeepsTheLeaseHeldAndReleasable) {
    const std::string name = "redlock/one-paused";
    auto client = dlock::client::open(config());
    auto lease = client.acquire(name, dlock::acquire_options().with_wait(0ms).with_ttl(10s));
    ASSERT_TRUE(lease);
    node(0).pause();
    on_exit resume{[&] { node(0).resume(); }};
    const auto until = steady::now() + 30s;
    while (steady::now() < until && lease.state() == dlock::lease_state::held) std::this_thread::sleep_for(100ms);
    EXPECT_EQ(lease.state(), dlock::lease_state::held) << "lost or suspect with 4 of 5 nodes healthy";
    EXPECT_EQ(lease.release(), dlock::release_outcome::released) << dlock_last_error();
    for (size_t i = 1; i < 5; ++i) EXPECT_FALSE(key_exists(i, name)) << "our key is left on node " << i;
}

// The waiter's first node has another client's key, so the holder's key (on nodes 1-4) is not
// there and its release publishes nowhere the waiter would listen if it watched node 0 only.
TEST_F(RedlockFaults, WaiterWakesWhenTheReleaseSkipsItsFirstNode) {
    const std::string name = "redlock/wake-skipped";
    foreign_key(0, name);
    auto holder_client = dlock::client::open(config());
    auto a = holder_client.acquire(name, dlock::acquire_options().with_wait(0ms).with_ttl(30s));
    ASSERT_TRUE(a);
    auto waiter_client = dlock::client::open(config());
    auto waiting = acquire_in_background(waiter_client, name, 8s, 10s);
    std::this_thread::sleep_for(700ms);  // the waiter is waiting
    const auto released_at = steady::now();
    EXPECT_EQ(a.release(), dlock::release_outcome::released);
    auto [b, acquired_at] = waiting.get();
    ASSERT_TRUE(b) << "the waiter never got the released lock";
    EXPECT_LT(acquired_at - released_at, 3s) << "the waiter slept through the release";
}

// The waiter's first node is paused while it waits: the release cannot publish there, and the
// waiter's subscription to it neither drops nor hears anything.
TEST_F(RedlockFaults, WaiterWakesWithItsFirstNodePaused) {
    const std::string name = "redlock/wake-paused";
    auto holder_client = dlock::client::open(config());
    auto a = holder_client.acquire(name, dlock::acquire_options().with_wait(0ms).with_ttl(30s));
    ASSERT_TRUE(a);
    auto waiter_client = dlock::client::open(config());
    auto waiting = acquire_in_background(waiter_client, name, 8s, 10s);
    std::this_thread::sleep_for(700ms);  // the waiter watches the channel
    node(0).pause();
    on_exit resume{[&] { node(0).resume(); }};
    const auto released_at = steady::now();
    EXPECT_EQ(a.release(), dlock::release_outcome::released) << dlock_last_error();
    auto [b, acquired_at] = waiting.get();
    ASSERT_TRUE(b) << "the waiter never got the released lock";
    EXPECT_LT(acquired_at - released_at, 3s) << "the waiter slept through the release";
}

// A failed acquisition leaves nothing behind on paused nodes: every round that reached a node
// gives its key back on the same connection, behind the SET, so the node runs SET then release
// when it wakes; a later round never sends a release on another connection, which could overtake
// the still-queued SET.
TEST_F(RedlockFaults, FailedAcquireOnPausedNodesLeavesNoKey) {
    const std::string name = "redlock/paused-majority";
    auto client = dlock::client::open(config());
    for (size_t i = 0; i < 3; ++i) node(i).pause();
    on_exit resume{[&] {
        for (size_t i = 0; i < 3; ++i) node(i).resume();
    }};
    std::error_code ec;
    auto lease = client.acquire(name, dlock::acquire_options().with_wait(1500ms), ec);
    EXPECT_TRUE(ec) << "no quorum, yet acquired";
    EXPECT_FALSE(lease);
    for (size_t i = 0; i < 3; ++i) node(i).resume();
    std::this_thread::sleep_for(500ms);
    for (size_t i = 0; i < 5; ++i) EXPECT_FALSE(key_exists(i, name)) << "a failed acquire left a key on node " << i;
}

// A quorum answers "not ours" (the key expired or was taken there) and a node is silent: the
// silent node cannot change that a quorum can never confirm the lease, so the release is
// ALREADY_LOST, not UNKNOWN.
TEST_F(RedlockFaults, ReleaseRefusedByAQuorumIsAlreadyLost) {
    const std::string name = "redlock/refused-release";
    auto client = dlock::client::open(config());
    auto lease = client.acquire(name, dlock::acquire_options().with_wait(0ms).with_ttl(30s));
    ASSERT_TRUE(lease);
    for (size_t i = 0; i < 3; ++i) node(i).client().checked({"DEL", lock_key(name)});
    node(3).pause();
    on_exit resume{[&] { node(3).resume(); }};
    EXPECT_EQ(lease.release(), dlock::release_outcome::already_lost) << dlock_last_error();
    EXPECT_FALSE(key_exists(4, name)) << "the release must still delete our key where it was ours";
}

// A waiter woken by a release retries at once: the random pause of up to `retry_delay` belongs
// only after a split vote, where waiters woken together would otherwise keep splitting. Here the
// waiter's round before the release was refused by every node (the lock clearly held), so its
// next round starts on the release message. retry_delay 200ms: a jittered retry would put the
// median handoff near 100 ms; the bound of 15 ms leaves a wide margin for a loaded machine.
TEST_F(RedlockFaults, WaiterWokenByAReleaseRetriesWithoutJitter) {
    const std::string name = "redlock/handoff-no-jitter";
    const std::string path = config_with_node0_at(node(0).client_endpoint(), "  retry_delay: 200ms\n");
    auto holder_client = dlock::client::open(path);
    auto waiter_client = dlock::client::open(path);
    std::vector<std::chrono::microseconds> handoffs;
    for (int i = 0; i < 20; ++i) {
        auto a = holder_client.acquire(name, dlock::acquire_options().with_wait(2s).with_ttl(30s));
        ASSERT_TRUE(a) << "handoff " << i;
        auto waiting = acquire_in_background(waiter_client, name, 5s, 30s);
        std::this_thread::sleep_for(80ms);  // the waiter has failed a round and listens
        const auto released_at = steady::now();
        ASSERT_EQ(a.release(), dlock::release_outcome::released) << "handoff " << i;
        auto [b, acquired_at] = waiting.get();
        ASSERT_TRUE(b) << "handoff " << i << ": the waiter never got the released lock";
        handoffs.push_back(std::chrono::duration_cast<std::chrono::microseconds>(acquired_at - released_at));
        EXPECT_EQ(b.release(), dlock::release_outcome::released);
    }
    std::sort(handoffs.begin(), handoffs.end());
    const auto median = handoffs[handoffs.size() / 2];
    RecordProperty("median_handoff_us", std::to_string(median.count()));
    EXPECT_LT(median.count(), 15000) << "median handoff " << median.count() << " us (min " << handoffs.front().count()
                            << " us, max " << handoffs.back().count() << " us)";
}

// A node that answers but whose ACL user may not publish or subscribe on dlock's channels is an
// error at open, not a warning: that node would refuse every release (the script publishes before
// it deletes) and never wake a waiter. A node that is down stays a warning (a quorum may be up).
TEST_F(RedlockFaults, NodeWhoseUserLacksARightIsRefusedAtOpen) {
    const std::vector<std::string> commands = {"+eval", "+evalsha", "+script|load", "+get", "+set", "+incr", "+pttl",
                                               "+pexpire", "+del", "+publish", "+subscribe", "+unsubscribe", "+time",
                                               "+zadd", "+zrem", "+zrange", "+zrangebyscore", "+zscore", "+ping",
                                               "+config|get"};
    const std::string user = "dlock-redlock-acl";
    on_exit remove_user{[&] {
        for (size_t i = 0; i < 5; ++i) node(i).client().command({"ACL", "DELUSER", user});
    }};
    for (size_t i = 0; i < 5; ++i) {
        std::vector<std::string> cmd = {"ACL", "SETUSER", user, "reset", "on", ">pw-redlock", "~dlock:*"};
        cmd.push_back(i == 2 ? "resetchannels" : "&dlock:*");
        cmd.insert(cmd.end(), commands.begin(), commands.end());
        node(i).client().checked(cmd);
    }
    std::string endpoints;
    for (size_t i = 0; i < 5; ++i) endpoints += (i ? ", \"" : "\"") + node(i).client_endpoint().to_string() + "\"";
    const std::string path = dir_.path() + "/redlock-acl.yaml";
    std::ofstream(path) << "backend: redlock\noptions:\n  endpoints: [" << endpoints << "]\n  username: " << user
                        << "\n  password: pw-redlock\n";
    dlock_client* c = nullptr;
    EXPECT_EQ(dlock_client_open(path.c_str(), &c), DLOCK_PERMISSION);
    const std::string message = dlock_last_error();
    EXPECT_NE(message.find(node(2).client_endpoint().to_string()), std::string::npos) << "names the node: " << message;
    EXPECT_NE(message.find("&dlock:*"), std::string::npos) << "says what to grant: " << message;
    EXPECT_EQ(message.find("pw-redlock"), std::string::npos) << "the password is never echoed: " << message;
    if (c) dlock_client_close(c);
}

// Server work per handoff does not grow with the number of waiters: a release wakes only the next
// waiter, so a contended cycle costs each node the waiter's refused round, the holder's release and
// the woken waiter's winning round (3 per node, 15 over the 5 nodes; benchmarks/suite/probes_common.cpp
// contended_minimum). The bound asserted is twice that, counted by the nodes themselves (INFO
// commandstats: what clients sent, not the commands the scripts ran), with 24 waiters each cycling
// on one name. A release that wakes every waiter costs O(waiters) rounds per handoff instead.
TEST_F(RedlockFaults, ServerCommandsPerHandoffStayBoundedWithManyWaiters) {
    constexpr int waiters = 24;
    constexpr int cycles_each = 12;
    const std::string name = "redlock/many-waiters";
    std::vector<dlock::client> clients;
    for (int i = 0; i < waiters; ++i) clients.push_back(dlock::client::open(config()));
    // One contended pass first: connections and subscriptions are made once per client, not per handoff.
    const auto run = [&](int cycles) {
        std::atomic<int> failures{0};
        std::vector<std::thread> threads;
        for (int i = 0; i < waiters; ++i)
            threads.emplace_back([&, i] {
                for (int c = 0; c < cycles; ++c) {
                    std::error_code ec;
                    auto lease = clients[i].acquire(name, dlock::acquire_options().with_wait(60s).with_ttl(30s), ec);
                    if (!lease) {
                        ++failures;
                        continue;
                    }
                    std::this_thread::sleep_for(5ms);  // every other waiter is parked by now
                    if (lease.release() != dlock::release_outcome::released) ++failures;
                }
            });
        for (auto& t : threads) t.join();
        return failures.load();
    };
    ASSERT_EQ(run(2), 0);
    const int64_t before = commands_sent_by_clients();
    ASSERT_EQ(run(cycles_each), 0);
    const int64_t after = commands_sent_by_clients();
    const double per_cycle = double(after - before) / (waiters * cycles_each);
    RecordProperty("commands_per_cycle", std::to_string(per_cycle));
    std::cout << "[redlock] " << waiters << " waiters: " << per_cycle << " commands per cycle over 5 nodes\n";
    EXPECT_LE(per_cycle, 30.0) << "a handoff costs more than twice the 15 commands of a targeted wake";
}

// The same bound with many waiters sharing each client, every one a thread that waits once (the
// shape of the benchmark's S3 at 1 000 waiters: 25 processes x 40 threads, one cycle per thread):
// a thread's first wait costs its channel's subscription on each node, and no more than that. A
// waiter subscribed only after its first round was refused needs a second round (a release during
// the subscription would go unheard); a woken waiter that retries at the first node's message is
// refused by the nodes that have not run the release yet; a refused round that gives back on every
// node that had not answered yet gives back where nothing was granted.
TEST_F(RedlockFaults, ServerCommandsPerHandoffStayBoundedWithManyThreadsPerClient) {
    constexpr int client_count = 4;
    constexpr int threads_each = 30;
    const std::string name = "redlock/many-threads";
    std::vector<dlock::client> clients;
    for (int i = 0; i < client_count; ++i) clients.push_back(dlock::client::open(config()));
    // Each thread of each client takes the lock once; new threads every run. They all queue behind
    // a holder first (which releases once they have all had time to queue), so that what is counted
    // is handoffs, not the race of simultaneous arrivals for a free lock nobody queues for.
    auto holder_client = dlock::client::open(config());
    const auto run = [&] {
        std::atomic<int> failures{0};
        auto holder = holder_client.acquire(name, dlock::acquire_options().with_wait(10s).with_ttl(30s));
        if (!holder) return -1;
        std::vector<std::thread> threads;
        for (int i = 0; i < client_count; ++i)
            for (int t = 0; t < threads_each; ++t)
                threads.emplace_back([&, i] {
                    std::error_code ec;
                    auto lease = clients[i].acquire(name, dlock::acquire_options().with_wait(60s).with_ttl(30s), ec);
                    if (!lease) {
                        ++failures;
                        return;
                    }
                    std::this_thread::sleep_for(2ms);
                    if (lease.release() != dlock::release_outcome::released) ++failures;
                });
        std::this_thread::sleep_for(500ms);
        if (holder.release() != dlock::release_outcome::released) ++failures;
        for (auto& t : threads) t.join();
        return failures.load();
    };
    ASSERT_EQ(run(), 0);  // the clients' connections and subscribers exist from here on
    const int64_t before = commands_sent_by_clients(), subscribes_before = commands_sent_by_clients("subscribe");
    ASSERT_EQ(run(), 0);
    const int64_t after = commands_sent_by_clients(), subscribes_after = commands_sent_by_clients("subscribe");
    const double cycles = client_count * threads_each;
    const double subscribes = double(subscribes_after - subscribes_before) / cycles;
    const double per_handoff = double(after - before) / cycles - subscribes;
    RecordProperty("commands_per_cycle", std::to_string(per_handoff + subscribes));
    std::cout << "[redlock] " << client_count << " clients x " << threads_each << " threads, one cycle each: " << per_handoff
              << " commands per cycle over 5 nodes, and " << subscribes << " SUBSCRIBEs per thread\n";
    // A new thread subscribes its channel once on each node: a cost per thread, not per handoff.
    EXPECT_LE(subscribes, 5.0) << "a thread subscribes its channel once per node";
    EXPECT_LE(per_handoff, 30.0) << "a new thread's handoff costs more than twice the 15 commands of a targeted wake";
}

// FIFO across nodes when a waiter's entry is missing on a majority of nodes (their data lost): the
// nodes then disagree on the first waiter — the lost one is first on nodes 0 and 1 only, the next
// one on nodes 2..4. Both must still get the lock, in turn, soon after the release: no deadlock
// of split votes, and never two holders at once (the lock keys' quorum decides).
TEST_F(RedlockFaults, FirstWaiterMissingOnAMajorityOfNodesDelaysNobody) {
    const std::string name = "redlock/fifo-minority-head";
    const std::string queue = "dlock:{" + name + "}:redlock-queue";
    auto holder_client = dlock::client::open(config());
    auto first_client = dlock::client::open(config());
    auto second_client = dlock::client::open(config());
    auto holder = holder_client.acquire(name, dlock::acquire_options().with_wait(2s).with_ttl(30s));
    ASSERT_TRUE(holder);
    std::atomic<int> inside{0}, overlaps{0};
    const auto take_turn = [&](dlock::client& c) {
        return std::async(std::launch::async, [&] {
            std::error_code ec;
            auto lease = c.acquire(name, dlock::acquire_options().with_wait(10s).with_ttl(30s), ec);
            const auto acquired_at = steady::now();
            if (!lease) return std::make_pair(false, acquired_at);
            if (++inside > 1) ++overlaps;
            std::this_thread::sleep_for(20ms);
            --inside;
            lease.release();
            return std::make_pair(true, acquired_at);
        });
    };
    auto first = take_turn(first_client);
    for (int i = 0; i < 200 && node(4).client().checked({"ZCARD", queue}).integer < 1; ++i) std::this_thread::sleep_for(10ms);
    std::this_thread::sleep_for(300ms);  // it listens and has made its last round before the release
    for (size_t i = 2; i < 5; ++i) {
        ASSERT_EQ(node(i).client().checked({"ZCARD", queue}).integer, 1) << "the first waiter queued on node " << i;
        node(i).client().checked({"DEL", queue});  // its entry lost there
    }
    auto second = take_turn(second_client);
    for (int i = 0; i < 200 && node(4).client().checked({"ZCARD", queue}).integer < 1; ++i) std::this_thread::sleep_for(10ms);
    ASSERT_EQ(node(0).client().checked({"ZCARD", queue}).integer, 2);
    ASSERT_EQ(node(4).client().checked({"ZCARD", queue}).integer, 1);
    const auto released_at = steady::now();
    ASSERT_EQ(holder.release(), dlock::release_outcome::released);
    const auto [first_ok, first_at] = first.get();
    const auto [second_ok, second_at] = second.get();
    EXPECT_TRUE(first_ok && second_ok) << "a waiter never got the lock";
    EXPECT_EQ(overlaps.load(), 0);
    const auto last = std::max(first_at, second_at) - released_at;
    RecordProperty("both_acquired_ms", std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(last).count()));
    // Two holdings of 20 ms and at most a split vote's pause (retry_delay, 50 ms) each, with room for a loaded machine.
    EXPECT_LT(last, 2s) << "both waiters took " << std::chrono::duration_cast<std::chrono::milliseconds>(last).count() << " ms";
}

// A waiter that died in the queue leaves no lasting hole: a first entry on every node whose waiter
// nobody hears (no subscriber on its channel) is skipped by the release, which wakes the next one.
TEST_F(RedlockFaults, DeadFirstWaiterIsSkippedAtTheRelease) {
    const std::string name = "redlock/dead-first-waiter";
    const std::string queue = "dlock:{" + name + "}:redlock-queue";
    auto holder_client = dlock::client::open(config());
    auto waiter_client = dlock::client::open(config());
    auto holder = holder_client.acquire(name, dlock::acquire_options().with_wait(2s).with_ttl(30s));
    ASSERT_TRUE(holder);
    // The dead waiter arrived a minute ago; its entry would lapse only in a minute.
    const auto now_us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch());
    const std::string arrived = std::to_string((now_us - std::chrono::minutes(1)).count());
    for (size_t i = 0; i < 5; ++i) {
        const int64_t lapses = node(i).client().checked({"EVAL", "local t = redis.call('TIME') return t[1] * 1000 + 60000", "0"}).integer;
        node(i).client().checked({"ZADD", queue, arrived, "dead-waiter"});
        node(i).client().checked({"ZADD", queue + "-lapses", std::to_string(lapses), "dead-waiter"});
    }
    auto waiting = acquire_in_background(waiter_client, name, 10s, 30s);
    std::this_thread::sleep_for(200ms);  // queued behind the dead waiter, listening
    const auto released_at = steady::now();
    ASSERT_EQ(holder.release(), dlock::release_outcome::released);
    auto [lease, acquired_at] = waiting.get();
    ASSERT_TRUE(lease) << "the waiter behind a dead one never got the lock";
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(acquired_at - released_at);
    RecordProperty("handoff_ms", std::to_string(took.count()));
    EXPECT_LT(took, 400ms) << "the handoff waited " << took.count() << " ms for the dead waiter";
    EXPECT_EQ(node(0).client().checked({"ZSCORE", queue, "dead-waiter"}).type, dlock::lab::redis_reply::kind::nil)
        << "the dead waiter's entry was dropped";
}

// Issue 28: a release whose answers are lost. Nodes 0-2 are reached through proxies that blackhole
// server → client, so only nodes 3 and 4 confirm the first release: 2 of 5, no quorum either way,
// UNKNOWN. It ran on a quorum (observed: nodes 0, 3 and 4; nodes 1 and 2 kept the key until the
// retry, which released it there). The retry finds our key gone from a quorum — our own first
// attempt, sent while the lease was valid, deleted it — and must answer RELEASED, not ALREADY_LOST
// (docs/guarantees.md, "Releases in doubt"). For an exclusive and a shared hold.
TEST_F(RedlockFaults, ReleaseRetriedAfterAnUnansweredReleaseAnswersReleased) {
    std::vector<std::unique_ptr<dlock::lab::tcp_proxy>> proxies;
    std::string endpoints;
    for (size_t i = 0; i < 5; ++i) {
        dlock::lab::endpoint where = node(i).client_endpoint();
        if (i < 3) {
            proxies.push_back(std::make_unique<dlock::lab::tcp_proxy>(where));
            where = proxies.back()->listen_endpoint();
        }
        endpoints += (i ? ", \"" : "\"") + where.to_string() + "\"";
    }
    const std::string path = dir_.path() + "/redlock-release-unanswered.yaml";
    std::ofstream(path) << "backend: redlock\noptions:\n  endpoints: [" << endpoints << "]\n  command_timeout: 300ms\n";
    auto client = dlock::client::open(path);
    for (const bool shared : {false, true}) {
        const std::string name = shared ? "redlock/release-unanswered-shared" : "redlock/release-unanswered";
        auto lease = client.acquire(name, dlock::acquire_options().with_wait(0ms).with_ttl(30s).with_shared(shared));
        ASSERT_TRUE(lease);
        for (auto& p : proxies) p->blackhole(dlock::lab::direction::downstream);
        std::error_code ec;
        EXPECT_EQ(lease.release(ec), dlock::release_outcome::unknown) << (shared ? "shared: " : "") << dlock_last_error();
        size_t gone = 0;
        for (size_t i = 0; i < 5; ++i) gone += key_exists(i, name) ? 0 : 1;
        EXPECT_GE(gone, 3u) << "the first attempt ran on a quorum";
        for (auto& p : proxies) p->heal();
        EXPECT_EQ(lease.release(ec), dlock::release_outcome::released)
            << (shared ? "shared: " : "") << ec.message() << ": " << dlock_last_error();
        EXPECT_EQ(lease.state(), dlock::lease_state::released);
    }
}

// Issue 28 (review of the fix above): A's release is sent while the lease is valid, but every
// node's proxy holds client → server traffic, so it reaches no server (UNKNOWN). A's lease ends;
// another client takes the name on every node; the proxies' connections are reset (the held
// release is discarded) and healed; A retries. Exclusive: B takes the expired keys, and A's retry
// finds B's key on every node — which it cannot tell from B having taken the name after A's first
// attempt ran (the test below): RELEASED, as on etcd, zookeeper and sql (docs/guarantees.md,
// "Releases in doubt"). Shared: reader B joins while A is valid, so A's expired member is still in
// the sets at the retry — proof the first attempt never ran there: ALREADY_LOST.
void RedlockFaults::retry_release_after_another_took_the_name(bool shared, dlock::release_outcome expected) {
    std::vector<std::unique_ptr<dlock::lab::tcp_proxy>> proxies;
    std::string endpoints;
    for (size_t i = 0; i < 5; ++i) {
        proxies.push_back(std::make_unique<dlock::lab::tcp_proxy>(node(i).client_endpoint()));
        endpoints += (i ? ", \"" : "\"") + proxies.back()->listen_endpoint().to_string() + "\"";
    }
    const std::string path = dir_.path() + "/redlock-release-retried-other.yaml";
    std::ofstream(path) << "backend: redlock\noptions:\n  endpoints: [" << endpoints << "]\n  command_timeout: 300ms\n";
    auto client = dlock::client::open(path);
    auto other = dlock::client::open(config());
    const std::string name = shared ? "redlock/release-retried-other-shared" : "redlock/release-retried-other";
    const std::string what = shared ? "shared: " : "exclusive: ";
    const auto opts = dlock::acquire_options().with_wait(0ms).with_ttl(2s).with_renew(false).with_shared(shared);
    auto a = client.acquire(name, opts);
    ASSERT_TRUE(a);
    const auto acquired_at = steady::now();
    // The acquire may return on a quorum before a proxy forwarded the grant to the last node: only
    // the nodes that held A's key before the blackhole must still hold it after the UNKNOWN.
    std::vector<size_t> held;
    for (size_t i = 0; i < 5; ++i)
        if (key_exists(i, name)) held.push_back(i);
    ASSERT_GE(held.size(), 3u) << what;
    for (auto& p : proxies) p->blackhole(dlock::lab::direction::upstream);
    std::error_code ec;
    EXPECT_EQ(a.release(ec), dlock::release_outcome::unknown) << what << "the release reached no server";
    for (size_t i : held) EXPECT_TRUE(key_exists(i, name)) << what << "the first attempt must not run: node " << i;
    dlock::lease b;
    if (shared) {  // joins A while A's member is live: A's member stays in the sets, expired
        b = other.acquire(name, dlock::acquire_options().with_wait(0ms).with_ttl(30s).with_shared(true));
        ASSERT_TRUE(b) << what << dlock_last_error();
    }
    std::this_thread::sleep_until(acquired_at + 2500ms);  // A's lease is over
    if (!shared) {
        b = other.acquire(name, dlock::acquire_options().with_wait(2s).with_ttl(30s));
        ASSERT_TRUE(b) << what << dlock_last_error();
    }
    for (auto& p : proxies) {
        p->cut_all();  // the held release is dropped with the connections: it never runs
        p->heal();
    }
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(a.release(ec), expected) << what << ec.message() << ": " << dlock_last_error();
    b.renew(ec);
    EXPECT_FALSE(ec) << what << "B still holds the name: " << ec.message();
    EXPECT_EQ(b.release(), dlock::release_outcome::released) << what;
}

TEST_F(RedlockFaults, RetriedReleaseFindingAnotherHoldersKeyAnswersReleasedAsOnSql) {
    retry_release_after_another_took_the_name(false, dlock::release_outcome::released);
}

TEST_F(RedlockFaults, RetriedReleaseFindingOurExpiredMemberAnswersAlreadyLost) {
    retry_release_after_another_took_the_name(true, dlock::release_outcome::already_lost);
}

// Issue 28: redlock issues no fencing token, so its grants bump no counter: no node has a fence key
// for a name locked exclusively or shared (the redis backend's INCR was run on every node before).
TEST_F(RedlockFaults, GrantsWriteNoFenceKey) {
    auto client = dlock::client::open(config());
    const std::string names[] = {"redlock/no-fence", "redlock/no-fence-shared"};
    auto x = client.acquire(names[0], dlock::acquire_options().with_wait(0ms).with_ttl(30s));
    auto s = client.acquire(names[1], dlock::acquire_options().with_wait(0ms).with_ttl(30s).with_shared(true));
    ASSERT_TRUE(x);
    ASSERT_TRUE(s);
    EXPECT_EQ(x.fencing_token(), 0u);
    for (size_t i = 0; i < 5; ++i)
        for (const auto& name : names)
            EXPECT_EQ(node(i).client().checked({"EXISTS", "dlock:{" + name + "}:fence"}).integer, 0)
                << "node " << i << " keeps a fence key for " << name;
    EXPECT_EQ(x.release(), dlock::release_outcome::released);
    EXPECT_EQ(s.release(), dlock::release_outcome::released);
}

// Issue 28: `break` with the operator's ACL line of docs/backends/redis.md ("Listing and breaking
// locks": the tenant's commands on `~dlock:* &dlock:*`, plus `+unlink +scan`) on every node, while
// an exclusive waiter held up by shared holders marks itself waiting on the nodes. The break must
// succeed and count the one shared holder (before: the script published to the bare mark's channel,
// which the ACL refuses, after the UNLINK: PERMISSION for a break that happened), and the waiting
// writer's marks stay (before, without ACLs: dropped as "nobody heard").
TEST_F(RedlockFaults, BreakWithTheOperatorAclSucceedsAndKeepsWritersMarks) {
    const std::vector<std::string> line = {"~dlock:*", "&dlock:*", "+eval", "+evalsha", "+script|load", "+get", "+set",
                                           "+incr", "+pttl", "+pexpire", "+del", "+time", "+zadd", "+zrem", "+zrange",
                                           "+zrangebyscore", "+zscore", "+publish", "+subscribe", "+unsubscribe", "+ping",
                                           "+unlink", "+scan"};
    const std::string user = "dlock-redlock-operator";
    on_exit remove_user{[&] {
        for (size_t i = 0; i < 5; ++i) node(i).client().command({"ACL", "DELUSER", user});
    }};
    for (size_t i = 0; i < 5; ++i) {
        std::vector<std::string> cmd = {"ACL", "SETUSER", user, "reset", "on", ">pw-operator"};
        cmd.insert(cmd.end(), line.begin(), line.end());
        node(i).client().checked(cmd);
    }
    std::string endpoints;
    for (size_t i = 0; i < 5; ++i) endpoints += (i ? ", \"" : "\"") + node(i).client_endpoint().to_string() + "\"";
    const std::string path = dir_.path() + "/redlock-operator.yaml";
    std::ofstream(path) << "backend: redlock\noptions:\n  endpoints: [" << endpoints << "]\n  username: " << user
                        << "\n  password: pw-operator\n";
    auto operator_ = dlock::client::open(path);
    auto reader_client = dlock::client::open(path);
    auto writer_client = dlock::client::open(path);
    const std::string name = "redlock/acl-break";
    const std::string marks = "dlock:{" + name + "}:queue";
    auto reader = reader_client.acquire(name, dlock::acquire_options().with_wait(0ms).with_ttl(3s).with_shared(true));
    ASSERT_TRUE(reader);
    auto writing = acquire_in_background(writer_client, name, 15s, 10s);
    for (int i = 0; i < 100 && node(0).client().checked({"ZCARD", marks}).integer == 0; ++i) std::this_thread::sleep_for(20ms);
    for (size_t i = 0; i < 5; ++i) ASSERT_EQ(node(i).client().checked({"ZCARD", marks}).integer, 1) << "the writer's mark, node " << i;
    std::error_code ec;
    size_t broken = 0;
    try {
        broken = operator_.break_lock(name);
    } catch (const std::system_error& e) {
        ADD_FAILURE() << "the operator's break failed: " << e.what() << ": " << dlock_last_error();
    }
    EXPECT_EQ(broken, 1u) << "one shared holder";
    reader.renew(ec);
    EXPECT_EQ(ec, dlock::errc::lost) << "the broken reader's next renewal";
    for (size_t i = 0; i < 5; ++i)
        EXPECT_EQ(node(i).client().checked({"ZCARD", marks}).integer, 1) << "the waiting writer's mark was dropped on node " << i;
    auto [writer, acquired_at] = writing.get();
    EXPECT_TRUE(writer) << "the waiting writer gets the lock once the broken reader's validity is over: " << dlock_last_error();
}

// Issue 28: the 7.0 guard of the break script checks SET as well as UNLINK for a tombstone: a user
// with +unlink but without +set would have the UNLINK done and the SET refused (a script's writes
// are not rolled back), leaving the name free beside the broken holder. Refused before any write.
TEST_F(RedlockFaults, BreakByAUserWithUnlinkButWithoutSetIsRefusedBeforeAnyWrite) {
    const std::vector<std::string> line = {"~dlock:*", "&dlock:*", "+eval", "+evalsha", "+script|load", "+get", "+unlink",
                                           "+incr", "+pttl", "+pexpire", "+del", "+time", "+zadd", "+zrem", "+zrange",
                                           "+zrangebyscore", "+zscore", "+publish", "+subscribe", "+unsubscribe", "+ping", "+scan"};
    const std::string user = "dlock-redlock-noset";
    on_exit remove_user{[&] {
        for (size_t i = 0; i < 5; ++i) node(i).client().command({"ACL", "DELUSER", user});
    }};
    for (size_t i = 0; i < 5; ++i) {
        std::vector<std::string> cmd = {"ACL", "SETUSER", user, "reset", "on", ">pw-noset"};
        cmd.insert(cmd.end(), line.begin(), line.end());
        node(i).client().checked(cmd);
    }
    // dlock's client refuses to open for such a user (it checks SET), so the script is run as the
    // user on node 0, as the client's break would.
    auto holder_client = dlock::client::open(config());
    const std::string name = "redlock/noset-break";
    auto holder = holder_client.acquire(name, dlock::acquire_options().with_wait(0ms).with_ttl(30s));
    ASSERT_TRUE(holder);
    std::vector<std::string> values;
    for (size_t i = 0; i < 5; ++i) values.push_back(node(i).client().checked({"GET", lock_key(name)}).text);
    auto as_user = node(0).client();
    as_user.checked({"AUTH", user, "pw-noset"});
    const std::string base = "dlock:{" + name + "}";
    const auto reply = as_user.command({"EVAL", dlock::redis_common::break_script.source(), "5", base + ":lock", base + ":fence",
                                        base + ":queue", base + ":queue-lapses", base + ":released", "lock", "0", "", "tombstone"});
    EXPECT_EQ(reply.type, dlock::lab::redis_reply::kind::error) << "the break ran for a user without +set: " << reply.text;
    EXPECT_EQ(dlock::redis_common::classify_error_reply("node 0", reply.text).status, DLOCK_PERMISSION) << reply.text;
    for (size_t i = 0; i < 5; ++i)
        EXPECT_EQ(node(i).client().checked({"GET", lock_key(name)}).text, values[i]) << "the refused break wrote on node " << i;
    EXPECT_EQ(holder.release(), dlock::release_outcome::released);
}

// Issue 28 (review): the tenant's ACL line of docs/backends/redis.md (no `+unlink`) may not break a
// redlock lock. Through the client on the lab's Redis 7: PERMISSION, and every node keeps the
// holder's key. And as a server before Redis 7.0 runs the script — no redis.acl_check_cmd, so the
// script's first guard is absent (replaced by `false` below): the tombstone branch must still be
// refused before it writes. Before the fix it wrote the tombstone with SET, a right every tenant
// has, so on Redis 5.0–6.2 any tenant could break any redlock lock; the branch now runs UNLINK
// first, which the server's ACL refuses with nothing written.
TEST_F(RedlockFaults, BreakByATenantWithoutUnlinkIsRefusedOnEveryServerVersion) {
    const std::vector<std::string> tenant_line = {"~dlock:*", "&dlock:*", "+eval", "+evalsha", "+script|load", "+get", "+set",
                                                  "+incr", "+pttl", "+pexpire", "+del", "+time", "+zadd", "+zrem", "+zrange",
                                                  "+zrangebyscore", "+zscore", "+publish", "+subscribe", "+unsubscribe", "+ping"};
    const std::string user = "dlock-redlock-tenant";
    on_exit remove_user{[&] {
        for (size_t i = 0; i < 5; ++i) node(i).client().command({"ACL", "DELUSER", user});
    }};
    for (size_t i = 0; i < 5; ++i) {
        std::vector<std::string> cmd = {"ACL", "SETUSER", user, "reset", "on", ">pw-tenant"};
        cmd.insert(cmd.end(), tenant_line.begin(), tenant_line.end());
        node(i).client().checked(cmd);
    }
    std::string endpoints;
    for (size_t i = 0; i < 5; ++i) endpoints += (i ? ", \"" : "\"") + node(i).client_endpoint().to_string() + "\"";
    const std::string path = dir_.path() + "/redlock-tenant.yaml";
    std::ofstream(path) << "backend: redlock\noptions:\n  endpoints: [" << endpoints << "]\n  username: " << user
                        << "\n  password: pw-tenant\n";
    auto tenant = dlock::client::open(path);
    auto holder_client = dlock::client::open(config());
    const std::string name = "redlock/tenant-break";
    auto holder = holder_client.acquire(name, dlock::acquire_options().with_wait(0ms).with_ttl(30s));
    ASSERT_TRUE(holder);
    std::vector<std::string> values;
    for (size_t i = 0; i < 5; ++i) values.push_back(node(i).client().checked({"GET", lock_key(name)}).text);

    try {
        tenant.break_lock(name);
        ADD_FAILURE() << "a tenant without +unlink broke a redlock lock";
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code(), dlock::errc::permission) << e.what() << ": " << dlock_last_error();
    }
    for (size_t i = 0; i < 5; ++i)
        EXPECT_EQ(node(i).client().checked({"GET", lock_key(name)}).text, values[i]) << "the refused break wrote on node " << i;

    // The script as a pre-7.0 server runs it (no redis.acl_check_cmd), run by the tenant on node 0.
    std::string source = dlock::redis_common::break_script.source();
    const std::string guard = "redis.acl_check_cmd and not redis.acl_check_cmd(";
    const size_t at = source.find(guard);
    ASSERT_NE(at, std::string::npos) << "break_script's ACL guard moved; update this test";
    source.replace(at, guard.size(), "false and not redis.acl_check_cmd(");
    auto as_tenant = node(0).client();
    as_tenant.checked({"AUTH", user, "pw-tenant"});
    const std::string base = "dlock:{" + name + "}";
    const auto reply = as_tenant.command({"EVAL", source, "5", base + ":lock", base + ":fence", base + ":queue",
                                          base + ":queue-lapses", base + ":released", "lock", "0", "", "tombstone"});
    EXPECT_EQ(reply.type, dlock::lab::redis_reply::kind::error) << "the pre-7.0 break ran for a tenant: " << reply.text;
    EXPECT_EQ(dlock::redis_common::classify_error_reply("node 0", reply.text).status, DLOCK_PERMISSION)
        << "the plugin reports the refusal as PERMISSION: " << reply.text;
    EXPECT_EQ(node(0).client().checked({"GET", lock_key(name)}).text, values[0]) << "the refused break wrote the tombstone";
    EXPECT_GT(node(0).client().checked({"PTTL", lock_key(name)}).integer, 20000) << "the refused break changed the key's expiry";
    EXPECT_EQ(holder.release(), dlock::release_outcome::released);
}

}  // namespace

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    dlock::lab::add_lab_environment({backend::redlock});
    return RUN_ALL_TESTS();
}
