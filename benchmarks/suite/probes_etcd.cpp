// probes_etcd.cpp — the etcd probes: the floor through the plugin's own connection layer (the same
// gRPC channel settings, proto subset and call path: plugins/etcd/connection.hpp), server RPCs from
// etcd's /metrics, and the peers python-etcd3 Lock, tooz's etcd3 driver and `etcdctl lock` (against
// `dlock run`, process per acquisition, like with like).
#include "connection.hpp"

#include "probes_support.hpp"

#include "dlock/lab/operation_counts.hpp"

#include <dlock/dlock.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <sstream>
#include <stdexcept>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dlock::bench::family {
namespace {

namespace ec = dlock::etcd;
namespace pb = ::etcdserverpb;
using namespace std::chrono_literals;

// The requests an uncontended cycle of the plugin sends, built as the plugin's lock_queue.cpp builds them.
struct floor_client {
    ec::connection conn;
    int64_t lease = 0;
    const std::string dir = "dlock/bench%2Ffloor/";

    explicit floor_client(const dlock::lab::endpoint& where) : conn(settings_for(where)) {
        pb::LeaseGrantRequest grant;
        grant.set_ttl(600);
        pb::LeaseGrantResponse granted;
        conn.call("grant", [&](ec::member& m, grpc::ClientContext& c) { return m.lease->LeaseGrant(&c, grant, &granted); });
        lease = granted.id();
    }
    ~floor_client() {
        pb::LeaseRevokeRequest revoke;
        revoke.set_id(lease);
        pb::LeaseRevokeResponse revoked;
        try {
            conn.call("revoke", [&](ec::member& m, grpc::ClientContext& c) { return m.lease->LeaseRevoke(&c, revoke, &revoked); });
        } catch (const ec::failure&) {  // the lease expires by itself
        }
    }
    floor_client(const floor_client&) = delete;
    floor_client& operator=(const floor_client&) = delete;

