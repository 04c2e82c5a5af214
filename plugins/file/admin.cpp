// The `file` backend's read-only entry points: inspect, holders and list read the lock and
// semaphore files (headers, slot records) and probe their locks; they never lock anything.
#include "file_internal.hpp"

#include <dlock/plugin_kit/scope_exit.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>

namespace dlock::file_backend {

using plugin_kit::scope_exit;

namespace {

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

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

int file_inspect(dlock_backend* backend, const char* name, dlock_lock_info* info, dlock_plugin_error* error) {
    return guarded(error, [&] {
        const std::string path = backend->path_of(std::string_view(name));
        info->held = 0;
        info->holder[0] = '\0';
        info->fencing_token = 0;
        info->ttl_left_ms = -1;
        const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
            if (errno == ENOENT) return DLOCK_OK;  // never locked
            fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot open `{}`: {}", path, std::strerror(errno)));
        }
        auto close_file = scope_exit([fd] { close(fd); });
        const short held = probe(fd, F_WRLCK, lock_byte, 1, path);
        lock_file_header header{};
        const ssize_t got = pread(fd, &header, sizeof header, 0);
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

int file_holders(dlock_backend* backend, const char* name, int semaphore, dlock_holder_visitor visit, void* user_data,
                 dlock_plugin_error* error) {
    return guarded(error, [&] {
        const std::string path = backend->directory + "/" + (semaphore ? semaphore_file_name(name) : lock_file_name(name));
        const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
            if (errno == ENOENT) return DLOCK_OK;  // never held
            fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot open `{}`: {}", path, std::strerror(errno)));
        }
        auto close_file = scope_exit([fd] { close(fd); });
        visit_holders(fd, path, name, semaphore != 0, visit, user_data);
        return DLOCK_OK;
    });
}

int file_list(dlock_backend* backend, const char* prefix, dlock_holder_visitor visit, void* user_data,
              dlock_plugin_error* error) {
    return guarded(error, [&] {
        const std::string_view wanted = prefix ? prefix : "";
        DIR* dir = opendir(backend->directory.c_str());
        if (!dir)
            fail(DLOCK_UNAVAILABLE, fmt::format("file backend: cannot read directory `{}`: {}", backend->directory, std::strerror(errno)));
        auto close_dir = scope_exit([dir] { closedir(dir); });
        while (const dirent* entry = readdir(dir)) {
            const std::string_view file_name = entry->d_name;
            if (file_name.empty() || file_name[0] == '.') continue;  // temporaries, . and ..
            const bool semaphore = ends_with(file_name, ".sem");
            if (!semaphore && !ends_with(file_name, ".lock")) continue;
            const std::string path = backend->directory + "/" + std::string(file_name);
            const int fd = openat(dirfd(dir), entry->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
            if (fd < 0) continue;  // gone meanwhile, or not ours to read
            auto close_file = scope_exit([fd] { close(fd); });
            struct stat st {};
            if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) continue;
            const std::optional<std::string> name = stored_name(fd, semaphore);
            if (!name || name->compare(0, wanted.size(), wanted) != 0) continue;
            if (!visit_holders(fd, path, *name, semaphore, visit, user_data)) break;
        }
        return DLOCK_OK;
    });
}

}  // namespace dlock::file_backend
