/* device-cpusim.c: the "cpu-sim" device backend. "Device" memory is one host arena under a
 * capacity limit (256-byte aligned blocks, guard bytes after each, the NaN poison pattern in
 * freed and fresh blocks); copies take latency + bytes / bandwidth (+ seeded jitter) on one
 * copy engine per direction; events order work across streams. Three clocks:
 *   - real clock (the default): no thread is started. Streams and engines keep computed
 *     timelines (as on the virtual clock) and the host clock is the real one: every call into
 *     the device lands the copies that ended by now (lz_tick), and a host wait for a later time
 *     sleeps until then (lz_wait_to). A copy costs the host only its memmove, and no thread
 *     competes with the compute threads for a core (docs/performance-model.md).
 *   - stream threads (option sim-threads): each stream is a FIFO served by its own thread,
 *     which also runs its copies (the model before 2026-12-06).
 *   - virtual clock: no thread is started and nothing sleeps: every operation is accounted at
 *     once in the caller and its completion time is computed; the host's clock moves only when
 *     it waits or computes on the host stream.
 * On every clock a copy's bytes move when the host's clock reaches the copy's end, so poisoning
 * catches a block reused under a copy that would still be running.
 *
 * Locking: one mutex (d->mu) per device guards all queues, event states, the engines'
 * timelines, the free list and the virtual clocks. Copies (memcpy) and simulated durations
 * (sleeps) run outside the lock.
 * Waiting, with stream threads: a hand-off wakes only a thread that can make progress. Each thread
 * or waiter sleeps on a condition variable of its own kind, all under d->mu:
 *   stream->cv      the stream thread: new ops (signalled when its queue was empty), stop
 *   stream->sync_cv host threads in stream_sync; broadcast once fin reaches sync_min, the
 *                   smallest target any of them waits for
 *   event->cv       stream threads waiting on the event and host threads in event_sync /
 *                   event_free; broadcast when a generation completes or pending drops to 0,
 *                   and only while nwait says someone sleeps there
 *
 * Copy timing with stream threads: each engine keeps its own timeline, as a DMA engine does. A
 * copy starts when its stream gets to it (at submission, on an idle stream) or when the
 * engine's previous copy ends, whichever is later, and ends its duration after that; the
 * thread that runs it sleeps until that end (less the engine's measured memmove time), then
 * moves the bytes. So the thread's wake-up latency and the sleeps' overshoot (timer slack, 50 us
 * by default on Linux, which the stream threads lower to 1 us where they can) do not add to
 * every copy: measured on the reference trainer before this, each copy ended 75 us late on
 * average and started 30-40 us late, about 0.1 ms a copy, which at a 450 GB/s-class link cut
 * the engines' throughput to about 60 % of the link's.
 * Work submitted to an idle stream that needs no waiting runs in the submitter (idle_run): a
 * record, a wait for a completed event, and a copy that would not sleep (its end no later than
 * its memmove can finish: links about as fast as memmove, or faster). Before this (2026-12-06),
 * a copy on such a link cost four thread switches (stream thread, a separate engine thread and
 * back), and on this 2-core machine under load its waits for a core made smartswap's step on a
 * 1e6 GB/s link 1.09-1.29x none's (1.02-1.04x after; bench/results/bench-train-2026-12-06.txt).
 */
#include "device-impl.h"

#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#define SIM_ALIGN 256u
#define SIM_GUARD 32u           /* at least this many guard bytes follow each block */
#define SIM_GUARD_BYTE 0xA5u

enum { ENG_H2D = 0, ENG_D2H = 1, ENG_N = 2 };
typedef enum { OP_COPY, OP_COMPUTE, OP_RECORD, OP_WAIT } op_kind;

struct sim_event;

/* One piece of enqueued work. */
typedef struct sim_op {
    op_kind k;
    void *dst;
    const void *src;
    size_t n;
    int eng;
    ss_copy_kind kind;          /* copy */
    double seconds;             /* compute */
    struct sim_event *ev;       /* record / wait */
    uint64_t gen;               /* record: the generation it completes; wait: waited for */
    double end;                 /* copy, real clock: its end once given to the engine; 0: not yet */
    struct sim_op *next;
    struct sim_op *fl_prev, *fl_next; /* copy, real clock: the in-flight list (ss_vm_unmap) */
} sim_op;

typedef struct sim_dev sim_dev;

typedef struct sim_stream {
    sim_dev *d;
    int host;                   /* the host stream: work runs in the caller */
    pthread_t th;
    sim_op *head, *tail;        /* FIFO; the head is the op being run */
    uint64_t enq, fin;          /* ops enqueued / finished */
    int quit;
    int inl;                    /* the head is a copy its submitter runs (idle_run) */
    pthread_cond_t cv;          /* the stream thread waits here */
    pthread_cond_t sync_cv;     /* host threads in stream_sync wait here */
    uint64_t sync_min;          /* smallest fin a stream_sync waits for; UINT64_MAX: none */
    double vtail;               /* virtual clock: when the stream's last op ends */
} sim_stream;

typedef struct sim_event {
    uint64_t rec_gen;           /* records enqueued so far */
    uint64_t done_gen;          /* highest generation completed */
    double time;                /* device time of done_gen's completion (real clock) */
    double vtime;               /* virtual clock: completion time of the last record */
    int pending;                /* queued ops naming this event */
    pthread_cond_t cv;          /* waiters for done_gen or pending == 0 */
    int nwait;                  /* threads sleeping on cv */
} sim_event;

typedef struct sim_engine {
    double gbps;
    double end;                 /* real clock: when the last copy given to the engine ends */
    double sec_per_byte;        /* real clock: the measured memmove cost */
    double vfree;               /* virtual clock: when the engine is next free */
} sim_engine;

typedef struct sim_range { size_t off, len; } sim_range;

/* Virtual clock: a copy whose bytes move when the host clock reaches its end. */
typedef struct vcopy { double end; uint64_t seq; void *dst; const void *src; size_t n; int eng; } vcopy;

