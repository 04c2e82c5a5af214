// The loader's negative cases (fake plugins built with -D variants) and its lifetime rule: a
// plugin library stays loaded while a client made from it lives.
#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace {

const std::string plugin_dir = DLOCK_TEST_PLUGIN_DIR;

struct open_result {
    int status;
    std::string error;
};

open_result open_backend(const std::string& backend, const std::string& extra = "") {
    const std::string yaml = "backend: " + backend + "\nplugin_path: [" + plugin_dir + "]\n" + extra;
    dlock_client* client = nullptr;
    const int status = dlock_client_open_yaml(yaml.c_str(), "test.yaml", &client);
    open_result r{status, dlock_last_error()};
    dlock_client_close(client);
    return r;
}

bool library_mapped(const std::string& file) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line))
        if (line.find(file) != std::string::npos) return true;
    return false;
}

TEST(Loader, GoodPluginLoads) {
    const auto r = open_backend("fake");
    EXPECT_EQ(r.status, DLOCK_OK) << r.error;
}

TEST(Loader, MissingPluginListsEveryDirectoryTried) {
    const auto r = open_backend("nosuch");
    EXPECT_EQ(r.status, DLOCK_PLUGIN);
    EXPECT_NE(r.error.find("libdlock-nosuch.so"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find(plugin_dir + " (plugin_path)"), std::string::npos) << r.error;
}

TEST(Loader, PluginWithoutNegotiationSymbolIsRefused) {
    const auto r = open_backend("fake-no-symbol");
    EXPECT_EQ(r.status, DLOCK_PLUGIN);
    EXPECT_NE(r.error.find("libdlock-fake-no-symbol.so"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("does not export `dlock_plugin_negotiate`"), std::string::npos) << r.error;
}

TEST(Loader, TooOldPluginIsRefused) {
    const auto r = open_backend("fake-too-old");
    EXPECT_EQ(r.status, DLOCK_PLUGIN);
    EXPECT_NE(r.error.find("libdlock-fake-too-old.so"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("older than the oldest"), std::string::npos) << r.error;
}

TEST(Loader, TooNewPluginIsRefused) {
    const auto r = open_backend("fake-too-new");
    EXPECT_EQ(r.status, DLOCK_PLUGIN);
    EXPECT_NE(r.error.find("needs plugin ABI version 99"), std::string::npos) << r.error;
}

TEST(Loader, BrokenTableIsRefused) {
    const auto r = open_backend("fake-broken-table");
    EXPECT_EQ(r.status, DLOCK_PLUGIN);
    EXPECT_NE(r.error.find("function table is 40 bytes"), std::string::npos) << r.error;
}

TEST(Loader, CreateFailureIsReportedWithThePluginsMessage) {
    const auto r = open_backend("fake-create-fails");
    EXPECT_EQ(r.status, DLOCK_CONFIG);
    EXPECT_NE(r.error.find("nowhere:1"), std::string::npos) << r.error;
}

TEST(Loader, ExceptionAcrossTheAbiIsCaught) {
    const auto r = open_backend("fake-throws");
    EXPECT_EQ(r.status, DLOCK_PLUGIN);
    EXPECT_NE(r.error.find("threw an exception from `create`"), std::string::npos) << r.error;
}

TEST(Loader, BackendNameCannotEscapeThePluginDirectory) {
    const auto r = open_backend("../fake");
    EXPECT_EQ(r.status, DLOCK_INVALID_ARGUMENT) << r.error;
}

TEST(Loader, UnknownOptionOfAPluginIsRejectedWithItsLocation) {
    const auto r = open_backend("fake", "options:\n  lose_afterr: 1s\n");
    EXPECT_EQ(r.status, DLOCK_CONFIG);
    EXPECT_NE(r.error.find("test.yaml:4:3: unknown option `lose_afterr` for backend `fake`"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("known: lose_after, renew_status"), std::string::npos) << r.error;
}

TEST(Loader, IllTypedOptionIsRejected) {
    const auto r = open_backend("fake", "options:\n  renew_status: lots\n");
    EXPECT_EQ(r.status, DLOCK_CONFIG);
    EXPECT_NE(r.error.find("test.yaml:4:3: option `renew_status`: `lots` is not an integer"), std::string::npos) << r.error;
}

TEST(Loader, EnvironmentPluginPathIsSearched) {
    setenv("DLOCK_PLUGIN_PATH", ("/nonexistent:" + plugin_dir).c_str(), 1);
    dlock_client* client = nullptr;
    const int status = dlock_client_open_yaml("backend: fake\n", "env.yaml", &client);
    EXPECT_EQ(status, DLOCK_OK) << dlock_last_error();
    dlock_client_close(client);
    unsetenv("DLOCK_PLUGIN_PATH");
}

TEST(Loader, LibraryStaysLoadedWhileAClientLives) {
    const std::string file = "libdlock-fake.so";
    {
        auto c = dlock::client::from_yaml("backend: fake\nplugin_path: [" + plugin_dir + "]\n");
        EXPECT_TRUE(library_mapped(file));
        auto lease = c.acquire("held-across", dlock::acquire_options().with_ttl(std::chrono::seconds(5)));
        c.close();  // the lease handle outlives its client; the library must stay mapped for it
        EXPECT_TRUE(library_mapped(file));
        EXPECT_EQ(lease.state(), dlock::lease_state::released);
        EXPECT_EQ(lease.release(), dlock::release_outcome::released);
    }
    // Whether the library is unmapped after the last client is glibc's decision (a plugin with
    // STB_GNU_UNIQUE symbols, as unoptimised C++ often has, is never unloaded), so it is not asserted.
}

}  // namespace
