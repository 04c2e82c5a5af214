// dlock/plugin_kit/thread_safety.hpp — clang's thread-safety annotations, and a mutex and locks that
// carry them, so that "guarded by m" is a checked declaration rather than a comment. The `-Wthread-safety`
// build (scripts/check-thread-safety.sh, run in CI with clang) fails on a read or write of a
// DLOCK_GUARDED_BY member without its mutex held. Under GCC the macros expand to nothing and the types
// are plain std::mutex wrappers (no cost: every member is inline).
//
//     mutable dlock::plugin_kit::mutex m_;
//     std::vector<hold*> holds_ DLOCK_GUARDED_BY(m_);
//     void drop(hold* h) DLOCK_REQUIRES(m_);
//     ...
//     dlock::plugin_kit::lock_guard lock(m_);
//     dlock::plugin_kit::unique_lock lock(m_);
//     cv_.wait(lock.std(), [&]() DLOCK_REQUIRES(m_) { return !holds_.empty(); });
//
// The analysis treats the mutex as held throughout a condition-variable wait (as the code around it
// may), and does not carry the caller's locks into a lambda: a predicate that reads guarded state says
// DLOCK_REQUIRES itself, as above.
// The annotations are clang's (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html); the names are
// prefixed so that they never collide with another library's macros.
#pragma once

#include <mutex>

#if defined(__clang__)
#define DLOCK_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define DLOCK_THREAD_ANNOTATION(x)
#endif

#define DLOCK_CAPABILITY(x) DLOCK_THREAD_ANNOTATION(capability(x))
#define DLOCK_SCOPED_CAPABILITY DLOCK_THREAD_ANNOTATION(scoped_lockable)
#define DLOCK_GUARDED_BY(x) DLOCK_THREAD_ANNOTATION(guarded_by(x))
#define DLOCK_PT_GUARDED_BY(x) DLOCK_THREAD_ANNOTATION(pt_guarded_by(x))
#define DLOCK_REQUIRES(...) DLOCK_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define DLOCK_EXCLUDES(...) DLOCK_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define DLOCK_ACQUIRE(...) DLOCK_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define DLOCK_RELEASE(...) DLOCK_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define DLOCK_TRY_ACQUIRE(...) DLOCK_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define DLOCK_RETURN_CAPABILITY(x) DLOCK_THREAD_ANNOTATION(lock_returned(x))
#define DLOCK_NO_THREAD_SAFETY_ANALYSIS DLOCK_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace dlock::plugin_kit {

// std::mutex, declared a capability. `std()` gives the mutex itself, for a condition variable or
// an API that takes a std::mutex.
class DLOCK_CAPABILITY("mutex") mutex {
public:
    void lock() DLOCK_ACQUIRE() { m_.lock(); }
    void unlock() DLOCK_RELEASE() { m_.unlock(); }
    bool try_lock() DLOCK_TRY_ACQUIRE(true) { return m_.try_lock(); }
    std::mutex& std() DLOCK_RETURN_CAPABILITY(this) { return m_; }

private:
    std::mutex m_;
};

// std::lock_guard for dlock::plugin_kit::mutex.
class DLOCK_SCOPED_CAPABILITY lock_guard {
public:
    explicit lock_guard(mutex& m) DLOCK_ACQUIRE(m) : m_(m) { m_.lock(); }
    ~lock_guard() DLOCK_RELEASE() { m_.unlock(); }
    lock_guard(const lock_guard&) = delete;
    lock_guard& operator=(const lock_guard&) = delete;

private:
    mutex& m_;
};

// std::unique_lock for dlock::plugin_kit::mutex: locked on construction; unlock() and lock() in
// between; `std()` is the std::unique_lock a std::condition_variable waits on.
class DLOCK_SCOPED_CAPABILITY unique_lock {
public:
    explicit unique_lock(mutex& m) DLOCK_ACQUIRE(m) : lock_(m.std()) {}
    ~unique_lock() DLOCK_RELEASE() {}
    unique_lock(const unique_lock&) = delete;
    unique_lock& operator=(const unique_lock&) = delete;

    void lock() DLOCK_ACQUIRE() { lock_.lock(); }
    void unlock() DLOCK_RELEASE() { lock_.unlock(); }
    std::unique_lock<std::mutex>& std() { return lock_; }

private:
    std::unique_lock<std::mutex> lock_;
};

}  // namespace dlock::plugin_kit
