// The `sql` backend: PostgreSQL through libpqxx, in one of two modes.
//
// mode: lease (default) — a lock table, time kept by the server's clock only.
//   Acquire is one prepared statement: INSERT the name's row, or take over the row when it is free
//   or its expiry (clock_timestamp() + ttl, set by the server) has passed, bumping its fence; it
//   returns the fence, or, when the lock is held, the holder's remaining time. Rows are never
//   deleted (the fence must stay monotonic): release clears owner and expiry where the owner token
//   matches and NOTIFYs the name's channel in the same statement. Renewal extends every lease of a
//   batch in one UPDATE … FROM unnest(…). A connection lost while an acquire may have committed is
//   resolved by reading the row back by owner token: only a row carrying our token proves we hold it.
//   Waiting: the client's one LISTEN connection watches the name's channel before the retry; the
//   waiter retries on a notification, or at the holder's expiry (a dead holder never notifies).
//   Anti-barging: a waiter registers in the row; for handoff_grace after a release only registered
//   waiters may take the row, and woken waiters that compete retry after a short random delay that
//   shrinks the longer they have waited, so the order NOTIFY reaches them in does not pick the winner.
//   Fair waits (`fair: true`, the default): a waiter queues in the name's turnstile, a session
//   advisory lock the server grants in arrival order, and makes its attempt once admitted, in one
//   statement (the first statement of an acquire, for a name this client last found contended);
//   only the waiter admitted listens and retries (on the turnstile's session), and it leaves the
//   turnstile once it holds the lock or gives up. A release therefore wakes one waiter, and waiters
//   acquire first come, first served; a waiter that dies leaves the queue with its session.
//
// mode: advisory — PostgreSQL's own lock manager.
//   A session-level pg_advisory_lock on a 64-bit hash of the name, taken on a pooled connection that
//   then stays with the lease until release: the lock lives as long as that session. The same
//   statement bumps the name's fence counter row. Waiting is the server's lock queue
//   (pg_advisory_lock with lock_timeout set to the time left, in the same statement); closing the
//   client shuts the waiting sockets down, which ends those sessions and anything they were granted.
//   A monitor thread waits on the held sessions' sockets (epoll) and reports LOST as soon as the
//   server ends one (pg_terminate_backend, restart, keepalive/tcp_user_timeout expiry); it also
//   probes each idle held session every peer_timeout/3 with an empty query, so a partition that a
//   proxy hides from TCP is reported within 2/3 of peer_timeout.
//
// Every statement is prepared and parameterized: lock names are only ever parameters. Only the
// configured schema and table names (quoted identifiers) and dlock's own channel names (hex) are in
// SQL text.
//
// MySQL/MariaDB (a mysql:// or mariadb:// DSN, or `dialect: mysql`): sql_create reads the same
// options into the dialect's own backend (mysql_backend.hpp) and every entry point forwards to it.
#include "lease_state.hpp"
#include "mysql_backend.hpp"
#include "pg_client.hpp"
#include "sql_statements.hpp"
#include <dlock/plugin_kit/plugin_struct.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace dlock::sql;

namespace {

using dlock::plugin_kit::find_option;
using dlock::plugin_kit::guarded;

constexpr int schema_version = 1;
// Upper bound of the random delay a woken lease-mode waiter takes before retrying when other waiters
// compete (halved for every round it has lost): about the spread of NOTIFY delivery to 8 clients.
constexpr int64_t contention_spread_ns = 400'000;

// A PostgreSQL array literal of text values, passed as one parameter ("{\"a\",\"b\"}"): every
// element double-quoted with `"` and `\` escaped, so any name is one element.
std::string text_array(const std::vector<std::string>& values) {
    std::string out = "{";
    for (size_t i = 0; i < values.size(); ++i) {
        if (i) out += ',';
        out += '"';
        for (char c : values[i]) {
            if (c == '"' || c == '\\') out += '\\';
            out += c;
        }
        out += '"';
    }
    return out + "}";
}

std::string holder_description() {
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
    return fmt::format("{} pid {}", host, getpid());
}

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

}  // namespace

// Lease mode: its lease_state (valid_until_ns, release_sent_while_valid).
struct dlock_hold : lease_state {
    std::string name;
    std::string owner;
    uint32_t kind = DLOCK_HOLD_EXCLUSIVE;  // dlock_hold_kind
    std::string channel;  // lease mode
    int64_t key = 0;      // advisory mode
    void* host_lease = nullptr;
    std::unique_ptr<session> held;  // advisory mode: the session whose lock this is
    mysql::hold* mysql_hold = nullptr;  // the MySQL dialect's hold (owned; its backend destroys it)
};

struct dlock_backend {
    std::unique_ptr<mysql::backend> mysql;  // the MySQL dialect, when selected: every entry point forwards to it
    settings config;
    statements sql;
    dlock_plugin_host host{};
    std::string holder;
    std::unique_ptr<pool> sessions;
    // Lease mode: the sessions fair waiters queue on (settings::queue_sessions: no statement_timeout,
    // every lock wait bounded by lock_timeout), so that a wait in a name's queue may last as long as
    // the acquire allows. At most pool_size of them besides `sessions`.
    std::unique_ptr<pool> queue_sessions;
    pool& queue_pool() { return queue_sessions ? *queue_sessions : *sessions; }
    std::atomic<bool> interrupted{false};
    // Lease mode: the holders table and the lease table's `readers` column exist (semaphores,
    // shared locks, holders, list and break are offered).
    bool shared_ready = false;

    // Lease mode: whether this client's fair acquires last found a name contended (they had to wait,
    // or queued and found others queued) or free. A fair acquire of a contended name queues in its
    // first statement (acquire_queued); of a free one it first tries the plain `acquire`, which
    // takes no turnstile. Of a name the client knows nothing of, it queues at once when a queue
    // session is idle (the client has queued before; a free name costs acquire_queued one
    // statement too), else it tries the plain statement first: waiters that arrive together on a
    // new name then queue at once, rather than each first making a plain attempt that locks and
    // writes the name's row, one after the other. A hint only: either way the lock goes first come,
    // first served.
    std::mutex contended_mutex;
    std::map<std::string, bool> contention_hints;
    bool seems_contended(const std::string& name) {
        {
            std::lock_guard<std::mutex> lock(contended_mutex);
            const auto it = contention_hints.find(name);
            if (it != contention_hints.end()) return it->second;
        }
        return queue_sessions && queue_sessions->has_idle();
    }
    void note_contended(const std::string& name, bool contended) {
        std::lock_guard<std::mutex> lock(contended_mutex);
        // Bounded: the hints just start over.
        if (contention_hints.size() >= 1024 && !contention_hints.count(name)) contention_hints.clear();
        contention_hints[name] = contended;
    }

    // Lease mode: the LISTEN connection, started by the first wait.
    std::mutex listener_mutex;
    std::unique_ptr<listener> waker;
    listener& listener_for_waits() {
        std::lock_guard<std::mutex> lock(listener_mutex);
        if (!waker) waker = std::make_unique<listener>(config, sessions->watch());
        if (interrupted) waker->interrupt();
        return *waker;
    }

    // Advisory mode: sessions blocked in the server's lock queue (closing the client shuts their
    // sockets down), and the monitor of held sessions, started by the first hold.
    std::mutex waiting_mutex;
    std::vector<session*> waiting;
    std::mutex monitor_mutex;
    std::unique_ptr<monitor> watcher;
    monitor& monitor_for_holds() {
        std::lock_guard<std::mutex> lock(monitor_mutex);
        if (!watcher)
            // Probed every peer_timeout/3, so a silent session is reported within 2/3 of peer_timeout,
            // as TCP keepalives report a dead peer when nothing acknowledges in its place.
            watcher = std::make_unique<monitor>(
                [this](void* cookie) {
                    auto* h = static_cast<dlock_hold*>(cookie);
                    if (host.hold_state_changed) host.hold_state_changed(host.context, h->host_lease, DLOCK_LEASE_LOST, 0);
                },
                config.peer_timeout_ms * 1'000'000 / 3);
        return *watcher;
    }

    // Advisory mode: hash64(advisory_table + '\0' + name) of a name (docs/backends/sql.md), set with the table.
    hash64_prefix advisory_key_hash{""};

    std::string where() const { return "postgres " + config.server; }
    // When a statement sent now must have been answered (client-side limit).
    int64_t statement_deadline() const { return now_ns() + config.client_limit_ms() * 1'000'000; }
    std::string channel_for(const std::string& name) const {
        return fmt::format("dlock_{:016x}", hash64(sql.lease_table + '\0' + name));
    }
    int64_t turnstile_key_for(const std::string& name) const {
        return int64_t(hash64(std::string("turnstile") + '\0' + sql.lease_table + '\0' + name));
    }
    // The advisory key of `name`: a hash of it (docs/backends/sql.md, "mode: advisory"), or with
    // advisory_key_prefix the integer the name spells. Throws failure(DLOCK_INVALID_ARGUMENT) for a
    // name with the prefix that spells no 64-bit integer (it would otherwise silently hash).
    int64_t key_for(const std::string& name) const {
        const std::string& prefix = config.advisory_key_prefix;
        if (prefix.empty() || name.compare(0, prefix.size(), prefix) != 0) return int64_t(advisory_key_hash(name));
        const std::string digits = name.substr(prefix.size());
        const char* begin = digits.c_str();
        char* end = nullptr;
        errno = 0;
        const long long key = std::strtoll(begin, &end, 10);
        const bool well_formed = !digits.empty() && (std::isdigit(static_cast<unsigned char>(digits[0])) || digits[0] == '-') &&
                                 end == begin + digits.size() && errno == 0;
        if (!well_formed)
            fail(DLOCK_INVALID_ARGUMENT, fmt::format("sql backend: name `{}` starts with advisory_key_prefix `{}`, but `{}` is not "
                                                     "a decimal 64-bit integer (an advisory key)", name, prefix, digits));
        // One key, one name: each name has its own fencing counter, so `pgkey:042` beside `pgkey:42`
        // would let the token of key 42 go backwards.
        if (std::to_string(key) != digits)
            fail(DLOCK_INVALID_ARGUMENT, fmt::format("sql backend: name `{}` spells advisory key {} other than `{}{}`, its only "
                                                     "name (no leading zeros, no `-0`): one key has one fencing counter",
                                                     name, key, prefix, key));
        return int64_t(key);
    }
    // A semaphore's own channel and turnstile (a semaphore and a lock of one name are distinct).
    std::string semaphore_channel_for(const std::string& name) const {
        return fmt::format("dlock_{:016x}", hash64(std::string("semaphore") + '\0' + sql.holders_table + '\0' + name));
    }
    int64_t semaphore_turnstile_key_for(const std::string& name) const {
        return int64_t(hash64(std::string("semaphore turnstile") + '\0' + sql.holders_table + '\0' + name));
    }

