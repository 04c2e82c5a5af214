// mysql_statements.hpp — the SQL text of the `sql` backend's MySQL/MariaDB dialect, for both modes.
// Shared by the plugin and the benchmark probes, which time the same statements through the same
// client. Lock names, owners and lock keys are always parameters (?); only the configured, quoted
// table names are part of the text. Time is the server's: UTC_TIMESTAMP(6), fixed at the start of
// each statement (never the session's time zone, which a DST change could move).
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

namespace dlock::sql::mysql {

// A `quoted` MySQL identifier (embedded backquotes doubled).
inline std::string quote_identifier(const std::string& identifier) {
    std::string out = "`";
    for (char c : identifier) {
        if (c == '`') out += '`';
        out += c;
    }
    return out + "`";
}

struct statements {
    std::string lease_table, named_table, version_table;  // quoted, database-qualified when configured
    std::string holders_table;  // quoted, database-qualified when configured: semaphore permits

    // Schema version 1. Names are VARBINARY: compared byte by byte, never by a collation, so
    // distinct names never compare equal. InnoDB, so every statement is atomic and durable.
    std::vector<std::string> tables() const {
        return {
            fmt::format("CREATE TABLE IF NOT EXISTS {} (component VARCHAR(64) CHARACTER SET ascii PRIMARY KEY, "
                        "version INT NOT NULL) ENGINE=InnoDB", version_table),
            fmt::format("CREATE TABLE IF NOT EXISTS {} (name VARBINARY(1024) NOT NULL PRIMARY KEY, "
                        "owner CHAR(32) CHARACTER SET ascii NULL, fence BIGINT UNSIGNED NOT NULL, expiry DATETIME(6) NULL, "
                        "holder VARBINARY(255) NULL, acquired_at DATETIME(6) NULL) ENGINE=InnoDB", lease_table),
            fmt::format("CREATE TABLE IF NOT EXISTS {} (name VARBINARY(1024) NOT NULL PRIMARY KEY, "
                        "fence BIGINT UNSIGNED NOT NULL, owner CHAR(32) CHARACTER SET ascii NULL, holder VARBINARY(255) NULL, "
                        "holder_connection BIGINT UNSIGNED NULL, acquired_at DATETIME(6) NULL) ENGINE=InnoDB", named_table),
        };
    }
    // ? version → the version dlock's tables carry (after recording ours when none is).
    std::string record_version() const {
        return fmt::format("INSERT IGNORE INTO {} (component, version) VALUES ('dlock', ?)", version_table);
    }
    std::string read_version() const { return fmt::format("SELECT version FROM {} WHERE component = 'dlock'", version_table); }

    std::vector<std::pair<std::string, std::string>> lease() const {
        const std::string& T = lease_table;
        return {
            // ? name, owner, ttl µs, holder. One statement inserts the row or takes over a row that
            // is free, expired, or already ours (a retry after an unknown outcome), bumping the
            // fence: affected rows 1 (inserted) or 2 (taken) mean acquired, with the fence in
            // LAST_INSERT_ID; 0 means held by another. ON DUPLICATE KEY UPDATE assigns left to
            // right, each seeing the columns already assigned: `owner` goes first, from the old
            // row's owner and expiry, and the others follow it.
            {"acquire", fmt::format(
                 "INSERT INTO {0} (name, owner, fence, expiry, holder, acquired_at)"
                 " VALUES (?, ?, LAST_INSERT_ID(1), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, UTC_TIMESTAMP(6))"
                 " ON DUPLICATE KEY UPDATE"
                 "  owner = IF(owner IS NULL OR expiry <= UTC_TIMESTAMP(6) OR owner = VALUES(owner), VALUES(owner), owner),"
                 "  fence = IF(owner = VALUES(owner), LAST_INSERT_ID(fence + 1), fence),"
                 "  expiry = IF(owner = VALUES(owner), VALUES(expiry), expiry),"
                 "  holder = IF(owner = VALUES(owner), VALUES(holder), holder),"
                 "  acquired_at = IF(owner = VALUES(owner), VALUES(acquired_at), acquired_at)", T)},
            // ? name, owner → 1 affected row when released, 0 when the row is no longer ours.
            {"release", fmt::format("UPDATE {} SET owner = NULL, expiry = NULL, holder = NULL WHERE name = ? AND owner = ?", T)},
            // ? ttl µs, name, owner → 1 affected row when extended (the expiry always moves: µs).
            {"renew", fmt::format("UPDATE {} SET expiry = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE name = ? AND owner = ?", T)},
            // ? name, owner → the fence when the row carries our token and has not expired.
            {"read_back", fmt::format("SELECT fence FROM {} WHERE name = ? AND owner = ? AND expiry > UTC_TIMESTAMP(6)", T)},
            // ? name → owner, fence, held, ms left.
            {"inspect", fmt::format(
                 "SELECT owner, fence, owner IS NOT NULL AND expiry > UTC_TIMESTAMP(6),"
                 " GREATEST(0, CEIL(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expiry) / 1000)) FROM {} WHERE name = ?", T)},
        };
    }

