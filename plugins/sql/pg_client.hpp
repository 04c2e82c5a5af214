// pg_client.hpp — the PostgreSQL client of the `sql` backend (libpqxx over libpq), which both of its
// PostgreSQL modes use: error classification, sessions (one libpqxx connection each) and how the
// connection pool opens them, the client-side time limits on connects, the LISTEN connection that
// wakes lease-mode waiters, and the monitor that notices, without a query, when a connection holding
// an advisory lock dies. The settings and the connection string are in pg_settings.hpp; what the
// MySQL dialect shares with it (the pool, the deadline watch, failure) in sql_shared.hpp.
#pragma once

#include <dlock/plugin.h>
#include <dlock/plugin_kit.hpp>

#include "pg_settings.hpp"
#include "sql_shared.hpp"

#include <libpq-fe.h>
#include <pqxx/pqxx>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace dlock::sql {

// "…" quoted SQL identifier (embedded quotes doubled). For configured schema/table names only: lock
// names are always statement parameters, never part of SQL text.
std::string quote_identifier(const std::string& identifier);

// The status and message for an exception thrown by libpqxx during `what` (e.g. "acquire of `x`").
// `maybe_executed`: the statement may have reached the server, so a lost connection leaves its
// outcome unknown (DLOCK_UNKNOWN) rather than simply failed (DLOCK_UNAVAILABLE).
failure classify(const settings& s, const std::exception& e, const std::string& what, bool maybe_executed);
// The SQLSTATE of a libpqxx sql_error, "" for other exceptions.
std::string sqlstate_of(const std::exception& e);

// libpqxx 6.4 leaks the PGresult of a statement whose connection broke while it ran: make_result()
// asks for the client encoding, which throws on a dead connection, before it owns the result
// (216 bytes per broken statement). Under LeakSanitizer, allocations made inside one libpqxx call are
// therefore not reported as leaks; everything else is. A no-op in builds without LeakSanitizer.
extern "C" void __lsan_disable() __attribute__((weak));
extern "C" void __lsan_enable() __attribute__((weak));
struct libpqxx_call_scope {
    libpqxx_call_scope() {
        if (&__lsan_disable) __lsan_disable();
    }
    ~libpqxx_call_scope() {
        if (&__lsan_enable) __lsan_enable();
    }
    libpqxx_call_scope(const libpqxx_call_scope&) = delete;
    libpqxx_call_scope& operator=(const libpqxx_call_scope&) = delete;
};

// Thrown (as libpqxx's broken_connection, which it is) when the client gave a statement or connect
// up at its deadline: the connection is closed; a statement's outcome is unknown.
class no_answer : public pqxx::broken_connection {
public:
    explicit no_answer(const std::string& what) : pqxx::broken_connection(what) {}
};

// A libpqxx connection policy that connects with PQconnectStart/PQconnectPoll, waiting for the
// socket with poll() no later than a deadline (libpq's own connect_timeout counts whole seconds per
// address and waits each one out). Throws no_answer when the deadline passes, broken_connection for
// libpq's own errors.
class deadline_connect : public pqxx::connectionpolicy {
public:
    deadline_connect(const std::string& conninfo, int64_t deadline_ns) : pqxx::connectionpolicy(conninfo), deadline_ns_(deadline_ns) {}
    handle do_startconnect(handle orig) override;
    PGconn* raw() const { return raw_; }

private:
    int64_t deadline_ns_;
    PGconn* raw_ = nullptr;
};

// A libpqxx connection through deadline_connect. Always held and destroyed as this type:
// pqxx::connection_base's destructor is not virtual.
class bounded_connection : public pqxx::connection_base {
public:
    bounded_connection(const std::string& conninfo, int64_t deadline_ns);
    ~bounded_connection() { close(); }
    PGconn* raw() const { return policy_.raw(); }  // libpq's handle, owned by the connection

private:
    deadline_connect policy_;  // used by the base only from init() on, once it is built
};

// A bounded_connection whose automatic reconnection ("reactivation") is off: a reconnected session
// would silently have lost its session locks and LISTENs. `raw`, when given, receives libpq's handle.
std::unique_ptr<bounded_connection> connect_until(const settings& s, int64_t deadline_ns, PGconn** raw = nullptr);

