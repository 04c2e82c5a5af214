// lab_partition — dlock::lab::partition against real redis-servers on loopback: a client in the
// client namespace reaches them through the relay; a cut drops traffic per server and per direction
// (requests pass while replies are dropped, and the reverse); heal restores it; a client-side socket
// that dies by its mirrored keepalive resets the server's connection; nothing outlives the object
// and no address appears in the root namespace. In CI a namespace that cannot be made fails.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "dlock/lab/clients.hpp"
#include "dlock/lab/faults.hpp"
#include "dlock/lab/gtest.hpp"
#include "dlock/lab/netns.hpp"
#include "dlock/lab/process.hpp"
#include "lab_test_helpers.hpp"

namespace lab = dlock::lab;
using namespace std::chrono_literals;
using lab::test::eventually;

namespace {

// A redis-server on a free loopback port of the root namespace, killed at the end.
struct loopback_redis {
  loopback_redis() {
    port = lab::reserve_loopback_ports(1)[0];
    dir = std::filesystem::temp_directory_path() / ("dlock-partition-test-" + std::to_string(::getpid()) + "-" +
                                                    std::to_string(port));
    std::filesystem::create_directories(dir);
    lab::spawn_options spawn;
    spawn.argv = {"redis-server", "--bind", "127.0.0.1", "--port", std::to_string(port), "--save", "",
                  "--appendonly", "no", "--dir", dir.string(), "--set-proc-title", "no"};
    spawn.log_path = dir / "server.log";
    process = lab::child_process::spawn(spawn);
    if (!eventually([&] { return lab::redis_client(where(), 300ms).checked({"PING"}).text == "PONG"; }, 10s))
      throw std::runtime_error("redis-server did not start: " + lab::file_tail(dir / "server.log"));
  }
  ~loopback_redis() {
    process.kill_group();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  lab::endpoint where() const { return lab::endpoint{"127.0.0.1", port}; }
  // Client connections the server has now, as CLIENT LIST shows them (minus the asking one).
  int connected_clients() {
    auto list = lab::redis_client(where(), 1s).checked({"CLIENT", "LIST"}).text;
    int lines = 0;
    for (char c : list) lines += c == '\n';
    return lines - 1;
  }
  std::uint16_t port = 0;
  std::filesystem::path dir;
  lab::child_process process;
};

// Stops the test when partitions cannot be made: a failure in CI, a skip elsewhere.
#define REQUIRE_NAMESPACES()                                                               \
  do {                                                                                     \
    auto probe = lab::probe_network_namespaces();                                          \
    if (!probe.available) {                                                                \
      if (lab::running_in_ci()) FAIL() << "network namespaces unavailable: " << probe.detail; \
      GTEST_SKIP() << "network namespaces unavailable: " << probe.detail;                  \
    }                                                                                      \
  } while (0)

// A client connected from inside the client namespace (its socket stays there, whichever thread
// uses it afterwards) to server `index` through the link.
lab::redis_client connect_inside(const lab::partition& link, std::size_t index, std::chrono::milliseconds timeout) {
  std::optional<lab::redis_client> client;
  link.run_in_client_namespace([&] { client.emplace(link.endpoints()[index], timeout); });
  return std::move(*client);
}

bool namespace_exists(const std::string& name) { return std::filesystem::exists("/run/netns/" + name); }

TEST(LabPartition, RelaysFromTheClientNamespaceOnlyAndCleansUp) {
  REQUIRE_NAMESPACES();
  loopback_redis redis;
  std::string client_ns, server_ns, client_address, server_address;
  {
    lab::partition link({redis.where()});
    client_ns = link.client_namespace();
    server_ns = link.server_namespace();
    client_address = link.client_address();
    server_address = link.server_address();
    ASSERT_EQ(link.endpoints().size(), 1u);
    EXPECT_EQ(link.endpoints()[0].host, server_address);
    EXPECT_EQ(link.endpoints()[0].port, redis.port);
    EXPECT_TRUE(namespace_exists(client_ns));
    EXPECT_TRUE(namespace_exists(server_ns));

    link.run_in_client_namespace([&] {
      lab::redis_client client(link.endpoints()[0], 2s);
      EXPECT_EQ(client.checked({"SET", "k", "through-the-link"}).text, "OK");
    });
    EXPECT_EQ(lab::redis_client(redis.where(), 1s).checked({"GET", "k"}).text, "through-the-link");
    EXPECT_EQ(link.stats().accepted, 1u);

    // The root namespace has no address of the link and cannot reach the relay.
    std::string addresses;
    lab::run_command({"ip", "-o", "-4", "addr", "show"}, &addresses);
    EXPECT_EQ(addresses.find(" " + client_address + "/"), std::string::npos) << addresses;
    EXPECT_EQ(addresses.find(" " + server_address + "/"), std::string::npos) << addresses;
    EXPECT_THROW(lab::redis_client(link.endpoints()[0], 300ms), lab::client_error);
  }
  EXPECT_FALSE(namespace_exists(client_ns)) << "the destructor removes the client namespace";
  EXPECT_FALSE(namespace_exists(server_ns)) << "the destructor removes the server namespace";
}

TEST(LabPartition, FullCutSilencesAndHealRestores) {
  REQUIRE_NAMESPACES();
  loopback_redis redis;
  lab::partition link({redis.where()});
  link.run_in_client_namespace([&] {
    lab::redis_client client(link.endpoints()[0], 500ms);
    EXPECT_EQ(client.checked({"PING"}).text, "PONG");
    link.cut_all();
    EXPECT_TRUE(link.is_cut());
    EXPECT_THROW(client.command({"PING"}), lab::client_error) << "cut: no answer";
    EXPECT_THROW(lab::redis_client(link.endpoints()[0], 500ms), lab::client_error) << "cut: no new connection";
    link.heal();
    EXPECT_FALSE(link.is_cut());
    EXPECT_TRUE(eventually([&] { return lab::redis_client(link.endpoints()[0], 500ms).checked({"PING"}).text == "PONG"; }, 5s));
  });
}

TEST(LabPartition, AsymmetricCutPassesRequestsAndDropsReplies) {
  REQUIRE_NAMESPACES();
  loopback_redis redis;
  lab::partition link({redis.where()});
  link.run_in_client_namespace([&] {
    lab::redis_client client(link.endpoints()[0], 700ms);
    EXPECT_EQ(client.checked({"PING"}).text, "PONG");
    link.cut_all(lab::direction::downstream);
    EXPECT_THROW(client.command({"SET", "asym", "arrived"}), lab::client_error) << "the reply is dropped";
  });
  EXPECT_EQ(lab::redis_client(redis.where(), 1s).checked({"GET", "asym"}).text, "arrived")
      << "the request reached the server";

  link.heal();
  // Connected before the cut; the request is then dropped on its way to the server.
  auto client = connect_inside(link, 0, 700ms);
  EXPECT_EQ(client.checked({"PING"}).text, "PONG");
  link.cut_all(lab::direction::upstream);
  EXPECT_THROW(client.command({"SET", "up", "arrived"}), lab::client_error);
  EXPECT_EQ(lab::redis_client(redis.where(), 1s).command({"GET", "up"}).type, lab::redis_reply::kind::nil)
      << "an upstream cut keeps the request from the server";
}

TEST(LabPartition, CutsOneServerOfSeveral) {
  REQUIRE_NAMESPACES();
  loopback_redis first, second;
  lab::partition link({first.where(), second.where()});
  link.cut({0});
  link.run_in_client_namespace([&] {
    EXPECT_THROW(lab::redis_client(link.endpoints()[0], 500ms), lab::client_error) << "server 0 is cut";
    EXPECT_EQ(lab::redis_client(link.endpoints()[1], 1s).checked({"PING"}).text, "PONG") << "server 1 is not";
  });
}

TEST(LabPartition, ClientSideDeathByMirroredKeepaliveResetsTheServerConnection) {
  REQUIRE_NAMESPACES();
  loopback_redis redis;
  lab::mirrored_tcp mirror;
  mirror.keepalive_idle = 1s;
  mirror.keepalive_interval = 1s;
  mirror.keepalive_count = 1;
  mirror.user_timeout = 2s;
  lab::partition link({redis.where()}, mirror);
  const int before = redis.connected_clients();
  auto client = connect_inside(link, 0, 1s);
  EXPECT_EQ(client.checked({"PING"}).text, "PONG");
  EXPECT_EQ(redis.connected_clients(), before + 1) << "the relay's server-side connection";
  link.cut_all();
  // Idle behind the cut: the relay's keepalive probes go unanswered, its socket dies within the
  // user timeout (plus a probe interval), and the server's connection is reset then — not kept
  // alive by the relay.
  EXPECT_TRUE(eventually([&] { return redis.connected_clients() == before; }, 8s))
      << "the server still sees the cut client after 8 s";
  EXPECT_EQ(link.stats().upstream_resets, 1u);
}

TEST(LabPartition, WithoutMirroredSettingsAnIdleCutConnectionStaysOpenAsOnADirectLink) {
  REQUIRE_NAMESPACES();
  loopback_redis redis;
  lab::partition link({redis.where()});
  const int before = redis.connected_clients();
  auto client = connect_inside(link, 0, 1s);
  EXPECT_EQ(client.checked({"PING"}).text, "PONG");
  link.cut_all();
  std::this_thread::sleep_for(3s);
  EXPECT_EQ(redis.connected_clients(), before + 1)
      << "an idle connection whose server has no keepalive survives a silent cut";
  EXPECT_EQ(link.stats().upstream_resets, 0u);
}

}  // namespace
