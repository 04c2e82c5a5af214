// The `redis` backend: one Redis server.
//
// Acquire is one round trip: a Lua script does SET key owner NX PX ttl and, on success, INCRs the
// name's persistent fence key and returns the token; on failure it returns the holder's remaining
// ttl. Release (compare owner, DEL, PUBLISH) and renewal (compare owner, PEXPIRE; any number of
// leases in one call) are scripts too, all run by EVALSHA with a NOSCRIPT fallback.
//
// Waiting: the client's one subscriber connection watches the waiter's channel BEFORE the retry, so
// a release between the retry and the wait still wakes the waiter; the waiter also retries when the
// holder's remaining ttl runs out (a holder that died never publishes). No polling interval while
// the subscription is confirmed; while it is not (the pub/sub connection is down or re-subscribing)
// the waiter retries on a short timer instead, so it never depends on one subscription's health.
//
// Fairness (`fair: true`, the default): a waiter queues in the lock's waiter queue (a sorted set of
// owner tokens by arrival, in the lock's hash tag) with its first attempt, and a free lock goes to
// the first in the queue. A release wakes the first waiter only, on its own channel: the server
// work per handoff does not grow with the number of waiters. A first waiter that nobody hears on its
// channel (its client died) is dropped and the next one woken instead. An entry lapses unless its
// waiter renews it by retrying (every retry does, and a waiter retries at the latest when the
// holder's key would expire), so a waiter that stopped without leaving (paused, or its release of
// the queue failed) holds the queue up for a bounded time: the woken first waiter has `claim`
// (command_timeout, at least 500 ms) to take the lock, and the waiter after it (its standby) is
// told at once and retries when that claim lapses, taking over from a first waiter that never
// came (a paused process keeps its connection: it is heard). `fair: false`: the queue is ignored (a free
// lock goes to whoever asks first) and the waiter is woken by every release of the name.
//
// Semaphores and shared holds (plugin ABI version 2) go through the same acquire, wait, release and
// renew paths with their own scripts: a permit is a member of the semaphore's sorted set, a shared
// hold a member of a sorted set stored at the lock key itself (so the exclusive scripts' read of
// that key finds the lock held), each scored by the server time its lease ends; both use the
// waiter queue (FIFO; readers and writers in one queue). holders, list (SCAN) and break (UNLINK:
// an administrator's right) read and clear those keys. Layout and guarantees:
// docs/backends/redis.md, "Semaphores and shared locks" and "Listing and breaking locks".
#include "queue_mode.hpp"
#include "redis_common.hpp"
#include <dlock/plugin_kit/plugin_struct.hpp>
#include <dlock/plugin_kit/scope_exit.hpp>
#include <dlock/plugin_kit/thread_safety.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

using namespace dlock::redis_common;

namespace {

constexpr int64_t ms_ns = 1'000'000;

}  // namespace

struct dlock_backend {
    endpoint where;
    settings config;
    dlock_plugin_host host{};
    std::unique_ptr<pool> connections;
    std::unique_ptr<subscriber> waker DLOCK_GUARDED_BY(waker_mutex);  // started by the first wait
    // The keys of the names locked lately, each built once (keys_for formats six strings): at most
    // keys_cache_limit names per kind, forgotten all at once when full.
    static constexpr size_t keys_cache_limit = 1024;
    dlock::plugin_kit::mutex keys_mutex;
    std::unordered_map<std::string, std::shared_ptr<const lock_keys>> lock_keys_cache DLOCK_GUARDED_BY(keys_mutex),
        semaphore_keys_cache DLOCK_GUARDED_BY(keys_mutex);
    dlock::plugin_kit::mutex waker_mutex;
    std::condition_variable interrupted_changed;  // with waker_mutex
    std::atomic<bool> interrupted{false};

