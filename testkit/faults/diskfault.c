/* A disk that fails on demand, for the files under one directory of one process tree.
 *
 * Loaded with LD_PRELOAD (testkit/faults/disk.py builds and loads it). For a file descriptor or
 * a mapping whose file lies under $RIPPLE_DISKFAULT_PREFIX, and only while the control file
 * $RIPPLE_DISKFAULT_CONTROL says so:
 *   fsync, fdatasync, msync          sleep sync_delay_ms, then fail with EIO (sync=eio) or sync
 *   write, pwrite, writev, ftruncate,
 *   posix_fallocate, fallocate       fail with ENOSPC (write=enospc)
 * Everything else, and every file outside the prefix, goes straight to libc.
 *
 * The control file is one line of key=value words ("sync=eio sync_delay_ms=2000
 * write=enospc until_ms=N"); it is re-read whenever its inode, size or mtime changes (the
 * writer replaces it by rename), checked on every intercepted call, so a test turns a fault
 * on and off in a running process. until_ms is CLOCK_MONOTONIC in ms (one clock for every
 * process on the machine, read by raw syscall so faketime cannot move it): past it, no fault,
 * so a fault ends even if the test that set it died.
 *
 * Each injected fault is counted, and the counts of this process are rewritten to
 * $RIPPLE_DISKFAULT_CONTROL.counts.<pid> after each one, so a test can prove it happened.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "control_file.h"

#define CONTROL_BYTES_MAX 512
#define MAPS_LINE_MAX 4096
#define SYNC_DELAY_MS_MAX 60000

struct control {
    int sync_eio;
    long sync_delay_ms;
    int write_enospc;
    long long until_ms; /* 0: no end written (the writer always writes one) */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct control current;
static struct control_seen seen = CONTROL_SEEN_NONE;
static unsigned long count_sync_eio, count_sync_delay, count_write_enospc;

static long long monotonic_ms(void) {
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *next(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    if (f == NULL) {
        abort(); /* a libc without the call it wraps: nothing sane to forward to */
    }
    return f;
}

static ssize_t raw_write(int fd, const void *buf, size_t n) {
    return syscall(SYS_write, fd, buf, n);
}

static void parse(const char *text, struct control *c) {
    memset(c, 0, sizeof(*c));
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == '\n' || *p == '\t') p++;
        if (strncmp(p, "sync=eio", 8) == 0) c->sync_eio = 1;
        else if (strncmp(p, "write=enospc", 12) == 0) c->write_enospc = 1;
        else if (strncmp(p, "sync_delay_ms=", 14) == 0) c->sync_delay_ms = strtol(p + 14, NULL, 10);
        else if (strncmp(p, "until_ms=", 9) == 0) c->until_ms = strtoll(p + 9, NULL, 10);
        while (*p && *p != ' ' && *p != '\n' && *p != '\t') p++;
    }
    if (c->sync_delay_ms < 0) c->sync_delay_ms = 0;
    if (c->sync_delay_ms > SYNC_DELAY_MS_MAX) c->sync_delay_ms = SYNC_DELAY_MS_MAX;
}

/* The faults in force now (all off without a control file or past until_ms). */
static struct control load(void) {
    struct control none;
    memset(&none, 0, sizeof(none));
    const char *path = getenv("RIPPLE_DISKFAULT_CONTROL");
    if (path == NULL) return none;
    char text[CONTROL_BYTES_MAX + 1];
    pthread_mutex_lock(&lock);
    if (control_file_read(path, &seen, text, sizeof(text))) parse(text, &current);
    struct control c = current;
    pthread_mutex_unlock(&lock);
    if (c.until_ms != 0 && monotonic_ms() >= c.until_ms) return none;
    return c;
}

static void write_counts(void) {
    const char *control = getenv("RIPPLE_DISKFAULT_CONTROL");
    if (control == NULL) return;
    char path[4096], text[256];
    snprintf(path, sizeof(path), "%s.counts.%d", control, (int)getpid());
    int n = snprintf(text, sizeof(text), "sync_eio=%lu sync_delay=%lu write_enospc=%lu\n",
                     count_sync_eio, count_sync_delay, count_write_enospc);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    raw_write(fd, text, (size_t)n);
    close(fd);
}

static void count(unsigned long *counter) {
    pthread_mutex_lock(&lock);
    (*counter)++;
    write_counts();
    pthread_mutex_unlock(&lock);
}

