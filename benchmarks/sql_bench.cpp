// sql backend benchmark: both modes against their floor and against python3-tooz's postgresql driver,
// on one PostgreSQL 15 the lab starts for this run.
//
//   sql_bench [--cycles N] [--only-s1 | --only-s3] [--report DIR] [--json FILE]
//
// Floor (calibrated in this run, alternating cycle by cycle with the dlock measurement so machine
// drift hits both alike): the two prepared statements one acquire+release cycle needs, executed through
// the plugin's own libpqxx session code (same connection settings, same execution path) on a scratch
// table with the plugin's own SQL text (sql_statements.hpp):
//   lease:    `acquire` (INSERT … ON CONFLICT … WHERE expired RETURNING fence) + `release`
//             (UPDATE … owner = NULL + pg_notify);
//   advisory: `try_lock` (pg_try_advisory_lock + fence upsert) + `unlock` (pg_advisory_unlock).
// Not `SELECT 1` ×2: that is printed for reference, but an acquire must write a row (the fence) and
// commit it, which costs the server more than a round trip; the floor is what the algorithm cannot
// avoid, so the ratio shows what dlock's layers (C ABI, core, plugin, pool) add.
//
// Scenarios: S1 uncontended acquire+release (try-once, ≥ 10 000 cycles after warm-up); server
// statements per cycle (pg_stat_statements, enabled by a restart after the timed scenarios); S4
// ping-pong handoff between two clients (separate connections and LISTEN connections) in two threads
// of this process; S3 eight clients contending for one name, Jain's index over their counts; peer
// python3-tooz on the same server.
#include "sql_common.hpp"
#include "sql_statements.hpp"

#include <dlock/dlock.hpp>

#include "dlock/lab/lab.hpp"

#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <sys/utsname.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch()).count(); }

// CPU time of the whole process (every thread: the caller, dlock's keeper, listener, monitor).
int64_t cpu_ns() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

struct summary {
    size_t n = 0;
    double p50_us = 0, p99_us = 0, p999_us = 0;
};

summary summarize(std::vector<int64_t> ns) {
    summary s;
    s.n = ns.size();
    if (ns.empty()) return s;
    std::sort(ns.begin(), ns.end());
    auto at = [&](double q) { return ns[std::min(ns.size() - 1, size_t(q * double(ns.size())))] / 1000.0; };
    s.p50_us = at(0.50);
    s.p99_us = at(0.99);
    s.p999_us = at(0.999);
    return s;
}

std::string shell_output(const std::string& command) {
    std::string out;
    if (FILE* p = popen(command.c_str(), "r")) {
        char buffer[4096];
        while (size_t n = fread(buffer, 1, sizeof buffer, p)) out.append(buffer, n);
        pclose(p);
    }
    return out;
}

// The two statements of a cycle through the plugin's own session (libpqxx connection with dlock's
// connection settings, the same prepared statements, the same autocommit execution path), on scratch
// tables that have the plugin's DDL. What dlock adds on top — C ABI, core, plugin entry points, pool,
// monitor — is what the ratio shows.
class floor_client {
public:
    floor_client(const std::string& dsn, const std::string& mode) : mode_(mode) {
        dlock::sql::settings settings;
        settings.dsn = dsn;
        settings.mode = mode == "lease" ? dlock::sql::lock_mode::lease : dlock::sql::lock_mode::advisory;
        dlock::sql::resolve(settings);
        dlock::sql::statements sql{"bench_floor", "bench_floor_advisory", "bench_floor_schema"};
        auto statements = mode == "lease" ? sql.lease() : sql.advisory();
        statements.emplace_back("select1", "SELECT 1");
        session_ = std::make_unique<dlock::sql::session>(settings, statements);
        pqxx::nontransaction tx(session_->connection());
        for (const auto& create : sql.tables()) tx.exec(create);
        tx.commit();
    }
    void cycle() {
        if (mode_ == "lease") {
            session_->run("acquire", std::string("bench/floor"), owner_, int64_t(30000), std::string("bench"), 0, int64_t(50), int64_t(0));
            session_->run("release", std::string("bench/floor"), owner_, std::string("dlock_floor"));
        } else {
            session_->run("try_lock", int64_t(42), std::string("bench/floor"), owner_, std::string("bench"));
            session_->run("unlock", int64_t(42));
        }
    }
    void select1_twice() {
        session_->run("select1");
        session_->run("select1");
    }

private:
    std::unique_ptr<dlock::sql::session> session_;
    std::string mode_;
    std::string owner_ = "0123456789abcdef0123456789abcdef";
};

