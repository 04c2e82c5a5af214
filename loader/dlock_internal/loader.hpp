// loader.hpp — finds backend plugins, opens them with Boost.DLL, negotiates the plugin ABI, and
// keeps each shared object loaded while anything made from it is alive.
//
// Search order for backend NAME (file libdlock-NAME.so), first hit wins:
//   1. each directory of the config's `plugin_path`;
//   2. each directory of $DLOCK_PLUGIN_PATH (colon-separated);
//   3. the build tree's plugin directory (when running from a build);
//   4. dlock/plugins next to libdlock.so, then the configured install libdir.
// The `file` backend is built into libdlock and needs no file.
#pragma once

#include <dlock/plugin.h>

#include <memory>
#include <string>
#include <vector>

namespace dlock::loader {

// Oldest plugin ABI version this host accepts.
constexpr uint32_t min_abi_version = 1;

// A negotiated plugin. Holding the shared_ptr keeps the library mapped.
struct module {
    std::string name;       // backend name
    std::string path;       // shared object, or "built-in"
    const dlock_plugin* table = nullptr;
    uint32_t version = 0;   // negotiated ABI version
    std::shared_ptr<void> library;  // the opened library (empty for built-ins)
};

struct search_dir {
    std::string dir;
    std::string origin;  // "plugin_path", "DLOCK_PLUGIN_PATH", "build tree", "install"
};

// The directories searched, in order, with where each came from.
std::vector<search_dir> search_path(const std::vector<std::string>& config_plugin_path);

// Loads the plugin for `backend`. Throws detail::error: DLOCK_PLUGIN (not found — the message lists
// every directory tried — or refused: the message names the file and the reason), or
// DLOCK_INVALID_ARGUMENT (a backend name that is not [a-z0-9_-]+).
std::shared_ptr<const module> load(const std::string& backend, const std::vector<std::string>& config_plugin_path);

// Loads and negotiates one shared object by path (expects its table to name `expected_name`
// unless that is empty). Throws detail::error(DLOCK_PLUGIN).
std::shared_ptr<const module> load_file(const std::string& path, const std::string& expected_name);

// Every backend available: the built-ins, then each plugin file found on the search path (the first
// file of each name; later duplicates are shadowed). Files that fail to load are reported with
// their error in `failures` ("path: reason").
std::vector<std::shared_ptr<const module>> discover(const std::vector<std::string>& config_plugin_path,
                                                    std::vector<std::string>& failures);

}  // namespace dlock::loader
