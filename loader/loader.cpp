// Plugin discovery, loading (Boost.DLL is only the dlopen layer) and ABI negotiation.
#include "dlock_internal/loader.hpp"

#include "dlock_internal/common.hpp"

#include <boost/dll/shared_library.hpp>
#include <boost/filesystem.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace dlock::loader {

using detail::error;

namespace {

// This dlock's version, for messages. From the header rather than dlock_version(): the loader sits
// below the C ABI and does not call into it.
const std::string this_dlock = DLOCK_VERSION_STRING;

// The smallest table each plugin ABI version may have, by version (index 0 unused). A plugin built
// against a newer header of the same version has a longer table; the host reads only the entries
// of the version negotiated.
constexpr size_t required_table_size[] = {0, DLOCK_PLUGIN_V1_SIZE, DLOCK_PLUGIN_V2_SIZE};
static_assert(sizeof required_table_size / sizeof required_table_size[0] == DLOCK_PLUGIN_ABI_VERSION + 1,
              "every plugin ABI version needs its required table size");

std::string file_name_for(const std::string& backend) { return "libdlock-" + backend + ".so"; }

bool valid_backend_name(const std::string& name) {
    return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
}

// Checks a negotiated table; throws error(DLOCK_PLUGIN) naming `where` and the defect.
void check_table(const dlock_plugin* t, const std::string& where, const std::string& expected_name) {
    if (!t) throw error(DLOCK_PLUGIN, fmt::format("plugin {}: negotiation succeeded but returned no function table", where));
    if (t->version < min_abi_version)
        throw error(DLOCK_PLUGIN, fmt::format("plugin {}: it implements plugin ABI version {}, older than the oldest this "
                                              "dlock {} accepts ({}); rebuild the plugin against this dlock",
                                              where, t->version, this_dlock, min_abi_version));
    if (t->version > DLOCK_PLUGIN_ABI_VERSION)
        throw error(DLOCK_PLUGIN, fmt::format("plugin {}: it answered plugin ABI version {} although this dlock offered at "
                                              "most {}; the plugin is broken",
                                              where, t->version, DLOCK_PLUGIN_ABI_VERSION));
    if (t->struct_size < required_table_size[t->version])
        throw error(DLOCK_PLUGIN, fmt::format("plugin {}: its function table is {} bytes but ABI version {} needs at least {}; "
                                              "the plugin is broken",
                                              where, t->struct_size, t->version, required_table_size[t->version]));
    const char* missing = !t->name ? "name" : !t->create ? "create" : !t->destroy ? "destroy"
                        : !t->capabilities ? "capabilities" : !t->interrupt ? "interrupt" : !t->acquire ? "acquire"
                        : !t->release ? "release" : !t->hold_destroy ? "hold_destroy" : !t->renew ? "renew"
                        : (t->option_count && !t->options) ? "options" : nullptr;
    if (missing) throw error(DLOCK_PLUGIN, fmt::format("plugin {}: its function table has no `{}`; the plugin is broken", where, missing));
    if (!expected_name.empty() && expected_name != t->name)
        throw error(DLOCK_PLUGIN, fmt::format("plugin {}: it calls itself `{}`, not `{}`", where, t->name, expected_name));
}

// Calls a negotiation function behind an exception firewall and checks what it returns.
const dlock_plugin* negotiate(dlock_plugin_negotiate_fn fn, const std::string& where, const std::string& expected_name) {
    const dlock_plugin* table = nullptr;
    uint32_t plugin_min = 0;
    int status;
    try {
        status = fn(DLOCK_PLUGIN_ABI_VERSION, &table, &plugin_min);
    } catch (const std::exception& e) {
        throw error(DLOCK_PLUGIN, fmt::format("plugin {}: negotiation threw an exception across the C ABI: {}", where, e.what()));
    } catch (...) {
        throw error(DLOCK_PLUGIN, fmt::format("plugin {}: negotiation threw an exception across the C ABI", where));
    }
    if (status != DLOCK_OK) {
        if (plugin_min > DLOCK_PLUGIN_ABI_VERSION)
            throw error(DLOCK_PLUGIN, fmt::format("plugin {}: it needs plugin ABI version {} or newer, but this dlock {} "
                                                  "offers at most {}; upgrade dlock or use an older build of the plugin",
                                                  where, plugin_min, this_dlock, DLOCK_PLUGIN_ABI_VERSION));
        throw error(DLOCK_PLUGIN, fmt::format("plugin {}: it refused to negotiate (status {})", where, detail::status_name(status)));
    }
    check_table(table, where, expected_name);
    return table;
}

std::mutex cache_mutex;
std::map<std::string, std::weak_ptr<const module>> cache;  // by canonical path

// The built-in `b`, negotiated once and kept for the life of the process (cache_mutex held).
std::shared_ptr<const module> load_builtin(const builtin& b) {
    static std::map<std::string, std::shared_ptr<const module>> negotiated;
    auto& slot = negotiated[b.name];
    if (!slot) {
        auto m = std::make_shared<module>();
        m->name = b.name;
        m->path = "built-in";
        m->table = negotiate(b.negotiate, fmt::format("`{}` (built-in)", b.name), b.name);
        m->version = m->table->version;
        slot = m;
    }
    return slot;
}

// A plugin runs with the rights of every program that loads it, so its file and every directory
// above it must be changeable only by root or by this process's user: owned by one of them, and
// writable neither by others nor by a group other than root's. A directory writable by others is
// accepted with the sticky bit (as /tmp): nobody else can rename or delete what is in it then.
// `canonical` is the path that is opened, so no symlink is left to swap after the check.
// Throws error(DLOCK_PLUGIN) naming the file or directory, what is wrong and the fix.
void check_trusted(const boost::filesystem::path& canonical) {
    const uid_t self = geteuid();
    auto check = [&](const boost::filesystem::path& p, bool is_plugin) {
        struct stat st;
        if (stat(p.c_str(), &st) != 0)
            throw error(DLOCK_PLUGIN, fmt::format("plugin {}: cannot check {}: {}", canonical.string(), p.string(),
                                                  std::strerror(errno)));
        const std::string what = is_plugin ? "it" : fmt::format("its directory {}", p.string());
        if (st.st_uid != 0 && st.st_uid != self)
            throw error(DLOCK_PLUGIN, fmt::format("plugin {}: refused: {} is owned by uid {}, neither root nor the user "
                                                  "running this program (uid {}), so that user could replace the plugin; "
                                                  "a plugin must belong to root or to you",
                                                  canonical.string(), what, st.st_uid, self));
        const bool sticky_dir = !is_plugin && (st.st_mode & S_ISVTX);
        const bool others_write = (st.st_mode & S_IWOTH) && !sticky_dir;
        const bool group_write = (st.st_mode & S_IWGRP) && st.st_gid != 0 && !sticky_dir;
        if (others_write || group_write)
            throw error(DLOCK_PLUGIN, fmt::format("plugin {}: refused: {} is writable by other users (mode {:04o}{}), "
                                                  "who could make every program that loads the plugin run their code; "
                                                  "fix with `chmod go-w {}`",
                                                  canonical.string(), what, st.st_mode & 07777,
                                                  others_write ? "" : fmt::format(", group {}", st.st_gid), p.string()));
    };
    check(canonical, true);
    for (auto dir = canonical.parent_path(); !dir.empty(); dir = dir.parent_path()) {
        check(dir, false);
        if (dir == dir.root_path()) break;
    }
}

// The plugin directory of the libdlock this process uses: lib/dlock/plugins beside libdlock.so.
// Found from where the dynamic linker mapped this very function (the loader is linked into libdlock,
// and into no other shared object or program but tests), so it holds for a build tree and an install
// tree alike and nothing about either is compiled in. Empty if it cannot be told.
std::string plugin_dir_next_to_libdlock() {
    Dl_info info{};
    if (!dladdr(reinterpret_cast<const void*>(&plugin_dir_next_to_libdlock), &info) || !info.dli_fname ||
        !*info.dli_fname)
        return {};
    const auto library = boost::filesystem::absolute(info.dli_fname);
    return (library.parent_path() / "dlock" / "plugins").string();
}

void append_split(std::vector<search_dir>& out, const std::string& list, char sep, const std::string& origin) {
    std::stringstream stream(list);
    for (std::string item; std::getline(stream, item, sep);)
        if (!item.empty()) out.push_back({item, origin});
}

}  // namespace