struct sim_dev {
    pthread_mutex_t mu;
    unsigned char *arena;
    size_t cap, map_len, used;
    sim_range *freel;           /* free ranges of the arena, sorted by offset, coalesced */
    size_t nfree, freecap;
    sim_engine eng[ENG_N];
    int virt;
    int lazy;                   /* real clock with computed copy times, no threads (the default) */
    double lat, jitter;
    ssi_rng rng;
    double t_open;
    double host_vt;             /* virtual clock of the host */
    vcopy *vq;                  /* virtual clock: copies not yet landed, a min-heap on (end, seq) */
    size_t nvq, vqcap;
    uint64_t vseq;
    /* virtual memory: the arena is a memfd mapped shared, so a range of it (the physical
     * memory) can also be mapped at an address of a reservation */
    int memfd;                  /* -1: anonymous arena, no vm slots */
    size_t page;
    sim_op *inflight;           /* real clock: copies submitted and not finished */
    ssi_ptr_table vmoff;        /* mapped address -> arena offset */
    sim_range *vres;            /* live reservations (off = address) */
    size_t nvres, vrescap;
};

static double sim_now_locked(sim_dev *d) { return d->virt ? d->host_vt : ssi_now() - d->t_open; }
static double dmax(double a, double b) { return a > b ? a : b; }
/* computed copy times: the virtual clock and the default real clock (no stream threads) */
static int computed(const sim_dev *d) { return d->virt || d->lazy; }

/* ---- virtual clock: copies land at their end ------------------------------------------------
 * As on the real clock, a copy's bytes move at the end of its time: a reader that did not wait
 * for it sees the old contents (poison), and a source reused (poisoned, overwritten) before the
 * end changes what lands. The end is reached when the host clock passes it (a sync, a wait of
 * the host stream, host-stream work); copies land in order of (end, submission), so a copy
 * ordered after another (an H2D after the D2H it waited for) lands after it. Caller holds mu. */
static int vq_less(const vcopy *a, const vcopy *b) {
    return a->end < b->end || (a->end == b->end && a->seq < b->seq);
}

static void vq_land(sim_dev *d) {
    while (d->nvq && d->vq[0].end <= d->host_vt) {
        vcopy c = d->vq[0], last = d->vq[--d->nvq];
        size_t i = 0, n = d->nvq;
        for (;;) {
            size_t k = 2 * i + 1;
            if (k >= n) break;
            if (k + 1 < n && vq_less(&d->vq[k + 1], &d->vq[k])) k++;
            if (!vq_less(&d->vq[k], &last)) break;
            d->vq[i] = d->vq[k];
            i = k;
        }
        if (n) d->vq[i] = last;
        double t0 = d->lazy && c.n >= 65536 ? ssi_now() : 0;
        memmove(c.dst, c.src, c.n);
        if (t0 > 0)   /* learn the memmove speed, so that a wait for a copy ends at its end */
            d->eng[c.eng].sec_per_byte = 0.5 * d->eng[c.eng].sec_per_byte + 0.5 * (ssi_now() - t0) / (double)c.n;
    }
}

/* Queues a copy ending at `end` (lands now if the host clock is already there). On a host
 * memory failure the copy lands at once (as before this queue existed). */
static void vq_push(sim_dev *d, void *dst, const void *src, size_t n, double end, int eng) {
    if (end <= d->host_vt || ssi_grow(&d->vq, &d->vqcap, d->nvq + 1, sizeof *d->vq) != SS_OK) {
        vq_land(d);
        memmove(dst, src, n);
        return;
    }
    vcopy c = {end, d->vseq++, dst, src, n, eng};
    size_t i = d->nvq++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!vq_less(&c, &d->vq[p])) break;
        d->vq[i] = d->vq[p];
        i = p;
    }
    d->vq[i] = c;
}

/* Moves the host clock forward to t (never back) and lands the copies that ended by then. */
static void vhost_to(sim_dev *d, double t) {
    if (t > d->host_vt) d->host_vt = t;
    vq_land(d);
}

/* ---- real clock, computed copy times (the default) -------------------------------------------
 * The streams and engines keep the virtual clock's timelines, but the host clock is the real
 * one: every call into the device first moves it to now (lz_tick), landing the copies that ended
 * by then, and a wait for a later time sleeps until then. So no thread is started, a copy costs
 * the host only its memmove, and nothing competes with the compute threads for a core. Caller
 * holds mu. */
static void lz_tick(sim_dev *d) {
    if (d->lazy) vhost_to(d, ssi_now() - d->t_open);
}

/* The same where only landed bytes matter (allocations, frees, poison): nothing to land, no
 * clock read. */
static void lz_land(sim_dev *d) {
    if (d->lazy && d->nvq) vhost_to(d, ssi_now() - d->t_open);
}

/* The host waits until device time t (caller holds mu, released while it sleeps). The wait
 * ends early by the memmove time of the copies that land at its end, so that they have landed
 * by t; the last 100 us are spun (a sleep's wake-up can be 50 us or more late). */
static void lz_wait_to(sim_dev *d, double t) {
    double mv = 0;
    for (size_t i = 0; i < d->nvq; i++)
        if (d->vq[i].end <= t) mv += (double)d->vq[i].n * d->eng[d->vq[i].eng].sec_per_byte;
    double until = t - mv, left = until - (ssi_now() - d->t_open);
    if (left > 0) {
        pthread_mutex_unlock(&d->mu);
        if (left > 150e-6) ssi_sleep(left - 100e-6);
        while (ssi_now() - d->t_open < until) {}
        pthread_mutex_lock(&d->mu);
    }
    vhost_to(d, dmax(t, ssi_now() - d->t_open));
}

/* The host clock to t: computed on the virtual clock, waited for on the real one. */
static void host_to(sim_dev *d, double t) {
    if (d->lazy) lz_wait_to(d, t); else vhost_to(d, t);
}

