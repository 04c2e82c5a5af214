// Implements the lab's small clients (clients.hpp).
#include "dlock/lab/clients.hpp"

#include <hiredis/hiredis.h>
#include <libpq-fe.h>
// The synchronous ZooKeeper calls (zoo_create, zoo_get, …) are declared only for the threaded
// library (zookeeper_mt), which is the one linked.
#ifndef THREADED
#define THREADED
#endif
#include <zookeeper.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <system_error>

#include "http.hpp"
#include "socket.hpp"

namespace dlock::lab {
namespace {

timeval to_timeval(std::chrono::milliseconds d) {
  timeval tv{};
  tv.tv_sec = d.count() / 1000;
  tv.tv_usec = (d.count() % 1000) * 1000;
  return tv;
}

redis_reply convert(const redisReply* reply) {
  redis_reply out;
  switch (reply->type) {
    case REDIS_REPLY_STRING: out.type = redis_reply::kind::string; break;
    case REDIS_REPLY_STATUS: out.type = redis_reply::kind::status; break;
    case REDIS_REPLY_ERROR: out.type = redis_reply::kind::error; break;
    case REDIS_REPLY_INTEGER: out.type = redis_reply::kind::integer; break;
    case REDIS_REPLY_ARRAY: out.type = redis_reply::kind::array; break;
    default: out.type = redis_reply::kind::nil; break;
  }
  if (reply->str) out.text.assign(reply->str, reply->len);
  out.integer = reply->integer;
  for (std::size_t i = 0; i < reply->elements; ++i) out.elements.push_back(convert(reply->element[i]));
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------- Redis

redis_client::redis_client(endpoint server, std::chrono::milliseconds timeout) : server_(std::move(server)) {
  context_ = redisConnectWithTimeout(server_.host.c_str(), server_.port, to_timeval(timeout));
  if (!context_ || context_->err) {
    std::string why = context_ ? context_->errstr : "cannot allocate a context";
    if (context_) redisFree(context_);
    context_ = nullptr;
    throw client_error("redis " + server_.to_string() + ": connect failed: " + why);
  }
  redisSetTimeout(context_, to_timeval(timeout));
}

redis_client::~redis_client() {
  if (context_) redisFree(context_);
}

redis_client::redis_client(redis_client&& other) noexcept
    : server_(std::move(other.server_)), context_(std::exchange(other.context_, nullptr)) {}

redis_client& redis_client::operator=(redis_client&& other) noexcept {
  if (this != &other) {
    if (context_) redisFree(context_);
    server_ = std::move(other.server_);
    context_ = std::exchange(other.context_, nullptr);
  }
  return *this;
}

redis_reply redis_client::command(const std::vector<std::string>& args) {
  if (!context_) throw client_error("redis " + server_.to_string() + ": client is not connected");
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const auto& arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  auto* reply = static_cast<redisReply*>(
      redisCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lengths.data()));
  if (!reply) {
    std::string why = context_->errstr;
    redisFree(context_);
    context_ = nullptr;
    throw client_error("redis " + server_.to_string() + ": " + (args.empty() ? "" : args[0]) +
                       " failed: " + why);
  }
  redis_reply out = convert(reply);
  freeReplyObject(reply);
  return out;
}

redis_reply redis_client::checked(const std::vector<std::string>& args) {
  redis_reply reply = command(args);
  if (reply.type == redis_reply::kind::error) {
    throw client_error("redis " + server_.to_string() + ": " + (args.empty() ? "" : args[0]) +
                       " answered: " + reply.text);
  }
  return reply;
}

// ------------------------------------------------------------------------------------------ ZooKeeper

std::string zookeeper_four_letter_word(const endpoint& server, std::string_view word,
                                       std::chrono::milliseconds timeout) {
  try {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    detail::unique_fd connection = detail::connect_tcp(server, timeout);
    detail::send_all(connection.get(), word);
    return detail::read_until_eof(connection.get(), deadline);
  } catch (const std::system_error& error) {
    throw client_error("zookeeper " + server.to_string() + ": '" + std::string(word) + "' failed: " +
                       error.what());
  }
}

struct zookeeper_client::state {
  std::string connect;
  zhandle_t* handle = nullptr;
  std::mutex mutex;
  std::condition_variable changed;
  int session_state = 0;

