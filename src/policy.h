/* policy.h: the policy generator. From a detailed profile and a device budget it decides which
 * saved tensors to swap and when (swap-out point, predicted free point, swap-in point), checks
 * each candidate incrementally against the simulator's byte model and copy-stream model, then
 * replays the whole plan in the simulator (allocator in measure mode) to set the predicted
 * times and move free and swap-in points to where the copies really complete. When no plan fits
 * it says so and finds the smallest budget that does. docs/policy.md explains every step.
 *
 * Entry points: ssi_policy_plan (offline, `smartswap plan`) and ssi_policy_hook (the stage
 * machine's plan_fn).
 */
#ifndef SS_POLICY_H
#define SS_POLICY_H

#include "sim.h"

typedef struct ssi_policy_config {
    uint64_t budget_bytes;    /* device budget, > 0 */
    uint64_t host_mem_bytes;  /* cap on host bytes for swapped tensors; 0 = none */
    uint64_t min_swap_bytes;  /* saved tensors smaller than this are never swapped */
    double   d2h_bps, h2d_bps;/* copy bandwidths, bytes/s */
    double   copy_latency_s;  /* fixed cost per copy */
    uint64_t segment_bytes;   /* the allocator's segment size (0 = its default) */
    ssi_time_config time;     /* time estimates; time.layers is the logical layer count */
    uint32_t ck_every;        /* plan checkpoints every this many ops (0 = default) */
    int      min_budget;      /* 0: search the smallest feasible budget only when infeasible;
                                 1: always (it costs a few more simulations) */
    int      rounds;          /* simulate-and-adjust rounds after selection (0 = default 3) */
} ssi_policy_config;

typedef struct ssi_policy_report {
    uint32_t nlayers;          /* logical layers */
    uint32_t over_layers;      /* layers in the memory reduction list (above the budget) */
    uint32_t candidates;       /* tensors in the candidate list */
    uint32_t selected;         /* plan entries */
    uint32_t hidden;           /* entries chosen with both copies hidden (phase 1) */
    uint64_t peak_before, peak_after, budget_bytes, swapped_bytes, host_bytes;
    double   iter_s_before, iter_s, stall_s;
    int      feasible;
    int      host_limited;     /* candidates were left out for the host-memory cap */
    uint64_t min_budget_bytes; /* smallest budget that fits (0 = not computed) */
    char     why[256];         /* when infeasible: why, in words */
} ssi_policy_report;

/* A config from the options table (budget, host-mem, min-swap, layers, sim-d2h/h2d-gbps,
 * sim-latency-us) with logical-layer times from the profile's iteration time. */
void ssi_policy_config_from_options(const ss_options *o, ssi_policy_config *c);

/* Plans p under c. On SS_OK *out holds a new plan (caller frees with ssi_plan_free), sorted by
 * out_op, with predictions and checkpoints filled, and rep (may be NULL) describes it. A budget
 * no plan can meet is not an error: the plan has feasible = 0 and holds the best effort, and
 * min_budget_bytes the smallest budget that fits (a multiple of SS_ALLOC_ALIGN; planning at it
 * succeeds, and one granule below it fails). Errors: SS_ERR_INVALID (bad config or a profile
 * lacking what the time mode needs; message in err), SS_ERR_HOST_OOM. */
ss_status ssi_policy_plan(const ss_profile *p, const ssi_policy_config *c, ss_plan **out,
                          ssi_policy_report *rep, char *err, size_t err_len);

/* The stage machine's plan hook: user is a const ssi_policy_config *. Same results as
 * ssi_policy_plan without the report. */
ss_status ssi_policy_hook(void *user, const ss_profile *p, ss_plan **out);

#endif /* SS_POLICY_H */
