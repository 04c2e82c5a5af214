// The `redlock` backend: the algorithm of the Redis distributed-lock page over N independent
// Redis masters (N odd, >= 3).
//
// Acquire: the acquire script is sent to all N nodes at once (non-blocking sends, then one poll over
// every socket); the lock is ours when a quorum N/2+1 answered "set" and time remains:
// validity = ttl - elapsed - drift, drift = ttl/100 + 2 ms, all on CLOCK_MONOTONIC, so valid_until =
// send time + ttl - drift. Otherwise the owner-fenced release goes to ALL nodes, including those that
// did not answer (they may have set the key after all), and a waiter tries again (see Waiting).
// Every round writes its own value (owner token + round number), so a failed round's release that
// a slow node runs late cannot delete what a later round of the same acquisition set there.
// Renewal needs a quorum within the validity; release goes to every node. A fan-out's time budget
// starts once its connections are borrowed, so reconnecting to a paused node costs the healthy
// nodes none of theirs.
//
// No fencing token: each node's counter counts only the acquisitions that reached that node, and a
// majority's counters are not monotonic across holders (two successive quorums may share only one
// node, whose counter need not be the largest). The capability says so; the token is 0.
//
// Waiting: each node keeps a queue of exclusive waiters, and the nodes agree on its order: a waiter
// enqueues with the same score (its arrival time: the client's CLOCK_MONOTONIC set to the nodes'
// median server time at open) and the same member on every node (redlock_acquire_script).
// `fair: true`: a free node grants only to its first waiter, or to anyone while nobody queues;
// `fair: false`: to anyone. A release wakes only the first waiter of each node's queue, on the
// waiting thread's own channel (subscribed once per thread and client), so the server work of a
// handoff does not grow with the number of waiters. Mutual exclusion never rests on the queues:
// the quorum of lock keys decides; the queues only order the grants. A node missing a waiter's
// entry (it was down, or lost its data) gets it back with that waiter's next refused round, and a
// failed round's give-back restores the entry its grant removed, so heads that disagreed converge
// after one round; an entry lapses unless its waiter retries, and a woken first waiter has `claim`
// (command_timeout, at least 500 ms) to take the lock, so a dead waiter leaves no lasting hole;
// the waiter after it (its standby) is hinted at once and retries when that claim lapses, so a
// paused one (heard: its channel stays subscribed) holds the others up for its claim only. A
// waiter woken (or whose holders' keys expire) retries at once; only a round that failed as a
// split vote (some node granted, no quorum, and no quorum holds the lock) or with too few nodes
// answering is followed by a random pause of up to retry_delay, which a wake ends early. While
// fewer than a quorum of subscriptions stand it polls every retry_delay instead of trusting to
// hear the release. Shared waiters (and a writer held up by shared holders) listen on the name's
// channel, where every release publishes. Details: docs/backends/redis.md, "Waiting, FIFO and
// wake-ups on `redlock`".
#include "redis_common.hpp"
#include <dlock/plugin_kit/plugin_struct.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <cstring>
#include <limits>
#include <memory>
#include <netdb.h>
#include <poll.h>
#include <random>
#include <set>
#include <sys/socket.h>

using namespace dlock::redis_common;

namespace {

struct node {
    endpoint where;
    std::unique_ptr<pool> connections;
};

}  // namespace

struct dlock_backend {
    std::vector<node> nodes;
    size_t quorum = 0;
    settings config;
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
    struct sleeper {
        std::condition_variable cv;
        std::function<bool()> ready;
        bool fired = false;  // `ready` was found true: the wait is over
    };
    std::mutex sleep_mutex;
    std::set<sleeper*> sleepers;  // guarded by sleep_mutex
    // One subscriber per node, made on the first wait, then never changed until destruction.
    // Declared after sleep_mutex/sleepers, which their callbacks use: destroyed before them.
    std::mutex waker_mutex;
    std::vector<std::unique_ptr<subscriber>> wakers;
    // The waiting threads' channels the wakers watch: each stays watched for the client's lifetime,
    // so a thread's later waits cost no SUBSCRIBE and start listening.
    std::set<std::string> waiter_channels;

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

namespace {

// An exclusive acquisition's place in the nodes' waiter queues (redlock_acquire_script): the same
// member and score on every node, so that the nodes agree on who is first.
struct queue_place {
    int mode = 0;       // redlock_acquire_script's mode
    std::string member;  // the waiting thread's id: its channel's suffix too
    std::string score;   // the arrival time, µs: arrival_us + offset_us
    int64_t arrival_us = 0;  // CLOCK_MONOTONIC at the acquire's start
    int64_t offset_us = 0;   // the dlock_backend::score_offset_us the score was chosen with
    bool offset_checked = false;  // a refused round measured the offset since the score was chosen
    bool queues() const { return mode >= 2; }
};

}  // namespace

struct dlock_hold {
    lock_keys keys;
    // Its acquire and release scripts' keys on every node (acquire_keys, release_keys), built once.
    std::vector<std::string> acquire_keys, release_keys;
    bool shared = false;  // a shared hold: `value` is a member of the set at the lock key on each node
    std::string owner;    // the lease's owner token
    std::string value;    // what the winning round wrote: round_value(owner, round)
    queue_place place;    // where the acquisition queued (an exclusive one's stale entries go at release)
    int64_t valid_until_ns = 0;  // as last confirmed (grant, renewal)
    // When a release attempt that reached some node and was not answered by a quorum was sent (0:
    // none): a later attempt that finds the key gone answers RELEASED if it was sent while valid.
    int64_t release_in_doubt_sent_ns = 0;
};

namespace {

// The waiting thread's queue member: random, fixed for the thread's life. A thread waits for one
// lock at a time, so its channel (subscribed once per client) serves all its waits.
const std::string& waiting_thread_id() {
    thread_local const std::string id = [] {
        std::random_device seed;
        std::mt19937_64 rng{(uint64_t(seed()) << 32) ^ seed()};
        return fmt::format("{:016x}{:016x}", rng(), rng());
    }();
    return id;
}

// The queue keys of a lock's exclusive waiters on redlock: not the `queue` of lock_keys, whose
// entries are the waiting writers' marks that stop new shared holders.
lock_keys fifo_keys(const lock_keys& lock) {
    lock_keys out = lock;
    const std::string base = lock.lock.substr(0, lock.lock.size() - std::strlen(":lock"));
    out.queue = base + ":redlock-queue";
    out.queue_lapses = base + ":redlock-queue-lapses";
    return out;
}

// The scripts only redlock runs, which a new connection does not load (that is the scripts both
// plugins run): loaded once on `c`'s server so that their SHA1 is known and rounds send EVALSHA.
// A server that lacks them later (restarted) answers NOSCRIPT, and the round falls back to EVAL.
void learn_redlock_scripts(connection& c) {
    for (const script* sc : {&redlock_acquire_script, &redlock_release_script}) {
        if (!sc->sha1().empty()) continue;
        reply_ptr r = c.command({"SCRIPT", "LOAD", sc->source()});
        if (r->type == REDIS_REPLY_STRING) sc->learn_sha1(std::string(r->str, r->len));
    }
}

// Connections to every node for one round; a node whose connection cannot be borrowed has none.
struct round_connections {
    std::vector<std::unique_ptr<pool::borrowed>> borrowed;
    std::vector<connection*> conns;
    explicit round_connections(dlock_backend* b) : borrowed(b->nodes.size()), conns(b->nodes.size(), nullptr) {
        for (size_t i = 0; i < b->nodes.size(); ++i) {
            try {
                borrowed[i] = std::make_unique<pool::borrowed>(b->nodes[i].connections->borrow());
                if (!redlock_release_script.known_sha1()) learn_redlock_scripts(**borrowed[i]);
                conns[i] = &**borrowed[i];
            } catch (const failure&) {
                borrowed[i].reset();  // a connection a failed SCRIPT LOAD broke is dropped, not used
            }
        }
    }
};

// The value a round of an acquisition writes: every round its own, so that a failed round's release,
// executed late by a node that was slow to answer, can never delete the key a later round of the
// same acquisition set there. The owner token is 32 hex digits; the value is "<owner>.<round>".
std::string round_value(const std::string& owner, uint64_t round) { return owner + "." + std::to_string(round); }
// The owner token a round's value was written for: what precedes the first '.' (all of a value without one).
std::string owner_of(const std::string& value) { return value.substr(0, value.find('.')); }

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
                          const std::vector<std::string>& args, int64_t timeout_ns, const enough_replies& enough = {}) {
    round_connections round(b);
    script_call call(keys, args);
    std::vector<bool> late;
    node_replies out;
    for (const connection* c : round.conns) out.reached += c ? 1 : 0;
    out.sent_ns = now_ns();
    out.replies = fan_out(round.conns, call.command(s, false), out.sent_ns + timeout_ns, late, enough);
    std::vector<reply_ptr>& replies = out.replies;
    for (size_t i = 0; i < replies.size(); ++i) {
        if (late[i]) {
            round.conns[i]->mark_broken();  // mid-reply: never reused
        } else if (replies[i] && replies[i]->type == REDIS_REPLY_ERROR && std::strncmp(replies[i]->str, "NOSCRIPT", 8) == 0) {
            try {
                replies[i] = run_script(*round.conns[i], s, keys, args);  // falls back to EVAL
            } catch (const failure&) {
                replies[i].reset();
            }
        }
    }
    return out;
}

int64_t command_timeout_ns(const dlock_backend* b) { return b->config.command_timeout_ms * 1'000'000; }

const dlock_option_desc redlock_options[] = {
    {"endpoints", DLOCK_OPTION_STRING_LIST, DLOCK_OPTION_REQUIRED, DLOCK_DSN_HOSTS, nullptr,
     "The independent Redis masters, host:port each; an odd number, at least 3, all distinct."},
    {"username", DLOCK_OPTION_STRING, 0, DLOCK_DSN_USER, nullptr, "ACL user name on every node (Redis 6+)."},
    {"password", DLOCK_OPTION_STRING, DLOCK_OPTION_SECRET, DLOCK_DSN_PASSWORD, nullptr, "Password for AUTH on every node."},
    {"database", DLOCK_OPTION_INT, 0, DLOCK_DSN_PATH, "0", "Database index (SELECT) on every node."},
    {"key_prefix", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, "dlock:", "Prefix of every key dlock writes."},
    {"connect_timeout", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "200ms", "Timeout of a TCP connect to one node."},
    {"command_timeout", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "200ms",
     "How long a round waits for the nodes' replies; keep it well below the ttl."},
    {"retry_delay", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "50ms", "After a split vote a waiter retries after a random delay up to this long."},
    {"pool_size", DLOCK_OPTION_INT, 0, DLOCK_DSN_NONE, "8", "Connections kept per node."},
};


// Every address `e` resolves to, as "address:port".
std::set<std::string> addresses_of(const endpoint& e) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    std::set<std::string> out;
    if (getaddrinfo(e.host.c_str(), std::to_string(e.port).c_str(), &hints, &found) != 0) return out;
    for (addrinfo* a = found; a; a = a->ai_next) {
        char host[NI_MAXHOST];
        char port[NI_MAXSERV];
        if (getnameinfo(a->ai_addr, a->ai_addrlen, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) == 0)
            out.insert(std::string(host) + ":" + port);
    }
    freeaddrinfo(found);
    return out;
}