  static void watcher(zhandle_t*, int type, int session_state, const char*, void* context) {
    if (type != ZOO_SESSION_EVENT) return;
    auto* self = static_cast<state*>(context);
    {
      std::lock_guard<std::mutex> lock(self->mutex);
      self->session_state = session_state;
    }
    self->changed.notify_all();
  }

  [[noreturn]] void fail(const std::string& operation, const std::string& path, int rc) const {
    throw client_error("zookeeper " + connect + ": " + operation + " " + path + " failed: " + zerror(rc));
  }
};

zookeeper_client::zookeeper_client(std::string connect, std::chrono::milliseconds timeout,
                                   std::chrono::milliseconds session_timeout)
    : state_(std::make_unique<state>()) {
  // The C client's log level is process-wide; errors only, so reconnect chatter stays out of test logs.
  static std::once_flag quiet;
  std::call_once(quiet, [] { zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR); });
  state_->connect = std::move(connect);
  state_->handle = zookeeper_init(state_->connect.c_str(), &state::watcher,
                                  static_cast<int>(session_timeout.count()), nullptr, state_.get(), 0);
  if (!state_->handle) {
    throw client_error("zookeeper " + state_->connect + ": zookeeper_init failed: " + std::strerror(errno));
  }
  std::unique_lock<std::mutex> lock(state_->mutex);
  bool connected = state_->changed.wait_for(lock, timeout, [this] {
    return state_->session_state == ZOO_CONNECTED_STATE;
  });
  lock.unlock();
  if (!connected) {
    zookeeper_close(state_->handle);
    throw client_error("zookeeper " + state_->connect + ": no session within " +
                       std::to_string(timeout.count()) + " ms");
  }
}

zookeeper_client::~zookeeper_client() {
  if (state_ && state_->handle) zookeeper_close(state_->handle);
}

std::string zookeeper_client::create(const std::string& path, const std::string& data, bool ephemeral) {
  std::vector<char> created(path.size() + 64);
  int rc = zoo_create(state_->handle, path.c_str(), data.data(), static_cast<int>(data.size()),
                      &ZOO_OPEN_ACL_UNSAFE, ephemeral ? ZOO_EPHEMERAL : ZOO_PERSISTENT, created.data(),
                      static_cast<int>(created.size()));
  if (rc != ZOK) state_->fail("create", path, rc);
  return created.data();
}

std::optional<std::string> zookeeper_client::get(const std::string& path) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    Stat stat{};
    int rc = zoo_exists(state_->handle, path.c_str(), 0, &stat);
    if (rc == ZNONODE) return std::nullopt;
    if (rc != ZOK) state_->fail("exists", path, rc);
    std::string data(static_cast<std::size_t>(stat.dataLength) + 1, '\0');
    int length = static_cast<int>(data.size());
    rc = zoo_get(state_->handle, path.c_str(), 0, data.data(), &length, &stat);
    if (rc == ZNONODE) return std::nullopt;
    if (rc != ZOK) state_->fail("get", path, rc);
    if (length < 0) return std::string();  // a node without data
    if (static_cast<std::size_t>(length) < data.size()) {
      data.resize(static_cast<std::size_t>(length));
      return data;
    }
    // The data grew between exists and get: ask again.
  }
  state_->fail("get", path, ZMARSHALLINGERROR);
}

std::vector<std::string> zookeeper_client::children(const std::string& path) {
  String_vector names{};
  int rc = zoo_get_children(state_->handle, path.c_str(), 0, &names);
  if (rc == ZNONODE) return {};
  if (rc != ZOK) state_->fail("get_children", path, rc);
  std::vector<std::string> out;
  for (int i = 0; i < names.count; ++i) out.emplace_back(names.data[i]);
  deallocate_String_vector(&names);
  return out;
}

