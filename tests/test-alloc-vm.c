/* test-alloc-vm.c: virtual-memory segments (issue 14 items 1-3): cpu-sim's ss_vm_* calls, the
 * allocator's granules and pools, the out-of-memory rule, its message and stats.
 *
 *  - t_device_vm: reserve / map / unmap / release on cpu-sim: fresh granules hold poison, an
 *    unmap under a running copy is refused (SS_ERR_STATE) and allowed once the copy is done,
 *    close refuses a live reservation, device counters;
 *  - t_fragmentation: the failure: a budget filled with 120 KiB blocks, every other one
 *    freed, then a 1 MiB request: plain segments fail with megabytes free ("fragmented"), virtual
 *    memory segments serve it (cpu-sim and measure mode), with the data of live blocks intact;
 *  - t_rule_random: random mixed sizes and lifetimes on cpu-sim with data checks: an allocation
 *    fails only when the rule's count (granules of live small blocks + sum of ceil(size/G) over
 *    live large ones + ceil(request/G)) passes budget/G, and the invariant walker holds;
 *  - t_pools: persistent large blocks are packed apart from iteration ones, small requests
 *    share a granule;
 *  - t_small_classes: the small pool's size classes: random small requests and releases; every
 *    block sits in a slot of a granule of its class, and the granules touched never pass, class
 *    by class, ceil(most blocks of the class live since it last had none / its slots per granule)
 *    (the bound the trainer's smallest budget counts, docs/allocator.md); ss_alloc_small_class
 *    gives every request's class;
 *  - t_oom_message_stats: "exhausted" vs "fragmented", the largest free run and slack in stats;
 * *  - t_map_fault: a failed map (the fault device) is returned as it is, nothing leaks.
 */
#include "smartswap-alloc.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

#define KiB (1ull << 10)
#define MiB (1ull << 20)

static ss_device_t *open_sim(uint64_t cap, int virt) {
    ss_options o = ss_options_default();
    o.sim_capacity_bytes = cap;
    o.sim_virtual_clock = virt;
    ss_device_t *d = NULL;
    CHECK_OK(ss_device_open("cpu-sim", &o, &d));
    return d;
}

static void t_device_vm(void) {
    ss_options o = ss_options_default();
    o.sim_capacity_bytes = 4 * MiB;
    o.sim_d2h_gbps = 0.001;          /* 1 MB/s: a 64 KiB copy takes ~65 ms */
    ss_device_t *d = NULL;
    CHECK_OK(ss_device_open("cpu-sim", &o, &d));
    if (!d) return;
    uint64_t pg = ss_device_get_caps(d)->vm_granularity;
    CHECK(pg >= 4096);
    void *va = NULL;
    CHECK_OK(ss_vm_reserve(d, 16 * 64 * KiB, &va));
    if (!va) { ss_device_close(d); return; }
    char *g0 = va, *g1 = (char *)va + 64 * KiB;
    CHECK_OK(ss_vm_map(d, g0, 64 * KiB));
    CHECK_STATUS(ss_vm_map(d, g0, 64 * KiB), SS_ERR_STATE);          /* mapped already */
    size_t bad = 1;
    CHECK_OK(ss_mem_check_poison(d, g0, 64 * KiB, &bad));
    CHECK_EQ_U64(bad, 0);                                             /* fresh: poison */
    memset(g0, 7, 64 * KiB);
    ss_device_stats ds;
    CHECK_OK(ss_device_get_stats(d, &ds));
    CHECK_EQ_U64(ds.vm_mapped_bytes, 64 * KiB);
    CHECK_EQ_U64(ds.mem_bytes_in_use, 64 * KiB);
    /* a copy reading g0 is in flight: no unmap */
    ss_stream_t *s = NULL;
    CHECK_OK(ss_stream_new(d, &s));
    void *h = malloc(64 * KiB);
    CHECK_OK(ss_copy_async(d, s, h, g0, 64 * KiB, SS_COPY_D2H));
    CHECK_STATUS(ss_vm_unmap(d, g0, 64 * KiB), SS_ERR_STATE);
    CHECK_OK(ss_stream_sync(d, s));
    CHECK(((unsigned char *)h)[100] == 7);
    CHECK_OK(ss_vm_unmap(d, g0, 64 * KiB));
    CHECK_STATUS(ss_vm_unmap(d, g0, 64 * KiB), SS_ERR_INVALID);      /* not mapped */
    /* the same physical memory elsewhere: poison again, not the 7s */
    CHECK_OK(ss_vm_map(d, g1, 64 * KiB));
    CHECK_OK(ss_mem_check_poison(d, g1, 64 * KiB, &bad));
    CHECK_EQ_U64(bad, 0);
    CHECK_STATUS(ss_vm_release(d, va, 16 * 64 * KiB), SS_ERR_STATE); /* g1 still mapped */
    CHECK_OK(ss_vm_unmap(d, g1, 64 * KiB));
    CHECK_STATUS(ss_device_close(d), SS_ERR_STATE) ;                  /* stream, reservation */
    CHECK_OK(ss_stream_free(d, s));
    CHECK_STATUS(ss_device_close(d), SS_ERR_STATE);                   /* reservation */
    CHECK_OK(ss_vm_release(d, va, 16 * 64 * KiB));
    CHECK_OK(ss_device_get_stats(d, &ds));
    CHECK_EQ_U64(ds.vm_maps, 2);
    CHECK_EQ_U64(ds.vm_unmaps, 2);
    CHECK_EQ_U64(ds.vm_busy, 1);
    CHECK_EQ_U64(ds.mem_bytes_in_use, 0);
    CHECK_OK(ss_device_close(d));
    free(h);
}

