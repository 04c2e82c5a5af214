// mariadb_server.hpp — defines dlock::lab::mariadb_server (MariaDB 10.11: `mariadb-install-db`, then
// `mariadbd` run directly, as the `mysql` user when the lab is root), the accounts the lab creates on
// it, and mariadb_client, a small synchronous client (MariaDB Connector/C) for probes, resets and tests.
// It is the lab's piece of MySQL/MariaDB support in the sql backend; MariaDB is opt-in (not among
// all_backends()), so only tests that ask for backend::mariadb start it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/lab/clients.hpp"
#include "dlock/lab/server.hpp"

struct st_mysql;

namespace dlock::lab {

// The accounts the lab creates at installation, both with every privilege (KILL of other sessions
// included) and the same password, and the database they use. MariaDB 10.11 offers two password
// authentication plugins: mysql_native_password and ed25519 (auth_ed25519.so, loaded with
// --plugin-load-add); it has no caching_sha2_password (MySQL 8's default) on the server side. root
// exists only as root@localhost via unix_socket, so nothing reaches the server over TCP without the
// password. The password is fixed (not generated) so a config derived from the endpoint alone is
// complete, as for PostgreSQL (whose lab server trusts every local connection).
inline constexpr std::string_view mariadb_native_user = "dlock";          // mysql_native_password
inline constexpr std::string_view mariadb_ed25519_user = "dlock_ed25519";  // ed25519
inline constexpr std::string_view mariadb_password = "lab-secret-7f3a";
inline constexpr std::string_view mariadb_database = "dlock";

// What a client needs to log in; never printed whole (the password stays out of error messages).
struct mariadb_login {
  endpoint server;
  std::string user{mariadb_native_user};
  std::string password{mariadb_password};
  std::string database{mariadb_database};
};

// "mysql://USER:PASSWORD@HOST:PORT/DATABASE" for one of the lab's accounts (the password needs no
// percent-encoding).
std::string mariadb_dsn(const endpoint& server, std::string_view user = mariadb_native_user);

// A failed MariaDB operation; code() is the server's or client library's error number (1094 unknown
// thread id, 2013 lost connection, …), 0 when there is none.
class mariadb_error : public client_error {
 public:
  mariadb_error(const std::string& what, unsigned int code) : client_error(what), code_(code) {}
  unsigned int code() const { return code_; }

 private:
  unsigned int code_;
};

// One connection (TCP, multi-statements on, no automatic reconnection: a killed session stays dead).
// `timeout` bounds the connect and each later read and write (Connector/C counts whole seconds:
// rounded up, at least 1 s). Errors throw mariadb_error naming user@endpoint, never the password.
// One object is used by one thread at a time.
class mariadb_client {
 public:
  explicit mariadb_client(mariadb_login login, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ~mariadb_client();
  mariadb_client(mariadb_client&& other) noexcept;
  mariadb_client& operator=(mariadb_client&& other) noexcept;
  mariadb_client(const mariadb_client&) = delete;
  mariadb_client& operator=(const mariadb_client&) = delete;

  // Runs `sql` (one or more statements). Returns the first column of the first row of the last
  // statement that produced a result set, or nullopt when there is none, it has no row, or the value
  // is NULL.
  std::optional<std::string> query_value(const std::string& sql);
  void execute(const std::string& sql) { query_value(sql); }
  // The first column of every row of the last result set of `sql` (NULL as nullopt).
  std::vector<std::optional<std::string>> query_column(const std::string& sql);
  // This session's id, the one `KILL CONNECTION id` and information_schema.PROCESSLIST use.
  std::uint64_t connection_id() const;

 private:
  [[noreturn]] void fail(const std::string& operation) const;
  std::string name_;  // "mariadb dlock@127.0.0.1:P"
  st_mysql* connection_ = nullptr;
};

// A login with `login` succeeds within 2 s. Never throws.
bool mariadb_accepts_connections(const mariadb_login& login);

struct mariadb_options {
  std::string server_program = "/usr/sbin/mariadbd";
  std::string install_program = "/usr/bin/mariadb-install-db";
  // The OS user both run as when the lab runs as root (mariadbd refuses root without --user=root).
  std::string os_user = "mysql";
  // false: innodb_flush_log_at_trx_commit=2 and no doublewrite buffer (a commit reaches the OS before
  // the reply, so a killed server loses nothing; only a machine crash would). true: MariaDB's defaults.
  bool durable = false;
  int max_connections = 200;
};

class mariadb_server final : public server {
 public:
  mariadb_server(std::string name, std::filesystem::path dir, std::uint16_t port, mariadb_options options);

  // mariadb_dsn() of the mysql_native_password account, and of the ed25519 one.
  std::string dsn() const { return mariadb_dsn(client_endpoint(), mariadb_native_user); }
  std::string ed25519_dsn() const { return mariadb_dsn(client_endpoint(), mariadb_ed25519_user); }
  mariadb_login login() const;  // the mysql_native_password account
  mariadb_login ed25519_login() const;
  // A new session as the mysql_native_password account: the raw SQL client for tests.
  mariadb_client client(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const {
    return mariadb_client(login(), timeout);
  }

  // `KILL CONNECTION id` from a session of its own: that session ends (its named locks are released,
  // its open transaction rolled back) and its next statement fails. Throws mariadb_error, e.g. code
  // 1094 when there is no such session.
  void kill_connection(std::uint64_t connection_id);

  bool probe() override;     // a login with login() succeeds
  std::string role() override;  // "standalone" when it accepts logins

 protected:
  spawn_options launch_options() override;
  // mariadb-install-db (system tables, the accounts, the database) when there is no data directory.
  void before_launch() override;
  void wipe_data() override;

 private:
  std::filesystem::path data_dir() const { return dir() / "data"; }
  // Server options that install and run share (InnoDB's log size is fixed at installation).
  std::vector<std::string> storage_args() const;
  mariadb_options options_;
};

}  // namespace dlock::lab
