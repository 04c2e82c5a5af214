// The MySQL/MariaDB dialect of the `sql` backend: lease and named modes, the held-session monitor.
#include "mysql_backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace dlock::sql::mysql {

namespace {

constexpr int64_t forever_ns = std::numeric_limits<int64_t>::max();
constexpr int schema_version = 1;
// Lease-mode waiters poll: the first retry after 1 ms, the pause doubling up to this.
constexpr int64_t longest_poll_ns = 32'000'000;

// The pause between a polling waiter's attempts (lease mode: locks and permits). It doubles from
// 1 ms up to longest_poll_ns, with jitter so that waiters do not retry in step, and never sleeps
// past the deadline. The generator is seeded only when a wait begins: std::random_device costs µs.
class poll_pause {
public:
    // Sleeps the next pause from `now`, at most `cap_ns` and never past `deadline_ns`.
    void sleep(int64_t now, int64_t deadline_ns, int64_t cap_ns = INT64_MAX) {
        if (!jitter_) jitter_.emplace(std::random_device{}());
        const int64_t sleep_ns = std::min(cap_ns, pause_ns_ / 2 + int64_t((*jitter_)() % uint64_t(pause_ns_ / 2 + 1)));
        pause_ns_ = std::min(pause_ns_ * 2, longest_poll_ns);
        const int64_t until = std::min(deadline_ns, now + sleep_ns);
        const timespec ts{time_t((until - now) / 1'000'000'000), long((until - now) % 1'000'000'000)};
        nanosleep(&ts, nullptr);
    }

private:
    std::optional<std::minstd_rand> jitter_;
    int64_t pause_ns_ = 1'000'000;
};

std::string holder_description() {
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
    return fmt::format("{} pid {}", host, getpid());
}

uint64_t as_u64(const std::optional<std::string>& v) { return v ? std::stoull(*v) : 0; }
int64_t as_i64(const std::optional<std::string>& v) { return v ? std::stoll(*v) : 0; }

// GET_LOCK's timeout in seconds for a wait until `deadline_ns` (fractional: MariaDB and MySQL take
// microseconds); a wait without a deadline waits a year at a time.
std::string lock_timeout_for(int64_t deadline_ns) {
    if (deadline_ns == 0) return "0";
    if (deadline_ns == forever_ns) return "31536000";
    const int64_t left_us = std::max<int64_t>((deadline_ns - now_ns()) / 1000, 0);
    return fmt::format("{}.{:06}", left_us / 1'000'000, left_us % 1'000'000);
}

// Most leases one renewal statement carries (a name is at most 2 KiB as a hex literal, so a batch
// stays far below max_allowed_packet).
constexpr size_t renew_batch = 500;

// A derived table (n, o, t) of renewals [from, to): each lease's name as a hex literal, its owner
// token (32 hex digits, checked) and its ttl in µs — nothing from outside but hex digits and numbers.
std::string renewal_rows(dlock_renewal* renewals, size_t from, size_t to, const std::function<hold*(dlock_hold*)>& of) {
    std::string out;
    for (size_t i = from; i < to; ++i) {
        const hold* h = of(renewals[i].hold);
        if (h->owner.size() != 32 || !std::all_of(h->owner.begin(), h->owner.end(), [](unsigned char c) { return std::isxdigit(c); }))
            fail(DLOCK_INTERNAL, "sql backend: an owner token is not 32 hex digits");
        out += i == from ? "SELECT X'" : " UNION ALL SELECT X'";
        for (unsigned char c : h->name) out += fmt::format("{:02x}", c);
        out += fmt::format("' AS n, '{}' AS o, {} AS t", h->owner, renewals[i].ttl_ms * 1000);
    }
    return out;
}

int make_wake_fd() {
    const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) fail(DLOCK_INTERNAL, fmt::format("sql backend: eventfd failed: {}", std::strerror(errno)));
    return fd;
}

}  // namespace

// ---- held_monitor -------------------------------------------------------------------------------

held_monitor::held_monitor(std::function<void(void*)> on_dead) : on_dead_(std::move(on_dead)) {
    wake_fd_ = make_wake_fd();
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) fail(DLOCK_INTERNAL, fmt::format("sql backend: epoll_create1 failed: {}", std::strerror(errno)));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;  // the wake fd
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    thread_ = std::thread([this] { run(); });
}

held_monitor::~held_monitor() {
    stopping_ = true;
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
    if (thread_.joinable()) thread_.join();
    ::close(epoll_fd_);
    ::close(wake_fd_);
}

void held_monitor::add(void* cookie, int fd) {
    plugin_kit::lock_guard lock(mutex_);
    entry& e = entries_[cookie] = entry{fd, next_id_++};
    watch(e, true);
}

bool held_monitor::take(void* cookie) {
    plugin_kit::unique_lock lock(mutex_);
    settled_.wait(lock.std(), [&]() DLOCK_REQUIRES(mutex_) {
        auto it = entries_.find(cookie);
        return it == entries_.end() || !it->second.reporting;
    });
    auto it = entries_.find(cookie);
    if (it == entries_.end()) return false;
    const bool dead = it->second.dead;
    if (!dead && !it->second.in_use) watch(it->second, false);
    entries_.erase(it);
    return dead;
}

