// The `sql` backend's MySQL/MariaDB dialect (both modes) on the lab's real MariaDB 10.11: dialect
// selection and configuration errors, logins (a wrong password, the ed25519 account, TLS the server
// does not offer), server errors (a missing grant, a read-only server), names longer than
// GET_LOCK's 64 characters, the schema created by clients starting together, and docs/design/faults.md §13's
// MySQL equivalents: KILL CONNECTION of a named-lock holder's session (LOST), of every session of a
// lease-table holder (nothing lost), and a server restart.
#include "backend_test.hpp"

#include "dlock/lab/faults.hpp"
#include "dlock/lab/gtest.hpp"
#include "dlock/lab/proxy.hpp"

#include <dlock/dlock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace std::chrono_literals;
using dlock::lab::backend;
using clock_type = std::chrono::steady_clock;

namespace {

using dlock::test::eventually;

int64_t ms_since(clock_type::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t).count();
}

// What opening a client from YAML gave: its status and dlock_last_error().
struct open_outcome {
    int status;
    std::string message;
};

// Sets a GLOBAL server variable for one test (new sessions copy it) and restores it at the end.
struct scoped_global {
    scoped_global(dlock::lab::mariadb_client& admin, std::string name, const std::string& value)
        : admin(admin), name(std::move(name)), old(admin.query_value("SELECT @@global." + this->name).value_or("")) {
        admin.execute("SET GLOBAL " + this->name + " = " + value);
    }
    ~scoped_global() {
        try {
            admin.execute("SET GLOBAL " + name + " = " + (old.empty() ? "DEFAULT" : old));
        } catch (const std::exception& e) {
            ADD_FAILURE() << "restoring GLOBAL " << name << ": " << e.what();
        }
    }
    dlock::lab::mariadb_client& admin;
    std::string name, old;
};

class MysqlBackend : public ::testing::Test {
protected:
    void SetUp() override {
        DLOCK_LAB_REQUIRE(backend::mariadb);
        auto& env = dlock::lab::lab_environment::instance();
        if (!env.owned_lab()) GTEST_SKIP() << "attached to a `dlock-lab up`: fault controls need a lab of our own";
        lab_ = env.owned_lab();
        env.reset(backend::mariadb, true);
    }

    dlock::lab::mariadb_server& server() { return lab_->mariadb(); }
    std::string dsn() { return server().dsn(); }
    std::string port() { return std::to_string(server().client_endpoint().port); }
    std::string dsn_as(const std::string& user, const std::string& password, const std::string& scheme = "mysql") {
        return scheme + "://" + user + ":" + password + "@127.0.0.1:" + port() + "/dlock";
    }
    static std::string yaml(const std::string& dsn_text, const std::string& mode = "lease", const std::string& extra = "") {
        return "backend: sql\noptions:\n  dsn: \"" + dsn_text + "\"\n  mode: " + mode + "\n" + extra;
    }
    dlock::client open(const std::string& mode = "lease", const std::string& extra = "") {
        return dlock::client::from_yaml(yaml(dsn(), mode, extra), "mysql_test");
    }
    static open_outcome try_open(const std::string& text) {
        dlock_client* c = nullptr;
        const int status = dlock_client_open_yaml(text.c_str(), "mysql_test", &c);
        open_outcome out{status, status == DLOCK_OK ? "" : dlock_last_error()};
        dlock_client_close(c);
        return out;
    }
    std::string scalar(const std::string& sql) { return server().client().query_value(sql).value_or(""); }
    // Runs `sql` as MariaDB's root, which the lab lets in only through the server's Unix socket for
    // the OS user root (unix_socket authentication): the lab's accounts cannot GRANT.
    void as_root(const std::string& sql) {
        if (geteuid() != 0) GTEST_SKIP() << "creating accounts needs MariaDB's root, which only the OS root can be here";
        std::string output;
        const int status = dlock::lab::run_command({"mariadb", "--no-defaults", "--socket=" + (server().dir() / "data" / "mariadbd.sock").string(),
                                                    "-u", "root", "-e", sql},
                                                   &output);
        ASSERT_EQ(status, 0) << output;
    }

    // Stalls a permit acquire of `name` inside its transaction (holding slot 0's row lock) and
    // checks that another client's acquire is granted within the server's bound (below).
    void stall_a_permit_acquire_and_time_another(const std::string& name);

    dlock::lab::lab* lab_ = nullptr;
};

// ---- dialect and configuration ------------------------------------------------------------------

