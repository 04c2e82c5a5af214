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
    std::string holders_table;  // quoted, schema-qualified: shared holders and semaphore permits
    // Lease mode's queue sessions: their idle_session_timeout while they hold a place in a turnstile
    // (peer_timeout: the server ends the session of an admitted waiter that falls silent, and its
    // place with it); set by the statements that take a place, and set back to 0 by those that leave
    // it, so a queue session idle in its pool has no limit (and the DSN's own value never applies).
    int64_t queue_idle_ms = 0;
    // The longest a break's transaction may sit idle between its statements (peer_timeout): a
    // breaker that stalls while it keeps the lock's row locked is ended by the server, which rolls
    // the break back and frees the row (break_bound).
    int64_t break_idle_ms = 0;

    // FROM items: the row `a` of pg_stat_get_activity() for server process `pid` (an SQL expression),
    // read as the session's login role. A role switched to after login (a DSN's `-c role=X`, ALTER
    // ROLE … SET role) sees NULL in another role's backend_start — even its own session's — and may
    // not end that role's processes; `role` is set to none for this statement only (set_config's
    // local form: back as configured when it ends), before the call, whose argument depends on it.
    static std::string activity_as_login(const std::string& pid) {
        return "(SELECT set_config('role', 'none', true) AS r) AS login,"
               " pg_stat_get_activity(CASE WHEN login.r IS NOT NULL THEN " + pid + " END) AS a";
    }

    // An expression that sets idle_session_timeout to `ms` for the rest of the session (undone if the
    // statement fails); NULL, and nothing set, on a server without it (PostgreSQL 11-13).
    static std::string idle_limit(int64_t ms) {
        return fmt::format("CASE WHEN current_setting('idle_session_timeout', true) IS NOT NULL"
                           " THEN set_config('idle_session_timeout', '{}', false) END", ms);
    }

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

    // The text of statement `acquire`, or with `queued` of acquire_queued.
    std::string acquire(bool queued) const {
        const std::string& T = lease_table;
        // acquire_queued takes the turnstile at once when nobody holds it (`alone`), else waits for
        // it; `gate` has one row, after any wait, and the attempt comes after it. (A WITH query that
        // calls a volatile function is evaluated once, never folded into the query that reads it.)
        const std::string admission =
            queued ? "WITH setting AS (SELECT set_config('lock_timeout', $9, true), " + idle_limit(queue_idle_ms) + "),"
                     " tried AS (SELECT pg_try_advisory_lock($8::bigint) AS alone FROM setting),"
                     " gate AS (SELECT tried.alone, CASE WHEN tried.alone THEN true ELSE pg_advisory_lock($8::bigint)::text IS NOT NULL END AS admitted"
                     "  FROM tried),"
                     " attempt AS ("
                   : "WITH attempt AS (";
        const std::string source = queued
                                       ? " SELECT $1, $2, 1, clock_timestamp() + $3::float8 * interval '1 millisecond', $4, clock_timestamp(), 0"
                                         " FROM gate WHERE admitted"
                                       : " VALUES ($1, $2, 1, clock_timestamp() + $3::float8 * interval '1 millisecond', $4, clock_timestamp(), 0)";
        // Acquired: an acquirer that found the turnstile free leaves it in the same statement (no
        // waiter was queued behind it: nothing to admit before this transaction commits); one that
        // waited leaves after the commit (statement turnstile_leave), so that the waiter it admits
        // makes its attempt against the committed row.
        // (A sixth column: an acquirer that left sets its session's idle limit back to 0.)
        const std::string left_column = queued ? ", CASE WHEN (SELECT alone FROM gate) THEN pg_advisory_unlock($8::bigint) ELSE false END,"
                                                 " CASE WHEN (SELECT alone FROM gate) THEN " + idle_limit(0) + " END"
                                               : "";
        const std::string no_column = queued ? ", NULL::boolean, NULL::text" : "";
        // handoff_grace does not hold back a waiter the turnstile admitted after it waited there:
        // it is the queue's head, and the fair waiters registered in the row are queued behind it.
        // (One that found the turnstile free is held back like any newcomer.)
        const std::string head_of_queue = queued ? " OR NOT (SELECT alone FROM gate)" : "";
        return fmt::format(
            "{1}"
            " INSERT INTO {0} AS t (name, owner, fence, expiry, holder, acquired_at, waiters)"
            "{2}"
            " ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, fence = t.fence + 1, expiry = excluded.expiry,"
            "  holder = excluded.holder, acquired_at = excluded.acquired_at,"
            "  waiters = CASE WHEN $5::int = 2 THEN GREATEST(t.waiters - 1, 0) ELSE t.waiters END"
            " WHERE (t.owner IS NULL OR t.expiry <= clock_timestamp() OR t.owner = excluded.owner)"
            "  AND (t.waiters = 0 OR t.released_at IS NULL"
            "       OR t.released_at <= clock_timestamp() - $6::float8 * interval '1 millisecond'"
            "       OR ($5::int = 2 AND $7::bigint < (extract(epoch FROM t.released_at) * 1000000)::bigint){5})"
            " RETURNING t.fence),"
            " registered AS (UPDATE {0} SET waiters = waiters + 1"
            "  WHERE name = $1 AND $5::int = 1 AND NOT EXISTS (SELECT 1 FROM attempt)"
            "  RETURNING (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS at)"
            " SELECT fence, NULL::bigint, NULL::bigint, NULL::integer{3} FROM attempt"
            " UNION ALL"
            " SELECT NULL, GREATEST(0, ceil(1000 * extract(epoch FROM CASE"
            "   WHEN h.owner IS NOT NULL THEN h.expiry"
            "   ELSE h.released_at + $6::float8 * interval '1 millisecond' END - clock_timestamp())))::bigint,"
            "  (SELECT at FROM registered), h.waiters{4}"
            " FROM {0} h WHERE h.name = $1 AND NOT EXISTS (SELECT 1 FROM attempt)",
            T, admission, source, left_column, no_column, head_of_queue);
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
            // releaser coming straight back — so the notified waiters are not beaten to it
            // (acquire_queued: and by the waiter the turnstile admitted after it queued there, see
            // acquire()).
            // Returns (fence, NULL…) when acquired; (NULL, ms until the holder's expiry or the
            // grace's end, registered-at µs or NULL, waiters registered) when not; no row when the
            // row exists but our snapshot cannot see it yet.
            {"acquire", acquire(false)},
            // The same for a fair waiter, with $8 the name's turnstile key and $9 the lock_timeout:
            // takes its place in the turnstile (waiting for admission as turnstile_enter does;
            // SQLSTATE 55P03 when lock_timeout runs out), then makes the attempt, in one statement.
            // A fifth column, when acquired: true when it also left the turnstile (it was free);
            // else the session keeps the turnstile (turnstile_leave). Taking the place sets the
            // session's idle limit (queue_idle_ms), leaving it in the same statement sets it back to 0.
            {"acquire_queued", acquire(true)},
            // The turnstile of fair waiters: a session advisory lock on a key derived from the name.
            // The server's lock queue admits waiters one at a time in arrival order, and only the one
            // admitted waits for the row (listens, retries), so a release wakes one waiter.
            // $1 key, $2 lock_timeout → once admitted; SQLSTATE 55P03 when lock_timeout runs out.
            // Admitted, the session has the idle limit of a place (queue_idle_ms); leaving sets it
            // back to 0 (every leave statement).
            {"turnstile_enter", "WITH setting AS (SELECT set_config('lock_timeout', $2, true), " + idle_limit(queue_idle_ms) + ")"
                                " SELECT pg_advisory_lock($1::bigint) FROM setting"},
            // $1 key → true when the turnstile was ours.
            {"turnstile_leave", "SELECT pg_advisory_unlock($1::bigint), " + idle_limit(0)},
            // A queue session's waiter gave up (its lock_timeout ran out) before or after admission:
            // whatever place it held in a turnstile is left, so the session can serve the next wait.
            // (pg_advisory_unlock of a place not held would warn.)
            {"turnstile_leave_any", "SELECT pg_advisory_unlock_all(), " + idle_limit(0)},
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
            // The unknown outcome of an acquire whose answer never came: its statement may still be
            // running on the server (waiting on a row lock, or its bytes still on the way) and commit
            // after a read-back that found nothing. So the lost session's server process ($1 pid,
            // $2 its backend_start in µs since the epoch: one process, never a later one reusing the
            // pid) is ended first → the number of processes signalled (0: already gone). As the
            // login role (activity_as_login), which can see and end its own sessions whatever role
            // they switched to.
            {"end_session",
             "SELECT count(*) FILTER (WHERE pg_terminate_backend(a.pid)) FROM " + activity_as_login("$1::integer") +
                 " WHERE a.pid = $1 AND (extract(epoch FROM a.backend_start) * 1000000)::bigint = $2::bigint"},
            // $1 pid, $2 backend_start µs → 1 while that process still runs (its transaction is
            // settled once it is gone: committed before, or rolled back as it ended).
            {"session_present",
             "SELECT count(*) FROM " + activity_as_login("$1::integer") +
                 " WHERE a.pid = $1 AND (extract(epoch FROM a.backend_start) * 1000000)::bigint = $2::bigint"},
            // An admitted fair waiter that waits keeps its queue session from the server's idle limit
            // (idle_session_timeout = queue_idle_ms while it holds its place) with this, every third of it.
            {"queue_heartbeat", "SELECT true"},
            // $1 name → owner, fence, held, ms left.
            {"inspect", fmt::format(
                 "SELECT owner, fence, owner IS NOT NULL AND expiry > clock_timestamp(),"
                 " GREATEST(0, ceil(extract(epoch FROM expiry - clock_timestamp()) * 1000))::bigint"
                 " FROM {0} WHERE name = $1", T)},
        };
    }

    // Lease mode's semaphores and shared locks, added beside the tables of schema version 1 (an
    // older dlock ignores them and still sees a shared-held lock as held: its row's owner is
    // `shared_owner`, which no owner token equals). The lease table gains `readers`, the number of
    // shared holders its row counts. Holder rows: kind 'S' (a shared holder of the lock `name`;
    // slots allocated on demand and reused) or 'P' (semaphore `name`: slot 0 keeps the limit and
    // the fencing counter, slots 1..limit are the permits). `generation`: while the row is shared,
    // the fence that began its current generation of readers (shared_acquire); a reader row counts
    // in the row only when its own fence is at least that.
    std::vector<std::string> shared_tables() const {
        return {
            fmt::format("ALTER TABLE {} ADD COLUMN IF NOT EXISTS readers integer NOT NULL DEFAULT 0", lease_table),
            fmt::format("ALTER TABLE {} ADD COLUMN IF NOT EXISTS generation bigint", lease_table),
            fmt::format("CREATE TABLE IF NOT EXISTS {} (kind char(1) NOT NULL, name text COLLATE \"C\" NOT NULL, "
                        "slot integer NOT NULL, permits integer, owner text, fence bigint NOT NULL, expiry timestamptz, "
                        "holder text, acquired_at timestamptz, PRIMARY KEY (kind, name, slot))", holders_table),
        };
    }

    // The owner a lease row carries while it is held shared (never a 32-hex-digit owner token).
    static constexpr const char* shared_owner = "shared";

    // Lease mode: shared holds of a lock (rows of the lease table and the holders table).
    std::vector<std::pair<std::string, std::string>> shared_lock_statements() const {
        const std::string& T = lease_table;
        const std::string& H = holders_table;
        const std::string ttl = "clock_timestamp() + $3::float8 * interval '1 millisecond'";
        const std::string ms_left = "GREATEST(0, ceil(1000 * extract(epoch FROM {} - clock_timestamp())))::bigint";
        return {
            // $1 name, $2 owner, $3 ttl ms, $4 holder, $5 admitted by the turnstile, $6 turnstile key.
            // Takes the lock's row shared when it is free, expired or already shared, and no fair
            // exclusive waiter is queued in the name's turnstile (writer preference; a reader already
            // admitted by the turnstile skips that check). The row counts its readers and expires with
            // the last of them (`expiry` only grows while shared). The reader's own row is a free or
            // expired 'S' slot, else a new one: a slot number taken concurrently fails with 23505 and
            // the statement is retried. Returns (fence, NULL) when acquired; (NULL, ms until the
            // exclusive holder's expiry, or NULL when waiting behind a queued writer) when not.
            // A generation of readers is the time the row stays shared without a break: it begins
            // with readers = 1, when the row records the fence that began it (`generation`), and ends
            // when the row expires, is freed by its last reader or broken. Every reader of a
            // generation has a fence at least its `generation` (fences only grow, and the next
            // generation begins with a higher one), so a reader row belongs to the current generation
            // exactly when it is live and its fence is at least the row's `generation` — whatever
            // this statement's snapshot could see (a reader that committed while this statement waited
            // for the row's lock is invisible to it, and its row may stay live after a break or the
            // row's end). Release, renew and holders judge a reader row by that alone. `live` is read
            // once, so readers, expiry and generation agree. A reader row never outlives the lock
            // row (`LEAST`: the lock row's expiry may have been computed before this statement waited
            // for the row's lock). The reader's slot is a free or expired one, or one left by an
            // ended generation (its fence below `generation`), else a new one.
            // Lock order, here as in release, renew and break: the lock's row, then reader rows.
            {"shared_acquire", fmt::format(
                 "WITH m AS ("
                 " INSERT INTO {0} AS t (name, owner, fence, expiry, holder, acquired_at, waiters, readers, generation)"
                 " VALUES ($1, 'shared', 1, {2}, 'shared', clock_timestamp(), 0, 1, 1)"
                 " ON CONFLICT (name) DO UPDATE SET fence = t.fence + 1,"
                 "  (readers, expiry, generation) = (SELECT CASE WHEN x.live THEN t.readers + 1 ELSE 1 END,"
                 "   CASE WHEN x.live THEN GREATEST(t.expiry, excluded.expiry) ELSE excluded.expiry END,"
                 "   CASE WHEN x.live THEN coalesce(t.generation, 0) ELSE t.fence + 1 END"
                 "   FROM (SELECT t.owner = 'shared' AND t.expiry > clock_timestamp() AS live) x),"
                 "  owner = 'shared', holder = 'shared', acquired_at = clock_timestamp()"
                 " WHERE (t.owner IS NULL OR t.expiry <= clock_timestamp() OR t.owner = 'shared')"
                 "  AND ($5::bool OR NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.mode = 'ExclusiveLock'"
                 "   AND l.objsubid = 1 AND l.classid::bigint = (($6::bigint >> 32) & 4294967295)"
                 "   AND l.objid::bigint = ($6::bigint & 4294967295)"
                 "   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())))"
                 " RETURNING t.fence, t.expiry, t.generation),"
                 " reuse AS (SELECT h.slot FROM {1} h, m WHERE h.kind = 'S' AND h.name = $1"
                 "  AND (h.owner IS NULL OR h.expiry <= clock_timestamp() OR h.fence < m.generation) LIMIT 1 FOR UPDATE OF h SKIP LOCKED),"
                 " reused AS (UPDATE {1} h SET owner = $2, fence = m.fence, expiry = LEAST({2}, m.expiry), holder = $4,"
                 "  acquired_at = clock_timestamp() FROM m, reuse WHERE h.kind = 'S' AND h.name = $1 AND h.slot = reuse.slot RETURNING h.fence),"
                 " added AS (INSERT INTO {1} (kind, name, slot, owner, fence, expiry, holder, acquired_at)"
                 "  SELECT 'S', $1, (SELECT coalesce(max(slot), 0) + 1 FROM {1} WHERE kind = 'S' AND name = $1), $2, m.fence,"
                 "   LEAST({2}, m.expiry), $4, clock_timestamp() FROM m WHERE NOT EXISTS (SELECT 1 FROM reuse) RETURNING fence)"
                 " SELECT fence, NULL::bigint FROM reused UNION ALL SELECT fence, NULL FROM added"
                 " UNION ALL SELECT NULL, CASE WHEN h.owner IS NOT NULL AND h.owner <> 'shared' THEN {3} END"
                 " FROM {0} h WHERE h.name = $1 AND NOT EXISTS (SELECT 1 FROM m)",
                 T, H, ttl, fmt::format(ms_left, "h.expiry"))},
            // $1 name, $2 owner, $3 channel → (released, the lock is free now). The lock's row is
            // locked first (its latest version: the one a break or a new generation committed while
            // this statement waited), so no generation can begin or end while the reader's rows are
            // judged. A reader row of the current generation (live, within the lock row's expiry
            // while the row is shared, its fence at least the row's `generation`: shared_acquire)
            // leaves the count — by the number of such rows removed, each of which the count took
            // in; the last one frees the row and notifies the waiters. A reader row of an ended
            // generation (broken, or the row expired) counts nobody out: it is only cleared.
            {"shared_release", fmt::format(
                 "WITH lock_row AS (SELECT owner, expiry, generation FROM {0} WHERE name = $1 FOR UPDATE),"
                 " old AS (SELECT h.slot, h.expiry > clock_timestamp() AND l.owner = 'shared' AND h.expiry <= l.expiry"
                 "  AND h.fence >= coalesce(l.generation, 0) AS live"
                 "  FROM {1} h LEFT JOIN lock_row l ON true WHERE h.kind = 'S' AND h.name = $1 AND h.owner = $2 FOR UPDATE OF h),"
                 " gone AS (UPDATE {1} h SET owner = NULL, expiry = NULL FROM old"
                 "  WHERE h.kind = 'S' AND h.name = $1 AND h.slot = old.slot RETURNING old.live),"
                 " counted AS (SELECT count(*) FILTER (WHERE live) AS live FROM gone),"
                 " m AS (UPDATE {0} t SET readers = GREATEST(t.readers - counted.live, 0),"
                 "  owner = CASE WHEN t.readers <= counted.live THEN NULL ELSE t.owner END,"
                 "  expiry = CASE WHEN t.readers <= counted.live THEN NULL ELSE t.expiry END,"
                 "  holder = CASE WHEN t.readers <= counted.live THEN NULL ELSE t.holder END,"
                 "  released_at = CASE WHEN t.readers <= counted.live THEN clock_timestamp() ELSE t.released_at END"
                 "  FROM counted WHERE t.name = $1 AND counted.live > 0 AND t.owner = 'shared' RETURNING t.readers)"
                 " SELECT EXISTS (SELECT 1 FROM gone WHERE live),"
                 "  (SELECT count(*) FROM (SELECT pg_notify($3, '') FROM m WHERE m.readers = 0) n) > 0", T, H)},
            // $1 names[], $2 owners[], $3 ttls[] → the owners of shared holds extended. The lock's row
            // is extended first (while it is still shared and unexpired, by the largest ttl of the
            // readers of its current generation in the batch: a reader of an ended generation
            // extends nothing), then the reader's own row of the current generation (its fence at
            // least the row's `generation`), never past the lock row's new expiry.
            {"shared_renew", fmt::format(
                 "WITH b AS (SELECT * FROM unnest($1::text[], $2::text[], $3::float8[]) AS b(name, owner, ttl)),"
                 " m AS (UPDATE {0} t SET expiry = GREATEST(t.expiry, clock_timestamp() + (SELECT max(b.ttl) {2}) * interval '1 millisecond')"
                 "  WHERE t.name IN (SELECT name FROM b) AND t.owner = 'shared' AND t.expiry > clock_timestamp()"
                 "  AND EXISTS (SELECT 1 {2}) RETURNING t.name, t.expiry, t.generation)"
                 " UPDATE {1} h SET expiry = LEAST(clock_timestamp() + b.ttl * interval '1 millisecond', m.expiry) FROM b, m"
                 " WHERE h.kind = 'S' AND h.name = b.name AND m.name = b.name AND h.owner = b.owner AND h.expiry > clock_timestamp()"
                 "  AND h.fence >= coalesce(m.generation, 0)"
                 " RETURNING h.owner", T, H,
                 fmt::format("FROM b JOIN {0} r ON r.kind = 'S' AND r.name = b.name AND r.owner = b.owner WHERE b.name = t.name"
                             " AND r.expiry > clock_timestamp() AND r.fence >= coalesce(t.generation, 0)", H))},
        };
    }

    // Lease mode: semaphore permits (slots of the holders table).
    std::vector<std::pair<std::string, std::string>> permit_statements() const {
        const std::string& H = holders_table;
        const std::string ttl = "clock_timestamp() + $3::float8 * interval '1 millisecond'";
        const std::string ms_left = "GREATEST(0, ceil(1000 * extract(epoch FROM {} - clock_timestamp())))::bigint";
        return {
            // $1 name, $2 owner, $3 ttl ms, $4 holder, $5 limit N, $6 admitted by the turnstile, $7
            // turnstile key. Takes a free or expired permit slot (1..N; SKIP LOCKED: slots another
            // statement is taking are passed over) and the next fence from slot 0, whose stored limit
            // must equal N — unless a fair waiter is queued in the semaphore's turnstile and this
            // acquirer is not the one it admitted (no barging past the queue, a releaser's re-acquire
            // included). Returns (fence or NULL, the stored limit or NULL when the semaphore has no
            // slots yet, ms until the first permit expires).
            {"permit_acquire", fmt::format(
                 "WITH free AS (SELECT slot FROM {0} WHERE kind = 'P' AND name = $1 AND slot BETWEEN 1 AND $5"
                 "  AND (owner IS NULL OR expiry <= clock_timestamp())"
                 "  AND ($6::bool OR NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.mode = 'ExclusiveLock'"
                 "   AND l.objsubid = 1 AND l.classid::bigint = (($7::bigint >> 32) & 4294967295)"
                 "   AND l.objid::bigint = ($7::bigint & 4294967295)"
                 "   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())))"
                 "  ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED),"
                 " hdr AS (UPDATE {0} SET fence = fence + 1 WHERE kind = 'P' AND name = $1 AND slot = 0 AND permits = $5"
                 "  AND EXISTS (SELECT 1 FROM free) RETURNING fence),"
                 " taken AS (UPDATE {0} h SET owner = $2, fence = hdr.fence, expiry = {1}, holder = $4, acquired_at = clock_timestamp()"
                 "  FROM hdr, free WHERE h.kind = 'P' AND h.name = $1 AND h.slot = free.slot RETURNING h.fence)"
                 " SELECT (SELECT fence FROM taken), (SELECT permits FROM {0} WHERE kind = 'P' AND name = $1 AND slot = 0),"
                 "  (SELECT {2} FROM {0} WHERE kind = 'P' AND name = $1 AND slot BETWEEN 1 AND $5 AND owner IS NOT NULL)",
                 H, ttl, fmt::format(ms_left, "min(expiry)"))},
            // $1 name, $2 limit N: the semaphore's slots 0..N, its limit stored in slot 0 (also when
            // a break forgot it).
            {"permit_create", fmt::format(
                 "WITH hdr AS (INSERT INTO {0} AS h (kind, name, slot, permits, fence) VALUES ('P', $1, 0, $2, 0)"
                 "  ON CONFLICT (kind, name, slot) DO UPDATE SET permits = excluded.permits WHERE h.permits IS NULL RETURNING 1)"
                 " INSERT INTO {0} (kind, name, slot, fence) SELECT 'P', $1, g, 0 FROM generate_series(1, $2::int) g"
                 " WHERE EXISTS (SELECT 1 FROM hdr) ON CONFLICT (kind, name, slot) DO NOTHING", H)},
            // $1 name, $2 owner, $3 channel → one row when released (and waiters notified).
            {"permit_release", fmt::format(
                 "WITH released AS (UPDATE {0} SET owner = NULL, expiry = NULL"
                 " WHERE kind = 'P' AND name = $1 AND slot > 0 AND owner = $2 RETURNING 1)"
                 " SELECT pg_notify($3, '') FROM released", H)},
            // $1 names[], $2 owners[], $3 ttls[] → the owners of permits extended.
            {"permit_renew", fmt::format(
                 "UPDATE {0} AS h SET expiry = clock_timestamp() + r.ttl * interval '1 millisecond'"
                 " FROM unnest($1::text[], $2::text[], $3::float8[]) AS r(name, owner, ttl)"
                 " WHERE h.kind = 'P' AND h.slot > 0 AND h.name = r.name AND h.owner = r.owner RETURNING h.owner", H)},
            // $1 kind, $2 name, $3 owner → the fence when the holder row carries our token, unexpired.
            {"holder_read_back", fmt::format(
                 "SELECT fence FROM {0} WHERE kind = $1 AND name = $2 AND owner = $3 AND slot > 0 AND expiry > clock_timestamp()", H)},
        };
    }

    // Lease mode: holders, list and break, and the shared turnstile.
    std::vector<std::pair<std::string, std::string>> admin_statements() const {
        const std::string& T = lease_table;
        const std::string& H = holders_table;
        const std::string ms_left = "GREATEST(0, ceil(1000 * extract(epoch FROM {} - clock_timestamp())))::bigint";
        return {
            // $1 prefix, $2 one name only (true) or every name starting with $1 → name, kind
            // (0 exclusive, 1 shared, 2 permit), limit, owner, fence, ms left: every current holder.
            {"holders", fmt::format(
                 "SELECT name, 0, NULL::integer, owner, fence, {2} FROM {0}"
                 " WHERE owner IS NOT NULL AND owner <> 'shared' AND expiry > clock_timestamp()"
                 "  AND CASE WHEN $2::bool THEN name = $1 ELSE left(name, length($1)) = $1 END"
                 " UNION ALL SELECT h.name, 1, NULL, h.owner, h.fence, {3} FROM {1} h JOIN {0} t ON t.name = h.name"
                 " WHERE h.kind = 'S' AND h.owner IS NOT NULL AND h.expiry > clock_timestamp() AND t.owner = 'shared'"
                 "  AND h.fence >= coalesce(t.generation, 0)"
                 "  AND t.expiry > clock_timestamp() AND CASE WHEN $2::bool THEN h.name = $1 ELSE left(h.name, length($1)) = $1 END"
                 " UNION ALL SELECT h.name, 2, s.permits, h.owner, h.fence, {3} FROM {1} h"
                 "  JOIN {1} s ON s.kind = 'P' AND s.name = h.name AND s.slot = 0"
                 " WHERE h.kind = 'P' AND h.slot BETWEEN 1 AND s.permits AND h.owner IS NOT NULL AND h.expiry > clock_timestamp()"
                 "  AND CASE WHEN $2::bool THEN h.name = $1 ELSE left(h.name, length($1)) = $1 END",
                 T, H, fmt::format(ms_left, "expiry"), fmt::format(ms_left, "h.expiry"))},
            // → whether this role may break locks: DELETE on both tables (granted to administrators).
            {"may_break", fmt::format("SELECT has_table_privilege({0}, 'DELETE') AND has_table_privilege({1}, 'DELETE')",
                                      quote_literal(T), quote_literal(H))},
            // $1 name, $2 channel → (the exclusive holder removed: 0 or 1, the fence the row now has
            // or NULL when the lock has no row, notified). The lock's row is freed with its fence
            // bumped (the next grant's token is higher than any broken holder's, and the next
            // generation of readers begins above every broken reader's fence); its readers are
            // removed by break_readers, the next statement of the same transaction (break_begin …
            // break_commit): this one's snapshot was taken before it waited for the row's lock and
            // would miss a reader that committed meanwhile; the next one's sees every reader that
            // committed, and none can come or go while the transaction keeps the row locked, so the
            // count is exact. A reader row a break leaves (a break's first statement committed alone
            // by an older dlock) is harmless: it belongs to an ended generation (shared_acquire).
            {"break_lock", fmt::format(
                 "WITH old AS (SELECT owner, expiry FROM {0} WHERE name = $1 FOR UPDATE),"
                 " freed AS (UPDATE {0} t SET owner = NULL, expiry = NULL, holder = NULL, readers = 0, fence = t.fence + 1,"
                 "  released_at = clock_timestamp() FROM old WHERE t.name = $1 RETURNING old.owner, old.expiry, t.fence)"
                 " SELECT (SELECT count(*) FROM freed WHERE owner IS NOT NULL AND owner <> 'shared' AND expiry > clock_timestamp()),"
                 "  (SELECT fence FROM freed),"
                 "  (SELECT count(*) FROM (SELECT pg_notify($2, '') FROM freed) n)", T)},
            // $1 name, $2 the fence break_lock gave the row → live readers removed: every reader row of
            // the broken generations (fence below $2; a reader granted after the break has a higher
            // one). The lock's row is locked first (the lock order of the shared statements; in the
            // break's transaction, break_lock has locked it already).
            {"break_readers", fmt::format(
                 "WITH l AS (SELECT 1 FROM {0} WHERE name = $1 FOR UPDATE),"
                 " gone AS (DELETE FROM {1} h WHERE h.kind = 'S' AND h.name = $1 AND h.fence < $2::bigint AND EXISTS (SELECT 1 FROM l)"
                 "  RETURNING h.owner IS NOT NULL AND h.expiry > clock_timestamp() AS live)"
                 " SELECT count(*) FROM gone WHERE live", T, H)},
            // The break of a lock is one transaction: break_begin, break_bound, break_lock,
            // break_readers, break_commit.
            {"break_begin", "BEGIN ISOLATION LEVEL READ COMMITTED"},
            // Run first in the break's transaction, before it locks anything: the server ends the
            // session if it sits idle in this transaction for break_idle_ms (a breaker stopped or cut
            // off between its statements), which rolls the break back and frees the lock's row;
            // statement_timeout does not apply between statements. For this transaction only
            // (set_config's local form): the pooled session is as configured after COMMIT.
            {"break_bound", fmt::format("SELECT set_config('idle_in_transaction_session_timeout', '{}', true)", break_idle_ms)},
            {"break_commit", "COMMIT"},
            // $1 name, $2 channel → permits removed. The permits go and the stored limit is forgotten;
            // slot 0 stays with its fence bumped.
            {"break_semaphore", fmt::format(
                 "WITH permits AS (DELETE FROM {0} WHERE kind = 'P' AND name = $1 AND slot > 0"
                 "  RETURNING owner IS NOT NULL AND expiry > clock_timestamp() AS live),"
                 " hdr AS (UPDATE {0} SET permits = NULL, fence = fence + 1 WHERE kind = 'P' AND name = $1 AND slot = 0 RETURNING 1)"
                 " SELECT (SELECT count(*) FROM permits WHERE live), (SELECT count(*) FROM hdr),"
                 "  (SELECT count(*) FROM (SELECT pg_notify($2, '') FROM hdr) n)", H)},
            // The shared turnstile: a reader waits in the name's queue in shared mode (behind queued writers).
            {"turnstile_enter_shared", "WITH setting AS (SELECT set_config('lock_timeout', $2, true), " +
                                           idle_limit(queue_idle_ms) + ") SELECT pg_advisory_lock_shared($1::bigint) FROM setting"},
            {"turnstile_leave_shared", "SELECT pg_advisory_unlock_shared($1::bigint), " + idle_limit(0)},
        };
    }

    // The statements of shared holds, permits, holders, list and break (lease mode with the holders
    // table), in this order.
    std::vector<std::pair<std::string, std::string>> shared() const {
        auto all = shared_lock_statements();
        for (auto& statement : permit_statements()) all.push_back(std::move(statement));
        for (auto& statement : admin_statements()) all.push_back(std::move(statement));
        return all;
    }

    // A quoted SQL string literal for text dlock composes itself (quoted table names).
    static std::string quote_literal(const std::string& text) {
        std::string out = "'";
        for (char c : text) {
            if (c == '\'') out += '\'';
            out += c;
        }
        return out + "'";
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
            // server's queue, SQLSTATE 55P03 when lock_timeout runs out. A free lock is taken
            // without setting lock_timeout (the try never passes a queued waiter: the server refuses
            // a request that conflicts with its queue); CASE runs its branches in order.
            {"lock", fmt::format("WITH locked AS (SELECT CASE WHEN pg_try_advisory_lock($1::bigint) THEN true"
                                 " WHEN set_config('lock_timeout', $5, true) IS NULL THEN false"
                                 " ELSE pg_advisory_lock($1::bigint)::text IS NOT NULL END AS ok),"
                                 " bumped AS ({}) SELECT fence FROM bumped",
                                 fmt::format(bump, "WHERE ok"))},
            // Shared holds of the same key: any number together, none beside an exclusive one. The
            // server's queue is FIFO across modes: a shared request waits behind a queued exclusive one.
            {"try_lock_shared", fmt::format("WITH locked AS (SELECT pg_try_advisory_lock_shared($1::bigint) AS ok),"
                                            " bumped AS ({}) SELECT fence FROM bumped",
                                            fmt::format(bump, "WHERE ok"))},
            {"lock_shared", fmt::format("WITH locked AS (SELECT CASE WHEN pg_try_advisory_lock_shared($1::bigint) THEN true"
                                        " WHEN set_config('lock_timeout', $5, true) IS NULL THEN false"
                                        " ELSE pg_advisory_lock_shared($1::bigint)::text IS NOT NULL END AS ok),"
                                        " bumped AS ({}) SELECT fence FROM bumped",
                                        fmt::format(bump, "WHERE ok"))},
            {"unlock_shared", "SELECT pg_advisory_unlock_shared($1::bigint)"},
            {"unlock", "SELECT pg_advisory_unlock($1::bigint)"},
            {"unlock_all", "SELECT pg_advisory_unlock_all()"},
            // $1 name or prefix, $2 one name only → name, owner, fence, holder_pid of each fence row
            // (the last dlock grant of each name).
            {"fence_rows", fmt::format("SELECT name, owner, fence, holder_pid FROM {} WHERE"
                                       " CASE WHEN $2::bool THEN name = $1 ELSE left(name, length($1)) = $1 END", A)},
            // → key, pid, shared of every advisory lock granted in this database.
            {"granted_keys", "SELECT ((l.classid::bigint << 32) | l.objid::bigint), l.pid, l.mode = 'ShareLock' FROM pg_locks l"
                             " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
                             " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"},
            // $1 key → 1 when this session holds it.
            {"check", fmt::format("SELECT count(*) FROM pg_locks l WHERE {} AND l.pid = pg_backend_pid()", key_match)},
            // $1 key, $2 name → owner (NULL unless the session that took it last still holds it),
            // fence, held (by any session: earlier shared holders, or an application holding the key
            // itself). The server's lock table decides, never the fence row alone.
            {"inspect", fmt::format("WITH db AS (SELECT oid FROM pg_database WHERE datname = current_database()),"
                                    " f AS (SELECT owner, fence, holder_pid FROM {1} WHERE name = $2),"
                                    " g AS (SELECT l.pid FROM pg_locks l, db WHERE {0} AND l.database = db.oid)"
                                    " SELECT CASE WHEN EXISTS (SELECT 1 FROM g, f WHERE g.pid = f.holder_pid) THEN f.owner END,"
                                    " coalesce(f.fence, 0), EXISTS (SELECT 1 FROM g)"
                                    " FROM (SELECT 1) one LEFT JOIN f ON true", key_match, A)},
        };
    }
};

}  // namespace dlock::sql
