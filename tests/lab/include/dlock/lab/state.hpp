// state.hpp — defines the record `dlock-lab up` leaves in its state directory (lab_state in
// <state-dir>/state.json) and what reads it: `dlock-lab env`/`down`, and tests that reuse a running
// lab through DLOCK_LAB_STATE_DIR.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "dlock/lab/configs.hpp"
#include "dlock/lab/lab.hpp"

namespace dlock::lab {

struct lab_state {
  pid_t supervisor_pid = 0;  // the detached process that owns the servers
  std::filesystem::path lab_dir;
  std::vector<backend_access> backends;
  std::vector<startup_record> startup;
  std::chrono::milliseconds total_startup{0};  // wall time of the parallel start
  std::vector<std::string> servers;  // "name pid" lines, for `dlock-lab status`
};

// $XDG_RUNTIME_DIR/dlock-lab when XDG_RUNTIME_DIR is set, else /tmp/dlock-lab-<uid>.
std::filesystem::path default_state_dir();
// <state_dir>/state.json
std::filesystem::path state_file_path(const std::filesystem::path& state_dir);

// Writes the state atomically (temporary file + rename).
void write_state(const std::filesystem::path& state_dir, const lab_state& state);
// nullopt when there is no state file; throws std::runtime_error naming the file when it is malformed.
std::optional<lab_state> read_state(const std::filesystem::path& state_dir);

// The supervisor process is alive and is a dlock-lab (guards against a reused pid).
bool supervisor_alive(const lab_state& state);

// The state of a running `dlock-lab up` in `state_dir`: nullopt when there is none or its supervisor
// is gone.
std::optional<lab_state> running_lab(const std::filesystem::path& state_dir);

// `export NAME='value'` lines: DLOCK_LAB_STATE_DIR, DLOCK_LAB_DIR, and DLOCK_LAB_<BACKEND>_CONFIG per
// backend, each followed by a comment line with the endpoints.
std::string shell_exports(const lab_state& state, const std::filesystem::path& state_dir);

}  // namespace dlock::lab
