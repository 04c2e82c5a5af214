// The `zookeeper` backend under the faults of docs/design/faults.md that concern it, on real servers from the
// lab (a standalone server and a 3-node ensemble, tickTime 200 ms: session timeouts 0.4 .. 4 s):
//   2  holder killed — the next holder gets the lock once the holder's session expired;
//   3  holder paused past the session timeout — its fenced write is rejected, it reports LOST;
//   10 leader killed or paused — held locks survive, waiters proceed; majority lost — no false success;
//   11 session expiry while holding — LOST before the waiter proceeds; connection loss during the
//      create — the node is found again by its guid (no ghost, no self-deadlock);
//   14 missing chroot, wrong credentials — clear errors; ACLs keep other identities out;
//   a queue node deleted by someone else — its holder reads LOST within a round trip, its waiter
//      queues again; a release of our own is never taken for a loss;
//   and the herd detector: with 100 waiters, each handoff costs O(1) server operations.
// Client-side faults (partitions, lost replies) go through the lab's TCP proxy.
#include "backend_test.hpp"
#include "support.hpp"

#include "dlock/lab/gtest.hpp"
#include "dlock/lab/port_cut.hpp"
#include "dlock/lab/proxy.hpp"

#include <dlock/dlock.hpp>

#ifndef THREADED
#define THREADED  // the C client's synchronous calls (libzookeeper_mt)
#endif
#include <zookeeper/zookeeper.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

using namespace std::chrono_literals;
using dlock::lab::backend;
using dlock::test::child_process;
using dlock::test::expect_line;
using dlock::test::expect_resumed_holder_fenced_off;
using dlock::test::fenced_resource;
using clock_type = std::chrono::steady_clock;

namespace {

using dlock::test::eventually;



long long ms_between(clock_type::time_point a, clock_type::time_point b) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

// The counters of ZooKeeper's `mntr` four-letter word.
std::map<std::string, long long> mntr(const dlock::lab::endpoint& server) {
    std::map<std::string, long long> out;
    std::istringstream lines(dlock::lab::zookeeper_four_letter_word(server, "mntr"));
    std::string line;
    while (std::getline(lines, line)) {  // "key<TAB>value"; some values are text
        const size_t tab = line.find('\t');
        if (tab == std::string::npos) continue;
        try {
            out[line.substr(0, tab)] = std::stoll(line.substr(tab + 1));
        } catch (...) {
        }
    }
    return out;
}

// A raw ZooKeeper session through the C client, optionally authenticated with a digest: "another
// identity" in the ACL tests.
class raw_session {
public:
    explicit raw_session(const std::string& connect, const std::string& credentials = "") {
        zh_ = zookeeper_init(connect.c_str(), [](zhandle_t*, int, int, const char*, void*) {}, 4000, nullptr, nullptr, 0);
        if (!zh_) throw std::runtime_error("zookeeper_init failed for " + connect);
        if (!eventually([&] { return zoo_state(zh_) == ZOO_CONNECTED_STATE; }, 10s))
            throw std::runtime_error("no ZooKeeper session with " + connect);
        if (!credentials.empty()) {
            std::promise<int> done;
            zoo_add_auth(zh_, "digest", credentials.data(), int(credentials.size()),
                         [](int rc, const void* p) { static_cast<std::promise<int>*>(const_cast<void*>(p))->set_value(rc); }, &done);
            if (done.get_future().get() != ZOK) throw std::runtime_error("digest authentication failed");
        }
    }
    ~raw_session() { zookeeper_close(zh_); }
    int remove(const std::string& path) { return zoo_delete(zh_, path.c_str(), -1); }
    // An ephemeral sequential node `prefix<sequence>`; returns its path ("" on failure).
    std::string create_sequential(const std::string& prefix) {
        char created[512];
        if (zoo_create(zh_, prefix.c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL, created, sizeof created) != ZOK) return "";
        return created;
    }
    std::vector<std::string> children(const std::string& path) {
        String_vector names{};
        std::vector<std::string> out;
        if (zoo_get_children(zh_, path.c_str(), 0, &names) != ZOK) return out;
        for (int i = 0; i < names.count; ++i) out.emplace_back(names.data[i]);
        deallocate_String_vector(&names);
        return out;
    }
    // Deletes `path` and everything below it, depth first.
    void remove_tree(const std::string& path) {
        for (const auto& child : children(path)) remove_tree(path + "/" + child);
        remove(path);
    }

private:
    zhandle_t* zh_ = nullptr;
};

class ZooKeeperFaults : public dlock::test::lab_backend_test {
protected:
    ZooKeeperFaults() : lab_backend_test({backend::zookeeper, backend::zookeeper_ensemble}) {}

    void SetUp() override {
        lab_backend_test::SetUp();
        if (!lab_) return;
        scratch_ = std::make_unique<dlock::test::scratch_dir>("dlock-zookeeper-test");
    }

    dlock::lab::endpoint standalone() { return lab_->zookeeper().client_endpoint(); }
    std::string ensemble() { return lab_->zookeeper_ensemble().connect_string(); }

    // A config reaching `connect` with extra option lines (e.g. "session_timeout: 1s").
    std::string config(const std::string& connect, const std::vector<std::string>& extra = {}) {
        const std::string path = scratch_->path() + "/config-" + std::to_string(++configs_) + ".yaml";
        std::ofstream out(path);
        out << "backend: zookeeper\noptions:\n  connect: \"" << connect << "\"\n";
        for (const auto& line : extra) out << "  " << line << "\n";
        return path;
    }

    std::vector<std::string> queue_nodes(const std::string& connect, const std::string& lock_node) {
        dlock::lab::zookeeper_client raw(connect);
        return raw.children(lock_node);
    }

