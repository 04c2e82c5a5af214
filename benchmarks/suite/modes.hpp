// modes.hpp — the benchmark points of semaphores and shared locks (docs/design/benchmarks.md, "Semaphores
// and shared locks"): S1 for one permit and for one shared hold (uncontended acquire+release, set
// against the target's floor and its exclusive S1 of the same run), a contention point of N = 4
// permits and 32 contenders, and the Debian peers that have these primitives (kazoo's Semaphore,
// ReadLock and WriteLock). Like scenarios.hpp, each function throws on what it cannot report.
#pragma once

#include "scenarios.hpp"

#include <chrono>
#include <string>

namespace dlock::bench {

// S1 of one mode: `cycles` uncontended acquire+release cycles (after a warm-up) on one client,
// each taking one of `permits` permits of a semaphore (permits > 0) or holding a lock shared.
distribution run_s1_mode(const target& t, uint32_t permits, bool shared, int cycles);

// The contention point: `contenders` waiters (processes × threads, as S3 seats them) on one
// semaphore of `permits` permits, critical section `critical_us`, for `window`.
struct permits_point {
    int permits = 0;
    int contenders = 0;
    int critical_us = 0;
    double cycles_per_s = NAN;
    // A grant that had to wait for a permit: in time order, the k-th release enables the
    // (k + permits)-th acquisition (with every permit busy and waiters queued, as here), so a
    // sample is that acquisition's return minus that release's call; pairs where the releaser
    // took the permit straight back are counted in reacquired_by_releaser instead.
    distribution handoff;
    double reacquired_by_releaser = NAN;
    double jain = NAN;  // over the per-contender counts of the whole window
    long long cycles = 0;
    long long release_failures = 0;
};
permits_point run_permits_contention(const scenario_context& c, int permits, int contenders, int critical_us,
                                     std::chrono::milliseconds window);

// kazoo's Semaphore (max_leases = permits), ReadLock and WriteLock on the ZooKeeper server at
// `connect`: S1 of each (benchmarks/peers/zookeeper_kazoo.py). A part that fails keeps its error.
struct kazoo_modes {
    std::string version;
    distribution semaphore, read, write;
    std::string semaphore_error, read_error, write_error;
};
kazoo_modes run_kazoo_modes(const std::string& connect, int permits, int cycles, const std::filesystem::path& log);

}  // namespace dlock::bench
