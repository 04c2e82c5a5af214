// The `zookeeper` backend: ZooKeeper's fair lock recipe over libzookeeper-mt.
//
// A lock is a container node <base_path>/<escaped name>. An acquirer creates an
// EPHEMERAL_SEQUENTIAL child "_c_<guid>-lock-<sequence>" (guid = the acquisition's owner token) and,
// pipelined behind it, lists the children: the server runs one session's requests in order, so the
// listing includes the new node and the pair costs one round trip. The lowest sequence holds; any
// other waits for a watch on its predecessor only (a release wakes one waiter, never the herd) and
// lists again when it fires (the predecessor may have been a waiter that gave up) — unless the
// predecessor was the head of the queue (see acquisition::wait_for). Release deletes our node.
// Minimum per uncontended acquire+release: 3 requests in 2 round trips. Waiters are served in queue
// order whatever `fair` says: FIFO is the only order this recipe has.
//
// Connection loss during a create leaves its outcome unknown: the acquirer lists the children (after
// a `sync`, as the session may have moved to a member that lags) and finds its node by guid before
// creating another, so a create that happened unseen never becomes a ghost ahead of its own second
// node (which would wait for it forever); should two nodes carry its guid anyway, it keeps the
// earliest. Any failed, timed-out or
// cancelled acquire deletes what it created; what it cannot delete right away (connection down) is
// handed to the session monitor, which deletes it after reconnecting.
//
// Someone else may delete a queue node (an operator, another client of the same identity): a holder
// learns it from a watch (see backend.cpp: the listing's children watch, then one on its own node)
// and reads LOST within about a round trip; a waiter watches its own node along with its
// predecessor and queues again, instead of taking the lock on a node that no longer exists.
//
// Shared holders and permits (plugin ABI version 2) use the same queue and the same machinery; only
// the rule of who holds and what a waiter watches differ (see standing_in): a shared holder's node
// is "_c_<guid>-__READ__<sequence>" beside the exclusive ones (Curator's read-write lock), a
// semaphore is its own node under <base_path>/.semaphores whose N lowest children hold.
//
// Fencing token: the holder node's czxid — the zxid of the transaction that created it, strictly
// increasing across the ensemble; the next holder's node was created after ours, so its czxid is
// higher. Locks are bound to the session (the keeper has nothing to renew; the lease's ttl is the
// negotiated session timeout); the session monitor (backend.cpp) reports SUSPECT while disconnected
// and LOST at the session's own bound or expiry.
#include "zookeeper_backend.hpp"

#include <dlock/plugin_kit/scope_exit.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>

using namespace dlock::zk;