/* Seconds a copy of n bytes on engine e takes; draws jitter (caller holds mu). */
static double copy_seconds(sim_dev *d, int e, size_t n, ss_copy_kind kind) {
    double gbps = d->eng[e].gbps;
    if (kind == SS_COPY_D2D) gbps = dmax(d->eng[ENG_H2D].gbps, d->eng[ENG_D2H].gbps);
    double t = d->lat + (double)n / (gbps * 1e9);
    if (d->jitter > 0) t += d->jitter * ssi_rng_unit(&d->rng);
    return t;
}

static int engine_of(ss_copy_kind k) { return k == SS_COPY_H2D ? ENG_H2D : ENG_D2H; }

/* ---------------------------------------------------------------------------------------- */
/* poison and guard patterns                                                                 */

/* The poison pattern as bytes: SS_POISON_WORD is stored at every 4-aligned address, so the
 * byte at address a is b[a & 3]; POISON_CHUNK + 4 bytes of the repeated word let a chunk that
 * starts at any address be copied from (or compared with) b + (a & 3). */
#define POISON_CHUNK 64u
typedef struct poison_pat { unsigned char b[POISON_CHUNK + 4]; } poison_pat;

static void poison_pattern(poison_pat *pp) {
    uint32_t w = SS_POISON_WORD;
    for (size_t i = 0; i < sizeof pp->b; i += 4) memcpy(pp->b + i, &w, 4);
}

static void poison_fill(unsigned char *p, size_t n) {
    poison_pat pp;
    poison_pattern(&pp);
    const unsigned char *src = pp.b + ((uintptr_t)p & 3);   /* chunks are multiples of 4 */
    size_t i = 0;
    for (; i + POISON_CHUNK <= n; i += POISON_CHUNK) memcpy(p + i, src, POISON_CHUNK);
    if (i < n) memcpy(p + i, src, n - i);
}

static size_t poison_count_bad(const unsigned char *p, size_t n) {
    poison_pat pp;
    poison_pattern(&pp);
    const unsigned char *src = pp.b + ((uintptr_t)p & 3);
    size_t bad = 0, i = 0;
    for (; i + POISON_CHUNK <= n; i += POISON_CHUNK) {
        uint64_t diff = 0;    /* a fixed-length word loop: the compiler unrolls and vectorises it */
        for (size_t k = 0; k < POISON_CHUNK; k += 8) {
            uint64_t x, y;
            memcpy(&x, p + i + k, 8);
            memcpy(&y, src + k, 8);
            diff |= x ^ y;
        }
        if (diff)
            for (size_t k = 0; k < POISON_CHUNK; k++) bad += p[i + k] != src[k];
    }
    for (size_t k = 0; i + k < n; k++) bad += p[i + k] != src[k];
    return bad;
}

static size_t footprint(size_t n) { return (n + SIM_GUARD + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN; }

/* ---------------------------------------------------------------------------------------- */
/* arena: first fit over a sorted, coalesced free list                                       */

static void sim_close(void *ctx);

static ss_status sim_mem_info(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes) {
    sim_dev *d = ctx;
    pthread_mutex_lock(&d->mu);
    *free_bytes = d->cap - d->used;
    *total_bytes = d->cap;
    pthread_mutex_unlock(&d->mu);
    return SS_OK;
}

/* First fit of `foot` bytes in the arena (caller holds mu): 1 and *off, or 0 when full. */
static int arena_take(sim_dev *d, size_t foot, size_t *off) {
    for (size_t i = 0; i < d->nfree; i++) {
        if (d->freel[i].len < foot) continue;
        *off = d->freel[i].off;
        d->freel[i].off += foot;
        d->freel[i].len -= foot;
        if (!d->freel[i].len) {
            memmove(d->freel + i, d->freel + i + 1, (d->nfree - i - 1) * sizeof *d->freel);
            d->nfree--;
        }
        d->used += foot;
        return 1;
    }
    return 0;
}

/* First fit of `foot` bytes at an offset that is a multiple of `align` (caller holds mu); the
 * pad before it stays free. 1 and *off, or 0 when nothing fits (or no host memory). */
static int arena_take_aligned(sim_dev *d, size_t foot, size_t align, size_t *off) {
    for (size_t i = 0; i < d->nfree; i++) {
        size_t o = d->freel[i].off, len = d->freel[i].len;
        size_t a = (o + align - 1) / align * align;
        if (a - o > len || len - (a - o) < foot) continue;
        size_t tail = len - (a - o) - foot;
        if (a == o) {
            d->freel[i].off += foot;
            d->freel[i].len -= foot;
            if (!d->freel[i].len) {
                memmove(d->freel + i, d->freel + i + 1, (d->nfree - i - 1) * sizeof *d->freel);
                d->nfree--;
            }
        } else if (tail) {
            if (ssi_grow(&d->freel, &d->freecap, d->nfree + 1, sizeof *d->freel) != SS_OK) return 0;
            memmove(d->freel + i + 2, d->freel + i + 1, (d->nfree - i - 1) * sizeof *d->freel);
            d->freel[i + 1].off = a + foot;
            d->freel[i + 1].len = tail;
            d->nfree++;
        }
        if (a != o) d->freel[i].len = a - o;
        d->used += foot;
        *off = a;
        return 1;
    }
    return 0;
}

/* Gives [off, off+foot) back, coalescing with its neighbours (caller holds mu). On a host
 * memory failure the range is lost to the arena (counted as used), but nothing breaks. */
static ss_status arena_give(sim_dev *d, size_t off, size_t foot) {
    size_t lo = 0, hi = d->nfree;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (d->freel[mid].off < off) lo = mid + 1; else hi = mid;
    }
    int joined_prev = lo > 0 && d->freel[lo - 1].off + d->freel[lo - 1].len == off;
    int joined_next = lo < d->nfree && off + foot == d->freel[lo].off;
    ss_status st = SS_OK;
    if (joined_prev && joined_next) {
        d->freel[lo - 1].len += foot + d->freel[lo].len;
        memmove(d->freel + lo, d->freel + lo + 1, (d->nfree - lo - 1) * sizeof *d->freel);
        d->nfree--;
    } else if (joined_prev) {
        d->freel[lo - 1].len += foot;
    } else if (joined_next) {
        d->freel[lo].off = off;
        d->freel[lo].len += foot;
    } else if ((st = ssi_grow(&d->freel, &d->freecap, d->nfree + 1, sizeof *d->freel)) == SS_OK) {
        memmove(d->freel + lo + 1, d->freel + lo, (d->nfree - lo) * sizeof *d->freel);
        d->freel[lo].off = off;
        d->freel[lo].len = foot;
        d->nfree++;
    }
    if (st == SS_OK) d->used -= foot;
    else SS_ERROR("cpu-sim: no host memory to record a freed range of %zu bytes", foot);
    return st;
}

