// main.cpp — dlock-compare: the cross-backend comparison of docs/design/benchmarks.md in one run. It starts one
// lab for the backends asked for, then per target (file, redis, redlock, zookeeper, etcd, sql_lease,
// sql_advisory) calibrates the floor, runs S1–S6, counts server commands, runs Redlock's S7 and the
// peers (S8), and writes report.md / report.json / plots into a folder it names at the end.
//
// usage: dlock-compare [--quick | --full] [--backends a,b] [--out DIR] [--skip-peers] [--s3-waiters 2,128,1000]
//                      [--baseline REPORT.md]   (default: docs/benchmarks.md, for the "no regression" targets)
//                      [--placement same|across|none]   (CPUs of the client and the servers during S1, its floor, peers)
//
// A scenario that fails is recorded with its error in the report and the run goes on; the exit
// status is 0 when the report was written (targets missed do not fail the run), 1 otherwise.
#include "baseline.hpp"
#include "modes.hpp"
#include "placement.hpp"
#include "probes.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "scenarios.hpp"

#include <dlock/dlock.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

namespace {

namespace fs = std::filesystem;
namespace lab = dlock::lab;
using namespace dlock::bench;
using nlohmann::json;

const std::vector<std::string> all_targets = {"file", "redis", "redlock", "zookeeper", "etcd", "sql_lease", "sql_advisory",
                                              "mysql_lease", "mysql_named"};

struct options {
    bool full = false;
    std::vector<std::string> targets = all_targets;
    fs::path out;
    bool skip_peers = false;
    std::vector<int> s3_waiters;  // overrides the size's S3 points when given
    fs::path baseline;            // the report whose figures this run must not fall behind
    fs::path worker;
    placement_mode placement = placement_mode::same_cpu;
    std::string command_line;
};

std::string utc_now(const char* format) {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char text[64];
    std::strftime(text, sizeof text, format, &tm);
    return text;
}

// The lab backend a target's servers come from (none for file).
std::optional<lab::backend> lab_backend_of(const std::string& target) {
    if (target == "redis") return lab::backend::redis;
    if (target == "redlock") return lab::backend::redlock;
    if (target == "zookeeper") return lab::backend::zookeeper;
    if (target == "etcd") return lab::backend::etcd;
    if (target == "sql_lease" || target == "sql_advisory") return lab::backend::sql;
    if (target == "mysql_lease" || target == "mysql_named") return lab::backend::mariadb;
    return std::nullopt;
}

// The dlock config of a target: the lab's own for most; a directory in the scratch space for file;
// the lab's sql config with `mode: advisory` for sql_advisory.
fs::path write_target_config(const std::string& name, lab::lab& the_lab, const fs::path& scratch) {
    fs::create_directories(scratch);
    if (name == "file") {
        const fs::path config = scratch / "file.yaml";
        std::ofstream(config) << "backend: file\noptions:\n  directory: \"" << (scratch / "locks").string() << "\"\n";
        return config;
    }
    const fs::path lab_config = the_lab.config_path(*lab_backend_of(name));
    if (name != "sql_advisory" && name != "mysql_named") return lab_config;
    std::ifstream in(lab_config);
    std::stringstream text;
    text << in.rdbuf();
    const fs::path config = scratch / (name + ".yaml");
    // The lab's config ends inside `options:`.
    std::ofstream(config) << text.str() << (name == "mysql_named" ? "  mode: named\n" : "  mode: advisory\n");
    return config;
}

json capability_names(uint64_t caps) {
    const std::vector<std::pair<uint64_t, const char*>> names = {
        {DLOCK_CAP_FENCING, "FENCING"}, {DLOCK_CAP_FAIR, "FAIR"}, {DLOCK_CAP_PUSH_WAIT, "PUSH_WAIT"}, {DLOCK_CAP_TTL, "TTL"},
        {DLOCK_CAP_SESSION_BOUND, "SESSION_BOUND"}, {DLOCK_CAP_QUORUM, "QUORUM"}, {DLOCK_CAP_REENTRANT, "REENTRANT"}};
    json out = json::array();
    for (const auto& [bit, name] : names)
        if (caps & bit) out.push_back(name);
    return out;
}

// Runs one scenario; an exception becomes the scenario's error in the report (and a note on screen).
template <class F>
void attempt(json& target_report, const std::string& scenario, progress_display& progress, F&& body) {
    try {
        body();
    } catch (const std::exception& e) {
        target_report["errors"][scenario] = e.what();
        progress.note(fmt::format("  {} {}: failed: {}", target_report.value("name", ""), scenario, e.what()));
    }
}

int steps_per_target(const scenario_sizes& s, bool peers) {
    return 3 /* calibrate, S1, count */ + static_cast<int>(s.s2_clients.size() + s.s3_waiters.size() * s.s3_critical_us.size() +
                                                           s.s5_leases.size()) + 2 /* S4, S6 */ + (peers ? 1 : 0) +
           3 /* the modes: S1 permit, S1 shared, the permits contention point */;
}

// The semaphore and shared-lock points (modes.hpp) of one target, into target_report["modes"]:
// S1 of a permit and of a shared hold beside the floor and the exclusive S1 of this run, the
// contention point of 4 permits and 32 contenders, and (zookeeper, with peers) kazoo's Semaphore,
// ReadLock and WriteLock. A target without the capability gets the reason instead of a figure.
void run_modes(json& tr, const scenario_context& ctx, uint64_t caps, bool full, bool peers, dlock::lab::lab& lab,
               progress_display& progress, const std::function<void(const std::string&)>& step,
               const std::function<std::unique_ptr<placement_guard>()>& pin,
               const std::function<void(std::unique_ptr<placement_guard>&)>& unpin) {
    constexpr int kPermits = 4, kContenders = 32;
    const int cycles = full ? 10000 : 500;
    json modes = json::object();
    auto p50_at = [&](const json::json_pointer& where) {
        return tr.contains(where) && tr[where].is_number() ? tr[where].get<double>() : NAN;
    };
    const double floor_p50 = p50_at(json::json_pointer("/calibration/floor/p50_us"));
    const double lock_p50 = p50_at(json::json_pointer("/s1/latency/p50_us"));
    auto s1_point = [&](const char* key, uint64_t cap, const char* cap_name, uint32_t permits, bool shared) {
        step(fmt::format("S1 {} ({} cycles)", key, cycles));
        if (!(caps & cap)) {
            modes[key] = json{{"skipped", fmt::format("no {} capability", cap_name)}};
            return;
        }
        attempt(tr, std::string("S1 ") + key, progress, [&] {
            auto pinned = pin();  // placed like the exclusive S1 and the floor it is compared with
            const auto d = run_s1_mode(ctx.t, permits, shared, cycles);
            unpin(pinned);
            modes[key] = json{{"latency", to_json(d)}, {"cycles", cycles}, {"floor_p50_us", floor_p50},
                              {"ratio_to_floor", d.p50 / floor_p50}, {"ratio_to_lock_s1", d.p50 / lock_p50}};
            if (permits) modes[key]["permits"] = permits;
        });
    };
    s1_point("permit", DLOCK_CAP_SEMAPHORE, "SEMAPHORE", kPermits, false);
    s1_point("shared", DLOCK_CAP_SHARED, "SHARED", 0, true);
    step(fmt::format("S3 {} permits, {} contenders", kPermits, kContenders));
    if (!(caps & DLOCK_CAP_SEMAPHORE)) {
        modes["permits_contention"] = json{{"skipped", "no SEMAPHORE capability"}};
    } else {
        attempt(tr, "S3 permits", progress, [&] {
            const auto p = run_permits_contention(ctx, kPermits, kContenders, 0, full ? std::chrono::milliseconds(4000) : std::chrono::milliseconds(1000));
            modes["permits_contention"] = json{{"permits", p.permits}, {"contenders", p.contenders}, {"critical_us", p.critical_us},
                                               {"cycles_per_s", p.cycles_per_s}, {"handoff", to_json(p.handoff)},
                                               {"reacquired_by_releaser", p.reacquired_by_releaser}, {"jain", p.jain},
                                               {"cycles", p.cycles}, {"release_failures", p.release_failures}};
        });
    }
    if (peers && ctx.t.name == "zookeeper") {
        attempt(tr, "kazoo modes", progress, [&] {
            const auto k = run_kazoo_modes(lab.zookeeper().client_endpoint().to_string(), kPermits, full ? 2000 : 300,
                                           ctx.t.scratch / "peer-kazoo-modes.log");
            auto part = [](const distribution& d, const std::string& error) {
                return error.empty() ? json{{"latency", to_json(d)}} : json{{"error", error}};
            };
            modes["kazoo"] = json{{"version", k.version}, {"semaphore", part(k.semaphore, k.semaphore_error)},
                                  {"read", part(k.read, k.read_error)}, {"write", part(k.write, k.write_error)}};
        });
    }
    tr["modes"] = modes;
}

// Returns a stream to the console's stderr for the progress display, and sends the process's own
// fd 2 — where the client libraries log (dlock's warnings, the ZooKeeper C client's INFO lines) —
// to `log`, so that their lines neither garble the display nor get lost.
std::FILE* console_and_log(const fs::path& log) {
    std::FILE* console = ::fdopen(::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0), "w");
    if (!console) return stderr;
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        ::dup2(fd, STDERR_FILENO);
        ::close(fd);
    }
    return console;
}