    subscriber& subscriber_for_waits() {
        dlock::plugin_kit::lock_guard lock(waker_mutex);
        if (!waker) waker = std::make_unique<subscriber>(where, config);
        return *waker;
    }
    // After a release, how long the woken first waiter has to take the lock before it loses its
    // place: a live waiter needs a message and one script's round trip.
    int64_t claim_ms() const { return std::max<int64_t>(500, config.command_timeout_ms); }
    // How long a queue entry outlives the latest time its waiter retries by.
    int64_t entry_grace_ms() const { return std::max<int64_t>(1000, 2 * config.command_timeout_ms); }
    std::shared_ptr<const lock_keys> keys_of(const char* name, bool semaphore) {
        dlock::plugin_kit::lock_guard lock(keys_mutex);
        auto& cache = semaphore ? semaphore_keys_cache : lock_keys_cache;
        auto found = cache.find(name);
        if (found != cache.end()) return found->second;
        if (cache.size() >= keys_cache_limit) cache.clear();
        auto keys = std::make_shared<const lock_keys>(semaphore ? semaphore_keys_for(config.key_prefix, name)
                                                                : keys_for(config.key_prefix, name));
        cache.emplace(name, keys);
        return keys;
    }
    // Sleeps until `until_ns` or interrupt.
    void sleep_until(int64_t until_ns) {
        dlock::plugin_kit::unique_lock lock(waker_mutex);
        interrupted_changed.wait_until(lock.std(), std::chrono::steady_clock::time_point(std::chrono::nanoseconds(until_ns)),
                                       [&] { return interrupted.load(); });
    }
};

// One hold: an exclusive lock, a shared hold of a lock, or one permit of a semaphore.
struct dlock_hold {
    uint32_t kind = DLOCK_HOLD_EXCLUSIVE;  // dlock_hold_kind
    uint32_t permits = 0;                  // PERMIT: the semaphore's limit
    std::shared_ptr<const lock_keys> keys;  // the lock's keys, or the semaphore's
    std::string name;
    std::string owner;
    std::string token;  // a shared hold's or permit's fencing token once granted: its member is owner:token
    int64_t valid_until_ns = 0;  // as last confirmed (grant, renewal)
    // When a release whose answer never came (UNKNOWN: it may have run) was sent; 0: none. A later
    // attempt that finds the lease gone answers RELEASED if that one was sent while valid.
    int64_t release_in_doubt_sent_ns = 0;

    const script& acquire_script() const {
        return kind == DLOCK_HOLD_SHARED ? shared_acquire_script
               : kind == DLOCK_HOLD_PERMIT ? permit_acquire_script
                                           : queue_acquire_script;
    }
    const script& release_script() const {
        return kind == DLOCK_HOLD_SHARED ? shared_release_script
               : kind == DLOCK_HOLD_PERMIT ? permit_release_script
                                           : queue_release_script;
    }
    // Its entry in the waiter queue, and the suffix of the channel that wakes it there.
    std::string queue_entry() const { return kind == DLOCK_HOLD_SHARED ? "s:" + owner : owner; }
    std::vector<std::string> acquire_keys() const { return {keys->lock, keys->fence, keys->queue, keys->queue_lapses}; }
    // The acquire script's keys and arguments (referring to this hold's strings and the backend's).
    script_call& acquire_call(script_call& call, const dlock_backend* b, int64_t ttl_ms, queue_mode mode) const {
        call.key(keys->lock).key(keys->fence).key(keys->queue).key(keys->queue_lapses);
        call.arg(owner).arg(ttl_ms).arg(script_arg(mode)).arg(b->entry_grace_ms());
        if (kind == DLOCK_HOLD_PERMIT) call.arg(int64_t(permits));
        return call.arg(b->claim_ms()).arg(keys->waiter_channel_prefix);
    }
    // The release script's keys and arguments.
    script_call& release_call(script_call& call, const dlock_backend* b) const {
        call.key(keys->lock).key(keys->fence).key(keys->queue).key(keys->queue_lapses).key(keys->channel);
        call.arg(owner).arg(b->claim_ms()).arg(keys->waiter_channel_prefix);
        if (kind != DLOCK_HOLD_EXCLUSIVE) call.arg(token);  // "" before the grant: found by owner
        return call;
    }
    std::vector<std::string> leave_args(const dlock_backend* b) const {
        return {queue_entry(), std::to_string(b->claim_ms()), keys->waiter_channel_prefix,
                kind == DLOCK_HOLD_PERMIT ? "semaphore" : "lock"};
    }
    // What renew_holds_script compares: the exclusive holder's key value, or the member.
    std::string renewal_member() const { return kind == DLOCK_HOLD_EXCLUSIVE ? owner : owner + ":" + token; }
    char renewal_kind() const { return kind == DLOCK_HOLD_SHARED ? 's' : kind == DLOCK_HOLD_PERMIT ? 'p' : 'x'; }
};

