// zookeeper_backend.hpp — the inside of the `zookeeper` plugin: settings, the session (one
// libzookeeper-mt handle), asynchronous requests and the waits on them, the session monitor
// (implemented in backend.cpp, setup.cpp (opening a client) and digest.cpp; the name mapping and the
// queue rules are in names.hpp).
// The C entry points and the lock recipe are in zookeeper_plugin.cpp, holders/list/break in admin.cpp.
//
// Threads and locks:
//   - libzookeeper-mt runs two threads per handle: I/O, and completions (every completion and
//     watcher below runs on the latter and must not block or call zookeeper_close).
//   - dlock_backend::mutex guards the current session, session states, the waiters, the completion
//     flags of requests, the orphan list and the watches on holds' nodes (watched_holds_). No
//     ZooKeeper API is called while it is held. Watch events arrive on the completion thread, which
//     must not wait for holds_mutex (the monitor holds it while it calls the host, whose renew may
//     wait for a completion), so what they change about holds lives under this mutex.
//   - dlock_backend::holds_mutex guards the hold registry and is held while the monitor reports hold
//     states to the host; release and renew never take it (plugin.h forbids reporting under a lock
//     those entries take); hold_destroy takes it, so no report follows hold_destroy's return.
//   - A session is shared (std::shared_ptr) by the backend and the calls in flight on it; its
//     destructor closes the handle, and is never run with `mutex` held.
#pragma once

#include <dlock/plugin.h>
#include <dlock/plugin_kit.hpp>
#include <dlock/plugin_kit/thread_safety.hpp>

#include "names.hpp"

#ifndef THREADED
#define THREADED  // libzookeeper_mt: declares the synchronous calls too
#endif
#include <zookeeper/zookeeper.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace dlock::zk {

// The plugin kit: failure and fail() (thrown inside the plugin, caught by guarded() at each entry
// point), the clock (now_ns, forever_ns, ns_per_ms, steady_time).
using namespace plugin_kit;

// ---- digest identities (digest.cpp) -----------------------------------------------------------

// The id ZooKeeper's `digest` scheme gives a client that authenticated as user:password —
// "user:" + base64(SHA-1("user:password")) — as stored in ACLs.
std::string digest_identity(const std::string& user, const std::string& password);

// ---- settings -----------------------------------------------------------------------------------

struct settings {
    std::string hosts;      // "host:port,host:port"
    std::string chroot;     // "" or "/path"
    std::string base_path = "/dlock";
    int64_t session_timeout_ms = 10'000;  // asked for; the server clamps it
    int64_t connect_timeout_ms = 5'000;
    std::string user, password;           // digest authentication when user is set
    // The shape of an exclusive holder's node (`curator_recipe`): InterProcessMutex's by default.
    node_kind exclusive_node = node_kind::exclusive;
    std::string connect_string() const { return hosts + chroot; }
};

// ---- sessions, requests, waits -------------------------------------------------------------

class session;

// A thread blocked inside the backend (an acquire, a release, the monitor). Lives on that thread's
// stack while registered in dlock_backend::waiters; every field is guarded by dlock_backend::mutex.
struct waiter {
    std::condition_variable cv;
    const session* watched_session = nullptr;  // the predecessor watch it waits for, if any
    std::string watched_path;
    bool watch_fired = false;
    int watch_event = 0;  // ZOO_DELETED_EVENT, ZOO_CHANGED_EVENT, ... once fired
    // An acquisition's lock node and queue node: the events of the watches it set on them (see
    // dlock_backend::watching_children, watching_own_node) are recorded here until its hold takes
    // them over, so that none falls between the reply that set a watch and the grant. Recorded as
    // dlock_backend::handled_ at the event: only an event handled after the reply that set a watch
    // is that watch's (one before it came from an earlier watch, our previous release's say).
    const session* queue_session = nullptr;
    std::string lock_path, own_path;
    uint64_t children_changed_at = 0;  // a watch on lock_path's children fired
    uint64_t own_event_at = 0;         // a watch on own_path fired
    int own_event = 0;                 // ... with this event type
};

