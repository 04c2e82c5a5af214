// scenarios.cpp — S1 (Google Benchmark) and the multi-process S2–S6 of the comparison suite.
#include "scenarios.hpp"

#include "workers.hpp"

#include <dlock/dlock.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace dlock::bench {

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

double us_between(int64_t from_ns, int64_t to_ns) { return static_cast<double>(to_ns - from_ns) / 1000.0; }

// The numbers of a worker's answer, in order.
std::vector<int64_t> parse_numbers(const std::string& text) {
    std::vector<int64_t> out;
    const char* p = text.c_str();
    char* end = nullptr;
    while (true) {
        const long long v = std::strtoll(p, &end, 10);
        if (end == p) break;
        out.push_back(v);
        p = end;
    }
    return out;
}

// One worker's `cycles` answer.
struct cycles_answer {
    int64_t n = 0, cpu_ns = 0, wall_ns = 0, release_failures = 0;
    struct event {
        int64_t acquired, releasing, thread;
    };
    std::vector<event> events;
};

cycles_answer parse_cycles(const std::string& text) {
    const auto v = parse_numbers(text);
    if (v.size() < 4) throw worker_error("malformed cycles answer");
    cycles_answer a{v[0], v[1], v[2], v[3], {}};
    for (std::size_t i = 4; i + 2 < v.size(); i += 3) a.events.push_back({v[i], v[i + 1], v[i + 2]});
    return a;
}

// Window start a little in the future, so every worker is waiting for it when it comes.
int64_t start_soon() { return monotonic_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(200ms).count(); }

std::chrono::milliseconds answer_timeout(std::chrono::milliseconds window) { return window + 120s; }

}  // namespace

scenario_sizes sizes_for(run_size size) {
    scenario_sizes s;
    if (size == run_size::full) {
        s.s1_cycles = 10000;
        s.s2_clients = {1, 2, 4, 8, 16, 64};
        s.s2_window = 3s;
        s.s3_waiters = {2, 8, 32, 128, 1000};
        s.s3_critical_us = {0, 100, 1000};
        s.s3_window = 4s;
        s.s4_handoffs = 2000;
        s.s5_leases = {1, 100, 10000};
        s.s5_ttl = 3s;
        s.s5_window = 10s;
    } else {
        // The README's main job: every backend, peers included, in about five minutes.
        s.s1_cycles = 2000;
        s.s2_clients = {1, 4, 16};
        s.s2_window = 1s;
        s.s3_waiters = {2, 8, 32};
        s.s3_critical_us = {0};
        s.s3_window = 1s;
        s.s4_handoffs = 200;
        s.s5_leases = {1, 1000};
        s.s5_ttl = 1s;  // etcd's minimum in the lab; a window longer than the ttl proves renewals
        s.s5_window = 1500ms;
    }
    s.s6_ttl = 1s;
    return s;
}

// ---- S1 ----------------------------------------------------------------------------------------

// Short blocks (50 cycles): a server's slow phases (an fsync stall, a compaction) last longer than
// a block, so consecutive floor and S1 blocks see the same phase.
int s1_blocks(int cycles) { return std::clamp(cycles / 50, 1, 200); }