    static ec::settings settings_for(const dlock::lab::endpoint& where) {
        ec::settings s;
        s.endpoints = {where.to_string()};
        return s;
    }
    // The guard every Txn of the recipe carries: `key`'s create_revision is `revision` (0: absent).
    static void require_create_revision(pb::TxnRequest& txn, const std::string& key, int64_t revision) {
        pb::Compare* c = txn.add_compare();
        c->set_result(pb::Compare::EQUAL);
        c->set_target(pb::Compare::CREATE);
        c->set_key(key);
        c->set_create_revision(revision);
    }
    // The acquire Txn (put-if-absent with the lease + read of the queue head); returns its revision.
    // One key, reused by every cycle as the plugin reuses a released key's suffix: a key per cycle
    // would leave a deleted key per cycle in etcd's index, which every later read of the directory
    // walks (until a compaction), and the floor would slow down as it runs.
    int64_t acquire(std::string& key) {
        key = fmt::format("{}{}-1", dir, ec::lease_hex(lease));
        pb::TxnRequest txn;
        require_create_revision(txn, key, 0);
        pb::PutRequest* put = txn.add_success()->mutable_request_put();
        put->set_key(key);
        put->set_value(std::string(32, 'f'));
        put->set_lease(lease);
        pb::RangeRequest* queue = txn.add_success()->mutable_request_range();
        queue->set_key(dir);
        queue->set_range_end(ec::prefix_end(dir));
        queue->set_sort_target(pb::RangeRequest::CREATE);
        queue->set_sort_order(pb::RangeRequest::DESCEND);
        queue->set_limit(2);
        queue->set_keys_only(true);
        txn.add_failure()->mutable_request_range()->set_key(key);
        pb::TxnResponse response;
        conn.call("floor acquire", [&](ec::member& m, grpc::ClientContext& ctx) { return m.kv->Txn(&ctx, txn, &response); });
        return response.header().revision();
    }
    // The release Txn: delete guarded by create_revision.
    void release(const std::string& key, int64_t revision) {
        pb::TxnRequest txn;
        require_create_revision(txn, key, revision);
        txn.add_success()->mutable_request_delete_range()->set_key(key);
        pb::TxnResponse response;
        conn.call("floor release", [&](ec::member& m, grpc::ClientContext& ctx) { return m.kv->Txn(&ctx, txn, &response); });
    }
    // A waiter's queue read (lock_queue.cpp next_in_queue): a read-only Txn that checks the key is
    // still ours and reads the key just before it; what a handoff needs after the delete's event.
    void queue_read(const std::string& key, int64_t revision) {
        pb::TxnRequest txn;
        require_create_revision(txn, key, revision);
        pb::RangeRequest* before = txn.add_success()->mutable_request_range();
        before->set_key(dir);
        before->set_range_end(ec::prefix_end(dir));
        before->set_sort_target(pb::RangeRequest::CREATE);
        before->set_sort_order(pb::RangeRequest::DESCEND);
        before->set_limit(1);
        before->set_keys_only(true);
        before->set_max_create_revision(revision - 1);
        pb::TxnResponse response;
        conn.call("floor queue read", [&](ec::member& m, grpc::ClientContext& ctx) { return m.kv->Txn(&ctx, txn, &response); });
    }
    void serializable_range() {
        pb::RangeRequest range;
        range.set_key(dir);
        range.set_serializable(true);
        pb::RangeResponse response;
        conn.call("floor range", [&](ec::member& m, grpc::ClientContext& ctx) { return m.kv->Range(&ctx, range, &response); });
    }
    void put() {
        pb::PutRequest put;
        put.set_key("dlock/bench%2Fplain");
        put.set_value(std::string(32, 'f'));
        pb::PutResponse response;
        conn.call("floor put", [&](ec::member& m, grpc::ClientContext& ctx) { return m.kv->Put(&ctx, put, &response); });
    }
};

// Requests the server received from clients that a lock cycle can cause: unary RPCs started, plus
// messages on Watch streams (create, cancel). LeaseKeepAlive messages come by time, not by cycle.
double requests_received(const dlock::lab::endpoint& where) {
    return dlock::lab::prometheus_metric_sum(where, "grpc_server_started_total", {"grpc_type=\"unary\""}) +
           dlock::lab::prometheus_metric_sum(where, "grpc_server_msg_received_total", {"grpc_method=\"Watch\""});
}

// Wall time of one run of `argv` (fork + exec + wait), in microseconds; negative when it failed.
double time_invocation(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const auto start = support::clock_type::now();
    const pid_t pid = ::fork();
    if (pid == 0) {
        for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
        if (std::freopen("/dev/null", "w", stdout) == nullptr || std::freopen("/dev/null", "w", stderr) == nullptr) _exit(127);
        ::execvp(args[0], args.data());
        _exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    const double us = support::us_since(start);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? us : -1;
}

std::string cli_path() {
#ifdef DLOCK_CLI
    return DLOCK_CLI;
#else
    return "dlock";
#endif
}

// `etcdctl lock NAME true` against `dlock run NAME -- true`, alternating invocation by invocation so
// both see the same conditions. The peer's s1 is etcdctl's; dlock_around is `dlock run`'s.
peer_result etcdctl_vs_dlock_run(const target& t, const dlock::lab::endpoint& where, int invocations) {
    peer_result r;
    r.backend = t.name;
    r.peer = "etcdctl lock";
    r.settings = "default (process per acquisition; compared with `dlock run`, not with S1)";
    r.version = support::package_version("etcd-client");
    std::vector<double> etcdctl_us, dlock_us;
    int etcdctl_failures = 0, dlock_failures = 0;
    for (int i = 0; i < invocations; ++i) {
        const double a = time_invocation({"etcdctl", "--endpoints=" + where.to_string(), "lock", "bench/cli", "true"}, {"ETCDCTL_API=3"});
        const double b = time_invocation({cli_path(), "-c", t.config.string(), "run", "bench/cli", "--", "true"}, {});
        if (a < 0) ++etcdctl_failures;
        else etcdctl_us.push_back(a);
        if (b < 0) ++dlock_failures;
        else dlock_us.push_back(b);
    }
    r.s1 = summarize(etcdctl_us);
    r.dlock_around = summarize(dlock_us);
    if (etcdctl_failures) r.error = std::to_string(etcdctl_failures) + " of " + std::to_string(invocations) + " etcdctl runs failed";
    if (dlock_failures)
        r.error += (r.error.empty() ? "" : "; ") + std::to_string(dlock_failures) + " of " + std::to_string(invocations) +
                   " `dlock run` runs failed (" + cli_path() + ")";
    r.ok = r.error.empty() && !r.s1.empty();
    return r;
}

}  // namespace

calibration calibrate_etcd(const target& t, dlock::lab::lab& lab, run_size size, const floor_interleaver& interleave) {
    (void)t;
    calibration c;
    c.min_round_trips = 2;
    const int cycles = support::calibration_cycles(size), warmup = std::min(cycles, 500);
    const auto where = lab.etcd().client_endpoint();
    floor_client f(where);
    c.operations.emplace_back("serializable Range", support::time_cycles(cycles, warmup, [&] { f.serializable_range(); }));
    c.operations.emplace_back("Put", support::time_cycles(cycles, warmup, [&] { f.put(); }));
    std::string key;
    std::vector<double> acquire_us, release_us;
    for (int i = 0; i < cycles; ++i) {
        auto start = support::clock_type::now();
        const int64_t revision = f.acquire(key);
        acquire_us.push_back(support::us_since(start));
        start = support::clock_type::now();
        f.release(key, revision);
        release_us.push_back(support::us_since(start));
    }
    c.operations.emplace_back("Txn acquire (put-if-absent + queue head)", summarize(acquire_us));
    c.operations.emplace_back("Txn release (guarded delete)", summarize(release_us));
    {
        // A handoff's parts besides the watch event: the release's delete above, and this read.
        const int64_t revision = f.acquire(key);
        c.operations.emplace_back("Txn queue read (read-only: own key + key before it)",
                                  support::time_cycles(cycles, warmup, [&] { f.queue_read(key, revision); }));
        f.release(key, revision);
    }
    c.floor = support::floor_samples(interleave, cycles, warmup, [&] { f.release(key, f.acquire(key)); });
    c.method = "acquire Txn (put-if-absent with the lease + queue head) + release Txn (delete guarded by create_revision), "
               "through the plugin's gRPC connection layer";
    c.fsync_us = support::fsync_us(lab.etcd().dir(), 200);  // etcd syncs its WAL on every write
    return c;
}

command_count count_etcd(const target& t, dlock::lab::lab& lab, const std::function<void(int)>& run_cycles) {
    (void)t;
    command_count r;
    r.minimum = 2;
    r.source = "etcd metrics: grpc_server_started_total{unary} + Watch messages received";
    const auto where = lab.etcd().client_endpoint();
    const int cycles = 1000;
    const double before = requests_received(where);
    run_cycles(cycles);
    r.per_cycle = (requests_received(where) - before) / cycles;
    return r;
}

std::vector<peer_result> peers_etcd(const target& t, dlock::lab::lab& lab, run_size size) {
    std::vector<peer_result> out;
    const auto where = lab.etcd().client_endpoint();
    const std::string host = where.host, port = std::to_string(where.port);
    const int cycles = support::peer_cycles(size), handoffs = support::peer_handoffs(size);
    const std::string py = support::debian_python(), dir = support::peers_dir();
    const auto log = t.scratch / "peer-etcd.log";
    auto run = [&](std::string peer, std::string version, const std::string& script) {
        peer_result r;
        r.backend = t.name;
        r.peer = std::move(peer);
        r.settings = "default (waits on a watch: no sleep/retry knob)";
        r.version = std::move(version);
        out.push_back(support::peer_with_dlock_around(r, t.config, cycles, [&] {
            return support::run_peer_process({py, dir + "/" + script, host, port, std::to_string(cycles), std::to_string(handoffs)}, log,
                                             300s);
        }));
    };
    run("python-etcd3 Lock", support::package_version("python3-etcd3"), "etcd_python_etcd3.py");
    run("tooz etcd3", support::package_version("python3-tooz"), "etcd_tooz.py");
    out.push_back(etcdctl_vs_dlock_run(t, where, size == run_size::full ? 200 : 30));
    return out;
}

}  // namespace dlock::bench::family
