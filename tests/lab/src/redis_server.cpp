// Implements redis_server and redis_node_set (redis_server.hpp).
#include "dlock/lab/redis_server.hpp"

#include <thread>

namespace dlock::lab {

redis_server::redis_server(std::string name, std::filesystem::path dir, std::uint16_t port,
                           redis_options options)
    : server(std::move(name), std::move(dir), endpoint{"127.0.0.1", port}), options_(std::move(options)) {}

spawn_options redis_server::launch_options() {
  spawn_options spawn;
  spawn.argv = {"redis-server",
                "--port", std::to_string(client_endpoint().port),
                "--bind", client_endpoint().host,
                "--dir", (dir() / "data").string(),
                "--daemonize", "no",
                "--logfile", "",
                "--save", "",
                "--appendonly", options_.appendonly ? "yes" : "no",
                // DEBUG SLEEP / DEBUG SET-ACTIVE-EXPIRE are useful faults; loopback clients only.
                "--enable-debug-command", "local",
                // Keep argv as given (Redis would retitle itself "redis-server host:port"), so the
                // lab directory stays visible in /proc/PID/cmdline for the survivor check.
                "--set-proc-title", "no"};
  if (options_.appendonly) {
    spawn.argv.insert(spawn.argv.end(), {"--appendfsync", options_.appendfsync});
  }
  spawn.argv.insert(spawn.argv.end(), options_.extra_args.begin(), options_.extra_args.end());
  spawn.log_path = log_path();
  spawn.working_dir = dir();
  return spawn;
}

void redis_server::before_launch() { std::filesystem::create_directories(dir() / "data"); }

void redis_server::wipe_data() {
  std::filesystem::remove_all(dir() / "data");
  std::filesystem::create_directories(dir() / "data");
}

redis_client redis_server::client(std::chrono::milliseconds timeout) const {
  return redis_client(client_endpoint(), timeout);
}

bool redis_server::probe() {
  try {
    redis_client probe_client(client_endpoint(), std::chrono::milliseconds(500));
    auto reply = probe_client.command({"PING"});
    return reply.type == redis_reply::kind::status && reply.text == "PONG";  // not "-LOADING"
  } catch (const client_error&) {
    return false;
  }
}

std::string redis_server::role() { return probe() ? "standalone" : ""; }

void redis_server::flushall() { client().checked({"FLUSHALL"}); }

std::int64_t redis_server::expire_keys_early(std::string_view pattern, std::chrono::milliseconds jump) {
  // KEYS[] unused (the keys are found by SCAN, so the script is not cluster-safe; the lab runs no
  // cluster). A key whose TTL is not longer than the jump would have expired: delete it.
  static const char* script = R"lua(
local cursor = "0"
local affected = 0
local jump = tonumber(ARGV[2])
repeat
  local page = redis.call("SCAN", cursor, "MATCH", ARGV[1], "COUNT", 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    local ttl = redis.call("PTTL", key)
    if ttl > 0 then
      if ttl <= jump then
        redis.call("DEL", key)
      else
        redis.call("PEXPIRE", key, ttl - jump)
      end
      affected = affected + 1
    end
  end
until cursor == "0"
return affected
)lua";
  auto reply = client().checked({"EVAL", script, "0", std::string(pattern), std::to_string(jump.count())});
  return reply.integer;
}

redis_node_set::redis_node_set(std::string name, std::filesystem::path dir, std::size_t count,
                               redis_options options) {
  auto ports = reserve_loopback_ports(count);
  for (std::size_t i = 0; i < count; ++i) {
    std::string node_name = name + "-" + std::to_string(i + 1);
    nodes_.push_back(std::make_unique<redis_server>(node_name, dir / node_name, ports[i], options));
  }
}

std::vector<endpoint> redis_node_set::endpoints() const {
  std::vector<endpoint> out;
  for (const auto& node : nodes_) out.push_back(node->client_endpoint());
  return out;
}

void redis_node_set::launch() {
  for (auto& node : nodes_) node->launch();
}

void redis_node_set::wait_ready(std::chrono::steady_clock::time_point deadline) {
  for (auto& node : nodes_) node->wait_ready(deadline);
}

}  // namespace dlock::lab
