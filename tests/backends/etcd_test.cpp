// The `etcd` backend under the faults of FAULTS.md that concern it, on real etcd servers from the
// lab (one member, and a 3-member cluster with 50 ms heartbeats and 500 ms elections):
//   2  holder killed: the next holder gets the lock after about the ttl (also with a leader change);
//   3  holder paused past its ttl: its fenced write is refused, it learns it lost the lock;
//   10 leader killed or paused: held locks survive, waiters proceed; majority lost: never a false success;
//   12 waiter's lease expires or is revoked while queued: an error, never success; own key deleted: LOST;
//   14 permission denied, bad credentials, auth required: clear errors; an expired token is renewed;
// and the backend's own claims: one keepalive stream per client, the granted TTL read back, SUSPECT
// while keepalives fail, escaped names, and O(1) server operations per handoff with 100 waiters.
#include "backend_test.hpp"
#include "support.hpp"

#include "dlock/lab/gtest.hpp"
#include "dlock/lab/proxy.hpp"

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
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



// Runs etcdctl (v3 API) against `endpoint` and returns its stdout lines; fails the test on a
// non-zero exit.
std::vector<std::string> etcdctl(const std::string& endpoint, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"etcdctl", "--endpoints=" + endpoint, "--dial-timeout=2s", "--command-timeout=5s"};
    argv.insert(argv.end(), args.begin(), args.end());
    child_process p(argv, true, {"ETCDCTL_API=3"});
    std::vector<std::string> lines;
    for (std::string line; p.read_line(line, 10000);) lines.push_back(line);
    const int status = p.wait();
    std::string command;
    for (const auto& a : args) command += " " + a;
    EXPECT_EQ(status, 0) << "etcdctl" << command;
    return lines;
}

// GET /metrics from an etcd member and sums the samples of `metric` whose labels contain every
// fragment of `filters` (e.g. grpc_method="Txn").
double metric_sum(const dlock::lab::endpoint& member, const std::string& metric, const std::vector<std::string>& filters = {}) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(member.port);
    inet_pton(AF_INET, member.host.c_str(), &address.sin_addr);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        if (fd >= 0) close(fd);
        ADD_FAILURE() << "cannot connect to " << member.to_string() << " for /metrics";
        return -1;
    }
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: " + member.to_string() + "\r\n\r\n";
    if (write(fd, request.data(), request.size()) != ssize_t(request.size())) ADD_FAILURE() << "short write";
    std::string body;
    char buffer[65536];
    for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) body.append(buffer, size_t(n));
    close(fd);
    double sum = 0;
    std::istringstream lines(body);
    for (std::string line; std::getline(lines, line);) {
        if (line.rfind(metric + "{", 0) != 0) continue;
        bool match = true;
        for (const auto& f : filters) match = match && line.find(f) != std::string::npos;
        if (match) sum += std::stod(line.substr(line.rfind(' ') + 1));
    }
    return sum;
}

// Waits up to `timeout` for `condition`, checking every 10 ms (test-side observation of state the
// library changes by itself).
bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
    const auto end = clock_type::now() + timeout;
    while (!condition()) {
        if (clock_type::now() >= end) return false;
        std::this_thread::sleep_for(10ms);
    }
    return true;
}

std::chrono::milliseconds ms_since(clock_type::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t);
}

class EtcdFaults : public ::testing::Test {
protected:
    void SetUp() override {
        DLOCK_LAB_REQUIRE(backend::etcd);
        DLOCK_LAB_REQUIRE(backend::etcd_cluster);
        auto& env = dlock::lab::lab_environment::instance();
        if (!env.owned_lab()) GTEST_SKIP() << "attached to a `dlock-lab up`: fault controls need a lab of our own";
        lab_ = env.owned_lab();
        env.reset(backend::etcd);
        env.reset(backend::etcd_cluster);
    }

    std::string config(backend which) { return dlock::lab::lab_environment::instance().config_path(which).string(); }
    dlock::lab::endpoint single() { return lab_->etcd().client_endpoint(); }

    // A config for the given members with extra option lines (e.g. "session_ttl: 3s").
    static std::string yaml(const std::vector<dlock::lab::endpoint>& members, const std::vector<std::string>& extra = {}) {
        std::string out = "backend: etcd\noptions:\n  endpoints: [";
        for (size_t i = 0; i < members.size(); ++i) out += (i ? ", \"" : "\"") + members[i].to_string() + "\"";
        out += "]\n";
        for (const auto& line : extra) out += "  " + line + "\n";
        return out;
    }

    // The cluster's members, the leader first (so the client starts on it and must fail over).
    std::vector<dlock::lab::endpoint> leader_first(size_t leader) {
        auto& cluster = lab_->etcd_cluster();
        std::vector<dlock::lab::endpoint> out = {cluster.member(leader).client_endpoint()};
        for (size_t i = 0; i < cluster.size(); ++i)
            if (i != leader) out.push_back(cluster.member(i).client_endpoint());
        return out;
    }

