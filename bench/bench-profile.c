/* bench-profile.c: cost of the profiler per operator, light and detailed mode, each next to an
 * empty loop over the same events, in one run (issue 3, Performance: light mode <= 5 ns/op).
 *
 * The events: an iteration of NOPS operators over 64 operator names with call sites, one
 * saved tensor every 4 operators, loaded and released in a backward half. Light mode is
 * measured in Stable (every operator checked against the plan's checkpoints); detailed mode in
 * GenPolicy iterations (warmup 0, a planner hook that never succeeds keeps every iteration
 * detailed; the bound is set high). The empty loop makes the same calls to a function that does
 * nothing (through a volatile pointer, so the calls are not optimised away).
 *
 *     build/bench/bench-profile [ops-per-iteration [iterations]]
 */
#include "api.h"

#include <stdio.h>

static ss_status nothing(void *c, uint32_t id, uint64_t site) { (void)c; (void)id; (void)site; return SS_OK; }
static ss_status (*volatile empty_op)(void *, uint32_t, uint64_t) = nothing;

static ss_status no_plan(void *u, const ss_profile *p, ss_plan **out) {
    (void)u; (void)p; (void)out;
    return SS_ERR_INFEASIBLE;
}

static uint32_t *ids;
static uint64_t *sites;
static char dummy[64];

/* Light or detailed iterations: operators only (light mode's subject), timed. */
static double run_ops(ss_ctx_t *ctx, int iters, uint32_t nops, int empty) {
    double best = 1e30;
    for (int it = 0; it < iters; it++) {
        if (!empty) ss_ctx_iter_begin(ctx);
        double t0 = ssi_now();
        if (empty) {
            for (uint32_t i = 0; i < nops; i++) empty_op(ctx, ids[i], sites[i]);
        } else {
            for (uint32_t i = 0; i < nops; i++) ss_ctx_op(ctx, ids[i], sites[i]);
        }
        double t = ssi_now() - t0;
        if (!empty) ss_ctx_iter_end(ctx, NULL);
        if (t < best) best = t;
    }
    return best / nops * 1e9;
}

/* Full events: operators, saves every 4 ops in the first half, loads and releases in the
 * second. */
static double run_full(ss_ctx_t *ctx, int iters, uint32_t nops, uint64_t *h) {
    double best = 1e30;
    int64_t shape[2] = {256, 256};
    for (int it = 0; it < iters; it++) {
        ss_ctx_iter_begin(ctx);
        double t0 = ssi_now();
        uint32_t ns = 0;
        for (uint32_t i = 0; i < nops; i++) {
            ss_ctx_op(ctx, ids[i], sites[i]);
            if (i < nops / 2 && i % 4 == 0) ss_ctx_save(ctx, dummy, 262144, SS_DTYPE_F32, 2, shape, 0, &h[ns++]);
            else if (i >= nops / 2 && i % 4 == 0 && ns) {
                void *p;
                ss_ctx_load(ctx, h[--ns], NULL, &p);
                ss_ctx_release(ctx, h[ns]);
            }
        }
        double t = ssi_now() - t0;
        ss_ctx_iter_end(ctx, NULL);
        if (t < best) best = t;
    }
    return best / nops * 1e9;
}

int main(int argc, char **argv) {
    uint32_t nops = argc > 1 ? (uint32_t)atoi(argv[1]) : 20000;
    int iters = argc > 2 ? atoi(argv[2]) : 50;
    if (nops < 8 || iters < 1) { fprintf(stderr, "usage: bench-profile [ops>=8 [iterations>=1]]\n"); return 2; }
    ids = malloc(nops * sizeof *ids);
    sites = malloc(nops * sizeof *sites);
    uint64_t *h = malloc(nops * sizeof *h);
    if (!ids || !sites || !h) return 1;

    ss_ctx_config c = ss_ctx_config_default();
    c.opts.warmup_iters = 0;
    c.opts.max_detailed = 1000;
    ss_ctx_t *light = NULL, *det = NULL;
    if (ss_ctx_new(&c, &light) || ss_ctx_new(&c, &det)) return 1;
    ssi_rng rng;
    ssi_rng_seed(&rng, 42);
    for (int k = 0; k < 64; k++) {
        char nm[32];
        uint32_t id;
        snprintf(nm, sizeof nm, "aten::op%d", k);
        ss_ctx_intern(light, nm, &id);
        ss_ctx_intern(det, nm, &id);
    }
    for (uint32_t i = 0; i < nops; i++) {
        ids[i] = (uint32_t)ssi_rng_below(&rng, 64);
        sites[i] = ssi_rng_next(&rng);
    }
    ssi_planner np = {no_plan, NULL, NULL};
    ssi_ctx_set_planner(det, &np);

    run_ops(light, 1, nops, 0);   /* GenPolicy: the plan */
    double e1 = run_ops(light, iters, nops, 1);
    double l = run_ops(light, iters, nops, 0);
    double e2 = run_ops(det, iters, nops, 1);
    double d = run_ops(det, iters, nops, 0);
    ss_ctx_stats st;
    ss_ctx_get_stats(light, &st);
    int light_ok = st.detailed_iters == 1 && st.divergences == 0;
    double lf = run_full(light, iters, nops, h);
    double df = run_full(det, iters, nops, h);

    printf("bench-profile: %u operators per iteration, best of %d iterations\n", nops, iters);
    printf("  light mode    %6.2f ns/op   empty loop %6.2f ns/op   profiler %6.2f ns/op%s\n",
           l, e1, l - e1, light_ok ? "" : "  (NOT in Stable: check)");
    printf("  detailed mode %6.2f ns/op   empty loop %6.2f ns/op   profiler %6.2f ns/op\n", d, e2, d - e2);
    printf("  with saves/loads/releases (1 save per 8 ops): light %.2f ns/op, detailed %.2f ns/op\n", lf, df);
    /* the cost the light profiler adds to each operator is the light loop minus the empty loop
     * over the same events (the loop, the call and the arrays are the caller's anyway) */
    printf("  target: light-mode cost (light minus empty loop) <= 5 ns/op: %.2f: %s\n", l - e1,
           l - e1 <= 5.0 ? "met" : "NOT met");
    ss_ctx_free(light);
    ss_ctx_free(det);
    free(ids); free(sites); free(h);
    return 0;
}
