// The `zookeeper` backend's admin entry points: holders, list and break. Each reads through one
// admin_reader, which syncs first (a member serves reads from its own copy, which may lag a write
// the leader already acknowledged to another client), then lists queues and reads their holders'
// nodes in pipelined round trips.
#include "zookeeper_backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace dlock::zk {

namespace {

// A holder's node: its queue entry and its czxid (the holder's fencing token).
struct holder_node {
    queue_entry entry;
    uint64_t czxid = 0;
};

struct holders_of_node {
    std::vector<holder_node> holders;
    uint32_t permits = 0;  // a semaphore's stored limit (0: none stored)
};

class admin_reader {
public:
    // Syncs first: every read after it reflects every write the leader committed before this
    // call, whichever member the session reads from (a holder released or broken through another
    // member is not listed).
    explicit admin_reader(dlock_backend& b)
        : b_(b), w_(b), s_(b.connected_session(w_, now_ns() + b.config().connect_timeout_ms * ns_per_ms, false)) {
        auto synced = b_.sync(*s_);
        await({synced.get()}, "syncing with the leader");
        check(synced->rc, "syncing with the leader");
    }

    // The holders of the lock or semaphore whose node is `node`: by the recipe's rules (the head
    // when it is a writer, else every reader before the first writer; a semaphore's N lowest), each
    // read back for its czxid (one pipelined round trip); a holder gone meanwhile is left out.
    holders_of_node holders(const std::string& node, bool semaphore) {
        holders_of_node out;
        auto listed = b_.children(*s_, node);
        auto data = semaphore ? b_.get(*s_, node) : listed;
        await({listed.get(), data.get()}, "listing " + node);
        if (listed->rc == ZNONODE) return out;
        check(listed->rc, "listing " + node);
        const auto queue = queue_of(listed->names);
        std::vector<const queue_entry*> holding;
        if (semaphore) {
            if (data->rc == ZOK) out.permits = uint32_t(std::strtoul(data->text.c_str(), nullptr, 10));
            for (size_t i = 0; i < queue.size() && (out.permits == 0 || i < out.permits); ++i) holding.push_back(&queue[i]);
        } else if (!queue.empty() && !queue.front().shared) {
            holding.push_back(&queue.front());
        } else {
            for (const auto& e : queue) {
                if (!e.shared) break;
                holding.push_back(&e);
            }
        }
        std::vector<call_ptr> stats;
        for (const queue_entry* e : holding) stats.push_back(b_.exists(*s_, join_path(node, e->node)));
        for (size_t i = 0; i < holding.size(); ++i) {
            await({stats[i].get()}, "reading " + holding[i]->node);
            if (stats[i]->rc == ZNONODE) continue;
            check(stats[i]->rc, "reading " + join_path(node, holding[i]->node));
            out.holders.push_back({*holding[i], uint64_t(stats[i]->stat.czxid)});
        }
        return out;
    }

    // The children of `node` (none when it does not exist).
    std::vector<std::string> children(const std::string& node) {
        auto listed = b_.children(*s_, node);
        await({listed.get()}, "listing " + node);
        if (listed->rc == ZNONODE) return {};
        check(listed->rc, "listing " + node);
        return listed->names;
    }

    // Deletes the holders' nodes (pipelined); returns how many this call deleted.
    size_t remove(const std::string& node, const std::vector<holder_node>& holders) {
        std::vector<call_ptr> removals;
        for (const auto& h : holders) removals.push_back(b_.remove(*s_, join_path(node, h.entry.node)));
        size_t removed = 0;
        for (size_t i = 0; i < holders.size(); ++i) {
            const std::string path = join_path(node, holders[i].entry.node);
            if (!b_.await(w_, {removals[i].get()}, now_ns() + s_->timeout_ms() * ns_per_ms, false))
                fail(DLOCK_UNKNOWN, fmt::format("{}: deleting `{}` got no answer; {} holder node(s) deleted before it", b_.where(s_.get()),
                                                path, removed));
            const int rc = removals[i]->rc;
            if (rc == ZOK) ++removed;
            else if (rc == ZNOAUTH)
                fail(DLOCK_PERMISSION,
                     fmt::format("{}: permission denied deleting `{}`: breaking a lock needs DELETE on its node `{}`, which this client ({}) "
                                 "lacks; the node's ACL gives it to the identity that created it (see docs/backends/zookeeper.md)",
                                 b_.where(s_.get()), path, node,
                                 b_.config().user.empty() ? "unauthenticated" : "digest user `" + b_.config().user + "`"));
            else if (outcome_unknown(rc))
                fail(DLOCK_UNKNOWN, fmt::format("{}: deleting `{}` failed: {}; {} holder node(s) deleted before it", b_.where(s_.get()), path,
                                                zerror(rc), removed));
            else if (rc != ZNONODE)
                check(rc, "deleting " + path);
        }
        return removed;
    }

private:
    void await(std::initializer_list<call*> calls, const std::string& doing) {
        if (!b_.await(w_, calls, now_ns() + s_->timeout_ms() * ns_per_ms, false)) check(ZOPERATIONTIMEOUT, doing);
    }
    void check(int rc, const std::string& doing) {
        if (rc == ZOK) return;
        if (rc == ZNOAUTH)
            fail(DLOCK_PERMISSION, fmt::format("{}: permission denied {}: the node's ACL does not grant this client ({})", b_.where(s_.get()),
                                               doing, b_.config().user.empty() ? "unauthenticated" : "digest user `" + b_.config().user + "`"));
        fail(outcome_unknown(rc) || session_gone(rc) ? DLOCK_UNAVAILABLE : DLOCK_BACKEND,
             fmt::format("{}: {} failed: {}", b_.where(s_.get()), doing, zerror(rc)));
    }

