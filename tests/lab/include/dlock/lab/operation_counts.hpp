// operation_counts.hpp — defines how a test reads a started backend's own count of the requests its
// clients sent (server_operations), and statement_sampler, which counts the statements PostgreSQL
// sessions begin (PostgreSQL's cumulative statistics reach its views seconds late, so they are
// sampled live instead). Tests use these to show that a waiter does not poll.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dlock/lab/configs.hpp"

namespace dlock::lab {

// The server's cumulative count of client requests, summed over every node or member of `access`:
//   redis, redlock: calls of every command in INFO commandstats except INFO itself (commands
//                   scripts run are counted with the script that ran them);
//   zookeeper:      mntr zk_packets_received (session pings included);
//   etcd:           /metrics grpc_server_started_total of unary RPCs plus
//                   grpc_server_msg_received_total of every stream (Watch, LeaseKeepAlive);
//   mariadb:        the Questions status counter (statements run, pings excluded), less the
//                   reads of this process.
// Reading it costs nothing the count includes. Throws client_error when a server cannot be read,
// std::invalid_argument for sql (use statement_sampler).
std::int64_t server_operations(const backend_access& access);

// GET /metrics from a server with a Prometheus endpoint (etcd) and the sum of the samples of `metric`
// whose label sets contain every fragment of `filters` (e.g. grpc_method="Txn"; none: every sample).
// Throws client_error when the endpoint cannot be read.
double prometheus_metric_sum(const endpoint& server, const std::string& metric,
                             const std::vector<std::string>& filters = {});

// Counts the statements other sessions of a PostgreSQL server begin while it runs: a thread reads
// pg_stat_activity every `interval` and counts each change of a session's query_start (a new
// session that has run a statement counts once). Statements closer together than `interval` in one
// session count once, so the count is a lower bound that still grows with any polling.
// Throws client_error when it cannot connect.
class statement_sampler {
 public:
  explicit statement_sampler(const std::string& dsn,
                             std::chrono::milliseconds interval = std::chrono::milliseconds(5));
  ~statement_sampler();  // stops the thread
  statement_sampler(const statement_sampler&) = delete;
  statement_sampler& operator=(const statement_sampler&) = delete;

  // Statements counted since construction (or the last reset()).
  std::int64_t count() const;
  void reset();
  // The first error the sampling thread met ("" while none); it stops sampling after one.
  std::string error() const;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace dlock::lab
