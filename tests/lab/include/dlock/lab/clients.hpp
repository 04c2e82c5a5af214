// clients.hpp — defines the small synchronous clients the lab uses to probe servers, reset their data
// and perform the self-test's real operations: redis_client (hiredis), zookeeper_client (the
// ZooKeeper C client), etcd_client (etcd's v3 JSON gateway over HTTP), postgres_client (libpq), and
// zookeeper_four_letter_word. These are test tools, not the plugins' clients. Every failure throws
// client_error naming the server and the operation. One object is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/lab/endpoint.hpp"

struct redisContext;
struct pg_conn;

namespace dlock::lab {

class client_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------------------------------------- Redis

struct redis_reply {
  enum class kind { string, status, integer, nil, array, error };
  kind type = kind::nil;
  std::string text;  // string, status and error replies
  long long integer = 0;
  std::vector<redis_reply> elements;  // array replies
};

class redis_client {
 public:
  // Connects within `timeout`; the same timeout bounds each later command.
  explicit redis_client(endpoint server, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ~redis_client();
  redis_client(redis_client&& other) noexcept;
  redis_client& operator=(redis_client&& other) noexcept;

  // Sends one command and returns its reply, error replies included. Throws client_error on I/O
  // failure or timeout, after which the client is unusable.
  redis_reply command(const std::vector<std::string>& args);
  // As command(), but an error reply throws too.
  redis_reply checked(const std::vector<std::string>& args);

  const endpoint& server() const { return server_; }

 private:
  endpoint server_;
  redisContext* context_ = nullptr;
};

// ------------------------------------------------------------------------------------------ ZooKeeper

// Sends a four-letter word ("srvr", "ruok", "mntr", …) to a ZooKeeper server and returns the whole
// answer. Throws client_error when the server cannot be reached or does not answer within `timeout`.
std::string zookeeper_four_letter_word(const endpoint& server, std::string_view word,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(2));

class zookeeper_client {
 public:
  // Opens a session to `connect` ("host:port,host:port") and waits until it is connected, at most
  // `timeout`. The session timeout asked for is `session_timeout` (the server caps it).
  // The first client sets the C library's process-wide log level to errors only (reconnection
  // chatter would flood test logs); a plugin in the same process may set it again.
  explicit zookeeper_client(std::string connect,
                            std::chrono::milliseconds timeout = std::chrono::seconds(10),
                            std::chrono::milliseconds session_timeout = std::chrono::seconds(4));
  ~zookeeper_client();  // closes the session
  zookeeper_client(const zookeeper_client&) = delete;
  zookeeper_client& operator=(const zookeeper_client&) = delete;

  // Creates a node (persistent unless `ephemeral`); returns its path. Any error throws, "node exists"
  // included.
  std::string create(const std::string& path, const std::string& data, bool ephemeral = false);
  // The node's data, or nullopt when there is no such node.
  std::optional<std::string> get(const std::string& path);
  // Names of the node's children (not full paths); empty when the node does not exist.
  std::vector<std::string> children(const std::string& path);
  // Deletes the node and everything below it; no error when it does not exist.
  void remove_recursive(const std::string& path);
  std::int64_t session_id() const;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

// --------------------------------------------------------------------------------------------- etcd

struct etcd_status {
  std::uint64_t member_id = 0;
  std::uint64_t leader = 0;  // 0 while there is no leader
  std::uint64_t raft_term = 0;
  std::uint64_t raft_index = 0;
  std::string version;
};

struct etcd_member {
  std::uint64_t id = 0;
  std::string name;  // empty for a member added but not started yet
  std::vector<std::string> peer_urls;
  std::vector<std::string> client_urls;
};

// Talks to one etcd member through its v3 JSON gateway (etcd 3.4: POST /v3/…, keys and values
// base64-encoded on the wire; this class takes and returns plain bytes).
class etcd_client {
 public:
  explicit etcd_client(endpoint member, std::chrono::milliseconds timeout = std::chrono::seconds(5));

  // GET /health answered {"health":"true"} (the member is up and the cluster has a leader). Never throws.
  bool healthy();
  void put(std::string_view key, std::string_view value);
  // The key's value or nullopt. `serializable` reads the member's local copy (no quorum round), which
  // shows whether that member itself has caught up.
  std::optional<std::string> get(std::string_view key, bool serializable = false);
  // Deletes every key starting with `prefix`; returns how many were deleted.
  std::int64_t delete_prefix(std::string_view prefix);
  // Deletes every key.
  std::int64_t delete_all();
  // Revokes every lease (keys attached to them go too).
  void revoke_all_leases();
  etcd_status status();
  std::vector<etcd_member> members();
  // Adds a member with this peer URL; returns its new member ID.
  std::uint64_t add_member(const std::string& peer_url);
  void remove_member(std::uint64_t id);

  const endpoint& member() const { return member_; }

 private:
  std::string call(const std::string& path, const std::string& json_body);
  endpoint member_;
  std::chrono::milliseconds timeout_;
};

// ---------------------------------------------------------------------------------------- PostgreSQL

// PQping(dsn) == PQPING_OK: the server accepts connections (not starting up, not shutting down).
bool postgres_accepts_connections(const std::string& dsn);

class postgres_client {
 public:
  explicit postgres_client(const std::string& dsn,
                           std::chrono::seconds connect_timeout = std::chrono::seconds(5));
  ~postgres_client();
  postgres_client(postgres_client&& other) noexcept;
  postgres_client& operator=(postgres_client&& other) noexcept;

  // Runs `sql` (one or more statements). Returns the first column of the first row of the last
  // statement's result, or nullopt when it has no row or the value is NULL. Errors throw with the
  // server's message.
  std::optional<std::string> query_value(const std::string& sql);
  void execute(const std::string& sql) { query_value(sql); }

 private:
  std::string dsn_;
  pg_conn* connection_ = nullptr;
};

}  // namespace dlock::lab
