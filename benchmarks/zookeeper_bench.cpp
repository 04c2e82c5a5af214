// zookeeper_bench — the `zookeeper` backend against its floor and its peers, in one run on one
// ZooKeeper server started by the lab (standalone, loopback):
//
//   floor  create(EPHEMERAL_SEQUENTIAL) + get_children + delete, three round trips through
//          libzookeeper-mt (the C client the plugin uses), calibrated in this run; also `exists`
//   S1     uncontended acquire+release through the C++ API: p50/p99/p99.9, ratio to the floor,
//          server requests per cycle (ZooKeeper `mntr` packets received)
//   S4     ping-pong: two clients (two sessions, one thread each, in this process) pass one lock back
//          and forth; handoff = the release call .. the waiter's acquire returning
//   S3     8 contenders (8 clients) on one name, critical section 0 and 100 us: cycles/s, handoff,
//          Jain's fairness index over the per-client counts
//   herd   100 waiters queued on one name (20 clients x 5 threads): server packets per handoff
//   S8     peers on the same server: python3-kazoo Lock, python3-tooz zookeeper driver, Apache Curator
//          InterProcessMutex (compiled with javac from peers/curator/ into a temporary directory);
//          a peer that fails is reported with its error
//
//   zookeeper_bench [--cycles N] [--quick] [--skip-peers] [--out DIR]
//
// Prints the machine, then one markdown table per scenario and a summary; --out DIR also writes
// DIR/zookeeper.md and DIR/zookeeper.json. Targets are those of docs BENCHMARKS.md.
#ifndef THREADED
#define THREADED  // the C client's synchronous calls (libzookeeper_mt)
#endif
#include <zookeeper/zookeeper.h>

#include "dlock/lab/faults.hpp"
#include "dlock/lab/lab.hpp"

#include <dlock/dlock.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch()).count(); }

struct summary {
    double p50_us = 0, p99_us = 0, p999_us = 0;
    size_t n = 0;
};

summary summarize(std::vector<int64_t> ns) {
    summary s;
    s.n = ns.size();
    if (ns.empty()) return s;
    std::sort(ns.begin(), ns.end());
    auto at = [&](double q) { return double(ns[std::min(ns.size() - 1, size_t(q * double(ns.size())))]) / 1000.0; };
    s.p50_us = at(0.50);
    s.p99_us = at(0.99);
    s.p999_us = at(0.999);
    return s;
}

std::string fixed(double v, int digits = 1) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

// A plain session of the C client, synchronous calls: the floor, and the harness's own reads.
class raw_session {
public:
    explicit raw_session(const std::string& connect) {
        zh_ = zookeeper_init(connect.c_str(), [](zhandle_t*, int, int, const char*, void*) {}, 10000, nullptr, nullptr, 0);
        if (!zh_) throw std::runtime_error("zookeeper_init failed for " + connect);
        zoo_set_servers_resolution_delay(zh_, -1);  // as the plugin does: no name resolution per request
        const auto until = clock_type::now() + 10s;
        while (zoo_state(zh_) != ZOO_CONNECTED_STATE) {
            if (clock_type::now() > until) throw std::runtime_error("no ZooKeeper session with " + connect);
            std::this_thread::sleep_for(5ms);
        }
    }
    ~raw_session() { zookeeper_close(zh_); }
    zhandle_t* handle() const { return zh_; }
    size_t count_children(const std::string& path) {
        String_vector names{};
        if (zoo_get_children(zh_, path.c_str(), 0, &names) != ZOK) return 0;
        const size_t n = size_t(names.count);
        deallocate_String_vector(&names);
        return n;
    }

private:
    zhandle_t* zh_ = nullptr;
};