    ~dlock_backend() {
        {
            std::lock_guard<std::mutex> lock(listener_mutex);
            waker.reset();
        }
        std::lock_guard<std::mutex> lock(monitor_mutex);
        watcher.reset();
    }
};

namespace {

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

// The MySQL dialect's backend from the plugin's options (validated here: the same option names as
// PostgreSQL's, with MySQL's limits; options only PostgreSQL has are refused by name).
std::unique_ptr<mysql::backend> create_mysql(const dlock_option_value* values, size_t count, const std::string& dsn,
                                             const dlock_plugin_host& host) {
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
    return std::make_unique<mysql::backend>(c, host);
}

int acquire_mysql(dlock_backend* b, const dlock_acquire_request* req, dlock_hold** out_hold, dlock_grant* grant) {
    auto h = std::make_unique<mysql::hold>();
    const int status = b->mysql->acquire(req, h, grant);
    if (status != DLOCK_OK) return status;
    auto outer = std::make_unique<dlock_hold>();
    outer->name = req->name;
    outer->mysql_hold = h.release();
    *out_hold = outer.release();
    return DLOCK_OK;
}

// ---- setup --------------------------------------------------------------------------------------

// Refuses servers dlock cannot lock on: a hot standby or a read-only default (no writes), and in
// advisory mode a pooling proxy between us and the server (the backend pid announced at connect
// differs from the server's own pg_backend_pid(): a transaction-mode pooler would run our lock and
// unlock on different sessions and leave locks on sessions other clients then use).
void check_server(dlock_backend& b, session& s) {
    libpqxx_call_scope scope;
    const pqxx::result r = s.within(b.statement_deadline(), [&] {
        pqxx::nontransaction tx(s.connection());
        return tx.exec("SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only'), pg_backend_pid(), "
                       "current_setting('server_encoding')");
    });
    if (r[0][0].as<bool>())
        fail(DLOCK_BACKEND, fmt::format("sql backend: postgres {} is a hot standby (in recovery, read-only): dlock must "
                                        "write its lock rows; point `dsn` at the primary (target_session_attrs=read-write)",
                                        b.config.server));
    if (r[0][1].as<std::string>() == "on")
        fail(DLOCK_BACKEND, fmt::format("sql backend: postgres {} makes transactions read-only "
                                        "(default_transaction_read_only = on): dlock must write its lock rows; turn it off "
                                        "for dlock's user or database, or point `dsn` at a writable primary",
                                        b.config.server));
    const int server_pid = r[0][2].as<int>();
    if (b.config.mode == lock_mode::advisory && server_pid != s.backend_pid() && !b.config.allow_session_pooler)
        fail(DLOCK_CONFIG, fmt::format("sql backend: advisory mode needs a direct session, but a pooling proxy sits between "
                                       "dlock and postgres {} (the connection announced backend pid {}, the server runs it "
                                       "as pid {}); with transaction pooling, session advisory locks would outlive or "
                                       "change hands with our transactions. Connect directly, use `mode: lease`, or — "
                                       "only for a pooler in session mode — set `allow_session_pooler: true`",
                                       b.config.server, s.backend_pid(), server_pid));
    if (b.config.mode == lock_mode::lease && server_pid != s.backend_pid() && b.host.log)
        b.host.log(b.host.context, 2,
                   fmt::format("a pooling proxy sits between dlock and postgres {}: lease mode works through one in "
                               "session mode; in transaction mode its prepared statements fail",
                               b.config.server)
                       .c_str());
    // The server's version was checked at connect (check_server_version), before any statement.
    if (r[0][3].as<std::string>() != "UTF8" && b.host.log)
        b.host.log(b.host.context, 2,
                   fmt::format("postgres {} stores text as {}: names that encoding cannot represent are refused",
                               b.config.server, r[0][3].as<std::string>())
                       .c_str());
}

// Lease mode: the holders table and the lease table's `readers` column, created when missing. A
// role that may not create them (an administrator owns the tables) still gets plain locks: the
// backend then offers no semaphores, shared locks, holders, list or break, and says so in the log.
bool ensure_shared_tables(dlock_backend& b, session& s) {
    libpqxx_call_scope scope;
    const auto present = [&] {
        return s.within(b.statement_deadline(), [&] {
            pqxx::nontransaction tx(s.connection());
            return tx.exec_params("SELECT to_regclass($1) IS NOT NULL AND (SELECT count(*) FROM pg_attribute WHERE "
                                  "attrelid = to_regclass($2) AND attname IN ('readers', 'generation') AND NOT attisdropped) = 2",
                                  b.sql.holders_table, b.sql.lease_table)[0][0]
                .as<bool>();
        });
    };
    if (present()) return true;
    try {
        s.within(b.statement_deadline(), [&] {
            pqxx::work ddl(s.connection());
            ddl.exec("SELECT pg_advisory_xact_lock(7428178217163315313)");  // the DDL lock of ensure_schema
            for (const std::string& change : b.sql.shared_tables()) ddl.exec(change);
            ddl.commit();
            return 0;
        });
        return true;
    } catch (const pqxx::sql_error& e) {
        if (b.host.log)
            b.host.log(b.host.context, 1,
                       fmt::format("postgres {}: cannot add the holders table {} and the `readers` column of "
                                   "{} ({}); semaphores, shared locks, list and break are off until an administrator "
                                   "adds them (docs/backends/sql.md, \"Semaphores and shared locks\")",
                                   b.config.server, b.sql.holders_table, b.sql.lease_table, sqlstate_of(e))
                           .c_str());
        return false;
    }
}

// Creates schema and tables when missing (serialized among concurrent clients by a transaction
// advisory lock) and checks the schema version row, so a later dlock can migrate.
void ensure_schema(dlock_backend& b, session& s) {
    libpqxx_call_scope scope;
    const settings& c = b.config;
    const std::string schema_q = quote_identifier(c.schema);
    s.within(b.statement_deadline(), [&] {
        pqxx::nontransaction tx(s.connection());
        const pqxx::result r = tx.exec_params("SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND "
                                              "to_regclass($3) IS NOT NULL",
                                              b.sql.lease_table, b.sql.advisory_table, b.sql.version_table);
        if (r[0][0].as<bool>()) return 0;
        tx.commit();
        pqxx::work ddl(s.connection());
        ddl.exec("SELECT pg_advisory_xact_lock(7428178217163315313)");  // "dlock DDL", any constant
        const pqxx::result ns = ddl.exec_params("SELECT to_regnamespace($1) IS NOT NULL", schema_q);
        if (!ns[0][0].as<bool>()) ddl.exec("CREATE SCHEMA IF NOT EXISTS " + schema_q);
        for (const std::string& create : b.sql.tables()) ddl.exec(create);
        ddl.commit();
        return 0;
    });
    const pqxx::result v = s.within(b.statement_deadline(), [&] {
        pqxx::nontransaction tx(s.connection());
        return tx.exec_params(
            fmt::format("WITH ins AS (INSERT INTO {0} (component, version) VALUES ('dlock', $1) ON CONFLICT (component) "
                        "DO NOTHING RETURNING version) SELECT version FROM ins UNION ALL SELECT version FROM {0} "
                        "WHERE component = 'dlock'", b.sql.version_table),
            schema_version);
    });
    const int found = v.empty() ? schema_version : v[0][0].as<int>();
    if (found > schema_version)
        fail(DLOCK_CONFIG, fmt::format("sql backend: the tables at {} on postgres {} use dlock schema version {}, newer "
                                       "than this dlock understands ({}); upgrade dlock or use another `table`",
                                       b.sql.lease_table, c.server, found, schema_version));
    if (c.mode == lock_mode::lease) b.shared_ready = ensure_shared_tables(b, s);
}

int sql_create(const dlock_option_value* values, size_t count, const dlock_plugin_host* host, dlock_backend** out,
               dlock_plugin_error* error) {
    return guarded(error, "sql", [&] {
        auto b = std::make_unique<dlock_backend>();
        dlock::plugin_kit::copy_in(b->host, host, DLOCK_PLUGIN_HOST_V1_SIZE);  // the part its struct_size covers
        settings& c = b->config;
        auto text = [&](const char* name, std::string& into) {
            if (const auto* v = find_option(values, count, name)) into = v->string_value ? v->string_value : "";
        };
        text("dsn", c.dsn);
        c.dsn = strip_query_keys(c.dsn, dlock_query_keys);
        if (select_mysql(values, count, c.dsn)) {
            b->mysql = create_mysql(values, count, c.dsn, b->host);
            *out = b.release();
            return DLOCK_OK;
        }
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
        resolve(c);
        const std::string schema_q = quote_identifier(c.schema);
        b->sql.lease_table = schema_q + "." + quote_identifier(c.table);
        b->sql.advisory_table = schema_q + "." + quote_identifier(c.table + "_advisory");
        b->sql.version_table = schema_q + "." + quote_identifier(c.table + "_schema");
        b->sql.holders_table = schema_q + "." + quote_identifier(c.table + "_holders");
        b->advisory_key_hash = hash64_prefix(b->sql.advisory_table + '\0');
        b->holder = holder_description();
        b->sql.queue_idle_ms = c.peer_timeout_ms;  // a silent admitted fair waiter's place ends after this
        b->sql.break_idle_ms = c.peer_timeout_ms;  // a stalled break's transaction ends after this
        auto prepared = c.mode == lock_mode::lease ? b->sql.lease() : b->sql.advisory();
        if (c.mode == lock_mode::lease)
            for (auto& statement : b->sql.shared()) prepared.push_back(std::move(statement));
        if (c.mode == lock_mode::lease) {
            settings queue_config = c;
            queue_config.queue_sessions = true;
            resolve(queue_config);
            b->queue_sessions = std::make_unique<pool>(queue_config, prepared);
        }
        b->sessions = std::make_unique<pool>(c, std::move(prepared));
        {
            // Connect eagerly: a wrong address, password or server is an error at open, not at first use.
            auto s = b->sessions->borrow(now_ns() + 5'000'000'000);
            try {
                check_server(*b, *s);
                ensure_schema(*b, *s);
            } catch (const failure&) {
                throw;
            } catch (const std::exception& e) {
                s->mark_broken();
                throw classify(c, e, "setup (checking the server and dlock's tables)", false);
            }
        }
        *out = b.release();
        return DLOCK_OK;
    });
}

void sql_destroy(dlock_backend* b) { delete b; }

uint64_t sql_capabilities(dlock_backend* b) {
    if (b && b->mysql) return b->mysql->capabilities();
    if (b && b->config.mode == lock_mode::advisory)
        return DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_PUSH_WAIT | DLOCK_CAP_SESSION_BOUND | DLOCK_CAP_SHARED | DLOCK_CAP_LIST;
    const uint64_t lease = DLOCK_CAP_TTL | DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_PUSH_WAIT;
    // Without a backend (the defaults): what a role that may create dlock's tables gets.
    if (!b || b->shared_ready) return lease | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_SHARED | DLOCK_CAP_LIST | DLOCK_CAP_BREAK;
    return lease;
}

void sql_interrupt(dlock_backend* b) {
    if (b->mysql) return b->mysql->interrupt();
    b->interrupted = true;
    b->sessions->interrupt();
    if (b->queue_sessions) b->queue_sessions->interrupt();
    {
        std::lock_guard<std::mutex> lock(b->listener_mutex);
        if (b->waker) b->waker->interrupt();
    }
    // Advisory waits block inside the server. A cancel request could arrive before the statement
    // does and be lost; shutting the socket down cannot: the statement fails at once, the server
    // ends the session, and a lock granted in the same instant goes with it.
    std::lock_guard<std::mutex> lock(b->waiting_mutex);
    for (session* s : b->waiting) ::shutdown(s->socket(), SHUT_RDWR);
}

// ---- lease mode ---------------------------------------------------------------------------------

struct attempt {
    bool acquired = false;
    uint64_t fence = 0;
    int64_t holder_left_ms = -1;  // -1: unknown (retry at once)
    int64_t sent_ns = 0;
    bool outcome_was_unknown = false;  // the connection dropped; the row read back was not ours
    bool registered = false;           // this attempt registered us as a waiter...
    int64_t registered_at_us = 0;      // ...at this server time
    int64_t waiters = 0;               // waiters registered in the row (as our snapshot saw it)
    bool left_queue = false;           // acquired by acquire_queued, which also left the turnstile (it was free)
};

// Roles of an acquire attempt (statement `acquire`, $5).
enum attempt_role { try_only = 0, first_of_a_wait = 1, waiter_retry = 2 };

// Settles the outcome of an acquire statement whose answer never came (its connection broke, or the
// client gave it up at its deadline), before anything reads it back. The statement may still be
// running on the server — waiting on a row lock, or its bytes still on the way through a proxy — and
// would commit after a read-back that found nothing: then a retry with the same owner token takes a
// second permit, or counts the reader twice (and a release counts it out once), or, after the
// holder's release, the row is taken again for a ttl. So the lost session's server process is ended
// (pg_terminate_backend, by the pid and start time the session read at connect, as the login role:
// statements::activity_as_login) and awaited: once it is gone, its statement has committed, or never
// will. Returns what prevented that (nullopt: settled); the caller still reads back, since a row
// found proves the hold either way, but without settling, nothing found is no proof of "not taken".
// Behind a pooling proxy (the server process is not ours to end: the pooler hands it to another
// client) nothing is done, and that window stays open (docs/backends/sql.md).
std::optional<failure> end_lost_session(dlock_backend* b, const session& lost) {
    if (lost.behind_pooler()) return std::nullopt;
    if (lost.server_pid() == 0)
        return failure{DLOCK_UNKNOWN, "the lost session's server process is unknown (its pid and start were not readable at "
                                      "connect), so its statement cannot be ended"};
    const int64_t deadline = b->statement_deadline();
    try {
        auto s = b->sessions->borrow(deadline);
        try {
            if (s->run_until(deadline, "end_session", lost.server_pid(), lost.server_started_us())[0][0].as<int64_t>() == 0)
                return std::nullopt;
            while (s->run_until(deadline, "session_present", lost.server_pid(), lost.server_started_us())[0][0].as<int64_t>() > 0) {
                if (now_ns() >= deadline)
                    return failure{DLOCK_UNKNOWN, fmt::format("the server process {} of the lost acquire was told to end and "
                                                              "still runs", lost.server_pid())};
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
            }
            return std::nullopt;
        } catch (const std::exception& e) {
            if (dynamic_cast<const pqxx::broken_connection*>(&e)) s->mark_broken();
            if (sqlstate_of(e) == "42501") {
                std::string why = e.what();
                std::replace(why.begin(), why.end(), '\n', ' ');
                while (!why.empty() && why.back() == ' ') why.pop_back();
                return failure{DLOCK_PERMISSION, fmt::format("the login role may not end the server process {} of the lost "
                                                             "acquire: {}", lost.server_pid(), why)};
            }
            return classify(b->config, e, "ending the server process of a lost acquire", false);
        }
    } catch (const failure& f) {
        return f;
    }
}

// The answer of an acquire whose connection was lost (`lost`: what broke it) when settling it on the
// server failed too (`why`) and no row of ours was found: UNKNOWN, never "held". `what` names what
// expires by itself if the lost statement committed ("row", "hold").
[[noreturn]] void fail_unsettled_acquire(const dlock_backend* b, const std::string& name, const char* lost,
                                         const std::string& why, const char* what) {
    fail(DLOCK_UNKNOWN, fmt::format("sql backend: {}: the connection was lost during the acquire of `{}` ({}) and settling "
                                    "it on the server failed too ({}); its outcome is unknown and it is not reported held; "
                                    "if it committed, the {} expires after its ttl",
                                    b->where(), name, lost, why, what));
}

// Reads our row back after a connection loss left an acquire's outcome unknown (end_lost_session()
// first): a row with our owner token and a future expiry is the only proof that we hold the lock.
bool read_back(dlock_backend* b, dlock_hold& h, attempt& a) {
    const int64_t deadline = b->statement_deadline();
    auto s = b->sessions->borrow(deadline);
    try {
        const pqxx::result r = s->run_until(deadline, "read_back", h.name, h.owner);
        if (r.empty()) return false;
        a.acquired = true;
        a.fence = r[0][0].as<uint64_t>();
        return true;
    } catch (const std::exception& e) {
        s->mark_broken();
        throw classify(b->config, e, fmt::format("reading back the acquire of `{}`", h.name), true);
    }
}

std::string lock_timeout_for(int64_t deadline_ns);

// Leaves every turnstile place queue session `s` holds (statement turnstile_leave_any); false when
// that failed (the caller then closes the session, which leaves them on the server).
bool leave_any_turnstile(dlock_backend* b, session& s) {
    try {
        s.run_until(b->statement_deadline(), "turnstile_leave_any");
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

// A fair waiter's attempt: on its turnstile session; the first one waits for admission in the same
// statement (acquire_queued, with the name's turnstile key).
struct fair_attempt {
    session* on;
    int64_t key;
    bool enter;                // not admitted yet: wait in the turnstile first (acquire_queued)
    int64_t wait_deadline_ns;  // enter: when to give the wait up client-side
    bool left = false;         // out: acquire_queued acquired and left the turnstile (it was free)
};

// `acquire_deadline_ns`: the request's (0: try once; INT64_MAX: none). The statement is given up at
// the client-side limit, or at that deadline if sooner; the read-back that follows a statement given
// up has the full limit, so a server that answers again resolves the outcome.
// `fair`: a fair waiter's attempt on its turnstile session, else a pooled session runs `acquire`.
// A statement that fails while it waits in the turnstile throws failure DLOCK_TIMEOUT (its
// lock_timeout ran out: the session has left any place it held, or is left broken if it could not)
// or DLOCK_CANCELLED (the client is closing), which leaves the session broken: it may have been
// admitted before it failed.
attempt try_acquire_lease(dlock_backend* b, dlock_hold& h, int64_t ttl_ms, attempt_role role, int64_t registered_at_us,
                          int64_t acquire_deadline_ns, fair_attempt* fair = nullptr) {
    attempt a;
    int64_t deadline = statement_deadline_within(b->config.client_limit_ms(), acquire_deadline_ns);
    if (fair && fair->enter) deadline = fair->wait_deadline_ns;
    pool::lease borrowed;
    if (!fair) borrowed = b->sessions->borrow(deadline, true);
    session* s = fair ? fair->on : &*borrowed;
    a.sent_ns = now_ns();
    try {
        const pqxx::result r =
            !fair ? s->run_until(deadline, "acquire", h.name, h.owner, ttl_ms, b->holder, int(role), b->config.handoff_grace_ms,
                                 registered_at_us)
            : fair->enter ? s->run_until(deadline, "acquire_queued", h.name, h.owner, ttl_ms, b->holder, int(role),
                                         b->config.handoff_grace_ms, registered_at_us, fair->key, lock_timeout_for(acquire_deadline_ns))
                          : s->run_until(deadline, "acquire", h.name, h.owner, ttl_ms, b->holder, int(role), b->config.handoff_grace_ms,
                                         registered_at_us);
        if (!r.empty() && !r[0][0].is_null()) {
            a.acquired = true;
            a.fence = r[0][0].as<uint64_t>();
            if (fair && fair->enter) fair->left = a.left_queue = !r[0][4].is_null() && r[0][4].as<bool>();
        } else if (!r.empty()) {
            if (!r[0][1].is_null()) a.holder_left_ms = r[0][1].as<int64_t>();
            a.registered = !r[0][2].is_null();
            if (a.registered) a.registered_at_us = r[0][2].as<int64_t>();
            if (!r[0][3].is_null()) a.waiters = r[0][3].as<int64_t>();
        }
        return a;
    } catch (const pqxx::broken_connection& e) {
        s->mark_broken();
        // Closing the client shuts down the socket of a statement waiting in the turnstile (as it
        // does an advisory wait); an attempt made in the instant of admission that committed leaves
        // a row that expires after its ttl.
        if (fair && fair->enter && b->interrupted) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        // UNKNOWN: the statement may have committed. Only our row proves it did, once it can no
        // longer commit later.
        const auto unknown = [&](const std::string& why) { fail_unsettled_acquire(b, h.name, e.what(), why, "row"); };
        const std::optional<failure> unsettled = end_lost_session(b, *s);
        try {
            if (read_back(b, h, a)) return a;  // our row: held, whether or not the lost statement was settled
        } catch (const failure& f) {
            unknown(unsettled ? unsettled->message : f.message);
        }
        if (unsettled) unknown(unsettled->message);  // nothing yet, but the lost statement may still commit
        // Not taken: the lost statement ended without committing (or, behind a pooler, not yet:
        // if it commits later, the row carries our owner token; our retry takes it over, or it
        // expires).
        a.outcome_was_unknown = true;
        return a;
    } catch (const std::exception& e) {
        if (fair && fair->enter) {
            // lock_timeout ran out (55P03): in the turnstile, or on the row once admitted. The session
            // answered, so it serves the next wait once it has left whatever place it held; any
            // other failure, or a client that is closing, ends the session (and its place with it).
            const bool timed_out = !b->interrupted && sqlstate_of(e) == "55P03";
            if (!timed_out || !leave_any_turnstile(b, *s)) s->mark_broken();
            if (b->interrupted) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
            if (timed_out)
                fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held on {} (waited behind the waiters queued before)", h.name,
                                                b->where()));
        }
        throw classify(b->config, e, fmt::format("the acquire of `{}`", h.name), false);
    }
}

// A session blocked in a server-side wait (the turnstile, an advisory lock), registered for the time
// of the wait so that interrupt() can shut it down. Refuses to register once the client is closing.
class waiting_session {
public:
    waiting_session(dlock_backend* b, session* s) : b_(b), s_(s) {
        std::lock_guard<std::mutex> lock(b_->waiting_mutex);
        if (b_->interrupted) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        b_->waiting.push_back(s_);
    }
    ~waiting_session() {
        std::lock_guard<std::mutex> lock(b_->waiting_mutex);
        auto it = std::find(b_->waiting.begin(), b_->waiting.end(), s_);
        *it = b_->waiting.back();
        b_->waiting.pop_back();
    }
    waiting_session(const waiting_session&) = delete;
    waiting_session& operator=(const waiting_session&) = delete;

private:
    dlock_backend* b_;
    session* s_;
};

// A fair waiter's place in the name's turnstile (statement `turnstile_enter`): a session advisory
// lock on its own pooled session, held from admission until the waiter holds the lock or gives up.
// While it waits for admission, closing the client shuts the session's socket down (as for an
// advisory wait). Leaving unlocks it; a session whose unlock fails, or a client that is closing,
// closes the session instead, which ends the lock on the server too. An exclusive waiter enters with
// its first attempt instead (statement acquire_queued: fair()).
class turnstile {
public:
    struct by_attempts_t {};
    static constexpr by_attempts_t by_attempts{};
    // A place not taken yet: the first attempt (fair()) waits for admission.
    turnstile(dlock_backend* b, const dlock_acquire_request* req, by_attempts_t)
        : b_(b), key_(b->turnstile_key_for(req->name)), entered_(false), wait_deadline_ns_(wait_deadline(b, req)) {
        session_ = b->queue_pool().borrow(req->deadline_ns, true);
    }
    // Waits for admission until the request's deadline. Throws failure: DLOCK_TIMEOUT when the
    // deadline passed in the queue, DLOCK_CANCELLED when the client closes, else the classified error.
    turnstile(dlock_backend* b, const dlock_acquire_request* req) : turnstile(b, req, b->turnstile_key_for(req->name), false) {}
    // The queue `key`; `shared`: a reader's place (admitted together with the readers before it,
    // after every writer queued before it; writers queued after it wait for it).
    turnstile(dlock_backend* b, const dlock_acquire_request* req, int64_t key, bool shared) : b_(b), key_(key), shared_(shared) {
        session_ = b->queue_pool().borrow(req->deadline_ns, true);
        const waiting_session registered(b, &*session_);
        const int64_t deadline = wait_deadline(b, req);
        try {
            session_->run_until(deadline, shared_ ? "turnstile_enter_shared" : "turnstile_enter", key_,
                                lock_timeout_for(req->deadline_ns));
        } catch (const std::exception& e) {
            const bool not_admitted = sqlstate_of(e) == "55P03";
            if (!not_admitted) session_->mark_broken();  // whatever it may have been granted ends with it
            if (b->interrupted) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
            if (not_admitted)
                fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held on {} (waited behind the waiters queued before)",
                                                req->name, b->where()));
            if (dynamic_cast<const no_answer*>(&e))
                fail(DLOCK_UNAVAILABLE, fmt::format("sql backend: {}: waiting in the queue of `{}` got {}", b->where(), req->name,
                                                    e.what()));
            const failure f = classify(b->config, e, fmt::format("waiting in the queue of `{}`", req->name), false);
            fail(f.status == DLOCK_UNKNOWN ? DLOCK_UNAVAILABLE : f.status, f.message);
        }
    }
    turnstile(const turnstile&) = delete;
    turnstile& operator=(const turnstile&) = delete;
    ~turnstile() {
        if (b_->interrupted || session_->broken()) {
            session_->mark_broken();
            return;
        }
        if (!entered_ || left_) return;
        try {
            if (!session_->run_until(b_->statement_deadline(), shared_ ? "turnstile_leave_shared" : "turnstile_leave", key_)[0][0]
                     .as<bool>())
                session_->mark_broken();
        } catch (const std::exception&) {
            session_->mark_broken();
        }
    }
    session* on() { return &*session_; }
    // An admitted waiter's queue session must not fall silent for peer_timeout: the server ends it
    // then (idle_session_timeout on queue sessions), and with it the place, which is what bounds how
    // long a stalled waiter (SIGSTOP, a paused VM) keeps the waiters behind it out. A waiter that
    // waits runs a statement on it every third of that (settings::queue_heartbeat_ns()).
    int64_t heartbeat_due_ns() { return session_->idle_since_ns() + b_->config.queue_heartbeat_ns(); }
    // Runs the heartbeat; false when the session was lost (and the place with it: queue again).
    bool heartbeat() {
        try {
            session_->run_until(b_->statement_deadline(), "queue_heartbeat");
            return true;
        } catch (const std::exception&) {
            session_->mark_broken();
            return false;
        }
    }
    // The next attempt's turnstile part (waiting for admission first when not admitted yet).
    fair_attempt fair() { return fair_attempt{&*session_, key_, !entered_, wait_deadline_ns_}; }
    // An attempt made with fair() was answered: admitted, and left if it says so.
    void attempted(const fair_attempt& f) {
        entered_ = true;
        left_ = f.left;
    }

private:
    // A wait in the queue is bounded by lock_timeout on the server, and given up a client-side
    // limit later.
    static int64_t wait_deadline(dlock_backend* b, const dlock_acquire_request* req) {
        const int64_t limit_ns = b->config.client_limit_ms() * 1'000'000;
        return req->deadline_ns == forever_ns ? forever_ns : std::max(req->deadline_ns, now_ns()) + limit_ns;
    }

