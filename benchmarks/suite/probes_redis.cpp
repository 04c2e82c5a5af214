// probes_redis.cpp — the redis and redlock probes: the floor through dlock's own hiredis connection
// code and Lua scripts (plugins/redis_common), server commands from INFO commandstats, Redlock's S7,
// and the peers redis-py Lock and tooz's redis driver (S8) on the same server.
#include "probes_support.hpp"

#include "redis_common.hpp"

#include <dlock/dlock.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <memory>
#include <set>

namespace dlock::bench::family {
namespace {

namespace rc = dlock::redis_common;
using support::clock_type;

std::vector<dlock::lab::endpoint> nodes_of(const target& t, dlock::lab::lab& lab) {
    if (t.name == "redlock") return lab.redlock().endpoints();
    return {lab.redis().client_endpoint()};
}

std::unique_ptr<rc::connection> connect(const dlock::lab::endpoint& where) {
    return std::make_unique<rc::connection>(rc::parse_endpoint(where.to_string()), rc::settings{});
}

// One floor cycle on a single server: the acquire and release scripts, one EVALSHA each.
struct single_floor {
    std::unique_ptr<rc::connection> conn;
    rc::lock_keys keys = rc::keys_for("dlock:", "bench/floor");
    std::string owner = std::string(32, 'a');
    void acquire() { rc::run_script(*conn, rc::acquire_script, {keys.lock, keys.fence}, {owner, "30000"}); }
    void release() { rc::run_script(*conn, rc::release_script, {keys.lock, keys.fence, keys.channel}, {owner}); }
};

// One floor cycle on Redlock's nodes: each script sent to every node at once through the plugin's
// fan-out, each round ending at the quorum-th reply (docs/design/benchmarks.md).
struct fan_out_floor {
    std::vector<std::unique_ptr<rc::connection>> owned;
    std::vector<rc::connection*> conns;
    std::vector<std::string> acquire_cmd, release_cmd;
    std::size_t quorum = 0;
    std::vector<bool> late;

