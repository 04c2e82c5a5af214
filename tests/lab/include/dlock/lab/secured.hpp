// secured.hpp — defines the lab's secured servers: a throw-away certificate authority made with
// openssl (pki), and secured_server, one server run the way a platform team runs it — TLS and
// authentication on — with two least-privilege dlock identities ("tenants"), each confined to its
// own key prefix, role, table or path. Opt-in: lab{} and `dlock-lab up` never start them.
//
// Server certificates name IP:127.0.0.1 only, so "localhost" reaches the server under a name its
// certificate does not carry.
//
//   etcd_secure       etcd with client-certificate TLS (--client-cert-auth) and RBAC: each tenant's
//                     role may read and write its key prefix only.
//   postgres_secure   PostgreSQL accepting `hostssl … scram-sha-256` only; an administrator owns the
//                     tables, each tenant has SELECT, INSERT, UPDATE on its own.
//   zookeeper_secure  ZooKeeper whose root is read-only to the world; each tenant owns a path
//                     (digest ACL, creator-only). No TLS: Debian's C client is built without it.
//   redis_acl         Redis whose default user may only PING; each tenant is an ACL user with
//                     `~PREFIX*`, `&PREFIX*` and exactly the commands dlock sends. No TLS: Debian's
//                     hiredis 0.14 has no TLS support.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/lab/endpoint.hpp"
#include "dlock/lab/server.hpp"

namespace dlock::lab {

// A CA (ca.crt, ca.key) and the certificates it signs, in one directory, made by the openssl
// command. Also a second, unrelated CA ("rogue"), for certificates nobody trusts. Throws
// std::runtime_error with openssl's output when a step fails.
class pki {
 public:
  explicit pki(std::filesystem::path dir);

  struct credentials {
    std::filesystem::path cert, key;
  };
  enum class validity {
    current,  // valid from now for a day
    expired,  // valid for a day that ended yesterday
  };
  // A key and a certificate for `common_name` with the subjectAltName entries `alt_names`
  // ("IP:127.0.0.1", "DNS:localhost"), in <dir>/<stem>.crt and <stem>.key, usable for TLS servers
  // and clients. Signed by the CA, or by the rogue CA when `by_rogue_ca`.
  credentials issue(const std::string& stem, const std::string& common_name, const std::vector<std::string>& alt_names,
                    validity when = validity::current, bool by_rogue_ca = false) const;

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path ca_cert() const { return dir_ / "ca.crt"; }
  std::filesystem::path rogue_ca_cert() const { return dir_ / "rogue-ca.crt"; }

 private:
  std::filesystem::path dir_;
};

enum class secured_backend { etcd, postgres, zookeeper, redis_acl };

// "etcd_secure", "postgres_secure", "zookeeper_secure", "redis_acl".
std::string_view secured_backend_name(secured_backend which);
std::optional<secured_backend> parse_secured_backend(std::string_view name);
const std::vector<secured_backend>& all_secured_backends();

// One least-privilege dlock identity on a secured server.
struct tenant {
  std::string user;
  std::string password;  // a recognisable secret, unique per lab
  // Where its locks live: the key prefix (etcd, Redis), the table (PostgreSQL) or the base path
  // (ZooKeeper) its privileges cover.
  std::string territory;
  std::filesystem::path config;  // the dlock YAML config of this identity (mode 0600)
  // The `options:` of `config`, in order, as key and YAML value.
  std::vector<std::pair<std::string, std::string>> options;
};

// One secured server with tenants `a` and `b`. The destructor stops it and removes its directory.
class secured_server {
 public:
  // Makes the certificates, starts the server in <dir>, waits until it serves (at most
  // `startup_timeout`), turns authentication on and creates both tenants. Throws server_error or
  // std::runtime_error naming what failed.
  secured_server(secured_backend which, std::filesystem::path dir,
                 std::chrono::milliseconds startup_timeout = default_startup_timeout);
  ~secured_server();
  secured_server(const secured_server&) = delete;
  secured_server& operator=(const secured_server&) = delete;

  secured_backend kind() const { return kind_; }
  std::string_view plugin() const;  // "etcd", "sql", "zookeeper", "redis"
  const pki& certificates() const { return *pki_; }
  const tenant& tenant_a() const { return a_; }
  const tenant& tenant_b() const { return b_; }
  endpoint client_endpoint() const;
  server& process() { return *server_; }

  // The YAML config of `who` with options replaced (same key), added (new key) or removed (value
  // std::nullopt) — a wrong password, a missing ca_file, another prefix.
  std::string config_text(const tenant& who,
                          const std::vector<std::pair<std::string, std::optional<std::string>>>& changes = {}) const;

  // Turns this server into its "expired server certificate" variant (etcd and PostgreSQL only):
  // from now on new connections are served a certificate for 127.0.0.1, signed by the lab's CA,
  // whose validity ended yesterday. etcd reads its certificate files at every handshake, so they
  // are overwritten; PostgreSQL is pointed at the new pair and reloads. Returns once a new
  // connection is refused for the expiry. Throws std::runtime_error (or std::logic_error for
  // another backend). Irreversible: use a server of the test's own, not the shared one.
  void serve_expired_certificate();

 private:
  void secure_redis();
  void secure_postgres();
  void secure_zookeeper();
  void secure_etcd();
  tenant make_tenant(const std::string& user, const std::string& territory,
                     std::vector<std::pair<std::string, std::string>> options) const;

  secured_backend kind_;
  std::filesystem::path dir_;
  std::string secret_tag_;  // random, in every password, so a test can look for it anywhere
  std::unique_ptr<pki> pki_;
  std::unique_ptr<server> server_;
  std::uint16_t extra_port_ = 0;  // etcd: the plain-HTTP metrics/health port
  tenant a_, b_;
};

// The process's secured server of `which`, started on first use under $TMPDIR (or /tmp) and torn
// down at exit. Throws what secured_server's constructor throws (every call, once it failed).
secured_server& shared_secured_server(secured_backend which);

}  // namespace dlock::lab
