// Implements the watch stream (watcher.hpp).
#include "watcher.hpp"

#include <chrono>
#include <utility>
#include <vector>

namespace dlock::etcd {

namespace {

// Pause between two attempts to open the stream.
constexpr auto reconnect_pause = std::chrono::milliseconds(50);

bool contains(const std::string& text, const char* fragment) { return text.find(fragment) != std::string::npos; }

}  // namespace

watcher::watcher(connection& conn) : conn_(conn) {}

watcher::~watcher() { stop(); }

void watcher::send_create_locked(int64_t id, const watch& w) {
    pb::WatchRequest request;
    pb::WatchCreateRequest* create = request.mutable_create_request();
    create->set_key(w.key);
    if (!w.range_end.empty()) create->set_range_end(w.range_end);
    create->set_start_revision(w.start_revision);
    if (!w.with_puts) create->add_filters(pb::WatchCreateRequest::NOPUT);  // deletions only
    create->set_watch_id(id);
    // A failed write means the stream broke: the reader reopens it and creates every live watch again.
    stream_->Write(request);
    if (w.start_revision == 0 && w.on_progress) {
        pb::WatchRequest progress;
        progress.mutable_progress_request();
        stream_->Write(progress);
    }
}

int64_t watcher::watch_deletion(const std::string& key, int64_t start_revision, callback on_event, created_callback on_created,
                                progress_callback on_progress, const std::string& range_end, bool with_puts) {
    plugin_kit::lock_guard lock(mutex_);
    const int64_t id = next_id_++;
    const watch& w =
        watches_.emplace(id, watch{key, range_end, with_puts, start_revision, std::move(on_event), std::move(on_created), std::move(on_progress)}).first->second;
    if (!started_) {
        started_ = true;
        reader_ = std::thread([this] { reader_loop(); });
    }
    if (stream_) send_create_locked(id, w);
    else changed_.notify_all();
    return id;
}

void watcher::cancel(int64_t id) {
    plugin_kit::lock_guard lock(mutex_);
    if (watches_.erase(id) == 0) return;
    if (stream_) {
        pb::WatchRequest request;
        request.mutable_cancel_request()->set_watch_id(id);
        stream_->Write(request);
    }
}

void watcher::member_failed(size_t failed) {
    // Not under mutex_: a writer blocked on a silent member holds it, and this cancel unblocks it.
    plugin_kit::lock_guard lock(context_mutex_);
    if (stream_context_ && stream_member_ == failed) stream_context_->TryCancel();
}

void watcher::stop() {
    {
        plugin_kit::lock_guard lock(mutex_);
        stopping_ = true;
        changed_.notify_all();
    }
    {
        plugin_kit::lock_guard lock(context_mutex_);
        if (stream_context_) stream_context_->TryCancel();
    }
    if (reader_.joinable()) reader_.join();
}

void watcher::take_answer_locked(const pb::WatchResponse& response, grpc::ClientContext& context, answers& out) {
    if (response.created() && !response.canceled()) {
        // etcd answers a create before it sends any event of that watch.
        auto it = watches_.find(response.watch_id());
        if (it != watches_.end()) {
            watch& w = it->second;
            // Created again on a new stream, it must go on from where it starts now.
            if (w.start_revision == 0) w.start_revision = response.header().revision() + 1;
            out.created = std::move(w.on_created);
            w.on_created = nullptr;
            w.awaiting_progress = bool(w.on_progress);
        }
    } else if (response.watch_id() == -1 && !response.canceled() && response.events_size() == 0) {
        // A progress answer. etcd handles a stream's requests in order and answers its creates
        // and progress requests in that order: this revision was read after every watch whose
        // created answer came before it had been registered.
        for (auto& [id, w] : watches_)
            if (w.awaiting_progress) {
                w.awaiting_progress = false;
                out.progressed.push_back(std::move(w.on_progress));
                w.on_progress = nullptr;
            }
    } else if (response.canceled()) {
        // The server ended the watch: history compacted, or the create was refused. Our own
        // cancel requests erased theirs already.
        auto it = watches_.find(response.watch_id());
        if (it != watches_.end()) {
            out.due.emplace_back(std::move(it->second.on_event), watch_event::reset);
            watches_.erase(it);
        }
        // A refusal for the stream's credentials (an expired token): reopen with the current one.
        if (contains(response.cancel_reason(), "permission denied") || contains(response.cancel_reason(), "auth"))
            context.TryCancel();
    } else {
        for (const auto& event : response.events()) {
            const bool deleted = event.type() == mvccpb::Event::DELETE;
            auto it = watches_.find(response.watch_id());
            if (!deleted && (it == watches_.end() || !it->second.with_puts)) continue;
            if (it != watches_.end()) {
                out.due.emplace_back(std::move(it->second.on_event), deleted ? watch_event::deleted : watch_event::put);
                watches_.erase(it);
                // One event is all we wait for: end the watch on the server too, or it would
                // stay there until the stream closes; after the callbacks, which a woken
                // waiter should not wait for.
                out.fired.push_back(response.watch_id());
            }
            break;
        }
    }
}

void watcher::reader_loop() {
    plugin_kit::unique_lock lock(mutex_);
    for (;;) {
        changed_.wait(lock.std(), [&]() DLOCK_REQUIRES(mutex_) { return stopping_ || !watches_.empty(); });
        if (stopping_) return;
        const size_t index = conn_.current();
        member& m = conn_.at(index);
        lock.unlock();
        if (!conn_.wait_connected(index)) {
            conn_.fail_over(index);
            lock.lock();
            changed_.wait_for(lock.std(), reconnect_pause, [&]() DLOCK_REQUIRES(mutex_) { return stopping_; });
            continue;
        }
        grpc::ClientContext context;
        conn_.prepare_stream(context);
        std::unique_ptr<grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>> stream = m.watch->Watch(&context);
        lock.lock();
        {
            plugin_kit::lock_guard guard(context_mutex_);
            stream_context_ = &context;
            stream_member_ = index;
            if (stopping_) context.TryCancel();
        }
        stream_ = stream.get();
        for (auto& [id, w] : watches_) {
            // A progress answer on this stream says nothing of a watch created on the last one.
            w.awaiting_progress = false;
            if (w.start_revision != 0) w.on_progress = nullptr;
            send_create_locked(id, w);
        }
        lock.unlock();

        pb::WatchResponse response;
        answers out;
        while (stream->Read(&response)) {
            lock.lock();
            take_answer_locked(response, context, out);
            lock.unlock();
            if (out.created) out.created(response.header().revision());
            out.created = nullptr;
            for (auto& on_progress : out.progressed) on_progress(response.header().revision());
            out.progressed.clear();
            for (auto& [on_event, what] : out.due) on_event(what);
            out.due.clear();
            if (!out.fired.empty()) {
                lock.lock();
                for (const int64_t id : out.fired) {
                    pb::WatchRequest cancel;
                    cancel.mutable_cancel_request()->set_watch_id(id);
                    stream->Write(cancel);
                }
                lock.unlock();
                out.fired.clear();
            }
        }

        lock.lock();
        stream_ = nullptr;
        {
            plugin_kit::lock_guard guard(context_mutex_);
            stream_context_ = nullptr;
        }
        const bool stopping = stopping_;
        lock.unlock();
        const grpc::Status status = stream->Finish();
        if (stopping) return;
        // CANCELLED: we moved on ourselves (member_failed, or a token to renew).
        if (status.error_code() != grpc::StatusCode::CANCELLED) conn_.fail_over(index);
        lock.lock();
        changed_.wait_for(lock.std(), reconnect_pause, [&]() DLOCK_REQUIRES(mutex_) { return stopping_; });
    }
}

}  // namespace dlock::etcd
