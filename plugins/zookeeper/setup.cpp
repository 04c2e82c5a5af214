// Opening a client: the first session (start), whether the servers are an ensemble (which bound
// held locks are reported against), and the base path, created if missing and checked for this
// client's permission to create lock nodes in it.
#include "zookeeper_backend.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string perms_text(int perms) {
    std::string out;
    if (perms & ZOO_PERM_CREATE) out += 'c';
    if (perms & ZOO_PERM_DELETE) out += 'd';
    if (perms & ZOO_PERM_READ) out += 'r';
    if (perms & ZOO_PERM_WRITE) out += 'w';
    if (perms & ZOO_PERM_ADMIN) out += 'a';
    return out.empty() ? "none" : out;
}

}  // namespace

using namespace dlock::zk;

void dlock_backend::start() {
    scoped_waiter w(*this);

    auto fresh = open_session();
    {
        dlock::plugin_kit::lock_guard lock(mutex);
        current_ = fresh;
    }
    std::shared_ptr<session> s;
    try {
        s = connected_session(w, now_ns() + config_.connect_timeout_ms * ns_per_ms, false);
    } catch (const failure& f) {
        if (f.status != DLOCK_UNAVAILABLE) throw;
        fail(DLOCK_UNAVAILABLE, fmt::format("zookeeper {}: no server accepted a session within {} ms; is the ensemble running "
                                            "and reachable from here?",
                                            config_.hosts, config_.connect_timeout_ms));
    }
    log(1, fmt::format("{}: session 0x{:x} connected; negotiated session timeout {} ms (asked {} ms)", where(s.get()),
                       s->id(), s->timeout_ms(), config_.session_timeout_ms));

    // A missing chroot is an operator's mistake to report, not a node to create.
    auto root = exists(*s, "/");
    if (!await(w, {root.get()}, now_ns() + config_.connect_timeout_ms * ns_per_ms, false))
        fail(DLOCK_UNAVAILABLE, fmt::format("{}: no answer to `exists /` within {} ms", where(s.get()), config_.connect_timeout_ms));
    if (root->rc == ZNONODE)
        fail(DLOCK_CONFIG, fmt::format("{}: the chroot `{}` does not exist; create it (zkCli.sh: `create {}`) or fix "
                                       "`connect`/`chroot`",
                                       where(s.get()), config_.chroot, config_.chroot));
    if (root->rc != ZOK)
        fail(DLOCK_UNAVAILABLE, fmt::format("{}: `exists /` failed: {}", where(s.get()), zerror(root->rc)));
    detect_ensemble(w, s);
    check_base_path(w, s);
    monitor_ = std::thread([this] { monitor_loop(); });
}

// A standalone server has an empty /zookeeper/config; an ensemble lists its members there, one
// `server.N=` line each. When it cannot be read (a chroot hides it from the C client, or an old
// server has none), the servers are taken for an ensemble: the cautious bound.
void dlock_backend::detect_ensemble(waiter& w, const std::shared_ptr<session>& s) {
    auto c = get_config(*s);
    const bool answered = await(w, {c.get()}, now_ns() + config_.connect_timeout_ms * ns_per_ms, false);
    size_t members = 0;
    if (answered && c->rc == ZOK && !c->names.empty())
        for (size_t at = c->names[0].find("server."); at != std::string::npos; at = c->names[0].find("server.", at + 1)) ++members;
    relayed_ = !(answered && c->rc == ZOK && members <= 1);
    log(1, fmt::format("{}: {}", where(s.get()),
                       relayed_ ? "an ensemble (or its configuration is unreadable): held locks are bounded from relayed confirmations"
                                : "a standalone server"));
}

