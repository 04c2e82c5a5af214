// scenarios_partitions.cpp — docs/design/faults.md §16, real network partitions: the holder runs in the client
// namespace of a lab::partition (its own network namespaces, a veth pair, a relay to the servers),
// everyone else reaches the servers directly, and iptables cuts the holder's link:
//   16a holder cut from a single server (for Redlock, ZooKeeper and etcd: a minority of the nodes);
//   16b holder cut from the majority (Redlock 3 of 5, ZooKeeper 2 of 3, etcd 2 of 3);
//   16c asymmetric cut: the holder's requests reach the servers, the replies are dropped;
//   16d flapping link while the holder and a direct client contend.
// In 16a-16c the cut heals only after the ttl, once the direct client took the lock (or waited
// in vain): the old holder comes back to a lock that is gone — its fenced write is refused, its
// release is ALREADY_LOST and touches nothing, and its client acquires again.
// Each is judged by the overlap checker (the holder stops on LOST, so its hold ends at the earlier
// of valid_until and on_lost) and the fenced resource; the cut holder's state() must leave HELD
// before anyone else is granted its lock, and its on_lost must run within its bound (docs/design/contract.md:
// ttl/3 + one round trip after the lease's expiry). Lost-detection and liveness figures are
// recorded per cell.
//
// The relay and the server's view of a dead client: see lab/netns.hpp and partition_link.hpp.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dlock/lab/lab.hpp"
#include "dlock/lab/netns.hpp"
#include "partition_link.hpp"
#include "scenario_helpers.hpp"
#include "suite.hpp"

