/* strategy.h: what four memory strategies cost on one generated training iteration, and how far
 * each one scales (`smartswap simulate`, docs/simulate.md).
 *
 * The workload generator (workload.h) builds the iteration as a detailed profile; each strategy
 * turns it into something the simulator (sim.h) replays with the allocator in measure mode:
 *
 *  - NONE       no memory saving: the profile as generated, no plan;
 *  - RECOMPUTE  full recomputation: a rewritten profile in which every transformer layer keeps
 *               only its input through the forward pass and, just before its backward, runs its
 *               forward operators again (same FLOPs and times) to re-create what they saved;
 *  - OFFLOAD    every saved tensor to host without prefetch (torch's save_on_cpu): a plan that
 *               copies each saved tensor out after its last forward access, makes compute wait
 *               for that copy before the next operator (the copy is synchronous), and copies it
 *               back when its first backward use is reached (compute waits again);
 *  - SMARTSWAP  ssi_policy_plan under the budget and the host cap, then the simulator (swap
 *               only, what `smartswap train --swap-only` runs);
 *  - HYBRID     ssi_recompute_plan (swap or recompute per saved tensor, recompute.h): the
 *               generator's recipes (workload.c) rebuild what the link cannot hide; the
 *               simulator prices each rebuild with its recipe operators' times (what `--mode
 *               smartswap` runs by default).
 *
 * The simulator gives each its peak device memory, host memory, iteration time and stall time;
 * tokens per second are batch * seq / iteration time. Nothing is estimated outside the
 * simulator except the pre-check of ssi_strategy_eval (a proof of infeasibility, see there).
 *
 * The sweep (ssi_strategy_sweep) finds, per strategy, the largest batch, sequence length or hidden
 * size that trains within the budget and the host cap, by exponential then binary search.
 */
#ifndef SS_STRATEGY_H
#define SS_STRATEGY_H

#include "policy.h"
#include "presets.h"
#include "workload.h"

typedef enum ssi_strategy_kind {
    SSI_STRAT_NONE = 0,
    SSI_STRAT_RECOMPUTE = 1,
    SSI_STRAT_OFFLOAD = 2,
    SSI_STRAT_SMARTSWAP = 3,
    SSI_STRAT_HYBRID = 4,
    SSI_STRAT_COUNT = 5
} ssi_strategy_kind;

/* "none", "recompute", "offload", "smartswap", "hybrid" (machine names); "?" out of range. */
const char *ssi_strategy_name(int kind);
/* "no saving", "full recompute", "offload (save_on_cpu)", "smartswap swap-only", "smartswap
 * hybrid" (for tables). */
const char *ssi_strategy_title(int kind);

/* The machine the strategies run on. */
typedef struct ssi_strategy_env {
    uint64_t device_bytes;    /* device memory */
    uint64_t budget_bytes;    /* what the peak must stay within (the whole device use, static
                                 state included); 0 = device_bytes */
    uint64_t host_cap_bytes;  /* host memory for swapped/offloaded tensors; 0 = no cap */
    double   d2h_bps, h2d_bps;/* copy bandwidth each way, bytes/s, > 0 */
    double   flops_per_s;     /* sustained FLOP/s the operators reach, > 0 */
    double   mem_bps;         /* sustained device-memory bytes/s (memory-bound operators), > 0 */
    double   copy_latency_s;  /* fixed cost of each copy (0: none) */
} ssi_strategy_env;

/* The effective HBM bandwidth of a device preset: its datasheet figure times
 * SSI_STRATEGY_MEM_EFF (sources in strategy.c); 3e12 for an unknown name. */
#define SSI_STRATEGY_MEM_EFF 0.625
double ssi_strategy_mem_bps(const char *preset_name);

/* env from a device preset: device memory, budget = device memory, host cap = the preset's host
 * memory, its link bandwidths, flops_per_s = bf16 peak * SS_PRESET_MFU, mem_bps as above. */
void ssi_strategy_env_from_preset(const ssi_device_preset *d, ssi_strategy_env *env);

/* One strategy on one workload. */
typedef struct ssi_strategy_result {
    int      kind;            /* ssi_strategy_kind */
    int      evaluated;       /* 0: not asked for */
    int      fits;            /* peak <= budget, the allocator never refused, host <= cap */
    int      prechecked;      /* SMARTSWAP, HYBRID: rejected by the pre-check without planning */
    char     why[200];        /* when it does not fit: why, in words */
    uint64_t tokens;          /* batch * seq */
    uint64_t peak_bytes;      /* device bytes in use, most (simulated; refused bytes counted) */
    uint64_t host_bytes;      /* host bytes held for swapped tensors, most */
    uint64_t d2h_bytes, h2d_bytes; /* bytes copied each way in the iteration */
    uint32_t copies;          /* tensors swapped or offloaded */
    double   iter_s;          /* iteration (step) time */
    double   compute_s;       /* operator time, extra forward included */
    double   stall_s;         /* compute waiting on copies */
    double   extra_compute_s; /* RECOMPUTE: the re-run forward operators' time; HYBRID: the
                                 recipe operators' time of the recomputed tensors; else 0 */
    double   extra_flops;     /* RECOMPUTE: their FLOPs; else 0 */
    uint32_t recomputed;      /* HYBRID: saved tensors recomputed instead of kept or swapped */
    uint64_t recomputed_bytes;/* HYBRID: their bytes */
    double   tokens_per_s;    /* tokens / iter_s */
    /* the memory timeline (only with record): device bytes during op k, from t[k] */
    uint32_t npoints;
    double  *t;
    uint64_t *mem;
} ssi_strategy_result;

