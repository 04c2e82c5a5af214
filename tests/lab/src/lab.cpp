// Implements dlock::lab::lab (lab.hpp): the parallel start, configs, reset and teardown.
#include "dlock/lab/lab.hpp"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace dlock::lab {
namespace {

std::optional<unsigned long long> process_start_time(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  auto close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close_paren + 2));
  std::string field;
  // Fields after "(comm)": state is field 3; starttime is field 22.
  for (int index = 3; index < 22 && fields >> field; ++index) {
  }
  unsigned long long start = 0;
  if (!(fields >> start)) return std::nullopt;
  return start;
}

// Removes dlock-lab.* directories in `parent` whose owner process (recorded in their `owner` file as
// "pid starttime") is gone: what a lab leaves when its process is killed with SIGKILL (its servers
// die with it, but nobody removes the directory).
void remove_abandoned_lab_dirs(const std::filesystem::path& parent) {
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(parent, ignored)) {
    if (entry.path().filename().string().rfind("dlock-lab.", 0) != 0) continue;
    std::ifstream owner(entry.path() / "owner");
    pid_t pid = 0;
    unsigned long long start = 0;
    if (!(owner >> pid >> start) || pid <= 0) continue;
    auto actual = process_start_time(pid);
    if (actual && *actual == start && process_alive(pid)) continue;  // its owner still runs
    std::filesystem::remove_all(entry.path(), ignored);
  }
}

std::filesystem::path make_lab_directory(const std::filesystem::path& requested_parent) {
  std::filesystem::path parent = requested_parent;
  if (parent.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    parent = tmp && *tmp ? tmp : "/tmp";
  }
  std::filesystem::create_directories(parent);
  remove_abandoned_lab_dirs(parent);
  std::string pattern = (parent / "dlock-lab.XXXXXX").string();
  if (!::mkdtemp(pattern.data())) {
    throw lab_error("cannot create a lab directory in " + parent.string() + ": " + std::strerror(errno));
  }
  std::filesystem::path dir = pattern;
  if (::geteuid() == 0) {
    // PostgreSQL and MariaDB run as the postgres and mysql users and must reach their sub-directories
    // (traverse, not list).
    ::chmod(dir.c_str(), 0711);
  }
  std::ofstream owner(dir / "owner");
  owner << ::getpid() << " " << process_start_time(::getpid()).value_or(0) << "\n";
  return dir;
}

bool looks_like_port_conflict(const std::string& message) {
  std::string lower(message);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("already in use") != std::string::npos || lower.find("bindexception") != std::string::npos;
}

}  // namespace

lab::lab(std::vector<backend> backends, lab_options options) : options_(std::move(options)) {
  dir_ = make_lab_directory(options_.parent_dir);
  try {
    start_all(backends);
  } catch (...) {
    teardown();
    throw;
  }
}

lab::~lab() { teardown(); }

void lab::start_all(const std::vector<backend>& requested) {
  std::set<backend> unique(requested.begin(), requested.end());
  auto started_at = std::chrono::steady_clock::now();
  std::vector<std::thread> starters;
  for (backend which : unique) {
    starters.emplace_back([this, which] {
      try {
        start_backend(which);
      } catch (const std::exception& error) {
        std::lock_guard<std::mutex> lock(start_mutex_);
        failures_[which] = error.what();
      }
    });
  }
  for (auto& starter : starters) starter.join();
  total_startup_ = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_at);

  for (backend which : unique) {
    if (failures_.count(which)) continue;
    auto& access = started_.at(which);
    access.config = dir_ / (std::string(backend_name(which)) + ".yaml");
    write_config(access.config, which, access.endpoints);
  }
  for (backend which : unique) {
    if (failures_.count(which)) continue;
    auto add = [&](server& s) {
      startup_.push_back(startup_record{s.name(), which, s.client_endpoint(), s.startup_time()});
    };
    switch (which) {
      case backend::redis: add(*redis_); break;
      case backend::redlock:
        for (std::size_t i = 0; i < redlock_->size(); ++i) add(redlock_->node(i));
        break;
      case backend::zookeeper: add(*zookeeper_); break;
      case backend::zookeeper_ensemble:
        for (std::size_t i = 0; i < zookeeper_ensemble_->size(); ++i) add(zookeeper_ensemble_->member(i));
        break;
      case backend::etcd: add(*etcd_); break;
      case backend::etcd_cluster:
        for (std::size_t i = 0; i < etcd_cluster_->size(); ++i) add(etcd_cluster_->member(i));
        break;
      case backend::sql: add(*sql_); break;
      case backend::mariadb: add(*mariadb_); break;
    }
  }
  if (!failures_.empty() && options_.throw_on_failure) {
    std::string message = "the lab in " + dir_.string() + " could not start:";
    for (const auto& [which, why] : failures_) message += "\n[" + std::string(backend_name(which)) + "] " + why;
    throw lab_error(message);
  }
}

