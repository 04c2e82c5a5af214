// redis_bench — the `redis` and `redlock` backends against their floor and their peers, measured in
// one run on servers the lab starts (one Redis; five independent Redis for Redlock).
//
//   floor      the two scripts an uncontended cycle needs (acquire, release), each one EVALSHA round
//              trip through the same hiredis connection code dlock uses; PING for reference
//   S1         uncontended acquire+release through the C++ API: p50/p99/p99.9, ratio to the floor,
//              and server commands per cycle counted from INFO commandstats
//   S7         redlock N=5 (and N=3) S1 p50 against single-redis S1 p50
//   S4         handoff: two clients (separate connections and subscribers, two threads) pass one lock
//              back and forth; a sample is one side's release call to the other's acquire returning
//   S8 peers   redis-py Lock (default sleep 0.1 s, and tuned 0.001 s) and tooz's redis driver,
//              S1 on the same server in the same run; redis-py's handoff too
//
// usage: redis_bench [--cycles N] [--handoffs N] [--json FILE]
#include "dlock/lab/lab.hpp"
#include "redis_common.hpp"

#include <dlock/dlock.hpp>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using nlohmann::json;
namespace lab = dlock::lab;
namespace rc = dlock::redis_common;

namespace {

using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t) {
    return std::chrono::duration<double, std::micro>(clock_type::now() - t).count();
}

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

// Calls counted by INFO commandstats (INFO itself left out): those a client sent, and those run
// inside scripts. Redis counts both; dlock sends only EVALSHA/EVAL (and SCRIPT LOAD once per
// connection), and runs these commands only inside its scripts.
struct command_counts {
    long long from_clients = 0, inside_scripts = 0;
};
command_counts commands_served(lab::redis_client& c) {
    static const std::set<std::string> scripted = {"get", "set", "incr", "del", "publish", "pttl", "pexpire"};
    const std::string text = c.checked({"INFO", "commandstats"}).text;
    command_counts counts;
    size_t pos = 0;
    while ((pos = text.find("cmdstat_", pos)) != std::string::npos) {
        const size_t colon = text.find(':', pos);
        const std::string name = text.substr(pos + 8, colon - pos - 8);
        const size_t calls = text.find("calls=", colon);
        const long long n = std::stoll(text.substr(calls + 6));
        if (scripted.count(name)) counts.inside_scripts += n;
        else if (name != "info") counts.from_clients += n;
        pos = colon;
    }
    return counts;
}

// The floor: the acquire and release scripts, one EVALSHA round trip each, through dlock's own
// hiredis connection code, on a dedicated connection.
summary calibrate_floor(const lab::endpoint& where, int cycles, summary& ping) {
    rc::connection c(rc::parse_endpoint(where.host + ":" + std::to_string(where.port)), rc::settings{});
    const rc::lock_keys keys = rc::keys_for("dlock:", "bench/floor");
    const std::string owner(32, 'a');
    std::vector<double> floor, pings;
    for (int i = 0; i < cycles + 1000; ++i) {
        auto t = clock_type::now();
        rc::run_script(c, rc::acquire_script, {keys.lock, keys.fence}, {owner, "30000"});
        rc::run_script(c, rc::release_script, {keys.lock, keys.fence, keys.channel}, {owner});
        const double cycle = us_since(t);
        t = clock_type::now();
        c.command({"PING"});
        if (i >= 1000) {
            floor.push_back(cycle);
            pings.push_back(us_since(t));
        }
    }
    ping = summarize(pings);
    return summarize(floor);
}

