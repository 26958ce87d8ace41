/* test-replay.c: the replay driver against the simulator and under stress (issue 5's acceptance):
 *  - virtual clock, fixed plan: measured peak and stall time equal ssi_sim_run's exactly, for
 *    several scaled-down presets;
 *  - stage machine + policy on `trace gen` profiles at 1/2, 1/3, 1/4 of the unconstrained peak:
 *    no corrupt read, no out-of-memory, peak <= budget, bytes swapped; Stable iterations on a
 *    steady sequence: no eviction, stall within the plan's prediction;
 *  - only the sequence length / per-expert token counts vary: >= 95 % of planned bytes matched,
 *    no eviction;
 *  - stress (real clock, copy jitter, a different sequence every iteration): no corrupt read,
 *    no out-of-memory, evictions counted;
 *  - offload-all mode, stock release mode, a profile with no room at all (clear OOM).
 * Everything is small, so the file runs in seconds. Sanitizer builds (TSan, ASan: every pattern
 * byte written and checked is instrumented) run the same code paths on shorter sequences, fewer
 * layers and fewer iterations (SANITIZED below), so the file stays under ~20 s there too.
 */
#include "test.h"
#include "replay.h"
#include "policy.h"
#include "workload.h"

#include <math.h>

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif
/* The long profiles' sizes: full, or in sanitizer builds every dimension that scales bytes
 * (sequence, hidden, ffn, vocabulary) divided by 4, so that every tensor and the weights shrink
 * by the same 16x and the activation:weight ratio (what the budgets mean) stays; segments are
 * divided by 4 (by 16, the seq-varying run needs one eviction at iteration 3: fragmentation the
 * 5 % plan headroom does not cover at that granularity). Iterations are cut too. */
#define SHRINK      (SANITIZED ? 4u : 1u)
#define LONG_HIDDEN (64u / SHRINK)
#define LONG_FFN    (128u / SHRINK)
#define LONG_VOCAB  (256u / SHRINK)
#define SEQ(n)      ((n) / SHRINK)
#define SEG_LONG    (SEG / SHRINK)
#define ITERS(n, s) (SANITIZED ? (s) : (n))

typedef struct gen_spec {
    const char *preset;
    uint32_t layers, hidden, heads, kv, ffn, vocab, seq, E, K;
    int flash;
} gen_spec;

static ss_profile *gen(const gen_spec *g) {
    ssi_workload_config c;
    ssi_workload_default(&c);
    if (ssi_workload_preset(&c, g->preset)) return NULL;
    c.layers = g->layers;
    c.hidden = g->hidden;
    c.heads = g->heads;
    c.kv_heads = g->kv;
    c.ffn = g->ffn;
    c.vocab = g->vocab;
    if (c.max_pos) c.max_pos = g->seq;
    c.seq = g->seq;
    c.batch = 1;
    c.moe_experts = g->E;
    c.moe_topk = g->K;
    c.flash = g->flash;
    c.dtype_bytes = 4;
    ss_profile *p = NULL;
    char err[256];
    if (ssi_workload_generate(&c, &p, NULL, err, sizeof err)) {
        fprintf(stderr, "workload: %s\n", err);
        return NULL;
    }
    return p;
}

static const gen_spec specs[] = {
    {"llama-3.2-1b", 3, 128, 4, 2, 256, 512, 64, 0, 0, 1},
    {"gpt2-124m", 3, 128, 4, 4, 512, 512, 64, 0, 0, 0},
    {"llama-3.2-1b", 2, 128, 4, 2, 128, 512, 64, 4, 2, 1},
    {"llama-2-7b", 4, 64, 2, 2, 128, 256, 128, 0, 0, 0},
};

static uint64_t unconstrained_peak(const ss_profile *p) {
    uint64_t *lv = calloc(p->nops + 1, sizeof *lv), pk = 0;
    ssi_sim_levels(p, lv);
    for (uint32_t i = 0; i < p->nops; i++) if (lv[i] > pk) pk = lv[i];
    free(lv);
    return pk;
}

#define SEG (64u << 10)   /* segments small enough for these small models */

static ss_options vopts(uint64_t budget) {
    ss_options o = ss_options_default();
    o.budget_bytes = budget;
    o.sim_virtual_clock = 1;
    o.sim_d2h_gbps = 2;
    o.sim_h2d_gbps = 2;
    o.min_swap_bytes = 0;
    o.seed = 7;
    return o;
}

