/* test-device.c: the device conformance suite, run against every compiled-in backend that can
 * run here (cpu-sim real clock, cpu-sim virtual clock, cpu-sim inside the fault wrapper, cuda
 * when a GPU exists, else "skipped: no GPU"), then cpu-sim specifics: capacity, guard bytes,
 * poison, host stream, virtual-clock determinism, real-clock overlap, calibration.
 */
#include "smartswap-device.h"
#include "test.h"

#include <math.h>
#include <pthread.h>
#include <time.h>

/* ---------------------------------------------------------------------------------------- */
/* helpers                                                                                   */

static int log_warnings, log_errors;
static void count_log(void *user, ss_log_level level, const char *msg) {
    (void)user; (void)msg;
    if (level == SS_LOG_WARN) __atomic_add_fetch(&log_warnings, 1, __ATOMIC_RELAXED);
    if (level == SS_LOG_ERROR) __atomic_add_fetch(&log_errors, 1, __ATOMIC_RELAXED);
}

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int g_threads;           /* the cpu-sim specifics' real clock: stream threads (sim-threads) */

static ss_options sim_opts(int virt) {
    ss_options o = ss_options_default();
    o.sim_threads = g_threads;
    o.sim_capacity_bytes = 64u << 20;
    o.sim_d2h_gbps = 4;
    o.sim_h2d_gbps = 4;
    o.sim_latency_us = 5;
    o.sim_virtual_clock = virt;
    o.sim_jitter_us = 0;
    o.seed = 42;
    return o;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31u + seed * 7u + (i >> 8));
}

/* 1 when p holds fill(p, n, seed)'s bytes. */
static int check(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 31u + seed * 7u + (i >> 8))) return 0;
    return 1;
}

/* A backend configuration of the conformance suite. */
typedef struct backend {
    const char *label;
    const char *name;          /* device to open */
    int virt;                  /* cpu-sim virtual clock */
    int fault;                 /* wrap in a disarmed fault device */
    int threads;               /* cpu-sim stream threads (sim-threads) */
} backend;

static const backend backends[] = {
    {"cpu-sim (real clock)", "cpu-sim", 0, 0, 0},
    {"cpu-sim (stream threads)", "cpu-sim", 0, 0, 1},
    {"cpu-sim (virtual clock)", "cpu-sim", 1, 0, 0},
    {"fault(cpu-sim)", "cpu-sim", 0, 1, 0},
    {"cuda", "cuda", 0, 0, 0},
};
static const backend *cur;     /* the backend the conformance tests run on now */

/* Opens the current backend; 1 on success, 0 after TEST_SKIP-worthy absence (sets *why). */
static int open_cur(ss_device_t **dev, const char **why) {
    ss_options o = sim_opts(cur->virt);
    o.sim_threads = cur->threads;
    ss_status st = ss_device_open(cur->name, &o, dev);
    /* no GPU is a skip; the embedded cpu-sim failing to open is a failure */
    if (strcmp(cur->name, "cpu-sim") && (st == SS_ERR_DEVICE || st == SS_ERR_NOT_FOUND)) { *why = "no GPU"; return 0; }
    CHECK_OK(st);
    if (st != SS_OK) { *why = "open failed"; return 0; }
    if (cur->fault) {
        ss_device_t *f = NULL;
        CHECK_OK(ss_device_fault(*dev, "alloc", 0, 0, SS_ERR_OOM, &f));
        *dev = f;
    }
    return 1;
}

#define OPEN_OR_SKIP(dev) \
    do { const char *why_ = ""; if (!open_cur(&(dev), &why_)) TEST_SKIP(why_); } while (0)

/* ---------------------------------------------------------------------------------------- */
/* conformance                                                                               */

static void t_caps_and_memory(void) {
    ss_device_t *dev;
    OPEN_OR_SKIP(dev);
    const ss_device_caps *c = ss_device_get_caps(dev);
    CHECK(c && c->alignment == 256 && c->total_bytes > 0 && c->name[0]);
    uint64_t f0, t0, f1, t1;
    CHECK_OK(ss_device_mem_info(dev, &f0, &t0));
    static const size_t sizes[] = {1, 255, 256, 1000, 1 << 20};
    void *p[5];
    for (int i = 0; i < 5; i++) {
        CHECK_OK(ss_mem_alloc(dev, sizes[i], &p[i]));
        CHECK(((uintptr_t)p[i] & 255) == 0);
    }
    CHECK_OK(ss_device_mem_info(dev, &f1, &t1));
    CHECK(t1 == t0 && f1 + (1 << 20) <= f0);
    ss_device_stats s;
    CHECK_OK(ss_device_get_stats(dev, &s));
    CHECK_EQ_U64(s.mem_allocs, 5);
    CHECK_EQ_U64(s.mem_bytes_in_use, 1 + 255 + 256 + 1000 + (1 << 20));
    for (int i = 0; i < 5; i++) CHECK_OK(ss_mem_free(dev, p[i], sizes[i]));
    CHECK_OK(ss_device_get_stats(dev, &s));
    CHECK_EQ_U64(s.mem_frees, 5);
    CHECK_EQ_U64(s.mem_bytes_in_use, 0);
    CHECK_EQ_U64(s.mem_bytes_peak, 1 + 255 + 256 + 1000 + (1 << 20));
    void *h;
    CHECK_OK(ss_host_alloc(dev, 4096, &h));
    memset(h, 1, 4096);
    CHECK_OK(ss_host_free(dev, h, 4096));
    CHECK_OK(ss_device_close(dev));
}

