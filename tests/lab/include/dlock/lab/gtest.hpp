// gtest.hpp — defines the GoogleTest integration of the lab: lab_environment (a global environment
// that starts the servers a test binary needs once, or reuses a running `dlock-lab up` named by
// DLOCK_LAB_STATE_DIR), the lab_test fixture (resets server state before each test), and
// DLOCK_LAB_REQUIRE (a missing backend fails the test in CI, skips it elsewhere).
//
//   int main(int argc, char** argv) {
//     ::testing::InitGoogleTest(&argc, argv);
//     dlock::lab::add_lab_environment({dlock::lab::backend::redis, dlock::lab::backend::etcd});
//     return RUN_ALL_TESTS();
//   }
//   TEST_F(MyTest, Works) { DLOCK_LAB_REQUIRE(dlock::lab::backend::redis); … }
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dlock/lab/lab.hpp"

namespace dlock::lab {

// True when the environment variable CI is "true" (or "1"): then a server that cannot start is a
// test failure, never a skip.
bool running_in_ci();

class lab_environment : public ::testing::Environment {
 public:
  explicit lab_environment(std::vector<backend> needed, lab_options options = {});
  ~lab_environment() override;

  // Starts the lab, or attaches to the `dlock-lab up` named by DLOCK_LAB_STATE_DIR when that one runs
  // every needed backend. Prints each server's startup time. A backend that fails to start is
  // recorded (and in CI reported as a failure here as well as in each test that requires it).
  void SetUp() override;
  // Tears the lab down and fails when any server process survived.
  void TearDown() override;

  // The environment add_lab_environment() registered. Aborts the test binary when there is none.
  static lab_environment& instance();

  bool available(backend which) const;
  std::string failure(backend which) const;  // why `which` is not available
  // Endpoints and config of an available backend (throws std::logic_error otherwise).
  const backend_access& access(backend which) const;
  std::filesystem::path config_path(backend which) const { return access(which).config; }

  // The lab this process started (for fault controls), or nullptr when attached to a `dlock-lab up`.
  class lab* owned_lab() { return lab_.get(); }
  bool attached() const { return attached_; }

  // reset_backend() on every available backend (what lab_test does before each test), or on one —
  // cheaper for a suite parameterized by backend.
  void reset(bool terminate_sql_sessions = false);
  void reset(backend which, bool terminate_sql_sessions = false) {
    reset_backend(access(which), terminate_sql_sessions);
  }

 private:
  std::vector<backend> needed_;
  lab_options options_;
  std::unique_ptr<class lab> lab_;
  bool attached_ = false;
  std::map<backend, backend_access> available_;
  std::map<backend, std::string> failures_;
};

// Creates the environment and registers it with ::testing::AddGlobalTestEnvironment (which owns it).
lab_environment* add_lab_environment(std::vector<backend> needed, lab_options options = {});

// Base fixture: SetUp resets every available backend's data, so each test starts clean.
class lab_test : public ::testing::Test {
 protected:
  void SetUp() override;
  lab_environment& environment() { return lab_environment::instance(); }
};

// For DLOCK_LAB_REQUIRE: empty when `which` is available; otherwise the reason.
std::optional<std::string> missing_backend(backend which);

}  // namespace dlock::lab

// In a test body or SetUp: stops the test when the backend is not available — FAIL() in CI,
// GTEST_SKIP() elsewhere — with the reason (which server, which port, what it printed).
#define DLOCK_LAB_REQUIRE(which)                                                   \
  do {                                                                             \
    if (auto dlock_lab_missing_ = ::dlock::lab::missing_backend(which)) {          \
      if (::dlock::lab::running_in_ci()) {                                         \
        FAIL() << *dlock_lab_missing_;                                             \
      } else {                                                                     \
        GTEST_SKIP() << *dlock_lab_missing_;                                       \
      }                                                                            \
    }                                                                              \
  } while (false)