s1_result run_s1(const target& t, int cycles, const std::filesystem::path& json_out, const std::function<void()>& floor_cycle,
                 int blocks) {
    dlock::client client = dlock::client::open(t.config.string());
    const std::string name = "s1/" + t.name;
    if (!floor_cycle) blocks = 1;
    blocks = std::clamp(blocks, 1, std::max(1, cycles));
    std::vector<double> samples, floor_samples;
    samples.reserve(static_cast<std::size_t>(cycles));
    floor_samples.reserve(static_cast<std::size_t>(cycles));
    std::vector<s1_block> block_p50s;
    std::string failure;
    // Block b covers iterations [b * cycles / blocks, (b + 1) * cycles / blocks).
    auto block_start = [&](int b) { return static_cast<int>(static_cast<long long>(b) * cycles / blocks); };
    auto timed = [](const std::function<void()>& cycle, std::vector<double>& into) {
        const auto t0 = clock_type::now();
        cycle();
        into.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
    };
    auto body = [&](benchmark::State& state) {
        try {
            const int warmup = std::max(50, cycles / 10);
            for (int i = 0; i < warmup; ++i) client.acquire(name).release();
            if (floor_cycle)
                for (int i = 0; i < warmup; ++i) floor_cycle();
            int i = 0, b = 0;
            std::size_t block_first = 0, floor_first = 0;
            auto close_block = [&] {
                if (!floor_cycle || b == 0) return;
                const std::vector<double> s(samples.begin() + static_cast<std::ptrdiff_t>(block_first), samples.end());
                const std::vector<double> f(floor_samples.begin() + static_cast<std::ptrdiff_t>(floor_first), floor_samples.end());
                block_p50s.push_back({summarize(f).p50, summarize(s).p50});
            };
            for (auto _ : state) {
                if (floor_cycle && i == block_start(b)) {
                    state.PauseTiming();
                    close_block();
                    block_first = samples.size();
                    floor_first = floor_samples.size();
                    for (int k = block_start(b); k < block_start(b + 1); ++k) timed(floor_cycle, floor_samples);
                    ++b;
                    state.ResumeTiming();
                }
                const auto t0 = clock_type::now();
                dlock::lease lease = client.acquire(name);
                lease.release();
                samples.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
                ++i;
            }
            close_block();
        } catch (const std::exception& e) {
            failure = e.what();
            state.SkipWithError(failure.c_str());
            return;
        }
        const distribution d = summarize(samples);
        state.counters["p50_us"] = d.p50;
        state.counters["p99_us"] = d.p99;
        state.counters["p999_us"] = d.p999;
    };
    benchmark::RegisterBenchmark(("S1_uncontended/" + t.name).c_str(), body)
        ->Iterations(cycles)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    std::ofstream out(json_out);
    std::ostringstream errors;
    benchmark::JSONReporter reporter;
    reporter.SetOutputStream(&out);
    reporter.SetErrorStream(&errors);
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::ClearRegisteredBenchmarks();
    if (!failure.empty()) throw std::runtime_error("S1: " + failure);
    s1_result r;
    r.latency = summarize(std::move(samples));
    if (!floor_samples.empty()) r.floor = summarize(std::move(floor_samples));
    r.blocks = std::move(block_p50s);
    r.benchmark_json = json_out;
    return r;
}

command_count count_uncontended(const target& t, dlock::lab::lab& lab) {
    dlock::client client = dlock::client::open(t.config.string());
    const std::string name = "count/" + t.name;
    client.acquire(name).release();  // first use: scripts loaded, sessions made, before counting
    return count_server_commands(t, lab, [&](int cycles) {
        for (int i = 0; i < cycles; ++i) client.acquire(name).release();
    });
}

// ---- S2 ----------------------------------------------------------------------------------------

std::vector<s2_point> run_s2(const scenario_context& c, const scenario_sizes& s,
                             const std::function<void(const std::string&)>& step) {
    std::vector<s2_point> points;
    for (int clients : s.s2_clients) {
        step("S2 " + std::to_string(clients) + " clients");
        worker_group group(clients, c.worker, c.t.config, c.worker_log);
        std::vector<std::string> warmups, runs;
        const int64_t start = start_soon() + 100'000'000;  // after the warm-ups
        const int64_t end = start + std::chrono::duration_cast<std::chrono::nanoseconds>(s.s2_window).count();
        for (int i = 0; i < clients; ++i) {
            const std::string name = "s2/" + std::to_string(clients) + "/" + std::to_string(i);
            warmups.push_back("count " + name + " 20 0");
            runs.push_back("cycles " + name + " " + std::to_string(start) + " " + std::to_string(end) + " 0");
        }
        group.scatter(warmups, 60s);
        const auto answers = group.scatter(runs, answer_timeout(s.s2_window));
        s2_point p;
        p.clients = clients;
        int64_t cpu = 0, wall = 0;
        for (const auto& text : answers) {
            const auto a = parse_cycles(text);
            p.cycles += a.n;
            p.release_failures += a.release_failures;
            cpu += a.cpu_ns;
            wall = std::max(wall, a.wall_ns);
        }
        if (wall > 0) p.cycles_per_s = static_cast<double>(p.cycles) / (static_cast<double>(wall) / 1e9);
        if (p.cycles > 0) p.cpu_us_per_cycle = static_cast<double>(cpu) / 1000.0 / static_cast<double>(p.cycles);
        points.push_back(p);
    }
    return points;
}

// ---- S3 ----------------------------------------------------------------------------------------