    dlock_backend* b_;
    int64_t key_;
    bool shared_ = false;
    bool entered_ = true;
    bool left_ = false;
    int64_t wait_deadline_ns_ = 0;
    pool::lease session_;
};

// A waiter's wait for `channel`'s subscription (listener::wait_listening, until `until_ns`) and for
// a change of it from `seen` (listener::wait_change); with `place` (an admitted waiter's turnstile),
// its heartbeats are sent meanwhile. Either returns early when the place was lost.
bool listen_in_place(dlock_backend* b, listener& waker, const std::string& channel, int64_t until_ns, turnstile* place) {
    for (;;) {
        if (waker.wait_listening(channel, place ? std::min(until_ns, place->heartbeat_due_ns()) : until_ns)) return true;
        if (!place || b->interrupted || now_ns() >= until_ns) return false;
        if (now_ns() >= place->heartbeat_due_ns() && !place->heartbeat()) return false;
    }
}

void wait_in_place(dlock_backend* b, listener& waker, const std::string& channel, uint64_t seen, int64_t until_ns, turnstile* place) {
    for (;;) {
        waker.wait_change(channel, seen, place ? std::min(until_ns, place->heartbeat_due_ns()) : until_ns);
        if (!place || b->interrupted || waker.generation(channel) != seen || now_ns() >= until_ns) return;
        if (now_ns() >= place->heartbeat_due_ns() && !place->heartbeat()) return;
    }
}