    dlock_backend& b_;
    scoped_waiter w_;
    std::shared_ptr<session> s_;
};

// Visits each holder; false when the visitor asked to stop.
bool visit_holders(const std::string& name, bool semaphore, const holders_of_node& read, dlock_holder_visitor visit, void* user_data) {
    for (const auto& h : read.holders) {
        dlock_holder_info info{};
        info.struct_size = sizeof info;
        info.name = name.c_str();
        info.kind = semaphore ? DLOCK_HOLD_PERMIT : h.entry.shared ? DLOCK_HOLD_SHARED : DLOCK_HOLD_EXCLUSIVE;
        info.permits = semaphore ? read.permits : 0;
        const size_t n = std::min(h.entry.guid.size(), sizeof info.holder - 1);
        std::memcpy(info.holder, h.entry.guid.data(), n);
        info.fencing_token = h.czxid;
        info.ttl_left_ms = -1;  // bound to the holder's session, not to a ttl
        if (visit(&info, user_data) != 0) return false;
    }
    return true;
}

}  // namespace

int zk_holders(dlock_backend* b, const char* name, int semaphore, dlock_holder_visitor visit, void* user_data, dlock_plugin_error* error) {
    return guarded(error, "zookeeper", [&] {
        admin_reader reader(*b);
        visit_holders(name, semaphore != 0, reader.holders(node_of(b->config().base_path, name, semaphore != 0), semaphore != 0), visit, user_data);
        return DLOCK_OK;
    });
}

// Walks base_path: every child whose name unescapes is a lock, every child of the semaphores' node
// a semaphore; anything else (nodes dlock did not create) is skipped.
int zk_list(dlock_backend* b, const char* prefix, dlock_holder_visitor visit, void* user_data, dlock_plugin_error* error) {
    return guarded(error, "zookeeper", [&] {
        admin_reader reader(*b);
        const std::string base = b->config().base_path, wanted = prefix ? prefix : "";
        auto walk = [&](const std::string& parent, bool semaphore) {
            auto names = reader.children(parent);
            std::sort(names.begin(), names.end());
            for (const auto& element : names) {
                if (!semaphore && element == semaphores_node) continue;
                const auto name = unescape_name(element);
                if (!name || name->compare(0, wanted.size(), wanted) != 0) continue;
                if (!visit_holders(*name, semaphore, reader.holders(join_path(parent, element), semaphore), visit, user_data)) return false;
            }
            return true;
        };
        if (walk(base, false)) walk(join_path(base, semaphores_node), true);
        return DLOCK_OK;
    });
}

// Deletes every holder's node. Fenced by the recipe: every node still queued was created after
// every holder's, and a new one after the break, so the next holder's czxid is higher. A broken
// holder's watch reports it LOST (backend.cpp), its release answers LOST.
int zk_break(dlock_backend* b, const char* name, int semaphore, size_t* out_broken, dlock_plugin_error* error) {
    return guarded(error, "zookeeper", [&] {
        admin_reader reader(*b);
        const std::string node = node_of(b->config().base_path, name, semaphore != 0);
        const auto read = reader.holders(node, semaphore != 0);
        *out_broken = reader.remove(node, read.holders);
        if (*out_broken) b->log(1, fmt::format("{}: broke {} hold(s) of `{}`", b->where(nullptr), *out_broken, name));
        return DLOCK_OK;
    });
}

}  // namespace dlock::zk
