// Lease mode, exclusive holds: the acquire (plain, or through the name's turnstile), the settling
// of an acquire whose connection was lost, release and renewal (postgres_backend.hpp).
#include "postgres_turnstile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <thread>

namespace dlock::sql::postgres {

namespace {

// Upper bound of the random delay a woken lease-mode waiter takes before retrying when other waiters
// compete (halved for every round it has lost): about the spread of NOTIFY delivery to 8 clients.
constexpr int64_t contention_spread_ns = 400'000;

// A PostgreSQL array literal of text values, passed as one parameter ("{\"a\",\"b\"}"): every
// element double-quoted with `"` and `\` escaped, so any name is one element.
std::string text_array(const std::vector<std::string>& values) {
    std::string out = "{";
    for (size_t i = 0; i < values.size(); ++i) {
        if (i) out += ',';
        out += '"';
        for (char c : values[i]) {
            if (c == '"' || c == '\\') out += '\\';
            out += c;
        }
        out += '"';
    }
    return out + "}";
}

struct attempt {
    bool acquired = false;
    uint64_t fence = 0;
    int64_t holder_left_ms = -1;  // -1: unknown (retry at once)
    int64_t sent_ns = 0;
    bool outcome_was_unknown = false;  // the connection dropped; the row read back was not ours
    bool registered = false;           // this attempt registered us as a waiter...
    int64_t registered_at_us = 0;      // ...at this server time
    int64_t waiters = 0;               // waiters registered in the row (as our snapshot saw it)
    bool left_queue = false;           // acquired by acquire_queued, which also left the turnstile (it was free)
};

// Roles of an acquire attempt (statement `acquire`, $5).
enum attempt_role { try_only = 0, first_of_a_wait = 1, waiter_retry = 2 };

}  // namespace

std::optional<failure> end_lost_session(backend* b, const session& lost) {
    if (lost.behind_pooler()) return std::nullopt;
    if (lost.server_pid() == 0)
        return failure{DLOCK_UNKNOWN, "the lost session's server process is unknown (its pid and start were not readable at "
                                      "connect), so its statement cannot be ended"};
    const int64_t deadline = b->statement_deadline();
    try {
        auto s = b->sessions->borrow(deadline);
        try {
            if (s->run_until(deadline, "end_session", lost.server_pid(), lost.server_started_us())[0][0].as<int64_t>() == 0)
                return std::nullopt;
            while (s->run_until(deadline, "session_present", lost.server_pid(), lost.server_started_us())[0][0].as<int64_t>() > 0) {
                if (now_ns() >= deadline)
                    return failure{DLOCK_UNKNOWN, fmt::format("the server process {} of the lost acquire was told to end and "
                                                              "still runs", lost.server_pid())};
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
            }
            return std::nullopt;
        } catch (const std::exception& e) {
            if (dynamic_cast<const pqxx::broken_connection*>(&e)) s->mark_broken();
            if (sqlstate_of(e) == "42501") {
                std::string why = e.what();
                std::replace(why.begin(), why.end(), '\n', ' ');
                while (!why.empty() && why.back() == ' ') why.pop_back();
                return failure{DLOCK_PERMISSION, fmt::format("the login role may not end the server process {} of the lost "
                                                             "acquire: {}", lost.server_pid(), why)};
            }
            return classify(b->config, e, "ending the server process of a lost acquire", false);
        }
    } catch (const failure& f) {
        return f;
    }
}

void fail_unsettled_acquire(const backend* b, const std::string& name, const char* lost, const std::string& why,
                            const char* what) {
    fail(DLOCK_UNKNOWN, fmt::format("sql backend: {}: the connection was lost during the acquire of `{}` ({}) and settling "
                                    "it on the server failed too ({}); its outcome is unknown and it is not reported held; "
                                    "if it committed, the {} expires after its ttl",
                                    b->where(), name, lost, why, what));
}

namespace {

// Reads our row back after a connection loss left an acquire's outcome unknown (end_lost_session()
// first): a row with our owner token and a future expiry is the only proof that we hold the lock.
bool read_back(backend* b, hold& h, attempt& a) {
    const int64_t deadline = b->statement_deadline();
    auto s = b->sessions->borrow(deadline);
    try {
        const pqxx::result r = s->run_until(deadline, "read_back", h.name, h.owner);
        if (r.empty()) return false;
        a.acquired = true;
        a.fence = r[0][0].as<uint64_t>();
        return true;
    } catch (const std::exception& e) {
        s->mark_broken();
        throw classify(b->config, e, fmt::format("reading back the acquire of `{}`", h.name), true);
    }
}

// `acquire_deadline_ns`: the request's (0: try once; INT64_MAX: none). The statement is given up at
// the client-side limit, or at that deadline if sooner; the read-back that follows a statement given
// up has the full limit, so a server that answers again resolves the outcome.
// `fair`: a fair waiter's attempt on its turnstile session, else a pooled session runs `acquire`.
// A statement that fails while it waits in the turnstile throws failure DLOCK_TIMEOUT (its
// lock_timeout ran out: the session has left any place it held, or is left broken if it could not)
// or DLOCK_CANCELLED (the client is closing), which leaves the session broken: it may have been
// admitted before it failed.
attempt try_acquire_lease(backend* b, hold& h, int64_t ttl_ms, attempt_role role, int64_t registered_at_us,
                          int64_t acquire_deadline_ns, fair_attempt* fair = nullptr) {
    attempt a;
    int64_t deadline = statement_deadline_within(b->config.client_limit_ms(), acquire_deadline_ns);
    if (fair && fair->enter) deadline = fair->wait_deadline_ns;
    pool::lease borrowed;
    if (!fair) borrowed = b->sessions->borrow(deadline, true);
    session* s = fair ? fair->on : &*borrowed;
    a.sent_ns = now_ns();
    try {
        const pqxx::result r =
            !fair ? s->run_until(deadline, "acquire", h.name, h.owner, ttl_ms, b->holder, int(role), b->config.handoff_grace_ms,
                                 registered_at_us)
            : fair->enter ? s->run_until(deadline, "acquire_queued", h.name, h.owner, ttl_ms, b->holder, int(role),
                                         b->config.handoff_grace_ms, registered_at_us, fair->key, lock_timeout_for(acquire_deadline_ns))
                          : s->run_until(deadline, "acquire", h.name, h.owner, ttl_ms, b->holder, int(role), b->config.handoff_grace_ms,
                                         registered_at_us);
        if (!r.empty() && !r[0][0].is_null()) {
            a.acquired = true;
            a.fence = r[0][0].as<uint64_t>();
            if (fair && fair->enter) fair->left = a.left_queue = !r[0][4].is_null() && r[0][4].as<bool>();
        } else if (!r.empty()) {
            if (!r[0][1].is_null()) a.holder_left_ms = r[0][1].as<int64_t>();
            a.registered = !r[0][2].is_null();
            if (a.registered) a.registered_at_us = r[0][2].as<int64_t>();
            if (!r[0][3].is_null()) a.waiters = r[0][3].as<int64_t>();
        }
        return a;
    } catch (const pqxx::broken_connection& e) {
        s->mark_broken();
        // Closing the client shuts down the socket of a statement waiting in the turnstile (as it
        // does an advisory wait); an attempt made in the instant of admission that committed leaves
        // a row that expires after its ttl.
        if (fair && fair->enter && b->interrupted) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        // UNKNOWN: the statement may have committed. Only our row proves it did, once it can no
        // longer commit later.
        const auto unknown = [&](const std::string& why) { fail_unsettled_acquire(b, h.name, e.what(), why, "row"); };
        const std::optional<failure> unsettled = end_lost_session(b, *s);
        try {
            if (read_back(b, h, a)) return a;  // our row: held, whether or not the lost statement was settled
        } catch (const failure& f) {
            unknown(unsettled ? unsettled->message : f.message);
        }
        if (unsettled) unknown(unsettled->message);  // nothing yet, but the lost statement may still commit
        // Not taken: the lost statement ended without committing (or, behind a pooler, not yet:
        // if it commits later, the row carries our owner token; our retry takes it over, or it
        // expires).
        a.outcome_was_unknown = true;
        return a;
    } catch (const std::exception& e) {
        if (fair && fair->enter) {
            // lock_timeout ran out (55P03): in the turnstile, or on the row once admitted. The session
            // answered, so it serves the next wait once it has left whatever place it held; any
            // other failure, or a client that is closing, ends the session (and its place with it).
            const bool timed_out = !b->interrupted && sqlstate_of(e) == "55P03";
            if (!timed_out || !leave_any_turnstile(b, *s)) s->mark_broken();
            if (b->interrupted) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
            if (timed_out)
                fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held on {} (waited behind the waiters queued before)", h.name,
                                                b->where()));
        }
        throw classify(b->config, e, fmt::format("the acquire of `{}`", h.name), false);
    }
}

}  // namespace

