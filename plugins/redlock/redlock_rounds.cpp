// Rounds of the `redlock` backend: one script sent to every node at once (on_all_nodes), and the
// acquire round that decides a grant by quorum and gives back what a failed round got
// (acquire_round). The keys and arguments of a hold's scripts. Contracts in redlock_backend.hpp.
#include "redlock_backend.hpp"

#include <cerrno>
#include <cstring>
#include <poll.h>

namespace dlock::redlock {

namespace {

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

}  // namespace

lock_keys fifo_keys(const lock_keys& lock) {
    lock_keys out = lock;
    const std::string base = lock.lock.substr(0, lock.lock.size() - std::strlen(":lock"));
    out.queue = base + ":redlock-queue";
    out.queue_lapses = base + ":redlock-queue-lapses";
    return out;
}

void learn_redlock_scripts(connection& c) {
    for (const script* sc : {&redlock_acquire_script, &redlock_release_script}) {
        if (!sc->sha1().empty()) continue;
        reply_ptr r = c.command({"SCRIPT", "LOAD", sc->source()});
        if (r->type == REDIS_REPLY_STRING) sc->learn_sha1(std::string(r->str, r->len));
    }
}

node_replies on_all_nodes(dlock_backend* b, const script& s, const std::vector<std::string>& keys,
                          const std::vector<std::string>& args, int64_t timeout_ns, const enough_replies& enough) {
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

const script& acquire_script_for(bool shared) { return shared ? shared_acquire_script : redlock_acquire_script; }
std::vector<std::string> acquire_keys(const lock_keys& lock, bool shared) {
    if (shared) return {lock.lock, lock.fence, lock.queue, lock.queue_lapses};
    const lock_keys fifo = fifo_keys(lock);
    return {fifo.lock, fifo.fence, fifo.queue, fifo.queue_lapses};
}
std::vector<std::string> acquire_args(const dlock_backend* b, const std::string& value, int64_t ttl_ms, bool shared,
                                      const queue_place& place) {
    // A fair try: refused while a waiting writer marks a node (mark_waiting_writer_script);
    // refused so while the lock is free there, it shortens the marks to a mark refresh (ARGV[5]).
    // 'untokened': no fencing token, so no fence key is bumped.
    if (shared) return {value, std::to_string(ttl_ms), std::to_string(script_arg(queue_mode::fair_try)), "0", std::to_string(b->mark_refresh_ms()), "", "untokened"};
    return {value, std::to_string(ttl_ms), place.member, place.score, std::to_string(script_arg(place.mode)),
            std::to_string(b->entry_grace_ms()), std::to_string(b->claim_ms()), b->waiter_channel_prefix()};
}
const script& release_script_for(bool shared) { return shared ? shared_release_script : redlock_release_script; }
std::vector<std::string> release_keys(const lock_keys& lock, bool shared) {
    if (shared) return {lock.lock, lock.fence, lock.queue, lock.queue_lapses, lock.channel};
    const lock_keys fifo = fifo_keys(lock);
    return {fifo.lock, fifo.fence, fifo.queue, fifo.queue_lapses, fifo.channel};
}
std::vector<std::string> release_args(const dlock_backend* b, const std::string& value, bool shared,
                                      const queue_place& place, bool giving_back) {
    // No waiter channel to wake (the nodes' queues hold only waiting writers' marks); the member
    // found by value.
    if (shared) return {value, "0", "", ""};
    const bool queued = place.queues();
    return {value, std::to_string(b->claim_ms()), b->waiter_channel_prefix(), queued ? place.member : "",
            queued ? place.score : "0", std::to_string(b->entry_grace_ms()), giving_back ? "give back" : "release"};
}


namespace {

bool is_noscript(const redisReply* rep) {
    return rep && rep->type == REDIS_REPLY_ERROR && std::strncmp(rep->str, "NOSCRIPT", 8) == 0;
}

// The first error of a round is the one it reports.
void note_error(round_result& r, const failure& f) {
    if (!r.error.empty()) return;
    r.error = f.message;
    r.error_status = f.status == DLOCK_PERMISSION ? DLOCK_PERMISSION : DLOCK_BACKEND;
}

// The round is decided by the quorum-th grant, or once a quorum can no longer be reached.
enough_replies round_decider(const dlock_backend* b) {
    return [b](const std::vector<reply_ptr>& so_far) {
        size_t granted = 0, refused = 0;
        for (const auto& rep : so_far) {
            if (!rep) continue;
            if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[0]->integer == 1) ++granted;
            else if (!is_noscript(rep.get())) ++refused;
        }
        return round_decided(granted, refused, b->nodes.size(), b->quorum);
    };
}

// Refused by a quorum: the round failed, and what it got is given back on every node that did not
// refuse. The nodes that had not answered yet are usually only a moment behind, and most refuse
// too: their replies are awaited a while longer (as long again as the round took, at least 1 ms,
// within its deadline), so that a node that refused costs no give-back. (A waiter's wake that
// comes meanwhile is not missed: it counts from before the round.)
void await_late_refusals(const dlock_backend* b, std::vector<connection*>& conns, const std::vector<bool>& late,
                         std::vector<reply_ptr>& replies, int64_t sent_ns, int64_t deadline_ns) {
    size_t granted_so_far = 0;
    for (const auto& rep : replies)
        if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2 && rep->element[0]->integer == 1) ++granted_so_far;
    if (granted_so_far >= b->quorum) return;
    const int64_t decided_ns = now_ns();
    collect_owed_replies(conns, late, replies, std::min(deadline_ns, decided_ns + std::max<int64_t>(decided_ns - sent_ns, 1'000'000)));
}

// Counts node i's reply `rep` into `r`.
void count_reply(const dlock_backend* b, size_t i, const redisReply* rep, round_result& r) {
    if (rep->type == REDIS_REPLY_ERROR) {
        if (r.error.empty()) note_error(r, classify_error_reply(b->nodes[i].where.text(), rep->str));
        return;
    }
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 2) return;
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
        r.min_holder_ttl_ms =
            r.min_holder_ttl_ms < 0 ? rep->element[1]->integer : std::min<int64_t>(r.min_holder_ttl_ms, rep->element[1]->integer);
    }
}

