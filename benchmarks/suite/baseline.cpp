// baseline.cpp — the "no regression" targets: an earlier report's S1/floor, S2 and peer ratios,
// read back from its markdown tables (report.cpp writes them), against this run's.
#include "baseline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace dlock::bench {

using nlohmann::json;

namespace {

// The cells of a markdown table row "| a | b | c |", trimmed; empty for any other line.
std::vector<std::string> cells_of(const std::string& line) {
    std::vector<std::string> cells;
    if (line.rfind("| ", 0) != 0) return cells;
    std::size_t start = 1;
    for (std::size_t bar; (bar = line.find(" |", start)) != std::string::npos; start = bar + 2) {
        std::string cell = line.substr(start, bar - start);
        const auto first = cell.find_first_not_of(' ');
        cells.push_back(first == std::string::npos ? "" : cell.substr(first));
    }
    return cells;
}

// The number a cell starts with ("1.03×", "14000"); NaN when it starts with none.
double leading_number(const std::string& cell) {
    const char* begin = cell.c_str();
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    return end == begin ? NAN : v;
}

double num(const json& j, const char* key) {
    if (!j.is_object() || !j.contains(key) || !j.at(key).is_number()) return NAN;
    return j.at(key).get<double>();
}

json row(const std::string& name, const std::string& value, json met, const std::string& note) {
    return json{{"target", name}, {"value", value}, {"met", std::move(met)}, {"note", note}};
}

}  // namespace

json read_baseline(const std::filesystem::path& report_md) {
    std::ifstream in(report_md);
    if (!in) return json{{"error", "cannot read " + report_md.string()}};
    json targets = json::object();
    std::string section, header;
    bool any = false;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("## ", 0) == 0) {
            section = line.substr(3);
            header.clear();
            continue;
        }
        const auto cells = cells_of(line);
        if (cells.empty()) continue;
        if (cells.front() == "backend") {
            header = line;
            continue;
        }
        if (cells.front().rfind("---", 0) == 0) continue;
        const std::string& backend = cells.front();
        if (section.rfind("Calibration", 0) == 0 && header.find("floor method") != std::string::npos && cells.size() >= 3) {
            targets[backend]["floor_method"] = cells[2];
            any = true;
        } else if (section.rfind("S1 ", 0) == 0 && cells.size() >= 8) {
            targets[backend]["s1_floor_ratio"] = leading_number(cells[7]);
            any = true;
        } else if (section.rfind("S2 ", 0) == 0 && cells.size() >= 3) {
            targets[backend]["s2"][cells[1]] = leading_number(cells[2]);
            any = true;
        } else if (section.rfind("S8 ", 0) == 0 && header.find("| peer | settings | version |") != std::string::npos && cells.size() >= 10 &&
                   cells[9] == "ok") {
            targets[backend]["peers"][cells[1] + "|" + cells[2]] = leading_number(cells[7]);
            any = true;
        }
    }
    if (!any) return json{{"error", report_md.string() + " holds no S1, S2 or S8 table"}};
    return json{{"source", report_md.string()}, {"targets", targets}};
}

json regression_rows(const json& t, const json& baseline) {
    json rows = json::array();
    const std::string name = t.value("name", "");
    const std::string source = baseline.value("source", "the baseline");
    if (baseline.contains("error")) {
        rows.push_back(row("no regression vs the baseline report", "—", nullptr, baseline.at("error").get<std::string>()));
        return rows;
    }
    const json& base = baseline.at("targets").contains(name) ? baseline.at("targets").at(name) : json::object();
    if (base.empty()) {
        rows.push_back(row("no regression vs the baseline report", "—", nullptr, "no " + name + " in " + source));
        return rows;
    }
    // Each figure may fall 10 % short of the baseline's before it counts as a regression: runs of
    // one shared machine a day apart differ by that much with nothing changed.
    constexpr double tolerance = 0.10;

    {
        const json none = json::object();
        const double s1 = num(t.value("s1", none).value("latency", none), "p50_us");
        const double floor = num(t.value("calibration", none).value("floor", none), "p50_us");
        const double now = s1 / floor, before = num(base, "s1_floor_ratio");
        const std::string method = t.value("calibration", none).value("method", "");
        const std::string before_method = base.value("floor_method", "");
        // A ratio within the S1 target (≤ 1.10) is no regression whatever the baseline's was (a
        // baseline below 1.0 came from a floor that was not one).
        const std::string label = "no regression: S1 p50 / floor ≤ baseline's (+10 %) or ≤ 1.10";
        if (!before_method.empty() && !method.empty() && before_method != method)
            rows.push_back(row(label, fmt::format("{:.2f}× (baseline {:.2f}×)", now, before), nullptr,
                               "the floor was redefined since the baseline (was: " + before_method + "): not comparable"));
        else if (std::isnan(now) || std::isnan(before))
            rows.push_back(row(label, "—", nullptr, "not in this run or in " + source));
        else
            rows.push_back(row(label, fmt::format("{:.2f}× (baseline {:.2f}×)", now, before),
                               json(now <= std::max(before * (1 + tolerance), 1.10)), ""));
    }
    {
        std::string worst;
        double worst_share = NAN;
        for (const auto& p : t.value("s2", json::array())) {
            const std::string clients = fmt::format("{:.0f}", num(p, "clients"));
            if (!base.contains("s2") || !base.at("s2").contains(clients) || !base.at("s2").at(clients).is_number()) continue;
            const double share = num(p, "cycles_per_s") / base.at("s2").at(clients).get<double>();
            if (std::isnan(share)) continue;
            if (std::isnan(worst_share) || share < worst_share) {
                worst_share = share;
                worst = fmt::format("{:.0f} cycles/s at {} clients = {:.0f} % of the baseline's", num(p, "cycles_per_s"), clients, 100 * share);
            }
        }
        rows.push_back(row("no regression: S2 cycles/s ≥ baseline's (−10 %) at every client count", worst.empty() ? "—" : "worst " + worst,
                           std::isnan(worst_share) ? json(nullptr) : json(worst_share >= 1 - tolerance),
                           "absolute rates: a busier machine than the baseline's lowers them"));
    }
    {
        std::string worst;
        double worst_share = NAN;
        for (const auto& p : t.value("peers", json::array())) {
            const std::string key = p.value("peer", "") + "|" + p.value("settings", "");
            if (!p.value("ok", false) || !base.contains("peers") || !base.at("peers").contains(key)) continue;
            const double before = base.at("peers").at(key).is_number() ? base.at("peers").at(key).get<double>() : NAN;
            const double share = num(p, "ratio_p50") / before;
            if (std::isnan(share)) continue;
            if (std::isnan(worst_share) || share < worst_share) {
                worst_share = share;
                worst = fmt::format("{} {}: {:.2f}× (baseline {:.2f}×)", p.value("peer", ""), p.value("settings", "").substr(0, 7),
                                    num(p, "ratio_p50"), before);
            }
        }
        if (!worst.empty() || t.contains("peers"))
            rows.push_back(row("no regression: every peer ratio ≥ baseline's (−10 %)", worst.empty() ? "—" : "worst " + worst,
                               std::isnan(worst_share) ? json(nullptr) : json(worst_share >= 1 - tolerance), ""));
    }
    return rows;
}

}  // namespace dlock::bench
