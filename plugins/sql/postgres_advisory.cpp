// Advisory mode: session advisory locks on held sessions, watched by the monitor (postgres_backend.hpp).
#include "postgres_turnstile.hpp"

#include <fmt/format.h>

#include <climits>
#include <cstring>
#include <map>

namespace dlock::sql::postgres {

std::string lock_timeout_for(int64_t deadline_ns) {
    if (deadline_ns == forever_ns) return "0";  // no limit
    const int64_t left_ms = (deadline_ns - now_ns() + 999'999) / 1'000'000;
    if (left_ms > INT_MAX) return "0";
    return std::to_string(std::max<int64_t>(left_ms, 1));
}

namespace {

// After a failed statement that may have been granted the lock before failing (the fence bump
// failed, a cancel arrived late), the session gives every advisory lock back; if it cannot, it is
// closed, which does the same on the server.
void scrub(backend* b, session& s) {
    try {
        s.run_until(b->statement_deadline(), "unlock_all");
    } catch (const std::exception&) {
        s.mark_broken();
    }
}

// `unanswered` is set when the server gave no answer within the client limit (then a retry would
// only wait as long again). `check_idle`: the pool checks an idle session before handing it out
// (pool::borrow); unchecked, a session the server ended fails the statement at once.
int acquire_advisory_once(backend* b, const dlock_acquire_request* req, std::unique_ptr<advisory_hold>& h,
                          dlock_grant* grant, bool& unanswered, bool check_idle) {
    const bool wait = req->deadline_ns != 0;
    auto s = b->sessions->borrow(req->deadline_ns, true, check_idle);
    const auto registered = register_waiting(b, &*s);
    // A wait is bounded by lock_timeout on the server; the client gives it up a client-side limit
    // later (a wait without a deadline cannot tell a long queue from a partition: only closing the
    // client ends it).
    const int64_t limit_ns = b->config.client_limit_ms() * 1'000'000;
    const int64_t deadline = !wait ? now_ns() + limit_ns
                             : req->deadline_ns == forever_ns ? forever_ns
                                                              : std::max(req->deadline_ns, now_ns()) + limit_ns;
    pqxx::result r;
    try {
        const bool shared = h->kind == DLOCK_HOLD_SHARED;
        r = wait ? s->run_until(deadline, shared ? "lock_shared" : "lock", h->key, h->name, h->owner, b->holder,
                                lock_timeout_for(req->deadline_ns))
                 : s->run_until(deadline, shared ? "try_lock_shared" : "try_lock", h->key, h->name, h->owner, b->holder);
    } catch (const std::exception& e) {
        const bool broken = dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr;
        if (dynamic_cast<const no_answer*>(&e)) {
            unanswered = true;
            s->mark_broken();  // the session ends, and with it anything it may have been granted
            fail(DLOCK_UNAVAILABLE, fmt::format("sql backend: {}: the advisory acquire of `{}` got {}", b->where(), req->name, e.what()));
        }
        if (broken) s->mark_broken();  // the session is gone, and with it anything it was granted
        if (b->interrupted) {
            s->mark_broken();
            fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        }
        if (!broken) scrub(b, *s);
        if (sqlstate_of(e) == "55P03")
            fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held on {} (waited in the server's lock queue)", req->name, b->where()));
        const failure f = classify(b->config, e, fmt::format("the advisory acquire of `{}`", req->name), false);
        fail(f.status == DLOCK_UNKNOWN ? DLOCK_UNAVAILABLE : f.status, f.message);
    }
    if (r.empty()) fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held on {}", req->name, b->where()));
    grant->fencing_token = r[0][0].as<uint64_t>();
    grant->valid_until_ns = forever_ns;  // held until released or the session ends (reported LOST)
    grant->ttl_ms = req->ttl_ms;
    h->held = s.detach();
    b->monitor_for_holds().add(h.get(), h->held.get());
    return DLOCK_OK;
}

}  // namespace

int acquire_advisory(backend* b, const dlock_acquire_request* req, std::unique_ptr<advisory_hold>& h, dlock_grant* grant) {
    h->key = b->key_for(h->name);
    bool unanswered = false;
    try {
        // The pool's idle check (a poll per acquire) is left to this failure path: the common case,
        // a live session, pays no system call for it.
        return acquire_advisory_once(b, req, h, grant, unanswered, false);
    } catch (const failure& f) {
        // A session the server ended while idle in the pool fails at once; the session is gone, and
        // anything it might have been granted with it, so one retry on a checked session is safe.
        if (f.status != DLOCK_UNAVAILABLE || b->interrupted || unanswered) throw;
        return acquire_advisory_once(b, req, h, grant, unanswered, true);
    }
}

void retire_session(backend* b, advisory_hold* h, bool reusable) {
    if (!h->held) return;
    if (!reusable) h->held->mark_broken();
    b->sessions->give_back(std::move(h->held));
}

int release_advisory(backend* b, advisory_hold* h) {
    if (!h->held) return DLOCK_LOST;
    if (b->monitor_for_holds().take(h)) {
        // Already reported LOST: the server ended the session and released the lock with it.
        retire_session(b, h, false);
        return DLOCK_LOST;
    }
    bool unlocked = false;
    try {
        unlocked = h->held->run_until(b->statement_deadline(), h->kind == DLOCK_HOLD_SHARED ? "unlock_shared" : "unlock",
                                      h->key)[0][0]
                       .as<bool>();
    } catch (const std::exception& e) {
        retire_session(b, h, false);
        if (dynamic_cast<const pqxx::broken_connection*>(&e))
            fail(DLOCK_LOST, fmt::format("sql backend: {}: the session holding `{}` ended ({}); the server releases its "
                                         "advisory locks with it", b->where(), h->name, e.what()));
        const failure f = classify(b->config, e, fmt::format("the release of `{}`", h->name), true);
        fail(f.status, f.message + "; the session was closed, which releases the lock");
    }
    retire_session(b, h, unlocked);
    return unlocked ? DLOCK_OK : DLOCK_LOST;
}

// Advisory leases have no ttl; an explicit renew confirms the session still holds the lock.
int renew_advisory(backend* b, dlock_renewal* renewals, size_t count) {
    monitor& m = b->monitor_for_holds();
    for (size_t i = 0; i < count; ++i) {
        advisory_hold* h = as_advisory_hold(renewals[i].hold);
        renewals[i].valid_until_ns = forever_ns;
        if (!h->held || !m.begin_use(h)) {
            renewals[i].status = DLOCK_LOST;
            continue;
        }
        try {
            renewals[i].status =
                h->held->run_until(b->statement_deadline(), "check", h->key)[0][0].as<int64_t>() == 1 ? DLOCK_OK : DLOCK_LOST;
            m.end_use(h, true);
        } catch (const std::exception& e) {
            const bool broken = dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr;
            if (broken) h->held->mark_broken();
            renewals[i].status = broken ? DLOCK_LOST : DLOCK_UNKNOWN;
            m.end_use(h, !broken);
        }
    }
    return DLOCK_OK;
}

int visit_advisory_holders(backend* b, const std::string& name_or_prefix, bool exact, const dialect::kind_filter& wanted,
                           dlock_holder_visitor visit, void* user_data) {
    const int64_t deadline = b->statement_deadline();
    auto s = b->sessions->borrow(deadline);
    pqxx::result names, granted;
    try {
        names = s->run_until(deadline, "fence_rows", name_or_prefix, exact);
        granted = s->run_until(deadline, "granted_keys");
    } catch (const std::exception& e) {
        if (dynamic_cast<const pqxx::broken_connection*>(&e)) s->mark_broken();
        throw classify(b->config, e, exact ? fmt::format("reading the holders of `{}`", name_or_prefix) : "listing the holders", false);
    }
    std::multimap<int64_t, std::pair<int, bool>> sessions_by_key;  // key → (pid, shared)
    for (const auto& row : granted) sessions_by_key.emplace(row[0].as<int64_t>(), std::make_pair(row[1].as<int>(), row[2].as<bool>()));
    for (const auto& row : names) {
        const std::string name = row[0].as<std::string>();
        int64_t key = 0;
        try {
            key = b->key_for(name);
        } catch (const failure&) {
            continue;  // a name the current advisory_key_prefix cannot map: not this client's key
        }
        const auto [from, to] = sessions_by_key.equal_range(key);
        for (auto it = from; it != to; ++it) {
            const uint32_t kind = it->second.second ? DLOCK_HOLD_SHARED : DLOCK_HOLD_EXCLUSIVE;
            if (!wanted(kind)) continue;
            const bool last = !row[3].is_null() && row[3].as<int>() == it->second.first;
            const std::string owner = last && !row[1].is_null() ? row[1].as<std::string>() : "";
            dlock_holder_info info{};
            info.struct_size = sizeof info;
            info.name = name.c_str();
            info.kind = kind;
            std::memcpy(info.holder, owner.data(), std::min(owner.size(), sizeof info.holder - 1));
            info.fencing_token = last ? row[2].as<uint64_t>() : 0;
            info.ttl_left_ms = -1;
            if (visit(&info, user_data) != 0) return DLOCK_OK;
        }
    }
    return DLOCK_OK;
}

}  // namespace dlock::sql::postgres
