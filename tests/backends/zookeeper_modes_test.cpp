// The `zookeeper` backend's semaphores, shared locks, holders, list and break, on the lab's real
// standalone server (tickTime 200 ms): N permits usable at once and the N+1st waits; a killed
// holder's permit returns after its session timeout; waiters are woken one at a time down a queue
// longer than N; a mismatched limit is refused and leaves nothing; shared holders hold together,
// exclusive excludes shared and the other way round, a waiting writer stops new readers (FIFO);
// holders and list report the holders' owner and fencing tokens; break fences (the next token is
// higher) and the broken holder reads LOST; an identity whose ACL lacks DELETE gets
// DLOCK_PERMISSION.
#include "backend_test.hpp"
#include "support.hpp"

#include "dlock/lab/gtest.hpp"
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
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using dlock::lab::backend;
using dlock::test::child_process;
using dlock::test::expect_line;
using clock_type = std::chrono::steady_clock;

namespace {

using dlock::test::eventually;

long long ms_between(clock_type::time_point a, clock_type::time_point b) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

// Deletes `path` and everything below it as the digest identity `credentials` ("user:password"),
// for nodes with a creator-only ACL that the lab's reset (unauthenticated) cannot delete.
void remove_tree_as(const std::string& connect, const std::string& credentials, const std::string& path) {
    zhandle_t* zh = zookeeper_init(connect.c_str(), [](zhandle_t*, int, int, const char*, void*) {}, 4000, nullptr, nullptr, 0);
    ASSERT_NE(zh, nullptr);
    ASSERT_TRUE(eventually([&] { return zoo_state(zh) == ZOO_CONNECTED_STATE; }, 10s));
    std::promise<int> authenticated;
    zoo_add_auth(zh, "digest", credentials.data(), int(credentials.size()),
                 [](int rc, const void* p) { static_cast<std::promise<int>*>(const_cast<void*>(p))->set_value(rc); }, &authenticated);
    EXPECT_EQ(authenticated.get_future().get(), ZOK);
    std::function<void(const std::string&)> remove = [&](const std::string& node) {
        String_vector names{};
        if (zoo_get_children(zh, node.c_str(), 0, &names) == ZOK) {
            for (int i = 0; i < names.count; ++i) remove(node + "/" + names.data[i]);
            deallocate_String_vector(&names);
        }
        zoo_delete(zh, node.c_str(), -1);
    };
    remove(path);
    zookeeper_close(zh);
}

dlock::acquire_options try_once() { return dlock::acquire_options().with_wait(0ms); }
dlock::acquire_options permit_of(uint32_t n) { return dlock::acquire_options().with_permits(n); }
dlock::acquire_options shared() { return dlock::acquire_options().with_shared(true); }

class ZooKeeperModes : public dlock::test::lab_backend_test {
protected:
    ZooKeeperModes() : lab_backend_test({backend::zookeeper}) {}

    void SetUp() override {
        lab_backend_test::SetUp();
        if (!lab_) return;
        scratch_ = std::make_unique<dlock::test::scratch_dir>("dlock-zookeeper-v2-test");
    }

    std::string server() { return lab_->zookeeper().client_endpoint().to_string(); }

    // A config reaching the standalone server with extra option lines.
    std::string config(const std::vector<std::string>& extra = {}) { return config_at(server(), extra); }

    // A config reaching `connect` (a proxy in front of the server, say) with extra option lines.
    std::string config_at(const std::string& connect, const std::vector<std::string>& extra = {}) {
        const std::string path = scratch_->path() + "/config-" + std::to_string(++configs_) + ".yaml";
        std::ofstream out(path);
        out << "backend: zookeeper\noptions:\n  connect: \"" << connect << "\"\n";
        for (const auto& line : extra) out << "  " << line << "\n";
        return path;
    }

    std::vector<std::string> nodes(const std::string& path) { return dlock::lab::zookeeper_client(server()).children(path); }

