/* device-cuda.c: the "cuda" / "cuda:N" device backend, plain C11 against the CUDA runtime C API
 * (cuda_runtime_api.h, -lcudart). Device memory is cudaMalloc, host memory cudaHostAlloc
 * (pinned), streams are non-blocking cudaStreams (or a caller's cudaStream_t), events are
 * cudaEvents with timing. Simulated compute needs a kernel, so compute_async is absent
 * (SS_ERR_UNSUPPORTED). Built only when the Makefile finds the toolkit (SS_USE_CUDA).
 */
#include "device-impl.h"

#include <cuda_runtime_api.h>
#include <stdio.h>

typedef struct cu_dev {
    int ordinal;
    cudaEvent_t origin;         /* recorded and synchronised at open: device time 0 */
    double t_open;
} cu_dev;

typedef struct cu_stream {
    cudaStream_t s;
    int owned;                  /* created here (destroyed by stream_free) */
} cu_stream;

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

static ss_status cu_copy_async(void *ctx, void *sp, void *dst, const void *src, size_t n,
                               ss_copy_kind kind) {
    (void)ctx;
    static const enum cudaMemcpyKind kinds[SS_COPY_KIND_COUNT] = {
        [SS_COPY_H2D] = cudaMemcpyHostToDevice,
        [SS_COPY_D2H] = cudaMemcpyDeviceToHost,
        [SS_COPY_D2D] = cudaMemcpyDeviceToDevice,
    };
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kinds[kind], ((cu_stream *)sp)->s);
    return e == cudaSuccess ? SS_OK : cu_fail(e, "cudaMemcpyAsync");
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
    .compute_async = NULL,        /* needs a spin kernel (nvcc): SS_ERR_UNSUPPORTED */
    .event_new = cu_event_new,
    .event_free = cu_event_free,
    .event_record = cu_event_record,
    .event_wait = cu_event_wait,
    .event_query = cu_event_query,
    .event_sync = cu_event_sync,
    .event_elapsed = cu_event_elapsed,
    .event_time = cu_event_time,
    .now = cu_now,
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
        e = cudaEventCreateWithFlags(&d->origin, cudaEventDefault);
        if (e == cudaSuccess) {
            e = cudaEventRecord(d->origin, cudaStreamLegacy);
            if (e == cudaSuccess) e = cudaEventSynchronize(d->origin);
            if (e != cudaSuccess) cudaEventDestroy(d->origin);
        }
        if (e != cudaSuccess) { free(d); d = NULL; }
    }
    if (e != cudaSuccess) {
        ssi_fmt(err, err_len, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        return SS_ERR_DEVICE;
    }
    d->t_open = ssi_now();
    out->iface = &cu_iface;
    out->ctx = d;
    ss_device_caps *c = &out->caps;
    memset(c, 0, sizeof *c);
    ssi_fmt(c->name, sizeof c->name, "cuda:%d", ordinal);
    ssi_fmt(c->description, sizeof c->description, "%s, compute %d.%d", prop.name, prop.major, prop.minor);
    c->total_bytes = tb;
    c->alignment = 256;
    c->has_pinned_host = 1;
    c->virtual_clock = 0;
    c->d2h_gbps = 0;            /* unknown until measured */
    c->h2d_gbps = 0;
    return SS_OK;
}

const ssi_device_reg ssi_device_reg_cuda = {"cuda", cu_open, cu_probe};
