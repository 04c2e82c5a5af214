// sql_common.hpp — the machinery of the `sql` backend (PostgreSQL over libpqxx) that both of its modes
// use: settings and the libpq connection string built from them, error classification, sessions
// (one libpqxx connection each) and their pool, the LISTEN connection that wakes lease-mode waiters,
// and the monitor that notices, without a query, when a connection holding an advisory lock dies.
//
// Errors are thrown as sql::failure {status, message}; the plugin turns them into dlock_status codes
// at its C entry points. Messages name the backend and the server (host:port/database, never the
// password) and say what to do.
#pragma once

#include <dlock/plugin.h>
#include <dlock/plugin_support.hpp>

#include <pqxx/pqxx>

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

using plugin_support::failure;  // thrown inside the plugin, caught by guarded() at each entry point
using plugin_support::fail;

int64_t now_ns();  // CLOCK_MONOTONIC

enum class lock_mode { lease, advisory };

// What the plugin's options say, validated.
struct settings {
    std::string dsn;  // libpq URL or keyword string, dlock's own query keys removed
    lock_mode mode = lock_mode::lease;
    std::string schema = "public";
    std::string table = "dlock_locks";
    std::string password;  // overrides the DSN's when set
    std::string sslmode, sslrootcert, sslcert, sslkey;
    int64_t statement_timeout_ms = 5000;
    int64_t handoff_grace_ms = 50;
    int64_t peer_timeout_ms = 10000;
    size_t pool_size = 32;
    bool allow_session_pooler = false;

    // Filled by resolve(): the libpq keyword string every session connects with, and the server as
    // messages name it ("postgres 127.0.0.1:5432/postgres").
    std::string conninfo;
    std::string server;
};

// Builds settings.conninfo and settings.server from the DSN and the options (throws
// failure(DLOCK_CONFIG) for a DSN libpq cannot parse). Connection defaults dlock sets unless the DSN
// says otherwise: application_name=dlock, connect_timeout=5, client_encoding=UTF8, TCP keepalives and
// tcp_user_timeout derived from peer_timeout. Session settings always added (libpq `options`):
// statement_timeout (lease mode; 0 in advisory mode, whose waits are bounded by lock_timeout) and the
// server's own keepalive / tcp_user_timeout at twice peer_timeout, so the client gives a session up
// before the server frees what it held.
void resolve(settings& s);

// A URL DSN with the query keys in `drop` removed (those are dlock options, unknown to libpq).
std::string strip_query_keys(const std::string& dsn, const std::vector<std::string>& drop);

// "…" quoted SQL identifier (embedded quotes doubled). For configured schema/table names only: lock
// names are always statement parameters, never part of SQL text.
std::string quote_identifier(const std::string& identifier);

// A stable 64-bit hash of bytes (FNV-1a, then the MurmurHash3 finaliser for avalanche), the same in
// every dlock client: advisory lock keys and LISTEN channel names derive from it.
uint64_t hash64(const std::string& bytes);

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

// One server connection: a libpqxx connection whose automatic reconnection ("reactivation") is
// off — a reconnected session would silently have lost its session locks — plus the prepared
// statements of the mode. Used by one thread at a time.
class session {
public:
    session(const settings& s, const std::vector<std::pair<std::string, std::string>>& statements);
    // For setup statements in transactions of their own; only before the first run().
    pqxx::connection& connection() { return *connection_; }
    int socket() const { return connection_->sock(); }
    int backend_pid() const { return backend_pid_; }
    // Runs a prepared statement in autocommit (one round trip; the first use of each statement on a
    // session adds the PREPARE). Exceptions are libpqxx's. Every run() goes through one long-lived
    // libpqxx nontransaction (autocommit: it never sends BEGIN), which saves building one per call.
    template <typename... Args>
    pqxx::result run(const std::string& statement, Args&&... args) {
        libpqxx_call_scope scope;
        if (!autocommit_) autocommit_ = std::make_unique<pqxx::nontransaction>(*connection_);
        return autocommit_->exec_prepared(statement, std::forward<Args>(args)...);
    }
    // Without blocking: reads whatever the server sent while the session was idle (a notice, or the
    // FATAL message and EOF of a terminated session) and says whether the session is still usable.
    bool alive();
    void mark_broken() { broken_ = true; }
    bool broken() const { return broken_; }

private:
    std::unique_ptr<pqxx::connection> connection_;
    std::unique_ptr<pqxx::nontransaction> autocommit_;  // destroyed before the connection
    int backend_pid_ = 0;
    bool broken_ = false;
};

