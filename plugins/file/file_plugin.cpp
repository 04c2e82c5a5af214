// The `file` backend: one lock file per name in a directory, locked with open-file-description
// (OFD) fcntl locks.
//
// Why OFD locks: classic POSIX record locks belong to the process and vanish when ANY descriptor
// of the file is closed (a library reading the file would drop the lock); flock locks are
// inherited across fork. An OFD lock belongs to one open file description: it is released when
// that description's last descriptor closes — in particular when the holding process dies — and
// two descriptions of one process conflict like two processes do.
//
// Layout: each lock file starts with a header keeping the fencing counter (bumped under the lock,
// so it is strictly increasing per name) and the current holder's owner token. It is read and
// written with pread/pwrite, never through a mapping: a write to a mapped page the file system
// cannot back (a full tmpfs, a file truncated from outside) kills the process with SIGBUS, where
// pwrite returns an error. A new file is created complete — written under a temporary name, then
// hard-linked into place — so a file at the path always has a header, and one without is refused
// (its counter is lost) rather than silently restarted at 1.
//
// The file is never unlinked by dlock: unlinking would let a newcomer lock a fresh inode while an
// old holder still holds the unlinked one, and would reset the counter. Others may delete or
// replace it (tmpfiles, a clean-up script): after locking, the locked description is compared with
// what the path names now (device and inode), and a stale one is closed and the new file
// locked instead. (A file deleted while it is held still lets a newcomer in: no check can see
// that. The directory must not be cleaned while processes use it.)
//
// Waiting: F_OFD_SETLKW sleeps in the kernel and wakes when the lock is released: no polling.
// A deadline or a client close interrupts the sleep with a signal (`wake_signal`, handler
// installed without SA_RESTART): a per-wait POSIX timer aimed at the waiting thread fires at the
// deadline (and every millisecond after, in case the first signal landed just before the sleep),
// and interrupt() signals every waiting thread until each has left. The signal is unblocked in the
// waiting thread for the time of the wait, so an application that blocks every signal in its
// threads (a sigwait design) still has its deadlines and close() honoured.
//
// Shared holds and semaphores (docs/backends/file.md, "Semaphores and shared locks"). The byte
// ranges below are locked, never read: an OFD lock may cover bytes past the end of the file.
//   - Lock file. An exclusive hold write-locks `lock_byte`, a shared hold read-locks it, so the
//     exclusive acquisition's one fcntl also fails against shared holders. Writer preference: an
//     exclusive acquirer that has to wait write-locks `turnstile_byte` first and keeps it until it
//     holds `lock_byte`; a shared acquirer that finds the turnstile taken waits for it (read lock)
//     before it locks `lock_byte`. The uncontended exclusive cycle never touches the turnstile.
//   - Semaphore file (`<name>.sem`, another file than the lock's). A permit is a write lock on a
//     slot's claim byte, slots 0..N-1; N is kept in the header. Waiters queue on `gate_byte`; the
//     one holding it (the head) watches the file with inotify: a release writes the header's bell
//     when the gate is held (IN_MODIFY), and a dead holder's description closing is IN_CLOSE_WRITE.
//   - Slots: a shared holder or a permit holder write-locks slot i's claim byte, writes its owner
//     token and fencing token at record i, then write-locks slot i's publish byte; holders() and
//     list() report the records whose publish byte is locked. The fencing counter is bumped under
//     `counter_byte` by shared and permit acquirers (an exclusive holder is alone anyway).
#include "file_plugin.hpp"
#include <dlock/plugin_kit/plugin_struct.hpp>

#include <dlock/plugin_kit.hpp>

#include <boost/uuid/name_generator_sha1.hpp>
#include <boost/uuid/uuid_io.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <iterator>
#include <limits>
#include <mutex>
#include <dirent.h>
#include <new>
#include <optional>
#include <poll.h>
#include <pthread.h>
#include <sys/inotify.h>
#include <set>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dlock::file_backend {

namespace {

using plugin_kit::fail;
using plugin_kit::find_option;
using plugin_kit::forever_ns;
using plugin_kit::now_ns;

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

pid_t current_tid() { return pid_t(syscall(SYS_gettid)); }

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

// ---- the wake-up signal ------------------------------------------------------------------------

void wake_handler(int) {}

std::mutex signal_mutex;

// Installs the no-op handler for `signo` (no SA_RESTART, so blocking fcntl returns EINTR), unless
// the application already handles that signal.
void install_wake_handler(int signo) {
    std::lock_guard<std::mutex> lock(signal_mutex);
    struct sigaction old {};
    if (sigaction(signo, nullptr, &old) != 0)
        fail(DLOCK_CONFIG, fmt::format("file backend: `wake_signal` {} is not a valid signal", signo));
    const bool ours = !(old.sa_flags & SA_SIGINFO) && old.sa_handler == wake_handler;
    if (ours) return;
    if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
        fail(DLOCK_CONFIG, fmt::format("file backend: signal {} (`wake_signal`) already has a handler in this process; "
                                       "choose a free real-time signal with the `wake_signal` option",
                                       signo));
    struct sigaction action {};
    action.sa_handler = wake_handler;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;
    if (sigaction(signo, &action, nullptr) != 0)
        fail(DLOCK_CONFIG, fmt::format("file backend: cannot install a handler for signal {}: {}", signo, std::strerror(errno)));
}

// A POSIX timer that sends `signo` to one thread at an absolute CLOCK_MONOTONIC time, then every
// millisecond until destroyed.
class deadline_timer {
public:
    deadline_timer(int signo, pid_t tid, int64_t deadline_ns) {
        sigevent event{};
        event.sigev_notify = SIGEV_THREAD_ID;
        event.sigev_signo = signo;
        event._sigev_un._tid = tid;
        if (timer_create(CLOCK_MONOTONIC, &event, &timer_) != 0)
            fail(DLOCK_INTERNAL, fmt::format("file backend: timer_create failed: {}", std::strerror(errno)));
        itimerspec spec{};
        spec.it_value.tv_sec = deadline_ns / 1'000'000'000;
        spec.it_value.tv_nsec = deadline_ns % 1'000'000'000;
        spec.it_interval.tv_nsec = 1'000'000;
        if (timer_settime(timer_, TIMER_ABSTIME, &spec, nullptr) != 0) {
            const int e = errno;
            timer_delete(timer_);
            fail(DLOCK_INTERNAL, fmt::format("file backend: timer_settime failed: {}", std::strerror(e)));
        }
    }
    ~deadline_timer() { timer_delete(timer_); }
    deadline_timer(const deadline_timer&) = delete;
    deadline_timer& operator=(const deadline_timer&) = delete;

private:
    timer_t timer_{};
};

std::string runtime_directory() {
    if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg) return std::string(xdg) + "/dlock";
    return fmt::format("/tmp/dlock-{}", static_cast<unsigned long>(getuid()));
}

