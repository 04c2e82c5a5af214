#include "history.hpp"

#include <ctime>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace dlock::faults {

int64_t monotonic_now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

history_writer::history_writer(const std::string& path, std::string worker) : worker_(std::move(worker)) {
    file_ = std::fopen(path.c_str(), "ae");
    if (!file_) throw std::runtime_error("cannot open history " + path);
}

history_writer::~history_writer() {
    if (file_) std::fclose(file_);
}

void history_writer::append(history_event e) {
    nlohmann::json j;
    j["t"] = e.t_ns ? e.t_ns : monotonic_now_ns();
    j["op"] = e.op;
    j["type"] = e.type;
    if (!e.name.empty()) j["name"] = e.name;
    if (!e.owner.empty()) j["owner"] = e.owner;
    if (e.token) j["token"] = e.token;
    if (e.valid_until_ns) j["valid_until"] = e.valid_until_ns;
    if (!e.status.empty()) j["status"] = e.status;
    if (e.kind != 'x') j["kind"] = std::string(1, e.kind);
    if (e.permits) j["permits"] = e.permits;
    j["worker"] = worker_;
    // Names may hold any bytes (docs/design/faults.md §15): replace invalid UTF-8 rather than throw.
    const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    std::fwrite(line.data(), 1, line.size(), file_);
    std::fflush(file_);
}

std::vector<history_event> read_history_file(const std::string& path, std::size_t* torn_lines) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot read history " + path);
    std::vector<history_event> events;
    std::size_t torn = 0;
    for (std::string line; std::getline(in, line);) {
        if (line.empty()) continue;
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
            ++torn;
            continue;
        }
        history_event e;
        e.t_ns = j.value("t", int64_t(0));
        e.op = j.value("op", "");
        e.type = j.value("type", "");
        e.name = j.value("name", "");
        e.owner = j.value("owner", "");
        e.token = j.value("token", uint64_t(0));
        e.valid_until_ns = j.value("valid_until", int64_t(0));
        e.status = j.value("status", "");
        e.worker = j.value("worker", "");
        const std::string kind = j.value("kind", "x");
        e.kind = kind.empty() ? 'x' : kind[0];
        e.permits = j.value("permits", uint32_t(0));
        events.push_back(std::move(e));
    }
    if (torn_lines) *torn_lines = torn;
    return events;
}

}  // namespace dlock::faults
