/* bench-plan.c: planning time of the policy generator (src/policy.c) on synthetic profiles of
 * 10k, 30k and 100k operators with about one saved tensor in five operators, under a budget
 * of half the activation peak. Targets (issue 4): under 1 s at 100k operators, and
 * t(100k) / t(10k) under 20 (near-linear scaling). Prints the figures and exits non-zero when
 * a target is missed. Each figure is the best of 3 runs.
 */
#include "policy.h"

#include <inttypes.h>
#include <stdio.h>

/* n ops: the first half forward, the second backward. Saved tensors (2 per 5 forward ops, so
 * n/5 in all) are used by the next forward op and by the mirrored backward op; a temporary per
 * op lives one op. Sizes vary (1 to 8 MiB) with a seeded PRNG. */
static ss_profile *synth(uint32_t n, uint64_t seed) {
    ss_profile *p;
    if (ssi_profile_new(&p)) return NULL;
    const char *names[] = {"linear", "attention", "norm", "act", "linear_bwd", "attention_bwd"};
    uint32_t id[6];
    for (int i = 0; i < 6; i++) ssi_profile_intern(p, names[i], &id[i]);
    ssi_rng g;
    ssi_rng_seed(&g, seed);
    uint32_t half = n / 2;
    for (uint32_t i = 0; i < n; i++) {
        ss_prof_op o = {0};
        o.phase = i < half ? SS_PHASE_FWD : SS_PHASE_BWD;
        o.name = id[(i % 4) + (i < half ? 0 : 2) % 6];
        o.site = 0x1000 + i % 97;
        if (ssi_profile_add_op(p, &o, NULL)) { ssi_profile_free(p); return NULL; }
    }
    p->iter_seconds = 1.0;
    p->base_bytes = 1ull << 30;
    for (uint32_t i = 0; i + 1 < half; i++) {
        if (i % 5 == 0 || i % 5 == 2) {
            ss_prof_tensor t = {0};
            t.bytes = (1 + ssi_rng_below(&g, 8)) << 20;
            t.dtype = SS_DTYPE_BF16;
            t.ndim = 2;
            t.shape[0] = 1024;
            t.shape[1] = (int64_t)(t.bytes / 2048);
            t.producer = i;
            uint32_t use = n - 1 - i;
            t.release = use;
            t.flags = SS_TENSOR_SAVED;
            uint32_t ti;
            if (ssi_profile_add_tensor(p, &t, &ti) || ssi_profile_add_use(p, ti, i + 1) ||
                ssi_profile_add_use(p, ti, use)) { ssi_profile_free(p); return NULL; }
        }
    }
    for (uint32_t i = 0; i + 1 < n; i++) {
        ss_prof_tensor t = {0};
        t.bytes = 256 << 10;
        t.dtype = SS_DTYPE_BF16;
        t.producer = i;
        t.release = i + 1;
        uint32_t ti;
        if (ssi_profile_add_tensor(p, &t, &ti) || ssi_profile_add_use(p, ti, i + 1)) {
            ssi_profile_free(p);
            return NULL;
        }
    }
    if (ssi_profile_finalize(p)) { ssi_profile_free(p); return NULL; }
    return p;
}

int main(void) {
    const uint32_t sizes[3] = {10000, 30000, 100000};
    double best[3];
    int rc = 0;
    printf("bench-plan: planning time, synthetic profiles (1 saved tensor per 5 ops), budget = base + "
           "half the activation peak\n");
    for (int s = 0; s < 3; s++) {
        ss_profile *p = synth(sizes[s], 7);
        if (!p) { fprintf(stderr, "bench-plan: building the profile failed\n"); return 1; }
        uint64_t *lv = malloc(p->nops * sizeof *lv);
        ssi_sim_levels(p, lv);
        uint64_t peak = 0, saved = 0;
        for (uint32_t i = 0; i < p->nops; i++) if (lv[i] > peak) peak = lv[i];
        for (uint32_t t = 0; t < p->ntensors; t++)
            if (p->tensors[t].flags & SS_TENSOR_SAVED) saved++;
        free(lv);
        ssi_policy_config c;
        memset(&c, 0, sizeof c);
        c.budget_bytes = p->base_bytes + (peak - p->base_bytes) / 2;
        c.min_swap_bytes = 64 << 10;
        /* bandwidth so that moving half the saved bytes takes a third of the forward half */
        c.d2h_bps = c.h2d_bps = 25e9 * (double)sizes[s] / 10000.0;
        c.time.mode = SSI_TIME_LAYER;
        best[s] = 1e30;
        ss_plan *keep = NULL;
        for (int rep = 0; rep < 3; rep++) {
            ss_plan *pl = NULL;
            char err[256];
            double t0 = ssi_now();
            ss_status st = ssi_policy_plan(p, &c, &pl, NULL, err, sizeof err);
            double dt = ssi_now() - t0;
            if (st != SS_OK) { fprintf(stderr, "bench-plan: planning failed: %s\n", err); return 1; }
            if (dt < best[s]) best[s] = dt;
            ssi_plan_free(keep);
            keep = pl;
        }
        printf("  %6u ops  %5" PRIu64 " saved  %5u swapped  feasible %d  stall %5.2f %% of %.3f s  "
               "plan %.3f s\n", sizes[s], saved, keep->nentries, keep->feasible,
               100.0 * keep->stall_s / keep->iter_s, keep->iter_s, best[s]);
        if (!keep->feasible) { fprintf(stderr, "bench-plan: the plan is not feasible\n"); rc = 1; }
        ssi_plan_free(keep);
        ssi_profile_free(p);
    }
    double ratio = best[2] / best[0];
    printf("  t(100k) = %.3f s (target < 1 s)   t(100k)/t(10k) = %.2f (target < 20)   "
           "t(30k)/t(10k) = %.2f\n", best[2], ratio, best[1] / best[0]);
    if (best[2] >= 1.0) { fprintf(stderr, "bench-plan: FAIL: 100k operators took %.3f s\n", best[2]); rc = 1; }
    if (ratio >= 20) { fprintf(stderr, "bench-plan: FAIL: ratio %.2f\n", ratio); rc = 1; }
    if (!rc) printf("bench-plan: ok\n");
    return rc;
}
