// The `dlock` command's semaphores, shared locks, list and break, on the `file` backend: `run
// --permits N` never runs more than N commands at once, `run --shared` runs beside shared holders and
// never beside an exclusive one, `list` shows the holders, `break` says how many it removed. A mode
// the backend does not offer is a precise message and exit 69, never a lock taken in another mode.
// Every new option's usage error is one line and exit 64.
#include "support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

using dlock::test::child_process;
using namespace std::chrono_literals;

namespace {

constexpr int exit_usage = 64;
constexpr int exit_dlock_error = 69;
constexpr int exit_not_acquired = 75;

struct cli_result {
    int status = -1;
    std::string out;
    std::vector<std::string> errors;
};

class CliModes : public ::testing::Test {
protected:
    void SetUp() override {
        config_ = dir_.path() + "/file.yaml";
        std::ofstream(config_) << "backend: file\noptions:\n  directory: " << dir_.path() << "/locks\n";
        const cli_result check = dlock({"--json", "check"});
        ASSERT_EQ(check.status, 0) << describe(check);
        capabilities_ = check.out;
    }

    // Runs `dlock --config CONFIG ARGS...`, capturing stdout and stderr separately.
    cli_result dlock(const std::vector<std::string>& args) {
        const std::string err_file = dir_.path() + "/stderr-" + std::to_string(++calls_);
        std::vector<std::string> argv{"sh", "-c", "exec \"$@\" 2>" + err_file, "sh", DLOCK_CLI, "--config", config_};
        argv.insert(argv.end(), args.begin(), args.end());
        child_process p(argv, true);
        cli_result r;
        for (std::string line; p.read_line(line, 20000);) r.out += line + "\n";
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
    bool has(const std::string& capability) const { return capabilities_.find("\"" + capability + "\"") != std::string::npos; }

    // A `dlock run` in the background holding `name` (with `extra` options) for up to 30 s; returns
    // once `dlock inspect` sees it held.
    std::unique_ptr<child_process> hold_in_background(const std::string& name, const std::vector<std::string>& extra,
                                                      const std::vector<std::string>& inspect_extra = {}) {
        std::vector<std::string> argv{DLOCK_CLI, "--config", config_, "run"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        argv.insert(argv.end(), {name, "--", "sleep", "30"});
        auto p = std::make_unique<child_process>(argv);
        std::vector<std::string> inspect{"inspect", name};
        inspect.insert(inspect.end(), inspect_extra.begin(), inspect_extra.end());
        const auto deadline = std::chrono::steady_clock::now() + 20s;
        while (dlock(inspect).status != 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
        return p;
    }

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

    // A mode the backend lacks: exit 69, one line naming what is missing, and the command never ran.
    void expect_not_supported(const cli_result& r, const std::string& mentions) {
        EXPECT_EQ(r.status, exit_dlock_error) << describe(r);
        ASSERT_EQ(r.errors.size(), 1u) << describe(r);
        EXPECT_NE(r.errors[0].find(mentions), std::string::npos) << describe(r);
    }

    dlock::test::scratch_dir dir_{"dlock-cli-modes"};
    std::string config_, capabilities_;
    int calls_ = 0;
};

TEST_F(CliModes, NewOptionsUsageErrorsExit64WithOneLine) {
    expect_usage_error({"run", "--permits", "0", "cli/x", "--", "true"}, "--permits");
    expect_usage_error({"run", "--permits", "three", "cli/x", "--", "true"}, "--permits");
    expect_usage_error({"run", "--permits", "3", "--shared", "cli/x", "--", "true"}, "--shared");
    expect_usage_error({"run", "--permits"}, "--permits");
    expect_usage_error({"inspect", "--semaphore"}, "name");
    expect_usage_error({"list", "a", "b"}, "b");
    expect_usage_error({"list", "--bogus"}, "--bogus");
    expect_usage_error({"break"}, "name");
    expect_usage_error({"break", "a", "b"}, "b");
    expect_usage_error({"frobnicate"}, "list, break");
}

// At most N of the commands run at once (judged from an append-only log of enter/exit lines).
TEST_F(CliModes, RunWithPermitsNeverRunsMoreThanNCommandsAtOnce) {
    if (!has("SEMAPHORE")) {
        expect_not_supported(dlock({"run", "--permits", "2", "cli/sem", "--", "true"}), "semaphores");
        GTEST_SKIP() << "the file backend has no SEMAPHORE capability: only the refusal was checked";
    }
    const std::string log = dir_.path() + "/permits.log";
    const std::string body = "echo enter >> " + log + "; sleep 0.3; echo exit >> " + log;
    std::vector<std::unique_ptr<child_process>> runs;
    for (int i = 0; i < 6; ++i)
        runs.push_back(std::make_unique<child_process>(
            std::vector<std::string>{DLOCK_CLI, "--config", config_, "run", "--permits", "2", "cli/sem", "--", "sh", "-c", body}));
    for (auto& r : runs) EXPECT_EQ(r->wait(), 0);
    std::ifstream in(log);
    int present = 0, most = 0, sections = 0;
    for (std::string line; std::getline(in, line);) {
        if (line == "enter") {
            most = std::max(most, ++present);
            ++sections;
        } else if (line == "exit") {
            --present;
        }
    }
    std::cout << "checker: " << sections << " `dlock run --permits 2` sections from 6 processes, at most " << most << " at once\n";
    EXPECT_EQ(sections, 6);
    EXPECT_LE(most, 2);
}

TEST_F(CliModes, RunSharedRunsBesideSharedHoldersAndExcludesExclusive) {
    if (!has("SHARED")) {
        expect_not_supported(dlock({"run", "--shared", "cli/rw", "--", "true"}), "shared locks");
        GTEST_SKIP() << "the file backend has no SHARED capability: only the refusal was checked";
    }
    auto reader = hold_in_background("cli/rw", {"--shared"});
    cli_result r = dlock({"run", "--shared", "--wait", "0", "cli/rw", "--", "true"});
    EXPECT_EQ(r.status, 0) << "a second shared holder runs beside the first: " << describe(r);
    r = dlock({"run", "--wait", "0", "cli/rw", "--", "true"});
    EXPECT_EQ(r.status, exit_not_acquired) << "an exclusive `dlock run` waits for every shared holder: " << describe(r);
    r = dlock({"--json", "inspect", "cli/rw"});
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find("\"kind\":\"shared\""), std::string::npos) << describe(r);
    reader->kill(SIGKILL);
    reader->wait();

    auto writer = hold_in_background("cli/rw2", {});
    r = dlock({"run", "--shared", "--wait", "0", "cli/rw2", "--", "true"});
    EXPECT_EQ(r.status, exit_not_acquired) << "a shared `dlock run` waits for the exclusive holder: " << describe(r);
}

TEST_F(CliModes, InspectShowsEveryPermitHolder) {
    if (!has("SEMAPHORE")) {
        const cli_result r = dlock({"inspect", "--semaphore", "cli/sem"});
        EXPECT_EQ(r.status, exit_dlock_error) << describe(r);
        GTEST_SKIP() << "the file backend has no SEMAPHORE capability: only the refusal was checked";
    }
    cli_result r = dlock({"inspect", "--semaphore", "cli/sem"});
    EXPECT_EQ(r.status, 1) << "free: " << describe(r);
    auto first = hold_in_background("cli/sem", {"--permits", "3"}, {"--semaphore"});
    auto second = std::make_unique<child_process>(
        std::vector<std::string>{DLOCK_CLI, "--config", config_, "run", "--permits", "3", "cli/sem", "--", "sleep", "30"});
    auto count_permits = [](const std::string& out) {
        size_t n = 0;
        for (size_t at = out.find("\"kind\":\"permit\""); at != std::string::npos; at = out.find("\"kind\":\"permit\"", at + 1)) ++n;
        return n;
    };
    size_t permits = 0;
    const auto deadline = std::chrono::steady_clock::now() + 20s;  // until the second holder is in
    do {
        r = dlock({"--json", "inspect", "--semaphore", "cli/sem"});
        permits = count_permits(r.out);
        if (permits >= 2) break;
        std::this_thread::sleep_for(50ms);
    } while (std::chrono::steady_clock::now() < deadline);
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_EQ(permits, 2u) << describe(r);
    r = dlock({"inspect", "--semaphore", "cli/sem"});
    EXPECT_NE(r.out.find("holders:       2"), std::string::npos) << describe(r);
}

TEST_F(CliModes, ListShowsTheHoldersUnderThePrefix) {
    if (!has("LIST")) {
        expect_not_supported(dlock({"list"}), "cannot list");
        GTEST_SKIP() << "the file backend has no LIST capability: only the refusal was checked";
    }
    auto holder = hold_in_background("cli/list/held", {});
    cli_result r = dlock({"--json", "list", "cli/list/"});
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find("\"name\":\"cli/list/held\""), std::string::npos) << describe(r);
    EXPECT_NE(r.out.find("\"kind\":\"exclusive\""), std::string::npos) << describe(r);
    r = dlock({"list", "cli/other/"});
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_EQ(r.out.find("cli/list/held"), std::string::npos) << "the prefix filters: " << describe(r);
    EXPECT_NE(r.out.find("nothing is held under `cli/other/`"), std::string::npos) << describe(r);
    r = dlock({"list"});
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find("cli/list/held"), std::string::npos) << describe(r);
    EXPECT_NE(r.out.find("exclusive"), std::string::npos) << describe(r);
    holder->kill(SIGKILL);
    holder->wait();
    r = dlock({"--json", "list", "cli/list/"});
    EXPECT_EQ(r.out.find("cli/list/held"), std::string::npos) << "a released lock disappears: " << describe(r);
}

TEST_F(CliModes, BreakSaysHowManyHoldsItRemoved) {
    if (!has("BREAK")) {
        expect_not_supported(dlock({"break", "cli/held"}), "cannot break");
        GTEST_SKIP() << "the file backend has no BREAK capability: only the refusal was checked";
    }
    auto holder = hold_in_background("cli/break/held", {});
    cli_result r = dlock({"break", "cli/break/held"});
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find("broke 1 hold of lock `cli/break/held`"), std::string::npos) << describe(r);
    r = dlock({"run", "--wait", "5s", "cli/break/held", "--", "true"});
    EXPECT_EQ(r.status, 0) << "the broken lock is free for the next holder: " << describe(r);
    r = dlock({"--json", "break", "cli/break/never"});
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find("\"broken\":0"), std::string::npos) << describe(r);
}

TEST_F(CliModes, BackendsAndCheckNameTheNewCapabilities) {
    const cli_result r = dlock({"backends", "--describe", "file"});
    EXPECT_EQ(r.status, 0) << describe(r);
    for (const std::string cap : {"SEMAPHORE", "SHARED", "LIST", "BREAK"})
        EXPECT_EQ(r.out.find(cap) != std::string::npos, has(cap)) << cap << ": `backends` and `check` must agree: " << describe(r);
}

}  // namespace