// One asynchronous ZooKeeper request. Shared by the issuing thread and the completion (which may
// run after the issuer stopped waiting). Results are written before `done` is set under the
// backend's mutex.
struct call {
    int64_t sent_ns = 0;
    bool relayed = false;             // a write or a sync: answered only after the leader took part
    bool wakes_monitor = false;       // its completion wakes the session monitor
    int rc = ZSYSTEMERROR;
    std::string text;                 // create: the created path; get: the node's data
    Stat stat{};                      // create2, exists, get: the node's stat
    std::vector<std::string> names;   // get_children: the children; get_acl: "scheme:id perms"
    // guarded by dlock_backend::mutex
    bool done = false;
    uint64_t done_order = 0;  // dlock_backend::handled_ when it completed (see there)
    waiter* notify = nullptr;
};
using call_ptr = std::shared_ptr<call>;

// What a request's result code means for its outcome.
bool answered_by_server(int rc);  // the server processed (or refused) it: a confirmed contact
bool outcome_unknown(int rc);     // connection lost or timed out: it may or may not have happened
bool session_gone(int rc);        // the session expired, was closed, or failed authentication

// What tells a hold that its queue node was deleted by someone else. A node's deletion lets the
// next client in at once, so the holder must hear of it from a watch, not from its session.
enum class node_watch {
    children,  // the watch that the acquire's listing left on the lock node's children, not fired
               // since: it fires on any child's deletion, ours included (free: no extra request)
    own,       // a data watch on the node itself (set while waiting in the queue, or by the monitor)
    needed,    // neither (the children watch fired, for a newcomer most likely): the monitor sets one
    setting,   // the monitor's request setting it is in flight
};

}  // namespace dlock::zk

// A hold: one node of ours that was lowest in its lock's queue.
struct dlock_hold {
    std::string name;        // the lock's name, for messages
    std::string lock_path;   // full path of the lock node (the queue node's parent)
    std::string node_path;   // full path of our queue node (relative to the chroot)
    uint64_t generation = 0; // the session it lives in
    uint64_t fence = 0;      // its czxid
    void* host_lease = nullptr;
    // Send time of an earlier release attempt whose outcome is unknown (connection lost), sent while
    // the session's bound still held; 0 when there was none. Its delete may have happened, so a
    // retry that finds the node gone has released it.
    int64_t release_in_doubt_ns = 0;
    bool settled = false;    // deleted by a confirmed release, or known gone
    // guarded by dlock_backend::mutex
    dlock::zk::node_watch watch = dlock::zk::node_watch::needed;
    bool node_deleted = false;  // a watch saw our node deleted (not by our release)
    bool deletion_reported = false;
    bool releasing = false;     // our own delete is on its way: its watch events are not a loss
};

struct dlock_backend {
    explicit dlock_backend(dlock::zk::settings s, const dlock_plugin_host* h);
    ~dlock_backend();  // stops the monitor and closes the session (its nodes vanish with it)
    dlock_backend(const dlock_backend&) = delete;
    dlock_backend& operator=(const dlock_backend&) = delete;

    // Opens the first session and waits until it is connected; checks the chroot, creates the base
    // path, checks its ACL; starts the monitor. Throws failure.
    void start();

    // The current session once it is connected, waiting until `until_ns`. Throws CANCELLED when
    // `interruptible` and the client closes, UNAVAILABLE when not connected in time, CONFIG when
    // authentication failed for good.
    std::shared_ptr<dlock::zk::session> connected_session(dlock::zk::waiter& w, int64_t until_ns, bool interruptible);
    // The session of `generation` while it is alive (not expired); null once it ended.
    std::shared_ptr<dlock::zk::session> session_of(uint64_t generation);
    bool alive(const dlock::zk::session& s);

