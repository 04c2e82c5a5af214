// Implements port_cut (port_cut.hpp).
#include "dlock/lab/port_cut.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <sstream>

#include "dlock/lab/faults.hpp"

namespace dlock::lab {
namespace {

constexpr const char* chain_prefix = "dlock-cut-";

void must_run(const std::vector<std::string>& argv) {
  std::string output;
  if (run_command(argv, &output) != 0) {
    std::string command;
    for (const auto& arg : argv) command += (command.empty() ? "" : " ") + arg;
    while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
    throw fault_error("`" + command + "` failed: " + output);
  }
}

// (`-w`: with the legacy backend, wait for the xtables lock other engineers' rules may hold.)
void remove_chain(const std::string& chain) {
  // The hook may have been added more than once only if a previous removal failed halfway.
  while (run_command({"iptables", "-w", "-D", "OUTPUT", "-o", "lo", "-j", chain}) == 0) {
  }
  run_command({"iptables", "-w", "-F", chain});
  run_command({"iptables", "-w", "-X", chain});
}

// Chains dlock-cut-<pid>-<n> whose process is gone: left by a test killed with SIGKILL.
void remove_abandoned_chains() {
  std::string rules;
  if (run_command({"iptables", "-w", "-S"}, &rules) != 0) return;
  std::istringstream lines(rules);
  std::string line;
  while (std::getline(lines, line)) {
    const std::string declaration = std::string("-N ") + chain_prefix;
    if (line.rfind(declaration, 0) != 0) continue;
    const std::string chain = line.substr(3);
    const pid_t owner = static_cast<pid_t>(std::atol(chain.c_str() + std::char_traits<char>::length(chain_prefix)));
    if (owner > 0 && ::kill(owner, 0) != 0 && errno == ESRCH) remove_chain(chain);
  }
}

// "127.0.0.1:41234" -> 41234; 0 when there is no port.
std::uint16_t port_of(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return 0;
  return static_cast<std::uint16_t>(std::atoi(address.c_str() + colon + 1));
}

// Local ports of `process`'s established TCP connections whose remote port is one of `remote_ports`.
std::vector<std::uint16_t> connections_of(pid_t process, const std::vector<std::uint16_t>& remote_ports) {
  std::string table;
  if (run_command({"ss", "-tnpH", "state", "established"}, &table) != 0)
    throw fault_error("`ss -tnpH state established` failed: " + table);
  const std::string owner = "pid=" + std::to_string(process) + ",";
  std::vector<std::uint16_t> out;
  std::istringstream lines(table);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find(owner) == std::string::npos) continue;
    // With `state established` the columns are: Recv-Q Send-Q Local Peer Process.
    std::istringstream fields(line);
    std::string recv_q, send_q, local, peer;
    if (!(fields >> recv_q >> send_q >> local >> peer)) continue;
    if (std::find(remote_ports.begin(), remote_ports.end(), port_of(peer)) != remote_ports.end())
      out.push_back(port_of(local));
  }
  return out;
}

}  // namespace

port_cut::port_cut(pid_t process, std::vector<std::uint16_t> own_ports, std::vector<std::uint16_t> peer_ports) {
  if (::geteuid() != 0) throw fault_error("port_cut needs root (iptables)");
  if (process <= 0) throw fault_error("port_cut: the process to cut is not running");
  remove_abandoned_chains();
  static std::atomic<int> counter{0};
  chain_ = chain_prefix + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  connection_ports_ = connections_of(process, peer_ports);
  try {
    must_run({"iptables", "-w", "-N", chain_});
    auto drop = [&](const char* match, std::uint16_t port, bool syn_only) {
      std::vector<std::string> rule = {"iptables", "-w", "-A", chain_, "-p", "tcp", match, std::to_string(port)};
      if (syn_only) rule.push_back("--syn");
      rule.insert(rule.end(), {"-j", "DROP"});
      must_run(rule);
    };
    for (std::uint16_t port : own_ports) {
      drop("--sport", port, false);
      drop("--dport", port, false);
    }
    for (std::uint16_t port : connection_ports_) {
      drop("--sport", port, false);
      drop("--dport", port, false);
    }
    for (std::uint16_t port : peer_ports) drop("--dport", port, true);
    must_run({"iptables", "-w", "-I", "OUTPUT", "-o", "lo", "-j", chain_});
    active_ = true;
  } catch (...) {
    remove_chain(chain_);
    throw;
  }
}

port_cut::~port_cut() {
  try {
    heal();
  } catch (...) {
  }
}

void port_cut::heal() {
  if (!active_) return;
  remove_chain(chain_);
  active_ = false;
}

}  // namespace dlock::lab
