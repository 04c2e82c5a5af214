// keys.hpp — building blocks of the etcd plugin's requests on queue keys, shared by the files that
// make them (keys.cpp, lock_queue.cpp, holds.cpp). Private to the plugin.
#pragma once

#include "connection.hpp"

#include <cstdint>
#include <string>

namespace dlock::etcd {

// The keys [dir, end) created before `revision` (all of them with 0), newest first, keys only.
void fill_queue_range(pb::RangeRequest& range, const std::string& dir, const std::string& end, int64_t before_revision,
                      int64_t limit);

// A compare of `txn`: `key`'s create_revision is `revision` (0: the key does not exist).
void compare_create_revision(pb::TxnRequest& txn, const std::string& key, int64_t revision);

}  // namespace dlock::etcd