int acquire_lease(backend* b, const dlock_acquire_request* req, std::unique_ptr<lease_hold>& h, dlock_grant* grant) {
    h->channel = b->channel_for(h->name);
    auto finish = [&](const attempt& a) {
        grant->fencing_token = a.fence;
        grant->valid_until_ns = h->granted(a.sent_ns, req->ttl_ms);
        grant->ttl_ms = req->ttl_ms;
        return DLOCK_OK;
    };
    auto held_message = [&](const attempt& a) {
        return a.holder_left_ms >= 0
                   ? fmt::format("lock `{}` is held on {} (expires in {} ms unless renewed)", req->name, b->where(), a.holder_left_ms)
                   : fmt::format("lock `{}` is held on {}", req->name, b->where());
    };
    // A waiter registered in the row (anti-barging) that leaves without the lock unregisters,
    // best effort: a count left behind by a crash only delays newcomers by handoff_grace.
    struct {
        bool active = false;
        int64_t at_us = 0;
    } waiting;
    const auto unwait = plugin_kit::scope_exit([&] {
        if (!waiting.active) return;
        try {
            const int64_t deadline = b->statement_deadline();
            auto s = b->sessions->borrow(deadline);
            try {
                s->run_until(deadline, "unwait", h->name);
            } catch (const std::exception&) {
                s->mark_broken();
            }
        } catch (...) {
        }
    });
    std::unique_ptr<turnstile> admitted;  // a fair waiter's place in the queue
    // Fair: whether the next attempt queues. A name this client found contended queues at once;
    // another one tries the plain statement first.
    bool queue = req->fair && req->deadline_ns != 0 && b->seems_contended(h->name);
    auto next_try = [&](attempt_role role) {
        // Fair: a queued attempt waits for admission first, so the waiters queued before get the
        // lock first. A place whose session was lost (terminated, a restart) was lost too: queue again.
        if (admitted && admitted->on()->broken()) admitted.reset();
        if (req->fair && queue && !admitted) admitted = std::make_unique<turnstile>(b, req, turnstile::by_attempts);
        const int64_t registered_at_us = role == waiter_retry ? waiting.at_us : 0;
        attempt a;
        if (admitted) {
            fair_attempt fair = admitted->fair();
            std::optional<waiting_registration> queued;
            if (fair.enter) queued.emplace(register_waiting(b, fair.on));
            a = try_acquire_lease(b, *h, req->ttl_ms, role, registered_at_us, req->deadline_ns, &fair);
            admitted->attempted(fair);
        } else {
            a = try_acquire_lease(b, *h, req->ttl_ms, role, registered_at_us, req->deadline_ns);
        }
        if (a.registered) {
            waiting.active = true;
            waiting.at_us = a.registered_at_us;
        }
        if (a.acquired && role == waiter_retry) waiting.active = false;  // the statement unregistered us
        return a;
    };

    const attempt_role first = req->deadline_ns == 0 ? try_only : first_of_a_wait;
    attempt a = next_try(first);
    // A connection the server ended while it sat idle in the pool looks like one lost mid-statement;
    // the read-back said "not taken", so one immediate retry on a fresh connection is safe.
    if (!a.acquired && a.outcome_was_unknown) a = next_try(first);
    if (req->fair && req->deadline_ns != 0) b->note_contended(h->name, !a.acquired || (admitted && !a.left_queue));
    if (a.acquired) return finish(a);
    if (req->deadline_ns == 0 || now_ns() >= req->deadline_ns) {
        if (a.outcome_was_unknown)
            fail(DLOCK_UNAVAILABLE, fmt::format("sql backend: {}: the connection was lost during the acquire of `{}`; the "
                                                "row read back shows it was not taken; retry", b->where(), req->name));
        fail(DLOCK_TIMEOUT, held_message(a));
    }

    // Fair: queue (the first attempt did not: the name seemed free); the attempt made on admission
    // may win already.
    if (req->fair && !queue) {
        queue = true;
        a = next_try(waiting.active ? waiter_retry : first_of_a_wait);
        if (a.acquired) return finish(a);
        if (now_ns() >= req->deadline_ns) fail(DLOCK_TIMEOUT, held_message(a));
    }

    listener& waker = b->listener_for_waits();
    const listener::watching watched(waker, h->channel);
    // LISTEN before the retry, so a release between retry and wait is seen. If the LISTEN
    // connection is down we still retry at the holder's expiry.
    listen_in_place(b, waker, h->channel, std::min(req->deadline_ns, now_ns() + b->config.statement_timeout_ms * 1'000'000),
                    admitted.get());
    std::minstd_rand jitter(std::random_device{}());
    for (int lost_rounds = 0;; ++lost_rounds) {
        if (b->interrupted) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        const uint64_t seen = waker.generation(h->channel);
        a = next_try(waiting.active ? waiter_retry : first_of_a_wait);
        if (a.acquired) return finish(a);
        const int64_t now = now_ns();
        if (now >= req->deadline_ns) fail(DLOCK_TIMEOUT, held_message(a));
        // The turnstile's session was lost (terminated, a restart): so was our place. Queue again
        // (the next attempt does).
        if (admitted && admitted->on()->broken()) continue;
        if (a.holder_left_ms < 0) continue;  // the holder's row was not visible yet: look again
        const int64_t expiry_ns = now + (a.holder_left_ms + 1) * 1'000'000;
        wait_in_place(b, waker, h->channel, seen, std::min(req->deadline_ns, expiry_ns), admitted.get());
        // Woken with other waiters registered: every one of them was notified at once, in an order
        // the server fixes (its list of listening backends), so the first to retry would win every
        // time. A short random delay, shorter the longer this waiter has waited, spreads the wins
        // (and favours old waiters). Not a poll: one delay per notification, only under contention.
        // (A waiter admitted by the turnstile competes with nobody: the others wait for admission.)
        if (!admitted && a.waiters - (waiting.active ? 1 : 0) > 0 && waker.generation(h->channel) != seen) {
            const int64_t spread_ns = contention_spread_ns >> std::min(lost_rounds, 8);
            const int64_t delay_ns = spread_ns > 0 ? int64_t(jitter() % uint64_t(spread_ns)) : 0;
            const uint64_t now_seen = waker.generation(h->channel);
            waker.wait_change(h->channel, now_seen, std::min(req->deadline_ns, now_ns() + delay_ns));
        }
    }
}

