/* fake-cudart.c: a CPU stand-in for the CUDA runtime (libcudart.so.13) and for the driver's
 * virtual-memory entry points, so that src/device-cuda.c runs without a GPU: the programs built
 * with SS_USE_CUDA load it instead of the real runtime (LD_LIBRARY_PATH; their RUNPATH comes
 * after it), as scripts/cuda-emu-check.sh does. Compiled against the toolkit's own headers, so
 * the types and the symbol names are the real ones. It covers the calls device-cuda.c makes:
 *
 *   - device memory is host memory (cudaMalloc: 256-byte aligned, filled with 0xcd) under a
 *     capacity (FAKE_CUDA_MIB, default 1024) that cudaMemGetInfo reports and cudaMalloc and
 *     cuMemCreate respect (cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY);
 *   - a stream is a worker thread running its queue in order: copies (memcpy, then a pause of
 *     n / FAKE_CUDA_GBPS, default 4 GB/s, so a copy stays in flight for a while), event records,
 *     event waits; cudaStreamLegacy and NULL share one default stream;
 *   - events carry a generation: recording bumps it and the stream completes it; query, sync,
 *     stream waits and elapsed time follow CUDA's rules (never recorded = complete);
 *   - virtual memory: cuMemAddressReserve is a PROT_NONE mapping, cuMemCreate a memfd of the
 *     size, cuMemMap maps it MAP_FIXED (read-write after cuMemSetAccess: mapped PROT_NONE until
 *     then, so a missing cuMemSetAccess faults), cuMemUnmap maps PROT_NONE over it again;
 *     granularity FAKE_CUDA_GRANULE (default 65536); FAKE_CUDA_NO_VMM=1 makes cuMemCreate fail
 *     (the device must then keep plain segments); FAKE_CUDA_DEVICES=0 is a machine without GPU;
 *   - cudaMemsetAsync, and cudaLaunchHostFunc (a host function run on the stream's thread, in
 *     order: the trainer's kernels in tests/cuda-emu/kernels-shim.c);
 *   - the device's spin kernel (compute_async): cuModuleLoadData accepts PTX text with an entry
 *     ss_spin reading %globaltimer; cuLaunchKernel of it (one thread) occupies the stream for the
 *     nanoseconds of its parameter.
 *
 * What it cannot show: kernels, real copy engines and timing, the driver's own checks beyond
 * the ones below. Calls outside this list are not provided (the link of a program that needs
 * one fails).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static size_t g_used, g_cap;
static __thread cudaError_t t_last = cudaSuccess;

static size_t env_size(const char *name, size_t dflt) {
    const char *v = getenv(name);
    return v && *v ? (size_t)strtoull(v, NULL, 10) : dflt;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static cudaError_t fail(cudaError_t e) { t_last = e; return e; }

static size_t cap_bytes(void) {
    if (!g_cap) g_cap = env_size("FAKE_CUDA_MIB", 1024) << 20;
    return g_cap;
}

static int charge(size_t n) {
    pthread_mutex_lock(&g_mu);
    int ok = g_used + n <= cap_bytes();
    if (ok) g_used += n;
    pthread_mutex_unlock(&g_mu);
    return ok;
}

static void uncharge(size_t n) {
    pthread_mutex_lock(&g_mu);
    g_used -= n;
    pthread_mutex_unlock(&g_mu);
}

/* ---- errors, devices --------------------------------------------------------------------- */

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected (fake-cudart)";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidValue: return "invalid argument";
    default: return "fake-cudart error";
    }
}

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    default: return "cudaErrorUnknown";
    }
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = t_last;
    t_last = cudaSuccess;
    return e;
}

