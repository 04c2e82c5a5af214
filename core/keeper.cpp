// The lease keeper and the lost-callback dispatcher of a client (dlock_internal/keeper.hpp), and
// the rules by which a hold becomes LOST: its validity over, a renewal answering LOST, or the
// backend reporting it.
#include "dlock_internal/client.hpp"
#include "dlock_internal/keeper.hpp"
#include "dlock_internal/log.hpp"
#include "dlock_internal/plugin_call.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace dlock::core {

using detail::forever_ns;

void client_core::keeper_loop() {
    plugin_kit::unique_lock lock(mutex_);
    std::vector<std::shared_ptr<hold>> batch_holds;
    std::vector<dlock_renewal> batch;
    for (;;) {
        // Expiry and due renewals. Lost callbacks run on the dispatcher, never here.
        const int64_t now = clock_->now_ns();
        int64_t next_wake = forever_ns;
        batch_holds.clear();
        batch.clear();
        for (const auto& h : holds_) {
            if (h->state != DLOCK_LEASE_HELD && h->state != DLOCK_LEASE_SUSPECT) continue;
            if (h->valid_until_ns <= now) { mark_lost(*h); continue; }
            next_wake = std::min(next_wake, h->valid_until_ns);
            if (h->busy || !h->plugin_hold || h->next_renew_ns == forever_ns) continue;
            if (keeper::renewal_due(h->next_renew_ns, now, h->ttl_ms)) {
                h->busy = true;
                batch_holds.push_back(h);
                batch.push_back({h->plugin_hold, h->ttl_ms, DLOCK_UNKNOWN, 0});
            } else {
                next_wake = std::min(next_wake, h->next_renew_ns);
            }
        }
        if (!batch.empty()) {
            lock.unlock();
            plugin_error err;
            const int call = plugin_call(err, plugin_->name, "renew",
                                         [&] { return plugin_->renew(backend_, batch.data(), batch.size(), &err); });
            if (call != DLOCK_OK) logger().warn("{}: renewing {} leases failed: {}", plugin_->name, batch.size(), message_of(err, detail::status_name(call)));
            lock.lock();
            const int64_t after = clock_->now_ns();
            for (size_t i = 0; i < batch.size(); ++i) {
                batch_holds[i]->busy = false;
                apply_renewal(*batch_holds[i], call == DLOCK_OK ? batch[i].status : call, batch[i].valid_until_ns, after);
            }
            changed_.notify_all();
            continue;
        }
        if (stop_keeper_) return;
        keeper_wakes_at_ns_ = next_wake;
        clock_->wait_until(lock.std(), keeper_wake_, next_wake);
        keeper_wakes_at_ns_ = INT64_MIN;
    }
}

void client_core::wake_keeper_if_due_sooner(const hold& h) {
    // Waking the keeper costs a context switch: only when the hold is due before its next wake.
    if (std::min(h.next_renew_ns, h.valid_until_ns) < keeper_wakes_at_ns_) clock_->notify_all(keeper_wake_);
}

void client_core::apply_renewal(hold& h, int status, int64_t valid_until_ns, int64_t now_ns) {
    if (h.state == DLOCK_LEASE_LOST || h.state == DLOCK_LEASE_RELEASED) return;
    if (metrics_ && status != DLOCK_OK) metrics_->renew_failed(status);
    if (status == DLOCK_OK) {
        h.valid_until_ns = valid_until_ns;
        h.state = DLOCK_LEASE_HELD;
        h.next_renew_ns = keeper::next_renewal_ns(h.renew && (capabilities_ & DLOCK_CAP_TTL), valid_until_ns, h.ttl_ms);
    } else if (status == DLOCK_LOST) {
        mark_lost(h);
        return;
    } else {
        // Unconfirmed: may still be held until valid_until. Retry soon, well before it runs out.
        if (metrics_ && h.state == DLOCK_LEASE_HELD) metrics_->became_suspect();
        h.state = DLOCK_LEASE_SUSPECT;
        h.next_renew_ns = keeper::retry_unconfirmed_ns(now_ns, h.ttl_ms);
    }
    if (h.valid_until_ns <= now_ns) mark_lost(h);
}

