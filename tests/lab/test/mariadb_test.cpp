// lab_mariadb — the lab's MariaDB (opt-in backend `mariadb`): it starts as a non-root user and answers
// queries; both password plugins MariaDB 10.11 offers log in and a wrong password is refused without
// echoing it; KILL CONNECTION ends exactly the named session (its next statement fails, its GET_LOCK
// lock is released); pause/resume, kill, restart with and without data, graceful stop; reset; and
// `dlock-lab up mariadb` prints the DSN, and its server dies when the supervisor is SIGKILLed.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

#include "dlock/lab/gtest.hpp"
#include "dlock/lab/lab.hpp"
#include "dlock/lab/state.hpp"
#include "lab_test_helpers.hpp"

namespace lab = dlock::lab;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using lab::backend;
using lab::test::eventually;
using lab::test::run;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The effective uid of a process (the second field of /proc/PID/status's "Uid:" line).
long effective_uid(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Uid:", 0) == 0) {
      std::istringstream fields(line.substr(4));
      long real = -1, effective = -1;
      fields >> real >> effective;
      return effective;
    }
  }
  return -1;
}

class MariadbLab : public lab::lab_test {
 protected:
  void SetUp() override {
    DLOCK_LAB_REQUIRE(backend::mariadb);
    if (!environment().owned_lab()) GTEST_SKIP() << "fault controls need a lab this process owns";
    lab::lab_test::SetUp();
  }
  lab::mariadb_server& mariadb() { return environment().owned_lab()->mariadb(); }
};

TEST_F(MariadbLab, StartsAsANonRootUserAnswersQueriesAndReportsItsStartupTime) {
  auto client = mariadb().client();
  EXPECT_EQ(client.query_value("SELECT 40 + 2"), "42");
  EXPECT_EQ(client.query_value("SELECT CURRENT_USER()"), "dlock@%");
  EXPECT_EQ(client.query_value("SELECT DATABASE()"), "dlock");
  auto version = client.query_value("SELECT VERSION()").value_or("");
  EXPECT_NE(version.find("MariaDB"), std::string::npos) << version;
  std::cout << "server version: " << version << "\n";
  EXPECT_EQ(client.query_value("SELECT @@bind_address"), "127.0.0.1");
  EXPECT_EQ(client.query_value("SELECT @@innodb_flush_log_at_trx_commit"), "2") << "the lab's default (not durable)";

  EXPECT_NE(effective_uid(mariadb().pid()), 0) << "mariadbd must not run as root";

  auto& owned = *environment().owned_lab();
  bool recorded = false;
  for (const auto& record : owned.startup_records()) {
    if (record.kind != backend::mariadb) continue;
    recorded = true;
    EXPECT_EQ(record.server, "mariadb");
    EXPECT_GT(record.time.count(), 0);
    std::cout << "mariadb startup (mariadb-install-db + mariadbd until a login succeeds): " << record.time.count()
              << " ms\n";
    RecordProperty("startup_ms_mariadb", static_cast<int>(record.time.count()));
  }
  EXPECT_TRUE(recorded);
  EXPECT_NE(owned.startup_report().find("mariadb"), std::string::npos);

  // Only what was asked for runs: MariaDB does not bring the default backends with it, and they do
  // not bring MariaDB (it is opt-in).
  EXPECT_FALSE(owned.has(backend::sql));
  for (backend b : lab::all_backends()) EXPECT_NE(b, backend::mariadb);
  EXPECT_EQ(lab::opt_in_backends(), std::vector<backend>{backend::mariadb});
}

