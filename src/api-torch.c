/* api-torch.c: the thin C entry point of the PyTorch adapter (include/smartswap-torch.h,
 * docs/pytorch.md). It opens a device and an SS_MEM_FRAMEWORK context with the executor on, and
 * bundles operator + save + action poll (and answers + load + poll) into single calls so that
 * one saved_tensors_hooks callback costs one or two ctypes calls. No decision is made here.
 *
 * Before the first plan. The executor swaps only what a plan schedules, and SS_MEM_FRAMEWORK has
 * no allocator whose failure would call its eviction fallback. So in an iteration that runs
 * without a plan (WarmUp, the first GenPolicy, a plan with no entries), with an eviction budget
 * set (ss_torch_set_evict_budget: the activation budget), this file keeps resident saved bytes
 * within it the way the executor's fallback does: after each save, while the resident bytes
 * exceed the budget, the resident swappable tensor whose next use is farthest (the earliest
 * saved: backward uses them in reverse) is copied to host memory on its own stream, waited for,
 * and handed to the caller as SS_ACTION_DROP; its load brings it back into a device buffer of
 * its own (a counted miss), freed at release. Resident bytes are tallied from saves, releases
 * and the actions that pass through ss_torch_poll. In a planned iteration over the budget (a
 * Stable plan outgrown by the sizes) the executor evicts instead (ssi_exec_evict_framework),
 * since its plan may be moving those tensors already.
 *
 * Detailed iterations: ss_torch_recording tells the adapter to run its TorchDispatchMode, and
 * ss_torch_detail adds the aten operators' FLOPs and the mode's own time to the profile
 * without adding operators. ss_torch_set_sizes folds declared sizes into the size signature.
 *
 * Ownership: ss_torch_t owns the device, the wrapped streams and the context. Streams wrapped
 * for loads on other streams are cached (a few; torch's stream pool is small) under `mu`, which
 * also guards the per-handle table.
 */
#include "smartswap-torch.h"
#include "api.h"
#include "exec.h"
#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SST_MAX_STREAMS 64
#define SST_MAX_OWN 256

enum { T_RES = 0, T_GONE, T_HOST, T_IN, T_EXEC_IN };

typedef struct tslot {
    uint64_t    h;          /* full handle; 0: free slot */
    uint64_t    bytes, seq;
    void       *ptr;        /* the caller's pointer */
    uint32_t    flags;
    int         state;      /* T_* */
    int         held;       /* dropped by the core, still held by the caller (ss_torch_held) */
    void       *host, *dbuf;
    ss_event_t *ev;
} tslot;

struct ss_torch {
    ss_device_t *dev;
    ss_stream_t *compute, *d2h, *h2d;
    ss_ctx_t    *ctx;
    pthread_mutex_t mu;
    uint64_t     sh[SST_MAX_STREAMS];
    ss_stream_t *ss[SST_MAX_STREAMS];
    int          ns;
    /* eviction before the first plan */
    uint64_t     budget, min_swap, resident, seq, iter_seen;
    int          unplanned;
    tslot       *slots;
    size_t       nslots;
    ss_action    own[SST_MAX_OWN];   /* DROP actions of this file, handed out first */
    uint32_t     nown;
    uint64_t     evictions, evicted_bytes, misses, in_bytes;
    uint64_t     refused;        /* prefetches refused because they did not fit the budget */
};

/* ---- the last logged error, for the adapter's exceptions ------------------------------------ */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_last[512];
static int log_max = SS_LOG_WARN;
static int log_set;

static void log_keep(void *user, ss_log_level level, const char *msg) {
    (void)user;
    pthread_mutex_lock(&log_mu);
    if (level <= SS_LOG_WARN) snprintf(log_last, sizeof log_last, "%s", msg);
    pthread_mutex_unlock(&log_mu);
    if ((int)level <= log_max) ss_log_stderr(NULL, level, msg);
}

const char *ss_torch_last_error(void) {
    return log_last;
}

/* ---- options --------------------------------------------------------------------------------- */