static void t_bad_input(void) {
    ss_device_t *dev, *other;
    OPEN_OR_SKIP(dev);
    ss_options o = sim_opts(0);
    CHECK_OK(ss_device_open("cpu-sim", &o, &other));
    void *p = NULL, *h = NULL;
    int local = 0;
    ss_stream_t *s, *os;
    ss_event_t *e;
    CHECK_STATUS(ss_device_open("no-such-device", &o, &(ss_device_t *){NULL}), SS_ERR_NOT_FOUND);
    CHECK_STATUS(ss_device_open(NULL, &o, &(ss_device_t *){NULL}), SS_ERR_INVALID);
    CHECK_STATUS(ss_mem_alloc(dev, 0, &p), SS_ERR_INVALID);
    CHECK_STATUS(ss_mem_alloc(dev, 16, NULL), SS_ERR_INVALID);
    CHECK_STATUS(ss_mem_alloc(NULL, 16, &p), SS_ERR_INVALID);
    CHECK_STATUS(ss_host_alloc(dev, 0, &h), SS_ERR_INVALID);
    CHECK_STATUS(ss_mem_free(dev, NULL, 16), SS_ERR_INVALID);
    CHECK_STATUS(ss_mem_free(dev, &local, sizeof local), SS_ERR_STATE);      /* foreign */
    CHECK_STATUS(ss_host_free(dev, &local, sizeof local), SS_ERR_STATE);
    CHECK_OK(ss_mem_alloc(dev, 512, &p));
    CHECK_STATUS(ss_mem_free(dev, p, 256), SS_ERR_INVALID);                  /* wrong size */
    CHECK_STATUS(ss_mem_free(dev, (char *)p + 256, 256), SS_ERR_STATE);      /* interior */
    CHECK_STATUS(ss_mem_free(other, p, 512), SS_ERR_STATE);                  /* other device */
    CHECK_STATUS(ss_device_close(dev), SS_ERR_STATE);                        /* live block */
    CHECK_OK(ss_mem_free(dev, p, 512));
    CHECK_STATUS(ss_mem_free(dev, p, 512), SS_ERR_STATE);                    /* double free */
    CHECK_OK(ss_host_alloc(dev, 64, &h));
    CHECK_OK(ss_host_free(dev, h, 64));
    CHECK_STATUS(ss_host_free(dev, h, 64), SS_ERR_STATE);
    CHECK_OK(ss_stream_new(dev, &s));
    CHECK_OK(ss_stream_new(other, &os));
    CHECK_OK(ss_event_new(dev, &e));
    char buf[64];
    CHECK_STATUS(ss_copy_async(dev, s, NULL, buf, 8, SS_COPY_H2D), SS_ERR_INVALID);
    CHECK_STATUS(ss_copy_async(dev, s, buf, NULL, 8, SS_COPY_H2D), SS_ERR_INVALID);
    CHECK_STATUS(ss_copy_async(dev, s, buf, buf + 8, 0, SS_COPY_H2D), SS_ERR_INVALID);
    CHECK_STATUS(ss_copy_async(dev, s, buf, buf + 8, 8, (ss_copy_kind)7), SS_ERR_INVALID);
    CHECK_STATUS(ss_copy_async(dev, NULL, buf, buf + 8, 8, SS_COPY_H2D), SS_ERR_INVALID);
    CHECK_STATUS(ss_copy_async(dev, os, buf, buf + 8, 8, SS_COPY_H2D), SS_ERR_INVALID);
    CHECK_STATUS(ss_event_record(dev, e, os), SS_ERR_INVALID);
    CHECK_STATUS(ss_event_record(dev, NULL, s), SS_ERR_INVALID);
    CHECK_STATUS(ss_event_query(dev, e, NULL), SS_ERR_INVALID);
    CHECK_STATUS(ss_compute_async(dev, s, -1.0), SS_ERR_INVALID);
    CHECK_STATUS(ss_device_close(dev), SS_ERR_STATE);                        /* live stream+event */
    CHECK_OK(ss_event_free(dev, e));
    CHECK_STATUS(ss_device_close(dev), SS_ERR_STATE);                        /* live stream */
    CHECK_OK(ss_stream_free(dev, s));
    CHECK_OK(ss_stream_free(other, os));
    CHECK_STATUS(ss_device_close(NULL), SS_ERR_INVALID);
    CHECK_OK(ss_device_close(dev));
    CHECK_OK(ss_device_close(other));
}

static void t_copy_roundtrip(void) {
    ss_device_t *dev;
    OPEN_OR_SKIP(dev);
    const size_t n = 1u << 20;
    ss_stream_t *s;
    void *d1, *d2, *h1, *h2;
    CHECK_OK(ss_stream_new(dev, &s));
    CHECK_OK(ss_mem_alloc(dev, n, &d1));
    CHECK_OK(ss_mem_alloc(dev, n, &d2));
    CHECK_OK(ss_host_alloc(dev, n, &h1));
    CHECK_OK(ss_host_alloc(dev, n, &h2));
    fill(h1, n, 1);
    memset(h2, 0, n);
    CHECK_OK(ss_copy_async(dev, s, d1, h1, n, SS_COPY_H2D));
    CHECK_OK(ss_copy_async(dev, s, d2, d1, n, SS_COPY_D2D));
    CHECK_OK(ss_copy_async(dev, s, h2, d2, n, SS_COPY_D2H));
    CHECK_OK(ss_stream_sync(dev, s));
    CHECK(memcmp(h1, h2, n) == 0);
    /* FIFO: two copies into the same place, the later one wins */
    fill(h1, n, 2);
    CHECK_OK(ss_copy_async(dev, s, d1, h2, n, SS_COPY_H2D));
    CHECK_OK(ss_copy_async(dev, s, d1, h1, n / 2, SS_COPY_H2D));
    CHECK_OK(ss_copy_async(dev, s, h2, d1, n, SS_COPY_D2H));
    CHECK_OK(ss_stream_sync(dev, s));
    CHECK(memcmp(h1, h2, n / 2) == 0);
    ss_device_stats st;
    CHECK_OK(ss_device_get_stats(dev, &st));
    CHECK_EQ_U64(st.copies[SS_COPY_H2D], 3);
    CHECK_EQ_U64(st.copies[SS_COPY_D2H], 2);
    CHECK_EQ_U64(st.copy_bytes[SS_COPY_D2D], n);
    CHECK_OK(ss_stream_free(dev, s));
    CHECK_OK(ss_mem_free(dev, d1, n));
    CHECK_OK(ss_mem_free(dev, d2, n));
    CHECK_OK(ss_host_free(dev, h1, n));
    CHECK_OK(ss_host_free(dev, h2, n));
    CHECK_OK(ss_device_close(dev));
}

/* A copy on stream B that waits on an event recorded on A after a slow H2D copy sees the data
 * (on cpu-sim, without the wait it would read the poison of the fresh block). */
