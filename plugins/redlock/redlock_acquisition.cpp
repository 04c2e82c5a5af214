// The acquire of the `redlock` backend: rounds until one wins a quorum (acquire_round), and between
// them the waits the algorithm calls for (redlock_plugin.cpp, "Waiting"). One `acquisition` per
// call: run() is the round loop; the wait after a refused round is chosen by the round's outcome
// (wait_after_split_vote, wait_for_release, wait_for_quorum_of_wakes); what a refused round left on
// the nodes (a queue entry, a waiting writer's mark, a watched channel) is undone on every way out
// but a grant (leave_queues, unmark_writer_quietly, unwatch_broadcast).
#include "redlock_backend.hpp"
#include <dlock/plugin_kit/scope_exit.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>

namespace dlock::redlock {

namespace {

// The waiting thread's queue member: random, fixed for the thread's life. A thread waits for one
// lock at a time, so its channel (subscribed once per client) serves all its waits.
const std::string& waiting_thread_id() {
    thread_local const std::string id = [] {
        std::random_device seed;
        std::mt19937_64 rng{(uint64_t(seed()) << 32) ^ seed()};
        return fmt::format("{:016x}{:016x}", rng(), rng());
    }();
    return id;
}

using waker_set = std::vector<std::unique_ptr<subscriber>>;

// One subscriber per node, made on the first wait. A holder's release publishes on every node where
// its key was, a quorum while the lease held; a waiter listening on a quorum therefore hears it on
// at least one node, whichever minority of nodes is down, paused or lost its key.
const waker_set& wakers_for(dlock_backend* b) {
    plugin_kit::lock_guard lock(b->waker_mutex);
    if (b->wakers.empty()) {
        waker_set made;
        for (const auto& nd : b->nodes)
            made.push_back(std::make_unique<subscriber>(nd.where, b->config, [b] {
                plugin_kit::lock_guard wake(b->sleep_mutex);
                for (auto* s : b->sleepers)
                    if (!s->fired && s->ready()) {
                        s->fired = true;
                        s->cv.notify_one();
                    }
            }));
        b->wakers = std::move(made);
    }
    return b->wakers;
}

// Messages heard on `channel` over every node, each lost subscription counted as one: it changes
// whenever a release may have been missed.
uint64_t heard(const waker_set& wakers, const std::string& channel) {
    uint64_t sum = 0;
    for (const auto& s : wakers) sum += s->generation(channel);
    return sum;
}

// Nodes whose subscription to `channel` is confirmed now (a deadline in the past only asks).
size_t listening(const waker_set& wakers, const std::string& channel) {
    size_t n = 0;
    for (const auto& s : wakers) n += s->wait_listening(channel, 0) ? 1 : 0;
    return n;
}

// Waits until `done()`, interrupt() or `until_ns`; every waker's change re-checks `done` (on the
// waker's thread, under sleep_mutex). Returns after the first time `done()` was found true, so a
// condition that records something when it turns true ends the wait once.
template <typename Done>
void wait_for_wakers(dlock_backend* b, int64_t until_ns, Done&& done) {
    plugin_kit::unique_lock lock(b->sleep_mutex);
    if (b->interrupted.load() || done()) return;
    dlock_backend::sleeper me;
    me.ready = [&] { return done(); };
    b->sleepers.insert(&me);
    const auto until = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(until_ns));
    while (!me.fired && !b->interrupted.load())
        if (me.cv.wait_until(lock.std(), until) == std::cv_status::timeout) break;
    b->sleepers.erase(&me);
}

// One acquire: the hold it builds, its place in the nodes' queues, what wakes it and what it left
// on the nodes that must go if it ends without the lock.
class acquisition {
public:
    acquisition(dlock_backend* b, const dlock_acquire_request* req) : b_(b), req_(req) {}

    int run(dlock_hold** out_hold, dlock_grant* grant);

private:
    // What the waiter had heard before a round: a wake-up counts from before the round, so a
    // release the round raced is not missed.
    struct heard_before {
        uint64_t any = 0;            // heard_since()
        std::vector<uint64_t> own;   // own_heard() (an exclusive waiter's)
        uint64_t hints = 0;          // own_hints()
        uint64_t broadcast = 0;      // the name's channel, when an exclusive waiter watches it
    };

