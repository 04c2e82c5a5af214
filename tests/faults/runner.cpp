// fault_suite — runs the fault-injection safety suite: every registered (scenario, target) cell,
// against real servers from one lab, and writes the guarantees table.
//
//   fault_suite [--soak [--acquisitions N]] [--backends file,redis,…|all] [--scenarios 1,3,6a] [--out DIR]
//               [--seed N] [--list]
//
// --backends selects targets (file, redis, redlock, zookeeper, zookeeper_ensemble, etcd,
// etcd_cluster, sql_lease, sql_advisory, mysql_lease, mysql_named); --scenarios selects by number (all its variants) or by
// id ("6a"). Writes DIR/guarantees.json and DIR/guarantees.md and keeps each cell's histories and
// logs under DIR/cells/. With --soak, also DIR/soak.md: per cell the checked acquisitions, the faults
// injected by kind, the violations and the duration. The soak of scenario 1 (contention under the
// random nemesis) runs $DLOCK_FAULT_SOAK_SECONDS (default 120 s) per target and, with
// --acquisitions N, until it also made at least N checked acquisitions. Exit status: 0 when every cell's found verdict is the expected one and no
// cell errored or failed a requirement; 1 otherwise; 2 for bad usage.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "framework.hpp"

namespace {

using namespace dlock::faults;
namespace fs = std::filesystem;

// How the suite reaches each target, and the timing it is documented with.
struct target_spec {
    std::string name;
    std::string plugin;
    std::vector<dlock::lab::backend> servers;
    milliseconds ttl;
    milliseconds liveness_bound;
    std::string extra_options;  // appended under `options:` of the lab's config
};

const std::vector<target_spec>& target_specs() {
    using dlock::lab::backend;
    static const std::vector<target_spec> specs = {
        {"file", "file", {}, milliseconds(1000), milliseconds(0), ""},
        {"redis", "redis", {backend::redis}, milliseconds(1000), milliseconds(1000), ""},
        {"redlock", "redlock", {backend::redlock}, milliseconds(1000), milliseconds(1000), ""},
        // The lab's ZooKeeper (tickTime 200 ms) bounds sessions to [0.4 s, 4 s]. Liveness: the
        // server's SessionTrackerImpl files a session, on each packet received at t, under the
        // expiry time (floor((t + timeout) / tickTime) + 1) x tickTime (ExpiryQueue.update,
        // roundToNextInterval) and expires each such batch when its time comes, so a dead client's
        // session ends within (timeout, timeout + tickTime] of its last packet: timeout + tickTime.
        {"zookeeper", "zookeeper", {backend::zookeeper}, milliseconds(2000),
         milliseconds(2000) + dlock::lab::zookeeper_options{}.tick_time, "  session_timeout: 2s\n"},
        // On an ensemble the leader alone expires sessions, and touches one held through a follower
        // when that follower answers its ping (every tickTime / 2): timeout + 1.5 x tickTime.
        {"zookeeper_ensemble", "zookeeper", {backend::zookeeper_ensemble}, milliseconds(4000),
         milliseconds(4000) + dlock::lab::zookeeper_options{}.tick_time * 3 / 2, "  session_timeout: 4s\n"},
        // etcd leases are whole seconds; one session lease per client carries every lock.
        {"etcd", "etcd", {backend::etcd}, milliseconds(2000), milliseconds(2000), "  session_ttl: 2s\n"},
        // Quorum targets get a ttl well above an election (docs/backends/zookeeper.md's advice), so a
        // leader change alone does not end a lease.
        {"etcd_cluster", "etcd", {backend::etcd_cluster}, milliseconds(4000), milliseconds(4000), "  session_ttl: 4s\n"},
        {"sql_lease", "sql", {backend::sql}, milliseconds(1000), milliseconds(1000), ""},
        {"sql_advisory", "sql", {backend::sql}, milliseconds(1000), milliseconds(0), "  mode: advisory\n"},
        {"mysql_lease", "sql", {backend::mariadb}, milliseconds(1000), milliseconds(1000), ""},
        {"mysql_named", "sql", {backend::mariadb}, milliseconds(1000), milliseconds(0), "  mode: named\n"},
    };
    return specs;
}

std::vector<std::string> split(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');)
        if (!item.empty()) out.push_back(item);
    return out;
}

std::string read_file(const fs::path& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

std::string fmt_ms(const std::vector<double>& values) {
    if (values.empty()) return "-";
    const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    if (values.size() == 1) return fmt::format("{:.0f}", *lo);
    return fmt::format("{:.0f}–{:.0f}", *lo, *hi);
}

std::string violations_text(const violation_counts& v) {
    if (!v.total()) return "0";
    std::vector<std::string> parts;
    if (v.overlaps) parts.push_back(fmt::format("{} overlap", v.overlaps));
    if (v.stale_writes_accepted) parts.push_back(fmt::format("{} stale-write", v.stale_writes_accepted));
    if (v.lost_updates) parts.push_back(fmt::format("{} lost-update", v.lost_updates));
    if (v.token_inversions) parts.push_back(fmt::format("{} token-inv", v.token_inversions));
    if (v.false_successes) parts.push_back(fmt::format("{} false-success", v.false_successes));
    if (v.other) parts.push_back(fmt::format("{} other", v.other));
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
    return out;
}

std::string outcome_text(const cell_result& r) {
    if (r.errored) return "ERROR";
    if (!r.failed_requirements.empty()) return "FAIL";
    return r.found == r.expected ? "ok" : "FAIL";
}

nlohmann::json to_json(const cell_result& r) {
    nlohmann::json j;
    j["scenario"] = r.scenario_id;
    j["number"] = r.scenario_number;
    j["title"] = r.title;
    j["target"] = r.target;
    j["expected"] = std::string(verdict_name(r.expected));
    j["found"] = std::string(verdict_name(r.found));
    j["passed"] = r.passed();
    j["errored"] = r.errored;
    if (r.errored) j["error"] = r.error;
    j["failed_requirements"] = r.failed_requirements;
    j["acquisitions"] = r.acquisitions;
    j["histories"] = r.histories;
    j["faults"] = r.faults;
    j["fault_kinds"] = r.fault_kinds;
    j["faults_by_kind"] = r.faults_by_kind;
    j["violations"] = {{"overlaps", r.violations.overlaps},
                       {"stale_writes_accepted", r.violations.stale_writes_accepted},
                       {"lost_updates", r.violations.lost_updates},
                       {"token_inversions", r.violations.token_inversions},
                       {"false_successes", r.violations.false_successes},
                       {"other", r.violations.other},
                       {"total", r.violations.total()}};
    j["violation_examples"] = r.violation_examples;
    j["stale_writes_rejected"] = r.stale_writes_rejected;
    j["writes_accepted"] = r.writes_accepted;
    j["liveness_ms"] = r.liveness_ms;
    j["liveness_bound_ms"] = r.liveness_bound_ms ? nlohmann::json(*r.liveness_bound_ms) : nlohmann::json();
    j["lost_detection_ms"] = r.lost_detection_ms;
    j["lost_detection_bound_ms"] = r.lost_detection_bound_ms ? nlohmann::json(*r.lost_detection_bound_ms) : nlohmann::json();
    j["note"] = r.note;
    j["seconds"] = r.seconds;
    return j;
}

std::string escape_md(std::string text) {
    std::string out;
    for (char c : text) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
    return out;
}

std::string markdown(const std::vector<cell_result>& results, const std::string& size, double seconds) {
    std::string md = fmt::format("# Fault-injection guarantees ({} size, {:.0f} s)\n\n"
                                 "Generated by `fault_suite`. Verdict: SAFE = no violation found; EV = expected violation, "
                                 "demonstrated. Liveness: holder death → next acquisition (bound in parentheses). "
                                 "Lost detection: fault → LOST callback (bound ttl/3 + one round trip).\n\n",
                                 size, seconds);
    md += "| scenario | target | expected | found | result | violations | acquisitions | histories | faults | liveness ms | lost detection ms | note |\n";
    md += "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& r : results) {
        std::string note = r.note;
        if (r.errored) note = "ERROR: " + r.error + (note.empty() ? "" : "; " + note);
        for (const auto& f : r.failed_requirements) note += "; FAILED: " + f;
        md += fmt::format("| {} {} | {} | {} | {} | {} | {} | {} | {} | {} | {}{} | {}{} | {} |\n", r.scenario_id,
                          escape_md(r.title), r.target, verdict_name(r.expected), verdict_name(r.found), outcome_text(r),
                          violations_text(r.violations), r.acquisitions, r.histories, r.faults, fmt_ms(r.liveness_ms),
                          r.liveness_bound_ms ? fmt::format(" ({:.0f})", *r.liveness_bound_ms) : "",
                          fmt_ms(r.lost_detection_ms),
                          r.lost_detection_bound_ms ? fmt::format(" ({:.0f})", *r.lost_detection_bound_ms) : "", escape_md(note));
    }
    return md;
}

std::string faults_by_kind_text(const cell_result& r) {
    std::string out;
    for (const auto& [kind, count] : r.faults_by_kind) out += fmt::format("{}{} {}", out.empty() ? "" : "; ", count, kind);
    return out.empty() ? "none" : out;
}

// The soak's table: one row a cell.
std::string soak_markdown(const std::vector<cell_result>& results, long long acquisitions, double seconds) {
    std::string md = fmt::format("# Soak ({}, {:.0f} s)\n\n"
                                 "Generated by `fault_suite --soak`. Acquisitions: acquire-ok events the checkers judged.\n\n",
                                 acquisitions > 0 ? fmt::format("at least {} acquisitions per cell", acquisitions)
                                                  : std::string("sized by time"),
                                 seconds);
    md += "| scenario | target | result | checked acquisitions | faults injected | violations | duration s |\n";
    md += "|---|---|---|---|---|---|---|\n";
    for (const auto& r : results)
        md += fmt::format("| {} | {} | {} | {} | {} ({}) | {} | {:.0f} |\n", r.scenario_id, r.target, outcome_text(r),
                          r.acquisitions, r.faults, escape_md(faults_by_kind_text(r)), violations_text(r.violations), r.seconds);
    return md;
}

void print_table(const std::vector<cell_result>& results) {
    std::printf("\n%-5s %-34s %-19s %-4s %-4s %-5s %-26s %6s %4s %4s %-12s %-14s %6s\n", "scen", "title", "target", "exp",
                "found", "res", "violations", "acq", "hist", "flt", "liveness ms", "lost-det ms", "sec");
    for (const auto& r : results) {
        const std::string live = fmt_ms(r.liveness_ms) + (r.liveness_bound_ms ? fmt::format("({:.0f})", *r.liveness_bound_ms) : "");
        const std::string lost = fmt_ms(r.lost_detection_ms) +
                                 (r.lost_detection_bound_ms ? fmt::format("({:.0f})", *r.lost_detection_bound_ms) : "");
        std::printf("%-5s %-34.34s %-19s %-4s %-5s %-5s %-26.26s %6llu %4llu %4llu %-12s %-14s %6.1f\n", r.scenario_id.c_str(),
                    r.title.c_str(), r.target.c_str(), std::string(verdict_name(r.expected)).c_str(),
                    std::string(verdict_name(r.found)).c_str(), outcome_text(r).c_str(), violations_text(r.violations).c_str(),
                    (unsigned long long)r.acquisitions, (unsigned long long)r.histories, (unsigned long long)r.faults,
                    live.c_str(), lost.c_str(), r.seconds);
    }
    std::fflush(stdout);
}

// Lost-detection latency per target and cell, each against the bound its scenario recorded (the
// generic scenario 3 uses docs/design/contract.md's ttl/3 + one round trip; others may record their own).
void print_lost_detection(const std::vector<cell_result>& results) {
    std::vector<const cell_result*> cells;
    for (const auto& r : results)
        if (!r.lost_detection_ms.empty()) cells.push_back(&r);
    if (cells.empty()) return;
    std::stable_sort(cells.begin(), cells.end(), [](const cell_result* a, const cell_result* b) { return a->target < b->target; });
    std::printf("\nLost-detection latency (fault -> on_lost callback), per target and scenario:\n");
    for (const auto* r : cells) {
        const double worst = *std::max_element(r->lost_detection_ms.begin(), r->lost_detection_ms.end());
        const double bound = r->lost_detection_bound_ms.value_or(0);
        std::printf("  %-19s scenario %-4s %-14s ms  bound %6.0f ms  %s\n", r->target.c_str(), r->scenario_id.c_str(),
                    fmt_ms(r->lost_detection_ms).c_str(), bound, worst <= bound ? "within" : "ABOVE the bound");
    }
}

}  // namespace

