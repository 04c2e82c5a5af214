// redis_server.hpp — defines dlock::lab::redis_server (one redis-server process) and redis_node_set
// (the independent nodes Redlock runs on), with the lab's substitute for a wall-clock jump on a node.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/lab/clients.hpp"
#include "dlock/lab/server.hpp"

namespace dlock::lab {

struct redis_options {
  // Persistence is off by default (`--save '' --appendonly no`): a restart loses every key, which is
  // the case docs/design/faults.md §6 measures. `appendonly` turns the AOF on.
  bool appendonly = false;
  // With appendonly: "always" (fsync before each reply), "everysec" (Redis' default) or "no".
  std::string appendfsync = "everysec";
  // Further `--name value` arguments passed through to redis-server.
  std::vector<std::string> extra_args;
};

class redis_server final : public server {
 public:
  redis_server(std::string name, std::filesystem::path dir, std::uint16_t port, redis_options options);

  const redis_options& options() const { return options_; }
  redis_client client(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;

  bool probe() override;
  std::string role() override;  // "standalone" when it answers (the lab runs no replicas)

  // FLUSHALL.
  void flushall();

  // The effect a forward wall-clock jump of `jump` has on this node's locks, produced directly
  // (libfaketime cannot run Debian's redis-server; see faults.hpp): every key matching `pattern`
  // (SCAN MATCH syntax) that has an expiry loses `jump` from its remaining TTL, so keys whose TTL is
  // at most `jump` are deleted. Keys without expiry (fence counters) are untouched. One Lua script,
  // so it is atomic, as the jump would be. Returns how many keys were shortened or deleted.
  std::int64_t expire_keys_early(std::string_view pattern, std::chrono::milliseconds jump);

 protected:
  spawn_options launch_options() override;
  void before_launch() override;
  void wipe_data() override;

 private:
  redis_options options_;
};

// Independent Redis nodes (no replication between them), as Redlock needs.
class redis_node_set {
 public:
  // Makes `count` nodes named "<name>-1"… in sub-directories of `dir`, on fresh loopback ports.
  redis_node_set(std::string name, std::filesystem::path dir, std::size_t count, redis_options options);

  std::size_t size() const { return nodes_.size(); }
  redis_server& node(std::size_t index) { return *nodes_.at(index); }
  std::vector<endpoint> endpoints() const;

  void launch();
  void wait_ready(std::chrono::steady_clock::time_point deadline);

 private:
  std::vector<std::unique_ptr<redis_server>> nodes_;
};

}  // namespace dlock::lab