namespace {

using dlock::plugin_kit::find_option;
using dlock::plugin_kit::guarded;

const dlock_option_desc zookeeper_options[] = {
    {"connect", DLOCK_OPTION_STRING, 0, DLOCK_DSN_HOSTS, "127.0.0.1:2181",
     "The ensemble, `host:port,host:port`, optionally followed by a chroot (`/app`). One session is opened per client."},
    {"chroot", DLOCK_OPTION_STRING, 0, DLOCK_DSN_PATH, nullptr,
     "A chroot (`/app`) for every path, instead of one in `connect`; it must exist."},
    {"base_path", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, "/dlock", "The node under which lock nodes are created (created on demand)."},
    {"session_timeout", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "10s",
     "Session timeout asked for; the server clamps it to [2, 20] x tickTime. It is every lease's ttl: a dead holder's "
     "locks are freed this long after its last heartbeat."},
    {"connect_timeout", DLOCK_OPTION_DURATION, 0, DLOCK_DSN_NONE, "5s",
     "How long opening a client waits for a session, and how long a try-once acquire waits out a reconnection."},
    {"user", DLOCK_OPTION_STRING, 0, DLOCK_DSN_USER, nullptr,
     "Digest authentication user; when set, nodes dlock creates are writable by this identity only (others may read)."},
    {"password", DLOCK_OPTION_STRING, DLOCK_OPTION_SECRET, DLOCK_DSN_PASSWORD, nullptr, "Digest authentication password."},
    {"curator_recipe", DLOCK_OPTION_STRING, 0, DLOCK_DSN_NONE, "mutex",
     "The Curator recipe whose nodes an exclusive holder creates, to share locks with Curator clients: `mutex` "
     "(InterProcessMutex, `_c_<owner>-lock-<seq>`) or `read_write_lock` (InterProcessReadWriteLock's write lock, "
     "`_c_<owner>-__WRIT__<seq>`). Every shape counts as a writer to dlock either way."},
};

// Splits "h:p,h:p/chroot" and checks each host:port, so a typo is a config error naming it.
void parse_connect(const std::string& connect, settings& cfg) {
    const size_t slash = connect.find('/');
    cfg.hosts = connect.substr(0, slash);
    if (slash != std::string::npos) cfg.chroot = connect.substr(slash);
    if (cfg.hosts.empty()) fail(DLOCK_CONFIG, fmt::format("zookeeper: `connect` `{}` names no server (expected host:port,host:port)", connect));
    size_t start = 0;
    for (;;) {
        const size_t comma = cfg.hosts.find(',', start);
        const std::string server = cfg.hosts.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        const size_t colon = server.rfind(':');
        const std::string host = colon == std::string::npos ? "" : server.substr(0, colon);
        const std::string port = colon == std::string::npos ? "" : server.substr(colon + 1);
        char* end = nullptr;
        const long p = port.empty() ? 0 : std::strtol(port.c_str(), &end, 10);
        if (host.empty() || port.empty() || *end || p < 1 || p > 65535)
            fail(DLOCK_CONFIG, fmt::format("zookeeper: `connect` `{}`: `{}` is not host:port", connect, server));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
}

settings parse_settings(const dlock_option_value* values, size_t count) {
    settings cfg;
    const auto* connect = find_option(values, count, "connect");
    parse_connect(connect && connect->string_value ? connect->string_value : "127.0.0.1:2181", cfg);
    if (const auto* v = find_option(values, count, "chroot"); v && v->string_value && *v->string_value && std::strcmp(v->string_value, "/")) {
        if (!cfg.chroot.empty())
            fail(DLOCK_CONFIG, fmt::format("zookeeper: the chroot is given twice, `{}` in `connect` and `{}` in `chroot`; keep one",
                                           cfg.chroot, v->string_value));
        cfg.chroot = v->string_value;
    }
    if (cfg.chroot == "/") cfg.chroot.clear();
    if (!cfg.chroot.empty())
        if (const std::string why = path_problem(cfg.chroot); !why.empty())
            fail(DLOCK_CONFIG, fmt::format("zookeeper: the chroot `{}` is not a valid path: {}", cfg.chroot, why));
    if (const auto* v = find_option(values, count, "base_path")) cfg.base_path = v->string_value ? v->string_value : "";
    if (const std::string why = path_problem(cfg.base_path); !why.empty())
        fail(DLOCK_CONFIG, fmt::format("zookeeper: `base_path` `{}` is not a valid path: {}", cfg.base_path, why));
    if (const auto* v = find_option(values, count, "session_timeout")) cfg.session_timeout_ms = v->int_value;
    if (const auto* v = find_option(values, count, "connect_timeout")) cfg.connect_timeout_ms = v->int_value;
    if (cfg.session_timeout_ms < 1 || cfg.session_timeout_ms > INT_MAX)
        fail(DLOCK_CONFIG, fmt::format("zookeeper: `session_timeout` {} ms is outside 1 ms .. {} ms", cfg.session_timeout_ms, INT_MAX));
    if (cfg.connect_timeout_ms < 1) fail(DLOCK_CONFIG, "zookeeper: `connect_timeout` must be at least 1ms");
    if (const auto* v = find_option(values, count, "user"); v && v->string_value) cfg.user = v->string_value;
    if (const auto* v = find_option(values, count, "password"); v && v->string_value) cfg.password = v->string_value;
    if (cfg.user.empty() && !cfg.password.empty()) fail(DLOCK_CONFIG, "zookeeper: `password` is set without `user` (digest authentication needs both)");
    if (const auto* v = find_option(values, count, "curator_recipe"); v && v->string_value) {
        const std::string recipe = v->string_value;
        if (recipe == "read_write_lock") cfg.exclusive_node = node_kind::curator_writer;
        else if (recipe != "mutex")
            fail(DLOCK_CONFIG, fmt::format("zookeeper: `curator_recipe` `{}` is neither `mutex` nor `read_write_lock`", recipe));
    }
    if (cfg.user.find(':') != std::string::npos) fail(DLOCK_CONFIG, "zookeeper: `user` must not contain `:` (the digest scheme separates user and password with it)");
    return cfg;
}

int zk_create(const dlock_option_value* values, size_t count, const dlock_plugin_host* host, dlock_backend** out,
              dlock_plugin_error* error) {
    return guarded(error, "zookeeper", [&] {
        auto b = std::make_unique<dlock_backend>(parse_settings(values, count), host);
        b->start();
        *out = b.release();
        return DLOCK_OK;
    });
}

void zk_destroy(dlock_backend* b) {
    try {
        delete b;
    } catch (...) {
    }
}

// QUORUM only with several servers in `connect`: a lone server survives no loss.
uint64_t zk_capabilities(dlock_backend* b) {
    const bool ensemble = b && b->config().hosts.find(',') != std::string::npos;
    return DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_PUSH_WAIT | DLOCK_CAP_SESSION_BOUND | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_SHARED |
           DLOCK_CAP_LIST | DLOCK_CAP_BREAK | (ensemble ? DLOCK_CAP_QUORUM : 0);
}

void zk_interrupt(dlock_backend* b) {
    try {
        b->interrupt();
    } catch (...) {
    }
}

// ---- acquire: the recipe -------------------------------------------------------------------------

uint32_t kind_of(const dlock_acquire_request& req) {
    return req.struct_size >= DLOCK_ACQUIRE_REQUEST_V2_SIZE ? req.kind : uint32_t(DLOCK_HOLD_EXCLUSIVE);
}

class acquisition {
public:
    acquisition(dlock_backend& b, const dlock_acquire_request& req)
        : b_(b), req_(req), kind_(kind_of(req)), permits_(kind_ == DLOCK_HOLD_PERMIT ? req.permits : 0), w_(b),
          lock_path_(node_of(b.config().base_path, req.name, kind_ == DLOCK_HOLD_PERMIT)), guid_(req.owner) {}

    int run(dlock_hold** out_hold, dlock_grant* grant);

private:
    bool enqueue(std::vector<queue_entry>& queue);
    void check_limit(const call& read);
    bool limit_confirmed();
    bool signal_admission();
    bool find_by_guid(std::vector<queue_entry>& queue);
    bool keep_one_of_ours(const std::vector<queue_entry>& queue);
    bool list(std::vector<queue_entry>& queue);
    void ensure_lock_node();
    bool wait_for(const standing& at, int64_t deadline_ns);
    bool wait_for_children(int64_t deadline_ns);
    int grant_hold(dlock_hold** out_hold, dlock_grant* grant);
    void give_back() noexcept;
    bool retryable(int rc, const char* doing, const std::string& path);
    std::string own_path() const { return join_path(lock_path_, own_); }
    // How long to wait for one reply. One normally comes within a round trip, and the client library
    // fails requests within 2/3 of the session timeout when the connection is lost. A wait overshoots
    // the acquire's limit by at most a tenth of the session timeout; a request still unanswered then
    // is left to give_back (a create: found by guid and deleted by the monitor).
    int64_t request_bound() const {
        const int64_t now = now_ns(), timeout = s_->timeout_ms() * ns_per_ms;
        return std::min(now + 2 * timeout, std::max(limit_, now + timeout / 10));
    }

    dlock_backend& b_;
    const dlock_acquire_request& req_;
    const uint32_t kind_;     // dlock_hold_kind
    const uint32_t permits_;  // a permit's limit N, else 0
    scoped_waiter w_;
    const std::string lock_path_, guid_;
    std::shared_ptr<session> s_;
    std::string own_;              // our queue node's name, once known
    uint64_t fence_ = 0;           // its czxid
    bool maybe_created_ = false;   // a create of ours may have happened without our seeing the reply
    // A permit: the semaphore's stored limit was read and matched ours since our last create. Until
    // then the node is neither admitted nor left waiting: each listing checks it first (the create's
    // reply, or the read pipelined with it, may have been lost).
    bool limit_checked_ = false;
    // The watches our node is covered by, as the handling order of the replies that set them (see
    // waiter): the last enqueue's listing left one on the lock node's children; own_watched_ is our
    // node's path once a watch on it is set. 0 / "": none.
    uint64_t children_watched_ = 0;
    std::string own_watched_;
    uint64_t own_watched_since_ = 0;
    int64_t limit_ = forever_ns;   // when waiting for a connection or a reply stops
    std::string holder_;           // guid at the head of the queue when last listed
};

int acquisition::run(dlock_hold** out_hold, dlock_grant* grant) {
    const int64_t deadline = req_.deadline_ns;
    // A try-once acquire waits out a reconnection for up to connect_timeout, so that a brief
    // failover does not turn "try" into an error; any other acquire is bounded by its deadline.
    limit_ = deadline == 0 ? now_ns() + b_.config().connect_timeout_ms * ns_per_ms : deadline;
    int setbacks = 0;
    try {
        for (int round = 0;; ++round) {
            if (round > 0 && deadline != 0 && now_ns() >= deadline) {
                give_back();
                fail(DLOCK_TIMEOUT, fmt::format("lock `{}` not acquired within the wait on {}{}", req_.name, b_.where(s_.get()),
                                                holder_.empty() ? std::string() : " (held by " + holder_ + ")"));
            }
            std::shared_ptr<session> s = b_.connected_session(w_, limit_, true);
            if (s != s_) {
                // A new session: nodes of the previous one vanished with it, and its watches.
                own_.clear();
                maybe_created_ = false;
                children_watched_ = 0;
                own_watched_.clear();
                s_ = std::move(s);
            }
            std::vector<queue_entry> queue;
            const bool listed = own_.empty() ? enqueue(queue) : list(queue);
            if (!listed) {
                if (++setbacks > 100)
                    fail(DLOCK_BACKEND, fmt::format("{}: acquiring `{}` made no progress after {} attempts", b_.where(s_.get()), req_.name, setbacks));
                if (deadline == 0 && now_ns() >= limit_)
                    fail(DLOCK_UNAVAILABLE, fmt::format("{}: the connection failed while trying `{}` and was not regained within "
                                                        "connect_timeout ({} ms)",
                                                        b_.where(s_.get()), req_.name, b_.config().connect_timeout_ms));
                continue;
            }
            const auto mine = std::find_if(queue.begin(), queue.end(), [&](const queue_entry& e) { return e.node == own_; });
            if (mine == queue.end()) {  // deleted under us (by an administrator?): queue again
                own_.clear();
                if (++setbacks > 100) fail(DLOCK_BACKEND, fmt::format("{}: our queue node under `{}` keeps vanishing", b_.where(s_.get()), lock_path_));
                continue;
            }
            if (keep_one_of_ours(queue)) {
                if (++setbacks > 100) fail(DLOCK_BACKEND, fmt::format("{}: nodes of ours under `{}` could not be reduced to one", b_.where(s_.get()), lock_path_));
                continue;
            }
            // A permit's node whose limit was not checked yet (the replies pipelined with its create
            // were lost) is checked at this listing, admitted or not: a node of another N left
            // waiting would count as a holder for every client of the stored N (one read, on this
            // rare path only; a mismatch throws and give_back deletes the node).
            if (kind_ == DLOCK_HOLD_PERMIT && !limit_checked_ && !limit_confirmed()) continue;  // read failed: list again
            const standing at = standing_in(queue, size_t(mine - queue.begin()), kind_, permits_);
            if (at.admitted) {
                // A permit with a node after it may be the node a later waiter watches.
                if (kind_ == DLOCK_HOLD_PERMIT && mine + 1 != queue.end() && !signal_admission()) continue;
                return grant_hold(out_hold, grant);
            }
            holder_ = queue.front().guid;
            if (deadline == 0) {
                give_back();
                if (kind_ == DLOCK_HOLD_PERMIT)
                    fail(DLOCK_TIMEOUT, fmt::format("semaphore `{}`: all {} permits are taken on {} ({} other waiter(s) ahead)", req_.name,
                                                    permits_, b_.where(s_.get()), at.ahead - permits_));
                if (kind_ == DLOCK_HOLD_SHARED)
                    fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held or awaited exclusively on {} (writer {} ahead of this shared "
                                                    "acquire; {} node(s) ahead in all)",
                                                    req_.name, b_.where(s_.get()), at.wait_on->guid, at.ahead));
                fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held on {} (holder {}; {} other waiter(s) ahead)", req_.name,
                                                b_.where(s_.get()), holder_, at.ahead - 1));
            }
            if (at.wait_on ? wait_for(at, deadline) : wait_for_children(deadline)) return grant_hold(out_hold, grant);
        }
    } catch (const failure&) {
        give_back();
        throw;
    }
}