std::map<std::string, long long> mntr(const dlock::lab::endpoint& server) {
    std::map<std::string, long long> out;
    std::istringstream lines(dlock::lab::zookeeper_four_letter_word(server, "mntr"));
    std::string line;
    while (std::getline(lines, line)) {
        const size_t tab = line.find('\t');
        if (tab == std::string::npos) continue;
        try {
            out[line.substr(0, tab)] = std::stoll(line.substr(tab + 1));
        } catch (...) {
        }
    }
    return out;
}

long long packets_received(const dlock::lab::endpoint& server) { return mntr(server)["zk_packets_received"]; }

// ---- report -------------------------------------------------------------------------------------

struct report {
    std::string markdown;
    std::vector<std::pair<std::string, double>> values;  // for the JSON file

    void line(const std::string& text = "") {
        markdown += text + "\n";
        std::printf("%s\n", text.c_str());
        std::fflush(stdout);
    }
    void value(const std::string& key, double v) { values.emplace_back(key, v); }
};

// ---- scenarios ---------------------------------------------------------------------------------------

// The floor: the recipe's three requests in sequence through the C client's synchronous calls.
class floor_runner {
public:
    explicit floor_runner(const std::string& connect) : zk_(connect) {
        zoo_create(zk_.handle(), "/bench-floor", "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, nullptr, 0);
    }
    void run(int cycles, bool record) {
        for (int i = 0; i < cycles; ++i) {
            char path[256];
            Stat stat{};
            String_vector names{};
            const int64_t t0 = now_ns();
            if (zoo_create2(zk_.handle(), "/bench-floor/_c_0123456789abcdef0123456789abcdef-lock-", "", 0, &ZOO_OPEN_ACL_UNSAFE,
                            ZOO_EPHEMERAL_SEQUENTIAL, path, sizeof path, &stat) != ZOK)
                throw std::runtime_error("floor: create failed");
            const int64_t t1 = now_ns();
            zoo_get_children(zk_.handle(), "/bench-floor", 0, &names);
            const int64_t t2 = now_ns();
            zoo_delete(zk_.handle(), path, -1);
            const int64_t t3 = now_ns();
            deallocate_String_vector(&names);
            zoo_exists(zk_.handle(), "/bench-floor", 0, &stat);
            const int64_t t4 = now_ns();
            if (!record) continue;
            create.push_back(t1 - t0);
            children.push_back(t2 - t1);
            remove.push_back(t3 - t2);
            cycle.push_back(t3 - t0);
            exists.push_back(t4 - t3);
        }
    }
    std::vector<int64_t> create, children, remove, cycle, exists;

private:
    raw_session zk_;
};

// S1: try-once acquire + release of one name through the C++ API.
class s1_runner {
public:
    s1_runner(const std::string& config, dlock::lab::endpoint server) : client_(dlock::client::open(config)), server_(std::move(server)) {}
    // Runs `cycles`; returns their latencies and adds the server's received packets to `packets`.
    std::vector<int64_t> run(int cycles) {
        const auto try_once = dlock::acquire_options().with_wait(0ms);
        std::vector<int64_t> samples;
        samples.reserve(size_t(cycles));
        const long long before = packets_received(server_);
        for (int i = 0; i < cycles; ++i) {
            const int64_t t0 = now_ns();
            auto lease = client_.acquire("bench/s1", try_once);
            lease.release();
            samples.push_back(now_ns() - t0);
            benchmark::DoNotOptimize(lease);
        }
        packets += packets_received(server_) - before;
        counted += cycles;
        return samples;
    }
    long long packets = 0, counted = 0;

private:
    dlock::client client_;
    dlock::lab::endpoint server_;
};

// Two clients pass the lock back and forth. The holder releases only once the other is queued
// (its node is listed), so every measured interval is a real handoff: the release's delete, the
// watch notification, the waiter's listing.
summary ping_pong(const std::string& config, const std::string& connect, int rounds) {
    raw_session observer(connect);
    const std::string lock_node = "/dlock/bench%2Fs4";
    std::atomic<int64_t> released_at{0};
    std::atomic<int> finished{0};
    std::vector<int64_t> handoffs[2];
    auto player = [&](int me) {
        auto client = dlock::client::open(config);
        for (int i = 0; i < rounds; ++i) {
            auto lease = client.acquire("bench/s4", dlock::acquire_options().with_wait(dlock::forever));
            const int64_t got = now_ns();
            const int64_t released = released_at.exchange(0);
            if (released) handoffs[me].push_back(got - released);
            bool queued = false;
            while (finished.load() == 0 && !(queued = observer.count_children(lock_node) >= 2)) {
            }
            if (queued) released_at = now_ns();
            lease.release();
        }
        ++finished;
    };
    std::thread a(player, 0), b(player, 1);
    a.join();
    b.join();
    handoffs[0].insert(handoffs[0].end(), handoffs[1].begin(), handoffs[1].end());
    return summarize(handoffs[0]);
}

struct contention_result {
    double cycles_per_s = 0, jain = 0;
    summary handoff;
    std::vector<long long> counts;
};

contention_result contention(const std::string& config, int contenders, std::chrono::microseconds critical_section,
                             std::chrono::milliseconds duration) {
    std::vector<dlock::client> clients;
    for (int i = 0; i < contenders; ++i) clients.push_back(dlock::client::open(config));
    const std::string name = "bench/s3-" + std::to_string(critical_section.count());
    std::atomic<bool> stop{false};
    std::atomic<int64_t> released_at{0};
    std::vector<long long> counts(size_t(contenders), 0);
    std::vector<std::vector<int64_t>> handoffs(static_cast<size_t>(contenders));
    std::vector<std::thread> threads;
    const int64_t started = now_ns();
    for (int i = 0; i < contenders; ++i) {
        threads.emplace_back([&, i] {
            while (!stop.load()) {
                std::error_code ec;
                auto lease = clients[size_t(i)].acquire(name, dlock::acquire_options().with_wait(2s), ec);
                if (ec) continue;
                const int64_t got = now_ns();
                const int64_t released = released_at.exchange(0);
                if (released) handoffs[size_t(i)].push_back(got - released);
                ++counts[size_t(i)];
                const auto busy_until = clock_type::now() + critical_section;
                while (clock_type::now() < busy_until) {
                }
                released_at = now_ns();
                lease.release();
            }
        });
    }
    std::this_thread::sleep_for(duration);
    stop = true;
    for (auto& t : threads) t.join();
    const double seconds = double(now_ns() - started) / 1e9;
    contention_result r;
    double sum = 0, squares = 0;
    for (long long c : counts) {
        sum += double(c);
        squares += double(c) * double(c);
    }
    r.cycles_per_s = sum / seconds;
    r.jain = squares > 0 ? sum * sum / (double(contenders) * squares) : 0;
    std::vector<int64_t> all;
    for (auto& h : handoffs) all.insert(all.end(), h.begin(), h.end());
    r.handoff = summarize(all);
    r.counts = counts;
    return r;
}

struct herd_result {
    double received_per_handoff = 0, sent_per_handoff = 0, chain_ms = 0;
};

herd_result herd(const std::string& config, const std::string& connect, const dlock::lab::endpoint& server) {
    constexpr int clients = 20, threads_per_client = 5, waiters = clients * threads_per_client;
    raw_session observer(connect);
    auto holder_client = dlock::client::open(config);
    auto holder = holder_client.acquire("bench/herd", dlock::acquire_options().with_wait(0ms));
    std::vector<dlock::client> pool;
    for (int i = 0; i < clients; ++i) pool.push_back(dlock::client::open(config));
    std::vector<std::thread> threads;
    for (int i = 0; i < waiters; ++i)
        threads.emplace_back([&, i] {
            pool[size_t(i % clients)].acquire("bench/herd", dlock::acquire_options().with_wait(60s)).release();
        });
    const auto until = clock_type::now() + 30s;
    while (observer.count_children("/dlock/bench%2Fherd") < size_t(waiters) + 1 && clock_type::now() < until)
        std::this_thread::sleep_for(20ms);
    std::this_thread::sleep_for(100ms);
    const auto before = mntr(server);
    const int64_t t0 = now_ns();
    holder.release();
    for (auto& t : threads) t.join();
    const int64_t t1 = now_ns();
    auto after = mntr(server);
    herd_result r;
    r.received_per_handoff = double(after["zk_packets_received"] - before.at("zk_packets_received")) / waiters;
    r.sent_per_handoff = double(after["zk_packets_sent"] - before.at("zk_packets_sent")) / waiters;
    r.chain_ms = double(t1 - t0) / 1e6;
    return r;
}

// ---- peers ------------------------------------------------------------------------------------------

struct peer_result {
    std::string name;
    bool ok = false;
    summary latency;
    summary dlock_around;  // dlock's S1 measured right before and right after this peer
    std::string version, error;
};

// The last `lines` non-empty lines of a peer's output, on one line (for the report's table).
std::string tail_of(const std::string& text, size_t lines = 4) {
    std::vector<std::string> all;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) all.push_back(line);
    std::string out;
    for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += (out.empty() ? "" : " / ") + all[i];
    std::replace(out.begin(), out.end(), '|', '/');  // keep the markdown table intact
    return out;
}

