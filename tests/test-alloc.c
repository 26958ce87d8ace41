/* test-alloc.c: unit tests of the caching device allocator (src/alloc.c): alignment, best fit,
 * split and coalesce, segments and trim, budget and its clamp, the OOM path with the eviction
 * callback, deferred release at an operator index (measure mode and cpu-sim, counting event
 * queries on both sides), the stock record_stream emulation, stats, measure mode vs real mode on
 * the same requests, bad input, threads, and planner-scale speed.
 */
#include "smartswap-alloc.h"
#include "test.h"

#include <pthread.h>
#include <time.h>

#define MiB (1ull << 20)
#define KiB (1ull << 10)

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SLOW 10.0
#else
#define SLOW 1.0
#endif
#if defined(__SANITIZE_THREAD__)
#define EQ_OPS 1000           /* TSan instruments cpu-sim's poison fills: smaller and shorter */
#define EQ_SCALE 8
#else
#define EQ_OPS 4000
#define EQ_SCALE 1
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Log capture: the last message and a count, per level. */
static char last_log[512];
static int warn_count, error_count;
static void capture(void *user, ss_log_level lvl, const char *msg) {
    (void)user;
    if (lvl == SS_LOG_WARN) warn_count++;
    if (lvl == SS_LOG_ERROR) error_count++;
    snprintf(last_log, sizeof last_log, "%s", msg);
}

static ss_alloc_t *measure(uint64_t budget) {
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = budget;
    ss_alloc_t *a = NULL;
    CHECK_OK(ss_alloc_new(NULL, &c, &a));
    return a;
}

static ss_alloc_stats stats(ss_alloc_t *a) {
    ss_alloc_stats s;
    memset(&s, 0, sizeof s);
    CHECK_OK(ss_alloc_get_stats(a, &s));
    return s;
}

static ss_device_t *open_sim(uint64_t capacity, int virtual_clock) {
    ss_options o = ss_options_default();
    o.sim_capacity_bytes = capacity;
    o.sim_virtual_clock = virtual_clock;
    o.sim_d2h_gbps = 1.0;
    o.sim_h2d_gbps = 1.0;
    o.sim_jitter_us = 0;
    ss_device_t *d = NULL;
    if (ss_device_open("cpu-sim", &o, &d) != SS_OK) return NULL;
    return d;
}

static uint64_t dev_queries(ss_device_t *d) {
    ss_device_stats s;
    memset(&s, 0, sizeof s);
    CHECK_OK(ss_device_get_stats(d, &s));
    return s.event_queries;
}

/* ---- measure mode ---------------------------------------------------------------------- */

static void t_align_split_coalesce(void) {
    ss_alloc_t *a = measure(64 * MiB);
    ss_block_t *x, *y, *z, *w;
    CHECK_OK(ss_alloc_malloc(a, 1, &x));
    CHECK_OK(ss_alloc_malloc(a, 257, &y));
    CHECK_OK(ss_alloc_malloc(a, 256, &z));
    CHECK_EQ_U64(ss_block_size(x), 256);
    CHECK_EQ_U64(ss_block_size(y), 512);
    CHECK_EQ_U64(ss_block_offset(x), 0);
    CHECK_EQ_U64(ss_block_offset(y), 256);
    CHECK_EQ_U64(ss_block_offset(z), 768);
    CHECK(ss_block_ptr(x) == NULL);   /* measure mode: no device memory */
    ss_alloc_stats s = stats(a);
    CHECK_EQ_U64(s.segments, 1);
    CHECK_EQ_U64(s.reserved_bytes, 2 * MiB);
    CHECK_EQ_U64(s.in_use_bytes, 1024);
    CHECK_EQ_U64(s.cached_bytes, 2 * MiB - 1024);
    CHECK_EQ_U64(s.segment_allocs, 1);
    CHECK_EQ_U64(s.cache_hits, 2);
    CHECK_OK(ss_alloc_free(a, y));
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_malloc(a, 300, &w));             /* best fit: y's 512-byte hole */
    CHECK_EQ_U64(ss_block_offset(w), 256);
    CHECK_OK(ss_alloc_free(a, w));
    CHECK_OK(ss_alloc_free(a, x));
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_free(a, z));
    CHECK_OK(ss_alloc_check(a));                        /* one free block again: coalesced */
    s = stats(a);
    CHECK_EQ_U64(s.in_use_bytes, 0);
    CHECK_EQ_U64(s.cached_bytes, 2 * MiB);
    CHECK_EQ_U64(s.peak_in_use_bytes, 1024);
    CHECK_OK(ss_alloc_malloc(a, 2 * MiB, &x));          /* needs the whole segment: coalesced */
    CHECK_EQ_U64(ss_block_offset(x), 0);
    CHECK_EQ_U64(stats(a).segments, 1);
    CHECK_OK(ss_alloc_free(a, x));
    CHECK_OK(ss_alloc_trim(a));
    s = stats(a);
    CHECK_EQ_U64(s.reserved_bytes, 0);
    CHECK_EQ_U64(s.segment_frees, 1);
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_destroy(a));
}

