/* profile.c: the profiler. Light mode is the running hash of profile.h (ssi_seq_step), folded
 * inline by ss_ctx_op in api.c; this file holds what light mode needs besides (the size
 * signature, the running hashes of a recorded profile) and detailed recording into an
 * ss_profile (profile.h): operators with the unconstrained device bytes after each, saved
 * tensors with producer, uses and release, and the iteration's wall time. Memory grows with the
 * events (the container's growable arrays); nothing is capped.
 *
 * All ssi_rec_* calls run with the context's lock held. Errors: SS_ERR_HOST_OOM when memory
 * runs out (the recording is then abandoned by the stage), SS_ERR_FORMAT when the finished
 * profile fails its check (a bug or a broken caller contract; logged).
 */
#include "api.h"

uint64_t ssi_size_sig(uint64_t bytes) {
    if (bytes < 16) return bytes;
    int msb = 63 - __builtin_clzll(bytes);
    return ((uint64_t)msb << 4) | ((bytes >> (msb - 4)) & 15u);
}

uint64_t ssi_profile_running_hashes(const ss_profile *p, uint64_t *out) {
    uint64_t h = SSI_SEQ_SEED;
    uint64_t *nh = p->nnames ? malloc(p->nnames * sizeof *nh) : NULL;
    for (uint32_t i = 0; nh && i < p->nnames; i++) nh[i] = ssi_hash_str(p->names[i]);
    for (uint32_t i = 0; i < p->nops; i++) {
        const ss_prof_op *o = &p->ops[i];
        uint64_t x = nh ? nh[o->name] : ssi_hash_str(p->names[o->name]);
        h = ssi_seq_step(h, x, o->site);
        if (out) out[i] = h;
    }
    free(nh);
    return h;
}

uint64_t ssi_profile_saved_bytes(const ss_profile *p) {
    uint64_t s = 0;
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (p->tensors[t].flags & SS_TENSOR_SAVED) s += p->tensors[t].bytes;
    return s;
}

ss_status ssi_profile_copy_prefix(ss_profile *dst, const ss_profile *src, uint32_t nops,
                                  uint32_t ntensors, uint32_t upto) {
    if (!dst || !src || nops > src->nops || ntensors > src->ntensors || upto > nops)
        return SS_ERR_INVALID;
    if (dst->nnames < src->nnames) return SS_ERR_INVALID;
    ss_status st;
    /* bytes of dropped tensors per operator, as a difference array over [producer, release) */
    int64_t *diff = NULL;
    if (ntensors < src->ntensors && nops) {
        diff = calloc((size_t)nops + 1, sizeof *diff);
        if (!diff) return SS_ERR_HOST_OOM;
        for (uint32_t t = ntensors; t < src->ntensors; t++) {
            const ss_prof_tensor *x = &src->tensors[t];
            if (x->producer >= nops) continue;
            uint32_t end = (x->release == SS_NONE || x->release > nops) ? nops : x->release;
            diff[x->producer] += (int64_t)x->bytes;
            diff[end] -= (int64_t)x->bytes;
        }
    }
    int64_t drop = 0;
    for (uint32_t i = 0; i < nops; i++) {
        ss_prof_op o = src->ops[i];
        if (diff) {
            drop += diff[i];
            o.mem_after = (uint64_t)drop > o.mem_after ? 0 : o.mem_after - (uint64_t)drop;
        }
        if ((st = ssi_profile_add_op(dst, &o, NULL))) { free(diff); return st; }
    }
    free(diff);
    for (uint32_t t = 0; t < ntensors; t++) {
        ss_prof_tensor x = src->tensors[t];
        if (x.producer >= nops) return SS_ERR_INVALID;
        if (x.release != SS_NONE && x.release >= upto) x.release = SS_NONE;
        for (uint32_t k = 0; k < x.rc_nsrc; k++)
            if (x.rc_src[k] >= ntensors) x.rc_nop = 0;
        for (uint32_t k = 0; k < x.rc_nop; k++)
            if (x.rc_op[k] >= nops) x.rc_nop = 0;
        if (!x.rc_nop) { x.rc_nsrc = 0; memset(x.rc_op, 0, sizeof x.rc_op); memset(x.rc_src, 0, sizeof x.rc_src); }
        if (x.span_nop && (uint64_t)x.span_first + x.span_nop > nops) x.span_first = x.span_nop = 0;
        if ((st = ssi_profile_add_tensor(dst, &x, NULL))) return st;
        const ss_prof_tensor *s = &src->tensors[t];
        for (uint32_t u = 0; u < s->nuses; u++) {
            uint32_t op = src->uses[s->use_off + u];
            if (op < upto && (st = ssi_profile_add_use(dst, t, op))) return st;
        }
    }
    dst->base_bytes = src->base_bytes;
    return SS_OK;
}

