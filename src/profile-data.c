/* profile-data.c: the in-memory profile container of profile.h: building it operator by
 * operator, sorting uses, checking, comparing and cloning. The profiler (profile.c), the trace
 * reader (trace.c) and the synthetic generator (workload.c) all fill profiles through it.
 */
#include "profile.h"

#include <stdio.h>

ss_status ssi_profile_new(ss_profile **out) {
    if (!out) return SS_ERR_INVALID;
    ss_profile *p = calloc(1, sizeof *p);
    if (!p) return SS_ERR_HOST_OOM;
    *out = p;
    return SS_OK;
}

void ssi_profile_free(ss_profile *p) {
    if (!p) return;
    for (uint32_t i = 0; i < p->nnames; i++) free(p->names[i]);
    free(p->names);
    free(p->ops);
    free(p->tensors);
    free(p->uses);
    free(p->pend);
    free(p);
}

void ssi_profile_clear(ss_profile *p) {
    for (uint32_t i = 0; i < p->nnames; i++) free(p->names[i]);
    p->nnames = 0;
    p->nops = p->ntensors = 0;
    p->nuses = p->npend = 0;
    p->desc[0] = 0;
    p->seq_hash = p->size_sig = p->base_bytes = 0;
    p->iter_seconds = 0;
}

ss_status ssi_profile_intern(ss_profile *p, const char *name, uint32_t *id) {
    if (!p || !name || !id) return SS_ERR_INVALID;
    for (uint32_t i = 0; i < p->nnames; i++)
        if (strcmp(p->names[i], name) == 0) { *id = i; return SS_OK; }
    if (ssi_grow(&p->names, &p->cap_names, (size_t)p->nnames + 1, sizeof *p->names)) return SS_ERR_HOST_OOM;
    char *d = ssi_strdup(name);
    if (!d) return SS_ERR_HOST_OOM;
    p->names[p->nnames] = d;
    *id = p->nnames++;
    return SS_OK;
}

ss_status ssi_profile_add_op(ss_profile *p, const ss_prof_op *op, uint32_t *idx) {
    if (!p || !op) return SS_ERR_INVALID;
    if (p->nops == SS_NONE - 1) return SS_ERR_INVALID;
    if (ssi_grow(&p->ops, &p->cap_ops, (size_t)p->nops + 1, sizeof *p->ops)) return SS_ERR_HOST_OOM;
    p->ops[p->nops] = *op;
    if (idx) *idx = p->nops;
    p->nops++;
    return SS_OK;
}

ss_status ssi_profile_add_tensor(ss_profile *p, const ss_prof_tensor *t, uint32_t *idx) {
    if (!p || !t) return SS_ERR_INVALID;
    if (p->ntensors == SS_NONE - 1) return SS_ERR_INVALID;
    if (ssi_grow(&p->tensors, &p->cap_tensors, (size_t)p->ntensors + 1, sizeof *p->tensors))
        return SS_ERR_HOST_OOM;
    ss_prof_tensor *d = &p->tensors[p->ntensors];
    *d = *t;
    d->use_off = 0;
    d->nuses = 0;
    if (idx) *idx = p->ntensors;
    p->ntensors++;
    return SS_OK;
}

ss_status ssi_profile_add_use(ss_profile *p, uint32_t tensor, uint32_t op) {
    if (!p) return SS_ERR_INVALID;
    if (ssi_grow(&p->pend, &p->cap_pend, p->npend + 2, sizeof *p->pend)) return SS_ERR_HOST_OOM;
    p->pend[p->npend++] = tensor;
    p->pend[p->npend++] = op;
    return SS_OK;
}

/* Insertion sort: each tensor has few uses. */
static void sort_u32(uint32_t *u, uint32_t n) {
    for (uint32_t i = 1; i < n; i++) {
        uint32_t v = u[i], j = i;
        while (j > 0 && u[j - 1] > v) { u[j] = u[j - 1]; j--; }
        u[j] = v;
    }
}

