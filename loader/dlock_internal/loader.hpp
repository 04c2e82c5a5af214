// loader.hpp — finds backend plugins, opens them with Boost.DLL, negotiates the plugin ABI, and
// keeps each shared object loaded while anything made from it is alive.
//
// Search order for backend NAME (file libdlock-NAME.so), first hit wins:
//   1. each directory of the config's `plugin_path`;
//   2. each directory of $DLOCK_PLUGIN_PATH (colon-separated);
//   3. dlock/plugins next to the libdlock.so in use: the install directory of an installed
//      library, the build's plugin directory for a build-tree one. No path is compiled in, so an
//      installed library never searches the tree it was built in.
// A plugin file is loaded only if it and every directory above it can be changed by no one but
// root and the user running the program (see load_file).
// Backends built into the program (libdlock's `file`) need no file: the layer that links the loader
// names them (see `builtin`); the loader itself knows no backend.
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

// A backend compiled into the program that links the loader: its name and its negotiation function,
// negotiated and checked like a plugin file's. A built-in name is never looked up on the search path.
struct builtin {
    std::string name;
    dlock_plugin_negotiate_fn negotiate = nullptr;
};

struct search_dir {
    std::string dir;
    std::string origin;  // "plugin_path", "DLOCK_PLUGIN_PATH", "next to libdlock"
};

// The directories searched, in order, with where each came from.
std::vector<search_dir> search_path(const std::vector<std::string>& config_plugin_path);

// Loads the backend `backend`: the built-in of that name, else its plugin file. Throws detail::error:
// DLOCK_PLUGIN (not found — the message lists every directory tried — or refused: the message names
// the file and the reason), or DLOCK_INVALID_ARGUMENT (a backend name that is not [a-z0-9_-]+).
std::shared_ptr<const module> load(const std::string& backend, const std::vector<std::string>& config_plugin_path,
                                   const std::vector<builtin>& builtins);

// Loads and negotiates one shared object by path (expects its table to name `expected_name`
// unless that is empty). Refuses a file that a user other than root or the effective user could
// change: owned by another user, or writable by others or by a group other than root's — the file
// or any directory above it (a sticky directory such as /tmp is accepted). Throws
// detail::error(DLOCK_PLUGIN) naming the file, the defect and the fix.
std::shared_ptr<const module> load_file(const std::string& path, const std::string& expected_name);

// Every backend available: the built-ins, then each plugin file found on the search path (the first
// file of each name; later duplicates are shadowed). Files that fail to load are reported with
// their error in `failures` ("path: reason").
std::vector<std::shared_ptr<const module>> discover(const std::vector<std::string>& config_plugin_path,
                                                    const std::vector<builtin>& builtins,
                                                    std::vector<std::string>& failures);

}  // namespace dlock::loader
