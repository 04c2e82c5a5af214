// The `sql` backend: a lock table or the server's own session locks, on PostgreSQL (libpqxx) or
// MySQL/MariaDB (MariaDB Connector/C). This file is the plugin's face: its options, their parsing
// into a dialect's settings, and the C entry points. sql_create picks the dialect once — MySQL for a
// mysql:// or mariadb:// DSN or `dialect: mysql`, else PostgreSQL — and every entry point forwards
// to it (sql_dialect.hpp) without asking which one it is. The dialects and their modes:
// postgres_backend.hpp (lease and advisory) and mysql_backend.hpp (lease and named).
#include "mysql_client.hpp"
#include "pg_settings.hpp"
#include "sql_dialect.hpp"
#include "sql_shared.hpp"
#include <dlock/plugin_kit/plugin_struct.hpp>

#include <fmt/format.h>

#include <climits>
#include <memory>
#include <string>
#include <vector>

using namespace dlock::sql;

namespace {

using dlock::plugin_kit::find_option;
using dlock::plugin_kit::guarded;

const dlock_option_desc sql_options[] = {
    {"dsn", DLOCK_OPTION_STRING, DLOCK_OPTION_SECRET, DLOCK_DSN_URL, "",
     "PostgreSQL: a libpq connection string, a URL (postgresql://user@host:5432/db?sslmode=verify-full) or keywords "
     "(host=… port=… dbname=…); empty: libpq's defaults and PG* environment variables. MySQL/MariaDB: "
     "mysql://user:password@host:3306/database (or mariadb://…), which selects that dialect."},
    {"mode", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, "lease",
     "`lease`: a lock table with server-side expiry (TTL, fencing; PostgreSQL waits on LISTEN/NOTIFY, MySQL polls); "
     "`advisory` (PostgreSQL pg_advisory_lock) or `named` (MySQL GET_LOCK): a session lock on a connection held for "
     "the lease, released when the holder's session ends."},
    {"dialect", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, nullptr,
     "`postgresql` or `mysql` (MySQL 8 / MariaDB 10.6+, through MariaDB Connector/C); by default the DSN's scheme "
     "decides (mysql:// and mariadb:// select mysql)."},
    {"schema", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, "public", "Schema of dlock's tables (created if missing)."},
    {"table", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, "dlock_locks",
     "The lease table; advisory fences go to <table>_advisory, schema versions to <table>_schema."},
    {"password", DLOCK_OPTION_STRING, DLOCK_OPTION_SECRET, DLOCK_DSN_NONE, nullptr,
     "Password, overriding the DSN's (e.g. `${PGPASSWORD}`); never printed."},
    {"sslmode", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, nullptr,
     "libpq sslmode (disable, prefer, require, verify-ca, verify-full), overriding the DSN's."},
    {"sslrootcert", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, nullptr, "CA certificate file for verify-ca/verify-full."},
    {"sslcert", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, nullptr, "Client certificate file."},
    {"sslkey", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, nullptr, "Client key file."},
    {"statement_timeout", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "5s",
     "Server-side limit of each lease-mode statement (advisory waits are bounded by lock_timeout instead). The client "
     "gives up any statement or connect unanswered after this + 1/4 (at least 100 ms): a partition behind a proxy that "
     "acknowledges TCP blocks no call longer than that."},
    {"handoff_grace", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "50ms",
     "Lease mode: for this long after a release, a lock with registered waiters goes to one of them, not to a "
     "newcomer or to the releaser coming straight back (0 disables this anti-barging)."},
    {"peer_timeout", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "10s",
     "A silent network failure is noticed by the client within this time (TCP keepalives, tcp_user_timeout, and in "
     "advisory mode an empty query on each held session every third of it); the server is told to wait twice as long "
     "before it ends the session. At least 3s."},
    {"pool_size", DLOCK_OPTION_INT, 0, DLOCK_DSN_NONE, "32",
     "Most connections a client opens; in advisory mode each held lease and each wait keeps one."},
    {"allow_session_pooler", DLOCK_OPTION_BOOL, 0, DLOCK_DSN_NONE, "false",
     "Advisory mode only: accept a pooling proxy in SESSION mode (a transaction-mode pooler breaks session locks)."},
    {"advisory_key_prefix", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, nullptr,
     "PostgreSQL advisory mode only: a name made of this prefix and a decimal 64-bit integer K (e.g. `pgkey:42`) is "
     "the advisory lock K itself — the lock of an application's pg_advisory_lock(K) or pg_advisory_lock_shared(K). "
     "K is written in plain decimal (`pgkey:42`, never `pgkey:042`: one key, one name). Other names are hashed as usual."},
};

const std::vector<std::string> dlock_query_keys = {"mode", "schema", "table", "statement_timeout", "handoff_grace", "peer_timeout",
                                                   "pool_size", "allow_session_pooler", "dialect", "advisory_key_prefix"};

// The options both dialects read with the same limits — statement_timeout, peer_timeout and
// pool_size — into either dialect's settings (`Settings` has statement_timeout_ms, peer_timeout_ms
// and pool_size); throws failure(DLOCK_CONFIG) naming the first one out of range.
template <typename Settings>
void read_limits(const dlock_option_value* values, size_t count, Settings& c) {
    if (const auto* v = find_option(values, count, "statement_timeout")) c.statement_timeout_ms = v->int_value;
    if (const auto* v = find_option(values, count, "peer_timeout")) c.peer_timeout_ms = v->int_value;
    if (c.statement_timeout_ms < 1 || c.statement_timeout_ms > INT_MAX)
        fail(DLOCK_CONFIG, "sql backend: `statement_timeout` must be between 1ms and 24 days");
    if (c.peer_timeout_ms < 3000 || c.peer_timeout_ms > 3600 * 1000)
        fail(DLOCK_CONFIG, fmt::format("sql backend: `peer_timeout` is {} ms; use 3s..1h", c.peer_timeout_ms));
    if (const auto* v = find_option(values, count, "pool_size")) {
        if (v->int_value < 1 || v->int_value > 10000)
            fail(DLOCK_CONFIG, fmt::format("sql backend: `pool_size` {} is outside 1..10000", v->int_value));
        c.pool_size = size_t(v->int_value);
    }
}

// ---- the MySQL dialect --------------------------------------------------------------------------

// Whether the options select the MySQL dialect: `dialect`, else the DSN's scheme.
bool select_mysql(const dlock_option_value* values, size_t count, const std::string& dsn) {
    std::string dialect;
    if (const auto* v = find_option(values, count, "dialect")) dialect = v->string_value ? v->string_value : "";
    const bool mysql_dsn = mysql::is_mysql_dsn(dsn);
    if (dialect.empty()) return mysql_dsn;
    if (dialect == "mysql" || dialect == "mariadb") {
        if (!dsn.empty() && !mysql_dsn)
            fail(DLOCK_CONFIG, "sql backend: `dialect: mysql` needs a mysql://user:password@host:3306/database `dsn` (or "
                               "none, for localhost)");
        return true;
    }
    if (dialect == "postgresql" || dialect == "postgres") {
        if (mysql_dsn)
            fail(DLOCK_CONFIG, "sql backend: `dialect: postgresql` with a mysql:// `dsn`; drop `dialect` or give a "
                               "postgresql:// DSN");
        return false;
    }
    fail(DLOCK_CONFIG, fmt::format("sql backend: option `dialect` is `{}`; use `postgresql` or `mysql`", dialect));
}

// The MySQL dialect's settings from the plugin's options (validated here: the same option names as
// PostgreSQL's, with MySQL's limits; options only PostgreSQL has are refused by name).
mysql::settings parse_mysql(const dlock_option_value* values, size_t count, const std::string& dsn) {
    mysql::settings c;
    auto text = [&](const char* name, std::string& into) {
        if (const auto* v = find_option(values, count, name)) into = v->string_value ? v->string_value : "";
    };
    // The host hands every option over with its default filled in: one only PostgreSQL reads is
    // refused when it differs from that default.
    const auto* grace = find_option(values, count, "handoff_grace");
    const auto* pooler = find_option(values, count, "allow_session_pooler");
    const char* postgres_only = grace && grace->int_value != 50         ? "handoff_grace"
                                : pooler && pooler->int_value != 0      ? "allow_session_pooler"
                                : find_option(values, count, "advisory_key_prefix") ? "advisory_key_prefix"
                                                                        : nullptr;
    if (postgres_only)
        fail(DLOCK_CONFIG, fmt::format("sql backend: option `{}` applies to PostgreSQL only; remove it for MySQL", postgres_only));
    text("password", c.password);  // before the DSN's, which it overrides
    text("sslmode", c.sslmode);
    text("sslrootcert", c.sslrootcert);
    text("sslcert", c.sslcert);
    text("sslkey", c.sslkey);
    if (!dsn.empty()) mysql::parse_dsn(dsn, c);
    else c.server = "localhost:3306/(no database)";
    std::string mode = "lease";
    text("mode", mode);
    if (mode == "lease") c.mode = lock_mode::lease;
    else if (mode == "named" || mode == "advisory") c.mode = lock_mode::advisory;
    else fail(DLOCK_CONFIG, fmt::format("sql backend: option `mode` is `{}`; the MySQL dialect has `lease` and `named`", mode));
    // `schema`: the database of dlock's tables; PostgreSQL's default `public` means the DSN's database.
    text("schema", c.database_qualifier);
    if (c.database_qualifier == "public") c.database_qualifier.clear();
    text("table", c.table);
    if (!c.database_qualifier.empty() && c.database_qualifier.size() > 64)
        fail(DLOCK_CONFIG, fmt::format("sql backend: `schema` (the database of dlock's tables) must be 1..64 characters "
                                       "(it is {})", c.database_qualifier.size()));
    if (c.table.empty() || c.table.size() > 57)
        fail(DLOCK_CONFIG, fmt::format("sql backend: `table` must be 1..57 bytes, so that `<table>_schema` fits MySQL's 64 "
                                       "(it is {})", c.table.size()));
    read_limits(values, count, c);
    return c;
}

// ---- the PostgreSQL dialect ---------------------------------------------------------------------

// The PostgreSQL dialect's settings from the plugin's options, validated (postgres::open resolves
// them into a connection string).
settings parse_postgres(const dlock_option_value* values, size_t count, const std::string& dsn) {
    settings c;
    c.dsn = dsn;
    auto text = [&](const char* name, std::string& into) {
        if (const auto* v = find_option(values, count, name)) into = v->string_value ? v->string_value : "";
    };
    std::string mode = "lease";
    text("mode", mode);
    if (mode == "lease") c.mode = lock_mode::lease;
    else if (mode == "advisory") c.mode = lock_mode::advisory;
    else if (mode == "named")
        fail(DLOCK_CONFIG, "sql backend: option `mode` is `named`, the MySQL dialect's mode; PostgreSQL's session "
                           "locks are `mode: advisory`");
    else fail(DLOCK_CONFIG, fmt::format("sql backend: option `mode` is `{}`; use `lease` or `advisory`", mode));
    text("schema", c.schema);
    text("table", c.table);
    text("password", c.password);
    text("sslmode", c.sslmode);
    text("sslrootcert", c.sslrootcert);
    text("sslcert", c.sslcert);
    text("sslkey", c.sslkey);
    if (const auto* v = find_option(values, count, "handoff_grace")) c.handoff_grace_ms = v->int_value;
    if (c.handoff_grace_ms < 0 || c.handoff_grace_ms > 60'000)
        fail(DLOCK_CONFIG, fmt::format("sql backend: `handoff_grace` is {} ms; use 0..60s", c.handoff_grace_ms));
    read_limits(values, count, c);
    if (const auto* v = find_option(values, count, "allow_session_pooler")) c.allow_session_pooler = v->int_value != 0;
    text("advisory_key_prefix", c.advisory_key_prefix);
    if (!c.advisory_key_prefix.empty() && c.mode != lock_mode::advisory)
        fail(DLOCK_CONFIG, "sql backend: `advisory_key_prefix` applies to `mode: advisory` only (lease locks are rows, not "
                           "advisory keys)");
    if (c.schema.empty() || c.schema.size() > 63)
        fail(DLOCK_CONFIG, fmt::format("sql backend: `schema` must be 1..63 bytes (it is {})", c.schema.size()));
    if (c.table.empty() || c.table.size() > 54)
        fail(DLOCK_CONFIG, fmt::format("sql backend: `table` must be 1..54 bytes, so that `<table>_advisory` fits "
                                       "PostgreSQL's 63 (it is {})", c.table.size()));
    return c;
}

}  // namespace

// The plugin's backend: the dialect sql_create picked.
struct dlock_backend {
    std::unique_ptr<dialect> chosen;
};

namespace {

// ---- entry points -------------------------------------------------------------------------------

int sql_create(const dlock_option_value* values, size_t count, const dlock_plugin_host* host, dlock_backend** out,
               dlock_plugin_error* error) {
    return guarded(error, "sql", [&] {
        dlock_plugin_host host_copy{};
        dlock::plugin_kit::copy_in(host_copy, host, DLOCK_PLUGIN_HOST_V1_SIZE);  // the part its struct_size covers
        std::string dsn;
        if (const auto* v = find_option(values, count, "dsn")) dsn = v->string_value ? v->string_value : "";
        dsn = strip_query_keys(dsn, dlock_query_keys);
        auto b = std::make_unique<dlock_backend>();
        b->chosen = select_mysql(values, count, dsn) ? mysql::open(parse_mysql(values, count, dsn), host_copy)
                                                     : postgres::open(parse_postgres(values, count, dsn), host_copy);
        *out = b.release();
        return DLOCK_OK;
    });
}

void sql_destroy(dlock_backend* b) { delete b; }

uint64_t sql_capabilities(dlock_backend* b) {
    // Without a backend (the defaults): what PostgreSQL's lease mode offers a role that may create dlock's tables.
    return b ? b->chosen->capabilities() : postgres::default_capabilities();
}

void sql_interrupt(dlock_backend* b) { b->chosen->interrupt(); }

int sql_acquire(dlock_backend* b, const dlock_acquire_request* req, dlock_hold** out_hold, dlock_grant* grant,
                dlock_plugin_error* error) {
    return guarded(error, "sql", [&] {
        // Both dialects store a semaphore's limit in a 32-bit signed column.
        if (DLOCK_STRUCT_COVERS(req, dlock_acquire_request, permits) && req->kind == DLOCK_HOLD_PERMIT && req->permits > uint32_t(INT32_MAX))
            fail(DLOCK_INVALID_ARGUMENT, fmt::format("sql backend: semaphore `{}`: a limit of {} permits is more than the {} the sql "
                                                     "backend stores (a 32-bit integer column)", req->name, req->permits, INT32_MAX));
        return b->chosen->acquire(req, out_hold, grant);
    });
}

int sql_release(dlock_backend* b, dlock_hold* h, dlock_plugin_error* error) {
    return guarded(error, "sql", [&] { return b->chosen->release(h); });
}

void sql_hold_destroy(dlock_backend* b, dlock_hold* h) {
    if (!h) return;
    b->chosen->destroy_hold(h);
}

int sql_renew(dlock_backend* b, dlock_renewal* renewals, size_t count, dlock_plugin_error* error) {
    return guarded(error, "sql", [&] {
        if (count == 0) return int(DLOCK_OK);
        return b->chosen->renew(renewals, count);
    });
}

int sql_inspect(dlock_backend* b, const char* name, dlock_lock_info* info, dlock_plugin_error* error) {
    return guarded(error, "sql", [&] { return b->chosen->inspect(name, info); });
}

int sql_holders(dlock_backend* b, const char* name, int semaphore, dlock_holder_visitor visit, void* user_data,
                dlock_plugin_error* error) {
    return guarded(error, "sql", [&] {
        return b->chosen->visit_holders(
            name, true, [&](uint32_t kind) { return (kind == DLOCK_HOLD_PERMIT) == (semaphore != 0); }, visit, user_data);
    });
}

int sql_list(dlock_backend* b, const char* prefix, dlock_holder_visitor visit, void* user_data, dlock_plugin_error* error) {
    return guarded(error, "sql", [&] {
        return b->chosen->visit_holders(prefix ? prefix : "", false, [](uint32_t) { return true; }, visit, user_data);
    });
}

int sql_break(dlock_backend* b, const char* name, int semaphore, size_t* out_broken, dlock_plugin_error* error) {
    return guarded(error, "sql", [&]() -> int {
        const size_t broken = b->chosen->break_lock(name, semaphore != 0);
        if (out_broken) *out_broken = broken;
        return DLOCK_OK;
    });
}

const dlock_plugin sql_plugin = {
    sizeof(dlock_plugin),
    2,
    "sql",
    "PostgreSQL via libpqxx: a lease table with server-side expiry and LISTEN/NOTIFY waits (mode: lease), or "
    "session advisory locks on held connections (mode: advisory); fencing counters in both. MySQL/MariaDB dialect "
    "(mysql:// DSN or dialect: mysql) via MariaDB Connector/C: a lease table (mode: lease, waiters poll) or GET_LOCK "
    "on held connections (mode: named).",
    sql_options,
    sizeof sql_options / sizeof sql_options[0],
    sql_create,
    sql_destroy,
    sql_capabilities,
    sql_interrupt,
    sql_acquire,
    sql_release,
    sql_hold_destroy,
    sql_renew,
    sql_inspect,
    sql_holders,
    sql_list,
    sql_break,
};
const dlock_plugin sql_plugin_v1_view = dlock::plugin_kit::as_version_1(sql_plugin);

}  // namespace

extern "C" DLOCK_PLUGIN_EXPORT int dlock_plugin_negotiate(uint32_t host_max_version, const dlock_plugin** out,
                                                          uint32_t* out_min_version) {
    return dlock::plugin_kit::negotiate_v2(host_max_version, &sql_plugin, &sql_plugin_v1_view, out, out_min_version);
}