// Runs a peer driver to completion (at most `timeout`) and parses its "RESULT k=v ..." line.
peer_result run_peer(const std::string& name, const std::vector<std::string>& argv, const fs::path& scratch,
                     std::chrono::seconds timeout) {
    peer_result r;
    r.name = name;
    const fs::path log = scratch / (name + ".log");
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
            r.error = "did not finish within " + std::to_string(timeout.count()) + " s: " + tail_of(output);
            return r;
        }
        const size_t at = output.find("RESULT ");
        if (*status != 0 || at == std::string::npos) {
            r.error = "exit status " + std::to_string(WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status)) + ": " +
                      tail_of(output);
            return r;
        }
        std::istringstream fields(output.substr(at + 7, output.find('\n', at) - at - 7));
        std::string field;
        while (fields >> field) {
            const size_t eq = field.find('=');
            const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
            if (key == "p50_us") r.latency.p50_us = std::stod(value);
            else if (key == "p99_us") r.latency.p99_us = std::stod(value);
            else if (key == "p999_us") r.latency.p999_us = std::stod(value);
            else if (key == "cycles") r.latency.n = size_t(std::stoul(value));
            else if (key == "version") r.version = value;
        }
        r.ok = r.latency.p50_us > 0;
        if (!r.ok) r.error = "no latency in its output: " + tail_of(output);
    } catch (const std::exception& e) {
        r.error = e.what();
    }
    return r;
}

