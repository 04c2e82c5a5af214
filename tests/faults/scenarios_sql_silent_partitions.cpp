// scenarios_sql_silent_partitions.cpp — fault scenarios of the `sql` backend (targets sql_lease, sql_advisory)
// for partitions that TCP cannot see: the holder reaches PostgreSQL through the lab's proxy, which
// keeps every connection open and answers TCP itself (as pgbouncer, HAProxy or a cloud load
// balancer would), and then blackholes it:
//   13d the holder is partitioned: lease — it reports LOST by the end of its validity (the client
//       gives up the renewal then), before anyone else can hold the lock; advisory — its probes
//       report LOST within 2/3 of peer_timeout, while the server keeps the lock on the silent
//       session, so nobody else holds it either. Its release returns within one client limit.
//       SAFE for both;
//   13e the server ends the holder's session while the holder is partitioned: advisory — the lock
//       is free at once and a second holder gets it while the first still believes it holds it
//       (EV, caught by the fencing token; the first learns within 2/3 of peer_timeout); lease —
//       rows outlive sessions: SAFE.
// Verdicts are the ones docs/backends/sql.md claims.
#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "dlock/lab/lab.hpp"
#include "dlock/lab/proxy.hpp"
#include "scenario_helpers.hpp"
#include "suite.hpp"

