// The etcd backend's keys (see etcd_backend.hpp): a name's directory, key suffixes, deleting a
// queue key (retire_key), telling the host about a hold, the own-key watch, and the permit's touch.
// Shared by the acquisition (lock_queue.cpp), the holds (holds.cpp), the janitor and admin.
#include "etcd_backend.hpp"
#include "keys.hpp"
#include "names.hpp"

#include <fmt/format.h>

#include <utility>

namespace dlock::etcd {

void fill_queue_range(pb::RangeRequest& range, const std::string& dir, const std::string& end, int64_t before_revision,
                      int64_t limit) {
    range.set_key(dir);
    range.set_range_end(end);
    range.set_sort_target(pb::RangeRequest::CREATE);
    range.set_sort_order(pb::RangeRequest::DESCEND);
    range.set_limit(limit);
    range.set_keys_only(true);
    if (before_revision > 0) range.set_max_create_revision(before_revision - 1);
}

void compare_create_revision(pb::TxnRequest& txn, const std::string& key, int64_t revision) {
    pb::Compare* c = txn.add_compare();
    c->set_result(pb::Compare::EQUAL);
    c->set_target(pb::Compare::CREATE);
    c->set_key(key);
    c->set_create_revision(revision);
}

}  // namespace dlock::etcd

std::string dlock_backend::dir_of(const char* name) const { return config.key_prefix + escape_name(name) + "/"; }

std::string dlock_backend::semaphore_dir_of(const char* name) const {
    return config.key_prefix + semaphores_part + escape_name(name) + "/";
}

std::string dlock_backend::escape(const char* name) { return escape_name(name); }

uint64_t dlock_backend::take_suffix(const std::string& stem) {
    dlock::plugin_kit::lock_guard lock(suffixes_mutex);
    auto it = free_suffixes.find(stem);
    if (it == free_suffixes.end() || it->second.empty()) return ++suffixes_made;
    const uint64_t suffix = it->second.back();
    it->second.pop_back();
    return suffix;
}

void dlock_backend::give_back_suffix(const acquisition& a) {
    dlock::plugin_kit::lock_guard lock(suffixes_mutex);
    if (free_suffixes.size() >= max_free_stems && free_suffixes.find(a.stem) == free_suffixes.end()) free_suffixes.clear();
    free_suffixes[a.stem].push_back(a.suffix);
}

void dlock_backend::push(const std::shared_ptr<acquisition>& a, int state, int64_t valid_until_ns) {
    dlock::plugin_kit::lock_guard notifying(notify_mutex);
    {
        dlock::plugin_kit::lock_guard lock(state_mutex);
        if (!a->registered) return;
        if (state != DLOCK_LEASE_LOST && a->gone) return;
    }
    if (host.hold_state_changed) host.hold_state_changed(host.context, a->host_lease, state, valid_until_ns);
}

bool dlock_backend::retire_key(const std::string& key, int64_t revision, const std::string& tombstone, int64_t lease, const char* what,
                call_options options, semaphore_after* after) {
    pb::TxnRequest txn;
    if (revision > 0) compare_create_revision(txn, key, revision);
    txn.add_success()->mutable_request_delete_range()->set_key(key);
    if (!tombstone.empty()) {
        for (pb::RequestOp* op : {txn.add_success(), txn.add_failure()}) {
            pb::PutRequest* put = op->mutable_request_put();
            put->set_key(tombstone);
            put->set_value(key);
            put->set_lease(lease);
        }
    }
    if (after) {
        // After the delete, in the same Txn: whether any permit key is left, and the limit.
        const std::string dir = key.substr(0, key.rfind('/') + 1);
        pb::RangeRequest* left = txn.add_success()->mutable_request_range();
        left->set_key(dir);
        left->set_range_end(prefix_end(dir));
        left->set_count_only(true);
        txn.add_success()->mutable_request_range()->set_key(dir.substr(0, dir.size() - 1));
    }
    pb::TxnResponse response;
    try {
        conn->call(what, [&](member& m, grpc::ClientContext& context) { return m.kv->Txn(&context, txn, &response); }, options);
    } catch (const failure& f) {
        if (!tombstone.empty() && f.message.find("requested lease not found") != std::string::npos) return false;
        throw;
    }
    const bool deleted = response.succeeded() && response.responses_size() >= 1 &&
                         response.responses(0).response_delete_range().deleted() == 1;
    if (after && response.succeeded() && response.responses_size() >= 2) {
        const int n = response.responses_size();
        const auto& limit = response.responses(n - 1).response_range().kvs();
        after->idle = response.responses(n - 2).response_range().count() == 0;
        after->limit_mod_revision = limit.empty() ? 0 : limit[0].mod_revision();
    }
    return deleted;
}

void dlock_backend::own_key_event(const std::weak_ptr<acquisition>& weak, watch_event event) {
    const std::shared_ptr<acquisition> a = weak.lock();
    if (!a) return;
    bool lost = false;
    {
        dlock::plugin_kit::lock_guard lock(state_mutex);
        a->own_watch = 0;  // fired: nothing to cancel
        if (a->held) {
            if (a->releasing || a->gone) return;
            if (event == watch_event::deleted) {
                a->gone = true;
                // A release attempt that got no answer, sent while the lock was ours, deleted it.
                a->released_unanswered = a->release_unanswered_ns != 0 && a->release_unanswered_ns < a->valid_until_ns;
                lost = !a->released_unanswered;
            } else {
                rechecks.push_back(a);
                janitor_wake.notify_all();
            }
        } else {
            dlock::plugin_kit::lock_guard signal(a->m);
            (event == watch_event::deleted ? a->own_gone : a->own_reset) = true;
            a->cv.notify_all();
        }
    }
    if (lost) {
        log(2, fmt::format("etcd: {} `{}` lost: its key `{}` was deleted (session lease revoked or expired on "
                           "the server, or deleted by someone else)", a->kind == DLOCK_HOLD_PERMIT ? "semaphore" : "lock",
                           a->name, a->key));
        push(a, DLOCK_LEASE_LOST, 0);
    }
}

int64_t dlock_backend::watch_own_key(const std::shared_ptr<acquisition>& a, int64_t from_revision, watcher::created_callback on_created) {
    std::weak_ptr<acquisition> weak = a;
    const int64_t id =
        watches->watch_deletion(a->key, from_revision, [this, weak](watch_event e) { own_key_event(weak, e); }, std::move(on_created));
    dlock::plugin_kit::lock_guard lock(state_mutex);
    a->own_watch = id;
    return id;
}

void dlock_backend::touch_key(const acquisition& a, call_options options) {
    pb::TxnRequest touch;
    compare_create_revision(touch, a.key, a.revision);
    pb::PutRequest* put = touch.add_success()->mutable_request_put();
    put->set_key(a.key);
    put->set_value(a.owner);
    put->set_lease(a.s->id);
    pb::TxnResponse response;
    conn->call("wake the next permit waiter", [&](member& m, grpc::ClientContext& context) { return m.kv->Txn(&context, touch, &response); },
               options);
}
