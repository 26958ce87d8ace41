/* replay.c: the replay driver of replay.h. One process, one device, one thread driving the
 * framework API; the device's copy engines (cpu-sim threads, or CUDA streams) run beside it.
 *
 * Patterns: tensor t of iteration `it` holds the 64-bit words pat(t, it) + j (j = word index),
 * written by its producer after the operator's compute and checked by every reader. cpu-sim
 * device memory is host memory and is written and read in place (the compute stream is the
 * host stream, so program order is stream order); other devices go through a host staging
 * buffer and a synchronised copy on the compute stream.
 */
#include "replay.h"
#include "policy.h"

#include <math.h>
#include <stdio.h>

void ssi_replay_config_default(ssi_replay_config *c) {
    memset(c, 0, sizeof *c);
    c->opts = ss_options_default();
    c->mode = SS_SWAP_SMARTSWAP;
    c->iters = 1;
    c->time.mode = SSI_TIME_LAYER;
    c->timeline_iter = UINT32_MAX;
    c->plan_headroom = 0.035;   /* measured: see ssi_policy_config.headroom */
}

void ssi_replay_result_free(ssi_replay_result *r) {
    if (!r) return;
    free(r->it);
    r->it = NULL;
}

ss_status ssi_replay_normalize(const ss_profile *p, ss_profile **out) {
    if (!p || !out) return SS_ERR_INVALID;
    ss_profile *q = NULL;
    ss_status st = ssi_profile_clone(p, &q);
    if (st) return st;
    for (uint32_t t = 0; t < q->ntensors; t++) q->tensors[t].bytes = ssi_round_block(q->tensors[t].bytes);
    *out = q;
    return SS_OK;
}

/* ---- state ------------------------------------------------------------------------------- */

typedef struct csr { uint32_t *off, *idx; } csr;

typedef struct rp {
    const ss_profile *p;
    const ssi_replay_config *c;
    ss_device_t *dev;
    ss_stream_t *compute;
    ss_alloc_t  *alloc;
    ss_ctx_t    *ctx;
    int          direct;        /* device memory is host-addressable (cpu-sim) */
    uint32_t    *name_id;
    double      *dur;
    uint64_t    *other;
    csr          prod, use, rel;
    ss_block_t **blk;
    uint64_t    *hv, *bytes, *pat;
    int64_t     *shape;         /* ntensors * SS_MAX_DIMS */
    uint8_t     *alive, *expert;
    uint32_t     tok;           /* the token dimension's value (0: none) */
    double      *ann_dur;       /* per announced operator of this iteration */
    uint32_t     nann;
    void        *stage;
    size_t       stage_cap;
    ssi_rng      rng;
    uint64_t     corrupt;
    ssi_policy_config pcfg;
    uint32_t     it;
} rp;

static ss_status csr_build(csr *b, uint32_t nkeys, size_t nitems, const uint32_t *keys,
                           const uint32_t *vals) {
    b->off = calloc((size_t)nkeys + 2, sizeof *b->off);
    b->idx = malloc((nitems + 1) * sizeof *b->idx);
    if (!b->off || !b->idx) return SS_ERR_HOST_OOM;
    for (size_t i = 0; i < nitems; i++)
        if (keys[i] < nkeys) b->off[keys[i] + 1]++;
    for (uint32_t k = 0; k < nkeys; k++) b->off[k + 1] += b->off[k];
    uint32_t *pos = malloc(((size_t)nkeys + 1) * sizeof *pos);
    if (!pos) return SS_ERR_HOST_OOM;
    memcpy(pos, b->off, ((size_t)nkeys + 1) * sizeof *pos);
    for (size_t i = 0; i < nitems; i++)
        if (keys[i] < nkeys) b->idx[pos[keys[i]]++] = vals ? vals[i] : (uint32_t)i;
    free(pos);
    return SS_OK;
}

static void csr_free(csr *b) { free(b->off); free(b->idx); }

static uint64_t pattern(uint32_t t, uint32_t it) {
    uint64_t x = ((uint64_t)it << 32) ^ t ^ 0x5EEDF00Dull;
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull;
    return (x ^ (x >> 33)) | 1;
}

