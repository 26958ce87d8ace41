/* device-cuda.c: the "cuda" / "cuda:N" device backend, plain C11 against the CUDA runtime C API
 * (cuda_runtime_api.h, -lcudart). Device memory is cudaMalloc, host memory cudaHostAlloc
 * (pinned), streams are non-blocking cudaStreams (or a caller's cudaStream_t), events are
 * cudaEvents with timing. compute_async launches a one-thread kernel that spins on the GPU's
 * global timer, from PTX text the driver compiles at the first call (cuModuleLoadData /
 * cuLaunchKernel). Built only when the Makefile finds the toolkit (SS_USE_CUDA).
 *
 * Virtual memory (the vm_* slots, docs/cuda.md "Virtual memory"): the driver's cuMemAddressReserve
 * / cuMemCreate / cuMemMap / cuMemSetAccess / cuMemUnmap / cuMemRelease, reached through
 * cudaGetDriverEntryPointByVersion (cuda.h types only, no -lcuda: the programs still load on a
 * machine without the driver and report "no GPU"). A range is unmapped only once an event
 * recorded, at the first unmap attempt, on every stream of this device (and the legacy default
 * stream) has completed; until then vm_unmap answers SS_ERR_STATE (queried, never waited for).
 */
#include "device-impl.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <stdio.h>

/* The driver entry points of the virtual-memory slots (NULL when the driver lacks them). */
typedef struct cu_drv {
    PFN_cuGetErrorString_v6000 get_error_string;
    PFN_cuDeviceGet_v2000 device_get;
    PFN_cuDeviceGetAttribute_v2000 device_get_attribute;
    PFN_cuMemGetAllocationGranularity_v10020 granularity;
    PFN_cuMemAddressReserve_v10020 address_reserve;
    PFN_cuMemAddressFree_v10020 address_free;
    PFN_cuMemCreate_v10020 create;
    PFN_cuMemRelease_v10020 release;
    PFN_cuMemMap_v10020 map;
    PFN_cuMemUnmap_v10020 unmap;
    PFN_cuMemSetAccess_v10020 set_access;
    /* compute_async: a spin kernel from PTX text (cu_spin_ptx), JIT-compiled by the driver */
    PFN_cuModuleLoadData_v2000 module_load;
    PFN_cuModuleUnload_v2000 module_unload;
    PFN_cuModuleGetFunction_v2000 get_function;
    PFN_cuLaunchKernel_v4000 launch;
} cu_drv;

/* A copy that may still run while reservations exist: its ranges and the event after it. */
typedef struct cu_flight {
    void *dst;
    const void *src;
    size_t n;
    cudaEvent_t ev;
} cu_flight;

typedef struct cu_dev {
    int ordinal;
    cudaEvent_t origin;         /* recorded and synchronised at open: device time 0 */
    double t_open;
    cu_drv drv;
    size_t granule;             /* 0: no virtual memory (plain segments) */
    int spin_state;             /* compute_async: 0 not loaded yet, 1 loaded, -1 unavailable */
    CUmodule spin_mod;
    CUfunction spin_fn;
    pthread_mutex_t mu;         /* the fields below */
    size_t nres;                /* live reservations: copies are tracked while > 0 */
    ssi_ptr_table handles;      /* mapped va -> CUmemGenericAllocationHandle */
    cu_flight *flight;          /* copies enqueued while nres > 0, not yet seen complete */
    size_t nflight, capflight;
    cudaEvent_t *spare;         /* completed events for reuse */
    size_t nspare, capspare;
} cu_dev;

typedef struct cu_stream {
    cudaStream_t s;
    int owned;                  /* created here (destroyed by stream_free) */
} cu_stream;

static void *cu_sym(const char *name);

/* Logs a CUDA failure and maps it to a status. */
static ss_status cu_fail(cudaError_t e, const char *what) {
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();    /* clear the sticky-free error so later calls work */
        return SS_ERR_OOM;
    }
    SS_ERROR("cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return SS_ERR_DEVICE;
}

/* Makes the device current on the calling thread (the backward thread may not have it). */
static ss_status cu_use(cu_dev *d) {
    cudaError_t e = cudaSetDevice(d->ordinal);
    return e == cudaSuccess ? SS_OK : cu_fail(e, "cudaSetDevice");
}

