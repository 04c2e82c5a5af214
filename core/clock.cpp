// The real clock, the simulated one, and the test hook that picks the clock of new clients.
#include "dlock_internal/clock.hpp"

#include "dlock_internal/common.hpp"

#include <algorithm>
#include <chrono>

namespace dlock::core {

using detail::forever_ns;
using detail::monotonic_now_ns;

void clock::sleep_until(int64_t deadline_ns) {
    std::mutex m;
    std::condition_variable never_notified;
    std::unique_lock<std::mutex> lock(m);
    while (now_ns() < deadline_ns) wait_until(lock, never_notified, deadline_ns);
}

namespace {

class monotonic_clock final : public clock {
public:
    int64_t now_ns() override { return monotonic_now_ns(); }
    void wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, int64_t deadline_ns) override {
        if (deadline_ns == forever_ns) cv.wait(lock);
        else cv.wait_until(lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline_ns)));
    }
    void notify_all(std::condition_variable& cv) override { cv.notify_all(); }
};

plugin_kit::mutex injected_mutex;
std::shared_ptr<clock> injected DLOCK_GUARDED_BY(injected_mutex);

}  // namespace

const std::shared_ptr<clock>& real_clock() {
    static const auto* instance = new std::shared_ptr<clock>(std::make_shared<monotonic_clock>());
    return *instance;
}

simulated_clock::simulated_clock() : now_ns_(monotonic_now_ns()) {}

int64_t simulated_clock::now_ns() {
    plugin_kit::lock_guard guard(m_);
    return now_ns_;
}

// A waiter is listed while it waits, with `lock` on its own mutex held from its listing until
// cv.wait lets go of it; advance() notifies under that mutex, so no notification falls between the
// two. The order is always the waiter's mutex, then m_: advance() lets go of m_ before it takes a
// waiter's mutex, and a waiter taken out but not yet notified is waited for without its mutex.
void simulated_clock::wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, int64_t deadline_ns) {
    waiter self{lock.mutex(), &cv, deadline_ns};
    {
        plugin_kit::lock_guard guard(m_);
        if (deadline_ns <= now_ns_) return;
        waiters_.push_back(&self);
        changed_.notify_all();
    }
    cv.wait(lock);
    plugin_kit::unique_lock guard(m_);
    waiters_.erase(std::remove(waiters_.begin(), waiters_.end(), &self), waiters_.end());
    changed_.notify_all();
    if (!self.notifying) return;
    // advance() is about to notify us under our mutex: let it, and return only when it is done with
    // `self` (which lives on this stack).
    lock.unlock();
    changed_.wait(guard.std(), [&]() DLOCK_REQUIRES(m_) { return !self.notifying; });
    guard.unlock();
    lock.lock();
}

void simulated_clock::advance(int64_t ns) {
    std::vector<waiter*> due;
    {
        plugin_kit::lock_guard guard(m_);
        now_ns_ = detail::saturating_add(now_ns_, ns);
        for (waiter* w : waiters_) {
            if (w->deadline_ns > now_ns_) continue;
            w->notifying = true;
            due.push_back(w);
        }
        waiters_.erase(std::remove_if(waiters_.begin(), waiters_.end(), [](waiter* w) { return w->notifying; }),
                       waiters_.end());
    }
    for (waiter* w : due) {
        std::lock_guard<std::mutex> waiter_lock(*w->mutex);
        w->cv->notify_all();
    }
    plugin_kit::lock_guard guard(m_);
    for (waiter* w : due) w->notifying = false;
    changed_.notify_all();
}

void simulated_clock::notify_all(std::condition_variable& cv) {
    {
        plugin_kit::lock_guard guard(m_);
        waiters_.erase(std::remove_if(waiters_.begin(), waiters_.end(), [&](waiter* w) { return w->cv == &cv; }),
                       waiters_.end());
    }
    cv.notify_all();
}

bool simulated_clock::wait_for_waiters(size_t count, int64_t real_limit_ns) {
    plugin_kit::unique_lock guard(m_);
    return changed_.wait_for(guard.std(), std::chrono::nanoseconds(real_limit_ns),
                             [&]() DLOCK_REQUIRES(m_) { return waiters_.size() >= count; });
}

namespace testing {

void use_clock(std::shared_ptr<clock> c) {
    plugin_kit::lock_guard guard(injected_mutex);
    injected = std::move(c);
}

std::shared_ptr<clock> clock_for_new_client() {
    plugin_kit::lock_guard guard(injected_mutex);
    return injected ? injected : real_clock();
}

}  // namespace testing

}  // namespace dlock::core
