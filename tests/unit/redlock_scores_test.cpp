// Redlock's queue scores (issue 28): a waiter's score is its arrival on the nodes' clock,
// CLOCK_MONOTONIC plus an offset the client measures from the nodes' TIME; a refused round measures
// it again, and a score chosen with an offset that moved is chosen again (redlock_acquisition.cpp). The
// arithmetic of that measurement and of the decision, without a server.
#include "redlock_logic.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

using dlock::redlock::measured_score_offset_us;
using dlock::redlock::score_offset_moved;

namespace {

constexpr int64_t s_us = 1'000'000;
constexpr int64_t ms_ns = 1'000'000;

// Each node's TIME against the round's midpoint; the median node speaks for all.
TEST(RedlockScores, OffsetIsTheMedianNodeTimeMinusTheRoundsMidpoint) {
    const int64_t sent = 5 * ms_ns, received = 7 * ms_ns;  // midpoint 6 ms = 6 000 µs
    const auto offset = measured_score_offset_us({1'700'000'000 * s_us + 300, 1'700'000'000 * s_us + 100,
                                                  1'700'000'000 * s_us + 200},
                                                 sent, received);
    ASSERT_TRUE(offset.has_value());
    EXPECT_EQ(*offset, 1'700'000'000 * s_us + 200 - 6'000);
    EXPECT_FALSE(measured_score_offset_us({}, sent, received).has_value()) << "no reply, no measurement";
}

// One node whose clock is an hour off (of five) does not move the offset.
TEST(RedlockScores, OneNodeWithAWrongClockDoesNotMoveTheOffset) {
    const int64_t t = 1'700'000'000 * s_us;
    const auto offset = measured_score_offset_us({t, t + 10, t + 3600 * s_us, t + 20, t + 30}, 0, 0);
    ASSERT_TRUE(offset.has_value());
    EXPECT_EQ(*offset, t + 20);
}

// A client suspended for 30 s: CLOCK_MONOTONIC did not advance meanwhile, so the offset measured
// at open is 30 s short and its scores 30 s early — it would go before every waiter that arrived in
// those 30 s. Its first refused round measures the new offset, which moved: the score is chosen
// again, and lands after theirs.
TEST(RedlockScores, AfterASuspendTheFirstRefusedRoundRechoosesTheScore) {
    const int64_t at_open = 1'700'000'000 * s_us - 50 * s_us;  // server µs - monotonic µs at open
    const int64_t arrival_mono_us = 100 * s_us;
    const int64_t stale_score = arrival_mono_us + at_open;
    const int64_t others_score = stale_score + 10 * s_us;  // a waiter that arrived 20 s before it, by the nodes' clock
    const int64_t round_sent = arrival_mono_us * 1000, round_received = round_sent + 2 * ms_ns;
    const int64_t node_time = (round_sent / 2 + round_received / 2) / 1000 + at_open + 30 * s_us;
    const auto measured = measured_score_offset_us({node_time, node_time + 50, node_time - 50}, round_sent, round_received);
    ASSERT_TRUE(measured.has_value());
    EXPECT_EQ(*measured, at_open + 30 * s_us);
    ASSERT_TRUE(score_offset_moved(at_open, *measured, round_received - round_sent));
    const int64_t score = arrival_mono_us + *measured;
    EXPECT_LT(stale_score, others_score) << "the stale score went first";
    EXPECT_GT(score, others_score) << "the re-chosen score goes behind the earlier arrival";
}

// A difference the measurement cannot tell from noise (half the round plus 2 ms) keeps the score;
// one beyond it does not.
TEST(RedlockScores, ScoreIsKeptWithinTheMeasurementsUncertainty) {
    const int64_t round = 4 * ms_ns;  // uncertainty 2 ms + 2 ms
    EXPECT_FALSE(score_offset_moved(1'000'000, 1'000'000, round));
    EXPECT_FALSE(score_offset_moved(1'000'000, 1'004'000, round));
    EXPECT_FALSE(score_offset_moved(1'004'000, 1'000'000, round));
    EXPECT_TRUE(score_offset_moved(1'000'000, 1'004'001, round));
    EXPECT_TRUE(score_offset_moved(1'004'001, 1'000'000, round));
}

}  // namespace
