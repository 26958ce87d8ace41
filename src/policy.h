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
    uint64_t granule_bytes;   /* the allocator's virtual-memory granule (0 = plain segments):
                                 the simulations emulate the same granules and pools */
    const uint64_t *persist_bytes; /* optional: the persistent tensors the real allocator holds,
                                 one by one (ssi_sim_config.persist_bytes); npersist of them */
    uint32_t npersist;
    ssi_time_config time;     /* time estimates; time.layers is the logical layer count */
    uint32_t ck_every;        /* plan checkpoints every this many ops (0 = default) */
    int      min_budget;      /* 0: search the smallest feasible budget only when infeasible;
                                 1: always (it costs a few more simulations) */
    int      rounds;          /* simulate-and-adjust rounds after selection (0 = default 3) */
    double   headroom;        /* in [0, 0.9): plan for budget_bytes x (1 - headroom), and at
                                 budget_bytes when that is infeasible. Stage-driven profiles
                                 (the executor's recorder) see memory only between operators:
                                 temporaries an operator allocates and frees inside itself are
                                 not in them, so a plan at the full budget can be short by those
                                 during the operator. Measured (tests/test-replay, trace-gen
                                 profiles at 1/2, 1/3, 1/4 of the peak): 0.035 is the smallest
                                 of {0, 0.02, 0.035} with no Stable eviction (0.05 before the
                                 simulator held unattributed memory per operator as the run
                                 does). 0 for profiles that list their temporaries. */
    int      skip_min_budget; /* 1: never search the smallest feasible budget (overrides
                                 min_budget): an infeasible plan reports min_budget_bytes 0 and
                                 is the best effort at this budget only (no retry with the plan
                                 of a smaller budget); for sweeps that only ask "does it fit" */
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

/* The smallest budget of a profile (issue 14 item 5, as `smartswap train` computes it for a
 * configuration): the profile's state plus the largest working set of any single operator, that
 * is the byte-model peak with every swap candidate (saved, at least c->min_swap_bytes, not
 * used at once) absent over its whole idle interval, rounded up to SS_ALLOC_ALIGN; *op (may be
 * NULL) is the operator where it is reached. No plan fits below it; ssi_policy_plan's
 * min_budget_bytes (a plan that the simulator and its allocator accept) is at least it.
 * `smartswap plan` and `smartswap replay` print it. Errors as ssi_policy_plan's. */
ss_status ssi_policy_floor(const ss_profile *p, const ssi_policy_config *c, uint64_t *out, uint32_t *op,
                           char *err, size_t err_len);

/* The simulator's configuration with which the planner verifies a plan for config c under
 * budget (its links, segments or granules, persistent tensors, time model; ops recorded): what
 * a caller checking a plan's predicted step or peak runs it with. */
ssi_sim_config ssi_policy_sim_config(const ssi_policy_config *c, uint64_t budget);

/* The stage machine's plan hook: user is a const ssi_policy_config *. Same results as
 * ssi_policy_plan without the report. */
ss_status ssi_policy_hook(void *user, const ss_profile *p, ss_plan **out);

#endif /* SS_POLICY_H */