/* Fills a budget with 120 KiB blocks, frees every other one, asks for 1 MiB. Returns the
 * status of that request; *free_bytes gets what was free at the time. */
static ss_status fragment(ss_device_t *d, uint64_t granule, uint64_t *free_bytes, char *why,
                          size_t whylen) {
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 8 * MiB;
    c.segment_bytes = 256 * KiB;
    c.granule_bytes = granule;
    ss_alloc_t *a = NULL;
    CHECK_OK(ss_alloc_new(d, &c, &a));
    if (!a) return SS_ERR_STATE;
    ss_block_t *b[128] = {0};
    int n = 0;
    while (n < 128 && ss_alloc_malloc(a, 120 * KiB, &b[n]) == SS_OK) {
        if (d) memset(ss_block_ptr(b[n]), n, 120 * KiB);
        n++;
    }
    CHECK(n >= 50);
    for (int i = 0; i < n; i += 2) CHECK_OK(ss_alloc_free(a, b[i]));
    ss_alloc_stats st;
    CHECK_OK(ss_alloc_get_stats(a, &st));
    *free_bytes = st.budget_bytes - st.in_use_bytes;
    ss_block_t *big = NULL;
    ss_status r = ss_alloc_malloc(a, 1 * MiB, &big);
    CHECK_OK(ss_alloc_check(a));
    why[0] = 0;
    if (r != SS_OK) CHECK_OK(ss_alloc_last_oom(a, why, whylen));
    if (r == SS_OK && d) {
        memset(ss_block_ptr(big), 0xEE, 1 * MiB);
        for (int i = 1; i < n; i += 2) {   /* the live blocks kept their bytes */
            unsigned char *p = ss_block_ptr(b[i]);
            CHECK(p[0] == (unsigned char)i && p[120 * KiB - 1] == (unsigned char)i);
        }
    }
    if (r == SS_OK) CHECK_OK(ss_alloc_free(a, big));
    for (int i = 1; i < n; i += 2) CHECK_OK(ss_alloc_free(a, b[i]));
    CHECK_OK(ss_alloc_destroy(a));
    return r;
}

