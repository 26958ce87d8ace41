/* test-device-cuda-vm.c: the cuda device's virtual-memory slots (cuMemAddressReserve / cuMemCreate
 * / cuMemMap / cuMemSetAccess) and the allocator's granules on them, touching device memory only
 * through copies. The device is SMARTSWAP_TEST_DEVICE (default "cuda"); without a GPU every
 * test skips ("no GPU"). SMARTSWAP_TEST_EXPECT_VM=1 (bench/gpu-check.sh on an H200) makes a
 * device without virtual memory a failure; otherwise such a device must report
 * vm_granularity 0, refuse ss_vm_* and leave the allocator on plain segments.
 * scripts/cuda-emu-check.sh runs it against tests/cuda-emu/fake-cudart.c, with and without
 * virtual memory (FAKE_CUDA_NO_VMM=1).
 *
 *  - t_vm_slots: reserve / map / copy in and out / unmap / release; an unmap while a copy reading
 *    the range is in flight is refused (SS_ERR_STATE, counted in vm_busy) and allowed after;
 *    release with a mapping left is refused; the device's counters;
 *  - t_vm_fragmentation: a budget filled with blocks of 1.875 granules, every other one freed,
 *    then a request of 16 granules: plain segments fail ("fragmented"), granules serve it, the
 *    data of every live block intact (copied back);
 *  - t_vm_fallback: a device without virtual memory (vm_granularity 0): ss_vm_* unsupported,
 *    the allocator asked for granules serves from plain segments.
 */
#include "smartswap-alloc.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *devname;

static ss_device_t *open_dev(const char **why) {
    ss_options o = ss_options_default();
    ss_device_t *d = NULL;
    ss_status st = ss_device_open(devname, &o, &d);
    if (st != SS_OK) { *why = "no GPU (the device does not open)"; return NULL; }
    return d;
}

static int expect_vm(void) {
    const char *v = getenv("SMARTSWAP_TEST_EXPECT_VM");
    return v && atoi(v) != 0;
}

/* Fills n bytes of device memory at p with a pattern of seed, through a pinned buffer. */
static void put_pattern(ss_device_t *d, ss_stream_t *s, void *p, size_t n, unsigned seed) {
    unsigned char *h = NULL;
    CHECK_OK(ss_host_alloc(d, n, (void **)&h));
    if (!h) return;
    for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 12));
    CHECK_OK(ss_copy_async(d, s, p, h, n, SS_COPY_H2D));
    CHECK_OK(ss_stream_sync(d, s));
    CHECK_OK(ss_host_free(d, h, n));
}

/* The number of bytes of [p, p+n) that differ from the pattern of seed. */
static size_t bad_pattern(ss_device_t *d, ss_stream_t *s, const void *p, size_t n, unsigned seed) {
    unsigned char *h = NULL;
    CHECK_OK(ss_host_alloc(d, n, (void **)&h));
    if (!h) return n;
    CHECK_OK(ss_copy_async(d, s, h, p, n, SS_COPY_D2H));
    CHECK_OK(ss_stream_sync(d, s));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != (unsigned char)(seed * 131u + i * 7u + (i >> 12));
    CHECK_OK(ss_host_free(d, h, n));
    return bad;
}

