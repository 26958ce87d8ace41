/* hostpool.c: pinned host buffers by size class, kept for reuse, under a cap (DESIGN.md part
 * "hostpool"; docs/allocator.md, "Host pool").
 *
 * A request of n bytes is served from its size class: n rounded up to 4 KiB, then to a quarter
 * of its power of two (4 classes per doubling: at most 25 % slack, above 4 KiB). Each class keeps
 * a stack of cached buffers; a hash table maps every buffer the pool owns (out or cached) to its
 * class, so that a foreign or doubly returned pointer is refused with SS_ERR_STATE. A buffer is
 * allocated from the device (ss_host_alloc) only when its class has none cached: after warm-up
 * a steady workload allocates nothing. When the cap would be passed, cached buffers of other
 * classes are returned to the device first; if that is not enough: SS_ERR_HOST_OOM and a log
 * line naming the cap and the option that raises it.
 */
#include "internal.h"
#include "smartswap-alloc.h"

#include <inttypes.h>
#include <pthread.h>

#define HP_MIN      4096ull
#define HP_CLASSES  (64 * 4)

typedef struct hp_entry { void *p; uint32_t cls; uint8_t out; } hp_entry;

typedef struct hp_class {
    void  **free;          /* cached buffers */
    size_t  n, cap;
    size_t  total;         /* buffers of this class alive (cached + out): cap >= total */
} hp_class;

struct ss_hostpool {
    pthread_mutex_t mu;
    ss_device_t *dev;
    uint64_t cap_bytes;
    hp_class cls[HP_CLASSES];
    hp_entry *tab;         /* open addressing, linear probing, power-of-two size */
    size_t   tab_cap, tab_n;
    ss_hostpool_stats st;
};

/* Class index and size of a request: n <= 4 KiB is class 0; above, for 2^p < n <= 2^(p+1),
 * the size is 2^p + q * 2^p/4 (q = 1..4) and the index 4 * (p - 11) + q - 1. */
static uint32_t class_index(uint64_t n, uint64_t *size) {
    if (n <= HP_MIN) { *size = HP_MIN; return 0; }
    unsigned p = 63u - (unsigned)__builtin_clzll(n - 1);   /* 2^p < n <= 2^(p+1), p >= 12 */
    uint64_t step = 1ull << (p - 2);                          /* 2^p / 4 */
    uint64_t q = (n - (1ull << p) + step - 1) / step;         /* 1..4 */
    *size = (1ull << p) + q * step;
    return (uint32_t)(4 * (p - 11) + (q - 1));                /* p = 12 -> 0..3; 0 is 4 KiB */
}

