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
//
// Files: this one has the options, create and the hold entry points; format.cpp the on-disk format
// and lock primitives, pool.cpp the descriptor pool, wakeups.cpp the wake-up signal, the sleeper
// and the doorbell, acquire.cpp the three kinds of acquisition, admin.cpp inspect, holders and
// list; file_internal.hpp what they share.
#include "file_internal.hpp"

#include <dlock/plugin_kit/plugin_struct.hpp>
#include <dlock/plugin_kit/scope_exit.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <utility>

using namespace dlock::file_backend;

namespace {

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
            dlock::plugin_kit::lock_guard lock(backend->mutex);
            if (backend->waiting_threads.empty()) return;
            for (pid_t tid : backend->waiting_threads) syscall(SYS_tgkill, getpid(), tid, backend->wake_signal);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

int file_acquire(dlock_backend* backend, const dlock_acquire_request* request, dlock_hold** out_hold,
                 dlock_grant* out_grant, dlock_plugin_error* error) {
    return guarded(error, [&] {
        if (backend->interrupted) fail(DLOCK_CANCELLED, "file backend: client is closing");
        const uint32_t kind =
            DLOCK_STRUCT_COVERS(request, dlock_acquire_request, kind) ? request->kind : uint32_t(DLOCK_HOLD_EXCLUSIVE);
        if (kind > DLOCK_HOLD_PERMIT)
            fail(DLOCK_INVALID_ARGUMENT, fmt::format("file backend: unknown hold kind {} for `{}`", kind, request->name));
        // The description goes back to the pool on the way out, unless the hold keeps it (or it is
        // gone: a failed reopen leaves none).
        dlock_hold* d = backend->take(request->name, kind == DLOCK_HOLD_PERMIT, request->owner);
        auto give_back = dlock::plugin_kit::scope_exit([&] {
            if (d) backend->give_back(d);
        });
        uint64_t fence = 0;
        if (kind == DLOCK_HOLD_EXCLUSIVE) acquire_exclusive(backend, request, d, fence);
        else if (kind == DLOCK_HOLD_SHARED) acquire_shared(backend, request, d, fence);
        else acquire_permit(backend, request, d, fence);

        give_back.release();
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