/* Exactness: same profile, plan and budget: replay (virtual clock) == simulator; with plain
 * segments and with virtual-memory granules (the simulator emulates the same granules and pools,
 * so the allocator's peak reserved equals its prediction within one granule per pool: issue 14's
 * acceptance item 2). */
static void t_exact_vs_sim(void) {
    static const uint64_t granules[] = {0, 16u << 10, 64u << 10};
    for (size_t gi = 0; gi < sizeof granules / sizeof granules[0]; gi++)
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        const uint64_t G = granules[gi];
        ss_profile *p0 = gen(&specs[s]), *p = NULL;
        CHECK(p0 != NULL);
        if (!p0) continue;
        CHECK_OK(ssi_replay_normalize(p0, &p));
        uint64_t pk = unconstrained_peak(p);
        for (int div = 2; div <= 3; div++) {
            uint64_t budget = p->base_bytes + (pk - p->base_bytes) / (uint64_t)div;
            ss_options o = vopts(budget);
            o.granule_bytes = G;
            ssi_policy_config pc;
            ssi_policy_config_from_options(&o, &pc);
            pc.segment_bytes = SEG;
            pc.granule_bytes = G;
            ss_plan *plan = NULL;
            ssi_policy_report prep;
            char err[256];
            CHECK_OK(ssi_policy_plan(p, &pc, &plan, &prep, err, sizeof err));
            if (!plan) continue;
            if (!plan->feasible) {   /* plan at the smallest budget that fits instead */
                o.budget_bytes = pc.budget_bytes = plan->min_budget_bytes;
                ssi_plan_free(plan);
                plan = NULL;
                CHECK_OK(ssi_policy_plan(p, &pc, &plan, &prep, err, sizeof err));
                if (!plan) continue;
            }
            ssi_sim_config sc = ssi_policy_sim_config(&pc, pc.budget_bytes);   /* the planner's own */
            ssi_sim_result sr;
            CHECK_OK(ssi_sim_run(p, plan, &sc, &sr, err, sizeof err));
            CHECK_EQ_U64(sr.alloc.granule_bytes, G);
            ssi_replay_config rc;
            ssi_replay_config_default(&rc);
            rc.opts = o;
            rc.plan = plan;
            rc.segment_bytes = SEG;
            rc.plan_from_profile = 1;
            rc.time = pc.time;
            rc.keep_iters = 1;
            ssi_replay_result r;
            CHECK_OK(ssi_replay_run(p, &rc, &r, err, sizeof err));
            CHECK_MSG(plan->nentries > 0, "spec %zu /%d: budget %llu peak %llu base %llu: %s", s, div,
                      (unsigned long long)budget, (unsigned long long)pk,
                      (unsigned long long)p->base_bytes, prep.why);
            CHECK_EQ_U64(r.corrupt_reads, 0);
            CHECK_EQ_U64(r.oom, 0);
            CHECK_EQ_U64(sr.oom, 0);
            if (r.it) {
                CHECK_EQ_U64(r.it[0].peak_bytes, sr.peak_bytes);
                CHECK_MSG(r.it[0].stall_s == sr.stall_s, "spec %zu /%d: stall %.17g vs sim %.17g",
                          s, div, r.it[0].stall_s, sr.stall_s);
                CHECK_MSG(r.it[0].iter_s == sr.iter_s, "iter %.17g vs sim %.17g", r.it[0].iter_s, sr.iter_s);
                CHECK_EQ_U64(r.it[0].x.matched_exact, plan->nentries);
                CHECK_EQ_U64(r.it[0].x.evictions, 0);
                CHECK_EQ_U64(r.it[0].x.misses, 0);
                CHECK_EQ_U64(r.swapped_bytes, sr.d2h_bytes);
                CHECK(r.peak_bytes <= o.budget_bytes);
            }
            /* the allocator's peak reserved against the simulator's prediction: equal with
             * plain segments, within one granule per pool (small, iteration, persistent) */
            CHECK_EQ_U64(r.granule_bytes, G);
            uint64_t d = r.peak_reserved_bytes > sr.peak_reserved_bytes
                             ? r.peak_reserved_bytes - sr.peak_reserved_bytes
                             : sr.peak_reserved_bytes - r.peak_reserved_bytes;
            CHECK_MSG(d <= 3 * G, "spec %zu /%d granule %llu: peak reserved %llu, simulator %llu",
                      s, div, (unsigned long long)G, (unsigned long long)r.peak_reserved_bytes,
                      (unsigned long long)sr.peak_reserved_bytes);
            CHECK(sr.peak_reserved_bytes > 0);
            ssi_replay_result_free(&r);
            ssi_sim_result_free(&sr);
            ssi_plan_free(plan);
        }
        ssi_profile_free(p);
        ssi_profile_free(p0);
    }
}

