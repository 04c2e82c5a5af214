// lease_state.hpp — the lease-mode bookkeeping both dialects of the `sql` backend share: how long a
// granted or renewed lease is valid on this client's clock, which outcome a release reports, and
// how a renewal batch's answer ("these owner tokens were extended") becomes per-lease statuses.
// The statements themselves, and how each dialect batches them, stay with the dialect.
#pragma once

#include <dlock/plugin.h>
#include <dlock/plugin_kit.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

namespace dlock::sql {

// How long a grant or renewal of `ttl_ms` whose statement was sent at `sent_ns` is valid on this
// client's clock: until then plus the ttl, less the clock-drift allowance.
inline int64_t valid_until(int64_t sent_ns, int64_t ttl_ms) { return sent_ns + ttl_ms * 1'000'000 - plugin_kit::drift_ns(ttl_ms); }

// The validity of one lease-mode hold, as this client knows it.
struct lease_state {
    // The end of validity last granted (the host's valid_until), which bounds renewals; 0 before.
    int64_t valid_until_ns = 0;
    // A release whose outcome is unknown was sent while the lease was still valid. If a retry then
    // finds the row no longer ours, that attempt released it (or the lease ran out after the holder
    // had finished with it): either way RELEASED, not ALREADY_LOST.
    bool release_sent_while_valid = false;

    // A grant or renewal of `ttl_ms` sent at `sent_ns`: its validity, remembered and returned.
    int64_t granted(int64_t sent_ns, int64_t ttl_ms) { return valid_until_ns = valid_until(sent_ns, ttl_ms); }
    // A release sent at `sent_ns` got no answer.
    void release_unanswered(int64_t sent_ns) {
        if (sent_ns < valid_until_ns) release_sent_while_valid = true;
    }
    // The status of a release the server answered; `cleared`: it cleared a row carrying our token.
    int release_answered(bool cleared) const { return cleared || release_sent_while_valid ? DLOCK_OK : DLOCK_LOST; }
};

// When a renewal of renewals[0, count) must be answered: at `limit_ns` (the client-side statement
// limit), or when the first of those leases runs out if sooner — a renewal answered after that
// cannot save it, and the host's keeper, waiting on it, must be free to report it LOST on time.
// `of` maps a renewal's hold to the dialect's hold (a lease_state with an `owner`).
template <typename HoldOf>
int64_t renewal_deadline(int64_t limit_ns, const dlock_renewal* renewals, size_t count, HoldOf&& of) {
    for (size_t i = 0; i < count; ++i) {
        const int64_t until = of(renewals[i].hold)->valid_until_ns;
        if (until > 0) limit_ns = std::min(limit_ns, until);
    }
    return limit_ns;
}

// The answer to a renewal statement sent at `sent_ns` for renewals[from, to): a lease whose owner
// token is in `extended` was extended (DLOCK_OK, its hold remembers the new validity); any other is
// no longer ours (DLOCK_LOST).
template <typename HoldOf>
void record_renewals(dlock_renewal* renewals, size_t from, size_t to, int64_t sent_ns, const std::set<std::string>& extended,
                     HoldOf&& of) {
    for (size_t i = from; i < to; ++i) {
        auto* h = of(renewals[i].hold);
        const bool ours = extended.count(h->owner) > 0;
        renewals[i].status = ours ? DLOCK_OK : DLOCK_LOST;
        renewals[i].valid_until_ns = ours ? h->granted(sent_ns, renewals[i].ttl_ms) : valid_until(sent_ns, renewals[i].ttl_ms);
    }
}

}  // namespace dlock::sql