// One server connection: a connection from connect_until() that has run session_setup_sql(), plus
// the prepared statements of the mode. Used by one thread at a time. With a deadline_watch, the
// connect and the setup end by `connect_deadline_ns` and run_until() enforces its deadline; without
// one (benchmarks), calls wait as long as libpq does.
class session {
public:
    session(const settings& s, const std::vector<std::pair<std::string, std::string>>& statements,
            deadline_watch* watch = nullptr, int64_t connect_deadline_ns = INT64_MAX);
    // For setup statements in transactions of their own; only before the first run(). Bound them
    // with within().
    pqxx::connection_base& connection() { return *connection_; }
    int socket() const { return connection_->sock(); }
    // libpq's handle, for the monitor's probes of an idle session (never while libpqxx uses it).
    PGconn* raw() const { return raw_; }
    int backend_pid() const { return backend_pid_; }
    // Lease mode: the server process that runs this session's statements, as the server names it —
    // its pid (pg_backend_pid()) and its start (pg_stat_activity.backend_start, µs since the epoch),
    // read at connect as the login role (a role switched to by the DSN or the role's settings may
    // not see it); the pair names one process, never a later one that reuses the pid. 0 in
    // advisory mode. Behind a pooling proxy the pid differs from backend_pid() (the one the
    // connection announced) and the server process may serve another client once ours is gone.
    int server_pid() const { return server_pid_; }
    int64_t server_started_us() const { return server_started_us_; }
    bool behind_pooler() const { return server_pid_ != 0 && server_pid_ != backend_pid_; }
    // When the session last answered a statement (or connected): CLOCK_MONOTONIC ns.
    int64_t idle_since_ns() const { return idle_since_ns_; }
    // Runs a prepared statement in autocommit (one round trip; the first use of each statement on a
    // session adds the PREPARE). Exceptions are libpqxx's. Every run() goes through one long-lived
    // libpqxx nontransaction (autocommit: it never sends BEGIN), which saves building one per call.
    // No client-side limit: the plugin uses run_until().
    template <typename... Args>
    pqxx::result run(const std::string& statement, Args&&... args) {
        libpqxx_call_scope scope;
        if (!autocommit_) autocommit_ = std::make_unique<pqxx::nontransaction>(*connection_);
        pqxx::result r = autocommit_->exec_prepared(statement, std::forward<Args>(args)...);
        idle_since_ns_ = now_ns();
        return r;
    }
    // run(), given up at `deadline_ns` (CLOCK_MONOTONIC; INT64_MAX: never): then the session is
    // broken and no_answer is thrown.
    template <typename... Args>
    pqxx::result run_until(int64_t deadline_ns, const std::string& statement, Args&&... args) {
        return within(deadline_ns, [&] { return run(statement, std::forward<Args>(args)...); });
    }
    // Runs `body` (libpqxx calls on this session) under a deadline, as run_until() does.
    template <typename F>
    auto within(int64_t deadline_ns, F&& body) -> decltype(body()) {
        if (!watch_ || deadline_ns == INT64_MAX) return body();
        const int64_t start = now_ns();
        const uint64_t ticket = watch_->arm(socket(), deadline_ns);
        try {
            auto result = body();
            if (watch_->disarm(ticket)) broken_ = true;  // answered just as the socket was shut down
            return result;
        } catch (...) {
            if (!watch_->disarm(ticket)) throw;
            broken_ = true;
            throw no_answer(no_answer_message(deadline_ns - start));
        }
    }
    // Without blocking: reads whatever the server sent while the session was idle (a notice, or the
    // FATAL message and EOF of a terminated session) and says whether the session is still usable.
    bool alive();
    void mark_broken() { broken_ = true; }
    bool broken() const { return broken_; }

private:
    static std::string no_answer_message(int64_t waited_ns);

    std::unique_ptr<bounded_connection> connection_;
    std::unique_ptr<pqxx::nontransaction> autocommit_;  // destroyed before the connection
    deadline_watch* watch_ = nullptr;
    PGconn* raw_ = nullptr;
    int backend_pid_ = 0;
    int server_pid_ = 0;
    int64_t server_started_us_ = 0;
    int64_t idle_since_ns_ = 0;
    bool broken_ = false;
};

// PostgreSQL sessions in a connection_pool. A new session must be ready by the borrow's deadline
// (at least 250 ms from now); with 0 or INT64_MAX, within the larger of client_limit_ms() and 5 s
// (libpq's connect_timeout that dlock sets). Its failures: DLOCK_UNAVAILABLE / DLOCK_CONFIG /
// DLOCK_BACKEND when the server cannot be reached, refuses us or is too old.
struct postgres_sessions {
    using connection = session;
    using config = settings;
    static std::unique_ptr<session> connect(const settings& s, const std::vector<std::pair<std::string, std::string>>& statements,
                                            deadline_watch& watch, int64_t borrow_deadline_ns);
    static bool alive(session& s) { return s.alive(); }
    static bool reusable(session& s) { return !s.broken() && s.connection().is_open(); }
    static failure backing_off(const failure& last_connect, int64_t next_attempt_in_ms);
    static std::string all_busy(const settings& s);
};
using pool = connection_pool<postgres_sessions>;