// mkdir -p. The default runtime directory is private (0700) and must be ours; a configured one
// is created with the umask's permissions so several users may share it.
void ensure_directory(const std::string& dir, bool is_private) {
    if (dir.empty()) fail(DLOCK_CONFIG, "file backend: option `directory` is empty");
    for (size_t pos = 1; pos <= dir.size(); ++pos) {
        if (pos != dir.size() && dir[pos] != '/') continue;
        const std::string prefix = dir.substr(0, pos);
        if (mkdir(prefix.c_str(), (pos == dir.size() && is_private) ? 0700 : 0777) != 0 && errno != EEXIST)
            fail(DLOCK_CONFIG, fmt::format("file backend: cannot create directory `{}`: {}", prefix, std::strerror(errno)));
    }
    struct stat st {};
    if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        fail(DLOCK_CONFIG, fmt::format("file backend: `{}` is not a directory", dir));
    if (is_private && st.st_uid != getuid())
        fail(DLOCK_CONFIG, fmt::format("file backend: `{}` belongs to uid {}, not to this user; set `directory`",
                                       dir, static_cast<unsigned long>(st.st_uid)));
    if (access(dir.c_str(), W_OK | X_OK) != 0)
        fail(DLOCK_CONFIG, fmt::format("file backend: directory `{}` is not writable: {}", dir, std::strerror(errno)));
}

}  // namespace

namespace {

std::string escaped_file_name(std::string_view name, std::string_view suffix) {
    static const char hex[] = "0123456789ABCDEF";
    std::string escaped;
    std::vector<size_t> boundaries;  // where each input byte's output starts
    for (size_t i = 0; i < name.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(name[i]);
        boundaries.push_back(escaped.size());
        const bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
                          c == '-' || (c == '.' && i != 0);
        if (keep) {
            escaped += char(c);
        } else {
            escaped += '%';
            escaped += hex[c >> 4];
            escaped += hex[c & 15];
        }
    }
    if (escaped.size() <= 200) return escaped.append(suffix);
    size_t cut = 0;
    for (size_t b : boundaries) {
        if (b > 100) break;
        cut = b;
    }
    static const boost::uuids::uuid space = boost::uuids::uuid{{0x6d, 0x1c, 0x0a, 0x4e, 0x2b, 0x7f, 0x4a, 0x1d, 0x9c, 0x3e,
                                                                 0x51, 0x8a, 0x0f, 0x77, 0x42, 0x10}};
    const boost::uuids::uuid digest = boost::uuids::name_generator_sha1(space)(name.data(), name.size());
    std::string digest_hex;
    for (auto byte : digest) digest_hex += fmt::format("{:02x}", byte);
    return escaped.substr(0, cut).append("~").append(digest_hex).append(suffix);
}

}  // namespace

std::string lock_file_name(std::string_view name) { return escaped_file_name(name, ".lock"); }

std::string semaphore_file_name(std::string_view name) { return escaped_file_name(name, ".sem"); }

}  // namespace dlock::file_backend

using namespace dlock::file_backend;

// The plugin's hold is the locked description itself, taken from and given back to the idle pool:
// an acquisition of a name this client has locked before allocates nothing.
struct dlock_hold final : descriptor {};

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
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<dlock_hold*>> idle;
    size_t idle_count = 0;
    std::set<pid_t> waiting_threads;
    std::atomic<bool> interrupted{false};
    // inotify instances of past semaphore waits, kept for the next ones: closing one waits for an
    // RCU grace period (milliseconds), which a waiter that just got its permit should not pay.
    std::vector<int> idle_doorbells;

    ~dlock_backend() {
        for (auto& entry : idle)
            for (dlock_hold* d : entry.second) delete d;
        delete recent.load();
        for (int fd : idle_doorbells) close(fd);
        if (directory_fd >= 0) close(directory_fd);
    }

    std::string path_of(std::string_view name) const { return directory + "/" + lock_file_name(name); }
    std::string path_of(const descriptor* d) const { return directory + "/" + d->file_name; }

    static std::string pool_key(std::string_view name, bool semaphore) {
        return semaphore ? std::string(1, '\0').append(name) : std::string(name);
    }

    // A description of the file of `name` (a semaphore's when `semaphore`), unlocked: from the idle
    // pool or newly opened. `owner` (unique to the acquisition) names the temporary file when one
    // is created.
    dlock_hold* take(std::string_view name, bool semaphore, const char* owner) {
        dlock_hold* d = recent.exchange(nullptr);
        if (d && d->semaphore == semaphore && d->name == name) {
            d->released = false;
            return d;
        }
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (d) park_locked(d);  // another name's: into the pool with the rest
            d = nullptr;
            // Entries stay when emptied: the next acquisition of the name reuses them without
            // allocating. At most one entry per name this client has locked.
            auto it = idle.find(pool_key(name, semaphore));
            if (it != idle.end() && !it->second.empty()) {
                d = it->second.back();
                it->second.pop_back();
                --idle_count;
            }
        }
        if (d) {
            d->released = false;
            return d;
        }
        return open_lock_file(std::string(name), semaphore, owner);
    }

    // Opens the file of `name`, creating it complete (header included) if it is missing.
    dlock_hold* open_lock_file(const std::string& name, bool semaphore, const char* owner) {
        auto d = std::make_unique<dlock_hold>();
        d->name = name;
        d->semaphore = semaphore;
        d->file_name = semaphore ? semaphore_file_name(name) : lock_file_name(name);
        const std::string path = path_of(d.get());
        for (;;) {
            d->fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
            if (d->fd >= 0) break;
            if (errno != ENOENT) fail_open(path, errno);
            d->fd = create_lock_file(d.get(), owner);
            if (d->fd >= 0) break;  // else another process created it first: open theirs
        }
        struct stat st {};
        if (fstat(d->fd, &st) != 0)
            fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot stat `{}`: {}", path, std::strerror(errno)));
        if (!S_ISREG(st.st_mode)) fail(DLOCK_BACKEND, fmt::format("file backend: `{}` is not a regular file", path));
        d->device = st.st_dev;
        d->inode = st.st_ino;
        return d.release();
    }

    [[noreturn]] static void fail_open(const std::string& path, int e) {
        fail(e == EACCES || e == EROFS || e == ELOOP ? DLOCK_BACKEND : DLOCK_UNAVAILABLE,
             fmt::format("file backend: cannot open lock file `{}`: {}", path, std::strerror(e)));
    }

    // Writes a new file for `d` under a temporary name and links it into place. Returns its
    // descriptor, or -1 if a file appeared at the path meanwhile.
    int create_lock_file(const descriptor* d, const char* owner) {
        const std::string path = path_of(d);
        const std::string temporary = fmt::format("{}/.dlock-new-{}", directory, owner);
        const int fd = open(temporary.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
        if (fd < 0) fail_open(temporary, errno);
        struct discard_temporary {
            const std::string& path;
            int fd;
            ~discard_temporary() {
                unlink(path.c_str());
                if (fd >= 0) close(fd);
            }
        } cleanup{temporary, fd};
        lock_file_header header{};
        semaphore_file_header semaphore_header{};
        const void* bytes = &header;
        size_t size = sizeof header;
        if (d->semaphore) {
            std::memcpy(semaphore_header.magic, semaphore_magic, sizeof semaphore_magic);
            semaphore_header.name_bytes = uint32_t(std::min(d->name.size(), sizeof semaphore_header.name - 1));
            std::memcpy(semaphore_header.name, d->name.data(), semaphore_header.name_bytes);
            bytes = &semaphore_header;
            size = sizeof semaphore_header;
        } else {
            std::memcpy(header.magic, magic, sizeof magic);
            header.name_bytes = uint32_t(std::min(d->name.size(), sizeof header.name - 1));
            std::memcpy(header.name, d->name.data(), header.name_bytes);
        }
        errno = 0;  // a short write sets none: then it is taken for ENOSPC
        if (pwrite(fd, bytes, size, 0) != ssize_t(size))
            fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot write a new lock file in `{}`: {}", directory,
                                                std::strerror(errno ? errno : ENOSPC)));
        if (link(temporary.c_str(), path.c_str()) != 0) {
            if (errno == EEXIST) return -1;
            fail(errno == EPERM || errno == ENOTSUP ? DLOCK_BACKEND : DLOCK_UNAVAILABLE,
                 fmt::format("file backend: cannot link the new lock file `{}` into place (the directory's file system "
                             "must support hard links): {}",
                             path, std::strerror(errno)));
        }
        cleanup.fd = -1;
        return fd;
    }

    // True if the path still names the file `d` has open (the file was not deleted or replaced).
    // The open file's inode number cannot have been reused: the open description keeps it alive.
    bool still_at_path(const descriptor* d) const {
        struct stat at_path;  // read only when fstatat filled it
        if (fstatat(directory_fd, d->file_name.c_str(), &at_path, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT) return false;
            fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot stat `{}`: {}", path_of(d), std::strerror(errno)));
        }
        return at_path.st_dev == d->device && at_path.st_ino == d->inode;
    }

    // Returns an unlocked description to the pool (or closes it when the pool is full).
    void give_back(dlock_hold* d) {
        if (idle_limit == 0) {
            delete d;
            return;
        }
        dlock_hold* previous = recent.exchange(d);
        if (!previous) return;
        std::lock_guard<std::mutex> lock(mutex);
        park_locked(previous);
    }

    // Puts an unlocked description into `idle` (or closes it when that is full). Needs the mutex.
    void park_locked(dlock_hold* d) {
        if (idle.size() > 4 * idle_limit + 64) {  // many names seen: drop the empty entries
            for (auto it = idle.begin(); it != idle.end();) it = it->second.empty() ? idle.erase(it) : std::next(it);
        }
        if (idle_count + 1 < idle_limit) {
            idle[pool_key(d->name, d->semaphore)].push_back(d);
            ++idle_count;
        } else {
            delete d;
        }
    }
};

