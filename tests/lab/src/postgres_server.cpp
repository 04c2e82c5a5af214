// Implements postgres_server (postgres_server.hpp).
#include "dlock/lab/postgres_server.hpp"

#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "dlock/lab/configs.hpp"

namespace dlock::lab {
namespace {

bool running_as_root() { return ::geteuid() == 0; }

}  // namespace

postgres_server::postgres_server(std::string name, std::filesystem::path dir, std::uint16_t port,
                                 postgres_options options)
    : server(std::move(name), std::move(dir), endpoint{"127.0.0.1", port}), options_(std::move(options)) {}

std::string postgres_server::dsn() const { return postgres_dsn(client_endpoint()); }

void postgres_server::before_launch() {
  if (running_as_root()) {
    // initdb and postgres refuse root; they run as the postgres user, which must own the directory
    // (and reach it: the lab makes its temporary directory traversable).
    passwd entry{};
    passwd* user = nullptr;
    std::vector<char> buffer(16384);
    ::getpwnam_r(options_.os_user.c_str(), &entry, buffer.data(), buffer.size(), &user);
    if (!user) throw failure("user " + options_.os_user + " does not exist (is the postgresql package installed?)");
    if (::chown(dir().c_str(), user->pw_uid, user->pw_gid) != 0) {
      throw failure("chown " + dir().string() + " to " + options_.os_user + ": " + std::strerror(errno));
    }
    std::filesystem::permissions(dir(), std::filesystem::perms::owner_all);
  }
  if (std::filesystem::exists(data_dir() / "PG_VERSION")) return;
  std::filesystem::remove_all(data_dir());
  spawn_options initdb;
  initdb.argv = {options_.bin_dir + "/initdb", "-D", data_dir().string(), "-A", "trust", "-U", "postgres",
                 "-E", "UTF8", "--locale=C",
                 "--no-sync",  // the lab's data is disposable; saves most of initdb's time
                 "--no-instructions"};
  initdb.log_path = dir() / "initdb.log";
  initdb.working_dir = dir();
  if (running_as_root()) initdb.run_as_user = options_.os_user;
  child_process process;
  try {
    process = child_process::spawn(initdb);
  } catch (const process_error& error) {
    throw failure(std::string("initdb: ") + error.what());
  }
  auto status = process.wait_for_exit(std::chrono::seconds(120));
  if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    std::string how = status ? process.describe_exit() : "still running after 120 s";
    process.kill_group();
    throw failure("initdb " + how + "\n--- " + (dir() / "initdb.log").string() + " ---\n" +
                  file_tail(dir() / "initdb.log", 20));
  }
}

spawn_options postgres_server::launch_options() {
  spawn_options spawn;
  spawn.argv = {options_.bin_dir + "/postgres",
                "-D", data_dir().string(),
                "-p", std::to_string(client_endpoint().port),
                "-c", "listen_addresses=" + client_endpoint().host,
                // A Unix socket path is limited to 107 bytes; under a long TMPDIR go without one
                // (clients use TCP, as the DSN says).
                "-c", "unix_socket_directories=" + (dir().string().size() + 20 < 107 ? dir().string() : std::string()),
                "-c", "max_connections=" + std::to_string(options_.max_connections),
                "-c", "shared_buffers=32MB"};
  if (options_.deadlock_timeout_ms > 0)
    spawn.argv.insert(spawn.argv.end(), {"-c", "deadlock_timeout=" + std::to_string(options_.deadlock_timeout_ms) + "ms"});
  if (!options_.durable) spawn.argv.insert(spawn.argv.end(), {"-c", "fsync=off", "-c", "full_page_writes=off"});
  // cluster_name appears in every server process's title ("postgres: <name>: checkpointer"), so the
  // lab directory is visible in each backend's cmdline for the survivor check (63 bytes at most).
  if (dir().string().size() <= 63) spawn.argv.insert(spawn.argv.end(), {"-c", "cluster_name=" + dir().string()});
  spawn.log_path = log_path();
  spawn.working_dir = dir();
  if (running_as_root()) spawn.run_as_user = options_.os_user;
  return spawn;
}

void postgres_server::wipe_data() { std::filesystem::remove_all(data_dir()); }

int postgres_server::graceful_signal() const { return SIGINT; }

bool postgres_server::probe() { return !paused() && postgres_accepts_connections(dsn()); }

std::string postgres_server::role() { return probe() ? "standalone" : ""; }

}  // namespace dlock::lab