namespace dlock::faults {
namespace {

using namespace std::chrono_literals;
using namespace helpers;
using namespace links;
using lab::direction;

// When a cut holder must have reported LOST, counted from the cut (docs/design/contract.md: detection within ttl/3
// + one round trip of the lease's expiry; the last confirmed renewal may have been sent just before
// the cut, so the lease expires at most a ttl after it). Advisory locks have no ttl: the client's
// peer timeout is its documented detection time.
nanoseconds lost_bound(context& ctx, nanoseconds round_trip) {
    if (is_advisory(ctx)) return nanoseconds(kSqlPeerTimeout) + round_trip;
    return nanoseconds(ctx.tgt().ttl + ctx.tgt().ttl / 3) + round_trip;
}

// Noise allowance on a shared 2-core machine before a late LOST counts as a violation.
nanoseconds lost_margin(nanoseconds bound) { return std::max<nanoseconds>(500ms, bound / 4); }

// Records the cut holder's LOST latency; one later than its bound (plus noise) is a violation: an
// application that stops on LOST would still act as the holder.
// Returns whether it was late.
bool judge_lost(context& ctx, std::optional<int64_t> lost, int64_t cut_ns, nanoseconds round_trip, const std::string& what,
                bool count_late = true) {
    const nanoseconds bound = lost_bound(ctx, round_trip);
    if (!lost) return false;
    const nanoseconds measured(*lost - cut_ns);
    ctx.record_lost_detection(measured, bound);
    const bool late = measured > bound + lost_margin(bound);
    if (late && count_late)
        ctx.violation(violation_kind::other, what + ": LOST reported " + ms_text(double(measured.count()) / 1e6) +
                                                 " after the cut, above its bound of " + ms_text(double(bound.count()) / 1e6));
    return late;
}

// How long a direct client waits for the cut holder's lock: the backend's liveness limit (its
// documented bound for a holder gone silent, plus the noise margin) and a second; for advisory
// locks the server's own dead-peer detection comes first.
milliseconds takeover_wait(context& ctx) {
    const milliseconds base = is_advisory(ctx) ? milliseconds(server_tcp_settings(ctx).user_timeout) + 2s : 0ms;
    return base + ctx.tgt().liveness_limit() + 1s;
}

std::string cut_text(const std::vector<std::size_t>& cut, std::size_t servers) {
    if (cut.size() == servers) return servers == 1 ? "its server" : "all " + std::to_string(servers) + " servers";
    return std::to_string(cut.size()) + " of " + std::to_string(servers) + " servers";
}

// ---- 16a/16b/16c: one cut while a direct client waits for the lock ---------------------------------

// What the cut holder's lease said while B waited, polled from the suite.
struct holder_watch {
    std::optional<int64_t> lost;          // the on_lost callback ran
    std::optional<int64_t> not_held;      // first poll that saw state != held (suspect or lost)
    std::optional<int64_t> last_held;     // last poll that saw held
};

// A (in the client namespace) holds and writes; the link is cut (`cut` servers, `which` way); B
// (direct) waits for the lock. A behaves as an application should: on LOST it releases at once
// (which ends its hold for the checkers). Either B gets the lock — then A's lease must have stopped
// saying HELD and A must have reported LOST before B was granted — or A keeps it (a minority cut):
// A is still HELD, B timed out, A's release after the heal is RELEASED.
void cut_round(context& ctx, const std::vector<std::size_t>& cut, direction which, const std::string& suffix) {
    const bool all_cut = cut.size() == target_endpoints(ctx).size();
    const bool quorum_kept = !all_cut && cut.size() < target_endpoints(ctx).size() / 2 + 1;
    const nanoseconds round_trip = ctx.round_trip();
    ctx.resource();
    auto side = make_link(ctx, suffix);
    auto a = ctx.spawn_holder_with_env("a" + suffix, side.config, side.env);
    auto b = ctx.spawn_holder("b" + suffix);
    const std::string name = ctx.lock_name("cut" + suffix);
    const auto first = a->acquire(name, 10s);
    ctx.require(first.ok, "A acquires through the link: " + first.status + " " + first.message);
    if (!first.ok) return;
    if (ctx.tgt().fencing()) ctx.require(a->fenced_write(name).accepted, "A's fenced write before the cut");
    a->counter_increment(name);
    std::this_thread::sleep_for(ctx.tgt().ttl / 2);  // past a renewal

    const std::size_t servers = side.link->servers().size();
    const int64_t cut_ns = monotonic_ns();
    side.link->cut(cut, which);
    const std::string what = std::string(which == direction::downstream ? "replies from " : "holder cut from ") +
                             cut_text(cut, servers);
    ctx.fault(what);
    ctx.log(what);

    // A holder cut from a minority keeps its lock: B waits past the ttl (so renewals must have
    // reached the rest) rather than the whole takeover time.
    const milliseconds wait = quorum_kept ? ctx.tgt().ttl + 500ms : takeover_wait(ctx);
    acquire_result got;
    holder_watch seen;
    {
        std::atomic<bool> waiting{true};
        joining_thread waiter([&] {
            got = b->acquire(name, wait);
            waiting = false;
        });
        while (waiting) {
            if (!seen.lost) {
                const std::string state = a->state(name);
                const int64_t now = monotonic_ns();
                if (state == "held") seen.last_held = now;
                else if (!seen.not_held) seen.not_held = now;
                seen.lost = a->lost_at_ns(name);
            }
            std::this_thread::sleep_for(10ms);
        }
    }
    if (!seen.lost && got.ok) {
        // B holds; A must learn it is LOST — wait up to its bound (and the noise margin) to measure.
        const nanoseconds bound = lost_bound(ctx, round_trip);
        const nanoseconds limit = bound + lost_margin(bound) + 2s - nanoseconds(monotonic_ns() - cut_ns);
        seen.lost = await_lost(*a, name, std::max(milliseconds(10), std::chrono::duration_cast<milliseconds>(limit)));
    }
    const bool lost_after_grant = got.ok && (!seen.lost || *seen.lost > got.returned_ns);
    judge_lost(ctx, seen.lost, cut_ns, round_trip, what);
    if (got.ok) {
        ctx.record_liveness(milliseconds(int64_t(ms_between(cut_ns, got.returned_ns))));
        if (ctx.tgt().fencing()) ctx.require(b->fenced_write(name).accepted, "B's fenced write as the new holder");
        b->counter_increment(name);
        if (seen.last_held && *seen.last_held > got.returned_ns)
            ctx.violation(violation_kind::false_success, "the cut holder's lease still said HELD " +
                                                             ms_text(ms_between(got.returned_ns, *seen.last_held)) +
                                                             " after B was granted the lock");
        // Not a violation by itself: a ttl lease's state() and valid_until end the hold at its
        // expiry, when the server frees the lock, and docs/design/contract.md gives on_lost ttl/3 + one round
        // trip after that (judge_lost). The checkers end A's hold at the earlier of valid_until and
        // on_lost (the holder stops on LOST), so an overlap they find is one.
        if (lost_after_grant)
            ctx.note("B was granted the lock " +
                     (seen.lost ? ms_text(ms_between(got.returned_ns, *seen.lost)) + " before A's on_lost ran"
                                : std::string("while A's on_lost never ran")));
        ctx.note(what + ": A " + (seen.not_held ? "left HELD " + ms_text(ms_between(cut_ns, *seen.not_held)) + ", " : std::string()) +
                 "LOST " + (seen.lost ? ms_text(ms_between(cut_ns, *seen.lost)) : std::string("never")) +
                 " after the cut, B granted after " + ms_text(ms_between(cut_ns, got.returned_ns)));
    } else {
        ctx.require(got.status == "timeout", "B's wait ends in a timeout, not an error: " + got.status + " " + got.message);
        ctx.note(what + ": A kept the lock" +
                 (seen.lost ? " (LOST reported " + ms_text(ms_between(cut_ns, *seen.lost)) + " after the cut, yet the lock was not free within " +
                                  ms_text(double(wait.count())) + ")"
                            : std::string(seen.not_held ? " (SUSPECT for a while)" : "")) +
                 ", B timed out after " + ms_text(ms_between(got.invoked_ns, got.returned_ns)));
    }

    // The cut heals only now, after the ttl: the old holder comes back to a lock that is B's.
    side.link->heal();
    const int64_t healed_ns = monotonic_ns();
    if (got.ok) {
        if (ctx.tgt().fencing())
            ctx.require(!a->fenced_write(name).accepted, "the old holder's fenced write after the heal is refused");
        const std::string a_state = a->state(name);
        if (a_state == "held") ctx.violation(violation_kind::false_success, "the old holder's lease is HELD again after the heal");
        // ALREADY_LOST, or UNKNOWN when some of its connections are still in TCP back-off from the
        // cut (Redlock needs a quorum's refusal to say ALREADY_LOST); never RELEASED, and B's lease
        // stays untouched either way (checked next).
        const std::string released = a->release(name);
        if (released == "released")
            ctx.violation(violation_kind::false_success, "the old holder's release after the heal said RELEASED");
        ctx.require(released == "already_lost" || released == "unknown",
                    "the old holder's release after the heal is ALREADY_LOST (or UNKNOWN): " + released);
        if (released == "unknown") ctx.note("the old holder's release right after the heal was UNKNOWN");
        const std::string b_state = b->state(name);
        if (b_state != "held") ctx.violation(violation_kind::false_success, "B's lease is " + b_state + " after the old holder's release");
        ctx.require(b->release(name) == "released", "B releases");
        const auto again = a->acquire(name, 15s);
        ctx.require(again.ok, "after the heal the old holder's client acquires again: " + again.status + " " + again.message);
        if (again.ok) {
            a->release(name);
            ctx.note("A acquired again " + ms_text(ms_between(healed_ns, again.returned_ns)) + " after the heal");
        }
    } else if (!seen.lost) {
        const std::string released = a->release(name);
        ctx.require(released == "released", "A, which kept the lock, releases it after the heal: " + released);
    }
    a->quit();
    b->quit();
}

std::vector<std::size_t> first_n(std::size_t n) {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < n; ++i) out.push_back(i);
    return out;
}

// A single server of a standalone target; a minority of a quorum's nodes.
std::vector<std::size_t> minority(context& ctx) {
    const std::size_t n = target_endpoints(ctx).size();
    return first_n(n == 1 ? 1 : (n - 1) / 2);
}

std::vector<std::size_t> majority(context& ctx) { return first_n(target_endpoints(ctx).size() / 2 + 1); }

void single_server_cut(context& ctx) {
    in_rounds(ctx, 5, [&](const std::string& suffix) { cut_round(ctx, minority(ctx), direction::both, suffix); });
}

void majority_cut(context& ctx) {
    in_rounds(ctx, 5, [&](const std::string& suffix) { cut_round(ctx, majority(ctx), direction::both, suffix); });
}

void asymmetric_cut(context& ctx) {
    in_rounds(ctx, 5, [&](const std::string& suffix) {
        cut_round(ctx, first_n(target_endpoints(ctx).size()), direction::downstream, suffix);
    });
}

// ---- 16d: a flapping link -----------------------------------------------------------------------

// A (through the link) and B (direct) take turns on one name, each with a fenced write and a
// read-sleep-write increment per hold, while the link goes down and up every `period`.
void flapping(context& ctx) {
    ctx.resource();
    auto side = make_link(ctx, "");
    auto a = ctx.spawn_holder_with_env("a", side.config, side.env);
    auto b = ctx.spawn_holder("b");
    const std::string name = ctx.lock_name("flap");
    // Blips shorter than the ttl (the lease must ride them out) in the CI size; in the soak size
    // cuts as long as the ttl too.
    const milliseconds period = ctx.ci_or_soak(std::min<milliseconds>(ctx.tgt().ttl / 2, 400ms), ctx.tgt().ttl);
    const milliseconds run_for = ctx.ci_or_soak(milliseconds(2000), milliseconds(60000));
    std::atomic<bool> stop{false};
    int flaps = 0;
    int holds_a = 0, holds_b = 0;
    auto contend = [&](holder& h, int& holds) {
        while (!stop) {
            const auto r = h.acquire(name, 0ms);
            if (r.ok) {
                ++holds;
                if (ctx.tgt().fencing()) h.fenced_write(name);
                h.counter_increment(name, 20ms);
                std::this_thread::sleep_for(50ms);
                h.release(name);
            }
            std::this_thread::sleep_for(30ms);
        }
    };
    {
        joining_thread ta([&] { contend(*a, holds_a); });
        joining_thread tb([&] { contend(*b, holds_b); });
        const auto end = std::chrono::steady_clock::now() + run_for;
        helpers::on_scope_exit stop_workers([&] { stop = true; });
        while (std::chrono::steady_clock::now() < end) {
            side.link->cut_all();
            ++flaps;
            ctx.fault("link flapped (cut)");
            std::this_thread::sleep_for(period);
            side.link->heal();
            std::this_thread::sleep_for(period);
        }
    }
    ctx.note(std::to_string(flaps) + " cuts of " + ms_text(double(period.count())) + " every " +
             ms_text(double(2 * period.count())) + "; holds: A (through the link) " + std::to_string(holds_a) +
             ", B (direct) " + std::to_string(holds_b));
    a->quit();
    b->quit();
    ctx.check_histories();
}

// ---- registration -------------------------------------------------------------------------------

std::vector<expectation> every_networked(verdict v = verdict::safe) {
    return {{"redis", v},     {"redlock", v},   {"zookeeper_ensemble", v},
            {"etcd_cluster", v}, {"sql_lease", v}, {"sql_advisory", v}};
}

const registrar single_server{{16, "a", "partition: holder cut from a single server (a minority of a quorum)",
                               every_networked(), single_server_cut}};
const registrar majority_server{{16, "b", "partition: holder cut from the majority of the nodes",
                                 {{"redlock", verdict::safe}, {"zookeeper_ensemble", verdict::safe}, {"etcd_cluster", verdict::safe}},
                                 majority_cut}};
const registrar asymmetric{{16, "c", "partition: asymmetric cut (requests pass, replies dropped)", every_networked(),
                            asymmetric_cut}};
const registrar flapping_link{{16, "d", "partition: flapping link while contending", every_networked(), flapping}};

}  // namespace
}  // namespace dlock::faults
