// worker_protocol.hpp — the line protocol between dlock-compare (the driver) and each
// dlock-bench-worker process: the worker prints "ready <pid>" once its client is open, then answers
// every command line with exactly one line, "ok …" or "err <text>". Times are CLOCK_MONOTONIC
// nanoseconds, shared by every process of the machine.
//
//   acquire NAME TTL_MS                 ok <returned_ns> <granted_ttl_ms, -1 without expiry>
//   release NAME                        ok <called_ns> <returned_ns>
//   cycles NAME START_NS END_NS CS_US [THREADS [PERMITS]]   (PERMITS > 0: one of PERMITS permits of the semaphore NAME)
//                                       ok <n> <cpu_ns> <wall_ns> <release_failures> then n triples
//                                       <acquired_ns> <releasing_ns> <thread>
//   count NAME N CS_US [THREADS]        ok <n> <cpu_ns> <wall_ns> <release_failures>
// THREADS (default 1) threads of the worker contend for NAME at once on its one client, each an
// independent waiter (S3 with more waiters than processes); <thread> is 0 … THREADS-1. A `cycles`
// acquire still waiting at END_NS gives up (no cycle); a holding under way at END_NS is finished.
// A release whose outcome is not `released` is counted in release_failures (and logged by the
// worker on its stderr), not an error of the command.
//   hold PREFIX N TTL_MS                ok <held> <wall_ns>          (auto-renewed leases, kept)
//   status                              ok <cpu_ns> <held>
//   drop                                ok                           (releases the `hold` leases)
//   quit                                (no answer; the worker exits, as at end of input)
#pragma once

namespace dlock::bench::worker_protocol {

inline constexpr const char* ready = "ready";
inline constexpr const char* acquire = "acquire";
inline constexpr const char* release = "release";
inline constexpr const char* cycles = "cycles";
inline constexpr const char* count = "count";
inline constexpr const char* hold = "hold";
inline constexpr const char* status = "status";
inline constexpr const char* drop = "drop";
inline constexpr const char* quit = "quit";

}  // namespace dlock::bench::worker_protocol
