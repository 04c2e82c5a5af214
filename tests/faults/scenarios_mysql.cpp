// scenarios_mysql.cpp — the fault scenarios of docs/design/faults.md that concern the `sql` backend's MySQL
// dialect on the lab's MariaDB (targets mysql_lease and mysql_named), the MySQL equivalents of 13 and 14
// (variants named m…, apart from PostgreSQL's):
//   13ma KILL CONNECTION of the holder's session: named — LOST pushed, but a waiter queued in GET_LOCK
//       holds the lock before the old holder hears it: EV, caught by the fencing token when the old
//       holder stalls; lease — rows outlive sessions: SAFE;
//   13mb server restart: named — every lock ends with its session and is reported LOST; lease —
//       committed InnoDB rows survive: SAFE for both;
//   14ma the server turned read-only (SET GLOBAL read_only = 1) under a running client — a clear
//       BACKEND error, never "held";
//   14mb a user without the grants dlock needs — a clear BACKEND error at open that says what to grant.
// Verdicts are the ones docs/backends/mysql.md claims.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "dlock/lab/faults.hpp"
#include "dlock/lab/lab.hpp"
#include "scenario_helpers.hpp"
#include "suite.hpp"

namespace dlock::faults {
namespace {

using namespace std::chrono_literals;
using namespace helpers;

bool named(context& ctx) { return ctx.tgt().name == "mysql_named"; }
std::string mode(context& ctx) { return named(ctx) ? "named" : "lease"; }

lab::mariadb_client admin(context& ctx) { return ctx.lab().mariadb().client(); }

// A SQL string literal (quotes and backslashes escaped).
std::string literal(const std::string& text) {
    std::string out = "'";
    for (char ch : text) {
        if (ch == '\'' || ch == '\\') out += ch;
        out += ch;
    }
    return out + "'";
}

// Runs `sql` as MariaDB's root through the server's Unix socket (the lab's accounts cannot GRANT;
// root is let in only for the OS user root).
bool as_root(context& ctx, const std::string& sql) {
    std::string output;
    const int status = lab::run_command({"mariadb", "--no-defaults",
                                         "--socket=" + (ctx.lab().mariadb().dir() / "data" / "mariadbd.sock").string(), "-u",
                                         "root", "-e", sql},
                                        &output);
    return ctx.require(status == 0, "as MariaDB's root: " + sql + ": " + output);
}

std::filesystem::path write_mysql_config(context& ctx, const std::string& file_name, const std::string& dsn) {
    const auto path = ctx.dir() / file_name;
    std::ofstream(path) << "backend: sql\noptions:\n  dsn: \"" << dsn << "\"\n  mode: " << mode(ctx) << "\n";
    return path;
}

std::string dsn_as(context& ctx, const std::string& user, const std::string& password) {
    return "mysql://" + user + ":" + password + "@127.0.0.1:" + std::to_string(ctx.lab().mariadb().client_endpoint().port) +
           "/dlock";
}

void expect_refused(context& ctx, const acquire_result& r, const std::string& what, const std::string& expected_status = "") {
    if (r.ok) ctx.violation(violation_kind::false_success, what + ": acquire reported success");
    if (!expected_status.empty())
        ctx.require(r.status == expected_status, what + ": expected " + expected_status + ", got " + r.status + " (" + r.message + ")");
}

std::optional<int64_t> await_lost(holder& h, const std::string& name, milliseconds limit) {
    std::optional<int64_t> at;
    wait_until([&] { return (at = h.lost_at_ns(name)).has_value(); }, limit, 5ms);
    return at;
}

// ---- 13ma: KILL CONNECTION -------------------------------------------------------------------------

// Named: A holds, B waits in GET_LOCK, A's session is killed: B holds at once and A hears LOST a
// moment later — the window docs/backends/mysql.md calls EV; then the same with A stalled (SIGSTOP):
// when it resumes, its fenced write carries the older token and is refused.
void killed_named_round(context& ctx, const std::string& suffix) {
    const nanoseconds round_trip = ctx.round_trip();
    ctx.resource();
    auto a = ctx.spawn_holder("a" + suffix);
    auto b = ctx.spawn_holder("b" + suffix);
    for (const bool stalled : {false, true}) {
        const std::string name = ctx.lock_name((stalled ? "stalled" : "killed") + suffix);
        const auto first = a->acquire(name, 0ms);
        ctx.require(first.ok, "A acquires: " + first.message);
        if (!first.ok) return;
        a->fenced_write(name);
        const std::string session =
            admin(ctx).query_value("SELECT holder_connection FROM dlock_locks_named WHERE name = " + literal(name)).value_or("");
        if (!ctx.require(!session.empty(), "the holder's session id is recorded")) return;
        acquire_result waited;
        joining_thread waiter([&] { waited = b->acquire(name, 5s); });
        std::this_thread::sleep_for(200ms);  // B waits in GET_LOCK
        if (stalled) a->pause();
        const int64_t killed_ns = monotonic_ns();
        ctx.lab().mariadb().kill_connection(std::stoull(session));
        ctx.fault(std::string("KILL CONNECTION of the holder's session") + (stalled ? " (holder stalled)" : ""));
        waiter.join();
        ctx.require(waited.ok, "the waiter holds the lock once the session ended: " + waited.message);
        if (waited.ok) ctx.require(b->fenced_write(name).accepted, "the new holder's write is accepted");
        if (stalled) a->resume();
        const auto lost = await_lost(*a, name, 3s);
        ctx.require(lost.has_value(), "LOST is pushed to the old holder");
        if (stalled) {
            ctx.require(!a->fenced_write(name).accepted, "the stalled holder's write is refused by its older token");
        } else if (lost) {
            ctx.record_lost_detection(nanoseconds(*lost - killed_ns), ctx.tgt().ttl / 3 + round_trip);
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

// Lease: every dlock session is killed, three times across a renewal: the lock lives in its row, so
// A keeps it and nobody else gets it.
void killed_lease_round(context& ctx, const std::string& suffix) {
    auto a = ctx.spawn_holder("a" + suffix);
    auto b = ctx.spawn_holder("b" + suffix);
    const std::string name = ctx.lock_name("killed" + suffix);
    const milliseconds ttl = 1500ms;
    const auto first = a->acquire(name, 0ms, ttl);
    ctx.require(first.ok, "A acquires: " + first.message);
    if (!first.ok) return;
    for (int i = 0; i < 3; ++i) {
        auto server = admin(ctx);
        for (const auto& id : server.query_column("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 'dlock' "
                                                  "AND ID <> CONNECTION_ID() AND COMMAND <> 'Daemon'")) {
            try {
                server.execute("KILL CONNECTION " + id.value_or("0"));
            } catch (const lab::mariadb_error& e) {
                if (e.code() != 1094) throw;  // it ended meanwhile
            }
        }
        ctx.fault("KILL CONNECTION of every dlock session");
        std::this_thread::sleep_for(ttl / 3 + 100ms);
    }
    ctx.require(wait_until([&] { return a->state(name) == "held"; }, 2s, 20ms), "A still holds its lease: " + a->state(name));
    expect_refused(ctx, b->acquire(name, 0ms), "B while A's row is live", "timeout");
    ctx.require(a->release(name) == "released", "A's release");
    a->quit();
    b->quit();
}

void killed_session(context& ctx) {
    if (named(ctx)) in_rounds(ctx, 10, [&](const std::string& suffix) { killed_named_round(ctx, suffix); });
    else in_rounds(ctx, 5, [&](const std::string& suffix) { killed_lease_round(ctx, suffix); });
    ctx.check_histories();
}

// ---- 13mb: restart ---------------------------------------------------------------------------------

// Named: the lock ends with A's session; A hears LOST (as soon as its socket closes) and the fence
// continues. Lease: the committed row survives; B is refused, A's renewals resume.
void server_restart(context& ctx) {
    auto& server = ctx.lab().mariadb();
    on_scope_exit restore([&] {
        if (!server.running()) server.restart(lab::data_policy::keep);
    });
    auto a = ctx.spawn_holder("a");
    auto b = ctx.spawn_holder("b");
    const std::string name = ctx.lock_name("restart");
    const milliseconds ttl = 8s;  // lease: longer than the restart
    const auto first = a->acquire(name, 0ms, ttl);
    ctx.require(first.ok, "A acquires: " + first.message);
    if (!first.ok) return;
    const int64_t restart_ns = monotonic_ns();
    server.restart(lab::data_policy::keep);
    const int64_t back_ns = monotonic_ns();
    ctx.fault("MariaDB restarted (SIGTERM, same data)");
    if (named(ctx)) {
        const auto lost = await_lost(*a, name, 3s);
        ctx.require(lost.has_value(), "A hears LOST when the restart ends its session");
        if (lost)
            ctx.note("LOST " + ms_text(ms_between(restart_ns, *lost)) + " after the restart began (server back after " +
                     ms_text(ms_between(restart_ns, back_ns)) + ")");
        if (lost && *lost > back_ns) ctx.violation(violation_kind::overlap, "A was told LOST only after the server was back");
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

// ---- 14: server errors ----------------------------------------------------------------------------

// 14ma: read_only turned on under a running client of a user without the right to write anyway: each
// acquire is a clear BACKEND error, never "held"; a client opened then is refused at open.
void read_only_server(context& ctx) {
    if (!as_root(ctx, "DROP USER IF EXISTS 'dlock_ro_writer'@'%'; CREATE USER 'dlock_ro_writer'@'%' IDENTIFIED BY "
                      "'ro-writer-pw'; GRANT SELECT, INSERT, UPDATE, CREATE ON dlock.* TO 'dlock_ro_writer'@'%'"))
        return;
    on_scope_exit writable([&] {
        admin(ctx).execute("SET GLOBAL read_only = 0");
        as_root(ctx, "DROP USER IF EXISTS 'dlock_ro_writer'@'%'");
    });
    const auto config = write_mysql_config(ctx, "ro.yaml", dsn_as(ctx, "dlock_ro_writer", "ro-writer-pw"));
    auto a = ctx.spawn_holder("a", config);
    const auto warm = a->acquire(ctx.lock_name("warm"), 0ms);
    ctx.require(warm.ok, "warm-up acquire while writable: " + warm.message);
    a->release(ctx.lock_name("warm"));
    admin(ctx).execute("SET GLOBAL read_only = 1");
    ctx.fault("SET GLOBAL read_only = 1");
    const std::string name = ctx.lock_name("ro");
    const auto refused = a->acquire(name, 0ms);
    expect_refused(ctx, refused, "acquire on a read-only server", "DLOCK_BACKEND");
    ctx.require(refused.message.find("read-only") != std::string::npos, "the error says read-only: " + refused.message);
    ctx.require(a->state(name) != "held", "nothing reads as held after the error");
    ctx.note(refused.message);
    const std::string at_open = require_open_refused(ctx, ctx.tgt().config, DLOCK_BACKEND, "a client opened on a read-only server", "BACKEND");
    ctx.require(at_open.find("read-only") != std::string::npos, "the error at open says read-only: " + at_open);
    a->quit();
    ctx.check_histories();
}

// 14mb: a user who may read but not create or write dlock's tables.
void missing_grant(context& ctx) {
    if (!as_root(ctx, "DROP USER IF EXISTS 'dlock_reader'@'%'; CREATE USER 'dlock_reader'@'%' IDENTIFIED BY 'reader-pw'; "
                      "GRANT SELECT ON dlock.* TO 'dlock_reader'@'%'"))
        return;
    on_scope_exit drop([&] { as_root(ctx, "DROP USER IF EXISTS 'dlock_reader'@'%'"); });
    ctx.fault("a user with SELECT only");
    const auto config = write_mysql_config(ctx, "reader.yaml", dsn_as(ctx, "dlock_reader", "reader-pw"));
    const std::string message = require_open_refused(ctx, config, DLOCK_BACKEND, "a user without grants", "BACKEND");
    ctx.require(message.find("lacks a privilege") != std::string::npos && message.find("grant it") != std::string::npos,
                "the error says a privilege is missing and what to grant: " + message);
    ctx.require(message.find("reader-pw") == std::string::npos, "the password is not echoed");
    ctx.note(message);
    ctx.check_histories();
}

const std::vector<expectation> both_modes_safe = {{"mysql_lease", verdict::safe}, {"mysql_named", verdict::safe}};

const registrar killed{{13, "ma", "MySQL ends the holder's session (KILL CONNECTION)",
                        {{"mysql_lease", verdict::safe}, {"mysql_named", verdict::ev}}, killed_session}};
const registrar restarted{{13, "mb", "MySQL restart while held", both_modes_safe, server_restart}};
const registrar read_only{{14, "ma", "MySQL server turned read-only", both_modes_safe, read_only_server}};
const registrar grants{{14, "mb", "MySQL user without grants", both_modes_safe, missing_grant}};

}  // namespace
}  // namespace dlock::faults