/* A profile whose activations dominate (long sequence, small model). */
static ss_profile *gen_long(uint32_t E, uint32_t K, uint32_t seq) {
    gen_spec g = {"llama-3.2-1b", 12, LONG_HIDDEN, 2, 2, LONG_FFN, LONG_VOCAB, SEQ(seq), E, K, 1};
    return gen(&g);
}

static ssi_replay_config stage_cfg(uint64_t budget, uint32_t iters) {
    ssi_replay_config rc;
    ssi_replay_config_default(&rc);
    rc.opts = vopts(budget);
    rc.opts.warmup_iters = 1;
    rc.iters = iters;
    rc.segment_bytes = SEG_LONG;
    rc.keep_iters = 1;
    return rc;
}

static void check_clean(const ssi_replay_result *r, uint64_t budget, const char *what) {
    CHECK_MSG(r->corrupt_reads == 0, "%s: %llu corrupt reads", what, (unsigned long long)r->corrupt_reads);
    CHECK_MSG(r->oom == 0, "%s: out of memory", what);
    CHECK_MSG(r->peak_bytes <= budget, "%s: peak %llu above budget %llu", what,
              (unsigned long long)r->peak_bytes, (unsigned long long)budget);
}

/* Stage machine + policy, trace gen profiles at 1/2, 1/3, 1/4 of the unconstrained peak. */
static void t_stage_budgets(void) {
    ss_profile *p0 = gen_long(0, 0, 1024), *p = NULL;
    CHECK(p0 != NULL);
    if (!p0) return;
    CHECK_OK(ssi_replay_normalize(p0, &p));
    uint64_t pk = unconstrained_peak(p);
    for (uint64_t div = 2; div <= 4; div++) {
        uint64_t budget = pk / div;
        uint32_t iters = ITERS(7, 5);   /* WarmUp, GenPolicy, then Stable ones */
        ssi_replay_config rc = stage_cfg(budget, iters);
        ssi_replay_result r;
        char err[256], what[64];
        snprintf(what, sizeof what, "peak/%llu", (unsigned long long)div);
        CHECK_OK(ssi_replay_run(p, &rc, &r, err, sizeof err));
        check_clean(&r, budget, what);
        CHECK_EQ_U64(r.iters, iters);
        CHECK(r.swapped_bytes > 0);
        CHECK(r.plans_made >= 1);
        int stable = 0;
        for (uint32_t i = 0; r.it && i < r.iters; i++) {
            const ssi_replay_iter *ri = &r.it[i];
            if (ri->stage != SS_STAGE_STABLE) continue;
            if (stable++ == 0) continue;   /* the first Stable iteration may still re-plan */
            CHECK_MSG(ri->x.evictions == 0, "%s iter %u: %u evictions", what, i, ri->x.evictions);
            CHECK_MSG(ri->predicted_stall_s >= 0 && ri->stall_s <= ri->predicted_stall_s * (1 + 1e-9) + 1e-12,
                      "%s iter %u: stall %.9g above the prediction %.9g", what, i, ri->stall_s,
                      ri->predicted_stall_s);
            CHECK(ri->x.planned_bytes > 0 && ri->x.matched_bytes == ri->x.planned_bytes);
            CHECK_EQ_U64(ri->x.misses, 0);
        }
        CHECK(stable >= 3);
        ssi_replay_result_free(&r);
    }
    ssi_profile_free(p);
    ssi_profile_free(p0);
}

/* Stage machine + policy with the copy bandwidth calibrated as bench-recordstream does (a
 * pruned plan close to the budget): every Stable iteration stalls exactly what the plan
 * predicted (virtual clock) and takes no out-of-memory path. Segments cached from one
 * iteration used to fragment the next one's large requests (11 evictions per iteration). */
