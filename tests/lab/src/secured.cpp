// Implements pki and secured_server (secured.hpp).
#include "dlock/lab/secured.hpp"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

// The synchronous calls (zoo_create, zoo_set_acl) of the multi-threaded C client.
#ifndef THREADED
#define THREADED
#endif
#include <zookeeper.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "dlock/lab/clients.hpp"
#include "dlock/lab/faults.hpp"
#include "dlock/lab/postgres_server.hpp"
#include "dlock/lab/redis_server.hpp"
#include "dlock/lab/zookeeper_server.hpp"
#include "http.hpp"

namespace dlock::lab {
namespace {

namespace fs = std::filesystem;

void run_or_throw(const std::vector<std::string>& argv, const std::string& what) {
  std::string output;
  if (run_command(argv, &output) != 0) throw std::runtime_error(what + " failed: " + output);
}

std::string random_tag() {
  std::random_device device;
  std::string tag;
  for (int i = 0; i < 12; ++i) tag += "0123456789abcdef"[device() % 16];
  return tag;
}

// Files a server that runs as another user (PostgreSQL, when the lab is root) must own.
void give_to_os_user(const fs::path& path, const std::string& user) {
  if (::geteuid() != 0) return;
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  ::getpwnam_r(user.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (!found || ::chown(path.c_str(), found->pw_uid, found->pw_gid) != 0)
    throw std::runtime_error("cannot give " + path.string() + " to user " + user);
}

std::string yaml_quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// The commands dlock's redis plugin sends (docs/backends/redis.md, "Privileges").
const std::vector<std::string> redis_dlock_commands = {"+eval",   "+evalsha", "+script|load", "+get",        "+set",
                                                       "+incr",   "+pttl",    "+pexpire",     "+del",        "+publish",
                                                       "+subscribe", "+unsubscribe", "+time", "+zadd",
                                                       "+zrem", "+zrange", "+zrangebyscore", "+zscore", "+ping",
                                                       // list (SCAN) and break (UNLINK): docs/backends/redis.md
                                                       "+scan", "+unlink"};

// etcd with client-certificate TLS on its client port, and its /health on a plain-HTTP metrics
// port for the lab's readiness probe (the lab's HTTP client speaks no TLS).
class secured_etcd_server final : public server {
 public:
  secured_etcd_server(fs::path dir, std::uint16_t client_port, std::uint16_t peer_port, std::uint16_t metrics_port,
                      const pki& certificates, pki::credentials server_pair, std::string token)
      : server("etcd-secure", std::move(dir), endpoint{"127.0.0.1", client_port}),
        peer_port_(peer_port),
        metrics_port_(metrics_port),
        ca_(certificates.ca_cert()),
        pair_(std::move(server_pair)),
        token_(std::move(token)) {}

  bool probe() override {
    if (paused()) return false;
    try {
      const auto response = detail::http_request(endpoint{"127.0.0.1", metrics_port_}, "GET", "/health", "",
                                                 std::chrono::milliseconds(1000));
      return response.status == 200 && response.body.find("\"true\"") != std::string::npos;
    } catch (const std::exception&) {
      return false;
    }
  }
  std::string role() override { return probe() ? "standalone" : ""; }

 protected:
  spawn_options launch_options() override {
    const std::string client_url = "https://127.0.0.1:" + std::to_string(client_endpoint().port);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer_port_);
    spawn_options spawn;
    spawn.argv = {"etcd",
                  "--name", "secure",
                  "--data-dir", (dir() / "data").string(),
                  "--listen-client-urls", client_url,
                  "--advertise-client-urls", client_url,
                  "--listen-peer-urls", peer_url,
                  "--initial-advertise-peer-urls", peer_url,
                  "--initial-cluster", "secure=" + peer_url,
                  "--initial-cluster-token", token_,
                  "--listen-metrics-urls", "http://127.0.0.1:" + std::to_string(metrics_port_),
                  "--cert-file", pair_.cert.string(),
                  "--key-file", pair_.key.string(),
                  "--trusted-ca-file", ca_.string(),
                  "--client-cert-auth",
                  // Each password login costs a bcrypt hash on the server; at etcd's default cost
                  // (10) eight processes logging in at once on a loaded 2-core machine exceed a
                  // 5 s request timeout. The cheapest cost keeps the lab's logins fast.
                  "--bcrypt-cost", "4",
                  "--logger", "zap",
                  "--log-outputs", "stderr"};
    spawn.log_path = log_path();
    spawn.working_dir = dir();
    return spawn;
  }
  void wipe_data() override { fs::remove_all(dir() / "data"); }

 private:
  std::uint16_t peer_port_, metrics_port_;
  fs::path ca_;
  pki::credentials pair_;
  std::string token_;
};

// A synchronous ZooKeeper session authenticated with a digest, for the set-up only.
class digest_session {
 public:
  digest_session(const std::string& connect, const std::string& credentials) {
    handle_ = zookeeper_init(connect.c_str(), &digest_session::watcher, 4000, nullptr, this, 0);
    if (!handle_) throw std::runtime_error("zookeeper " + connect + ": zookeeper_init failed");
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, std::chrono::seconds(10), [this] { return state_ == ZOO_CONNECTED_STATE; })) {
      lock.unlock();
      zookeeper_close(handle_);
      throw std::runtime_error("zookeeper " + connect + ": no session within 10 s");
    }
    lock.unlock();
    if (credentials.empty()) return;
    std::promise<int> done;
    zoo_add_auth(handle_, "digest", credentials.data(), int(credentials.size()),
                 [](int rc, const void* p) { static_cast<std::promise<int>*>(const_cast<void*>(p))->set_value(rc); },
                 &done);
    if (done.get_future().get() != ZOK) {
      zookeeper_close(handle_);
      throw std::runtime_error("zookeeper " + connect + ": digest authentication failed");
    }
  }
  ~digest_session() { zookeeper_close(handle_); }
  digest_session(const digest_session&) = delete;
  digest_session& operator=(const digest_session&) = delete;