// The dedicated LISTEN connection of a client (lease mode), shared by all its waiters: the transport
// of a plugin_kit::waker (whose waiters' side it offers: watch, wait_listening, generation,
// wait_change, interrupt). A channel is LISTENed while it has watchers; its notifications, the
// completion of its LISTEN and a lost connection wake its waiters as the waker describes. While the
// connection is down, waiters fall back to their timed retry at the holder's expiry.
//
// Its connects and LISTENs are bounded by settings.client_limit_ms() through `watch` (which must
// outlive the listener), so stopping it never waits on a partitioned server.
class listener : public plugin_kit::waker {
public:
    listener(const settings& s, deadline_watch& watch);
    ~listener();

private:
    class receiver;
    void run();

    settings settings_;
    deadline_watch& watch_;
    std::atomic<bool> stopping_{false};
    std::thread thread_;
};

// Watches the sockets of idle sessions that keep advisory locks — a readiness wait (epoll) — and
// reports a session that the server ended (pg_terminate_backend, restart, a network failure noticed
// by keepalives / tcp_user_timeout) through `on_dead`, from its own thread, holding no lock that
// begin_use(), end_use() or take() take. After take() returns, `on_dead` is never called for that
// cookie again.
//
// A partition behind a proxy that acknowledges TCP (pgbouncer, HAProxy, the lab's proxy) leaves the
// socket open and silent, which no readiness wait tells from an idle session. So each idle session
// is also probed: `probe_interval_ns` after it was last heard from, the monitor sends an empty query
// (libpq's asynchronous API, without blocking) that must be answered within another
// `probe_interval_ns`; unanswered, the session is reported dead and its socket shut down (the
// server ends it, and frees its locks, when it hears of it). A silent failure is thus reported
// within 2 × probe_interval_ns. A statement run between begin_use() and end_use() eats a pending
// probe's answer first (libpq discards unread results before a new query) and counts as being heard
// from. Adding, using and taking a session are one epoll_ctl call each; the monitor thread is woken
// for an add only when it sleeps past the new session's first probe (at most once per interval).
class monitor {
public:
    monitor(std::function<void(void* cookie)> on_dead, int64_t probe_interval_ns);
    ~monitor();
    monitor(const monitor&) = delete;
    monitor& operator=(const monitor&) = delete;

    void add(void* cookie, session* s);
    // Stops watching (waits for a check or report in progress). Returns true when the session had
    // been found dead.
    bool take(void* cookie);
    // The caller is about to use the session (renew): the monitor leaves it alone until end_use().
    // Returns false when the session was already found dead.
    bool begin_use(void* cookie);
    void end_use(void* cookie, bool still_alive);

private:
    enum class phase { idle, in_use, checking, reporting };
    struct entry {
        void* cookie = nullptr;
        session* s = nullptr;
        int fd = -1;
        phase state = phase::idle;
        bool dead = false;
        int64_t probe_at_ns = 0;        // when to send the next probe (idle, none pending)
        int64_t probe_deadline_ns = 0;  // a probe is pending: its answer is due by then; 0: none
    };
    void run();
    // For an idle entry with a probe pending: reads what arrived without blocking. False when the
    // session is gone.
    bool read_probe(entry& e, int64_t now);
    // The next time a probe is due or overdue (INT64_MAX: none).
    int64_t next_probe_event() const DLOCK_REQUIRES(mutex_);
    // switch_epoll_watch for `e`'s socket; an event that comes while it is off finds no idle entry
    // and is ignored.
    void watch(entry& e, uint64_t id, bool on) DLOCK_REQUIRES(mutex_) { switch_epoll_watch(epoll_fd_, e.fd, id, on); }
    std::map<uint64_t, entry>::iterator find(void* cookie) DLOCK_REQUIRES(mutex_);
    void wait_settled(plugin_kit::unique_lock& lock, void* cookie) DLOCK_REQUIRES(mutex_);

    std::function<void(void*)> on_dead_;
    const int64_t probe_interval_ns_;
    mutable plugin_kit::mutex mutex_;
    std::condition_variable settled_;
    std::map<uint64_t, entry> entries_ DLOCK_GUARDED_BY(mutex_);  // by id: an event for a removed entry finds nothing
    std::map<void*, uint64_t> ids_ DLOCK_GUARDED_BY(mutex_);
    uint64_t next_id_ DLOCK_GUARDED_BY(mutex_) = 1;
    bool stopping_ DLOCK_GUARDED_BY(mutex_) = false;
    int64_t wakes_at_ns_ DLOCK_GUARDED_BY(mutex_) = INT64_MAX;  // when the monitor thread's wait ends by itself
    int epoll_fd_ = -1;
    int wake_fd_ = -1;
    std::thread thread_;
};

}  // namespace dlock::sql
