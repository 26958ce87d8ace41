/* device-fault.c: the "fault" device wrapper, for tests. It forwards every call to an inner
 * device through the inner device's public calls and fails the nth call (1-based) of a chosen
 * kind with a chosen status, once or from then on (the countdown of sqlite's test_malloc.c), or
 * the nth call made from one call site (file and line, noted by internal.h's macros).
 * Kinds: "alloc" (device and host allocations, VM maps), "copy", "event" (new, record, wait,
 * query, sync), "stream" (new, wrap, sync). Frees never fail, so cleanup paths can always run.
 * It counts every call by site; "fault:NAME" opens NAME wrapped, armed from SMARTSWAP_FAULT, and
 * writes the sites and their counts to SMARTSWAP_FAULT_REPORT at close (docs/testing.md).
 * Backend handles here are the inner device's ss_stream_t / ss_event_t pointers.
 */
#include "device-impl.h"

#include <errno.h>
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
    struct fsite { const char *file; int line, kind; uint64_t count; } *sites;   /* by first call */
    size_t nsites, capsites;
    char site_file[256];        /* the armed site: a file name (matched as a suffix) ... */
    int site_line;              /* ... and line; 0 = none armed */
    uint64_t site_nth, site_count;
    ss_status site_fail;        /* SS_OK: the kind's own (SS_ERR_OOM for alloc, else SS_ERR_DEVICE) */
    char *report;               /* "fault:" devices: SMARTSWAP_FAULT_REPORT, written at close */
} fault_dev;

static int site_matches(const fault_dev *f, const char *file, int line) {
    if (!f->site_line || line != f->site_line || !file) return 0;
    size_t a = strlen(file), b = strlen(f->site_file);
    return a >= b && strcmp(file + a - b, f->site_file) == 0 && (a == b || file[a - b - 1] == '/');
}

/* Counts one call of kind k at the caller's site; returns the status to fail it with, or SS_OK. */
static ss_status fault_hit(fault_dev *f, int k) {
    ss_status st = SS_OK;
    const char *file = ssi_call_site.file;
    int line = file ? ssi_call_site.line : 0;
    pthread_mutex_lock(&f->mu);
    uint64_t c = ++f->count[k];
    if (f->nth[k] && (c == f->nth[k] || (f->repeat[k] && c > f->nth[k]))) {
        st = f->fail[k];
        f->injected++;
    }
    size_t i = 0;
    while (i < f->nsites && !(f->sites[i].line == line && f->sites[i].kind == k &&
                              (f->sites[i].file == file || (file && f->sites[i].file &&
                                                            strcmp(f->sites[i].file, file) == 0))))
        i++;
    if (i == f->nsites && ssi_grow(&f->sites, &f->capsites, f->nsites + 1, sizeof *f->sites) == SS_OK)
        f->sites[f->nsites++] = (struct fsite){file, line, k, 0};
    if (i < f->nsites) f->sites[i].count++;
    if (st == SS_OK && site_matches(f, file, line) && ++f->site_count == f->site_nth) {
        st = f->site_fail != SS_OK ? f->site_fail : k == FK_ALLOC ? SS_ERR_OOM : SS_ERR_DEVICE;
        f->injected++;
    }
    pthread_mutex_unlock(&f->mu);
    if (st != SS_OK) SS_DEBUGF("fault: failing %s call %llu (%s:%d) with %s", fault_kinds[k],
                               (unsigned long long)c, file ? file : "?", line, ss_status_str(st));
    return st;
}

/* Writes "smartswap-fault-sites v1", the failures injected and each site's calls to path. */
static void write_report(const fault_dev *f, const char *path) {
    FILE *o = fopen(path, "w");
    if (!o) { SS_ERROR("fault: cannot write the site report %s: %s", path, strerror(errno)); return; }
    fprintf(o, "smartswap-fault-sites v1\ninjected %llu\n", (unsigned long long)f->injected);
    for (size_t i = 0; i < f->nsites; i++)
        fprintf(o, "site %s:%d %s %llu\n", f->sites[i].file ? f->sites[i].file : "?", f->sites[i].line,
                fault_kinds[f->sites[i].kind], (unsigned long long)f->sites[i].count);
    if (fclose(o) != 0) SS_ERROR("fault: cannot write the site report %s", path);
}

#define FAULT(k) do { ss_status fst_ = fault_hit(f, (k)); if (fst_ != SS_OK) return fst_; } while (0)