static void t_fragmentation(void) {
    ss_device_t *d = open_sim(16 * MiB, 0);
    if (!d) return;
    uint64_t fr = 0;
    char why[320];
    ss_status r = fragment(d, 0, &fr, why, sizeof why);
    CHECK_STATUS(r, SS_ERR_OOM);                     /* plain segments: fragmented */
    CHECK_MSG(fr >= 3 * MiB, "only %llu bytes free", (unsigned long long)fr);
    CHECK_MSG(strstr(why, "fragmented") != NULL, "message: %s", why);
    CHECK_MSG(strstr(why, "largest free run") != NULL, "message: %s", why);
    printf("  segments: %s\n", why);
    r = fragment(d, 64 * KiB, &fr, why, sizeof why);
    CHECK_OK(r);                                     /* granules: served */
    r = fragment(NULL, 64 * KiB, &fr, why, sizeof why);
    CHECK_OK(r);                                     /* measure mode emulates the same */
    ss_device_stats ds;
    CHECK_OK(ss_device_get_stats(d, &ds));
    CHECK_EQ_U64(ds.mem_bytes_in_use, 0);
    CHECK_EQ_U64(ds.vm_reserved_bytes, 0);
    CHECK_OK(ss_device_close(d));
}

typedef struct live { ss_block_t *b; uint64_t size; unsigned char tag; int small; } live;   /* small: packed pools */

static void t_rule_random(void) {
    ss_device_t *d = open_sim(64 * MiB, 1);
    if (!d) return;
    const uint64_t G = 64 * KiB;
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 6 * MiB;
    c.granule_bytes = G;
    ss_alloc_t *a = NULL;
    CHECK_OK(ss_alloc_new(d, &c, &a));
    if (!a) { ss_device_close(d); return; }
    ss_alloc_config got;
    CHECK_OK(ss_alloc_get_config(a, &got));
    CHECK_EQ_U64(got.granule_bytes, G);
    const uint64_t nb = got.budget_bytes / G;
    live L[512];
    int n = 0, ooms = 0, served = 0, false_oom = 0;
    uint64_t rng = 12345;
    for (int step = 0; step < 4000; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t r = rng >> 33;
        if (n > 0 && (r % 100 < 45 || n == 512)) {
            int i = (int)(r / 100 % (uint64_t)n);
            unsigned char *p = ss_block_ptr(L[i].b);
            CHECK(p[0] == L[i].tag && p[L[i].size - 1] == L[i].tag);
            CHECK_OK(ss_alloc_free(a, L[i].b));
            L[i] = L[--n];
            continue;
        }
        uint64_t kind = r / 100 % 4, size;
        if (kind == 0) size = 256 + (r >> 8) % (16 * KiB);
        else if (kind == 1) size = 16 * KiB + (r >> 8) % (48 * KiB);
        else size = 64 * KiB + (r >> 8) % (900 * KiB);
        ss_lifetime lt = (r >> 20) % 5 == 0 ? SS_LIFETIME_PERSISTENT : SS_LIFETIME_ITERATION;
        /* the rule's count before the request (sizes rounded as the allocator rounds): the
         * granules touched by live small and persistent blocks (both pools packed), plus
         * ceil(size / G) per live large iteration block, plus the request's: ceil(size / G),
         * one more for a persistent one (packed, it may start inside an untouched granule) */
        uint64_t count = 0, grans[4096];
        int ng = 0;
        for (int i = 0; i < n; i++) {
            uint64_t sz = ss_block_size(L[i].b);
            if (L[i].small) {
                uint64_t o = ss_block_offset(L[i].b);
                for (uint64_t g = o / G; g < (o + sz + G - 1) / G; g++) {
                    int seen = 0;
                    for (int k = 0; k < ng && !seen; k++) seen = grans[k] == g;
                    if (!seen && ng < 4096) grans[ng++] = g;
                }
            } else {
                count += (sz + G - 1) / G;
            }
        }
        uint64_t rounded = (size + 255) / 256 * 256;
        count += (uint64_t)ng + (rounded + G - 1) / G + (lt == SS_LIFETIME_PERSISTENT);
        ss_block_t *b = NULL;
        ss_status st = ss_alloc_malloc_tagged(a, size, lt, &b);
        if (st == SS_OK) {
            served++;
            unsigned char tag = (unsigned char)(step & 0xFF);
            memset(ss_block_ptr(b), tag, size);
            L[n].b = b; L[n].size = size; L[n].tag = tag; L[n].small = rounded < G || lt == SS_LIFETIME_PERSISTENT;
            n++;
        } else {
            CHECK_STATUS(st, SS_ERR_OOM);
            ooms++;
            if (count <= nb) false_oom++;
        }
        if (step % 50 == 0) CHECK_OK(ss_alloc_check(a));
    }
    CHECK_OK(ss_alloc_check(a));
    CHECK_MSG(false_oom == 0, "%d of %d out-of-memory errors within the rule", false_oom, ooms);
    CHECK(ooms > 10 && served > 1000);   /* the budget was really under pressure */
    ss_alloc_stats st;
    CHECK_OK(ss_alloc_get_stats(a, &st));
    CHECK(st.peak_reserved_bytes <= st.budget_bytes);
    CHECK(st.granule_maps > 0 && st.granule_unmaps > 0);
    printf("  %d served, %d out of memory (all beyond the rule), %llu maps, %llu unmaps\n", served,
           ooms, (unsigned long long)st.granule_maps, (unsigned long long)st.granule_unmaps);
    for (int i = 0; i < n; i++) CHECK_OK(ss_alloc_free(a, L[i].b));
    CHECK_OK(ss_alloc_destroy(a));
    ss_device_stats ds;
    CHECK_OK(ss_device_get_stats(d, &ds));
    CHECK_EQ_U64(ds.mem_bytes_in_use, 0);
    CHECK_OK(ss_device_close(d));
}