// Ctrl-C (SIGINT), SIGTERM, SIGHUP: the lab is torn down (servers killed, its directory removed)
// before the process exits with 128 + signal; the workers die with the process (PR_SET_PDEATHSIG).
// The handler only writes the signal number to a pipe; a watcher thread does the rest.
class interrupt_guard {
public:
    explicit interrupt_guard(std::FILE* console) : console_(console) {
        if (::pipe2(pipe_, O_CLOEXEC) != 0) return;
        write_end_ = pipe_[1];
        struct sigaction action {};
        action.sa_handler = [](int signal) {
            const unsigned char number = static_cast<unsigned char>(signal);
            [[maybe_unused]] const auto ignored = ::write(write_end_, &number, 1);
        };
        for (int signal : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(signal, &action, nullptr);
        std::thread([this] { watch(); }).detach();
    }
    void protect(lab::lab* the_lab) { lab_.store(the_lab); }

private:
    void watch() {
        unsigned char number = 0;
        if (::read(pipe_[0], &number, 1) != 1) return;
        std::fprintf(console_, "\ndlock-compare: interrupted (signal %d): stopping the lab\n", number);
        std::fflush(console_);
        if (lab::lab* the_lab = lab_.load()) the_lab->teardown();
        ::_exit(128 + number);
    }

    static inline int write_end_ = -1;
    int pipe_[2] = {-1, -1};
    std::FILE* console_;
    std::atomic<lab::lab*> lab_{nullptr};
};

options parse_options(int argc, char** argv) {
    options o;
    CLI::App app{"dlock-compare: every dlock backend against its floor and its peers, in one run, one report"};
    bool quick = false;
    std::string backends;
    std::string out;
    std::string worker;
    app.add_flag("--quick", quick, "quick size (the default): fewer cycles and points, a few minutes");
    app.add_flag("--full", o.full, "docs/design/benchmarks.md's sizes");
    app.add_option("--backends", backends, "comma-separated targets (default: all): " + fmt::format("{}", fmt::join(all_targets, ",")));
    app.add_option("--out", out, "report folder (default: a fresh ./dlock-report-<UTC time>)");
    app.add_flag("--skip-peers", o.skip_peers, "do not run the peers (S8)");
    app.add_option("--s3-waiters", o.s3_waiters, "S3's waiter counts instead of the size's (e.g. 2,128,1000)")
        ->delimiter(',')
        ->check(CLI::Range(1, 100000));
    std::string baseline = (fs::path(DLOCK_SUITE_DIR) / ".." / ".." / "docs" / "benchmarks.md").lexically_normal().string();
    app.add_option("--baseline", baseline, "the report.md whose S1/floor, S2 and peer ratios this run must not fall behind")
        ->capture_default_str();
    std::string placement = placement_name(o.placement);
    app.add_option("--placement", placement,
                   "CPU placement during S1, its floor, the modes' S1 and the peers: same (client and servers on one CPU), "
                   "across (on two), none (the scheduler's choice)")
        ->check(CLI::IsMember({"same", "across", "none"}))
        ->capture_default_str();
    app.add_option("--worker", worker, "the dlock-bench-worker executable (default: next to dlock-compare)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        std::exit(app.exit(e));
    }
    if (quick && o.full) {
        std::cerr << "dlock-compare: --quick and --full exclude each other\n";
        std::exit(2);
    }
    if (!backends.empty()) {
        o.targets.clear();
        std::stringstream list(backends);
        for (std::string name; std::getline(list, name, ',');) {
            if (std::find(all_targets.begin(), all_targets.end(), name) == all_targets.end()) {
                std::cerr << "dlock-compare: unknown backend `" << name << "` (known: " << fmt::format("{}", fmt::join(all_targets, ",")) << ")\n";
                std::exit(2);
            }
            o.targets.push_back(name);
        }
    }
    o.out = out.empty() ? fs::absolute("dlock-report-" + utc_now("%Y%m%d-%H%M%S")) : fs::absolute(out);
    o.baseline = baseline;
    o.placement = *parse_placement(placement);
    o.worker = worker.empty() ? fs::canonical("/proc/self/exe").parent_path() / "dlock-bench-worker" : fs::absolute(worker);
    for (int i = 0; i < argc; ++i) o.command_line += (i ? " " : "") + std::string(argv[i]);
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    ::signal(SIGPIPE, SIG_IGN);  // a worker that died must be an error on write, not the driver's death
    const options opt = parse_options(argc, argv);
    const run_size size = opt.full ? run_size::full : run_size::quick;
    scenario_sizes sizes = sizes_for(size);
    if (!opt.s3_waiters.empty()) sizes.s3_waiters = opt.s3_waiters;
    if (!fs::exists(opt.worker)) {
        std::cerr << "dlock-compare: worker executable not found: " << opt.worker << "\n";
        return 1;
    }
    fs::create_directories(opt.out);
    const fs::path scratch_root = opt.out / "scratch";
    const fs::path worker_log = opt.out / "workers.log";
    std::FILE* console = console_and_log(opt.out / "driver.log");

    json report{{"size", opt.full ? "full" : "quick"}, {"started_utc", utc_now("%Y-%m-%d %H:%M:%S UTC")}, {"command", opt.command_line},
                {"machine", machine_info()}, {"servers", server_versions()}, {"targets", json::array()}};
    json samples = json::object();
    report["baseline"] = read_baseline(opt.baseline);

    std::set<lab::backend> needed;
    for (const auto& t : opt.targets)
        if (auto b = lab_backend_of(t)) needed.insert(*b);
    const bool run_s7 = std::find(opt.targets.begin(), opt.targets.end(), "redlock") != opt.targets.end();
    const int total = static_cast<int>(opt.targets.size()) * steps_per_target(sizes, !opt.skip_peers) + (run_s7 ? 1 : 0) + 3;
    progress_display progress(total, console);
    static interrupt_guard interrupts(console);

    progress.step("lab", "starting servers");
    lab::lab_options lab_opts;
    lab_opts.throw_on_failure = false;
    // S2 and S3 at full size open 64–128 clients, each with its pool and listener: 600 seats them.
    // S3 beyond that (1 000 waiters: 25 processes × 40 threads) needs what its workers' pools
    // (s3_config) can open, plus room for the driver's own clients and probes.
    int postgres_seats = 600, mariadb_seats = 600;
    for (int waiters : sizes.s3_waiters) {
        const s3_layout l = s3_layout_for(waiters);
        constexpr int driver_headroom = 100;
        postgres_seats = std::max({postgres_seats, l.processes * s3_server_connections_per_process("sql_lease", l.threads) + driver_headroom,
                                   l.processes * s3_server_connections_per_process("sql_advisory", l.threads) + driver_headroom});
        mariadb_seats = std::max({mariadb_seats, l.processes * s3_server_connections_per_process("mysql_lease", l.threads) + driver_headroom,
                                  l.processes * s3_server_connections_per_process("mysql_named", l.threads) + driver_headroom});
    }
    lab_opts.sql.max_connections = postgres_seats;
    lab_opts.mariadb.max_connections = mariadb_seats;
    report["lab_max_connections"] = json{{"postgresql", postgres_seats}, {"mariadb", mariadb_seats}};
    // A waiter at S3's 1 000-waiter points waits longer than PostgreSQL's default deadlock_timeout
    // (1 s); each such waiter then runs the deadlock check, whose cost grows with the square of the
    // sessions queued on the lock and which holds every lock-manager partition while it runs
    // (measured: half the server's CPU, statements stalled over 5 s). docs/backends/sql.md says a
    // server that queues this many sessions on one name needs the same setting.
    lab_opts.sql.deadlock_timeout_ms = 60000;
    report["lab_postgresql_deadlock_timeout_ms"] = lab_opts.sql.deadlock_timeout_ms;
    std::unique_ptr<lab::lab> the_lab;
    try {
        the_lab = std::make_unique<lab::lab>(std::vector<lab::backend>(needed.begin(), needed.end()), lab_opts);
    } catch (const std::exception& e) {
        progress.note(std::string("dlock-compare: the lab did not start: ") + e.what());
        return 1;
    }
    interrupts.protect(the_lab.get());
    for (const auto& [backend, why] : the_lab->failures()) report["lab_failures"][std::string(lab::backend_name(backend))] = why;

    // S1, its floor, the modes' S1 and the peers run with the CPUs of the client and of the target's
    // servers fixed (placement.hpp), so that each, on its own connection, meets the same round-trip
    // cost every run; S2–S6 run as the scheduler places them.
    std::optional<cpu_plan> plan;
    {
        cpu_set_t allowed;
        CPU_ZERO(&allowed);
        if (::sched_getaffinity(0, sizeof allowed, &allowed) == 0) plan = plan_for(opt.placement, allowed);
        report["placement"] = json{{"mode", plan ? placement_name(opt.placement) : "none"}};
        if (plan) {
            report["placement"]["client_cpu"] = plan->client_cpu;
            report["placement"]["server_cpu"] = plan->server_cpu;
        } else if (opt.placement != placement_mode::unpinned) {
            report["placement"]["why"] = fmt::format("--placement {} needs more CPUs than this process may use", placement_name(opt.placement));
        }
    }

    const auto measuring_started = std::chrono::steady_clock::now();
    for (const std::string& name : opt.targets) {
        json tr{{"name", name}};
        const auto lb = lab_backend_of(name);
        if (lb && !the_lab->has(*lb)) {
            tr["errors"]["lab"] = "server did not start: " + the_lab->failure(*lb);
            progress.note("  " + name + ": skipped, its server did not start");
            for (int i = 0; i < steps_per_target(sizes, !opt.skip_peers); ++i) progress.step(name, "skipped");
            report["targets"].push_back(tr);
            continue;
        }
        target t{name, {}, scratch_root / name};
        uint64_t caps = 0;
        try {
            t.config = write_target_config(name, *the_lab, t.scratch);
            caps = dlock::client::open(t.config.string()).capabilities();
        } catch (const std::exception& e) {
            tr["errors"]["open"] = e.what();
            progress.note("  " + name + ": cannot open a client: " + e.what());
            for (int i = 0; i < steps_per_target(sizes, !opt.skip_peers); ++i) progress.step(name, "skipped");
            report["targets"].push_back(tr);
            continue;
        }
        tr["config"] = t.config.string();
        tr["capabilities"] = capability_names(caps);
        const scenario_context ctx{t, the_lab.get(), opt.worker, worker_log};
        auto step = [&](const std::string& what) { progress.step(name, what); };
        // The client and this target's servers on the plan's CPUs while the guard lives; null when
        // the run or this target is not placed (placed_servers says which are).
        const std::vector<pid_t> servers = plan ? placed_servers(name, *the_lab) : std::vector<pid_t>{};
        tr["placement"] = servers.empty() ? json{{"mode", "none"}} : report["placement"];
        auto pin = [&]() -> std::unique_ptr<placement_guard> {
            return servers.empty() ? nullptr : std::make_unique<placement_guard>(*plan, servers);
        };
        auto unpin = [&](std::unique_ptr<placement_guard>& guard) {
            if (!guard) return;
            guard->restore();
            for (const auto& problem : guard->problems()) tr["placement"]["problems"].push_back(problem);
            guard.reset();
        };

        // The floor and S1 are measured in interleaved blocks (a floor block, then an S1 block, ...),
        // so that a stall of the machine or the server falls on both: calibrate() hands its floor
        // cycle to run_s1. Should S1 fail, the floor is measured on its own.
        step("calibrate (floor)");
        auto pinned = pin();
        const int blocks = s1_blocks(sizes.s1_cycles);
        std::optional<s1_result> s1;
        std::string s1_error;
        attempt(tr, "calibration", progress, [&] {
            const calibration c = calibrate(t, *the_lab, size, [&](const std::function<void()>& floor_cycle) {
                step(fmt::format("S1 {} cycles, interleaved with the floor in {} blocks", sizes.s1_cycles, blocks));
                try {
                    s1 = run_s1(t, sizes.s1_cycles, opt.out / ("s1_" + name + ".json"), floor_cycle, blocks);
                    return s1->floor;
                } catch (const std::exception& e) {
                    s1_error = e.what();
                }
                std::vector<double> alone;
                for (int i = 0; i < sizes.s1_cycles; ++i) {
                    const auto t0 = std::chrono::steady_clock::now();
                    floor_cycle();
                    alone.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
                }
                return summarize(std::move(alone));
            });
            tr["calibration"] = to_json(c);
            if (s1) tr["calibration"]["floor_blocks"] = floor_blocks_json(*s1);
        });
        if (!s1 && s1_error.empty()) {  // the calibration failed before S1 ran: S1 alone
            step(fmt::format("S1 {} cycles (no floor)", sizes.s1_cycles));
            attempt(tr, "S1", progress, [&] { s1 = run_s1(t, sizes.s1_cycles, opt.out / ("s1_" + name + ".json")); });
        }
        unpin(pinned);
        if (!s1_error.empty()) {
            tr["errors"]["S1"] = s1_error;
            progress.note(fmt::format("  {} S1: failed: {}", name, s1_error));
        }
        if (s1) {
            tr["s1"] = json{{"latency", to_json(s1->latency)}, {"benchmark_json", s1->benchmark_json.filename().string()}};
            samples["s1"][name] = s1->latency.us;
        }
        run_modes(tr, ctx, caps, opt.full, !opt.skip_peers, *the_lab, progress, step, pin, unpin);
        step("server commands per cycle");
        attempt(tr, "commands", progress, [&] { tr["commands"] = to_json(count_uncontended(t, *the_lab)); });
        attempt(tr, "S2", progress, [&] {
            tr["s2"] = json::array();
            for (const auto& p : run_s2(ctx, sizes, step))
                tr["s2"].push_back(json{{"clients", p.clients}, {"cycles_per_s", p.cycles_per_s}, {"cpu_us_per_cycle", p.cpu_us_per_cycle}, {"cycles", p.cycles},
                                        {"release_failures", p.release_failures}});
        });
        attempt(tr, "S3", progress, [&] {
            tr["s3"] = json::array();
            for (const auto& p : run_s3(ctx, sizes, step)) {
                tr["s3"].push_back(json{{"waiters", p.waiters}, {"processes", p.processes}, {"threads", p.threads}, {"critical_us", p.critical_us}, {"cycles_per_s", p.cycles_per_s},
                                        {"handoff", to_json(p.handoff)}, {"reacquired_by_releaser", p.reacquired_by_releaser}, {"jain", p.jain}, {"jain_rounds", p.jain_rounds}, {"jain_window", p.jain_window}, {"ops_per_handoff", to_json(p.ops_per_handoff)},
                                        {"cycles", p.cycles}, {"release_failures", p.release_failures}});
                if (!p.error.empty()) {
                    tr["s3"].back()["error"] = p.error;
                    tr["errors"][fmt::format("S3 {} waiters, cs {} us", p.waiters, p.critical_us)] = p.error;
                }
            }
        });
        step(fmt::format("S4 ping-pong, {} handoffs", sizes.s4_handoffs));
        attempt(tr, "S4", progress, [&] { tr["s4"] = json{{"handoff", to_json(run_s4(ctx, sizes.s4_handoffs))}}; });
        if (caps & DLOCK_CAP_TTL) {
            attempt(tr, "S5", progress, [&] {
                tr["s5"] = json::array();
                for (const auto& p : run_s5(ctx, sizes, step))
                    tr["s5"].push_back(json{{"leases", p.leases}, {"acquired", p.acquired}, {"held_after_window", p.held_after_window},
                                            {"window_s", p.window_s}, {"cpu_percent_of_core", p.cpu_percent_of_core},
                                            {"server_commands_per_s", p.server_commands_per_s}, {"server_count_source", p.server_count_source},
                                            {"acquire_s", p.acquire_s}, {"ttl_ms", sizes.s5_ttl.count()}});
            });
        } else {
            tr["s5_skipped"] = "no ttl (no DLOCK_CAP_TTL): nothing to renew";
            for (std::size_t i = 0; i < sizes.s5_leases.size(); ++i) step("S5 skipped (no ttl)");
        }
        step("S6 holder SIGKILLed");
        attempt(tr, "S6", progress, [&] {
            const auto r = run_s6(ctx, sizes.s6_ttl);
            tr["s6"] = json{{"recovery_ms", r.recovery_ms}, {"granted_ttl_ms", r.granted_ttl_ms}, {"bound_ms", r.bound_ms},
                            {"allowance_ms", r.allowance_ms}, {"met", r.met}};
        });
        if (name == "redlock") {
            step("S7 redlock N=3/5, one node paused");
            attempt(tr, "S7", progress, [&] {
                report["s7"] = json::array();
                for (const auto& row : run_redlock_s7(*the_lab, size, scratch_root / "s7")) report["s7"].push_back(to_json(row));
            });
        }
        if (!opt.skip_peers) {
            step("S8 peers");
            attempt(tr, "S8", progress, [&] {
                tr["peers"] = json::array();
                // Placed like S1: each peer process (started by this process) and dlock's blocks around it.
                auto pinned_peers = pin();
                const auto results = run_peers(t, *the_lab, size);
                unpin(pinned_peers);
                for (const auto& p : results) tr["peers"].push_back(to_json(p));
            });
        }
        report["targets"].push_back(tr);
    }
    report["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - measuring_started).count();

    progress.step("lab", "stopping servers");
    interrupts.protect(nullptr);
    const auto teardown = the_lab->teardown();
    if (!teardown.survivors.empty()) report["lab_failures"]["teardown"] = fmt::format("{} server process(es) survived teardown", teardown.survivors.size());
    the_lab.reset();

    progress.step("report", "writing report and plots");
    const fs::path plots_script = fs::path(DLOCK_SUITE_DIR) / "plots.py";
    report_files files;
    try {
        files = write_report(report, samples, opt.out, plots_script);
    } catch (const std::exception& e) {
        progress.finish();
        std::fprintf(console, "dlock-compare: writing the report failed: %s\n", e.what());
        return 1;
    }
    progress.finish();
    std::cout << "\n" << files.summary << "\n";
    if (!files.plots_ok) std::cout << "plots: FAILED — " << files.plots_error << "\n";
    std::cout << fmt::format("measuring took {:.0f} s ({} size)\nreport folder: {}\n  {} (summary first), report.json, plots *.svg\n",
                             report.value("wall_s", 0.0), opt.full ? "full" : "quick", opt.out.string(), files.markdown.filename().string());
    return 0;
}