TEST_F(MysqlBackend, DialectIsChosenByTheDsnSchemeOrTheDialectOption) {
    for (const char* scheme : {"mysql", "mariadb", "MySQL"}) {
        const auto o = try_open(yaml(dsn_as("dlock", "lab-secret-7f3a", scheme)));
        EXPECT_EQ(o.status, DLOCK_OK) << scheme << ": " << o.message;
    }
    EXPECT_EQ(try_open(yaml(dsn(), "lease", "  dialect: mysql\n")).status, DLOCK_OK);
    // A DSN form of the whole config (dlock -c mysql://…) selects the sql backend too.
    dlock_client* c = nullptr;
    EXPECT_EQ(dlock_client_open((dsn() + "?mode=named").c_str(), &c), DLOCK_OK) << dlock_last_error();
    if (c) {
        EXPECT_STREQ(dlock_client_backend(c), "sql");
    }
    dlock_client_close(c);

    auto mismatch = try_open(yaml("postgresql://postgres@127.0.0.1:1/postgres", "lease", "  dialect: mysql\n"));
    EXPECT_EQ(mismatch.status, DLOCK_CONFIG);
    EXPECT_NE(mismatch.message.find("`dialect: mysql` needs a mysql://"), std::string::npos) << mismatch.message;
    auto unknown = try_open(yaml(dsn(), "lease", "  dialect: oracle\n"));
    EXPECT_EQ(unknown.status, DLOCK_CONFIG);
    EXPECT_NE(unknown.message.find("`dialect` is `oracle`"), std::string::npos) << unknown.message;
}

TEST_F(MysqlBackend, BadOptionsAreRejectedPreciselyWithoutLeakingThePassword) {
    struct bad {
        std::string yaml_text;
        std::string says;
    };
    const std::string base = "mysql://dlock:lab-secret-7f3a@127.0.0.1:";
    const std::vector<bad> cases = {
        {yaml(base + "99999/dlock"), "port `99999` is not a number in 1..65535"},
        {yaml(base + port() + "/dlock?charset=latin1"), "unknown query key `charset`"},
        {yaml(base + port() + "/dlock/extra"), "one database name"},
        {yaml(base + port() + "/dlock?sslmode=prefer"), "`prefer` is not offered"},
        {yaml(dsn(), "bogus"), "the MySQL dialect has `lease` and `named`"},
        {yaml(dsn(), "lease", "  handoff_grace: 10ms\n"), "`handoff_grace` applies to PostgreSQL only"},
        {yaml(dsn(), "lease", "  table: " + std::string(58, 't') + "\n"), "`table` must be 1..57 bytes"},
        {yaml(base + port() + "/dlock%zz"), "`%` not followed by two hex digits"},
    };
    for (const auto& c : cases) {
        const auto o = try_open(c.yaml_text);
        EXPECT_EQ(o.status, DLOCK_CONFIG) << c.yaml_text << ": " << o.message;
        EXPECT_NE(o.message.find(c.says), std::string::npos) << o.message;
        EXPECT_EQ(o.message.find("lab-secret-7f3a"), std::string::npos) << "echoes the password: " << o.message;
    }
}

// statement_timeout, peer_timeout and pool_size have the same limits in both dialects, checked
// before any connect (so the PostgreSQL DSN below needs no server) with the same words.
TEST_F(MysqlBackend, SharedLimitsAreRejectedAlikeByBothDialects) {
    const std::vector<std::pair<std::string, std::string>> limits = {
        {"  statement_timeout: 720h\n", "`statement_timeout` must be between 1ms and 24 days"},
        {"  peer_timeout: 2s\n", "`peer_timeout` is 2000 ms; use 3s..1h"},
        {"  pool_size: 0\n", "`pool_size` 0 is outside 1..10000"},
        {"  pool_size: 10001\n", "`pool_size` 10001 is outside 1..10000"},
    };
    for (const std::string& dsn_text : {dsn(), std::string("postgresql://dlock:lab-secret-7f3a@127.0.0.1:1/postgres")}) {
        for (const auto& [extra, says] : limits) {
            const auto o = try_open(yaml(dsn_text, "lease", extra));
            EXPECT_EQ(o.status, DLOCK_CONFIG) << dsn_text << extra << ": " << o.message;
            EXPECT_NE(o.message.find(says), std::string::npos) << dsn_text << extra << ": " << o.message;
            EXPECT_EQ(o.message.find("lab-secret-7f3a"), std::string::npos) << "echoes the password: " << o.message;
        }
    }
}

// pool_size bounds the connections a client opens: with the only one kept by a held named lock, an
// acquire of another name fails as UNAVAILABLE naming pool_size (not as a timeout: nobody holds
// that name), once its wait is over; the release gives the slot back.
TEST_F(MysqlBackend, FullPoolIsUnavailableNamingPoolSize) {
    auto client = open("named", "  pool_size: 1\n");
    auto held = client.acquire("pool/one", dlock::acquire_options().with_wait(0ms));
    std::error_code ec;
    client.acquire("pool/two", dlock::acquire_options().with_wait(300ms), ec);
    EXPECT_EQ(ec, dlock::errc::unavailable) << dlock_last_error();
    EXPECT_NE(std::string(dlock_last_error()).find("pool_size"), std::string::npos) << dlock_last_error();
    EXPECT_EQ(held.release(), dlock::release_outcome::released);
    auto second = client.acquire("pool/two", dlock::acquire_options().with_wait(5s));
    EXPECT_GT(second.fencing_token(), 0u);
}

