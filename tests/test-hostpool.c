/* test-hostpool.c: the pinned host pool (src/hostpool.c) on cpu-sim: size classes, reuse, the
 * cap and its error, no new host allocations in a steady workload after warm-up, bad input,
 * threads.
 */
#include "smartswap-alloc.h"
#include "test.h"

#include <pthread.h>

#define KiB (1ull << 10)
#define MiB (1ull << 20)

static char last_log[512];
static void capture(void *user, ss_log_level lvl, const char *msg) {
    (void)user; (void)lvl;
    snprintf(last_log, sizeof last_log, "%s", msg);
}

static ss_device_t *open_sim(void) {
    ss_options o = ss_options_default();
    o.sim_capacity_bytes = 16 * MiB;
    o.sim_virtual_clock = 1;
    ss_device_t *d = NULL;
    if (ss_device_open("cpu-sim", &o, &d) != SS_OK) return NULL;
    return d;
}

static ss_hostpool_stats pstats(ss_hostpool_t *p) {
    ss_hostpool_stats s;
    memset(&s, 0, sizeof s);
    CHECK_OK(ss_hostpool_get_stats(p, &s));
    return s;
}

static void t_classes_and_reuse(void) {
    ss_device_t *d = open_sim();
    if (!d) { CHECK_MSG(0, "cannot open the embedded cpu-sim device"); return; }
    ss_hostpool_t *p;
    CHECK_OK(ss_hostpool_new(d, 0, &p));
    void *a, *b, *c;
    CHECK_OK(ss_hostpool_get(p, 1, &a));
    CHECK_EQ_U64(pstats(p).reserved_bytes, 4 * KiB);        /* smallest class */
    memset(a, 1, 4 * KiB);
    CHECK_OK(ss_hostpool_get(p, 5000, &b));                 /* 4 KiB + 1 KiB */
    CHECK_EQ_U64(pstats(p).reserved_bytes, 4 * KiB + 5 * KiB);
    memset(b, 2, 5 * KiB);
    CHECK_OK(ss_hostpool_get(p, 1000000, &c));              /* 2^19 < n <= 2^20: 1 MiB */
    CHECK_EQ_U64(pstats(p).reserved_bytes, 9 * KiB + 1 * MiB);
    memset(c, 3, 1000000);
    CHECK_OK(ss_hostpool_put(p, b));
    void *b2;
    CHECK_OK(ss_hostpool_get(p, 4500, &b2));                /* same class: reused */
    CHECK(b2 == b);
    ss_hostpool_stats s = pstats(p);
    CHECK_EQ_U64(s.host_allocs, 3);
    CHECK_EQ_U64(s.reuse_hits, 1);
    CHECK_EQ_U64(s.gets, 4);
    CHECK_EQ_U64(s.puts, 1);
    CHECK_EQ_U64(s.in_use_bytes, 9 * KiB + 1 * MiB);
    CHECK_STATUS(ss_hostpool_destroy(p), SS_ERR_STATE);   /* buffers out */
    CHECK_OK(ss_hostpool_put(p, a));
    CHECK_OK(ss_hostpool_put(p, b2));
    CHECK_OK(ss_hostpool_put(p, c));
    CHECK_EQ_U64(pstats(p).in_use_bytes, 0);
    CHECK_OK(ss_hostpool_destroy(p));
    ss_device_stats ds;
    CHECK_OK(ss_device_get_stats(d, &ds));
    CHECK_EQ_U64(ds.host_bytes_in_use, 0);
    CHECK_OK(ss_device_close(d));
}

/* Acceptance: after warm-up a repeated workload makes no new host allocations. */
static void t_steady_no_new_allocs(void) {
    ss_device_t *d = open_sim();
    if (!d) { CHECK_MSG(0, "cannot open the embedded cpu-sim device"); return; }
    ss_hostpool_t *p;
    CHECK_OK(ss_hostpool_new(d, 64 * MiB, &p));
    size_t sizes[12] = {4096, 6000, 100000, 2 * MiB, 2 * MiB, 768 * KiB, 3 * MiB + 1, 50, 12345,
                        1 * MiB, 1 * MiB, 900 * KiB};
    void *h[12];
    ss_device_stats d0, d1;
    uint64_t after_warmup = 0;
    for (int iter = 0; iter < 20; iter++) {
        if (iter == 3) {   /* warm-up: one pass of each size variant (iter % 3) */
            after_warmup = pstats(p).host_allocs;
            CHECK_OK(ss_device_get_stats(d, &d0));
        }
        for (int i = 0; i < 12; i++) CHECK_OK(ss_hostpool_get(p, sizes[(i + iter) % 12] + (size_t)iter % 3, &h[i]));
        for (int i = 11; i >= 0; i--) CHECK_OK(ss_hostpool_put(p, h[(i * 5) % 12]));
    }
    ss_hostpool_stats s = pstats(p);
    CHECK_OK(ss_device_get_stats(d, &d1));
    CHECK_EQ_U64(s.host_allocs, after_warmup);            /* the pool's counter */
    CHECK_EQ_U64(d1.host_allocs - d0.host_allocs, 0);     /* and the device's */
    CHECK_EQ_U64(s.reuse_hits, s.gets - s.host_allocs);
    CHECK_OK(ss_hostpool_destroy(p));
    CHECK_OK(ss_device_close(d));
}

