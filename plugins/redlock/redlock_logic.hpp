// redlock_logic.hpp — the arithmetic of the `redlock` backend that needs no server: quorums,
// validity and clock drift, the decisions a round's, a release's and a renewal's tallies lead to,
// the values a round writes, and the waiters' queue scores. Compiled into dlock_redlock_logic, which the plugin and the unit
// tests (tests/unit/redlock_logic_test.cpp, redlock_scores_test.cpp) link.
//
// Times: *_ns on CLOCK_MONOTONIC (plugin_kit::now_ns), *_us the nodes' server time (TIME) in µs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dlock::redlock {

// The nodes a decision needs: a majority, N/2+1 of N.
constexpr size_t quorum_of(size_t nodes) noexcept { return nodes / 2 + 1; }

// Nodes that, answering against an outcome, leave too few for a quorum to reach it (N - quorum + 1).
constexpr size_t blocking_count(size_t nodes, size_t quorum) noexcept { return nodes - quorum + 1; }

// Whether a lease of `ttl_ms` has any validity left after the clock-drift allowance (ttl/100 + 2 ms,
// plugin_kit::drift_ns) alone: one that has not could never be granted.
bool ttl_leaves_validity(int64_t ttl_ms) noexcept;

// What remains of a lease of `ttl_ms` whose round was sent at `sent_ns` and whose last reply was read
// at `received_ns`: ttl - elapsed - drift (not positive: nothing).
int64_t validity_ns(int64_t ttl_ms, int64_t sent_ns, int64_t received_ns) noexcept;

// The end of a lease of `ttl_ms` granted or renewed by a round sent at `sent_ns`: sent + ttl - drift.
int64_t valid_until_ns(int64_t sent_ns, int64_t ttl_ms) noexcept;

// Whether an acquire round's replies so far decide it: a quorum granted, or so many refused that a
// quorum can no longer grant.
constexpr bool round_decided(size_t granted, size_t refused, size_t nodes, size_t quorum) noexcept {
    return granted >= quorum || refused > nodes - quorum;
}

// Whether a round granted by `granted` nodes, with `validity` left (validity_ns), holds the lock.
constexpr bool round_acquired(size_t granted, size_t quorum, int64_t validity) noexcept {
    return granted >= quorum && validity > 0;
}

// The nodes' answers to the release script: 1 released, 0 gone (no key, or no member of ours),
// -1 another holder's value or string, -2 our own expired member still there, -3 a break's
// tombstone. -2 and -3 prove that an earlier attempt of this release did not run on that node.
struct release_tally {
    size_t released = 0, gone = 0, other = 0, proof = 0;
    void count(long long answer) noexcept {
        (answer == 1 ? released : answer == 0 ? gone : answer == -1 ? other : proof)++;
    }
    size_t answered() const noexcept { return released + gone + other + proof; }
};

// Whether an earlier attempt of a release is in doubt in the sense that matters: it was sent
// (`in_doubt_sent_ns`, 0: none) while the lease was valid (`valid_until_ns`), and may have run.
constexpr bool release_in_doubt(int64_t in_doubt_sent_ns, int64_t valid_until_ns) noexcept {
    return in_doubt_sent_ns != 0 && in_doubt_sent_ns < valid_until_ns;
}

// RELEASED: our key removed by this attempt on a quorum; in doubt, removed now, gone or another
// holder's on a quorum (docs/guarantees.md, "Releases in doubt"): proof that the earlier attempt did
// not run never counts.
bool released_on_quorum(const release_tally& t, bool in_doubt, size_t quorum) noexcept;

// LOST: in doubt, proof that the earlier attempt did not run on so many nodes that no quorum can
// have released; not in doubt, our key not removed by this attempt on that many.
bool lost_on_quorum(const release_tally& t, bool in_doubt, size_t nodes, size_t quorum) noexcept;

// A renewal's status for one lease (DLOCK_OK, DLOCK_LOST or DLOCK_UNAVAILABLE) from the nodes that
// confirmed it (`confirmed`) and refused it (`refused`), `elapsed_ns` after the round was sent: OK
// when a quorum confirmed it with validity left; LOST when so many refused that a quorum can never
// confirm it again; UNAVAILABLE otherwise.
int renewal_status(size_t confirmed, size_t refused, int64_t elapsed_ns, int64_t ttl_ms, size_t nodes, size_t quorum) noexcept;

// The value a round of an acquisition writes: every round its own, so that a failed round's release,
// executed late by a node that was slow to answer, can never delete the key a later round of the
// same acquisition set there. The owner token is 32 hex digits; the value is "<owner>.<round>".
std::string round_value(const std::string& owner, uint64_t round);
// The owner token a round's value was written for: what precedes the first '.' (all of a value without one).
std::string owner_of(const std::string& value);

// Redlock's waiter queues order the waiters by a score every node agrees on, its arrival time on
// the nodes' clock: the client's CLOCK_MONOTONIC plus an offset it measures (docs/backends/redis.md,
// "Waiting, FIFO and wake-ups on `redlock`"). measured_score_offset_us: the offset a round's replies
// show, the median over the nodes of each node's TIME (µs) minus the round's midpoint on
// CLOCK_MONOTONIC (sent_ns … received_ns); nullopt without a reply. score_offset_moved: whether a
// score chosen with offset `used_us` differs from one chosen with `measured_us` by more than such
// a measurement can tell (half the round it came from, plus 2 ms).
std::optional<int64_t> measured_score_offset_us(std::vector<int64_t> server_us, int64_t sent_ns, int64_t received_ns);
bool score_offset_moved(int64_t used_us, int64_t measured_us, int64_t round_ns) noexcept;

}  // namespace dlock::redlock
