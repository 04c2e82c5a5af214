// etcd_backend.hpp — the state of one etcd client (dlock_backend) and of one acquisition, shared by
// the files of the plugin:
//   etcd_plugin.cpp  the plugin entry points: options, create/destroy, the C table, negotiation
//   lock_queue.cpp   the acquisition: enqueue, wait for the predecessor, become the holder, abandon
//   holds.cpp        release, hold_destroy, renew, inspect, and the session events that end holds
//                    and waits
//   keys.cpp         what the others build on: directories of names, key suffixes, retire_key,
//                    push (hold states to the host), the own-key watch, the permit's touch
//                    (keys.hpp: request building blocks; names.hpp: name escaping, a library of its own)
//   janitor.cpp      the janitor thread: expired holds, keys left behind, own-key watches
//   admin.cpp        holders, list, break_lock, and forgetting an idle semaphore's limit
// Calls between them go one way: lock_queue → janitor → keys, holds → admin → keys.
//
// The `etcd` backend: etcd v3 over gRPC, with the algorithm of etcd's own concurrency mutex.
//
// Keys. A lock name is escaped (`%`, `/` and control bytes become %XX) so it holds no `/`, and its
// queue is the directory `<key_prefix><escaped name>/`: a name's directory never covers another
// name's keys (`a/` vs `a%2Fb/`). Each acquisition puts its own key
// `<dir><session lease hex>-<suffix hex>`, attached to the client's session lease, with the owner
// token as value. etcd's mutex uses `<dir><lease hex>`; the suffix makes two acquisitions of one
// name in one client (two threads, or a non-reentrant second acquire) contend like two processes
// instead of sharing one key. A suffix is reused once its key's deletion is confirmed and nothing
// about that key is still in doubt (see take_suffix): etcd keeps a deleted key in its index until a
// compaction, and every enqueue's read of the directory walks those keys, so a key per acquisition
// would make each acquire slower with every acquisition since the last compaction.
//
// Acquire. One Txn: if the key's create_revision is 0, put it and read the two newest keys of the
// directory by create_revision (ours and the one just before it); else read it (only a retried
// request finds it existing, and so learns its revision). The key with the lowest create_revision in
// the directory holds the lock: with no key before ours, we hold it. Otherwise we watch the key just
// before ours for its deletion, and when it goes, one read-only Txn checks that our key still
// exists and finds the next key before ours, if any. Each waiter watches one other key: a release
// wakes one waiter. The watch starts at the server's current revision, so that etcd sends its event
// as it commits (a watch from an earlier revision waits for etcd's 100 ms catch-up loop); when that
// revision is after the read that found the predecessor, the same read-only Txn, made once the
// watch exists, covers the revisions in between (see wait_in_queue).
// Try-lock, timeouts, cancellation and any failure after the put delete our key — with a tombstone
// that stops a put still on its way when an attempt of the put got no answer (see retire_key).
//
// Fencing token: our key's create_revision (revisions only grow, and holders follow create order).
// Release: a Txn deleting our key only if its create_revision is still ours, so a retried release
// never deletes a later holder's key.
//
// Lease state: the session lease is kept alive on one keepalive stream (session.hpp). Keepalive
// failing → SUSPECT; the deadline passing, or the server saying the lease is gone → LOST; the
// holder watches its own key and reports LOST when it disappears (lease revoked, key deleted by an
// operator). A waiter watches its own key from the start (its wait ends with an error if the key
// goes); a holder that never waited gets that watch from the janitor thread after min(TTL/10,
// 100 ms), from its key's creation revision, so a short critical section costs no watch and a
// deletion in between is still reported. `renew` reads the batch's keys in one Txn (a key gone is
// LOST at that renewal: a break is seen by the next renewal at the latest) and reports the lease's
// deadline, confirmed by a fresh keepalive on the stream when the last one is older than a quarter
// of the TTL. A hold the keeper
// does not renew (renew: false) has its key deleted by the janitor thread when its validity ends,
// since the session lease outlives it.
//
// Shared holds. A shared acquisition's key is `<dir>shared-<lease hex>-<suffix hex>` in the
// lock's own directory, so the exclusive path above is unchanged: a shared key before an
// exclusive one is a key before it, and the exclusive waits. Every other key of the directory
// (`<lease hex>…`, etcd's mutex's keys too) is exclusive, and all of them sort before `<dir>s`: a
// shared acquisition holds when no key of [dir, dir + "s") has a lower create_revision, and
// otherwise waits for the deletion of the newest such key before its own (then reads again).
// Order is FIFO by create_revision: a waiting exclusive acquirer stops every later shared one, so
// writers do not starve. A release wakes the one exclusive waiter behind it, or the shared waiters
// whose newest earlier exclusive key it was (all of whom then hold).
//
// Semaphores. The permits of semaphore `name` are keys `<key_prefix>%semaphores/<escaped
// name>/<lease hex>-<suffix hex>` (no lock directory holds them: `%` then a lowercase letter);
// the N keys with the lowest create_revision hold. N is stored in `<key_prefix>%semaphores/<escaped
// name>` (no lease): the enqueue Txn puts our key only if that value equals our N (and puts it
// again, same value, which moves its mod_revision); when the directory holds no key at all (no
// holder, no waiter), a Txn nested in the same request's failure branch stores our N, over any
// value stored, and puts our key (one round trip either way): a stored N binds only while a key
// is left. A different value with a key left is refused (INVALID_ARGUMENT); no value with a key
// left (the limit deleted by hand) is refused too (BACKEND): those keys' N is unknown, and a limit
// is stored only into an empty directory. A permit's release Txn also reads whether the directory
// is left empty and the limit's mod_revision; if empty, one more Txn deletes the limit
// if its mod_revision is still that one: no enqueue came in between.
// Waking permit waiters without a herd. A key holds when fewer than N keys are before it. Holders
// go in any order, so no single holder's key tells a waiter its turn came; instead:
//   - the first waiter (exactly N keys before its own) watches the whole directory for a deletion,
//     then reads again;
//   - a later waiter (more than N before it) watches the key just before its own, P, for a
//     deletion or a put. Its count is P's count + 1, so it can reach N only when P leaves (a
//     deletion) or P is admitted (P's count < N); a waiter that is admitted after waiting puts
//     its key again (touch_own_key: same value and lease, so the same create_revision), which
//     wakes the one behind it, which reads again and becomes the first waiter (or holds, and
//     touches in turn).
// A release thus wakes the first waiter, and each admission the next one: no herd. (Watching the
// key N places ahead instead is not enough: with N = 2 and keys A B C W, W watches B; A goes and
// C is admitted; C goes, and W, with only B before it, should hold, but B is still there.) If the
// touch fails (it is tried within the acquire's deadline), the janitor repeats it without that
// deadline until it is done or the key is no longer ours.
// Fencing token: the key's create_revision, like a lock's.
//
// Every request is idempotent (a key is used by one acquisition at a time and reused only after its
// deletion was answered with no attempt about it in doubt; deletes are revision-guarded, or of a key
// whose suffix is never reused), so a request that got no answer is repeated on the next member.
#pragma once