    std::unique_ptr<dlock::test::scratch_dir> scratch_;
    int configs_ = 0;
};

// ---- session timeout ----------------------------------------------------------------------------

// The session timeout is negotiated with the server (clamped to [2, 20] x tickTime), read back,
// and used as every lease's ttl, whatever ttl the acquire asked for. An explicit renew has no ttl
// to extend: it confirms the node still exists, and valid_until moves with that confirmation.
TEST_F(ZooKeeperFaults, NegotiatedSessionTimeoutIsTheLeaseTtl) {
    for (const auto& [asked, granted] : {std::pair{"1s", 1000ms}, std::pair{"60s", 4000ms}, std::pair{"100ms", 400ms}}) {
        auto client = dlock::client::open(config(standalone().to_string(), {std::string("session_timeout: ") + asked}));
        const auto before = clock_type::now();
        auto lease = client.acquire("faults/ttl", dlock::acquire_options().with_wait(0ms).with_ttl(30s));
        const auto validity = lease.valid_until() - before;
        EXPECT_LE(validity, granted) << "asked " << asked;
        EXPECT_GT(validity, granted * 9 / 10) << "asked " << asked;
        const auto first = lease.valid_until();
        std::this_thread::sleep_for(50ms);
        lease.renew();
        EXPECT_GE(lease.valid_until() - first, 50ms) << "asked " << asked;
        EXPECT_EQ(lease.state(), dlock::lease_state::held);
    }
}

// ---- docs/design/faults.md §2: holder killed ------------------------------------------------------------------

TEST_F(ZooKeeperFaults, HolderKilledNextHolderWithinTheSessionTimeout) {
    const std::string cfg = config(standalone().to_string(), {"session_timeout: 1s"});
    child_process holder({DLOCK_CONFORMANCE_WORKER, "hold", cfg, "faults/killed", "1000"}, true);
    const std::string held = expect_line(holder);
    ASSERT_EQ(held.rfind("held ", 0), 0u) << held;
    auto client = dlock::client::open(cfg);
    std::error_code ec;
    client.acquire("faults/killed", dlock::acquire_options().with_wait(0ms), ec);
    ASSERT_EQ(ec, dlock::errc::timeout);

    const auto killed = clock_type::now();
    holder.kill(SIGKILL);
    holder.wait();
    auto lease = client.acquire("faults/killed", dlock::acquire_options().with_wait(10s), ec);
    const auto recovery = ms_between(killed, clock_type::now());
    std::cout << "[zookeeper] next holder " << recovery << " ms after the holder's SIGKILL (session timeout 1000 ms)\n";
    ASSERT_FALSE(ec) << dlock_last_error();
    EXPECT_LE(recovery, 1000 + 700) << "within the session timeout (+ a tick of expiry rounding and scheduling)";
    EXPECT_GE(recovery, 1000 / 2) << "the dead holder's session keeps the lock until it expires";
    EXPECT_GT(lease.fencing_token(), std::stoull(held.substr(5)));
}

// ---- docs/design/faults.md §3 and 4: holder paused ------------------------------------------------------------

// Holder A is paused right after checking its lease, past its session timeout; the server expires
// its session and B acquires. When A resumes, its fenced write (czxid token) is refused, its lease
// reads LOST (the client's own bound passed; it does not wait to hear "expired"), and its stale
// release leaves B's lock alone.
TEST_F(ZooKeeperFaults, HolderPausedPastTheSessionTimeoutIsFencedOff) {
    const std::string cfg = config(standalone().to_string(), {"session_timeout: 1s"});
    child_process a({DLOCK_CONFORMANCE_WORKER, "script", cfg, "faults/pause", "1000"}, true, {}, true);
    const std::string held = expect_line(a);
    ASSERT_EQ(held.rfind("held ", 0), 0u) << held;
    a.write_line("state");
    EXPECT_EQ(expect_line(a), "held");  // A checked: it believes it holds the lock...
    a.kill(SIGSTOP);                     // ...and stalls
    const auto paused = clock_type::now();

    auto client = dlock::client::open(cfg);
    auto b = client.acquire("faults/pause", dlock::acquire_options().with_wait(10s));
    std::cout << "[zookeeper] B acquired " << ms_between(paused, clock_type::now()) << " ms after A was paused\n";
    expect_resumed_holder_fenced_off(a, client, b, "faults/pause");
}

// ---- docs/design/faults.md §11: session expiry, connection loss during create ----------------------------------

// The holder is cut off from the server (a partition at the proxy, both ways) for longer than its
// session timeout: the server expires its session. The holder turns SUSPECT when its client notices
// the silence, and reports LOST by itself while still cut off — from the send time of its last
// answered request + the timeout, a bound the server cannot beat — and so before the server
// expires the session and the waiter gets the lock. After the partition heals the client hears
// "expired", opens a new session and works again.
TEST_F(ZooKeeperFaults, SessionExpiryWhilePartitionedIsLostBeforeTheWaiterProceeds) {
    dlock::lab::tcp_proxy proxy(standalone());
    auto holder_client = dlock::client::open(config(proxy.listen_endpoint().to_string(), {"session_timeout: 1s"}));
    auto waiter_client = dlock::client::open(config(standalone().to_string(), {"session_timeout: 1s"}));
    auto holder = holder_client.acquire("faults/expiry", dlock::acquire_options().with_wait(0ms));
    std::atomic<int64_t> lost_at{0};
    holder.on_lost([&] { lost_at = clock_type::now().time_since_epoch().count(); });

    std::promise<std::pair<uint64_t, int64_t>> acquired;
    std::thread waiter([&] {
        auto lease = waiter_client.acquire("faults/expiry", dlock::acquire_options().with_wait(15s));
        acquired.set_value({lease.fencing_token(), clock_type::now().time_since_epoch().count()});
        lease.release();
    });
    std::this_thread::sleep_for(100ms);
    const auto cut = clock_type::now();
    proxy.blackhole(dlock::lab::direction::both);
    // HELD -> SUSPECT (the client noticed the silence) -> LOST (its bound passed), sampled every 2 ms.
    bool saw_suspect = false;
    EXPECT_TRUE(eventually(
        [&] {
            const auto state = holder.state();
            saw_suspect = saw_suspect || state == dlock::lease_state::suspect;
            return state == dlock::lease_state::lost;
        },
        5s, 2ms));
    EXPECT_TRUE(saw_suspect) << "disconnected: SUSPECT before LOST";
    auto result = acquired.get_future();
    ASSERT_EQ(result.wait_for(10s), std::future_status::ready) << "the waiter never got the lock";
    const auto [token, acquired_at] = result.get();
    waiter.join();
    EXPECT_EQ(holder.state(), dlock::lease_state::lost) << "LOST while still partitioned (decided by the client itself)";
    ASSERT_NE(lost_at.load(), 0) << "the lost callback must have fired";
    EXPECT_LE(lost_at.load(), acquired_at) << "the old holder must know it lost before the new one holds";
    std::cout << "[zookeeper] partitioned holder reported LOST " << (lost_at.load() - cut.time_since_epoch().count()) / 1'000'000
              << " ms after the cut; the waiter acquired " << (acquired_at - cut.time_since_epoch().count()) / 1'000'000
              << " ms after it\n";
    EXPECT_GT(token, holder.fencing_token());

    proxy.heal();
    EXPECT_EQ(holder.release(), dlock::release_outcome::already_lost);
    std::error_code ec;
    auto again = holder_client.acquire("faults/expiry", dlock::acquire_options().with_wait(10s), ec);
    EXPECT_FALSE(ec) << "after the expiry the client opens a new session: " << dlock_last_error();
}

// The reply to the create is lost (the proxy holds the server's answers, then resets the
// connection). The node was created; after reconnecting (same session) the acquirer finds it by its
// guid instead of creating a second node that would queue behind its own ghost forever.
TEST_F(ZooKeeperFaults, ConnectionLossDuringCreateFindsTheNodeByItsGuid) {
    dlock::lab::tcp_proxy proxy(standalone());
    auto client = dlock::client::open(config(proxy.listen_endpoint().to_string(), {"session_timeout: 4s"}));
    const std::string lock_node = "/dlock/faults%2Fghost";
    client.acquire("faults/ghost", dlock::acquire_options().with_wait(0ms));  // the lock node exists from here
    proxy.blackhole(dlock::lab::direction::downstream);
    std::promise<std::pair<std::error_code, std::string>> outcome;
    auto lease_slot = std::make_shared<dlock::lease>();
    const auto started = clock_type::now();
    std::thread acquirer([&] {
        std::error_code ec;
        *lease_slot = client.acquire("faults/ghost", dlock::acquire_options().with_wait(15s), ec);
        outcome.set_value({ec, ec ? dlock_last_error() : ""});
    });
    EXPECT_TRUE(eventually([&] { return queue_nodes(standalone().to_string(), lock_node).size() == 1; }, 3s))
        << "the create should reach the server while its reply is held back";
    proxy.cut_all();  // the reply is lost with the connection
    proxy.heal();
    auto result = outcome.get_future();
    ASSERT_EQ(result.wait_for(10s), std::future_status::ready) << "self-deadlock: the acquire never returned";
    acquirer.join();
    const auto [ec, message] = result.get();
    ASSERT_FALSE(ec) << message;
    std::cout << "[zookeeper] acquired " << ms_between(started, clock_type::now()) << " ms after a lost create reply\n";
    const auto nodes = queue_nodes(standalone().to_string(), lock_node);
    ASSERT_EQ(nodes.size(), 1u) << "a second queue node means the first became a ghost";
    EXPECT_NE(nodes[0].find(std::string(lease_slot->owner())), std::string::npos) << nodes[0] << " is not ours";
    EXPECT_EQ(lease_slot->release(), dlock::release_outcome::released);
}

// An acquire that times out while its create's reply is lost leaves nothing behind: the node is
// found by guid and deleted once the connection is back.
TEST_F(ZooKeeperFaults, AcquireTimingOutDuringConnectionLossLeavesNoNode) {
    dlock::lab::tcp_proxy proxy(standalone());
    auto client = dlock::client::open(config(proxy.listen_endpoint().to_string(), {"session_timeout: 4s"}));
    const std::string lock_node = "/dlock/faults%2Forphan";
    client.acquire("faults/orphan", dlock::acquire_options().with_wait(0ms));  // the lock node exists from here
    proxy.blackhole(dlock::lab::direction::downstream);
    const auto started = clock_type::now();
    std::error_code ec;
    client.acquire("faults/orphan", dlock::acquire_options().with_wait(300ms), ec);
    const auto took = ms_between(started, clock_type::now());
    EXPECT_EQ(ec, dlock::errc::timeout) << dlock_last_error();
    EXPECT_LT(took, 300 + 400 + 300) << "the deadline (+ a tenth of the session timeout) is honoured";
    EXPECT_EQ(queue_nodes(standalone().to_string(), lock_node).size(), 1u) << "the create did reach the server";
    proxy.cut_all();
    proxy.heal();
    EXPECT_TRUE(eventually([&] { return queue_nodes(standalone().to_string(), lock_node).empty(); }, 10s))
        << "the failed acquire's node must be deleted after reconnecting";
    auto other = dlock::client::open(config(standalone().to_string()));
    EXPECT_TRUE(other.try_acquire("faults/orphan")) << "nothing may block the lock";
}

// The release's delete reaches the server but its reply is lost with the connection: the outcome is
// unknown, and the caller retries, as UNKNOWN invites. The retry, on the same session once
// reconnected, finds the node gone — deleted by the first attempt — and must report RELEASED: the
// lock was ours until our own delete, not lost.
TEST_F(ZooKeeperFaults, RetriedReleaseAfterALostReplyIsReleased) {
    dlock::lab::tcp_proxy proxy(standalone());
    auto client = dlock::client::open(config(proxy.listen_endpoint().to_string(), {"session_timeout: 4s"}));
    const std::string name = "faults/release-retry", lock_node = "/dlock/faults%2Frelease-retry";
    auto lease = client.acquire(name, dlock::acquire_options().with_wait(0ms));
    ASSERT_EQ(queue_nodes(standalone().to_string(), lock_node).size(), 1u);
    proxy.blackhole(dlock::lab::direction::downstream);
    std::promise<dlock::release_outcome> first;
    std::thread releaser([&] {
        std::error_code ec;
        first.set_value(lease.release(ec));
    });
    EXPECT_TRUE(eventually([&] { return queue_nodes(standalone().to_string(), lock_node).empty(); }, 3s))
        << "the delete should reach the server while its reply is held back";
    proxy.cut_all();  // the reply is lost with the connection
    proxy.heal();
    auto outcome = first.get_future();
    ASSERT_EQ(outcome.wait_for(10s), std::future_status::ready) << "the first release never returned";
    releaser.join();
    EXPECT_EQ(outcome.get(), dlock::release_outcome::unknown) << "the reply was lost: the outcome is unknown";

    dlock::release_outcome retry = dlock::release_outcome::unknown;
    EXPECT_TRUE(eventually(
        [&] {
            std::error_code ec;
            retry = lease.release(ec);
            return retry != dlock::release_outcome::unknown;
        },
        10s, 100ms));
    EXPECT_EQ(retry, dlock::release_outcome::released) << dlock_last_error();
    auto other = dlock::client::open(config(standalone().to_string()));
    EXPECT_TRUE(other.try_acquire(name)) << "nothing of ours is left behind";
}

// A node carrying our guid ahead of our own is what a create whose reply was lost, and whose
// lookup missed it, leaves behind: our second node would wait behind it forever (nobody deletes
// it while the session lives). The acquirer must treat it as its own: keep the earlier one, delete
// the later. Staged by hand on a single server: waiter A queues behind W behind holder H; a raw
// session creates a node with A's guid, and A's first node is deleted, so that A queues again
// behind its own "ghost" when W gives up. (The staged ghost belongs to the raw session, which stays
// open until A released.)
TEST_F(ZooKeeperFaults, NodeCarryingOurGuidAheadOfOursIsTreatedAsOurs) {
    const std::string cfg = config(standalone().to_string());
    const std::string name = "faults/own-ghost", lock_node = "/dlock/faults%2Fown-ghost";
    auto h_client = dlock::client::open(cfg), w_client = dlock::client::open(cfg), a_client = dlock::client::open(cfg);
    auto h = h_client.acquire(name, dlock::acquire_options().with_wait(0ms));
    std::thread w_thread([&] {
        std::error_code ec;
        w_client.acquire(name, dlock::acquire_options().with_wait(1500ms), ec);  // gives up: TIMEOUT
    });
    ASSERT_TRUE(eventually([&] { return queue_nodes(standalone().to_string(), lock_node).size() == 2; }, 5s));
    std::promise<std::pair<std::error_code, std::string>> outcome;
    dlock::lease a;
    std::thread a_thread([&] {
        std::error_code ec;
        a = a_client.acquire(name, dlock::acquire_options().with_wait(8s), ec);
        outcome.set_value({ec, ec ? dlock_last_error() : ""});
    });
    ASSERT_TRUE(eventually([&] { return queue_nodes(standalone().to_string(), lock_node).size() == 3; }, 5s));
    auto nodes = queue_nodes(standalone().to_string(), lock_node);
    std::sort(nodes.begin(), nodes.end(), [](const std::string& x, const std::string& y) { return x.substr(x.size() - 10) < y.substr(y.size() - 10); });
    const std::string a_first = nodes[2];  // "_c_<guid>-lock-<sequence>"
    const std::string a_guid = a_first.substr(3, a_first.find("-lock-") - 3);
    raw_session raw(standalone().to_string());
    const std::string ghost = raw.create_sequential(lock_node + "/_c_" + a_guid + "-lock-");
    ASSERT_FALSE(ghost.empty());
    ASSERT_EQ(raw.remove(lock_node + "/" + a_first), ZOK);
    w_thread.join();  // W gave up: A lists again, finds its node gone, and queues behind the ghost
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(h.release(), dlock::release_outcome::released);
    auto result = outcome.get_future();
    ASSERT_EQ(result.wait_for(10s), std::future_status::ready);
    a_thread.join();
    const auto [ec, message] = result.get();
    ASSERT_FALSE(ec) << "A waited behind a node carrying its own guid: " << message;
    EXPECT_EQ(std::string(a.owner()), a_guid);
    EXPECT_GT(a.fencing_token(), h.fencing_token());
    const auto left = queue_nodes(standalone().to_string(), lock_node);
    ASSERT_EQ(left.size(), 1u) << "one node of A's: the earlier one kept, the later deleted";
    EXPECT_EQ(lock_node + "/" + left[0], ghost);
    EXPECT_EQ(a.release(), dlock::release_outcome::released);
    EXPECT_TRUE(queue_nodes(standalone().to_string(), lock_node).empty());
}

// ---- a queue node deleted by someone else ----------------------------------------------------------

// Deletes, through a session of its own, the queue node of `lock_node` that carries `owner` (the
// acquisition's guid); returns the instant just before the delete was sent.
clock_type::time_point delete_node_of(raw_session& raw, const std::string& lock_node, std::string_view owner) {
    for (const auto& node : raw.children(lock_node)) {
        if (node.find(std::string(owner)) == std::string::npos) continue;
        const auto at = clock_type::now();
        EXPECT_EQ(raw.remove(lock_node + "/" + node), ZOK) << node;
        return at;
    }
    ADD_FAILURE() << "no queue node of " << owner << " under " << lock_node;
    return clock_type::now();
}

// Someone else (an operator, a script, a client with the same identity) deletes the holder's queue
// node: from then on the next client may take the lock, so the holder must learn that it lost it
// within about one round trip — from a watch on its node — and not when its session ends (never,
// while the holder lives). Three ways to have become holder, each covered by a different watch:
// uncontended (the listing of the acquire itself leaves a watch on the lock node's children); after
// waiting in the queue (the waiter watched its own node); uncontended, then a waiter queued behind
// (its arrival spent the children watch, which the holder replaced by one on its own node). The
// session timeout is 4 s: LOST within 500 ms cannot come from the session.
TEST_F(ZooKeeperFaults, HolderLearnsItsNodeWasDeletedWithinARoundTrip) {
    const std::string cfg = config(standalone().to_string(), {"session_timeout: 4s"});
    auto a_client = dlock::client::open(cfg), b_client = dlock::client::open(cfg);
    raw_session raw(standalone().to_string());
    auto expect_lost_soon = [&](dlock::lease& lease, const std::string& lock_node, const char* how) {
        auto lost_at = std::make_shared<std::atomic<int64_t>>(0);  // the callback may outlive this check
        lease.on_lost([lost_at] { *lost_at = clock_type::now().time_since_epoch().count(); });
        ASSERT_EQ(lease.state(), dlock::lease_state::held) << how;
        const auto deleted = delete_node_of(raw, lock_node, lease.owner());
        EXPECT_TRUE(eventually([&] { return lost_at->load() != 0; }, 3s, 2ms)) << how << ": LOST never reported";
        if (lost_at->load() == 0) return;
        const auto latency = (lost_at->load() - deleted.time_since_epoch().count()) / 1'000'000;
        std::cout << "[zookeeper] " << how << ": LOST " << latency << " ms after its node was deleted\n";
        EXPECT_LT(latency, 500) << how << ": LOST within about one round trip, far below the 4 s session";
        EXPECT_EQ(lease.state(), dlock::lease_state::lost) << how;
        EXPECT_EQ(lease.release(), dlock::release_outcome::already_lost) << how;
    };

    {
        auto lease = a_client.acquire("faults/deleted-alone", dlock::acquire_options().with_wait(0ms));
        expect_lost_soon(lease, "/dlock/faults%2Fdeleted-alone", "uncontended holder");
    }
    {
        auto first = b_client.acquire("faults/deleted-waited", dlock::acquire_options().with_wait(0ms));
        std::promise<dlock::lease> got;
        std::thread waiter([&] { got.set_value(a_client.acquire("faults/deleted-waited", dlock::acquire_options().with_wait(10s))); });
        ASSERT_TRUE(eventually([&] { return queue_nodes(standalone().to_string(), "/dlock/faults%2Fdeleted-waited").size() == 2; }, 5s));
        std::this_thread::sleep_for(100ms);  // the waiter set its watches
        EXPECT_EQ(first.release(), dlock::release_outcome::released);
        auto lease = got.get_future().get();
        waiter.join();
        expect_lost_soon(lease, "/dlock/faults%2Fdeleted-waited", "holder after waiting");
    }
    {
        auto lease = a_client.acquire("faults/deleted-contended", dlock::acquire_options().with_wait(0ms));
        std::promise<uint64_t> next_token;
        std::thread waiter([&] {
            auto next = b_client.acquire("faults/deleted-contended", dlock::acquire_options().with_wait(10s));
            next_token.set_value(next.fencing_token());
            next.release();
        });
        ASSERT_TRUE(eventually([&] { return queue_nodes(standalone().to_string(), "/dlock/faults%2Fdeleted-contended").size() == 2; }, 5s));
        std::this_thread::sleep_for(100ms);
        const uint64_t token = lease.fencing_token();
        expect_lost_soon(lease, "/dlock/faults%2Fdeleted-contended", "holder with a waiter behind");
        auto next = next_token.get_future();
        EXPECT_EQ(next.wait_for(5s), std::future_status::ready) << "the waiter takes the lock once the holder's node is gone";
        waiter.join();
        EXPECT_GT(next.get(), token);
    }
}

// The watches above fire on the holder's own release too (it deletes its node): that must never read
// as LOST — uncontended, handing off to a waiter, or after waiting.
TEST_F(ZooKeeperFaults, OwnReleaseIsNeverReportedLost) {
    const std::string cfg = config(standalone().to_string(), {"session_timeout: 4s"});
    auto a_client = dlock::client::open(cfg), b_client = dlock::client::open(cfg);
    std::atomic<int> lost{0};
    for (int i = 0; i < 20; ++i) {
        auto lease = a_client.acquire("faults/own-release", dlock::acquire_options().with_wait(0ms));
        lease.on_lost([&] { ++lost; });
        EXPECT_EQ(lease.release(), dlock::release_outcome::released);
    }
    for (int i = 0; i < 10; ++i) {  // ping-pong: every acquisition of b waited behind a
        auto lease = a_client.acquire("faults/own-handoff", dlock::acquire_options().with_wait(5s));
        lease.on_lost([&] { ++lost; });
        std::promise<void> queued;
        std::thread waiter([&] {
            auto next = b_client.acquire("faults/own-handoff", dlock::acquire_options().with_wait(5s));
            next.on_lost([&] { ++lost; });
            std::this_thread::sleep_for(20ms);
            EXPECT_EQ(next.release(), dlock::release_outcome::released);
        });
        EXPECT_TRUE(eventually([&] { return queue_nodes(standalone().to_string(), "/dlock/faults%2Fown-handoff").size() == 2; }, 5s));
        EXPECT_EQ(lease.release(), dlock::release_outcome::released);
        waiter.join();
    }
    std::this_thread::sleep_for(300ms);  // late watch events would report now
    EXPECT_EQ(lost.load(), 0) << "a release of our own was reported as a loss";
}

// A waiter's node deleted while it waits: when its predecessor goes, it must not take the lock on a
// node that no longer exists (nothing would keep a third client out); it queues again.
TEST_F(ZooKeeperFaults, WaiterWhoseNodeWasDeletedQueuesAgain) {
    const std::string cfg = config(standalone().to_string(), {"session_timeout: 4s"});
    const std::string name = "faults/deleted-waiter", lock_node = "/dlock/faults%2Fdeleted-waiter";
    auto h_client = dlock::client::open(cfg), w_client = dlock::client::open(cfg);
    raw_session raw(standalone().to_string());
    auto h = h_client.acquire(name, dlock::acquire_options().with_wait(0ms));
    std::promise<dlock::lease> got;
    std::thread waiter([&] { got.set_value(w_client.acquire(name, dlock::acquire_options().with_wait(10s))); });
    ASSERT_TRUE(eventually([&] { return queue_nodes(standalone().to_string(), lock_node).size() == 2; }, 5s));
    std::this_thread::sleep_for(100ms);
    std::string waiter_node;
    for (const auto& node : queue_nodes(standalone().to_string(), lock_node))
        if (node.find(std::string(h.owner())) == std::string::npos) waiter_node = node;
    ASSERT_EQ(raw.remove(lock_node + "/" + waiter_node), ZOK);
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(h.release(), dlock::release_outcome::released);
    auto lease = got.get_future().get();
    waiter.join();
    const auto nodes = queue_nodes(standalone().to_string(), lock_node);
    ASSERT_EQ(nodes.size(), 1u) << "the new holder has a node of its own";
    EXPECT_NE(nodes[0].find(std::string(lease.owner())), std::string::npos) << nodes[0];
    auto third = dlock::client::open(cfg);
    EXPECT_FALSE(third.try_acquire(name)) << "the lock is held: a third client must not get it";
    EXPECT_EQ(lease.state(), dlock::lease_state::held);
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
}

// ---- docs/design/faults.md §10: quorum ---------------------------------------------------------------------------

class ZooKeeperEnsembleFaults : public ZooKeeperFaults {
protected:
    // Holder holds `name`, a waiter queues behind it; `fault` strikes the ensemble; afterwards the
    // holder's lease must never have been LOST, the lock must still be held by it, and the waiter
    // proceeds once the holder releases. Clients connect to `connect`.
    void held_lock_survives(const std::string& name, const std::string& connect, const std::function<void()>& fault,
                            const std::function<void()>& repair) {
        auto& ensemble = lab_->zookeeper_ensemble();
        ensemble.wait_for_leader();
        const std::string cfg = config(connect);  // session timeout asked 10s, granted 4s
        auto holder_client = dlock::client::open(cfg);
        auto waiter_client = dlock::client::open(cfg);
        auto holder = holder_client.acquire(name, dlock::acquire_options().with_wait(0ms));
        std::atomic<int> lost{0};
        holder.on_lost([&] { ++lost; });
        std::promise<int64_t> acquired;
        std::thread waiter([&] {
            std::error_code ec;
            auto lease = waiter_client.acquire(name, dlock::acquire_options().with_wait(40s), ec);
            acquired.set_value(ec ? -1 : clock_type::now().time_since_epoch().count());
        });
        std::this_thread::sleep_for(200ms);

        const auto struck = clock_type::now();
        fault();
        ensemble.wait_for_leader(20s);
        std::cout << "[zookeeper] new leader " << ms_between(struck, clock_type::now()) << " ms after the fault\n";
        std::error_code ec;
        auto probe = dlock::client::open(cfg);
        probe.acquire(name, dlock::acquire_options().with_wait(0ms), ec);
        EXPECT_EQ(ec, dlock::errc::timeout) << "still held: " << dlock_last_error();
        EXPECT_EQ(probe.inspect(name).holder, holder.owner());
        // The holder's client reconnects to a serving member with its session intact.
        EXPECT_TRUE(eventually([&] { return holder.state() == dlock::lease_state::held; }, 10s))
            << "state " << int(holder.state());
        EXPECT_EQ(lost.load(), 0) << "the held lock must survive the leader's failure";

        const auto released = clock_type::now();
        EXPECT_EQ(holder.release(), dlock::release_outcome::released);
        auto result = acquired.get_future();
        ASSERT_EQ(result.wait_for(15s), std::future_status::ready);
        const int64_t at = result.get();
        waiter.join();
        EXPECT_GT(at, 0) << "the waiter must proceed";
        std::cout << "[zookeeper] waiter proceeded " << (at - released.time_since_epoch().count()) / 1'000'000
                  << " ms after the release\n";
        repair();
        ensemble.wait_for_leader(20s);
    }
};

TEST_F(ZooKeeperEnsembleFaults, LeaderKilledHeldLocksSurviveAndWaitersProceed) {
    auto& ensemble = lab_->zookeeper_ensemble();
    const size_t leader = ensemble.wait_for_leader();
    held_lock_survives(
        "faults/leader-killed", ensemble.connect_string(), [&] { ensemble.member(leader).kill(); },
        [&] { ensemble.member(leader).restart(dlock::lab::data_policy::keep); });
}

// A paused server still accepts TCP connections (the kernel completes them) but never answers: a
// client whose next try is that server spends 2/3 of the session timeout on it before moving on,
// which with the lab's 4 s sessions can outlast the client's own bound (it then reports LOST while
// the server kept the session: conservative, see docs/backends/zookeeper.md). The clients here are
// given the two members that keep serving, so what is asserted is the server side: the session and
// its lock survive the re-election.
TEST_F(ZooKeeperEnsembleFaults, LeaderPausedHeldLocksSurviveAndWaitersProceed) {
    auto& ensemble = lab_->zookeeper_ensemble();
    const size_t leader = ensemble.wait_for_leader();
    std::string followers;
    for (size_t i = 0; i < ensemble.size(); ++i)
        if (i != leader) followers += (followers.empty() ? "" : ",") + ensemble.member(i).client_endpoint().to_string();
    held_lock_survives(
        "faults/leader-paused", followers,
        [&] {
            ensemble.member(leader).pause();
            // The followers notice after syncLimit ticks (1 s here) and elect among themselves.
            eventually([&] { return ensemble.leader_index().has_value() && *ensemble.leader_index() != leader; }, 20s, 50ms);
        },
        [&] { ensemble.member(leader).resume(); });
}

// Cuts ensemble member `index` from its peers (their quorum and election ports, and its own) while
// its client port stays open: it keeps serving its clients from its own copy until it notices the
// silence (syncLimit ticks), then stops serving until the cut heals. A cut that cannot be made
// (no root, no iptables) throws, which fails the test.
std::unique_ptr<dlock::lab::port_cut> cut_from_peers(dlock::lab::zookeeper_server& member) {
    std::vector<std::uint16_t> own, peers;
    for (const auto& peer : member.peers()) {
        auto& ports = peer.id == member.my_id() ? own : peers;
        ports.push_back(peer.quorum_port);
        ports.push_back(peer.election_port);
    }
    return std::make_unique<dlock::lab::port_cut>(member.pid(), own, peers);
}

// Holder A talks to follower F only; F is cut from the leader and the other follower. F answers
// reads from its own copy for syncLimit x tickTime (1 s here) after the cut, while the leader, which
// hears of A's session only through F, expires it one session timeout after F's last report and
// hands the lock to B. A keeps renewing throughout (as its keeper would), so every answer F gives
// is a chance to push A's valid_until. Asserted: B's acquire returns no earlier than A's
// valid_until — A's client never believes it holds the lock while B does.
TEST_F(ZooKeeperEnsembleFaults, FollowerCutFromTheLeaderDoesNotExtendTheHolderPastItsSession) {
    auto& ensemble = lab_->zookeeper_ensemble();
    // One leader and every other member following it: while the cut lasts no member can open a new
    // connection to a peer, so a member still rejoining after an earlier test (or a resumed leader
    // that still calls itself leader) would leave the real leader without a quorum.
    size_t leader = 0;
    ASSERT_TRUE(eventually(
        [&] {
            size_t leaders = 0, followers = 0;
            for (size_t i = 0; i < ensemble.size(); ++i) {
                const std::string role = ensemble.member(i).role();
                if (role == "leader") ++leaders, leader = i;
                if (role == "follower") ++followers;
            }
            return leaders == 1 && followers == ensemble.size() - 1;
        },
        30s, 100ms))
        << "the ensemble did not settle";
    const size_t follower = (leader + 1) % ensemble.size();
    std::string others;
    for (size_t i = 0; i < ensemble.size(); ++i)
        if (i != follower) others += (others.empty() ? "" : ",") + ensemble.member(i).client_endpoint().to_string();
    const std::string name = "faults/follower-cut";
    auto a_client = dlock::client::open(config(ensemble.member(follower).client_endpoint().to_string(), {"session_timeout: 4s"}));
    auto b_client = dlock::client::open(config(others, {"session_timeout: 4s"}));
    auto a = a_client.acquire(name, dlock::acquire_options().with_wait(0ms));

    std::promise<std::pair<int64_t, uint64_t>> b_acquired;  // (steady clock ns at acquire-ok, token)
    std::thread b_thread([&] {
        std::error_code ec;
        auto lease = b_client.acquire(name, dlock::acquire_options().with_wait(40s), ec);
        b_acquired.set_value({ec ? -1 : clock_type::now().time_since_epoch().count(), ec ? 0 : lease.fencing_token()});
        if (!ec) lease.release();
    });
    std::atomic<bool> stop{false};
    std::atomic<int64_t> last_renewed{0};
    std::thread renewer([&] {
        while (!stop) {
            std::error_code ec;
            const auto sent = clock_type::now();
            a.renew(ec);  // fails once F stops serving: expected
            if (!ec) last_renewed = sent.time_since_epoch().count();
            std::this_thread::sleep_for(20ms);
        }
    });
    std::this_thread::sleep_for(2500ms);  // A's bound settles into its steady state

    auto cut = cut_from_peers(ensemble.member(follower));
    const auto cut_at = clock_type::now();
    auto result = b_acquired.get_future();
    const bool b_done = result.wait_for(30s) == std::future_status::ready;
    stop = true;
    renewer.join();
    const auto a_valid_until = a.valid_until();
    cut->heal();
    b_thread.join();
    ASSERT_TRUE(b_done) << "B never got the lock after A's follower was cut off";
    const auto [b_at_ns, b_token] = result.get();
    ASSERT_GT(b_at_ns, 0) << "B's acquire failed";
    const auto b_at = clock_type::time_point(clock_type::duration(b_at_ns));
    const auto margin = ms_between(a_valid_until, b_at);  // > 0: A's bound ended before B held
    std::cout << "[zookeeper] follower cut: B acquired " << ms_between(cut_at, b_at) << " ms after the cut; A's valid_until "
              << ms_between(cut_at, a_valid_until) << " ms after it (margin " << margin << " ms); A's last renewal sent "
              << (last_renewed.load() - cut_at.time_since_epoch().count()) / 1'000'000 << " ms after it\n";
    EXPECT_GE((b_at - a_valid_until).count(), 0) << "A's valid_until outlasted its session by " << -margin << " ms";
    EXPECT_GT(b_token, a.fencing_token());
    EXPECT_TRUE(eventually([&] { return a.state() == dlock::lease_state::lost; }, 10s));
    // F rejoins once healed; the next test needs the whole ensemble.
    ensemble.wait_ready(clock_type::now() + 30s);
    ensemble.wait_for_leader(20s);
}

// docs/design/faults.md §11 on the ensemble: the create's reply is lost with the connection to follower F1
// (committed by the leader meanwhile), and the session moves to another member F2, which may not
// have applied that create yet when it answers the lookup by guid. The acquire must still find its
// node: exactly one node of ours, the lock acquired, no self-deadlock behind a ghost.
TEST_F(ZooKeeperEnsembleFaults, ConnectionLossDuringCreateThenAnotherMemberFindsTheNode) {
    auto& ensemble = lab_->zookeeper_ensemble();
    ensemble.wait_ready(clock_type::now() + 30s);
    const size_t leader = ensemble.wait_for_leader();
    const size_t f1 = (leader + 1) % ensemble.size(), f2 = (leader + 2) % ensemble.size();
    dlock::lab::tcp_proxy to_f1(ensemble.member(f1).client_endpoint()), to_f2(ensemble.member(f2).client_endpoint());
    to_f2.refuse_new_connections(true);  // the session starts on F1
    auto client = dlock::client::open(config(to_f1.listen_endpoint().to_string() + "," + to_f2.listen_endpoint().to_string(),
                                             {"session_timeout: 4s"}));
    const std::string name = "faults/ghost-ensemble", lock_node = "/dlock/faults%2Fghost-ensemble";
    const std::string at_leader = ensemble.member(leader).client_endpoint().to_string();
    client.acquire(name, dlock::acquire_options().with_wait(0ms));  // the lock node exists from here
    to_f1.blackhole(dlock::lab::direction::downstream);
    std::promise<std::pair<std::error_code, std::string>> outcome;
    dlock::lease lease;
    const auto started = clock_type::now();
    std::thread acquirer([&] {
        std::error_code ec;
        lease = client.acquire(name, dlock::acquire_options().with_wait(15s), ec);
        outcome.set_value({ec, ec ? dlock_last_error() : ""});
    });
    EXPECT_TRUE(eventually([&] { return queue_nodes(at_leader, lock_node).size() == 1; }, 3s))
        << "the create should be committed while its reply is held back";
    to_f2.refuse_new_connections(false);
    to_f1.refuse_new_connections(true);  // the session moves to F2
    to_f1.cut_all();
    to_f1.heal();
    auto result = outcome.get_future();
    ASSERT_EQ(result.wait_for(12s), std::future_status::ready) << "self-deadlock: the acquire never returned";
    acquirer.join();
    const auto [ec, message] = result.get();
    ASSERT_FALSE(ec) << message;
    std::cout << "[zookeeper] acquired " << ms_between(started, clock_type::now())
              << " ms after a lost create reply, through another member\n";
    EXPECT_GE(to_f2.stats().open, 1u) << "the session should have moved to F2";
    const auto nodes = queue_nodes(at_leader, lock_node);
    ASSERT_EQ(nodes.size(), 1u) << "a second queue node of ours means the first became a ghost";
    EXPECT_NE(nodes[0].find(std::string(lease.owner())), std::string::npos) << nodes[0] << " is not ours";
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
}

// Without a majority nothing is granted: an acquire fails (UNAVAILABLE) or times out, never
// succeeds; a held lock becomes SUSPECT, then LOST at the session's bound.
TEST_F(ZooKeeperEnsembleFaults, MajorityLostAcquireNeverFalselySucceeds) {
    auto& ensemble = lab_->zookeeper_ensemble();
    const size_t leader = ensemble.wait_for_leader();
    const size_t follower = (leader + 1) % ensemble.size();
    const std::string cfg = config(ensemble.connect_string(), {"session_timeout: 2s"});
    auto holder_client = dlock::client::open(cfg);
    auto other_client = dlock::client::open(cfg);
    auto holder = holder_client.acquire("faults/majority", dlock::acquire_options().with_wait(0ms));

    ensemble.member(leader).kill();
    ensemble.member(follower).kill();
    for (const char* name : {"faults/majority", "faults/majority-free"}) {
        std::error_code ec;
        auto lease = other_client.acquire(name, dlock::acquire_options().with_wait(1500ms), ec);
        EXPECT_TRUE(ec == dlock::errc::unavailable || ec == dlock::errc::timeout) << name << ": " << ec.message();
        EXPECT_FALSE(lease) << "no lock without a quorum";
    }
    EXPECT_TRUE(eventually([&] { return holder.state() == dlock::lease_state::lost; }, 4s))
        << "a holder that cannot reach a quorum is LOST at its session's bound";

    // Both at once: neither can serve (so neither counts as started) until the other is back.
    ensemble.member(leader).launch();
    ensemble.member(follower).launch();
    const auto deadline = clock_type::now() + 60s;
    ensemble.member(leader).wait_ready(deadline);
    ensemble.member(follower).wait_ready(deadline);
    ensemble.wait_for_leader(30s);
    holder.release();  // deletes the node if the session survived the outage
    std::error_code ec;
    auto after = other_client.acquire("faults/majority", dlock::acquire_options().with_wait(10s), ec);
    EXPECT_FALSE(ec) << "the quorum is back: " << dlock_last_error();
}

// ---- docs/design/faults.md §14: configuration and permission errors ---------------------------------------------

TEST_F(ZooKeeperFaults, MissingChrootIsAClearConfigError) {
    const std::string server = standalone().to_string();
    for (const auto& cfg : {config(server + "/no/such/app"), config(server, {"chroot: /no/such/app"})}) {
        dlock_client* c = nullptr;
        EXPECT_EQ(dlock_client_open(cfg.c_str(), &c), DLOCK_CONFIG);
        const std::string message = dlock_last_error();
        EXPECT_NE(message.find("chroot `/no/such/app` does not exist"), std::string::npos) << message;
        EXPECT_NE(message.find(server), std::string::npos) << "names the server: " << message;
        EXPECT_EQ(c, nullptr);
    }
    dlock_client* c = nullptr;
    EXPECT_EQ(dlock_client_open(config(server + "/a", {"chroot: /b"}).c_str(), &c), DLOCK_CONFIG);
    EXPECT_NE(std::string(dlock_last_error()).find("given twice"), std::string::npos) << dlock_last_error();

    // An existing chroot holds everything dlock creates.
    dlock::lab::zookeeper_client raw(server);
    raw.create("/app", "");
    auto client = dlock::client::open(config(server + "/app"));
    auto lease = client.acquire("x", dlock::acquire_options().with_wait(0ms));
    EXPECT_EQ(raw.children("/app/dlock/x").size(), 1u);
    EXPECT_TRUE(raw.children("/dlock/x").empty());
}

TEST_F(ZooKeeperFaults, UnreachableEnsembleIsUnavailableAtOpen) {
    dlock_client* c = nullptr;
    EXPECT_EQ(dlock_client_open(config("127.0.0.1:1,127.0.0.1:2", {"connect_timeout: 500ms"}).c_str(), &c), DLOCK_UNAVAILABLE);
    EXPECT_NE(std::string(dlock_last_error()).find("127.0.0.1:1,127.0.0.1:2"), std::string::npos) << dlock_last_error();
    EXPECT_EQ(dlock_client_open(config("127.0.0.1").c_str(), &c), DLOCK_CONFIG);
    EXPECT_NE(std::string(dlock_last_error()).find("is not host:port"), std::string::npos) << dlock_last_error();
}

// With digest authentication every node dlock creates is writable by its identity only: another
// identity (anonymous, another user, the same user with another password) can read the queue but
// cannot delete a lock node, and a client configured with such an identity fails at open with a
// clear error instead of failing at its first acquire.
TEST_F(ZooKeeperFaults, DigestAclKeepsOtherIdentitiesFromDeletingLockNodes) {
    const std::string server = standalone().to_string();
    const std::vector<std::string> alice = {"base_path: /dlock-acl", "user: alice", "password: s3cret"};
    {
        auto client = dlock::client::open(config(server, alice));
        auto lease = client.acquire("x", dlock::acquire_options().with_wait(0ms));
        raw_session anonymous(server), mallory(server, "mallory:pw"), wrong_password(server, "alice:guess");
        const auto nodes = anonymous.children("/dlock-acl/x");
        ASSERT_EQ(nodes.size(), 1u) << "others may read the queue";
        const std::string node = "/dlock-acl/x/" + nodes[0];
        for (raw_session* other : {&anonymous, &mallory, &wrong_password}) {
            EXPECT_EQ(other->remove(node), ZNOAUTH) << "another identity deleted the holder's node";
            EXPECT_EQ(other->remove("/dlock-acl/x"), ZNOAUTH) << "another identity deleted the lock node";
        }
        EXPECT_TRUE(client.inspect("x").held);
        EXPECT_EQ(lease.release(), dlock::release_outcome::released);

        auto fails_at_open = [&](const std::vector<std::string>& options, const std::string& fragment,
                                 int status = DLOCK_CONFIG) {
            dlock_client* c = nullptr;
            EXPECT_EQ(dlock_client_open(config(server, options).c_str(), &c), status) << fragment;
            EXPECT_NE(std::string(dlock_last_error()).find(fragment), std::string::npos) << dlock_last_error();
            EXPECT_EQ(c, nullptr);
        };
        fails_at_open({"base_path: /dlock-acl", "user: alice", "password: guess"}, "another password");
        fails_at_open({"base_path: /dlock-acl", "user: mallory", "password: pw"}, "may not create lock nodes under `/dlock-acl`",
                      DLOCK_PERMISSION);
        fails_at_open({"base_path: /dlock-acl"}, "unauthenticated", DLOCK_PERMISSION);
        fails_at_open({"password: pw"}, "without `user`");
    }
    raw_session("127.0.0.1:" + std::to_string(standalone().port), "alice:s3cret").remove_tree("/dlock-acl");
}

// ---- names --------------------------------------------------------------------------------------------

TEST_F(ZooKeeperFaults, EscapedNamesAreSinglePathElements) {
    auto client = dlock::client::open(config(standalone().to_string()));
    std::vector<dlock::lease> held;
    for (const char* name : {".", "..", "zookeeper", "a/b", "a%2Fb", "caf\xc3\xa9", "ok.name-1_~"})
        held.push_back(client.acquire(name, dlock::acquire_options().with_wait(0ms)));
    dlock::lab::zookeeper_client raw(standalone().to_string());
    auto nodes = raw.children("/dlock");
    std::sort(nodes.begin(), nodes.end());
    const std::vector<std::string> expected = {"%2E", "%2E.", "%7Aookeeper", "a%252Fb", "a%2Fb", "caf%C3%A9", "ok.name-1_~"};
    EXPECT_EQ(nodes, expected);
}

// ---- herd detector --------------------------------------------------------------------------------

// 100 waiters queue on one name (20 clients x 5 threads); the holder releases and the lock passes
// down the whole queue, each waiter releasing as soon as it holds. Server packets per handoff stay
// constant (a herd would cost O(waiters): every waiter re-listing on every release), and the lock
// goes in queue order (tokens — node creation order — increase along the handoffs).
TEST_F(ZooKeeperFaults, HandoffWithAHundredWaitersCostsConstantServerOperations) {
    constexpr int clients = 20, threads_per_client = 5, waiters = clients * threads_per_client;
    const std::string cfg = config(standalone().to_string());
    auto holder_client = dlock::client::open(cfg);
    auto holder = holder_client.acquire("faults/herd", dlock::acquire_options().with_wait(0ms));
    std::vector<dlock::client> pool;
    for (int i = 0; i < clients; ++i) pool.push_back(dlock::client::open(cfg));

    std::mutex mutex;
    std::vector<std::pair<int64_t, uint64_t>> handoffs;  // (acquired at, token)
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < waiters; ++i) {
        threads.emplace_back([&, i] {
            std::error_code ec;
            auto lease = pool[size_t(i % clients)].acquire("faults/herd", dlock::acquire_options().with_wait(60s), ec);
            if (ec) { ++failures; return; }
            {
                std::lock_guard<std::mutex> lock(mutex);
                handoffs.emplace_back(clock_type::now().time_since_epoch().count(), lease.fencing_token());
            }
            lease.release();
        });
    }
    ASSERT_TRUE(eventually([&] { return queue_nodes(standalone().to_string(), "/dlock/faults%2Fherd").size() == waiters + 1; }, 30s, 50ms))
        << "every waiter must be queued";
    std::this_thread::sleep_for(100ms);  // quiet: every waiter has set its watch
    const auto before = mntr(standalone());
    const auto started = clock_type::now();
    holder.release();
    for (auto& t : threads) t.join();
    const auto chain_ms = ms_between(started, clock_type::now());
    const auto after = mntr(standalone());
    ASSERT_EQ(failures.load(), 0);
    ASSERT_EQ(handoffs.size(), size_t(waiters));