static void cu_close(void *ctx) {
    cu_dev *d = ctx;
    cu_use(d);
    cudaEventDestroy(d->origin);
    /* the wrapper refuses to close with live reservations or streams: no mapping is left, and
     * every stream (so every copy) has been waited for */
    for (size_t j = 0; j < d->nflight; j++) cudaEventDestroy(d->flight[j].ev);
    for (size_t j = 0; j < d->nspare; j++) cudaEventDestroy(d->spare[j]);
    free(d->flight);
    free(d->spare);
    if (d->spin_state == 1) d->drv.module_unload(d->spin_mod);
    ssi_ptr_free(&d->handles);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

static ss_status cu_mem_info(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes) {
    size_t f = 0, t = 0;
    ss_status st = cu_use(ctx);
    if (st != SS_OK) return st;
    cudaError_t e = cudaMemGetInfo(&f, &t);
    if (e != cudaSuccess) return cu_fail(e, "cudaMemGetInfo");
    *free_bytes = f;
    *total_bytes = t;
    return SS_OK;
}

static ss_status cu_mem_alloc(void *ctx, size_t n, void **out) {
    ss_status st = cu_use(ctx);
    if (st != SS_OK) return st;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) return cu_fail(e, "cudaMalloc");
    *out = p;
    return SS_OK;
}

static ss_status cu_mem_free(void *ctx, void *p, size_t n) {
    (void)n;
    ss_status st = cu_use(ctx);
    if (st != SS_OK) return st;
    cudaError_t e = cudaFree(p);
    return e == cudaSuccess ? SS_OK : cu_fail(e, "cudaFree");
}

static ss_status cu_host_alloc(void *ctx, size_t n, void **out) {
    ss_status st = cu_use(ctx);
    if (st != SS_OK) return st;
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, n, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        cudaGetLastError();
        SS_DEBUGF("cuda: cudaHostAlloc(%zu): %s", n, cudaGetErrorString(e));
        return SS_ERR_HOST_OOM;
    }
    *out = p;
    return SS_OK;
}

static ss_status cu_host_free(void *ctx, void *p, size_t n) {
    (void)ctx; (void)n;
    cudaError_t e = cudaFreeHost(p);
    return e == cudaSuccess ? SS_OK : cu_fail(e, "cudaFreeHost");
}

static ss_status cu_stream_box(cudaStream_t s, int owned, void **out) {
    cu_stream *w = malloc(sizeof *w);
    if (!w) {
        if (owned) cudaStreamDestroy(s);
        return SS_ERR_HOST_OOM;
    }
    w->s = s;
    w->owned = owned;
    *out = w;
    return SS_OK;
}

static ss_status cu_stream_new(void *ctx, void **out) {
    ss_status st = cu_use(ctx);
    if (st != SS_OK) return st;
    cudaStream_t s;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) return cu_fail(e, "cudaStreamCreateWithFlags");
    return cu_stream_box(s, 1, out);
}

static ss_status cu_stream_wrap(void *ctx, void *handle, void **out) {
    (void)ctx;
    return cu_stream_box(handle ? (cudaStream_t)handle : cudaStreamLegacy, 0, out);
}

static ss_status cu_stream_sync(void *ctx, void *sp) {
    (void)ctx;
    cudaError_t e = cudaStreamSynchronize(((cu_stream *)sp)->s);
    return e == cudaSuccess ? SS_OK : cu_fail(e, "cudaStreamSynchronize");
}

static ss_status cu_stream_free(void *ctx, void *sp) {
    cu_stream *w = sp;
    ss_status st = cu_stream_sync(ctx, sp);
    if (w->owned) {
        cudaError_t e = cudaStreamDestroy(w->s);
        if (e != cudaSuccess && st == SS_OK) st = cu_fail(e, "cudaStreamDestroy");
    }
    free(w);
    return st;
}

/* Drops the in-flight copies whose event has completed (caller holds mu); their events go back
 * to the spare list. */
static ss_status cu_flight_prune(cu_dev *d) {
    for (size_t j = 0; j < d->nflight;) {
        cudaError_t ce = cudaEventQuery(d->flight[j].ev);
        if (ce == cudaErrorNotReady) { j++; continue; }
        if (ce != cudaSuccess) return cu_fail(ce, "cudaEventQuery (copies in flight)");
        if (ssi_grow(&d->spare, &d->capspare, d->nspare + 1, sizeof *d->spare) == SS_OK)
            d->spare[d->nspare++] = d->flight[j].ev;
        else
            cudaEventDestroy(d->flight[j].ev);
        d->flight[j] = d->flight[--d->nflight];
    }
    return SS_OK;
}

