// The etcd backend's acquisition (see etcd_backend.hpp): enqueue, wait for the predecessor's
// deletion, become the holder, or abandon the queue. Release, renew, inspect and the session
// events are in holds.cpp; the keys' building blocks in keys.cpp.
#include "etcd_backend.hpp"
#include "keys.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

void dlock_backend::abandon(const std::shared_ptr<acquisition>& a, int64_t predecessor_watch, bool in_background) {
    int64_t own = 0;
    {
        dlock::plugin_kit::lock_guard lock(state_mutex);
        queued.erase(a);
        own = a->own_watch;
        a->own_watch = 0;
        a->gone = true;
    }
    if (own) watches->cancel(own);
    if (predecessor_watch) watches->cancel(predecessor_watch);
    orphan o = orphan_of(*a, 0);
    if (!in_background) {
        try {
            int64_t unanswered = 0;
            retire_key(o.key, 0, o.tombstone, o.lease, "delete an abandoned queue key",
                       call_options{false, 0, now_ns() + config.request_timeout_ms * ns_per_ms, DLOCK_UNAVAILABLE, &unanswered});
            if (o.tombstone.empty() && unanswered == 0) give_back_suffix(*a);
            return;
        } catch (const failure& f) {
            log(2, fmt::format("etcd: could not delete queue key `{}` ({}); retrying in the background", a->key, f.message));
        }
    }
    add_orphan(std::move(o));
}

int dlock_backend::acquire(const dlock_acquire_request& request, dlock_hold** out_hold, dlock_grant* grant) {
    if (interrupted) fail(DLOCK_CANCELLED, "etcd: the client is closing");
    start_janitor();
    // Every call of the acquire ends by its deadline (then TIMEOUT: not acquired in time); a
    // try-once gets one request_timeout in all, however many members it tries (then
    // UNAVAILABLE: no answer, so nothing is known about the lock).
    const bool try_once = request.deadline_ns == 0;
    const int64_t calls_end = try_once ? now_ns() + config.request_timeout_ms * ns_per_ms : request.deadline_ns;
    const int out_of_time_status = try_once ? DLOCK_UNAVAILABLE : DLOCK_TIMEOUT;
    bool warned_unavailable = false;
    for (int attempt = 0;; ++attempt) {
        auto a = std::make_shared<acquisition>();
        a->calls_end_ns = calls_end;
        a->out_of_time_status = out_of_time_status;
        a->s = sessions->obtain(request.ttl_ms, acquire_call(*a));
        a->name = request.name;
        if (request.struct_size >= DLOCK_ACQUIRE_REQUEST_V2_SIZE) {
            a->kind = request.kind;
            a->permits = request.kind == DLOCK_HOLD_PERMIT ? request.permits : 0;
        }
        a->dir = a->kind == DLOCK_HOLD_PERMIT ? semaphore_dir_of(request.name) : dir_of(request.name);
        a->blockers_end = prefix_end(a->dir);
        if (a->kind == DLOCK_HOLD_SHARED) a->blockers_end = a->dir + shared_mark.substr(0, 1);
        if (a->kind == DLOCK_HOLD_PERMIT) a->limit_key = a->dir.substr(0, a->dir.size() - 1);
        a->stem = a->dir + (a->kind == DLOCK_HOLD_SHARED ? shared_mark : std::string()) + lease_hex(a->s->id);
        a->suffix = take_suffix(a->stem);
        a->key = fmt::format("{}-{:x}", a->stem, a->suffix);
        a->tombstone = tombstone_of(a->key);
        a->owner = request.owner;
        a->host_lease = request.host_lease;
        try {
            return acquire_with(a, request, out_hold, grant);
        } catch (const failure& f) {
            // The session's lease vanished on the server before the keepalive told us: once more
            // with a new session.
            if (attempt == 0 && f.message.find("requested lease not found") != std::string::npos) {
                sessions->forget(a->s, DLOCK_BACKEND, "the server no longer has it (expired or revoked)");
                continue;
            }
            // Every member refused the enqueue as unavailable: a stall or an election, not an
            // answer about the lock. An acquire that may still wait tries again (a new key; the
            // old one, if its put is in doubt, is being cleaned up) until its deadline, and
            // then says TIMEOUT with the last reason. A try-once answers what it got.
            if (a->enqueue_unavailable && !try_once && !interrupted) {
                constexpr int64_t pause_ns = 50 * ns_per_ms;
                if (request.deadline_ns != forever_ns && now_ns() + pause_ns >= request.deadline_ns)
                    fail(DLOCK_TIMEOUT, fmt::format("etcd: lock `{}` not acquired before the deadline; the last "
                                                    "attempt: {}", request.name, f.message));
                if (!warned_unavailable) log(2, f.message + "; retrying until the acquire's deadline");
                warned_unavailable = true;
                std::this_thread::sleep_for(std::chrono::nanoseconds(pause_ns));
                if (interrupted) fail(DLOCK_CANCELLED, "etcd: the client is closing");
                continue;
            }
            throw;
        }
    }
}

