// postgres_turnstile.hpp — the PostgreSQL dialect's waits that block in the server (a session
// registered for interrupt(): register_waiting), lease mode's fair waiters' queues (turnstile) and the
// waits of a waiter for its name's notifications, with its place's heartbeats (listen_in_place,
// wait_in_place).
#pragma once

#include "postgres_backend.hpp"

namespace dlock::sql::postgres {

// Leaves every turnstile place queue session `s` holds (statement turnstile_leave_any); false when
// that failed (the caller then closes the session, which leaves them on the server).
bool leave_any_turnstile(backend* b, session& s);

// A fair waiter's attempt: on its turnstile session; the first one waits for admission in the same
// statement (acquire_queued, with the name's turnstile key).
struct fair_attempt {
    session* on;
    int64_t key;
    bool enter;                // not admitted yet: wait in the turnstile first (acquire_queued)
    int64_t wait_deadline_ns;  // enter: when to give the wait up client-side
    bool left = false;         // out: acquire_queued acquired and left the turnstile (it was free)
};

// Registers a session about to block in a server-side wait (the turnstile, an advisory lock) for the
// time of the wait, so that interrupt() can shut it down: the returned guard unregisters it. Refuses
// (failure DLOCK_CANCELLED) once the client is closing.
inline auto register_waiting(backend* b, session* s) {
    {
        plugin_kit::lock_guard lock(b->waiting_mutex);
        if (b->interrupted) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        b->waiting.push_back(s);
    }
    return plugin_kit::scope_exit([b, s] {
        plugin_kit::lock_guard lock(b->waiting_mutex);
        auto it = std::find(b->waiting.begin(), b->waiting.end(), s);
        *it = b->waiting.back();
        b->waiting.pop_back();
    });
}
using waiting_registration = decltype(register_waiting(nullptr, nullptr));

// A fair waiter's place in the name's turnstile (statement `turnstile_enter`): a session advisory
// lock on its own pooled session, held from admission until the waiter holds the lock or gives up.
// While it waits for admission, closing the client shuts the session's socket down (as for an
// advisory wait). Leaving unlocks it; a session whose unlock fails, or a client that is closing,
// closes the session instead, which ends the lock on the server too. An exclusive waiter enters with
// its first attempt instead (statement acquire_queued: fair()).
class turnstile {
public:
    struct by_attempts_t {};
    static constexpr by_attempts_t by_attempts{};
    // A place not taken yet: the first attempt (fair()) waits for admission.
    turnstile(backend* b, const dlock_acquire_request* req, by_attempts_t)
        : b_(b), key_(b->turnstile_key_for(req->name)), entered_(false), wait_deadline_ns_(wait_deadline(b, req)) {
        session_ = b->queue_pool().borrow(req->deadline_ns, true);
    }
    // Waits for admission until the request's deadline. Throws failure: DLOCK_TIMEOUT when the
    // deadline passed in the queue, DLOCK_CANCELLED when the client closes, else the classified error.
    turnstile(backend* b, const dlock_acquire_request* req) : turnstile(b, req, b->turnstile_key_for(req->name), false) {}
    // The queue `key`; `shared`: a reader's place (admitted together with the readers before it,
    // after every writer queued before it; writers queued after it wait for it).
    turnstile(backend* b, const dlock_acquire_request* req, int64_t key, bool shared) : b_(b), key_(key), shared_(shared) {
        session_ = b->queue_pool().borrow(req->deadline_ns, true);
        const auto registered = register_waiting(b, &*session_);
        const int64_t deadline = wait_deadline(b, req);
        try {
            session_->run_until(deadline, shared_ ? "turnstile_enter_shared" : "turnstile_enter", key_,
                                lock_timeout_for(req->deadline_ns));
        } catch (const std::exception& e) {
            const bool not_admitted = sqlstate_of(e) == "55P03";
            if (!not_admitted) session_->mark_broken();  // whatever it may have been granted ends with it
            if (b->interrupted) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
            if (not_admitted)
                fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held on {} (waited behind the waiters queued before)",
                                                req->name, b->where()));
            if (dynamic_cast<const no_answer*>(&e))
                fail(DLOCK_UNAVAILABLE, fmt::format("sql backend: {}: waiting in the queue of `{}` got {}", b->where(), req->name,
                                                    e.what()));
            const failure f = classify(b->config, e, fmt::format("waiting in the queue of `{}`", req->name), false);
            fail(f.status == DLOCK_UNKNOWN ? DLOCK_UNAVAILABLE : f.status, f.message);
        }
    }
    turnstile(const turnstile&) = delete;
    turnstile& operator=(const turnstile&) = delete;
    ~turnstile() {
        if (b_->interrupted || session_->broken()) {
            session_->mark_broken();
            return;
        }
        if (!entered_ || left_) return;
        try {
            if (!session_->run_until(b_->statement_deadline(), shared_ ? "turnstile_leave_shared" : "turnstile_leave", key_)[0][0]
                     .as<bool>())
                session_->mark_broken();
        } catch (const std::exception&) {
            session_->mark_broken();
        }
    }
    session* on() { return &*session_; }
    // An admitted waiter's queue session must not fall silent for peer_timeout: the server ends it
    // then (idle_session_timeout on queue sessions), and with it the place, which is what bounds how
    // long a stalled waiter (SIGSTOP, a paused VM) keeps the waiters behind it out. A waiter that
    // waits runs a statement on it every third of that (settings::queue_heartbeat_ns()).
    int64_t heartbeat_due_ns() { return session_->idle_since_ns() + b_->config.queue_heartbeat_ns(); }
    // Runs the heartbeat; false when the session was lost (and the place with it: queue again).
    bool heartbeat() {
        try {
            session_->run_until(b_->statement_deadline(), "queue_heartbeat");
            return true;
        } catch (const std::exception&) {
            session_->mark_broken();
            return false;
        }
    }
    // The next attempt's turnstile part (waiting for admission first when not admitted yet).
    fair_attempt fair() { return fair_attempt{&*session_, key_, !entered_, wait_deadline_ns_}; }
    // An attempt made with fair() was answered: admitted, and left if it says so.
    void attempted(const fair_attempt& f) {
        entered_ = true;
        left_ = f.left;
    }

private:
    // A wait in the queue is bounded by lock_timeout on the server, and given up a client-side
    // limit later.
    static int64_t wait_deadline(backend* b, const dlock_acquire_request* req) {
        const int64_t limit_ns = b->config.client_limit_ms() * 1'000'000;
        return req->deadline_ns == forever_ns ? forever_ns : std::max(req->deadline_ns, now_ns()) + limit_ns;
    }

    backend* b_;
    int64_t key_;
    bool shared_ = false;
    bool entered_ = true;
    bool left_ = false;
    int64_t wait_deadline_ns_ = 0;
    pool::lease session_;
};

// A waiter's wait for `channel`'s subscription (listener::wait_listening, until `until_ns`) and for
// a change of it from `seen` (listener::wait_change); with `place` (an admitted waiter's turnstile),
// its heartbeats are sent meanwhile. Either returns early when the place was lost.
bool listen_in_place(backend* b, listener& waker, const std::string& channel, int64_t until_ns, turnstile* place);
void wait_in_place(backend* b, listener& waker, const std::string& channel, uint64_t seen, int64_t until_ns, turnstile* place);

}  // namespace dlock::sql::postgres
