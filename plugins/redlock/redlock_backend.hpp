// redlock_backend.hpp — what the `redlock` plugin's sources share: the client (dlock_backend), a
// hold (dlock_hold), a waiter's place in the nodes' queues, and the rounds that send one script to
// every node (redlock_rounds.cpp). The algorithm is described in redlock_plugin.cpp; the acquire
// is redlock_acquisition.cpp, the admin entry points (inspect, holders, list, break)
// redlock_admin.cpp. Internal to the plugin.
#pragma once

#include "queue_mode.hpp"
#include "redis_common.hpp"
#include "redlock_logic.hpp"
#include <dlock/plugin_kit/thread_safety.hpp>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace dlock::redlock {

using namespace dlock::redis_common;

struct node {
    endpoint where;
    std::unique_ptr<pool> connections;
};

}  // namespace dlock::redlock

struct dlock_backend {
    std::vector<dlock::redlock::node> nodes;
    size_t quorum = 0;
    dlock::redis_common::settings config;
    int64_t retry_delay_ms = 50;
    // Added to CLOCK_MONOTONIC (µs) it gives the waiters' queue scores: the nodes' median server
    // time as read at open (the client's wall clock when no node answered), so that the order of
    // arrivals does not follow a client's wall clock, which may be off or jump; measured again by
    // every refused round (its replies carry the nodes' TIME), since CLOCK_MONOTONIC stops while a
    // machine is suspended and the nodes' clocks may be stepped.
    std::atomic<int64_t> score_offset_us{0};
    dlock_plugin_host host{};
    std::atomic<bool> interrupted{false};
    // A thread inside wait_for_wakers. Every waker's change re-checks each one's condition on the
    // waker's thread and wakes only the threads whose condition it made true (and interrupt()
    // wakes all): with many threads waiting on one client, a message for one of them wakes that
    // one, not all of them (each to find it was not for it).
    // Its members are read and written under sleep_mutex (`ready` is called under it).
    struct sleeper {
        std::condition_variable cv;
        std::function<bool()> ready;
        bool fired = false;  // `ready` was found true: the wait is over
    };
    dlock::plugin_kit::mutex sleep_mutex;
    std::set<sleeper*> sleepers DLOCK_GUARDED_BY(sleep_mutex);
    // One subscriber per node, made on the first wait, then never changed until destruction: the
    // vector is read under waker_mutex, the subscribers it holds by any thread once it is made.
    // Declared after sleep_mutex/sleepers, which their callbacks use: destroyed before them.
    dlock::plugin_kit::mutex waker_mutex;
    std::vector<std::unique_ptr<dlock::redis_common::subscriber>> wakers DLOCK_GUARDED_BY(waker_mutex);
    // The waiting threads' channels the wakers watch: each stays watched for the client's lifetime,
    // so a thread's later waits cost no SUBSCRIBE and start listening.
    std::set<std::string> waiter_channels DLOCK_GUARDED_BY(waker_mutex);

    // How long a woken first waiter has to take the lock before it loses its place; how long a
    // queue entry outlives the latest time its waiter retries by (as the redis backend's).
    int64_t claim_ms() const { return std::max<int64_t>(500, config.command_timeout_ms); }
    int64_t entry_grace_ms() const { return std::max<int64_t>(1000, 2 * config.command_timeout_ms); }
    // What a reader kept from a free lock by writers' marks shortens them to (shared_acquire_script's
    // shorten_marks): no less than a live marked writer's longest interval between two marks while
    // the lock is free, its sleep on a claim and its next round, with the margin its own mark keeps
    // (a mark's keep time, min_holder_ttl + 2 x command_timeout + retry_delay, with a claim for the
    // holders' ttl). Cut to a claim, the mark was gone for ~1 ms + a round trip each cycle, and a
    // reader round landing then overtook the writer. A paused writer's mark still lapses within it.
    int64_t mark_refresh_ms() const { return claim_ms() + 2 * config.command_timeout_ms + retry_delay_ms; }
    // The channel prefix of the waiters' own channels; a waiter's is this + its queue member.
    std::string waiter_channel_prefix() const { return config.key_prefix + "redlock-waiter:"; }

    std::string names() const {
        std::string out;
        for (const auto& n : nodes) out += (out.empty() ? "" : ", ") + n.where.text();
        return out;
    }
};

namespace dlock::redlock {

// An exclusive acquisition's place in the nodes' waiter queues (redlock_acquire_script): the same
// member and score on every node, so that the nodes agree on who is first.
struct queue_place {
    queue_mode mode = queue_mode::barging;  // redlock_acquire_script's mode
    std::string member;  // the waiting thread's id: its channel's suffix too
    std::string score;   // the arrival time, µs: arrival_us + offset_us
    int64_t arrival_us = 0;  // CLOCK_MONOTONIC at the acquire's start
    int64_t offset_us = 0;   // the dlock_backend::score_offset_us the score was chosen with
    bool offset_checked = false;  // a refused round measured the offset since the score was chosen
    bool queues() const { return redis_common::queues(mode); }
};

}  // namespace dlock::redlock

