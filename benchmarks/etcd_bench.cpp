// etcd_bench — the `etcd` backend against its floor and its peers, measured in one run on an etcd
// member the lab starts (etcd 3.4, one member, data on the lab's temporary directory).
//
//   floor      the two Txns an uncontended cycle needs — the acquire Txn (put-if-absent with the
//              lease + read of the queue head) and the release Txn (delete guarded by
//              create_revision) — sent through the plugin's own connection layer (same gRPC channel
//              settings, same call path); a serializable Range for reference
//   S1         uncontended acquire+release through the C++ API with a warm session: p50/p99/p99.9,
//              ratio to the floor (measured in interleaved blocks, so drift hits both alike), and
//              per cycle the unary RPCs and the watch-stream messages the server received (etcd's
//              /metrics: grpc_server_started_total, grpc_server_msg_received_total)
//   handoff    the parts of a handoff calibrated through the same channel type: delete commit (the
//              release Txn's round trip), watch event (from its answer to the DELETE event on a second
//              client's watch stream), re-check (the waiter's read-only Txn); bound = their sum
//   S4         two clients (two threads) pass one lock back and forth; a sample is one side's release
//              call to the other's acquire returning; target p50 <= 1.2 x bound (parts and S4 are
//              measured in interleaved rounds)
//   S3         100 waiters (20 clients x 5 threads) on one name, each releasing at once: server
//              operations per handoff (herd detector) and handoff latency
//   S8 peers   python-etcd3 Lock and tooz's etcd3 driver (S1, and S4 where they survive contention),
//              each run in 5 rounds paired with dlock S1 cycles between them; `etcdctl lock NAME true`
//              against `dlock run NAME -- true` (and `dlock run` on the file backend, the command's
//              own start-up), per invocation, alternating
//
// usage: etcd_bench [--cycles N] [--handoffs N] [--peer-cycles N] [--invocations N] [--json FILE]
#include "connection.hpp"

#include "dlock/lab/lab.hpp"

#include <dlock/dlock.hpp>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using nlohmann::json;
namespace lab = dlock::lab;
namespace ec = dlock::etcd;
namespace pb = ::etcdserverpb;

namespace {

using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t) { return std::chrono::duration<double, std::micro>(clock_type::now() - t).count(); }
double us_between(clock_type::time_point a, clock_type::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

struct summary {
    size_t n = 0;
    double p50 = 0, p99 = 0, p999 = 0, mean = 0;
};

summary summarize(std::vector<double> v) {
    summary s;
    if (v.empty()) return s;
    std::sort(v.begin(), v.end());
    auto at = [&](double q) { return v[std::min(v.size() - 1, size_t(q * double(v.size())))]; };
    s.n = v.size();
    s.p50 = at(0.50);
    s.p99 = at(0.99);
    s.p999 = at(0.999);
    double sum = 0;
    for (double x : v) sum += x;
    s.mean = sum / double(v.size());
    return s;
}

json to_json(const summary& s) { return {{"n", s.n}, {"p50_us", s.p50}, {"p99_us", s.p99}, {"p999_us", s.p999}, {"mean_us", s.mean}}; }

std::string shell_line(const std::string& command) {
    std::string out;
    if (FILE* p = popen(command.c_str(), "r")) {
        std::array<char, 4096> buf;
        size_t n;
        while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
        pclose(p);
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out.substr(0, out.find('\n'));
}

// ---- server-side counts: etcd's /metrics (go-grpc-prometheus) ------------------------------------

std::string http_get(const lab::endpoint& where, const std::string& path) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(where.port);
    inet_pton(AF_INET, where.host.c_str(), &address.sin_addr);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        if (fd >= 0) close(fd);
        throw std::runtime_error("cannot connect to " + where.to_string());
    }
    const std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + where.to_string() + "\r\n\r\n";
    if (write(fd, request.data(), request.size()) != ssize_t(request.size())) throw std::runtime_error("short write");
    std::string body;
    char buffer[65536];
    for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) body.append(buffer, size_t(n));
    close(fd);
    return body;
}

