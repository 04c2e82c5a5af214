// Implements tcp_proxy (proxy.hpp): one event-loop thread per proxy over non-blocking sockets.
//
// Each connection has two flows (upstream: client → server, downstream: server → client). A flow
// reads from its source into a queue of chunks stamped with the time they are due (read time +
// delay) and writes due chunks to its sink in order. A blackholed flow neither reads nor writes, so
// its bytes wait in the kernel's buffers and in the queue, as in a partition. EOF is passed on with
// shutdown(SHUT_WR) once the queue is drained; a reset on either side resets the other.
#include "dlock/lab/proxy.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <optional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "socket.hpp"

namespace dlock::lab {
namespace {

using clock = std::chrono::steady_clock;
using detail::unique_fd;

constexpr std::size_t max_queued_bytes = 1 << 20;
constexpr std::size_t read_size = 64 * 1024;

sockaddr_in to_sockaddr(const endpoint& e) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(e.port);
  if (::inet_pton(AF_INET, e.host.c_str(), &address.sin_addr) != 1) {
    throw std::invalid_argument("tcp_proxy: not a numeric IPv4 address: " + e.host);
  }
  return address;
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Closes with a reset (RST) instead of an orderly FIN.
void close_with_reset(unique_fd& fd) {
  if (!fd) return;
  linger option{1, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &option, sizeof option);
  fd.reset();
}

struct chunk {
  clock::time_point due;
  std::string bytes;
  std::size_t sent = 0;
};

struct flow {
  std::deque<chunk> queue;
  std::size_t queued = 0;
  bool source_eof = false;  // the source closed its sending side
  bool sink_shut = false;   // EOF passed on to the sink
  bool want_write = false;  // the sink's buffer was full: wait for POLLOUT
  bool parked_source = false;  // source reported an error/hangup while we were not reading it
};

struct connection {
  unique_fd client;
  unique_fd server;
  bool connecting = false;
  bool server_ready = false;
  flow up;    // client → server
  flow down;  // server → client
  bool dead = false;
};

struct settings {
  std::chrono::microseconds delay_up{0};
  std::chrono::microseconds delay_down{0};
  bool hole_up = false;
  bool hole_down = false;
  bool refuse = false;
  // blackhole_after: a flow stops once its byte counter (bytes_up / bytes_down) reaches this.
  std::optional<std::uint64_t> stop_up_at;
  std::optional<std::uint64_t> stop_down_at;
};

}  // namespace

struct tcp_proxy::engine {
  endpoint target;
  endpoint listen;
  unique_fd listener;
  unique_fd wake_fd;
  std::thread thread;

  std::mutex mutex;
  std::condition_variable acknowledged;
  settings wanted;                  // guarded by mutex
  std::uint64_t generation = 0;     // bumped by every change; guarded by mutex
  std::uint64_t applied = 0;        // last generation the loop applied; guarded by mutex
  std::uint64_t cuts_requested = 0; // guarded by mutex
  std::uint64_t cuts_done = 0;      // guarded by mutex
  bool stopping = false;            // guarded by mutex
  bool loop_ended = false;          // guarded by mutex

  std::atomic<std::uint64_t> accepted{0}, open{0}, refused{0}, cut{0}, bytes_up{0}, bytes_down{0};

  // Owned by the loop thread only.
  settings current;
  std::list<connection> connections;

  void wake() {
    std::uint64_t one = 1;
    ssize_t ignored = ::write(wake_fd.get(), &one, sizeof one);
    (void)ignored;
  }

  // Applies a change under the lock and waits until the loop has taken it in.
  template <typename Change>
  void change(Change&& apply) {
    std::unique_lock<std::mutex> lock(mutex);
    apply();
    std::uint64_t mine = ++generation;
    wake();
    acknowledged.wait(lock, [&] { return applied >= mine || loop_ended; });
  }

  void abort(connection& c) {
    close_with_reset(c.client);
    close_with_reset(c.server);
    c.dead = true;
  }

