// The C ABI: every entry point is an exception firewall that turns detail::error into a
// dlock_status plus the thread-local detail text of dlock_last_error().
#include "dlock_internal/client.hpp"
#include "dlock_internal/common.hpp"
#include "firewall.hpp"

#include <dlock/dlock.h>

#include <new>
#include <string>

using dlock::detail::error;

struct dlock_client {
    std::shared_ptr<dlock::core::client_core> core;
};

namespace {

using dlock::c_abi::firewall;
using dlock::c_abi::last_error;

int open_with(dlock::config::client_config config, dlock_client** out_client) {
    auto client = std::make_unique<dlock_client>();
    client->core = dlock::core::client_core::open(std::move(config));
    *out_client = client.release();
    return DLOCK_OK;
}

}  // namespace

extern "C" {

const char* dlock_version(void) { return DLOCK_VERSION_STRING; }

const char* dlock_status_name(int status) { return dlock::detail::status_name(status); }

const char* dlock_last_error(void) { return last_error.c_str(); }

int dlock_client_open(const char* config, dlock_client** out_client) {
    return firewall([&] {
        if (!out_client) throw error(DLOCK_INVALID_ARGUMENT, "dlock_client_open: out_client is NULL");
        return open_with(dlock::config::open_spec(config ? config : ""), out_client);
    });
}

int dlock_client_open_yaml(const char* yaml_text, const char* origin, dlock_client** out_client) {
    return firewall([&] {
        if (!yaml_text || !out_client) throw error(DLOCK_INVALID_ARGUMENT, "dlock_client_open_yaml: NULL argument");
        return open_with(dlock::config::parse_yaml(yaml_text, origin ? origin : "<yaml text>"), out_client);
    });
}

void dlock_client_close(dlock_client* client) {
    if (!client) return;
    try {
        client->core->close();
    } catch (...) {
    }
    delete client;
}

const char* dlock_client_backend(const dlock_client* client) { return client ? client->core->backend_name().c_str() : ""; }

uint64_t dlock_client_capabilities(const dlock_client* client) { return client ? client->core->capabilities() : 0; }

int dlock_acquire(dlock_client* client, const char* name, const dlock_acquire_options* options, dlock_lease** out_lease) {
    return firewall([&] {
        if (!client || !out_lease) throw error(DLOCK_INVALID_ARGUMENT, "dlock_acquire: client or out_lease is NULL");
        *out_lease = client->core->acquire(name, options);
        return DLOCK_OK;
    });
}

const char* dlock_lease_name(const dlock_lease* lease) { return lease ? lease->hold->name.c_str() : ""; }

const char* dlock_lease_owner(const dlock_lease* lease) { return lease ? lease->hold->owner.data() : ""; }

uint64_t dlock_lease_fencing_token(const dlock_lease* lease) { return lease ? lease->fence : 0; }

int64_t dlock_lease_valid_until(const dlock_lease* lease) {
    if (!lease) return 0;
    try {
        return lease->client->valid_until_of(lease);
    } catch (...) {
        return 0;
    }
}

dlock_lease_state dlock_lease_state_get(const dlock_lease* lease) {
    if (!lease) return DLOCK_LEASE_LOST;
    try {
        return lease->client->state_of(lease);
    } catch (...) {
        return DLOCK_LEASE_LOST;
    }
}

int dlock_lease_on_lost(dlock_lease* lease, dlock_lost_callback callback, void* user_data) {
    return firewall([&] {
        if (!lease) throw error(DLOCK_INVALID_ARGUMENT, "dlock_lease_on_lost: lease is NULL");
        lease->client->on_lost(lease, callback, user_data);
        return DLOCK_OK;
    });
}

int dlock_lease_renew(dlock_lease* lease) {
    return firewall([&] {
        if (!lease) throw error(DLOCK_INVALID_ARGUMENT, "dlock_lease_renew: lease is NULL");
        return lease->client->renew(lease);
    });
}

int dlock_lease_release(dlock_lease* lease) {
    return firewall([&] {
        if (!lease) throw error(DLOCK_INVALID_ARGUMENT, "dlock_lease_release: lease is NULL");
        return lease->client->release(lease);
    });
}

void dlock_lease_destroy(dlock_lease* lease) {
    if (!lease) return;
    try {
        auto client = lease->client;  // keeps the core alive while it frees the lease
        client->destroy(lease);
    } catch (...) {
    }
}

int dlock_cancel_token_create(dlock_cancel_token** out_token) {
    return firewall([&] {
        if (!out_token) throw error(DLOCK_INVALID_ARGUMENT, "dlock_cancel_token_create: out_token is NULL");
        *out_token = new dlock_cancel_token;
        return DLOCK_OK;
    });
}

void dlock_cancel_token_cancel(dlock_cancel_token* token) {
    if (token) token->cancelled.store(true);
}

int dlock_cancel_token_is_cancelled(const dlock_cancel_token* token) { return token && token->cancelled.load() ? 1 : 0; }

void dlock_cancel_token_destroy(dlock_cancel_token* token) { delete token; }

int dlock_inspect(dlock_client* client, const char* name, dlock_lock_info* out_info) {
    return firewall([&] {
        if (!client) throw error(DLOCK_INVALID_ARGUMENT, "dlock_inspect: client is NULL");
        client->core->inspect(name, out_info);
        return DLOCK_OK;
    });
}

int dlock_holders(dlock_client* client, const char* name, int semaphore, dlock_holder_visitor visit, void* user_data) {
    return firewall([&] {
        if (!client) throw error(DLOCK_INVALID_ARGUMENT, "dlock_holders: client is NULL");
        client->core->holders(name, semaphore != 0, visit, user_data);
        return DLOCK_OK;
    });
}

int dlock_list(dlock_client* client, const char* prefix, dlock_holder_visitor visit, void* user_data) {
    return firewall([&] {
        if (!client) throw error(DLOCK_INVALID_ARGUMENT, "dlock_list: client is NULL");
        client->core->list(prefix, visit, user_data);
        return DLOCK_OK;
    });
}

int dlock_break(dlock_client* client, const char* name, int semaphore, size_t* out_broken) {
    return firewall([&] {
        if (!client) throw error(DLOCK_INVALID_ARGUMENT, "dlock_break: client is NULL");
        const size_t broken = client->core->break_lock(name, semaphore != 0);
        if (out_broken) *out_broken = broken;
        return DLOCK_OK;
    });
}

}  // extern "C"
