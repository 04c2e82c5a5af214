// Implements dlock::lab::partition (netns.hpp): two namespaces, a veth pair, iptables cuts, and the
// relay from the server namespace to the root namespace's servers.
#include "dlock/lab/netns.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "dlock/lab/faults.hpp"
#include "dlock/lab/process.hpp"
#include "socket.hpp"

namespace dlock::lab {
namespace {

using detail::unique_fd;

constexpr std::size_t kMaxBuffered = 1 << 20;  // per direction per connection, then stop reading

std::string joined(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) out += (out.empty() ? "" : " ") + arg;
  return out;
}

void must_run(const std::vector<std::string>& argv) {
  std::string output;
  if (int status = run_command(argv, &output); status != 0) {
    while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
    throw fault_error("`" + joined(argv) + "` failed (status " + std::to_string(status) + "): " + output);
  }
}

// Namespaces dlock-part-<pid>-<n>-{c,s} whose process is gone (a run killed by SIGKILL).
void remove_abandoned_partitions() {
  DIR* dir = ::opendir("/run/netns");
  if (!dir) return;
  std::vector<std::string> stale;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name.rfind("dlock-part-", 0) != 0) continue;
    pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + 11));
    if (pid > 0 && !process_alive(pid)) stale.push_back(name);
  }
  ::closedir(dir);
  for (const auto& name : stale) run_command({"ip", "netns", "del", name});
}

unique_fd open_namespace(const std::string& path) {
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw fault_error("cannot open network namespace " + path + ": " + std::strerror(errno));
  return fd;
}

// Runs `body` on a fresh thread that entered the namespace at `path`; the caller's thread never
// changes namespace (CLONE_NEWNET is per thread, and a thread's sockets keep the namespace they
// were made in).
void in_namespace(const std::string& path, const std::function<void()>& body) {
  unique_fd ns = open_namespace(path);
  std::exception_ptr failure;
  std::thread worker([&] {
    try {
      if (::setns(ns.get(), CLONE_NEWNET) != 0)
        throw fault_error("setns(" + path + "): " + std::strerror(errno));
      body();
    } catch (...) {
      failure = std::current_exception();
    }
  });
  worker.join();
  if (failure) std::rethrow_exception(failure);
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Closes with a reset (SO_LINGER 0), as a TCP stack that gave up on its peer would.
void reset_close(unique_fd& fd) {
  if (!fd) return;
  linger l{1, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
  fd.reset();
}

void apply_mirror(int fd, const mirrored_tcp& m) {
  if (m.keepalive_idle.count() > 0) {
    int on = 1;
    int idle = static_cast<int>(m.keepalive_idle.count());
    int interval = static_cast<int>(std::max<int64_t>(m.keepalive_interval.count(), 1));
    int count = std::max(m.keepalive_count, 1);
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  }
  if (m.user_timeout.count() > 0) {
    unsigned timeout = static_cast<unsigned>(m.user_timeout.count());
    ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, sizeof timeout);
  }
}

}  // namespace

// One thread, one poll loop: listeners in the server namespace, and per accepted connection a
// client-side socket (server namespace) paired with a server-side socket (root namespace).
struct partition::relay {
  struct half {
    unique_fd fd;
    std::string pending;     // read from the other side, not yet written here
    bool read_closed = false;  // EOF read from this side
    bool write_closed = false; // shutdown(SHUT_WR) done on this side
  };
  struct connection {
    half client, server;
  };

  std::vector<unique_fd> listeners;  // index i relays to targets[i]
  std::vector<endpoint> targets;
  mirrored_tcp mirror;
  unique_fd wake_read, wake_write;
  std::atomic<bool> stopping{false};
  std::vector<std::unique_ptr<connection>> connections;
  std::atomic<std::uint64_t> accepted{0}, open{0}, client_died{0}, upstream_resets{0};
  std::thread thread;

