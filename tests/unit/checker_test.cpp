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

// The count checker generalises the overlap checker: it must find one holder too many, and only that.
interval held(char kind, uint64_t fence, int64_t from, int64_t to, int64_t valid_until = INT64_MAX) {
    interval i = at(fence, from, to, valid_until);
    i.kind = kind;
    return i;
}

TEST(CountChecker, NHoldersAtOncePassAndTheNPlusFirstIsFound) {
    using dlock::test::check_at_most;
    const std::vector<interval> three = {held('p', 1, 0, 100), held('p', 2, 10, 100), held('p', 3, 20, 100)};
    auto v = check_at_most(three, 3);
    EXPECT_EQ(v.violations, 0u) << v.summary();
    EXPECT_EQ(v.max_holders, 3u);
    auto four = three;
    four.push_back(held('p', 4, 50, 60));
    v = check_at_most(four, 3);
    EXPECT_EQ(v.violations, 1u) << v.summary();
    EXPECT_NE(v.first_problem.find("fence 4"), std::string::npos) << v.first_problem;
}

TEST(CountChecker, AHolderTakingOverAtTheInstantAnotherLeavesIsNoViolation) {
    const auto v = dlock::test::check_at_most({held('p', 1, 0, 10), held('p', 2, 10, 20)}, 1);
    EXPECT_EQ(v.violations, 0u) << v.summary();
    EXPECT_EQ(v.max_holders, 1u);
}

TEST(CountChecker, IntervalsAreCutAtValidUntil) {
    const auto v = dlock::test::check_at_most({held('p', 1, 0, 100, 50), held('p', 2, 60, 70)}, 1);
    EXPECT_EQ(v.violations, 0u) << v.summary();
}

TEST(SharedChecker, SharedHoldersTogetherPassExclusiveBesideAnyoneIsFound) {
    using dlock::test::check_shared_exclusion;
    auto v = check_shared_exclusion({held('s', 1, 0, 100), held('s', 2, 10, 90), held('x', 3, 100, 120)});
    EXPECT_EQ(v.violations, 0u) << v.summary();
    EXPECT_EQ(v.max_shared, 2u);
    v = check_shared_exclusion({held('s', 1, 0, 100), held('x', 2, 50, 120)});
    EXPECT_EQ(v.violations, 1u) << "an exclusive holder beside a shared one";
    v = check_shared_exclusion({held('x', 1, 0, 100), held('s', 2, 50, 120)});
    EXPECT_EQ(v.violations, 1u) << "a shared holder beside an exclusive one";
    v = check_shared_exclusion({held('x', 1, 0, 100), held('x', 2, 50, 120)});
    EXPECT_EQ(v.violations, 1u) << "two exclusive holders";
}

}  // namespace
