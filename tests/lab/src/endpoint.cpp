// Implements endpoint parsing and the free-port search (endpoint.hpp).
#include "dlock/lab/endpoint.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <deque>
#include <mutex>
#include <set>
#include <stdexcept>
#include <system_error>

namespace dlock::lab {

std::string endpoint::to_string() const { return host + ":" + std::to_string(port); }

endpoint endpoint::parse(std::string_view text) {
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) {
    throw std::invalid_argument("not a host:port endpoint: \"" + std::string(text) + "\"");
  }
  unsigned value = 0;
  auto digits = text.substr(colon + 1);
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size() || value == 0 || value > 65535) {
    throw std::invalid_argument("bad port in endpoint \"" + std::string(text) + "\"");
  }
  return endpoint{std::string(text.substr(0, colon)), static_cast<std::uint16_t>(value)};
}

namespace {

// Ports this process handed out recently. The kernel may give a port that was bound and closed a
// moment ago to the next bind(0) — the lab reserves ~25 ports per start from several threads, and a
// repeat among them would be a self-inflicted collision — so the last few thousand are never
// handed out twice.
class recent_ports {
 public:
  bool claim(std::uint16_t port) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!claimed_.insert(port).second) return false;
    order_.push_back(port);
    if (order_.size() > 4096) {
      claimed_.erase(order_.front());
      order_.pop_front();
    }
    return true;
  }

 private:
  std::mutex mutex_;
  std::set<std::uint16_t> claimed_;
  std::deque<std::uint16_t> order_;
};

recent_ports& handed_out() {
  static recent_ports ports;
  return ports;
}

}  // namespace

std::vector<std::uint16_t> reserve_loopback_ports(std::size_t count) {
  std::vector<int> sockets;
  std::vector<std::uint16_t> ports;
  auto close_all = [&] {
    for (int fd : sockets) ::close(fd);
  };
  // Sockets stay bound until the end, so the kernel offers a different port each time.
  for (int attempts = 0; ports.size() < count; ++attempts) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      int error = errno;
      close_all();
      throw std::system_error(error, std::generic_category(), "socket() for a free port");
    }
    sockets.push_back(fd);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t length = sizeof address;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      int error = errno;
      close_all();
      throw std::system_error(error, std::generic_category(), "bind 127.0.0.1:0 for a free port");
    }
    std::uint16_t port = ntohs(address.sin_port);
    if (handed_out().claim(port)) {
      ports.push_back(port);
    } else if (attempts > 100000) {
      close_all();
      throw std::system_error(EADDRINUSE, std::generic_category(), "no unclaimed free loopback port");
    }
  }
  close_all();
  return ports;
}

}  // namespace dlock::lab
