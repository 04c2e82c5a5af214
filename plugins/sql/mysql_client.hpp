// mysql_client.hpp — the MySQL/MariaDB side of the `sql` backend's client: settings read from a
// mysql:// or mariadb:// DSN, one server connection (MariaDB Connector/C, prepared statements), the
// pool of them, and the classification of the server's and the library's errors into dlock statuses.
//
// Errors are thrown as sql::failure {status, message}. Messages name the backend and the server
// ("mysql 127.0.0.1:3306/dlock"), never the password, and say what to do.
#pragma once

#include "sql_shared.hpp"

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

struct st_mysql;
struct st_mysql_stmt;

namespace dlock::sql::mysql {

// True for a DSN the MySQL dialect reads: mysql://… or mariadb://… (any letter case).
bool is_mysql_dsn(const std::string& dsn);

// What the plugin's options say, for the MySQL dialect.
struct settings {
    std::string host = "localhost";  // Connector/C: `localhost` means the default unix socket
    unsigned port = 3306;
    std::string user, password, database;
    std::string socket;                                 // ?socket=/path
    std::string sslmode, sslrootcert, sslcert, sslkey;  // libpq words, mapped to Connector/C's
    lock_mode mode = lock_mode::lease;                  // advisory: the named-lock mode (GET_LOCK)
    std::string database_qualifier;                     // the `schema` option when set: tables live there
    std::string table = "dlock_locks";
    int64_t statement_timeout_ms = 5000;
    int64_t peer_timeout_ms = 10000;
    size_t pool_size = 32;
    std::string server;  // "127.0.0.1:3306/dlock", as messages name it

    int64_t client_limit_ms() const { return statement_timeout_ms + std::max<int64_t>(statement_timeout_ms / 4, 100); }
    // How long the server lets a session sit idle inside a transaction before it ends the session
    // (and rolls the transaction back): statement_timeout in whole seconds, at least 1. A healthy
    // client is idle between the statements of its transaction for microseconds; a stalled one (a
    // stopped process, a dead host) would otherwise keep the transaction's row locks for as long as
    // TCP keeps the session (hours).
    int64_t idle_transaction_limit_s() const { return std::max<int64_t>((statement_timeout_ms + 999) / 1000, 1); }
};

// Reads `dsn` (mysql://user:password@host:port/database?sslmode=…) into `s`; percent-escapes are
// decoded. Throws failure(DLOCK_CONFIG) naming what is wrong, never quoting the password.
void parse_dsn(const std::string& dsn, settings& s);

// A parameter of a prepared statement: bytes (sent as a binary string, so names are never
// converted or interpreted) or an integer.
struct param {
    param(std::string text) : is_text(true), text(std::move(text)) {}
    param(const char* text) : is_text(true), text(text) {}
    param(int64_t value) : is_text(false), integer(value) {}
    param(int value) : is_text(false), integer(value) {}
    bool is_text;
    std::string text;
    int64_t integer = 0;
};

// What a statement returned: its rows (every value as text, NULL as nullopt), the rows it changed
// and LAST_INSERT_ID(expr) as the statement set it.
struct result {
    std::vector<std::vector<std::optional<std::string>>> rows;
    uint64_t affected = 0;
    uint64_t insert_id = 0;
};

// A statement failed. `code` is the server's or the library's error number (1045 access denied,
// 2013 lost connection, …), `lost` true when the connection is gone.
struct error {
    unsigned code;
    std::string sqlstate;
    std::string message;
    bool lost;
};

// The status and message for `e` met during `what`. `maybe_executed`: the statement may have reached
// the server, so a lost connection leaves its outcome unknown (DLOCK_UNKNOWN).
failure classify(const settings& s, const error& e, const std::string& what, bool maybe_executed);

// One server connection (autocommit, utf8mb4, no automatic reconnection: a reconnected session
// would silently have lost its named locks) with its prepared statements, prepared on first use.
// Used by one thread at a time. Statements are bounded by the deadline_watch: a socket still
// waiting at its deadline is shut down and the call fails as on a lost connection.
class connection {
public:
    // Connects by `deadline_ns` (Connector/C's non-blocking API under poll), then sets the session
    // up. Throws failure (classified).
    connection(const settings& s, const std::vector<std::pair<std::string, std::string>>& statements,
               deadline_watch* watch, int64_t deadline_ns);
    ~connection();
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    // Runs a prepared statement. Throws error.
    result run(const std::string& statement, const std::vector<param>& params, int64_t deadline_ns = INT64_MAX);
    // Runs SQL text (setup only). Throws error.
    result query(const std::string& sql, int64_t deadline_ns = INT64_MAX);
    // A transaction whose session the server ends when it sits idle in it for
    // settings::idle_transaction_limit_s(). MariaDB: the session's idle_transaction_timeout and its
    // idle_readonly_/idle_write_ variants (all set at connect) do it, and these are START
    // TRANSACTION, COMMIT and ROLLBACK. MySQL, which has no such limit: begin() lowers the session's wait_timeout to it first, and commit()/rollback() raise it
    // again afterwards (two more round trips). Throw error; after one, end the connection.
    void begin(int64_t deadline_ns);
    void commit(int64_t deadline_ns);
    void rollback(int64_t deadline_ns);

    int socket() const;
    uint64_t id() const { return id_; }  // the session id KILL CONNECTION and CONNECTION_ID() use
    const std::string& server_version() const { return version_; }
    bool is_mariadb() const { return version_.find("MariaDB") != std::string::npos; }
    // Without blocking: false when the server has ended the session (it sends nothing unasked).
    bool alive() const;
    void mark_broken() { broken_ = true; }
    bool broken() const { return broken_; }

private:
    template <typename F>
    auto bounded(int64_t deadline_ns, F&& body) -> decltype(body());
    [[noreturn]] void fail_with(st_mysql_stmt* stmt);

    const settings& settings_;
    const std::vector<std::pair<std::string, std::string>>& statements_;
    deadline_watch* watch_;
    st_mysql* mysql_ = nullptr;
    std::map<std::string, st_mysql_stmt*> prepared_;
    uint64_t id_ = 0;
    std::string version_;
    bool broken_ = false;
};

// MySQL connections in a connection_pool (sql_shared.hpp). A new connection must be ready within
// client_limit_ms(); an idle one the server has ended is dropped, not handed out. During the
// backoff after a failed connect, a borrow fails with that connect's failure.
struct connections {
    using connection = mysql::connection;
    using config = settings;
    static std::unique_ptr<connection> connect(const settings& s, const std::vector<std::pair<std::string, std::string>>& statements,
                                               deadline_watch& watch, int64_t borrow_deadline_ns);
    static bool alive(connection& c) { return c.alive(); }
    static bool reusable(connection& c) { return !c.broken(); }
    static failure backing_off(const failure& last_connect, int64_t) { return last_connect; }
    static std::string all_busy(const settings& s);
};
using pool = connection_pool<connections>;

}  // namespace dlock::sql::mysql
