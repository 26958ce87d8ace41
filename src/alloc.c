/* alloc.c: the caching device allocator (DESIGN.md part "alloc"); docs/allocator.md explains it.
 *
 * Segments are reserved from the device (ss_mem_alloc) and carved into blocks: best fit over the
 * cached free blocks (a treap ordered by (size, address): O(log n) per operation), split on
 * hand-out, coalesced with free neighbours on release. Every segment gets a range of a virtual
 * address space (a counter that only grows); a block's offset is its segment's base plus its
 * place in the segment. Measure mode (no device) runs exactly the same code with no device
 * pointers behind the ranges, so it predicts the real allocator's offsets and peaks.
 *
 * A block freed while a copy may still read it is "pending": with ss_alloc_free_at it waits in a
 * min-heap keyed by operator index until ss_alloc_reach; with ss_alloc_free_stock it waits in a
 * FIFO that every allocation polls (the torch record_stream emulation). Pending blocks are never
 * handed out and count as in use.
 *
 * Block handles: each hand-out gets a fresh struct from the allocator's own slabs; structs of
 * coalesced or re-carved blocks are recycled only after a quarantine of SS_QUARANTINE others, so
 * a stale handle (double free, free after the allocator reused the memory) still finds a struct
 * that says "not live" instead of someone else's block. Foreign pointers are recognised by not
 * lying inside any slab, without being dereferenced.
 */
#include "internal.h"
#include "smartswap-alloc.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>

#define SS_BLOCK_MAGIC 0x53534231u   /* "SSB1" */
#define SS_QUARANTINE  1024          /* dead block structs kept before one is reused */
#define SS_DEFAULT_SEGMENT (2ull << 20)

enum { B_DEAD = 0, B_FREE, B_LIVE, B_DEFERRED, B_STOCK };

typedef struct seg seg;

struct ss_block {
    uint32_t magic;
    uint8_t  state;               /* B_* */
    uint8_t  has_stamp;           /* FREE: holds memory released with a pending use, not yet
                                     handed out since; stamp = completion of that use */
    uint8_t  lifetime;            /* LIVE: the ss_lifetime it was requested with */
    uint64_t req;                 /* LIVE: the bytes requested (size is rounded up) */
    seg     *sg;
    uint64_t off;                 /* offset within the segment */
    uint64_t size;
    struct ss_block *prev, *next; /* address neighbours within the segment */
    struct ss_block *left, *right;/* free treap */
    uint64_t prio;
    /* pending release */
    uint64_t k, seq;
    ss_event_t *ev;
    double   t_done;
    double   stamp;
    struct ss_block *qnext;       /* stock FIFO, or the dead-struct queue */
};

struct seg {
    uint64_t va, size;
    void    *dptr;                /* NULL in measure mode */
    struct ss_block *first;
    seg     *prev, *next;
    /* virtual-memory mode: the segment is an address reservation of size / G granules */
    int      pool;                /* POOL_* (0 in segment mode) */
    uint32_t *gref;               /* per granule: live or pending blocks touching it */
    uint8_t  *gmap;               /* per granule: mapped */
    uint32_t *gcls;               /* small pool, per granule: its size class (slots per granule,
                                     small_class) while a live or pending block touches it; 0: empty */
};

/* Pools (virtual-memory mode): small requests share granules; large ones start at a granule
 * boundary, activations apart from persistent tensors. Segment mode uses pool 0 only. */
enum { POOL_SMALL = 0, POOL_ITER, POOL_PERSIST, NPOOL };

typedef struct slab {
    struct slab *next;
    size_t n, used;
    struct ss_block b[];
} slab;

struct ss_alloc {
    pthread_mutex_t mu;
    uint64_t win_peak;            /* most bytes in use since the last ss_alloc_window_peak */
    uint64_t win_reserved;        /* most bytes reserved since the last ss_alloc_window_reserved */
    ss_device_t *dev;             /* NULL: measure mode */
    ss_alloc_config cfg;
    uint64_t budget;
    double   now;                 /* measure mode's clock */
    uint64_t next_va;
    seg     *segs, *segs_tail;
    uint64_t nsegs;
    seg     *parked;              /* fully free segments set aside by ss_alloc_park (still the
                                     device's memory, in `reserved`), singly linked by next */
    uint64_t nparked, parked_bytes;
    struct ss_block *roots[NPOOL];/* free treaps, one per pool (the small pool's: sroots) */
    struct ss_block **sroots;     /* small pool: one free treap per size class, [0]: empty granules */
    uint64_t nfree;
    ssi_rng  rng;
    /* block structs */
    slab    *slabs;
    struct ss_block *dead_head, *dead_tail;
    uint64_t ndead;
    /* pending */
    struct ss_block **heap;       /* deferred: min-heap on (k, seq) */
    size_t   heap_n, heap_cap;
    uint64_t seq;
    struct ss_block *stock_head, *stock_tail;
    uint64_t nstock;
    /* byte counters */
    uint64_t live_bytes, pending_bytes, free_bytes, reserved;
    uint64_t nlive;
    ss_evict_fn evict;
    void    *evict_user;
    ss_alloc_stats st;
    /* virtual-memory mode (docs/allocator.md "Virtual-memory segments") */
    int      vm;
    uint64_t G, nb;               /* granule bytes; the budget in granules */
    uint64_t mapped, cached_g;    /* granules mapped; of them, touched by no live/pending block */
    uint64_t nsmall_g;            /* granules of the small and persistent pools touched by a
                                     live/pending block (packed pools) */
    uint64_t large_g;             /* sum over live/pending iteration-pool large blocks of
                                     ceil(size / G) */
    int      guard;               /* per-block guards (virtual-memory mode on a device that
                                     poisons, e.g. cpu-sim): the bytes after each request up to
                                     the end of its block (small pool) or of its last granule
                                     (large) hold the poison pattern, checked at release */
    char     oom_msg[320];        /* the last out-of-memory's explanation */
};

/* ---- small helpers ----------------------------------------------------------------------- */

static uint64_t round_up(uint64_t n, uint64_t m) { return (n + m - 1) / m * m; }
static uint64_t bva(const struct ss_block *b) { return b->sg->va + b->off; }
static int is_measure(const ss_alloc_t *a) { return a->dev == NULL; }
/* The class of the small-pool granule holding offset off of s (0: empty). */
static uint32_t gcls_at(const ss_alloc_t *a, const seg *s, uint64_t off) { return s->gcls[off / a->G]; }
static struct ss_block **rootp(ss_alloc_t *a, const struct ss_block *b) {
    if (a->vm && b->sg->pool == POOL_SMALL) return &a->sroots[gcls_at(a, b->sg, b->off)];
    return &a->roots[b->sg->pool];
}
static double clock_now(ss_alloc_t *a) { return a->dev ? ss_device_now(a->dev) : a->now; }

static void lock(const ss_alloc_t *a) { pthread_mutex_lock((pthread_mutex_t *)&a->mu); }
static void unlock(const ss_alloc_t *a) { pthread_mutex_unlock((pthread_mutex_t *)&a->mu); }

/* ---- block structs: slabs + quarantined recycling ------------------------------------------ */

static struct ss_block *block_new(ss_alloc_t *a) {
    struct ss_block *b = NULL;
    if (a->ndead > SS_QUARANTINE) {
        b = a->dead_head;
        a->dead_head = b->qnext;
        if (!a->dead_head) a->dead_tail = NULL;
        a->ndead--;
    } else {
        if (!a->slabs || a->slabs->used == a->slabs->n) {
            size_t n = a->slabs ? a->slabs->n * 2 : 64;
            if (n > 65536) n = 65536;
            slab *s = malloc(sizeof(slab) + n * sizeof(struct ss_block));
            if (!s) return NULL;
            s->next = a->slabs; s->n = n; s->used = 0;
            a->slabs = s;
        }
        b = &a->slabs->b[a->slabs->used++];
    }
    memset(b, 0, sizeof *b);
    b->magic = SS_BLOCK_MAGIC;
    b->prio = ssi_rng_next(&a->rng);
    return b;
}

static void block_kill(ss_alloc_t *a, struct ss_block *b) {
    b->state = B_DEAD;
    b->sg = NULL;
    b->prev = b->next = b->left = b->right = NULL;
    b->ev = NULL;
    b->qnext = NULL;
    if (a->dead_tail) a->dead_tail->qnext = b; else a->dead_head = b;
    a->dead_tail = b;
    a->ndead++;
}

/* Is p one of this allocator's block structs? Never dereferences p. */
static int block_owned(const ss_alloc_t *a, const void *p) {
    uintptr_t u = (uintptr_t)p;
    for (const slab *s = a->slabs; s; s = s->next) {
        uintptr_t lo = (uintptr_t)&s->b[0], hi = (uintptr_t)&s->b[s->used];
        if (u >= lo && u < hi) return (u - lo) % sizeof(struct ss_block) == 0;
    }
    return 0;
}

/* ---- free treap keyed by (size, va) -------------------------------------------------------- */

static int key_less(const struct ss_block *x, const struct ss_block *y) {
    return x->size < y->size || (x->size == y->size && bva(x) < bva(y));
}

static struct ss_block *treap_merge(struct ss_block *l, struct ss_block *r) {
    if (!l) return r;
    if (!r) return l;
    if (l->prio > r->prio) { l->right = treap_merge(l->right, r); return l; }
    r->left = treap_merge(l, r->left);
    return r;
}

/* Splits t into keys < x (l) and keys >= x (r). */
static void treap_split(struct ss_block *t, const struct ss_block *x, struct ss_block **l,
                        struct ss_block **r) {
    if (!t) { *l = *r = NULL; return; }
    if (key_less(t, x)) { treap_split(t->right, x, &t->right, r); *l = t; }
    else { treap_split(t->left, x, l, &t->left); *r = t; }
}

static struct ss_block *treap_insert(struct ss_block *t, struct ss_block *x) {
    if (!t) { x->left = x->right = NULL; return x; }
    if (x->prio > t->prio) { treap_split(t, x, &x->left, &x->right); return x; }
    if (key_less(x, t)) t->left = treap_insert(t->left, x);
    else t->right = treap_insert(t->right, x);
    return t;
}

static struct ss_block *treap_erase(struct ss_block *t, struct ss_block *x) {
    if (!t) return NULL;   /* not found: the walker reports it */
    if (t == x) { struct ss_block *m = treap_merge(t->left, t->right); x->left = x->right = NULL; return m; }
    if (key_less(x, t)) t->left = treap_erase(t->left, x);
    else t->right = treap_erase(t->right, x);
    return t;
}

/* Smallest (size, va) with size >= n. */
static struct ss_block *treap_best_fit(struct ss_block *t, uint64_t n) {
    struct ss_block *best = NULL;
    while (t) {
        if (t->size >= n) { best = t; t = t->left; }
        else t = t->right;
    }
    return best;
}