static ss_status staging(rp *R, size_t n) {
    if (n <= R->stage_cap) return SS_OK;
    void *s = realloc(R->stage, n);
    if (!s) return SS_ERR_HOST_OOM;
    R->stage = s;
    R->stage_cap = n;
    return SS_OK;
}

static ss_status write_pat(rp *R, void *dst, uint64_t n, uint64_t pat) {
    uint64_t *w = R->direct ? dst : NULL;
    if (!R->direct) {
        ss_status st = staging(R, (size_t)n);
        if (st) return st;
        w = R->stage;
    }
    for (uint64_t j = 0; j < n / 8; j++) w[j] = pat + j;
    if (R->direct) return SS_OK;
    ss_status st = ss_copy_async(R->dev, R->compute, dst, R->stage, (size_t)n, SS_COPY_H2D);
    return st ? st : ss_stream_sync(R->dev, R->compute);
}

/* 1 when [src, src+n) holds pattern pat. */
static int check_pat(rp *R, const void *src, uint64_t n, uint64_t pat) {
    const uint64_t *w = src;
    if (!R->direct) {
        if (staging(R, (size_t)n) ||
            ss_copy_async(R->dev, R->compute, R->stage, src, (size_t)n, SS_COPY_D2H) ||
            ss_stream_sync(R->dev, R->compute))
            return 0;
        w = R->stage;
    }
    for (uint64_t j = 0; j < n / 8; j++)
        if (w[j] != pat + j) return 0;
    return 1;
}

/* The plan hook: the policy on the recorded profile with this iteration's operator durations
 * (so the prediction and the replay agree on compute time). */
static ss_status rp_plan(void *user, const ss_profile *prof, ss_plan **out) {
    rp *R = user;
    ss_profile *q = NULL;
    ss_status st = ssi_profile_clone(prof, &q);
    if (st) return st;
    double mean = 0;
    for (uint32_t i = 0; i < R->nann; i++) mean += R->ann_dur[i];
    mean = R->nann ? mean / R->nann : 1e-6;
    for (uint32_t i = 0; i < q->nops; i++)
        q->ops[i].seconds = i < R->nann && R->ann_dur[i] > 0 ? R->ann_dur[i] : mean;
    ssi_policy_config cfg = R->pcfg;
    cfg.time.mode = SSI_TIME_MEASURED;
    /* headroom (ssi_policy_config.headroom, where its measured reason is written): the recorded
     * profile does not see temporaries allocated and freed inside an operator; plan below the
     * budget, else at it */
    cfg.headroom = R->c->plan_headroom;
    st = ssi_policy_plan(q, &cfg, out, NULL, NULL, 0);
    ssi_profile_free(q);
    return st;
}

static void rp_plan_free(void *user, ss_plan *pl) { (void)user; ssi_plan_free(pl); }

/* The most common dimension value > 1 among saved tensors: the token dimension. */
static uint32_t token_dim(const ss_profile *p) {
    size_t n = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) n += p->tensors[t].ndim;
    if (!n) return 0;
    int64_t *v = malloc(n * sizeof *v);
    if (!v) return 0;
    size_t k = 0;
    for (uint32_t t = 0; t < p->ntensors; t++)
        for (uint32_t d = 0; d < p->tensors[t].ndim; d++)
            if (p->tensors[t].shape[d] > 1) v[k++] = p->tensors[t].shape[d];
    int64_t best = 0;
    size_t bc = 0;
    for (size_t i = 0; i < k; i++) {   /* quadratic, on few distinct values: fine for tests */
        if (i && v[i] == v[i - 1]) continue;
        size_t c = 0;
        for (size_t j = 0; j < k; j++) c += v[j] == v[i];
        if (c > bc || (c == bc && v[i] > best)) { bc = c; best = v[i]; }
        if (k > 4096 && i > 256) break;
    }
    free(v);
    return best > 0 && best < UINT32_MAX ? (uint32_t)best : 0;
}