    // Puts every cluster member back (resumed, running) when a test ends, however it ends.
    struct cluster_restorer {
        dlock::lab::etcd_cluster& cluster;
        ~cluster_restorer() {
            for (size_t i = 0; i < cluster.size(); ++i) {
                auto& m = cluster.member(i);
                if (m.paused()) m.resume();
                if (!m.running()) m.restart(dlock::lab::data_policy::keep);
            }
            cluster.wait_for_leader(20s);
        }
    };

    dlock::lab::lab* lab_ = nullptr;
    dlock::test::scratch_dir scratch_{"dlock-etcd-test"};
};

// ---- FAULTS.md 2 ----------------------------------------------------------------------------------

// The holder is SIGKILLed: its session lease outlives it by up to its TTL, then the next holder gets
// the lock — no sooner (the lock was never released early) and not much later.
TEST_F(EtcdFaults, HolderKilledNextHolderAfterAboutTheTtl) {
    child_process holder({DLOCK_CONFORMANCE_WORKER, "hold", config(backend::etcd), "faults/killed", "2000"}, true);
    const std::string line = expect_line(holder);
    ASSERT_EQ(line.rfind("held ", 0), 0u) << line;
    auto client = dlock::client::open(config(backend::etcd));
    std::error_code ec;
    client.acquire("faults/killed", dlock::acquire_options().with_wait(0ms), ec);
    ASSERT_EQ(ec, dlock::errc::timeout);
    const auto killed = clock_type::now();
    holder.kill(SIGKILL);
    holder.wait();
    auto lease = client.acquire("faults/killed", dlock::acquire_options().with_wait(10s));
    const auto recovery = ms_since(killed);
    std::cout << "[etcd] next holder " << recovery.count() << " ms after the holder's SIGKILL (ttl 2000 ms)\n";
    // The server last renewed the lease at most ttl/3 before the kill: it lives >= 2/3 ttl more.
    EXPECT_GE(recovery, 1000ms) << "the lock was free before the dead holder's lease expired";
    // etcd checks for expired leases every 500 ms.
    EXPECT_LE(recovery, 2000ms + 1500ms);
    EXPECT_GT(lease.fencing_token(), std::stoull(line.substr(5)));
}

// The holder and the cluster's leader die together: the new leader extends every lease by its TTL
// when it takes over, so the next holder waits about election + TTL.
TEST_F(EtcdFaults, HolderAndLeaderKilledNextHolderAfterElectionPlusTtl) {
    auto& cluster = lab_->etcd_cluster();
    cluster_restorer restore{cluster};
    const size_t leader = cluster.wait_for_leader();
    const std::string cfg = scratch_.path() + "/leader-first.yaml";
    std::ofstream(cfg) << yaml(leader_first(leader), {"request_timeout: 1s", "dial_timeout: 500ms"});
    child_process holder({DLOCK_CONFORMANCE_WORKER, "hold", cfg, "faults/killed2", "2000"}, true);
    ASSERT_EQ(expect_line(holder).rfind("held ", 0), 0u);
    auto client = dlock::client::from_yaml(yaml(leader_first(leader), {"request_timeout: 1s", "dial_timeout: 500ms"}));
    std::atomic<bool> acquired{false};
    clock_type::time_point got;
    std::thread waiter([&] {
        std::error_code ec;
        auto lease = client.acquire("faults/killed2", dlock::acquire_options().with_wait(20s), ec);
        got = clock_type::now();
        acquired = !ec;
        EXPECT_FALSE(ec) << dlock_last_error();
    });
    std::this_thread::sleep_for(300ms);
    const auto killed = clock_type::now();
    holder.kill(SIGKILL);
    cluster.member(leader).kill();
    waiter.join();
    ASSERT_TRUE(acquired.load());
    const auto recovery = std::chrono::duration_cast<std::chrono::milliseconds>(got - killed);
    std::cout << "[etcd-cluster] next holder " << recovery.count()
              << " ms after the holder's and the leader's SIGKILL (ttl 2000 ms, election timeout 500 ms)\n";
    EXPECT_LE(recovery, 500ms + 2000ms + 3000ms);
    holder.wait();
}

// ---- FAULTS.md 3 and 4 ----------------------------------------------------------------------------

