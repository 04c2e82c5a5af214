// The `dlock` command end to end: 16 concurrent `dlock run` processes on one name never overlap
// (judged from an append-only log of enter/exit lines), exit codes, the exported environment,
// and SIGTERM to the command when the lease is lost.
#include "support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

using dlock::test::child_process;
using namespace std::chrono_literals;

namespace {

class Cli : public ::testing::Test {
protected:
    void SetUp() override {
        config_ = dir_.path() + "/file.yaml";
        std::ofstream(config_) << "backend: file\noptions:\n  directory: " << dir_.path() << "/locks\n";
    }
    int run(const std::vector<std::string>& args) {
        std::vector<std::string> argv{DLOCK_CLI, "--config", config_};
        argv.insert(argv.end(), args.begin(), args.end());
        child_process p(argv);
        return p.wait();
    }
    dlock::test::scratch_dir dir_{"dlock-cli-test"};
    std::string config_;
};

TEST_F(Cli, SixteenConcurrentRunsNeverOverlap) {
    const std::string log = dir_.path() + "/critical.log";
    // Each command appends "enter TOKEN", sleeps, appends "exit TOKEN". O_APPEND writes of one
    // short line are atomic, so the log is the true order of events.
    const std::string body = "echo \"enter $DLOCK_FENCING_TOKEN $DLOCK_OWNER\" >> " + log +
                             "; sleep 0.02; echo \"exit $DLOCK_FENCING_TOKEN $DLOCK_OWNER\" >> " + log;
    std::vector<std::unique_ptr<child_process>> runs;
    for (int i = 0; i < 16; ++i)
        runs.push_back(std::make_unique<child_process>(
            std::vector<std::string>{DLOCK_CLI, "--config", config_, "run", "cli/shared", "--", "sh", "-c", body}));
    for (auto& r : runs) EXPECT_EQ(r->wait(), 0);

    std::ifstream in(log);
    std::string line, holder;
    size_t sections = 0, overlaps = 0, inversions = 0;
    uint64_t last_token = 0;
    for (; std::getline(in, line);) {
        std::istringstream words(line);
        std::string kind, token, owner;
        words >> kind >> token >> owner;
        if (kind == "enter") {
            if (!holder.empty()) ++overlaps;
            holder = token + " " + owner;
            if (std::stoull(token) <= last_token) ++inversions;
            last_token = std::stoull(token);
            ++sections;
        } else if (kind == "exit") {
            if (holder != token + " " + owner) ++overlaps;
            holder.clear();
        }
    }
    std::cout << "checker: " << sections << " `dlock run` critical sections from 16 processes, " << overlaps
              << " overlaps, " << inversions << " fencing-token inversions\n";
    EXPECT_EQ(sections, 16u);
    EXPECT_EQ(overlaps, 0u);
    EXPECT_EQ(inversions, 0u);
}

TEST_F(Cli, PassesTheCommandsExitStatus) {
    EXPECT_EQ(run({"run", "cli/x", "--", "sh", "-c", "exit 7"}), 7);
    EXPECT_EQ(run({"run", "cli/x", "--", "true"}), 0);
}

TEST_F(Cli, ExportsTheLeaseToTheCommand) {
    const std::string out = dir_.path() + "/env.txt";
    ASSERT_EQ(run({"run", "cli/env", "--", "sh", "-c", "echo \"$DLOCK_NAME|$DLOCK_FENCING_TOKEN|$DLOCK_OWNER\" > " + out}), 0);
    std::string line;
    std::getline(std::ifstream(out), line);
    EXPECT_EQ(line.substr(0, 10), "cli/env|1|");
    EXPECT_EQ(line.size(), 10u + 32u);
}

TEST_F(Cli, NotAcquiredInTimeExits75) {
    child_process holder({DLOCK_CLI, "--config", config_, "run", "cli/held", "--", "sleep", "5"});
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(run({"run", "--wait", "100ms", "cli/held", "--", "true"}), 75);
    EXPECT_EQ(run({"run", "--wait", "0", "cli/held", "--", "true"}), 75);
}

TEST_F(Cli, MissingCommandExits127AndReleases) {
    EXPECT_EQ(run({"run", "cli/y", "--", "/nonexistent/command"}), 127);
    EXPECT_EQ(run({"run", "--wait", "0", "cli/y", "--", "true"}), 0) << "the lock was released";
}

TEST_F(Cli, BadConfigExits78) {
    std::ofstream(config_) << "backend: file\nbogus: 1\n";
    EXPECT_EQ(run({"run", "cli/z", "--", "true"}), 78);
    EXPECT_EQ(run({"check"}), 78);
}

TEST_F(Cli, LostLeaseTerminatesTheCommandAndExits76) {
    // The fake TTL backend reports every hold LOST 300 ms after acquiring it.
    std::ofstream(config_) << "backend: fake\nplugin_path: [" DLOCK_TEST_PLUGIN_DIR "]\noptions:\n  lose_after: 300ms\n";
    const std::string marker = dir_.path() + "/terminated";
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(run({"run", "cli/lost", "--", "sh", "-c", "trap 'kill $!; touch " + marker + "; exit 0' TERM; sleep 10 & wait"}), 76);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    EXPECT_TRUE(std::ifstream(marker).good()) << "the command should have received SIGTERM";
}

TEST_F(Cli, CommandIsTerminatedWhenDlockDies) {
    // If `dlock run` is killed its lock is released (by the kernel, for `file`): the command must
    // not run on unprotected.
    const std::string marker = dir_.path() + "/terminated";
    const std::string started = dir_.path() + "/started";
    child_process run_process({DLOCK_CLI, "--config", config_, "run", "cli/orphan", "--", "sh", "-c",
                               "trap 'touch " + marker + "; exit 0' TERM; touch " + started +
                                   "; while :; do sleep 0.05; done"});
    // dlock is killed once the command runs with its trap set (a fixed pause was too short on a
    // loaded machine under ASan: dlock died before it had started the command).
    for (int i = 0; i < 500 && !std::ifstream(started).good(); ++i) std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(std::ifstream(started).good()) << "the command did not start within 10 s";
    run_process.kill(SIGKILL);
    run_process.wait();
    bool terminated = false;
    for (int i = 0; i < 100 && !terminated; ++i) {
        terminated = std::ifstream(marker).good();
        std::this_thread::sleep_for(20ms);
    }
    EXPECT_TRUE(terminated) << "the command outlived dlock";
    EXPECT_EQ(run({"run", "--wait", "0", "cli/orphan", "--", "true"}), 0);
}

TEST_F(Cli, InspectAndCheckSpeakJson) {
    child_process inspect({DLOCK_CLI, "--config", config_, "--json", "inspect", "cli/none"}, true);
    std::string line;
    ASSERT_TRUE(inspect.read_line(line, 5000));
    EXPECT_NE(line.find("\"held\":false"), std::string::npos) << line;
    EXPECT_EQ(inspect.wait(), 1) << "inspect exits 1 when the lock is free";
    child_process check({DLOCK_CLI, "--config", config_, "--json", "check"}, true);
    ASSERT_TRUE(check.read_line(line, 5000));
    EXPECT_NE(line.find("\"ok\":true"), std::string::npos) << line;
    EXPECT_EQ(check.wait(), 0);
}

TEST_F(Cli, BackendsListsTheBuiltInFileBackendAndItsOptions) {
    child_process list({DLOCK_CLI, "backends", "--describe", "file"}, true);
    std::string all, line;
    while (list.read_line(line, 5000)) all += line + "\n";
    EXPECT_EQ(list.wait(), 0);
    EXPECT_NE(all.find("FENCING"), std::string::npos) << all;
    EXPECT_NE(all.find("directory"), std::string::npos) << all;
}

}  // namespace