/* A measure-mode allocator of granules G under budget (NULL after a failed check). */
static ss_alloc_t *measure_vm(uint64_t budget, uint64_t G) {
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = budget;
    c.granule_bytes = G;
    ss_alloc_t *a = NULL;
    CHECK_OK(ss_alloc_new(NULL, &c, &a));
    return a;
}

static void t_pools(void) {
    const uint64_t G = 64 * KiB;
    ss_alloc_t *a = measure_vm(16 * MiB, G);
    if (!a) return;
    ss_block_t *x = NULL, *p = NULL, *y = NULL, *s1 = NULL, *s2 = NULL, *p2 = NULL;
    CHECK_OK(ss_alloc_malloc(a, 100 * KiB, &x));
    CHECK_OK(ss_alloc_malloc_tagged(a, 100 * KiB, SS_LIFETIME_PERSISTENT, &p));
    CHECK_OK(ss_alloc_malloc(a, 200 * KiB, &y));
    CHECK_OK(ss_alloc_malloc(a, 1 * KiB, &s1));
    CHECK_OK(ss_alloc_malloc(a, 1 * KiB - 100, &s2));   /* the same class as s1 (1 KiB slots) */
    CHECK_OK(ss_alloc_malloc_tagged(a, 20 * KiB, SS_LIFETIME_PERSISTENT, &p2));
    if (!x || !p || !y || !s1 || !s2 || !p2) return;
    CHECK_EQ_U64(ss_block_offset(p2), ss_block_offset(p) + 100 * KiB);   /* persistent: packed */
    CHECK_EQ_U64(ss_block_offset(x) % G, 0);
    CHECK_EQ_U64(ss_block_offset(y), ss_block_offset(x) + 2 * G);   /* packed, granule-aligned */
    uint64_t po = ss_block_offset(p);
    CHECK(po < ss_block_offset(x) || po > ss_block_offset(y) + 200 * KiB);   /* apart */
    CHECK_EQ_U64(ss_block_offset(s1) / G, ss_block_offset(s2) / G);  /* small ones share */
    CHECK_EQ_U64(ss_block_offset(s2), ss_block_offset(s1) + 1 * KiB);  /* the next slot */
    ss_alloc_stats st;
    CHECK_OK(ss_alloc_get_stats(a, &st));
    CHECK_EQ_U64(st.granules_mapped, 2 + 2 + 4 + 1);   /* p and p2 share their 2 granules */
    CHECK_EQ_U64(st.slack_bytes, st.reserved_bytes - st.in_use_bytes);
    CHECK_STATUS(ss_alloc_malloc_tagged(a, 10, (ss_lifetime)7, &x), SS_ERR_INVALID);
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_destroy_force(a));
}

