// sql_statements.hpp — the SQL text of the `sql` backend's prepared statements, for both modes.
// Shared by the plugin and by benchmarks/sql_bench, which times the same statements through libpqxx
// as its floor. Lock names, owners, keys and channels are always parameters ($n); only the
// configured, quoted table names are part of the text.
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

namespace dlock::sql {

// The statements of each mode, by prepared-statement name. lease_table: the lease rows;
// advisory_table: the advisory fence counters; version_table: the schema version.
struct statements {
    std::string lease_table, advisory_table, version_table;  // quoted, schema-qualified

    // CREATE TABLE IF NOT EXISTS for the three tables (schema version 1). Names are compared byte
    // by byte (COLLATE "C"): distinct names never compare equal, whatever the database's collation.
    std::vector<std::string> tables() const {
        return {
            fmt::format("CREATE TABLE IF NOT EXISTS {} (component text PRIMARY KEY, version integer NOT NULL, "
                        "updated_at timestamptz NOT NULL DEFAULT now())", version_table),
            fmt::format("CREATE TABLE IF NOT EXISTS {} (name text COLLATE \"C\" PRIMARY KEY, owner text, "
                        "fence bigint NOT NULL, expiry timestamptz, holder text, acquired_at timestamptz, "
                        "waiters integer NOT NULL DEFAULT 0, released_at timestamptz)", lease_table),
            fmt::format("CREATE TABLE IF NOT EXISTS {} (name text COLLATE \"C\" PRIMARY KEY, fence bigint NOT NULL, "
                        "owner text, holder text, holder_pid integer, acquired_at timestamptz)", advisory_table),
        };
    }

    std::vector<std::pair<std::string, std::string>> lease() const {
        const std::string& T = lease_table;
        return {
            // $1 name, $2 owner, $3 ttl ms, $4 holder, $5 role, $6 handoff grace ms, $7 when the
            // waiter registered (server clock, µs since the epoch; 0 unless role 2).
            // Role 0: a try that will not wait; 1: a first try that will wait if the lock is held
            // (it then registers as a waiter in the same statement); 2: a registered waiter's retry.
            // Anti-barging: for $6 ms after a release, a row with registered waiters can be taken
            // only by a waiter that registered before that release — not by a newcomer, nor by the
            // releaser coming straight back — so the notified waiters are not beaten to it.
            // Returns (fence, NULL…) when acquired; (NULL, ms until the holder's expiry or the
            // grace's end, registered-at µs or NULL, waiters registered) when not; no row when the
            // row exists but our snapshot cannot see it yet.
            {"acquire", fmt::format(
                 "WITH attempt AS ("
                 " INSERT INTO {0} AS t (name, owner, fence, expiry, holder, acquired_at, waiters)"
                 " VALUES ($1, $2, 1, clock_timestamp() + $3::float8 * interval '1 millisecond', $4, clock_timestamp(), 0)"
                 " ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, fence = t.fence + 1, expiry = excluded.expiry,"
                 "  holder = excluded.holder, acquired_at = excluded.acquired_at,"
                 "  waiters = CASE WHEN $5::int = 2 THEN GREATEST(t.waiters - 1, 0) ELSE t.waiters END"
                 " WHERE (t.owner IS NULL OR t.expiry <= clock_timestamp() OR t.owner = excluded.owner)"
                 "  AND (t.waiters = 0 OR t.released_at IS NULL"
                 "       OR t.released_at <= clock_timestamp() - $6::float8 * interval '1 millisecond'"
                 "       OR ($5::int = 2 AND $7::bigint < (extract(epoch FROM t.released_at) * 1000000)::bigint))"
                 " RETURNING t.fence),"
                 " registered AS (UPDATE {0} SET waiters = waiters + 1"
                 "  WHERE name = $1 AND $5::int = 1 AND NOT EXISTS (SELECT 1 FROM attempt)"
                 "  RETURNING (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS at)"
                 " SELECT fence, NULL::bigint, NULL::bigint, NULL::integer FROM attempt"
                 " UNION ALL"
                 " SELECT NULL, GREATEST(0, ceil(1000 * extract(epoch FROM CASE"
                 "   WHEN h.owner IS NOT NULL THEN h.expiry"
                 "   ELSE h.released_at + $6::float8 * interval '1 millisecond' END - clock_timestamp())))::bigint,"
                 "  (SELECT at FROM registered), h.waiters"
                 " FROM {0} h WHERE h.name = $1 AND NOT EXISTS (SELECT 1 FROM attempt)", T)},
            // The turnstile of fair waiters: a session advisory lock on a key derived from the name.
            // The server's lock queue admits waiters one at a time in arrival order, and only the one
            // admitted waits for the row (listens, retries), so a release wakes one waiter.
            // $1 key, $2 lock_timeout → once admitted; SQLSTATE 55P03 when lock_timeout runs out.
            {"turnstile_enter", "WITH setting AS (SELECT set_config('lock_timeout', $2, true))"
                                " SELECT pg_advisory_lock($1::bigint) FROM setting"},
            // $1 key → true when the turnstile was ours.
            {"turnstile_leave", "SELECT pg_advisory_unlock($1::bigint)"},
            // $1 name: a registered waiter leaves without the lock (timeout, cancel, error).
            {"unwait", fmt::format("UPDATE {0} SET waiters = GREATEST(waiters - 1, 0) WHERE name = $1", T)},
            // $1 name, $2 owner, $3 channel → one row when released (and waiters notified), none
            // when the row is no longer ours.
            {"release", fmt::format(
                 "WITH released AS (UPDATE {0} SET owner = NULL, expiry = NULL, holder = NULL, released_at = clock_timestamp()"
                 " WHERE name = $1 AND owner = $2 RETURNING 1)"
                 " SELECT pg_notify($3, '') FROM released", T)},
            // $1 names[], $2 owners[], $3 ttls[] → the owners whose leases were extended.
            {"renew", fmt::format(
                 "UPDATE {0} AS t SET expiry = clock_timestamp() + r.ttl * interval '1 millisecond'"
                 " FROM unnest($1::text[], $2::text[], $3::float8[]) AS r(name, owner, ttl)"
                 " WHERE t.name = r.name AND t.owner = r.owner RETURNING t.owner", T)},
            // $1 name, $2 owner → the fence when the row carries our token and has not expired.
            {"read_back", fmt::format(
                 "SELECT fence FROM {0} WHERE name = $1 AND owner = $2 AND expiry > clock_timestamp()", T)},
            // $1 name → owner, fence, held, ms left.
            {"inspect", fmt::format(
                 "SELECT owner, fence, owner IS NOT NULL AND expiry > clock_timestamp(),"
                 " GREATEST(0, ceil(extract(epoch FROM expiry - clock_timestamp()) * 1000))::bigint"
                 " FROM {0} WHERE name = $1", T)},
        };
    }