std::vector<search_dir> search_path(const std::vector<std::string>& config_plugin_path) {
    std::vector<search_dir> dirs;
    for (const auto& d : config_plugin_path) dirs.push_back({d, "plugin_path"});
    if (const char* env = std::getenv("DLOCK_PLUGIN_PATH")) append_split(dirs, env, ':', "DLOCK_PLUGIN_PATH");
    const std::string beside = plugin_dir_next_to_libdlock();
    if (!beside.empty()) dirs.push_back({beside, "next to libdlock"});
    // The same directory reached twice is searched once.
    std::vector<search_dir> unique;
    std::set<std::string> seen;
    for (auto& d : dirs) {
        boost::system::error_code cec;
        auto canonical = boost::filesystem::weakly_canonical(d.dir, cec);
        if (seen.insert(cec ? d.dir : canonical.string()).second) unique.push_back(std::move(d));
    }
    return unique;
}

std::shared_ptr<const module> load_file(const std::string& path, const std::string& expected_name) {
    boost::system::error_code ec;
    const auto canonical = boost::filesystem::canonical(path, ec);
    if (ec) throw error(DLOCK_PLUGIN, fmt::format("plugin {}: cannot load it: {}", path, ec.message()));
    const std::string key = canonical.string();
    check_trusted(canonical);  // on every load: a file's mode may have changed since it was cached
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (auto cached = cache[key].lock()) {
        check_table(cached->table, key, expected_name);
        return cached;
    }

    auto library = std::make_shared<boost::dll::shared_library>();
    library->load(key, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, ec);
    if (ec) {
        // Boost.DLL keeps only an error category; dlopen's own reason is still in dlerror().
        const char* reason = dlerror();
        throw error(DLOCK_PLUGIN, fmt::format("plugin {}: cannot load it: {}", key, reason ? reason : ec.message()));
    }
    if (!library->has(DLOCK_PLUGIN_NEGOTIATE_SYMBOL))
        throw error(DLOCK_PLUGIN, fmt::format("plugin {}: it does not export `{}`; it is not a dlock plugin", key,
                                              DLOCK_PLUGIN_NEGOTIATE_SYMBOL));
    auto fn = library->get<int(uint32_t, const dlock_plugin**, uint32_t*)>(DLOCK_PLUGIN_NEGOTIATE_SYMBOL);
    auto m = std::make_shared<module>();
    m->table = negotiate(fn, key, expected_name);
    m->name = m->table->name;
    m->path = key;
    m->version = m->table->version;
    m->library = library;
    cache[key] = m;
    return m;
}

