/* smartswap-device.h: the device layer, as callers see it.
 *
 * A device is one backend instance: "cpu-sim" (host memory under a capacity limit, copy-engine
 * threads that take bytes/bandwidth, poisoning; always built), "cuda" / "cuda:N" (the CUDA
 * runtime; built when the toolkit is found), and the "fault" wrapper around either (fails the Nth
 * call of a chosen kind, for tests). Backends implement the table in src/device-impl.h; these
 * wrappers check arguments, supply defaults for optional slots, and count.
 *
 *     ss_device_t *dev; ss_stream_t *copy; ss_event_t *done; void *d, *h;
 *     ss_options o = ss_options_default();
 *     ss_device_open("cpu-sim", &o, &dev);
 *     ss_stream_new(dev, &copy);  ss_event_new(dev, &done);
 *     ss_mem_alloc(dev, n, &d);   ss_host_alloc(dev, n, &h);
 *     ss_copy_async(dev, copy, h, d, n, SS_COPY_D2H);
 *     ss_event_record(dev, done, copy);
 *     ss_event_sync(dev, done);                  (h now holds d's bytes)
 *
 * Threading contract: a device may be used from several threads at once (the forward thread and
 * autograd's backward thread, for instance): every call here is thread-safe for distinct
 * streams and events; one stream or event must not be used by two threads at the same moment,
 * except ss_event_query and ss_event_sync, which may be called from any thread. ss_device_close
 * must not race with any other call on that device.
 *
 * Ordering model (the CUDA model): work enqueued on one stream runs in order; across streams,
 * only events order work (record on A, wait on B). The host is ordered after a stream by
 * ss_stream_sync or ss_event_sync. A "host stream" (ss_stream_wrap(dev, NULL) on cpu-sim) is the
 * calling thread itself: work on it runs at once, recording an event on it marks "now", and
 * waiting on it blocks the caller until the event completes. The C trainer on cpu-sim computes
 * on the host stream.
 */
#ifndef SMARTSWAP_DEVICE_H
#define SMARTSWAP_DEVICE_H

#include "smartswap.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ss_copy_kind {
    SS_COPY_H2D = 0,
    SS_COPY_D2H = 1,
    SS_COPY_D2D = 2,
    SS_COPY_KIND_COUNT
} ss_copy_kind;

/* What a device is and can do; filled once at open. */
typedef struct ss_device_caps {
    char     name[32];          /* "cpu-sim", "cuda:0", "fault(cpu-sim)" */
    char     description[96];   /* model name, or the cpu-sim settings */
    uint64_t total_bytes;       /* device memory capacity */
    uint64_t alignment;         /* every device pointer is a multiple of this (256) */
    int      has_pinned_host;   /* host_alloc returns page-locked memory */
    int      virtual_clock;     /* times are computed, nothing sleeps (cpu-sim option) */
    double   d2h_gbps, h2d_gbps;/* link bandwidth each way, GB/s (cuda: nominal, 0 if unknown) */
    uint64_t vm_granularity;    /* virtual memory: the mapping granularity in bytes (cpu-sim: the
                                   page size; cuda: cuMemGetAllocationGranularity); 0 = the device
                                   has no ss_vm_* calls (the allocator keeps plain segments) */
} ss_device_caps;

/* Counters kept by the wrappers; ss_device_stats copies them. */
typedef struct ss_device_stats {
    uint64_t mem_allocs, mem_frees, mem_bytes_in_use, mem_bytes_peak;
    uint64_t host_allocs, host_frees, host_bytes_in_use;
    uint64_t copies[SS_COPY_KIND_COUNT], copy_bytes[SS_COPY_KIND_COUNT];
    uint64_t event_records, event_waits, event_queries, event_syncs;
    uint64_t poison_hits;       /* reads of poisoned memory reported by ss_poison_scan */
    uint64_t guard_overruns;    /* cpu-sim: frees that found a guard byte overwritten */
    uint64_t vm_maps, vm_unmaps, vm_busy; /* ss_vm_map / ss_vm_unmap calls; unmaps refused
                                             because a copy touching the range was in flight */
    uint64_t vm_mapped_bytes, vm_reserved_bytes;   /* now (mapped bytes also count in
                                                      mem_bytes_in_use and its peak) */
} ss_device_stats;