TEST_F(MariadbLab, ConfigAndDsnReachTheServer) {
  auto access = environment().access(backend::mariadb);
  auto port = std::to_string(mariadb().client_endpoint().port);
  EXPECT_EQ(access.dsn, "mysql://dlock:lab-secret-7f3a@127.0.0.1:" + port + "/dlock");
  EXPECT_EQ(access.dsn, mariadb().dsn());
  EXPECT_EQ(mariadb().ed25519_dsn(), "mysql://dlock_ed25519:lab-secret-7f3a@127.0.0.1:" + port + "/dlock");
  EXPECT_EQ(read_file(access.config), "backend: sql\noptions:\n  dsn: \"" + access.dsn + "\"\n");
  EXPECT_EQ(read_file(access.config), lab::render_config(backend::mariadb, access.endpoints));
  EXPECT_EQ(lab::parse_backend("mariadb"), backend::mariadb);
  EXPECT_EQ(lab::plugin_name(backend::mariadb), "sql");
  EXPECT_EQ(lab::config_env_var(backend::mariadb), "DLOCK_LAB_MARIADB_CONFIG");
  // The login the config describes works.
  EXPECT_EQ(lab::mariadb_client(lab::mariadb_login{access.endpoints.at(0)}).query_value("SELECT 1"), "1");
}

TEST_F(MariadbLab, BothPasswordPluginsLogInAndAWrongPasswordIsRefusedWithoutEchoingIt) {
  auto admin = mariadb().client();
  EXPECT_EQ(admin.query_value("SELECT plugin FROM mysql.user WHERE user = 'dlock'"), "mysql_native_password");
  EXPECT_EQ(admin.query_value("SELECT plugin FROM mysql.user WHERE user = 'dlock_ed25519'"), "ed25519");
  lab::mariadb_client ed25519(mariadb().ed25519_login());
  EXPECT_EQ(ed25519.query_value("SELECT CURRENT_USER()"), "dlock_ed25519@%");
  // What MariaDB 10.11 offers for passwords: native and ed25519; no caching_sha2_password (MySQL 8's
  // default) on the server side.
  EXPECT_EQ(admin.query_value("SELECT COUNT(*) FROM information_schema.ALL_PLUGINS "
                              "WHERE PLUGIN_NAME = 'caching_sha2_password'"),
            "0");

  for (auto login : {mariadb().login(), mariadb().ed25519_login()}) {
    login.password = "wrong-password-91c2";
    try {
      lab::mariadb_client refused(login, 2s);
      ADD_FAILURE() << login.user << " logged in with a wrong password";
    } catch (const lab::mariadb_error& error) {
      std::string message = error.what();
      EXPECT_EQ(error.code(), 1045u) << message;  // ER_ACCESS_DENIED_ERROR
      EXPECT_NE(message.find(login.user + "@" + mariadb().client_endpoint().to_string()), std::string::npos) << message;
      EXPECT_EQ(message.find("wrong-password-91c2"), std::string::npos) << message;
      EXPECT_EQ(message.find(std::string(lab::mariadb_password)), std::string::npos) << message;
    }
  }
  // root is reachable only through the Unix socket as the OS user: not over TCP, password or not.
  lab::mariadb_login root{mariadb().client_endpoint(), "root", "", ""};
  EXPECT_THROW(lab::mariadb_client(root, 2s), lab::mariadb_error);
}

TEST_F(MariadbLab, KillConnectionEndsThatSessionAndReleasesItsLock) {
  auto victim = mariadb().client();
  auto bystander = mariadb().client();
  auto contender = mariadb().client();
  auto victim_id = victim.connection_id();
  EXPECT_EQ(victim.query_value("SELECT CONNECTION_ID()"), std::to_string(victim_id));
  EXPECT_EQ(victim.query_value("SELECT GET_LOCK('lab-lock', 0)"), "1");
  EXPECT_EQ(contender.query_value("SELECT GET_LOCK('lab-lock', 0)"), "0") << "held by the victim";

  mariadb().kill_connection(victim_id);

  try {
    victim.query_value("SELECT 1");
    ADD_FAILURE() << "the killed session's next statement succeeded";
  } catch (const lab::mariadb_error& error) {
    std::cout << "the killed session's next statement: " << error.what() << " (code " << error.code() << ")\n";
    // 2013 lost connection / 2006 gone away (client side), 1927 connection killed (server side).
    EXPECT_TRUE(error.code() == 2013 || error.code() == 2006 || error.code() == 1927) << error.what();
  }
  EXPECT_EQ(bystander.query_value("SELECT 1"), "1") << "other sessions are untouched";
  // The server releases the killed session's lock once that session's thread has ended.
  EXPECT_TRUE(eventually([&] { return contender.query_value("SELECT GET_LOCK('lab-lock', 0)") == "1"; }, 5s, 20ms));
  EXPECT_EQ(contender.query_value("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = " +
                                  std::to_string(victim_id)),
            "0");

  try {
    mariadb().kill_connection(victim_id);
    ADD_FAILURE() << "KILL of a session that is gone succeeded";
  } catch (const lab::mariadb_error& error) {
    EXPECT_EQ(error.code(), 1094u) << error.what();  // ER_NO_SUCH_THREAD
  }
}