    // Lease mode's semaphores, beside the tables of schema version 1 (created when the user may; an
    // older dlock ignores it). Semaphore `name`: slot 0 keeps the limit and the fencing counter,
    // slots 1..limit are the permits (created as they are first needed).
    std::string holders_table_ddl() const {
        return fmt::format("CREATE TABLE IF NOT EXISTS {} (kind CHAR(1) CHARACTER SET ascii NOT NULL, "
                           "name VARBINARY(1024) NOT NULL, slot INT NOT NULL, permits INT NULL, "
                           "owner CHAR(32) CHARACTER SET ascii NULL, fence BIGINT UNSIGNED NOT NULL, expiry DATETIME(6) NULL, "
                           "holder VARBINARY(255) NULL, acquired_at DATETIME(6) NULL, PRIMARY KEY (kind, name, slot)) ENGINE=InnoDB",
                           holders_table);
    }

    // A permit is taken in one transaction that first locks the semaphore's slot 0 (every acquirer
    // of the semaphore queues there), then reads and writes with locking (current) reads only.
    std::vector<std::pair<std::string, std::string>> permits() const {
        const std::string& H = holders_table;
        return {
            // ? name → limit (NULL: forgotten by a break), fence. Locks slot 0.
            {"permit_header", fmt::format("SELECT permits, fence FROM {} WHERE kind = 'P' AND name = ? AND slot = 0 FOR UPDATE", H)},
            // ? name, limit: a semaphore's slot 0 (no effect when it exists).
            {"permit_create", fmt::format("INSERT IGNORE INTO {} (kind, name, slot, permits, fence) VALUES ('P', ?, 0, ?, 0)", H)},
            // ? limit, name: stores the limit a break forgot.
            {"permit_set_limit", fmt::format("UPDATE {} SET permits = ? WHERE kind = 'P' AND name = ? AND slot = 0 AND permits IS NULL", H)},
            // ? name, limit → the lowest free or expired permit slot within the limit.
            {"permit_free_slot", fmt::format("SELECT slot FROM {} WHERE kind = 'P' AND name = ? AND slot BETWEEN 1 AND ?"
                                             " AND (owner IS NULL OR expiry <= UTC_TIMESTAMP(6)) ORDER BY slot LIMIT 1 FOR UPDATE", H)},
            // ? name, limit → slots that exist, ms until the first held permit expires.
            {"permit_slots", fmt::format("SELECT COUNT(*), GREATEST(0, CEIL(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6),"
                                         " MIN(IF(owner IS NULL, NULL, expiry))) / 1000)) FROM {}"
                                         " WHERE kind = 'P' AND name = ? AND slot BETWEEN 1 AND ? FOR UPDATE", H)},
            // ? name: the next fence, in LAST_INSERT_ID.
            {"permit_next_fence", fmt::format("UPDATE {} SET fence = LAST_INSERT_ID(fence + 1) WHERE kind = 'P' AND name = ? AND slot = 0", H)},
            // ? name, slot, owner, fence, ttl µs, holder: takes (or creates) a slot.
            {"permit_take", fmt::format("INSERT INTO {} (kind, name, slot, owner, fence, expiry, holder, acquired_at)"
                                        " VALUES ('P', ?, ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, UTC_TIMESTAMP(6))"
                                        " ON DUPLICATE KEY UPDATE owner = VALUES(owner), fence = VALUES(fence), expiry = VALUES(expiry),"
                                        "  holder = VALUES(holder), acquired_at = VALUES(acquired_at)", H)},
            // ? name, owner → 1 affected row when released.
            {"permit_release", fmt::format("UPDATE {} SET owner = NULL, expiry = NULL, holder = NULL"
                                           " WHERE kind = 'P' AND name = ? AND slot > 0 AND owner = ?", H)},
            // ? ttl µs, name, owner → 1 affected row when extended.
            {"permit_renew", fmt::format("UPDATE {} SET expiry = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND"
                                         " WHERE kind = 'P' AND name = ? AND slot > 0 AND owner = ?", H)},
            // ? exact (1: the one name ?, 0: every name starting with ?), name, name (twice more for
            // the permits) → name, kind (0 exclusive, 2 permit), limit, owner, fence, ms left.
            {"holders", fmt::format(
                 "SELECT name, 0, NULL, owner, fence, GREATEST(0, CEIL(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expiry) / 1000))"
                 " FROM {0} WHERE owner IS NOT NULL AND expiry > UTC_TIMESTAMP(6) AND IF(?, name = ?, LEFT(name, LENGTH(?)) = ?)"
                 " UNION ALL SELECT h.name, 2, s.permits, h.owner, h.fence,"
                 "  GREATEST(0, CEIL(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), h.expiry) / 1000))"
                 " FROM {1} h JOIN {1} s ON s.kind = 'P' AND s.name = h.name AND s.slot = 0"
                 " WHERE h.kind = 'P' AND h.slot BETWEEN 1 AND s.permits AND h.owner IS NOT NULL AND h.expiry > UTC_TIMESTAMP(6)"
                 "  AND IF(?, h.name = ?, LEFT(h.name, LENGTH(?)) = ?)", lease_table, H)},
            // Break, in one transaction. ? name → (held by a live exclusive holder); locks the lease row.
            {"break_lock_read", fmt::format("SELECT owner IS NOT NULL AND expiry > UTC_TIMESTAMP(6) FROM {} WHERE name = ? FOR UPDATE",
                                            lease_table)},
            // ? name: frees the lease row, its fence bumped.
            {"break_lock_free", fmt::format("UPDATE {} SET owner = NULL, expiry = NULL, holder = NULL, fence = fence + 1 WHERE name = ?",
                                            lease_table)},
            // ? name: removes a lock's holder rows (none in this dialect, which has no shared locks);
            // run so that breaking a lock needs DELETE, as breaking a semaphore does.
            {"break_lock_holders", fmt::format("DELETE FROM {} WHERE kind = 'S' AND name = ?", H)},
            // ? name → live permits; locks the semaphore's rows.
            {"break_permits_read", fmt::format("SELECT COUNT(IF(owner IS NOT NULL AND expiry > UTC_TIMESTAMP(6), 1, NULL)) FROM {}"
                                               " WHERE kind = 'P' AND name = ? FOR UPDATE", H)},
            // ? name: removes the permits.
            {"break_permits_delete", fmt::format("DELETE FROM {} WHERE kind = 'P' AND name = ? AND slot > 0", H)},
            // ? name: forgets the limit, bumps the fence.
            {"break_permits_forget", fmt::format("UPDATE {} SET permits = NULL, fence = fence + 1 WHERE kind = 'P' AND name = ? AND slot = 0", H)},
            // ? name, owner → the fence when the permit row carries our token and has not expired.
            {"permit_read_back", fmt::format("SELECT fence FROM {} WHERE kind = 'P' AND name = ? AND slot > 0 AND owner = ?"
                                             " AND expiry > UTC_TIMESTAMP(6)", H)},
            // ? owner, name → the same, as one row when slot 0 exists (the fence, or NULL). A locking
            // read (autocommit: its locks go at its end) that takes slot 0 first (the LEFT JOIN's
            // outer side), so it waits for the end of any transaction holding slot 0 — an acquire
            // whose COMMIT may still come — and then reads the permits as committed.
            {"permit_read_back_after_end", fmt::format("SELECT h.fence FROM {0} s LEFT JOIN {0} h ON h.kind = 'P' AND h.name = s.name"
                                             " AND h.slot > 0 AND h.owner = ? AND h.expiry > UTC_TIMESTAMP(6)"
                                             " WHERE s.kind = 'P' AND s.name = ? AND s.slot = 0 FOR UPDATE", H)},
        };
    }

