// The admin API (dlock_admin.h / dlock_admin.hpp): the catalog of the backends a config reaches —
// the built-in `file`, the plugins on its plugin_path, described as the plugins describe
// themselves, and the files that do not load — and durations parsed as configs write them.
#include <dlock/dlock_admin.hpp>

#include "support.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace {

const std::string plugin_dir = DLOCK_TEST_PLUGIN_DIR;

class Admin : public ::testing::Test {
protected:
    void SetUp() override {
        config_ = dir_.path() + "/c.yaml";
        std::ofstream(config_) << "backend: file\nplugin_path: [" << plugin_dir << "]\n";
    }
    dlock::test::scratch_dir dir_{"dlock-admin-test"};
    std::string config_;
};

TEST_F(Admin, CatalogListsTheBuiltInFileBackendFirstWithItsOptions) {
    dlock_backend_catalog* catalog = nullptr;
    ASSERT_EQ(dlock_backend_catalog_open(config_.c_str(), &catalog), DLOCK_OK) << dlock_last_error();
    ASSERT_GE(dlock_backend_catalog_count(catalog), 1u);
    const dlock_backend_info* file = dlock_backend_catalog_get(catalog, 0);
    ASSERT_NE(file, nullptr);
    EXPECT_EQ(file->struct_size, sizeof(dlock_backend_info));
    EXPECT_STREQ(file->name, "file");
    EXPECT_STREQ(file->path, "built-in");
    EXPECT_GE(file->abi_version, 1u);
    EXPECT_TRUE(file->capabilities & DLOCK_CAP_FENCING);
    EXPECT_TRUE(file->capabilities & DLOCK_CAP_REENTRANT) << "reentrancy is the core's, for every backend";
    ASSERT_GE(file->option_count, 1u);
    EXPECT_STREQ(file->options[0].name, "directory");
    EXPECT_STREQ(file->options[0].type, "string");
    EXPECT_EQ(file->options[0].required, 0);
    EXPECT_EQ(file->options[0].default_value, nullptr);
    EXPECT_EQ(dlock_backend_catalog_find(catalog, "file"), file);
    EXPECT_EQ(dlock_backend_catalog_get(catalog, dlock_backend_catalog_count(catalog)), nullptr);
    EXPECT_EQ(dlock_backend_catalog_find(catalog, "nosuch"), nullptr);
    dlock_backend_catalog_destroy(catalog);
    dlock_backend_catalog_destroy(nullptr);
}

TEST_F(Admin, CatalogDescribesPluginsOnThePluginPathAndListsTheOnesThatDoNotLoad) {
    const dlock::backend_catalog catalog = dlock::find_backends(config_);
    const dlock::backend_description* fake = catalog.find("fake");
    ASSERT_NE(fake, nullptr);
    EXPECT_EQ(fake->path, plugin_dir + "/libdlock-fake.so");
    EXPECT_EQ(fake->description, "A fake in-process TTL backend for tests.");
    EXPECT_EQ(fake->capabilities, DLOCK_CAP_FENCING | DLOCK_CAP_TTL | DLOCK_CAP_PUSH_WAIT | DLOCK_CAP_REENTRANT);
    ASSERT_GE(fake->options.size(), 1u);
    EXPECT_EQ(fake->options[0].name, "lose_after");
    EXPECT_EQ(fake->options[0].type, "duration");
    EXPECT_EQ(fake->options[0].default_value, std::optional<std::string>("0ms"));
    // A broken plugin is a failure of its own, naming its file, not an error of the listing.
    EXPECT_EQ(catalog.find("fake-no-symbol"), nullptr);
    bool no_symbol_reported = false;
    for (const auto& f : catalog.failures)
        if (f.find("libdlock-fake-no-symbol.so") != std::string::npos) no_symbol_reported = true;
    EXPECT_TRUE(no_symbol_reported) << "failures: " << catalog.failures.size();
}

TEST_F(Admin, CatalogOfABadConfigIsAConfigErrorThatSaysWhere) {
    std::ofstream(config_) << "backend: file\nplugin_pth: [/x]\n";
    std::error_code ec;
    const auto catalog = dlock::find_backends(config_, ec);
    EXPECT_EQ(ec, dlock::errc::config);
    EXPECT_NE(std::string(dlock_last_error()).find(config_ + ":2:1: unknown key `plugin_pth`"), std::string::npos)
        << dlock_last_error();
    EXPECT_TRUE(catalog.backends.empty());
    int sentinel = 0;
    auto* const marked = reinterpret_cast<dlock_backend_catalog*>(&sentinel);
    dlock_backend_catalog* untouched = marked;
    EXPECT_EQ(dlock_backend_catalog_open(config_.c_str(), &untouched), DLOCK_CONFIG);
    EXPECT_EQ(untouched, marked) << "out-parameters are written only on DLOCK_OK";
    EXPECT_EQ(dlock_backend_catalog_open(config_.c_str(), nullptr), DLOCK_INVALID_ARGUMENT);
}

TEST(AdminDuration, ParsesWhatConfigsWrite) {
    int64_t ms = -1;
    ASSERT_EQ(dlock_duration_parse("250ms", 0, "--ttl", &ms), DLOCK_OK);
    EXPECT_EQ(ms, 250);
    ASSERT_EQ(dlock_duration_parse("5m", 0, nullptr, &ms), DLOCK_OK);
    EXPECT_EQ(ms, 300'000);
    ASSERT_EQ(dlock_duration_parse("forever", 1, nullptr, &ms), DLOCK_OK);
    EXPECT_EQ(ms, DLOCK_WAIT_FOREVER);
    EXPECT_EQ(dlock::parse_duration("0", true), std::chrono::milliseconds(0));
    EXPECT_EQ(dlock::parse_duration("forever", true), dlock::forever);
}

TEST(AdminDuration, RefusesABadDurationNamingTheValueAndLeavesTheOutputAlone) {
    int64_t ms = 42;
    EXPECT_EQ(dlock_duration_parse("10parsecs", 0, "--ttl", &ms), DLOCK_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(dlock_last_error()), "--ttl: `10parsecs` is not a duration (e.g. 250ms, 30s, 5m, 1h)");
    EXPECT_EQ(ms, 42);
    EXPECT_EQ(dlock_duration_parse("forever", 0, "--ttl", &ms), DLOCK_INVALID_ARGUMENT);
    EXPECT_EQ(dlock_duration_parse("-1s", 1, "--wait", &ms), DLOCK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(dlock_last_error()).find("--wait: `-1s` is negative"), std::string::npos) << dlock_last_error();
    std::error_code ec;
    dlock::parse_duration("30", false, "--kill-after", ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    EXPECT_NE(std::string(dlock_last_error()).find("--kill-after: `30` has no unit"), std::string::npos) << dlock_last_error();
}

}  // namespace
