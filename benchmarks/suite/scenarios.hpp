// scenarios.hpp — the generic scenarios of docs/design/benchmarks.md that every backend runs through the C++ API:
// S1 (Google Benchmark, in the driver's process) and the multi-process S2–S6 (dlock-bench-worker
// processes, synchronised over pipes and by CLOCK_MONOTONIC start/end times). Each returns plain
// numbers; report.hpp turns them into the report. Every function throws on a failure it cannot
// report as a number (std::exception with the reason), and the driver records that as the
// scenario's error.
#pragma once

#include "probes.hpp"
#include "stats.hpp"

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace dlock::bench {

// What every multi-process scenario needs: the target, the lab (for server command counts), the
// worker executable and the file the workers' stderr goes to.
struct scenario_context {
    target t;
    dlock::lab::lab* lab = nullptr;
    std::filesystem::path worker;
    std::filesystem::path worker_log;
};

// The sizes of one run (quick or full): counts of cycles and the points of each sweep.
struct scenario_sizes {
    int s1_cycles = 0;
    std::vector<int> s2_clients;
    std::chrono::milliseconds s2_window{0};
    std::vector<int> s3_waiters;
    std::vector<int> s3_critical_us;
    std::chrono::milliseconds s3_window{0};
    int s4_handoffs = 0;
    std::vector<int> s5_leases;
    std::chrono::milliseconds s5_ttl{0};
    std::chrono::milliseconds s5_window{0};
    std::chrono::milliseconds s6_ttl{0};
};
scenario_sizes sizes_for(run_size size);

// One block's p50 of S1 and of the floor measured right before it.
struct s1_block {
    double floor_p50 = NAN;
    double s1_p50 = NAN;
};
struct s1_result {
    distribution latency;             // one sample per acquire+release cycle (µs), every block
    distribution floor;               // the floor cycle's samples, every block (empty without a floor cycle)
    std::vector<s1_block> blocks;     // in the order measured
    std::filesystem::path benchmark_json;  // Google Benchmark's JSON output
};
// S1: `cycles` uncontended acquire+release cycles (after a warm-up) on one client, as a Google
// Benchmark benchmark with one timed sample per iteration; JSON written to `json_out`. With a
// `floor_cycle`, the cycles are split into `blocks` blocks, each preceded by as many floor cycles
// (untimed for Google Benchmark), so the floor and S1 see the same moments of a shared machine.
s1_result run_s1(const target& t, int cycles, const std::filesystem::path& json_out,
                 const std::function<void()>& floor_cycle = {}, int blocks = 1);
// The number of interleaved floor/S1 blocks of a run of `cycles` cycles.
int s1_blocks(int cycles);

// Server commands per uncontended cycle (count_server_commands around `cycles` cycles of one client).
command_count count_uncontended(const target& t, dlock::lab::lab& lab);

struct s2_point {
    int clients = 0;
    double cycles_per_s = NAN;
    double cpu_us_per_cycle = NAN;  // user+system CPU of the client processes, every thread
    long long cycles = 0;
    long long release_failures = 0;  // releases whose outcome was not `released` (workers.log says why)
};
std::vector<s2_point> run_s2(const scenario_context& c, const scenario_sizes& s,
                             const std::function<void(const std::string&)>& step);

// How S3 seats `waiters` waiters: processes × threads (threads share their process's client).
struct s3_layout {
    int processes = 1;
    int threads = 1;
};
s3_layout s3_layout_for(int waiters);

struct s3_point {
    int waiters = 0;  // processes × threads
    int processes = 0;
    int threads = 0;
    int critical_us = 0;
    double cycles_per_s = NAN;
    distribution handoff;  // release called → another process's acquire returned (µs), merged over processes
    double reacquired_by_releaser = NAN;  // fraction of cycles where the releaser got the lock straight back
    double jain = NAN;     // over the per-waiter acquisition counts of the first jain_rounds whole rounds
    int jain_rounds = 0;   // rounds of `waiters` acquisitions the window held (0: not one: jain is NaN)
    double jain_window = NAN;  // over the per-waiter counts of the whole window
    command_count ops_per_handoff;  // server commands per contended cycle (herd detector); first critical_us only
    long long cycles = 0;
    long long release_failures = 0;  // releases whose outcome was not `released` (workers.log says why)
    std::string error;  // not empty: this point was not measured, for this reason
};
std::vector<s3_point> run_s3(const scenario_context& c, const scenario_sizes& s,
                             const std::function<void(const std::string&)>& step);

// S4: two processes pass one lock back and forth; a sample is the holder's release call to the
// waiter's acquire returning. The waiter starts waiting `waiter_head_start` before the release.
distribution run_s4(const scenario_context& c, int handoffs);

struct s5_point {
    int leases = 0;
    int acquired = 0;
    int held_after_window = 0;  // still HELD after a window longer than the ttl: renewals happened
    double window_s = NAN;
    double cpu_percent_of_core = NAN;  // the holder process's CPU over the window
    double server_commands_per_s = NAN;
    std::string server_count_source;
    double acquire_s = NAN;
};
// S5: runs only on targets with DLOCK_CAP_TTL (the driver checks); leases auto-renewed.
std::vector<s5_point> run_s5(const scenario_context& c, const scenario_sizes& s,
                             const std::function<void(const std::string&)>& step);

struct s6_result {
    double recovery_ms = NAN;    // SIGKILL of the holder → the waiter's acquire returned
    double granted_ttl_ms = NAN; // the killed holder's lease ttl; NaN for leases without expiry
    double bound_ms = NAN;       // the backend's bound: the ttl, or 0 when released at the holder's death
    double allowance_ms = 250;   // detection and one handoff on top of the bound
    bool met = false;
};
s6_result run_s6(const scenario_context& c, std::chrono::milliseconds ttl);

}  // namespace dlock::bench
