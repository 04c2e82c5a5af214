// Implements the session lease and its keepalive stream (session.hpp).
#include "session.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace dlock::etcd {

namespace {

// Pause between two attempts to open the stream, so a member that refuses at once is not hammered.
constexpr int64_t reconnect_pause_ns = 50 * ns_per_ms;

}  // namespace

session_keeper::session_keeper(connection& conn, session_listener& listener) : conn_(conn), listener_(listener) {}

session_keeper::~session_keeper() { stop(); }

int64_t session_keeper::stall_ns() const {
    // A keepalive is answered in about a millisecond by a healthy member; one unanswered for a
    // quarter of the TTL (at least 400 ms, so a busy machine is not taken for a dead member; at most
    // request_timeout) means the member is paused, cut off or without a leader for long: move to
    // the next member while the lease still lives.
    const int64_t ttl_ns = (current_ ? current_->ttl_s : 1) * 1'000'000'000;
    const int64_t floor_ns = 400 * ns_per_ms;
    return std::min(std::max(ttl_ns / 4, floor_ns), std::max(conn_.config().request_timeout_ms * ns_per_ms, floor_ns));
}

std::shared_ptr<session> session_keeper::obtain(int64_t ttl_ms, call_options options) {
    {
        plugin_kit::lock_guard lock(mutex_);
        if (current_) return current_;
    }
    std::lock_guard<std::mutex> granting(grant_mutex_);
    {
        plugin_kit::lock_guard lock(mutex_);
        if (current_) return current_;  // granted by another thread meanwhile
        if (stopping_) fail(DLOCK_CANCELLED, "etcd: the client is closing");
    }
    const int64_t wanted_ms = conn_.config().session_ttl_ms > 0 ? conn_.config().session_ttl_ms : ttl_ms;
    pb::LeaseGrantRequest request;
    request.set_ttl(std::max<int64_t>(1, (wanted_ms + 999) / 1000));
    pb::LeaseGrantResponse response;
    int64_t sent = 0;
    conn_.call("grant the session lease",
               [&](member& m, grpc::ClientContext& context) {
                   sent = now_ns();
                   return m.lease->LeaseGrant(&context, request, &response);
               },
               options);
    if (!response.error().empty() || response.id() == 0 || response.ttl() <= 0)
        fail(DLOCK_BACKEND, fmt::format("etcd: the lease grant was refused: {}", response.error().empty() ? "no lease in the answer" : response.error()));
    auto s = std::make_shared<session>();
    s->id = response.id();
    s->ttl_s = response.ttl();  // the server may have raised it to its minimum
    s->confirmed_send_ns = sent;
    s->deadline_ns = sent + s->ttl_s * 1'000'000'000 - drift_ns(s->ttl_s * 1000);
    plugin_kit::lock_guard lock(mutex_);
    if (stopping_) fail(DLOCK_CANCELLED, "etcd: the client is closing");  // the lease expires by itself
    current_ = s;
    last_send_ns_ = sent;
    start_threads_locked();
    changed_.notify_all();
    return s;
}

void session_keeper::start_threads_locked() {
    if (threads_started_) return;
    threads_started_ = true;
    reader_ = std::thread([this] { reader_loop(); });
    timer_ = std::thread([this] { timer_loop(); });
}

std::shared_ptr<session> session_keeper::kill_locked(int status, std::string why) {
    std::shared_ptr<session> s = std::move(current_);
    current_.reset();
    if (s) {
        s->state = session::health::dead;
        s->dead_status = status;
        s->dead_reason = std::move(why);
    }
    changed_.notify_all();
    return s;
}

void session_keeper::forget(const std::shared_ptr<session>& s, int status, const std::string& why) {
    std::shared_ptr<session> died;
    {
        plugin_kit::lock_guard lock(mutex_);
        if (current_ == s) died = kill_locked(status, why);
    }
    if (died) listener_.session_dead(died, died->dead_status, died->dead_reason);
}

int64_t session_keeper::deadline(const session& s) {
    plugin_kit::lock_guard lock(mutex_);
    return s.deadline_ns;
}

bool session_keeper::alive(const session& s) {
    plugin_kit::lock_guard lock(mutex_);
    return s.state != session::health::dead;
}

session::health session_keeper::health(const session& s) {
    plugin_kit::lock_guard lock(mutex_);
    return s.state;
}

