// Lease mode, shared holds and semaphore permits: rows of the holders table, waited for like
// exclusive holds (postgres_backend.hpp).
#include "postgres_turnstile.hpp"

#include <fmt/format.h>

namespace dlock::sql::postgres {

namespace {

// How long a reader held back by a queued writer waits before it looks again: the writer notifies
// when it releases, but not when it gives up waiting.
constexpr int64_t writer_queue_recheck_ns = 200'000'000;

struct holder_attempt {
    bool acquired = false;
    uint64_t fence = 0;
    int64_t wait_ms = -1;  // until the first holder's expiry; -1: until a release (or the recheck)
    int64_t sent_ns = 0;
    bool outcome_was_unknown = false;  // the connection dropped; the row read back was not ours
};

// One attempt at a shared hold or a permit (statements shared_acquire, permit_acquire). `admitted`:
// a reader (permit acquirer) the turnstile admitted (it no longer yields to queued writers (fair
// waiters)); `on`: its session.
holder_attempt try_holder_lease(backend* b, hold& h, const dlock_acquire_request* req, bool admitted, session* on) {
    holder_attempt a;
    const int64_t deadline = statement_deadline_within(b->config.client_limit_ms(), req->deadline_ns);
    const bool shared = h.kind == DLOCK_HOLD_SHARED;
    for (int collisions = 0;; ++collisions) {
        pool::lease borrowed;
        if (!on) borrowed = b->sessions->borrow(deadline, true);
        session* s = on ? on : &*borrowed;
        a.sent_ns = now_ns();
        try {
            if (shared) {
                const pqxx::result r = s->run_until(deadline, "shared_acquire", h.name, h.owner, req->ttl_ms, b->holder, admitted,
                                                    b->turnstile_key_for(h.name));
                if (!r.empty() && !r[0][0].is_null()) {
                    a.acquired = true;
                    a.fence = r[0][0].as<uint64_t>();
                } else if (!r.empty() && !r[0][1].is_null()) {
                    a.wait_ms = r[0][1].as<int64_t>();
                }
                return a;
            }
            const int limit = int(req->permits);
            pqxx::result r = s->run_until(deadline, "permit_acquire", h.name, h.owner, req->ttl_ms, b->holder, limit,
                                                admitted, b->semaphore_turnstile_key_for(h.name));
            if (r[0][1].is_null()) {  // no slots yet, or a break forgot the limit: store ours
                s->run_until(deadline, "permit_create", h.name, limit);
                a.sent_ns = now_ns();
                r = s->run_until(deadline, "permit_acquire", h.name, h.owner, req->ttl_ms, b->holder, limit,
                                                admitted, b->semaphore_turnstile_key_for(h.name));
            }
            if (!r[0][1].is_null() && r[0][1].as<int64_t>() != limit)
                fail(DLOCK_INVALID_ARGUMENT,
                     fmt::format("sql backend: semaphore `{}` on {} has a limit of {} permits; this acquire asks for {} (every "
                                 "client of a semaphore must give the same limit; a break forgets it)",
                                 h.name, b->where(), r[0][1].as<int64_t>(), limit));
            if (!r[0][0].is_null()) {
                a.acquired = true;
                a.fence = r[0][0].as<uint64_t>();
            } else if (!r[0][2].is_null()) {
                a.wait_ms = r[0][2].as<int64_t>();
            }
            return a;
        } catch (const failure&) {
            throw;
        } catch (const pqxx::broken_connection& e) {
            s->mark_broken();
            // The statement may have committed: only a holder row carrying our token proves it, once
            // the statement can no longer commit later (a retry would add a second row).
            const auto unknown = [&](const std::string& why) { fail_unsettled_acquire(b, h.name, e.what(), why, "hold"); };
            const std::optional<failure> unsettled = end_lost_session(b, *s);
            try {
                const int64_t read_deadline = b->statement_deadline();
                auto reader = b->sessions->borrow(read_deadline);
                try {
                    const pqxx::result r =
                        reader->run_until(read_deadline, "holder_read_back", std::string(shared ? "S" : "P"), h.name, h.owner);
                    if (!r.empty()) {
                        a.acquired = true;
                        a.fence = r[0][0].as<uint64_t>();
                        return a;
                    }
                } catch (const std::exception&) {
                    reader->mark_broken();
                    throw;
                }
            } catch (const failure& again) {
                unknown(unsettled ? unsettled->message : again.message);
            } catch (const std::exception& again) {
                unknown(again.what());
            }
            if (unsettled) unknown(unsettled->message);  // nothing yet, but the lost statement may still commit
            // Not taken: the lost statement ended without committing (behind a pooler, not yet: if it
            // commits later, its row carries our owner token and expires after the ttl).
            a.outcome_was_unknown = true;
            return a;
        } catch (const std::exception& e) {
            // A reader's new slot number was taken by a reader that committed meanwhile: try again.
            if (sqlstate_of(e) == "23505" && collisions < 16) continue;
            throw classify(b->config, e, fmt::format("the acquire of `{}`", h.name), false);
        }
    }
}

// A shared hold of a lock, or one permit of a semaphore. Waits as the exclusive path does: LISTEN on
// the object's channel, retry on a release's notification or at the first holder's expiry; fair
// waiters first queue in the object's turnstile (readers in shared mode).

}  // namespace

int acquire_holder_lease(backend* b, const dlock_acquire_request* req, std::unique_ptr<lease_hold>& h, dlock_grant* grant) {
    const bool shared = h->kind == DLOCK_HOLD_SHARED;
    h->channel = shared ? b->channel_for(h->name) : b->semaphore_channel_for(h->name);
    auto finish = [&](const holder_attempt& a) {
        grant->fencing_token = a.fence;
        grant->valid_until_ns = h->granted(a.sent_ns, req->ttl_ms);
        grant->ttl_ms = req->ttl_ms;
        return DLOCK_OK;
    };
    auto held_message = [&] {
        return shared ? fmt::format("lock `{}` is held exclusively (or an exclusive waiter is queued) on {}", req->name, b->where())
                      : fmt::format("all {} permits of semaphore `{}` are held on {}", req->permits, req->name, b->where());
    };
    holder_attempt a = try_holder_lease(b, *h, req, false, nullptr);
    // A connection the server ended while it sat idle in the pool looks like one lost mid-statement;
    // the read-back said "not taken", so one immediate retry on a fresh connection is safe.
    if (!a.acquired && a.outcome_was_unknown) a = try_holder_lease(b, *h, req, false, nullptr);
    if (a.acquired) return finish(a);
    if (req->deadline_ns == 0 || now_ns() >= req->deadline_ns) {
        if (a.outcome_was_unknown)
            fail(DLOCK_UNAVAILABLE, fmt::format("sql backend: {}: the connection was lost during the acquire of `{}`; the "
                                                "row read back shows it was not taken; retry", b->where(), req->name));
        fail(DLOCK_TIMEOUT, held_message());
    }

    const int64_t queue_key = shared ? b->turnstile_key_for(h->name) : b->semaphore_turnstile_key_for(h->name);
    std::unique_ptr<turnstile> admitted;
    if (req->fair) admitted = std::make_unique<turnstile>(b, req, queue_key, shared);
    listener& waker = b->listener_for_waits();
    const listener::watching watched(waker, h->channel);
    listen_in_place(b, waker, h->channel, std::min(req->deadline_ns, now_ns() + b->config.statement_timeout_ms * 1'000'000),
                    admitted.get());
    for (;;) {
        if (b->interrupted) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        const uint64_t seen = waker.generation(h->channel);
        a = try_holder_lease(b, *h, req, admitted != nullptr, admitted ? admitted->on() : nullptr);
        if (a.acquired) return finish(a);
        const int64_t now = now_ns();
        if (now >= req->deadline_ns) fail(DLOCK_TIMEOUT, held_message());
        if (admitted && admitted->on()->broken()) {
            admitted.reset();
            admitted = std::make_unique<turnstile>(b, req, queue_key, shared);
            continue;
        }
        if (a.outcome_was_unknown) continue;  // look again at once (the statement was given up)
        const int64_t wake_ns = a.wait_ms >= 0 ? now + (a.wait_ms + 1) * 1'000'000 : now + writer_queue_recheck_ns;
        wait_in_place(b, waker, h->channel, seen, std::min(req->deadline_ns, wake_ns), admitted.get());
    }
}

int release_holder_lease(backend* b, lease_hold* h) {
    const int64_t deadline = b->statement_deadline();
    auto s = b->sessions->borrow(deadline);
    const int64_t sent = now_ns();
    try {
        if (h->kind == DLOCK_HOLD_SHARED) {
            const pqxx::result r = s->run_until(deadline, "shared_release", h->name, h->owner, h->channel);
            return h->release_answered(r[0][0].as<bool>());
        }
        const pqxx::result r = s->run_until(deadline, "permit_release", h->name, h->owner, h->channel);
        return h->release_answered(!r.empty());
    } catch (const std::exception& e) {
        fail_release(b, *s, h, sent, e);
    }
}

}  // namespace dlock::sql::postgres