static void t_cap(void) {
    ss_device_t *d = open_sim();
    if (!d) { CHECK_MSG(0, "cannot open the embedded cpu-sim device"); return; }
    ss_log_set(capture, NULL, SS_LOG_ERROR);
    ss_hostpool_t *p;
    CHECK_OK(ss_hostpool_new(d, 3 * MiB, &p));
    void *a, *b, *c = (void *)&c;
    CHECK_OK(ss_hostpool_get(p, 2 * MiB, &a));
    CHECK_STATUS(ss_hostpool_get(p, 2 * MiB, &c), SS_ERR_HOST_OOM);
    CHECK(c == (void *)&c);                                /* untouched */
    CHECK(strstr(last_log, "cap") != NULL);
    CHECK(strstr(last_log, "SMARTSWAP_HOST_MEM") != NULL);
    CHECK_EQ_U64(pstats(p).cap_errors, 1);
    CHECK_OK(ss_hostpool_put(p, a));
    /* the cached 2 MiB buffer is given back to make room for another class */
    CHECK_OK(ss_hostpool_get(p, 3 * MiB, &b));
    ss_hostpool_stats s = pstats(p);
    CHECK_EQ_U64(s.host_frees, 1);
    CHECK_EQ_U64(s.reserved_bytes, 3 * MiB);
    CHECK(s.reserved_bytes <= s.cap_bytes);
    CHECK_OK(ss_hostpool_put(p, b));
    CHECK_OK(ss_hostpool_destroy(p));
    ss_log_set(NULL, NULL, SS_LOG_ERROR);
    CHECK_OK(ss_device_close(d));
}

static void t_bad_input(void) {
    ss_device_t *d = open_sim();
    if (!d) { CHECK_MSG(0, "cannot open the embedded cpu-sim device"); return; }
    ss_hostpool_t *p, *q;
    CHECK_STATUS(ss_hostpool_new(NULL, 0, &p), SS_ERR_INVALID);
    CHECK_STATUS(ss_hostpool_new(d, 0, NULL), SS_ERR_INVALID);
    CHECK_OK(ss_hostpool_new(d, 0, &p));
    CHECK_OK(ss_hostpool_new(d, 0, &q));
    void *a, *b;
    CHECK_STATUS(ss_hostpool_get(p, 0, &a), SS_ERR_INVALID);
    CHECK_STATUS(ss_hostpool_get(p, 10, NULL), SS_ERR_INVALID);
    CHECK_STATUS(ss_hostpool_get(NULL, 10, &a), SS_ERR_INVALID);
    CHECK_STATUS(ss_hostpool_get(p, SIZE_MAX, &a), SS_ERR_INVALID);
    CHECK_STATUS(ss_hostpool_put(p, NULL), SS_ERR_INVALID);
    CHECK_OK(ss_hostpool_get(p, 10, &a));
    CHECK_OK(ss_hostpool_get(q, 10, &b));
    CHECK_STATUS(ss_hostpool_put(p, b), SS_ERR_STATE);       /* foreign */
    int junk;
    CHECK_STATUS(ss_hostpool_put(p, &junk), SS_ERR_STATE);
    CHECK_OK(ss_hostpool_put(p, a));
    CHECK_STATUS(ss_hostpool_put(p, a), SS_ERR_STATE);       /* twice */
    CHECK_STATUS(ss_hostpool_get_stats(p, NULL), SS_ERR_INVALID);
    CHECK_STATUS(ss_hostpool_destroy(NULL), SS_ERR_INVALID);
    CHECK_OK(ss_hostpool_put(q, b));
    CHECK_OK(ss_hostpool_destroy(p));
    CHECK_OK(ss_hostpool_destroy(q));
    CHECK_OK(ss_device_close(d));
}

typedef struct thr { ss_hostpool_t *p; int fails; uint64_t seed; } thr;
static void *worker(void *arg) {
    thr *t = arg;
    uint64_t x = t->seed;
    void *held[8] = {0};
    for (int i = 0; i < 4000; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int j = (int)(x % 8);
        if (held[j]) { if (ss_hostpool_put(t->p, held[j]) != SS_OK) t->fails++; held[j] = NULL; }
        else if (ss_hostpool_get(t->p, (size_t)(x >> 12) % (256 * KiB) + 1, &held[j]) != SS_OK) t->fails++;
        else memset(held[j], 0x5a, 1);
    }
    for (int j = 0; j < 8; j++) if (held[j] && ss_hostpool_put(t->p, held[j]) != SS_OK) t->fails++;
    return NULL;
}

static void t_threads(void) {
    ss_device_t *d = open_sim();
    if (!d) { CHECK_MSG(0, "cannot open the embedded cpu-sim device"); return; }
    ss_hostpool_t *p;
    CHECK_OK(ss_hostpool_new(d, 0, &p));
    pthread_t th[4];
    thr a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (thr){p, 0, 77u * (uint64_t)(i + 1)};
        pthread_create(&th[i], NULL, worker, &a[i]);
    }
    for (int i = 0; i < 4; i++) { pthread_join(th[i], NULL); CHECK_EQ_INT(a[i].fails, 0); }
    ss_hostpool_stats s = pstats(p);
    CHECK_EQ_U64(s.in_use_bytes, 0);
    CHECK_EQ_U64(s.gets, s.puts);
    CHECK_OK(ss_hostpool_destroy(p));
    CHECK_OK(ss_device_close(d));
}

int main(void) {
    RUN(t_classes_and_reuse);
    RUN(t_steady_no_new_allocs);
    RUN(t_cap);
    RUN(t_bad_input);
    RUN(t_threads);
    return test_summary();
}
