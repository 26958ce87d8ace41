/* test-sim.c: the simulator (src/sim.c): time estimates, the byte model against the full run,
 * the event model's copy, free and wait times on hand-made profiles, unattributed memory, the
 * budget, plan validation, and the incremental pieces (segment tree against brute force, fluid
 * copy streams).
 */
#include "sim.h"
#include "test.h"

#define MiB (1024.0 * 1024.0)

/* n ops, phase FWD for the first half, named "op", 1 s each in layer mode (iter = n s). */
static ss_profile *mk(uint32_t n) {
    ss_profile *p;
    if (ssi_profile_new(&p)) return NULL;
    uint32_t id;
    ssi_profile_intern(p, "op", &id);
    for (uint32_t i = 0; i < n; i++) {
        ss_prof_op o = {0};
        o.name = id;
        o.phase = i < n / 2 ? SS_PHASE_FWD : SS_PHASE_BWD;
        o.site = 1000 + i;
        ssi_profile_add_op(p, &o, NULL);
    }
    p->iter_seconds = n;
    return p;
}

static uint32_t tens(ss_profile *p, uint64_t bytes, uint32_t prod, uint32_t rel, int saved) {
    ss_prof_tensor t = {0};
    t.bytes = bytes;
    t.dtype = SS_DTYPE_BF16;
    t.ndim = 1;
    t.shape[0] = (int64_t)(bytes / 2);
    t.producer = prod;
    t.release = rel;
    t.flags = saved ? SS_TENSOR_SAVED : 0;
    uint32_t idx;
    ssi_profile_add_tensor(p, &t, &idx);
    return idx;
}

static ssi_sim_config cfg1(uint32_t n) {
    ssi_sim_config c;
    memset(&c, 0, sizeof c);
    c.d2h_bps = MiB;   /* 1 MiB/s: a 1 MiB copy takes 1 s */
    c.h2d_bps = MiB;
    c.time.mode = SSI_TIME_LAYER;
    c.time.layers = n;
    c.record_ops = 1;
    return c;
}

static ss_plan *plan1(const ss_profile *p, uint32_t t, uint32_t out, uint32_t fr, uint32_t in,
                      uint32_t use) {
    ss_plan *pl;
    if (ssi_plan_new(&pl)) return NULL;
    ss_plan_entry e;
    ssi_plan_entry_from_tensor(pl, p, t, &e);
    e.out_op = out; e.free_op = fr; e.in_op = in; e.use_op = use;
    ssi_plan_add_entry(pl, &e);
    ssi_plan_set_checkpoints(pl, p, 4);
    return pl;
}

static void t_no_plan(void) {
    ss_profile *p = mk(10);
    p->base_bytes = 1000;   /* rounds to 1024 */
    uint32_t x = tens(p, 1 << 20, 0, 8, 1);
    tens(p, 3000, 2, 3, 0);   /* a temporary, 3072 rounded */
    ssi_profile_add_use(p, x, 8);
    CHECK_OK(ssi_profile_finalize(p));
    uint64_t lv[10];
    CHECK_OK(ssi_sim_levels(p, lv));
    CHECK_EQ_U64(lv[0], 1024 + (1 << 20));
    CHECK_EQ_U64(lv[2], 1024 + (1 << 20) + 3072);
    CHECK_EQ_U64(lv[3], 1024 + (1 << 20) + 3072);   /* released after op 3 */
    CHECK_EQ_U64(lv[4], 1024 + (1 << 20));
    CHECK_EQ_U64(lv[9], 1024);
    ssi_sim_config c = cfg1(10);
    ssi_sim_result r;
    char err[200];
    CHECK_OK(ssi_sim_run(p, NULL, &c, &r, err, sizeof err));
    CHECK_EQ_U64(r.peak_bytes, 1024 + (1 << 20) + 3072);
    CHECK_EQ_U64(r.alloc.peak_in_use_bytes, r.peak_bytes);   /* the allocator agrees */
    CHECK_NEAR(r.iter_s, 10.0, 1e-9);
    CHECK_NEAR(r.stall_s, 0.0, 1e-12);
    CHECK_EQ_INT(r.oom, 0);
    CHECK_EQ_INT(r.nlayers, 10);
    CHECK_EQ_U64(r.layers[2].peak_bytes, lv[2]);
    CHECK_NEAR(r.layers[4].t_start, 4.0, 1e-9);
    for (uint32_t i = 0; i < 10; i++) CHECK_EQ_U64(r.op_mem[i], lv[i]);
    ssi_sim_result_free(&r);
    /* a budget below the peak: the allocator refuses, the run goes on and says so */
    c.budget_bytes = (1 << 20) + 2048;
    CHECK_OK(ssi_sim_run(p, NULL, &c, &r, err, sizeof err));
    CHECK_EQ_INT(r.oom, 1);
    CHECK_EQ_INT(r.oom_op, 2);
    ssi_sim_result_free(&r);
    ssi_profile_free(p);
}

