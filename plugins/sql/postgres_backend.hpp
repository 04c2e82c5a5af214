// postgres_backend.hpp — the `sql` backend's PostgreSQL dialect (libpqxx), in one of two modes.
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
// The dialect's state (backend, which implements sql::dialect) and hold, and the parts its files
// share: postgres_backend.cpp (setup, the entry points), postgres_lease.cpp (lease mode, exclusive
// holds), postgres_holders.cpp (lease mode, shared holds and permits), postgres_turnstile.cpp (fair
// waiters' queues and waits), postgres_advisory.cpp (advisory mode), postgres_admin.cpp (inspect,
// holders, list, break).
#pragma once

#include "lease_state.hpp"
#include "pg_client.hpp"
#include "sql_dialect.hpp"
#include "sql_statements.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace dlock::sql::postgres {

// One acquisition: what the holds of both modes have. The host holds it as a ::dlock_hold; the
// backend, whose mode was fixed at create, casts it back to that mode's hold.
struct hold : ::dlock_hold {
    std::string name;
    std::string owner;
    uint32_t kind = DLOCK_HOLD_EXCLUSIVE;  // dlock_hold_kind
    void* host_lease = nullptr;
};

// Lease mode: a row of the lease table (exclusive) or of the holders table (shared, permit), its
// validity as this client knows it (lease_state) and the LISTEN channel its release notifies.
struct lease_hold : hold, lease_state {
    std::string channel;
};

// Advisory mode: the advisory key and the session whose lock it is.
struct advisory_hold : hold {
    int64_t key = 0;
    std::unique_ptr<session> held;
};

inline lease_hold* as_lease_hold(::dlock_hold* h) { return static_cast<lease_hold*>(h); }
inline advisory_hold* as_advisory_hold(::dlock_hold* h) { return static_cast<advisory_hold*>(h); }

// The dialect: its settings, statements, pools and waiters' machinery. Its methods are the plugin's
// entry points for PostgreSQL (postgres_backend.cpp); the modes' functions take it as `b`.
class backend final : public dialect {
public:
    explicit backend(const dlock_plugin_host& host_) : host(host_) {}

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
    plugin_kit::mutex contended_mutex;
    std::map<std::string, bool> contention_hints DLOCK_GUARDED_BY(contended_mutex);
    bool seems_contended(const std::string& name) {
        {
            plugin_kit::lock_guard lock(contended_mutex);
            const auto it = contention_hints.find(name);
            if (it != contention_hints.end()) return it->second;
        }
        return queue_sessions && queue_sessions->has_idle();
    }
    void note_contended(const std::string& name, bool contended) {
        plugin_kit::lock_guard lock(contended_mutex);
        // Bounded: the hints just start over.
        if (contention_hints.size() >= 1024 && !contention_hints.count(name)) contention_hints.clear();
        contention_hints[name] = contended;
    }

    // Lease mode: the LISTEN connection, started by the first wait.
    plugin_kit::mutex listener_mutex;
    std::unique_ptr<listener> waker DLOCK_GUARDED_BY(listener_mutex);
    listener& listener_for_waits() {
        plugin_kit::lock_guard lock(listener_mutex);
        if (!waker) waker = std::make_unique<listener>(config, sessions->watch());
        if (interrupted) waker->interrupt();
        return *waker;
    }

