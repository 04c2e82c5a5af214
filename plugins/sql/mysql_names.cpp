// The MySQL dialect's GET_LOCK names (mysql_names.hpp).
#include "mysql_names.hpp"

#include <fmt/format.h>
#include <openssl/sha.h>

#include <algorithm>

namespace dlock::sql::mysql {

namespace {

bool safe_key_char(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '/' || c == '-'; }

}  // namespace

std::string named_lock_key(const std::string& name) {
    const bool readable = !name.empty() && name.size() <= 58 &&
                          std::all_of(name.begin(), name.end(), [](unsigned char c) { return safe_key_char(c); });
    if (readable) return "dlock:" + name;
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(name.data()), name.size(), digest);
    std::string key = "dlock#";
    for (size_t i = 0; i < name.size() && i < 25; ++i) key += safe_key_char(name[i]) ? name[i] : '_';
    key += '#';
    for (int i = 0; i < 16; ++i) key += fmt::format("{:02x}", digest[i]);
    return key;
}

}  // namespace dlock::sql::mysql