#include "connection.hpp"
#include "session.hpp"
#include "watcher.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dlock::etcd {

// One acquisition of a lock: queued under the name's directory, then held.
struct acquisition {
    std::shared_ptr<session> s;
    std::string name, dir, key, owner;
    uint32_t kind = DLOCK_HOLD_EXCLUSIVE;  // dlock_hold_kind
    uint32_t permits = 0;                  // PERMIT: the semaphore's limit N
    // The keys [dir, blockers_end) created before ours keep us waiting: every key of the directory
    // for an exclusive hold and a permit, the exclusive (writer) keys only for a shared hold.
    std::string blockers_end;
    std::string limit_key;  // PERMIT: the key that stores N
    std::string tombstone;  // the key a clean-up puts when a put of `key` may still land (see retire_key)
    std::string stem;       // `key` without its suffix: `<dir>[shared-]<lease hex>`
    uint64_t suffix = 0;
    void* host_lease = nullptr;
    int64_t revision = 0;  // our key's create_revision: the fencing token
    // An attempt of the enqueue Txn got no answer: a put of `key` may have happened, or may still
    // happen on a member that carries it out late. Set before the key can be cleaned up.
    bool put_in_doubt = false;
    // The enqueue Txn was refused as unavailable by every member (no leader yet, a request the
    // server timed out while its disk stalled, every member unreachable): nothing is queued, and
    // an acquire with time left may try again.
    bool enqueue_unavailable = false;
    // Where the acquire's own calls end: its deadline, or one request_timeout for a try-once; and
    // what a call out of time throws (DLOCK_TIMEOUT, or DLOCK_UNAVAILABLE for a try-once).
    int64_t calls_end_ns = forever_ns;
    int out_of_time_status = DLOCK_TIMEOUT;

