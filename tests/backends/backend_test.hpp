// backend_test.hpp — helpers shared by the backend fault tests (tests/backends/*_test.cpp).
#pragma once

#include "support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace dlock::test {

// FAULTS.md's fenced resource, reduced to its rule: a write is accepted only with a token >= the
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

}  // namespace dlock::test
