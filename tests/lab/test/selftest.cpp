// lab_selftest — starts every server kind once (through lab_environment, as other test binaries do),
// performs one real operation on each, kills and restarts a member of each quorum system and checks it
// rejoins (it serves a read and reports follower/leader), exercises pause/resume, restarts with and
// without data, the clock-jump substitute, the proxy against a real server and a network-namespace
// partition, and finally checks that no process mentioning the lab's directory survives teardown.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "dlock/lab/faults.hpp"
#include "dlock/lab/gtest.hpp"
#include "dlock/lab/lab.hpp"
#include "dlock/lab/proxy.hpp"
#include "lab_test_helpers.hpp"

namespace lab = dlock::lab;
using namespace std::chrono_literals;
using lab::backend;
using lab::test::eventually;

namespace {

std::string lab_dir_seen;  // recorded at set-up, checked after teardown

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class LabSelfTest : public lab::lab_test {
 protected:
  void SetUp() override {
    if (!environment().owned_lab()) {
      if (lab::running_in_ci()) FAIL() << "the lab did not start; see the environment set-up above";
      GTEST_SKIP() << "the lab did not start; see the environment set-up above";
    }
    lab::lab_test::SetUp();
  }
  lab::lab& owned() { return *environment().owned_lab(); }
};

TEST_F(LabSelfTest, EveryServerKindStartedAndReportsItsStartupTime) {
  for (backend b : lab::all_backends()) DLOCK_LAB_REQUIRE(b);
  auto records = owned().startup_records();
  EXPECT_EQ(records.size(), 1u + 5u + 1u + 3u + 1u + 3u + 1u);
  std::cout << "startup time per server (launch → first answered probe):\n";
  for (const auto& record : records) {
    std::cout << "  " << record.server << " (" << lab::backend_name(record.kind) << ") " << record.client.to_string()
              << ": " << record.time.count() << " ms\n";
    EXPECT_GT(record.time.count(), 0) << record.server;
    RecordProperty("startup_ms_" + record.server, static_cast<int>(record.time.count()));
  }
  std::cout << "whole set, in parallel: " << owned().total_startup_time().count() << " ms\n";
  RecordProperty("startup_ms_total", static_cast<int>(owned().total_startup_time().count()));
  EXPECT_LT(owned().total_startup_time(), 60s) << "target is well under 20 s on a 2-core machine";
}

TEST_F(LabSelfTest, ConfigsReachEveryBackend) {
  for (backend b : lab::all_backends()) {
    DLOCK_LAB_REQUIRE(b);
    auto access = owned().access(b);
    EXPECT_EQ(access.config, owned().dir() / (std::string(lab::backend_name(b)) + ".yaml"));
    EXPECT_EQ(read_file(access.config), lab::render_config(b, access.endpoints)) << access.config;
  }
  EXPECT_EQ(read_file(owned().config_path(backend::redis)),
            "backend: redis\noptions:\n  endpoint: \"" + owned().redis().client_endpoint().to_string() + "\"\n");
  EXPECT_NE(read_file(owned().config_path(backend::zookeeper_ensemble))
                .find("connect: \"" + owned().zookeeper_ensemble().connect_string() + "\""),
            std::string::npos);
  EXPECT_NE(read_file(owned().config_path(backend::sql)).find("dsn: \"" + owned().sql().dsn() + "\""),
            std::string::npos);
  EXPECT_EQ(owned().access(backend::redlock).endpoints.size(), 5u);
}

TEST_F(LabSelfTest, RedisSetGetOnEveryNode) {
  DLOCK_LAB_REQUIRE(backend::redis);
  DLOCK_LAB_REQUIRE(backend::redlock);
  auto client = owned().redis().client();
  client.checked({"SET", "selftest", "value"});
  EXPECT_EQ(client.checked({"GET", "selftest"}).text, "value");
  for (std::size_t i = 0; i < owned().redlock().size(); ++i) {
    auto node = owned().redlock().node(i).client();
    node.checked({"SET", "selftest", std::to_string(i)});
    EXPECT_EQ(node.checked({"GET", "selftest"}).text, std::to_string(i));
  }
  // Independent nodes: node 0 still has its own value.
  EXPECT_EQ(owned().redlock().node(0).client().checked({"GET", "selftest"}).text, "0");
}

TEST_F(LabSelfTest, ZooKeeperCreateGetOnStandaloneAndEnsemble) {
  DLOCK_LAB_REQUIRE(backend::zookeeper);
  DLOCK_LAB_REQUIRE(backend::zookeeper_ensemble);
  EXPECT_EQ(owned().zookeeper().role(), "standalone");
  lab::zookeeper_client single(owned().zookeeper().client_endpoint().to_string());
  single.create("/selftest", "hello");
  EXPECT_EQ(single.get("/selftest"), "hello");

  auto& ensemble = owned().zookeeper_ensemble();
  lab::zookeeper_client quorum(ensemble.connect_string());
  quorum.create("/selftest", "quorum");
  int leaders = 0;
  for (std::size_t i = 0; i < ensemble.size(); ++i) {
    auto role = ensemble.member(i).role();
    EXPECT_TRUE(role == "leader" || role == "follower") << ensemble.member(i).name() << ": " << role;
    leaders += role == "leader";
    lab::zookeeper_client direct(ensemble.member(i).client_endpoint().to_string());
    EXPECT_TRUE(eventually([&] { return direct.get("/selftest") == std::optional<std::string>("quorum"); }, 5s))
        << ensemble.member(i).name();
  }
  EXPECT_EQ(leaders, 1);
}

TEST_F(LabSelfTest, EtcdPutGetOnSingleAndCluster) {
  DLOCK_LAB_REQUIRE(backend::etcd);
  DLOCK_LAB_REQUIRE(backend::etcd_cluster);
  auto single = owned().etcd().client();
  single.put("selftest/key", "value");
  EXPECT_EQ(single.get("selftest/key"), "value");
  EXPECT_EQ(owned().etcd().role(), "standalone");

  auto& cluster = owned().etcd_cluster();
  cluster.member(0).client().put("selftest/key", "cluster");
  int leaders = 0;
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    auto& member = cluster.member(i);
    EXPECT_TRUE(eventually([&] { return member.client().get("selftest/key", true) == std::optional<std::string>("cluster"); }, 5s))
        << member.name();
    auto role = member.role();
    EXPECT_TRUE(role == "leader" || role == "follower") << member.name() << ": " << role;
    leaders += role == "leader";
  }
  EXPECT_EQ(leaders, 1);
  EXPECT_EQ(cluster.member(1).client().members().size(), 3u);
}