int acquisition::grant_hold(dlock_hold** out_hold, dlock_grant* grant) {
    auto h = std::make_unique<dlock_hold>();
    h->name = req_.name;
    h->lock_path = lock_path_;
    h->node_path = own_path();
    h->generation = s_->generation;
    h->fence = fence_;
    h->host_lease = req_.host_lease;
    grant->fencing_token = fence_;
    grant->valid_until_ns = s_->valid_until_ns();
    grant->ttl_ms = s_->timeout_ms();
    b_.register_hold(h.get(), w_, children_watched_, own_watched_ == h->node_path ? own_watched_since_ : 0);
    *out_hold = h.release();
    own_.clear();
    return DLOCK_OK;
}

bool acquisition::enqueue(std::vector<queue_entry>& queue) {
    if (maybe_created_) {
        if (!find_by_guid(queue)) return false;
        if (!own_.empty()) return true;
    }
    maybe_created_ = true;  // from here until the reply tells
    limit_checked_ = false;
    const node_kind shape = kind_ == DLOCK_HOLD_SHARED ? node_kind::reader
                            : kind_ == DLOCK_HOLD_PERMIT ? node_kind::exclusive
                                                         : b_.config().exclusive_node;
    auto created = b_.create(*s_, join_path(lock_path_, queue_node_prefix(guid_, shape)), ZOO_EPHEMERAL_SEQUENTIAL);
    // Pipelined behind the create: one session's requests run in order, so it lists our node too.
    // Its watch on the children tells a holder that its node was deleted, at no extra request.
    children_watched_ = 0;
    b_.watching_children(w_, *s_, lock_path_);
    auto listed = b_.children(*s_, lock_path_, true);
    // A semaphore's limit is the data of its node: read in the same round trip.
    auto limit = kind_ == DLOCK_HOLD_PERMIT ? b_.get(*s_, lock_path_) : listed;
    if (!b_.await(w_, {created.get(), listed.get(), limit.get()}, request_bound(), true)) return false;
    if (created->rc == ZOK) {
        maybe_created_ = false;
        const size_t slash = created->text.rfind('/');
        own_ = created->text.substr(slash + 1);
        fence_ = uint64_t(created->stat.czxid);
        if (kind_ == DLOCK_HOLD_PERMIT && limit->rc == ZOK) check_limit(*limit);  // a refusal deletes our node (give_back)
        if (listed->rc == ZOK) {
            children_watched_ = listed->done_order;
            queue = queue_of(listed->names);
            return true;
        }
        return list(queue);
    }
    if (!outcome_unknown(created->rc)) maybe_created_ = false;
    if (created->rc == ZNONODE) {
        ensure_lock_node();
        return false;
    }
    return retryable(created->rc, "creating a queue node under", lock_path_);
}