// Creates the base path if missing (with dlock's ACL), then checks from its ACL that this client's
// identity may create lock nodes in it, so a wrong password is a clear error at open rather than a
// permission error at the first acquire. ACL entries of schemes dlock cannot evaluate (ip, sasl,
// x509) leave the decision to the server.
void dlock_backend::check_base_path(waiter& w, const std::shared_ptr<session>& s) {
    const int64_t until = now_ns() + config_.connect_timeout_ms * ns_per_ms;
    const std::string& base = config_.base_path;
    if (base != "/") {
        for (size_t slash = base.find('/', 1);; slash = base.find('/', slash + 1)) {
            const std::string prefix = base.substr(0, slash);
            auto c = create(*s, prefix, ZOO_PERSISTENT);
            if (!await(w, {c.get()}, until, false)) fail(DLOCK_UNAVAILABLE, fmt::format("{}: no answer creating `{}`", where(s.get()), prefix));
            if (c->rc == ZNOAUTH) {
                // ZooKeeper checks the parent's ACL before it looks for the node: a path an
                // administrator made for this client under a parent closed to it is refused too.
                auto existing = get_acl(*s, prefix);
                if (!await(w, {existing.get()}, until, false))
                    fail(DLOCK_UNAVAILABLE, fmt::format("{}: no answer reading `{}`", where(s.get()), prefix));
                if (existing->rc == ZOK) {
                    if (slash == std::string::npos) break;
                    continue;
                }
                if (existing->rc == ZNOAUTH)
                    fail(DLOCK_PERMISSION, fmt::format("{}: `{}` exists but its ACL does not let this client ({}) read it: it belongs "
                                                       "to another identity, or `password` is wrong (a digest is never refused "
                                                       "at login); check `user`/`password` or choose another `base_path`",
                                                       where(s.get()), prefix,
                                                       config_.user.empty() ? "unauthenticated" : "digest user `" + config_.user + "`"));
            }
            if (c->rc == ZNOAUTH)
                fail(DLOCK_PERMISSION, fmt::format("{}: permission denied creating the base path `{}`: the ACL of its parent does not let "
                                               "this client create nodes; check `user`/`password` or choose another `base_path`",
                                               where(s.get()), prefix));
            if (c->rc != ZOK && c->rc != ZNODEEXISTS)
                fail(c->rc == ZNONODE ? DLOCK_BACKEND : DLOCK_UNAVAILABLE,
                     fmt::format("{}: cannot create the base path `{}`: {}", where(s.get()), prefix, zerror(c->rc)));
            if (slash == std::string::npos) break;
        }
    }
    auto acl = get_acl(*s, base);
    if (!await(w, {acl.get()}, until, false)) fail(DLOCK_UNAVAILABLE, fmt::format("{}: no answer reading the ACL of `{}`", where(s.get()), base));
    if (acl->rc != ZOK) fail(DLOCK_UNAVAILABLE, fmt::format("{}: cannot read the ACL of `{}`: {}", where(s.get()), base, zerror(acl->rc)));

    const std::string own_user = config_.user;
    int granted = 0;
    bool undecidable = false, same_user_other_password = false;
    std::vector<std::string> shown;
    for (const auto& entry : acl->names) {  // "scheme:id perms"
        const size_t space = entry.rfind(' ');
        const std::string who = entry.substr(0, space);
        const int perms = std::atoi(entry.c_str() + space + 1);
        const size_t colon = who.find(':');
        const std::string scheme = who.substr(0, colon), id = who.substr(colon + 1);
        if (scheme == "world" && id == "anyone") {
            granted |= perms;
        } else if (scheme == "digest") {
            const std::string user = id.substr(0, id.find(':'));
            if (!acl_identity_.empty() && id == acl_identity_) granted |= perms;
            else if (!own_user.empty() && user == own_user) same_user_other_password = true;
            shown.push_back(fmt::format("digest:{} ({})", user, perms_text(perms)));
            continue;
        } else {
            undecidable = true;
        }
        shown.push_back(fmt::format("{} ({})", who, perms_text(perms)));
    }
    if (undecidable || (granted & ZOO_PERM_CREATE)) return;
    std::string acl_text;
    for (const auto& e : shown) acl_text += (acl_text.empty() ? "" : ", ") + e;
    if (same_user_other_password)
        fail(DLOCK_CONFIG, fmt::format("{}: authentication failed for the base path `{}`: its nodes belong to user `{}` with another "
                                       "password (ACL: {}); check `password`",
                                       where(s.get()), base, own_user, acl_text));
    fail(DLOCK_PERMISSION, fmt::format("{}: this client ({}) may not create lock nodes under `{}` (ACL: {}); set `user`/`password` "
                                   "to an identity the ACL grants, or choose another `base_path`",
                                   where(s.get()), own_user.empty() ? "unauthenticated" : "digest user `" + own_user + "`", base,
                                   acl_text));
}
