// Which plugin files the loader trusts and where it looks for them: a plugin that a user other than
// root or the process's own could change is refused, and a libdlock outside the build tree (as an
// installed one is) searches only plugin_path, DLOCK_PLUGIN_PATH and the plugin directory next to
// itself, never the build tree it was compiled in.
#include "support.hpp"

#include <dlock/dlock.h>

#include <gtest/gtest.h>

#include <boost/filesystem.hpp>

#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace {

namespace fs = boost::filesystem;
using dlock::test::child_process;

const std::string fake_plugin = std::string(DLOCK_TEST_PLUGIN_DIR) + "/libdlock-fake.so";

struct open_result {
    int status;
    std::string error;
};

open_result open_yaml(const std::string& yaml) {
    dlock_client* client = nullptr;
    const int status = dlock_client_open_yaml(yaml.c_str(), "trust.yaml", &client);
    open_result r{status, status == DLOCK_OK ? "" : dlock_last_error()};
    dlock_client_close(client);
    return r;
}

class PluginTrust : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = scratch_.path() + "/plugins";
        fs::create_directory(dir_);
        ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
        plugin_ = dir_ + "/libdlock-fake.so";
        fs::copy_file(fake_plugin, plugin_);
        ASSERT_EQ(chmod(plugin_.c_str(), 0755), 0);
    }
    open_result open_fake() { return open_yaml("backend: fake\nplugin_path: [" + dir_ + "]\n"); }

    dlock::test::scratch_dir scratch_{"dlock-plugin-trust"};
    std::string dir_;
    std::string plugin_;
};

TEST_F(PluginTrust, PluginWritableOnlyByItsOwnerLoads) {
    const auto r = open_fake();
    EXPECT_EQ(r.status, DLOCK_OK) << r.error;
}

