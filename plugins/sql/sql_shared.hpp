// sql_shared.hpp — what both dialects of the `sql` backend (PostgreSQL, pg_client.hpp; MySQL/MariaDB,
// mysql_client.hpp) share, free of either client library: the error type and clock of the plugin kit,
// the two kinds of lock, the client-side deadline watch on sockets, the connection pool, the epoll
// switch of the session-lock monitors, and the pure helpers (DSN query keys, the stable hash).
//
// Errors are thrown as sql::failure {status, message}; the plugin turns them into dlock_status codes
// at its C entry points. Messages name the backend and the server (host:port/database, never the
// password) and say what to do.
#pragma once

#include <dlock/plugin.h>
#include <dlock/plugin_kit.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace dlock::sql {

using plugin_kit::failure;  // thrown inside the plugin, caught by guarded() at each entry point
using plugin_kit::fail;
using plugin_kit::forever_ns;
using plugin_kit::now_ns;

// A lease (a row with a server-side expiry) or a session lock (PostgreSQL's advisory lock, MySQL's
// GET_LOCK), held as long as its session.
enum class lock_mode { lease, advisory };


// A URL DSN with the query keys in `drop` removed (those are dlock options, unknown to libpq).
std::string strip_query_keys(const std::string& dsn, const std::vector<std::string>& drop);

// A stable 64-bit hash of bytes (FNV-1a, then the MurmurHash3 finaliser for avalanche), the same in
// every dlock client: advisory lock keys and LISTEN channel names derive from it.
uint64_t hash64(const std::string& bytes);

// hash64(prefix + rest) for a fixed prefix whose bytes are hashed once, when the object is built
// (FNV-1a consumes bytes in order): a per-acquire key derivation allocates and rehashes nothing.
class hash64_prefix {
public:
    explicit hash64_prefix(const std::string& prefix);
    uint64_t operator()(const std::string& rest) const;

private:
    uint64_t state_;  // FNV-1a after the prefix, not finalised
};

// When a statement sent now must have been answered: `client_limit_ms` (settings::client_limit_ms())
// from now, or an acquire's own deadline when that comes sooner and is still ahead (0, try once, and a
// deadline already passed get one whole attempt).
inline int64_t statement_deadline_within(int64_t client_limit_ms, int64_t acquire_deadline_ns) {
    const int64_t now = now_ns();
    const int64_t limit = now + client_limit_ms * 1'000'000;
    return acquire_deadline_ns != 0 && acquire_deadline_ns > now ? std::min(limit, acquire_deadline_ns) : limit;
}

// Turns the watch of socket `fd` in epoll instance `epoll_fd` (under `id`, the event's data) on
// (readable, or the peer hung up) or off. Off is EPOLL_CTL_MOD to no events (EPOLLONESHOT), not a
// removal: a connection holds lock after lock, and re-enabling a registered socket costs a fraction
// of removing and adding it. The socket stays registered until its owner closes it (the kernel drops
// it then); while off it can report at most once, an error or hangup (epoll always reports those).
// A socket not registered yet (a new connection, or a new socket that got a closed one's number) is
// added when turned on.
void switch_epoll_watch(int epoll_fd, int fd, uint64_t id, bool on);

// Client-side deadlines for blocking libpq calls. A proxy, pooler or load balancer in front of the
// server keeps acknowledging TCP for a server it can no longer reach, so neither TCP keepalives nor
// tcp_user_timeout notice such a partition, and libpq would wait for an answer forever. A socket
// still armed at its deadline is shut down by the watch's thread: libpq's blocked poll/read returns
// at once and the call fails as on a lost connection. One thread per watch; it sleeps until the
// earliest deadline it knows of and is not woken when a statement finishes first.
class deadline_watch {
public:
    deadline_watch();
    ~deadline_watch();
    deadline_watch(const deadline_watch&) = delete;
    deadline_watch& operator=(const deadline_watch&) = delete;

    // Shuts `fd` down (both directions) at `deadline_ns` unless disarmed before. The caller keeps
    // `fd` open until disarm() returns. Returns a ticket for disarm().
    uint64_t arm(int fd, int64_t deadline_ns);
    // Stops watching; true when the deadline had passed and the socket was shut down. After it
    // returns the fd is never touched again.
    bool disarm(uint64_t ticket);

private:
    struct entry {
        int fd;
        int64_t deadline_ns;
        bool fired;
    };
    void run();

    plugin_kit::mutex mutex_;
    std::condition_variable wake_;
    std::map<uint64_t, entry> entries_ DLOCK_GUARDED_BY(mutex_);
    uint64_t next_ticket_ DLOCK_GUARDED_BY(mutex_) = 1;
    int64_t wakes_at_ns_ DLOCK_GUARDED_BY(mutex_) = INT64_MAX;
    bool stopping_ DLOCK_GUARDED_BY(mutex_) = false;
    std::thread thread_;
};

// Connections to the server, shared by threads — the pool both dialects use: at most
// pool_size open at once (idle, busy, or — session-lock modes — keeping a held lock). An idle
// connection is checked (Dialect::alive) before it is handed out, so ones a server restart or kill
// ended are replaced instead of failing a statement. After a failed connect, new connects wait out a
// growing backoff (10 ms doubling to 1 s) rather than hammer the server. The pool's deadline_watch
// bounds every connect and every bounded statement of its connections.
//
// `Dialect` supplies the types `connection` and `config` (its settings, with pool_size) and:
//   static std::unique_ptr<connection> connect(const config&, const statement_list&, deadline_watch&,
//                                              int64_t borrow_deadline_ns);  // throws failure
//   static bool alive(connection&);     // an idle connection, without blocking: still usable
//   static bool reusable(connection&);  // a returned connection may be kept idle
//   static failure backing_off(const failure& last_connect, int64_t next_attempt_in_ms);
//   static std::string all_busy(const config&);  // DLOCK_UNAVAILABLE's message; names pool_size
template <typename Dialect>
class connection_pool {
public:
    using connection = typename Dialect::connection;
    using config = typename Dialect::config;
    using statement_list = std::vector<std::pair<std::string, std::string>>;

