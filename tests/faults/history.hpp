// history.hpp — the history format of the fault suite: one JSON object per line, one file per
// worker process, appended and flushed event by event (a SIGKILLed worker loses at most the event
// it was writing; a torn last line is skipped by the reader).
//
// An event: {"t": CLOCK_MONOTONIC ns, "op": "acquire"|"release"|"lost", "type": "invoke"|"ok"|
// "fail"|"unknown", "name": lock name, "owner": owner token, "token": fencing token,
// "valid_until": ns (INT64_MAX: no expiry), "status": detail ("timeout", "DLOCK_UNAVAILABLE",
// "released", "already_lost", …), "worker": label, "kind": "s" (a shared hold) | "p" (a semaphore's
// permit; absent for an exclusive lock), "permits": the semaphore's limit N}. Fields that do not
// apply are omitted.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dlock::faults {

struct history_event {
    int64_t t_ns = 0;
    std::string op;      // acquire, release, lost
    std::string type;    // invoke, ok, fail, unknown
    std::string name;
    std::string owner;
    uint64_t token = 0;
    int64_t valid_until_ns = 0;
    std::string status;
    std::string worker;
    char kind = 'x';         // 'x' exclusive lock, 's' shared hold, 'p' a semaphore's permit
    uint32_t permits = 0;    // 'p': the semaphore's limit N
};

// Appends events to one file; not thread-safe by itself (callers serialise). Each append is one
// fwrite + fflush of a whole line.
class history_writer {
public:
    history_writer(const std::string& path, std::string worker);
    ~history_writer();
    history_writer(const history_writer&) = delete;
    history_writer& operator=(const history_writer&) = delete;

    void append(history_event event);

private:
    std::FILE* file_ = nullptr;
    std::string worker_;
};

// Reads one history file; a line that does not parse (a torn last line) is skipped and counted.
std::vector<history_event> read_history_file(const std::string& path, std::size_t* torn_lines = nullptr);

int64_t monotonic_now_ns();

}  // namespace dlock::faults