TEST_F(PluginTrust, WorldWritablePluginIsRefused) {
    ASSERT_EQ(chmod(plugin_.c_str(), 0757), 0);
    const auto r = open_fake();
    EXPECT_EQ(r.status, DLOCK_PLUGIN) << r.error;
    EXPECT_NE(r.error.find(plugin_), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("writable by other users"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("chmod go-w"), std::string::npos) << "the message says how to fix it: " << r.error;
}

TEST_F(PluginTrust, GroupWritablePluginIsRefused) {
    if (getegid() == 0) {
        ASSERT_EQ(chown(plugin_.c_str(), -1, 65534), 0);  // a group that is not root's
    }
    ASSERT_EQ(chmod(plugin_.c_str(), 0775), 0);
    struct stat st;
    ASSERT_EQ(stat(plugin_.c_str(), &st), 0);
    if (st.st_gid == 0) GTEST_SKIP() << "cannot give the plugin a group other than root's";
    const auto r = open_fake();
    EXPECT_EQ(r.status, DLOCK_PLUGIN) << r.error;
    EXPECT_NE(r.error.find("writable by other users"), std::string::npos) << r.error;
}

TEST_F(PluginTrust, PluginInADirectoryWritableByOthersIsRefused) {
    ASSERT_EQ(chmod(dir_.c_str(), 0777), 0);
    const auto r = open_fake();
    EXPECT_EQ(r.status, DLOCK_PLUGIN) << r.error;
    EXPECT_NE(r.error.find("directory " + dir_), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("writable by other users"), std::string::npos) << r.error;
}

TEST_F(PluginTrust, StickyDirectoryWritableByOthersIsAccepted) {
    // As /tmp: with the sticky bit nobody else can rename or delete the plugin.
    ASSERT_EQ(chmod(dir_.c_str(), 01777), 0);
    const auto r = open_fake();
    EXPECT_EQ(r.status, DLOCK_OK) << r.error;
}

TEST_F(PluginTrust, PluginOwnedByAnotherUserIsRefused) {
    if (geteuid() != 0) GTEST_SKIP() << "giving a file to another user needs root";
    ASSERT_EQ(chown(plugin_.c_str(), 65534, -1), 0);
    const auto r = open_fake();
    EXPECT_EQ(r.status, DLOCK_PLUGIN) << r.error;
    EXPECT_NE(r.error.find("owned by uid 65534"), std::string::npos) << r.error;
}

TEST_F(PluginTrust, SymlinkToAWorldWritablePluginIsRefused) {
    const std::string elsewhere = scratch_.path() + "/elsewhere";
    fs::create_directory(elsewhere);
    ASSERT_EQ(chmod(elsewhere.c_str(), 0755), 0);
    fs::rename(plugin_, elsewhere + "/libdlock-fake.so");
    ASSERT_EQ(chmod((elsewhere + "/libdlock-fake.so").c_str(), 0666), 0);
    fs::create_symlink(elsewhere + "/libdlock-fake.so", plugin_);
    const auto r = open_fake();
    EXPECT_EQ(r.status, DLOCK_PLUGIN) << r.error;
    EXPECT_NE(r.error.find(elsewhere + "/libdlock-fake.so"), std::string::npos) << "names the real file: " << r.error;
}

// A copy of the build's libdlock in a directory of its own stands for an installed one: the probe
// (linked against libdlock) runs with that copy on LD_LIBRARY_PATH and opens a config.
class LibraryOutsideTheBuildTree : public ::testing::Test {
protected:
    void SetUp() override {
        lib_ = scratch_.path() + "/lib";
        fs::create_directories(lib_ + "/dlock/plugins");
        fs::copy_file(DLOCK_LIBRARY_FILE, lib_ + "/libdlock.so.0");
    }
    // Returns the probe's lines: the libdlock it used, the status name, the error text.
    std::vector<std::string> probe(const std::string& yaml) {
        child_process p({DLOCK_SEARCH_PROBE, yaml}, true, {"LD_LIBRARY_PATH=" + lib_});
        std::vector<std::string> lines;
        for (std::string line; p.read_line(line, 20000);) lines.push_back(line);
        EXPECT_EQ(p.wait(), 0);
        return lines;
    }
    static std::string joined(const std::vector<std::string>& lines) {
        std::string all;
        for (const auto& l : lines) all += l + "\n";
        return all;
    }

    dlock::test::scratch_dir scratch_{"dlock-installed-lib"};
    std::string lib_;
};

TEST_F(LibraryOutsideTheBuildTree, DoesNotSearchTheBuildTree) {
    ASSERT_EQ(getenv("DLOCK_PLUGIN_PATH"), nullptr) << "the test needs DLOCK_PLUGIN_PATH unset";
    // Ask for a backend whose plugin the build tree has (any one will do).
    std::string backend = "redis";
    for (fs::directory_iterator it(DLOCK_BUILD_PLUGIN_DIR), end; it != end; ++it) {
        const std::string f = it->path().filename().string();
        if (f.rfind("libdlock-", 0) == 0 && it->path().extension() == ".so") backend = f.substr(9, f.size() - 12);
    }
    const auto lines = probe("backend: " + backend + "\n");
    ASSERT_GE(lines.size(), 2u) << joined(lines);
    EXPECT_EQ(lines[0], "libdlock: " + lib_ + "/libdlock.so.0") << "the probe must use the copy: " << joined(lines);
    EXPECT_EQ(lines[1], "status: DLOCK_PLUGIN") << joined(lines);
    const std::string all = joined(lines);
    EXPECT_EQ(all.find(DLOCK_BUILD_PLUGIN_DIR), std::string::npos) << "the build tree was searched: " << all;
    EXPECT_NE(all.find(lib_ + "/dlock/plugins"), std::string::npos) << "the directory next to libdlock is searched: " << all;
}

TEST_F(LibraryOutsideTheBuildTree, FindsThePluginsNextToItself) {
    fs::copy_file(fake_plugin, lib_ + "/dlock/plugins/libdlock-fake.so");
    const auto lines = probe("backend: fake\n");
    ASSERT_GE(lines.size(), 2u) << joined(lines);
    EXPECT_EQ(lines[1], "status: DLOCK_OK") << joined(lines);
}

}  // namespace
