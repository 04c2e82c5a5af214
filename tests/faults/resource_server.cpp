// fenced_resource — the protected resource of the fault suite: a small server on a Unix-domain
// socket that the workers write to inside their critical sections. It judges what the lock alone
// cannot show: a write with a stale fencing token, and a lost update of a read-sleep-write counter.
//
//   fenced_resource SOCKET LOG
//
// Prints "ready" on stdout once it listens. One request per line, one answer per line; RES and
// OWNER are words without spaces (the suite's lock names and hex owner tokens):
//   write RES OWNER TOKEN   fenced write: accepted when TOKEN >= the highest token accepted for RES
//                           -> "accepted HIGHEST" | "rejected HIGHEST" (HIGHEST after the request)
//   read RES                -> "value V" (the counter of RES)
//   incr RES OWNER SEEN NEW the write half of a read-sleep-write increment: the counter becomes
//                           NEW; when it no longer held SEEN (the value this writer read), another
//                           writer wrote in between — a lost update -> "ok 0" | "ok 1" (1: lost)
//   fence RES OWNER TOKEN KIND N
//                           the fenced access of a shared holder (KIND s) or of a semaphore's permit
//                           (KIND p, N the limit). Tokens of shared holds and permits do not order
//                           the holders of one mode against each other, so:
//                             s: accepted when TOKEN >= the highest token accepted from an
//                                exclusive holder (`write`) — a reader is ordered after the writers;
//                             p: accepted when fewer than N distinct tokens above TOKEN were accepted
//                                for RES — N newer permits have written, so this one is stale.
//                           An exclusive `write` is accepted when TOKEN >= the highest token accepted
//                           of any kind. -> "accepted HIGHEST" | "rejected HIGHEST"
//   enter RES OWNER KIND N  the holder enters its critical section (KIND x, s or p; N: the limit of
//                           a semaphore, else 0): the resource's own census of who is inside. An
//                           enter is over the limit — a violation the resource confirms — when, with
//                           the holders already inside, KIND p finds N or more, KIND s finds an
//                           exclusive holder, KIND x finds anyone. -> "ok INSIDE" | "over INSIDE"
//                           (INSIDE: the holders inside, this one included)
//   leave RES OWNER         the holder left its critical section -> "ok"
//                           (a connection that closes leaves every section it entered: a killed
//                           worker is not inside any more)
//   report                  -> one JSON object: totals (see suite.hpp resource_report)
// Every write and incr is appended to LOG as a JSON line with its CLOCK_MONOTONIC time, owner,
// token and outcome, so the checkers can compare it with the workers' histories. A token accepted
// from two different owners of one RES is counted as shared (one writer per token).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "history.hpp"

namespace {

struct resource_state {
    uint64_t highest = 0;            // highest token accepted, of any kind
    uint64_t highest_exclusive = 0;  // highest token accepted from an exclusive `write`
    std::map<uint64_t, std::string> owner_of_token;
    int64_t counter = 0;
    struct occupant {
        std::string owner;
        char kind;
        int connection;
    };
    std::vector<occupant> inside;    // the census of enter/leave
};

class resource_store {
public:
    explicit resource_store(const std::string& log_path) : log_(std::fopen(log_path.c_str(), "ae")) {
        if (!log_) {
            std::perror("fenced_resource: log");
            std::exit(2);
        }
    }

    std::string handle(const std::string& line, int connection) {
        std::istringstream words(line);
        std::string verb, res, owner;
        words >> verb;
        std::lock_guard<std::mutex> guard(mutex_);
        if (verb == "write") {
            uint64_t token = 0;
            if (!(words >> res >> owner >> token)) return "error usage: write RES OWNER TOKEN";
            return write(res, owner, token);
        }
        if (verb == "fence") {
            uint64_t token = 0, limit = 0;
            std::string kind;
            if (!(words >> res >> owner >> token >> kind >> limit) || (kind != "s" && kind != "p"))
                return "error usage: fence RES OWNER TOKEN s|p N";
            return fence(res, owner, token, kind[0], limit);
        }
        if (verb == "enter") {
            std::string kind;
            uint64_t limit = 0;
            if (!(words >> res >> owner >> kind >> limit) || kind.size() != 1 || std::string("xsp").find(kind) == std::string::npos)
                return "error usage: enter RES OWNER x|s|p N";
            return enter(res, owner, kind[0], limit, connection);
        }
        if (verb == "leave") {
            if (!(words >> res >> owner)) return "error usage: leave RES OWNER";
            leave(res, [&](const resource_state::occupant& o) { return o.owner == owner; }, "left");
            return "ok";
        }
        if (verb == "read") {
            if (!(words >> res)) return "error usage: read RES";
            return "value " + std::to_string(resources_[res].counter);
        }
        if (verb == "incr") {
            int64_t seen = 0, next = 0;
            if (!(words >> res >> owner >> seen >> next)) return "error usage: incr RES OWNER SEEN NEW";
            return increment(res, owner, seen, next);
        }
        if (verb == "report") {
            nlohmann::json report = totals_;
            int64_t sum = 0;
            for (const auto& [name, r] : resources_) sum += r.counter;
            report["counter_value"] = sum;
            return report.dump();
        }
        return "error unknown request `" + verb + "`";
    }

