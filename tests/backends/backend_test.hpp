// backend_test.hpp — helpers shared by the backend fault tests (tests/backends/*_test.cpp): the
// fixture for "a backend of the lab", the fenced resource's rule, and the end of a paused holder.
#pragma once

#include "support.hpp"

#include "dlock/lab/gtest.hpp"

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <csignal>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace dlock::test {

// A test of backends the lab runs, with fault controls (kill, pause, restart, proxies). SetUp
// requires each of `backends` (one that did not start is a failure in CI, a skip elsewhere), needs
// a lab of this process's own (fault controls cannot act on one attached with `dlock-lab up`), and
// resets each backend to empty (for sql with `terminate_sql_sessions`, also ending every other
// client session, so no advisory lock survives a test). A fixture that prepares more overrides
// SetUp, calls this one first and stops when lab_ is null.
class lab_backend_test : public ::testing::Test {
protected:
    explicit lab_backend_test(std::initializer_list<dlock::lab::backend> backends, bool terminate_sql_sessions = false)
        : backends_(backends), terminate_sql_sessions_(terminate_sql_sessions) {}

    void SetUp() override {
        for (const auto which : backends_) DLOCK_LAB_REQUIRE(which);
        auto& env = dlock::lab::lab_environment::instance();
        if (!env.owned_lab()) GTEST_SKIP() << "attached to a `dlock-lab up`: fault controls need a lab of our own";
        for (const auto which : backends_) env.reset(which, terminate_sql_sessions_ && which == dlock::lab::backend::sql);
        lab_ = env.owned_lab();
    }

    // The path of the lab's client config for `which`.
    static std::string config(dlock::lab::backend which) {
        return dlock::lab::lab_environment::instance().config_path(which).string();
    }

    dlock::lab::lab* lab_ = nullptr;  // set once SetUp succeeded

private:
    std::vector<dlock::lab::backend> backends_;
    bool terminate_sql_sessions_ = false;
};

// docs/design/faults.md's fenced resource, reduced to its rule: a write is accepted only with a token >= the
// highest seen.
struct fenced_resource {
    uint64_t highest = 0;
    bool write(uint64_t token) {
        if (token < highest) return false;
        highest = token;
        return true;
    }
};

// The next line a worker prints; records a failure (and returns "") if none comes in time.
inline std::string expect_line(child_process& p, int timeout_ms = 15000) {
    std::string line;
    EXPECT_TRUE(p.read_line(line, timeout_ms)) << "the worker did not answer";
    return line;
}

// docs/design/faults.md §3 and 4, their end: worker A (a conformance_worker `script` holder) was paused past its
// ttl and `b`, taken by `client`, holds `name` now. Writes b's token to a fenced resource, resumes
// A, and checks that A's stale token is refused, that A reports LOST, that A's release answers
// already_lost and leaves B's lock alone; then ends A. Each answer of A is awaited up to
// `answer_timeout_ms`.
inline void expect_resumed_holder_fenced_off(child_process& a, dlock::client& client, const dlock::lease& b,
                                             const std::string& name, int answer_timeout_ms = 15000) {
    fenced_resource resource;
    EXPECT_TRUE(resource.write(b.fencing_token()));

    a.kill(SIGCONT);
    a.write_line("token");
    const uint64_t stale = std::stoull(expect_line(a, answer_timeout_ms));
    EXPECT_LT(stale, b.fencing_token());
    EXPECT_FALSE(resource.write(stale)) << "the resumed holder's write must be refused";
    a.write_line("state");
    EXPECT_EQ(expect_line(a, answer_timeout_ms), "lost");
    a.write_line("release");
    EXPECT_EQ(expect_line(a, answer_timeout_ms), "already_lost");
    EXPECT_EQ(client.inspect(name).holder, b.owner()) << "A's stale release touched B's lock";
    a.write_line("exit");
    a.wait();
}

}  // namespace dlock::test
