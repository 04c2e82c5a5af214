// Implements the GoogleTest integration (gtest.hpp).
#include "dlock/lab/gtest.hpp"

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "dlock/lab/state.hpp"

namespace dlock::lab {
namespace {

lab_environment* registered = nullptr;

std::string names_of(const std::vector<backend>& backends) {
  std::string out;
  for (backend b : backends) out += (out.empty() ? "" : " ") + std::string(backend_name(b));
  return out;
}

}  // namespace

bool running_in_ci() {
  const char* ci = std::getenv("CI");
  if (!ci) return false;
  std::string value = ci;
  return value == "true" || value == "TRUE" || value == "True" || value == "1";
}

lab_environment::lab_environment(std::vector<backend> needed, lab_options options)
    : needed_(std::move(needed)), options_(std::move(options)) {
  registered = this;
}

lab_environment::~lab_environment() {
  if (registered == this) registered = nullptr;
}

lab_environment& lab_environment::instance() {
  if (!registered) {
    std::fprintf(stderr, "dlock lab: no lab_environment registered; call dlock::lab::add_lab_environment in main\n");
    std::abort();
  }
  return *registered;
}

void lab_environment::SetUp() {
  if (const char* state_dir = std::getenv("DLOCK_LAB_STATE_DIR"); state_dir && *state_dir) {
    try {
      if (auto state = running_lab(state_dir)) {
        std::map<backend, backend_access> offered;
        for (const auto& access : state->backends) offered[access.kind] = access;
        bool covers = true;
        for (backend b : needed_) covers = covers && offered.count(b);
        if (covers) {
          for (backend b : needed_) available_[b] = offered[b];
          attached_ = true;
          std::cout << "[dlock lab] reusing the running lab of " << state_dir << " (" << state->lab_dir.string()
                    << ", supervisor pid " << state->supervisor_pid << ") for: " << names_of(needed_) << "\n";
          return;
        }
        std::cout << "[dlock lab] the lab of " << state_dir
                  << " lacks some of the needed backends; starting a private one\n";
      } else {
        std::cout << "[dlock lab] DLOCK_LAB_STATE_DIR=" << state_dir << " has no running lab; starting a private one\n";
      }
    } catch (const std::exception& error) {
      std::cout << "[dlock lab] cannot use DLOCK_LAB_STATE_DIR=" << state_dir << ": " << error.what()
                << "; starting a private one\n";
    }
  }
  lab_options options = options_;
  options.throw_on_failure = false;
  try {
    lab_ = std::make_unique<class lab>(needed_, options);
  } catch (const std::exception& error) {
    for (backend b : needed_) failures_[b] = error.what();
  }
  if (lab_) {
    std::cout << "[dlock lab] " << lab_->startup_report() << std::flush;
    for (backend b : needed_) {
      if (lab_->has(b)) {
        available_[b] = lab_->access(b);
      } else {
        failures_[b] = lab_->failure(b);
      }
    }
  }
  if (!failures_.empty()) {
    std::string message = "dlock lab: backends that did not start:";
    for (const auto& [which, why] : failures_) message += "\n[" + std::string(backend_name(which)) + "] " + why;
    if (running_in_ci()) {
      ADD_FAILURE() << message;
    } else {
      std::cout << message << "\n(tests that need them are skipped; with CI=true they fail)\n";
    }
  }
}

void lab_environment::TearDown() {
  if (!lab_) return;
  auto report = lab_->teardown();
  std::cout << "[dlock lab] teardown took " << report.time.count() << " ms\n";
  if (!report.survivors.empty()) {
    std::string list;
    for (const auto& p : report.survivors) list += "\n  pid " + std::to_string(p.pid) + ": " + p.cmdline;
    ADD_FAILURE() << "dlock lab: server processes survived teardown:" << list;
  }
  lab_.reset();
  available_.clear();
}

bool lab_environment::available(backend which) const { return available_.count(which) != 0; }

std::string lab_environment::failure(backend which) const {
  if (available(which)) return "";
  auto found = failures_.find(which);
  if (found != failures_.end()) return found->second;
  return std::string(backend_name(which)) + " is not among the backends this test binary's lab_environment starts";
}

const backend_access& lab_environment::access(backend which) const {
  auto found = available_.find(which);
  if (found == available_.end()) throw std::logic_error("dlock lab: " + failure(which));
  return found->second;
}

void lab_environment::reset(bool terminate_sql_sessions) {
  for (const auto& [which, access] : available_) reset_backend(access, terminate_sql_sessions);
}

lab_environment* add_lab_environment(std::vector<backend> needed, lab_options options) {
  auto* environment = new lab_environment(std::move(needed), std::move(options));
  ::testing::AddGlobalTestEnvironment(environment);
  return environment;
}

void lab_test::SetUp() {
  try {
    environment().reset();
  } catch (const std::exception& error) {
    FAIL() << "dlock lab: resetting the servers before the test failed: " << error.what();
  }
}

std::optional<std::string> missing_backend(backend which) {
  if (!registered) return std::string("no dlock::lab::lab_environment is registered (add_lab_environment in main)");
  if (registered->available(which)) return std::nullopt;
  return "dlock lab: " + std::string(backend_name(which)) + " is not available: " + registered->failure(which);
}

}  // namespace dlock::lab