    // A closed connection's worker is gone: it is inside no critical section any more.
    void connection_closed(int connection) {
        std::lock_guard<std::mutex> guard(mutex_);
        for (auto& [res, r] : resources_) {
            (void)r;
            leave(res, [connection](const resource_state::occupant& o) { return o.connection == connection; }, "closed");
        }
    }

private:
    std::string write(const std::string& res, const std::string& owner, uint64_t token) {
        auto& r = resources_[res];
        const bool accepted = token >= r.highest;
        if (accepted) r.highest_exclusive = token;
        return settle(res, r, owner, token, 'x', accepted);
    }

    std::string fence(const std::string& res, const std::string& owner, uint64_t token, char kind, uint64_t limit) {
        auto& r = resources_[res];
        bool accepted;
        if (kind == 's') {
            accepted = token >= r.highest_exclusive;
        } else {
            uint64_t newer = 0;
            for (auto it = r.owner_of_token.upper_bound(token); it != r.owner_of_token.end() && newer < limit; ++it) ++newer;
            accepted = newer < limit;
        }
        return settle(res, r, owner, token, kind, accepted);
    }

    // Records an accepted or rejected fenced access and answers it.
    std::string settle(const std::string& res, resource_state& r, const std::string& owner, uint64_t token, char kind,
                       bool accepted) {
        if (accepted) {
            auto [it, inserted] = r.owner_of_token.emplace(token, owner);
            if (!inserted && it->second != owner) bump("shared_tokens");
            r.highest = std::max(r.highest, token);
            bump("writes_accepted");
        } else {
            bump("writes_rejected");
        }
        log({{"t", dlock::faults::monotonic_now_ns()}, {"op", "write"}, {"res", res}, {"owner", owner},
             {"token", token}, {"kind", std::string(1, kind)}, {"accepted", accepted}, {"highest", r.highest}});
        return std::string(accepted ? "accepted " : "rejected ") + std::to_string(r.highest);
    }

    std::string enter(const std::string& res, const std::string& owner, char kind, uint64_t limit, int connection) {
        auto& r = resources_[res];
        size_t exclusive = 0;
        for (const auto& o : r.inside) exclusive += o.kind == 'x';
        const bool over = kind == 'p' ? r.inside.size() >= limit : kind == 's' ? exclusive > 0 : !r.inside.empty();
        r.inside.push_back({owner, kind, connection});
        const uint64_t inside = r.inside.size();
        if (over) bump("over_limit");
        if (inside > totals_.value("max_inside", uint64_t(0))) totals_["max_inside"] = inside;
        log({{"t", dlock::faults::monotonic_now_ns()}, {"op", "enter"}, {"res", res}, {"owner", owner},
             {"kind", std::string(1, kind)}, {"inside", inside}, {"over", over}});
        return std::string(over ? "over " : "ok ") + std::to_string(inside);
    }

    template <typename Which>
    void leave(const std::string& res, Which which, const char* how) {
        auto& inside = resources_[res].inside;
        for (auto it = inside.begin(); it != inside.end();) {
            if (!which(*it)) {
                ++it;
                continue;
            }
            log({{"t", dlock::faults::monotonic_now_ns()}, {"op", "leave"}, {"res", res}, {"owner", it->owner}, {"how", how}});
            it = inside.erase(it);
        }
    }

    std::string increment(const std::string& res, const std::string& owner, int64_t seen, int64_t next) {
        auto& r = resources_[res];
        const bool lost = r.counter != seen;
        r.counter = next;
        bump("counter_increments");
        if (lost) bump("lost_updates");
        log({{"t", dlock::faults::monotonic_now_ns()}, {"op", "incr"}, {"res", res}, {"owner", owner},
             {"seen", seen}, {"new", next}, {"lost", lost}});
        return lost ? "ok 1" : "ok 0";
    }

    void bump(const char* key) { totals_[key] = totals_.value(key, uint64_t(0)) + 1; }

    void log(const nlohmann::json& record) {
        const std::string text = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
        std::fwrite(text.data(), 1, text.size(), log_);
        std::fflush(log_);
    }

    std::mutex mutex_;
    std::FILE* log_;
    std::map<std::string, resource_state> resources_;
    nlohmann::json totals_ = nlohmann::json::object();
};

// Serves one connection until the peer closes it.
void serve(int fd, int connection, resource_store& store) {
    struct on_close {
        int connection;
        resource_store& store;
        ~on_close() { store.connection_closed(connection); }
    } closing{connection, store};
    std::string buffer;
    char chunk[4096];
    for (;;) {
        const ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n <= 0) break;
        buffer.append(chunk, size_t(n));
        for (size_t eol; (eol = buffer.find('\n')) != std::string::npos;) {
            const std::string answer = store.handle(buffer.substr(0, eol), connection) + "\n";
            buffer.erase(0, eol + 1);
            for (size_t sent = 0; sent < answer.size();) {
                const ssize_t w = ::write(fd, answer.data() + sent, answer.size() - sent);
                if (w <= 0) {
                    ::close(fd);
                    return;
                }
                sent += size_t(w);
            }
        }
    }
    ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: fenced_resource SOCKET LOG\n");
        return 2;
    }
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // die with the suite
    resource_store store(argv[2]);
    const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (std::strlen(argv[1]) >= sizeof address.sun_path) {
        std::fprintf(stderr, "fenced_resource: socket path too long: %s\n", argv[1]);
        return 2;
    }
    std::strcpy(address.sun_path, argv[1]);
    ::unlink(argv[1]);
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listener, 128) != 0) {
        std::perror("fenced_resource: listen");
        return 2;
    }
    std::printf("ready\n");
    std::fflush(stdout);
    for (int connections = 0;;) {
        const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        std::thread(serve, fd, ++connections, std::ref(store)).detach();
    }
}
