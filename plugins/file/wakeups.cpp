// The `file` backend's wake-ups: the wake-up signal and its handler, the per-wait deadline timer,
// the sleeper (a thread's leave to sleep in a blocking fcntl or poll until its deadline or
// interrupt()), and the semaphore head waiter's doorbell (inotify).
#include "file_internal.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <mutex>
#include <poll.h>
#include <pthread.h>
#include <sys/inotify.h>
#include <unistd.h>
#include <utility>

namespace dlock::file_backend {

namespace {

void wake_handler(int) {}

std::mutex signal_mutex;

}  // namespace

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

sleeper::sleeper(dlock_backend& backend, int64_t deadline_ns) : backend_(backend), deadline_ns_(deadline_ns) {
    sigset_t wake_only;
    sigemptyset(&wake_only);
    sigaddset(&wake_only, backend.wake_signal);
    pthread_sigmask(SIG_UNBLOCK, &wake_only, &previous_mask_);
    {
        dlock::plugin_kit::lock_guard lock(backend.mutex);
        if (backend.interrupted) {
            pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
            fail(DLOCK_CANCELLED, "file backend: client is closing");
        }
        backend.waiting_threads.insert(tid_);
    }
    try {
        if (deadline_ns != forever_ns) timer_ = std::make_unique<deadline_timer>(backend.wake_signal, tid_, deadline_ns);
    } catch (...) {
        leave();
        throw;
    }
}

sleeper::~sleeper() { leave(); }

void sleeper::lock(const descriptor* d, short type, off_t start, const std::string& busy) {
    struct flock request {};
    request.l_type = type;
    request.l_whence = SEEK_SET;
    request.l_start = start;
    request.l_len = 1;
    for (;;) {
        if (fcntl(d->fd, F_OFD_SETLKW, &request) == 0) return;
        if (errno != EINTR)
            fail(DLOCK_BACKEND, fmt::format("file backend: waiting for `{}` failed: {}", backend_.path_of(d), std::strerror(errno)));
        check(busy);
    }
}

bool sleeper::readable(int fd, int max_ms, const std::string& busy) {
    if (deadline_ns_ != forever_ns) {
        const int64_t left_ms = (deadline_ns_ - now_ns() + 999'999) / 1'000'000;
        max_ms = int(std::max<int64_t>(0, std::min<int64_t>(max_ms, left_ms)));
    }
    pollfd ready{fd, POLLIN, 0};
    const int n = poll(&ready, 1, max_ms);
    if (n < 0 && errno != EINTR)
        fail(DLOCK_BACKEND, fmt::format("file backend: waiting for a release failed: {}", std::strerror(errno)));
    check(busy);
    return n > 0;
}

void sleeper::check(const std::string& busy) const {
    if (backend_.interrupted) fail(DLOCK_CANCELLED, "file backend: client is closing");
    if (deadline_ns_ != forever_ns && now_ns() >= deadline_ns_)
        fail(DLOCK_TIMEOUT, fmt::format("{}; not acquired before the deadline", busy));
}

void sleeper::leave() noexcept {
    timer_.reset();
    {
        dlock::plugin_kit::lock_guard lock(backend_.mutex);
        backend_.waiting_threads.erase(tid_);
    }
    pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

doorbell::doorbell(dlock_backend& backend, const descriptor* d) : backend_(backend) {
    {
        dlock::plugin_kit::lock_guard lock(backend.mutex);
        if (!backend.idle_doorbells.empty()) {
            fd_ = backend.idle_doorbells.back();
            backend.idle_doorbells.pop_back();
        }
    }
    if (fd_ < 0) fd_ = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd_ < 0) return;
    drain();  // what a past watch left (IN_IGNORED, late events)
    // The file this description has open, whatever the path names now.
    const std::string self = fmt::format("/proc/self/fd/{}", d->fd);
    watch_ = inotify_add_watch(fd_, self.c_str(), IN_MODIFY | IN_CLOSE_WRITE);
    if (watch_ < 0) {
        give_back();
        fd_ = -1;
    }
}

doorbell::~doorbell() {
    if (fd_ < 0) return;
    inotify_rm_watch(fd_, watch_);
    give_back();
}

void doorbell::wait(sleeper& asleep, const std::string& busy) {
    if (fd_ < 0) {  // no inotify instance left for this user: poll
        asleep.readable(-1, fallback_poll_ms, busy);
        return;
    }
    // Rung and still no permit: perhaps the close of a dead holder's description, which the
    // kernel reports an instant before it drops the description's locks; look again shortly.
    const int wait_ms = std::exchange(rung_, false) ? recheck_after_ring_ms : safety_ms;
    if (asleep.readable(fd_, wait_ms, busy)) {
        drain();
        rung_ = true;
    }
}

void doorbell::drain() const {
    char events[4096];
    while (read(fd_, events, sizeof events) > 0) {
    }
}

void doorbell::give_back() const {
    {
        dlock::plugin_kit::lock_guard lock(backend_.mutex);
        if (backend_.idle_doorbells.size() < 16) {
            backend_.idle_doorbells.push_back(fd_);
            return;
        }
    }
    close(fd_);
}

}  // namespace dlock::file_backend