static void t_events_order_streams(void) {
    ss_device_t *dev;
    OPEN_OR_SKIP(dev);
    const size_t n = 8u << 20;
    ss_stream_t *a, *b;
    ss_event_t *e, *never;
    void *d, *h1, *h2;
    CHECK_OK(ss_stream_new(dev, &a));
    CHECK_OK(ss_stream_new(dev, &b));
    CHECK_OK(ss_event_new(dev, &e));
    CHECK_OK(ss_event_new(dev, &never));
    CHECK_OK(ss_mem_alloc(dev, n, &d));
    CHECK_OK(ss_host_alloc(dev, n, &h1));
    CHECK_OK(ss_host_alloc(dev, n, &h2));
    fill(h1, n, 3);
    memset(h2, 0, n);
    int done = -1;
    CHECK_OK(ss_event_query(dev, never, &done));
    CHECK(done == 1);                                   /* never recorded: complete */
    CHECK_OK(ss_event_wait(dev, b, never));             /* and waiting on it is a no-op */
    CHECK_OK(ss_copy_async(dev, a, d, h1, n, SS_COPY_H2D));   /* ~2 ms on cpu-sim, twice: */
    CHECK_OK(ss_copy_async(dev, a, d, h1, n, SS_COPY_H2D));   /* d holds the data late */
    CHECK_OK(ss_event_record(dev, e, a));
    CHECK_OK(ss_event_wait(dev, b, e));
    CHECK_OK(ss_copy_async(dev, b, h2, d, n, SS_COPY_D2H));
    CHECK_OK(ss_stream_sync(dev, b));
    CHECK(memcmp(h1, h2, n) == 0);
    CHECK_OK(ss_event_query(dev, e, &done));
    CHECK(done == 1);                                   /* b waited for e, and b is done */
    ss_device_stats st;
    CHECK_OK(ss_device_get_stats(dev, &st));
    CHECK_EQ_U64(st.event_records, 1);
    CHECK_EQ_U64(st.event_waits, 2);
    CHECK_EQ_U64(st.event_queries, 2);
    CHECK_OK(ss_stream_free(dev, a));
    CHECK_OK(ss_stream_free(dev, b));
    CHECK_OK(ss_event_free(dev, e));
    CHECK_OK(ss_event_free(dev, never));
    CHECK_OK(ss_mem_free(dev, d, n));
    CHECK_OK(ss_host_free(dev, h1, n));
    CHECK_OK(ss_host_free(dev, h2, n));
    CHECK_OK(ss_device_close(dev));
}

static void t_event_times(void) {
    ss_device_t *dev;
    OPEN_OR_SKIP(dev);
    const size_t n = 4u << 20;
    ss_stream_t *s;
    ss_event_t *e0, *e1;
    void *d, *h;
    CHECK_OK(ss_stream_new(dev, &s));
    CHECK_OK(ss_event_new(dev, &e0));
    CHECK_OK(ss_event_new(dev, &e1));
    CHECK_OK(ss_mem_alloc(dev, n, &d));
    CHECK_OK(ss_host_alloc(dev, n, &h));
    memset(h, 7, n);
    double t_before = ss_device_now(dev);
    CHECK_OK(ss_event_record(dev, e0, s));
    CHECK_OK(ss_copy_async(dev, s, d, h, n, SS_COPY_H2D));
    CHECK_OK(ss_event_record(dev, e1, s));
    CHECK_OK(ss_event_sync(dev, e1));
    int done = 0;
    CHECK_OK(ss_event_query(dev, e0, &done));
    CHECK(done == 1);
    double el = -1, t0 = -1, t1 = -1;
    CHECK_OK(ss_event_elapsed(dev, e0, e1, &el));
    CHECK_OK(ss_event_time(dev, e0, &t0));
    CHECK_OK(ss_event_time(dev, e1, &t1));
    CHECK(el >= 0 && t1 >= t0);
    CHECK(ss_device_now(dev) >= t1 - 1e-3 && t0 >= t_before - 1e-3);
    const ss_device_caps *c = ss_device_get_caps(dev);
    if (c->h2d_gbps > 0)   /* cpu-sim: the copy takes at least n / bandwidth */
        CHECK_MSG(el >= (double)n / (c->h2d_gbps * 1e9) * 0.99, "elapsed %g", el);
    CHECK_OK(ss_stream_free(dev, s));
    CHECK_OK(ss_event_free(dev, e0));
    CHECK_OK(ss_event_free(dev, e1));
    CHECK_OK(ss_mem_free(dev, d, n));
    CHECK_OK(ss_host_free(dev, h, n));
    CHECK_OK(ss_device_close(dev));
}

/* Forward thread and backward thread use the device at once (run under TSan in CI). */
enum { TT_N = 24, TT_BYTES = 64 << 10 };
typedef struct tt_arg {
    ss_device_t *dev;
    int dir;                   /* 0: forward (D2H), 1: backward (H2D) */
    int ok;
} tt_arg;

static void *tt_main(void *p) {
    tt_arg *a = p;
    ss_device_t *dev = a->dev;
    ss_stream_t *s;
    ss_event_t *e;
    void *d, *h1, *h2;
    a->ok = 0;
    if (ss_stream_new(dev, &s) || ss_event_new(dev, &e)) return NULL;
    if (ss_mem_alloc(dev, TT_BYTES, &d) || ss_host_alloc(dev, TT_BYTES, &h1) ||
        ss_host_alloc(dev, TT_BYTES, &h2)) return NULL;
    int good = 1;
    for (int i = 0; i < TT_N; i++) {
        fill(h1, TT_BYTES, (unsigned)(i + 10 * a->dir));
        ss_copy_async(dev, s, d, h1, TT_BYTES, SS_COPY_H2D);
        ss_copy_async(dev, s, h2, d, TT_BYTES, SS_COPY_D2H);
        ss_event_record(dev, e, s);
        int done = 0;
        ss_event_query(dev, e, &done);
        ss_event_sync(dev, e);
        good &= memcmp(h1, h2, TT_BYTES) == 0;
    }
    ss_stream_free(dev, s);
    ss_event_free(dev, e);
    ss_mem_free(dev, d, TT_BYTES);
    ss_host_free(dev, h1, TT_BYTES);
    ss_host_free(dev, h2, TT_BYTES);
    a->ok = good;
    return NULL;
}