/* ---------------------------------------------------------------------------------------- */
/* devices                                                                                   */

/* Lists the device names this build can open on this machine, space separated, into buf
 * (e.g. "cpu-sim cuda:0"). A backend compiled in but with no hardware is listed in *absent
 * as "cuda (no GPU: <driver message>)" when absent is non-NULL. */
ss_status ss_device_list(char *buf, size_t len, char *absent, size_t absent_len);

/* Opens a device by name: "cpu-sim", "cuda", "cuda:N". Options used: sim_* for cpu-sim, seed.
 * opts may be NULL (defaults). Returns SS_ERR_NOT_FOUND for an unknown name or a backend not in
 * this build, SS_ERR_DEVICE when the hardware is missing. */
ss_status ss_device_open(const char *name, const ss_options *opts, ss_device_t **out);

/* Wraps dev so that the nth call (1-based) of the given kind fails with the status `fail`;
 * repeat = 0 fails once, repeat = 1 fails that call and every later one of that kind.
 * kind: "alloc" (device and host allocations), "copy", "event" (new/record/wait/query/sync),
 * "stream". The wrapper owns dev from here on: closing it closes dev. */
ss_status ss_device_fault(ss_device_t *dev, const char *kind, uint64_t nth, int repeat,
                          ss_status fail, ss_device_t **out);

/* Changes an armed fault of a fault device (same arguments); nth = 0 disarms. */
ss_status ss_device_fault_arm(ss_device_t *fault_dev, const char *kind, uint64_t nth,
                              int repeat, ss_status fail);

/* Arms a fault device to fail the nth call (1-based, once) made from one call site of the
 * library: site is "FILE:LINE" as the sites list names it (FILE matched as a path suffix);
 * fail = SS_OK fails with the kind's own status (SS_ERR_OOM for alloc, else SS_ERR_DEVICE);
 * nth = 0 disarms. Calls from outside the library have the site "?:0". */
ss_status ss_device_fault_arm_site(ss_device_t *fault_dev, const char *site, uint64_t nth,
                                   ss_status fail);

/* One call site a fault device has seen: the library file and line, the kind, its calls. */
typedef struct ss_fault_site {
    const char *file;
    int         line;
    const char *kind;     /* "alloc", "copy", "event" or "stream" */
    uint64_t    calls;
} ss_fault_site;

/* Copies up to cap sites, in the order of their first call, to out; returns how many there are
 * (0 for a device that is not a fault device). */
size_t ss_device_fault_sites(const ss_device_t *fault_dev, ss_fault_site *out, size_t cap);

/* The failures a fault device has injected so far. */
uint64_t ss_device_fault_injected(const ss_device_t *fault_dev);

/* Closes the device. Returns SS_ERR_STATE and closes nothing if device memory, host memory,
 * streams or events it handed out are still live (each kind is logged with its count). */
ss_status ss_device_close(ss_device_t *dev);

const ss_device_caps *ss_device_get_caps(const ss_device_t *dev);
ss_status ss_device_get_stats(const ss_device_t *dev, ss_device_stats *out);

/* Device memory: free and total bytes now. */
ss_status ss_device_mem_info(ss_device_t *dev, uint64_t *free_bytes, uint64_t *total_bytes);

/* The device's clock in seconds since open: wall time, or virtual time under the virtual clock
 * (the host's virtual time: it advances when the host waits on device work). */
double ss_device_now(ss_device_t *dev);

/* ---------------------------------------------------------------------------------------- */
/* memory                                                                                    */

/* Device memory: n > 0 bytes, aligned to caps.alignment. SS_ERR_OOM when the device is full,
 * quietly (the caller decides what to free and retries). */
