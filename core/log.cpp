// dlock's log sink: the application's handler, or stderr (dlock_internal/log.hpp).
#include "dlock_internal/log.hpp"

#include <spdlog/sinks/sink.h>
#include <spdlog/spdlog.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace dlock::core {

namespace {

// True while this thread runs the handler: a line logged meanwhile (the handler called dlock,
// against the contract) goes to stderr instead of waiting for the lock this thread holds.
thread_local bool inside_handler = false;

int level_of(spdlog::level::level_enum level) {
    switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug: return DLOCK_LOG_DEBUG;
    case spdlog::level::info: return DLOCK_LOG_INFO;
    case spdlog::level::warn: return DLOCK_LOG_WARN;
    default: return DLOCK_LOG_ERROR;
    }
}

class handler_sink final : public spdlog::sinks::sink {
public:
    void log(const spdlog::details::log_msg& msg) override {
        if (inside_handler) {
            stderr_->log(msg);
            return;
        }
        // Held across the call: handlers never overlap, and set() waits for a running one.
        std::lock_guard<std::mutex> lock(mutex_);
        if (!handler_) {
            stderr_->log(msg);
            return;
        }
        const std::string text(msg.payload.data(), msg.payload.size());
        inside_handler = true;
        try {
            handler_(level_of(msg.level), text.c_str(), user_data_);
        } catch (...) {
            // A C++ handler that throws: the line is dropped, dlock goes on.
        }
        inside_handler = false;
    }
    void flush() override { stderr_->flush(); }
    void set_pattern(const std::string& pattern) override { stderr_->set_pattern(pattern); }
    void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override { stderr_->set_formatter(std::move(formatter)); }

    bool set(dlock_log_handler handler, void* user_data) {
        if (inside_handler) return false;
        std::lock_guard<std::mutex> lock(mutex_);
        handler_ = handler;
        user_data_ = user_data;
        return true;
    }

private:
    std::shared_ptr<spdlog::sinks::sink> stderr_ = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    std::mutex mutex_;
    dlock_log_handler handler_ = nullptr;  // (mutex_)
    void* user_data_ = nullptr;            // (mutex_)
};

const std::shared_ptr<handler_sink>& the_sink() {
    static const auto instance = std::make_shared<handler_sink>();
    return instance;
}

}  // namespace

std::shared_ptr<spdlog::sinks::sink> log_sink() { return the_sink(); }

bool set_log_handler(dlock_log_handler handler, void* user_data) { return the_sink()->set(handler, user_data); }

spdlog::logger& logger() {
    static const std::shared_ptr<spdlog::logger> instance = [] {
        auto l = std::make_shared<spdlog::logger>("dlock", log_sink());
        const char* level = std::getenv("DLOCK_LOG");
        l->set_level(level ? spdlog::level::from_str(level) : spdlog::level::warn);
        return l;
    }();
    return *instance;
}

}  // namespace dlock::core
