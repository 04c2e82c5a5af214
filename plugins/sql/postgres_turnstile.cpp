// Fair waiters' queues and waits (postgres_turnstile.hpp).
#include "postgres_turnstile.hpp"

namespace dlock::sql::postgres {

bool leave_any_turnstile(backend* b, session& s) {
    try {
        s.run_until(b->statement_deadline(), "turnstile_leave_any");
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

bool listen_in_place(backend* b, listener& waker, const std::string& channel, int64_t until_ns, turnstile* place) {
    for (;;) {
        if (waker.wait_listening(channel, place ? std::min(until_ns, place->heartbeat_due_ns()) : until_ns)) return true;
        if (!place || b->interrupted || now_ns() >= until_ns) return false;
        if (now_ns() >= place->heartbeat_due_ns() && !place->heartbeat()) return false;
    }
}

void wait_in_place(backend* b, listener& waker, const std::string& channel, uint64_t seen, int64_t until_ns, turnstile* place) {
    for (;;) {
        waker.wait_change(channel, seen, place ? std::min(until_ns, place->heartbeat_due_ns()) : until_ns);
        if (!place || b->interrupted || waker.generation(channel) != seen || now_ns() >= until_ns) return;
        if (now_ns() >= place->heartbeat_due_ns() && !place->heartbeat()) return;
    }
}

}  // namespace dlock::sql::postgres
