// redis_common.hpp — what the `redis` and `redlock` plugins share (one static library, never
// copied): endpoints, connections with AUTH/SELECT/keepalive/timeouts, a connection pool with
// reconnect backoff, the Lua scripts run by EVALSHA with a NOSCRIPT fallback, the key space, the
// shared pub/sub subscriber that wakes waiters, and a parallel fan-out of one command to N servers.
//
// Errors are thrown as redis_common::failure {status, message}; the plugins turn them into
// dlock_status codes at their C entry points.
#pragma once

#include <dlock/plugin.h>
#include <dlock/plugin_kit.hpp>

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace dlock::redis_common {

using plugin_kit::failure;  // thrown inside the plugin, caught by guarded() at each entry point
using plugin_kit::fail;
using plugin_kit::forever_ns;
using plugin_kit::now_ns;

struct endpoint {
    std::string host;
    int port = 6379;
    std::string text() const;  // "host:port"
};
// Parses "host:port", "host" (port 6379), "[v6]:port". Throws failure(DLOCK_CONFIG).
endpoint parse_endpoint(const std::string& text);

struct settings {
    std::string username;  // ACL user; empty = default user
    std::string password;  // empty = no AUTH
    int64_t database = 0;
    std::string key_prefix = "dlock:";
    int64_t connect_timeout_ms = 1000;
    int64_t command_timeout_ms = 2000;
    size_t pool_size = 8;
};

struct reply_deleter {
    void operator()(redisReply* r) const { if (r) freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

// Turns a Redis error reply into a status and a message naming the server and what to do
// (READONLY, OOM, LOADING, MISCONF, WRONGTYPE, NOAUTH/WRONGPASS, ...).
failure classify_error_reply(const std::string& server, const std::string& error);

// The arguments of one command as hiredis takes them (pointers and lengths), referring to strings
// the caller keeps alive until the command is appended: building one copies no argument. Up to 16
// arguments are kept inline (no allocation). Neither copied nor moved: script_call points into it.
class command_line {
public:
    command_line() = default;
    explicit command_line(const std::vector<std::string>& args) { add(args); }
    explicit command_line(std::vector<std::string>&& args) = delete;  // it refers to the strings
    command_line(const command_line&) = delete;
    command_line& operator=(const command_line&) = delete;

    command_line& add(const char* data, size_t size);
    command_line& add(std::string_view text) { return add(text.data(), text.size()); }
    command_line& add(const std::vector<std::string>& args);
    command_line& add(std::vector<std::string>&& args) = delete;
    // Replaces argument `i` (< count()).
    void set(size_t i, std::string_view text);

    size_t count() const { return count_; }
    const char* const* argv() const { return heap_argv_.empty() ? inline_argv_ : heap_argv_.data(); }
    const size_t* lengths() const { return heap_lengths_.empty() ? inline_lengths_ : heap_lengths_.data(); }
    // redisAppendCommandArgv: adds the command to what `ctx` buffers (nothing is sent).
    int append_to(redisContext* ctx) const;

private:
    static constexpr size_t inline_capacity = 16;
    size_t count_ = 0;
    const char* inline_argv_[inline_capacity];
    size_t inline_lengths_[inline_capacity];
    std::vector<const char*> heap_argv_;  // every argument, once there are more than inline_capacity
    std::vector<size_t> heap_lengths_;
};

// Writes what `ctx` has buffered (hiredis's output buffer) with send(MSG_NOSIGNAL), as hiredis
// would with write(2). hiredis 0.14 writes with write(2), and a write to a connection the server
// closed raises SIGPIPE, whose default action ends the host process: every request dlock sends goes
// out through here, so a closed connection is an error (ctx->err = REDIS_ERR_IO, errno EPIPE) and
// never a signal. True when everything was sent.
bool write_buffered(redisContext* ctx);

// One connection (a hiredis context: not thread-safe; used by one thread at a time).
class connection {
public:
    connection(const endpoint& where, const settings& s);  // connects, AUTH, SELECT; throws failure
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    redisContext* context() { return ctx_.get(); }
    const endpoint& where() const { return where_; }
    bool broken() const { return broken_; }
    void mark_broken() { broken_ = true; }
    // Replies the server still owes for requests nobody waits for any more (a fan-out that stopped
    // at its quorum, a pipelined follow-up). They are read and dropped before the next request.
    int owed_replies() const { return owed_; }
    void owe_reply() { ++owed_; }
    void settle_owed_reply() { --owed_; }

    // Sends a command and waits for its reply. A transport failure marks the connection broken and
    // throws failure(DLOCK_UNAVAILABLE if nothing was sent, else DLOCK_UNKNOWN); an error reply is
    // returned as a reply (callers decide).
    reply_ptr command(const command_line& line);
    reply_ptr command(const std::vector<std::string>& args) { return command(command_line(args)); }

    // After command() failed: true when the server had closed the connection (EOF, reset), as a
    // restarted server or one that dropped an idle client does. A server runs nothing more that
    // arrives on a closed connection, so the failed command either ran before the close or never
    // will: the outcome is settled, and a retry on another connection cannot be overtaken by it.
    // False after a timeout: the command may still be queued on a slow or paused server.
    bool closed_by_server() const { return closed_by_server_; }

    // Whether the server closed this connection while it sat idle (restart, its `timeout`), or
    // sent something nobody asked for; checked without blocking before a pooled connection is
    // reused, so a dead one is dropped before a command is lost on it.
    bool closed_while_idle() const;
    // When the pool was last given this connection back (CLOCK_MONOTONIC, ns).
    int64_t idle_since_ns() const { return idle_since_ns_; }
    void idle_from(int64_t ns) { idle_since_ns_ = ns; }

    // Writes `args` straight onto the socket, even after a command timed out (hiredis refuses a
    // context once it failed), so the server reads it behind the request still pending on this
    // connection and runs both in order. Nobody reads its reply: the connection must be dropped
    // (it is marked broken). False if it could not be written whole.
    bool send_behind_pending(const command_line& line);
    bool send_behind_pending(const std::vector<std::string>& args) { return send_behind_pending(command_line(args)); }

private:
    struct context_deleter {
        void operator()(redisContext* c) const { redisFree(c); }
    };
    endpoint where_;
    // Owned from the moment it exists: a constructor that throws (refused, bad AUTH) frees it too.
    std::unique_ptr<redisContext, context_deleter> ctx_;
    bool broken_ = false;
    bool closed_by_server_ = false;
    int owed_ = 0;
    int64_t idle_since_ns_ = 0;
};

// Connections to one server, shared by threads. Broken connections are dropped, and so are idle
// ones the server closed meanwhile (checked at a borrow, unless the connection was given back less
// than recently_used_ns ago); a reconnect after a failure waits out a growing backoff (10 ms
// doubling to 1 s) instead of hammering the server.
class pool {
public:
    pool(endpoint where, settings s);
    const endpoint& where() const { return where_; }
    const settings& config() const { return settings_; }

    class borrowed {
    public:
        borrowed(pool* p, std::unique_ptr<connection> c) : pool_(p), conn_(std::move(c)) {}
        borrowed(borrowed&&) = default;
        ~borrowed();
        connection* operator->() { return conn_.get(); }
        connection& operator*() { return *conn_; }

    private:
        pool* pool_;
        std::unique_ptr<connection> conn_;
    };
    // A live connection: an idle one, else a new one while fewer than pool_size are open, else the
    // first one given back before `deadline_ns`. Throws failure(DLOCK_UNAVAILABLE) when the server
    // cannot be reached (or a reconnect backoff runs) or every connection stayed busy until the
    // deadline. A thread must give its connection back before it borrows another: with pool_size 1 a
    // second borrow could only time out.
    borrowed borrow(int64_t deadline_ns);
    // borrow() waiting at most connect_timeout + command_timeout: how long one connection is normally kept.
    borrowed borrow();

    // A connection given back this recently is lent without the check that the server closed it
    // (a poll(2) per borrow, two per lock cycle): servers close connections when they restart or
    // after an idle `timeout` (at least 1 s), and one that closes it within this window after a
    // command is the race the check leaves anyway (a close just after the check). A command sent
    // on such a connection fails as one the server closed (connection::closed_by_server).
    static constexpr int64_t recently_used_ns = 1'000'000;

private:
    friend class borrowed;
    void give_back(std::unique_ptr<connection> c);

    endpoint where_;
    settings settings_;
    plugin_kit::mutex mutex_;
    std::condition_variable available_;  // with mutex_
    std::vector<std::unique_ptr<connection>> idle_ DLOCK_GUARDED_BY(mutex_);
    size_t open_ DLOCK_GUARDED_BY(mutex_) = 0;
    int64_t retry_after_ns_ DLOCK_GUARDED_BY(mutex_) = 0;
    int64_t backoff_ms_ DLOCK_GUARDED_BY(mutex_) = 0;
};

// A Lua script run by EVALSHA, falling back to EVAL (which also caches it) on NOSCRIPT. Its SHA1
// is learnt from the first SCRIPT LOAD (every new connection loads all scripts into its server).
class script {
public:
    explicit script(const char* src) : source_(src) {}
    const char* source() const { return source_; }
    std::string sha1() const;            // empty until a server told us
    // The SHA1 once known (never changed after), else null: read without a lock or a copy.
    const std::string* known_sha1() const { return sha1_known_.load(std::memory_order_acquire) ? &sha1_ : nullptr; }
    void learn_sha1(const std::string& sha) const;

private:
    const char* source_;
    mutable std::mutex mutex_;
    mutable std::string sha1_;  // written once, under mutex_, before sha1_known_ is set
    mutable std::atomic<bool> sha1_known_{false};
};

// The Lua scripts: <name>_script runs lua/<name>.lua, whose header is its full contract (a summary
// follows). The scripts both plugins run. KEYS[1] lock key, KEYS[2] fence key, KEYS[3] channel (as
// a key so it shares the slot).
extern const script acquire_script;  // ARGV owner, ttl_ms -> {1, fence} | {0, pttl} | {0, pttl, 1} (shared holders)
extern const script release_script;  // ARGV owner -> 1 released | 0 not ours
extern const script inspect_script;  // -> {owner|false, pttl, fence|false}

// The scripts of a lock with a waiter queue (first come, first served), in which a release wakes
// only the next waiter (on its own channel, waiter_channel_prefix + owner) instead of every waiter. KEYS lock, fence, queue, queue_lapses (+ channel for the release).
// queue_acquire_script: ARGV owner, ttl_ms, mode (0 barging, 1 fair try, 2 fair wait: queues us),
//   entry_grace_ms -> {1, fence} | {0, ms to wait at most before retrying (-1: no limit),
//   1 held | 0 free but others queue first}.
// queue_release_script: ARGV owner, claim_ms, waiter_channel_prefix -> 1 released | 0 gone (no key)
//   | -1 not ours (another value, a tombstone, shared holders); the next waiter has claim_ms to
//   take the lock before it loses its place.
// leave_queue_script: ARGV owner, claim_ms, waiter_channel_prefix -> 1 left | 0 was not queued.
extern const script queue_acquire_script;
extern const script queue_release_script;
extern const script leave_queue_script;

// Redlock's exclusive holds with a waiter queue whose order every node agrees on (the client picks
// each waiter's score once; layout and contract in lua/redlock_acquire.lua, lua/redlock_release.lua).
// redlock_acquire_script: KEYS lock, fence (not touched: no tokens), queue, queue_lapses; ARGV value,
//   ttl_ms, member, score, mode (0 barging try, 1 fair try, 2 fair wait, 3 barging wait),
//   entry_grace_ms -> {1, 0} | {0, ms to wait at most, 1 held shared | 0, 1 held | 0}.
// redlock_release_script: KEYS lock, fence, queue, queue_lapses, channel; ARGV value, claim_ms,
//   waiter_channel_prefix, member ("" none), its score, entry_grace_ms, 'release' (drops the
//   holder's stale entry) | 'give back' (a failed round's: puts the waiter back in the queue)
//   -> 1 released | 0 gone | -1 not ours, as queue_release_script.
extern const script redlock_acquire_script;
extern const script redlock_release_script;

// Semaphores and shared locks (the layout is described in lua/includes/shared.lua,
// lua/includes/semaphore.lua and docs/backends/redis.md).
// A shared hold or a permit is the member "<owner>:<fencing token>" of a sorted set scored by the
// server time its lease ends: for a shared hold the set is at the lock key itself (so the
// exclusive scripts find the lock held), for a permit at the semaphore's key.
// shared_acquire_script: KEYS lock, fence, queue, queue_lapses; ARGV owner, ttl_ms, mode,
//   entry_grace_ms, claim_ms, waiter_channel_prefix[, 'untokened': token 0, no INCR (redlock)]
//   -> as queue_acquire_script (a shared waiter's queue entry and channel suffix is "s:<owner>").
// permit_acquire_script: KEYS permits, fence, queue, queue_lapses; ARGV owner, ttl_ms, mode,
//   entry_grace_ms, limit, claim_ms, waiter_channel_prefix -> as queue_acquire_script, or
//   {-1, stored limit} when it differs.
// shared_release_script, permit_release_script: KEYS key, fence, queue, queue_lapses, channel;
//   ARGV owner, claim_ms, waiter_channel_prefix, fencing token ("" when unknown) -> 1 released |
//   0 gone (no key, no member of ours) | -1 not ours (a string at the key) | -2 our member
//   expired (then removed) | -3 a break's tombstone (shared only). Their headers say which answers
//   let a release retried after UNKNOWN answer RELEASED.
// renew_holds_script: KEYS the leases' keys; ARGV kind ('x', 's', 'p'), owner or member, ttl_ms
//   per lease -> {1|0 ...}.
// holders_script: KEYS key, fence; ARGV 'lock' | 'semaphore' -> flat {kind, owner, fence, ms left, limit}...
// break_script: KEYS key, fence, queue, queue_lapses, channel; ARGV 'lock' | 'semaphore',
//   claim_ms, waiter_channel_prefix[, 'tombstone'] -> holders removed; NOPERM unless the user may
//   run UNLINK. 'tombstone' (a lock without fencing tokens: redlock) leaves break_tombstone at the
//   lock key until the broken holders' leases would have ended, instead of freeing the name.
extern const script shared_acquire_script;
// mark_waiting_writer_script: KEYS lock, fence, queue, queue_lapses; ARGV owner, keep_ms,
//   'mark' | 'unmark' -> 1. Redlock's waiting writers stop new shared holders with it.
extern const script mark_waiting_writer_script;
extern const script shared_release_script;
extern const script permit_acquire_script;
extern const script permit_release_script;
extern const script renew_holds_script;
extern const script holders_script;
extern const script break_script;
// The value break_script leaves at a lock key in 'tombstone' mode: never an owner's value (those
// are hex tokens), so every acquire finds the name held until it expires; no holder's either.
#define DLOCK_REDIS_BREAK_TOMBSTONE "dlock:broken"
inline constexpr const char* break_tombstone = DLOCK_REDIS_BREAK_TOMBSTONE;

// The keys and arguments of one script call, referring to strings the caller keeps alive (numbers
// are kept in it), all keys added before any argument: no argument is copied to send the call.
class script_call {
public:
    script_call() { line_.add("EVALSHA").add("").add(""); }  // command, SHA1 or source, key count: see command()
    script_call(const std::vector<std::string>& keys, const std::vector<std::string>& args);
    // It refers to the strings: not to those of a temporary.
    script_call(std::vector<std::string>&& keys, const std::vector<std::string>& args) = delete;
    script_call(const std::vector<std::string>& keys, std::vector<std::string>&& args) = delete;
    script_call(std::vector<std::string>&& keys, std::vector<std::string>&& args) = delete;
    script_call(const script_call&) = delete;
    script_call& operator=(const script_call&) = delete;

    script_call& key(std::string_view k);
    script_call& arg(std::string_view a);
    script_call& arg(int64_t n);  // as decimal text

    // The command line that runs `s` with these keys and arguments: EVALSHA, or EVAL (which also
    // caches the script) when `by_source` or the SHA1 is not known yet. Valid until the next call.
    const command_line& command(const script& s, bool by_source);

private:
    command_line line_;
    size_t keys_ = 0;
    char key_count_[24];
    char numbers_[6][24];               // the text of the first arg(int64_t)s,
    size_t numbers_used_ = 0;
    std::list<std::string> more_numbers_;  // and of the others (a list: its strings never move)
};

// EVALSHA with NOSCRIPT fallback on one connection. Error replies are thrown as classified failures.
reply_ptr run_script(connection& c, const script& s, script_call& call);
reply_ptr run_script(connection& c, const script& s, const std::vector<std::string>& keys,
                     const std::vector<std::string>& args);
// The command line for EVALSHA (or EVAL when `by_source`), for pipelined/fan-out use.
std::vector<std::string> script_command(const script& s, bool by_source, const std::vector<std::string>& keys,
                                        const std::vector<std::string>& args);

// ---- plugin entry-point helpers (both plugins' C entry points use these) ----------------------

using plugin_kit::copy_message;
using plugin_kit::drift_ns;
using plugin_kit::find_option;
using plugin_kit::guarded;

// The connection settings both plugins describe (username, password, database, key_prefix,
// connect_timeout, command_timeout, pool_size) read over `defaults`, their ranges checked.
// Throws failure(DLOCK_CONFIG) naming `backend`.
settings read_settings(const dlock_option_value* values, size_t count, settings defaults, const char* backend);

// Keys of one lock name. Bytes `{`, `}` and `%` are %XX-escaped so the whole name is one hash tag
// and the escaping is reversible (distinct names, distinct keys).
struct lock_keys {
    std::string lock, fence, channel;
    std::string queue, queue_lapses;     // the waiter queue (queue_acquire_script)
    std::string waiter_channel_prefix;   // + owner token: the channel that wakes one queued waiter
};
lock_keys keys_for(const std::string& prefix, const std::string& name);
// Keys of the semaphore `name` (another object than the lock `name`, in the same hash tag):
// `:permits` (the set of permits and the limit), `:permits-fence`, `:permits-queue`, ...
lock_keys semaphore_keys_for(const std::string& prefix, const std::string& name);
// The dlock name a lock key (`<prefix>{<tag>}:lock`) or semaphore key (`...:permits`) belongs to,
// and whether it is a semaphore's; nullopt for any other key.
std::optional<std::pair<std::string, bool>> name_of_key(const std::string& prefix, const std::string& key);
// The SCAN MATCH pattern of the keys of every name that starts with `name_prefix` (its lock key up to
// the name, glob-escaped so that it matches only itself, then `*`): both plugins' list.
inline std::string scan_pattern_for(const std::string& key_prefix, const std::string& name_prefix) {
    const std::string lock_key = keys_for(key_prefix, name_prefix).lock;  // <key_prefix>{<tag>}:lock
    std::string pattern;
    for (char ch : lock_key.substr(0, lock_key.size() - std::strlen("}:lock"))) {
        if (ch == '*' || ch == '?' || ch == '[' || ch == ']' || ch == '\\') pattern += '\\';
        pattern += ch;
    }
    return pattern + '*';
}
// A reply element that is a string or an integer, as text ("" for any other type).
inline std::string element_text(const redisReply* e) {
    if (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS) return std::string(e->str, e->len);
    if (e->type == REDIS_REPLY_INTEGER) return std::to_string(e->integer);
    return std::string();
}

// Checks that the connection's user may run everything dlock does on keys and channels under
// `prefix` (Redis 7 ACLs: `~<prefix>*` keys, `&<prefix>*` channels, and the commands), by asking
// the server (redis.acl_check_cmd in a script) for a name no lock can have. Throws
// failure(DLOCK_CONFIG) naming the user, each denied command and what to grant; a command the
// user may not run at all (EVAL) fails the same way. Nothing to check on servers before Redis 7.
// `waiter_queue`: the sorted-set commands of the waiter queue (queue_acquire_script) are needed too.
void check_permissions(connection& c, const settings& s, bool waiter_queue);

// Refuses a server older than Redis 5.0, whose scripts cannot write after reading TIME (effects
// replication became the default in 5.0), or one of 5.0 to 6.2 run with `lua-replicate-commands no`: throws failure(DLOCK_NOT_SUPPORTED) naming the server,
// its redis_version when INFO is allowed, and what to do. One small script at open; needs no right
// beyond those check_permissions checks.
void check_server_version(connection& c, const settings& s);
// check_server_version's message for the server at `where` (redis_version `version` from INFO, or
// a text that is no version when INFO was refused) whose script failed with `error`: a server of
// 5.0 or later runs with `lua-replicate-commands no`, an older one needs upgrading.
std::string server_version_refusal(const std::string& where, const std::string& version, const std::string& error);

// Reads the server's persistence and eviction settings and returns warnings for each hazard
// (an eviction policy that can drop lock keys; no AOF/RDB persistence).
std::vector<std::string> hazard_warnings(connection& c);

// One dedicated pub/sub connection per server, shared by every waiter of a client: the transport
// of a plugin_kit::waker (whose waiters' side it offers: watch, wait_listening, generation,
// wait_change, interrupt). A channel is SUBSCRIBEd while it has watchers; its messages, the
// confirmations of its subscription and a lost connection wake its waiters as the waker describes.
// The message the queue scripts publish to a queue's second waiter, the standby of the first one
// (lua/includes/queue.lua, wake_standby): a hint (plugin_kit::waker::hinted), not a wake-up — the standby
// retries when the first waiter's claim lapses, unless a wake-up comes first.
inline constexpr std::string_view standby_message = "standby";

class subscriber : public plugin_kit::waker {
public:
    // `on_change`: see plugin_kit::waker (for a caller that waits on several subscribers at once).
    subscriber(endpoint where, settings s, std::function<void()> on_change = {});
    ~subscriber();

private:
    void run();

    endpoint where_;
    settings settings_;
    std::atomic<bool> stopping_{false};
    std::thread thread_;
};

// Sends one command to several servers at once and collects the replies: appends on every
// connection, flushes, then polls all sockets until each replied, `enough(replies)` says the
// replies so far decide the outcome, or `deadline_ns` passes. Replies are null for servers that
// failed (connection marked broken), that had not answered when `enough` fired (their reply is
// owed by the connection: it stays usable), or that did not answer by the deadline: those are
// flagged in `late`, and their connection is left mid-reply for the caller, who may pipeline a
// follow-up command behind the pending one (with pipeline()) and must then mark it broken.
using enough_replies = std::function<bool(const std::vector<reply_ptr>&)>;
std::vector<reply_ptr> fan_out(std::vector<connection*>& connections, const command_line& command, int64_t deadline_ns,
                               std::vector<bool>& late, const enough_replies& enough = {});
// Appends and flushes a command whose reply nobody will wait for (it is owed, then dropped);
// false on a transport failure.
bool pipeline(connection& c, const command_line& command);
inline bool pipeline(connection& c, const std::vector<std::string>& command) { return pipeline(c, command_line(command)); }

}  // namespace dlock::redis_common