int redlock_create(const dlock_option_value* values, size_t count, const dlock_plugin_host* host, dlock_backend** out,
                   dlock_plugin_error* error) {
    return guarded(error, "redlock", [&] {
        auto b = std::make_unique<dlock_backend>();
        dlock::plugin_kit::copy_in(b->host, host, DLOCK_PLUGIN_HOST_V1_SIZE);  // the part its struct_size covers
        settings defaults;
        defaults.connect_timeout_ms = 200;  // a round must stay well inside the ttl
        defaults.command_timeout_ms = 200;
        b->config = read_settings(values, count, defaults, "redlock");
        if (const auto* v = find_option(values, count, "retry_delay")) b->retry_delay_ms = v->int_value;

        const auto* eps = find_option(values, count, "endpoints");
        const size_t n = eps ? eps->list_count : 0;
        if (n < 3) fail(DLOCK_CONFIG, fmt::format("redlock: `endpoints` lists {} node(s); Redlock needs at least 3 independent masters", n));
        if (n % 2 == 0)
            fail(DLOCK_CONFIG, fmt::format("redlock: `endpoints` lists {} nodes, an even number: a quorum of {} tolerates no more "
                                           "failures than {} nodes would; use an odd number",
                                           n, n / 2 + 1, n - 1));
        std::map<std::string, std::string> seen;  // address -> endpoint as written
        for (size_t i = 0; i < n; ++i) {
            const std::string written = eps->list_values[i];
            node nd{parse_endpoint(written), nullptr};
            std::set<std::string> addresses = addresses_of(nd.where);
            if (addresses.empty()) addresses.insert(nd.where.text());  // unresolvable: compare as written
            for (const auto& a : addresses) {
                auto [it, fresh] = seen.emplace(a, written);
                if (!fresh)
                    fail(DLOCK_CONFIG, fmt::format("redlock: endpoints `{}` and `{}` are the same server ({}); every node "
                                                   "must be an independent master",
                                                   it->second, written, a));
            }
            nd.connections = std::make_unique<pool>(nd.where, b->config);
            b->nodes.push_back(std::move(nd));
        }
        b->quorum = n / 2 + 1;
        // Reach every node now to report hazards; a node that is down is a warning, not an error:
        // Redlock works while a quorum is up. A node that answers but whose ACL user lacks a right
        // dlock needs, or that is older than Redis 5.0, is an error: that node would fail every
        // round until an administrator acts.
        size_t reachable = 0;
        std::vector<int64_t> offsets_us;  // each reachable node's server time - CLOCK_MONOTONIC
        for (auto& nd : b->nodes) {
            try {
                auto c = nd.connections->borrow();
                ++reachable;
                check_permissions(*c, b->config, /*waiter_queue=*/true);
                check_server_version(*c, b->config);
                learn_redlock_scripts(*c);
                const int64_t sent = now_ns();
                reply_ptr t = c->command({"TIME"});
                if (t->type == REDIS_REPLY_ARRAY && t->elements == 2 && t->element[0]->type == REDIS_REPLY_STRING) {
                    const int64_t server_us = std::strtoll(t->element[0]->str, nullptr, 10) * 1'000'000 +
                                              std::strtoll(t->element[1]->str, nullptr, 10);
                    offsets_us.push_back(server_us - (sent + now_ns()) / 2 / 1000);  // the reply's midpoint
                }
                for (const auto& w : hazard_warnings(*c))
                    if (b->host.log) b->host.log(b->host.context, 2, w.c_str());
            } catch (const failure& f) {
                if (f.status == DLOCK_CONFIG || f.status == DLOCK_PERMISSION || f.status == DLOCK_NOT_SUPPORTED) throw;
                if (b->host.log) b->host.log(b->host.context, 2, f.message.c_str());
            }
        }
        if (offsets_us.empty()) {
            offsets_us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::system_clock::now().time_since_epoch()).count() -
                                 now_ns() / 1000);
        }
        std::nth_element(offsets_us.begin(), offsets_us.begin() + offsets_us.size() / 2, offsets_us.end());
        b->score_offset_us = offsets_us[offsets_us.size() / 2];
        if (reachable < b->quorum && b->host.log)
            b->host.log(b->host.context, 2,
                        fmt::format("only {} of {} nodes are reachable; acquisitions fail until {} are", reachable, n, b->quorum).c_str());
        *out = b.release();
        return DLOCK_OK;
    });
}