std::string yaml(const std::string& dsn, const std::string& mode) {
    return "backend: sql\noptions:\n  dsn: \"" + dsn + "\"\n  mode: " + mode + "\n";
}

struct s1_result {
    summary dlock, floor, select1;
    double dlock_cpu_us = 0, floor_cpu_us = 0;  // client CPU per cycle, mean
    double paired_ratio = 0;  // median over cycles of dlock time / the floor time measured just before
};

// S1: uncontended try-once acquire + release, alternating with the floor.
s1_result run_s1(const std::string& dsn, const std::string& mode, int cycles) {
    floor_client floor(dsn, mode);
    auto client = dlock::client::from_yaml(yaml(dsn, mode), "sql_bench");
    const auto options = dlock::acquire_options().with_wait(0ms).with_renew(false);
    const std::string name = "bench/s1";
    auto dlock_cycle = [&] {
        dlock::lease lease = client.acquire(name, options);
        lease.release();
    };
    for (int i = 0; i < 1000; ++i) {  // warm-up: connections, prepared statements, caches
        dlock_cycle();
        floor.cycle();
        floor.select1_twice();
    }
    // Cycle by cycle alternation: load from other processes on the machine hits floor and dlock alike.
    std::vector<int64_t> d, f, s;
    int64_t dlock_cpu = 0, floor_cpu = 0;
    for (int i = 0; i < cycles; ++i) {
        int64_t c0 = cpu_ns(), t0 = now_ns();
        floor.cycle();
        f.push_back(now_ns() - t0);
        int64_t c1 = cpu_ns();
        floor_cpu += c1 - c0;
        t0 = now_ns();
        dlock_cycle();
        d.push_back(now_ns() - t0);
        dlock_cpu += cpu_ns() - c1;
        if (i % 4 == 0) {
            t0 = now_ns();
            floor.select1_twice();
            s.push_back(now_ns() - t0);
        }
    }
    std::vector<double> ratios;
    for (size_t i = 0; i < d.size(); ++i) ratios.push_back(double(d[i]) / double(f[i]));
    std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
    return {summarize(d), summarize(f), summarize(s), dlock_cpu / 1000.0 / cycles, floor_cpu / 1000.0 / cycles,
            ratios[ratios.size() / 2]};
}

