/* replay.h: the replay driver. Runs a detailed profile on a real device with real buffers through
 * the framework API (ss_ctx_* with the executor, SS_MEM_SMARTSWAP), the way a trainer would:
 * each operator occupies the compute stream for its estimated time (ss_compute_async), writes a
 * pattern derived from (tensor, iteration) into every tensor it produces and checks the pattern
 * of every tensor it reads, so that a read of swapped-out, poisoned, half-copied or reused
 * memory is counted (corrupt_reads) instead of passing silently. Options vary the sequence from
 * one iteration to the next and add random copy delays. `smartswap replay` and the tests use it.
 *
 * The order of work inside an operator is the simulator's (sim.c): ss_ctx_op (the executor
 * fires swap-outs, free points and swap-ins), the unattributed-memory block is resized, the
 * operator's reads wait and are checked, its outputs are allocated (the peak is sampled here),
 * it computes, its outputs are written, saved tensors are saved, released ones released. With
 * the virtual clock, a fixed plan and no variation, the measured peak and stall time of the first
 * iteration therefore equal ssi_sim_run's exactly.
 */
#ifndef SS_REPLAY_H
#define SS_REPLAY_H

#include "sim.h"
#include "exec.h"

typedef struct ssi_replay_config {
    ss_options opts;          /* device, budget_bytes (required), host_mem_bytes, sim_*, seed,
                                 warmup_iters, plan_cache_size, max_detailed, release_mode,
                                 match_threshold, min_swap_bytes, layers */
    int      mode;            /* ss_swap_mode; default (0 = off) means no swapping */
    uint32_t iters;           /* iterations (>= 1) */
    const ss_plan *plan;      /* fixed plan for every iteration; NULL: stage machine + policy */
    int      plan_from_profile; /* 1: the plan was made from this (normalized) profile: saves are
                                 matched against all its saved tensors */
    double   plan_headroom;   /* stage-driven plans are made for budget * (1 - this) when that
                                 is feasible (default 0.05: fragmentation the recorded profile
                                 cannot show) */
    uint64_t segment_bytes;   /* the allocator's segment size (0: its default); the policy's
                                 plans use the same */
    ssi_time_config time;     /* per-operator durations (ssi_sim_op_times); mode LAYER with
                                 iter_seconds 0 uses the profile's iteration time */
    /* variations, from iteration vary_from on (seeded by opts.seed) */
    uint32_t vary_from;
    double   vary_seq;        /* scale the token dimension by a factor in [1 - v, 1] */
    double   vary_experts;    /* scale each expert tensor's rows by its own factor in [1 - v, 1] */
    double   skip_ops;        /* probability that an operator is not announced (merged into the
                                 previous one; its tensors stay) */
    uint32_t eval_every;      /* every Nth iteration runs its forward operators only */
    uint32_t extra_first;     /* extra operators (each holding a new buffer) in iteration 0 */
    /* recording */
    uint32_t timeline_iter;   /* iteration whose lanes are kept (UINT32_MAX: the last) */
    const char *timeline_path;/* non-NULL: write the Chrome trace of that iteration there */
    int      keep_iters;      /* 1: fill r->it with one record per iteration */
} ssi_replay_config;

/* Defaults: cpu-sim options from ss_options_default, mode smartswap, 1 iteration, LAYER times,
 * no variation, timeline of the last iteration (not written). */
void ssi_replay_config_default(ssi_replay_config *c);

typedef struct ssi_replay_iter {
    int32_t  stage;           /* ss_stage the iteration ran in */
    uint32_t nops;            /* operators announced */
    uint64_t peak_bytes;      /* allocator bytes in use, most at the simulator's sample points */
    double   iter_s, compute_s, stall_s;   /* device clock */
    double   predicted_stall_s;            /* the plan's stall_s (-1: no plan) */
    uint64_t corrupt_reads;
    ss_exec_report x;
} ssi_replay_iter;

typedef struct ssi_replay_result {
    uint32_t iters;           /* iterations run */
    uint64_t corrupt_reads;   /* reads whose pattern was wrong (poison, stale, early, reused) */
    uint64_t oom;             /* allocations refused after every fallback (the run stops) */
    uint64_t peak_bytes, budget_bytes;
    uint64_t peak_reserved_bytes;   /* the allocator's, most over the run */
    uint64_t granule_bytes;   /* the allocator's granule in effect (0: plain segments) */
    uint64_t swapped_bytes, swapped_in_bytes, matched_bytes, planned_bytes;
    uint64_t misses, stalls, evictions, event_queries, waits, host_full;
    double   stall_s;         /* sum over iterations */
    double   reuse_mean_s;    /* allocator: mean block reuse interval */
    uint64_t reuse_count;
    uint64_t plans_made;
    ssi_replay_iter *it;      /* keep_iters: iters records (malloc'ed) */
} ssi_replay_result;

/* Runs p (finalized) under c. Tensor sizes are first rounded up to SS_ALLOC_ALIGN (the sizes of
 * the allocator's blocks, ssi_replay_normalize), so plans for p should be made from the
 * normalized profile. A device or allocator that cannot be set up, a bad config or an
 * unreadable profile return an error with a message in err; corrupt reads and out-of-memory are
 * results, not errors. r is filled (ssi_replay_result_free frees r->it). */
ss_status ssi_replay_run(const ss_profile *p, const ssi_replay_config *c, ssi_replay_result *r,
                         char *err, size_t err_len);
void ssi_replay_result_free(ssi_replay_result *r);

/* A copy of p with every tensor's bytes rounded up to SS_ALLOC_ALIGN. */
ss_status ssi_replay_normalize(const ss_profile *p, ss_profile **out);

#endif /* SS_REPLAY_H */