static void t_two_threads(void) {
    ss_device_t *dev;
    OPEN_OR_SKIP(dev);
    pthread_t th[2];
    tt_arg args[2] = {{dev, 0, 0}, {dev, 1, 0}};
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, tt_main, &args[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(args[0].ok && args[1].ok);
    ss_device_stats st;
    CHECK_OK(ss_device_get_stats(dev, &st));
    CHECK_EQ_U64(st.copies[SS_COPY_H2D], 2 * TT_N);
    CHECK_EQ_U64(st.mem_bytes_in_use, 0);
    CHECK_OK(ss_device_close(dev));
}

static void t_compute(void) {
    ss_device_t *dev;
    OPEN_OR_SKIP(dev);
    ss_stream_t *s;
    CHECK_OK(ss_stream_new(dev, &s));
    CHECK_OK(ss_compute_async(dev, s, 0.001));
    /* the stream is occupied for the time asked (cuda: a spin kernel on the GPU's timer) */
    ss_event_t *a = NULL, *b = NULL;
    CHECK_OK(ss_event_new(dev, &a));
    CHECK_OK(ss_event_new(dev, &b));
    CHECK_OK(ss_event_record(dev, a, s));
    CHECK_OK(ss_compute_async(dev, s, 0.02));
    CHECK_OK(ss_event_record(dev, b, s));
    CHECK_OK(ss_stream_sync(dev, s));
    double el = 0;
    CHECK_OK(ss_event_elapsed(dev, a, b, &el));
    CHECK_MSG(el >= 0.0195, "a 20 ms compute took %.3f ms between its events", el * 1e3);
    CHECK_OK(ss_event_free(dev, a));
    CHECK_OK(ss_event_free(dev, b));
    CHECK_OK(ss_stream_free(dev, s));
    CHECK_OK(ss_device_close(dev));
}

/* SMARTSWAP_TEST_BACKEND=<label> (e.g. cuda): only that backend's conformance run, nothing
 * cpu-sim specific (scripts/cuda-emu-check.sh on the stand-in runtime). */
static const char *only;

static void run_conformance(void) {
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++) {
        cur = &backends[i];
        if (only && strcmp(only, cur->label)) continue;
        fprintf(stderr, "--- conformance: %s\n", cur->label);
        RUN(t_caps_and_memory);
        RUN(t_bad_input);
        RUN(t_copy_roundtrip);
        RUN(t_events_order_streams);
        RUN(t_event_times);
        RUN(t_two_threads);
        RUN(t_compute);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* cpu-sim specifics                                                                          */

static void t_sim_capacity(void) {
    ss_options o = sim_opts(0);
    o.sim_capacity_bytes = 1u << 20;
    ss_device_t *dev;
    CHECK_OK(ss_device_open("cpu-sim", &o, &dev));
    void *a, *b, *c;
    int e0 = log_errors;
    CHECK_STATUS(ss_mem_alloc(dev, (2u << 20), &a), SS_ERR_OOM);
    CHECK_OK(ss_mem_alloc(dev, 600u << 10, &a));
    CHECK_STATUS(ss_mem_alloc(dev, 600u << 10, &b), SS_ERR_OOM);
    CHECK(log_errors == e0);                           /* OOM is quiet */
    CHECK_OK(ss_mem_alloc(dev, 300u << 10, &b));
    CHECK_OK(ss_mem_free(dev, a, 600u << 10));
    CHECK_OK(ss_mem_alloc(dev, 600u << 10, &c));       /* the space came back */
    CHECK_OK(ss_mem_free(dev, b, 300u << 10));
    CHECK_OK(ss_mem_free(dev, c, 600u << 10));
    CHECK_OK(ss_mem_alloc(dev, 1000u << 10, &a));      /* coalesced into one range again */
    CHECK_OK(ss_mem_free(dev, a, 1000u << 10));
    uint64_t f, t;
    CHECK_OK(ss_device_mem_info(dev, &f, &t));
    CHECK_EQ_U64(f, t);
    CHECK_OK(ss_device_close(dev));
}

static void t_sim_guard(void) {
    ss_options o = sim_opts(0);
    ss_device_t *dev;
    CHECK_OK(ss_device_open("cpu-sim", &o, &dev));
    unsigned char *p;
    CHECK_OK(ss_mem_alloc(dev, 100, (void **)&p));
    memset(p, 0, 100);                                 /* in bounds: fine */
    CHECK_OK(ss_mem_free(dev, p, 100));
    CHECK_OK(ss_mem_alloc(dev, 100, (void **)&p));
    p[100] = 0;                                        /* one byte past the end */
    CHECK_STATUS(ss_mem_free(dev, p, 100), SS_ERR_CORRUPT);
    CHECK_STATUS(ss_mem_free(dev, p, 100), SS_ERR_STATE);   /* it was freed all the same */
    ss_device_stats st;
    CHECK_OK(ss_device_get_stats(dev, &st));
    CHECK_EQ_U64(st.guard_overruns, 1);
    CHECK_OK(ss_device_close(dev));
}

/* A read of a freed block yields the NaN pattern and is reported. */
static void t_sim_poison(void) {
    ss_options o = sim_opts(0);
    ss_device_t *dev;
    CHECK_OK(ss_device_open("cpu-sim", &o, &dev));
    const size_t n = 4096 * sizeof(float);
    float *d, *h;
    ss_stream_t *s;
    CHECK_OK(ss_stream_new(dev, &s));
    CHECK_OK(ss_mem_alloc(dev, n, (void **)&d));
    CHECK_OK(ss_host_alloc(dev, n, (void **)&h));
    size_t found = 99;
    CHECK_OK(ss_mem_check_poison(dev, d, n, &found));
    CHECK_EQ_U64(found, 0);                            /* fresh blocks are poisoned too */
    for (size_t i = 0; i < n / sizeof(float); i++) d[i] = 1.0f;
    CHECK_OK(ss_mem_check_poison(dev, d, n, &found));
    CHECK_EQ_U64(found, n);
    CHECK_OK(ss_copy_async(dev, s, h, d, n, SS_COPY_D2H));
    CHECK_OK(ss_stream_sync(dev, s));
    size_t words = 99;
    CHECK_OK(ss_poison_scan(dev, h, n, &words));       /* good data: nothing reported */
    CHECK_EQ_U64(words, 0);
    CHECK_OK(ss_mem_free(dev, d, n));
    /* an early read: copy the freed block back, as a swap-in issued too late would */
    CHECK_OK(ss_copy_async(dev, s, h, d, n, SS_COPY_D2H));
    CHECK_OK(ss_stream_sync(dev, s));
    CHECK(isnan(h[0]) && isnan(h[4095]));
    double sum = 0;
    for (size_t i = 0; i < n / sizeof(float); i++) sum += h[i];
    CHECK(isnan(sum));                                 /* any computation shows NaN */
    int w0 = log_warnings;
    CHECK_STATUS(ss_poison_scan(dev, h, n, &words), SS_ERR_CORRUPT);
    CHECK_EQ_U64(words, 4096);
    CHECK(log_warnings == w0 + 1);                     /* reported */
    ss_device_stats st;
    CHECK_OK(ss_device_get_stats(dev, &st));
    CHECK_EQ_U64(st.poison_hits, 1);
    CHECK_OK(ss_mem_check_poison(dev, d, n, &found));
    CHECK_EQ_U64(found, 0);
    /* swapped-out blocks: poison by hand, then a late write is found */
    CHECK_OK(ss_mem_alloc(dev, n, (void **)&d));
    d[5] = 2.0f;
    CHECK_OK(ss_mem_poison(dev, d, n));
    CHECK_OK(ss_mem_check_poison(dev, d, n, &found));
    CHECK_EQ_U64(found, 0);
    ((unsigned char *)d)[77] = 0;
    CHECK_OK(ss_mem_check_poison(dev, d, n, &found));
    CHECK_EQ_U64(found, 1);
    int local[4];
    CHECK_STATUS(ss_mem_poison(dev, local, sizeof local), SS_ERR_INVALID);  /* not device memory */
    CHECK_OK(ss_mem_free(dev, d, n));
    CHECK_OK(ss_host_free(dev, h, n));
    CHECK_OK(ss_stream_free(dev, s));
    CHECK_OK(ss_device_close(dev));
}

/* ss_mem_poison and ss_mem_check_poison on ranges of any start and length write and count
 * exactly the bytes of the pattern at their addresses (the word at every 4-aligned address). */
static void t_sim_poison_unaligned(void) {
    ss_options o = sim_opts(0);
    ss_device_t *dev;
    CHECK_OK(ss_device_open("cpu-sim", &o, &dev));
    const size_t n = 1024;
    unsigned char *d;
    CHECK_OK(ss_mem_alloc(dev, n, (void **)&d));
    uint32_t w = SS_POISON_WORD;
    unsigned char pb[4];
    memcpy(pb, &w, 4);
    int bad_fill = 0, bad_count = 0;
    for (size_t off = 0; off < 9; off++) {
        for (size_t len = 1; len <= 300 && off + len + 1 <= n; len += (len < 140 ? 1 : 37)) {
            memset(d, 0x11, n);
            CHECK_OK(ss_mem_poison(dev, d + off, len));
            for (size_t i = 0; i < n; i++) {
                unsigned char want = i >= off && i < off + len ? pb[(uintptr_t)(d + i) & 3] : 0x11;
                bad_fill += d[i] != want;
            }
            size_t found = 99;
            CHECK_OK(ss_mem_check_poison(dev, d + off, len, &found));
            bad_count += found != 0;
            /* spoil a few bytes (a seeded spread), and count over a range one wider each side */
            size_t spoiled = 0;
            for (size_t i = 0; i < len; i += 1 + (i * 7 + off) % 23) {
                d[off + i] ^= 0x40;
                spoiled++;
            }
            size_t lo = off ? off - 1 : 0, hi = off + len + 1;
            size_t want = spoiled + (off - lo) + (hi - off - len);   /* 0x11 is never poison */
            CHECK_OK(ss_mem_check_poison(dev, d + lo, hi - lo, &found));
            bad_count += found != want;
        }
    }
    CHECK_EQ_U64((uint64_t)bad_fill, 0);
    CHECK_EQ_U64((uint64_t)bad_count, 0);
    CHECK_OK(ss_mem_free(dev, d, n));
    CHECK_OK(ss_device_close(dev));
}

/* The host stream: work runs at once in the caller. */
static void t_sim_host_stream(void) {
    for (int virt = 0; virt < 2; virt++) {
        ss_options o = sim_opts(virt);
        ss_device_t *dev;
        CHECK_OK(ss_device_open("cpu-sim", &o, &dev));
        const size_t n = 1u << 20;
        ss_stream_t *hs, *a;
        ss_event_t *e;
        void *d, *h, *h2;
        CHECK_OK(ss_stream_wrap(dev, NULL, &hs));
        CHECK_STATUS(ss_stream_wrap(dev, (void *)&n, &a), SS_ERR_UNSUPPORTED);
        CHECK_OK(ss_stream_new(dev, &a));
        CHECK_OK(ss_event_new(dev, &e));
        CHECK_OK(ss_mem_alloc(dev, n, &d));
        CHECK_OK(ss_host_alloc(dev, n, &h));
        CHECK_OK(ss_host_alloc(dev, n, &h2));
        fill(h, n, 5);
        CHECK_OK(ss_copy_async(dev, hs, d, h, n, SS_COPY_H2D));
        CHECK(memcmp(d, h, n) == 0);                   /* done on return, no sync */
        double t0 = ss_device_now(dev);
        CHECK_OK(ss_compute_async(dev, hs, 0.02));
        double t1 = ss_device_now(dev);
        if (virt) CHECK_NEAR(t1 - t0, 0.02, 1e-12);
        else CHECK(t1 - t0 >= 0.0195);
        int done = 0;
        CHECK_OK(ss_event_record(dev, e, hs));
        CHECK_OK(ss_event_query(dev, e, &done));
        CHECK(done == 1);                              /* recording on the host marks "now" */
        /* waiting on the host stream blocks until a device stream's event completes */
        CHECK_OK(ss_copy_async(dev, a, h2, d, n, SS_COPY_D2H));
        CHECK_OK(ss_event_record(dev, e, a));
        CHECK_OK(ss_event_wait(dev, hs, e));
        CHECK_OK(ss_event_query(dev, e, &done));
        CHECK(done == 1);
        CHECK(memcmp(h2, h, n) == 0);
        CHECK_OK(ss_stream_free(dev, hs));
        CHECK_OK(ss_stream_free(dev, a));
        CHECK_OK(ss_event_free(dev, e));
        CHECK_OK(ss_mem_free(dev, d, n));
        CHECK_OK(ss_host_free(dev, h, n));
        CHECK_OK(ss_host_free(dev, h2, n));
        CHECK_OK(ss_device_close(dev));
    }
}

/* One scenario on the virtual clock; writes the event times into t[10]. */
static void virtual_scenario(uint64_t seed, double jitter_us, double t[10]) {
    ss_options o = sim_opts(1);
    o.sim_d2h_gbps = 1;
    o.sim_h2d_gbps = 2;
    o.sim_jitter_us = jitter_us;
    o.seed = seed;
    ss_device_t *dev;
    CHECK_OK(ss_device_open("cpu-sim", &o, &dev));
    const size_t n = 1000000;
    ss_stream_t *comp, *out, *in;
    ss_event_t *ev[10];
    void *d[2], *h;
    CHECK_OK(ss_stream_new(dev, &comp));
    CHECK_OK(ss_stream_new(dev, &out));
    CHECK_OK(ss_stream_new(dev, &in));
    for (int i = 0; i < 10; i++) CHECK_OK(ss_event_new(dev, &ev[i]));
    for (int i = 0; i < 2; i++) CHECK_OK(ss_mem_alloc(dev, n, &d[i]));
    CHECK_OK(ss_host_alloc(dev, 2 * n, &h));
    memset(h, 3, 2 * n);
    for (int i = 0; i < 2; i++) {          /* forward: compute, then swap out */
        CHECK_OK(ss_compute_async(dev, comp, 0.0007));
        CHECK_OK(ss_event_record(dev, ev[i], comp));
        CHECK_OK(ss_event_wait(dev, out, ev[i]));
        CHECK_OK(ss_copy_async(dev, out, (char *)h + (size_t)i * n, d[i], n, SS_COPY_D2H));
        CHECK_OK(ss_event_record(dev, ev[2 + i], out));
    }
    for (int i = 1; i >= 0; i--) {         /* backward: swap in after the swap-out, then compute */
        CHECK_OK(ss_event_wait(dev, in, ev[2 + i]));
        CHECK_OK(ss_copy_async(dev, in, d[i], (char *)h + (size_t)i * n, n, SS_COPY_H2D));
        CHECK_OK(ss_event_record(dev, ev[4 + i], in));
        CHECK_OK(ss_event_wait(dev, comp, ev[4 + i]));
        CHECK_OK(ss_compute_async(dev, comp, 0.0014));
        CHECK_OK(ss_event_record(dev, ev[6 + i], comp));
    }
    int done = 1;
    CHECK_OK(ss_event_query(dev, ev[6], &done));
    CHECK(done == 0);                      /* the host has not waited: not yet */
    CHECK_OK(ss_event_sync(dev, ev[6]));
    CHECK_OK(ss_event_query(dev, ev[6], &done));
    CHECK(done == 1);
    CHECK_OK(ss_stream_sync(dev, out));
    CHECK_OK(ss_stream_sync(dev, in));
    for (int i = 0; i < 8; i++) CHECK_OK(ss_event_time(dev, ev[i], &t[i]));
    t[8] = ss_device_now(dev);
    t[9] = 0;
    CHECK_OK(ss_stream_free(dev, comp));
    CHECK_OK(ss_stream_free(dev, out));
    CHECK_OK(ss_stream_free(dev, in));
    for (int i = 0; i < 10; i++) CHECK_OK(ss_event_free(dev, ev[i]));
    for (int i = 0; i < 2; i++) CHECK_OK(ss_mem_free(dev, d[i], n));
    CHECK_OK(ss_host_free(dev, h, 2 * n));
    CHECK_OK(ss_device_close(dev));
}

static void t_sim_virtual_deterministic(void) {
    double a[10], b[10], c[10], j1[10], j2[10], j3[10];
    virtual_scenario(1, 0, a);
    virtual_scenario(1, 0, b);
    virtual_scenario(2, 0, c);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) == 0);    /* no jitter: the seed does not matter */
    /* known values: compute 0.7 ms; D2H 1 MB at 1 GB/s + 5 us = 1.005 ms */
    CHECK_NEAR(a[0], 0.0007, 1e-12);
    CHECK_NEAR(a[2], 0.0007 + 0.001005, 1e-12);
    CHECK_NEAR(a[1], 0.0014, 1e-12);
    CHECK_NEAR(a[3], 0.0007 + 2 * 0.001005, 1e-12);   /* one D2H engine: queued behind the first */
    /* H2D 1 MB at 2 GB/s + 5 us = 0.505 ms, each after its swap-out */
    CHECK_NEAR(a[5], a[3] + 0.000505, 1e-12);
    CHECK_NEAR(a[4], a[5] + 0.000505, 1e-12);          /* FIFO on the in stream */
    CHECK_NEAR(a[7], a[5] + 0.0014, 1e-12);            /* backward compute waits for it */
    CHECK_NEAR(a[6], a[7] + 0.0014, 1e-12);
    CHECK_NEAR(a[8], a[6], 1e-12);                     /* the host waited for the last one */
    CHECK_NEAR(a[6], 0.006015, 1e-12);
    virtual_scenario(7, 50, j1);
    virtual_scenario(7, 50, j2);
    virtual_scenario(8, 50, j3);
    CHECK(memcmp(j1, j2, sizeof j1) == 0);             /* same seed, same jitter, same times */
    CHECK(memcmp(j1, a, sizeof a) != 0);
    CHECK(memcmp(j1, j3, sizeof a) != 0);
}

