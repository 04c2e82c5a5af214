// Implements etcd_server and etcd_cluster (etcd_server.hpp).
#include "dlock/lab/etcd_server.hpp"

#include <thread>

namespace dlock::lab {

std::string etcd_member_spec::peer_url() const { return "http://127.0.0.1:" + std::to_string(peer_port); }
std::string etcd_member_spec::client_url() const { return "http://127.0.0.1:" + std::to_string(client_port); }

etcd_server::etcd_server(std::filesystem::path dir, etcd_member_spec self, std::vector<etcd_member_spec> cluster,
                         std::string cluster_token, etcd_options options)
    : server(self.name, std::move(dir), endpoint{"127.0.0.1", self.client_port}),
      self_(std::move(self)),
      cluster_(std::move(cluster)),
      cluster_token_(std::move(cluster_token)),
      options_(std::move(options)) {}

spawn_options etcd_server::launch_options() {
  std::string initial_cluster;
  for (const auto& member : cluster_) {
    if (!initial_cluster.empty()) initial_cluster += ",";
    initial_cluster += member.name + "=" + member.peer_url();
  }
  spawn_options spawn;
  spawn.argv = {"etcd",
                "--name", self_.name,
                "--data-dir", (dir() / "data").string(),
                "--listen-client-urls", self_.client_url(),
                "--advertise-client-urls", self_.client_url(),
                "--listen-peer-urls", self_.peer_url(),
                "--initial-advertise-peer-urls", self_.peer_url(),
                "--initial-cluster", initial_cluster,
                "--initial-cluster-token", cluster_token_,
                "--initial-cluster-state", join_existing_ ? "existing" : "new",
                "--heartbeat-interval", std::to_string(options_.heartbeat_interval.count()),
                "--election-timeout", std::to_string(options_.election_timeout.count()),
                "--logger", "zap",
                "--log-outputs", "stderr"};
  spawn.argv.insert(spawn.argv.end(), options_.extra_args.begin(), options_.extra_args.end());
  spawn.log_path = log_path();
  spawn.working_dir = dir();
  return spawn;
}

void etcd_server::wipe_data() { std::filesystem::remove_all(dir() / "data"); }

etcd_client etcd_server::client(std::chrono::milliseconds timeout) const {
  return etcd_client(client_endpoint(), timeout);
}

etcd_status etcd_server::status() { return client().status(); }

bool etcd_server::probe() { return !paused() && client(std::chrono::milliseconds(1000)).healthy(); }

std::string etcd_server::role() {
  if (paused()) return "";
  try {
    auto status = client(std::chrono::milliseconds(1000)).status();
    if (status.leader == 0) return "";
    if (cluster_.size() == 1) return "standalone";
    return status.leader == status.member_id ? "leader" : "follower";
  } catch (const client_error&) {
    return "";
  }
}

void etcd_server::restart(data_policy data, std::chrono::milliseconds timeout) {
  if (running()) stop();
  if (data == data_policy::wipe) {
    wipe_data();
    if (cluster_.size() > 1) replace_membership(timeout);
  }
  start(timeout);
}

// A member that lost its data cannot rejoin under its old identity: remove it and add it back as a
// new member. etcd refuses reconfiguration while the cluster is unsettled (503 "unhealthy cluster":
// every voting member must have been connected for the last 5 s, e.g. after another member's
// restart), so this retries until `timeout`; before each add it checks whether an earlier attempt
// took effect, so the member is never added twice.
void etcd_server::replace_membership(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last_error;
  for (;;) {
    for (const auto& peer : cluster_) {
      if (peer.name == self_.name) continue;
      try {
        etcd_client through(endpoint{"127.0.0.1", peer.client_port});
        bool added = false;
        for (const auto& member : through.members()) {
          bool has_my_url = false;
          for (const auto& url : member.peer_urls) has_my_url = has_my_url || url == self_.peer_url();
          if (member.name == self_.name) {
            through.remove_member(member.id);  // the old identity
          } else if (has_my_url && member.name.empty()) {
            added = true;  // added by an earlier attempt, not started yet
          }
        }
        if (!added) through.add_member(self_.peer_url());
        join_existing_ = true;
        return;
      } catch (const client_error& error) {
        last_error = error.what();
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw failure("restart without data: the cluster did not accept the member's replacement within " +
                    std::to_string(timeout.count()) + " ms; last error: " + last_error);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

etcd_cluster::etcd_cluster(std::string name, std::filesystem::path dir, std::size_t size, etcd_options options) {
  auto ports = reserve_loopback_ports(size * 2);
  std::vector<etcd_member_spec> specs;
  for (std::size_t i = 0; i < size; ++i) {
    specs.push_back(etcd_member_spec{name + "-" + std::to_string(i + 1), ports[2 * i], ports[2 * i + 1]});
  }
  // Unique per lab directory, so a member of another lab that reuses a port never joins this cluster.
  std::string token = name + "@" + dir.string();
  for (const auto& spec : specs) {
    members_.push_back(std::make_unique<etcd_server>(dir / spec.name, spec, specs, token, options));
  }
}

std::vector<endpoint> etcd_cluster::endpoints() const {
  std::vector<endpoint> out;
  for (const auto& member : members_) out.push_back(member->client_endpoint());
  return out;
}

void etcd_cluster::launch() {
  for (auto& member : members_) member->launch();
}

void etcd_cluster::wait_ready(std::chrono::steady_clock::time_point deadline) {
  for (auto& member : members_) member->wait_ready(deadline);
}

std::optional<std::size_t> etcd_cluster::leader_index() {
  for (std::size_t i = 0; i < members_.size(); ++i) {
    auto& member = *members_[i];
    if (member.paused() || !member.running()) continue;
    try {
      auto status = member.client(std::chrono::milliseconds(1000)).status();
      if (status.leader != 0 && status.leader == status.member_id) return i;
    } catch (const client_error&) {
    }
  }
  return std::nullopt;
}

std::size_t etcd_cluster::wait_for_leader(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto index = leader_index()) return *index;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw server_error("etcd cluster: no leader after " + std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace dlock::lab
