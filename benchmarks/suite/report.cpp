// report.cpp — report.json, samples.json, the plots and report.md of the comparison suite.
#include "report.hpp"

#include "baseline.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sys/utsname.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <tuple>

namespace dlock::bench {

using nlohmann::json;

namespace {

// A number of `j` (NaN when absent or null: NaN is stored as null in JSON).
double num(const json& j, const char* key) {
    if (!j.is_object()) return NAN;
    const auto it = j.find(key);
    if (it == j.end() || !it->is_number()) return NAN;
    return it->get<double>();
}
double num(const json& j, const char* outer, const char* key) {
    if (!j.is_object() || !j.contains(outer)) return NAN;
    return num(j.at(outer), key);
}
std::string str(const json& j, const char* key) {
    if (!j.is_object() || !j.contains(key) || !j.at(key).is_string()) return "";
    return j.at(key).get<std::string>();
}

// Microseconds as a table shows them: 3 significant digits up to 1000, whole numbers above.
std::string us(double v) {
    if (std::isnan(v)) return "—";
    if (v >= 1000) return fmt::format("{:.0f}", v);
    if (v >= 100) return fmt::format("{:.0f}", v);
    if (v >= 10) return fmt::format("{:.1f}", v);
    return fmt::format("{:.2f}", v);
}
std::string ratio(double v) { return std::isnan(v) ? "—" : fmt::format("{:.2f}×", v); }
std::string plain(double v, int decimals = 2) { return std::isnan(v) ? "—" : fmt::format("{:.{}f}", v, decimals); }
std::string met_text(const json& met) { return met.is_boolean() ? (met.get<bool>() ? "met" : "**missed**") : "not measured"; }

// First line of a command's output, "" when it failed.
std::string first_line_of(const std::string& command) {
    std::string out;
    if (FILE* pipe = ::popen((command + " 2>/dev/null").c_str(), "r")) {
        std::array<char, 512> buffer{};
        if (std::fgets(buffer.data(), buffer.size(), pipe)) out = buffer.data();
        ::pclose(pipe);
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out;
}

bool has_cap(const json& t, const char* cap) {
    if (!t.contains("capabilities")) return false;
    for (const auto& c : t.at("capabilities"))
        if (c == cap) return true;
    return false;
}

json target_row(const char* name, const std::string& value, json met, const std::string& note = "") {
    return json{{"target", name}, {"value", value}, {"met", std::move(met)}, {"note", note}};
}

// The single-redis p50 that Redlock's S7 row is compared with: the S7 row with one node if the
// probe measured one, else the redis target's S1 of this run.
double single_redis_p50(const json& run, const json& targets) {
    if (run.contains("s7"))
        for (const auto& row : run.at("s7"))
            if (num(row, "nodes") == 1 && !row.value("one_paused", false)) return num(row, "s1", "p50_us");
    for (const auto& t : targets)
        if (str(t, "name") == "redis") return num(t.value("s1", json::object()), "latency", "p50_us");
    return NAN;
}

}  // namespace

json to_json(const distribution& d) {
    return json{{"n", d.n}, {"p50_us", d.p50}, {"p99_us", d.p99}, {"p999_us", d.p999},
                {"mean_us", d.mean}, {"min_us", d.min}, {"max_us", d.max}};
}

json to_json(const calibration& c) {
    json ops = json::array();
    for (const auto& [name, d] : c.operations) ops.push_back(json{{"operation", name}, {"latency", to_json(d)}});
    return json{{"operations", ops}, {"fsync_us", c.fsync_us}, {"min_round_trips", c.min_round_trips},
                {"floor", to_json(c.floor)}, {"method", c.method}};
}

json to_json(const command_count& c) { return json{{"per_cycle", c.per_cycle}, {"minimum", c.minimum}, {"source", c.source}}; }

json to_json(const peer_result& p) {
    json j{{"backend", p.backend}, {"peer", p.peer}, {"settings", p.settings}, {"version", p.version}, {"ok", p.ok},
           {"error", p.error}, {"s1", to_json(p.s1)}, {"dlock_around", to_json(p.dlock_around)},
           {"ratio_p50", p.ok && !p.s1.empty() && !p.dlock_around.empty() ? p.s1.p50 / p.dlock_around.p50 : NAN}};
    if (p.handoff) j["handoff"] = to_json(*p.handoff);
    if (!p.dlock_python_around.empty() || !p.dlock_python_error.empty()) {
        j["dlock_python_around"] = to_json(p.dlock_python_around);
        j["dlock_python_error"] = p.dlock_python_error;
        j["ratio_python_p50"] = p.ok && !p.dlock_python_around.empty() ? p.s1.p50 / p.dlock_python_around.p50 : NAN;
    }
    return j;
}

json to_json(const redlock_row& r) {
    return json{{"nodes", r.nodes}, {"one_paused", r.one_paused}, {"s1", to_json(r.s1)}, {"ok", r.ok}, {"error", r.error}};
}

json floor_blocks_json(const s1_result& s1) {
    std::vector<double> floor_p50, s1_p50, ratios;
    for (const auto& b : s1.blocks) {
        floor_p50.push_back(b.floor_p50);
        s1_p50.push_back(b.s1_p50);
        ratios.push_back(b.s1_p50 / b.floor_p50);
    }
    const distribution f = summarize(floor_p50), r = summarize(ratios);
    return json{{"blocks", s1.blocks.size()}, {"floor_p50_us", floor_p50}, {"s1_p50_us", s1_p50},
                {"floor_p50_of_blocks_us", f.p50}, {"floor_min_block_p50_us", f.min}, {"floor_max_block_p50_us", f.max},
                {"ratio_min", r.min}, {"ratio_p50", r.p50}, {"ratio_max", r.max}};
}

json machine_info() {
    utsname u{};
    ::uname(&u);
    std::string cpu;
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);)
        if (line.rfind("model name", 0) == 0) {
            cpu = line.substr(line.find(':') + 2);
            break;
        }
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    return json{{"cores", ::sysconf(_SC_NPROCESSORS_ONLN)}, {"kernel", std::string(u.sysname) + " " + u.release},
                {"machine", u.machine}, {"cpu", cpu}, {"host", host},
                {"os", first_line_of(". /etc/os-release && echo \"$PRETTY_NAME\"")}};
}