namespace {

const dlock_option_desc redis_options[] = {
    {"endpoint", DLOCK_OPTION_STRING, 0, DLOCK_DSN_HOSTS, "127.0.0.1:6379", "The Redis server, host:port."},
    {"username", DLOCK_OPTION_STRING, 0, DLOCK_DSN_USER, nullptr, "ACL user name (Redis 6+); empty for the default user."},
    {"password", DLOCK_OPTION_STRING, DLOCK_OPTION_SECRET, DLOCK_DSN_PASSWORD, nullptr, "Password for AUTH; empty for none."},
    {"database", DLOCK_OPTION_INT, 0, DLOCK_DSN_PATH, "0", "Database index (SELECT)."},
    {"key_prefix", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, "dlock:", "Prefix of every key dlock writes."},
    {"connect_timeout", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "1s", "Timeout of a TCP connect."},
    {"command_timeout", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "2s", "Timeout of one command's round trip."},
    {"pool_size", DLOCK_OPTION_INT, 0, DLOCK_DSN_NONE, "8", "Connections kept for commands (one thread uses one at a time)."},
};


int redis_create(const dlock_option_value* values, size_t count, const dlock_plugin_host* host, dlock_backend** out,
                 dlock_plugin_error* error) {
    return guarded(error, "redis", [&] {
        auto b = std::make_unique<dlock_backend>();
        dlock::plugin_kit::copy_in(b->host, host, DLOCK_PLUGIN_HOST_V1_SIZE);  // the part its struct_size covers
        const auto* ep = find_option(values, count, "endpoint");
        b->where = parse_endpoint(ep && ep->string_value ? ep->string_value : "127.0.0.1:6379");
        b->config = read_settings(values, count, settings{}, "redis");
        b->connections = std::make_unique<pool>(b->where, b->config);
        {
            // Connect eagerly: a wrong address, password or missing ACL right is an error at open,
            // not at first use.
            auto c = b->connections->borrow();
            check_permissions(*c, b->config, /*waiter_queue=*/true);
            check_server_version(*c, b->config);
            for (const auto& w : hazard_warnings(*c))
                if (b->host.log) b->host.log(b->host.context, 2, w.c_str());
        }
        *out = b.release();
        return DLOCK_OK;
    });
}

void redis_destroy(dlock_backend* b) { delete b; }

uint64_t redis_capabilities(dlock_backend*) {
    return DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_PUSH_WAIT | DLOCK_CAP_TTL | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_SHARED |
           DLOCK_CAP_LIST | DLOCK_CAP_BREAK;
}

void redis_interrupt(dlock_backend* b) {
    dlock::plugin_kit::lock_guard lock(b->waker_mutex);
    b->interrupted = true;
    b->interrupted_changed.notify_all();
    if (b->waker) b->waker->interrupt();
}

struct attempt {
    bool acquired = false;
    uint64_t fence = 0;
    int64_t holder_ttl_ms = -1;  // or, when queued_behind, until the first waiter's entry lapses
    bool queued_behind = false;  // the lock is free, but other waiters queue before us
    int64_t sent_ns = 0;
};

// A failed try whose request the server will never run (its connection was closed by the server,
// or nothing was sent): safe to repeat on a fresh connection. `maybe_set`: the acquire script may
// have run before the close, so our key may exist and is released before the next try.
struct settled_failure {
    failure why;
    bool maybe_set = false;
};

// One run of the acquire script on a connection borrowed until `borrow_deadline_ns`.
// On a transport failure after sending, the outcome is unknown: the lock may be ours.
// - The server closed the connection: it runs nothing more from it. Throws settled_failure; the
//   caller gives the lock back (by owner) on another connection and may try again.
// - A timeout: the script may still be queued on a slow or paused server. The owner-fenced release
//   is written behind it on the same connection, so the server runs both in order whenever it
//   gets to them (a release on another connection could overtake the queued SET and leave our key
//   behind); the failure (DLOCK_UNKNOWN) is thrown. No retry: a retry's grant could be deleted by
//   that queued release.
attempt try_acquire(dlock_backend* b, const dlock_hold& h, int64_t ttl_ms, queue_mode mode, int64_t borrow_deadline_ns) {
    attempt a;
    reply_ptr r;
    {
        std::optional<pool::borrowed> c;
        try {
            c.emplace(b->connections->borrow(borrow_deadline_ns));
        } catch (const failure& f) {
            if (f.status == DLOCK_UNAVAILABLE) throw settled_failure{f, false};  // nothing was sent
            throw;
        }
        a.sent_ns = now_ns();
        try {
            script_call call;
            r = run_script(**c, h.acquire_script(), h.acquire_call(call, b, ttl_ms, mode));
        } catch (const failure& f) {
            if (f.status == DLOCK_UNAVAILABLE) throw settled_failure{f, false};  // e.g. LOADING: nothing ran
            if (f.status != DLOCK_UNKNOWN) throw;
            if ((*c)->closed_by_server()) throw settled_failure{f, true};
            script_call release;
            (*c)->send_behind_pending(h.release_call(release, b).command(h.release_script(), true));
            throw;
        }
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->element[1]->type != REDIS_REPLY_INTEGER)
        fail(DLOCK_BACKEND, fmt::format("redis {}: unexpected reply to the acquire script", b->where.text()));
    if (r->element[0]->integer == -1)
        fail(DLOCK_INVALID_ARGUMENT,
             fmt::format("semaphore `{}` on redis {} has a limit of {} permits, and this acquire asks for {}: every "
                         "client of one semaphore must give the same limit (it is stored while a permit or a waiter lasts)",
                         h.name, b->where.text(), r->element[1]->integer, h.permits));
    a.acquired = r->element[0]->integer == 1;
    if (a.acquired) a.fence = uint64_t(r->element[1]->integer);
    else a.holder_ttl_ms = r->element[1]->integer;
    a.queued_behind = !a.acquired && r->elements > 2 && r->element[2]->integer == 0;
    return a;
}

// try_acquire, repeated after settled failures (a connection the server closed, an unreachable
// server) until `deadline_ns` — or once more for a try-once acquire, so a connection that died
// with a restart costs no error. A key a closed connection may have set is released by owner
// first (its connection is gone, so nothing queued can overtake the release).
attempt acquire_retrying(dlock_backend* b, const dlock_hold& h, int64_t ttl_ms, queue_mode mode, int64_t deadline_ns) {
    bool release_first = false;
    for (int tries = 0;; ++tries) {
        if (b->interrupted) fail(DLOCK_CANCELLED, "redis: client is closing");
        const int64_t now = now_ns();
        const int64_t busy_wait_ns = (b->config.connect_timeout_ms + b->config.command_timeout_ms) * ms_ns;
        const int64_t borrow_deadline = std::max(deadline_ns, now + busy_wait_ns);
        try {
            if (release_first) {
                auto c = b->connections->borrow(borrow_deadline);
                script_call call;
                run_script(*c, h.release_script(), h.release_call(call, b));
                release_first = false;
            }
            return try_acquire(b, h, ttl_ms, mode, borrow_deadline);
        } catch (const settled_failure& f) {
            release_first = release_first || f.maybe_set;
            const int64_t after = now_ns();
            if (deadline_ns == 0 ? tries >= 1 : after >= deadline_ns) {
                if (release_first) {  // best effort: the key, if it was set, expires after ttl
                    try {
                        auto c = b->connections->borrow(after + busy_wait_ns);
                        script_call call;
                        run_script(*c, h.release_script(), h.release_call(call, b));
                    } catch (const failure&) {
                    }
                }
                throw f.why;
            }
            if (f.why.status == DLOCK_UNAVAILABLE && deadline_ns != 0)  // unreachable: wait for the reconnect backoff
                b->sleep_until(std::min(deadline_ns, after + 10 * ms_ns));
        } catch (const failure& f) {
            // Only the release before a retry is retried, and only when it was not sent: a release
            // whose reply was lost may still be queued, and could delete the retry's grant.
            if (!release_first || f.status != DLOCK_UNAVAILABLE) throw;
            const int64_t after = now_ns();
            if (deadline_ns == 0 || after >= deadline_ns) throw;
            b->sleep_until(std::min(deadline_ns, after + 10 * ms_ns));
        }
    }
}

int redis_acquire(dlock_backend* b, const dlock_acquire_request* req, dlock_hold** out_hold, dlock_grant* grant,
                  dlock_plugin_error* error) {
    return guarded(error, "redis", [&] {
        if (b->interrupted) fail(DLOCK_CANCELLED, "redis: client is closing");
        auto h = std::make_unique<dlock_hold>();
        if (DLOCK_STRUCT_COVERS(req, dlock_acquire_request, permits)) {
            h->kind = req->kind;
            h->permits = req->permits;
        }
        if (h->kind > DLOCK_HOLD_PERMIT || (h->kind == DLOCK_HOLD_PERMIT) != (h->permits > 0))
            fail(DLOCK_INVALID_ARGUMENT, fmt::format("redis: acquire of `{}` with kind {} and permits {}", req->name, h->kind, h->permits));
        h->name = req->name;
        h->keys = b->keys_of(req->name, h->kind == DLOCK_HOLD_PERMIT);
        h->owner = req->owner;

        auto finish = [&](const attempt& a) {
            grant->fencing_token = a.fence;
            if (h->kind != DLOCK_HOLD_EXCLUSIVE) h->token = std::to_string(a.fence);
            grant->valid_until_ns = a.sent_ns + req->ttl_ms * 1'000'000 - drift_ns(req->ttl_ms);
            grant->ttl_ms = req->ttl_ms;
            h->valid_until_ns = grant->valid_until_ns;
            *out_hold = h.release();
            return DLOCK_OK;
        };
        auto held_message = [&](const attempt& a) {
            if (h->kind == DLOCK_HOLD_PERMIT)
                return a.queued_behind
                           ? fmt::format("the free permits of semaphore `{}` on redis {} go to the waiters queued before this one",
                                         req->name, b->where.text())
                           : fmt::format("all {} permits of semaphore `{}` are held on redis {} (the first expires in {} ms "
                                         "unless renewed)",
                                         h->permits, req->name, b->where.text(), a.holder_ttl_ms);
            if (a.queued_behind)
                return fmt::format("lock `{}` on redis {} goes to the waiters queued before this one", req->name,
                                   b->where.text());
            return fmt::format("lock `{}` is held on redis {} (expires in {} ms unless renewed)", req->name, b->where.text(),
                               a.holder_ttl_ms);
        };

        const queue_mode mode = !req->fair ? queue_mode::barging
                                : req->deadline_ns == 0 ? queue_mode::fair_try
                                                        : queue_mode::fair_wait;
        // A fair waiter queued by its first attempt leaves the queue unless it got the lock (a
        // timeout, an error): best effort, as its entry lapses anyway. Not when the client is
        // closing, which must not wait on the server: its subscription goes with it, and a release
        // drops a waiter nobody hears.
        auto leave = dlock::plugin_kit::scope_exit([b, queued = mode == queue_mode::fair_wait ? h.get() : nullptr] {
            if (!queued || b->interrupted) return;
            try {
                auto c = b->connections->borrow();
                run_script(*c, leave_queue_script, queued->acquire_keys(), queued->leave_args(b));
            } catch (...) {  // a destructor: nothing may escape
            }
        });

        attempt a = acquire_retrying(b, *h, req->ttl_ms, mode, req->deadline_ns);
        if (a.acquired) {
            leave.release();
            return finish(a);
        }
        if (req->deadline_ns == 0 || now_ns() >= req->deadline_ns) fail(DLOCK_TIMEOUT, held_message(a));

        // A fair waiter is woken on its own channel, by the release that makes it (one of) the next.
        const std::string channel =
            mode == queue_mode::barging ? h->keys->channel : h->keys->waiter_channel_prefix + h->queue_entry();
        subscriber& waker = b->subscriber_for_waits();
        const subscriber::watching watched(waker, channel);
        waker.wait_listening(channel, std::min(req->deadline_ns, now_ns() + b->config.command_timeout_ms * ms_ns));
        // While the subscription is not confirmed a release may go unheard: retry on a timer,
        // 10 ms doubling to 200 ms, until it is.
        int64_t unheard_retry_ms = 10;
        for (;;) {
            if (b->interrupted) fail(DLOCK_CANCELLED, "redis: client is closing");
            // Both read before the retry: no lost wake-up.
            const bool hearing = waker.wait_listening(channel, 0);
            const uint64_t seen = waker.generation(channel);
            uint64_t seen_hints = waker.hints(channel);
            a = acquire_retrying(b, *h, req->ttl_ms, mode, req->deadline_ns);
            if (a.acquired) {
                leave.release();
                return finish(a);
            }
            const int64_t now = now_ns();
            if (now >= req->deadline_ns) fail(DLOCK_TIMEOUT, held_message(a));
            // Retry at the latest when the holder's key expires (-1: no expiry set by someone else's
            // write; -2: it vanished just now).
            int64_t until = a.holder_ttl_ms >= 0 ? now + (a.holder_ttl_ms + 1) * ms_ns
                            : a.holder_ttl_ms == -2 ? now : forever_ns;
            if (hearing) {
                unheard_retry_ms = 10;
            } else {
                until = std::min(until, now + unheard_retry_ms * ms_ns);
                unheard_retry_ms = std::min<int64_t>(unheard_retry_ms * 2, 200);
            }
            // A hint (this waiter is the standby of a first waiter just woken): retry when that
            // one's claim lapses, unless a wake-up comes first — it may never come (paused).
            for (;;) {
                waker.wait_change(channel, seen, std::min(req->deadline_ns, until), &seen_hints);
                if (b->interrupted || waker.generation(channel) != seen || now_ns() >= std::min(req->deadline_ns, until)) break;
                seen_hints = waker.hints(channel);
                until = std::min(until, now_ns() + (b->claim_ms() + 1) * ms_ns);
            }
        }
    });
}

// A release whose first attempt went unanswered (UNKNOWN) but was sent while the lease was valid,
// and whose retry finds the lease no longer ours (the script's 0: no key or no member of ours; -1:
// another holder's value or string) answers RELEASED: that attempt may have run and removed it, and
// another holder may have taken the name since — a fair waiter our own release woke (as etcd,
// zookeeper and sql; docs/guarantees.md, "Releases in doubt"). Only proof that the first attempt
// did not run answers LOST: our own expired member still in the set (-2), or a break's tombstone
// (-3). Not in doubt, anything but 1 is LOST.
int redis_release(dlock_backend* b, dlock_hold* h, dlock_plugin_error* error) {
    return guarded(error, "redis", [&] {
        auto c = b->connections->borrow();
        script_call call;
        const int64_t sent = now_ns();
        reply_ptr r;
        try {
            r = run_script(*c, h->release_script(), h->release_call(call, b));
        } catch (const failure& f) {
            if (f.status == DLOCK_UNKNOWN && h->release_in_doubt_sent_ns == 0) h->release_in_doubt_sent_ns = sent;
            throw;
        }
        if (r->type != REDIS_REPLY_INTEGER) fail(DLOCK_UNKNOWN, "redis: unexpected reply to the release script");
        if (r->integer == 1) return DLOCK_OK;
        const bool in_doubt = h->release_in_doubt_sent_ns != 0 && h->release_in_doubt_sent_ns < h->valid_until_ns;
        const bool proof_not_run = r->integer <= -2;
        return in_doubt && !proof_not_run ? DLOCK_OK : DLOCK_LOST;
    });
}

void redis_hold_destroy(dlock_backend*, dlock_hold* h) { delete h; }

int redis_renew(dlock_backend* b, dlock_renewal* renewals, size_t count, dlock_plugin_error* error) {
    return guarded(error, "redis", [&] {
        std::vector<std::string> keys, args;
        for (size_t i = 0; i < count; ++i) {
            const dlock_hold* h = renewals[i].hold;
            keys.push_back(h->keys->lock);
            args.push_back(std::string(1, h->renewal_kind()));
            args.push_back(h->renewal_member());
            args.push_back(std::to_string(renewals[i].ttl_ms));
        }
        // Renewal is idempotent: a failure on a connection the server closed is retried once on a
        // fresh one, so a restart is learnt (LOST) at this renewal, not the next.
        int64_t sent = 0;
        reply_ptr r;
        for (int tries = 0; !r; ++tries) {
            auto c = b->connections->borrow();
            sent = now_ns();
            try {
                r = run_script(*c, renew_holds_script, keys, args);
            } catch (const failure& f) {
                if (f.status != DLOCK_UNKNOWN || !c->closed_by_server() || tries > 0) throw;
            }
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements != count) fail(DLOCK_UNKNOWN, "redis: unexpected reply to the renew script");
        for (size_t i = 0; i < count; ++i) {
            const bool ours = r->element[i]->integer == 1;
            renewals[i].status = ours ? DLOCK_OK : DLOCK_LOST;
            renewals[i].valid_until_ns = sent + renewals[i].ttl_ms * 1'000'000 - drift_ns(renewals[i].ttl_ms);
            if (ours) renewals[i].hold->valid_until_ns = renewals[i].valid_until_ns;
        }
        return DLOCK_OK;
    });
}

int redis_inspect(dlock_backend* b, const char* name, dlock_lock_info* info, dlock_plugin_error* error) {
    return guarded(error, "redis", [&] {
        const lock_keys keys = keys_for(b->config.key_prefix, name);
        auto c = b->connections->borrow();
        reply_ptr r = run_script(*c, inspect_script, {keys.lock, keys.fence}, {});
        if (r->type != REDIS_REPLY_ARRAY || r->elements < 2) fail(DLOCK_BACKEND, "redis: unexpected reply to the inspect script");
        const redisReply* owner = r->element[0];
        info->held = owner->type == REDIS_REPLY_STRING;
        if (info->held) {
            const size_t n = std::min(owner->len, sizeof info->holder - 1);
            std::memcpy(info->holder, owner->str, n);
            info->holder[n] = '\0';
            info->ttl_left_ms = r->element[1]->integer >= 0 ? r->element[1]->integer : -1;
        }
        if (r->elements > 2 && r->element[2]->type == REDIS_REPLY_STRING)
            info->fencing_token = std::strtoull(r->element[2]->str, nullptr, 10);
        return DLOCK_OK;
    });
}

// Visits every live holder of the lock or semaphore `name`; false when the visitor asked to stop.
bool visit_holders(dlock_backend* b, connection& c, const std::string& name, bool semaphore, dlock_holder_visitor visit,
                   void* user_data) {
    const lock_keys keys =
        semaphore ? semaphore_keys_for(b->config.key_prefix, name) : keys_for(b->config.key_prefix, name);
    reply_ptr r = run_script(c, holders_script, {keys.lock, keys.fence}, {semaphore ? "semaphore" : "lock"});
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 5 != 0)
        fail(DLOCK_BACKEND, fmt::format("redis {}: unexpected reply to the holders script", b->where.text()));
    for (size_t i = 0; i < r->elements; i += 5) {
        dlock_holder_info info{};
        info.struct_size = sizeof info;
        info.name = name.c_str();
        const std::string kind = element_text(r->element[i]);
        info.kind = kind == "x" ? DLOCK_HOLD_EXCLUSIVE : kind == "s" ? DLOCK_HOLD_SHARED : DLOCK_HOLD_PERMIT;
        const std::string owner = element_text(r->element[i + 1]);
        std::memcpy(info.holder, owner.data(), std::min(owner.size(), sizeof info.holder - 1));
        info.fencing_token = std::strtoull(element_text(r->element[i + 2]).c_str(), nullptr, 10);
        const int64_t left = std::strtoll(element_text(r->element[i + 3]).c_str(), nullptr, 10);
        info.ttl_left_ms = left >= 0 ? left : -1;
        info.permits = uint32_t(std::strtoul(element_text(r->element[i + 4]).c_str(), nullptr, 10));
        if (visit(&info, user_data) != 0) return false;
    }
    return true;
}

