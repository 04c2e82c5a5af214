// queue_mode.hpp — how an acquire treats a lock's waiter queue, for both Redis plugins.
//
// The value is what the acquire scripts receive as their `mode` argument (queue_acquire_script,
// shared_acquire_script and permit_acquire_script: ARGV[3]; redlock_acquire_script: ARGV[5]) and
// compare as numbers (`mode > 0`, `mode == 2`, `mode >= 2`). The numbers are therefore part of the
// scripts' contract: never renumber or reorder them, and give a new mode a new number the scripts
// learn at the same time.
#pragma once

#include <cstdint>

namespace dlock::redis_common {

enum class queue_mode : int {
    // The queue is ignored: granted whenever the lock is free. The redis plugin's non-fair acquire,
    // waiting or not (its waiter listens on the name's channel instead); redlock's non-fair try.
    barging = 0,
    // Granted only when nobody queues or this acquirer is first; never queues.
    fair_try = 1,
    // As fair_try, and a refused acquirer queues (or keeps its place) to be granted in turn.
    fair_wait = 2,
    // redlock_acquire_script only: granted whenever the lock is free, as barging, but a refused
    // acquirer queues, so that a release wakes it on its own channel like a fair waiter. Never pass
    // it to queue_acquire, shared_acquire or permit_acquire: they read `mode > 0` as fair and queue
    // only on `mode == 2`, so it would be taken for a fair try that never queues.
    barging_wait = 3,
};

// The mode of an acquire that is fair or not and waits (has a deadline) or not, on redlock, whose
// non-fair waiters queue too (barging_wait).
constexpr queue_mode redlock_queue_mode(bool fair, bool waits) noexcept {
    return fair ? (waits ? queue_mode::fair_wait : queue_mode::fair_try)
                : (waits ? queue_mode::barging_wait : queue_mode::barging);
}

// Whether a refused acquire in mode `m` stays in the waiter queue (redlock_acquire's `mode >= 2`;
// the other acquire scripts, which never get barging_wait, test `mode == 2`).
constexpr bool queues(queue_mode m) noexcept { return m == queue_mode::fair_wait || m == queue_mode::barging_wait; }

// The script argument: the mode's number.
constexpr int64_t script_arg(queue_mode m) noexcept { return static_cast<int64_t>(m); }

// The numbers the scripts compare against, pinned: a change here must change the scripts too.
static_assert(script_arg(queue_mode::barging) == 0 && script_arg(queue_mode::fair_try) == 1 &&
                  script_arg(queue_mode::fair_wait) == 2 && script_arg(queue_mode::barging_wait) == 3,
              "the Lua scripts receive these numbers");
static_assert(queues(queue_mode::fair_wait) && queues(queue_mode::barging_wait) && !queues(queue_mode::fair_try) &&
                  !queues(queue_mode::barging),
              "the scripts queue a refused acquirer when mode >= 2");

}  // namespace dlock::redis_common
