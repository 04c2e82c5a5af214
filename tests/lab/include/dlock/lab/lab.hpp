// lab.hpp — defines dlock::lab::lab: a set of real servers (Redis, Redlock's Redis nodes, ZooKeeper
// standalone and ensemble, etcd single and cluster, PostgreSQL; MariaDB on request) started in
// parallel on free loopback ports in a fresh temporary directory, with the dlock config that reaches
// each, torn down by the destructor. Include this header to get the whole lab API.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dlock/lab/clients.hpp"
#include "dlock/lab/configs.hpp"
#include "dlock/lab/endpoint.hpp"
#include "dlock/lab/etcd_server.hpp"
#include "dlock/lab/mariadb_server.hpp"
#include "dlock/lab/postgres_server.hpp"
#include "dlock/lab/process.hpp"
#include "dlock/lab/redis_server.hpp"
#include "dlock/lab/server.hpp"
#include "dlock/lab/zookeeper_server.hpp"

namespace dlock::lab {

struct lab_options {
  // Where the lab's temporary directory (dlock-lab.XXXXXX) is made; empty: $TMPDIR, else /tmp.
  std::filesystem::path parent_dir;
  redis_options redis;    // the single Redis
  redis_options redlock;  // each Redlock node
  std::size_t redlock_nodes = 5;
  zookeeper_options zookeeper;  // standalone and ensemble
  std::size_t zookeeper_ensemble_size = 3;
  etcd_options etcd;  // single and cluster
  std::size_t etcd_cluster_size = 3;
  postgres_options sql;
  mariadb_options mariadb;
  // Bound on each backend's startup (launch until every server of it answers its probe).
  std::chrono::milliseconds startup_timeout = default_startup_timeout;
  // How often a backend is started on fresh ports when a port was taken ("address in use").
  int start_attempts = 3;
  // true: the constructor throws lab_error when any backend fails to start (after tearing down the
  // others). false: failed backends are recorded (failure()) and the others stay up.
  bool throw_on_failure = true;
  // Keep the temporary directory (logs, data) after teardown, for debugging.
  bool keep_dir = false;
};

class lab_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How long one server took from launch to its first answered probe.
struct startup_record {
  std::string server;  // server name, e.g. "zookeeper-ensemble-2"
  backend kind = backend::redis;
  endpoint client;
  std::chrono::milliseconds time{0};
};

struct teardown_report {
  // Processes still alive after teardown whose command line mentions the lab's directory, or that
  // are in one of its servers' process groups. Empty when teardown was clean.
  std::vector<process_info> survivors;
  std::chrono::milliseconds time{0};
};

// Owns every server it started; the destructor kills them all and removes the directory. Accessors
// are thread-compatible (a const lab may be read from several threads); fault controls on one
// server are driven by one thread at a time.
class lab {
 public:
  // Starts `backends` in parallel (all processes launched, then all probed), writes a config per
  // started backend (<dir>/<backend-name>.yaml), and returns when every one answers or failed.
  // A failure throws lab_error naming every failed server (after tearing the rest down) when
  // options.throw_on_failure, else is recorded in failures(). Call from any thread: the servers are
  // forked by the lab-wide spawner thread (see process.hpp), not by the caller's thread.
  explicit lab(std::vector<backend> backends = all_backends(), lab_options options = {});
  ~lab();
  lab(const lab&) = delete;
  lab& operator=(const lab&) = delete;

  // The lab's temporary directory: one sub-directory per server, plus the configs.
  const std::filesystem::path& dir() const { return dir_; }
  const lab_options& options() const { return options_; }

  // The backend was requested, started and answered.
  bool has(backend which) const;
  // Why the backend failed to start (server, port, what it printed); "" when it did not fail.
  std::string failure(backend which) const;
  const std::map<backend, std::string>& failures() const { return failures_; }

  // The servers of each backend. Each throws std::logic_error when that backend is not running here.
  redis_server& redis();
  redis_node_set& redlock();
  zookeeper_server& zookeeper();
  ::dlock::lab::zookeeper_ensemble& zookeeper_ensemble();
  etcd_server& etcd();
  ::dlock::lab::etcd_cluster& etcd_cluster();
  postgres_server& sql();
  mariadb_server& mariadb();
  // Every server of every started backend.
  std::vector<server*> servers();

  // Endpoints and config of a started backend (throws std::logic_error when not started).
  backend_access access(backend which) const;
  std::vector<backend_access> accesses() const;  // every started backend
  std::filesystem::path config_path(backend which) const { return access(which).config; }

  // Per-server startup times, and a printable table of them.
  std::vector<startup_record> startup_records() const { return startup_; }
  std::string startup_report() const;
  // Wall time of the constructor's parallel start.
  std::chrono::milliseconds total_startup_time() const { return total_startup_; }

  // reset_backend() on every started backend, or on one.
  void reset(bool terminate_sql_sessions = false);
  void reset(backend which, bool terminate_sql_sessions = false) { reset_backend(access(which), terminate_sql_sessions); }

  // Kills every server (SIGKILL to each process group), checks that no process survived, and removes
  // the directory (unless keep_dir). Idempotent; the destructor calls it.
  teardown_report teardown();

 private:
  void start_all(const std::vector<backend>& backends);
  void start_backend(backend which);

  lab_options options_;
  std::filesystem::path dir_;
  std::unique_ptr<redis_server> redis_;
  std::unique_ptr<redis_node_set> redlock_;
  std::unique_ptr<zookeeper_server> zookeeper_;
  std::unique_ptr<class zookeeper_ensemble> zookeeper_ensemble_;
  std::unique_ptr<etcd_server> etcd_;
  std::unique_ptr<class etcd_cluster> etcd_cluster_;
  std::unique_ptr<postgres_server> sql_;
  std::unique_ptr<mariadb_server> mariadb_;
  std::mutex start_mutex_;  // guards failures_ and started_ while backends start in parallel
  std::map<backend, std::string> failures_;
  std::map<backend, backend_access> started_;
  std::vector<startup_record> startup_;
  std::chrono::milliseconds total_startup_{0};
  bool torn_down_ = false;
};

}  // namespace dlock::lab
