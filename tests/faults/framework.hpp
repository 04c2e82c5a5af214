// framework.hpp — the suite's internals shared by runner.cpp, suite.cpp and checkers.cpp (not for
// scenario files: they use suite.hpp only).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "suite.hpp"

namespace dlock::faults {

// What the checkers read.
struct check_inputs {
    std::filesystem::path history_dir;          // every *.jsonl in it is one worker's history
    std::map<std::string, int64_t> killed_at;   // worker label -> when it was SIGKILLed (ends its holds)
    std::filesystem::path resource_log;         // the fenced resource's log; empty: none ran
    resource_report resource;                   // its totals
    bool fencing = false;                       // check tokens (the target has FENCING)
    int64_t now_ns = 0;                         // ends holds still open (neither released nor killed)
};

struct check_findings {
    check_report report;
    uint64_t stale_writes_accepted = 0;  // accepted writes whose token was already superseded by an acquisition
    std::vector<std::string> examples;   // first few problems, human-readable
};

// Checkers 1 (overlap, cut and uncut) and 2 (fenced writes, tokens); liveness and lost-detection
// latency are measured by the scenarios from holder events (context::record_*).
check_findings run_checkers(const check_inputs& inputs);

}  // namespace dlock::faults

namespace dlock::faults {

// Everything one cell needs to run.
struct cell_setup {
    const scenario* which = nullptr;
    expectation expected;
    const target* tgt = nullptr;
    lab::lab* lab = nullptr;             // null when the run needs no server (file only)
    run_size size = run_size::ci;
    std::filesystem::path dir;           // created fresh for the cell
    uint64_t seed = 1;
    std::function<void(const std::string&)> log;  // progress lines
};

// Runs one cell: builds its context, calls the scenario, tears down every worker, holder and the
// resource it started, and returns the result with the found verdict set.
cell_result run_cell(const cell_setup& setup);

}  // namespace dlock::faults