// A semaphore node stores its limit N as decimal text from its creation until the server deletes it
// (a container, deleted once empty): an acquire asking for another N is refused.
void acquisition::check_limit(const call& read) {
    limit_checked_ = read.text.empty();
    if (read.text.empty()) return;  // not created by dlock: no limit stored
    char* end = nullptr;
    const unsigned long long stored = std::strtoull(read.text.c_str(), &end, 10);
    if (*end || stored == 0 || stored > UINT32_MAX)
        fail(DLOCK_BACKEND, fmt::format("{}: semaphore node `{}` holds `{}`, not a permit limit", b_.where(s_.get()), lock_path_,
                                        read.text.substr(0, 32)));
    if (stored != permits_)
        fail(DLOCK_INVALID_ARGUMENT, fmt::format("semaphore `{}` has a limit of {} permits stored on {} (`{}`), but this acquire asked "
                                                 "for {}: every client of one semaphore must use the same limit",
                                                 req_.name, stored, b_.where(s_.get()), lock_path_, permits_));
    limit_checked_ = true;
}

// After every listing of a permit's queue, before its standing is judged: the stored limit was
// checked for our node, or is read and checked now (the create's reply or the read pipelined with
// it was lost, and the node was found by guid or listed afterwards). A mismatch throws (give_back
// deletes our node); false: the read failed, list again.
bool acquisition::limit_confirmed() {
    if (limit_checked_) return true;
    auto read = b_.get(*s_, lock_path_);
    if (!b_.await(w_, {read.get()}, request_bound(), true)) return false;
    if (read->rc == ZOK) {
        check_limit(*read);
        return true;
    }
    if (read->rc != ZNONODE) retryable(read->rc, "reading the limit of", lock_path_);
    return false;  // no semaphore node: ours is gone with it, the listing will tell
}

