// Implements child processes and the /proc scans (process.hpp).
//
// Between fork() and exec() the child runs only async-signal-safe calls: the lab is multi-threaded
// (the spawner, proxies, client libraries), so everything the child needs — argv, envp, resolved
// program path, user ids, open files — is prepared before fork().
#include "dlock/lab/process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include "socket.hpp"

extern char** environ;

namespace dlock::lab {
namespace {

using detail::unique_fd;

// Steps of the child, reported back through the error pipe when one fails.
enum child_step : int { step_setpgid = 1, step_stdio, step_netns, step_user, step_pdeathsig, step_chdir, step_exec };

const char* describe_step(int step) {
  switch (step) {
    case step_setpgid: return "setpgid";
    case step_stdio: return "redirecting stdio";
    case step_netns: return "entering the network namespace";
    case step_user: return "switching user";
    case step_pdeathsig: return "prctl(PR_SET_PDEATHSIG)";
    case step_chdir: return "chdir to the working directory";
    case step_exec: return "exec";
  }
  return "?";
}

struct prepared_spawn {
  std::string program;  // resolved absolute path
  std::vector<std::string> args;
  std::vector<std::string> environment;
  std::vector<char*> argv;
  std::vector<char*> envp;
  unique_fd log;
  unique_fd null;
  unique_fd netns;
  bool switch_user = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string working_dir;
};

std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
  std::stringstream stream(dirs);
  std::string dir;
  while (std::getline(stream, dir, ':')) {
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  for (const char* dir2 : {"/usr/sbin", "/sbin"}) {  // root's tools when PATH lacks them
    std::string candidate = std::string(dir2) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw process_error("cannot start " + name + ": not found in PATH");
}

std::unique_ptr<prepared_spawn> prepare(const spawn_options& options) {
  if (options.argv.empty()) throw process_error("spawn: empty argv");
  auto p = std::make_unique<prepared_spawn>();
  p->program = resolve_program(options.argv[0]);
  p->args = options.argv;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string_view text(*entry);
    auto name = text.substr(0, text.find('='));
    bool replaced = false;
    for (const auto& extra : options.extra_env) {
      if (std::string_view(extra).substr(0, extra.find('=')) == name) replaced = true;
    }
    if (!replaced) p->environment.emplace_back(text);
  }
  for (const auto& extra : options.extra_env) p->environment.push_back(extra);
  for (auto& arg : p->args) p->argv.push_back(arg.data());
  p->argv.push_back(nullptr);
  for (auto& entry : p->environment) p->envp.push_back(entry.data());
  p->envp.push_back(nullptr);

  p->null.reset(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!p->null) throw process_error("cannot open /dev/null: " + std::string(std::strerror(errno)));
  if (!options.log_path.empty()) {
    p->log.reset(::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!p->log) {
      throw process_error("cannot open log " + options.log_path.string() + " for " + options.argv[0] +
                          ": " + std::strerror(errno));
    }
  }
  if (options.network_namespace) {
    std::string path = "/run/netns/" + *options.network_namespace;
    p->netns.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!p->netns) {
      throw process_error("cannot open network namespace " + path + ": " + std::strerror(errno));
    }
  }
  if (options.run_as_user && ::geteuid() == 0) {
    passwd entry{};
    passwd* found = nullptr;
    std::vector<char> buffer(16384);
    if (::getpwnam_r(options.run_as_user->c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
        !found) {
      throw process_error("cannot start " + options.argv[0] + " as user " + *options.run_as_user +
                          ": no such user");
    }
    p->switch_user = true;
    p->uid = found->pw_uid;
    p->gid = found->pw_gid;
  }
  p->working_dir = options.working_dir.string();
  return p;
}

[[noreturn]] void run_child(const prepared_spawn& p, pid_t parent, int error_fd) {
  auto fail = [error_fd](int step) {
    int report[2] = {step, errno};
    ssize_t ignored = ::write(error_fd, report, sizeof report);
    (void)ignored;
    ::_exit(127);
  };
  if (::setpgid(0, 0) != 0) fail(step_setpgid);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &default_action, nullptr);
  }
  int out = p.log ? p.log.get() : p.null.get();
  if (::dup2(p.null.get(), 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(out, 2) < 0) fail(step_stdio);
  if (p.netns && ::setns(p.netns.get(), CLONE_NEWNET) != 0) fail(step_netns);
  if (p.switch_user) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(p.gid) != 0 || ::setuid(p.uid) != 0) fail(step_user);
  }
  // After the user switch: a credential change clears the parent-death signal.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(step_pdeathsig);
  if (::getppid() != parent) ::_exit(127);  // the lab died before prctl took effect
  if (!p.working_dir.empty() && ::chdir(p.working_dir.c_str()) != 0) fail(step_chdir);
  // Nothing but stdio crosses exec (the error pipe is close-on-exec already).
  ::syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */);
  ::execve(p.program.c_str(), p.argv.data(), p.envp.data());
  fail(step_exec);
  ::_exit(127);
}