// ---- logins ------------------------------------------------------------------------------------

TEST_F(MysqlBackend, WrongPasswordIsAPreciseErrorThatNeverEchoesIt) {
    for (const char* mode : {"lease", "named"}) {
        const auto o = try_open(yaml(dsn_as("dlock", "Wrong-Pw-91x"), mode));
        EXPECT_EQ(o.status, DLOCK_CONFIG) << o.message;
        EXPECT_NE(o.message.find("Access denied for user 'dlock'"), std::string::npos) << o.message;
        EXPECT_NE(o.message.find("check the user, password"), std::string::npos) << "says what to do: " << o.message;
        EXPECT_NE(o.message.find(port()), std::string::npos) << "names the server: " << o.message;
        EXPECT_EQ(o.message.find("Wrong-Pw-91x"), std::string::npos) << "echoes the password: " << o.message;
    }
    // The `password` option overrides the DSN's and is never echoed either.
    const auto o = try_open(yaml(dsn(), "lease", "  password: Other-Pw-22q\n"));
    EXPECT_EQ(o.status, DLOCK_CONFIG) << o.message;
    EXPECT_EQ(o.message.find("Other-Pw-22q"), std::string::npos) << o.message;
}

TEST_F(MysqlBackend, Ed25519AccountLogsInThroughConnectorCsClientPlugin) {
    for (const char* mode : {"lease", "named"}) {
        auto client = dlock::client::from_yaml(yaml(server().ed25519_dsn(), mode), "mysql_test");
        auto lease = client.acquire(std::string("ed25519/") + mode, dlock::acquire_options().with_wait(0ms));
        EXPECT_GE(lease.fencing_token(), 1u);
        EXPECT_EQ(lease.release(), dlock::release_outcome::released);
    }
}

TEST_F(MysqlBackend, TlsTheServerDoesNotOfferIsAPreciseError) {
    ASSERT_EQ(scalar("SELECT @@have_ssl"), "DISABLED") << "the lab's MariaDB runs without TLS";
    const auto o = try_open(yaml(dsn(), "lease", "  sslmode: require\n"));
    EXPECT_EQ(o.status, DLOCK_CONFIG) << o.message;
    EXPECT_NE(o.message.find("TLS failed"), std::string::npos) << o.message;
    EXPECT_NE(o.message.find("sslmode"), std::string::npos) << "says what to check: " << o.message;
}

// ---- server errors (docs/design/faults.md §14) ---------------------------------------------------------------

TEST_F(MysqlBackend, MissingGrantIsAPreciseErrorAtOpen) {
    as_root("DROP USER IF EXISTS 'dlock_reader'@'%'; CREATE USER 'dlock_reader'@'%' IDENTIFIED BY 'reader-pw-5'; "
            "GRANT SELECT ON dlock.* TO 'dlock_reader'@'%'");
    if (IsSkipped() || HasFatalFailure()) return;
    for (const char* mode : {"lease", "named"}) {
        const auto o = try_open(yaml(dsn_as("dlock_reader", "reader-pw-5"), mode, "  table: grants_test\n"));
        EXPECT_EQ(o.status, DLOCK_BACKEND) << o.message;
        EXPECT_NE(o.message.find("lacks a privilege"), std::string::npos) << o.message;
        EXPECT_NE(o.message.find("grant it SELECT, INSERT, UPDATE and CREATE"), std::string::npos) << o.message;
    }
    EXPECT_EQ(scalar("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_NAME LIKE 'grants_test%'"), "0");
    as_root("DROP USER 'dlock_reader'@'%'");
}

TEST_F(MysqlBackend, ReadOnlyServerIsAPreciseErrorAndNeverHeld) {
    // A writer without the privilege to write on a read-only server (READ_ONLY ADMIN, SUPER).
    as_root("DROP USER IF EXISTS 'dlock_writer'@'%'; CREATE USER 'dlock_writer'@'%' IDENTIFIED BY 'writer-pw-7'; "
            "GRANT SELECT, INSERT, UPDATE, CREATE ON dlock.* TO 'dlock_writer'@'%'");
    if (IsSkipped() || HasFatalFailure()) return;
    auto admin = server().client();
    auto writer = dlock::client::from_yaml(yaml(dsn_as("dlock_writer", "writer-pw-7")), "mysql_test");
    struct writable_again {
        dlock::lab::mariadb_server& s;
        ~writable_again() { s.client().execute("SET GLOBAL read_only = 0"); }
    } restore{server()};
    admin.execute("SET GLOBAL read_only = 1");

    for (const char* mode : {"lease", "named"}) {
        const auto o = try_open(yaml(dsn(), mode));
        EXPECT_EQ(o.status, DLOCK_BACKEND) << o.message;
        EXPECT_NE(o.message.find("read-only"), std::string::npos) << o.message;
        EXPECT_NE(o.message.find("writable primary"), std::string::npos) << "says what to do: " << o.message;
    }
    // A client opened before the server turned read-only: its acquire fails precisely, not held.
    std::error_code ec;
    auto lease = writer.acquire("read-only/x", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::backend);
    const std::string message = dlock_last_error();
    EXPECT_NE(message.find("the server is read-only"), std::string::npos) << message;
    EXPECT_FALSE(lease);
    admin.execute("SET GLOBAL read_only = 0");
    EXPECT_EQ(scalar("SELECT COUNT(*) FROM dlock_locks WHERE name = 'read-only/x'"), "0") << "nothing left behind";
    as_root("DROP USER 'dlock_writer'@'%'");
}

