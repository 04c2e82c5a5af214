// process.hpp — defines how the lab runs a server as a child process (child_process, spawn_options)
// and the /proc scans that prove no server outlived its lab (list_processes and friends).
//
// Every child is started by fork/exec in its own process group, with PR_SET_PDEATHSIG = SIGKILL set
// after any user switch (a credential change clears it), so the kernel kills it when the lab's
// process dies, even by SIGKILL. The parent-death signal fires when the *thread* that forked exits,
// so all forks go through one lab-wide spawner thread that lives until the process exits: a server
// started or restarted from a short-lived test thread still dies with the process, not the thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace dlock::lab {

// A failure to start, signal or reap a child; the message names the program and the cause.
class process_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct spawn_options {
  // argv[0] is the program: an absolute path, or a name looked up in PATH before forking.
  std::vector<std::string> argv;
  // "NAME=value" entries added to (or replacing in) the lab process's environment.
  std::vector<std::string> extra_env;
  // Working directory of the child; empty: the lab's.
  std::filesystem::path working_dir;
  // stdout and stderr are appended to this file (created 0644); empty: /dev/null. stdin is /dev/null.
  std::filesystem::path log_path;
  // When set and the lab runs as root: the child switches to this user (its primary group, no
  // supplementary groups) before exec. Ignored when not root (the child runs as the lab's user).
  std::optional<std::string> run_as_user;
  // When set: the child enters the network namespace /run/netns/<name> before exec.
  std::optional<std::string> network_namespace;
};

// One child process and its process group (pgid == pid). Move-only; the destructor kills the whole
// group with SIGKILL and reaps the child. Not thread-safe: one owner drives it.
class child_process {
 public:
  child_process() = default;
  ~child_process();
  child_process(child_process&& other) noexcept;
  child_process& operator=(child_process&& other) noexcept;
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  // Starts the program. Returns once exec succeeded; throws process_error naming the program and the
  // failing step (no such file, cannot switch user, …) otherwise.
  static child_process spawn(const spawn_options& options);

  // The child's pid, which is also its process group id; -1 when there is none.
  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }

  // True while the child has not exited (reaps it when it has).
  bool running();

  // Sends `signal` to every process of the group. No effect once the child was reaped.
  void signal_group(int signal);
  // Sends `signal` to the group and to every descendant of the child, wherever its group: PostgreSQL
  // backends call setsid(), so SIGSTOP/SIGCONT to the group alone would not pause them.
  void signal_tree(int signal);
  // SIGSTOP to the tree, then waits (up to `timeout`) until every process of it is stopped — the
  // signal takes effect only when each process is next scheduled. Returns whether all stopped.
  bool stop_tree(std::chrono::milliseconds timeout = std::chrono::seconds(2));

  // Waits up to `timeout` for the child to exit; returns its wait status, or nullopt if it still runs.
  std::optional<int> wait_for_exit(std::chrono::milliseconds timeout);

  // SIGKILLs the group and every descendant (PostgreSQL backends live in their own sessions), reaps
  // the child and waits (up to 5 s) until none of them is alive, so a restart never meets a
  // half-dead predecessor holding its files, ports or shared memory. Idempotent.
  void kill_group();

  // Sends `signal` to the group (then SIGCONT to the tree, so a paused server can act on it), waits up
  // to `grace` for the child
  // to exit, then kill_group(). Returns true when the child exited within `grace`.
  bool stop(int signal, std::chrono::milliseconds grace);

  // The wait status of the exited child, if it was reaped.
  std::optional<int> exit_status() const { return status_; }

  // "exited with status 1", "killed by signal 9", "running" — for error messages.
  std::string describe_exit() const;

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// A process as /proc shows it.
struct process_info {
  pid_t pid = 0;
  pid_t parent = 0;
  pid_t process_group = 0;
  char state = '?';     // R, S, D, T, Z, …
  std::string cmdline;  // arguments joined by spaces
};

// Every process of the machine that is not a zombie and not the calling process.
std::vector<process_info> list_live_processes();
// Live processes whose command line contains `text` (e.g. a lab's temporary directory).
std::vector<process_info> processes_mentioning(const std::string& text);
// Live processes in process group `process_group`.
std::vector<process_info> processes_in_group(pid_t process_group);
// Live descendants of `pid` (children, their children, …), not including `pid`.
std::vector<process_info> live_descendants(pid_t pid);
// The process exists and is not a zombie.
bool process_alive(pid_t pid);

// Waits up to `timeout` until processes_mentioning(text) is empty; returns what is still there.
std::vector<process_info> wait_until_no_process_mentions(const std::string& text,
                                                         std::chrono::milliseconds timeout);

// The last `max_lines` lines of a text file ("" when it cannot be read), for error messages.
std::string file_tail(const std::filesystem::path& path, std::size_t max_lines = 30);

}  // namespace dlock::lab
