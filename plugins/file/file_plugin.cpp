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
#include <new>
#include <pthread.h>
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

pid_t current_tid() { return pid_t(syscall(SYS_gettid)); }

// An open description of one lock file. Reused across acquisitions of the same name.
struct descriptor {
    std::string name;
    std::string file_name;  // in the backend's directory
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

std::string lock_file_name(std::string_view name) {
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
    if (escaped.size() <= 200) return escaped + ".lock";
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
    return escaped.substr(0, cut) + "~" + digest_hex + ".lock";
}

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

    std::mutex mutex;
    // Unlocked descriptions: the one given back last (checked first: a client that locks one name
    // over and over finds it without hashing the name), then the rest by name. idle_count counts both.
    dlock_hold* recent = nullptr;
    std::unordered_map<std::string, std::vector<dlock_hold*>> idle;
    size_t idle_count = 0;
    std::set<pid_t> waiting_threads;
    std::atomic<bool> interrupted{false};

    ~dlock_backend() {
        for (auto& entry : idle)
            for (dlock_hold* d : entry.second) delete d;
        delete recent;
        if (directory_fd >= 0) close(directory_fd);
    }

    std::string path_of(std::string_view name) const { return directory + "/" + lock_file_name(name); }

    // A description of the lock file of `name`, unlocked: from the idle pool or newly opened.
    // `owner` (unique to the acquisition) names the temporary file when one is created.
    dlock_hold* take(const std::string& name, const char* owner) {
        {
            std::lock_guard<std::mutex> lock(mutex);
            dlock_hold* d = nullptr;
            if (recent && recent->name == name) {
                d = std::exchange(recent, nullptr);
            } else {
                // Entries stay when emptied: the next acquisition of the name reuses them without
                // allocating. At most one entry per name this client has locked.
                auto it = idle.find(name);
                if (it != idle.end() && !it->second.empty()) {
                    d = it->second.back();
                    it->second.pop_back();
                }
            }
            if (d) {
                --idle_count;
                d->released = false;
                return d;
            }
        }
        return open_lock_file(name, owner);
    }

