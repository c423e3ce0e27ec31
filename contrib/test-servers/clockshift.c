/*
 * clockshift: an LD_PRELOAD shim that shifts the wall clock of one process, for clock-step tests.
 *
 * CLOCK_REALTIME (and its _COARSE variant), gettimeofday() and time() are moved by an offset in seconds (may be
 * negative, may have a fraction after a '.') read from the file named by $CLOCKSHIFT_FILE; every other clock (the monotonic
 * and boot-time clocks a program measures waits with) is left alone. The file is read again at most every
 * 100 ms of monotonic time, so a test steps the clock of a running daemon by rewriting it.
 *
 * libfaketime is not used: it empties Swift's CommandLine.arguments on Linux.
 *
 * Build: gcc -shared -fPIC -O2 -o libclockshift.so clockshift.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime(void) {
    static clock_gettime_fn real;
    if (!real) real = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    return real;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long long offset_ns;
static long long read_at_ns = -1;
/* $CLOCKSHIFT_FILE as the process started: taken when the library is loaded, because some programs empty their
 * environment later (nginx's workers keep only TZ) and would otherwise stop following the file. */
static char offset_path[4096];

__attribute__((constructor)) static void remember_path(void) {
    const char *path = getenv("CLOCKSHIFT_FILE");
    if (path && strlen(path) < sizeof offset_path) strcpy(offset_path, path);
}

static long long monotonic_ns(void) {
    struct timespec now;
    real_clock_gettime()(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

/* Seconds with an optional sign and fraction ("-3600", "12.345") in nanoseconds, read by hand: strtod follows
 * the locale a program set, and under de_DE it would stop at the '.'. */
static long long parse_seconds(const char *text) {
    while (*text == ' ' || *text == '\t') text++;
    int negative = *text == '-';
    if (*text == '-' || *text == '+') text++;
    long long whole = 0, fraction = 0, scale = 1000000000LL;
    for (; *text >= '0' && *text <= '9'; text++) whole = whole * 10 + (*text - '0');
    if (*text == '.') {
        for (text++; *text >= '0' && *text <= '9'; text++) {
            if (scale > 1) {
                scale /= 10;
                fraction += (*text - '0') * scale;
            }
        }
    }
    long long total = whole * 1000000000LL + fraction;
    return negative ? -total : total;
}

/* The offset in nanoseconds, read again from the file when the last read is 100 ms old. */
static long long current_offset(void) {
    long long now = monotonic_ns();
    pthread_mutex_lock(&lock);
    if (read_at_ns < 0 || now - read_at_ns > 100000000LL) {
        read_at_ns = now;
        int fd = offset_path[0] ? open(offset_path, O_RDONLY | O_CLOEXEC) : -1;
        if (fd >= 0) {
            char text[64];
            ssize_t length = read(fd, text, sizeof text - 1);
            close(fd);
            if (length > 0) {
                text[length] = 0;
                offset_ns = parse_seconds(text);
            }
        }
    }
    long long offset = offset_ns;
    pthread_mutex_unlock(&lock);
    return offset;
}

static void shift(struct timespec *value) {
    long long total = (long long)value->tv_sec * 1000000000LL + value->tv_nsec + current_offset();
    value->tv_sec = (time_t)(total / 1000000000LL);
    value->tv_nsec = (long)(total % 1000000000LL);
    if (value->tv_nsec < 0) {
        value->tv_nsec += 1000000000L;
        value->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t clock, struct timespec *value) {
    int result = real_clock_gettime()(clock, value);
    if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) shift(value);
    return result;
}

int gettimeofday(struct timeval *restrict value, void *restrict zone) {
    (void)zone;
    struct timespec now;
    int result = clock_gettime(CLOCK_REALTIME, &now);
    if (result == 0) {
        value->tv_sec = now.tv_sec;
        value->tv_usec = now.tv_nsec / 1000;
    }
    return result;
}

time_t time(time_t *out) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (out) *out = now.tv_sec;
    return now.tv_sec;
}