static void t_unattributed(void) {
    ss_profile *p = mk(6);
    p->base_bytes = 4096;
    uint32_t x = tens(p, 8192, 1, 4, 1);
    ssi_profile_add_use(p, x, 4);
    CHECK_OK(ssi_profile_finalize(p));
    /* mem_after: base + known alive after op, plus 1000 unattributed bytes after op 2 and
     * 5000 after op 3; op 5 reports less than the known bytes (clamped to 0) */
    uint64_t known[6] = {4096, 4096 + 8192, 4096 + 8192, 4096 + 8192, 4096, 4096};
    for (int i = 0; i < 6; i++) p->ops[i].mem_after = known[i];
    p->ops[2].mem_after += 1000;
    p->ops[3].mem_after += 5000;
    p->ops[5].mem_after = 10;
    uint64_t o[6], lv[6];
    CHECK_OK(ssi_sim_other(p, o));
    CHECK_EQ_U64(o[2], 1000);
    CHECK_EQ_U64(o[3], 5000);
    CHECK_EQ_U64(o[5], 0);
    CHECK_OK(ssi_sim_levels(p, lv));
    CHECK_EQ_U64(lv[2], 4096 + 8192 + 1024);
    CHECK_EQ_U64(lv[3], 4096 + 8192 + 5120);
    /* what op 3 left (5000 -> 5120) is still held while op 4 runs (the real run frees it at
     * op 4's end); op 4 and op 5 report none */
    CHECK_EQ_U64(lv[4], 4096 + 8192 + 5120);
    CHECK_EQ_U64(lv[5], 4096);
    ssi_sim_config c = cfg1(6);
    c.record_ops = 1;
    ssi_sim_result r;
    CHECK_OK(ssi_sim_run(p, NULL, &c, &r, NULL, 0));
    CHECK_EQ_U64(r.peak_bytes, 4096 + 8192 + 5120);
    CHECK_EQ_U64(r.alloc.peak_in_use_bytes, r.peak_bytes);
    for (int i = 0; i < 6; i++) CHECK_EQ_U64(r.op_mem[i], lv[i]);   /* the byte model, op by op */
    ssi_sim_result_free(&r);
    ssi_profile_free(p);
}

