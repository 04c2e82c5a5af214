// names.hpp — the pure part of the `zookeeper` plugin (no server, no client library): lock names
// to path elements and back, the queue nodes of a lock and their order, and where a node stands in
// its queue by the recipe of its kind. Built as dlock_zookeeper_recipe, which the plugin and the
// unit tests link (names.cpp, standing.cpp).
#pragma once

#include <dlock/plugin.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::zk {

// ---- names (names.cpp) ------------------------------------------------------------------------

// Maps a lock name (1..1024 bytes, validated by the host) to one ZooKeeper path element. Bytes
// [A-Za-z0-9_~-] and `.` (not first) are kept, every other byte becomes %XX, and the one name that
// would still be reserved, `zookeeper`, becomes `%7Aookeeper`. The mapping is a function whose
// result can be decoded back (a literal `%` is always escaped), so distinct names never share a node.
std::string escape_name(std::string_view name);
// The name escape_name mapped to `element`, or nullopt when no name maps to it (a node dlock did
// not create).
std::optional<std::string> unescape_name(std::string_view element);

// The child of base_path under which semaphores live, one node per semaphore name (escaped as
// above). No lock name escapes to it (a leading `.` is always escaped), so the two keyspaces never
// meet.
inline constexpr const char* semaphores_node = ".semaphores";

// Why `path` is not a valid absolute ZooKeeper path ("" when it is): it must start with `/`, have no
// empty, `.` or `..` element, no trailing `/` (except the root) and no control character.
std::string path_problem(const std::string& path);

// "parent/child" without doubling the `/` of the root.
std::string join_path(const std::string& parent, const std::string& child);

// One entry of a lock's (or a semaphore's) queue: a child named "_c_<guid>-lock-<sequence>" for an
// exclusive holder or a permit, "_c_<guid>-__READ__<sequence>" for a shared holder (the shapes of
// Curator's InterProcessMutex and InterProcessReadWriteLock; "-__WRIT__" is read as exclusive too).
// The guid is the acquisition's owner token.
struct queue_entry {
    std::string node;  // the child's name
    std::string guid;
    int64_t sequence = 0;
    bool shared = false;  // a reader
};
enum class node_kind {
    exclusive,       // "_c_<guid>-lock-": Curator's InterProcessMutex
    curator_writer,  // "_c_<guid>-__WRIT__": the write lock of Curator's InterProcessReadWriteLock
    reader,          // "_c_<guid>-__READ__": its read lock
};
std::string queue_node_prefix(const std::string& guid, node_kind kind = node_kind::exclusive);
std::optional<queue_entry> parse_queue_node(const std::string& node);
// The queue in sequence order; children of other shapes are ignored.
std::vector<queue_entry> queue_of(const std::vector<std::string>& children);

// The node of the lock `name` (semaphore = false) or of the semaphore `name`, under `base_path`.
std::string node_of(const std::string& base_path, const std::string& name, bool semaphore);

// ---- standing in the queue (standing.cpp) -----------------------------------------------------

// Where a node stands in its queue (sorted by sequence), by the recipe of its kind:
//   exclusive: it holds when it is the lowest of all (readers included); else it waits for the
//     node just before it;
//   shared: it holds when no writer has a lower sequence; else it waits for the nearest writer
//     before it (readers between do not matter to it);
//   permit (limit N): it holds when fewer than N nodes are before it; the first waiter (N before
//     it) waits on the semaphore node's children, as any holder's departure admits it; a later
//     waiter waits for the node just before it, which signals (a write to its data) when it is
//     admitted, so that each waiter wakes only when it becomes the first.
struct standing {
    bool admitted = false;
    const queue_entry* wait_on = nullptr;  // not admitted: the node to watch (null: the children)
    bool alone = false;                    // that node's deletion by itself admits us
    size_t ahead = 0;                      // nodes before ours
};

// Where the node at index `mine` of `queue` (in sequence order) stands, for a hold of `kind`
// (dlock_hold_kind) and, for a permit, a limit of `permits`. wait_on points into `queue`.
standing standing_in(const std::vector<queue_entry>& queue, size_t mine, uint32_t kind, uint32_t permits);

}  // namespace dlock::zk