int main(int argc, char** argv) {
    // A holder that died under a write must not kill the runner.
    ::signal(SIGPIPE, SIG_IGN);
    CLI::App app{"fault_suite: the fault-injection safety suite (docs/design/faults.md)"};
    bool soak = false, list = false, keep_lab = false;
    std::string backends_arg, scenarios_arg, out_arg = "fault-results";
    uint64_t seed = 20261122;
    long long acquisitions = 0;
    app.add_flag("--soak", soak, "soak size: long runs under a random nemesis");
    app.add_option("--acquisitions", acquisitions,
                   "with --soak: run scenario 1 until at least this many checked acquisitions per target (and at least "
                   "$DLOCK_FAULT_SOAK_SECONDS, default 120)")
        ->check(CLI::PositiveNumber);
    app.add_option("--backends", backends_arg, "targets to run, comma-separated (default: all)");
    app.add_option("--scenarios", scenarios_arg, "scenario numbers or ids, comma-separated (default: all)");
    app.add_option("--out", out_arg, "output directory (guarantees.json, guarantees.md, cells/)");
    app.add_option("--seed", seed, "seed of every cell's random choices");
    app.add_flag("--list", list, "list the cells that would run, and exit");
    app.add_flag("--keep-lab-dir", keep_lab, "keep the lab's temporary directory (server logs)");
    CLI11_PARSE(app, argc, argv);

    const auto scenarios = registered_scenarios();
    std::set<std::string> ids;
    for (const auto* s : scenarios)
        if (!ids.insert(s->id()).second) {
            std::fprintf(stderr, "fault_suite: two scenarios are registered as %s\n", s->id().c_str());
            return 2;
        }
    if (acquisitions > 0 && !soak) {
        std::fprintf(stderr, "fault_suite: --acquisitions sizes the soak: give --soak too\n");
        return 2;
    }
    // The scenarios read the soak's size from the environment (as $DLOCK_FAULT_SOAK_SECONDS).
    if (acquisitions > 0) ::setenv("DLOCK_FAULT_SOAK_ACQUISITIONS", std::to_string(acquisitions).c_str(), 1);
    const auto wanted_targets = backends_arg == "all" ? std::vector<std::string>{} : split(backends_arg);
    const auto wanted_scenarios = split(scenarios_arg);
    for (const auto& t : wanted_targets)
        if (std::find(all_target_names().begin(), all_target_names().end(), t) == all_target_names().end()) {
            std::fprintf(stderr, "fault_suite: unknown target `%s`\n", t.c_str());
            return 2;
        }
    auto scenario_selected = [&](const scenario& s) {
        if (wanted_scenarios.empty()) return true;
        for (const auto& w : wanted_scenarios)
            if (w == s.id() || w == std::to_string(s.number)) return true;
        return false;
    };
    auto target_selected = [&](const std::string& t) {
        return wanted_targets.empty() || std::find(wanted_targets.begin(), wanted_targets.end(), t) != wanted_targets.end();
    };

    struct planned {
        const scenario* which;
        expectation expected;
    };
    std::vector<planned> plan;
    std::set<std::string> targets_needed;
    for (const auto* s : scenarios) {
        if (!scenario_selected(*s)) continue;
        for (const auto& e : s->targets) {
            if (!target_selected(e.target)) continue;
            if (std::find(all_target_names().begin(), all_target_names().end(), e.target) == all_target_names().end()) {
                std::fprintf(stderr, "fault_suite: scenario %s names unknown target `%s`\n", s->id().c_str(), e.target.c_str());
                return 2;
            }
            plan.push_back({s, e});
            targets_needed.insert(e.target);
        }
    }
    if (plan.empty()) {
        std::fprintf(stderr, "fault_suite: no cell selected (%zu scenarios registered)\n", scenarios.size());
        return 2;
    }
    if (list) {
        for (const auto& p : plan) {
            const uint64_t needs = p.which->requires_capabilities;
            const std::string only = needs & DLOCK_CAP_SEMAPHORE ? " (a cell only where the target reports SEMAPHORE)"
                                     : needs & DLOCK_CAP_SHARED  ? " (a cell only where the target reports SHARED)"
                                     : needs                     ? " (a cell only with the capabilities it needs)"
                                                                 : "";
            std::printf("%-5s %-19s %-4s %s%s\n", p.which->id().c_str(), p.expected.target.c_str(),
                        std::string(verdict_name(p.expected.expected)).c_str(), p.which->title.c_str(), only.c_str());
        }
        return 0;
    }

    const auto run_start = std::chrono::steady_clock::now();
    const fs::path out = fs::absolute(out_arg);
    fs::remove_all(out / "cells");
    fs::create_directories(out / "targets");

    // One lab for every server the selected targets need.
    std::set<dlock::lab::backend> lab_backends;
    for (const auto& spec : target_specs())
        if (targets_needed.count(spec.name)) lab_backends.insert(spec.servers.begin(), spec.servers.end());
    std::unique_ptr<dlock::lab::lab> lab;
    if (!lab_backends.empty()) {
        std::printf("fault_suite: starting the lab (%zu backends)…\n", lab_backends.size());
        std::fflush(stdout);
        dlock::lab::lab_options options;
        options.throw_on_failure = false;
        options.keep_dir = keep_lab;
        lab = std::make_unique<dlock::lab::lab>(std::vector<dlock::lab::backend>(lab_backends.begin(), lab_backends.end()), options);
        std::printf("fault_suite: lab up in %lld ms at %s\n", (long long)lab->total_startup_time().count(), lab->dir().c_str());
    }

    // Targets: configs and capabilities. A target whose servers or client fail makes its cells ERROR.
    std::map<std::string, target> targets;
    std::map<std::string, std::string> target_errors;
    for (const auto& spec : target_specs()) {
        if (!targets_needed.count(spec.name)) continue;
        target t;
        t.name = spec.name;
        t.plugin = spec.plugin;
        t.servers = spec.servers;
        t.ttl = spec.ttl;
        t.liveness_bound = spec.liveness_bound;
        t.config = out / "targets" / (spec.name + ".yaml");
        try {
            std::string text;
            if (spec.servers.empty()) {
                text = fmt::format("backend: file\noptions:\n  directory: \"{}\"\n", (out / "targets" / "file-locks").string());
            } else {
                for (auto b : spec.servers)
                    if (!lab->has(b)) throw std::runtime_error("lab backend failed to start: " + lab->failure(b));
                text = read_file(lab->config_path(spec.servers.front())) + spec.extra_options;
            }
            std::ofstream(t.config) << text;
            t.capabilities = dlock::client::open(t.config.string()).capabilities();
        } catch (const std::exception& e) {
            target_errors[spec.name] = e.what();
            std::printf("fault_suite: target %s unusable: %s\n", spec.name.c_str(), e.what());
        }
        targets[spec.name] = t;
    }

    std::vector<cell_result> results;
    // (scenario, target) pairs whose target lacks the capabilities the scenario needs: not cells.
    std::vector<std::string> not_cells;
    size_t index = 0;
    for (const auto& p : plan) {
        ++index;
        const target& t = targets.at(p.expected.target);
        if (const uint64_t needs = p.which->requires_capabilities;
            needs && !target_errors.count(t.name) && (t.capabilities & needs) != needs) {
            std::string missing;
            for (const auto& [bit, word] : std::vector<std::pair<uint64_t, const char*>>{
                     {DLOCK_CAP_SEMAPHORE, "SEMAPHORE"}, {DLOCK_CAP_SHARED, "SHARED"}, {DLOCK_CAP_FENCING, "FENCING"},
                     {DLOCK_CAP_LIST, "LIST"}, {DLOCK_CAP_BREAK, "BREAK"}})
                if ((needs & bit) && !(t.capabilities & bit)) missing += (missing.empty() ? "" : ", ") + std::string(word);
            not_cells.push_back(fmt::format("{} on {}: no {}", p.which->id(), t.name, missing.empty() ? "capability" : missing));
            std::printf("[%zu/%zu] scenario %s on %s: not a cell (the target's client reports no %s)\n", index, plan.size(),
                        p.which->id().c_str(), t.name.c_str(), missing.c_str());
            continue;
        }
        std::printf("[%zu/%zu] scenario %s (%s) on %s, expected %s\n", index, plan.size(), p.which->id().c_str(),
                    p.which->title.c_str(), t.name.c_str(), std::string(verdict_name(p.expected.expected)).c_str());
        std::fflush(stdout);
        cell_result r;
        if (target_errors.count(t.name)) {
            r.scenario_id = p.which->id();
            r.scenario_number = p.which->number;
            r.title = p.which->title;
            r.target = t.name;
            r.expected = p.expected.expected;
            r.errored = true;
            r.error = "target unusable: " + target_errors[t.name];
        } else {
            // Leave the servers as a fresh cell expects them: running, unpaused, empty.
            if (lab) {
                for (auto* server : lab->servers()) {
                    try {
                        if (server->paused()) server->resume();
                        if (!server->running()) server->restart(dlock::lab::data_policy::keep);
                    } catch (const std::exception& e) {
                        std::printf("  (could not restore %s: %s)\n", server->name().c_str(), e.what());
                    }
                }
                for (auto b : t.servers) {
                    try {
                        lab->reset(b, b == dlock::lab::backend::sql || b == dlock::lab::backend::mariadb);
                    } catch (const std::exception& e) {
                        std::printf("  (reset of %s failed: %s)\n", std::string(dlock::lab::backend_name(b)).c_str(), e.what());
                    }
                }
            }
            cell_setup setup;
            setup.which = p.which;
            setup.expected = p.expected;
            setup.tgt = &t;
            setup.lab = lab.get();
            setup.size = soak ? run_size::soak : run_size::ci;
            setup.dir = out / "cells" / (p.which->id() + "-" + t.name);
            fs::create_directories(setup.dir);
            setup.seed = seed + index;
            setup.log = [](const std::string& line) {
                std::printf("  %s\n", line.c_str());
                std::fflush(stdout);
            };
            r = run_cell(setup);
        }
        std::printf("  -> %s: found %s, expected %s; %s violations; %llu acquisitions, %llu histories, %llu faults; %.1f s%s\n",
                    outcome_text(r).c_str(), std::string(verdict_name(r.found)).c_str(),
                    std::string(verdict_name(r.expected)).c_str(), violations_text(r.violations).c_str(),
                    (unsigned long long)r.acquisitions, (unsigned long long)r.histories, (unsigned long long)r.faults,
                    r.seconds, r.errored ? (" ERROR: " + r.error).c_str() : "");
        if (!r.note.empty()) std::printf("     note: %s\n", r.note.c_str());
        for (const auto& f : r.failed_requirements) std::printf("     FAILED: %s\n", f.c_str());
        if (r.found != r.expected)
            for (const auto& v : r.violation_examples) std::printf("     violation: %s\n", v.c_str());
        std::fflush(stdout);
        results.push_back(r);
    }

    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
    print_table(results);
    print_lost_detection(results);

    nlohmann::json doc;
    doc["size"] = soak ? "soak" : "ci";
    doc["seed"] = seed;
    doc["seconds"] = seconds;
    doc["cells"] = nlohmann::json::array();
    for (const auto& r : results) doc["cells"].push_back(to_json(r));
    doc["not_cells"] = not_cells;
    std::ofstream(out / "guarantees.json") << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    std::string not_cells_md;
    if (!not_cells.empty()) {
        not_cells_md = "\nNot cells (the target's client lacks the mode the scenario needs):\n";
        for (const auto& n : not_cells) not_cells_md += "- " + n + "\n";
        std::printf("%s", not_cells_md.c_str());
    }
    std::ofstream(out / "guarantees.md") << markdown(results, soak ? "soak" : "ci", seconds) << not_cells_md;
    if (soak) {
        const std::string table = soak_markdown(results, acquisitions, seconds);
        std::ofstream(out / "soak.md") << table;
        std::printf("\n%s", table.c_str());
    }

    const auto failed = std::count_if(results.begin(), results.end(), [](const cell_result& r) { return !r.passed(); });
    std::printf("\nfault_suite: %zu cells, %zd failed, %.0f s; wrote %s/guarantees.{json,md}\n", results.size(),
                (ssize_t)failed, seconds, out.c_str());
    if (lab) {
        const auto report = lab->teardown();
        if (!report.survivors.empty()) std::printf("fault_suite: %zu lab processes survived teardown\n", report.survivors.size());
    }
    return failed ? 1 : 0;
}
