// The MySQL dialect's DSN (mysql_client.hpp: is_mysql_dsn, parse_dsn): pure text, no server and no
// Connector/C, so unit-tested in tests/unit/sql_pure_test.cpp.
#include "mysql_client.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

namespace dlock::sql::mysql {

namespace {

std::string lower(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return text;
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Percent-decodes one part of the DSN; `part` names it in the error (never its value).
std::string percent_decode(const std::string& text, const char* part) {
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '%') {
            out += text[i];
            continue;
        }
        const int hi = i + 2 < text.size() ? hex_digit(text[i + 1]) : -1;
        const int lo = i + 2 < text.size() ? hex_digit(text[i + 2]) : -1;
        if (hi < 0 || lo < 0)
            fail(DLOCK_CONFIG, fmt::format("sql backend: option `dsn`: {} has a `%` not followed by two hex digits", part));
        out += char(hi * 16 + lo);
        i += 2;
    }
    return out;
}

}  // namespace

bool is_mysql_dsn(const std::string& dsn) {
    const std::string head = lower(dsn.substr(0, dsn.find("://")));
    return dsn.find("://") != std::string::npos && (head == "mysql" || head == "mariadb");
}

void parse_dsn(const std::string& dsn, settings& s) {
    const size_t sep = dsn.find("://");
    if (!is_mysql_dsn(dsn))
        fail(DLOCK_CONFIG, "sql backend: option `dsn` is not a MySQL DSN; use mysql://user:password@host:3306/database");
    std::string rest = dsn.substr(sep + 3), query;
    if (const size_t q = rest.find('?'); q != std::string::npos) {
        query = rest.substr(q + 1);
        rest.resize(q);
    }
    std::string authority = rest;
    if (const size_t slash = rest.find('/'); slash != std::string::npos) {
        authority = rest.substr(0, slash);
        s.database = percent_decode(rest.substr(slash + 1), "the database");
        if (s.database.find('/') != std::string::npos)
            fail(DLOCK_CONFIG, "sql backend: option `dsn`: the path must be one database name (mysql://host/database)");
    }
    if (const size_t at = authority.rfind('@'); at != std::string::npos) {
        const std::string userinfo = authority.substr(0, at);
        authority = authority.substr(at + 1);
        const size_t colon = userinfo.find(':');
        s.user = percent_decode(userinfo.substr(0, colon), "the user name");
        if (colon != std::string::npos && s.password.empty()) s.password = percent_decode(userinfo.substr(colon + 1), "the password");
    }
    if (authority.find(',') != std::string::npos)
        fail(DLOCK_CONFIG, "sql backend: option `dsn` names several hosts; the MySQL dialect connects to one server");
    std::string port;
    if (!authority.empty() && authority.front() == '[') {  // [IPv6]:port
        const size_t close = authority.find(']');
        if (close == std::string::npos) fail(DLOCK_CONFIG, "sql backend: option `dsn`: `[` of an IPv6 address is not closed");
        s.host = authority.substr(1, close - 1);
        if (close + 1 < authority.size() && authority[close + 1] == ':') port = authority.substr(close + 2);
    } else if (const size_t colon = authority.rfind(':'); colon != std::string::npos) {
        s.host = authority.substr(0, colon);
        port = authority.substr(colon + 1);
    } else if (!authority.empty()) {
        s.host = authority;
    }
    if (!port.empty()) {
        const bool digits = std::all_of(port.begin(), port.end(), [](unsigned char c) { return std::isdigit(c); });
        const long value = digits && port.size() <= 5 ? std::stol(port) : -1;
        if (value < 1 || value > 65535)
            fail(DLOCK_CONFIG, fmt::format("sql backend: option `dsn`: port `{}` is not a number in 1..65535", port));
        s.port = unsigned(value);
    }
    size_t start = 0;
    while (!query.empty() && start <= query.size()) {
        size_t amp = query.find('&', start);
        if (amp == std::string::npos) amp = query.size();
        const std::string item = query.substr(start, amp - start);
        start = amp + 1;
        if (item.empty()) continue;
        const size_t eq = item.find('=');
        const std::string key = item.substr(0, eq);
        const std::string value = eq == std::string::npos ? "" : percent_decode(item.substr(eq + 1), "a query value");
        if (key == "sslmode" || key == "ssl-mode") {
            if (s.sslmode.empty()) s.sslmode = value;
        } else if (key == "sslrootcert" || key == "ssl-ca") {
            if (s.sslrootcert.empty()) s.sslrootcert = value;
        } else if (key == "sslcert" || key == "ssl-cert") {
            if (s.sslcert.empty()) s.sslcert = value;
        } else if (key == "sslkey" || key == "ssl-key") {
            if (s.sslkey.empty()) s.sslkey = value;
        } else if (key == "socket") {
            s.socket = value;
        } else {
            fail(DLOCK_CONFIG, fmt::format("sql backend: option `dsn`: unknown query key `{}` for MySQL (known: sslmode, "
                                           "sslrootcert, sslcert, sslkey, socket, and dlock's own options)",
                                           key));
        }
    }
    const std::string mode = lower(s.sslmode);
    static const std::vector<std::string> known = {"",         "disable",  "disabled",  "require",        "required",
                                                   "verify-ca", "verify_ca", "verify-full", "verify_identity"};
    if (std::find(known.begin(), known.end(), mode) == known.end())
        fail(DLOCK_CONFIG, fmt::format("sql backend: `sslmode` `{}` is not one the MySQL dialect supports: use disable, "
                                       "require, verify-ca or verify-full (MySQL's DISABLED, REQUIRED, VERIFY_CA, "
                                       "VERIFY_IDENTITY also work); `prefer` is not offered, since Connector/C cannot "
                                       "fall back from TLS",
                                       s.sslmode));
    s.server = fmt::format("{}:{}/{}", s.socket.empty() ? s.host : s.socket, s.port, s.database.empty() ? "(no database)" : s.database);
}

}  // namespace dlock::sql::mysql
