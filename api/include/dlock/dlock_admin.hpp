// dlock_admin.hpp — the header-only C++17 skin of dlock_admin.h: the backends a config can reach,
// described as values, and durations parsed as configs write them.
//
// Errors are those of dlock.hpp: std::system_error in dlock::category(), with an overload taking
// std::error_code& that never throws.
#pragma once

#include <dlock/dlock.hpp>
#include <dlock/dlock_admin.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace dlock {

struct backend_option {
    std::string name;
    std::string type;  // "string", "int", "bool", "duration" or "list"
    bool required = false;
    bool secret = false;  // holds a secret (also settable as `<name>_file: PATH`)
    std::optional<std::string> default_value;  // as a config writes it
    std::string doc;
};

struct backend_description {
    std::string name;
    std::string path;  // the plugin file, or "built-in"
    uint32_t abi_version = 0;
    uint64_t capabilities = 0;  // DLOCK_CAP_* of its default configuration
    std::string description;
    std::vector<backend_option> options;
};

// What dlock_backend_catalog_open found, copied out of the C catalog.
struct backend_catalog {
    std::vector<backend_description> backends;  // built-ins first, then plugins in search order
    std::vector<std::string> failures;           // plugin files that did not load: "path: reason"

    // The backend called `name`, or nullptr.
    const backend_description* find(std::string_view name) const noexcept {
        for (const auto& b : backends)
            if (b.name == name) return &b;
        return nullptr;
    }
};

namespace detail {

// Copies what dlock_backend_catalog_open finds; throws only std::bad_alloc.
inline backend_catalog copy_catalog(const std::string& config, std::error_code& ec) {
    dlock_backend_catalog* handle = nullptr;
    const int status = dlock_backend_catalog_open(config.c_str(), &handle);
    ec = status == DLOCK_OK ? std::error_code() : to_error_code(status);
    backend_catalog out;
    if (status != DLOCK_OK) return out;
    struct closer {
        dlock_backend_catalog* h;
        ~closer() { dlock_backend_catalog_destroy(h); }
    } close{handle};
    for (size_t i = 0, n = dlock_backend_catalog_count(handle); i < n; ++i) {
        const dlock_backend_info& info = *dlock_backend_catalog_get(handle, i);
        backend_description b{info.name, info.path, info.abi_version, info.capabilities, info.description, {}};
        for (size_t k = 0; k < info.option_count; ++k) {
            const dlock_backend_option& o = info.options[k];
            b.options.push_back({o.name, o.type, o.required != 0, o.secret != 0,
                                 o.default_value ? std::optional<std::string>(o.default_value) : std::nullopt, o.doc});
        }
        out.backends.push_back(std::move(b));
    }
    for (size_t i = 0, n = dlock_backend_catalog_failure_count(handle); i < n; ++i)
        out.failures.emplace_back(dlock_backend_catalog_failure(handle, i));
    return out;
}

}  // namespace detail

// Every backend a client opened with `config` could use (empty: $DLOCK_CONFIG, else none); see
// dlock_backend_catalog_open. Loads the plugins it finds; contacts no server.
inline backend_catalog find_backends(const std::string& config, std::error_code& ec) noexcept {
    try {
        return detail::copy_catalog(config, ec);
    } catch (...) {  // out of memory while copying
        ec = make_error_code(errc::internal);
        return {};
    }
}
inline backend_catalog find_backends(const std::string& config = {}) {
    std::error_code ec;
    backend_catalog out = find_backends(config, ec);
    detail::throw_if(ec);
    return out;
}

// A duration as a config writes it ("250ms", "30s", "5m", "1h", "0"; "forever" when allowed, as
// dlock::forever). `what` names the value in the error message. Fails with errc::invalid_argument.
inline std::chrono::milliseconds parse_duration(const std::string& text, bool allow_forever, const std::string& what,
                                                std::error_code& ec) noexcept {
    int64_t ms = 0;
    const int status = dlock_duration_parse(text.c_str(), allow_forever ? 1 : 0, what.c_str(), &ms);
    ec = status == DLOCK_OK ? std::error_code() : detail::to_error_code(status);
    if (status != DLOCK_OK) return std::chrono::milliseconds::zero();
    return ms == DLOCK_WAIT_FOREVER ? forever : std::chrono::milliseconds(ms);
}
inline std::chrono::milliseconds parse_duration(const std::string& text, bool allow_forever = false,
                                                const std::string& what = "duration") {
    std::error_code ec;
    const auto d = parse_duration(text, allow_forever, what, ec);
    detail::throw_if(ec);
    return d;
}

}  // namespace dlock