ss_status ssi_profile_finalize(ss_profile *p) {
    if (!p) return SS_ERR_INVALID;
    size_t npairs = p->npend / 2;
    if (npairs) {
        uint32_t nt = p->ntensors;
        size_t total = p->nuses + npairs;
        uint32_t *extra = calloc((size_t)nt + 1, sizeof *extra);   /* new uses per tensor */
        uint32_t *nu = malloc(total * sizeof *nu);
        if (!extra || !nu) { free(extra); free(nu); return SS_ERR_HOST_OOM; }
        for (size_t i = 0; i < npairs; i++) {
            uint32_t t = p->pend[2 * i];
            if (t >= nt) {
                SS_ERROR("profile: a use names tensor %u but only %u tensors exist", t, nt);
                free(extra); free(nu);
                return SS_ERR_FORMAT;
            }
            extra[t]++;
        }
        /* lay out each tensor's old uses followed by room for its new ones; extra[t] becomes
         * the write position of t's next new use */
        size_t off = 0;
        for (uint32_t t = 0; t < nt; t++) {
            ss_prof_tensor *x = &p->tensors[t];
            if (x->nuses) memcpy(nu + off, p->uses + x->use_off, x->nuses * sizeof *nu);
            uint32_t n_new = extra[t];
            x->use_off = (uint32_t)off;
            extra[t] = (uint32_t)(off + x->nuses);
            x->nuses += n_new;
            off += x->nuses;
        }
        for (size_t i = 0; i < npairs; i++) {
            uint32_t t = p->pend[2 * i];
            nu[extra[t]++] = p->pend[2 * i + 1];
        }
        free(extra);
        /* sort each tensor's uses and drop duplicates, compacting in place */
        size_t w = 0;
        for (uint32_t t = 0; t < nt; t++) {
            ss_prof_tensor *x = &p->tensors[t];
            uint32_t *u = nu + x->use_off;
            sort_u32(u, x->nuses);
            uint32_t start = (uint32_t)w, n = 0;
            for (uint32_t i = 0; i < x->nuses; i++)
                if (n == 0 || nu[w - 1] != u[i]) { nu[w++] = u[i]; n++; }
            x->use_off = start;
            x->nuses = n;
        }
        free(p->uses);
        p->uses = nu;
        p->nuses = w;
        p->cap_uses = total;
        p->npend = 0;
    }
    char err[200];
    if (ssi_profile_check(p, err, sizeof err) != SS_OK) {
        SS_ERROR("profile check failed: %s", err);
        return SS_ERR_FORMAT;
    }
    return SS_OK;
}

