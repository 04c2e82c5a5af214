// probes_common.cpp — the public entry points of probes.hpp, which dispatch on the target's name to
// its backend family's probe (probes_<family>.cpp), and the helpers every family shares (namespace
// dlock::bench::support): timing loops, dlock's S1 around a peer, running a peer process and reading
// its JSON, the fsync cost of a directory, a Debian package's version.
#include "probes_support.hpp"

#include "dlock/lab/faults.hpp"

#include <dlock/dlock.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dlock::bench {

namespace support {

using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point start) {
    return std::chrono::duration<double, std::micro>(clock_type::now() - start).count();
}

// Runs `warmup` untimed cycles, then `cycles` timed ones; each sample is one call of `cycle`.
distribution time_cycles(int cycles, int warmup, const std::function<void()>& cycle) {
    for (int i = 0; i < warmup; ++i) cycle();
    std::vector<double> samples;
    samples.reserve(static_cast<std::size_t>(cycles));
    for (int i = 0; i < cycles; ++i) {
        const auto start = clock_type::now();
        cycle();
        samples.push_back(us_since(start));
    }
    return summarize(std::move(samples));
}

distribution floor_samples(const floor_interleaver& interleave, int cycles, int warmup, const std::function<void()>& cycle) {
    if (interleave) return interleave(cycle);
    return time_cycles(cycles, warmup, cycle);
}

// The per-backend S1 count and warm-up of a calibration: docs/design/benchmarks.md's 10 000 in full, 2 000 quick.
int calibration_cycles(run_size size) { return size == run_size::full ? 10000 : 2000; }

// Uncontended try-once acquire+release of `name` through the C++ API on one warm client.
distribution dlock_s1(dlock::client& client, const std::string& name, int cycles, int warmup) {
    const auto try_once = dlock::acquire_options().with_wait(std::chrono::milliseconds(0)).with_ttl(std::chrono::seconds(30));
    return time_cycles(cycles, warmup, [&] { client.acquire(name, try_once).release(); });
}

// Merges the samples of several distributions into one.
distribution merged(const std::vector<distribution>& parts) {
    std::vector<double> all;
    for (const auto& p : parts) all.insert(all.end(), p.us.begin(), p.us.end());
    return summarize(std::move(all));
}

// The mean cost of one fsync of a fresh 4 KiB write in `dir` (the filesystem the server writes
// its log on), over `count` writes.
double fsync_us(const std::filesystem::path& dir, int count) {
    const std::filesystem::path file = dir / ".dlock-probe-fsync";
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return NAN;
    const std::string page(4096, 'x');
    std::vector<double> samples;
    for (int i = 0; i < count; ++i) {
        if (::pwrite(fd, page.data(), page.size(), static_cast<off_t>(i) * 4096) != static_cast<ssize_t>(page.size())) break;
        const auto start = clock_type::now();
        if (::fdatasync(fd) != 0) break;
        samples.push_back(us_since(start));
    }
    ::close(fd);
    std::error_code ignored;
    std::filesystem::remove(file, ignored);
    return samples.empty() ? NAN : summarize(samples).p50;
}

// The installed version of a Debian package, or "not installed".
std::string package_version(const std::string& package) {
    std::string out;
    const int status = dlock::lab::run_command({"dpkg-query", "-W", "-f", "${Version}", package}, &out);
    if (status != 0 || out.empty()) return "not installed";
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return package + " " + out;
}

// The last `lines` non-empty lines of `text`, joined with " / " (for an error message).
std::string tail_of(const std::string& text, std::size_t lines) {
    std::vector<std::string> all;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) all.push_back(line);
    std::string out;
    for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += (out.empty() ? "" : " / ") + all[i];
    return out.substr(0, 600);
}

// One peer process run to completion (at most `timeout`). The peer prints one JSON object on its
// last line that starts with '{' (benchmarks/peers/peer_harness.py): "s1_us" and "handoff_us" sample
// lists, or "error" / "s1_error" / "handoff_error". A peer that fails, hangs or prints no JSON
// yields an object with "error" saying so, never nothing.
nlohmann::json run_peer_process(const std::vector<std::string>& argv, const std::filesystem::path& log,
                                std::chrono::seconds timeout) {
    std::error_code ignored;
    std::filesystem::remove(log, ignored);
    try {
        dlock::lab::spawn_options options;
        options.argv = argv;
        options.log_path = log;
        auto child = dlock::lab::child_process::spawn(options);
        const auto status = child.wait_for_exit(timeout);
        std::ifstream in(log);
        const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (!status) {
            child.kill_group();
            return {{"error", "did not finish within " + std::to_string(timeout.count()) + " s: " + tail_of(output, 4)}};
        }
        const std::size_t brace = output.rfind("\n{");
        const std::string last = output.rfind('{', 0) == 0 && brace == std::string::npos ? output
                                 : brace == std::string::npos                             ? std::string()
                                                                                          : output.substr(brace + 1);
        nlohmann::json result = last.empty() ? nlohmann::json() : nlohmann::json::parse(last, nullptr, false);
        if (!result.is_object()) {
            const int code = WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
            return {{"error", "exit status " + std::to_string(code) + ", no result: " + tail_of(output, 4)}};
        }
        return result;
    } catch (const std::exception& e) {
        return {{"error", std::string("cannot run ") + argv.front() + ": " + e.what()}};
    }
}

