// The `etcd` backend: etcd v3 over gRPC, with the algorithm of etcd's own concurrency mutex.
//
// Keys. A lock name is escaped (`%`, `/` and control bytes become %XX) so it holds no `/`, and its
// queue is the directory `<key_prefix><escaped name>/`: a name's directory never covers another
// name's keys (`a/` vs `a%2Fb/`). Each acquisition puts its own key
// `<dir><session lease hex>-<attempt hex>`, attached to the client's session lease, with the owner
// token as value. etcd's mutex uses `<dir><lease hex>`; the attempt suffix makes two acquisitions
// of one name in one client (two threads, or a non-reentrant second acquire) contend like two
// processes instead of sharing one key.
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
// deletion in between is still reported. `renew` makes no RPC of its own: it reports the lease's deadline, confirmed by a fresh
// keepalive on the stream when the last one is older than a quarter of the TTL. A hold the keeper
// does not renew (renew: false) has its key deleted by the janitor thread when its validity ends,
// since the session lease outlives it.
//
// Every request is idempotent (unique keys, revision-guarded deletes), so a request that got no
// answer is repeated on the next member.
#include "connection.hpp"
#include "session.hpp"
#include "watcher.hpp"

#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

using namespace dlock::etcd;

namespace {

using dlock::plugin_support::copy_message;
using dlock::plugin_support::find_option;
using dlock::plugin_support::guarded;

// `%`, `/` and control bytes become %XX; every other byte stays (UTF-8 stays readable in etcdctl).
// Injective, and the result holds no `/`.
std::string escape_name(const char* name) {
    static const char hex[] = "0123456789ABCDEF";
    std::string out;
    for (const unsigned char* p = reinterpret_cast<const unsigned char*>(name); *p; ++p) {
        if (*p == '%' || *p == '/' || *p < 0x20 || *p == 0x7f) {
            out += '%';
            out += hex[*p >> 4];
            out += hex[*p & 15];
        } else {
            out += char(*p);
        }
    }
    return out;
}

std::chrono::steady_clock::time_point steady_at(int64_t ns) {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns));
}

// The directory's keys created before `revision` (all of them with 0), newest first, keys only.
void fill_queue_range(pb::RangeRequest& range, const std::string& dir, int64_t before_revision, int64_t limit) {
    range.set_key(dir);
    range.set_range_end(prefix_end(dir));
    range.set_sort_target(pb::RangeRequest::CREATE);
    range.set_sort_order(pb::RangeRequest::DESCEND);
    range.set_limit(limit);
    range.set_keys_only(true);
    if (before_revision > 0) range.set_max_create_revision(before_revision - 1);
}

void compare_create_revision(pb::TxnRequest& txn, const std::string& key, int64_t revision) {
    pb::Compare* c = txn.add_compare();
    c->set_result(pb::Compare::EQUAL);
    c->set_target(pb::Compare::CREATE);
    c->set_key(key);
    c->set_create_revision(revision);
}

}  // namespace

namespace dlock::etcd {

// One acquisition of a lock: queued under the name's directory, then held.
struct acquisition {
    std::shared_ptr<session> s;
    std::string name, dir, key, owner;
    std::string tombstone;  // the key a clean-up puts when a put of `key` may still land (see retire_key)
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

    // Signals to the waiting thread (guarded by m).
    std::mutex m;
    std::condition_variable cv;
    // The watches on the key before ours (wait_in_queue): signals of watches on an earlier
    // predecessor are ignored, and the created and progress answers count for the newest watch only.
    uint64_t predecessor_number = 0;
    uint64_t newest_watch = 0;
    bool watch_created = false;
    int64_t watch_created_at = 0;   // the newest watch delivers every deletion after this revision
    bool watch_progress = false;
    int64_t watch_progress_at = 0;  // the server's revision after the newest watch was registered
    bool predecessor_gone = false;
    bool predecessor_reset = false;
    bool own_gone = false;
    bool own_reset = false;
    bool session_ended = false;
    int session_status = DLOCK_OK;
    std::string session_reason;
    bool cancelled = false;

    // Hold phase (guarded by the backend's state_mutex).
    int64_t own_watch = 0;    // watch on our own key; 0: none
    int64_t own_watch_due_ns = 0;  // when the janitor gives a holder its own-key watch; 0: not needed
    bool held = false;
    bool registered = false;  // the host may be told about it (until hold_destroy)
    bool releasing = false;   // our release is deleting the key: its deletion is no loss
    bool gone = false;        // the key is gone or no longer ours: LOST
    int64_t release_unanswered_ns = 0;  // send time of the first release attempt that got no answer; 0: none
    bool released_unanswered = false;   // the key went while such an attempt was in doubt: released by it
    int64_t valid_until_ns = 0;  // what the host was last told (grant or renew)

    bool signalled() const {
        return predecessor_gone || predecessor_reset || own_gone || own_reset || session_ended || cancelled;
    }
};

}  // namespace dlock::etcd

struct dlock_hold {
    std::shared_ptr<acquisition> a;
};

struct dlock_backend final : session_listener {
    settings config;
    dlock_plugin_host host{};
    std::unique_ptr<connection> conn;
    std::unique_ptr<watcher> watches;
    std::unique_ptr<session_keeper> sessions;
    std::atomic<uint64_t> attempts{0};
    std::atomic<bool> interrupted{false};

    // Guards the hold-phase fields of acquisitions and the sets below. Never held while calling the host.
    std::mutex state_mutex;
    std::condition_variable janitor_wake;
    std::set<std::shared_ptr<acquisition>> holds;   // registered holds
    std::set<std::shared_ptr<acquisition>> queued;  // acquisitions waiting in a queue
    struct orphan {
        std::string key;
        int64_t revision;       // delete only if still this revision; 0: the key is ours alone, delete it
        std::string tombstone;  // non-empty: a put of `key` may still land (see retire_key)
        int64_t lease;          // the session lease the tombstone goes on
    };
    std::vector<orphan> orphans;                     // keys to delete that a failed call left behind
    std::vector<std::shared_ptr<acquisition>> rechecks;  // holds whose own-key watch was reset
    bool janitor_started = false;
    bool janitor_stop = false;
    int64_t janitor_wakes_at = INT64_MIN;  // INT64_MIN: awake, will rescan
    uint64_t holds_made = 0;               // bumped by every new hold: keeps the janitor ticking while locks come and go
    std::thread janitor;

    // The longest a holder that never waited goes without its own-key watch (LOST detection is
    // delayed by at most this, well within the contract's ttl/3).
    static constexpr int64_t max_own_watch_delay_ns = 100 * ns_per_ms;

