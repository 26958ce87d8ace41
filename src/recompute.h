/* recompute.h: swap or recompute, the hybrid policy (docs/policy.md, "Swap or recompute").
 *
 * A profile's tensor may carry a recipe or be a span's input (rebuild.h: which of them are usable
 * and the profile rewritten for a choice of them). The hybrid plans in three steps:
 *  1. the pure-swap plan (ssi_policy_plan); when its swap traffic fits under the forward's and
 *     the backward's compute time at the link's rates, it is the answer;
 *  2. else recipes are taken in decreasing order of bytes freed per second of recompute (the
 *     recipe operators' times) until the remaining traffic (the pure-swap plan's bytes less
 *     those recomputed) fits under both; a tensor is never rebuilt from a rebuilt one; the
 *     candidates include spans (ss_ctx_recomputable_span: a whole layer re-run from its
 *     input) whose rebuild fits the budget (the floor of the profile with it rebuilt), whose
 *     bytes are all their members' and whose price is all their operators'; a span taken
 *     absorbs its members' own recipes taken before it;
 *  3. the profile is rewritten as the run will be (ssi_rebuild_derive: each chosen tensor
 *     freed at its save, rebuilt at its first backward use at the price of its recipe's
 *     operators, its sources used there), swaps are planned on that profile, and the result
 *     (with SS_PLAN_RECOMPUTE entries) is kept only where the simulator, on the rewritten
 *     profile, predicts a feasible iteration no slower than the pure-swap plan; the chosen set
 *     and its halves are tried, the fastest kept.
 * The simulator (ssi_sim_run) prices any plan with recompute entries the same way. The hybrid
 * calls the policy and the simulator; neither calls it.
 */
#ifndef SS_RECOMPUTE_H
#define SS_RECOMPUTE_H

#include "policy.h"
#include "rebuild.h"

/* What the hybrid did, for reports and tests. */
typedef struct ssi_recompute_report {
    uint32_t candidates;        /* tensors with a usable recipe */
    uint32_t chosen;            /* recompute entries in the returned plan */
    uint32_t spans;             /* of the choices behind it: spans (whole layers) taken whole */
    uint64_t recompute_bytes;   /* their bytes */
    double   recompute_s;       /* the recipe operators' seconds they add */
    double   fwd_s, bwd_s;      /* compute time of the forward and the backward */
    uint64_t swap_only_bytes;   /* the pure-swap plan's swapped bytes */
    double   swap_only_iter_s;  /* its simulated iteration time */
    int      swap_only_feasible;
} ssi_recompute_report;

/* The hybrid plan of p under c (same contract as ssi_policy_plan; rep and hrep may be NULL). */
ss_status ssi_recompute_plan(const ss_profile *p, const ssi_policy_config *c, ss_plan **out,
                             ssi_policy_report *rep, ssi_recompute_report *hrep, char *err,
                             size_t err_len);

/* The hybrid bound of docs/policy.md (without smartswap's own overhead factor): min over k of
 * max(F, (X - R_k)/d2h) + max(B + c_k, (X - R_k)/h2d), the candidates in the hybrid's order,
 * X = the pure-swap plan's swapped bytes; *t_ceiling (may be NULL) gets k = 0, the pure-swap
 * ceiling. Seconds per iteration. */
ss_status ssi_recompute_bound(const ss_profile *p, const ssi_policy_config *c, double *t_bound,
                              double *t_ceiling, char *err, size_t err_len);

/* The hybrid's choices as a curve, for bounds measured elsewhere: X = the pure-swap plan's bytes,
 * F and B the forward's and backward's compute seconds (the profile's), and after the k-th
 * choice (in the order of ssi_recompute_plan's step 2, carried on until nothing is left to
 * move) R[k] bytes recomputed at cost[k] seconds of recompute, k < n. */
typedef struct ssi_recompute_curve {
    double    X, F, B;
    uint32_t  n;
    double   *R, *cost;
} ssi_recompute_curve;

ss_status ssi_recompute_curve_of(const ss_profile *p, const ssi_policy_config *c, ssi_recompute_curve *cv,
                                 char *err, size_t err_len);
void      ssi_recompute_curve_free(ssi_recompute_curve *cv);
/* min over k (k = 0: nothing recomputed) of max(F, (X - R_k)/d2h) + max(B + cost_scale x
 * cost_k, (X - R_k)/h2d), for X, F, B and rates given (e.g. measured live; cost_scale converts
 * the profile's seconds to the live ones). */
double    ssi_recompute_curve_min(const ssi_recompute_curve *cv, double X, double F, double B, double cost_scale,
                                  double d2h, double h2d);

/* The stage machine's plan hook for the hybrid: user is a const ssi_policy_config *. */
ss_status ssi_recompute_hook(void *user, const ss_profile *p, ss_plan **out);

#endif /* SS_RECOMPUTE_H */
