// Sessions, asynchronous requests and the waits on them, and the session monitor.
//
// The monitor is one thread per client. It turns session events into hold states for the host —
// disconnected: SUSPECT; expired: LOST, and a new session for later acquires — and keeps each
// hold's valid_until at (send time of the last request the server answered) + session timeout.
// The server renews a session on every packet it receives, so it cannot expire the session before
// that instant; the client decides LOST at it by itself, without waiting to hear "expired" after a
// reconnection. The C client exposes no time of its last answered ping, so while this client holds
// locks the monitor sends the session's heartbeat itself: a `sync` (answered only with the leader's
// help, see session::valid_until_ns) when no such request was answered for a quarter of the session
// timeout (an eighth on an ensemble). That request resets the library's own ping timer (it pings
// after a third of the timeout without sending), so it replaces a ping rather than adding to them.
// On a standalone server without holds the library's pings alone keep the session; on an ensemble
// the heartbeat always runs, so that a grant's bound starts from a recent anchor. The same heartbeat
// runs while an acquire waits in the queue, so that its grant starts from a fresh contact even when
// it skips the final listing (see acquisition::wait_for).
//
// A hold's queue node may also be deleted by someone else (an operator, another client of the same
// identity); the next client then holds the lock at once, so the monitor reports LOST as soon as a
// watch sees the deletion: the acquire's listing leaves a watch on the lock node's children (no
// extra request), a waiter watches its own node, and when the children watch fires while the lock
// is held (a newcomer queued) the monitor replaces it by a watch on the hold's own node — one
// request per hold at most, and only when the lock is contended.
#include "zookeeper_backend.hpp"
#include <dlock/plugin_kit/plugin_struct.hpp>
#include <dlock/plugin_kit/scope_exit.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <time.h>