// Sum of the samples of `metric` whose labels contain every fragment of `filters`.
double metric_sum(const std::string& metrics, const std::string& metric, const std::vector<std::string>& filters = {}) {
    double sum = 0;
    std::istringstream lines(metrics);
    for (std::string line; std::getline(lines, line);) {
        if (line.rfind(metric + "{", 0) != 0) continue;
        bool match = true;
        for (const auto& f : filters) match = match && line.find(f) != std::string::npos;
        if (match) sum += std::stod(line.substr(line.rfind(' ') + 1));
    }
    return sum;
}

struct server_counts {
    double unary = 0;       // unary RPCs started
    double watch_msgs = 0;  // messages received on Watch streams (create, cancel)
    double keepalives = 0;  // messages received on LeaseKeepAlive streams
    double all_msgs = 0;    // every message received (unary requests and stream messages)
};

server_counts counts(const lab::endpoint& where) {
    const std::string m = http_get(where, "/metrics");
    server_counts c;
    c.unary = metric_sum(m, "grpc_server_started_total", {"grpc_type=\"unary\""});
    c.watch_msgs = metric_sum(m, "grpc_server_msg_received_total", {"grpc_method=\"Watch\""});
    c.keepalives = metric_sum(m, "grpc_server_msg_received_total", {"grpc_method=\"LeaseKeepAlive\""});
    c.all_msgs = metric_sum(m, "grpc_server_msg_received_total");
    return c;
}

server_counts operator-(const server_counts& a, const server_counts& b) {
    return {a.unary - b.unary, a.watch_msgs - b.watch_msgs, a.keepalives - b.keepalives, a.all_msgs - b.all_msgs};
}
server_counts& operator+=(server_counts& a, const server_counts& b) {
    a.unary += b.unary, a.watch_msgs += b.watch_msgs, a.keepalives += b.keepalives, a.all_msgs += b.all_msgs;
    return a;
}

// ---- the floor, through the plugin's connection layer ----------------------------------------------

// The requests the plugin sends, built the same way (etcd_plugin.cpp).
struct floor_client {
    ec::connection conn;
    int64_t lease = 0;
    int64_t n = 0;
    const std::string dir = "dlock/bench%2Ffloor/";

    explicit floor_client(const lab::endpoint& where) : conn(settings_for(where)) {
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
        } catch (const ec::failure&) {
        }
    }
    static ec::settings settings_for(const lab::endpoint& where) {
        ec::settings s;
        s.endpoints = {where.to_string()};
        return s;
    }

    // The acquire Txn; returns the key's create_revision.
    int64_t put(std::string& key) {
        key = fmt::format("{}{}-{:x}", dir, ec::lease_hex(lease), ++n);
        pb::TxnRequest txn;
        pb::Compare* c = txn.add_compare();
        c->set_result(pb::Compare::EQUAL);
        c->set_target(pb::Compare::CREATE);
        c->set_key(key);
        c->set_create_revision(0);
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
        conn.call("floor put", [&](ec::member& m, grpc::ClientContext& ctx) { return m.kv->Txn(&ctx, txn, &response); });
        return response.header().revision();
    }
    // The release Txn.
    void remove(const std::string& key, int64_t revision) {
        pb::TxnRequest txn;
        pb::Compare* c = txn.add_compare();
        c->set_result(pb::Compare::EQUAL);
        c->set_target(pb::Compare::CREATE);
        c->set_key(key);
        c->set_create_revision(revision);
        txn.add_success()->mutable_request_delete_range()->set_key(key);
        pb::TxnResponse response;
        conn.call("floor delete", [&](ec::member& m, grpc::ClientContext& ctx) { return m.kv->Txn(&ctx, txn, &response); });
    }
    // A waiter's re-check: read-only Txn (our key exists? what is before it?).
    void recheck(const std::string& key, int64_t revision) {
        pb::TxnRequest txn;
        pb::Compare* c = txn.add_compare();
        c->set_result(pb::Compare::EQUAL);
        c->set_target(pb::Compare::CREATE);
        c->set_key(key);
        c->set_create_revision(revision);
        pb::RangeRequest* before = txn.add_success()->mutable_request_range();
        before->set_key(dir);
        before->set_range_end(ec::prefix_end(dir));
        before->set_max_create_revision(revision - 1);
        before->set_sort_target(pb::RangeRequest::CREATE);
        before->set_sort_order(pb::RangeRequest::DESCEND);
        before->set_limit(1);
        before->set_keys_only(true);
        pb::TxnResponse response;
        conn.call("floor recheck", [&](ec::member& m, grpc::ClientContext& ctx) { return m.kv->Txn(&ctx, txn, &response); });
    }
    void serializable_range() {
        pb::RangeRequest range;
        range.set_key(dir);
        range.set_serializable(true);
        pb::RangeResponse response;
        conn.call("floor range", [&](ec::member& m, grpc::ClientContext& ctx) { return m.kv->Range(&ctx, range, &response); });
    }
};

