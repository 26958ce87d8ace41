/* sim.h: the simulator. Replays a detailed profile and a swap plan on three timelines (the
 * compute stream, a device-to-host copy stream and a host-to-device copy stream, running at
 * the same time) with the allocator's own code in measure mode (ss_alloc_new(NULL, ...)), and
 * predicts peak device memory, stalls, iteration time, bytes moved and host memory. The event
 * model is written out in docs/policy.md; the executor reproduces it step for step.
 *
 * It also holds the pieces the policy generator's incremental check uses (policy.c):
 *  - the byte model: device bytes in use during each operator with no swaps, in the
 *    allocator's rounded sizes (ssi_sim_levels), equal to what the full run measures;
 *  - ssi_simx: a segment tree over those levels (range add, range max, first/last index above
 *    a limit), so a candidate's effect is checked in O(log n);
 *  - ssi_fluid: a copy stream as idle time per operator, consumed by copies, so a candidate's
 *    copy is placed in time proportional to the operators it spans.
 */
#ifndef SS_SIM_H
#define SS_SIM_H

#include "plan.h"
#include "smartswap-alloc.h"

/* ---- time estimates ------------------------------------------------------------------------ */

typedef enum ssi_time_mode {
    SSI_TIME_LAYER = 0,     /* iteration time / logical layers, spread evenly over a layer's ops */
    SSI_TIME_FLOPS = 1,     /* per operator: flops / flops_per_s + op_overhead_s */
    SSI_TIME_MEASURED = 2,  /* per operator: the profile's seconds */
    SSI_TIME_AUTO = 3       /* MEASURED when the profile has operator seconds (a detailed
                               iteration records them), its gaps filled with their mean; else
                               LAYER */
} ssi_time_mode;

typedef struct ssi_time_config {
    int      mode;           /* ssi_time_mode */
    double   iter_seconds;   /* LAYER: compute time of the iteration; 0 = the profile's */
    uint32_t layers;         /* logical layers (LAYER times and the timeline); 0 = default */
    double   flops_per_s;    /* FLOPS: sustained FLOP/s of the device */
    double   op_overhead_s;  /* FLOPS: fixed time added to every operator */
} ssi_time_config;

/* The default logical layer count for n operators: ceil(sqrt(n)), at least 1, at most n. */
uint32_t ssi_default_layers(uint32_t nops);
/* The layer count actually used: tc->layers (clamped to [1, nops]) or the default. */
uint32_t ssi_layers_for(const ss_profile *p, uint32_t layers);
/* First operator of logical layer l of L (layers are equal operator counts; l == L gives nops). */
static inline uint32_t ssi_layer_first(uint32_t nops, uint32_t L, uint32_t l) {
    return (uint32_t)((uint64_t)l * nops / L);
}
/* 1 when at least half of p's operators carry measured seconds (what SSI_TIME_AUTO uses). */
int ssi_profile_has_op_times(const ss_profile *p);
/* Fills dur[0..nops) with each operator's duration. SS_ERR_INVALID (message in err) when the
 * mode lacks what it needs: LAYER without an iteration time, FLOPS without FLOP/s or without
 * any operator FLOPs, MEASURED without any operator seconds. */
ss_status ssi_sim_op_times(const ss_profile *p, const ssi_time_config *tc, double *dur,
                           char *err, size_t err_len);

/* ---- the byte model ------------------------------------------------------------------------ */

/* Memory not attributed to known tensors, per operator: other[i] = mem_after[i] - base_bytes -
 * (rounded bytes of known tensors alive after op i), clamped at 0. It is simulated as one block
 * per operator (see docs/policy.md). other[] has nops entries. */
ss_status ssi_sim_other(const ss_profile *p, uint64_t *other);
/* level[i] = device bytes in use while op i runs, with no swaps: rounded base + rounded other[i]
 * + rounded bytes of every tensor with producer <= i <= release. level[] has nops entries. */
ss_status ssi_sim_levels(const ss_profile *p, uint64_t *level);
/* temp[i] = how far op i's measured peak (mem_peak, rounded) rises above that level: the
 * temporaries it allocates and frees while it runs (0 where not measured). ssi_sim_levels'
 * levels include them; the full simulation holds one block of temp[i] bytes while op i runs. */
ss_status ssi_sim_temps(const ss_profile *p, uint64_t *temp);

/* ---- the full simulation ------------------------------------------------------------------- */

typedef struct ssi_sim_config {
    uint64_t budget_bytes;    /* the allocator's budget; 0 = none (measure the peak only) */
    uint64_t host_mem_bytes;  /* cap on host memory for swapped tensors; 0 = none */
    double   d2h_bps, h2d_bps;/* copy bandwidths, bytes/s, > 0 */
    double   copy_latency_s;  /* fixed cost of each copy */
    uint64_t segment_bytes;   /* allocator segment size; 0 = the allocator's default */
    uint64_t granule_bytes;   /* the allocator's virtual-memory granule (as ss_alloc_config's,
                                 raised the same way); 0 = plain segments */
    const uint64_t *persist_bytes; /* optional: the persistent tensors one by one, in the real
                                 allocator's order (npersist of them); the simulation allocates
                                 them (persistent tag) instead of one block of base_bytes, and
                                 what base_bytes has beyond their sum as one more block */
    uint32_t npersist;
    ssi_time_config time;
    int      record_ops;      /* 1: fill op_start[] and op_mem[] */
} ssi_sim_config;