void client_core::mark_lost(hold& h) {
    if (h.state == DLOCK_LEASE_LOST || h.state == DLOCK_LEASE_RELEASED) return;
    h.state = DLOCK_LEASE_LOST;
    if (h.counted_held) metrics_->became_lost();
    stop_counting_held(h);
    if (h.reentrant) {  // only a reentrant hold is in reentrant_
        auto it = reentrant_.find(h.name);
        if (it != reentrant_.end() && it->second.get() == &h) reentrant_.erase(it);
    }
    for (dlock_lease* lease : h.leases) {
        if (lease->on_lost && !lease->lost_notified) {
            lease->lost_notified = true;
            ++lease->callbacks_running;
            lost_queue_.push_back(lease);
        }
    }
    if (!lost_queue_.empty()) dispatcher_wake_.notify_one();
}

bool client_core::lost_by_validity(hold& h) {
    if ((h.state == DLOCK_LEASE_HELD || h.state == DLOCK_LEASE_SUSPECT) && h.valid_until_ns != forever_ns &&
        h.valid_until_ns <= clock_->now_ns())
        mark_lost(h);
    return h.state == DLOCK_LEASE_LOST;
}

void client_core::hold_state_changed(hold* raw, int state, int64_t valid_until_ns) {
    plugin_kit::lock_guard lock(mutex_);
    if (!raw || raw->state == DLOCK_LEASE_LOST || raw->state == DLOCK_LEASE_RELEASED) return;
    if (state == DLOCK_LEASE_LOST) {
        mark_lost(*raw);
    } else if (state == DLOCK_LEASE_SUSPECT) {
        if (metrics_ && raw->counted_held && raw->state == DLOCK_LEASE_HELD) metrics_->became_suspect();
        raw->state = DLOCK_LEASE_SUSPECT;
        if (valid_until_ns > 0) raw->valid_until_ns = valid_until_ns;  // the backend's bound while unconfirmed
    } else if (state == DLOCK_LEASE_HELD) {
        raw->state = DLOCK_LEASE_HELD;
        raw->valid_until_ns = valid_until_ns;
    }
    // A bound already in the past is a loss now, not at the keeper's next wake.
    lost_by_validity(*raw);
    clock_->notify_all(keeper_wake_);
}

void client_core::dispatcher_loop() {
    // Keeps the core alive while a callback runs and until this thread has left: a callback that
    // closes the client (against the contract) may drop the last other reference.
    std::shared_ptr<client_core> self;
    plugin_kit::unique_lock lock(mutex_);
    for (;;) {
        dispatcher_wake_.wait(lock.std(), [&]() DLOCK_REQUIRES(mutex_) { return !lost_queue_.empty() || stop_dispatcher_; });
        if (lost_queue_.empty()) break;  // stopping, and every queued callback has run
        dlock_lease* lease = lost_queue_.front();
        lost_queue_.erase(lost_queue_.begin());
        const dlock_lost_callback callback = lease->on_lost;
        void* data = lease->on_lost_data;
        running_callback_ = lease;
        if (!self) self = weak_from_this().lock();  // null only while the core is being destroyed
        lock.unlock();
        if (callback) {
            try {
                callback(lease, data);
            } catch (...) {
                logger().error("a lost callback threw an exception; it was ignored");
            }
        }
        lock.lock();
        if (running_callback_ == lease) --lease->callbacks_running;
        running_callback_ = nullptr;
        changed_.notify_all();
    }
    lock.unlock();
    // `self` may be the last reference: the core is destroyed here, and nothing touches it after.
}

}  // namespace dlock::core
