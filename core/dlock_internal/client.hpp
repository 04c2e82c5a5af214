// client.hpp — the core behind the C ABI: a client (one backend instance), its holds, the lease
// handles given to the application, and the lease keeper thread.
//
// Ownership: a dlock_client handle owns a shared client_core; every dlock_lease owns a share too,
// so a lease handle stays usable (as RELEASED) after its client is closed. The core owns the
// plugin module (keeping the shared object loaded) and the backend.
//
// Holds and leases: a hold is one acquisition in the backend. A lease is the application's handle
// on a hold; reentrant acquisitions of one name share a hold, each with its own lease.
//
// Threads: the keeper renews and expires holds; a separate dispatcher runs the lost callbacks, so a
// callback that blocks (say, re-acquiring with a wait) never delays a renewal (both in keeper.cpp).
//
// Locking: `mutex_` guards the client's fields declared DLOCK_GUARDED_BY(mutex_) and the fields of
// holds and leases marked (m) (the analysis cannot name the mutex of the client a hold belongs to).
// It is never held across a plugin call or a user callback. A hold being released or renewed is
// marked `busy`; others wait on `changed_`. Time is read and waited for through `clock_`
// (dlock_internal/clock.hpp), which a test may simulate.
#pragma once

#include "dlock_internal/clock.hpp"
#include "dlock_internal/config.hpp"
#include "dlock_internal/loader.hpp"
#include "dlock_internal/metrics.hpp"
#include "dlock_internal/names.hpp"

#include <dlock/plugin.h>
#include <dlock/plugin_kit/thread_safety.hpp>

#include <boost/container/small_vector.hpp>

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

struct dlock_lease;

// A cancel handle (dlock.h): set once, read by the acquires that were given it.
struct dlock_cancel_token {
    std::atomic<bool> cancelled{false};
};

namespace dlock::core {

struct hold {
    explicit hold(std::string_view name) : name(name) {}

    std::string name;
    detail::owner_token owner;
    uint64_t fence = 0;
    int64_t ttl_ms = 0;
    bool renew = false;
    bool reentrant = false;
    dlock_hold* plugin_hold = nullptr;  // (m) null once destroyed
    int64_t valid_until_ns = 0;          // (m)
    int64_t next_renew_ns = 0;           // (m)
    dlock_lease_state state = DLOCK_LEASE_HELD;  // (m)
    bool busy = false;                   // (m) a plugin call on it is in progress
    // (m) lease handles not yet released: one but for reentrant acquisitions, kept inline so that
    // an acquisition allocates no list.
    boost::container::small_vector<dlock_lease*, 1> leases;
    size_t slot = 0;                     // (m) index in client_core::holds_ while live
    bool counted_held = false;           // (m) handed out and counted in the leases-held gauge
    // (m) a release was sent while the hold was still valid and its outcome is unknown: a retry after
    // valid_until may still answer RELEASED (our own first attempt may be what removed the lock).
    bool release_sent_while_valid = false;
};

// An acquire's options resolved against the client's policy for the name and checked against the
// backend's capabilities: what every attempt of the acquisition asks for.
struct resolved_acquire {
    std::string_view name;
    int64_t wait_ms = 0;
    int64_t ttl_ms = 0;
    bool renew = false;
    bool fair = false;
    bool reentrant = false;
    uint32_t kind = DLOCK_HOLD_EXCLUSIVE;
    uint32_t permits = 0;
    dlock_lost_callback on_lost = nullptr;
    void* on_lost_data = nullptr;
    const dlock_cancel_token* cancel = nullptr;

    bool cancelled() const { return cancel && cancel->cancelled.load(); }
};

class client_core : public std::enable_shared_from_this<client_core> {
public:
    // Loads the plugin and creates the backend. Throws detail::error.
    static std::shared_ptr<client_core> open(config::client_config config);
    ~client_core();

    const std::string& backend_name() const { return module_->name; }
    uint64_t capabilities() const { return capabilities_; }

    dlock_lease* acquire(const char* name, const dlock_acquire_options* options);  // throws; nullptr never
    int release(dlock_lease* lease);                // a dlock_status; sets the error text
    int renew(dlock_lease* lease);
    void on_lost(dlock_lease* lease, dlock_lost_callback callback, void* user_data);
    dlock_lease_state state_of(const dlock_lease* lease);
    int64_t valid_until_of(const dlock_lease* lease);
    void destroy(dlock_lease* lease);
    void inspect(const char* name, dlock_lock_info* info);  // throws
    // Plugin ABI version 2 pass-throughs (dlock.h's dlock_holders, dlock_list, dlock_break); throw.
    void holders(const char* name, bool semaphore, dlock_holder_visitor visit, void* user_data);
    void list(const char* prefix, dlock_holder_visitor visit, void* user_data);
    size_t break_lock(const char* name, bool semaphore);
    void close();

