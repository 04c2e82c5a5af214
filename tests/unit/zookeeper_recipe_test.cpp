// The `zookeeper` plugin's pure part without a server: name escaping, queue node parsing and order,
// and where a node stands in its queue by the recipe of its kind (plugins/zookeeper/names.hpp).
#include "names.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace dlock::zk;

namespace {

// A queue of nodes named as dlock names them: 'x' exclusive, 'r' shared (a reader), in this order.
std::vector<queue_entry> queue_from(const std::string& kinds) {
    std::vector<std::string> children;
    for (size_t i = 0; i < kinds.size(); ++i) {
        const std::string seq = std::to_string(1000000000 + i);
        children.push_back(queue_node_prefix("g" + std::to_string(i), kinds[i] == 'r' ? node_kind::reader : node_kind::exclusive) + seq);
    }
    return queue_of(children);
}

TEST(Names, KeptBytesStayAndOthersAreEscaped) {
    EXPECT_EQ(escape_name("orders-17_a~b.c"), "orders-17_a~b.c");
    EXPECT_EQ(escape_name("a/b"), "a%2Fb");
    EXPECT_EQ(escape_name("."), "%2E");
    EXPECT_EQ(escape_name(".."), "%2E.");
    EXPECT_EQ(escape_name("50%"), "50%25");
    EXPECT_EQ(escape_name(std::string("\x01\xff", 2)), "%01%FF");
}

TEST(Names, TheReservedNameIsEscapedToo) {
    EXPECT_EQ(escape_name("zookeeper"), "%7Aookeeper");
    EXPECT_EQ(unescape_name("%7Aookeeper"), std::optional<std::string>("zookeeper"));
    EXPECT_EQ(unescape_name("zookeeper"), std::nullopt);
}

TEST(Names, UnescapeInvertsEscapeAndRefusesAnythingElse) {
    for (const std::string& name : std::vector<std::string>{"a", "a/b", ".hidden", "caf\xc3\xa9", "%", "x y", std::string(1024, 'z')})
        EXPECT_EQ(unescape_name(escape_name(name)), std::optional<std::string>(name)) << name;
    EXPECT_EQ(unescape_name(""), std::nullopt);
    EXPECT_EQ(unescape_name("%2f"), std::nullopt);     // lowercase hex is never produced
    EXPECT_EQ(unescape_name("%41"), std::nullopt);     // `A` is kept as is, never escaped
    EXPECT_EQ(unescape_name("a%2"), std::nullopt);     // cut short
    EXPECT_EQ(unescape_name(".semaphores"), std::nullopt);  // a leading `.` is always escaped
    EXPECT_EQ(unescape_name("a b"), std::nullopt);
}

TEST(Names, PathsJoinAndNodesOfLocksAndSemaphores) {
    EXPECT_EQ(join_path("/", "a"), "/a");
    EXPECT_EQ(join_path("/dlock", "a"), "/dlock/a");
    EXPECT_EQ(node_of("/dlock", "a/b", false), "/dlock/a%2Fb");
    EXPECT_EQ(node_of("/dlock", "a/b", true), "/dlock/.semaphores/a%2Fb");
    EXPECT_EQ(path_problem("/dlock"), "");
    EXPECT_NE(path_problem("dlock"), "");
    EXPECT_NE(path_problem("/dlock/"), "");
    EXPECT_NE(path_problem("/a//b"), "");
    EXPECT_NE(path_problem("/a/../b"), "");
}

TEST(Queue, NodesOfEveryShapeAreReadAndSortedBySequence) {
    const auto queue = queue_of({"_c_w-__WRIT__0000000004", "_c_r-__READ__0000000002", "_c_x-lock-0000000003",
                                 "abc__rlock__0000000005", "abc__lock__0000000001", "junk", "_c_bad-lock-12a",
                                 "abc__lock__123"});
    ASSERT_EQ(queue.size(), 5u);
    EXPECT_EQ(queue[0].guid, "abc");
    EXPECT_FALSE(queue[0].shared);
    EXPECT_EQ(queue[1].guid, "r");
    EXPECT_TRUE(queue[1].shared);
    EXPECT_EQ(queue[2].guid, "x");
    EXPECT_EQ(queue[2].sequence, 3);
    EXPECT_FALSE(queue[2].shared);
    EXPECT_EQ(queue[3].guid, "w");
    EXPECT_FALSE(queue[3].shared);
    EXPECT_EQ(queue[4].node, "abc__rlock__0000000005");
    EXPECT_TRUE(queue[4].shared);
}

TEST(Queue, AGuidThatContainsAMarkerKeepsItsLastOne) {
    const auto entry = parse_queue_node(queue_node_prefix("a-lock-b") + "0000000007");
    ASSERT_TRUE(entry);
    EXPECT_EQ(entry->guid, "a-lock-b");
    EXPECT_EQ(entry->sequence, 7);
}

TEST(Standing, ExclusiveHoldsFirstAndWaitsForTheNodeJustBefore) {
    const auto queue = queue_from("xrx");
    const standing first = standing_in(queue, 0, DLOCK_HOLD_EXCLUSIVE, 0);
    EXPECT_TRUE(first.admitted);
    EXPECT_EQ(first.ahead, 0u);
    const standing second = standing_in(queue, 1, DLOCK_HOLD_EXCLUSIVE, 0);
    EXPECT_FALSE(second.admitted);
    EXPECT_EQ(second.wait_on, &queue[0]);
    EXPECT_TRUE(second.alone);
    const standing third = standing_in(queue, 2, DLOCK_HOLD_EXCLUSIVE, 0);
    EXPECT_FALSE(third.admitted);
    EXPECT_EQ(third.wait_on, &queue[1]);  // a reader before it counts too
    EXPECT_FALSE(third.alone);
    EXPECT_EQ(third.ahead, 2u);
}

TEST(Standing, SharedHoldsWithNoWriterBeforeAndWaitsForTheNearestWriter) {
    const auto readers = queue_from("rrr");
    EXPECT_TRUE(standing_in(readers, 2, DLOCK_HOLD_SHARED, 0).admitted);
    const auto one_writer = queue_from("rxrr");
    const standing behind = standing_in(one_writer, 3, DLOCK_HOLD_SHARED, 0);
    EXPECT_FALSE(behind.admitted);
    EXPECT_EQ(behind.wait_on, &one_writer[1]);
    EXPECT_TRUE(behind.alone);  // that writer's deletion by itself admits it
    const auto two_writers = queue_from("xrxr");
    const standing later = standing_in(two_writers, 3, DLOCK_HOLD_SHARED, 0);
    EXPECT_FALSE(later.admitted);
    EXPECT_EQ(later.wait_on, &two_writers[2]);
    EXPECT_FALSE(later.alone);
}

TEST(Standing, PermitsHoldBelowTheLimitTheFirstWaiterWatchesTheChildren) {
    const auto queue = queue_from("xxxxx");
    EXPECT_TRUE(standing_in(queue, 0, DLOCK_HOLD_PERMIT, 2).admitted);
    EXPECT_TRUE(standing_in(queue, 1, DLOCK_HOLD_PERMIT, 2).admitted);
    const standing first_waiter = standing_in(queue, 2, DLOCK_HOLD_PERMIT, 2);
    EXPECT_FALSE(first_waiter.admitted);
    EXPECT_EQ(first_waiter.wait_on, nullptr);
    const standing later = standing_in(queue, 4, DLOCK_HOLD_PERMIT, 2);
    EXPECT_FALSE(later.admitted);
    EXPECT_EQ(later.wait_on, &queue[3]);
    EXPECT_FALSE(later.alone);
}

}  // namespace
