/* test-exec-ss.c: the executor (src/exec.c) in SS_MEM_SMARTSWAP mode (the trainer's: the
 * executor owns the blocks of saved tensors and hands them to the allocator), driven with a
 * fixed plan (ssi_exec_set_plan) on cpu-sim's virtual clock, so that every copy's timing is
 * known. Each test is a mend of issue 14 item 7 and fails on the code before it:
 *
 *  - t_load_while_out_keeps_event: a tensor loaded while its swap-out is still pending in the
 *    allocator (X_OUT) and then released must not give its swap-out event back to the pool: the
 *    allocator queries it at the tensor's free point, and a re-recorded event there (another
 *    tensor's later copy) turns a finished copy into a counted wait;
 *  - t_poison_many_late: more than 64 late releases at one operator are all poisoned;
 *  - t_early_release_waits_for_need: the out-of-memory path releases swap-outs in flight only
 *    as far as the request needs (oldest first), instead of host-synchronising every one;
 *  - t_no_trim_at_iteration_start: planned iterations do not return the allocator's cached
 *    segments to the device at their start.
 */
#include "test.h"
#include "exec.h"
#include "plan.h"
#include "smartswap-device.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

typedef struct rig {
    ss_device_t *dev;
    ss_stream_t *compute;
    ss_alloc_t  *al;
    ss_ctx_t    *ctx;
    ss_plan     *plan;
    uint32_t     f, b;     /* operator name ids in the context */
    uint32_t     pf;       /* "f" in the plan */
} rig;

static int rig_open(rig *r, double gbps, uint64_t budget, uint64_t segment) {
    memset(r, 0, sizeof *r);
    ss_options o = ss_options_default();
    o.sim_capacity_bytes = 64 * MiB;
    o.sim_virtual_clock = 1;
    o.sim_d2h_gbps = o.sim_h2d_gbps = gbps;
    o.sim_latency_us = 0;
    o.sim_jitter_us = 0;
    CHECK_OK(ss_device_open("cpu-sim", &o, &r->dev));
    if (!r->dev) return 0;
    CHECK_OK(ss_stream_wrap(r->dev, NULL, &r->compute));
    ss_alloc_config ac = ss_alloc_config_default();
    ac.budget_bytes = budget;
    if (segment) ac.segment_bytes = segment;
    CHECK_OK(ss_alloc_new(r->dev, &ac, &r->al));
    ss_ctx_config c = ss_ctx_config_default();
    c.opts = o;
    c.opts.warmup_iters = 1000;     /* the stage machine never plans: the fixed plan runs */
    c.opts.min_swap_bytes = 0;
    c.mem_owner = SS_MEM_SMARTSWAP;
    c.device = r->dev;
    c.compute = r->compute;
    c.alloc = r->al;
    CHECK_OK(ss_ctx_new(&c, &r->ctx));
    if (!r->ctx) return 0;
    ss_exec_config ec = ss_exec_config_default();
    ec.use_policy = 0;
    ec.poison = 1;
    CHECK_OK(ss_ctx_enable_swap_ex(r->ctx, &ec));
    CHECK_OK(ss_ctx_intern(r->ctx, "f", &r->f));
    CHECK_OK(ss_ctx_intern(r->ctx, "b", &r->b));
    CHECK_OK(ssi_plan_new(&r->plan));
    if (!r->plan) return 0;
    CHECK_OK(ssi_plan_intern(r->plan, "f", &r->pf));
    return 1;
}

/* A plan entry for the tensor saved after operator ("f", site) as its ordinal-th of that op. */
static void entry(rig *r, uint64_t site, uint32_t ordinal, uint64_t bytes, uint32_t out_op,
                  uint32_t free_op, uint32_t in_op, uint32_t use_op) {
    ss_plan_entry e;
    memset(&e, 0, sizeof e);
    e.name = r->pf;
    e.site = site;
    e.dtype = SS_DTYPE_U8;
    e.ndim = 0;
    e.bytes = bytes;
    e.ordinal = ordinal;
    e.tensor = r->plan->nentries;
    e.out_op = out_op;
    e.free_op = free_op;
    e.in_op = in_op;
    e.use_op = use_op;
    CHECK_OK(ssi_plan_add_entry(r->plan, &e));
}

static void plan_set(rig *r, uint32_t nops) {
    r->plan->nops = nops;
    ssi_plan_sort(r->plan);
    CHECK_OK(ssi_exec_set_plan(r->ctx, r->plan, NULL));
}

