// The shared pub/sub subscriber and the parallel fan-out.
#include "redis_common.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <poll.h>
#include <unistd.h>

namespace dlock::redis_common {

subscriber::subscriber(endpoint where, settings s, std::function<void()> on_change)
    : waker("redis", std::move(on_change)), where_(std::move(where)), settings_(std::move(s)) {
    thread_ = std::thread([this] { run(); });
}

subscriber::~subscriber() {
    stopping_ = true;
    interrupt();
    nudge();
    thread_.join();
}

// The subscriber thread owns its connection. It (re)connects, re-subscribes every watched channel,
// sends the waiters' (un)subscriptions when woken through the waker's fd, and reports each
// subscription's confirmation, each message and the loss of the connection to the waker; after a
// failed connect it tries again after a growing pause (10 ms doubling to 1 s).
void subscriber::run() {
    int64_t backoff_ms = 0;
    while (!stopping_) {
        std::unique_ptr<connection> conn;
        try {
            conn = std::make_unique<connection>(where_, settings_);
        } catch (const failure&) {
            backoff_ms = backoff_ms ? std::min<int64_t>(backoff_ms * 2, 1000) : 10;
            pollfd p{wake_fd(), POLLIN, 0};
            poll(&p, 1, int(backoff_ms));
            drain();
            continue;
        }
        backoff_ms = 0;
        redisContext* ctx = conn->context();
        for (const auto& name : resubscribe()) command_line().add("SUBSCRIBE").add(name).append_to(ctx);
        bool healthy = write_buffered(ctx);
        while (healthy && !stopping_) {
            pollfd fds[2] = {{ctx->fd, POLLIN, 0}, {wake_fd(), POLLIN, 0}};
            if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
            if (fds[1].revents) {
                drain();
                const std::vector<request> todo = requests();
                for (const auto& r : todo) command_line().add(r.subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE").add(r.channel).append_to(ctx);
                if (!todo.empty() && !write_buffered(ctx)) healthy = false;
            }
            if (fds[0].revents) {
                if (redisBufferRead(ctx) != REDIS_OK) {
                    healthy = false;
                    break;
                }
                void* raw = nullptr;
                while (redisGetReplyFromReader(ctx, &raw) == REDIS_OK && raw) {
                    reply_ptr r(static_cast<redisReply*>(raw));
                    raw = nullptr;
                    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != REDIS_REPLY_STRING) continue;
                    const std::string kind(r->element[0]->str, r->element[0]->len);
                    const std::string name(r->element[1]->str, r->element[1]->len);
                    if (kind == "subscribe") confirmed(name);
                    else if (kind == "message" && r->element[2]->type == REDIS_REPLY_STRING &&
                             std::string_view(r->element[2]->str, r->element[2]->len) == standby_message)
                        hinted(name);
                    else if (kind == "message") heard(name);
                    else if (kind == "unsubscribe") unconfirmed(name);
                }
            }
        }
        connection_lost();
    }
}

bool pipeline(connection& c, const command_line& command) {
    if (command.append_to(c.context()) != REDIS_OK || !write_buffered(c.context())) return false;
    c.owe_reply();
    return true;
}

std::vector<reply_ptr> fan_out(std::vector<connection*>& connections, const command_line& command, int64_t deadline_ns,
                               std::vector<bool>& late, const enough_replies& enough) {
    // Formatted once for every connection.
    char* raw = nullptr;
    const int length = redisFormatCommandArgv(&raw, int(command.count()), const_cast<const char**>(command.argv()),
                                              command.lengths());
    const std::unique_ptr<char, void (*)(char*)> formatted(length < 0 ? nullptr : raw, redisFreeCommand);
    const size_t n = connections.size();
    std::vector<reply_ptr> replies(n);
    late.assign(n, false);
    std::vector<bool> waiting(n, false);
    std::vector<int> to_skip(n, 0);  // owed replies that arrive before ours
    // Send everything first: the requests travel to every server at once.
    for (size_t i = 0; i < n; ++i) {
        connection* c = connections[i];
        if (!c || c->broken()) continue;
        if (!formatted || redisAppendFormattedCommand(c->context(), formatted.get(), size_t(length)) != REDIS_OK ||
            !write_buffered(c->context())) {
            c->mark_broken();
            continue;
        }
        to_skip[i] = c->owed_replies();
        waiting[i] = true;
    }
    for (;;) {
        std::vector<pollfd> fds;
        std::vector<size_t> index;
        for (size_t i = 0; i < n; ++i) {
            if (!waiting[i]) continue;
            // Replies may already be buffered from an earlier read; owed ones come first.
            void* raw = nullptr;
            while (waiting[i] && redisGetReplyFromReader(connections[i]->context(), &raw) == REDIS_OK && raw) {
                reply_ptr r(static_cast<redisReply*>(raw));
                raw = nullptr;
                if (to_skip[i] > 0) {
                    --to_skip[i];
                    connections[i]->settle_owed_reply();
                    continue;
                }
                replies[i] = std::move(r);
                waiting[i] = false;
            }
            if (!waiting[i]) continue;
            fds.push_back({connections[i]->context()->fd, POLLIN, 0});
            index.push_back(i);
        }
        if (fds.empty()) break;
        if (enough && enough(replies)) {
            // Decided: the others' replies are owed by their connections, read before their next use.
            for (size_t i : index) {
                connections[i]->owe_reply();
                waiting[i] = false;
            }
            break;
        }
        const int64_t left_ms = (deadline_ns - now_ns()) / 1'000'000;
        if (left_ms <= 0) break;
        const int ready = poll(fds.data(), fds.size(), int(std::min<int64_t>(left_ms, 60'000)));
        if (ready < 0 && errno != EINTR) break;
        for (size_t k = 0; k < fds.size(); ++k) {
            if (!fds[k].revents) continue;
            connection* c = connections[index[k]];
            if (redisBufferRead(c->context()) != REDIS_OK) {
                c->mark_broken();
                waiting[index[k]] = false;
            }
        }
    }
    for (size_t i = 0; i < n; ++i) late[i] = waiting[i];
    return replies;
}

}  // namespace dlock::redis_common