int dlock_backend::acquire_with(const std::shared_ptr<acquisition>& a, const dlock_acquire_request& request, dlock_hold** out_hold,
                 dlock_grant* grant) {
    pb::TxnRequest enqueue;
    compare_create_revision(enqueue, a->key, 0);
    compare_create_revision(enqueue, a->tombstone, 0);  // never after a clean-up (see retire_key)
    const std::string limit_text = std::to_string(a->permits);
    if (a->kind == DLOCK_HOLD_PERMIT) {
        pb::Compare* c = enqueue.add_compare();
        c->set_result(pb::Compare::EQUAL);
        c->set_target(pb::Compare::VALUE);
        c->set_key(a->limit_key);
        c->set_value(limit_text);
    }
    pb::PutRequest* put = enqueue.add_success()->mutable_request_put();
    put->set_key(a->key);
    put->set_value(a->owner);
    put->set_lease(a->s->id);
    // The keys that decide whether we hold: the one just before ours (exclusive: ours and the
    // newest before it; shared: the newest exclusive key, ours not among them), or for a permit
    // ours and up to N + 1 before it (whether N are before ours, and which is just before it).
    const int64_t queue_limit = a->kind == DLOCK_HOLD_PERMIT ? int64_t(a->permits) + 2 : a->kind == DLOCK_HOLD_SHARED ? 1 : 2;
    fill_queue_range(*enqueue.add_success()->mutable_request_range(), a->dir, a->blockers_end, 0, queue_limit);
    if (a->kind == DLOCK_HOLD_PERMIT) {
        // Touch the limit (same value): a release that found the semaphore idle deletes the limit
        // only if nobody touched it since (see forget_idle_limit).
        pb::PutRequest* touch = enqueue.add_success()->mutable_request_put();
        touch->set_key(a->limit_key);
        touch->set_value(limit_text);
    }
    enqueue.add_failure()->mutable_request_range()->set_key(a->key);
    if (a->kind == DLOCK_HOLD_PERMIT) {
        enqueue.add_failure()->mutable_request_range()->set_key(a->limit_key);
        // No permit key in the directory (no holder, no waiter): the stored limit, if any, binds
        // nobody; store ours and enqueue in the same round trip (a nested Txn). A limit left by
        // holders that died without releasing is replaced here, never while a key of the old N
        // is left.
        pb::TxnRequest* first = enqueue.add_failure()->mutable_request_txn();
        compare_create_revision(*first, a->key, 0);
        compare_create_revision(*first, a->tombstone, 0);
        compare_create_revision(*first, a->dir, 0);
        first->mutable_compare(first->compare_size() - 1)->set_range_end(prefix_end(a->dir));
        *first->add_success()->mutable_request_put() = *put;
        *first->add_success() = enqueue.success(1);  // the queue range
        pb::PutRequest* limit = first->add_success()->mutable_request_put();
        limit->set_key(a->limit_key);
        limit->set_value(limit_text);
        // Not empty: how many keys it holds, for the refusal below (read only when nothing is put).
        pb::RangeRequest* count = first->add_failure()->mutable_request_range();
        count->set_key(a->dir);
        count->set_range_end(prefix_end(a->dir));
        count->set_count_only(true);
    }
    pb::TxnResponse response;
    int64_t unanswered = 0;
    try {
        conn->call("acquire", [&](member& m, grpc::ClientContext& context) { return m.kv->Txn(&context, enqueue, &response); },
                   acquire_call(*a, &unanswered));
        if (a->kind == DLOCK_HOLD_PERMIT && !response.succeeded() && response.responses(0).response_range().kvs_size() == 0 &&
            !response.responses(2).response_txn().succeeded()) {
            // Nothing put: a permit key is in the directory, and the stored limit is another or
            // absent. Absent beside permit keys (deleted by hand: dlock deletes it only when the
            // directory is empty, and every enqueue touches it), their N is unknown: storing ours
            // beside them could admit more than their N, so refuse until the directory is empty
            // (the nested Txn then stores ours).
            const auto& stored = response.responses(1).response_range().kvs();
            const auto& nested = response.responses(2).response_txn();
            const int64_t present = nested.responses_size() > 0 ? nested.responses(0).response_range().count() : 0;
            if (stored.empty())
                fail(DLOCK_BACKEND,
                     fmt::format("etcd: semaphore `{}`: its limit key `{}` is missing while {} permit key(s) are under `{}` (the "
                                 "limit was deleted by hand?); their limit is unknown, so no permit is granted beside them: "
                                 "wait until they are released or expire (the next acquire then stores its limit), or break "
                                 "the semaphore (`dlock break --semaphore {}`)",
                                 a->name, a->limit_key, present, a->dir, a->name));
            if (stored[0].value() != limit_text)
                fail(DLOCK_INVALID_ARGUMENT,
                     fmt::format("etcd: semaphore `{}` has the limit {} stored (key `{}`); this acquire asked for {} "
                                 "permits: every client of a semaphore must use the same limit", a->name,
                                 stored[0].value(), a->limit_key, a->permits));
            // The limit matches and our key is absent: only the compare on its tombstone can have
            // failed (a key of this name was cleaned up before, which a new key's suffix rules out).
            fail(DLOCK_BACKEND, fmt::format("etcd: semaphore `{}`: the enqueue of `{}` was refused: a tombstone `{}` exists for it",
                                            a->name, a->key, a->tombstone));
        }
    } catch (...) {
        try {
            throw;
        } catch (const failure& f) {
            a->enqueue_unavailable = f.status == DLOCK_UNAVAILABLE;
        } catch (...) {
        }
        // An attempt without an answer may have put the key, or may still put it: clean up,
        // in the background (the members are not answering). Refused outright: nothing was put.
        if (unanswered != 0) {
            a->put_in_doubt = true;
            abandon(a, 0, true);
        }
        throw;
    }
    a->put_in_doubt = unanswered != 0;
    try {
        return queue_and_wait(a, request, response, out_hold, grant);
    } catch (...) {
        // Whatever failed after the put, our key must go: left on the live session lease it
        // would hold or block the lock until the client closes. The failures that end the
        // acquire by design have deleted it already; the rest are failed calls.
        bool abandoned;
        {
            dlock::plugin_kit::lock_guard lock(state_mutex);
            abandoned = a->gone;
        }
        if (!abandoned) abandon(a, 0, true);
        throw;
    }
}