void redlock_destroy(dlock_backend* b) { delete b; }

// SHARED: a reader's quorum and a writer's quorum share a node, whose script refuses the later of
// the two. BREAK: fenced by time, not by tokens (redlock_break). No SEMAPHORE: a per-node count is not safe (docs/backends/redlock.md). FAIR: exclusive
// waiters are granted in the order of the queues the nodes agree on (see Waiting above).
uint64_t redlock_capabilities(dlock_backend*) {
    return DLOCK_CAP_PUSH_WAIT | DLOCK_CAP_TTL | DLOCK_CAP_QUORUM | DLOCK_CAP_SHARED | DLOCK_CAP_LIST | DLOCK_CAP_BREAK |
           DLOCK_CAP_FAIR;
}

void redlock_interrupt(dlock_backend* b) {
    {
        std::lock_guard<std::mutex> lock(b->sleep_mutex);
        b->interrupted = true;
        for (auto* s : b->sleepers) s->cv.notify_one();
    }
    std::lock_guard<std::mutex> lock(b->waker_mutex);
    for (const auto& s : b->wakers) s->interrupt();
}

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

// One Redlock round writing `value`. A node that has not answered when the round ends may still
// execute our SET later; if the round fails, the release of `value` is pipelined behind that SET on
// the same connection, so the node runs both, in order, whenever it wakes. That late release can
// only delete this round's value: the next round writes another.
// The scripts of a hold on every node. An exclusive hold is granted by redlock_acquire_script, in
// the order of the nodes' waiter queues (fifo_keys), and its release wakes the first waiter only.
// A shared hold is the redis backend's (shared_acquire_script in its fair-try mode, whose queue
// holds only the waiting writers' marks), its member on each node "<value>:<that node's token>"
// and found by `value` for release and renewal.
const script& acquire_script_for(bool shared) { return shared ? shared_acquire_script : redlock_acquire_script; }
std::vector<std::string> acquire_keys(const lock_keys& lock, bool shared) {
    if (shared) return {lock.lock, lock.fence, lock.queue, lock.queue_lapses};
    const lock_keys fifo = fifo_keys(lock);
    return {fifo.lock, fifo.fence, fifo.queue, fifo.queue_lapses};
}
std::vector<std::string> acquire_args(const dlock_backend* b, const std::string& value, int64_t ttl_ms, bool shared,
                                      const queue_place& place) {
    // Mode 1 (a fair try): refused while a waiting writer marks a node (mark_waiting_writer_script);
    // refused so while the lock is free there, it shortens the marks to a mark refresh (ARGV[5]).
    // 'untokened': no fencing token, so no fence key is bumped.
    if (shared) return {value, std::to_string(ttl_ms), "1", "0", std::to_string(b->mark_refresh_ms()), "", "untokened"};
    return {value, std::to_string(ttl_ms), place.member, place.score, std::to_string(place.mode),
            std::to_string(b->entry_grace_ms()), std::to_string(b->claim_ms()), b->waiter_channel_prefix()};
}
const script& release_script_for(bool shared) { return shared ? shared_release_script : redlock_release_script; }
std::vector<std::string> release_keys(const lock_keys& lock, bool shared) {
    if (shared) return {lock.lock, lock.fence, lock.queue, lock.queue_lapses, lock.channel};
    const lock_keys fifo = fifo_keys(lock);
    return {fifo.lock, fifo.fence, fifo.queue, fifo.queue_lapses, fifo.channel};
}
// `giving_back`: a failed round's give-back, which puts the waiter back in the queue where its
// round was granted (and so dequeued it); else a holder's release, which drops the entries the
// nodes that refused its winning round still keep.
std::vector<std::string> release_args(const dlock_backend* b, const std::string& value, bool shared,
                                      const queue_place& place, bool giving_back) {
    // No waiter channel to wake (the nodes' queues hold only waiting writers' marks); the member
    // found by value.
    if (shared) return {value, "0", "", ""};
    const bool queued = place.queues();
    return {value, std::to_string(b->claim_ms()), b->waiter_channel_prefix(), queued ? place.member : "",
            queued ? place.score : "0", std::to_string(b->entry_grace_ms()), giving_back ? "give back" : "release"};
}

// The replies a fan-out stopped waiting for once it was decided (owed by their connections: a
// round's request is the last one sent on its connection, so its reply is the last one owed), read
// until `until_ns`: replies[i] gets node i's reply if it came in time, and stays null otherwise (the
// connection still owes it). `late` nodes (past the fan-out's deadline) are left alone.
void collect_owed_replies(std::vector<connection*>& conns, const std::vector<bool>& late, std::vector<reply_ptr>& replies,
                          int64_t until_ns) {
    for (;;) {
        std::vector<pollfd> fds;
        std::vector<size_t> index;
        for (size_t i = 0; i < conns.size(); ++i) {
            connection* c = conns[i];
            if (replies[i] || late[i] || !c || c->broken() || c->owed_replies() == 0) continue;
            void* raw = nullptr;
            while (c->owed_replies() > 0 && redisGetReplyFromReader(c->context(), &raw) == REDIS_OK && raw) {
                reply_ptr r(static_cast<redisReply*>(raw));
                raw = nullptr;
                c->settle_owed_reply();
                if (c->owed_replies() == 0) replies[i] = std::move(r);
            }
            if (replies[i]) continue;
            fds.push_back({c->context()->fd, POLLIN, 0});
            index.push_back(i);
        }
        const int64_t left_us = (until_ns - now_ns()) / 1000;
        if (fds.empty() || left_us <= 0) return;
        const timespec wait{time_t(left_us / 1'000'000), long(left_us % 1'000'000) * 1000};
        const int ready = ppoll(fds.data(), fds.size(), &wait, nullptr);
        if (ready < 0 && errno != EINTR) return;
        for (size_t k = 0; k < fds.size(); ++k)
            if (fds[k].revents && redisBufferRead(conns[index[k]]->context()) != REDIS_OK) conns[index[k]]->mark_broken();
    }
}