TEST_F(LabSelfTest, PostgresAnswersQueries) {
  DLOCK_LAB_REQUIRE(backend::sql);
  auto client = owned().sql().client();
  EXPECT_EQ(client.query_value("SELECT 40 + 2"), "42");
  EXPECT_EQ(client.query_value("SELECT current_user"), "postgres");
  if (::geteuid() == 0) {
    // Running as root, the server itself runs as the postgres user.
    std::ifstream status("/proc/" + std::to_string(owned().sql().pid()) + "/status");
    std::string line;
    std::string uid_line;
    while (std::getline(status, line)) {
      if (line.rfind("Uid:", 0) == 0) uid_line = line;
    }
    EXPECT_EQ(uid_line.find("\t0\t"), std::string::npos) << uid_line;
  }
}

TEST_F(LabSelfTest, ResetClearsEveryBackend) {
  for (backend b : lab::all_backends()) DLOCK_LAB_REQUIRE(b);
  owned().redis().client().checked({"SET", "leftover", "1"});
  owned().redlock().node(4).client().checked({"SET", "leftover", "1"});
  lab::zookeeper_client(owned().zookeeper().client_endpoint().to_string()).create("/leftover", "");
  {
    lab::zookeeper_client ensemble(owned().zookeeper_ensemble().connect_string());
    ensemble.create("/leftover", "");
    ensemble.create("/leftover/child", "");
  }
  owned().etcd().client().put("leftover", "1");
  owned().etcd_cluster().member(2).client().put("leftover", "1");
  owned().sql().client().execute("CREATE TABLE IF NOT EXISTS leftover (id serial primary key, v text); "
                                 "INSERT INTO leftover (v) VALUES ('x')");

  environment().reset();

  EXPECT_EQ(owned().redis().client().checked({"EXISTS", "leftover"}).integer, 0);
  EXPECT_EQ(owned().redlock().node(4).client().checked({"EXISTS", "leftover"}).integer, 0);
  EXPECT_FALSE(lab::zookeeper_client(owned().zookeeper().client_endpoint().to_string()).get("/leftover"));
  EXPECT_FALSE(lab::zookeeper_client(owned().zookeeper_ensemble().connect_string()).get("/leftover"));
  EXPECT_FALSE(owned().etcd().client().get("leftover"));
  EXPECT_FALSE(owned().etcd_cluster().member(0).client().get("leftover"));
  auto sql = owned().sql().client();
  EXPECT_EQ(sql.query_value("SELECT count(*) FROM leftover"), "0");
  sql.execute("INSERT INTO leftover (v) VALUES ('y')");
  EXPECT_EQ(sql.query_value("SELECT max(id) FROM leftover"), "1") << "RESTART IDENTITY";
  sql.execute("DROP TABLE leftover");
}