/* This iteration's bytes and shapes (the variations). */
static void vary(rp *R, int on) {
    const ss_profile *p = R->p;
    double f = 1.0;
    if (on && R->c->vary_seq > 0) f = 1.0 - R->c->vary_seq * ssi_rng_unit(&R->rng);
    for (uint32_t t = 0; t < p->ntensors; t++) {
        const ss_prof_tensor *x = &p->tensors[t];
        int64_t *sh = &R->shape[(size_t)t * SS_MAX_DIMS];
        for (uint32_t d = 0; d < SS_MAX_DIMS; d++) sh[d] = d < x->ndim ? x->shape[d] : 0;
        R->bytes[t] = x->bytes;
        if (!on) continue;
        double g = 1.0;
        int dim = -1;
        if (R->c->vary_experts > 0 && R->expert[t] && x->ndim) {
            g = 1.0 - R->c->vary_experts * ssi_rng_unit(&R->rng);
            dim = 0;
        } else if (f < 1.0 && R->tok) {
            for (uint32_t d = 0; d < x->ndim; d++)
                if (x->shape[d] == R->tok) { dim = (int)d; break; }
            g = f;
        }
        if (dim < 0 || g >= 1.0 || x->shape[dim] <= 1) continue;
        int64_t nd = (int64_t)floor((double)x->shape[dim] * g);
        if (nd < 1) nd = 1;
        uint64_t nb = (uint64_t)((double)x->bytes * (double)nd / (double)x->shape[dim]);
        sh[dim] = nd;
        R->bytes[t] = ssi_round_block(nb ? nb : 1);
    }
}

/* ---- one iteration ----------------------------------------------------------------------- */

typedef struct itres { uint64_t peak; double compute_s; int oom; } itres;

static ss_status alloc_or_oom(rp *R, uint64_t n, ss_block_t **b, itres *ir) {
    ss_status st = ss_alloc_malloc(R->alloc, (size_t)n, b);
    if (st == SS_ERR_OOM) {
        ss_alloc_stats as;
        ss_alloc_get_stats(R->alloc, &as);
        SS_WARN("replay: iteration %u: out of memory for %llu bytes (in use %llu, pending %llu, "
                "reserved %llu, budget %llu)", R->it, (unsigned long long)n,
                (unsigned long long)as.in_use_bytes, (unsigned long long)as.pending_bytes,
                (unsigned long long)as.reserved_bytes, (unsigned long long)as.budget_bytes);
        ir->oom = 1;
        *b = NULL;
        return SS_OK;
    }
    return st;
}