static void free_insert(ss_alloc_t *a, struct ss_block *b) {
    b->state = B_FREE;
    *rootp(a, b) = treap_insert(*rootp(a, b), b);
    a->nfree++;
    a->free_bytes += b->size;
}

static void free_remove(ss_alloc_t *a, struct ss_block *b) {
    *rootp(a, b) = treap_erase(*rootp(a, b), b);
    a->nfree--;
    a->free_bytes -= b->size;
}

/* Virtual-memory mode: blocks [off, off+size) of s start (delta 1) or stop (-1) touching their
 * granules; keeps the cached-granule count and the counts of the out-of-memory rule. */
static void gran_ref(ss_alloc_t *a, seg *s, uint64_t off, uint64_t size, int delta) {
    uint64_t g0 = off / a->G, g1 = (off + size + a->G - 1) / a->G;
    for (uint64_t g = g0; g < g1; g++) {
        if (delta > 0) {
            SS_ASSERT(s->gmap[g]);
            if (s->gref[g]++ == 0) { a->cached_g--; if (s->pool != POOL_ITER) a->nsmall_g++; }
        } else {
            SS_ASSERT(s->gref[g] > 0);
            if (--s->gref[g] == 0) { a->cached_g++; if (s->pool != POOL_ITER) a->nsmall_g--; }
        }
    }
    if (s->pool == POOL_ITER) {
        uint64_t ng = (size + a->G - 1) / a->G;
        if (delta > 0) a->large_g += ng; else a->large_g -= ng;
    }
}

/* Makes b (not in the treap, not free) a free block, coalescing with free neighbours. Stamps
 * merge to the latest completion. */
static void merge_neighbours(ss_alloc_t *a, struct ss_block *b);
static void release_block(ss_alloc_t *a, struct ss_block *b, int stamp, double t) {
    if (a->vm) gran_ref(a, b->sg, b->off, b->size, -1);
    b->has_stamp = (uint8_t)stamp;
    b->stamp = t;
    b->ev = NULL;
    merge_neighbours(a, b);
    if (a->vm && b->sg->pool == POOL_SMALL && !b->sg->gref[b->off / a->G] && gcls_at(a, b->sg, b->off)) {
        /* the granule's last block went: the granule, now one free block, is empty again and
         * merges with the empty granules beside it */
        SS_ASSERT(b->off % a->G == 0 && b->size == a->G);
        b->sg->gcls[b->off / a->G] = 0;
        merge_neighbours(a, b);
    }
    free_insert(a, b);
}

/* Small pool: free neighbours merge only within one granule of a class, or when both are empty
 * granules (so that a class's free slots stay in its granule and its treap). */
static int mergeable(const ss_alloc_t *a, const struct ss_block *b, const struct ss_block *n) {
    if (!n || n->state != B_FREE) return 0;
    if (!a->vm || b->sg->pool != POOL_SMALL) return 1;
    uint32_t cb = gcls_at(a, b->sg, b->off), cn = gcls_at(a, n->sg, n->off);
    if (cb != cn) return 0;
    return cb == 0 || b->off / a->G == n->off / a->G;
}

/* Merges b (not in the treap) with its mergeable free neighbours. */
static void merge_neighbours(ss_alloc_t *a, struct ss_block *b) {
    struct ss_block *p = b->prev;
    if (mergeable(a, b, p)) {
        free_remove(a, p);
        if (p->has_stamp && (!b->has_stamp || p->stamp > b->stamp)) { b->has_stamp = 1; b->stamp = p->stamp; }
        b->off = p->off;
        b->size += p->size;
        b->prev = p->prev;
        if (b->prev) b->prev->next = b; else b->sg->first = b;
        block_kill(a, p);
    }
    struct ss_block *n = b->next;
    if (mergeable(a, b, n)) {
        free_remove(a, n);
        if (n->has_stamp && (!b->has_stamp || n->stamp > b->stamp)) { b->has_stamp = 1; b->stamp = n->stamp; }
        b->size += n->size;
        b->next = n->next;
        if (b->next) b->next->prev = b;
        block_kill(a, n);
    }
}

/* ---- segments ---------------------------------------------------------------------------- */

/* Links s (one free block, s->first) at the end of the segment list, at a fresh range of the
 * virtual address space, and puts its block in the treap. */
static void seg_attach(ss_alloc_t *a, seg *s) {
    struct ss_block *b = s->first;
    s->va = a->next_va;
    a->next_va += s->size;
    s->prev = a->segs_tail;
    s->next = NULL;
    if (a->segs_tail) a->segs_tail->next = s; else a->segs = s;
    a->segs_tail = s;
    a->nsegs++;
    b->off = 0; b->size = s->size; b->prev = b->next = NULL; b->has_stamp = 0;
    free_insert(a, b);
}

/* A new segment s of `size` bytes whose one free block is b: links and counts it. */
static void seg_install(ss_alloc_t *a, seg *s, struct ss_block *b, uint64_t size) {
    s->size = size;
    s->first = b;
    b->sg = s;
    seg_attach(a, s);
    a->st.segment_allocs++;
}

/* Reserves a segment of `size` bytes and puts it, as one free block, in the treap. Device
 * failures are returned as they are (SS_ERR_OOM from a full device included). */
static ss_status seg_reserve(ss_alloc_t *a, uint64_t size) {
    seg *s = calloc(1, sizeof *s);
    if (!s) return SS_ERR_HOST_OOM;
    struct ss_block *b = block_new(a);
    if (!b) { free(s); return SS_ERR_HOST_OOM; }
    if (a->dev) {
        ss_status st = ss_mem_alloc(a->dev, (size_t)size, &s->dptr);
        if (st != SS_OK) { block_kill(a, b); free(s); return st; }
    }
    seg_install(a, s, b, size);
    a->reserved += size;
    if (a->reserved > a->st.peak_reserved_bytes) a->st.peak_reserved_bytes = a->reserved;
    if (a->reserved > a->win_reserved) a->win_reserved = a->reserved;
    return SS_OK;
}

/* Returns a fully free segment to the device. On a device error the segment is kept. */
static ss_status seg_release(ss_alloc_t *a, seg *s) {
    struct ss_block *b = s->first;
    SS_ASSERT(b->state == B_FREE && b->size == s->size);
    if (a->dev) {
        ss_status st = ss_mem_free(a->dev, s->dptr, (size_t)s->size);
        if (st != SS_OK && st != SS_ERR_CORRUPT) {   /* CORRUPT: freed, but a guard was hit */
            SS_ERROR("alloc: returning a %" PRIu64 "-byte segment to the device failed: %s",
                     s->size, ss_status_str(st));
            return st;
        }
        if (st == SS_ERR_CORRUPT) SS_ERROR("alloc: the device found a guard overrun in a segment");
    }
    free_remove(a, b);
    block_kill(a, b);
    if (s->prev) s->prev->next = s->next; else a->segs = s->next;
    if (s->next) s->next->prev = s->prev; else a->segs_tail = s->prev;
    a->nsegs--;
    a->reserved -= s->size;
    a->st.segment_frees++;
    free(s);
    return SS_OK;
}

static int seg_is_free(const seg *s) {
    return s->first->state == B_FREE && s->first->size == s->size;
}

/* Returns parked segment *pp to the device and unlinks it. On a device error it stays parked. */
static ss_status parked_release(ss_alloc_t *a, seg **pp) {
    seg *s = *pp;
    if (a->dev) {
        ss_status st = ss_mem_free(a->dev, s->dptr, (size_t)s->size);
        if (st != SS_OK && st != SS_ERR_CORRUPT) {
            SS_ERROR("alloc: returning a %" PRIu64 "-byte segment to the device failed: %s",
                     s->size, ss_status_str(st));
            return st;
        }
        if (st == SS_ERR_CORRUPT) SS_ERROR("alloc: the device found a guard overrun in a segment");
    }
    *pp = s->next;
    block_kill(a, s->first);
    a->nparked--;
    a->parked_bytes -= s->size;
    a->reserved -= s->size;
    a->st.segment_frees++;
    free(s);
    return SS_OK;
}

/* Returns every parked segment to the device; the first device error (others still tried). */
static ss_status parked_release_all(ss_alloc_t *a, uint64_t *released) {
    ss_status first = SS_OK;
    seg **pp = &a->parked;
    while (*pp) {
        uint64_t sz = (*pp)->size;
        ss_status st = parked_release(a, pp);
        if (st == SS_OK) { if (released) *released += sz; }
        else { if (first == SS_OK) first = st; pp = &(*pp)->next; }
    }
    return first;
}

/* A parked segment of exactly `size` bytes back in use (no device call): 1, or 0 when none. */
static int parked_take(ss_alloc_t *a, uint64_t size) {
    for (seg **pp = &a->parked; *pp; pp = &(*pp)->next) {
        seg *s = *pp;
        if (s->size != size) continue;
        *pp = s->next;
        a->nparked--;
        a->parked_bytes -= size;
        seg_attach(a, s);
        a->st.segment_reuses++;
        return 1;
    }
    return 0;
}

/* Releases every fully free segment; returns the first device error (others still tried). */
static ss_status vm_trim(ss_alloc_t *a, uint64_t *released);
static ss_status trim_locked(ss_alloc_t *a, uint64_t *released) {
    if (a->vm) return vm_trim(a, released);
    ss_status first = SS_OK;
    uint64_t rel = 0;
    seg *s = a->segs;
    while (s) {
        seg *nx = s->next;
        if (seg_is_free(s)) {
            uint64_t sz = s->size;
            ss_status st = seg_release(a, s);
            if (st == SS_OK) rel += sz;
            else if (first == SS_OK) first = st;
        }
        s = nx;
    }
    ss_status pst = parked_release_all(a, &rel);
    if (first == SS_OK) first = pst;
    if (released) *released = rel;
    return first;
}

/* ---- virtual-memory segments -------------------------------------------------------------- */

static void *gran_ptr(const seg *s, uint64_t g, uint64_t G) {
    return s->dptr ? (char *)s->dptr + g * G : NULL;
}

static void set_reserved(ss_alloc_t *a) {
    a->reserved = a->mapped * a->G;
    if (a->reserved > a->st.peak_reserved_bytes) a->st.peak_reserved_bytes = a->reserved;
    if (a->reserved > a->win_reserved) a->win_reserved = a->reserved;
}

/* Maps granule g of s (unmapped). Device errors as they are (SS_ERR_OOM: the device is full). */
static ss_status vm_map_gran(ss_alloc_t *a, seg *s, uint64_t g) {
    SS_ASSERT(!s->gmap[g] && !s->gref[g]);
    if (a->dev) {
        ss_status st = ss_vm_map(a->dev, gran_ptr(s, g, a->G), (size_t)a->G);
        if (st != SS_OK) return st;
    }
    s->gmap[g] = 1;
    a->mapped++;
    a->cached_g++;
    a->st.granule_maps++;
    set_reserved(a);
    return SS_OK;
}

