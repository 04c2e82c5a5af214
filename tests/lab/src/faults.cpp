// Implements the fault-capability probes and network_namespace (faults.hpp).
#include "dlock/lab/faults.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "dlock/lab/clients.hpp"
#include "dlock/lab/process.hpp"
#include "dlock/lab/endpoint.hpp"

extern char** environ;

namespace dlock::lab {
namespace {

std::string joined(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) out += (out.empty() ? "" : " ") + arg;
  return out;
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// Runs a command and throws fault_error with its output when it fails.
void must_run(const std::vector<std::string>& argv) {
  std::string output;
  int status = run_command(argv, &output);
  if (status != 0) {
    throw fault_error("`" + joined(argv) + "` failed (status " + std::to_string(status) + "): " + trimmed(output));
  }
}

// Namespaces named dlock-lab-<pid>-<n> whose process is gone: left by a test killed with SIGKILL.
void remove_abandoned_namespaces() {
  DIR* dir = ::opendir("/run/netns");
  if (!dir) return;
  std::vector<std::string> stale;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name.rfind("dlock-lab-", 0) != 0) continue;
    pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + 10));
    if (pid > 0 && !process_alive(pid)) stale.push_back(name);
  }
  ::closedir(dir);
  for (const auto& name : stale) run_command({"ip", "netns", "del", name});
}

}  // namespace