    // Held while telling the host about a hold, and by hold_destroy: after hold_destroy returns, no
    // call about that hold is in progress or will start. release and renew never take it.
    std::mutex notify_mutex;

    // The host prefixes log lines with the backend's name; messages that name it already lose it here.
    void log(int level, const std::string& message) {
        if (!host.log) return;
        const bool prefixed = message.rfind("etcd: ", 0) == 0;
        host.log(host.context, level, message.c_str() + (prefixed ? 6 : 0));
    }

    std::string dir_of(const char* name) const { return config.key_prefix + escape_name(name) + "/"; }

    // The tombstone of queue key `<dir><lease>-<attempt>`: `<key_prefix>%abandoned/<lease>-<attempt>`.
    // No name's directory holds it: escaped names never contain `%` followed by a lowercase letter.
    std::string tombstone_of(const std::string& key) const {
        return config.key_prefix + "%abandoned/" + key.substr(key.rfind('/') + 1);
    }

    // How the acquire's own calls behave: cancelled by interrupt(), each capped at the time left.
    static call_options acquire_call(const acquisition& a, int64_t* unanswered_sent_ns = nullptr) {
        return call_options{true, 0, a.calls_end_ns, a.out_of_time_status, unanswered_sent_ns};
    }

    // Tells the host that a hold changed state, unless it is being destroyed.
    void push(const std::shared_ptr<acquisition>& a, int state, int64_t valid_until_ns) {
        std::lock_guard<std::mutex> notifying(notify_mutex);
        {
            std::lock_guard<std::mutex> lock(state_mutex);
            if (!a->registered) return;
            if (state != DLOCK_LEASE_LOST && a->gone) return;
        }
        if (host.hold_state_changed) host.hold_state_changed(host.context, a->host_lease, state, valid_until_ns);
    }

    void start_janitor() {
        std::lock_guard<std::mutex> lock(state_mutex);
        if (janitor_started) return;
        janitor_started = true;
        janitor = std::thread([this] { janitor_loop(); });
    }

    void add_orphan(orphan o) {
        std::lock_guard<std::mutex> lock(state_mutex);
        orphans.push_back(std::move(o));
        janitor_wake.notify_all();
    }

    // Deletes `key`, only if its create_revision is `revision` when that is > 0, and returns whether
    // it deleted it. With a `tombstone`, the same Txn also puts that key on session lease `lease`,
    // whatever the comparison says: the enqueue Txn puts a queue key only while its tombstone is
    // absent, so a put of `key` still on its way (an attempt that got no answer, carried out late
    // by its member, possibly after this delete reached another one) finds the tombstone and does
    // nothing, instead of creating `key` again on the live session lease. The tombstone goes with
    // the session lease. A lease the server no longer has took `key` with it, and makes any later
    // put of it fail: false. Throws failure.
    bool retire_key(const std::string& key, int64_t revision, const std::string& tombstone, int64_t lease, const char* what,
                    call_options options = {}) {
        pb::TxnRequest txn;
        if (revision > 0) compare_create_revision(txn, key, revision);
        txn.add_success()->mutable_request_delete_range()->set_key(key);
        if (!tombstone.empty()) {
            for (pb::RequestOp* op : {txn.add_success(), txn.add_failure()}) {
                pb::PutRequest* put = op->mutable_request_put();
                put->set_key(tombstone);
                put->set_value(key);
                put->set_lease(lease);
            }
        }
        pb::TxnResponse response;
        try {
            conn->call(what, [&](member& m, grpc::ClientContext& context) { return m.kv->Txn(&context, txn, &response); }, options);
        } catch (const failure& f) {
            if (!tombstone.empty() && f.message.find("requested lease not found") != std::string::npos) return false;
            throw;
        }
        return response.succeeded() && response.responses_size() >= 1 &&
               response.responses(0).response_delete_range().deleted() == 1;
    }

    orphan orphan_of(const acquisition& a, int64_t revision) const {
        return {a.key, revision, a.put_in_doubt ? a.tombstone : std::string(), a.s->id};
    }

    // Takes an acquisition out of the queue and deletes its key: nothing is left behind. The delete
    // is tried here (for at most one request_timeout) unless `in_background`; a delete not done
    // here is left to the janitor, which retries it until it is done. A failure of a member to
    // answer goes to the background, so that the acquire does not wait on that member again.
    void abandon(const std::shared_ptr<acquisition>& a, int64_t predecessor_watch, bool in_background = false) {
        int64_t own = 0;
        {
            std::lock_guard<std::mutex> lock(state_mutex);
            queued.erase(a);
            own = a->own_watch;
            a->own_watch = 0;
            a->gone = true;
        }
        if (own) watches->cancel(own);
        if (predecessor_watch) watches->cancel(predecessor_watch);
        orphan o = orphan_of(*a, 0);
        if (!in_background) {
            try {
                retire_key(o.key, 0, o.tombstone, o.lease, "delete an abandoned queue key",
                           call_options{false, 0, now_ns() + config.request_timeout_ms * ns_per_ms, DLOCK_UNAVAILABLE});
                return;
            } catch (const failure& f) {
                log(2, fmt::format("etcd: could not delete queue key `{}` ({}); retrying in the background", a->key, f.message));
            }
        }
        add_orphan(std::move(o));
    }

    // Own-key watch: a deletion we did not make is a loss for a holder, and the end of a waiter.
    void own_key_event(const std::weak_ptr<acquisition>& weak, watch_event event) {
        const std::shared_ptr<acquisition> a = weak.lock();
        if (!a) return;
        bool lost = false;
        {
            std::lock_guard<std::mutex> lock(state_mutex);
            a->own_watch = 0;  // fired: nothing to cancel
            if (a->held) {
                if (a->releasing || a->gone) return;
                if (event == watch_event::deleted) {
                    a->gone = true;
                    // A release attempt that got no answer, sent while the lock was ours, deleted it.
                    a->released_unanswered = a->release_unanswered_ns != 0 && a->release_unanswered_ns < a->valid_until_ns;
                    lost = !a->released_unanswered;
                } else {
                    rechecks.push_back(a);
                    janitor_wake.notify_all();
                }
            } else {
                std::lock_guard<std::mutex> signal(a->m);
                (event == watch_event::deleted ? a->own_gone : a->own_reset) = true;
                a->cv.notify_all();
            }
        }
        if (lost) {
            log(2, fmt::format("etcd: lock `{}` lost: its key `{}` was deleted (session lease revoked or expired on "
                               "the server, or deleted by someone else)", a->name, a->key));
            push(a, DLOCK_LEASE_LOST, 0);
        }
    }