// The Redlock floor (BENCHMARKS.md): the same two scripts sent to every node at once through the
// same fan-out code, each round ending at the quorum-th reply.
summary calibrate_redlock_floor(const std::vector<lab::endpoint>& where, int cycles) {
    std::vector<std::unique_ptr<rc::connection>> owned;
    std::vector<rc::connection*> conns;
    for (const auto& e : where) {
        owned.push_back(std::make_unique<rc::connection>(rc::parse_endpoint(e.to_string()), rc::settings{}));
        conns.push_back(owned.back().get());
    }
    const size_t quorum = where.size() / 2 + 1;
    const rc::lock_keys keys = rc::keys_for("dlock:", "bench/redlock-floor");
    const std::string owner(32, 'b');
    const auto acquire = rc::script_command(rc::acquire_script, false, {keys.lock, keys.fence}, {owner, "30000"});
    const auto release = rc::script_command(rc::release_script, false, {keys.lock, keys.fence, keys.channel}, {owner});
    const rc::enough_replies at_quorum = [&](const std::vector<rc::reply_ptr>& so_far) {
        size_t n = 0;
        for (const auto& r : so_far) n += r ? 1 : 0;
        return n >= quorum;
    };
    std::vector<double> out;
    std::vector<bool> late;
    for (int i = 0; i < cycles + 1000; ++i) {
        const auto t = clock_type::now();
        const int64_t deadline = rc::now_ns() + 1'000'000'000;
        rc::fan_out(conns, std::vector<std::vector<std::string>>(conns.size(), acquire), deadline, late, at_quorum);
        rc::fan_out(conns, std::vector<std::vector<std::string>>(conns.size(), release), deadline, late, at_quorum);
        if (i >= 1000) out.push_back(us_since(t));
    }
    return summarize(out);
}

std::vector<double> s1(dlock::client& client, const std::string& name, int cycles) {
    const auto options = dlock::acquire_options().with_wait(0ms).with_ttl(30s);
    for (int i = 0; i < 1000; ++i) client.acquire(name, options);
    std::vector<double> out;
    out.reserve(size_t(cycles));
    for (int i = 0; i < cycles; ++i) {
        const auto t = clock_type::now();
        {
            dlock::lease lease = client.acquire(name, options);
            benchmark::DoNotOptimize(lease.fencing_token());
        }
        out.push_back(us_since(t));
    }
    return out;
}

// S4: two clients pass one lock back and forth. The holder lets the other side start waiting,
// gives it 200 us to block in acquire, notes the time and releases; a sample is that release to
// the waiter's acquire returning.
std::vector<double> handoff(const std::string& config, const std::string& name, int handoffs) {
    dlock::client clients[2] = {dlock::client::open(config), dlock::client::open(config)};
    std::mutex m;
    std::condition_variable cv;
    int may_wait = 0;  // the side allowed to call acquire next
    std::atomic<int64_t> released_ns{0};
    std::vector<double> samples;
    auto now_ns = [] { return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch()).count(); };
    auto side = [&](int me) {
        for (int k = 0; k < handoffs; ++k) {
            const bool first = me == 0 && k == 0;  // the opening acquisition is not a handoff
            if (!first) {
                std::unique_lock<std::mutex> lock(m);
                cv.wait(lock, [&] { return may_wait == me; });
            }
            auto lease = clients[me].acquire(name, dlock::acquire_options().with_wait(10s).with_ttl(30s));
            const int64_t got = now_ns();
            {
                std::lock_guard<std::mutex> lock(m);
                if (!first) samples.push_back(double(got - released_ns.load()) / 1000.0);
                may_wait = 1 - me;
            }
            cv.notify_all();
            std::this_thread::sleep_for(200us);
            released_ns = now_ns();
            lease.release();
        }
    };
    std::thread a(side, 0), b(side, 1);
    a.join();
    b.join();
    return samples;
}

json run_peer(const std::vector<std::string>& argv) {
    std::string command = "/usr/bin/python3";  // Debian's python, where python3-redis and python3-tooz live
    for (const auto& a : argv) command += " '" + a + "'";
    command += " 2>&1";
    std::string out;
    if (FILE* p = popen(command.c_str(), "r")) {
        std::array<char, 65536> buf;
        size_t n;
        while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
        pclose(p);
    }
    const size_t brace = out.rfind("\n{");
    const std::string last = brace == std::string::npos ? out : out.substr(brace + 1);
    try {
        return json::parse(last);
    } catch (...) {
        return json{{"error", "peer printed no result: " + out.substr(0, 300)}};
    }
}

}  // namespace