    // Called by the plugin through dlock_plugin_host.
    void hold_state_changed(hold* h, int state, int64_t valid_until_ns);
    void log(int level, const char* message);

private:
    client_core(config::client_config config, std::shared_ptr<const loader::module> module);
    // acquire() without its metrics.
    dlock_lease* acquire_lease(const char* name, const dlock_acquire_options* options);
    // The caller's options (their struct_size says which fields it has) over the policy for `name`.
    resolved_acquire resolve_request(const char* name, const dlock_acquire_options* options) const;
    // A new lease on the live reentrant hold of the request's name, or null when there is none to
    // share. Counts the acquire out (clears `in_flight`) when it returns a lease.
    dlock_lease* reenter(const resolved_acquire& r, bool& in_flight);
    // Acquires a new hold in the backend, attempt after attempt until a grant may be handed out,
    // the wait ends or the token cancels it. Counts the acquire out (clears `in_flight`) on success.
    dlock_lease* acquire_new_hold(const resolved_acquire& r, bool& in_flight);
    // One plugin acquire for `h`; the wait is cut to one cancel slice when the request has a token.
    int call_plugin_acquire(const resolved_acquire& r, hold& h, int64_t deadline_ns, int64_t& sent_deadline_ns,
                            dlock_hold*& plugin_hold, dlock_grant& grant, dlock_plugin_error& err);
    // Why a grant that arrived must not be handed out (lost already, or its validity over), or an
    // empty string when it may.
    std::string refusal_of(hold& h) DLOCK_REQUIRES(mutex_);
    dlock_lease* new_lease(std::shared_ptr<hold> h, const resolved_acquire& r) DLOCK_REQUIRES(mutex_);
    // Counts an acquire out of calls_in_flight_ (it makes no more plugin calls).
    void count_out_acquire(bool& in_flight) DLOCK_REQUIRES(mutex_);
    // Takes a hold out of the leases-held gauge once (released, lost or given up).
    void stop_counting_held(hold& h) DLOCK_REQUIRES(mutex_);
    // The lease keeper (keeper.cpp): renews due holds and marks expired ones LOST.
    void keeper_loop();
    // Runs the lost callbacks (keeper.cpp).
    void dispatcher_loop();
    // Gives back a grant that acquire must not hand out (lost or expired on arrival): releases it
    // in the backend and destroys the plugin's hold. Best effort; never throws.
    void give_back_grant(dlock_hold* plugin_hold, const std::string& name);
    // Marks a hold LOST and queues the callbacks of its leases.
    void mark_lost(hold& h) DLOCK_REQUIRES(mutex_);
    // Marks a HELD or SUSPECT hold LOST once its validity is over, whether or not the keeper has
    // woken yet, and tells whether the hold is LOST. Every decision about a hold (its state, what
    // release answers, a manual renew, a callback registered late) is taken from validity: from
    // valid_until on another client may hold the lock.
    bool lost_by_validity(hold& h) DLOCK_REQUIRES(mutex_);
    // Wakes the keeper when `h` is due (a renewal or its validity's end) before the keeper would wake.
    void wake_keeper_if_due_sooner(const hold& h) DLOCK_REQUIRES(mutex_);
    // Applies one renewal's result to a hold.
    void apply_renewal(hold& h, int status, int64_t valid_until_ns, int64_t now_ns) DLOCK_REQUIRES(mutex_);
    // Releases a hold in the backend (waits until it is not busy). `lock` is on mutex_, let go of
    // for the plugin calls and taken again before this returns. With
    // `destroy_later`, a plugin hold that is done with is not destroyed but stored there, for the
    // caller to pass to destroy_plugin_hold once it has let go of mutex_ (saves taking it again).
    int release_hold(plugin_kit::unique_lock& lock, const std::shared_ptr<hold>& h, std::string& why,
                     dlock_hold** destroy_later = nullptr) DLOCK_REQUIRES(mutex_);
    void destroy_plugin_hold(dlock_hold* plugin_hold) DLOCK_EXCLUDES(mutex_);
    // Drops a hold whose release was not confirmed (release_hold answered UNKNOWN): our record of it
    // and the plugin's hold go, it counts as lost; a TTL backend lets it expire, a session-bound one
    // (file) releases it with the plugin's hold. Lets go of mutex_ meanwhile.
    void abandon_hold(const std::shared_ptr<hold>& h) DLOCK_REQUIRES(mutex_);
    void remember_hold(const std::shared_ptr<hold>& h) DLOCK_REQUIRES(mutex_);
    void forget_hold(const std::shared_ptr<hold>& h) DLOCK_REQUIRES(mutex_);
    // An inspect, holders, list or break counts itself in flight as an acquire does, so that close()
    // never destroys the backend under it: enter_call throws DLOCK_CANCELLED once closed, leave_call
    // counts the call out after its last plugin call.
    void enter_call(const char* what) DLOCK_EXCLUDES(mutex_);
    void leave_call() DLOCK_EXCLUDES(mutex_);
    [[noreturn]] void fail_plugin_call(int status, const dlock_plugin_error& error, const char* what);

