// Implements the `dlock-lab up` state record (state.hpp).
#include "dlock/lab/state.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dlock/lab/process.hpp"

namespace dlock::lab {
namespace {

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

std::filesystem::path default_state_dir() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime && *runtime) return std::filesystem::path(runtime) / "dlock-lab";
  return "/tmp/dlock-lab-" + std::to_string(::getuid());
}

std::filesystem::path state_file_path(const std::filesystem::path& state_dir) { return state_dir / "state.json"; }

void write_state(const std::filesystem::path& state_dir, const lab_state& state) {
  nlohmann::json doc;
  doc["supervisor_pid"] = state.supervisor_pid;
  doc["lab_dir"] = state.lab_dir.string();
  doc["backends"] = nlohmann::json::array();
  for (const auto& access : state.backends) {
    nlohmann::json entry;
    entry["name"] = std::string(backend_name(access.kind));
    entry["config"] = access.config.string();
    entry["dsn"] = access.dsn;
    entry["endpoints"] = nlohmann::json::array();
    for (const auto& e : access.endpoints) entry["endpoints"].push_back(e.to_string());
    doc["backends"].push_back(entry);
  }
  doc["startup"] = nlohmann::json::array();
  for (const auto& record : state.startup) {
    doc["startup"].push_back({{"server", record.server},
                              {"backend", std::string(backend_name(record.kind))},
                              {"endpoint", record.client.to_string()},
                              {"ms", record.time.count()}});
  }
  doc["total_startup_ms"] = state.total_startup.count();
  doc["servers"] = state.servers;
  auto path = state_file_path(state_dir);
  auto temporary = path;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << doc.dump(2) << "\n";
    out.close();
    if (!out) throw std::runtime_error("cannot write " + temporary.string());
  }
  std::filesystem::rename(temporary, path);
}

std::optional<lab_state> read_state(const std::filesystem::path& state_dir) {
  auto path = state_file_path(state_dir);
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    auto doc = nlohmann::json::parse(in);
    lab_state state;
    state.supervisor_pid = doc.at("supervisor_pid").get<pid_t>();
    state.lab_dir = doc.at("lab_dir").get<std::string>();
    for (const auto& entry : doc.at("backends")) {
      auto kind = parse_backend(entry.at("name").get<std::string>());
      if (!kind) throw std::runtime_error("unknown backend " + entry.at("name").get<std::string>());
      backend_access access;
      access.kind = *kind;
      access.config = entry.at("config").get<std::string>();
      access.dsn = entry.value("dsn", "");
      for (const auto& e : entry.at("endpoints")) access.endpoints.push_back(endpoint::parse(e.get<std::string>()));
      state.backends.push_back(std::move(access));
    }
    for (const auto& entry : doc.value("startup", nlohmann::json::array())) {
      startup_record record;
      record.server = entry.at("server").get<std::string>();
      record.kind = parse_backend(entry.at("backend").get<std::string>()).value_or(backend::redis);
      record.client = endpoint::parse(entry.at("endpoint").get<std::string>());
      record.time = std::chrono::milliseconds(entry.at("ms").get<long long>());
      state.startup.push_back(std::move(record));
    }
    state.total_startup = std::chrono::milliseconds(doc.value("total_startup_ms", 0LL));
    state.servers = doc.value("servers", std::vector<std::string>{});
    return state;
  } catch (const std::exception& error) {
    throw std::runtime_error("malformed lab state " + path.string() + ": " + error.what());
  }
}

bool supervisor_alive(const lab_state& state) {
  if (!process_alive(state.supervisor_pid)) return false;
  std::ifstream cmdline_file("/proc/" + std::to_string(state.supervisor_pid) + "/cmdline");
  std::string cmdline((std::istreambuf_iterator<char>(cmdline_file)), std::istreambuf_iterator<char>());
  return cmdline.find("dlock-lab") != std::string::npos;
}

std::optional<lab_state> running_lab(const std::filesystem::path& state_dir) {
  auto state = read_state(state_dir);
  if (!state || !supervisor_alive(*state)) return std::nullopt;
  return state;
}

std::string shell_exports(const lab_state& state, const std::filesystem::path& state_dir) {
  std::ostringstream out;
  out << "export DLOCK_LAB_STATE_DIR=" << shell_quote(std::filesystem::absolute(state_dir).string()) << "\n";
  out << "export DLOCK_LAB_DIR=" << shell_quote(state.lab_dir.string()) << "\n";
  for (const auto& access : state.backends) {
    out << "export " << config_env_var(access.kind) << "=" << shell_quote(access.config.string()) << "\n";
    out << "# " << backend_name(access.kind) << ": " << access.config.string() << " (";
    for (std::size_t i = 0; i < access.endpoints.size(); ++i) out << (i ? ", " : "") << access.endpoints[i].to_string();
    out << ")\n";
  }
  return out.str();
}

}  // namespace dlock::lab