ss_status ss_mem_alloc(ss_device_t *dev, size_t n, void **out);
/* n must be the size passed to ss_mem_alloc. A pointer not from this device, or freed twice,
 * returns SS_ERR_STATE (and is logged); cpu-sim checks the guard bytes (SS_ERR_CORRUPT on an
 * overrun, the block is still freed) and fills the block with the poison pattern. */
ss_status ss_mem_free(ss_device_t *dev, void *p, size_t n);

/* Virtual memory (devices with caps.vm_granularity > 0; others: SS_ERR_UNSUPPORTED). Every size
 * and address is a multiple of caps.vm_granularity.
 *  ss_vm_reserve: n bytes of address space, nothing behind it (access faults) into *va.
 *  ss_vm_release: gives a reservation back; every range mapped in it must be unmapped first
 *                 (SS_ERR_STATE otherwise, nothing released).
 *  ss_vm_map:     backs [va, va+n), inside a reservation and not mapped, with fresh physical
 *                 memory of the device (counted as device memory in use; cpu-sim fills it with
 *                 the poison pattern). SS_ERR_OOM, quietly, when the device has no room.
 *  ss_vm_unmap:   gives back the physical memory of [va, va+n), exactly a range passed to
 *                 ss_vm_map; the addresses fault again. SS_ERR_STATE, and nothing changes, while
 *                 a copy that touches the range may still run (cpu-sim: one queued or in flight;
 *                 cuda: an event recorded on every stream at the first refused call has not
 *                 completed): try again later. Physical memory is mapped at one address at a
 *                 time; the address space is never handed back to the system before
 *                 ss_vm_release (cpu-sim maps PROT_NONE over it, so no other mmap lands there).
 * ss_device_close refuses while reservations are live. */
ss_status ss_vm_reserve(ss_device_t *dev, size_t n, void **va);
ss_status ss_vm_release(ss_device_t *dev, void *va, size_t n);
ss_status ss_vm_map(ss_device_t *dev, void *va, size_t n);
ss_status ss_vm_unmap(ss_device_t *dev, void *va, size_t n);

/* Pinned host memory (default slot: malloc/free). SS_ERR_HOST_OOM when refused. */
ss_status ss_host_alloc(ss_device_t *dev, size_t n, void **out);
ss_status ss_host_free(ss_device_t *dev, void *p, size_t n);

/* The poison pattern: a quiet NaN bit pattern for float32 (0x7FC0DEAD) repeated; a block read
 * after being freed or swapped out shows NaN in any float computation. */
#define SS_POISON_WORD 0x7FC0DEADu

/* cpu-sim: fills [p, p+n) of device memory with the poison pattern (used for swapped-out
 * blocks), and checks that it still holds: *found is set to the number of bytes not equal to
 * the pattern. Other devices: SS_ERR_UNSUPPORTED. */
ss_status ss_mem_poison(ss_device_t *dev, void *p, size_t n);
ss_status ss_mem_check_poison(ss_device_t *dev, const void *p, size_t n, size_t *found);

/* Reports reads of poisoned memory: counts the aligned 32-bit words in [p, p+n) (any memory the
 * host can read: a host buffer a copy filled, or cpu-sim device memory) equal to
 * SS_POISON_WORD into *words (may be NULL). Returns SS_OK when there are none, and
 * SS_ERR_CORRUPT (*words still set, logged as a warning, counted in stats.poison_hits of dev
 * when dev is non-NULL) when there are. Thread-safe. */
ss_status ss_poison_scan(ss_device_t *dev, const void *p, size_t n, size_t *words);

/* ---------------------------------------------------------------------------------------- */
/* streams                                                                                   */

/* A new stream owned by the device. */
ss_status ss_stream_new(ss_device_t *dev, ss_stream_t **out);
/* Wraps a stream the caller owns (a framework's compute stream, e.g. a cudaStream_t passed as
 * void*). NULL handle: the device's default stream (cuda: the legacy default stream; cpu-sim:
 * the host stream, see above). The wrapper does not destroy the handle. */