    void prepare();
    void listen_before_first_round();
    heard_before hear_before_round() const;
    int grant_hold(const round_result& r, const std::string& value, dlock_hold** out_hold, dlock_grant* grant);
    [[noreturn]] void fail_out_of_time(const round_result& r) const;
    bool rechoose_score(const round_result& r);
    void start_listening();
    void wait_after_split_vote(const heard_before& seen, int64_t now);
    void wait_for_release(const round_result& r, heard_before& seen, int64_t now);
    void wait_for_quorum_of_wakes(int64_t until, heard_before& seen);
    void mark_writer(int64_t keep_ms);
    void leave_queues() noexcept;
    void unmark_writer_quietly() noexcept;
    void unwatch_broadcast() noexcept;
    void watch_broadcast();
    uint64_t heard_since() const;
    std::vector<uint64_t> own_heard() const;
    uint64_t own_hints() const;
    size_t nodes_heard_since(const std::vector<uint64_t>& seen_own) const;

    dlock_backend* const b_;
    const dlock_acquire_request* const req_;
    std::unique_ptr<dlock_hold> h_;
    queue_place place_;  // an exclusive acquisition's place in the nodes' queues (none for a shared one)
    // What wakes this waiter: an exclusive one its thread's own channel (the release that makes
    // it first in a node's queue publishes there), a shared one the name's channel (broadcast_), on
    // which every release publishes; an exclusive one held up by shared holders listens there too.
    std::string own_channel_, broadcast_;
    const std::string* channel_ = nullptr;  // &own_channel_ or &broadcast_
    const waker_set* wakers_ = nullptr;     // once it listens
    bool broadcast_watched_ = false;
    bool queued_ = false;  // a refused round queued it: it leaves the queues unless it gets the lock
    bool marked_ = false;  // it marked itself as a waiting writer on the nodes
};

int acquisition::run(dlock_hold** out_hold, dlock_grant* grant) {
    prepare();
    auto unwatch = plugin_kit::scope_exit([this]() noexcept { unwatch_broadcast(); });
    listen_before_first_round();
    auto leave = plugin_kit::scope_exit([this]() noexcept { leave_queues(); });
    auto unmark = plugin_kit::scope_exit([this]() noexcept { unmark_writer_quietly(); });
    for (uint64_t round = 1;; ++round) {
        heard_before seen = hear_before_round();
        const std::string value = round_value(h_->owner, round);
        const round_result r = acquire_round(b_, *h_, value, req_->ttl_ms, place_);
        if (r.acquired) return grant_hold(r, value, out_hold, grant);
        if (place_.queues()) queued_ = true;
        const int64_t now = now_ns();
        if (req_->deadline_ns == 0 || now >= req_->deadline_ns) fail_out_of_time(r);
        if (b_->interrupted) fail(DLOCK_CANCELLED, "redlock: client is closing");
        if (rechoose_score(r)) continue;
        // Marked again by every refused round once marked: a reader kept from a free lock by the
        // mark shortens it to a mark refresh (shared_acquire_script), and this round, run on hearing the
        // release the reader heard, or when its sleep (shorter than the mark) ends, keeps it.
        if (!h_->shared && (r.held_shared > 0 || marked_))
            mark_writer(std::max<int64_t>(r.min_holder_ttl_ms, 0) + 2 * b_->config.command_timeout_ms + b_->retry_delay_ms);
        if (!wakers_) {
            start_listening();
            continue;
        }
        // Shared holders publish only on the name's channel when they leave.
        if (!h_->shared && r.held_shared > 0 && !broadcast_watched_) {
            watch_broadcast();
            continue;  // a release before the subscription could have gone unheard
        }
        // A split vote (some node granted, yet no quorum, and no quorum holds the lock) or too few
        // nodes answering: no release is coming.
        if ((r.granted > 0 && r.held < b_->quorum) || r.answered < b_->quorum) {
            wait_after_split_vote(seen, now);
            continue;
        }
        wait_for_release(r, seen, now);
    }
}

// The hold, its keys and its place in the queues; refuses what redlock cannot grant.
void acquisition::prepare() {
    if (b_->interrupted) fail(DLOCK_CANCELLED, "redlock: client is closing");
    // Validity is ttl - elapsed - drift: a ttl the drift alone uses up could never be granted,
    // and waiting for it would only end in a misleading TIMEOUT.
    if (!ttl_leaves_validity(req_->ttl_ms))
        fail(DLOCK_INVALID_ARGUMENT, fmt::format("redlock: ttl {} ms leaves no validity after the clock-drift allowance "
                                                 "({} ms = ttl/100 + 2 ms); use a ttl of at least several round trips",
                                                 req_->ttl_ms, drift_ns(req_->ttl_ms) / 1'000'000.0));
    h_ = std::make_unique<dlock_hold>();
    if (DLOCK_STRUCT_COVERS(req_, dlock_acquire_request, permits) && req_->kind != DLOCK_HOLD_EXCLUSIVE) {
        if (req_->kind != DLOCK_HOLD_SHARED)
            fail(DLOCK_NOT_SUPPORTED, "redlock: no semaphores — a per-node permit count is not safe (docs/backends/redlock.md)");
        h_->shared = true;
    }
    h_->keys = keys_for(b_->config.key_prefix, req_->name);
    h_->acquire_keys = acquire_keys(h_->keys, h_->shared);
    h_->release_keys = release_keys(h_->keys, h_->shared);
    h_->owner = req_->owner;
    if (!h_->shared) {
        place_.mode = redlock_queue_mode(req_->fair, req_->deadline_ns != 0);
        place_.member = waiting_thread_id();
        place_.arrival_us = now_ns() / 1000;
        place_.offset_us = b_->score_offset_us.load();
        place_.score = std::to_string(place_.arrival_us + place_.offset_us);
    }
    own_channel_ = b_->waiter_channel_prefix() + place_.member;
    broadcast_ = h_->keys.channel;
    channel_ = h_->shared ? &broadcast_ : &own_channel_;
}

// The thread's own channel stays watched once it is: wait on it from the first round. An
// exclusive acquire that may wait subscribes it before its first round (once per thread and
// client), so that a round refused while a quorum listens needs no second round to cover a
// release it could have missed while subscribing.
void acquisition::listen_before_first_round() {
    if (!h_->shared && place_.queues()) {
        wakers_ = &wakers_for(b_);
        bool fresh = false;
        {
            plugin_kit::lock_guard lock(b_->waker_mutex);
            fresh = b_->waiter_channels.insert(own_channel_).second;
            if (fresh)
                for (const auto& s : *wakers_) s->watch(own_channel_);
        }
        if (fresh)
            wait_for_wakers(b_, std::min(req_->deadline_ns, now_ns() + command_timeout_ns(b_)),
                            [&] { return listening(*wakers_, *channel_) >= b_->quorum; });
    } else if (!h_->shared) {
        plugin_kit::lock_guard lock(b_->waker_mutex);
        if (b_->waiter_channels.count(own_channel_)) wakers_ = &b_->wakers;
    }
}

acquisition::heard_before acquisition::hear_before_round() const {
    heard_before seen;
    seen.any = wakers_ ? heard_since() : 0;
    if (!h_->shared) seen.own = own_heard();
    seen.hints = h_->shared ? 0 : own_hints();
    seen.broadcast = wakers_ && broadcast_watched_ && !h_->shared ? heard(*wakers_, broadcast_) : 0;
    return seen;
}

// The round writing `value` won: the hold is the caller's.
int acquisition::grant_hold(const round_result& r, const std::string& value, dlock_hold** out_hold, dlock_grant* grant) {
    h_->value = value;
    h_->place = place_;
    queued_ = false;  // the grants dequeued it; its release drops what other nodes keep
    if (marked_) {  // unmarked before the hold is handed out
        marked_ = false;
        try {
            on_all_nodes(b_, mark_waiting_writer_script, acquire_keys(h_->keys, true), {h_->owner, "0", "unmark"},
                         command_timeout_ns(b_));
        } catch (const failure&) {
        }
    }
    grant->fencing_token = 0;
    grant->valid_until_ns = valid_until_ns(r.sent_ns, req_->ttl_ms);
    h_->valid_until_ns = grant->valid_until_ns;
    grant->ttl_ms = req_->ttl_ms;
    *out_hold = h_.release();
    return DLOCK_OK;
}

// A refused round and no time left to wait: why.
void acquisition::fail_out_of_time(const round_result& r) const {
    if (!r.error.empty() && r.answered < b_->quorum) fail(r.error_status, r.error);
    if (r.answered < b_->quorum)
        fail(DLOCK_UNAVAILABLE, fmt::format("redlock: only {} of {} nodes answered ({}); a quorum of {} is needed", r.answered,
                                            b_->nodes.size(), b_->names(), b_->quorum));
    fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held (granted by {} of {} nodes, quorum {})", req_->name, r.granted,
                                    b_->nodes.size(), b_->quorum));
}

