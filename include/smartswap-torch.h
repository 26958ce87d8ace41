/* smartswap-torch.h: the thin C entry point of the PyTorch adapter (python/smartswap,
 * docs/pytorch.md).
 *
 * The adapter is pure Python over ctypes. These calls bundle what one saved_tensors_hooks
 * callback needs into one or two C calls (ctypes costs about 0.2-1 us per call): open a device
 * and a framework-owned context with the executor switched on, report an operator and a save,
 * poll the executor's actions, answer its allocations and load. Every decision (plan, eviction,
 * when to drop and prefetch) is the core's; the adapter only executes actions.
 *
 * Threading: as the framework API (smartswap.h). ss_torch_pack and ss_torch_op are
 * driving-thread calls; ss_torch_load, ss_torch_poll, ss_torch_release and ss_torch_get_stats
 * are any-thread calls. ss_torch_open / ss_torch_close must not race with anything.
 */
#ifndef SMARTSWAP_TORCH_H
#define SMARTSWAP_TORCH_H

#include "smartswap-exec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ss_torch ss_torch_t;

/* Opens `device` ("cpu-sim", "cuda", "cuda:N"), wraps `compute` (a cudaStream_t as an integer;
 * 0: the device's default stream, the host stream on cpu-sim) and creates an SS_MEM_FRAMEWORK
 * context with the executor in SS_SWAP_SMARTSWAP mode. `options` is "name=value" lines
 * separated by '\n' (names of the options table, '-' or '_'), applied after the SMARTSWAP_*
 * environment variables; NULL or "" for none. With options.disable the context is a
 * pass-through and no device is opened. On failure returns the status, writes a message naming
 * what went wrong into err and leaves *out untouched. */
ss_status ss_torch_open(const char *device, uint64_t compute, const char *options, char *err,
                        size_t err_len, ss_torch_t **out);
/* Frees the context, the executor, the streams and the device. NULL is fine. */
void ss_torch_close(ss_torch_t *t);

/* Keeps resident saved bytes within `budget` in every iteration. After each save and load
 * (and ss_torch_held), while they exceed it: in an iteration without a plan (the executor only
 * moves what a plan schedules) the earliest saved resident tensors of at least options.min_swap
 * bytes are copied out here; in a planned one the plan did not foresee (sizes outgrew it) the
 * executor evicts (swap-outs in flight first, then the tensors used farthest away). Either way
 * they are handed out as SS_ACTION_DROP after their copies are done and brought back at their
 * load (counted as evictions and misses). 0: off (the default). Call it between iterations.
 * Needs a device. */
ss_status ss_torch_set_evict_budget(ss_torch_t *t, uint64_t budget);

/* The context, for every other ss_ctx_* call (iteration bracket, intern, stage, reports). */
ss_ctx_t *ss_torch_ctx(ss_torch_t *t);

/* One operator (name id from ss_ctx_intern, site hash), then up to max pending actions into
 * acts (*n of them). Driving thread. */
ss_status ss_torch_op(ss_torch_t *t, uint32_t name_id, uint64_t site, ss_action *acts,
                      uint32_t max, uint32_t *n);

/* One operator, then the save of a tensor of `bytes` at ptr (ss_ctx_save), then the pending
 * actions. *handle is set even when only the action poll failed. Driving thread. */
ss_status ss_torch_pack(ss_torch_t *t, uint32_t name_id, uint64_t site, void *ptr, uint64_t bytes,
                        int dtype, int ndim, const int64_t *shape, uint32_t flags,
                        uint64_t *handle, ss_action *acts, uint32_t max, uint32_t *n);

/* Answers na SS_ACTION_ALLOC actions (handles ah, buffers ap; a NULL buffer: could not), then,
 * when handle is not 0, loads it ordered on `stream` (a cudaStream_t as an integer; 0: the
 * context's compute stream) into *ptr, then polls the pending actions. Any thread. */
ss_status ss_torch_load(ss_torch_t *t, const uint64_t *ah, void *const *ap, uint32_t na,
                        uint64_t handle, uint64_t stream, void **ptr, ss_action *acts,
                        uint32_t max, uint32_t *n);

/* The pending actions only. Any thread. */
ss_status ss_torch_poll(ss_torch_t *t, ss_action *acts, uint32_t max, uint32_t *n);

/* The caller could not drop handle's device tensor at SS_ACTION_DROP (someone else still holds
 * its storage: held = 1), or has dropped it now (held = 0). Keeps the resident tally that the
 * eviction before the first plan uses true. Any thread. */
ss_status ss_torch_held(ss_torch_t *t, uint64_t handle, int held);

/* ss_ctx_release. Any thread. */
ss_status ss_torch_release(ss_torch_t *t, uint64_t handle);

/* Whether the open iteration is recorded in detail: 0 light, 1 from its first operator
 * (GenPolicy, a Stable probe or re-plan), 2 from a divergence on. Valid after ss_ctx_iter_begin;
 * the adapter turns its TorchDispatchMode on for 1. Driving thread. */
int ss_torch_recording(ss_torch_t *t);

/* In a detailed iteration (no-op otherwise): adds `flops` to the FLOPs of the operator reported
 * last (the aten operators that ran after it, before the next hook) in the profile being
 * recorded, and `overhead_s` seconds to the time spent inside smartswap (the dispatch mode's
 * own time), which the profile's operator seconds leave out. Neither changes the operator
 * sequence, its hash or its count. *nops (may be NULL): the operators reported so far in the
 * iteration (the last one's index + 1), in any iteration. Driving thread. */
ss_status ss_torch_detail(ss_torch_t *t, double flops, double overhead_s, uint32_t *nops);

/* The caller's varying dimensions of the open iteration (n values, e.g. batch and sequence
 * length; n = 0 clears them). Their hash is folded into the iteration's size signature at
 * iter_end, so the plan cache keys iterations by them as well as by the bucketed saved bytes:
 * iterations that declare other sizes never share a cache entry (a plan made for them is found
 * again by the same sizes). The operator sequence and its hash are unchanged. Cleared at each
 * ss_ctx_iter_begin. SS_ERR_STATE outside an iteration. Driving thread. */
ss_status ss_torch_set_sizes(ss_torch_t *t, const int64_t *v, uint32_t n);

/* What the adapter's stats() reports from the core. */
typedef struct ss_torch_stats {
    int32_t  stage;                 /* ss_stage of the next iteration */
    int32_t  last_stage;            /* ss_stage the last finished iteration ran in */
    uint64_t seq_hash;              /* of the last finished iteration */
    uint64_t iterations, detailed_iterations;
    uint64_t swapped_out_bytes, swapped_in_bytes;
    uint64_t stalls, misses, evictions;
    uint64_t plans_made, plans_cached, cache_hits, mid_switches, plan_errors;
    uint64_t saves, loads, releases, actions;
    uint64_t host_peak_bytes;
    uint64_t resident_bytes;        /* saved bytes resident on the device now, as tallied here */
    double   stall_seconds;
    double   profile_overhead_seconds;  /* time inside smartswap during detailed recording */
    uint64_t prefetches_refused;    /* swap-ins a plan asked for that did not fit the budget
                                       with what was resident: refused before the caller
                                       allocated, their loads became misses */
} ss_torch_stats;

/* Copies the counters (sums over every finished iteration). Any thread. */
ss_status ss_torch_get_stats(ss_torch_t *t, ss_torch_stats *out);

/* The last error or warning the library logged (process-wide, "" if none). */
const char *ss_torch_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* SMARTSWAP_TORCH_H */