static void t_best_fit(void) {
    ss_alloc_t *a = measure(0);
    ss_block_t *b[8], *h;
    uint64_t sz[8] = {1024, 256, 512, 256, 768, 256, 4096, 256};
    for (int i = 0; i < 8; i++) CHECK_OK(ss_alloc_malloc(a, sz[i], &b[i]));
    CHECK_OK(ss_alloc_free(a, b[0]));   /* holes: 1024 @0, 512 @1280, 768 @2048, 4096 @3072 */
    CHECK_OK(ss_alloc_free(a, b[2]));
    CHECK_OK(ss_alloc_free(a, b[4]));
    CHECK_OK(ss_alloc_free(a, b[6]));
    uint64_t off2 = ss_block_offset(b[1]) + 256, off4 = off2 + 512 + 256;
    CHECK_OK(ss_alloc_malloc(a, 600, &h));
    CHECK_EQ_U64(ss_block_offset(h), off4);              /* 768 is the best fit for 768 */
    ss_block_t *h2;
    CHECK_OK(ss_alloc_malloc(a, 512, &h2));
    CHECK_EQ_U64(ss_block_offset(h2), off2);
    ss_block_t *h3;
    CHECK_OK(ss_alloc_malloc(a, 1000, &h3));
    CHECK_EQ_U64(ss_block_offset(h3), 0);
    CHECK_OK(ss_alloc_check(a));
    ss_block_t *all[] = {h, h2, h3, b[1], b[3], b[5], b[7]};
    for (int i = 0; i < 7; i++) CHECK_OK(ss_alloc_free(a, all[i]));
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_destroy(a));
}

static void t_segments(void) {
    ss_alloc_t *a = measure(0);
    ss_block_t *big, *small;
    CHECK_OK(ss_alloc_malloc(a, 3 * MiB, &big));       /* own segment rounded to 4 MiB */
    ss_alloc_stats s = stats(a);
    CHECK_EQ_U64(s.reserved_bytes, 4 * MiB);
    CHECK_EQ_U64(s.cache_hits, 0);
    CHECK_OK(ss_alloc_malloc(a, 512 * KiB, &small));   /* the 1 MiB tail of that segment */
    CHECK_EQ_U64(ss_block_offset(small), 3 * MiB);
    CHECK_EQ_U64(stats(a).segments, 1);
    CHECK_OK(ss_alloc_free(a, big));
    CHECK_OK(ss_alloc_trim(a));                         /* not fully free: kept */
    CHECK_EQ_U64(stats(a).reserved_bytes, 4 * MiB);
    CHECK_OK(ss_alloc_free(a, small));
    CHECK_OK(ss_alloc_trim(a));
    CHECK_EQ_U64(stats(a).reserved_bytes, 0);
    CHECK_OK(ss_alloc_destroy(a));
}

static void t_budget_and_trim_on_oom(void) {
    ss_alloc_t *a = measure(4 * MiB);
    ss_block_t *x, *y, *z;
    CHECK_OK(ss_alloc_malloc(a, 1 * MiB, &x));         /* segment 1: 2 MiB */
    CHECK_OK(ss_alloc_free(a, x));                      /* cached */
    CHECK_OK(ss_alloc_malloc(a, 3 * MiB, &y));         /* needs the cached segment released */
    ss_alloc_stats s = stats(a);
    CHECK_EQ_U64(s.oom_trims, 1);
    CHECK_EQ_U64(s.segment_frees, 1);
    CHECK_EQ_U64(s.reserved_bytes, 4 * MiB);
    CHECK_EQ_U64(s.oom_errors, 0);
    z = (ss_block_t *)&s;                               /* untouched on failure */
    CHECK_STATUS(ss_alloc_malloc(a, 2 * MiB, &z), SS_ERR_OOM);
    CHECK(z == (ss_block_t *)&s);
    CHECK_STATUS(ss_alloc_malloc(a, 5 * MiB, &z), SS_ERR_OOM);   /* above the whole budget */
    CHECK_EQ_U64(stats(a).oom_errors, 2);
    CHECK_OK(ss_alloc_malloc(a, 1 * MiB, &z));         /* the tail still serves */
    CHECK(stats(a).reserved_bytes <= 4 * MiB);
    CHECK_OK(ss_alloc_free(a, z));
    CHECK_OK(ss_alloc_free(a, y));
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_destroy(a));

    /* a tight budget gets a segment of exactly the request */
    a = measure(3 * MiB);
    CHECK_OK(ss_alloc_malloc(a, 3 * MiB - 256, &x));
    CHECK_EQ_U64(stats(a).reserved_bytes, 3 * MiB - 256);
    CHECK_OK(ss_alloc_free(a, x));
    CHECK_OK(ss_alloc_destroy(a));
}

typedef struct evict_ctx { ss_alloc_t *a; ss_block_t *victim; int calls; int free_it; } evict_ctx;

static ss_status evict_cb(void *user, uint64_t need, uint64_t *freed) {
    evict_ctx *c = user;
    c->calls++;
    *freed = 0;
    if (!c->free_it || !c->victim) return SS_OK;
    uint64_t n = ss_block_size(c->victim);
    ss_status st = ss_alloc_free(c->a, c->victim);   /* the lock is released: allowed */
    if (st != SS_OK) return st;
    c->victim = NULL;
    *freed = n;
    (void)need;
    return SS_OK;
}