// The version of a Debian jar, from its versioned name in /usr/share/java (curator-recipes-5.4.0.jar).
std::string jar_version(const std::string& jar) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/usr/share/java", ec)) {
        const std::string file = entry.path().filename().string();
        const std::string prefix = jar + "-";
        if (file.rfind(prefix, 0) == 0 && file.size() > prefix.size() + 4 && file.compare(file.size() - 4, 4, ".jar") == 0 &&
            std::isdigit(static_cast<unsigned char>(file[prefix.size()])))
            return file.substr(prefix.size(), file.size() - prefix.size() - 4);
    }
    return "unknown";
}

// Each peer runs twice, between three blocks of dlock's S1 on the same server, so that load from
// elsewhere on a shared machine falls on both sides of a ratio alike. The peer keeps its better run
// (the benefit of the doubt); dlock's figure is the median of its three blocks.
std::vector<peer_result> run_peers(const std::string& server, int cycles, const fs::path& scratch, s1_runner& dlock_s1) {
    const std::string peers = DLOCK_BENCH_PEERS_DIR;
    const std::string count = std::to_string(cycles), warmup = std::to_string(std::max(100, cycles / 10));
    std::vector<peer_result> out;
    auto around = [&](const std::function<peer_result()>& run) {
        std::vector<int64_t> samples;
        std::vector<double> block_p50;
        auto dlock_block = [&] {
            const auto block = dlock_s1.run(cycles);
            block_p50.push_back(summarize(block).p50_us);
            samples.insert(samples.end(), block.begin(), block.end());
        };
        dlock_block();
        const peer_result first = run();
        dlock_block();
        const peer_result second = run();
        dlock_block();
        peer_result r = second.ok && (!first.ok || second.latency.p50_us < first.latency.p50_us) ? second : first;
        r.dlock_around = summarize(samples);
        std::sort(block_p50.begin(), block_p50.end());
        r.dlock_around.p50_us = block_p50[1];
        out.push_back(r);
    };
    around([&] { return run_peer("kazoo", {"/usr/bin/python3", peers + "/zookeeper_kazoo.py", server, count, warmup}, scratch, 300s); });
    around([&] { return run_peer("tooz", {"/usr/bin/python3", peers + "/zookeeper_tooz.py", server, count, warmup}, scratch, 300s); });

    // Curator: compiled now, against the Debian jars, into the scratch directory.
    std::string classpath;
    for (const char* jar : {"curator-client", "curator-framework", "curator-recipes", "zookeeper", "zookeeper-jute", "guava",
                            "slf4j-api", "slf4j-nop"})
        classpath += std::string(classpath.empty() ? "" : ":") + "/usr/share/java/" + jar + ".jar";
    const fs::path classes = scratch / "curator-classes";
    fs::create_directories(classes);
    std::string javac_output;
    const int javac = dlock::lab::run_command(
        {"javac", "-d", classes.string(), "-cp", classpath, peers + "/curator/CuratorBench.java"}, &javac_output);
    if (javac != 0) {
        peer_result failed;
        failed.name = "curator";
        failed.error = "javac failed (status " + std::to_string(javac) + "): " + tail_of(javac_output);
        out.push_back(failed);
    } else {
        // Curator is faster than the Python peers; JIT warm-up needs more untimed cycles.
        around([&] {
            return run_peer("curator",
                            {"java", "-cp", classes.string() + ":" + classpath, "CuratorBench", server, std::to_string(cycles * 2),
                             std::to_string(std::max(2000, cycles))},
                            scratch, 300s);
        });
        if (out.back().ok && out.back().version.find("unknown") != std::string::npos)
            out.back().version = "curator-" + jar_version("curator-recipes");
    }
    return out;
}