  void create(const std::string& path, const ACL_vector& acl) {
    const int rc = zoo_create(handle_, path.c_str(), "", 0, &acl, ZOO_PERSISTENT, nullptr, 0);
    if (rc != ZOK && rc != ZNODEEXISTS) throw std::runtime_error("zookeeper: create " + path + ": " + zerror(rc));
  }
  void set_acl(const std::string& path, const ACL_vector& acl) {
    const int rc = zoo_set_acl(handle_, path.c_str(), -1, const_cast<ACL_vector*>(&acl));
    if (rc != ZOK) throw std::runtime_error("zookeeper: setAcl " + path + ": " + zerror(rc));
  }

 private:
  static void watcher(zhandle_t*, int type, int state, const char*, void* context) {
    if (type != ZOO_SESSION_EVENT) return;
    auto* self = static_cast<digest_session*>(context);
    {
      std::lock_guard<std::mutex> lock(self->mutex_);
      self->state_ = state;
    }
    self->changed_.notify_all();
  }
  zhandle_t* handle_ = nullptr;
  std::mutex mutex_;
  std::condition_variable changed_;
  int state_ = 0;
};

}  // namespace

// ---------------------------------------------------------------------------------------------- pki

pki::pki(fs::path dir) : dir_(std::move(dir)) {
  fs::create_directories(dir_);
  for (const std::string ca : {"ca", "rogue-ca"}) {
    run_or_throw({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-days", "2", "-subj", "/CN=dlock-lab-" + ca, "-keyout", (dir_ / (ca + ".key")).string(), "-out",
                  (dir_ / (ca + ".crt")).string()},
                 "openssl: making the lab's " + ca);
  }
}

pki::credentials pki::issue(const std::string& stem, const std::string& common_name,
                            const std::vector<std::string>& alt_names, validity when, bool by_rogue_ca) const {
  credentials out{dir_ / (stem + ".crt"), dir_ / (stem + ".key")};
  const fs::path csr = dir_ / (stem + ".csr"), ext = dir_ / (stem + ".ext");
  {
    std::ofstream extensions(ext);
    extensions << "extendedKeyUsage=serverAuth,clientAuth\n";
    if (!alt_names.empty()) {
      extensions << "subjectAltName=";
      for (std::size_t i = 0; i < alt_names.size(); ++i) extensions << (i ? "," : "") << alt_names[i];
      extensions << "\n";
    }
  }
  run_or_throw({"openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
                "/CN=" + common_name, "-keyout", out.key.string(), "-out", csr.string()},
               "openssl: a key for " + stem);
  const std::string ca = by_rogue_ca ? "rogue-ca" : "ca";
  // `-days -1` ends the validity a day before it begins (today): a certificate that has expired.
  run_or_throw({"openssl", "x509", "-req", "-days", when == validity::expired ? "-1" : "1", "-in", csr.string(), "-CA",
                (dir_ / (ca + ".crt")).string(), "-CAkey", (dir_ / (ca + ".key")).string(), "-CAcreateserial",
                "-extfile", ext.string(), "-out", out.cert.string()},
               "openssl: signing the certificate of " + stem);
  fs::permissions(out.key, fs::perms::owner_read | fs::perms::owner_write);
  return out;
}