void ssi_strategy_result_free(ssi_strategy_result *r);   /* frees the timeline; NULL is fine */

/* Bit mask of strategies: 1u << kind. */
#define SSI_STRAT_ALL ((1u << SSI_STRAT_COUNT) - 1)

/* Generates wc's iteration (wc's device_flops and device_bw are replaced by env's) and evaluates
 * the strategies in mask into res[kind] (res has SSI_STRAT_COUNT entries; those not in mask get
 * evaluated = 0). record: 1 fills each result's timeline (caller frees with
 * ssi_strategy_result_free).
 *
 * SMARTSWAP pre-check: when the strategy cannot fit whatever is swapped, the planner is not
 * called (it would spend most of its time searching the smallest feasible budget) and the result
 * says why with prechecked = 1. The two necessary conditions checked: the peak of the byte model
 * with every swappable saved tensor absent over its whole idle interval is within the budget, and
 * the host cap holds the bytes by which the unswapped peak exceeds the budget. Its other figures
 * are then those of the unplanned run. HYBRID: only the first condition, with every saved
 * tensor of any size counted (a recomputed tensor is absent over the same interval and needs
 * no host memory).
 *
 * Errors: SS_ERR_INVALID (bad config or env; message in err), SS_ERR_HOST_OOM. A strategy that
 * does not fit is not an error. */
ss_status ssi_strategy_eval(const ssi_workload_config *wc, const ssi_strategy_env *env, unsigned mask,
                            int record, ssi_strategy_result res[SSI_STRAT_COUNT], char *err, size_t err_len);

/* The full-recomputation rewrite of a generated profile p (info from the same generation): each
 * transformer layer's forward operators are run again right before the layer's backward, the
 * tensors they produce that belong to the layer are released after their last forward use in
 * the first pass and re-created by the rerun for the backward; the layer's input (the previous
 * layer's output) is kept. *extra_s / *extra_flops (may be NULL) get the rerun operators'
 * seconds and FLOPs. The result is finalized and checked; caller frees it with ssi_profile_free.
 * SS_ERR_INVALID (message in err) when p does not have the generator's layer structure. */
ss_status ssi_strategy_recompute_profile(const ss_profile *p, const ssi_workload_info *info,
                                         ss_profile **out, double *extra_s, double *extra_flops,
                                         char *err, size_t err_len);

/* The save_on_cpu plan for p: every saved tensor with a backward use, out after its last forward
 * access, freed at the next operator, in and used at its first backward use. Caller frees it. */
ss_status ssi_strategy_offload_plan(const ss_profile *p, ss_plan **out);

/* ---- the sweep ----------------------------------------------------------------------------- */

typedef enum ssi_sweep_axis {
    SSI_SWEEP_BATCH = 0,
    SSI_SWEEP_SEQ = 1,
    SSI_SWEEP_HIDDEN = 2      /* hidden h in multiples of the head count; the MLP width scales
                                 with it (round(ffn * h / h0)); heads and kv-heads stay */
} ssi_sweep_axis;

const char *ssi_sweep_axis_name(int axis);   /* "batch", "seq", "hidden" */
/* SSI_SWEEP_* for a name, or -1. */
int ssi_sweep_axis_from_name(const char *name);

/* wc with the swept value set (batch, seq, or hidden with the MLP width scaled from base). */
void ssi_sweep_apply(const ssi_workload_config *base, int axis, uint32_t value, ssi_workload_config *out);

typedef struct ssi_sweep_best {
    int      found;           /* 0: no value trains (at the required speed) */
    uint32_t value;           /* the largest value that trains */
    double   multiple;        /* value / the no-saving strategy's value (0 if that has none) */
    ssi_strategy_result r;    /* the strategy at value (no timeline) */
} ssi_sweep_best;

typedef struct ssi_sweep_result {
    int      axis;
    double   min_speed;                 /* as given */
    double   ref_tokens_per_s;          /* no saving at its largest value (0 if none) */
    ssi_sweep_best best[SSI_STRAT_COUNT];
    /* the curve (only with curve_points > 0): tokens/s of each strategy at values[k]; 0 where it
     * does not fit */
    uint32_t npoints;
    uint32_t *values;
    double   *tps[SSI_STRAT_COUNT];
    uint32_t evals;                     /* strategy evaluations made */
    double   seconds;                   /* wall time of the sweep */
} ssi_sweep_result;

void ssi_sweep_result_free(ssi_sweep_result *r);

/* For each strategy, the largest value of the axis at which it trains: fits the budget and the
 * host cap and, when min_speed > 0, reaches at least min_speed times the no-saving strategy's
 * tokens/s at its own largest value. Search: from wc's current value, doubling (or halving) until
 * the answer changes, then bisection; each strategy after NONE starts from NONE's value. It
 * assumes that fitting is monotone in the value (more tokens or a wider model never need less
 * memory) and says nothing about values it did not evaluate. curve_points > 0 also evaluates
 * every strategy at that many evenly spaced values from the smallest step to the largest value
 * found (for the plot). mask (SSI_STRAT_ALL, or bits 1u << kind) says which strategies to search;
 * NONE is always searched (it is the reference); the others' best[] stay found = 0.
 * Errors as ssi_strategy_eval. */
ss_status ssi_strategy_sweep(const ssi_workload_config *wc, const ssi_strategy_env *env, int axis,
                             unsigned mask, double min_speed, uint32_t curve_points, ssi_sweep_result *out,
                             char *err, size_t err_len);

#endif /* SS_STRATEGY_H */