// Sessions to the server, shared by threads: at most settings.pool_size open at once (idle, busy, or
// — advisory mode — keeping a held lock). An idle session is checked (alive()) before it is handed
// out, so sessions a server restart ended are replaced instead of failing a statement. After a failed
// connect, new connects wait out a growing backoff (10 ms doubling to 1 s) rather than hammer the server.
class pool {
public:
    pool(const settings& s, std::vector<std::pair<std::string, std::string>> statements);

    class lease {
    public:
        lease() = default;
        lease(pool* p, std::unique_ptr<session> s) : pool_(p), session_(std::move(s)) {}
        lease(lease&&) = default;
        lease& operator=(lease&& other);
        ~lease();
        session* operator->() { return session_.get(); }
        session& operator*() { return *session_; }
        explicit operator bool() const { return bool(session_); }
        // Takes the session out of the lease (advisory holds keep it); give it back with give_back().
        std::unique_ptr<session> detach() { return std::move(session_); }

    private:
        pool* pool_ = nullptr;
        std::unique_ptr<session> session_;
    };

    // A usable session, waiting for one to be free until `deadline_ns` (then failure
    // DLOCK_UNAVAILABLE naming pool_size), or failure(DLOCK_UNAVAILABLE / DLOCK_CONFIG) when the
    // server cannot be reached or refuses us. A `cancellable` borrow (for acquires) fails with
    // DLOCK_CANCELLED after interrupt(); releases, which closing the client still makes, are not.
    lease borrow(int64_t deadline_ns, bool cancellable = false);
    // Returns a session (closed if broken); frees its slot.
    void give_back(std::unique_ptr<session> s);
    void interrupt();

private:
    settings settings_;
    std::vector<std::pair<std::string, std::string>> statements_;
    std::mutex mutex_;
    std::condition_variable available_;
    std::vector<std::unique_ptr<session>> idle_;
    size_t open_ = 0;
    int64_t retry_after_ns_ = 0;
    int64_t backoff_ms_ = 0;
    std::string last_connect_error_;
    int last_connect_status_ = DLOCK_UNAVAILABLE;
    bool interrupted_ = false;
};

// The dedicated LISTEN connection of a client (lease mode), shared by all its waiters. A waiter
// watches its name's channel BEFORE retrying; any notification that arrives after that bumps the
// channel's generation, so a release between the retry and the wait is never missed. While the
// connection is down, waiters fall back to their timed retry at the holder's expiry; when it comes
// back every channel's generation is bumped (notifications may have been missed meanwhile).
class listener {
public:
    explicit listener(const settings& s);
    ~listener();
    listener(const listener&) = delete;
    listener& operator=(const listener&) = delete;

    void watch(const std::string& channel);    // LISTEN on the first watcher
    void unwatch(const std::string& channel);  // UNLISTEN after the last
    // Until the LISTEN is confirmed: true; false at `deadline_ns`, on interrupt, or while down.
    bool wait_listening(const std::string& channel, int64_t deadline_ns);
    uint64_t generation(const std::string& channel);
    // Until the generation differs from `seen`, `until_ns` passes, or interrupt.
    void wait_change(const std::string& channel, uint64_t seen, int64_t until_ns);
    void interrupt();

private:
    struct channel_state {
        int watchers = 0;
        bool listening = false;
        uint64_t generation = 0;
    };
    class receiver;
    void run();
    void wake();
    void notified(const std::string& channel);

    settings settings_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::map<std::string, channel_state> channels_;
    bool interrupted_ = false;
    std::atomic<bool> stopping_{false};
    int wake_fd_ = -1;
    std::thread thread_;
};

// Watches the sockets of idle sessions that keep advisory locks — a readiness wait (epoll), not a
// query — and reports a session that the server ended (pg_terminate_backend, restart, a network
// failure noticed by keepalives / tcp_user_timeout) through `on_dead`, from its own thread, holding
// no lock that begin_use(), end_use() or take() take. Adding, using and taking a session are
// epoll_ctl calls: the monitor thread is not woken for them, so an uncontended acquire+release costs
// it nothing. After take() returns, `on_dead` is never called for that cookie again.
class monitor {
public:
    explicit monitor(std::function<void(void* cookie)> on_dead);
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
    };
    void run();
    void watch(entry& e, bool on);
    std::map<uint64_t, entry>::iterator find(void* cookie);
    void wait_settled(std::unique_lock<std::mutex>& lock, void* cookie);

    std::function<void(void*)> on_dead_;
    std::mutex mutex_;
    std::condition_variable settled_;
    std::map<uint64_t, entry> entries_;  // by id: an event for a removed entry finds nothing
    std::map<void*, uint64_t> ids_;
    uint64_t next_id_ = 1;
    bool stopping_ = false;
    int epoll_fd_ = -1;
    int wake_fd_ = -1;
    std::thread thread_;
};

}  // namespace dlock::sql
