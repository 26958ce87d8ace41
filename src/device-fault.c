/* device-fault.c: the "fault" device wrapper, for tests. It forwards every call to an inner
 * device through the inner device's public calls and fails the nth call (1-based) of a chosen
 * kind with a chosen status, once or from then on (the countdown of sqlite's test_malloc.c).
 * Kinds: "alloc" (device and host allocations), "copy", "event" (new, record, wait, query,
 * sync), "stream" (new, wrap, sync). Frees never fail, so cleanup paths can always run.
 * Backend handles here are the inner device's ss_stream_t / ss_event_t pointers.
 */
#include "device-impl.h"

#include <stdio.h>

enum { FK_ALLOC, FK_COPY, FK_EVENT, FK_STREAM, FK_N };
static const char *const fault_kinds[FK_N] = {"alloc", "copy", "event", "stream"};

typedef struct fault_dev {
    ss_device_t *inner;
    pthread_mutex_t mu;
    uint64_t count[FK_N];       /* calls of each kind since armed */
    uint64_t nth[FK_N];         /* 0 = disarmed */
    int repeat[FK_N];
    ss_status fail[FK_N];
    uint64_t injected;          /* failures injected so far */
} fault_dev;

/* Counts one call of kind k; returns the status to fail it with, or SS_OK. */
static ss_status fault_hit(fault_dev *f, int k) {
    ss_status st = SS_OK;
    pthread_mutex_lock(&f->mu);
    uint64_t c = ++f->count[k];
    if (f->nth[k] && (c == f->nth[k] || (f->repeat[k] && c > f->nth[k]))) {
        st = f->fail[k];
        f->injected++;
    }
    pthread_mutex_unlock(&f->mu);
    if (st != SS_OK) SS_DEBUGF("fault: failing %s call %llu with %s", fault_kinds[k],
                               (unsigned long long)c, ss_status_str(st));
    return st;
}

#define FAULT(k) do { ss_status fst_ = fault_hit(f, (k)); if (fst_ != SS_OK) return fst_; } while (0)

static void f_close(void *ctx) {
    fault_dev *f = ctx;
    ss_device_close(f->inner);   /* cannot fail: the outer wrapper checked for live objects */
    pthread_mutex_destroy(&f->mu);
    free(f);
}

static ss_status f_mem_info(void *ctx, uint64_t *fb, uint64_t *tb) {
    fault_dev *f = ctx;
    return ss_device_mem_info(f->inner, fb, tb);
}

static ss_status f_mem_alloc(void *ctx, size_t n, void **out) {
    fault_dev *f = ctx;
    FAULT(FK_ALLOC);
    return ss_mem_alloc(f->inner, n, out);
}

static ss_status f_mem_free(void *ctx, void *p, size_t n) {
    fault_dev *f = ctx;
    return ss_mem_free(f->inner, p, n);
}

static ss_status f_host_alloc(void *ctx, size_t n, void **out) {
    fault_dev *f = ctx;
    FAULT(FK_ALLOC);
    return ss_host_alloc(f->inner, n, out);
}

static ss_status f_host_free(void *ctx, void *p, size_t n) {
    fault_dev *f = ctx;
    return ss_host_free(f->inner, p, n);
}

static ss_status f_mem_poison(void *ctx, void *p, size_t n) {
    fault_dev *f = ctx;
    return ss_mem_poison(f->inner, p, n);
}

static ss_status f_mem_check_poison(void *ctx, const void *p, size_t n, size_t *found) {
    fault_dev *f = ctx;
    return ss_mem_check_poison(f->inner, p, n, found);
}

static ss_status f_stream_new(void *ctx, void **out) {
    fault_dev *f = ctx;
    FAULT(FK_STREAM);
    return ss_stream_new(f->inner, (ss_stream_t **)out);
}

static ss_status f_stream_wrap(void *ctx, void *handle, void **out) {
    fault_dev *f = ctx;
    FAULT(FK_STREAM);
    return ss_stream_wrap(f->inner, handle, (ss_stream_t **)out);
}

static ss_status f_stream_free(void *ctx, void *s) {
    fault_dev *f = ctx;
    return ss_stream_free(f->inner, s);
}

static ss_status f_stream_sync(void *ctx, void *s) {
    fault_dev *f = ctx;
    FAULT(FK_STREAM);
    return ss_stream_sync(f->inner, s);
}

static ss_status f_copy_async(void *ctx, void *s, void *dst, const void *src, size_t n,
                              ss_copy_kind kind) {
    fault_dev *f = ctx;
    FAULT(FK_COPY);
    return ss_copy_async(f->inner, s, dst, src, n, kind);
}

static ss_status f_compute_async(void *ctx, void *s, double seconds) {
    fault_dev *f = ctx;
    return ss_compute_async(f->inner, s, seconds);
}

static ss_status f_event_new(void *ctx, void **out) {
    fault_dev *f = ctx;
    FAULT(FK_EVENT);
    return ss_event_new(f->inner, (ss_event_t **)out);
}

static ss_status f_event_free(void *ctx, void *e) {
    fault_dev *f = ctx;
    return ss_event_free(f->inner, e);
}

static ss_status f_event_record(void *ctx, void *e, void *s) {
    fault_dev *f = ctx;
    FAULT(FK_EVENT);
    return ss_event_record(f->inner, e, s);
}

static ss_status f_event_wait(void *ctx, void *s, void *e) {
    fault_dev *f = ctx;
    FAULT(FK_EVENT);
    return ss_event_wait(f->inner, s, e);
}

