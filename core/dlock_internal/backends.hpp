// backends.hpp — the backends this library offers: the built-in ones, which the core hands the
// loader (the loader knows no backend of its own), and the catalog of every backend a config can
// reach, which the admin API (dlock_admin.h) lists.
#pragma once

#include "dlock_internal/config.hpp"
#include "dlock_internal/loader.hpp"

#include <dlock/dlock_admin.h>

#include <memory>
#include <string>
#include <vector>

namespace dlock::core {

// What the capabilities a plugin's table reports mean for this host: the bits of plugin ABI
// version 2 (SEMAPHORE, SHARED, LIST, BREAK) only from a table of version 2 or later — a version 1
// plugin never reads a request's kind, so a stray bit must not make the host send it one — and
// REENTRANT, which the core provides, always.
uint64_t effective_capabilities(const dlock_plugin& table, uint64_t reported);

// The backends compiled into libdlock: `file`.
const std::vector<loader::builtin>& builtin_backends();

namespace testing {
// Adds a backend compiled into the test program, found by name before any plugin file, for the
// clients opened after this call. For tests only (e.g. a fake backend on the simulated clock); call
// it before opening clients, not while others open.
void add_builtin_backend(loader::builtin backend);
}  // namespace testing

// Every backend found for a config, described as dlock_admin.h's structs, which point into the
// storage this object owns. Holding it keeps each described plugin loaded.
class backend_catalog {
public:
    // Throws detail::error.
    explicit backend_catalog(const config::client_config& config);
    backend_catalog(const backend_catalog&) = delete;
    backend_catalog& operator=(const backend_catalog&) = delete;

    const std::vector<dlock_backend_info>& backends() const { return infos_; }
    const std::vector<std::string>& failures() const { return failures_; }

private:
    std::vector<std::shared_ptr<const loader::module>> modules_;
    std::vector<std::vector<dlock_backend_option>> options_;  // one vector per module
    std::vector<dlock_backend_info> infos_;
    std::vector<std::string> failures_;
};

}  // namespace dlock::core
