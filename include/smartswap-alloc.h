/* smartswap-alloc.h: the caching device allocator and the pinned host pool.
 *
 * ss_alloc_t hands out device blocks under a byte budget: best fit over cached free blocks,
 * split and coalesce inside segments reserved from the device, 256-byte alignment. The same
 * bookkeeping runs in measure mode (no device: segments are ranges of a virtual address space),
 * so the simulator runs this very code and its predicted peak equals the real one.
 *
 * Releasing a block whose memory a copy may still be reading:
 *  - ss_alloc_free_at (the "custom record stream"): the block is released when the caller
 *    reaches operator index k (ss_alloc_reach). At k it costs at most one event query, or one
 *    stream wait if the copy is late. Nothing is queried on the allocation path.
 *  - ss_alloc_free_event (stock emulation, SS_RELEASE_MODE_STOCK): as torch's record_stream:
 *    the block waits on its event; every later allocation polls the oldest pending events in
 *    order until one is not ready.
 *
 * Out of memory inside ss_alloc_malloc: release cached free segments to the device, retry, call
 * the eviction callback (set by the executor), retry, then SS_ERR_OOM.
 *
 *     ss_alloc_t *a; ss_block_t *b;
 *     ss_alloc_config c = ss_alloc_config_default(); c.budget_bytes = 64 << 20;
 *     ss_alloc_new(dev, &c, &a);               (dev NULL: measure mode)
 *     ss_alloc_malloc(a, 4096, &b);  float *x = ss_block_ptr(b);
 *     ss_alloc_free(a, b);
 *     ss_alloc_destroy(a);
 *
 * Threading contract: an allocator may be called from several threads; calls are serialised
 * by its own lock. The eviction callback runs with that lock released and may call
 * ss_alloc_free / ss_alloc_free_at on the same allocator.
 */
#ifndef SMARTSWAP_ALLOC_H
#define SMARTSWAP_ALLOC_H

#include "smartswap-device.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_ALLOC_ALIGN 256

typedef struct ss_alloc_config {
    uint64_t budget_bytes;   /* reserved bytes never exceed this; 0 = the device's capacity.
                                A budget above the capacity is clamped (with a warning). */
    uint64_t segment_bytes;  /* reservation granularity: small requests share segments of this
                                size; larger ones get a segment of their own (default 2 MiB) */
    int      release_mode;   /* ss_release_mode for blocks freed with a pending use */
    uint64_t granule_bytes;  /* 0: plain segments (above). Else virtual-memory segments: address
                                space reserved once, physical granules of this size mapped on
                                demand (docs/allocator.md); raised to budget / 16384 and to a
                                multiple of the device's vm_granularity. A device without
                                virtual memory keeps plain segments (with a warning); measure
                                mode emulates the granules. Option `granule`. */
} ss_alloc_config;

/* The lifetime of a request (ss_alloc_malloc_tagged). In virtual-memory mode, persistent large
 * blocks are packed apart from per-iteration ones; requests below one granule share granules in
 * a pool of their own whatever their lifetime. Segment mode ignores the tag. */
typedef enum ss_lifetime {
    SS_LIFETIME_ITERATION = 0,   /* activations, their gradients, temporaries */
    SS_LIFETIME_PERSISTENT = 1   /* weights, gradients, optimizer state */
} ss_lifetime;

ss_alloc_config ss_alloc_config_default(void);

/* granule_bytes (and option `granule`) "auto": 64 KiB, halved while the
 * budget holds fewer than 4096 granules, down to the device's unit or 4 KiB (docs/allocator.md
 * "Which granule"). */
#define SS_ALLOC_GRANULE_AUTO UINT64_MAX

/* The granule an allocator uses for option value `granule_bytes` (0: plain segments, returns 0;
 * SS_ALLOC_GRANULE_AUTO: the rule above) under `budget` (as given; 0: none, the auto rule's
 * 64 KiB) on a device of `vm_granularity` (caps.vm_granularity; measure mode: SS_ALLOC_ALIGN):
 * raised to budget / 16384 (the kernel's limit on mappings) and to a multiple of the device's
 * unit, at most the budget. The trainer's smallest budget counts in it (docs/trainer.md). */
uint64_t ss_alloc_granule_for(uint64_t granule_bytes, uint64_t budget, uint64_t vm_granularity);