/* Unmaps cached granule g of s. SS_ERR_STATE: a copy still touches it (it stays mapped). */
static ss_status vm_unmap_gran(ss_alloc_t *a, seg *s, uint64_t g) {
    SS_ASSERT(s->gmap[g] && !s->gref[g]);
    if (a->dev) {
        ss_status st = ss_vm_unmap(a->dev, gran_ptr(s, g, a->G), (size_t)a->G);
        if (st != SS_OK) return st;
    }
    s->gmap[g] = 0;
    a->mapped--;
    a->cached_g--;
    a->st.granule_unmaps++;
    set_reserved(a);
    return SS_OK;
}

/* Unmaps up to `want` cached granules, none of [g0, g1) of `avoid` and none a copy still
 * touches (counted in stats.granules_busy); *done (may be NULL) gets how many. Returns the first
 * device error other than busy (the others are still tried). */
static ss_status vm_unmap_cached(ss_alloc_t *a, uint64_t want, const seg *avoid, uint64_t g0,
                                 uint64_t g1, uint64_t *done) {
    ss_status first = SS_OK;
    uint64_t n = 0;
    for (seg *s = a->segs; s && n < want && a->cached_g; s = s->next) {
        uint64_t ng = s->size / a->G;
        for (uint64_t g = 0; g < ng && n < want; g++) {
            if (!s->gmap[g] || s->gref[g] || (s == avoid && g >= g0 && g < g1)) continue;
            ss_status st = vm_unmap_gran(a, s, g);
            if (st == SS_OK) n++;
            else if (st == SS_ERR_STATE) a->st.granules_busy++;
            else if (first == SS_OK) first = st;
        }
    }
    if (done) *done = n;
    return first;
}

static void seg_unlink(ss_alloc_t *a, seg *s) {
    if (s->prev) s->prev->next = s->next; else a->segs = s->next;
    if (s->next) s->next->prev = s->prev; else a->segs_tail = s->prev;
    a->nsegs--;
}

static void seg_free_struct(seg *s) {
    free(s->gref);
    free(s->gmap);
    free(s->gcls);
    free(s);
}

/* A new address reservation of `size` bytes (a multiple of G) for pool, one free block. */
static ss_status vm_seg_new(ss_alloc_t *a, int pool, uint64_t size) {
    seg *s = calloc(1, sizeof *s);
    uint64_t ng = size / a->G;
    if (s) {
        s->gref = calloc((size_t)ng, sizeof *s->gref);
        s->gmap = calloc((size_t)ng, 1);
        if (pool == POOL_SMALL) s->gcls = calloc((size_t)ng, sizeof *s->gcls);
    }
    struct ss_block *b = s && s->gref && s->gmap && (pool != POOL_SMALL || s->gcls) ? block_new(a) : NULL;
    if (!b) { if (s) seg_free_struct(s); return SS_ERR_HOST_OOM; }
    if (a->dev) {
        ss_status st = ss_vm_reserve(a->dev, (size_t)size, &s->dptr);
        if (st != SS_OK) { block_kill(a, b); seg_free_struct(s); return st; }
    }
    s->pool = pool;
    seg_install(a, s, b, size);
    return SS_OK;
}

/* Gives back a reservation that is one free block with nothing mapped. */
static ss_status vm_seg_release(ss_alloc_t *a, seg *s) {
    if (a->dev) {
        ss_status st = ss_vm_release(a->dev, s->dptr, (size_t)s->size);
        if (st != SS_OK) return st;
    }
    free_remove(a, s->first);
    block_kill(a, s->first);
    seg_unlink(a, s);
    a->st.segment_frees++;
    seg_free_struct(s);
    return SS_OK;
}

static int seg_unmapped(const ss_alloc_t *a, const seg *s) {
    for (uint64_t g = 0; g < s->size / a->G; g++)
        if (s->gmap[g]) return 0;
    return 1;
}

/* Trim in virtual-memory mode: every cached granule unmapped, every reservation that is free
 * and unmapped given back. */
static ss_status vm_trim(ss_alloc_t *a, uint64_t *released) {
    uint64_t before = a->mapped;
    ss_status first = vm_unmap_cached(a, UINT64_MAX, NULL, 0, 0, NULL);
    for (seg *s = a->segs, *nx; s; s = nx) {
        nx = s->next;
        if (seg_is_free(s) && seg_unmapped(a, s)) {
            ss_status st = vm_seg_release(a, s);
            if (st != SS_OK && first == SS_OK) first = st;
        }
    }
    if (released) *released = (before - a->mapped) * a->G;
    return first;
}

/* The smallest key above x's. */
static struct ss_block *treap_next(struct ss_block *t, const struct ss_block *x) {
    struct ss_block *best = NULL;
    while (t) {
        if (key_less(x, t)) { best = t; t = t->left; }
        else t = t->right;
    }
    return best;
}

/* The small pool's size classes (docs/allocator.md "Small blocks share granules"): a request of
 * n (a multiple of 256 B, below G) is of class s = floor(G / n), the slots a granule holds; a
 * granule serves one class at a time, in slots of small_slot(s) bytes (the largest multiple of
 * 256 B with s slots in G, at least n), so that n bytes of live small blocks of one class hold at
 * most one granule more than a full packing would. */
uint32_t ss_alloc_small_class(uint64_t granule, uint64_t n) {
    n = round_up(n, SS_ALLOC_ALIGN);
    return n && n < granule ? (uint32_t)(granule / n) : 0;
}
static uint32_t small_class(const ss_alloc_t *a, uint64_t n) { return ss_alloc_small_class(a->G, n); }
static uint64_t small_slot(const ss_alloc_t *a, uint32_t cls) { return a->G / cls / SS_ALLOC_ALIGN * SS_ALLOC_ALIGN; }

/* Where n bytes go in free block f of pool: the pad before them (small: at a slot of its
 * granule's class; persistent: packed, right at the free block's start; large: at a granule
 * boundary). 1 when they fit. */
static int vm_place(const ss_alloc_t *a, const struct ss_block *f, uint64_t n, uint64_t *pad) {
    uint64_t start = f->off;
    if (f->sg->pool == POOL_SMALL) {
        uint32_t cls = gcls_at(a, f->sg, f->off);
        if (cls) {   /* a slot of the granule: within its slots, not its tail */
            uint64_t g0 = f->off / a->G * a->G, cs = small_slot(a, cls);
            start = g0 + round_up(f->off - g0, cs);
            if (start + cs > g0 + cls * cs) return 0;
        }
    } else if (f->sg->pool == POOL_PERSIST) {
        /* packed: persistent tensors live as long as the model, so sharing granules between
         * them wastes nothing and splits no activation's run */
    } else {
        start = round_up(start, a->G);
    }
    if (start - f->off > f->size || f->size - (start - f->off) < n) return 0;
    *pad = start - f->off;
    return 1;
}

/* Best fit in pool's treap that can place n bytes; a small request searches its class's
 * granules, and with none of them free an empty granule (*claim set: small_claim it first). */
static struct ss_block *vm_find(ss_alloc_t *a, int pool, uint64_t n, uint64_t *pad, int *claim) {
    *claim = 0;
    struct ss_block *root = pool == POOL_SMALL ? a->sroots[small_class(a, n)] : a->roots[pool];
    for (struct ss_block *f = treap_best_fit(root, n); f; f = treap_next(root, f))
        if (vm_place(a, f, n, pad)) return f;
    if (pool != POOL_SMALL) return NULL;
    struct ss_block *f = treap_best_fit(a->sroots[0], a->G);   /* empty granules, smallest run first */
    if (f) { *pad = 0; *claim = 1; }
    return f;
}

/* Splits free block f at f->off + at (0 < at < f->size) into two free blocks: a new struct takes
 * the front part (front = 1) or the back part, f keeps the other, both stay free with f's stamp.
 * Returns the new one; NULL without host memory (nothing changed). */
static struct ss_block *split_at(ss_alloc_t *a, struct ss_block *f, uint64_t at, int front) {
    SS_ASSERT(at > 0 && at < f->size);
    struct ss_block *b = block_new(a);
    if (!b) return NULL;
    free_remove(a, f);
    b->sg = f->sg;
    b->has_stamp = f->has_stamp;
    b->stamp = f->stamp;
    if (front) {
        b->off = f->off;
        b->size = at;
        b->prev = f->prev;
        b->next = f;
        if (b->prev) b->prev->next = b; else b->sg->first = b;
        f->prev = b;
        f->off += at;
        f->size -= at;
    } else {
        b->off = f->off + at;
        b->size = f->size - at;
        b->prev = f;
        b->next = f->next;
        if (b->next) b->next->prev = b;
        f->next = b;
        f->size = at;
    }
    free_insert(a, b);
    free_insert(a, f);
    return b;
}

/* Small pool: makes the first granule of empty free block f a free granule of class cls (the
 * rest stays empty) and returns it; NULL without host memory (nothing changed). */
static struct ss_block *small_claim(ss_alloc_t *a, struct ss_block *f, uint32_t cls) {
    SS_ASSERT(f->off % a->G == 0 && f->size >= a->G && !gcls_at(a, f->sg, f->off));
    if (f->size > a->G && !split_at(a, f, a->G, 0)) return NULL;
    free_remove(a, f);   /* its class picks its treap */
    f->sg->gcls[f->off / a->G] = cls;
    free_insert(a, f);
    return f;
}

/* Undoes small_claim of free granule f (its carve failed): empty again, merged back. */
static void small_unclaim(ss_alloc_t *a, struct ss_block *f) {
    free_remove(a, f);
    f->sg->gcls[f->off / a->G] = 0;
    merge_neighbours(a, f);
    free_insert(a, f);
}

/* Hands out n bytes at f->off + pad: the pad stays a free block of its own. */
static struct ss_block *carve(ss_alloc_t *a, struct ss_block *f, uint64_t n);
static struct ss_block *carve_at(ss_alloc_t *a, struct ss_block *f, uint64_t pad, uint64_t n) {
    if (!pad) return carve(a, f, n);
    struct ss_block *p = split_at(a, f, pad, 1);
    if (!p) return NULL;
    struct ss_block *h = carve(a, f, n);
    if (!h) {   /* no host memory: merge the pad back */
        free_remove(a, p);
        free_remove(a, f);
        f->off = p->off;
        f->size += pad;
        f->prev = p->prev;
        if (f->prev) f->prev->next = f; else f->sg->first = f;
        block_kill(a, p);
        free_insert(a, f);
    }
    return h;
}

static int pool_of(const ss_alloc_t *a, uint64_t n, int lifetime) {
    if (lifetime == SS_LIFETIME_PERSISTENT) return POOL_PERSIST;
    return n < a->G ? POOL_SMALL : POOL_ITER;
}

/* One attempt in virtual-memory mode: place n bytes in the pool's free address space (a new
 * reservation when none has room), map the granules it needs, unmapping cached ones elsewhere
 * when the budget requires. SS_ERR_OOM only when the granules touched by live and pending blocks
 * plus the new ones would pass the budget, or every cached granule is still under a copy. */