// Holder A is paused past its ttl right after checking its lease; B acquires; A resumes. A's fenced
// write is refused (B's token, its key's create_revision, is higher), A learns it lost the lock,
// and A's stale release leaves B's lock alone.
TEST_F(EtcdFaults, HolderPausedPastTtlIsFencedOff) {
    child_process a({DLOCK_CONFORMANCE_WORKER, "script", config(backend::etcd), "faults/pause", "1000"}, true, {}, true);
    const std::string held = expect_line(a);
    ASSERT_EQ(held.rfind("held ", 0), 0u) << held;
    a.write_line("state");
    EXPECT_EQ(expect_line(a), "held");  // A checked: it believes it holds the lock...
    a.kill(SIGSTOP);                     // ...and stalls
    const auto paused = clock_type::now();
    auto client = dlock::client::open(config(backend::etcd));
    auto b = client.acquire("faults/pause", dlock::acquire_options().with_wait(10s));
    std::cout << "[etcd] B acquired " << ms_since(paused).count() << " ms after A was paused (ttl 1 s)\n";
    expect_resumed_holder_fenced_off(a, client, b, "faults/pause");
}

// ---- FAULTS.md 10 ---------------------------------------------------------------------------------

// The leader dies (kill) or stalls (pause) while a lock is held and a waiter waits, with the client
// connected to it first. The holder's session fails over and its lease survives the election; the
// waiter's watch moves to another member, and it proceeds as soon as the holder releases.
void leader_fault_keeps_locks(dlock::lab::lab& lab, const std::string& yaml_text, bool pause) {
    auto& cluster = lab.etcd_cluster();
    const size_t leader = cluster.wait_for_leader();
    auto holder_client = dlock::client::from_yaml(yaml_text);
    auto waiter_client = dlock::client::from_yaml(yaml_text);
    auto lease = holder_client.acquire("faults/leader", dlock::acquire_options().with_wait(0ms).with_ttl(3s));
    std::atomic<bool> acquired{false};
    clock_type::time_point got;
    std::thread waiter([&] {
        std::error_code ec;
        auto l = waiter_client.acquire("faults/leader", dlock::acquire_options().with_wait(30s).with_ttl(3s), ec);
        got = clock_type::now();
        acquired = !ec;
        EXPECT_FALSE(ec) << dlock_last_error();
    });
    std::this_thread::sleep_for(300ms);
    EXPECT_FALSE(acquired.load());
    if (pause) cluster.member(leader).pause();
    else cluster.member(leader).kill();
    const size_t new_leader = cluster.wait_for_leader(10s);
    EXPECT_NE(new_leader, leader);
    // Longer than the 3 s TTL: the lease lives only if keepalives reached the new leader.
    std::this_thread::sleep_for(4s);
    EXPECT_NE(lease.state(), dlock::lease_state::lost) << "the held lock must survive the leader's fault";
    EXPECT_FALSE(acquired.load()) << "the waiter acquired a lock that is still held";
    auto probe = dlock::client::from_yaml(yaml_text);
    std::error_code ec;
    probe.acquire("faults/leader", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "still held on the server: " << dlock_last_error();
    const auto released = clock_type::now();
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
    waiter.join();
    ASSERT_TRUE(acquired.load());
    std::cout << "[etcd-cluster] after the leader's " << (pause ? "pause" : "kill") << ", handoff took "
              << std::chrono::duration_cast<std::chrono::milliseconds>(got - released).count() << " ms\n";
    EXPECT_LT(got - released, 3s) << "the waiter must be woken, on its new member";
}

TEST_F(EtcdFaults, LeaderKilledHeldLocksSurviveAndWaitersProceed) {
    auto& cluster = lab_->etcd_cluster();
    cluster_restorer restore{cluster};
    leader_fault_keeps_locks(*lab_, yaml(leader_first(cluster.wait_for_leader()), {"request_timeout: 1s", "dial_timeout: 500ms"}),
                             false);
}

TEST_F(EtcdFaults, LeaderPausedHeldLocksSurviveAndWaitersProceed) {
    auto& cluster = lab_->etcd_cluster();
    cluster_restorer restore{cluster};
    leader_fault_keeps_locks(*lab_, yaml(leader_first(cluster.wait_for_leader()), {"request_timeout: 1s", "dial_timeout: 500ms"}),
                             true);
}

// Two of three members die: no quorum. A new acquire fails (no lease can be granted) and a queued
// waiter gets an error once its session lease cannot be kept alive: never a false success. The
// holder's lease goes SUSPECT, then LOST at its deadline.
TEST_F(EtcdFaults, MajorityLostAcquireFailsNeverFalseSuccess) {
    auto& cluster = lab_->etcd_cluster();
    cluster_restorer restore{cluster};
    cluster.wait_for_leader();
    const std::string text = yaml({cluster.member(0).client_endpoint(), cluster.member(1).client_endpoint(),
                                   cluster.member(2).client_endpoint()},
                                  {"request_timeout: 1s", "dial_timeout: 500ms", "session_ttl: 2s"});
    auto holder_client = dlock::client::from_yaml(text);
    auto waiter_client = dlock::client::from_yaml(text);
    auto lease = holder_client.acquire("faults/majority", dlock::acquire_options().with_wait(0ms));
    std::error_code waiter_ec;
    std::atomic<bool> waiter_done{false};
    std::thread waiter([&] {
        waiter_client.acquire("faults/majority", dlock::acquire_options().with_wait(20s), waiter_ec);
        waiter_done = true;
    });
    std::this_thread::sleep_for(300ms);
    cluster.member(1).kill();
    cluster.member(2).kill();

    auto newcomer = dlock::client::from_yaml(text);  // member 0 still answers serializable reads
    std::error_code ec;
    auto other = newcomer.acquire("faults/majority-free", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::unavailable) << "never a false success: " << dlock_last_error();
    EXPECT_FALSE(other);
    std::cout << "[etcd-cluster] acquire without quorum: " << dlock_last_error() << "\n";

    waiter.join();
    EXPECT_TRUE(waiter_ec) << "a waiter must never succeed without quorum";
    EXPECT_NE(waiter_ec, dlock::errc::timeout) << "its session lease died first: an error, not a timeout";
    EXPECT_TRUE(eventually([&] { return lease.state() == dlock::lease_state::lost; }, 4s))
        << "the holder's lease must be LOST once its deadline passed unconfirmed";
}

// ---- FAULTS.md 12 ---------------------------------------------------------------------------------

// A queued waiter whose client is cut off from the server (a partition at a proxy) cannot keep its
// session lease alive: at the lease's deadline its acquire fails — it never succeeds, even though
// the holder releases meanwhile — and nothing of it is left on the server.
TEST_F(EtcdFaults, WaiterWhoseLeaseExpiresWhileQueuedGetsAnError) {
    dlock::lab::tcp_proxy proxy(single());
    auto holder_client = dlock::client::open(config(backend::etcd));
    auto lease = holder_client.acquire("faults/queued", dlock::acquire_options().with_wait(0ms));
    auto waiter_client = dlock::client::from_yaml(
        yaml({proxy.listen_endpoint()}, {"session_ttl: 1s", "request_timeout: 500ms", "dial_timeout: 500ms"}));
    std::error_code waiter_ec;
    std::atomic<bool> done{false};
    clock_type::time_point cut;
    std::thread waiter([&] {
        auto l = waiter_client.acquire("faults/queued", dlock::acquire_options().with_wait(20s), waiter_ec);
        done = true;
    });
    std::this_thread::sleep_for(300ms);
    cut = clock_type::now();
    proxy.blackhole();
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);  // the waiter must not get it now
    waiter.join();
    const auto after = ms_since(cut);
    std::cout << "[etcd] queued waiter failed " << after.count() << " ms after the partition: " << waiter_ec.message() << "\n";
    EXPECT_EQ(waiter_ec, dlock::errc::unavailable) << "an error, never success";
    EXPECT_LT(after, 4s);
    proxy.heal();
    // Its key went with its lease on the server.
    EXPECT_TRUE(eventually([&] { return !holder_client.inspect("faults/queued").held; }, 3s))
        << "the failed waiter left its key behind";
}