// ---- names -------------------------------------------------------------------------------------

TEST_F(MysqlBackend, NamesLongerThanGetLocksLimitStayDistinct) {
    auto holder = open("named");
    auto other = open("named");
    const std::string prefix(100, 'p');
    const std::vector<std::string> names = {prefix + "/a", prefix + "/b", std::string(1024, 'z'), "Case", "case",
                                            "dlock#case", "x y", "x_y", std::string(64, 'q'), std::string(65, 'q')};
    std::vector<dlock::lease> held;
    for (const auto& name : names) {
        std::error_code ec;
        held.push_back(holder.acquire(name, dlock::acquire_options().with_wait(0ms), ec));
        ASSERT_FALSE(ec) << "`" << name.substr(0, 40) << "` aliases a name held before it: " << dlock_last_error();
    }
    for (const auto& name : names) {
        std::error_code ec;
        other.acquire(name, dlock::acquire_options().with_wait(0ms), ec);
        EXPECT_EQ(ec, dlock::errc::timeout) << name.substr(0, 40);
    }
    // Every GET_LOCK name dlock used fits the server's 64 characters and is held by the holder's session.
    const auto used = server().client().query_column(
        "SELECT CONCAT(LENGTH(name), ':', IFNULL(IS_USED_LOCK(CONCAT('dlock:', name)), 'x')) FROM dlock_locks_named "
        "WHERE name = 'case'");
    ASSERT_EQ(used.size(), 1u);
    EXPECT_NE(used[0].value_or(""), "4:x") << "the readable form of a short lower-case name is dlock:<name>";
    for (auto& lease : held) EXPECT_EQ(lease.release(), dlock::release_outcome::released);
}

// ---- renewals ----------------------------------------------------------------------------------

// Many leases of one client are renewed in batches (one UPDATE for all): every one stays held past
// its ttl, and one whose row another owner took meanwhile is reported LOST, not renewed.
TEST_F(MysqlBackend, BatchRenewalKeepsEveryLeaseAndLosesOnlyTheOneTaken) {
    auto client = open("lease");
    std::vector<dlock::lease> leases;
    for (int i = 0; i < 40; ++i)
        leases.push_back(client.acquire("batch/" + std::to_string(i) + (i % 2 ? "/Mixed Case" : ""),
                                        dlock::acquire_options().with_wait(0ms).with_ttl(1500ms)));
    std::atomic<bool> lost{false};
    leases[7].on_lost([&] { lost = true; });
    server().client().execute("UPDATE dlock_locks SET owner = '00000000000000000000000000000000' WHERE name = 'batch/7/Mixed Case'");
    EXPECT_TRUE(eventually([&] { return lost.load(); }, 3s)) << "the lease taken by another owner is reported LOST";
    std::this_thread::sleep_for(2s);  // past the ttl: only renewals keep the others
    for (size_t i = 0; i < leases.size(); ++i) {
        if (i == 7) continue;
        EXPECT_EQ(leases[i].state(), dlock::lease_state::held) << i;
    }
    EXPECT_EQ(scalar("SELECT COUNT(*) FROM dlock_locks WHERE name LIKE 'batch/%' AND expiry > UTC_TIMESTAMP(6)"), "39")
        << "every lease but the taken one was extended";
    for (size_t i = 0; i < leases.size(); ++i)
        EXPECT_EQ(leases[i].release(), i == 7 ? dlock::release_outcome::already_lost : dlock::release_outcome::released) << i;
}

// ---- schema ------------------------------------------------------------------------------------