static void rig_close(rig *r) {
    if (r->ctx) ss_ctx_free(r->ctx);
    ssi_plan_free(r->plan);
    if (r->al) CHECK_OK(ss_alloc_destroy(r->al));
    if (r->compute) CHECK_OK(ss_stream_free(r->dev, r->compute));
    if (r->dev) CHECK_OK(ss_device_close(r->dev));
}

static void fillp(void *p, uint64_t n, uint64_t pat) {
    uint64_t *w = p;
    for (uint64_t j = 0; j < n / 8; j++) w[j] = pat * 0x9E3779B97F4A7C15ull + j;
}

static int holdsp(const void *p, uint64_t n, uint64_t pat) {
    const uint64_t *w = p;
    for (uint64_t j = 0; p && j < n / 8; j++)
        if (w[j] != pat * 0x9E3779B97F4A7C15ull + j) return 0;
    return p != NULL;
}

/* A fresh block of n bytes holding pattern pat, saved; returns its handle (0 on failure). */
static uint64_t save_new(rig *r, uint64_t n, uint64_t pat, void **ptr) {
    ss_block_t *b = NULL;
    CHECK_OK(ss_alloc_malloc(r->al, (size_t)n, &b));
    if (!b) return 0;
    fillp(ss_block_ptr(b), n, pat);
    if (ptr) *ptr = ss_block_ptr(b);
    uint64_t h = 0;
    CHECK_OK(ss_ctx_save_block(r->ctx, b, SS_DTYPE_U8, 0, NULL, 0, &h));
    return h;
}

static void load_check(rig *r, uint64_t h, uint64_t n, uint64_t pat) {
    void *p = NULL;
    CHECK_OK(ss_ctx_load(r->ctx, h, NULL, &p));
    CHECK_MSG(holdsp(p, n, pat), "tensor %llu read wrong bytes", (unsigned long long)pat);
}

static ss_alloc_stats astats(rig *r) {
    ss_alloc_stats s;
    memset(&s, 0, sizeof s);
    CHECK_OK(ss_alloc_get_stats(r->al, &s));
    return s;
}

/* A is swapped out after op 0 (free point op 6), loaded at op 2 while its block is still
 * pending, and released; B and C are swapped out after op 2 and take events from the pool.
 * At op 6 the allocator queries A's swap-out event: A's copy ended long before, so there must
 * be no wait. Before the mend, A's event went back to the pool at its release, C's swap-out
 * re-recorded it, and the query at op 6 found C's copy running: a wait. */
static void t_load_while_out_keeps_event(void) {
    rig r;
    if (!rig_open(&r, 1.0, 32 * MiB, 0)) { rig_close(&r); return; }
    const uint64_t n = 1 * MiB;      /* 1.05 ms a copy at 1 GB/s */
    entry(&r, 0, 0, n, 0, 6, 6, 7);  /* A */
    entry(&r, 2, 0, n, 2, 8, 8, 9);  /* B */
    entry(&r, 2, 1, n, 2, 8, 8, 9);  /* C */
    plan_set(&r, 10);
    CHECK_OK(ss_ctx_iter_begin(r.ctx));
    CHECK_OK(ss_ctx_op(r.ctx, r.f, 0));
    uint64_t A = save_new(&r, n, 1, NULL);
    CHECK_OK(ss_ctx_op(r.ctx, r.f, 1));            /* A's swap-out */
    CHECK_OK(ss_ctx_op(r.ctx, r.f, 2));
    load_check(&r, A, n, 1);                       /* while its block is pending */
    CHECK_OK(ss_ctx_release(r.ctx, A));
    uint64_t B = save_new(&r, n, 2, NULL), C = save_new(&r, n, 3, NULL);
    CHECK_OK(ss_ctx_op(r.ctx, r.f, 3));            /* B's and C's swap-outs */
    CHECK_OK(ss_ctx_op(r.ctx, r.f, 4));
    CHECK_OK(ss_ctx_op(r.ctx, r.f, 5));
    ss_alloc_stats s0 = astats(&r);
    CHECK_OK(ss_ctx_op(r.ctx, r.f, 6));            /* A's free point */
    ss_alloc_stats s1 = astats(&r);
    CHECK_EQ_U64(s1.event_queries - s0.event_queries, 1);
    CHECK_EQ_U64(s1.waits - s0.waits, 0);
    CHECK_OK(ss_ctx_op(r.ctx, r.b, 7));
    CHECK_OK(ss_ctx_op(r.ctx, r.b, 8));
    CHECK_OK(ss_ctx_op(r.ctx, r.b, 9));
    load_check(&r, C, n, 3);
    load_check(&r, B, n, 2);
    CHECK_OK(ss_ctx_release(r.ctx, C));
    CHECK_OK(ss_ctx_release(r.ctx, B));
    ss_iter_report rep;
    CHECK_OK(ss_ctx_iter_end(r.ctx, &rep));
    CHECK_OK(ss_alloc_check(r.al));
    CHECK_EQ_U64(astats(&r).in_use_bytes, 0);
    rig_close(&r);
}

