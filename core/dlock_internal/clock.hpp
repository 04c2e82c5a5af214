// clock.hpp — the clock the core reads time and waits through: the keeper's wake-ups, a hold's
// validity, the deadline of an acquire. The real one is CLOCK_MONOTONIC (the clock of the plugin
// ABI); a simulated one, for tests, stands still until the test advances it, so that a test of the
// keeper or of validity decides what time it is instead of sleeping (RocksDB's MockSystemClock is
// the model).
//
// A test injects a clock through testing::use_clock below (and may build a fake backend on the same
// clock into itself: testing::add_builtin_backend, backends.hpp): internal hooks of the C++ layer,
// reachable only by code linked against dlock_internal, never through the ABI.
#pragma once

#include <dlock/plugin_kit/thread_safety.hpp>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace dlock::core {

class clock {
public:
    virtual ~clock() = default;
    // Now, in nanoseconds of the ABI's clock. Never goes back.
    virtual int64_t now_ns() = 0;
    // Waits on `cv`, `lock` held on entry and on return (let go meanwhile), until `cv` is notified
    // or now_ns() reaches `deadline_ns` (forever_ns: no deadline). May return early, as any condition
    // variable wait: callers check what they wait for again.
    virtual void wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, int64_t deadline_ns) = 0;
    // Wakes every waiter on `cv`; the caller holds the mutex they wait with. Through the clock, so
    // that a simulated one knows at once that they are no longer idle.
    virtual void notify_all(std::condition_variable& cv) = 0;
    // Returns once now_ns() has reached `deadline_ns` (a pause; nothing else ends it).
    void sleep_until(int64_t deadline_ns);
};

// CLOCK_MONOTONIC; one for the program, never destroyed.
const std::shared_ptr<clock>& real_clock();

// Time that moves only when advance() is called. Starts at the real clock's now, so that its values
// read as ordinary monotonic times (dlock.hpp turns them into steady_clock time points).
// Thread-safe.
class simulated_clock final : public clock {
public:
    simulated_clock();
    int64_t now_ns() override;
    void wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, int64_t deadline_ns) override;
    void notify_all(std::condition_variable& cv) override;

    // Moves time forward by `ns` and wakes every waiter whose deadline it reached; returns once each
    // of them has been notified.
    void advance(int64_t ns);
    // Blocks until at least `count` threads wait on this clock (each with a deadline still ahead, or
    // none, and not notified since): what the last advance or notification set going has settled
    // back into waiting. False if that takes
    // longer than `real_limit_ns` of real time (a thread that never comes back).
    bool wait_for_waiters(size_t count, int64_t real_limit_ns = 30'000'000'000LL);

private:
    struct waiter {
        std::mutex* mutex;
        std::condition_variable* cv;
        int64_t deadline_ns;
        bool notifying = false;  // taken out by advance(), which has yet to notify it
    };

    plugin_kit::mutex m_;
    std::condition_variable changed_;  // a waiter came or went, or a notification ended
    int64_t now_ns_ DLOCK_GUARDED_BY(m_);
    std::vector<waiter*> waiters_ DLOCK_GUARDED_BY(m_);  // idle ones (deadline ahead, not notified)
};

namespace testing {

// Clients opened after this call read time and wait through `c` (null: the real clock again).
// For tests only; call it before opening the clients it is for, not while others open.
void use_clock(std::shared_ptr<clock> c);
// The clock a client opened now gets.
std::shared_ptr<clock> clock_for_new_client();

}  // namespace testing

}  // namespace dlock::core