// Fills a peer_result from a peer's JSON (see run_peer_process). ok says S1 was measured; a peer
// whose S1 ran but whose handoff failed stays ok, with the handoff's failure in `error`.
void read_peer_json(const nlohmann::json& j, peer_result& r) {
    for (const char* key : {"error", "s1_error"})
        if (j.contains(key)) r.error = j[key].get<std::string>();
    if (j.contains("s1_us") && j["s1_us"].is_array() && !j["s1_us"].empty()) r.s1 = summarize(j["s1_us"].get<std::vector<double>>());
    if (j.contains("handoff_us") && j["handoff_us"].is_array() && !j["handoff_us"].empty())
        r.handoff = summarize(j["handoff_us"].get<std::vector<double>>());
    r.ok = !r.s1.empty() && r.error.empty();
    if (r.s1.empty() && r.error.empty()) r.error = "the peer returned no samples";
    if (j.contains("handoff_error"))
        r.error += (r.error.empty() ? "" : "; ") + std::string("handoff failed: ") + j["handoff_error"].get<std::string>();
}

// Runs `peer` between two blocks of dlock's S1 on `config` (`cycles` each), so load from elsewhere
// on a shared machine falls on both sides of the ratio alike; dlock_around is both blocks merged.
peer_result peer_with_dlock_around(peer_result r, const std::filesystem::path& config, int cycles,
                                   const std::function<nlohmann::json()>& peer) {
    // A Python peer is also bracketed by dlock's Python package (probes_python.cpp).
    const bool python_peer = r.version.rfind("python3-", 0) == 0;
    std::vector<distribution> python_blocks;
    auto python_block = [&] {
        if (!python_peer || !r.dlock_python_error.empty()) return;
        try {
            python_blocks.push_back(dlock_python_s1(config, cycles, config.parent_path() / "peer-dlock-python-around.log"));
        } catch (const std::exception& e) {
            r.dlock_python_error = e.what();
        }
    };
    try {
        auto client = dlock::client::open(config.string());
        python_block();
        const distribution before = dlock_s1(client, "bench/s8-around", cycles, std::min(cycles, 500));
        const nlohmann::json j = peer();
        const distribution after = dlock_s1(client, "bench/s8-around", cycles, 0);
        python_block();
        r.dlock_around = merged({before, after});
        if (r.dlock_python_error.empty() && !python_blocks.empty()) r.dlock_python_around = merged(python_blocks);
        read_peer_json(j, r);
    } catch (const std::exception& e) {
        r.ok = false;
        r.error = std::string("dlock around the peer failed: ") + e.what();
    }
    return r;
}

// The peers' scripts, and Debian's python (python3 on PATH may be a pyenv one without the modules).
std::string peers_dir() { return DLOCK_BENCH_PEERS_DIR; }
const char* debian_python() { return "/usr/bin/python3"; }

// Peer sizes: S1 cycles and handoffs of one peer run, and the dlock cycles around it.
int peer_cycles(run_size size) { return size == run_size::full ? 5000 : 500; }
int peer_handoffs(run_size size) { return size == run_size::full ? 200 : 20; }

}  // namespace support

namespace {
bool is_redis_family(const std::string& name) { return name == "redis" || name == "redlock"; }
bool is_sql_family(const std::string& name) { return name == "sql_lease" || name == "sql_advisory"; }
bool is_mysql_family(const std::string& name) { return name == "mysql_lease" || name == "mysql_named"; }
}  // namespace

calibration calibrate(const target& t, dlock::lab::lab& lab, run_size size, const floor_interleaver& interleave) {
    if (t.name == "file") return family::calibrate_file(t, size, interleave);
    if (is_redis_family(t.name)) return family::calibrate_redis(t, lab, size, interleave);
    if (t.name == "zookeeper") return family::calibrate_zookeeper(t, lab, size, interleave);
    if (t.name == "etcd") return family::calibrate_etcd(t, lab, size, interleave);
    if (is_sql_family(t.name)) return family::calibrate_sql(t, lab, size, interleave);
    if (is_mysql_family(t.name)) return family::calibrate_mysql(t, lab, size, interleave);
    throw std::invalid_argument("calibrate: unknown target " + t.name);
}