TEST_F(LabSelfTest, ZooKeeperEnsembleMembersRejoinAfterKillAndRestart) {
  DLOCK_LAB_REQUIRE(backend::zookeeper_ensemble);
  auto& ensemble = owned().zookeeper_ensemble();
  std::size_t leader = ensemble.wait_for_leader();
  std::size_t follower = (leader + 1) % ensemble.size();

  // A follower dies; the remaining majority keeps serving; the follower comes back with its data.
  ensemble.member(follower).kill();
  EXPECT_FALSE(ensemble.member(follower).running());
  {
    lab::zookeeper_client majority(ensemble.member(leader).client_endpoint().to_string());
    majority.create("/written-while-follower-down", "1");
  }
  auto restart_begin = std::chrono::steady_clock::now();
  ensemble.member(follower).restart(lab::data_policy::keep);
  std::cout << ensemble.member(follower).name() << " rejoined (keep data) in " << ensemble.member(follower).startup_time().count()
            << " ms\n";
  auto role = ensemble.member(follower).role();
  EXPECT_TRUE(role == "follower" || role == "leader") << role;
  {
    lab::zookeeper_client direct(ensemble.member(follower).client_endpoint().to_string());
    EXPECT_TRUE(eventually([&] { return direct.get("/written-while-follower-down").has_value(); }, 10s));
  }
  (void)restart_begin;

  // The leader dies; another member takes over; the old leader comes back without its data and
  // catches up from the new leader.
  ensemble.member(leader).kill();
  std::size_t new_leader = ensemble.wait_for_leader(20s);
  EXPECT_NE(new_leader, leader);
  std::cout << "new ZooKeeper leader: " << ensemble.member(new_leader).name() << "\n";
  {
    lab::zookeeper_client majority(ensemble.member(new_leader).client_endpoint().to_string());
    majority.create("/written-while-leader-down", "2");
  }
  ensemble.member(leader).restart(lab::data_policy::wipe);
  role = ensemble.member(leader).role();
  EXPECT_TRUE(role == "follower" || role == "leader") << role;
  lab::zookeeper_client direct(ensemble.member(leader).client_endpoint().to_string());
  EXPECT_TRUE(eventually([&] { return direct.get("/written-while-leader-down") == std::optional<std::string>("2"); }, 10s));
  EXPECT_TRUE(direct.get("/written-while-follower-down").has_value());
  EXPECT_TRUE(ensemble.leader_index().has_value());
}