json server_versions() {
    return json{
        {"redis", first_line_of("redis-server --version")},
        {"etcd", first_line_of("etcd --version")},
        {"zookeeper", first_line_of("dpkg-query -W -f='${Version}' zookeeper")},
        {"postgresql", first_line_of("$(ls -d /usr/lib/postgresql/*/bin/postgres | tail -1) --version")},
        {"java", first_line_of("java -version 2>&1 | head -1")},
        {"python3 (peers)", first_line_of("/usr/bin/python3 --version")},
        {"matplotlib", first_line_of("/usr/bin/python3 -c 'import matplotlib; print(matplotlib.__version__)'")},
    };
}

json evaluate_targets(const json& t, const json& run) {
    json rows = json::array();
    const json none = json::object();
    const json& s1 = t.value("s1", none);
    const json& cal = t.value("calibration", none);
    const double s1_p50 = num(s1.value("latency", none), "p50_us"), s1_p99 = num(s1.value("latency", none), "p99_us");
    const double floor_p50 = num(cal.value("floor", none), "p50_us"), floor_p99 = num(cal.value("floor", none), "p99_us");
    auto checked = [](double value, bool ok) { return std::isnan(value) ? json(nullptr) : json(ok); };

    const double r50 = s1_p50 / floor_p50, r99 = s1_p99 / floor_p99;
    {
        // The floor and S1 come from interleaved blocks; the note gives the floor's spread over
        // blocks, and says so when the ratio fell below 1.0 (the floor is a lower bound: that is a
        // noisy block, not a dlock faster than its floor).
        const json& fb = cal.value("floor_blocks", none);
        std::string note;
        if (fb.is_object() && num(fb, "blocks") > 0)
            note = fmt::format("{} interleaved blocks; floor block p50 {} µs (min {}, max {}); per-block S1/floor {}–{}",
                               plain(num(fb, "blocks"), 0), us(num(fb, "floor_p50_of_blocks_us")), us(num(fb, "floor_min_block_p50_us")),
                               us(num(fb, "floor_max_block_p50_us")), ratio(num(fb, "ratio_min")), ratio(num(fb, "ratio_max")));
        if (r50 < 1.0) note = "below 1.0: a noisy block moved the floor; " + note;
        rows.push_back(target_row("S1 p50 / floor p50 in [1.00, 1.10]", ratio(r50), checked(r50, r50 >= 1.0 && r50 <= 1.10), note));
    }
    rows.push_back(target_row("S1 p99 ≤ 1.5 × floor p99", ratio(r99), checked(r99, r99 <= 1.5)));

    const double per_cycle = num(t.value("commands", none), "per_cycle"), minimum = num(t.value("commands", none), "minimum");
    rows.push_back(target_row("server commands per cycle = minimum", plain(per_cycle) + " (min " + plain(minimum, 0) + ")",
                              checked(per_cycle + minimum, std::fabs(per_cycle - minimum) < 0.05)));

    const std::string name = str(t, "name");
    const json s3_points = t.value("s3", json::array());
    // The worst S3 point of `key` in `d` (highest value), with its waiter count.
    auto worst_s3 = [&](const char* key) {
        std::pair<double, double> worst{NAN, NAN};  // value, waiters
        for (const auto& p : s3_points) {
            const double v = num(p.value("handoff", none), key);
            if (!std::isnan(v) && (std::isnan(worst.first) || v > worst.first)) worst = {v, num(p, "waiters")};
        }
        return worst;
    };
    auto at_waiters = [&](const std::pair<double, double>& w) {
        return std::isnan(w.first) ? std::string("—") : us(w.first) + " µs (" + plain(w.second, 0) + " waiters)";
    };
    const double s4_p50 = num(t.value("s4", none).value("handoff", none), "p50_us");
    const double s4_p99 = num(t.value("s4", none).value("handoff", none), "p99_us");
    if (has_cap(t, "PUSH_WAIT") && name != "etcd")
        rows.push_back(target_row("S4 handoff p50 < 1 ms (push backends but etcd)", us(s4_p50) + " µs", checked(s4_p50, s4_p50 < 1000)));
    if (name == "redis" || name == "redlock" || name == "zookeeper" || name == "sql_lease" || name == "sql_advisory") {
        const auto worst = worst_s3("p50_us");
        rows.push_back(target_row("S3 handoff p50 < 1 ms at every waiter count", "worst " + at_waiters(worst),
                                  checked(worst.first, worst.first < 1000)));
    }
    if (name == "etcd") {
        const auto worst = worst_s3("p99_us");
        const double p99 = std::isnan(s4_p99) ? worst.first : std::isnan(worst.first) ? s4_p99 : std::max(worst.first, s4_p99);
        rows.push_back(target_row("etcd: no S3/S4 handoff p99 > 20 ms", fmt::format("S4 {} µs; S3 worst {}", us(s4_p99), at_waiters(worst)),
                                  checked(p99, p99 <= 20000)));
        double s2_one = NAN, s3_two = NAN;
        for (const auto& p : t.value("s2", json::array()))
            if (num(p, "clients") == 1) s2_one = num(p, "cycles_per_s");
        for (const auto& p : s3_points)
            if (num(p, "waiters") == 2 && std::isnan(s3_two)) s3_two = num(p, "cycles_per_s");
        const double share = s3_two / s2_one;
        rows.push_back(target_row("etcd: S3 cycles/s at 2 waiters ≥ ½ S2 single-client rate",
                                  fmt::format("{} / {} cycles/s = {}", plain(s3_two, 0), plain(s2_one, 0), ratio(share)),
                                  checked(share, share >= 0.5)));
        // The handoff's own work, as calibrated: the release's commit, then the woken waiter's one read.
        double release = NAN, read = NAN;
        for (const auto& op : cal.value("operations", json::array())) {
            const std::string what = str(op, "operation");
            if (what.rfind("Txn release", 0) == 0) release = num(op.value("latency", none), "p50_us");
            if (what.rfind("Txn queue read", 0) == 0) read = num(op.value("latency", none), "p50_us");
        }
        const double bound = 1.3 * (release + read);
        const auto worst50 = worst_s3("p50_us");
        const double handoff = std::isnan(s4_p50) ? worst50.first : std::isnan(worst50.first) ? s4_p50 : std::max(worst50.first, s4_p50);
        rows.push_back(target_row("etcd: handoff p50 ≤ 1.3 × (release commit + one read), as calibrated",
                                  fmt::format("S4 {} µs; S3 worst {}; bound {} µs", us(s4_p50), at_waiters(worst50), us(bound)),
                                  checked(handoff + bound, handoff <= bound)));
    }
    {
        // The herd detector at every S3 point: server operations per contended cycle against the
        // algorithm's minimum (contended_minimum in probes_common.cpp).
        double worst = NAN, worst_waiters = NAN, minimum = NAN;
        for (const auto& p : s3_points) {
            const double per = num(p, "ops_per_handoff", "per_cycle"), min = num(p, "ops_per_handoff", "minimum");
            if (std::isnan(per) || !(min > 0)) continue;
            if (std::isnan(worst) || per / min > worst / minimum) {
                worst = per;
                worst_waiters = num(p, "waiters");
                minimum = min;
            }
        }
        if (!std::isnan(worst))
            rows.push_back(target_row("server ops per handoff ≤ 2 × the algorithm's minimum (every S3 point)",
                                      fmt::format("worst {} (minimum {}) at {} waiters", plain(worst), plain(minimum, 0), plain(worst_waiters, 0)),
                                      json(worst <= 2 * minimum)));
    }
    {
        const bool fifo = has_cap(t, "FAIR");
        const double bound = fifo ? 0.99 : 0.95;
        double worst = NAN;
        for (const auto& p : t.value("s3", json::array())) {
            const double j = num(p, "jain");
            if (!std::isnan(j) && (std::isnan(worst) || j < worst)) worst = j;
        }
        rows.push_back(target_row(fifo ? "Jain ≥ 0.99 with fair: true (FAIR backend, worst S3 point, whole rounds)"
                                       : "Jain ≥ 0.95 (not FAIR, worst S3 point, whole rounds)",
                                  plain(worst, 4), checked(worst, worst >= bound)));
    }
    {
        double failures = 0;
        bool measured = false;
        for (const char* scenario : {"s2", "s3"})
            for (const auto& p : t.value(scenario, json::array())) {
                measured = true;
                failures += std::isnan(num(p, "release_failures")) ? 0 : num(p, "release_failures");
            }
        rows.push_back(target_row("every S2/S3 release returned `released`", fmt::format("{:.0f} failed", failures),
                                  measured ? json(failures == 0) : json(nullptr), failures > 0 ? "see workers.log" : ""));
    }
    if (t.contains("s5")) {
        bool measured = false, all_held = true;
        for (const auto& p : t.at("s5")) {
            measured = true;
            all_held = all_held && num(p, "held_after_window") == num(p, "leases");
        }
        rows.push_back(target_row("S5 every lease still held after a window longer than its ttl", all_held ? "all held" : "some lost",
                                  measured ? json(all_held) : json(nullptr)));
    }
    if (t.contains("s5")) {
        json met = nullptr;
        std::string value = "10 000 leases not measured at this size";
        for (const auto& p : t.at("s5")) {
            const double n = num(p, "leases"), cpu = num(p, "cpu_percent_of_core");
            value = fmt::format("{:.0f} leases: {} % of a core", n, plain(cpu));
            if (n >= 10000) met = checked(cpu, cpu < 5.0);
        }
        rows.push_back(target_row("S5 10 000 leases renewed with < 5 % of a core", value, met));
    }
    if (t.contains("s6")) {
        const json& s6 = t.at("s6");
        const double rec = num(s6, "recovery_ms"), bound = num(s6, "bound_ms"), allowance = num(s6, "allowance_ms");
        rows.push_back(target_row("S6 next holder within the backend's bound (+ allowance)",
                                  fmt::format("{} ms (bound {} + {} ms)", plain(rec, 1), plain(bound, 0), plain(allowance, 0)),
                                  checked(rec, rec <= bound + allowance)));
    }
    if (str(t, "name") == "redlock" && run.contains("s7")) {
        const double single = single_redis_p50(run, run.value("targets_for_s7", json::array()));
        double n5 = NAN;
        for (const auto& row : run.at("s7"))
            if (num(row, "nodes") == 5 && !row.value("one_paused", false)) n5 = num(row, "s1", "p50_us");
        const double r = n5 / single;
        rows.push_back(target_row("Redlock N=5 p50 ≤ 1.3 × single redis p50", ratio(r), checked(r, r <= 1.3)));
    }
    for (const auto& p : t.value("peers", json::array())) {
        if (str(p, "peer") == dlock_python_peer) continue;  // the binding, not a peer to beat: compared with the Python peers below
        const std::string label = "faster than " + str(p, "peer") + ", " + str(p, "settings");
        if (!p.value("ok", false)) {
            rows.push_back(target_row(label.c_str(), "peer failed", nullptr, str(p, "error")));
            continue;
        }
        const double r = num(p, "ratio_p50");
        rows.push_back(target_row(label.c_str(), ratio(r) + " (peer p50 / dlock p50)", checked(r, r > 1.0)));
    }
    // No regression against the baseline report (docs/benchmarks.md unless --baseline says).
    if (run.contains("baseline"))
        for (auto& r : regression_rows(t, run.at("baseline"))) rows.push_back(std::move(r));
    // dlock (Python) against each Python peer: its S1 measured right before and after the peer
    // (dlock_python_around), so both sides of the ratio saw the same load.
    for (const auto& p : t.value("peers", json::array())) {
        if (!p.contains("dlock_python_around")) continue;
        const std::string label = std::string(dlock_python_peer) + " faster than " + str(p, "peer") + ", " + str(p, "settings");
        const double r = num(p, "ratio_python_p50");
        if (std::isnan(r)) {
            rows.push_back(target_row(label.c_str(), "not measured", nullptr,
                                      str(p, "dlock_python_error").empty() ? "the peer failed" : str(p, "dlock_python_error")));
            continue;
        }
        rows.push_back(target_row(label.c_str(), ratio(r) + " (peer p50 / dlock (Python) p50 around it)", checked(r, r > 1.0)));
    }
    return rows;
}