command_count count_server_commands(const target& t, dlock::lab::lab& lab,
                                    const std::function<void(int cycles)>& run_cycles) {
    if (t.name == "file") return family::count_file(run_cycles);
    if (is_redis_family(t.name)) return family::count_redis(t, lab, run_cycles);
    if (t.name == "zookeeper") return family::count_zookeeper(t, lab, run_cycles);
    if (t.name == "etcd") return family::count_etcd(t, lab, run_cycles);
    if (is_sql_family(t.name)) return family::count_sql(t, lab, run_cycles);
    if (is_mysql_family(t.name)) return family::count_mysql(t, lab, run_cycles);
    throw std::invalid_argument("count_server_commands: unknown target " + t.name);
}

int contended_minimum(const target& t, const command_count& counted) {
    // redis: the waiter's acquire script that fails and queues it, the release script that wakes
    //   the next waiter only, the woken waiter's acquire script: 3.
    // redlock: the same on each node: 3 per node (the uncontended minimum is 2 per node: see
    //   count_redis).
    // zookeeper: the waiter's create + children (pipelined) and exists watch on its predecessor,
    //   the holder's delete: 4 requests.
    // etcd: the waiter's acquire Txn, the Watch create on its predecessor and that watch's cancel
    //   (a WatchRequest carries exactly one of create, cancel or progress: a cancel is a message of
    //   its own, and a watch left uncancelled stays on the server), the holder's release Txn, the
    //   woken waiter's one queue read: 5.
    // sql_lease: the waiter's acquire that fails, the release that wakes one waiter, the woken
    //   waiter's acquire: 3. sql_advisory: the waiter's blocking lock statement (the server queues
    //   it), the holder's unlock: 2. mysql_named: the waiter's GET_LOCK (the server queues it),
    //   the holder's release: 2. mysql_lease polls: one failed acquire, the release, the acquire that
    //   wins: 3 at best (each further poll is above the minimum).
    if (t.name == "redis") return 3;
    if (t.name == "redlock") return 3 * std::max(1, counted.minimum / 2);
    if (t.name == "zookeeper") return 4;
    if (t.name == "etcd") return 5;
    if (t.name == "sql_lease") return 3;
    if (t.name == "sql_advisory" || t.name == "mysql_named") return 2;
    if (t.name == "mysql_lease") return 3;
    return 0;
}

namespace {
// The plugin's default pool_size (plugins/sql/sql_plugin.cpp, its `pool_size` option).
constexpr int sql_default_pool_size = 32;
int s3_pool_size(int threads) { return std::max(sql_default_pool_size, threads); }
}  // namespace

std::filesystem::path s3_config(const target& t, int threads) {
    if (!is_sql_family(t.name) && !is_mysql_family(t.name)) return t.config;
    const int pool = s3_pool_size(threads);
    if (pool == sql_default_pool_size) return t.config;
    std::ifstream in(t.config);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) throw std::runtime_error("s3_config: cannot read " + t.config.string());
    std::filesystem::create_directories(t.scratch);
    const std::filesystem::path config = t.scratch / ("s3-" + std::to_string(threads) + "-threads.yaml");
    // Every target's config ends inside its `options:` map (the lab's, and main.cpp's copies).
    std::ofstream out(config);
    out << text.str() << "  pool_size: " << pool << "\n";
    if (!out) throw std::runtime_error("s3_config: cannot write " + config.string());
    return config;
}

int s3_server_connections_per_process(const std::string& name, int threads) {
    const int pool = s3_pool_size(threads);
    if (name == "sql_lease") return 2 * pool + 1;
    if (is_sql_family(name) || is_mysql_family(name)) return pool;
    return 0;
}

namespace {
std::vector<peer_result> family_peers(const target& t, dlock::lab::lab& lab, run_size size) {
    if (t.name == "file") return family::peers_file(t, size);
    if (is_redis_family(t.name)) return family::peers_redis(t, lab, size);
    if (t.name == "zookeeper") return family::peers_zookeeper(t, lab, size);
    if (t.name == "etcd") return family::peers_etcd(t, lab, size);
    if (is_sql_family(t.name)) return family::peers_sql(t, lab, size);
    if (is_mysql_family(t.name)) return family::peers_mysql(t, lab, size);
    throw std::invalid_argument("run_peers: unknown target " + t.name);
}
}  // namespace

std::vector<peer_result> run_peers(const target& t, dlock::lab::lab& lab, run_size size) {
    std::vector<peer_result> out = family_peers(t, lab, size);
    for (auto& p : family::peers_dlock_python(t, size)) out.push_back(std::move(p));
    return out;
}

}  // namespace dlock::bench