/* ---- the context as the recording reads it: its name table and its device bytes in use ----
 * (here, not in api.c, so that api.c calls the profiler and the stage machine and neither
 * calls back into it) */

ss_status ssi_ctx_sync_names(ss_ctx_t *ctx, ss_profile *p, uint32_t upto) {
    uint32_t nn = atomic_load_explicit(&ctx->nnames, memory_order_relaxed);
    if (upto > nn) return SS_ERR_INVALID;
    while (p->nnames < upto) {
        uint32_t id;
        ss_status st = ssi_profile_intern(p, ctx->names[p->nnames], &id);
        if (st) return st;
    }
    return SS_OK;
}

uint64_t ssi_ctx_mem_now(ss_ctx_t *ctx) {
    uint64_t base = 0, saved0 = 0, swapped0 = 0;
    if (ctx->mem_reported) {
        base = ctx->mem_rep;
        saved0 = ctx->mem_rep_saved;
        swapped0 = ctx->mem_rep_swapped;
    } else if (ctx->alloc) {
        ss_alloc_stats as;
        if (ss_alloc_get_stats(ctx->alloc, &as) == SS_OK) {
            base = as.in_use_bytes;
            saved0 = ctx->saved_live;
            swapped0 = ctx->swapped;
        }
    }
    int64_t v = (int64_t)(base + swapped0) + ((int64_t)ctx->saved_live - (int64_t)saved0);
    return v < 0 ? 0 : (uint64_t)v;
}

ss_status ssi_rec_start(ss_ctx_t *ctx) {
    ss_status st;
    if (!ctx->st.rec && (st = ssi_profile_new(&ctx->st.rec))) return st;
    ssi_profile_clear(ctx->st.rec);
    uint32_t nn = atomic_load_explicit(&ctx->nnames, memory_order_relaxed);
    if ((st = ssi_ctx_sync_names(ctx, ctx->st.rec, nn))) return st;
    ctx->st.rec->base_bytes = ssi_ctx_mem_now(ctx);
    if (!ctx->mem_reported && ctx->alloc) {   /* the first operator's window starts here */
        uint64_t hw;
        (void)ss_alloc_window_peak(ctx->alloc, &hw, NULL);
    }
    ctx->st.rec_t = 0;
    ssi_fmt(ctx->st.rec->desc, sizeof ctx->st.rec->desc, "smartswap detailed profile, iteration %llu",
            (unsigned long long)ctx->iter);
    return SS_OK;
}

/* On a device with a virtual clock (cpu-sim's virtual-clock option) nothing the profile
 * records may depend on wall time: the plan made from it decides what is swapped, recomputed
 * and where, and a run on the virtual clock must be the same run every time. An operator's
 * `seconds` there is a model instead: SSI_VOP_S per operator plus the bytes it allocated (its
 * outputs and temporaries: its peak less the bytes in use before it) at SSI_VOP_BPS bytes/s,
 * and the iteration's time is the sum. */
#define SSI_VOP_S   2e-6
#define SSI_VOP_BPS 4e9
int ssi_rec_virtual(const ss_ctx_t *ctx) {
    const ss_device_caps *c = ctx->device ? ss_device_get_caps(ctx->device) : NULL;
    return c && c->virtual_clock;
}

/* The caller's own seconds since the last recorded operator: wall time less the time spent
 * inside smartswap (ctx->ovh_ns); becomes that operator's `seconds` (on the virtual clock
 * rec_close sets it from the model above). */
static void rec_time(ss_ctx_t *ctx, ss_profile *p) {
    if (ctx->st.rec_t < 0) return;   /* paused (operators replayed from the ring) */
    if (ssi_rec_virtual(ctx)) { ctx->st.rec_t = 1; return; }
    double t = ssi_now();
    uint64_t ov = atomic_load_explicit(&ctx->ovh_ns, memory_order_relaxed);
    if (p->nops && ctx->st.rec_t > 0) {
        double d = (t - ctx->st.rec_t) - (double)(ov - ctx->st.rec_ov) * 1e-9;
        p->ops[p->nops - 1].seconds = d > 0 ? d : 0;
    }
    ctx->st.rec_t = t;
    ctx->st.rec_ov = ov;
}

/* Closes the last recorded operator: its mem_after (the bytes in use now) and mem_peak (that
 * plus how far the allocator's bytes in use rose above now since the operator began: the
 * temporaries it allocated and freed). Starts the next operator's window. Returns mem_after. */