namespace dlock::zk {

bool answered_by_server(int rc) {
    return rc == ZOK || rc == ZNONODE || rc == ZNODEEXISTS || rc == ZNOAUTH || rc == ZBADVERSION || rc == ZNOTEMPTY ||
           rc == ZNOCHILDRENFOREPHEMERALS || rc == ZINVALIDACL || rc == ZTHROTTLEDOP;
}

bool outcome_unknown(int rc) { return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT || rc == ZCLOSING || rc == ZSESSIONMOVED; }

bool session_gone(int rc) {
    return rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE || rc == ZAUTHFAILED || rc == ZSESSIONCLOSEDREQUIRESASLAUTH;
}

namespace {

// libzookeeper's log lines carry no handle, so they go to the log of one live client (all clients
// of a process share dlock's logger), at debug level: connection chatter during a failover is
// expected, and the plugin reports what matters for locks itself.
std::mutex log_sinks_mutex;
std::vector<const dlock_backend*> log_sinks;

void forward_library_log(const char* message) {
    std::lock_guard<std::mutex> lock(log_sinks_mutex);
    if (log_sinks.empty() || !message) return;
    std::string text(message);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    log_sinks.front()->log(0, "libzookeeper: " + text);
}

void on_watcher(zhandle_t* zh, int type, int state, const char* path, void* context) {
    auto* s = static_cast<session*>(context);
    s->owner().on_event(*s, zh, type, state, path);
}

// Completion trampolines: `data` is a heap copy of the call's shared_ptr, owned by the completion.
struct pending {
    call_ptr c;
    dlock_backend* owner;
    session* via;
};

pending* take(const void* data) { return static_cast<pending*>(const_cast<void*>(data)); }

void complete(const void* data, int rc) {
    std::unique_ptr<pending> p(take(data));
    p->owner->finish(p->c, p->via, rc);
}

void on_string_stat(int rc, const char* value, const Stat* stat, const void* data) {
    call& c = *take(data)->c;
    if (rc == ZOK) {
        if (value) c.text = value;
        if (stat) c.stat = *stat;
    }
    complete(data, rc);
}

void on_strings(int rc, const String_vector* strings, const void* data) {
    call& c = *take(data)->c;
    if (rc == ZOK && strings)
        for (int32_t i = 0; i < strings->count; ++i) c.names.emplace_back(strings->data[i]);
    complete(data, rc);
}

void on_void(int rc, const void* data) { complete(data, rc); }

void on_stat(int rc, const Stat* stat, const void* data) {
    if (rc == ZOK && stat) take(data)->c->stat = *stat;
    complete(data, rc);
}

void on_data(int rc, const char* value, int length, const Stat* stat, const void* data) {
    if (rc == ZOK && stat) take(data)->c->stat = *stat;
    if (rc == ZOK && value && length > 0) take(data)->c->text.assign(value, size_t(length));
    complete(data, rc);
}

void on_config(int rc, const char* value, int length, const Stat*, const void* data) {
    if (rc == ZOK) take(data)->c->names.emplace_back(value ? std::string(value, size_t(std::max(length, 0))) : std::string());
    complete(data, rc);
}

void on_synced(int rc, const char*, const void* data) { complete(data, rc); }

void on_acl(int rc, ACL_vector* acl, Stat*, const void* data) {
    call& c = *take(data)->c;
    if (rc == ZOK && acl)
        for (int32_t i = 0; i < acl->count; ++i)
            c.names.push_back(fmt::format("{}:{} {}", acl->data[i].id.scheme ? acl->data[i].id.scheme : "",
                                          acl->data[i].id.id ? acl->data[i].id.id : "", acl->data[i].perms));
    complete(data, rc);
}

void on_auth(int rc, const void* data) {
    auto* b = static_cast<const dlock_backend*>(data);
    if (rc != ZOK)
        b->log(3, fmt::format("zookeeper {}: digest authentication as `{}` failed: {}", b->config().connect_string(),
                              b->config().user, zerror(rc)));
}

template <typename Start>
call_ptr issue(dlock_backend& b, session& s, bool relayed, Start&& start, bool wakes_monitor = false) {
    auto c = std::make_shared<call>();
    auto* data = new pending{c, &b, &s};
    c->relayed = relayed;
    c->wakes_monitor = wakes_monitor;
    c->sent_ns = now_ns();
    const int rc = start(s.handle(), data);
    if (rc != ZOK) {  // refused at once (bad state or arguments): no completion will come
        delete data;
        c->rc = rc;
        c->done = true;
    }
    return c;
}

}  // namespace

// ---- session --------------------------------------------------------------------------------------

session::session(dlock_backend& owner, uint64_t generation_number)
    : generation(generation_number), owner_(owner), timeout_ms_(owner.config().session_timeout_ms) {}

session::~session() {
    if (zh_) zookeeper_close(zh_);
}

void session::open() {
    const auto& cfg = owner_.config();
    // The session's creation, recorded by the leader, is sent after this instant.
    anchor_ns_ = now_ns();
    errno = 0;
    zh_ = zookeeper_init2(cfg.connect_string().c_str(), on_watcher, int(cfg.session_timeout_ms), nullptr, this, 0,
                          forward_library_log);
    if (zh_) {
        // By default the client resolves the server names again on every turn of its I/O loop
        // (getaddrinfo, netlink dumps, /etc/hosts): tens of microseconds of CPU per request. -1
        // resolves them only when a connection is lost, which is when a changed address matters.
        zoo_set_servers_resolution_delay(zh_, -1);
    }
    if (!zh_)
        fail(errno == EINVAL ? DLOCK_CONFIG : DLOCK_UNAVAILABLE,
             fmt::format("zookeeper: cannot start a session with `{}`: {} (expected `connect: host:port,host:port` with an "
                         "optional `/chroot`)",
                         cfg.connect_string(), errno ? std::strerror(errno) : "zookeeper_init failed"));
    if (!cfg.user.empty()) {
        const std::string credentials = cfg.user + ":" + cfg.password;
        const int rc = zoo_add_auth(zh_, "digest", credentials.data(), int(credentials.size()), on_auth, &owner_);
        if (rc != ZOK)
            fail(DLOCK_BACKEND, fmt::format("zookeeper {}: cannot add digest authentication: {}", cfg.connect_string(), zerror(rc)));
    }
}

namespace {
void raise_to(std::atomic<int64_t>& value, int64_t to) {
    int64_t seen = value.load();
    while (to > seen && !value.compare_exchange_weak(seen, to)) {
    }
}
}  // namespace

void session::confirm(int64_t sent_ns, bool relayed) {
    raise_to(confirmed_send_ns_, sent_ns);
    if (!relayed) return;
    raise_to(relayed_send_ns_, sent_ns);
    // Anchor every earlier candidate sent at least a quarter of the timeout before this one; keep
    // this one as a candidate unless one sent less than 1/32 of the timeout earlier stands for it
    // (which bounds the list and costs the anchor at most that much).
    const int64_t spacing = timeout_ms() * ns_per_ms / 4;
    dlock::plugin_kit::lock_guard lock(candidates_mutex_);
    auto qualified = std::upper_bound(candidates_.begin(), candidates_.end(), sent_ns - spacing);
    if (qualified != candidates_.begin()) {
        raise_to(anchor_ns_, *(qualified - 1));
        candidates_.erase(candidates_.begin(), qualified);
    }
    auto at = std::upper_bound(candidates_.begin(), candidates_.end(), sent_ns);
    if (at != candidates_.begin() && sent_ns - *(at - 1) < spacing / 8) return;
    candidates_.insert(at, sent_ns);
}

int64_t session::confirmed_send_ns() const {
    return owner_.relayed() ? relayed_send_ns_.load() : confirmed_send_ns_.load();
}

int64_t session::valid_until_ns() const {
    const int64_t timeout_ns = timeout_ms() * ns_per_ms;
    const int64_t base = owner_.relayed() ? anchor_ns_.load() : confirmed_send_ns_.load();
    return base + timeout_ns - (timeout_ns / 100 + 2 * ns_per_ms);
}

}  // namespace dlock::zk

