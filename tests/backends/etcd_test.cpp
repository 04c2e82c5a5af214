// The `etcd` backend under the faults of docs/design/faults.md that concern it, on real etcd servers from the
// lab (one member, and a 3-member cluster with 50 ms heartbeats and 500 ms elections):
//   2  holder killed: the next holder gets the lock after about the ttl (also with a leader change);
//   3  holder paused past its ttl: its fenced write is refused, it learns it lost the lock;
//   10 leader killed or paused: held locks survive, waiters proceed; majority lost: never a false success;
//   12 waiter's lease expires or is revoked while queued: an error, never success; own key deleted: LOST;
//   14 permission denied, bad credentials, auth required: clear errors; an expired token is renewed;
// requests that reach a member late or get no answer: any failure after the put leaves no key, a
// put carried out after the clean-up leaves no ghost key, the acquire's deadline bounds its calls, a
// release retried after an unanswered attempt is RELEASED; streams on a member cut off from the
// leader move on (hasleader); an empty key prefix;
// and the backend's own claims: one keepalive stream per client, the granted TTL read back, SUSPECT
// while keepalives fail, escaped names, and O(1) server operations per handoff with 100 waiters.
#include "backend_test.hpp"
#include "support.hpp"

#include "dlock/lab/operation_counts.hpp"
#include "dlock/lab/faults.hpp"
#include "dlock/lab/gtest.hpp"
#include "dlock/lab/proxy.hpp"

#include <dlock/dlock.hpp>

#include <absl/base/internal/sysinfo.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
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

using dlock::test::eventually;



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

std::chrono::milliseconds ms_since(clock_type::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t);
}

// The keys under `dir`, read from `member` with etcdctl.
std::vector<std::string> keys_under(const dlock::lab::endpoint& member, const std::string& dir) {
    std::vector<std::string> keys;
    for (const auto& k : etcdctl(member.to_string(), {"get", "--prefix", dir, "--keys-only"}))
        if (!k.empty()) keys.push_back(k);
    return keys;
}

class EtcdFaults : public dlock::test::lab_backend_test {
protected:
    EtcdFaults() : lab_backend_test({backend::etcd, backend::etcd_cluster}) {}

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

    // Nothing of a failed acquisition of `name` stays on the cluster: within `within` the name's key
    // directory (read on member 1) is empty — `left_key` says what a key there would mean — and then
    // another client's try-once gets the lock.
    void expect_nothing_left_of(const std::string& name, std::chrono::milliseconds within, const std::string& left_key) {
        const auto member1 = lab_->etcd_cluster().member(1).client_endpoint();
        std::string dir = "dlock/";
        for (char ch : name) dir += ch == '/' ? std::string("%2F") : std::string(1, ch);
        dir += "/";
        EXPECT_TRUE(eventually([&] { return keys_under(member1, dir).empty(); }, within)) << left_key;
        auto other = dlock::client::from_yaml(yaml({member1}));
        std::error_code ec;
        EXPECT_TRUE(other.acquire(name, dlock::acquire_options().with_wait(0ms), ec)) << dlock_last_error();
    }

    dlock::test::scratch_dir scratch_{"dlock-etcd-test"};
};

// ---- docs/design/faults.md §2 ----------------------------------------------------------------------------------

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

// ---- docs/design/faults.md §3 and 4 ----------------------------------------------------------------------------

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

// ---- docs/design/faults.md §10 ---------------------------------------------------------------------------------

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

// ---- docs/design/faults.md §12 ---------------------------------------------------------------------------------

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