// Forks on one thread that lives until the process exits, so PR_SET_PDEATHSIG (which fires when the
// forking thread ends) means "when the lab's process dies". Deliberately leaked: it must outlive
// static destructors, and its thread is never joined.
class spawner {
 public:
  static spawner& instance() {
    static spawner* the_spawner = new spawner();
    return *the_spawner;
  }

  pid_t spawn(const prepared_spawn& p) {
    std::packaged_task<pid_t()> task([&p] { return fork_and_exec(p); });
    auto result = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    wake_.notify_one();
    return result.get();
  }

 private:
  spawner() { std::thread([this] { loop(); }).detach(); }

  void loop() {
    // The lab's children must not inherit a blocked mask from whoever created the spawner; the child
    // resets it anyway, but a signal meant for the process must never land here and stall.
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
    for (;;) {
      std::packaged_task<pid_t()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return !tasks_.empty(); });
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  static pid_t fork_and_exec(const prepared_spawn& p) {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
      throw process_error("pipe2: " + std::string(std::strerror(errno)));
    }
    unique_fd read_end(pipe_fds[0]);
    unique_fd write_end(pipe_fds[1]);
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) throw process_error("fork for " + p.program + ": " + std::strerror(errno));
    if (pid == 0) run_child(p, parent, write_end.get());
    ::setpgid(pid, pid);  // also from the parent, so the group exists before anyone signals it
    write_end.reset();
    int report[2] = {0, 0};
    ssize_t got;
    do {
      got = ::read(read_end.get(), report, sizeof report);
    } while (got < 0 && errno == EINTR);
    if (got > 0) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      throw process_error("cannot start " + p.program + ": " + describe_step(report[0]) + " failed: " +
                          std::strerror(report[1]));
    }
    return pid;
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<pid_t()>> tasks_;
};

bool read_text(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  out = buffer.str();
  return true;
}

}  // namespace

child_process::~child_process() { kill_group(); }

child_process::child_process(child_process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), status_(std::exchange(other.status_, std::nullopt)) {}

child_process& child_process::operator=(child_process&& other) noexcept {
  if (this != &other) {
    kill_group();
    pid_ = std::exchange(other.pid_, -1);
    status_ = std::exchange(other.status_, std::nullopt);
  }
  return *this;
}

child_process child_process::spawn(const spawn_options& options) {
  auto prepared = prepare(options);
  child_process child;
  child.pid_ = spawner::instance().spawn(*prepared);
  return child;
}

bool child_process::running() {
  if (pid_ <= 0 || status_) return false;
  int status = 0;
  pid_t got = ::waitpid(pid_, &status, WNOHANG);
  if (got == pid_) {
    status_ = status;
    return false;
  }
  return true;
}

void child_process::signal_group(int signal) {
  if (pid_ <= 0) return;
  ::kill(-pid_, signal);
}

void child_process::signal_tree(int signal) {
  if (pid_ <= 0) return;
  auto descendants = live_descendants(pid_);
  ::kill(-pid_, signal);
  for (const auto& p : descendants) ::kill(p.pid, signal);
}

bool child_process::stop_tree(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return false;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto members = processes_in_group(pid_);
    auto descendants = live_descendants(pid_);
    members.insert(members.end(), descendants.begin(), descendants.end());
    bool all_stopped = true;
    for (const auto& p : members) {
      if (p.state != 'T' && p.state != 't') {
        all_stopped = false;
        ::kill(p.pid, SIGSTOP);  // also reaches one forked after the group signal
      }
    }
    if (all_stopped) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::optional<int> child_process::wait_for_exit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  return status_;
}