TEST_F(LabSelfTest, EtcdClusterMembersRejoinAfterKillAndRestart) {
  DLOCK_LAB_REQUIRE(backend::etcd_cluster);
  auto& cluster = owned().etcd_cluster();
  std::size_t leader = cluster.wait_for_leader();
  std::size_t follower = (leader + 1) % cluster.size();

  cluster.member(follower).kill();
  cluster.member(leader).client().put("written-while-follower-down", "1");
  cluster.member(follower).restart(lab::data_policy::keep);
  std::cout << cluster.member(follower).name() << " rejoined (keep data) in "
            << cluster.member(follower).startup_time().count() << " ms\n";
  EXPECT_TRUE(eventually([&] {
    return cluster.member(follower).client().get("written-while-follower-down", /*serializable=*/true).has_value();
  }, 10s));
  auto role = cluster.member(follower).role();
  EXPECT_TRUE(role == "follower" || role == "leader") << role;

  // Kill the leader: a new one is elected; the old one is replaced as a member with no data.
  cluster.member(leader).kill();
  std::size_t new_leader = cluster.wait_for_leader(20s);
  EXPECT_NE(new_leader, leader);
  std::cout << "new etcd leader: " << cluster.member(new_leader).name() << "\n";
  cluster.member(new_leader).client().put("written-while-leader-down", "2");
  cluster.member(leader).restart(lab::data_policy::wipe);
  std::cout << cluster.member(leader).name() << " rejoined (wiped, re-added) in "
            << cluster.member(leader).startup_time().count() << " ms\n";
  EXPECT_TRUE(eventually([&] {
    return cluster.member(leader).client().get("written-while-leader-down", true) == std::optional<std::string>("2");
  }, 10s));
  role = cluster.member(leader).role();
  EXPECT_TRUE(role == "follower" || role == "leader") << role;
  auto members = cluster.member(new_leader).client().members();
  EXPECT_EQ(members.size(), 3u);
  for (const auto& member : members) EXPECT_FALSE(member.name.empty()) << "a member that never started";
}

TEST_F(LabSelfTest, PauseStopsAServerAndResumeBringsItBack) {
  DLOCK_LAB_REQUIRE(backend::redis);
  DLOCK_LAB_REQUIRE(backend::zookeeper);
  DLOCK_LAB_REQUIRE(backend::sql);
  auto& redis = owned().redis();
  auto client = redis.client(300ms);
  redis.pause();
  auto begin = std::chrono::steady_clock::now();
  EXPECT_THROW(client.command({"PING"}), lab::client_error);
  EXPECT_GE(std::chrono::steady_clock::now() - begin, 250ms) << "a paused server times out, it does not refuse";
  EXPECT_TRUE(redis.running());
  redis.resume();
  EXPECT_EQ(redis.client().checked({"PING"}).text, "PONG");

  auto& zookeeper = owned().zookeeper();
  zookeeper.pause();
  EXPECT_THROW(zookeeper.four_letter_word("ruok", 300ms), lab::client_error);
  zookeeper.resume();
  EXPECT_EQ(zookeeper.four_letter_word("ruok"), "imok");

  // PostgreSQL backends live in their own sessions; pause must stop every one of them.
  auto& sql = owned().sql();
  auto connection = sql.client();
  sql.pause();
  auto processes = lab::processes_mentioning(sql.dir().string());
  EXPECT_GE(processes.size(), 3u);
  for (const auto& p : processes) EXPECT_EQ(p.state, 'T') << p.pid << " " << p.cmdline;
  sql.resume();
  EXPECT_EQ(connection.query_value("SELECT 1"), "1");
}

TEST_F(LabSelfTest, RedisRestartLosesDataWithoutPersistenceAndKeepsItWithAppendfsyncAlways) {
  DLOCK_LAB_REQUIRE(backend::redis);
  auto& volatile_redis = owned().redis();
  volatile_redis.client().checked({"SET", "lock", "held"});
  volatile_redis.kill();
  volatile_redis.restart(lab::data_policy::keep);
  EXPECT_EQ(volatile_redis.client().checked({"EXISTS", "lock"}).integer, 0) << "persistence is off by default";

  lab::redis_options durable;
  durable.appendonly = true;
  durable.appendfsync = "always";
  lab::redis_server persistent("redis-aof", owned().dir() / "redis-aof", lab::reserve_loopback_ports(1)[0], durable);
  persistent.start();
  persistent.client().checked({"SET", "lock", "held"});
  persistent.kill();  // no chance to save on exit: only the fsynced AOF survives
  persistent.restart(lab::data_policy::keep);
  EXPECT_EQ(persistent.client().checked({"GET", "lock"}).text, "held");
  persistent.restart(lab::data_policy::wipe);
  EXPECT_EQ(persistent.client().checked({"EXISTS", "lock"}).integer, 0);
}

