// The etcd backend's janitor thread (see etcd_backend.hpp): it deletes the keys of holds whose
// validity ended without a renewal and keys a failed call left behind, gives holders their own-key
// watch, re-checks holds whose own-key watch was reset, and repeats the touches of admitted permits
// that failed (the next waiter waits for one).
#include "etcd_backend.hpp"

#include <fmt/format.h>

#include <algorithm>

void dlock_backend::start_janitor() {
    dlock::plugin_kit::lock_guard lock(state_mutex);
    if (janitor_started) return;
    janitor_started = true;
    janitor = std::thread([this] { janitor_loop(); });
}

void dlock_backend::add_orphan(orphan o) {
    dlock::plugin_kit::lock_guard lock(state_mutex);
    orphans.push_back(std::move(o));
    janitor_wake.notify_all();
}

void dlock_backend::janitor_loop() {
    dlock::plugin_kit::unique_lock lock(state_mutex);
    int64_t orphan_retry_at = 0;
    int64_t touch_retry_at = 0;
    // A failed touch is repeated soon: a waiter behind it is parked beside a free permit meanwhile.
    constexpr int64_t touch_retry_ns = 100 * ns_per_ms;
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
        std::vector<std::shared_ptr<acquisition>> to_check, to_touch;
        to_check.swap(rechecks);
        if (!touches.empty()) {
            if (now >= touch_retry_at) to_touch.swap(touches);
            else next = std::min(next, touch_retry_at);
        }
        if (expired.empty() && to_delete.empty() && to_check.empty() && to_watch.empty() && to_touch.empty()) {
            janitor_wakes_at = next;
            if (next == forever_ns) janitor_wake.wait(lock.std());
            else janitor_wake.wait_until(lock.std(), steady_time(next));
            janitor_wakes_at = INT64_MIN;
            continue;
        }
        lock.unlock();
        for (const auto& a : expired) {
            int64_t own = 0;
            {
                dlock::plugin_kit::lock_guard guard(state_mutex);
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
        std::vector<std::shared_ptr<acquisition>> untouched;
        for (const auto& a : to_touch) {
            {
                dlock::plugin_kit::lock_guard guard(state_mutex);
                if (a->gone) continue;  // released, lost or abandoned: nobody waits for its touch
            }
            try {
                touch_key(*a, call_options{false, 0, now_ns() + config.request_timeout_ms * ns_per_ms, DLOCK_UNAVAILABLE});
                log(1, fmt::format("etcd: permit of semaphore `{}`: the next waiter woken from the background", a->name));
            } catch (const failure& f) {
                if (f.message.find("requested lease not found") != std::string::npos) continue;  // the key went with its lease
                untouched.push_back(a);
            }
        }
        // From the revision after our key's creation: a deletion since then is delivered at once.
        for (const auto& a : to_watch) watch_own_key(a, a->revision + 1);
        lock.lock();
        if (!failed.empty()) {
            orphans.insert(orphans.end(), failed.begin(), failed.end());
            orphan_retry_at = now_ns() + 1000 * ns_per_ms;
        }
        if (!untouched.empty()) {
            touches.insert(touches.end(), untouched.begin(), untouched.end());
            touch_retry_at = now_ns() + touch_retry_ns;
        }
    }
}

void dlock_backend::recheck_own_key(const std::shared_ptr<acquisition>& a) {
    pb::RangeRequest range;
    range.set_key(a->key);
    pb::RangeResponse response;
    try {
        conn->call("check a held key", [&](member& m, grpc::ClientContext& context) { return m.kv->Range(&context, range, &response); });
    } catch (const failure&) {
        dlock::plugin_kit::lock_guard lock(state_mutex);
        rechecks.push_back(a);  // try again with the next wake-up
        return;
    }
    const bool ours = response.kvs_size() == 1 && response.kvs(0).create_revision() == a->revision;
    bool lost = false;
    {
        dlock::plugin_kit::lock_guard lock(state_mutex);
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