void zookeeper_client::remove_recursive(const std::string& path) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    for (const auto& child : children(path)) {
      remove_recursive(path == "/" ? "/" + child : path + "/" + child);
    }
    if (path == "/") return;
    int rc = zoo_delete(state_->handle, path.c_str(), -1);
    if (rc == ZOK || rc == ZNONODE) return;
    if (rc != ZNOTEMPTY) state_->fail("delete", path, rc);
    // A child appeared meanwhile (an ephemeral node of a live session): go around again.
  }
  state_->fail("delete", path, ZNOTEMPTY);
}

std::int64_t zookeeper_client::session_id() const { return zoo_client_id(state_->handle)->client_id; }

// --------------------------------------------------------------------------------------------- etcd

namespace {

std::uint64_t to_u64(const nlohmann::json& value) {
  if (value.is_string()) return std::stoull(value.get<std::string>());
  if (value.is_number_unsigned() || value.is_number_integer()) return value.get<std::uint64_t>();
  return 0;
}

// etcd's "range_end" for every key starting with `prefix`: the prefix with its last byte below 0xff
// incremented ("\0" means "to the end of the keyspace").
std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

}  // namespace

etcd_client::etcd_client(endpoint member, std::chrono::milliseconds timeout)
    : member_(std::move(member)), timeout_(timeout) {}

std::string etcd_client::call(const std::string& path, const std::string& json_body) {
  detail::http_response response;
  try {
    response = detail::http_request(member_, "POST", path, json_body, timeout_);
  } catch (const std::exception& error) {
    throw client_error("etcd " + member_.to_string() + ": POST " + path + " failed: " + error.what());
  }
  if (response.status != 200) {
    throw client_error("etcd " + member_.to_string() + ": POST " + path + " answered HTTP " +
                       std::to_string(response.status) + ": " + response.body);
  }
  return response.body;
}

bool etcd_client::healthy() {
  try {
    auto response = detail::http_request(member_, "GET", "/health", "", timeout_);
    if (response.status != 200) return false;
    auto body = nlohmann::json::parse(response.body, nullptr, false);
    return !body.is_discarded() && body.value("health", "") == "true";
  } catch (const std::exception&) {
    return false;
  }
}

void etcd_client::put(std::string_view key, std::string_view value) {
  nlohmann::json body{{"key", detail::base64_encode(key)}, {"value", detail::base64_encode(value)}};
  call("/v3/kv/put", body.dump());
}

std::optional<std::string> etcd_client::get(std::string_view key, bool serializable) {
  nlohmann::json body{{"key", detail::base64_encode(key)}, {"serializable", serializable}};
  auto reply = nlohmann::json::parse(call("/v3/kv/range", body.dump()));
  if (!reply.contains("kvs") || reply["kvs"].empty()) return std::nullopt;
  return detail::base64_decode(reply["kvs"][0].value("value", ""));
}

std::int64_t etcd_client::delete_prefix(std::string_view prefix) {
  std::string key = prefix.empty() ? std::string(1, '\0') : std::string(prefix);
  nlohmann::json body{{"key", detail::base64_encode(key)},
                      {"range_end", detail::base64_encode(prefix_end(prefix))}};
  auto reply = nlohmann::json::parse(call("/v3/kv/deleterange", body.dump()));
  return reply.contains("deleted") ? static_cast<std::int64_t>(to_u64(reply["deleted"])) : 0;
}

std::int64_t etcd_client::delete_all() { return delete_prefix(""); }

void etcd_client::revoke_all_leases() {
  auto reply = nlohmann::json::parse(call("/v3/lease/leases", "{}"));
  if (!reply.contains("leases")) return;
  for (const auto& lease : reply["leases"]) {
    nlohmann::json body{{"ID", std::to_string(to_u64(lease["ID"]))}};
    try {
      call("/v3/lease/revoke", body.dump());
    } catch (const client_error& error) {
      // A lease that expired between listing and revoking is what we wanted anyway.
      if (std::string(error.what()).find("not found") == std::string::npos) throw;
    }
  }
}