    int64_t watch_own_key(const std::shared_ptr<acquisition>& a, int64_t from_revision) {
        std::weak_ptr<acquisition> weak = a;
        const int64_t id = watches->watch_deletion(a->key, from_revision, [this, weak](watch_event e) { own_key_event(weak, e); });
        std::lock_guard<std::mutex> lock(state_mutex);
        a->own_watch = id;
        return id;
    }

    // ---- session events ----------------------------------------------------------------------

    // The live holds of session `s`, each with the validity the host was last told.
    std::vector<std::pair<std::shared_ptr<acquisition>, int64_t>> holds_of(const std::shared_ptr<session>& s) {
        std::lock_guard<std::mutex> lock(state_mutex);
        std::vector<std::pair<std::shared_ptr<acquisition>, int64_t>> out;
        for (const auto& a : holds)
            if (a->s == s && !a->gone) out.emplace_back(a, a->valid_until_ns);
        return out;
    }

    void session_suspect(const std::shared_ptr<session>& s, const std::string& why) override {
        log(2, fmt::format("etcd: session lease {} unconfirmed: {}", lease_hex(s->id), why));
        for (const auto& [a, valid_until] : holds_of(s)) push(a, DLOCK_LEASE_SUSPECT, valid_until);
    }

    // HELD again with the validity the host already has: it moves forward with the next renewal.
    void session_healthy(const std::shared_ptr<session>& s) override {
        log(1, fmt::format("etcd: session lease {} confirmed again", lease_hex(s->id)));
        for (const auto& [a, valid_until] : holds_of(s)) push(a, DLOCK_LEASE_HELD, valid_until);
    }

    void session_dead(const std::shared_ptr<session>& s, int status, const std::string& why) override {
        std::vector<std::shared_ptr<acquisition>> lost;
        {
            std::lock_guard<std::mutex> lock(state_mutex);
            for (const auto& a : holds)
                if (a->s == s && !a->gone) {
                    a->gone = true;
                    lost.push_back(a);
                }
            for (const auto& a : queued)
                if (a->s == s) {
                    std::lock_guard<std::mutex> signal(a->m);
                    a->session_ended = true;
                    a->session_status = status;
                    a->session_reason = why;
                    a->cv.notify_all();
                }
        }
        log(lost.empty() ? 1 : 2, fmt::format("etcd: session lease {} ended: {}; {} held lock(s) lost", lease_hex(s->id),
                                              why, lost.size()));
        for (const auto& a : lost) push(a, DLOCK_LEASE_LOST, 0);
    }

    void member_failed(size_t index) override { watches->member_failed(index); }

    // ---- janitor -----------------------------------------------------------------------------

    // Deletes the keys of holds whose validity ended without a renewal (renew: false: the session
    // lease outlives them), keys a failed call left behind, and re-checks holds whose own-key watch
    // was reset. Never blocks the keepalive threads: it has its own.
    void janitor_loop() {
        std::unique_lock<std::mutex> lock(state_mutex);
        int64_t orphan_retry_at = 0;
        uint64_t holds_seen = 0;
        while (!janitor_stop) {
            const int64_t now = now_ns();
            int64_t next = forever_ns;
            std::vector<std::shared_ptr<acquisition>> expired, to_watch;
            for (const auto& a : holds) {
                if (a->gone || a->releasing) continue;
                if (a->valid_until_ns <= now) {
                    a->gone = true;
                    expired.push_back(a);
                    continue;
                }
                next = std::min(next, a->valid_until_ns);
                if (a->own_watch_due_ns != 0) {
                    if (a->own_watch_due_ns <= now) {
                        a->own_watch_due_ns = 0;
                        to_watch.push_back(a);
                    } else {
                        next = std::min(next, a->own_watch_due_ns);
                    }
                }
            }
            // While holds keep coming, wake once per own-key-watch delay rather than once per hold.
            if (holds_made != holds_seen) {
                holds_seen = holds_made;
                next = std::min(next, now + max_own_watch_delay_ns);
            }
            std::vector<orphan> to_delete;
            if (!orphans.empty()) {
                if (now >= orphan_retry_at) to_delete.swap(orphans);
                else next = std::min(next, orphan_retry_at);
            }
            std::vector<std::shared_ptr<acquisition>> to_check;
            to_check.swap(rechecks);
            if (expired.empty() && to_delete.empty() && to_check.empty() && to_watch.empty()) {
                janitor_wakes_at = next;
                if (next == forever_ns) janitor_wake.wait(lock);
                else janitor_wake.wait_until(lock, steady_at(next));
                janitor_wakes_at = INT64_MIN;
                continue;
            }
            lock.unlock();
            for (const auto& a : expired) {
                int64_t own = 0;
                {
                    std::lock_guard<std::mutex> guard(state_mutex);
                    own = a->own_watch;
                    a->own_watch = 0;
                }
                if (own) watches->cancel(own);
                push(a, DLOCK_LEASE_LOST, 0);
                orphan o = orphan_of(*a, a->revision);
                try {
                    retire_key(o.key, o.revision, o.tombstone, o.lease, "delete the key of an expired hold");
                } catch (const failure& f) {
                    log(2, f.message);
                    add_orphan(std::move(o));
                }
            }
            std::vector<orphan> failed;
            for (auto& o : to_delete) {
                try {
                    retire_key(o.key, o.revision, o.tombstone, o.lease, "delete a key left behind");
                } catch (const failure&) {
                    failed.push_back(std::move(o));
                }
            }
            for (const auto& a : to_check) recheck_own_key(a);
            // From the revision after our key's creation: a deletion since then is delivered at once.
            for (const auto& a : to_watch) watch_own_key(a, a->revision + 1);
            lock.lock();
            if (!failed.empty()) {
                orphans.insert(orphans.end(), failed.begin(), failed.end());
                orphan_retry_at = now_ns() + 1000 * ns_per_ms;
            }
        }
    }

    // A holder's own-key watch ended without telling: read the key; LOST if it is gone, else watch again.
    void recheck_own_key(const std::shared_ptr<acquisition>& a) {
        pb::RangeRequest range;
        range.set_key(a->key);
        pb::RangeResponse response;
        try {
            conn->call("check a held key", [&](member& m, grpc::ClientContext& context) { return m.kv->Range(&context, range, &response); });
        } catch (const failure&) {
            std::lock_guard<std::mutex> lock(state_mutex);
            rechecks.push_back(a);  // try again with the next wake-up
            return;
        }
        const bool ours = response.kvs_size() == 1 && response.kvs(0).create_revision() == a->revision;
        bool lost = false;
        {
            std::lock_guard<std::mutex> lock(state_mutex);
            if (a->gone || a->releasing || !a->registered) return;
            if (!ours) {
                a->gone = true;
                lost = true;
            }
        }
        if (lost) {
            log(2, fmt::format("etcd: lock `{}` lost: its key `{}` is gone", a->name, a->key));
            push(a, DLOCK_LEASE_LOST, 0);
        } else {
            watch_own_key(a, response.header().revision() + 1);
        }
    }

