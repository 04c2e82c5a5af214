// The `dlock` command's contract with scripts: `inspect` answers through its exit status, every
// usage error is one line on stderr and exit 64, a bad option value never kills dlock with a signal
// and takes no lock, and the global options are accepted after the subcommand too.
#include "support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <thread>

using dlock::test::child_process;
using namespace std::chrono_literals;

namespace {

constexpr int exit_usage = 64;
constexpr int exit_config = 78;

struct cli_result {
    int status = -1;
    std::string out;                  // stdout
    std::vector<std::string> errors;  // stderr, line by line
};

class CliUsage : public ::testing::Test {
protected:
    void SetUp() override {
        config_ = dir_.path() + "/file.yaml";
        locks_ = dir_.path() + "/locks";
        std::ofstream(config_) << "backend: file\noptions:\n  directory: " << locks_ << "\n";
    }

    // Runs `dlock ARGS...` (no --config added), capturing stdout and stderr separately.
    cli_result dlock(const std::vector<std::string>& args) {
        const std::string err_file = dir_.path() + "/stderr.txt";
        std::vector<std::string> argv{"sh", "-c", "exec \"$@\" 2>" + err_file, "sh", DLOCK_CLI};
        argv.insert(argv.end(), args.begin(), args.end());
        child_process p(argv, true);
        cli_result r;
        for (std::string line; p.read_line(line, 10000);) r.out += line + "\n";
        r.status = p.wait();
        std::ifstream err(err_file);
        for (std::string line; std::getline(err, line);) r.errors.push_back(line);
        return r;
    }

    static std::string describe(const cli_result& r) {
        std::ostringstream s;
        s << "exit " << r.status << "; stdout: [" << r.out << "]; stderr:";
        for (const auto& e : r.errors) s << "\n  " << e;
        return s.str();
    }

    // A usage error: exit 64, nothing on stdout, exactly one line on stderr that starts "dlock".
    void expect_usage_error(const std::vector<std::string>& args, const std::string& mentions) {
        std::string cmdline;
        for (const auto& a : args) cmdline += " " + a;
        SCOPED_TRACE("dlock" + cmdline);
        const cli_result r = dlock(args);
        EXPECT_EQ(r.status, exit_usage) << describe(r);
        EXPECT_EQ(r.out, "") << describe(r);
        ASSERT_EQ(r.errors.size(), 1u) << describe(r);
        EXPECT_EQ(r.errors[0].rfind("dlock", 0), 0u) << describe(r);
        EXPECT_NE(r.errors[0].find(mentions), std::string::npos) << "should mention `" << mentions << "`: " << describe(r);
    }

