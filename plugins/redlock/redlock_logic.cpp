// The arithmetic of the `redlock` backend (redlock_logic.hpp).
#include "redlock_logic.hpp"

#include <dlock/plugin.h>
#include <dlock/plugin_kit/clock.hpp>

#include <algorithm>

namespace dlock::redlock {

using plugin_kit::drift_ns;

bool ttl_leaves_validity(int64_t ttl_ms) noexcept { return ttl_ms * 1'000'000 > drift_ns(ttl_ms); }

int64_t validity_ns(int64_t ttl_ms, int64_t sent_ns, int64_t received_ns) noexcept {
    return ttl_ms * 1'000'000 - (received_ns - sent_ns) - drift_ns(ttl_ms);
}

int64_t valid_until_ns(int64_t sent_ns, int64_t ttl_ms) noexcept { return sent_ns + ttl_ms * 1'000'000 - drift_ns(ttl_ms); }

bool released_on_quorum(const release_tally& t, bool in_doubt, size_t quorum) noexcept {
    return (in_doubt ? t.released + t.gone + t.other : t.released) >= quorum;
}

bool lost_on_quorum(const release_tally& t, bool in_doubt, size_t nodes, size_t quorum) noexcept {
    return (in_doubt ? t.proof : t.gone + t.other + t.proof) >= blocking_count(nodes, quorum);
}

int renewal_status(size_t confirmed, size_t refused, int64_t elapsed_ns, int64_t ttl_ms, size_t nodes, size_t quorum) noexcept {
    if (confirmed >= quorum && elapsed_ns < ttl_ms * 1'000'000 - drift_ns(ttl_ms)) return DLOCK_OK;
    if (refused > nodes - quorum) return DLOCK_LOST;  // a quorum can never confirm it again
    return DLOCK_UNAVAILABLE;
}

std::string round_value(const std::string& owner, uint64_t round) { return owner + "." + std::to_string(round); }

std::string owner_of(const std::string& value) { return value.substr(0, value.find('.')); }

std::optional<int64_t> measured_score_offset_us(std::vector<int64_t> server_us, int64_t sent_ns, int64_t received_ns) {
    if (server_us.empty()) return std::nullopt;
    std::nth_element(server_us.begin(), server_us.begin() + server_us.size() / 2, server_us.end());
    return server_us[server_us.size() / 2] - (sent_ns / 2 + received_ns / 2) / 1000;
}

bool score_offset_moved(int64_t used_us, int64_t measured_us, int64_t round_ns) noexcept {
    const int64_t moved = used_us > measured_us ? used_us - measured_us : measured_us - used_us;
    return moved > round_ns / 2000 + 2000;
}

}  // namespace dlock::redlock
