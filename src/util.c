/* util.c: the library's small shared services: status strings, version, logging, assertion
 * failure, the clock, the seeded PRNG, hashing, growable arrays and atomic file writes.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>

/* ---- status and version ----------------------------------------------------------------- */

static const char *const status_names[SS_STATUS_COUNT] = {
    [SS_OK]              = "ok",
    [SS_ERR_INVALID]     = "invalid argument",
    [SS_ERR_OOM]         = "out of device memory (budget exhausted)",
    [SS_ERR_HOST_OOM]    = "out of host memory (or the pinned host pool's cap)",
    [SS_ERR_DEVICE]      = "device error",
    [SS_ERR_IO]          = "input/output error",
    [SS_ERR_FORMAT]      = "malformed file or wrong version",
    [SS_ERR_UNSUPPORTED] = "not supported by this build or device",
    [SS_ERR_STATE]       = "call not legal in the current state",
    [SS_ERR_NOT_FOUND]   = "not found",
    [SS_ERR_INFEASIBLE]  = "no plan fits the budget",
    [SS_ERR_CORRUPT]     = "memory corruption detected (poison or guard bytes)",
};

const char *ss_status_str(ss_status s) {
    if ((int)s < 0 || s >= SS_STATUS_COUNT || !status_names[s]) return "unknown status";
    return status_names[s];
}

const char *ss_version_str(void) { return SS_VERSION_STRING; }

#ifndef SS_FEATURES
#define SS_FEATURES ""
#endif
const char *ss_build_features(void) { return SS_FEATURES; }

/* ---- logging ------------------------------------------------------------------------------ */

ss_log_fn ssi_log_fn = NULL;
ss_log_level ssi_log_max = SS_LOG_ERROR;
static void *log_user = NULL;

void ss_log_set(ss_log_fn fn, void *user, ss_log_level max_level) {
    ssi_log_fn = fn;
    log_user = user;
    ssi_log_max = max_level;
}

void ss_log_stderr(void *user, ss_log_level level, const char *msg) {
    static const char *const names[] = {"error", "warning", "info", "debug"};
    (void)user;
    fprintf(stderr, "smartswap: %s: %s\n", names[(unsigned)level & 3u], msg);
}

void ssi_log(ss_log_level lvl, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    ss_log_fn fn = ssi_log_fn;
    if (!fn) return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fn(log_user, lvl, buf);
}

void ssi_assert_fail(const char *expr, const char *file, int line) {
    char buf[512];
    snprintf(buf, sizeof buf, "assertion failed: %s (%s:%d)", expr, file, line);
    if (ssi_log_fn) ssi_log_fn(log_user, SS_LOG_ERROR, buf);
    else fprintf(stderr, "smartswap: %s\n", buf);   /* about to abort: the one exception */
    abort();
}

/* ---- time ----------------------------------------------------------------------------------- */

double ssi_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ssi_sleep(double seconds) {
    if (seconds <= 0) return;
    struct timespec ts;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* ---- PRNG ----------------------------------------------------------------------------------- */

void ssi_rng_seed(ssi_rng *r, uint64_t seed) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    r->s = z ? z : 0x2545F4914F6CDD1Dull;
}

uint64_t ssi_rng_next(ssi_rng *r) {
    uint64_t x = r->s;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

double ssi_rng_unit(ssi_rng *r) { return (double)(ssi_rng_next(r) >> 11) * 0x1.0p-53; }

uint64_t ssi_rng_below(ssi_rng *r, uint64_t n) { return n ? ssi_rng_next(r) % n : 0; }

/* ---- hashing -------------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t ssi_hash_bytes(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 0x100000001b3ull; }
    return mix64(h);
}

uint64_t ssi_hash_str(const char *s) { return ssi_hash_bytes(s, strlen(s)); }

/* ---- memory helpers ------------------------------------------------------------------------- */

ss_status ssi_grow(void *pptr, size_t *cap, size_t need, size_t elem) {
    void **pp = (void **)pptr;
    if (need <= *cap) return SS_OK;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / elem) return SS_ERR_HOST_OOM;
        ncap *= 2;
    }
    void *np = realloc(*pp, ncap * elem);
    if (!np) return SS_ERR_HOST_OOM;
    *pp = np;
    *cap = ncap;
    return SS_OK;
}

char *ssi_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void ssi_fmt(char *buf, size_t len, const char *fmt, ...) {
    va_list ap;
    if (!buf || !len) return;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

void ssi_vreport(char *err, size_t err_len, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (err && err_len) ssi_fmt(err, err_len, "%s", msg);
    else SS_ERROR("%s", msg);
}

void ssi_report(char *err, size_t err_len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ssi_vreport(err, err_len, fmt, ap);
    va_end(ap);
}

ss_status ssi_write_file_atomic(const char *path, const void *data, size_t len) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        SS_ERROR("path too long: %s", path);
        return SS_ERR_IO;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        SS_ERROR("cannot create %s: %s", tmp, strerror(errno));
        return SS_ERR_IO;
    }
    const char *p = data;
    size_t left = len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            SS_ERROR("cannot write %s: %s", tmp, strerror(errno));
            close(fd); unlink(tmp);
            return SS_ERR_IO;
        }
        p += w; left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        SS_ERROR("cannot flush %s: %s", tmp, strerror(errno));
        unlink(tmp);
        return SS_ERR_IO;
    }
    if (rename(tmp, path) != 0) {
        SS_ERROR("cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        return SS_ERR_IO;
    }
    return SS_OK;
}
