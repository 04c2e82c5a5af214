// The history checker must catch what it claims to catch: overlaps (including ones hidden behind
// a long earlier interval), cuts at valid_until, and fencing-token inversions.
#include "support.hpp"

#include <gtest/gtest.h>

using dlock::test::check_mutual_exclusion;
using dlock::test::interval;

namespace {

interval at(uint64_t fence, int64_t from, int64_t to, int64_t valid_until = INT64_MAX) {
    return interval{fence, from, to, valid_until, "h" + std::to_string(fence)};
}

TEST(Checker, DisjointIntervalsPass) {
    const auto v = check_mutual_exclusion({at(1, 0, 10), at(2, 10, 20), at(3, 25, 30)}, true);
    EXPECT_EQ(v.overlaps, 0u);
    EXPECT_EQ(v.fence_inversions, 0u);
    EXPECT_EQ(v.intervals, 3u);
}

TEST(Checker, OverlapIsFound) {
    const auto v = check_mutual_exclusion({at(1, 0, 10), at(2, 9, 20)}, true);
    EXPECT_EQ(v.overlaps, 1u);
    EXPECT_NE(v.first_problem.find("overlap"), std::string::npos);
}

TEST(Checker, OverlapWithAnEarlierLongIntervalIsFound) {
    // 3 starts after 2 ended but inside 1.
    const auto v = check_mutual_exclusion({at(1, 0, 100), at(2, 100, 101), at(3, 50, 60)}, false);
    EXPECT_EQ(v.overlaps, 1u);
}

TEST(Checker, IntervalsAreCutAtValidUntil) {
    // The first holder kept running past its validity: not its lock any more, not an overlap.
    const auto v = check_mutual_exclusion({at(1, 0, 100, 50), at(2, 60, 70)}, true);
    EXPECT_EQ(v.overlaps, 0u);
}

TEST(Checker, FenceInversionIsFound) {
    const auto v = check_mutual_exclusion({at(2, 0, 10), at(1, 20, 30)}, true);
    EXPECT_EQ(v.fence_inversions, 1u);
    EXPECT_EQ(check_mutual_exclusion({at(2, 0, 10), at(1, 20, 30)}, false).fence_inversions, 0u);
}

}  // namespace
