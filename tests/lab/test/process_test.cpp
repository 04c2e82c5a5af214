// lab_cli and lab_crash — the lab as processes see it:
//   LabCommand.*: `dlock-lab up` / `env` / `status` / `down` end to end, reuse of a running lab through
//                 DLOCK_LAB_STATE_DIR, and recovery after the supervisor is SIGKILLed;
//   LabCrash.*:   a process holding a lab is SIGKILLed and its servers die with it (PR_SET_PDEATHSIG,
//                 also across PostgreSQL's switch to the postgres user); a server started from a
//                 short-lived thread does not die with that thread.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
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
using lab::test::run;

namespace {

std::string lab_command(const fs::path& state_dir, const std::string& arguments) {
  return std::string(DLOCK_LAB_EXE) + " --state-dir '" + state_dir.string() + "' " + arguments;
}

fs::path make_temp_dir(const std::string& stem) {
  std::string pattern = (fs::temp_directory_path() / (stem + ".XXXXXX")).string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp");
  return pattern;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

std::string describe(const std::vector<lab::process_info>& processes) {
  std::string out;
  for (const auto& p : processes) out += "\n  pid " + std::to_string(p.pid) + ": " + p.cmdline;
  return out;
}

TEST(LabCommand, UpEnvStatusDownEndToEnd) {
  auto state_dir = make_temp_dir("dlock-lab-cli-state");
  auto up = run(lab_command(state_dir, "up redis redlock zookeeper etcd sql"));
  std::cout << up.output;
  ASSERT_EQ(up.status, 0) << up.output;
  EXPECT_NE(up.output.find("startup time per server"), std::string::npos);
  for (const char* server : {"redis", "redlock-5", "zookeeper", "etcd", "sql"}) {
    EXPECT_TRUE(std::regex_search(up.output, std::regex(std::string("\\n  ") + server + " +127\\.0\\.0\\.1:[0-9]+ +[0-9]+ ms")))
        << "startup time of " << server;
  }

  auto state = lab::running_lab(state_dir);
  ASSERT_TRUE(state) << "state.json names a live supervisor";
  EXPECT_EQ(state->backends.size(), 5u);
  EXPECT_TRUE(fs::is_directory(state->lab_dir));

  // `env` prints export lines for the state dir, the lab dir and one config per backend.
  auto env = run(lab_command(state_dir, "env"));
  ASSERT_EQ(env.status, 0) << env.output;
  std::map<std::string, std::string> exports;
  std::regex line("export ([A-Z_]+)='([^']*)'");
  for (std::sregex_iterator it(env.output.begin(), env.output.end(), line), end; it != end; ++it) {
    exports[(*it)[1]] = (*it)[2];
  }
  EXPECT_EQ(exports["DLOCK_LAB_STATE_DIR"], state_dir.string());
  EXPECT_EQ(exports["DLOCK_LAB_DIR"], state->lab_dir.string());
  for (const auto& access : state->backends) {
    auto variable = lab::config_env_var(access.kind);
    ASSERT_TRUE(exports.count(variable)) << variable << " missing from:\n" << env.output;
    EXPECT_EQ(exports[variable], access.config.string());
    EXPECT_NE(up.output.find(access.config.string()), std::string::npos) << "up prints the config path";
    EXPECT_EQ(read_file(access.config), lab::render_config(access.kind, access.endpoints));
  }
  EXPECT_EQ(exports["DLOCK_LAB_REDIS_CONFIG"], (state->lab_dir / "redis.yaml").string());

  // The servers really answer.
  for (const auto& access : state->backends) {
    if (access.kind == lab::backend::redis || access.kind == lab::backend::redlock) {
      for (const auto& node : access.endpoints) {
        EXPECT_EQ(lab::redis_client(node).checked({"PING"}).text, "PONG");
      }
    } else if (access.kind == lab::backend::zookeeper) {
      EXPECT_EQ(lab::zookeeper_four_letter_word(access.endpoints[0], "ruok"), "imok");
    } else if (access.kind == lab::backend::etcd) {
      EXPECT_TRUE(lab::etcd_client(access.endpoints[0]).healthy());
    } else if (access.kind == lab::backend::sql) {
      EXPECT_EQ(lab::postgres_client(access.dsn).query_value("SELECT 1"), "1");
    }
    lab::reset_backend(access);
  }

  EXPECT_EQ(run(lab_command(state_dir, "status")).status, 0);
  auto second = run(lab_command(state_dir, "up redis"));
  EXPECT_NE(second.status, 0);
  EXPECT_NE(second.output.find("already running"), std::string::npos) << second.output;

  // A test binary reuses the running lab through DLOCK_LAB_STATE_DIR instead of starting servers.
  {
    ::setenv("DLOCK_LAB_STATE_DIR", state_dir.c_str(), 1);
    lab::lab_environment environment({lab::backend::redis, lab::backend::etcd});
    environment.SetUp();
    ::unsetenv("DLOCK_LAB_STATE_DIR");
    EXPECT_TRUE(environment.attached());
    EXPECT_EQ(environment.owned_lab(), nullptr);
    ASSERT_TRUE(environment.available(lab::backend::redis));
    EXPECT_EQ(environment.config_path(lab::backend::redis), state->lab_dir / "redis.yaml");
    lab::redis_client(environment.access(lab::backend::redis).endpoints[0]).checked({"SET", "k", "v"});
    environment.reset();
    EXPECT_EQ(lab::redis_client(environment.access(lab::backend::redis).endpoints[0]).checked({"EXISTS", "k"}).integer, 0);
    environment.TearDown();  // leaves the attached servers alone
    EXPECT_TRUE(lab::running_lab(state_dir));
  }

  auto down = run(lab_command(state_dir, "down"));
  EXPECT_EQ(down.status, 0) << down.output;
  EXPECT_FALSE(lab::process_alive(state->supervisor_pid));
  auto survivors = lab::wait_until_no_process_mentions(state->lab_dir.string(), 2s);
  EXPECT_TRUE(survivors.empty()) << describe(survivors);
  EXPECT_FALSE(fs::exists(state->lab_dir)) << "down removes the lab directory";
  EXPECT_FALSE(fs::exists(lab::state_file_path(state_dir)));
  EXPECT_NE(run(lab_command(state_dir, "env")).status, 0) << "nothing runs any more";
  EXPECT_EQ(run(lab_command(state_dir, "down")).status, 0) << "down is idempotent";
  std::error_code ignored;
  fs::remove_all(state_dir, ignored);
}

TEST(LabCommand, ServersDieWithAKilledSupervisorAndDownCleansUp) {
  auto state_dir = make_temp_dir("dlock-lab-cli-state");
  auto up = run(lab_command(state_dir, "up redis etcd"));
  ASSERT_EQ(up.status, 0) << up.output;
  auto state = lab::running_lab(state_dir);
  ASSERT_TRUE(state);
  EXPECT_FALSE(lab::processes_mentioning(state->lab_dir.string()).empty());

  ASSERT_EQ(::kill(state->supervisor_pid, SIGKILL), 0);
  auto survivors = lab::wait_until_no_process_mentions(state->lab_dir.string(), 10s);
  EXPECT_TRUE(survivors.empty()) << "servers outlived their supervisor:" << describe(survivors);
  // The servers may be gone (their parent-death signal fires early in the supervisor's exit) while
  // the supervisor itself is still finishing its exit, so its own end is awaited, not sampled.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (lab::running_lab(state_dir) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(lab::running_lab(state_dir));

  auto down = run(lab_command(state_dir, "down"));
  EXPECT_EQ(down.status, 0) << down.output;
  EXPECT_FALSE(fs::exists(state->lab_dir));
  // And a new `up` works in the same state directory afterwards.
  auto again = run(lab_command(state_dir, "up redis"));
  EXPECT_EQ(again.status, 0) << again.output;
  EXPECT_EQ(run(lab_command(state_dir, "down")).status, 0);
  std::error_code ignored;
  fs::remove_all(state_dir, ignored);
}

TEST(LabCommand, UpReportsWhichServerFailedAndWhy) {
  auto state_dir = make_temp_dir("dlock-lab-cli-state");
  auto unknown = run(lab_command(state_dir, "up no-such-backend"));
  EXPECT_NE(unknown.status, 0);
  EXPECT_NE(unknown.output.find("no-such-backend"), std::string::npos) << unknown.output;

  // PostgreSQL cannot answer within 0 s (initdb alone takes longer): the error names the server, its
  // port and what it printed.
  auto too_fast = run(lab_command(state_dir, "up sql --timeout 0"));
  EXPECT_NE(too_fast.status, 0);
  EXPECT_TRUE(std::regex_search(too_fast.output, std::regex("sql \\(127\\.0\\.0\\.1:[0-9]+\\): not ready after [0-9]+ ms")))
      << too_fast.output;
  EXPECT_NE(too_fast.output.find("sql/server.log"), std::string::npos) << "names the log" << too_fast.output;
  EXPECT_FALSE(lab::running_lab(state_dir));
  EXPECT_EQ(run(lab_command(state_dir, "down")).status, 0);
  std::error_code ignored;
  fs::remove_all(state_dir, ignored);
}

uid_t uid_of(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Uid:", 0) == 0) return static_cast<uid_t>(std::stoul(line.substr(4)));
  }
  return static_cast<uid_t>(-1);
}

TEST(LabCrash, ServersDieWhenTheProcessHoldingTheLabIsKilled) {
  auto work = make_temp_dir("dlock-lab-crash");
  auto report = work / "started";
  pid_t helper = ::fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    ::execl(DLOCK_LAB_CRASH_HELPER, DLOCK_LAB_CRASH_HELPER, report.c_str(), "redis", "zookeeper", "etcd", "sql",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  bool started = eventually([&] { return fs::exists(report); }, 90s);
  if (!started) {
    ::kill(helper, SIGKILL);
    ::waitpid(helper, nullptr, 0);
    FAIL() << "the helper did not start its lab within 90 s";
  }
  std::string lab_dir;
  std::map<std::string, pid_t> servers;
  {
    std::ifstream in(report);
    std::string kind;
    while (in >> kind) {
      if (kind == "dir") {
        in >> lab_dir;
      } else {
        std::string name;
        pid_t pid;
        in >> name >> pid;
        servers[name] = pid;
      }
    }
  }
  ASSERT_EQ(servers.size(), 4u);
  for (const auto& [name, pid] : servers) EXPECT_TRUE(lab::process_alive(pid)) << name;
  if (::geteuid() == 0) {
    EXPECT_NE(uid_of(servers["sql"]), 0u) << "PostgreSQL runs as the postgres user (its PDEATHSIG was set after the switch)";
  }
  auto before = lab::processes_mentioning(lab_dir);
  std::cout << before.size() << " processes mention " << lab_dir << " before the kill\n";

  auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(helper, SIGKILL), 0);
  ::waitpid(helper, nullptr, 0);
  auto survivors = lab::wait_until_no_process_mentions(lab_dir, 10s);
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed_at);
  std::cout << "all servers gone " << took.count() << " ms after the SIGKILL\n";
  EXPECT_TRUE(survivors.empty()) << "orphan servers:" << describe(survivors);
  // A process in the middle of exiting has lost its cmdline before it becomes a zombie: wait for that.
  for (const auto& [name, pid] : servers) {
    EXPECT_TRUE(eventually([pid = pid] { return !lab::process_alive(pid); }, 5s)) << name << " (pid " << pid << ") survived";
  }

  std::error_code ignored;
  fs::remove_all(lab_dir, ignored);  // nobody else will: its owner is dead
  fs::remove_all(work, ignored);
}

TEST(LabCrash, ServerStartedFromAShortLivedThreadOutlivesTheThread) {
  auto dir = make_temp_dir("dlock-lab-thread");
  {
    lab::redis_server redis("redis", dir / "redis", lab::reserve_loopback_ports(1)[0], {});
    std::thread starter([&] { redis.start(); });
    starter.join();  // the thread that asked for the fork is gone
    std::this_thread::sleep_for(300ms);
    EXPECT_TRUE(redis.running());
    EXPECT_TRUE(redis.probe()) << "PR_SET_PDEATHSIG follows the lab's spawner thread, not the caller's thread";
    std::thread restarter([&] { redis.restart(lab::data_policy::keep); });
    restarter.join();
    std::this_thread::sleep_for(300ms);
    EXPECT_TRUE(redis.probe());
  }
  EXPECT_TRUE(lab::wait_until_no_process_mentions(dir.string(), 2s).empty()) << "the destructor kills it";
  std::error_code ignored;
  fs::remove_all(dir, ignored);
}

}  // namespace