int acquire_lease(dlock_backend* b, const dlock_acquire_request* req, std::unique_ptr<dlock_hold>& h, dlock_grant* grant) {
    h->channel = b->channel_for(h->name);
    auto finish = [&](const attempt& a) {
        grant->fencing_token = a.fence;
        grant->valid_until_ns = h->granted(a.sent_ns, req->ttl_ms);
        grant->ttl_ms = req->ttl_ms;
        return DLOCK_OK;
    };
    auto held_message = [&](const attempt& a) {
        return a.holder_left_ms >= 0
                   ? fmt::format("lock `{}` is held on {} (expires in {} ms unless renewed)", req->name, b->where(), a.holder_left_ms)
                   : fmt::format("lock `{}` is held on {}", req->name, b->where());
    };
    // A waiter registered in the row (anti-barging) that leaves without the lock unregisters,
    // best effort: a count left behind by a crash only delays newcomers by handoff_grace.
    struct registration {
        dlock_backend* b;
        const std::string& name;
        bool active = false;
        int64_t at_us = 0;
        ~registration() {
            if (!active) return;
            try {
                const int64_t deadline = b->statement_deadline();
                auto s = b->sessions->borrow(deadline);
                try {
                    s->run_until(deadline, "unwait", name);
                } catch (const std::exception&) {
                    s->mark_broken();
                }
            } catch (...) {
            }
        }
    } waiting{b, h->name};
    std::unique_ptr<turnstile> admitted;  // a fair waiter's place in the queue
    // Fair: whether the next attempt queues. A name this client found contended queues at once;
    // another one tries the plain statement first.
    bool queue = req->fair && req->deadline_ns != 0 && b->seems_contended(h->name);
    auto next_try = [&](attempt_role role) {
        // Fair: a queued attempt waits for admission first, so the waiters queued before get the
        // lock first. A place whose session was lost (terminated, a restart) was lost too: queue again.
        if (admitted && admitted->on()->broken()) admitted.reset();
        if (req->fair && queue && !admitted) admitted = std::make_unique<turnstile>(b, req, turnstile::by_attempts);
        const int64_t registered_at_us = role == waiter_retry ? waiting.at_us : 0;
        attempt a;
        if (admitted) {
            fair_attempt fair = admitted->fair();
            std::optional<waiting_session> queued;
            if (fair.enter) queued.emplace(b, fair.on);
            a = try_acquire_lease(b, *h, req->ttl_ms, role, registered_at_us, req->deadline_ns, &fair);
            admitted->attempted(fair);
        } else {
            a = try_acquire_lease(b, *h, req->ttl_ms, role, registered_at_us, req->deadline_ns);
        }
        if (a.registered) {
            waiting.active = true;
            waiting.at_us = a.registered_at_us;
        }
        if (a.acquired && role == waiter_retry) waiting.active = false;  // the statement unregistered us
        return a;
    };

    const attempt_role first = req->deadline_ns == 0 ? try_only : first_of_a_wait;
    attempt a = next_try(first);
    // A connection the server ended while it sat idle in the pool looks like one lost mid-statement;
    // the read-back said "not taken", so one immediate retry on a fresh connection is safe.
    if (!a.acquired && a.outcome_was_unknown) a = next_try(first);
    if (req->fair && req->deadline_ns != 0) b->note_contended(h->name, !a.acquired || (admitted && !a.left_queue));
    if (a.acquired) return finish(a);
    if (req->deadline_ns == 0 || now_ns() >= req->deadline_ns) {
        if (a.outcome_was_unknown)
            fail(DLOCK_UNAVAILABLE, fmt::format("sql backend: {}: the connection was lost during the acquire of `{}`; the "
                                                "row read back shows it was not taken; retry", b->where(), req->name));
        fail(DLOCK_TIMEOUT, held_message(a));
    }

    // Fair: queue (the first attempt did not: the name seemed free); the attempt made on admission
    // may win already.
    if (req->fair && !queue) {
        queue = true;
        a = next_try(waiting.active ? waiter_retry : first_of_a_wait);
        if (a.acquired) return finish(a);
        if (now_ns() >= req->deadline_ns) fail(DLOCK_TIMEOUT, held_message(a));
    }

    listener& waker = b->listener_for_waits();
    const listener::watching watched(waker, h->channel);
    // LISTEN before the retry, so a release between retry and wait is seen. If the LISTEN
    // connection is down we still retry at the holder's expiry.
    listen_in_place(b, waker, h->channel, std::min(req->deadline_ns, now_ns() + b->config.statement_timeout_ms * 1'000'000),
                    admitted.get());
    std::minstd_rand jitter(std::random_device{}());
    for (int lost_rounds = 0;; ++lost_rounds) {
        if (b->interrupted) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        const uint64_t seen = waker.generation(h->channel);
        a = next_try(waiting.active ? waiter_retry : first_of_a_wait);
        if (a.acquired) return finish(a);
        const int64_t now = now_ns();
        if (now >= req->deadline_ns) fail(DLOCK_TIMEOUT, held_message(a));
        // The turnstile's session was lost (terminated, a restart): so was our place. Queue again
        // (the next attempt does).
        if (admitted && admitted->on()->broken()) continue;
        if (a.holder_left_ms < 0) continue;  // the holder's row was not visible yet: look again
        const int64_t expiry_ns = now + (a.holder_left_ms + 1) * 1'000'000;
        wait_in_place(b, waker, h->channel, seen, std::min(req->deadline_ns, expiry_ns), admitted.get());
        // Woken with other waiters registered: every one of them was notified at once, in an order
        // the server fixes (its list of listening backends), so the first to retry would win every
        // time. A short random delay, shorter the longer this waiter has waited, spreads the wins
        // (and favours old waiters). Not a poll: one delay per notification, only under contention.
        // (A waiter admitted by the turnstile competes with nobody: the others wait for admission.)
        if (!admitted && a.waiters - (waiting.active ? 1 : 0) > 0 && waker.generation(h->channel) != seen) {
            const int64_t spread_ns = contention_spread_ns >> std::min(lost_rounds, 8);
            const int64_t delay_ns = spread_ns > 0 ? int64_t(jitter() % uint64_t(spread_ns)) : 0;
            const uint64_t now_seen = waker.generation(h->channel);
            waker.wait_change(h->channel, now_seen, std::min(req->deadline_ns, now_ns() + delay_ns));
        }
    }
}

