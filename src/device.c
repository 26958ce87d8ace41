/* device.c: the public device calls of smartswap-device.h. Each call checks its arguments, calls
 * the backend's slot (device-impl.h) or the default of an optional slot, and counts. Also here:
 * the registry of compiled-in backends (list/open), live-object tracking for close, the
 * poison scan, and the cpu-sim calibration helpers (docs/performance-model.md).
 */
#include "device-impl.h"

#include <math.h>
#include <stdio.h>

_Thread_local ssi_site ssi_call_site;   /* internal.h: the site of the device call in progress */

/* ---------------------------------------------------------------------------------------- */
/* wrapper objects                                                                           */

struct ss_stream {
    ss_device_t *dev;
    void *h;               /* backend handle */
};

struct ss_event {
    ss_device_t *dev;
    void *h;               /* backend handle */
    int seen;              /* default event_time: a query or sync saw it complete ... */
    double seen_time;      /* ... at this device time (both under dev->mu) */
};

/* ---------------------------------------------------------------------------------------- */
/* live pointer table: open addressing with linear probing and backward-shift deletion       */

static size_t ptr_slot(uintptr_t k, size_t cap) {
    uint64_t h = (uint64_t)k;
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33;
    return (size_t)h & (cap - 1);
}

/* Inserts k -> v (k not present, k != 0). SS_ERR_HOST_OOM if the table cannot grow. */
ss_status ssi_ptr_put(ssi_ptr_table *t, uintptr_t k, size_t v) {
    if ((t->len + 1) * 2 > t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 64;
        uintptr_t *nk = calloc(ncap, sizeof *nk);
        size_t *nv = calloc(ncap, sizeof *nv);
        if (!nk || !nv) { free(nk); free(nv); return SS_ERR_HOST_OOM; }
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->keys[i]) continue;
            size_t j = ptr_slot(t->keys[i], ncap);
            while (nk[j]) j = (j + 1) & (ncap - 1);
            nk[j] = t->keys[i]; nv[j] = t->vals[i];
        }
        free(t->keys); free(t->vals);
        t->keys = nk; t->vals = nv; t->cap = ncap;
    }
    size_t j = ptr_slot(k, t->cap);
    while (t->keys[j]) j = (j + 1) & (t->cap - 1);
    t->keys[j] = k; t->vals[j] = v; t->len++;
    return SS_OK;
}

/* Index of k, or SIZE_MAX. */
size_t ssi_ptr_find(const ssi_ptr_table *t, uintptr_t k) {
    if (!t->cap || !k) return SIZE_MAX;
    for (size_t j = ptr_slot(k, t->cap);; j = (j + 1) & (t->cap - 1)) {
        if (!t->keys[j]) return SIZE_MAX;
        if (t->keys[j] == k) return j;
    }
}

void ssi_ptr_del_at(ssi_ptr_table *t, size_t i) {
    size_t m = t->cap - 1, j = i;
    t->keys[i] = 0;
    for (;;) {
        j = (j + 1) & m;
        if (!t->keys[j]) break;
        size_t home = ptr_slot(t->keys[j], t->cap);
        /* move j back to i when its home is not in (i, j] cyclically */
        if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
            t->keys[i] = t->keys[j]; t->vals[i] = t->vals[j]; t->keys[j] = 0; i = j;
        }
    }
    t->len--;
}