static void t_evict_turns_oom_into_success(void) {
    ss_alloc_t *a = measure(4 * MiB);
    ss_block_t *x, *y, *z = NULL;
    CHECK_OK(ss_alloc_malloc(a, 2 * MiB, &x));
    CHECK_OK(ss_alloc_malloc(a, 2 * MiB, &y));
    CHECK_STATUS(ss_alloc_malloc(a, 2 * MiB, &z), SS_ERR_OOM);    /* no callback yet */
    evict_ctx c = {a, x, 0, 0};
    ss_alloc_set_evict(a, evict_cb, &c);
    CHECK_STATUS(ss_alloc_malloc(a, 2 * MiB, &z), SS_ERR_OOM);    /* callback frees nothing */
    CHECK_EQ_INT(c.calls, 1);
    c.free_it = 1;
    CHECK_OK(ss_alloc_malloc(a, 2 * MiB, &z));                     /* now it evicts x */
    CHECK_EQ_INT(c.calls, 2);
    CHECK(c.victim == NULL);
    ss_alloc_stats s = stats(a);
    CHECK_EQ_U64(s.evict_calls, 2);
    CHECK_EQ_U64(s.oom_errors, 2);
    CHECK_EQ_U64(s.in_use_bytes, 4 * MiB);
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_free(a, y));
    CHECK_OK(ss_alloc_free(a, z));
    CHECK_OK(ss_alloc_destroy(a));
}

static void t_deferred_measure(void) {
    ss_alloc_t *a = measure(0);
    ss_block_t *b, *c, *d;
    double wu = -1;
    ss_alloc_set_time(a, 0.0);
    CHECK_OK(ss_alloc_malloc(a, 1 * MiB, &b));
    uint64_t off = ss_block_offset(b);
    CHECK_OK(ss_alloc_free_at(a, b, 5, NULL, 1.0));
    ss_alloc_stats s = stats(a);
    CHECK_EQ_U64(s.pending_bytes, 1 * MiB);
    CHECK_EQ_U64(s.in_use_bytes, 1 * MiB);
    CHECK_STATUS(ss_alloc_free(a, b), SS_ERR_STATE);   /* pending: not live */
    CHECK_OK(ss_alloc_reach(a, 4, NULL, &wu));
    CHECK_EQ_U64(stats(a).pending_blocks, 1);           /* not before k */
    CHECK_OK(ss_alloc_malloc(a, 1 * MiB, &c));
    CHECK(ss_block_offset(c) != off);
    CHECK_EQ_U64(stats(a).event_queries, 0);            /* nothing on the allocation path */
    ss_alloc_set_time(a, 2.0);
    CHECK_OK(ss_alloc_reach(a, 5, NULL, &wu));
    s = stats(a);
    CHECK_EQ_U64(s.pending_blocks, 0);
    CHECK_EQ_U64(s.deferred_releases, 1);
    CHECK_EQ_U64(s.event_queries, 1);
    CHECK_EQ_U64(s.waits, 0);
    CHECK(wu == 0.0);
    ss_alloc_set_time(a, 2.5);
    CHECK_OK(ss_alloc_malloc(a, 1 * MiB, &d));          /* b's memory, 1.5 s after its copy */
    CHECK_EQ_U64(ss_block_offset(d), off);
    s = stats(a);
    CHECK_EQ_U64(s.reuse_count, 1);
    CHECK_NEAR(s.reuse_total_s, 1.5, 1e-12);
    CHECK_NEAR(s.reuse_max_s, 1.5, 1e-12);
    CHECK_EQ_U64(s.event_queries, 1);
    /* late: a copy completing at 10 s, reached at 3 s: one wait, the simulator stalls to 10 */
    ss_alloc_set_time(a, 3.0);
    CHECK_OK(ss_alloc_free_at(a, d, 7, NULL, 10.0));
    CHECK_OK(ss_alloc_free_at(a, c, 6, NULL, 2.0));
    CHECK_OK(ss_alloc_reach(a, 8, NULL, &wu));
    s = stats(a);
    CHECK_EQ_U64(s.event_queries, 3);
    CHECK_EQ_U64(s.waits, 1);
    CHECK_NEAR(wu, 10.0, 0);
    CHECK_OK(ss_alloc_check(a));
    /* a k already passed is released at the next reach */
    CHECK_OK(ss_alloc_malloc(a, 256, &b));
    CHECK_OK(ss_alloc_free_at(a, b, 2, NULL, 0.0));
    CHECK_EQ_U64(stats(a).pending_blocks, 1);
    CHECK_OK(ss_alloc_reach(a, 8, NULL, NULL));
    CHECK_EQ_U64(stats(a).pending_blocks, 0);
    CHECK_OK(ss_alloc_destroy(a));
}

static void t_deferred_order(void) {
    /* many blocks at many indices: each released exactly at its k */
    ss_alloc_t *a = measure(0);
    ss_block_t *b[64];
    for (int i = 0; i < 64; i++) CHECK_OK(ss_alloc_malloc(a, 4096, &b[i]));
    for (int i = 0; i < 64; i++) CHECK_OK(ss_alloc_free_at(a, b[i], (uint64_t)((i * 37) % 64), NULL, 0));
    for (uint64_t k = 0; k < 64; k++) {
        CHECK_OK(ss_alloc_reach(a, k, NULL, NULL));
        CHECK_EQ_U64(stats(a).pending_blocks, 63 - k);
        CHECK_EQ_U64(stats(a).deferred_releases, k + 1);
    }
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_destroy(a));
}