static ss_status try_alloc_vm(ss_alloc_t *a, uint64_t n, int lifetime, struct ss_block **out) {
    int pool = pool_of(a, n, lifetime), claim = 0;
    uint64_t pad = 0;
    struct ss_block *f = vm_find(a, pool, n, &pad, &claim);
    if (!f) {
        uint64_t nbc = a->nb < 65536 ? a->nb : 65536;
        uint64_t size = 2 * nbc * a->G, want = 2 * round_up(n, a->G) + a->G;
        ss_status st = vm_seg_new(a, pool, size > want ? size : want);
        if (st != SS_OK) return st;
        f = vm_find(a, pool, n, &pad, &claim);
        SS_ASSERT(f != NULL);
        if (!f) return SS_ERR_OOM;
    }
    seg *s = f->sg;
    uint64_t start = f->off + pad, g0 = start / a->G, g1 = (start + n + a->G - 1) / a->G;
    uint64_t need = 0, newref = 0;
    for (uint64_t g = g0; g < g1; g++) {
        need += !s->gmap[g];
        newref += !s->gref[g];
    }
    if (a->mapped - a->cached_g + newref > a->nb) return SS_ERR_OOM;   /* exhausted */
    if (a->mapped + need > a->nb) {
        ss_status st = vm_unmap_cached(a, a->mapped + need - a->nb, s, g0, g1, NULL);
        if (a->mapped + need > a->nb) return st != SS_OK ? st : SS_ERR_OOM;
    }
    for (uint64_t g = g0; g < g1; g++) {
        if (s->gmap[g]) continue;
        ss_status st = vm_map_gran(a, s, g);
        if (st == SS_ERR_OOM && a->cached_g) {   /* the device is full: give back what we cache */
            vm_unmap_cached(a, UINT64_MAX, s, g0, g1, NULL);
            st = vm_map_gran(a, s, g);
        }
        if (st != SS_OK) return st;   /* granules mapped so far stay, cached */
    }
    if (claim && !(f = small_claim(a, f, small_class(a, n)))) return SS_ERR_HOST_OOM;
    struct ss_block *h = carve_at(a, f, pad, n);
    if (!h) {
        if (claim) small_unclaim(a, f);
        return SS_ERR_HOST_OOM;
    }
    if (!need) a->st.cache_hits++;
    *out = h;
    return SS_OK;
}

/* ---- pending releases ---------------------------------------------------------------------- */

static int heap_less(const struct ss_block *x, const struct ss_block *y) {
    return x->k < y->k || (x->k == y->k && x->seq < y->seq);
}

static ss_status heap_push(ss_alloc_t *a, struct ss_block *b) {
    ss_status st = ssi_grow(&a->heap, &a->heap_cap, a->heap_n + 1, sizeof *a->heap);
    if (st != SS_OK) return st;
    size_t i = a->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(b, a->heap[p])) break;
        a->heap[i] = a->heap[p];
        i = p;
    }
    a->heap[i] = b;
    return SS_OK;
}

static struct ss_block *heap_pop(ss_alloc_t *a) {
    struct ss_block *top = a->heap[0], *last = a->heap[--a->heap_n];
    size_t i = 0, n = a->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_less(a->heap[c + 1], a->heap[c])) c++;
        if (!heap_less(a->heap[c], last)) break;
        a->heap[i] = a->heap[c];
        i = c;
    }
    if (n) a->heap[i] = last;
    return top;
}

/* Removes heap entry i (restoring the order around the entry moved into its place). */
static void heap_remove_at(ss_alloc_t *a, size_t i) {
    struct ss_block *last = a->heap[--a->heap_n];
    if (i == a->heap_n) return;
    size_t n = a->heap_n;
    while (i > 0 && heap_less(last, a->heap[(i - 1) / 2])) {   /* up */
        a->heap[i] = a->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    for (;;) {                                                 /* down */
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_less(a->heap[c + 1], a->heap[c])) c++;
        if (!heap_less(a->heap[c], last)) break;
        a->heap[i] = a->heap[c];
        i = c;
    }
    a->heap[i] = last;
}

/* A pending block becomes free; `t` is the completion time of its last pending use. */
static void pending_done(ss_alloc_t *a, struct ss_block *b, double t) {
    a->pending_bytes -= b->size;
    a->st.deferred_releases++;
    release_block(a, b, 1, t);
}

/* The completion time of a finished event: ss_event_time, else the clock now. */
static double event_done_time(ss_alloc_t *a, ss_event_t *e) {
    double t;
    if (e && ss_event_time(a->dev, e, &t) == SS_OK) return t;
    return clock_now(a);
}

/* Releases one deferred block due at the reached index. Real mode: one query; late: one wait of
 * s on the event (s NULL: a host sync), counted. On a device failure the block stays pending. */
static ss_status release_deferred(ss_alloc_t *a, struct ss_block *b, ss_stream_t *s,
                                  double *wait_until) {
    if (is_measure(a)) {
        a->st.event_queries++;
        if (b->t_done > a->now) {
            a->st.waits++;
            if (wait_until && b->t_done > *wait_until) *wait_until = b->t_done;
        }
        pending_done(a, b, b->t_done);
        return SS_OK;
    }
    if (!b->ev) { pending_done(a, b, clock_now(a)); return SS_OK; }
    int done = 0;
    ss_status st = ss_event_query(a->dev, b->ev, &done);
    a->st.event_queries++;
    if (st != SS_OK) done = 0;   /* cannot tell: order it as if late */
    if (done) { pending_done(a, b, event_done_time(a, b->ev)); return SS_OK; }
    st = s ? ss_event_wait(a->dev, s, b->ev) : ss_event_sync(a->dev, b->ev);
    if (st != SS_OK) {
        SS_ERROR("alloc: ordering the reuse of a deferred block after its copy failed: %s",
                 ss_status_str(st));
        return st;
    }
    a->st.waits++;
    /* The reuse is ordered right after the copy on s: count the interval from now. */
    pending_done(a, b, s ? clock_now(a) : event_done_time(a, b->ev));
    return SS_OK;
}

/* c10's process_events: poll the oldest stock-pending blocks in order until one is not ready. */
static void process_stock(ss_alloc_t *a) {
    while (a->stock_head) {
        struct ss_block *b = a->stock_head;
        int done = 1;
        double t;
        if (is_measure(a)) {
            a->st.event_queries++;
            done = b->t_done <= a->now;
            t = b->t_done;
        } else if (b->ev) {
            a->st.event_queries++;
            if (ss_event_query(a->dev, b->ev, &done) != SS_OK) done = 0;
            t = done ? event_done_time(a, b->ev) : 0;
        } else {
            t = clock_now(a);
        }
        if (!done) break;
        a->stock_head = b->qnext;
        if (!a->stock_head) a->stock_tail = NULL;
        b->qnext = NULL;
        a->nstock--;
        pending_done(a, b, t);
    }
}

/* Under memory pressure (as c10's synchronize_and_free_events): waits for every stock-pending
 * event and releases its block. Each is a counted wait; in measure mode the clock moves to the
 * latest completion, as the host would have blocked until then. */
static ss_status sync_stock(ss_alloc_t *a) {
    while (a->stock_head) {
        struct ss_block *b = a->stock_head;
        double t = b->t_done;
        if (is_measure(a)) {
            if (t > a->now) a->now = t;   /* the host blocked until the copy was done */
        } else {
            if (b->ev) {
                ss_status st = ss_event_sync(a->dev, b->ev);
                if (st != SS_OK) return st;
                t = event_done_time(a, b->ev);
            } else {
                t = clock_now(a);
            }
        }
        a->st.waits++;
        a->stock_head = b->qnext;
        if (!a->stock_head) a->stock_tail = NULL;
        b->qnext = NULL;
        a->nstock--;
        pending_done(a, b, t);
    }
    return SS_OK;
}

/* ---- public: lifecycle ------------------------------------------------------------------- */

ss_alloc_config ss_alloc_config_default(void) {
    ss_alloc_config c;
    memset(&c, 0, sizeof c);
    c.budget_bytes = 0;
    c.segment_bytes = SS_DEFAULT_SEGMENT;
    c.release_mode = SS_RELEASE_MODE_PREDICTED;
    c.granule_bytes = 0;
    return c;
}

uint64_t ss_alloc_granule_for(uint64_t granule_bytes, uint64_t budget, uint64_t vm_granularity) {
    if (!granule_bytes) return 0;
    uint64_t unit = vm_granularity > SS_ALLOC_ALIGN ? round_up(vm_granularity, SS_ALLOC_ALIGN) : SS_ALLOC_ALIGN;
    if (budget == 0) budget = UINT64_MAX;
    else budget -= budget % SS_ALLOC_ALIGN;
    uint64_t g = granule_bytes;
    if (g == SS_ALLOC_GRANULE_AUTO) {
        /* 64 KiB, halved while the budget holds fewer than 4096 granules, down to the device's
         * unit or the page (4 KiB): a small budget's room above the model's state is then many
         * granules, not a few (docs/allocator.md "Which granule") */
        uint64_t lo = unit > 4096 ? unit : 4096;
        g = 64 << 10;
        while (g / 2 >= lo && budget != UINT64_MAX && budget / g < 4096) g /= 2;
    }
    /* the kernel's limit on mappings: at most 16384 granules in the budget */
    if (budget != UINT64_MAX && g < (budget + 16383) / 16384) g = (budget + 16383) / 16384;
    g = round_up(g, unit);
    if (budget != UINT64_MAX && g > budget) g = budget / unit * unit;
    return g;
}

