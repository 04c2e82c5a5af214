// postgres_server.hpp — defines dlock::lab::postgres_server: initdb and postgres run directly (not
// pg_ctl, which would daemonize away from the lab), as the `postgres` user when the lab is root.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "dlock/lab/clients.hpp"
#include "dlock/lab/server.hpp"

namespace dlock::lab {

struct postgres_options {
  std::string bin_dir = "/usr/lib/postgresql/15/bin";
  // The OS user initdb and postgres run as when the lab runs as root (initdb refuses root).
  std::string os_user = "postgres";
  // false: `fsync=off` (a killed server loses nothing; only a machine crash would);
  // synchronous_commit stays on either way. true: PostgreSQL's defaults.
  bool durable = false;
  int max_connections = 200;
  // deadlock_timeout in ms; 0: PostgreSQL's default (1 s). Every session that waits longer for a
  // lock runs the deadlock check, whose cost grows with the square of the waiters on one lock.
  int deadlock_timeout_ms = 0;
};

class postgres_server final : public server {
 public:
  postgres_server(std::string name, std::filesystem::path dir, std::uint16_t port,
                  postgres_options options);

  // "postgresql://postgres@127.0.0.1:PORT/postgres" (trust authentication, superuser `postgres`).
  std::string dsn() const;
  postgres_client client() const { return postgres_client(dsn()); }

  bool probe() override;
  std::string role() override;  // "standalone" when it accepts connections

 protected:
  spawn_options launch_options() override;
  void before_launch() override;  // initdb when the data directory is missing
  void wipe_data() override;
  int graceful_signal() const override;  // SIGINT: fast shutdown (SIGTERM would wait for clients)

 private:
  std::filesystem::path data_dir() const { return dir() / "data"; }
  postgres_options options_;
};

}  // namespace dlock::lab