static ss_status run_iter(rp *R, uint32_t it, itres *ir, uint32_t extra_id) {
    const ss_profile *p = R->p;
    const ssi_replay_config *c = R->c;
    ss_ctx_t *ctx = R->ctx;
    int on = it >= c->vary_from;
    int eval = on && c->eval_every && (it + 1) % c->eval_every == 0;
    vary(R, on);
    ss_status st = ss_ctx_iter_begin(ctx);
    if (st) return st;
    R->nann = 0;
    ss_block_t *other = NULL, **extra = NULL;
    uint64_t other_held = 0;
    uint32_t nextra = it == 0 ? c->extra_first : 0;
    ss_alloc_stats as;
    ss_alloc_get_stats(R->alloc, &as);
    ir->peak = as.in_use_bytes;
    if (nextra && !(extra = calloc(nextra, sizeof *extra))) st = SS_ERR_HOST_OOM;
    for (uint32_t e = 0; !st && e < nextra && !ir->oom; e++) {   /* lazily created state */
        if ((st = ss_ctx_op(ctx, extra_id, 0xE0000 + e))) break;
        R->ann_dur[R->nann++] = 0;
        uint64_t n = ssi_round_block(p->base_bytes / 64 + 4096);
        if ((st = alloc_or_oom(R, n, &extra[e], ir)) || ir->oom) break;
        if ((st = write_pat(R, ss_block_ptr(extra[e]), n, pattern(0xFFFFFF00u + e, it)))) break;
    }
    for (uint32_t i = 0; !st && !ir->oom && i < p->nops; i++) {
        const ss_prof_op *op = &p->ops[i];
        if (eval && op->phase != SS_PHASE_FWD) break;
        int announce = R->nann == 0 || !(on && c->skip_ops > 0 && ssi_rng_unit(&R->rng) < c->skip_ops);
        if (announce) {
            if ((st = ss_ctx_op(ctx, R->name_id[op->name], op->site))) break;
            R->ann_dur[R->nann++] = 0;
        }
        /* unattributed memory */
        uint64_t want = R->other[i] ? ssi_round_block(R->other[i]) : 0;
        if (want != other_held) {
            if (other && (st = ss_alloc_free(R->alloc, other))) break;
            other = NULL;
            other_held = 0;
            if (want) {
                if ((st = alloc_or_oom(R, want, &other, ir)) || ir->oom) break;
                other_held = want;
            }
        }
        /* reads */
        for (uint32_t q = R->use.off[i]; q < R->use.off[i + 1]; q++) {
            uint32_t t = R->use.idx[q];
            if (!R->alive[t]) continue;
            void *ptr = NULL;
            if (R->hv[t]) {
                st = ss_ctx_load(ctx, R->hv[t], NULL, &ptr);
                if (st == SS_ERR_OOM) { ir->oom = 1; st = SS_OK; break; }
                if (st) break;
            } else {
                ptr = ss_block_ptr(R->blk[t]);
            }
            if (!check_pat(R, ptr, R->bytes[t], R->pat[t])) {
                R->corrupt++;
                SS_ERROR("replay: iteration %u operator %u (%s): tensor %u read wrong bytes", it, i,
                         p->names[op->name], t);
            }
        }
        if (st || ir->oom) break;
        /* outputs */
        for (uint32_t q = R->prod.off[i]; q < R->prod.off[i + 1]; q++) {
            uint32_t t = R->prod.idx[q];
            if ((st = alloc_or_oom(R, R->bytes[t], &R->blk[t], ir)) || ir->oom) break;
            R->alive[t] = 1;
            R->hv[t] = 0;
        }
        if (st || ir->oom) break;
        ss_alloc_get_stats(R->alloc, &as);
        if (as.in_use_bytes > ir->peak) ir->peak = as.in_use_bytes;
        /* compute */
        if (R->dur[i] > 0) {
            ss_status cs = ss_compute_async(R->dev, R->compute, R->dur[i]);
            if (cs && cs != SS_ERR_UNSUPPORTED) { st = cs; break; }
        }
        R->ann_dur[R->nann - 1] += R->dur[i];
        ir->compute_s += R->dur[i];
        for (uint32_t q = R->prod.off[i]; q < R->prod.off[i + 1]; q++) {
            uint32_t t = R->prod.idx[q];
            R->pat[t] = pattern(t, it);
            if ((st = write_pat(R, ss_block_ptr(R->blk[t]), R->bytes[t], R->pat[t]))) break;
        }
        if (st) break;
        /* saves */
        for (uint32_t q = R->prod.off[i]; q < R->prod.off[i + 1]; q++) {
            uint32_t t = R->prod.idx[q];
            const ss_prof_tensor *x = &p->tensors[t];
            if (!(x->flags & SS_TENSOR_SAVED)) continue;
            uint32_t fl = (x->flags & SS_TENSOR_NOSWAP) ? SS_SAVE_NOSWAP : 0;
            if ((st = ss_ctx_save_block(ctx, R->blk[t], (int)x->dtype, (int)x->ndim,
                                        &R->shape[(size_t)t * SS_MAX_DIMS], fl, &R->hv[t])))
                break;
            R->blk[t] = NULL;   /* the context's now */
        }
        if (st) break;
        /* releases */
        for (uint32_t q = R->rel.off[i]; q < R->rel.off[i + 1]; q++) {
            uint32_t t = R->rel.idx[q];
            if (!R->alive[t]) continue;
            R->alive[t] = 0;
            if (R->hv[t]) { st = ss_ctx_release(ctx, R->hv[t]); R->hv[t] = 0; }
            else { st = ss_alloc_free(R->alloc, R->blk[t]); R->blk[t] = NULL; }
            if (st) break;
        }
    }
    /* the end of the iteration: what is still alive goes (as a framework drops its graph) */
    for (uint32_t t = 0; t < p->ntensors; t++) {
        if (!R->alive[t]) continue;
        R->alive[t] = 0;
        ss_status s2 = R->hv[t] ? ss_ctx_release(ctx, R->hv[t]) : ss_alloc_free(R->alloc, R->blk[t]);
        R->hv[t] = 0;
        R->blk[t] = NULL;
        if (s2 && !st) st = s2;
    }
    if (other) ss_alloc_free(R->alloc, other);
    for (uint32_t e = 0; extra && e < nextra; e++)
        if (extra[e]) ss_alloc_free(R->alloc, extra[e]);
    free(extra);
    return st;
}