  void start_connect(connection& c) {
    c.server.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!c.server) {
      ++refused;
      abort(c);
      return;
    }
    set_nodelay(c.server.get());
    sockaddr_in address = to_sockaddr(target);
    if (::connect(c.server.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
      c.server_ready = true;
    } else if (errno == EINPROGRESS) {
      c.connecting = true;
    } else {
      ++refused;
      abort(c);
    }
  }

  // Whether a flow passes nothing now: blackholed, or its blackhole_after allowance is used up.
  bool stopped_up() const { return current.hole_up || (current.stop_up_at && bytes_up >= *current.stop_up_at); }
  bool stopped_down() const { return current.hole_down || (current.stop_down_at && bytes_down >= *current.stop_down_at); }

  // Reads what the source has; false when the connection was aborted.
  bool read_into(connection& c, int source, flow& f, std::chrono::microseconds delay) {
    char buffer[read_size];
    ssize_t got = ::recv(source, buffer, sizeof buffer, 0);
    if (got > 0) {
      f.queue.push_back(chunk{clock::now() + delay, std::string(buffer, static_cast<std::size_t>(got)), 0});
      f.queued += static_cast<std::size_t>(got);
    } else if (got == 0) {
      f.source_eof = true;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      abort(c);
      return false;
    }
    return true;
  }

  // Writes due chunks to the sink; passes EOF on when drained. False when the connection was aborted.
  // `stop_at`: the counter's value at which the flow stops (blackhole_after).
  bool flush(connection& c, flow& f, int sink, bool blackholed, std::atomic<std::uint64_t>& counter,
             clock::time_point now, const std::optional<std::uint64_t>& stop_at) {
    if (blackholed || sink < 0) return true;
    while (!f.queue.empty() && f.queue.front().due <= now) {
      chunk& front = f.queue.front();
      std::size_t size = front.bytes.size() - front.sent;
      if (stop_at) {
        if (counter >= *stop_at) break;
        size = static_cast<std::size_t>(std::min<std::uint64_t>(size, *stop_at - counter));
      }
      ssize_t sent = ::send(sink, front.bytes.data() + front.sent, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          f.want_write = true;
          return true;
        }
        if (errno == EINTR) continue;
        abort(c);
        return false;
      }
      front.sent += static_cast<std::size_t>(sent);
      f.queued -= static_cast<std::size_t>(sent);
      counter += static_cast<std::uint64_t>(sent);
      if (front.sent == front.bytes.size()) f.queue.pop_front();
    }
    f.want_write = false;
    if (f.queue.empty() && f.source_eof && !f.sink_shut) {
      ::shutdown(sink, SHUT_WR);
      f.sink_shut = true;
    }
    return true;
  }

  void accept_all() {
    for (;;) {
      int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a transient error: try again at the next readiness
      unique_fd client(fd);
      if (current.refuse) {
        ++refused;
        close_with_reset(client);
        continue;
      }
      ++accepted;
      set_nodelay(client.get());
      connections.emplace_back();
      connections.back().client = std::move(client);
    }
  }

  void run() {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (stopping) break;
        current = wanted;
        if (applied != generation) {
          applied = generation;
          for (auto& c : connections) c.up.parked_source = c.down.parked_source = false;
        }
        if (cuts_done != cuts_requested) {
          for (auto& c : connections) {
            abort(c);
            ++cut;
          }
          connections.clear();
          cuts_done = cuts_requested;
        }
      }
      acknowledged.notify_all();

      // Service: connect upstream when allowed, flush due data, retire finished connections.
      auto now = clock::now();
      for (auto& c : connections) {
        if (c.dead) continue;
        if (!c.server && !current.hole_up) start_connect(c);
        if (c.dead) continue;
        int server_sink = c.server_ready ? c.server.get() : -1;
        if (!flush(c, c.up, server_sink, stopped_up(), bytes_up, now, current.stop_up_at)) continue;
        if (!flush(c, c.down, c.client.get(), stopped_down(), bytes_down, now, current.stop_down_at)) continue;
        if (c.up.sink_shut && c.down.sink_shut) {
          c.client.reset();
          c.server.reset();
          c.dead = true;
        }
      }
      connections.remove_if([](const connection& c) { return c.dead; });
      open = connections.size();