/* Virtual clock: a copy's bytes move at its end, as on the real clock. Before the host clock
 * reaches the end the destination still holds its old contents; a source poisoned before the
 * end lands as poison (what lets poisoning catch a block reused under its swap-out); copies
 * ordered one after another land in that order (an H2D after the D2H it waited for). */
static void t_sim_virtual_copy_lands_at_end(void) {
    ss_options o = sim_opts(1);
    ss_device_t *dev = NULL;
    CHECK_OK(ss_device_open("cpu-sim", &o, &dev));
    if (!dev) return;
    size_t n = 1u << 20;                     /* 1 MiB at 4 GB/s + 5 us: 267 us */
    void *d = NULL, *d2 = NULL;
    unsigned char *h = malloc(n), *h2 = malloc(n);
    CHECK_OK(ss_mem_alloc(dev, n, &d));
    CHECK_OK(ss_mem_alloc(dev, n, &d2));
    ss_stream_t *out = NULL, *in = NULL, *host = NULL;
    ss_event_t *e_out = NULL, *e_in = NULL;
    CHECK_OK(ss_stream_new(dev, &out));
    CHECK_OK(ss_stream_new(dev, &in));
    CHECK_OK(ss_stream_wrap(dev, NULL, &host));
    CHECK_OK(ss_event_new(dev, &e_out));
    CHECK_OK(ss_event_new(dev, &e_in));
    if (!h || !h2 || !d || !d2 || !out || !in || !host || !e_out || !e_in) return;
    memset(h, 0x11, n);
    memset(h2, 0x22, n);
    fill(d, n, 7);
    /* 1. the destination keeps its old bytes until the end; the source read at the end */
    CHECK_OK(ss_copy_async(dev, out, h, d, n, SS_COPY_D2H));
    CHECK_OK(ss_event_record(dev, e_out, out));
    int done = 1;
    CHECK_OK(ss_event_query(dev, e_out, &done));
    CHECK(!done);
    CHECK(h[0] == 0x11 && h[n - 1] == 0x11);          /* not landed yet */
    CHECK_OK(ss_event_sync(dev, e_out));
    CHECK(check(h, n, 7));                             /* landed at the end */
    /* 2. a source poisoned before the copy's end lands as poison */
    fill(d, n, 9);
    CHECK_OK(ss_copy_async(dev, out, h, d, n, SS_COPY_D2H));
    CHECK_OK(ss_event_record(dev, e_out, out));
    CHECK_OK(ss_mem_poison(dev, d, n));               /* "reused" before the copy ended */
    CHECK_OK(ss_event_sync(dev, e_out));
    uint32_t w;
    memcpy(&w, h, 4);
    CHECK_EQ_U64(w, SS_POISON_WORD);
    CHECK(!check(h, n, 9));
    /* 3. an H2D ordered after a D2H lands after it: the round trip carries the bytes */
    fill(d, n, 13);
    CHECK_OK(ss_copy_async(dev, out, h2, d, n, SS_COPY_D2H));
    CHECK_OK(ss_event_record(dev, e_out, out));
    CHECK_OK(ss_event_wait(dev, in, e_out));
    CHECK_OK(ss_copy_async(dev, in, d2, h2, n, SS_COPY_H2D));
    CHECK_OK(ss_event_record(dev, e_in, in));
    CHECK_OK(ss_event_wait(dev, host, e_in));         /* the host stream waits: clock moves */
    CHECK(check(d2, n, 13));
    CHECK(check(h2, n, 13));
    CHECK_OK(ss_stream_free(dev, out));
    CHECK_OK(ss_stream_free(dev, in));
    CHECK_OK(ss_stream_free(dev, host));
    CHECK_OK(ss_event_free(dev, e_out));
    CHECK_OK(ss_event_free(dev, e_in));
    CHECK_OK(ss_mem_free(dev, d, n));
    CHECK_OK(ss_mem_free(dev, d2, n));
    free(h);
    free(h2);
    CHECK_OK(ss_device_close(dev));
}