    dlock::test::scratch_dir dir_{"dlock-cli-usage"};
    std::string config_;
    std::string locks_;
};

TEST_F(CliUsage, InspectExitsZeroWhenHeldAndOneWhenFree) {
    cli_result free_lock = dlock({"--config", config_, "inspect", "cli/probe"});
    EXPECT_EQ(free_lock.status, 1) << describe(free_lock);
    EXPECT_NE(free_lock.out.find("held:          no"), std::string::npos) << describe(free_lock);
    free_lock = dlock({"--config", config_, "--json", "inspect", "cli/probe"});
    EXPECT_EQ(free_lock.status, 1) << describe(free_lock);
    EXPECT_NE(free_lock.out.find("\"held\":false"), std::string::npos) << describe(free_lock);

    child_process holder({DLOCK_CLI, "--config", config_, "run", "cli/probe", "--", "sleep", "30"});
    cli_result held;
    const auto deadline = std::chrono::steady_clock::now() + 20s;  // generous: the machine is shared
    do {
        held = dlock({"--config", config_, "inspect", "cli/probe"});
        if (held.status != 1) break;
        std::this_thread::sleep_for(50ms);
    } while (std::chrono::steady_clock::now() < deadline);
    EXPECT_EQ(held.status, 0) << describe(held);
    EXPECT_NE(held.out.find("held:          yes"), std::string::npos) << describe(held);
    holder.kill(SIGKILL);
    holder.wait();
}

TEST_F(CliUsage, InspectErrorsAreNeitherHeldNorFree) {
    std::ofstream(config_) << "backend: file\nbogus: 1\n";
    const cli_result r = dlock({"--config", config_, "inspect", "cli/probe"});
    EXPECT_EQ(r.status, exit_config) << describe(r);
}

TEST_F(CliUsage, UsageErrorsExit64WithOneLine) {
    expect_usage_error({}, "subcommand");
    expect_usage_error({"frobnicate"}, "frobnicate");
    expect_usage_error({"--bogus", "inspect", "x"}, "--bogus");
    expect_usage_error({"inspect"}, "name");
    expect_usage_error({"inspect", "a", "b"}, "b");
    expect_usage_error({"run", "cli/x"}, "command");
    expect_usage_error({"run", "--wait"}, "--wait");
    expect_usage_error({"inspect", "x", "--config"}, "--config");
    expect_usage_error({"backends", "--describe"}, "--describe");
}

TEST_F(CliUsage, HelpStillExitsZero) {
    for (const auto& args : std::vector<std::vector<std::string>>{{"--help"}, {"run", "--help"}}) {
        const cli_result r = dlock(args);
        EXPECT_EQ(r.status, 0) << describe(r);
        EXPECT_NE(r.out.find("Usage"), std::string::npos) << describe(r);
    }
}

TEST_F(CliUsage, BadOptionValuesExit64AndTakeNoLock) {
    expect_usage_error({"--config", config_, "run", "--kill-after", "bogus", "cli/v", "--", "true"}, "--kill-after");
    expect_usage_error({"--config", config_, "run", "--wait", "bogus", "cli/v", "--", "true"}, "--wait");
    expect_usage_error({"--config", config_, "run", "--ttl", "forever", "cli/v", "--", "true"}, "--ttl");
    expect_usage_error({"--config", config_, "run", "--ttl", "10parsecs", "cli/v", "--", "true"}, "--ttl");
    // The values are checked before the backend is touched: no lock directory was even created.
    struct stat st;
    EXPECT_NE(stat(locks_.c_str(), &st), 0) << locks_ << " exists: a lock was taken before the options were checked";
}

TEST_F(CliUsage, GlobalOptionsAreAcceptedAfterTheSubcommand) {
    const std::string out = dir_.path() + "/ran";
    cli_result r = dlock({"run", "--config", config_, "cli/after", "--", "sh", "-c", "echo \"$DLOCK_NAME\" > " + out});
    EXPECT_EQ(r.status, 0) << describe(r);
    std::string line;
    std::getline(std::ifstream(out), line);
    EXPECT_EQ(line, "cli/after");
    struct stat st;
    EXPECT_EQ(stat(locks_.c_str(), &st), 0) << "the lock was not taken in the --config given after `run`";

    r = dlock({"inspect", "cli/after", "--config", config_, "--json"});
    EXPECT_EQ(r.status, 1) << describe(r);
    EXPECT_NE(r.out.find("\"held\":false"), std::string::npos) << describe(r);

    // The config named after the subcommand is the one used: a bad one is reported as such.
    const std::string bad = dir_.path() + "/bad.yaml";
    std::ofstream(bad) << "backend: file\nbogus: 1\n";
    r = dlock({"run", "-c", bad, "cli/after", "--", "true"});
    EXPECT_EQ(r.status, exit_config) << describe(r);
    r = dlock({"check", "--config", bad});
    EXPECT_EQ(r.status, exit_config) << describe(r);
}

TEST_F(CliUsage, CommandWordsAfterDashDashAreNeverTakenAsOptions) {
    const std::string out = dir_.path() + "/args";
    const cli_result r = dlock({"--config", config_, "run", "cli/words", "--", "sh", "-c", "echo \"$*\" > " + out, "sh",
                                "--config", "--json", "-c"});
    EXPECT_EQ(r.status, 0) << describe(r);
    std::string line;
    std::getline(std::ifstream(out), line);
    EXPECT_EQ(line, "--config --json -c");
}

}  // namespace
