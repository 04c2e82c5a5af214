// lab_test_helpers.hpp — small helpers the lab's own tests (tests/lab/test) share.
#pragma once

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>

namespace dlock::lab::test {

// Polls `condition` every `poll` until it holds or `timeout` passes; returns whether it held. A
// condition that throws counts as not holding yet (a server still starting refuses connections).
template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout,
                std::chrono::milliseconds poll = std::chrono::milliseconds(50)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    try {
      if (condition()) return true;
    } catch (const std::exception&) {
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
}

struct command_result {
  int status = -1;     // the exit status; -1 when it could not run or did not exit normally
  std::string output;  // stdout and stderr
};

// Runs `command` with the shell and collects its output.
inline command_result run(const std::string& command) {
  command_result result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  std::size_t got;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, got);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace dlock::lab::test
