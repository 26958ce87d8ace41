/* device-impl.h: the device backend interface (internal). Each backend (device-cpusim.c,
 * device-cuda.c, device-fault.c) fills one `static const struct ss_device_i` table; device.c
 * wraps it in the public calls of smartswap-device.h (ggml-backend / mimalloc-prim style).
 *
 * Division of work between wrapper and backend:
 *  - The wrapper (device.c) checks every argument before a slot is called: dev/stream/event
 *    handles belong to this device, out-pointers are non-NULL, sizes are > 0, copy kinds are in
 *    range, and pointers passed to mem_free / host_free are live blocks of exactly that size
 *    (a table of live pointers lives in the wrapper). Backends may assume all of this.
 *  - The wrapper counts (ss_device_stats), tracks live objects for close, and supplies the
 *    default of every slot marked (optional) below when the slot is NULL.
 *  - Every slot returns ss_status (SS_OK = 0); out-params are written only on SS_OK.
 *  - Slots are called concurrently from several threads, subject to the threading contract of
 *    smartswap-device.h (distinct streams/events in parallel; event_query / event_sync on any
 *    event from any thread). Backends protect their own shared state.
 *  - Backends never print; they log through SS_ERROR / SS_WARN / SS_DEBUGF.
 */
#ifndef SS_DEVICE_IMPL_H
#define SS_DEVICE_IMPL_H

#define SSI_NO_SITE_MACROS   /* the device layer forwards calls; the sites are its callers */
#include "internal.h"
#include "smartswap-device.h"

#include <pthread.h>

/* Backend stream and event handles are opaque `void *` owned by the backend. */
struct ss_device_i {
    /* (required) Releases everything the backend holds. Called once, after the wrapper has
     * checked that no memory, stream or event is live. Never fails. */
    void (*close)(void *ctx);

    /* (required) Free and total device bytes now. */
    ss_status (*mem_info)(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes);
    /* (required) n > 0 bytes of device memory aligned to caps.alignment into *out.
     * SS_ERR_OOM when the device is full: quietly (no log above DEBUG); SS_ERR_DEVICE on a
     * driver failure (logged). */
    ss_status (*mem_alloc)(void *ctx, size_t n, void **out);
    /* (required) p is a live block of exactly n bytes (checked by the wrapper). The block is
     * released even when a check fails; SS_ERR_CORRUPT when a guard byte was overwritten
     * (cpu-sim), SS_ERR_DEVICE on a driver failure. */
    ss_status (*mem_free)(void *ctx, void *p, size_t n);

    /* (optional; default malloc/free) Host memory for copies, page-locked when the backend can
     * (caps.has_pinned_host). SS_ERR_HOST_OOM when refused. host_free gets a live block of
     * exactly n bytes. */
    ss_status (*host_alloc)(void *ctx, size_t n, void **out);
    ss_status (*host_free)(void *ctx, void *p, size_t n);

    /* (optional; default SS_ERR_UNSUPPORTED) Fill [p, p+n) of device memory with
     * SS_POISON_WORD / count the bytes there that differ from it. p need not be a block start
     * but the range must lie in device memory (SS_ERR_INVALID otherwise). */
    ss_status (*mem_poison)(void *ctx, void *p, size_t n);
    ss_status (*mem_check_poison)(void *ctx, const void *p, size_t n, size_t *found);

    /* (required) A new stream owned by the backend. SS_ERR_DEVICE / SS_ERR_HOST_OOM. */
    ss_status (*stream_new)(void *ctx, void **out);
    /* (optional; default SS_ERR_UNSUPPORTED) A stream around a caller-owned handle; NULL =
     * the default stream (cpu-sim: the host stream, see smartswap-device.h). stream_free must
     * not destroy the caller's handle. */
    ss_status (*stream_wrap)(void *ctx, void *handle, void **out);
    /* (required) Waits for the stream's work, then frees it. Never fails on a valid handle. */
    ss_status (*stream_free)(void *ctx, void *s);
    /* (required) Blocks until all work enqueued on s so far has completed. */
    ss_status (*stream_sync)(void *ctx, void *s);

    /* (required) Enqueue a copy of n > 0 bytes on s, in FIFO order with s's other work.
     * dst/src are non-NULL; kind < SS_COPY_KIND_COUNT. */
    ss_status (*copy_async)(void *ctx, void *s, void *dst, const void *src, size_t n,
                            ss_copy_kind kind);
    /* (optional; default SS_ERR_UNSUPPORTED) Occupy s for `seconds` >= 0. */
    ss_status (*compute_async)(void *ctx, void *s, double seconds);