/* Real clock: copies in the two directions overlap each other and compute; two copies in the
 * same direction share one engine. A loaded machine can only make a run slower, never faster, so
 * the lower bounds hold on every attempt, and each "overlaps" bound is checked on the fastest of
 * up to three attempts: a device that serialised would miss it on all three. */
static double overlap_run(ss_device_t *dev, ss_stream_t *a, ss_stream_t *b, int kind, void *d1, void *d2,
                          void *h1, void *h2, size_t n, double one) {
    double t0 = wall();
    if (kind == 0) {          /* D2H on a, H2D on b */
        CHECK_OK(ss_copy_async(dev, a, h1, d1, n, SS_COPY_D2H));
        CHECK_OK(ss_copy_async(dev, b, d2, h2, n, SS_COPY_H2D));
    } else if (kind == 1) {   /* D2H on a and D2H on b */
        CHECK_OK(ss_copy_async(dev, a, h1, d1, n, SS_COPY_D2H));
        CHECK_OK(ss_copy_async(dev, b, h2, d2, n, SS_COPY_D2H));
    } else {                  /* compute on a, D2H on b */
        CHECK_OK(ss_compute_async(dev, a, one));
        CHECK_OK(ss_copy_async(dev, b, h1, d1, n, SS_COPY_D2H));
    }
    CHECK_OK(ss_stream_sync(dev, a));
    CHECK_OK(ss_stream_sync(dev, b));
    return wall() - t0;
}