    // Signals to the waiting thread.
    dlock::plugin_kit::mutex m;
    std::condition_variable cv;
    // The watches on the key before ours (wait_in_queue): signals of watches on an earlier
    // predecessor are ignored, and the created and progress answers count for the newest watch only.
    uint64_t predecessor_number DLOCK_GUARDED_BY(m) = 0;
    uint64_t newest_watch DLOCK_GUARDED_BY(m) = 0;
    bool watch_created DLOCK_GUARDED_BY(m) = false;
    int64_t watch_created_at DLOCK_GUARDED_BY(m) = 0;   // the newest watch delivers every deletion after this revision
    bool watch_progress DLOCK_GUARDED_BY(m) = false;
    int64_t watch_progress_at DLOCK_GUARDED_BY(m) = 0;  // the server's revision after the newest watch was registered
    bool predecessor_gone DLOCK_GUARDED_BY(m) = false;
    bool predecessor_reset DLOCK_GUARDED_BY(m) = false;
    bool own_gone DLOCK_GUARDED_BY(m) = false;
    bool own_reset DLOCK_GUARDED_BY(m) = false;
    bool session_ended DLOCK_GUARDED_BY(m) = false;
    int session_status DLOCK_GUARDED_BY(m) = DLOCK_OK;
    std::string session_reason DLOCK_GUARDED_BY(m);
    bool cancelled DLOCK_GUARDED_BY(m) = false;

    // Hold phase (guarded by the backend's state_mutex: another object's, which the annotations
    // cannot name here).
    int64_t own_watch = 0;    // watch on our own key; 0: none
    int64_t own_watch_due_ns = 0;  // when the janitor gives a holder its own-key watch; 0: not needed
    bool held = false;
    bool registered = false;  // the host may be told about it (until hold_destroy)
    bool releasing = false;   // our release is deleting the key: its deletion is no loss
    bool gone = false;        // the key is gone or no longer ours: LOST
    int64_t release_unanswered_ns = 0;  // send time of the first release attempt that got no answer; 0: none
    bool released_unanswered = false;   // the key went while such an attempt was in doubt: released by it
    int64_t valid_until_ns = 0;  // what the host was last told (grant or renew)

    bool signalled() const DLOCK_REQUIRES(m) {
        return predecessor_gone || predecessor_reset || own_gone || own_reset || session_ended || cancelled;
    }
};

}  // namespace dlock::etcd

// dlock_backend completes the plugin ABI's opaque type, so it is declared in the global namespace, where
// the names of the plugin's own namespace are brought in (this header is private to the plugin).
using namespace dlock::etcd;

struct dlock_hold {
    std::shared_ptr<acquisition> a;
};

struct dlock_backend final : session_listener {
    settings config;
    dlock_plugin_host host{};
    std::unique_ptr<connection> conn;
    std::unique_ptr<watcher> watches;
    std::unique_ptr<session_keeper> sessions;
    // Key suffixes: fresh ones from `suffixes_made`, and those free for reuse by stem (see the Keys
    // paragraph above). The map forgets everything past max_free_stems stems (a client of many names,
    // or of many sessions over time): a suffix not reused only costs etcd one more deleted key.
    dlock::plugin_kit::mutex suffixes_mutex;
    uint64_t suffixes_made DLOCK_GUARDED_BY(suffixes_mutex) = 0;
    std::unordered_map<std::string, std::vector<uint64_t>> free_suffixes DLOCK_GUARDED_BY(suffixes_mutex);
    static constexpr size_t max_free_stems = 4096;
    // A suffix for a new key under `stem`: a free one, else a fresh one.
    uint64_t take_suffix(const std::string& stem);
    // Makes `a`'s suffix free again. Only when its key's deletion was answered and no attempt of any
    // request that could put or delete that key unguarded is in doubt: a late put of the old key, or
    // an unguarded delete of it, would land on the next acquisition's key.
    void give_back_suffix(const acquisition& a);
    std::atomic<bool> interrupted{false};