int release_lease(dlock_backend* b, dlock_hold* h) {
    const int64_t deadline = b->statement_deadline();
    auto s = b->sessions->borrow(deadline);
    const int64_t sent = now_ns();
    try {
        const pqxx::result r = s->run_until(deadline, "release", h->name, h->owner, h->channel);
        return h->release_answered(!r.empty());
    } catch (const std::exception& e) {
        if (dynamic_cast<const pqxx::broken_connection*>(&e)) s->mark_broken();
        h->release_unanswered(sent);
        const failure f = classify(b->config, e, fmt::format("the release of `{}`", h->name), true);
        fail(f.status == DLOCK_BACKEND || f.status == DLOCK_UNAVAILABLE ? DLOCK_UNKNOWN : f.status, f.message);
    }
}

// One statement per kind of hold in the batch (a batch of exclusive holds is one statement, as
// before semaphores existed); owner tokens are unique, so one set of extended owners answers all.
int renew_lease(dlock_backend* b, dlock_renewal* renewals, size_t count) {
    const auto itself = [](dlock_hold* h) { return h; };
    const int64_t deadline = renewal_deadline(b->statement_deadline(), renewals, count, itself);
    auto s = b->sessions->borrow(deadline);
    const int64_t sent = now_ns();
    std::set<std::string> extended;
    const std::pair<uint32_t, const char*> kinds[] = {
        {DLOCK_HOLD_EXCLUSIVE, "renew"}, {DLOCK_HOLD_SHARED, "shared_renew"}, {DLOCK_HOLD_PERMIT, "permit_renew"}};
    for (const auto& [kind, statement] : kinds) {
        std::vector<std::string> names, owners, ttls;
        for (size_t i = 0; i < count; ++i) {
            if (renewals[i].hold->kind != kind) continue;
            names.push_back(renewals[i].hold->name);
            owners.push_back(renewals[i].hold->owner);
            ttls.push_back(std::to_string(renewals[i].ttl_ms));
        }
        if (names.empty()) continue;
        pqxx::result r;
        try {
            r = s->run_until(deadline, statement, text_array(names), text_array(owners),
                             "{" + fmt::format("{}", fmt::join(ttls, ",")) + "}");
        } catch (const std::exception& e) {
            if (dynamic_cast<const pqxx::broken_connection*>(&e)) s->mark_broken();
            const failure f = classify(b->config, e, fmt::format("renewing {} leases", count), true);
            fail(f.status == DLOCK_BACKEND || f.status == DLOCK_PERMISSION ? f.status : DLOCK_UNKNOWN, f.message);
        }
        for (const auto& row : r) extended.insert(row[0].as<std::string>());
    }
    record_renewals(renewals, 0, count, sent, extended, itself);
    return DLOCK_OK;
}

// ---- lease mode: shared holds and semaphore permits ---------------------------------------------

// How long a reader held back by a queued writer waits before it looks again: the writer notifies
// when it releases, but not when it gives up waiting.
constexpr int64_t writer_queue_recheck_ns = 200'000'000;

