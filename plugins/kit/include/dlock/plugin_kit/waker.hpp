// dlock/plugin_kit/waker.hpp — the waiters' side of a push channel: a server that can tell a client
// "something happened on channel C" (Redis pub/sub, PostgreSQL LISTEN/NOTIFY, ...), used by waiters
// to retry an acquire when a holder releases instead of polling.
//
// A waker is shared by every waiter of one client and fed by one thread that owns the transport (the
// subscription connection); that thread is the plugin's, in a class derived from waker. The rules
// both sides follow make a release impossible to miss:
//   - a waiter watches a channel BEFORE its retry, waits until the subscription is confirmed, reads
//     the channel's generation, retries, and then waits for the generation to change;
//   - every message heard on the channel bumps its generation, so a release published between the
//     retry and the wait is not slept through;
//   - a confirmed (re)subscription bumps it too: what was published before it was not heard;
//   - a lost connection marks every channel unconfirmed and bumps it: waiters retry at once, then
//     fall back to their own timed retry until the channel is confirmed again.
// A message may instead be a hint (hinted()): it bumps the channel's hint count, not its
// generation, so a waiter that asked for hints (wait_change with seen_hints) learns of it and may
// shorten its timed retry, and one that did not is not woken. (The redis plugins hint a queue's
// second waiter: retry when the first one's claim lapses.)
// The transport thread learns what to (un)subscribe from requests(), in the order waiters asked, and
// sleeps in poll() on wake_fd(), which becomes readable when there are requests or it must stop.
//
// Part of the plugin kit (dlock/plugin_kit.hpp): header-only C++17, Linux (eventfd).
#pragma once

#include <dlock/plugin_kit/clock.hpp>
#include <dlock/plugin_kit/support.hpp>

#include <dlock/plugin.h>

#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <sys/eventfd.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace dlock::plugin_kit {

class waker {
public:
    waker(const waker&) = delete;
    waker& operator=(const waker&) = delete;

    // ---- waiters (any thread) ----

    // Starts watching `channel`; the first watcher asks the transport to subscribe. Pair with unwatch().
    void watch(const std::string& channel) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (channels_[channel].watchers++ > 0) return;
            requests_.push_back({true, channel});
        }
        nudge();
    }
    // Stops watching; after the last watcher the transport is asked to unsubscribe.
    void unwatch(const std::string& channel) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto it = channels_.find(channel);
            if (it == channels_.end() || --it->second.watchers > 0) return;
            channels_.erase(it);
            requests_.push_back({false, channel});
        }
        nudge();
    }
    // Watches `channel` for a scope: watch() at construction, unwatch() at destruction (on every
    // path out of a wait, a throw included). `channel` must outlive it.
    class watching {
    public:
        watching(waker& w, const std::string& channel) : waker_(w), channel_(channel) { waker_.watch(channel_); }
        ~watching() { waker_.unwatch(channel_); }
        watching(const watching&) = delete;
        watching& operator=(const watching&) = delete;

    private:
        waker& waker_;
        const std::string& channel_;
    };
    // Waits until the channel's subscription is confirmed: true; false at `deadline_ns` (a deadline
    // in the past asks without waiting), on interrupt(), or while the connection is down (the
    // waiter then falls back to timed retries).
    bool wait_listening(const std::string& channel, int64_t deadline_ns) {
        std::unique_lock<std::mutex> lock(mutex_);
        auto listening = [&] {
            auto it = channels_.find(channel);
            return it != channels_.end() && it->second.listening;
        };
        auto done = [&] { return interrupted_ || listening(); };
        if (deadline_ns == forever_ns) changed_.wait(lock, done);
        else changed_.wait_until(lock, steady_time(deadline_ns), done);
        return !interrupted_ && listening();
    }
    // The channel's generation: read before a retry, handed to wait_change() after it.
    uint64_t generation(const std::string& channel) const {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = channels_.find(channel);
        return it == channels_.end() ? 0 : it->second.generation;
    }
    // The channel's hint count (see hinted()): read before waiting, handed to wait_change().
    uint64_t hints(const std::string& channel) const {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = channels_.find(channel);
        return it == channels_.end() ? 0 : it->second.hints;
    }
    // Waits until the channel's generation differs from `seen` (or, with `seen_hints`, its hint
    // count from that), `until_ns` passes, or interrupt().
    void wait_change(const std::string& channel, uint64_t seen, int64_t until_ns, const uint64_t* seen_hints = nullptr) {
        std::unique_lock<std::mutex> lock(mutex_);
        auto changed = [&] {
            auto it = channels_.find(channel);
            return interrupted_ || it == channels_.end() || it->second.generation != seen ||
                   (seen_hints && it->second.hints != *seen_hints);
        };
        if (until_ns == forever_ns) changed_.wait(lock, changed);
        else changed_.wait_until(lock, steady_time(until_ns), changed);
    }
    // Ends every wait now and later (the client is closing). Irreversible.
    void interrupt() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            interrupted_ = true;
        }
        changed_.notify_all();
    }