    // ---- acquire -----------------------------------------------------------------------------

    int acquire(const dlock_acquire_request& request, dlock_hold** out_hold, dlock_grant* grant) {
        if (interrupted) fail(DLOCK_CANCELLED, "etcd: the client is closing");
        start_janitor();
        // Every call of the acquire ends by its deadline (then TIMEOUT: not acquired in time); a
        // try-once gets one request_timeout in all, however many members it tries (then
        // UNAVAILABLE: no answer, so nothing is known about the lock).
        const bool try_once = request.deadline_ns == 0;
        const int64_t calls_end = try_once ? now_ns() + config.request_timeout_ms * ns_per_ms : request.deadline_ns;
        const int out_of_time_status = try_once ? DLOCK_UNAVAILABLE : DLOCK_TIMEOUT;
        bool warned_unavailable = false;
        for (int attempt = 0;; ++attempt) {
            auto a = std::make_shared<acquisition>();
            a->calls_end_ns = calls_end;
            a->out_of_time_status = out_of_time_status;
            a->s = sessions->obtain(request.ttl_ms, acquire_call(*a));
            a->name = request.name;
            a->dir = dir_of(request.name);
            a->key = fmt::format("{}{}-{:x}", a->dir, lease_hex(a->s->id), ++attempts);
            a->tombstone = tombstone_of(a->key);
            a->owner = request.owner;
            a->host_lease = request.host_lease;
            try {
                return acquire_with(a, request, out_hold, grant);
            } catch (const failure& f) {
                // The session's lease vanished on the server before the keepalive told us: once more
                // with a new session.
                if (attempt == 0 && f.message.find("requested lease not found") != std::string::npos) {
                    sessions->forget(a->s, DLOCK_BACKEND, "the server no longer has it (expired or revoked)");
                    continue;
                }
                // Every member refused the enqueue as unavailable: a stall or an election, not an
                // answer about the lock. An acquire that may still wait tries again (a new key; the
                // old one, if its put is in doubt, is being cleaned up) until its deadline, and
                // then says TIMEOUT with the last reason. A try-once answers what it got.
                if (a->enqueue_unavailable && !try_once && !interrupted) {
                    constexpr int64_t pause_ns = 50 * ns_per_ms;
                    if (request.deadline_ns != forever_ns && now_ns() + pause_ns >= request.deadline_ns)
                        fail(DLOCK_TIMEOUT, fmt::format("etcd: lock `{}` not acquired before the deadline; the last "
                                                        "attempt: {}", request.name, f.message));
                    if (!warned_unavailable) log(2, f.message + "; retrying until the acquire's deadline");
                    warned_unavailable = true;
                    std::this_thread::sleep_for(std::chrono::nanoseconds(pause_ns));
                    if (interrupted) fail(DLOCK_CANCELLED, "etcd: the client is closing");
                    continue;
                }
                throw;
            }
        }
    }

    int acquire_with(const std::shared_ptr<acquisition>& a, const dlock_acquire_request& request, dlock_hold** out_hold,
                     dlock_grant* grant) {
        pb::TxnRequest enqueue;
        compare_create_revision(enqueue, a->key, 0);
        compare_create_revision(enqueue, a->tombstone, 0);  // never after a clean-up (see retire_key)
        pb::PutRequest* put = enqueue.add_success()->mutable_request_put();
        put->set_key(a->key);
        put->set_value(a->owner);
        put->set_lease(a->s->id);
        fill_queue_range(*enqueue.add_success()->mutable_request_range(), a->dir, 0, 2);
        enqueue.add_failure()->mutable_request_range()->set_key(a->key);
        pb::TxnResponse response;
        int64_t unanswered = 0;
        try {
            conn->call("acquire", [&](member& m, grpc::ClientContext& context) { return m.kv->Txn(&context, enqueue, &response); },
                       acquire_call(*a, &unanswered));
        } catch (...) {
            try {
                throw;
            } catch (const failure& f) {
                a->enqueue_unavailable = f.status == DLOCK_UNAVAILABLE;
            } catch (...) {
            }
            // An attempt without an answer may have put the key, or may still put it: clean up,
            // in the background (the members are not answering). Refused outright: nothing was put.
            if (unanswered != 0) {
                a->put_in_doubt = true;
                abandon(a, 0, true);
            }
            throw;
        }
        a->put_in_doubt = unanswered != 0;
        try {
            return queue_and_wait(a, request, response, out_hold, grant);
        } catch (...) {
            // Whatever failed after the put, our key must go: left on the live session lease it
            // would hold or block the lock until the client closes. The failures that end the
            // acquire by design have deleted it already; the rest are failed calls.
            bool abandoned;
            {
                std::lock_guard<std::mutex> lock(state_mutex);
                abandoned = a->gone;
            }
            if (!abandoned) abandon(a, 0, true);
            throw;
        }
    }

    // After the enqueue Txn answered `response`: holds the lock, or waits in the queue for it.
    int queue_and_wait(const std::shared_ptr<acquisition>& a, const dlock_acquire_request& request,
                       const pb::TxnResponse& response, dlock_hold** out_hold, dlock_grant* grant) {
        std::string predecessor;
        int64_t seen_at = response.header().revision();
        if (response.succeeded()) {
            a->revision = response.header().revision();
            const auto& queue = response.responses(1).response_range().kvs();
            if (queue.size() >= 2 && queue[0].create_revision() == a->revision) predecessor = queue[1].key();
        } else {
            // A repeated request: the key exists; learn its revision, then what is before it.
            const auto& mine = response.responses(0).response_range().kvs();
            if (mine.empty()) fail(DLOCK_BACKEND, fmt::format("etcd: key `{}` neither created nor found", a->key));
            a->revision = mine[0].create_revision();
            if (!next_in_queue(a, predecessor, seen_at)) {
                abandon(a, 0);
                fail(DLOCK_BACKEND, fmt::format("etcd: queue key `{}` of lock `{}` vanished while acquiring", a->key, a->name));
            }
        }
        if (predecessor.empty()) return become_holder(a, out_hold, grant);
        if (request.deadline_ns == 0) {
            abandon(a, 0);
            fail(DLOCK_TIMEOUT, fmt::format("etcd: lock `{}` is taken (queue `{}`)", a->name, a->dir));
        }
        watch_own_key(a, a->revision + 1);
        {
            std::lock_guard<std::mutex> lock(state_mutex);
            queued.insert(a);
        }
        if (!sessions->alive(*a->s)) {
            std::lock_guard<std::mutex> signal(a->m);
            a->session_ended = true;
            a->session_status = DLOCK_UNAVAILABLE;
            a->session_reason = "it ended before the wait began";
        }
        return wait_in_queue(a, request, predecessor, seen_at, out_hold, grant);
    }