// Tells the waiter behind our node, if it watches it, that we hold a permit now: it then becomes
// the first waiter and watches the semaphore's children. False: the write failed; list again
// (the next round signals again).
bool acquisition::signal_admission() {
    auto written = b_.set_data(*s_, own_path(), "held");
    if (!b_.await(w_, {written.get()}, request_bound(), true)) return false;
    if (written->rc == ZOK) return true;
    if (written->rc != ZNONODE) retryable(written->rc, "signalling on", own_path());
    return false;
}

// After a create whose reply was lost: our node, if the create happened, carries our guid. The
// session may have moved to another server since, one that has not applied the create yet: a
// `sync` first (pipelined) makes the listing reflect every write the leader committed before it.
bool acquisition::find_by_guid(std::vector<queue_entry>& queue) {
    auto synced = b_.sync(*s_);
    auto listed = b_.children(*s_, lock_path_);
    // A permit's node found here was never checked against the stored limit: read it in the same
    // round trip.
    auto limit = kind_ == DLOCK_HOLD_PERMIT ? b_.get(*s_, lock_path_) : listed;
    if (!b_.await(w_, {synced.get(), listed.get(), limit.get()}, request_bound(), true)) return false;
    if (synced->rc != ZOK && !retryable(synced->rc, "syncing before listing", lock_path_)) return false;
    if (listed->rc == ZNONODE) {  // no lock node, so no node of ours
        maybe_created_ = false;
        return true;
    }
    if (listed->rc != ZOK) return retryable(listed->rc, "listing", lock_path_);
    maybe_created_ = false;
    queue = queue_of(listed->names);
    const auto found = std::find_if(queue.begin(), queue.end(), [&](const queue_entry& e) { return e.guid == guid_; });
    if (found == queue.end()) return true;  // the create never happened
    own_ = found->node;
    auto stat = b_.exists(*s_, own_path());
    if (!b_.await(w_, {stat.get()}, request_bound(), true) || stat->rc != ZOK) {
        maybe_created_ = true;  // look again next round
        own_.clear();
        return false;
    }
    fence_ = uint64_t(stat->stat.czxid);
    b_.log(1, fmt::format("{}: found our queue node `{}` again after a lost reply", b_.where(s_.get()), own_path()));
    if (kind_ == DLOCK_HOLD_PERMIT && limit->rc == ZOK) check_limit(*limit);  // a refusal deletes our node (give_back)
    return true;
}

// More than one node carrying our guid — a create of ours that happened unseen and was missed by
// find_by_guid — would make us wait behind our own ghost. The earliest is kept as ours (the better
// place in the queue), the others are deleted; what cannot be deleted now goes to the monitor.
// Returns true when the queue changed and must be listed again.
bool acquisition::keep_one_of_ours(const std::vector<queue_entry>& queue) {
    std::vector<const queue_entry*> ours;
    for (const auto& e : queue)
        if (e.guid == guid_) ours.push_back(&e);
    if (ours.size() < 2) return false;
    const queue_entry& earliest = *ours.front();
    if (earliest.node != own_) {
        auto stat = b_.exists(*s_, join_path(lock_path_, earliest.node));
        if (!b_.await(w_, {stat.get()}, request_bound(), true)) return true;
        if (stat->rc != ZOK) {
            if (stat->rc != ZNONODE) retryable(stat->rc, "reading", join_path(lock_path_, earliest.node));
            return true;  // gone meanwhile: list again
        }
        b_.log(2, fmt::format("{}: `{}` carries our guid ahead of our node `{}` (a create whose reply was lost); keeping it, deleting "
                              "the later one",
                              b_.where(s_.get()), earliest.node, own_));
        own_ = earliest.node;
        fence_ = uint64_t(stat->stat.czxid);
    }
    for (const queue_entry* e : ours) {
        if (e->node == own_) continue;
        const std::string path = join_path(lock_path_, e->node);
        auto removed = b_.remove(*s_, path);
        const bool done = b_.await(w_, {removed.get()}, request_bound(), true);
        if (!done || outcome_unknown(removed->rc)) b_.add_orphan(s_->generation, lock_path_, path, guid_);
    }
    return true;
}

bool acquisition::list(std::vector<queue_entry>& queue) {
    auto listed = b_.children(*s_, lock_path_);
    if (!b_.await(w_, {listed.get()}, request_bound(), true)) return false;
    if (listed->rc == ZOK) {
        queue = queue_of(listed->names);
        return true;
    }
    if (listed->rc == ZNONODE) {  // no lock node: our node is gone too
        queue.clear();
        return true;
    }
    return retryable(listed->rc, "listing", lock_path_);
}

