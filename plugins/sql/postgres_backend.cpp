// The PostgreSQL dialect's setup and entry points (postgres_backend.hpp).
#include "postgres_turnstile.hpp"

#include <fmt/format.h>

#include <cstring>
#include <sys/socket.h>
#include <unistd.h>

namespace dlock::sql::postgres {

namespace {

constexpr int schema_version = 1;

std::string holder_description() {
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
    return fmt::format("{} pid {}", host, getpid());
}

}  // namespace

// ---- setup --------------------------------------------------------------------------------------

// Refuses servers dlock cannot lock on: a hot standby or a read-only default (no writes), and in
// advisory mode a pooling proxy between us and the server (the backend pid announced at connect
// differs from the server's own pg_backend_pid(): a transaction-mode pooler would run our lock and
// unlock on different sessions and leave locks on sessions other clients then use).
void check_server(backend& b, session& s) {
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
bool ensure_shared_tables(backend& b, session& s) {
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
void ensure_schema(backend& b, session& s) {
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

std::unique_ptr<dialect> open(const settings& config, const dlock_plugin_host& host) {
    auto b = std::make_unique<backend>(host);
    b->config = config;
    settings& c = b->config;
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
    return b;
}

uint64_t default_capabilities() {
    // What a role that may create dlock's tables gets in lease mode.
    return DLOCK_CAP_TTL | DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_PUSH_WAIT | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_SHARED |
           DLOCK_CAP_LIST | DLOCK_CAP_BREAK;
}

uint64_t backend::capabilities() const {
    if (config.mode == lock_mode::advisory)
        return DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_PUSH_WAIT | DLOCK_CAP_SESSION_BOUND | DLOCK_CAP_SHARED | DLOCK_CAP_LIST;
    const uint64_t lease = DLOCK_CAP_TTL | DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_PUSH_WAIT;
    if (shared_ready) return lease | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_SHARED | DLOCK_CAP_LIST | DLOCK_CAP_BREAK;
    return lease;
}

void backend::interrupt() {
    interrupted = true;
    sessions->interrupt();
    if (queue_sessions) queue_sessions->interrupt();
    {
        plugin_kit::lock_guard lock(listener_mutex);
        if (waker) waker->interrupt();
    }
    // Advisory waits block inside the server. A cancel request could arrive before the statement
    // does and be lost; shutting the socket down cannot: the statement fails at once, the server
    // ends the session, and a lock granted in the same instant goes with it.
    plugin_kit::lock_guard lock(waiting_mutex);
    for (session* s : waiting) ::shutdown(s->socket(), SHUT_RDWR);
}

namespace {

// A new hold of `req` (its name, owner token, host lease and kind), of the mode's type `Hold`.
template <typename Hold>
std::unique_ptr<Hold> new_hold(const dlock_acquire_request* req, uint32_t kind) {
    auto h = std::make_unique<Hold>();
    h->name = req->name;
    h->owner = req->owner;
    h->host_lease = req->host_lease;
    h->kind = kind;
    return h;
}

}  // namespace

int backend::acquire(const dlock_acquire_request* req, ::dlock_hold** out_hold, dlock_grant* grant) {
    backend* b = this;
    if (b->interrupted) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
    const uint32_t kind = DLOCK_STRUCT_COVERS(req, dlock_acquire_request, permits) ? req->kind : uint32_t(DLOCK_HOLD_EXCLUSIVE);
    if (kind != DLOCK_HOLD_EXCLUSIVE && !(capabilities() & (kind == DLOCK_HOLD_SHARED ? DLOCK_CAP_SHARED : DLOCK_CAP_SEMAPHORE)))
        fail(DLOCK_NOT_SUPPORTED, "sql backend: this mode has no semaphores (docs/backends/sql.md)");
    if (b->config.mode == lock_mode::advisory) {
        auto h = new_hold<advisory_hold>(req, kind);
        const int status = acquire_advisory(b, req, h, grant);
        if (status == DLOCK_OK) *out_hold = h.release();
        return status;
    }
    auto h = new_hold<lease_hold>(req, kind);
    const int status = kind == DLOCK_HOLD_EXCLUSIVE ? acquire_lease(b, req, h, grant) : acquire_holder_lease(b, req, h, grant);
    if (status == DLOCK_OK) *out_hold = h.release();
    return status;
}

int backend::release(::dlock_hold* held) {
    if (config.mode == lock_mode::advisory) return release_advisory(this, as_advisory_hold(held));
    lease_hold* h = as_lease_hold(held);
    return h->kind == DLOCK_HOLD_EXCLUSIVE ? release_lease(this, h) : release_holder_lease(this, h);
}

void backend::destroy_hold(::dlock_hold* held) {
    if (config.mode == lock_mode::lease) {
        delete as_lease_hold(held);  // a row expires by itself
        return;
    }
    advisory_hold* h = as_advisory_hold(held);
    try {
        if (h->held) {
            // Never released (or the release failed): end the session, which ends its lock. The
            // monitor forgets the hold first, so it never reports on it after this returns.
            monitor* m;
            {
                plugin_kit::lock_guard lock(monitor_mutex);
                m = watcher.get();
            }
            if (m) m->take(h);
            retire_session(this, h, false);
        }
    } catch (...) {
    }
    delete h;
}

int backend::renew(dlock_renewal* renewals, size_t count) {
    return config.mode == lock_mode::lease ? renew_lease(this, renewals, count) : renew_advisory(this, renewals, count);
}

}  // namespace dlock::sql::postgres
