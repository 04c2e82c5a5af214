// backends.hpp — the backend configurations the conformance suite runs on. Each backend adds one
// entry to backends.cpp (and, for servers, names the lab backends it needs); the tests themselves
// never change per backend.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace dlock::conformance {

struct backend_case {
    std::string label;                 // GoogleTest parameter name and --backend value: [A-Za-z0-9_]
    std::vector<std::string> servers;  // lab backends it needs ("redis", "redlock", ...); none for file
    // Writes or finds a config reaching this backend and returns its path. Called once per run,
    // after the lab has started `servers`.
    std::function<std::string(const std::string& scratch)> make_config;
    // How long after a holder's SIGKILL the next acquirer may have to wait at most, beyond the
    // lease's ttl for TTL backends (session timeouts, election, scheduling slack).
    std::chrono::milliseconds recovery_slack{2000};
};

std::vector<backend_case> backend_cases();

// Why the servers of `c` are not available ("" when they are, or when it needs none).
std::string missing_servers(const backend_case& c);

// True under CI ($CI is "true" or "1"), where a server that cannot start is a failure, never a skip.
bool running_in_ci();

}  // namespace dlock::conformance

// In a fixture's SetUp (GoogleTest): when a server `backend_case` needs is missing, fails the test
// under CI and skips it elsewhere.
#define DLOCK_CONFORMANCE_REQUIRE_SERVERS(backend_case)                                         \
    do {                                                                                        \
        if (const std::string dlock_missing_ = ::dlock::conformance::missing_servers(backend_case); \
            !dlock_missing_.empty()) {                                                          \
            if (::dlock::conformance::running_in_ci()) FAIL() << dlock_missing_;                \
            GTEST_SKIP() << dlock_missing_;                                                     \
        }                                                                                       \
    } while (false)
