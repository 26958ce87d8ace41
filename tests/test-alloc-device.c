/* test-alloc-device.c: the allocator and the host pool on a real device, touching device memory
 * only through copies, so that the same test runs on cpu-sim (always) and on cuda
 * (SMARTSWAP_TEST_DEVICE=cuda, as bench/gpu-check.sh runs it on a GPU machine).
 */
#include "test.h"
#include "smartswap-alloc.h"

#define MiB (1024ull * 1024ull)

static const char *devname;

static ss_device_t *open_dev(void) {
    ss_options o = ss_options_default();
    o.sim_capacity_bytes = 512 * MiB;
    o.sim_d2h_gbps = o.sim_h2d_gbps = 20;
    ss_device_t *d = NULL;
    if (ss_device_open(devname, &o, &d) != SS_OK) return NULL;
    return d;
}

static ss_alloc_stats astats(ss_alloc_t *a) {
    ss_alloc_stats s;
    memset(&s, 0, sizeof s);
    CHECK_OK(ss_alloc_get_stats(a, &s));
    return s;
}

static uint64_t dev_queries(ss_device_t *d) {
    ss_device_stats s;
    memset(&s, 0, sizeof s);
    CHECK_OK(ss_device_get_stats(d, &s));
    return s.event_queries;
}

/* Blocks are aligned, split from one segment, coalesced when freed; the walker agrees. */
static void t_split_coalesce(void) {
    ss_device_t *d = open_dev();
    if (!d && !strcmp(devname, "cpu-sim")) { CHECK_MSG(0, "cannot open the embedded cpu-sim device"); return; }
    if (!d) TEST_SKIP("device not available");
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 64 * MiB;
    ss_alloc_t *a;
    CHECK_OK(ss_alloc_new(d, &c, &a));
    ss_block_t *b[8];
    uintptr_t lowest = UINTPTR_MAX;
    for (int i = 0; i < 8; i++) {
        CHECK_OK(ss_alloc_malloc(a, 1000 + 3000 * (size_t)i, &b[i]));
        CHECK_EQ_U64((uintptr_t)ss_block_ptr(b[i]) % SS_ALLOC_ALIGN, 0);
        if ((uintptr_t)ss_block_ptr(b[i]) < lowest) lowest = (uintptr_t)ss_block_ptr(b[i]);
    }
    CHECK_EQ_U64(astats(a).segment_allocs, 1);
    for (int i = 0; i < 8; i += 2) CHECK_OK(ss_alloc_free(a, b[i]));
    CHECK_OK(ss_alloc_check(a));
    for (int i = 1; i < 8; i += 2) CHECK_OK(ss_alloc_free(a, b[i]));
    CHECK_OK(ss_alloc_check(a));
    ss_block_t *big;
    CHECK_OK(ss_alloc_malloc(a, 2 * MiB, &big));    /* the whole segment again: coalesced */
    CHECK((uintptr_t)ss_block_ptr(big) <= lowest);   /* the segment's start */
    CHECK_EQ_U64(ss_block_size(big), 2 * MiB);
    CHECK_EQ_U64(astats(a).segment_allocs, 1);
    CHECK_OK(ss_alloc_free(a, big));
    CHECK_OK(ss_alloc_destroy(a));
    CHECK_OK(ss_device_close(d));
}

/* The custom record stream on a real device: a swap-out copy, the block released at k with one
 * event query, the data that reached the host intact, and no queries on allocations. */
static void t_deferred_release(void) {
    ss_device_t *d = open_dev();
    if (!d && !strcmp(devname, "cpu-sim")) { CHECK_MSG(0, "cannot open the embedded cpu-sim device"); return; }
    if (!d) TEST_SKIP("device not available");
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 64 * MiB;
    ss_alloc_t *a;
    CHECK_OK(ss_alloc_new(d, &c, &a));
    ss_stream_t *copy, *compute;
    ss_event_t *ev;
    CHECK_OK(ss_stream_new(d, &copy));
    CHECK_OK(ss_stream_new(d, &compute));
    CHECK_OK(ss_event_new(d, &ev));
    const size_t n = 4 * MiB;
    unsigned char *src, *dst;
    CHECK_OK(ss_host_alloc(d, n, (void **)&src));
    CHECK_OK(ss_host_alloc(d, n, (void **)&dst));
    for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i * 7 + 3);
    memset(dst, 0, n);
    ss_block_t *b, *o;
    CHECK_OK(ss_alloc_malloc(a, n, &b));
    void *p = ss_block_ptr(b);
    CHECK_OK(ss_copy_async(d, copy, p, src, n, SS_COPY_H2D));
    CHECK_OK(ss_copy_async(d, copy, dst, p, n, SS_COPY_D2H));    /* the swap-out */
    CHECK_OK(ss_event_record(d, ev, copy));
    CHECK_OK(ss_alloc_free_at(a, b, 5, ev, 0));
    uint64_t q0 = dev_queries(d);
    for (uint64_t k = 0; k < 5; k++) {
        CHECK_OK(ss_alloc_reach(a, k, compute, NULL));
        CHECK_OK(ss_alloc_malloc(a, n, &o));
        CHECK(ss_block_ptr(o) != p);               /* not handed out before k */
        CHECK_OK(ss_alloc_free(a, o));
    }
    CHECK_EQ_U64(dev_queries(d) - q0, 0);
    CHECK_OK(ss_event_sync(d, ev));
    CHECK(memcmp(src, dst, n) == 0);
    q0 = dev_queries(d);
    CHECK_OK(ss_alloc_reach(a, 5, compute, NULL));
    CHECK_EQ_U64(dev_queries(d) - q0, 1);
    CHECK_OK(ss_alloc_malloc(a, n, &o));
    CHECK(ss_block_ptr(o) == p);                   /* at k: reused */
    CHECK_EQ_U64(astats(a).reuse_count, 1);
    CHECK_OK(ss_alloc_free(a, o));
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_destroy(a));
    CHECK_OK(ss_host_free(d, src, n));
    CHECK_OK(ss_host_free(d, dst, n));
    CHECK_OK(ss_event_free(d, ev));
    CHECK_OK(ss_stream_free(d, copy));
    CHECK_OK(ss_stream_free(d, compute));
    CHECK_OK(ss_device_close(d));
}