using namespace dlock::zk;

// ---- backend: construction and the session's life ----------------------------------------------

dlock_backend::dlock_backend(settings s, const dlock_plugin_host* h) : config_(std::move(s)) {
    dlock::plugin_kit::copy_in(host_, h, DLOCK_PLUGIN_HOST_V1_SIZE);  // the part its struct_size covers
    if (!config_.user.empty()) {
        acl_identity_ = digest_identity(config_.user, config_.password);
        acl_entries_[0].perms = ZOO_PERM_ALL;
        acl_entries_[0].id.scheme = const_cast<char*>("digest");
        acl_entries_[0].id.id = acl_identity_.data();
        acl_entries_[1].perms = ZOO_PERM_READ;
        acl_entries_[1].id.scheme = const_cast<char*>("world");
        acl_entries_[1].id.id = const_cast<char*>("anyone");
        acl_ = ACL_vector{2, acl_entries_};
    }
    std::lock_guard<std::mutex> lock(log_sinks_mutex);
    log_sinks.push_back(this);
}

dlock_backend::~dlock_backend() {
    {
        dlock::plugin_kit::lock_guard lock(mutex);
        stopping_ = true;
        for (waiter* w : waiters_) w->cv.notify_one();
    }
    if (monitor_.joinable()) monitor_.join();
    std::shared_ptr<session> last;
    {
        dlock::plugin_kit::lock_guard lock(mutex);
        last = std::move(current_);
    }
    last.reset();  // closes the session outside the mutex: its completions and watcher take it
    std::lock_guard<std::mutex> lock(log_sinks_mutex);
    log_sinks.erase(std::remove(log_sinks.begin(), log_sinks.end(), this), log_sinks.end());
}

void dlock_backend::log(int level, const std::string& message) const {
    if (host_.log) host_.log(host_.context, level, message.c_str());
}

std::string dlock_backend::where(const session* s) const {
    if (s && s->handle()) {
        const char* server = zoo_get_current_server(s->handle());
        const size_t n = server ? std::strlen(server) : 0;
        if (n > 2 && std::strcmp(server + n - 2, ":0") != 0) return fmt::format("zookeeper {}", server);  // ":0": none yet
    }
    return fmt::format("zookeeper {}", config_.connect_string());
}

std::shared_ptr<session> dlock_backend::open_session() {
    uint64_t generation;
    {
        dlock::plugin_kit::lock_guard lock(mutex);
        generation = ++last_generation_;
    }
    auto s = std::make_shared<session>(*this, generation);
    s->open();
    return s;
}

void dlock_backend::enlist(waiter& w) {
    dlock::plugin_kit::lock_guard lock(mutex);
    waiters_.insert(&w);
}

void dlock_backend::dismiss(waiter& w) {
    dlock::plugin_kit::lock_guard lock(mutex);
    waiters_.erase(&w);
}

bool dlock_backend::alive(const session& s) {
    dlock::plugin_kit::lock_guard lock(mutex);
    return current_.get() == &s && s.state != ZOO_EXPIRED_SESSION_STATE && s.state != ZOO_AUTH_FAILED_STATE;
}

std::shared_ptr<session> dlock_backend::session_of(uint64_t generation) {
    dlock::plugin_kit::lock_guard lock(mutex);
    if (!current_ || current_->generation != generation || current_->state == ZOO_EXPIRED_SESSION_STATE ||
        current_->state == ZOO_AUTH_FAILED_STATE)
        return nullptr;
    return current_;
}