ss_status ssi_profile_check(const ss_profile *p, char *err, size_t err_len) {
    if (!p) return SS_ERR_INVALID;
    for (uint32_t i = 0; i < p->nops; i++) {
        const ss_prof_op *o = &p->ops[i];
        if (o->name >= p->nnames) {
            ssi_fmt(err, err_len, "op %u: name id %u but only %u names", i, o->name, p->nnames);
            return SS_ERR_FORMAT;
        }
        if (o->phase > SS_PHASE_OTHER) {
            ssi_fmt(err, err_len, "op %u: phase %u is not fwd/bwd/opt/other", i, o->phase);
            return SS_ERR_FORMAT;
        }
        if (!(o->flops >= 0) || !(o->seconds >= 0)) {
            ssi_fmt(err, err_len, "op %u: negative or NaN flops/seconds", i);
            return SS_ERR_FORMAT;
        }
    }
    for (uint32_t t = 0; t < p->ntensors; t++) {
        const ss_prof_tensor *x = &p->tensors[t];
        if (x->bytes == 0) { ssi_fmt(err, err_len, "tensor %u: zero bytes", t); return SS_ERR_FORMAT; }
        if (x->ndim > SS_MAX_DIMS) {
            ssi_fmt(err, err_len, "tensor %u: %u dimensions (at most %d)", t, x->ndim, SS_MAX_DIMS);
            return SS_ERR_FORMAT;
        }
        if (x->dtype >= SS_DTYPE_COUNT) {
            ssi_fmt(err, err_len, "tensor %u: unknown dtype %u", t, x->dtype);
            return SS_ERR_FORMAT;
        }
        for (uint32_t d = 0; d < x->ndim; d++)
            if (x->shape[d] < 0) {
                ssi_fmt(err, err_len, "tensor %u: negative dimension %u", t, d);
                return SS_ERR_FORMAT;
            }
        if (x->producer >= p->nops) {
            ssi_fmt(err, err_len, "tensor %u: producer op %u but only %u ops", t, x->producer, p->nops);
            return SS_ERR_FORMAT;
        }
        if ((size_t)x->use_off + x->nuses > p->nuses) {
            ssi_fmt(err, err_len, "tensor %u: uses out of range", t);
            return SS_ERR_FORMAT;
        }
        uint32_t last = x->producer;
        for (uint32_t i = 0; i < x->nuses; i++) {
            uint32_t u = p->uses[x->use_off + i];
            if (u >= p->nops || u < last || (i > 0 && u == last)) {
                ssi_fmt(err, err_len, "tensor %u: use %u at op %u is out of order or range "
                        "(producer %u, %u ops)", t, i, u, x->producer, p->nops);
                return SS_ERR_FORMAT;
            }
            last = u;
        }
        if (x->release != SS_NONE && (x->release >= p->nops || x->release < last)) {
            ssi_fmt(err, err_len, "tensor %u: released at op %u, before its last use %u or past "
                    "the end (%u ops)", t, x->release, last, p->nops);
            return SS_ERR_FORMAT;
        }
        if (x->rc_nop > 2 || x->rc_nsrc > 2 || (!x->rc_nop && x->rc_nsrc)) {
            ssi_fmt(err, err_len, "tensor %u: recompute recipe with %u operators and %u sources "
                    "(at most 2 each, and operators whenever sources)", t, x->rc_nop, x->rc_nsrc);
            return SS_ERR_FORMAT;
        }
        for (uint32_t i = 0; i < x->rc_nop; i++)
            if (x->rc_op[i] >= p->nops) {
                ssi_fmt(err, err_len, "tensor %u: recompute operator %u past the end (%u ops)", t, x->rc_op[i], p->nops);
                return SS_ERR_FORMAT;
            }
        if (x->span_nop && (uint64_t)x->span_first + x->span_nop > p->nops) {
            ssi_fmt(err, err_len, "tensor %u: recompute span of %u operators from op %u past the end (%u ops)", t,
                    x->span_nop, x->span_first, p->nops);
            return SS_ERR_FORMAT;
        }
        for (uint32_t i = 0; i < x->rc_nsrc; i++)
            if (x->rc_src[i] >= p->ntensors || x->rc_src[i] == t) {
                ssi_fmt(err, err_len, "tensor %u: recompute source %u is itself or not a tensor (%u tensors)", t,
                        x->rc_src[i], p->ntensors);
                return SS_ERR_FORMAT;
            }
    }
    return SS_OK;
}

int ssi_profile_equal(const ss_profile *a, const ss_profile *b) {
    if (a->nops != b->nops || a->ntensors != b->ntensors || a->nnames != b->nnames) return 0;
    if (a->nuses != b->nuses || a->npend || b->npend) return 0;
    if (strcmp(a->desc, b->desc) || a->seq_hash != b->seq_hash || a->size_sig != b->size_sig) return 0;
    if (a->base_bytes != b->base_bytes || a->iter_seconds != b->iter_seconds) return 0;
    for (uint32_t i = 0; i < a->nnames; i++)
        if (strcmp(a->names[i], b->names[i])) return 0;
    for (uint32_t i = 0; i < a->nops; i++) {
        const ss_prof_op *x = &a->ops[i], *y = &b->ops[i];
        if (x->name != y->name || x->phase != y->phase || x->site != y->site ||
            x->mem_after != y->mem_after || x->mem_peak != y->mem_peak || x->flops != y->flops || x->seconds != y->seconds)
            return 0;
    }
    for (uint32_t t = 0; t < a->ntensors; t++) {
        const ss_prof_tensor *x = &a->tensors[t], *y = &b->tensors[t];
        if (x->bytes != y->bytes || x->dtype != y->dtype || x->ndim != y->ndim ||
            x->producer != y->producer || x->release != y->release || x->nuses != y->nuses ||
            x->flags != y->flags || x->rc_nop != y->rc_nop || x->rc_nsrc != y->rc_nsrc ||
            memcmp(x->rc_op, y->rc_op, sizeof x->rc_op) || memcmp(x->rc_src, y->rc_src, sizeof x->rc_src) ||
            x->span_first != y->span_first || x->span_nop != y->span_nop)
            return 0;
        for (uint32_t d = 0; d < x->ndim; d++)
            if (x->shape[d] != y->shape[d]) return 0;
        for (uint32_t i = 0; i < x->nuses; i++)
            if (a->uses[x->use_off + i] != b->uses[y->use_off + i]) return 0;
    }
    return 1;
}

