// dlock/plugin_kit/support.hpp — what every backend plugin's C entry points share: the failure a
// plugin throws inside itself, the exception firewall that turns it (or anything else) into a
// dlock_status and a message at the ABI, option lookup, and version negotiation.
// Part of the plugin kit (dlock/plugin_kit.hpp): header-only C++17; nothing here crosses the plugin
// ABI, and a plugin built with it links nothing of dlock.
#pragma once

#include <dlock/plugin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace dlock::plugin_kit {

// Thrown inside a plugin; turned into its status and message by guarded().
struct failure {
    int status;  // dlock_status
    std::string message;
};
[[noreturn]] inline void fail(int status, std::string message) { throw failure{status, std::move(message)}; }

// Writes `message` into the host's error buffer (truncated, NUL-terminated); no-op without one.
inline void copy_message(dlock_plugin_error* error, const std::string& message) {
    if (!error) return;
    const size_t n = std::min(message.size(), sizeof error->message - 1);
    std::memcpy(error->message, message.data(), n);
    error->message[n] = '\0';
}

// The value of a set option, or null.
inline const dlock_option_value* find_option(const dlock_option_value* values, size_t count, const char* name) {
    for (size_t i = 0; i < count; ++i)
        if (values[i].is_set && std::strcmp(values[i].name, name) == 0) return &values[i];
    return nullptr;
}

// The body of a plugin's dlock_plugin_negotiate for a plugin whose table is version 1 (the
// oldest): any host that knows version 1 gets `table`; an older one is told the minimum (when it
// asked: `out_min_version` may be null).
inline int negotiate_v1(uint32_t host_max_version, const dlock_plugin* table, const dlock_plugin** out,
                        uint32_t* out_min_version) {
    if (host_max_version < 1) {
        if (out_min_version) *out_min_version = 1;
        return DLOCK_NOT_SUPPORTED;
    }
    *out = table;
    return DLOCK_OK;
}

// The body of a plugin's dlock_plugin_negotiate for a plugin whose table is version 2: a host that
// knows version 2 gets `table`; a version 1 host gets `v1_view`, a copy of `table` whose version
// field says 1 (it then reads only the version 1 entries, and no request carries a kind or a
// permit count); an older host is told the minimum. Build `v1_view` with as_version_1(table).
inline int negotiate_v2(uint32_t host_max_version, const dlock_plugin* table, const dlock_plugin* v1_view,
                        const dlock_plugin** out, uint32_t* out_min_version) {
    if (host_max_version < 1) {
        if (out_min_version) *out_min_version = 1;
        return DLOCK_NOT_SUPPORTED;
    }
    *out = host_max_version >= 2 ? table : v1_view;
    return DLOCK_OK;
}

// `table` as a version 1 host must see it: the same entries, version 1.
constexpr dlock_plugin as_version_1(dlock_plugin table) noexcept {
    table.version = 1;
    return table;
}

// Runs a plugin entry point behind an exception firewall: nothing crosses the C ABI. A failure
// becomes its status and message; anything else DLOCK_INTERNAL with a message naming `backend`.
template <typename F>
int guarded(dlock_plugin_error* error, const char* backend, F&& body) noexcept {
    try {
        return body();
    } catch (const failure& f) {
        copy_message(error, f.message);
        return f.status;
    } catch (const std::bad_alloc&) {
        copy_message(error, std::string(backend) + " backend: out of memory");
        return DLOCK_INTERNAL;
    } catch (const std::exception& e) {
        copy_message(error, std::string(backend) + " backend: " + e.what());
        return DLOCK_INTERNAL;
    } catch (...) {
        copy_message(error, std::string(backend) + " backend: unexpected exception");
        return DLOCK_INTERNAL;
    }
}

}  // namespace dlock::plugin_kit