    // Opens the lock file of `name`, creating it complete (header included) if it is missing.
    dlock_hold* open_lock_file(const std::string& name, const char* owner) {
        auto d = std::make_unique<dlock_hold>();
        d->name = name;
        d->file_name = lock_file_name(name);
        const std::string path = path_of(name);
        for (;;) {
            d->fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
            if (d->fd >= 0) break;
            if (errno != ENOENT) fail_open(path, errno);
            d->fd = create_lock_file(name, owner);
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

    // Writes a new lock file under a temporary name and links it into place. Returns its
    // descriptor, or -1 if a file appeared at the path meanwhile.
    int create_lock_file(const std::string& name, const char* owner) {
        const std::string path = path_of(name);
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
        std::memcpy(header.magic, magic, sizeof magic);
        header.name_bytes = uint32_t(std::min(name.size(), sizeof header.name - 1));
        std::memcpy(header.name, name.data(), header.name_bytes);
        errno = 0;  // a short write sets none: then it is taken for ENOSPC
        if (pwrite(fd, &header, sizeof header, 0) != ssize_t(sizeof header))
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
        struct stat at_path {};
        if (fstatat(directory_fd, d->file_name.c_str(), &at_path, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT) return false;
            fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot stat `{}`: {}", path_of(d->name), std::strerror(errno)));
        }
        return at_path.st_dev == d->device && at_path.st_ino == d->inode;
    }

    // Returns an unlocked description to the pool (or closes it when the pool is full).
    void give_back(dlock_hold* d) {
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (idle.size() > 4 * idle_limit + 64) {  // many names seen: drop the empty entries
                for (auto it = idle.begin(); it != idle.end();) it = it->second.empty() ? idle.erase(it) : std::next(it);
            }
            if (idle_count < idle_limit) {
                if (recent) idle[recent->name].push_back(recent);
                recent = d;
                ++idle_count;
                return;
            }
        }
        delete d;
    }

    // Sleeps in F_OFD_SETLKW until the lock is ours, the deadline passes or interrupt() is called.
    int wait_for(descriptor* d, int64_t deadline_ns, std::string& why) {
        const pid_t tid = current_tid();
        // The wake-up signal must reach this thread even if the application blocks it here; the
        // mask is restored after the timer is gone and interrupt() no longer aims at this thread,
        // and an unblocked signal is delivered at once, so none is left pending for the application.
        sigset_t wake_only;
        sigemptyset(&wake_only);
        sigaddset(&wake_only, wake_signal);
        struct restore_mask {
            sigset_t previous;
            ~restore_mask() { pthread_sigmask(SIG_SETMASK, &previous, nullptr); }
        } mask{};
        pthread_sigmask(SIG_UNBLOCK, &wake_only, &mask.previous);
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (interrupted) { why = "file backend: client is closing"; return DLOCK_CANCELLED; }
            waiting_threads.insert(tid);
        }
        struct leave_waiters {
            dlock_backend* self;
            pid_t tid;
            ~leave_waiters() {
                std::lock_guard<std::mutex> lock(self->mutex);
                self->waiting_threads.erase(tid);
            }
        } leave{this, tid};
        std::unique_ptr<deadline_timer> timer;
        if (deadline_ns != forever_ns) timer = std::make_unique<deadline_timer>(wake_signal, tid, deadline_ns);
        struct flock request {};
        request.l_type = F_WRLCK;
        request.l_whence = SEEK_SET;
        request.l_len = 1;
        for (;;) {
            if (fcntl(d->fd, F_OFD_SETLKW, &request) == 0) return DLOCK_OK;
            if (errno != EINTR) {
                why = fmt::format("file backend: waiting for `{}` failed: {}", path_of(d->name), std::strerror(errno));
                return DLOCK_BACKEND;
            }
            if (interrupted) { why = "file backend: client is closing"; return DLOCK_CANCELLED; }
            if (deadline_ns != forever_ns && now_ns() >= deadline_ns) {
                why = fmt::format("lock `{}` is held by another holder; not acquired before the deadline", d->name);
                return DLOCK_TIMEOUT;
            }
        }
    }
};

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

uint64_t file_capabilities(dlock_backend*) { return DLOCK_CAP_FENCING | DLOCK_CAP_PUSH_WAIT | DLOCK_CAP_SESSION_BOUND; }

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
        fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot read `{}`: {}", backend->path_of(d->name), std::strerror(errno)));
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
                                        backend->path_of(d->name), whole < 0 ? 0 : whole));
    std::memcpy(header.magic, magic, sizeof magic);
    header.name_bytes = uint32_t(std::min(d->name.size(), sizeof header.name - 1));
    std::memcpy(header.name, d->name.data(), header.name_bytes);
    errno = 0;  // a short write sets none: then it is taken for ENOSPC
    if (pwrite(d->fd, &header, sizeof header, 0) != ssize_t(sizeof header))
        fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot write the header of `{}`: {}", backend->path_of(d->name),
                                            std::strerror(errno ? errno : ENOSPC)));
    return 0;
}

