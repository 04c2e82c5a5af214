// cli.hpp — what the subcommands of the `dlock` command share: exit codes, error reports and
// capability names. The command uses dlock's public API only (dlock.hpp, dlock_admin.hpp).
#pragma once

#include <dlock/dlock.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

namespace dlock::cli {

// sysexits.h values, so they rarely collide with a command's own (see main.cpp).
constexpr int exit_usage = 64;
constexpr int exit_dlock_error = 69;
constexpr int exit_software = 70;
constexpr int exit_not_acquired = 75;
constexpr int exit_lost = 76;
constexpr int exit_permission = 77;  // EX_NOPERM: the server refused this identity (DLOCK_PERMISSION)
constexpr int exit_config = 78;
constexpr int exit_inspect_free = 1;

// The exit status of a dlock error.
int exit_code_for(const std::error_code& ec);

// Prints "dlock: <detail> [<status>]" on stderr; returns the exit status of the error.
int report(const std::system_error& e);

// "FENCING FAIR ..." (or "none"), and the same as a JSON array.
std::string capability_names(uint64_t caps);
nlohmann::json capability_list(uint64_t caps);

// ---- the subcommands; each returns dlock's exit status -----------------------------------------

struct run_args {
    std::string name;
    std::string wait;
    std::string ttl;
    std::string kill_after = "10s";
    uint32_t permits = 0;  // 0: a lock; N: one of the N permits of the semaphore `name`
    bool shared = false;
    std::vector<std::string> command;
};

// `dlock run`: `args` as given; option values not yet checked (a bad one is a usage error).
int run(const std::string& config, const run_args& args);
// `dlock inspect NAME [--semaphore]`: 0 held, exit_inspect_free free.
int inspect(const std::string& config, const std::string& name, bool semaphore, bool as_json);
// `dlock list [PREFIX]`: every holder of every lock and semaphore under PREFIX; 0.
int list(const std::string& config, const std::string& prefix, bool as_json);
// `dlock break NAME [--semaphore]`: remove every holder; 0, and how many on stdout.
int break_lock(const std::string& config, const std::string& name, bool semaphore, bool as_json);
// A holder as one JSON object (name, kind, permits, holder, fencing_token, ttl_left_ms).
nlohmann::json holder_json(const dlock::holder_info& h);
// "exclusive", "shared" or "permit".
const char* kind_name(dlock::hold_kind kind);
// `dlock backends [--describe NAME]`.
int backends(const std::string& config, const std::string& describe, bool as_json);
// `dlock check`: open the config's backend and make one round trip.
int check(const std::string& config, bool as_json);

}  // namespace dlock::cli