/* 70 tensors, each swapped out after its own operator, all released at op 70 while every copy
 * is still running (slow link, the host clock does not move): the allocator orders the reuse
 * after each copy, and every one of the 70 blocks must be poisoned right after op 70. Before
 * the mend, late releases beyond 64 at one operator were silently left unpoisoned. */
static void t_poison_many_late(void) {
    enum { N = 70 };
    rig r;
    if (!rig_open(&r, 0.01, 32 * MiB, 0)) { rig_close(&r); return; }
    const uint64_t n = 4 * KiB;
    for (uint32_t i = 0; i < N; i++) entry(&r, i, 0, n, i, N, N + 1, N + 2 + (N - 1 - i));
    plan_set(&r, 2 * N + 2);
    uint64_t h[N];
    void *p[N];
    CHECK_OK(ss_ctx_iter_begin(r.ctx));
    for (uint32_t i = 0; i < N; i++) {
        CHECK_OK(ss_ctx_op(r.ctx, r.f, i));
        h[i] = save_new(&r, n, 100 + i, &p[i]);
    }
    CHECK_OK(ss_ctx_op(r.ctx, r.f, N));            /* every free point, every copy late */
    uint32_t unpoisoned = 0;
    for (uint32_t i = 0; i < N; i++) {
        size_t bad = 0;
        CHECK_OK(ss_mem_check_poison(r.dev, p[i], (size_t)n, &bad));
        unpoisoned += bad != 0;
    }
    CHECK_EQ_U64(unpoisoned, 0);
    CHECK_OK(ss_ctx_op(r.ctx, r.b, N + 1));        /* swap-ins */
    for (uint32_t k = 0; k < N; k++) {
        uint32_t i = N - 1 - k;
        CHECK_OK(ss_ctx_op(r.ctx, r.b, N + 2 + k));
        load_check(&r, h[i], n, 100 + i);
        CHECK_OK(ss_ctx_release(r.ctx, h[i]));
    }
    CHECK_OK(ss_ctx_iter_end(r.ctx, NULL));
    CHECK_OK(ss_alloc_check(r.al));
    rig_close(&r);
}

/* Two swap-outs in flight (free points far away), then an allocation that fits only once one of
 * them is released: the out-of-memory path waits for the oldest copy only and releases its
 * block; the other stays pending until its free point. Before the mend, every in-flight
 * swap-out was host-synchronised and released. */
static void t_early_release_waits_for_need(void) {
    rig r;
    const uint64_t n = 1 * MiB;
    if (!rig_open(&r, 1.0, 2 * n + 256 * KiB, n)) { rig_close(&r); return; }
    entry(&r, 0, 0, n, 0, 8, 8, 9);  /* A */
    entry(&r, 1, 0, n, 1, 8, 8, 9);  /* B */
    plan_set(&r, 10);
    CHECK_OK(ss_ctx_iter_begin(r.ctx));
    CHECK_OK(ss_ctx_op(r.ctx, r.f, 0));
    uint64_t A = save_new(&r, n, 1, NULL);
    CHECK_OK(ss_ctx_op(r.ctx, r.f, 1));            /* A's swap-out */
    uint64_t B = save_new(&r, n, 2, NULL);
    CHECK_OK(ss_ctx_op(r.ctx, r.f, 2));            /* B's swap-out */
    ss_alloc_stats s0 = astats(&r);
    CHECK_EQ_U64(s0.pending_blocks, 2);
    ss_block_t *x = NULL;
    CHECK_OK(ss_alloc_malloc(r.al, (size_t)n, &x));  /* needs one of them */
    ss_alloc_stats s1 = astats(&r);
    CHECK_EQ_U64(s1.early_releases - s0.early_releases, 1);
    CHECK_EQ_U64(s1.pending_blocks, 1);
    ss_exec_report xr;
    if (x) CHECK_OK(ss_alloc_free(r.al, x));
    for (uint32_t k = 3; k < 8; k++) CHECK_OK(ss_ctx_op(r.ctx, r.f, k));
    CHECK_OK(ss_ctx_op(r.ctx, r.b, 8));
    CHECK_OK(ss_ctx_op(r.ctx, r.b, 9));
    load_check(&r, B, n, 2);
    load_check(&r, A, n, 1);
    CHECK_OK(ss_ctx_release(r.ctx, B));
    CHECK_OK(ss_ctx_release(r.ctx, A));
    CHECK_OK(ss_ctx_iter_end(r.ctx, NULL));
    CHECK_OK(ss_ctx_exec_report(r.ctx, &xr));
    CHECK_EQ_U64(xr.early_freed, n);
    CHECK_EQ_U64(xr.evictions, 0);
    CHECK_OK(ss_alloc_check(r.al));
    rig_close(&r);
}

