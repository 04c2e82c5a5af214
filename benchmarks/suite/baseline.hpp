// baseline.hpp — the figures of an earlier report that a run must not fall behind ("no regression"):
// read from that report's markdown (docs/benchmarks.md, which this suite wrote), so the baseline is
// always the report the repository shows.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>

namespace dlock::bench {

// Per backend, from the report's tables: the S1 p50 / floor ratio and the floor method (the
// calibration tables), S2 cycles/s per client count, and each peer's ratio (S8):
//   {"source": path, "targets": {"redis": {"s1_floor_ratio": 1.03, "floor_method": "...",
//    "s2": {"1": 14000, ...}, "peers": {"redis-py Lock|default": 2.13, ...}}, ...}}
// An object with "error" when the file cannot be read or holds none of those tables.
nlohmann::json read_baseline(const std::filesystem::path& report_md);

// The "no regression" rows of one target's targets table (target_row shape: target, value, met,
// note), comparing `target_report` with the baseline's entry of the same backend.
nlohmann::json regression_rows(const nlohmann::json& target_report, const nlohmann::json& baseline);

}  // namespace dlock::bench
