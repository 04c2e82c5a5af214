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

}  // namespace dlock::conformance