/* One swapped tensor: copy, free and wait times follow the documented event model. */
static void t_event_model(void) {
    ss_profile *p = mk(10);
    uint32_t x = tens(p, 1 << 20, 0, 8, 1);
    ssi_profile_add_use(p, x, 8);
    CHECK_OK(ssi_profile_finalize(p));
    ssi_sim_config c = cfg1(10);
    ssi_sim_result r;
    char err[200];
    /* hidden: out after op 0 (1 s .. 2 s), free at op 2 (reached at 2 s), in at op 6
     * (6 s .. 7 s), used at op 8 (8 s) */
    ss_plan *pl = plan1(p, x, 0, 2, 6, 8);
    CHECK_OK(ssi_sim_run(p, pl, &c, &r, err, sizeof err));
    CHECK_NEAR(r.t_out_done[0], 2.0, 1e-9);
    CHECK_NEAR(r.t_in_done[0], 7.0, 1e-9);
    CHECK_NEAR(r.t_use[0], 8.0, 1e-9);
    CHECK_NEAR(r.iter_s, 10.0, 1e-9);
    CHECK_NEAR(r.stall_s, 0.0, 1e-12);
    CHECK_EQ_U64(r.d2h_bytes, 1 << 20);
    CHECK_EQ_U64(r.h2d_bytes, 1 << 20);
    CHECK_EQ_U64(r.host_bytes, 1 << 20);
    CHECK_EQ_INT(r.late_frees, 0);
    CHECK_EQ_INT(r.late_uses, 0);
    CHECK_EQ_U64(r.op_mem[1], 1 << 20);
    CHECK_EQ_U64(r.op_mem[2], 0);       /* freed at op 2 */
    CHECK_EQ_U64(r.op_mem[5], 0);
    CHECK_EQ_U64(r.op_mem[6], 1 << 20); /* swapped in at op 6 */
    CHECK_EQ_U64(r.op_mem[9], 0);       /* released after op 8 */
    CHECK_EQ_U64(r.peak_bytes, 1 << 20);
    CHECK_EQ_INT(r.early_uses, 0);
    ssi_sim_result_free(&r);
    ssi_plan_free(pl);
    /* late: free at op 1 (reached at 1 s, copy done at 2 s: wait 1 s); swap-in at the use
     * op 8 (reached at 9 s, copy 9 .. 10 s: wait 1 s) */
    pl = plan1(p, x, 0, 1, 8, 8);
    CHECK_OK(ssi_sim_run(p, pl, &c, &r, err, sizeof err));
    CHECK_NEAR(r.stall_s, 2.0, 1e-9);
    CHECK_NEAR(r.iter_s, 12.0, 1e-9);
    CHECK_EQ_INT(r.late_frees, 1);
    CHECK_EQ_INT(r.late_uses, 1);
    CHECK_NEAR(r.t_in_done[0], 10.0, 1e-9);
    CHECK_NEAR(r.t_use[0], 10.0, 1e-9);
    CHECK_NEAR(r.layers[1].stall_s, 1.0, 1e-9);
    CHECK_NEAR(r.layers[8].stall_s, 1.0, 1e-9);
    ssi_sim_result_free(&r);
    ssi_plan_free(pl);
    /* copy latency adds to each copy */
    c.copy_latency_s = 0.25;
    pl = plan1(p, x, 0, 2, 6, 8);
    CHECK_OK(ssi_sim_run(p, pl, &c, &r, err, sizeof err));
    CHECK_NEAR(r.t_out_done[0], 2.25, 1e-9);
    CHECK_NEAR(r.stall_s, 0.25, 1e-9);   /* the free at op 2 (2 s) waits for 2.25 s */
    ssi_sim_result_free(&r);
    ssi_plan_free(pl);
    ssi_profile_free(p);
}

/* The two copy streams are FIFO and run at the same time as each other. */
static void t_streams(void) {
    ss_profile *p = mk(12);
    uint32_t a = tens(p, 2 << 20, 0, 10, 1), b = tens(p, 2 << 20, 0, 11, 1);
    ssi_profile_add_use(p, a, 10);
    ssi_profile_add_use(p, b, 11);
    CHECK_OK(ssi_profile_finalize(p));
    ss_plan *pl;
    ssi_plan_new(&pl);
    ss_plan_entry e;
    ssi_plan_entry_from_tensor(pl, p, a, &e);
    e.out_op = 0; e.free_op = 3; e.in_op = 6; e.use_op = 10;
    ssi_plan_add_entry(pl, &e);
    ssi_plan_entry_from_tensor(pl, p, b, &e);
    e.out_op = 0; e.free_op = 5; e.in_op = 6; e.use_op = 11;
    ssi_plan_add_entry(pl, &e);
    pl->nops = 12;
    ssi_sim_config c = cfg1(12);
    ssi_sim_result r;
    CHECK_OK(ssi_sim_run(p, pl, &c, &r, NULL, 0));
    CHECK_NEAR(r.t_out_done[0], 3.0, 1e-9);   /* 1 .. 3 */
    CHECK_NEAR(r.t_out_done[1], 5.0, 1e-9);   /* queued behind: 3 .. 5 */
    CHECK_NEAR(r.t_in_done[0], 8.0, 1e-9);    /* 6 .. 8 */
    CHECK_NEAR(r.t_in_done[1], 10.0, 1e-9);   /* 8 .. 10 */
    CHECK_NEAR(r.stall_s, 0.0, 1e-12);
    CHECK_EQ_U64(r.host_bytes, 4 << 20);
    ssi_sim_result_free(&r);
    ssi_plan_free(pl);
    ssi_profile_free(p);
}