  void start() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw fault_error("pipe for the relay failed");
    wake_read.reset(fds[0]);
    wake_write.reset(fds[1]);
    thread = std::thread([this] { loop(); });
  }

  void stop() {
    stopping = true;
    if (wake_write) {
      char c = 1;
      [[maybe_unused]] auto n = ::write(wake_write.get(), &c, 1);
    }
    if (thread.joinable()) thread.join();
    for (auto& c : connections) {
      reset_close(c->client.fd);
      reset_close(c->server.fd);
    }
    connections.clear();
  }

  void accept_from(std::size_t index) {
    unique_fd client(::accept4(listeners[index].get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!client) return;
    ++accepted;
    apply_mirror(client.get(), mirror);
    unique_fd server;
    try {
      // Loopback in the root namespace (this thread's): connects or is refused at once.
      server = detail::connect_tcp(targets[index], std::chrono::milliseconds(2000));
    } catch (const std::exception&) {
      reset_close(client);  // as a server that is down would answer
      return;
    }
    set_nonblocking(server.get());
    int one = 1;
    ::setsockopt(server.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::setsockopt(client.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<connection>();
    c->client.fd = std::move(client);
    c->server.fd = std::move(server);
    connections.push_back(std::move(c));
    ++open;
  }

  // Reads what `from` has into `to.pending`. Returns false when `from` failed (error, not EOF).
  static bool pump_read(half& from, half& to) {
    char buffer[65536];
    while (!from.read_closed && to.pending.size() < kMaxBuffered) {
      ssize_t got = ::read(from.fd.get(), buffer, sizeof buffer);
      if (got > 0) {
        to.pending.append(buffer, static_cast<std::size_t>(got));
      } else if (got == 0) {
        from.read_closed = true;
      } else if (errno == EINTR) {
        continue;
      } else {
        return errno == EAGAIN || errno == EWOULDBLOCK;
      }
    }
    return true;
  }

  // Writes `to.pending`; half-closes `to` once the other side's EOF is fully passed on.
  static bool pump_write(half& to, const half& from) {
    while (!to.pending.empty()) {
      ssize_t put = ::send(to.fd.get(), to.pending.data(), to.pending.size(), MSG_NOSIGNAL);
      if (put > 0) {
        to.pending.erase(0, static_cast<std::size_t>(put));
      } else if (put < 0 && errno == EINTR) {
        continue;
      } else {
        return put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      }
    }
    if (from.read_closed && !to.write_closed) {
      ::shutdown(to.fd.get(), SHUT_WR);
      to.write_closed = true;
    }
    return true;
  }

  // Services one connection after poll; returns false when it is finished.
  bool service(connection& c, short client_events, short server_events) {
    // POLLERR: the socket died (reset, ETIMEDOUT); whatever it still had to read is moot.
    bool client_ok = !(client_events & POLLERR), server_ok = !(server_events & POLLERR);
    if (client_ok && client_events & (POLLIN | POLLHUP | POLLERR)) client_ok = pump_read(c.client, c.server);
    if (server_ok && server_events & (POLLIN | POLLHUP | POLLERR)) server_ok = pump_read(c.server, c.client);
    if (client_ok && server_ok) client_ok = pump_write(c.client, c.server);
    if (client_ok && server_ok) server_ok = pump_write(c.server, c.client);
    if (!client_ok) {
      // The client-side socket died (the mirrored keepalive or user timeout, or a reset): the
      // server's own socket would have died the same way, so the server learns it now.
      ++client_died;
      ++upstream_resets;
      reset_close(c.server.fd);
      reset_close(c.client.fd);
      return false;
    }
    if (!server_ok) {
      reset_close(c.client.fd);
      reset_close(c.server.fd);
      return false;
    }
    const bool done = c.client.read_closed && c.server.read_closed && c.client.pending.empty() &&
                      c.server.pending.empty();
    return !done;
  }

  void loop() {
    std::vector<pollfd> fds;
    while (!stopping) {
      fds.clear();
      fds.push_back({wake_read.get(), POLLIN, 0});
      for (auto& l : listeners) fds.push_back({l.get(), POLLIN, 0});
      for (auto& c : connections) {
        short client_events = 0, server_events = 0;
        if (!c->client.read_closed && c->server.pending.size() < kMaxBuffered) client_events |= POLLIN;
        if (!c->server.read_closed && c->client.pending.size() < kMaxBuffered) server_events |= POLLIN;
        if (!c->client.pending.empty()) client_events |= POLLOUT;
        if (!c->server.pending.empty()) server_events |= POLLOUT;
        fds.push_back({c->client.fd.get(), client_events, 0});
        fds.push_back({c->server.fd.get(), server_events, 0});
      }
      if (::poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) break;
      if (stopping) break;
      const std::size_t first_connection = 1 + listeners.size();
      // Connections first (their pollfds follow the listeners); new ones are appended after.
      std::vector<std::unique_ptr<connection>> kept;
      for (std::size_t i = 0; i < connections.size(); ++i) {
        const pollfd& cf = fds[first_connection + 2 * i];
        const pollfd& sf = fds[first_connection + 2 * i + 1];
        if (!cf.revents && !sf.revents) {
          kept.push_back(std::move(connections[i]));
          continue;
        }
        if (service(*connections[i], cf.revents, sf.revents)) {
          kept.push_back(std::move(connections[i]));
        } else {
          --open;
        }
      }
      connections = std::move(kept);
      for (std::size_t i = 0; i < listeners.size(); ++i)
        if (fds[1 + i].revents & POLLIN) accept_from(i);
    }
  }
};

partition::partition(std::vector<endpoint> servers, mirrored_tcp mirror) : servers_(std::move(servers)) {
  if (::geteuid() != 0) throw fault_error("network partitions need root (CAP_NET_ADMIN) to create namespaces");
  if (servers_.empty()) throw fault_error("a partition needs at least one server to relay to");
  remove_abandoned_partitions();
  static std::atomic<int> counter{0};
  const int n = counter++;
  const pid_t pid = ::getpid();
  const std::string base = "dlock-part-" + std::to_string(pid) + "-" + std::to_string(n);
  client_ns_ = base + "-c";
  server_ns_ = base + "-s";
  // Interface names (≤ 15 characters) live inside the namespaces only, so they need not be unique
  // on the host; the addresses exist nowhere else either.
  const unsigned index = (static_cast<unsigned>(pid) * 8u + static_cast<unsigned>(n)) % 16384u;
  const std::string net = "10.232." + std::to_string(index / 64) + ".";
  const unsigned low = (index % 64) * 4;
  client_address_ = net + std::to_string(low + 1);
  server_address_ = net + std::to_string(low + 2);

  try {
    must_run({"ip", "netns", "add", client_ns_});
    must_run({"ip", "netns", "add", server_ns_});
    must_run({"ip", "-n", client_ns_, "link", "set", "lo", "up"});
    must_run({"ip", "-n", server_ns_, "link", "set", "lo", "up"});
    must_run({"ip", "-n", client_ns_, "link", "add", "part-c", "type", "veth", "peer", "name", "part-s", "netns",
              server_ns_});
    must_run({"ip", "-n", client_ns_, "addr", "add", client_address_ + "/30", "dev", "part-c"});
    must_run({"ip", "-n", server_ns_, "addr", "add", server_address_ + "/30", "dev", "part-s"});
    must_run({"ip", "-n", client_ns_, "link", "set", "part-c", "up"});
    must_run({"ip", "-n", server_ns_, "link", "set", "part-s", "up"});
    // A veth pair reports carrier a moment after `up`; a SYN sent before that is lost and costs the
    // first client a retransmission (1 s), so wait until both ends are operational.
    for (const auto& [ns, interface] : {std::pair{client_ns_, "part-c"}, std::pair{server_ns_, "part-s"}}) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      for (;;) {
        std::string shown;
        run_command({"ip", "-n", ns, "-o", "link", "show", interface}, &shown);
        if (shown.find("state UP") != std::string::npos) break;
        if (std::chrono::steady_clock::now() >= deadline)
          throw fault_error("veth end " + std::string(interface) + " in " + ns + " did not come up: " + shown);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }

    relay_ = std::make_unique<relay>();
    relay_->targets = servers_;
    relay_->mirror = mirror;
    // The relay listens in the server namespace, on each server's own port number (the namespace
    // is empty, so every port is free there).
    in_namespace("/run/netns/" + server_ns_, [&] {
      for (const auto& server : servers_) {
        unique_fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
        if (!listener) throw fault_error(std::string("relay socket: ") + std::strerror(errno));
        int one = 1;
        ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_port = htons(server.port);
        ::inet_pton(AF_INET, server_address_.c_str(), &address.sin_addr);
        if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
            ::listen(listener.get(), 128) != 0)
          throw fault_error("relay cannot listen on " + server_address_ + ":" + std::to_string(server.port) + ": " +
                            std::strerror(errno));
        relay_->listeners.push_back(std::move(listener));
        relayed_.push_back(endpoint{server_address_, server.port});
      }
    });
    relay_->start();
  } catch (...) {
    if (relay_) relay_->stop();
    relay_.reset();
    run_command({"ip", "netns", "del", client_ns_});
    run_command({"ip", "netns", "del", server_ns_});
    throw;
  }
}

partition::~partition() {
  if (relay_) relay_->stop();
  relay_.reset();
  // Deleting a namespace deletes its end of the veth pair, and so the pair; iptables rules live and
  // die with the namespace.
  run_command({"ip", "netns", "del", client_ns_});
  run_command({"ip", "netns", "del", server_ns_});
}

// iptables -w: the xtables lock (/run/xtables.lock) is shared by every namespace of the machine, so
// parallel runs (and the lab's port_cut) wait for it rather than fail.
void partition::cut(const std::vector<std::size_t>& servers, direction which) {
  for (std::size_t i : servers) {
    if (i >= servers_.size()) throw fault_error("partition::cut: no server " + std::to_string(i));
    const std::string port = std::to_string(servers_[i].port);
    if (which == direction::upstream || which == direction::both)
      must_run({"ip", "netns", "exec", server_ns_, "iptables", "-w", "-I", "INPUT", "-s", client_address_, "-p", "tcp",
                "--dport", port, "-j", "DROP"});
    if (which == direction::downstream || which == direction::both)
      must_run({"ip", "netns", "exec", client_ns_, "iptables", "-w", "-I", "INPUT", "-s", server_address_, "-p", "tcp",
                "--sport", port, "-j", "DROP"});
  }
  cut_ = true;
}

void partition::cut_all(direction which) {
  std::vector<std::size_t> all;
  for (std::size_t i = 0; i < servers_.size(); ++i) all.push_back(i);
  cut(all, which);
}

void partition::heal() {
  must_run({"ip", "netns", "exec", server_ns_, "iptables", "-w", "-F", "INPUT"});
  must_run({"ip", "netns", "exec", client_ns_, "iptables", "-w", "-F", "INPUT"});
  cut_ = false;
}

void partition::run_in_client_namespace(const std::function<void()>& body) const {
  in_namespace("/run/netns/" + client_ns_, body);
}

partition_stats partition::stats() const {
  partition_stats s;
  if (!relay_) return s;
  s.accepted = relay_->accepted;
  s.open = relay_->open;
  s.client_side_died = relay_->client_died;
  s.upstream_resets = relay_->upstream_resets;
  return s;
}

}  // namespace dlock::lab
