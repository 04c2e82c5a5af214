// Implements zookeeper_server and zookeeper_ensemble (zookeeper_server.hpp).
#include "dlock/lab/zookeeper_server.hpp"

#include <algorithm>
#include <cstdlib>

#include <fstream>
#include <stdexcept>
#include <thread>

#include "dlock/lab/clients.hpp"

namespace dlock::lab {
namespace {

// "Mode: follower\n" → "follower"; "" when the answer has no mode (not serving).
std::string mode_of(const std::string& srvr) {
  auto at = srvr.find("Mode: ");
  if (at == std::string::npos) return "";
  auto end = srvr.find('\n', at);
  return srvr.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
}

std::uint16_t client_port_of(int my_id, const std::vector<zookeeper_peer>& peers) {
  for (const auto& peer : peers) {
    if (peer.id == my_id) return peer.client_port;
  }
  throw std::invalid_argument("zookeeper: myid " + std::to_string(my_id) + " is not in the peer list");
}

}  // namespace

zookeeper_server::zookeeper_server(std::string name, std::filesystem::path dir, std::uint16_t client_port,
                                   zookeeper_options options)
    : server(std::move(name), std::move(dir), endpoint{"127.0.0.1", client_port}), options_(std::move(options)) {}

zookeeper_server::zookeeper_server(std::string name, std::filesystem::path dir, int my_id,
                                   std::vector<zookeeper_peer> peers, zookeeper_options options)
    : server(std::move(name), std::move(dir), endpoint{"127.0.0.1", client_port_of(my_id, peers)}),
      my_id_(my_id),
      peers_(std::move(peers)),
      options_(std::move(options)) {}

namespace {

// A member SIGKILLed between writing a snapshot (or log) of a new epoch and recording that epoch in
// `currentEpoch` refuses to start: "The current epoch, N, is older than the last zxid". The remedy
// ZooKeeper's operators apply by hand is to raise currentEpoch and acceptedEpoch to the epoch of the
// newest zxid on disk (a zxid's high 32 bits); restarting after SIGKILL is what the lab's faults do,
// so it is applied before every launch. It changes nothing on a member that stopped cleanly.
void repair_epoch_files(const std::filesystem::path& version2) {
  std::error_code ec;
  if (!std::filesystem::is_directory(version2, ec)) return;
  uint64_t newest_zxid = 0;
  for (const auto& entry : std::filesystem::directory_iterator(version2, ec)) {
    const std::string file = entry.path().filename().string();
    const size_t dot = file.find('.');
    const std::string kind = file.substr(0, dot);
    if (dot == std::string::npos || (kind != "snapshot" && kind != "log")) continue;
    const uint64_t zxid = std::strtoull(file.c_str() + dot + 1, nullptr, 16);  // stops at ".tmp"
    newest_zxid = std::max(newest_zxid, zxid);
  }
  const uint64_t newest_epoch = newest_zxid >> 32;
  for (const char* name : {"currentEpoch", "acceptedEpoch"}) {
    const auto path = version2 / name;
    uint64_t recorded = 0;
    {
      std::ifstream in(path);
      if (!(in >> recorded)) continue;
    }
    if (recorded < newest_epoch) std::ofstream(path, std::ios::trunc) << newest_epoch;
  }
}

}  // namespace

void zookeeper_server::before_launch() {
  auto data = dir() / "data";
  std::filesystem::create_directories(data);
  repair_epoch_files(data / "version-2");
  std::ofstream config(dir() / "zoo.cfg", std::ios::trunc);
  config << "tickTime=" << options_.tick_time.count() << "\n"
         << "initLimit=" << options_.init_limit << "\n"
         << "syncLimit=" << options_.sync_limit << "\n"
         << "dataDir=" << data.string() << "\n"
         << "clientPort=" << client_endpoint().port << "\n"
         << "clientPortAddress=" << client_endpoint().host << "\n"
         << "admin.enableServer=false\n"
         << "4lw.commands.whitelist=*\n"
         // Fault tests open many sessions from one address; the default cap is 60.
         << "maxClientCnxns=0\n"
         << "forceSync=" << (options_.durable ? "yes" : "no") << "\n";
  for (const auto& peer : peers_) {
    config << "server." << peer.id << "=127.0.0.1:" << peer.quorum_port << ":" << peer.election_port << "\n";
  }
  config.close();
  if (!config) throw failure("cannot write " + (dir() / "zoo.cfg").string());
  if (my_id_ != 0) {
    std::ofstream myid(data / "myid", std::ios::trunc);
    myid << my_id_ << "\n";
  }
}

spawn_options zookeeper_server::launch_options() {
  std::string classpath = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar";
  // zookeeper.jar's manifest brings its dependencies but no SLF4J binding; without one the server
  // logs nothing, and a failed start would leave an empty log.
  if (std::filesystem::exists("/usr/share/java/slf4j-simple.jar")) classpath += ":/usr/share/java/slf4j-simple.jar";
  spawn_options spawn;
  spawn.argv = {options_.java,
                "-Xmx" + options_.max_heap,
                // Small, quick JVMs: four start at once on two cores.
                "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-Xss512k",
                "-Djava.net.preferIPv4Stack=true",
                "-Dorg.slf4j.simpleLogger.showDateTime=true",
                "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
                "-cp", classpath,
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                (dir() / "zoo.cfg").string()};
  spawn.log_path = log_path();
  spawn.working_dir = dir();
  return spawn;
}

void zookeeper_server::wipe_data() {
  std::filesystem::remove_all(dir() / "data" / "version-2");
}

std::string zookeeper_server::four_letter_word(std::string_view word, std::chrono::milliseconds timeout) {
  return zookeeper_four_letter_word(client_endpoint(), word, timeout);
}

bool zookeeper_server::probe() { return !role().empty(); }

std::string zookeeper_server::role() {
  if (paused()) return "";
  try {
    return mode_of(four_letter_word("srvr", std::chrono::milliseconds(1000)));
  } catch (const client_error&) {
    return "";
  }
}

zookeeper_ensemble::zookeeper_ensemble(std::string name, std::filesystem::path dir, std::size_t size,
                                       zookeeper_options options) {
  auto ports = reserve_loopback_ports(size * 3);
  std::vector<zookeeper_peer> peers;
  for (std::size_t i = 0; i < size; ++i) {
    peers.push_back(zookeeper_peer{static_cast<int>(i + 1), ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]});
  }
  for (std::size_t i = 0; i < size; ++i) {
    std::string member_name = name + "-" + std::to_string(i + 1);
    members_.push_back(std::make_unique<zookeeper_server>(member_name, dir / member_name,
                                                          static_cast<int>(i + 1), peers, options));
  }
}

std::string zookeeper_ensemble::connect_string() const {
  std::string out;
  for (const auto& member : members_) {
    if (!out.empty()) out += ",";
    out += member->client_endpoint().to_string();
  }
  return out;
}

std::vector<endpoint> zookeeper_ensemble::endpoints() const {
  std::vector<endpoint> out;
  for (const auto& member : members_) out.push_back(member->client_endpoint());
  return out;
}

void zookeeper_ensemble::launch() {
  for (auto& member : members_) member->launch();
}

void zookeeper_ensemble::wait_ready(std::chrono::steady_clock::time_point deadline) {
  for (auto& member : members_) member->wait_ready(deadline);
}

std::optional<std::size_t> zookeeper_ensemble::leader_index() {
  for (std::size_t i = 0; i < members_.size(); ++i) {
    auto& member = *members_[i];
    if (member.paused() || !member.running()) continue;
    if (member.role() == "leader") return i;
  }
  return std::nullopt;
}

std::size_t zookeeper_ensemble::wait_for_leader(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto index = leader_index()) return *index;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw server_error("zookeeper ensemble " + connect_string() + ": no leader after " +
                         std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace dlock::lab