/* Planned iterations of a steady workload reuse the allocator's cached segments: after the
 * first iteration, no segment goes back to the device and none is reserved (on CUDA each
 * cudaFree synchronises the device). Before the mend, every planned iteration trimmed them at
 * its start and reserved them again. */
static void t_no_trim_at_iteration_start(void) {
    rig r;
    if (!rig_open(&r, 4.0, 32 * MiB, 0)) { rig_close(&r); return; }
    const uint64_t n = 512 * KiB;
    enum { N = 4 };
    for (uint32_t i = 0; i < N; i++) entry(&r, i, 0, n, i, i + 1, 2 * N - 1 - i, 2 * N - i);
    plan_set(&r, 2 * N + 1);
    uint64_t frees0 = 0, allocs0 = 0;
    for (int it = 0; it < 4; it++) {
        if (it == 1) { ss_alloc_stats s = astats(&r); frees0 = s.segment_frees; allocs0 = s.segment_allocs; }
        uint64_t h[N];
        CHECK_OK(ss_ctx_iter_begin(r.ctx));
        for (uint32_t i = 0; i < N; i++) {
            CHECK_OK(ss_ctx_op(r.ctx, r.f, i));
            h[i] = save_new(&r, n, 10 * (uint64_t)it + i, NULL);
        }
        for (uint32_t k = 0; k < N; k++) {
            uint32_t i = N - 1 - k;
            CHECK_OK(ss_ctx_op(r.ctx, r.b, N + k));
            load_check(&r, h[i], n, 10 * (uint64_t)it + i);
            CHECK_OK(ss_ctx_release(r.ctx, h[i]));
        }
        CHECK_OK(ss_ctx_op(r.ctx, r.b, 2 * N));
        CHECK_OK(ss_ctx_iter_end(r.ctx, NULL));
    }
    ss_alloc_stats s = astats(&r);
    CHECK(s.segment_allocs > 0);
    CHECK_EQ_U64(s.segment_frees - frees0, 0);
    CHECK_EQ_U64(s.segment_allocs - allocs0, 0);
    CHECK_OK(ss_alloc_check(r.al));
    rig_close(&r);
}

/* A plan with its profile: two layers of three experts ("e", one call site), each expert's
 * tensor swapped out after its save and back in before its layer's backward; the iteration's
 * layer 0 expert 1 gets no tokens (its operator and save do not happen). The executor re-indexes
 * the plan's operators to the live ones (at the "f" after the experts) and matches layer 1's
 * saves by the plan's save at that operator, so each is swapped in at its own layer's point:
 * no load misses, no eviction, the bytes intact. Before, the live ordinals of "e" were shifted by
 * the skipped save for the rest of the iteration: layer 1's first expert took layer 0's last
 * entry, whose swap-in comes after layer 1's backward (a miss), and every swap-in point came
 * late by the skipped operator. */
