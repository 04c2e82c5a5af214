// Lock names → ZooKeeper path elements, and the queue nodes under a lock's node.
#include "zookeeper_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

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

std::string queue_node_prefix(const std::string& guid) { return "_c_" + guid + "-lock-"; }

std::optional<queue_entry> parse_queue_node(const std::string& node) {
    static const std::string marker = "-lock-";
    if (node.rfind("_c_", 0) != 0) return std::nullopt;
    const size_t at = node.rfind(marker);
    if (at == std::string::npos || at < 3) return std::nullopt;
    const std::string digits = node.substr(at + marker.size());
    if (digits.empty()) return std::nullopt;
    char* end = nullptr;
    const long long sequence = std::strtoll(digits.c_str(), &end, 10);
    if (*end) return std::nullopt;
    return queue_entry{node, node.substr(3, at - 3), sequence};
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
