// The admin entry points of the `redlock` backend: inspect, holders, list and break. Each reads or
// changes every node and trusts only what a quorum of them shows: a hold is one round's value on a
// quorum of nodes; a minority's leftovers are no holders.
#include "redlock_backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

namespace dlock::redlock {

namespace {

// An admin read that fewer than a quorum of nodes answered shows nothing the majority agrees on.
void require_quorum_answered(const dlock_backend* b, size_t answered) {
    if (answered < b->quorum)
        fail(DLOCK_UNAVAILABLE, fmt::format("redlock: only {} of {} nodes answered; a quorum of {} is needed", answered,
                                            b->nodes.size(), b->quorum));
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
    require_quorum_answered(b, answered);
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

}  // namespace

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
        require_quorum_answered(b, answered);
        for (const auto& [value, seen] : values) {
            if (seen.first < b->quorum) continue;  // held means one round's value on a quorum
            info->held = 1;  // a break's tombstone too: the name is not free, its holder not known
            if (value != break_tombstone) std::strncpy(info->holder, owner_of(value).c_str(), sizeof info->holder - 1);
            info->ttl_left_ms = seen.second;
        }
        return DLOCK_OK;
    });
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
        const std::string pattern = scan_pattern_for(b->config.key_prefix, prefix);
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

}  // namespace dlock::redlock