    // Guards the hold-phase fields of acquisitions and the sets below. Never held while calling the host.
    dlock::plugin_kit::mutex state_mutex;
    std::condition_variable janitor_wake;
    std::set<std::shared_ptr<acquisition>> holds DLOCK_GUARDED_BY(state_mutex);   // registered holds
    std::set<std::shared_ptr<acquisition>> queued DLOCK_GUARDED_BY(state_mutex);  // acquisitions waiting in a queue
    struct orphan {
        std::string key;
        int64_t revision;       // delete only if still this revision; 0: the key is ours alone, delete it
        std::string tombstone;  // non-empty: a put of `key` may still land (see retire_key)
        int64_t lease;          // the session lease the tombstone goes on
    };
    std::vector<orphan> orphans DLOCK_GUARDED_BY(state_mutex);  // keys to delete that a failed call left behind
    std::vector<std::shared_ptr<acquisition>> rechecks DLOCK_GUARDED_BY(state_mutex);  // holds whose own-key watch was reset
    // Admitted permits whose touch failed (see touch_own_key).
    std::vector<std::shared_ptr<acquisition>> touches DLOCK_GUARDED_BY(state_mutex);
    bool janitor_started DLOCK_GUARDED_BY(state_mutex) = false;
    bool janitor_stop DLOCK_GUARDED_BY(state_mutex) = false;
    int64_t janitor_wakes_at DLOCK_GUARDED_BY(state_mutex) = INT64_MIN;  // INT64_MIN: awake, will rescan
    // Bumped by every new hold: keeps the janitor ticking while locks come and go.
    uint64_t holds_made DLOCK_GUARDED_BY(state_mutex) = 0;
    std::thread janitor;

    // The longest a holder that never waited goes without its own-key watch (LOST detection is
    // delayed by at most this, well within the contract's ttl/3).
    static constexpr int64_t max_own_watch_delay_ns = 100 * ns_per_ms;

    // Held while telling the host about a hold, and by hold_destroy: after hold_destroy returns, no
    // call about that hold is in progress or will start. release and renew never take it.
    dlock::plugin_kit::mutex notify_mutex;

    // The host prefixes log lines with the backend's name; messages that name it already lose it here.
    void log(int level, const std::string& message) {
        if (!host.log) return;
        const bool prefixed = message.rfind("etcd: ", 0) == 0;
        host.log(host.context, level, message.c_str() + (prefixed ? 6 : 0));
    }

    std::string dir_of(const char* name) const;

    // Where semaphores live: `<key_prefix>%semaphores/<escaped name>/` (see above).
    static constexpr const char* semaphores_part = "%semaphores/";
    // The mark of a shared key in a lock's directory; sorts after every exclusive key.
    static inline const std::string shared_mark = "shared-";
    std::string semaphore_dir_of(const char* name) const;
    static std::string escape(const char* name);

    // The tombstone of queue key `<dir><lease>-<suffix>`: `<key_prefix>%abandoned/<lease>-<suffix>`.
    // No name's directory holds it: escaped names never contain `%` followed by a lowercase letter.
    std::string tombstone_of(const std::string& key) const {
        return config.key_prefix + "%abandoned/" + key.substr(key.rfind('/') + 1);
    }

    // How the acquire's own calls behave: cancelled by interrupt(), each capped at the time left.
    static call_options acquire_call(const acquisition& a, int64_t* unanswered_sent_ns = nullptr) {
        return call_options{true, 0, a.calls_end_ns, a.out_of_time_status, unanswered_sent_ns};
    }

