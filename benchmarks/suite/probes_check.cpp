// dlock-probes-check — starts the lab and prints every probe's results (probes.hpp), backend by
// backend: calibration (each operation and the floor), server commands per cycle, Redlock's S7 and
// the peers (S8). The probes' own test, and a quick look at one backend's floor.
//
//   dlock-probes-check [--size quick|full] [--only NAME[,NAME...]] [--skip-peers] [--skip-s7]
//
// NAME is a target: file, redis, redlock, zookeeper, etcd, sql_lease, sql_advisory. Exit status 1
// when a probe threw (peers that fail are results, printed with their error, not failures here).
#include "probes.hpp"

#include <dlock/dlock.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace {

namespace bench = dlock::bench;
namespace lab = dlock::lab;

struct options {
    bench::run_size size = bench::run_size::quick;
    std::set<std::string> only;
    bool peers = true, s7 = true;
};

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--size" && i + 1 < argc) o.size = std::string(argv[++i]) == "full" ? bench::run_size::full : bench::run_size::quick;
        else if (a == "--only" && i + 1 < argc) {
            std::istringstream names(argv[++i]);
            for (std::string n; std::getline(names, n, ',');) o.only.insert(n);
        } else if (a == "--skip-peers") o.peers = false;
        else if (a == "--skip-s7") o.s7 = false;
        else {
            std::fprintf(stderr, "usage: %s [--size quick|full] [--only NAME[,NAME...]] [--skip-peers] [--skip-s7]\n", argv[0]);
            std::exit(2);
        }
    }
    return o;
}

std::string row(const std::string& what, const bench::distribution& d) {
    if (d.empty()) return fmt::format("| {} | — | — | — | 0 |", what);
    return fmt::format("| {} | {:.1f} | {:.1f} | {:.1f} | {} |", what, d.p50, d.p99, d.p999, d.n);
}

// The targets of this lab: the lab's own configs, plus those it does not write (file, sql modes).
std::vector<bench::target> targets(lab::lab& servers, const options& o) {
    std::vector<bench::target> out;
    auto wanted = [&](const std::string& name) { return o.only.empty() || o.only.count(name) > 0; };
    auto add = [&](const std::string& name, const std::filesystem::path& config) {
        const auto scratch = servers.dir() / ("probe-" + name);
        std::filesystem::create_directories(scratch);
        out.push_back({name, config, scratch});
    };
    if (wanted("file")) {
        const auto config = servers.dir() / "probe-file.yaml";
        std::filesystem::create_directories(servers.dir() / "probe-file-locks");
        std::ofstream(config) << "backend: file\noptions:\n  directory: \"" << (servers.dir() / "probe-file-locks").string() << "\"\n";
        add("file", config);
    }
    if (wanted("redis")) add("redis", servers.config_path(lab::backend::redis));
    if (wanted("redlock")) add("redlock", servers.config_path(lab::backend::redlock));
    if (wanted("zookeeper")) add("zookeeper", servers.config_path(lab::backend::zookeeper));
    if (wanted("etcd")) add("etcd", servers.config_path(lab::backend::etcd));
    for (const std::string mode : {"lease", "advisory"}) {
        if (!wanted("sql_" + mode)) continue;
        const auto config = servers.dir() / ("probe-sql-" + mode + ".yaml");
        std::ofstream(config) << "backend: sql\noptions:\n  dsn: \"" << servers.sql().dsn() << "\"\n  mode: " << mode << "\n";
        add("sql_" + mode, config);
    }
    return out;
}

void print_calibration(const bench::calibration& c) {
    std::printf("| operation | p50 µs | p99 µs | p99.9 µs | n |\n|---|---|---|---|---|\n");
    for (const auto& [what, d] : c.operations) std::printf("%s\n", row(what, d).c_str());
    std::printf("%s\n", row(fmt::format("**floor** ({} round trips)", c.min_round_trips), c.floor).c_str());
    std::printf("\nfloor: %s; fsync: %s\n", c.method.c_str(),
                std::isnan(c.fsync_us) ? "none on the write path here" : fmt::format("{:.1f} µs (p50)", c.fsync_us).c_str());
}

void print_peers(const std::vector<bench::peer_result>& peers) {
    if (peers.empty()) {
        std::printf("no peers for this target\n");
        return;
    }
    std::printf("| peer | settings | version | S1 p50 µs | S1 p99 µs | dlock around p50 µs | peer / dlock | handoff p50 µs | status |\n"
                "|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& p : peers) {
        auto num = [](double v) { return std::isnan(v) ? std::string("—") : fmt::format("{:.1f}", v); };
        std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", p.peer.c_str(), p.settings.c_str(), p.version.c_str(),
                    num(p.s1.p50).c_str(), num(p.s1.p99).c_str(), num(p.dlock_around.p50).c_str(),
                    p.s1.empty() || p.dlock_around.empty() ? "—" : fmt::format("{:.2f}×", p.s1.p50 / p.dlock_around.p50).c_str(),
                    p.handoff ? num(p.handoff->p50).c_str() : "—", (p.ok ? (p.error.empty() ? "ok" : "ok; " + p.error) : "FAILED: " + p.error).c_str());
    }
}

}  // namespace

int main(int argc, char** argv) {
    const options o = parse(argc, argv);
    setenv("DLOCK_LOG", "error", 0);
    lab::lab servers;
    std::fprintf(stderr, "%s", servers.startup_report().c_str());
    int failures = 0;
    for (const auto& t : targets(servers, o)) {
        std::printf("\n## %s\n\n", t.name.c_str());
        std::fflush(stdout);
        try {
            print_calibration(bench::calibrate(t, servers, o.size));
            auto client = dlock::client::open(t.config.string());
            const auto count = bench::count_server_commands(t, servers, [&](int cycles) {
                const auto try_once = dlock::acquire_options().with_wait(std::chrono::milliseconds(0));
                for (int i = 0; i < cycles; ++i) client.acquire("bench/count", try_once).release();
            });
            std::printf("\nserver commands per cycle: %s (minimum %d; %s)\n\n",
                        std::isnan(count.per_cycle) ? "n/a" : fmt::format("{:.3f}", count.per_cycle).c_str(), count.minimum,
                        count.source.c_str());
            std::fflush(stdout);
            if (o.peers) print_peers(bench::run_peers(t, servers, o.size));
        } catch (const std::exception& e) {
            ++failures;
            std::printf("PROBE FAILED: %s\n", e.what());
        }
        std::fflush(stdout);
    }
    if (o.s7 && (o.only.empty() || o.only.count("redlock"))) {
        std::printf("\n## S7: redlock against single redis\n\n| nodes | one paused | p50 µs | p99 µs | p99.9 µs | n | status |\n|---|---|---|---|---|---|---|\n");
        try {
            for (const auto& r : bench::run_redlock_s7(servers, o.size, servers.dir() / "probe-s7")) {
                std::printf("| %d%s | %s | %.1f | %.1f | %.1f | %zu | %s |\n", r.nodes, r.nodes == 1 ? " (single redis)" : "",
                            r.one_paused ? "yes" : "no", r.s1.p50, r.s1.p99, r.s1.p999, r.s1.n, r.ok ? "ok" : r.error.c_str());
            }
        } catch (const std::exception& e) {
            ++failures;
            std::printf("S7 FAILED: %s\n", e.what());
        }
    }
    return failures ? 1 : 0;
}
