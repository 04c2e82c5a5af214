// The MySQL/MariaDB dialect behind the plugin's entry points (sql_dialect.hpp): mysql::backend
// (mysql_backend.hpp) with its holds handed to the host as ::dlock_hold.
#include "mysql_backend.hpp"

#include <algorithm>
#include <cstring>

namespace dlock::sql::mysql {

namespace {

hold* as_hold(::dlock_hold* h) { return static_cast<hold*>(h); }

class mysql_dialect final : public dialect {
public:
    mysql_dialect(const settings& c, const dlock_plugin_host& host) : backend_(c, host) {}

    uint64_t capabilities() const override { return backend_.capabilities(); }
    void interrupt() override { backend_.interrupt(); }

    int acquire(const dlock_acquire_request* req, ::dlock_hold** out_hold, dlock_grant* grant) override {
        auto h = std::make_unique<hold>();
        const int status = backend_.acquire(req, h, grant);
        if (status != DLOCK_OK) return status;
        *out_hold = h.release();
        return DLOCK_OK;
    }

    int release(::dlock_hold* h) override { return backend_.release(as_hold(h)); }
    void destroy_hold(::dlock_hold* h) override { backend_.destroy_hold(as_hold(h)); }
    int renew(dlock_renewal* renewals, size_t count) override { return backend_.renew(renewals, count, as_hold); }
    int inspect(const char* name, dlock_lock_info* info) override { return backend_.inspect(name, info); }

    int visit_holders(const std::string& name_or_prefix, bool exact, const kind_filter& wanted, dlock_holder_visitor visit,
                      void* user_data) override {
        for (const holder_row& row : backend_.holders(name_or_prefix, exact)) {
            if (!wanted(row.kind)) continue;
            dlock_holder_info info{};
            info.struct_size = sizeof info;
            info.name = row.name.c_str();
            info.kind = row.kind;
            info.permits = row.permits;
            std::memcpy(info.holder, row.owner.data(), std::min(row.owner.size(), sizeof info.holder - 1));
            info.fencing_token = row.fence;
            info.ttl_left_ms = row.ttl_left_ms;
            if (visit(&info, user_data) != 0) break;
        }
        return DLOCK_OK;
    }

    size_t break_lock(const char* name, bool semaphore) override { return backend_.break_lock(name, semaphore); }

private:
    backend backend_;
};

}  // namespace

std::unique_ptr<dialect> open(const settings& c, const dlock_plugin_host& host) { return std::make_unique<mysql_dialect>(c, host); }

}  // namespace dlock::sql::mysql