// Server statements per acquire+release, counted by pg_stat_statements (which the benchmark turns on
// after the timed scenarios: it costs every statement a little): a warm client runs `cycles`
// between a reset and a read of the counters.
double statements_per_cycle(const std::string& dsn, const std::string& mode, dlock::lab::postgres_client& admin) {
    auto client = dlock::client::from_yaml(yaml(dsn, mode), "sql_bench");
    const auto options = dlock::acquire_options().with_wait(0ms).with_renew(false);
    for (int i = 0; i < 10; ++i) client.acquire("bench/count", options).release();  // PREPAREs happen here
    const int cycles = 1000;
    admin.execute("SELECT pg_stat_statements_reset()");
    for (int i = 0; i < cycles; ++i) client.acquire("bench/count", options).release();
    const auto calls = admin.query_value(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'");
    return std::stod(calls.value_or("0")) / cycles;
}

// S4: two clients pass one lock back and forth; handoff = the waiter's acquire returning minus the
// holder's release being invoked. The waiter is already queued (or listening) when the holder
// releases: the holder waits until the other thread announced its acquire, plus 2 ms.
summary run_s4(const std::string& dsn, const std::string& mode, int handoffs) {
    auto a = dlock::client::from_yaml(yaml(dsn, mode), "sql_bench");
    auto b = dlock::client::from_yaml(yaml(dsn, mode), "sql_bench");
    std::mutex m;
    std::condition_variable cv;
    std::atomic<int64_t> released_at{0};
    int waiting = -1;       // which thread announced it is about to wait
    uint64_t acquired = 0;  // acquisitions so far: a releaser waits for the other's before it competes again
    std::vector<int64_t> samples;
    const std::string name = "bench/s4";
    auto player = [&](dlock::client& c, int me, bool start_holding) {
        dlock::lease lease;
        if (start_holding) lease = c.acquire(name, dlock::acquire_options().with_wait(0ms));
        for (int round = 0; round < handoffs; ++round) {
            if (!lease) {
                {
                    std::lock_guard<std::mutex> lock(m);
                    waiting = me;
                }
                cv.notify_all();
                lease = c.acquire(name, dlock::acquire_options().with_wait(dlock::forever));
                const int64_t t = now_ns();
                {
                    std::lock_guard<std::mutex> lock(m);
                    samples.push_back(t - released_at.load());
                    ++acquired;
                }
                cv.notify_all();
            } else {
                {
                    std::unique_lock<std::mutex> lock(m);
                    cv.wait(lock, [&] { return waiting == 1 - me; });
                    waiting = -1;
                }
                std::this_thread::sleep_for(2ms);  // the other is in its wait by now
                uint64_t before;
                {
                    std::lock_guard<std::mutex> lock(m);
                    before = acquired;
                }
                released_at = now_ns();
                lease.release();
                lease = dlock::lease();
                std::unique_lock<std::mutex> lock(m);
                cv.wait(lock, [&] { return acquired > before; });  // strict alternation: no barging
            }
        }
        if (lease) lease.release();
    };
    std::thread ta(player, std::ref(a), 0, true);
    std::this_thread::sleep_for(50ms);
    std::thread tb(player, std::ref(b), 1, false);
    ta.join();
    tb.join();
    return summarize(samples);
}

struct s3_result {
    double jain = 0, cycles_per_s = 0;
    std::vector<uint64_t> counts;
};

// S3: eight clients, one name, critical section 0, `think` outside the lock between acquisitions.
s3_result run_s3(const std::string& dsn, const std::string& mode, std::chrono::milliseconds duration,
                 std::chrono::microseconds think) {
    constexpr int contenders = 8;
    std::vector<dlock::client> clients;
    for (int i = 0; i < contenders; ++i) clients.push_back(dlock::client::from_yaml(yaml(dsn, mode), "sql_bench"));
    std::vector<uint64_t> counts(contenders, 0);
    std::atomic<bool> go{false}, stop{false};
    std::vector<std::thread> threads;
    for (int i = 0; i < contenders; ++i) {
        threads.emplace_back([&, i] {
            while (!go) std::this_thread::yield();
            while (!stop) {
                std::error_code ec;
                auto lease = clients[i].acquire("bench/s3", dlock::acquire_options().with_wait(500ms).with_renew(false), ec);
                if (ec) continue;
                lease.release();
                ++counts[i];
                if (think.count()) std::this_thread::sleep_for(think);
            }
        });
    }
    go = true;
    std::this_thread::sleep_for(duration);
    stop = true;
    for (auto& t : threads) t.join();
    s3_result r;
    r.counts = counts;
    double sum = 0, squares = 0;
    for (uint64_t c : counts) {
        sum += double(c);
        squares += double(c) * double(c);
    }
    r.jain = squares > 0 ? sum * sum / (contenders * squares) : 0;
    r.cycles_per_s = sum / std::chrono::duration<double>(duration).count();
    return r;
}

// Reads `"key": value` from one flat JSON line of the peer.
std::string json_field(const std::string& line, const std::string& key) {
    const std::string needle = "\"" + key + "\": ";
    const size_t at = line.find(needle);
    if (at == std::string::npos) return "";
    size_t start = at + needle.size(), end;
    if (line[start] == '"') {
        end = line.find('"', start + 1);
        return line.substr(start + 1, end - start - 1);
    }
    end = line.find_first_of(",}", start);
    return line.substr(start, end - start);
}

}  // namespace