std::shared_ptr<session> dlock_backend::connected_session(waiter& w, int64_t until_ns, bool interruptible) {
    dlock::plugin_kit::unique_lock lock(mutex);
    const bool connected = wait_until(lock, w, until_ns, interruptible, [&]() DLOCK_REQUIRES(mutex) {
        return auth_failed_ || (current_ && current_->state == ZOO_CONNECTED_STATE);
    });
    if (auth_failed_)
        fail(DLOCK_CONFIG, fmt::format("zookeeper {}: the server refused this client's authentication; check `user`/`password`",
                                       config_.connect_string()));
    if (!connected) {
        const bool expired = current_ && current_->state == ZOO_EXPIRED_SESSION_STATE;
        fail(DLOCK_UNAVAILABLE, fmt::format("zookeeper {}: not connected ({}); the client keeps reconnecting — check that a "
                                            "majority of the ensemble is up and reachable",
                                            config_.connect_string(), expired ? "the session expired; a new one is being opened"
                                                                              : "no server answers"));
    }
    return current_;
}

// ---- requests ---------------------------------------------------------------------------------------

call_ptr dlock_backend::create(session& s, const std::string& path, int mode, const std::string& value) {
    const ACL_vector* a = acl();
    return issue(*this, s, true, [&](zhandle_t* zh, pending* data) {
        return zoo_acreate2(zh, path.c_str(), value.data(), int(value.size()), a, mode, on_string_stat, data);
    });
}

call_ptr dlock_backend::get(session& s, const std::string& path) {
    return issue(*this, s, false, [&](zhandle_t* zh, pending* data) { return zoo_aget(zh, path.c_str(), 0, on_data, data); });
}

call_ptr dlock_backend::set_data(session& s, const std::string& path, const std::string& value) {
    return issue(*this, s, true, [&](zhandle_t* zh, pending* data) {
        return zoo_aset(zh, path.c_str(), value.data(), int(value.size()), -1, on_stat, data);
    });
}

call_ptr dlock_backend::children(session& s, const std::string& path, bool watch) {
    return issue(*this, s, false, [&](zhandle_t* zh, pending* data) {
        return watch ? zoo_awget_children(zh, path.c_str(), on_watcher, &s, on_strings, data)
                     : zoo_aget_children(zh, path.c_str(), 0, on_strings, data);
    });
}

call_ptr dlock_backend::remove(session& s, const std::string& path) {
    return issue(*this, s, true, [&](zhandle_t* zh, pending* data) { return zoo_adelete(zh, path.c_str(), -1, on_void, data); });
}

int dlock_backend::remove_now(session& s, const std::string& path) {
    const int64_t sent = now_ns();
    const int rc = zoo_delete(s.handle(), path.c_str(), -1);
    if (answered_by_server(rc)) s.confirm(sent, rc != ZTHROTTLEDOP);
    return rc;
}

call_ptr dlock_backend::exists(session& s, const std::string& path) {
    return issue(*this, s, false, [&](zhandle_t* zh, pending* data) { return zoo_aexists(zh, path.c_str(), 0, on_stat, data); });
}

call_ptr dlock_backend::get_and_watch(session& s, const std::string& path) {
    return issue(*this, s, false, [&](zhandle_t* zh, pending* data) {
        return zoo_awget(zh, path.c_str(), on_watcher, &s, on_data, data);
    });
}

call_ptr dlock_backend::get_acl(session& s, const std::string& path) {
    return issue(*this, s, false, [&](zhandle_t* zh, pending* data) { return zoo_aget_acl(zh, path.c_str(), on_acl, data); });
}

call_ptr dlock_backend::sync(session& s) {
    return issue(*this, s, true, [&](zhandle_t* zh, pending* data) { return zoo_async(zh, "/", on_synced, data); });
}

call_ptr dlock_backend::get_config(session& s) {
    return issue(*this, s, false, [&](zhandle_t* zh, pending* data) { return zoo_agetconfig(zh, 0, on_config, data); });
}

int64_t dlock_backend::heartbeat_ns(const session& s) const {
    return s.timeout_ms() * ns_per_ms / (relayed() ? 8 : 4);
}

void dlock_backend::finish(const call_ptr& c, session* via, int rc) {
    c->rc = rc;
    if (answered_by_server(rc) && via) via->confirm(c->sent_ns, c->relayed && rc != ZTHROTTLEDOP);
    dlock::plugin_kit::lock_guard lock(mutex);
    c->done = true;
    c->done_order = ++handled_;
    if (c->notify) c->notify->cv.notify_one();
    if (c->wakes_monitor) wake_monitor_locked();
}

// ---- waits ----------------------------------------------------------------------------------------

