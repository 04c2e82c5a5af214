// MySQL/MariaDB settings, connections, prepared statements, the pool and error classification.
#include "mysql_client.hpp"

#include <fmt/format.h>
#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

namespace dlock::sql::mysql {

namespace {

std::string lower(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return text;
}

// Connector/C initialises itself on first use, which is not thread-safe.
void initialise_library() {
    static std::once_flag once;
    std::call_once(once, [] { mysql_library_init(0, nullptr, nullptr); });
}

// wait_timeout outside transactions: a year, so that an idle session keeping a named lock is never
// closed by the server's idle limit.
constexpr int64_t idle_session_limit_s = 31536000;

bool is_lost(unsigned code) {
    return code == CR_SERVER_GONE_ERROR || code == CR_SERVER_LOST || code == CR_CONN_HOST_ERROR ||
           code == CR_CONNECTION_ERROR || code == CR_SERVER_LOST_EXTENDED || code == ER_CONNECTION_KILLED ||
           code == ER_SERVER_SHUTDOWN || code == ER_NEW_ABORTING_CONNECTION || code == CR_COMMANDS_OUT_OF_SYNC;
}

// Keepalives on the connection's socket, so a silent peer is noticed within peer_timeout (Connector/C
// sets none): idle + count * interval stays below it, and TCP_USER_TIMEOUT bounds unacknowledged data.
void set_keepalive(int fd, int64_t peer_timeout_ms) {
    const int peer_s = int(std::max<int64_t>(peer_timeout_ms / 1000, 3));
    const int on = 1, idle = std::max(peer_s / 3, 1), interval = std::max(peer_s / 6, 1), count = 2;
    const unsigned user_timeout = unsigned(peer_timeout_ms);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
}

}  // namespace

failure classify(const settings& s, const error& e, const std::string& what, bool maybe_executed) {
    const std::string at = fmt::format("sql backend: mysql {}", s.server);
    if (e.lost) {
        if (maybe_executed)
            return {DLOCK_UNKNOWN, fmt::format("{}: the connection was lost during {} ({}); its outcome is unknown", at, what, e.message)};
        return {DLOCK_UNAVAILABLE, fmt::format("{}: the connection was lost before {} ({}); retry", at, what, e.message)};
    }
    switch (e.code) {
        case ER_OPTION_PREVENTS_STATEMENT:
        case ER_READ_ONLY_MODE:
            return {DLOCK_BACKEND, fmt::format("{}: the server is read-only ({}) and refused {}: dlock must write its lock "
                                               "rows; point `dsn` at the writable primary, or SET GLOBAL read_only = 0",
                                               at, e.message, what)};
        case ER_TABLEACCESS_DENIED_ERROR:
        case ER_COLUMNACCESS_DENIED_ERROR:
        case ER_DBACCESS_DENIED_ERROR:
        case ER_SPECIFIC_ACCESS_DENIED_ERROR:
        case ER_PROCACCESS_DENIED_ERROR:
            return {DLOCK_BACKEND, fmt::format("{}: the user lacks a privilege ({}) for {}: grant it SELECT, INSERT, UPDATE "
                                               "and CREATE on the database of dlock's tables",
                                               at, e.message, what)};
        case ER_STATEMENT_TIMEOUT:
            return {DLOCK_UNAVAILABLE, fmt::format("{}: {} ran longer than statement_timeout ({} ms) and was cancelled by the "
                                                   "server; retry",
                                                   at, what, s.statement_timeout_ms)};
        case ER_LOCK_WAIT_TIMEOUT:
        case ER_LOCK_DEADLOCK:
            return {DLOCK_UNAVAILABLE, fmt::format("{}: {} met a row lock: {}; retry", at, what, e.message)};
        default: break;
    }
    return {DLOCK_BACKEND, fmt::format("{}: {} failed: {} (error {}, SQLSTATE {})", at, what, e.message, e.code, e.sqlstate)};
}

// ---- connection ---------------------------------------------------------------------------------

connection::connection(const settings& s, const std::vector<std::pair<std::string, std::string>>& statements,
                       deadline_watch* watch, int64_t deadline_ns)
    : settings_(s), statements_(statements), watch_(watch) {
    initialise_library();
    mysql_ = mysql_init(nullptr);
    if (!mysql_) throw std::bad_alloc();
    const std::string at = fmt::format("sql backend: mysql {}", s.server);
    const bool no_reconnect = false;
    mysql_optionsv(mysql_, MYSQL_OPT_RECONNECT, &no_reconnect);
    mysql_optionsv(mysql_, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    mysql_optionsv(mysql_, MYSQL_OPT_NONBLOCK, 0);
    const std::string ssl = lower(s.sslmode);
    if (!ssl.empty() && ssl != "disable" && ssl != "disabled") {
        const bool on = true;
        const bool verify = ssl != "require" && ssl != "required";
        mysql_optionsv(mysql_, MYSQL_OPT_SSL_ENFORCE, &on);
        mysql_optionsv(mysql_, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify);
        if (!s.sslrootcert.empty()) mysql_optionsv(mysql_, MYSQL_OPT_SSL_CA, s.sslrootcert.c_str());
        if (!s.sslcert.empty()) mysql_optionsv(mysql_, MYSQL_OPT_SSL_CERT, s.sslcert.c_str());
        if (!s.sslkey.empty()) mysql_optionsv(mysql_, MYSQL_OPT_SSL_KEY, s.sslkey.c_str());
    }
    // The connect runs under poll() until `deadline_ns`: Connector/C's own timeouts count whole
    // seconds and would bound the handshake's reads only together with every later read.
    MYSQL* connected = nullptr;
    int status = mysql_real_connect_start(&connected, mysql_, s.host.c_str(), s.user.c_str(), s.password.c_str(),
                                          s.database.empty() ? nullptr : s.database.c_str(), s.port,
                                          s.socket.empty() ? nullptr : s.socket.c_str(), 0);
    while (status) {
        const int64_t left_ns = deadline_ns - now_ns();
        if (left_ns <= 0) {
            if (mysql_get_socket(mysql_) >= 0) ::shutdown(mysql_get_socket(mysql_), SHUT_RDWR);
            mysql_close(mysql_);
            mysql_ = nullptr;
            fail(DLOCK_UNAVAILABLE, fmt::format("{} did not answer the connection attempt within {} ms; the server or the "
                                                "network path to it is not answering; retry",
                                                at, s.client_limit_ms()));
        }
        pollfd p{mysql_get_socket(mysql_), 0, 0};
        if (status & MYSQL_WAIT_READ) p.events |= POLLIN;
        if (status & MYSQL_WAIT_WRITE) p.events |= POLLOUT;
        if (status & MYSQL_WAIT_EXCEPT) p.events |= POLLPRI;
        int wait_ms = int(std::min<int64_t>((left_ns + 999'999) / 1'000'000, INT_MAX));
        if (status & MYSQL_WAIT_TIMEOUT) wait_ms = std::min<int>(wait_ms, int(mysql_get_timeout_value_ms(mysql_)));
        const int ready = ::poll(&p, 1, wait_ms);
        if (ready < 0 && errno == EINTR) continue;
        int happened = 0;
        if (ready > 0) {
            if (p.revents & (POLLIN | POLLHUP | POLLERR)) happened |= MYSQL_WAIT_READ;
            if (p.revents & (POLLOUT | POLLERR)) happened |= MYSQL_WAIT_WRITE;
            if (p.revents & POLLPRI) happened |= MYSQL_WAIT_EXCEPT;
        } else if (ready == 0) {
            happened = MYSQL_WAIT_TIMEOUT;
        }
        status = mysql_real_connect_cont(&connected, mysql_, happened);
    }
    if (!connected) {
        const error e{mysql_errno(mysql_), mysql_sqlstate(mysql_), mysql_error(mysql_), false};
        mysql_close(mysql_);
        mysql_ = nullptr;
        if (e.code == ER_ACCESS_DENIED_ERROR || e.code == ER_DBACCESS_DENIED_ERROR || e.code == ER_BAD_DB_ERROR ||
            e.code == CR_AUTH_PLUGIN_CANNOT_LOAD || e.code == ER_NOT_SUPPORTED_AUTH_MODE || e.code == ER_PASSWORD_NO_MATCH)
            fail(DLOCK_CONFIG, fmt::format("{} refused the connection: {} (error {}); check the user, password and database "
                                           "in `dsn`",
                                           at, e.message, e.code));
        if (e.code == CR_SSL_CONNECTION_ERROR)
            fail(DLOCK_CONFIG, fmt::format("{}: TLS failed: {}; check `sslmode` and the certificates (or that the server "
                                           "offers TLS)",
                                           at, e.message));
        fail(DLOCK_UNAVAILABLE, fmt::format("{}: cannot connect: {} (error {}); check that the server runs and `dsn` names "
                                            "it",
                                            at, e.message, e.code));
    }
    // Connector/C 3.3 with MYSQL_OPT_SSL_ENFORCE but without certificate verification falls back to
    // plain text when the server offers no TLS: whether TLS is in use is checked here, for every mode.
    if (!ssl.empty() && ssl != "disable" && ssl != "disabled" && !mysql_get_ssl_cipher(mysql_)) {
        ::shutdown(mysql_get_socket(mysql_), SHUT_RDWR);
        mysql_close(mysql_);
        mysql_ = nullptr;
        fail(DLOCK_CONFIG, fmt::format("{}: TLS failed: `sslmode: {}` requires TLS, but the server did not offer it "
                                       "(its have_ssl is not YES); enable TLS on the server or check `sslmode`",
                                       at, s.sslmode));
    }
    if (s.socket.empty() && s.host != "localhost") set_keepalive(mysql_get_socket(mysql_), s.peer_timeout_ms);
    id_ = mysql_thread_id(mysql_);
    version_ = mysql_get_server_info(mysql_);
    try {
        // Server-side limits: MariaDB's max_statement_time cancels a lease-mode statement itself
        // (named-mode statements wait in GET_LOCK and have none); wait_timeout is raised so an idle
        // connection keeping a named lock is never closed by the server's idle limit, while a session
        // idle inside a transaction is ended (see begin()). autocommit is pinned: every statement
        // outside begin()…commit() is its own transaction, whatever the server's default (a session
        // left inside an implicit transaction would keep its row locks, and be ended as idle in it).
        // Lease mode: a row-lock wait ends after the same bound B as an idle transaction
        // (innodb_lock_wait_timeout, 50 s by default; on MySQL nothing else cuts a wait whose client
        // is gone), so a stalled acquire's queued statements cannot keep slot 0 past it either.
        // MariaDB: idle_transaction_timeout = B, and its idle_readonly_ / idle_write_transaction_timeout
        // = B too — when above 0 they decide instead of it, and a session starts with their global
        // values, which a DBA may have set; B in all three keeps the bound B whichever one the server
        // consults (0 would rely on the order of precedence between them).
        const int64_t b = s.idle_transaction_limit_s();
        std::string setup = fmt::format("SET SESSION wait_timeout = {}, SESSION time_zone = '+00:00', SESSION autocommit = 1",
                                        idle_session_limit_s);
        if (s.mode == lock_mode::lease) setup += fmt::format(", SESSION innodb_lock_wait_timeout = {}", b);
        if (is_mariadb())
            setup += fmt::format(", SESSION max_statement_time = {}, SESSION idle_transaction_timeout = {}, "
                                 "SESSION idle_readonly_transaction_timeout = {}, SESSION idle_write_transaction_timeout = {}",
                                 s.mode == lock_mode::lease ? double(s.statement_timeout_ms) / 1000.0 : 0.0, b, b, b);
        query(setup, deadline_ns);
    } catch (const error& e) {
        mysql_close(mysql_);
        mysql_ = nullptr;
        throw classify(s, e, "setting up the session", false);
    }
}

connection::~connection() {
    for (auto& [name, stmt] : prepared_) mysql_stmt_close(stmt);
    if (mysql_) {
        if (broken_) ::shutdown(mysql_get_socket(mysql_), SHUT_RDWR);  // no COM_QUIT to a server that may not answer
        mysql_close(mysql_);
    }
}

int connection::socket() const { return mysql_get_socket(mysql_); }

void connection::begin(int64_t deadline_ns) {
    if (!is_mariadb()) query(fmt::format("SET SESSION wait_timeout = {}", settings_.idle_transaction_limit_s()), deadline_ns);
    query("START TRANSACTION", deadline_ns);
}

void connection::commit(int64_t deadline_ns) {
    query("COMMIT", deadline_ns);
    if (!is_mariadb()) query(fmt::format("SET SESSION wait_timeout = {}", idle_session_limit_s), deadline_ns);
}

void connection::rollback(int64_t deadline_ns) {
    query("ROLLBACK", deadline_ns);
    if (!is_mariadb()) query(fmt::format("SET SESSION wait_timeout = {}", idle_session_limit_s), deadline_ns);
}

bool connection::alive() const {
    if (broken_) return false;
    pollfd p{socket(), POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) == 0;  // anything readable on an idle session is its end
}

template <typename F>
auto connection::bounded(int64_t deadline_ns, F&& body) -> decltype(body()) {
    if (!watch_ || deadline_ns == INT64_MAX) return body();
    const uint64_t ticket = watch_->arm(socket(), deadline_ns);
    try {
        auto r = body();
        if (watch_->disarm(ticket)) broken_ = true;
        return r;
    } catch (error& e) {
        if (watch_->disarm(ticket)) {
            broken_ = true;
            e.lost = true;
            e.message = "no answer before the client's deadline (statement_timeout + 1/4)";
        }
        throw;
    }
}

void connection::fail_with(st_mysql_stmt* stmt) {
    // An error that ends a result set while its rows are fetched (MariaDB's max_statement_time
    // cutting a locking read that waited for a row lock after the result's metadata went out) is
    // the connection's, not the statement's: Connector/C leaves mysql_stmt_errno() 0 then.
    error e = stmt && mysql_stmt_errno(stmt) != 0 ? error{mysql_stmt_errno(stmt), mysql_stmt_sqlstate(stmt), mysql_stmt_error(stmt), false}
                                                  : error{mysql_errno(mysql_), mysql_sqlstate(mysql_), mysql_error(mysql_), false};
    // MySQL 8.0.24+ sends error 4031 (ER_CLIENT_INTERACTION_TIMEOUT) before it closes a session idle
    // past wait_timeout; on MariaDB 4031 is another error (a trigger's).
    e.lost = is_lost(e.code) || (e.code == 4031 && !is_mariadb());
    if (e.lost) broken_ = true;
    throw e;
}

result connection::query(const std::string& sql, int64_t deadline_ns) {
    return bounded(deadline_ns, [&] {
        result r;
        if (mysql_real_query(mysql_, sql.data(), sql.size()) != 0) fail_with(nullptr);
        MYSQL_RES* rows = mysql_store_result(mysql_);
        if (rows) {
            const unsigned n = mysql_num_fields(rows);
            while (MYSQL_ROW row = mysql_fetch_row(rows)) {
                unsigned long* lengths = mysql_fetch_lengths(rows);
                std::vector<std::optional<std::string>> values;
                for (unsigned i = 0; i < n; ++i)
                    values.push_back(row[i] ? std::optional<std::string>(std::string(row[i], lengths[i])) : std::nullopt);
                r.rows.push_back(std::move(values));
            }
            mysql_free_result(rows);
        } else if (mysql_field_count(mysql_) != 0) {
            fail_with(nullptr);
        }
        r.affected = mysql_affected_rows(mysql_);
        r.insert_id = mysql_insert_id(mysql_);
        return r;
    });
}

result connection::run(const std::string& statement, const std::vector<param>& params, int64_t deadline_ns) {
    return bounded(deadline_ns, [&] {
        MYSQL_STMT*& stmt = prepared_[statement];
        if (!stmt) {
            const auto it = std::find_if(statements_.begin(), statements_.end(), [&](const auto& p) { return p.first == statement; });
            if (it == statements_.end()) throw std::logic_error("sql backend: no statement " + statement);
            stmt = mysql_stmt_init(mysql_);
            if (!stmt) fail_with(nullptr);
            if (mysql_stmt_prepare(stmt, it->second.data(), it->second.size()) != 0) {
                MYSQL_STMT* failed = stmt;
                stmt = nullptr;
                try {
                    fail_with(failed);
                } catch (...) {
                    mysql_stmt_close(failed);
                    prepared_.erase(statement);
                    throw;
                }
            }
        }
        std::vector<MYSQL_BIND> binds(params.size());
        std::vector<unsigned long> lengths(params.size());
        for (size_t i = 0; i < params.size(); ++i) {
            MYSQL_BIND& b = binds[i];
            std::memset(&b, 0, sizeof b);
            if (params[i].is_text) {
                b.buffer_type = MYSQL_TYPE_BLOB;  // bytes: never converted between character sets
                b.buffer = const_cast<char*>(params[i].text.data());
                lengths[i] = params[i].text.size();
                b.buffer_length = lengths[i];
                b.length = &lengths[i];
            } else {
                b.buffer_type = MYSQL_TYPE_LONGLONG;
                b.buffer = const_cast<int64_t*>(&params[i].integer);
            }
        }
        if (!binds.empty() && mysql_stmt_bind_param(stmt, binds.data()) != 0) fail_with(stmt);
        if (mysql_stmt_execute(stmt) != 0) fail_with(stmt);
        result r;
        r.affected = mysql_stmt_affected_rows(stmt);
        r.insert_id = mysql_stmt_insert_id(stmt);
        const unsigned n = mysql_stmt_field_count(stmt);
        if (n == 0) return r;
        std::vector<MYSQL_BIND> out(n);
        std::vector<std::string> buffers(n, std::string(256, '\0'));
        std::vector<unsigned long> sizes(n);
        std::vector<my_bool> nulls(n);
        for (unsigned i = 0; i < n; ++i) {
            std::memset(&out[i], 0, sizeof out[i]);
            out[i].buffer_type = MYSQL_TYPE_STRING;
            out[i].buffer = buffers[i].data();
            out[i].buffer_length = buffers[i].size();
            out[i].length = &sizes[i];
            out[i].is_null = &nulls[i];
        }
        if (mysql_stmt_bind_result(stmt, out.data()) != 0) fail_with(stmt);
        for (;;) {
            const int fetched = mysql_stmt_fetch(stmt);
            if (fetched == MYSQL_NO_DATA) break;
            if (fetched == 1) {
                try {
                    fail_with(stmt);
                } catch (...) {
                    mysql_stmt_free_result(stmt);
                    throw;
                }
            }
            std::vector<std::optional<std::string>> row;
            for (unsigned i = 0; i < n; ++i) {
                if (nulls[i]) {
                    row.emplace_back(std::nullopt);
                } else if (sizes[i] > buffers[i].size()) {  // MYSQL_DATA_TRUNCATED: fetch the whole value
                    std::string whole(sizes[i], '\0');
                    MYSQL_BIND one;
                    std::memset(&one, 0, sizeof one);
                    one.buffer_type = MYSQL_TYPE_STRING;
                    one.buffer = whole.data();
                    one.buffer_length = whole.size();
                    mysql_stmt_fetch_column(stmt, &one, i, 0);
                    row.emplace_back(std::move(whole));
                } else {
                    row.emplace_back(std::string(buffers[i].data(), sizes[i]));
                }
            }
            r.rows.push_back(std::move(row));
        }
        mysql_stmt_free_result(stmt);
        return r;
    });
}

// ---- pool ---------------------------------------------------------------------------------------

std::unique_ptr<connection> connections::connect(const settings& s, const std::vector<std::pair<std::string, std::string>>& statements,
                                                 deadline_watch& watch, int64_t) {
    return std::make_unique<connection>(s, statements, &watch, now_ns() + s.client_limit_ms() * 1'000'000);
}

std::string connections::all_busy(const settings& s) {
    return fmt::format("sql backend: mysql {}: all {} connections of the pool are busy (pool_size); raise pool_size or "
                       "hold fewer named locks at once",
                       s.server, s.pool_size);
}

}  // namespace dlock::sql::mysql
