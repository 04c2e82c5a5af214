// lab_proxy — the fault proxy against an in-process echo server: bytes pass unchanged in both
// directions with EOF and resets propagated, delay is added per direction and preserves order,
// a blackhole holds traffic (and new upstream connections) until heal, refuse and cut_all reset.
#include <algorithm>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dlock/lab/proxy.hpp"

namespace lab = dlock::lab;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

// Accepts connections on a loopback port and echoes every byte back until the client closes its
// side, then closes. Counts connections and bytes received.
class echo_server {
 public:
  echo_server() {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    ::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ::listen(listener_, 128);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~echo_server() {
    stopping_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    ::close(listener_);
    for (auto& worker : workers_) worker.join();
  }
  lab::endpoint where() const { return lab::endpoint{"127.0.0.1", port_}; }
  int accepted() const { return accepted_; }
  long long received() const { return received_; }

 private:
  void accept_loop() {
    while (!stopping_) {
      int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (stopping_) return;
        continue;
      }
      ++accepted_;
      workers_.emplace_back([this, fd] {
        char buffer[65536];
        for (;;) {
          ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
          if (got <= 0) break;
          received_ += got;
          ssize_t offset = 0;
          while (offset < got) {
            ssize_t sent = ::send(fd, buffer + offset, static_cast<std::size_t>(got - offset), MSG_NOSIGNAL);
            if (sent <= 0) break;
            offset += sent;
          }
        }
        ::close(fd);
      });
    }
  }

  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};
  std::atomic<long long> received_{0};
  std::thread acceptor_;
  std::vector<std::thread> workers_;
};

