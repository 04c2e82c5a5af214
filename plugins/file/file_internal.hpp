// file_internal.hpp — what the parts of the `file` backend share (private to plugins/file): the
// on-disk format (headers, locked byte ranges, slot records), the open description, the client
// (dlock_backend, with its descriptor pool), the sleeper and the semaphore doorbell, and the lock
// primitives. file_plugin.cpp opens with how the backend works.
#pragma once

#include "file_plugin.hpp"

#include <dlock/plugin.h>
#include <dlock/plugin_kit.hpp>
#include <dlock/plugin_kit/thread_safety.hpp>

#include <atomic>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace dlock::file_backend {

using plugin_kit::fail;
using plugin_kit::find_option;
using plugin_kit::forever_ns;
using plugin_kit::now_ns;

// ---- on-disk format (format.cpp) ---------------------------------------------------------------

constexpr char magic[8] = {'d', 'l', 'o', 'c', 'k', 'f', '1', '\n'};

// The header at offset 0 of every lock file. Written only by the holder of the lock.
struct lock_file_header {
    char magic[8];
    uint64_t fence;      // the last fencing token issued for this name
    char holder[40];     // owner token of the current (or, once released, the last) holder
    int64_t holder_pid;  // for people reading the file
    uint32_t name_bytes;
    char name[1028];     // the lock name, for people reading the file
};
// What an acquisition writes, in one pwrite: the fields from `fence` to `holder_pid`.
constexpr size_t holder_fields_offset = offsetof(lock_file_header, fence);
constexpr size_t holder_fields_bytes = offsetof(lock_file_header, name_bytes) - holder_fields_offset;
static_assert(offsetof(lock_file_header, holder) == holder_fields_offset + sizeof(uint64_t) &&
                  offsetof(lock_file_header, holder_pid) == offsetof(lock_file_header, holder) + 40 &&
                  holder_fields_bytes == sizeof(uint64_t) + 40 + sizeof(int64_t),
              "the holder fields must be contiguous");

constexpr char semaphore_magic[8] = {'d', 'l', 'o', 'c', 'k', 's', '1', '\n'};

// The header at offset 0 of every semaphore file.
struct semaphore_file_header {
    char magic[8];
    uint64_t fence;  // the last fencing token issued for this semaphore
    uint32_t limit;  // N, as the acquirers give it; rewritten only while no permit is held
    uint32_t bell;   // written by a release while a waiter holds the gate: wakes it (inotify)
    uint32_t name_bytes;
    char name[1028];  // the semaphore name: list() reads it back
};

// Locked byte ranges (see the top of this file).
constexpr off_t lock_byte = 0;
constexpr off_t turnstile_byte = 1;
constexpr off_t gate_byte = 2;
constexpr off_t counter_byte = 3;
constexpr off_t slot_lock_base = 16;  // slot i: claim byte 16 + 2i, publish byte 17 + 2i
constexpr off_t claim_byte(size_t slot) { return slot_lock_base + 2 * off_t(slot); }
constexpr off_t publish_byte(size_t slot) { return claim_byte(slot) + 1; }
constexpr size_t max_shared_slots = 1 << 16;

// Slot i's record, at record_base + i * sizeof(slot_record): who holds the slot.
struct slot_record {
    char owner[40];
    uint64_t fence;
    int64_t pid;
    uint32_t kind;  // dlock_hold_kind
    uint32_t reserved;
};
static_assert(sizeof(slot_record) == 64, "slot records are 64 bytes");
constexpr off_t record_base = 4096;
static_assert(record_base >= off_t(sizeof(lock_file_header)) && record_base >= off_t(sizeof(semaphore_file_header)),
              "records start after the header");
constexpr off_t record_offset(size_t slot) { return record_base + off_t(slot * sizeof(slot_record)); }

pid_t current_tid();

// An open description of one lock or semaphore file. Reused across acquisitions of the same name.
struct descriptor {
    std::string name;
    std::string file_name;  // in the backend's directory
    bool semaphore = false; // a semaphore's file, not a lock's
    uint32_t kind = DLOCK_HOLD_EXCLUSIVE;  // as a hold: how it is held
    int fd = -1;
    dev_t device = 0;       // of the open file, to compare with what the path names
    ino_t inode = 0;
    bool released = false;  // as a hold: unlocked by release, back to the pool at hold_destroy
    ~descriptor() {
        if (fd >= 0) close(fd);
    }
};

}  // namespace dlock::file_backend

// The plugin's hold is the locked description itself, taken from and given back to the idle pool:
// an acquisition of a name this client has locked before allocates nothing.
struct dlock_hold final : dlock::file_backend::descriptor {};