/* ---- planned lanes for the timeline ------------------------------------------------------- */

static void planned_lanes(rp *R, const ss_profile *prof, const ss_plan *plan, ssi_timeline *tl) {
    ssi_sim_config sc;
    memset(&sc, 0, sizeof sc);
    sc.budget_bytes = R->c->opts.budget_bytes;
    sc.d2h_bps = R->pcfg.d2h_bps;
    sc.h2d_bps = R->pcfg.h2d_bps;
    sc.copy_latency_s = R->pcfg.copy_latency_s;
    sc.segment_bytes = R->c->segment_bytes;
    sc.granule_bytes = R->pcfg.granule_bytes;
    sc.time = R->c->time;
    if (prof != R->p) sc.time.mode = SSI_TIME_LAYER;
    sc.record_ops = 1;
    ssi_sim_result sr;
    if (ssi_sim_run(prof, plan, &sc, &sr, NULL, 0)) return;
    for (uint32_t i = 0; i < prof->nops; i++) {
        double t1 = i + 1 < prof->nops ? sr.op_start[i + 1] : sr.iter_s;
        ssi_timeline_add(tl, SSI_LANE_COMPUTE, i, sr.op_start[i], t1, prof->names[prof->ops[i].name]);
    }
    for (uint32_t k = 0; plan && k < plan->nentries; k++) {
        const ss_plan_entry *e = &plan->entries[k];
        char nm[40];
        ssi_fmt(nm, sizeof nm, "out t%u", e->tensor);
        ssi_timeline_add(tl, SSI_LANE_D2H, e->tensor, sr.t_out_done[k] - sc.copy_latency_s -
                         (double)e->bytes / sc.d2h_bps, sr.t_out_done[k], nm);
        ssi_fmt(nm, sizeof nm, "in t%u", e->tensor);
        ssi_timeline_add(tl, SSI_LANE_H2D, e->tensor, sr.t_in_done[k] - sc.copy_latency_s -
                         (double)e->bytes / sc.h2d_bps, sr.t_in_done[k], nm);
    }
    ssi_sim_result_free(&sr);
}

/* ---- the run ------------------------------------------------------------------------------ */