void child_process::kill_group() {
  if (pid_ <= 0) return;
  // Collected first: once the child is gone its descendants are re-parented and cannot be found.
  auto descendants = status_ ? std::vector<process_info>{} : live_descendants(pid_);
  ::kill(-pid_, SIGKILL);
  for (const auto& p : descendants) ::kill(p.pid, SIGKILL);
  if (!status_) {
    int status = 0;
    pid_t got;
    do {
      got = ::waitpid(pid_, &status, 0);
    } while (got < 0 && errno == EINTR);
    status_ = got == pid_ ? status : 0;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    bool any = !processes_in_group(pid_).empty();
    for (const auto& p : descendants) any = any || process_alive(p.pid);
    if (!any || std::chrono::steady_clock::now() >= deadline) break;
    ::kill(-pid_, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
}

bool child_process::stop(int signal, std::chrono::milliseconds grace) {
  if (pid_ <= 0) return true;
  bool exited = true;
  if (running()) {
    signal_group(signal);
    signal_tree(SIGCONT);
    exited = wait_for_exit(grace).has_value();
  }
  kill_group();
  return exited;
}

std::string child_process::describe_exit() const {
  if (!status_) return pid_ > 0 ? "running" : "not started";
  int status = *status_;
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + ::strsignal(WTERMSIG(status)) + ")";
  }
  return "ended (wait status " + std::to_string(status) + ")";
}

std::vector<process_info> list_live_processes() {
  std::vector<process_info> result;
  pid_t self = ::getpid();
  DIR* proc = ::opendir("/proc");
  if (!proc) return result;
  while (dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == self) continue;
    std::string base = std::string("/proc/") + entry->d_name;
    std::string stat;
    if (!read_text(base + "/stat", stat)) continue;
    auto close_paren = stat.rfind(')');
    if (close_paren == std::string::npos || close_paren + 2 >= stat.size()) continue;
    std::istringstream fields(stat.substr(close_paren + 2));
    process_info info;
    info.pid = static_cast<pid_t>(pid);
    long parent = 0, group = 0;
    fields >> info.state >> parent >> group;
    info.parent = static_cast<pid_t>(parent);
    info.process_group = static_cast<pid_t>(group);
    if (info.state == 'Z' || info.state == 'X') continue;
    std::string cmdline;
    read_text(base + "/cmdline", cmdline);
    for (char& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    while (!cmdline.empty() && cmdline.back() == ' ') cmdline.pop_back();
    info.cmdline = std::move(cmdline);
    result.push_back(std::move(info));
  }
  ::closedir(proc);
  return result;
}

std::vector<process_info> processes_mentioning(const std::string& text) {
  std::vector<process_info> result;
  for (auto& info : list_live_processes()) {
    if (info.cmdline.find(text) != std::string::npos) result.push_back(std::move(info));
  }
  return result;
}

std::vector<process_info> processes_in_group(pid_t process_group) {
  std::vector<process_info> result;
  if (process_group <= 0) return result;
  for (auto& info : list_live_processes()) {
    if (info.process_group == process_group) result.push_back(std::move(info));
  }
  return result;
}

std::vector<process_info> live_descendants(pid_t pid) {
  auto all = list_live_processes();
  std::vector<process_info> result;
  std::vector<pid_t> frontier{pid};
  while (!frontier.empty()) {
    pid_t parent = frontier.back();
    frontier.pop_back();
    for (const auto& p : all) {
      if (p.parent == parent && p.pid != pid) {
        result.push_back(p);
        frontier.push_back(p.pid);
      }
    }
  }
  return result;
}

bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  std::string stat;
  if (!read_text("/proc/" + std::to_string(pid) + "/stat", stat)) return false;
  auto close_paren = stat.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= stat.size()) return false;
  char state = stat[close_paren + 2];
  return state != 'Z' && state != 'X';
}

std::vector<process_info> wait_until_no_process_mentions(const std::string& text,
                                                         std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto found = processes_mentioning(text);
    if (found.empty() || std::chrono::steady_clock::now() >= deadline) return found;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string file_tail(const std::filesystem::path& path, std::size_t max_lines) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  std::streamoff start = size > 65536 ? size - 65536 : 0;
  in.seekg(start);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t position = text.size();
  if (position > 0 && text[position - 1] == '\n') --position;
  std::size_t lines = 0;
  while (position > 0) {
    if (text[position - 1] == '\n' && ++lines == max_lines) break;
    --position;
  }
  return text.substr(position);
}

}  // namespace dlock::lab