// The client. The descriptor pool's methods are in pool.cpp.
struct dlock_backend {
    std::string directory;
    int directory_fd = -1;  // O_PATH: lock files are looked up relative to it
    int wake_signal = 0;
    size_t idle_limit = 0;
    // Written into lock files for people reading them; read once (getpid is a system call, and a
    // forked child must not use its parent's client: it shares the parent's lock descriptions).
    pid_t pid = getpid();
    dlock_plugin_host host{};

    // Unlocked descriptions: the one given back last, in `recent` (checked first and taken without
    // the mutex: a client that locks one name over and over finds it without hashing the name or
    // locking), then the rest by pool key (the name; for a semaphore's file a NUL, which no name
    // contains, then the name) under the mutex. idle_count counts those in `idle`: at most
    // idle_limit - 1, so with `recent` at most idle_limit descriptions are kept.
    std::atomic<dlock_hold*> recent{nullptr};
    dlock::plugin_kit::mutex mutex;
    std::unordered_map<std::string, std::vector<dlock_hold*>> idle DLOCK_GUARDED_BY(mutex);
    size_t idle_count DLOCK_GUARDED_BY(mutex) = 0;
    std::set<pid_t> waiting_threads DLOCK_GUARDED_BY(mutex);  // threads in a sleeper: interrupt() signals them
    std::atomic<bool> interrupted{false};
    // inotify instances of past semaphore waits, kept for the next ones: closing one waits for an
    // RCU grace period (milliseconds), which a waiter that just got its permit should not pay.
    std::vector<int> idle_doorbells DLOCK_GUARDED_BY(mutex);

    ~dlock_backend();

    std::string path_of(std::string_view name) const { return directory + "/" + dlock::file_backend::lock_file_name(name); }
    std::string path_of(const dlock::file_backend::descriptor* d) const { return directory + "/" + d->file_name; }

    static std::string pool_key(std::string_view name, bool semaphore) {
        return semaphore ? std::string(1, '\0').append(name) : std::string(name);
    }

    // A description of the file of `name` (a semaphore's when `semaphore`), unlocked: from the idle
    // pool or newly opened. `owner` (unique to the acquisition) names the temporary file when one
    // is created.
    dlock_hold* take(std::string_view name, bool semaphore, const char* owner);

    // Opens the file of `name`, creating it complete (header included) if it is missing.
    dlock_hold* open_lock_file(const std::string& name, bool semaphore, const char* owner);

    [[noreturn]] static void fail_open(const std::string& path, int e);

    // Writes a new file for `d` under a temporary name and links it into place. Returns its
    // descriptor, or -1 if a file appeared at the path meanwhile.
    int create_lock_file(const dlock::file_backend::descriptor* d, const char* owner);

    // True if the path still names the file `d` has open (the file was not deleted or replaced).
    // The open file's inode number cannot have been reused: the open description keeps it alive.
    bool still_at_path(const dlock::file_backend::descriptor* d) const;

    // Returns an unlocked description to the pool (or closes it when the pool is full).
    void give_back(dlock_hold* d);

    // Puts an unlocked description into `idle` (or closes it when that is full).
    void park_locked(dlock_hold* d) DLOCK_REQUIRES(mutex);
};

namespace dlock::file_backend {

// Replaces `d` (a description of a file deleted or replaced since it was opened, holding nothing)
// by one of the file the path names now (pool.cpp).
dlock_hold* reopen(dlock_backend* backend, dlock_hold* d, const char* owner);

// ---- lock primitives and records (format.cpp) --------------------------------------------------

// Drops `d`'s lock on byte 0 (an exclusive hold's lock byte).
void unlock_file(const descriptor* d);

// Drops `d`'s locks on [start, start + len) (len 0: from start on, past the end of the file).
// Cannot fail for a description that is open.
void unlock_range(const descriptor* d, off_t start, off_t len);

// Tries a lock of `type` on byte `start`: true if taken, false if another description holds a
// conflicting one.
bool try_lock(const dlock_backend* backend, const descriptor* d, short type, off_t start);

// The type of a lock another description holds on [start, start + len) (F_UNLCK if none): the
// first conflicting lock F_OFD_GETLK finds.
short probe(int fd, short type, off_t start, off_t len, const std::string& path);

// Writes all `size` bytes at `offset`, or throws DLOCK_UNAVAILABLE naming `what`.
void write_exactly(const dlock_backend* backend, const descriptor* d, const void* bytes, size_t size, off_t offset,
                   const char* what);

// Under the lock: reads the fencing counter, checking the header; initialises the header of a
// blank file (an all-zero page, as earlier versions created). Throws for a file that is not a
// dlock lock file or was cut short from outside: its counter is lost, and restarting it would
// hand out tokens a fenced resource has already seen.
uint64_t read_fence(const dlock_backend* backend, const descriptor* d);

// Under `counter_byte`, with the slot's claim byte held: records who holds slot `slot`, then
// publishes it (holders() reports only published slots, so never a half-written record).
void publish_slot(const dlock_backend* backend, const descriptor* d, size_t slot, const char* owner, uint64_t fence,
                  uint32_t kind);

// The semaphore header's fields an acquirer reads under the counter byte.
semaphore_file_header read_semaphore_header(const dlock_backend* backend, const descriptor* d);

// The dlock name stored in the header of a lock or semaphore file (file names of long names are
// hashed, so the header is where names are read back); nullopt for a file that is not one.
std::optional<std::string> stored_name(int fd, bool semaphore);

// ---- wake-ups (wakeups.cpp) --------------------------------------------------------------------

// Installs the no-op handler for `signo` (no SA_RESTART, so blocking fcntl returns EINTR), unless
// the application already handles that signal.
void install_wake_handler(int signo);

class deadline_timer;

// A thread's leave to sleep in the kernel — a blocking fcntl, a poll — until its deadline or
// interrupt(). The wake-up signal must reach this thread even if the application blocks it here;
// the mask is restored after the timer is gone and interrupt() no longer aims at this thread, and
// an unblocked signal is delivered at once, so none is left pending for the application.
class sleeper {
public:
    // Throws DLOCK_CANCELLED when the client is closing.
    sleeper(dlock_backend& backend, int64_t deadline_ns);
    ~sleeper();
    sleeper(const sleeper&) = delete;
    sleeper& operator=(const sleeper&) = delete;