// ------------------------------------------------------------------------------------- backends

std::string_view secured_backend_name(secured_backend which) {
  switch (which) {
    case secured_backend::etcd: return "etcd_secure";
    case secured_backend::postgres: return "postgres_secure";
    case secured_backend::zookeeper: return "zookeeper_secure";
    case secured_backend::redis_acl: return "redis_acl";
  }
  return "?";
}

std::optional<secured_backend> parse_secured_backend(std::string_view name) {
  for (auto which : all_secured_backends())
    if (secured_backend_name(which) == name) return which;
  return std::nullopt;
}

const std::vector<secured_backend>& all_secured_backends() {
  static const std::vector<secured_backend> all = {secured_backend::etcd, secured_backend::postgres,
                                                   secured_backend::zookeeper, secured_backend::redis_acl};
  return all;
}

secured_server::secured_server(secured_backend which, fs::path dir, std::chrono::milliseconds startup_timeout)
    : kind_(which), dir_(std::move(dir)), secret_tag_(random_tag()) {
  fs::create_directories(dir_);
  // Servers that run as another user (PostgreSQL under root) must reach their files in here.
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);
  pki_ = std::make_unique<pki>(dir_ / "pki");
  const auto ports = reserve_loopback_ports(3);
  switch (which) {
    case secured_backend::redis_acl:
      server_ = std::make_unique<redis_server>("redis-acl", dir_ / "redis", ports[0], redis_options{});
      break;
    case secured_backend::postgres:
      server_ = std::make_unique<postgres_server>("postgres-secure", dir_ / "postgres", ports[0], postgres_options{});
      break;
    case secured_backend::zookeeper:
      server_ = std::make_unique<zookeeper_server>("zookeeper-secure", dir_ / "zookeeper", ports[0], zookeeper_options{});
      break;
    case secured_backend::etcd: {
      const auto pair = pki_->issue("etcd-server", "etcd-secure", {"IP:127.0.0.1"});
      extra_port_ = ports[2];
      server_ = std::make_unique<secured_etcd_server>(dir_ / "etcd", ports[0], ports[1], ports[2], *pki_, pair,
                                                      "secure-" + secret_tag_);
      break;
    }
  }
  fs::create_directories(server_->dir());
  server_->start(startup_timeout);
  switch (which) {
    case secured_backend::redis_acl: secure_redis(); break;
    case secured_backend::postgres: secure_postgres(); break;
    case secured_backend::zookeeper: secure_zookeeper(); break;
    case secured_backend::etcd: secure_etcd(); break;
  }
}