static void t_vm_slots(void) {
    const char *why = NULL;
    ss_device_t *d = open_dev(&why);
    if (!d) TEST_SKIP(why);
    const uint64_t G = ss_device_get_caps(d)->vm_granularity;
    if (!G) {
        CHECK_MSG(!expect_vm(), "%s has no virtual memory (SMARTSWAP_TEST_EXPECT_VM=1)", devname);
        CHECK_OK(ss_device_close(d));
        if (!expect_vm()) TEST_SKIP("the device has no virtual memory (t_vm_fallback covers it)");
        return;
    }
    CHECK((G & (G - 1)) == 0);
    /* a range of k granules whose copy takes a while: 64 MiB on a GPU, 4 MiB at least */
    size_t k = (size_t)((64ull << 20) / G);
    if (k < 4) k = 4;
    const size_t n = k * G;
    ss_stream_t *s = NULL;
    CHECK_OK(ss_stream_new(d, &s));
    void *va = NULL;
    CHECK_OK(ss_vm_reserve(d, 4 * n, &va));
    if (!va || !s) { if (s) ss_stream_free(d, s); ss_device_close(d); return; }
    CHECK((uint64_t)(uintptr_t)va % G == 0);
    char *r0 = va, *r1 = (char *)va + 2 * n;
    CHECK_STATUS(ss_vm_map(d, r0 + 1, G), SS_ERR_INVALID);            /* not granule-aligned */
    CHECK_OK(ss_vm_map(d, r0, n));
    CHECK_STATUS(ss_vm_map(d, r0, G), SS_ERR_STATE);                  /* mapped already */
    ss_device_stats ds;
    CHECK_OK(ss_device_get_stats(d, &ds));
    CHECK_EQ_U64(ds.vm_mapped_bytes, n);
    put_pattern(d, s, r0, n, 3);
    CHECK_EQ_U64(bad_pattern(d, s, r0, n, 3), 0);
    /* a D2H copy of the whole range in flight: the unmap is refused until it has run */
    unsigned char *h = NULL;
    CHECK_OK(ss_host_alloc(d, n, (void **)&h));
    if (h) {
        CHECK_OK(ss_copy_async(d, s, h, r0, n, SS_COPY_D2H));
        CHECK_STATUS(ss_vm_unmap(d, r0, n), SS_ERR_STATE);
        CHECK_OK(ss_stream_sync(d, s));
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += h[i] != (unsigned char)(3 * 131u + i * 7u + (i >> 12));
        CHECK_EQ_U64(bad, 0);
        CHECK_OK(ss_host_free(d, h, n));
    }
    /* a copy elsewhere does not hold this range */
    CHECK_OK(ss_vm_map(d, r1, G));
    put_pattern(d, s, r1, G, 5);
    CHECK_OK(ss_vm_unmap(d, r0, n));
    CHECK_STATUS(ss_vm_unmap(d, r0, n), SS_ERR_INVALID);              /* not mapped now */
    CHECK_EQ_U64(bad_pattern(d, s, r1, G, 5), 0);
    /* the first range again, freshly mapped and written */
    CHECK_OK(ss_vm_map(d, r0, G));
    put_pattern(d, s, r0, G, 9);
    CHECK_EQ_U64(bad_pattern(d, s, r0, G, 9), 0);
    CHECK_STATUS(ss_vm_release(d, va, 4 * n), SS_ERR_STATE);          /* mappings left */
    CHECK_OK(ss_vm_unmap(d, r0, G));
    CHECK_OK(ss_vm_unmap(d, r1, G));
    CHECK_OK(ss_stream_free(d, s));
    CHECK_STATUS(ss_device_close(d), SS_ERR_STATE);                   /* the reservation */
    CHECK_OK(ss_vm_release(d, va, 4 * n));
    CHECK_OK(ss_device_get_stats(d, &ds));
    CHECK_EQ_U64(ds.vm_maps, 3);
    CHECK_EQ_U64(ds.vm_unmaps, 3);
    CHECK_EQ_U64(ds.vm_busy, 1);
    CHECK_EQ_U64(ds.vm_mapped_bytes, 0);
    CHECK_EQ_U64(ds.vm_reserved_bytes, 0);
    CHECK_OK(ss_device_close(d));
}

/* Blocks of 1.875 granules fill a budget of 128 granules, every other one is freed, then 16
 * granules are asked for. Returns that request's status; live blocks are checked by copies. */
static ss_status fragment(ss_device_t *d, uint64_t G, uint64_t granule, char *why, size_t len) {
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 128 * G;
    c.segment_bytes = 4 * G;
    c.granule_bytes = granule;
    ss_alloc_t *a = NULL;
    ss_stream_t *s = NULL;
    CHECK_OK(ss_alloc_new(d, &c, &a));
    CHECK_OK(ss_stream_new(d, &s));
    if (!a || !s) return SS_ERR_STATE;
    const size_t bs = (size_t)(G / 16 * 30);
    ss_block_t *b[128] = {0};
    int n = 0;
    while (n < 128 && ss_alloc_malloc(a, bs, &b[n]) == SS_OK) {
        put_pattern(d, s, ss_block_ptr(b[n]), bs, (unsigned)n);
        n++;
    }
    CHECK(n >= 50);
    for (int i = 0; i < n; i += 2) CHECK_OK(ss_alloc_free(a, b[i]));
    ss_block_t *big = NULL;
    ss_status r = ss_alloc_malloc(a, (size_t)(16 * G), &big);
    CHECK_OK(ss_alloc_check(a));
    why[0] = 0;
    if (r != SS_OK) CHECK_OK(ss_alloc_last_oom(a, why, len));
    if (r == SS_OK) {
        put_pattern(d, s, ss_block_ptr(big), (size_t)(16 * G), 200);
        size_t bad = 0;
        for (int i = 1; i < n; i += 2) bad += bad_pattern(d, s, ss_block_ptr(b[i]), bs, (unsigned)i);
        CHECK_EQ_U64(bad, 0);
        CHECK_EQ_U64(bad_pattern(d, s, ss_block_ptr(big), (size_t)(16 * G), 200), 0);
        CHECK_OK(ss_alloc_free(a, big));
    }
    for (int i = 1; i < n; i += 2) CHECK_OK(ss_alloc_free(a, b[i]));
    ss_alloc_stats st;
    CHECK_OK(ss_alloc_get_stats(a, &st));
    if (granule) CHECK(st.granule_maps > 0);
    CHECK_OK(ss_stream_free(d, s));
    CHECK_OK(ss_alloc_destroy(a));
    return r;
}

