// mysql_names.hpp — the MySQL dialect's GET_LOCK names (mode: named), a pure mapping that needs no
// server: unit-tested in tests/unit/sql_pure_test.cpp.
#pragma once

#include <string>

namespace dlock::sql::mysql {

// The GET_LOCK name of a lock name: "dlock:" + the name itself when it is 1..58 bytes of
// [a-z0-9._/-] (readable, and free of the server's case folding and character-set conversion);
// otherwise "dlock#" + up to 25 such characters of the name (others as `_`) + "#" + the first 128
// bits of the name's SHA-256 in hex. The two forms never meet (`:` vs `#`), and distinct names share
// a GET_LOCK name only if their SHA-256 prefixes collide; such names would merely exclude each
// other (their fence rows stay apart, keyed by the full name).
std::string named_lock_key(const std::string& name);

}  // namespace dlock::sql::mysql