TEST_F(MysqlBackend, ClientsStartingTogetherCreateTheSchemaSafely) {
    server().client().execute("DROP TABLE IF EXISTS race_locks, race_locks_named, race_locks_schema");
    constexpr int clients = 6;
    std::mutex m;
    std::condition_variable go;
    bool started = false;
    std::atomic<int> ok{0};
    std::vector<std::string> errors(clients);
    std::vector<std::thread> threads;
    for (int i = 0; i < clients; ++i)
        threads.emplace_back([&, i] {
            {
                std::unique_lock<std::mutex> lock(m);
                go.wait(lock, [&] { return started; });
            }
            dlock_client* c = nullptr;
            const std::string text = yaml(dsn(), i % 2 ? "named" : "lease", "  table: race_locks\n");
            if (dlock_client_open_yaml(text.c_str(), "race", &c) == DLOCK_OK) ++ok;
            else errors[i] = dlock_last_error();
            dlock_client_close(c);
        });
    {
        std::lock_guard<std::mutex> lock(m);
        started = true;
    }
    go.notify_all();
    for (auto& t : threads) t.join();
    EXPECT_EQ(ok.load(), clients) << errors[0] << errors[1] << errors[2];
    // The lease, named, schema and holders (semaphores) tables, each once.
    EXPECT_EQ(scalar("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'dlock' AND TABLE_NAME LIKE "
                     "'race\\_locks%' AND ENGINE = 'InnoDB'"),
              "4");
    EXPECT_EQ(scalar("SELECT GROUP_CONCAT(version) FROM race_locks_schema"), "1") << "one version row";
}

// ---- docs/design/faults.md §13: KILL CONNECTION, restart ----------------------------------------------------

TEST_F(MysqlBackend, KilledSessionOfANamedHolderIsReportedLostAndFreesTheLock) {
    auto client = open("named");
    auto waiter = open("named");
    auto lease = client.acquire("kill/named", dlock::acquire_options().with_wait(0ms));
    std::atomic<bool> lost{false};
    lease.on_lost([&] { lost = true; });
    const std::string session = scalar("SELECT holder_connection FROM dlock_locks_named WHERE name = 'kill/named'");
    ASSERT_FALSE(session.empty());
    ASSERT_EQ(scalar("SELECT IS_USED_LOCK('dlock:kill/named')"), session) << "the row names the holding session";
    const auto killed = clock_type::now();
    server().kill_connection(std::stoull(session));
    EXPECT_TRUE(eventually([&] { return lost.load(); }, 5s)) << "LOST not reported";
    const int64_t detection = ms_since(killed);
    std::cout << "[mysql named] LOST reported " << detection << " ms after KILL CONNECTION\n";
    EXPECT_LT(detection, 2000) << "the monitor sees the session end at once";
    EXPECT_EQ(lease.state(), dlock::lease_state::lost);
    auto next = waiter.acquire("kill/named", dlock::acquire_options().with_wait(2s));
    EXPECT_GT(next.fencing_token(), lease.fencing_token());
    EXPECT_EQ(lease.release(), dlock::release_outcome::already_lost);
    EXPECT_EQ(waiter.inspect("kill/named").holder, next.owner()) << "the lost lease's release touched the next holder";
}

// A pooled connection serves hold after hold (watched only while it holds): killed while it holds,
// it is still reported LOST at once; killed while idle in the pool, it costs the client nothing (no
// busy monitor) and fails no acquire.
TEST_F(MysqlBackend, ReusedNamedSessionIsReportedLostAtOnceAndItsIdleEndIsQuiet) {
    auto client = open("named");
    auto holder_session = [&] { return scalar("SELECT holder_connection FROM dlock_locks_named WHERE name = 'kill/reuse'"); };
    for (int i = 0; i < 5; ++i) client.acquire("kill/reuse", dlock::acquire_options().with_wait(2s)).release();
    const std::string pooled = holder_session();
    ASSERT_FALSE(pooled.empty());
    auto cpu_ms = [] {
        timespec t{};
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
        return int64_t(t.tv_sec) * 1000 + t.tv_nsec / 1'000'000;
    };
    server().kill_connection(std::stoull(pooled));
    const int64_t cpu_before = cpu_ms();
    std::this_thread::sleep_for(600ms);
    EXPECT_LT(cpu_ms() - cpu_before, 300) << "the client spun on the killed idle connection";
    auto lease = client.acquire("kill/reuse", dlock::acquire_options().with_wait(2s));
    EXPECT_NE(holder_session(), pooled) << "the killed connection was reused";

    for (int i = 0; i < 3; ++i) {
        lease.release();
        lease = client.acquire("kill/reuse", dlock::acquire_options().with_wait(2s));
    }
    std::atomic<bool> lost{false};
    lease.on_lost([&] { lost = true; });
    server().kill_connection(std::stoull(holder_session()));
    EXPECT_TRUE(eventually([&] { return lost.load(); }, 2s)) << "LOST must be pushed for a connection that held before";
    EXPECT_EQ(lease.release(), dlock::release_outcome::already_lost);
}

