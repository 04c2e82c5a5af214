// pg_settings.hpp — the PostgreSQL dialect's settings (what the plugin's options say, validated) and
// the pure functions that turn them into a libpq connection string and session setup, free of
// libpqxx: the plugin's option parsing (sql_plugin.cpp) includes it without the client.
#pragma once

#include "sql_shared.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace dlock::sql {

// What the plugin's options say, validated.
struct settings {
    std::string dsn;  // libpq URL or keyword string, dlock's own query keys removed
    lock_mode mode = lock_mode::lease;
    std::string schema = "public";
    std::string table = "dlock_locks";
    std::string password;  // overrides the DSN's when set
    std::string user_options;  // the DSN's own libpq `options` (server settings), if any
    std::string sslmode, sslrootcert, sslcert, sslkey;
    int64_t statement_timeout_ms = 5000;
    int64_t handoff_grace_ms = 50;
    int64_t peer_timeout_ms = 10000;
    size_t pool_size = 32;
    bool allow_session_pooler = false;
    // Advisory mode: a name made of this prefix and a decimal 64-bit integer K locks the advisory
    // key K itself (an application's pg_advisory_lock(K)); "" (the default): every name is hashed.
    std::string advisory_key_prefix;
    // Lease mode: sessions for fair waiters' queues (turnstiles). A wait in a queue may outlast
    // statement_timeout, so these sessions have none; every lock wait on them is bounded by
    // lock_timeout instead: the wait's own deadline in the queueing statements, statement_timeout's
    // value in every other (a row lock held by a long transaction still ends the statement).
    // And the server ends one that holds a place in a turnstile and stays idle for peer_timeout
    // (idle_session_timeout, PostgreSQL 14+, set by the statements that take and leave a place:
    // statements::queue_idle_ms): a waiter admitted by a turnstile whose process stops (SIGSTOP, a
    // stalled VM) would otherwise keep every waiter behind it out until it resumes. A live admitted
    // waiter that waits sends a heartbeat every queue_heartbeat_ns(), so only a silent one loses
    // its place. A queue session idle in its pool holds no place and has no idle limit.
    bool queue_sessions = false;

    // Filled by resolve(): the libpq keyword string every session connects with, and the server as
    // messages name it ("postgres 127.0.0.1:5432/postgres").
    std::string conninfo;
    std::string server;
    std::string host, port;  // the first host and port libpq tries, for the TLS diagnosis
    std::string user;  // the role it logs in as ("" when libpq picks its default)

    // How long the client waits for the server's answer to one statement (or for a connect) before
    // it gives the connection up: statement_timeout plus a quarter of it (at least 100 ms), so that
    // a server that is merely slow cancels the statement itself first, with a precise error.
    int64_t client_limit_ms() const { return statement_timeout_ms + std::max<int64_t>(statement_timeout_ms / 4, 100); }
    // Queue sessions: how often an admitted waiter that waits runs a statement on its session (a
    // third of the server's idle limit for a session that holds a place, peer_timeout).
    int64_t queue_heartbeat_ns() const { return peer_timeout_ms * 1'000'000 / 3; }
};

// Builds settings.conninfo and settings.server from the DSN and the options (throws
// failure(DLOCK_CONFIG) for a DSN libpq cannot parse; the message quotes no piece of the DSN, which
// may hold a password). Connection defaults dlock sets unless the DSN says otherwise:
// application_name=dlock, connect_timeout=5, client_encoding=UTF8, TCP keepalives and
// tcp_user_timeout derived from peer_timeout. Session settings always added (libpq `options`, sent
// in the startup packet): only parameters every supported server (PostgreSQL 11+) knows, since a
// server refuses the whole connection for one it does not — statement_timeout (lease mode; 0 in
// advisory mode and on queue sessions, whose waits are bounded by lock_timeout; queue sessions also
// get lock_timeout = statement_timeout) and the server's own keepalives.
// Newer ones follow once the server's version is known: session_setup_sql().
void resolve(settings& s);

// Refuses a server older than PostgreSQL 11 (failure DLOCK_BACKEND naming its version), from the
// version libpq reports at connect (`server_version_num`, e.g. 110022), before any statement.
void check_server_version(const settings& s, int server_version_num);

// The SET statements a new session runs right after connecting, for the settings that depend on the
// server's version (empty when none applies): the server's tcp_user_timeout (PostgreSQL 12+) at
// twice peer_timeout, so the client gives a session up before the server frees what it held; and
// idle_session_timeout = 0 (PostgreSQL 14+), because dlock's sessions are idle by design — an
// advisory lock lives exactly as long as its idle session — and dlock closes the ones it no longer
// needs itself. A setting the DSN's own `options` name is left as the user set it, except
// idle_session_timeout on queue sessions (settings::queue_sessions): 0 there too, and the
// statements that take a place in a turnstile set it to peer_timeout (leaving sets it back), so a
// silent admitted waiter's place ends with its session, and no other queue session is ended.
std::string session_setup_sql(const settings& s, int server_version_num);

// libpq's message about a connection string it cannot parse, with every quoted piece of the string
// replaced by "…" (libpq quotes tokens, whole URIs and percent-encoded user:password pieces), so a
// password can never appear in it. Quoted single characters (`missing "=" after …`) are kept.
std::string redact_conninfo_error(const std::string& message);

}  // namespace dlock::sql