static void t_stock_measure(void) {
    ss_alloc_t *a = measure(0);
    ss_block_t *b[3], *x;
    for (int i = 0; i < 3; i++) CHECK_OK(ss_alloc_malloc(a, 64 * KiB, &b[i]));
    for (int i = 0; i < 3; i++) CHECK_OK(ss_alloc_free_stock(a, b[i], NULL, 1.0 + i));
    CHECK_EQ_U64(stats(a).event_queries, 0);
    ss_alloc_set_time(a, 1.5);
    CHECK_OK(ss_alloc_malloc(a, 256, &x));   /* polls: 1st ready, 2nd not: 2 queries */
    ss_alloc_stats s = stats(a);
    CHECK_EQ_U64(s.event_queries, 2);
    CHECK_EQ_U64(s.pending_blocks, 2);
    CHECK_EQ_U64(s.reuse_count, 1);          /* x came out of b[0]'s memory at 1.5 */
    CHECK_NEAR(s.reuse_total_s, 0.5, 1e-12);
    CHECK_OK(ss_alloc_free(a, x));
    ss_alloc_set_time(a, 1.7);
    CHECK_OK(ss_alloc_malloc(a, 256, &x));   /* head still not ready: 1 query */
    CHECK_EQ_U64(stats(a).event_queries, 3);
    CHECK_OK(ss_alloc_free(a, x));
    ss_alloc_set_time(a, 5.0);
    CHECK_OK(ss_alloc_malloc(a, 256, &x));   /* both ready: 2 queries, queue empty */
    s = stats(a);
    CHECK_EQ_U64(s.event_queries, 5);
    CHECK_EQ_U64(s.pending_blocks, 0);
    CHECK_OK(ss_alloc_free(a, x));
    CHECK_OK(ss_alloc_malloc(a, 256, &x));   /* nothing pending: no query */
    CHECK_EQ_U64(stats(a).event_queries, 5);
    CHECK_OK(ss_alloc_free(a, x));
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_destroy(a));

    /* release_mode STOCK: free_at behaves as free_stock; OOM syncs the pending events */
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 2 * MiB;
    c.release_mode = SS_RELEASE_MODE_STOCK;
    CHECK_OK(ss_alloc_new(NULL, &c, &a));
    CHECK_OK(ss_alloc_malloc(a, 2 * MiB, &x));
    CHECK_OK(ss_alloc_free_at(a, x, 1000, NULL, 9.0));
    CHECK_EQ_U64(stats(a).pending_blocks, 1);
    CHECK_OK(ss_alloc_reach(a, 2000, NULL, NULL));      /* not in the deferred heap */
    CHECK_EQ_U64(stats(a).pending_blocks, 1);
    ss_alloc_set_time(a, 1.0);
    CHECK_OK(ss_alloc_malloc(a, 2 * MiB, &x));          /* poll: not ready; OOM: sync it */
    s = stats(a);
    CHECK_EQ_U64(s.event_queries, 1);
    CHECK_EQ_U64(s.waits, 1);
    CHECK_EQ_U64(s.oom_trims, 1);
    CHECK_OK(ss_alloc_free(a, x));
    CHECK_OK(ss_alloc_destroy(a));
}

static void t_stats_format(void) {
    ss_alloc_t *a = measure(8 * MiB);
    ss_block_t *x;
    CHECK_OK(ss_alloc_malloc(a, 1000, &x));
    ss_alloc_stats s = stats(a);
    char buf[2048];
    CHECK_OK(ss_alloc_stats_format(&s, buf, sizeof buf));
    CHECK(strstr(buf, "peak in use") != NULL);
    CHECK(strstr(buf, "event queries") != NULL);
    CHECK(strstr(buf, "reuse interval") != NULL);
    CHECK(strstr(buf, "8.00 MiB") != NULL);
    CHECK_STATUS(ss_alloc_stats_format(&s, buf, 10), SS_ERR_INVALID);   /* truncated */
    CHECK(strlen(buf) < 10);
    CHECK_STATUS(ss_alloc_stats_format(NULL, buf, sizeof buf), SS_ERR_INVALID);
    CHECK_OK(ss_alloc_free(a, x));
    CHECK_OK(ss_alloc_destroy(a));
}