static int cu_overlaps(const void *a, size_t an, const void *b, size_t bn) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bn && y < x + an;
}

static ss_status cu_copy_async(void *ctx, void *sp, void *dst, const void *src, size_t n,
                               ss_copy_kind kind) {
    cu_dev *d = ctx;
    static const enum cudaMemcpyKind kinds[SS_COPY_KIND_COUNT] = {
        [SS_COPY_H2D] = cudaMemcpyHostToDevice,
        [SS_COPY_D2H] = cudaMemcpyDeviceToHost,
        [SS_COPY_D2D] = cudaMemcpyDeviceToDevice,
    };
    cudaStream_t s = ((cu_stream *)sp)->s;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kinds[kind], s);
    if (e != cudaSuccess) return cu_fail(e, "cudaMemcpyAsync");
    /* with reservations live, vm_unmap must see this copy until it has run: an event after it */
    pthread_mutex_lock(&d->mu);
    ss_status st = SS_OK;
    if (d->nres > 0) {
        cudaEvent_t ev = NULL;
        if (d->nspare > 0) ev = d->spare[--d->nspare];
        else if ((e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess)
            st = cu_fail(e, "cudaEventCreate (copy tracking)");
        if (st == SS_OK && (e = cudaEventRecord(ev, s)) != cudaSuccess)
            st = cu_fail(e, "cudaEventRecord (copy tracking)");
        if (st == SS_OK)
            st = ssi_grow(&d->flight, &d->capflight, d->nflight + 1, sizeof *d->flight);
        if (st == SS_OK) d->flight[d->nflight++] = (cu_flight){dst, src, n, ev};
        else if (ev) cudaEventDestroy(ev);
        if (st != SS_OK) {   /* the copy is untracked: wait for it so no unmap can overtake it */
            e = cudaStreamSynchronize(s);
            st = e == cudaSuccess ? SS_OK : cu_fail(e, "cudaStreamSynchronize (copy tracking)");
        }
        if (d->nflight > 64) cu_flight_prune(d);   /* keep the list short */
    }
    pthread_mutex_unlock(&d->mu);
    return st;
}

static ss_status cu_event_new(void *ctx, void **out) {
    ss_status st = cu_use(ctx);
    if (st != SS_OK) return st;
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDefault);
    if (e != cudaSuccess) return cu_fail(e, "cudaEventCreate");
    *out = (void *)ev;
    return SS_OK;
}

static ss_status cu_event_free(void *ctx, void *ep) {
    (void)ctx;
    cudaError_t e = cudaEventDestroy((cudaEvent_t)ep);
    return e == cudaSuccess ? SS_OK : cu_fail(e, "cudaEventDestroy");
}

static ss_status cu_event_record(void *ctx, void *ep, void *sp) {
    (void)ctx;
    cudaError_t e = cudaEventRecord((cudaEvent_t)ep, ((cu_stream *)sp)->s);
    return e == cudaSuccess ? SS_OK : cu_fail(e, "cudaEventRecord");
}

static ss_status cu_event_wait(void *ctx, void *sp, void *ep) {
    (void)ctx;
    cudaError_t e = cudaStreamWaitEvent(((cu_stream *)sp)->s, (cudaEvent_t)ep, 0);
    return e == cudaSuccess ? SS_OK : cu_fail(e, "cudaStreamWaitEvent");
}

static ss_status cu_event_query(void *ctx, void *ep, int *done) {
    (void)ctx;
    cudaError_t e = cudaEventQuery((cudaEvent_t)ep);
    if (e == cudaSuccess) { *done = 1; return SS_OK; }
    if (e == cudaErrorNotReady) { *done = 0; return SS_OK; }
    return cu_fail(e, "cudaEventQuery");
}

static ss_status cu_event_sync(void *ctx, void *ep) {
    (void)ctx;
    cudaError_t e = cudaEventSynchronize((cudaEvent_t)ep);
    return e == cudaSuccess ? SS_OK : cu_fail(e, "cudaEventSynchronize");
}