int main(int argc, char** argv) {
    int cycles = 10000, handoffs = 1000;
    std::string json_path;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--cycles" && i + 1 < argc) cycles = std::stoi(argv[++i]);
        else if (a == "--handoffs" && i + 1 < argc) handoffs = std::stoi(argv[++i]);
        else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    }
    setenv("DLOCK_LOG", "error", 0);  // the lab's servers run without persistence: skip the warning
    lab::lab servers({lab::backend::redis, lab::backend::redlock});
    std::fprintf(stderr, "%s", servers.startup_report().c_str());
    const auto redis_ep = servers.redis().client_endpoint();
    const std::string redis_cfg = servers.config_path(lab::backend::redis).string();
    const std::string redlock_cfg = servers.config_path(lab::backend::redlock).string();
    // A 3-node Redlock config over the first three nodes.
    const std::string redlock3_cfg = (servers.dir() / "redlock3.yaml").string();
    {
        const auto eps = servers.redlock().endpoints();
        std::ofstream(redlock3_cfg) << "backend: redlock\noptions:\n  endpoints: [\"" << eps[0].to_string() << "\", \"" << eps[1].to_string()
                                    << "\", \"" << eps[2].to_string() << "\"]\n";
    }
    json report;

    std::fprintf(stderr, "calibrating the floor (%d cycles)...\n", cycles);
    summary ping;
    const summary floor = calibrate_floor(redis_ep, cycles, ping);

    std::fprintf(stderr, "S1 redis (%d cycles)...\n", cycles);
    auto redis_client = dlock::client::open(redis_cfg);
    auto stats = servers.redis().client();
    const command_counts before = commands_served(stats);
    const summary s1_redis = summarize(s1(redis_client, "bench/s1", cycles));
    const command_counts after = commands_served(stats);
    const double commands_per_cycle = double(after.from_clients - before.from_clients) / double(cycles + 1000);
    const double scripted_per_cycle = double(after.inside_scripts - before.inside_scripts) / double(cycles + 1000);

    std::fprintf(stderr, "calibrating the redlock floor...\n");
    const auto redlock_eps = servers.redlock().endpoints();
    const summary floor_redlock5 = calibrate_redlock_floor(redlock_eps, cycles);
    const summary floor_redlock3 = calibrate_redlock_floor({redlock_eps.begin(), redlock_eps.begin() + 3}, cycles);

    std::fprintf(stderr, "S7 redlock N=5 and N=3...\n");
    auto redlock_client = dlock::client::open(redlock_cfg);
    const summary s1_redlock = summarize(s1(redlock_client, "bench/s1", cycles));
    auto redlock3_client = dlock::client::open(redlock3_cfg);
    const summary s1_redlock3 = summarize(s1(redlock3_client, "bench/s1", cycles));

    std::fprintf(stderr, "S4 handoff (%d)...\n", handoffs);
    const summary h_redis = summarize(handoff(redis_cfg, "bench/s4", handoffs));
    const summary h_redlock = summarize(handoff(redlock_cfg, "bench/s4", handoffs));

    std::fprintf(stderr, "S8 peers...\n");
    const std::string peers = DLOCK_BENCH_PEERS_DIR;
    const std::string host = redis_ep.host, port = std::to_string(redis_ep.port);
    const int peer_handoffs = std::min(handoffs, 100);
    json redispy_default = run_peer({peers + "/redis_redispy.py", host, port, std::to_string(cycles), std::to_string(std::min(peer_handoffs, 20)), "0.1"});
    json redispy_tuned = run_peer({peers + "/redis_redispy.py", host, port, std::to_string(cycles), std::to_string(peer_handoffs), "0.001"});
    json tooz = run_peer({peers + "/redis_tooz.py", host, port, std::to_string(cycles)});

    auto peer_summary = [](const json& j, const char* key) -> std::optional<summary> {
        if (!j.contains(key)) return std::nullopt;
        return summarize(j[key].get<std::vector<double>>());
    };

    // ---- report ----
    std::printf("\n## redis / redlock — one run, servers from the lab (redis %s)\n\n", "7");
    std::printf("| measure | p50 µs | p99 µs | p99.9 µs | ratio |\n|---|---|---|---|---|\n");
    std::printf("| PING round trip | %.1f | %.1f | %.1f | |\n", ping.p50, ping.p99, ping.p999);
    std::printf("| floor: acquire + release scripts, 2 EVALSHA | %.1f | %.1f | %.1f | 1.00 |\n", floor.p50, floor.p99, floor.p999);
    std::printf("| S1 redis acquire+release | %.1f | %.1f | %.1f | %.2f × floor p50 (target ≤ 1.10); p99 %.2f × floor p99 |\n",
                s1_redis.p50, s1_redis.p99, s1_redis.p999, s1_redis.p50 / floor.p50, s1_redis.p99 / floor.p99);
    std::printf("| redlock floor N=5: 2 parallel rounds, each to the quorum-th reply | %.1f | %.1f | %.1f | %.2f × redis floor p50 |\n",
                floor_redlock5.p50, floor_redlock5.p99, floor_redlock5.p999, floor_redlock5.p50 / floor.p50);
    std::printf("| S7 redlock N=5 acquire+release | %.1f | %.1f | %.1f | %.2f × redis p50 (target ≤ 1.30); %.2f × its floor |\n",
                s1_redlock.p50, s1_redlock.p99, s1_redlock.p999, s1_redlock.p50 / s1_redis.p50, s1_redlock.p50 / floor_redlock5.p50);
    std::printf("| redlock floor N=3 | %.1f | %.1f | %.1f | %.2f × redis floor p50 |\n", floor_redlock3.p50, floor_redlock3.p99,
                floor_redlock3.p999, floor_redlock3.p50 / floor.p50);
    std::printf("| S7 redlock N=3 acquire+release | %.1f | %.1f | %.1f | %.2f × redis p50; %.2f × its floor |\n", s1_redlock3.p50,
                s1_redlock3.p99, s1_redlock3.p999, s1_redlock3.p50 / s1_redis.p50, s1_redlock3.p50 / floor_redlock3.p50);
    std::printf("| S4 handoff redis | %.1f | %.1f | %.1f | target p50 < 1000 µs |\n", h_redis.p50, h_redis.p99, h_redis.p999);
    std::printf("| S4 handoff redlock N=5 | %.1f | %.1f | %.1f | |\n", h_redlock.p50, h_redlock.p99, h_redlock.p999);
    std::printf("\nserver commands per S1 cycle sent by the client (INFO commandstats): %.3f (minimum 2); run inside the "
                "scripts: %.3f\n",
                commands_per_cycle, scripted_per_cycle);

    std::printf("\n| peer on the same server | S1 p50 µs | dlock redis is faster by | handoff p50 µs | dlock handoff faster by |\n|---|---|---|---|---|\n");
    json peers_json;
    for (const auto& [label, j] : std::vector<std::pair<std::string, json>>{
             {"redis-py Lock (sleep=0.1, default)", redispy_default}, {"redis-py Lock (sleep=0.001, tuned)", redispy_tuned}, {"tooz redis", tooz}}) {
        if (j.contains("error")) {
            std::printf("| %s | failed: %s | | | |\n", label.c_str(), j["error"].get<std::string>().c_str());
            peers_json[label] = {{"error", j["error"]}};
            continue;
        }
        const auto ps1 = *peer_summary(j, "s1_us");
        const auto ph = peer_summary(j, "handoff_us");
        const bool has_h = ph && ph->n > 0;
        std::printf("| %s | %.1f | %.2f× | %s | %s |\n", label.c_str(), ps1.p50, ps1.p50 / s1_redis.p50,
                    has_h ? fmt::format("{:.1f}", ph->p50).c_str() : "—",
                    has_h ? fmt::format("{:.1f}×", ph->p50 / h_redis.p50).c_str() : "—");
        peers_json[label] = {{"s1", to_json(ps1)}};
        if (has_h) peers_json[label]["handoff"] = to_json(*ph);
    }

    report = {{"floor", to_json(floor)}, {"ping", to_json(ping)}, {"s1_redis", to_json(s1_redis)},
              {"s1_redlock5", to_json(s1_redlock)}, {"floor_redlock5", to_json(floor_redlock5)},
              {"floor_redlock3", to_json(floor_redlock3)}, {"s1_redlock3", to_json(s1_redlock3)}, {"handoff_redis", to_json(h_redis)},
              {"handoff_redlock5", to_json(h_redlock)}, {"commands_per_cycle", commands_per_cycle}, {"scripted_commands_per_cycle", scripted_per_cycle}, {"peers", peers_json}};
    if (!json_path.empty()) std::ofstream(json_path) << report.dump(2) << "\n";
    return 0;
}