namespace {

// "default" or "tuned": a peer's settings without their explanation, for the summary's narrow cell.
std::string settings_word(const std::string& settings) { return settings.substr(0, settings.find_first_of(" :(")); }

std::string summary_table(const json& targets) {
    std::string md = "| backend | S1 p50 / floor (≤ 1.10) | handoff p50 (S4) | Jain (worst S3) | vs peers (peer p50 / dlock p50; > 1 = dlock faster) | targets |\n"
                     "|---|---|---|---|---|---|\n";
    const json none = json::object();
    for (const auto& t : targets) {
        const double s1 = num(t.value("s1", none).value("latency", none), "p50_us");
        const double fl = num(t.value("calibration", none).value("floor", none), "p50_us");
        const double h = num(t.value("s4", none).value("handoff", none), "p50_us");
        double jain = NAN;
        for (const auto& p : t.value("s3", json::array())) {
            const double j = num(p, "jain");
            if (!std::isnan(j) && (std::isnan(jain) || j < jain)) jain = j;
        }
        std::string peers;
        for (const auto& p : t.value("peers", json::array())) {
            if (!peers.empty()) peers += "; ";
            if (str(p, "peer") == dlock_python_peer) {  // the binding: its cost over C++, not a peer ratio
                peers += str(p, "peer") + ": " + (p.value("ok", false) ? ratio(num(p, "ratio_p50")) + " the C++ p50" : "failed");
                continue;
            }
            peers += str(p, "peer") + " " + settings_word(str(p, "settings")) + ": " + (p.value("ok", false) ? ratio(num(p, "ratio_p50")) : "failed");
        }
        if (peers.empty()) peers = "—";
        int met = 0, missed = 0, unmeasured = 0;
        std::string missed_names;
        for (const auto& row : t.value("targets", json::array())) {
            if (!row.at("met").is_boolean()) ++unmeasured;
            else if (row.at("met").get<bool>()) ++met;
            else {
                ++missed;
                missed_names += (missed_names.empty() ? "" : ", ") + str(row, "target");
            }
        }
        std::string verdict = fmt::format("{} met, {} missed, {} not measured", met, missed, unmeasured);
        if (!missed_names.empty()) verdict += " — missed: " + missed_names;
        if (t.contains("errors") && !t.at("errors").empty()) verdict += fmt::format(" — {} scenario error(s)", t.at("errors").size());
        md += fmt::format("| {} | {} ({} / {} µs) | {} µs | {} | {} | {} |\n", str(t, "name"), ratio(s1 / fl), us(s1), us(fl), us(h),
                          plain(jain, 4), peers, verdict);
    }
    return md;
}

std::string dist_cells(const json& d) {
    return fmt::format("{} | {} | {} | {}", plain(num(d, "n"), 0), us(num(d, "p50_us")), us(num(d, "p99_us")), us(num(d, "p999_us")));
}

// Semaphores and shared locks (modes.hpp): S1 of a permit and of a shared hold against the floor
// and the exclusive S1 of the same run, the permits contention point, kazoo's recipes.
std::string modes_tables(const json& targets) {
    const json none = json::object();
    std::ostringstream md;
    md << "\n## Semaphores and shared locks\n\nS1 of one permit (a semaphore of 4 permits) and of one shared hold, uncontended, "
          "measured right after the exclusive S1; ratios against the target's floor p50 and its exclusive S1 p50.\n\n"
          "| backend | mode | n | p50 µs | p99 µs | p99.9 µs | p50 / floor p50 | p50 / exclusive S1 p50 | note |\n"
          "|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& t : targets) {
        const json modes = t.value("modes", none);
        for (const char* key : {"permit", "shared"}) {
            const json m = modes.value(key, none);
            md << "| " << str(t, "name") << " | " << key << " | " << dist_cells(m.value("latency", none)) << " | "
               << ratio(num(m, "ratio_to_floor")) << " | " << ratio(num(m, "ratio_to_lock_s1")) << " | " << str(m, "skipped") << " |\n";
        }
    }
    md << "\n### Contention: 4 permits, 32 contenders, critical section 0\n\nHandoff: in time order the k-th release enables the "
          "(k + 4)-th grant; a sample is that grant's return minus that release's call (the releaser taking a permit straight back "
          "is counted apart). Jain over the per-contender counts of the window.\n\n"
          "| backend | cycles/s | handoff n | p50 µs | p99 µs | p99.9 µs | reacquired by releaser | Jain | releases not `released` | note |\n"
          "|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& t : targets) {
        const json p = t.value("modes", none).value("permits_contention", none);
        md << "| " << str(t, "name") << " | " << plain(num(p, "cycles_per_s"), 0) << " | " << dist_cells(p.value("handoff", none)) << " | "
           << plain(num(p, "reacquired_by_releaser")) << " | " << plain(num(p, "jain"), 3) << " | " << plain(num(p, "release_failures"), 0)
           << " | " << str(p, "skipped") << " |\n";
    }
    bool kazoo = false;
    for (const auto& t : targets) kazoo = kazoo || t.value("modes", none).contains("kazoo");
    if (kazoo) {
        md << "\n### Peers: kazoo's Semaphore, ReadLock and WriteLock (S1)\n\ntooz offers neither semaphores nor read-write "
              "locks through its coordinator API (only `get_lock`), so it has no row here.\n\n"
              "| backend | peer | version | n | p50 µs | p99 µs | p99.9 µs | dlock p50 µs (same mode) | ratio (peer / dlock) | status |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n";
        for (const auto& t : targets) {
            const json modes = t.value("modes", none);
            if (!modes.contains("kazoo")) continue;
            const json k = modes.at("kazoo");
            const double dlock_permit = num(modes.value("permit", none).value("latency", none), "p50_us");
            const double dlock_shared = num(modes.value("shared", none).value("latency", none), "p50_us");
            const double dlock_lock = num(t.value("s1", none).value("latency", none), "p50_us");
            for (const auto& [key, peer, dlock_p50] : std::vector<std::tuple<const char*, const char*, double>>{
                     {"semaphore", "kazoo Semaphore (4 leases)", dlock_permit},
                     {"read", "kazoo ReadLock", dlock_shared},
                     {"write", "kazoo WriteLock", dlock_lock}}) {
                const json part = k.value(key, none);
                const double p50 = num(part.value("latency", none), "p50_us");
                md << "| " << str(t, "name") << " | " << peer << " | " << str(k, "version") << " | "
                   << dist_cells(part.value("latency", none)) << " | " << us(dlock_p50) << " | " << ratio(p50 / dlock_p50) << " | "
                   << (part.contains("error") ? "**failed**: " + str(part, "error") : std::string("ok")) << " |\n";
            }
        }
    }
    return md.str();
}