void fail_release(backend* b, session& s, lease_hold* h, int64_t sent, const std::exception& e) {
    if (dynamic_cast<const pqxx::broken_connection*>(&e)) s.mark_broken();
    h->release_unanswered(sent);
    const failure f = classify(b->config, e, fmt::format("the release of `{}`", h->name), true);
    fail(f.status == DLOCK_BACKEND || f.status == DLOCK_UNAVAILABLE ? DLOCK_UNKNOWN : f.status, f.message);
}

int release_lease(backend* b, lease_hold* h) {
    const int64_t deadline = b->statement_deadline();
    auto s = b->sessions->borrow(deadline);
    const int64_t sent = now_ns();
    try {
        const pqxx::result r = s->run_until(deadline, "release", h->name, h->owner, h->channel);
        return h->release_answered(!r.empty());
    } catch (const std::exception& e) {
        fail_release(b, *s, h, sent, e);
    }
}

// One statement per kind of hold in the batch (a batch of exclusive holds is one statement, as
// before semaphores existed); owner tokens are unique, so one set of extended owners answers all.
int renew_lease(backend* b, dlock_renewal* renewals, size_t count) {
    const auto itself = [](::dlock_hold* h) { return as_lease_hold(h); };
    const int64_t deadline = renewal_deadline(b->statement_deadline(), renewals, count, itself);
    auto s = b->sessions->borrow(deadline);
    const int64_t sent = now_ns();
    std::set<std::string> extended;
    const std::pair<uint32_t, const char*> kinds[] = {
        {DLOCK_HOLD_EXCLUSIVE, "renew"}, {DLOCK_HOLD_SHARED, "shared_renew"}, {DLOCK_HOLD_PERMIT, "permit_renew"}};
    for (const auto& [kind, statement] : kinds) {
        std::vector<std::string> names, owners, ttls;
        for (size_t i = 0; i < count; ++i) {
            if (as_lease_hold(renewals[i].hold)->kind != kind) continue;
            names.push_back(as_lease_hold(renewals[i].hold)->name);
            owners.push_back(as_lease_hold(renewals[i].hold)->owner);
            ttls.push_back(std::to_string(renewals[i].ttl_ms));
        }
        if (names.empty()) continue;
        pqxx::result r;
        try {
            r = s->run_until(deadline, statement, text_array(names), text_array(owners),
                             "{" + fmt::format("{}", fmt::join(ttls, ",")) + "}");
        } catch (const std::exception& e) {
            if (dynamic_cast<const pqxx::broken_connection*>(&e)) s->mark_broken();
            const failure f = classify(b->config, e, fmt::format("renewing {} leases", count), true);
            fail(f.status == DLOCK_BACKEND || f.status == DLOCK_PERMISSION ? f.status : DLOCK_UNKNOWN, f.message);
        }
        for (const auto& row : r) extended.insert(row[0].as<std::string>());
    }
    record_renewals(renewals, 0, count, sent, extended, itself);
    return DLOCK_OK;
}

}  // namespace dlock::sql::postgres
