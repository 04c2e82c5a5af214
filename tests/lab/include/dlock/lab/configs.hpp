// configs.hpp — defines the backends the lab can start (backend), where a started backend is
// reached (backend_access), the dlock YAML config that reaches it (render_config, write_config), and
// reset_backend, which clears what a test left on it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/lab/endpoint.hpp"

namespace dlock::lab {

// mariadb: MariaDB for the sql backend's MySQL/MariaDB dialect; opt-in (see all_backends()).
enum class backend { redis, redlock, zookeeper, zookeeper_ensemble, etcd, etcd_cluster, sql, mariadb };

// "redis", "redlock", "zookeeper", "zookeeper-ensemble", "etcd", "etcd-cluster", "sql", "mariadb": the
// names `dlock-lab up` takes and the config file stems (<dir>/<name>.yaml).
std::string_view backend_name(backend which);
std::optional<backend> parse_backend(std::string_view name);
// The default set (what lab{} and `dlock-lab up` start): every backend in the order above except the
// opt-in ones.
const std::vector<backend>& all_backends();
// Backends started only when asked for by name, so that test binaries and CI jobs that do not need
// them do not pay for them: mariadb.
const std::vector<backend>& opt_in_backends();
// The dlock plugin a backend's config selects: zookeeper-ensemble → zookeeper, etcd-cluster → etcd,
// mariadb → sql.
std::string_view plugin_name(backend which);
// "DLOCK_LAB_ZOOKEEPER_ENSEMBLE_CONFIG" and so on: what `dlock-lab env` exports.
std::string config_env_var(backend which);

// How to reach one started backend, whoever runs its servers.
struct backend_access {
  backend kind = backend::redis;
  std::vector<endpoint> endpoints;  // every node / member, in order
  std::filesystem::path config;     // the dlock YAML that reaches it
  std::string dsn;                  // sql: "postgresql://postgres@127.0.0.1:P/postgres";
                                    // mariadb: "mysql://dlock:PASSWORD@127.0.0.1:P/dlock"
};

std::string postgres_dsn(const endpoint& server);

// The dlock config for `which` at `endpoints`, e.g.
//   backend: redlock
//   options:
//     endpoints: [127.0.0.1:P1, …]
// redis: `endpoint`; redlock, etcd: `endpoints` list; zookeeper: `connect` "h:p,h:p"; sql: `dsn`;
// mariadb: `backend: sql` with the mysql:// `dsn` (mariadb_dsn()).
// Throws std::invalid_argument when the endpoint count does not fit the backend (redis, sql, mariadb: 1).
std::string render_config(backend which, const std::vector<endpoint>& endpoints);
// Writes render_config() to `path` (atomically: temporary file + rename).
void write_config(const std::filesystem::path& path, backend which, const std::vector<endpoint>& endpoints);

// Clears what tests leave behind:
//   redis, redlock: FLUSHALL on every node;
//   zookeeper: deletes every node under / except /zookeeper;
//   etcd: revokes every lease and deletes every key;
//   sql: TRUNCATE … RESTART IDENTITY CASCADE of every table outside the system schemas; with
//        `terminate_sql_sessions`, also ends every other client session (and so its advisory locks);
//   mariadb: TRUNCATE TABLE (which resets AUTO_INCREMENT) of every table outside the system schemas,
//        foreign keys unchecked; with `terminate_sql_sessions`, also KILLs every other client session
//        (and so its GET_LOCK locks).
// Throws client_error naming the server when one cannot be reached.
void reset_backend(const backend_access& access, bool terminate_sql_sessions = false);

}  // namespace dlock::lab
