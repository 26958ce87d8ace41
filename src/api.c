/* api.c: the framework context (include/smartswap.h, "framework API"): iteration bracket,
 * operators (the light profiler's hot path is ss_ctx_op), saved tensors as handles, loads,
 * releases, the action queue for framework-owned memory, stats and reports.
 *
 * Until the executor exists (an ssi_exec_ops table, api.h), saved tensors stay where they are:
 * a load returns the pointer given at save and never waits, and no action is ever queued by
 * the library itself. Everything the executor needs is in place: the handle table with a slot
 * for its per-tensor state, the action queue, the report fields, and hooks at every call.
 *
 * Threading (see smartswap.h): driving-thread calls touch the light-profiler fields without a
 * lock; everything shared with "any thread" calls is under ctx->lock.
 */
#include "api.h"

#include <stdio.h>

_Static_assert((int)SS_OP_FWD == (int)SS_PHASE_FWD && (int)SS_OP_BWD == (int)SS_PHASE_BWD &&
               (int)SS_OP_OPT == (int)SS_PHASE_OPT && (int)SS_OP_OTHER == (int)SS_PHASE_OTHER,
               "public and profile phases agree");
_Static_assert(SS_MAX_DIMS == 8, "smartswap.h documents 8 dimensions");

static const char *const stage_names[SS_STAGE_COUNT] = {"warmup", "genpolicy", "stable", "disabled"};

const char *ss_stage_name(int stage) {
    return stage >= 0 && stage < SS_STAGE_COUNT ? stage_names[stage] : "?";
}

ss_ctx_config ss_ctx_config_default(void) {
    ss_ctx_config c;
    memset(&c, 0, sizeof c);
    c.opts = ss_options_default();
    c.mem_owner = SS_MEM_FRAMEWORK;
    return c;
}