// An operator revokes a queued waiter's lease: its key goes, its own-key watch fires, and the
// acquire fails at once.
TEST_F(EtcdFaults, WaiterWhoseLeaseIsRevokedGetsAnErrorAtOnce) {
    auto holder_client = dlock::client::open(config(backend::etcd));
    auto lease = holder_client.acquire("faults/revoked", dlock::acquire_options().with_wait(0ms));
    auto waiter_client = dlock::client::open(config(backend::etcd));
    std::error_code waiter_ec;
    clock_type::time_point failed;
    std::thread waiter([&] {
        waiter_client.acquire("faults/revoked", dlock::acquire_options().with_wait(20s), waiter_ec);
        failed = clock_type::now();
    });
    std::this_thread::sleep_for(300ms);
    const auto keys = etcdctl(single().to_string(), {"get", "--prefix", "dlock/faults%2Frevoked/", "--keys-only",
                                                     "--sort-by=CREATE", "--order=ASCEND"});
    std::vector<std::string> queue;
    for (const auto& k : keys)
        if (!k.empty()) queue.push_back(k);
    ASSERT_EQ(queue.size(), 2u) << "the holder's key and the waiter's";
    const std::string waiter_key = queue[1];
    const std::string lease_id = waiter_key.substr(waiter_key.rfind('/') + 1, 16);
    const auto revoked = clock_type::now();
    etcdctl(single().to_string(), {"lease", "revoke", lease_id});
    waiter.join();
    std::cout << "[etcd] queued waiter failed " << std::chrono::duration_cast<std::chrono::milliseconds>(failed - revoked).count()
              << " ms after its lease was revoked: " << waiter_ec.message() << "\n";
    EXPECT_EQ(waiter_ec, dlock::errc::backend) << "an error, never success";
    EXPECT_LT(failed - revoked, 2s);
    EXPECT_EQ(lease.state(), dlock::lease_state::held) << "the holder is untouched";
}