/* Applies "name=value\n..." lines to *o. */
static ss_status apply_options(ss_options *o, const char *text, char *err, size_t err_len) {
    if (!text) return SS_OK;
    const char *p = text;
    char line[600];
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n >= sizeof line) {
            snprintf(err, err_len, "option line too long (%zu bytes)", n);
            return SS_ERR_INVALID;
        }
        memcpy(line, p, n);
        line[n] = 0;
        p += n + (e ? 1 : 0);
        if (!n) continue;
        char *eq = strchr(line, '=');
        if (!eq) {
            snprintf(err, err_len, "option '%s' has no '=value'", line);
            return SS_ERR_INVALID;
        }
        *eq = 0;
        ss_status st = ss_options_set(o, line, eq + 1, err, err_len);
        if (st) return st;
    }
    return SS_OK;
}

/* ---- open / close ---------------------------------------------------------------------------- */

ss_status ss_torch_open(const char *device, uint64_t compute, const char *options, char *err,
                        size_t err_len, ss_torch_t **out) {
    char dummy[8];
    if (!err || !err_len) { err = dummy; err_len = sizeof dummy; }
    err[0] = 0;
    if (!out) { snprintf(err, err_len, "ss_torch_open: out is NULL"); return SS_ERR_INVALID; }
    ss_options o = ss_options_default();
    ss_status st = ss_options_env(&o, err, err_len);
    if (!st) st = apply_options(&o, options, err, err_len);
    if (st) return st;
    if (device && *device) snprintf(o.device, sizeof o.device, "%s", device);
    if (!log_set) {
        /* once per process, before any other call of this adapter (ss_log_set's contract) */
        log_max = o.log_level;
        ss_log_set(log_keep, NULL, SS_LOG_INFO);
        log_set = 1;
    }
    ss_torch_t *t = calloc(1, sizeof *t);
    if (!t) { snprintf(err, err_len, "out of host memory"); return SS_ERR_HOST_OOM; }
    if (pthread_mutex_init(&t->mu, NULL)) { free(t); return SS_ERR_HOST_OOM; }
    ss_ctx_config c = ss_ctx_config_default();
    c.opts = o;
    c.mem_owner = SS_MEM_FRAMEWORK;
    if (!o.disable) {
        if ((st = ss_device_open(o.device, &o, &t->dev))) {
            snprintf(err, err_len, "cannot open device '%s': %s (%s)", o.device, ss_status_str(st),
                     log_last[0] ? log_last : "no detail");
            goto fail;
        }
        if ((st = ss_stream_wrap(t->dev, (void *)(uintptr_t)compute, &t->compute))) {
            snprintf(err, err_len, "cannot wrap the compute stream on '%s': %s", o.device, ss_status_str(st));
            goto fail;
        }
        c.device = t->dev;
        c.compute = t->compute;
    }
    if ((st = ss_ctx_new(&c, &t->ctx))) {
        snprintf(err, err_len, "cannot create the context: %s (%s)", ss_status_str(st), log_last);
        goto fail;
    }
    if (!o.disable && (st = ss_ctx_enable_swap(t->ctx, SS_SWAP_SMARTSWAP))) {
        snprintf(err, err_len, "cannot switch the executor on: %s (%s)", ss_status_str(st), log_last);
        goto fail;
    }
    *out = t;
    return SS_OK;
fail:
    ss_torch_close(t);
    return st;
}

static void slot_free_bufs(ss_torch_t *t, tslot *x);

