// progress.hpp — defines progress_display, the suite's progress on stderr: the current backend and
// scenario, step n of m, and the elapsed time. On a terminal one status line is redrawn in place
// (and its clock ticks every second); otherwise (CI logs, pipes) each step is one plain line.
// It writes to `out` (the driver gives it the terminal's stderr, having sent fd 2 itself, where
// the client libraries log, to a file). Thread-safe: step() and note() may be called from any thread.
#pragma once

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace dlock::bench {

class progress_display {
public:
    progress_display(int total_steps, std::FILE* out)
        : out_(out), total_(total_steps), interactive_(::isatty(::fileno(out)) == 1), started_(std::chrono::steady_clock::now()) {
        if (interactive_) ticker_ = std::thread([this] { tick(); });
    }
    ~progress_display() { finish(); }
    progress_display(const progress_display&) = delete;
    progress_display& operator=(const progress_display&) = delete;

    // Starts the next step: `backend` · `what`.
    void step(const std::string& backend, const std::string& what) {
        std::lock_guard<std::mutex> guard(mutex_);
        ++done_;
        current_ = backend + " · " + what;
        if (interactive_) {
            draw();
        } else {
            std::fprintf(out_, "[%3d/%d %s] %s\n", done_, total_, elapsed().c_str(), current_.c_str());
            std::fflush(out_);
        }
    }

    // A line that stays (e.g. a scenario's error), printed above the status line.
    void note(const std::string& line) {
        std::lock_guard<std::mutex> guard(mutex_);
        if (interactive_) std::fprintf(out_, "\r\033[K");
        std::fprintf(out_, "%s\n", line.c_str());
        std::fflush(out_);
        if (interactive_) draw();
    }

    // Stops the clock and leaves the terminal on a fresh line. Idempotent.
    void finish() {
        {
            std::lock_guard<std::mutex> guard(mutex_);
            if (finished_) return;
            finished_ = true;
            if (interactive_) std::fprintf(out_, "\r\033[K[%d/%d %s] done\n", done_, total_, elapsed().c_str());
        }
        wake_.notify_all();
        if (ticker_.joinable()) ticker_.join();
    }

private:
    std::string elapsed() const {
        const auto s = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_).count();
        char text[32];
        std::snprintf(text, sizeof text, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
        return text;
    }
    void draw() {  // with mutex_ held
        std::fprintf(out_, "\r\033[K[%d/%d %s] %s", done_, total_, elapsed().c_str(), current_.c_str());
        std::fflush(out_);
    }
    void tick() {
        std::unique_lock<std::mutex> lock(mutex_);
        while (!finished_) {
            wake_.wait_for(lock, std::chrono::seconds(1));
            if (!finished_ && done_ > 0) draw();
        }
    }

    std::FILE* const out_;
    const int total_;
    const bool interactive_;
    const std::chrono::steady_clock::time_point started_;
    std::mutex mutex_;
    std::condition_variable wake_;
    int done_ = 0;
    std::string current_;
    bool finished_ = false;
    std::thread ticker_;
};

}  // namespace dlock::bench