    // Requests (asynchronous; a call whose API call failed at once is returned done).
    dlock::zk::call_ptr create(dlock::zk::session& s, const std::string& path, int mode, const std::string& data = "");
    // Reads a node (its data in `text`, its stat) without leaving a watch.
    dlock::zk::call_ptr get(dlock::zk::session& s, const std::string& path);
    dlock::zk::call_ptr set_data(dlock::zk::session& s, const std::string& path, const std::string& data);
    // With `watch`, leaves a watch on the node's children (fires once, on any child created or deleted).
    dlock::zk::call_ptr children(dlock::zk::session& s, const std::string& path, bool watch = false);
    dlock::zk::call_ptr remove(dlock::zk::session& s, const std::string& path);
    // A delete through the client's synchronous call: its reply reaches the calling thread straight
    // from the I/O thread, one thread hop fewer than an asynchronous completion (release's hot
    // path). Not interruptible: bounded by the client library, which fails requests within 2/3 of
    // the session timeout when the connection is lost. Returns the result code.
    int remove_now(dlock::zk::session& s, const std::string& path);
    dlock::zk::call_ptr exists(dlock::zk::session& s, const std::string& path);
    // Reads a node and leaves a watch on it (not on a missing node: get, unlike exists, leaves
    // none), which wakes the waiter that registered `path` with watch().
    dlock::zk::call_ptr get_and_watch(dlock::zk::session& s, const std::string& path);
    dlock::zk::call_ptr get_acl(dlock::zk::session& s, const std::string& path);
    // A `sync`: answered by the server only after the leader answered it (a relayed confirmation).
    dlock::zk::call_ptr sync(dlock::zk::session& s);
    // The ensemble's configuration (/zookeeper/config); its text in names[0].
    dlock::zk::call_ptr get_config(dlock::zk::session& s);

    // Waits until every call completed: true, or false when `until_ns` passed first. Throws
    // CANCELLED when `interruptible` and the client closes.
    bool await(dlock::zk::waiter& w, std::initializer_list<dlock::zk::call*> calls, int64_t until_ns, bool interruptible);
    // The predecessor wait: register before the watch is set, then wait_watch until it fires (returns
    // the event type), the session ends or `until_ns` passes (returns 0). Throws CANCELLED on interrupt.
    // Also returns 0, at once, when the watch on the waiter's own node set by the reply handled at
    // `own_since` fires (own_node_event).
    void watch(dlock::zk::waiter& w, const dlock::zk::session& s, const std::string& path);
    int wait_watch(dlock::zk::waiter& w, const dlock::zk::session& s, int64_t until_ns, uint64_t own_since);
    void unwatch(dlock::zk::waiter& w);
    // An acquisition is about to list `lock_path` with a children watch, or to set a watch on its own
    // node: the waiter records the watch's events (compare with the reply's done_order).
    void watching_children(dlock::zk::waiter& w, const dlock::zk::session& s, const std::string& lock_path);
    void watching_own_node(dlock::zk::waiter& w, const dlock::zk::session& s, const std::string& own_path);
    // The event type that fired the own-node watch set by the reply handled at `since`, or 0.
    int own_node_event(dlock::zk::waiter& w, uint64_t since);

    // A node of ours that an acquire or a hold could not delete (connection lost): the monitor
    // deletes it once the session is connected again, or forgets it when the session ended. With an
    // empty `node_path`, the acquire does not know whether its create happened: the monitor looks
    // for children of `lock_path` carrying `guid`.
    void add_orphan(uint64_t generation, std::string lock_path, std::string node_path, std::string guid);

    // Registers a granted hold. Which watch covers its node comes from what the acquisition `w` set
    // — a children watch by the listing whose reply was handled at `children_since`, a watch on
    // h->node_path by the reply handled at `own_since` (0: none) — less what fired since, read
    // atomically with the hold's registration.
    void register_hold(dlock_hold* h, const dlock::zk::waiter& w, uint64_t children_since, uint64_t own_since);
    void forget_hold(dlock_hold* h);
    // A release is about to delete the hold's node: the watch events that delete causes are ours.
    // Cleared again when the delete certainly did not happen.
    void set_releasing(dlock_hold* h, bool releasing);
    // An acquire starts or stops waiting for its predecessor (the monitor keeps the session's
    // confirmed contact fresh meanwhile, as for holds).
    void waiting(int delta);

    // Registers a waiting thread, so that interrupt() and session events reach it.
    void enlist(dlock::zk::waiter& w);
    void dismiss(dlock::zk::waiter& w);

