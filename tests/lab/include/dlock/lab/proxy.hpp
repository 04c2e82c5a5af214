// proxy.hpp — defines dlock::lab::tcp_proxy: a TCP proxy on a loopback port in front of one server,
// for the faults the kernel cannot make here (no netem): added latency per direction, a blackhole
// (a partition: nothing passes, connections stay open), refusing new connections, and cutting every
// open connection with a reset.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "dlock/lab/endpoint.hpp"

namespace dlock::lab {

// Which way data flows: upstream is client → server, downstream is server → client.
enum class direction { upstream, downstream, both };

struct proxy_stats {
  std::uint64_t accepted = 0;         // connections accepted since start
  std::uint64_t open = 0;             // connections open now
  std::uint64_t refused = 0;          // connections reset at once (refusing, or server unreachable)
  std::uint64_t cut = 0;              // connections closed by cut_all()
  std::uint64_t bytes_upstream = 0;   // bytes delivered to the server
  std::uint64_t bytes_downstream = 0; // bytes delivered to clients
};

// Listens on `listen` (port 0: a free loopback port) and forwards each accepted connection to
// `target` over a new connection. One thread per proxy runs the event loop; every method is
// thread-safe and takes effect before it returns (for data that arrives afterwards). The destructor
// closes every connection (reset) and the listening socket.
//
// Faithfulness, by design:
// - Delay: each chunk read is forwarded `delay` after it was read, order preserved; so a
//   request/response round trip gains upstream + downstream delay. Changing the delay affects data
//   read afterwards.
// - Blackhole (a partition): the proxy stops reading and writing in that direction; bytes wait in
//   kernel buffers and the proxy, as a TCP peer's retransmissions would, and flow in order on heal()
//   unless the connection is cut first. Clients see a connection that is open and silent. A new
//   connection during an upstream blackhole is accepted (the kernel completes the handshake anyway)
//   but not connected to the server until heal().
// - Refuse: new connections are reset at once (as a closed port would); existing ones are untouched.
// - cut_all(): every open connection is closed with a reset on both sides, as when a partition
//   lasted long enough for TCP to give up or a middlebox dropped the state.
// The proxy buffers at most 1 MiB per direction per connection before it stops reading.
class tcp_proxy {
 public:
  explicit tcp_proxy(endpoint target, endpoint listen = endpoint{"127.0.0.1", 0});
  ~tcp_proxy();
  tcp_proxy(const tcp_proxy&) = delete;
  tcp_proxy& operator=(const tcp_proxy&) = delete;

  // Where clients connect (the actual port when 0 was asked for).
  const endpoint& listen_endpoint() const;
  const endpoint& target() const;

  // Added latency in each direction.
  void set_delay(std::chrono::microseconds upstream, std::chrono::microseconds downstream);
  void set_delay(std::chrono::microseconds each_way) { set_delay(each_way, each_way); }

  // Stops traffic in `which` direction(s) (adds to any blackhole already set).
  void blackhole(direction which = direction::both);
  // Lets `bytes` more bytes through in `which` direction (upstream or downstream; for both, each
  // gets `bytes`), counted over all connections, then stops it as blackhole() does: for cutting a
  // stream of pipelined replies between two of them. Data held by an earlier blackhole passes
  // first. heal() ends it.
  void blackhole_after(direction which, std::uint64_t bytes);
  // Ends every blackhole; held data flows again, in order. Delay settings stay.
  void heal();
  // While true, new connections are reset at once.
  void refuse_new_connections(bool refuse);
  // Resets every open connection (both sides). New connections are accepted as usual afterwards.
  void cut_all();

  proxy_stats stats() const;

 private:
  struct engine;
  std::unique_ptr<engine> engine_;
};

}  // namespace dlock::lab