static void t_bad_plans(void) {
    ss_profile *p = mk(10);
    uint32_t x = tens(p, 1 << 20, 0, 8, 1);
    ssi_profile_add_use(p, x, 3);
    ssi_profile_add_use(p, x, 8);
    CHECK_OK(ssi_profile_finalize(p));
    ssi_sim_config c = cfg1(10);
    ssi_sim_result r;
    char err[200];
    ss_plan *pl = plan1(p, x, 0, 1, 5, 8);   /* used at op 3 while swapped out */
    CHECK_STATUS(ssi_sim_run(p, pl, &c, &r, err, sizeof err), SS_ERR_INVALID);
    CHECK(strstr(err, "used at op 3") != NULL);
    ssi_plan_free(pl);
    pl = plan1(p, x, 3, 4, 5, 8);            /* fine */
    CHECK_OK(ssi_sim_run(p, pl, &c, &r, err, sizeof err));
    ssi_sim_result_free(&r);
    pl->entries[0].bytes = 7;
    CHECK_STATUS(ssi_sim_run(p, pl, &c, &r, err, sizeof err), SS_ERR_INVALID);
    pl->entries[0].bytes = 1 << 20;
    pl->nops = 11;
    CHECK_STATUS(ssi_sim_run(p, pl, &c, &r, err, sizeof err), SS_ERR_INVALID);
    CHECK(strstr(err, "11 operators") != NULL);
    ssi_plan_free(pl);
    c.d2h_bps = 0;
    CHECK_STATUS(ssi_sim_run(p, NULL, &c, &r, err, sizeof err), SS_ERR_INVALID);
    ssi_profile_free(p);
}

static void t_time_modes(void) {
    ss_profile *p = mk(10);
    CHECK_OK(ssi_profile_finalize(p));
    double d[10];
    char err[200];
    ssi_time_config tc = {0};
    tc.mode = SSI_TIME_LAYER;
    tc.layers = 3;   /* layers of 3, 3, 4 ops: each layer 10/3 s */
    CHECK_OK(ssi_sim_op_times(p, &tc, d, err, sizeof err));
    CHECK_NEAR(d[0], 10.0 / 3 / 3, 1e-12);
    CHECK_NEAR(d[9], 10.0 / 3 / 4, 1e-12);
    double sum = 0;
    for (int i = 0; i < 10; i++) sum += d[i];
    CHECK_NEAR(sum, 10.0, 1e-9);
    tc.iter_seconds = 20;
    CHECK_OK(ssi_sim_op_times(p, &tc, d, err, sizeof err));
    CHECK_NEAR(d[0], 20.0 / 9, 1e-12);
    p->iter_seconds = 0;
    tc.iter_seconds = 0;
    CHECK_STATUS(ssi_sim_op_times(p, &tc, d, err, sizeof err), SS_ERR_INVALID);
    CHECK(strstr(err, "--iter-time") != NULL);
    tc.mode = SSI_TIME_FLOPS;
    tc.flops_per_s = 1e12;
    CHECK_STATUS(ssi_sim_op_times(p, &tc, d, err, sizeof err), SS_ERR_INVALID);   /* no FLOPs */
    for (int i = 0; i < 10; i++) p->ops[i].flops = 1e12 * (i + 1);
    tc.op_overhead_s = 1e-6;
    CHECK_OK(ssi_sim_op_times(p, &tc, d, err, sizeof err));
    CHECK_NEAR(d[4], 5.0 + 1e-6, 1e-12);
    tc.mode = SSI_TIME_MEASURED;
    CHECK_STATUS(ssi_sim_op_times(p, &tc, d, err, sizeof err), SS_ERR_INVALID);
    p->ops[3].seconds = 0.5;
    CHECK_OK(ssi_sim_op_times(p, &tc, d, err, sizeof err));
    CHECK_NEAR(d[3], 0.5, 0);
    /* AUTO: one timed op of ten is too few: the logical-layer estimate (iteration time 10 s) */
    p->iter_seconds = 10;
    tc.mode = SSI_TIME_AUTO;
    tc.layers = 0;
    CHECK(!ssi_profile_has_op_times(p));
    CHECK_OK(ssi_sim_op_times(p, &tc, d, err, sizeof err));
    CHECK_NEAR(d[3], 10.0 / ssi_default_layers(10) / (double)(ssi_layer_first(10, ssi_default_layers(10), 2) -
               ssi_layer_first(10, ssi_default_layers(10), 1)), 1e-12);
    /* half timed (0.1 .. 0.5 s): measured, the untimed ones get the mean (0.3 s) */
    for (int i = 0; i < 5; i++) p->ops[2 * i].seconds = 0.1 * (i + 1);
    p->ops[3].seconds = 0;
    CHECK(ssi_profile_has_op_times(p));
    CHECK_OK(ssi_sim_op_times(p, &tc, d, err, sizeof err));
    CHECK_NEAR(d[0], 0.1, 0);
    CHECK_NEAR(d[8], 0.5, 0);
    CHECK_NEAR(d[1], 0.3, 1e-12);
    CHECK_NEAR(d[9], 0.3, 1e-12);
    CHECK_EQ_INT(ssi_default_layers(10000), 100);
    CHECK_EQ_INT(ssi_default_layers(1), 1);
    CHECK_EQ_INT(ssi_default_layers(2), 2);
    ssi_profile_free(p);
}