static ss_status f_event_query(void *ctx, void *e, int *done) {
    fault_dev *f = ctx;
    FAULT(FK_EVENT);
    return ss_event_query(f->inner, e, done);
}

static ss_status f_event_sync(void *ctx, void *e) {
    fault_dev *f = ctx;
    FAULT(FK_EVENT);
    return ss_event_sync(f->inner, e);
}

static ss_status f_event_elapsed(void *ctx, void *a, void *b, double *seconds) {
    fault_dev *f = ctx;
    return ss_event_elapsed(f->inner, a, b, seconds);
}

static ss_status f_event_time(void *ctx, void *e, double *seconds) {
    fault_dev *f = ctx;
    return ss_event_time(f->inner, e, seconds);
}

/* Virtual memory: a map is an "alloc" call (reserve, release and unmap never fail here). */
static ss_status f_vm_reserve(void *ctx, size_t n, void **va) {
    fault_dev *f = ctx;
    return ss_vm_reserve(f->inner, n, va);
}

static ss_status f_vm_release(void *ctx, void *va, size_t n) {
    fault_dev *f = ctx;
    return ss_vm_release(f->inner, va, n);
}

static ss_status f_vm_map(void *ctx, void *va, size_t n) {
    fault_dev *f = ctx;
    FAULT(FK_ALLOC);
    return ss_vm_map(f->inner, va, n);
}

static ss_status f_vm_unmap(void *ctx, void *va, size_t n) {
    fault_dev *f = ctx;
    return ss_vm_unmap(f->inner, va, n);
}

static double f_now(void *ctx) {
    fault_dev *f = ctx;
    return ss_device_now(f->inner);
}

static const struct ss_device_i fault_iface = {
    .close = f_close,
    .mem_info = f_mem_info,
    .mem_alloc = f_mem_alloc,
    .mem_free = f_mem_free,
    .host_alloc = f_host_alloc,
    .host_free = f_host_free,
    .mem_poison = f_mem_poison,
    .mem_check_poison = f_mem_check_poison,
    .stream_new = f_stream_new,
    .stream_wrap = f_stream_wrap,
    .stream_free = f_stream_free,
    .stream_sync = f_stream_sync,
    .copy_async = f_copy_async,
    .compute_async = f_compute_async,
    .event_new = f_event_new,
    .event_free = f_event_free,
    .event_record = f_event_record,
    .event_wait = f_event_wait,
    .event_query = f_event_query,
    .event_sync = f_event_sync,
    .event_elapsed = f_event_elapsed,
    .event_time = f_event_time,
    .now = f_now,
    .vm_reserve = f_vm_reserve,
    .vm_release = f_vm_release,
    .vm_map = f_vm_map,
    .vm_unmap = f_vm_unmap,
};

static int kind_index(const char *kind) {
    for (int k = 0; k < FK_N; k++)
        if (kind && strcmp(kind, fault_kinds[k]) == 0) return k;
    return -1;
}

ss_status ss_device_fault_arm(ss_device_t *fault_dev_, const char *kind, uint64_t nth,
                              int repeat, ss_status fail) {
    SS_CHECK_ARG(!fault_dev_ || fault_dev_->iface != &fault_iface,
                 "ss_device_fault_arm: not a fault device");
    int k = kind_index(kind);
    SS_CHECK_ARG(k < 0, "ss_device_fault_arm: kind '%s' is not alloc, copy, event or stream",
                 kind ? kind : "(null)");
    SS_CHECK_ARG(nth && (fail == SS_OK || (int)fail < 0 || fail >= SS_STATUS_COUNT),
                 "ss_device_fault_arm: the injected status must be an error");
    fault_dev *f = fault_dev_->ctx;
    pthread_mutex_lock(&f->mu);
    f->count[k] = 0;
    f->nth[k] = nth;
    f->repeat[k] = repeat != 0;
    f->fail[k] = fail;
    pthread_mutex_unlock(&f->mu);
    return SS_OK;
}

ss_status ss_device_fault(ss_device_t *dev, const char *kind, uint64_t nth, int repeat,
                          ss_status fail, ss_device_t **out) {
    SS_CHECK_ARG(!dev || !out, "ss_device_fault: NULL device or out");
    SS_CHECK_ARG(kind_index(kind) < 0, "ss_device_fault: kind '%s' is not alloc, copy, event or stream",
                 kind ? kind : "(null)");
    SS_CHECK_ARG(nth && (fail == SS_OK || (int)fail < 0 || fail >= SS_STATUS_COUNT),
                 "ss_device_fault: the injected status must be an error");
    fault_dev *f = calloc(1, sizeof *f);
    if (!f) return SS_ERR_HOST_OOM;
    pthread_mutex_init(&f->mu, NULL);
    f->inner = dev;
    int k = kind_index(kind);
    f->nth[k] = nth;
    f->repeat[k] = repeat != 0;
    f->fail[k] = fail;
    ssi_device_backend be;
    be.iface = &fault_iface;
    be.ctx = f;
    be.caps = dev->caps;
    char name[sizeof be.caps.name];
    snprintf(name, sizeof name, "fault(%.22s)", dev->caps.name);
    memcpy(be.caps.name, name, sizeof name);
    ss_status st = ssi_device_make(&be, out);
    if (st != SS_OK) {          /* dev stays the caller's */
        pthread_mutex_destroy(&f->mu);
        free(f);
    }
    return st;
}
