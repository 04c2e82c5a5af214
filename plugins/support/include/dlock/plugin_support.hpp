// plugin_support.hpp — what every backend plugin's C entry points share: the failure a plugin
// throws inside itself, the exception firewall that turns it (or anything else) into a dlock_status
// and a message at the ABI, option lookup, the clock-drift allowance of docs/design/contract.md, and version
// negotiation. Header-only; nothing here crosses the plugin ABI.
#pragma once

#include <dlock/plugin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace dlock::plugin_support {

// Thrown inside a plugin; turned into its status and message by guarded().
struct failure {
    int status;  // dlock_status
    std::string message;
};
[[noreturn]] inline void fail(int status, std::string message) { throw failure{status, std::move(message)}; }

// The clock drift allowed for in valid_until: ttl/100 + 2 ms.
inline int64_t drift_ns(int64_t ttl_ms) { return ttl_ms * 10'000 + 2'000'000; }

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
// oldest): any host that knows version 1 gets `table`; an older one is told the minimum.
inline int negotiate_v1(uint32_t host_max_version, const dlock_plugin* table, const dlock_plugin** out,
                        uint32_t* out_min_version) {
    if (host_max_version < 1) {
        *out_min_version = 1;
        return DLOCK_NOT_SUPPORTED;
    }
    *out = table;
    return DLOCK_OK;
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

}  // namespace dlock::plugin_support
