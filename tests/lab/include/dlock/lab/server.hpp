// server.hpp — defines dlock::lab::server, one server process the lab runs, with the lifecycle and
// fault controls every kind shares: start (launch + readiness probe), kill (SIGKILL), pause/resume
// (SIGSTOP/SIGCONT), graceful stop, and restart on the same ports with or without its data.
// The kinds are in redis_server.hpp, zookeeper_server.hpp, etcd_server.hpp and postgres_server.hpp.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include "dlock/lab/endpoint.hpp"
#include "dlock/lab/process.hpp"

namespace dlock::lab {

// A server that failed to start or to answer. The message names the server, its port, what went
// wrong, and ends with the tail of the server's log.
class server_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What restart() does with the server's data directory.
enum class data_policy {
  keep,  // restart on the data it had (what survives depends on its persistence settings)
  wipe,  // restart empty, as a machine that lost its disk would
};

// Default bound on one server's startup (launch until the readiness probe answers).
inline constexpr std::chrono::milliseconds default_startup_timeout{60000};

// One server process. Owns its child process: the destructor kills it (SIGKILL to its process
// group). Not thread-safe: one thread drives one server at a time; different servers may be driven
// from different threads.
class server {
 public:
  virtual ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Unique within a lab: "redis", "redlock-3", "zookeeper-ensemble-2", "etcd-cluster-1", "sql".
  const std::string& name() const { return name_; }
  // The server's own directory: its config, data and log.
  const std::filesystem::path& dir() const { return dir_; }
  // Where the server's stdout and stderr go.
  std::filesystem::path log_path() const { return dir_ / "server.log"; }
  // The address clients use.
  const endpoint& client_endpoint() const { return client_; }
  // Pid (also its process group id) of the running server; -1 when it is not running.
  pid_t pid() const { return process_.started() ? process_.pid() : -1; }

  // The process is alive (paused counts as alive).
  bool running();
  bool paused() const { return paused_; }

  // launch() then wait_ready(now + timeout).
  void start(std::chrono::milliseconds timeout = default_startup_timeout);
  // Prepares what the server needs on disk (config; PostgreSQL: initdb when there is no data) and
  // starts the process without waiting for it to serve. Throws server_error / process_error.
  void launch();
  // Polls probe() until it answers, the process exits, or `deadline` passes; the last two throw
  // server_error with the log tail (the process is killed first).
  void wait_ready(std::chrono::steady_clock::time_point deadline);
  // Time from the last launch() to the first successful probe; zero before that.
  std::chrono::milliseconds startup_time() const { return startup_time_; }

  // SIGKILL to the server's process group; returns once it is reaped. No effect when not running.
  void kill();
  // SIGSTOP / SIGCONT to the server's processes (its group and every descendant): it stops answering
  // but keeps its sockets open. pause() returns once every one of them is stopped.
  void pause();
  void resume();
  // The server's graceful shutdown signal, then SIGKILL after `grace`. Returns true when the server
  // exited within `grace`.
  bool stop(std::chrono::milliseconds grace = std::chrono::seconds(10));
  // stop() if running, wipe the data if asked, and start() again on the same ports.
  virtual void restart(data_policy data, std::chrono::milliseconds timeout = default_startup_timeout);

  // One real protocol round trip (Redis PING, ZooKeeper `srvr` with a serving mode, etcd /health,
  // PostgreSQL PQping). True when the server serves clients now. Never throws.
  virtual bool probe() = 0;
  // "standalone", "leader" or "follower" as the server reports it; "" when unknown or unreachable.
  virtual std::string role() = 0;

  // The last lines of the server's log.
  std::string log_tail(std::size_t lines = 30) const { return file_tail(log_path(), lines); }

 protected:
  server(std::string name, std::filesystem::path dir, endpoint client);

  // The command line of the server; called by every launch().
  virtual spawn_options launch_options() = 0;
  // Called by launch() before the process starts: write configs, initialise data.
  virtual void before_launch() {}
  // Removes the server's data (the server is not running).
  virtual void wipe_data() = 0;
  // The signal that asks this server for a clean shutdown.
  virtual int graceful_signal() const;
  // Builds a server_error: "<name> (<endpoint>): <what>" plus the log tail.
  server_error failure(const std::string& what) const;

  child_process process_;

 private:
  std::string name_;
  std::filesystem::path dir_;
  endpoint client_;
  bool paused_ = false;
  std::chrono::steady_clock::time_point launched_at_{};
  std::chrono::milliseconds startup_time_{0};
};

}  // namespace dlock::lab
