// The etcd backend's administration entries (see etcd_backend.hpp): the holders of a lock or a
// semaphore, every holder under a name prefix, an administrator's break, and forgetting the limit
// of a semaphore nobody uses any more.
#include "etcd_backend.hpp"
#include "names.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>

namespace {

bool is_hex(const std::string& text, size_t from, size_t to) {
    if (from >= to) return false;
    for (size_t i = from; i < to; ++i)
        if (!std::isxdigit(static_cast<unsigned char>(text[i]))) return false;
    return true;
}

// Whether `suffix` (a key's part after its directory) is a queue key: `<lease hex>-<suffix hex>`
// (dlock), `shared-<lease hex>-<suffix hex>` (dlock, shared) or `<lease hex>` (etcd's own mutex).
bool queue_key_suffix(const std::string& suffix, bool& shared) {
    const std::string& mark = dlock_backend::shared_mark;
    shared = suffix.compare(0, mark.size(), mark) == 0;
    const size_t from = shared ? mark.size() : 0;
    const size_t dash = suffix.find('-', from);
    if (dash == std::string::npos) return !shared && is_hex(suffix, from, suffix.size());
    return is_hex(suffix, from, dash) && is_hex(suffix, dash + 1, suffix.size());
}

// The keys of one directory, sorted by create_revision.
using queue = std::vector<const mvccpb::KeyValue*>;

struct holder {
    const mvccpb::KeyValue* kv;
    uint32_t kind;
};

// The holders among a lock's queue: its first key when exclusive, else every shared key before
// the first exclusive one.
std::vector<holder> lock_holders(const queue& keys, size_t dir_size) {
    std::vector<holder> out;
    for (const auto* kv : keys) {
        bool shared = false;
        queue_key_suffix(kv->key().substr(dir_size), shared);
        if (!shared) {
            if (out.empty()) out.push_back({kv, DLOCK_HOLD_EXCLUSIVE});
            break;
        }
        out.push_back({kv, DLOCK_HOLD_SHARED});
    }
    return out;
}

// The holders among a semaphore's permits: the first `limit` (all when the limit is unknown).
std::vector<holder> permit_holders(const queue& keys, uint32_t limit) {
    std::vector<holder> out;
    for (const auto* kv : keys) {
        if (limit != 0 && out.size() >= limit) break;
        out.push_back({kv, DLOCK_HOLD_PERMIT});
    }
    return out;
}

void sort_by_creation(queue& keys) {
    std::sort(keys.begin(), keys.end(), [](const auto* x, const auto* y) { return x->create_revision() < y->create_revision(); });
}

uint32_t parse_limit(const std::string& text) {
    try {
        const unsigned long value = std::stoul(text);
        return value <= UINT32_MAX ? uint32_t(value) : 0;
    } catch (...) {
        return 0;
    }
}

// Reads the keys [key, end), keys and values, sorted by create_revision; no limit.
pb::RangeResponse read_range(connection& conn, const std::string& key, const std::string& end, const char* what) {
    pb::RangeRequest range;
    range.set_key(key.empty() ? std::string(1, '\0') : key);  // etcd's "from the first key"
    range.set_range_end(end);
    range.set_sort_target(pb::RangeRequest::CREATE);
    range.set_sort_order(pb::RangeRequest::ASCEND);
    pb::RangeResponse response;
    conn.call(what, [&](member& m, grpc::ClientContext& context) { return m.kv->Range(&context, range, &response); });
    return response;
}

// Reports holders to `visit`, each lease's ttl read once. Returns false when the visitor stopped.
class reporter {
public:
    reporter(connection& conn, dlock_holder_visitor visit, void* user_data) : conn_(conn), visit_(visit), user_data_(user_data) {}

    bool report(const std::string& name, const holder& h, uint32_t permits) {
        dlock_holder_info info{};
        info.struct_size = sizeof info;
        info.name = name.c_str();
        info.kind = h.kind;
        info.permits = h.kind == DLOCK_HOLD_PERMIT ? permits : 0;
        const size_t n = std::min(h.kv->value().size(), sizeof info.holder - 1);
        std::memcpy(info.holder, h.kv->value().data(), n);
        info.holder[n] = '\0';
        info.fencing_token = uint64_t(h.kv->create_revision());
        info.ttl_left_ms = ttl_left_ms(h.kv->lease());
        return visit_(&info, user_data_) == 0;
    }

private:
    int64_t ttl_left_ms(int64_t lease) {
        if (lease == 0) return -1;
        auto it = ttl_.find(lease);
        if (it != ttl_.end()) return it->second;
        pb::LeaseTimeToLiveRequest ttl;
        ttl.set_id(lease);
        pb::LeaseTimeToLiveResponse left;
        conn_.call("read a holder's lease", [&](member& m, grpc::ClientContext& context) { return m.lease->LeaseTimeToLive(&context, ttl, &left); });
        const int64_t ms = left.ttl() >= 0 ? left.ttl() * 1000 : -1;  // etcd answers in whole seconds
        ttl_.emplace(lease, ms);
        return ms;
    }