// The first refused round measures the offset the score was chosen with (the nodes' TIME in its
// replies): if it moved (this machine was suspended, a node's clock was stepped), the score is
// chosen again and the next round, at once (true), moves the entries there. A score stands wrong
// for one round at most.
bool acquisition::rechoose_score(const round_result& r) {
    if (!place_.queues() || place_.offset_checked) return false;
    const auto measured = measured_score_offset_us(r.server_us, r.sent_ns, r.received_ns);
    if (!measured) return false;
    place_.offset_checked = true;
    b_->score_offset_us = *measured;
    if (!score_offset_moved(place_.offset_us, *measured, r.received_ns - r.sent_ns)) return false;
    place_.offset_us = *measured;
    place_.score = std::to_string(place_.arrival_us + place_.offset_us);
    return true;
}

// The first refused round of an acquire that does not listen yet: subscribes, then retries once a
// quorum listens, since a release after that cannot go unheard.
void acquisition::start_listening() {
    wakers_ = &wakers_for(b_);
    if (h_->shared) {
        watch_broadcast();
    } else {
        plugin_kit::lock_guard lock(b_->waker_mutex);
        if (b_->waiter_channels.insert(own_channel_).second)
            for (const auto& s : *wakers_) s->watch(own_channel_);
    }
    wait_for_wakers(b_, std::min(req_->deadline_ns, now_ns() + command_timeout_ns(b_)),
                    [&] { return listening(*wakers_, *channel_) >= b_->quorum; });
}