static ss_status sim_mem_alloc(void *ctx, size_t n, void **out) {
    sim_dev *d = ctx;
    if (n > d->cap) return SS_ERR_OOM;
    size_t foot = footprint(n), off = 0;
    pthread_mutex_lock(&d->mu);
    lz_land(d);
    int found = arena_take(d, foot, &off);
    pthread_mutex_unlock(&d->mu);
    if (!found) {
        SS_DEBUGF("cpu-sim: out of memory for %zu bytes", n);
        return SS_ERR_OOM;
    }
    /* the block is the caller's now: fill outside the lock */
    poison_fill(d->arena + off, n);
    memset(d->arena + off + n, SIM_GUARD_BYTE, foot - n);
    *out = d->arena + off;
    return SS_OK;
}

static ss_status sim_mem_free(void *ctx, void *p, size_t n) {
    sim_dev *d = ctx;
    unsigned char *b = p;
    size_t off = (size_t)(b - d->arena), foot = footprint(n), bad = 0;
    for (size_t i = n; i < foot; i++) bad += b[i] != SIM_GUARD_BYTE;
    pthread_mutex_lock(&d->mu);
    lz_land(d);   /* copies from the block that ended land before it is poisoned */
    pthread_mutex_unlock(&d->mu);
    poison_fill(b, foot);
    pthread_mutex_lock(&d->mu);
    arena_give(d, off, foot);
    pthread_mutex_unlock(&d->mu);
    if (bad) {
        SS_ERROR("cpu-sim: block %p of %zu bytes: %zu guard bytes overwritten (buffer overrun)",
                 p, n, bad);
        return SS_ERR_CORRUPT;
    }
    return SS_OK;
}

/* ---- virtual memory: reservations, granules mapped from the memfd arena ------------------ */

static ss_status sim_vm_reserve(void *ctx, size_t n, void **va) {
    sim_dev *d = ctx;
    /* PROT_NONE, no swap reserved: an address range nothing else can be mapped into */
    void *m = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        SS_ERROR("cpu-sim: cannot reserve %zu bytes of address space: %s", n, strerror(errno));
        return SS_ERR_HOST_OOM;
    }
    pthread_mutex_lock(&d->mu);
    ss_status st = ssi_grow(&d->vres, &d->vrescap, d->nvres + 1, sizeof *d->vres);
    if (st == SS_OK) {
        d->vres[d->nvres].off = (size_t)(uintptr_t)m;
        d->vres[d->nvres].len = n;
        d->nvres++;
    }
    pthread_mutex_unlock(&d->mu);
    if (st != SS_OK) { munmap(m, n); return st; }
    *va = m;
    return SS_OK;
}

static ss_status sim_vm_release(void *ctx, void *va, size_t n) {
    sim_dev *d = ctx;
    pthread_mutex_lock(&d->mu);
    for (size_t i = 0; i < d->nvres; i++)
        if (d->vres[i].off == (size_t)(uintptr_t)va) { d->vres[i] = d->vres[--d->nvres]; break; }
    pthread_mutex_unlock(&d->mu);
    munmap(va, n);   /* the whole reservation, nothing mapped in it: the wrapper checked */
    return SS_OK;
}

static ss_status sim_vm_map(void *ctx, void *va, size_t n) {
    sim_dev *d = ctx;
    size_t off = 0;
    pthread_mutex_lock(&d->mu);
    if (!arena_take_aligned(d, n, d->page, &off)) {
        pthread_mutex_unlock(&d->mu);
        SS_DEBUGF("cpu-sim: out of memory mapping %zu bytes", n);
        return SS_ERR_OOM;
    }
    ss_status st = ssi_ptr_put(&d->vmoff, (uintptr_t)va, off);
    if (st != SS_OK) arena_give(d, off, n);
    pthread_mutex_unlock(&d->mu);
    if (st != SS_OK) return st;
    void *m = mmap(va, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, d->memfd, (off_t)off);
    if (m == MAP_FAILED) {
        SS_ERROR("cpu-sim: mapping %zu bytes at %p failed: %s", n, va, strerror(errno));
        pthread_mutex_lock(&d->mu);
        size_t i = ssi_ptr_find(&d->vmoff, (uintptr_t)va);
        if (i != SIZE_MAX) ssi_ptr_del_at(&d->vmoff, i);
        arena_give(d, off, n);
        pthread_mutex_unlock(&d->mu);
        return SS_ERR_DEVICE;
    }
    poison_fill(va, n);   /* fresh memory reads as NaN, as a fresh block does */
    return SS_OK;
}

static int overlaps(const void *a, size_t an, const void *b, size_t bn) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bn && y < x + an;
}

/* Does a copy that is queued or running touch [p, p+n)? (caller holds mu) */
static int copy_touches(const sim_dev *d, const void *p, size_t n) {
    for (const sim_op *op = d->inflight; op; op = op->fl_next)
        if (overlaps(op->dst, op->n, p, n) || overlaps(op->src, op->n, p, n)) return 1;
    for (size_t i = 0; i < d->nvq; i++)
        if (overlaps(d->vq[i].dst, d->vq[i].n, p, n) || overlaps(d->vq[i].src, d->vq[i].n, p, n))
            return 1;
    return 0;
}

