// backends.hpp — the backend configurations the conformance suite runs on. Each later backend
// adds one entry here (and, for servers, a lab environment that starts them); the tests
// themselves never change per backend.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace dlock::conformance {

struct backend_case {
    std::string label;  // GoogleTest parameter name: [A-Za-z0-9_]
    // Writes a config reaching this backend into `scratch` and returns its path. Called once per
    // test binary run; servers it needs are started by the lab before that.
    std::function<std::string(const std::string& scratch)> make_config;
    // How long after a holder's SIGKILL the next acquirer may have to wait at most, beyond the
    // lease's ttl for TTL backends (session timeouts, election, scheduling slack).
    std::chrono::milliseconds recovery_slack{2000};
};

std::vector<backend_case> backend_cases();

}  // namespace dlock::conformance