static ss_status cu_event_elapsed(void *ctx, void *a, void *b, double *seconds) {
    (void)ctx;
    float ms = 0;
    cudaError_t e = cudaEventElapsedTime(&ms, (cudaEvent_t)a, (cudaEvent_t)b);
    if (e == cudaErrorNotReady) return SS_ERR_STATE;
    if (e != cudaSuccess) return cu_fail(e, "cudaEventElapsedTime");
    *seconds = (double)ms * 1e-3;
    return SS_OK;
}

/* Device time of e: its distance from the origin event recorded at open. */
static ss_status cu_event_time(void *ctx, void *ep, double *seconds) {
    cu_dev *d = ctx;
    return cu_event_elapsed(ctx, (void *)d->origin, ep, seconds);
}

static double cu_now(void *ctx) {
    cu_dev *d = ctx;
    return ssi_now() - d->t_open;
}

/* ---- virtual memory ---------------------------------------------------------------------- */

/* Logs a driver failure and maps it to a status (out of memory: quietly, SS_ERR_OOM). */
static ss_status cu_drv_fail(const cu_dev *d, CUresult r, const char *what) {
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        SS_DEBUGF("cuda: %s: out of memory", what);
        return SS_ERR_OOM;
    }
    const char *msg = NULL;
    if (!d->drv.get_error_string || d->drv.get_error_string(r, &msg) != CUDA_SUCCESS || !msg)
        msg = "unknown driver error";
    SS_ERROR("cuda: %s: %s (CUresult %d)", what, msg, (int)r);
    return SS_ERR_DEVICE;
}

/* The properties of this device's physical memory: pinned, on the device, no export handles. */
static CUmemAllocationProp cu_prop(const cu_dev *d) {
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = d->ordinal;
    return p;
}

static ss_status cu_vm_reserve(void *ctx, size_t n, void **va) {
    cu_dev *d = ctx;
    ss_status st = cu_use(d);
    if (st != SS_OK) return st;
    CUdeviceptr p = 0;
    CUresult r = d->drv.address_reserve(&p, n, d->granule, 0, 0);
    if (r != CUDA_SUCCESS) return cu_drv_fail(d, r, "cuMemAddressReserve");
    pthread_mutex_lock(&d->mu);
    d->nres++;
    pthread_mutex_unlock(&d->mu);
    *va = (void *)(uintptr_t)p;
    return SS_OK;
}

static ss_status cu_vm_release(void *ctx, void *va, size_t n) {
    cu_dev *d = ctx;
    ss_status st = cu_use(d);
    if (st != SS_OK) return st;
    CUresult r = d->drv.address_free((CUdeviceptr)(uintptr_t)va, n);
    pthread_mutex_lock(&d->mu);
    d->nres--;
    pthread_mutex_unlock(&d->mu);
    return r == CUDA_SUCCESS ? SS_OK : cu_drv_fail(d, r, "cuMemAddressFree");
}

static ss_status cu_vm_map(void *ctx, void *va, size_t n) {
    cu_dev *d = ctx;
    ss_status st = cu_use(d);
    if (st != SS_OK) return st;
    CUmemAllocationProp prop = cu_prop(d);
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)va;
    CUresult r = d->drv.create(&h, n, &prop, 0);
    if (r != CUDA_SUCCESS) return cu_drv_fail(d, r, "cuMemCreate");
    const char *what = "cuMemMap";
    r = d->drv.map(p, n, 0, h, 0);
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc acc;
        memset(&acc, 0, sizeof acc);
        acc.location = prop.location;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        what = "cuMemSetAccess";
        r = d->drv.set_access(p, n, &acc, 1);
        if (r != CUDA_SUCCESS) d->drv.unmap(p, n);
    }
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&d->mu);
        st = ssi_ptr_put(&d->handles, (uintptr_t)va, (size_t)h);
        pthread_mutex_unlock(&d->mu);
        if (st == SS_OK) return SS_OK;
        d->drv.unmap(p, n);
    } else {
        st = cu_drv_fail(d, r, what);
    }
    d->drv.release(h);
    return st;
}

/* Unmaps [va, va+n) unless a copy that touches it may still run (its event, recorded after it
 * on its stream, has not completed): then SS_ERR_STATE and nothing changes. Work other than
 * copies is the allocator's to order: it unmaps only granules that no live block, and no freed
 * block whose stream events are pending, touches; the legacy default stream (the compute stream
 * of the C trainer) is synchronised first. */