int session_keeper::confirm(const std::shared_ptr<session>& s, int64_t& deadline_ns, std::string& why) {
    plugin_kit::unique_lock lock(mutex_);
    const int64_t ttl_ns = s->ttl_s * 1'000'000'000;
    const int64_t now = now_ns();
    if (s->state == session::health::dead) {
        why = fmt::format("etcd: session lease {} is gone: {}", lease_hex(s->id), s->dead_reason);
        return DLOCK_LOST;
    }
    if (s->state == session::health::healthy && s->deadline_ns - now > ttl_ns * 3 / 4) {
        deadline_ns = s->deadline_ns;
        return DLOCK_OK;
    }
    // Ask the timer for a keepalive now and wait for a confirmation sent after this moment.
    kick_ = true;
    changed_.notify_all();
    const int64_t wait_until = std::min(s->deadline_ns, now + conn_.config().request_timeout_ms * ns_per_ms);
    changed_.wait_until(lock.std(), steady_time(wait_until), [&]() DLOCK_REQUIRES(mutex_) {
        return stopping_ || s->state == session::health::dead || s->confirmed_send_ns >= now;
    });
    if (s->state == session::health::dead) {
        why = fmt::format("etcd: session lease {} is gone: {}", lease_hex(s->id), s->dead_reason);
        return DLOCK_LOST;
    }
    if (s->confirmed_send_ns >= now) {
        deadline_ns = s->deadline_ns;
        return DLOCK_OK;
    }
    why = fmt::format("etcd: keepalive of session lease {} not confirmed by {} (the lease lives until its deadline "
                      "unless confirmed)", lease_hex(s->id), conn_.at(stream_member_).address);
    return DLOCK_UNAVAILABLE;
}

void session_keeper::reader_loop() {
    plugin_kit::unique_lock lock(mutex_);
    for (;;) {
        changed_.wait(lock.std(), [&]() DLOCK_REQUIRES(mutex_) { return stopping_ || current_ != nullptr; });
        if (stopping_) return;
        const size_t index = conn_.current();
        member& m = conn_.at(index);
        lock.unlock();
        // Opening a stream blocks while the channel connects: bound that by dial_timeout, so a member
        // that accepts TCP but never answers (paused) is left for the next one.
        if (!conn_.wait_connected(index)) {
            std::shared_ptr<session> suspect;
            lock.lock();
            if (!stopping_ && current_ && current_->state == session::health::healthy) {
                current_->state = session::health::suspect;
                suspect = current_;
            }
            lock.unlock();
            conn_.fail_over(index);
            listener_.member_failed(index);
            if (suspect) listener_.session_suspect(suspect, fmt::format("cannot connect to {}", m.address));
            lock.lock();
            changed_.wait_until(lock.std(), steady_time(now_ns() + reconnect_pause_ns), [&]() DLOCK_REQUIRES(mutex_) { return stopping_; });
            continue;
        }
        grpc::ClientContext context;
        conn_.prepare_stream(context);
        std::unique_ptr<grpc::ClientReaderWriter<pb::LeaseKeepAliveRequest, pb::LeaseKeepAliveResponse>> stream =
            m.lease->LeaseKeepAlive(&context);
        lock.lock();
        if (stopping_) {
            context.TryCancel();
            lock.unlock();
            stream->Finish();
            return;
        }
        stream_ = stream.get();
        stream_context_ = &context;
        stream_member_ = index;
        pending_.clear();
        kick_ = true;  // the first keepalive on a new stream goes out at once
        changed_.notify_all();
        lock.unlock();

        pb::LeaseKeepAliveResponse response;
        while (stream->Read(&response)) {
            std::shared_ptr<session> died, recovered;
            lock.lock();
            // Responses come in request order on one stream; a response for a lease we no longer keep
            // alive only consumes its request.
            int64_t sent = -1;
            while (!pending_.empty()) {
                const pending_send p = pending_.front();
                pending_.pop_front();
                if (p.lease_id == response.id()) {
                    sent = p.sent_ns;
                    break;
                }
            }
            ++confirmations_;
            if (current_ && current_->id == response.id() && sent >= 0) {
                if (response.ttl() <= 0) {
                    died = kill_locked(DLOCK_BACKEND, "the server no longer has it (expired or revoked)");
                } else if (sent >= current_->confirmed_send_ns) {
                    current_->confirmed_send_ns = sent;
                    current_->deadline_ns = sent + response.ttl() * 1'000'000'000 - drift_ns(response.ttl() * 1000);
                    if (current_->state == session::health::suspect) {
                        current_->state = session::health::healthy;
                        recovered = current_;
                    }
                }
            }
            changed_.notify_all();
            lock.unlock();
            if (died) listener_.session_dead(died, died->dead_status, died->dead_reason);
            if (recovered) listener_.session_healthy(recovered);
        }

        lock.lock();
        stream_ = nullptr;
        stream_context_ = nullptr;
        pending_.clear();
        const bool stopping = stopping_;
        std::shared_ptr<session> suspect;
        if (!stopping && current_ && current_->state == session::health::healthy) {
            current_->state = session::health::suspect;
            suspect = current_;
        }
        lock.unlock();
        const grpc::Status status = stream->Finish();
        if (stopping) return;
        if (suspect)
            listener_.session_suspect(suspect, fmt::format("keepalive stream to {} ended: {}", m.address,
                                                           status.ok() ? "closed by the server" : status.error_message()));
        if (status.error_code() != grpc::StatusCode::CANCELLED) {
            // CANCELLED is our own stall detection, which moved on already.
            conn_.fail_over(index);
            listener_.member_failed(index);
        }
        lock.lock();
        changed_.wait_until(lock.std(), steady_time(now_ns() + reconnect_pause_ns), [&]() DLOCK_REQUIRES(mutex_) { return stopping_; });
    }
}