static void t_vm_fragmentation(void) {
    const char *why0 = NULL;
    ss_device_t *d = open_dev(&why0);
    if (!d) TEST_SKIP(why0);
    const uint64_t G = ss_device_get_caps(d)->vm_granularity;
    if (!G) {
        CHECK_OK(ss_device_close(d));
        if (!expect_vm()) TEST_SKIP("the device has no virtual memory (t_vm_fallback covers it)");
        CHECK_MSG(0, "%s has no virtual memory (SMARTSWAP_TEST_EXPECT_VM=1)", devname);
        return;
    }
    char why[320];
    ss_status r = fragment(d, G, 0, why, sizeof why);
    CHECK_STATUS(r, SS_ERR_OOM);                                     /* plain segments */
    CHECK_MSG(strstr(why, "fragmented") != NULL, "message: %s", why);
    printf("  segments: %s\n", why);
    CHECK_OK(fragment(d, G, G, why, sizeof why));                    /* granules serve it */
    ss_device_stats ds;
    CHECK_OK(ss_device_get_stats(d, &ds));
    CHECK_EQ_U64(ds.vm_reserved_bytes, 0);
    CHECK_EQ_U64(ds.vm_mapped_bytes, 0);
    CHECK(ds.vm_maps > 0 && ds.vm_maps == ds.vm_unmaps);
    CHECK_OK(ss_device_close(d));
}

static void t_vm_fallback(void) {
    const char *why = NULL;
    ss_device_t *d = open_dev(&why);
    if (!d) TEST_SKIP(why);
    if (ss_device_get_caps(d)->vm_granularity) {
        CHECK_OK(ss_device_close(d));
        TEST_SKIP("the device has virtual memory (t_vm_slots covers it)");
    }
    CHECK_MSG(!expect_vm(), "%s has no virtual memory (SMARTSWAP_TEST_EXPECT_VM=1)", devname);
    void *va = NULL;
    CHECK_STATUS(ss_vm_reserve(d, 1 << 21, &va), SS_ERR_UNSUPPORTED);
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 64ull << 20;
    c.granule_bytes = 2ull << 20;
    ss_alloc_t *a = NULL;
    CHECK_OK(ss_alloc_new(d, &c, &a));
    if (a) {
        ss_alloc_config got;
        CHECK_OK(ss_alloc_get_config(a, &got));
        CHECK_EQ_U64(got.granule_bytes, 0);                          /* plain segments */
        ss_block_t *b = NULL;
        ss_stream_t *s = NULL;
        CHECK_OK(ss_stream_new(d, &s));
        CHECK_OK(ss_alloc_malloc(a, 3ull << 20, &b));
        if (b && s) {
            put_pattern(d, s, ss_block_ptr(b), 3u << 20, 1);
            CHECK_EQ_U64(bad_pattern(d, s, ss_block_ptr(b), 3u << 20, 1), 0);
            CHECK_OK(ss_alloc_free(a, b));
        }
        if (s) CHECK_OK(ss_stream_free(d, s));
        CHECK_OK(ss_alloc_destroy(a));
    }
    CHECK_OK(ss_device_close(d));
}

int main(void) {
    devname = getenv("SMARTSWAP_TEST_DEVICE");
    if (!devname || !*devname) devname = "cuda";
    printf("device under test: %s\n", devname);
    RUN(t_vm_slots);
    RUN(t_vm_fragmentation);
    RUN(t_vm_fallback);
    return test_summary();
}
