// The C ABI of dlock_admin.h: the backend catalog and duration parsing, behind the same firewall as
// dlock.h's entry points.
#include "dlock_internal/backends.hpp"
#include "dlock_internal/common.hpp"
#include "dlock_internal/config.hpp"
#include "firewall.hpp"

#include <dlock/dlock_admin.h>

#include <cstring>

using dlock::c_abi::firewall;
using dlock::detail::error;

struct dlock_backend_catalog {
    explicit dlock_backend_catalog(const dlock::config::client_config& config) : catalog(config) {}
    dlock::core::backend_catalog catalog;
};

extern "C" {

int dlock_backend_catalog_open(const char* config, dlock_backend_catalog** out_catalog) {
    return firewall([&] {
        if (!out_catalog) throw error(DLOCK_INVALID_ARGUMENT, "dlock_backend_catalog_open: out_catalog is NULL");
        *out_catalog = new dlock_backend_catalog(dlock::config::open_spec(config ? config : ""));
        return DLOCK_OK;
    });
}

size_t dlock_backend_catalog_count(const dlock_backend_catalog* catalog) {
    return catalog ? catalog->catalog.backends().size() : 0;
}

const dlock_backend_info* dlock_backend_catalog_get(const dlock_backend_catalog* catalog, size_t index) {
    if (!catalog || index >= catalog->catalog.backends().size()) return nullptr;
    return &catalog->catalog.backends()[index];
}

const dlock_backend_info* dlock_backend_catalog_find(const dlock_backend_catalog* catalog, const char* name) {
    if (!catalog || !name) return nullptr;
    for (const auto& info : catalog->catalog.backends())
        if (std::strcmp(info.name, name) == 0) return &info;
    return nullptr;
}

size_t dlock_backend_catalog_failure_count(const dlock_backend_catalog* catalog) {
    return catalog ? catalog->catalog.failures().size() : 0;
}

const char* dlock_backend_catalog_failure(const dlock_backend_catalog* catalog, size_t index) {
    if (!catalog || index >= catalog->catalog.failures().size()) return nullptr;
    return catalog->catalog.failures()[index].c_str();
}

void dlock_backend_catalog_destroy(dlock_backend_catalog* catalog) { delete catalog; }

int dlock_duration_parse(const char* text, int allow_forever, const char* what, int64_t* out_ms) {
    return firewall([&] {
        if (!text || !out_ms) throw error(DLOCK_INVALID_ARGUMENT, "dlock_duration_parse: text or out_ms is NULL");
        try {
            *out_ms = dlock::config::parse_duration_ms(text, allow_forever != 0, what ? what : "duration");
        } catch (const error& e) {
            // The config layer calls a bad duration a config error; here it is a bad argument.
            throw error(DLOCK_INVALID_ARGUMENT, e.what());
        }
        return DLOCK_OK;
    });
}

}  // extern "C"