    // Advisory mode: sessions blocked in the server's lock queue (closing the client shuts their
    // sockets down), and the monitor of held sessions, started by the first hold.
    plugin_kit::mutex waiting_mutex;
    std::vector<session*> waiting DLOCK_GUARDED_BY(waiting_mutex);
    plugin_kit::mutex monitor_mutex;
    std::unique_ptr<monitor> watcher DLOCK_GUARDED_BY(monitor_mutex);
    monitor& monitor_for_holds() {
        plugin_kit::lock_guard lock(monitor_mutex);
        if (!watcher)
            // Probed every peer_timeout/3, so a silent session is reported within 2/3 of peer_timeout,
            // as TCP keepalives report a dead peer when nothing acknowledges in its place.
            watcher = std::make_unique<monitor>(
                [this](void* cookie) {
                    auto* h = static_cast<advisory_hold*>(cookie);
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

    uint64_t capabilities() const override;
    void interrupt() override;
    int acquire(const dlock_acquire_request* req, ::dlock_hold** out_hold, dlock_grant* grant) override;
    int release(::dlock_hold* h) override;
    void destroy_hold(::dlock_hold* h) override;
    int renew(dlock_renewal* renewals, size_t count) override;
    int inspect(const char* name, dlock_lock_info* info) override;
    int visit_holders(const std::string& name_or_prefix, bool exact, const kind_filter& wanted, dlock_holder_visitor visit,
                      void* user_data) override;
    size_t break_lock(const char* name, bool semaphore) override;

    ~backend() override {
        {
            plugin_kit::lock_guard lock(listener_mutex);
            waker.reset();
        }
        plugin_kit::lock_guard lock(monitor_mutex);
        watcher.reset();
    }
};

// ---- shared by the modes' files -----------------------------------------------------------------

// Lease mode, exclusive holds (postgres_lease.cpp).
int acquire_lease(backend* b, const dlock_acquire_request* req, std::unique_ptr<lease_hold>& h, dlock_grant* grant);
int release_lease(backend* b, lease_hold* h);
int renew_lease(backend* b, dlock_renewal* renewals, size_t count);

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
std::optional<failure> end_lost_session(backend* b, const session& lost);

// The answer of an acquire whose connection was lost (`lost`: what broke it) when settling it on the
// server failed too (`why`) and no row of ours was found: UNKNOWN, never "held". `what` names what
// expires by itself if the lost statement committed ("row", "hold").
[[noreturn]] void fail_unsettled_acquire(const backend* b, const std::string& name, const char* lost,
                                         const std::string& why, const char* what);

// A release statement of `h`, sent at `sent`, that failed with `e` (on session `s`): the session is
// dropped if its connection broke, the hold remembers the release went unanswered, and the failure
// is thrown, UNKNOWN for an unanswered or unavailable server (the row may or may not be gone).
[[noreturn]] void fail_release(backend* b, session& s, lease_hold* h, int64_t sent, const std::exception& e);

// Lease mode, shared holds and semaphore permits (postgres_holders.cpp).
int acquire_holder_lease(backend* b, const dlock_acquire_request* req, std::unique_ptr<lease_hold>& h, dlock_grant* grant);
int release_holder_lease(backend* b, lease_hold* h);

// Advisory mode (postgres_advisory.cpp).
// lock_timeout for a wait until `deadline_ns` (ms, at least 1; "0": no limit), also the turnstile's.
std::string lock_timeout_for(int64_t deadline_ns);
int acquire_advisory(backend* b, const dlock_acquire_request* req, std::unique_ptr<advisory_hold>& h, dlock_grant* grant);
// Gives the hold's session back to the pool after a confirmed unlock, or closes it (a session whose
// state is in doubt must end, so the server drops whatever it holds).
void retire_session(backend* b, advisory_hold* h, bool reusable);
int release_advisory(backend* b, advisory_hold* h);
int renew_advisory(backend* b, dlock_renewal* renewals, size_t count);
// Advisory mode: the names come from the fence rows (one per name dlock ever granted), the holders
// from pg_locks (every session granted the name's key). The owner token and fencing token are known
// for the session that took the name last (the fence row's holder_pid); other shared holders show
// neither. Keys hashed from two names that collide show both names held.
int visit_advisory_holders(backend* b, const std::string& name_or_prefix, bool exact, const dialect::kind_filter& wanted,
                           dlock_holder_visitor visit, void* user_data);

// Setup (postgres_backend.cpp): the server's checks and dlock's tables, on the first session.
void check_server(backend& b, session& s);
void ensure_schema(backend& b, session& s);

}  // namespace dlock::sql::postgres