protected:
    // `backend` names the plugin in the failure thrown when the eventfd cannot be made.
    // `on_change` (may be empty) is called after every change a waiter could wait for (a
    // confirmation, a message, a lost connection), on the transport thread with no lock of the
    // waker held: for a caller that waits on several wakers at once under its own condition variable.
    explicit waker(const char* backend, std::function<void()> on_change = {}) : on_change_(std::move(on_change)) {
        wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (wake_fd_ < 0) fail(DLOCK_INTERNAL, std::string(backend) + " backend: eventfd failed: " + std::strerror(errno));
    }
    // The derived class stops and joins its transport thread in its own destructor, before this runs.
    ~waker() { ::close(wake_fd_); }

    // ---- the transport thread ----

    struct request {
        bool subscribe;  // else unsubscribe
        std::string channel;
    };
    // Readable when requests() has something or the transport should look at its stop flag.
    int wake_fd() const { return wake_fd_; }
    // Makes wake_fd() readable (e.g. to stop the transport thread).
    void nudge() {
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
    }
    // Empties wake_fd() after poll() said it is readable.
    void drain() {
        uint64_t value;
        [[maybe_unused]] ssize_t n = ::read(wake_fd_, &value, sizeof value);
    }
    // The (un)subscriptions asked for since the last call or resubscribe(), oldest first.
    std::vector<request> requests() {
        std::lock_guard<std::mutex> lock(mutex_);
        return std::exchange(requests_, {});
    }
    // For a new connection: every watched channel, and the pending requests dropped (the list is
    // the whole wanted state).
    std::vector<std::string> resubscribe() {
        std::lock_guard<std::mutex> lock(mutex_);
        requests_.clear();
        std::vector<std::string> names;
        for (const auto& [name, state] : channels_) names.push_back(name);
        return names;
    }
    // The server confirmed the channel's subscription: waiters may rely on hearing it, and retry
    // once (a release published before the confirmation was not heard).
    void confirmed(const std::string& channel) {
        update(channel, [](channel_state& s) {
            s.listening = true;
            ++s.generation;
        });
    }
    // The server confirmed that the channel is no longer subscribed (an unsubscribe it asked for).
    void unconfirmed(const std::string& channel) {
        update(channel, [](channel_state& s) { s.listening = false; });
    }
    // A message on the channel: its waiters retry.
    void heard(const std::string& channel) {
        update(channel, [](channel_state& s) { ++s.generation; });
    }
    // A hint on the channel: waiters that asked for hints re-plan their wait; nobody retries for it.
    void hinted(const std::string& channel) {
        update(channel, [](channel_state& s) { ++s.hints; });
    }
    // The connection is gone: nothing is heard until channels are confirmed again; every waiter
    // retries now, then on its own timer.
    void connection_lost() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            for (auto& [name, state] : channels_) {
                state.listening = false;
                ++state.generation;
            }
        }
        changed_.notify_all();
        if (on_change_) on_change_();
    }

private:
    struct channel_state {
        int watchers = 0;
        bool listening = false;  // the server confirmed the subscription on the current connection
        uint64_t generation = 0;
        uint64_t hints = 0;
    };
    // Applies `change` to a watched channel (nothing for one nobody watches any more) and wakes waiters.
    template <typename F>
    void update(const std::string& channel, F change) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto it = channels_.find(channel);
            if (it == channels_.end()) return;
            change(it->second);
        }
        changed_.notify_all();
        if (on_change_) on_change_();
    }

    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::map<std::string, channel_state> channels_;
    std::vector<request> requests_;
    bool interrupted_ = false;
    const std::function<void()> on_change_;
    int wake_fd_ = -1;
};

}  // namespace dlock::plugin_kit