    // Tells the host that a hold changed state, unless it is being destroyed.
    void push(const std::shared_ptr<acquisition>& a, int state, int64_t valid_until_ns);

    void start_janitor();

    void add_orphan(orphan o);

    // Deletes `key`, only if its create_revision is `revision` when that is > 0, and returns whether
    // it deleted it. With a `tombstone`, the same Txn also puts that key on session lease `lease`,
    // whatever the comparison says: the enqueue Txn puts a queue key only while its tombstone is
    // absent, so a put of `key` still on its way (an attempt that got no answer, carried out late
    // by its member, possibly after this delete reached another one) finds the tombstone and does
    // nothing, instead of creating `key` again on the live session lease. The tombstone goes with
    // the session lease. A lease the server no longer has took `key` with it, and makes any later
    // put of it fail: false. Throws failure.
    // What a permit's release learns in its own Txn: whether the semaphore is left idle.
    struct semaphore_after {
        bool idle = false;               // no permit key left after the delete
        int64_t limit_mod_revision = 0;  // the limit key's mod_revision then; 0: no limit key
    };
    // With `after` (a permit key): the same Txn also reads whether the directory is left empty and
    // the limit's mod_revision, for forget_limit.
    bool retire_key(const std::string& key, int64_t revision, const std::string& tombstone, int64_t lease, const char* what,
                    call_options options = {}, semaphore_after* after = nullptr);

    orphan orphan_of(const acquisition& a, int64_t revision) const {
        return {a.key, revision, a.put_in_doubt ? a.tombstone : std::string(), a.s->id};
    }

    // Takes an acquisition out of the queue and deletes its key: nothing is left behind. The delete
    // is tried here (for at most one request_timeout) unless `in_background`; a delete not done
    // here is left to the janitor, which retries it until it is done. A failure of a member to
    // answer goes to the background, so that the acquire does not wait on that member again.
    void abandon(const std::shared_ptr<acquisition>& a, int64_t predecessor_watch, bool in_background = false);

    // Own-key watch: a deletion we did not make is a loss for a holder, and the end of a waiter.
    void own_key_event(const std::weak_ptr<acquisition>& weak, watch_event event);

    // Watches our own key for its deletion from `from_revision` on; `on_created` is told the
    // revision of the watch's created answer. Returns the watch's id.
    int64_t watch_own_key(const std::shared_ptr<acquisition>& a, int64_t from_revision, watcher::created_callback on_created = {});

    // ---- session events ----------------------------------------------------------------------

    // The live holds of session `s`, each with the validity the host was last told.
    std::vector<std::pair<std::shared_ptr<acquisition>, int64_t>> holds_of(const std::shared_ptr<session>& s);

    void session_suspect(const std::shared_ptr<session>& s, const std::string& why) override;

    // HELD again with the validity the host already has: it moves forward with the next renewal.
    void session_healthy(const std::shared_ptr<session>& s) override;

    void session_dead(const std::shared_ptr<session>& s, int status, const std::string& why) override;

    void member_failed(size_t index) override { watches->member_failed(index); }

    // ---- janitor -----------------------------------------------------------------------------

    // Deletes the keys of holds whose validity ended without a renewal (renew: false: the session
    // lease outlives them), keys a failed call left behind, re-checks holds whose own-key watch
    // was reset, and repeats the touches admitted permits could not make. Never blocks the
    // keepalive threads: it has its own.
    void janitor_loop();

    // A holder's own-key watch ended without telling: read the key; LOST if it is gone, else watch again.
    void recheck_own_key(const std::shared_ptr<acquisition>& a);

    // ---- acquire -----------------------------------------------------------------------------

    int acquire(const dlock_acquire_request& request, dlock_hold** out_hold, dlock_grant* grant);

    int acquire_with(const std::shared_ptr<acquisition>& a, const dlock_acquire_request& request, dlock_hold** out_hold,
                     dlock_grant* grant);

    // After the enqueue Txn answered `response`: holds the lock, or waits in the queue for it.
    int queue_and_wait(const std::shared_ptr<acquisition>& a, const dlock_acquire_request& request,
                       const pb::TxnResponse& response, dlock_hold** out_hold, dlock_grant* grant);