// Where the client and the servers ran during S1, its floor, the modes' S1 and the peers
// (placement.hpp), and which targets were placed.
std::string placement_text(const json& report) {
    const json none = json::object();
    const json& p = report.value("placement", none);
    const std::string mode = str(p, "mode");
    std::vector<std::string> placed, unplaced;
    for (const auto& t : report.at("targets")) {
        const json& tp = t.value("placement", none);
        if (!tp.contains("mode")) continue;  // not measured (its server did not start)
        const bool is_placed = str(tp, "mode") != "none";
        std::string entry = str(t, "name");
        if (is_placed && tp.contains("problems"))
            entry += " (not every thread pinned: " + tp.at("problems").dump() + ")";
        (is_placed ? placed : unplaced).push_back(entry);
    }
    std::ostringstream text;
    text << "CPU placement during S1, its floor, the modes' S1 and the peers (S2–S6 run where the scheduler puts them): ";
    if (mode == "same" || mode == "across") {
        text << (mode == "same" ? fmt::format("**same CPU**: the driver (every thread, and the peer processes it starts) and the "
                                              "target's servers (every thread, PostgreSQL's backends included) on CPU {}",
                                              plain(num(p, "client_cpu"), 0))
                                : fmt::format("**across CPUs**: the driver (every thread, and the peer processes it starts) on CPU {}, "
                                              "the target's servers (every thread, PostgreSQL's backends included) on CPU {}",
                                              plain(num(p, "client_cpu"), 0), plain(num(p, "server_cpu"), 0)))
             << ", so that S1, the floor and each peer, each on a connection of its own, meet the same round-trip cost. Placed: "
             << (placed.empty() ? "none" : fmt::format("{}", fmt::join(placed, ", "))) << "; left to the scheduler: "
             << (unplaced.empty() ? "none" : fmt::format("{}", fmt::join(unplaced, ", "))) << ".";
    } else {
        text << "**none** (the scheduler's choice; a connection keeps the placement it got"
             << (p.contains("why") ? ": " + str(p, "why") : std::string()) << ").";
    }
    return text.str();
}