ss_status ssi_replay_run(const ss_profile *p0, const ssi_replay_config *c, ssi_replay_result *r,
                         char *err, size_t err_len) {
    if (!p0 || !c || !r) return SS_ERR_INVALID;
    memset(r, 0, sizeof *r);
    if (err && err_len) err[0] = 0;
    if (!c->opts.budget_bytes) {
        ssi_fmt(err, err_len, "replay needs a budget (--budget SIZE)");
        return SS_ERR_INVALID;
    }
    if (c->iters < 1) {
        ssi_fmt(err, err_len, "replay needs at least one iteration");
        return SS_ERR_INVALID;
    }
    rp R;
    memset(&R, 0, sizeof R);
    uint32_t *keys = NULL, *vals = NULL;
    R.c = c;
    ss_profile *p = NULL;
    ss_status st = ssi_replay_normalize(p0, &p);
    if (st) return st;
    R.p = p;
    uint32_t n = p->nops, nt = p->ntensors;
    ssi_rng_seed(&R.rng, c->opts.seed ^ 0x7E91A7ull);
    R.dur = calloc((size_t)n + 1, sizeof *R.dur);
    R.other = calloc((size_t)n + 1, sizeof *R.other);
    R.ann_dur = calloc((size_t)n + c->extra_first + 1, sizeof *R.ann_dur);
    R.name_id = calloc((size_t)p->nnames + 1, sizeof *R.name_id);
    R.blk = calloc((size_t)nt + 1, sizeof *R.blk);
    R.hv = calloc((size_t)nt + 1, sizeof *R.hv);
    R.bytes = calloc((size_t)nt + 1, sizeof *R.bytes);
    R.pat = calloc((size_t)nt + 1, sizeof *R.pat);
    R.shape = calloc(((size_t)nt + 1) * SS_MAX_DIMS, sizeof *R.shape);
    R.alive = calloc((size_t)nt + 1, 1);
    R.expert = calloc((size_t)nt + 1, 1);
    keys = calloc((size_t)nt + p->nuses + 1, sizeof *keys);
    vals = malloc(((size_t)p->nuses + 1) * sizeof *vals);
    ss_block_t *base = NULL;
    ssi_replay_iter *its = NULL;
    if (!R.dur || !R.other || !R.ann_dur || !R.name_id || !R.blk || !R.hv || !R.bytes || !R.pat ||
        !R.shape || !R.alive || !R.expert || !keys || !vals) {
        st = SS_ERR_HOST_OOM;
        goto out;
    }
    if ((st = ssi_sim_op_times(p, &c->time, R.dur, err, err_len))) goto out;
    if ((st = ssi_sim_other(p, R.other))) goto out;
    for (uint32_t t = 0; t < nt; t++) keys[t] = p->tensors[t].producer;
    if ((st = csr_build(&R.prod, n, nt, keys, NULL))) goto out;
    for (uint32_t t = 0; t < nt; t++) keys[t] = p->tensors[t].release;
    if ((st = csr_build(&R.rel, n, nt, keys, NULL))) goto out;
    size_t nu = 0;
    for (uint32_t t = 0; t < nt; t++)
        for (uint32_t u = 0; u < p->tensors[t].nuses; u++) {
            keys[nu] = p->uses[p->tensors[t].use_off + u];
            vals[nu++] = t;
        }
    if ((st = csr_build(&R.use, n, nu, keys, vals))) goto out;
    R.tok = token_dim(p);
    for (uint32_t t = 0; t < nt; t++) {
        const char *nm = p->names[p->ops[p->tensors[t].producer].name];
        R.expert[t] = strncmp(nm, "expert_", 7) == 0 || strcmp(nm, "moe_dispatch") == 0;
    }
    /* device, allocator, context */
    ss_options o = c->opts;
    uint64_t need = o.budget_bytes + o.budget_bytes / 4 + (64ull << 20);
    if (o.sim_capacity_bytes < need) o.sim_capacity_bytes = need;
    const char *dname = o.device[0] ? o.device : "cpu-sim";
    if ((st = ss_device_open(dname, &o, &R.dev))) {
        ssi_fmt(err, err_len, "cannot open device %s: %s", dname, ss_status_str(st));
        goto out;
    }
    const char *cn = ss_device_get_caps(R.dev)->name;   /* cpu-sim, or the fault device around it */
    R.direct = strncmp(cn, "cpu-sim", 7) == 0 || strncmp(cn, "fault(cpu-sim", 13) == 0;
    if ((st = ss_stream_wrap(R.dev, NULL, &R.compute))) goto out;
    ss_alloc_config ac = ss_alloc_config_default();
    ac.budget_bytes = o.budget_bytes;
    ac.release_mode = o.release_mode;
    if (c->segment_bytes) ac.segment_bytes = c->segment_bytes;
    ac.granule_bytes = o.granule_bytes;   /* option granule: 0 = plain segments */
    if ((st = ss_alloc_new(R.dev, &ac, &R.alloc))) {
        ssi_fmt(err, err_len, "the allocator refused budget %llu: %s",
                (unsigned long long)o.budget_bytes, ss_status_str(st));
        goto out;
    }
    ss_ctx_config cc = ss_ctx_config_default();
    cc.opts = o;
    cc.mem_owner = SS_MEM_SMARTSWAP;
    cc.device = R.dev;
    cc.compute = R.compute;
    cc.alloc = R.alloc;
    if ((st = ss_ctx_new(&cc, &R.ctx))) goto out;
    for (uint32_t j = 0; j < p->nnames; j++)
        if ((st = ss_ctx_intern(R.ctx, p->names[j], &R.name_id[j]))) goto out;
    uint32_t extra_id = 0;
    if (c->extra_first && (st = ss_ctx_intern(R.ctx, "replay_extra_op", &extra_id))) goto out;
    if (c->mode != SS_SWAP_OFF) {
        ss_exec_config ec = ss_exec_config_default();
        ec.mode = c->mode;
        if ((st = ss_ctx_enable_swap_ex(R.ctx, &ec))) {
            ssi_fmt(err, err_len, "cannot enable %s: %s", ss_swap_mode_name(c->mode), ss_status_str(st));
            goto out;
        }
        ssi_policy_config_from_options(&o, &R.pcfg);
        R.pcfg.segment_bytes = c->segment_bytes;
        ss_alloc_config eff;
        if (ss_alloc_get_config(R.alloc, &eff) == SS_OK) R.pcfg.granule_bytes = eff.granule_bytes;
        ssi_planner pl = {rp_plan, rp_plan_free, &R};
        if ((st = ssi_ctx_set_planner(R.ctx, &pl))) goto out;
        if (c->plan && (st = ssi_exec_set_plan(R.ctx, c->plan, c->plan_from_profile ? p : NULL))) goto out;
    } else {
        ssi_policy_config_from_options(&o, &R.pcfg);
    }
    if (p->base_bytes &&
        (st = ss_alloc_malloc_tagged(R.alloc, (size_t)p->base_bytes, SS_LIFETIME_PERSISTENT, &base))) {
        if (st == SS_ERR_OOM) r->oom = 1;
        ssi_fmt(err, err_len, "the budget cannot hold the model's own state (%llu bytes)",
                (unsigned long long)p->base_bytes);
        goto out;
    }
    if (c->keep_iters && !(its = calloc(c->iters, sizeof *its))) { st = SS_ERR_HOST_OOM; goto out; }
    uint32_t tl_iter = c->timeline_iter == UINT32_MAX ? c->iters - 1 : c->timeline_iter;
    for (uint32_t it = 0; it < c->iters; it++) {
        if (c->timeline_path && c->mode != SS_SWAP_OFF) ss_ctx_exec_timeline(R.ctx, it == tl_iter);
        R.it = it;
        itres ir = {0};
        uint64_t corrupt0 = R.corrupt;
        int stage = ss_ctx_stage(R.ctx);
        const ss_plan *planned = NULL;
        double t0 = ss_device_now(R.dev);
        st = run_iter(&R, it, &ir, extra_id);
        double t1 = ss_device_now(R.dev);
        if (c->mode != SS_SWAP_OFF) planned = ssi_exec_plan(R.ctx);
        double pred = planned ? planned->stall_s : -1;
        ss_iter_report rep;
        ss_status s2 = R.ctx->in_iter ? ss_ctx_iter_end(R.ctx, &rep) : SS_OK;
        if (!st && s2 && s2 != SS_ERR_OOM) st = s2;
        if (s2 == SS_ERR_OOM) ir.oom = 1;
        ss_exec_report x;
        memset(&x, 0, sizeof x);
        if (c->mode != SS_SWAP_OFF) ss_ctx_exec_report(R.ctx, &x);
        r->iters++;
        if (ir.peak > r->peak_bytes) r->peak_bytes = ir.peak;
        r->oom += ir.oom;
        double stall = (t1 - t0) - ir.compute_s;
        if (stall < 0) stall = 0;
        r->stall_s += stall;
        if (its) {
            ssi_replay_iter *ri = &its[it];
            ri->stage = stage;
            ri->nops = R.nann;
            ri->peak_bytes = ir.peak;
            ri->iter_s = t1 - t0;
            ri->compute_s = ir.compute_s;
            ri->stall_s = stall;
            ri->predicted_stall_s = pred;
            ri->corrupt_reads = R.corrupt - corrupt0;
            ri->x = x;
        }
        if (c->timeline_path && it == tl_iter && c->mode != SS_SWAP_OFF) {
            ssi_timeline act, plan_tl;
            memset(&plan_tl, 0, sizeof plan_tl);
            double tt0 = 0;
            if (ssi_exec_timeline_get(R.ctx, &act, &tt0) == SS_OK) {
                const ss_profile *pp = c->plan ? p : NULL;
                if (!pp && R.ctx->st.cur >= 0 && planned == R.ctx->st.cache[R.ctx->st.cur].plan)
                    pp = R.ctx->st.cache[R.ctx->st.cur].prof;
                if (pp && planned) planned_lanes(&R, pp, planned, &plan_tl);
                ss_status ws = ssi_timeline_write(c->timeline_path, &act, 0, pp ? &plan_tl : NULL);
                if (ws && !st) {
                    st = ws;
                    ssi_fmt(err, err_len, "cannot write the timeline %s", c->timeline_path);
                }
                ssi_timeline_free(&act);
                ssi_timeline_free(&plan_tl);
            }
        }
        if (st || ir.oom) break;
    }
    if (c->mode != SS_SWAP_OFF) {
        ss_exec_report T;
        if (ss_ctx_exec_totals(R.ctx, &T) == SS_OK) {
            r->swapped_bytes = T.swapped_out_bytes;
            r->swapped_in_bytes = T.swapped_in_bytes;
            r->matched_bytes = T.matched_bytes;
            r->planned_bytes = T.planned_bytes;
            r->misses = T.misses;
            r->stalls = T.stalls;
            r->evictions = T.evictions;
            r->host_full = T.host_full;
        }
    }
    ss_alloc_stats as;
    ss_alloc_get_stats(R.alloc, &as);
    r->event_queries = as.event_queries;
    r->waits = as.waits;
    r->reuse_count = as.reuse_count;
    r->reuse_mean_s = as.reuse_count ? as.reuse_total_s / (double)as.reuse_count : 0;
    r->budget_bytes = as.budget_bytes;
    r->peak_reserved_bytes = as.peak_reserved_bytes;
    r->granule_bytes = as.granule_bytes;
    ss_ctx_stats cs;
    ss_ctx_get_stats(R.ctx, &cs);
    r->plans_made = cs.plans_made;
    r->corrupt_reads = R.corrupt;
    r->it = its;
    its = NULL;
out:
    if (R.ctx) {
        if (R.ctx->in_iter) { ss_iter_report rep; ss_ctx_iter_end(R.ctx, &rep); }
        for (uint32_t t = 0; t < nt && R.alive; t++)
            if (R.alive[t] && !R.hv[t] && R.blk[t]) ss_alloc_free(R.alloc, R.blk[t]);
        ss_ctx_free(R.ctx);
    }
    if (base) ss_alloc_free(R.alloc, base);
    if (R.alloc) ss_alloc_destroy_force(R.alloc);
    if (R.compute) ss_stream_free(R.dev, R.compute);
    if (R.dev) {
        ss_status cs2 = ss_device_close(R.dev);
        if (cs2 && !st) {   /* a leak in smartswap: the run is not clean */
            ssi_fmt(err, err_len, "the device still held memory, streams or events at close (logged above): "
                    "smartswap leaked them");
            st = cs2;
        }
    }
    free(its);
    free(keys); free(vals);
    csr_free(&R.prod); csr_free(&R.use); csr_free(&R.rel);
    free(R.dur); free(R.other); free(R.ann_dur); free(R.name_id); free(R.blk); free(R.hv);
    free(R.bytes); free(R.pat); free(R.shape); free(R.alive); free(R.expert); free(R.stage);
    ssi_profile_free(p);
    return st;
}