secured_server::~secured_server() {
  server_.reset();
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

std::string_view secured_server::plugin() const {
  switch (kind_) {
    case secured_backend::etcd: return "etcd";
    case secured_backend::postgres: return "sql";
    case secured_backend::zookeeper: return "zookeeper";
    case secured_backend::redis_acl: return "redis";
  }
  return "?";
}

endpoint secured_server::client_endpoint() const { return server_->client_endpoint(); }

tenant secured_server::make_tenant(const std::string& user, const std::string& territory,
                                   std::vector<std::pair<std::string, std::string>> options) const {
  tenant t;
  t.user = user;
  t.password = "pw-" + user + "-" + secret_tag_;
  t.territory = territory;
  t.config = dir_ / (user + ".yaml");
  t.options = std::move(options);
  for (auto& [key, value] : t.options)
    if (key == "password") value = yaml_quoted(t.password);
  {
    std::ofstream out(t.config);
    out << config_text(t);
  }
  fs::permissions(t.config, fs::perms::owner_read | fs::perms::owner_write);
  return t;
}

std::string secured_server::config_text(
    const tenant& who, const std::vector<std::pair<std::string, std::optional<std::string>>>& changes) const {
  auto options = who.options;
  for (const auto& [key, value] : changes) {
    auto it = std::find_if(options.begin(), options.end(), [&](const auto& o) { return o.first == key; });
    if (!value) {
      if (it != options.end()) options.erase(it);
    } else if (it != options.end()) {
      it->second = *value;
    } else {
      options.emplace_back(key, *value);
    }
  }
  std::string text = "backend: " + std::string(plugin()) + "\noptions:\n";
  for (const auto& [key, value] : options) text += "  " + key + ": " + value + "\n";
  return text;
}

void secured_server::secure_redis() {
  auto admin = static_cast<redis_server&>(*server_).client();
  const std::string endpoint_text = yaml_quoted(client_endpoint().to_string());
  auto add_user = [&](const std::string& user, const std::string& prefix) {
    tenant t = make_tenant(user, prefix,
                           {{"endpoint", endpoint_text}, {"username", user}, {"password", ""}, {"key_prefix", yaml_quoted(prefix)}});
    std::vector<std::string> cmd = {"ACL", "SETUSER", user, "reset", "on", ">" + t.password, "~" + prefix + "*",
                                    "&" + prefix + "*"};
    cmd.insert(cmd.end(), redis_dlock_commands.begin(), redis_dlock_commands.end());
    admin.checked(cmd);
    return t;
  };
  a_ = add_user("tenant-a", "dlock:");
  b_ = add_user("tenant-b", "tenant-b:");
  admin.checked({"ACL", "SETUSER", "lab-admin", "reset", "on", ">admin-" + secret_tag_, "~*", "&*", "+@all"});
  // Last: from here on an unauthenticated client may only PING (the lab's readiness probe).
  admin.checked({"ACL", "SETUSER", "default", "reset", "on", "nopass", "+ping"});
}

void secured_server::secure_postgres() {
  auto& pg = static_cast<postgres_server&>(*server_);
  const auto pair = pki_->issue("postgres-server", "postgres-secure", {"IP:127.0.0.1"});
  give_to_os_user(pair.cert, "postgres");
  give_to_os_user(pair.key, "postgres");
  give_to_os_user(pki_->dir(), "postgres");
  const std::string port = std::to_string(client_endpoint().port);
  {
    postgres_client admin(pg.dsn());  // trust, until the pg_hba.conf below is loaded
    admin.execute("ALTER SYSTEM SET ssl = on");
    admin.execute("ALTER SYSTEM SET ssl_cert_file = '" + pair.cert.string() + "'");
    admin.execute("ALTER SYSTEM SET ssl_key_file = '" + pair.key.string() + "'");
    admin.execute("ALTER SYSTEM SET password_encryption = 'scram-sha-256'");
    admin.execute("ALTER ROLE postgres PASSWORD 'admin-" + secret_tag_ + "'");
    // The administrator owns dlock's tables (docs/backends/sql.md, "Tables"); each tenant may only
    // read and write its own.
    auto add_tenant = [&](const std::string& user, const std::string& table) {
      tenant t = make_tenant(user, table,
                             {{"dsn", yaml_quoted("postgresql://" + user + "@127.0.0.1:" + port + "/postgres")},
                              {"password", ""},
                              {"sslmode", "verify-full"},
                              {"sslrootcert", yaml_quoted(pki_->ca_cert().string())},
                              {"table", table}});
      admin.execute("CREATE ROLE " + user + " LOGIN PASSWORD '" + t.password + "'");
      admin.execute("CREATE TABLE " + table + "_schema (component text PRIMARY KEY, version integer NOT NULL, "
                    "updated_at timestamptz NOT NULL DEFAULT now())");
      admin.execute("CREATE TABLE " + table + " (name text COLLATE \"C\" PRIMARY KEY, owner text, fence bigint NOT NULL, "
                    "expiry timestamptz, holder text, acquired_at timestamptz, waiters integer NOT NULL DEFAULT 0, "
                    "released_at timestamptz)");
      admin.execute("CREATE TABLE " + table + "_advisory (name text COLLATE \"C\" PRIMARY KEY, fence bigint NOT NULL, "
                    "owner text, holder text, holder_pid integer, acquired_at timestamptz)");
      admin.execute("INSERT INTO " + table + "_schema (component, version) VALUES ('dlock', 1)");
      admin.execute("GRANT SELECT, INSERT, UPDATE ON " + table + ", " + table + "_schema, " + table + "_advisory TO " + user);
      // Semaphores and shared locks: the holders table and the lease table's `readers` and
      // `generation` columns
      // (docs/backends/sql.md, "Semaphores and shared locks"), with the same three privileges.
      admin.execute("ALTER TABLE " + table + " ADD COLUMN readers integer NOT NULL DEFAULT 0");
      admin.execute("ALTER TABLE " + table + " ADD COLUMN generation bigint");
      admin.execute("CREATE TABLE " + table + "_holders (kind char(1) NOT NULL, name text COLLATE \"C\" NOT NULL, "
                    "slot integer NOT NULL, permits integer, owner text, fence bigint NOT NULL, expiry timestamptz, "
                    "holder text, acquired_at timestamptz, PRIMARY KEY (kind, name, slot))");
      admin.execute("GRANT SELECT, INSERT, UPDATE ON " + table + "_holders TO " + user);
      return t;
    };
    a_ = add_tenant("tenant_a", "dlock_locks");
    b_ = add_tenant("tenant_b", "tenant_b_locks");
    // Tenant A may also break its own locks (`dlock break`: DELETE); tenant B has only what dlock
    // needs to lock, and is refused with DLOCK_PERMISSION.
    admin.execute("GRANT DELETE ON dlock_locks, dlock_locks_holders TO tenant_a");
    // Only TLS with SCRAM from here on: no trust, no md5, no plain TCP.
    admin.execute("COPY (SELECT 'hostssl all all 127.0.0.1/32 scram-sha-256') TO '" +
                  (pg.dir() / "data" / "pg_hba.conf").string() + "'");
    admin.execute("SELECT pg_reload_conf()");
  }
  // The reload is asynchronous: wait until the administrator gets in over TLS only.
  const std::string admin_dsn = "postgresql://postgres:admin-" + secret_tag_ + "@127.0.0.1:" + port +
                                "/postgres?sslmode=verify-full&sslrootcert=" + pki_->ca_cert().string();
  std::string last_error;
  for (int attempt = 0; attempt < 100; ++attempt) {
    try {
      if (postgres_client(admin_dsn).query_value("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()") == "t") {
        try {
          postgres_client(pg.dsn(), std::chrono::seconds(2)).execute("SELECT 1");
        } catch (const client_error&) {
          return;  // TLS works and plain trust is refused: secured
        }
      }
    } catch (const client_error& error) {
      last_error = error.what();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw std::runtime_error("postgres-secure: TLS with SCRAM did not take effect: " + last_error);
}

void secured_server::secure_zookeeper() {
  const std::string connect = client_endpoint().to_string();
  auto add_tenant = [&](const std::string& user, const std::string& path) {
    tenant t = make_tenant(user, path,
                           {{"connect", yaml_quoted(connect)}, {"base_path", path}, {"user", user}, {"password", ""}});
    // Created by the tenant itself with ZOO_CREATOR_ALL_ACL: only its digest may do anything there.
    digest_session(connect, user + ":" + t.password).create(path, ZOO_CREATOR_ALL_ACL);
    return t;
  };
  a_ = add_tenant("tenant-a", "/tenant-a");
  b_ = add_tenant("tenant-b", "/tenant-b");
  // Last: the root becomes read-only to everyone, so nobody creates a node outside their path.
  digest_session(connect, "").set_acl("/", ZOO_READ_ACL_UNSAFE);
}

void secured_server::secure_etcd() {
  const std::string endpoint_url = "https://" + client_endpoint().to_string();
  const auto root = pki_->issue("etcd-root", "root", {});
  const std::string root_password = "admin-" + secret_tag_;
  auto etcdctl = [&](std::vector<std::string> args, bool as_root_user) {
    std::vector<std::string> argv = {"etcdctl", "--endpoints=" + endpoint_url, "--cacert=" + pki_->ca_cert().string(),
                                     "--cert=" + root.cert.string(), "--key=" + root.key.string(),
                                     "--command-timeout=10s"};
    if (as_root_user) argv.push_back("--user=root:" + root_password);
    argv.insert(argv.end(), args.begin(), args.end());
    run_or_throw(argv, "etcdctl " + args.at(0) + " " + args.at(1));
  };
  etcdctl({"user", "add", "root:" + root_password}, false);
  etcdctl({"role", "add", "root"}, false);
  etcdctl({"user", "grant-role", "root", "root"}, false);
  auto add_tenant = [&](const std::string& user, const std::string& prefix) {
    const auto pair = pki_->issue("etcd-" + user, user, {});
    tenant t = make_tenant(user, prefix,
                           {{"endpoints", "[" + yaml_quoted(endpoint_url) + "]"},
                            {"username", user},
                            {"password", ""},
                            {"ca_file", yaml_quoted(pki_->ca_cert().string())},
                            {"cert_file", yaml_quoted(pair.cert.string())},
                            {"key_file", yaml_quoted(pair.key.string())},
                            {"key_prefix", yaml_quoted(prefix)}});
    etcdctl({"role", "add", user}, false);
    etcdctl({"role", "grant-permission", user, "--prefix=true", "readwrite", prefix}, false);
    etcdctl({"user", "add", user + ":" + t.password}, false);
    etcdctl({"user", "grant-role", user, user}, false);
    return t;
  };
  a_ = add_tenant("tenant-a", "dlock/");
  b_ = add_tenant("tenant-b", "tenant-b/");
  etcdctl({"auth", "enable"}, false);
}

void secured_server::serve_expired_certificate() {
  const std::string port = std::to_string(client_endpoint().port);
  const auto expired = pki_->issue(std::string(secured_backend_name(kind_)) + "-server-expired", "expired-server",
                                   {"IP:127.0.0.1"}, pki::validity::expired);
  if (kind_ == secured_backend::etcd) {
    const auto copy = fs::copy_options::overwrite_existing;
    fs::copy_file(expired.key, pki_->dir() / "etcd-server.key", copy);
    fs::copy_file(expired.cert, pki_->dir() / "etcd-server.crt", copy);
  } else if (kind_ == secured_backend::postgres) {
    give_to_os_user(expired.cert, "postgres");
    give_to_os_user(expired.key, "postgres");
    postgres_client admin("postgresql://postgres:admin-" + secret_tag_ + "@127.0.0.1:" + port +
                          "/postgres?sslmode=verify-full&sslrootcert=" + pki_->ca_cert().string());
    admin.execute("ALTER SYSTEM SET ssl_cert_file = '" + expired.cert.string() + "'");
    admin.execute("ALTER SYSTEM SET ssl_key_file = '" + expired.key.string() + "'");
    admin.execute("SELECT pg_reload_conf()");
  } else {
    throw std::logic_error(std::string(secured_backend_name(kind_)) + ": no server certificate to expire (no TLS)");
  }
  // A fresh handshake that verifies the server's certificate: refused for its expiry once the
  // change took effect (openssl names the reason; the servers' own clients do not).
  std::vector<std::string> handshake = {"openssl", "s_client", "-connect", "127.0.0.1:" + port, "-CAfile",
                                        pki_->ca_cert().string(), "-verify_return_error", "-brief"};
  if (kind_ == secured_backend::postgres) handshake.insert(handshake.end(), {"-starttls", "postgres"});
  std::string last_output;
  for (int attempt = 0; attempt < 100; ++attempt) {
    last_output.clear();
    if (run_command(handshake, &last_output) != 0 && last_output.find("expired") != std::string::npos) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw std::runtime_error(std::string(secured_backend_name(kind_)) +
                           ": the expired server certificate did not take effect: " + last_output);
}

secured_server& shared_secured_server(secured_backend which) {
  static std::mutex mutex;
  static std::map<secured_backend, std::unique_ptr<secured_server>> servers;
  static std::map<secured_backend, std::string> failures;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = servers.find(which); it != servers.end()) return *it->second;
  if (auto it = failures.find(which); it != failures.end()) throw std::runtime_error(it->second);
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/dlock-secured.XXXXXX";
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp " + pattern + " failed");
  try {
    auto& made = servers[which];
    made = std::make_unique<secured_server>(which, fs::path(pattern));
    return *made;
  } catch (const std::exception& error) {
    servers.erase(which);
    failures[which] = std::string(secured_backend_name(which)) + ": " + error.what();
    std::error_code ignored;
    fs::remove_all(pattern, ignored);
    throw;
  }
}

}  // namespace dlock::lab