    // Reads whether our key still exists and which key is just before it. Returns false when our
    // key is gone; `predecessor` is empty when we are first.
    bool next_in_queue(const std::shared_ptr<acquisition>& a, std::string& predecessor, int64_t& seen_at) {
        pb::TxnRequest check;
        compare_create_revision(check, a->key, a->revision);
        fill_queue_range(*check.add_success()->mutable_request_range(), a->dir, a->revision, 1);
        pb::TxnResponse response;
        conn->call("check the lock queue", [&](member& m, grpc::ClientContext& context) { return m.kv->Txn(&context, check, &response); },
                   acquire_call(*a));
        if (!response.succeeded()) return false;
        const auto& before = response.responses(0).response_range().kvs();
        predecessor = before.empty() ? std::string() : before[0].key();
        seen_at = response.header().revision();
        return true;
    }

    // Watches `predecessor` for its deletion from the server's current revision, so that etcd serves
    // the watch as events commit, not from its 100 ms catch-up loop (watcher.hpp); `another`: one
    // more watch on the same predecessor. Returns the watch's id.
    int64_t watch_predecessor(const std::shared_ptr<acquisition>& a, const std::string& predecessor, bool another) {
        uint64_t on, number;
        {
            std::lock_guard<std::mutex> signal(a->m);
            if (!another) {
                ++a->predecessor_number;
                a->predecessor_gone = a->predecessor_reset = false;
            }
            on = a->predecessor_number;
            number = ++a->newest_watch;
            a->watch_created = a->watch_progress = false;
        }
        // A watch cancelled while its callback runs may still signal: the numbers tell it apart.
        std::weak_ptr<acquisition> weak = a;
        auto tell_waiter = [weak, on, number](bool newest_only, auto set) {
            if (auto locked = weak.lock()) {
                std::lock_guard<std::mutex> guard(locked->m);
                if (locked->predecessor_number != on || (newest_only && locked->newest_watch != number)) return;
                set(*locked);
                locked->cv.notify_all();
            }
        };
        return watches->watch_deletion(
            predecessor, 0,
            [tell_waiter](watch_event e) {
                tell_waiter(false, [e](acquisition& w) { (e == watch_event::deleted ? w.predecessor_gone : w.predecessor_reset) = true; });
            },
            [tell_waiter](int64_t revision) {
                tell_waiter(true, [revision](acquisition& w) {
                    w.watch_created = true;
                    w.watch_created_at = revision;
                });
            },
            [tell_waiter](int64_t revision) {
                tell_waiter(true, [revision](acquisition& w) {
                    w.watch_progress = true;
                    w.watch_progress_at = revision;
                });
            });
    }

    // The most watches a waiter keeps on one predecessor.
    static constexpr size_t max_predecessor_watches = 3;

    // Waits in the queue behind `predecessor`, seen at revision `seen_at`, until we hold the lock.
    //
    // Nothing is missed: the watch on the predecessor starts at the server's revision when it is
    // created; when that is after `seen_at`, the deletion may have come in between, so once the
    // watch exists the queue is read again (the predecessor still there is deleted later, which the
    // watch delivers). Nothing waits for a timer: a watch from the current revision is synced, but
    // for a write that slips between etcd reading its revision and registering the watch. The
    // progress answer that follows the created one tells whether one did; if so, another watch is
    // made on the same predecessor (up to max_predecessor_watches), the earlier ones kept: the first
    // event of any wakes the waiter.
    int wait_in_queue(const std::shared_ptr<acquisition>& a, const dlock_acquire_request& request, std::string predecessor,
                      int64_t seen_at, dlock_hold** out_hold, dlock_grant* grant) {
        std::vector<int64_t> predecessor_watches;  // on `predecessor`, the newest last
        bool watch_covers = false;   // the newest watch delivers every deletion after seen_at
        bool watch_settled = false;  // the newest watch is synced, or no other will be made
        auto cancel_watches = [&] {
            for (const int64_t id : predecessor_watches) watches->cancel(id);
            predecessor_watches.clear();
        };
        try {
            for (;;) {
                if (predecessor_watches.empty()) {
                    predecessor_watches.push_back(watch_predecessor(a, predecessor, false));
                    watch_covers = watch_settled = false;
                }
                bool rewatch_own = false, watch_fired = false;
                {
                    std::unique_lock<std::mutex> lock(a->m);
                    auto woken = [&] {
                        return a->signalled() || (!watch_covers && a->watch_created) ||
                               (watch_covers && !watch_settled && a->watch_progress);
                    };
                    if (request.deadline_ns == forever_ns) a->cv.wait(lock, woken);
                    else a->cv.wait_until(lock, steady_at(request.deadline_ns), woken);
                    if (a->cancelled) {
                        lock.unlock();
                        abandon(a, 0);
                        fail(DLOCK_CANCELLED, "etcd: the client is closing");
                    }
                    if (a->session_ended) {
                        const int status = a->session_status == DLOCK_BACKEND ? DLOCK_BACKEND : DLOCK_UNAVAILABLE;
                        const std::string why = a->session_reason;
                        lock.unlock();
                        abandon(a, 0);
                        fail(status, fmt::format("etcd: session lease {} ended while waiting for lock `{}` ({}); not acquired",
                                                 lease_hex(a->s->id), a->name, why));
                    }
                    if (a->own_gone) {
                        lock.unlock();
                        abandon(a, 0);
                        fail(DLOCK_BACKEND, fmt::format("etcd: queue key `{}` of lock `{}` was deleted while waiting (its "
                                                        "session lease was revoked, or someone deleted it); not acquired",
                                                        a->key, a->name));
                    }
                    if (!woken()) {  // the deadline passed
                        lock.unlock();
                        abandon(a, 0);
                        fail(DLOCK_TIMEOUT, fmt::format("etcd: lock `{}` not acquired before the deadline", a->name));
                    }
                    if (!a->signalled()) {
                        if (!watch_covers) {
                            // The newest watch is created.
                            watch_covers = true;
                            if (a->watch_created_at <= seen_at) continue;  // no revision between the read and the watch
                            // Otherwise read the queue again, below.
                        } else {
                            // The progress answer: a revision after the watch's creation means a write
                            // may have slipped in before its registration.
                            watch_settled = true;
                            if (a->watch_progress_at != a->watch_created_at && predecessor_watches.size() < max_predecessor_watches) {
                                lock.unlock();
                                predecessor_watches.push_back(watch_predecessor(a, predecessor, true));
                                watch_covers = watch_settled = false;
                            }
                            continue;
                        }
                    }
                    rewatch_own = a->own_reset;
                    watch_fired = a->predecessor_gone || a->predecessor_reset;
                    a->predecessor_gone = a->predecessor_reset = a->own_reset = false;
                }
                if (watch_fired) cancel_watches();
                // The predecessor went, or a watch ended, or our own key's watch did, or the newest
                // watch started after revisions the last read did not see: read the queue again.
                const std::string watched = predecessor;
                if (!next_in_queue(a, predecessor, seen_at)) {
                    abandon(a, 0);
                    fail(DLOCK_BACKEND, fmt::format("etcd: queue key `{}` of lock `{}` vanished while waiting (its session "
                                                    "lease expired or was revoked, or someone deleted it); not acquired",
                                                    a->key, a->name));
                }
                if (rewatch_own) watch_own_key(a, seen_at + 1);
                if (predecessor != watched) cancel_watches();
                if (predecessor.empty()) return become_holder(a, out_hold, grant);
            }
        } catch (...) {
            // A call failed (or was cancelled) mid-wait: acquire_with deletes our key.
            cancel_watches();
            throw;
        }
    }

