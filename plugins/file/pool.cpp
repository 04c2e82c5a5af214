// The `file` backend's descriptor pool: opening (and creating) lock and semaphore files, and
// keeping unlocked descriptions for the next acquisition of the same name.
#include "file_internal.hpp"

#include <dlock/plugin_kit/scope_exit.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <fcntl.h>
#include <iterator>
#include <sys/stat.h>
#include <unistd.h>

using namespace dlock::file_backend;

dlock_backend::~dlock_backend() {
    for (auto& entry : idle)
        for (dlock_hold* d : entry.second) delete d;
    delete recent.load();
    for (int fd : idle_doorbells) close(fd);
    if (directory_fd >= 0) close(directory_fd);
}

dlock_hold* dlock_backend::take(std::string_view name, bool semaphore, const char* owner) {
    dlock_hold* d = recent.exchange(nullptr);
    if (d && d->semaphore == semaphore && d->name == name) {
        d->released = false;
        return d;
    }
    {
        dlock::plugin_kit::lock_guard lock(mutex);
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

dlock_hold* dlock_backend::open_lock_file(const std::string& name, bool semaphore, const char* owner) {
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

void dlock_backend::fail_open(const std::string& path, int e) {
    fail(e == EACCES || e == EROFS || e == ELOOP ? DLOCK_BACKEND : DLOCK_UNAVAILABLE,
         fmt::format("file backend: cannot open lock file `{}`: {}", path, std::strerror(e)));
}

int dlock_backend::create_lock_file(const descriptor* d, const char* owner) {
    const std::string path = path_of(d);
    const std::string temporary = fmt::format("{}/.dlock-new-{}", directory, owner);
    const int fd = open(temporary.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) fail_open(temporary, errno);
    // The temporary name goes whatever happens (after the link the file keeps its real name); the
    // descriptor goes unless it is returned.
    auto close_unless_returned = dlock::plugin_kit::scope_exit([fd] { close(fd); });
    auto unlink_temporary = dlock::plugin_kit::scope_exit([&temporary] { unlink(temporary.c_str()); });
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
    close_unless_returned.release();
    return fd;
}

bool dlock_backend::still_at_path(const descriptor* d) const {
    struct stat at_path;  // read only when fstatat filled it
    if (fstatat(directory_fd, d->file_name.c_str(), &at_path, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return false;
        fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot stat `{}`: {}", path_of(d), std::strerror(errno)));
    }
    return at_path.st_dev == d->device && at_path.st_ino == d->inode;
}

void dlock_backend::give_back(dlock_hold* d) {
    if (idle_limit == 0) {
        delete d;
        return;
    }
    dlock_hold* previous = recent.exchange(d);
    if (!previous) return;
    dlock::plugin_kit::lock_guard lock(mutex);
    park_locked(previous);
}

void dlock_backend::park_locked(dlock_hold* d) {
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

namespace dlock::file_backend {

dlock_hold* reopen(dlock_backend* backend, dlock_hold* d, const char* owner) {
    const std::string name = d->name;
    const bool semaphore = d->semaphore;
    delete d;  // closing the description drops its locks
    return backend->open_lock_file(name, semaphore, owner);
}

}  // namespace dlock::file_backend
