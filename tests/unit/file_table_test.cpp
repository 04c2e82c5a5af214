// The `file` backend's function table as each host version negotiates it: a version 2 host gets
// the holders and list entries (and no break_lock: its capability is absent too); a version 1
// host gets the same entries under version 1, so it reads only the version 1 part and never
// sends a kind or a permit count. And the semaphore file of a name never is its lock file.
#include "file_plugin.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

TEST(FileTable, VersionTwoHostGetsHoldersAndListButNoBreak) {
    const dlock_plugin* table = nullptr;
    ASSERT_EQ(dlock_file_plugin_negotiate(2, &table, nullptr), DLOCK_OK);
    ASSERT_NE(table, nullptr);
    EXPECT_EQ(table->version, 2u);
    EXPECT_GE(table->struct_size, DLOCK_PLUGIN_V2_SIZE);
    EXPECT_NE(table->holders, nullptr);
    EXPECT_NE(table->list, nullptr);
    EXPECT_EQ(table->break_lock, nullptr);
    const uint64_t caps = table->capabilities(nullptr);
    EXPECT_TRUE(caps & DLOCK_CAP_SEMAPHORE);
    EXPECT_TRUE(caps & DLOCK_CAP_SHARED);
    EXPECT_TRUE(caps & DLOCK_CAP_LIST);
    EXPECT_FALSE(caps & DLOCK_CAP_BREAK);
}

TEST(FileTable, VersionOneHostGetsAVersionOneTable) {
    const dlock_plugin* table = nullptr;
    ASSERT_EQ(dlock_file_plugin_negotiate(1, &table, nullptr), DLOCK_OK);
    ASSERT_NE(table, nullptr);
    EXPECT_EQ(table->version, 1u);
    EXPECT_NE(table->acquire, nullptr);
    uint32_t min_version = 0;
    EXPECT_EQ(dlock_file_plugin_negotiate(0, &table, &min_version), DLOCK_NOT_SUPPORTED);
    EXPECT_EQ(min_version, 1u);
}

TEST(FileTable, SemaphoreFilesAreNotLockFiles) {
    using dlock::file_backend::lock_file_name;
    using dlock::file_backend::semaphore_file_name;
    for (const std::string& name : std::vector<std::string>{"a", "orders/17", std::string(300, 'z')}) {
        EXPECT_NE(semaphore_file_name(name), lock_file_name(name)) << name;
        EXPECT_EQ(semaphore_file_name(name).substr(semaphore_file_name(name).size() - 4), ".sem");
    }
}

}  // namespace