    std::unique_ptr<dlock::test::scratch_dir> scratch_;
    int configs_ = 0;
};

// ---- semaphores -----------------------------------------------------------------------------------

TEST_F(ZooKeeperModes, ReportsTheNewCapabilities) {
    auto client = dlock::client::open(config());
    const uint64_t caps = client.capabilities();
    for (uint64_t bit : {DLOCK_CAP_SEMAPHORE, DLOCK_CAP_SHARED, DLOCK_CAP_LIST, DLOCK_CAP_BREAK}) EXPECT_TRUE(caps & bit) << bit;
}

TEST_F(ZooKeeperModes, AllPermitsUsableAtOnceAndTheNextWaits) {
    auto client = dlock::client::open(config());
    std::vector<dlock::lease> held;
    for (int i = 0; i < 3; ++i) held.push_back(client.acquire("sem/three", permit_of(3).with_wait(0ms)));
    std::set<uint64_t> tokens;
    for (const auto& l : held) tokens.insert(l.fencing_token());
    EXPECT_EQ(tokens.size(), 3u) << "each permit its own token";

    std::error_code ec;
    client.acquire("sem/three", permit_of(3).with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a fourth permit of three";
    EXPECT_NE(std::string(dlock_last_error()).find("all 3 permits"), std::string::npos) << dlock_last_error();
    EXPECT_EQ(nodes("/dlock/.semaphores/sem%2Fthree").size(), 3u) << "the refused try left nothing";

    // The semaphore and the lock of one name are different objects.
    auto lock = client.acquire("sem/three", try_once());

    auto fourth = std::async(std::launch::async, [&] { return client.acquire("sem/three", permit_of(3).with_wait(10s)); });
    EXPECT_EQ(fourth.wait_for(300ms), std::future_status::timeout) << "the fourth waits while three are held";
    const uint64_t highest = *tokens.rbegin();
    EXPECT_EQ(held[1].release(), dlock::release_outcome::released);
    ASSERT_EQ(fourth.wait_for(5s), std::future_status::ready) << "a released permit admits the waiter";
    auto got = fourth.get();
    EXPECT_GT(got.fencing_token(), highest);
}

// Eight threads of four clients take one of two permits 15 times each: never more than two at once,
// and every acquire gets through (a waiter that watched a predecessor admitted meanwhile is woken
// by its signal, not stranded).
TEST_F(ZooKeeperModes, ContendedPermitsNeverExceedTheLimitAndAllProceed) {
    constexpr int threads = 8, rounds = 15;
    std::vector<dlock::client> clients;
    for (int i = 0; i < 4; ++i) clients.push_back(dlock::client::open(config()));
    std::atomic<int> inside{0}, most{0}, done{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t)
        workers.emplace_back([&, t] {
            for (int r = 0; r < rounds; ++r) {
                auto l = clients[size_t(t % 4)].acquire("sem/contended", permit_of(2).with_wait(30s));
                const int now = ++inside;
                int seen = most.load();
                while (now > seen && !most.compare_exchange_weak(seen, now)) {
                }
                std::this_thread::sleep_for(2ms);
                --inside;
                l.release();
                ++done;
            }
        });
    for (auto& w : workers) w.join();
    EXPECT_EQ(done.load(), threads * rounds);
    EXPECT_LE(most.load(), 2);
    EXPECT_EQ(most.load(), 2) << "both permits were used at once at some point";
}

TEST_F(ZooKeeperModes, KilledPermitHolderReturnsItsPermitAfterTheSessionTimeout) {
    const std::string cfg = config({"session_timeout: 1s"});
    child_process holder({DLOCK_CONFORMANCE_WORKER, "hold", cfg, "sem/killed", "1000", "permits:1"}, true);
    const std::string held = expect_line(holder);
    ASSERT_EQ(held.rfind("held ", 0), 0u) << held;
    auto client = dlock::client::open(cfg);
    std::error_code ec;
    client.acquire("sem/killed", permit_of(1).with_wait(0ms), ec);
    ASSERT_EQ(ec, dlock::errc::timeout);

    const auto killed = clock_type::now();
    holder.kill(SIGKILL);
    holder.wait();
    auto lease = client.acquire("sem/killed", permit_of(1).with_wait(10s), ec);
    const auto recovery = ms_between(killed, clock_type::now());
    std::cout << "[zookeeper] permit back " << recovery << " ms after its holder's SIGKILL (session timeout 1000 ms)\n";
    ASSERT_FALSE(ec) << dlock_last_error();
    EXPECT_LE(recovery, 1000 + 1000) << "within the session timeout (+ a tick of expiry rounding and scheduling)";
    EXPECT_GE(recovery, 1000 / 2) << "the dead holder's session keeps the permit until it expires";
    EXPECT_GT(lease.fencing_token(), std::stoull(held.substr(5)));
}

TEST_F(ZooKeeperModes, MismatchedLimitIsRefusedAndLeavesNothing) {
    auto client = dlock::client::open(config());
    auto first = client.acquire("sem/limit", permit_of(3).with_wait(0ms));
    EXPECT_EQ(dlock::lab::zookeeper_client(server()).get("/dlock/.semaphores/sem%2Flimit"), std::optional<std::string>("3"));
    std::error_code ec;
    client.acquire("sem/limit", permit_of(5).with_wait(1s), ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    const std::string message = dlock_last_error();
    for (const char* part : {"sem/limit", "3", "5"}) EXPECT_NE(message.find(part), std::string::npos) << message;
    EXPECT_EQ(nodes("/dlock/.semaphores/sem%2Flimit").size(), 1u) << "the refused acquire's node was deleted";
    // The stored limit stands while a holder is there; the right N still works.
    auto second = client.acquire("sem/limit", permit_of(3).with_wait(0ms));
    EXPECT_GT(second.fencing_token(), first.fencing_token());
}

// The reply to a permit's create is lost: the proxy holds back the server's answers while the
// create reaches the server, then resets both sides. The read of the stored limit pipelined with
// the create is lost with it, and the next round finds the node by its guid: the stored limit must
// still be checked there. A client asking for N = 2 of a semaphore stored with N = 1 must not get
// in beside the holder; it is refused as on the normal path, and its node is deleted.
TEST_F(ZooKeeperModes, LimitIsCheckedWhenTheCreateReplyIsLost) {
    const std::string node = "/dlock/.semaphores/sem%2Flost-reply";
    auto holder_client = dlock::client::open(config());
    auto holder = holder_client.acquire("sem/lost-reply", permit_of(1).with_wait(0ms));
    ASSERT_EQ(dlock::lab::zookeeper_client(server()).get(node), std::optional<std::string>("1"));

    dlock::lab::tcp_proxy proxy(lab_->zookeeper().client_endpoint());
    auto client = dlock::client::open(config_at(proxy.listen_endpoint().to_string(), {"session_timeout: 4s"}));
    proxy.blackhole(dlock::lab::direction::downstream);
    std::promise<std::pair<std::error_code, std::string>> outcome;
    auto lease_slot = std::make_shared<dlock::lease>();
    std::thread acquirer([&] {
        std::error_code ec;
        *lease_slot = client.acquire("sem/lost-reply", permit_of(2).with_wait(4s), ec);
        outcome.set_value({ec, ec ? dlock_last_error() : ""});
    });
    EXPECT_TRUE(eventually([&] { return nodes(node).size() == 2; }, 3s)) << "the create should reach the server while its reply is held back";
    proxy.cut_all();  // the create's reply and the limit's read are lost with the connection
    proxy.heal();
    auto result = outcome.get_future();
    ASSERT_EQ(result.wait_for(15s), std::future_status::ready) << "the acquire never returned";
    acquirer.join();
    const auto [ec, message] = result.get();
    EXPECT_TRUE(ec) << "admitted with N = 2 beside the holder of a semaphore stored with N = 1 (token "
                    << (*lease_slot ? lease_slot->fencing_token() : 0) << ")";
    EXPECT_EQ(ec, dlock::errc::invalid_argument) << message;
    for (const char* part : {"sem/lost-reply", "1", "2"}) EXPECT_NE(message.find(part), std::string::npos) << message;
    if (*lease_slot) lease_slot->release();
    EXPECT_EQ(holder.state(), dlock::lease_state::held);
    EXPECT_TRUE(eventually([&] { return nodes(node).size() == 1; }, 10s)) << "the refused acquire's node is deleted";
}

// The create's reply arrives, the replies pipelined behind it (the listing and the read of the
// stored limit) are lost with the connection: the node is known without a limit check, and the
// next rounds list the queue. Stored N = 3 with two holders; X asks for N = 1, so its node (third)
// is not admitted and would wait as the first waiter, counted as a permit holder by every N = 3
// client. It must be refused at once (INVALID_ARGUMENT) and its node deleted, not wait out its
// deadline and answer TIMEOUT. The proxy lets exactly the create's reply through (its frame: length
// 4, header 16, path 4 + its length, Stat 68), then resets both sides.
TEST_F(ZooKeeperModes, LimitIsCheckedWhenOnlyTheCreateReplyArrives) {
    const std::string node = "/dlock/.semaphores/sem%2Fcreate-reply";
    auto holder_client = dlock::client::open(config());
    auto h1 = holder_client.acquire("sem/create-reply", permit_of(3).with_wait(0ms));
    auto h2 = holder_client.acquire("sem/create-reply", permit_of(3).with_wait(0ms));
    const std::vector<std::string> holders = nodes(node);
    ASSERT_EQ(holders.size(), 2u);

    dlock::lab::tcp_proxy proxy(lab_->zookeeper().client_endpoint());
    auto client = dlock::client::open(config_at(proxy.listen_endpoint().to_string(), {"session_timeout: 4s"}));
    proxy.blackhole(dlock::lab::direction::downstream);
    std::promise<std::pair<std::error_code, std::string>> outcome;
    auto lease_slot = std::make_shared<dlock::lease>();
    std::thread acquirer([&] {
        std::error_code ec;
        *lease_slot = client.acquire("sem/create-reply", permit_of(1).with_wait(8s), ec);
        outcome.set_value({ec, ec ? dlock_last_error() : ""});
    });
    ASSERT_TRUE(eventually([&] { return nodes(node).size() == 3; }, 3s)) << "the create should reach the server while its reply is held back";
    std::string created;
    for (const auto& name : nodes(node))
        if (std::find(holders.begin(), holders.end(), name) == holders.end()) created = node + "/" + name;
    const uint64_t reply_bytes = 4 + 16 + 4 + created.size() + 68;
    const uint64_t before = proxy.stats().bytes_downstream;
    proxy.blackhole_after(dlock::lab::direction::downstream, reply_bytes);
    EXPECT_TRUE(eventually([&] { return proxy.stats().bytes_downstream >= before + reply_bytes; }, 3s)) << "the create's reply passes";
    std::this_thread::sleep_for(200ms);  // the client reads it
    proxy.cut_all();  // the listing's and the limit read's replies are lost with the connection
    const auto healed = clock_type::now();
    proxy.heal();
    auto result = outcome.get_future();
    ASSERT_EQ(result.wait_for(20s), std::future_status::ready) << "the acquire never returned";
    const auto answered = ms_between(healed, clock_type::now());
    acquirer.join();
    const auto [ec, message] = result.get();
    std::cout << "[zookeeper] N = 1 beside two holders of N = 3, create reply only: answered " << answered << " ms after the cut: "
              << message << "\n";
    EXPECT_FALSE(*lease_slot) << "admitted with N = 1 beside two holders";
    EXPECT_EQ(ec, dlock::errc::invalid_argument) << message;
    for (const char* part : {"sem/create-reply", "3", "1"}) EXPECT_NE(message.find(part), std::string::npos) << message;
    EXPECT_LT(answered, 4000) << "refused at its first listing after the reconnection, not after waiting out its 8 s";
    if (*lease_slot) lease_slot->release();
    EXPECT_EQ(h1.state(), dlock::lease_state::held);
    EXPECT_EQ(h2.state(), dlock::lease_state::held);
    EXPECT_TRUE(eventually([&] { return nodes(node).size() == 2; }, 10s)) << "the refused acquire's node is deleted";
    // Its node gone, the third permit of three is free at once.
    std::error_code third_ec;
    auto third = holder_client.acquire("sem/create-reply", permit_of(3).with_wait(0ms), third_ec);
    EXPECT_FALSE(third_ec) << dlock_last_error();
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

// 60 waiters queue for one of 2 permits; the holders release and the permits pass down the whole
// queue, each waiter releasing as soon as it holds. Server packets per handoff stay constant: only
// the first waiter watches the semaphore's children, every other one its predecessor, so a release
// wakes one waiter (a herd would cost O(waiters) listings per release).
TEST_F(ZooKeeperModes, PermitHandoffsDownALongQueueCostConstantServerOperations) {
    constexpr int clients = 12, threads_per_client = 5, waiters = clients * threads_per_client;
    const std::string cfg = config();
    auto holder_client = dlock::client::open(cfg);
    auto h1 = holder_client.acquire("sem/herd", permit_of(2).with_wait(0ms));
    auto h2 = holder_client.acquire("sem/herd", permit_of(2).with_wait(0ms));
    std::vector<dlock::client> pool;
    for (int i = 0; i < clients; ++i) pool.push_back(dlock::client::open(cfg));
    std::atomic<int> failures{0}, inside{0}, most{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < waiters; ++i)
        threads.emplace_back([&, i] {
            std::error_code ec;
            auto lease = pool[size_t(i % clients)].acquire("sem/herd", permit_of(2).with_wait(60s), ec);
            if (ec) {
                ++failures;
                return;
            }
            const int now = ++inside;
            int seen = most.load();
            while (now > seen && !most.compare_exchange_weak(seen, now)) {
            }
            --inside;
            lease.release();
        });
    ASSERT_TRUE(eventually([&] { return nodes("/dlock/.semaphores/sem%2Fherd").size() == waiters + 2; }, 30s, 50ms))
        << "every waiter must be queued";
    std::this_thread::sleep_for(200ms);  // quiet: every waiter has set its watch
    const auto before = mntr(lab_->zookeeper().client_endpoint());
    const auto started = clock_type::now();
    h1.release();
    h2.release();
    for (auto& t : threads) t.join();
    const auto chain_ms = ms_between(started, clock_type::now());
    const auto after = mntr(lab_->zookeeper().client_endpoint());
    ASSERT_EQ(failures.load(), 0);
    EXPECT_LE(most.load(), 2);
    const double received = double(after.at("zk_packets_received") - before.at("zk_packets_received")) / waiters;
    const double sent = double(after.at("zk_packets_sent") - before.at("zk_packets_sent")) / waiters;
    std::cout << "[zookeeper] 60 waiters for 2 permits: " << chain_ms << " ms for 60 handoffs; per handoff " << received
              << " packets received by the server, " << sent << " sent\n";
    EXPECT_LE(received, 12.0) << "O(1) requests per handoff, not O(waiters)";
    EXPECT_LE(sent, 16.0) << "O(1) notifications per handoff, not one per waiter";
}

// The uncontended cycles' server requests (`mntr`): an exclusive acquire+release stays at the 3 it
// cost before shared holders existed (create and listing pipelined, delete), a shared one costs the
// same, a permit one more (the limit's read, in the create's round trip).
TEST_F(ZooKeeperModes, UncontendedCyclesCostTheSameRequestsAsBefore) {
    constexpr int cycles = 200;
    auto client = dlock::client::open(config());
    auto per_cycle = [&](const dlock::acquire_options& options, const std::string& name) {
        client.acquire(name, options).release();  // creates the lock node
        const auto before = mntr(lab_->zookeeper().client_endpoint());
        for (int i = 0; i < cycles; ++i) client.acquire(name, options).release();
        const auto after = mntr(lab_->zookeeper().client_endpoint());
        return double(after.at("zk_packets_received") - before.at("zk_packets_received")) / cycles;
    };
    const double exclusive = per_cycle(try_once(), "cost/x"), reader = per_cycle(shared().with_wait(0ms), "cost/rw"),
                 permit = per_cycle(permit_of(2).with_wait(0ms), "cost/sem");
    std::cout << "[zookeeper] server requests per uncontended cycle: exclusive " << exclusive << ", shared " << reader << ", permit "
              << permit << "\n";
    // Margins: the session's heartbeat (a sync every quarter of the session timeout) may fall in.
    EXPECT_LE(exclusive, 3.1);
    EXPECT_LE(reader, 3.1);
    EXPECT_LE(permit, 4.1);
}

// ---- shared locks ---------------------------------------------------------------------------------

TEST_F(ZooKeeperModes, SharedHoldersTogetherExclusiveExcludesEither) {
    auto a = dlock::client::open(config()), b = dlock::client::open(config());
    auto r1 = a.acquire("rw/x", shared().with_wait(0ms));
    auto r2 = b.acquire("rw/x", shared().with_wait(0ms));
    EXPECT_NE(r1.fencing_token(), r2.fencing_token());
    std::error_code ec;
    b.acquire("rw/x", try_once(), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "an exclusive acquire beside shared holders";
    const auto children = nodes("/dlock/rw%2Fx");
    EXPECT_EQ(children.size(), 2u) << "the refused try left nothing";
    for (const auto& n : children) EXPECT_NE(n.find("-__READ__"), std::string::npos) << n << ": Curator's reader shape";
    r1.release();
    r2.release();

    auto w = a.acquire("rw/x", try_once());
    EXPECT_GT(w.fencing_token(), std::max(r1.fencing_token(), r2.fencing_token()));
    b.acquire("rw/x", shared().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a shared acquire beside an exclusive holder";
    auto reader = std::async(std::launch::async, [&] { return b.acquire("rw/x", shared().with_wait(10s)); });
    EXPECT_EQ(reader.wait_for(300ms), std::future_status::timeout);
    w.release();
    ASSERT_EQ(reader.wait_for(5s), std::future_status::ready);
    EXPECT_GT(reader.get().fencing_token(), w.fencing_token());
}

// A reader holds; a writer queues; a reader arriving after the writer waits behind it (FIFO), so a
// stream of readers cannot starve the writer.
TEST_F(ZooKeeperModes, WaitingWriterStopsNewReaders) {
    auto a = dlock::client::open(config()), b = dlock::client::open(config()), c = dlock::client::open(config());
    auto r1 = a.acquire("rw/fifo", shared().with_wait(0ms));
    auto writer = std::async(std::launch::async, [&] { return b.acquire("rw/fifo", dlock::acquire_options().with_wait(10s)); });
    ASSERT_TRUE(eventually([&] { return nodes("/dlock/rw%2Ffifo").size() == 2; }, 5s));
    std::error_code ec;
    c.acquire("rw/fifo", shared().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a new reader went ahead of the waiting writer";
    auto late_reader = std::async(std::launch::async, [&] { return c.acquire("rw/fifo", shared().with_wait(10s)); });
    EXPECT_EQ(late_reader.wait_for(300ms), std::future_status::timeout);
    r1.release();
    ASSERT_EQ(writer.wait_for(5s), std::future_status::ready) << "the writer gets the lock when the reader before it leaves";
    auto w = writer.get();
    EXPECT_EQ(late_reader.wait_for(200ms), std::future_status::timeout) << "the later reader waits for the writer";
    w.release();
    ASSERT_EQ(late_reader.wait_for(5s), std::future_status::ready);
    EXPECT_GT(late_reader.get().fencing_token(), w.fencing_token());
}

TEST_F(ZooKeeperModes, TimedOutSharedOrPermitAcquireLeavesNothing) {
    auto a = dlock::client::open(config()), b = dlock::client::open(config());
    auto w = a.acquire("rw/timeout", try_once());
    std::error_code ec;
    b.acquire("rw/timeout", shared().with_wait(200ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    EXPECT_EQ(nodes("/dlock/rw%2Ftimeout").size(), 1u) << "the waiting reader's node was deleted";

    auto p = a.acquire("sem/timeout", permit_of(1).with_wait(0ms));
    b.acquire("sem/timeout", permit_of(1).with_wait(200ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    EXPECT_EQ(nodes("/dlock/.semaphores/sem%2Ftimeout").size(), 1u) << "the waiting permit's node was deleted";
}

// ---- holders, list, break -----------------------------------------------------------------------

TEST_F(ZooKeeperModes, HoldersAndListReportOwnersAndTokens) {
    auto client = dlock::client::open(config());
    auto r1 = client.acquire("inv/rw", shared().with_wait(0ms));
    auto r2 = client.acquire("inv/rw", shared().with_wait(0ms));
    auto p1 = client.acquire("inv/sem", permit_of(4).with_wait(0ms));
    auto x = client.acquire("inv/x", try_once());
    auto other = client.acquire("elsewhere", try_once());

    auto readers = client.holders("inv/rw");
    ASSERT_EQ(readers.size(), 2u);
    std::sort(readers.begin(), readers.end(), [](const auto& l, const auto& r) { return l.fencing_token < r.fencing_token; });
    EXPECT_EQ(readers[0].holder, r1.owner());
    EXPECT_EQ(readers[0].fencing_token, r1.fencing_token());
    EXPECT_EQ(readers[1].holder, r2.owner());
    EXPECT_EQ(readers[1].fencing_token, r2.fencing_token());
    EXPECT_EQ(readers[0].kind, dlock::hold_kind::shared);

    auto permits = client.holders("inv/sem", true);
    ASSERT_EQ(permits.size(), 1u);
    EXPECT_EQ(permits[0].kind, dlock::hold_kind::permit);
    EXPECT_EQ(permits[0].permits, 4u);
    EXPECT_EQ(permits[0].holder, p1.owner());
    EXPECT_EQ(permits[0].fencing_token, p1.fencing_token());
    EXPECT_TRUE(client.holders("inv/sem").empty()) << "the lock inv/sem is free";
    EXPECT_TRUE(client.holders("inv/free").empty());

    auto listed = client.list("inv/");
    std::multiset<std::string> names;
    for (const auto& h : listed) names.insert(h.name + (h.kind == dlock::hold_kind::permit ? "#sem" : ""));
    EXPECT_EQ(names, (std::multiset<std::string>{"inv/rw", "inv/rw", "inv/sem#sem", "inv/x"}));
    for (const auto& h : listed)
        if (h.name == "inv/x") {
            EXPECT_EQ(h.holder, x.owner());
            EXPECT_EQ(h.fencing_token, x.fencing_token());
            EXPECT_EQ(h.kind, dlock::hold_kind::exclusive);
        }
    EXPECT_EQ(client.list().size(), 5u);
}

TEST_F(ZooKeeperModes, BreakFencesAndTheBrokenHolderIsLost) {
    auto holder_client = dlock::client::open(config()), admin = dlock::client::open(config());
    auto held = holder_client.acquire("brk/x", try_once());
    auto waiter = std::async(std::launch::async, [&] { return admin.acquire("brk/x", dlock::acquire_options().with_wait(10s)); });
    ASSERT_TRUE(eventually([&] { return nodes("/dlock/brk%2Fx").size() == 2; }, 5s));
    EXPECT_EQ(admin.break_lock("brk/x"), 1u) << "only the holder is broken, not the waiter";
    EXPECT_TRUE(eventually([&] { return held.state() == dlock::lease_state::lost; }, 5s)) << "the broken holder reads LOST";
    ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
    auto next = waiter.get();
    EXPECT_GT(next.fencing_token(), held.fencing_token());
    EXPECT_EQ(held.release(), dlock::release_outcome::already_lost);
    EXPECT_TRUE(next.held()) << "the stale release left the next holder alone";

    // Permits: every holder broken, the next permit's token above them all.
    auto p1 = holder_client.acquire("brk/sem", permit_of(2).with_wait(0ms));
    auto p2 = holder_client.acquire("brk/sem", permit_of(2).with_wait(0ms));
    EXPECT_EQ(admin.break_lock("brk/sem", true), 2u);
    EXPECT_TRUE(eventually([&] { return p1.state() == dlock::lease_state::lost && p2.state() == dlock::lease_state::lost; }, 5s));
    auto p3 = admin.acquire("brk/sem", permit_of(2).with_wait(0ms));
    EXPECT_GT(p3.fencing_token(), std::max(p1.fencing_token(), p2.fencing_token()));
    EXPECT_EQ(admin.break_lock("brk/free"), 0u);

    // Readers: every one broken, a waiting writer kept; its token above theirs.
    auto r1 = holder_client.acquire("brk/rw", shared().with_wait(0ms));
    auto r2 = holder_client.acquire("brk/rw", shared().with_wait(0ms));
    auto writer = std::async(std::launch::async, [&] { return admin.acquire("brk/rw", dlock::acquire_options().with_wait(10s)); });
    ASSERT_TRUE(eventually([&] { return nodes("/dlock/brk%2Frw").size() == 3; }, 5s));
    EXPECT_EQ(admin.break_lock("brk/rw"), 2u);
    EXPECT_TRUE(eventually([&] { return r1.state() == dlock::lease_state::lost && r2.state() == dlock::lease_state::lost; }, 5s));
    ASSERT_EQ(writer.wait_for(5s), std::future_status::ready);
    EXPECT_GT(writer.get().fencing_token(), std::max(r1.fencing_token(), r2.fencing_token()));
}

// Nodes created by digest user alice carry her creator-only ACL: bob, on the same (open) base path,
// may read the holders but gets DLOCK_PERMISSION from break, and alice's lock stays held.
TEST_F(ZooKeeperModes, BreakWithoutDeleteRightIsPermission) {
    dlock::lab::zookeeper_client raw(server());
    raw.remove_recursive("/dlock-v2acl");
    raw.create("/dlock-v2acl", "");  // open ACL: both identities may create lock nodes under it
    auto alice = dlock::client::open(config({"base_path: /dlock-v2acl", "user: alice", "password: s3cret"}));
    auto bob = dlock::client::open(config({"base_path: /dlock-v2acl", "user: bob", "password: pw"}));
    auto held = alice.acquire("acl/x", try_once());
    EXPECT_EQ(bob.holders("acl/x").size(), 1u) << "READ is world-readable";
    try {
        bob.break_lock("acl/x");
        ADD_FAILURE() << "bob broke alice's lock";
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code(), dlock::errc::permission) << e.what();
        EXPECT_NE(std::string(e.what()).find("DELETE"), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find("pw"), std::string::npos) << "no password in the error";
    }
    EXPECT_TRUE(held.held());
    EXPECT_EQ(alice.break_lock("acl/x"), 1u) << "the creator may";
    EXPECT_TRUE(eventually([&] { return held.state() == dlock::lease_state::lost; }, 5s));
    remove_tree_as(server(), "alice:s3cret", "/dlock-v2acl");
}

// ---- living beside kazoo ------------------------------------------------------------------------

// Whether /usr/bin/python3 can import kazoo (Debian python3-kazoo). Without it the interop cases
// fail in CI (CI=true) and are skipped elsewhere.
bool kazoo_available() { return std::system("/usr/bin/python3 -c 'import kazoo' >/dev/null 2>&1") == 0; }

#define REQUIRE_KAZOO()                                                                                 \
    do {                                                                                                \
        if (!kazoo_available()) {                                                                       \
            const char* ci = std::getenv("CI");                                                         \
            if (ci && std::string(ci) == "true") FAIL() << "python3-kazoo is not installed";             \
            GTEST_SKIP() << "python3-kazoo is not installed";                                           \
        }                                                                                               \
    } while (0)

// A kazoo WriteLock or ReadLock on the node of a dlock lock, configured as docs/backends/zookeeper.md
// says (zookeeper_kazoo_peer.py).
class kazoo_peer {
public:
    kazoo_peer(const std::string& hosts, const std::string& path, const std::string& kind)
        : process_({"/usr/bin/python3", DLOCK_KAZOO_PEER, hosts, path, kind}, true, {}, true) {
        EXPECT_EQ(expect_line(process_), "ready");
    }
    ~kazoo_peer() { process_.write_line("quit"); }
    std::string ask(const std::string& command) {
        process_.write_line(command);
        return expect_line(process_);
    }

private:
    child_process process_;
};

// One lock for kazoo's WriteLock and dlock's exclusive and shared holders: each excludes the other,
// both ways, and a kazoo waiter is woken by a dlock release (it watches dlock's node).
TEST_F(ZooKeeperModes, KazooWriteLockAndDlockExcludeEachOther) {
    REQUIRE_KAZOO();
    auto client = dlock::client::open(config());
    kazoo_peer writer(server(), "/dlock/interop", "write");
    ASSERT_EQ(writer.ask("try"), "held");
    std::error_code ec;
    client.acquire("interop", try_once(), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "dlock took a lock kazoo holds";
    client.acquire("interop", shared().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "dlock took shared a lock kazoo holds";
    auto waiting = std::async(std::launch::async, [&] { return client.acquire("interop", dlock::acquire_options().with_wait(10s)); });
    EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout);
    EXPECT_EQ(writer.ask("release"), "released");
    ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready) << "kazoo's release wakes the dlock waiter";
    auto held = waiting.get();
    EXPECT_EQ(writer.ask("try"), "busy") << "kazoo took a lock dlock holds";
    held.release();
    EXPECT_EQ(writer.ask("try"), "held");
    EXPECT_EQ(writer.ask("release"), "released");

    auto reader = client.acquire("interop", shared().with_wait(0ms));
    EXPECT_EQ(writer.ask("try"), "busy") << "kazoo's writer beside a dlock reader";
    std::promise<std::string> answer;
    std::thread ask([&] { answer.set_value(writer.ask("wait 10")); });
    std::this_thread::sleep_for(300ms);
    reader.release();
    auto result = answer.get_future();
    EXPECT_EQ(result.wait_for(5s), std::future_status::ready);
    ask.join();
    EXPECT_EQ(result.get(), "held") << "a dlock release wakes the kazoo waiter";
    EXPECT_EQ(writer.ask("release"), "released");
}

// kazoo's ReadLock and dlock's shared holders hold together; dlock's exclusive acquire waits for
// kazoo's reader.
TEST_F(ZooKeeperModes, KazooReadLockSharesWithDlockReadersAndExcludesItsWriters) {
    REQUIRE_KAZOO();
    auto client = dlock::client::open(config());
    kazoo_peer reader(server(), "/dlock/interop-rw", "read");
    auto dlock_reader = client.acquire("interop-rw", shared().with_wait(0ms));
    EXPECT_EQ(reader.ask("try"), "held") << "readers of both hold together";
    dlock_reader.release();
    std::error_code ec;
    client.acquire("interop-rw", try_once(), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "dlock's writer beside kazoo's reader";
    EXPECT_EQ(reader.ask("release"), "released");
    auto w = client.acquire("interop-rw", try_once());
    EXPECT_EQ(reader.ask("try"), "busy") << "kazoo's reader beside dlock's writer";
}

// ---- living beside Curator ------------------------------------------------------------------------

// CuratorPeer.java compiled against Debian's jars (libcurator-recipes-java) into `dir`; the java
// command line's classpath, or "" when javac or the jars are missing.
std::string compile_curator_peer(const std::string& dir) {
    std::string classpath;
    for (const char* jar : {"curator-client", "curator-framework", "curator-recipes", "zookeeper", "zookeeper-jute", "guava",
                            "slf4j-api", "slf4j-nop"}) {
        const std::string path = std::string("/usr/share/java/") + jar + ".jar";
        if (!std::ifstream(path)) return "";
        classpath += (classpath.empty() ? "" : ":") + path;
    }
    const std::string command = "javac -d '" + dir + "' -cp '" + classpath + "' '" DLOCK_CURATOR_PEER "' >/dev/null 2>&1";
    if (std::system(command.c_str()) != 0) return "";
    return dir + ":" + classpath;
}

class curator_peer {
public:
    curator_peer(const std::string& classpath, const std::string& connect, const std::string& path, const std::string& kind)
        : process_({"java", "-cp", classpath, "CuratorPeer", connect, path, kind}, true, {}, true) {
        EXPECT_EQ(expect_line(process_, 30000), "ready");
    }
    ~curator_peer() { process_.write_line("quit"); }
    std::string ask(const std::string& command) {
        process_.write_line(command);
        return expect_line(process_);
    }

private:
    child_process process_;
};

#define REQUIRE_CURATOR(classpath)                                                                      \
    do {                                                                                                \
        if (classpath.empty()) {                                                                        \
            const char* ci = std::getenv("CI");                                                         \
            if (ci && std::string(ci) == "true") FAIL() << "javac or libcurator-recipes-java is missing";\
            GTEST_SKIP() << "javac or libcurator-recipes-java is missing";                              \
        }                                                                                               \
    } while (0)

// dlock's exclusive nodes are InterProcessMutex's: a Curator mutex and a dlock exclusive holder of
// one lock exclude each other, and each one's release wakes the other's waiter.
TEST_F(ZooKeeperModes, CuratorMutexAndDlockExcludeEachOther) {
    const std::string classpath = compile_curator_peer(scratch_->path());
    REQUIRE_CURATOR(classpath);
    auto client = dlock::client::open(config());
    curator_peer mutex(classpath, server(), "/dlock/curator", "mutex");
    ASSERT_EQ(mutex.ask("try"), "held");
    std::error_code ec;
    client.acquire("curator", try_once(), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "dlock took a lock Curator holds";
    auto waiting = std::async(std::launch::async, [&] { return client.acquire("curator", dlock::acquire_options().with_wait(10s)); });
    EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout);
    EXPECT_EQ(mutex.ask("release"), "released");
    ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready) << "Curator's release wakes the dlock waiter";
    auto held = waiting.get();
    EXPECT_EQ(mutex.ask("try"), "busy") << "Curator took a lock dlock holds";
    std::promise<std::string> answer;
    std::thread ask([&] { answer.set_value(mutex.ask("wait 10")); });
    std::this_thread::sleep_for(300ms);
    held.release();
    auto result = answer.get_future();
    EXPECT_EQ(result.wait_for(5s), std::future_status::ready);
    ask.join();
    EXPECT_EQ(result.get(), "held") << "a dlock release wakes the Curator waiter";
    EXPECT_EQ(mutex.ask("release"), "released");
}

// With `curator_recipe: read_write_lock`, dlock's exclusive and shared holders and Curator's
// InterProcessReadWriteLock are one read-write lock: readers of both hold together, each side's
// writer excludes the other's readers and writer.
TEST_F(ZooKeeperModes, CuratorReadWriteLockAndDlockAreOneLock) {
    const std::string classpath = compile_curator_peer(scratch_->path());
    REQUIRE_CURATOR(classpath);
    auto client = dlock::client::open(config({"curator_recipe: read_write_lock"}));
    curator_peer writer(classpath, server(), "/dlock/curator-rw", "write");
    curator_peer reader(classpath, server(), "/dlock/curator-rw", "read");

    auto dlock_reader = client.acquire("curator-rw", shared().with_wait(0ms));
    EXPECT_EQ(reader.ask("try"), "held") << "readers of both hold together";
    EXPECT_EQ(writer.ask("try"), "busy") << "Curator's writer beside readers";
    std::error_code ec;
    client.acquire("curator-rw", try_once(), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "dlock's writer beside readers";
    dlock_reader.release();
    EXPECT_EQ(reader.ask("release"), "released");

    auto dlock_writer = client.acquire("curator-rw", try_once());
    const auto nodes_now = nodes("/dlock/curator-rw");
    ASSERT_EQ(nodes_now.size(), 1u);
    EXPECT_NE(nodes_now[0].find("-__WRIT__"), std::string::npos) << nodes_now[0];
    EXPECT_EQ(reader.ask("try"), "busy") << "Curator's reader beside dlock's writer";
    EXPECT_EQ(writer.ask("try"), "busy") << "Curator's writer beside dlock's writer";
    dlock_writer.release();
    EXPECT_EQ(writer.ask("try"), "held");
    client.acquire("curator-rw", shared().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "dlock's reader beside Curator's writer";
    EXPECT_EQ(writer.ask("release"), "released");
}

}  // namespace

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    dlock::lab::add_lab_environment({backend::zookeeper});
    return RUN_ALL_TESTS();
}
