// mysql_client.hpp — the MySQL/MariaDB side of the `sql` backend's client: settings read from a
// mysql:// or mariadb:// DSN, one server connection (MariaDB Connector/C, prepared statements), the
// pool of them, and the classification of the server's and the library's errors into dlock statuses.
//
// Errors are thrown as sql::failure {status, message}. Messages name the backend and the server
// ("mysql 127.0.0.1:3306/dlock"), never the password, and say what to do.
#pragma once

#include "sql_common.hpp"

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

// Connections shared by threads, at most settings.pool_size open (idle, busy, or — named mode —
// keeping a held lock). An idle connection the server has ended is dropped, not handed out. After a
// failed connect, new connects wait out a growing backoff (10 ms doubling to 1 s).
class pool {
public:
    pool(const settings& s, std::vector<std::pair<std::string, std::string>> statements);
    ~pool();
    deadline_watch& watch() { return watch_; }

    class lease {
    public:
        lease() = default;
        lease(pool* p, std::unique_ptr<connection> c) : pool_(p), connection_(std::move(c)) {}
        lease(lease&&) = default;
        lease& operator=(lease&&) = delete;
        ~lease() {
            if (connection_) pool_->give_back(std::move(connection_));
        }
        connection* operator->() { return connection_.get(); }
        connection& operator*() { return *connection_; }
        std::unique_ptr<connection> detach() { return std::move(connection_); }

    private:
        pool* pool_ = nullptr;
        std::unique_ptr<connection> connection_;
    };

    // A usable connection, waiting for a free slot until `deadline_ns` (then DLOCK_UNAVAILABLE), or
    // the connect's failure. `cancellable`: interrupt() ends the wait with DLOCK_CANCELLED.
    lease borrow(int64_t deadline_ns, bool cancellable = false);
    void give_back(std::unique_ptr<connection> c);  // closes it if broken
    void interrupt();

private:
    settings settings_;
    std::vector<std::pair<std::string, std::string>> statements_;
    deadline_watch watch_;  // outlives the connections it watches
    std::mutex mutex_;
    std::condition_variable available_;
    std::vector<std::unique_ptr<connection>> idle_;
    size_t open_ = 0;
    int64_t retry_after_ns_ = 0;
    int64_t backoff_ms_ = 0;
    failure last_connect_failure_{DLOCK_UNAVAILABLE, ""};
    bool interrupted_ = false;
};

}  // namespace dlock::sql::mysql
