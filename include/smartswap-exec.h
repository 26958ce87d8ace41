/* smartswap-exec.h: the executor, as callers switch it on and read what it did.
 *
 * The framework API (smartswap.h) profiles and plans; the executor makes the plan real: it
 * matches each saved tensor to a plan entry, copies it to host memory on its own device-to-host
 * stream after the producer, releases its device block at the plan's predicted free point,
 * brings it back on its own host-to-device stream at the planned point, and makes the consumer
 * stream wait only for that copy. docs/executor.md describes every step.
 *
 * Two modes (ss_swap_mode):
 *  - SS_SWAP_SMARTSWAP: the plans of the stage machine (or a fixed plan), the custom record
 *    stream (or its stock emulation, options.release_mode), the eviction fallback.
 *  - SS_SWAP_OFFLOAD_ALL: torch's save_on_cpu baseline: every saved tensor is copied out at save
 *    and brought back at its load, no prefetch and no plan.
 *
 *     ss_ctx_config c = ss_ctx_config_default();
 *     c.mem_owner = SS_MEM_SMARTSWAP; c.device = dev; c.compute = compute; c.alloc = al;
 *     ss_ctx_new(&c, &ctx);
 *     ss_ctx_enable_swap(ctx, SS_SWAP_SMARTSWAP);   // or SS_SWAP_OFFLOAD_ALL
 *     ... iterations as in docs/api.md; ss_ctx_exec_report(ctx, &r) after each iter_end
 *
 * Threading: ss_ctx_enable_swap only between iterations, not racing other calls on the
 * context (as ss_ctx_new). The report and timeline calls are "any thread" calls.
 */
#ifndef SMARTSWAP_EXEC_H
#define SMARTSWAP_EXEC_H

#include "smartswap-alloc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ss_swap_mode {
    SS_SWAP_OFF = 0,          /* pass-through: nothing is swapped (the default of a context) */
    SS_SWAP_SMARTSWAP = 1,    /* plans, predicted-point release, prefetch, eviction fallback */
    SS_SWAP_OFFLOAD_ALL = 2   /* every saved tensor out at save, back at load (save_on_cpu) */
} ss_swap_mode;

/* "off", "smartswap", "offload-all" ("?" out of range); and back (-1 unknown). Thread-safe. */
const char *ss_swap_mode_name(int mode);
int         ss_swap_mode_from_name(const char *name);

typedef struct ss_exec_config {
    int            mode;          /* ss_swap_mode */
    ss_hostpool_t *hostpool;      /* host buffers for swapped tensors; NULL: the executor makes
                                     its own, capped at options.host_mem_bytes */
    int            poison;        /* -1: poison swapped-out blocks where the device can (cpu-sim);
                                     0: never; 1: always (SS_ERR_UNSUPPORTED on other devices) */
    int            use_policy;    /* 1 (default): SS_SWAP_SMARTSWAP installs the policy generator
                                     as the stage machine's plan hook, configured from the
                                     context's options (budget: options.budget_bytes, else the
                                     allocator's budget); 0: keep the current hook */
    int            hybrid;        /* with use_policy: 1 installs the hybrid (swap or recompute per
                                     tensor, docs/policy.md) instead of the pure-swap policy; it
                                     recomputes only tensors the caller registered
                                     (ss_ctx_recomputable). 0 (default): swap only */
} ss_exec_config;

/* mode SS_SWAP_SMARTSWAP, own host pool, poison -1, use_policy 1. */
ss_exec_config ss_exec_config_default(void);

/* Switches the executor on (or off with SS_SWAP_OFF) for a context that has a device
 * (cfg.device). SS_MEM_SMARTSWAP contexts swap blocks of their allocator and install the
 * eviction callback on it (ss_alloc_set_evict); SS_MEM_FRAMEWORK contexts swap the caller's
 * buffers through SS_ACTION_ALLOC / SS_ACTION_DROP. The compute stream is cfg.compute, else the
 * device's default stream (ss_stream_wrap(dev, NULL)). Creates two copy streams and, unless
 * given, a host pool. Errors: SS_ERR_INVALID (no device, bad mode), SS_ERR_STATE (inside an
 * iteration, or live saved tensors), SS_ERR_HOST_OOM, device errors; the context is then
 * unchanged. Not racing other calls on ctx. */
