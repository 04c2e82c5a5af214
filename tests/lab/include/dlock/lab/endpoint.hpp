// endpoint.hpp — defines dlock::lab::endpoint, a TCP address as servers and configs spell it
// ("127.0.0.1:6379"), and reserve_loopback_ports, which finds free ports for the lab's servers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::lab {

struct endpoint {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;

  // "host:port".
  std::string to_string() const;

  // Parses "host:port" (numeric port 1..65535). Throws std::invalid_argument quoting the text.
  static endpoint parse(std::string_view text);

  friend bool operator==(const endpoint& a, const endpoint& b) {
    return a.port == b.port && a.host == b.host;
  }
  friend bool operator!=(const endpoint& a, const endpoint& b) { return !(a == b); }
};

// Returns `count` distinct TCP ports that were free on 127.0.0.1 when probed and that this process
// has not handed out recently (so two servers of one lab never get the same port). Thread-safe.
// Another process may still take a port before the server binds it, which is why the lab retries a
// start that fails with "address in use". Throws std::system_error when the kernel refuses a socket.
std::vector<std::uint16_t> reserve_loopback_ports(std::size_t count);

}  // namespace dlock::lab