round_result acquire_round(dlock_backend* b, const dlock_hold& h, const std::string& value, int64_t ttl_ms,
                           const queue_place& place) {
    round_result r;
    round_connections round(b);
    const bool shared = h.shared;
    const std::vector<std::string>& keys = h.acquire_keys;
    const std::vector<std::string> args = acquire_args(b, value, ttl_ms, shared, place);
    const script& acquire = acquire_script_for(shared);
    script_call call(keys, args);
    std::vector<bool> late;
    // The round is decided by the quorum-th grant, or once a quorum can no longer be reached.
    const size_t nodes = b->nodes.size();
    const enough_replies decided = [&](const std::vector<reply_ptr>& so_far) {
        size_t granted = 0, refused = 0;
        for (const auto& rep : so_far) {
            if (!rep) continue;
            if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[0]->integer == 1) ++granted;
            else if (!(rep->type == REDIS_REPLY_ERROR && std::strncmp(rep->str, "NOSCRIPT", 8) == 0)) ++refused;
        }
        return granted >= b->quorum || refused > nodes - b->quorum;
    };
    r.sent_ns = now_ns();
    const int64_t deadline_ns = r.sent_ns + b->config.command_timeout_ms * 1'000'000;
    std::vector<reply_ptr> replies = fan_out(round.conns, call.command(acquire, false), deadline_ns, late, decided);
    // Refused by a quorum: the round failed, and what it got is given back below on every node that
    // did not refuse. The nodes that had not answered yet are usually only a moment behind, and
    // most refuse too: their replies are awaited a while longer (as long again as the round took,
    // at least 1 ms, within its deadline), so that a node that refused costs no give-back. (A
    // waiter's wake that comes meanwhile is not missed: it counts from before the round.)
    size_t granted_so_far = 0;
    for (const auto& rep : replies)
        if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2 && rep->element[0]->integer == 1) ++granted_so_far;
    if (granted_so_far < b->quorum) {
        const int64_t decided_ns = now_ns();
        collect_owed_replies(round.conns, late, replies,
                             std::min(deadline_ns, decided_ns + std::max<int64_t>(decided_ns - r.sent_ns, 1'000'000)));
    }
    for (size_t i = 0; i < replies.size(); ++i) {
        const redisReply* rep = replies[i].get();
        if (rep && rep->type == REDIS_REPLY_ERROR && std::strncmp(rep->str, "NOSCRIPT", 8) == 0) {
            try {
                replies[i] = run_script(*round.conns[i], acquire, keys, args);
            } catch (const failure& f) {
                if (r.error.empty()) {
                    r.error = f.message;
                    r.error_status = f.status == DLOCK_PERMISSION ? DLOCK_PERMISSION : DLOCK_BACKEND;
                }
                replies[i].reset();
            }
            rep = replies[i].get();
        }
        if (!rep) continue;
        if (rep->type == REDIS_REPLY_ERROR) {
            if (r.error.empty()) {
                const failure f = classify_error_reply(b->nodes[i].where.text(), rep->str);
                r.error = f.message;
                r.error_status = f.status == DLOCK_PERMISSION ? DLOCK_PERMISSION : DLOCK_BACKEND;
            }
            continue;
        }
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 2) continue;
        ++r.answered;
        if (rep->elements > 2 && rep->element[0]->integer == 0 && rep->element[2]->integer == 1) ++r.held_shared;
        // redlock_acquire_script says whether the key is held in its fourth element; the shared
        // script's refusals are all "held" (by a writer, or a writer's mark stops this reader).
        if (rep->element[0]->integer == 0 && (rep->elements < 4 || rep->element[3]->integer == 1)) ++r.held;
        if (rep->element[0]->integer == 0 && rep->elements > 4 && rep->element[4]->type == REDIS_REPLY_INTEGER)
            r.server_us.push_back(rep->element[4]->integer);
        if (rep->element[0]->integer == 1) {
            ++r.granted;
        } else if (rep->element[1]->integer >= 0) {
            r.min_holder_ttl_ms = r.min_holder_ttl_ms < 0 ? rep->element[1]->integer
                                                          : std::min<int64_t>(r.min_holder_ttl_ms, rep->element[1]->integer);
        }
    }
    r.received_ns = now_ns();
    const int64_t validity_ns = ttl_ms * 1'000'000 - (r.received_ns - r.sent_ns) - drift_ns(ttl_ms);
    r.acquired = r.granted >= b->quorum && validity_ns > 0;
    if (!r.acquired) {
        // Give back what was granted: the owner-fenced release goes to every node of the round
        // that did not refuse (a refusal set nothing: the script is atomic), pipelined on the same
        // connection behind the acquire (so a node that has not answered yet runs SET, then
        // release, in that order) without waiting for the replies.
        const std::vector<std::string> give_back_args = release_args(b, value, shared, place, true);
        script_call give_back(h.release_keys, give_back_args);
        const command_line& give_back_line = give_back.command(release_script_for(shared), true);
        for (size_t i = 0; i < round.conns.size(); ++i) {
            const redisReply* rep = replies[i].get();
            const bool refused = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2 && rep->element[0]->integer == 0;
            if (round.conns[i] && !round.conns[i]->broken() && !refused) pipeline(*round.conns[i], give_back_line);
        }
    }
    for (size_t i = 0; i < late.size(); ++i)
        if (late[i]) round.conns[i]->mark_broken();
    return r;
}

using waker_set = std::vector<std::unique_ptr<subscriber>>;

// One subscriber per node, made on the first wait. A holder's release publishes on every node where
// its key was, a quorum while the lease held; a waiter listening on a quorum therefore hears it on
// at least one node, whichever minority of nodes is down, paused or lost its key.
const waker_set& wakers_for(dlock_backend* b) {
    std::lock_guard<std::mutex> lock(b->waker_mutex);
    if (b->wakers.empty()) {
        waker_set made;
        for (const auto& nd : b->nodes)
            made.push_back(std::make_unique<subscriber>(nd.where, b->config, [b] {
                std::lock_guard<std::mutex> wake(b->sleep_mutex);
                for (auto* s : b->sleepers)
                    if (!s->fired && s->ready()) {
                        s->fired = true;
                        s->cv.notify_one();
                    }
            }));
        b->wakers = std::move(made);
    }
    return b->wakers;
}

// Messages heard on `channel` over every node, each lost subscription counted as one: it changes
// whenever a release may have been missed.
uint64_t heard(const waker_set& wakers, const std::string& channel) {
    uint64_t sum = 0;
    for (const auto& s : wakers) sum += s->generation(channel);
    return sum;
}

// Nodes whose subscription to `channel` is confirmed now (a deadline in the past only asks).
size_t listening(const waker_set& wakers, const std::string& channel) {
    size_t n = 0;
    for (const auto& s : wakers) n += s->wait_listening(channel, 0) ? 1 : 0;
    return n;
}

// Waits until `done()`, interrupt() or `until_ns`; every waker's change re-checks `done` (on the
// waker's thread, under sleep_mutex). Returns after the first time `done()` was found true, so a
// condition that records something when it turns true ends the wait once.
template <typename Done>
void wait_for_wakers(dlock_backend* b, int64_t until_ns, Done&& done) {
    std::unique_lock<std::mutex> lock(b->sleep_mutex);
    if (b->interrupted.load() || done()) return;
    dlock_backend::sleeper me;
    me.ready = [&] { return done(); };
    b->sleepers.insert(&me);
    const auto until = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(until_ns));
    while (!me.fired && !b->interrupted.load())
        if (me.cv.wait_until(lock, until) == std::cv_status::timeout) break;
    b->sleepers.erase(&me);
}