cudaError_t cudaGetDeviceCount(int *n) {
    *n = (int)env_size("FAKE_CUDA_DEVICES", 1);
    return *n ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int d) {
    int n = 0;
    cudaGetDeviceCount(&n);
    return d >= 0 && d < n ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    if (cudaSetDevice(d) != cudaSuccess) return cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "fake-cudart (CPU)");
    p->major = 9;
    p->minor = 0;
    p->totalGlobalMem = cap_bytes();
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *f, size_t *t) {
    pthread_mutex_lock(&g_mu);
    *t = cap_bytes();
    *f = *t - g_used;
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

/* ---- memory ------------------------------------------------------------------------------ */

typedef struct blk { void *p; size_t n; struct blk *next; } blk;
static blk *g_blocks;

cudaError_t cudaMalloc(void **out, size_t n) {
    if (!charge(n)) return fail(cudaErrorMemoryAllocation);
    void *p = NULL;
    blk *b = malloc(sizeof *b);
    if (!b || posix_memalign(&p, 256, n ? n : 1)) { free(b); uncharge(n); return fail(cudaErrorMemoryAllocation); }
    memset(p, 0xcd, n);
    pthread_mutex_lock(&g_mu);
    *b = (blk){p, n, g_blocks};
    g_blocks = b;
    pthread_mutex_unlock(&g_mu);
    *out = p;
    return cudaSuccess;
}

static cudaError_t drain_default(void);

/* as on a GPU, cudaFree synchronises: the default stream's work (kernels, copies) is done
 * before the memory goes (copies on the device's own streams are its to order) */
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    drain_default();
    pthread_mutex_lock(&g_mu);
    blk **pp = &g_blocks;
    while (*pp && (*pp)->p != p) pp = &(*pp)->next;
    blk *b = *pp;
    if (b) { *pp = b->next; g_used -= b->n; }
    pthread_mutex_unlock(&g_mu);
    if (!b) return fail(cudaErrorInvalidValue);
    free(b);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **out, size_t n, unsigned int flags) {
    (void)flags;
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1)) return fail(cudaErrorMemoryAllocation);
    *out = p;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}

/* ---- events ------------------------------------------------------------------------------ */

typedef struct fev {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t recorded, completed;   /* generations */
    double t;                       /* when the last completed record ran */
    int timing;
} fev;

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned int flags) {
    fev *e = calloc(1, sizeof *e);
    if (!e) return fail(cudaErrorMemoryAllocation);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->timing = !(flags & cudaEventDisableTiming);
    *out = (cudaEvent_t)e;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    fev *e = (fev *)ev;
    /* the stream may still complete it: wait, as the contract allows */
    pthread_mutex_lock(&e->mu);
    while (e->completed < e->recorded) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t ev) {
    fev *e = (fev *)ev;
    pthread_mutex_lock(&e->mu);
    int done = e->completed >= e->recorded;
    pthread_mutex_unlock(&e->mu);
    return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    fev *e = (fev *)ev;
    pthread_mutex_lock(&e->mu);
    while (e->completed < e->recorded) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    fev *x = (fev *)a, *y = (fev *)b;
    if (!x->timing || !y->timing) return fail(cudaErrorInvalidResourceHandle);
    if (cudaEventQuery(a) != cudaSuccess || cudaEventQuery(b) != cudaSuccess) return cudaErrorNotReady;
    pthread_mutex_lock(&x->mu);
    double ta = x->t;
    int ra = x->recorded > 0;
    pthread_mutex_unlock(&x->mu);
    pthread_mutex_lock(&y->mu);
    double tb = y->t;
    int rb = y->recorded > 0;
    pthread_mutex_unlock(&y->mu);
    if (!ra || !rb) return fail(cudaErrorInvalidResourceHandle);
    *ms = (float)((tb - ta) * 1e3);
    return cudaSuccess;
}

/* ---- streams: a worker thread and a queue each -------------------------------------------- */

enum { OP_COPY, OP_RECORD, OP_WAIT, OP_SPIN, OP_SET, OP_HOST };
typedef struct fop {
    int kind;
    void *dst;
    const void *src;
    size_t n;
    fev *ev;
    uint64_t gen;
    cudaHostFn_t fn;        /* OP_HOST: fn(dst) on the stream's thread */
    double t_enq;           /* when it was enqueued */
    struct fop *next;
} fop;

typedef struct fstream {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work queued, or the queue drained */
    fop *head, *tail;
    int busy, quit;
    double t_end;           /* when the last op finished (the worker's) */
    pthread_t th;
} fstream;

static double g_gbps;