static ss_status cu_vm_unmap(void *ctx, void *va, size_t n) {
    cu_dev *d = ctx;
    ss_status st = cu_use(d);
    if (st != SS_OK) return st;
    /* kernels on the compute stream (the legacy default stream, where the C trainer computes)
     * may still use memory the allocator has already handed back and reused there: they finish
     * before the range goes, as a cudaFree would make them */
    cudaError_t ce = cudaStreamSynchronize(NULL);
    if (ce != cudaSuccess) return cu_fail(ce, "cudaStreamSynchronize (before cuMemUnmap)");
    pthread_mutex_lock(&d->mu);
    if ((st = cu_flight_prune(d)) != SS_OK) { pthread_mutex_unlock(&d->mu); return st; }
    for (size_t j = 0; j < d->nflight; j++)
        if (cu_overlaps(d->flight[j].dst, d->flight[j].n, va, n) ||
            cu_overlaps(d->flight[j].src, d->flight[j].n, va, n)) {
            pthread_mutex_unlock(&d->mu);
            return SS_ERR_STATE;   /* queried, not waited for: try again later */
        }
    size_t i = ssi_ptr_find(&d->handles, (uintptr_t)va);
    SS_ASSERT(i != SIZE_MAX);
    CUmemGenericAllocationHandle h = (CUmemGenericAllocationHandle)d->handles.vals[i];
    ssi_ptr_del_at(&d->handles, i);
    pthread_mutex_unlock(&d->mu);
    CUresult r = d->drv.unmap((CUdeviceptr)(uintptr_t)va, n);
    CUresult r2 = d->drv.release(h);   /* the physical memory goes once nothing maps it */
    if (r != CUDA_SUCCESS) return cu_drv_fail(d, r, "cuMemUnmap");
    return r2 == CUDA_SUCCESS ? SS_OK : cu_drv_fail(d, r2, "cuMemRelease");
}

/* Looks the driver's entry points up and checks that the device can map physical memory
 * (attribute, granularity, one granule created and released). 0 with the granule in
 * d->granule, else -1 with the reason in why (the device then keeps plain segments). */
static int cu_vm_probe(cu_dev *d, char *why, size_t len) {
    static const struct { const char *sym; size_t off; } syms[] = {
        {"cuGetErrorString", offsetof(cu_drv, get_error_string)},
        {"cuDeviceGet", offsetof(cu_drv, device_get)},
        {"cuDeviceGetAttribute", offsetof(cu_drv, device_get_attribute)},
        {"cuMemGetAllocationGranularity", offsetof(cu_drv, granularity)},
        {"cuMemAddressReserve", offsetof(cu_drv, address_reserve)},
        {"cuMemAddressFree", offsetof(cu_drv, address_free)},
        {"cuMemCreate", offsetof(cu_drv, create)},
        {"cuMemRelease", offsetof(cu_drv, release)},
        {"cuMemMap", offsetof(cu_drv, map)},
        {"cuMemUnmap", offsetof(cu_drv, unmap)},
        {"cuMemSetAccess", offsetof(cu_drv, set_access)},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *fn = cu_sym(syms[i].sym);
        if (!fn) {
            ssi_fmt(why, len, "the driver has no %s", syms[i].sym);
            return -1;
        }
        memcpy((char *)&d->drv + syms[i].off, &fn, sizeof fn);
    }
    CUdevice dev;
    int vmm = 0;
    CUresult r = d->drv.device_get(&dev, d->ordinal);
    if (r == CUDA_SUCCESS)
        r = d->drv.device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
    if (r != CUDA_SUCCESS || !vmm) {
        ssi_fmt(why, len, "the device does not support virtual memory management");
        return -1;
    }
    CUmemAllocationProp prop = cu_prop(d);
    size_t g = 0;
    r = d->drv.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS || g == 0 || (g & (g - 1))) {
        ssi_fmt(why, len, "cuMemGetAllocationGranularity failed (CUresult %d)", (int)r);
        return -1;
    }
    CUmemGenericAllocationHandle h = 0;
    r = d->drv.create(&h, g, &prop, 0);
    if (r != CUDA_SUCCESS) {
        ssi_fmt(why, len, "cuMemCreate of one %zu-byte granule failed (CUresult %d)", g, (int)r);
        return -1;
    }
    d->drv.release(h);
    d->granule = g;
    return 0;
}