bool held_monitor::begin_use(void* cookie) {
    plugin_kit::unique_lock lock(mutex_);
    settled_.wait(lock.std(), [&]() DLOCK_REQUIRES(mutex_) {
        auto it = entries_.find(cookie);
        return it == entries_.end() || !it->second.reporting;
    });
    auto it = entries_.find(cookie);
    if (it == entries_.end() || it->second.dead) return false;
    it->second.in_use = true;
    watch(it->second, false);  // its reply must not look like a death
    return true;
}

void held_monitor::end_use(void* cookie, bool still_alive) {
    plugin_kit::lock_guard lock(mutex_);
    auto it = entries_.find(cookie);
    if (it == entries_.end()) return;
    it->second.in_use = false;
    if (!still_alive) {
        it->second.dead = true;
        return;
    }
    watch(it->second, true);
}

void held_monitor::run() {
    epoll_event events[64];
    while (!stopping_) {
        const int ready = epoll_wait(epoll_fd_, events, 64, -1);
        if (ready < 0 && errno != EINTR) return;
        std::vector<void*> report;
        {
            plugin_kit::lock_guard lock(mutex_);
            for (int i = 0; i < ready; ++i) {
                if (events[i].data.u64 == 0) {
                    uint64_t value;
                    [[maybe_unused]] ssize_t n = ::read(wake_fd_, &value, sizeof value);
                    continue;
                }
                // Events come only for watched (or just switched off) sockets: few, so a scan.
                auto it = std::find_if(entries_.begin(), entries_.end(),
                                       [&](const auto& held) { return held.second.id == events[i].data.u64; });
                if (it == entries_.end() || it->second.in_use || it->second.dead) continue;
                // An idle MySQL session is sent nothing unasked: anything readable is its end (the
                // server's "connection killed" packet, or EOF).
                watch(it->second, false);
                it->second.dead = true;
                it->second.reporting = true;
                report.push_back(it->first);
            }
        }
        for (void* cookie : report) on_dead_(cookie);  // no monitor lock held: the host may block
        if (report.empty()) continue;
        plugin_kit::lock_guard lock(mutex_);
        for (void* cookie : report) {
            auto it = entries_.find(cookie);
            if (it != entries_.end()) it->second.reporting = false;
        }
        settled_.notify_all();
    }
}

// ---- setup --------------------------------------------------------------------------------------