static void t_sim_real_overlap(void) {
    ss_options o = sim_opts(0);
    o.sim_d2h_gbps = 0.008;
    o.sim_h2d_gbps = 0.008;
    ss_device_t *dev;
    CHECK_OK(ss_device_open("cpu-sim", &o, &dev));
    const size_t n = 384u << 10;           /* 49 ms each way */
    const double one = (double)n / 0.008e9;
    ss_stream_t *a, *b;
    void *d1, *d2, *h1, *h2;
    CHECK_OK(ss_stream_new(dev, &a));
    CHECK_OK(ss_stream_new(dev, &b));
    CHECK_OK(ss_mem_alloc(dev, n, &d1));
    CHECK_OK(ss_mem_alloc(dev, n, &d2));
    CHECK_OK(ss_host_alloc(dev, n, &h1));
    CHECK_OK(ss_host_alloc(dev, n, &h2));
    fill(h2, n, 9);
    const char *what[3] = {"two directions", "same direction", "compute + copy"};
    for (int kind = 0; kind < 3; kind++) {
        double best = 1e9;
        for (int attempt = 0; attempt < 3; attempt++) {
            double t = overlap_run(dev, a, b, kind, d1, d2, h1, h2, n, one);
            /* a copy of n bytes never ends before one; one engine per direction: serial */
            CHECK_MSG(t >= (kind == 1 ? 2 * one : one) * 0.95, "%s took %g s", what[kind], t);
            if (t < best) best = t;
            if (kind == 1 || best < 2 * one * 0.8) break;
        }
        if (kind != 1)
            CHECK_MSG(best < 2 * one * 0.8, "%s took %g s at best of 3, serial would be %g s", what[kind], best,
                      2 * one);
    }
    CHECK_OK(ss_stream_free(dev, a));
    CHECK_OK(ss_stream_free(dev, b));
    CHECK_OK(ss_mem_free(dev, d1, n));
    CHECK_OK(ss_mem_free(dev, d2, n));
    CHECK_OK(ss_host_free(dev, h1, n));
    CHECK_OK(ss_host_free(dev, h2, n));
    CHECK_OK(ss_device_close(dev));
}