/* ---- compute_async: a one-thread kernel that spins on the GPU's global timer -------------- */

/* The kernel as PTX (ISA 7.0, any GPU from sm_52): loops until %globaltimer (nanoseconds) has
 * advanced by the parameter. Checked with `ptxas -arch=sm_90` (docs/cuda.md). */
static const char cu_spin_ptx[] =
    ".version 7.0\n"
    ".target sm_52\n"
    ".address_size 64\n"
    ".visible .entry ss_spin(.param .u64 ss_spin_ns)\n"
    "{\n"
    "\t.reg .pred %p;\n"
    "\t.reg .b64 %rd<5>;\n"
    "\tld.param.u64 %rd1, [ss_spin_ns];\n"
    "\tmov.u64 %rd2, %globaltimer;\n"
    "$L_spin:\n"
    "\tmov.u64 %rd3, %globaltimer;\n"
    "\tsub.s64 %rd4, %rd3, %rd2;\n"
    "\tsetp.lt.u64 %p, %rd4, %rd1;\n"
    "\t@%p bra $L_spin;\n"
    "\tret;\n"
    "}\n";

/* Loads the module once (caller holds mu); -1 when the driver cannot (logged once). */
static int cu_spin_load(cu_dev *d) {
    if (d->spin_state) return d->spin_state;
    d->spin_state = -1;
    if (!d->drv.module_load || !d->drv.get_function || !d->drv.launch) {
        SS_WARN("cuda:%d: the driver has no cuModuleLoadData / cuLaunchKernel: no compute_async", d->ordinal);
        return -1;
    }
    CUresult r = d->drv.module_load(&d->spin_mod, cu_spin_ptx);
    if (r == CUDA_SUCCESS) {
        r = d->drv.get_function(&d->spin_fn, d->spin_mod, "ss_spin");
        if (r != CUDA_SUCCESS) d->drv.module_unload(d->spin_mod);
    }
    if (r != CUDA_SUCCESS) {
        cu_drv_fail(d, r, "loading the spin kernel (compute_async)");
        return -1;
    }
    d->spin_state = 1;
    return 1;
}

static ss_status cu_compute_async(void *ctx, void *sp, double seconds) {
    cu_dev *d = ctx;
    ss_status st = cu_use(d);
    if (st != SS_OK) return st;
    pthread_mutex_lock(&d->mu);
    int ok = cu_spin_load(d);
    pthread_mutex_unlock(&d->mu);
    if (ok != 1) return SS_ERR_UNSUPPORTED;
    unsigned long long ns = (unsigned long long)(seconds * 1e9);
    void *params[] = {&ns};
    CUresult r = d->drv.launch(d->spin_fn, 1, 1, 1, 1, 1, 1, 0, (CUstream)((cu_stream *)sp)->s, params, NULL);
    return r == CUDA_SUCCESS ? SS_OK : cu_drv_fail(d, r, "cuLaunchKernel (spin)");
}

/* Looks one driver entry point up (NULL when the driver lacks it). */
static void *cu_sym(const char *name) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q);
#else   /* toolkits 12.0 - 12.4: the call without a version (removed in 13) */
    cudaError_t e = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q);
#endif
    return e == cudaSuccess && q == cudaDriverEntryPointSuccess ? fn : NULL;
}

static const struct ss_device_i cu_iface = {
    .close = cu_close,
    .mem_info = cu_mem_info,
    .mem_alloc = cu_mem_alloc,
    .mem_free = cu_mem_free,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .mem_poison = NULL,           /* cpu-sim only: SS_ERR_UNSUPPORTED */
    .mem_check_poison = NULL,
    .stream_new = cu_stream_new,
    .stream_wrap = cu_stream_wrap,
    .stream_free = cu_stream_free,
    .stream_sync = cu_stream_sync,
    .copy_async = cu_copy_async,
    .compute_async = cu_compute_async,
    .event_new = cu_event_new,
    .event_free = cu_event_free,
    .event_record = cu_event_record,
    .event_wait = cu_event_wait,
    .event_query = cu_event_query,
    .event_sync = cu_event_sync,
    .event_elapsed = cu_event_elapsed,
    .event_time = cu_event_time,
    .now = cu_now,
    .vm_reserve = cu_vm_reserve,
    .vm_release = cu_vm_release,
    .vm_map = cu_vm_map,
    .vm_unmap = cu_vm_unmap,
};