namespace {

// Runs `cycles` contended cycles split over the group's workers on `name` (for the herd count);
// returns the number of releases whose outcome was not `released`.
long long run_counted(worker_group& group, const std::string& name, int cycles, int critical_us, int threads) {
    std::vector<std::string> lines;
    const int n = static_cast<int>(group.size());
    for (int i = 0; i < n; ++i) {
        const int mine = cycles / n + (i < cycles % n ? 1 : 0);
        lines.push_back("count " + name + " " + std::to_string(mine) + " " + std::to_string(critical_us) + " " + std::to_string(threads));
    }
    long long failures = 0;
    for (const auto& answer : group.scatter(lines, 300s)) {
        const auto v = parse_numbers(answer);
        if (v.size() >= 4) failures += v[3];
    }
    return failures;
}

// After a point the server could not serve (a thousand waiters, each one's statement queued behind
// the others' on one row), the server may go on working off those sessions' statements for a while
// after their processes are gone. Waits, up to `limit`, until a fresh client opens and a try-once
// acquire answers, so the next scenario measures the target rather than that aftermath.
void wait_until_target_answers(const target& t, std::chrono::seconds limit) {
    const auto until = clock_type::now() + limit;
    while (clock_type::now() < until) {
        std::error_code ec;
        dlock::client client = dlock::client::open(t.config.string(), ec);
        if (!ec) {
            client.acquire("s3settle/" + t.name, dlock::acquire_options().with_wait(std::chrono::milliseconds(0)), ec);
            if (!ec || ec == dlock::errc::timeout) return;
        }
        std::this_thread::sleep_for(1s);
    }
}

}  // namespace

s3_layout s3_layout_for(int waiters) {
    // Up to 32 waiters, one process each; beyond, at most 32 processes share them as threads (each
    // thread an independent waiter on its process's client), to stay within a 2-core machine's
    // process and server-connection limits: the most processes ≤ 32 that divide `waiters`, so that
    // processes × threads is exactly the number asked (128 = 32 × 4, 1 000 = 25 × 40).
    constexpr int max_processes = 32;
    s3_layout l;
    waiters = std::max(1, waiters);
    if (waiters <= max_processes) {
        l.processes = waiters;
        return l;
    }
    for (int p = max_processes; p >= 1; --p)
        if (waiters % p == 0) {
            l.processes = p;
            break;
        }
    l.threads = waiters / l.processes;
    return l;
}

