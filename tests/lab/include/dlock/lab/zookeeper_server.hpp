// zookeeper_server.hpp — defines dlock::lab::zookeeper_server (one ZooKeeper JVM, standalone or an
// ensemble member) and zookeeper_ensemble (a quorum of them, with leader lookup for fault tests).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/lab/server.hpp"

namespace dlock::lab {

struct zookeeper_options {
  // Small so that session expiry takes seconds: ZooKeeper bounds session timeouts to
  // [2, 20] ticks by default, i.e. 0.4 s … 4 s with 200 ms.
  std::chrono::milliseconds tick_time{200};
  int init_limit = 20;  // ticks a follower may take to connect and sync to the leader
  int sync_limit = 10;  // ticks a follower may lag behind the leader
  // false: `forceSync=no` (no fsync of the transaction log; writes still reach the OS before a reply,
  // so a killed server loses nothing — only a machine crash would). true: ZooKeeper's default.
  bool durable = false;
  std::string java = "/usr/bin/java";
  std::string max_heap = "128m";
};

// The ports of one ensemble member. server.<id>=127.0.0.1:<quorum_port>:<election_port>.
struct zookeeper_peer {
  int id = 0;
  std::uint16_t client_port = 0;
  std::uint16_t quorum_port = 0;
  std::uint16_t election_port = 0;
};

class zookeeper_server final : public server {
 public:
  // A standalone server.
  zookeeper_server(std::string name, std::filesystem::path dir, std::uint16_t client_port,
                   zookeeper_options options);
  // Member `my_id` of the ensemble `peers` (which includes this member).
  zookeeper_server(std::string name, std::filesystem::path dir, int my_id,
                   std::vector<zookeeper_peer> peers, zookeeper_options options);

  // Sends a four-letter word to this server (see clients.hpp). Throws client_error.
  std::string four_letter_word(std::string_view word,
                               std::chrono::milliseconds timeout = std::chrono::seconds(2));

  // The ensemble's members (empty for a standalone server), this one included.
  const std::vector<zookeeper_peer>& peers() const { return peers_; }
  int my_id() const { return my_id_; }

  // Ready when `srvr` reports a serving mode (standalone, leader or follower).
  bool probe() override;
  // The `Mode:` of `srvr`; "" when not serving (e.g. during an election) or paused.
  std::string role() override;

 protected:
  spawn_options launch_options() override;
  void before_launch() override;
  void wipe_data() override;  // keeps `myid`, so a member rejoins and syncs from the leader

 private:
  int my_id_ = 0;  // 0 for standalone
  std::vector<zookeeper_peer> peers_;
  zookeeper_options options_;
};

class zookeeper_ensemble {
 public:
  // `size` members named "<name>-1"… in sub-directories of `dir`, on fresh loopback ports.
  zookeeper_ensemble(std::string name, std::filesystem::path dir, std::size_t size,
                     zookeeper_options options);

  std::size_t size() const { return members_.size(); }
  zookeeper_server& member(std::size_t index) { return *members_.at(index); }
  // "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3".
  std::string connect_string() const;
  std::vector<endpoint> endpoints() const;

  void launch();
  // Every member serves (leader or follower).
  void wait_ready(std::chrono::steady_clock::time_point deadline);

  // Index of the member that reports `Mode: leader` now; nullopt when none does. Asks only members
  // that run and are not paused.
  std::optional<std::size_t> leader_index();
  // Polls leader_index() until there is a leader; throws server_error after `timeout`.
  std::size_t wait_for_leader(std::chrono::milliseconds timeout = std::chrono::seconds(20));
  zookeeper_server& leader(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    return member(wait_for_leader(timeout));
  }

 private:
  std::vector<std::unique_ptr<zookeeper_server>> members_;
};

}  // namespace dlock::lab
