// sql_dialect.hpp — the interface between the `sql` plugin's C entry points (sql_plugin.cpp) and a
// dialect's backend: PostgreSQL (postgres_backend.hpp) or MySQL/MariaDB (mysql_dialect.cpp over
// mysql_backend.hpp). sql_create picks the dialect once, from the options; every entry point then
// forwards to it and never asks which dialect it is, as SQLite's VFS picks a file's method table
// once. Free of either client library.
#pragma once

#include <dlock/plugin.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

// The host's handle of one acquisition. Each dialect's hold type derives from it (postgres::hold,
// mysql::hold); only the dialect that made a hold casts the host's pointer back to its own type.
struct dlock_hold {};

namespace dlock::sql {

// One dialect's backend. The methods throw failure (sql_shared.hpp); the entry points turn it into
// the plugin's error (plugin_kit::guarded). Each has the contract of the plugin ABI's entry point of
// the same name (dlock/plugin.h).
class dialect {
public:
    virtual ~dialect() = default;

    virtual uint64_t capabilities() const = 0;
    virtual void interrupt() = 0;
    // On DLOCK_OK, *out_hold is a hold of this dialect.
    virtual int acquire(const dlock_acquire_request* req, dlock_hold** out_hold, dlock_grant* grant) = 0;
    virtual int release(dlock_hold* h) = 0;
    // Ends what the hold still keeps (a session lock's session) and deletes it. Never throws.
    virtual void destroy_hold(dlock_hold* h) = 0;
    // count > 0.
    virtual int renew(dlock_renewal* renewals, size_t count) = 0;
    virtual int inspect(const char* name, dlock_lock_info* info) = 0;
    // Visits the holders of `name_or_prefix` (exact: that name; else every name starting with it)
    // whose kind (dlock_hold_kind) `wanted` accepts, until `visit` returns nonzero.
    using kind_filter = std::function<bool(uint32_t kind)>;
    virtual int visit_holders(const std::string& name_or_prefix, bool exact, const kind_filter& wanted,
                              dlock_holder_visitor visit, void* user_data) = 0;
    // Removes every holder of the lock (or semaphore) `name`; the number removed.
    virtual size_t break_lock(const char* name, bool semaphore) = 0;
};

struct settings;  // pg_settings.hpp
namespace mysql {
struct settings;  // mysql_client.hpp
}

namespace postgres {
// Connects, checks the server and creates dlock's tables when missing (postgres_backend.cpp).
std::unique_ptr<dialect> open(const settings& c, const dlock_plugin_host& host);
// What the plugin offers before it knows a server (sql_capabilities without a backend): the lease
// mode of a role that may create dlock's tables.
uint64_t default_capabilities();
}  // namespace postgres

namespace mysql {
// Connects, checks the server and creates dlock's tables when missing (mysql_dialect.cpp).
std::unique_ptr<dialect> open(const settings& c, const dlock_plugin_host& host);
}  // namespace mysql

}  // namespace dlock::sql
