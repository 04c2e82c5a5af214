// faults.hpp — defines what the lab can tell about fault injection on this machine (probes that
// actually try each mechanism and report what they saw) and network_namespace, a throwaway network
// namespace joined to the host by a veth pair, in which servers can run and be partitioned from the
// host with iptables.
//
// The per-server controls (kill, pause, restart) are on dlock::lab::server; the clock-jump
// substitute is redis_server::expire_keys_early; delay and blackholes are dlock::lab::tcp_proxy.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace dlock::lab {

// The outcome of one probe: whether the mechanism works here, and what was checked or what failed.
struct capability {
  bool available = false;
  std::string detail;
};

// Tries `ip netns add`, bringing lo up in it, a veth pair into it, and `iptables -S` inside it; then
// removes everything. Needs root (CAP_NET_ADMIN) and the iproute2 and iptables packages.
capability probe_network_namespaces();
// Tries `tc qdisc add dev lo root netem delay 1ms` inside a throwaway namespace (never on the host).
capability probe_netem();
// Looks for libfaketime; when present, starts redis-server under it (LD_PRELOAD, FAKETIME=+1h) and
// checks that it answers and that its TIME moved. docs/design/servers.md: on Debian 12 it aborts ("unexpected
// recursive calls to clock_gettime()"), so redis_server::expire_keys_early is the documented substitute.
capability probe_faketime_with_redis();

struct fault_capabilities {
  capability signals;         // SIGKILL/SIGSTOP/SIGCONT on the lab's children: always available
  capability proxy;           // the lab's tcp_proxy: always available
  capability network_namespaces;
  capability netem;
  capability faketime_redis;
  // One line per mechanism, for logs and `dlock-lab probe`.
  std::string report() const;
};
fault_capabilities probe_fault_capabilities();

class fault_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A network namespace named dlock-lab-<pid>-<n> with lo up and a veth pair to the host: the host end
// gets host_address(), the namespace end namespace_address(), both in a /30 of 10.231.0.0/16 that no
// interface of the host uses. Run a server in it with spawn_options::network_namespace = name() (or
// run()), reach it from the host at namespace_address(), and partition it with drop_from_host().
// The destructor removes the namespace and the veth pair. Throws fault_error (with the failing
// command's output) when something cannot be set up. Not thread-safe.
class network_namespace {
 public:
  network_namespace();
  ~network_namespace();
  network_namespace(const network_namespace&) = delete;
  network_namespace& operator=(const network_namespace&) = delete;

  const std::string& name() const { return name_; }
  const std::string& host_address() const { return host_address_; }
  const std::string& namespace_address() const { return namespace_address_; }

  // Runs a command inside the namespace to completion; returns its exit status (-1 if killed) and
  // appends its output to `output` when given.
  int run(const std::vector<std::string>& argv, std::string* output = nullptr);

  // Partition: iptables in the namespace drops every packet from / to the host's address (both
  // directions, so established connections hang rather than reset).
  void drop_from_host();
  // Heals the partition (removes the rules drop_from_host added).
  void heal();

 private:
  std::string name_;
  std::string host_if_;
  std::string host_address_;
  std::string namespace_address_;
  bool dropping_ = false;
};

// Runs `argv` to completion (not in the lab's spawner: it is a short command), capturing stdout and
// stderr together into `output`. Returns the exit status, or -1 if it was killed or could not start.
int run_command(const std::vector<std::string>& argv, std::string* output = nullptr);

}  // namespace dlock::lab
