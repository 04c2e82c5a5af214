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
