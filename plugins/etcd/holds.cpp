// The etcd backend's holds (see etcd_backend.hpp): release, hold_destroy, renew, inspect, and the
// session events that end holds and waits.
#include "etcd_backend.hpp"
#include "keys.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

std::vector<std::pair<std::shared_ptr<acquisition>, int64_t>> dlock_backend::holds_of(const std::shared_ptr<session>& s) {
    dlock::plugin_kit::lock_guard lock(state_mutex);
    std::vector<std::pair<std::shared_ptr<acquisition>, int64_t>> out;
    for (const auto& a : holds)
        if (a->s == s && !a->gone) out.emplace_back(a, a->valid_until_ns);
    return out;
}

void dlock_backend::session_suspect(const std::shared_ptr<session>& s, const std::string& why) {
    log(2, fmt::format("etcd: session lease {} unconfirmed: {}", lease_hex(s->id), why));
    for (const auto& [a, valid_until] : holds_of(s)) push(a, DLOCK_LEASE_SUSPECT, valid_until);
}

void dlock_backend::session_healthy(const std::shared_ptr<session>& s) {
    log(1, fmt::format("etcd: session lease {} confirmed again", lease_hex(s->id)));
    for (const auto& [a, valid_until] : holds_of(s)) push(a, DLOCK_LEASE_HELD, valid_until);
}

void dlock_backend::session_dead(const std::shared_ptr<session>& s, int status, const std::string& why) {
    std::vector<std::shared_ptr<acquisition>> lost;
    {
        dlock::plugin_kit::lock_guard lock(state_mutex);
        for (const auto& a : holds)
            if (a->s == s && !a->gone) {
                a->gone = true;
                lost.push_back(a);
            }
        for (const auto& a : queued)
            if (a->s == s) {
                dlock::plugin_kit::lock_guard signal(a->m);
                a->session_ended = true;
                a->session_status = status;
                a->session_reason = why;
                a->cv.notify_all();
            }
    }
    log(lost.empty() ? 1 : 2, fmt::format("etcd: session lease {} ended: {}; {} held lock(s) lost", lease_hex(s->id),
                                          why, lost.size()));
    for (const auto& a : lost) push(a, DLOCK_LEASE_LOST, 0);
}

int dlock_backend::release(dlock_hold* h, dlock_plugin_error* error) {
    const std::shared_ptr<acquisition>& a = h->a;
    int64_t valid_until = 0, unanswered_before = 0;
    {
        dlock::plugin_kit::lock_guard lock(state_mutex);
        if (a->gone && a->released_unanswered) return DLOCK_OK;
        if (a->gone) {
            copy_message(error, fmt::format("etcd: lock `{}` had been lost (its key `{}` expired or was deleted)", a->name, a->key));
            return DLOCK_LOST;
        }
        a->releasing = true;
        valid_until = a->valid_until_ns;
        unanswered_before = a->release_unanswered_ns;
    }
    bool deleted = false;
    int64_t unanswered = 0;
    semaphore_after after;
    try {
        const orphan o = orphan_of(*a, a->revision);
        deleted = retire_key(o.key, o.revision, o.tombstone, o.lease, "release",
                             call_options{false, 0, forever_ns, DLOCK_TIMEOUT, &unanswered},
                             a->kind == DLOCK_HOLD_PERMIT ? &after : nullptr);
    } catch (const failure& f) {
        dlock::plugin_kit::lock_guard lock(state_mutex);
        if (a->release_unanswered_ns == 0) a->release_unanswered_ns = unanswered;  // for the host's retry
        a->releasing = false;
        copy_message(error, fmt::format("{}; the outcome is unknown: the release is safe to retry", f.message));
        return DLOCK_UNKNOWN;
    }
    {
        dlock::plugin_kit::lock_guard lock(state_mutex);
        a->gone = true;
        // No cancel request: the deletion's event reaches the own-key watch, if there is one, and
        // the watcher ends it on the server then (one message either way, off the release path).
        a->own_watch = 0;
    }
    if (deleted) {
        if (unanswered == 0 && unanswered_before == 0 && !a->put_in_doubt) give_back_suffix(*a);
        if (after.idle && after.limit_mod_revision != 0) forget_limit(a->limit_key, after.limit_mod_revision);
        return DLOCK_OK;
    }
    const int64_t first_unanswered = unanswered_before != 0 ? unanswered_before : unanswered;
    if (first_unanswered != 0 && first_unanswered < valid_until) {
        // An attempt that got no answer (in this call, or in an earlier one that returned
        // UNKNOWN) was sent while the lock was ours: that attempt deleted the key, and a later
        // one found it gone.
        log(1, fmt::format("etcd: lock `{}` released by an attempt that got no answer; the retry found its key gone", a->name));
        return DLOCK_OK;
    }
    copy_message(error, fmt::format("etcd: lock `{}` had been lost: key `{}` with create_revision {} no longer exists",
                                    a->name, a->key, a->revision));
    return DLOCK_LOST;
}

void dlock_backend::hold_destroy(dlock_hold* h) {
    const std::shared_ptr<acquisition> a = std::move(h->a);
    delete h;
    int64_t own = 0;
    {
        dlock::plugin_kit::lock_guard notifying(notify_mutex);
        dlock::plugin_kit::lock_guard lock(state_mutex);
        a->registered = false;
        holds.erase(a);
        own = a->own_watch;
        a->own_watch = 0;
        if (!a->gone) {
            // The host gave up on a release it could not confirm: the key would otherwise live as
            // long as the session lease. Deleted in the background, only if still ours.
            a->gone = true;
            orphans.push_back(orphan_of(*a, a->revision));
            janitor_wake.notify_all();
        }
    }
    if (own) watches->cancel(own);
}

