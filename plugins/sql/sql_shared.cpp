// What both dialects share (sql_shared.hpp): the deadline watch, the epoll switch, DSN query keys and
// the stable hash.
#include "sql_shared.hpp"

#include <cerrno>
#include <sys/epoll.h>
#include <sys/socket.h>

namespace dlock::sql {

// ---- deadline_watch -----------------------------------------------------------------------------

deadline_watch::deadline_watch() { thread_ = std::thread([this] { run(); }); }

deadline_watch::~deadline_watch() {
    {
        plugin_kit::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
}

uint64_t deadline_watch::arm(int fd, int64_t deadline_ns) {
    plugin_kit::lock_guard lock(mutex_);
    const uint64_t ticket = next_ticket_++;
    entries_.emplace(ticket, entry{fd, deadline_ns, false});
    if (deadline_ns < wakes_at_ns_) {
        wakes_at_ns_ = deadline_ns;
        wake_.notify_one();
    }
    return ticket;
}

bool deadline_watch::disarm(uint64_t ticket) {
    plugin_kit::lock_guard lock(mutex_);
    auto it = entries_.find(ticket);
    if (it == entries_.end()) return false;
    const bool fired = it->second.fired;
    entries_.erase(it);
    return fired;
}

void deadline_watch::run() {
    plugin_kit::unique_lock lock(mutex_);
    while (!stopping_) {
        const int64_t now = now_ns();
        int64_t next = INT64_MAX;
        for (auto& [ticket, e] : entries_) {
            if (e.fired) continue;
            if (e.deadline_ns <= now) {
                ::shutdown(e.fd, SHUT_RDWR);  // under the mutex: never after disarm() returned
                e.fired = true;
            } else {
                next = std::min(next, e.deadline_ns);
            }
        }
        // With nothing pending, sleep on until the wake already planned: statements usually end
        // before this thread runs, and forgetting that plan would make the next arm() wake it again
        // — one context switch per statement. So it wakes at most once per client limit.
        if (next != INT64_MAX || wakes_at_ns_ <= now) wakes_at_ns_ = next;
        if (wakes_at_ns_ == INT64_MAX) wake_.wait(lock.std());
        else wake_.wait_until(lock.std(), std::chrono::steady_clock::time_point(std::chrono::nanoseconds(wakes_at_ns_)));
    }
}

std::string strip_query_keys(const std::string& dsn, const std::vector<std::string>& drop) {
    const size_t q = dsn.find('?');
    if (q == std::string::npos || dsn.find("://") == std::string::npos) return dsn;
    std::string kept;
    size_t start = q + 1;
    while (start <= dsn.size()) {
        size_t amp = dsn.find('&', start);
        if (amp == std::string::npos) amp = dsn.size();
        const std::string item = dsn.substr(start, amp - start);
        const std::string key = item.substr(0, item.find('='));
        if (!item.empty() && std::find(drop.begin(), drop.end(), key) == drop.end()) kept += (kept.empty() ? "" : "&") + item;
        start = amp + 1;
    }
    return dsn.substr(0, q) + (kept.empty() ? "" : "?" + kept);
}

namespace {

constexpr uint64_t fnv1a64_basis = 0xcbf29ce484222325ULL;

uint64_t fnv1a64(uint64_t h, const std::string& bytes) {
    for (unsigned char c : bytes) {
        h ^= c;
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t fmix64(uint64_t h) {  // MurmurHash3's finaliser
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

}  // namespace

uint64_t hash64(const std::string& bytes) { return fmix64(fnv1a64(fnv1a64_basis, bytes)); }

hash64_prefix::hash64_prefix(const std::string& prefix) : state_(fnv1a64(fnv1a64_basis, prefix)) {}

uint64_t hash64_prefix::operator()(const std::string& rest) const { return fmix64(fnv1a64(state_, rest)); }

void switch_epoll_watch(int epoll_fd, int fd, uint64_t id, bool on) {
    epoll_event ev{};
    ev.events = on ? EPOLLIN | EPOLLRDHUP : EPOLLONESHOT;
    ev.data.u64 = id;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &ev) != 0 && errno == ENOENT && on) epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
}

}  // namespace dlock::sql