int run_command(const std::vector<std::string>& argv, std::string* output) {
  if (argv.empty()) return -1;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  // Root's tools (ip, iptables, tc) live in /usr/sbin, which a test's PATH may lack.
  std::string program = argv[0];
  if (program.find('/') == std::string::npos) {
    for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
      if (::access((dir + argv[0]).c_str(), X_OK) == 0) {
        program = dir + argv[0];
        break;
      }
    }
  }
  int rc = posix_spawnp(&pid, program.c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    if (output) *output += "cannot run " + argv[0] + ": " + std::strerror(rc) + "\n";
    return -1;
  }
  char buffer[4096];
  for (;;) {
    ssize_t got = ::read(pipe_fds[0], buffer, sizeof buffer);
    if (got > 0) {
      if (output) output->append(buffer, static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

capability probe_network_namespaces() {
  capability result;
  if (::geteuid() != 0) {
    result.detail = "needs root (CAP_NET_ADMIN) to create network namespaces; running as uid " +
                    std::to_string(::geteuid());
    return result;
  }
  try {
    network_namespace probe;
    std::string output;
    if (probe.run({"iptables", "-S", "INPUT"}, &output) != 0) {
      result.detail = "namespace and veth work, but iptables inside it failed: " + trimmed(output);
      return result;
    }
    probe.drop_from_host();
    probe.heal();
    result.available = true;
    result.detail = "ip netns add, lo up, a veth pair to the host (" + probe.host_address() + " <-> " +
                    probe.namespace_address() + ") and iptables DROP rules inside the namespace all worked";
  } catch (const std::exception& error) {
    result.detail = error.what();
  }
  return result;
}

capability probe_netem() {
  capability result;
  if (::geteuid() != 0) {
    result.detail = "needs root to add a qdisc; not tried";
    return result;
  }
  try {
    network_namespace scratch;  // never touch the host's interfaces
    std::string output;
    int status = scratch.run({"tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"}, &output);
    if (status == 0) {
      result.available = true;
      result.detail = "tc qdisc netem works (tried on lo inside a scratch namespace)";
    } else {
      result.detail = "tc qdisc add … netem failed: " + trimmed(output) +
                      " — the kernel has no sch_netem; use tcp_proxy for delay and loss";
    }
  } catch (const std::exception& error) {
    result.detail = std::string("could not try netem: ") + error.what();
  }
  return result;
}

capability probe_faketime_with_redis() {
  capability result;
  std::string library;
  for (const char* candidate : {"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                                "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                                "/usr/lib/faketime/libfaketime.so.1"}) {
    if (std::filesystem::exists(candidate)) {
      library = candidate;
      break;
    }
  }
  if (library.empty()) {
    result.detail =
        "libfaketime is not installed (package libfaketime); per docs/design/servers.md it aborts Debian's "
        "redis-server anyway (\"unexpected recursive calls to clock_gettime()\", a clash with jemalloc). "
        "Substitute: redis_server::expire_keys_early produces a forward jump's effect on lock keys";
    return result;
  }
  // Present: try it for real on a scratch redis-server.
  auto dir = std::filesystem::temp_directory_path() / ("dlock-lab-faketime-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto port = reserve_loopback_ports(1)[0];
  spawn_options spawn;
  spawn.argv = {"redis-server", "--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", dir.string()};
  spawn.extra_env = {"LD_PRELOAD=" + library, "FAKETIME=+1h"};
  spawn.log_path = dir / "redis.log";
  try {
    auto process = child_process::spawn(spawn);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    bool answered = false;
    long long server_time = 0;
    while (std::chrono::steady_clock::now() < deadline && process.running()) {
      try {
        redis_client client(endpoint{"127.0.0.1", port}, std::chrono::milliseconds(300));
        auto reply = client.checked({"TIME"});
        server_time = std::stoll(reply.elements.at(0).text);
        answered = true;
        break;
      } catch (const std::exception&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    if (!answered) {
      std::string how = process.running() ? "did not answer within 3 s" : process.describe_exit();
      result.detail = "redis-server under " + library + " " + how + ": " +
                      trimmed(file_tail(dir / "redis.log", 5)) +
                      " — use redis_server::expire_keys_early instead";
    } else {
      long long now = static_cast<long long>(::time(nullptr));
      result.available = server_time - now > 3000;
      result.detail = result.available ? "redis-server runs under libfaketime and its clock is shifted"
                                       : "redis-server runs under libfaketime but its clock did not move";
    }
    process.kill_group();
  } catch (const std::exception& error) {
    result.detail = std::string("could not try libfaketime: ") + error.what();
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return result;
}

std::string fault_capabilities::report() const {
  auto line = [](const char* name, const capability& c) {
    return std::string(name) + (c.available ? ": available — " : ": NOT available — ") + c.detail + "\n";
  };
  return line("signals (kill, pause/resume, restart)", signals) + line("tcp proxy (delay, blackhole, cut)", proxy) +
         line("network namespaces + iptables", network_namespaces) + line("netem", netem) +
         line("libfaketime on redis-server", faketime_redis);
}

fault_capabilities probe_fault_capabilities() {
  fault_capabilities result;
  result.signals = {true, "SIGKILL/SIGSTOP/SIGCONT to each server's process group"};
  result.proxy = {true, "dlock::lab::tcp_proxy in the test process (delay per direction, blackhole, refuse, cut)"};
  result.network_namespaces = probe_network_namespaces();
  result.netem = probe_netem();
  result.faketime_redis = probe_faketime_with_redis();
  return result;
}

network_namespace::network_namespace() {
  if (::geteuid() != 0) throw fault_error("network namespaces need root (CAP_NET_ADMIN)");
  remove_abandoned_namespaces();
  static std::atomic<int> counter{0};
  int n = counter++;
  pid_t pid = ::getpid();
  name_ = "dlock-lab-" + std::to_string(pid) + "-" + std::to_string(n);
  // Interface names are limited to 15 characters.
  host_if_ = "dl" + std::to_string(pid % 10000000) + "h" + std::to_string(n % 1000);
  std::string namespace_if = "dl" + std::to_string(pid % 10000000) + "n" + std::to_string(n % 1000);

  // A /30 in 10.231.0.0/16 that no interface of the host uses.
  std::string addresses;
  run_command({"ip", "-o", "-4", "addr", "show"}, &addresses);
  unsigned index = (static_cast<unsigned>(pid) * 8u + static_cast<unsigned>(n)) % 16384u;
  for (int attempt = 0; attempt < 16384; ++attempt, index = (index + 1) % 16384u) {
    std::string base = "10.231." + std::to_string(index / 64) + ".";
    unsigned low = (index % 64) * 4;
    host_address_ = base + std::to_string(low + 1);
    namespace_address_ = base + std::to_string(low + 2);
    if (addresses.find(" " + host_address_ + "/") == std::string::npos &&
        addresses.find(" " + namespace_address_ + "/") == std::string::npos) {
      break;
    }
  }
  try {
    must_run({"ip", "netns", "add", name_});
    must_run({"ip", "-n", name_, "link", "set", "lo", "up"});
    must_run({"ip", "link", "add", host_if_, "type", "veth", "peer", "name", namespace_if, "netns", name_});
    must_run({"ip", "addr", "add", host_address_ + "/30", "dev", host_if_});
    must_run({"ip", "link", "set", host_if_, "up"});
    must_run({"ip", "-n", name_, "addr", "add", namespace_address_ + "/30", "dev", namespace_if});
    must_run({"ip", "-n", name_, "link", "set", namespace_if, "up"});
  } catch (...) {
    run_command({"ip", "link", "del", host_if_});
    run_command({"ip", "netns", "del", name_});
    throw;
  }
}

network_namespace::~network_namespace() {
  run_command({"ip", "link", "del", host_if_});
  run_command({"ip", "netns", "del", name_});
}

int network_namespace::run(const std::vector<std::string>& argv, std::string* output) {
  std::vector<std::string> full = {"ip", "netns", "exec", name_};
  full.insert(full.end(), argv.begin(), argv.end());
  return run_command(full, output);
}

void network_namespace::drop_from_host() {
  if (dropping_) return;
  std::string output;
  for (const auto& rule : std::vector<std::vector<std::string>>{
           {"iptables", "-I", "INPUT", "-s", host_address_, "-j", "DROP"},
           {"iptables", "-I", "OUTPUT", "-d", host_address_, "-j", "DROP"}}) {
    if (run(rule, &output) != 0) throw fault_error("`" + joined(rule) + "` in " + name_ + " failed: " + trimmed(output));
  }
  dropping_ = true;
}

void network_namespace::heal() {
  if (!dropping_) return;
  std::string output;
  for (const auto& rule : std::vector<std::vector<std::string>>{
           {"iptables", "-D", "INPUT", "-s", host_address_, "-j", "DROP"},
           {"iptables", "-D", "OUTPUT", "-d", host_address_, "-j", "DROP"}}) {
    if (run(rule, &output) != 0) throw fault_error("`" + joined(rule) + "` in " + name_ + " failed: " + trimmed(output));
  }
  dropping_ = false;
}

}  // namespace dlock::lab
