// Implements the lifecycle and fault controls every server shares (server.hpp).
#include "dlock/lab/server.hpp"

#include <signal.h>

#include <thread>

namespace dlock::lab {

server::server(std::string name, std::filesystem::path dir, endpoint client)
    : name_(std::move(name)), dir_(std::move(dir)), client_(std::move(client)) {
  std::filesystem::create_directories(dir_);
}

server::~server() = default;  // child_process kills the group

bool server::running() { return process_.running(); }

int server::graceful_signal() const { return SIGTERM; }

server_error server::failure(const std::string& what) const {
  std::string message = name_ + " (" + client_.to_string() + "): " + what;
  std::string tail = log_tail(30);
  if (tail.empty()) {
    message += " (nothing in its log " + log_path().string() + ")";
  } else {
    message += "\n--- last lines of " + log_path().string() + " ---\n" + tail;
  }
  return server_error(message);
}

void server::start(std::chrono::milliseconds timeout) {
  launch();
  wait_ready(std::chrono::steady_clock::now() + timeout);
}

void server::launch() {
  if (running()) throw failure("launch: already running (pid " + std::to_string(pid()) + ")");
  launched_at_ = std::chrono::steady_clock::now();
  startup_time_ = std::chrono::milliseconds(0);
  paused_ = false;
  before_launch();
  try {
    process_ = child_process::spawn(launch_options());
  } catch (const process_error& error) {
    throw failure(error.what());
  }
}

void server::wait_ready(std::chrono::steady_clock::time_point deadline) {
  auto pause = std::chrono::milliseconds(5);
  for (;;) {
    if (!process_.running()) {
      std::string how = process_.describe_exit();
      throw failure("exited during startup (" + how + ")");
    }
    if (probe()) {
      startup_time_ = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                            launched_at_);
      return;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                          launched_at_);
      process_.kill_group();
      throw failure("not ready after " + std::to_string(waited.count()) + " ms (killed)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

void server::kill() {
  process_.kill_group();
  paused_ = false;
}

void server::pause() {
  if (!running()) throw failure("pause: not running");
  process_.signal_tree(SIGSTOP);
  paused_ = true;
  if (!process_.stop_tree()) throw failure("pause: not every process stopped within 2 s");
}

void server::resume() {
  if (!running()) throw failure("resume: not running");
  process_.signal_tree(SIGCONT);
  paused_ = false;
}

bool server::stop(std::chrono::milliseconds grace) {
  bool clean = process_.stop(graceful_signal(), grace);
  paused_ = false;
  return clean;
}

void server::restart(data_policy data, std::chrono::milliseconds timeout) {
  if (running()) stop();
  if (data == data_policy::wipe) wipe_data();
  start(timeout);
}

}  // namespace dlock::lab