backend::backend(const settings& s, const dlock_plugin_host& host) : config_(s), host_(host) {
    const std::string db = s.database_qualifier.empty() ? "" : quote_identifier(s.database_qualifier) + ".";
    sql_.lease_table = db + quote_identifier(s.table);
    sql_.named_table = db + quote_identifier(s.table + "_named");
    sql_.version_table = db + quote_identifier(s.table + "_schema");
    sql_.holders_table = db + quote_identifier(s.table + "_holders");
    holder_ = holder_description();
    auto prepared = config_.mode == lock_mode::lease ? sql_.lease() : sql_.named();
    if (config_.mode == lock_mode::lease)
        for (auto& statement : sql_.permits()) prepared.push_back(std::move(statement));
    connections_ = std::make_unique<pool>(config_, std::move(prepared));
    // Connect eagerly: a wrong address, password or server is an error at open, not at first use.
    auto c = connections_->borrow(now_ns() + 5'000'000'000);
    try {
        check_server(*c);
        ensure_schema(*c);
        if (config_.mode == lock_mode::lease) holders_ready_ = ensure_holders_table(*c);
    } catch (const error& e) {
        c->mark_broken();
        throw classify(config_, e, "setup (checking the server and dlock's tables)", false);
    }
}

backend::~backend() {
    plugin_kit::lock_guard lock(monitor_mutex_);
    monitor_.reset();
}

// Refuses a server dlock cannot write to: read_only on (a replica, or a primary set read-only) — an
// account with the privilege to write anyway (SUPER, READ_ONLY ADMIN) is refused too, since a
// replica's rows would not be the primary's — and a session that starts read-only transactions.
void backend::check_server(connection& c) {
    // MariaDB before 11.1 names the session setting tx_read_only, MySQL 8 only transaction_read_only.
    const result r = c.query(c.is_mariadb() ? "SELECT @@global.read_only, @@session.tx_read_only"
                                            : "SELECT @@global.read_only, @@session.transaction_read_only",
                             statement_deadline());
    if (as_i64(r.rows.at(0).at(0)) != 0)
        fail(DLOCK_BACKEND, fmt::format("sql backend: mysql {} is read-only (read_only = ON: a replica, or a primary set "
                                        "read-only): dlock must write its lock rows; point `dsn` at the writable primary",
                                        config_.server));
    if (as_i64(r.rows.at(0).at(1)) != 0)
        fail(DLOCK_BACKEND, fmt::format("sql backend: mysql {} starts read-only transactions for this user "
                                        "(transaction_read_only = ON): dlock must write its lock rows; turn it off",
                                        config_.server));
}

// Creates the tables when missing. CREATE TABLE IF NOT EXISTS is atomic under the server's metadata
// locks, so clients starting together each either create a table or find it; a named lock
// serializes them anyway, so the version row is written once, after the tables exist.
void backend::ensure_schema(connection& c) {
    const int64_t deadline = statement_deadline();
    const result ddl_lock = c.query("SELECT GET_LOCK('dlock:ddl', 10)", deadline + 10'000'000'000);
    if (as_i64(ddl_lock.rows.at(0).at(0)) != 1)
        fail(DLOCK_UNAVAILABLE, fmt::format("sql backend: mysql {}: another client has been creating dlock's tables for "
                                            "10 s (named lock `dlock:ddl`); retry",
                                            config_.server));
    try {
        for (const std::string& create : sql_.tables()) c.query(create, statement_deadline());
        c.query(fmt::format("INSERT IGNORE INTO {} (component, version) VALUES ('dlock', {})", sql_.version_table, schema_version),
                statement_deadline());
        const result v = c.query(sql_.read_version(), statement_deadline());
        c.query("DO RELEASE_LOCK('dlock:ddl')", statement_deadline());
        const int found = v.rows.empty() ? schema_version : int(as_i64(v.rows[0][0]));
        if (found > schema_version)
            fail(DLOCK_CONFIG, fmt::format("sql backend: the tables at {} on mysql {} use dlock schema version {}, newer "
                                           "than this dlock understands ({}); upgrade dlock or use another `table`",
                                           sql_.lease_table, config_.server, found, schema_version));
    } catch (const error&) {
        c.mark_broken();  // ends the session, and the DDL lock with it
        throw;
    }
}

// The holders table (semaphores), created when missing. A user that may not create it still locks;
// it gets no SEMAPHORE capability, and the log says why.
bool backend::ensure_holders_table(connection& c) {
    try {
        c.query(sql_.holders_table_ddl(), statement_deadline());
        return true;
    } catch (const error& e) {
        if (e.lost) throw;
        if (host_.log)
            host_.log(host_.context, 1,
                      fmt::format("mysql {}: cannot create the holders table {} ({}); semaphores are off until an "
                                  "administrator creates it (docs/backends/mysql.md)", config_.server, sql_.holders_table, e.message)
                          .c_str());
        return false;
    }
}

uint64_t backend::capabilities() const {
    if (config_.mode == lock_mode::advisory)
        return DLOCK_CAP_FENCING | DLOCK_CAP_FAIR | DLOCK_CAP_PUSH_WAIT | DLOCK_CAP_SESSION_BOUND;
    return DLOCK_CAP_TTL | DLOCK_CAP_FENCING | (holders_ready_ ? DLOCK_CAP_SEMAPHORE | DLOCK_CAP_LIST | DLOCK_CAP_BREAK : 0);
}

size_t backend::break_lock(const std::string& name, bool semaphore) {
    if (!(capabilities() & DLOCK_CAP_BREAK))
        fail(DLOCK_NOT_SUPPORTED, fmt::format("sql backend: mysql {}: break needs lease mode with dlock's holders table "
                                              "(docs/backends/mysql.md)", config_.server));
    const int64_t deadline = statement_deadline();
    auto c = connections_->borrow(deadline);
    try {
        size_t broken = 0;
        c->begin(deadline);
        if (semaphore) {
            broken = size_t(as_i64(c->run("break_permits_read", {name}, deadline).rows.at(0).at(0)));
            c->run("break_permits_delete", {name}, deadline);
            c->run("break_permits_forget", {name}, deadline);
        } else {
            c->run("break_lock_holders", {name}, deadline);
            const result held = c->run("break_lock_read", {name}, deadline);
            broken = !held.rows.empty() && as_i64(held.rows[0][0]) != 0 ? 1 : 0;
            c->run("break_lock_free", {name}, deadline);
        }
        c->commit(deadline);
        return broken;
    } catch (const error& e) {
        c->mark_broken();  // ends the session: the transaction rolls back
        if (e.code == 1142 /* ER_TABLEACCESS_DENIED_ERROR */)
            fail(DLOCK_PERMISSION, fmt::format("sql backend: {}: this user may not break locks ({}): that needs DELETE on {} "
                                               "(GRANT DELETE ON {} TO <user>)", where(), e.message, sql_.holders_table,
                                               sql_.holders_table));
        const failure f = classify(config_, e, fmt::format("breaking `{}`", name), true);
        fail(f.status == DLOCK_UNAVAILABLE ? DLOCK_UNKNOWN : f.status, f.message);
    }
}

std::vector<holder_row> backend::holders(const std::string& name_or_prefix, bool exact) {
    if (!(capabilities() & DLOCK_CAP_LIST))
        fail(DLOCK_NOT_SUPPORTED, fmt::format("sql backend: mysql {}: holders and list need lease mode with dlock's holders "
                                              "table (docs/backends/mysql.md)", config_.server));
    const int64_t deadline = statement_deadline();
    auto c = connections_->borrow(deadline);
    result r;
    try {
        const int64_t one = exact ? 1 : 0;
        const std::string& n = name_or_prefix;
        r = c->run("holders", {one, n, n, n, one, n, n, n}, deadline);
    } catch (const error& e) {
        if (e.lost) c->mark_broken();
        throw classify(config_, e, exact ? fmt::format("reading the holders of `{}`", name_or_prefix) : "listing the holders", false);
    }
    std::vector<holder_row> out;
    for (const auto& row : r.rows) {
        holder_row h;
        h.name = row.at(0).value_or("");
        h.kind = uint32_t(as_i64(row.at(1)));
        h.permits = uint32_t(as_i64(row.at(2)));
        h.owner = row.at(3).value_or("");
        h.fence = as_u64(row.at(4));
        h.ttl_left_ms = row.at(5) ? as_i64(row.at(5)) : -1;
        out.push_back(std::move(h));
    }
    return out;
}

void backend::interrupt() {
    interrupted_ = true;
    connections_->interrupt();
    // GET_LOCK waits block inside the server: shutting the socket down ends the statement at once,
    // and the server ends the session, with any lock granted in the same instant.
    plugin_kit::lock_guard lock(waiting_mutex_);
    for (connection* c : waiting_) ::shutdown(c->socket(), SHUT_RDWR);
}

int backend::acquire(const dlock_acquire_request* req, std::unique_ptr<hold>& h, dlock_grant* grant) {
    if (interrupted_) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
    h->name = req->name;
    h->owner = req->owner;
    h->host_lease = req->host_lease;
    const uint32_t kind = DLOCK_STRUCT_COVERS(req, dlock_acquire_request, permits) ? req->kind : uint32_t(DLOCK_HOLD_EXCLUSIVE);
    if (kind == DLOCK_HOLD_PERMIT && (capabilities() & DLOCK_CAP_SEMAPHORE)) return acquire_permit(req, *h, grant);
    if (kind != DLOCK_HOLD_EXCLUSIVE)
        fail(DLOCK_NOT_SUPPORTED, fmt::format("sql backend: mysql {}: no {} in this mode (docs/backends/mysql.md)", config_.server,
                                              kind == DLOCK_HOLD_SHARED ? "shared locks" : "semaphores"));
    return config_.mode == lock_mode::lease ? acquire_lease(req, *h, grant) : acquire_named(req, h, grant);
}

int backend::release(hold* h) {
    if (h->permit) return release_permit(h);
    return config_.mode == lock_mode::lease ? release_lease(h) : release_named(h);
}

// ---- lease mode: semaphores ---------------------------------------------------------------------

bool backend::try_permit(connection& c, hold& h, uint32_t limit, int64_t ttl_ms, int64_t deadline, uint64_t& fence,
                         int64_t& wait_ms, bool& committing) {
    const int64_t n = limit;
    // An `error` escaping from here leaves the transaction open: the caller ends the connection. The
    // server ends the session should the client stall inside it (connection::begin).
    c.begin(deadline);
    try {
        result header = c.run("permit_header", {h.name}, deadline);
        if (header.rows.empty()) {
            // Slot 0 is created outside the transaction: two transactions that both found it missing
            // would each hold a gap lock the other's INSERT waits for (a deadlock).
            c.rollback(deadline);
            c.run("permit_create", {h.name, n}, deadline);
            c.begin(deadline);
            header = c.run("permit_header", {h.name}, deadline);
        }
        if (!header.rows.at(0).at(0)) {  // forgotten by a break: ours is the limit now
            c.run("permit_set_limit", {n, h.name}, deadline);
            header = c.run("permit_header", {h.name}, deadline);
        }
        const int64_t stored = as_i64(header.rows.at(0).at(0));
        if (stored != n)
            fail(DLOCK_INVALID_ARGUMENT,
                 fmt::format("sql backend: semaphore `{}` on {} has a limit of {} permits; this acquire asks for {} (every client "
                             "of a semaphore must give the same limit; a break forgets it)", h.name, where(), stored, n));
        int64_t slot = 0;
        const result free = c.run("permit_free_slot", {h.name, n}, deadline);
        if (!free.rows.empty()) {
            slot = as_i64(free.rows[0][0]);
        } else {
            const result slots = c.run("permit_slots", {h.name, n}, deadline);
            const int64_t existing = as_i64(slots.rows.at(0).at(0));
            if (existing >= n) {
                c.rollback(deadline);
                wait_ms = slots.rows[0][1] ? as_i64(slots.rows[0][1]) : -1;
                return false;
            }
            slot = existing + 1;  // slots are created in order, 1..existing exist
        }
        fence = c.run("permit_next_fence", {h.name}, deadline).insert_id;
        c.run("permit_take", {h.name, slot, h.owner, int64_t(fence), ttl_ms * 1000, holder_}, deadline);
        committing = true;
        c.commit(deadline);
        return true;
    } catch (const failure&) {
        c.mark_broken();  // ends the session, and the transaction with it
        throw;
    }
}

int backend::acquire_permit(const dlock_acquire_request* req, hold& h, dlock_grant* grant) {
    h.permit = true;
    int deadlocks = 0;
    bool retried_unknown = false;
    poll_pause pause;
    for (;;) {
        if (interrupted_) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        const int64_t deadline = statement_deadline_within(config_.client_limit_ms(), req->deadline_ns);
        auto c = connections_->borrow(deadline, true);
        const int64_t sent = now_ns();
        uint64_t fence = 0;
        int64_t wait_ms = -1;
        bool taken = false, committing = false;
        try {
            taken = try_permit(*c, h, req->permits, req->ttl_ms, deadline, fence, wait_ms, committing);
        } catch (const error& e) {
            c->mark_broken();  // ends the session: an open transaction rolls back
            // InnoDB chose this transaction as a deadlock's victim and rolled it back (a new slot's
            // INSERT against a release's next-key locks): nothing was written, so try again — a wait
            // for as long as its deadline allows (after the poll's pause, so that the transactions
            // do not meet again in step), a try-once a few times at once, then it reports the
            // permit not taken (the server answered: contention, not an outage).
            if (!e.lost && e.code == 1213) {
                if (req->deadline_ns == 0 && ++deadlocks <= 8) continue;
                if (req->deadline_ns == 0)
                    fail(DLOCK_TIMEOUT, fmt::format("semaphore `{}` on {}: the try-once was chosen as a deadlock's victim {} "
                                                    "times by contending acquirers and releases; no permit taken",
                                                    h.name, where(), deadlocks - 1));
                goto not_taken;
            }
            // Cut while queued behind a row lock (slot 0's, or a slot's): by the client at its
            // deadline, or by the server at max_statement_time (MariaDB's error 1969) or at
            // innodb_lock_wait_timeout (error 1205, set to idle_transaction_limit_s() for lease
            // sessions). The session is not known ended.
            const bool cut = e.code == 1969 || e.code == 1205 || (e.lost && e.message.find("client's deadline") != std::string::npos);
            if (!e.lost && !cut) throw classify(config_, e, fmt::format("the acquire of a permit of `{}`", h.name), false);
            // The COMMIT may have been applied, or may still be: only a permit row carrying our
            // token, read once that transaction is over, tells (read_back_permit).
            connections_->give_back(c.detach());
            taken = read_back_permit(h, e.lost && committing, e.message, fence);
            if (!taken && cut) {
                // The statement was only slow (queued behind slot 0's row lock). Not taken; a wait
                // goes on polling within its deadline, a try-once ends.
                if (req->deadline_ns == 0)
                    fail(DLOCK_TIMEOUT, fmt::format("semaphore `{}` on {}: the try-once queued behind other acquirers "
                                                    "until its statement was cut ({}); no permit taken", h.name, where(), e.message));
            } else if (!taken && (req->deadline_ns == 0 || (!retried_unknown && now_ns() < req->deadline_ns))) {
                // A try, or the first loss of a wait: a connection the server ended while idle
                // looks the same, so one immediate retry on a fresh connection is safe.
                if (req->deadline_ns == 0 && retried_unknown)
                    fail(DLOCK_UNAVAILABLE, fmt::format("sql backend: {}: the connection was lost during the acquire of a "
                                                        "permit of `{}` ({}); the row read back shows it was not taken; retry",
                                                        where(), h.name, e.message));
                retried_unknown = true;
                continue;
            }
            // Else taken, or a wait whose transaction was lost again: not taken; the deadline decides below.
        }
    not_taken:
        if (taken) {
            grant->fencing_token = fence;
            grant->valid_until_ns = h.granted(sent, req->ttl_ms);
            grant->ttl_ms = req->ttl_ms;
            return DLOCK_OK;
        }
        const int64_t now = now_ns();
        if (req->deadline_ns == 0 || now >= req->deadline_ns)
            fail(DLOCK_TIMEOUT, fmt::format("all {} permits of semaphore `{}` are held on {}", req->permits, h.name, where()));
        // Held: poll as a lock waiter does, but never past the first permit's expiry.
        pause.sleep(now, req->deadline_ns, wait_ms >= 0 ? (wait_ms + 1) * 1'000'000 : INT64_MAX);
    }
}

// A permit is committed only by the transaction's COMMIT. Until the client sent it, a cut or a lost
// connection leaves a transaction that can no longer commit (the next statement would need the
// client, which closes the connection), and a plain read of our permit row decides, as it does when
// the server answered the COMMIT with an error. When the connection was lost during the COMMIT, the
// COMMIT may still be on its way to the server, or running there: a read at once could miss a permit
// that commits a moment later (and the wait's next attempt would take a second slot with the same
// token: a ghost permit). The transaction holds slot 0's row lock from its first statement to its
// end, so that read-back is a locking read that takes slot 0 first: it waits for the transaction's
// end — which the server brings within idle_transaction_limit_s() should the session sit idle, its
// client gone — and then sees the permit if it was committed. A read-back cut while it waits is
// tried again until the stalled transaction must be over.
bool backend::read_back_permit(const hold& h, bool commit_pending, const std::string& cause, uint64_t& fence) {
    const int64_t until = now_ns() + (config_.idle_transaction_limit_s() * 1000 + config_.client_limit_ms()) * 1'000'000;
    auto unknown = [&](const std::string& why) {
        fail(DLOCK_UNKNOWN, fmt::format("sql backend: {}: the connection was lost during the acquire of a permit of `{}` "
                                        "({}) and reading the row back failed too ({}); it is not reported held; if it "
                                        "committed, the permit expires after its ttl", where(), h.name, cause, why));
    };
    for (;;) {
        const int64_t deadline = std::min(statement_deadline(), until);
        pool::lease c;
        try {
            c = connections_->borrow(deadline);
        } catch (const failure& f) {
            unknown(f.message);  // no connection for the read-back
        }
        try {
            const result back = commit_pending ? c->run("permit_read_back_after_end", {h.owner, h.name}, deadline)
                                               : c->run("permit_read_back", {h.name, h.owner}, deadline);
            if (back.rows.empty() || !back.rows[0][0]) return false;
            fence = as_u64(back.rows[0][0]);
            return true;
        } catch (const error& e) {
            c->mark_broken();
            // Cut while it waited for slot 0: by the server (MariaDB's max_statement_time, or
            // innodb_lock_wait_timeout) or by the client at its deadline.
            const bool cut = e.code == 1969 || e.code == 1205 || (e.lost && e.message.find("client's deadline") != std::string::npos);
            if (!commit_pending || !cut || now_ns() >= until) unknown(e.message);
        }
    }
}

int backend::release_permit(hold* h) {
    return release_row(h, true);
}

// ---- lease mode ---------------------------------------------------------------------------------

int backend::acquire_lease(const dlock_acquire_request* req, hold& h, dlock_grant* grant) {
    const int64_t ttl_us = req->ttl_ms * 1000;
    poll_pause pause;
    bool retried_unknown = false;
    for (;;) {
        if (interrupted_) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        const int64_t deadline = statement_deadline_within(config_.client_limit_ms(), req->deadline_ns);
        auto c = connections_->borrow(deadline, true);
        const int64_t sent = now_ns();
        result r;
        try {
            r = c->run("acquire", {h.name, h.owner, ttl_us, holder_}, deadline);
        } catch (const error& e) {
            // Cut while queued behind the row's lock (a break's, a slow release's, another session's
            // transaction) by the server: MariaDB's max_statement_time (error 1969) or
            // innodb_lock_wait_timeout (error 1205). The single autocommit statement was rolled
            // back: not taken, and the session is fine. A wait goes on polling within its deadline;
            // a try-once ends.
            if (!e.lost && (e.code == 1969 || e.code == 1205)) {
                const int64_t now = now_ns();
                if (req->deadline_ns == 0 || now >= req->deadline_ns)
                    fail(DLOCK_TIMEOUT, fmt::format("lock `{}` on {}: the acquire queued behind a row lock until its "
                                                    "statement was cut ({}); not taken", h.name, where(), e.message));
                pause.sleep(now, req->deadline_ns);
                continue;
            }
            if (!e.lost) throw classify(config_, e, fmt::format("the acquire of `{}`", h.name), false);
            // The statement may have committed: only a row carrying our token proves it did.
            c->mark_broken();
            connections_->give_back(c.detach());  // its slot, for the read-back
            auto unknown = [&](const std::string& why) {
                fail(DLOCK_UNKNOWN, fmt::format("sql backend: {}: the connection was lost during the acquire of `{}` ({}) "
                                                "and reading the row back failed too ({}); its outcome is unknown and it is "
                                                "not reported held; if it committed, the row expires after its ttl",
                                                where(), h.name, e.message, why));
            };
            try {
                auto again = connections_->borrow(statement_deadline());
                try {
                    const result back = again->run("read_back", {h.name, h.owner}, statement_deadline());
                    if (!back.rows.empty()) {
                        r.affected = 1;
                        r.insert_id = as_u64(back.rows[0][0]);
                    }
                } catch (const error& e2) {
                    again->mark_broken();
                    unknown(e2.message);
                }
            } catch (const failure& f) {
                if (f.status == DLOCK_UNKNOWN) throw;
                unknown(f.message);  // no connection for the read-back
            }
            // Not taken, as far as the server knows now; a connection the server ended while idle
            // looks the same, so one immediate retry on a fresh connection is safe.
            if (r.affected == 0 && !retried_unknown) {
                retried_unknown = true;
                continue;
            }
            if (r.affected == 0 && (req->deadline_ns == 0 || now_ns() >= req->deadline_ns))
                fail(DLOCK_UNAVAILABLE, fmt::format("sql backend: {}: the connection was lost during the acquire of `{}`; "
                                                    "the row read back shows it was not taken; retry",
                                                    where(), h.name));
        }
        if (r.affected > 0) {
            grant->fencing_token = r.insert_id;
            grant->valid_until_ns = h.granted(sent, req->ttl_ms);
            grant->ttl_ms = req->ttl_ms;
            return DLOCK_OK;
        }
        const int64_t now = now_ns();
        if (req->deadline_ns == 0 || now >= req->deadline_ns)
            fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held on {}", h.name, where()));
        // Held: poll.
        pause.sleep(now, req->deadline_ns);
    }
}

int backend::release_lease(hold* h) {
    return release_row(h, false);
}

// Runs lease mode's release statement of a permit or of a lock (name, owner → the row deleted or
// cleared when ours). A release the server did not answer may have happened: UNKNOWN, safe to retry.
int backend::release_row(hold* h, bool permit) {
    const int64_t deadline = statement_deadline();
    auto c = connections_->borrow(deadline);
    const int64_t sent = now_ns();
    try {
        const result r = c->run(permit ? "permit_release" : "release", {h->name, h->owner}, deadline);
        return h->release_answered(r.affected > 0);
    } catch (const error& e) {
        if (e.lost) c->mark_broken();
        h->release_unanswered(sent);
        const failure f = classify(config_, e,
                                   permit ? fmt::format("the release of a permit of `{}`", h->name)
                                          : fmt::format("the release of `{}`", h->name), true);
        fail(f.status == DLOCK_UNAVAILABLE ? DLOCK_UNKNOWN : f.status, f.message);
    }
}

// ---- named mode ---------------------------------------------------------------------------------

held_monitor& backend::monitor_for_holds() {
    plugin_kit::lock_guard lock(monitor_mutex_);
    if (!monitor_)
        monitor_ = std::make_unique<held_monitor>([this](void* cookie) {
            auto* h = static_cast<hold*>(cookie);
            if (host_.hold_state_changed) host_.hold_state_changed(host_.context, h->host_lease, DLOCK_LEASE_LOST, 0);
        });
    return *monitor_;
}

int backend::acquire_named_once(const dlock_acquire_request* req, std::unique_ptr<hold>& h, dlock_grant* grant,
                                bool& unanswered) {
    auto c = connections_->borrow(req->deadline_ns == 0 ? statement_deadline() : req->deadline_ns, true);
    {
        plugin_kit::lock_guard lock(waiting_mutex_);
        if (interrupted_) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        waiting_.push_back(&*c);
    }
    const auto unregister = plugin_kit::scope_exit([this, waiting = &*c] {
        plugin_kit::lock_guard lock(waiting_mutex_);
        waiting_.erase(std::find(waiting_.begin(), waiting_.end(), waiting));
    });
    // GET_LOCK's own timeout bounds the wait on the server; the client gives it up a client-side
    // limit later (a wait without a deadline cannot tell a long queue from a partition).
    const int64_t limit_ns = config_.client_limit_ms() * 1'000'000;
    const int64_t deadline = req->deadline_ns == 0          ? now_ns() + limit_ns
                             : req->deadline_ns == forever_ns ? forever_ns
                                                              : std::max(req->deadline_ns, now_ns()) + limit_ns;
    result r;
    try {
        r = c->run("lock", {h->name, h->owner, holder_, h->key, lock_timeout_for(req->deadline_ns)}, deadline);
    } catch (const error& e) {
        c->mark_broken();  // the session ends, and with it anything it may have been granted
        if (interrupted_) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        if (e.lost && e.message.find("client's deadline") != std::string::npos) unanswered = true;
        const failure f = classify(config_, e, fmt::format("the named-lock acquire of `{}`", h->name), false);
        fail(f.status == DLOCK_UNKNOWN ? DLOCK_UNAVAILABLE : f.status, f.message);
    }
    if (r.affected == 0) {
        if (interrupted_) fail(DLOCK_CANCELLED, "sql backend: the client is closing");
        fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held on {}{}", h->name, where(),
                                        req->deadline_ns == 0 ? "" : " (waited in the server's GET_LOCK)"));
    }
    grant->fencing_token = r.insert_id;
    grant->valid_until_ns = forever_ns;  // held until released or the session ends (reported LOST)
    grant->ttl_ms = req->ttl_ms;
    h->held = c.detach();
    monitor_for_holds().add(h.get(), h->held->socket());
    return DLOCK_OK;
}

