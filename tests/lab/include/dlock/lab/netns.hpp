// netns.hpp — defines dlock::lab::partition: a real network link between a client network namespace
// and a server network namespace, both created for it, that iptables can cut per server and per
// direction (docs/design/faults.md §16). The lab's servers stay where they are (loopback of the root namespace);
// a relay in the server namespace forwards each server's port to it.
//
//   client namespace "…-c"  ── veth pair (a /30 of 10.232.0.0/16) ──  server namespace "…-s"
//   a client process runs here                                       relay: <s address>:P_i
//   (spawn_options::network_namespace,                                 → 127.0.0.1:P_i in the root
//    or DLOCK_FAULT_NETNS for fault_worker)                              namespace (server i)
//
// The two addresses exist only inside the two namespaces, which have no route anywhere else; the
// root namespace gets no address, interface or rule. Everything is removed by the destructor, and
// namespaces left by a process that died (named after its pid) are removed by the next partition.
//
// Faithfulness of the relay, by design. A cut drops packets on the veth link, so the client's
// kernel sees exactly what a real partition shows (retransmissions, connect timeouts, its own
// keepalive and TCP_USER_TIMEOUT expiring). The server sees the relay's loopback connection, which
// a userspace relay would otherwise keep alive forever; so the relay mirrors on its client-side
// sockets the TCP settings the server's own socket has (`mirrored_tcp`: keepalive, user timeout),
// and when such a socket dies (ETIMEDOUT, reset) it resets the server-side connection at once — the
// server learns of the dead client when a server with a direct link would. An orderly close (FIN)
// is passed on as a half-close; a FIN dropped by a cut never reaches the server, as in reality.
// Servers that track clients by sessions (ZooKeeper, etcd leases) or by key expiry (Redis, the
// lease table) never depend on the TCP connection and see the same silence either way.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dlock/lab/endpoint.hpp"
#include "dlock/lab/proxy.hpp"  // direction

namespace dlock::lab {

// TCP settings a server applies to its own client sockets, mirrored by the relay on the sockets it
// accepts from the client namespace. Zero leaves the kernel's default (no keepalive, no user timeout:
// what Redis' 300 s keepalive, ZooKeeper and etcd amount to within a test).
struct mirrored_tcp {
  std::chrono::seconds keepalive_idle{0};      // TCP_KEEPIDLE; keepalive is on when this is > 0
  std::chrono::seconds keepalive_interval{0};  // TCP_KEEPINTVL
  int keepalive_count = 0;                     // TCP_KEEPCNT
  std::chrono::milliseconds user_timeout{0};   // TCP_USER_TIMEOUT
};

struct partition_stats {
  std::uint64_t accepted = 0;           // connections accepted from the client namespace
  std::uint64_t open = 0;               // relayed connections open now
  std::uint64_t client_side_died = 0;   // client-side sockets that ended in an error (timeout, reset)
  std::uint64_t upstream_resets = 0;    // server-side connections reset because of such a death
};

class partition {
 public:
  // Creates both namespaces, the veth pair and the relay for `servers` (endpoints in the root
  // namespace, usually 127.0.0.1:P). Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN for setns), iproute2
  // and iptables; throws fault_error naming the failing step otherwise (in CI that is a failure of
  // the caller, never a skip).
  explicit partition(std::vector<endpoint> servers, mirrored_tcp mirror = {});
  ~partition();
  partition(const partition&) = delete;
  partition& operator=(const partition&) = delete;

  // The client namespace's name (/run/netns/<name>): run the client there.
  const std::string& client_namespace() const { return client_ns_; }
  const std::string& server_namespace() const { return server_ns_; }
  const std::string& client_address() const { return client_address_; }
  const std::string& server_address() const { return server_address_; }
  // Where a client inside the client namespace reaches server i: <server address>:<its port>.
  const std::vector<endpoint>& endpoints() const { return relayed_; }
  const std::vector<endpoint>& servers() const { return servers_; }

  // Drops, with iptables, the packets of `servers` (indexes into servers()) in `which` direction:
  // upstream = client → server (rule in the server namespace), downstream = server → client (rule
  // in the client namespace). Adds to the cuts already in place. Thread-safe with the relay; not
  // with other calls on this object.
  void cut(const std::vector<std::size_t>& servers, direction which = direction::both);
  void cut_all(direction which = direction::both);
  // Removes every cut (flushes INPUT in both namespaces).
  void heal();
  bool is_cut() const { return cut_; }

  // Runs `body` on a thread that has entered the client namespace (sockets it makes live there)
  // and waits for it; its exception is rethrown here.
  void run_in_client_namespace(const std::function<void()>& body) const;

  partition_stats stats() const;

 private:
  struct relay;
  std::vector<endpoint> servers_;
  std::vector<endpoint> relayed_;
  std::string client_ns_, server_ns_;
  std::string client_address_, server_address_;
  bool cut_ = false;
  std::unique_ptr<relay> relay_;
};

}  // namespace dlock::lab