/* The small pool's size class of a request of n bytes under granule `granule` (virtual-memory
 * mode, docs/allocator.md "Small blocks share granules"): n rounded up to SS_ALLOC_ALIGN, the
 * class is floor(granule / n), the slots a granule of it holds; 0 when the request is no small
 * one (n >= granule, granule 0: segment mode, or n 0). Callers that count granules the way the
 * allocator does (the trainer's smallest budget) use it instead of restating the rule. */
uint32_t ss_alloc_small_class(uint64_t granule, uint64_t n);

/* Called when the budget is exhausted after cached segments were released. It should make at
 * least `need` bytes reclaimable (typically by swapping tensors out and freeing their blocks)
 * and set *freed to what it released. Returning non-SS_OK or *freed == 0 ends the retry. */
typedef ss_status (*ss_evict_fn)(void *user, uint64_t need, uint64_t *freed);

/* Creates an allocator on dev, or in measure mode when dev is NULL. cfg NULL: defaults. In
 * measure mode a budget of 0 means unbounded. Segments: a request of up to segment_bytes gets
 * (or shares) a segment of segment_bytes; a larger one a segment rounded up to a multiple of
 * segment_bytes; when that does not fit the budget (or the device), a segment of exactly the
 * rounded request. segment_bytes must be a multiple of SS_ALLOC_ALIGN. */
ss_status ss_alloc_new(ss_device_t *dev, const ss_alloc_config *cfg, ss_alloc_t **out);
/* Returns every segment to the device and frees the allocator. With live blocks: SS_ERR_STATE,
 * nothing freed (call ss_alloc_destroy_force to reclaim anyway). */
ss_status ss_alloc_destroy(ss_alloc_t *a);
ss_status ss_alloc_destroy_force(ss_alloc_t *a);

void ss_alloc_set_evict(ss_alloc_t *a, ss_evict_fn fn, void *user);

/* Measure mode's clock (seconds); also stamps hand-outs for the reuse-interval statistic in
 * measure mode. Real mode ignores it and uses the device clock (ss_device_now). The OOM path of
 * a stock-mode allocator may move it forward (see ss_alloc_free_event); stats.clock_s reads it. */
void ss_alloc_set_time(ss_alloc_t *a, double now);

/* n > 0 bytes (rounded up to SS_ALLOC_ALIGN). SS_ERR_OOM after every fallback; *out untouched,
 * and ss_alloc_last_oom says why. ss_alloc_malloc is ss_alloc_malloc_tagged with
 * SS_LIFETIME_ITERATION. */
ss_status ss_alloc_malloc(ss_alloc_t *a, size_t n, ss_block_t **out);
ss_status ss_alloc_malloc_tagged(ss_alloc_t *a, size_t n, ss_lifetime lifetime, ss_block_t **out);
/* The explanation of the last SS_ERR_OOM of a ("" if none) into buf: "exhausted" (what is in
 * use, counted as the out-of-memory rule counts it, plus the request passes the budget) or
 * "fragmented" (it would fit, but no free run is large enough), with the request, in use,
 * reserved, budget and the largest free run. */
ss_status ss_alloc_last_oom(const ss_alloc_t *a, char *buf, size_t len);

/* The block's device pointer (NULL in measure mode), its offset in the allocator's address space
 * (measure and real mode alike), and its rounded size. */
void    *ss_block_ptr(const ss_block_t *b);
uint64_t ss_block_offset(const ss_block_t *b);
uint64_t ss_block_size(const ss_block_t *b);

/* Releases b for reuse now. A block not live in a (foreign or freed twice): SS_ERR_STATE. */
ss_status ss_alloc_free(ss_alloc_t *a, ss_block_t *b);

/* Deferred release at operator index k: b is not handed out again before the caller reaches k.
 * e (may be NULL: no pending use) is the event after the last pending use (the swap-out copy);
 * it must stay valid and must not be re-recorded until the block is released at k. In measure
 * mode e is NULL and t_done is the simulated completion time of that use. k is a counter that
 * the caller never moves backwards (the executor counts operators across iterations); a k
 * already reached is released at the next ss_alloc_reach. Until released the block counts as
 * in use (and as pending). With release_mode SS_RELEASE_MODE_STOCK this call behaves as
 * ss_alloc_free_stock(a, b, e, t_done) (k is ignored), so one executor can run either mode.
 *
 * Stream semantics: the allocator hands memory out for use on one "reuse stream" (the compute
 * stream given to ss_alloc_reach). A block freed with ss_alloc_free must have no pending use on
 * any other stream; a block whose memory another stream (a copy stream) may still read is freed
 * with ss_alloc_free_at (or free_event), and its reuse is ordered after that use: either the
 * event is found complete, or the reuse stream waits on it. Work on a third stream that uses a
 * re-handed block must be ordered after the reuse stream by the caller. */