template <typename Pred>
bool dlock_backend::wait_until(dlock::plugin_kit::unique_lock& lock, waiter& w, int64_t until_ns, bool interruptible, Pred done) {
    for (;;) {
        if (done()) return true;
        if (interruptible && interrupted.load()) fail(DLOCK_CANCELLED, "zookeeper: the client is closing");
        if (stopping_) return false;
        if (now_ns() >= until_ns) return false;
        if (until_ns == forever_ns) w.cv.wait(lock.std());
        else w.cv.wait_until(lock.std(), steady_time(until_ns));
    }
}

bool dlock_backend::await(waiter& w, std::initializer_list<call*> calls, int64_t until_ns, bool interruptible) {
    dlock::plugin_kit::unique_lock lock(mutex);
    for (call* c : calls) c->notify = &w;
    auto clear_notify = scope_exit([calls] {  // under the lock: declared after it
        for (call* c : calls) c->notify = nullptr;
    });
    return wait_until(lock, w, until_ns, interruptible, [&]() DLOCK_REQUIRES(mutex) {
        return std::all_of(calls.begin(), calls.end(), [](const call* c) { return c->done; });
    });
}

void dlock_backend::watch(waiter& w, const session& s, const std::string& path) {
    dlock::plugin_kit::lock_guard lock(mutex);
    w.watched_session = &s;
    w.watched_path = path;
    w.watch_fired = false;
    w.watch_event = 0;
}

int dlock_backend::wait_watch(waiter& w, const session& s, int64_t until_ns, uint64_t own_since) {
    dlock::plugin_kit::unique_lock lock(mutex);
    wait_until(lock, w, until_ns, true, [&]() DLOCK_REQUIRES(mutex) {
        return w.watch_fired || w.own_event_at > own_since || current_.get() != &s || s.state == ZOO_EXPIRED_SESSION_STATE ||
               s.state == ZOO_AUTH_FAILED_STATE;
    });
    return w.watch_fired && w.own_event_at <= own_since ? w.watch_event : 0;
}

void dlock_backend::unwatch(waiter& w) {
    dlock::plugin_kit::lock_guard lock(mutex);
    w.watched_session = nullptr;
    w.watched_path.clear();
    w.watch_fired = false;
    w.watch_event = 0;
}

void dlock_backend::watching_children(waiter& w, const session& s, const std::string& lock_path) {
    dlock::plugin_kit::lock_guard lock(mutex);
    w.queue_session = &s;
    w.lock_path = lock_path;
}

void dlock_backend::watching_own_node(waiter& w, const session& s, const std::string& own_path) {
    dlock::plugin_kit::lock_guard lock(mutex);
    w.queue_session = &s;
    w.own_path = own_path;
}

int dlock_backend::own_node_event(waiter& w, uint64_t since) {
    dlock::plugin_kit::lock_guard lock(mutex);
    return w.own_event_at > since ? w.own_event : 0;
}

void dlock_backend::interrupt() {
    interrupted = true;
    dlock::plugin_kit::lock_guard lock(mutex);
    for (waiter* w : waiters_) w->cv.notify_one();
}

void dlock_backend::on_event(session& s, zhandle_t* zh, int type, int state, const char* path) {
    if (type == ZOO_SESSION_EVENT) {
        if (state == ZOO_CONNECTED_STATE) {
            // Read back what the server granted: it clamps the asked timeout to [2, 20] x tickTime.
            // (`zh`, not s.handle(): the first event may come before zookeeper_init2 returned.)
            s.timeout_ms_ = zoo_recv_timeout(zh);
            if (const clientid_t* id = zoo_client_id(zh)) s.id_ = id->client_id;
        }
        dlock::plugin_kit::lock_guard lock(mutex);
        // Watchers of nodes hear session events too; only a change matters.
        if (s.state == state) return;
        s.state = state;
        if (state == ZOO_CONNECTED_STATE) s.ever_connected = true;
        if (state == ZOO_AUTH_FAILED_STATE) auth_failed_ = true;
        ++events_;
        for (waiter* w : waiters_) w->cv.notify_one();
        return;
    }
    if (!path) return;
    // A node event (deleted, changed, children changed, or the server stopped watching): wake whoever
    // waits on it, and record it for the acquisitions and holds whose nodes it concerns.
    dlock::plugin_kit::lock_guard lock(mutex);
    const uint64_t order = ++handled_;
    for (waiter* w : waiters_) {
        if (w->watched_session == &s && w->watched_path == path) {
            w->watch_fired = true;
            w->watch_event = type;
            w->cv.notify_one();
        }
        if (w->queue_session != &s) continue;
        if (type == ZOO_CHILD_EVENT) {
            if (w->lock_path == path) w->children_changed_at = order;
        } else if (w->own_path == path) {
            w->own_event_at = order;
            w->own_event = type;
            w->cv.notify_one();
        }
    }
    bool for_monitor = false;
    for (dlock_hold* h : watched_holds_) {
        if (h->generation != s.generation || h->releasing) continue;
        if (type == ZOO_CHILD_EVENT) {
            // Our node deleted, or (far more often) a newcomer queued: the monitor watches our node.
            if (h->lock_path == path && h->watch == node_watch::children) {
                h->watch = node_watch::needed;
                for_monitor = true;
            }
        } else if (h->node_path == path) {
            if (type == ZOO_DELETED_EVENT) h->node_deleted = true;
            else h->watch = node_watch::needed;  // changed, or no longer watched: the watch is spent
            for_monitor = true;
        }
    }
    if (for_monitor) wake_monitor_locked();
}