// Creates the lock's container node, and the base path above it if someone deleted that.
void acquisition::ensure_lock_node() {
    for (int attempt = 0; attempt < 2; ++attempt) {
        auto made = b_.create(*s_, lock_path_, ZOO_CONTAINER, kind_ == DLOCK_HOLD_PERMIT ? std::to_string(permits_) : std::string());
        if (!b_.await(w_, {made.get()}, request_bound(), true)) return;
        if (made->rc == ZOK || made->rc == ZNODEEXISTS) return;
        if (made->rc != ZNONODE) {
            retryable(made->rc, "creating the lock node", lock_path_);
            return;
        }
        // The missing parents (base_path, the semaphores' node), innermost first: created from the
        // innermost one that exists down, so that a parent closed to us (a root readable only) is
        // never written to when what lies below it exists.
        std::vector<std::string> parents;
        for (size_t slash = lock_path_.rfind('/'); slash != 0 && slash != std::string::npos; slash = lock_path_.rfind('/', slash - 1))
            parents.push_back(lock_path_.substr(0, slash));
        size_t at = 0;
        for (int step = 0; step < int(2 * parents.size()) + 2 && at < parents.size(); ++step) {
            auto made_parent = b_.create(*s_, parents[at], ZOO_PERSISTENT);
            if (!b_.await(w_, {made_parent.get()}, request_bound(), true)) return;
            if (made_parent->rc == ZNONODE && at + 1 < parents.size()) {
                ++at;  // its own parent is missing too
                continue;
            }
            if (made_parent->rc != ZOK && made_parent->rc != ZNODEEXISTS &&
                !retryable(made_parent->rc, "creating the parent node", parents[at]))
                return;
            if (at == 0) break;
            --at;
        }
    }
}

// Waits until the watched node (the predecessor, or the nearest writer before a reader) is deleted
// (or changes, or the session ends, or the deadline). Returns true when that admitted us without
// listing again: it was the only node standing in our way when we listed (`at.alone`), and no node
// can take a place before ours later (sequence numbers only grow, and the lock node cannot be
// deleted and recreated while it holds ours), so its deletion admits us — one round trip less per
// handoff. Listing is still done when the session's last
// confirmed contact is older than a quarter of the session timeout (the listing's reply gives the
// lease its validity) and after any other wake-up. Our own node is watched too, in the same round
// trip (once per node): should someone else delete it, the wait ends and the listing that follows
// queues us again — events arrive in order, so a deletion of ours that came before the
// predecessor's is seen before its deletion is.
bool acquisition::wait_for(const standing& at, int64_t deadline_ns) {
    const std::string path = join_path(lock_path_, at.wait_on->node);
    b_.watch(w_, *s_, path);  // before the request: its event may arrive right after the reply
    auto unwatch = scope_exit([this] { b_.unwatch(w_); });
    const bool watch_own = own_watched_ != own_path();
    if (watch_own) b_.watching_own_node(w_, *s_, own_path());
    auto got = b_.get_and_watch(*s_, path);
    auto own = watch_own ? b_.get_and_watch(*s_, own_path()) : got;
    if (!b_.await(w_, {got.get(), own.get()}, request_bound(), true)) return false;
    if (watch_own) {
        if (own->rc != ZOK) {
            if (own->rc != ZNONODE) retryable(own->rc, "watching", own_path());
            return false;  // ours is gone: list again, and queue again
        }
        own_watched_ = own_path();
        own_watched_since_ = own->done_order;
    }
    if (got->rc != ZOK) {
        if (got->rc != ZNONODE) retryable(got->rc, "watching", path);
        return false;  // gone already: list again
    }
    // A semaphore's waiter whose predecessor signalled its admission already: list again.
    if (kind_ == DLOCK_HOLD_PERMIT && got->stat.version != 0) return false;
    b_.waiting(+1);
    auto no_longer_waiting = scope_exit([this] { b_.waiting(-1); });
    const int event = b_.wait_watch(w_, *s_, deadline_ns, own_watched_since_);
    if (b_.own_node_event(w_, own_watched_since_) != 0) {  // ours was deleted (or changed: the watch is spent): list again
        own_watched_.clear();
        return false;
    }
    return at.alone && event == ZOO_DELETED_EVENT && now_ns() - s_->confirmed_send_ns() < s_->timeout_ms() * ns_per_ms / 4;
}

// The first waiter of a semaphore: any holder's departure admits it, so it watches the semaphore
// node's children (set by a listing, atomically with what it lists; its own node's watch rides in
// the same round trip) and lists again when they change. Only this waiter watches the children, so
// a release wakes one waiter; a newcomer's node wakes it too (one listing, no grant). Never grants
// by itself: returns false, and the caller lists.
bool acquisition::wait_for_children(int64_t deadline_ns) {
    b_.watch(w_, *s_, lock_path_);  // a children event carries the lock node's path
    auto unwatch = scope_exit([this] { b_.unwatch(w_); });
    const bool watch_own = own_watched_ != own_path();
    if (watch_own) b_.watching_own_node(w_, *s_, own_path());
    auto listed = b_.children(*s_, lock_path_, true);
    auto own = watch_own ? b_.get_and_watch(*s_, own_path()) : listed;
    if (!b_.await(w_, {listed.get(), own.get()}, request_bound(), true)) return false;
    if (watch_own) {
        if (own->rc != ZOK) {
            if (own->rc != ZNONODE) retryable(own->rc, "watching", own_path());
            return false;
        }
        own_watched_ = own_path();
        own_watched_since_ = own->done_order;
    }
    if (listed->rc != ZOK) {
        if (listed->rc != ZNONODE) retryable(listed->rc, "listing", lock_path_);
        return false;
    }
    // Admitted meanwhile (or no longer first): list again at once.
    const auto queue = queue_of(listed->names);
    const auto mine = std::find_if(queue.begin(), queue.end(), [&](const queue_entry& e) { return e.node == own_; });
    if (mine == queue.end() || size_t(mine - queue.begin()) != permits_) return false;
    b_.waiting(+1);
    auto no_longer_waiting = scope_exit([this] { b_.waiting(-1); });
    b_.wait_watch(w_, *s_, deadline_ns, own_watched_since_);
    if (b_.own_node_event(w_, own_watched_since_) != 0) own_watched_.clear();
    return false;
}