TEST_F(LabSelfTest, PostgresRestartKeepsOrWipesData) {
  DLOCK_LAB_REQUIRE(backend::sql);
  auto& sql = owned().sql();
  sql.client().execute("CREATE TABLE survives (v int); INSERT INTO survives VALUES (7)");
  sql.kill();
  sql.restart(lab::data_policy::keep);
  EXPECT_EQ(sql.client().query_value("SELECT v FROM survives"), "7");
  sql.restart(lab::data_policy::wipe);
  std::cout << "PostgreSQL restart without data (initdb + start): " << sql.startup_time().count() << " ms\n";
  EXPECT_EQ(sql.client().query_value("SELECT count(*) FROM pg_tables WHERE tablename = 'survives'"), "0");
}

TEST_F(LabSelfTest, ClockJumpSubstituteExpiresLockKeysEarly) {
  DLOCK_LAB_REQUIRE(backend::redlock);
  auto& node = owned().redlock().node(2);
  auto client = node.client();
  client.checked({"SET", "dlock:lock:a", "owner", "PX", "10000"});
  client.checked({"SET", "dlock:lock:b", "owner", "PX", "60000"});
  client.checked({"SET", "dlock:fence:a", "41"});
  client.checked({"SET", "other", "x", "PX", "10000"});

  EXPECT_EQ(node.expire_keys_early("dlock:*", 20s), 2);

  EXPECT_EQ(client.checked({"EXISTS", "dlock:lock:a"}).integer, 0) << "its ttl was shorter than the jump";
  auto ttl_b = client.checked({"PTTL", "dlock:lock:b"}).integer;
  EXPECT_GT(ttl_b, 30000);
  EXPECT_LE(ttl_b, 40000);
  EXPECT_EQ(client.checked({"GET", "dlock:fence:a"}).text, "41") << "keys without expiry are untouched";
  EXPECT_GT(client.checked({"PTTL", "other"}).integer, 9000) << "keys outside the pattern are untouched";
  // Other nodes are unaffected, as a jump on one machine would be.
  EXPECT_EQ(owned().redlock().node(1).client().checked({"DBSIZE"}).integer, 0);
}

TEST_F(LabSelfTest, ProxyDelaysBlackholesAndCutsRealRedisTraffic) {
  DLOCK_LAB_REQUIRE(backend::redis);
  lab::tcp_proxy proxy(owned().redis().client_endpoint());
  lab::redis_client client(proxy.listen_endpoint(), 2s);
  EXPECT_EQ(client.checked({"PING"}).text, "PONG");

  proxy.set_delay(50ms);
  auto begin = std::chrono::steady_clock::now();
  EXPECT_EQ(client.checked({"PING"}).text, "PONG");
  auto round_trip = std::chrono::steady_clock::now() - begin;
  std::cout << "PING through the proxy with 50 ms each way: "
            << std::chrono::duration_cast<std::chrono::microseconds>(round_trip).count() << " us\n";
  EXPECT_GE(round_trip, 100ms);
  EXPECT_LT(round_trip, 600ms);
  proxy.set_delay(0ms);

  proxy.blackhole();
  lab::redis_client stalled(proxy.listen_endpoint(), 300ms);  // connects: the kernel accepts
  EXPECT_THROW(stalled.command({"PING"}), lab::client_error) << "a blackholed request gets no answer";
  EXPECT_THROW(client.command({"SET", "through-hole", "1"}), lab::client_error);
  proxy.heal();
  // The held SET was delivered on heal, as TCP would retransmit it.
  EXPECT_TRUE(eventually([&] { return owned().redis().client().checked({"EXISTS", "through-hole"}).integer == 1; }, 2s));

  lab::redis_client fresh(proxy.listen_endpoint(), 2s);
  EXPECT_EQ(fresh.checked({"PING"}).text, "PONG");
  proxy.cut_all();
  EXPECT_THROW(fresh.command({"PING"}), lab::client_error) << "a cut connection is reset";
  EXPECT_GE(proxy.stats().cut, 1u);
  EXPECT_EQ(lab::redis_client(proxy.listen_endpoint(), 2s).checked({"PING"}).text, "PONG");
}

