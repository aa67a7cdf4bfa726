/* A wall clock that steps, for the processes that load this (LD_PRELOAD; testkit/faults/clock.py
 * builds and loads it).
 *
 * CLOCK_REALTIME, CLOCK_REALTIME_COARSE and CLOCK_TAI readings (clock_gettime, gettimeofday,
 * time) get an offset added: "offset_ns=N" in the file $RIPPLE_WALLCLOCK_CONTROL, re-read
 * whenever its inode, size or mtime changes (the writer replaces it by rename), checked on
 * every wall-clock reading, so a test steps the clock of a running process as an NTP step
 * or a VM resume would. Every other clock (CLOCK_MONOTONIC above all), every sleep and every
 * timed wait goes straight to libc: a step moves the wall clock only, as on a real machine.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "control_file.h"

#define CONTROL_BYTES_MAX 128
#define NS_PER_S 1000000000LL

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long long offset_ns;
static struct control_seen seen = CONTROL_SEEN_NONE;

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime(void) {
    static clock_gettime_fn real;
    if (!real) {
        real = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
        if (real == NULL) abort(); /* nothing sane to forward to */
    }
    return real;
}

/* The offset in force now (0 without a control file). */
static long long current_offset_ns(void) {
    const char *path = getenv("RIPPLE_WALLCLOCK_CONTROL");
    if (path == NULL) return 0;
    char text[CONTROL_BYTES_MAX + 1];
    pthread_mutex_lock(&lock);
    if (control_file_read(path, &seen, text, sizeof(text))) {
        const char *at = strstr(text, "offset_ns=");
        offset_ns = at ? strtoll(at + 10, NULL, 10) : 0;
    }
    long long off = offset_ns;
    pthread_mutex_unlock(&lock);
    return off;
}

static void shift(struct timespec *ts, long long off) {
    long long ns = (long long)ts->tv_sec * NS_PER_S + ts->tv_nsec + off;
    ts->tv_sec = (time_t)(ns / NS_PER_S);
    ts->tv_nsec = (long)(ns % NS_PER_S);
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += NS_PER_S;
        ts->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    int rc = real_clock_gettime()(clk, ts);
    if (rc == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE || clk == CLOCK_TAI)) {
        shift(ts, current_offset_ns());
    }
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz; /* obsolete; glibc leaves it untouched too */
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0) { /* glibc declares tv nonnull */
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *t) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    if (t != NULL) *t = ts.tv_sec;
    return ts.tv_sec;
}