int redlock_acquire(dlock_backend* b, const dlock_acquire_request* req, dlock_hold** out_hold, dlock_grant* grant,
                    dlock_plugin_error* error) {
    return guarded(error, "redlock", [&] {
        if (b->interrupted) fail(DLOCK_CANCELLED, "redlock: client is closing");
        // Validity is ttl - elapsed - drift: a ttl the drift alone uses up could never be granted,
        // and waiting for it would only end in a misleading TIMEOUT.
        if (req->ttl_ms * 1'000'000 <= drift_ns(req->ttl_ms))
            fail(DLOCK_INVALID_ARGUMENT, fmt::format("redlock: ttl {} ms leaves no validity after the clock-drift allowance "
                                                     "({} ms = ttl/100 + 2 ms); use a ttl of at least several round trips",
                                                     req->ttl_ms, drift_ns(req->ttl_ms) / 1'000'000.0));
        auto h = std::make_unique<dlock_hold>();
        if (DLOCK_STRUCT_COVERS(req, dlock_acquire_request, permits) && req->kind != DLOCK_HOLD_EXCLUSIVE) {
            if (req->kind != DLOCK_HOLD_SHARED)
                fail(DLOCK_NOT_SUPPORTED, "redlock: no semaphores — a per-node permit count is not safe (docs/backends/redlock.md)");
            h->shared = true;
        }
        h->keys = keys_for(b->config.key_prefix, req->name);
        h->acquire_keys = acquire_keys(h->keys, h->shared);
        h->release_keys = release_keys(h->keys, h->shared);
        h->owner = req->owner;
        thread_local std::mt19937_64 rng{std::random_device{}()};

        // An exclusive acquisition's place in the nodes' queues (none for a shared one).
        queue_place place;
        if (!h->shared) {
            const bool waits = req->deadline_ns != 0;
            place.mode = req->fair ? (waits ? 2 : 1) : (waits ? 3 : 0);
            place.member = waiting_thread_id();
            place.arrival_us = now_ns() / 1000;
            place.offset_us = b->score_offset_us.load();
            place.score = std::to_string(place.arrival_us + place.offset_us);
        }
        // What wakes this waiter: an exclusive one its thread's own channel (the release that makes
        // it first in a node's queue publishes there), a shared one the name's channel, on which
        // every release publishes; an exclusive one held up by shared holders listens there too.
        const std::string own_channel = b->waiter_channel_prefix() + place.member;
        const std::string& broadcast = h->keys.channel;
        const std::string& channel = h->shared ? broadcast : own_channel;

        const waker_set* wakers = nullptr;
        bool broadcast_watched = false;
        struct unwatch_guard {
            const waker_set*& wakers;
            const bool& watched;
            const std::string& channel;
            ~unwatch_guard() {
                if (wakers && watched)
                    for (const auto& s : *wakers) s->unwatch(channel);
            }
        } guard{wakers, broadcast_watched, broadcast};
        // The thread's own channel stays watched once it is: wait on it from the first round. An
        // exclusive acquire that may wait subscribes it before its first round (once per thread and
        // client), so that a round refused while a quorum listens needs no second round to cover a
        // release it could have missed while subscribing.
        if (!h->shared && place.queues()) {
            wakers = &wakers_for(b);
            bool fresh = false;
            {
                std::lock_guard<std::mutex> lock(b->waker_mutex);
                fresh = b->waiter_channels.insert(own_channel).second;
                if (fresh)
                    for (const auto& s : *wakers) s->watch(own_channel);
            }
            if (fresh)
                wait_for_wakers(b, std::min(req->deadline_ns, now_ns() + command_timeout_ns(b)),
                                [&] { return listening(*wakers, channel) >= b->quorum; });
        } else if (!h->shared) {
            std::lock_guard<std::mutex> lock(b->waker_mutex);
            if (b->waiter_channels.count(own_channel)) wakers = &b->wakers;
        }
        const auto watch_broadcast = [&] {
            if (broadcast_watched) return;
            for (const auto& s : *wakers) s->watch(broadcast);
            broadcast_watched = true;
        };
        const auto heard_since = [&] {
            return heard(*wakers, channel) + (broadcast_watched && !h->shared ? heard(*wakers, broadcast) : 0);
        };
        // What an exclusive waiter heard on its own channel, node by node: a release wakes it on
        // each node as that node runs the release, and its round can win only once a quorum of
        // nodes did (a node still holding the old holder's key refuses it).
        const auto own_heard = [&] {
            std::vector<uint64_t> per_node;
            if (wakers)
                for (const auto& s : *wakers) per_node.push_back(s->generation(own_channel));
            return per_node;
        };
        // Hints on its own channel (standby_message), summed over the nodes: it is the standby of
        // a first waiter just woken.
        const auto own_hints = [&] {
            uint64_t sum = 0;
            if (wakers)
                for (const auto& s : *wakers) sum += s->hints(own_channel);
            return sum;
        };
        const auto nodes_heard_since = [&](const std::vector<uint64_t>& seen_own) {
            size_t n = 0;
            for (size_t i = 0; i < seen_own.size(); ++i) n += (*wakers)[i]->generation(own_channel) != seen_own[i] ? 1 : 0;
            return n;
        };

        // A waiter queued by a round leaves the queues unless it got the lock (a timeout, an error):
        // best effort, as its entries lapse anyway; and the waiter after it is woken if the lock is
        // free. Not when the client is closing, which must not wait on the servers.
        struct leave_guard {
            dlock_backend* b;
            const dlock_hold* h;
            const queue_place& place;
            bool queued = false;
            ~leave_guard() {
                if (!queued || b->interrupted) return;
                try {
                    const lock_keys fifo = fifo_keys(h->keys);
                    on_all_nodes(b, leave_queue_script, {fifo.lock, fifo.fence, fifo.queue, fifo.queue_lapses},
                                 {place.member, std::to_string(b->claim_ms()), b->waiter_channel_prefix(), "lock"},
                                 command_timeout_ns(b));
                } catch (...) {  // a destructor: nothing escapes
                }
            }
        } leave{b, h.get(), place};

        // A waiting exclusive acquirer marks itself on the nodes so that new shared holders wait
        // behind it (writer preference), and unmarks itself however the wait ends.
        struct writer_mark {
            dlock_backend* b;
            const dlock_hold& h;
            bool marked = false;
            void mark(int64_t keep_ms) {
                marked = true;
                on_all_nodes(b, mark_waiting_writer_script, acquire_keys(h.keys, true), {h.owner, std::to_string(keep_ms), "mark"},
                             command_timeout_ns(b));
            }
            ~writer_mark() {
                if (!marked || b->interrupted) return;
                try {
                    on_all_nodes(b, mark_waiting_writer_script, acquire_keys(h.keys, true), {h.owner, "0", "unmark"},
                                 command_timeout_ns(b));
                } catch (...) {  // a destructor: nothing escapes; the mark lapses anyway
                }
            }
        } writer{b, *h};

        for (uint64_t round = 1;; ++round) {
            const uint64_t seen = wakers ? heard_since() : 0;  // before the round
            const std::vector<uint64_t> seen_own = h->shared ? std::vector<uint64_t>() : own_heard();
            uint64_t seen_hints = h->shared ? 0 : own_hints();
            const uint64_t seen_broadcast = wakers && broadcast_watched && !h->shared ? heard(*wakers, broadcast) : 0;
            const std::string value = round_value(h->owner, round);
            const round_result r = acquire_round(b, *h, value, req->ttl_ms, place);
            if (r.acquired) {
                h->value = value;
                h->place = place;
                leave.queued = false;  // the grants dequeued it; its release drops what other nodes keep
                if (writer.marked) {  // unmarked before the hold is handed out (h is moved below)
                    writer.marked = false;
                    try {
                        on_all_nodes(b, mark_waiting_writer_script, acquire_keys(h->keys, true), {h->owner, "0", "unmark"},
                                     command_timeout_ns(b));
                    } catch (const failure&) {
                    }
                }
                grant->fencing_token = 0;
                grant->valid_until_ns = r.sent_ns + req->ttl_ms * 1'000'000 - drift_ns(req->ttl_ms);
                h->valid_until_ns = grant->valid_until_ns;
                grant->ttl_ms = req->ttl_ms;
                *out_hold = h.release();
                return DLOCK_OK;
            }
            if (place.queues()) leave.queued = true;
            const int64_t now = now_ns();
            if (req->deadline_ns == 0 || now >= req->deadline_ns) {
                if (!r.error.empty() && r.answered < b->quorum) fail(r.error_status, r.error);
                if (r.answered < b->quorum)
                    fail(DLOCK_UNAVAILABLE, fmt::format("redlock: only {} of {} nodes answered ({}); a quorum of {} is needed",
                                                        r.answered, b->nodes.size(), b->names(), b->quorum));
                fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held (granted by {} of {} nodes, quorum {})", req->name,
                                                r.granted, b->nodes.size(), b->quorum));
            }
            if (b->interrupted) fail(DLOCK_CANCELLED, "redlock: client is closing");
            // The first refused round measures the offset the score was chosen with (the nodes'
            // TIME in its replies): if it moved (this machine was suspended, a node's clock was
            // stepped), the score is chosen again and the next round, at once, moves the entries
            // there. A score stands wrong for one round at most.
            if (place.queues() && !place.offset_checked) {
                if (const auto measured = measured_score_offset_us(r.server_us, r.sent_ns, r.received_ns)) {
                    place.offset_checked = true;
                    b->score_offset_us = *measured;
                    if (score_offset_moved(place.offset_us, *measured, r.received_ns - r.sent_ns)) {
                        place.offset_us = *measured;
                        place.score = std::to_string(place.arrival_us + place.offset_us);
                        continue;
                    }
                }
            }
            // Marked again by every refused round once marked: a reader kept from a free lock by the
            // mark shortens it to a mark refresh (shared_acquire_script), and this round, run on hearing the
            // release the reader heard, or when its sleep (shorter than the mark) ends, keeps it.
            if (!h->shared && (r.held_shared > 0 || writer.marked))
                writer.mark(std::max<int64_t>(r.min_holder_ttl_ms, 0) + 2 * b->config.command_timeout_ms + b->retry_delay_ms);
            if (!wakers) {
                wakers = &wakers_for(b);
                if (h->shared) {
                    watch_broadcast();
                } else {
                    std::lock_guard<std::mutex> lock(b->waker_mutex);
                    if (b->waiter_channels.insert(own_channel).second)
                        for (const auto& s : *wakers) s->watch(own_channel);
                }
                // Retry once a quorum listens: a release after that cannot go unheard.
                wait_for_wakers(b, std::min(req->deadline_ns, now_ns() + command_timeout_ns(b)),
                                [&] { return listening(*wakers, channel) >= b->quorum; });
                continue;
            }
            // Shared holders publish only on the name's channel when they leave.
            if (!h->shared && r.held_shared > 0 && !broadcast_watched) {
                watch_broadcast();
                continue;  // a release before the subscription could have gone unheard
            }
            // A split vote (some node granted, yet no quorum, and no quorum holds the lock) or too few
            // nodes answering: no release is coming, so pause a random part of retry_delay (at least
            // 1 ms: never a spin), so that waiters that split the vote do not split the next one in
            // lockstep as well. (The round's give-back put this waiter back in the queues; the
            // refusing nodes queued it.) A wake ends the pause: a waiter's give-back wakes the first
            // waiter where the giver was not first, and that waiter then retries at once.
            if ((r.granted > 0 && r.held < b->quorum) || r.answered < b->quorum) {
                const int64_t jitter_ns = int64_t(rng() % uint64_t(std::max<int64_t>(b->retry_delay_ms, 1))) * 1'000'000;
                wait_for_wakers(b, std::min(now + std::max<int64_t>(jitter_ns, 1'000'000), req->deadline_ns),
                                [&] { return heard_since() != seen; });
                continue;
            }
            // Held, or free but promised to waiters queued first: wait for the release that wakes
            // this waiter (a message), the holders' expiry or the first waiter's claim lapsing, or
            // the retry time; then retry at once.
            int64_t until = r.min_holder_ttl_ms >= 0 ? now + (r.min_holder_ttl_ms + 1) * 1'000'000
                                                     : now + b->retry_delay_ms * 1'000'000;
            // Fewer than a quorum listening could miss the release: poll until they are back.
            if (listening(*wakers, channel) < b->quorum) until = std::min(until, now + b->retry_delay_ms * 1'000'000);
            until = std::min(until, req->deadline_ns);
            if (h->shared || seen_own.size() != b->nodes.size()) {
                wait_for_wakers(b, until, [&] { return heard_since() != seen; });
                continue;
            }
            // An exclusive waiter retries once a quorum of nodes woke it (or the name's channel
            // spoke: shared holders left): retrying at the first node's message would mostly be
            // refused by the nodes that have not run the release yet, a round and its give-backs
            // for nothing. Woken by fewer nodes, it retries after retry_delay at most (the others
            // may never wake it: its entry lost there, or a give-back that woke it on some nodes).
            // A hint (it is the standby of a first waiter just woken) makes it retry when that
            // one's claim lapses, unless woken first: the first waiter may never come (paused).
            int64_t first_heard_ns = 0;
            for (;;) {
                const int64_t limit = first_heard_ns ? std::min(until, first_heard_ns + b->retry_delay_ms * 1'000'000) : until;
                bool decided = false, hinted = false;
                wait_for_wakers(b, limit, [&] {
                    if (broadcast_watched && heard(*wakers, broadcast) != seen_broadcast) return decided = true;
                    const size_t n = nodes_heard_since(seen_own);
                    if (n >= b->quorum) return decided = true;
                    if (n > 0 && first_heard_ns == 0) {
                        first_heard_ns = now_ns();
                        return true;  // waits again, until a quorum or retry_delay from now
                    }
                    if (own_hints() != seen_hints) return hinted = true;
                    return false;
                });
                if (decided || b->interrupted) break;
                if (hinted) {
                    seen_hints = own_hints();
                    until = std::min(until, now_ns() + (b->claim_ms() + 1) * 1'000'000);
                    continue;
                }
                if (now_ns() >= limit) break;
            }
        }
    });
}