static void t_skipped_expert_reindexed(void) {
    rig r;
    if (!rig_open(&r, 1.0, 32 * MiB, 0)) { rig_close(&r); return; }
    const uint64_t n = 64 * KiB;
    uint32_t e = 0;
    CHECK_OK(ss_ctx_intern(r.ctx, "e", &e));
    ss_profile *p = NULL;
    CHECK_OK(ssi_profile_new(&p));
    if (!p) { rig_close(&r); return; }
    uint32_t pf, pe, pb;
    CHECK_OK(ssi_profile_intern(p, "f", &pf));
    CHECK_OK(ssi_profile_intern(p, "e", &pe));
    CHECK_OK(ssi_profile_intern(p, "b", &pb));
    /* ops: 0 f10 | 1-3 e20 | 4 f30 | 5-7 e20 | 8 f30 | 9 b40 | 10 b41 (uses layer 1) | 11 b42 |
     * 12 b43 (uses layer 0) */
    const uint32_t name[13] = {pf, pe, pe, pe, pf, pe, pe, pe, pf, pb, pb, pb, pb};
    const uint64_t site[13] = {10, 20, 20, 20, 30, 20, 20, 20, 30, 40, 41, 42, 43};
    for (uint32_t i = 0; i < 13; i++) {
        ss_prof_op o;
        memset(&o, 0, sizeof o);
        o.name = name[i];
        o.site = site[i];
        o.phase = i < 9 ? SS_PHASE_FWD : SS_PHASE_BWD;
        o.seconds = 1e-4;
        CHECK_OK(ssi_profile_add_op(p, &o, NULL));
    }
    const uint32_t prod[6] = {1, 2, 3, 5, 6, 7};
    for (uint32_t t = 0; t < 6; t++) {
        ss_prof_tensor y;
        memset(&y, 0, sizeof y);
        y.bytes = n;
        y.dtype = SS_DTYPE_U8;
        y.producer = prod[t];
        y.release = t < 3 ? 12 : 10;
        y.flags = SS_TENSOR_SAVED;
        CHECK_OK(ssi_profile_add_tensor(p, &y, NULL));
    }
    for (uint32_t t = 3; t < 6; t++) CHECK_OK(ssi_profile_add_use(p, t, 10));
    for (uint32_t t = 0; t < 3; t++) CHECK_OK(ssi_profile_add_use(p, t, 12));
    CHECK_OK(ssi_profile_finalize(p));
    /* entries: out after its save, free one op later, in one op before its use */
    for (uint32_t t = 0; t < 6; t++) {
        ss_plan_entry en;
        memset(&en, 0, sizeof en);
        en.name = r.pf;
        en.site = 20;
        en.dtype = SS_DTYPE_U8;
        en.bytes = n;
        en.ordinal = t;
        en.tensor = t;
        en.out_op = prod[t];
        en.free_op = prod[t] + 1;
        en.in_op = t < 3 ? 11 : 9;
        en.use_op = t < 3 ? 12 : 10;
        CHECK_OK(ssi_plan_add_entry(r.plan, &en));
    }
    r.plan->nops = 13;
    ssi_plan_sort(r.plan);
    CHECK_OK(ssi_exec_set_plan(r.ctx, r.plan, p));
    CHECK_OK(ss_ctx_iter_begin(r.ctx));
    uint64_t h[6];
    const int live_t[5] = {0, 2, 3, 4, 5};   /* the plan's tensors the live saves stand for */
    CHECK_OK(ss_ctx_op(r.ctx, r.f, 10));
    for (int k = 0; k < 2; k++) {   /* layer 0: experts 0 and 2 */
        CHECK_OK(ss_ctx_op(r.ctx, e, 20));
        h[live_t[k]] = save_new(&r, n, (uint64_t)live_t[k] + 1, NULL);
    }
    CHECK_OK(ss_ctx_op(r.ctx, r.f, 30));
    for (int k = 2; k < 5; k++) {   /* layer 1: experts 0, 1, 2 */
        CHECK_OK(ss_ctx_op(r.ctx, e, 20));
        h[live_t[k]] = save_new(&r, n, (uint64_t)live_t[k] + 1, NULL);
    }
    CHECK_OK(ss_ctx_op(r.ctx, r.f, 30));
    CHECK_OK(ss_ctx_op(r.ctx, r.b, 40));
    CHECK_OK(ss_ctx_op(r.ctx, r.b, 41));
    for (int t = 5; t >= 3; t--) { load_check(&r, h[t], n, (uint64_t)t + 1); CHECK_OK(ss_ctx_release(r.ctx, h[t])); }
    CHECK_OK(ss_ctx_op(r.ctx, r.b, 42));
    CHECK_OK(ss_ctx_op(r.ctx, r.b, 43));
    for (int k = 1; k >= 0; k--) {
        int t = live_t[k];
        load_check(&r, h[t], n, (uint64_t)t + 1);
        CHECK_OK(ss_ctx_release(r.ctx, h[t]));
    }
    ss_iter_report rep;
    CHECK_OK(ss_ctx_iter_end(r.ctx, &rep));
    ss_exec_report er;
    CHECK_OK(ss_ctx_exec_report(r.ctx, &er));
    CHECK_EQ_U64(er.swap_outs, 5);
    CHECK_EQ_U64(er.swap_ins, 5);
    CHECK_EQ_U64(er.misses, 0);
    CHECK_EQ_U64(er.evictions, 0);
    CHECK_OK(ss_alloc_check(r.al));
    CHECK_EQ_U64(astats(&r).in_use_bytes, 0);
    ssi_exec_set_plan(r.ctx, NULL, NULL);
    ssi_profile_free(p);
    rig_close(&r);
}

int main(void) {
    RUN(t_load_while_out_keeps_event);
    RUN(t_poison_many_late);
    RUN(t_early_release_waits_for_need);
    RUN(t_no_trim_at_iteration_start);
    RUN(t_skipped_expert_reindexed);
    return test_summary();
}