// Gives back what a failed round granted: the owner-fenced release goes to every node of the round
// that did not refuse (a refusal set nothing: the script is atomic), pipelined on the same
// connection behind the acquire (so a node that has not answered yet runs SET, then release, in
// that order) without waiting for the replies.
void give_back_round(const dlock_backend* b, const dlock_hold& h, const std::string& value, const queue_place& place,
                     std::vector<connection*>& conns, const std::vector<reply_ptr>& replies) {
    const std::vector<std::string> give_back_args = release_args(b, value, h.shared, place, true);
    script_call give_back(h.release_keys, give_back_args);
    const command_line& give_back_line = give_back.command(release_script_for(h.shared), true);
    for (size_t i = 0; i < conns.size(); ++i) {
        const redisReply* rep = replies[i].get();
        const bool refused = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2 && rep->element[0]->integer == 0;
        if (conns[i] && !conns[i]->broken() && !refused) pipeline(*conns[i], give_back_line);
    }
}

}  // namespace

round_result acquire_round(dlock_backend* b, const dlock_hold& h, const std::string& value, int64_t ttl_ms,
                           const queue_place& place) {
    round_result r;
    round_connections round(b);
    const std::vector<std::string>& keys = h.acquire_keys;
    const std::vector<std::string> args = acquire_args(b, value, ttl_ms, h.shared, place);
    const script& acquire = acquire_script_for(h.shared);
    script_call call(keys, args);
    std::vector<bool> late;
    r.sent_ns = now_ns();
    const int64_t deadline_ns = r.sent_ns + b->config.command_timeout_ms * 1'000'000;
    std::vector<reply_ptr> replies = fan_out(round.conns, call.command(acquire, false), deadline_ns, late, round_decider(b));
    await_late_refusals(b, round.conns, late, replies, r.sent_ns, deadline_ns);
    for (size_t i = 0; i < replies.size(); ++i) {
        if (is_noscript(replies[i].get())) {
            try {
                replies[i] = run_script(*round.conns[i], acquire, keys, args);
            } catch (const failure& f) {
                note_error(r, f);
                replies[i].reset();
            }
        }
        if (replies[i]) count_reply(b, i, replies[i].get(), r);
    }
    r.received_ns = now_ns();
    r.acquired = round_acquired(r.granted, b->quorum, validity_ns(ttl_ms, r.sent_ns, r.received_ns));
    if (!r.acquired) give_back_round(b, h, value, place, round.conns, replies);
    for (size_t i = 0; i < late.size(); ++i)
        if (late[i]) round.conns[i]->mark_broken();
    return r;
}

}  // namespace dlock::redlock