std::string scenario_tables(const json& report) {
    const json none = json::object();
    const json& targets = report.at("targets");
    std::ostringstream md;

    md << "## Calibration (floors)\n\n| backend | operation | n | p50 µs | p99 µs | p99.9 µs |\n|---|---|---|---|---|---|\n";
    for (const auto& t : targets) {
        const json& cal = t.value("calibration", none);
        for (const auto& op : cal.value("operations", json::array()))
            md << "| " << str(t, "name") << " | " << str(op, "operation") << " | " << dist_cells(op.value("latency", none)) << " |\n";
        md << "| " << str(t, "name") << " | **floor cycle** (" << plain(num(cal, "min_round_trips"), 0) << " round trips) | "
           << dist_cells(cal.value("floor", none)) << " |\n";
        const json& fb = cal.value("floor_blocks", none);
        if (fb.is_object() && num(fb, "blocks") > 0)
            md << "| " << str(t, "name") << " | floor spread over " << plain(num(fb, "blocks"), 0) << " blocks interleaved with S1: "
               << "p50 of block p50s " << us(num(fb, "floor_p50_of_blocks_us")) << ", min " << us(num(fb, "floor_min_block_p50_us"))
               << ", max " << us(num(fb, "floor_max_block_p50_us")) << "; per-block S1/floor " << ratio(num(fb, "ratio_min")) << "–"
               << ratio(num(fb, "ratio_max")) << " | | | | |\n";
    }
    md << "\n| backend | fsync µs | floor method |\n|---|---|---|\n";
    for (const auto& t : targets) {
        const json& cal = t.value("calibration", none);
        md << "| " << str(t, "name") << " | " << us(num(cal, "fsync_us")) << " | " << str(cal, "method") << " |\n";
    }

    md << "\n## S1 uncontended acquire+release (Google Benchmark, one sample per cycle)\n\n"
          "| backend | n | p50 µs | p99 µs | p99.9 µs | floor p50 | floor p99 | p50 / floor (≤ 1.10) | p99 / floor p99 (≤ 1.5) | server commands / cycle (minimum) | counted by |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& t : targets) {
        const json& lat = t.value("s1", none).value("latency", none);
        const json& fl = t.value("calibration", none).value("floor", none);
        const json& cmd = t.value("commands", none);
        md << "| " << str(t, "name") << " | " << dist_cells(lat) << " | " << us(num(fl, "p50_us")) << " | " << us(num(fl, "p99_us"))
           << " | " << ratio(num(lat, "p50_us") / num(fl, "p50_us")) << " | " << ratio(num(lat, "p99_us") / num(fl, "p99_us")) << " | "
           << plain(num(cmd, "per_cycle")) << " (" << plain(num(cmd, "minimum"), 0) << ") | " << str(cmd, "source") << " |\n";
    }
    md << "\n![S1 latency CDF](s1_latency_cdf.svg)\n";

    md << "\n## S2 throughput, distinct names\n\n| backend | clients | cycles/s | client CPU µs / cycle | releases not `released` |\n|---|---|---|---|---|\n";
    for (const auto& t : targets)
        for (const auto& p : t.value("s2", json::array()))
            md << "| " << str(t, "name") << " | " << plain(num(p, "clients"), 0) << " | " << plain(num(p, "cycles_per_s"), 0) << " | "
               << us(num(p, "cpu_us_per_cycle")) << " | " << plain(num(p, "release_failures"), 0) << " |\n";
    md << "\n![S2 throughput vs clients](s2_throughput.svg)\n";

    md << "\n## S3 contention, one name\n\nA waiter is a worker process, or beyond 32 waiters one of the threads of a worker "
          "process (threads share their process's client). Handoff: a holder's release call → another waiter's acquire returning, "
          "merged over every waiter on the shared monotonic clock; a releaser that gets the lock straight back (barging) is no handoff "
          "and is counted apart. Jain's index is taken over the first whole rounds (rounds × waiters acquisitions in time order), "
          "so that the round the window cuts short does not mark a FIFO unfair; the whole window's index is beside it. "
          "Server operations per contended cycle (the herd detector): the server's own count around a fixed "
          "number of contended cycles (first critical-section size only), on a name used once before (a name's first use is not "
          "a handoff's cost), against the algorithm's minimum per handoff "
          "(benchmarks/suite/probes_common.cpp, contended_minimum).\n\n"
          "| backend | waiters (processes × threads) | critical section µs | cycles/s | handoff n | p50 µs | p99 µs | p99.9 µs | releaser got it back | Jain over whole rounds (rounds; whole window) | server ops / contended cycle (minimum) | counted by | releases not `released` |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& t : targets)
        for (const auto& p : t.value("s3", json::array()))
            md << "| " << str(t, "name") << " | " << plain(num(p, "waiters"), 0) << " (" << plain(num(p, "processes"), 0) << " × "
               << plain(num(p, "threads"), 0) << ") | " << plain(num(p, "critical_us"), 0) << " | "
               << plain(num(p, "cycles_per_s"), 0) << " | " << dist_cells(p.value("handoff", none)) << " | "
               << plain(100 * num(p, "reacquired_by_releaser"), 1) << " % | " << plain(num(p, "jain"), 4) << " ("
               << plain(num(p, "jain_rounds"), 0) << " rounds; window " << plain(num(p, "jain_window"), 4) << ")"
               << " | " << plain(num(p, "ops_per_handoff", "per_cycle")) << " (" << plain(num(p, "ops_per_handoff", "minimum"), 0) << ") | "
               << str(p.value("ops_per_handoff", none), "source") << " | "
               << plain(num(p, "release_failures"), 0) << " |\n";
    md << "\n![S3 handoff vs waiters](s3_handoff.svg)\n";

    md << "\n## S4 ping-pong handoff, two processes\n\n| backend | n | p50 µs | p99 µs | p99.9 µs | p50 / floor p50 | peers' handoff p50 µs |\n|---|---|---|---|---|---|---|\n";
    for (const auto& t : targets) {
        const json& h = t.value("s4", none).value("handoff", none);
        std::string peers;
        for (const auto& p : t.value("peers", json::array()))
            if (p.contains("handoff")) peers += (peers.empty() ? "" : "; ") + str(p, "peer") + " " + str(p, "settings") + ": " + us(num(p.at("handoff"), "p50_us"));
        md << "| " << str(t, "name") << " | " << dist_cells(h) << " | "
           << ratio(num(h, "p50_us") / num(t.value("calibration", none).value("floor", none), "p50_us")) << " | " << (peers.empty() ? "—" : peers) << " |\n";
    }

    md << "\n## S5 renewal load (auto-renewed leases in one client process)\n\nA lease still HELD after a window longer than its ttl "
          "was renewed. Server commands/s: the server's own count over the window (every command, renewals and anything else).\n\n"
          "| backend | leases | acquired | held after window | acquire s | window s | client CPU % of a core | server commands/s | counted by |\n"
          "|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& t : targets) {
        if (t.contains("s5_skipped")) md << "| " << str(t, "name") << " | " << str(t, "s5_skipped") << " | | | | | | | |\n";
        for (const auto& p : t.value("s5", json::array()))
            md << "| " << str(t, "name") << " | " << plain(num(p, "leases"), 0) << " | " << plain(num(p, "acquired"), 0) << " | "
               << plain(num(p, "held_after_window"), 0) << " | " << plain(num(p, "acquire_s")) << " | " << plain(num(p, "window_s")) << " | "
               << plain(num(p, "cpu_percent_of_core")) << " | " << plain(num(p, "server_commands_per_s"), 1) << " | "
               << str(p, "server_count_source") << " |\n";
    }

    md << "\n## S6 recovery: holder SIGKILLed while another process waits\n\n"
          "| backend | granted ttl ms | bound ms | recovery ms | within bound + allowance |\n|---|---|---|---|---|\n";
    for (const auto& t : targets) {
        if (!t.contains("s6")) continue;
        const json& s = t.at("s6");
        md << "| " << str(t, "name") << " | " << plain(num(s, "granted_ttl_ms"), 0) << " | " << plain(num(s, "bound_ms"), 0) << " | "
           << plain(num(s, "recovery_ms"), 1) << " | " << (s.value("met", false) ? "yes" : "**no**") << " (+" << plain(num(s, "allowance_ms"), 0) << " ms) |\n";
    }

    if (report.contains("s7")) {
        const double single = single_redis_p50(report, targets);
        md << "\n## S7 Redlock: N nodes, healthy and one paused\n\n| nodes | one paused | n | p50 µs | p99 µs | p99.9 µs | p50 / single redis p50 | error |\n|---|---|---|---|---|---|---|---|\n";
        for (const auto& r : report.at("s7"))
            md << "| " << plain(num(r, "nodes"), 0) << " | " << (r.value("one_paused", false) ? "yes" : "no") << " | " << dist_cells(r.value("s1", none))
               << " | " << ratio(num(r.value("s1", none), "p50_us") / single) << " | " << str(r, "error") << " |\n";
    }

    md << "\n## S8 peers on the same servers\n\nRatio = peer p50 / dlock p50 measured right around the peer (> 1: dlock faster). "
          "The row `" << dlock_python_peer << "` is dlock's own Python package (python/, ctypes over the C ABI): its ratio is the "
          "binding's cost over C++; the next table compares it with each Python peer.\n\n"
          "| backend | peer | settings | version | p50 µs | p99 µs | dlock p50 around | ratio | handoff p50 µs | status |\n"
          "|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& t : targets)
        for (const auto& p : t.value("peers", json::array()))
            md << "| " << str(t, "name") << " | " << str(p, "peer") << " | " << str(p, "settings") << " | " << str(p, "version") << " | "
               << us(num(p.value("s1", none), "p50_us")) << " | " << us(num(p.value("s1", none), "p99_us")) << " | "
               << us(num(p.value("dlock_around", none), "p50_us")) << " | " << ratio(num(p, "ratio_p50")) << " | "
               << us(num(p.value("handoff", none), "p50_us")) << " | " << (p.value("ok", false) ? "ok" : "**failed**: " + str(p, "error")) << " |\n";

    bool any_python_around = false;
    for (const auto& t : targets)
        for (const auto& p : t.value("peers", json::array())) any_python_around = any_python_around || p.contains("dlock_python_around");
    if (any_python_around) md << "\n### " << dlock_python_peer << " beside the Python peers\n\nEach Python peer ran between two blocks of dlock's Python "
          "package's S1 on the same target (benchmarks/peers/dlock_python.py); ratio = peer p50 / dlock (Python) p50 (> 1: dlock (Python) faster).\n\n"
          "| backend | peer | settings | peer p50 µs | dlock (Python) p50 around µs | ratio | note |\n|---|---|---|---|---|---|---|\n";
    for (const auto& t : targets)
        for (const auto& p : t.value("peers", json::array()))
            if (p.contains("dlock_python_around"))
                md << "| " << str(t, "name") << " | " << str(p, "peer") << " | " << str(p, "settings") << " | " << us(num(p.value("s1", none), "p50_us"))
                   << " | " << us(num(p.value("dlock_python_around", none), "p50_us")) << " | " << ratio(num(p, "ratio_python_p50")) << " | "
                   << str(p, "dlock_python_error") << " |\n";

    md << modes_tables(targets);

    md << "\n## Targets (docs/design/benchmarks.md), per backend\n\n| backend | target | value | result | note |\n|---|---|---|---|---|\n";
    for (const auto& t : targets)
        for (const auto& row : t.value("targets", json::array()))
            md << "| " << str(t, "name") << " | " << str(row, "target") << " | " << str(row, "value") << " | " << met_text(row.at("met")) << " | "
               << str(row, "note") << " |\n";

    bool any_error = false;
    std::ostringstream errors;
    for (const auto& t : targets) {
        // items() views the object it is called on: keep that object alive for the loop.
        const json target_errors = t.value("errors", json::object());
        for (const auto& [scenario, text] : target_errors.items()) {
            any_error = true;
            errors << "| " << str(t, "name") << " | " << scenario << " | " << text.get<std::string>() << " |\n";
        }
    }
    if (report.contains("lab_failures"))
        for (const auto& [backend, text] : report.at("lab_failures").items()) {
            any_error = true;
            errors << "| lab | " << backend << " | " << text.get<std::string>() << " |\n";
        }
    if (any_error) md << "\n## Errors\n\n| backend | scenario | error |\n|---|---|---|\n" << errors.str();
    return md.str();
}