void ss_torch_close(ss_torch_t *t) {
    if (!t) return;
    ss_ctx_free(t->ctx);
    for (size_t i = 0; i < t->nslots; i++)
        if (t->slots[i].h) slot_free_bufs(t, &t->slots[i]);
    free(t->slots);
    if (t->d2h) ss_stream_free(t->dev, t->d2h);
    if (t->h2d) ss_stream_free(t->dev, t->h2d);
    for (int i = 0; i < t->ns; i++) ss_stream_free(t->dev, t->ss[i]);
    if (t->compute) ss_stream_free(t->dev, t->compute);
    if (t->dev) ss_device_close(t->dev);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

ss_ctx_t *ss_torch_ctx(ss_torch_t *t) {
    return t ? t->ctx : NULL;
}

/* ---- the per-handle table and the eviction before the first plan ---------------------------- */

ss_status ss_torch_set_evict_budget(ss_torch_t *t, uint64_t budget) {
    if (!t) return SS_ERR_INVALID;
    if (budget && t->dev && (!t->d2h || !t->h2d)) {
        ss_status st;
        if (!t->d2h && (st = ss_stream_new(t->dev, &t->d2h))) return st;
        if (!t->h2d && (st = ss_stream_new(t->dev, &t->h2d))) return st;
    }
    pthread_mutex_lock(&t->mu);
    t->budget = budget;
    t->min_swap = t->ctx->opts.min_swap_bytes;
    pthread_mutex_unlock(&t->mu);
    return SS_OK;
}

/* The slot of handle h (NULL: not ours); with create, a new one. Holds mu. */
static tslot *slot_of(ss_torch_t *t, uint64_t h, int create) {
    size_t i = (size_t)(h & 0xFFFFFFFFu);
    if (!i) return NULL;
    if (i > t->nslots) {
        if (!create) return NULL;
        size_t n = t->nslots ? t->nslots : 256;
        while (n < i) n *= 2;
        tslot *a = realloc(t->slots, n * sizeof *a);
        if (!a) return NULL;
        memset(a + t->nslots, 0, (n - t->nslots) * sizeof *a);
        t->slots = a;
        t->nslots = n;
    }
    tslot *x = &t->slots[i - 1];
    if (create) { memset(x, 0, sizeof *x); x->h = h; return x; }
    return x->h == h ? x : NULL;
}

static int counts(int state) { return state == T_RES || state == T_IN || state == T_EXEC_IN; }

static void slot_free_bufs(ss_torch_t *t, tslot *x) {
    if (x->ev) { ss_event_sync(t->dev, x->ev); ss_event_free(t->dev, x->ev); x->ev = NULL; }
    if (x->dbuf) {
        /* the consumer's work on it must be done before it goes back */
        if (t->compute) ss_stream_sync(t->dev, t->compute);
        ss_mem_free(t->dev, x->dbuf, (size_t)x->bytes);
        x->dbuf = NULL;
    }
    if (x->host) { ss_host_free(t->dev, x->host, (size_t)x->bytes); x->host = NULL; }
}

/* Resident bytes above the budget. In an unplanned iteration: evict the earliest saved resident
 * swappable tensors (not `keep`) here. In a planned one: ask the executor to (its plan may be
 * moving some of them already). Holds mu. */
static ss_status evict_over(ss_torch_t *t, uint64_t keep) {
    if (t->budget && !t->unplanned && t->resident > t->budget) {
        /* a planned iteration the plan did not foresee (a Stable plan outgrown by the sizes):
         * the executor knows which tensors it is moving, so it evicts (exec.c); its DROPs come
         * with the poll that follows every call of this */
        uint64_t freed = 0;
        ss_status st = ssi_exec_evict_framework(t->ctx, t->resident - t->budget, t->min_swap, &freed);
        return st == SS_ERR_STATE ? SS_OK : st;
    }
    while (t->budget && t->unplanned && t->resident > t->budget && t->nown < SST_MAX_OWN) {
        tslot *best = NULL;
        for (size_t i = 0; i < t->nslots; i++) {
            tslot *x = &t->slots[i];
            if (!x->h || x->h == keep || x->state != T_RES || (x->flags & SS_SAVE_NOSWAP) ||
                x->bytes < t->min_swap)
                continue;
            if (!best || x->seq < best->seq) best = x;
        }
        if (!best) return SS_OK;   /* nothing movable left: the budget stays exceeded */
        ss_status st;
        ss_event_t *mark = NULL;
        if ((st = ss_host_alloc(t->dev, (size_t)best->bytes, &best->host))) { best->host = NULL; return st; }
        if ((st = ss_event_new(t->dev, &mark))) return st;
        if (!best->ev && (st = ss_event_new(t->dev, &best->ev))) { ss_event_free(t->dev, mark); return st; }
        if ((st = ss_event_record(t->dev, mark, t->compute)) || (st = ss_event_wait(t->dev, t->d2h, mark)) ||
            (st = ss_copy_async(t->dev, t->d2h, best->host, best->ptr, (size_t)best->bytes, SS_COPY_D2H)) ||
            (st = ss_event_record(t->dev, best->ev, t->d2h)) || (st = ss_event_sync(t->dev, best->ev))) {
            ss_stream_sync(t->dev, t->d2h);
            ss_event_free(t->dev, mark);
            ss_host_free(t->dev, best->host, (size_t)best->bytes);
            best->host = NULL;
            return st;
        }
        ss_event_free(t->dev, mark);
        best->state = T_HOST;
        t->resident -= best->bytes;
        t->evictions++;
        t->evicted_bytes += best->bytes;
        ss_action a = {SS_ACTION_DROP, 0, best->h, best->bytes};
        t->own[t->nown++] = a;
    }
    return SS_OK;
}

/* Brings an evicted tensor back into a device buffer of its own, ordered before `s`. Holds mu. */
static ss_status bring_back(ss_torch_t *t, tslot *x, ss_stream_t *s, void **ptr) {
    ss_status st;
    if (!x->dbuf && (st = ss_mem_alloc(t->dev, (size_t)x->bytes, &x->dbuf))) { x->dbuf = NULL; return st; }
    if ((st = ss_copy_async(t->dev, t->h2d, x->dbuf, x->host, (size_t)x->bytes, SS_COPY_H2D)) ||
        (st = ss_event_record(t->dev, x->ev, t->h2d)) ||
        (st = ss_event_wait(t->dev, s ? s : t->compute, x->ev))) {
        ss_stream_sync(t->dev, t->h2d);
        return st;
    }
    x->state = T_IN;
    t->resident += x->bytes;
    t->misses++;
    t->in_bytes += x->bytes;
    *ptr = x->dbuf;
    return SS_OK;
}

/* ---- the hook calls -------------------------------------------------------------------------- */

ss_status ss_torch_poll(ss_torch_t *t, ss_action *acts, uint32_t max, uint32_t *n) {
    if (n) *n = 0;
    if (!t || !acts || !max || !n) return SS_OK;
    pthread_mutex_lock(&t->mu);
    uint32_t k = 0;
    while (k < max && k < t->nown) { acts[k] = t->own[k]; k++; }
    if (k) { memmove(t->own, t->own + k, (t->nown - k) * sizeof *t->own); t->nown -= k; }
    uint32_t m = 0;
    ss_status st = k < max ? ss_ctx_actions(t->ctx, acts + k, max - k, &m) : SS_OK;
    /* A swap-in buffer is resident saved bytes. A prefetch that a plan made for other sizes asks
     * for (say, the next micro-batch's) may not fit under the budget with what is resident now:
     * it is refused here, before the caller allocates anything, and its load brings the tensor
     * in on the slow path (a counted miss), where the load's own eviction keeps the budget. */
    uint64_t refused[SST_MAX_OWN];
    uint32_t nref = 0, w = k;
    for (uint32_t i = k; i < k + m; i++) {
        tslot *x = slot_of(t, acts[i].handle, 0);
        if (x && acts[i].kind == SS_ACTION_DROP && x->state == T_RES) {
            x->state = T_GONE;
            t->resident -= x->bytes;
        } else if (x && acts[i].kind == SS_ACTION_ALLOC && x->state == T_GONE) {
            if (t->budget && t->resident + x->bytes > t->budget && nref < SST_MAX_OWN) {
                refused[nref++] = acts[i].handle;
                t->refused++;
                continue;
            }
            x->state = T_EXEC_IN;
            t->resident += x->bytes;
        }
        acts[w++] = acts[i];
    }
    pthread_mutex_unlock(&t->mu);
    for (uint32_t i = 0; i < nref; i++) {
        ss_status s2 = ss_ctx_action_done(t->ctx, refused[i], NULL);
        if (s2 && !st) st = s2;
    }
    *n = w;
    return st;
}

ss_status ss_torch_op(ss_torch_t *t, uint32_t name_id, uint64_t site, ss_action *acts,
                      uint32_t max, uint32_t *n) {
    if (n) *n = 0;
    if (!t) return SS_ERR_INVALID;
    ss_status st = ss_ctx_op(t->ctx, name_id, site);
    ss_status s2 = ss_torch_poll(t, acts, max, n);
    return st ? st : s2;
}

ss_status ss_torch_pack(ss_torch_t *t, uint32_t name_id, uint64_t site, void *ptr, uint64_t bytes,
                        int dtype, int ndim, const int64_t *shape, uint32_t flags,
                        uint64_t *handle, ss_action *acts, uint32_t max, uint32_t *n) {
    if (n) *n = 0;
    if (!t || !handle) return SS_ERR_INVALID;
    ss_status st = ss_ctx_op(t->ctx, name_id, site);
    if (st) return st;
    if (t->budget && t->iter_seen != t->ctx->iter + 1) {
        /* the iteration's first save: after its first operator, where a plan switch happens */
        const ss_plan *pl = ssi_stage_plan(t->ctx);
        t->unplanned = !pl || !pl->nentries;
        t->iter_seen = t->ctx->iter + 1;
    }
    if ((st = ss_ctx_save(t->ctx, ptr, bytes, dtype, ndim, shape, flags, handle))) return st;
    if (t->dev && !t->ctx->opts.disable) {
        pthread_mutex_lock(&t->mu);
        tslot *x = slot_of(t, *handle, 1);
        if (x) {
            x->bytes = bytes;
            x->seq = ++t->seq;
            x->ptr = ptr;
            x->flags = flags;
            x->state = T_RES;
            t->resident += bytes;
            st = evict_over(t, *handle);
        }
        pthread_mutex_unlock(&t->mu);
        if (st) return st;
    }
    return ss_torch_poll(t, acts, max, n);
}
/* The wrapped stream of a torch stream handle (0: the compute stream). */
static ss_status stream_of(ss_torch_t *t, uint64_t h, ss_stream_t **out) {
    if (!h || !t->dev) { *out = NULL; return SS_OK; }
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->ns; i++)
        if (t->sh[i] == h) { *out = t->ss[i]; pthread_mutex_unlock(&t->mu); return SS_OK; }
    ss_status st = SS_OK;
    if (t->ns == SST_MAX_STREAMS) {
        *out = NULL;   /* more streams than torch's pool: order on the compute stream */
    } else if ((st = ss_stream_wrap(t->dev, (void *)(uintptr_t)h, out)) == SS_OK) {
        t->sh[t->ns] = h;
        t->ss[t->ns++] = *out;
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

ss_status ss_torch_load(ss_torch_t *t, const uint64_t *ah, void *const *ap, uint32_t na,
                        uint64_t handle, uint64_t stream, void **ptr, ss_action *acts,
                        uint32_t max, uint32_t *n) {
    if (n) *n = 0;
    if (!t) return SS_ERR_INVALID;
    ss_status st = SS_OK, s2;
    for (uint32_t i = 0; i < na; i++) {
        if ((s2 = ss_ctx_action_done(t->ctx, ah[i], ap[i])) && !st) st = s2;
        if (!ap[i]) {   /* refused: the executor's slow path will bring it in */
            pthread_mutex_lock(&t->mu);
            tslot *x = slot_of(t, ah[i], 0);
            if (x && x->state == T_EXEC_IN) { x->state = T_GONE; t->resident -= x->bytes; }
            pthread_mutex_unlock(&t->mu);
        }
    }
    if (handle) {
        ss_stream_t *s = NULL;
        void *p = NULL;
        if ((s2 = stream_of(t, stream, &s))) return s2;
        if ((s2 = ss_ctx_load(t->ctx, handle, s, &p))) return s2;
        pthread_mutex_lock(&t->mu);
        tslot *x = slot_of(t, handle, 0);
        if (x && x->state == T_HOST) {
            if (p == x->ptr) {
                s2 = bring_back(t, x, s, &p);
            } else {   /* the executor brought it in itself: our host copy is not needed */
                slot_free_bufs(t, x);
                x->state = T_EXEC_IN;
                t->resident += x->bytes;
            }
        } else if (x && x->state == T_IN) {
            p = x->dbuf;
        }
        if (x && !s2) {   /* the loaded tensor may push others out */
            uint64_t keep = x->h;
            s2 = evict_over(t, keep);
        }
        pthread_mutex_unlock(&t->mu);
        if (s2) return s2;
        *ptr = p;
    }
    s2 = ss_torch_poll(t, acts, max, n);
    return st ? st : s2;
}

ss_status ss_torch_held(ss_torch_t *t, uint64_t handle, int held) {
    if (!t) return SS_ERR_INVALID;
    pthread_mutex_lock(&t->mu);
    tslot *x = slot_of(t, handle, 0);
    if (x && !counts(x->state) && x->held != !!held) {
        x->held = !!held;
        if (held) t->resident += x->bytes;
        else t->resident -= x->bytes;
    }
    ss_status st = held ? evict_over(t, 0) : SS_OK;   /* its DROPs come with the next poll */
    pthread_mutex_unlock(&t->mu);
    return st;
}

ss_status ss_torch_release(ss_torch_t *t, uint64_t handle) {
    if (!t) return SS_ERR_INVALID;
    ss_status st = ss_ctx_release(t->ctx, handle);
    pthread_mutex_lock(&t->mu);
    tslot *x = slot_of(t, handle, 0);
    if (x) {
        if (counts(x->state) || x->held) t->resident -= x->bytes;
        slot_free_bufs(t, x);
        x->h = 0;
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

ss_status ss_torch_get_stats(ss_torch_t *t, ss_torch_stats *out) {
    if (!t || !out) return SS_ERR_INVALID;
    ss_ctx_stats cs;
    ss_iter_report last;
    ss_status st = ss_ctx_get_stats(t->ctx, &cs);
    if (!st) st = ss_ctx_last_report(t->ctx, &last);
    if (st) return st;
    ss_torch_stats s;
    memset(&s, 0, sizeof s);
    s.stage = (int32_t)ss_ctx_stage(t->ctx);
    s.last_stage = cs.iters ? last.stage : s.stage;
    s.seq_hash = last.seq_hash;
    s.iterations = cs.iters;
    s.detailed_iterations = cs.detailed_iters;
    s.plans_made = cs.plans_made;
    s.plans_cached = cs.cache_entries;
    s.cache_hits = cs.cache_hits + cs.mid_switches;
    s.mid_switches = cs.mid_switches;
    s.plan_errors = cs.plan_errors;
    s.saves = cs.saves;
    s.loads = cs.loads;
    s.releases = cs.releases;
    s.actions = cs.actions;
    s.profile_overhead_seconds = (double)atomic_load(&t->ctx->ovh_ns) * 1e-9;
    if (t->dev) {
        ss_exec_report r;
        if (ss_ctx_exec_totals(t->ctx, &r) == SS_OK) {
            s.swapped_out_bytes = r.swapped_out_bytes;
            s.swapped_in_bytes = r.swapped_in_bytes;
            s.stalls = r.stalls;
            s.misses = r.misses;
            s.evictions = r.evictions;
            s.host_peak_bytes = r.host_peak_bytes;
            s.stall_seconds = r.stall_s;
        }
        pthread_mutex_lock(&t->mu);
        s.swapped_out_bytes += t->evicted_bytes;
        s.swapped_in_bytes += t->in_bytes;
        s.evictions += t->evictions;
        s.misses += t->misses;
        s.resident_bytes = t->resident;
        s.prefetches_refused = t->refused;
        pthread_mutex_unlock(&t->mu);
    }
    *out = s;
    return SS_OK;
}

/* ---- detailed iterations, sizes ------------------------------------------------------------- */

int ss_torch_recording(ss_torch_t *t) {
    return t && t->ctx ? t->ctx->st.recording : 0;
}

ss_status ss_torch_detail(ss_torch_t *t, double flops, double overhead_s, uint32_t *nops) {
    if (!t || !t->ctx) return SS_ERR_INVALID;
    ss_ctx_t *ctx = t->ctx;
    if (nops) *nops = atomic_load_explicit(&ctx->n, memory_order_relaxed);
    if (!ctx->in_iter || !ctx->st.recording) return SS_OK;
    if (overhead_s > 0)
        atomic_fetch_add_explicit(&ctx->ovh_ns, (uint64_t)(overhead_s * 1e9), memory_order_relaxed);
    if (flops > 0) {
        pthread_mutex_lock(&ctx->lock);
        ss_profile *p = ctx->st.rec;
        if (p && p->nops) p->ops[p->nops - 1].flops += flops;
        pthread_mutex_unlock(&ctx->lock);
    }
    return SS_OK;
}

ss_status ss_torch_set_sizes(ss_torch_t *t, const int64_t *v, uint32_t n) {
    if (!t || !t->ctx || (n && !v)) return SS_ERR_INVALID;
    if (!t->ctx->in_iter) return SS_ERR_STATE;
    uint64_t h = 0;
    if (n) {
        h = 0x5153E5157E5ull;
        for (uint32_t i = 0; i < n; i++) h = ssi_hash_fold(h, (uint64_t)v[i]);
        if (!h) h = 1;
    }
    t->ctx->size_tag = h;
    return SS_OK;
}