static int cu_probe(char *msg, size_t len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        ssi_fmt(msg, len, "no GPU: %s", cudaGetErrorString(e));
        return -1;
    }
    if (n == 0) {
        ssi_fmt(msg, len, "no GPU: the driver reports 0 devices");
        return -1;
    }
    return n;
}

static ss_status cu_open(const char *name, const ss_options *o, ssi_device_backend *out,
                         char *err, size_t err_len) {
    (void)o;
    int ordinal = 0;
    if (name[4] == ':') {
        char *end = NULL;
        long v = strtol(name + 5, &end, 10);
        if (!name[5] || *end || v < 0 || v > 1024) {
            ssi_fmt(err, err_len, "bad device name '%s' (cuda or cuda:N)", name);
            return SS_ERR_NOT_FOUND;
        }
        ordinal = (int)v;
    }
    char msg[256];
    int n = cu_probe(msg, sizeof msg);
    if (n < 0) {
        ssi_fmt(err, err_len, "%s", msg);
        return SS_ERR_DEVICE;
    }
    if (ordinal >= n) {
        ssi_fmt(err, err_len, "cuda:%d does not exist (%d GPUs)", ordinal, n);
        return SS_ERR_NOT_FOUND;
    }
    cudaError_t e = cudaSetDevice(ordinal);
    struct cudaDeviceProp prop;
    size_t fb = 0, tb = 0;
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, ordinal);
    if (e == cudaSuccess) e = cudaMemGetInfo(&fb, &tb);
    cu_dev *d = NULL;
    if (e == cudaSuccess) {
        d = calloc(1, sizeof *d);
        if (!d) return SS_ERR_HOST_OOM;
        d->ordinal = ordinal;
        pthread_mutex_init(&d->mu, NULL);
        e = cudaEventCreateWithFlags(&d->origin, cudaEventDefault);
        if (e == cudaSuccess) {
            /* the host clock's origin is taken just before the event's: device times (from
             * the event) and ss_device_now (from t_open) then differ by the record's latency */
            d->t_open = ssi_now();
            e = cudaEventRecord(d->origin, cudaStreamLegacy);
            if (e == cudaSuccess) e = cudaEventSynchronize(d->origin);
            if (e != cudaSuccess) cudaEventDestroy(d->origin);
        }
        if (e != cudaSuccess) { pthread_mutex_destroy(&d->mu); free(d); d = NULL; }
    }
    if (e != cudaSuccess) {
        ssi_fmt(err, err_len, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        return SS_ERR_DEVICE;
    }
    void *f;
    if ((f = cu_sym("cuModuleLoadData"))) memcpy(&d->drv.module_load, &f, sizeof f);
    if ((f = cu_sym("cuModuleUnload"))) memcpy(&d->drv.module_unload, &f, sizeof f);
    if ((f = cu_sym("cuModuleGetFunction"))) memcpy(&d->drv.get_function, &f, sizeof f);
    if ((f = cu_sym("cuLaunchKernel"))) memcpy(&d->drv.launch, &f, sizeof f);
    char why[160];
    if (cu_vm_probe(d, why, sizeof why) != 0) {
        d->granule = 0;
        SS_WARN("cuda:%d: no virtual memory (%s): the allocator keeps plain segments", ordinal, why);
    }
    out->iface = &cu_iface;
    out->ctx = d;
    ss_device_caps *c = &out->caps;
    memset(c, 0, sizeof *c);
    ssi_fmt(c->name, sizeof c->name, "cuda:%d", ordinal);
    ssi_fmt(c->description, sizeof c->description, "%s, compute %d.%d", prop.name, prop.major, prop.minor);
    c->total_bytes = tb;
    c->alignment = 256;
    c->has_pinned_host = 1;
    c->vm_granularity = d->granule;   /* 0: ss_vm_* unsupported, plain segments */
    c->virtual_clock = 0;
    c->d2h_gbps = 0;            /* unknown until measured */
    c->h2d_gbps = 0;
    return SS_OK;
}

const ssi_device_reg ssi_device_reg_cuda = {"cuda", cu_open, cu_probe};