    int become_holder(const std::shared_ptr<acquisition>& a, dlock_hold** out_hold, dlock_grant* grant) {
        const int64_t valid_until = sessions->deadline(*a->s);
        const bool alive = sessions->alive(*a->s) && valid_until > now_ns();
        bool key_gone = false;
        if (alive) {
            std::lock_guard<std::mutex> lock(state_mutex);
            {
                std::lock_guard<std::mutex> signal(a->m);
                key_gone = a->own_gone;
            }
            if (!key_gone) {
                queued.erase(a);
                a->held = true;
                a->registered = true;
                a->valid_until_ns = valid_until;
                ++holds_made;
                int64_t due = valid_until;
                if (a->own_watch == 0) {
                    // A holder that never waited gets its own-key watch from the janitor a little
                    // later: a short critical section then costs no watch at all, and the watch,
                    // starting at our key's creation, still reports a deletion made in between.
                    const int64_t delay = std::clamp<int64_t>(a->s->ttl_s * 1'000'000'000 / 10, 10 * ns_per_ms, max_own_watch_delay_ns);
                    a->own_watch_due_ns = now_ns() + delay;
                    due = std::min(due, a->own_watch_due_ns + delay);
                }
                holds.insert(a);
                if (due < janitor_wakes_at) janitor_wake.notify_all();
            }
        }
        if (!alive || key_gone) {
            abandon(a, 0);
            fail(alive ? DLOCK_BACKEND : DLOCK_UNAVAILABLE,
                 fmt::format("etcd: lock `{}` reached the head of its queue, but {}; not acquired", a->name,
                             alive ? "its key was deleted meanwhile" : "its session lease ended meanwhile"));
        }
        grant->fencing_token = uint64_t(a->revision);
        grant->valid_until_ns = valid_until;
        grant->ttl_ms = a->s->ttl_s * 1000;
        *out_hold = new dlock_hold{a};
        return DLOCK_OK;
    }

    // ---- release, renew, inspect -------------------------------------------------------------

    int release(dlock_hold* h, dlock_plugin_error* error) {
        const std::shared_ptr<acquisition>& a = h->a;
        int64_t valid_until = 0, unanswered_before = 0;
        {
            std::lock_guard<std::mutex> lock(state_mutex);
            if (a->gone && a->released_unanswered) return DLOCK_OK;
            if (a->gone) {
                copy_message(error, fmt::format("etcd: lock `{}` had been lost (its key `{}` expired or was deleted)", a->name, a->key));
                return DLOCK_LOST;
            }
            a->releasing = true;
            valid_until = a->valid_until_ns;
            unanswered_before = a->release_unanswered_ns;
        }
        bool deleted = false;
        int64_t unanswered = 0;
        try {
            const orphan o = orphan_of(*a, a->revision);
            deleted = retire_key(o.key, o.revision, o.tombstone, o.lease, "release",
                                 call_options{false, 0, forever_ns, DLOCK_TIMEOUT, &unanswered});
        } catch (const failure& f) {
            std::lock_guard<std::mutex> lock(state_mutex);
            if (a->release_unanswered_ns == 0) a->release_unanswered_ns = unanswered;  // for the host's retry
            a->releasing = false;
            copy_message(error, fmt::format("{}; the outcome is unknown: the release is safe to retry", f.message));
            return DLOCK_UNKNOWN;
        }
        {
            std::lock_guard<std::mutex> lock(state_mutex);
            a->gone = true;
            // No cancel request: the deletion's event reaches the own-key watch, if there is one, and
            // the watcher ends it on the server then (one message either way, off the release path).
            a->own_watch = 0;
        }
        if (deleted) return DLOCK_OK;
        const int64_t first_unanswered = unanswered_before != 0 ? unanswered_before : unanswered;
        if (first_unanswered != 0 && first_unanswered < valid_until) {
            // An attempt that got no answer (in this call, or in an earlier one that returned
            // UNKNOWN) was sent while the lock was ours: that attempt deleted the key, and a later
            // one found it gone.
            log(1, fmt::format("etcd: lock `{}` released by an attempt that got no answer; the retry found its key gone", a->name));
            return DLOCK_OK;
        }
        copy_message(error, fmt::format("etcd: lock `{}` had been lost: key `{}` with create_revision {} no longer exists",
                                        a->name, a->key, a->revision));
        return DLOCK_LOST;
    }

    void hold_destroy(dlock_hold* h) {
        const std::shared_ptr<acquisition> a = std::move(h->a);
        delete h;
        int64_t own = 0;
        {
            std::lock_guard<std::mutex> notifying(notify_mutex);
            std::lock_guard<std::mutex> lock(state_mutex);
            a->registered = false;
            holds.erase(a);
            own = a->own_watch;
            a->own_watch = 0;
            if (!a->gone) {
                // The host gave up on a release it could not confirm: the key would otherwise live as
                // long as the session lease. Deleted in the background, only if still ours.
                a->gone = true;
                orphans.push_back(orphan_of(*a, a->revision));
                janitor_wake.notify_all();
            }
        }
        if (own) watches->cancel(own);
    }

    int renew(dlock_renewal* renewals, size_t count) {
        struct confirmed {
            std::shared_ptr<session> s;
            int status;
            int64_t deadline;
        };
        std::vector<confirmed> done;  // one confirmation per session in the batch
        for (size_t i = 0; i < count; ++i) {
            const std::shared_ptr<acquisition>& a = renewals[i].hold->a;
            {
                std::lock_guard<std::mutex> lock(state_mutex);
                if (a->gone) {
                    renewals[i].status = DLOCK_LOST;
                    continue;
                }
            }
            auto it = std::find_if(done.begin(), done.end(), [&](const confirmed& c) { return c.s == a->s; });
            if (it == done.end()) {
                int64_t deadline = 0;
                std::string why;
                const int status = sessions->confirm(a->s, deadline, why);
                if (status != DLOCK_OK) log(2, why);
                done.push_back({a->s, status, deadline});
                it = done.end() - 1;
            }
            if (it->status != DLOCK_OK) {
                renewals[i].status = it->status;
                continue;
            }
            std::lock_guard<std::mutex> lock(state_mutex);
            if (a->gone) {
                renewals[i].status = DLOCK_LOST;
                continue;
            }
            a->valid_until_ns = std::max(a->valid_until_ns, it->deadline);
            renewals[i].status = DLOCK_OK;
            renewals[i].valid_until_ns = a->valid_until_ns;
        }
        return DLOCK_OK;
    }

    int inspect(const char* name, dlock_lock_info* info) {
        const std::string dir = dir_of(name);
        pb::RangeRequest range;
        range.set_key(dir);
        range.set_range_end(prefix_end(dir));
        range.set_sort_target(pb::RangeRequest::CREATE);
        range.set_sort_order(pb::RangeRequest::ASCEND);
        range.set_limit(1);
        pb::RangeResponse response;
        conn->call("inspect", [&](member& m, grpc::ClientContext& context) { return m.kv->Range(&context, range, &response); });
        info->held = response.kvs_size() > 0 ? 1 : 0;
        if (!info->held) return DLOCK_OK;
        const mvccpb::KeyValue& holder = response.kvs(0);
        const size_t n = std::min(holder.value().size(), sizeof info->holder - 1);
        std::memcpy(info->holder, holder.value().data(), n);
        info->holder[n] = '\0';
        info->fencing_token = uint64_t(holder.create_revision());
        info->ttl_left_ms = -1;
        if (holder.lease() != 0) {
            pb::LeaseTimeToLiveRequest ttl;
            ttl.set_id(holder.lease());
            pb::LeaseTimeToLiveResponse left;
            conn->call("inspect the holder's lease",
                       [&](member& m, grpc::ClientContext& context) { return m.lease->LeaseTimeToLive(&context, ttl, &left); });
            if (left.ttl() >= 0) info->ttl_left_ms = left.ttl() * 1000;  // etcd answers in whole seconds
        }
        return DLOCK_OK;
    }

    void interrupt() {
        interrupted = true;
        conn->interrupt();
        std::lock_guard<std::mutex> lock(state_mutex);
        for (const auto& a : queued) {
            std::lock_guard<std::mutex> signal(a->m);
            a->cancelled = true;
            a->cv.notify_all();
        }
    }

    // Revokes the session lease (every key of this client goes at once) and joins every thread.
    void shut_down() {
        {
            std::lock_guard<std::mutex> lock(state_mutex);
            janitor_stop = true;
            janitor_wake.notify_all();
        }
        if (janitor.joinable()) janitor.join();
        sessions->stop();
        watches->stop();
    }
};

namespace {

const dlock_option_desc etcd_options[] = {
    {"endpoints", DLOCK_OPTION_STRING_LIST, 0, DLOCK_DSN_HOSTS, "127.0.0.1:2379",
     "etcd members, host:port (or http://host:port, https://host:port); calls fail over to the next when one is unreachable."},
    {"username", DLOCK_OPTION_STRING, 0, DLOCK_DSN_USER, nullptr, "User for etcd authentication; empty: none."},
    {"password", DLOCK_OPTION_STRING, DLOCK_OPTION_SECRET, DLOCK_DSN_PASSWORD, nullptr, "Password of `username`."},
    {"tls", DLOCK_OPTION_BOOL, 0, DLOCK_DSN_NONE, "false", "Use TLS (implied by https:// endpoints and by `ca_file`)."},
    {"ca_file", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, nullptr, "PEM file of the CA that signed the members' certificates; empty: the system's roots."},
    {"cert_file", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, nullptr, "PEM client certificate (with `key_file`) for client-certificate authentication."},
    {"key_file", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, nullptr, "PEM private key of `cert_file`."},
    {"key_prefix", DLOCK_OPTION_STRING, 0, DLOCK_DSN_PATH, "dlock/", "Prefix of every key dlock writes (a `/` is appended when missing; empty: keys at the top of the keyspace)."},
    {"session_ttl", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, nullptr,
     "TTL of the client's session lease (whole seconds, raised to the server's minimum); unset: the ttl of the acquire that grants it."},
    {"dial_timeout", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "2s", "Bound on connecting to one member (and on the check at open)."},
    {"request_timeout", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "5s", "Bound on one request to one member before trying the next; an acquire's requests also end at its deadline, a try-once's after one request_timeout in all."},
};

std::string read_pem(const char* option, const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(DLOCK_CONFIG, fmt::format("etcd: option `{}`: cannot read `{}`", option, path));
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// A client certificate that is not valid now is refused by the server during the handshake, and
// gRPC reports only a failed connection: say at open which file to renew instead.
void check_certificate_validity(const std::string& path, const std::string& pem) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), int(pem.size())), &BIO_free);
    std::unique_ptr<X509, decltype(&X509_free)> cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr,
                                                     &X509_free);
    if (!cert) fail(DLOCK_CONFIG, fmt::format("etcd: option `cert_file`: `{}` holds no PEM certificate", path));
    auto text_of = [](const ASN1_TIME* t) {
        std::unique_ptr<BIO, decltype(&BIO_free)> out(BIO_new(BIO_s_mem()), &BIO_free);
        if (!out || ASN1_TIME_print(out.get(), t) != 1) return std::string("?");
        char* data = nullptr;
        const long n = BIO_get_mem_data(out.get(), &data);
        return std::string(data, size_t(n));
    };
    if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) <= 0)
        fail(DLOCK_CONFIG, fmt::format("etcd: option `cert_file`: the certificate in `{}` expired on {}; renew it (and "
                                       "`key_file`)", path, text_of(X509_get0_notAfter(cert.get()))));
    if (X509_cmp_current_time(X509_get0_notBefore(cert.get())) > 0)
        fail(DLOCK_CONFIG, fmt::format("etcd: option `cert_file`: the certificate in `{}` is not valid before {}; check "
                                       "this machine's clock", path, text_of(X509_get0_notBefore(cert.get()))));
}

