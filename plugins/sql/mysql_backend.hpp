// mysql_backend.hpp — the `sql` backend's MySQL/MariaDB dialect: its two modes behind the plugin's
// entry points (sql_plugin.cpp forwards to it when the DSN is mysql:// or mariadb://, or when
// `dialect: mysql`).
//
// mode: lease (default) — an InnoDB lock table, time kept by the server's clock only.
//   Acquire is one prepared INSERT … ON DUPLICATE KEY UPDATE that inserts the name's row or takes
//   over a free or expired one, bumping its fence (returned through LAST_INSERT_ID). Rows are never
//   deleted; release clears the owner where the owner token matches; renew extends where it
//   matches, one UPDATE per batch of leases. MySQL has no LISTEN/NOTIFY and a lease-mode holder keeps no connection a waiter could
//   block on, so a waiter polls (1 ms doubling to 32 ms, with jitter): the mode claims no PUSH_WAIT.
//
// mode: named (or advisory) — MySQL's user-level locks. GET_LOCK on a pooled connection that then
//   stays with the lease until release: the lock lives as long as that session. The same statement
//   (INSERT … SELECT … WHERE GET_LOCK(…)) bumps the name's fence row. Waiting is GET_LOCK's own
//   wait in the server, woken by the holder's RELEASE_LOCK or its session's end. A monitor thread
//   waits on the held connections' sockets (epoll) and reports LOST as soon as the server ends one
//   (KILL CONNECTION, restart); TCP keepalives and TCP_USER_TIMEOUT notice a silent peer.
//   GET_LOCK names are at most 64 characters: see named_lock_key().
#pragma once