static void ctx_destroy(ss_ctx_t *ctx) {
    ssi_stage_free(ctx);
    for (uint32_t i = 0; i < atomic_load(&ctx->nnames); i++) free(ctx->names[i]);
    free(ctx->names);
    free(atomic_load(&ctx->name_hash));
    for (size_t i = 0; i < ctx->nretired; i++) free(ctx->retired[i]);
    free(ctx->retired);
    free(ctx->hs);
    free(ctx->act);
    free(ctx->ring);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

ss_status ss_ctx_new(const ss_ctx_config *cfg, ss_ctx_t **out) {
    SS_CHECK_ARG(!out, "ss_ctx_new: out is NULL");
    ss_ctx_config c;
    if (cfg) {
        c = *cfg;
    } else {
        c = ss_ctx_config_default();
        char err[200];
        if (ss_options_env(&c.opts, err, sizeof err)) {
            SS_ERROR("ss_ctx_new: %s", err);
            return SS_ERR_INVALID;
        }
    }
    SS_CHECK_ARG(c.mem_owner != SS_MEM_FRAMEWORK && c.mem_owner != SS_MEM_SMARTSWAP,
                 "ss_ctx_new: mem_owner %d is not SS_MEM_FRAMEWORK or SS_MEM_SMARTSWAP", c.mem_owner);
    SS_CHECK_ARG(c.mem_owner == SS_MEM_SMARTSWAP && !c.alloc,
                 "ss_ctx_new: SS_MEM_SMARTSWAP needs an allocator (cfg.alloc)");
    ss_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return SS_ERR_HOST_OOM;
    if (pthread_mutex_init(&ctx->lock, NULL)) { free(ctx); return SS_ERR_HOST_OOM; }
    ctx->opts = c.opts;
    ctx->mem_owner = c.mem_owner;
    ctx->device = c.device;
    ctx->compute = c.compute;
    ctx->alloc = c.alloc;
    ctx->slow = SSI_SLOW_NO_ITER | (c.opts.disable ? SSI_SLOW_DISABLED : 0);
    ctx->next_check = UINT32_MAX;
    ctx->ring = calloc(1, sizeof *ctx->ring);
    ctx->ring_mask = 0;
    ss_status sst = ctx->ring ? ssi_stage_init(ctx) : SS_ERR_HOST_OOM;
    if (sst) { ctx_destroy(ctx); return sst; }
    *out = ctx;
    return SS_OK;
}

void ss_ctx_free(ss_ctx_t *ctx) {
    if (!ctx) return;
    if (ctx->exec && ctx->exec->destroy) ctx->exec->destroy(ctx->exec->self);
    for (uint32_t i = 0; i < ctx->nhs; i++) {
        ssi_handle *e = &ctx->hs[i];
        if (e->live && e->block && ctx->alloc) ss_alloc_free(ctx->alloc, e->block);
    }
    ctx_destroy(ctx);
}

ss_status ssi_ctx_set_exec(ss_ctx_t *ctx, const ssi_exec_ops *ops) {
    if (!ctx) return SS_ERR_INVALID;
    if (ctx->in_iter) return SS_ERR_STATE;
    ctx->exec = ops;
    if (ops) ctx->slow |= SSI_SLOW_EXEC;
    else ctx->slow &= ~(uint32_t)SSI_SLOW_EXEC;
    return SS_OK;
}

ss_status ssi_ctx_set_planner(ss_ctx_t *ctx, const ssi_planner *pl) {
    if (!ctx) return SS_ERR_INVALID;
    if (ctx->in_iter) return SS_ERR_STATE;
    pthread_mutex_lock(&ctx->lock);
    if (pl && pl->fn) {
        ctx->st.planner = *pl;
    } else {
        ctx->st.planner.fn = ssi_plan_default;
        ctx->st.planner.free_fn = ssi_plan_free_default;
        ctx->st.planner.user = NULL;
    }
    pthread_mutex_unlock(&ctx->lock);
    return SS_OK;
}

/* ---- names ---------------------------------------------------------------------------------- */

ss_status ss_ctx_intern(ss_ctx_t *ctx, const char *name, uint32_t *id) {
    SS_CHECK_ARG(!ctx || !name || !id, "ss_ctx_intern: NULL argument");
    pthread_mutex_lock(&ctx->lock);
    uint32_t nn = atomic_load_explicit(&ctx->nnames, memory_order_relaxed);
    for (uint32_t i = 0; i < nn; i++)
        if (strcmp(ctx->names[i], name) == 0) {
            *id = i;
            pthread_mutex_unlock(&ctx->lock);
            return SS_OK;
        }
    ss_status st = SS_ERR_HOST_OOM;
    char *d = NULL;
    uint64_t *old = atomic_load_explicit(&ctx->name_hash, memory_order_relaxed);
    /* the published hash array is never changed in place: a bigger copy replaces it and the
     * old one is kept until ss_ctx_free, so a lock-free ss_ctx_op never reads freed memory */
    uint64_t *nh = malloc(((size_t)nn + 1) * sizeof *nh);
    if (!nh) goto out;
    if (ssi_grow(&ctx->names, &ctx->cap_names, (size_t)nn + 1, sizeof *ctx->names)) goto out;
    if (old && ssi_grow(&ctx->retired, &ctx->cap_retired, ctx->nretired + 1, sizeof *ctx->retired))
        goto out;
    if (!(d = ssi_strdup(name))) goto out;
    if (nn) memcpy(nh, old, nn * sizeof *nh);
    nh[nn] = ssi_hash_str(name);
    ctx->names[nn] = d;
    if (old) ctx->retired[ctx->nretired++] = old;
    atomic_store_explicit(&ctx->name_hash, nh, memory_order_release);
    atomic_store_explicit(&ctx->nnames, nn + 1, memory_order_release);
    nh = NULL;
    d = NULL;
    *id = nn;
    st = SS_OK;
out:
    pthread_mutex_unlock(&ctx->lock);
    free(nh);
    free(d);
    return st;
}

/* ---- memory accounting ---------------------------------------------------------------------- */

ss_status ss_ctx_set_mem(ss_ctx_t *ctx, uint64_t bytes_in_use) {
    SS_CHECK_ARG(!ctx, "ss_ctx_set_mem: ctx is NULL");
    pthread_mutex_lock(&ctx->lock);
    ctx->mem_reported = 1;
    ctx->mem_rep = bytes_in_use;
    ctx->mem_rep_saved = ctx->saved_live;
    ctx->mem_rep_swapped = ctx->swapped;
    pthread_mutex_unlock(&ctx->lock);
    return SS_OK;
}

_Thread_local int ssi_tl_ovh;

ss_status ss_ctx_sizes(ss_ctx_t *ctx, const int64_t *len, uint32_t n) {
    SS_CHECK_ARG(!ctx, "ss_ctx_sizes: ctx is NULL");
    SS_CHECK_ARG(n && !len, "ss_ctx_sizes: len is NULL with n > 0");
    if (ctx->in_iter) {
        SS_ERROR("ss_ctx_sizes: iteration %llu is open (declare the sizes before ss_ctx_iter_begin)",
                 (unsigned long long)ctx->iter);
        return SS_ERR_STATE;
    }
    int64_t mx = 0;
    for (uint32_t i = 0; i < n; i++) {
        SS_CHECK_ARG(len[i] < 1, "ss_ctx_sizes: a length below 1 (lengths are element counts)");
        if (len[i] > mx) mx = len[i];
    }
    pthread_mutex_lock(&ctx->lock);
    ctx->decl_len = mx;
    pthread_mutex_unlock(&ctx->lock);
    return SS_OK;
}

/* ---- iterations ----------------------------------------------------------------------------- */

ss_status ss_ctx_iter_begin(ss_ctx_t *ctx) {
    SS_CHECK_ARG(!ctx, "ss_ctx_iter_begin: ctx is NULL");
    if (ctx->in_iter) {
        SS_ERROR("ss_ctx_iter_begin: iteration %llu is still open (call ss_ctx_iter_end)",
                 (unsigned long long)ctx->iter);
        return SS_ERR_STATE;
    }
    pthread_mutex_lock(&ctx->lock);
    ctx->in_iter = 1;
    ctx->t_begin = ssi_now();
    ctx->h = SSI_SEQ_SEED;
    atomic_store_explicit(&ctx->n, 0, memory_order_relaxed);
    ctx->nsaves = ctx->nloads = ctx->nreleases = 0;
    ctx->saved_bytes = 0;
    ctx->phase = SS_OP_FWD;
    ctx->phase_set = 0;
    ctx->size_tag = 0;
    ss_status st = SS_OK;
    if (!ctx->opts.disable) {
        st = ssi_stage_iter_begin(ctx);
        if (!st && ctx->exec && ctx->exec->iter_begin)
            st = ctx->exec->iter_begin(ctx->exec->self, ctx, ssi_stage_plan(ctx));
    }
    ctx->slow &= ~(uint32_t)SSI_SLOW_NO_ITER;
    pthread_mutex_unlock(&ctx->lock);
    return st;
}

ss_status ss_ctx_iter_end(ss_ctx_t *ctx, ss_iter_report *report) {
    SS_CHECK_ARG(!ctx, "ss_ctx_iter_end: ctx is NULL");
    if (!ctx->in_iter) {
        SS_ERROR("ss_ctx_iter_end: no iteration is open (call ss_ctx_iter_begin)");
        return SS_ERR_STATE;
    }
    pthread_mutex_lock(&ctx->lock);
    ss_iter_report rep;
    memset(&rep, 0, sizeof rep);
    rep.iter = ctx->iter;
    rep.seconds = ssi_now() - ctx->t_begin;
    rep.nops = atomic_load_explicit(&ctx->n, memory_order_relaxed);
    rep.nsaves = ctx->nsaves;
    rep.nloads = ctx->nloads;
    rep.nreleases = ctx->nreleases;
    rep.saved_bytes = ctx->saved_bytes;
    rep.diverged_at = UINT32_MAX;
    ss_status st = SS_OK;
    if (ctx->opts.disable) {
        rep.stage = rep.next_stage = SS_STAGE_DISABLED;
        ctx->stats.iters_disabled++;
    } else {
        if (ctx->exec && ctx->exec->iter_end) st = ctx->exec->iter_end(ctx->exec->self, ctx, &rep);
        ss_status st2 = ssi_stage_iter_end(ctx, &rep);
        if (!st) st = st2;
    }
    ctx->stats.iters++;
    ctx->stats.ops += rep.nops;
    ctx->last = rep;
    ctx->in_iter = 0;
    ctx->slow |= SSI_SLOW_NO_ITER;
    ctx->next_check = UINT32_MAX;
    ctx->iter++;
    pthread_mutex_unlock(&ctx->lock);
    if (report) *report = rep;
    return st;
}

/* ---- operators ------------------------------------------------------------------------------- */

/* Everything ss_ctx_op does besides the light fast path: disabled, outside an iteration, an
 * executor installed. */
static ss_status op_slow(ss_ctx_t *ctx, uint32_t id, uint64_t site) {
    if (ctx->slow & SSI_SLOW_DISABLED) return SS_OK;
    if (ctx->slow & SSI_SLOW_NO_ITER) {
        SS_ERROR("ss_ctx_op: no iteration is open (call ss_ctx_iter_begin first)");
        return SS_ERR_STATE;
    }
    uint32_t nn = atomic_load_explicit(&ctx->nnames, memory_order_acquire);
    if (id >= nn) {
        SS_ERROR("ss_ctx_op: name id %u was not returned by ss_ctx_intern (%u names)", id, nn);
        return SS_ERR_INVALID;
    }
    const uint64_t *nh = atomic_load_explicit(&ctx->name_hash, memory_order_acquire);
    uint32_t n = atomic_load_explicit(&ctx->n, memory_order_relaxed);
    ctx->h = ssi_seq_step(ctx->h, nh[id], site);
    ctx->ring[n & ctx->ring_mask] = (ssi_ring_op){site, id, 0};
    atomic_store_explicit(&ctx->n, n + 1, memory_order_relaxed);
    ss_status st = SS_OK;
    if (n + 1 == ctx->next_check) st = ssi_stage_check(ctx, id, site);
    if (ctx->exec && ctx->exec->op) ctx->exec->op(ctx->exec->self, ctx, n);
    return st;
}

ss_status ss_ctx_op(ss_ctx_t *ctx, uint32_t id, uint64_t site) {
    if (SS_UNLIKELY(ctx->slow)) return op_slow(ctx, id, site);
    uint32_t nn = atomic_load_explicit(&ctx->nnames, memory_order_acquire);
    if (SS_UNLIKELY(id >= nn)) return op_slow(ctx, id, site);
    const uint64_t *nh = atomic_load_explicit(&ctx->name_hash, memory_order_acquire);
    uint32_t n = atomic_load_explicit(&ctx->n, memory_order_relaxed);
    uint64_t h = ssi_seq_step(ctx->h, nh[id], site);
    ctx->h = h;
    ssi_ring_op *r = &ctx->ring[n & ctx->ring_mask];
    r->site = site;
    r->id = id;
    n++;
    atomic_store_explicit(&ctx->n, n, memory_order_relaxed);
    if (SS_UNLIKELY(n == ctx->next_check)) {
        ssi_stage *s = &ctx->st;
        if (s->ck_j < s->nck && s->ck[s->ck_j] == h) {   /* a checkpoint that matches */
            s->ck_j++;
            s->good_n = n;
            ctx->next_check = s->ck_j < s->nck ? n + s->ck_every : s->plan_nops + 1;
            return SS_OK;
        }
        return ssi_stage_check(ctx, id, site);
    }
    return SS_OK;
}

ss_status ss_ctx_phase(ss_ctx_t *ctx, int phase) {
    SS_CHECK_ARG(!ctx || phase < SS_OP_FWD || phase > SS_OP_OTHER, "ss_ctx_phase: bad argument");
    pthread_mutex_lock(&ctx->lock);
    ctx->phase = phase;
    ctx->phase_set = 1;
    pthread_mutex_unlock(&ctx->lock);
    return SS_OK;
}

/* ---- handles --------------------------------------------------------------------------------- */

ssi_handle *ssi_ctx_handle(ss_ctx_t *ctx, uint64_t handle) {
    uint32_t slot = (uint32_t)(handle & 0xFFFFFFFFu), gen = (uint32_t)(handle >> 32);
    if (slot == 0 || slot > ctx->nhs) return NULL;
    ssi_handle *e = &ctx->hs[slot - 1];
    return e->live && e->gen == gen ? e : NULL;
}

static ss_status save_impl(ss_ctx_t *ctx, void *ptr, ss_block_t *block, uint64_t bytes,
                           int dtype, int ndim, const int64_t *shape, uint32_t flags,
                           uint64_t *handle) {
    SS_CHECK_ARG(!handle || bytes == 0, "ss_ctx_save: handle is NULL or bytes is 0");
    SS_CHECK_ARG(dtype < 0 || dtype >= SS_DTYPE_COUNT, "ss_ctx_save: dtype %d is not an ss_dtype", dtype);
    SS_CHECK_ARG(ndim < 0 || ndim > SS_MAX_DIMS || (ndim > 0 && !shape),
                 "ss_ctx_save: ndim %d (at most %d, shape needed when > 0)", ndim, SS_MAX_DIMS);
    for (int d = 0; d < ndim; d++)
        SS_CHECK_ARG(shape[d] < 0, "ss_ctx_save: dimension %d is negative", d);
    if (!ctx->in_iter) {
        SS_ERROR("ss_ctx_save: no iteration is open");
        return SS_ERR_STATE;
    }
    uint32_t n = atomic_load_explicit(&ctx->n, memory_order_relaxed);
    if (n == 0 && !ctx->opts.disable) {
        SS_ERROR("ss_ctx_save: a save needs a producer: call ss_ctx_op before the first save");
        return SS_ERR_STATE;
    }
    pthread_mutex_lock(&ctx->lock);
    uint32_t slot;
    int from_free = ctx->free_head != 0;
    if (from_free) {
        slot = ctx->free_head - 1;
    } else {
        if (ctx->nhs == UINT32_MAX - 1 ||
            ssi_grow(&ctx->hs, &ctx->cap_hs, (size_t)ctx->nhs + 1, sizeof *ctx->hs)) {
            pthread_mutex_unlock(&ctx->lock);
            return SS_ERR_HOST_OOM;
        }
        slot = ctx->nhs++;
        memset(&ctx->hs[slot], 0, sizeof ctx->hs[slot]);
    }
    ssi_handle *e = &ctx->hs[slot];
    uint32_t gen = e->gen + 1 ? e->gen + 1 : 1;
    uint32_t next_free = e->next_free;
    memset(e, 0, sizeof *e);
    e->ptr = ptr;
    e->block = block;
    e->bytes = bytes;
    e->iter = ctx->iter;
    e->ord = ctx->nsaves;
    e->gen = gen;
    e->live = 1;
    e->flags = flags;
    e->dtype = (uint32_t)dtype;
    e->ndim = (uint32_t)ndim;
    for (int d = 0; d < ndim; d++) e->shape[d] = shape[d];
    uint64_t hv = ((uint64_t)gen << 32) | (slot + 1);
    ss_status st = SS_OK;
    if (!ctx->opts.disable) {
        st = ssi_stage_save(ctx, ctx->nsaves, n - 1, e);
        if (!st && ctx->exec && ctx->exec->save) {
            ssi_ovh o = ssi_ovh_begin(ctx);
            st = ctx->exec->save(ctx->exec->self, ctx, hv, e);
            ssi_ovh_end(ctx, o);
        }
    }
    if (st) {   /* undo: the slot goes (back) onto the free list */
        e->live = 0;
        if (from_free) {
            e->next_free = next_free;
        } else {
            e->next_free = ctx->free_head;
            ctx->free_head = slot + 1;
        }
        pthread_mutex_unlock(&ctx->lock);
        return st;
    }
    if (from_free) ctx->free_head = next_free;
    ctx->nsaves++;
    ctx->saved_bytes += bytes;
    ctx->saved_live += bytes;
    ctx->stats.saves++;
    pthread_mutex_unlock(&ctx->lock);
    *handle = hv;
    return SS_OK;
}

ss_status ss_ctx_save(ss_ctx_t *ctx, void *ptr, uint64_t bytes, int dtype, int ndim,
                      const int64_t *shape, uint32_t flags, uint64_t *handle) {
    SS_CHECK_ARG(!ctx, "ss_ctx_save: ctx is NULL");
    return save_impl(ctx, ptr, NULL, bytes, dtype, ndim, shape, flags, handle);
}

ss_status ss_ctx_save_block(ss_ctx_t *ctx, ss_block_t *block, int dtype, int ndim,
                            const int64_t *shape, uint32_t flags, uint64_t *handle) {
    SS_CHECK_ARG(!ctx || !block, "ss_ctx_save_block: NULL argument");
    SS_CHECK_ARG(ctx->mem_owner != SS_MEM_SMARTSWAP,
                 "ss_ctx_save_block: the context does not own memory (SS_MEM_FRAMEWORK)");
    return save_impl(ctx, ss_block_ptr(block), block, ss_block_size(block), dtype, ndim, shape,
                     flags, handle);
}

ss_status ss_ctx_load(ss_ctx_t *ctx, uint64_t handle, ss_stream_t *stream, void **ptr) {
    SS_CHECK_ARG(!ctx || !ptr, "ss_ctx_load: NULL argument");
    pthread_mutex_lock(&ctx->lock);
    ssi_handle *e = ssi_ctx_handle(ctx, handle);
    if (!e) {
        pthread_mutex_unlock(&ctx->lock);
        SS_ERROR("ss_ctx_load: handle %#llx is not live (released, or never saved)",
                 (unsigned long long)handle);
        return SS_ERR_STATE;
    }
    void *p = e->ptr;
    ss_status st = SS_OK;
    if (!ctx->opts.disable) {
        if (!ctx->phase_set) ctx->phase = SS_OP_BWD;
        uint32_t n = atomic_load_explicit(&ctx->n, memory_order_relaxed);
        if (ctx->in_iter && ctx->st.recording && e->iter == ctx->iter && n > 0) {
            st = ssi_rec_use(ctx, e->ord, n - 1);
            if (st == SS_ERR_INVALID) st = SS_OK;   /* a tensor the prefix did not carry */
        }
        if (!st && ctx->exec && ctx->exec->load) {
            ssi_ovh o = ssi_ovh_begin(ctx);
            st = ctx->exec->load(ctx->exec->self, ctx, handle, e, stream ? stream : ctx->compute, &p);
            ssi_ovh_end(ctx, o);
        }
    }
    if (!st) {
        ctx->nloads++;
        ctx->stats.loads++;
    }
    pthread_mutex_unlock(&ctx->lock);
    if (!st) *ptr = p;
    return st;
}

ss_status ss_ctx_recomputable(ss_ctx_t *ctx, uint64_t handle, const uint64_t *src, uint32_t nsrc,
                              const uint32_t *ops, uint32_t nop) {
    SS_CHECK_ARG(!ctx || (nsrc && !src) || !ops || nop < 1 || nop > 2 || nsrc > 2,
                 "ss_ctx_recomputable: NULL argument, or not 1..2 operators and 0..2 sources");
    if (ctx->opts.disable) return SS_OK;
    pthread_mutex_lock(&ctx->lock);
    ss_status st = SS_OK;
    ssi_handle *e = ssi_ctx_handle(ctx, handle);
    uint32_t n = atomic_load_explicit(&ctx->n, memory_order_relaxed);
    uint32_t so[2] = {0, 0};
    if (!e || e->iter != ctx->iter || !ctx->in_iter) {
        SS_ERROR("ss_ctx_recomputable: handle %#llx is not live in this iteration", (unsigned long long)handle);
        st = SS_ERR_STATE;
    }
    for (uint32_t k = 0; k < nsrc && !st; k++) {
        ssi_handle *y = ssi_ctx_handle(ctx, src[k]);
        if (!y || y->iter != ctx->iter || y == e) {
            SS_ERROR("ss_ctx_recomputable: source %u (%#llx) is not another live handle of this iteration", k,
                     (unsigned long long)src[k]);
            st = SS_ERR_STATE;
        } else {
            so[k] = y->ord;
        }
    }
    for (uint32_t k = 0; k < nop && !st; k++)
        if (ops[k] >= n) {
            SS_ERROR("ss_ctx_recomputable: operator %u has not run (%u so far)", ops[k], n);
            st = SS_ERR_INVALID;
        }
    if (!st && ctx->st.recording) {
        st = ssi_rec_recompute(ctx, e->ord, so, nsrc, ops, nop);
        if (st == SS_ERR_INVALID) st = SS_OK;   /* a tensor or operator the recording does not hold */
    }
    pthread_mutex_unlock(&ctx->lock);
    return st;
}

ss_status ss_ctx_recomputable_span(ss_ctx_t *ctx, uint64_t handle, uint32_t op_first, uint32_t op_last) {
    SS_CHECK_ARG(!ctx || op_first > op_last, "ss_ctx_recomputable_span: NULL context, or op_first after op_last");
    if (ctx->opts.disable) return SS_OK;
    pthread_mutex_lock(&ctx->lock);
    ss_status st = SS_OK;
    ssi_handle *e = ssi_ctx_handle(ctx, handle);
    uint32_t n = atomic_load_explicit(&ctx->n, memory_order_relaxed);
    if (!e || e->iter != ctx->iter || !ctx->in_iter) {
        SS_ERROR("ss_ctx_recomputable_span: handle %#llx is not live in this iteration", (unsigned long long)handle);
        st = SS_ERR_STATE;
    } else if (op_last >= n) {
        SS_ERROR("ss_ctx_recomputable_span: operator %u has not run (%u so far)", op_last, n);
        st = SS_ERR_INVALID;
    }
    if (!st && ctx->st.recording) {
        st = ssi_rec_span(ctx, e->ord, op_first, op_last);
        if (st == SS_ERR_INVALID) st = SS_OK;   /* a tensor or operator the recording does not hold */
    }
    pthread_mutex_unlock(&ctx->lock);
    return st;
}

ss_status ss_ctx_release(ss_ctx_t *ctx, uint64_t handle) {
    SS_CHECK_ARG(!ctx, "ss_ctx_release: ctx is NULL");
    pthread_mutex_lock(&ctx->lock);
    ssi_handle *e = ssi_ctx_handle(ctx, handle);
    if (!e) {
        pthread_mutex_unlock(&ctx->lock);
        SS_ERROR("ss_ctx_release: handle %#llx is not live (released twice, or never saved)",
                 (unsigned long long)handle);
        return SS_ERR_STATE;
    }
    ss_status st = SS_OK;
    if (!ctx->opts.disable) {
        uint32_t n = atomic_load_explicit(&ctx->n, memory_order_relaxed);
        if (ctx->in_iter && ctx->st.recording && e->iter == ctx->iter && n > 0) {
            st = ssi_rec_release(ctx, e->ord, n - 1);
            if (st == SS_ERR_INVALID) st = SS_OK;
        }
        if (ctx->exec && ctx->exec->release) {
            ssi_ovh o = ssi_ovh_begin(ctx);
            ss_status st2 = ctx->exec->release(ctx->exec->self, ctx, handle, e);
            ssi_ovh_end(ctx, o);
            if (!st) st = st2;
        }
    }
    ss_status stf = SS_OK;
    if (e->block && ctx->alloc && !ctx->exec) stf = ss_alloc_free(ctx->alloc, e->block);
    ctx->saved_live -= e->bytes;
    e->live = 0;
    e->exec = NULL;
    uint32_t slot = (uint32_t)(e - ctx->hs);
    e->next_free = ctx->free_head;
    ctx->free_head = slot + 1;
    ctx->nreleases++;
    ctx->stats.releases++;
    pthread_mutex_unlock(&ctx->lock);
    return st ? st : stf;
}

/* ---- actions --------------------------------------------------------------------------------- */

ss_status ssi_ctx_push_action(ss_ctx_t *ctx, uint32_t kind, uint64_t handle, uint64_t bytes) {
    if (ctx->act_n == ctx->cap_act) {   /* grow the ring, unrolling it */
        size_t ncap = ctx->cap_act ? ctx->cap_act * 2 : 16;
        ss_action *na = malloc(ncap * sizeof *na);
        if (!na) return SS_ERR_HOST_OOM;
        for (size_t i = 0; i < ctx->act_n; i++) na[i] = ctx->act[(ctx->act_head + i) % ctx->cap_act];
        free(ctx->act);
        ctx->act = na;
        ctx->cap_act = ncap;
        ctx->act_head = 0;
    }
    ss_action *a = &ctx->act[(ctx->act_head + ctx->act_n) % ctx->cap_act];
    a->kind = kind;
    a->reserved = 0;
    a->handle = handle;
    a->bytes = bytes;
    ctx->act_n++;
    ctx->stats.actions++;
    return SS_OK;
}

ss_status ss_ctx_actions(ss_ctx_t *ctx, ss_action *buf, uint32_t max, uint32_t *n) {
    SS_CHECK_ARG(!ctx || !n || (max && !buf), "ss_ctx_actions: NULL argument");
    pthread_mutex_lock(&ctx->lock);
    uint32_t k = 0;
    while (k < max && ctx->act_n) {
        buf[k++] = ctx->act[ctx->act_head];
        ctx->act_head = (ctx->act_head + 1) % ctx->cap_act;
        ctx->act_n--;
    }
    pthread_mutex_unlock(&ctx->lock);
    *n = k;
    return SS_OK;
}

ss_status ss_ctx_action_done(ss_ctx_t *ctx, uint64_t handle, void *ptr) {
    SS_CHECK_ARG(!ctx, "ss_ctx_action_done: ctx is NULL");
    pthread_mutex_lock(&ctx->lock);
    ssi_handle *e = ssi_ctx_handle(ctx, handle);
    ss_status st = SS_ERR_STATE;
    if (e && ctx->exec && ctx->exec->action_done)
        st = ctx->exec->action_done(ctx->exec->self, ctx, handle, e, ptr);
    pthread_mutex_unlock(&ctx->lock);
    if (st == SS_ERR_STATE)
        SS_ERROR("ss_ctx_action_done: no allocation is pending for handle %#llx",
                 (unsigned long long)handle);
    return st;
}

/* ---- stage and counters ----------------------------------------------------------------------- */

ss_stage ss_ctx_stage(const ss_ctx_t *ctx) {
    if (!ctx) return SS_STAGE_DISABLED;
    return (ss_stage)atomic_load(&((ss_ctx_t *)ctx)->st.stage);
}

ss_status ss_ctx_get_stats(ss_ctx_t *ctx, ss_ctx_stats *out) {
    SS_CHECK_ARG(!ctx || !out, "ss_ctx_get_stats: NULL argument");
    pthread_mutex_lock(&ctx->lock);
    *out = ctx->stats;
    pthread_mutex_unlock(&ctx->lock);
    return SS_OK;
}

ss_status ss_ctx_last_report(ss_ctx_t *ctx, ss_iter_report *out) {
    SS_CHECK_ARG(!ctx || !out, "ss_ctx_last_report: NULL argument");
    pthread_mutex_lock(&ctx->lock);
    *out = ctx->last;
    pthread_mutex_unlock(&ctx->lock);
    return SS_OK;
}