static void t_bad_input(void) {
    ss_alloc_t *a = measure(0), *other = measure(0);
    ss_block_t *x = NULL, *y = NULL;
    ss_alloc_config c = ss_alloc_config_default();
    c.segment_bytes = 1000;
    CHECK_STATUS(ss_alloc_new(NULL, &c, NULL), SS_ERR_INVALID);
    ss_alloc_t *bad = NULL;
    CHECK_STATUS(ss_alloc_new(NULL, &c, &bad), SS_ERR_INVALID);
    c = ss_alloc_config_default();
    c.release_mode = 7;
    CHECK_STATUS(ss_alloc_new(NULL, &c, &bad), SS_ERR_INVALID);
    CHECK(bad == NULL);
    CHECK_STATUS(ss_alloc_malloc(a, 0, &x), SS_ERR_INVALID);
    CHECK_STATUS(ss_alloc_malloc(NULL, 16, &x), SS_ERR_INVALID);
    CHECK_STATUS(ss_alloc_malloc(a, 16, NULL), SS_ERR_INVALID);
    CHECK_STATUS(ss_alloc_malloc(a, SIZE_MAX, &x), SS_ERR_INVALID);
    CHECK(x == NULL);
    CHECK_STATUS(ss_alloc_free(a, NULL), SS_ERR_INVALID);
    CHECK_STATUS(ss_alloc_free(NULL, x), SS_ERR_INVALID);
    CHECK_OK(ss_alloc_malloc(a, 16, &x));
    CHECK_OK(ss_alloc_malloc(other, 16, &y));
    CHECK_STATUS(ss_alloc_free(a, y), SS_ERR_STATE);            /* foreign block */
    CHECK_STATUS(ss_alloc_free_at(a, y, 1, NULL, 0), SS_ERR_STATE);
    CHECK_STATUS(ss_alloc_free_event(a, y, NULL), SS_ERR_STATE);
    long stack_junk[16] = {0};
    CHECK_STATUS(ss_alloc_free(a, (ss_block_t *)stack_junk), SS_ERR_STATE);   /* not a block */
    CHECK_STATUS(ss_alloc_free(a, (ss_block_t *)((char *)x + 8)), SS_ERR_STATE); /* inside one */
    CHECK_STATUS(ss_alloc_destroy(a), SS_ERR_STATE);            /* live block: nothing freed */
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_free(a, x));
    CHECK_STATUS(ss_alloc_free(a, x), SS_ERR_STATE);            /* double free */
    CHECK_STATUS(ss_alloc_free_at(a, x, 3, NULL, 0), SS_ERR_STATE);
    /* a stale handle stays detected while the memory is handed out again many times */
    for (int i = 0; i < 200; i++) {
        ss_block_t *t;
        CHECK_OK(ss_alloc_malloc(a, 16 + (size_t)i * 256, &t));
        CHECK_OK(ss_alloc_free(a, t));
    }
    CHECK_STATUS(ss_alloc_free(a, x), SS_ERR_STATE);
    CHECK_OK(ss_alloc_check(a));
    CHECK_STATUS(ss_alloc_reach(NULL, 1, NULL, NULL), SS_ERR_INVALID);
    CHECK_STATUS(ss_alloc_get_stats(a, NULL), SS_ERR_INVALID);
    CHECK_STATUS(ss_alloc_destroy(NULL), SS_ERR_INVALID);
    CHECK_STATUS(ss_alloc_check(NULL), SS_ERR_INVALID);
    ss_alloc_set_time(NULL, 1.0);                                /* no-ops */
    ss_alloc_set_evict(NULL, NULL, NULL);
    CHECK_OK(ss_alloc_destroy(a));
    /* pending blocks also keep destroy from freeing; destroy_force reclaims */
    CHECK_OK(ss_alloc_free_at(other, y, 5, NULL, 0));
    CHECK_STATUS(ss_alloc_destroy(other), SS_ERR_STATE);
    CHECK_OK(ss_alloc_malloc(other, 100, &y));
    CHECK_OK(ss_alloc_destroy_force(other));
}

typedef struct thr_arg { ss_alloc_t *a; uint64_t seed; int fails; } thr_arg;

static void *thr_main(void *p) {
    thr_arg *t = p;
    ss_block_t *held[16] = {0};
    uint64_t x = t->seed;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int j = (int)(x % 16);
        if (held[j]) {
            if (ss_alloc_free(t->a, held[j]) != SS_OK) t->fails++;
            held[j] = NULL;
        } else if (ss_alloc_malloc(t->a, (size_t)(x >> 20) % (64 * KiB) + 1, &held[j]) != SS_OK) {
            t->fails++;
        }
    }
    for (int j = 0; j < 16; j++)
        if (held[j] && ss_alloc_free(t->a, held[j]) != SS_OK) t->fails++;
    return NULL;
}

static void t_threads(void) {
    ss_alloc_t *a = measure(0);
    pthread_t th[4];
    thr_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thr_arg){a, 0x1234567ull * (uint64_t)(i + 1), 0};
        pthread_create(&th[i], NULL, thr_main, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(args[i].fails, 0);
    }
    CHECK_OK(ss_alloc_check(a));
    CHECK_EQ_U64(stats(a).in_use_bytes, 0);
    CHECK_OK(ss_alloc_destroy(a));
}