static void f_close(void *ctx) {
    fault_dev *f = ctx;
    ss_device_close(f->inner);   /* cannot fail: the outer wrapper checked for live objects */
    if (f->report) write_report(f, f->report);
    pthread_mutex_destroy(&f->mu);
    free(f->report);
    free(f->sites);
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

ss_status ss_device_fault_arm_site(ss_device_t *fault_dev_, const char *site, uint64_t nth,
                                   ss_status fail) {
    SS_CHECK_ARG(!fault_dev_ || fault_dev_->iface != &fault_iface,
                 "ss_device_fault_arm_site: not a fault device");
    SS_CHECK_ARG(fail != SS_OK && ((int)fail < 0 || fail >= SS_STATUS_COUNT),
                 "ss_device_fault_arm_site: status %d is not an error", (int)fail);
    fault_dev *f = fault_dev_->ctx;
    const char *colon = site ? strrchr(site, ':') : NULL;
    char *end = NULL;
    long line = colon ? strtol(colon + 1, &end, 10) : 0;
    if (nth) {
        SS_CHECK_ARG(!colon || colon == site || (size_t)(colon - site) >= sizeof f->site_file || !end ||
                     colon[1] < '0' || colon[1] > '9' ||
                     *end || line <= 0 || line > 1000000,
                     "ss_device_fault_arm_site: site '%s' is not FILE:LINE (e.g. src/exec.c:120)",
                     site ? site : "(null)");
    }
    pthread_mutex_lock(&f->mu);
    f->site_line = nth ? (int)line : 0;
    if (nth) {
        memcpy(f->site_file, site, (size_t)(colon - site));
        f->site_file[colon - site] = 0;
    }
    f->site_nth = nth;
    f->site_count = 0;
    f->site_fail = fail;
    pthread_mutex_unlock(&f->mu);
    return SS_OK;
}

size_t ss_device_fault_sites(const ss_device_t *fault_dev_, ss_fault_site *out, size_t cap) {
    if (!fault_dev_ || fault_dev_->iface != &fault_iface) return 0;
    fault_dev *f = fault_dev_->ctx;
    pthread_mutex_lock(&f->mu);
    size_t n = f->nsites;
    for (size_t i = 0; i < n && i < cap; i++) {
        out[i].file = f->sites[i].file ? f->sites[i].file : "?";
        out[i].line = f->sites[i].line;
        out[i].kind = fault_kinds[f->sites[i].kind];
        out[i].calls = f->sites[i].count;
    }
    pthread_mutex_unlock(&f->mu);
    return n;
}

uint64_t ss_device_fault_injected(const ss_device_t *fault_dev_) {
    if (!fault_dev_ || fault_dev_->iface != &fault_iface) return 0;
    fault_dev *f = fault_dev_->ctx;
    pthread_mutex_lock(&f->mu);
    uint64_t n = f->injected;
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* "fault:NAME": NAME opened with opts and wrapped. SMARTSWAP_FAULT arms it: KIND:N fails the nth
 * call of a kind, FILE:LINE:N the nth call from that site (alloc calls fail with SS_ERR_OOM,
 * the others with SS_ERR_DEVICE); unset, nothing fails. SMARTSWAP_FAULT_REPORT names the file
 * the sites and their counts are written to at close. */
ss_status ssi_device_open_fault(const char *inner_name, const ss_options *opts, ss_device_t **out) {
    const char *spec = getenv("SMARTSWAP_FAULT"), *report = getenv("SMARTSWAP_FAULT_REPORT");
    char kind[16] = "", site[300] = "";
    uint64_t nth = 0;
    if (spec && *spec) {
        const char *colon = strrchr(spec, ':');
        char *end = NULL;
        unsigned long long n = colon ? strtoull(colon + 1, &end, 10) : 0;
        size_t pre = colon ? (size_t)(colon - spec) : 0;
        if (!colon || colon[1] < '0' || colon[1] > '9' || !end || *end || n == 0 || pre == 0 || pre >= sizeof site) {
            SS_ERROR("SMARTSWAP_FAULT='%s': expected KIND:N (alloc, copy, event or stream) or FILE:LINE:N, "
                     "N >= 1 (docs/testing.md)", spec);
            return SS_ERR_INVALID;
        }
        memcpy(site, spec, pre);
        site[pre] = 0;
        if (kind_index(site) >= 0) { memcpy(kind, site, pre + 1); site[0] = 0; }
        nth = n;
    }
    ss_device_t *inner = NULL, *f = NULL;
    ss_status st = ss_device_open(inner_name, opts, &inner);
    if (st != SS_OK) return st;
    st = ss_device_fault(inner, "alloc", 0, 0, SS_ERR_OOM, &f);
    if (st != SS_OK) { ss_device_close(inner); return st; }
    if (nth && kind[0])
        st = ss_device_fault_arm(f, kind, nth, 0, kind_index(kind) == FK_ALLOC ? SS_ERR_OOM : SS_ERR_DEVICE);
    else if (nth)
        st = ss_device_fault_arm_site(f, site, nth, SS_OK);
    fault_dev *fd = f->ctx;
    if (st == SS_OK && report && *report && !(fd->report = ssi_strdup(report))) st = SS_ERR_HOST_OOM;
    if (st != SS_OK) {
        if (st == SS_ERR_INVALID) SS_ERROR("SMARTSWAP_FAULT='%s' refused (docs/testing.md)", spec);
        ss_device_close(f);
        return st;
    }
    *out = f;
    return SS_OK;
}
