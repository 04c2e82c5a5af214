// Implements backend names, config rendering and reset_backend (configs.hpp).
#include "dlock/lab/configs.hpp"

#include <unistd.h>

#include <array>
#include <fstream>
#include <stdexcept>

#include "dlock/lab/clients.hpp"
#include "dlock/lab/mariadb_server.hpp"

namespace dlock::lab {
namespace {

struct backend_names {
  backend kind;
  std::string_view name;
  std::string_view plugin;
};

constexpr std::array<backend_names, 8> names = {{
    {backend::redis, "redis", "redis"},
    {backend::redlock, "redlock", "redlock"},
    {backend::zookeeper, "zookeeper", "zookeeper"},
    {backend::zookeeper_ensemble, "zookeeper-ensemble", "zookeeper"},
    {backend::etcd, "etcd", "etcd"},
    {backend::etcd_cluster, "etcd-cluster", "etcd"},
    {backend::sql, "sql", "sql"},
    {backend::mariadb, "mariadb", "sql"},
}};

const backend_names& entry(backend which) {
  for (const auto& candidate : names) {
    if (candidate.kind == which) return candidate;
  }
  throw std::invalid_argument("unknown backend");
}

// A double-quoted YAML scalar (endpoints and DSNs contain ':' and, in DSNs, '@' and '/').
std::string yaml_quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string flow_list(const std::vector<endpoint>& endpoints) {
  std::string out = "[";
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    if (i) out += ", ";
    out += yaml_quoted(endpoints[i].to_string());
  }
  return out + "]";
}

void require_count(backend which, const std::vector<endpoint>& endpoints, bool exactly_one) {
  if (endpoints.empty() || (exactly_one && endpoints.size() != 1)) {
    throw std::invalid_argument(std::string(backend_name(which)) + " config needs " +
                                (exactly_one ? "exactly one endpoint" : "at least one endpoint") + ", got " +
                                std::to_string(endpoints.size()));
  }
}

void reset_mariadb(const mariadb_login& login, bool terminate_sessions) {
  mariadb_client client(login);
  if (terminate_sessions) {
    auto others = client.query_column(
        "SELECT ID FROM information_schema.PROCESSLIST "
        "WHERE ID <> CONNECTION_ID() AND COMMAND <> 'Daemon' AND USER NOT IN ('system user', 'event_scheduler')");
    for (const auto& id : others) {
      try {
        client.execute("KILL CONNECTION " + id.value_or("0"));
      } catch (const mariadb_error& error) {
        if (error.code() != 1094) throw;  // ER_NO_SUCH_THREAD: it ended meanwhile
      }
    }
  }
  auto truncates = client.query_column(
      "SELECT CONCAT('TRUNCATE TABLE `', REPLACE(TABLE_SCHEMA, '`', '``'), '`.`', REPLACE(TABLE_NAME, '`', '``'), "
      "'`') FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' "
      "AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')");
  if (truncates.empty()) return;
  std::string statements = "SET FOREIGN_KEY_CHECKS = 0";
  for (const auto& truncate : truncates) statements += ";\n" + truncate.value_or("");
  client.execute(statements + ";\nSET FOREIGN_KEY_CHECKS = 1");
}

}  // namespace

std::string_view backend_name(backend which) { return entry(which).name; }
std::string_view plugin_name(backend which) { return entry(which).plugin; }

std::optional<backend> parse_backend(std::string_view name) {
  for (const auto& candidate : names) {
    if (candidate.name == name) return candidate.kind;
  }
  return std::nullopt;
}

const std::vector<backend>& all_backends() {
  static const std::vector<backend> every = {backend::redis, backend::redlock, backend::zookeeper,
                                             backend::zookeeper_ensemble, backend::etcd, backend::etcd_cluster,
                                             backend::sql};
  return every;
}

const std::vector<backend>& opt_in_backends() {
  static const std::vector<backend> opt_in = {backend::mariadb};
  return opt_in;
}

std::string config_env_var(backend which) {
  std::string out = "DLOCK_LAB_";
  for (char c : backend_name(which)) out += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return out + "_CONFIG";
}

std::string postgres_dsn(const endpoint& server) {
  return "postgresql://postgres@" + server.to_string() + "/postgres";
}

std::string render_config(backend which, const std::vector<endpoint>& endpoints) {
  std::string out = "backend: " + std::string(plugin_name(which)) + "\noptions:\n";
  switch (which) {
    case backend::redis:
      require_count(which, endpoints, true);
      out += "  endpoint: " + yaml_quoted(endpoints[0].to_string()) + "\n";
      break;
    case backend::redlock:
    case backend::etcd:
    case backend::etcd_cluster:
      require_count(which, endpoints, false);
      out += "  endpoints: " + flow_list(endpoints) + "\n";
      break;
    case backend::zookeeper:
    case backend::zookeeper_ensemble: {
      require_count(which, endpoints, false);
      std::string connect;
      for (const auto& e : endpoints) connect += (connect.empty() ? "" : ",") + e.to_string();
      out += "  connect: " + yaml_quoted(connect) + "\n";
      break;
    }
    case backend::sql:
      require_count(which, endpoints, true);
      out += "  dsn: " + yaml_quoted(postgres_dsn(endpoints[0])) + "\n";
      break;
    case backend::mariadb:
      require_count(which, endpoints, true);
      out += "  dsn: " + yaml_quoted(mariadb_dsn(endpoints[0])) + "\n";
      break;
  }
  return out;
}

void write_config(const std::filesystem::path& path, backend which, const std::vector<endpoint>& endpoints) {
  std::string text = render_config(which, endpoints);
  auto temporary = path;
  temporary += ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw std::runtime_error("cannot write " + temporary.string());
  }
  std::filesystem::rename(temporary, path);
}

void reset_backend(const backend_access& access, bool terminate_sql_sessions) {
  switch (access.kind) {
    case backend::redis:
    case backend::redlock:
      for (const auto& node : access.endpoints) redis_client(node).checked({"FLUSHALL"});
      break;
    case backend::zookeeper:
    case backend::zookeeper_ensemble: {
      std::string connect;
      for (const auto& e : access.endpoints) connect += (connect.empty() ? "" : ",") + e.to_string();
      zookeeper_client client(connect);
      for (const auto& child : client.children("/")) {
        if (child != "zookeeper") client.remove_recursive("/" + child);
      }
      break;
    }
    case backend::etcd:
    case backend::etcd_cluster: {
      std::string errors;
      for (const auto& member : access.endpoints) {  // any member will do; skip one that is down
        try {
          etcd_client client(member);
          client.revoke_all_leases();
          client.delete_all();
          return;
        } catch (const client_error& error) {
          errors += std::string("\n  ") + error.what();
        }
      }
      throw client_error("etcd reset failed on every member:" + errors);
    }
    case backend::sql: {
      postgres_client client(access.dsn.empty() ? postgres_dsn(access.endpoints.at(0)) : access.dsn);
      if (terminate_sql_sessions) {
        client.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'");
      }
      client.execute(R"sql(
DO $$
DECLARE t record;
BEGIN
  FOR t IN SELECT schemaname, tablename FROM pg_tables
           WHERE schemaname NOT IN ('pg_catalog', 'information_schema') LOOP
    EXECUTE format('TRUNCATE TABLE %I.%I RESTART IDENTITY CASCADE', t.schemaname, t.tablename);
  END LOOP;
END
$$)sql");
      break;
    }
    case backend::mariadb:
      reset_mariadb(mariadb_login{access.endpoints.at(0)}, terminate_sql_sessions);
      break;
  }
}

}  // namespace dlock::lab