static void t_simx(void) {
    ssi_rng g;
    ssi_rng_seed(&g, 42);
    for (int round = 0; round < 20; round++) {
        uint32_t n = 1 + (uint32_t)ssi_rng_below(&g, 200);
        uint64_t init[200];
        int64_t v[200];
        for (uint32_t i = 0; i < n; i++) v[i] = (int64_t)(init[i] = ssi_rng_below(&g, 1000));
        ssi_simx *x;
        CHECK_OK(ssi_simx_new(n, init, &x));
        int bad = 0;
        for (int step = 0; step < 300; step++) {
            uint32_t lo = (uint32_t)ssi_rng_below(&g, n), hi = lo + 1 + (uint32_t)ssi_rng_below(&g, n - lo);
            int op = (int)ssi_rng_below(&g, 4);
            int64_t lim = (int64_t)ssi_rng_below(&g, 1200) - 100;
            if (op == 0) {
                int64_t d = (int64_t)ssi_rng_below(&g, 201) - 100;
                ssi_simx_add(x, lo, hi, d);
                for (uint32_t i = lo; i < hi; i++) v[i] += d;
            } else if (op == 1) {
                int64_t m = INT64_MIN;
                for (uint32_t i = lo; i < hi; i++) if (v[i] > m) m = v[i];
                if (ssi_simx_max(x, lo, hi) != m) bad++;
            } else if (op == 2) {
                uint32_t f = SS_NONE;
                for (uint32_t i = lo; i < hi; i++) if (v[i] > lim) { f = i; break; }
                if (ssi_simx_first_above(x, lo, hi, lim) != f) bad++;
            } else {
                uint32_t f = SS_NONE;
                for (uint32_t i = lo; i < hi; i++) if (v[i] > lim) f = i;
                if (ssi_simx_last_above(x, lo, hi, lim) != f) bad++;
            }
        }
        CHECK_EQ_INT(bad, 0);
        ssi_simx_free(x);
    }
}

static void t_fluid(void) {
    double dur[6] = {1, 1, 0, 1, 1, 1};
    ssi_fluid *f;
    CHECK_OK(ssi_fluid_new(6, dur, &f));
    CHECK_EQ_INT(ssi_fluid_forward(f, 0, 6, 1.5, 0), 1);
    CHECK_EQ_INT(ssi_fluid_forward(f, 0, 6, 1.5, 1), 1);   /* slot 0 full, slot 1 half */
    CHECK_EQ_INT(ssi_fluid_forward(f, 0, 6, 1.0, 0), 3);   /* 0.5 in 1, skips 2 (no time) */
    CHECK_EQ_INT(ssi_fluid_forward(f, 0, 3, 1.0, 0), SS_NONE);
    CHECK_EQ_INT(ssi_fluid_backward(f, 6, 0, 2.0, 0), 4);
    CHECK_EQ_INT(ssi_fluid_backward(f, 6, 0, 3.5, 1), 1);  /* 5, 4, 3 full, 0.5 of 1 */
    CHECK_EQ_INT(ssi_fluid_backward(f, 6, 0, 0.1, 0), SS_NONE);
    CHECK_EQ_INT(ssi_fluid_forward(f, 0, 6, 0.1, 0), SS_NONE);
    ssi_fluid_free(f);
}

int main(void) {
    RUN(t_no_plan);
    RUN(t_unattributed);
    RUN(t_event_model);
    RUN(t_streams);
    RUN(t_bad_plans);
    RUN(t_time_modes);
    RUN(t_simx);
    RUN(t_fluid);
    return test_summary();
}
