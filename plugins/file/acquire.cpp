// The `file` backend's acquisitions, one function per hold kind: exclusive (the lock byte, with
// the turnstile for writer preference), shared (the lock byte read-locked, then a slot) and a
// semaphore's permit (a slot among N, waiters queued at the gate, the head woken by the doorbell).
#include "file_internal.hpp"

#include <dlock/plugin_kit/scope_exit.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <optional>
#include <unistd.h>
#include <utility>

namespace dlock::file_backend {

using plugin_kit::scope_exit;

namespace {

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

}  // namespace

void acquire_exclusive(dlock_backend* backend, const dlock_acquire_request* request, dlock_hold*& d, uint64_t& fence) {
    const char* name = request->name;  // not d's: a stale description is replaced below
    for (;;) {
        if (!try_lock(backend, d, F_WRLCK, lock_byte)) {
            if (request->deadline_ns == 0) fail(DLOCK_TIMEOUT, fmt::format("lock `{}` is held by another holder", name));
            // Writer preference: the turnstile, held while this waits, stops new shared acquirers.
            const std::string busy = fmt::format("lock `{}` is held by another holder", name);
            sleeper asleep(*backend, request->deadline_ns);
            asleep.lock(d, F_WRLCK, turnstile_byte, busy);
            try {
                asleep.lock(d, F_WRLCK, lock_byte, busy);
            } catch (...) {
                unlock_range(d, turnstile_byte, 1);
                throw;
            }
            unlock_range(d, turnstile_byte, 1);
        }
        // Locked — but perhaps a file that was deleted or replaced since it was opened (this
        // description may come from the idle pool, or the wait may have outlasted the file):
        // then lock the file the path names now.
        bool current;
        try {
            current = backend->still_at_path(d);
        } catch (...) {
            unlock_file(d);
            throw;
        }
        if (current) break;
        dlock_hold* stale = std::exchange(d, nullptr);
        d = reopen(backend, stale, request->owner);
    }

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

void acquire_shared(dlock_backend* backend, const dlock_acquire_request* request, dlock_hold*& d, uint64_t& fence) {
    const char* name = request->name;  // not d's: a stale description is replaced below
    const std::string busy_exclusive = fmt::format("lock `{}` is held exclusively", name);
    const std::string busy_writer = fmt::format("lock `{}` has an exclusive acquirer waiting (writer preference)", name);
    std::optional<sleeper> asleep;
    auto fall_asleep = [&] {
        if (!asleep) asleep.emplace(*backend, request->deadline_ns);
    };
    for (;;) {
        // Every lock `d` holds, whatever happens in between, unless kept.
        auto unlock = scope_exit([held = d] { unlock_range(held, 0, 0); });
        // An exclusive acquirer waiting holds the turnstile: wait behind it (a read lock, so
        // readers queued together pass together), holding it until the lock byte is ours.
        if (probe(d->fd, F_RDLCK, turnstile_byte, 1, backend->path_of(d)) != F_UNLCK) {
            if (request->deadline_ns == 0) fail(DLOCK_TIMEOUT, busy_writer);
            fall_asleep();
            asleep->lock(d, F_RDLCK, turnstile_byte, busy_writer);
        }
        if (!try_lock(backend, d, F_RDLCK, lock_byte)) {
            if (request->deadline_ns == 0) fail(DLOCK_TIMEOUT, busy_exclusive);
            fall_asleep();
            asleep->lock(d, F_RDLCK, lock_byte, busy_exclusive);
        }
        if (!backend->still_at_path(d)) {
            unlock_range(d, 0, 0);
            unlock.release();
            dlock_hold* stale = std::exchange(d, nullptr);
            d = reopen(backend, stale, request->owner);
            continue;
        }
        // Held shared. Under the counter byte: the next fencing token and a free slot.
        lock_counter(backend, d, request->deadline_ns, asleep, busy_exclusive);
        fence = read_fence(backend, d) + 1;
        write_exactly(backend, d, &fence, sizeof fence, holder_fields_offset, "fencing counter");
        size_t slot = 0;
        while (!try_lock(backend, d, F_WRLCK, claim_byte(slot)))
            if (++slot == max_shared_slots)
                fail(DLOCK_UNAVAILABLE, fmt::format("lock `{}` has {} shared holders, the most the file backend records", name,
                                                    max_shared_slots));
        publish_slot(backend, d, slot, request->owner, fence, DLOCK_HOLD_SHARED);
        unlock_range(d, turnstile_byte, counter_byte + 1 - turnstile_byte);  // turnstile, counter
        unlock.release();
        return;
    }
}

namespace {

// One attempt at a permit, under the counter byte: true with `fence` set if one was taken. Throws
// DLOCK_INVALID_ARGUMENT when the stored limit differs from `permits` while a permit is held.
bool try_permit(dlock_backend* backend, const dlock_acquire_request* request, descriptor* d, std::optional<sleeper>& asleep,
                const std::string& busy, uint64_t& fence) {
    lock_counter(backend, d, request->deadline_ns, asleep, busy);
    auto unlock_counter = scope_exit([d] { unlock_range(d, counter_byte, 1); });
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

}  // namespace

void acquire_permit(dlock_backend* backend, const dlock_acquire_request* request, dlock_hold*& d, uint64_t& fence) {
    if (request->permits == 0)
        fail(DLOCK_INVALID_ARGUMENT, fmt::format("semaphore `{}`: a permit acquire needs a limit >= 1", d->name));
    const std::string busy = fmt::format("every permit of semaphore `{}` ({}) is held", d->name, request->permits);
    std::optional<sleeper> asleep;
    std::unique_ptr<doorbell> bell;
    for (;;) {
        // Every lock `d` holds (the gate, when this is the head waiter), unless kept.
        auto unlock = scope_exit([held = d] { unlock_range(held, 0, 0); });
        if (!backend->still_at_path(d)) {
            unlock_range(d, 0, 0);
            unlock.release();
            bell.reset();
            dlock_hold* stale = std::exchange(d, nullptr);
            d = reopen(backend, stale, request->owner);
            continue;
        }
        if (try_permit(backend, request, d, asleep, busy, fence)) {
            if (bell) unlock_range(d, gate_byte, 1);  // the next waiter is head now
            unlock.release();
            return;
        }
        if (request->deadline_ns == 0) fail(DLOCK_TIMEOUT, busy);
        if (!asleep) asleep.emplace(*backend, request->deadline_ns);
        if (!bell) {
            // Queue at the gate; its holder is the one waiter a release rings. The watch is set
            // before the next attempt, so a release after that attempt rings it.
            asleep->lock(d, F_WRLCK, gate_byte, busy);
            bell = std::make_unique<doorbell>(*backend, d);
        } else {
            bell->wait(*asleep, busy);
        }
        unlock.release();  // keep the gate across attempts
    }
}

}  // namespace dlock::file_backend