// An operator deletes the holder's key: the holder's own-key watch reports LOST (callback and
// state), its release reports ALREADY_LOST, and the lock is free for others.
TEST_F(EtcdFaults, OwnKeyDeletedByAnOperatorIsReportedLost) {
    auto client = dlock::client::open(config(backend::etcd));
    auto lease = client.acquire("faults/own", dlock::acquire_options().with_wait(0ms));
    std::atomic<int> lost{0};
    lease.on_lost([&] { ++lost; });
    const auto deleted = clock_type::now();
    EXPECT_EQ(lab_->etcd().client().delete_prefix("dlock/faults%2Fown/"), 1);
    ASSERT_TRUE(eventually([&] { return lost.load() == 1; }, 2s)) << "no LOST notice after the key was deleted";
    std::cout << "[etcd] LOST reported " << ms_since(deleted).count() << " ms after the holder's key was deleted\n";
    EXPECT_EQ(lease.state(), dlock::lease_state::lost);
    EXPECT_EQ(lease.release(), dlock::release_outcome::already_lost);
    auto other = dlock::client::open(config(backend::etcd));
    EXPECT_TRUE(other.acquire("faults/own", dlock::acquire_options().with_wait(0ms)));
}

// ---- FAULTS.md 14 ---------------------------------------------------------------------------------

// Authentication on the single member, enabled with etcdctl and disabled again however the test ends.
struct auth_enabled {
    std::string endpoint;
    explicit auth_enabled(std::string e) : endpoint(std::move(e)) {
        etcdctl(endpoint, {"user", "add", "root:rootpw"});
        etcdctl(endpoint, {"role", "add", "root"});
        etcdctl(endpoint, {"user", "grant-role", "root", "root"});
        etcdctl(endpoint, {"user", "add", "reader:readerpw"});  // may read dlock's keys, not write them
        etcdctl(endpoint, {"role", "add", "dlock-read"});
        etcdctl(endpoint, {"role", "grant-permission", "dlock-read", "--prefix=true", "read", "dlock/"});
        etcdctl(endpoint, {"user", "grant-role", "reader", "dlock-read"});
        etcdctl(endpoint, {"user", "add", "nobody:nobodypw"});  // no role at all
        etcdctl(endpoint, {"auth", "enable"});
    }
    ~auth_enabled() {
        etcdctl(endpoint, {"--user=root:rootpw", "auth", "disable"});
        for (const char* user : {"root", "reader", "nobody"}) etcdctl(endpoint, {"user", "delete", user});
        for (const char* role : {"root", "dlock-read"}) etcdctl(endpoint, {"role", "delete", role});
    }
};

TEST_F(EtcdFaults, AuthenticationAndPermissionErrorsAreClear) {
    const auto where = single();
    auth_enabled auth(where.to_string());
    auto open = [&](const std::vector<std::string>& extra, std::error_code& ec) {
        dlock_client* c = nullptr;
        const std::string text = yaml({where}, extra);
        const int status = dlock_client_open_yaml(text.c_str(), "auth.yaml", &c);
        ec = dlock::make_error_code(static_cast<dlock::errc>(status));
        return dlock::client(c);
    };
    std::error_code ec;
    {
        auto c = open({}, ec);
        EXPECT_EQ(ec, dlock::errc::config) << "no credentials on a cluster that needs them";
        EXPECT_NE(std::string(dlock_last_error()).find("set `username` and `password`"), std::string::npos) << dlock_last_error();
    }
    {
        auto c = open({"username: root", "password: wrong"}, ec);
        EXPECT_EQ(ec, dlock::errc::config);
        EXPECT_NE(std::string(dlock_last_error()).find("authentication failed for user `root`"), std::string::npos)
            << dlock_last_error();
    }
    {
        auto c = open({"username: nobody", "password: nobodypw"}, ec);
        EXPECT_EQ(ec, dlock::errc::backend) << "no permission at all: refused at open";
        EXPECT_NE(std::string(dlock_last_error()).find("permission denied for user `nobody`"), std::string::npos)
            << dlock_last_error();
    }
    {
        auto c = open({"username: reader", "password: readerpw"}, ec);
        ASSERT_FALSE(ec) << "read permission is enough to open: " << dlock_last_error();
        auto lease = c.acquire("faults/denied", dlock::acquire_options().with_wait(0ms), ec);
        const std::string message = dlock_last_error();
        EXPECT_EQ(ec, dlock::errc::backend) << "never held";
        EXPECT_FALSE(lease);
        EXPECT_NE(message.find("permission denied"), std::string::npos) << message;
        EXPECT_NE(message.find(where.to_string()), std::string::npos) << "the message names the member: " << message;
        EXPECT_NE(message.find("readwrite"), std::string::npos) << "the message says what to do: " << message;
        std::cout << "[etcd] " << message << "\n";
    }
    {
        // The authorised user: acquire, a waiter woken through a watch stream that carries the token.
        auto c = open({"username: root", "password: rootpw"}, ec);
        ASSERT_FALSE(ec) << dlock_last_error();
        auto lease = c.acquire("faults/authorised", dlock::acquire_options().with_wait(0ms));
        std::thread release([&] {
            std::this_thread::sleep_for(200ms);
            lease.release();
        });
        auto second = c.acquire("faults/authorised", dlock::acquire_options().with_wait(5s), ec);
        release.join();
        EXPECT_FALSE(ec) << dlock_last_error();
        EXPECT_GT(second.fencing_token(), 0u);
    }
}