std::string escape_cell(std::string s) {
    for (auto& c : s)
        if (c == '\n' || c == '|') c = ' ';
    return s;
}

}  // namespace

report_files write_report(json& report, const json& samples, const std::filesystem::path& dir, const std::filesystem::path& plots_script) {
    report_files files;
    for (auto& t : report.at("targets")) {
        json run_view = report;
        run_view["targets_for_s7"] = report.at("targets");
        t["targets"] = evaluate_targets(t, run_view);
        for (auto& row : t["targets"]) row["note"] = escape_cell(row.value("note", ""));
        if (t.contains("errors"))
            for (auto& [k, v] : t["errors"].items()) v = escape_cell(v.get<std::string>());
    }
    std::ofstream(dir / "report.json") << report.dump(2) << "\n";
    std::ofstream(dir / "samples.json") << samples.dump() << "\n";

    // Plots: plots.py reads report.json and samples.json and writes the SVGs next to them.
    const std::string command = "/usr/bin/python3 '" + plots_script.string() + "' '" + dir.string() + "' > '" + (dir / "plots.log").string() + "' 2>&1";
    const int status = std::system(command.c_str());
    files.plots_ok = status == 0;
    if (!files.plots_ok) {
        std::ifstream log(dir / "plots.log");
        std::stringstream text;
        text << log.rdbuf();
        files.plots_error = fmt::format("plots.py exited with status {}: {}", status, text.str());
    }

    files.summary = summary_table(report.at("targets"));
    std::ostringstream md;
    const json& m = report.at("machine");
    md << "# dlock comparison report\n\n"
       << "Run: " << str(report, "size") << " size, started " << str(report, "started_utc") << ", measuring took "
       << plain(num(report, "wall_s"), 0) << " s. Command: `" << str(report, "command") << "`\n\n"
       << "Machine: " << plain(num(m, "cores"), 0) << " cores, " << str(m, "cpu") << ", " << str(m, "kernel") << " (" << str(m, "machine") << "), "
       << str(m, "os") << ".\n\nServers and tools: ";
    bool first = true;
    for (const auto& [name, version] : report.at("servers").items()) {
        md << (first ? "" : "; ") << name << " `" << (version.get<std::string>().empty() ? "unknown" : version.get<std::string>()) << "`";
        first = false;
    }
    md << ".\n\nBaseline of the \"no regression\" targets: "
       << (report.contains("baseline") && report.at("baseline").contains("source") ? "`" + str(report.at("baseline"), "source") + "`"
           : report.contains("baseline") ? "none (" + str(report.at("baseline"), "error") + ")" : "none")
       << ".\n\n" << placement_text(report) << "\n\nFigures are from one shared machine where other work may run at the same time: compare ratios measured in "
          "this run, not absolute values across runs.\n\n## Summary\n\n"
       << files.summary << "\n";
    if (files.plots_ok) {
        md << "Plots: [S1 latency CDF](s1_latency_cdf.svg), [S2 throughput vs clients](s2_throughput.svg), "
              "[S3 handoff vs waiters](s3_handoff.svg).\n\n";
    } else {
        md << "**Plotting failed** — the plots linked below are missing. " << escape_cell(files.plots_error) << "\n\n";
    }
    md << scenario_tables(report);
    md << "\nRaw numbers: [report.json](report.json); S1 samples: [samples.json](samples.json); Google Benchmark output: "
          "`s1_<backend>.json`; worker processes' stderr: `workers.log`; the driver's own (client libraries' logs, the lab): `driver.log`.\n";
    files.markdown = dir / "report.md";
    std::ofstream(files.markdown) << md.str();
    return files;
}

}  // namespace dlock::bench
