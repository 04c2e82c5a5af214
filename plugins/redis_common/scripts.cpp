// The scripts (their texts are lua/*.lua, embedded at build time), running them (EVALSHA with a NOSCRIPT
// fallback), the key space, and the ACL check.
#include "redis_common.hpp"
#include "redis_lua_scripts.hpp"  // generated from lua/ (embed_lua.cmake)

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cstring>

namespace dlock::redis_common {

std::string script::sha1() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return sha1_;
}

void script::learn_sha1(const std::string& sha) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (sha1_known_.load(std::memory_order_relaxed)) return;  // a script's SHA1 never changes
    sha1_ = sha;
    sha1_known_.store(true, std::memory_order_release);
}

namespace {

// Whether `text` holds `part`: the static_asserts below check the scripts at compile time.
constexpr bool contains(const char* text, const char* part) {
    for (; *text; ++text) {
        size_t i = 0;
        while (part[i] && text[i] == part[i]) ++i;
        if (!part[i]) return true;
    }
    return false;
}

}  // namespace

// The scripts, one file each under lua/ (their contract headers say what each takes and answers),
// embedded at build time by embed_lua.cmake.
const script acquire_script(lua::acquire_lua);
const script release_script(lua::release_lua);
const script inspect_script(lua::inspect_lua);
const script queue_acquire_script(lua::queue_acquire_lua);
const script queue_release_script(lua::queue_release_lua);
const script leave_queue_script(lua::leave_queue_lua);
const script redlock_acquire_script(lua::redlock_acquire_lua);
const script redlock_release_script(lua::redlock_release_lua);
const script shared_acquire_script(lua::shared_acquire_lua);
const script mark_waiting_writer_script(lua::mark_waiting_writer_lua);
const script shared_release_script(lua::shared_release_lua);
const script permit_acquire_script(lua::permit_acquire_lua);
const script permit_release_script(lua::permit_release_lua);
const script renew_holds_script(lua::renew_holds_lua);
const script holders_script(lua::holders_lua);
const script break_script(lua::break_lua);

// The scripts that write or recognise a break's tombstone spell it as break_tombstone does.
#define DLOCK_TOMBSTONE_IN_LUA "'" DLOCK_REDIS_BREAK_TOMBSTONE "'"
static_assert(contains(lua::break_lua, DLOCK_TOMBSTONE_IN_LUA), "lua/break.lua: not break_tombstone");
static_assert(contains(lua::queue_release_lua, DLOCK_TOMBSTONE_IN_LUA), "lua/queue_release.lua: not break_tombstone");
static_assert(contains(lua::redlock_release_lua, DLOCK_TOMBSTONE_IN_LUA), "lua/redlock_release.lua: not break_tombstone");
static_assert(contains(lua::shared_release_lua, DLOCK_TOMBSTONE_IN_LUA), "lua/shared_release.lua: not break_tombstone");
#undef DLOCK_TOMBSTONE_IN_LUA

std::vector<std::string> script_command(const script& s, bool by_source, const std::vector<std::string>& keys,
                                        const std::vector<std::string>& args) {
    script_call call(keys, args);
    const command_line& line = call.command(s, by_source);
    std::vector<std::string> cmd;
    cmd.reserve(line.count());
    for (size_t i = 0; i < line.count(); ++i) cmd.emplace_back(line.argv()[i], line.lengths()[i]);
    return cmd;
}

script_call::script_call(const std::vector<std::string>& keys, const std::vector<std::string>& args) : script_call() {
    for (const auto& k : keys) key(k);
    for (const auto& a : args) arg(a);
}

script_call& script_call::key(std::string_view k) {
    line_.add(k);
    ++keys_;
    return *this;
}

script_call& script_call::arg(std::string_view a) {
    line_.add(a);
    return *this;
}

script_call& script_call::arg(int64_t n) {
    if (numbers_used_ < sizeof numbers_ / sizeof numbers_[0]) {
        char* text = numbers_[numbers_used_++];
        return arg(std::string_view(text, size_t(std::to_chars(text, text + sizeof numbers_[0], n).ptr - text)));
    }
    more_numbers_.push_back(std::to_string(n));
    return arg(more_numbers_.back());
}

const command_line& script_call::command(const script& s, bool by_source) {
    const std::string* sha = by_source ? nullptr : s.known_sha1();
    line_.set(0, sha ? "EVALSHA" : "EVAL");
    line_.set(1, sha ? std::string_view(*sha) : std::string_view(s.source()));
    line_.set(2, std::string_view(key_count_, size_t(std::to_chars(key_count_, key_count_ + sizeof key_count_, keys_).ptr - key_count_)));
    return line_;
}