settings parse_settings(const dlock_option_value* values, size_t count) {
    settings s;
    bool https = false, http = false;
    if (const auto* v = find_option(values, count, "endpoints")) {
        for (size_t i = 0; i < v->list_count; ++i) {
            std::string e = v->list_values[i];
            if (e.rfind("https://", 0) == 0) {
                https = true;
                e = e.substr(8);
            } else if (e.rfind("http://", 0) == 0) {
                http = true;
                e = e.substr(7);
            }
            while (!e.empty() && e.back() == '/') e.pop_back();
            const size_t colon = e.rfind(':');
            if (e.empty() || colon == std::string::npos || colon == 0 || colon + 1 == e.size() ||
                e.find_first_not_of("0123456789", colon + 1) != std::string::npos)
                fail(DLOCK_CONFIG, fmt::format("etcd: endpoint `{}` is not host:port", v->list_values[i]));
            if (std::find(s.endpoints.begin(), s.endpoints.end(), e) != s.endpoints.end())
                fail(DLOCK_CONFIG, fmt::format("etcd: endpoint `{}` is listed twice", e));
            s.endpoints.push_back(e);
        }
    }
    if (s.endpoints.empty()) fail(DLOCK_CONFIG, "etcd: option `endpoints` lists no member");
    if (https && http) fail(DLOCK_CONFIG, "etcd: `endpoints` mix http:// and https://; use one scheme");
    if (const auto* v = find_option(values, count, "username")) s.username = v->string_value;
    if (const auto* v = find_option(values, count, "password")) s.password = v->string_value;
    if (!s.password.empty() && s.username.empty()) fail(DLOCK_CONFIG, "etcd: `password` is set without `username`");
    s.tls = https;
    if (const auto* v = find_option(values, count, "tls")) s.tls = s.tls || v->int_value != 0;
    if (const auto* v = find_option(values, count, "ca_file"); v && *v->string_value) {
        s.ca_pem = read_pem("ca_file", v->string_value);
        s.tls = true;
    }
    const auto* cert = find_option(values, count, "cert_file");
    const auto* key = find_option(values, count, "key_file");
    const bool has_cert = cert && *cert->string_value, has_key = key && *key->string_value;
    if (has_cert != has_key) fail(DLOCK_CONFIG, "etcd: `cert_file` and `key_file` go together");
    if (has_cert) {
        s.cert_pem = read_pem("cert_file", cert->string_value);
        check_certificate_validity(cert->string_value, s.cert_pem);
        s.key_pem = read_pem("key_file", key->string_value);
        s.tls = true;
    }
    if (http && s.tls) fail(DLOCK_CONFIG, "etcd: TLS options are set but `endpoints` use http://");
    if (const auto* v = find_option(values, count, "key_prefix")) s.key_prefix = v->string_value;
    if (!s.key_prefix.empty() && s.key_prefix.back() != '/') s.key_prefix += '/';
    if (const auto* v = find_option(values, count, "session_ttl")) {
        if (v->int_value < 1) fail(DLOCK_CONFIG, "etcd: `session_ttl` must be at least 1s");
        s.session_ttl_ms = v->int_value;
    }
    if (const auto* v = find_option(values, count, "dial_timeout")) s.dial_timeout_ms = v->int_value;
    if (const auto* v = find_option(values, count, "request_timeout")) s.request_timeout_ms = v->int_value;
    if (s.dial_timeout_ms < 1 || s.request_timeout_ms < 1)
        fail(DLOCK_CONFIG, "etcd: `dial_timeout` and `request_timeout` must be at least 1ms");
    return s;
}