// After a split vote or too few nodes answering: a random part of retry_delay (at least 1 ms: never
// a spin), so that waiters that split the vote do not split the next one in lockstep as well. (The
// round's give-back put this waiter back in the queues; the refusing nodes queued it.) A wake ends
// the pause: a waiter's give-back wakes the first waiter where the giver was not first, and that
// waiter then retries at once.
void acquisition::wait_after_split_vote(const heard_before& seen, int64_t now) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    const int64_t jitter_ns = int64_t(rng() % uint64_t(std::max<int64_t>(b_->retry_delay_ms, 1))) * 1'000'000;
    wait_for_wakers(b_, std::min(now + std::max<int64_t>(jitter_ns, 1'000'000), req_->deadline_ns),
                    [&] { return heard_since() != seen.any; });
}

// Held, or free but promised to waiters queued first: waits for the release that wakes this waiter
// (a message), the holders' expiry or the first waiter's claim lapsing, or the retry time; the
// caller then retries at once.
void acquisition::wait_for_release(const round_result& r, heard_before& seen, int64_t now) {
    int64_t until = r.min_holder_ttl_ms >= 0 ? now + (r.min_holder_ttl_ms + 1) * 1'000'000 : now + b_->retry_delay_ms * 1'000'000;
    // Fewer than a quorum listening could miss the release: poll until they are back.
    if (listening(*wakers_, *channel_) < b_->quorum) until = std::min(until, now + b_->retry_delay_ms * 1'000'000);
    until = std::min(until, req_->deadline_ns);
    if (h_->shared || seen.own.size() != b_->nodes.size()) {
        wait_for_wakers(b_, until, [&] { return heard_since() != seen.any; });
        return;
    }
    wait_for_quorum_of_wakes(until, seen);
}

// An exclusive waiter retries once a quorum of nodes woke it (or the name's channel spoke: shared
// holders left): retrying at the first node's message would mostly be refused by the nodes that
// have not run the release yet, a round and its give-backs for nothing. Woken by fewer nodes, it
// retries after retry_delay at most (the others may never wake it: its entry lost there, or a
// give-back that woke it on some nodes). A hint (it is the standby of a first waiter just woken)
// makes it retry when that one's claim lapses, unless woken first: the first waiter may never come
// (paused).
void acquisition::wait_for_quorum_of_wakes(int64_t until, heard_before& seen) {
    int64_t first_heard_ns = 0;
    for (;;) {
        const int64_t limit = first_heard_ns ? std::min(until, first_heard_ns + b_->retry_delay_ms * 1'000'000) : until;
        bool decided = false, hinted = false;
        wait_for_wakers(b_, limit, [&] {
            if (broadcast_watched_ && heard(*wakers_, broadcast_) != seen.broadcast) return decided = true;
            const size_t n = nodes_heard_since(seen.own);
            if (n >= b_->quorum) return decided = true;
            if (n > 0 && first_heard_ns == 0) {
                first_heard_ns = now_ns();
                return true;  // waits again, until a quorum or retry_delay from now
            }
            if (own_hints() != seen.hints) return hinted = true;
            return false;
        });
        if (decided || b_->interrupted) break;
        if (hinted) {
            seen.hints = own_hints();
            until = std::min(until, now_ns() + (b_->claim_ms() + 1) * 1'000'000);
            continue;
        }
        if (now_ns() >= limit) break;
    }
}

