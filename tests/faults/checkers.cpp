// checkers.cpp — the overlap and fencing checkers of the fault suite, over the workers' histories
// (history.hpp) and the fenced resource's log (resource_server.cpp).
#include <algorithm>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "framework.hpp"
#include "history.hpp"
#include "support.hpp"

namespace dlock::faults {

namespace {

// One acquisition as the histories show it.
struct hold {
    std::string name, owner, worker;
    uint64_t token = 0;
    int64_t acquired_ns = 0;
    int64_t end_ns = INT64_MAX;        // release invoked, or the worker killed, or still open
    int64_t valid_until_ns = INT64_MAX;
    char kind = 'x';                   // 'x' exclusive, 's' shared, 'p' a semaphore's permit
    uint32_t permits = 0;              // 'p': the limit N
};

// Reads every history and pairs each acquire-ok with its release-invoke (by owner token, fresh
// for every acquisition). A hold without a release ends when its worker was killed, else now.
std::vector<hold> read_holds(const check_inputs& in, check_report& report) {
    std::vector<hold> holds;
    if (!std::filesystem::exists(in.history_dir)) return holds;
    for (const auto& entry : std::filesystem::directory_iterator(in.history_dir)) {
        if (entry.path().extension() != ".jsonl") continue;
        ++report.histories;
        const std::string label = entry.path().stem().string();
        const auto killed = in.killed_at.find(label);
        const int64_t open_end = killed != in.killed_at.end() ? killed->second : in.now_ns;
        std::map<std::string, size_t> open_by_owner;  // owner -> index in holds
        for (const auto& e : read_history_file(entry.path().string())) {
            if (e.op == "acquire" && e.type == "ok") {
                hold h;
                h.name = e.name;
                h.owner = e.owner;
                h.worker = label;
                h.token = e.token;
                h.acquired_ns = e.t_ns;
                h.end_ns = open_end;
                h.valid_until_ns = e.valid_until_ns ? e.valid_until_ns : INT64_MAX;
                h.kind = e.kind;
                h.permits = e.permits;
                open_by_owner[e.owner] = holds.size();
                holds.push_back(h);
            } else if (e.op == "acquire" && e.type == "fail") {
                if (e.status == "timeout") ++report.timeouts;
                else ++report.failures;
            } else if (e.type == "unknown") {
                ++report.unknowns;
            } else if (e.op == "release" && e.type == "invoke") {
                const auto it = open_by_owner.find(e.owner);
                if (it != open_by_owner.end()) {
                    holds[it->second].end_ns = e.t_ns;
                    open_by_owner.erase(it);
                }
            }
        }
    }
    report.acquisitions = holds.size();
    return holds;
}

void note_example(check_findings& out, const std::string& text) {
    if (out.examples.size() < 5) out.examples.push_back(text);
    if (out.report.first_problem.empty()) out.report.first_problem = text;
}

// Checker 1 for a semaphore or a shared lock: the count of grant intervals held at one instant
// (acquire-ok … release-invoke, half-open) must stay within the mode — at most N permits; never an
// exclusive holder beside any other — cut at valid_until (the contract) and uncut. Tokens must
// still be unique per grant; their order is not checked (permits and shared holds are granted
// side by side, so acquisition order and token order may differ without anything wrong).
void check_counts(const std::string& name, std::vector<test::interval> intervals, uint32_t permits, bool fencing,
                  check_findings& out) {
    auto judge = [&](const std::vector<test::interval>& list) {
        return permits > 0 ? test::check_at_most(list, permits) : test::check_shared_exclusion(list);
    };
    const auto cut = judge(intervals);
    out.report.overlaps += cut.violations;
    out.report.max_holders = std::max(out.report.max_holders, cut.max_holders);
    if (!cut.first_problem.empty()) note_example(out, name + ": " + cut.first_problem);
    for (auto& i : intervals) i.valid_until_ns = INT64_MAX;
    const auto uncut = judge(intervals);
    out.report.overlaps_uncut += uncut.violations;
    out.report.max_holders = std::max(out.report.max_holders, uncut.max_holders);
    if (uncut.violations && out.examples.size() < 5)
        out.examples.push_back(name + " (ignoring valid_until): " + uncut.first_problem);
    if (fencing) {
        std::map<uint64_t, int> seen;
        for (const auto& i : intervals)
            if (++seen[i.fence] == 2) ++out.report.duplicate_tokens;
    }
}

// Checker 1: per name, holds must not overlap — cut at valid_until (the contract), and uncut
// (acquire-ok … release-invoke, what a holder that never looks at its validity does). A name
// held as a semaphore or shared goes to check_counts.
void check_overlaps(const std::vector<hold>& holds, bool fencing, check_findings& out) {
    std::map<std::string, std::vector<test::interval>> by_name;
    std::map<std::string, uint32_t> permits_of;  // names held as a semaphore: the largest limit seen
    std::map<std::string, bool> shared_seen;
    for (const auto& h : holds) {
        test::interval i;
        i.fence = h.token;
        i.acquired_ns = h.acquired_ns;
        i.released_ns = h.end_ns;
        i.valid_until_ns = h.valid_until_ns;
        i.who = h.worker;
        i.kind = h.kind;
        by_name[h.name].push_back(i);
        if (h.kind == 'p') permits_of[h.name] = std::max(permits_of[h.name], h.permits);
        if (h.kind == 's') shared_seen[h.name] = true;
    }
    for (auto& [name, intervals] : by_name) {
        if (permits_of.count(name) || shared_seen.count(name)) {
            check_counts(name, intervals, permits_of.count(name) ? permits_of[name] : 0, fencing, out);
            continue;
        }
        const auto cut = test::check_mutual_exclusion(intervals, fencing);
        out.report.overlaps += cut.overlaps;
        out.report.token_inversions += cut.fence_inversions;
        if (!cut.first_problem.empty()) note_example(out, name + ": " + cut.first_problem);
        for (auto& i : intervals) i.valid_until_ns = INT64_MAX;
        const auto uncut = test::check_mutual_exclusion(intervals, false);
        out.report.overlaps_uncut += uncut.overlaps;
        if (uncut.overlaps && out.examples.size() < 5)
            out.examples.push_back(name + " (ignoring valid_until): " + uncut.first_problem);
        if (fencing) {
            std::map<uint64_t, int> seen;
            for (const auto& i : intervals)
                if (++seen[i.fence] == 2) ++out.report.duplicate_tokens;
        }
    }
}

// Checker 2 (the part the resource cannot judge alone): an accepted write whose token is below
// the token of an acquisition of the same name that had already completed — the resource had
// not yet heard of the newer holder, so the stale write got through.
void check_stale_writes(const check_inputs& in, const std::vector<hold>& holds, check_findings& out) {
    if (in.resource_log.empty() || !std::filesystem::exists(in.resource_log) || !in.fencing) return;
    // Per name: acquisitions by time, with the highest token issued up to each.
    // Only names held exclusively: a permit's or shared holder's token is judged by the resource's
    // `fence` rule (resource_server.cpp), since tokens do not order holders that may hold together.
    std::map<std::string, std::vector<std::pair<int64_t, uint64_t>>> issued;
    std::map<std::string, bool> mode_names;
    for (const auto& h : holds)
        if (h.kind != 'x') mode_names[h.name] = true;
    for (const auto& h : holds)
        if (!mode_names.count(h.name)) issued[h.name].push_back({h.acquired_ns, h.token});
    for (auto& [name, list] : issued) {
        std::sort(list.begin(), list.end());
        for (size_t i = 1; i < list.size(); ++i) list[i].second = std::max(list[i].second, list[i - 1].second);
    }
    std::ifstream log(in.resource_log);
    for (std::string line; std::getline(log, line);) {
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || j.value("op", "") != "write" || !j.value("accepted", false)) continue;
        const auto it = issued.find(j.value("res", ""));
        if (it == issued.end()) continue;
        const int64_t t = j.value("t", int64_t(0));
        const uint64_t token = j.value("token", uint64_t(0));
        const auto& list = it->second;
        auto after = std::upper_bound(list.begin(), list.end(), std::make_pair(t, UINT64_MAX));
        if (after == list.begin()) continue;
        const uint64_t newest = std::prev(after)->second;
        if (token < newest) {
            ++out.stale_writes_accepted;
            note_example(out, fmt::format("{}: write with token {} by {} accepted after token {} was issued", it->first,
                                          token, j.value("owner", ""), newest));
        }
    }
}

}  // namespace

check_findings run_checkers(const check_inputs& in) {
    check_findings out;
    const auto holds = read_holds(in, out.report);
    check_overlaps(holds, in.fencing, out);
    check_stale_writes(in, holds, out);
    out.report.resource = in.resource;
    if (in.resource.lost_updates && out.examples.size() < 5)
        out.examples.push_back(fmt::format("resource: {} lost updates of the read-sleep-write counter", in.resource.lost_updates));
    if (in.resource.shared_tokens && out.examples.size() < 5)
        out.examples.push_back(fmt::format("resource: {} tokens used by two owners", in.resource.shared_tokens));
    return out;
}

}  // namespace dlock::faults
