// Implements mariadb_server and mariadb_client (mariadb_server.hpp).
#include "dlock/lab/mariadb_server.hpp"

#include <mysql.h>
#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <utility>

namespace dlock::lab {
namespace {

bool running_as_root() { return ::geteuid() == 0; }

// mysql_init initialises the library on first use, which is not thread-safe; the lab may open
// clients from several threads at once.
void initialise_connector() {
  static std::once_flag once;
  std::call_once(once, [] { mysql_library_init(0, nullptr, nullptr); });
}

unsigned int whole_seconds(std::chrono::milliseconds timeout) {
  auto seconds = (timeout.count() + 999) / 1000;
  return static_cast<unsigned int>(seconds < 1 ? 1 : seconds);
}

// A single-quoted SQL string literal (the lab's constants only; no backslashes in them).
std::string sql_literal(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

}  // namespace

std::string mariadb_dsn(const endpoint& server, std::string_view user) {
  return "mysql://" + std::string(user) + ":" + std::string(mariadb_password) + "@" + server.to_string() + "/" +
         std::string(mariadb_database);
}

// ------------------------------------------------------------------------------------------- client

mariadb_client::mariadb_client(mariadb_login login, std::chrono::milliseconds timeout)
    : name_("mariadb " + login.user + "@" + login.server.to_string()) {
  initialise_connector();
  connection_ = mysql_init(nullptr);
  if (!connection_) throw mariadb_error(name_ + ": mysql_init failed (out of memory)", 0);
  unsigned int seconds = whole_seconds(timeout);
  mysql_options(connection_, MYSQL_OPT_CONNECT_TIMEOUT, &seconds);
  mysql_options(connection_, MYSQL_OPT_READ_TIMEOUT, &seconds);
  mysql_options(connection_, MYSQL_OPT_WRITE_TIMEOUT, &seconds);
  if (!mysql_real_connect(connection_, login.server.host.c_str(), login.user.c_str(), login.password.c_str(),
                          login.database.empty() ? nullptr : login.database.c_str(), login.server.port, nullptr,
                          CLIENT_MULTI_STATEMENTS)) {
    mariadb_error error(name_ + ": connect failed: " + mysql_error(connection_), mysql_errno(connection_));
    mysql_close(connection_);
    connection_ = nullptr;
    throw error;
  }
}

mariadb_client::~mariadb_client() {
  if (connection_) mysql_close(connection_);
}

mariadb_client::mariadb_client(mariadb_client&& other) noexcept
    : name_(std::move(other.name_)), connection_(std::exchange(other.connection_, nullptr)) {}

mariadb_client& mariadb_client::operator=(mariadb_client&& other) noexcept {
  if (this != &other) {
    if (connection_) mysql_close(connection_);
    name_ = std::move(other.name_);
    connection_ = std::exchange(other.connection_, nullptr);
  }
  return *this;
}

void mariadb_client::fail(const std::string& operation) const {
  throw mariadb_error(name_ + ": " + operation + " failed: " + mysql_error(connection_), mysql_errno(connection_));
}

std::vector<std::optional<std::string>> mariadb_client::query_column(const std::string& sql) {
  if (!connection_) throw mariadb_error(name_ + ": client is not connected", 0);
  if (mysql_real_query(connection_, sql.data(), sql.size()) != 0) fail("query");
  std::vector<std::optional<std::string>> column;
  for (;;) {
    MYSQL_RES* result = mysql_store_result(connection_);
    if (result) {
      column.clear();
      while (MYSQL_ROW row = mysql_fetch_row(result)) {
        unsigned long* lengths = mysql_fetch_lengths(result);
        if (mysql_num_fields(result) == 0 || !row[0]) {
          column.emplace_back();
        } else {
          column.emplace_back(std::string(row[0], lengths[0]));
        }
      }
      mysql_free_result(result);
    } else if (mysql_field_count(connection_) != 0) {
      fail("reading a result");  // a statement with a result set whose rows could not be read
    }
    int more = mysql_next_result(connection_);
    if (more < 0) break;
    if (more > 0) fail("query");  // a later statement of a multi-statement query failed
  }
  return column;
}

std::optional<std::string> mariadb_client::query_value(const std::string& sql) {
  auto column = query_column(sql);
  if (column.empty()) return std::nullopt;
  return column.front();
}

std::uint64_t mariadb_client::connection_id() const {
  if (!connection_) throw mariadb_error(name_ + ": client is not connected", 0);
  return mysql_thread_id(connection_);
}

bool mariadb_accepts_connections(const mariadb_login& login) {
  try {
    mariadb_client probe(login, std::chrono::seconds(2));
    return true;
  } catch (const client_error&) {
    return false;
  }
}

// ------------------------------------------------------------------------------------------- server

mariadb_server::mariadb_server(std::string name, std::filesystem::path dir, std::uint16_t port,
                               mariadb_options options)
    : server(std::move(name), std::move(dir), endpoint{"127.0.0.1", port}), options_(std::move(options)) {}

mariadb_login mariadb_server::login() const { return mariadb_login{client_endpoint()}; }

mariadb_login mariadb_server::ed25519_login() const {
  mariadb_login ed25519{client_endpoint()};
  ed25519.user = std::string(mariadb_ed25519_user);
  return ed25519;
}

std::vector<std::string> mariadb_server::storage_args() const {
  std::vector<std::string> args = {
      "--skip-name-resolve",
      "--plugin-load-add=auth_ed25519",
      "--character-set-server=utf8mb4",
      "--collation-server=utf8mb4_general_ci",
      "--innodb-buffer-pool-size=32M",
      "--innodb-log-file-size=16M",  // default 96M: writing it is most of the installation's time
  };
  if (!options_.durable) {
    args.insert(args.end(), {"--innodb-flush-log-at-trx-commit=2", "--innodb-doublewrite=0"});
  }
  return args;
}

void mariadb_server::before_launch() {
  if (running_as_root()) {
    // mariadbd runs as the mysql user, which must own the directory (and reach it: the lab makes its
    // temporary directory traversable).
    passwd entry{};
    passwd* user = nullptr;
    std::vector<char> buffer(16384);
    ::getpwnam_r(options_.os_user.c_str(), &entry, buffer.data(), buffer.size(), &user);
    if (!user) throw failure("user " + options_.os_user + " does not exist (is the mariadb-server package installed?)");
    if (::chown(dir().c_str(), user->pw_uid, user->pw_gid) != 0) {
      throw failure("chown " + dir().string() + " to " + options_.os_user + ": " + std::strerror(errno));
    }
    std::filesystem::permissions(dir(), std::filesystem::perms::owner_all);
  }
  // mariadb-install-db writes mysql_upgrade_info last, once every table and account exists.
  if (std::filesystem::exists(data_dir() / "mysql_upgrade_info")) return;
  std::filesystem::remove_all(data_dir());

  // The accounts and database, run by the bootstrap server after the system tables. Bootstrap runs
  // without grant tables; FLUSH PRIVILEGES loads them so CREATE USER works.
  auto accounts_sql = dir() / "accounts.sql";
  {
    std::ofstream out(accounts_sql, std::ios::trunc);
    out << "FLUSH PRIVILEGES;\n";
    auto native = sql_literal(mariadb_native_user) + "@'%'";
    auto ed25519 = sql_literal(mariadb_ed25519_user) + "@'%'";
    out << "CREATE USER " << native << " IDENTIFIED BY " << sql_literal(mariadb_password) << ";\n";
    out << "CREATE USER " << ed25519 << " IDENTIFIED VIA ed25519 USING PASSWORD(" << sql_literal(mariadb_password)
        << ");\n";
    out << "GRANT ALL PRIVILEGES ON *.* TO " << native << ";\n";
    out << "GRANT ALL PRIVILEGES ON *.* TO " << ed25519 << ";\n";
    out << "CREATE DATABASE `" << mariadb_database << "`;\n";
    out.close();
    if (!out) throw failure("cannot write " + accounts_sql.string());
  }
  spawn_options install;
  install.argv = {options_.install_program,
                  "--no-defaults",  // must come first: no /etc/mysql configuration
                  "--datadir=" + data_dir().string(),
                  "--auth-root-authentication-method=socket",
                  "--skip-test-db",
                  "--extra-file=" + accounts_sql.string()};
  for (auto& arg : storage_args()) install.argv.push_back(arg);  // passed on to the bootstrap server
  install.log_path = dir() / "install.log";
  install.working_dir = dir();
  if (running_as_root()) install.run_as_user = options_.os_user;
  child_process process;
  try {
    process = child_process::spawn(install);
  } catch (const process_error& error) {
    std::filesystem::remove(accounts_sql);
    throw failure(std::string("mariadb-install-db: ") + error.what());
  }
  auto status = process.wait_for_exit(std::chrono::seconds(120));
  std::error_code ignored;
  std::filesystem::remove(accounts_sql, ignored);  // it holds the password; the server does not need it
  if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    std::string how = status ? process.describe_exit() : "still running after 120 s";
    process.kill_group();
    throw failure("mariadb-install-db " + how + "\n--- " + (dir() / "install.log").string() + " ---\n" +
                  file_tail(dir() / "install.log", 20));
  }
}

spawn_options mariadb_server::launch_options() {
  spawn_options spawn;
  spawn.argv = {options_.server_program,
                "--no-defaults",  // must come first
                "--datadir=" + data_dir().string(),  // also puts the lab directory in its command line
                "--bind-address=" + client_endpoint().host,
                "--port=" + std::to_string(client_endpoint().port),
                // Relative to the data directory (mariadbd's working directory): no 107-byte limit
                // on the Unix socket's path, whatever TMPDIR is.
                "--socket=mariadbd.sock",
                "--pid-file=" + (dir() / "mariadbd.pid").string(),
                "--max-connections=" + std::to_string(options_.max_connections)};
  for (auto& arg : storage_args()) spawn.argv.push_back(arg);
  // Without --log-error the error log goes to stderr, i.e. server.log.
  spawn.log_path = log_path();
  spawn.working_dir = dir();
  if (running_as_root()) spawn.run_as_user = options_.os_user;
  return spawn;
}

void mariadb_server::wipe_data() { std::filesystem::remove_all(data_dir()); }

bool mariadb_server::probe() { return !paused() && mariadb_accepts_connections(login()); }

std::string mariadb_server::role() { return probe() ? "standalone" : ""; }

void mariadb_server::kill_connection(std::uint64_t connection_id) {
  client().execute("KILL CONNECTION " + std::to_string(connection_id));
}

}  // namespace dlock::lab