ss_status ss_alloc_new(ss_device_t *dev, const ss_alloc_config *cfg, ss_alloc_t **out) {
    SS_CHECK_ARG(!out, "ss_alloc_new: out is NULL");
    ss_alloc_config c = cfg ? *cfg : ss_alloc_config_default();
    if (c.segment_bytes == 0) c.segment_bytes = SS_DEFAULT_SEGMENT;
    SS_CHECK_ARG(c.segment_bytes % SS_ALLOC_ALIGN != 0,
                 "ss_alloc_new: segment_bytes %" PRIu64 " is not a multiple of %d", c.segment_bytes,
                 SS_ALLOC_ALIGN);
    SS_CHECK_ARG(c.release_mode != SS_RELEASE_MODE_PREDICTED && c.release_mode != SS_RELEASE_MODE_STOCK,
                 "ss_alloc_new: release_mode %d is not predicted (0) or stock (1)", c.release_mode);
    uint64_t budget = c.budget_bytes;
    if (dev) {
        const ss_device_caps *caps = ss_device_get_caps(dev);
        uint64_t cap = caps ? caps->total_bytes : 0;
        if (cap) {
            if (budget == 0) budget = cap;
            else if (budget > cap) {
                char b1[32], b2[32];
                SS_WARN("alloc: budget %s is above the device capacity %s; clamped to the capacity",
                        ss_format_size(budget, b1, sizeof b1), ss_format_size(cap, b2, sizeof b2));
                budget = cap;
            }
        }
    }
    if (budget == 0) budget = UINT64_MAX;   /* measure mode without a budget: unbounded */
    budget -= budget % SS_ALLOC_ALIGN;
    SS_CHECK_ARG(budget == 0, "ss_alloc_new: budget below %d bytes", SS_ALLOC_ALIGN);

    ss_alloc_t *a = calloc(1, sizeof *a);
    if (!a) return SS_ERR_HOST_OOM;
    if (pthread_mutex_init(&a->mu, NULL) != 0) { free(a); return SS_ERR_HOST_OOM; }
    a->dev = dev;
    if (c.granule_bytes) {
        uint64_t dg = dev ? ss_device_get_caps(dev)->vm_granularity : SS_ALLOC_ALIGN;
        if (!dg) {
            SS_WARN("alloc: device %s has no virtual memory; plain segments instead of granules",
                    ss_device_get_caps(dev)->name);
            c.granule_bytes = 0;
        } else {
            uint64_t unit = dg > SS_ALLOC_ALIGN ? round_up(dg, SS_ALLOC_ALIGN) : SS_ALLOC_ALIGN;
            /* an unbudgeted allocator (the device's capacity) takes the option's granule, not
             * capacity / 16384: 256 KiB on cpu-sim's 4 GiB made unbudgeted runs about 20x
             * slower; only what is mapped counts against the kernel's limit on mappings */
            uint64_t g = ss_alloc_granule_for(c.granule_bytes, c.budget_bytes ? budget : 0, dg);
            if (g > budget) g = budget / unit * unit;
            if (g == 0) {
                pthread_mutex_destroy(&a->mu);
                free(a);
                SS_ERROR("ss_alloc_new: budget %" PRIu64 " below one granule of %" PRIu64, budget, unit);
                return SS_ERR_INVALID;
            }
            a->sroots = calloc((size_t)(g / SS_ALLOC_ALIGN + 1), sizeof *a->sroots);
            if (!a->sroots) {
                pthread_mutex_destroy(&a->mu);
                free(a);
                return SS_ERR_HOST_OOM;
            }
            c.granule_bytes = g;
            a->vm = 1;
            a->guard = dev != NULL;
            a->G = g;
            a->nb = budget / g;
            budget = budget == UINT64_MAX ? UINT64_MAX : a->nb * g;
        }
    }
    a->cfg = c;
    a->budget = budget;
    a->st.budget_bytes = budget;
    ssi_rng_seed(&a->rng, 0x5EED0A110Cull);
    *out = a;
    return SS_OK;
}

