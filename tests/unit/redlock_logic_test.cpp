// Redlock's arithmetic without a server (plugins/redlock/redlock_logic.hpp): the quorum of N nodes,
// the validity a round leaves (ttl - elapsed - drift, drift = ttl/100 + 2 ms), when a round, a
// release and a renewal are decided, and what they decide.
#include "redlock_logic.hpp"

#include <dlock/plugin.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace rl = dlock::redlock;

namespace {

constexpr int64_t ms_ns = 1'000'000;

TEST(RedlockLogic, QuorumIsAMajority) {
    EXPECT_EQ(rl::quorum_of(3), 2u);
    EXPECT_EQ(rl::quorum_of(5), 3u);
    EXPECT_EQ(rl::quorum_of(7), 4u);
    // Answers against an outcome from this many nodes leave no quorum for it.
    EXPECT_EQ(rl::blocking_count(3, 2), 2u);
    EXPECT_EQ(rl::blocking_count(5, 3), 3u);
}

// drift = ttl/100 + 2 ms: a ttl of 2 ms is used up by the drift alone, 3 ms is not.
TEST(RedlockLogic, ATtlTheDriftUsesUpLeavesNoValidity) {
    EXPECT_FALSE(rl::ttl_leaves_validity(1));
    EXPECT_FALSE(rl::ttl_leaves_validity(2));
    EXPECT_TRUE(rl::ttl_leaves_validity(3));
    EXPECT_TRUE(rl::ttl_leaves_validity(30'000));
}

TEST(RedlockLogic, ValidityIsTtlMinusElapsedMinusDrift) {
    // ttl 1 s: drift 10 ms + 2 ms; the round took 10 ms.
    EXPECT_EQ(rl::validity_ns(1000, 5 * ms_ns, 15 * ms_ns), 1000 * ms_ns - 10 * ms_ns - 12 * ms_ns);
    // A round as long as the ttl leaves nothing.
    EXPECT_LE(rl::validity_ns(1000, 0, 1000 * ms_ns), 0);
    // The lease ends ttl - drift after the round was sent, whenever the replies came.
    EXPECT_EQ(rl::valid_until_ns(5 * ms_ns, 1000), 5 * ms_ns + 1000 * ms_ns - 12 * ms_ns);
}

TEST(RedlockLogic, ARoundIsDecidedByAQuorumOfGrantsOrTooManyRefusals) {
    // 5 nodes, quorum 3.
    EXPECT_TRUE(rl::round_decided(3, 0, 5, 3));
    EXPECT_TRUE(rl::round_decided(0, 3, 5, 3)) << "3 refusals leave 2 nodes: no quorum can grant";
    EXPECT_FALSE(rl::round_decided(2, 2, 5, 3)) << "the fifth node decides";
    EXPECT_FALSE(rl::round_decided(0, 2, 5, 3));
}

TEST(RedlockLogic, ARoundAcquiresWithAQuorumAndValidityLeft) {
    EXPECT_TRUE(rl::round_acquired(3, 3, 1));
    EXPECT_FALSE(rl::round_acquired(3, 3, 0)) << "a quorum too late is no lock";
    EXPECT_FALSE(rl::round_acquired(2, 3, 1000 * ms_ns));
}

rl::release_tally tally(std::initializer_list<long long> answers) {
    rl::release_tally t;
    for (long long a : answers) t.count(a);
    return t;
}

TEST(RedlockLogic, ReleaseAnswersAreCountedByMeaning) {
    const rl::release_tally t = tally({1, 1, 0, -1, -2, -3});
    EXPECT_EQ(t.released, 2u);
    EXPECT_EQ(t.gone, 1u);
    EXPECT_EQ(t.other, 1u);
    EXPECT_EQ(t.proof, 2u);
    EXPECT_EQ(t.answered(), 6u);
}

// Not in doubt: only our key removed by this attempt counts, on a quorum; our key not removed there
// on N - quorum + 1 nodes is LOST.
TEST(RedlockLogic, AReleaseNotInDoubtNeedsOurKeyRemovedOnAQuorum) {
    EXPECT_TRUE(rl::released_on_quorum(tally({1, 1, 1}), false, 3));
    EXPECT_FALSE(rl::released_on_quorum(tally({1, 1, 0, -1}), false, 3));
    EXPECT_TRUE(rl::lost_on_quorum(tally({0, -1, -2}), false, 5, 3));
    EXPECT_FALSE(rl::lost_on_quorum(tally({0, -1, 1, 1}), false, 5, 3));
}

// In doubt (an earlier attempt sent while valid may have run): gone or another holder's counts as
// released; only proof that the earlier attempt did not run counts towards LOST.
TEST(RedlockLogic, AReleaseInDoubtCountsGoneAndAnotherHoldersAsReleased) {
    EXPECT_TRUE(rl::released_on_quorum(tally({1, 0, -1}), true, 3));
    EXPECT_FALSE(rl::released_on_quorum(tally({1, 0, -2}), true, 3)) << "proof never counts as released";
    EXPECT_FALSE(rl::lost_on_quorum(tally({0, -1, -1}), true, 5, 3));
    EXPECT_FALSE(rl::lost_on_quorum(tally({-2, -3}), true, 5, 3));
    EXPECT_TRUE(rl::lost_on_quorum(tally({-2, -3, -2}), true, 5, 3));
}

TEST(RedlockLogic, AReleaseIsInDoubtOnlyIfItsEarlierAttemptWasSentWhileValid) {
    EXPECT_FALSE(rl::release_in_doubt(0, 100)) << "no earlier attempt";
    EXPECT_TRUE(rl::release_in_doubt(50, 100));
    EXPECT_FALSE(rl::release_in_doubt(100, 100)) << "sent when the lease had ended";
    EXPECT_FALSE(rl::release_in_doubt(150, 100));
}

TEST(RedlockLogic, ARenewalIsConfirmedByAQuorumWithinTheValidity) {
    // 5 nodes, quorum 3, ttl 1 s: validity left while elapsed < 1 s - 12 ms.
    EXPECT_EQ(rl::renewal_status(3, 2, 5 * ms_ns, 1000, 5, 3), DLOCK_OK);
    EXPECT_EQ(rl::renewal_status(5, 0, 988 * ms_ns - 1, 1000, 5, 3), DLOCK_OK);
    EXPECT_EQ(rl::renewal_status(5, 0, 988 * ms_ns, 1000, 5, 3), DLOCK_UNAVAILABLE) << "confirmed too late";
    EXPECT_EQ(rl::renewal_status(2, 3, 5 * ms_ns, 1000, 5, 3), DLOCK_LOST) << "a quorum can never confirm it again";
    EXPECT_EQ(rl::renewal_status(2, 2, 5 * ms_ns, 1000, 5, 3), DLOCK_UNAVAILABLE) << "the fifth node did not answer";
}

// Every round writes its own value, from which the owner is read back (inspect, holders).
TEST(RedlockLogic, EachRoundWritesItsOwnValueOfTheOwner) {
    const std::string owner = "0123456789abcdef0123456789abcdef";
    EXPECT_EQ(rl::round_value(owner, 1), owner + ".1");
    EXPECT_NE(rl::round_value(owner, 1), rl::round_value(owner, 2));
    EXPECT_EQ(rl::owner_of(rl::round_value(owner, 42)), owner);
    EXPECT_EQ(rl::owner_of(owner), owner) << "a value without a round is all owner";
}

}  // namespace