/* Seeded jitter reorders completion across streams; data must still be right. */
static void t_sim_jitter(void) {
    ss_options o = sim_opts(0);
    o.sim_jitter_us = 300;
    o.seed = 1234;
    ss_device_t *dev;
    CHECK_OK(ss_device_open("cpu-sim", &o, &dev));
    enum { K = 16, N = 32 << 10 };
    ss_stream_t *in, *out;
    ss_event_t *ev[K];
    void *d[K];
    unsigned char *h, *back;
    CHECK_OK(ss_stream_new(dev, &in));
    CHECK_OK(ss_stream_new(dev, &out));
    CHECK_OK(ss_host_alloc(dev, (size_t)K * N, (void **)&h));
    CHECK_OK(ss_host_alloc(dev, (size_t)K * N, (void **)&back));
    fill(h, (size_t)K * N, 11);
    for (int i = 0; i < K; i++) {
        CHECK_OK(ss_event_new(dev, &ev[i]));
        CHECK_OK(ss_mem_alloc(dev, N, &d[i]));
        CHECK_OK(ss_copy_async(dev, in, d[i], h + (size_t)i * N, N, SS_COPY_H2D));
        CHECK_OK(ss_event_record(dev, ev[i], in));
        CHECK_OK(ss_event_wait(dev, out, ev[i]));
        CHECK_OK(ss_copy_async(dev, out, back + (size_t)i * N, d[i], N, SS_COPY_D2H));
    }
    CHECK_OK(ss_stream_sync(dev, out));
    CHECK(memcmp(h, back, (size_t)K * N) == 0);
    for (int i = 0; i < K; i++) {
        CHECK_OK(ss_event_free(dev, ev[i]));
        CHECK_OK(ss_mem_free(dev, d[i], N));
    }
    CHECK_OK(ss_stream_free(dev, in));
    CHECK_OK(ss_stream_free(dev, out));
    CHECK_OK(ss_host_free(dev, h, (size_t)K * N));
    CHECK_OK(ss_host_free(dev, back, (size_t)K * N));
    CHECK_OK(ss_device_close(dev));
}

static void t_device_list(void) {
    char buf[256], absent[512];
    CHECK_OK(ss_device_list(buf, sizeof buf, absent, sizeof absent));
    CHECK(strstr(buf, "cpu-sim") != NULL);
    ss_device_t *dev;
    ss_status st = ss_device_open("cuda", NULL, &dev);
    if (strstr(ss_build_features(), "cuda")) {
        if (st == SS_OK) {
            CHECK(strstr(buf, "cuda:0") != NULL);
            CHECK_OK(ss_device_close(dev));
        } else {
            CHECK_STATUS(st, SS_ERR_DEVICE);
            CHECK(strstr(absent, "cuda (no GPU") != NULL);
        }
    } else {
        CHECK_STATUS(st, SS_ERR_NOT_FOUND);
    }
    CHECK_STATUS(ss_device_open("cpu-sim:3", NULL, &dev), SS_ERR_NOT_FOUND);
}

/* Calibration with known numbers (docs/performance-model.md). */
static void t_calibration(void) {
    ss_calib_ref r = ss_calib_default();
    CHECK_NEAR(r.saved_bytes_per_token, 4915200.0, 1e-6);       /* 153600 B x 32 layers */
    CHECK_NEAR(r.flops_per_token, 6 * 6738415616.0 + 12.0 * 32 * 4096 * 4096, 1);
    CHECK_NEAR(r.device_flops, 593.4e12, 1);
    CHECK_NEAR(r.link_gbps, 55, 0);
    double ratio = (4915200.0 / 55e9) / ((6 * 6738415616.0 + 12.0 * 32 * 4096 * 4096) / 593.4e12);
    CHECK_NEAR(ratio, 1.1315, 0.001);                           /* the documented value */
    double g = 0, g2 = 0;
    CHECK_OK(ss_calib_bandwidth(&r, 1e9, 1.0, 1.0, &g));
    CHECK_NEAR(g, 1.0 / ratio, 1e-9);
    CHECK_OK(ss_calib_bandwidth(NULL, 1e9, 1.0, 2.0, &g2));    /* NULL: the default reference */
    CHECK_NEAR(g2, g / 2, 1e-9);
    /* the reference itself maps to its own link: one token's bytes, one token's compute */
    CHECK_OK(ss_calib_bandwidth(&r, r.saved_bytes_per_token, r.flops_per_token / r.device_flops,
                                1.0, &g));
    CHECK_NEAR(g, 55.0, 1e-9);
    CHECK_STATUS(ss_calib_bandwidth(&r, 0, 1, 1, &g), SS_ERR_INVALID);
    CHECK_STATUS(ss_calib_bandwidth(&r, 1, -1, 1, &g), SS_ERR_INVALID);
    CHECK_STATUS(ss_calib_bandwidth(&r, 1, 1, 0, &g), SS_ERR_INVALID);
    CHECK_STATUS(ss_calib_bandwidth(&r, 1, 1, 1, NULL), SS_ERR_INVALID);
    r.link_gbps = 0;
    CHECK_STATUS(ss_calib_bandwidth(&r, 1, 1, 1, &g), SS_ERR_INVALID);
}

int main(void) {
    ss_log_set(count_log, NULL, SS_LOG_DEBUG);
    only = getenv("SMARTSWAP_TEST_BACKEND");
    if (only && !*only) only = NULL;
    run_conformance();
    if (only) return test_summary();
    fprintf(stderr, "--- cpu-sim specifics\n");
    RUN(t_sim_capacity);
    RUN(t_sim_guard);
    RUN(t_sim_poison);
    RUN(t_sim_poison_unaligned);
    RUN(t_sim_host_stream);
    RUN(t_sim_virtual_deterministic);
    RUN(t_sim_virtual_copy_lands_at_end);
    RUN(t_sim_real_overlap);
    RUN(t_sim_jitter);
    fprintf(stderr, "--- cpu-sim specifics, stream threads (sim-threads)\n");
    g_threads = 1;
    RUN(t_sim_poison);
    RUN(t_sim_host_stream);
    RUN(t_sim_real_overlap);
    RUN(t_sim_jitter);
    g_threads = 0;
    RUN(t_device_list);
    RUN(t_calibration);
    return test_summary();
}