    // Takes a lock of `type` on the byte `start` of `d`'s file, sleeping while other descriptions
    // hold conflicting locks. Throws DLOCK_TIMEOUT ("<busy>; not acquired before the deadline"),
    // DLOCK_CANCELLED or DLOCK_BACKEND.
    void lock(const descriptor* d, short type, off_t start, const std::string& busy);

    // Sleeps until `fd` is readable (true) or `max_ms` pass (false). Throws as lock().
    bool readable(int fd, int max_ms, const std::string& busy);

    // Throws DLOCK_CANCELLED after interrupt(), DLOCK_TIMEOUT once the deadline has passed.
    void check(const std::string& busy) const;

private:
    void leave() noexcept;

    dlock_backend& backend_;
    int64_t deadline_ns_;
    pid_t tid_ = current_tid();
    sigset_t previous_mask_{};
    std::unique_ptr<deadline_timer> timer_;
};

// The head waiter's doorbell: an inotify watch on the semaphore file, for the bell a release writes
// (IN_MODIFY) and the close of a dead holder's description (IN_CLOSE_WRITE).
class doorbell {
public:
    doorbell(dlock_backend& backend, const descriptor* d);
    ~doorbell();
    doorbell(const doorbell&) = delete;
    doorbell& operator=(const doorbell&) = delete;

    // Sleeps until the bell rings, the safety interval passes, or the deadline (throws).
    void wait(sleeper& asleep, const std::string& busy);

    // A re-check this often whatever the bell says: bounds a wake-up the bell missed.
    static constexpr int safety_ms = 100;
    static constexpr int recheck_after_ring_ms = 2;
    static constexpr int fallback_poll_ms = 10;

private:
    void drain() const;
    void give_back() const;

    dlock_backend& backend_;
    int fd_ = -1;
    int watch_ = -1;
    bool rung_ = false;  // the last wait ended with the bell
};

// ---- acquisition (acquire.cpp) -----------------------------------------------------------------

// Each takes `d` (from the pool, unlocked) into the hold of its kind and sets `fence`; `d` may be
// replaced on the way (a stale description is reopened) and is set to nullptr when it is gone.
void acquire_exclusive(dlock_backend* backend, const dlock_acquire_request* request, dlock_hold*& d, uint64_t& fence);
void acquire_shared(dlock_backend* backend, const dlock_acquire_request* request, dlock_hold*& d, uint64_t& fence);
void acquire_permit(dlock_backend* backend, const dlock_acquire_request* request, dlock_hold*& d, uint64_t& fence);

// ---- inspect, holders, list (admin.cpp) --------------------------------------------------------

int file_inspect(dlock_backend* backend, const char* name, dlock_lock_info* info, dlock_plugin_error* error);
int file_holders(dlock_backend* backend, const char* name, int semaphore, dlock_holder_visitor visit, void* user_data,
                 dlock_plugin_error* error);
int file_list(dlock_backend* backend, const char* prefix, dlock_holder_visitor visit, void* user_data,
              dlock_plugin_error* error);

// Every entry point runs behind the kit's exception firewall.
template <typename F>
int guarded(dlock_plugin_error* error, F&& body) noexcept {
    return dlock::plugin_kit::guarded(error, "file", std::forward<F>(body));
}

}  // namespace dlock::file_backend
