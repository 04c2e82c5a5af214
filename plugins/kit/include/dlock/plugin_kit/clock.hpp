// dlock/plugin_kit/clock.hpp — the clock of the plugin ABI: every deadline, `valid_until` and
// timestamp that crosses it is nanoseconds of CLOCK_MONOTONIC (never the wall clock), with one value
// for "no deadline". Here: reading that clock, the "forever" value, a millisecond count turned into
// nanoseconds without overflow, a deadline as a std::chrono time point (for condition variables),
// and the clock-drift allowance a lease's validity is shortened by.
// Part of the plugin kit (dlock/plugin_kit.hpp): header-only C++17.
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <limits>

namespace dlock::plugin_kit {

constexpr int64_t ns_per_ms = 1'000'000;

// The deadline that never comes (a wait without limit), and the `valid_until_ns` of a lock that
// stays held until it is released (no TTL).
constexpr int64_t forever_ns = std::numeric_limits<int64_t>::max();

// CLOCK_MONOTONIC in nanoseconds: the clock of every `deadline_ns` and `valid_until_ns` of the ABI.
// Thread-safe; never goes back.
inline int64_t now_ns() noexcept {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// `ms` milliseconds in nanoseconds, saturating at ±forever_ns instead of overflowing.
constexpr int64_t ms_to_ns(int64_t ms) noexcept {
    return ms >= forever_ns / ns_per_ms    ? forever_ns
           : ms <= -forever_ns / ns_per_ms ? -forever_ns
                                           : ms * ns_per_ms;
}

// A deadline on now_ns()'s clock as a time point of std::chrono::steady_clock, which is the same
// clock (CLOCK_MONOTONIC) on Linux: for condition_variable::wait_until.
inline std::chrono::steady_clock::time_point steady_time(int64_t ns) noexcept {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns));
}

// How much earlier than `sent + ttl` a lease is reported to end (`valid_until_ns`), for the drift
// between the client's clock and the server's: ttl/100 + 2 ms.
constexpr int64_t drift_ns(int64_t ttl_ms) noexcept { return ttl_ms * 10'000 + 2'000'000; }

}  // namespace dlock::plugin_kit