int backend::acquire_named(const dlock_acquire_request* req, std::unique_ptr<hold>& h, dlock_grant* grant) {
    h->key = named_lock_key(h->name);
    bool unanswered = false;
    try {
        return acquire_named_once(req, h, grant, unanswered);
    } catch (const failure& f) {
        // A session the server ended while idle in the pool fails at once; the session is gone, and
        // anything it might have been granted with it, so one retry on a fresh one is safe.
        if (f.status != DLOCK_UNAVAILABLE || interrupted_ || unanswered) throw;
        return acquire_named_once(req, h, grant, unanswered);
    }
}

int backend::release_named(hold* h) {
    if (!h->held) return DLOCK_LOST;
    auto retire = [&](bool reusable) {
        if (!reusable) h->held->mark_broken();
        connections_->give_back(std::move(h->held));
    };
    if (monitor_for_holds().take(h)) {
        retire(false);  // already reported LOST: the server ended the session, and the lock with it
        return DLOCK_LOST;
    }
    bool unlocked = false;
    try {
        unlocked = as_i64(h->held->run("unlock", {h->key}, statement_deadline()).rows.at(0).at(0)) == 1;
    } catch (const error& e) {
        retire(false);
        if (e.lost)
            fail(DLOCK_LOST, fmt::format("sql backend: {}: the session holding `{}` ended ({}); the server releases its "
                                         "named locks with it",
                                         where(), h->name, e.message));
        const failure f = classify(config_, e, fmt::format("the release of `{}`", h->name), true);
        fail(f.status, f.message + "; the session was closed, which releases the lock");
    }
    retire(unlocked);
    return unlocked ? DLOCK_OK : DLOCK_LOST;
}