/* The same seeded request sequence in measure mode and on the device: same peaks, same offsets. */
static void t_measure_equals_real(void) {
    ss_device_t *d = open_dev();
    if (!d && !strcmp(devname, "cpu-sim")) { CHECK_MSG(0, "cannot open the embedded cpu-sim device"); return; }
    if (!d) TEST_SKIP("device not available");
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 96 * MiB;
    ss_alloc_t *m, *r;
    CHECK_OK(ss_alloc_new(NULL, &c, &m));
    CHECK_OK(ss_alloc_new(d, &c, &r));
    enum { LIVE = 64, STEPS = 3000 };
    ss_block_t *lm[LIVE] = {0}, *lr[LIVE] = {0};
    uint64_t x = 12345;
    int same = 1, oom_m = 0, oom_r = 0;
    for (int s = 0; s < STEPS; s++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int i = (int)(x % LIVE);
        if (lm[i]) {
            CHECK_OK(ss_alloc_free(m, lm[i]));
            CHECK_OK(ss_alloc_free(r, lr[i]));
            lm[i] = lr[i] = NULL;
        } else {
            size_t n = (size_t)((x >> 8) % (3 * MiB)) + 1;
            ss_status sm = ss_alloc_malloc(m, n, &lm[i]);
            ss_status sr = ss_alloc_malloc(r, n, &lr[i]);
            if (sm != SS_OK) { lm[i] = NULL; oom_m++; }
            if (sr != SS_OK) { lr[i] = NULL; oom_r++; }
            if ((sm == SS_OK) != (sr == SS_OK)) same = 0;
            else if (sm == SS_OK && ss_block_offset(lm[i]) != ss_block_offset(lr[i])) same = 0;
        }
    }
    CHECK(same);
    CHECK_EQ_INT(oom_m, oom_r);
    ss_alloc_stats sm = astats(m), sr = astats(r);
    CHECK_EQ_U64(sm.peak_in_use_bytes, sr.peak_in_use_bytes);
    CHECK_EQ_U64(sm.peak_reserved_bytes, sr.peak_reserved_bytes);
    for (int i = 0; i < LIVE; i++)
        if (lm[i]) { CHECK_OK(ss_alloc_free(m, lm[i])); CHECK_OK(ss_alloc_free(r, lr[i])); }
    CHECK_OK(ss_alloc_destroy(m));
    CHECK_OK(ss_alloc_destroy(r));
    CHECK_OK(ss_device_close(d));
}

/* Pinned host pool: a steady workload makes no new host allocations after the first round. */
static void t_hostpool_steady(void) {
    ss_device_t *d = open_dev();
    if (!d && !strcmp(devname, "cpu-sim")) { CHECK_MSG(0, "cannot open the embedded cpu-sim device"); return; }
    if (!d) TEST_SKIP("device not available");
    ss_hostpool_t *p;
    CHECK_OK(ss_hostpool_new(d, 256 * MiB, &p));
    void *buf[16];
    ss_hostpool_stats s0 = {0}, s1 = {0};
    for (int round = 0; round < 5; round++) {
        for (int i = 0; i < 16; i++) CHECK_OK(ss_hostpool_get(p, (size_t)(i + 1) * 256 * 1024, &buf[i]));
        for (int i = 0; i < 16; i++) CHECK_OK(ss_hostpool_put(p, buf[i]));
        if (round == 0) CHECK_OK(ss_hostpool_get_stats(p, &s0));
    }
    CHECK_OK(ss_hostpool_get_stats(p, &s1));
    CHECK(s0.host_allocs > 0);
    CHECK_EQ_U64(s1.host_allocs, s0.host_allocs);
    CHECK_OK(ss_hostpool_destroy(p));
    CHECK_OK(ss_device_close(d));
}

int main(void) {
    devname = getenv("SMARTSWAP_TEST_DEVICE");
    if (!devname || !*devname) devname = "cpu-sim";
    printf("device under test: %s\n", devname);
    RUN(t_split_coalesce);
    RUN(t_deferred_release);
    RUN(t_measure_equals_real);
    RUN(t_hostpool_steady);
    return test_summary();
}
