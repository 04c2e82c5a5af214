// Lock names → ZooKeeper path elements, and the queue nodes under a lock's node.
#include "names.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace dlock::zk {

namespace {

bool kept_as_is(unsigned char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '~' || (c == '.' && !first);
}

}  // namespace

std::string escape_name(std::string_view name) {
    static const char hex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(name.size() + 8);
    for (size_t i = 0; i < name.size(); ++i) {
        const auto c = static_cast<unsigned char>(name[i]);
        if (kept_as_is(c, i == 0)) {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    // `/zookeeper` is reserved at the root; escaping its first byte keeps the mapping one-to-one
    // (no other name yields "%7A…": a `%` of a name is itself escaped).
    if (out == "zookeeper") out = "%7Aookeeper";
    return out;
}

std::string path_problem(const std::string& path) {
    if (path.empty() || path[0] != '/') return "it must start with `/`";
    if (path.size() > 1 && path.back() == '/') return "it must not end with `/`";
    for (unsigned char c : path)
        if (c < 0x20 || c == 0x7f) return "it contains a control character";
    size_t start = 1;
    while (start <= path.size() && path.size() > 1) {
        const size_t end = std::min(path.find('/', start), path.size());
        const std::string element = path.substr(start, end - start);
        if (element.empty()) return "it has an empty element (`//`)";
        if (element == "." || element == "..") return "it has a `.` or `..` element";
        start = end + 1;
    }
    return "";
}

std::string join_path(const std::string& parent, const std::string& child) {
    return parent == "/" ? "/" + child : parent + "/" + child;
}

std::string node_of(const std::string& base_path, const std::string& name, bool semaphore) {
    return semaphore ? join_path(join_path(base_path, semaphores_node), escape_name(name)) : join_path(base_path, escape_name(name));
}

std::optional<std::string> unescape_name(std::string_view element) {
    auto hex_value = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    std::string out;
    out.reserve(element.size());
    for (size_t i = 0; i < element.size(); ++i) {
        const auto c = static_cast<unsigned char>(element[i]);
        if (c == '%') {
            if (i + 2 >= element.size()) return std::nullopt;
            const int high = hex_value(element[i + 1]), low = hex_value(element[i + 2]);
            if (high < 0 || low < 0) return std::nullopt;
            out += static_cast<char>(high * 16 + low);
            i += 2;
        } else if (kept_as_is(c, i == 0)) {
            out += static_cast<char>(c);
        } else {
            return std::nullopt;
        }
    }
    // Only the exact output of escape_name is accepted, so one node never stands for two names.
    if (out.empty() || escape_name(out) != element) return std::nullopt;
    return out;
}

namespace {

// The node name markers, each followed by the 10-digit sequence: dlock's (and Curator's
// InterProcessMutex's) exclusive nodes, and Curator's InterProcessReadWriteLock's writer and reader
// nodes. Writers of either spelling exclude each other and every reader.
struct marker {
    const char* text;
    bool shared;
};
const marker markers[] = {{"-lock-", false}, {"-__WRIT__", false}, {"-__READ__", true}};

// kazoo's Lock/WriteLock and ReadLock nodes: "<uuid hex>__lock__<sequence>", "<uuid hex>__rlock__<sequence>".
const marker kazoo_markers[] = {{"__lock__", false}, {"__rlock__", true}};

}  // namespace

std::string queue_node_prefix(const std::string& guid, node_kind kind) {
    switch (kind) {
        case node_kind::reader: return "_c_" + guid + "-__READ__";
        case node_kind::curator_writer: return "_c_" + guid + "-__WRIT__";
        case node_kind::exclusive: break;
    }
    return "_c_" + guid + "-lock-";
}

std::optional<queue_entry> parse_queue_node(const std::string& node) {
    if (node.rfind("_c_", 0) != 0) {
        for (const marker& m : kazoo_markers) {
            const size_t at = node.rfind(m.text);
            if (at == std::string::npos || at == 0) continue;
            const std::string digits = node.substr(at + std::strlen(m.text));
            if (digits.size() != 10 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
            return queue_entry{node, node.substr(0, at), std::strtoll(digits.c_str(), nullptr, 10), m.shared};
        }
        return std::nullopt;
    }
    for (const marker& m : markers) {
        const size_t at = node.rfind(m.text);
        if (at == std::string::npos || at < 3) continue;
        const std::string digits = node.substr(at + std::strlen(m.text));
        if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
        return queue_entry{node, node.substr(3, at - 3), std::strtoll(digits.c_str(), nullptr, 10), m.shared};
    }
    return std::nullopt;
}

std::vector<queue_entry> queue_of(const std::vector<std::string>& children) {
    std::vector<queue_entry> queue;
    queue.reserve(children.size());
    for (const auto& child : children)
        if (auto entry = parse_queue_node(child)) queue.push_back(std::move(*entry));
    std::sort(queue.begin(), queue.end(), [](const queue_entry& a, const queue_entry& b) { return a.sequence < b.sequence; });
    return queue;
}

}  // namespace dlock::zk
