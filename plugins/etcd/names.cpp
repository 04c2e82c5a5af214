// Lock names to queue directory elements and back (see names.hpp).
#include "names.hpp"

namespace dlock::etcd {

std::string escape_name(const char* name) {
    static const char hex[] = "0123456789ABCDEF";
    std::string out;
    for (const unsigned char* p = reinterpret_cast<const unsigned char*>(name); *p; ++p) {
        if (*p == '%' || *p == '/' || *p < 0x20 || *p == 0x7f) {
            out += '%';
            out += hex[*p >> 4];
            out += hex[*p & 15];
        } else {
            out += char(*p);
        }
    }
    return out;
}

bool unescape_name(const std::string& escaped, std::string& name) {
    name.clear();
    for (size_t i = 0; i < escaped.size(); ++i) {
        if (escaped[i] != '%') {
            name += escaped[i];
            continue;
        }
        if (i + 2 >= escaped.size()) return false;
        int value = 0;
        for (size_t j = i + 1; j <= i + 2; ++j) {
            const char c = escaped[j];
            if (c >= '0' && c <= '9') value = value * 16 + (c - '0');
            else if (c >= 'A' && c <= 'F') value = value * 16 + (c - 'A' + 10);
            else return false;
        }
        name += char(value);
        i += 2;
    }
    return !name.empty();
}

}  // namespace dlock::etcd
