/* derive.c: profiles of a known structure at new sizes (derive.h). */
#include "derive.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ssi_derive_same_structure(const ss_profile *src, const ss_prof_tensor *obs, uint32_t m, int whole) {
    if (!src || (m && !obs) || m > src->ntensors || (whole && m != src->ntensors)) return 0;
    for (uint32_t t = 0; t < m; t++)
        if (obs[t].producer != src->tensors[t].producer || obs[t].bytes == 0) return 0;
    return 1;
}

uint64_t ssi_profile_peak(const ss_profile *p) {
    uint64_t peak = p->base_bytes;
    for (uint32_t i = 0; i < p->nops; i++) {
        if (p->ops[i].mem_after > peak) peak = p->ops[i].mem_after;
        if (p->ops[i].mem_peak > peak) peak = p->ops[i].mem_peak;
    }
    return peak;
}

/* new level of an operator's memory figure v: the observed live saved bytes plus the rest of v
 * scaled by r */
static uint64_t move_level(uint64_t v, uint64_t base, int64_t live_old, int64_t live_new, double r) {
    if (v == 0) return 0;
    int64_t other = (int64_t)v - (int64_t)base - live_old;
    int64_t nv = (int64_t)base + live_new + (other > 0 ? (int64_t)((double)other * r + 0.5) : other);
    return nv < (int64_t)base ? base : (uint64_t)nv;
}

ss_status ssi_derive_apply(ss_profile *p, const ss_prof_tensor *obs, uint32_t m) {
    if (!p || !ssi_derive_same_structure(p, obs, m, 0)) return SS_ERR_INVALID;
    uint32_t n = p->nops;
    if (!n) return SS_OK;
    /* per operator: saved bytes live (old, new) as difference arrays, and cost (old, new) */
    int64_t *d_old = calloc((size_t)n + 1, sizeof *d_old), *d_new = calloc((size_t)n + 1, sizeof *d_new);
    double *c_old = calloc(n, sizeof *c_old), *c_new = calloc(n, sizeof *c_new);
    if (!d_old || !d_new || !c_old || !c_new) {
        free(d_old); free(d_new); free(c_old); free(c_new);
        return SS_ERR_HOST_OOM;
    }
    double sum_old = 0, sum_new = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) {
        const ss_prof_tensor *x = &p->tensors[t];
        uint64_t nb = t < m ? obs[t].bytes : x->bytes;
        uint32_t end = (x->release == SS_NONE || x->release > n) ? n : x->release;
        if (x->producer < n) {
            d_old[x->producer] += (int64_t)x->bytes; d_old[end] -= (int64_t)x->bytes;
            d_new[x->producer] += (int64_t)nb;       d_new[end] -= (int64_t)nb;
            c_old[x->producer] += (double)x->bytes;  c_new[x->producer] += (double)nb;
        }
        for (uint32_t u = 0; u < x->nuses; u++) {
            uint32_t op = p->uses[x->use_off + u];
            if (op < n) { c_old[op] += (double)x->bytes; c_new[op] += (double)nb; }
        }
        sum_old += (double)x->bytes;
        sum_new += (double)nb;
    }
    double R = sum_old > 0 ? sum_new / sum_old : 1.0;
    int64_t lo = 0, ln = 0;
    double t_old = 0, t_new = 0;
    for (uint32_t i = 0; i < n; i++) {
        ss_prof_op *o = &p->ops[i];
        lo += d_old[i];
        ln += d_new[i];
        double r = lo > 0 ? (double)ln / (double)lo : R;
        o->mem_after = move_level(o->mem_after, p->base_bytes, lo, ln, r);
        o->mem_peak = move_level(o->mem_peak, p->base_bytes, lo, ln, r);
        if (o->mem_peak && o->mem_peak < o->mem_after) o->mem_peak = o->mem_after;
        double c = c_old[i] > 0 ? c_new[i] / c_old[i] : r;
        t_old += o->seconds;
        o->seconds *= c;
        o->flops *= c;
        t_new += o->seconds;
    }
    if (p->iter_seconds > 0) p->iter_seconds *= t_old > 0 ? t_new / t_old : R;
    for (uint32_t t = 0; t < m; t++) {
        ss_prof_tensor *x = &p->tensors[t];
        x->bytes = obs[t].bytes;
        x->dtype = obs[t].dtype;
        x->ndim = obs[t].ndim <= SS_MAX_DIMS ? obs[t].ndim : SS_MAX_DIMS;
        memcpy(x->shape, obs[t].shape, sizeof x->shape);
    }
    free(d_old); free(d_new); free(c_old); free(c_new);
    return SS_OK;
}

ss_status ssi_derive_profile(const ss_profile *src, const ss_prof_tensor *obs, uint32_t m, uint64_t seq_hash,
                             uint64_t size_sig, ss_profile **out) {
    if (!src || !out || !ssi_derive_same_structure(src, obs, m, 1)) return SS_ERR_INVALID;
    ss_profile *p = NULL;
    ss_status st = ssi_profile_clone(src, &p);
    if (st) return st;
    if ((st = ssi_derive_apply(p, obs, m))) { ssi_profile_free(p); return st; }
    p->seq_hash = seq_hash;
    p->size_sig = size_sig;
    char d[sizeof p->desc];
    snprintf(d, sizeof d, "derived at new sizes from: %.130s", src->desc);
    memcpy(p->desc, d, sizeof p->desc);
    *out = p;
    return SS_OK;
}