void dlock_backend::wake_monitor_locked() {
    ++events_;
    if (monitor_waiter_) monitor_waiter_->cv.notify_one();
}

void dlock_backend::add_orphan(uint64_t generation, std::string lock_path, std::string node_path, std::string guid) {
    dlock::plugin_kit::lock_guard lock(mutex);
    orphans_.push_back({generation, std::move(lock_path), std::move(node_path), std::move(guid)});
    ++events_;
    for (waiter* w : waiters_) w->cv.notify_one();
}

// ---- holds -------------------------------------------------------------------------------------------

void dlock_backend::register_hold(dlock_hold* h, const waiter& w, uint64_t children_since, uint64_t own_since) {
    {
        dlock::plugin_kit::lock_guard lock(holds_mutex);
        holds_.insert(h);
    }
    dlock::plugin_kit::lock_guard lock(mutex);
    const bool own_fired = w.own_path == h->node_path && w.own_event_at > own_since;
    if (own_fired && w.own_event == ZOO_DELETED_EVENT) h->node_deleted = true;
    if (own_since != 0 && !own_fired) h->watch = node_watch::own;
    else if (children_since != 0 && w.children_changed_at <= children_since && w.lock_path == h->lock_path) h->watch = node_watch::children;
    else h->watch = node_watch::needed;
    watched_holds_.insert(h);
    if (h->node_deleted || h->watch == node_watch::needed) wake_monitor_locked();
    // The monitor must keep this hold's valid_until moving; wake it unless its heartbeat timer runs.
    else kick_monitor_locked();
}

void dlock_backend::set_releasing(dlock_hold* h, bool releasing) {
    dlock::plugin_kit::lock_guard lock(mutex);
    h->releasing = releasing;
    if (!releasing && (h->node_deleted || h->watch == node_watch::needed)) wake_monitor_locked();
}

void dlock_backend::waiting(int delta) {
    dlock::plugin_kit::lock_guard lock(mutex);
    waiting_acquires_ = size_t(int64_t(waiting_acquires_) + delta);
    if (delta > 0) kick_monitor_locked();
}

void dlock_backend::kick_monitor_locked() {
    if (!monitor_timer_armed_ && monitor_waiter_) {
        ++events_;
        monitor_waiter_->cv.notify_one();
    }
}

void dlock_backend::forget_hold(dlock_hold* h) {
    {
        dlock::plugin_kit::lock_guard lock(holds_mutex);
        holds_.erase(h);
    }
    dlock::plugin_kit::lock_guard lock(mutex);
    watched_holds_.erase(h);
}

size_t dlock_backend::holds_of(uint64_t generation) {
    dlock::plugin_kit::lock_guard lock(holds_mutex);
    return size_t(std::count_if(holds_.begin(), holds_.end(), [&](const dlock_hold* h) { return h->generation == generation; }));
}

void dlock_backend::report(uint64_t generation, int state, int64_t valid_until_ns) {
    if (!host_.hold_state_changed) return;
    dlock::plugin_kit::lock_guard lock(holds_mutex);
    for (dlock_hold* h : holds_)
        if (h->generation == generation) host_.hold_state_changed(host_.context, h->host_lease, state, valid_until_ns);
}

// ---- the monitor ------------------------------------------------------------------------------------

bool dlock_backend::probe(waiter& w, const std::shared_ptr<session>& s) {
    auto c = sync(*s);
    const int64_t bound = now_ns() + s->timeout_ms() * ns_per_ms;
    return await(w, {c.get()}, bound, false) && answered_by_server(c->rc);
}

