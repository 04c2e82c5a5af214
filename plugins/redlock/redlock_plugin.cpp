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
//
// The sources: this file opens the client and holds the plugin's table, release and renewal;
// redlock_acquisition.cpp the acquire (rounds and waits); redlock_rounds.cpp what sends one script
// to every node; redlock_admin.cpp inspect, holders, list and break; redlock_logic.cpp the
// arithmetic that needs no server (dlock_redlock_logic, unit-tested). redlock_backend.hpp is what
// they share.
#include "redlock_backend.hpp"
#include <dlock/plugin_kit/plugin_struct.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <netdb.h>
#include <set>
#include <sys/socket.h>

using namespace dlock::redlock;

namespace {

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
        b->quorum = quorum_of(n);
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
                if (t->type == REDIS_REPLY_ARRAY && t->elements == 2 && t->element[0]->type == REDIS_REPLY_STRING &&
                    t->element[1]->type == REDIS_REPLY_STRING) {  // a server answering otherwise is left out of the median
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
        dlock::plugin_kit::lock_guard lock(b->sleep_mutex);
        b->interrupted = true;
        for (auto* s : b->sleepers) s->cv.notify_one();
    }
    dlock::plugin_kit::lock_guard lock(b->waker_mutex);
    for (const auto& s : b->wakers) s->interrupt();
}

// The nodes' answers to the release script, counted (release_tally: what each answer means).
release_tally tally_release(const std::vector<reply_ptr>& replies) {
    release_tally t;
    for (const auto& r : replies)
        if (r && r->type == REDIS_REPLY_INTEGER) t.count(r->integer);
    return t;
}

int redlock_release(dlock_backend* b, dlock_hold* h, dlock_plugin_error* error) {
    return guarded(error, "redlock", [&] {
        // An earlier attempt of this release, sent while the lease was valid, went to the nodes and
        // was not answered by a quorum (UNKNOWN): where our key is now found gone or another
        // holder's, it may be what removed it (a retry after UNKNOWN; the other holder a waiter it
        // woke). released_on_quorum and lost_on_quorum say what decides the outcome then.
        const bool in_doubt = release_in_doubt(h->release_in_doubt_sent_ns, h->valid_until_ns);
        // A quorum decides it either way; the other nodes' replies are read later.
        const enough_replies decided = [&](const std::vector<reply_ptr>& so_far) {
            const release_tally t = tally_release(so_far);
            return released_on_quorum(t, in_doubt, b->quorum) || lost_on_quorum(t, in_doubt, b->nodes.size(), b->quorum);
        };
        const node_replies sent = on_all_nodes(b, release_script_for(h->shared), h->release_keys,
                                               release_args(b, h->value, h->shared, h->place, false), command_timeout_ns(b),
                                               decided);
        const release_tally t = tally_release(sent.replies);
        if (released_on_quorum(t, in_doubt, b->quorum)) return DLOCK_OK;
        if (lost_on_quorum(t, in_doubt, b->nodes.size(), b->quorum)) {
            copy_message(error, fmt::format("redlock: our key was gone from {} of {} nodes at release, another holder's on {}, "
                                            "our expired hold or a tombstone on {}; the lease had been lost",
                                            t.gone, b->nodes.size(), t.other, t.proof));
            return DLOCK_LOST;
        }
        // Some node got the request and did not answer: the release may have run there.
        const size_t answered = t.answered();
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
            renewals[i].status = renewal_status(ok, refused, elapsed, renewals[i].ttl_ms, b->nodes.size(), b->quorum);
            if (renewals[i].status == DLOCK_OK) {
                renewals[i].valid_until_ns = valid_until_ns(sent, renewals[i].ttl_ms);
                renewals[i].hold->valid_until_ns = renewals[i].valid_until_ns;
            }
        }
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
    dlock::redlock::redlock_acquire,
    redlock_release,
    redlock_hold_destroy,
    redlock_renew,
    dlock::redlock::redlock_inspect,
    dlock::redlock::redlock_holders,
    dlock::redlock::redlock_list,
    dlock::redlock::redlock_break,
};
constexpr dlock_plugin redlock_plugin_v1_view = dlock::plugin_kit::as_version_1(redlock_plugin);

}  // namespace

extern "C" DLOCK_PLUGIN_EXPORT int dlock_plugin_negotiate(uint32_t host_max_version, const dlock_plugin** out,
                                                          uint32_t* out_min_version) {
    return dlock::plugin_kit::negotiate_v2(host_max_version, &redlock_plugin, &redlock_plugin_v1_view, out, out_min_version);
}
