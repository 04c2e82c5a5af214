// etcd_server.hpp — defines dlock::lab::etcd_server (one etcd member) and etcd_cluster (a group of
// members forming one cluster, with leader lookup for fault tests).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dlock/lab/clients.hpp"
#include "dlock/lab/server.hpp"

namespace dlock::lab {

struct etcd_options {
  // Short, so elections after a leader fault take well under a second.
  std::chrono::milliseconds heartbeat_interval{50};
  std::chrono::milliseconds election_timeout{500};
  // Further `--flag value` arguments passed through to etcd.
  std::vector<std::string> extra_args;
};

struct etcd_member_spec {
  std::string name;
  std::uint16_t client_port = 0;
  std::uint16_t peer_port = 0;
  std::string peer_url() const;
  std::string client_url() const;
};

class etcd_server final : public server {
 public:
  // Member `self` of the cluster `cluster` (which includes `self`; one entry for a single member).
  // `cluster_token` must be unique to this cluster, so members of other labs never join it.
  etcd_server(std::filesystem::path dir, etcd_member_spec self, std::vector<etcd_member_spec> cluster,
              std::string cluster_token, etcd_options options);

  etcd_client client(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;
  etcd_status status();

  // Ready when GET /health says true (the member serves and the cluster has a leader).
  bool probe() override;
  // "leader" or "follower" (from /v3/maintenance/status); "standalone" for a one-member cluster.
  std::string role() override;

  // With data_policy::wipe in a cluster of several members, the member is removed from the cluster
  // through a live peer, added back as a new member, and started with `--initial-cluster-state
  // existing` — etcd's documented way to replace a member that lost its data. Its member ID changes.
  // etcd accepts the change only once every remaining member has been connected for 5 s, so this
  // may wait that long (bounded by `timeout`).
  void restart(data_policy data, std::chrono::milliseconds timeout = default_startup_timeout) override;

 protected:
  spawn_options launch_options() override;
  void wipe_data() override;

 private:
  void replace_membership(std::chrono::milliseconds timeout);

  etcd_member_spec self_;
  std::vector<etcd_member_spec> cluster_;
  std::string cluster_token_;
  etcd_options options_;
  bool join_existing_ = false;
};

class etcd_cluster {
 public:
  // `size` members named "<name>-1"… in sub-directories of `dir`, on fresh loopback ports.
  etcd_cluster(std::string name, std::filesystem::path dir, std::size_t size, etcd_options options);

  std::size_t size() const { return members_.size(); }
  etcd_server& member(std::size_t index) { return *members_.at(index); }
  std::vector<endpoint> endpoints() const;

  void launch();
  void wait_ready(std::chrono::steady_clock::time_point deadline);

  // Index of the member that is the leader according to a running, unpaused member; nullopt when
  // there is none now.
  std::optional<std::size_t> leader_index();
  std::size_t wait_for_leader(std::chrono::milliseconds timeout = std::chrono::seconds(20));
  etcd_server& leader(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    return member(wait_for_leader(timeout));
  }

 private:
  std::vector<std::unique_ptr<etcd_server>> members_;
};

}  // namespace dlock::lab