TEST_F(MariadbLab, PauseStopsAnswersAndResumeBringsThemBack) {
  auto connection = mariadb().client(1s);
  EXPECT_EQ(connection.query_value("SELECT 1"), "1");
  mariadb().pause();
  EXPECT_TRUE(mariadb().running());
  EXPECT_FALSE(mariadb().probe());
  auto processes = lab::processes_mentioning(mariadb().dir().string());
  EXPECT_GE(processes.size(), 1u);
  for (const auto& p : processes) EXPECT_EQ(p.state, 'T') << p.pid << " " << p.cmdline;
  auto begin = std::chrono::steady_clock::now();
  EXPECT_THROW(lab::mariadb_client(mariadb().login(), 1s), lab::mariadb_error) << "a paused server does not log in";
  EXPECT_GE(std::chrono::steady_clock::now() - begin, 900ms) << "a paused server times out, it does not refuse";
  mariadb().resume();
  EXPECT_TRUE(mariadb().probe());
  EXPECT_EQ(connection.query_value("SELECT 2"), "2") << "a session open across the pause goes on";
}

TEST_F(MariadbLab, KillAndRestartKeepCommittedDataAndWipeLosesIt) {
  auto& server = mariadb();
  server.client().execute(
      "CREATE TABLE survives (v INT) ENGINE=InnoDB; INSERT INTO survives VALUES (7)");  // autocommit
  auto old_pid = server.pid();
  server.kill();
  EXPECT_FALSE(server.running());
  EXPECT_FALSE(lab::process_alive(old_pid));
  EXPECT_THROW(lab::mariadb_client(server.login(), 1s), lab::mariadb_error) << "killed: connections are refused";

  server.restart(lab::data_policy::keep);
  std::cout << "MariaDB restart with data (crash recovery + start): " << server.startup_time().count() << " ms\n";
  RecordProperty("restart_keep_ms", static_cast<int>(server.startup_time().count()));
  EXPECT_EQ(server.client().query_value("SELECT v FROM survives"), "7") << "a SIGKILLed server keeps each commit";

  EXPECT_TRUE(server.stop(10s)) << "SIGTERM shuts mariadbd down cleanly";
  EXPECT_FALSE(server.running());
  server.restart(lab::data_policy::wipe);
  std::cout << "MariaDB restart without data (mariadb-install-db + start): " << server.startup_time().count()
            << " ms\n";
  RecordProperty("restart_wipe_ms", static_cast<int>(server.startup_time().count()));
  auto client = server.client();
  EXPECT_EQ(client.query_value("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_NAME = 'survives'"), "0");
  EXPECT_EQ(lab::mariadb_client(server.ed25519_login()).query_value("SELECT 1"), "1") << "accounts re-created";
  EXPECT_FALSE(fs::exists(server.dir() / "accounts.sql")) << "the file with the password is removed";
}

