// plugin_call.hpp — how the core calls into a plugin: behind an exception firewall, with a buffer
// for the failure's reason.
#pragma once

#include <dlock/plugin.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace dlock::core {

// The buffer a plugin call may write its failure's reason into. A plugin writes a NUL-terminated
// message only when it fails, so an empty first byte is all "no message" needs: zeroing the whole
// kilobyte for every call cost more than the rest of the core's work on an uncontended acquire.
struct plugin_error : dlock_plugin_error {
    plugin_error() { message[0] = '\0'; }
};

// Calls into a plugin behind an exception firewall: a plugin that throws across the C ABI is a
// broken plugin, reported as such, never a crash.
template <typename F>
int plugin_call(dlock_plugin_error& err, const char* backend, const char* entry, F&& call) noexcept {
    try {
        return call();
    } catch (...) {
        std::snprintf(err.message, sizeof err.message, "plugin `%s` threw an exception from `%s` across the C ABI",
                      backend, entry);
        return DLOCK_PLUGIN;
    }
}

// The plugin's message, or `fallback` when it wrote none.
inline std::string message_of(const dlock_plugin_error& err, const std::string& fallback) {
    const size_t n = strnlen(err.message, sizeof err.message);
    return n ? std::string(err.message, n) : fallback;
}

}  // namespace dlock::core
