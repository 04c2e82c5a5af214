// common.hpp — the base every internal layer of libdlock shares: the internal error type (a status plus
// a message, turned into dlock_status + dlock_last_error() at the C ABI firewall) and the monotonic
// clock every duration is measured on.
#pragma once

#include <dlock/dlock.h>
#include <dlock/plugin_kit/clock.hpp>

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

// The constant name of a status ("DLOCK_TIMEOUT"); what dlock_status_name() returns. Here so that
// the layers below the C ABI name statuses without calling up into it.
constexpr const char* status_name(int status) noexcept {
    switch (status) {
    case DLOCK_OK: return "DLOCK_OK";
    case DLOCK_TIMEOUT: return "DLOCK_TIMEOUT";
    case DLOCK_INVALID_ARGUMENT: return "DLOCK_INVALID_ARGUMENT";
    case DLOCK_CONFIG: return "DLOCK_CONFIG";
    case DLOCK_PLUGIN: return "DLOCK_PLUGIN";
    case DLOCK_NOT_SUPPORTED: return "DLOCK_NOT_SUPPORTED";
    case DLOCK_UNAVAILABLE: return "DLOCK_UNAVAILABLE";
    case DLOCK_BACKEND: return "DLOCK_BACKEND";
    case DLOCK_UNKNOWN: return "DLOCK_UNKNOWN";
    case DLOCK_LOST: return "DLOCK_LOST";
    case DLOCK_CANCELLED: return "DLOCK_CANCELLED";
    case DLOCK_INTERNAL: return "DLOCK_INTERNAL";
    case DLOCK_PERMISSION: return "DLOCK_PERMISSION";
    default: return "DLOCK_<unknown>";
    }
}

// The clock and its arithmetic are the plugin kit's (dlock/plugin_kit/clock.hpp): the core and the
// plugins measure every deadline and validity on one clock, CLOCK_MONOTONIC in nanoseconds.
using plugin_kit::forever_ns;
using plugin_kit::ms_to_ns;  // milliseconds to nanoseconds, saturating at ±forever_ns
using plugin_kit::ns_per_ms;

// CLOCK_MONOTONIC in nanoseconds: the clock of every deadline, validity and timestamp in dlock.
// (std::chrono::steady_clock is the same clock on Linux.)
inline int64_t monotonic_now_ns() noexcept { return plugin_kit::now_ns(); }

// a + b, clamped to [0, forever_ns] for non-negative inputs (deadlines never wrap).
inline int64_t saturating_add(int64_t a, int64_t b) noexcept {
    return (b > 0 && a > forever_ns - b) ? forever_ns : a + b;
}

}  // namespace dlock::detail
