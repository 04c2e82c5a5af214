/* clock_shift.c — an LD_PRELOAD shim for docs/design/faults.md §9 (client wall-clock jump). It moves
 * the wall clock of the process it is preloaded into by the whole number of seconds written in the
 * file named by $DLOCK_FAULT_CLOCK_SHIFT_FILE, re-read on every call, so a test jumps the clock
 * while the process runs by rewriting the file. CLOCK_REALTIME (and its coarse/TAI variants),
 * gettimeofday and time are shifted; CLOCK_MONOTONIC and CLOCK_BOOTTIME are not. libfaketime
 * would do this, but it is not installed here (and docs/design/servers.md reports it aborting Redis). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long shift_seconds(void) {
    const char *path = getenv("DLOCK_FAULT_CLOCK_SHIFT_FILE");
    if (!path) return 0;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char text[32] = {0};
    const ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    return n > 0 ? strtoll(text, NULL, 10) : 0;
}

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

int clock_gettime(clockid_t clock, struct timespec *ts) {
    static clock_gettime_fn real = NULL;
    if (!real) real = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    const int rc = real(clock, ts);
    if (rc == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE || clock == CLOCK_TAI))
        ts->tv_sec += shift_seconds();
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    const int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0 && tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    (void)tz;
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