// ---- machine ------------------------------------------------------------------------------------------

std::string first_line_with(const std::string& path, const std::string& key) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(key, 0) == 0) return line.substr(line.find(':') + 1);
    return "";
}

std::string command_output(const std::vector<std::string>& argv) {
    std::string out;
    dlock::lab::run_command(argv, &out);
    const size_t nl = out.find('\n');
    return out.substr(0, nl);
}

void print_machine(report& rep, const dlock::lab::endpoint& server) {
    utsname u{};
    uname(&u);
    std::string cpu = first_line_with("/proc/cpuinfo", "model name");
    cpu.erase(0, cpu.find_first_not_of(' '));
    std::string zk_version;
    {
        std::istringstream srvr(dlock::lab::zookeeper_four_letter_word(server, "srvr"));
        std::getline(srvr, zk_version);
    }
    rep.line("# zookeeper backend benchmark");
    rep.line();
    rep.line("| machine | |");
    rep.line("|---|---|");
    rep.line("| cores | " + std::to_string(std::thread::hardware_concurrency()) + " (" + cpu + ") |");
    rep.line(std::string("| kernel | ") + u.sysname + " " + u.release + " |");
    rep.line("| server | " + zk_version + ", standalone, tickTime 200 ms, loopback |");
    rep.line(std::string("| client library | libzookeeper-mt ") + ZOO_VERSION + " |");
    rep.line("| java | " + command_output({"java", "-version"}) + " |");
    rep.line("| python | " + command_output({"/usr/bin/python3", "--version"}) + " |");
    rep.line();
}

}  // namespace