static ss_status sim_vm_unmap(void *ctx, void *va, size_t n) {
    sim_dev *d = ctx;
    pthread_mutex_lock(&d->mu);
    lz_land(d);
    if (copy_touches(d, va, n)) {
        pthread_mutex_unlock(&d->mu);
        return SS_ERR_STATE;   /* a copy may still read or write it: not now */
    }
    size_t i = ssi_ptr_find(&d->vmoff, (uintptr_t)va);
    SS_ASSERT(i != SIZE_MAX);
    size_t off = d->vmoff.vals[i];
    ssi_ptr_del_at(&d->vmoff, i);
    /* PROT_NONE over the range, never munmap: another thread's mmap must not land here */
    void *m = mmap(va, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) SS_ERROR("cpu-sim: unmapping %zu bytes at %p failed: %s", n, va, strerror(errno));
    poison_fill(d->arena + off, n);   /* the physical memory, as a freed block */
    arena_give(d, off, n);
    pthread_mutex_unlock(&d->mu);
    return SS_OK;
}

/* SS_ERR_INVALID unless [p, p+n) lies in the arena or in a reservation. */
static ss_status in_arena(sim_dev *d, const void *p, size_t n, const char *fn) {
    const unsigned char *b = p;
    int inres = 0;
    pthread_mutex_lock(&d->mu);
    lz_land(d);   /* copies into or out of the range that ended have landed */
    for (size_t i = 0; i < d->nvres && !inres; i++) {
        uintptr_t u = (uintptr_t)p, k = d->vres[i].off;
        inres = u >= k && n <= d->vres[i].len && u - k <= d->vres[i].len - n;
    }
    pthread_mutex_unlock(&d->mu);
    if (inres) return SS_OK;
    if (b < d->arena || b >= d->arena + d->cap || n > (size_t)(d->arena + d->cap - b)) {
        SS_ERROR("%s: [%p, +%zu) is not cpu-sim device memory", fn, p, n);
        return SS_ERR_INVALID;
    }
    return SS_OK;
}

static ss_status sim_mem_poison(void *ctx, void *p, size_t n) {
    sim_dev *d = ctx;
    ss_status st = in_arena(d, p, n, "ss_mem_poison");
    if (st == SS_OK) poison_fill(p, n);
    return st;
}