static uint64_t rec_close(ss_ctx_t *ctx, ss_profile *p) {
    uint64_t mem = ssi_ctx_mem_now(ctx), hw = 0, now = 0, peak = mem;
    if (!ctx->mem_reported && ctx->alloc && ss_alloc_window_peak(ctx->alloc, &hw, &now) == SS_OK && hw > now)
        peak = mem + (hw - now);
    if (p->nops) {
        ss_prof_op *o = &p->ops[p->nops - 1];
        o->mem_after = mem;
        o->mem_peak = peak;
        if (ctx->st.rec_t >= 0 && ssi_rec_virtual(ctx)) {
            uint64_t before = p->nops > 1 ? p->ops[p->nops - 2].mem_after : p->base_bytes;
            o->seconds = SSI_VOP_S + (double)(peak > before ? peak - before : 0) / SSI_VOP_BPS;
        }
    }
    return mem;
}

ss_status ssi_rec_op(ss_ctx_t *ctx, uint32_t id, uint64_t site) {
    ss_profile *p = ctx->st.rec;
    ss_status st;
    rec_time(ctx, p);
    if (id >= p->nnames && (st = ssi_ctx_sync_names(ctx, p, id + 1))) return st;
    uint64_t mem = rec_close(ctx, p);
    ss_prof_op o = {0};
    o.name = id;
    o.phase = (uint32_t)ctx->phase;
    o.site = site;
    o.mem_after = mem;
    return ssi_profile_add_op(p, &o, NULL);
}

ss_status ssi_rec_save(ss_ctx_t *ctx, uint32_t ord, uint32_t op, const ssi_handle *hd) {
    ss_profile *p = ctx->st.rec;
    SS_ASSERT(ord == p->ntensors);
    SS_ASSERT(op < p->nops);
    ss_prof_tensor t;
    memset(&t, 0, sizeof t);
    t.bytes = hd->bytes;
    t.dtype = hd->dtype;
    t.ndim = hd->ndim;
    memcpy(t.shape, hd->shape, sizeof t.shape);
    t.producer = op;
    t.release = SS_NONE;
    t.flags = SS_TENSOR_SAVED | ((hd->flags & SS_SAVE_NOSWAP) ? SS_TENSOR_NOSWAP : 0);
    return ssi_profile_add_tensor(p, &t, NULL);
}

ss_status ssi_rec_use(ss_ctx_t *ctx, uint32_t ord, uint32_t op) {
    ss_profile *p = ctx->st.rec;
    if (ord >= p->ntensors || op >= p->nops) return SS_ERR_INVALID;
    return ssi_profile_add_use(p, ord, op);
}

ss_status ssi_rec_release(ss_ctx_t *ctx, uint32_t ord, uint32_t op) {
    ss_profile *p = ctx->st.rec;
    if (ord >= p->ntensors || op >= p->nops) return SS_ERR_INVALID;
    p->tensors[ord].release = op;
    return SS_OK;
}

ss_status ssi_rec_recompute(ss_ctx_t *ctx, uint32_t ord, const uint32_t *src, uint32_t nsrc,
                            const uint32_t *ops, uint32_t nop) {
    ss_profile *p = ctx->st.rec;
    if (ord >= p->ntensors || nop < 1 || nop > 2 || nsrc > 2) return SS_ERR_INVALID;
    for (uint32_t k = 0; k < nsrc; k++)
        if (src[k] >= p->ntensors || src[k] == ord) return SS_ERR_INVALID;
    for (uint32_t k = 0; k < nop; k++)
        if (ops[k] >= p->nops) return SS_ERR_INVALID;
    ss_prof_tensor *t = &p->tensors[ord];
    t->rc_nop = nop;
    t->rc_nsrc = nsrc;
    for (uint32_t k = 0; k < nop; k++) t->rc_op[k] = ops[k];
    for (uint32_t k = 0; k < nsrc; k++) t->rc_src[k] = src[k];
    return SS_OK;
}

ss_status ssi_rec_span(ss_ctx_t *ctx, uint32_t ord, uint32_t op_first, uint32_t op_last) {
    ss_profile *p = ctx->st.rec;
    if (ord >= p->ntensors || op_first > op_last || op_last >= p->nops) return SS_ERR_INVALID;
    p->tensors[ord].span_first = op_first;
    p->tensors[ord].span_nop = op_last - op_first + 1;
    return SS_OK;
}

ss_status ssi_rec_finish(ss_ctx_t *ctx, uint64_t seq_hash, uint64_t size_sig, double seconds) {
    ss_profile *p = ctx->st.rec;
    rec_close(ctx, p);
    rec_time(ctx, p);
    p->seq_hash = seq_hash;
    p->size_sig = size_sig;
    p->iter_seconds = seconds;
    if (ssi_rec_virtual(ctx)) {   /* the model's sum, not the wall time (see ssi_rec_virtual) */
        p->iter_seconds = 0;
        for (uint32_t i = 0; i < p->nops; i++) p->iter_seconds += p->ops[i].seconds;
    }
    return ssi_profile_finalize(p);
}