// A waiting exclusive acquirer marks itself on the nodes so that new shared holders wait behind
// it (writer preference), and unmarks itself however the wait ends (unmark_writer_quietly, or
// grant_hold before the hold is handed out).
void acquisition::mark_writer(int64_t keep_ms) {
    marked_ = true;
    on_all_nodes(b_, mark_waiting_writer_script, acquire_keys(h_->keys, true), {h_->owner, std::to_string(keep_ms), "mark"},
                 command_timeout_ns(b_));
}

// A waiter queued by a round leaves the queues unless it got the lock (a timeout, an error): best
// effort, as its entries lapse anyway; and the waiter after it is woken if the lock is free. Not
// when the client is closing, which must not wait on the servers.
void acquisition::leave_queues() noexcept {
    if (!queued_ || b_->interrupted) return;
    try {
        const lock_keys fifo = fifo_keys(h_->keys);
        on_all_nodes(b_, leave_queue_script, {fifo.lock, fifo.fence, fifo.queue, fifo.queue_lapses},
                     {place_.member, std::to_string(b_->claim_ms()), b_->waiter_channel_prefix(), "lock"}, command_timeout_ns(b_));
    } catch (...) {  // runs on the way out: nothing escapes
    }
}

void acquisition::unmark_writer_quietly() noexcept {
    if (!marked_ || b_->interrupted) return;
    try {
        on_all_nodes(b_, mark_waiting_writer_script, acquire_keys(h_->keys, true), {h_->owner, "0", "unmark"},
                     command_timeout_ns(b_));
    } catch (...) {  // runs on the way out: nothing escapes; the mark lapses anyway
    }
}

void acquisition::unwatch_broadcast() noexcept {
    if (wakers_ && broadcast_watched_)
        for (const auto& s : *wakers_) s->unwatch(broadcast_);
}

void acquisition::watch_broadcast() {
    if (broadcast_watched_) return;
    for (const auto& s : *wakers_) s->watch(broadcast_);
    broadcast_watched_ = true;
}

uint64_t acquisition::heard_since() const {
    return heard(*wakers_, *channel_) + (broadcast_watched_ && !h_->shared ? heard(*wakers_, broadcast_) : 0);
}

// What an exclusive waiter heard on its own channel, node by node: a release wakes it on each node
// as that node runs the release, and its round can win only once a quorum of nodes did (a node
// still holding the old holder's key refuses it).
std::vector<uint64_t> acquisition::own_heard() const {
    std::vector<uint64_t> per_node;
    if (wakers_)
        for (const auto& s : *wakers_) per_node.push_back(s->generation(own_channel_));
    return per_node;
}

// Hints on its own channel (standby_message), summed over the nodes: it is the standby of a first
// waiter just woken.
uint64_t acquisition::own_hints() const {
    uint64_t sum = 0;
    if (wakers_)
        for (const auto& s : *wakers_) sum += s->hints(own_channel_);
    return sum;
}

size_t acquisition::nodes_heard_since(const std::vector<uint64_t>& seen_own) const {
    size_t n = 0;
    for (size_t i = 0; i < seen_own.size(); ++i) n += (*wakers_)[i]->generation(own_channel_) != seen_own[i] ? 1 : 0;
    return n;
}

}  // namespace

int redlock_acquire(dlock_backend* b, const dlock_acquire_request* req, dlock_hold** out_hold, dlock_grant* grant,
                    dlock_plugin_error* error) {
    return guarded(error, "redlock", [&] { return acquisition(b, req).run(out_hold, grant); });
}

}  // namespace dlock::redlock