namespace {

// A thread's leave to sleep in the kernel — a blocking fcntl, a poll — until its deadline or
// interrupt(). The wake-up signal must reach this thread even if the application blocks it here;
// the mask is restored after the timer is gone and interrupt() no longer aims at this thread, and
// an unblocked signal is delivered at once, so none is left pending for the application.
class sleeper {
public:
    // Throws DLOCK_CANCELLED when the client is closing.
    sleeper(dlock_backend& backend, int64_t deadline_ns) : backend_(backend), deadline_ns_(deadline_ns) {
        sigset_t wake_only;
        sigemptyset(&wake_only);
        sigaddset(&wake_only, backend.wake_signal);
        pthread_sigmask(SIG_UNBLOCK, &wake_only, &previous_mask_);
        {
            std::lock_guard<std::mutex> lock(backend.mutex);
            if (backend.interrupted) {
                pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
                fail(DLOCK_CANCELLED, "file backend: client is closing");
            }
            backend.waiting_threads.insert(tid_);
        }
        try {
            if (deadline_ns != forever_ns) timer_ = std::make_unique<deadline_timer>(backend.wake_signal, tid_, deadline_ns);
        } catch (...) {
            leave();
            throw;
        }
    }
    ~sleeper() { leave(); }
    sleeper(const sleeper&) = delete;
    sleeper& operator=(const sleeper&) = delete;

    // Takes a lock of `type` on the byte `start` of `d`'s file, sleeping while other descriptions
    // hold conflicting locks. Throws DLOCK_TIMEOUT ("<busy>; not acquired before the deadline"),
    // DLOCK_CANCELLED or DLOCK_BACKEND.
    void lock(const descriptor* d, short type, off_t start, const std::string& busy) {
        struct flock request {};
        request.l_type = type;
        request.l_whence = SEEK_SET;
        request.l_start = start;
        request.l_len = 1;
        for (;;) {
            if (fcntl(d->fd, F_OFD_SETLKW, &request) == 0) return;
            if (errno != EINTR)
                fail(DLOCK_BACKEND, fmt::format("file backend: waiting for `{}` failed: {}", backend_.path_of(d), std::strerror(errno)));
            check(busy);
        }
    }