ss_status ss_alloc_free_at(ss_alloc_t *a, ss_block_t *b, uint64_t k, ss_event_t *e,
                           double t_done);

/* The caller has reached operator index k: releases every deferred block due at or before k.
 * For each: one ss_event_query; if the copy is still running, `s` (the stream that will reuse
 * the memory) waits on the event with ss_event_wait and the block is released at once (a
 * counted wait). In measure mode, a block whose t_done is after the clock counts as a wait and
 * *wait_until (may be NULL) is raised to its t_done so the simulator can stall the compute
 * stream; real mode sets *wait_until to 0. */
ss_status ss_alloc_reach(ss_alloc_t *a, uint64_t k, ss_stream_t *s, double *wait_until);
/* (s NULL in real mode: a late copy is waited for on the host with ss_event_sync, counted as
 * a wait. On a device error the block stays pending, the status is returned and a later
 * ss_alloc_reach retries it.) */

/* Out of memory, real mode: releases every deferred block now, before its operator, each
 * after one query and (if the copy is still running) a host wait on its event; counted in
 * stats.early_releases and *bytes (may be NULL). For an executor under memory pressure that has
 * made sure no one reads those blocks again (a block whose copy is done is free to reuse). */
ss_status ss_alloc_release_early(ss_alloc_t *a, uint64_t *bytes);
/* The same for one deferred block b (freed with ss_alloc_free_at, not yet released): released
 * now after one query and, if its copy is still running, a host wait; *bytes (may be NULL) gets
 * its size. b not deferred in a: SS_ERR_STATE. On a device error b stays pending. */
ss_status ss_alloc_release_block(ss_alloc_t *a, ss_block_t *b, uint64_t *bytes);

/* Stock emulation: b's last use is recorded in e; b is reused only after an allocation call
 * finds e complete by polling pending events in order, one query each, until one is not ready
 * (one FIFO for all streams: head-of-line blocking as in c10 before per-stream deques). Under
 * memory pressure (the OOM path) every pending event is synchronised, each a counted wait, as
 * c10's synchronize_and_free_events. */
ss_status ss_alloc_free_event(ss_alloc_t *a, ss_block_t *b, ss_event_t *e);
/* The same with a completion time for measure mode: e NULL and t_done the simulated completion
 * of the last use; each poll is a counted query that finds the block ready when t_done <= the
 * clock. ss_alloc_free_event(a, b, e) is ss_alloc_free_stock(a, b, e, 0). */
ss_status ss_alloc_free_stock(ss_alloc_t *a, ss_block_t *b, ss_event_t *e, double t_done);

/* Releases all cached free segments (parked ones included) back to the device. */
ss_status ss_alloc_trim(ss_alloc_t *a);
/* Sets every fully free segment aside, without a device call, so that the requests that follow
 * are placed as by a fresh allocator holding only what is live now: a request that would make a
 * new segment takes a parked one of exactly that size instead (stats.segment_reuses), else the
 * device's; parked segments go back to the device when the budget or the device needs their
 * room, and at ss_alloc_trim. They count as reserved and cached (stats.parked_bytes). */
ss_status ss_alloc_park(ss_alloc_t *a);

typedef struct ss_alloc_stats {
    uint64_t budget_bytes;
    uint64_t in_use_bytes, peak_in_use_bytes;       /* handed out and not yet released
                                                       (pending deferred/stock blocks count) */
    uint64_t reserved_bytes, peak_reserved_bytes;   /* segments held from the device */
    uint64_t cached_bytes;                          /* reserved and free */
    uint64_t alloc_calls, free_calls, cache_hits;   /* cache hit: no new segment needed */
    uint64_t segment_allocs, segment_frees;
    uint64_t oom_trims, evict_calls, oom_errors;
    uint64_t deferred_releases, event_queries, waits;
    uint64_t early_releases;                        /* ss_alloc_release_early's */
    uint64_t reuse_count;                           /* block reuse interval: from completion */
    double   reuse_total_s, reuse_max_s;            /* of a block's last pending use to its */
                                                    /* next hand-out (docs/allocator.md) */
    uint64_t pending_bytes;                         /* part of in_use awaiting release */
    uint64_t live_blocks, pending_blocks, segments; /* now */
    double   clock_s;                               /* the allocator's clock now: measure mode's
                                                       (moved forward by stock syncs on the OOM
                                                       path), else the device's */
    uint64_t parked_bytes;                          /* part of cached set aside by ss_alloc_park */
    uint64_t segment_reuses;                        /* parked segments taken back, no device call */
    uint64_t largest_free_bytes;                    /* the largest request that fits now
                                                       without eviction (see docs) */
    uint64_t slack_bytes;                           /* reserved - in use */
    uint64_t granule_bytes;                         /* 0: segment mode */
    uint64_t granules_mapped, granules_cached;      /* now; cached: touched by no block */
    uint64_t granule_maps, granule_unmaps;          /* device map / unmap calls */
    uint64_t granules_busy;                         /* unmaps refused: a copy still touched it */
    uint64_t guard_overruns;                        /* virtual-memory mode: releases that found
                                                       a block's guard bytes overwritten */
} ss_alloc_stats;