TEST_F(LabSelfTest, AServerOnATakenPortFailsWithTheReasonTheLabRetriesOn) {
  lab::tcp_proxy squatter(lab::endpoint{"127.0.0.1", 1});  // any listening socket will do
  lab::redis_server redis("redis-squatted", owned().dir() / "redis-squatted", squatter.listen_endpoint().port, {});
  try {
    redis.start(10s);
    ADD_FAILURE() << "started on a port that is taken";
  } catch (const lab::server_error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("redis-squatted (127.0.0.1:" + std::to_string(squatter.listen_endpoint().port) + ")"),
              std::string::npos) << message;
    EXPECT_NE(message.find("exited during startup"), std::string::npos) << message;
    EXPECT_NE(message.find("already in use"), std::string::npos) << message;
  }
}

TEST_F(LabSelfTest, FaultCapabilitiesAreProbedAndReported) {
  auto capabilities = lab::probe_fault_capabilities();
  std::cout << capabilities.report();
  EXPECT_TRUE(capabilities.signals.available);
  EXPECT_TRUE(capabilities.proxy.available);
  EXPECT_FALSE(capabilities.netem.detail.empty());
  EXPECT_FALSE(capabilities.network_namespaces.detail.empty());
  if (!capabilities.faketime_redis.available) {
    EXPECT_NE(capabilities.faketime_redis.detail.find("expire_keys_early"), std::string::npos)
        << "an unavailable clock jump names its substitute";
  }
}

TEST_F(LabSelfTest, NetworkNamespacePartitionsAServerFromTheHost) {
  auto probe = lab::probe_network_namespaces();
  if (!probe.available) GTEST_SKIP() << "network namespaces are not available here: " << probe.detail;
  lab::network_namespace ns;
  auto port = lab::reserve_loopback_ports(1)[0];
  auto dir = owned().dir() / "netns-redis";
  std::filesystem::create_directories(dir);
  lab::spawn_options spawn;
  spawn.argv = {"redis-server", "--bind", ns.namespace_address(), "--port", std::to_string(port), "--save", "",
                "--appendonly", "no", "--dir", dir.string(), "--set-proc-title", "no",
                "--protected-mode", "no"};  // clients come from the host's veth address, not loopback
  spawn.network_namespace = ns.name();
  spawn.log_path = dir / "server.log";
  auto process = lab::child_process::spawn(spawn);
  lab::endpoint inside{ns.namespace_address(), port};
  ASSERT_TRUE(eventually([&] { return lab::redis_client(inside, 300ms).checked({"PING"}).text == "PONG"; }, 10s))
      << lab::file_tail(dir / "server.log");
  lab::redis_client client(inside, 500ms);
  EXPECT_EQ(client.checked({"PING"}).text, "PONG");

  ns.drop_from_host();
  EXPECT_THROW(client.command({"PING"}), lab::client_error) << "partitioned: no answer";
  EXPECT_THROW(lab::redis_client(inside, 500ms), lab::client_error) << "partitioned: no new connection";
  ns.heal();
  EXPECT_TRUE(eventually([&] { return lab::redis_client(inside, 500ms).checked({"PING"}).text == "PONG"; }, 5s));
  process.kill_group();
}

// Records the owned lab's directory once it is up, so main() can check after teardown.
class remember_lab_dir : public ::testing::Environment {
 public:
  void SetUp() override {
    if (auto* owned = lab::lab_environment::instance().owned_lab()) lab_dir_seen = owned->dir().string();
  }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::unsetenv("DLOCK_LAB_STATE_DIR");  // fault controls need servers this process owns
  lab::add_lab_environment(lab::all_backends());
  ::testing::AddGlobalTestEnvironment(new remember_lab_dir);
  int result = RUN_ALL_TESTS();
  // The environments are torn down now. Nothing may still mention the lab's directory.
  if (!lab_dir_seen.empty()) {
    auto survivors = lab::wait_until_no_process_mentions(lab_dir_seen, 2s);
    for (const auto& p : survivors) std::cout << "SURVIVOR pid " << p.pid << ": " << p.cmdline << "\n";
    std::cout << "after teardown: " << survivors.size() << " processes mention " << lab_dir_seen << "; directory "
              << (std::filesystem::exists(lab_dir_seen) ? "still exists" : "removed") << "\n";
    if (!survivors.empty() || std::filesystem::exists(lab_dir_seen)) result = 1;
  }
  return result;
}