int redis_holders(dlock_backend* b, const char* name, int semaphore, dlock_holder_visitor visit, void* user_data,
                  dlock_plugin_error* error) {
    return guarded(error, "redis", [&] {
        auto c = b->connections->borrow();
        visit_holders(b, *c, name, semaphore != 0, visit, user_data);
        return DLOCK_OK;
    });
}

// SCAN MATCH over the keys of names that start with `prefix` (never KEYS, which blocks the server
// for the whole keyspace), then each name's holders. Key names carry the dlock name (%XX-escaped),
// so every name is recovered from its key.
int redis_list(dlock_backend* b, const char* prefix, dlock_holder_visitor visit, void* user_data, dlock_plugin_error* error) {
    return guarded(error, "redis", [&] {
        const std::string pattern = scan_pattern_for(b->config.key_prefix, prefix);
        auto c = b->connections->borrow();
        std::set<std::pair<std::string, bool>> found;  // (name, semaphore); SCAN may return a key twice
        std::string cursor = "0";
        do {
            reply_ptr r = c->command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
            if (r->type == REDIS_REPLY_ERROR) {
                const failure f = classify_error_reply(b->where.text(), std::string(r->str, r->len));
                if (f.status != DLOCK_PERMISSION) throw f;
                fail(DLOCK_PERMISSION, fmt::format("redis {}: ACL user `{}` may not list locks ({}); listing needs `+scan` "
                                                   "(it reveals every key name of the database: grant it to operators only)",
                                                   b->where.text(), b->config.username.empty() ? "default" : b->config.username,
                                                   std::string(r->str, r->len)));
            }
            if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[1]->type != REDIS_REPLY_ARRAY)
                fail(DLOCK_BACKEND, fmt::format("redis {}: unexpected reply to SCAN", b->where.text()));
            cursor = element_text(r->element[0]);
            for (size_t i = 0; i < r->element[1]->elements; ++i) {
                auto named = name_of_key(b->config.key_prefix, element_text(r->element[1]->element[i]));
                if (named && named->first.compare(0, std::strlen(prefix), prefix) == 0) found.insert(*named);
            }
        } while (cursor != "0");
        for (const auto& [name, semaphore] : found)
            if (!visit_holders(b, *c, name, semaphore, visit, user_data)) break;
        return DLOCK_OK;
    });
}