    connection& conn_;
    dlock_holder_visitor visit_;
    void* user_data_;
    std::map<int64_t, int64_t> ttl_;
};

}  // namespace

namespace {

// The current holders of one lock or semaphore, read in one Txn (the directory and the limit).
struct name_holders {
    pb::TxnResponse response;  // owns what `holders` points to
    std::vector<holder> holders;
    uint32_t limit = 0;        // a semaphore's stored limit; 0: none or a lock

    name_holders(connection& conn, const std::string& dir, bool semaphore, const char* what) {
        pb::TxnRequest read;
        pb::RangeRequest* keys = read.add_success()->mutable_request_range();
        keys->set_key(dir);
        keys->set_range_end(prefix_end(dir));
        if (semaphore) read.add_success()->mutable_request_range()->set_key(dir.substr(0, dir.size() - 1));
        conn.call(what, [&](member& m, grpc::ClientContext& context) { return m.kv->Txn(&context, read, &response); });
        queue sorted;
        for (const auto& kv : response.responses(0).response_range().kvs()) {
            bool shared = false;
            if (queue_key_suffix(kv.key().substr(dir.size()), shared)) sorted.push_back(&kv);
        }
        sort_by_creation(sorted);
        if (semaphore && response.responses(1).response_range().kvs_size() > 0)
            limit = parse_limit(response.responses(1).response_range().kvs(0).value());
        holders = semaphore ? permit_holders(sorted, limit) : lock_holders(sorted, dir.size());
    }
};

}  // namespace

int dlock_backend::holders(const char* name, int semaphore, dlock_holder_visitor visit, void* user_data) {
    const name_holders found(*conn, semaphore ? semaphore_dir_of(name) : dir_of(name), semaphore != 0, "read the holders");
    reporter out(*conn, visit, user_data);
    const std::string shown = name;
    for (const holder& h : found.holders)
        if (!out.report(shown, h, found.limit)) break;
    return DLOCK_OK;
}

int dlock_backend::list(const char* prefix, dlock_holder_visitor visit, void* user_data) {
    const std::string escaped_prefix = escape(prefix ? prefix : "");
    struct directory {
        queue keys;
        uint32_t limit = 0;
    };
    // Escaped name → its directory; escaping keeps prefixes (byte by byte), so a range over the
    // escaped prefix holds exactly the names that start with `prefix`.
    std::map<std::string, directory> locks, semaphores;
    const std::string lock_start = config.key_prefix + escaped_prefix;
    const pb::RangeResponse lock_keys = read_range(*conn, lock_start, prefix_end(lock_start), "list the locks");
    for (const auto& kv : lock_keys.kvs()) {
        const std::string rest = kv.key().substr(config.key_prefix.size());
        // `%` then a lowercase letter: dlock's own parts (semaphores, tombstones), no lock's name.
        if (rest.size() >= 2 && rest[0] == '%' && std::islower(static_cast<unsigned char>(rest[1]))) continue;
        const size_t slash = rest.find('/');
        bool shared = false;
        if (slash == std::string::npos || !queue_key_suffix(rest.substr(slash + 1), shared)) continue;
        locks[rest.substr(0, slash)].keys.push_back(&kv);
    }
    const std::string semaphore_root = config.key_prefix + semaphores_part;
    const std::string semaphore_start = semaphore_root + escaped_prefix;
    const pb::RangeResponse semaphore_keys = read_range(*conn, semaphore_start, prefix_end(semaphore_start), "list the semaphores");
    for (const auto& kv : semaphore_keys.kvs()) {
        const std::string rest = kv.key().substr(semaphore_root.size());
        const size_t slash = rest.find('/');
        if (slash == std::string::npos) {
            semaphores[rest].limit = parse_limit(kv.value());  // the limit key
            continue;
        }
        bool shared = false;
        if (!queue_key_suffix(rest.substr(slash + 1), shared) || shared) continue;
        semaphores[rest.substr(0, slash)].keys.push_back(&kv);
    }
    reporter out(*conn, visit, user_data);
    std::string name;
    for (auto& [escaped, d] : locks) {
        if (!unescape_name(escaped, name)) continue;
        sort_by_creation(d.keys);
        for (const holder& h : lock_holders(d.keys, config.key_prefix.size() + escaped.size() + 1))
            if (!out.report(name, h, 0)) return DLOCK_OK;
    }
    for (auto& [escaped, d] : semaphores) {
        if (d.keys.empty() || !unescape_name(escaped, name)) continue;
        sort_by_creation(d.keys);
        for (const holder& h : permit_holders(d.keys, d.limit))
            if (!out.report(name, h, d.limit)) return DLOCK_OK;
    }
    return DLOCK_OK;
}

