// common.hpp — what every internal part of libdlock shares: the internal error type (a status plus
// a message, turned into dlock_status + dlock_last_error() at the C ABI firewall) and the monotonic
// clock every duration is measured on.
#pragma once

#include <dlock/dlock.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <time.h>

namespace dlock::detail {

// Thrown inside libdlock; caught at every C entry point. `status` is a dlock_status.
class error : public std::runtime_error {
public:
    error(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
    int status() const noexcept { return status_; }

private:
    int status_;
};

constexpr int64_t ns_per_ms = 1'000'000;
constexpr int64_t forever_ns = std::numeric_limits<int64_t>::max();

// CLOCK_MONOTONIC in nanoseconds: the clock of every deadline, validity and timestamp in dlock.
// (std::chrono::steady_clock is the same clock on Linux.)
inline int64_t monotonic_now_ns() noexcept {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// a + b, clamped to [0, forever_ns] for non-negative inputs (deadlines never wrap).
inline int64_t saturating_add(int64_t a, int64_t b) noexcept {
    return (b > 0 && a > forever_ns - b) ? forever_ns : a + b;
}

// Milliseconds to nanoseconds, saturating at forever_ns.
inline int64_t ms_to_ns(int64_t ms) noexcept {
    return ms >= forever_ns / ns_per_ms ? forever_ns : ms * ns_per_ms;
}

}  // namespace dlock::detail
