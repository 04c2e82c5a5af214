// socket.hpp (internal) — defines unique_fd and the blocking TCP helpers the lab's probes and
// clients share: connect with a deadline, send everything, read until EOF.
#pragma once

#include <unistd.h>

#include <chrono>
#include <string>
#include <string_view>
#include <utility>

#include "dlock/lab/endpoint.hpp"

namespace dlock::lab::detail {

// Owns one file descriptor.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  ~unique_fd() { reset(); }
  unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  explicit operator bool() const { return fd_ >= 0; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// A blocking TCP connection to `target` (numeric IPv4 host), connected within `timeout`, with
// SO_RCVTIMEO/SO_SNDTIMEO = `timeout`. Throws std::system_error (ECONNREFUSED, ETIMEDOUT, …).
unique_fd connect_tcp(const endpoint& target, std::chrono::milliseconds timeout);

// Writes all of `data`; throws std::system_error on failure or timeout.
void send_all(int fd, std::string_view data);

// Reads until the peer closes or `deadline` passes (then throws std::system_error ETIMEDOUT).
std::string read_until_eof(int fd, std::chrono::steady_clock::time_point deadline);

}  // namespace dlock::lab::detail