void session_keeper::timer_loop() {
    plugin_kit::unique_lock lock(mutex_);
    while (!stopping_) {
        const int64_t now = now_ns();
        int64_t wake = forever_ns;
        std::shared_ptr<session> died, suspect;
        size_t stalled_member = SIZE_MAX;
        const int64_t stall = stall_ns();
        if (current_) {
            const std::shared_ptr<session> s = current_;
            const int64_t interval = s->ttl_s * 1'000'000'000 / 3;
            if (now >= s->deadline_ns) {
                died = kill_locked(DLOCK_UNAVAILABLE, fmt::format("no keepalive was confirmed within its {} s TTL", s->ttl_s));
            } else {
                wake = s->deadline_ns;
                if (stream_ && (kick_ || now >= last_send_ns_ + interval)) {
                    pb::LeaseKeepAliveRequest request;
                    request.set_id(s->id);
                    const int64_t sent = now_ns();
                    // A failed write means the stream broke: the reader reopens it (and kicks again).
                    if (stream_->Write(request)) pending_.push_back({s->id, sent});
                    last_send_ns_ = sent;
                    kick_ = false;
                }
                wake = std::min(wake, last_send_ns_ + interval);
                if (!pending_.empty()) {
                    const int64_t stalled_at = pending_.front().sent_ns + stall;
                    if (now >= stalled_at && stream_context_) {
                        // Unanswered too long: leave this member (the reader reopens on the next one).
                        stalled_member = stream_member_;
                        stream_context_->TryCancel();
                        pending_.clear();
                        if (s->state == session::health::healthy) {
                            s->state = session::health::suspect;
                            suspect = s;
                        }
                    } else {
                        wake = std::min(wake, stalled_at);
                    }
                }
            }
        }
        if (died || suspect || stalled_member != SIZE_MAX) {
            lock.unlock();
            if (stalled_member != SIZE_MAX) {
                conn_.fail_over(stalled_member);
                listener_.member_failed(stalled_member);
            }
            if (suspect)
                listener_.session_suspect(suspect, fmt::format("keepalive unanswered by {} for {} ms",
                                                               conn_.at(stalled_member).address, stall / ns_per_ms));
            if (died) listener_.session_dead(died, died->dead_status, died->dead_reason);
            lock.lock();
            continue;
        }
        // A kick matters only while a session lives: without one it would never be consumed and the
        // loop would spin holding the mutex (stop() then waits forever).
        if (kick_ && stream_ && current_) continue;
        if (wake == forever_ns) changed_.wait(lock.std());
        else changed_.wait_until(lock.std(), steady_time(wake));
    }
}

void session_keeper::stop() {
    std::shared_ptr<session> live;
    {
        plugin_kit::lock_guard lock(mutex_);
        if (stopping_ && !threads_started_) return;
        live = current_;
    }
    if (live) {
        // Revoked at close: every key of this client goes now, waking other clients' waiters at once.
        pb::LeaseRevokeRequest request;
        request.set_id(live->id);
        pb::LeaseRevokeResponse response;
        try {
            conn_.call("revoke the session lease",
                       [&](member& m, grpc::ClientContext& context) { return m.lease->LeaseRevoke(&context, request, &response); },
                       call_options{false, std::min<int64_t>(conn_.config().request_timeout_ms, 2000)});
        } catch (const failure&) {
            // Not revoked: it expires after its TTL, and its keys with it.
        }
    }
    {
        plugin_kit::lock_guard lock(mutex_);
        stopping_ = true;
        current_.reset();
        if (stream_context_) stream_context_->TryCancel();
        changed_.notify_all();
    }
    if (reader_.joinable()) reader_.join();
    if (timer_.joinable()) timer_.join();
    plugin_kit::lock_guard lock(mutex_);
    threads_started_ = false;
}

}  // namespace dlock::etcd