// Each node's answer to the release script: 1 released, 0 gone (no key, or no member of ours),
// -1 another holder's value or string, -2 our own expired member still there, -3 a break's
// tombstone. -2 and -3 prove the earlier attempt of this release did not run on that node.
struct release_tally {
    size_t released = 0, gone = 0, other = 0, proof = 0;
    explicit release_tally(const std::vector<reply_ptr>& replies) {
        for (const auto& r : replies) {
            if (!r || r->type != REDIS_REPLY_INTEGER) continue;
            (r->integer == 1 ? released : r->integer == 0 ? gone : r->integer == -1 ? other : proof)++;
        }
    }
};

int redlock_release(dlock_backend* b, dlock_hold* h, dlock_plugin_error* error) {
    return guarded(error, "redlock", [&] {
        // An earlier attempt of this release, sent while the lease was valid, went to the nodes and
        // was not answered by a quorum (UNKNOWN): where our key is now found gone or another
        // holder's, it may be what removed it (a retry after UNKNOWN; the other holder a waiter it
        // woke).
        const bool in_doubt = h->release_in_doubt_sent_ns != 0 && h->release_in_doubt_sent_ns < h->valid_until_ns;
        // Nodes that, answering so, leave no quorum for the other outcome.
        const size_t blocking = b->nodes.size() - b->quorum + 1;
        // RELEASED: our key removed by this attempt on a quorum; in doubt, removed now, gone or
        // another holder's on a quorum, as on etcd, zookeeper and sql (docs/guarantees.md,
        // "Releases in doubt"): only proof that the earlier attempt did not run (our own expired
        // member, a tombstone) never counts.
        const auto released_on_quorum = [&](const release_tally& t) {
            return (in_doubt ? t.released + t.gone + t.other : t.released) >= b->quorum;
        };
        // LOST: in doubt, proof that the earlier attempt did not run on enough nodes that no quorum
        // can have released; not in doubt, our key not removed by this attempt on that many.
        const auto lost_on_quorum = [&](const release_tally& t) {
            return (in_doubt ? t.proof : t.gone + t.other + t.proof) >= blocking;
        };
        // A quorum decides it either way; the other nodes' replies are read later.
        const enough_replies decided = [&](const std::vector<reply_ptr>& so_far) {
            const release_tally t(so_far);
            return released_on_quorum(t) || lost_on_quorum(t);
        };
        const node_replies sent = on_all_nodes(b, release_script_for(h->shared), h->release_keys,
                                               release_args(b, h->value, h->shared, h->place, false), command_timeout_ns(b),
                                               decided);
        const release_tally t(sent.replies);
        if (released_on_quorum(t)) return DLOCK_OK;
        if (lost_on_quorum(t)) {
            copy_message(error, fmt::format("redlock: our key was gone from {} of {} nodes at release, another holder's on {}, "
                                            "our expired hold or a tombstone on {}; the lease had been lost",
                                            t.gone, b->nodes.size(), t.other, t.proof));
            return DLOCK_LOST;
        }
        // Some node got the request and did not answer: the release may have run there.
        const size_t answered = t.released + t.gone + t.other + t.proof;
        if (sent.reached > answered && h->release_in_doubt_sent_ns == 0) h->release_in_doubt_sent_ns = sent.sent_ns;
        copy_message(error, fmt::format("redlock: release confirmed on {} of {} nodes, {} did not answer; retry", t.released,
                                        b->nodes.size(), b->nodes.size() - answered));
        return DLOCK_UNKNOWN;
    });
}

