// dlock-lab — starts the lab's servers in the background for developers and scripts, and stops them.
//
//   dlock-lab up [backends…]   start a detached supervisor that owns the servers; wait until ready
//                              (default: all_backends(); mariadb only when named)
//   dlock-lab env              print `export DLOCK_LAB_*` lines for the running lab
//   dlock-lab status           print the running lab's servers
//   dlock-lab down             stop the supervisor (it kills the servers) and remove the lab directory
//   dlock-lab probe            report which fault mechanisms work on this machine
//
// The supervisor is a forked copy of this process in its own session: it starts the lab, records it
// in <state-dir>/state.json, tells `up` over a pipe that everything answers (or what failed), then
// waits for SIGTERM/SIGINT and tears the lab down. Its servers die with it even if it is SIGKILLed
// (PR_SET_PDEATHSIG); `down` then removes what is left.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <fmt/core.h>
#include <iostream>
#include <thread>

#include "dlock/lab/faults.hpp"
#include "dlock/lab/lab.hpp"
#include "dlock/lab/state.hpp"

namespace fs = std::filesystem;
using namespace dlock::lab;

namespace {

struct up_settings {
  std::vector<std::string> backends;
  int timeout_seconds = 60;
  bool redis_appendonly = false;
  std::string redis_appendfsync = "everysec";
  bool keep_dir = false;
  bool foreground = false;
};

void print_summary(const lab_state& state, const fs::path& state_dir) {
  fmt::print("dlock lab is up in {} (supervisor pid {}, state in {})\n", state.lab_dir.string(), state.supervisor_pid,
             state_dir.string());
  fmt::print("started in {} ms, in parallel; startup time per server:\n", state.total_startup.count());
  for (const auto& record : state.startup) {
    fmt::print("  {:<24} {:<21} {:>6} ms\n", record.server, record.client.to_string(), record.time.count());
  }
  fmt::print("configs:\n");
  for (const auto& access : state.backends) {
    fmt::print("  {:<20} {}\n", backend_name(access.kind), access.config.string());
  }
  bool any_dsn = false;
  for (const auto& access : state.backends) any_dsn = any_dsn || !access.dsn.empty();
  if (any_dsn) fmt::print("dsns:\n");
  for (const auto& access : state.backends) {
    if (!access.dsn.empty()) fmt::print("  {:<20} {}\n", backend_name(access.kind), access.dsn);
  }
  fmt::print("`eval \"$(dlock-lab env{})\"` exports DLOCK_LAB_<BACKEND>_CONFIG; `dlock-lab down{}` stops it.\n",
             state_dir == default_state_dir() ? "" : " --state-dir " + state_dir.string(),
             state_dir == default_state_dir() ? "" : " --state-dir " + state_dir.string());
}

// Removes what a dead supervisor left: its servers (normally already killed by the kernel), the lab
// directory and the state file.
void clean_up_after(const lab_state& state, const fs::path& state_dir) {
  if (!state.lab_dir.empty()) {
    auto survivors = wait_until_no_process_mentions(state.lab_dir.string(), std::chrono::seconds(5));
    for (const auto& p : survivors) ::kill(p.pid, SIGKILL);
    std::error_code ignored;
    fs::remove_all(state.lab_dir, ignored);
  }
  std::error_code ignored;
  fs::remove(state_file_path(state_dir), ignored);
}

// The supervisor: runs in the forked child. Reports "ok" or "error: …" on `report_fd`.
int supervise(const fs::path& state_dir, const std::vector<backend>& backends, const up_settings& settings,
              int report_fd) {
  auto report = [&](const std::string& text) {
    if (report_fd < 0) return;
    std::string message = text + "\n";
    ssize_t ignored = ::write(report_fd, message.data(), message.size());
    (void)ignored;
    ::close(report_fd);
    report_fd = -1;
  };
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  try {
    lab_options options;
    options.throw_on_failure = true;
    options.startup_timeout = std::chrono::seconds(settings.timeout_seconds);
    options.keep_dir = settings.keep_dir;
    options.redis.appendonly = settings.redis_appendonly;
    options.redis.appendfsync = settings.redis_appendfsync;
    lab running(backends, options);

    lab_state state;
    state.supervisor_pid = ::getpid();
    state.lab_dir = running.dir();
    state.backends = running.accesses();
    state.startup = running.startup_records();
    state.total_startup = running.total_startup_time();
    for (server* s : running.servers()) state.servers.push_back(s->name() + " " + std::to_string(s->pid()));
    write_state(state_dir, state);
    std::cout << running.startup_report() << std::flush;
    report("ok");

    int signal_number = 0;
    while (sigwait(&stop_signals, &signal_number) != 0) {
    }
    std::cout << "stopping on signal " << signal_number << "\n" << std::flush;
    auto torn = running.teardown();
    for (const auto& p : torn.survivors) std::cout << "survivor: pid " << p.pid << " " << p.cmdline << "\n";
    std::error_code ignored;
    fs::remove(state_file_path(state_dir), ignored);
    std::cout << "stopped in " << torn.time.count() << " ms\n" << std::flush;
    return 0;
  } catch (const std::exception& error) {
    std::cout << "error: " << error.what() << "\n" << std::flush;
    report(std::string("error: ") + error.what());
    return 1;
  }
}

int command_up(const fs::path& state_dir, const up_settings& settings) {
  std::vector<backend> backends;
  for (const auto& name : settings.backends) backends.push_back(*parse_backend(name));
  if (backends.empty()) backends = all_backends();

  fs::create_directories(state_dir);
  ::chmod(state_dir.c_str(), 0700);
  if (auto previous = read_state(state_dir)) {
    if (supervisor_alive(*previous)) {
      fmt::print(stderr, "dlock-lab: a lab is already running from {} (supervisor pid {}, {}); run `dlock-lab down` first\n",
                 state_dir.string(), previous->supervisor_pid, previous->lab_dir.string());
      return 1;
    }
    fmt::print(stderr, "dlock-lab: cleaning up after a lab whose supervisor (pid {}) is gone\n",
               previous->supervisor_pid);
    clean_up_after(*previous, state_dir);
  }

  if (settings.foreground) {
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    ::sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
    return supervise(state_dir, backends, settings, -1);
  }

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    fmt::print(stderr, "dlock-lab: pipe: {}\n", std::strerror(errno));
    return 1;
  }
  std::cout.flush();
  std::fflush(nullptr);
  // Single-threaded here: nothing of the lab (spawner thread, clients) exists before the fork.
  pid_t pid = ::fork();
  if (pid < 0) {
    fmt::print(stderr, "dlock-lab: fork: {}\n", std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    ::close(pipe_fds[0]);
    ::setsid();
    int null_fd = ::open("/dev/null", O_RDONLY);
    int log_fd = ::open((state_dir / "supervisor.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::close(null_fd);
    ::close(log_fd);
    ::signal(SIGHUP, SIG_IGN);
    // Blocked before any thread exists, so every thread inherits the mask and sigwait gets them.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    ::sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
    int rc = supervise(state_dir, backends, settings, pipe_fds[1]);
    std::cout.flush();
    std::fflush(nullptr);
    ::_exit(rc);  // no static destructors: the lab's spawner thread is still parked
  }
  ::close(pipe_fds[1]);
  std::string message;
  char buffer[4096];
  for (;;) {
    ssize_t got = ::read(pipe_fds[0], buffer, sizeof buffer);
    if (got > 0) {
      message.append(buffer, static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(pipe_fds[0]);
  if (message.rfind("ok", 0) == 0) {
    auto state = read_state(state_dir);
    if (!state) {
      fmt::print(stderr, "dlock-lab: the supervisor reported success but wrote no state in {}\n", state_dir.string());
      return 1;
    }
    print_summary(*state, state_dir);
    return 0;
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (message.empty()) {
    message = "the supervisor ended without a report; its log:\n" + file_tail(state_dir / "supervisor.log", 30);
  }
  fmt::print(stderr, "dlock-lab up failed: {}", message);
  return 1;
}

int command_env(const fs::path& state_dir) {
  auto state = running_lab(state_dir);
  if (!state) {
    fmt::print(stderr, "dlock-lab: no running lab in {}; start one with `dlock-lab up`\n", state_dir.string());
    return 1;
  }
  std::cout << shell_exports(*state, state_dir);
  return 0;
}

int command_status(const fs::path& state_dir) {
  auto state = read_state(state_dir);
  if (!state) {
    fmt::print("no lab recorded in {}\n", state_dir.string());
    return 1;
  }
  bool alive = supervisor_alive(*state);
  fmt::print("lab {} — supervisor pid {} {}\n", state->lab_dir.string(), state->supervisor_pid,
             alive ? "running" : "GONE");
  for (const auto& line : state->servers) {
    auto space = line.rfind(' ');
    pid_t pid = static_cast<pid_t>(std::atol(line.c_str() + space + 1));
    bool running = process_alive(pid);
    fmt::print("  {:<40} {}\n", line, running ? "running" : "not running");
  }
  return alive ? 0 : 1;
}

int command_down(const fs::path& state_dir, int timeout_seconds) {
  auto state = read_state(state_dir);
  if (!state) {
    fmt::print("dlock-lab: no lab recorded in {}; nothing to stop\n", state_dir.string());
    return 0;
  }
  if (supervisor_alive(*state)) {
    ::kill(state->supervisor_pid, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
    while (supervisor_alive(*state) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (supervisor_alive(*state)) {
      fmt::print(stderr, "dlock-lab: supervisor {} did not stop within {} s; killing it\n", state->supervisor_pid,
                 timeout_seconds);
      ::kill(state->supervisor_pid, SIGKILL);
    }
  }
  clean_up_after(*state, state_dir);
  std::error_code ignored;
  fs::remove(state_dir / "supervisor.log", ignored);
  fs::remove(state_dir, ignored);  // only when empty
  fmt::print("dlock-lab: stopped the lab in {}\n", state->lab_dir.string());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dlock-lab: real Redis, ZooKeeper, etcd, PostgreSQL and MariaDB servers on loopback for dlock"};
  app.require_subcommand(1);
  std::string state_dir_text = default_state_dir().string();
  app.add_option("--state-dir", state_dir_text, "where the running lab is recorded")
      ->capture_default_str();

  up_settings settings;
  std::vector<std::string> names;
  for (backend b : all_backends()) names.emplace_back(backend_name(b));
  for (backend b : opt_in_backends()) names.emplace_back(backend_name(b));
  auto* up = app.add_subcommand("up", "start servers in the background and wait until they answer");
  up->add_option("backends", settings.backends, "which backends (default: all but the opt-in mariadb)")
      ->check(CLI::IsMember(names));
  up->add_option("--timeout", settings.timeout_seconds, "seconds each backend may take to start")
      ->capture_default_str();
  up->add_flag("--redis-appendonly", settings.redis_appendonly, "the single Redis runs with appendonly yes");
  up->add_option("--redis-appendfsync", settings.redis_appendfsync, "appendfsync with --redis-appendonly")
      ->check(CLI::IsMember({"always", "everysec", "no"}))
      ->capture_default_str();
  up->add_flag("--keep-dir", settings.keep_dir, "keep the lab directory (logs, data) after down");
  up->add_flag("--foreground", settings.foreground, "supervise in this process (Ctrl-C stops)");
  auto* env = app.add_subcommand("env", "print export lines for the running lab's configs");
  auto* status = app.add_subcommand("status", "print the running lab's servers");
  int down_timeout = 30;
  auto* down = app.add_subcommand("down", "stop the running lab and remove its directory");
  down->add_option("--timeout", down_timeout, "seconds to wait for the supervisor")->capture_default_str();
  auto* probe = app.add_subcommand("probe", "report which fault-injection mechanisms work here");

  CLI11_PARSE(app, argc, argv);
  fs::path state_dir = fs::absolute(state_dir_text);
  try {
    if (*up) return command_up(state_dir, settings);
    if (*env) return command_env(state_dir);
    if (*status) return command_status(state_dir);
    if (*down) return command_down(state_dir, down_timeout);
    if (*probe) {
      std::cout << probe_fault_capabilities().report();
      return 0;
    }
  } catch (const std::exception& error) {
    fmt::print(stderr, "dlock-lab: {}\n", error.what());
    return 1;
  }
  return 0;
}