reply_ptr run_script(connection& c, const script& s, script_call& call) {
    reply_ptr r = c.command(call.command(s, false));
    if (r->type == REDIS_REPLY_ERROR && std::strncmp(r->str, "NOSCRIPT", 8) == 0)
        r = c.command(call.command(s, true));  // the server lost its script cache
    if (r->type == REDIS_REPLY_ERROR) throw classify_error_reply(c.where().text(), std::string(r->str, r->len));
    return r;
}

reply_ptr run_script(connection& c, const script& s, const std::vector<std::string>& keys,
                     const std::vector<std::string>& args) {
    script_call call(keys, args);
    return run_script(c, s, call);
}

lock_keys keys_for(const std::string& prefix, const std::string& name) {
    std::string tag;
    tag.reserve(name.size());
    for (unsigned char c : name) {
        if (c == '{' || c == '}' || c == '%') tag += fmt::format("%{:02X}", c);
        else tag += char(c);
    }
    const std::string base = prefix + "{" + tag + "}";
    return {base + ":lock", base + ":fence", base + ":released", base + ":queue", base + ":queue-lapses", base + ":waiter:"};
}

lock_keys semaphore_keys_for(const std::string& prefix, const std::string& name) {
    const lock_keys lock = keys_for(prefix, name);
    const std::string base = lock.lock.substr(0, lock.lock.size() - std::strlen(":lock"));
    return {base + ":permits", base + ":permits-fence", base + ":permits-released", base + ":permits-queue",
            base + ":permits-queue-lapses", base + ":permits-waiter:"};
}

std::optional<std::pair<std::string, bool>> name_of_key(const std::string& prefix, const std::string& key) {
    if (key.size() < prefix.size() + 2 || key.compare(0, prefix.size(), prefix) != 0 || key[prefix.size()] != '{')
        return std::nullopt;
    const size_t close = key.find('}', prefix.size() + 1);
    if (close == std::string::npos) return std::nullopt;
    const std::string suffix = key.substr(close + 1);
    if (suffix != ":lock" && suffix != ":permits") return std::nullopt;
    std::string name;
    for (size_t i = prefix.size() + 1; i < close; ++i) {
        if (key[i] != '%') {
            name += key[i];
            continue;
        }
        if (i + 2 >= close) return std::nullopt;
        const int hi = std::isxdigit(static_cast<unsigned char>(key[i + 1])) ? std::stoi(key.substr(i + 1, 2), nullptr, 16) : -1;
        if (hi < 0 || !std::isxdigit(static_cast<unsigned char>(key[i + 2]))) return std::nullopt;
        name += char(hi);
        i += 2;
    }
    return std::make_pair(name, suffix == ":permits");
}

void check_permissions(connection& c, const settings& s, bool waiter_queue) {
    // No lock name is empty, so these keys and this channel are never a lock's.
    const lock_keys probe = keys_for(s.key_prefix, "");
    reply_ptr r = c.command(
        {"EVAL", lua::permissions_probe_lua, "4", probe.lock, probe.fence, probe.channel, probe.queue, waiter_queue ? "1" : "0"});
    if (r->type == REDIS_REPLY_ERROR) {
        const std::string error(r->str, r->len);
        if (error.find("acl_check_cmd") != std::string::npos) return;  // an older server without the call
        const failure f = classify_error_reply(c.where().text(), error);
        if (f.status != DLOCK_PERMISSION) throw f;
        fail(DLOCK_PERMISSION, fmt::format("redis {}: ACL user `{}` may not run dlock's scripts on keys `{}*` ({}); grant it "
                                       "`~{}*` and `+eval +evalsha +script|load`",
                                       c.where().text(), s.username.empty() ? "default" : s.username, s.key_prefix, error,
                                       s.key_prefix));
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) return;  // nothing denied, or nothing to ask
    std::string denied;
    bool channels = false, keys = false;
    for (size_t i = 0; i < r->elements; ++i) {
        if (r->element[i]->type != REDIS_REPLY_STRING) continue;
        const std::string what(r->element[i]->str, r->element[i]->len);
        denied += (denied.empty() ? "" : ", ") + what;
        if (what.rfind("PUBLISH", 0) == 0 || what.rfind("SUBSCRIBE", 0) == 0) channels = true;
        else if (what.rfind("TIME", 0) != 0) keys = true;
    }
    std::string grant;
    if (keys) grant += fmt::format("`~{}*` ", s.key_prefix);
    if (channels) grant += fmt::format("`&{}*` ", s.key_prefix);
    fail(DLOCK_PERMISSION, fmt::format("redis {}: ACL user `{}` may not run what dlock needs: {}; grant it {}and the commands "
                                   "`+eval +evalsha +script|load +get +set +incr +pttl +pexpire +del +time {}+publish +subscribe "
                                   "+unsubscribe` (ACL SETUSER), or use another `username`",
                                   c.where().text(), s.username.empty() ? "default" : s.username, denied, grant,
                                   waiter_queue ? "+zadd +zrem +zrange +zrangebyscore +zscore " : ""));
}

}  // namespace dlock::redis_common
