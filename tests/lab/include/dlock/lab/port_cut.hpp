// port_cut.hpp — defines dlock::lab::port_cut, a partition of one local server process from chosen
// loopback ports made with iptables, for servers that share 127.0.0.1 (the lab's ensembles): e.g.
// one ZooKeeper member cut from its peers' quorum and election ports while its client port stays
// open.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dlock::lab {

// While it exists, TCP packets on `lo` are dropped (in the OUTPUT chain, so before either end sees
// them):
//   - every packet to or from `own_ports` (ports the process listens on for its peers);
//   - every packet of the process's established connections to `peer_ports` (found with `ss`);
//   - every new connection (SYN) to `peer_ports`, from anyone: the process cannot reconnect. Other
//     processes' established connections to those ports are untouched, but they cannot open new
//     ones either while the cut lasts.
// Only rules naming those ports are added, in a chain of its own (dlock-cut-<pid>-<n>) hooked into
// OUTPUT, so labs of other processes on other ports are not affected. heal() and the destructor
// remove the chain; a chain left by a process killed with SIGKILL is removed by the next cut made
// on the machine. Needs root and iptables; throws fault_error (faults.hpp) with the failing
// command's output when a rule cannot be added. Not thread-safe.
class port_cut {
 public:
  port_cut(pid_t process, std::vector<std::uint16_t> own_ports, std::vector<std::uint16_t> peer_ports);
  ~port_cut();
  port_cut(const port_cut&) = delete;
  port_cut& operator=(const port_cut&) = delete;

  // Removes the rules (idempotent). Connections the cut stalled resume or time out on their own.
  void heal();
  bool active() const { return active_; }
  // The local ports of the process's connections that were cut, for messages.
  const std::vector<std::uint16_t>& cut_connections() const { return connection_ports_; }

 private:
  std::string chain_;
  std::vector<std::uint16_t> connection_ports_;
  bool active_ = false;
};

}  // namespace dlock::lab