TEST_F(MariadbLab, ResetTruncatesTablesAndCanEndOtherSessions) {
  auto client = mariadb().client();
  client.execute(
      "CREATE TABLE IF NOT EXISTS leftover (id INT AUTO_INCREMENT PRIMARY KEY, v TEXT) ENGINE=InnoDB;"
      "CREATE TABLE IF NOT EXISTS child (id INT PRIMARY KEY, parent INT, "
      "  FOREIGN KEY (parent) REFERENCES leftover (id)) ENGINE=InnoDB;"
      "INSERT INTO leftover (v) VALUES ('x'), ('y'); INSERT INTO child VALUES (1, 1)");
  auto holder = mariadb().client();
  EXPECT_EQ(holder.query_value("SELECT GET_LOCK('left-held', 0)"), "1");

  environment().reset(backend::mariadb);
  EXPECT_EQ(client.query_value("SELECT COUNT(*) FROM leftover"), "0");
  EXPECT_EQ(client.query_value("SELECT COUNT(*) FROM child"), "0");
  client.execute("INSERT INTO leftover (v) VALUES ('z')");
  EXPECT_EQ(client.query_value("SELECT MAX(id) FROM leftover"), "1") << "AUTO_INCREMENT starts again";
  EXPECT_EQ(holder.query_value("SELECT 1"), "1") << "a plain reset leaves sessions alone";

  environment().reset(backend::mariadb, /*terminate_sql_sessions=*/true);
  EXPECT_THROW(holder.query_value("SELECT 1"), lab::mariadb_error) << "other sessions are ended";
  EXPECT_THROW(client.query_value("SELECT 1"), lab::mariadb_error);
  auto fresh = mariadb().client();
  EXPECT_TRUE(eventually([&] { return fresh.query_value("SELECT GET_LOCK('left-held', 0)") == "1"; }, 5s, 20ms));
  fresh.execute("DROP TABLE child; DROP TABLE leftover");
}

// ------------------------------------------------------------------------------------------ dlock-lab

TEST(MariadbCommand, UpPrintsTheDsnAndTheServerDiesWithTheSupervisor) {
  DLOCK_LAB_REQUIRE(backend::mariadb);  // MariaDB cannot start here: reported by the environment
  std::string pattern = (fs::temp_directory_path() / "dlock-lab-mariadb-state.XXXXXX").string();
  ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
  fs::path state_dir = pattern;
  auto command = [&](const std::string& arguments) {
    return std::string(DLOCK_LAB_EXE) + " --state-dir '" + state_dir.string() + "' " + arguments;
  };

  auto up = run(command("up mariadb"));
  std::cout << up.output;
  ASSERT_EQ(up.status, 0) << up.output;
  std::smatch dsn;
  std::regex dsn_line("\\n  mariadb +(mysql://dlock:lab-secret-7f3a@127\\.0\\.0\\.1:([0-9]+)/dlock)\\n");
  ASSERT_TRUE(std::regex_search(up.output, dsn, dsn_line)) << "up prints the DSN";
  EXPECT_TRUE(std::regex_search(up.output, std::regex("\\n  mariadb +127\\.0\\.0\\.1:[0-9]+ +[0-9]+ ms")))
      << "up prints the startup time";
  auto state = lab::running_lab(state_dir);
  ASSERT_TRUE(state);
  ASSERT_EQ(state->backends.size(), 1u) << "only what was named starts";
  EXPECT_EQ(state->backends[0].kind, backend::mariadb);
  EXPECT_EQ(state->backends[0].dsn, dsn[1].str());
  lab::endpoint server{"127.0.0.1", static_cast<std::uint16_t>(std::stoi(dsn[2].str()))};
  EXPECT_EQ(lab::mariadb_client(lab::mariadb_login{server}).query_value("SELECT 1"), "1");
  auto env = run(command("env"));
  EXPECT_NE(env.output.find("export DLOCK_LAB_MARIADB_CONFIG='" + state->backends[0].config.string() + "'"),
            std::string::npos)
      << env.output;

  ASSERT_EQ(state->servers.size(), 1u);
  pid_t server_pid = static_cast<pid_t>(std::atol(state->servers[0].c_str() + state->servers[0].rfind(' ') + 1));
  ASSERT_TRUE(lab::process_alive(server_pid));
  ::kill(state->supervisor_pid, SIGKILL);
  EXPECT_TRUE(eventually([&] { return !lab::process_alive(server_pid); }, 5s, 20ms))
      << "mariadbd (pid " << server_pid << ") outlived its supervisor";
  EXPECT_FALSE(lab::mariadb_accepts_connections(lab::mariadb_login{server}));

  auto down = run(command("down"));
  EXPECT_EQ(down.status, 0) << down.output;
  EXPECT_FALSE(fs::exists(state->lab_dir));
  std::error_code ignored;
  fs::remove_all(state_dir, ignored);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::unsetenv("DLOCK_LAB_STATE_DIR");  // fault controls need a server this process owns
  lab::add_lab_environment({backend::mariadb});
  return RUN_ALL_TESTS();
}
