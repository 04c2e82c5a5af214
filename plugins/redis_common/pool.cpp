// The connection pool: borrowing, giving back, reconnect backoff.
#include "redis_common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace dlock::redis_common {

pool::pool(endpoint where, settings s) : where_(std::move(where)), settings_(std::move(s)) {}

pool::borrowed::~borrowed() {
    if (pool_ && conn_) pool_->give_back(std::move(conn_));
}

pool::borrowed pool::borrow() {
    return borrow(now_ns() + (settings_.connect_timeout_ms + settings_.command_timeout_ms) * 1'000'000);
}

pool::borrowed pool::borrow(int64_t deadline_ns) {
    plugin_kit::unique_lock lock(mutex_);
    const size_t limit = std::max<size_t>(settings_.pool_size, 1);
    for (;;) {
        if (!idle_.empty()) {
            auto c = std::move(idle_.back());
            idle_.pop_back();
            if (now_ns() - c->idle_since_ns() < recently_used_ns || !c->closed_while_idle()) return borrowed(this, std::move(c));
            --open_;  // closed by the server meanwhile: drop it, try the next (or a new one)
            continue;
        }
        if (open_ < limit) break;
        if (available_.wait_until(lock.std(), std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline_ns))) ==
                std::cv_status::timeout &&
            idle_.empty() && open_ >= limit)
            fail(DLOCK_UNAVAILABLE, fmt::format("redis {}: all {} connections of the pool stayed busy; raise `pool_size`",
                                                where_.text(), limit));
    }
    const int64_t now = now_ns();
    if (now < retry_after_ns_)
        fail(DLOCK_UNAVAILABLE, fmt::format("redis {}: unreachable; next reconnect attempt in {} ms", where_.text(),
                                            (retry_after_ns_ - now) / 1'000'000 + 1));
    ++open_;
    lock.unlock();
    try {
        auto c = std::make_unique<connection>(where_, settings_);
        lock.lock();
        backoff_ms_ = 0;
        retry_after_ns_ = 0;
        return borrowed(this, std::move(c));
    } catch (...) {
        lock.lock();
        --open_;
        backoff_ms_ = backoff_ms_ ? std::min<int64_t>(backoff_ms_ * 2, 1000) : 10;
        retry_after_ns_ = now_ns() + backoff_ms_ * 1'000'000;
        available_.notify_one();
        throw;
    }
}

void pool::give_back(std::unique_ptr<connection> c) {
    plugin_kit::lock_guard lock(mutex_);
    if (c->broken()) {
        --open_;
    } else {
        c->idle_from(now_ns());
        idle_.push_back(std::move(c));
    }
    available_.notify_one();
}

}  // namespace dlock::redis_common