    connection_pool(const config& s, statement_list statements) : settings_(s), statements_(std::move(statements)) {}

    deadline_watch& watch() { return watch_; }

    class lease {
    public:
        lease() = default;
        lease(connection_pool* p, std::unique_ptr<connection> c) : pool_(p), connection_(std::move(c)) {}
        lease(lease&&) = default;
        lease& operator=(lease&& other) {
            if (this != &other) {
                if (pool_ && connection_) pool_->give_back(std::move(connection_));
                pool_ = other.pool_;
                connection_ = std::move(other.connection_);
            }
            return *this;
        }
        ~lease() {
            if (pool_ && connection_) pool_->give_back(std::move(connection_));
        }
        connection* operator->() { return connection_.get(); }
        connection& operator*() { return *connection_; }
        explicit operator bool() const { return bool(connection_); }
        // Takes the connection out of the lease (session-lock holds keep it); give it back with give_back().
        std::unique_ptr<connection> detach() { return std::move(connection_); }

    private:
        connection_pool* pool_ = nullptr;
        std::unique_ptr<connection> connection_;
    };

    // A usable connection, waiting for one to be free until `deadline_ns` (then failure
    // DLOCK_UNAVAILABLE naming pool_size), or the connect's failure (classified by the dialect).
    // A `cancellable` borrow (for acquires) fails with DLOCK_CANCELLED after interrupt(); releases,
    // which closing the client still makes, are not. Without `check_idle`, an idle connection is
    // handed out unchecked (no system call): for a caller whose statement fails at once on an ended
    // connection, closes it, and retries once with a checked borrow.
    lease borrow(int64_t deadline_ns, bool cancellable = false, bool check_idle = true) {
        plugin_kit::unique_lock lock(mutex_);
        for (;;) {
            if (cancellable && interrupted_) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
            while (!idle_.empty()) {
                std::unique_ptr<connection> c = std::move(idle_.back());
                idle_.pop_back();
                lock.unlock();
                if (!check_idle || Dialect::alive(*c)) return lease(this, std::move(c));
                c.reset();  // ended by the server while idle (restart, kill, idle limit): replace it
                lock.lock();
                --open_;
            }
            if (open_ < settings_.pool_size) {
                const int64_t now = now_ns();
                if (now < retry_after_ns_) throw Dialect::backing_off(last_connect_failure_, (retry_after_ns_ - now) / 1'000'000 + 1);
                ++open_;
                lock.unlock();
                return connect(deadline_ns);
            }
            if (deadline_ns == 0 || now_ns() >= deadline_ns) fail(DLOCK_UNAVAILABLE, Dialect::all_busy(settings_));
            if (deadline_ns == INT64_MAX) {
                available_.wait(lock.std());
            } else {
                available_.wait_until(lock.std(), std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline_ns)));
            }
        }
    }

    // Whether a connection is idle now (a borrow would neither wait nor connect). A hint: another
    // thread may take it first.
    bool has_idle() {
        plugin_kit::lock_guard lock(mutex_);
        return !idle_.empty();
    }

    // Returns a connection (closed if not reusable); frees its slot.
    void give_back(std::unique_ptr<connection> c) {
        std::unique_ptr<connection> closing;  // closed outside the lock
        {
            plugin_kit::lock_guard lock(mutex_);
            if (!Dialect::reusable(*c) || idle_.size() >= settings_.pool_size) {
                --open_;
                closing = std::move(c);
            } else {
                idle_.push_back(std::move(c));
            }
        }
        available_.notify_one();
    }

    void interrupt() {
        plugin_kit::lock_guard lock(mutex_);
        interrupted_ = true;
        available_.notify_all();
    }

private:
    // Opens a connection in the slot the caller counted in open_.
    lease connect(int64_t borrow_deadline_ns) {
        try {
            auto c = Dialect::connect(settings_, statements_, watch_, borrow_deadline_ns);
            {
                plugin_kit::lock_guard lock(mutex_);
                backoff_ms_ = 0;
                retry_after_ns_ = 0;
            }
            return lease(this, std::move(c));
        } catch (const failure& f) {
            plugin_kit::lock_guard lock(mutex_);
            --open_;
            backoff_ms_ = backoff_ms_ ? std::min<int64_t>(backoff_ms_ * 2, 1000) : 10;
            retry_after_ns_ = now_ns() + backoff_ms_ * 1'000'000;
            last_connect_failure_ = f;
            available_.notify_one();
            throw;
        } catch (...) {
            plugin_kit::lock_guard lock(mutex_);
            --open_;
            available_.notify_one();
            throw;
        }
    }

    config settings_;
    statement_list statements_;
    deadline_watch watch_;  // declared before the connections it watches, so it outlives them
    plugin_kit::mutex mutex_;
    std::condition_variable available_;
    std::vector<std::unique_ptr<connection>> idle_ DLOCK_GUARDED_BY(mutex_);
    size_t open_ DLOCK_GUARDED_BY(mutex_) = 0;
    int64_t retry_after_ns_ DLOCK_GUARDED_BY(mutex_) = 0;
    int64_t backoff_ms_ DLOCK_GUARDED_BY(mutex_) = 0;
    failure last_connect_failure_ DLOCK_GUARDED_BY(mutex_){DLOCK_UNAVAILABLE, ""};
    bool interrupted_ DLOCK_GUARDED_BY(mutex_) = false;
};

}  // namespace dlock::sql