int dlock_backend::queue_and_wait(const std::shared_ptr<acquisition>& a, const dlock_acquire_request& request,
                   const pb::TxnResponse& response, dlock_hold** out_hold, dlock_grant* grant) {
    std::string predecessor;
    int64_t seen_at = response.header().revision();
    // Our key was put by the enqueue Txn, or by its nested Txn that stored the semaphore's limit too.
    const bool first_of_semaphore = !response.succeeded() && a->kind == DLOCK_HOLD_PERMIT && response.responses_size() > 2 &&
                                    response.responses(2).response_txn().succeeded();
    if (response.succeeded() || first_of_semaphore) {
        a->revision = response.header().revision();
        const auto& queue = (first_of_semaphore ? response.responses(2).response_txn() : response).responses(1).response_range().kvs();
        if (a->kind == DLOCK_HOLD_PERMIT) {
            // Ours (first) and up to N + 1 keys before it.
            const int64_t before = int64_t(queue.size()) - 1, n = int64_t(a->permits);
            if (before == n) predecessor = a->dir;
            else if (before > n) predecessor = queue[1].key();
        } else if (a->kind == DLOCK_HOLD_SHARED) {
            if (!queue.empty()) predecessor = queue[0].key();  // the newest exclusive key, created before ours
        } else if (queue.size() >= 2 && queue[0].create_revision() == a->revision) {
            predecessor = queue[1].key();
        }
    } else {
        // A repeated request: the key exists; learn its revision, then what is before it.
        const auto& mine = response.responses(0).response_range().kvs();
        if (mine.empty()) fail(DLOCK_BACKEND, fmt::format("etcd: key `{}` neither created nor found", a->key));
        a->revision = mine[0].create_revision();
        if (!next_in_queue(a, predecessor, seen_at)) {
            abandon(a, 0);
            fail(DLOCK_BACKEND, fmt::format("etcd: queue key `{}` of lock `{}` vanished while acquiring", a->key, a->name));
        }
    }
    if (predecessor.empty()) {
        // A repeated request's key may have had a permit waiter behind it already: wake it.
        if (!response.succeeded() && !first_of_semaphore && a->kind == DLOCK_HOLD_PERMIT) touch_own_key(a);
        return become_holder(a, out_hold, grant);
    }
    if (request.deadline_ns == 0) {
        abandon(a, 0);
        fail(DLOCK_TIMEOUT, fmt::format("etcd: lock `{}` is taken (queue `{}`)", a->name, a->dir));
    }
    // The own-key watch is made by wait_in_queue, right after the first watch on the predecessor.
    {
        dlock::plugin_kit::lock_guard lock(state_mutex);
        queued.insert(a);
    }
    if (!sessions->alive(*a->s)) {
        dlock::plugin_kit::lock_guard signal(a->m);
        a->session_ended = true;
        a->session_status = DLOCK_UNAVAILABLE;
        a->session_reason = "it ended before the wait began";
    }
    return wait_in_queue(a, request, predecessor, seen_at, out_hold, grant);
}