void dlock_backend::tend_orphans(waiter& w, const std::shared_ptr<session>& s) {
    std::vector<orphan> todo;
    {
        dlock::plugin_kit::lock_guard lock(mutex);
        // Nodes of an ended session vanished with it.
        orphans_.erase(std::remove_if(orphans_.begin(), orphans_.end(), [&](const orphan& o) { return o.generation != s->generation; }),
                       orphans_.end());
        todo.swap(orphans_);
    }
    std::vector<orphan> keep;
    for (auto& o : todo) {
        const int64_t bound = now_ns() + s->timeout_ms() * ns_per_ms;
        std::vector<std::string> targets;
        if (!o.node_path.empty()) {
            targets.push_back(o.node_path);
        } else {
            auto list = children(*s, o.lock_path);
            if (!await(w, {list.get()}, bound, false) || outcome_unknown(list->rc)) { keep.push_back(o); continue; }
            for (const auto& entry : queue_of(list->names))
                if (entry.guid == o.guid) targets.push_back(join_path(o.lock_path, entry.node));
        }
        bool settled = true;
        for (const auto& path : targets) {
            auto del = remove(*s, path);
            if (!await(w, {del.get()}, bound, false) || outcome_unknown(del->rc)) settled = false;
            else if (del->rc == ZOK) log(0, fmt::format("{}: deleted `{}` left by an acquire that failed", where(s.get()), path));
        }
        if (!settled) {
            o.node_path = targets.size() == 1 ? targets.front() : o.node_path;
            keep.push_back(o);
        }
    }
    if (!keep.empty()) {
        dlock::plugin_kit::lock_guard lock(mutex);
        orphans_.insert(orphans_.end(), keep.begin(), keep.end());
    }
}

// Sets the watches holds need on their own nodes, takes the answers (a node already gone is a
// deletion too), and reports LOST for each hold whose node someone else deleted.
void dlock_backend::tend_node_watches(const std::shared_ptr<session>& s, bool connected, std::vector<node_watch_request>& requests) {
    struct deletion {
        dlock_hold* hold;
        std::string node_path, name;
    };
    std::vector<deletion> deleted;
    std::vector<node_watch_request> to_send;
    {
        dlock::plugin_kit::lock_guard lock(mutex);
        for (auto r = requests.begin(); r != requests.end();) {
            if (!r->call->done) { ++r; continue; }
            // The hold may have been destroyed meanwhile (and another allocated at its address).
            if (watched_holds_.count(r->hold) && r->hold->node_path == r->node_path) {
                dlock_hold& h = *r->hold;
                if (r->call->rc == ZNONODE) h.node_deleted = true;
                if (h.watch == node_watch::setting) h.watch = r->call->rc == ZOK ? node_watch::own : node_watch::needed;
            }
            r = requests.erase(r);
        }
        for (dlock_hold* h : watched_holds_) {
            if (h->generation != s->generation || h->releasing) continue;
            if (h->node_deleted && !h->deletion_reported) {
                h->deletion_reported = true;
                deleted.push_back({h, h->node_path, h->name});
            } else if (connected && !h->node_deleted && h->watch == node_watch::needed) {
                h->watch = node_watch::setting;
                to_send.push_back({h, h->node_path, nullptr});
            }
        }
    }
    for (auto& r : to_send) {
        r.call = issue(*this, *s, false, [&](zhandle_t* zh, pending* data) {
            return zoo_awget(zh, r.node_path.c_str(), on_watcher, s.get(), on_data, data);
        }, true);
        requests.push_back(std::move(r));
    }
    for (const auto& d : deleted)
        log(2, fmt::format("{}: the node `{}` of lock `{}` was deleted by another client; the lock is LOST", where(s.get()),
                           d.node_path, d.name));
    if (deleted.empty() || !host_.hold_state_changed) return;
    dlock::plugin_kit::lock_guard lock(holds_mutex);
    for (const auto& d : deleted)
        if (holds_.count(d.hold) && d.hold->node_path == d.node_path)
            host_.hold_state_changed(host_.context, d.hold->host_lease, DLOCK_LEASE_LOST, 0);
}