    explicit fan_out_floor(const std::vector<dlock::lab::endpoint>& nodes) {
        for (const auto& e : nodes) {
            owned.push_back(connect(e));
            conns.push_back(owned.back().get());
        }
        quorum = nodes.size() / 2 + 1;
        const rc::lock_keys keys = rc::keys_for("dlock:", "bench/redlock-floor");
        const std::string owner(32, 'b');
        // Load the scripts once per node (the plugin does so per new connection), so EVALSHA hits.
        for (auto* c : conns) {
            rc::run_script(*c, rc::acquire_script, {keys.lock, keys.fence}, {owner, "30000"});
            rc::run_script(*c, rc::release_script, {keys.lock, keys.fence, keys.channel}, {owner});
        }
        acquire_cmd = rc::script_command(rc::acquire_script, false, {keys.lock, keys.fence}, {owner, "30000"});
        release_cmd = rc::script_command(rc::release_script, false, {keys.lock, keys.fence, keys.channel}, {owner});
    }
    void round(const std::vector<std::string>& command) {
        const rc::enough_replies at_quorum = [&](const std::vector<rc::reply_ptr>& so_far) {
            std::size_t n = 0;
            for (const auto& r : so_far) n += r ? 1 : 0;
            return n >= quorum;
        };
        rc::fan_out(conns, rc::command_line(command), rc::now_ns() + 1'000'000'000, late, at_quorum);
    }
};

// Calls counted by INFO commandstats (INFO itself left out), summed over `nodes`: those clients
// sent, and those run inside scripts (dlock sends only EVALSHA/EVAL, SCRIPT LOAD once per connection).
struct served {
    long long from_clients = 0, inside_scripts = 0;
};
served commands_served(const std::vector<dlock::lab::endpoint>& nodes) {
    static const std::set<std::string> scripted = {"get",  "set",  "incr", "del",    "publish",       "pttl",  "pexpire",
                                                   "time", "zadd", "zrem", "zrange", "zrangebyscore", "zscore"};
    served total;
    for (const auto& node : nodes) {
        dlock::lab::redis_client c(node);
        const std::string text = c.checked({"INFO", "commandstats"}).text;
        std::size_t pos = 0;
        while ((pos = text.find("cmdstat_", pos)) != std::string::npos) {
            const std::size_t colon = text.find(':', pos);
            const std::string name = text.substr(pos + 8, colon - pos - 8);
            const long long n = std::stoll(text.substr(text.find("calls=", colon) + 6));
            if (scripted.count(name)) total.inside_scripts += n;
            else if (name != "info") total.from_clients += n;
            pos = colon;
        }
    }
    return total;
}

// A Redlock config over the first `count` nodes of the lab's set.
std::filesystem::path redlock_config(dlock::lab::lab& lab, std::size_t count, const std::filesystem::path& dir) {
    const auto eps = lab.redlock().endpoints();
    const std::filesystem::path path = dir / ("redlock" + std::to_string(count) + ".yaml");
    std::ofstream out(path);
    out << "backend: redlock\noptions:\n  endpoints: [";
    for (std::size_t i = 0; i < count && i < eps.size(); ++i) out << (i ? ", " : "") << '"' << eps[i].to_string() << '"';
    out << "]\n";
    return path;
}

}  // namespace

calibration calibrate_redis(const target& t, dlock::lab::lab& lab, run_size size, const floor_interleaver& interleave) {
    calibration c;
    const int cycles = support::calibration_cycles(size), warmup = std::min(cycles, 1000);
    const auto nodes = nodes_of(t, lab);
    c.min_round_trips = 2;
    single_floor one{connect(nodes.front())};
    c.operations.emplace_back("PING", support::time_cycles(cycles, warmup, [&] { one.conn->command({"PING"}); }));
    // Each script timed on its own, interleaved (after a warm-up of whole cycles).
    support::time_cycles(0, warmup, [&] {
        one.acquire();
        one.release();
    });
    std::vector<double> acquire_us, release_us;
    for (int i = 0; i < cycles; ++i) {
        auto start = clock_type::now();
        one.acquire();
        acquire_us.push_back(support::us_since(start));
        start = clock_type::now();
        one.release();
        release_us.push_back(support::us_since(start));
    }
    c.operations.emplace_back("EVALSHA acquire", summarize(acquire_us));
    c.operations.emplace_back("EVALSHA release", summarize(release_us));
    if (t.name == "redis") {
        c.floor = support::floor_samples(interleave, cycles, warmup, [&] {
            one.acquire();
            one.release();
        });
        c.method = "acquire + release Lua scripts, one EVALSHA round trip each, through dlock's hiredis connection code";
    } else {
        fan_out_floor fan(nodes);
        std::vector<double> round_us;
        for (int i = 0; i < cycles; ++i) {
            const auto start = clock_type::now();
            fan.round(fan.acquire_cmd);
            round_us.push_back(support::us_since(start));
            fan.round(fan.release_cmd);
        }
        c.operations.emplace_back("fan-out EVALSHA acquire to " + std::to_string(nodes.size()) + " nodes, to the quorum-th reply",
                                  summarize(round_us));
        c.floor = support::floor_samples(interleave, cycles, warmup, [&] {
            fan.round(fan.acquire_cmd);
            fan.round(fan.release_cmd);
        });
        c.method = "acquire + release scripts, each sent to all " + std::to_string(nodes.size()) +
                   " nodes at once through the plugin's fan-out; each round ends at the quorum-th reply";
    }
    // Redis here appends without fsync per write (appendfsync everysec or none): none on the path.
    c.fsync_us = NAN;
    return c;
}

command_count count_redis(const target& t, dlock::lab::lab& lab, const std::function<void(int)>& run_cycles) {
    command_count r;
    const auto nodes = nodes_of(t, lab);
    r.minimum = 2 * static_cast<int>(nodes.size());
    r.source = nodes.size() == 1 ? "INFO commandstats (calls sent by clients)"
                                 : "INFO commandstats, summed over " + std::to_string(nodes.size()) + " nodes (calls sent by clients)";
    const int cycles = 1000;
    const served before = commands_served(nodes);
    run_cycles(cycles);
    const served after = commands_served(nodes);
    r.per_cycle = double(after.from_clients - before.from_clients) / cycles;
    return r;
}

std::vector<peer_result> peers_redis(const target& t, dlock::lab::lab& lab, run_size size) {
    std::vector<peer_result> out;
    if (t.name != "redis") return out;  // no Redlock peer is packaged in Debian (see the report)
    const auto where = lab.redis().client_endpoint();
    const std::string host = where.host, port = std::to_string(where.port);
    const int cycles = support::peer_cycles(size), handoffs = support::peer_handoffs(size);
    const std::string py = support::debian_python(), dir = support::peers_dir();
    const auto log = t.scratch / "peer-redis.log";
    const std::string redispy = support::package_version("python3-redis"), tooz = support::package_version("python3-tooz");
    auto run = [&](std::string peer, std::string settings, std::string version, std::vector<std::string> argv) {
        peer_result r;
        r.backend = t.name;
        r.peer = std::move(peer);
        r.settings = std::move(settings);
        r.version = std::move(version);
        out.push_back(support::peer_with_dlock_around(r, t.config, cycles, [&] {
            return support::run_peer_process(argv, log, std::chrono::seconds(300));
        }));
    };
    // redis-py polls while blocked: its sleep (default 0.1 s) bounds the handoff from below.
    run("redis-py Lock", "default (sleep 0.1 s)", redispy,
        {py, dir + "/redis_redispy.py", host, port, std::to_string(cycles), std::to_string(std::min(handoffs, 20)), "0.1"});
    run("redis-py Lock", "tuned: sleep 0.001 s", redispy,
        {py, dir + "/redis_redispy.py", host, port, std::to_string(cycles), std::to_string(handoffs), "0.001"});
    // tooz's redis driver builds its redis-py lock itself: no sleep or retry to tune.
    run("tooz redis", "default (no sleep/retry knob)", tooz, {py, dir + "/redis_tooz.py", host, port, std::to_string(cycles)});
    return out;
}

}  // namespace dlock::bench::family

namespace dlock::bench {

std::vector<redlock_row> run_redlock_s7(dlock::lab::lab& lab, run_size size, const std::filesystem::path& scratch) {
    const int cycles = support::calibration_cycles(size);
    std::vector<redlock_row> rows;
    auto measure = [&](int nodes, bool one_paused, const std::filesystem::path& config) {
        redlock_row row;
        row.nodes = nodes;
        row.one_paused = one_paused;
        try {
            auto client = dlock::client::open(config.string());
            row.s1 = support::dlock_s1(client, "bench/s7", cycles, std::min(cycles, 500));
        } catch (const std::exception& e) {
            row.ok = false;
            row.error = e.what();
        }
        rows.push_back(std::move(row));
    };
    // nodes = 1: single redis, the baseline the Redlock rows are compared with.
    measure(1, false, lab.config_path(dlock::lab::backend::redis));
    for (const std::size_t n : {std::size_t{3}, std::size_t{5}}) {
        std::filesystem::create_directories(scratch);
        const auto config = family::redlock_config(lab, n, scratch);
        measure(static_cast<int>(n), false, config);
        // The last node of the n in use is stopped (SIGSTOP): its sockets stay open, it never answers.
        auto& paused = lab.redlock().node(n - 1);
        paused.pause();
        try {
            measure(static_cast<int>(n), true, config);
        } catch (...) {
            paused.resume();
            throw;
        }
        paused.resume();
    }
    return rows;
}

}  // namespace dlock::bench