// Runs on its own thread, one per backend; touches only that backend's members until it returns.
void lab::start_backend(backend which) {
  const int attempts = std::max(1, options_.start_attempts);
  for (int attempt = 1;; ++attempt) {
    auto deadline = std::chrono::steady_clock::now() + options_.startup_timeout;
    backend_access access;
    access.kind = which;
    try {
      switch (which) {
        case backend::redis: {
          redis_ = std::make_unique<redis_server>("redis", dir_ / "redis", reserve_loopback_ports(1)[0], options_.redis);
          redis_->start(options_.startup_timeout);
          access.endpoints = {redis_->client_endpoint()};
          break;
        }
        case backend::redlock: {
          redlock_ = std::make_unique<redis_node_set>("redlock", dir_, options_.redlock_nodes, options_.redlock);
          redlock_->launch();
          redlock_->wait_ready(deadline);
          access.endpoints = redlock_->endpoints();
          break;
        }
        case backend::zookeeper: {
          zookeeper_ = std::make_unique<zookeeper_server>("zookeeper", dir_ / "zookeeper",
                                                          reserve_loopback_ports(1)[0], options_.zookeeper);
          zookeeper_->start(options_.startup_timeout);
          access.endpoints = {zookeeper_->client_endpoint()};
          break;
        }
        case backend::zookeeper_ensemble: {
          zookeeper_ensemble_ = std::make_unique<class zookeeper_ensemble>(
              "zookeeper-ensemble", dir_, options_.zookeeper_ensemble_size, options_.zookeeper);
          zookeeper_ensemble_->launch();
          zookeeper_ensemble_->wait_ready(deadline);
          access.endpoints = zookeeper_ensemble_->endpoints();
          break;
        }
        case backend::etcd: {
          auto ports = reserve_loopback_ports(2);
          etcd_member_spec self{"etcd", ports[0], ports[1]};
          etcd_ = std::make_unique<etcd_server>(dir_ / "etcd", self, std::vector<etcd_member_spec>{self},
                                                "etcd@" + dir_.string(), options_.etcd);
          etcd_->start(options_.startup_timeout);
          access.endpoints = {etcd_->client_endpoint()};
          break;
        }
        case backend::etcd_cluster: {
          etcd_cluster_ = std::make_unique<class etcd_cluster>("etcd-cluster", dir_, options_.etcd_cluster_size,
                                                               options_.etcd);
          etcd_cluster_->launch();
          etcd_cluster_->wait_ready(deadline);
          access.endpoints = etcd_cluster_->endpoints();
          break;
        }
        case backend::sql: {
          sql_ = std::make_unique<postgres_server>("sql", dir_ / "sql", reserve_loopback_ports(1)[0], options_.sql);
          sql_->start(options_.startup_timeout);
          access.endpoints = {sql_->client_endpoint()};
          access.dsn = sql_->dsn();
          break;
        }
        case backend::mariadb: {
          mariadb_ = std::make_unique<mariadb_server>("mariadb", dir_ / "mariadb", reserve_loopback_ports(1)[0],
                                                      options_.mariadb);
          mariadb_->start(options_.startup_timeout);
          access.endpoints = {mariadb_->client_endpoint()};
          access.dsn = mariadb_->dsn();
          break;
        }
      }
      std::lock_guard<std::mutex> lock(start_mutex_);
      started_[which] = access;
      return;
    } catch (const std::exception& error) {
      // Tear down this backend's servers (their destructors kill them) before deciding.
      switch (which) {
        case backend::redis: redis_.reset(); break;
        case backend::redlock: redlock_.reset(); break;
        case backend::zookeeper: zookeeper_.reset(); break;
        case backend::zookeeper_ensemble: zookeeper_ensemble_.reset(); break;
        case backend::etcd: etcd_.reset(); break;
        case backend::etcd_cluster: etcd_cluster_.reset(); break;
        case backend::sql: sql_.reset(); break;
        case backend::mariadb: mariadb_.reset(); break;
      }
      if (attempt >= attempts || !looks_like_port_conflict(error.what())) throw;
      // A port was taken between choosing and binding it: start again on fresh ports.
    }
  }
}

bool lab::has(backend which) const { return started_.count(which) != 0 && !torn_down_; }