    const double received = double(after.at("zk_packets_received") - before.at("zk_packets_received")) / waiters;
    const double sent = double(after.at("zk_packets_sent") - before.at("zk_packets_sent")) / waiters;
    std::cout << "[zookeeper] 100 waiters: " << chain_ms << " ms for 100 handoffs; per handoff " << received
              << " packets received by the server (the release's delete + the next waiter's listing), " << sent
              << " sent (replies + two watch notifications: the next waiter's, the releaser's own node's)\n";
    EXPECT_LE(received, 4.0) << "O(1) requests per handoff, not O(waiters)";
    EXPECT_GE(received, 1.0) << "at least the release's delete";
    EXPECT_LE(sent, 6.0) << "one notification per handoff, not one per waiter";
    std::sort(handoffs.begin(), handoffs.end());
    for (size_t i = 1; i < handoffs.size(); ++i)
        EXPECT_GT(handoffs[i].second, handoffs[i - 1].second) << "handoff " << i << " skipped the queue order";
    EXPECT_GT(handoffs.front().second, holder.fencing_token());
}

}  // namespace

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    // Followers give up on a silent leader after syncLimit ticks: 5 x 200 ms, so that a re-election
    // after a paused leader (1 s + the election) fits well inside the 4 s session timeout, whose
    // client-side bound may start up to a quarter of it before the pause (the lab's default of 10
    // ticks leaves ~1 s of margin, too little on a loaded machine).
    dlock::lab::lab_options options;
    options.zookeeper.sync_limit = 5;
    dlock::lab::add_lab_environment({backend::zookeeper, backend::zookeeper_ensemble}, options);
    return RUN_ALL_TESTS();
}
