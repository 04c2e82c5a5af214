// Implements the blocking TCP helpers (socket.hpp).
#include "socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <system_error>

namespace dlock::lab::detail {
namespace {

int remaining_ms(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

}  // namespace

unique_fd connect_tcp(const endpoint& target, std::chrono::milliseconds timeout) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(target.port);
  if (::inet_pton(AF_INET, target.host.c_str(), &address.sin_addr) != 1) {
    throw std::system_error(EINVAL, std::generic_category(), "not a numeric IPv4 address: " + target.host);
  }
  unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) throw std::system_error(errno, std::generic_category(), "socket()");
  auto deadline = std::chrono::steady_clock::now() + timeout;
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    if (errno != EINPROGRESS) {
      throw std::system_error(errno, std::generic_category(), "connect to " + target.to_string());
    }
    pollfd waiting{fd.get(), POLLOUT, 0};
    int ready;
    do {
      ready = ::poll(&waiting, 1, remaining_ms(deadline));
    } while (ready < 0 && errno == EINTR);
    if (ready == 0) {
      throw std::system_error(ETIMEDOUT, std::generic_category(), "connect to " + target.to_string());
    }
    int error = 0;
    socklen_t length = sizeof error;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      throw std::system_error(error, std::generic_category(), "connect to " + target.to_string());
    }
  }
  int flags = ::fcntl(fd.get(), F_GETFL);
  ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

void send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t sent = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        throw std::system_error(ETIMEDOUT, std::generic_category(), "send");
      }
      throw std::system_error(errno, std::generic_category(), "send");
    }
    data.remove_prefix(static_cast<std::size_t>(sent));
  }
}

std::string read_until_eof(int fd, std::chrono::steady_clock::time_point deadline) {
  std::string result;
  char buffer[8192];
  for (;;) {
    pollfd waiting{fd, POLLIN, 0};
    int ready = ::poll(&waiting, 1, remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) throw std::system_error(ETIMEDOUT, std::generic_category(), "read");
    ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
    if (got == 0) return result;
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == ECONNRESET && !result.empty()) return result;
      throw std::system_error(errno, std::generic_category(), "read");
    }
    result.append(buffer, static_cast<std::size_t>(got));
  }
}

}  // namespace dlock::lab::detail