    void interrupt();
    void log(int level, const std::string& message) const;
    // "zookeeper <server>" naming the server the session talks to (or the connect string).
    std::string where(const dlock::zk::session* s) const;
    const dlock::zk::settings& config() const { return config_; }
    // Whether the servers form an ensemble whose followers relay their clients' activity to the
    // leader (set once by start(); see session::valid_until_ns). True when it cannot be told.
    bool relayed() const { return relayed_.load(); }
    // How often the monitor confirms the session while locks are held or awaited (always, on an
    // ensemble): a quarter of the session timeout, an eighth on an ensemble.
    int64_t heartbeat_ns(const dlock::zk::session& s) const;
    const ACL_vector* acl() { return acl_.count ? &acl_ : &ZOO_OPEN_ACL_UNSAFE; }
    std::atomic<bool> interrupted{false};

    // Called by libzookeeper's completion thread.
    void on_event(dlock::zk::session& s, zhandle_t* zh, int type, int state, const char* path);
    void finish(const dlock::zk::call_ptr& c, dlock::zk::session* via, int rc);

private:
    friend class dlock::zk::session;
    struct orphan {
        uint64_t generation;
        std::string lock_path, node_path, guid;
    };
    // A watch the monitor is setting on a hold's node (the hold is found again by pointer and path).
    struct node_watch_request {
        dlock_hold* hold;
        std::string node_path;
        dlock::zk::call_ptr call;
    };
    template <typename Pred>
    bool wait_until(dlock::plugin_kit::unique_lock& lock, dlock::zk::waiter& w, int64_t until_ns, bool interruptible, Pred done)
        DLOCK_REQUIRES(mutex);
    std::shared_ptr<dlock::zk::session> open_session();
    void check_base_path(dlock::zk::waiter& w, const std::shared_ptr<dlock::zk::session>& s);
    void detect_ensemble(dlock::zk::waiter& w, const std::shared_ptr<dlock::zk::session>& s);
    void monitor_loop();
    void tend_orphans(dlock::zk::waiter& w, const std::shared_ptr<dlock::zk::session>& s);
    void tend_node_watches(const std::shared_ptr<dlock::zk::session>& s, bool connected, std::vector<node_watch_request>& requests);
    void wake_monitor_locked() DLOCK_REQUIRES(mutex);
    bool probe(dlock::zk::waiter& w, const std::shared_ptr<dlock::zk::session>& s);
    size_t holds_of(uint64_t generation);
    void report(uint64_t generation, int state, int64_t valid_until_ns);
    void kick_monitor_locked() DLOCK_REQUIRES(mutex);

    dlock::zk::settings config_;
    dlock_plugin_host host_{};
    // The digest ACL (ALL for our identity, READ for anyone) when authenticating.
    std::string acl_identity_;
    ::ACL acl_entries_[2]{};
    ACL_vector acl_{0, nullptr};

    // What else this mutex guards (fields of sessions, waiters and calls, see the top of this
    // file) belongs to other objects, which the annotations cannot name.
    mutable dlock::plugin_kit::mutex mutex;
    std::shared_ptr<dlock::zk::session> current_ DLOCK_GUARDED_BY(mutex);
    uint64_t last_generation_ DLOCK_GUARDED_BY(mutex) = 0;
    std::set<dlock::zk::waiter*> waiters_ DLOCK_GUARDED_BY(mutex);
    // Bumped on each session event, new orphan and first hold (wakes the monitor).
    uint64_t events_ DLOCK_GUARDED_BY(mutex) = 0;
    dlock::zk::waiter* monitor_waiter_ DLOCK_GUARDED_BY(mutex) = nullptr;
    bool monitor_timer_armed_ DLOCK_GUARDED_BY(mutex) = false;  // the monitor will wake by itself for the heartbeat
    size_t waiting_acquires_ DLOCK_GUARDED_BY(mutex) = 0;
    bool auth_failed_ DLOCK_GUARDED_BY(mutex) = false;
    std::atomic<bool> relayed_{false};
    bool stopping_ DLOCK_GUARDED_BY(mutex) = false;
    std::vector<orphan> orphans_ DLOCK_GUARDED_BY(mutex);
    std::thread monitor_;

    std::set<dlock_hold*> watched_holds_ DLOCK_GUARDED_BY(mutex);  // every registered hold, for watch events
    // Replies and watch events handled so far, in the order the completion thread handled them,
    // which is the order they arrived in (the client library queues both in one list).
    uint64_t handled_ DLOCK_GUARDED_BY(mutex) = 0;