static void *worker(void *arg) {
    fstream *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->quit) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head) break;
        fop *op = s->head;
        s->busy = 1;
        pthread_mutex_unlock(&s->mu);
        if (op->kind == OP_COPY) {
            memcpy(op->dst, op->src, op->n);
            double secs = (double)op->n / (g_gbps * 1e9);
            struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
            nanosleep(&ts, NULL);
        } else if (op->kind == OP_SET) {   /* cudaMemsetAsync: the byte is in n's place */
            memset(op->dst, (int)op->gen, op->n);
        } else if (op->kind == OP_HOST) {
            op->fn(op->dst);
        } else if (op->kind == OP_SPIN) {   /* the spin kernel: busy for n nanoseconds */
            struct timespec ts = {(time_t)(op->n / 1000000000u), (long)(op->n % 1000000000u)};
            nanosleep(&ts, NULL);
        } else if (op->kind == OP_RECORD) {
            /* a GPU completes a record on an idle stream when it is submitted: the time is the
             * later of the enqueue and the previous op's end, not the worker's wake-up */
            double t = op->t_enq > s->t_end ? op->t_enq : s->t_end;
            pthread_mutex_lock(&op->ev->mu);
            if (op->gen > op->ev->completed) { op->ev->completed = op->gen; op->ev->t = t; }
            pthread_cond_broadcast(&op->ev->cv);
            pthread_mutex_unlock(&op->ev->mu);
        } else {
            pthread_mutex_lock(&op->ev->mu);
            while (op->ev->completed < op->gen) pthread_cond_wait(&op->ev->cv, &op->ev->mu);
            pthread_mutex_unlock(&op->ev->mu);
        }
        if (op->kind != OP_RECORD) s->t_end = now_s();
        pthread_mutex_lock(&s->mu);
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        s->busy = 0;
        free(op);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static fstream *stream_make(void) {
    if (g_gbps <= 0) {
        const char *v = getenv("FAKE_CUDA_GBPS");
        g_gbps = v && *v ? atof(v) : 4.0;
        if (g_gbps <= 0) g_gbps = 4.0;
    }
    fstream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->th, NULL, worker, s)) { free(s); return NULL; }
    return s;
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static fstream *g_default;
static void default_make(void) { g_default = stream_make(); }
/* the default stream exists from the start, as a GPU's does (no thread start at first use) */
__attribute__((constructor)) static void default_early(void) { pthread_once(&g_once, default_make); }

static fstream *S(cudaStream_t st) {
    if (st == NULL || st == cudaStreamLegacy || st == cudaStreamPerThread) {
        pthread_once(&g_once, default_make);
        return g_default;
    }
    return (fstream *)st;
}

static cudaError_t enqueue(fstream *s, fop o) {
    fop *op = malloc(sizeof *op);
    if (!op) return fail(cudaErrorMemoryAllocation);
    *op = o;
    op->t_enq = now_s();
    op->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = op; else s->head = op;
    s->tail = op;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned int flags) {
    (void)flags;
    fstream *s = stream_make();
    if (!s) return fail(cudaErrorMemoryAllocation);
    *out = (cudaStream_t)s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t st) {
    fstream *s = S(st);
    pthread_mutex_lock(&s->mu);
    while (s->head) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return cudaSuccess;
}

static cudaError_t drain_default(void) { return cudaStreamSynchronize(NULL); }

cudaError_t cudaStreamDestroy(cudaStream_t st) {
    fstream *s = S(st);
    if (s == g_default) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&s->mu);
    s->quit = 1;   /* the worker drains the queue first */
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t st) {
    (void)kind;
    if (!dst || !src) return fail(cudaErrorInvalidValue);
    return enqueue(S(st), (fop){.kind = OP_COPY, .dst = dst, .src = src, .n = n});
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t st) {
    if (!dst) return fail(cudaErrorInvalidValue);
    return enqueue(S(st), (fop){.kind = OP_SET, .dst = dst, .n = n, .gen = (uint64_t)(unsigned char)value});
}

/* fn(data) runs on the stream's thread in stream order (tests/cuda-emu/kernels-shim.c runs the
 * trainer's kernels this way, so they are ordered by streams and events as a GPU's are) */
cudaError_t cudaLaunchHostFunc(cudaStream_t st, cudaHostFn_t fn, void *data) {
    if (!fn) return fail(cudaErrorInvalidValue);
    return enqueue(S(st), (fop){.kind = OP_HOST, .fn = fn, .dst = data});
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st) {
    fev *e = (fev *)ev;
    pthread_mutex_lock(&e->mu);
    uint64_t gen = ++e->recorded;
    pthread_mutex_unlock(&e->mu);
    return enqueue(S(st), (fop){.kind = OP_RECORD, .ev = e, .gen = gen});
}

cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned int flags) {
    (void)flags;
    fev *e = (fev *)ev;
    pthread_mutex_lock(&e->mu);
    uint64_t gen = e->recorded;   /* the latest record at the time of the call */
    pthread_mutex_unlock(&e->mu);
    if (gen == 0) return cudaSuccess;   /* never recorded: complete */
    return enqueue(S(st), (fop){.kind = OP_WAIT, .ev = e, .gen = gen});
}

/* ---- the driver's virtual memory ---------------------------------------------------------- */

typedef struct fhandle { int fd; size_t n; } fhandle;
typedef struct fmap { uintptr_t va; size_t n; int rw; struct fmap *next; } fmap;
static fmap *g_maps;

static size_t granule(void) { return env_size("FAKE_CUDA_GRANULE", 65536); }

static CUresult f_get_error_string(CUresult r, const char **s) {
    *s = r == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory (fake)" : "fake driver error";
    return CUDA_SUCCESS;
}
static CUresult f_device_get(CUdevice *d, int ordinal) {
    *d = ordinal;
    return cudaSetDevice(ordinal) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
static CUresult f_device_get_attribute(int *v, CUdevice_attribute a, CUdevice d) {
    (void)d;
    *v = a == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ? 1 : 0;
    return CUDA_SUCCESS;
}
static CUresult f_granularity(size_t *g, const CUmemAllocationProp *p, CUmemAllocationGranularity_flags o) {
    (void)o;
    if (p->type != CU_MEM_ALLOCATION_TYPE_PINNED || p->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    *g = granule();
    return CUDA_SUCCESS;
}
static CUresult f_reserve(CUdeviceptr *ptr, size_t n, size_t align, CUdeviceptr addr, unsigned long long fl) {
    (void)addr; (void)fl;
    if (!n || n % granule() || (align && align % granule())) return CUDA_ERROR_INVALID_VALUE;
    /* aligned to the granule (or align), as the driver's reservations are: reserve more, trim */
    size_t al = align > granule() ? align : granule();
    char *m = mmap(NULL, n + al, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t a = ((uintptr_t)m + al - 1) & ~(uintptr_t)(al - 1);
    if (a > (uintptr_t)m) munmap(m, a - (uintptr_t)m);
    if ((uintptr_t)m + n + al > a + n) munmap((void *)(a + n), (uintptr_t)m + n + al - (a + n));
    *ptr = (CUdeviceptr)a;
    return CUDA_SUCCESS;
}
static CUresult f_address_free(CUdeviceptr p, size_t n) {
    pthread_mutex_lock(&g_mu);
    for (fmap *m = g_maps; m; m = m->next)
        if (m->va >= p && m->va < p + n) { pthread_mutex_unlock(&g_mu); return CUDA_ERROR_INVALID_VALUE; }
    pthread_mutex_unlock(&g_mu);
    munmap((void *)(uintptr_t)p, n);
    return CUDA_SUCCESS;
}
static CUresult f_create(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *p,
                         unsigned long long fl) {
    (void)fl;
    if (getenv("FAKE_CUDA_NO_VMM") && atoi(getenv("FAKE_CUDA_NO_VMM"))) return CUDA_ERROR_NOT_SUPPORTED;
    if (!n || n % granule() || p->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    if (!charge(n)) return CUDA_ERROR_OUT_OF_MEMORY;
    fhandle *f = malloc(sizeof *f);
    int fd = memfd_create("fake-cuda-granule", MFD_CLOEXEC);
    if (!f || fd < 0 || ftruncate(fd, (off_t)n) != 0) {
        if (fd >= 0) close(fd);
        free(f);
        uncharge(n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    f->fd = fd;
    f->n = n;
    *h = (CUmemGenericAllocationHandle)(uintptr_t)f;
    return CUDA_SUCCESS;
}
static CUresult f_release(CUmemGenericAllocationHandle h) {
    fhandle *f = (fhandle *)(uintptr_t)h;
    close(f->fd);   /* a mapping keeps the memory until it is unmapped, as the driver does */
    uncharge(f->n);
    free(f);
    return CUDA_SUCCESS;
}
static CUresult f_map(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long fl) {
    fhandle *f = (fhandle *)(uintptr_t)h;
    if (fl || off || n != f->n || p % granule()) return CUDA_ERROR_INVALID_VALUE;
    fmap *m = malloc(sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_mu);
    for (fmap *x = g_maps; x; x = x->next)
        if (x->va < p + n && p < x->va + x->n) { pthread_mutex_unlock(&g_mu); free(m); return CUDA_ERROR_INVALID_VALUE; }
    void *r = mmap((void *)(uintptr_t)p, n, PROT_NONE, MAP_SHARED | MAP_FIXED, f->fd, 0);
    if (r == MAP_FAILED) { pthread_mutex_unlock(&g_mu); free(m); return CUDA_ERROR_OUT_OF_MEMORY; }
    *m = (fmap){p, n, 0, g_maps};
    g_maps = m;
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}
static CUresult f_set_access(CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t count) {
    if (count != 1 || d->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_mu);
    fmap *m = g_maps;
    while (m && m->va != p) m = m->next;
    if (!m || m->n != n) { pthread_mutex_unlock(&g_mu); return CUDA_ERROR_INVALID_VALUE; }
    m->rw = 1;
    mprotect((void *)(uintptr_t)p, n, PROT_READ | PROT_WRITE);
    memset((void *)(uintptr_t)p, 0xcd, n);   /* fresh memory reads as garbage, as cudaMalloc's */
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}
static CUresult f_unmap(CUdeviceptr p, size_t n) {
    pthread_mutex_lock(&g_mu);
    fmap **pp = &g_maps;
    while (*pp && (*pp)->va != p) pp = &(*pp)->next;
    fmap *m = *pp;
    if (!m || m->n != n) { pthread_mutex_unlock(&g_mu); return CUDA_ERROR_INVALID_VALUE; }
    *pp = m->next;
    mmap((void *)(uintptr_t)p, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    pthread_mutex_unlock(&g_mu);
    free(m);
    return CUDA_SUCCESS;
}

/* modules: only the device's spin kernel (PTX text naming ss_spin and %globaltimer) */
static int g_module;
static CUresult f_module_load(CUmodule *m, const void *image) {
    const char *ptx = image;
    if (!strstr(ptx, ".entry ss_spin") || !strstr(ptx, "%globaltimer")) return CUDA_ERROR_INVALID_IMAGE;
    *m = (CUmodule)&g_module;
    return CUDA_SUCCESS;
}
static CUresult f_module_unload(CUmodule m) { return m == (CUmodule)&g_module ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
static CUresult f_get_function(CUfunction *f, CUmodule m, const char *name) {
    if (m != (CUmodule)&g_module || strcmp(name, "ss_spin")) return CUDA_ERROR_NOT_FOUND;
    *f = (CUfunction)&g_module;
    return CUDA_SUCCESS;
}
static CUresult f_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, unsigned shm, CUstream st, void **params, void **extra) {
    if (f != (CUfunction)&g_module || gx * gy * gz * bx * by * bz != 1 || shm || extra || !params)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long ns;
    memcpy(&ns, params[0], sizeof ns);
    return enqueue(S((cudaStream_t)st), (fop){.kind = OP_SPIN, .n = (size_t)ns}) == cudaSuccess
               ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned int ver,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *q) {
    (void)ver; (void)flags;
    static const struct { const char *name; void *fn; } tab[] = {
        {"cuGetErrorString", (void *)f_get_error_string},
        {"cuDeviceGet", (void *)f_device_get},
        {"cuDeviceGetAttribute", (void *)f_device_get_attribute},
        {"cuMemGetAllocationGranularity", (void *)f_granularity},
        {"cuMemAddressReserve", (void *)f_reserve},
        {"cuMemAddressFree", (void *)f_address_free},
        {"cuMemCreate", (void *)f_create},
        {"cuMemRelease", (void *)f_release},
        {"cuMemMap", (void *)f_map},
        {"cuMemUnmap", (void *)f_unmap},
        {"cuMemSetAccess", (void *)f_set_access},
        {"cuModuleLoadData", (void *)f_module_load},
        {"cuModuleUnload", (void *)f_module_unload},
        {"cuModuleGetFunction", (void *)f_get_function},
        {"cuLaunchKernel", (void *)f_launch},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(tab[i].name, sym)) {
            *fn = tab[i].fn;
            if (q) *q = cudaDriverEntryPointSuccess;
            return cudaSuccess;
        }
    *fn = NULL;
    if (q) *q = cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}