void dlock_backend::check_keys_still_ours(dlock_renewal* renewals, size_t count) {
    pb::TxnRequest read;
    std::vector<std::shared_ptr<acquisition>> checked;
    {
        dlock::plugin_kit::lock_guard lock(state_mutex);
        for (size_t i = 0; i < count; ++i) {
            const std::shared_ptr<acquisition>& a = renewals[i].hold->a;
            if (a->gone || a->releasing) continue;
            pb::RangeRequest* range = read.add_success()->mutable_request_range();
            range->set_key(a->key);
            range->set_keys_only(true);
            checked.push_back(a);
        }
    }
    if (checked.empty()) return;
    pb::TxnResponse response;
    try {
        // One request_timeout in all, whatever the members do: the session's confirmation that
        // follows has its own bound, and a renewal must not stall the keeper for longer.
        conn->call("check that the renewed holds' keys exist",
                   [&](member& m, grpc::ClientContext& context) { return m.kv->Txn(&context, read, &response); },
                   call_options{false, 0, now_ns() + config.request_timeout_ms * ns_per_ms, DLOCK_UNAVAILABLE});
    } catch (const failure& f) {
        // Unconfirmed, not lost: the session's confirmation below decides the status.
        log(2, fmt::format("etcd: {}", f.message));
        return;
    }
    std::vector<std::shared_ptr<acquisition>> lost;
    {
        dlock::plugin_kit::lock_guard lock(state_mutex);
        for (size_t i = 0; i < checked.size() && int(i) < response.responses_size(); ++i) {
            const auto& a = checked[i];
            const auto& kvs = response.responses(int(i)).response_range().kvs();
            if (a->gone || a->releasing || (!kvs.empty() && kvs[0].create_revision() == a->revision)) continue;
            a->gone = true;
            a->released_unanswered = a->release_unanswered_ns != 0 && a->release_unanswered_ns < a->valid_until_ns;
            if (!a->released_unanswered) lost.push_back(a);
        }
    }
    for (const auto& a : lost)
        log(2, fmt::format("etcd: {} `{}` lost: its key `{}` is gone (deleted by a break or an operator, or its "
                           "session lease ended)", a->kind == DLOCK_HOLD_PERMIT ? "semaphore" : "lock", a->name, a->key));
}

int dlock_backend::renew(dlock_renewal* renewals, size_t count) {
    struct confirmed {
        std::shared_ptr<session> s;
        int status;
        int64_t deadline;
    };
    std::vector<confirmed> done;  // one confirmation per session in the batch
    check_keys_still_ours(renewals, count);
    for (size_t i = 0; i < count; ++i) {
        const std::shared_ptr<acquisition>& a = renewals[i].hold->a;
        {
            dlock::plugin_kit::lock_guard lock(state_mutex);
            if (a->gone) {
                renewals[i].status = DLOCK_LOST;
                continue;
            }
        }
        auto it = std::find_if(done.begin(), done.end(), [&](const confirmed& c) { return c.s == a->s; });
        if (it == done.end()) {
            int64_t deadline = 0;
            std::string why;
            const int status = sessions->confirm(a->s, deadline, why);
            if (status != DLOCK_OK) log(2, why);
            done.push_back({a->s, status, deadline});
            it = done.end() - 1;
        }
        if (it->status != DLOCK_OK) {
            renewals[i].status = it->status;
            continue;
        }
        dlock::plugin_kit::lock_guard lock(state_mutex);
        if (a->gone) {
            renewals[i].status = DLOCK_LOST;
            continue;
        }
        a->valid_until_ns = std::max(a->valid_until_ns, it->deadline);
        renewals[i].status = DLOCK_OK;
        renewals[i].valid_until_ns = a->valid_until_ns;
    }
    return DLOCK_OK;
}

int dlock_backend::inspect(const char* name, dlock_lock_info* info) {
    const std::string dir = dir_of(name);
    pb::RangeRequest range;
    range.set_key(dir);
    range.set_range_end(prefix_end(dir));
    range.set_sort_target(pb::RangeRequest::CREATE);
    range.set_sort_order(pb::RangeRequest::ASCEND);
    range.set_limit(1);
    pb::RangeResponse response;
    conn->call("inspect", [&](member& m, grpc::ClientContext& context) { return m.kv->Range(&context, range, &response); });
    info->held = response.kvs_size() > 0 ? 1 : 0;
    if (!info->held) return DLOCK_OK;
    const mvccpb::KeyValue& holder = response.kvs(0);
    const size_t n = std::min(holder.value().size(), sizeof info->holder - 1);
    std::memcpy(info->holder, holder.value().data(), n);
    info->holder[n] = '\0';
    info->fencing_token = uint64_t(holder.create_revision());
    info->ttl_left_ms = -1;
    if (holder.lease() != 0) {
        pb::LeaseTimeToLiveRequest ttl;
        ttl.set_id(holder.lease());
        pb::LeaseTimeToLiveResponse left;
        conn->call("inspect the holder's lease",
                   [&](member& m, grpc::ClientContext& context) { return m.lease->LeaseTimeToLive(&context, ttl, &left); });
        if (left.ttl() >= 0) info->ttl_left_ms = left.ttl() * 1000;  // etcd answers in whole seconds
    }
    return DLOCK_OK;
}