    config::client_config config_;
    std::shared_ptr<const loader::module> module_;
    const dlock_plugin* plugin_;
    dlock_plugin_host host_{};
    dlock_backend* backend_ = nullptr;
    uint64_t capabilities_ = 0;
    std::unique_ptr<client_metrics> metrics_;  // null when the config has no `metrics`
    // Every time the core reads, every wait with a deadline (the real clock but in tests).
    const std::shared_ptr<clock> clock_;

    plugin_kit::mutex mutex_;
    std::condition_variable changed_;   // holds, in-flight count, callbacks
    std::condition_variable keeper_wake_;  // notified through clock_
    std::condition_variable dispatcher_wake_;              // a callback was queued, or stop
    // Set under mutex_; read without it where an acquire counts itself in (see acquire_lease).
    std::atomic<bool> closed_{false};
    bool stop_keeper_ DLOCK_GUARDED_BY(mutex_) = false;
    bool stop_dispatcher_ DLOCK_GUARDED_BY(mutex_) = false;  // run what is queued, then exit
    // When the sleeping keeper will wake by itself (forever: no deadline; INT64_MIN: it is awake and
    // will rescan every hold). A new hold wakes it only if the hold is due earlier.
    int64_t keeper_wakes_at_ns_ DLOCK_GUARDED_BY(mutex_) = INT64_MIN;
    // Acquires, inspects, holders, lists and breaks between their check of closed_ and their last
    // plugin call. Incremented without mutex_, decremented under it (close() waits on changed_ for zero).
    std::atomic<int> calls_in_flight_{0};
    // Live holds, unordered; each knows its slot, so removal is a swap with the last.
    std::vector<std::shared_ptr<hold>> holds_ DLOCK_GUARDED_BY(mutex_);
    std::map<std::string, std::shared_ptr<hold>> reentrant_ DLOCK_GUARDED_BY(mutex_);  // re-enterable holds by name
    std::vector<dlock_lease*> lost_queue_ DLOCK_GUARDED_BY(mutex_);  // leases whose callback is due
    // The lease whose callback the dispatcher is running; reset to null if that lease is destroyed
    // from inside its own callback, so the dispatcher no longer touches it.
    dlock_lease* running_callback_ DLOCK_GUARDED_BY(mutex_) = nullptr;
    std::thread keeper_;
    std::thread dispatcher_;
    // The dispatcher's id, set before any lease exists and never changed: read without the mutex
    // while close() may be joining `dispatcher_`.
    std::thread::id dispatcher_id_;
};

}  // namespace dlock::core

// The application's handle. Fields marked (m) are guarded by the client's mutex.
struct dlock_lease {
    std::shared_ptr<dlock::core::client_core> client;
    std::shared_ptr<dlock::core::hold> hold;  // its name, owner and fence are this lease's
    uint64_t fence = 0;
    // This handle was released. Written under the client's mutex; read without it by destroy().
    std::atomic<bool> released{false};
    int release_status = DLOCK_OK;             // (m) what release returned the first time
    dlock_lost_callback on_lost = nullptr;     // (m)
    void* on_lost_data = nullptr;              // (m)
    bool lost_notified = false;                // (m) the callback was queued or called
    // Queued or running callbacks. Changed under the client's mutex; read without it by destroy().
    std::atomic<int> callbacks_running{0};
};