static void t_small_classes(void) {
    const uint64_t G = 4 * KiB;
    ss_alloc_t *a = measure_vm(4 * MiB, G);
    if (!a) return;
    enum { NL = 400, NC = 17 };
    ss_block_t *L[NL];
    uint64_t cls[NL];
    int n = 0, over = 0, shared = 0;
    uint64_t live_c[NC] = {0}, peak_c[NC] = {0}, rng = 777;
    for (int step = 0; step < 6000; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t r = rng >> 33;
        if (n > 0 && (r % 100 < 48 || n == NL)) {
            int i = (int)(r / 100 % (uint64_t)n);
            CHECK_OK(ss_alloc_free(a, L[i]));
            if (--live_c[cls[i]] == 0) peak_c[cls[i]] = 0;   /* the class's granules all went back */
            L[i] = L[n - 1];
            cls[i] = cls[n - 1];
            n--;
            continue;
        }
        /* a few sizes, as a trainer's are: 1..15 slots of 256 B */
        uint64_t size = 256 * (1 + (r / 100) % 15) - (r >> 12) % 200;
        ss_block_t *b = NULL;
        CHECK_OK(ss_alloc_malloc(a, size, &b));
        if (!b) break;
        uint64_t k = G / ((size + 255) / 256 * 256);   /* slots per granule: the class */
        CHECK_EQ_U64(ss_alloc_small_class(G, size), k);   /* the exported rule says the same */
        L[n] = b;
        cls[n++] = k;
        if (++live_c[k] > peak_c[k]) peak_c[k] = live_c[k];
        /* the granules touched, class by class, against the bound */
        uint64_t bound = 0, grans[NL], gc[NL];
        int ng = 0;
        for (int i = 0; i < n; i++) {
            uint64_t g = ss_block_offset(L[i]) / G;
            int seen = -1;
            for (int j = 0; j < ng && seen < 0; j++) if (grans[j] == g) seen = j;
            if (seen < 0) { grans[ng] = g; gc[ng++] = cls[i]; }
            else if (gc[seen] != cls[i]) over++;   /* two classes in one granule */
            else if (i == n - 1) shared++;
        }
        for (uint64_t j = 1; j < NC; j++) bound += (peak_c[j] + j - 1) / j;
        if ((uint64_t)ng > bound) over++;
    }
    CHECK_EQ_U64(over, 0);
    CHECK(shared > 1000);
    /* no small class: a granule or more, segment mode, nothing */
    CHECK_EQ_U64(ss_alloc_small_class(G, G - 255), 0);
    CHECK_EQ_U64(ss_alloc_small_class(G, G), 0);
    CHECK_EQ_U64(ss_alloc_small_class(0, 256), 0);
    CHECK_EQ_U64(ss_alloc_small_class(G, 0), 0);   /* most requests went into a granule of their class already in use */
    CHECK_OK(ss_alloc_check(a));
    for (int i = 0; i < n; i++) CHECK_OK(ss_alloc_free(a, L[i]));
    ss_alloc_stats st;
    CHECK_OK(ss_alloc_get_stats(a, &st));
    CHECK_EQ_U64(st.granules_mapped, st.granules_cached);
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_destroy(a));
    /* option granule "auto" (docs/allocator.md "Which granule"): 64 KiB halved while the budget
     * holds fewer than 4096 granules, down to the page; the cuda driver's 2 MiB unchanged */
    CHECK_EQ_U64(ss_alloc_granule_for(SS_ALLOC_GRANULE_AUTO, 4 * MiB, 4096), 4 * KiB);
    CHECK_EQ_U64(ss_alloc_granule_for(SS_ALLOC_GRANULE_AUTO, 64 * MiB, 4096), 16 * KiB);
    CHECK_EQ_U64(ss_alloc_granule_for(SS_ALLOC_GRANULE_AUTO, 1024 * MiB, 4096), 64 * KiB);
    CHECK_EQ_U64(ss_alloc_granule_for(SS_ALLOC_GRANULE_AUTO, 0, 4096), 64 * KiB);
    CHECK_EQ_U64(ss_alloc_granule_for(SS_ALLOC_GRANULE_AUTO, 64 * MiB, 2 * MiB), 2 * MiB);
    CHECK_EQ_U64(ss_alloc_granule_for(4 * KiB, 4 * MiB, 4096), 4 * KiB);   /* an explicit one as given */
}