int redis_break(dlock_backend* b, const char* name, int semaphore, size_t* out_broken, dlock_plugin_error* error) {
    return guarded(error, "redis", [&] {
        const lock_keys keys =
            semaphore ? semaphore_keys_for(b->config.key_prefix, name) : keys_for(b->config.key_prefix, name);
        auto c = b->connections->borrow();
        reply_ptr r;
        try {
            r = run_script(*c, break_script, {keys.lock, keys.fence, keys.queue, keys.queue_lapses, keys.channel},
                           {semaphore ? "semaphore" : "lock", std::to_string(b->claim_ms()), keys.waiter_channel_prefix});
        } catch (const failure& f) {
            if (f.status != DLOCK_PERMISSION) throw;
            fail(DLOCK_PERMISSION, fmt::format("redis {}: ACL user `{}` may not break `{}`: breaking needs `+unlink` on dlock's "
                                               "keys, an administrator's right (docs/backends/redis.md); {}",
                                               b->where.text(), b->config.username.empty() ? "default" : b->config.username, name,
                                               f.message));
        }
        if (r->type != REDIS_REPLY_INTEGER) fail(DLOCK_UNKNOWN, "redis: unexpected reply to the break script");
        if (out_broken) *out_broken = size_t(r->integer);
        return DLOCK_OK;
    });
}

constexpr dlock_plugin redis_plugin = {
    sizeof(dlock_plugin),
    2,
    "redis",
    "One Redis server: SET NX PX + INCR fence in one Lua script; pub/sub wake-ups; TTL leases renewed by the keeper.",
    redis_options,
    sizeof redis_options / sizeof redis_options[0],
    redis_create,
    redis_destroy,
    redis_capabilities,
    redis_interrupt,
    redis_acquire,
    redis_release,
    redis_hold_destroy,
    redis_renew,
    redis_inspect,
    redis_holders,
    redis_list,
    redis_break,
};
constexpr dlock_plugin redis_plugin_v1_view = dlock::plugin_kit::as_version_1(redis_plugin);

}  // namespace

extern "C" DLOCK_PLUGIN_EXPORT int dlock_plugin_negotiate(uint32_t host_max_version, const dlock_plugin** out,
                                                          uint32_t* out_min_version) {
    return dlock::plugin_kit::negotiate_v2(host_max_version, &redis_plugin, &redis_plugin_v1_view, out, out_min_version);
}