    // Sleeps until `fd` is readable (true) or `max_ms` pass (false). Throws as lock().
    bool readable(int fd, int max_ms, const std::string& busy) {
        if (deadline_ns_ != forever_ns) {
            const int64_t left_ms = (deadline_ns_ - now_ns() + 999'999) / 1'000'000;
            max_ms = int(std::max<int64_t>(0, std::min<int64_t>(max_ms, left_ms)));
        }
        pollfd ready{fd, POLLIN, 0};
        const int n = poll(&ready, 1, max_ms);
        if (n < 0 && errno != EINTR)
            fail(DLOCK_BACKEND, fmt::format("file backend: waiting for a release failed: {}", std::strerror(errno)));
        check(busy);
        return n > 0;
    }

    // Throws DLOCK_CANCELLED after interrupt(), DLOCK_TIMEOUT once the deadline has passed.
    void check(const std::string& busy) const {
        if (backend_.interrupted) fail(DLOCK_CANCELLED, "file backend: client is closing");
        if (deadline_ns_ != forever_ns && now_ns() >= deadline_ns_)
            fail(DLOCK_TIMEOUT, fmt::format("{}; not acquired before the deadline", busy));
    }

private:
    void leave() noexcept {
        timer_.reset();
        {
            std::lock_guard<std::mutex> lock(backend_.mutex);
            backend_.waiting_threads.erase(tid_);
        }
        pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
    }

    dlock_backend& backend_;
    int64_t deadline_ns_;
    pid_t tid_ = current_tid();
    sigset_t previous_mask_{};
    std::unique_ptr<deadline_timer> timer_;
};

}  // namespace

namespace {

const dlock_option_desc file_options[] = {
    {"directory", DLOCK_OPTION_STRING, 0, DLOCK_DSN_PATH, nullptr,
     "Directory of the lock files (created if missing; shared by every process that locks the same names). "
     "Default: $XDG_RUNTIME_DIR/dlock, else /tmp/dlock-<uid> (private to the user)."},
    {"wake_signal", DLOCK_OPTION_INT, 0, DLOCK_DSN_NONE, "0",
     "Signal used to interrupt a waiting thread at its deadline or when the client closes; 0 = SIGRTMAX-2. "
     "It must have no other handler in the process."},
    {"idle_descriptors", DLOCK_OPTION_INT, 0, DLOCK_DSN_NONE, "256",
     "How many unlocked lock-file descriptors a client keeps open for reuse (saves an open and an fstat per acquire)."},
};

// Every entry point runs behind the kit's exception firewall.
template <typename F>
int guarded(dlock_plugin_error* error, F&& body) noexcept {
    return dlock::plugin_kit::guarded(error, "file", std::forward<F>(body));
}

int file_create(const dlock_option_value* options, size_t count, const dlock_plugin_host* host, dlock_backend** out,
                dlock_plugin_error* error) {
    return guarded(error, [&] {
        auto backend = std::make_unique<dlock_backend>();
        dlock::plugin_kit::copy_in(backend->host, host, DLOCK_PLUGIN_HOST_V1_SIZE);  // the part its struct_size covers
        const auto* dir = find_option(options, count, "directory");
        const bool is_default = !dir || !dir->string_value || !*dir->string_value;
        backend->directory = is_default ? runtime_directory() : std::string(dir->string_value);
        while (backend->directory.size() > 1 && backend->directory.back() == '/') backend->directory.pop_back();
        ensure_directory(backend->directory, is_default);
        backend->directory_fd = open(backend->directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (backend->directory_fd < 0)
            fail(DLOCK_CONFIG, fmt::format("file backend: cannot open directory `{}`: {}", backend->directory, std::strerror(errno)));
        const auto* sig = find_option(options, count, "wake_signal");
        backend->wake_signal = (sig && sig->int_value) ? int(sig->int_value) : SIGRTMAX - 2;
        if (backend->wake_signal <= 0 || backend->wake_signal > SIGRTMAX)
            fail(DLOCK_CONFIG, fmt::format("file backend: `wake_signal` {} is not a signal number", backend->wake_signal));
        install_wake_handler(backend->wake_signal);
        const auto* idle = find_option(options, count, "idle_descriptors");
        const int64_t limit = idle ? idle->int_value : 256;
        if (limit < 0 || limit > 65536)
            fail(DLOCK_CONFIG, fmt::format("file backend: `idle_descriptors` {} is outside 0..65536", limit));
        backend->idle_limit = size_t(limit);
        *out = backend.release();
        return DLOCK_OK;
    });
}

void file_destroy(dlock_backend* backend) { delete backend; }

uint64_t file_capabilities(dlock_backend*) {
    return DLOCK_CAP_FENCING | DLOCK_CAP_PUSH_WAIT | DLOCK_CAP_SESSION_BOUND | DLOCK_CAP_SEMAPHORE | DLOCK_CAP_SHARED |
           DLOCK_CAP_LIST;
}

void file_interrupt(dlock_backend* backend) {
    backend->interrupted = true;
    // Signal every waiting thread until each has left its wait. A signal that lands just before a
    // thread enters fcntl is lost, hence the repetition; each round is one millisecond apart.
    for (int round = 0; round < 10'000; ++round) {
        {
            std::lock_guard<std::mutex> lock(backend->mutex);
            if (backend->waiting_threads.empty()) return;
            for (pid_t tid : backend->waiting_threads) syscall(SYS_tgkill, getpid(), tid, backend->wake_signal);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

void unlock_file(const descriptor* d) {
    struct flock unlock {};
    unlock.l_type = F_UNLCK;
    unlock.l_whence = SEEK_SET;
    unlock.l_len = 1;
    fcntl(d->fd, F_OFD_SETLK, &unlock);
}

// Drops `d`'s locks on [start, start + len) (len 0: from start on, past the end of the file).
// Cannot fail for a description that is open.
void unlock_range(const descriptor* d, off_t start, off_t len) {
    struct flock unlock {};
    unlock.l_type = F_UNLCK;
    unlock.l_whence = SEEK_SET;
    unlock.l_start = start;
    unlock.l_len = len;
    fcntl(d->fd, F_OFD_SETLK, &unlock);
}

// Every lock `d` holds, whatever happens in between.
struct unlock_all_unless_kept {
    const descriptor* d;
    ~unlock_all_unless_kept() {
        if (d) unlock_range(d, 0, 0);
    }
};

// Tries a lock of `type` on byte `start`: true if taken, false if another description holds a
// conflicting one.
bool try_lock(const dlock_backend* backend, const descriptor* d, short type, off_t start) {
    struct flock request {};
    request.l_type = type;
    request.l_whence = SEEK_SET;
    request.l_start = start;
    request.l_len = 1;
    if (fcntl(d->fd, F_OFD_SETLK, &request) == 0) return true;
    if (errno != EAGAIN && errno != EACCES)
        fail(DLOCK_BACKEND, fmt::format("file backend: locking `{}` failed: {}", backend->path_of(d), std::strerror(errno)));
    return false;
}

// The type of a lock another description holds on [start, start + len) (F_UNLCK if none): the
// first conflicting lock F_OFD_GETLK finds.
short probe(int fd, short type, off_t start, off_t len, const std::string& path) {
    struct flock request {};
    request.l_type = type;
    request.l_whence = SEEK_SET;
    request.l_start = start;
    request.l_len = len;
    if (fcntl(fd, F_OFD_GETLK, &request) != 0)
        fail(DLOCK_BACKEND, fmt::format("file backend: probing `{}` failed: {}", path, std::strerror(errno)));
    return request.l_type;
}

void write_exactly(const dlock_backend* backend, const descriptor* d, const void* bytes, size_t size, off_t offset,
                   const char* what) {
    errno = 0;  // a short write sets none: then it is taken for ENOSPC
    if (pwrite(d->fd, bytes, size, offset) != ssize_t(size))
        fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot write the {} of `{}`: {}", what, backend->path_of(d),
                                            std::strerror(errno ? errno : ENOSPC)));
}

// Under the lock: reads the fencing counter, checking the header; initialises the header of a
// blank file (an all-zero page, as earlier versions created). Throws for a file that is not a
// dlock lock file or was cut short from outside: its counter is lost, and restarting it would
// hand out tokens a fenced resource has already seen.
uint64_t read_fence(const dlock_backend* backend, const descriptor* d) {
    struct {
        char magic[8];
        uint64_t fence;
    } start{};
    static_assert(sizeof start == holder_fields_offset + sizeof(uint64_t), "magic then fence");
    const ssize_t got = pread(d->fd, &start, sizeof start, 0);
    if (got < 0)
        fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot read `{}`: {}", backend->path_of(d), std::strerror(errno)));
    if (got == ssize_t(sizeof start) && std::memcmp(start.magic, magic, sizeof magic) == 0) return start.fence;

    lock_file_header header{};
    const ssize_t whole = pread(d->fd, &header, sizeof header, 0);
    const bool blank = whole == ssize_t(sizeof header) &&
                       std::all_of(reinterpret_cast<const char*>(&header), reinterpret_cast<const char*>(&header + 1),
                                   [](char c) { return c == 0; });
    if (!blank)
        fail(DLOCK_BACKEND, fmt::format("file backend: `{}` is not a dlock lock file, or was cut short from outside ({} bytes): "
                                        "its fencing counter is lost. Remove it only when no process uses it; the next "
                                        "acquisition then starts a new file and a new counter",
                                        backend->path_of(d), whole < 0 ? 0 : whole));
    std::memcpy(header.magic, magic, sizeof magic);
    header.name_bytes = uint32_t(std::min(d->name.size(), sizeof header.name - 1));
    std::memcpy(header.name, d->name.data(), header.name_bytes);
    write_exactly(backend, d, &header, sizeof header, 0, "header");
    return 0;
}

// Under `counter_byte`, with the slot's claim byte held: records who holds slot `slot`, then
// publishes it (holders() reports only published slots, so never a half-written record).
void publish_slot(const dlock_backend* backend, const descriptor* d, size_t slot, const char* owner, uint64_t fence,
                  uint32_t kind) {
    slot_record record{};
    std::strncpy(record.owner, owner, sizeof record.owner - 1);
    record.fence = fence;
    record.pid = backend->pid;
    record.kind = kind;
    write_exactly(backend, d, &record, sizeof record, record_offset(slot), "holder record");
    if (!try_lock(backend, d, F_WRLCK, publish_byte(slot)))
        fail(DLOCK_BACKEND, fmt::format("file backend: slot {} of `{}` is published by another holder: the file is used by "
                                        "something else than dlock",
                                        slot, backend->path_of(d)));
}

// Replaces `d` (a description of a file deleted or replaced since it was opened, holding nothing)
// by one of the file the path names now.
dlock_hold* reopen(dlock_backend* backend, dlock_hold* d, const char* owner) {
    const std::string name = d->name;
    const bool semaphore = d->semaphore;
    delete d;  // closing the description drops its locks
    return backend->open_lock_file(name, semaphore, owner);
}

// Gives an acquisition's description back to the pool on the way out, unless kept (d = nullptr):
// then the hold owns it.
struct give_back_unless_kept {
    dlock_backend* backend;
    dlock_hold* d;
    ~give_back_unless_kept() {
        if (d) backend->give_back(d);
    }
};

// A try-once acquire still waits this long for another acquirer's few system calls under
// `counter_byte` (longer only if that process is stopped in them).
constexpr int64_t counter_grace_ns = 1'000'000'000;

int64_t counter_deadline(int64_t deadline_ns) { return deadline_ns == 0 ? now_ns() + counter_grace_ns : deadline_ns; }

// Takes `counter_byte` (held for a few system calls by whoever has it).
void lock_counter(dlock_backend* backend, const descriptor* d, int64_t deadline_ns, std::optional<sleeper>& asleep,
                  const std::string& busy) {
    if (try_lock(backend, d, F_WRLCK, counter_byte)) return;
    if (asleep) {
        asleep->lock(d, F_WRLCK, counter_byte, busy);
    } else {
        sleeper brief(*backend, counter_deadline(deadline_ns));
        brief.lock(d, F_WRLCK, counter_byte, busy);
    }
}

void acquire_exclusive(dlock_backend* backend, const dlock_acquire_request* request, give_back_unless_kept& guard,
                       uint64_t& fence) {
    const char* name = request->name;  // not guard.d's: a stale description is replaced below
    for (;;) {
        if (!try_lock(backend, guard.d, F_WRLCK, lock_byte)) {
            if (request->deadline_ns == 0) fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held by another holder", name));
            // Writer preference: the turnstile, held while this waits, stops new shared acquirers.
            const std::string busy = fmt::format("lock `{}` is held by another holder", name);
            sleeper asleep(*backend, request->deadline_ns);
            asleep.lock(guard.d, F_WRLCK, turnstile_byte, busy);
            try {
                asleep.lock(guard.d, F_WRLCK, lock_byte, busy);
            } catch (...) {
                unlock_range(guard.d, turnstile_byte, 1);
                throw;
            }
            unlock_range(guard.d, turnstile_byte, 1);
        }
        // Locked — but perhaps a file that was deleted or replaced since it was opened (this
        // description may come from the idle pool, or the wait may have outlasted the file):
        // then lock the file the path names now.
        bool current;
        try {
            current = backend->still_at_path(guard.d);
        } catch (...) {
            unlock_file(guard.d);
            throw;
        }
        if (current) break;
        dlock_hold* stale = std::exchange(guard.d, nullptr);
        guard.d = reopen(backend, stale, request->owner);
    }
    dlock_hold* d = guard.d;

    // Ours now. Everything below happens under the lock; a failure unlocks first.
    try {
        fence = read_fence(backend, d) + 1;
        struct {
            uint64_t fence;
            char holder[40];
            int64_t holder_pid;
        } fields{};
        static_assert(sizeof fields == holder_fields_bytes, "the holder fields as laid out in the header");
        fields.fence = fence;
        // The rest of `holder` is zero already: copy the token and no padding.
        std::memcpy(fields.holder, request->owner, strnlen(request->owner, sizeof fields.holder - 1));
        fields.holder_pid = backend->pid;
        errno = 0;  // a short write sets none: then it is taken for ENOSPC
        if (pwrite(d->fd, &fields, sizeof fields, holder_fields_offset) != ssize_t(sizeof fields))
            fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot write the fencing counter of `{}`: {}",
                                                backend->path_of(d), std::strerror(errno ? errno : ENOSPC)));
    } catch (...) {
        unlock_file(d);
        throw;
    }
}

void acquire_shared(dlock_backend* backend, const dlock_acquire_request* request, give_back_unless_kept& guard,
                    uint64_t& fence) {
    const char* name = request->name;  // not guard.d's: a stale description is replaced below
    const std::string busy_exclusive = fmt::format("lock `{}` is held exclusively", name);
    const std::string busy_writer = fmt::format("lock `{}` has an exclusive acquirer waiting (writer preference)", name);
    std::optional<sleeper> asleep;
    auto fall_asleep = [&] {
        if (!asleep) asleep.emplace(*backend, request->deadline_ns);
    };
    for (;;) {
        unlock_all_unless_kept unlock{guard.d};
        // An exclusive acquirer waiting holds the turnstile: wait behind it (a read lock, so
        // readers queued together pass together), holding it until the lock byte is ours.
        if (probe(guard.d->fd, F_RDLCK, turnstile_byte, 1, backend->path_of(guard.d)) != F_UNLCK) {
            if (request->deadline_ns == 0) fail(DLOCK_TIMEOUT, busy_writer);
            fall_asleep();
            asleep->lock(guard.d, F_RDLCK, turnstile_byte, busy_writer);
        }
        if (!try_lock(backend, guard.d, F_RDLCK, lock_byte)) {
            if (request->deadline_ns == 0) fail(DLOCK_TIMEOUT, busy_exclusive);
            fall_asleep();
            asleep->lock(guard.d, F_RDLCK, lock_byte, busy_exclusive);
        }
        if (!backend->still_at_path(guard.d)) {
            unlock_range(guard.d, 0, 0);
            unlock.d = nullptr;
            dlock_hold* stale = std::exchange(guard.d, nullptr);
            guard.d = reopen(backend, stale, request->owner);
            continue;
        }
        // Held shared. Under the counter byte: the next fencing token and a free slot.
        lock_counter(backend, guard.d, request->deadline_ns, asleep, busy_exclusive);
        fence = read_fence(backend, guard.d) + 1;
        write_exactly(backend, guard.d, &fence, sizeof fence, holder_fields_offset, "fencing counter");
        size_t slot = 0;
        while (!try_lock(backend, guard.d, F_WRLCK, claim_byte(slot)))
            if (++slot == max_shared_slots)
                fail(DLOCK_UNAVAILABLE, fmt::format("lock `{}` has {} shared holders, the most the file backend records", name,
                                                    max_shared_slots));
        publish_slot(backend, guard.d, slot, request->owner, fence, DLOCK_HOLD_SHARED);
        unlock_range(guard.d, turnstile_byte, counter_byte + 1 - turnstile_byte);  // turnstile, counter
        unlock.d = nullptr;
        return;
    }
}

// The semaphore header's fields an acquirer reads under the counter byte.
semaphore_file_header read_semaphore_header(const dlock_backend* backend, const descriptor* d) {
    semaphore_file_header header{};
    const ssize_t got = pread(d->fd, &header, offsetof(semaphore_file_header, name_bytes), 0);
    if (got < 0)
        fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot read `{}`: {}", backend->path_of(d), std::strerror(errno)));
    if (got != ssize_t(offsetof(semaphore_file_header, name_bytes)) ||
        std::memcmp(header.magic, semaphore_magic, sizeof semaphore_magic) != 0)
        fail(DLOCK_BACKEND, fmt::format("file backend: `{}` is not a dlock semaphore file, or was cut short from outside: its "
                                        "fencing counter and limit are lost. Remove it only when no process uses it",
                                        backend->path_of(d)));
    return header;
}

// One attempt at a permit, under the counter byte: true with `fence` set if one was taken. Throws
// DLOCK_INVALID_ARGUMENT when the stored limit differs from `permits` while a permit is held.
bool try_permit(dlock_backend* backend, const dlock_acquire_request* request, descriptor* d, std::optional<sleeper>& asleep,
                const std::string& busy, uint64_t& fence) {
    lock_counter(backend, d, request->deadline_ns, asleep, busy);
    struct unlock_counter {
        const descriptor* d;
        ~unlock_counter() { unlock_range(d, counter_byte, 1); }
    } counter{d};
    semaphore_file_header header = read_semaphore_header(backend, d);
    if (header.limit != request->permits) {
        // The stored limit stands while a permit is held; with none held it is the next acquirer's.
        if (header.limit != 0 && probe(d->fd, F_WRLCK, slot_lock_base, 0, backend->path_of(d)) != F_UNLCK)
            fail(DLOCK_INVALID_ARGUMENT,
                 fmt::format("semaphore `{}` has a limit of {} permits, this acquire gives {}: every client of a semaphore "
                             "must give the same limit (a new one applies once no permit is held)",
                             d->name, header.limit, request->permits));
        header.limit = request->permits;
        write_exactly(backend, d, &header.limit, sizeof header.limit, offsetof(semaphore_file_header, limit), "limit");
    }
    for (size_t slot = 0; slot < request->permits; ++slot) {
        if (!try_lock(backend, d, F_WRLCK, claim_byte(slot))) continue;
        try {
            fence = header.fence + 1;
            write_exactly(backend, d, &fence, sizeof fence, offsetof(semaphore_file_header, fence), "fencing counter");
            publish_slot(backend, d, slot, request->owner, fence, DLOCK_HOLD_PERMIT);
        } catch (...) {
            unlock_range(d, claim_byte(slot), 2);
            throw;
        }
        return true;
    }
    return false;
}

// The head waiter's doorbell: an inotify watch on the semaphore file, for the bell a release writes
// (IN_MODIFY) and the close of a dead holder's description (IN_CLOSE_WRITE).
class doorbell {
public:
    doorbell(dlock_backend& backend, const descriptor* d) : backend_(backend) {
        {
            std::lock_guard<std::mutex> lock(backend.mutex);
            if (!backend.idle_doorbells.empty()) {
                fd_ = backend.idle_doorbells.back();
                backend.idle_doorbells.pop_back();
            }
        }
        if (fd_ < 0) fd_ = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
        if (fd_ < 0) return;
        drain();  // what a past watch left (IN_IGNORED, late events)
        // The file this description has open, whatever the path names now.
        const std::string self = fmt::format("/proc/self/fd/{}", d->fd);
        watch_ = inotify_add_watch(fd_, self.c_str(), IN_MODIFY | IN_CLOSE_WRITE);
        if (watch_ < 0) {
            give_back();
            fd_ = -1;
        }
    }
    ~doorbell() {
        if (fd_ < 0) return;
        inotify_rm_watch(fd_, watch_);
        give_back();
    }
    doorbell(const doorbell&) = delete;
    doorbell& operator=(const doorbell&) = delete;