// ---- docs/design/faults.md §14 ---------------------------------------------------------------------------------

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
        EXPECT_EQ(ec, dlock::errc::permission) << "no permission at all: refused at open";
        EXPECT_NE(std::string(dlock_last_error()).find("permission denied for user `nobody`"), std::string::npos)
            << dlock_last_error();
    }
    {
        auto c = open({"username: reader", "password: readerpw"}, ec);
        ASSERT_FALSE(ec) << "read permission is enough to open: " << dlock_last_error();
        auto lease = c.acquire("faults/denied", dlock::acquire_options().with_wait(0ms), ec);
        const std::string message = dlock_last_error();
        EXPECT_EQ(ec, dlock::errc::permission) << "never held";
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

// ---- requests in doubt, deadlines, members without a leader --------------------------------------

// A proxy in front of each member of the lab's cluster, in member order, so a test can delay or cut
// the client's traffic to one member while the members still talk to each other.
struct proxied_cluster {
    std::vector<std::unique_ptr<dlock::lab::tcp_proxy>> proxies;
    explicit proxied_cluster(dlock::lab::etcd_cluster& cluster) {
        for (size_t i = 0; i < cluster.size(); ++i)
            proxies.push_back(std::make_unique<dlock::lab::tcp_proxy>(cluster.member(i).client_endpoint()));
    }
    dlock::lab::tcp_proxy& operator[](size_t i) { return *proxies.at(i); }
    std::vector<dlock::lab::endpoint> endpoints() const {
        std::vector<dlock::lab::endpoint> out;
        for (const auto& p : proxies) out.push_back(p->listen_endpoint());
        return out;
    }
    // Makes `client` connect to every member (gRPC connects to a member only when a call goes
    // there, and a connection through a slow proxy would not be ready within dial_timeout): each
    // member in turn stops answering while the client reads, so the read moves on to the next one.
    // The client starts on member 0 again afterwards.
    void connect_all(dlock::client& client) {
        for (auto& p : proxies) {
            p->blackhole();
            client.inspect("faults/connect-all");
            p->heal();
        }
    }
    void heal_all() {
        for (auto& p : proxies) {
            p->set_delay(0us);
            p->heal();
        }
    }
};

// The acquire's put reaches member 0, but its answer never comes back; the retry on member 1 finds
// the key (a repeated request) and then the read of the queue fails on every member. The key, first
// in its queue and on the client's live session lease, must not stay: it would keep the lock taken
// until the client closes.
TEST_F(EtcdFaults, FailureAfterARetriedPutLeavesNoKey) {
    auto& cluster = lab_->etcd_cluster();
    cluster_restorer restore{cluster};
    cluster.wait_for_leader();
    proxied_cluster proxies(cluster);
    auto client = dlock::client::from_yaml(
        yaml(proxies.endpoints(), {"request_timeout: 1s", "dial_timeout: 500ms", "session_ttl: 30s"}));
    client.acquire("faults/retried-put", dlock::acquire_options().with_wait(0ms)).release();  // session ready
    proxies.connect_all(client);
    proxies[0].blackhole(dlock::lab::direction::downstream);  // member 0 carries out requests, answers nothing
    proxies[1].set_delay(500ms, 0us);                         // the retry reaches member 1 late, but in time
    proxies[2].blackhole();
    const uint64_t before_retry = proxies[1].stats().bytes_upstream;
    std::thread cutter([&] {
        // Member 1 goes silent once the retry has reached it: the queue read that follows fails.
        eventually([&] { return proxies[1].stats().bytes_upstream > before_retry; }, 10s);
        std::this_thread::sleep_for(250ms);
        proxies[1].blackhole(dlock::lab::direction::upstream);
    });
    std::error_code ec;
    auto lease = client.acquire("faults/retried-put", dlock::acquire_options().with_wait(20s), ec);
    cutter.join();
    std::cout << "[etcd-cluster] acquire after a retried put: " << ec.message() << ": " << dlock_last_error() << "\n";
    EXPECT_TRUE(ec) << "no member could read the queue: the acquire cannot have succeeded";
    proxies.heal_all();
    expect_nothing_left_of("faults/retried-put", 5s, "the failed acquire left its key on the live session lease");
}

// Every member answers later than request_timeout: the acquire tries each in turn until its wait
// (three request_timeouts) runs out and gives up; its puts are still on their way to members 1 and 2
// when the client cleans up on member 0 (which answers again by then). A put that lands after that clean-up must not create the key again: the
// name's directory ends empty and the lock free.
TEST_F(EtcdFaults, CleanupBeforeADelayedPutLeavesNoGhostKey) {
    auto& cluster = lab_->etcd_cluster();
    cluster_restorer restore{cluster};
    cluster.wait_for_leader();
    proxied_cluster proxies(cluster);
    auto client = dlock::client::from_yaml(
        yaml(proxies.endpoints(), {"request_timeout: 500ms", "dial_timeout: 500ms", "session_ttl: 30s"}));
    client.acquire("faults/ghost", dlock::acquire_options().with_wait(0ms)).release();  // session ready
    proxies.connect_all(client);
    for (size_t i = 0; i < 3; ++i) proxies[i].set_delay(1000ms, 0us);  // puts land 1 s after they are sent
    std::thread healer([&] {
        // After the put to member 0 left and before the acquire gives up (at 3 × 500 ms).
        std::this_thread::sleep_for(750ms);
        proxies[0].set_delay(0us);
    });
    std::error_code ec;
    const auto start = clock_type::now();
    auto lease = client.acquire("faults/ghost", dlock::acquire_options().with_wait(1500ms), ec);
    healer.join();
    std::cout << "[etcd-cluster] acquire with every member late: " << ec.message() << " after " << ms_since(start).count()
              << " ms: " << dlock_last_error() << "\n";
    EXPECT_EQ(ec, dlock::errc::timeout) << dlock_last_error();
    proxies.heal_all();
    std::this_thread::sleep_for(start + 2500ms - clock_type::now());  // the last put (sent at ~1 s) has landed
    expect_nothing_left_of("faults/ghost", 3s,
                           "a delayed put created the key again after the clean-up (a ghost on the live session lease)");
}

// No member answers: an acquire with a 1 s wait returns TIMEOUT at its deadline, and a try-once
// returns UNAVAILABLE after one request_timeout — neither waits request_timeout on each member in
// turn. Nothing is left behind once the members answer again.
TEST_F(EtcdFaults, AcquireHonoursItsDeadlineWhenNoMemberAnswers) {
    auto& cluster = lab_->etcd_cluster();
    cluster_restorer restore{cluster};
    cluster.wait_for_leader();
    proxied_cluster proxies(cluster);
    auto client = dlock::client::from_yaml(
        yaml(proxies.endpoints(), {"request_timeout: 2s", "dial_timeout: 500ms", "session_ttl: 30s"}));
    client.acquire("faults/deadline", dlock::acquire_options().with_wait(0ms)).release();  // session ready
    for (size_t i = 0; i < 3; ++i) proxies[i].blackhole();
    std::error_code ec;
    auto start = clock_type::now();
    client.acquire("faults/deadline", dlock::acquire_options().with_wait(1s), ec);
    const auto waited = ms_since(start);
    std::cout << "[etcd-cluster] 1 s acquire, no member answering: " << ec.message() << " after " << waited.count()
              << " ms: " << dlock_last_error() << "\n";
    EXPECT_EQ(ec, dlock::errc::timeout) << dlock_last_error();
    EXPECT_LT(waited, 1s + 1500ms) << "the acquire overran its deadline";
    start = clock_type::now();
    client.acquire("faults/deadline", dlock::acquire_options().with_wait(0ms), ec);
    const auto tried = ms_since(start);
    std::cout << "[etcd-cluster] try-once, no member answering: " << ec.message() << " after " << tried.count()
              << " ms: " << dlock_last_error() << "\n";
    EXPECT_EQ(ec, dlock::errc::unavailable) << dlock_last_error();
    EXPECT_LT(tried, 2s + 1500ms) << "a try-once takes one request_timeout, not one per member";
    proxies.heal_all();
    expect_nothing_left_of("faults/deadline", 5s, "a failed attempt left its key");
}

// A server that answers nothing for a while (a stalled disk makes etcd answer "request timed out";
// a blackhole here) is no answer about the lock: an acquire with time left tries again until the
// server answers, and gets the lock; nothing of its unanswered attempts is left behind.
TEST_F(EtcdFaults, AcquireWithTimeLeftRetriesWhileNoMemberAnswers) {
    dlock::lab::tcp_proxy proxy(single());
    auto client = dlock::client::from_yaml(
        yaml({proxy.listen_endpoint()}, {"request_timeout: 300ms", "dial_timeout: 500ms", "session_ttl: 30s"}));
    client.acquire("faults/retry-unavailable", dlock::acquire_options().with_wait(0ms)).release();  // session ready
    proxy.blackhole();
    std::thread healer([&] {
        std::this_thread::sleep_for(1s);  // three or more unanswered attempts
        proxy.heal();
    });
    std::error_code ec;
    const auto start = clock_type::now();
    auto lease = client.acquire("faults/retry-unavailable", dlock::acquire_options().with_wait(10s), ec);
    healer.join();
    std::cout << "[etcd] acquire across a 1 s blackhole: " << (ec ? ec.message() : "acquired") << " after "
              << ms_since(start).count() << " ms\n";
    ASSERT_FALSE(ec) << "an acquire with time left must not fail on a server that is silent for a while: "
                     << dlock_last_error();
    EXPECT_GE(ms_since(start), 900ms) << "the lock cannot have been granted while the server was cut off";
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
    EXPECT_TRUE(eventually([&] { return keys_under(single(), "dlock/faults%2Fretry-unavailable/").empty(); }, 5s))
        << "an unanswered attempt left its key";
}

// The release's delete reaches member 0 and is carried out, but its answer never comes back; the
// retry on member 1 finds the key gone. The first attempt released the lock: RELEASED, not
// ALREADY_LOST.
TEST_F(EtcdFaults, RetriedReleaseAfterAnUnansweredDeleteIsReleased) {
    auto& cluster = lab_->etcd_cluster();
    cluster_restorer restore{cluster};
    cluster.wait_for_leader();
    proxied_cluster proxies(cluster);
    auto client = dlock::client::from_yaml(
        yaml(proxies.endpoints(), {"request_timeout: 1s", "dial_timeout: 500ms", "session_ttl: 30s"}));
    auto lease = client.acquire("faults/release-retried", dlock::acquire_options().with_wait(0ms));
    proxies[0].blackhole(dlock::lab::direction::downstream);
    const auto outcome = lease.release();
    EXPECT_EQ(outcome, dlock::release_outcome::released) << dlock_last_error();
    proxies.heal_all();
    auto other = dlock::client::from_yaml(yaml({cluster.member(1).client_endpoint()}));
    std::error_code ec;
    EXPECT_TRUE(other.acquire("faults/release-retried", dlock::acquire_options().with_wait(0ms), ec)) << dlock_last_error();
}

// No member answers a release: every attempt goes unanswered (the one to member 0 deleted the key)
// and the release is UNKNOWN. Retried once the members answer again, it is RELEASED — whether the
// retry or the holder's own-key watch learns first that the key is gone — and never reported LOST.
TEST_F(EtcdFaults, ReleaseRetriedAfterUnknownIsReleased) {
    auto& cluster = lab_->etcd_cluster();
    cluster_restorer restore{cluster};
    cluster.wait_for_leader();
    proxied_cluster proxies(cluster);
    auto client = dlock::client::from_yaml(
        yaml(proxies.endpoints(), {"request_timeout: 1s", "dial_timeout: 500ms", "session_ttl: 30s"}));
    auto lease = client.acquire("faults/release-unknown", dlock::acquire_options().with_wait(0ms));
    std::atomic<int> lost{0};
    lease.on_lost([&] { ++lost; });
    std::this_thread::sleep_for(300ms);  // the holder watches its own key by now (after at most 100 ms)
    for (size_t i = 0; i < 3; ++i) proxies[i].blackhole(dlock::lab::direction::downstream);
    std::error_code ec;
    EXPECT_EQ(lease.release(ec), dlock::release_outcome::unknown) << "no member answered";
    proxies.heal_all();
    std::this_thread::sleep_for(500ms);  // the deletion's event reaches the own-key watch
    EXPECT_EQ(lease.release(ec), dlock::release_outcome::released) << dlock_last_error();
    EXPECT_EQ(lost.load(), 0) << "our own unanswered release was reported as a loss";
    auto other = dlock::client::from_yaml(yaml({cluster.member(1).client_endpoint()}));
    EXPECT_TRUE(other.acquire("faults/release-unknown", dlock::acquire_options().with_wait(0ms), ec)) << dlock_last_error();
}

// `key_prefix: ""` puts dlock's keys at the top of the keyspace: the client opens, locks exclude
// each other and a waiter is woken.
TEST_F(EtcdFaults, EmptyKeyPrefixPutsKeysAtTheTop) {
    const std::string text = yaml({single()}, {"key_prefix: \"\""});
    auto client = dlock::client::from_yaml(text);
    auto other = dlock::client::from_yaml(text);
    auto lease = client.acquire("faults/top", dlock::acquire_options().with_wait(0ms));
    const auto keys = keys_under(single(), "faults%2Ftop/");
    ASSERT_EQ(keys.size(), 1u);
    EXPECT_EQ(etcdctl(single().to_string(), {"get", keys[0], "--print-value-only"}).at(0), lease.owner());
    std::error_code ec;
    other.acquire("faults/top", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    std::thread release([&] {
        std::this_thread::sleep_for(200ms);
        lease.release();
    });
    auto next = other.acquire("faults/top", dlock::acquire_options().with_wait(5s), ec);
    release.join();
    EXPECT_FALSE(ec) << dlock_last_error();
    next.release();
    EXPECT_TRUE(keys_under(single(), "faults%2Ftop/").empty());
}

// iptables rules in network namespace `ns` that cut the etcd member running there off from its
// peers (its own peer port and theirs, both ways) while its clients still reach it; removed when
// the guard ends, however the test ends.
struct peer_cut {
    dlock::lab::network_namespace& ns;
    std::vector<std::vector<std::string>> rules;
    peer_cut(dlock::lab::network_namespace& n, uint16_t own_peer_port, const std::vector<uint16_t>& other_peer_ports) : ns(n) {
        std::string others;
        for (uint16_t p : other_peer_ports) others += (others.empty() ? "" : ",") + std::to_string(p);
        const std::string own = std::to_string(own_peer_port);
        rules = {{"INPUT", "-p", "tcp", "--dport", own, "-j", "DROP"},
                 {"INPUT", "-p", "tcp", "-m", "multiport", "--sports", others, "-j", "DROP"},
                 {"OUTPUT", "-p", "tcp", "--sport", own, "-j", "DROP"},
                 {"OUTPUT", "-p", "tcp", "-m", "multiport", "--dports", others, "-j", "DROP"}};
        for (const auto& rule : rules) {
            std::vector<std::string> argv = {"iptables", "-A"};
            argv.insert(argv.end(), rule.begin(), rule.end());
            std::string output;
            EXPECT_EQ(ns.run(argv, &output), 0) << output;
        }
    }
    ~peer_cut() {
        for (const auto& rule : rules) {
            std::vector<std::string> argv = {"iptables", "-D"};
            argv.insert(argv.end(), rule.begin(), rule.end());
            ns.run(argv);
        }
    }
};

// A member cut off from the leader keeps its clients' streams open and silent unless they ask for
// a leader (etcd's `hasleader`), as etcd's own client does. Here member x of a 3-member cluster
// runs in a network namespace and loses its peers, while the clients, whose streams are on x,
// still reach it. A waiter must still get the lock its holder released (through y), and a holder
// must still learn that its key was deleted — both within seconds, not when a keepalive next
// stalls (up to TTL/3 + request_timeout, 15 s here).
TEST_F(EtcdFaults, StreamsOnAMemberCutOffFromTheLeaderMoveOn) {
    std::unique_ptr<dlock::lab::network_namespace> ns;
    try {
        ns = std::make_unique<dlock::lab::network_namespace>();
    } catch (const dlock::lab::fault_error& e) {
        if (dlock::lab::running_in_ci()) FAIL() << "network namespaces are needed: " << e.what();
        GTEST_SKIP() << "no network namespaces here: " << e.what();
    }
    const auto ports = dlock::lab::reserve_loopback_ports(6);
    const dlock::lab::endpoint x{ns->namespace_address(), ports[0]}, y{ns->host_address(), ports[2]},
        z{ns->host_address(), ports[4]};
    const std::vector<std::pair<std::string, dlock::lab::endpoint>> peers = {
        {"x", {ns->namespace_address(), ports[1]}}, {"y", {ns->host_address(), ports[3]}}, {"z", {ns->host_address(), ports[5]}}};
    std::string initial_cluster;
    for (const auto& [name, peer] : peers) initial_cluster += (initial_cluster.empty() ? "" : ",") + name + "=http://" + peer.to_string();
    const std::string d = scratch_.path() + "/cut";
    std::vector<std::unique_ptr<child_process>> servers;
    const dlock::lab::endpoint clients[] = {x, y, z};
    for (size_t i = 0; i < 3; ++i) {
        std::vector<std::string> argv;
        if (i == 0) argv = {"ip", "netns", "exec", ns->name()};
        const std::string& name = peers[i].first;
        const std::string client_url = "http://" + clients[i].to_string(), peer_url = "http://" + peers[i].second.to_string();
        const std::vector<std::string> etcd = {
            "etcd", "--name", name, "--data-dir", d + "/" + name, "--listen-client-urls", client_url, "--advertise-client-urls",
            client_url, "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url, "--initial-cluster",
            initial_cluster, "--initial-cluster-token", "dlock-cut-" + std::to_string(getpid()), "--heartbeat-interval", "50",
            "--election-timeout", "500", "--logger", "zap", "--log-outputs", d + "/" + name + ".log"};
        argv.insert(argv.end(), etcd.begin(), etcd.end());
        std::filesystem::create_directories(d);
        servers.push_back(std::make_unique<child_process>(argv));
    }
    ASSERT_TRUE(eventually([&] { return dlock::lab::etcd_client(x).healthy() && dlock::lab::etcd_client(y).healthy(); }, 30s))
        << "the namespace cluster did not start";

    auto blocker_client = dlock::client::from_yaml(yaml({y}));
    auto blocker = blocker_client.acquire("faults/cut-wait", dlock::acquire_options().with_wait(0ms));
    // x first: these clients' keepalive and watch streams are on x. A 30 s session sends a
    // keepalive every 10 s, so only the streams themselves can tell them of the cut in time.
    const std::string on_x = yaml({x, y, z}, {"session_ttl: 30s"});
    auto holder_client = dlock::client::from_yaml(on_x);
    auto held = holder_client.acquire("faults/cut-own", dlock::acquire_options().with_wait(0ms));
    std::atomic<int> lost{0};
    held.on_lost([&] { ++lost; });
    auto waiter_client = dlock::client::from_yaml(on_x);
    std::error_code waiter_ec;
    clock_type::time_point got;
    std::thread waiter([&] {
        auto l = waiter_client.acquire("faults/cut-wait", dlock::acquire_options().with_wait(12s), waiter_ec);
        got = clock_type::now();
    });
    EXPECT_TRUE(eventually([&] { return keys_under(y, "dlock/faults%2Fcut-wait/").size() == 2; }, 5s)) << "the waiter queued";
    std::this_thread::sleep_for(300ms);  // the holder has its own-key watch (after at most 100 ms)
    {
        peer_cut cut(*ns, peers[0].second.port, {peers[1].second.port, peers[2].second.port});
        const auto cut_at = clock_type::now();
        // y and z keep (or elect) a leader and serve.
        EXPECT_TRUE(eventually([&] { return dlock::lab::etcd_client(y).healthy(); }, 10s));
        EXPECT_EQ(blocker.release(), dlock::release_outcome::released);
        EXPECT_EQ(dlock::lab::etcd_client(y).delete_prefix("dlock/faults%2Fcut-own/"), 1);
        const auto changed = clock_type::now();
        waiter.join();
        std::cout << "[etcd-cut] waiter on the cut-off member: " << (waiter_ec ? waiter_ec.message() : "acquired") << " "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(got - changed).count()
                  << " ms after the release (" << std::chrono::duration_cast<std::chrono::milliseconds>(changed - cut_at).count()
                  << " ms after the cut)\n";
        EXPECT_FALSE(waiter_ec) << dlock_last_error();
        EXPECT_LT(got - changed, 6s) << "the waiter's watch stayed on the member without a leader";
        EXPECT_TRUE(eventually([&] { return lost.load() == 1; }, 6s)) << "the holder's own-key watch stayed on the member without a leader";
        std::cout << "[etcd-cut] holder LOST " << (lost.load() ? "reported " : "not reported ") << ms_since(changed).count()
                  << " ms after its key was deleted\n";
    }
}

// ---- the backend's own claims -----------------------------------------------------------------

// One keepalive stream per client, not one per renewal: holding a lock for 2.5 s with a 1 s TTL
// sends several keepalives, on one stream.
TEST_F(EtcdFaults, KeepalivesShareOneStream) {
    const std::vector<std::string> keepalive = {"grpc_method=\"LeaseKeepAlive\""};
    const double streams_before = dlock::lab::prometheus_metric_sum(single(), "grpc_server_started_total", keepalive);
    const double messages_before = dlock::lab::prometheus_metric_sum(single(), "grpc_server_msg_received_total", keepalive);
    const double revokes_before = dlock::lab::prometheus_metric_sum(single(), "grpc_server_handled_total", {"grpc_method=\"LeaseRevoke\"", "grpc_code=\"OK\""});
    {
        auto client = dlock::client::open(config(backend::etcd));
        auto lease = client.acquire("faults/stream", dlock::acquire_options().with_wait(0ms).with_ttl(1s));
        std::this_thread::sleep_for(2500ms);
        EXPECT_NE(lease.state(), dlock::lease_state::lost);
    }
    const double streams = dlock::lab::prometheus_metric_sum(single(), "grpc_server_started_total", keepalive) - streams_before;
    const double messages = dlock::lab::prometheus_metric_sum(single(), "grpc_server_msg_received_total", keepalive) - messages_before;
    const double revokes = dlock::lab::prometheus_metric_sum(single(), "grpc_server_handled_total", {"grpc_method=\"LeaseRevoke\"", "grpc_code=\"OK\""}) - revokes_before;
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

// A lock taken and released again and again by one client uses one key, not one per acquisition:
// etcd keeps a deleted key in its index until a compaction, and each enqueue's read of the
// directory walks them all. A second acquisition while the first holds gets a key of its own.
TEST_F(EtcdFaults, AcquisitionsOneAfterAnotherReuseOneKey) {
    const std::string dir = "dlock/faults%2Freused-key/";
    auto c = dlock::client::open(config(backend::etcd));
    std::set<std::string> keys_seen;
    for (int i = 0; i < 5; ++i) {
        auto lease = c.acquire("faults/reused-key", dlock::acquire_options().with_wait(0ms));
        const auto keys = keys_under(single(), dir);
        ASSERT_EQ(keys.size(), 1u);
        keys_seen.insert(keys[0]);
        if (i == 2) {  // a try-once that finds the lock taken: its own key, removed again
            std::error_code ec;
            c.acquire("faults/reused-key", dlock::acquire_options().with_wait(0ms).with_reentrant(false), ec);
            EXPECT_EQ(ec, dlock::errc::timeout);
            EXPECT_EQ(keys_under(single(), dir), keys);
        }
        lease.release();
    }
    EXPECT_EQ(keys_seen.size(), 1u) << "each acquisition put a key of its own";
    EXPECT_TRUE(keys_under(single(), dir).empty());
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
            out[method] = dlock::lab::prometheus_metric_sum(single(), "grpc_server_msg_received_total", {"grpc_method=\"" + std::string(method) + "\""});
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

// Waiters that queue again right after each release, as in a contended loop: every cycle costs the
// server its enqueue Txn, the release Txn, the woken waiter's one queue read, and on the Watch
// stream the predecessor watch's create and cancel and the own-key watch's create and cancel: 7
// requests, and a re-read or another watch when other writes land between an enqueue and its
// watch. Counted as the benchmark counts them (unary RPCs started + Watch messages received), with
// 8 waiters on 8 clients and 32 waiters on 8 clients (threads share their client's watch stream).
// The bound is twice the minimum of 4 (the benchmark's contended_minimum); a progress request per
// watch, or a second request per wake-up, does not fit on the Watch stream.
TEST_F(EtcdFaults, ContendedCycleCostsAtMostEightRequests) {
    auto unary = [&] { return dlock::lab::prometheus_metric_sum(single(), "grpc_server_started_total", {"grpc_type=\"unary\""}); };
    auto on_watch_stream = [&] {
        return dlock::lab::prometheus_metric_sum(single(), "grpc_server_msg_received_total", {"grpc_method=\"Watch\""});
    };
    for (const int threads_per_client : {1, 4}) {
        constexpr int clients = 8, cycles_per_waiter = 40;
        const int waiters = clients * threads_per_client;
        const std::string name = "faults/contended-" + std::to_string(waiters);
        std::vector<dlock::client> pool;
        for (int i = 0; i < clients; ++i) pool.push_back(dlock::client::open(config(backend::etcd)));
        // A first acquire per client outside the count: its session's grant and keepalive stream.
        for (auto& c : pool) c.acquire(name, dlock::acquire_options().with_wait(5s)).release();
        std::atomic<int> failed{0};
        const double unary_before = unary(), watch_before = on_watch_stream();
        std::vector<std::thread> threads;
        for (int i = 0; i < waiters; ++i)
            threads.emplace_back([&, i] {
                for (int n = 0; n < cycles_per_waiter; ++n) {
                    std::error_code ec;
                    auto l = pool[size_t(i % clients)].acquire(name, dlock::acquire_options().with_wait(30s), ec);
                    if (ec || l.release() != dlock::release_outcome::released) ++failed;
                }
            });
        for (auto& t : threads) t.join();
        const double cycles = waiters * cycles_per_waiter;
        const double unary_per_cycle = (unary() - unary_before) / cycles, watch_per_cycle = (on_watch_stream() - watch_before) / cycles;
        const double per_cycle = unary_per_cycle + watch_per_cycle;
        std::cout << "[etcd] " << waiters << " waiters on " << clients << " clients: " << per_cycle << " requests per contended cycle ("
                  << unary_per_cycle << " unary, " << watch_per_cycle << " Watch messages)\n";
        EXPECT_EQ(failed.load(), 0);
        EXPECT_LE(per_cycle, 8.0) << waiters << " waiters";
        EXPECT_LE(watch_per_cycle, 4.6) << waiters << " waiters: 4 Watch messages per cycle, and a few for another watch";
    }
}

// etcd serves a watch whose start revision is not after its current revision from an "unsynced"
// group that a loop catches up every 100 ms; only a watch that starts after the current revision
// is served as events commit. A waiter's wake-up must never wait for that loop. Here another
// client's lock cycles move the revision on all the time, as other contenders' puts do, so a
// watch created from the revision of the read that found the predecessor would land in that group.
// 30 handoffs, each released 10 ms after the waiter started (it is queued and watching by then),
// or 0–2 ms after it, while its first read and watch are in flight (a deletion there must wake it
// too, or it would wait for its deadline). A wake that waited for the loop takes up to 100 ms; a
// wake by the event, a delete commit and one read (a few ms). The bound, 60 ms, leaves room for a
// loaded machine; a few slow handoffs are tolerated for the same reason.
TEST_F(EtcdFaults, WaiterWakesWithoutEtcdsUnsyncedWatchLoop) {
    const std::string name = "faults/handoff-timer";
    auto noise_client = dlock::client::open(config(backend::etcd));
    auto holder_client = dlock::client::open(config(backend::etcd));
    auto waiter_client = dlock::client::open(config(backend::etcd));
    std::atomic<bool> stop{false};
    std::atomic<long> noise_cycles{0};
    std::thread noise([&] {
        while (!stop) {
            std::error_code ec;
            auto l = noise_client.acquire("faults/handoff-noise", dlock::acquire_options().with_wait(5s), ec);
            if (!ec) l.release(ec);
            ++noise_cycles;
        }
    });
    constexpr int handoffs = 30;
    constexpr auto slow = 60ms;
    std::vector<long long> handoff_ms;
    int failed = 0;
    for (int i = 0; i < handoffs; ++i) {
        auto held = holder_client.acquire(name, dlock::acquire_options().with_wait(5s));
        std::error_code waiter_error;
        dlock::lease taken;
        clock_type::time_point taken_at;
        std::thread waiter([&] {
            taken = waiter_client.acquire(name, dlock::acquire_options().with_wait(10s), waiter_error);
            taken_at = clock_type::now();
        });
        std::this_thread::sleep_for(i % 3 == 2 ? std::chrono::milliseconds(i % 9 / 3) : 10ms);
        const auto released_at = clock_type::now();
        held.release();
        waiter.join();
        if (waiter_error) {
            ++failed;
            ADD_FAILURE() << "handoff " << i << ": the waiter did not get the lock: " << waiter_error.message();
            continue;
        }
        handoff_ms.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(taken_at - released_at).count());
        taken.release();
    }
    stop = true;
    noise.join();
    std::sort(handoff_ms.begin(), handoff_ms.end());
    const auto over = std::count_if(handoff_ms.begin(), handoff_ms.end(), [&](long long ms) { return ms > slow.count(); });
    std::string all;
    for (long long ms : handoff_ms) all += " " + std::to_string(ms);
    std::cout << "[etcd] " << handoffs << " handoffs while another client made " << noise_cycles.load()
              << " lock cycles; handoff ms, sorted:" << all << "\n";
    EXPECT_EQ(failed, 0);
    EXPECT_GT(noise_cycles.load(), handoffs) << "the revision did not move on between handoffs: the test proves nothing";
    EXPECT_LE(over, 2) << over << " of " << handoff_ms.size() << " handoffs took over " << slow.count()
                       << " ms: woken by etcd's catch-up loop, not by the deletion's event";
}

// absl measures the CPU clock once per process, sleeping 1 ms, 2 ms, ... (connection.cpp,
// measure_cpu_clock_once). This process (argv: --cpu-clock-probe CONFIG) opens the process's first
// client, takes and releases a lock, and waits far longer than the measurement takes; then it asks
// absl for the result before closing the client, and prints how many times that made this thread
// sleep (voluntary context switches): 0 when the measurement was done while the client was open,
// 2 or more when it would otherwise have been done by the close, which tears gRPC down.
int cpu_clock_probe(const std::string& config) {
    auto client = dlock::client::open(config);
    client.acquire("faults/cpu-clock", dlock::acquire_options().with_wait(0ms)).release();
    std::this_thread::sleep_for(1s);
    rusage before{}, after{};
    getrusage(RUSAGE_THREAD, &before);
    const double hz = absl::base_internal::NominalCPUFrequency();
    getrusage(RUSAGE_THREAD, &after);
    std::cout << (after.ru_nvcsw - before.ru_nvcsw) << " " << hz << std::endl;
    return 0;
}

// Closing a client revokes its session lease: its keys go at once, not when the lease's TTL runs out.
TEST_F(EtcdFaults, ClosingAClientRevokesItsSessionLease) {
    std::string lease_id;
    {
        auto client = dlock::client::open(config(backend::etcd));
        auto lease = client.acquire("faults/closed", dlock::acquire_options().with_wait(0ms));
        const auto keys = keys_under(single(), "dlock/faults%2Fclosed/");
        ASSERT_EQ(keys.size(), 1u);
        lease_id = keys[0].substr(keys[0].rfind('/') + 1, 16);
        lease.release();
    }
    const auto answer = etcdctl(single().to_string(), {"lease", "timetolive", lease_id});
    ASSERT_FALSE(answer.empty());
    EXPECT_NE(answer[0].find("already expired"), std::string::npos)
        << "the closed client's session lease " << lease_id << " is still granted: " << answer[0];
}

// A process's first etcd client has absl measure the CPU clock while it is open, so that its close
// (gRPC's teardown, the first time a thread queues on an absl::Mutex behind another waiter) does not
// sleep 3 ms or more through the measurement: `dlock run` closes its one client just before it exits.
TEST_F(EtcdFaults, FirstClientOfAProcessHasTheCpuClockMeasuredBeforeItCloses) {
    child_process probe({"/proc/self/exe", "--cpu-clock-probe", config(backend::etcd)}, true);
    std::string line;
    ASSERT_TRUE(probe.read_line(line, 30000)) << "the probe printed nothing";
    EXPECT_EQ(probe.wait(), 0);
    std::istringstream words(line);
    long sleeps = -1;
    double hz = 0;
    words >> sleeps >> hz;
    EXPECT_GT(hz, 0) << line;
    EXPECT_EQ(sleeps, 0) << "asking absl for the CPU clock after the client had been open 1 s made the thread sleep "
                         << sleeps << " times: the measurement was left for the close";
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 3 && std::string(argv[1]) == "--cpu-clock-probe") return cpu_clock_probe(argv[2]);
    ::testing::InitGoogleTest(&argc, argv);
    dlock::lab::add_lab_environment({backend::etcd, backend::etcd_cluster});
    return RUN_ALL_TESTS();
}