std::vector<s3_point> run_s3(const scenario_context& c, const scenario_sizes& s,
                             const std::function<void(const std::string&)>& step) {
    std::vector<s3_point> points;
    for (int asked : s.s3_waiters) {
        // A waiter count the backend or the machine cannot seat (a server's connection limit at
        // 1 000 waiters) is recorded with its error; the other counts are still measured.
        const std::size_t measured_before = points.size();
        std::size_t stepped = 0;  // progress steps taken at this waiter count
        try {
            const s3_layout layout = s3_layout_for(asked);
            const int waiters = layout.processes * layout.threads;
            const std::string threads = std::to_string(layout.threads);
            worker_group group(layout.processes, c.worker, s3_config(c.t, layout.threads), c.worker_log);
            std::vector<std::string> warmups;
            for (int i = 0; i < layout.processes; ++i)
                warmups.push_back("count s3warm/" + std::to_string(waiters) + "/" + std::to_string(i) + " 5 0");
            group.scatter(warmups, 60s);
            if (layout.threads > 1 && s3_server_connections_per_process(c.t.name, layout.threads) > 0) {
                // Where each waiting thread needs a server connection of its own (the SQL targets'
                // pools: s3_config), each process's threads first queue together once — each holds
                // for 20 ms, so that all of them wait at the same time — and the connections are open
                // before the window rather than opened inside it. One process at a time: a thousand
                // connects at once outlast the plugin's connect limit on a loaded two-core machine.
                for (int i = 0; i < layout.processes; ++i)
                    group[static_cast<std::size_t>(i)].request("count s3warm/" + std::to_string(waiters) + "/" + std::to_string(i) + " " + threads +
                                                               " 20000 " + threads,
                                                           120s);
            }
            for (int critical_us : s.s3_critical_us) {
                step("S3 " + std::to_string(waiters) + " waiters, cs " + std::to_string(critical_us) + " us");
                ++stepped;
                const std::string name = "s3/" + std::to_string(waiters) + "/" + std::to_string(critical_us);
                const int64_t start = start_soon();
                const int64_t end = start + std::chrono::duration_cast<std::chrono::nanoseconds>(s.s3_window).count();
                const auto answers = group.broadcast("cycles " + name + " " + std::to_string(start) + " " + std::to_string(end) + " " +
                                                         std::to_string(critical_us) + " " + threads,
                                                     answer_timeout(s.s3_window));
                s3_point p;
                p.waiters = waiters;
                p.processes = layout.processes;
                p.threads = layout.threads;
                p.critical_us = critical_us;
                struct holding {
                    int64_t acquired, releasing;
                    std::size_t waiter;  // process * threads + thread
                    bool operator<(const holding& o) const { return acquired < o.acquired; }
                };
                std::vector<holding> holdings;
                std::vector<double> per_client(static_cast<std::size_t>(waiters), 0.0);
                int64_t first = INT64_MAX, last = 0;
                for (std::size_t w = 0; w < answers.size(); ++w) {
                    const auto a = parse_cycles(answers[w]);
                    p.cycles += a.n;
                    p.release_failures += a.release_failures;
                    for (const auto& e : a.events) {
                        first = std::min(first, e.acquired);
                        last = std::max(last, e.releasing);
                        const std::size_t waiter = w * static_cast<std::size_t>(layout.threads) + static_cast<std::size_t>(e.thread);
                        if (waiter < per_client.size()) per_client[waiter] += 1;
                        holdings.push_back({e.acquired, e.releasing, waiter});
                    }
                }
                // Mutual exclusion orders the holdings; a handoff is a release followed by another
                // waiter's acquire. A waiter that gets the lock straight back (barging past the
                // others) hands nothing off: those are counted apart.
                std::sort(holdings.begin(), holdings.end());
                std::vector<double> handoffs;
                long long same_process = 0;
                for (std::size_t i = 0; i + 1 < holdings.size(); ++i) {
                    if (holdings[i].waiter == holdings[i + 1].waiter) {
                        ++same_process;
                        continue;
                    }
                    handoffs.push_back(us_between(holdings[i].releasing, holdings[i + 1].acquired));
                }
                if (holdings.size() > 1) p.reacquired_by_releaser = static_cast<double>(same_process) / static_cast<double>(holdings.size() - 1);
                p.handoff = summarize(std::move(handoffs));
                p.jain_window = jain_index(per_client);
                // Jain over whole rounds: the first R × waiters acquisitions in time order, R as many
                // as the window holds. The window's last round is cut short wherever the window ends,
                // which would mark even a strict FIFO unfair when a window holds only a few rounds
                // (1 000 waiters); a backend that lets some waiters barge is as skewed over whole
                // rounds as over the window.
                const std::size_t rounds = holdings.size() / static_cast<std::size_t>(waiters);
                if (rounds > 0) {
                    std::vector<double> in_rounds(static_cast<std::size_t>(waiters), 0.0);
                    for (std::size_t i = 0; i < rounds * static_cast<std::size_t>(waiters); ++i) in_rounds[holdings[i].waiter] += 1;
                    p.jain = jain_index(in_rounds);
                    p.jain_rounds = static_cast<int>(rounds);
                }
                if (last > first) p.cycles_per_s = static_cast<double>(p.cycles) / (static_cast<double>(last - first) / 1e9);
                if (critical_us == s.s3_critical_us.front()) {
                    const std::string herd_name = "s3herd/" + std::to_string(waiters);
                    try {
                        // The count is of a handoff's operations, so it runs on a name already in
                        // use: one acquire + release first. On a name never used, every waiter that
                        // arrives before the name's first record exists also pays that first use
                        // (ZooKeeper: a refused create and a createContainer each), which is a cost
                        // per name, not per handoff.
                        group[0].request("count " + herd_name + " 1 0", 60s);
                        p.ops_per_handoff = count_server_commands(c.t, *c.lab, [&](int cycles) {
                            p.release_failures += run_counted(group, herd_name, cycles, critical_us, layout.threads);
                        });
                        p.ops_per_handoff.minimum = contended_minimum(c.t, p.ops_per_handoff);
                    } catch (const std::exception& e) {
                        p.ops_per_handoff.source = std::string("failed: ") + e.what();
                    }
                }
                points.push_back(std::move(p));
            }
        } catch (const std::exception& e) {
            const s3_layout layout = s3_layout_for(asked);
            for (std::size_t i = points.size() - measured_before; i < s.s3_critical_us.size(); ++i) {
                if (i >= stepped) step("S3 " + std::to_string(asked) + " waiters: not measured");
                s3_point p;
                p.waiters = layout.processes * layout.threads;
                p.processes = layout.processes;
                p.threads = layout.threads;
                p.critical_us = s.s3_critical_us[i];
                p.error = e.what();
                points.push_back(std::move(p));
            }
            wait_until_target_answers(c.t, 60s);
        }
    }
    return points;
}

// ---- S4 ----------------------------------------------------------------------------------------