    dlock::plugin_kit::mutex holds_mutex;
    std::set<dlock_hold*> holds_ DLOCK_GUARDED_BY(holds_mutex);
};

namespace dlock::zk {

// A waiter registered with its backend for the scope of one entry call.
struct scoped_waiter : waiter {
    explicit scoped_waiter(dlock_backend& b) : backend(b) { backend.enlist(*this); }
    ~scoped_waiter() { backend.dismiss(*this); }
    scoped_waiter(const scoped_waiter&) = delete;
    scoped_waiter& operator=(const scoped_waiter&) = delete;
    dlock_backend& backend;
};

// One ZooKeeper session: a libzookeeper-mt handle and what dlock knows about it.
class session {
public:
    session(dlock_backend& owner, uint64_t generation);
    ~session();  // zookeeper_close: the server ends the session and deletes its ephemeral nodes
    session(const session&) = delete;
    session& operator=(const session&) = delete;

    // zookeeper_init2 (returns at once; the connection is made in the background) and digest auth.
    void open();

    zhandle_t* handle() const { return zh_; }
    dlock_backend& owner() const { return owner_; }
    const uint64_t generation;

    // The negotiated session timeout (the asked one until connected).
    int64_t timeout_ms() const { return timeout_ms_.load(); }
    // Records that a request sent at `sent_ns` was answered by the server; `relayed`: the leader
    // took part in the answer (a write or a sync).
    void confirm(int64_t sent_ns, bool relayed);
    // Send time of the last answered request that counts for the session's bound: any request on a
    // standalone server, a relayed one on an ensemble.
    int64_t confirmed_send_ns() const;
    // The client's own bound on the session, less a drift allowance of timeout/100 + 2 ms for the
    // server's clock rate:
    //  - standalone: the send time of the last answered request + the session timeout (the server
    //    renews a session on every packet it receives);
    //  - ensemble: the leader alone expires sessions, and hears of a session held through a follower
    //    only when that follower answers its ping (every tickTime/2) with the sessions it saw since
    //    the last one. A follower cut from the leader keeps answering reads from its own copy for up
    //    to syncLimit x tickTime, and even a relayed answer does not tell whether the follower's next
    //    ping reply (which would carry the request) reached the leader. So the bound starts from the
    //    anchor: the send time of a relayed request followed by another relayed request sent at
    //    least a quarter of the session timeout later and answered — the follower's link to the
    //    leader was up across a whole ping interval after the first (tickTime/2 <= timeout/4, as the
    //    server grants at least 2 x tickTime), so the ping reply carrying it reached the leader. The
    //    first anchor is the session's creation, which the leader itself records.
    int64_t valid_until_ns() const;
    int64_t id() const { return id_.load(); }

    // guarded by owner's mutex
    int state = ZOO_NOTCONNECTED_STATE;
    bool ever_connected = false;
    bool lost_reported = false;

private:
    friend struct ::dlock_backend;
    dlock_backend& owner_;
    zhandle_t* zh_ = nullptr;
    std::atomic<int64_t> timeout_ms_;
    std::atomic<int64_t> confirmed_send_ns_{0};  // any answered request
    std::atomic<int64_t> relayed_send_ns_{0};    // relayed answered requests
    std::atomic<int64_t> anchor_ns_{0};
    dlock::plugin_kit::mutex candidates_mutex_;
    std::vector<int64_t> candidates_ DLOCK_GUARDED_BY(candidates_mutex_);  // relayed send times not yet anchored, ascending
    std::atomic<int64_t> id_{0};
};

// ---- holders, list, break (admin.cpp) ---------------------------------------------------------

int zk_holders(dlock_backend* b, const char* name, int semaphore, dlock_holder_visitor visit, void* user_data, dlock_plugin_error* error);
int zk_list(dlock_backend* b, const char* prefix, dlock_holder_visitor visit, void* user_data, dlock_plugin_error* error);
int zk_break(dlock_backend* b, const char* name, int semaphore, size_t* out_broken, dlock_plugin_error* error);

}  // namespace dlock::zk