static ss_status sim_mem_check_poison(void *ctx, const void *p, size_t n, size_t *found) {
    sim_dev *d = ctx;
    ss_status st = in_arena(d, p, n, "ss_mem_check_poison");
    if (st == SS_OK) *found = poison_count_bad(p, n);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* real clock: copy engines and stream threads                                               */

/* Gives a real-clock copy to its engine (caller holds mu). The engine keeps its own timeline,
 * as a DMA engine does: the copy starts now or when the engine's previous copy ends, whichever
 * is later, and ends its duration after that. */
static void copy_reserve(sim_dev *d, sim_op *op) {
    sim_engine *e = &d->eng[op->eng];
    op->end = dmax(ssi_now(), e->end) + copy_seconds(d, op->eng, op->n, op->kind);
    e->end = op->end;
}

/* Runs a real-clock copy in the calling thread (a stream thread, a host caller, or the
 * submitter of a copy to an idle stream); caller holds mu, which is released while it sleeps
 * and moves the bytes; the copy is given to its engine now unless submit did. The bytes move at
 * the end of the copy's time (the sleep ends early by the measured memmove time): a reader that
 * does not wait for the copy sees the old contents (poison), and a writer that reuses the source
 * too early changes what lands; both are what exactness tests must catch. */
static void run_copy(sim_dev *d, sim_op *op) {
    sim_engine *e = &d->eng[op->eng];
    if (!op->end) copy_reserve(d, op);
    double end = op->end, spb = e->sec_per_byte;
    pthread_mutex_unlock(&d->mu);
    ssi_sleep(end - ssi_now() - (double)op->n * spb);
    double t0 = ssi_now();
    memmove(op->dst, op->src, op->n);
    double mt = ssi_now() - t0;
    pthread_mutex_lock(&d->mu);
    if (op->n >= 65536)   /* learn the memmove speed so that the copy still takes its time */
        e->sec_per_byte = 0.5 * e->sec_per_byte + 0.5 * mt / (double)op->n;
}

/* Sleeps once on ev's condition variable (caller holds mu and rechecks its condition). */
static void event_sleep(sim_dev *d, sim_event *ev) {
    ev->nwait++;
    pthread_cond_wait(&ev->cv, &d->mu);
    ev->nwait--;
}

/* Wakes whoever sleeps on ev (caller holds mu). */
static void event_wake(sim_event *ev) {
    if (ev->nwait) pthread_cond_broadcast(&ev->cv);
}

/* Marks generation gen of ev complete at time t (caller holds mu). */
static void event_complete(sim_event *ev, uint64_t gen, double t) {
    if (gen > ev->done_gen) {
        ev->done_gen = gen;
        ev->time = t;
        event_wake(ev);
    }
}

/* The in-flight list of real-clock copies (caller holds mu). */
static void fl_link(sim_dev *d, sim_op *op) {
    op->fl_prev = NULL;
    op->fl_next = d->inflight;
    if (d->inflight) d->inflight->fl_prev = op;
    d->inflight = op;
}

static void fl_unlink(sim_dev *d, sim_op *op) {
    if (op->fl_prev) op->fl_prev->fl_next = op->fl_next; else d->inflight = op->fl_next;
    if (op->fl_next) op->fl_next->fl_prev = op->fl_prev;
    op->fl_prev = op->fl_next = NULL;
}

/* Runs op (of a stream thread or the host stream) to completion; caller holds mu, which may be
 * released while waiting. */
static void run_op(sim_dev *d, sim_op *op) {
    switch (op->k) {
    case OP_COPY:
        run_copy(d, op);
        break;
    case OP_COMPUTE:
        pthread_mutex_unlock(&d->mu);
        ssi_sleep(op->seconds);
        pthread_mutex_lock(&d->mu);
        break;
    case OP_RECORD:
        event_complete(op->ev, op->gen, sim_now_locked(d));
        break;
    case OP_WAIT:
        while (op->ev->done_gen < op->gen) event_sleep(d, op->ev);
        break;
    }
}

static void *stream_thread(void *arg) {
    sim_stream *s = arg;
    sim_dev *d = s->d;
#ifdef PR_SET_TIMERSLACK
    (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);   /* a copy's sleep wakes within ~1 us */
#endif
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while ((!s->head || s->inl) && !s->quit) pthread_cond_wait(&s->cv, &d->mu);
        if (!s->head) break;
        sim_op *op = s->head;
        run_op(d, op);
        if (op->k == OP_COPY) fl_unlink(d, op);
        /* the last queued op naming an event lets event_free go on */
        if (op->ev && --op->ev->pending == 0) event_wake(op->ev);
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        s->fin++;
        if (s->fin >= s->sync_min) {
            s->sync_min = UINT64_MAX;   /* waiters still short of their target set it again */
            pthread_cond_broadcast(&s->sync_cv);
        }
        free(op);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* streams                                                                                   */

static ss_status sim_stream_make(sim_dev *d, int host, void **out) {
    sim_stream *s = calloc(1, sizeof *s);
    if (!s) return SS_ERR_HOST_OOM;
    s->d = d;
    s->host = host;
    s->sync_min = UINT64_MAX;
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->sync_cv, NULL);
    if (!host && !computed(d)) {
        int rc = pthread_create(&s->th, NULL, stream_thread, s);
        if (rc != 0) {
            pthread_cond_destroy(&s->cv);
            pthread_cond_destroy(&s->sync_cv);
            free(s);
            SS_ERROR("cpu-sim: cannot start a stream thread: %s", strerror(rc));
            return SS_ERR_DEVICE;
        }
    }
    if (computed(d)) {
        pthread_mutex_lock(&d->mu);
        lz_tick(d);
        s->vtail = d->host_vt;
        pthread_mutex_unlock(&d->mu);
    }
    *out = s;
    return SS_OK;
}

static ss_status sim_stream_new(void *ctx, void **out) { return sim_stream_make(ctx, 0, out); }

static ss_status sim_stream_wrap(void *ctx, void *handle, void **out) {
    if (handle) {
        SS_ERROR("cpu-sim: only the host stream (handle NULL) can be wrapped");
        return SS_ERR_UNSUPPORTED;
    }
    return sim_stream_make(ctx, 1, out);
}

static ss_status sim_stream_sync(void *ctx, void *sp) {
    sim_dev *d = ctx;
    sim_stream *s = sp;
    pthread_mutex_lock(&d->mu);
    if (computed(d)) {
        lz_tick(d);
        if (!s->host) host_to(d, s->vtail);
    } else if (!s->host) {
        uint64_t target = s->enq;
        while (s->fin < target) {
            if (target < s->sync_min) s->sync_min = target;
            pthread_cond_wait(&s->sync_cv, &d->mu);
        }
    }
    pthread_mutex_unlock(&d->mu);
    return SS_OK;
}

static ss_status sim_stream_free(void *ctx, void *sp) {
    sim_dev *d = ctx;
    sim_stream *s = sp;
    sim_stream_sync(ctx, sp);
    if (!s->host && !computed(d)) {
        pthread_mutex_lock(&d->mu);
        s->quit = 1;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(s->th, NULL);
    }
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->sync_cv);
    free(s);
    return SS_OK;
}

/* Enqueues a copy of op (real clock, non-host stream): the op is heap-allocated and owned by
 * the stream thread from here on. Caller holds mu. */
static void enqueue(sim_stream *s, sim_op *op) {
    op->next = NULL;
    if (op->ev) op->ev->pending++;
    if (s->tail) {
        s->tail->next = op;   /* the stream thread is busy with the head and comes to it */
    } else {
        s->head = op;
        pthread_cond_signal(&s->cv);
    }
    s->tail = op;
    s->enq++;
}

/* Work submitted to an idle real-clock stream (nothing queued or running on it; caller holds
 * mu): what needs no waiting runs at once in the submitter, as the stream thread would run it
 * first thing but without its wake-up (two thread switches, and on a loaded machine a wait for a
 * core). A record completes now, a wait for a completed event is nothing; a copy is given to
 * its engine now (the stream would start it now), and runs here when it would not sleep: its
 * end comes no later than its bytes can move (a link about as fast as memmove or faster), so it
 * still lands at its end, and its stream's later work queues behind it meanwhile. Returns 1
 * when op ran, 0 when it must be queued. */
static int idle_run(sim_dev *d, sim_stream *s, sim_op *op) {
    if (op->k == OP_COMPUTE || (op->k == OP_WAIT && op->ev->done_gen < op->gen)) return 0;
    if (op->k == OP_COPY) {
        copy_reserve(d, op);
        if (op->end - ssi_now() > (double)op->n * d->eng[op->eng].sec_per_byte) return 0;
        op->next = NULL;
        s->head = s->tail = op;
        s->inl = 1;
        s->enq++;
        fl_link(d, op);
        run_copy(d, op);
        fl_unlink(d, op);
        s->inl = 0;
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        else pthread_cond_signal(&s->cv);   /* what was queued behind it meanwhile */
    } else {
        run_op(d, op);
        s->enq++;
    }
    s->fin++;
    if (s->fin >= s->sync_min) {
        s->sync_min = UINT64_MAX;
        pthread_cond_broadcast(&s->sync_cv);
    }
    return 1;
}

/* Starting time of new work on s under the virtual clock (caller holds mu). */
static double vstart(sim_dev *d, sim_stream *s) {
    if (s->host) return d->host_vt;
    s->vtail = dmax(s->vtail, d->host_vt);
    return s->vtail;
}