int etcd_create(const dlock_option_value* values, size_t count, const dlock_plugin_host* host, dlock_backend** out,
                dlock_plugin_error* error) {
    return guarded(error, "etcd", [&] {
        auto b = std::make_unique<dlock_backend>();
        if (host) b->host = *host;
        b->config = parse_settings(values, count);
        b->conn = std::make_unique<connection>(b->config);
        b->watches = std::make_unique<watcher>(*b->conn);
        b->sessions = std::make_unique<session_keeper>(*b->conn, *b);
        // Connect at open: a wrong endpoint, password or permission is an error here, not at the first acquire.
        b->conn->check_reachable();
        *out = b.release();
        return DLOCK_OK;
    });
}

void etcd_destroy(dlock_backend* b) {
    if (!b) return;
    guarded(nullptr, "etcd", [&] {
        b->shut_down();
        return DLOCK_OK;
    });
    delete b;
}

uint64_t etcd_capabilities(dlock_backend* b) {
    uint64_t caps = DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_PUSH_WAIT | DLOCK_CAP_TTL;
    if (b && b->config.endpoints.size() > 1) caps |= DLOCK_CAP_QUORUM;
    return caps;
}

void etcd_interrupt(dlock_backend* b) {
    guarded(nullptr, "etcd", [&] {
        b->interrupt();
        return DLOCK_OK;
    });
}

int etcd_acquire(dlock_backend* b, const dlock_acquire_request* request, dlock_hold** out_hold, dlock_grant* grant,
                 dlock_plugin_error* error) {
    return guarded(error, "etcd", [&] { return b->acquire(*request, out_hold, grant); });
}

int etcd_release(dlock_backend* b, dlock_hold* h, dlock_plugin_error* error) {
    return guarded(error, "etcd", [&] { return b->release(h, error); });
}

void etcd_hold_destroy(dlock_backend* b, dlock_hold* h) {
    guarded(nullptr, "etcd", [&] {
        b->hold_destroy(h);
        return DLOCK_OK;
    });
}

int etcd_renew(dlock_backend* b, dlock_renewal* renewals, size_t count, dlock_plugin_error* error) {
    return guarded(error, "etcd", [&] { return b->renew(renewals, count); });
}

int etcd_inspect(dlock_backend* b, const char* name, dlock_lock_info* info, dlock_plugin_error* error) {
    return guarded(error, "etcd", [&] { return b->inspect(name, info); });
}

const dlock_plugin etcd_plugin = {
    sizeof(dlock_plugin),
    1,
    "etcd",
    "etcd v3 over gRPC: one session lease per client on one keepalive stream; the etcd mutex algorithm (lowest "
    "create_revision holds, each waiter watches its predecessor); fencing token = the key's create_revision.",
    etcd_options,
    sizeof etcd_options / sizeof etcd_options[0],
    etcd_create,
    etcd_destroy,
    etcd_capabilities,
    etcd_interrupt,
    etcd_acquire,
    etcd_release,
    etcd_hold_destroy,
    etcd_renew,
    etcd_inspect,
};

}  // namespace

extern "C" DLOCK_PLUGIN_EXPORT int dlock_plugin_negotiate(uint32_t host_max_version, const dlock_plugin** out,
                                                          uint32_t* out_min_version) {
    return dlock::plugin_support::negotiate_v1(host_max_version, &etcd_plugin, out, out_min_version);
}