// etcd's simple tokens expire (here after 1 s): the client authenticates again and carries on, on
// the unary calls and on its watch stream.
TEST_F(EtcdFaults, ExpiredAuthTokenIsRenewed) {
    dlock::lab::lab_options options;
    options.etcd.extra_args = {"--auth-token-ttl", "1"};
    dlock::lab::lab own({backend::etcd}, options);
    const auto where = own.etcd().client_endpoint();
    auth_enabled auth(where.to_string());
    auto c = dlock::client::from_yaml(yaml({where}, {"username: root", "password: rootpw"}));
    { auto first = c.acquire("faults/token", dlock::acquire_options().with_wait(0ms)); }
    std::this_thread::sleep_for(2500ms);  // the token expires unused
    auto lease = c.acquire("faults/token", dlock::acquire_options().with_wait(0ms));
    std::this_thread::sleep_for(2500ms);
    std::thread release([&] {
        std::this_thread::sleep_for(200ms);
        lease.release();
    });
    std::error_code ec;
    auto next = c.acquire("faults/token", dlock::acquire_options().with_wait(5s), ec);
    release.join();
    EXPECT_FALSE(ec) << dlock_last_error();
}

// ---- the backend's own claims -----------------------------------------------------------------

// One keepalive stream per client, not one per renewal: holding a lock for 2.5 s with a 1 s TTL
// sends several keepalives, on one stream.
TEST_F(EtcdFaults, KeepalivesShareOneStream) {
    const std::vector<std::string> keepalive = {"grpc_method=\"LeaseKeepAlive\""};
    const double streams_before = metric_sum(single(), "grpc_server_started_total", keepalive);
    const double messages_before = metric_sum(single(), "grpc_server_msg_received_total", keepalive);
    const double revokes_before = metric_sum(single(), "grpc_server_handled_total", {"grpc_method=\"LeaseRevoke\"", "grpc_code=\"OK\""});
    {
        auto client = dlock::client::open(config(backend::etcd));
        auto lease = client.acquire("faults/stream", dlock::acquire_options().with_wait(0ms).with_ttl(1s));
        std::this_thread::sleep_for(2500ms);
        EXPECT_NE(lease.state(), dlock::lease_state::lost);
    }
    const double streams = metric_sum(single(), "grpc_server_started_total", keepalive) - streams_before;
    const double messages = metric_sum(single(), "grpc_server_msg_received_total", keepalive) - messages_before;
    const double revokes = metric_sum(single(), "grpc_server_handled_total", {"grpc_method=\"LeaseRevoke\"", "grpc_code=\"OK\""}) - revokes_before;
    std::cout << "[etcd] " << messages << " keepalives on " << streams << " stream(s) in 2.5 s with a 1 s TTL\n";
    // One stream (a second only if a keepalive stalled on a busy machine and the stream was reopened).
    EXPECT_LE(streams, 2);
    EXPECT_GE(messages, 5);
    EXPECT_GE(messages, 3 * streams) << "not a stream per renewal";
    EXPECT_EQ(revokes, 1) << "the session lease is revoked when the client closes";
}

// etcd raises a TTL below its minimum (here 1 s) without saying so: the validity follows the TTL
// granted, read back from the server, not the one asked for.
TEST_F(EtcdFaults, GrantedTtlIsReadBack) {
    auto client = dlock::client::open(config(backend::etcd));
    const auto before = clock_type::now();
    auto lease = client.acquire("faults/ttl", dlock::acquire_options().with_wait(0ms).with_ttl(200ms).with_renew(false));
    EXPECT_GT(lease.valid_until() - before, 900ms) << "validity from the granted 1 s TTL, less drift";
    EXPECT_LE(lease.valid_until() - before, 1000ms);
}