/* The planner's use: ~100k operators, each an allocation, a deferred free, a reach. */
static void t_planner_speed(void) {
    ss_alloc_t *a = measure(0);
    uint64_t x = 42;
    int fails = 0;
    double t0 = now_s();
    enum { N = 100000, LIVE = 512 };
    static ss_block_t *ring[LIVE];
    for (uint64_t k = 0; k < N; k++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        ss_alloc_set_time(a, (double)k * 1e-4);
        size_t n = (x % 8 == 0) ? (size_t)(x >> 8) % (64 * MiB) + 1 : (size_t)(x >> 8) % (256 * KiB) + 1;
        ss_block_t **slot = &ring[k % LIVE];
        if (*slot && ss_alloc_free_at(a, *slot, k + 3, NULL, (double)(k + 2) * 1e-4) != SS_OK) fails++;
        *slot = NULL;
        if (ss_alloc_malloc(a, n, slot) != SS_OK) { fails++; break; }
        if (ss_alloc_reach(a, k, NULL, NULL) != SS_OK) fails++;
    }
    CHECK_EQ_INT(fails, 0);
    double dt = now_s() - t0;
    printf("planner-scale: %d operators (malloc + free_at + reach) in %.3f s\n", N, dt);
    CHECK_MSG(dt < 1.0 * SLOW, "%.3f s", dt);
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_destroy_force(a));
}

/* ---- real mode on cpu-sim ---------------------------------------------------------------- */

static void t_real_basic_and_clamp(void) {
    ss_device_t *d = open_sim(64 * MiB, 1);
    if (!d) { CHECK_MSG(0, "cannot open the embedded cpu-sim device"); return; }
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 1ull << 40;                /* above the capacity: clamped, warned */
    ss_alloc_t *a;
    warn_count = 0;
    CHECK_OK(ss_alloc_new(d, &c, &a));
    CHECK_EQ_INT(warn_count, 1);
    CHECK(strstr(last_log, "clamped") != NULL);
    ss_alloc_stats s = stats(a);
    CHECK_EQ_U64(s.budget_bytes, ss_device_get_caps(d)->total_bytes);
    ss_block_t *x, *y;
    CHECK_OK(ss_alloc_malloc(a, 1000, &x));
    CHECK_OK(ss_alloc_malloc(a, 3000, &y));
    CHECK(ss_block_ptr(x) != NULL);
    CHECK_EQ_U64((uintptr_t)ss_block_ptr(x) % SS_ALLOC_ALIGN, 0);
    CHECK_EQ_U64((uintptr_t)ss_block_ptr(y) % SS_ALLOC_ALIGN, 0);
    CHECK((char *)ss_block_ptr(y) == (char *)ss_block_ptr(x) + 1024);
    memset(ss_block_ptr(x), 1, 1024);           /* real memory */
    memset(ss_block_ptr(y), 2, 3072);
    ss_device_stats ds;
    CHECK_OK(ss_device_get_stats(d, &ds));
    CHECK_EQ_U64(ds.mem_allocs, 1);             /* one segment serves both */
    CHECK_STATUS(ss_device_close(d), SS_ERR_STATE);   /* allocator still holds memory */
    CHECK_OK(ss_alloc_free(a, x));
    CHECK_OK(ss_alloc_free(a, y));
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_destroy(a));
    CHECK_OK(ss_device_get_stats(d, &ds));
    CHECK_EQ_U64(ds.mem_frees, 1);
    CHECK_EQ_U64(ds.mem_bytes_in_use, 0);
    CHECK_OK(ss_device_close(d));
}

/* Acceptance: deferred release hands the block out at k and not before, with exactly one event
 * query when the copy has finished, and none on allocations. */
