// watcher.hpp — the etcd plugin's watches: every watch of a client on ONE Watch stream, each
// waiting for the deletion of one key (or of any key of a range, or a put of the key) from a given
// revision on.
//
// No event is missed: a watch starts at a revision at which the key was seen to exist (inclusive),
// so its deletion, whenever it happens, is at or after that revision and is delivered. When the
// stream breaks, every watch that has not fired is created again on the new stream from the same
// revision. When the server cannot serve that history any more (compacted) or cancels the watch,
// the owner is told `reset` and must read the key to learn the truth.
//
// Synced and unsynced watches. etcd serves a watch whose start revision is after its current
// revision from its "synced" group: each event is sent as it commits. A watch that starts at or
// before the current revision goes to the "unsynced" group, which a loop catches up every 100 ms:
// its events, including those committed after it was created, wait for that loop until it has
// caught up. A watch created from the server's current revision (start revision 0) is synced, but
// for a write committed between etcd reading its revision and registering the watch (a short window,
// longer on a loaded server: measured, 26 of 4 587 watches in a contention benchmark). The owner learns that
// revision from the created answer (and covers the revisions before it with a read of its own), and
// can ask whether the watch is surely synced: a progress request sent right after the create is
// answered with the server's revision after the watch was registered; when that is still the
// created revision, no write came in between. (etcd 3.4 answers a progress request at once; later
// versions hold it back while any watch of the stream is unsynced, so the answer may come late.)
//
// Thread: one reader, started by the first watch and joined by stop(). Callbacks run on it, with no
// lock of the watcher held, each at most once per watch.
#pragma once

#include "connection.hpp"

#include <dlock/plugin_kit/thread_safety.hpp>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace dlock::etcd {

enum class watch_event {
    deleted,  // a DELETE event for the key
    put,      // a PUT event for the key (watches made with_puts only)
    reset,    // the watch ended without telling: re-read the key
};

class watcher {
public:
    using callback = std::function<void(watch_event)>;
    // Told the revision the server had when it created the watch: the watch delivers every deletion
    // after it.
    using created_callback = std::function<void(int64_t revision)>;
    // Told the server's revision at a moment after the watch was registered (see above).
    using progress_callback = std::function<void(int64_t revision)>;

    explicit watcher(connection& conn);
    ~watcher();
    watcher(const watcher&) = delete;
    watcher& operator=(const watcher&) = delete;

    // Watches `key` for its deletion at or after `start_revision`. Returns the watch's id. The
    // create request is sent without waiting for the server's answer: the start revision, not the
    // time of creation, decides which events are delivered. `start_revision` 0: after the revision
    // the server has when it creates the watch, which `on_created` is told (a synced watch, above);
    // should the stream break, the watch is created again from just after that revision.
    // `on_progress` (with start revision 0): a progress request follows the create, and its answer
    // is told; not told when the stream breaks before it comes. With a `range_end`, the watch covers
    // the keys [key, range_end) and fires at the first deletion of any of them. `with_puts`: a put
    // of the key fires it too (watch_event::put).
    int64_t watch_deletion(const std::string& key, int64_t start_revision, callback on_event, created_callback on_created = {},
                           progress_callback on_progress = {}, const std::string& range_end = {}, bool with_puts = false);
    // Stops a watch (no effect for an unknown id, e.g. one that fired: the reader ended that one on
    // the server already). Its callback is not called after this returns, unless it is running on
    // the reader thread right now.
    void cancel(int64_t id);
    // Moves the stream off member `failed` (the session saw it fail or stall).
    void member_failed(size_t failed);
    // Stops the stream and joins the reader. Idempotent.
    void stop();

private:
    struct watch {
        std::string key;
        std::string range_end;   // empty: `key` alone
        bool with_puts;          // a PUT fires it too
        int64_t start_revision;  // 0: from the server's current revision, until the created answer tells it
        callback on_event;
        created_callback on_created;
        progress_callback on_progress;
        bool awaiting_progress = false;  // created on this stream; the next progress answer is for it
    };
    // What one answer on the stream leaves to do once mutex_ is released: callbacks to call, and
    // watches to cancel on the server.
    struct answers {
        std::vector<std::pair<callback, watch_event>> due;
        created_callback created;
        std::vector<progress_callback> progressed;
        std::vector<int64_t> fired;  // watches whose event came: cancelled on the server once told
    };
    void reader_loop();
    // Applies one answer of the stream to the watches (under mutex_), collecting what to do after.
    void take_answer_locked(const pb::WatchResponse& response, grpc::ClientContext& context, answers& out) DLOCK_REQUIRES(mutex_);
    void send_create_locked(int64_t id, const watch& w) DLOCK_REQUIRES(mutex_);

    connection& conn_;
    plugin_kit::mutex mutex_;
    std::condition_variable changed_;
    std::map<int64_t, watch> watches_ DLOCK_GUARDED_BY(mutex_);  // live, not yet fired
    int64_t next_id_ DLOCK_GUARDED_BY(mutex_) = 1;
    bool stopping_ DLOCK_GUARDED_BY(mutex_) = false;
    bool started_ DLOCK_GUARDED_BY(mutex_) = false;
    // Written under mutex_.
    grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>* stream_ DLOCK_GUARDED_BY(mutex_) = nullptr;
    // The stream's context, for cancelling it without mutex_ (which a blocked writer may hold).
    plugin_kit::mutex context_mutex_;
    grpc::ClientContext* stream_context_ DLOCK_GUARDED_BY(context_mutex_) = nullptr;
    size_t stream_member_ DLOCK_GUARDED_BY(context_mutex_) = 0;
    std::thread reader_;
};

}  // namespace dlock::etcd