struct dlock_hold {
    dlock::redis_common::lock_keys keys;
    // Its acquire and release scripts' keys on every node (acquire_keys, release_keys), built once.
    std::vector<std::string> acquire_keys, release_keys;
    bool shared = false;  // a shared hold: `value` is a member of the set at the lock key on each node
    std::string owner;    // the lease's owner token
    std::string value;    // what the winning round wrote: round_value(owner, round)
    dlock::redlock::queue_place place;  // where the acquisition queued (an exclusive one's stale entries go at release)
    int64_t valid_until_ns = 0;  // as last confirmed (grant, renewal)
    // When a release attempt that reached some node and was not answered by a quorum was sent (0:
    // none): a later attempt that finds the key gone answers RELEASED if it was sent while valid.
    int64_t release_in_doubt_sent_ns = 0;
};

namespace dlock::redlock {

// ---- redlock_rounds.cpp: one script on every node ---------------------------------------------

// The queue keys of a lock's exclusive waiters on redlock: not the `queue` of lock_keys, whose
// entries are the waiting writers' marks that stop new shared holders.
lock_keys fifo_keys(const lock_keys& lock);

// The scripts only redlock runs, which a new connection does not load (that is the scripts both
// plugins run): loaded once on `c`'s server so that their SHA1 is known and rounds send EVALSHA.
// A server that lacks them later (restarted) answers NOSCRIPT, and the round falls back to EVAL.
void learn_redlock_scripts(connection& c);

inline int64_t command_timeout_ns(const dlock_backend* b) { return b->config.command_timeout_ms * 1'000'000; }

struct node_replies {
    std::vector<reply_ptr> replies;  // null for nodes that did not answer in time
    int64_t sent_ns = 0;             // when the requests were sent (after every connection was borrowed)
    size_t reached = 0;              // nodes whose connection could be borrowed: the request went to them
};

// The same script on every node at once. The nodes' time budget `timeout_ns` starts once every
// connection is borrowed: reconnecting to a node that accepts connections but never answers (a
// paused server) takes up to its own timeouts and must not use up the healthy nodes' time.
// Nodes that do not answer in time get no reply and their connection is dropped.
node_replies on_all_nodes(dlock_backend* b, const script& s, const std::vector<std::string>& keys,
                          const std::vector<std::string>& args, int64_t timeout_ns, const enough_replies& enough = {});

// The scripts of a hold on every node. An exclusive hold is granted by redlock_acquire_script, in
// the order of the nodes' waiter queues (fifo_keys), and its release wakes the first waiter only.
// A shared hold is the redis backend's (shared_acquire_script in its fair-try mode, whose queue
// holds only the waiting writers' marks), its member on each node "<value>:<that node's token>"
// and found by `value` for release and renewal.
const script& acquire_script_for(bool shared);
std::vector<std::string> acquire_keys(const lock_keys& lock, bool shared);
std::vector<std::string> acquire_args(const dlock_backend* b, const std::string& value, int64_t ttl_ms, bool shared,
                                      const queue_place& place);
const script& release_script_for(bool shared);
std::vector<std::string> release_keys(const lock_keys& lock, bool shared);
// `giving_back`: a failed round's give-back, which puts the waiter back in the queue where its
// round was granted (and so dequeued it); else a holder's release, which drops the entries the
// nodes that refused its winning round still keep.
std::vector<std::string> release_args(const dlock_backend* b, const std::string& value, bool shared,
                                      const queue_place& place, bool giving_back);

struct round_result {
    bool acquired = false;
    size_t granted = 0, answered = 0;
    int64_t sent_ns = 0;
    int64_t min_holder_ttl_ms = -1;
    size_t held_shared = 0;           // nodes that refused because shared holders hold the lock
    size_t held = 0;                  // nodes that refused because somebody holds the lock there
    std::string error;                // the first error reply, if any
    int error_status = DLOCK_BACKEND;  // its status (DLOCK_PERMISSION for an ACL refusal)
    std::vector<int64_t> server_us;   // the TIME (µs) of each node that refused an exclusive round
    int64_t received_ns = 0;          // when the last reply was read
};

// One Redlock round of the hold `h` writing `value`. A node that has not answered when the round
// ends may still execute our SET later; if the round fails, the release of `value` is pipelined
// behind that SET on the same connection, so the node runs both, in order, whenever it wakes. That
// late release can only delete this round's value: the next round writes another.
round_result acquire_round(dlock_backend* b, const dlock_hold& h, const std::string& value, int64_t ttl_ms,
                           const queue_place& place);

// ---- the entry points that live outside redlock_plugin.cpp ---------------------------------------

// redlock_acquisition.cpp
int redlock_acquire(dlock_backend* b, const dlock_acquire_request* req, dlock_hold** out_hold, dlock_grant* grant,
                    dlock_plugin_error* error);
// redlock_admin.cpp
int redlock_inspect(dlock_backend* b, const char* name, dlock_lock_info* info, dlock_plugin_error* error);
int redlock_holders(dlock_backend* b, const char* name, int semaphore, dlock_holder_visitor visit, void* user_data,
                    dlock_plugin_error* error);
int redlock_list(dlock_backend* b, const char* prefix, dlock_holder_visitor visit, void* user_data, dlock_plugin_error* error);
int redlock_break(dlock_backend* b, const char* name, int semaphore, size_t* out_broken, dlock_plugin_error* error);

}  // namespace dlock::redlock
