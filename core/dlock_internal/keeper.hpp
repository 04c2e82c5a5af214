// keeper.hpp — the lease keeper's schedule: when a hold is renewed, which renewals share a batch,
// and when an unconfirmed renewal is retried. The keeper itself is client_core::keeper_loop
// (keeper.cpp), a thread per client that renews due holds in batches and marks a hold LOST once its
// validity is over; the lost callbacks run on a second thread, the dispatcher (also keeper.cpp), so
// that a callback that blocks never delays a renewal.
#pragma once

#include "dlock_internal/common.hpp"

#include <algorithm>
#include <cstdint>

namespace dlock::core::keeper {

// When a hold valid until `valid_until_ns` is next renewed: a third of its ttl in, i.e. ⅔ of a ttl
// before its validity ends; never (forever_ns) when it is not renewed (renewal off, no TTL in the
// backend, or a validity without end).
inline int64_t next_renewal_ns(bool renewed, int64_t valid_until_ns, int64_t ttl_ms) {
    if (!renewed || valid_until_ns == detail::forever_ns) return detail::forever_ns;
    return valid_until_ns - detail::ms_to_ns(ttl_ms) * 2 / 3;
}

// Whether a renewal planned for `next_renew_ns` goes in the batch sent at `now_ns`: those due within
// 1/20 of a ttl are sent together.
inline bool renewal_due(int64_t next_renew_ns, int64_t now_ns, int64_t ttl_ms) {
    return next_renew_ns <= now_ns + detail::ms_to_ns(ttl_ms) / 20;
}

// When a renewal that went unconfirmed at `now_ns` is retried: soon (ttl/10, at least 5 ms), well
// before the hold's validity runs out.
inline int64_t retry_unconfirmed_ns(int64_t now_ns, int64_t ttl_ms) {
    return now_ns + std::max<int64_t>(detail::ms_to_ns(ttl_ms) / 10, 5 * detail::ns_per_ms);
}

}  // namespace dlock::core::keeper