static void t_stage_stall_exact(void) {
    ss_profile *p = gen_long(0, 0, 1024);   /* as the benchmark: not normalized */
    CHECK(p != NULL);
    if (!p) return;
    uint64_t pk = 0, saved = 0;
    for (uint32_t i = 0; i < p->nops; i++) if (p->ops[i].mem_after > pk) pk = p->ops[i].mem_after;
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (p->tensors[t].flags & SS_TENSOR_SAVED) saved += p->tensors[t].bytes;
    double gbps = 0;
    CHECK_OK(ss_calib_bandwidth(NULL, (double)saved, p->iter_seconds, 1.0, &gbps));
    for (int m = 0; m < 2; m++) {
        uint32_t iters = ITERS(6, 5);
        ssi_replay_config rc = stage_cfg((uint64_t)((double)pk * 0.5), iters);
        rc.opts.sim_d2h_gbps = rc.opts.sim_h2d_gbps = gbps;
        rc.opts.min_swap_bytes = 0;
        rc.opts.release_mode = m ? SS_RELEASE_MODE_STOCK : SS_RELEASE_MODE_PREDICTED;
        ssi_replay_result r;
        char err[256];
        const char *what = m ? "stock" : "predicted";
        CHECK_OK(ssi_replay_run(p, &rc, &r, err, sizeof err));
        check_clean(&r, rc.opts.budget_bytes, what);
        int stable = 0;
        for (uint32_t i = 0; r.it && i < r.iters; i++) {
            const ssi_replay_iter *ri = &r.it[i];
            if (ri->stage != SS_STAGE_STABLE) continue;
            stable++;
            CHECK_MSG(ri->x.evictions == 0 && ri->x.early_freed == 0, "%s iter %u: %u evictions",
                      what, i, ri->x.evictions);
            if (m == 0)
                CHECK_MSG(ri->predicted_stall_s >= 0 &&
                              fabs(ri->stall_s - ri->predicted_stall_s) <= ri->predicted_stall_s * 1e-9 + 1e-12,
                          "%s iter %u: stall %.9g, predicted %.9g", what, i, ri->stall_s,
                          ri->predicted_stall_s);
        }
        CHECK(stable >= 3);
        ssi_replay_result_free(&r);
    }
    ssi_profile_free(p);
}

/* Only the sequence length (dense) or per-expert token counts (MoE) vary, from iteration to
 * iteration, under a plan made at the full length: the fuzzy matcher keeps the plan's bytes. */
static void t_vary_shapes(void) {
    for (int moe = 0; moe < 2; moe++) {
        ss_profile *p0 = moe ? gen_long(4, 2, 512) : gen_long(0, 0, 1024), *p = NULL;
        CHECK(p0 != NULL);
        if (!p0) continue;
        CHECK_OK(ssi_replay_normalize(p0, &p));
        uint64_t budget = unconstrained_peak(p) / 2;
        ssi_replay_config rc = stage_cfg(budget, ITERS(8, 4));
        ssi_policy_config pc;
        ssi_policy_config_from_options(&rc.opts, &pc);
        pc.segment_bytes = SEG_LONG;
        ss_plan *plan = NULL;
        char err[256];
        pc.budget_bytes = budget - budget / 20;   /* the same headroom as stage-driven plans */
        CHECK_OK(ssi_policy_plan(p, &pc, &plan, NULL, err, sizeof err));
        if (!plan) continue;
        CHECK(plan->feasible);
        rc.plan = plan;
        rc.plan_from_profile = 1;
        rc.time = pc.time;
        rc.vary_from = 1;
        if (moe) rc.vary_experts = 0.3; else rc.vary_seq = 0.25;
        ssi_replay_result r;
        CHECK_OK(ssi_replay_run(p, &rc, &r, err, sizeof err));
        check_clean(&r, budget, moe ? "moe" : "seq");
        for (uint32_t i = 0; r.it && i < r.iters; i++) {
            const ssi_replay_iter *ri = &r.it[i];
            CHECK_MSG(ri->x.planned_bytes > 0 &&
                      ri->x.matched_bytes * 100 >= ri->x.planned_bytes * 95,
                      "%s iter %u: matched %llu of %llu planned bytes", moe ? "moe" : "seq", i,
                      (unsigned long long)ri->x.matched_bytes, (unsigned long long)ri->x.planned_bytes);
            CHECK_MSG(ri->x.evictions == 0, "%s iter %u: %u evictions", moe ? "moe" : "seq", i,
                      ri->x.evictions);
            if (i >= 1) CHECK(ri->x.matched_fuzzy > 0);
        }
        ssi_replay_result_free(&r);
        ssi_plan_free(plan);
        ssi_profile_free(p);
        ssi_profile_free(p0);
    }
}