void redlock_hold_destroy(dlock_backend*, dlock_hold* h) { delete h; }

int redlock_renew(dlock_backend* b, dlock_renewal* renewals, size_t count, dlock_plugin_error* error) {
    return guarded(error, "redlock", [&] {
        std::vector<std::string> keys, args;
        for (size_t i = 0; i < count; ++i) {
            keys.push_back(renewals[i].hold->keys.lock);
            args.push_back(renewals[i].hold->shared ? "s" : "x");
            args.push_back(renewals[i].hold->value);
            args.push_back(std::to_string(renewals[i].ttl_ms));
        }
        // Confirmed by a quorum for every lease decides it; the slower nodes renew all the same.
        const enough_replies decided = [&](const std::vector<reply_ptr>& so_far) {
            for (size_t i = 0; i < count; ++i) {
                size_t ok = 0;
                for (const auto& r : so_far)
                    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == count && r->element[i]->integer == 1) ++ok;
                if (ok < b->quorum) return false;
            }
            return true;
        };
        const auto [replies, sent, reached] = on_all_nodes(b, renew_holds_script, keys, args, command_timeout_ns(b), decided);
        const int64_t elapsed = now_ns() - sent;
        for (size_t i = 0; i < count; ++i) {
            size_t ok = 0, refused = 0;
            for (const auto& r : replies) {
                if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != count) continue;
                (r->element[i]->integer == 1 ? ok : refused)++;
            }
            const int64_t ttl_ns = renewals[i].ttl_ms * 1'000'000;
            if (ok >= b->quorum && elapsed < ttl_ns - drift_ns(renewals[i].ttl_ms)) {
                renewals[i].status = DLOCK_OK;
                renewals[i].valid_until_ns = sent + ttl_ns - drift_ns(renewals[i].ttl_ms);
                renewals[i].hold->valid_until_ns = renewals[i].valid_until_ns;
            } else if (refused > b->nodes.size() - b->quorum) {
                renewals[i].status = DLOCK_LOST;  // a quorum can never confirm it again
            } else {
                renewals[i].status = DLOCK_UNAVAILABLE;
            }
        }
        return DLOCK_OK;
    });
}

int redlock_inspect(dlock_backend* b, const char* name, dlock_lock_info* info, dlock_plugin_error* error) {
    return guarded(error, "redlock", [&] {
        const lock_keys keys = keys_for(b->config.key_prefix, name);
        const auto replies = on_all_nodes(b, inspect_script, {keys.lock, keys.fence}, {}, command_timeout_ns(b)).replies;
        std::map<std::string, std::pair<size_t, int64_t>> values;  // value -> (nodes, min pttl)
        size_t answered = 0;
        for (const auto& r : replies) {
            if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 2) continue;
            ++answered;
            if (r->element[0]->type != REDIS_REPLY_STRING) continue;
            auto& entry = values[std::string(r->element[0]->str, r->element[0]->len)];
            const int64_t pttl = r->element[1]->integer;
            entry.second = entry.first == 0 ? pttl : std::min(entry.second, pttl);
            ++entry.first;
        }
        if (answered < b->quorum)
            fail(DLOCK_UNAVAILABLE, fmt::format("redlock: only {} of {} nodes answered; a quorum of {} is needed", answered,
                                                b->nodes.size(), b->quorum));
        for (const auto& [value, seen] : values) {
            if (seen.first < b->quorum) continue;  // held means one round's value on a quorum
            info->held = 1;  // a break's tombstone too: the name is not free, its holder not known
            if (value != break_tombstone) std::strncpy(info->holder, owner_of(value).c_str(), sizeof info->holder - 1);
            info->ttl_left_ms = seen.second;
        }
        return DLOCK_OK;
    });
}

// A reply element that is a string or an integer, as text.
std::string element_text(const redisReply* e) {
    if (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS) return std::string(e->str, e->len);
    if (e->type == REDIS_REPLY_INTEGER) return std::to_string(e->integer);
    return std::string();
}

// The majority view of the lock `name`'s holders: a hold counts when a quorum of nodes holds its
// key (what its lease needs to be valid); a minority's leftovers (a failed round's keys not yet
// given back, a node that missed a release) are not holders. No fencing tokens (0). Needs a
// quorum of nodes to answer.
bool visit_majority_holders(dlock_backend* b, const std::string& name, dlock_holder_visitor visit, void* user_data) {
    const lock_keys keys = keys_for(b->config.key_prefix, name);
    const auto replies = on_all_nodes(b, holders_script, {keys.lock, keys.fence}, {"lock"}, command_timeout_ns(b)).replies;
    struct seen {
        uint32_t kind = DLOCK_HOLD_EXCLUSIVE;
        size_t nodes = 0;
        int64_t ttl_left_ms = -1;
    };
    std::map<std::string, seen> values;  // the round's value -> where it is held
    size_t answered = 0;
    for (const auto& r : replies) {
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements % 5 != 0) continue;
        ++answered;
        for (size_t i = 0; i < r->elements; i += 5) {
            auto& v = values[element_text(r->element[i + 1])];
            v.kind = element_text(r->element[i]) == "s" ? DLOCK_HOLD_SHARED : DLOCK_HOLD_EXCLUSIVE;
            const int64_t left = std::strtoll(element_text(r->element[i + 3]).c_str(), nullptr, 10);
            v.ttl_left_ms = v.nodes == 0 ? left : std::min(v.ttl_left_ms, left);
            ++v.nodes;
        }
    }
    if (answered < b->quorum)
        fail(DLOCK_UNAVAILABLE, fmt::format("redlock: only {} of {} nodes answered; a quorum of {} is needed", answered,
                                            b->nodes.size(), b->quorum));
    for (const auto& [value, where] : values) {
        if (where.nodes < b->quorum || value == break_tombstone) continue;  // a break's tombstone is no holder
        dlock_holder_info info{};
        info.struct_size = sizeof info;
        info.name = name.c_str();
        info.kind = where.kind;
        const std::string owner = owner_of(value);
        std::memcpy(info.holder, owner.data(), std::min(owner.size(), sizeof info.holder - 1));
        info.ttl_left_ms = where.ttl_left_ms >= 0 ? where.ttl_left_ms : -1;
        if (visit(&info, user_data) != 0) return false;
    }
    return true;
}