int backend::renew(dlock_renewal* renewals, size_t count, const std::function<hold*(dlock_hold*)>& of) {
    if (config_.mode == lock_mode::lease && std::any_of(renewals, renewals + count, [&](const dlock_renewal& r) { return of(r.hold)->permit; })) {
        // A batch with permits: one statement per lease, on one connection.
        const int64_t deadline = renewal_deadline(statement_deadline(), renewals, count, of);
        auto c = connections_->borrow(deadline);
        for (size_t i = 0; i < count; ++i) {
            hold* h = of(renewals[i].hold);
            const int64_t sent = now_ns();
            std::set<std::string> extended;
            try {
                if (c->run(h->permit ? "permit_renew" : "renew", {renewals[i].ttl_ms * 1000, h->name, h->owner}, std::max(deadline, sent + 1))
                        .affected > 0)
                    extended.insert(h->owner);
            } catch (const error& e) {
                if (e.lost) c->mark_broken();
                for (size_t j = i; j < count; ++j) renewals[j].status = e.lost ? DLOCK_UNKNOWN : DLOCK_BACKEND;
                break;
            }
            record_renewals(renewals, i, i + 1, sent, extended, of);
        }
        return DLOCK_OK;
    }
    if (config_.mode == lock_mode::lease) {
        const int64_t deadline = renewal_deadline(statement_deadline(), renewals, count, of);
        auto c = connections_->borrow(deadline);
        for (size_t from = 0; from < count; from += renew_batch) {
            const size_t to = std::min(count, from + renew_batch);
            const int64_t sent = now_ns();
            std::set<std::string> extended;  // owners whose rows were extended
            try {
                if (to - from == 1) {
                    hold* h = of(renewals[from].hold);
                    if (c->run("renew", {renewals[from].ttl_ms * 1000, h->name, h->owner}, std::max(deadline, sent + 1)).affected > 0)
                        extended.insert(h->owner);
                } else {
                    // One UPDATE for the whole batch; when it changed fewer rows than the batch has, one
                    // SELECT tells which: a row still carrying our owner token was extended (it cannot
                    // have expired since, and a row not ours cannot become ours).
                    const std::string rows = renewal_rows(renewals, from, to, of);
                    // STRAIGHT_JOIN: the batch drives, each row found by primary key, so the UPDATE
                    // locks only our rows, never a scan's worth of other names' rows.
                    const result updated = c->query(fmt::format("UPDATE ({}) r STRAIGHT_JOIN {} t ON t.name = r.n AND t.owner = r.o "
                                                                "SET t.expiry = UTC_TIMESTAMP(6) + INTERVAL r.t MICROSECOND",
                                                                rows, sql_.lease_table),
                                                    std::max(deadline, sent + 1));
                    if (updated.affected == to - from) {
                        for (size_t i = from; i < to; ++i) extended.insert(of(renewals[i].hold)->owner);
                    } else {
                        const result ours = c->query(
                            fmt::format("SELECT r.o FROM ({}) r STRAIGHT_JOIN {} t ON t.name = r.n AND t.owner = r.o", rows, sql_.lease_table),
                            std::max(deadline, now_ns() + 1));
                        for (const auto& row : ours.rows) extended.insert(row.at(0).value_or(""));
                    }
                }
            } catch (const error& e) {
                if (e.lost) c->mark_broken();
                for (size_t j = from; j < count; ++j) renewals[j].status = e.lost ? DLOCK_UNKNOWN : DLOCK_BACKEND;
                break;
            }
            record_renewals(renewals, from, to, sent, extended, of);
        }
        return DLOCK_OK;
    }
    // Named locks have no ttl; a renew confirms the session still holds the lock.
    held_monitor& m = monitor_for_holds();
    for (size_t i = 0; i < count; ++i) {
        hold* h = of(renewals[i].hold);
        renewals[i].valid_until_ns = forever_ns;
        if (!h->held || !m.begin_use(h)) {
            renewals[i].status = DLOCK_LOST;
            continue;
        }
        try {
            renewals[i].status = as_i64(h->held->run("check", {h->key}, statement_deadline()).rows.at(0).at(0)) == 1 ? DLOCK_OK : DLOCK_LOST;
            m.end_use(h, true);
        } catch (const error& e) {
            if (e.lost) h->held->mark_broken();
            renewals[i].status = e.lost ? DLOCK_LOST : DLOCK_UNKNOWN;
            m.end_use(h, !e.lost);
        }
    }
    return DLOCK_OK;
}