    /* (required) Events: new/free; record marks the point after everything enqueued on s so
     * far (re-recording moves it); wait makes later work on s wait for that point (an event
     * never recorded is complete); query never blocks; sync blocks the caller. event_free may
     * be called while the event is still pending: the backend must not crash (it may wait). */
    ss_status (*event_new)(void *ctx, void **out);
    ss_status (*event_free)(void *ctx, void *e);
    ss_status (*event_record)(void *ctx, void *e, void *s);
    ss_status (*event_wait)(void *ctx, void *s, void *e);
    ss_status (*event_query)(void *ctx, void *e, int *done);
    ss_status (*event_sync)(void *ctx, void *e);
    /* (optional; default: event_time(b) - event_time(a)) Seconds from a to b, both complete;
     * SS_ERR_STATE if either is not. */
    ss_status (*event_elapsed)(void *ctx, void *a, void *b, double *seconds);
    /* (optional; default: the device time at which the wrapper's query or sync first saw the
     * event complete) The device-clock time of e's completion; SS_ERR_STATE if incomplete. */
    ss_status (*event_time)(void *ctx, void *e, double *seconds);

    /* (optional; default wall seconds since open) The device clock. Never fails. */
    double (*now)(void *ctx);

    /* (optional, all four or none; default SS_ERR_UNSUPPORTED) Virtual memory, as ss_vm_* in
     * smartswap-device.h. The wrapper checks alignment to caps.vm_granularity, that a map lies
     * in a live reservation and that an unmap names exactly a live mapping; it counts. */
    ss_status (*vm_reserve)(void *ctx, size_t n, void **va);
    ss_status (*vm_release)(void *ctx, void *va, size_t n);
    ss_status (*vm_map)(void *ctx, void *va, size_t n);
    ss_status (*vm_unmap)(void *ctx, void *va, size_t n);
};

/* What a backend's open fills in. */
typedef struct ssi_device_backend {
    const struct ss_device_i *iface;
    void *ctx;
    ss_device_caps caps;
} ssi_device_backend;

/* Registration record of a compiled-in backend (device.c keeps a static list).
 * open: name is the full requested name ("cuda:1"); on failure writes a reason to err and
 *       returns SS_ERR_DEVICE (hardware missing), SS_ERR_NOT_FOUND, SS_ERR_HOST_OOM, ...
 * probe: number of devices present (>= 0), or -1 with a reason in msg. */
typedef struct ssi_device_reg {
    const char *prefix;   /* "cpu-sim", "cuda" */
    ss_status (*open)(const char *name, const ss_options *o, ssi_device_backend *out,
                      char *err, size_t err_len);
    int (*probe)(char *msg, size_t msg_len);
} ssi_device_reg;

extern const ssi_device_reg ssi_device_reg_cpusim;
#ifdef SS_USE_CUDA
extern const ssi_device_reg ssi_device_reg_cuda;
#endif

/* A live pointer table (open addressing), used by the wrapper to reject foreign pointers and
 * double frees before any backend sees them. */
typedef struct ssi_ptr_table {
    uintptr_t *keys;      /* 0 = empty */
    size_t *vals;
    size_t cap, len;      /* cap is 0 or a power of two */
} ssi_ptr_table;

/* The device object shared by all backends. Counters and tables are under mu. */
struct ss_device {
    const struct ss_device_i *iface;
    void *ctx;
    ss_device_caps caps;
    double t_open;                 /* ssi_now() at open */
    pthread_mutex_t mu;
    ss_device_stats stats;
    ssi_ptr_table mem, host;       /* live device / host blocks -> size */
    ssi_ptr_table vres, vmap;      /* live reservations / mappings -> size */
    uint64_t live_streams, live_events;
};

/* The live pointer table (device.c): put (k absent, != 0; SS_ERR_HOST_OOM), find (SIZE_MAX when
 * absent), delete at an index found, free. */
ss_status ssi_ptr_put(ssi_ptr_table *t, uintptr_t k, size_t v);
size_t ssi_ptr_find(const ssi_ptr_table *t, uintptr_t k);
void ssi_ptr_del_at(ssi_ptr_table *t, size_t i);
void ssi_ptr_free(ssi_ptr_table *t);

/* Wraps an opened backend into a device object (device.c). SS_ERR_HOST_OOM on failure, and
 * the backend is left open (the caller closes it). */
ss_status ssi_device_make(const ssi_device_backend *be, ss_device_t **out);

/* "fault:NAME" (device-fault.c): NAME opened and wrapped in the fault device, armed from
 * SMARTSWAP_FAULT, its site report written to SMARTSWAP_FAULT_REPORT at close. */
ss_status ssi_device_open_fault(const char *inner_name, const ss_options *opts, ss_device_t **out);

/* Wrapper backends (device-fault.c) forward to an inner device through its public calls and
 * keep the inner device's ss_stream_t / ss_event_t pointers as their own backend handles. */

#endif /* SS_DEVICE_IMPL_H */