int redlock_holders(dlock_backend* b, const char* name, int semaphore, dlock_holder_visitor visit, void* user_data,
                    dlock_plugin_error* error) {
    return guarded(error, "redlock", [&] {
        if (!semaphore) visit_majority_holders(b, name, visit, user_data);  // a semaphore never exists here
        return DLOCK_OK;
    });
}

// The names with a lock key on any node (SCAN MATCH on each), then each one's majority view.
int redlock_list(dlock_backend* b, const char* prefix, dlock_holder_visitor visit, void* user_data, dlock_plugin_error* error) {
    return guarded(error, "redlock", [&] {
        const std::string lock_key = keys_for(b->config.key_prefix, prefix).lock;
        std::string pattern;
        for (char ch : lock_key.substr(0, lock_key.size() - std::strlen("}:lock"))) {
            if (ch == '*' || ch == '?' || ch == '[' || ch == ']' || ch == '\\') pattern += '\\';
            pattern += ch;
        }
        pattern += '*';
        std::set<std::string> names;
        size_t scanned = 0;
        for (auto& nd : b->nodes) {
            try {
                auto c = nd.connections->borrow();
                std::string cursor = "0";
                do {
                    reply_ptr r = c->command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
                    if (r->type == REDIS_REPLY_ERROR) throw classify_error_reply(nd.where.text(), std::string(r->str, r->len));
                    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[1]->type != REDIS_REPLY_ARRAY)
                        fail(DLOCK_BACKEND, fmt::format("redlock {}: unexpected reply to SCAN", nd.where.text()));
                    cursor = element_text(r->element[0]);
                    for (size_t i = 0; i < r->element[1]->elements; ++i) {
                        auto named = name_of_key(b->config.key_prefix, element_text(r->element[1]->element[i]));
                        if (named && !named->second && named->first.compare(0, std::strlen(prefix), prefix) == 0)
                            names.insert(named->first);
                    }
                } while (cursor != "0");
                ++scanned;
            } catch (const failure& f) {
                if (f.status == DLOCK_PERMISSION)
                    fail(DLOCK_PERMISSION, fmt::format("redlock: listing needs `+scan` on every node ({})", f.message));
            }
        }
        if (scanned < b->quorum)
            fail(DLOCK_UNAVAILABLE, fmt::format("redlock: only {} of {} nodes could be scanned; a quorum of {} is needed",
                                                scanned, b->nodes.size(), b->quorum));
        for (const auto& name : names)
            if (!visit_majority_holders(b, name, visit, user_data)) break;
        return DLOCK_OK;
    });
}

// Break on every node; the count is the most holders one node removed. Confirmed by a quorum, no
// broken holder can renew again (renewal needs a quorum): it is LOST at its next renewal.
// Fenced by time, there being no tokens: on each node the holders' key becomes a tombstone that
// expires when their key would have (break_script, 'tombstone'), so nobody acquires the name while
// a broken lease may still be valid. Any quorum that confirmed a broken lease's last grant or
// renewal shares a node with any later acquirer's quorum; there the renewal ran before the break
// (after it, it would have been refused), so the node holds the key or its tombstone, which outlives
// that renewal's validity, and refuses the acquirer. Nothing is freed by the break, so no waiter is
// woken: waiters sleep on the tombstone's ttl as on a holder's, and retry when it expires.
int redlock_break(dlock_backend* b, const char* name, int semaphore, size_t* out_broken, dlock_plugin_error* error) {
    return guarded(error, "redlock", [&] {
        if (semaphore) {  // a semaphore never exists here
            if (out_broken) *out_broken = 0;
            return DLOCK_OK;
        }
        const lock_keys keys = keys_for(b->config.key_prefix, name);
        const auto replies = on_all_nodes(b, break_script, {keys.lock, keys.fence, keys.queue, keys.queue_lapses, keys.channel},
                                          {"lock", "0", "", "tombstone"}, command_timeout_ns(b))
                                 .replies;
        size_t confirmed = 0;
        long long most = 0;
        for (size_t i = 0; i < replies.size(); ++i) {
            const redisReply* r = replies[i].get();
            if (!r) continue;
            if (r->type == REDIS_REPLY_ERROR) {
                const failure f = classify_error_reply(b->nodes[i].where.text(), std::string(r->str, r->len));
                if (f.status == DLOCK_PERMISSION)
                    fail(DLOCK_PERMISSION, fmt::format("redlock: ACL user `{}` may not break `{}`: breaking needs `+unlink` on "
                                                       "dlock's keys on every node, an administrator's right ({})",
                                                       b->config.username.empty() ? "default" : b->config.username, name,
                                                       f.message));
                continue;
            }
            if (r->type != REDIS_REPLY_INTEGER) continue;
            ++confirmed;
            most = std::max(most, r->integer);
        }
        if (confirmed < b->quorum)
            fail(confirmed == 0 ? DLOCK_UNAVAILABLE : DLOCK_UNKNOWN,
                 fmt::format("redlock: the break of `{}` was confirmed by {} of {} nodes; a quorum of {} is needed (retry)", name,
                             confirmed, b->nodes.size(), b->quorum));
        if (out_broken) *out_broken = size_t(most);
        return DLOCK_OK;
    });
}

constexpr dlock_plugin redlock_plugin = {
    sizeof(dlock_plugin),
    2,
    "redlock",
    "Redlock over N independent Redis masters: quorum N/2+1 in one parallel round, validity = ttl - elapsed - drift. "
    "No fencing tokens.",
    redlock_options,
    sizeof redlock_options / sizeof redlock_options[0],
    redlock_create,
    redlock_destroy,
    redlock_capabilities,
    redlock_interrupt,
    redlock_acquire,
    redlock_release,
    redlock_hold_destroy,
    redlock_renew,
    redlock_inspect,
    redlock_holders,
    redlock_list,
    redlock_break,
};
constexpr dlock_plugin redlock_plugin_v1_view = dlock::plugin_kit::as_version_1(redlock_plugin);

}  // namespace

extern "C" DLOCK_PLUGIN_EXPORT int dlock_plugin_negotiate(uint32_t host_max_version, const dlock_plugin** out,
                                                          uint32_t* out_min_version) {
    return dlock::plugin_kit::negotiate_v2(host_max_version, &redlock_plugin, &redlock_plugin_v1_view, out, out_min_version);
}
