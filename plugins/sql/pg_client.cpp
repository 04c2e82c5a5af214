// The PostgreSQL client (pg_client.hpp): settings, connection strings, errors, sessions, the pool,
// the LISTEN connection and the monitor.
#include "pg_client.hpp"
#include "sql_statements.hpp"

#include "tls_probe.hpp"

#include <fmt/format.h>
#include <libpq-fe.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <iterator>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

namespace dlock::sql {

namespace {

// One line of a libpq/libpqxx message: tabs and newlines folded, trailing blanks dropped.
std::string one_line(std::string text) {
    for (char& c : text)
        if (c == '\n' || c == '\t' || c == '\r') c = ' ';
    std::string out;
    for (char c : text)
        if (!(c == ' ' && !out.empty() && out.back() == ' ')) out += c;
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
}

std::string conninfo_quote(const std::string& value) {
    std::string out = "'";
    for (char c : value) {
        if (c == '\\' || c == '\'') out += '\\';
        out += c;
    }
    return out + "'";
}

bool contains(const std::string& text, const char* fragment) { return text.find(fragment) != std::string::npos; }

// eventfd used to wake a thread blocked in poll().
int make_wake_fd() {
    const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) fail(DLOCK_INTERNAL, fmt::format("sql backend: eventfd failed: {}", std::strerror(errno)));
    return fd;
}

void signal_fd(int fd) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);
}

void drain_fd(int fd) {
    uint64_t value;
    [[maybe_unused]] ssize_t n = ::read(fd, &value, sizeof value);
}

// `allowed_ms`: how long the attempt was given (the call's deadline, at least 250 ms; without one,
// statement_timeout + 1/4, at least 5 s), which an unanswered attempt's message states.
failure classify_connect_error(const settings& s, const std::exception& e, int64_t allowed_ms) {
    const std::string why = one_line(e.what());
    if (dynamic_cast<const no_answer*>(&e))
        return {DLOCK_UNAVAILABLE, fmt::format("sql backend: postgres {} did not answer the connection attempt within {} ms "
                                               "(the call's deadline, at least 250 ms; without one statement_timeout + 1/4, "
                                               "at least 5 s); the server or the network path to it is not answering; retry",
                                               s.server, allowed_ms)};
    if (contains(why, "authentication failed") || contains(why, "password") || contains(why, "no pg_hba.conf entry") ||
        (contains(why, "does not exist") && (contains(why, "role") || contains(why, "database"))))
        return {DLOCK_CONFIG, fmt::format("sql backend: postgres {} refused the connection: {}; check the user, password and "
                                          "database in `dsn`", s.server, why)};
    if (contains(why, "certificate verify failed")) {
        // libpq says no more than that: ask the server's certificate why (tls_probe.hpp).
        std::string ca_pem;
        if (!s.sslrootcert.empty()) {
            std::ifstream in(s.sslrootcert);
            ca_pem.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        }
        const std::string reason = s.port.empty() || s.port.find_first_not_of("0123456789") != std::string::npos ? std::string()
            : tls_probe::server_certificate_problem(s.host, uint16_t(std::stoi(s.port)), s.sslmode == "verify-full", ca_pem,
                                                    tls_probe::preamble::postgres, 2000);
        return {DLOCK_UNAVAILABLE, fmt::format("sql backend: cannot connect to postgres {}: {}; {}", s.server, why,
                                               reason.empty() ? "check `sslrootcert` and that the server's certificate names the "
                                                                "host in `dsn`" : reason)};
    }
    return {DLOCK_UNAVAILABLE, fmt::format("sql backend: cannot connect to postgres {}: {}; check that the server runs and "
                                           "`dsn` names it", s.server, why)};
}

}  // namespace