void ssi_ptr_free(ssi_ptr_table *t) {
    free(t->keys); free(t->vals);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------------------------------- */
/* registry                                                                                  */

static const ssi_device_reg *const registry[] = {
    &ssi_device_reg_cpusim,
#ifdef SS_USE_CUDA
    &ssi_device_reg_cuda,
#endif
};
#define REGISTRY_N (sizeof registry / sizeof registry[0])

/* Appends " word" (or "word" when buf is empty) to buf[len]; never overflows. */
static void append_word(char *buf, size_t len, const char *word) {
    if (!buf || !len) return;
    size_t u = strlen(buf);
    if (u + 1 >= len) return;
    snprintf(buf + u, len - u, "%s%s", u ? " " : "", word);
}

ss_status ss_device_list(char *buf, size_t len, char *absent, size_t absent_len) {
    SS_CHECK_ARG(!buf || !len, "ss_device_list: NULL or empty buffer");
    buf[0] = 0;
    if (absent && absent_len) absent[0] = 0;
    for (size_t r = 0; r < REGISTRY_N; r++) {
        char msg[256] = "";
        int n = registry[r]->probe(msg, sizeof msg);
        if (n < 0) {
            char w[400];
            snprintf(w, sizeof w, "%s (%s)", registry[r]->prefix, msg);
            append_word(absent, absent_len, w);
        } else if (strcmp(registry[r]->prefix, "cpu-sim") == 0) {
            append_word(buf, len, "cpu-sim");
        } else {
            for (int i = 0; i < n; i++) {
                char w[64];
                snprintf(w, sizeof w, "%s:%d", registry[r]->prefix, i);
                append_word(buf, len, w);
            }
        }
    }
    return SS_OK;
}

ss_status ssi_device_make(const ssi_device_backend *be, ss_device_t **out) {
    ss_device_t *d = calloc(1, sizeof *d);
    if (!d || pthread_mutex_init(&d->mu, NULL) != 0) {
        free(d);
        return SS_ERR_HOST_OOM;
    }
    d->iface = be->iface;
    d->ctx = be->ctx;
    d->caps = be->caps;
    if (!be->iface->vm_reserve || !be->iface->vm_release || !be->iface->vm_map || !be->iface->vm_unmap)
        d->caps.vm_granularity = 0;   /* all four or none */
    d->t_open = ssi_now();
    *out = d;
    return SS_OK;
}

ss_status ss_device_open(const char *name, const ss_options *opts, ss_device_t **out) {
    SS_CHECK_ARG(!name || !out, "ss_device_open: NULL name or out");
    ss_options def = ss_options_default();
    if (!opts) opts = &def;
    if (strncmp(name, "fault:", 6) == 0) return ssi_device_open_fault(name + 6, opts, out);
    for (size_t r = 0; r < REGISTRY_N; r++) {
        size_t pl = strlen(registry[r]->prefix);
        if (strncmp(name, registry[r]->prefix, pl) != 0 || (name[pl] && name[pl] != ':')) continue;
        ssi_device_backend be;
        char err[256] = "";
        memset(&be, 0, sizeof be);
        ss_status st = registry[r]->open(name, opts, &be, err, sizeof err);
        if (st != SS_OK) {
            SS_ERROR("cannot open device %s: %s", name, err[0] ? err : ss_status_str(st));
            return st;
        }
        st = ssi_device_make(&be, out);
        if (st != SS_OK) be.iface->close(be.ctx);
        return st;
    }
    SS_ERROR("unknown device '%s' (this build has: cpu-sim%s)", name,
#ifdef SS_USE_CUDA
             ", cuda, cuda:N"
#else
             ""
#endif
    );
    return SS_ERR_NOT_FOUND;
}

ss_status ss_device_close(ss_device_t *dev) {
    SS_CHECK_ARG(!dev, "ss_device_close: NULL device");
    pthread_mutex_lock(&dev->mu);
    size_t nm = dev->mem.len, nh = dev->host.len, nv = dev->vres.len;
    uint64_t ns = dev->live_streams, ne = dev->live_events;
    pthread_mutex_unlock(&dev->mu);
    if (nm || nh || ns || ne || nv) {
        SS_ERROR("ss_device_close(%s): still live: %zu device blocks, %zu host blocks, "
                 "%llu streams, %llu events, %zu address reservations; nothing closed",
                 dev->caps.name, nm, nh, (unsigned long long)ns, (unsigned long long)ne, nv);
        return SS_ERR_STATE;
    }
    dev->iface->close(dev->ctx);
    ssi_ptr_free(&dev->mem);
    ssi_ptr_free(&dev->host);
    ssi_ptr_free(&dev->vres);
    ssi_ptr_free(&dev->vmap);
    pthread_mutex_destroy(&dev->mu);
    free(dev);
    return SS_OK;
}

const ss_device_caps *ss_device_get_caps(const ss_device_t *dev) {
    return dev ? &dev->caps : NULL;
}

ss_status ss_device_get_stats(const ss_device_t *dev, ss_device_stats *out) {
    SS_CHECK_ARG(!dev || !out, "ss_device_get_stats: NULL argument");
    ss_device_t *d = (ss_device_t *)dev;   /* the mutex is not part of the logical state */
    pthread_mutex_lock(&d->mu);
    *out = d->stats;
    pthread_mutex_unlock(&d->mu);
    return SS_OK;
}

ss_status ss_device_mem_info(ss_device_t *dev, uint64_t *free_bytes, uint64_t *total_bytes) {
    SS_CHECK_ARG(!dev || !free_bytes || !total_bytes, "ss_device_mem_info: NULL argument");
    return dev->iface->mem_info(dev->ctx, free_bytes, total_bytes);
}

double ss_device_now(ss_device_t *dev) {
    if (!dev) return 0.0;
    if (dev->iface->now) return dev->iface->now(dev->ctx);
    return ssi_now() - dev->t_open;
}

/* ---------------------------------------------------------------------------------------- */
/* memory                                                                                    */

ss_status ss_mem_alloc(ss_device_t *dev, size_t n, void **out) {
    SS_CHECK_ARG(!dev || !out, "ss_mem_alloc: NULL device or out");
    SS_CHECK_ARG(n == 0, "ss_mem_alloc: zero size");
    void *p = NULL;
    ss_status st = dev->iface->mem_alloc(dev->ctx, n, &p);
    if (st != SS_OK) return st;
    pthread_mutex_lock(&dev->mu);
    st = ssi_ptr_put(&dev->mem, (uintptr_t)p, n);
    if (st == SS_OK) {
        dev->stats.mem_allocs++;
        dev->stats.mem_bytes_in_use += n;
        if (dev->stats.mem_bytes_in_use > dev->stats.mem_bytes_peak)
            dev->stats.mem_bytes_peak = dev->stats.mem_bytes_in_use;
    }
    pthread_mutex_unlock(&dev->mu);
    if (st != SS_OK) {
        dev->iface->mem_free(dev->ctx, p, n);
        return st;
    }
    *out = p;
    return SS_OK;
}

/* Removes p (of size n) from table t under dev->mu. SS_ERR_STATE for a pointer that is not
 * live (foreign or freed twice), SS_ERR_INVALID for a size mismatch (nothing removed). */
static ss_status take_ptr(ss_device_t *dev, ssi_ptr_table *t, void *p, size_t n, const char *what) {
    pthread_mutex_lock(&dev->mu);
    size_t i = ssi_ptr_find(t, (uintptr_t)p);
    if (i == SIZE_MAX) {
        pthread_mutex_unlock(&dev->mu);
        SS_ERROR("%s(%s): %p is not a live block (foreign pointer or double free)", what,
                 dev->caps.name, p);
        return SS_ERR_STATE;
    }
    if (t->vals[i] != n) {
        size_t had = t->vals[i];
        pthread_mutex_unlock(&dev->mu);
        SS_ERROR("%s(%s): %p has %zu bytes, not %zu", what, dev->caps.name, p, had, n);
        return SS_ERR_INVALID;
    }
    ssi_ptr_del_at(t, i);
    pthread_mutex_unlock(&dev->mu);
    return SS_OK;
}

ss_status ss_mem_free(ss_device_t *dev, void *p, size_t n) {
    SS_CHECK_ARG(!dev || !p, "ss_mem_free: NULL device or pointer");
    SS_CHECK_ARG(n == 0, "ss_mem_free: zero size");
    ss_status st = take_ptr(dev, &dev->mem, p, n, "ss_mem_free");
    if (st != SS_OK) return st;
    st = dev->iface->mem_free(dev->ctx, p, n);
    pthread_mutex_lock(&dev->mu);
    dev->stats.mem_frees++;
    dev->stats.mem_bytes_in_use -= n;
    if (st == SS_ERR_CORRUPT) dev->stats.guard_overruns++;
    pthread_mutex_unlock(&dev->mu);
    return st;
}

ss_status ss_host_alloc(ss_device_t *dev, size_t n, void **out) {
    SS_CHECK_ARG(!dev || !out, "ss_host_alloc: NULL device or out");
    SS_CHECK_ARG(n == 0, "ss_host_alloc: zero size");
    void *p = NULL;
    ss_status st = SS_OK;
    if (dev->iface->host_alloc) st = dev->iface->host_alloc(dev->ctx, n, &p);
    else if (!(p = malloc(n))) st = SS_ERR_HOST_OOM;
    if (st != SS_OK) return st;
    pthread_mutex_lock(&dev->mu);
    st = ssi_ptr_put(&dev->host, (uintptr_t)p, n);
    if (st == SS_OK) {
        dev->stats.host_allocs++;
        dev->stats.host_bytes_in_use += n;
    }
    pthread_mutex_unlock(&dev->mu);
    if (st != SS_OK) {
        if (dev->iface->host_free) dev->iface->host_free(dev->ctx, p, n);
        else free(p);
        return st;
    }
    *out = p;
    return SS_OK;
}

ss_status ss_host_free(ss_device_t *dev, void *p, size_t n) {
    SS_CHECK_ARG(!dev || !p, "ss_host_free: NULL device or pointer");
    SS_CHECK_ARG(n == 0, "ss_host_free: zero size");
    ss_status st = take_ptr(dev, &dev->host, p, n, "ss_host_free");
    if (st != SS_OK) return st;
    if (dev->iface->host_free) st = dev->iface->host_free(dev->ctx, p, n);
    else free(p);
    pthread_mutex_lock(&dev->mu);
    dev->stats.host_frees++;
    dev->stats.host_bytes_in_use -= n;
    pthread_mutex_unlock(&dev->mu);
    return st;
}

/* ---- virtual memory ------------------------------------------------------------------------ */

/* SS_OK when the device has the vm slots and n > 0 and p (may be NULL) are multiples of the
 * granularity. */
static ss_status vm_args(ss_device_t *dev, const void *p, size_t n, const char *fn) {
    SS_CHECK_ARG(!dev, "%s: NULL device", fn);
    if (!dev->iface->vm_map || !dev->caps.vm_granularity) return SS_ERR_UNSUPPORTED;
    uint64_t g = dev->caps.vm_granularity;
    SS_CHECK_ARG(n == 0 || n % g != 0 || (uintptr_t)p % g != 0,
                 "%s(%s): %p +%zu is not aligned to the granularity %llu", fn, dev->caps.name, p,
                 n, (unsigned long long)g);
    return SS_OK;
}

/* Is [p, p+n) inside one live reservation? (caller holds dev->mu) */
static int in_reservation(const ss_device_t *dev, const void *p, size_t n) {
    uintptr_t u = (uintptr_t)p;
    for (size_t i = 0; i < dev->vres.cap; i++) {
        uintptr_t k = dev->vres.keys[i];
        if (k && u >= k && n <= dev->vres.vals[i] && u - k <= dev->vres.vals[i] - n) return 1;
    }
    return 0;
}

ss_status ss_vm_reserve(ss_device_t *dev, size_t n, void **va) {
    ss_status st = vm_args(dev, NULL, n, "ss_vm_reserve");
    if (st != SS_OK) return st;
    SS_CHECK_ARG(!va, "ss_vm_reserve: NULL out");
    void *p = NULL;
    if ((st = dev->iface->vm_reserve(dev->ctx, n, &p)) != SS_OK) return st;
    pthread_mutex_lock(&dev->mu);
    st = ssi_ptr_put(&dev->vres, (uintptr_t)p, n);
    if (st == SS_OK) dev->stats.vm_reserved_bytes += n;
    pthread_mutex_unlock(&dev->mu);
    if (st != SS_OK) { dev->iface->vm_release(dev->ctx, p, n); return st; }
    *va = p;
    return SS_OK;
}

ss_status ss_vm_release(ss_device_t *dev, void *va, size_t n) {
    ss_status st = vm_args(dev, va, n, "ss_vm_release");
    if (st != SS_OK) return st;
    pthread_mutex_lock(&dev->mu);
    for (size_t i = 0; i < dev->vmap.cap; i++) {
        uintptr_t k = dev->vmap.keys[i];
        if (k && k >= (uintptr_t)va && k - (uintptr_t)va < n) {
            pthread_mutex_unlock(&dev->mu);
            SS_ERROR("ss_vm_release(%s): %p +%zu still has mapped ranges", dev->caps.name, va, n);
            return SS_ERR_STATE;
        }
    }
    pthread_mutex_unlock(&dev->mu);
    if ((st = take_ptr(dev, &dev->vres, va, n, "ss_vm_release")) != SS_OK) return st;
    st = dev->iface->vm_release(dev->ctx, va, n);
    pthread_mutex_lock(&dev->mu);
    dev->stats.vm_reserved_bytes -= n;
    pthread_mutex_unlock(&dev->mu);
    return st;
}

ss_status ss_vm_map(ss_device_t *dev, void *va, size_t n) {
    ss_status st = vm_args(dev, va, n, "ss_vm_map");
    if (st != SS_OK) return st;
    pthread_mutex_lock(&dev->mu);
    int ok = in_reservation(dev, va, n) && ssi_ptr_find(&dev->vmap, (uintptr_t)va) == SIZE_MAX;
    pthread_mutex_unlock(&dev->mu);
    if (!ok) {
        SS_ERROR("ss_vm_map(%s): %p +%zu is not an unmapped range of a reservation",
                 dev->caps.name, va, n);
        return SS_ERR_STATE;
    }
    if ((st = dev->iface->vm_map(dev->ctx, va, n)) != SS_OK) return st;
    pthread_mutex_lock(&dev->mu);
    st = ssi_ptr_put(&dev->vmap, (uintptr_t)va, n);
    if (st == SS_OK) {
        dev->stats.vm_maps++;
        dev->stats.vm_mapped_bytes += n;
        dev->stats.mem_bytes_in_use += n;
        if (dev->stats.mem_bytes_in_use > dev->stats.mem_bytes_peak)
            dev->stats.mem_bytes_peak = dev->stats.mem_bytes_in_use;
    }
    pthread_mutex_unlock(&dev->mu);
    if (st != SS_OK) { dev->iface->vm_unmap(dev->ctx, va, n); return st; }
    return SS_OK;
}

ss_status ss_vm_unmap(ss_device_t *dev, void *va, size_t n) {
    ss_status st = vm_args(dev, va, n, "ss_vm_unmap");
    if (st != SS_OK) return st;
    pthread_mutex_lock(&dev->mu);
    size_t i = ssi_ptr_find(&dev->vmap, (uintptr_t)va);
    int ok = i != SIZE_MAX && dev->vmap.vals[i] == n;
    pthread_mutex_unlock(&dev->mu);
    if (!ok) {
        SS_ERROR("ss_vm_unmap(%s): %p +%zu is not a live mapping", dev->caps.name, va, n);
        return SS_ERR_INVALID;
    }
    st = dev->iface->vm_unmap(dev->ctx, va, n);
    pthread_mutex_lock(&dev->mu);
    if (st == SS_OK) {
        i = ssi_ptr_find(&dev->vmap, (uintptr_t)va);
        if (i != SIZE_MAX) ssi_ptr_del_at(&dev->vmap, i);
        dev->stats.vm_unmaps++;
        dev->stats.vm_mapped_bytes -= n;
        dev->stats.mem_bytes_in_use -= n;
    } else if (st == SS_ERR_STATE) {
        dev->stats.vm_busy++;
    }
    pthread_mutex_unlock(&dev->mu);
    return st;
}

ss_status ss_mem_poison(ss_device_t *dev, void *p, size_t n) {
    SS_CHECK_ARG(!dev || !p || n == 0, "ss_mem_poison: NULL argument or zero size");
    if (!dev->iface->mem_poison) return SS_ERR_UNSUPPORTED;
    return dev->iface->mem_poison(dev->ctx, p, n);
}

ss_status ss_mem_check_poison(ss_device_t *dev, const void *p, size_t n, size_t *found) {
    SS_CHECK_ARG(!dev || !p || !found || n == 0, "ss_mem_check_poison: NULL argument or zero size");
    if (!dev->iface->mem_check_poison) return SS_ERR_UNSUPPORTED;
    return dev->iface->mem_check_poison(dev->ctx, p, n, found);
}

ss_status ss_poison_scan(ss_device_t *dev, const void *p, size_t n, size_t *words) {
    SS_CHECK_ARG(!p || n == 0, "ss_poison_scan: NULL pointer or zero size");
    const unsigned char *b = p;
    size_t hits = 0, first = SIZE_MAX;
    size_t skip = (size_t)((4 - ((uintptr_t)b & 3)) & 3);
    for (size_t i = skip; i + 4 <= n; i += 4) {
        uint32_t w;
        memcpy(&w, b + i, 4);
        if (w == SS_POISON_WORD) {
            if (first == SIZE_MAX) first = i;
            hits++;
        }
    }
    if (words) *words = hits;
    if (!hits) return SS_OK;
    if (dev) {
        pthread_mutex_lock(&dev->mu);
        dev->stats.poison_hits++;
        pthread_mutex_unlock(&dev->mu);
    }
    SS_WARN("poison read: %zu poison words in %zu bytes at %p (first at byte %zu): memory read "
            "after it was freed or swapped out, or before it was written", hits, n, p, first);
    return SS_ERR_CORRUPT;
}

/* ---------------------------------------------------------------------------------------- */
/* streams                                                                                   */

#define CHECK_STREAM(dev, s, fn) \
    SS_CHECK_ARG(!(dev) || !(s) || (s)->dev != (dev), fn ": NULL device or stream, or a stream of another device")
#define CHECK_EVENT(dev, e, fn) \
    SS_CHECK_ARG(!(dev) || !(e) || (e)->dev != (dev), fn ": NULL device or event, or an event of another device")

/* Wraps backend handle h into a new ss_stream_t; frees h (through stream_free) on failure. */
static ss_status stream_box(ss_device_t *dev, void *h, ss_stream_t **out) {
    ss_stream_t *s = malloc(sizeof *s);
    if (!s) {
        dev->iface->stream_free(dev->ctx, h);
        return SS_ERR_HOST_OOM;
    }
    s->dev = dev;
    s->h = h;
    pthread_mutex_lock(&dev->mu);
    dev->live_streams++;
    pthread_mutex_unlock(&dev->mu);
    *out = s;
    return SS_OK;
}

ss_status ss_stream_new(ss_device_t *dev, ss_stream_t **out) {
    SS_CHECK_ARG(!dev || !out, "ss_stream_new: NULL device or out");
    void *h = NULL;
    ss_status st = dev->iface->stream_new(dev->ctx, &h);
    if (st != SS_OK) return st;
    return stream_box(dev, h, out);
}

ss_status ss_stream_wrap(ss_device_t *dev, void *handle, ss_stream_t **out) {
    SS_CHECK_ARG(!dev || !out, "ss_stream_wrap: NULL device or out");
    if (!dev->iface->stream_wrap) return SS_ERR_UNSUPPORTED;
    void *h = NULL;
    ss_status st = dev->iface->stream_wrap(dev->ctx, handle, &h);
    if (st != SS_OK) return st;
    return stream_box(dev, h, out);
}

ss_status ss_stream_free(ss_device_t *dev, ss_stream_t *s) {
    CHECK_STREAM(dev, s, "ss_stream_free");
    ss_status st = dev->iface->stream_free(dev->ctx, s->h);
    pthread_mutex_lock(&dev->mu);
    dev->live_streams--;
    pthread_mutex_unlock(&dev->mu);
    s->dev = NULL;
    free(s);
    return st;
}

ss_status ss_stream_sync(ss_device_t *dev, ss_stream_t *s) {
    CHECK_STREAM(dev, s, "ss_stream_sync");
    return dev->iface->stream_sync(dev->ctx, s->h);
}

ss_status ss_copy_async(ss_device_t *dev, ss_stream_t *s, void *dst, const void *src, size_t n,
                        ss_copy_kind kind) {
    CHECK_STREAM(dev, s, "ss_copy_async");
    SS_CHECK_ARG(!dst || !src, "ss_copy_async: NULL dst or src");
    SS_CHECK_ARG(n == 0, "ss_copy_async: zero size");
    SS_CHECK_ARG((int)kind < 0 || kind >= SS_COPY_KIND_COUNT, "ss_copy_async: bad kind %d", (int)kind);
    ss_status st = dev->iface->copy_async(dev->ctx, s->h, dst, src, n, kind);
    if (st == SS_OK) {
        pthread_mutex_lock(&dev->mu);
        dev->stats.copies[kind]++;
        dev->stats.copy_bytes[kind] += n;
        pthread_mutex_unlock(&dev->mu);
    }
    return st;
}

ss_status ss_compute_async(ss_device_t *dev, ss_stream_t *s, double seconds) {
    CHECK_STREAM(dev, s, "ss_compute_async");
    SS_CHECK_ARG(!(seconds >= 0) || seconds > 1e6, "ss_compute_async: bad duration %g", seconds);
    if (!dev->iface->compute_async) return SS_ERR_UNSUPPORTED;
    return dev->iface->compute_async(dev->ctx, s->h, seconds);
}

/* ---------------------------------------------------------------------------------------- */
/* events                                                                                    */

ss_status ss_event_new(ss_device_t *dev, ss_event_t **out) {
    SS_CHECK_ARG(!dev || !out, "ss_event_new: NULL device or out");
    void *h = NULL;
    ss_status st = dev->iface->event_new(dev->ctx, &h);
    if (st != SS_OK) return st;
    ss_event_t *e = calloc(1, sizeof *e);
    if (!e) {
        dev->iface->event_free(dev->ctx, h);
        return SS_ERR_HOST_OOM;
    }
    e->dev = dev;
    e->h = h;
    pthread_mutex_lock(&dev->mu);
    dev->live_events++;
    pthread_mutex_unlock(&dev->mu);
    *out = e;
    return SS_OK;
}

ss_status ss_event_free(ss_device_t *dev, ss_event_t *e) {
    CHECK_EVENT(dev, e, "ss_event_free");
    ss_status st = dev->iface->event_free(dev->ctx, e->h);
    pthread_mutex_lock(&dev->mu);
    dev->live_events--;
    pthread_mutex_unlock(&dev->mu);
    e->dev = NULL;
    free(e);
    return st;
}

ss_status ss_event_record(ss_device_t *dev, ss_event_t *e, ss_stream_t *s) {
    CHECK_EVENT(dev, e, "ss_event_record");
    CHECK_STREAM(dev, s, "ss_event_record");
    ss_status st = dev->iface->event_record(dev->ctx, e->h, s->h);
    if (st == SS_OK) {
        pthread_mutex_lock(&dev->mu);
        dev->stats.event_records++;
        e->seen = 0;
        pthread_mutex_unlock(&dev->mu);
    }
    return st;
}

ss_status ss_event_wait(ss_device_t *dev, ss_stream_t *s, ss_event_t *e) {
    CHECK_EVENT(dev, e, "ss_event_wait");
    CHECK_STREAM(dev, s, "ss_event_wait");
    ss_status st = dev->iface->event_wait(dev->ctx, s->h, e->h);
    if (st == SS_OK) {
        pthread_mutex_lock(&dev->mu);
        dev->stats.event_waits++;
        pthread_mutex_unlock(&dev->mu);
    }
    return st;
}

/* Notes that e was seen complete (for the default event_time). Caller holds no lock. */
static void mark_seen(ss_device_t *dev, ss_event_t *e) {
    double t = ss_device_now(dev);
    pthread_mutex_lock(&dev->mu);
    if (!e->seen) { e->seen = 1; e->seen_time = t; }
    pthread_mutex_unlock(&dev->mu);
}

ss_status ss_event_query(ss_device_t *dev, ss_event_t *e, int *done) {
    CHECK_EVENT(dev, e, "ss_event_query");
    SS_CHECK_ARG(!done, "ss_event_query: NULL done");
    int d = 0;
    pthread_mutex_lock(&dev->mu);
    dev->stats.event_queries++;
    pthread_mutex_unlock(&dev->mu);
    ss_status st = dev->iface->event_query(dev->ctx, e->h, &d);
    if (st != SS_OK) return st;
    if (d && !dev->iface->event_time) mark_seen(dev, e);
    *done = d;
    return SS_OK;
}

ss_status ss_event_sync(ss_device_t *dev, ss_event_t *e) {
    CHECK_EVENT(dev, e, "ss_event_sync");
    pthread_mutex_lock(&dev->mu);
    dev->stats.event_syncs++;
    pthread_mutex_unlock(&dev->mu);
    ss_status st = dev->iface->event_sync(dev->ctx, e->h);
    if (st == SS_OK && !dev->iface->event_time) mark_seen(dev, e);
    return st;
}

ss_status ss_event_time(ss_device_t *dev, ss_event_t *e, double *seconds) {
    CHECK_EVENT(dev, e, "ss_event_time");
    SS_CHECK_ARG(!seconds, "ss_event_time: NULL out");
    if (dev->iface->event_time) return dev->iface->event_time(dev->ctx, e->h, seconds);
    pthread_mutex_lock(&dev->mu);
    int seen = e->seen;
    double t = e->seen_time;
    pthread_mutex_unlock(&dev->mu);
    if (!seen) {
        int d = 0;
        ss_status st = dev->iface->event_query(dev->ctx, e->h, &d);
        if (st != SS_OK) return st;
        if (!d) return SS_ERR_STATE;
        mark_seen(dev, e);
        pthread_mutex_lock(&dev->mu);
        t = e->seen_time;
        pthread_mutex_unlock(&dev->mu);
    }
    *seconds = t;
    return SS_OK;
}

ss_status ss_event_elapsed(ss_device_t *dev, ss_event_t *a, ss_event_t *b, double *seconds) {
    CHECK_EVENT(dev, a, "ss_event_elapsed");
    CHECK_EVENT(dev, b, "ss_event_elapsed");
    SS_CHECK_ARG(!seconds, "ss_event_elapsed: NULL out");
    if (dev->iface->event_elapsed) return dev->iface->event_elapsed(dev->ctx, a->h, b->h, seconds);
    double ta, tb;
    ss_status st = ss_event_time(dev, a, &ta);
    if (st == SS_OK) st = ss_event_time(dev, b, &tb);
    if (st != SS_OK) return st;
    *seconds = tb - ta;
    return SS_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* calibration (docs/performance-model.md)                                                   */

ss_calib_ref ss_calib_default(void) {
    /* Llama-2-7B: h = 4096, h_kv = 4096 (MHA), i = 11008, 32 layers, P = 6.738e9 parameters,
     * sequence length 4096. Saved activations per token per layer in bf16 with flash attention:
     * 12h + 4h_kv + 8i bytes = 153600 B; x 32 layers = 4915200 B.
     * FLOPs per token: 6P + 12 * layers * h * seq (attention scores and values, forward and
     * backward) = 4.0431e10 + 6.4425e9 = 4.6873e10.
     * H200 dense bf16 peak 989 TFLOP/s at 60 % = 593.4 TFLOP/s; link 55 GB/s each way. */
    const double h = 4096, hkv = 4096, inter = 11008, layers = 32, seq = 4096;
    const double params = 6738415616.0;
    ss_calib_ref r;
    r.name = "llama-2-7b bf16 on h200 at 60% of peak over 55 GB/s";
    r.saved_bytes_per_token = (12 * h + 4 * hkv + 8 * inter) * layers;
    r.flops_per_token = 6 * params + 12 * layers * h * seq;
    r.device_flops = 989e12 * 0.60;
    r.link_gbps = 55.0;
    return r;
}

/* The reference copy:compute ratio; 0 if the reference is unusable. */
static double calib_ratio(const ss_calib_ref *r) {
    if (!(r->saved_bytes_per_token > 0) || !(r->flops_per_token > 0) || !(r->device_flops > 0) ||
        !(r->link_gbps > 0))
        return 0;
    double copy = r->saved_bytes_per_token / (r->link_gbps * 1e9);
    double compute = r->flops_per_token / r->device_flops;
    return copy / compute;
}

ss_status ss_calib_bandwidth(const ss_calib_ref *ref, double saved_bytes, double compute_seconds,
                             double scale, double *gbps) {
    SS_CHECK_ARG(!gbps, "ss_calib_bandwidth: NULL out");
    ss_calib_ref def = ss_calib_default();
    if (!ref) ref = &def;
    double ratio = calib_ratio(ref);
    SS_CHECK_ARG(!(ratio > 0) || !isfinite(ratio), "ss_calib_bandwidth: reference '%s' has a "
                 "non-positive field", ref->name ? ref->name : "?");
    SS_CHECK_ARG(!(saved_bytes > 0) || !isfinite(saved_bytes), "ss_calib_bandwidth: saved bytes %g", saved_bytes);
    SS_CHECK_ARG(!(compute_seconds > 0) || !isfinite(compute_seconds),
                 "ss_calib_bandwidth: compute seconds %g", compute_seconds);
    SS_CHECK_ARG(!(scale > 0) || !isfinite(scale), "ss_calib_bandwidth: scale %g", scale);
    /* (saved_bytes / (g * 1e9)) / compute_seconds = ratio * scale */
    double g = saved_bytes / (ratio * scale * compute_seconds) / 1e9;
    SS_CHECK_ARG(!isfinite(g) || !(g > 0), "ss_calib_bandwidth: result out of range");
    SS_INFO("calibration: %s has copy:compute %.4f; x%.3g -> %.4g GB/s for %.4g bytes per %.4g s "
            "of compute", ref->name ? ref->name : "reference", ratio, scale, g, saved_bytes,
            compute_seconds);
    *gbps = g;
    return SS_OK;
}