bool dlock_backend::next_in_queue(const std::shared_ptr<acquisition>& a, std::string& predecessor, int64_t& seen_at) {
    pb::TxnRequest check;
    compare_create_revision(check, a->key, a->revision);
    const bool permit = a->kind == DLOCK_HOLD_PERMIT;
    fill_queue_range(*check.add_success()->mutable_request_range(), a->dir, a->blockers_end, a->revision,
                     permit ? int64_t(a->permits) + 1 : 1);
    pb::TxnResponse response;
    conn->call("check the lock queue", [&](member& m, grpc::ClientContext& context) { return m.kv->Txn(&context, check, &response); },
               acquire_call(*a));
    if (!response.succeeded()) return false;
    const auto& before = response.responses(0).response_range().kvs();
    if (permit) {
        // Fewer than N keys before ours: we hold; exactly N: the first waiter, woken by any
        // deletion in the directory; more: woken by the key just before ours (see etcd_backend.hpp).
        const int64_t count = before.size(), n = a->permits;
        predecessor = count < n ? std::string() : count == n ? a->dir : before[0].key();
    } else {
        predecessor = before.empty() ? std::string() : before[0].key();
    }
    seen_at = response.header().revision();
    return true;
}

int64_t dlock_backend::watch_predecessor(const std::shared_ptr<acquisition>& a, const std::string& predecessor, bool another,
                                         bool and_own_key) {
    uint64_t on, number;
    {
        dlock::plugin_kit::lock_guard signal(a->m);
        if (!another) {
            ++a->predecessor_number;
            a->predecessor_gone = a->predecessor_reset = false;
        }
        on = a->predecessor_number;
        number = ++a->newest_watch;
        a->watch_created = a->watch_progress = false;
    }
    // A watch cancelled while its callback runs may still signal: the numbers tell it apart.
    // tell_waiter calls `set` with the acquisition's `m` held (the setters below opt out of the
    // analysis, which cannot name a lambda parameter's mutex at the call through `set`).
    std::weak_ptr<acquisition> weak = a;
    auto tell_waiter = [weak, on, number](bool newest_only, auto set) {
        if (auto locked = weak.lock()) {
            dlock::plugin_kit::lock_guard guard(locked->m);
            if (locked->predecessor_number != on || (newest_only && locked->newest_watch != number)) return;
            set(*locked);
            locked->cv.notify_all();
        }
    };
    // A permit's first waiter waits for a deletion anywhere in the semaphore's directory; a later
    // one for the deletion of the key just before its own, or its touch (see etcd_backend.hpp).
    const bool permit = a->kind == DLOCK_HOLD_PERMIT;
    const std::string range_end = permit && predecessor == a->dir ? prefix_end(a->dir) : std::string();
    const bool with_puts = permit && predecessor != a->dir;
    auto on_progress = [tell_waiter](int64_t revision) {
        tell_waiter(true, [revision](acquisition& w) DLOCK_NO_THREAD_SAFETY_ANALYSIS {
            w.watch_progress = true;
            w.watch_progress_at = revision;
        });
    };
    const int64_t id = watches->watch_deletion(
        predecessor, 0,
        [tell_waiter](watch_event e) {
            tell_waiter(false, [e](acquisition& w) DLOCK_NO_THREAD_SAFETY_ANALYSIS { (e == watch_event::reset ? w.predecessor_reset : w.predecessor_gone) = true; });
        },
        [tell_waiter](int64_t revision) {
            tell_waiter(true, [revision](acquisition& w) DLOCK_NO_THREAD_SAFETY_ANALYSIS {
                w.watch_created = true;
                w.watch_created_at = revision;
            });
        },
        and_own_key ? watcher::progress_callback() : watcher::progress_callback(on_progress), range_end, with_puts);
    // etcd reads the revision of a created answer before it registers the watch, and handles a
    // stream's requests in order: the own-key watch's created answer is the server's revision
    // after this watch was registered, as a progress answer would be (and a broken stream creates
    // both again in that order). Its start revision, our key's creation, makes it report any
    // deletion of our key since.
    if (and_own_key) watch_own_key(a, a->revision + 1, on_progress);
    return id;
}