/* Stress: real clock, random copy delays, every variation at once, small sizes. */
static void t_stress(void) {
    ss_profile *p0 = gen_long(4, 2, 1024), *p = NULL;
    CHECK(p0 != NULL);
    if (!p0) return;
    CHECK_OK(ssi_replay_normalize(p0, &p));
    uint64_t pk = unconstrained_peak(p);
    for (uint64_t div = 2; div <= 3; div++) {   /* half the activations, two seeds (a third
                                                   is below this profile's largest tensor) */
        uint64_t budget = p->base_bytes + (pk - p->base_bytes) / 2;
        uint32_t iters = ITERS(12, 6);
        ssi_replay_config rc = stage_cfg(budget, iters);
        rc.opts.sim_virtual_clock = 0;
        rc.opts.sim_jitter_us = 40;
        rc.opts.sim_d2h_gbps = rc.opts.sim_h2d_gbps = 20;
        rc.opts.seed = 1000 + div;
        rc.time.iter_seconds = 4e-3;
        rc.vary_from = 0;
        rc.vary_seq = 0.3;
        rc.vary_experts = 0.3;
        rc.skip_ops = 0.05;
        rc.eval_every = 4;
        rc.extra_first = 3;
        ssi_replay_result r;
        char err[256];
        CHECK_OK(ssi_replay_run(p, &rc, &r, err, sizeof err));
        check_clean(&r, budget, "stress");
        CHECK_EQ_U64(r.iters, iters);
        CHECK(r.swapped_bytes > 0);
        uint64_t ev = 0;
        for (uint32_t i = 0; r.it && i < r.iters; i++) ev += r.it[i].x.evictions;
        CHECK_EQ_U64(ev, r.evictions);
        fprintf(stderr, "  stress /%llu: evictions %llu misses %llu stalls %llu plans %llu\n",
                (unsigned long long)div, (unsigned long long)r.evictions,
                (unsigned long long)r.misses, (unsigned long long)r.stalls,
                (unsigned long long)r.plans_made);
        ssi_replay_result_free(&r);
    }
    ssi_profile_free(p);
    ssi_profile_free(p0);
}

/* offload-all: everything out at save, back at load; the stock release mode on the same run. */
static void t_offload_all_and_stock(void) {
    ss_profile *p0 = gen_long(0, 0, 512), *p = NULL;
    CHECK(p0 != NULL);
    if (!p0) return;
    CHECK_OK(ssi_replay_normalize(p0, &p));
    uint64_t pk = unconstrained_peak(p);
    ssi_replay_config rc = stage_cfg(pk + pk / 8, 3);
    rc.mode = SS_SWAP_OFFLOAD_ALL;
    ssi_replay_result r;
    char err[256];
    CHECK_OK(ssi_replay_run(p, &rc, &r, err, sizeof err));
    check_clean(&r, pk + pk / 8, "offload-all");
    uint64_t saved = 0;
    for (uint32_t t = 0; t < p->ntensors; t++)
        if ((p->tensors[t].flags & SS_TENSOR_SAVED) && p->tensors[t].nuses) saved += p->tensors[t].bytes;
    CHECK(r.swapped_bytes >= 3 * saved - 3 * saved / 10);
    CHECK(r.swapped_in_bytes > 0);
    CHECK_EQ_U64(r.evictions, 0);
    ssi_replay_result_free(&r);
    /* stock release emulation, stage-driven, at half the peak */
    rc = stage_cfg(pk / 2, 5);
    rc.opts.release_mode = SS_RELEASE_MODE_STOCK;
    CHECK_OK(ssi_replay_run(p, &rc, &r, err, sizeof err));
    check_clean(&r, pk / 2, "stock");
    CHECK(r.swapped_bytes > 0);
    ssi_replay_result_free(&r);
    ssi_profile_free(p);
    ssi_profile_free(p0);
}

/* A budget below the model's own state: a clear error, no crash. */
static void t_too_small(void) {
    ss_profile *p = gen_long(0, 0, 128);
    CHECK(p != NULL);
    if (!p) return;
    ssi_replay_config rc = stage_cfg(p->base_bytes / 2, 2);
    ssi_replay_result r;
    char err[256] = "";
    ss_status st = ssi_replay_run(p, &rc, &r, err, sizeof err);
    CHECK(st != SS_OK);
    CHECK(strstr(err, "budget") != NULL);
    ssi_replay_result_free(&r);
    ssi_profile_free(p);
}

int main(void) {
    ss_log_set(ss_log_stderr, NULL, SS_LOG_WARN);
    RUN(t_exact_vs_sim);
    RUN(t_stage_budgets);
    RUN(t_stage_stall_exact);
    RUN(t_vary_shapes);
    RUN(t_offload_all_and_stock);
    RUN(t_stress);
    RUN(t_too_small);
    return test_summary();
}