int dlock_backend::break_lock(const char* name, int semaphore, size_t* out_broken) {
    const std::string dir = semaphore ? semaphore_dir_of(name) : dir_of(name);
    const name_holders found(*conn, dir, semaphore != 0, "read the holders to break");
    // Each key is deleted only if it is still the one read: a holder that released meanwhile and a
    // key of the same name made since are left alone. Every later holder's key is created after
    // these, so its fencing token (create_revision) is higher.
    size_t broken = 0;
    for (const holder& h : found.holders) {
        pb::TxnRequest remove;
        pb::Compare* c = remove.add_compare();
        c->set_result(pb::Compare::EQUAL);
        c->set_target(pb::Compare::CREATE);
        c->set_key(h.kv->key());
        c->set_create_revision(h.kv->create_revision());
        remove.add_success()->mutable_request_delete_range()->set_key(h.kv->key());
        pb::TxnResponse removed;
        int64_t unanswered = 0;
        try {
            conn->call("break (delete a holder's key)", [&](member& m, grpc::ClientContext& context) { return m.kv->Txn(&context, remove, &removed); },
                       call_options{false, 0, forever_ns, DLOCK_TIMEOUT, &unanswered});
        } catch (const failure& f) {
            // The count is in the message only: the ABI leaves *out_broken untouched on failure. A
            // delete that got no answer may have happened: UNKNOWN, as for a release.
            if (broken > 0) log(2, fmt::format("etcd: broke {} {} `{}` before a failure", broken, semaphore ? "permit(s) of semaphore" : "hold(s) of lock", name));
            fail(unanswered != 0 ? DLOCK_UNKNOWN : f.status,
                 fmt::format("{}; the break of {} `{}` stopped after deleting {} of {} holder key(s){}; read the holders and "
                             "break again if needed (each delete is guarded by the key's create_revision)",
                             f.message, semaphore ? "semaphore" : "lock", name, broken, found.holders.size(),
                             unanswered != 0 ? ", and the delete that failed got no answer: it may have deleted one more" : ""));
        }
        if (removed.succeeded()) ++broken;
    }
    if (broken > 0)
        log(2, fmt::format("etcd: broke {} {} `{}`", broken, semaphore ? "permit(s) of semaphore" : "hold(s) of lock", name));
    if (semaphore) forget_idle_limit(dir, dir.substr(0, dir.size() - 1));
    if (out_broken) *out_broken = broken;
    return DLOCK_OK;
}

void dlock_backend::forget_limit(const std::string& limit_key, int64_t mod_revision) {
    // No permit key was left when `mod_revision` was read; an enqueue since would have moved it.
    pb::TxnRequest forget;
    pb::Compare* c = forget.add_compare();
    c->set_result(pb::Compare::EQUAL);
    c->set_target(pb::Compare::MOD);
    c->set_key(limit_key);
    c->set_mod_revision(mod_revision);
    forget.add_success()->mutable_request_delete_range()->set_key(limit_key);
    pb::TxnResponse forgotten;
    try {
        conn->call("forget the idle semaphore's limit",
                   [&](member& m, grpc::ClientContext& context) { return m.kv->Txn(&context, forget, &forgotten); });
    } catch (const failure& f) {
        log(2, fmt::format("etcd: could not forget the limit `{}` of an idle semaphore ({}); it stays until the next "
                           "release that leaves it idle", limit_key, f.message));
    }
}

void dlock_backend::forget_idle_limit(const std::string& dir, const std::string& limit_key) {
    try {
        pb::TxnRequest read;
        pb::RangeRequest* keys = read.add_success()->mutable_request_range();
        keys->set_key(dir);
        keys->set_range_end(prefix_end(dir));
        keys->set_count_only(true);
        read.add_success()->mutable_request_range()->set_key(limit_key);
        pb::TxnResponse response;
        conn->call("read whether the semaphore is idle",
                   [&](member& m, grpc::ClientContext& context) { return m.kv->Txn(&context, read, &response); });
        const auto& limit = response.responses(1).response_range().kvs();
        if (response.responses(0).response_range().count() != 0 || limit.empty()) return;
        forget_limit(limit_key, limit[0].mod_revision());
    } catch (const failure& f) {
        log(2, fmt::format("etcd: could not forget the limit `{}` of an idle semaphore ({}); it stays until the next "
                           "release that leaves it idle", limit_key, f.message));
    }
}
