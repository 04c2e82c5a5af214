// The `sql` backend's pure parts, without a server (plugins/sql: dlock_sql_shared and the
// header-only lease_state.hpp): the MySQL dialect's DSN and GET_LOCK names, the stable hash every client
// derives advisory keys and channels from, the DSN query keys dlock removes before libpq reads the
// DSN, the statement deadline of an acquire, and the lease-mode validity bookkeeping.
#include "lease_state.hpp"
#include "mysql_client.hpp"
#include "mysql_names.hpp"
#include "sql_shared.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

using namespace dlock::sql;

namespace {

// ---- MySQL GET_LOCK names (mysql::named_lock_key) ---------------------------------------------------

TEST(MysqlNamedLockKey, KeepsAShortPlainNameReadable) {
    EXPECT_EQ(mysql::named_lock_key("orders"), "dlock:orders");
    EXPECT_EQ(mysql::named_lock_key("a.b_c/d-9"), "dlock:a.b_c/d-9");
}

TEST(MysqlNamedLockKey, ReadableUpTo58BytesThenHashed) {
    const std::string at_limit(58, 'x');
    EXPECT_EQ(mysql::named_lock_key(at_limit), "dlock:" + at_limit);
    EXPECT_EQ(mysql::named_lock_key(at_limit).size(), 64u);  // GET_LOCK's limit
    const std::string key = mysql::named_lock_key(at_limit + "x");
    EXPECT_EQ(key.rfind("dlock#", 0), 0u);
    EXPECT_EQ(key, "dlock#" + std::string(25, 'x') + "#" + key.substr(6 + 25 + 1));
    EXPECT_EQ(key.size(), 6u + 25 + 1 + 32);
}

TEST(MysqlNamedLockKey, HashesNamesWithOtherCharactersWithTheSha256Prefix) {
    // Upper case would meet the server's case folding: hashed, its unsafe characters shown as `_`.
    EXPECT_EQ(mysql::named_lock_key("Orders/EU"), "dlock#_rders/__#5d5a65ff175982511e8a10c70115aafa");
    // The empty name has no readable form.
    EXPECT_EQ(mysql::named_lock_key(""), "dlock##e3b0c44298fc1c149afbf4c8996fb924");
}

TEST(MysqlNamedLockKey, NamesThatLookAlikeStayApart) {
    const std::set<std::string> keys = {mysql::named_lock_key("A"), mysql::named_lock_key("a"), mysql::named_lock_key("_"),
                                        mysql::named_lock_key("B"), mysql::named_lock_key(std::string("a\0", 2))};
    EXPECT_EQ(keys.size(), 5u);
    for (const std::string& key : keys) EXPECT_LE(key.size(), 64u) << key;
}

// ---- MySQL DSN (mysql::parse_dsn) -----------------------------------------------------------------

// The status of the failure `parse` throws (0: none), and its message in `message`.
template <typename F>
int failure_of(F&& parse, std::string* message = nullptr) {
    try {
        parse();
    } catch (const failure& f) {
        if (message) *message = f.message;
        return f.status;
    }
    return 0;
}

TEST(MysqlDsn, TellsItsSchemeApart) {
    EXPECT_TRUE(mysql::is_mysql_dsn("mysql://h/db"));
    EXPECT_TRUE(mysql::is_mysql_dsn("MariaDB://h"));
    EXPECT_FALSE(mysql::is_mysql_dsn("postgresql://h/db"));
    EXPECT_FALSE(mysql::is_mysql_dsn("mysql"));
    EXPECT_FALSE(mysql::is_mysql_dsn("host=mysql"));
}

TEST(MysqlDsn, ReadsEveryPartAndDecodesEscapes) {
    mysql::settings s;
    mysql::parse_dsn("mysql://app%40eu:p%40ss%3Aword@db.example:3307/orders?sslmode=verify-full&ssl-ca=/ca.pem", s);
    EXPECT_EQ(s.user, "app@eu");
    EXPECT_EQ(s.password, "p@ss:word");
    EXPECT_EQ(s.host, "db.example");
    EXPECT_EQ(s.port, 3307u);
    EXPECT_EQ(s.database, "orders");
    EXPECT_EQ(s.sslmode, "verify-full");
    EXPECT_EQ(s.sslrootcert, "/ca.pem");
    EXPECT_EQ(s.server, "db.example:3307/orders");
}

TEST(MysqlDsn, TheOptionsOverrideTheDsn) {
    mysql::settings s;
    s.password = "from-option";
    s.sslmode = "disable";
    mysql::parse_dsn("mysql://u:from-dsn@h/db?sslmode=require", s);
    EXPECT_EQ(s.password, "from-option");
    EXPECT_EQ(s.sslmode, "disable");
}

TEST(MysqlDsn, Ipv6AndUnixSockets) {
    mysql::settings v6;
    mysql::parse_dsn("mariadb://[::1]:3308", v6);
    EXPECT_EQ(v6.host, "::1");
    EXPECT_EQ(v6.port, 3308u);
    EXPECT_EQ(v6.server, "::1:3308/(no database)");
    mysql::settings local;
    mysql::parse_dsn("mysql://root@localhost/db?socket=/run/mysqld/mysqld.sock", local);
    EXPECT_EQ(local.socket, "/run/mysqld/mysqld.sock");
    EXPECT_EQ(local.server, "/run/mysqld/mysqld.sock:3306/db");
}

TEST(MysqlDsn, RefusesWhatItCannotUseWithoutQuotingThePassword) {
    const auto refused = [](const std::string& dsn, std::string* message = nullptr) {
        mysql::settings s;
        return failure_of([&] { mysql::parse_dsn(dsn, s); }, message);
    };
    EXPECT_EQ(refused("postgresql://h/db"), DLOCK_CONFIG);
    EXPECT_EQ(refused("mysql://a,b/db"), DLOCK_CONFIG);
    EXPECT_EQ(refused("mysql://h:0/db"), DLOCK_CONFIG);
    EXPECT_EQ(refused("mysql://h:65536/db"), DLOCK_CONFIG);
    EXPECT_EQ(refused("mysql://h/db/more"), DLOCK_CONFIG);
    EXPECT_EQ(refused("mysql://[::1/db"), DLOCK_CONFIG);
    EXPECT_EQ(refused("mysql://h/db?sslmode=prefer"), DLOCK_CONFIG);
    EXPECT_EQ(refused("mysql://h/db?charset=utf8"), DLOCK_CONFIG);
    std::string message;
    EXPECT_EQ(refused("mysql://u:secret%zz@h/db", &message), DLOCK_CONFIG);
    EXPECT_EQ(message.find("secret"), std::string::npos) << message;
    EXPECT_NE(message.find("the password"), std::string::npos) << message;
}

// ---- hash64 ---------------------------------------------------------------------------------------

TEST(SqlHash64, IsTheSameInEveryClient) {
    // Pinned: advisory keys and channel names are shared with other clients and other dlock versions.
    EXPECT_EQ(hash64(""), 0xefd01f60ba992926ULL);
    EXPECT_EQ(hash64("dlock"), 0xb97fc13f503a6819ULL);
    EXPECT_EQ(hash64(std::string("turnstile\0x", 11)), 0xd67490d2df27862aULL);
}

TEST(SqlHash64, PrefixHashesLikeTheWholeString) {
    const hash64_prefix prefixed(std::string("\"public\".\"dlock_locks_advisory\"") + '\0');
    for (const std::string name : {"", "a", "orders/eu", "ключ"})
        EXPECT_EQ(prefixed(name), hash64(std::string("\"public\".\"dlock_locks_advisory\"") + '\0' + name)) << name;
}

// ---- strip_query_keys -----------------------------------------------------------------------------

TEST(SqlStripQueryKeys, DropsDlocksKeysAndKeepsLibpqs) {
    const std::vector<std::string> drop = {"mode", "table"};
    EXPECT_EQ(strip_query_keys("postgresql://u@h:5432/db?mode=lease&sslmode=require&table=t", drop),
              "postgresql://u@h:5432/db?sslmode=require");
    EXPECT_EQ(strip_query_keys("postgresql://u@h/db?mode=advisory&table=t", drop), "postgresql://u@h/db");
    EXPECT_EQ(strip_query_keys("postgresql://u@h/db", drop), "postgresql://u@h/db");
    // A keyword string has no query part: left as it is.
    EXPECT_EQ(strip_query_keys("host=h dbname=db?mode=lease", drop), "host=h dbname=db?mode=lease");
}

// ---- statement_deadline_within --------------------------------------------------------------------

TEST(SqlStatementDeadline, TheAcquiresDeadlineWhenSoonerAndAhead) {
    const int64_t now = now_ns();
    const int64_t limit_ms = 5000;
    const int64_t soon = now + 1'000'000'000;
    EXPECT_EQ(statement_deadline_within(limit_ms, soon), soon);
    // Try once (0) and a deadline already passed: one whole attempt.
    EXPECT_GE(statement_deadline_within(limit_ms, 0), now + limit_ms * 1'000'000);
    EXPECT_GE(statement_deadline_within(limit_ms, now - 1), now + limit_ms * 1'000'000);
    // A later deadline: the client-side limit.
    const int64_t late = statement_deadline_within(limit_ms, forever_ns);
    EXPECT_GE(late, now + limit_ms * 1'000'000);
    EXPECT_LT(late, forever_ns);
}

// ---- lease_state ----------------------------------------------------------------------------------

struct test_hold : lease_state {
    std::string owner;
};

TEST(SqlLeaseState, ValidityLessTheDriftAllowance) {
    EXPECT_EQ(valid_until(1'000'000'000, 10'000), 1'000'000'000 + 10'000'000'000 - dlock::plugin_kit::drift_ns(10'000));
    lease_state s;
    EXPECT_EQ(s.granted(5, 1000), valid_until(5, 1000));
    EXPECT_EQ(s.valid_until_ns, valid_until(5, 1000));
}

TEST(SqlLeaseState, AReleaseRetryFindingNothingIsReleasedOnlyIfSentWhileValid) {
    lease_state s;
    s.granted(0, 1000);
    EXPECT_EQ(s.release_answered(true), DLOCK_OK);
    EXPECT_EQ(s.release_answered(false), DLOCK_LOST);
    s.release_unanswered(s.valid_until_ns);  // sent as the lease ran out: proves nothing
    EXPECT_EQ(s.release_answered(false), DLOCK_LOST);
    s.release_unanswered(s.valid_until_ns - 1);
    EXPECT_EQ(s.release_answered(false), DLOCK_OK);
}

TEST(SqlLeaseState, RenewalsBecomeStatusesByOwnerToken) {
    test_hold ours, lost;
    ours.owner = "a";
    lost.owner = "b";
    ours.granted(0, 1000);
    lost.granted(0, 500);
    std::vector<dlock_renewal> renewals(2);
    renewals[0].hold = reinterpret_cast<dlock_hold*>(&ours);
    renewals[0].ttl_ms = 2000;
    renewals[1].hold = reinterpret_cast<dlock_hold*>(&lost);
    renewals[1].ttl_ms = 3000;
    const auto of = [](dlock_hold* h) { return reinterpret_cast<test_hold*>(h); };
    // Answered no later than the first lease runs out.
    EXPECT_EQ(renewal_deadline(INT64_MAX, renewals.data(), 2, of), lost.valid_until_ns);
    EXPECT_EQ(renewal_deadline(1, renewals.data(), 2, of), 1);
    record_renewals(renewals.data(), 0, 2, 100, {"a"}, of);
    EXPECT_EQ(renewals[0].status, DLOCK_OK);
    EXPECT_EQ(renewals[0].valid_until_ns, valid_until(100, 2000));
    EXPECT_EQ(ours.valid_until_ns, valid_until(100, 2000));
    EXPECT_EQ(renewals[1].status, DLOCK_LOST);
    EXPECT_EQ(renewals[1].valid_until_ns, valid_until(100, 3000));
    EXPECT_EQ(lost.valid_until_ns, valid_until(0, 500));  // a lost lease's hold keeps what it knew
}

}  // namespace