int dlock_backend::wait_in_queue(const std::shared_ptr<acquisition>& a, const dlock_acquire_request& request, std::string predecessor,
                  int64_t seen_at, dlock_hold** out_hold, dlock_grant* grant) {
    std::vector<int64_t> predecessor_watches;  // on `predecessor`, the newest last
    bool watch_covers = false;   // the newest watch delivers every deletion after seen_at
    bool watch_settled = false;  // the newest watch is synced, or no other will be made
    bool own_watched = false;    // our own key's watch is made (with the first predecessor watch)
    auto cancel_watches = [&] {
        for (const int64_t id : predecessor_watches) watches->cancel(id);
        predecessor_watches.clear();
    };
    try {
        for (;;) {
            if (predecessor_watches.empty()) {
                predecessor_watches.push_back(watch_predecessor(a, predecessor, false, !own_watched));
                own_watched = true;
                watch_covers = watch_settled = false;
            }
            bool rewatch_own = false, watch_fired = false;
            {
                dlock::plugin_kit::unique_lock lock(a->m);
                auto woken = [&]() DLOCK_REQUIRES(a->m) {
                    return a->signalled() || (!watch_covers && a->watch_created) ||
                           (watch_covers && !watch_settled && a->watch_progress);
                };
                if (request.deadline_ns == forever_ns) a->cv.wait(lock.std(), woken);
                else a->cv.wait_until(lock.std(), steady_time(request.deadline_ns), woken);
                if (a->cancelled) {
                    lock.unlock();
                    abandon(a, 0);
                    fail(DLOCK_CANCELLED, "etcd: the client is closing");
                }
                if (a->session_ended) {
                    const int status = a->session_status == DLOCK_BACKEND ? DLOCK_BACKEND : DLOCK_UNAVAILABLE;
                    const std::string why = a->session_reason;
                    lock.unlock();
                    abandon(a, 0);
                    fail(status, fmt::format("etcd: session lease {} ended while waiting for lock `{}` ({}); not acquired",
                                             lease_hex(a->s->id), a->name, why));
                }
                if (a->own_gone) {
                    lock.unlock();
                    abandon(a, 0);
                    fail(DLOCK_BACKEND, fmt::format("etcd: queue key `{}` of lock `{}` was deleted while waiting (its "
                                                    "session lease was revoked, or someone deleted it); not acquired",
                                                    a->key, a->name));
                }
                if (!woken()) {  // the deadline passed
                    lock.unlock();
                    abandon(a, 0);
                    fail(DLOCK_TIMEOUT, fmt::format("etcd: lock `{}` not acquired before the deadline", a->name));
                }
                if (!a->signalled()) {
                    if (!watch_covers) {
                        // The newest watch is created.
                        watch_covers = true;
                        if (a->watch_created_at <= seen_at) continue;  // no revision between the read and the watch
                        // Otherwise read the queue again, below.
                    } else {
                        // The progress answer: a revision after the watch's creation means a write
                        // may have slipped in before its registration.
                        watch_settled = true;
                        if (a->watch_progress_at != a->watch_created_at && predecessor_watches.size() < max_predecessor_watches) {
                            lock.unlock();
                            predecessor_watches.push_back(watch_predecessor(a, predecessor, true));
                            watch_covers = watch_settled = false;
                        }
                        continue;
                    }
                }
                rewatch_own = a->own_reset;
                watch_fired = a->predecessor_gone || a->predecessor_reset;
                a->predecessor_gone = a->predecessor_reset = a->own_reset = false;
            }
            if (watch_fired) cancel_watches();
            // The predecessor went, or a watch ended, or our own key's watch did, or the newest
            // watch started after revisions the last read did not see: read the queue again.
            const std::string watched = predecessor;
            if (!next_in_queue(a, predecessor, seen_at)) {
                abandon(a, 0);
                fail(DLOCK_BACKEND, fmt::format("etcd: queue key `{}` of lock `{}` vanished while waiting (its session "
                                                "lease expired or was revoked, or someone deleted it); not acquired",
                                                a->key, a->name));
            }
            if (rewatch_own) watch_own_key(a, seen_at + 1);
            if (predecessor != watched) cancel_watches();
            if (predecessor.empty()) {
                if (a->kind == DLOCK_HOLD_PERMIT) touch_own_key(a);
                return become_holder(a, out_hold, grant);
            }
        }
    } catch (...) {
        // A call failed (or was cancelled) mid-wait: acquire_with deletes our key.
        cancel_watches();
        throw;
    }
}