struct floor_samples {
    std::vector<double> cycle, put, remove, range;
};

void floor_block(floor_client& f, int cycles, floor_samples& out) {
    std::string key;
    for (int i = 0; i < cycles; ++i) {
        const auto t0 = clock_type::now();
        const int64_t rev = f.put(key);
        const auto t1 = clock_type::now();
        f.remove(key, rev);
        const auto t2 = clock_type::now();
        f.serializable_range();
        out.cycle.push_back(us_between(t0, t2));
        out.put.push_back(us_between(t0, t1));
        out.remove.push_back(us_between(t1, t2));
        out.range.push_back(us_since(t2));
    }
}

void s1_block(dlock::client& client, int cycles, std::vector<double>& out) {
    const auto options = dlock::acquire_options().with_wait(0ms).with_ttl(30s);
    for (int i = 0; i < cycles; ++i) {
        const auto t = clock_type::now();
        {
            dlock::lease lease = client.acquire("bench/s1", options);
            benchmark::DoNotOptimize(lease.fencing_token());
        }
        out.push_back(us_since(t));
    }
}

// ---- handoff parts: delete commit, watch event, re-check ----------------------------------------

struct handoff_parts {
    std::vector<double> commit, event, recheck;
};

// A second client (its own channel, like the waiter's) watches each key; the first deletes it.
void calibrate_handoff(const lab::endpoint& where, int samples, handoff_parts& parts) {
    floor_client releaser(where), waiter(where);
    grpc::ClientContext context;
    auto stream = waiter.conn.at(0).watch->Watch(&context);
    std::mutex m;
    std::condition_variable cv;
    int64_t created = 0, event_for = 0;
    clock_type::time_point event_at;
    std::thread reader([&] {
        pb::WatchResponse r;
        while (stream->Read(&r)) {
            const auto t = clock_type::now();
            std::lock_guard<std::mutex> lock(m);
            if (r.created()) created = r.watch_id();
            for (const auto& e : r.events())
                if (e.type() == mvccpb::Event::DELETE) {
                    event_for = r.watch_id();
                    event_at = t;
                }
            cv.notify_all();
        }
    });
    constexpr int warm_up = 20;
    std::string key;
    for (int i = 1; i <= samples + warm_up; ++i) {
        const int64_t rev = releaser.put(key);
        pb::WatchRequest create;
        create.mutable_create_request()->set_key(key);
        create.mutable_create_request()->set_start_revision(rev + 1);
        create.mutable_create_request()->add_filters(pb::WatchCreateRequest::NOPUT);
        create.mutable_create_request()->set_watch_id(i);
        stream->Write(create);
        {
            std::unique_lock<std::mutex> lock(m);
            cv.wait(lock, [&] { return created == i; });  // steady state: the watcher is in place
        }
        const auto t0 = clock_type::now();
        releaser.remove(key, rev);
        const auto t1 = clock_type::now();
        clock_type::time_point t2;
        {
            std::unique_lock<std::mutex> lock(m);
            cv.wait(lock, [&] { return event_for == i; });
            t2 = event_at;
        }
        // The waiter's re-check needs a key of its own that exists: one put outside the timing.
        std::string own;
        const int64_t own_rev = waiter.put(own);
        const auto t4 = clock_type::now();
        waiter.recheck(own, own_rev);
        const double recheck = us_since(t4);
        waiter.remove(own, own_rev);
        pb::WatchRequest cancel;
        cancel.mutable_cancel_request()->set_watch_id(i);
        stream->Write(cancel);
        if (i > warm_up) {
            parts.commit.push_back(us_between(t0, t1));
            parts.event.push_back(us_between(t1, t2));
            parts.recheck.push_back(recheck);
        }
    }
    context.TryCancel();
    reader.join();
    stream->Finish();
}