    std::vector<std::pair<std::string, std::string>> named() const {
        const std::string& N = named_table;
        return {
            // ? name, owner, holder, key, timeout s. GET_LOCK waits in the server for up to the
            // timeout (0: try once); only when it grants the lock does the SELECT yield its row,
            // which inserts or bumps the name's fence counter — one round trip. Affected rows 1 or
            // 2: acquired, the fence in LAST_INSERT_ID; 0: not granted within the timeout.
            {"lock", fmt::format(
                 "INSERT INTO {0} (name, fence, owner, holder, holder_connection, acquired_at)"
                 " SELECT ?, LAST_INSERT_ID(1), ?, ?, CONNECTION_ID(), UTC_TIMESTAMP(6) FROM DUAL WHERE GET_LOCK(?, ?) = 1"
                 " ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1), owner = VALUES(owner), holder = VALUES(holder),"
                 "  holder_connection = VALUES(holder_connection), acquired_at = VALUES(acquired_at)", N)},
            // ? key → 1 released, 0 held by another session, NULL no such lock.
            {"unlock", "SELECT RELEASE_LOCK(?)"},
            {"unlock_all", "SELECT RELEASE_ALL_LOCKS()"},
            // ? key → 1 when this session holds it.
            {"check", "SELECT IFNULL(IS_USED_LOCK(?) = CONNECTION_ID(), 0)"},
            // ? key, name → owner, fence, held (by the session that last took it).
            {"inspect", fmt::format("SELECT owner, fence, IFNULL(IS_USED_LOCK(?) = holder_connection, 0) FROM {} WHERE name = ?", N)},
        };
    }
};

}  // namespace dlock::sql::mysql