int main(int argc, char** argv) {
    int cycles = 10000;
    bool only_s1 = false, only_s3 = false;
    std::string report_dir, json_path;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--only-s1")) only_s1 = true;
        else if (!std::strcmp(argv[i], "--only-s3")) only_s3 = true;
        if (!std::strcmp(argv[i], "--cycles") && i + 1 < argc) cycles = std::atoi(argv[++i]);
        else if (!std::strcmp(argv[i], "--report") && i + 1 < argc) report_dir = argv[++i];
        else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    }
    try {
        dlock::lab::lab lab({dlock::lab::backend::sql});
        const std::string dsn = lab.sql().dsn();
        auto admin = lab.sql().client();
        utsname u{};
        uname(&u);
        std::ostringstream out;
        out << "# sql backend benchmark\n\nmachine: " << std::thread::hardware_concurrency() << " cores, Linux " << u.release
            << "; server: " << admin.query_value("SELECT version()").value_or("?") << "; libpqxx " << PQXX_VERSION << "\n\n";
        std::cout << out.str() << std::flush;

        struct mode_results {
            s1_result s1;
            double statements = 0;
            summary s4;
            s3_result s3, s3_think;
        };
        std::map<std::string, mode_results> results;
        for (const std::string mode : {"lease", "advisory"}) {
            auto& r = results[mode];
            if (only_s3) {
                r.s3 = run_s3(dsn, mode, 3s, 0us);
                r.s3_think = run_s3(dsn, mode, 3s, 1000us);
                continue;
            }
            std::cout << "[" << mode << "] S1 (" << cycles << " cycles)...\n" << std::flush;
            r.s1 = run_s1(dsn, mode, cycles);
            if (only_s1) continue;
            std::cout << "[" << mode << "] S4 handoff...\n" << std::flush;
            r.s4 = run_s4(dsn, mode, 1000);
            std::cout << "[" << mode << "] S3 8 contenders...\n" << std::flush;
            r.s3 = run_s3(dsn, mode, 3s, 0us);
            r.s3_think = run_s3(dsn, mode, 3s, 1000us);
        }
        if (!only_s1 && !only_s3) {
            std::cout << "[count] restarting the server with pg_stat_statements...\n" << std::flush;
            admin.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'");
            lab.sql().restart(dlock::lab::data_policy::keep);
            admin = lab.sql().client();
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
            for (auto& [mode, r] : results) r.statements = statements_per_cycle(dsn, mode, admin);
        }

        std::cout << "[peer] python3-tooz postgresql...\n" << std::flush;
        const std::string peer_cmd = only_s1 || only_s3 ? std::string("true") : std::string("/usr/bin/python3 ") + DLOCK_BENCH_PEERS_DIR + "/sql_tooz.py '" + dsn + "' 2000 2>" +
                                     (lab.dir() / "tooz.err").string();
        const std::string peer_output = shell_output(peer_cmd);
        std::vector<std::string> peer_lines;
        std::istringstream lines(peer_output);
        for (std::string line; std::getline(lines, line);)
            if (!line.empty()) peer_lines.push_back(line);
        if (peer_lines.empty())
            peer_lines.push_back("{\"peer\": \"tooz-postgresql\", \"variant\": \"-\", \"error\": \"no output: " +
                                 dlock::lab::file_tail(lab.dir() / "tooz.err", 3) + "\"}");

        char line[512];
        auto row = [&](const char* fmt, auto... args) {
            std::snprintf(line, sizeof line, fmt, args...);
            out << line;
        };
        out << "## S1 uncontended acquire+release (try-once), " << cycles << " cycles per mode after 1000 warm-up\n\n";
        out << "| mode | dlock p50 | dlock p99 | dlock p99.9 | floor p50 | floor p99 | p50 ratio (target <= 1.10) | "
               "paired median ratio | p99 ratio (target <= 1.5) | client CPU / cycle: dlock, floor | SELECT 1 x2 p50 | "
               "server statements / cycle (min 2) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        for (const auto& [mode, r] : results)
            row("| %s | %.1f us | %.1f us | %.1f us | %.1f us | %.1f us | %.2f | %.2f | %.2f | %.1f us, %.1f us | %.1f us | %.2f |\n",
                mode.c_str(), r.s1.dlock.p50_us, r.s1.dlock.p99_us, r.s1.dlock.p999_us, r.s1.floor.p50_us, r.s1.floor.p99_us,
                r.s1.dlock.p50_us / r.s1.floor.p50_us, r.s1.paired_ratio, r.s1.dlock.p99_us / r.s1.floor.p99_us,
                r.s1.dlock_cpu_us, r.s1.floor_cpu_us, r.s1.select1.p50_us, r.statements);
        out << "\n## S4 handoff between two clients (two threads, separate connections), 1000 handoffs\n\n"
               "| mode | p50 | p99 | target p50 |\n|---|---|---|---|\n";
        for (const auto& [mode, r] : results)
            row("| %s | %.1f us | %.1f us | < 1000 us |\n", mode.c_str(), r.s4.p50_us, r.s4.p99_us);
        out << "\n## S3 eight clients on one name, critical section 0, 3 s\n\n"
               "| mode | think time between acquisitions | cycles/s | Jain (target >= 0.95) | per-client counts |\n|---|---|---|---|---|\n";
        for (const auto& [mode, r] : results) {
            for (const auto* s : {&r.s3, &r.s3_think}) {
                std::string counts;
                for (uint64_t c : s->counts) counts += (counts.empty() ? "" : " ") + std::to_string(c);
                row("| %s | %s | %.0f | %.3f | %s |\n", mode.c_str(), s == &r.s3 ? "0" : "1 ms", s->cycles_per_s, s->jain, counts.c_str());
            }
        }
        out << "\n## Peer: python3-tooz postgresql driver, same server, uncontended acquire+release\n\n"
               "| peer | variant | p50 | p99 | dlock lease p50 / peer p50 | dlock advisory p50 / peer p50 |\n|---|---|---|---|---|---|\n";
        for (const auto& l : peer_lines) {
            const std::string error = json_field(l, "error");
            if (!error.empty()) {
                row("| %s | %s | FAILED: %s | | | |\n", json_field(l, "peer").c_str(), json_field(l, "variant").c_str(), error.c_str());
                continue;
            }
            const double p50 = std::atof(json_field(l, "p50_us").c_str()), p99 = std::atof(json_field(l, "p99_us").c_str());
            row("| %s | %s | %.1f us | %.1f us | %.3f (%.1fx faster) | %.3f (%.1fx faster) |\n", json_field(l, "peer").c_str(),
                json_field(l, "variant").c_str(), p50, p99, results["lease"].s1.dlock.p50_us / p50,
                p50 / results["lease"].s1.dlock.p50_us, results["advisory"].s1.dlock.p50_us / p50,
                p50 / results["advisory"].s1.dlock.p50_us);
        }
        std::cout << "\n" << out.str().substr(out.str().find("## S1")) << std::flush;
        if (!json_path.empty()) {
            nlohmann::json j;
            auto put = [](const summary& s) { return nlohmann::json{{"n", s.n}, {"p50_us", s.p50_us}, {"p99_us", s.p99_us}, {"p999_us", s.p999_us}}; };
            for (const auto& [mode, r] : results) {
                j[mode] = {{"s1", put(r.s1.dlock)}, {"floor", put(r.s1.floor)}, {"select1_x2", put(r.s1.select1)},
                           {"s1_p50_ratio", r.s1.dlock.p50_us / r.s1.floor.p50_us}, {"s1_paired_median_ratio", r.s1.paired_ratio}, {"client_cpu_us", r.s1.dlock_cpu_us},
                           {"floor_client_cpu_us", r.s1.floor_cpu_us}, {"statements_per_cycle", r.statements},
                           {"s4_handoff", put(r.s4)}, {"s3_jain", r.s3.jain}, {"s3_jain_think_1ms", r.s3_think.jain},
                           {"s3_cycles_per_s", r.s3.cycles_per_s}, {"s3_counts", r.s3.counts}};
            }
            for (const auto& l : peer_lines) j["peers"].push_back(nlohmann::json::parse(l, nullptr, false));
            std::ofstream(json_path) << j.dump(2) << "\n";
        }
        if (!report_dir.empty()) {
            std::filesystem::create_directories(report_dir);
            std::ofstream(std::filesystem::path(report_dir) / "sql_bench.md") << out.str();
            std::cout << "\nreport written to " << (std::filesystem::path(report_dir) / "sql_bench.md").string() << "\n";
        }
    } catch (const std::exception& e) {
        std::cerr << "sql_bench: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