// ---- S4 and S3 -----------------------------------------------------------------------------------

// S4: two clients pass one lock back and forth. The holder lets the other side start waiting, gives
// it 3 ms to queue (its acquire Txn is a write: a WAL fsync), notes the time and releases; a sample
// is that release to the waiter's acquire returning.
void handoff(const std::string& config, int handoffs, std::vector<double>& samples) {
    dlock::client clients[2] = {dlock::client::open(config), dlock::client::open(config)};
    std::mutex m;
    std::condition_variable cv;
    int may_wait = 0;
    std::atomic<int64_t> released_ns{0};
    auto now_ns = [] { return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch()).count(); };
    auto side = [&](int me) {
        for (int k = 0; k < handoffs; ++k) {
            const bool first = me == 0 && k == 0;
            if (!first) {
                std::unique_lock<std::mutex> lock(m);
                cv.wait(lock, [&] { return may_wait == me; });
            }
            auto lease = clients[me].acquire("bench/s4", dlock::acquire_options().with_wait(10s).with_ttl(30s));
            const int64_t got = now_ns();
            {
                std::lock_guard<std::mutex> lock(m);
                if (!first) samples.push_back(double(got - released_ns.load()) / 1000.0);
                may_wait = 1 - me;
            }
            cv.notify_all();
            std::this_thread::sleep_for(3ms);
            released_ns = now_ns();
            lease.release();
        }
    };
    std::thread a(side, 0), b(side, 1);
    a.join();
    b.join();
}

struct herd_result {
    int waiters = 0;
    double ops_per_handoff = 0, unary_per_handoff = 0, watch_msgs_per_handoff = 0;
    summary handoff;
    double total_ms = 0;
};

// S3: 100 waiters queued on one name; each releases as soon as it acquires.
herd_result herd(const std::string& config, const lab::endpoint& where) {
    constexpr int clients = 20, per_client = 5;
    herd_result r;
    r.waiters = clients * per_client;
    auto holder = dlock::client::open(config);
    auto lease = holder.acquire("bench/s3", dlock::acquire_options().with_wait(0ms));
    std::vector<dlock::client> pool;
    for (int i = 0; i < clients; ++i) pool.push_back(dlock::client::open(config));
    std::mutex m;
    std::vector<std::pair<int64_t, int64_t>> spans;  // (acquired, release invoked) per waiter
    auto now_ns = [] { return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch()).count(); };
    std::atomic<int> queued{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < r.waiters; ++i) {
        threads.emplace_back([&, i] {
            ++queued;
            auto l = pool[size_t(i % clients)].acquire("bench/s3", dlock::acquire_options().with_wait(60s));
            const int64_t got = now_ns();
            const int64_t release = now_ns();
            l.release();
            std::lock_guard<std::mutex> lock(m);
            spans.emplace_back(got, release);
        });
    }
    // Every waiter's key is in the queue when the count of unary calls stops growing for a while.
    double last = -1;
    for (;;) {
        std::this_thread::sleep_for(300ms);
        const double now = counts(where).unary;
        if (queued == r.waiters && now == last) break;
        last = now;
    }
    const server_counts before = counts(where);
    const auto start = clock_type::now();
    const int64_t released = now_ns();
    lease.release();
    for (auto& t : threads) t.join();
    r.total_ms = us_since(start) / 1000.0;
    const server_counts used = counts(where) - before;
    r.ops_per_handoff = (used.all_msgs - used.keepalives) / r.waiters;  // keepalives come by time, not by handoff
    r.unary_per_handoff = used.unary / r.waiters;
    r.watch_msgs_per_handoff = used.watch_msgs / r.waiters;
    std::sort(spans.begin(), spans.end());
    std::vector<double> h;
    int64_t previous_release = released;
    for (const auto& [got, release] : spans) {
        h.push_back(double(got - previous_release) / 1000.0);
        previous_release = release;
    }
    r.handoff = summarize(h);
    return r;
}

