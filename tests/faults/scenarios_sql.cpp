// scenarios_sql.cpp — the fault scenarios of docs/design/faults.md that concern the `sql` backend (PostgreSQL;
// targets sql_lease and sql_advisory), written against the suite's API (suite.hpp):
//   13a the holder's backend is terminated (pg_terminate_backend): advisory — LOST pushed, but a
//       queued waiter holds the lock before the old holder hears it: EV, caught by the fencing
//       token when the old holder stalls; lease — rows outlive sessions: SAFE;
//   13b server restart: advisory — every lock ends and is reported LOST before anyone can take it;
//       lease — committed rows survive: SAFE for both;
//   13c lease rows expire by the server's clock: an unrenewed lease's next holder gets the lock only
//       after the old holder's own validity ended;
//   14g dropped table, 14h missing privileges, 14i database turned read-only — clear errors, never "held".
// Verdicts are the ones docs/backends/sql.md claims.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dlock/lab/lab.hpp"
#include "scenario_helpers.hpp"
#include "suite.hpp"

namespace dlock::faults {
namespace {

using namespace std::chrono_literals;

using namespace helpers;

bool advisory(context& ctx) { return ctx.tgt().name == "sql_advisory"; }
std::string mode(context& ctx) { return advisory(ctx) ? "advisory" : "lease"; }

// A SQL string literal (quotes doubled): the suite's names are plain, but never trust that.
std::string literal(const std::string& text) {
    std::string out = "'";
    for (char ch : text) out += ch == '\'' ? std::string("''") : std::string(1, ch);
    return out + "'";
}

lab::postgres_client admin(context& ctx) { return ctx.lab().sql().client(); }

int64_t scalar(context& ctx, const std::string& sql) { return std::stoll(admin(ctx).query_value(sql).value_or("-1")); }

// A config for the target's mode reaching `dsn` (default: the lab's), with extra option lines.
std::filesystem::path write_sql_config(context& ctx, const std::string& file_name, const std::string& dsn = "",
                                       const std::string& extra_options = "") {
    const auto path = ctx.dir() / file_name;
    std::ofstream(path) << "backend: sql\noptions:\n  dsn: \"" << (dsn.empty() ? ctx.lab().access(lab::backend::sql).dsn : dsn)
                        << "\"\n  mode: " << mode(ctx) << "\n" << extra_options;
    return path;
}

std::string dsn_for_database(context& ctx, const std::string& database) {
    return "postgresql://postgres@127.0.0.1:" + std::to_string(ctx.lab().sql().client_endpoint().port) + "/" + database;
}

// The server process (backend pid) holding `name`'s advisory lock, as the plugin records it.
int64_t advisory_holder_pid(context& ctx, const std::string& name) {
    return scalar(ctx, "SELECT holder_pid FROM dlock_locks_advisory WHERE name = " + literal(name));
}

// ---- 13: the server ends sessions, restarts; rows expire by server time --------------------------

// Advisory: (1) A holds, B queues in the server's lock queue, A's session is terminated: B holds
// at once and A hears LOST a moment later — the window docs/backends/sql.md calls EV; the lost-
// detection latency is measured. (2) The same with A stalled (SIGSTOP) meanwhile: when it resumes,
// its fenced write carries the older token and is refused.
void terminated_advisory_round(context& ctx, const std::string& suffix) {
    const nanoseconds round_trip = ctx.round_trip();  // before the fault: afterwards the servers may not answer
    ctx.resource();
    auto a = ctx.spawn_holder("a" + suffix);
    auto b = ctx.spawn_holder("b" + suffix);
    for (const bool stalled : {false, true}) {
        const std::string name = ctx.lock_name((stalled ? "stalled" : "terminated") + suffix);
        const auto first = a->acquire(name, 0ms);
        ctx.require(first.ok, "A acquires: " + first.message);
        if (!first.ok) return;
        a->fenced_write(name);
        const int64_t pid = advisory_holder_pid(ctx, name);
        ctx.require(pid > 0, "the holder's backend pid is recorded");
        acquire_result waited;
        joining_thread waiter([&] { waited = b->acquire(name, 5s); });
        std::this_thread::sleep_for(200ms);  // B waits in the server's lock queue
        if (stalled) a->pause();
        const int64_t terminated_ns = monotonic_ns();
        admin(ctx).execute("SELECT pg_terminate_backend(" + std::to_string(pid) + ")");
        ctx.fault(std::string("pg_terminate_backend of the holder's session") + (stalled ? " (holder stalled)" : ""));
        waiter.join();
        ctx.require(waited.ok, "the queued waiter holds the lock once the session ended: " + waited.message);
        if (waited.ok) ctx.require(b->fenced_write(name).accepted, "the new holder's write is accepted");
        if (stalled) a->resume();
        const auto lost = await_lost(*a, name, 3s, 5ms);
        ctx.require(lost.has_value(), "LOST is pushed to the old holder");
        if (stalled) {
            const auto stale = a->fenced_write(name);
            ctx.require(!stale.accepted, "the stalled holder's write is refused by its older token");
        } else if (lost) {
            ctx.record_lost_detection(nanoseconds(*lost - terminated_ns), ctx.tgt().ttl / 3 + round_trip);
            if (waited.ok)
                ctx.note("EV demonstrated: B held the lock " + ms_text(ms_between(waited.returned_ns, *lost)) +
                         " before A was told LOST");
        }
        ctx.require(a->release(name) == "already_lost", "A's release after its session ended is ALREADY_LOST");
        if (waited.ok) ctx.require(b->release(name) == "released", "B's lock was untouched by A's release");
    }
    a->quit();
    b->quit();
}

void terminated_advisory(context& ctx) {
    in_rounds(ctx, 10, [&](const std::string& suffix) { terminated_advisory_round(ctx, suffix); });
}

// Lease: every dlock session is terminated, three times across a renewal: the lock lives in its
// row, so A keeps it (a SUSPECT spell while a renewal meets a dead connection is allowed), and
// nobody else gets it.
void terminated_lease_round(context& ctx, const std::string& suffix) {
    auto a = ctx.spawn_holder("a" + suffix);
    auto b = ctx.spawn_holder("b" + suffix);
    const std::string name = ctx.lock_name("terminated" + suffix);
    const milliseconds ttl = 1500ms;
    const auto first = a->acquire(name, 0ms, ttl);
    ctx.require(first.ok, "A acquires: " + first.message);
    if (!first.ok) return;
    for (int i = 0; i < 3; ++i) {
        admin(ctx).execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'dlock'");
        ctx.fault("pg_terminate_backend of every dlock session");
        std::this_thread::sleep_for(ttl / 3 + 100ms);
    }
    ctx.require(wait_until([&] { return a->state(name) == "held"; }, 2s, 20ms), "A still holds its lease: " + a->state(name));
    expect_refused(ctx, b->acquire(name, 0ms), "B while A's row is live", "timeout");
    ctx.require(a->release(name) == "released", "A's release");
    a->quit();
    b->quit();
}

void terminated_lease(context& ctx) {
    in_rounds(ctx, 5, [&](const std::string& suffix) { terminated_lease_round(ctx, suffix); });
}

void terminated_session(context& ctx) {
    if (advisory(ctx)) terminated_advisory(ctx);
    else terminated_lease(ctx);
}

// The server restarts while A holds. Advisory: the lock ends with A's session; A must hear LOST
// before anyone else holds the lock — an in-process client keeps trying to take it from the moment
// the restart begins, so any overlap is one that happened, not one that could have — and the fence
// continues. Lease: the committed row survives; B is refused, A's renewals resume, the fence
// continues.
void server_restart(context& ctx) {
    const nanoseconds round_trip = ctx.round_trip();  // before the fault: afterwards the servers may not answer
    auto& server = ctx.lab().sql();
    on_scope_exit restore([&] {
        if (!server.running()) server.restart(lab::data_policy::keep);
    });
    auto a = ctx.spawn_holder("a");
    auto b = ctx.spawn_holder("b");
    const std::string name = ctx.lock_name("restart");
    const milliseconds ttl = 6s;  // lease: longer than the restart
    const auto first = a->acquire(name, 0ms, ttl);
    ctx.require(first.ok, "A acquires: " + first.message);
    if (!first.ok) return;
    // Advisory only: a client outside the histories that takes and at once gives back the lock as
    // soon as it can, to show when another client could first hold it.
    std::atomic<int64_t> other_held_ns{0};
    std::atomic<bool> stop_trying{false};
    std::optional<dlock::client> other;
    if (advisory(ctx)) other.emplace(ctx.open_client());
    const int64_t give_up_ns = monotonic_ns() + 20'000'000'000;  // bounded, should the cell unwind early
    joining_thread contender([&] {
        while (other && !stop_trying && monotonic_ns() < give_up_ns) {
            std::error_code ec;
            auto lease = other->acquire(name, dlock::acquire_options().with_wait(0ms), ec);
            if (!ec) {
                other_held_ns = monotonic_ns();
                lease.release(ec);
                return;
            }
            std::this_thread::sleep_for(2ms);
        }
    });
    const int64_t restart_ns = monotonic_ns();
    server.restart(lab::data_policy::keep);
    const int64_t back_ns = monotonic_ns();
    ctx.fault("PostgreSQL restarted (fast shutdown, same data)");
    if (advisory(ctx)) {
        const auto lost = await_lost(*a, name, 3s, 5ms);
        ctx.require(lost.has_value(), "A hears LOST when the restart ends its session");
        wait_until([&] { return other_held_ns.load() != 0; }, 5s, 5ms);
        stop_trying = true;
        contender.join();
        ctx.require(other_held_ns.load() != 0, "another client can take the lock after the restart");
        if (lost) {
            ctx.record_lost_detection(nanoseconds(*lost - restart_ns), ctx.tgt().ttl / 3 + round_trip);
            ctx.note("LOST " + ms_text(ms_between(restart_ns, *lost)) + " after the restart began; server back after " +
                     ms_text(ms_between(restart_ns, back_ns)) + ", another client held the lock after " +
                     ms_text(ms_between(restart_ns, other_held_ns.load())));
        }
        if (lost && other_held_ns.load() != 0 && other_held_ns.load() < *lost)
            ctx.violation(violation_kind::overlap, "another client held the lock " +
                                                       ms_text(ms_between(other_held_ns.load(), *lost)) +
                                                       " before A was told its lock ended");
        // A acts on the notice (its release ends its hold in the history); B comes after.
        ctx.require(a->release(name) == "already_lost", "A's release is ALREADY_LOST");
        const auto next = b->acquire(name, 3s);
        ctx.require(next.ok, "B acquires after the restart: " + next.message);
        if (next.ok) ctx.require(next.token > first.token, "the fence continues across the restart");
        if (next.ok) b->release(name);
    } else {
        expect_refused(ctx, b->acquire(name, 0ms), "B while A's committed row is live", "timeout");
        std::this_thread::sleep_for(ttl / 3 + 500ms);  // past a renewal on a new connection
        ctx.require(wait_until([&] { return a->state(name) == "held"; }, 3s, 20ms), "A's renewals resume: " + a->state(name));
        ctx.require(a->release(name) == "released", "A's release after the restart");
        const auto next = b->acquire(name, 2s);
        ctx.require(next.ok, "B acquires once A released: " + next.message);
        if (next.ok) {
            ctx.require(next.token > first.token, "the fence continues across the restart");
            b->release(name);
        }
    }
    a->quit();
    b->quit();
    ctx.check_histories();
}

// Lease rows expire by the server's clock: A takes a 1 s lease it does not renew; B waits. B may
// get the lock only once A's own validity (send time + ttl − drift, client-side) has ended, and A
// reads LOST by then; A's late release must not touch B's lock.
void lease_expires_by_server_time_round(context& ctx, const std::string& suffix) {
    auto a = ctx.spawn_holder("a" + suffix);
    auto b = ctx.spawn_holder("b" + suffix);
    const std::string name = ctx.lock_name("expiry" + suffix);
    const milliseconds ttl = 1s;
    const auto first = a->acquire(name, 0ms, ttl, false);
    ctx.require(first.ok, "A acquires: " + first.message);
    if (!first.ok) return;
    ctx.fault("holder stops renewing (renew off), its row expires by the server's clock");
    const auto next = b->acquire(name, 5s);
    ctx.require(next.ok, "B acquires once A's row expired: " + next.message);
    if (next.ok) {
        ctx.note("B acquired " + ms_text(ms_between(first.invoked_ns, next.returned_ns)) + " after A's acquire was sent (ttl 1 s), " +
                 ms_text(ms_between(first.valid_until_ns, next.returned_ns)) + " after A's validity ended");
        ctx.record_liveness(milliseconds(int64_t(ms_between(first.returned_ns, next.returned_ns))));
    }
    ctx.require(a->state(name) == "lost", "A reads LOST once its validity ended: " + a->state(name));
    ctx.require(a->release(name) == "already_lost", "A's late release is ALREADY_LOST");
    if (next.ok) ctx.require(b->release(name) == "released", "B's lock was untouched by A's late release");
    a->quit();
    b->quit();
}

void lease_expires_by_server_time(context& ctx) {
    in_rounds(ctx, 10, [&](const std::string& suffix) { lease_expires_by_server_time_round(ctx, suffix); });
}

// ---- 14: server errors ---------------------------------------------------------------------------

// 14g: dlock's table is dropped under a running client: acquire is a clear BACKEND error; a new
// client recreates the table.
void dropped_table(context& ctx) {
    const std::string table = advisory(ctx) ? "dlock_locks_advisory" : "dlock_locks";
    const std::string name = ctx.lock_name("dropped");
    auto a = ctx.spawn_holder("a");
    const auto warm = a->acquire(ctx.lock_name("warm"), 0ms);  // tables exist, statements prepared
    ctx.require(warm.ok, "warm-up acquire: " + warm.message);
    a->release(ctx.lock_name("warm"));
    admin(ctx).execute("DROP TABLE " + table);
    ctx.fault("DROP TABLE " + table);
    const auto refused = a->acquire(name, 0ms);
    expect_refused(ctx, refused, "acquire with the table gone", "DLOCK_BACKEND");
    ctx.require(refused.message.find("table is missing") != std::string::npos, "the error says the table is missing: " + refused.message);
    ctx.require(a->state(name) != "held", "nothing reads as held after the error");
    ctx.note(refused.message);
    a->quit();
    ctx.open_client();  // recreates the tables for the cells that follow
    auto b = ctx.spawn_holder("b");
    const auto after = b->acquire(name, 0ms);
    ctx.require(after.ok, "a new client recreates the table and acquires: " + after.message);
    if (after.ok) b->release(name);
    b->quit();
    ctx.check_histories();
}

// 14h: a user who may not create dlock's tables: opening the client is a clear PERMISSION error that
// says what to grant.
void missing_privileges(context& ctx) {
    auto server = admin(ctx);
    server.execute("DROP ROLE IF EXISTS dlock_unprivileged");
    server.execute("CREATE ROLE dlock_unprivileged LOGIN");
    on_scope_exit drop([&] { admin(ctx).execute("DROP ROLE IF EXISTS dlock_unprivileged"); });
    ctx.fault("a role without CREATE on the schema");
    const auto config = write_sql_config(ctx, "unprivileged.yaml",
                                         "postgresql://dlock_unprivileged@127.0.0.1:" +
                                             std::to_string(ctx.lab().sql().client_endpoint().port) + "/postgres",
                                         "  table: dlock_private_" + mode(ctx) + "\n");
    const std::string message = require_open_refused(ctx, config, DLOCK_PERMISSION, "a user without privileges", "PERMISSION");
    ctx.require(message.find("permission denied") != std::string::npos && message.find("grant") != std::string::npos,
                "the error says permission denied and what to grant: " + message);
    ctx.note(message);
    ctx.check_histories();
}

// 14i: the database turns read-only under a running client (default_transaction_read_only, as a
// failover to a standby would): each acquire is a clear BACKEND error, never "held".
void read_only_database(context& ctx) {
    const std::string database = "dlock_ro_" + mode(ctx);
    admin(ctx).execute("DROP DATABASE IF EXISTS " + database);
    admin(ctx).execute("CREATE DATABASE " + database);
    on_scope_exit drop([&] {
        admin(ctx).execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = " + literal(database));
        admin(ctx).execute("DROP DATABASE IF EXISTS " + database);
    });
    auto a = ctx.spawn_holder("a", write_sql_config(ctx, "ro.yaml", dsn_for_database(ctx, database)));
    const std::string name = ctx.lock_name("ro");
    const auto warm = a->acquire(ctx.lock_name("warm"), 0ms);
    ctx.require(warm.ok, "warm-up acquire while writable: " + warm.message);
    a->release(ctx.lock_name("warm"));
    admin(ctx).execute("ALTER DATABASE " + database + " SET default_transaction_read_only = on");
    admin(ctx).execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = " + literal(database));
    ctx.fault("database made read-only (default_transaction_read_only), sessions ended");
    wait_until([&] { return scalar(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = " + literal(database)) == 0; }, 5s, 20ms);
    const auto refused = a->acquire(name, 0ms);
    expect_refused(ctx, refused, "acquire on a read-only database", "DLOCK_BACKEND");
    ctx.require(refused.message.find("read-only") != std::string::npos, "the error says read-only: " + refused.message);
    ctx.require(a->state(name) != "held", "nothing reads as held after the error");
    ctx.note(refused.message);
    a->quit();
    ctx.check_histories();
}

const std::vector<expectation> both_modes_safe = {{"sql_lease", verdict::safe}, {"sql_advisory", verdict::safe}};

const registrar terminated{{13, "a", "PostgreSQL ends the holder's session (pg_terminate_backend)",
                            {{"sql_lease", verdict::safe}, {"sql_advisory", verdict::ev}}, terminated_session}};
const registrar restarted{{13, "b", "PostgreSQL restart while held", both_modes_safe, server_restart}};
const registrar server_time{{13, "c", "lease rows expire by the server's clock", {{"sql_lease", verdict::safe}},
                             lease_expires_by_server_time}};
const registrar dropped{{14, "g", "dlock's table dropped", both_modes_safe, dropped_table}};
const registrar privileges{{14, "h", "no privileges on the schema", both_modes_safe, missing_privileges}};
const registrar read_only{{14, "i", "database turned read-only", both_modes_safe, read_only_database}};

}  // namespace
}  // namespace dlock::faults