// Deletes what this acquisition created; what cannot be deleted now goes to the monitor.
void acquisition::give_back() noexcept {
    try {
        if (!s_ || !b_.alive(*s_)) return;  // an ended session took its nodes with it
        if (!own_.empty()) {
            // Confirmed within a third of the session timeout, or left to the monitor (a second
            // delete of a deleted node is harmless).
            auto removed = b_.remove(*s_, own_path());
            const bool done = b_.await(w_, {removed.get()}, now_ns() + s_->timeout_ms() * ns_per_ms / 3, false);
            if (!done || outcome_unknown(removed->rc)) b_.add_orphan(s_->generation, lock_path_, own_path(), guid_);
            own_.clear();
        } else if (maybe_created_) {
            b_.add_orphan(s_->generation, lock_path_, "", guid_);
        }
        maybe_created_ = false;
    } catch (...) {
        // Best effort: the node dies with the session at the latest.
    }
}

// For a result that is not success: true when the round may be retried (connection or session
// trouble: the next round waits for a connected session), else throws a precise error.
bool acquisition::retryable(int rc, const char* doing, const std::string& path) {
    if (outcome_unknown(rc) || session_gone(rc) || rc == ZTHROTTLEDOP) return false;
    if (rc == ZNOAUTH)
        fail(DLOCK_PERMISSION, fmt::format("{}: permission denied {} `{}`: its ACL does not grant this client ({}); check `user`/"
                                        "`password`, or the nodes were created by another identity",
                                        b_.where(s_.get()), doing, path,
                                        b_.config().user.empty() ? "unauthenticated" : "digest user `" + b_.config().user + "`"));
    fail(DLOCK_BACKEND, fmt::format("{}: {} `{}` failed: {}", b_.where(s_.get()), doing, path, zerror(rc)));
}

int zk_acquire(dlock_backend* b, const dlock_acquire_request* req, dlock_hold** out_hold, dlock_grant* grant,
               dlock_plugin_error* error) {
    return guarded(error, "zookeeper", [&] {
        if (b->interrupted) fail(DLOCK_CANCELLED, "zookeeper: the client is closing");
        acquisition a(*b, *req);
        return a.run(out_hold, grant);
    });
}

// ---- release, renew, inspect ------------------------------------------------------------------------

int zk_release(dlock_backend* b, dlock_hold* h, dlock_plugin_error* error) {
    return guarded(error, "zookeeper", [&] {
        auto s = b->session_of(h->generation);
        if (!s) {  // the session that held it ended, and its node with it
            h->settled = true;
            return DLOCK_LOST;
        }
        // Past the session's bound the lease is lost by the client's own rule (the host has marked
        // it so), whatever the delete says; the node is still deleted in case the session lives.
        const int64_t sent = now_ns();
        const bool past_bound = sent >= s->valid_until_ns();
        b->set_releasing(h, true);
        const int rc = b->remove_now(*s, h->node_path);
        if (rc == ZOK) {
            h->settled = true;
            return past_bound ? DLOCK_LOST : DLOCK_OK;
        }
        if (rc == ZNONODE && h->release_in_doubt_ns != 0) {
            // An earlier attempt, sent within the bound, deleted it: the session is still alive (a
            // delete on an expired one fails with SESSIONEXPIRED), so the node was ours until then.
            h->settled = true;
            return DLOCK_OK;
        }
        if (rc == ZNONODE || session_gone(rc)) {  // expired, or deleted by someone else
            h->settled = true;
            return DLOCK_LOST;
        }
        if (past_bound) {  // most likely expired; if not, the monitor deletes the node after reconnecting
            b->add_orphan(h->generation, "", h->node_path, "");
            h->settled = true;
            return DLOCK_LOST;
        }
        if (outcome_unknown(rc) && h->release_in_doubt_ns == 0) h->release_in_doubt_ns = sent;
        if (!outcome_unknown(rc)) b->set_releasing(h, false);  // refused: the node is still ours to watch
        fail(DLOCK_UNKNOWN, fmt::format("{}: deleting `{}` failed: {}; retry the release", b->where(s.get()), h->node_path, zerror(rc)));
    });
}

void zk_hold_destroy(dlock_backend* b, dlock_hold* h) {
    try {
        b->forget_hold(h);  // no state report for it after this
        if (!h->settled) b->add_orphan(h->generation, "", h->node_path, "");
    } catch (...) {
    }
    delete h;
}