namespace dlock::faults {
namespace {

using namespace std::chrono_literals;
using namespace helpers;

// The partitioned holder's settings: a 1 s statement_timeout makes its client limit 1.25 s
// (statement_timeout + 1/4), a 3 s peer_timeout makes advisory probes every 1 s.
constexpr milliseconds statement_timeout{1000};
constexpr milliseconds client_limit{1250};
constexpr milliseconds peer_timeout{3000};
// Advisory detection: a probe goes out peer_timeout/3 after the session was last heard from and
// must be answered within another peer_timeout/3, so LOST comes 2/3 of peer_timeout after the
// session went silent, plus the monitor's two timed wake-ups and the hop of the report to the
// client's keeper thread (about 10 ms measured here; 50 ms allowed).
nanoseconds advisory_detection_bound(nanoseconds round_trip) { return peer_timeout * 2 / 3 + 50ms + round_trip; }

bool is_advisory(context& ctx) { return ctx.tgt().name == "sql_advisory"; }

// A config of the target's mode that reaches PostgreSQL at `port` (the proxy's), with the
// partitioned holder's timeouts.
std::filesystem::path proxied_config(context& ctx, const std::string& file_name, uint16_t port) {
    const auto path = ctx.dir() / file_name;
    std::ofstream(path) << "backend: sql\noptions:\n  dsn: \"postgresql://postgres@127.0.0.1:" << port << "/postgres\"\n"
                        << "  mode: " << (is_advisory(ctx) ? "advisory" : "lease") << "\n"
                        << "  statement_timeout: " << statement_timeout.count() << "ms\n"
                        << "  peer_timeout: " << peer_timeout.count() << "ms\n";
    return path;
}

// ---- 13d -----------------------------------------------------------------------------------------

void partitioned_lease_round(context& ctx, const std::string& suffix) {
    const nanoseconds round_trip = ctx.round_trip();
    lab::tcp_proxy proxy(ctx.lab().sql().client_endpoint());
    auto a = ctx.spawn_holder("a" + suffix, proxied_config(ctx, "a.yaml", proxy.listen_endpoint().port));
    auto b = ctx.spawn_holder("b" + suffix);
    const std::string name = ctx.lock_name("partitioned" + suffix);
    const milliseconds ttl = 2s;
    const auto first = a->acquire(name, 0ms, ttl);
    ctx.require(first.ok, "A acquires: " + first.message);
    if (!first.ok) return;
    acquire_result waited;
    joining_thread waiter([&] { waited = b->acquire(name, 10s); });
    std::this_thread::sleep_for(100ms);
    const int64_t cut_ns = monotonic_ns();
    proxy.blackhole(lab::direction::both);
    ctx.fault("holder partitioned from PostgreSQL behind a proxy that answers TCP (blackhole both ways)");
    const auto lost = await_lost(*a, name, ttl + 3s, 5ms);
    waiter.join();
    ctx.require(lost.has_value(), "A reports LOST while partitioned (its keeper is not stuck in the renewal)");
    ctx.require(waited.ok, "B acquires once A's row expired by the server's clock: " + waited.message);
    if (lost) ctx.record_lost_detection(nanoseconds(*lost - cut_ns), ttl + round_trip);
    if (lost && waited.ok) {
        if (waited.returned_ns < *lost)
            ctx.violation(violation_kind::overlap, "B acquired " + ms_text(ms_between(waited.returned_ns, *lost)) +
                                                       " before the partitioned holder reported LOST");
        ctx.note("lease: LOST " + ms_text(ms_between(cut_ns, *lost)) + " after the cut (ttl 2 s), B acquired " +
                 ms_text(ms_between(cut_ns, waited.returned_ns)) + " after it");
    }
    const int64_t release_start = monotonic_ns();
    const std::string released = a->release(name);
    const double release_ms = ms_between(release_start, monotonic_ns());
    ctx.require(released != "released", "nothing confirmed A's release: " + released);
    ctx.require(release_ms <= double((client_limit + 1s).count()), "A's release returned within one client limit: " +
                                                                        ms_text(release_ms));
    ctx.note("A's release returned " + released + " after " + ms_text(release_ms));
    proxy.heal();
    if (waited.ok) ctx.require(b->release(name) == "released", "B's lock was untouched by A's release");
    a->quit();
    b->quit();
}

void partitioned_advisory_round(context& ctx, const std::string& suffix) {
    const nanoseconds round_trip = ctx.round_trip();
    lab::tcp_proxy proxy(ctx.lab().sql().client_endpoint());
    auto a = ctx.spawn_holder("a" + suffix, proxied_config(ctx, "a.yaml", proxy.listen_endpoint().port));
    auto b = ctx.spawn_holder("b" + suffix);
    const std::string name = ctx.lock_name("partitioned" + suffix);
    const auto first = a->acquire(name, 0ms);
    ctx.require(first.ok, "A acquires: " + first.message);
    if (!first.ok) return;
    const int64_t cut_ns = monotonic_ns();
    proxy.blackhole(lab::direction::both);
    ctx.fault("holder partitioned from PostgreSQL behind a proxy that answers TCP (blackhole both ways)");
    const auto lost = await_lost(*a, name, peer_timeout + 3s, 5ms);
    ctx.require(lost.has_value(), "A reports LOST while partitioned (its probes go unanswered)");
    if (lost) {
        ctx.record_lost_detection(nanoseconds(*lost - cut_ns), advisory_detection_bound(round_trip));
        ctx.note("advisory: LOST " + ms_text(ms_between(cut_ns, *lost)) + " after the cut (peer_timeout 3 s)");
    }
    // The server still has A's session (the proxy keeps it open), so it keeps the lock: nobody
    // else holds it while A's client has not yet said LOST.
    const auto refused = b->acquire(name, 500ms);
    if (refused.ok) ctx.violation(violation_kind::overlap, "B acquired while A's session was partitioned");
    const int64_t release_start = monotonic_ns();
    const std::string released = a->release(name);
    const double release_ms = ms_between(release_start, monotonic_ns());
    ctx.require(released == "already_lost", "A's release after LOST is ALREADY_LOST: " + released);
    ctx.require(release_ms <= double((client_limit + 1s).count()), "A's release returned within one client limit: " +
                                                                        ms_text(release_ms));
    proxy.heal();
    if (refused.ok) b->release(name);
    // A closed its session; once the partition heals the server hears it and frees the lock.
    const auto next = b->acquire(name, 10s);
    ctx.require(next.ok, "B acquires once the partition healed: " + next.message);
    if (next.ok) {
        ctx.require(next.token > first.token, "the fence continues");
        b->release(name);
    }
    a->quit();
    b->quit();
}

void partitioned_holder(context& ctx) {
    in_rounds(ctx, 5, [&](const std::string& suffix) {
        if (is_advisory(ctx)) partitioned_advisory_round(ctx, suffix);
        else partitioned_lease_round(ctx, suffix);
    });
}

// ---- 13e -----------------------------------------------------------------------------------------

void session_ended_advisory_round(context& ctx, const std::string& suffix) {
    const nanoseconds round_trip = ctx.round_trip();
    ctx.resource();
    lab::tcp_proxy proxy(ctx.lab().sql().client_endpoint());
    auto a = ctx.spawn_holder("a" + suffix, proxied_config(ctx, "a.yaml", proxy.listen_endpoint().port));
    auto b = ctx.spawn_holder("b" + suffix);
    const std::string name = ctx.lock_name("ended" + suffix);
    const auto first = a->acquire(name, 0ms);
    ctx.require(first.ok, "A acquires: " + first.message);
    if (!first.ok) return;
    ctx.require(a->fenced_write(name).accepted, "A's write while it holds the lock is accepted");
    proxy.blackhole(lab::direction::both);
    const int64_t ended_ns = monotonic_ns();
    ctx.lab().sql().client().execute(
        "SELECT pg_terminate_backend(holder_pid) FROM dlock_locks_advisory WHERE name = '" + name + "'");
    ctx.fault("pg_terminate_backend of the holder's session while the holder is partitioned");
    const auto second = b->acquire(name, 3s);
    ctx.require(second.ok, "the lock is free at once: B acquires: " + second.message);
    if (second.ok) {
        ctx.require(b->fenced_write(name).accepted, "B's write is accepted");
        if (a->state(name) == "held")
            ctx.violation(violation_kind::overlap, "B held the lock " + ms_text(ms_between(ended_ns, second.returned_ns)) +
                                                       " after A's session ended, while partitioned A still read it as held");
        ctx.require(!a->fenced_write(name).accepted, "A's stale write is refused by its older token");
    }
    const auto lost = await_lost(*a, name, peer_timeout + 3s, 5ms);
    ctx.require(lost.has_value(), "A learns it lost the lock (its probes go unanswered)");
    if (lost) {
        ctx.record_lost_detection(nanoseconds(*lost - ended_ns), advisory_detection_bound(round_trip));
        ctx.note("EV demonstrated: B held the lock while A still believed it did; A reported LOST " +
                 ms_text(ms_between(ended_ns, *lost)) + " after its session ended (peer_timeout 3 s)");
    }
    proxy.heal();
    ctx.require(a->release(name) == "already_lost", "A's release is ALREADY_LOST");
    if (second.ok) ctx.require(b->release(name) == "released", "B's lock was untouched by A's release");
    a->quit();
    b->quit();
}

// Lease: ending the partitioned holder's sessions changes nothing; the row keeps the lock, and once
// the partition heals (within the ttl) the holder's renewals resume.
void session_ended_lease_round(context& ctx, const std::string& suffix) {
    lab::tcp_proxy proxy(ctx.lab().sql().client_endpoint());
    auto a = ctx.spawn_holder("a" + suffix, proxied_config(ctx, "a.yaml", proxy.listen_endpoint().port));
    auto b = ctx.spawn_holder("b" + suffix);
    const std::string name = ctx.lock_name("ended" + suffix);
    const milliseconds ttl = 3s;
    const auto first = a->acquire(name, 0ms, ttl);
    ctx.require(first.ok, "A acquires: " + first.message);
    if (!first.ok) return;
    proxy.blackhole(lab::direction::both);
    ctx.lab().sql().client().execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'dlock'");
    ctx.fault("pg_terminate_backend of every dlock session while the holder is partitioned");
    const auto refused = b->acquire(name, 0ms);
    if (refused.ok) ctx.violation(violation_kind::overlap, "B acquired while A's row was live");
    proxy.heal();
    ctx.require(wait_until([&] { return a->state(name) == "held"; }, ttl, 20ms), "A's renewals resume: " + a->state(name));
    ctx.require(a->release(name) == "released", "A's release");
    if (refused.ok) b->release(name);
    a->quit();
    b->quit();
}

void session_ended_during_partition(context& ctx) {
    in_rounds(ctx, 5, [&](const std::string& suffix) {
        if (is_advisory(ctx)) session_ended_advisory_round(ctx, suffix);
        else session_ended_lease_round(ctx, suffix);
    });
}

const registrar partitioned{{13, "d", "PostgreSQL holder partitioned behind a proxy that answers TCP",
                             {{"sql_lease", verdict::safe}, {"sql_advisory", verdict::safe}}, partitioned_holder}};
const registrar ended_during_partition{{13, "e", "PostgreSQL ends the holder's session during a partition",
                                        {{"sql_lease", verdict::safe}, {"sql_advisory", verdict::ev}},
                                        session_ended_during_partition}};

}  // namespace
}  // namespace dlock::faults