      // Wait for readiness or for the next chunk to fall due.
      std::vector<pollfd> fds;
      std::vector<connection*> owners;  // owners[i] for fds[i], nullptr for wake/listener
      fds.push_back({wake_fd.get(), POLLIN, 0});
      owners.push_back(nullptr);
      fds.push_back({listener.get(), POLLIN, 0});
      owners.push_back(nullptr);
      std::optional<clock::time_point> next_due;
      auto consider_due = [&](const flow& f, bool blackholed, bool sink_ready) {
        if (blackholed || !sink_ready || f.want_write || f.queue.empty()) return;
        auto due = f.queue.front().due;
        if (!next_due || due < *next_due) next_due = due;
      };
      for (auto& c : connections) {
        const bool up_stopped = stopped_up(), down_stopped = stopped_down();
        bool read_up = !up_stopped && !c.up.source_eof && c.up.queued < max_queued_bytes;
        bool read_down = !down_stopped && !c.down.source_eof && c.down.queued < max_queued_bytes;
        short client_events = 0, server_events = 0;
        if (read_up) client_events |= POLLIN;
        if (c.down.want_write && !down_stopped) client_events |= POLLOUT;
        if (c.connecting) {
          server_events |= POLLOUT;
        } else if (c.server_ready) {
          if (read_down) server_events |= POLLIN;
          if (c.up.want_write && !up_stopped) server_events |= POLLOUT;
        }
        // A socket we are not reading still reports errors/hangups; park it until settings change
        // instead of spinning on it (a partitioned peer's reset is not seen either).
        if (!c.up.parked_source) {
          fds.push_back({c.client.get(), client_events, 0});
          owners.push_back(&c);
        }
        if (c.server && !c.down.parked_source) {
          fds.push_back({c.server.get(), server_events, 0});
          owners.push_back(&c);
        }
        consider_due(c.up, up_stopped, c.server_ready);
        consider_due(c.down, down_stopped, true);
      }
      timespec timeout{};
      timespec* timeout_ptr = nullptr;
      if (next_due) {
        auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(*next_due - clock::now());
        if (wait.count() < 0) wait = std::chrono::nanoseconds(0);
        timeout.tv_sec = static_cast<time_t>(wait.count() / 1000000000);
        timeout.tv_nsec = static_cast<long>(wait.count() % 1000000000);
        timeout_ptr = &timeout;
      }
      int ready = ::ppoll(fds.data(), fds.size(), timeout_ptr, nullptr);
      if (ready < 0) {
        if (errno == EINTR) continue;
        break;  // cannot happen with valid descriptors; end the loop rather than spin
      }
      if (fds[0].revents & POLLIN) {
        std::uint64_t count;
        ssize_t ignored = ::read(wake_fd.get(), &count, sizeof count);
        (void)ignored;
      }
      if (fds[1].revents & POLLIN) accept_all();
      for (std::size_t i = 2; i < fds.size(); ++i) {
        connection& c = *owners[i];
        short revents = fds[i].revents;
        if (!revents || c.dead) continue;
        bool is_client = fds[i].fd == c.client.get();
        if (is_client) {
          if (fds[i].events & POLLIN) {
            if (revents & (POLLIN | POLLHUP | POLLERR)) read_into(c, c.client.get(), c.up, current.delay_up);
          } else if (revents & (POLLHUP | POLLERR)) {
            c.up.parked_source = true;
          }
          if (!c.dead && (revents & POLLOUT)) c.down.want_write = false;
        } else if (c.connecting) {
          int error = 0;
          socklen_t length = sizeof error;
          ::getsockopt(c.server.get(), SOL_SOCKET, SO_ERROR, &error, &length);
          c.connecting = false;
          if (error != 0) {
            ++refused;
            abort(c);
          } else {
            c.server_ready = true;
          }
        } else {
          if (fds[i].events & POLLIN) {
            if (revents & (POLLIN | POLLHUP | POLLERR)) read_into(c, c.server.get(), c.down, current.delay_down);
          } else if (revents & (POLLHUP | POLLERR)) {
            c.down.parked_source = true;
          }
          if (!c.dead && (revents & POLLOUT)) c.up.want_write = false;
        }
      }
    }
    for (auto& c : connections) abort(c);
    connections.clear();
    open = 0;
    {
      std::lock_guard<std::mutex> lock(mutex);
      loop_ended = true;
    }
    acknowledged.notify_all();
  }
};