// A blocking client socket with a receive timeout.
class client_socket {
 public:
  explicit client_socket(const lab::endpoint& to, std::chrono::milliseconds receive_timeout = 2000ms) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(to.port);
    ::inet_pton(AF_INET, to.host.c_str(), &address.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    set_timeout(receive_timeout);
  }
  ~client_socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  void set_timeout(std::chrono::milliseconds timeout) {
    timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  bool send(const std::string& data) {
    std::size_t offset = 0;
    while (offset < data.size()) {
      ssize_t sent = ::send(fd_, data.data() + offset, data.size() - offset, MSG_NOSIGNAL);
      if (sent <= 0) return false;
      offset += static_cast<std::size_t>(sent);
    }
    return true;
  }
  // Reads exactly n bytes; returns what arrived before a timeout, EOF or error.
  std::string receive(std::size_t n) {
    std::string out;
    char buffer[65536];
    while (out.size() < n) {
      ssize_t got = ::recv(fd_, buffer, std::min(sizeof buffer, n - out.size()), 0);
      if (got <= 0) {
        last_errno_ = got == 0 ? 0 : errno;
        break;
      }
      out.append(buffer, static_cast<std::size_t>(got));
    }
    return out;
  }
  // One recv: >0 bytes, 0 at EOF, -1 with errno (EAGAIN on timeout, ECONNRESET on reset).
  ssize_t receive_once(int* error) {
    char buffer[4096];
    ssize_t got = ::recv(fd_, buffer, sizeof buffer, 0);
    *error = got < 0 ? errno : 0;
    return got;
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  // Closes with a reset (RST) instead of an orderly FIN.
  void close_with_reset() {
    linger abortive{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
    ::close(fd_);
    fd_ = -1;
  }
  int last_errno() const { return last_errno_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  int last_errno_ = 0;
};

std::chrono::microseconds round_trip(client_socket& client, const std::string& message) {
  auto begin = clock_type::now();
  EXPECT_TRUE(client.send(message));
  EXPECT_EQ(client.receive(message.size()), message);
  return std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now() - begin);
}

TEST(TcpProxy, ForwardsBytesUnchangedBothWaysAndPropagatesEof) {
  echo_server server;
  lab::tcp_proxy proxy(server.where());
  EXPECT_NE(proxy.listen_endpoint().port, 0);
  client_socket client(proxy.listen_endpoint(), 5000ms);
  ASSERT_TRUE(client.connected());

  std::string payload(4 << 20, '\0');  // larger than the proxy's per-direction buffer
  std::mt19937 random(42);
  for (auto& c : payload) c = static_cast<char>(random());
  std::thread writer([&] {
    client.send(payload);
    client.shutdown_write();  // EOF must travel to the server, and the server's close back
  });
  std::string echoed = client.receive(payload.size());
  writer.join();
  EXPECT_EQ(echoed.size(), payload.size());
  EXPECT_TRUE(echoed == payload) << "bytes changed or reordered";
  int error = 0;
  EXPECT_EQ(client.receive_once(&error), 0) << "EOF from the server reaches the client (errno " << error << ")";
  auto stats = proxy.stats();
  EXPECT_EQ(stats.bytes_upstream, payload.size());
  EXPECT_EQ(stats.bytes_downstream, payload.size());
}

TEST(TcpProxy, AddsDelayPerDirection) {
  echo_server server;
  lab::tcp_proxy proxy(server.where());
  client_socket client(proxy.listen_endpoint());
  // Each figure is the fastest of three round trips: an added delay applies to every one of them,
  // a scheduling hiccup on a loaded (or sanitized) run to only some.
  auto fastest_round_trip = [&] {
    auto best = round_trip(client, "ping");
    for (int i = 0; i < 2; ++i) best = std::min(best, round_trip(client, "ping"));
    return best;
  };
  auto baseline = fastest_round_trip();
  EXPECT_LT(baseline, 50ms);

  proxy.set_delay(30ms, 0ms);
  auto upstream_only = fastest_round_trip();
  proxy.set_delay(0ms, 40ms);
  auto downstream_only = fastest_round_trip();
  proxy.set_delay(25ms);
  auto both = fastest_round_trip();
  proxy.set_delay(0ms);
  auto restored = fastest_round_trip();

  std::cout << "round trips: baseline " << baseline.count() << " us, +30 ms up " << upstream_only.count()
            << " us, +40 ms down " << downstream_only.count() << " us, +25 ms each way " << both.count()
            << " us, restored " << restored.count() << " us\n";
  EXPECT_GE(upstream_only, 30ms);
  EXPECT_LT(upstream_only, 30ms + 150ms);
  EXPECT_GE(downstream_only, 40ms);
  EXPECT_LT(downstream_only, 40ms + 150ms);
  EXPECT_GE(both, 50ms);
  EXPECT_LT(both, 50ms + 150ms);
  EXPECT_LT(restored, 50ms);
}

TEST(TcpProxy, DelayKeepsOrderAndDoesNotSerializePipelinedData) {
  echo_server server;
  lab::tcp_proxy proxy(server.where());
  proxy.set_delay(20ms);
  client_socket client(proxy.listen_endpoint());
  std::string expected;
  auto begin = clock_type::now();
  for (int i = 0; i < 100; ++i) {
    std::string message = "message " + std::to_string(i) + ";";
    expected += message;
    ASSERT_TRUE(client.send(message));
    std::this_thread::sleep_for(200us);
  }
  EXPECT_EQ(client.receive(expected.size()), expected);
  auto elapsed = clock_type::now() - begin;
  EXPECT_GE(elapsed, 40ms);
  EXPECT_LT(elapsed, 1000ms) << "each chunk is delayed from its own arrival, not queued behind the previous delay";
}

TEST(TcpProxy, BlackholeHoldsTrafficAndHealDeliversItInOrder) {
  echo_server server;
  lab::tcp_proxy proxy(server.where());
  client_socket client(proxy.listen_endpoint(), 300ms);
  EXPECT_EQ(round_trip(client, "before").count() > 0, true);

  proxy.blackhole();
  ASSERT_TRUE(client.send("held-1;"));
  ASSERT_TRUE(client.send("held-2;"));
  EXPECT_EQ(client.receive(1), "") << "nothing passes a blackhole";
  long long received_before_heal = server.received();

  proxy.heal();
  client.set_timeout(2000ms);
  EXPECT_EQ(client.receive(14), "held-1;held-2;");
  EXPECT_EQ(server.received(), received_before_heal + 14);
}

TEST(TcpProxy, UpstreamBlackholeStopsRequestsDownstreamBlackholeStopsAnswers) {
  echo_server server;
  lab::tcp_proxy proxy(server.where());
  client_socket client(proxy.listen_endpoint(), 300ms);
  round_trip(client, "warm-up");
  long long received = server.received();

  proxy.blackhole(lab::direction::upstream);
  client.send("request");
  EXPECT_EQ(client.receive(7), "");
  EXPECT_EQ(server.received(), received) << "the server never saw the request";
  proxy.heal();
  client.set_timeout(2000ms);
  EXPECT_EQ(client.receive(7), "request");

  proxy.blackhole(lab::direction::downstream);
  client.set_timeout(300ms);
  client.send("answer-lost");
  EXPECT_EQ(client.receive(11), "");
  EXPECT_EQ(server.received(), received + 7 + 11) << "the server executed the request; only the answer is held";
  proxy.heal();
  client.set_timeout(2000ms);
  EXPECT_EQ(client.receive(11), "answer-lost");
}

// blackhole_after cuts a stream between two pipelined answers: exactly the bytes allowed pass
// (the held ones first), then nothing until heal().
TEST(TcpProxy, BlackholeAfterPassesExactlyTheBytesAllowed) {
  echo_server server;
  lab::tcp_proxy proxy(server.where());
  client_socket client(proxy.listen_endpoint(), 300ms);
  round_trip(client, "warm-up");
  const long long received = server.received();

  proxy.blackhole(lab::direction::downstream);
  client.send("first;second;");
  for (int i = 0; i < 100 && server.received() < received + 13; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(server.received(), received + 13);
  EXPECT_EQ(client.receive(1), "") << "held by the blackhole";

  proxy.blackhole_after(lab::direction::downstream, 6);
  client.set_timeout(2000ms);
  EXPECT_EQ(client.receive(6), "first;");
  client.set_timeout(300ms);
  EXPECT_EQ(client.receive(1), "") << "nothing past the bytes allowed";
  proxy.heal();
  client.set_timeout(2000ms);
  EXPECT_EQ(client.receive(7), "second;");
}

TEST(TcpProxy, NewConnectionDuringUpstreamBlackholeReachesTheServerOnlyAfterHeal) {
  echo_server server;
  lab::tcp_proxy proxy(server.where());
  proxy.blackhole();
  client_socket client(proxy.listen_endpoint(), 300ms);
  EXPECT_TRUE(client.connected()) << "the kernel completes the handshake";
  client.send("hello");
  EXPECT_EQ(client.receive(5), "");
  EXPECT_EQ(server.accepted(), 0);
  proxy.heal();
  client.set_timeout(2000ms);
  EXPECT_EQ(client.receive(5), "hello");
  EXPECT_EQ(server.accepted(), 1);
}

TEST(TcpProxy, CutAllResetsOpenConnectionsAndAcceptsNewOnes) {
  echo_server server;
  lab::tcp_proxy proxy(server.where());
  client_socket first(proxy.listen_endpoint());
  client_socket second(proxy.listen_endpoint());
  round_trip(first, "a");
  round_trip(second, "b");
  EXPECT_EQ(proxy.stats().open, 2u);

  proxy.cut_all();
  int error = 0;
  EXPECT_LE(first.receive_once(&error), 0);
  EXPECT_EQ(error, ECONNRESET) << "a cut is a reset, not an orderly close";
  EXPECT_LE(second.receive_once(&error), 0);
  EXPECT_EQ(proxy.stats().cut, 2u);

  client_socket third(proxy.listen_endpoint());
  round_trip(third, "after the cut");
}

TEST(TcpProxy, RefusingResetsNewConnectionsOnly) {
  echo_server server;
  lab::tcp_proxy proxy(server.where());
  client_socket existing(proxy.listen_endpoint());
  round_trip(existing, "x");
  proxy.refuse_new_connections(true);
  client_socket refused(proxy.listen_endpoint(), 2000ms);
  int error = 0;
  EXPECT_LE(refused.receive_once(&error), 0);
  EXPECT_EQ(error, ECONNRESET);
  round_trip(existing, "still works");
  proxy.refuse_new_connections(false);
  client_socket accepted(proxy.listen_endpoint());
  round_trip(accepted, "y");
  EXPECT_GE(proxy.stats().refused, 1u);
}

TEST(TcpProxy, UnreachableServerResetsTheClient) {
  // A port that was free a moment ago: nothing listens there.
  std::uint16_t dead_port;
  {
    echo_server scratch;
    dead_port = scratch.where().port;
  }
  lab::tcp_proxy proxy(lab::endpoint{"127.0.0.1", dead_port});
  client_socket client(proxy.listen_endpoint(), 2000ms);
  int error = 0;
  EXPECT_LE(client.receive_once(&error), 0);
  EXPECT_EQ(error, ECONNRESET);
  EXPECT_GE(proxy.stats().refused, 1u);
}

TEST(TcpProxy, ServesManyConcurrentConnections) {
  echo_server server;
  lab::tcp_proxy proxy(server.where());
  proxy.set_delay(5ms);
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 64; ++i) {
    clients.emplace_back([&, i] {
      client_socket client(proxy.listen_endpoint(), 5000ms);
      std::string message = "client " + std::to_string(i);
      for (int round = 0; round < 5; ++round) {
        if (!client.send(message) || client.receive(message.size()) != message) return;
      }
      ++ok;
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok, 64);
  EXPECT_EQ(proxy.stats().accepted, 64u);
}

TEST(TcpProxy, ClientResetPropagatesToTheServer) {
  echo_server server;
  lab::tcp_proxy proxy(server.where());
  client_socket client(proxy.listen_endpoint());
  round_trip(client, "x");
  EXPECT_EQ(proxy.stats().open, 1u);
  client.close_with_reset();
  for (int i = 0; i < 100 && proxy.stats().open != 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(proxy.stats().open, 0u) << "the proxy closes both sides when one goes away";
}

}  // namespace