int backend::inspect(const char* name, dlock_lock_info* info) {
    const int64_t deadline = statement_deadline();
    auto c = connections_->borrow(deadline);
    result r;
    try {
        r = config_.mode == lock_mode::lease ? c->run("inspect", {std::string(name)}, deadline)
                                             : c->run("inspect", {named_lock_key(name), std::string(name)}, deadline);
    } catch (const error& e) {
        if (e.lost) c->mark_broken();
        throw classify(config_, e, fmt::format("inspecting `{}`", name), false);
    }
    info->held = 0;
    info->ttl_left_ms = -1;
    if (r.rows.empty()) return DLOCK_OK;  // never taken
    const auto& row = r.rows[0];
    info->fencing_token = as_u64(row[1]);
    info->held = as_i64(row[2]) != 0 ? 1 : 0;
    if (info->held) {
        const std::string owner = row[0].value_or("");
        const size_t n = std::min(owner.size(), sizeof info->holder - 1);
        std::memcpy(info->holder, owner.data(), n);
        info->holder[n] = '\0';
        if (config_.mode == lock_mode::lease && row.size() > 3 && row[3]) info->ttl_left_ms = as_i64(row[3]);
    }
    return DLOCK_OK;
}

void backend::destroy_hold(hold* h) {
    if (!h) return;
    try {
        if (h->held) {
            // Never released (or the release failed): end the session, which ends its lock. The
            // monitor forgets the hold first, so it never reports on it after this returns.
            held_monitor* m;
            {
                plugin_kit::lock_guard lock(monitor_mutex_);
                m = monitor_.get();
            }
            if (m) m->take(h);
            h->held->mark_broken();
            connections_->give_back(std::move(h->held));
        }
    } catch (...) {
    }
    delete h;
}

}  // namespace dlock::sql::mysql