tcp_proxy::tcp_proxy(endpoint target, endpoint listen) : engine_(std::make_unique<engine>()) {
  engine_->target = std::move(target);
  to_sockaddr(engine_->target);  // validates
  engine_->listener.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!engine_->listener) throw std::system_error(errno, std::generic_category(), "tcp_proxy: socket");
  int one = 1;
  ::setsockopt(engine_->listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address = to_sockaddr(listen);
  if (::bind(engine_->listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    throw std::system_error(errno, std::generic_category(), "tcp_proxy: bind " + listen.to_string());
  }
  if (::listen(engine_->listener.get(), 512) != 0) {
    throw std::system_error(errno, std::generic_category(), "tcp_proxy: listen " + listen.to_string());
  }
  socklen_t length = sizeof address;
  ::getsockname(engine_->listener.get(), reinterpret_cast<sockaddr*>(&address), &length);
  listen.port = ntohs(address.sin_port);
  engine_->listen = std::move(listen);
  engine_->wake_fd.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!engine_->wake_fd) throw std::system_error(errno, std::generic_category(), "tcp_proxy: eventfd");
  engine_->thread = std::thread([e = engine_.get()] { e->run(); });
}

tcp_proxy::~tcp_proxy() {
  {
    std::lock_guard<std::mutex> lock(engine_->mutex);
    engine_->stopping = true;
  }
  engine_->wake();
  engine_->thread.join();
}

const endpoint& tcp_proxy::listen_endpoint() const { return engine_->listen; }
const endpoint& tcp_proxy::target() const { return engine_->target; }

void tcp_proxy::set_delay(std::chrono::microseconds upstream, std::chrono::microseconds downstream) {
  engine_->change([&] {
    engine_->wanted.delay_up = upstream;
    engine_->wanted.delay_down = downstream;
  });
}

void tcp_proxy::blackhole(direction which) {
  engine_->change([&] {
    if (which != direction::downstream) engine_->wanted.hole_up = true;
    if (which != direction::upstream) engine_->wanted.hole_down = true;
  });
}

void tcp_proxy::blackhole_after(direction which, std::uint64_t bytes) {
  engine_->change([&] {
    if (which != direction::downstream) engine_->wanted.stop_up_at = engine_->bytes_up + bytes;
    if (which != direction::upstream) engine_->wanted.stop_down_at = engine_->bytes_down + bytes;
    if (which != direction::downstream) engine_->wanted.hole_up = false;
    if (which != direction::upstream) engine_->wanted.hole_down = false;
  });
}

void tcp_proxy::heal() {
  engine_->change([&] {
    engine_->wanted.hole_up = false;
    engine_->wanted.hole_down = false;
    engine_->wanted.stop_up_at.reset();
    engine_->wanted.stop_down_at.reset();
  });
}

void tcp_proxy::refuse_new_connections(bool refuse) {
  engine_->change([&] { engine_->wanted.refuse = refuse; });
}

void tcp_proxy::cut_all() {
  std::unique_lock<std::mutex> lock(engine_->mutex);
  std::uint64_t mine = ++engine_->cuts_requested;
  engine_->wake();
  engine_->acknowledged.wait(lock, [&] { return engine_->cuts_done >= mine || engine_->loop_ended; });
}

proxy_stats tcp_proxy::stats() const {
  proxy_stats s;
  s.accepted = engine_->accepted;
  s.open = engine_->open;
  s.refused = engine_->refused;
  s.cut = engine_->cut;
  s.bytes_upstream = engine_->bytes_up;
  s.bytes_downstream = engine_->bytes_down;
  return s;
}

}  // namespace dlock::lab