static void t_real_deferred(void) {
    ss_device_t *d = open_sim(64 * MiB, 1);
    if (!d) { CHECK_MSG(0, "cannot open the embedded cpu-sim device"); return; }
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 16 * MiB;
    ss_alloc_t *a;
    CHECK_OK(ss_alloc_new(d, &c, &a));
    ss_stream_t *copy, *compute;
    ss_event_t *ev, *ev2;
    void *host;
    CHECK_OK(ss_stream_new(d, &copy));
    CHECK_OK(ss_stream_wrap(d, NULL, &compute));
    CHECK_OK(ss_event_new(d, &ev));
    CHECK_OK(ss_event_new(d, &ev2));
    CHECK_OK(ss_host_alloc(d, 1 * MiB, &host));
    ss_block_t *b, *o;
    CHECK_OK(ss_alloc_malloc(a, 1 * MiB, &b));
    void *p = ss_block_ptr(b);
    memset(p, 3, 1 * MiB);
    CHECK_OK(ss_copy_async(d, copy, host, p, 1 * MiB, SS_COPY_D2H));   /* the swap-out */
    CHECK_OK(ss_event_record(d, ev, copy));
    CHECK_OK(ss_alloc_free_at(a, b, 10, ev, 0));
    uint64_t q0 = dev_queries(d);
    for (uint64_t k = 0; k < 10; k++) {              /* before k: never handed out */
        CHECK_OK(ss_alloc_reach(a, k, compute, NULL));
        CHECK_OK(ss_alloc_malloc(a, 1 * MiB, &o));
        CHECK(ss_block_ptr(o) != p);
        CHECK_OK(ss_alloc_free(a, o));
    }
    CHECK_EQ_U64(dev_queries(d) - q0, 0);            /* zero queries on 10 allocations */
    CHECK_EQ_U64(stats(a).event_queries, 0);
    CHECK_OK(ss_event_sync(d, ev));                  /* the copy has finished */
    q0 = dev_queries(d);
    CHECK_OK(ss_alloc_reach(a, 10, compute, NULL));
    CHECK_EQ_U64(dev_queries(d) - q0, 1);            /* exactly one query */
    ss_alloc_stats s = stats(a);
    CHECK_EQ_U64(s.event_queries, 1);
    CHECK_EQ_U64(s.waits, 0);
    CHECK_EQ_U64(s.deferred_releases, 1);
    /* handed out at k: the best fit for 1 MiB is b's memory again */
    ss_block_t *c2, *c3;
    double t_hand0 = ss_device_now(d);
    CHECK_OK(ss_alloc_malloc(a, 1 * MiB, &c2));
    double t_hand1 = ss_device_now(d);
    CHECK(ss_block_ptr(c2) == p);
    CHECK_EQ_U64(dev_queries(d) - q0, 1);
    CHECK_EQ_U64(stats(a).reuse_count, 1);
    /* the one interval runs from the copy's completion (its event's time) to this hand-out */
    double t_done = 0;
    CHECK_OK(ss_event_time(d, ev, &t_done));
    CHECK_MSG(stats(a).reuse_total_s >= t_hand0 - t_done - 1e-9 && stats(a).reuse_total_s <= t_hand1 - t_done + 1e-9 &&
              stats(a).reuse_max_s == stats(a).reuse_total_s, "reuse %.9f s, copy done at %.9f, handed out in [%.9f, %.9f]",
              stats(a).reuse_total_s, t_done, t_hand0, t_hand1);
    /* late copy: at k the query says "not done", the compute stream waits (no host polling) */
    CHECK_OK(ss_copy_async(d, copy, host, ss_block_ptr(c2), 1 * MiB, SS_COPY_D2H));
    CHECK_OK(ss_event_record(d, ev2, copy));
    CHECK_OK(ss_alloc_free_at(a, c2, 11, ev2, 0));
    ss_device_stats ds0, ds1;
    CHECK_OK(ss_device_get_stats(d, &ds0));
    CHECK_OK(ss_alloc_reach(a, 11, compute, NULL));
    CHECK_OK(ss_device_get_stats(d, &ds1));
    CHECK_EQ_U64(ds1.event_queries - ds0.event_queries, 1);
    CHECK_EQ_U64(ds1.event_waits - ds0.event_waits, 1);
    CHECK_EQ_U64(ds1.event_syncs - ds0.event_syncs, 0);
    s = stats(a);
    CHECK_EQ_U64(s.event_queries, 2);
    CHECK_EQ_U64(s.waits, 1);
    CHECK_OK(ss_alloc_malloc(a, 1 * MiB, &c3));
    CHECK(ss_block_ptr(c3) == p);
    CHECK_OK(ss_alloc_free(a, c3));
    CHECK_OK(ss_stream_sync(d, copy));
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_destroy(a));
    CHECK_OK(ss_host_free(d, host, 1 * MiB));
    CHECK_OK(ss_event_free(d, ev));
    CHECK_OK(ss_event_free(d, ev2));
    CHECK_OK(ss_stream_free(d, copy));
    CHECK_OK(ss_stream_free(d, compute));
    CHECK_OK(ss_device_close(d));
}

static void t_real_stock(void) {
    ss_device_t *d = open_sim(64 * MiB, 1);
    if (!d) { CHECK_MSG(0, "cannot open the embedded cpu-sim device"); return; }
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 16 * MiB;
    c.release_mode = SS_RELEASE_MODE_STOCK;
    ss_alloc_t *a;
    CHECK_OK(ss_alloc_new(d, &c, &a));
    ss_stream_t *copy;
    ss_event_t *ev;
    void *host;
    CHECK_OK(ss_stream_new(d, &copy));
    CHECK_OK(ss_event_new(d, &ev));
    CHECK_OK(ss_host_alloc(d, 1 * MiB, &host));
    ss_block_t *b, *o;
    CHECK_OK(ss_alloc_malloc(a, 1 * MiB, &b));
    void *p = ss_block_ptr(b);
    CHECK_OK(ss_copy_async(d, copy, host, p, 1 * MiB, SS_COPY_D2H));
    CHECK_OK(ss_event_record(d, ev, copy));
    CHECK_OK(ss_alloc_free_event(a, b, ev));
    uint64_t q0 = dev_queries(d);
    CHECK_OK(ss_alloc_malloc(a, 1 * MiB, &o));       /* polls: not ready (virtual clock) */
    CHECK(ss_block_ptr(o) != p);
    CHECK_EQ_U64(dev_queries(d) - q0, 1);
    CHECK_OK(ss_alloc_free(a, o));
    CHECK_OK(ss_event_sync(d, ev));
    CHECK_OK(ss_alloc_malloc(a, 1 * MiB, &o));       /* polls: ready, released, reused */
    CHECK_EQ_U64(dev_queries(d) - q0, 2);
    CHECK(ss_block_ptr(o) == p);
    ss_alloc_stats s = stats(a);
    CHECK_EQ_U64(s.event_queries, 2);
    CHECK_EQ_U64(s.reuse_count, 1);
    CHECK_OK(ss_alloc_free(a, o));
    CHECK_OK(ss_alloc_malloc(a, 256, &o));           /* nothing pending: no query */
    CHECK_EQ_U64(dev_queries(d) - q0, 2);
    CHECK_OK(ss_alloc_free(a, o));
    CHECK_OK(ss_alloc_destroy(a));
    CHECK_OK(ss_host_free(d, host, 1 * MiB));
    CHECK_OK(ss_event_free(d, ev));
    CHECK_OK(ss_stream_free(d, copy));
    CHECK_OK(ss_device_close(d));
}