std::string lab::failure(backend which) const {
  auto found = failures_.find(which);
  return found == failures_.end() ? "" : found->second;
}

namespace {
template <typename T>
T& require(const std::unique_ptr<T>& member, backend which, const lab& owner) {
  if (!member || !owner.has(which)) {
    std::string why = owner.failure(which);
    throw std::logic_error("the lab has no running " + std::string(backend_name(which)) +
                           (why.empty() ? " (not requested)" : ": " + why));
  }
  return *member;
}
}  // namespace

redis_server& lab::redis() { return require(redis_, backend::redis, *this); }
redis_node_set& lab::redlock() { return require(redlock_, backend::redlock, *this); }
zookeeper_server& lab::zookeeper() { return require(zookeeper_, backend::zookeeper, *this); }
zookeeper_ensemble& lab::zookeeper_ensemble() {
  return require(zookeeper_ensemble_, backend::zookeeper_ensemble, *this);
}
etcd_server& lab::etcd() { return require(etcd_, backend::etcd, *this); }
etcd_cluster& lab::etcd_cluster() { return require(etcd_cluster_, backend::etcd_cluster, *this); }
postgres_server& lab::sql() { return require(sql_, backend::sql, *this); }
mariadb_server& lab::mariadb() { return require(mariadb_, backend::mariadb, *this); }

std::vector<server*> lab::servers() {
  std::vector<server*> out;
  if (redis_) out.push_back(redis_.get());
  if (redlock_)
    for (std::size_t i = 0; i < redlock_->size(); ++i) out.push_back(&redlock_->node(i));
  if (zookeeper_) out.push_back(zookeeper_.get());
  if (zookeeper_ensemble_)
    for (std::size_t i = 0; i < zookeeper_ensemble_->size(); ++i) out.push_back(&zookeeper_ensemble_->member(i));
  if (etcd_) out.push_back(etcd_.get());
  if (etcd_cluster_)
    for (std::size_t i = 0; i < etcd_cluster_->size(); ++i) out.push_back(&etcd_cluster_->member(i));
  if (sql_) out.push_back(sql_.get());
  if (mariadb_) out.push_back(mariadb_.get());
  return out;
}

backend_access lab::access(backend which) const {
  auto found = started_.find(which);
  if (found == started_.end() || torn_down_) {
    throw std::logic_error("the lab has no running " + std::string(backend_name(which)));
  }
  return found->second;
}

std::vector<backend_access> lab::accesses() const {
  std::vector<backend_access> out;
  if (torn_down_) return out;
  for (const auto& [which, access] : started_) out.push_back(access);
  return out;
}

std::string lab::startup_report() const {
  std::ostringstream out;
  out << "dlock lab in " << dir_.string() << ": started in " << total_startup_.count() << " ms (in parallel)\n";
  for (const auto& record : startup_) {
    std::string name = record.server;
    name.resize(std::max<std::size_t>(name.size(), 24), ' ');
    out << "  " << name << " " << record.client.to_string() << "  " << record.time.count() << " ms\n";
  }
  for (const auto& [which, why] : failures_) {
    out << "  " << backend_name(which) << ": FAILED: " << why << "\n";
  }
  return out.str();
}

void lab::reset(bool terminate_sql_sessions) {
  for (const auto& access : accesses()) reset_backend(access, terminate_sql_sessions);
}

teardown_report lab::teardown() {
  teardown_report report;
  if (torn_down_) return report;
  auto begin = std::chrono::steady_clock::now();
  std::vector<pid_t> groups;
  auto all = servers();
  for (server* s : all) {
    if (s->pid() > 0) groups.push_back(s->pid());
  }
  // SIGKILL every group first, so they all die at once, then reap one by one.
  for (pid_t group : groups) ::kill(-group, SIGKILL);
  for (server* s : all) s->kill();
  redis_.reset();
  redlock_.reset();
  zookeeper_.reset();
  zookeeper_ensemble_.reset();
  etcd_.reset();
  etcd_cluster_.reset();
  sql_.reset();
  mariadb_.reset();
  torn_down_ = true;

  report.survivors = wait_until_no_process_mentions(dir_.string(), std::chrono::seconds(2));
  for (pid_t group : groups) {
    for (auto& member : processes_in_group(group)) {
      bool known = std::any_of(report.survivors.begin(), report.survivors.end(),
                               [&](const process_info& p) { return p.pid == member.pid; });
      if (!known) report.survivors.push_back(member);
    }
  }
  if (!options_.keep_dir) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  report.time = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - begin);
  return report;
}

}  // namespace dlock::lab