void dlock_backend::monitor_loop() {
    waiter w;
    {
        dlock::plugin_kit::lock_guard lock(mutex);
        waiters_.insert(&w);
        monitor_waiter_ = &w;
    }
    uint64_t seen_generation = 0;
    bool suspect = false;          // holds of the current session were reported SUSPECT
    int64_t reported_bound = 0;    // the last valid_until reported
    std::vector<node_watch_request> node_watches;  // in flight
    dlock::plugin_kit::unique_lock lock(mutex);
    while (!stopping_) {
        const uint64_t seen_events = events_;
        std::shared_ptr<session> s = current_;
        const int state = s ? s->state : ZOO_NOTCONNECTED_STATE;
        const bool ever_connected = s && s->ever_connected;
        const bool lost_reported = s && s->lost_reported;
        const bool has_orphans = !orphans_.empty();
        const bool acquires_wait = waiting_acquires_ > 0;
        lock.unlock();

        int64_t next_ns = forever_ns;
        if (s && s->generation != seen_generation) {
            seen_generation = s->generation;
            suspect = false;
            reported_bound = 0;
            node_watches.clear();  // the ended session's holds are lost with it
        }
        if (s && state != ZOO_EXPIRED_SESSION_STATE && state != ZOO_AUTH_FAILED_STATE)
            tend_node_watches(s, state == ZOO_CONNECTED_STATE, node_watches);
        if (s && (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE)) {
            if (!lost_reported) {
                const size_t n = holds_of(s->generation);
                report(s->generation, DLOCK_LEASE_LOST, 0);
                lock.lock();
                s->lost_reported = true;
                lock.unlock();
                log(2, fmt::format("{}: session 0x{:x} {}; {} held lock(s) LOST", where(s.get()), s->id(),
                                   state == ZOO_EXPIRED_SESSION_STATE ? "expired" : "failed authentication", n));
            }
            if (state == ZOO_EXPIRED_SESSION_STATE) {
                // Later acquires need a session: open a new one (its connection is made in the background).
                std::shared_ptr<session> fresh;
                try {
                    fresh = open_session();
                } catch (const failure& f) {
                    log(3, f.message);
                }
                if (fresh) {
                    lock.lock();
                    if (current_ == s) current_ = fresh;
                    lock.unlock();
                    fresh.reset();
                    s.reset();  // closes the expired handle, outside the mutex
                    lock.lock();
                    continue;
                }
                next_ns = now_ns() + 1'000 * ns_per_ms;  // try again in a second
            }
        } else if (s && state == ZOO_CONNECTED_STATE) {
            const size_t held = holds_of(s->generation);
            // On an ensemble the anchor must stay fresh for the next grant too (valid_until_ns).
            const bool busy = held > 0 || acquires_wait || relayed();
            if (suspect || (busy && now_ns() - s->confirmed_send_ns() >= heartbeat_ns(*s))) {
                // Reconnected, or idle for a quarter of the session timeout: the heartbeat.
                if (probe(w, s) && suspect) {
                    suspect = false;
                    log(1, fmt::format("{}: reconnected; session 0x{:x} kept, held locks HELD again", where(s.get()), s->id()));
                }
            }
            if (!suspect && held > 0 && s->valid_until_ns() != reported_bound) {
                reported_bound = s->valid_until_ns();
                report(s->generation, DLOCK_LEASE_HELD, reported_bound);
            }
            if (has_orphans) tend_orphans(w, s);
            if (busy)
                next_ns = std::max(s->confirmed_send_ns() + heartbeat_ns(*s), now_ns() + s->timeout_ms() * ns_per_ms / 20);
        } else if (s && ever_connected && !suspect) {
            // Disconnected: the holds may still be ours until the session's bound. Report the latest
            // bound first (the host keeps valid_until from HELD reports), then SUSPECT.
            suspect = true;
            const size_t held = holds_of(s->generation);
            if (held > 0) {
                report(s->generation, DLOCK_LEASE_HELD, s->valid_until_ns());
                report(s->generation, DLOCK_LEASE_SUSPECT, s->valid_until_ns());
            }
            log(held > 0 ? 2 : 1, fmt::format("{}: disconnected from session 0x{:x}; {} held lock(s) SUSPECT, LOST in {} ms unless the session "
                               "is regained",
                               where(s.get()), s->id(), held, std::max<int64_t>(0, (s->valid_until_ns() - now_ns()) / ns_per_ms)));
        }
        s.reset();
        lock.lock();
        monitor_timer_armed_ = next_ns != forever_ns;
        wait_until(lock, w, next_ns, false, [&]() DLOCK_REQUIRES(mutex) { return stopping_ || events_ != seen_events; });
        monitor_timer_armed_ = false;
    }
    waiters_.erase(&w);
    monitor_waiter_ = nullptr;
}