/* Per-tensor guards in virtual-memory mode: two small requests share a granule, next to each
 * other; an overrun of the first by one byte, into the space between it and the next tensor of
 * the range, is caught at its release (SS_ERR_CORRUPT, counted); so is one past a large block
 * into the rest of its last granule; exact writes are not; a block that ends exactly where the
 * next one starts has no guard (docs/allocator.md). */
static void t_guards(void) {
    ss_device_t *d = open_sim(16 * MiB, 1);
    if (!d) return;
    const uint64_t G = 64 * KiB;
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 4 * MiB;
    c.granule_bytes = G;
    ss_alloc_t *a = NULL;
    CHECK_OK(ss_alloc_new(d, &c, &a));
    if (!a) { ss_device_close(d); return; }
    ss_block_t *x = NULL, *y = NULL, *l = NULL, *e = NULL;
    CHECK_OK(ss_alloc_malloc(a, 1000, &x));
    CHECK_OK(ss_alloc_malloc(a, 1000, &y));
    CHECK_OK(ss_alloc_malloc(a, G + 100, &l));
    if (!x || !y || !l) { ss_alloc_destroy_force(a); ss_device_close(d); return; }
    CHECK_EQ_U64(ss_block_offset(y), ss_block_offset(x) + 1024);   /* the same range, adjacent */
    memset(ss_block_ptr(x), 1, 1000);                  /* in bounds */
    memset(ss_block_ptr(y), 2, 1001);                  /* one byte over, towards the next tensor */
    memset(ss_block_ptr(l), 3, G + 101);               /* one byte over, into its last granule */
    CHECK_OK(ss_alloc_free(a, x));
    CHECK_STATUS(ss_alloc_free(a, y), SS_ERR_CORRUPT);
    CHECK_STATUS(ss_alloc_free(a, l), SS_ERR_CORRUPT);
    ss_alloc_stats st;
    CHECK_OK(ss_alloc_get_stats(a, &st));
    CHECK_EQ_U64(st.guard_overruns, 2);
    CHECK_EQ_U64(st.live_blocks, 0);                   /* freed all the same */
    /* a block reused after a clean release gets a fresh guard */
    CHECK_OK(ss_alloc_malloc(a, 1000, &e));
    if (e) { memset(ss_block_ptr(e), 4, 1000); CHECK_OK(ss_alloc_free(a, e)); }
    /* measure mode has no memory: no guards, same offsets */
    ss_alloc_t *m = NULL;
    CHECK_OK(ss_alloc_new(NULL, &c, &m));
    ss_block_t *mx = NULL;
    if (m) { CHECK_OK(ss_alloc_malloc(m, 1000, &mx)); if (mx) CHECK_OK(ss_alloc_free(m, mx)); CHECK_OK(ss_alloc_destroy(m)); }
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_destroy(a));
    CHECK_OK(ss_device_close(d));
}