ss_status ss_alloc_get_stats(const ss_alloc_t *a, ss_alloc_stats *out);
/* The sizes (as held: rounded to SS_ALLOC_ALIGN) of the live blocks requested with
 * SS_LIFETIME_PERSISTENT, segment by segment in address order; *n is their count (sizes gets
 * the first cap of them). The policy's simulations start from this layout. */
ss_status ss_alloc_persistent_sizes(const ss_alloc_t *a, uint64_t *sizes, size_t cap, size_t *n);
/* *peak: the most bytes in use (live + pending) since the previous call (since creation at the
 * first), at least the bytes in use now (*in_use, when not NULL); the window then restarts at
 * the bytes in use now. The profiler takes one window per operator: its peak includes the
 * temporaries the operator allocated and freed before the next one. */
ss_status ss_alloc_window_peak(ss_alloc_t *a, uint64_t *peak, uint64_t *in_use);
/* *peak: the most bytes reserved (segments held; virtual-memory mode: granules mapped x granule)
 * since the previous call (since creation at the first), at least the bytes reserved now; the
 * window then restarts at the bytes reserved now. The executor takes one window per iteration
 * (ss_exec_report.peak_reserved_bytes). */
ss_status ss_alloc_window_reserved(ss_alloc_t *a, uint64_t *peak);
/* The configuration in effect: segment_bytes as normalised by ss_alloc_new (0 became the
 * default) and budget_bytes as enforced (a device's capacity when 0 or above it). */
ss_status ss_alloc_get_config(const ss_alloc_t *a, ss_alloc_config *out);
/* One line per field into buf, for people. */
ss_status ss_alloc_stats_format(const ss_alloc_stats *s, char *buf, size_t len);

/* Walks every segment and block and checks the invariants (sizes add up, no overlap, free
 * neighbours coalesced, lists consistent). SS_ERR_CORRUPT with a message in the log if not. */
ss_status ss_alloc_check(const ss_alloc_t *a);

/* ---------------------------------------------------------------------------------------- */
/* pinned host pool                                                                          */

typedef struct ss_hostpool_stats {
    uint64_t cap_bytes;
    uint64_t in_use_bytes, peak_in_use_bytes, reserved_bytes;
    uint64_t gets, puts, host_allocs, host_frees, reuse_hits, cap_errors;
} ss_hostpool_stats;

/* Pinned buffers from dev's host_alloc, by size class (rounded up), kept for reuse. cap_bytes
 * bounds the reserved total (0 = no cap). Thread-safe. */
ss_status ss_hostpool_new(ss_device_t *dev, uint64_t cap_bytes, ss_hostpool_t **out);
/* A buffer of at least n bytes. Past the cap (after freeing cached buffers of other classes):
 * SS_ERR_HOST_OOM, and the log says the cap and how to raise it. */
ss_status ss_hostpool_get(ss_hostpool_t *p, size_t n, void **out);
/* The bytes a request of n bytes holds in the pool (its size class: at least 4 KiB, at most
 * 25 % above n beyond that); what in_use_bytes and the cap count. */
uint64_t ss_hostpool_class_bytes(uint64_t n);
ss_status ss_hostpool_put(ss_hostpool_t *p, void *buf);
ss_status ss_hostpool_get_stats(const ss_hostpool_t *p, ss_hostpool_stats *out);
/* SS_ERR_STATE if buffers are still out. */
ss_status ss_hostpool_destroy(ss_hostpool_t *p);

#ifdef __cplusplus
}
#endif
#endif /* SMARTSWAP_ALLOC_H */