/* Acceptance: measure mode and real mode give the same peak on the same requests (and the
 * same offsets), including fragmentation-heavy sequences that trim and evict. */
static void run_sequence(ss_alloc_t *a, uint64_t seed, uint64_t *offs, size_t nops, int *fails) {
    ss_block_t *held[48] = {0};
    uint64_t x = seed;
    for (size_t i = 0; i < nops; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int j = (int)(x % 48);
        offs[i] = UINT64_MAX;
        if (held[j]) {
            if (x & 0x100) {
                if (ss_alloc_free(a, held[j]) != SS_OK) (*fails)++;
            } else {
                if (ss_alloc_free_at(a, held[j], i + (x >> 9) % 8, NULL, 0) != SS_OK) (*fails)++;
            }
            held[j] = NULL;
        } else {
            /* fragmentation-heavy: sizes from 256 B to 6 MiB, small ones between big ones */
            size_t n = (x >> 12) % 4 == 0 ? (size_t)((x >> 16) % (6 * MiB / EQ_SCALE)) + 1
                                           : (size_t)((x >> 16) % (96 * KiB / EQ_SCALE)) + 1;
            ss_status st = ss_alloc_malloc(a, n, &held[j]);
            if (st == SS_OK) offs[i] = ss_block_offset(held[j]);
            else if (st == SS_ERR_OOM) { offs[i] = UINT64_MAX - 1; held[j] = NULL; }
            else (*fails)++;
        }
        ss_alloc_reach(a, i, NULL, NULL);
        if (i % 97 == 0) ss_alloc_trim(a);
    }
    for (int j = 0; j < 48; j++) if (held[j]) ss_alloc_free(a, held[j]);
    ss_alloc_reach(a, UINT64_MAX, NULL, NULL);
}

static void t_measure_equals_real(void) {
    ss_device_t *d = open_sim(256 * MiB, 1);
    if (!d) { CHECK_MSG(0, "cannot open the embedded cpu-sim device"); return; }
    enum { N = EQ_OPS };
    static uint64_t om[N], orl[N];
    for (uint64_t seed = 1; seed <= 3; seed++) {
        ss_alloc_config c = ss_alloc_config_default();
        c.budget_bytes = 48 * MiB / EQ_SCALE;
        c.segment_bytes = (seed == 2 ? 20 * MiB : 2 * MiB) / EQ_SCALE;
        ss_alloc_t *m, *r;
        int fm = 0, fr = 0;
        CHECK_OK(ss_alloc_new(NULL, &c, &m));
        CHECK_OK(ss_alloc_new(d, &c, &r));
        run_sequence(m, seed * 7919, om, N, &fm);
        run_sequence(r, seed * 7919, orl, N, &fr);
        CHECK_EQ_INT(fm, 0);
        CHECK_EQ_INT(fr, 0);
        ss_alloc_stats sm = stats(m), sr = stats(r);
        CHECK_EQ_U64(sm.peak_in_use_bytes, sr.peak_in_use_bytes);
        CHECK_EQ_U64(sm.peak_reserved_bytes, sr.peak_reserved_bytes);
        CHECK_EQ_U64(sm.segment_allocs, sr.segment_allocs);
        CHECK_EQ_U64(sm.oom_errors, sr.oom_errors);
        CHECK(sm.peak_reserved_bytes > 16 * MiB / EQ_SCALE);
        CHECK_MSG(memcmp(om, orl, sizeof om) == 0, "offsets differ (seed %" PRIu64 ")", seed);
        printf("measure vs real, seed %" PRIu64 ": peak in use %" PRIu64 " / %" PRIu64
               ", peak reserved %" PRIu64 " / %" PRIu64 ", %" PRIu64 " OOMs, %" PRIu64 " trims\n",
               seed, sm.peak_in_use_bytes, sr.peak_in_use_bytes, sm.peak_reserved_bytes,
               sr.peak_reserved_bytes, sm.oom_errors, sm.segment_frees);
        CHECK_OK(ss_alloc_check(m));
        CHECK_OK(ss_alloc_check(r));
        CHECK_OK(ss_alloc_destroy(m));
        CHECK_OK(ss_alloc_destroy(r));
    }
    CHECK_OK(ss_device_close(d));
}

int main(void) {
    ss_log_set(capture, NULL, SS_LOG_WARN);
    RUN(t_align_split_coalesce);
    RUN(t_best_fit);
    RUN(t_segments);
    RUN(t_budget_and_trim_on_oom);
    RUN(t_evict_turns_oom_into_success);
    RUN(t_deferred_measure);
    RUN(t_deferred_order);
    RUN(t_stock_measure);
    RUN(t_stats_format);
    RUN(t_bad_input);
    RUN(t_threads);
    RUN(t_planner_speed);
    RUN(t_real_basic_and_clamp);
    RUN(t_real_deferred);
    RUN(t_real_stock);
    RUN(t_measure_equals_real);
    return test_summary();
}