typedef struct ssi_sim_layer {
    uint32_t first_op, nops;
    double   t_start, t_end;  /* compute clock at the layer's first op and after its last */
    double   stall_s;         /* compute waits inside the layer */
    uint64_t peak_bytes;      /* device bytes in use, most during the layer */
    uint64_t d2h_bytes, h2d_bytes; /* copies issued in the layer */
} ssi_sim_layer;

typedef struct ssi_sim_result {
    uint64_t peak_bytes;          /* device bytes in use, most at any time (blocks handed out
                                     or pending release, plus refused allocations) */
    uint64_t peak_reserved_bytes; /* segments the allocator held, most */
    int      oom;                 /* 1: the allocator refused an allocation under the budget */
    uint32_t oom_op;              /* first operator where that happened */
    uint64_t oom_bytes;           /* refused bytes held at once, most (0 without oom) */
    int      host_over;           /* 1: host bytes exceeded host_mem_bytes */
    double   iter_s, compute_s, stall_s;
    uint64_t d2h_bytes, h2d_bytes;
    uint64_t host_bytes;          /* host memory for swapped tensors, most at any time */
    uint32_t late_uses;           /* uses that waited for their swap-in */
    uint32_t late_frees;          /* predicted frees that waited for their swap-out */
    uint32_t early_uses;          /* uses that started before their swap-in completed: 0 */
    uint32_t nlayers;
    ssi_sim_layer *layers;
    uint32_t nops;
    double   *op_start;           /* record_ops: start of each op on the compute clock */
    uint64_t *op_mem;             /* record_ops: bytes in use while each op runs */
    uint32_t nentries;
    double   *t_out_done, *t_in_done; /* per plan entry: simulated copy completions */
    double   *t_use;              /* per plan entry: when its use op started */
    ss_alloc_stats alloc;         /* the allocator's statistics at the end */
} ssi_sim_result;

/* Simulates one iteration of p with plan (NULL: no swaps). Validates the plan against p first
 * (each entry's tensor exists with the same bytes, is swapped once, out_op at or after its last
 * access before use_op, no use in between, use_op is a use): SS_ERR_INVALID with the fault in
 * err. A budget the allocator cannot keep is not an error: r->oom says so and the run goes on
 * counting refused bytes. A plan with recompute entries (SS_PLAN_RECOMPUTE) is simulated as the
 * run has it: its swap entries on the profile rewritten for them (rebuild.h), the recompute
 * entries' per-entry results 0. On success the caller owns r's arrays (ssi_sim_result_free). */
ss_status ssi_sim_run(const ss_profile *p, const ss_plan *plan, const ssi_sim_config *c,
                      ssi_sim_result *r, char *err, size_t err_len);
void ssi_sim_result_free(ssi_sim_result *r);

/* ---- incremental pieces (policy.c) -------------------------------------------------------- */

/* Segment tree over int64 values v[0..n): range add, range max, searches. */
typedef struct ssi_simx ssi_simx;
ss_status ssi_simx_new(uint32_t n, const uint64_t *init, ssi_simx **out);
void      ssi_simx_free(ssi_simx *x);
/* v[i] += d for lo <= i < hi. */
void      ssi_simx_add(ssi_simx *x, uint32_t lo, uint32_t hi, int64_t d);
/* max v[i] over lo <= i < hi; INT64_MIN when empty. */
int64_t   ssi_simx_max(ssi_simx *x, uint32_t lo, uint32_t hi);
/* First i in [lo, hi) with v[i] > limit, or SS_NONE. */
uint32_t  ssi_simx_first_above(ssi_simx *x, uint32_t lo, uint32_t hi, int64_t limit);
/* Last i in [lo, hi) with v[i] > limit, or SS_NONE. */
uint32_t  ssi_simx_last_above(ssi_simx *x, uint32_t lo, uint32_t hi, int64_t limit);

/* A copy stream as idle seconds per operator slot (slot i = while op i runs). */
typedef struct ssi_fluid ssi_fluid;
ss_status ssi_fluid_new(uint32_t n, const double *dur, ssi_fluid **out);
void      ssi_fluid_free(ssi_fluid *f);
/* Places `need` seconds of copy starting in slot `from`, filling slots forward, not past slot
 * `limit` (exclusive). Returns the slot where it completes, or SS_NONE if it does not fit
 * before `limit`. commit: 1 takes the time, 0 only asks. */
uint32_t  ssi_fluid_forward(ssi_fluid *f, uint32_t from, uint32_t limit, double need, int commit);
/* Places `need` seconds ending by the start of slot `end`, filling slots backward, not before
 * slot `floor`. Returns the earliest slot used (the copy is issued when that op is reached),
 * or SS_NONE if it does not fit at or after `floor`. */
uint32_t  ssi_fluid_backward(ssi_fluid *f, uint32_t end, uint32_t floor, double need, int commit);

#endif /* SS_SIM_H */