static void vset_end(sim_dev *d, sim_stream *s, double t) {
    if (s->host) host_to(d, t); else s->vtail = t;
}

/* Common path of every stream op: virtual clock, host stream (inline) or a queued op. */
static ss_status submit(sim_dev *d, sim_stream *s, const sim_op *tmpl) {
    if (computed(d)) {
        pthread_mutex_lock(&d->mu);
        lz_tick(d);
        double t = vstart(d, s);
        switch (tmpl->k) {
        case OP_COPY: {
            sim_engine *e = &d->eng[tmpl->eng];
            double start = dmax(t, e->vfree);
            double end = start + copy_seconds(d, tmpl->eng, tmpl->n, tmpl->kind);
            e->vfree = end;
            vq_push(d, tmpl->dst, tmpl->src, tmpl->n, end, tmpl->eng);
            vset_end(d, s, end);
            break;
        }
        case OP_COMPUTE: vset_end(d, s, t + tmpl->seconds); break;
        case OP_RECORD: tmpl->ev->vtime = t; tmpl->ev->rec_gen++; tmpl->ev->done_gen = tmpl->ev->rec_gen; break;
        case OP_WAIT: vset_end(d, s, dmax(t, tmpl->ev->vtime)); break;
        }
        pthread_mutex_unlock(&d->mu);
        return SS_OK;
    }
    if (s->host) {
        sim_op op = *tmpl;
        pthread_mutex_lock(&d->mu);
        if (op.k == OP_RECORD) op.gen = ++op.ev->rec_gen;
        if (op.k == OP_WAIT) op.gen = op.ev->rec_gen;
        if (op.k == OP_COPY) fl_link(d, &op);
        run_op(d, &op);
        if (op.k == OP_COPY) fl_unlink(d, &op);
        pthread_mutex_unlock(&d->mu);
        return SS_OK;
    }
    sim_op now = *tmpl;   /* run at once if the stream is idle, else queued on the heap */
    pthread_mutex_lock(&d->mu);
    if (now.k == OP_RECORD) now.gen = ++now.ev->rec_gen;
    if (now.k == OP_WAIT) now.gen = now.ev->rec_gen;
    if (!s->head && idle_run(d, s, &now)) {
        pthread_mutex_unlock(&d->mu);
        return SS_OK;
    }
    sim_op *op = malloc(sizeof *op);
    if (!op) {
        if (now.k == OP_RECORD) now.ev->rec_gen--;   /* not recorded after all */
        pthread_mutex_unlock(&d->mu);
        return SS_ERR_HOST_OOM;
    }
    *op = now;
    if (op->k == OP_COPY) fl_link(d, op);
    enqueue(s, op);
    pthread_mutex_unlock(&d->mu);
    return SS_OK;
}

static ss_status sim_copy_async(void *ctx, void *s, void *dst, const void *src, size_t n,
                                ss_copy_kind kind) {
    sim_op op = {.k = OP_COPY, .dst = dst, .src = src, .n = n, .eng = engine_of(kind),
                 .kind = kind};
    return submit(ctx, s, &op);
}

static ss_status sim_compute_async(void *ctx, void *s, double seconds) {
    sim_op op = {.k = OP_COMPUTE, .seconds = seconds};
    return submit(ctx, s, &op);
}

/* ---------------------------------------------------------------------------------------- */
/* events                                                                                    */

static ss_status sim_event_new(void *ctx, void **out) {
    (void)ctx;
    sim_event *e = calloc(1, sizeof *e);
    if (!e) return SS_ERR_HOST_OOM;
    pthread_cond_init(&e->cv, NULL);
    *out = e;
    return SS_OK;
}

