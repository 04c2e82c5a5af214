// The PostgreSQL dialect's inspect, holders, list and break (postgres_backend.hpp).
#include "postgres_backend.hpp"

#include <fmt/format.h>

#include <cstring>

namespace dlock::sql::postgres {

namespace {

// Holders and list: lease mode with the holders table (both dialects); advisory mode through its
// fence rows and pg_locks. Break: lease mode only (an advisory lock ends only with its session).
// `what` names the refused call ("break", "listing holders").
void require_holder_tables(backend* b, const char* what) {
    if (b->config.mode != lock_mode::lease || !b->shared_ready)
        fail(DLOCK_NOT_SUPPORTED, fmt::format("sql backend: {} needs lease mode with dlock's holders table (docs/backends/sql.md)", what));
}

}  // namespace

int backend::inspect(const char* name, dlock_lock_info* info) {
    backend* b = this;
    const int64_t deadline = b->statement_deadline();
    auto s = b->sessions->borrow(deadline);
    pqxx::result r;
    try {
        r = b->config.mode == lock_mode::lease ? s->run_until(deadline, "inspect", std::string(name))
                                               : s->run_until(deadline, "inspect", b->key_for(name), std::string(name));
    } catch (const std::exception& e) {
        if (dynamic_cast<const pqxx::broken_connection*>(&e)) s->mark_broken();
        throw classify(b->config, e, fmt::format("inspecting `{}`", name), false);
    }
    info->held = 0;
    info->ttl_left_ms = -1;
    if (r.empty()) return DLOCK_OK;  // never taken
    info->fencing_token = r[0][1].as<uint64_t>();
    info->held = r[0][2].as<bool>() ? 1 : 0;
    if (info->held) {
        const std::string owner = r[0][0].is_null() ? "" : r[0][0].as<std::string>();
        const size_t n = std::min(owner.size(), sizeof info->holder - 1);
        std::memcpy(info->holder, owner.data(), n);
        info->holder[n] = '\0';
        if (b->config.mode == lock_mode::lease && !r[0][3].is_null()) info->ttl_left_ms = r[0][3].as<int64_t>();
    }
    return DLOCK_OK;
}

// Lease mode: runs statement `holders` and visits each row whose kind `wanted` accepts.
int backend::visit_holders(const std::string& name_or_prefix, bool exact, const kind_filter& wanted, dlock_holder_visitor visit,
                           void* user_data) {
    backend* b = this;
    if (b->config.mode == lock_mode::advisory) return visit_advisory_holders(b, name_or_prefix, exact, wanted, visit, user_data);
    require_holder_tables(b, "listing holders");
    const int64_t deadline = b->statement_deadline();
    auto s = b->sessions->borrow(deadline);
    pqxx::result r;
    try {
        r = s->run_until(deadline, "holders", name_or_prefix, exact);
    } catch (const std::exception& e) {
        if (dynamic_cast<const pqxx::broken_connection*>(&e)) s->mark_broken();
        throw classify(b->config, e, exact ? fmt::format("reading the holders of `{}`", name_or_prefix) : "listing the holders", false);
    }
    for (const auto& row : r) {
        const uint32_t kind = row[1].as<uint32_t>();
        if (!wanted(kind)) continue;
        const std::string name = row[0].as<std::string>();
        const std::string owner = row[3].is_null() ? "" : row[3].as<std::string>();
        dlock_holder_info info{};
        info.struct_size = sizeof info;
        info.name = name.c_str();
        info.kind = kind;
        info.permits = row[2].is_null() ? 0 : row[2].as<uint32_t>();
        const size_t n = std::min(owner.size(), sizeof info.holder - 1);
        std::memcpy(info.holder, owner.data(), n);
        info.fencing_token = row[4].as<uint64_t>();
        info.ttl_left_ms = row[5].is_null() ? -1 : row[5].as<int64_t>();
        if (visit(&info, user_data) != 0) break;
    }
    return DLOCK_OK;
}

size_t backend::break_lock(const char* name, bool semaphore) {
    backend* b = this;
    require_holder_tables(b, "break");
    const int64_t deadline = b->statement_deadline();
    auto s = b->sessions->borrow(deadline);
    size_t broken = 0;
    bool in_transaction = false;
    try {
        // Breaking deletes holder rows: DELETE on dlock's tables is what makes an administrator.
        if (!s->run_until(deadline, "may_break")[0][0].as<bool>())
            fail(DLOCK_PERMISSION,
                 fmt::format("sql backend: {}: user `{}` may not break locks: that needs DELETE on {} and {} (GRANT "
                             "DELETE ON {}, {} TO <role>)", b->where(), b->config.user.empty() ? "(libpq's default)" : b->config.user,
                             b->sql.lease_table, b->sql.holders_table, b->sql.lease_table, b->sql.holders_table));
        if (semaphore) {
            broken = size_t(s->run_until(deadline, "break_semaphore", std::string(name), b->semaphore_channel_for(name))[0][0].as<int64_t>());
        } else {
            // One transaction: the lock's row first (freed, its fence bumped), then, in a
            // statement of its own (which sees every reader that committed while the first waited
            // for the row, and none can come or go while the row stays locked), the readers of the
            // broken generations: no moment in which the row is free and a broken reader's row
            // is still there, and an exact count. Any failure inside it ends the session, which
            // rolls the transaction back (nothing was broken) unless COMMIT got through; so does
            // the server when the transaction sits idle for peer_timeout (break_bound), so that a
            // breaker stalled between its statements does not keep the row locked.
            in_transaction = true;
            s->run_until(deadline, "break_begin");
            s->run_until(deadline, "break_bound");
            const pqxx::result r = s->run_until(deadline, "break_lock", std::string(name), b->channel_for(name));
            broken = size_t(r[0][0].as<int64_t>());
            if (!r[0][1].is_null())
                broken += size_t(s->run_until(deadline, "break_readers", std::string(name), r[0][1].as<int64_t>())[0][0].as<int64_t>());
            s->run_until(deadline, "break_commit");
            in_transaction = false;
        }
    } catch (const failure&) {
        if (in_transaction) s->mark_broken();
        throw;
    } catch (const std::exception& e) {
        if (in_transaction || dynamic_cast<const pqxx::broken_connection*>(&e)) s->mark_broken();
        const failure f = classify(b->config, e, fmt::format("breaking `{}`", name), true);
        fail(f.status == DLOCK_UNAVAILABLE ? DLOCK_UNKNOWN : f.status, f.message);
    }
    return broken;
}

}  // namespace dlock::sql::postgres