// ---- peers -----------------------------------------------------------------------------------------

json run_peer(const std::vector<std::string>& argv) {
    std::string command = "/usr/bin/python3";  // Debian's python, where python3-etcd3 and python3-tooz live
    for (const auto& a : argv) command += " '" + a + "'";
    command += " 2>&1";
    std::string out;
    if (FILE* p = popen(command.c_str(), "r")) {
        std::array<char, 65536> buf;
        size_t n;
        while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
        pclose(p);
    }
    const size_t brace = out.rfind("{");
    const std::string last = brace == std::string::npos ? out : out.substr(brace);
    try {
        return json::parse(last);
    } catch (...) {
        return json{{"s1_error", "peer printed no result: " + out.substr(0, 300)}};
    }
}

// Wall time of one run of `argv` (fork + exec + wait), in microseconds; -1 when it failed.
double time_invocation(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const auto t = clock_type::now();
    const pid_t pid = fork();
    if (pid == 0) {
        for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
        if (freopen("/dev/null", "w", stdout) == nullptr || freopen("/dev/null", "w", stderr) == nullptr) _exit(127);
        execvp(args[0], args.data());
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    const double us = us_since(t);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? us : -1;
}

std::string cli_path() {
#ifdef DLOCK_CLI
    return DLOCK_CLI;
#else
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return "dlock";
    std::string dir(self, size_t(n));
    return dir.substr(0, dir.rfind('/')) + "/dlock";
#endif
}

}  // namespace