    std::vector<std::pair<std::string, std::string>> advisory() const {
        const std::string& A = advisory_table;
        const std::string bump = fmt::format(
            " INSERT INTO {0} AS f (name, fence, owner, holder, holder_pid, acquired_at)"
            " SELECT $2, 1, $3, $4, pg_backend_pid(), clock_timestamp() FROM locked {{}}"
            " ON CONFLICT (name) DO UPDATE SET fence = f.fence + 1, owner = excluded.owner, holder = excluded.holder,"
            "  holder_pid = excluded.holder_pid, acquired_at = excluded.acquired_at"
            " RETURNING fence", A);
        // pg_locks shows a bigint advisory key as classid (high half), objid (low half), objsubid 1.
        const std::string key_match =
            "l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
            " AND l.classid::bigint = (($1::bigint >> 32) & 4294967295) AND l.objid::bigint = ($1::bigint & 4294967295)";
        return {
            // $1 key, $2 name, $3 owner, $4 holder → the fence, or no row when the lock is taken.
            {"try_lock", fmt::format("WITH locked AS (SELECT pg_try_advisory_lock($1::bigint) AS ok),"
                                     " bumped AS ({}) SELECT fence FROM bumped",
                                     fmt::format(bump, "WHERE ok"))},
            // $1 key, $2 name, $3 owner, $4 holder, $5 lock_timeout → the fence; waits in the
            // server's queue, SQLSTATE 55P03 when lock_timeout runs out.
            {"lock", fmt::format("WITH setting AS (SELECT set_config('lock_timeout', $5, true)),"
                                 " locked AS (SELECT pg_advisory_lock($1::bigint) FROM setting),"
                                 " bumped AS ({}) SELECT fence FROM bumped",
                                 fmt::format(bump, ""))},
            {"unlock", "SELECT pg_advisory_unlock($1::bigint)"},
            {"unlock_all", "SELECT pg_advisory_unlock_all()"},
            // $1 key → 1 when this session holds it.
            {"check", fmt::format("SELECT count(*) FROM pg_locks l WHERE {} AND l.pid = pg_backend_pid()", key_match)},
            // $1 key, $2 name → owner, fence, held (by the session that last took it).
            {"inspect", fmt::format("SELECT f.owner, f.fence, EXISTS (SELECT 1 FROM pg_locks l WHERE {} AND l.pid = f.holder_pid"
                                    " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))"
                                    " FROM {} f WHERE f.name = $2", key_match, A)},
        };
    }
};

}  // namespace dlock::sql