static void t_oom_message_stats(void) {
    const uint64_t G = 64 * KiB;
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 1 * MiB;
    c.granule_bytes = G;
    ss_alloc_t *a = NULL;
    CHECK_OK(ss_alloc_new(NULL, &c, &a));
    if (!a) return;
    ss_block_t *b[16] = {0};
    for (int i = 0; i < 8; i++) CHECK_OK(ss_alloc_malloc(a, 100 * KiB, &b[i]));   /* 16 granules */
    ss_alloc_stats st;
    CHECK_OK(ss_alloc_get_stats(a, &st));
    CHECK_EQ_U64(st.largest_free_bytes, 0);
    ss_block_t *x = NULL;
    CHECK_STATUS(ss_alloc_malloc(a, 1 * KiB, &x), SS_ERR_OOM);
    char why[320];
    CHECK_OK(ss_alloc_last_oom(a, why, sizeof why));
    CHECK_MSG(strstr(why, "exhausted") != NULL, "message: %s", why);
    CHECK_OK(ss_alloc_free(a, b[3]));
    CHECK_OK(ss_alloc_free(a, b[5]));
    CHECK_OK(ss_alloc_get_stats(a, &st));
    CHECK_EQ_U64(st.largest_free_bytes, 4 * G);       /* two holes of 2 granules: one run */
    CHECK_OK(ss_alloc_malloc(a, 4 * G, &x));          /* contiguity from any free granules */
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_destroy_force(a));

    /* segment mode: the largest free run and the slack */
    c.granule_bytes = 0;
    c.segment_bytes = 256 * KiB;
    CHECK_OK(ss_alloc_new(NULL, &c, &a));
    if (!a) return;
    CHECK_OK(ss_alloc_malloc(a, 100 * KiB, &b[0]));
    CHECK_OK(ss_alloc_get_stats(a, &st));
    CHECK_EQ_U64(st.slack_bytes, 156 * KiB);
    CHECK_EQ_U64(st.largest_free_bytes, 1 * MiB - 256 * KiB);
    /* 924 KiB in use of 1 MiB would fit, but no segment can hold 824 KiB: fragmented */
    CHECK_STATUS(ss_alloc_malloc(a, 1 * MiB - 200 * KiB, &x), SS_ERR_OOM);
    CHECK_OK(ss_alloc_last_oom(a, why, sizeof why));
    CHECK_MSG(strstr(why, "fragmented") != NULL, "message: %s", why);
    CHECK_STATUS(ss_alloc_malloc(a, 1 * MiB, &x), SS_ERR_OOM);    /* the whole budget: exhausted */
    CHECK_OK(ss_alloc_last_oom(a, why, sizeof why));
    CHECK_MSG(strstr(why, "exhausted") != NULL, "message: %s", why);
    CHECK_OK(ss_alloc_destroy_force(a));
}

static void t_map_fault(void) {
    /* the fault wrapper forwards the vm slots; an allocator asked for granules on it uses them */
    ss_device_t *sim = open_sim(8 * MiB, 1), *f = NULL;
    if (!sim) return;
    CHECK_OK(ss_device_fault(sim, "alloc", 3, 0, SS_ERR_DEVICE, &f));
    if (!f) { ss_device_close(sim); return; }
    ss_alloc_config c = ss_alloc_config_default();
    c.budget_bytes = 2 * MiB;
    c.granule_bytes = 64 * KiB;
    ss_alloc_t *a = NULL;
    CHECK_OK(ss_alloc_new(f, &c, &a));
    if (!a) return;
    ss_block_t *b = NULL, *b2 = NULL;
    CHECK_OK(ss_alloc_malloc(a, 128 * KiB, &b));                  /* maps 1 and 2 */
    CHECK_STATUS(ss_alloc_malloc(a, 128 * KiB, &b2), SS_ERR_DEVICE);   /* map 3 fails */
    CHECK_OK(ss_alloc_check(a));
    CHECK_OK(ss_alloc_malloc(a, 128 * KiB, &b2));                 /* once only */
    CHECK_OK(ss_alloc_free(a, b));
    CHECK_OK(ss_alloc_free(a, b2));
    CHECK_OK(ss_alloc_destroy(a));
    ss_device_stats ds;
    CHECK_OK(ss_device_get_stats(sim, &ds));
    CHECK_EQ_U64(ds.mem_bytes_in_use, 0);
    CHECK_OK(ss_device_close(f));
}

int main(void) {
    RUN(t_device_vm);
    RUN(t_fragmentation);
    RUN(t_rule_random);
    RUN(t_pools);
    RUN(t_small_classes);
    RUN(t_guards);
    RUN(t_oom_message_stats);
    RUN(t_map_fault);
    return test_summary();
}