struct holder_attempt {
    bool acquired = false;
    uint64_t fence = 0;
    int64_t wait_ms = -1;  // until the first holder's expiry; -1: until a release (or the recheck)
    int64_t sent_ns = 0;
    bool outcome_was_unknown = false;  // the connection dropped; the row read back was not ours
};

// One attempt at a shared hold or a permit (statements shared_acquire, permit_acquire). `admitted`:
// a reader (permit acquirer) the turnstile admitted (it no longer yields to queued writers (fair
// waiters)); `on`: its session.
holder_attempt try_holder_lease(dlock_backend* b, dlock_hold& h, const dlock_acquire_request* req, bool admitted, session* on) {
    holder_attempt a;
    const int64_t deadline = statement_deadline_within(b->config.client_limit_ms(), req->deadline_ns);
    const bool shared = h.kind == DLOCK_HOLD_SHARED;
    for (int collisions = 0;; ++collisions) {
        pool::lease borrowed;
        if (!on) borrowed = b->sessions->borrow(deadline, true);
        session* s = on ? on : &*borrowed;
        a.sent_ns = now_ns();
        try {
            if (shared) {
                const pqxx::result r = s->run_until(deadline, "shared_acquire", h.name, h.owner, req->ttl_ms, b->holder, admitted,
                                                    b->turnstile_key_for(h.name));
                if (!r.empty() && !r[0][0].is_null()) {
                    a.acquired = true;
                    a.fence = r[0][0].as<uint64_t>();
                } else if (!r.empty() && !r[0][1].is_null()) {
                    a.wait_ms = r[0][1].as<int64_t>();
                }
                return a;
            }
            const int limit = int(req->permits);
            pqxx::result r = s->run_until(deadline, "permit_acquire", h.name, h.owner, req->ttl_ms, b->holder, limit,
                                                admitted, b->semaphore_turnstile_key_for(h.name));
            if (r[0][1].is_null()) {  // no slots yet, or a break forgot the limit: store ours
                s->run_until(deadline, "permit_create", h.name, limit);
                a.sent_ns = now_ns();
                r = s->run_until(deadline, "permit_acquire", h.name, h.owner, req->ttl_ms, b->holder, limit,
                                                admitted, b->semaphore_turnstile_key_for(h.name));
            }
            if (!r[0][1].is_null() && r[0][1].as<int64_t>() != limit)
                fail(DLOCK_INVALID_ARGUMENT,
                     fmt::format("sql backend: semaphore `{}` on {} has a limit of {} permits; this acquire asks for {} (every "
                                 "client of a semaphore must give the same limit; a break forgets it)",
                                 h.name, b->where(), r[0][1].as<int64_t>(), limit));
            if (!r[0][0].is_null()) {
                a.acquired = true;
                a.fence = r[0][0].as<uint64_t>();
            } else if (!r[0][2].is_null()) {
                a.wait_ms = r[0][2].as<int64_t>();
            }
            return a;
        } catch (const failure&) {
            throw;
        } catch (const pqxx::broken_connection& e) {
            s->mark_broken();
            // The statement may have committed: only a holder row carrying our token proves it, once
            // the statement can no longer commit later (a retry would add a second row).
            const auto unknown = [&](const std::string& why) { fail_unsettled_acquire(b, h.name, e.what(), why, "hold"); };
            const std::optional<failure> unsettled = end_lost_session(b, *s);
            try {
                const int64_t read_deadline = b->statement_deadline();
                auto reader = b->sessions->borrow(read_deadline);
                try {
                    const pqxx::result r =
                        reader->run_until(read_deadline, "holder_read_back", std::string(shared ? "S" : "P"), h.name, h.owner);
                    if (!r.empty()) {
                        a.acquired = true;
                        a.fence = r[0][0].as<uint64_t>();
                        return a;
                    }
                } catch (const std::exception&) {
                    reader->mark_broken();
                    throw;
                }
            } catch (const failure& again) {
                unknown(unsettled ? unsettled->message : again.message);
            } catch (const std::exception& again) {
                unknown(again.what());
            }
            if (unsettled) unknown(unsettled->message);  // nothing yet, but the lost statement may still commit
            // Not taken: the lost statement ended without committing (behind a pooler, not yet: if it
            // commits later, its row carries our owner token and expires after the ttl).
            a.outcome_was_unknown = true;
            return a;
        } catch (const std::exception& e) {
            // A reader's new slot number was taken by a reader that committed meanwhile: try again.
            if (sqlstate_of(e) == "23505" && collisions < 16) continue;
            throw classify(b->config, e, fmt::format("the acquire of `{}`", h.name), false);
        }
    }
}

// A shared hold of a lock, or one permit of a semaphore. Waits as the exclusive path does: LISTEN on
// the object's channel, retry on a release's notification or at the first holder's expiry; fair
// waiters first queue in the object's turnstile (readers in shared mode).
int acquire_holder_lease(dlock_backend* b, const dlock_acquire_request* req, std::unique_ptr<dlock_hold>& h, dlock_grant* grant) {
    const bool shared = h->kind == DLOCK_HOLD_SHARED;
    h->channel = shared ? b->channel_for(h->name) : b->semaphore_channel_for(h->name);
    auto finish = [&](const holder_attempt& a) {
        grant->fencing_token = a.fence;
        grant->valid_until_ns = h->granted(a.sent_ns, req->ttl_ms);
        grant->ttl_ms = req->ttl_ms;
        return DLOCK_OK;
    };
    auto held_message = [&] {
        return shared ? fmt::format("lock `{}` is held exclusively (or an exclusive waiter is queued) on {}", req->name, b->where())
                      : fmt::format("all {} permits of semaphore `{}` are held on {}", req->permits, req->name, b->where());
    };
    holder_attempt a = try_holder_lease(b, *h, req, false, nullptr);
    // A connection the server ended while it sat idle in the pool looks like one lost mid-statement;
    // the read-back said "not taken", so one immediate retry on a fresh connection is safe.
    if (!a.acquired && a.outcome_was_unknown) a = try_holder_lease(b, *h, req, false, nullptr);
    if (a.acquired) return finish(a);
    if (req->deadline_ns == 0 || now_ns() >= req->deadline_ns) {
        if (a.outcome_was_unknown)
            fail(DLOCK_UNAVAILABLE, fmt::format("sql backend: {}: the connection was lost during the acquire of `{}`; the "
                                                "row read back shows it was not taken; retry", b->where(), req->name));
        fail(DLOCK_TIMEOUT, held_message());
    }

    const int64_t queue_key = shared ? b->turnstile_key_for(h->name) : b->semaphore_turnstile_key_for(h->name);
    std::unique_ptr<turnstile> admitted;
    if (req->fair) admitted = std::make_unique<turnstile>(b, req, queue_key, shared);
    listener& waker = b->listener_for_waits();
    const listener::watching watched(waker, h->channel);
    listen_in_place(b, waker, h->channel, std::min(req->deadline_ns, now_ns() + b->config.statement_timeout_ms * 1'000'000),
                    admitted.get());
    for (;;) {
        if (b->interrupted) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        const uint64_t seen = waker.generation(h->channel);
        a = try_holder_lease(b, *h, req, admitted != nullptr, admitted ? admitted->on() : nullptr);
        if (a.acquired) return finish(a);
        const int64_t now = now_ns();
        if (now >= req->deadline_ns) fail(DLOCK_TIMEOUT, held_message());
        if (admitted && admitted->on()->broken()) {
            admitted.reset();
            admitted = std::make_unique<turnstile>(b, req, queue_key, shared);
            continue;
        }
        if (a.outcome_was_unknown) continue;  // look again at once (the statement was given up)
        const int64_t wake_ns = a.wait_ms >= 0 ? now + (a.wait_ms + 1) * 1'000'000 : now + writer_queue_recheck_ns;
        wait_in_place(b, waker, h->channel, seen, std::min(req->deadline_ns, wake_ns), admitted.get());
    }
}

int release_holder_lease(dlock_backend* b, dlock_hold* h) {
    const int64_t deadline = b->statement_deadline();
    auto s = b->sessions->borrow(deadline);
    const int64_t sent = now_ns();
    try {
        if (h->kind == DLOCK_HOLD_SHARED) {
            const pqxx::result r = s->run_until(deadline, "shared_release", h->name, h->owner, h->channel);
            return h->release_answered(r[0][0].as<bool>());
        }
        const pqxx::result r = s->run_until(deadline, "permit_release", h->name, h->owner, h->channel);
        return h->release_answered(!r.empty());
    } catch (const std::exception& e) {
        if (dynamic_cast<const pqxx::broken_connection*>(&e)) s->mark_broken();
        h->release_unanswered(sent);
        const failure f = classify(b->config, e, fmt::format("the release of `{}`", h->name), true);
        fail(f.status == DLOCK_BACKEND || f.status == DLOCK_UNAVAILABLE ? DLOCK_UNKNOWN : f.status, f.message);
    }
}

// ---- advisory mode ------------------------------------------------------------------------------