ss_status ss_ctx_enable_swap(ss_ctx_t *ctx, int mode);
ss_status ss_ctx_enable_swap_ex(ss_ctx_t *ctx, const ss_exec_config *cfg);

/* What the executor did in one iteration (or, from ss_ctx_exec_totals, summed over all). */
typedef struct ss_exec_report {
    uint64_t iter;
    int32_t  mode;              /* ss_swap_mode */
    int32_t  stage;             /* ss_stage the iteration ran in */
    uint32_t planned_tensors;   /* entries of the plan the iteration ran with */
    uint32_t matched_exact;     /* saves matched to a planned entry with equal features */
    uint32_t matched_fuzzy;     /* saves matched by score (options.match_threshold) */
    uint32_t unmatched;         /* saves of a planned iteration that matched no tensor of the
                                   plan (or, without its profile, no entry) */
    uint64_t planned_bytes;     /* bytes of the plan's entries */
    uint64_t matched_bytes;     /* bytes of the entries that a save matched */
    uint64_t swapped_out_bytes; /* device-to-host copies issued (planned, offload, eviction) */
    uint64_t swapped_in_bytes;  /* host-to-device copies issued */
    uint32_t swap_outs, swap_ins;
    uint32_t misses;            /* loads whose swap-in was never issued: brought in at once
                                   (offload-all: every load of a swapped tensor) */
    uint32_t stalls;            /* loads that found their swap-in still running and waited */
    double   stall_s;           /* device-clock seconds spent in those waits (cpu-sim exact) */
    uint32_t evictions;         /* tensors swapped out by the eviction fallback */
    uint64_t evicted_bytes;
    uint64_t early_freed;           /* out of memory: swapped-out blocks released before their
                                       planned operator (after waiting for their copies) */
    uint32_t host_full;         /* swaps skipped because the host pool was at its cap */
    uint32_t stale;             /* 1: the plan was found stale (evictions): re-plan asked */
    uint32_t switched;          /* 1: before its first save the iteration switched to another
                                   cached plan (its sizes were another sequence's), and ran it */
    uint64_t event_queries;     /* release-path event queries (allocator, or framework DROP) */
    uint64_t waits;             /* release-path waits (a copy late at its free point) */
    uint64_t peak_bytes;        /* allocator bytes in use, most seen by the executor (sampled at
                                   every operator, save, load and swap-in) */
    uint64_t host_peak_bytes;   /* host pool bytes in use, most */
    uint64_t peak_reserved_bytes;       /* the allocator's bytes reserved, most during the
                                           iteration (ss_alloc_window_reserved; 0 when the
                                           framework owns memory) */
    uint64_t plan_peak_reserved_bytes;  /* the simulator's prediction of that for the plan the
                                           iteration ran (0: no plan, or one read from a file) */
} ss_exec_report;

/* The report of the last finished iteration (zeros before the first; SS_ERR_STATE without an
 * executor). Any thread. */
ss_status ss_ctx_exec_report(ss_ctx_t *ctx, ss_exec_report *out);
/* Sums over every finished iteration (peaks: the most; iter: iterations counted). */
ss_status ss_ctx_exec_totals(ss_ctx_t *ctx, ss_exec_report *out);

/* Records the next iteration's compute, D2H and H2D lanes (start and end of every operator
 * and copy, device clock) so that ss_ctx_exec_timeline_write can write them. on = 0 stops.
 * Any thread (takes effect at the next iter_begin). */
ss_status ss_ctx_exec_timeline(ss_ctx_t *ctx, int on);
/* Writes the last recorded iteration as a Chrome trace event file (opens in Perfetto and
 * chrome://tracing): process "actual" with lanes compute, d2h, h2d. Atomic write.
 * SS_ERR_STATE if nothing was recorded, SS_ERR_IO. Any thread. */
ss_status ss_ctx_exec_timeline_write(ss_ctx_t *ctx, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* SMARTSWAP_EXEC_H */
