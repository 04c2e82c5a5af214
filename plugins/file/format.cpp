// The `file` backend's on-disk format: file names of lock names, the lock primitives on the
// locked byte ranges, and reading and writing headers and slot records (the layout is described
// at the top of file_plugin.cpp and in file_internal.hpp).
#include "file_internal.hpp"

#include <boost/uuid/name_generator_sha1.hpp>
#include <boost/uuid/uuid_io.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace dlock::file_backend {

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

pid_t current_tid() { return pid_t(syscall(SYS_gettid)); }

void unlock_file(const descriptor* d) {
    struct flock unlock {};
    unlock.l_type = F_UNLCK;
    unlock.l_whence = SEEK_SET;
    unlock.l_len = 1;
    fcntl(d->fd, F_OFD_SETLK, &unlock);
}

void unlock_range(const descriptor* d, off_t start, off_t len) {
    struct flock unlock {};
    unlock.l_type = F_UNLCK;
    unlock.l_whence = SEEK_SET;
    unlock.l_start = start;
    unlock.l_len = len;
    fcntl(d->fd, F_OFD_SETLK, &unlock);
}

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

}  // namespace dlock::file_backend