#include "lease_state.hpp"
#include "mysql_client.hpp"
#include "mysql_names.hpp"
#include "mysql_statements.hpp"
#include "sql_dialect.hpp"

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dlock::sql::mysql {

// One acquisition held by this client (lease mode: its lease_state); the host holds it as a
// ::dlock_hold (mysql_dialect.cpp casts it back).
struct hold : ::dlock_hold, lease_state {
    std::string name, owner, key;
    bool permit = false;  // lease mode: one permit of the semaphore `name`
    void* host_lease = nullptr;
    std::unique_ptr<connection> held;  // named mode: the session whose GET_LOCK this is
};

// Watches the sockets of idle connections that keep named locks (epoll) and reports a connection
// the server ended through `on_dead`, from its own thread, holding no lock its other calls take.
// After take() returns, `on_dead` is never called for that cookie again. A connection holds lock
// after lock: its watch is switched on and off (switch_epoll_watch); an event that comes while it
// is off finds no idle entry (its id is gone, or the connection is in use) and is ignored.
class held_monitor {
public:
    explicit held_monitor(std::function<void(void* cookie)> on_dead);
    ~held_monitor();
    held_monitor(const held_monitor&) = delete;
    held_monitor& operator=(const held_monitor&) = delete;

    void add(void* cookie, int fd);
    // Stops watching (waits for a report in progress). True when the connection had been found dead.
    bool take(void* cookie);
    // The caller is about to run a statement on the connection; false when it was found dead.
    bool begin_use(void* cookie);
    void end_use(void* cookie, bool still_alive);

private:
    struct entry {
        int fd;
        uint64_t id;  // the epoll data of its socket: never reused, unlike a cookie's address
        bool in_use = false, dead = false, reporting = false;
    };
    void run();
    void watch(const entry& e, bool on) DLOCK_REQUIRES(mutex_) { switch_epoll_watch(epoll_fd_, e.fd, e.id, on); }

    std::function<void(void*)> on_dead_;
    plugin_kit::mutex mutex_;
    std::condition_variable settled_;
    std::map<void*, entry> entries_ DLOCK_GUARDED_BY(mutex_);
    uint64_t next_id_ DLOCK_GUARDED_BY(mutex_) = 1;  // 0: the wake fd
    int epoll_fd_ = -1, wake_fd_ = -1;
    std::atomic<bool> stopping_{false};
    std::thread thread_;
};

// One current holder, as holders() reads it.
struct holder_row {
    std::string name;
    uint32_t kind = DLOCK_HOLD_EXCLUSIVE;
    uint32_t permits = 0;
    std::string owner;
    uint64_t fence = 0;
    int64_t ttl_left_ms = -1;
};

class backend {
public:
    // Connects, checks the server (writable), creates dlock's tables when missing. Throws failure.
    backend(const settings& s, const dlock_plugin_host& host);
    ~backend();

    uint64_t capabilities() const;
    int acquire(const dlock_acquire_request* req, std::unique_ptr<hold>& h, dlock_grant* grant);
    int release(hold* h);
    // `of` finds this dialect's hold in the host's renewal entries.
    int renew(dlock_renewal* renewals, size_t count, const std::function<hold*(dlock_hold*)>& of);
    int inspect(const char* name, dlock_lock_info* info);
    // Lease mode with the holders table: every holder of the lock or semaphore `name` (exact) or of
    // every name starting with it. Throws failure (NOT_SUPPORTED without the table).
    std::vector<holder_row> holders(const std::string& name_or_prefix, bool exact);
    // Lease mode: removes every holder of the lock or semaphore `name`, fenced; the number removed.
    // Needs DELETE on the holders table (else failure DLOCK_PERMISSION).
    size_t break_lock(const std::string& name, bool semaphore);
    void destroy_hold(hold* h);
    void interrupt();

private:
    int acquire_lease(const dlock_acquire_request* req, hold& h, dlock_grant* grant);
    int acquire_named(const dlock_acquire_request* req, std::unique_ptr<hold>& h, dlock_grant* grant);
    int acquire_named_once(const dlock_acquire_request* req, std::unique_ptr<hold>& h, dlock_grant* grant, bool& unanswered);
    int release_lease(hold* h);
    int acquire_permit(const dlock_acquire_request* req, hold& h, dlock_grant* grant);
    // One transaction: takes a free permit of at most `limit` and writes its fence into `fence`, or
    // returns false with the ms until the first held permit expires in `wait_ms`. `committing` is
    // set when the COMMIT is sent: only from then on can a transaction the client gave up commit.
    bool try_permit(connection& c, hold& h, uint32_t limit, int64_t ttl_ms, int64_t deadline, uint64_t& fence, int64_t& wait_ms,
                    bool& committing);
    // After a permit acquire's transaction was cut or its connection lost (`cause`): whether it took
    // a permit (then its fence in `fence`), decided once that transaction can no longer commit —
    // at once, unless its COMMIT may still be on its way or running (`commit_pending`). Throws
    // failure DLOCK_UNKNOWN when the server cannot tell in time.
    bool read_back_permit(const hold& h, bool commit_pending, const std::string& cause, uint64_t& fence);
    int release_permit(hold* h);
    int release_row(hold* h, bool permit);  // the shared body of release_lease and release_permit
    bool ensure_holders_table(connection& c);
    int release_named(hold* h);
    held_monitor& monitor_for_holds();
    void check_server(connection& c);
    void ensure_schema(connection& c);
    int64_t statement_deadline() const { return now_ns() + config_.client_limit_ms() * 1'000'000; }
    std::string where() const { return "mysql " + config_.server; }

    settings config_;
    statements sql_;
    dlock_plugin_host host_{};
    std::string holder_;
    std::unique_ptr<pool> connections_;
    std::atomic<bool> interrupted_{false};
    bool holders_ready_ = false;  // lease mode: the holders table exists (semaphores are offered)
    plugin_kit::mutex waiting_mutex_;
    std::vector<connection*> waiting_ DLOCK_GUARDED_BY(waiting_mutex_);  // named mode: blocked in GET_LOCK (interrupt shuts them down)
    plugin_kit::mutex monitor_mutex_;
    std::unique_ptr<held_monitor> monitor_ DLOCK_GUARDED_BY(monitor_mutex_);
};

}  // namespace dlock::sql::mysql