static void free_all(ss_alloc_t *a) {
    seg *s = a->segs;
    while (s) { seg *n = s->next; seg_free_struct(s); s = n; }
    s = a->parked;
    while (s) { seg *n = s->next; free(s); s = n; }
    slab *sl = a->slabs;
    while (sl) { slab *n = sl->next; free(sl); sl = n; }
    free(a->heap);
    free(a->sroots);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

ss_status ss_alloc_destroy(ss_alloc_t *a) {
    SS_CHECK_ARG(!a, "ss_alloc_destroy: allocator is NULL");
    lock(a);
    if (a->nlive || a->heap_n || a->nstock) {
        SS_ERROR("alloc: destroy with %" PRIu64 " live blocks and %" PRIu64
                 " pending releases; nothing freed (ss_alloc_destroy_force reclaims anyway)",
                 a->nlive, (uint64_t)a->heap_n + a->nstock);
        unlock(a);
        return SS_ERR_STATE;
    }
    ss_status st = trim_locked(a, NULL);
    if (st != SS_OK || a->segs || a->parked) {
        unlock(a);
        return st != SS_OK ? st : SS_ERR_STATE;
    }
    unlock(a);
    free_all(a);
    return SS_OK;
}

ss_status ss_alloc_destroy_force(ss_alloc_t *a) {
    SS_CHECK_ARG(!a, "ss_alloc_destroy_force: allocator is NULL");
    lock(a);
    ss_status first = SS_OK;
    /* Copies may still read pending blocks: wait for them before the memory goes back. */
    if (a->dev) {
        for (size_t i = 0; i < a->heap_n; i++)
            if (a->heap[i]->ev) {
                ss_status st = ss_event_sync(a->dev, a->heap[i]->ev);
                if (st != SS_OK && first == SS_OK) first = st;
            }
        for (struct ss_block *b = a->stock_head; b; b = b->qnext)
            if (b->ev) {
                ss_status st = ss_event_sync(a->dev, b->ev);
                if (st != SS_OK && first == SS_OK) first = st;
            }
    }
    for (seg *s = a->vm ? a->segs : NULL; s; s = s->next) {
        if (!s->dptr) continue;
        for (uint64_t g = 0; g < s->size / a->G; g++)
            if (s->gmap[g]) {
                ss_status st = ss_vm_unmap(a->dev, gran_ptr(s, g, a->G), (size_t)a->G);
                if (st != SS_OK && first == SS_OK) first = st;
            }
        ss_status st = ss_vm_release(a->dev, s->dptr, (size_t)s->size);
        if (st != SS_OK && first == SS_OK) first = st;
    }
    for (int l = 0; l < 2 && !a->vm; l++)
        for (seg *s = l ? a->parked : a->segs; s; s = s->next)
            if (s->dptr) {
                ss_status st = ss_mem_free(a->dev, s->dptr, (size_t)s->size);
                if (st != SS_OK && first == SS_OK) first = st;
            }
    if (a->nlive) SS_WARN("alloc: destroy_force reclaimed %" PRIu64 " live blocks", a->nlive);
    unlock(a);
    free_all(a);
    return first;
}

void ss_alloc_set_evict(ss_alloc_t *a, ss_evict_fn fn, void *user) {
    if (!a) return;
    lock(a);
    a->evict = fn;
    a->evict_user = user;
    unlock(a);
}

void ss_alloc_set_time(ss_alloc_t *a, double now) {
    if (!a) return;
    lock(a);
    a->now = now;
    unlock(a);
}

/* ---- public: hand-out and release --------------------------------------------------------- */

/* Carves n bytes off the front of free block f: the hand-out gets a fresh struct. */
static struct ss_block *carve(ss_alloc_t *a, struct ss_block *f, uint64_t n) {
    struct ss_block *h = block_new(a);
    if (!h) return NULL;
    free_remove(a, f);
    h->sg = f->sg;
    h->off = f->off;
    h->size = n;
    if (h->size == f->size) {          /* exact: h takes f's place */
        h->prev = f->prev; h->next = f->next;
        if (h->prev) h->prev->next = h; else h->sg->first = h;
        if (h->next) h->next->prev = h;
        int stamped = f->has_stamp; double stamp = f->stamp;
        block_kill(a, f);
        f = NULL;
        h->has_stamp = (uint8_t)stamped; h->stamp = stamp;
    } else {                           /* split: f keeps the tail, with its stamp */
        h->prev = f->prev; h->next = f;
        if (h->prev) h->prev->next = h; else h->sg->first = h;
        f->prev = h;
        f->off += n;
        f->size -= n;
        h->has_stamp = f->has_stamp; h->stamp = f->stamp;
        free_insert(a, f);
    }
    if (h->has_stamp) {                /* block reuse interval */
        double dt = clock_now(a) - h->stamp;
        if (dt < 0) dt = 0;
        a->st.reuse_count++;
        a->st.reuse_total_s += dt;
        if (dt > a->st.reuse_max_s) a->st.reuse_max_s = dt;
        h->has_stamp = 0;
    }
    h->state = B_LIVE;
    if (a->vm) gran_ref(a, h->sg, h->off, h->size, 1);
    a->nlive++;
    a->live_bytes += n;
    uint64_t in_use = a->live_bytes + a->pending_bytes;
    if (in_use > a->st.peak_in_use_bytes) a->st.peak_in_use_bytes = in_use;
    if (in_use > a->win_peak) a->win_peak = in_use;
    return h;
}

/* One attempt: best fit, else a new segment within the budget. SS_ERR_OOM when neither. */
static ss_status try_alloc(ss_alloc_t *a, uint64_t n, int lifetime, struct ss_block **out) {
    if (a->vm) return try_alloc_vm(a, n, lifetime, out);
    struct ss_block *f = treap_best_fit(a->roots[0], n);
    /* segments of SS_ALLOC_ALIGN: exact-size segments, one per block, never split; a cached one
     * serves only a request of its size, so once the out-of-memory path has returned the cached
     * ones, reserved = in use (the trainer's smallest budget relies on it, docs/allocator.md) */
    if (f && a->cfg.segment_bytes == SS_ALLOC_ALIGN && f->size != n) f = NULL;
    if (f) {
        struct ss_block *h = carve(a, f, n);
        if (!h) return SS_ERR_HOST_OOM;
        a->st.cache_hits++;
        *out = h;
        return SS_OK;
    }
    uint64_t g = a->cfg.segment_bytes;
    uint64_t want = n <= g ? g : round_up(n, g);
    /* parked segments are set aside: the room is what a fresh allocator would have */
    uint64_t room = a->budget - (a->reserved - a->parked_bytes);
    if (want > room) want = n;   /* tight budget: a segment of exactly n */
    if (want > room) return SS_ERR_OOM;
    ss_status st = SS_OK;
    if (!parked_take(a, want)) {
        /* a new device segment: parked ones go back first as far as the budget needs */
        while (a->parked && a->reserved + want > a->budget)
            if ((st = parked_release(a, &a->parked)) != SS_OK) return st;
        st = seg_reserve(a, want);
        if (st == SS_ERR_OOM && a->parked) {   /* the device is full: give it all back */
            if ((st = parked_release_all(a, NULL)) != SS_OK) return st;
            st = seg_reserve(a, want);
        }
        if (st == SS_ERR_OOM && want > n) st = seg_reserve(a, n);   /* device full: exact size */
        if (st != SS_OK) return st;
    }
    f = treap_best_fit(a->roots[0], n);
    SS_ASSERT(f != NULL);
    struct ss_block *h = carve(a, f, n);
    if (!h) return SS_ERR_HOST_OOM;
    *out = h;
    return SS_OK;
}

/* The largest request that fits now without eviction (caller holds the lock). Virtual-memory
 * mode: the granules no live or pending block touches (a large request gets a fresh range of
 * address space). Segment mode: the largest free block, or the room a new segment would get
 * once every fully free segment went back. */
static uint64_t largest_free_locked(const ss_alloc_t *a) {
    if (a->vm) {
        uint64_t used = a->mapped - a->cached_g;
        return used < a->nb ? (a->nb - used) * a->G : 0;
    }
    uint64_t best = 0, trimmable = a->parked_bytes;
    for (int p = 0; p < NPOOL; p++)
        for (const struct ss_block *t = a->roots[p]; t; t = t->right)
            if (!t->right && t->size > best) best = t->size;
    for (const seg *s = a->segs; s; s = s->next)
        if (seg_is_free(s)) trimmable += s->size;
    uint64_t room = a->budget == UINT64_MAX ? UINT64_MAX : a->budget - (a->reserved - trimmable);
    return room > best ? room : best;
}

/* Writes the explanation of an out-of-memory for `need` bytes (caller holds the lock). */
static void oom_explain(ss_alloc_t *a, uint64_t need) {
    uint64_t in_use = a->live_bytes + a->pending_bytes;
    int exhausted;
    char rule[96] = "";
    if (a->vm) {
        uint64_t count = a->nsmall_g + a->large_g + (need + a->G - 1) / a->G;
        exhausted = count > a->nb;
        snprintf(rule, sizeof rule, "; granules: %" PRIu64 " small or persistent + %" PRIu64 " large + %" PRIu64
                 " new of %" PRIu64, a->nsmall_g, a->large_g, (need + a->G - 1) / a->G, a->nb);
    } else {
        exhausted = a->budget != UINT64_MAX && in_use + need > a->budget;
    }
    char b[5][32];
    snprintf(a->oom_msg, sizeof a->oom_msg,
             "out of device memory (%s): a %s request with %s in use of a %s budget, "
             "%s reserved, largest free run %s%s%s",
             exhausted ? "exhausted" : "fragmented", ss_format_size(need, b[0], 32),
             ss_format_size(in_use, b[1], 32),
             a->budget == UINT64_MAX ? "unbounded" : ss_format_size(a->budget, b[2], 32),
             ss_format_size(a->reserved, b[3], 32), ss_format_size(largest_free_locked(a), b[4], 32),
             rule, exhausted ? "" : a->vm ? " (granules still under copies)"
                                          : " (virtual-memory segments avoid this: option granule)");
}

ss_status ss_alloc_last_oom(const ss_alloc_t *a, char *buf, size_t len) {
    SS_CHECK_ARG(!a || !buf || !len, "ss_alloc_last_oom: NULL argument");
    lock(a);
    snprintf(buf, len, "%s", a->oom_msg);
    unlock(a);
    return SS_OK;
}

/* The guard of b (virtual-memory mode): [req, end) within b's address range, where end is the
 * block's end in the small and persistent (packed) pools and the end of its last granule in the
 * iteration pool (no other block starts inside a large block's last granule). 0 when none. */
static uint64_t guard_len(const ss_alloc_t *a, const struct ss_block *b) {
    if (!a->guard || !b->sg->dptr) return 0;
    uint64_t end = b->size;
    if (b->sg->pool == POOL_ITER) end = round_up(b->off + b->size, a->G) - b->off;
    return end > b->req ? end - b->req : 0;
}

static void guard_set(ss_alloc_t *a, struct ss_block *b) {
    uint64_t n = guard_len(a, b);
    if (!n) return;
    ss_status st = ss_mem_poison(a->dev, (char *)b->sg->dptr + b->off + b->req, (size_t)n);
    if (st == SS_ERR_UNSUPPORTED) a->guard = 0;   /* a device that cannot poison: no guards */
}

/* SS_ERR_CORRUPT (logged, counted) when b's guard bytes were overwritten: an overrun of the
 * request, into the rest of its block or granule and towards the next tensor of the range. */
static ss_status guard_check(ss_alloc_t *a, const struct ss_block *b, const char *fn) {
    uint64_t n = guard_len(a, b);
    size_t bad = 0;
    if (!n || ss_mem_check_poison(a->dev, (const char *)b->sg->dptr + b->off + b->req, (size_t)n, &bad) != SS_OK ||
        !bad)
        return SS_OK;
    a->st.guard_overruns++;
    SS_ERROR("%s: block %p of %" PRIu64 " bytes: %zu of its %" PRIu64 " guard bytes overwritten (buffer overrun)",
             fn, (void *)((char *)b->sg->dptr + b->off), b->req, bad, n);
    return SS_ERR_CORRUPT;
}

ss_status ss_alloc_malloc(ss_alloc_t *a, size_t n, ss_block_t **out) {
    return ss_alloc_malloc_tagged(a, n, SS_LIFETIME_ITERATION, out);
}

ss_status ss_alloc_malloc_tagged(ss_alloc_t *a, size_t n, ss_lifetime lifetime, ss_block_t **out) {
    SS_CHECK_ARG(!a || !out, "ss_alloc_malloc: NULL %s", !a ? "allocator" : "out");
    SS_CHECK_ARG(lifetime != SS_LIFETIME_ITERATION && lifetime != SS_LIFETIME_PERSISTENT,
                 "ss_alloc_malloc_tagged: lifetime %d is not iteration (0) or persistent (1)",
                 (int)lifetime);
    SS_CHECK_ARG(n == 0, "ss_alloc_malloc: zero size");
    SS_CHECK_ARG((uint64_t)n > UINT64_MAX - SS_ALLOC_ALIGN, "ss_alloc_malloc: size %zu too large", n);
    uint64_t need = round_up((uint64_t)n, SS_ALLOC_ALIGN);
    lock(a);
    a->st.alloc_calls++;
    if (need > a->budget) {
        char b1[32], b2[32];
        SS_ERROR("alloc: a %s request is above the whole budget %s",
                 ss_format_size(need, b1, sizeof b1), ss_format_size(a->budget, b2, sizeof b2));
        a->st.oom_errors++;
        oom_explain(a, need);
        unlock(a);
        return SS_ERR_OOM;
    }
    if (a->stock_head) process_stock(a);
    struct ss_block *b = NULL;
    ss_status st = try_alloc(a, need, (int)lifetime, &b);
    if (st == SS_ERR_OOM) {
        /* 1. cached segments back to the device (and, for stock releases, wait for their
         * events as c10 does under pressure), then retry */
        ss_status derr = SS_OK;    /* a device error on the way: returned instead of OOM */
        a->st.oom_trims++;
        if (a->stock_head && (derr = sync_stock(a)) != SS_OK)
            SS_ERROR("alloc: waiting for the pending releases' events failed: %s", ss_status_str(derr));
        /* (virtual-memory mode: try_alloc already unmapped what it needed; a trim only retries
         * granules that were under a copy) */
        ss_status tst = trim_locked(a, NULL);   /* trim_locked logs its own failures */
        if (derr == SS_OK) derr = tst;
        st = try_alloc(a, need, (int)lifetime, &b);
        /* 2. the eviction callback, lock released; retry while it frees something (freed space
         * may not be contiguous, so keep asking until the callback has nothing left; the bound
         * only guards against a callback that reports progress forever) */
        for (uint32_t round = 0; st == SS_ERR_OOM && a->evict && round < 100000; round++) {
            ss_evict_fn fn = a->evict;
            void *user = a->evict_user;
            uint64_t freed = 0;
            a->st.evict_calls++;
            unlock(a);
            ss_status est = fn(user, need, &freed);
            lock(a);
            /* a device call that failed while evicting is the cause, not the memory */
            if (est != SS_OK && est != SS_ERR_OOM && est != SS_ERR_HOST_OOM && derr == SS_OK) derr = est;
            if (est != SS_OK || freed == 0) break;
            tst = a->vm ? SS_OK : trim_locked(a, NULL);
            if (derr == SS_OK) derr = tst;
            st = try_alloc(a, need, (int)lifetime, &b);
        }
        if (st == SS_ERR_OOM && derr != SS_OK) {
            /* the memory that could have served it is held by a failed device call */
            SS_ERROR("alloc: a %" PRIu64 "-byte request failed: releasing memory for it failed "
                     "on the device: %s", need, ss_status_str(derr));
            st = derr;
        } else if (st == SS_ERR_OOM) {
            a->st.oom_errors++;
            oom_explain(a, need);
            SS_INFO("alloc: %s", a->oom_msg);
        }
    }
    if (st == SS_OK) {
        b->lifetime = (uint8_t)lifetime;
        b->req = (uint64_t)n;
        guard_set(a, b);
        *out = b;
    }
    unlock(a);
    return st;
}

ss_status ss_alloc_persistent_sizes(const ss_alloc_t *a, uint64_t *sizes, size_t cap, size_t *n) {
    SS_CHECK_ARG(!a || !n || (cap && !sizes), "ss_alloc_persistent_sizes: NULL argument");
    lock(a);
    size_t k = 0;
    for (const seg *s = a->segs; s; s = s->next)
        for (const struct ss_block *b = s->first; b; b = b->next)
            if (b->state == B_LIVE && b->lifetime == SS_LIFETIME_PERSISTENT) {
                if (k < cap) sizes[k] = b->size;
                k++;
            }
    unlock(a);
    *n = k;
    return SS_OK;
}

void *ss_block_ptr(const ss_block_t *b) {
    if (!b || !b->sg || !b->sg->dptr) return NULL;
    return (char *)b->sg->dptr + b->off;
}
uint64_t ss_block_offset(const ss_block_t *b) { return b && b->sg ? bva(b) : 0; }
uint64_t ss_block_size(const ss_block_t *b) { return b ? b->size : 0; }

/* Validates a handle to release: one of ours, and live. */
static ss_status check_live(const ss_alloc_t *a, const ss_block_t *b, const char *fn) {
    if (!block_owned(a, b)) {
        SS_ERROR("%s: %p is not a block of this allocator", fn, (const void *)b);
        return SS_ERR_STATE;
    }
    if (b->magic != SS_BLOCK_MAGIC || b->state != B_LIVE) {
        SS_ERROR("%s: block %p is not live (freed twice, or already released)", fn, (const void *)b);
        return SS_ERR_STATE;
    }
    return SS_OK;
}

ss_status ss_alloc_free(ss_alloc_t *a, ss_block_t *b) {
    SS_CHECK_ARG(!a || !b, "ss_alloc_free: NULL %s", !a ? "allocator" : "block");
    lock(a);
    ss_status st = check_live(a, b, "ss_alloc_free");
    ss_status gst = st == SS_OK ? guard_check(a, b, "ss_alloc_free") : SS_OK;
    if (st == SS_OK) {
        a->st.free_calls++;
        a->nlive--;
        a->live_bytes -= b->size;
        release_block(a, b, 0, 0);
    }
    unlock(a);
    return st != SS_OK ? st : gst;   /* an overrun: freed all the same, SS_ERR_CORRUPT */
}

/* Live -> pending (bytes stay in use). */
static void to_pending(ss_alloc_t *a, struct ss_block *b, int state, ss_event_t *e, double t_done) {
    a->st.free_calls++;
    a->nlive--;
    a->live_bytes -= b->size;
    a->pending_bytes += b->size;
    b->state = (uint8_t)state;
    b->ev = e;
    b->t_done = t_done;
}

static ss_status stock_locked(ss_alloc_t *a, struct ss_block *b, ss_event_t *e, double t_done) {
    to_pending(a, b, B_STOCK, e, t_done);
    b->qnext = NULL;
    if (a->stock_tail) a->stock_tail->qnext = b; else a->stock_head = b;
    a->stock_tail = b;
    a->nstock++;
    return SS_OK;
}

ss_status ss_alloc_free_at(ss_alloc_t *a, ss_block_t *b, uint64_t k, ss_event_t *e,
                           double t_done) {
    SS_CHECK_ARG(!a || !b, "ss_alloc_free_at: NULL %s", !a ? "allocator" : "block");
    lock(a);
    ss_status st = check_live(a, b, "ss_alloc_free_at");
    if (st == SS_OK) (void)guard_check(a, b, "ss_alloc_free_at");   /* logged and counted */
    if (st == SS_OK) {
        if (a->cfg.release_mode == SS_RELEASE_MODE_STOCK) {
            st = stock_locked(a, b, e, t_done);
        } else {
            b->k = k;
            b->seq = a->seq++;
            st = heap_push(a, b);   /* before the state change: a failure leaves b live */
            if (st == SS_OK) to_pending(a, b, B_DEFERRED, e, t_done);
        }
    }
    unlock(a);
    return st;
}

ss_status ss_alloc_free_stock(ss_alloc_t *a, ss_block_t *b, ss_event_t *e, double t_done) {
    SS_CHECK_ARG(!a || !b, "ss_alloc_free_stock: NULL %s", !a ? "allocator" : "block");
    lock(a);
    ss_status st = check_live(a, b, "ss_alloc_free_stock");
    if (st == SS_OK) (void)guard_check(a, b, "ss_alloc_free_stock");   /* logged and counted */
    if (st == SS_OK) st = stock_locked(a, b, e, t_done);
    unlock(a);
    return st;
}

ss_status ss_alloc_free_event(ss_alloc_t *a, ss_block_t *b, ss_event_t *e) {
    return ss_alloc_free_stock(a, b, e, 0.0);
}

ss_status ss_alloc_reach(ss_alloc_t *a, uint64_t k, ss_stream_t *s, double *wait_until) {
    SS_CHECK_ARG(!a, "ss_alloc_reach: allocator is NULL");
    if (wait_until) *wait_until = 0;
    lock(a);
    ss_status st = SS_OK;
    while (a->heap_n && a->heap[0]->k <= k) {
        struct ss_block *b = a->heap[0];
        st = release_deferred(a, b, s, wait_until);
        if (st != SS_OK) break;      /* b stays at the top, pending */
        heap_pop(a);
    }
    unlock(a);
    return st;
}

ss_status ss_alloc_release_early(ss_alloc_t *a, uint64_t *bytes) {
    SS_CHECK_ARG(!a, "ss_alloc_release_early: allocator is NULL");
    uint64_t sum = 0;
    ss_status st = SS_OK;
    lock(a);
    while (a->heap_n) {
        struct ss_block *b = a->heap[0];
        uint64_t sz = b->size;
        st = release_deferred(a, b, NULL, NULL);
        if (st != SS_OK) break;      /* b stays at the top, pending */
        heap_pop(a);
        a->st.early_releases++;
        sum += sz;
    }
    unlock(a);
    if (bytes) *bytes = sum;
    return st;
}

ss_status ss_alloc_release_block(ss_alloc_t *a, ss_block_t *b, uint64_t *bytes) {
    SS_CHECK_ARG(!a || !b, "ss_alloc_release_block: NULL %s", !a ? "allocator" : "block");
    if (bytes) *bytes = 0;
    lock(a);
    ss_status st = SS_OK;
    size_t i = 0;
    if (!block_owned(a, b) || b->magic != SS_BLOCK_MAGIC || b->state != B_DEFERRED) {
        SS_ERROR("ss_alloc_release_block: %p is not a deferred block of this allocator", (void *)b);
        st = SS_ERR_STATE;
    } else {
        while (i < a->heap_n && a->heap[i] != b) i++;
        SS_ASSERT(i < a->heap_n);
        uint64_t sz = b->size;
        st = release_deferred(a, b, NULL, NULL);   /* on an error b stays pending in the heap */
        if (st == SS_OK) {
            heap_remove_at(a, i);
            a->st.early_releases++;
            if (bytes) *bytes = sz;
        }
    }
    unlock(a);
    return st;
}

ss_status ss_alloc_park(ss_alloc_t *a) {
    SS_CHECK_ARG(!a, "ss_alloc_park: allocator is NULL");
    lock(a);
    seg *s = a->vm ? NULL : a->segs;   /* virtual-memory mode: contiguity needs no parking */
    while (s) {
        seg *nx = s->next;
        if (seg_is_free(s)) {
            free_remove(a, s->first);
            s->first->state = B_FREE;
            if (s->prev) s->prev->next = s->next; else a->segs = s->next;
            if (s->next) s->next->prev = s->prev; else a->segs_tail = s->prev;
            a->nsegs--;
            s->prev = NULL;
            s->next = a->parked;
            a->parked = s;
            a->nparked++;
            a->parked_bytes += s->size;
        }
        s = nx;
    }
    unlock(a);
    return SS_OK;
}

ss_status ss_alloc_trim(ss_alloc_t *a) {
    SS_CHECK_ARG(!a, "ss_alloc_trim: allocator is NULL");
    lock(a);
    ss_status st = trim_locked(a, NULL);
    unlock(a);
    return st;
}

/* ---- stats ------------------------------------------------------------------------------- */

ss_status ss_alloc_get_config(const ss_alloc_t *a, ss_alloc_config *out) {
    SS_CHECK_ARG(!a || !out, "ss_alloc_get_config: NULL argument");
    lock(a);
    *out = a->cfg;
    out->budget_bytes = a->budget;
    unlock(a);
    return SS_OK;
}

ss_status ss_alloc_get_stats(const ss_alloc_t *a, ss_alloc_stats *out) {
    SS_CHECK_ARG(!a || !out, "ss_alloc_get_stats: NULL argument");
    lock(a);
    *out = a->st;
    out->budget_bytes = a->budget;
    out->in_use_bytes = a->live_bytes + a->pending_bytes;
    out->pending_bytes = a->pending_bytes;
    out->reserved_bytes = a->reserved;
    out->cached_bytes = a->free_bytes + a->parked_bytes;
    out->live_blocks = a->nlive;
    out->pending_blocks = a->heap_n + a->nstock;
    out->segments = a->nsegs + a->nparked;
    out->parked_bytes = a->parked_bytes;
    out->clock_s = clock_now((ss_alloc_t *)a);
    if (a->vm) out->cached_bytes = a->reserved - out->in_use_bytes;
    out->largest_free_bytes = largest_free_locked(a);
    out->slack_bytes = a->reserved - out->in_use_bytes;
    out->granule_bytes = a->vm ? a->G : 0;
    out->granules_mapped = a->mapped;
    out->granules_cached = a->cached_g;
    unlock(a);
    return SS_OK;
}

uint64_t ssi_alloc_in_use(const ss_alloc_t *a) {
    if (!a) return 0;
    lock(a);
    uint64_t now = a->live_bytes + a->pending_bytes;
    unlock(a);
    return now;
}

ss_status ss_alloc_window_peak(ss_alloc_t *a, uint64_t *peak, uint64_t *in_use) {
    SS_CHECK_ARG(!a || !peak, "ss_alloc_window_peak: NULL argument");
    lock(a);
    uint64_t now = a->live_bytes + a->pending_bytes;
    *peak = a->win_peak > now ? a->win_peak : now;
    if (in_use) *in_use = now;
    a->win_peak = now;
    unlock(a);
    return SS_OK;
}

ss_status ss_alloc_window_reserved(ss_alloc_t *a, uint64_t *peak) {
    SS_CHECK_ARG(!a || !peak, "ss_alloc_window_reserved: NULL argument");
    lock(a);
    *peak = a->win_reserved > a->reserved ? a->win_reserved : a->reserved;
    a->win_reserved = a->reserved;
    unlock(a);
    return SS_OK;
}

ss_status ss_alloc_stats_format(const ss_alloc_stats *s, char *buf, size_t len) {
    SS_CHECK_ARG(!s || !buf || len == 0, "ss_alloc_stats_format: NULL argument");
    char b[6][32];
    double mean = s->reuse_count ? s->reuse_total_s / (double)s->reuse_count : 0.0;
    int w = snprintf(buf, len,
        "budget           %s\n"
        "in use           %s (%" PRIu64 " bytes; %" PRIu64 " live blocks, %" PRIu64 " pending)\n"
        "peak in use      %s (%" PRIu64 " bytes)\n"
        "pending release  %s\n"
        "reserved         %s (%" PRIu64 " segments; peak %s)\n"
        "cached           %s\n"
        "alloc calls      %" PRIu64 "\n"
        "free calls       %" PRIu64 "\n"
        "cache hits       %" PRIu64 "\n"
        "segment allocs   %" PRIu64 "\n"
        "segment frees    %" PRIu64 "\n"
        "oom trims        %" PRIu64 "\n"
        "evict calls      %" PRIu64 "\n"
        "oom errors       %" PRIu64 "\n"
        "deferred release %" PRIu64 "\n"
        "event queries    %" PRIu64 "\n"
        "waits            %" PRIu64 "\n"
        "reuse interval   %" PRIu64 " reuses, mean %.3f us, max %.3f us\n"
        "largest free run %s\n"
        "reserved-in use  %s\n",
        s->budget_bytes == UINT64_MAX ? "unbounded" : ss_format_size(s->budget_bytes, b[0], 32),
        ss_format_size(s->in_use_bytes, b[1], 32), s->in_use_bytes, s->live_blocks, s->pending_blocks,
        ss_format_size(s->peak_in_use_bytes, b[2], 32), s->peak_in_use_bytes,
        ss_format_size(s->pending_bytes, b[3], 32),
        ss_format_size(s->reserved_bytes, b[4], 32), s->segments,
        ss_format_size(s->peak_reserved_bytes, b[5], 32),
        ss_format_size(s->cached_bytes, b[0], 32),
        s->alloc_calls, s->free_calls, s->cache_hits, s->segment_allocs, s->segment_frees,
        s->oom_trims, s->evict_calls, s->oom_errors, s->deferred_releases, s->event_queries,
        s->waits, s->reuse_count, mean * 1e6, s->reuse_max_s * 1e6,
        ss_format_size(s->largest_free_bytes, b[1], 32), ss_format_size(s->slack_bytes, b[2], 32));
    if (w < 0 || (size_t)w >= len) return SS_ERR_INVALID;
    if (s->granule_bytes) {
        size_t u = (size_t)w;
        int w2 = snprintf(buf + u, len - u,
                          "granules         %" PRIu64 " mapped (%" PRIu64 " cached) of %s; %" PRIu64
                          " maps, %" PRIu64 " unmaps, %" PRIu64 " busy; %" PRIu64 " guard overruns\n",
                          s->granules_mapped, s->granules_cached,
                          ss_format_size(s->granule_bytes, b[3], 32), s->granule_maps,
                          s->granule_unmaps, s->granules_busy, s->guard_overruns);
        if (w2 < 0 || (size_t)w2 >= len - u) return SS_ERR_INVALID;
    }   /* truncated (buf still terminated) */
    return SS_OK;
}

/* ---- invariant walker -------------------------------------------------------------------- */

#define CHECK_INV(cond, ...) \
    do { if (!(cond)) { SS_ERROR("alloc check: " __VA_ARGS__); return SS_ERR_CORRUPT; } } while (0)

/* Walks the treap: order, heap priorities, every node free; counts nodes and bytes. */
static ss_status check_treap(const struct ss_block *t, const struct ss_block *lo,
                             const struct ss_block *hi, uint64_t depth, uint64_t *n, uint64_t *bytes) {
    if (!t) return SS_OK;
    CHECK_INV(depth < 4096, "treap deeper than 4096");
    CHECK_INV(t->magic == SS_BLOCK_MAGIC && t->state == B_FREE, "treap node %p not a free block",
              (const void *)t);
    CHECK_INV(!lo || key_less(lo, t), "treap order broken at %p", (const void *)t);
    CHECK_INV(!hi || key_less(t, hi), "treap order broken at %p", (const void *)t);
    CHECK_INV(!t->left || t->left->prio <= t->prio, "treap priority broken");
    CHECK_INV(!t->right || t->right->prio <= t->prio, "treap priority broken");
    (*n)++;
    *bytes += t->size;
    ss_status st = check_treap(t->left, lo, t, depth + 1, n, bytes);
    if (st != SS_OK) return st;
    return check_treap(t->right, t, hi, depth + 1, n, bytes);
}

ss_status ss_alloc_check(const ss_alloc_t *a) {
    SS_CHECK_ARG(!a, "ss_alloc_check: allocator is NULL");
    lock(a);
    ss_status st = SS_OK;
    uint64_t live = 0, live_n = 0, pend = 0, fr = 0, fr_n = 0, res = 0, nseg = 0, deferred = 0, stock = 0;
    uint64_t last_end = 0;
    uint32_t *vref = NULL;
    uint64_t vmapped = 0, vcached = 0, vsmall = 0, vlarge = 0;
#define REQUIRE(cond, ...) do { if (!(cond)) { SS_ERROR("alloc check: " __VA_ARGS__); st = SS_ERR_CORRUPT; goto out; } } while (0)
    for (const seg *s = a->segs; s; s = s->next) {
        nseg++;
        REQUIRE(s->va >= last_end || nseg == 1, "segment at %" PRIu64 " overlaps the previous one", s->va);
        REQUIRE(s->size > 0 && s->size % SS_ALLOC_ALIGN == 0, "segment size %" PRIu64 " not aligned", s->size);
        REQUIRE(!s->next || s->next->prev == s, "segment list links broken");
        REQUIRE((s->dptr != NULL) == (a->dev != NULL), "segment device pointer does not match the mode");
        REQUIRE(a->vm || s->pool == 0, "segment mode with a pool");
        last_end = s->va + s->size;
        res += s->size;
        uint64_t off = 0;
        const struct ss_block *prev = NULL;
        if (a->vm) {
            REQUIRE(s->size % a->G == 0, "reservation not a multiple of the granule");
            free(vref);
            vref = calloc((size_t)(s->size / a->G), sizeof *vref);
            REQUIRE(vref != NULL, "no host memory for the walk");
        }
        for (const struct ss_block *b = s->first; b; b = b->next) {
            REQUIRE(b->magic == SS_BLOCK_MAGIC && b->sg == s, "block %p not in its segment", (const void *)b);
            REQUIRE(b->prev == prev, "block %p: prev link broken", (const void *)b);
            REQUIRE(b->off == off, "block at %" PRIu64 " leaves a gap or overlaps (expected %" PRIu64 ")", b->off, off);
            REQUIRE(b->size > 0 && b->size % SS_ALLOC_ALIGN == 0, "block size %" PRIu64 " not aligned", b->size);
            REQUIRE(b->size <= s->size - off, "block runs past its segment");
            switch (b->state) {
            case B_FREE:
                REQUIRE(!mergeable(a, b, prev), "two adjacent free blocks not coalesced at %" PRIu64, bva(b));
                if (a->vm && s->pool == POOL_SMALL) {
                    uint32_t cls = gcls_at(a, s, b->off);
                    REQUIRE(cls ? (b->off + b->size - 1) / a->G == b->off / a->G
                                : b->off % a->G == 0 && b->size % a->G == 0,
                            "a free small-pool block at %" PRIu64 " crosses its granule's class", bva(b));
                    for (uint64_t g = b->off / a->G; !cls && g < (b->off + b->size) / a->G; g++)
                        REQUIRE(!s->gcls[g], "an empty granule's block covers a granule of a class");
                }
                fr += b->size; fr_n++; break;
            case B_LIVE: live += b->size; live_n++; break;
            case B_DEFERRED: pend += b->size; deferred++; break;
            case B_STOCK: pend += b->size; stock++; break;
            default: REQUIRE(0, "dead block %p in a segment", (const void *)b);
            }
            if (a->vm && b->state != B_FREE) {
                uint64_t g0 = b->off / a->G, g1 = (b->off + b->size + a->G - 1) / a->G;
                for (uint64_t g = g0; g < g1; g++) {
                    REQUIRE(s->gmap[g], "a block at %" PRIu64 " touches an unmapped granule", bva(b));
                    vref[g]++;
                }
                if (s->pool == POOL_SMALL) {
                    REQUIRE(g1 == g0 + 1, "a small block straddles granules");
                    uint32_t cls = s->gcls[g0];
                    REQUIRE(cls && small_class(a, b->size) == cls && (b->off % a->G) % small_slot(a, cls) == 0 &&
                            b->off % a->G + small_slot(a, cls) <= cls * small_slot(a, cls),
                            "a small block at %" PRIu64 " is not in a slot of its class", bva(b));
                }
                else if (s->pool == POOL_ITER) { REQUIRE(b->off % a->G == 0, "a large block not at a granule boundary");
                       vlarge += g1 - g0; }
            }
            off += b->size;
            prev = b;
        }
        REQUIRE(off == s->size, "blocks sum to %" PRIu64 ", segment is %" PRIu64, off, s->size);
        if (a->vm) {
            for (uint64_t g = 0; g < s->size / a->G; g++) {
                REQUIRE(vref[g] == s->gref[g], "granule %" PRIu64 " counts %u blocks, walk %u", g,
                        s->gref[g], vref[g]);
                REQUIRE(s->pool != POOL_SMALL || !s->gcls[g] == !s->gref[g],
                        "small-pool granule %" PRIu64 ": class %u with %u blocks", g, s->gcls[g], s->gref[g]);
                vmapped += s->gmap[g];
                vcached += s->gmap[g] && !s->gref[g];
                if (s->pool != POOL_ITER) vsmall += s->gref[g] > 0;
            }
            free(vref);
            vref = NULL;
        }
    }
    REQUIRE(nseg == a->nsegs, "segment count %" PRIu64 " vs %" PRIu64, nseg, a->nsegs);
    {
        uint64_t np = 0, pb = 0;
        for (const seg *s = a->parked; s; s = s->next) {
            REQUIRE(np < a->nparked, "parked list longer than its count");
            REQUIRE(s->first && s->first->magic == SS_BLOCK_MAGIC && s->first->sg == s &&
                    s->first->state == B_FREE && s->first->size == s->size && !s->first->next,
                    "parked segment of %" PRIu64 " bytes is not one free block", s->size);
            REQUIRE((s->dptr != NULL) == (a->dev != NULL), "parked segment device pointer does not match the mode");
            np++;
            pb += s->size;
        }
        REQUIRE(np == a->nparked && pb == a->parked_bytes, "parked count/bytes do not add up");
        res += pb;
    }
    if (a->vm) {
        REQUIRE(vmapped == a->mapped && vcached == a->cached_g, "mapped/cached granules do not add up");
        REQUIRE(vsmall == a->nsmall_g && vlarge == a->large_g, "the out-of-memory rule's counts do not add up");
        REQUIRE(a->reserved == a->mapped * a->G, "reserved is not the mapped granules");
        REQUIRE(a->mapped <= a->nb, "%" PRIu64 " granules mapped, budget %" PRIu64, a->mapped, a->nb);
        REQUIRE(a->nparked == 0, "parked segments in virtual-memory mode");
        REQUIRE(live + pend + fr == res, "blocks do not tile the reservations");
        res = a->reserved;   /* from here on: the mapped bytes */
    }
    REQUIRE(res == a->reserved, "reserved %" PRIu64 " vs segments %" PRIu64, a->reserved, res);
    REQUIRE(res <= a->budget, "reserved %" PRIu64 " above the budget", res);
    REQUIRE(live == a->live_bytes && live_n == a->nlive, "live bytes/blocks do not add up");
    REQUIRE(pend == a->pending_bytes, "pending bytes do not add up");
    REQUIRE(fr == a->free_bytes && fr_n == a->nfree, "free bytes/blocks do not add up");
    REQUIRE(a->vm || live + pend + fr + a->parked_bytes == res, "in use + cached != reserved");
    REQUIRE(deferred == a->heap_n, "deferred heap holds %zu, segments %" PRIu64, a->heap_n, deferred);
    REQUIRE(stock == a->nstock, "stock queue count broken");
    for (size_t i = 0; i < a->heap_n; i++) {
        REQUIRE(a->heap[i]->state == B_DEFERRED, "heap entry not deferred");
        REQUIRE(i == 0 || !heap_less(a->heap[i], a->heap[(i - 1) / 2]), "heap order broken");
    }
    {
        uint64_t q = 0;
        const struct ss_block *last = NULL;
        for (const struct ss_block *b = a->stock_head; b; b = b->qnext) {
            REQUIRE(b->state == B_STOCK && q < a->nstock, "stock queue broken");
            q++;
            last = b;
        }
        REQUIRE(q == a->nstock && last == a->stock_tail, "stock queue length/tail broken");
    }
    {
        uint64_t n = 0, bytes = 0;
        for (int p = 0; p < NPOOL && st == SS_OK; p++) {
            st = check_treap(a->roots[p], NULL, NULL, 0, &n, &bytes);
            for (const struct ss_block *t = a->roots[p]; t && st == SS_OK; t = t->left)
                REQUIRE(t->sg->pool == p, "a free block in another pool's treap");
        }
        for (uint64_t c = 0; a->vm && c <= a->G / SS_ALLOC_ALIGN && st == SS_OK; c++) {
            st = check_treap(a->sroots[c], NULL, NULL, 0, &n, &bytes);
            for (const struct ss_block *t = a->sroots[c]; t && st == SS_OK; t = t->left)
                REQUIRE(t->sg->pool == POOL_SMALL && gcls_at(a, t->sg, t->off) == c,
                        "a free block in another class's treap");
        }
        if (st != SS_OK) goto out;
        REQUIRE(n == fr_n && bytes == fr, "treap holds %" PRIu64 " blocks, segments %" PRIu64 " free", n, fr_n);
    }
#undef REQUIRE
out:
    free(vref);
    unlock(a);
    return st;
}