ss_status ss_stream_wrap(ss_device_t *dev, void *handle, ss_stream_t **out);
/* Frees a stream after its work has completed (waits for it). */
ss_status ss_stream_free(ss_device_t *dev, ss_stream_t *s);
/* Blocks the caller until all work enqueued on s so far has completed. */
ss_status ss_stream_sync(ss_device_t *dev, ss_stream_t *s);

/* Enqueues a copy of n bytes on s. The memory must stay valid until the copy completes (order it
 * with an event). cpu-sim runs it on its copy engine for `direction` and it takes
 * latency + n / bandwidth (D2D: at the higher of the two bandwidths). */
ss_status ss_copy_async(ss_device_t *dev, ss_stream_t *s, void *dst, const void *src, size_t n,
                        ss_copy_kind kind);

/* Simulated compute: occupies s for `seconds` (cpu-sim: busy time on the stream's thread, or
 * virtual time; cuda: a spin kernel if built, else SS_ERR_UNSUPPORTED). The replay driver uses
 * it to stand in for an operator's kernels. */
ss_status ss_compute_async(ss_device_t *dev, ss_stream_t *s, double seconds);

/* ---------------------------------------------------------------------------------------- */
/* events                                                                                    */

ss_status ss_event_new(ss_device_t *dev, ss_event_t **out);
ss_status ss_event_free(ss_device_t *dev, ss_event_t *e);
/* Marks the point in s after all work enqueued so far. Re-recording moves the marker. */
ss_status ss_event_record(ss_device_t *dev, ss_event_t *e, ss_stream_t *s);
/* Work enqueued on s after this call waits until e completes. No host blocking, except on a
 * host stream. An event never recorded counts as complete. */
ss_status ss_event_wait(ss_device_t *dev, ss_stream_t *s, ss_event_t *e);
/* SS_OK and *done = 1 when complete, 0 when not; never blocks. Counted. */
ss_status ss_event_query(ss_device_t *dev, ss_event_t *e, int *done);
/* Blocks the caller until e completes. Counted. */
ss_status ss_event_sync(ss_device_t *dev, ss_event_t *e);
/* Seconds between two completed events (b after a). SS_ERR_STATE if either is incomplete. */
ss_status ss_event_elapsed(ss_device_t *dev, ss_event_t *a, ss_event_t *b, double *seconds);
/* The device-clock time (ss_device_now's clock) at which e completed; SS_ERR_STATE if it has
 * not. Default slot: the time at which a query or sync first saw it complete. */
ss_status ss_event_time(ss_device_t *dev, ss_event_t *e, double *seconds);

/* ---------------------------------------------------------------------------------------- */
/* cpu-sim calibration (docs/performance-model.md)                                           */

/* The reference pairing whose copy:compute ratio cpu-sim reproduces. */
typedef struct ss_calib_ref {
    const char *name;           /* "llama-2-7b bf16 on h200 at 60% of peak over 55 GB/s" */
    double saved_bytes_per_token; /* activations saved per token per step, all layers */
    double flops_per_token;     /* training FLOPs per token (6 x params + attention) */
    double device_flops;        /* achieved FLOP/s (peak x efficiency) */
    double link_gbps;           /* GB/s each way */
} ss_calib_ref;

/* The default reference (Llama-2-7B, bf16, H200 at 60 % of peak, 55 GB/s). */
ss_calib_ref ss_calib_default(void);

/* The link bandwidth (GB/s) that makes a workload moving `saved_bytes` per step and computing
 * for `compute_seconds` per step (measured on this machine) have the reference's
 * copy:compute ratio times `scale` (scale > 1: copies relatively slower). */
ss_status ss_calib_bandwidth(const ss_calib_ref *ref, double saved_bytes, double compute_seconds,
                             double scale, double *gbps);

#ifdef __cplusplus
}
#endif
#endif /* SMARTSWAP_DEVICE_H */