// While keepalives go unanswered (a partition) the lease is SUSPECT; answered again, HELD; never
// confirmed until its deadline, LOST.
TEST_F(EtcdFaults, SuspectWhileKeepalivesFailThenHeldOrLost) {
    dlock::lab::tcp_proxy proxy(single());
    auto client = dlock::client::from_yaml(
        yaml({proxy.listen_endpoint()}, {"session_ttl: 3s", "request_timeout: 1s", "dial_timeout: 500ms"}));
    auto lease = client.acquire("faults/suspect", dlock::acquire_options().with_wait(0ms));
    proxy.blackhole();
    EXPECT_TRUE(eventually([&] { return lease.state() == dlock::lease_state::suspect; }, 2s)) << "not SUSPECT while cut off";
    proxy.heal();
    EXPECT_TRUE(eventually([&] { return lease.state() == dlock::lease_state::held; }, 3s)) << "not HELD again once answered";
    proxy.blackhole();
    const auto cut = clock_type::now();
    EXPECT_TRUE(eventually([&] { return lease.state() == dlock::lease_state::lost; }, 5s)) << "not LOST at its deadline";
    std::cout << "[etcd] LOST " << ms_since(cut).count() << " ms after the partition began (TTL 3 s)\n";
    EXPECT_LE(clock_type::now(), lease.valid_until() + 1s);
    proxy.heal();
}

// A name's key prefix never covers another name's keys: deleting everything under `faults/a`'s
// prefix leaves `faults/a/b` held.
TEST_F(EtcdFaults, NamePrefixesNeverCoverAnotherName) {
    auto client = dlock::client::open(config(backend::etcd));
    auto nested = client.acquire("faults/a/b", dlock::acquire_options().with_wait(0ms));
    auto outer = client.acquire("faults/a", dlock::acquire_options().with_wait(0ms));
    EXPECT_EQ(lab_->etcd().client().delete_prefix("dlock/faults%2Fa/"), 1) << "exactly `faults/a`'s key";
    EXPECT_TRUE(client.inspect("faults/a/b").held);
    EXPECT_EQ(client.inspect("faults/a/b").holder, nested.owner());
}