std::shared_ptr<const module> load(const std::string& backend, const std::vector<std::string>& config_plugin_path,
                                   const std::vector<builtin>& builtins) {
    if (!valid_backend_name(backend))
        throw error(DLOCK_INVALID_ARGUMENT, fmt::format("`{}` is not a backend name (lowercase letters, digits, '-' and '_')", backend));
    for (const auto& b : builtins) {
        if (b.name != backend) continue;
        std::lock_guard<std::mutex> lock(cache_mutex);
        return load_builtin(b);
    }
    const std::string file = file_name_for(backend);
    const auto dirs = search_path(config_plugin_path);
    for (const auto& d : dirs) {
        const boost::filesystem::path candidate = boost::filesystem::path(d.dir) / file;
        boost::system::error_code ec;
        if (boost::filesystem::is_regular_file(candidate, ec)) return load_file(candidate.string(), backend);
    }
    std::string tried;
    for (const auto& d : dirs) tried += fmt::format("\n  {} ({})", d.dir, d.origin);
    throw error(DLOCK_PLUGIN, fmt::format("no plugin for backend `{}`: {} was not found in any of:{}\nSet `plugin_path` in "
                                          "the config or DLOCK_PLUGIN_PATH, or install the plugin",
                                          backend, file, tried));
}

std::vector<std::shared_ptr<const module>> discover(const std::vector<std::string>& config_plugin_path,
                                                    const std::vector<builtin>& builtins,
                                                    std::vector<std::string>& failures) {
    std::vector<std::shared_ptr<const module>> found;
    std::set<std::string> names;
    for (const auto& b : builtins) {
        std::lock_guard<std::mutex> lock(cache_mutex);
        found.push_back(load_builtin(b));
        names.insert(b.name);
    }
    for (const auto& d : search_path(config_plugin_path)) {
        boost::system::error_code ec;
        std::vector<boost::filesystem::path> files;
        for (boost::filesystem::directory_iterator it(d.dir, ec), end; !ec && it != end; it.increment(ec))
            files.push_back(it->path());
        std::sort(files.begin(), files.end());
        for (const auto& p : files) {
            const std::string fname = p.filename().string();
            if (fname.rfind("libdlock-", 0) != 0 || p.extension() != ".so") continue;
            const std::string name = fname.substr(9, fname.size() - 9 - 3);
            if (names.count(name)) continue;
            try {
                found.push_back(load_file(p.string(), name));
                names.insert(name);
            } catch (const error& e) {
                failures.push_back(e.what());
            }
        }
    }
    return found;
}

}  // namespace dlock::loader
