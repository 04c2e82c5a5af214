// Implements server_operations and statement_sampler (operation_counts.hpp).
#include "dlock/lab/operation_counts.hpp"

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "dlock/lab/clients.hpp"
#include "dlock/lab/mariadb_server.hpp"
#include "http.hpp"

namespace dlock::lab {

namespace {

std::int64_t redis_calls(const endpoint& node) {
  redis_client client(node);
  const std::string text = client.checked({"INFO", "commandstats"}).text;
  std::int64_t total = 0;
  // Lines read "cmdstat_<name>:calls=N,usec=...".
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("cmdstat_", 0) != 0) continue;
    const std::size_t colon = line.find(':');
    const std::size_t calls = line.find("calls=", colon);
    if (colon == std::string::npos || calls == std::string::npos) continue;
    if (line.compare(8, colon - 8, "info") == 0) continue;
    total += std::stoll(line.substr(calls + 6));
  }
  return total;
}

std::int64_t zookeeper_packets_received(const endpoint& server) {
  std::istringstream lines(zookeeper_four_letter_word(server, "mntr"));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("zk_packets_received\t", 0) == 0) return std::stoll(line.substr(line.find('\t') + 1));
  }
  throw client_error("zookeeper " + server.to_string() + ": mntr has no zk_packets_received");
}

// Sum of the samples of `metric` whose label set contains every fragment of `filters`.
double metric_sum(const std::string& metrics, const std::string& metric, const std::vector<std::string>& filters) {
  double sum = 0;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(metric + "{", 0) != 0) continue;
    bool match = true;
    for (const auto& f : filters) match = match && line.find(f) != std::string::npos;
    if (match) sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

std::string metrics_of(const endpoint& server) {
  detail::http_response response;
  try {
    response = detail::http_request(server, "GET", "/metrics", "", std::chrono::seconds(5));
  } catch (const std::exception& e) {
    throw client_error(server.to_string() + ": GET /metrics failed: " + e.what());
  }
  if (response.status != 200)
    throw client_error(server.to_string() + ": GET /metrics answered " + std::to_string(response.status));
  return response.body;
}

std::int64_t etcd_requests(const endpoint& member) {
  const std::string metrics = metrics_of(member);
  const double unary = metric_sum(metrics, "grpc_server_started_total", {"grpc_type=\"unary\""});
  const double streamed = metric_sum(metrics, "grpc_server_msg_received_total", {"grpc_type=\"bidi_stream\""});
  return static_cast<std::int64_t>(unary + streamed);
}

// Statements clients ran (Questions: every COM_QUERY and COM_STMT_EXECUTE, not pings or prepares),
// less the statements this process ran to read it (one per read, counted by the server before it
// answers).
std::int64_t mariadb_statements(const endpoint& server) {
  static std::atomic<std::int64_t> reads{0};
  mariadb_client client(mariadb_login{server});
  const auto questions = client.query_value(
      "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'QUESTIONS'");
  const std::int64_t own = ++reads;
  if (!questions) throw client_error("mariadb " + server.to_string() + ": GLOBAL_STATUS has no QUESTIONS");
  return std::stoll(*questions) - own;
}

}  // namespace

double prometheus_metric_sum(const endpoint& server, const std::string& metric,
                             const std::vector<std::string>& filters) {
  return metric_sum(metrics_of(server), metric, filters);
}

std::int64_t server_operations(const backend_access& access) {
  std::int64_t total = 0;
  for (const auto& server : access.endpoints) {
    switch (access.kind) {
      case backend::redis:
      case backend::redlock: total += redis_calls(server); break;
      case backend::zookeeper:
      case backend::zookeeper_ensemble: total += zookeeper_packets_received(server); break;
      case backend::etcd:
      case backend::etcd_cluster: total += etcd_requests(server); break;
      case backend::sql:
        throw std::invalid_argument("server_operations: PostgreSQL's counts lag; use statement_sampler");
      case backend::mariadb: total += mariadb_statements(server); break;
    }
  }
  return total;
}

struct statement_sampler::state {
  postgres_client client;
  std::chrono::milliseconds interval;
  mutable std::mutex mutex;
  std::condition_variable stop_requested;
  bool stopping = false;
  std::int64_t count = 0;
  std::string error;
  std::map<std::string, std::string> last_start;  // pid -> query_start last seen
  std::thread thread;

  state(const std::string& dsn, std::chrono::milliseconds every) : client(dsn), interval(every) {}

  // "pid=query_start;..." of every other client session that has run a statement.
  std::string snapshot() {
    return client
        .query_value(
            "SELECT coalesce(string_agg(pid::text || '=' || query_start::text, ';'), '') FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND query_start IS NOT NULL")
        .value_or("");
  }

  void sample() {
    const std::string text = snapshot();
    std::lock_guard<std::mutex> lock(mutex);
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = text.find(';', start);
      if (end == std::string::npos) end = text.size();
      const std::string entry = text.substr(start, end - start);
      const std::size_t eq = entry.find('=');
      if (eq != std::string::npos) {
        auto& seen = last_start[entry.substr(0, eq)];
        const std::string started = entry.substr(eq + 1);
        if (seen != started) {
          if (!seen.empty() || primed) ++count;
          seen = started;
        }
      }
      start = end + 1;
    }
    primed = true;
  }

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      lock.unlock();
      try {
        sample();
      } catch (const std::exception& e) {
        lock.lock();
        error = e.what();
        return;
      }
      lock.lock();
      stop_requested.wait_for(lock, interval, [&] { return stopping; });
    }
  }

  bool primed = false;  // the first snapshot records what ran before; it counts nothing
};

statement_sampler::statement_sampler(const std::string& dsn, std::chrono::milliseconds interval)
    : state_(std::make_unique<state>(dsn, interval)) {
  state_->sample();  // prime synchronously: what ran before construction is not counted
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

statement_sampler::~statement_sampler() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->stop_requested.notify_all();
  state_->thread.join();
}

std::int64_t statement_sampler::count() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->count;
}

void statement_sampler::reset() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->count = 0;
}

std::string statement_sampler::error() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->error;
}

}  // namespace dlock::lab