etcd_status etcd_client::status() {
  auto reply = nlohmann::json::parse(call("/v3/maintenance/status", "{}"));
  etcd_status status;
  status.member_id = to_u64(reply["header"]["member_id"]);
  status.leader = reply.contains("leader") ? to_u64(reply["leader"]) : 0;
  status.raft_term = reply.contains("raftTerm") ? to_u64(reply["raftTerm"]) : 0;
  status.raft_index = reply.contains("raftIndex") ? to_u64(reply["raftIndex"]) : 0;
  status.version = reply.value("version", "");
  return status;
}

std::vector<etcd_member> etcd_client::members() {
  auto reply = nlohmann::json::parse(call("/v3/cluster/member/list", "{}"));
  std::vector<etcd_member> out;
  for (const auto& entry : reply.value("members", nlohmann::json::array())) {
    etcd_member member;
    member.id = to_u64(entry["ID"]);
    member.name = entry.value("name", "");
    member.peer_urls = entry.value("peerURLs", std::vector<std::string>{});
    member.client_urls = entry.value("clientURLs", std::vector<std::string>{});
    out.push_back(std::move(member));
  }
  return out;
}

std::uint64_t etcd_client::add_member(const std::string& peer_url) {
  nlohmann::json body{{"peerURLs", {peer_url}}};
  auto reply = nlohmann::json::parse(call("/v3/cluster/member/add", body.dump()));
  return to_u64(reply["member"]["ID"]);
}

void etcd_client::remove_member(std::uint64_t id) {
  nlohmann::json body{{"ID", std::to_string(id)}};
  call("/v3/cluster/member/remove", body.dump());
}

// ---------------------------------------------------------------------------------------- PostgreSQL

bool postgres_accepts_connections(const std::string& dsn) {
  const char* keywords[] = {"dbname", "connect_timeout", nullptr};
  const char* values[] = {dsn.c_str(), "2", nullptr};
  return PQpingParams(keywords, values, 1) == PQPING_OK;
}

postgres_client::postgres_client(const std::string& dsn, std::chrono::seconds connect_timeout) : dsn_(dsn) {
  std::string timeout = std::to_string(connect_timeout.count());
  const char* keywords[] = {"dbname", "connect_timeout", nullptr};
  const char* values[] = {dsn.c_str(), timeout.c_str(), nullptr};
  connection_ = PQconnectdbParams(keywords, values, 1);
  if (!connection_ || PQstatus(connection_) != CONNECTION_OK) {
    std::string why = connection_ ? PQerrorMessage(connection_) : "out of memory";
    if (connection_) PQfinish(connection_);
    connection_ = nullptr;
    throw client_error("postgresql " + dsn + ": connect failed: " + why);
  }
}

postgres_client::~postgres_client() {
  if (connection_) PQfinish(connection_);
}

postgres_client::postgres_client(postgres_client&& other) noexcept
    : dsn_(std::move(other.dsn_)), connection_(std::exchange(other.connection_, nullptr)) {}

postgres_client& postgres_client::operator=(postgres_client&& other) noexcept {
  if (this != &other) {
    if (connection_) PQfinish(connection_);
    dsn_ = std::move(other.dsn_);
    connection_ = std::exchange(other.connection_, nullptr);
  }
  return *this;
}

std::optional<std::string> postgres_client::query_value(const std::string& sql) {
  if (!connection_) throw client_error("postgresql " + dsn_ + ": client is not connected");
  PGresult* result = PQexec(connection_, sql.c_str());
  ExecStatusType status = result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    std::string why = result ? PQresultErrorMessage(result) : PQerrorMessage(connection_);
    if (result) PQclear(result);
    throw client_error("postgresql " + dsn_ + ": query failed: " + why);
  }
  std::optional<std::string> value;
  if (status == PGRES_TUPLES_OK && PQntuples(result) > 0 && PQnfields(result) > 0 &&
      !PQgetisnull(result, 0, 0)) {
    value.emplace(PQgetvalue(result, 0, 0), static_cast<std::size_t>(PQgetlength(result, 0, 0)));
  }
  PQclear(result);
  return value;
}

}  // namespace dlock::lab