distribution run_s4(const scenario_context& c, int handoffs) {
    worker_group group(2, c.worker, c.t.config, c.worker_log);
    const std::string name = "s4/pingpong";
    // The waiter asks for the lock this long before the holder releases it, so that it is waiting
    // (registered, watching) when the release comes; long enough for the slowest backend's
    // acquire path (ZooKeeper's create + children + exists), short enough to keep the run short.
    const auto waiter_head_start = 3ms;
    const int warmup = std::max(10, handoffs / 10);
    std::vector<double> samples;
    std::size_t holder = 0;
    group[holder].request("acquire " + name + " 0", 30s);
    for (int i = 0; i < warmup + handoffs; ++i) {
        const std::size_t waiter = 1 - holder;
        group[waiter].send("acquire " + name + " 0");
        std::this_thread::sleep_for(waiter_head_start);
        const auto released = parse_numbers(group[holder].request("release " + name, 30s));
        const auto acquired = parse_numbers(group[waiter].receive(30s));
        if (i >= warmup) samples.push_back(us_between(released.at(0), acquired.at(0)));
        holder = waiter;
    }
    group[holder].request("release " + name, 30s);
    return summarize(std::move(samples));
}

// ---- S5 ----------------------------------------------------------------------------------------

std::vector<s5_point> run_s5(const scenario_context& c, const scenario_sizes& s,
                             const std::function<void(const std::string&)>& step) {
    std::vector<s5_point> points;
    for (int leases : s.s5_leases) {
        step("S5 " + std::to_string(leases) + " leases");
        worker_group group(1, c.worker, c.t.config, c.worker_log);
        worker_process& holder = group[0];
        s5_point p;
        p.leases = leases;
        const auto hold = parse_numbers(holder.request("hold s5/" + std::to_string(leases) + " " + std::to_string(leases) + " " +
                                                           std::to_string(s.s5_ttl.count()),
                                                       600s));
        p.acquired = static_cast<int>(hold.at(0));
        p.acquire_s = static_cast<double>(hold.at(1)) / 1e9;
        // Let the first renewals of the last acquired leases come due before measuring.
        std::this_thread::sleep_for(s.s5_ttl / 2);
        int64_t cpu0 = 0, cpu1 = 0, t0 = 0, t1 = 0;
        bool window_run = false;
        int asked_cycles = 0;
        auto window = [&](int cycles) {
            asked_cycles = cycles;
            window_run = true;
            cpu0 = parse_numbers(holder.request("status", 30s)).at(0);
            t0 = monotonic_ns();
            std::this_thread::sleep_for(s.s5_window);
            cpu1 = parse_numbers(holder.request("status", 30s)).at(0);
            t1 = monotonic_ns();
        };
        try {
            const command_count counted = count_server_commands(c.t, *c.lab, window);
            p.server_count_source = counted.source;
            if (window_run && asked_cycles > 0 && t1 > t0)
                p.server_commands_per_s = counted.per_cycle * asked_cycles / (static_cast<double>(t1 - t0) / 1e9);
        } catch (const std::exception& e) {
            p.server_count_source = std::string("failed: ") + e.what();
        }
        if (!window_run) window(0);
        p.window_s = static_cast<double>(t1 - t0) / 1e9;
        p.cpu_percent_of_core = 100.0 * static_cast<double>(cpu1 - cpu0) / static_cast<double>(t1 - t0);
        p.held_after_window = static_cast<int>(parse_numbers(holder.request("status", 30s)).at(1));
        holder.request("drop", 600s);
        points.push_back(p);
    }
    return points;
}

// ---- S6 ----------------------------------------------------------------------------------------

s6_result run_s6(const scenario_context& c, std::chrono::milliseconds ttl) {
    worker_group group(2, c.worker, c.t.config, c.worker_log);
    const std::string name = "s6/recovery";
    const auto granted = parse_numbers(group[0].request("acquire " + name + " " + std::to_string(ttl.count()), 30s));
    s6_result r;
    r.granted_ttl_ms = granted.at(1) >= 0 ? static_cast<double>(granted.at(1)) : NAN;
    r.bound_ms = std::isnan(r.granted_ttl_ms) ? 0.0 : r.granted_ttl_ms;
    group[1].send("acquire " + name + " " + std::to_string(ttl.count()));
    std::this_thread::sleep_for(300ms);  // the waiter is waiting
    const int64_t killed = monotonic_ns();
    group[0].kill_now();
    const auto acquired = parse_numbers(group[1].receive(std::chrono::milliseconds(static_cast<int64_t>(r.bound_ms)) + 60s));
    r.recovery_ms = us_between(killed, acquired.at(0)) / 1000.0;
    r.met = r.recovery_ms <= r.bound_ms + r.allowance_ms;
    group[1].request("release " + name, 30s);
    return r;
}

}  // namespace dlock::bench