void dlock_backend::touch_own_key(const std::shared_ptr<acquisition>& a) {
    try {
        touch_key(*a, acquire_call(*a));
    } catch (const failure& f) {
        // Not a failure of ours (the permit is held): the janitor touches again, without the
        // acquire's deadline, until it is done or the key is no longer ours.
        log(1, fmt::format("etcd: permit of semaphore `{}` held, but the next waiter could not be woken yet ({}); "
                           "retrying in the background", a->name, f.message));
        dlock::plugin_kit::lock_guard lock(state_mutex);
        touches.push_back(a);
        janitor_wake.notify_all();
    }
}

int dlock_backend::become_holder(const std::shared_ptr<acquisition>& a, dlock_hold** out_hold, dlock_grant* grant) {
    const int64_t valid_until = sessions->deadline(*a->s);
    const bool alive = sessions->alive(*a->s) && valid_until > now_ns();
    bool key_gone = false;
    if (alive) {
        dlock::plugin_kit::lock_guard lock(state_mutex);
        {
            dlock::plugin_kit::lock_guard signal(a->m);
            key_gone = a->own_gone;
        }
        if (!key_gone) {
            queued.erase(a);
            a->held = true;
            a->registered = true;
            a->valid_until_ns = valid_until;
            ++holds_made;
            int64_t due = valid_until;
            if (a->own_watch == 0) {
                // A holder that never waited gets its own-key watch from the janitor a little
                // later: a short critical section then costs no watch at all, and the watch,
                // starting at our key's creation, still reports a deletion made in between.
                const int64_t delay = std::clamp<int64_t>(a->s->ttl_s * 1'000'000'000 / 10, 10 * ns_per_ms, max_own_watch_delay_ns);
                a->own_watch_due_ns = now_ns() + delay;
                due = std::min(due, a->own_watch_due_ns + delay);
            }
            holds.insert(a);
            if (due < janitor_wakes_at) janitor_wake.notify_all();
        }
    }
    if (!alive || key_gone) {
        abandon(a, 0);
        fail(alive ? DLOCK_BACKEND : DLOCK_UNAVAILABLE,
             fmt::format("etcd: lock `{}` reached the head of its queue, but {}; not acquired", a->name,
                         alive ? "its key was deleted meanwhile" : "its session lease ended meanwhile"));
    }
    grant->fencing_token = uint64_t(a->revision);
    grant->valid_until_ns = valid_until;
    grant->ttl_ms = a->s->ttl_s * 1000;
    *out_hold = new dlock_hold{a};
    return DLOCK_OK;
}