int file_acquire(dlock_backend* backend, const dlock_acquire_request* request, dlock_hold** out_hold,
                 dlock_grant* out_grant, dlock_plugin_error* error) {
    return guarded(error, [&] {
        if (backend->interrupted) fail(DLOCK_CANCELLED, "file backend: client is closing");
        const std::string name(request->name);
        struct give_back_unless_kept {
            dlock_backend* backend;
            dlock_hold* d;
            ~give_back_unless_kept() {
                if (d) backend->give_back(d);
            }
        } guard{backend, backend->take(name, request->owner)};

        for (;;) {
            struct flock lock_request {};
            lock_request.l_type = F_WRLCK;
            lock_request.l_whence = SEEK_SET;
            lock_request.l_len = 1;
            if (fcntl(guard.d->fd, F_OFD_SETLK, &lock_request) != 0) {
                if (errno != EAGAIN && errno != EACCES)
                    fail(DLOCK_BACKEND, fmt::format("file backend: locking `{}` failed: {}", backend->path_of(name), std::strerror(errno)));
                if (request->deadline_ns == 0) fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held by another holder", name));
                std::string why;
                const int status = backend->wait_for(guard.d, request->deadline_ns, why);
                if (status != DLOCK_OK) fail(status, why);
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
            dlock_hold* stale = guard.d;
            guard.d = nullptr;
            delete stale;  // closing the description drops its lock
            guard.d = backend->open_lock_file(name, request->owner);
        }
        dlock_hold* d = guard.d;

        // Ours now. Everything below happens under the lock; a failure unlocks first.
        uint64_t fence;
        try {
            fence = read_fence(backend, d) + 1;
            struct {
                uint64_t fence;
                char holder[40];
                int64_t holder_pid;
            } fields{};
            static_assert(sizeof fields == holder_fields_bytes, "the holder fields as laid out in the header");
            fields.fence = fence;
            std::strncpy(fields.holder, request->owner, sizeof fields.holder - 1);
            fields.holder_pid = backend->pid;
            errno = 0;  // a short write sets none: then it is taken for ENOSPC
            if (pwrite(d->fd, &fields, sizeof fields, holder_fields_offset) != ssize_t(sizeof fields))
                fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot write the fencing counter of `{}`: {}",
                                                    backend->path_of(name), std::strerror(errno ? errno : ENOSPC)));
        } catch (...) {
            unlock_file(d);
            throw;
        }

        guard.d = nullptr;
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
        // The holder fields are left as they are: they name the last holder, and inspect reports a
        // holder only while the file is locked (one system call less per cycle).
        struct flock unlock {};
        unlock.l_type = F_UNLCK;
        unlock.l_whence = SEEK_SET;
        unlock.l_len = 1;
        if (fcntl(hold->fd, F_OFD_SETLK, &unlock) != 0)
            fail(DLOCK_UNKNOWN, fmt::format("file backend: unlocking `{}` failed: {}", backend->path_of(hold->name), std::strerror(errno)));
        hold->released = true;  // the description goes back to the pool at hold_destroy
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

int file_inspect(dlock_backend* backend, const char* name, dlock_lock_info* info, dlock_plugin_error* error) {
    return guarded(error, [&] {
        const std::string path = backend->path_of(name);
        info->held = 0;
        info->holder[0] = '\0';
        info->fencing_token = 0;
        info->ttl_left_ms = -1;
        const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
            if (errno == ENOENT) return DLOCK_OK;  // never locked
            fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot open `{}`: {}", path, std::strerror(errno)));
        }
        struct closer {
            int fd;
            ~closer() { close(fd); }
        } c{fd};
        struct flock probe {};
        probe.l_type = F_WRLCK;
        probe.l_whence = SEEK_SET;
        probe.l_len = 1;
        if (fcntl(fd, F_OFD_GETLK, &probe) != 0)
            fail(DLOCK_BACKEND, fmt::format("file backend: probing `{}` failed: {}", path, std::strerror(errno)));
        lock_file_header header{};
        const ssize_t got = pread(fd, &header, sizeof header, 0);
        if (got == ssize_t(sizeof header) && std::memcmp(header.magic, magic, sizeof magic) == 0) {
            info->fencing_token = header.fence;
            if (probe.l_type != F_UNLCK) {
                header.holder[sizeof header.holder - 1] = '\0';
                std::strncpy(info->holder, header.holder, sizeof info->holder - 1);
            }
        }
        info->held = probe.l_type != F_UNLCK;
        return DLOCK_OK;
    });
}

const dlock_plugin file_plugin_table = {
    sizeof(dlock_plugin),
    1,
    "file",
    "Local locks: one lock file per name in a directory, held with OFD fcntl locks; released by the kernel when "
    "the holder dies; fencing counter kept in the file.",
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
};

}  // namespace

extern "C" int dlock_file_plugin_negotiate(uint32_t host_max_version, const dlock_plugin** out_plugin,
                                           uint32_t* out_min_version) {
    return dlock::plugin_kit::negotiate_v1(host_max_version, &file_plugin_table, out_plugin, out_min_version);
}
