// partition_link.hpp — a client's side of a lab::partition for the fault suite's target: the link
// (lab/netns.hpp) to every server of the target, and a copy of the target's config that reaches the
// servers through it. Used by the partition scenarios (16a-16d) and the soak's nemesis.
//
// For sql the relay mirrors the TCP keepalive and user timeout the plugin asks the PostgreSQL
// server to use on its sessions (plugins/sql/pg_client.cpp), so a cut advisory holder's session
// ends on the server when it would on a direct link — neither kept alive by the relay nor ended
// early.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dlock/lab/lab.hpp"
#include "dlock/lab/netns.hpp"
#include "scenario_helpers.hpp"
#include "suite.hpp"

namespace dlock::faults::links {

using helpers::target_endpoints;

// The sql holder's peer_timeout through a link (the plugin's minimum): a cut advisory holder
// reports LOST within it.
inline constexpr milliseconds kSqlPeerTimeout{3000};

inline bool is_sql(const context& ctx) { return ctx.tgt().plugin == "sql"; }
inline bool is_advisory(const context& ctx) { return ctx.tgt().name == "sql_advisory"; }

// What the PostgreSQL server applies to each session the plugin opens (pg_client.cpp: twice the
// client's peer timeout), mirrored by the relay on the holder's connections.
inline lab::mirrored_tcp server_tcp_settings(const context& ctx) {
    lab::mirrored_tcp m;
    if (!is_sql(ctx)) return m;
    const int64_t peer_s = std::max<int64_t>(kSqlPeerTimeout.count() / 1000, 3);
    const int64_t server_peer_s = 2 * peer_s;
    m.keepalive_idle = std::chrono::seconds(server_peer_s / 2);
    m.keepalive_interval = std::chrono::seconds(std::max<int64_t>(server_peer_s / 4, 1));
    m.keepalive_count = 2;
    m.user_timeout = std::chrono::seconds(server_peer_s);
    return m;
}

// The client's side of a partition: the link and a config that reaches every server through it.
struct partitioned_holder_link {
    std::unique_ptr<lab::partition> link;
    std::filesystem::path config;
    std::vector<std::string> env;  // for spawn_holder_with_env / contend_options::extra_env
};

// `stop_on_lost`: a holder stops using the lock the moment it is told LOST (its hold ends there
// for the checkers), as an application that honours the callback would.
inline partitioned_holder_link make_link(context& ctx, const std::string& suffix, bool stop_on_lost = true) {
    partitioned_holder_link out;
    const auto servers = target_endpoints(ctx);
    out.link = std::make_unique<lab::partition>(servers, server_tcp_settings(ctx));
    std::ifstream in(ctx.tgt().config);
    std::stringstream buffer;
    buffer << in.rdbuf();
    std::string text = buffer.str();
    // Every server endpoint of the target's config, rewritten to the relay's address for it.
    for (std::size_t i = 0; i < servers.size(); ++i) {
        const std::string from = servers[i].to_string();
        const std::string to = out.link->endpoints()[i].to_string();
        for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
            text.replace(at, from.size(), to);
    }
    if (is_sql(ctx)) text += "  peer_timeout: " + std::to_string(kSqlPeerTimeout.count()) + "ms\n";
    out.config = ctx.dir() / ("partitioned" + suffix + ".yaml");
    std::ofstream(out.config) << text;
    out.env = {"DLOCK_FAULT_NETNS=" + out.link->client_namespace()};
    if (stop_on_lost) out.env.push_back("DLOCK_FAULT_STOP_ON_LOST=1");
    ctx.log("link " + out.link->client_namespace() + " -> " + out.link->server_namespace() + " (" +
            std::to_string(servers.size()) + " servers)");
    return out;
}

}  // namespace dlock::faults::links