static ss_status sim_event_free(void *ctx, void *ep) {
    sim_dev *d = ctx;
    sim_event *e = ep;
    pthread_mutex_lock(&d->mu);
    while (e->pending) event_sleep(d, e);
    pthread_mutex_unlock(&d->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
    return SS_OK;
}

static ss_status sim_event_record(void *ctx, void *e, void *s) {
    sim_op op = {.k = OP_RECORD, .ev = e};
    return submit(ctx, s, &op);
}

static ss_status sim_event_wait(void *ctx, void *s, void *e) {
    sim_op op = {.k = OP_WAIT, .ev = e};
    return submit(ctx, s, &op);
}

/* Complete? (caller holds mu) */
static int ev_done(sim_dev *d, sim_event *e) {
    lz_tick(d);
    if (computed(d)) return e->vtime <= d->host_vt;
    return e->done_gen >= e->rec_gen;
}

static ss_status sim_event_query(void *ctx, void *ep, int *done) {
    sim_dev *d = ctx;
    pthread_mutex_lock(&d->mu);
    *done = ev_done(d, ep);
    pthread_mutex_unlock(&d->mu);
    return SS_OK;
}

static ss_status sim_event_sync(void *ctx, void *ep) {
    sim_dev *d = ctx;
    sim_event *e = ep;
    pthread_mutex_lock(&d->mu);
    if (computed(d)) {
        lz_tick(d);
        host_to(d, e->vtime);
    } else {
        uint64_t g = e->rec_gen;
        while (e->done_gen < g) event_sleep(d, e);
    }
    pthread_mutex_unlock(&d->mu);
    return SS_OK;
}

static ss_status sim_event_time(void *ctx, void *ep, double *seconds) {
    sim_dev *d = ctx;
    sim_event *e = ep;
    ss_status st = SS_OK;
    pthread_mutex_lock(&d->mu);
    if (!ev_done(d, e)) st = SS_ERR_STATE;
    else *seconds = computed(d) ? e->vtime : e->time;
    pthread_mutex_unlock(&d->mu);
    return st;
}

static double sim_now(void *ctx) {
    sim_dev *d = ctx;
    pthread_mutex_lock(&d->mu);
    lz_tick(d);
    double t = sim_now_locked(d);
    pthread_mutex_unlock(&d->mu);
    return t;
}

/* ---------------------------------------------------------------------------------------- */
/* open / close                                                                              */

static const struct ss_device_i sim_iface = {
    .close = sim_close,
    .mem_info = sim_mem_info,
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .host_alloc = NULL,           /* default malloc/free: cpu-sim has no pinned memory */
    .host_free = NULL,
    .mem_poison = sim_mem_poison,
    .mem_check_poison = sim_mem_check_poison,
    .stream_new = sim_stream_new,
    .stream_wrap = sim_stream_wrap,
    .stream_free = sim_stream_free,
    .stream_sync = sim_stream_sync,
    .copy_async = sim_copy_async,
    .compute_async = sim_compute_async,
    .event_new = sim_event_new,
    .event_free = sim_event_free,
    .event_record = sim_event_record,
    .event_wait = sim_event_wait,
    .event_query = sim_event_query,
    .event_sync = sim_event_sync,
    .event_elapsed = NULL,        /* default: difference of event_time */
    .event_time = sim_event_time,
    .now = sim_now,
    .vm_reserve = sim_vm_reserve,
    .vm_release = sim_vm_release,
    .vm_map = sim_vm_map,
    .vm_unmap = sim_vm_unmap,
};

static void sim_close(void *ctx) {
    sim_dev *d = ctx;
    if (d->arena) munmap(d->arena, d->map_len);
    if (d->memfd >= 0) close(d->memfd);
    ssi_ptr_free(&d->vmoff);
    free(d->vres);
    free(d->freel);
    free(d->vq);          /* copies that never landed: nobody waited for them */
    pthread_mutex_destroy(&d->mu);
    free(d);
}

static ss_status sim_open(const char *name, const ss_options *o, ssi_device_backend *out,
                          char *err, size_t err_len) {
    if (strcmp(name, "cpu-sim") != 0 && strcmp(name, "cpu-sim:0") != 0) {
        ssi_fmt(err, err_len, "no such cpu-sim device (use \"cpu-sim\")");
        return SS_ERR_NOT_FOUND;
    }
    if (!(o->sim_d2h_gbps > 0) || !(o->sim_h2d_gbps > 0) || !(o->sim_latency_us >= 0) ||
        !(o->sim_jitter_us >= 0) || o->sim_capacity_bytes < 4096 ||
        o->sim_capacity_bytes > (uint64_t)SIZE_MAX / 2) {
        ssi_fmt(err, err_len, "bad cpu-sim options (bandwidths must be > 0, capacity >= 4096)");
        return SS_ERR_INVALID;
    }
    sim_dev *d = calloc(1, sizeof *d);
    if (!d) return SS_ERR_HOST_OOM;
    pthread_mutex_init(&d->mu, NULL);
    d->cap = (size_t)o->sim_capacity_bytes / SIM_ALIGN * SIM_ALIGN;
    d->map_len = d->cap;
    d->memfd = -1;
    long pg = sysconf(_SC_PAGESIZE);
    d->page = pg > 0 ? (size_t)pg : 4096;
    void *m = MAP_FAILED;
#ifdef MFD_CLOEXEC
    /* the arena in a memfd, so that its pages can be mapped a second time at a reservation's
     * addresses (ss_vm_map); without memfd_create, an anonymous arena and no vm slots */
    d->memfd = memfd_create("smartswap-cpu-sim", MFD_CLOEXEC);
    if (d->memfd >= 0 && ftruncate(d->memfd, (off_t)d->map_len) == 0)
        m = mmap(NULL, d->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, d->memfd, 0);
    if (m == MAP_FAILED && d->memfd >= 0) { close(d->memfd); d->memfd = -1; }
#endif
    if (m == MAP_FAILED)
        m = mmap(NULL, d->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        ssi_fmt(err, err_len, "cannot reserve %zu bytes of address space: %s", d->map_len, strerror(errno));
        sim_close(d);
        return SS_ERR_HOST_OOM;
    }
    d->arena = m;
    if (ssi_grow(&d->freel, &d->freecap, 1, sizeof *d->freel) != SS_OK) {
        sim_close(d);
        return SS_ERR_HOST_OOM;
    }
    d->freel[0].off = 0;
    d->freel[0].len = d->cap;
    d->nfree = 1;
    d->virt = o->sim_virtual_clock != 0;
    d->lazy = !d->virt && !o->sim_threads;
    d->lat = o->sim_latency_us * 1e-6;
    d->jitter = o->sim_jitter_us * 1e-6;
    d->eng[ENG_H2D].gbps = o->sim_h2d_gbps;
    d->eng[ENG_D2H].gbps = o->sim_d2h_gbps;
    ssi_rng_seed(&d->rng, o->seed);
    d->t_open = ssi_now();
    out->iface = &sim_iface;
    out->ctx = d;
    ss_device_caps *c = &out->caps;
    memset(c, 0, sizeof *c);
    ssi_fmt(c->name, sizeof c->name, "cpu-sim");
    char cap[32];
    ss_format_size(d->cap, cap, sizeof cap);
    ssi_fmt(c->description, sizeof c->description, "host memory %s, latency %.3g us%s%s", cap,
            o->sim_latency_us, d->virt ? ", virtual clock" : !d->lazy ? ", stream threads" : "",
            d->jitter > 0 ? ", jitter" : "");
    c->total_bytes = d->cap;
    c->alignment = SIM_ALIGN;
    c->has_pinned_host = 0;
    c->virtual_clock = d->virt;
    c->d2h_gbps = o->sim_d2h_gbps;
    c->h2d_gbps = o->sim_h2d_gbps;
    c->vm_granularity = d->memfd >= 0 ? d->page : 0;
    return SS_OK;
}

static int sim_probe(char *msg, size_t len) {
    (void)msg; (void)len;
    return 1;
}

const ssi_device_reg ssi_device_reg_cpusim = {"cpu-sim", sim_open, sim_probe};