ss_status ssi_profile_clone(const ss_profile *p, ss_profile **out) {
    if (!p || !out) return SS_ERR_INVALID;
    ss_profile *c;
    if (ssi_profile_new(&c)) return SS_ERR_HOST_OOM;
    memcpy(c->desc, p->desc, sizeof c->desc);
    c->seq_hash = p->seq_hash;
    c->size_sig = p->size_sig;
    c->base_bytes = p->base_bytes;
    c->iter_seconds = p->iter_seconds;
    ss_status st = SS_OK;
    for (uint32_t i = 0; i < p->nnames && !st; i++) {
        uint32_t id;
        st = ssi_profile_intern(c, p->names[i], &id);
    }
    if (!st && p->nops) {
        st = ssi_grow(&c->ops, &c->cap_ops, p->nops, sizeof *c->ops);
        if (!st) { memcpy(c->ops, p->ops, p->nops * sizeof *c->ops); c->nops = p->nops; }
    }
    if (!st && p->ntensors) {
        st = ssi_grow(&c->tensors, &c->cap_tensors, p->ntensors, sizeof *c->tensors);
        if (!st) { memcpy(c->tensors, p->tensors, p->ntensors * sizeof *c->tensors); c->ntensors = p->ntensors; }
    }
    if (!st && p->nuses) {
        st = ssi_grow(&c->uses, &c->cap_uses, p->nuses, sizeof *c->uses);
        if (!st) { memcpy(c->uses, p->uses, p->nuses * sizeof *c->uses); c->nuses = p->nuses; }
    }
    if (!st && p->npend) {
        st = ssi_grow(&c->pend, &c->cap_pend, p->npend, sizeof *c->pend);
        if (!st) { memcpy(c->pend, p->pend, p->npend * sizeof *c->pend); c->npend = p->npend; }
    }
    if (st) { ssi_profile_free(c); return st; }
    *out = c;
    return SS_OK;
}

static const struct { const char *name; size_t size; } dtypes[SS_DTYPE_COUNT] = {
    [SS_DTYPE_F32] = {"f32", 4}, [SS_DTYPE_F16] = {"f16", 2}, [SS_DTYPE_BF16] = {"bf16", 2},
    [SS_DTYPE_F64] = {"f64", 8}, [SS_DTYPE_I64] = {"i64", 8}, [SS_DTYPE_I32] = {"i32", 4},
    [SS_DTYPE_I16] = {"i16", 2}, [SS_DTYPE_I8] = {"i8", 1},   [SS_DTYPE_U8] = {"u8", 1},
    [SS_DTYPE_BOOL] = {"bool", 1}, [SS_DTYPE_OTHER] = {"other", 0},
};

size_t ssi_dtype_size(uint32_t d) { return d < SS_DTYPE_COUNT ? dtypes[d].size : 0; }
const char *ssi_dtype_name(uint32_t d) { return d < SS_DTYPE_COUNT ? dtypes[d].name : "?"; }
int ssi_dtype_from_name(const char *name) {
    for (int i = 0; i < SS_DTYPE_COUNT; i++)
        if (strcmp(dtypes[i].name, name) == 0) return i;
    return -1;
}