int main(int argc, char** argv) {
    int cycles = 10000, handoffs = 1000, peer_cycles = 1000, invocations = 50;
    std::string json_path;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--cycles" && i + 1 < argc) cycles = std::stoi(argv[++i]);
        else if (a == "--handoffs" && i + 1 < argc) handoffs = std::stoi(argv[++i]);
        else if (a == "--peer-cycles" && i + 1 < argc) peer_cycles = std::stoi(argv[++i]);
        else if (a == "--invocations" && i + 1 < argc) invocations = std::stoi(argv[++i]);
        else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    }
    setenv("DLOCK_LOG", "error", 0);
    lab::lab servers({lab::backend::etcd});
    std::fprintf(stderr, "%s", servers.startup_report().c_str());
    const auto where = servers.etcd().client_endpoint();
    const std::string cfg = servers.config_path(lab::backend::etcd).string();
    utsname machine{};
    uname(&machine);
    const std::string etcd_version = shell_line("etcd --version");
    json report;

    // Floor and S1 in interleaved blocks: both see the same machine, the same disk, the same drift.
    std::fprintf(stderr, "floor and S1 (%d cycles each, interleaved)...\n", cycles);
    floor_client floor(where);
    floor_samples fs;
    floor_block(floor, 500, fs);  // warm-up
    fs = {};
    auto client = dlock::client::open(cfg);
    std::vector<double> s1_samples;
    s1_block(client, 1000, s1_samples);  // warm-up: the session lease is granted here
    s1_samples.clear();
    server_counts s1_used;
    constexpr int blocks = 10;
    for (int b = 0; b < blocks; ++b) {
        floor_block(floor, cycles / blocks, fs);
        const server_counts before = counts(where);
        s1_block(client, cycles / blocks, s1_samples);
        s1_used += counts(where) - before;
    }
    const summary floor_cycle = summarize(fs.cycle), floor_put = summarize(fs.put), floor_remove = summarize(fs.remove),
                  range = summarize(fs.range), s1 = summarize(s1_samples);
    const double measured = double(s1_samples.size());

    // The handoff's parts and S4 in interleaved rounds, for the same reason.
    std::fprintf(stderr, "handoff parts and S4 (%d each, interleaved)...\n", handoffs);
    handoff_parts parts;
    std::vector<double> s4_samples;
    for (int round = 0; round < 5; ++round) {
        calibrate_handoff(where, handoffs / 5, parts);
        handoff(cfg, handoffs / 10, s4_samples);  // each side passes the lock handoffs/10 times
    }
    const summary commit = summarize(parts.commit), event = summarize(parts.event), recheck = summarize(parts.recheck);
    const double bound = commit.p50 + event.p50 + recheck.p50;
    const summary s4 = summarize(s4_samples);
    std::fprintf(stderr, "S3 100 waiters...\n");
    const herd_result s3 = herd(cfg, where);

    std::fprintf(stderr, "S8 peers...\n");
    const std::string peers = DLOCK_BENCH_PEERS_DIR;
    const std::string host = where.host, port = std::to_string(where.port);
    const int peer_handoffs = std::min(handoffs, 100);
    // Each peer in 5 rounds, each followed by as many dlock S1 cycles: the two are compared in the
    // same minutes of the run, not across it (a shared machine's load drifts).
    auto run_peer_paired = [&](const std::string& script, std::vector<double>& dlock_paired) {
        json merged;
        std::vector<double> s1_all;
        for (int round = 0; round < 5; ++round) {
            const json j = run_peer({peers + "/" + script, host, port, std::to_string(peer_cycles / 5),
                                     std::to_string(round == 0 ? peer_handoffs : 0)});
            if (round == 0) merged = j;
            if (j.contains("s1_us"))
                for (double x : j["s1_us"]) s1_all.push_back(x);
            else if (j.contains("s1_error")) merged["s1_error"] = j["s1_error"];
            s1_block(client, peer_cycles / 5, dlock_paired);
        }
        if (!s1_all.empty()) merged["s1_us"] = s1_all;
        return merged;
    };
    std::vector<double> dlock_vs_etcd3, dlock_vs_tooz;
    const json etcd3_peer = run_peer_paired("etcd_python_etcd3.py", dlock_vs_etcd3);
    const json tooz_peer = run_peer_paired("etcd_tooz.py", dlock_vs_tooz);
    std::vector<double> etcdctl_runs, dlock_runs, file_runs;
    int etcdctl_failures = 0, dlock_failures = 0, file_failures = 0;
    const std::string dlock = cli_path();
    // `dlock run` on the file backend: what the dlock command costs before any backend is reached.
    const std::string file_cfg = (servers.dir() / "bench-file.yaml").string();
    std::ofstream(file_cfg) << "backend: file\noptions:\n  directory: " << (servers.dir() / "bench-file-locks").string() << "\n";
    for (int i = 0; i < invocations; ++i) {  // alternating, so all see the same conditions
        const double a = time_invocation({"etcdctl", "--endpoints=" + where.to_string(), "lock", "bench/cli", "true"}, {"ETCDCTL_API=3"});
        const double b = time_invocation({dlock, "-c", cfg, "run", "bench/cli", "--", "true"}, {});
        const double c = time_invocation({dlock, "-c", file_cfg, "run", "bench/cli", "--", "true"}, {});
        if (a < 0) ++etcdctl_failures;
        else etcdctl_runs.push_back(a);
        if (b < 0) ++dlock_failures;
        else dlock_runs.push_back(b);
        if (c < 0) ++file_failures;
        else file_runs.push_back(c);
    }
    const summary etcdctl_cli = summarize(etcdctl_runs), dlock_cli = summarize(dlock_runs), file_cli = summarize(file_runs);

    // ---- report ----
    std::printf("\n## etcd — one run, one etcd member from the lab\n\n");
    std::printf("machine: %u cores, %s %s; %s; data on the lab's temporary directory\n\n", std::thread::hardware_concurrency(),
                machine.sysname, machine.release, etcd_version.c_str());
    std::printf("| measure | p50 µs | p99 µs | p99.9 µs | ratio / note |\n|---|---|---|---|---|\n");
    std::printf("| serializable Range round trip (reference) | %.1f | %.1f | %.1f | |\n", range.p50, range.p99, range.p999);
    std::printf("| acquire Txn (put + queue read) | %.1f | %.1f | %.1f | |\n", floor_put.p50, floor_put.p99, floor_put.p999);
    std::printf("| release Txn (guarded delete) | %.1f | %.1f | %.1f | |\n", floor_remove.p50, floor_remove.p99, floor_remove.p999);
    std::printf("| **floor**: both Txns, same gRPC channel type | %.1f | %.1f | %.1f | 1.00 |\n", floor_cycle.p50, floor_cycle.p99,
                floor_cycle.p999);
    std::printf("| **S1** acquire+release, warm session | %.1f | %.1f | %.1f | p50 %.2f × floor (target ≤ 1.10); p99 %.2f × floor p99 |\n",
                s1.p50, s1.p99, s1.p999, s1.p50 / floor_cycle.p50, s1.p99 / floor_cycle.p99);
    std::printf("| S1 server work per cycle | | | | %.2f unary RPCs (minimum 2), %.2f watch-stream messages, %.3f keepalives |\n",
                s1_used.unary / measured, s1_used.watch_msgs / measured, s1_used.keepalives / measured);
    std::printf("| handoff part: delete commit (release Txn round trip) | %.1f | %.1f | %.1f | |\n", commit.p50, commit.p99, commit.p999);
    std::printf("| handoff part: watch event (delete answered → DELETE event at a second client) | %.1f | %.1f | %.1f | |\n",
                event.p50, event.p99, event.p999);
    std::printf("| handoff part: re-check (read-only Txn) | %.1f | %.1f | %.1f | |\n", recheck.p50, recheck.p99, recheck.p999);
    std::printf("| **handoff bound** = sum of the part p50s | %.1f | | | |\n", bound);
    std::printf("| **S4** handoff, two clients ping-pong | %.1f | %.1f | %.1f | p50 %.2f × bound (target ≤ 1.20; < 1000 µs) |\n",
                s4.p50, s4.p99, s4.p999, s4.p50 / bound);
    std::printf("| S3 %d waiters, one name: handoff | %.1f | %.1f | %.1f | %.2f × bound; %.0f ms for all |\n", s3.waiters,
                s3.handoff.p50, s3.handoff.p99, s3.handoff.p999, s3.handoff.p50 / bound, s3.total_ms);
    std::printf("| S3 server operations per handoff | | | | %.2f (%.2f unary RPCs + %.2f watch-stream messages; keepalives not counted); a herd would be ~%d |\n",
                s3.ops_per_handoff, s3.unary_per_handoff, s3.watch_msgs_per_handoff, s3.waiters);

    std::printf("\n### S8 peers, same member, same run (each paired with dlock S1 cycles run between its rounds)\n\n"
                "| peer | S1 p50 µs | S1 p99 µs | dlock S1 p50 µs, same rounds | peer / dlock | handoff p50 µs |\n|---|---|---|---|---|---|\n");
    auto peer_row = [&](const char* label, const json& j, const std::vector<double>& paired) {
        const summary d = summarize(paired);
        std::string s1_text = "—", s1_p99 = "—", ratio = "—", h = "—";
        if (j.contains("s1_us")) {
            const summary p = summarize(j["s1_us"].get<std::vector<double>>());
            s1_text = fmt::format("{:.1f}", p.p50);
            s1_p99 = fmt::format("{:.1f}", p.p99);
            ratio = fmt::format("{:.2f}×", p.p50 / d.p50);
        } else if (j.contains("s1_error")) {
            s1_text = "fails: " + j["s1_error"].get<std::string>();
        }
        if (j.contains("handoff_us")) h = fmt::format("{:.1f}", summarize(j["handoff_us"].get<std::vector<double>>()).p50);
        else if (j.contains("handoff_error")) h = "fails under contention: `" + j["handoff_error"].get<std::string>() + "`";
        std::printf("| %s | %s | %s | %.1f | %s | %s |\n", label, s1_text.c_str(), s1_p99.c_str(), d.p50, ratio.c_str(), h.c_str());
    };
    peer_row("python-etcd3 0.12 `Lock` (ttl 30)", etcd3_peer, dlock_vs_etcd3);
    peer_row("tooz etcd3 driver", tooz_peer, dlock_vs_tooz);
    std::printf("| dlock (C++ API): S1 and S4 above | %.1f | %.1f | | | %.1f |\n", s1.p50, s1.p99, s4.p50);
    std::printf("\n| per invocation (fork, exec, connect, lock, run `true`, unlock, exit) | p50 µs | p99 µs | failures |\n|---|---|---|---|\n");
    std::printf("| `etcdctl lock bench/cli true` | %.0f | %.0f | %d |\n", etcdctl_cli.p50, etcdctl_cli.p99, etcdctl_failures);
    std::printf("| `dlock run bench/cli -- true` | %.0f | %.0f | %d |\n", dlock_cli.p50, dlock_cli.p99, dlock_failures);
    std::printf("| `dlock run` on the `file` backend (the command's own start-up, no server) | %.0f | %.0f | %d |\n", file_cli.p50,
                file_cli.p99, file_failures);
    if (dlock_cli.p50 > 0) std::printf("\n`dlock run` p50 = %.2f × `etcdctl lock` p50\n", dlock_cli.p50 / etcdctl_cli.p50);

    report["machine"] = {{"cores", std::thread::hardware_concurrency()}, {"kernel", machine.release}, {"etcd", etcd_version}};
    report["floor"] = {{"cycle", to_json(floor_cycle)}, {"acquire_txn", to_json(floor_put)}, {"release_txn", to_json(floor_remove)},
                       {"serializable_range", to_json(range)}};
    report["s1"] = to_json(s1);
    report["s1"]["ratio_p50"] = s1.p50 / floor_cycle.p50;
    report["s1"]["unary_rpcs_per_cycle"] = s1_used.unary / measured;
    report["s1"]["watch_messages_per_cycle"] = s1_used.watch_msgs / measured;
    report["handoff_parts"] = {{"delete_commit", to_json(commit)}, {"watch_event", to_json(event)}, {"recheck", to_json(recheck)},
                               {"bound_us", bound}};
    report["s4"] = to_json(s4);
    report["s4"]["ratio_to_bound"] = s4.p50 / bound;
    report["s3"] = {{"waiters", s3.waiters}, {"handoff", to_json(s3.handoff)}, {"ops_per_handoff", s3.ops_per_handoff},
                    {"unary_per_handoff", s3.unary_per_handoff}, {"watch_messages_per_handoff", s3.watch_msgs_per_handoff}};
    report["peers"] = {{"python_etcd3", etcd3_peer}, {"tooz_etcd3", tooz_peer},
                       {"dlock_s1_paired_with_python_etcd3", to_json(summarize(dlock_vs_etcd3))},
                       {"dlock_s1_paired_with_tooz", to_json(summarize(dlock_vs_tooz))},
                       {"etcdctl_lock", to_json(etcdctl_cli)}, {"dlock_run", to_json(dlock_cli)}, {"dlock_run_file", to_json(file_cli)}};
    if (!json_path.empty()) std::ofstream(json_path) << report.dump(2) << "\n";
    return 0;
}