// A try-lock that finds the lock taken, and a wait that times out, each delete the key they queued:
// the name's directory holds the holder's key alone afterwards.
TEST_F(EtcdFaults, FailedAttemptsLeaveNoKey) {
    auto holder_client = dlock::client::open(config(backend::etcd));
    auto lease = holder_client.acquire("faults/nothing-left", dlock::acquire_options().with_wait(0ms));
    auto other = dlock::client::open(config(backend::etcd));
    std::error_code ec;
    other.acquire("faults/nothing-left", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    other.acquire("faults/nothing-left", dlock::acquire_options().with_wait(200ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    std::vector<std::string> keys;
    for (const auto& k : etcdctl(single().to_string(), {"get", "--prefix", "dlock/faults%2Fnothing-left/", "--keys-only"}))
        if (!k.empty()) keys.push_back(k);
    ASSERT_EQ(keys.size(), 1u) << "a failed attempt left its key";
    EXPECT_EQ(etcdctl(single().to_string(), {"get", keys[0], "--print-value-only"}).at(0), lease.owner());
}

// TLS with a client certificate, against an etcd started here with its own certificates (the lab's
// members speak plain HTTP). Without the CA the server's certificate is refused.
TEST_F(EtcdFaults, TlsWithClientCertificates) {
    const std::string d = scratch_.path() + "/tls";
    std::filesystem::create_directories(d);
    auto run = [](const std::vector<std::string>& argv) {
        child_process p(argv, true);
        std::string ignored;
        while (p.read_line(ignored, 10000)) {
        }
        return p.wait();
    };
    std::ofstream(d + "/san.ext") << "subjectAltName=IP:127.0.0.1\n";
    const std::vector<std::string> ec_key = {"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"};
    auto req = [&](std::vector<std::string> argv) {
        std::vector<std::string> full = {"openssl", "req"};
        full.insert(full.end(), ec_key.begin(), ec_key.end());
        full.insert(full.end(), argv.begin(), argv.end());
        return run(full);
    };
    ASSERT_EQ(req({"-x509", "-days", "1", "-subj", "/CN=dlock-test-ca", "-keyout", d + "/ca.key", "-out", d + "/ca.crt"}), 0);
    for (const std::string who : {"server", "client"}) {
        ASSERT_EQ(req({"-subj", "/CN=" + who, "-keyout", d + "/" + who + ".key", "-out", d + "/" + who + ".csr"}), 0);
        ASSERT_EQ(run({"openssl", "x509", "-req", "-days", "1", "-in", d + "/" + who + ".csr", "-CA", d + "/ca.crt", "-CAkey",
                       d + "/ca.key", "-CAcreateserial", "-extfile", d + "/san.ext", "-out", d + "/" + who + ".crt"}),
                  0);
    }
    const auto ports = dlock::lab::reserve_loopback_ports(2);
    const std::string client_url = "https://127.0.0.1:" + std::to_string(ports[0]);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(ports[1]);
    child_process server({"etcd", "--name", "tls", "--data-dir", d + "/data", "--listen-client-urls", client_url,
                          "--advertise-client-urls", client_url, "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls",
                          peer_url, "--initial-cluster", "tls=" + peer_url, "--cert-file", d + "/server.crt", "--key-file",
                          d + "/server.key", "--trusted-ca-file", d + "/ca.crt", "--client-cert-auth", "--logger", "zap",
                          "--log-outputs", d + "/etcd.log"});
    const std::string text = "backend: etcd\noptions:\n  endpoints: [\"" + client_url + "\"]\n  ca_file: " + d +
                             "/ca.crt\n  cert_file: " + d + "/client.crt\n  key_file: " + d + "/client.key\n";
    std::optional<dlock::client> c;
    ASSERT_TRUE(eventually([&] {  // until the new member serves
        try {
            c.emplace(dlock::client::from_yaml(text));
            return true;
        } catch (const std::system_error&) {
            return false;
        }
    }, 20s)) << dlock_last_error();
    auto lease = c->acquire("faults/tls", dlock::acquire_options().with_wait(0ms));
    std::thread release([&] {
        std::this_thread::sleep_for(200ms);
        lease.release();
    });
    std::error_code ec;
    auto next = c->acquire("faults/tls", dlock::acquire_options().with_wait(5s), ec);  // woken through a TLS watch stream
    release.join();
    EXPECT_FALSE(ec) << dlock_last_error();
    next.release();
    c->close();

    dlock_client* untrusted = nullptr;
    const std::string without_ca = "backend: etcd\noptions:\n  endpoints: [\"" + client_url + "\"]\n  dial_timeout: 1s\n";
    EXPECT_EQ(dlock_client_open_yaml(without_ca.c_str(), "tls.yaml", &untrusted), DLOCK_UNAVAILABLE)
        << "a server certificate from an unknown CA must be refused";
    EXPECT_NE(std::string(dlock_last_error()).find(client_url.substr(8)), std::string::npos) << dlock_last_error();
}

// 100 waiters on one name: each handoff costs the server O(1) operations (the releaser's delete and
// watch cancel, the next waiter's re-check and watch cancel), not O(waiters): every waiter watches
// only the key just before its own.
TEST_F(EtcdFaults, HundredWaitersCostO1ServerOperationsPerHandoff) {
    constexpr int clients = 20, per_client = 5, waiters = clients * per_client;
    auto holder_client = dlock::client::open(config(backend::etcd));
    auto lease = holder_client.acquire("faults/herd", dlock::acquire_options().with_wait(0ms));
    std::vector<dlock::client> pool;
    for (int i = 0; i < clients; ++i) pool.push_back(dlock::client::open(config(backend::etcd)));
    std::atomic<int> acquired{0}, failed{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < waiters; ++i) {
        threads.emplace_back([&, i] {
            std::error_code ec;
            auto l = pool[size_t(i % clients)].acquire("faults/herd", dlock::acquire_options().with_wait(60s), ec);
            if (ec) ++failed;
            else ++acquired;
        });
    }
    // Every waiter queued: 101 keys under the name.
    ASSERT_TRUE(eventually([&] {
        size_t queued = 0;
        for (const auto& key : etcdctl(single().to_string(), {"get", "--prefix", "dlock/faults%2Fherd/", "--keys-only"}))
            queued += key.empty() ? 0 : 1;
        return queued == waiters + 1;
    }, 20s));
    // Every request and stream message a lock operation can cause (keepalives come by time, not by handoff).
    auto by_method = [&] {
        std::map<std::string, double> out;
        for (const char* method : {"Txn", "Range", "Put", "DeleteRange", "Watch", "LeaseGrant", "LeaseRevoke"})
            out[method] = metric_sum(single(), "grpc_server_msg_received_total", {"grpc_method=\"" + std::string(method) + "\""});
        return out;
    };
    const auto before = by_method();
    const auto start = clock_type::now();
    lease.release();
    for (auto& t : threads) t.join();
    const auto elapsed = ms_since(start);
    double operations = 0;
    std::string breakdown;
    for (const auto& [method, after] : by_method()) {
        operations += after - before.at(method);
        if (after > before.at(method)) breakdown += " " + method + " " + std::to_string(int(after - before.at(method)));
    }
    EXPECT_EQ(acquired.load(), waiters);
    EXPECT_EQ(failed.load(), 0);
    const double per_handoff = operations / waiters;
    std::cout << "[etcd] " << waiters << " handoffs in " << elapsed.count() << " ms: " << operations
              << " server operations (" << breakdown << " ), " << per_handoff << " per handoff\n";
    EXPECT_LE(per_handoff, 6.0) << "a herd would cost O(waiters) per handoff";
}

}  // namespace

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    dlock::lab::add_lab_environment({backend::etcd, backend::etcd_cluster});
    return RUN_ALL_TESTS();
}