std::string lock_timeout_for(int64_t deadline_ns) {
    if (deadline_ns == forever_ns) return "0";  // no limit
    const int64_t left_ms = (deadline_ns - now_ns() + 999'999) / 1'000'000;
    if (left_ms > INT_MAX) return "0";
    return std::to_string(std::max<int64_t>(left_ms, 1));
}

// After a failed statement that may have been granted the lock before failing (the fence bump
// failed, a cancel arrived late), the session gives every advisory lock back; if it cannot, it is
// closed, which does the same on the server.
void scrub(dlock_backend* b, session& s) {
    try {
        s.run_until(b->statement_deadline(), "unlock_all");
    } catch (const std::exception&) {
        s.mark_broken();
    }
}

// `unanswered` is set when the server gave no answer within the client limit (then a retry would
// only wait as long again). `check_idle`: the pool checks an idle session before handing it out
// (pool::borrow); unchecked, a session the server ended fails the statement at once.
int acquire_advisory_once(dlock_backend* b, const dlock_acquire_request* req, std::unique_ptr<dlock_hold>& h,
                          dlock_grant* grant, bool& unanswered, bool check_idle) {
    const bool wait = req->deadline_ns != 0;
    auto s = b->sessions->borrow(req->deadline_ns, true, check_idle);
    const waiting_session registered(b, &*s);
    // A wait is bounded by lock_timeout on the server; the client gives it up a client-side limit
    // later (a wait without a deadline cannot tell a long queue from a partition: only closing the
    // client ends it).
    const int64_t limit_ns = b->config.client_limit_ms() * 1'000'000;
    const int64_t deadline = !wait ? now_ns() + limit_ns
                             : req->deadline_ns == forever_ns ? forever_ns
                                                              : std::max(req->deadline_ns, now_ns()) + limit_ns;
    pqxx::result r;
    try {
        const bool shared = h->kind == DLOCK_HOLD_SHARED;
        r = wait ? s->run_until(deadline, shared ? "lock_shared" : "lock", h->key, h->name, h->owner, b->holder,
                                lock_timeout_for(req->deadline_ns))
                 : s->run_until(deadline, shared ? "try_lock_shared" : "try_lock", h->key, h->name, h->owner, b->holder);
    } catch (const std::exception& e) {
        const bool broken = dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr;
        if (dynamic_cast<const no_answer*>(&e)) {
            unanswered = true;
            s->mark_broken();  // the session ends, and with it anything it may have been granted
            fail(DLOCK_UNAVAILABLE, fmt::format("sql backend: {}: the advisory acquire of `{}` got {}", b->where(), req->name, e.what()));
        }
        if (broken) s->mark_broken();  // the session is gone, and with it anything it was granted
        if (b->interrupted) {
            s->mark_broken();
            fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        }
        if (!broken) scrub(b, *s);
        if (sqlstate_of(e) == "55P03")
            fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held on {} (waited in the server's lock queue)", req->name, b->where()));
        const failure f = classify(b->config, e, fmt::format("the advisory acquire of `{}`", req->name), false);
        fail(f.status == DLOCK_UNKNOWN ? DLOCK_UNAVAILABLE : f.status, f.message);
    }
    if (r.empty()) fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held on {}", req->name, b->where()));
    grant->fencing_token = r[0][0].as<uint64_t>();
    grant->valid_until_ns = forever_ns;  // held until released or the session ends (reported LOST)
    grant->ttl_ms = req->ttl_ms;
    h->held = s.detach();
    b->monitor_for_holds().add(h.get(), h->held.get());
    return DLOCK_OK;
}

int acquire_advisory(dlock_backend* b, const dlock_acquire_request* req, std::unique_ptr<dlock_hold>& h, dlock_grant* grant) {
    h->key = b->key_for(h->name);
    bool unanswered = false;
    try {
        // The pool's idle check (a poll per acquire) is left to this failure path: the common case,
        // a live session, pays no system call for it.
        return acquire_advisory_once(b, req, h, grant, unanswered, false);
    } catch (const failure& f) {
        // A session the server ended while idle in the pool fails at once; the session is gone, and
        // anything it might have been granted with it, so one retry on a checked session is safe.
        if (f.status != DLOCK_UNAVAILABLE || b->interrupted || unanswered) throw;
        return acquire_advisory_once(b, req, h, grant, unanswered, true);
    }
}

// Gives the hold's session back to the pool after a confirmed unlock, or closes it (a session whose
// state is in doubt must end, so the server drops whatever it holds).
void retire_session(dlock_backend* b, dlock_hold* h, bool reusable) {
    if (!h->held) return;
    if (!reusable) h->held->mark_broken();
    b->sessions->give_back(std::move(h->held));
}

int release_advisory(dlock_backend* b, dlock_hold* h) {
    if (!h->held) return DLOCK_LOST;
    if (b->monitor_for_holds().take(h)) {
        // Already reported LOST: the server ended the session and released the lock with it.
        retire_session(b, h, false);
        return DLOCK_LOST;
    }
    bool unlocked = false;
    try {
        unlocked = h->held->run_until(b->statement_deadline(), h->kind == DLOCK_HOLD_SHARED ? "unlock_shared" : "unlock",
                                      h->key)[0][0]
                       .as<bool>();
    } catch (const std::exception& e) {
        retire_session(b, h, false);
        if (dynamic_cast<const pqxx::broken_connection*>(&e))
            fail(DLOCK_LOST, fmt::format("sql backend: {}: the session holding `{}` ended ({}); the server releases its "
                                         "advisory locks with it", b->where(), h->name, e.what()));
        const failure f = classify(b->config, e, fmt::format("the release of `{}`", h->name), true);
        fail(f.status, f.message + "; the session was closed, which releases the lock");
    }
    retire_session(b, h, unlocked);
    return unlocked ? DLOCK_OK : DLOCK_LOST;
}

// Advisory leases have no ttl; an explicit renew confirms the session still holds the lock.
int renew_advisory(dlock_backend* b, dlock_renewal* renewals, size_t count) {
    monitor& m = b->monitor_for_holds();
    for (size_t i = 0; i < count; ++i) {
        dlock_hold* h = renewals[i].hold;
        renewals[i].valid_until_ns = forever_ns;
        if (!h->held || !m.begin_use(h)) {
            renewals[i].status = DLOCK_LOST;
            continue;
        }
        try {
            renewals[i].status =
                h->held->run_until(b->statement_deadline(), "check", h->key)[0][0].as<int64_t>() == 1 ? DLOCK_OK : DLOCK_LOST;
            m.end_use(h, true);
        } catch (const std::exception& e) {
            const bool broken = dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr;
            if (broken) h->held->mark_broken();
            renewals[i].status = broken ? DLOCK_LOST : DLOCK_UNKNOWN;
            m.end_use(h, !broken);
        }
    }
    return DLOCK_OK;
}

// ---- entry points -------------------------------------------------------------------------------

int sql_acquire(dlock_backend* b, const dlock_acquire_request* req, dlock_hold** out_hold, dlock_grant* grant,
                dlock_plugin_error* error) {
    return guarded(error, "sql", [&] {
        // Both dialects store a semaphore's limit in a 32-bit signed column.
        if (DLOCK_STRUCT_COVERS(req, dlock_acquire_request, permits) && req->kind == DLOCK_HOLD_PERMIT && req->permits > uint32_t(INT32_MAX))
            fail(DLOCK_INVALID_ARGUMENT, fmt::format("sql backend: semaphore `{}`: a limit of {} permits is more than the {} the sql "
                                                     "backend stores (a 32-bit integer column)", req->name, req->permits, INT32_MAX));
        if (b->mysql) return acquire_mysql(b, req, out_hold, grant);
        if (b->interrupted) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        auto h = std::make_unique<dlock_hold>();
        h->name = req->name;
        h->owner = req->owner;
        h->host_lease = req->host_lease;
        if (DLOCK_STRUCT_COVERS(req, dlock_acquire_request, permits)) h->kind = req->kind;
        if (h->kind != DLOCK_HOLD_EXCLUSIVE && !(sql_capabilities(b) & (h->kind == DLOCK_HOLD_SHARED ? DLOCK_CAP_SHARED : DLOCK_CAP_SEMAPHORE)))
            fail(DLOCK_NOT_SUPPORTED, "sql backend: this mode has no semaphores (docs/backends/sql.md)");
        const int status = b->config.mode == lock_mode::advisory ? acquire_advisory(b, req, h, grant)
                           : h->kind == DLOCK_HOLD_EXCLUSIVE     ? acquire_lease(b, req, h, grant)
                                                                 : acquire_holder_lease(b, req, h, grant);
        if (status == DLOCK_OK) *out_hold = h.release();
        return status;
    });
}

int sql_release(dlock_backend* b, dlock_hold* h, dlock_plugin_error* error) {
    return guarded(error, "sql", [&] {
        if (b->mysql) return b->mysql->release(h->mysql_hold);
        if (b->config.mode == lock_mode::advisory) return release_advisory(b, h);
        return h->kind == DLOCK_HOLD_EXCLUSIVE ? release_lease(b, h) : release_holder_lease(b, h);
    });
}

void sql_hold_destroy(dlock_backend* b, dlock_hold* h) {
    if (!h) return;
    if (b->mysql) b->mysql->destroy_hold(h->mysql_hold);
    try {
        if (h->held) {
            // Never released (or the release failed): end the session, which ends its lock. The
            // monitor forgets the hold first, so it never reports on it after this returns.
            monitor* m;
            {
                std::lock_guard<std::mutex> lock(b->monitor_mutex);
                m = b->watcher.get();
            }
            if (m) m->take(h);
            retire_session(b, h, false);
        }
    } catch (...) {
    }
    delete h;
}

int sql_renew(dlock_backend* b, dlock_renewal* renewals, size_t count, dlock_plugin_error* error) {
    return guarded(error, "sql", [&] {
        if (count == 0) return int(DLOCK_OK);
        if (b->mysql) return b->mysql->renew(renewals, count, [](dlock_hold* h) { return h->mysql_hold; });
        return b->config.mode == lock_mode::lease ? renew_lease(b, renewals, count) : renew_advisory(b, renewals, count);
    });
}

int sql_inspect(dlock_backend* b, const char* name, dlock_lock_info* info, dlock_plugin_error* error) {
    return guarded(error, "sql", [&]() -> int {
        if (b->mysql) return b->mysql->inspect(name, info);
        const int64_t deadline = b->statement_deadline();
        auto s = b->sessions->borrow(deadline);
        pqxx::result r;
        try {
            r = b->config.mode == lock_mode::lease ? s->run_until(deadline, "inspect", std::string(name))
                                                   : s->run_until(deadline, "inspect", b->key_for(name), std::string(name));
        } catch (const std::exception& e) {
            if (dynamic_cast<const pqxx::broken_connection*>(&e)) s->mark_broken();
            throw classify(b->config, e, fmt::format("inspecting `{}`", name), false);
        }
        info->held = 0;
        info->ttl_left_ms = -1;
        if (r.empty()) return DLOCK_OK;  // never taken
        info->fencing_token = r[0][1].as<uint64_t>();
        info->held = r[0][2].as<bool>() ? 1 : 0;
        if (info->held) {
            const std::string owner = r[0][0].is_null() ? "" : r[0][0].as<std::string>();
            const size_t n = std::min(owner.size(), sizeof info->holder - 1);
            std::memcpy(info->holder, owner.data(), n);
            info->holder[n] = '\0';
            if (b->config.mode == lock_mode::lease && !r[0][3].is_null()) info->ttl_left_ms = r[0][3].as<int64_t>();
        }
        return DLOCK_OK;
    });
}

// Holders and list: lease mode with the holders table (both dialects); advisory mode through its
// fence rows and pg_locks. Break: lease mode only (an advisory lock ends only with its session).
void require_holder_tables(dlock_backend* b) {
    if (b->mysql || b->config.mode != lock_mode::lease || !b->shared_ready)
        fail(DLOCK_NOT_SUPPORTED, "sql backend: break needs lease mode with dlock's holders table (docs/backends/sql.md)");
}

// Advisory mode: the names come from the fence rows (one per name dlock ever granted), the holders
// from pg_locks (every session granted the name's key). The owner token and fencing token are known
// for the session that took the name last (the fence row's holder_pid); other shared holders show
// neither. Keys hashed from two names that collide show both names held.
template <typename Wanted>
int visit_advisory_holders(dlock_backend* b, const std::string& name_or_prefix, bool exact, Wanted&& wanted,
                           dlock_holder_visitor visit, void* user_data) {
    const int64_t deadline = b->statement_deadline();
    auto s = b->sessions->borrow(deadline);
    pqxx::result names, granted;
    try {
        names = s->run_until(deadline, "fence_rows", name_or_prefix, exact);
        granted = s->run_until(deadline, "granted_keys");
    } catch (const std::exception& e) {
        if (dynamic_cast<const pqxx::broken_connection*>(&e)) s->mark_broken();
        throw classify(b->config, e, exact ? fmt::format("reading the holders of `{}`", name_or_prefix) : "listing the holders", false);
    }
    std::multimap<int64_t, std::pair<int, bool>> sessions_by_key;  // key → (pid, shared)
    for (const auto& row : granted) sessions_by_key.emplace(row[0].as<int64_t>(), std::make_pair(row[1].as<int>(), row[2].as<bool>()));
    for (const auto& row : names) {
        const std::string name = row[0].as<std::string>();
        int64_t key = 0;
        try {
            key = b->key_for(name);
        } catch (const failure&) {
            continue;  // a name the current advisory_key_prefix cannot map: not this client's key
        }
        const auto [from, to] = sessions_by_key.equal_range(key);
        for (auto it = from; it != to; ++it) {
            const uint32_t kind = it->second.second ? DLOCK_HOLD_SHARED : DLOCK_HOLD_EXCLUSIVE;
            if (!wanted(kind)) continue;
            const bool last = !row[3].is_null() && row[3].as<int>() == it->second.first;
            const std::string owner = last && !row[1].is_null() ? row[1].as<std::string>() : "";
            dlock_holder_info info{};
            info.struct_size = sizeof info;
            info.name = name.c_str();
            info.kind = kind;
            std::memcpy(info.holder, owner.data(), std::min(owner.size(), sizeof info.holder - 1));
            info.fencing_token = last ? row[2].as<uint64_t>() : 0;
            info.ttl_left_ms = -1;
            if (visit(&info, user_data) != 0) return DLOCK_OK;
        }
    }
    return DLOCK_OK;
}

// Runs statement `holders` and visits each row whose kind `wanted` accepts.
template <typename Wanted>
int visit_holders(dlock_backend* b, const std::string& name_or_prefix, bool exact, Wanted&& wanted, dlock_holder_visitor visit,
                  void* user_data) {
    if (b->mysql) {
        for (const mysql::holder_row& row : b->mysql->holders(name_or_prefix, exact)) {
            if (!wanted(row.kind)) continue;
            dlock_holder_info info{};
            info.struct_size = sizeof info;
            info.name = row.name.c_str();
            info.kind = row.kind;
            info.permits = row.permits;
            std::memcpy(info.holder, row.owner.data(), std::min(row.owner.size(), sizeof info.holder - 1));
            info.fencing_token = row.fence;
            info.ttl_left_ms = row.ttl_left_ms;
            if (visit(&info, user_data) != 0) break;
        }
        return DLOCK_OK;
    }
    if (b->config.mode == lock_mode::advisory) return visit_advisory_holders(b, name_or_prefix, exact, wanted, visit, user_data);
    require_holder_tables(b);
    const int64_t deadline = b->statement_deadline();
    auto s = b->sessions->borrow(deadline);
    pqxx::result r;
    try {
        r = s->run_until(deadline, "holders", name_or_prefix, exact);
    } catch (const std::exception& e) {
        if (dynamic_cast<const pqxx::broken_connection*>(&e)) s->mark_broken();
        throw classify(b->config, e, exact ? fmt::format("reading the holders of `{}`", name_or_prefix) : "listing the holders", false);
    }
    for (const auto& row : r) {
        const uint32_t kind = row[1].as<uint32_t>();
        if (!wanted(kind)) continue;
        const std::string name = row[0].as<std::string>();
        const std::string owner = row[3].is_null() ? "" : row[3].as<std::string>();
        dlock_holder_info info{};
        info.struct_size = sizeof info;
        info.name = name.c_str();
        info.kind = kind;
        info.permits = row[2].is_null() ? 0 : row[2].as<uint32_t>();
        const size_t n = std::min(owner.size(), sizeof info.holder - 1);
        std::memcpy(info.holder, owner.data(), n);
        info.fencing_token = row[4].as<uint64_t>();
        info.ttl_left_ms = row[5].is_null() ? -1 : row[5].as<int64_t>();
        if (visit(&info, user_data) != 0) break;
    }
    return DLOCK_OK;
}

int sql_holders(dlock_backend* b, const char* name, int semaphore, dlock_holder_visitor visit, void* user_data,
                dlock_plugin_error* error) {
    return guarded(error, "sql", [&] {
        return visit_holders(
            b, name, true, [&](uint32_t kind) { return (kind == DLOCK_HOLD_PERMIT) == (semaphore != 0); }, visit, user_data);
    });
}

int sql_list(dlock_backend* b, const char* prefix, dlock_holder_visitor visit, void* user_data, dlock_plugin_error* error) {
    return guarded(error, "sql", [&] {
        return visit_holders(b, prefix ? prefix : "", false, [](uint32_t) { return true; }, visit, user_data);
    });
}

int sql_break(dlock_backend* b, const char* name, int semaphore, size_t* out_broken, dlock_plugin_error* error) {
    return guarded(error, "sql", [&]() -> int {
        if (b->mysql) {
            const size_t broken = b->mysql->break_lock(name, semaphore != 0);
            if (out_broken) *out_broken = broken;
            return DLOCK_OK;
        }
        require_holder_tables(b);
        const int64_t deadline = b->statement_deadline();
        auto s = b->sessions->borrow(deadline);
        size_t broken = 0;
        bool in_transaction = false;
        try {
            // Breaking deletes holder rows: DELETE on dlock's tables is what makes an administrator.
            if (!s->run_until(deadline, "may_break")[0][0].as<bool>())
                fail(DLOCK_PERMISSION,
                     fmt::format("sql backend: {}: user `{}` may not break locks: that needs DELETE on {} and {} (GRANT "
                                 "DELETE ON {}, {} TO <role>)", b->where(), b->config.user.empty() ? "(libpq's default)" : b->config.user,
                                 b->sql.lease_table, b->sql.holders_table, b->sql.lease_table, b->sql.holders_table));
            if (semaphore) {
                broken = size_t(s->run_until(deadline, "break_semaphore", std::string(name), b->semaphore_channel_for(name))[0][0].as<int64_t>());
            } else {
                // One transaction: the lock's row first (freed, its fence bumped), then, in a
                // statement of its own (which sees every reader that committed while the first waited
                // for the row, and none can come or go while the row stays locked), the readers of the
                // broken generations: no moment in which the row is free and a broken reader's row
                // is still there, and an exact count. Any failure inside it ends the session, which
                // rolls the transaction back (nothing was broken) unless COMMIT got through; so does
                // the server when the transaction sits idle for peer_timeout (break_bound), so that a
                // breaker stalled between its statements does not keep the row locked.
                in_transaction = true;
                s->run_until(deadline, "break_begin");
                s->run_until(deadline, "break_bound");
                const pqxx::result r = s->run_until(deadline, "break_lock", std::string(name), b->channel_for(name));
                broken = size_t(r[0][0].as<int64_t>());
                if (!r[0][1].is_null())
                    broken += size_t(s->run_until(deadline, "break_readers", std::string(name), r[0][1].as<int64_t>())[0][0].as<int64_t>());
                s->run_until(deadline, "break_commit");
                in_transaction = false;
            }
        } catch (const failure&) {
            if (in_transaction) s->mark_broken();
            throw;
        } catch (const std::exception& e) {
            if (in_transaction || dynamic_cast<const pqxx::broken_connection*>(&e)) s->mark_broken();
            const failure f = classify(b->config, e, fmt::format("breaking `{}`", name), true);
            fail(f.status == DLOCK_UNAVAILABLE ? DLOCK_UNKNOWN : f.status, f.message);
        }
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
