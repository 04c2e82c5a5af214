// conformance_test [--backend=NAME] [gtest flags]: with --backend, runs only that backend's
// instantiation and starts only the lab servers it needs (once for the whole run).
#include "backends.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

#ifdef DLOCK_WITH_LAB
#include "dlock/lab/gtest.hpp"
#endif

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    std::string only;
    for (int i = 1; i < argc; ++i)
        if (std::strncmp(argv[i], "--backend=", 10) == 0) only = argv[i] + 10;
    // --backend restricts the run to that backend, unless the caller chose tests with --gtest_filter.
    if (!only.empty() && ::testing::GTEST_FLAG(filter) == "*") ::testing::GTEST_FLAG(filter) = "Backends/*/" + only;
#ifdef DLOCK_WITH_LAB
    std::set<dlock::lab::backend> needed;
    for (const auto& c : dlock::conformance::backend_cases())
        if (only.empty() || c.label == only)
            for (const auto& s : c.servers) needed.insert(*dlock::lab::parse_backend(s));
    if (!needed.empty()) dlock::lab::add_lab_environment({needed.begin(), needed.end()});
#endif
    return RUN_ALL_TESTS();
}
