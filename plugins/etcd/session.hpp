// session.hpp — the etcd plugin's session: one lease per client, granted on first use and kept alive
// on ONE bidirectional LeaseKeepAlive stream until the client closes, when it is revoked.
//
// Validity. The lease's deadline is computed from the send time of the keepalive request whose
// response confirmed it: deadline = send time + granted TTL - drift (drift = TTL/100 + 2 ms, for a
// server clock that runs slightly fast). The server raises a TTL below its minimum without saying so:
// the TTL is always read back from the grant and the keepalive responses.
//
// States. healthy: keepalives are confirmed. suspect: the stream broke or a keepalive went
// unanswered for `stall` (then the stream is moved to the next member) — the lease may still live
// until its deadline. dead: the deadline passed without a confirmation, or the server answered that
// the lease no longer exists (TTL 0: expired or revoked). A dead session is never revived; the next
// acquire grants a new one.
//
// Threads: a reader (blocks in the stream's Read, reconnects) and a timer (sends a keepalive every
// TTL/3 or when renew() needs a fresh confirmation, detects stalls and expiry). Both are started by
// the first grant and stopped and joined by stop().
#pragma once

#include "connection.hpp"

#include <dlock/plugin_kit/thread_safety.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace dlock::etcd {

// One granted lease. `id` and `ttl_s` never change once it is published; the other fields are
// guarded by the keeper's mutex: read them through the keeper.
struct session {
    int64_t id = 0;
    int64_t ttl_s = 0;  // as granted (a keepalive answer's TTL sets that answer's deadline)
    enum class health { healthy, suspect, dead };
    health state = health::healthy;
    int64_t deadline_ns = 0;
    int64_t confirmed_send_ns = 0;  // send time of the request behind deadline_ns
    int dead_status = DLOCK_OK;     // why it died: DLOCK_UNAVAILABLE (not confirmed in time) or DLOCK_BACKEND (gone on the server)
    std::string dead_reason;
};

// What the keeper tells the backend. Called from the keeper's threads with none of its locks held.
class session_listener {
public:
    virtual ~session_listener() = default;
    virtual void session_suspect(const std::shared_ptr<session>& s, const std::string& why) = 0;
    virtual void session_healthy(const std::shared_ptr<session>& s) = 0;
    virtual void session_dead(const std::shared_ptr<session>& s, int status, const std::string& why) = 0;
    // The keepalive stream gave up on member `index` (it failed or stalled): streams on it should move.
    virtual void member_failed(size_t index) = 0;
};

class session_keeper {
public:
    session_keeper(connection& conn, session_listener& listener);
    ~session_keeper();
    session_keeper(const session_keeper&) = delete;
    session_keeper& operator=(const session_keeper&) = delete;

    // The live session, granting one with `ttl_ms` (rounded up to whole seconds; settings'
    // session_ttl_ms wins when set) when there is none; the grant is made with `options` (an
    // acquire's: cancellable, ending by its deadline). Throws failure.
    std::shared_ptr<session> obtain(int64_t ttl_ms, call_options options);

    // For renew: confirms `s` and writes its deadline. When the last confirmation is older than a
    // quarter of the TTL, sends a keepalive on the stream now and waits for its answer (at most
    // request_timeout), so that every OK moves validity forward. Returns DLOCK_OK, DLOCK_LOST (the
    // session is dead) or DLOCK_UNAVAILABLE (not confirmed now; may still be alive), with `why`.
    int confirm(const std::shared_ptr<session>& s, int64_t& deadline_ns, std::string& why);

    // Declares `s` dead (the server said its lease is not found): the next obtain() grants a new one.
    void forget(const std::shared_ptr<session>& s, int status, const std::string& why);

    // The deadline and state of `s` now.
    int64_t deadline(const session& s);
    bool alive(const session& s);
    session::health health(const session& s);

    // Revokes the live lease (best effort: keys attached to it go at once instead of after the TTL),
    // stops the stream and joins the threads. Idempotent.
    void stop();

private:
    struct pending_send {
        int64_t lease_id;
        int64_t sent_ns;
    };

    void start_threads_locked() DLOCK_REQUIRES(mutex_);
    void reader_loop();
    void timer_loop();
    // Marks the current session dead (under mutex_); the caller notifies the listener afterwards.
    std::shared_ptr<session> kill_locked(int status, std::string why) DLOCK_REQUIRES(mutex_);
    int64_t stall_ns() const DLOCK_REQUIRES(mutex_);

    connection& conn_;
    session_listener& listener_;
    std::mutex grant_mutex_;  // one grant at a time

    plugin_kit::mutex mutex_;
    std::condition_variable changed_;  // timer wake-ups, confirmations, stop
    std::shared_ptr<session> current_ DLOCK_GUARDED_BY(mutex_);  // the live session, or null
    bool stopping_ DLOCK_GUARDED_BY(mutex_) = false;
    bool threads_started_ DLOCK_GUARDED_BY(mutex_) = false;
    bool kick_ DLOCK_GUARDED_BY(mutex_) = false;  // the timer should send a keepalive now
    int64_t last_send_ns_ DLOCK_GUARDED_BY(mutex_) = 0;
    uint64_t confirmations_ DLOCK_GUARDED_BY(mutex_) = 0;  // responses processed, for confirm()'s wait
    // The stream: owned by the reader; written by the timer under mutex_.
    grpc::ClientContext* stream_context_ DLOCK_GUARDED_BY(mutex_) = nullptr;
    grpc::ClientReaderWriter<pb::LeaseKeepAliveRequest, pb::LeaseKeepAliveResponse>* stream_ DLOCK_GUARDED_BY(mutex_) = nullptr;
    size_t stream_member_ DLOCK_GUARDED_BY(mutex_) = 0;
    std::deque<pending_send> pending_ DLOCK_GUARDED_BY(mutex_);  // sent on the current stream, not yet answered
    std::thread reader_, timer_;
};

}  // namespace dlock::etcd