    // Reads whether our key still exists and which key is just before it. Returns false when our
    // key is gone; `predecessor` is empty when we are first.
    bool next_in_queue(const std::shared_ptr<acquisition>& a, std::string& predecessor, int64_t& seen_at);

    // Watches `predecessor` for its deletion from the server's current revision, so that etcd serves
    // the watch as events commit, not from its 100 ms catch-up loop (watcher.hpp); `another`: one
    // more watch on the same predecessor. Whether the watch is synced is told by a progress answer
    // (watcher.hpp), or with `and_own_key`, by the created answer of our own key's watch, made
    // right after it (no progress request then). Returns the watch's id.
    int64_t watch_predecessor(const std::shared_ptr<acquisition>& a, const std::string& predecessor, bool another,
                              bool and_own_key = false);

    // The most watches a waiter keeps on one predecessor.
    static constexpr size_t max_predecessor_watches = 3;

    // Waits in the queue behind `predecessor`, seen at revision `seen_at`, until we hold the lock.
    //
    // Nothing is missed: the watch on the predecessor starts at the server's revision when it is
    // created; when that is after `seen_at`, the deletion may have come in between, so once the
    // watch exists the queue is read again (the predecessor still there is deleted later, which the
    // watch delivers). Nothing waits for a timer: a watch from the current revision is synced, but
    // for a write that slips between etcd reading its revision and registering the watch. The
    // progress answer that follows the created one (for the first watch, the created answer of our
    // own key's watch, made right after it) tells whether one did; if so, another watch is
    // made on the same predecessor (up to max_predecessor_watches), the earlier ones kept: the first
    // event of any wakes the waiter.
    int wait_in_queue(const std::shared_ptr<acquisition>& a, const dlock_acquire_request& request, std::string predecessor,
                      int64_t seen_at, dlock_hold** out_hold, dlock_grant* grant);

    int become_holder(const std::shared_ptr<acquisition>& a, dlock_hold** out_hold, dlock_grant* grant);

    // A permit waiter that now holds puts its key again (same value, lease and create_revision):
    // the waiter just behind it watches it for that put (see above). Tried within the acquire's
    // deadline; if that fails (the deadline is near: with the core's 250 ms cancel slices, or a
    // member not answering) the janitor repeats it without that deadline until it is done or the
    // key is no longer ours, so the waiter behind never stays parked beside a free permit.
    void touch_own_key(const std::shared_ptr<acquisition>& a);
    // The touch itself: puts `a`'s key again if its create_revision is still ours. Throws failure.
    void touch_key(const acquisition& a, call_options options);

    // ---- release, renew, inspect -------------------------------------------------------------

    int release(dlock_hold* h, dlock_plugin_error* error);

    void hold_destroy(dlock_hold* h);

    int renew(dlock_renewal* renewals, size_t count);

    // One read of the batch's keys: a hold whose key is gone or another's (broken, deleted by an
    // operator) is marked gone, so its renewal answers LOST even before its own-key watch tells.
    void check_keys_still_ours(dlock_renewal* renewals, size_t count);

    int inspect(const char* name, dlock_lock_info* info);

    void interrupt();

    // ---- holders, list, break (admin.cpp) -----------------------------------------------------

    int holders(const char* name, int semaphore, dlock_holder_visitor visit, void* user_data);

    int list(const char* prefix, dlock_holder_visitor visit, void* user_data);

    int break_lock(const char* name, int semaphore, size_t* out_broken);

    // Deletes semaphore directory `dir`'s limit `limit_key` when no permit key is left, unless an
    // enqueue touched it meanwhile. Best effort: a failure is logged, the limit stays.
    void forget_idle_limit(const std::string& dir, const std::string& limit_key);

    // Deletes `limit_key` if its mod_revision is still `mod_revision` (read with an empty directory).
    // Best effort, like forget_idle_limit.
    void forget_limit(const std::string& limit_key, int64_t mod_revision);

    // Revokes the session lease (every key of this client goes at once) and joins every thread.
    void shut_down();
};