TEST_F(MysqlBackend, KilledSessionsDoNotEndALeaseTableLock) {
    auto client = open("lease");
    auto other = open("lease");
    auto lease = client.acquire("kill/lease", dlock::acquire_options().with_wait(0ms).with_ttl(1500ms));
    auto admin = server().client();
    const auto sessions = admin.query_column(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 'dlock' AND ID <> CONNECTION_ID()");
    ASSERT_FALSE(sessions.empty());
    for (const auto& id : sessions) {
        try {
            server().kill_connection(std::stoull(id.value_or("0")));
        } catch (const dlock::lab::mariadb_error& e) {
            if (e.code() != 1094) throw;  // ended meanwhile
        }
    }
    // Past two ttls: renewals go through new connections; the row is the lock, not a session.
    std::this_thread::sleep_for(3s);
    EXPECT_EQ(lease.state(), dlock::lease_state::held);
    std::error_code ec;
    other.acquire("kill/lease", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
}

TEST_F(MysqlBackend, ServerRestartEndsNamedLocksButNotLeaseRows) {
    auto named_client = open("named");
    auto lease_client = open("lease");
    auto named = named_client.acquire("restart/named", dlock::acquire_options().with_wait(0ms));
    // A ttl far longer than a restart takes on a loaded machine (it took 20 s once here).
    auto leased = lease_client.acquire("restart/lease", dlock::acquire_options().with_wait(0ms).with_ttl(60s));
    std::atomic<bool> named_lost{false};
    named.on_lost([&] { named_lost = true; });
    server().restart(dlock::lab::data_policy::keep);
    EXPECT_TRUE(eventually([&] { return named_lost.load(); }, 5s)) << "the named lock's session ended with the server";
    // Renewals that met the stopped server made the lease SUSPECT; the next one (every ttl/3) holds it again.
    EXPECT_TRUE(eventually([&] { return leased.state() == dlock::lease_state::held; }, 25s))
        << "renewals resume once the server is back";
    auto other = open("lease");
    std::error_code ec;
    other.acquire("restart/lease", dlock::acquire_options().with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "the committed row survived the restart";
    auto named_client_again = open("named");
    auto named_again = named_client_again.acquire("restart/named", dlock::acquire_options().with_wait(2s));
    EXPECT_GT(named_again.fencing_token(), named.fencing_token()) << "the fence row survived the restart";
    EXPECT_EQ(leased.release(), dlock::release_outcome::released);
}

}  // namespace

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    dlock::lab::add_lab_environment({backend::mariadb});
    return RUN_ALL_TESTS();
}

// An acquire of a permit queued behind the semaphore's slot 0 row lock (here held by another
// session's open transaction) past statement_timeout is cut by the server (max_statement_time) or
// the client: the permit is not taken, so a try-once and a wait end in TIMEOUT, never UNAVAILABLE,
// and the semaphore is usable as soon as the row lock goes.
TEST_F(MysqlBackend, PermitAcquireQueuedPastStatementTimeoutEndsInTimeout) {
    auto client = open("lease", "  statement_timeout: 300ms\n");
    const auto permit = dlock::acquire_options().with_permits(3).with_ttl(5000ms);
    client.acquire("cut/sem", dlock::acquire_options(permit).with_wait(0ms)).release();  // creates slot 0
    auto blocker = server().client();
    blocker.execute("START TRANSACTION");
    blocker.execute("SELECT permits FROM dlock.dlock_locks_holders WHERE kind = 'P' AND name = 'cut/sem' AND slot = 0 FOR UPDATE");
    std::error_code ec;
    const auto started = clock_type::now();
    client.acquire("cut/sem", dlock::acquire_options(permit).with_wait(0ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << ec.message() << ": " << dlock_last_error();
    ec.clear();
    client.acquire("cut/sem", dlock::acquire_options(permit).with_wait(1500ms), ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << ec.message() << ": " << dlock_last_error();
    EXPECT_GE(ms_since(started), 1500);
    blocker.execute("ROLLBACK");
    auto held = client.acquire("cut/sem", dlock::acquire_options(permit).with_wait(5000ms));
    EXPECT_EQ(held.release(), dlock::release_outcome::released);
}

// A lock acquire queued behind a row lock held longer than the statement limit (another session's
// transaction here; a break's or a slow release's in practice) is cut by the server — MariaDB's
// max_statement_time (error 1969), or innodb_lock_wait_timeout (1205) — and the single autocommit
// statement is rolled back: not taken. A wait goes on polling until its deadline; it used to end at
// the first cut with DLOCK_UNAVAILABLE ("met a row lock").
TEST_F(MysqlBackend, LockAcquireWaitsPastARowLockHeldLongerThanTheStatementLimit) {
    auto client = open("lease", "  statement_timeout: 1s\n");
    client.acquire("cut/lock", dlock::acquire_options().with_ttl(5000ms).with_wait(0ms)).release();  // creates the row
    auto blocker = server().client();
    blocker.execute("START TRANSACTION");
    blocker.execute("SELECT owner FROM dlock.dlock_locks WHERE name = 'cut/lock' FOR UPDATE");
    std::thread commit_later([&] {
        std::this_thread::sleep_for(4s);
        blocker.execute("COMMIT");
    });
    std::error_code ec;
    const auto started = clock_type::now();
    auto lease = client.acquire("cut/lock", dlock::acquire_options().with_ttl(5000ms).with_wait(10000ms), ec);
    const int64_t waited = ms_since(started);
    commit_later.join();
    ASSERT_FALSE(ec) << ec.message() << " after " << waited << " ms: " << dlock_last_error();
    EXPECT_GE(waited, 3500) << "granted while the row was still locked";
    EXPECT_LT(waited, 10000);
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
}

// Whether a session is running permit_free_slot (the acquire's locking read of the free slots) now.
static bool looking_for_a_free_slot(dlock::lab::mariadb_client& probe) {
    return probe.query_value("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND = 'Execute' AND INFO LIKE "
                             "'%slot BETWEEN 1 AND ? AND (owner IS NULL OR expiry <= UTC_TIMESTAMP(6)) ORDER BY slot LIMIT 1 FOR UPDATE'")
               .value_or("0") != "0";
}

// A permit acquire whose client stalls inside its transaction, holding slot 0's row lock — a process
// stopped, or a host gone, between `permit_header … FOR UPDATE` and COMMIT — holds up the other
// acquirers of the semaphore only until the server ends the idle transaction (statement_timeout in
// whole seconds, 2 s here), not until TCP gives the session up (hours). The stall: the client goes
// through the lab proxy, another session holds slot 1's row lock so that the acquire waits inside its
// transaction (after slot 0), then the proxy goes silent both ways and the row lock goes — the server
// answers into the silence and the session sits idle in its transaction, as with a SIGSTOPped client.
void MysqlBackend::stall_a_permit_acquire_and_time_another(const std::string& name) {
    dlock::lab::tcp_proxy proxy(server().client_endpoint());
    auto stalling = dlock::client::from_yaml(yaml(dlock::lab::mariadb_dsn(proxy.listen_endpoint()), "lease",
                                                  "  statement_timeout: 2s\n  pool_size: 1\n"),
                                             "mysql_test");
    auto other = open("lease", "  statement_timeout: 2s\n");
    const auto permit = dlock::acquire_options().with_permits(2).with_ttl(10s);
    stalling.acquire(name, dlock::acquire_options(permit).with_wait(0ms)).release();  // slots 0 and 1
    auto blocker = server().client();
    blocker.execute("START TRANSACTION");
    blocker.execute("SELECT owner FROM dlock_locks_holders WHERE kind = 'P' AND name = '" + name + "' AND slot = 1 FOR UPDATE");
    std::error_code stalled_ec;
    std::thread stalled([&] { stalling.acquire(name, dlock::acquire_options(permit).with_wait(0ms), stalled_ec); });
    struct join_at_end {
        std::thread& t;
        dlock::lab::tcp_proxy& p;
        ~join_at_end() {
            p.heal();
            if (t.joinable()) t.join();
        }
    } joined{stalled, proxy};
    auto probe = server().client();
    ASSERT_TRUE(eventually([&] { return looking_for_a_free_slot(probe); }, 1500ms)) << "the acquire never waited for slot 1";
    proxy.blackhole(dlock::lab::direction::both);
    blocker.execute("ROLLBACK");  // its answer goes into the silent proxy: the session is idle in its transaction
    const auto stalled_at = clock_type::now();
    std::error_code ec;
    auto lease = other.acquire(name, dlock::acquire_options(permit).with_wait(20s), ec);
    const int64_t waited = ms_since(stalled_at);
    std::cout << "[mysql lease] another client's permit acquire waited " << waited
              << " ms behind an acquire stalled inside its transaction\n";
    ASSERT_FALSE(ec) << ec.message() << ": " << dlock_last_error();
    EXPECT_LT(waited, 2000 + 3000) << "the stalled transaction is ended by the server within statement_timeout (2 s)";
    EXPECT_EQ(scalar("SELECT COUNT(*) FROM dlock_locks_holders WHERE kind = 'P' AND name = '" + name + "' AND slot > 0 "
                     "AND owner IS NOT NULL AND expiry > UTC_TIMESTAMP(6)"),
              "1")
        << "only the other client's permit";
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
    stalled.join();  // still silent: its deadline passes, and its read-back finds no connection
    EXPECT_TRUE(stalled_ec) << "the stalled acquire is not reported held";
}

TEST_F(MysqlBackend, StalledPermitAcquireBlocksOthersForABoundNotHours) {
    stall_a_permit_acquire_and_time_another("stall/sem");
}

// The same stall on a server whose DBA set MariaDB's idle_readonly_transaction_timeout and
// idle_write_transaction_timeout globally: when above 0 they decide instead of
// idle_transaction_timeout (the first for a transaction that has not written — the stalled acquire
// has only taken row locks —, the second for one that has), and every new session copies the global
// values, so dlock's sessions must set them too. 30 s here: longer than the other client's 20 s wait.
TEST_F(MysqlBackend, StalledPermitAcquireIsBoundedWhateverTheServersIdleTransactionSettings) {
    auto admin = server().client();
    scoped_global readonly(admin, "idle_readonly_transaction_timeout", "30");
    scoped_global write(admin, "idle_write_transaction_timeout", "30");
    stall_a_permit_acquire_and_time_another("stall/dba-sem");
}

// A permit acquire whose COMMIT reaches the server late — after the client gave the transaction up
// at its deadline and read its permit row back — takes one permit, not two. The lab proxy delays the
// client's bytes 2.5 s: START, permit_header, permit_free_slot, permit_next_fence and permit_take reach
// the server at 2.5 … 12.5 s, the COMMIT (sent on permit_take's answer) at 15 s; the client gives up at
// 13.75 s (statement_timeout 11 s + ¼), the delay is lifted before that, so its read-back and its next
// attempt reach the server at once, and the late COMMIT then commits the first permit. The read-back
// must wait for that transaction's end (it holds slot 0's row lock until then) and find the permit;
// reading at once finds nothing, and the next attempt takes a second slot with the same owner token.
TEST_F(MysqlBackend, PermitWhoseCommitLandsAfterTheReadBackIsTakenOnce) {
    dlock::lab::tcp_proxy proxy(server().client_endpoint());
    auto client = dlock::client::from_yaml(yaml(dlock::lab::mariadb_dsn(proxy.listen_endpoint()), "lease",
                                                "  statement_timeout: 11s\n  pool_size: 1\n"),
                                           "mysql_test");
    const auto permit = dlock::acquire_options().with_permits(2).with_ttl(30s);
    // Slots 0 and 1, and every statement of the free-slot path prepared on the one pooled connection.
    for (int i = 0; i < 2; ++i) client.acquire("late/sem", dlock::acquire_options(permit).with_wait(0ms)).release();
    proxy.set_delay(2500ms, 0ms);
    std::error_code ec;
    dlock::lease lease;
    std::thread acquiring([&] { lease = client.acquire("late/sem", dlock::acquire_options(permit).with_wait(60s), ec); });
    struct join_at_end {
        std::thread& t;
        ~join_at_end() {
            if (t.joinable()) t.join();
        }
    } joined{acquiring};
    auto dirty = server().client();
    dirty.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED");
    const bool written = eventually(
        [&] {
            return dirty.query_value("SELECT COUNT(*) FROM dlock_locks_holders WHERE kind = 'P' AND name = 'late/sem' AND slot > 0 "
                                     "AND owner IS NOT NULL").value_or("0") != "0";
        },
        20s);
    std::this_thread::sleep_for(300ms);  // the COMMIT, sent on permit_take's answer, is in the proxy now
    proxy.set_delay(0ms, 0ms);
    acquiring.join();
    ASSERT_TRUE(written) << "permit_take never ran";
    ASSERT_FALSE(ec) << ec.message() << ": " << dlock_last_error();
    const auto rows = server().client().query_column(
        "SELECT fence FROM dlock_locks_holders WHERE kind = 'P' AND name = 'late/sem' AND slot > 0 AND owner = '" + std::string(lease.owner()) +
        "' AND expiry > UTC_TIMESTAMP(6)");
    EXPECT_EQ(rows.size(), 1u) << "permits carrying the acquire's owner token";
    if (!rows.empty()) {
        EXPECT_EQ(rows[0].value_or(""), std::to_string(lease.fencing_token()));
    }
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
}


// dlock's sessions run in autocommit whatever the server's default: with GLOBAL autocommit = 0 a
// lease acquire's row would stay uncommitted in an implicit transaction (invisible to other clients,
// rolled back when the server ends the session idle in it), and a named holder's session, idle in the
// implicit transaction its fence update opened, would be ended after idle_transaction_timeout —
// the named lock with it.
TEST_F(MysqlBackend, SessionsRunInAutocommitWhateverTheServersDefault) {
    auto admin = server().client();
    scoped_global autocommit(admin, "autocommit", "0");
    auto leased = open("lease", "  statement_timeout: 1s\n");
    auto lease = leased.acquire("autocommit/lease", dlock::acquire_options().with_ttl(20s).with_wait(0ms));
    EXPECT_EQ(scalar("SELECT COUNT(*) FROM dlock_locks WHERE name = 'autocommit/lease' AND owner = '" + std::string(lease.owner()) + "'"),
              "1")
        << "the lease's row is committed, visible to another session";
    auto named = open("named", "  statement_timeout: 1s\n");
    auto held = named.acquire("autocommit/named", dlock::acquire_options().with_wait(0ms));
    std::this_thread::sleep_for(2500ms);  // past idle_transaction_timeout (1 s) and its check
    EXPECT_EQ(held.state(), dlock::lease_state::held) << "the named holder's session was not ended as idle in a transaction";
    EXPECT_EQ(held.release(), dlock::release_outcome::released);
    EXPECT_EQ(lease.release(), dlock::release_outcome::released);
}