    // Sleeps until the bell rings, the safety interval passes, or the deadline (throws).
    void wait(sleeper& asleep, const std::string& busy) {
        if (fd_ < 0) {  // no inotify instance left for this user: poll
            asleep.readable(-1, fallback_poll_ms, busy);
            return;
        }
        // Rung and still no permit: perhaps the close of a dead holder's description, which the
        // kernel reports an instant before it drops the description's locks; look again shortly.
        const int wait_ms = std::exchange(rung_, false) ? recheck_after_ring_ms : safety_ms;
        if (asleep.readable(fd_, wait_ms, busy)) {
            drain();
            rung_ = true;
        }
    }

    // A re-check this often whatever the bell says: bounds a wake-up the bell missed.
    static constexpr int safety_ms = 100;
    static constexpr int recheck_after_ring_ms = 2;
    static constexpr int fallback_poll_ms = 10;

private:
    void drain() const {
        char events[4096];
        while (read(fd_, events, sizeof events) > 0) {
        }
    }
    void give_back() const {
        {
            std::lock_guard<std::mutex> lock(backend_.mutex);
            if (backend_.idle_doorbells.size() < 16) {
                backend_.idle_doorbells.push_back(fd_);
                return;
            }
        }
        close(fd_);
    }

    dlock_backend& backend_;
    int fd_ = -1;
    int watch_ = -1;
    bool rung_ = false;  // the last wait ended with the bell
};

void acquire_permit(dlock_backend* backend, const dlock_acquire_request* request, give_back_unless_kept& guard,
                    uint64_t& fence) {
    if (request->permits == 0)
        fail(DLOCK_INVALID_ARGUMENT, fmt::format("semaphore `{}`: a permit acquire needs a limit >= 1", guard.d->name));
    const std::string busy = fmt::format("every permit of semaphore `{}` ({}) is held", guard.d->name, request->permits);
    std::optional<sleeper> asleep;
    std::unique_ptr<doorbell> bell;
    for (;;) {
        unlock_all_unless_kept unlock{guard.d};  // the gate, when this is the head waiter
        if (!backend->still_at_path(guard.d)) {
            unlock_range(guard.d, 0, 0);
            unlock.d = nullptr;
            bell.reset();
            dlock_hold* stale = std::exchange(guard.d, nullptr);
            guard.d = reopen(backend, stale, request->owner);
            continue;
        }
        if (try_permit(backend, request, guard.d, asleep, busy, fence)) {
            if (bell) unlock_range(guard.d, gate_byte, 1);  // the next waiter is head now
            unlock.d = nullptr;
            return;
        }
        if (request->deadline_ns == 0) fail(DLOCK_TIMEOUT, busy);
        if (!asleep) asleep.emplace(*backend, request->deadline_ns);
        if (!bell) {
            // Queue at the gate; its holder is the one waiter a release rings. The watch is set
            // before the next attempt, so a release after that attempt rings it.
            asleep->lock(guard.d, F_WRLCK, gate_byte, busy);
            bell = std::make_unique<doorbell>(*backend, guard.d);
        } else {
            bell->wait(*asleep, busy);
        }
        unlock.d = nullptr;  // keep the gate across attempts
    }
}

}  // namespace

namespace {

int file_acquire(dlock_backend* backend, const dlock_acquire_request* request, dlock_hold** out_hold,
                 dlock_grant* out_grant, dlock_plugin_error* error) {
    return guarded(error, [&] {
        if (backend->interrupted) fail(DLOCK_CANCELLED, "file backend: client is closing");
        const uint32_t kind =
            DLOCK_STRUCT_COVERS(request, dlock_acquire_request, kind) ? request->kind : uint32_t(DLOCK_HOLD_EXCLUSIVE);
        if (kind > DLOCK_HOLD_PERMIT)
            fail(DLOCK_INVALID_ARGUMENT, fmt::format("file backend: unknown hold kind {} for `{}`", kind, request->name));
        give_back_unless_kept guard{backend, backend->take(request->name, kind == DLOCK_HOLD_PERMIT, request->owner)};
        uint64_t fence = 0;
        if (kind == DLOCK_HOLD_EXCLUSIVE) acquire_exclusive(backend, request, guard, fence);
        else if (kind == DLOCK_HOLD_SHARED) acquire_shared(backend, request, guard, fence);
        else acquire_permit(backend, request, guard, fence);

        dlock_hold* d = std::exchange(guard.d, nullptr);
        d->kind = kind;
        *out_hold = d;
        out_grant->fencing_token = fence;
        out_grant->valid_until_ns = forever_ns;
        out_grant->ttl_ms = request->ttl_ms;
        return DLOCK_OK;
    });
}

int file_release(dlock_backend* backend, dlock_hold* hold, dlock_plugin_error* error) {
    return guarded(error, [&] {
        if (hold->released) return DLOCK_OK;
        // The holder fields and slot records are left as they are: they name the last holder, and
        // holders() reports one only while its lock is held (one system call less per cycle).
        struct flock unlock {};
        unlock.l_type = F_UNLCK;
        unlock.l_whence = SEEK_SET;
        unlock.l_len = hold->kind == DLOCK_HOLD_EXCLUSIVE ? 1 : 0;  // a slot's holder: every byte it holds
        if (fcntl(hold->fd, F_OFD_SETLK, &unlock) != 0)
            fail(DLOCK_UNKNOWN, fmt::format("file backend: unlocking `{}` failed: {}", backend->path_of(hold), std::strerror(errno)));
        hold->released = true;  // the description goes back to the pool at hold_destroy
        if (hold->kind == DLOCK_HOLD_PERMIT) {
            // A head waiter holds the gate: ring it. Best effort: its periodic re-check covers a
            // failure here, and the permit is released either way.
            try {
                if (probe(hold->fd, F_WRLCK, gate_byte, 1, backend->path_of(hold)) != F_UNLCK) {
                    const uint32_t ring = 1;
                    (void)!pwrite(hold->fd, &ring, sizeof ring, offsetof(semaphore_file_header, bell));
                }
            } catch (const dlock::plugin_kit::failure&) {
            }
        }
        return DLOCK_OK;
    });
}

void file_hold_destroy(dlock_backend* backend, dlock_hold* hold) {
    if (!hold) return;
    // A released hold's description is reused; one destroyed unreleased is closed, which drops the
    // OFD lock.
    if (hold->released) backend->give_back(hold);
    else delete hold;
}

int file_renew(dlock_backend*, dlock_renewal* renewals, size_t count, dlock_plugin_error*) {
    // An OFD lock cannot expire or be taken while its description is open: nothing to extend.
    for (size_t i = 0; i < count; ++i) {
        renewals[i].status = renewals[i].hold && !renewals[i].hold->released ? DLOCK_OK : DLOCK_LOST;
        renewals[i].valid_until_ns = forever_ns;
    }
    return DLOCK_OK;
}

// A file of the directory opened for reading, closed at scope end.
struct read_only_file {
    int fd = -1;
    ~read_only_file() {
        if (fd >= 0) close(fd);
    }
};

int file_inspect(dlock_backend* backend, const char* name, dlock_lock_info* info, dlock_plugin_error* error) {
    return guarded(error, [&] {
        const std::string path = backend->path_of(std::string_view(name));
        info->held = 0;
        info->holder[0] = '\0';
        info->fencing_token = 0;
        info->ttl_left_ms = -1;
        read_only_file file{open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW)};
        if (file.fd < 0) {
            if (errno == ENOENT) return DLOCK_OK;  // never locked
            fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot open `{}`: {}", path, std::strerror(errno)));
        }
        const short held = probe(file.fd, F_WRLCK, lock_byte, 1, path);
        lock_file_header header{};
        const ssize_t got = pread(file.fd, &header, sizeof header, 0);
        if (got == ssize_t(sizeof header) && std::memcmp(header.magic, magic, sizeof magic) == 0) {
            info->fencing_token = header.fence;
            if (held == F_WRLCK) {  // held shared, it has several holders: see holders()
                header.holder[sizeof header.holder - 1] = '\0';
                std::strncpy(info->holder, header.holder, sizeof info->holder - 1);
            }
        }
        info->held = held != F_UNLCK;
        return DLOCK_OK;
    });
}

// Reports the holders of the open lock or semaphore file `fd` (named `name`) to `visit`. Returns
// false when the visitor asked to stop.
bool visit_holders(int fd, const std::string& path, const std::string& name, bool semaphore, dlock_holder_visitor visit,
                   void* user_data) {
    dlock_holder_info info{};
    info.struct_size = sizeof info;
    info.name = name.c_str();
    info.ttl_left_ms = -1;  // an OFD lock lasts until released or its holder dies
    if (!semaphore) {
        const short held = probe(fd, F_WRLCK, lock_byte, 1, path);
        if (held == F_UNLCK) return true;
        if (held == F_WRLCK) {
            lock_file_header header{};
            if (pread(fd, &header, sizeof header, 0) != ssize_t(sizeof header) ||
                std::memcmp(header.magic, magic, sizeof magic) != 0)
                return true;  // a blank file being initialised by its first holder: no token yet
            info.kind = DLOCK_HOLD_EXCLUSIVE;
            header.holder[sizeof header.holder - 1] = '\0';
            std::strncpy(info.holder, header.holder, sizeof info.holder - 1);
            info.fencing_token = header.fence;
            return visit(&info, user_data) == 0;
        }
        info.kind = DLOCK_HOLD_SHARED;
    } else {
        semaphore_file_header header{};
        if (pread(fd, &header, offsetof(semaphore_file_header, name_bytes), 0) != ssize_t(offsetof(semaphore_file_header, name_bytes)))
            return true;
        info.kind = DLOCK_HOLD_PERMIT;
        info.permits = header.limit;
    }
    // The published slots, up to the last record ever written.
    if (probe(fd, F_WRLCK, slot_lock_base, 0, path) == F_UNLCK) return true;
    struct stat st {};
    if (fstat(fd, &st) != 0)
        fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot stat `{}`: {}", path, std::strerror(errno)));
    const size_t slots = st.st_size > record_base ? size_t(st.st_size - record_base + sizeof(slot_record) - 1) / sizeof(slot_record) : 0;
    for (size_t slot = 0; slot < slots; ++slot) {
        if (probe(fd, F_WRLCK, publish_byte(slot), 1, path) == F_UNLCK) continue;
        slot_record record{};
        if (pread(fd, &record, sizeof record, record_offset(slot)) != ssize_t(sizeof record)) continue;
        record.owner[sizeof record.owner - 1] = '\0';
        std::strncpy(info.holder, record.owner, sizeof info.holder - 1);
        info.fencing_token = record.fence;
        if (visit(&info, user_data) != 0) return false;
    }
    return true;
}

int file_holders(dlock_backend* backend, const char* name, int semaphore, dlock_holder_visitor visit, void* user_data,
                 dlock_plugin_error* error) {
    return guarded(error, [&] {
        const std::string path = backend->directory + "/" + (semaphore ? semaphore_file_name(name) : lock_file_name(name));
        read_only_file file{open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW)};
        if (file.fd < 0) {
            if (errno == ENOENT) return DLOCK_OK;  // never held
            fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot open `{}`: {}", path, std::strerror(errno)));
        }
        visit_holders(file.fd, path, name, semaphore != 0, visit, user_data);
        return DLOCK_OK;
    });
}

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The dlock name stored in the header of a lock or semaphore file (file names of long names are
// hashed, so the header is where names are read back); nullopt for a file that is not one.
std::optional<std::string> stored_name(int fd, bool semaphore) {
    if (semaphore) {
        semaphore_file_header header{};
        if (pread(fd, &header, sizeof header, 0) != ssize_t(sizeof header) ||
            std::memcmp(header.magic, semaphore_magic, sizeof semaphore_magic) != 0 || header.name_bytes >= sizeof header.name)
            return std::nullopt;
        return std::string(header.name, header.name_bytes);
    }
    lock_file_header header{};
    if (pread(fd, &header, sizeof header, 0) != ssize_t(sizeof header) || std::memcmp(header.magic, magic, sizeof magic) != 0 ||
        header.name_bytes >= sizeof header.name)
        return std::nullopt;
    return std::string(header.name, header.name_bytes);
}

int file_list(dlock_backend* backend, const char* prefix, dlock_holder_visitor visit, void* user_data,
              dlock_plugin_error* error) {
    return guarded(error, [&] {
        const std::string_view wanted = prefix ? prefix : "";
        DIR* dir = opendir(backend->directory.c_str());
        if (!dir)
            fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot read directory `{}`: {}", backend->directory, std::strerror(errno)));
        struct closer {
            DIR* dir;
            ~closer() { closedir(dir); }
        } close_dir{dir};
        while (const dirent* entry = readdir(dir)) {
            const std::string_view file_name = entry->d_name;
            if (file_name.empty() || file_name[0] == '.') continue;  // temporaries, . and ..
            const bool semaphore = ends_with(file_name, ".sem");
            if (!semaphore && !ends_with(file_name, ".lock")) continue;
            const std::string path = backend->directory + "/" + std::string(file_name);
            read_only_file file{openat(dirfd(dir), entry->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)};
            if (file.fd < 0) continue;  // gone meanwhile, or not ours to read
            struct stat st {};
            if (fstat(file.fd, &st) != 0 || !S_ISREG(st.st_mode)) continue;
            const std::optional<std::string> name = stored_name(file.fd, semaphore);
            if (!name || name->compare(0, wanted.size(), wanted) != 0) continue;
            if (!visit_holders(file.fd, path, *name, semaphore, visit, user_data)) break;
        }
        return DLOCK_OK;
    });
}

constexpr dlock_plugin file_plugin_table = {
    sizeof(dlock_plugin),
    2,
    "file",
    "Local locks: one lock file per name in a directory, held with OFD fcntl locks; released by the kernel when "
    "the holder dies; fencing counter kept in the file. Shared locks (writer-preferring) and semaphores.",
    file_options,
    sizeof file_options / sizeof file_options[0],
    file_create,
    file_destroy,
    file_capabilities,
    file_interrupt,
    file_acquire,
    file_release,
    file_hold_destroy,
    file_renew,
    file_inspect,
    file_holders,
    file_list,
    nullptr,  // break_lock: another process's OFD lock cannot be removed (docs/backends/file.md)
};

constexpr dlock_plugin file_plugin_table_v1 = dlock::plugin_kit::as_version_1(file_plugin_table);

}  // namespace

extern "C" int dlock_file_plugin_negotiate(uint32_t host_max_version, const dlock_plugin** out_plugin,
                                           uint32_t* out_min_version) {
    return dlock::plugin_kit::negotiate_v2(host_max_version, &file_plugin_table, &file_plugin_table_v1, out_plugin,
                                           out_min_version);
}