int main(int argc, char** argv) {
    int cycles = 10000;
    bool skip_peers = false;
    std::string out_dir;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--cycles" && i + 1 < argc) cycles = std::max(100, std::atoi(argv[++i]));
        else if (arg == "--quick") cycles = 1000;
        else if (arg == "--skip-peers") skip_peers = true;
        else if (arg == "--out" && i + 1 < argc) out_dir = argv[++i];
        else {
            std::fprintf(stderr, "usage: %s [--cycles N] [--quick] [--skip-peers] [--out DIR]\n", argv[0]);
            return 2;
        }
    }
    zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);  // the harness's own sessions: no connection chatter
    try {
        dlock::lab::lab lab({dlock::lab::backend::zookeeper});
        const dlock::lab::endpoint server = lab.zookeeper().client_endpoint();
        const std::string connect = server.to_string();
        const std::string config = lab.config_path(dlock::lab::backend::zookeeper).string();
        report rep;
        print_machine(rep, server);

        // Floor and S1 alternate in blocks, so that load from elsewhere on a shared machine falls on
        // both alike; their ratio is what the run reports.
        floor_runner floor_run(connect);
        s1_runner s1_run(config, server);
        floor_run.run(cycles / 10, false);
        s1_run.run(cycles / 5);
        std::vector<int64_t> s1_samples;
        constexpr int blocks = 10;
        for (int b = 0; b < blocks; ++b) {
            floor_run.run(cycles / blocks, true);
            const auto block = s1_run.run(cycles / blocks);
            s1_samples.insert(s1_samples.end(), block.begin(), block.end());
        }
        const summary floor_cycle = summarize(floor_run.cycle);
        const summary floor_create = summarize(floor_run.create), floor_children = summarize(floor_run.children),
                      floor_remove = summarize(floor_run.remove), floor_exists = summarize(floor_run.exists);
        rep.line("## Floor: create + get_children + delete through libzookeeper-mt (synchronous calls)");
        rep.line();
        rep.line("| request | p50 us | p99 us |");
        rep.line("|---|---|---|");
        rep.line("| create (ephemeral sequential) | " + fixed(floor_create.p50_us) + " | " + fixed(floor_create.p99_us) + " |");
        rep.line("| get_children | " + fixed(floor_children.p50_us) + " | " + fixed(floor_children.p99_us) + " |");
        rep.line("| delete | " + fixed(floor_remove.p50_us) + " | " + fixed(floor_remove.p99_us) + " |");
        rep.line("| exists | " + fixed(floor_exists.p50_us) + " | " + fixed(floor_exists.p99_us) + " |");
        rep.line("| **floor: the three in sequence** | **" + fixed(floor_cycle.p50_us) + "** | **" + fixed(floor_cycle.p99_us) + "** |");
        rep.line();
        rep.value("floor_p50_us", floor_cycle.p50_us);
        rep.value("floor_p99_us", floor_cycle.p99_us);

        const summary s1 = summarize(s1_samples);
        const double requests_per_cycle = double(s1_run.packets) / double(s1_run.counted);
        const double s1_ratio = s1.p50_us / floor_cycle.p50_us;
        const double s1_ratio99 = s1.p99_us / floor_cycle.p99_us;
        rep.line("## S1: uncontended acquire+release (" + std::to_string(s1.n) + " cycles after warm-up, one client, in " +
                 std::to_string(blocks) + " blocks alternating with the floor's)");
        rep.line();
        rep.line("| p50 us | p99 us | p99.9 us | p50 / floor p50 (target <= 1.10) | p99 / floor p99 (target <= 1.5) | server requests per cycle (min 3) |");
        rep.line("|---|---|---|---|---|---|");
        rep.line("| " + fixed(s1.p50_us) + " | " + fixed(s1.p99_us) + " | " + fixed(s1.p999_us) + " | " + fixed(s1_ratio, 2) + " | " +
                 fixed(s1_ratio99, 2) + " | " + fixed(requests_per_cycle, 2) + " |");
        rep.line();
        rep.line("The create and the listing are pipelined (one session runs its requests in order), so a cycle");
        rep.line("takes two round trips for the floor's three requests.");
        rep.line();
        rep.value("s1_p50_us", s1.p50_us);
        rep.value("s1_p99_us", s1.p99_us);
        rep.value("s1_p999_us", s1.p999_us);
        rep.value("s1_ratio_p50", s1_ratio);
        rep.value("s1_requests_per_cycle", requests_per_cycle);

        const summary s4 = ping_pong(config, connect, std::max(200, cycles / 20));
        rep.line("## S4: ping-pong handoff between two clients (two sessions, one thread each, one process)");
        rep.line();
        rep.line("| handoffs | p50 us | p99 us | target p50 |");
        rep.line("|---|---|---|---|");
        rep.line("| " + std::to_string(s4.n) + " | " + fixed(s4.p50_us) + " | " + fixed(s4.p99_us) + " | < 1000 |");
        rep.line();
        rep.line("A handoff is the release's delete and the watch notification to the next waiter: about");
        rep.line("one delete of the floor (" + fixed(floor_remove.p50_us) + " us): a waiter that was second in the queue holds the lock");
        rep.line("when its predecessor's deletion is notified, without listing again.");
        rep.line();
        rep.value("s4_handoff_p50_us", s4.p50_us);
        rep.value("s4_handoff_p99_us", s4.p99_us);

        rep.line("## S3: 8 contenders on one name (8 clients), 2 s each");
        rep.line();
        rep.line("| critical section | cycles/s | handoff p50 us | handoff p99 us | Jain (target >= 0.99) | per-client counts |");
        rep.line("|---|---|---|---|---|---|");
        double jain_min = 1.0;
        for (auto cs : {0us, 100us}) {
            const contention_result c = contention(config, 8, cs, 2s);
            std::string counts;
            for (long long n : c.counts) counts += (counts.empty() ? "" : " ") + std::to_string(n);
            rep.line("| " + std::to_string(cs.count()) + " us | " + fixed(c.cycles_per_s, 0) + " | " + fixed(c.handoff.p50_us) + " | " +
                     fixed(c.handoff.p99_us) + " | " + fixed(c.jain, 4) + " | " + counts + " |");
            rep.value("s3_cs" + std::to_string(cs.count()) + "_jain", c.jain);
            rep.value("s3_cs" + std::to_string(cs.count()) + "_handoff_p50_us", c.handoff.p50_us);
            jain_min = std::min(jain_min, c.jain);
        }
        rep.line();

        const herd_result h = herd(config, connect, server);
        rep.line("## Herd detector: 100 waiters on one name (20 clients x 5 threads), the lock passed down the queue");
        rep.line();
        rep.line("| packets received by the server per handoff | packets sent per handoff | 100 handoffs took |");
        rep.line("|---|---|---|");
        rep.line("| " + fixed(h.received_per_handoff, 2) + " | " + fixed(h.sent_per_handoff, 2) + " | " + fixed(h.chain_ms) + " ms |");
        rep.line();
        rep.line("O(1): the release's delete, at most one listing by the next waiter, one notification (a herd would");
        rep.line("cost a listing by every waiter on every release).");
        rep.line();
        rep.value("herd_received_per_handoff", h.received_per_handoff);
        rep.value("herd_sent_per_handoff", h.sent_per_handoff);

        std::vector<peer_result> peers;
        if (!skip_peers) {
            char pattern[] = "/tmp/dlock-zk-bench-XXXXXX";
            const char* made = mkdtemp(pattern);
            if (!made) throw std::runtime_error("mkdtemp failed");
            const fs::path scratch = made;
            peers = run_peers(connect, std::max(1000, cycles / 5), scratch, s1_run);
            fs::remove_all(scratch);
            rep.line("## S8: peers on the same server, uncontended acquire+release");
            rep.line();
            rep.line("Their default settings: each waits on a watch of its predecessor, none has a polling interval or");
            rep.line("retry sleep to tune, so default and tuned are the same. Each peer ran twice, between three blocks of");
            rep.line("dlock's S1 (" + std::to_string(std::max(1000, cycles / 5)) + " cycles each); its better run is compared with the median of dlock's blocks.");
            rep.line();
            rep.line("| peer | version | p50 us | p99 us | dlock p50 around it us (median of 3 blocks) | dlock faster by (peer p50 / dlock p50) |");
            rep.line("|---|---|---|---|---|---|");
            for (const auto& p : peers) {
                if (p.ok) {
                    const double ratio = p.latency.p50_us / p.dlock_around.p50_us;
                    rep.line("| " + p.name + " | " + p.version + " | " + fixed(p.latency.p50_us) + " | " + fixed(p.latency.p99_us) + " | " +
                             fixed(p.dlock_around.p50_us) + " | " + fixed(ratio, 2) + "x |");
                    rep.value("peer_" + p.name + "_p50_us", p.latency.p50_us);
                    rep.value("peer_" + p.name + "_dlock_around_p50_us", p.dlock_around.p50_us);
                    rep.value("peer_" + p.name + "_ratio", ratio);
                } else {
                    rep.line("| " + p.name + " | - | FAILED | - | - | " + p.error + " |");
                }
            }
            rep.line();
        }

        rep.line("## Summary");
        rep.line();
        rep.line("| target | measured | verdict |");
        rep.line("|---|---|---|");
        auto verdict = [](bool ok) { return ok ? "met" : "MISSED"; };
        rep.line("| S1 p50 <= 1.10 x floor | " + fixed(s1_ratio, 2) + " x (" + fixed(s1.p50_us) + " us vs " + fixed(floor_cycle.p50_us) +
                 " us) | " + verdict(s1_ratio <= 1.10) + " |");
        rep.line("| S1 p99 <= 1.5 x floor p99 | " + fixed(s1_ratio99, 2) + " x | " + verdict(s1_ratio99 <= 1.5) + " |");
        rep.line("| requests per cycle = 3 | " + fixed(requests_per_cycle, 2) + " | " + verdict(requests_per_cycle < 3.1) + " |");
        rep.line("| S4 handoff p50 < 1 ms | " + fixed(s4.p50_us) + " us | " + verdict(s4.p50_us < 1000) + " |");
        rep.line("| Jain >= 0.99 with 8 contenders | " + fixed(jain_min, 4) + " (worst of both critical sections) | " + verdict(jain_min >= 0.99) + " |");
        rep.line("| O(1) server requests per handoff (100 waiters) | " + fixed(h.received_per_handoff, 2) + " | " +
                 verdict(h.received_per_handoff <= 4) + " |");
        for (const auto& p : peers)
            rep.line("| faster than " + p.name + " | " +
                     (p.ok ? fixed(p.latency.p50_us / p.dlock_around.p50_us, 2) + " x" : "peer failed: " + p.error) + " | " +
                     (p.ok ? verdict(p.latency.p50_us > p.dlock_around.p50_us) : "n/a") + " |");

        if (!out_dir.empty()) {
            fs::create_directories(out_dir);
            std::ofstream(fs::path(out_dir) / "zookeeper.md") << rep.markdown;
            std::ofstream json(fs::path(out_dir) / "zookeeper.json");
            json << "{\n";
            for (size_t i = 0; i < rep.values.size(); ++i)
                json << "  \"" << rep.values[i].first << "\": " << fixed(rep.values[i].second, 3) << (i + 1 < rep.values.size() ? ",\n" : "\n");
            json << "}\n";
            std::printf("\nwrote %s/zookeeper.md and zookeeper.json\n", out_dir.c_str());
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "zookeeper_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
