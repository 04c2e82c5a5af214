// report.hpp — the comparison suite's report: every number of a run gathered in one JSON document
// (report.json), the S1 samples for the CDF plot (samples.json), the plots (plots.py, run with
// /usr/bin/python3 and matplotlib's Agg backend) and report.md, headed by the summary table with
// the targets of docs/design/benchmarks.md, each met or missed.
#pragma once

#include "probes.hpp"
#include "scenarios.hpp"
#include "stats.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace dlock::bench {

// A distribution's numbers (µs) without its samples.
nlohmann::json to_json(const distribution& d);
nlohmann::json to_json(const calibration& c);
nlohmann::json to_json(const command_count& c);
nlohmann::json to_json(const peer_result& p);
nlohmann::json to_json(const redlock_row& r);
// The interleaved floor/S1 blocks of one run: each block's p50s, the floor's spread over blocks
// (p50 of the block p50s, min, max) and the range of the per-block S1/floor ratio.
nlohmann::json floor_blocks_json(const s1_result& s1);

// Cores, kernel, CPU model, and the version of every server and tool the lab and the peers use.
nlohmann::json machine_info();
nlohmann::json server_versions();

// Per target, the targets of docs/design/benchmarks.md that its numbers decide: [{target, value, met}], with
// met null when not measured. Stored into each target's "targets" by write_report.
nlohmann::json evaluate_targets(const nlohmann::json& target_report, const nlohmann::json& run);

struct report_files {
    std::filesystem::path markdown;
    std::string summary;  // the summary table (markdown), also at the head of report.md
    bool plots_ok = false;
    std::string plots_error;
};
// Writes report.json, samples.json, the plots and report.md into `dir`. `plots_script` is
// plots.py. Never throws for a failed plot: the report says so.
report_files write_report(nlohmann::json& report, const nlohmann::json& samples, const std::filesystem::path& dir,
                          const std::filesystem::path& plots_script);

}  // namespace dlock::bench