static int under_prefix(const char *path) {
    const char *prefix = getenv("RIPPLE_DISKFAULT_PREFIX");
    if (prefix == NULL || *prefix == '\0') return 0;
    size_t n = strlen(prefix);
    while (n > 1 && prefix[n - 1] == '/') n--;
    return strncmp(path, prefix, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static int fd_under_prefix(int fd) {
    char link[64], path[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    return under_prefix(path);
}

/* Whether the mapping holding addr maps a file under the prefix (from /proc/self/maps). */
static int addr_under_prefix(const void *addr) {
    FILE *maps = fopen("/proc/self/maps", "re");
    if (maps == NULL) return 0;
    char line[MAPS_LINE_MAX];
    int found = 0;
    uintptr_t a = (uintptr_t)addr;
    while (fgets(line, sizeof(line), maps) != NULL) {
        unsigned long lo, hi;
        int path_at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &path_at) < 2) continue;
        if (a < lo || a >= hi) continue;
        char *path = line + path_at;
        path[strcspn(path, "\n")] = '\0';
        found = path_at > 0 && under_prefix(path);
        break;
    }
    fclose(maps);
    return found;
}

/* Apply the sync faults; returns -1 (errno EIO) when the sync must fail, 0 to go on. */
static int sync_fault(int in_prefix) {
    if (!in_prefix) return 0;
    struct control c = load();
    if (c.sync_delay_ms > 0) {
        struct timespec ts = {c.sync_delay_ms / 1000, (c.sync_delay_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        count(&count_sync_delay);
    }
    if (c.sync_eio) {
        count(&count_sync_eio);
        errno = EIO;
        return -1;
    }
    return 0;
}

static int write_fault(int fd) {
    if (!load().write_enospc || !fd_under_prefix(fd)) return 0;
    count(&count_write_enospc);
    return 1;
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = next("fsync");
    if (sync_fault(fd_under_prefix(fd)) != 0) return -1;
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = next("fdatasync");
    if (sync_fault(fd_under_prefix(fd)) != 0) return -1;
    return real(fd);
}

int msync(void *addr, size_t len, int flags) {
    static int (*real)(void *, size_t, int);
    if (!real) real = next("msync");
    /* MS_ASYNC only schedules write-back: it is not the sync a durability claim rests on. */
    if ((flags & MS_SYNC) && sync_fault(addr_under_prefix(addr)) != 0) return -1;
    return real(addr, len, flags);
}

#define ENOSPC_OR(call)      \
    if (write_fault(fd)) {   \
        errno = ENOSPC;      \
        return -1;           \
    }                        \
    return call

ssize_t write(int fd, const void *buf, size_t n) {
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = next("write");
    ENOSPC_OR(real(fd, buf, n));
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real) real = next("pwrite");
    ENOSPC_OR(real(fd, buf, n, off));
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) {
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real) real = next("pwrite64");
    ENOSPC_OR(real(fd, buf, n, off));
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    static ssize_t (*real)(int, const struct iovec *, int);
    if (!real) real = next("writev");
    ENOSPC_OR(real(fd, iov, iovcnt));
}

int ftruncate(int fd, off_t length) {
    static int (*real)(int, off_t);
    if (!real) real = next("ftruncate");
    ENOSPC_OR(real(fd, length));
}

int ftruncate64(int fd, off_t length) {
    static int (*real)(int, off_t);
    if (!real) real = next("ftruncate64");
    ENOSPC_OR(real(fd, length));
}

int fallocate(int fd, int mode, off_t off, off_t len) {
    static int (*real)(int, int, off_t, off_t);
    if (!real) real = next("fallocate");
    ENOSPC_OR(real(fd, mode, off, len));
}

/* posix_fallocate answers its error instead of setting errno. */
int posix_fallocate(int fd, off_t off, off_t len) {
    static int (*real)(int, off_t, off_t);
    if (!real) real = next("posix_fallocate");
    if (write_fault(fd)) return ENOSPC;
    return real(fd, off, len);
}

int posix_fallocate64(int fd, off_t off, off_t len) {
    static int (*real)(int, off_t, off_t);
    if (!real) real = next("posix_fallocate64");
    if (write_fault(fd)) return ENOSPC;
    return real(fd, off, len);
}