// Without a ttl there is nothing to extend: renewal confirms that each node still exists (one
// pipelined `exists` per hold, one round trip for the batch), behind one `sync` per session, whose
// answer needs the leader: on an ensemble only that moves the session's bound (an `exists` alone
// may be answered by a follower cut off from the leader).
int zk_renew(dlock_backend* b, dlock_renewal* renewals, size_t count, dlock_plugin_error* error) {
    return guarded(error, "zookeeper", [&] {
        scoped_waiter w(*b);
        std::vector<std::shared_ptr<session>> sessions(count);
        std::vector<call_ptr> checks(count), syncs(count);
        for (size_t i = 0; i < count; ++i) {
            renewals[i].status = DLOCK_LOST;
            sessions[i] = b->session_of(renewals[i].hold->generation);
            if (!sessions[i]) continue;
            const auto first = std::find(sessions.begin(), sessions.begin() + ptrdiff_t(i), sessions[i]);
            syncs[i] = first == sessions.begin() + ptrdiff_t(i) ? b->sync(*sessions[i]) : syncs[size_t(first - sessions.begin())];
            checks[i] = b->exists(*sessions[i], renewals[i].hold->node_path);
        }
        for (size_t i = 0; i < count; ++i) {
            if (!checks[i]) continue;
            const bool done = b->await(w, {syncs[i].get(), checks[i].get()}, now_ns() + sessions[i]->timeout_ms() * ns_per_ms, false);
            int rc = done ? checks[i]->rc : ZOPERATIONTIMEOUT;
            if (rc == ZOK && syncs[i]->rc != ZOK) rc = syncs[i]->rc;  // not confirmed through the leader
            if (rc == ZOK) {
                renewals[i].status = DLOCK_OK;
                renewals[i].valid_until_ns = sessions[i]->valid_until_ns();
            } else if (rc == ZNONODE || session_gone(rc)) {
                renewals[i].status = DLOCK_LOST;
            } else {
                renewals[i].status = DLOCK_UNAVAILABLE;
            }
        }
        return DLOCK_OK;
    });
}

int zk_inspect(dlock_backend* b, const char* name, dlock_lock_info* info, dlock_plugin_error* error) {
    return guarded(error, "zookeeper", [&] {
        scoped_waiter w(*b);
        auto s = b->connected_session(w, now_ns() + b->config().connect_timeout_ms * ns_per_ms, false);
        const std::string lock_path = join_path(b->config().base_path, escape_name(name));
        auto request_failed = [&](int rc, const std::string& doing) -> void {
            fail(rc == ZNOAUTH ? DLOCK_PERMISSION : DLOCK_UNAVAILABLE, fmt::format("{}: {} failed: {}", b->where(s.get()), doing, zerror(rc)));
        };
        info->held = 0;
        // Another client's release, acknowledged to it by the leader, may not have reached the
        // member this session reads from: a `sync` first (pipelined with the first listing) makes
        // the reads reflect every write committed before this call.
        auto synced = b->sync(*s);
        for (int attempt = 0; attempt < 5; ++attempt) {
            auto listed = b->children(*s, lock_path);
            if (!b->await(w, {synced.get(), listed.get()}, now_ns() + s->timeout_ms() * ns_per_ms, false))
                request_failed(ZOPERATIONTIMEOUT, (attempt == 0 ? "syncing with the leader and listing " : "listing ") + lock_path);
            if (synced->rc != ZOK) request_failed(synced->rc, "syncing with the leader before listing " + lock_path);
            if (listed->rc == ZNONODE) return DLOCK_OK;
            if (listed->rc != ZOK) request_failed(listed->rc, "listing " + lock_path);
            const auto queue = queue_of(listed->names);
            if (queue.empty()) return DLOCK_OK;
            const queue_entry& head = queue.front();
            auto stat = b->exists(*s, join_path(lock_path, head.node));
            if (!b->await(w, {stat.get()}, now_ns() + s->timeout_ms() * ns_per_ms, false)) request_failed(ZOPERATIONTIMEOUT, "reading the holder's node");
            info->held = 1;
            const size_t n = std::min(head.guid.size(), sizeof info->holder - 1);
            std::memcpy(info->holder, head.guid.data(), n);
            info->holder[n] = '\0';
            info->ttl_left_ms = -1;
            if (stat->rc == ZOK) {
                info->fencing_token = uint64_t(stat->stat.czxid);
                return DLOCK_OK;
            }
            if (stat->rc != ZNONODE) request_failed(stat->rc, "reading the holder's node");
            // Released between the two reads: look again.
        }
        info->fencing_token = 0;  // changing hands too fast to read a token
        return DLOCK_OK;
    });
}

const dlock_plugin zookeeper_plugin = {
    sizeof(dlock_plugin),
    2,
    "zookeeper",
    "ZooKeeper ensemble: the fair lock recipe (ephemeral sequential nodes, watch on the predecessor); czxid fencing; "
    "locks bound to the session.",
    zookeeper_options,
    sizeof zookeeper_options / sizeof zookeeper_options[0],
    zk_create,
    zk_destroy,
    zk_capabilities,
    zk_interrupt,
    zk_acquire,
    zk_release,
    zk_hold_destroy,
    zk_renew,
    zk_inspect,
    zk_holders,
    zk_list,
    zk_break,
};

const dlock_plugin zookeeper_plugin_v1 = dlock::plugin_kit::as_version_1(zookeeper_plugin);

}  // namespace

extern "C" DLOCK_PLUGIN_EXPORT int dlock_plugin_negotiate(uint32_t host_max_version, const dlock_plugin** out,
                                                          uint32_t* out_min_version) {
    return dlock::plugin_kit::negotiate_v2(host_max_version, &zookeeper_plugin, &zookeeper_plugin_v1, out, out_min_version);
}