deadline_connect::handle deadline_connect::do_startconnect(handle orig) {
    if (orig) return orig;
    PGconn* c = PQconnectStart(options().c_str());
    if (!c) throw std::bad_alloc();
    PostgresPollingStatusType state = PGRES_POLLING_WRITING;
    while (state != PGRES_POLLING_OK) {
        if (state == PGRES_POLLING_FAILED || PQstatus(c) == CONNECTION_BAD) {
            const std::string why = PQerrorMessage(c);
            PQfinish(c);
            throw pqxx::broken_connection(why);
        }
        const int64_t left_ns = deadline_ns_ - now_ns();
        pollfd p{PQsocket(c), short(state == PGRES_POLLING_READING ? POLLIN : POLLOUT), 0};
        const int ready = left_ns <= 0 ? 0 : ::poll(&p, 1, int(std::min<int64_t>((left_ns + 999'999) / 1'000'000, INT_MAX)));
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0) {
            PQfinish(c);
            throw no_answer("no answer to the connection attempt before the client's deadline");
        }
        state = PQconnectPoll(c);  // also after a poll() error: libpq reports it
    }
    raw_ = c;
    return c;
}

bounded_connection::bounded_connection(const std::string& conninfo, int64_t deadline_ns)
    : pqxx::connection_base(policy_), policy_(conninfo, deadline_ns) {
    init();
}

std::unique_ptr<bounded_connection> connect_until(const settings& s, int64_t deadline_ns, PGconn** raw) {
    std::unique_ptr<bounded_connection> c;
    {
        libpqxx_call_scope scope;
        c = std::make_unique<bounded_connection>(s.conninfo, deadline_ns);
    }
    if (raw) *raw = c->raw();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    c->inhibit_reactivation(true);
#pragma GCC diagnostic pop
    return c;
}

void check_server_version(const settings& s, int server_version_num) {
    if (server_version_num >= 110000) return;
    // server_version_num: major * 10000 + minor from version 10 on, major * 10000 + minor * 100 + patch before.
    const std::string version = server_version_num >= 100000
                                    ? fmt::format("{}.{}", server_version_num / 10000, server_version_num % 10000)
                                    : fmt::format("{}.{}.{}", server_version_num / 10000, server_version_num / 100 % 100,
                                                  server_version_num % 100);
    fail(DLOCK_BACKEND, fmt::format("sql backend: postgres {} is version {}; dlock needs PostgreSQL 11 or newer",
                                    s.server, version));
}

std::string session_setup_sql(const settings& s, int server_version_num) {
    const auto user_sets = [&](const char* name) { return s.user_options.find(name) != std::string::npos; };
    const int64_t server_peer_ms = 2 * std::max<int64_t>(s.peer_timeout_ms / 1000, 3) * 1000;
    std::string sql;
    if (server_version_num >= 120000 && !user_sets("tcp_user_timeout"))
        sql += fmt::format("SET tcp_user_timeout = {}; ", server_peer_ms);
    // Queue sessions: always 0 here, whatever the DSN says; the statements that take and leave a
    // place in a turnstile set it (statements::queue_idle_ms), so it is dlock's own value while the
    // session holds a place and none while it is idle in its pool.
    if (server_version_num >= 140000 && (s.queue_sessions || !user_sets("idle_session_timeout")))
        sql += "SET idle_session_timeout = 0; ";
    return sql;
}

std::string redact_conninfo_error(const std::string& message) {
    std::string out;
    size_t i = 0;
    while (i < message.size()) {
        const size_t open = message.find('"', i);
        const size_t close = open == std::string::npos ? std::string::npos : message.find('"', open + 1);
        if (close == std::string::npos) {
            out += message.substr(i);
            break;
        }
        const size_t length = close - open - 1;
        out += message.substr(i, open - i + 1);
        out += length == 1 ? message.substr(open + 1, 1) : std::string("...");
        out += '"';
        i = close + 1;
    }
    return out;
}

std::string quote_identifier(const std::string& identifier) {
    std::string out = "\"";
    for (char c : identifier) {
        if (c == '"') out += '"';
        out += c;
    }
    return out + "\"";
}

void resolve(settings& s) {
    std::vector<std::pair<std::string, std::string>> params;
    auto set = [&](const std::string& key, const std::string& value) {
        for (auto& p : params)
            if (p.first == key) { p.second = value; return; }
        params.emplace_back(key, value);
    };
    auto get = [&](const std::string& key) -> std::string {
        for (auto& p : params)
            if (p.first == key) return p.second;
        return "";
    };
    // Client-side detection of a dead peer within peer_timeout: idle + count * interval < timeout.
    const int64_t peer_s = std::max<int64_t>(s.peer_timeout_ms / 1000, 3);
    set("application_name", "dlock");
    set("connect_timeout", "5");
    set("keepalives", "1");
    set("keepalives_idle", std::to_string(std::max<int64_t>(peer_s / 3, 1)));
    set("keepalives_interval", std::to_string(std::max<int64_t>(peer_s / 6, 1)));
    set("keepalives_count", "2");
    set("tcp_user_timeout", std::to_string(s.peer_timeout_ms));

    std::string user_options;
    if (!s.dsn.empty()) {
        char* error = nullptr;
        PQconninfoOption* parsed = PQconninfoParse(s.dsn.c_str(), &error);
        if (!parsed) {
            const std::string why = error ? redact_conninfo_error(one_line(error)) : "out of memory";
            if (error) PQfreemem(error);
            fail(DLOCK_CONFIG, fmt::format("sql backend: option `dsn` is not a libpq connection string ({}); use "
                                           "postgresql://user@host:port/database or `host=… port=… dbname=…`", why));
        }
        for (PQconninfoOption* o = parsed; o->keyword; ++o) {
            if (!o->val) continue;
            if (std::strcmp(o->keyword, "options") == 0) user_options = o->val;
            else set(o->keyword, o->val);
        }
        PQconninfoFree(parsed);
    }
    set("client_encoding", "UTF8");  // names are UTF-8 bytes; any other client encoding would convert them
    if (!s.password.empty()) set("password", s.password);
    if (!s.sslmode.empty()) set("sslmode", s.sslmode);
    if (!s.sslrootcert.empty()) set("sslrootcert", s.sslrootcert);
    if (!s.sslcert.empty()) set("sslcert", s.sslcert);
    if (!s.sslkey.empty()) set("sslkey", s.sslkey);

    // Server-side settings of every session. The server's own dead-peer detection is twice as slow
    // as the client's, so a client always gives up a session (reports LOST) before the server ends
    // it and frees its advisory locks. Only parameters PostgreSQL 11 knows: the startup packet is
    // read before the version check can run (session_setup_sql() adds the newer ones).
    const int64_t server_peer_s = 2 * peer_s;
    std::string options = fmt::format("-c statement_timeout={} -c tcp_keepalives_idle={} -c tcp_keepalives_interval={} "
                                      "-c tcp_keepalives_count=2",
                                      s.mode == lock_mode::lease && !s.queue_sessions ? s.statement_timeout_ms : 0,
                                      server_peer_s / 2, std::max<int64_t>(server_peer_s / 4, 1));
    if (s.queue_sessions) options += fmt::format(" -c lock_timeout={}", s.statement_timeout_ms);
    s.user_options = user_options;
    if (!user_options.empty()) options += " " + user_options;
    // Every statement relies on READ COMMITTED (after a row lock wait it works on the newest row);
    // a role or database defaulting to REPEATABLE READ or SERIALIZABLE would turn contention into
    // serialization failures. Last, so that it wins over the DSN's own options too.
    options += " -c default_transaction_isolation=read\\ committed";
    set("options", options);

    std::string conninfo;
    for (const auto& [key, value] : params) conninfo += (conninfo.empty() ? "" : " ") + key + "=" + conninfo_quote(value);
    s.conninfo = conninfo;

    std::string host = get("host");
    if (host.empty()) host = get("hostaddr");
    if (host.empty()) host = "(libpq default host)";
    const std::string port = get("port").empty() ? "5432" : get("port");
    const std::string db = get("dbname").empty() ? "(default database)" : get("dbname");
    s.server = fmt::format("{}:{}/{}", host, port, db);
    s.host = host.substr(0, host.find(','));
    s.port = port.substr(0, port.find(','));
    s.user = get("user");
}

std::string sqlstate_of(const std::exception& e) {
    if (const auto* q = dynamic_cast<const pqxx::sql_error*>(&e); q && !q->sqlstate().empty()) return q->sqlstate();
    // libpqxx 6.4 builds some of its sql_error subclasses without the SQLSTATE: recover it from the type.
    if (dynamic_cast<const pqxx::insufficient_privilege*>(&e)) return "42501";
    if (dynamic_cast<const pqxx::too_many_connections*>(&e)) return "53300";
    if (dynamic_cast<const pqxx::deadlock_detected*>(&e)) return "40P01";
    if (dynamic_cast<const pqxx::serialization_failure*>(&e)) return "40001";
    return "";
}

failure classify(const settings& s, const std::exception& e, const std::string& what, bool maybe_executed) {
    const std::string why = one_line(e.what());
    const std::string at = fmt::format("sql backend: postgres {}", s.server);
    if (dynamic_cast<const pqxx::broken_connection*>(&e) || dynamic_cast<const pqxx::in_doubt_error*>(&e)) {
        if (maybe_executed)
            return {DLOCK_UNKNOWN, fmt::format("{}: the connection was lost during {} ({}); its outcome is unknown", at, what, why)};
        return {DLOCK_UNAVAILABLE, fmt::format("{}: the connection was lost before {} ({}); retry", at, what, why)};
    }
    const std::string state = sqlstate_of(e);
    auto cls = [&](const char* prefix) { return state.rfind(prefix, 0) == 0; };
    if (state == "25006")
        return {DLOCK_BACKEND, fmt::format("{} is read-only during {} ({}): a hot standby, or default_transaction_read_only "
                                           "is on; point `dsn` at the primary (e.g. target_session_attrs=read-write)", at, what, why)};
    if (state == "42501")
        return {DLOCK_PERMISSION, fmt::format("{}: permission denied to user `{}` during {} ({}); grant it CREATE on the schema, "
                                              "or create the tables yourself (docs/backends/sql.md has the DDL), and SELECT, "
                                              "INSERT, UPDATE on them", at, s.user.empty() ? "(libpq's default)" : s.user, what, why)};
    if (state == "42P01" || state == "3F000")
        return {DLOCK_BACKEND, fmt::format("{}: dlock's table is missing during {} ({}); it was dropped after the client "
                                           "started: reopen the client to recreate it", at, what, why)};
    if (state == "57014")
        return {maybe_executed ? DLOCK_UNKNOWN : DLOCK_UNAVAILABLE,
                fmt::format("{}: {} was cancelled by statement_timeout ({} ms) ({}); the server is slow or a row lock is held "
                            "by a long transaction", at, what, s.statement_timeout_ms, why)};
    // A queue session's own lock waits (it has no statement_timeout: settings::queue_sessions).
    if (state == "55P03")
        return {maybe_executed ? DLOCK_UNKNOWN : DLOCK_UNAVAILABLE,
                fmt::format("{}: {} waited for a row lock longer than lock_timeout ({} ms) ({}); a row lock is held by a long "
                            "transaction", at, what, s.statement_timeout_ms, why)};
    if (cls("57P") || state == "53300" || cls("08"))
        return {DLOCK_UNAVAILABLE, fmt::format("{} is not serving during {} ({}); retry", at, what, why)};
    if (cls("53"))
        return {DLOCK_BACKEND, fmt::format("{} is out of resources during {} ({}); free disk or memory on the server", at, what, why)};
    if (state == "22P05" || state == "22021")
        return {DLOCK_INVALID_ARGUMENT, fmt::format("{}: the lock name cannot be stored in the database's encoding during {} "
                                                    "({}); use a UTF8 database", at, what, why)};
    if (cls("28") || state == "3D000")
        return {DLOCK_CONFIG, fmt::format("{} refused dlock during {} ({}); check `dsn`", at, what, why)};
    if (!state.empty())
        return {DLOCK_BACKEND, fmt::format("{}: error during {} (SQLSTATE {}: {})", at, what, state, why)};
    if (dynamic_cast<const std::bad_alloc*>(&e)) return {DLOCK_INTERNAL, "sql backend: out of memory"};
    return {DLOCK_BACKEND, fmt::format("{}: error during {} ({})", at, what, why)};
}

// ---- session ------------------------------------------------------------------------------------

session::session(const settings& s, const std::vector<std::pair<std::string, std::string>>& statements,
                 deadline_watch* watch, int64_t connect_deadline_ns)
    : watch_(watch) {
    connection_ = connect_until(s, watch ? connect_deadline_ns : INT64_MAX, &raw_);
    backend_pid_ = connection_->backendpid();
    check_server_version(s, connection_->server_version());
    // Lease mode also reads the session's server process (server_pid()), in the same round trip.
    std::string setup = session_setup_sql(s, connection_->server_version());
    if (s.mode == lock_mode::lease)
        setup += "SELECT a.pid, (extract(epoch FROM a.backend_start) * 1000000)::bigint FROM " +
                 statements::activity_as_login("pg_backend_pid()") + " WHERE a.pid = pg_backend_pid()";
    if (!setup.empty()) {
        const pqxx::result r = within(connect_deadline_ns, [&] {
            libpqxx_call_scope scope;
            pqxx::nontransaction tx(*connection_);
            return tx.exec(setup);
        });
        if (s.mode == lock_mode::lease && !r.empty() && !r[0][0].is_null() && !r[0][1].is_null()) {
            server_pid_ = r[0][0].as<int>();
            server_started_us_ = r[0][1].as<int64_t>();
        }
    }
    idle_since_ns_ = now_ns();
    for (const auto& [name, text] : statements) connection_->prepare(name, text);
}

std::string session::no_answer_message(int64_t waited_ns) {
    return fmt::format("no answer within {} ms; the client gave the connection up (the server, or the network path to it, "
                       "is not answering)", waited_ns / 1'000'000);
}

bool session::alive() {
    if (broken_ || !connection_->is_open()) return false;
    // A terminated session sends its FATAL message, then EOF: look up to three times.
    for (int round = 0; round < 3; ++round) {
        pollfd p{connection_->sock(), POLLIN | POLLRDHUP, 0};
        if (p.fd < 0) return !(broken_ = true);
        const int ready = ::poll(&p, 1, 0);
        if (ready == 0) return true;
        if (ready < 0) return errno == EINTR;
        if (p.revents & (POLLERR | POLLNVAL)) return !(broken_ = true);
        try {
            connection_->get_notifs();
        } catch (const std::exception&) {
            return !(broken_ = true);
        }
        if (!connection_->is_open()) return !(broken_ = true);
    }
    return true;
}

// ---- pool ---------------------------------------------------------------------------------------

std::unique_ptr<session> postgres_sessions::connect(const settings& s,
                                                    const std::vector<std::pair<std::string, std::string>>& statements,
                                                    deadline_watch& watch, int64_t borrow_deadline_ns) {
    const int64_t now = now_ns();
    const int64_t connect_by = borrow_deadline_ns == 0 || borrow_deadline_ns == INT64_MAX
                                   ? now + std::max<int64_t>(s.client_limit_ms(), 5000) * 1'000'000
                                   : std::max(borrow_deadline_ns, now + 250'000'000);
    try {
        return std::make_unique<session>(s, statements, &watch, connect_by);
    } catch (const failure&) {
        throw;  // a server dlock refuses (its version)
    } catch (const std::exception& e) {
        throw classify_connect_error(s, e, (connect_by - now) / 1'000'000);
    } catch (...) {
        throw failure{DLOCK_INTERNAL, "sql backend: unexpected exception while connecting"};
    }
}

failure postgres_sessions::backing_off(const failure& last_connect, int64_t next_attempt_in_ms) {
    return failure{last_connect.status, fmt::format("{} (next attempt in {} ms)", last_connect.message, next_attempt_in_ms)};
}

std::string postgres_sessions::all_busy(const settings& s) {
    return fmt::format("sql backend: all {} connections to postgres {} are in use (each held advisory lease keeps "
                       "one, each wait uses one); raise `pool_size`", s.pool_size, s.server);
}

// ---- listener -----------------------------------------------------------------------------------

class listener::receiver : public pqxx::notification_receiver {
public:
    receiver(pqxx::connection_base& c, const std::string& channel, listener* owner)
        : pqxx::notification_receiver(c, channel), owner_(owner) {}
    void operator()(const std::string&, int) override { owner_->heard(channel()); }

private:
    listener* owner_;
};

listener::listener(const settings& s, deadline_watch& watch) : waker("sql"), settings_(s), watch_(watch) {
    thread_ = std::thread([this] { run(); });
}

listener::~listener() {
    stopping_ = true;
    nudge();
    if (thread_.joinable()) thread_.join();
}

// The listener thread owns its connection: it (re)connects (after a failure, a growing pause of
// 10 ms doubling to 1 s), runs the LISTENs and UNLISTENs the waiters asked for, in their order, each
// bounded by the client limit, and hands notifications to the waker.
void listener::run() {
    std::unique_ptr<bounded_connection> conn;
    std::map<std::string, std::unique_ptr<receiver>> receivers;
    int64_t retry_at_ns = 0, backoff_ms = 0;
    auto drop_connection = [&] {
        receivers.clear();  // their UNLISTEN fails quietly on a broken connection
        conn.reset();
        connection_lost();  // waiters re-check now, then fall back to the holder's expiry
    };
    while (!stopping_) {
        std::vector<request> todo;
        if (!conn && now_ns() >= retry_at_ns) {
            try {
                conn = connect_until(settings_, now_ns() + settings_.client_limit_ms() * 1'000'000);
                backoff_ms = 0;
                for (auto& name : resubscribe()) todo.push_back({true, std::move(name)});
            } catch (const std::exception&) {
                backoff_ms = backoff_ms ? std::min<int64_t>(backoff_ms * 2, 1000) : 10;
                retry_at_ns = now_ns() + backoff_ms * 1'000'000;
            }
        }
        if (conn) {
            try {
                for (auto& r : requests()) todo.push_back(std::move(r));
                for (const auto& r : todo) {
                    auto it = receivers.find(r.channel);
                    if (!r.subscribe) {
                        if (it == receivers.end()) continue;
                        const uint64_t ticket = watch_.arm(conn->sock(), now_ns() + settings_.client_limit_ms() * 1'000'000);
                        receivers.erase(it);  // runs UNLISTEN (its errors are only noticed)
                        if (watch_.disarm(ticket) || !conn->is_open()) throw no_answer("UNLISTEN got no answer");
                        continue;
                    }
                    if (it == receivers.end()) {
                        libpqxx_call_scope scope;
                        const uint64_t ticket = watch_.arm(conn->sock(), now_ns() + settings_.client_limit_ms() * 1'000'000);
                        try {
                            receivers[r.channel] = std::make_unique<receiver>(*conn, r.channel, this);  // runs LISTEN
                        } catch (...) {
                            watch_.disarm(ticket);
                            throw;
                        }
                        if (watch_.disarm(ticket)) throw no_answer("LISTEN got no answer");
                    }
                    if (!conn->is_open()) throw pqxx::broken_connection("LISTEN failed");
                    confirmed(r.channel);
                }
            } catch (const std::exception&) {
                drop_connection();  // the next connection LISTENs to every watched channel
                continue;
            }
        }
        pollfd fds[2] = {{wake_fd(), POLLIN, 0}, {conn ? conn->sock() : -1, POLLIN | POLLRDHUP, 0}};
        const int timeout_ms = conn ? -1 : int(std::max<int64_t>((retry_at_ns - now_ns()) / 1'000'000 + 1, 1));
        if (::poll(fds, 2, timeout_ms) < 0 && errno != EINTR) break;
        if (fds[0].revents) drain();
        if (conn && fds[1].revents) {
            try {
                conn->get_notifs();  // calls the receivers
                if (!conn->is_open()) throw pqxx::broken_connection("closed");
            } catch (const std::exception&) {
                drop_connection();
                retry_at_ns = 0;
            }
        }
    }
    if (conn) ::shutdown(conn->sock(), SHUT_RDWR);  // stopping: no UNLISTEN, which could wait on a partitioned server
    receivers.clear();
}

// ---- monitor ------------------------------------------------------------------------------------

monitor::monitor(std::function<void(void*)> on_dead, int64_t probe_interval_ns)
    : on_dead_(std::move(on_dead)), probe_interval_ns_(probe_interval_ns) {
    wake_fd_ = make_wake_fd();
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) fail(DLOCK_INTERNAL, fmt::format("sql backend: epoll_create1 failed: {}", std::strerror(errno)));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;  // id 0: the wake fd
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    thread_ = std::thread([this] { run(); });
}

monitor::~monitor() {
    {
        plugin_kit::lock_guard lock(mutex_);
        stopping_ = true;
    }
    signal_fd(wake_fd_);
    if (thread_.joinable()) thread_.join();
    ::close(epoll_fd_);
    ::close(wake_fd_);
}

std::map<uint64_t, monitor::entry>::iterator monitor::find(void* cookie) {
    auto id = ids_.find(cookie);
    return id == ids_.end() ? entries_.end() : entries_.find(id->second);
}

void monitor::wait_settled(plugin_kit::unique_lock& lock, void* cookie) {
    settled_.wait(lock.std(), [&]() DLOCK_REQUIRES(mutex_) {
        auto it = find(cookie);
        return it == entries_.end() || it->second.state == phase::idle || it->second.state == phase::in_use;
    });
}

void monitor::add(void* cookie, session* s) {
    plugin_kit::lock_guard lock(mutex_);
    const uint64_t id = next_id_++;
    ids_[cookie] = id;
    entry& e = entries_[id];
    e = entry{cookie, s, s->socket(), phase::idle, false, now_ns() + probe_interval_ns_, 0};
    watch(e, id, true);
    if (e.probe_at_ns < wakes_at_ns_) {
        wakes_at_ns_ = e.probe_at_ns;
        signal_fd(wake_fd_);
    }
}

bool monitor::take(void* cookie) {
    plugin_kit::unique_lock lock(mutex_);
    wait_settled(lock, cookie);
    auto it = find(cookie);
    if (it == entries_.end()) return false;
    const bool dead = it->second.dead;
    if (it->second.state == phase::idle && !dead) watch(it->second, it->first, false);
    entries_.erase(it);
    ids_.erase(cookie);
    return dead;
}

bool monitor::begin_use(void* cookie) {
    plugin_kit::unique_lock lock(mutex_);
    wait_settled(lock, cookie);
    auto it = find(cookie);
    if (it == entries_.end() || it->second.dead) return false;
    it->second.state = phase::in_use;
    it->second.probe_deadline_ns = 0;  // the caller's statement eats a pending probe's answer first
    watch(it->second, it->first, false);  // its reply must not look like a death
    return true;
}

void monitor::end_use(void* cookie, bool still_alive) {
    plugin_kit::lock_guard lock(mutex_);
    auto it = find(cookie);
    if (it == entries_.end()) return;
    it->second.state = phase::idle;
    it->second.probe_at_ns = now_ns() + probe_interval_ns_;  // just heard from
    if (!still_alive) it->second.dead = true;
    else watch(it->second, it->first, true);
    settled_.notify_all();
}

bool monitor::read_probe(entry& e, int64_t now) {
    PGconn* c = e.s->raw();
    if (!PQconsumeInput(c)) return false;
    while (!PQisBusy(c)) {
        PGresult* r = PQgetResult(c);
        if (!r) {
            e.probe_deadline_ns = 0;
            e.probe_at_ns = now + probe_interval_ns_;
            break;
        }
        PQclear(r);
    }
    return PQstatus(c) != CONNECTION_BAD;
}

int64_t monitor::next_probe_event() const {
    int64_t next = INT64_MAX;
    for (const auto& [id, e] : entries_)
        if (e.state == phase::idle && !e.dead) next = std::min(next, e.probe_deadline_ns ? e.probe_deadline_ns : e.probe_at_ns);
    return next;
}

void monitor::run() {
    epoll_event events[64];
    plugin_kit::unique_lock lock(mutex_);
    for (;;) {
        if (stopping_) return;
        // Sleep until the next probe event; with none, until the last one planned (so that add()
        // need not wake this thread for every session), then indefinitely.
        const int64_t next = next_probe_event();
        const int64_t before = now_ns();
        if (next != INT64_MAX || wakes_at_ns_ <= before) wakes_at_ns_ = next;
        const int timeout_ms =
            wakes_at_ns_ == INT64_MAX ? -1 : int(std::min<int64_t>(std::max<int64_t>((wakes_at_ns_ - before) / 1'000'000 + 1, 0), INT_MAX));
        lock.unlock();
        const int ready = epoll_wait(epoll_fd_, events, 64, timeout_ms);
        lock.lock();
        if (stopping_) return;
        const int64_t now = now_ns();
        std::vector<std::pair<uint64_t, session*>> to_check;
        std::vector<uint64_t> dead;
        auto give_up = [&](uint64_t id, entry& e) DLOCK_REQUIRES(mutex_) {
            e.state = phase::checking;
            watch(e, id, false);
            dead.push_back(id);
        };
        for (int i = 0; i < ready; ++i) {
            if (events[i].data.u64 == 0) {
                drain_fd(wake_fd_);
                continue;
            }
            auto it = entries_.find(events[i].data.u64);
            if (it == entries_.end() || it->second.state != phase::idle || it->second.dead) continue;
            entry& e = it->second;
            if (e.probe_deadline_ns) {
                if (!read_probe(e, now)) give_up(it->first, e);  // the probe's answer, or the session's end
                continue;
            }
            e.state = phase::checking;
            watch(e, it->first, false);
            to_check.emplace_back(it->first, e.s);
        }
        for (auto& [id, e] : entries_) {
            if (e.state != phase::idle || e.dead) continue;
            if (e.probe_deadline_ns && now >= e.probe_deadline_ns) {
                ::shutdown(e.fd, SHUT_RDWR);  // unanswered: a partition; the session is given up
                give_up(id, e);
            } else if (!e.probe_deadline_ns && now >= e.probe_at_ns) {
                if (PQsendQuery(e.s->raw(), "") == 1) e.probe_deadline_ns = now + probe_interval_ns_;
                else give_up(id, e);
            }
        }
        if (to_check.empty() && dead.empty()) continue;
        lock.unlock();
        for (auto& [id, s] : to_check)
            if (!s->alive()) dead.push_back(id);  // a notice is read and the session kept
        lock.lock();
        std::vector<void*> report;
        for (auto& [id, s] : to_check) {
            auto it = entries_.find(id);
            if (std::find(dead.begin(), dead.end(), id) != dead.end()) continue;
            it->second.state = phase::idle;
            watch(it->second, id, true);
        }
        for (uint64_t id : dead) {
            auto it = entries_.find(id);
            it->second.s->mark_broken();
            it->second.dead = true;
            it->second.state = phase::reporting;
            report.push_back(it->second.cookie);
        }
        lock.unlock();
        for (void* cookie : report) on_dead_(cookie);  // no monitor lock held: the host may block
        lock.lock();
        for (uint64_t id : dead) {
            auto it = entries_.find(id);
            if (it != entries_.end()) it->second.state = phase::idle;
        }
        settled_.notify_all();
    }
}

}  // namespace dlock::sql