static size_t hp_hash(const void *p, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static hp_entry *tab_find(ss_hostpool_t *hp, const void *p) {
    if (!hp->tab_cap) return NULL;
    for (size_t i = hp_hash(p, hp->tab_cap);; i = (i + 1) & (hp->tab_cap - 1)) {
        if (!hp->tab[i].p) return NULL;
        if (hp->tab[i].p == p) return &hp->tab[i];
    }
}

static ss_status tab_put(ss_hostpool_t *hp, void *p, uint32_t cls) {
    if ((hp->tab_n + 1) * 2 > hp->tab_cap) {
        size_t ncap = hp->tab_cap ? hp->tab_cap * 2 : 64;
        hp_entry *nt = calloc(ncap, sizeof *nt);
        if (!nt) return SS_ERR_HOST_OOM;
        for (size_t i = 0; i < hp->tab_cap; i++)
            if (hp->tab[i].p) {
                size_t j = hp_hash(hp->tab[i].p, ncap);
                while (nt[j].p) j = (j + 1) & (ncap - 1);
                nt[j] = hp->tab[i];
            }
        free(hp->tab);
        hp->tab = nt;
        hp->tab_cap = ncap;
    }
    size_t i = hp_hash(p, hp->tab_cap);
    while (hp->tab[i].p) i = (i + 1) & (hp->tab_cap - 1);
    hp->tab[i].p = p; hp->tab[i].cls = cls; hp->tab[i].out = 0;
    hp->tab_n++;
    return SS_OK;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
static void tab_del(ss_hostpool_t *hp, hp_entry *e) {
    size_t m = hp->tab_cap - 1, i = (size_t)(e - hp->tab);
    hp->tab[i].p = NULL;
    for (size_t j = (i + 1) & m; hp->tab[j].p; j = (j + 1) & m) {
        size_t h = hp_hash(hp->tab[j].p, hp->tab_cap);
        /* move j to i if its home h is not in (i, j] cyclically */
        if ((j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j))) {
            hp->tab[i] = hp->tab[j];
            hp->tab[j].p = NULL;
            i = j;
        }
    }
    hp->tab_n--;
}

static uint64_t class_size(uint32_t c) {
    if (c == 0) return HP_MIN;
    unsigned p = c / 4 + 11;
    uint64_t q = c % 4 + 1;
    return (1ull << p) + q * (1ull << (p - 2));
}

uint64_t ss_hostpool_class_bytes(uint64_t n) {
    uint64_t sz;
    (void)class_index(n, &sz);
    return sz;
}

ss_status ss_hostpool_new(ss_device_t *dev, uint64_t cap_bytes, ss_hostpool_t **out) {
    SS_CHECK_ARG(!dev || !out, "ss_hostpool_new: NULL %s", !dev ? "device" : "out");
    ss_hostpool_t *hp = calloc(1, sizeof *hp);
    if (!hp) return SS_ERR_HOST_OOM;
    if (pthread_mutex_init(&hp->mu, NULL) != 0) { free(hp); return SS_ERR_HOST_OOM; }
    hp->dev = dev;
    hp->cap_bytes = cap_bytes;
    hp->st.cap_bytes = cap_bytes;
    *out = hp;
    return SS_OK;
}

/* Returns one cached buffer of class c to the device. */
static ss_status release_one(ss_hostpool_t *hp, uint32_t c) {
    hp_class *k = &hp->cls[c];
    void *p = k->free[k->n - 1];
    uint64_t sz = class_size(c);
    ss_status st = ss_host_free(hp->dev, p, (size_t)sz);
    if (st != SS_OK) return st;
    k->n--;
    k->total--;
    tab_del(hp, tab_find(hp, p));
    hp->st.reserved_bytes -= sz;
    hp->st.host_frees++;
    return SS_OK;
}

ss_status ss_hostpool_get(ss_hostpool_t *hp, size_t n, void **out) {
    SS_CHECK_ARG(!hp || !out, "ss_hostpool_get: NULL %s", !hp ? "pool" : "out");
    SS_CHECK_ARG(n == 0, "ss_hostpool_get: zero size");
    SS_CHECK_ARG((uint64_t)n > (1ull << 60), "ss_hostpool_get: size %zu too large", n);
    uint64_t sz;
    uint32_t c = class_index((uint64_t)n, &sz);
    pthread_mutex_lock(&hp->mu);
    ss_status st = SS_OK;
    hp_class *k = &hp->cls[c];
    void *p = NULL;
    if (k->n) {
        p = k->free[--k->n];
        hp->st.reuse_hits++;
    } else {
        /* make room under the cap from other classes' cached buffers */
        for (uint32_t o = 0; hp->cap_bytes && hp->st.reserved_bytes + sz > hp->cap_bytes && o < HP_CLASSES; o++)
            while (hp->cls[o].n && hp->st.reserved_bytes + sz > hp->cap_bytes)
                if (release_one(hp, o) != SS_OK) break;
        if (hp->cap_bytes && hp->st.reserved_bytes + sz > hp->cap_bytes) {
            char b1[32], b2[32], b3[32], b4[32];
            hp->st.cap_errors++;
            SS_ERROR("pinned host pool full: a %s buffer would pass the cap of %s (%s reserved, %s in "
                     "use); raise host-mem (SMARTSWAP_HOST_MEM) or swap less",
                     ss_format_size(sz, b1, sizeof b1), ss_format_size(hp->cap_bytes, b2, sizeof b2),
                     ss_format_size(hp->st.reserved_bytes, b3, sizeof b3),
                     ss_format_size(hp->st.in_use_bytes, b4, sizeof b4));
            st = SS_ERR_HOST_OOM;
            goto out;
        }
        /* room for the bookkeeping first, so that a failure after ss_host_alloc cannot leak */
        st = ssi_grow(&k->free, &k->cap, k->total + 1, sizeof *k->free);
        if (st != SS_OK) goto out;
        st = ss_host_alloc(hp->dev, (size_t)sz, &p);
        if (st != SS_OK) {
            /* the host refused: give back everything cached and try once more */
            for (uint32_t o = 0; o < HP_CLASSES; o++)
                while (hp->cls[o].n) if (release_one(hp, o) != SS_OK) break;
            st = ss_host_alloc(hp->dev, (size_t)sz, &p);
        }
        if (st != SS_OK) {
            char b1[32];
            SS_ERROR("pinned host pool: the device refused a %s pinned buffer: %s",
                     ss_format_size(sz, b1, sizeof b1), ss_status_str(st));
            if (st == SS_ERR_OOM) st = SS_ERR_HOST_OOM;
            goto out;
        }
        st = tab_put(hp, p, c);
        if (st != SS_OK) { ss_host_free(hp->dev, p, (size_t)sz); goto out; }
        hp->st.host_allocs++;
        hp->st.reserved_bytes += sz;
        k->total++;
    }
    tab_find(hp, p)->out = 1;
    hp->st.gets++;
    hp->st.in_use_bytes += sz;
    if (hp->st.in_use_bytes > hp->st.peak_in_use_bytes) hp->st.peak_in_use_bytes = hp->st.in_use_bytes;
    *out = p;
out:
    pthread_mutex_unlock(&hp->mu);
    return st;
}

ss_status ss_hostpool_put(ss_hostpool_t *hp, void *buf) {
    SS_CHECK_ARG(!hp || !buf, "ss_hostpool_put: NULL %s", !hp ? "pool" : "buffer");
    pthread_mutex_lock(&hp->mu);
    ss_status st = SS_OK;
    hp_entry *e = tab_find(hp, buf);
    if (!e || !e->out) {
        SS_ERROR("ss_hostpool_put: %p is %s", buf, e ? "already returned" : "not a buffer of this pool");
        st = SS_ERR_STATE;
    } else {
        hp_class *k = &hp->cls[e->cls];
        /* k->cap >= k->total > k->n: get grew the stack before allocating the buffer */
        e->out = 0;
        k->free[k->n++] = buf;
        hp->st.puts++;
        hp->st.in_use_bytes -= class_size(e->cls);
    }
    pthread_mutex_unlock(&hp->mu);
    return st;
}

ss_status ss_hostpool_get_stats(const ss_hostpool_t *hp, ss_hostpool_stats *out) {
    SS_CHECK_ARG(!hp || !out, "ss_hostpool_get_stats: NULL argument");
    pthread_mutex_lock((pthread_mutex_t *)&hp->mu);
    *out = hp->st;
    pthread_mutex_unlock((pthread_mutex_t *)&hp->mu);
    return SS_OK;
}

ss_status ss_hostpool_destroy(ss_hostpool_t *hp) {
    SS_CHECK_ARG(!hp, "ss_hostpool_destroy: pool is NULL");
    pthread_mutex_lock(&hp->mu);
    if (hp->st.in_use_bytes) {
        char b1[32];
        SS_ERROR("ss_hostpool_destroy: %s of pinned buffers still out; nothing freed",
                 ss_format_size(hp->st.in_use_bytes, b1, sizeof b1));
        pthread_mutex_unlock(&hp->mu);
        return SS_ERR_STATE;
    }
    ss_status first = SS_OK;
    for (uint32_t c = 0; c < HP_CLASSES; c++) {
        while (hp->cls[c].n) {
            ss_status st = release_one(hp, c);
            if (st != SS_OK) {   /* keep going: drop it from the books, report the first error */
                if (first == SS_OK) first = st;
                hp->cls[c].n--;
            }
        }
        free(hp->cls[c].free);
    }
    free(hp->tab);
    pthread_mutex_unlock(&hp->mu);
    pthread_mutex_destroy(&hp->mu);
    free(hp);
    return first;
}
