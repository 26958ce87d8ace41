/* stage.c: the stage machine and the plan cache.
 *
 * WarmUp: options.warmup_iters light iterations, no plan (lazily created state, such as
 * optimizer moments, comes into being). GenPolicy: one iteration recorded in detail, then the
 * plan hook (ssi_planner) makes a plan from its profile; the plan enters the cache and becomes
 * current. Stable: light mode; each operator is checked against the current plan's
 * checkpoints (ck[j] = running hash after operator (j+1)*ck_every-1) and each save against the
 * plan's tensor of the same ordinal (producer operator and size bucket). At the first mismatch
 * (an operator, a save, or an operator beyond the plan's end):
 *   1. a cached plan whose checkpoint at this operator count equals the running hash, and whose
 *      saves so far agree, becomes current in flight (a "mid switch"): no profiling;
 *   2. else the rest of the iteration is recorded in detail, the prefix taken from the current
 *      plan's profile; at iter_end the profile is planned and cached (or, if its key turns out
 *      to be cached, that plan becomes current and the detail was wasted);
 *   3. else (detail withheld by the bound) the iteration runs on.
 * A light Stable iteration whose end does not match its plan looks its key up in the cache
 * (a hit switches), else, when it was an exact prefix of its plan's sequence (an evaluation
 * step with the training step's forward), a plan is derived from that prefix without detail,
 * else the next iteration is recorded in detail from op 0 (a probe).
 *
 * The bound (options.max_detailed = D): after D detailed iterations in a row that each made a
 * new plan, the next `cool_len` Stable iterations record no detail; cool_len starts at D and
 * doubles each time (at most 64 D) until an iteration matches a cached plan, which resets it.
 * A sequence that never repeats thus spends a vanishing share of iterations in detail and is
 * never stuck: it runs with the last plan (the executor's eviction fallback covers it).
 *
 * The envelope: a structure seen at more than one size (a size divergence) gets one plan whose
 * profile is derived (derive.h) with every saved tensor at the largest size seen for it at that
 * ordinal, keyed by (hash, operators, an envelope signature). Its sizes dominate every size seen,
 * so an iteration of the structure at sizes within it runs under it with no eviction: each save
 * is no larger than planned, and the executor's schedule, fixed at the first save, holds. (A
 * plan of one other size, chosen at the first save, did not: its later saves, such as the next
 * micro-batch's or an expert's, could be larger, and the executor cannot switch after the first
 * save; bench-varying measured 20 % of the swap-outs evicted so.) A light iteration under the
 * envelope whose saves exceed it at some ordinal grows it at its end (a new derived plan, no
 * detail); one that skipped operators of it (an expert with no tokens) ran by fuzzy matching
 * under it and keeps it, grown when a save exceeded its call site's. Each tensor is also raised
 * to the largest of its call site (site_raise): the experts of a layer, the layers and the
 * micro-batches run the same call sites, and routing moves tokens among them, so a per-ordinal
 * maximum grew in most iterations of a routed run (bench-varying: 11 growths in 45 iterations,
 * their saves evicted). Iterations of the structure start under its envelope once it exists. A
 * light iteration that saved nothing (an evaluation step whose experts routed otherwise) probes
 * nothing: no plan has anything to swap for it.
 *
 * The plan cache holds options.plan_cache_size plans keyed by (sequence hash, operator count,
 * size signature), least recently used evicted. All of this runs on the driving thread with
 * the context's lock held, except the checkpoint cursor (driving thread only).
 */
#include "api.h"
#include "derive.h"

#include <math.h>
#include <stdio.h>

ss_status ssi_plan_default(void *user, const ss_profile *prof, ss_plan **out) {
    (void)user;
    if (!prof || !out) return SS_ERR_INVALID;
    ss_plan *pl = calloc(1, sizeof *pl);
    if (!pl) return SS_ERR_HOST_OOM;
    if (prof->nops) {
        pl->ck = malloc(prof->nops * sizeof *pl->ck);
        if (!pl->ck) { free(pl); return SS_ERR_HOST_OOM; }
        ssi_profile_running_hashes(prof, pl->ck);
    }
    pl->seq_hash = prof->seq_hash;
    pl->size_sig = prof->size_sig;
    pl->nops = prof->nops;
    pl->ck_every = 1;
    pl->nck = prof->nops;
    pl->feasible = 1;
    *out = pl;
    return SS_OK;
}

void ssi_plan_free_default(void *user, ss_plan *pl) {
    (void)user;
    if (!pl) return;
    free(pl->ck);
    for (uint32_t i = 0; i < pl->nnames; i++) free(pl->names[i]);
    free(pl->names);
    free(pl->entries);
    free(pl);
}

static void plan_free(ss_ctx_t *ctx, ss_plan *pl) {
    ssi_planner *p = &ctx->st.planner;
    if (p->free_fn) p->free_fn(p->user, pl);
    else ssi_plan_free_default(NULL, pl);
}

static void entry_clear(ss_ctx_t *ctx, ssi_cache_entry *e) {
    if (!e->used) return;
    plan_free(ctx, e->plan);
    ssi_profile_free(e->prof);
    free(e->ref);
    memset(e, 0, sizeof *e);
}

ss_status ssi_stage_init(ss_ctx_t *ctx) {
    ssi_stage *s = &ctx->st;
    int cap = ctx->opts.plan_cache_size < 1 ? 1 : ctx->opts.plan_cache_size;
    s->cache = calloc((size_t)cap, sizeof *s->cache);
    if (!s->cache) return SS_ERR_HOST_OOM;
    s->cap = (uint32_t)cap;
    s->cur = -1;
    s->from_plan = -1;
    s->planner.fn = ssi_plan_default;
    s->planner.free_fn = ssi_plan_free_default;
    uint32_t d = ctx->opts.max_detailed < 1 ? 1 : (uint32_t)ctx->opts.max_detailed;
    s->cool_len = d;
    /* the comparison baselines of bench-varying (docs/api.md, SMARTSWAP_REPLAN) */
    const char *rp = getenv("SMARTSWAP_REPLAN");
    s->variant = !rp || !*rp || !strcmp(rp, "on") ? SSI_REPLAN_ON
               : !strcmp(rp, "off") ? SSI_REPLAN_OFF : !strcmp(rp, "length") ? SSI_REPLAN_LENGTH : -1;
    if (s->variant < 0) {
        SS_ERROR("SMARTSWAP_REPLAN='%s': use on (default), off (plan once, keep it) or length (re-plan "
                 "when the first saved tensor's size changes)", rp);
        free(s->cache);
        s->cache = NULL;
        return SS_ERR_INVALID;
    }
    int st = ctx->opts.disable ? SS_STAGE_DISABLED
           : ctx->opts.warmup_iters > 0 ? SS_STAGE_WARMUP : SS_STAGE_GENPOLICY;
    atomic_store(&s->stage, st);
    return SS_OK;
}

void ssi_stage_free(ss_ctx_t *ctx) {
    ssi_stage *s = &ctx->st;
    for (uint32_t i = 0; s->cache && i < s->cap; i++) entry_clear(ctx, &s->cache[i]);
    free(s->cache);
    s->cache = NULL;
    ssi_profile_free(s->rec);
    s->rec = NULL;
    free(s->obs);
    s->obs = NULL;
    free(s->obs_key);
    s->obs_key = NULL;
    s->cap_obs = s->nobs = 0;
}

const ss_plan *ssi_stage_plan(const ss_ctx_t *ctx) {
    return ctx->st.cur >= 0 ? ctx->st.cache[ctx->st.cur].plan : NULL;
}

/* ---- the cache ---------------------------------------------------------------------------- */

static int cache_find(ss_ctx_t *ctx, uint64_t hash, uint64_t sig, uint32_t nops) {
    ssi_stage *s = &ctx->st;
    for (uint32_t i = 0; i < s->cap; i++) {
        ssi_cache_entry *e = &s->cache[i];
        if (e->used && e->hash == hash && e->sig == sig && e->nops == nops) return (int)i;
    }
    return -1;
}

static void cache_touch(ss_ctx_t *ctx, int slot) { ctx->st.cache[slot].stamp = ++ctx->st.clock; }

/* The size signature of the envelope of structure (hash h, n operators) in length bucket b (0:
 * the structure's only one). */
#define SSI_BUCKET_MAX 1024
static uint64_t env_sig(uint64_t h, uint32_t n, uint32_t b) {
    uint64_t k = ssi_hash_fold(h ^ 0x454E56454C4F5045ull, n);
    return b ? ssi_hash_fold(k, 0xB0C4E7ull + b) : k;
}

int ssi_stage_envelope_key(uint64_t hash, uint64_t sig, uint32_t nops) {
    for (uint32_t b = 0; b < SSI_BUCKET_MAX; b++)
        if (sig == env_sig(hash, nops, b)) return 1;
    return 0;
}

/* The length bucket of declared length l: k = options.len_buckets buckets per doubling, bucket b
 * holding the lengths in (2^((b-2)/k), 2^((b-1)/k)]; 0 when buckets are off or nothing was
 * declared. */
static uint32_t len_bucket(const ss_ctx_t *ctx, int64_t l) {
    int k = ctx->opts.len_buckets;
    if (k <= 0 || l <= 0) return 0;
    double b = ceil((double)k * log2((double)l) - 1e-9);
    return b < 0 ? 1 : b + 1 >= SSI_BUCKET_MAX ? SSI_BUCKET_MAX - 1 : (uint32_t)b + 1;
}

static int is_env(const ss_ctx_t *ctx, int slot) { return slot >= 0 && ctx->st.cache[slot].envelope; }

/* A save's call site: its producing operator's name and site. */
static uint64_t site_key(uint32_t name, uint64_t site) { return ssi_hash_fold(site * 0x9E3779B97F4A7C15ull, name); }

/* Raises each of mx[0..m) (call sites km) to the largest tensor of its call site and dtype (same
 * rank) among mx itself and the observed saves o[0..no) (call sites ko): the operators of a call
 * site in a loop (a mixture-of-experts layer's experts, every layer, every micro-batch) are
 * interchangeable, and routing moves tokens between them, so the envelope holds each at the most
 * any of them was seen with. 1 when some tensor grew. */
static int site_raise(ss_prof_tensor *mx, const uint64_t *km, uint32_t m, const ss_prof_tensor *o,
                      const uint64_t *ko, uint32_t no) {
    int grew = 0;
    for (uint32_t t = 0; t < m; t++) {
        const ss_prof_tensor *best = NULL;
        uint64_t bb = mx[t].bytes;
        for (uint32_t u = 0; u < m; u++)
            if (km[u] == km[t] && mx[u].dtype == mx[t].dtype && mx[u].ndim == mx[t].ndim && mx[u].bytes > bb) {
                best = &mx[u];
                bb = best->bytes;
            }
        for (uint32_t v = 0; o && v < no; v++)
            if (ko[v] == km[t] && o[v].dtype == mx[t].dtype && o[v].ndim == mx[t].ndim && o[v].bytes > bb) {
                best = &o[v];
                bb = best->bytes;
            }
        if (!best) continue;
        ss_prof_tensor b = *best;
        mx[t].bytes = b.bytes;
        memcpy(mx[t].shape, b.shape, sizeof mx[t].shape);
        grew = 1;
    }
    return grew;
}

/* The call sites of profile p's saved tensors (their producers' name and site), malloc'd. */
static uint64_t *prof_site_keys(const ss_profile *p) {
    uint64_t *k = malloc((p->ntensors ? p->ntensors : 1) * sizeof *k);
    for (uint32_t t = 0; k && t < p->ntensors; t++) {
        uint32_t pr = p->tensors[t].producer;
        k[t] = pr < p->nops ? site_key(p->ops[pr].name, p->ops[pr].site) : 0;
    }
    return k;
}

/* A free slot, evicting the least recently used plan when full. */
static int cache_slot(ss_ctx_t *ctx) {
    ssi_stage *s = &ctx->st;
    int lru = -1;
    for (uint32_t i = 0; i < s->cap; i++) {
        if (!s->cache[i].used) return (int)i;
        if (lru < 0 || s->cache[i].stamp < s->cache[lru].stamp) lru = (int)i;
    }
    entry_clear(ctx, &s->cache[lru]);
    ctx->stats.cache_evictions++;
    ctx->stats.cache_entries--;
    if (s->cur == lru) s->cur = -1;
    if (s->from_plan == lru) s->from_plan = -1;
    return lru;
}

/* Checks the plan's checkpoints against the profile, or fills them (one per operator) when the
 * plan has none; sets the plan's key fields. SS_ERR_FORMAT for checkpoints that disagree. */
ss_status ssi_stage_plan_prepare(ss_plan *pl, const ss_profile *prof) {
    uint64_t *run = NULL;
    if (prof->nops && !(run = malloc(prof->nops * sizeof *run))) return SS_ERR_HOST_OOM;
    ssi_profile_running_hashes(prof, run);
    if (!pl->ck || !pl->nck || !pl->ck_every) {
        free(pl->ck);
        pl->ck = run;
        pl->ck_every = 1;
        pl->nck = prof->nops;
    } else {
        int bad = pl->nck > prof->nops / pl->ck_every;
        for (uint32_t j = 0; !bad && j < pl->nck; j++)
            bad = pl->ck[j] != run[(size_t)(j + 1) * pl->ck_every - 1];
        free(run);
        if (bad) {
            SS_ERROR("stage: the plan's sequence checkpoints disagree with its profile");
            return SS_ERR_FORMAT;
        }
    }
    pl->seq_hash = prof->seq_hash;
    pl->size_sig = prof->size_sig;
    pl->nops = prof->nops;
    return SS_OK;
}

/* Plans prof (taking it on success) into slot (or a new slot when slot < 0) and makes it
 * current. On failure prof stays the caller's. */
/* The planner on prof, its plan prepared (ssi_stage_plan_prepare) into *out; on failure nothing
 * is kept and plan_errors counts it. */
static ss_status make_plan(ss_ctx_t *ctx, const ss_profile *prof, ss_plan **out) {
    ssi_stage *s = &ctx->st;
    ss_plan *pl = NULL;
    ss_status st = s->planner.fn(s->planner.user, prof, &pl);
    if (st == SS_OK && !pl) st = SS_ERR_INVALID;
    if (st == SS_OK) st = ssi_stage_plan_prepare(pl, prof);
    if (st) {
        if (pl) plan_free(ctx, pl);
        ctx->stats.plan_errors++;
        return st;
    }
    *out = pl;
    return SS_OK;
}

static ss_status cache_plan(ss_ctx_t *ctx, ss_profile *prof, int slot) {
    ssi_stage *s = &ctx->st;
    ss_plan *pl = NULL;
    ss_status st = make_plan(ctx, prof, &pl);
    if (st) {
        SS_WARN("stage: no plan for the sequence of iteration %llu: %s",
                (unsigned long long)ctx->iter, ss_status_str(st));
        return st;
    }
    if (slot >= 0) {
        entry_clear(ctx, &s->cache[slot]);
        ctx->stats.cache_entries--;
    } else {
        slot = cache_slot(ctx);
    }
    ssi_cache_entry *e = &s->cache[slot];
    e->plan = pl;
    e->prof = prof;
    e->hash = prof->seq_hash;
    e->sig = prof->size_sig;
    e->nops = prof->nops;
    e->used = 1;
    e->derived = 0;
    e->envelope = (uint32_t)ssi_stage_envelope_key(e->hash, e->sig, e->nops);
    cache_touch(ctx, slot);
    s->cur = slot;
    ctx->stats.cache_entries++;
    ctx->stats.plans_made++;
    return SS_OK;
}

/* ---- the checkpoint cursor ------------------------------------------------------------------ */

static ss_status ring_reserve(ss_ctx_t *ctx, uint32_t need) {
    if (need <= ctx->ring_mask + 1) return SS_OK;
    uint32_t sz = ctx->ring_mask + 1;
    while (sz < need) sz *= 2;
    ssi_ring_op *r = realloc(ctx->ring, sz * sizeof *r);
    if (!r) return SS_ERR_HOST_OOM;
    ctx->ring = r;
    ctx->ring_mask = sz - 1;
    return SS_OK;
}

/* Points the cursor at the plan in `slot` with n operators already verified against it. */
static void cursor_set(ss_ctx_t *ctx, int slot, uint32_t n) {
    ssi_stage *s = &ctx->st;
    if (slot < 0 || ring_reserve(ctx, s->cache[slot].plan->ck_every)) {
        s->ck = NULL;
        s->nck = s->ck_j = s->plan_nops = s->good_n = 0;
        s->ck_every = 1;
        ctx->next_check = UINT32_MAX;
        return;
    }
    const ss_plan *pl = s->cache[slot].plan;
    s->ck = pl->ck;
    s->nck = pl->nck;
    s->ck_every = pl->ck_every;
    s->plan_nops = pl->nops;
    s->ck_j = n / pl->ck_every;
    s->good_n = n;
    ctx->next_check = s->ck_j < s->nck ? (s->ck_j + 1) * s->ck_every : pl->nops + 1;
}

/* No more checks in this iteration (recording checks every op through next_check itself). */
static void cursor_off(ss_ctx_t *ctx) {
    ctx->st.nck = 0;
    ctx->next_check = UINT32_MAX;
}

static int same_size(uint64_t a, uint64_t b) { return ssi_size_sig(a) == ssi_size_sig(b); }

/* The ring's operators [from, to) equal p's (and the ring still holds them all). */
static int ring_agrees(const ss_ctx_t *ctx, const ss_profile *p, uint32_t from, uint32_t to) {
    if (to > p->nops || to < from || to - from > ctx->ring_mask + 1) return 0;
    for (uint32_t i = from; i < to; i++) {
        const ssi_ring_op *r = &ctx->ring[i & ctx->ring_mask];
        if (p->ops[i].name != r->id || p->ops[i].site != r->site) return 0;
    }
    return 1;
}

/* Whether cached plan e's sequence agrees with the iteration's first n operators (hash h):
 * at a checkpoint by its hash; between checkpoints by the last checkpoint at or before n (which
 * the current plan verified: good_n) and the ring's operators since. */
static int agrees_so_far(const ss_ctx_t *ctx, const ssi_cache_entry *e, uint32_t n, uint64_t h) {
    const ssi_stage *s = &ctx->st;
    const ss_plan *pl = e->plan;
    uint32_t E = pl->ck_every;
    if (!E || n > e->prof->nops) return 0;
    if (n % E == 0) return n / E <= pl->nck && pl->ck[n / E - 1] == h;
    uint32_t b = n / E * E;
    if (b) {
        const ss_plan *cp = s->cache[s->cur].plan;
        if (s->good_n < b || b / E > pl->nck || cp->ck_every != E || b / E > cp->nck ||
            pl->ck[b / E - 1] != cp->ck[b / E - 1])
            return 0;
    }
    return ring_agrees(ctx, e->prof, b, n);
}

/* A cached plan (not the current one) that agrees with the iteration so far: its operators
 * agree with the first n (agrees_so_far), its first m tensors agree with the m saves so far as
 * observed (producer and size bucket), and, for a save being checked (hd at operator op), its tensor m
 * agrees with it; its next expected save is not before the current operator. The most
 * recently used such plan, or -1. */
static int find_candidate(ss_ctx_t *ctx, uint32_t n, uint64_t h, uint32_t m,
                          const ssi_handle *hd, uint32_t op) {
    ssi_stage *s = &ctx->st;
    if (s->cur < 0 || n == 0) return -1;
    int best = -1;
    if (s->nobs < m) return -1;
    for (uint32_t i = 0; i < s->cap; i++) {
        const ssi_cache_entry *e = &s->cache[i];
        if (!e->used || (int)i == s->cur) continue;
        if (!agrees_so_far(ctx, e, n, h)) continue;
        uint32_t need = m + (hd ? 1 : 0);
        if (e->prof->ntensors < need) continue;
        int ok = 1;
        for (uint32_t t = 0; ok && t < m; t++) {
            const ss_prof_tensor *a = &e->prof->tensors[t], *b = &s->obs[t];
            ok = a->producer == b->producer && same_size(a->bytes, b->bytes);
        }
        if (ok && hd)
            ok = e->prof->tensors[m].producer == op && same_size(e->prof->tensors[m].bytes, hd->bytes);
        if (ok && e->prof->ntensors > need && e->prof->tensors[need].producer < n - 1) ok = 0;
        if (ok && (best < 0 || e->stamp > s->cache[best].stamp)) best = (int)i;
    }
    return best;
}

/* At the iteration's first save (nothing scheduled yet, so the executor follows a switch), of
 * a size no cached plan has: the cached plan of the same structure so far whose first saved
 * tensor is the smallest at least as large as this one (it swaps for at least these sizes),
 * else the one with the largest; the current plan counts too. -1 when none but the current. */
static int find_nearest(ss_ctx_t *ctx, uint32_t n, uint64_t h, const ssi_handle *hd, uint32_t op) {
    ssi_stage *s = &ctx->st;
    if (s->cur < 0 || n == 0) return -1;
    int above = -1, below = -1;
    for (uint32_t i = 0; i < s->cap; i++) {
        const ssi_cache_entry *e = &s->cache[i];
        if (!e->used || !e->prof->ntensors || e->prof->tensors[0].producer != op) continue;
        if ((int)i != s->cur && !agrees_so_far(ctx, e, n, h)) continue;
        uint64_t b = e->prof->tensors[0].bytes;
        if (b >= hd->bytes) {
            if (above < 0 || b < s->cache[above].prof->tensors[0].bytes) above = (int)i;
        } else if (below < 0 || b > s->cache[below].prof->tensors[0].bytes) {
            below = (int)i;
        }
    }
    int best = above >= 0 ? above : below;
    return best == s->cur ? -1 : best;
}

/* A cached plan (not the current one) of the iteration's structure so far, sizes aside: its
 * operators agree with the first n, its first m tensors have the observed producers. The most
 * recently used, or -1. */
static int find_structure(ss_ctx_t *ctx, uint32_t n, uint64_t h, uint32_t m) {
    ssi_stage *s = &ctx->st;
    if (s->cur < 0 || n == 0 || s->nobs < m) return -1;
    int best = -1;
    for (uint32_t i = 0; i < s->cap; i++) {
        const ssi_cache_entry *e = &s->cache[i];
        if (!e->used || (int)i == s->cur || e->prof->ntensors < m || !agrees_so_far(ctx, e, n, h)) continue;
        int ok = 1;
        for (uint32_t t = 0; ok && t < m; t++) ok = e->prof->tensors[t].producer == s->obs[t].producer;
        if (ok && (best < 0 || e->stamp > s->cache[best].stamp)) best = (int)i;
    }
    return best;
}

/* An envelope (not the current plan) of the iteration's structure so far that holds its saves so
 * far and the save hd (ordinal m, operator op): same operators for the first n, the same
 * producers, no save larger than its tensor. The most recently used, or -1. */
static int find_env_so_far(ss_ctx_t *ctx, uint32_t n, uint64_t h, uint32_t m, const ssi_handle *hd, uint32_t op) {
    ssi_stage *s = &ctx->st;
    if (s->cur < 0 || n == 0 || s->nobs < m) return -1;
    int best = -1;
    for (uint32_t i = 0; i < s->cap; i++) {
        const ssi_cache_entry *e = &s->cache[i];
        if (!e->used || !e->envelope || (int)i == s->cur || e->prof->ntensors <= m ||
            !agrees_so_far(ctx, e, n, h))
            continue;
        int ok = e->prof->tensors[m].producer == op && hd->bytes <= e->prof->tensors[m].bytes;
        for (uint32_t t = 0; ok && t < m; t++)
            ok = e->prof->tensors[t].producer == s->obs[t].producer && s->obs[t].bytes <= e->prof->tensors[t].bytes;
        if (ok && (best < 0 || e->stamp > s->cache[best].stamp)) best = (int)i;
    }
    return best;
}

/* The iteration's operator i (in the ring) is the current plan's operator at a later index,
 * within SSI_SKIP_MAX: the iteration skipped operators the plan has (a mixture-of-experts
 * expert that got no tokens) rather than running other ones. */
#define SSI_SKIP_MAX 64
static int skipped_ahead(const ss_ctx_t *ctx, uint32_t i) {
    const ss_profile *p = ctx->st.cache[ctx->st.cur].prof;
    const ssi_ring_op *r = &ctx->ring[i & ctx->ring_mask];
    for (uint32_t j = i + 1; j < p->nops && j <= i + SSI_SKIP_MAX; j++)
        if (p->ops[j].name == r->id && p->ops[j].site == r->site) return 1;
    return 0;
}

/* Runs the rest of the iteration under the current plan without checks or detail: the executor
 * matches the saves by their features (fuzzy) and evicts if it must. */
static void run_fuzzy(ss_ctx_t *ctx) {
    ssi_stage *s = &ctx->st;
    s->diverged = 1;
    s->fuzzy = 1;
    s->from_plan = s->cur;
    cursor_off(ctx);
}

static void switch_mid(ss_ctx_t *ctx, int slot, uint32_t n) {
    ssi_stage *s = &ctx->st;
    s->cur = slot;
    cache_touch(ctx, slot);
    cursor_set(ctx, slot, n);
    s->mid_switches++;
    ctx->stats.mid_switches++;
    ctx->stats.plan_switches++;
    if (ctx->exec && ctx->exec->plan_switch) ctx->exec->plan_switch(ctx->exec->self, ctx, s->cache[slot].plan);
}

static void count_divergence(ss_ctx_t *ctx) {
    if (ctx->st.div_counted) return;
    ctx->st.div_counted = 1;
    ctx->stats.divergences++;
}

/* Gives up detailed recording after an error (memory): the iteration goes on light. */
static void abandon_recording(ss_ctx_t *ctx, ss_status st) {
    SS_WARN("profile: detailed recording of iteration %llu abandoned: %s",
            (unsigned long long)ctx->iter, ss_status_str(st));
    ctx->st.recording = 0;
    ctx->st.diverged = 1;
    cursor_off(ctx);
}

/* Starts recording in detail from a divergence: operators [0, k) and tensors [0, m) from the
 * current plan's profile (k = min(n, plan's operators)), uses and releases before `upto`;
 * operators [good_n, n) from the ring of recent operators. */
static ss_status start_partial(ss_ctx_t *ctx, uint32_t n, uint32_t m, uint32_t upto) {
    ssi_stage *s = &ctx->st;
    const ss_profile *src = s->cache[s->cur].prof;
    ss_status st = ssi_rec_start(ctx);
    if (st) return st;
    ss_profile *p = s->rec;
    uint32_t k = n < src->nops ? n : src->nops;
    if (upto > k) upto = k;
    if ((st = ssi_profile_copy_prefix(p, src, k, m, upto))) return st;
    /* a size divergence before: the prefix's tensors at the sizes the saves had */
    if (s->size_div && s->nobs >= m && (st = ssi_derive_apply(p, s->obs, m))) return st;
    /* operators replayed from the ring ran untimed: their seconds stay 0 (the planner fills
     * them in); timing resumes with the operator running now */
    s->rec_t = -1;
    for (uint32_t i = s->good_n; i < n; i++) {
        const ssi_ring_op *r = &ctx->ring[i & ctx->ring_mask];
        if (i < k) {
            if (r->id >= p->nnames && (st = ssi_ctx_sync_names(ctx, p, r->id + 1))) return st;
            p->ops[i].name = r->id;
            p->ops[i].site = r->site;
        } else if ((st = ssi_rec_op(ctx, r->id, r->site))) {
            return st;
        }
    }
    s->recording = 2;
    s->rec_t = ssi_now();
    s->rec_ov = atomic_load_explicit(&ctx->ovh_ns, memory_order_relaxed);
    ctx->next_check = n + 1;
    s->nck = 0;
    return SS_OK;
}

/* ---- per iteration ------------------------------------------------------------------------ */

static void envelope_ahead(ss_ctx_t *ctx);

ss_status ssi_stage_iter_begin(ss_ctx_t *ctx) {
    ssi_stage *s = &ctx->st;
    s->recording = 0;
    s->withheld = 0;
    s->diverged = 0;
    s->div_at_save = 0;
    s->div_counted = 0;
    s->diverged_at = UINT32_MAX;
    s->mid_switches = 0;
    s->from_plan = -1;
    s->nobs = 0;
    s->size_div = 0;
    s->fuzzy = 0;
    s->it_len = ctx->decl_len;
    ctx->decl_len = 0;
    s->it_ov0 = atomic_load_explicit(&ctx->ovh_ns, memory_order_relaxed) +
                atomic_load_explicit(&ctx->run_ovh_ns, memory_order_relaxed);
    s->stage_now = atomic_load(&s->stage);
    cursor_set(ctx, -1, 0);
    int record = 0;
    switch (s->stage_now) {
    case SS_STAGE_GENPOLICY:
        record = 1;
        break;
    case SS_STAGE_STABLE:
        if (s->variant != SSI_REPLAN_ON && s->cur >= 0) {   /* no checks, no probes */
            s->probe_pending = s->stale = 0;
            break;
        }
        s->withheld = s->cooldown > 0;
        if (!s->probe_pending && !s->stale) envelope_ahead(ctx);
        cursor_set(ctx, s->cur, 0);
        if (!s->withheld && (s->cur < 0 || s->probe_pending || s->stale)) {
            record = 1;
            ctx->stats.probes++;
            if (s->stale && s->cur >= 0) {   /* re-plan the same key: replace the stale plan */
                s->diverged = 1;
                s->from_plan = s->cur;
            }
        } else if (s->cur < 0) {
            s->diverged = 1;
        }
        s->probe_pending = 0;
        s->stale = 0;
        break;
    default:
        break;
    }
    if (record) {
        ss_status st = ssi_rec_start(ctx);
        if (st) {
            abandon_recording(ctx, st);
        } else {
            s->recording = 1;
            cursor_off(ctx);
            ctx->next_check = 1;
        }
    }
    /* a Stable iteration under a plan: its time inside smartswap is measured for re-timing */
    s->timing = !s->recording && s->stage_now == SS_STAGE_STABLE && s->cur >= 0 && ctx->opts.retime > 1.0 &&
                !ssi_rec_virtual(ctx);
    return SS_OK;
}

void ssi_stage_mark_stale(ss_ctx_t *ctx) {
    ssi_stage *s = &ctx->st;
    /* under the plan of another size of the structure the iteration gets its own derived plan
     * at its end: the evictions say nothing about the plan it ran under */
    if (s->cur < 0 || s->size_div || s->fuzzy || s->variant != SSI_REPLAN_ON) return;
    if (!s->stale && s->cache[s->cur].derived) ctx->stats.derive_misses++;
    s->stale = 1;
}

/* A divergence noticed at operator count n (hash h): at a checkpoint that did not match, or at
 * the first operator past the plan's end. Lock held. */
static void diverge_at_op(ss_ctx_t *ctx, uint32_t n, uint64_t h) {
    ssi_stage *s = &ctx->st;
    const ss_profile *pp = s->cache[s->cur].prof;
    /* the exact operator: the first of [good_n, n) that differs from the plan's */
    uint32_t d0 = n - 1;
    for (uint32_t i = s->good_n; i < n; i++) {
        const ssi_ring_op *r = &ctx->ring[i & ctx->ring_mask];
        if (i >= pp->nops || pp->ops[i].name != r->id || pp->ops[i].site != r->site) { d0 = i; break; }
    }
    count_divergence(ctx);
    ctx->stats.div_at_op++;
    if (s->diverged_at == UINT32_MAX) s->diverged_at = d0;
    /* under its structure's envelope, an iteration that skips some of its operators (an expert
     * with no tokens) runs on under it: it has every expert, at the largest sizes seen */
    if (is_env(ctx, s->cur) && d0 < n && skipped_ahead(ctx, d0)) { run_fuzzy(ctx); return; }
    int c = find_candidate(ctx, n, h, ctx->nsaves, NULL, 0);
    if (c >= 0) { switch_mid(ctx, c, n); return; }
    if ((c = find_structure(ctx, n, h, ctx->nsaves)) >= 0) {   /* that structure, other sizes */
        switch_mid(ctx, c, n);
        s->size_div = 1;
        return;
    }
    if (d0 < n && skipped_ahead(ctx, d0)) { run_fuzzy(ctx); return; }
    s->diverged = 1;
    s->diverged_at = d0;
    s->from_plan = s->cur;
    if (s->withheld) { cursor_off(ctx); return; }
    ss_status st = start_partial(ctx, n, ctx->nsaves, d0);
    if (st) abandon_recording(ctx, st);
}

ss_status ssi_stage_check(ss_ctx_t *ctx, uint32_t id, uint64_t site) {
    ssi_stage *s = &ctx->st;
    uint32_t n = atomic_load_explicit(&ctx->n, memory_order_relaxed);
    uint64_t h = ctx->h;
    /* a checkpoint that matches (the inline check in ss_ctx_op is skipped on its slow path) */
    if (!s->recording && s->ck && s->ck_j < s->nck && n == (s->ck_j + 1) * s->ck_every &&
        s->ck[s->ck_j] == h) {
        s->ck_j++;
        s->good_n = n;
        ctx->next_check = s->ck_j < s->nck ? n + s->ck_every : s->plan_nops + 1;
        return SS_OK;
    }
    pthread_mutex_lock(&ctx->lock);
    if (s->recording) {
        ss_status st = ssi_rec_op(ctx, id, site);
        if (st) abandon_recording(ctx, st);
        else ctx->next_check = n + 1;
    } else if (s->cur >= 0 && s->ck) {
        diverge_at_op(ctx, n, h);
    } else {
        cursor_off(ctx);
    }
    pthread_mutex_unlock(&ctx->lock);
    return SS_OK;
}

ss_status ssi_stage_save(ss_ctx_t *ctx, uint32_t ord, uint32_t op, const ssi_handle *hd) {
    ssi_stage *s = &ctx->st;
    if (s->recording) {
        ss_status st = ssi_rec_save(ctx, ord, op, hd);
        if (st) abandon_recording(ctx, st);
        return SS_OK;
    }
    if (s->stage_now != SS_STAGE_STABLE) return SS_OK;
    if (s->variant != SSI_REPLAN_ON) {
        const ss_profile *vp = s->cur >= 0 ? s->cache[s->cur].prof : NULL;
        if (s->variant == SSI_REPLAN_OFF || ord != 0 || !vp) return SS_OK;
        /* length: the first save's size is the sequence length's signal */
        if (vp->ntensors && same_size(vp->tensors[0].bytes, hd->bytes)) return SS_OK;
        for (uint32_t i = 0; i < s->cap; i++) {
            const ssi_cache_entry *e = &s->cache[i];
            if (e->used && e->prof->ntensors && same_size(e->prof->tensors[0].bytes, hd->bytes)) {
                s->cur = (int)i;
                cache_touch(ctx, (int)i);
                ctx->stats.mid_switches++;
                ctx->stats.plan_switches++;
                if (ctx->exec && ctx->exec->plan_switch) ctx->exec->plan_switch(ctx->exec->self, ctx, e->plan);
                return SS_OK;
            }
        }
        uint32_t n0 = atomic_load_explicit(&ctx->n, memory_order_relaxed);
        s->diverged = 1;
        s->diverged_at = op;
        s->from_plan = s->cur;
        ss_status st = start_partial(ctx, n0, 0, 0);
        if (!st) st = ssi_rec_save(ctx, ord, op, hd);
        if (st) abandon_recording(ctx, st);
        return SS_OK;
    }
    if (ord == s->nobs) {   /* the save as seen, for a derived profile or a candidate's check */
        /* out of memory: nobs stops short of the saves, so nothing is derived */
        if (!ssi_grow(&s->obs, &s->cap_obs, (size_t)s->nobs + 1, sizeof *s->obs) &&
            !ssi_grow(&s->obs_key, &s->cap_obs_key, (size_t)s->nobs + 1, sizeof *s->obs_key)) {
            uint32_t nl = atomic_load_explicit(&ctx->n, memory_order_relaxed);
            const ssi_ring_op *ro = &ctx->ring[(nl ? nl - 1 : 0) & ctx->ring_mask];
            s->obs_key[s->nobs] = site_key(ro->id, ro->site);
            ss_prof_tensor *o = &s->obs[s->nobs++];
            memset(o, 0, sizeof *o);
            o->bytes = hd->bytes;
            o->dtype = hd->dtype;
            o->ndim = hd->ndim;
            memcpy(o->shape, hd->shape, sizeof o->shape);
            o->producer = op;
            o->release = SS_NONE;
            o->flags = SS_TENSOR_SAVED;
        }
    }
    if (s->cur < 0 || s->diverged) return SS_OK;
    const ss_profile *pp = s->cache[s->cur].prof;
    int same_op = ord < pp->ntensors && pp->tensors[ord].producer == op;
    if (same_op && is_env(ctx, s->cur)) {
        /* under the envelope: a save within it is planned for; one beyond it runs on and grows
         * the envelope at the end (end_light) */
        if (!same_size(pp->tensors[ord].bytes, hd->bytes)) s->size_div = 1;
        return SS_OK;
    }
    if (same_op && (s->size_div || same_size(pp->tensors[ord].bytes, hd->bytes))) return SS_OK;
    uint32_t n = atomic_load_explicit(&ctx->n, memory_order_relaxed);
    int ce = find_env_so_far(ctx, n, ctx->h, ord, hd, op);
    if (ce >= 0) {   /* the structure's envelope holds the saves so far */
        count_divergence(ctx);
        ctx->stats.div_at_save++;
        if (s->diverged_at == UINT32_MAX) s->diverged_at = op;
        switch_mid(ctx, ce, n);
        s->size_div = 1;
        return SS_OK;
    }
    if (same_op) {
        /* the structure holds, a size does not: a cached plan of these sizes, else run on under
         * this one and derive a plan for the sizes at the end (end_light) */
        count_divergence(ctx);
        ctx->stats.div_at_save++;
        if (s->diverged_at == UINT32_MAX) s->diverged_at = op;
        int c = find_candidate(ctx, n, ctx->h, ord, hd, op);
        if (c >= 0) { switch_mid(ctx, c, n); return SS_OK; }
        if (ord == 0 && (c = find_nearest(ctx, n, ctx->h, hd, op)) >= 0) switch_mid(ctx, c, n);
        s->size_div = 1;
        return SS_OK;
    }
    count_divergence(ctx);
    ctx->stats.div_at_save++;
    if (s->diverged_at == UINT32_MAX) s->diverged_at = op;
    int c = s->size_div ? -1 : find_candidate(ctx, n, ctx->h, ord, hd, op);
    if (c >= 0) { switch_mid(ctx, c, n); return SS_OK; }
    if ((c = find_structure(ctx, n, ctx->h, ord + 1)) >= 0) {   /* that structure, other sizes */
        switch_mid(ctx, c, n);
        s->size_div = 1;
        return SS_OK;
    }
    if (ord < pp->ntensors && op < pp->tensors[ord].producer && op < n && skipped_ahead(ctx, op)) {
        run_fuzzy(ctx);
        return SS_OK;
    }
    s->diverged = 1;
    s->div_at_save = 1;
    s->diverged_at = op;
    s->from_plan = s->cur;
    if (s->withheld) { cursor_off(ctx); return SS_OK; }
    ss_status st = start_partial(ctx, n, ord, s->good_n);
    if (!st) st = ssi_rec_save(ctx, ord, op, hd);
    if (st) abandon_recording(ctx, st);
    return SS_OK;
}

/* After a match: the bound starts over. */
static void bound_reset(ss_ctx_t *ctx) {
    ssi_stage *s = &ctx->st;
    s->streak = 0;
    s->cooldown = 0;
    s->cool_len = ctx->opts.max_detailed < 1 ? 1 : (uint32_t)ctx->opts.max_detailed;
}

/* A detailed iteration that did not find its sequence cached. */
static void bound_count(ss_ctx_t *ctx) {
    ssi_stage *s = &ctx->st;
    uint32_t d = ctx->opts.max_detailed < 1 ? 1 : (uint32_t)ctx->opts.max_detailed;
    if (++s->streak < d) return;
    s->cooldown = s->cool_len;
    if (s->cool_len < 64 * d) s->cool_len *= 2;
    s->streak = 0;
    ctx->stats.bound_hits++;
}

static int end_recorded(ss_ctx_t *ctx, uint32_t n, uint64_t h, uint64_t sig, double secs,
                        ss_iter_report *rep) {
    ssi_stage *s = &ctx->st;
    ctx->stats.detailed_iters++;
    if (s->recording == 2) ctx->stats.detailed_partial++;
    ss_status st = ssi_rec_finish(ctx, h, sig, secs);
    if (st) {
        ctx->stats.plan_errors++;
        bound_count(ctx);
        return SS_PLAN_PENDING;
    }
    SS_ASSERT_INTERNAL(ssi_profile_running_hashes(s->rec, NULL) == h);
    uint64_t peak = s->rec->base_bytes;
    for (uint32_t i = 0; i < s->rec->nops; i++)
        if (s->rec->ops[i].mem_after > peak) peak = s->rec->ops[i].mem_after;
    rep->peak_bytes = peak;
    int hit = cache_find(ctx, h, sig, n);
    int replan = hit >= 0 && s->diverged && hit == s->from_plan;
    if (hit >= 0 && !replan) {
        /* the sequence was cached after all (a probe, or a prefix no cached plan shared) */
        ctx->stats.detailed_wasted++;
        ctx->stats.cache_hits++;
        if (hit != s->cur) ctx->stats.plan_switches++;
        s->cur = hit;
        cache_touch(ctx, hit);
        bound_reset(ctx);
        return SS_PLAN_HIT;
    }
    if (hit < 0) ctx->stats.cache_misses++;
    if (cache_plan(ctx, s->rec, replan ? hit : -1)) {
        bound_count(ctx);
        return SS_PLAN_PENDING;
    }
    s->rec = NULL;   /* the cache owns it now */
    s->cache[s->cur].len = s->it_len;
    bound_count(ctx);
    return SS_PLAN_NEW;
}

/* Derives the envelope of structure (hash h, n operators) from profile src with its saves at mx[0..m)
 * and caches it (into slot ei, or a new slot when -1) as the current plan of length bucket b, for
 * longest declared length len with reference tensors ref at ref_len (ref: m entries, taken in every case, NULL
 * for none): SS_PLAN_NEW, or -1. */
static int envelope_make(ss_ctx_t *ctx, const ss_profile *src, const ss_prof_tensor *mx, uint32_t m, uint64_t h,
                         uint32_t n, int ei, uint32_t b, int64_t len, ss_prof_tensor *ref, int64_t ref_len) {
    ssi_stage *s = &ctx->st;
    ss_profile *p = NULL;
    if (ssi_derive_profile(src, mx, m, h, env_sig(h, n, b), &p) != SS_OK) { free(ref); return -1; }
    snprintf(p->desc, sizeof p->desc, "smartswap envelope of a structure (%u operators), iteration %llu", n,
             (unsigned long long)ctx->iter);
    if (cache_plan(ctx, p, ei) != SS_OK) {
        ssi_profile_free(p);
        free(ref);
        return -1;
    }
    ssi_cache_entry *e = &s->cache[s->cur];
    e->derived = 1;
    e->envelope = 1;
    e->len = len;
    e->ref = ref;
    e->ref_len = ref ? ref_len : 0;
    e->bucket = b;
    ctx->stats.derived++;
    return SS_PLAN_NEW;
}

/* A copy of m tensors (NULL for none or out of memory: the envelope then has no reference). */
static ss_prof_tensor *tensors_dup(const ss_prof_tensor *t, uint32_t m) {
    if (!t || !m) return NULL;
    ss_prof_tensor *d = malloc((size_t)m * sizeof *d);
    if (d) memcpy(d, t, (size_t)m * sizeof *d);
    return d;
}

/* The longest length of two declared ones, 0 when either is unknown. */
static int64_t len_join(int64_t a, int64_t b) { return a > 0 && b > 0 ? (a > b ? a : b) : 0; }

/* Sizes up front: the reference an envelope planned for length len keeps after an iteration at
 * declared length li met it (or the plan it is made from, src, at its length): of the two, the
 * one whose length is not len, each tensor raised to its call site's largest (km); when both are
 * at len, src's own reference. Tensors are obs (the iteration's, m of them) or src's. Malloc'd,
 * NULL for none. */
static ss_prof_tensor *ref_after(const ssi_cache_entry *src, const ss_prof_tensor *obs, uint32_t m,
                                 const uint64_t *km, int64_t li, int64_t len, int64_t *ref_len) {
    int64_t ls = src->len;
    if (ls > 0 && li > 0 && ls != li && km && (ls == len || li == len)) {
        int use_obs = li != len;
        ss_prof_tensor *r = tensors_dup(use_obs ? obs : src->prof->tensors, m);
        if (r) site_raise(r, km, m, NULL, NULL, 0);
        *ref_len = use_obs ? li : ls;
        return r;
    }
    *ref_len = src->ref_len;
    return src->envelope && src->ref_len != len ? tensors_dup(src->ref, m) : NULL;
}

/* Dimension se (at length le) of a tensor that was sr at length lr != le, at length l: on the line
 * through the two, rounded up, at least 1; a dimension that did not change stays. grow: never
 * below se (the envelope of one bucket only grows). */
static int64_t dim_at(int64_t se, int64_t sr, int64_t le, int64_t lr, int64_t l, int grow) {
    if (se == sr || le == lr) return se;
    int64_t num = (se - sr) * (l - le), den = le - lr;
    if (den < 0) { num = -num; den = -den; }
    int64_t q = num / den, r = num % den;
    int64_t v = se + q + (r > 0 ? 1 : 0);
    if (grow && v < se) v = se;
    return v < 1 ? 1 : v;
}

/* e's tensors at length l on each dimension's line through e (at e->len) and its reference, into
 * mx (m = e's tensors), raised to their call sites' largest (km). grow: no dimension below e's. */
static void tensors_at(const ssi_cache_entry *e, int64_t l, int grow, ss_prof_tensor *mx, const uint64_t *km) {
    uint32_t m = e->prof->ntensors;
    memcpy(mx, e->prof->tensors, (size_t)m * sizeof *mx);
    for (uint32_t t = 0; t < m; t++) {
        ss_prof_tensor *x = &mx[t];
        const ss_prof_tensor *r = &e->ref[t];
        if (r->ndim != x->ndim || r->dtype != x->dtype || !x->ndim) continue;
        double po = 1, pn = 1;
        for (uint32_t d = 0; d < x->ndim && d < SS_MAX_DIMS; d++) {
            int64_t nd = dim_at(x->shape[d], r->shape[d], e->len, e->ref_len, l, grow);
            po *= (double)x->shape[d];
            pn *= (double)nd;
            x->shape[d] = nd;
        }
        if (po > 0 && pn != po) {
            double nb = ceil((double)x->bytes * (pn / po));
            x->bytes = nb < 1 ? 1 : (uint64_t)nb;
        }
    }
    site_raise(mx, km, m, NULL, NULL, 0);
}

/* Sizes up front (ss_ctx_sizes), at iteration begin with the current plan its structure's envelope.
 * With length buckets (options.len_buckets), the envelope of the declared length's bucket becomes
 * current: the cached one, else one derived from the current envelope at the declared length.
 * Then, when the declared longest length is beyond the one the envelope was planned for, it is
 * derived at that length. Each dimension of each tensor is taken as linear in the length through
 * the envelope's and its reference's (two lengths seen: the framework's shapes, never matched
 * values); the plan is made before the first save, so the executor schedules the iteration for its
 * sizes and evicts nothing for them. Without a reference (one length seen so far) nothing changes:
 * the end of the iteration makes or grows the envelope as observed. */
static void envelope_ahead(ss_ctx_t *ctx) {
    ssi_stage *s = &ctx->st;
    int ei = s->cur;
    int64_t l = s->it_len;
    if (!is_env(ctx, ei) || l <= 0) return;
    const ssi_cache_entry *e = &s->cache[ei];
    uint32_t b = len_bucket(ctx, l);
    int other = 0;
    if (b != e->bucket) {
        int bi = cache_find(ctx, e->hash, env_sig(e->hash, e->nops, b), e->nops);
        if (bi >= 0) {
            s->cur = ei = bi;
            cache_touch(ctx, bi);
            ctx->stats.plan_switches++;
            e = &s->cache[ei];
        } else {
            other = 1;   /* derived from this envelope into a slot of its own */
        }
    }
    int model = e->ref && e->len > 0 && e->ref_len > 0 && e->ref_len != e->len;
    if (!model || (!other && l <= e->len)) return;
    uint32_t m = e->prof->ntensors;
    ss_prof_tensor *mx = m ? malloc((size_t)m * sizeof *mx) : NULL;
    uint64_t *km = prof_site_keys(e->prof);
    ss_prof_tensor *ref = other ? tensors_dup(e->prof->tensors, m) : tensors_dup(e->ref, m);
    int64_t rl = other ? e->len : e->ref_len;
    if (!mx || !ref || !km || rl == l) { free(mx); free(ref); free(km); return; }
    tensors_at(e, l, !other, mx, km);
    free(km);
    if (envelope_make(ctx, e->prof, mx, m, e->hash, e->nops, other ? -1 : ei, b, l, ref, rl) == SS_PLAN_NEW)
        ctx->stats.sized_ahead++;
    free(mx);
}

/* A light iteration of a known structure (hash h, n operators, m saves as observed) at sizes of
 * its own, under the plan of other sizes or the envelope: it runs under the envelope from now
 * on, grown (a plan derived from the envelope's profile, or made the first time from the plan it
 * ran under) when a save exceeded it. Each tensor of the envelope is the largest seen at its
 * ordinal and, through site_raise, at its call site. The plan event, or -1 when the structure
 * does not hold (the caller goes on). */
static int envelope_update(ss_ctx_t *ctx, uint32_t n, uint64_t h, uint32_t m) {
    ssi_stage *s = &ctx->st;
    uint32_t bk = len_bucket(ctx, s->it_len);
    int ei = cache_find(ctx, h, env_sig(h, n, bk), n);
    const ssi_cache_entry *src = ei >= 0 ? &s->cache[ei] : &s->cache[s->cur];
    if (src->nops != n || src->hash != h || !ssi_derive_same_structure(src->prof, s->obs, m, 1)) return -1;
    ss_prof_tensor *mx = m ? malloc((size_t)m * sizeof *mx) : NULL;
    uint64_t *km = prof_site_keys(src->prof);
    if ((m && !mx) || !km) { free(mx); free(km); return -1; }
    int grow = ei < 0;
    /* a new bucket's envelope from a plan of another bucket: the iteration's own sizes only */
    int foreign = ei < 0 && bk && (src->envelope ? src->bucket : len_bucket(ctx, src->len)) != bk;
    for (uint32_t t = 0; t < m; t++) {
        const ss_prof_tensor *a = &src->prof->tensors[t];
        mx[t] = s->obs[t];
        if (!foreign && a->bytes >= s->obs[t].bytes) {
            mx[t].bytes = a->bytes;
            mx[t].dtype = a->dtype;
            mx[t].ndim = a->ndim;
            memcpy(mx[t].shape, a->shape, sizeof mx[t].shape);
        } else {
            grow = 1;
        }
    }
    if (site_raise(mx, km, m, NULL, NULL, 0)) grow = 1;
    int64_t rl = 0, li = s->it_len;
    int64_t len = foreign ? li : len_join(src->len, li);
    ss_prof_tensor *ref = ref_after(src, s->obs, m, km, li, len, &rl);
    free(km);
    if (!grow) {
        free(mx);
        ssi_cache_entry *ee = &s->cache[ei];   /* the reference and length move without a new plan */
        free(ee->ref);
        ee->ref = ref;
        ee->ref_len = ref ? rl : 0;
        ee->len = len;
        int was = s->cur;
        s->cur = ei;
        cache_touch(ctx, ei);
        bound_reset(ctx);
        ctx->stats.hits_derived++;
        if (was != ei) ctx->stats.plan_switches++;
        return s->mid_switches || was != ei ? SS_PLAN_HIT : SS_PLAN_SAME;
    }
    int r = envelope_make(ctx, src->prof, mx, m, h, n, ei, bk, len, ref, rl);
    free(mx);
    if (r >= 0) {
        ctx->stats.hits_matched++;
        bound_reset(ctx);
    }
    return r;
}

/* A fuzzy run under the envelope (slot ei: it skipped operators of it, an expert with no tokens):
 * the envelope grows when a save of it exceeded every tensor of its call site in the envelope
 * (routing sent more tokens to the experts that ran). SS_PLAN_NEW when grown, else -1. */
static int envelope_fuzzy_grow(ss_ctx_t *ctx, int ei) {
    ssi_stage *s = &ctx->st;
    const ss_profile *ep = s->cache[ei].prof;
    uint32_t m = ep->ntensors;
    if (!m || !s->nobs) return -1;
    ss_prof_tensor *mx = malloc((size_t)m * sizeof *mx);
    uint64_t *km = prof_site_keys(ep);
    int r = -1;
    if (mx && km) {
        memcpy(mx, ep->tensors, (size_t)m * sizeof *mx);
        if (site_raise(mx, km, m, s->obs, s->obs_key, s->nobs)) {
            const ssi_cache_entry *e = &s->cache[ei];
            /* a longer length of its own bucket moves its length; another bucket's does not */
            int64_t len = len_bucket(ctx, s->it_len) == e->bucket ? len_join(e->len, s->it_len) : e->len;
            r = envelope_make(ctx, ep, mx, m, e->hash, e->nops, ei, e->bucket, len,
                              e->ref_len != len ? tensors_dup(e->ref, m) : NULL, e->ref_len);
            if (r >= 0) {
                ctx->stats.hits_matched++;
                bound_reset(ctx);
            }
        }
    }
    free(mx);
    free(km);
    return r;
}

/* The light iteration's operators [good_n, n) equal the current plan's. */
static int ring_matches_plan(ss_ctx_t *ctx, uint32_t n) {
    return ring_agrees(ctx, ctx->st.cache[ctx->st.cur].prof, ctx->st.good_n, n);
}

/* ---- re-timing ---------------------------------------------------------------------------
 * A plan is timed by its profile's operator seconds, measured in one detailed iteration. The
 * machine's speed drifts (a shared machine's by up to 2x in minutes), and the detailed iteration
 * itself can run slower than the iterations that follow (measured on the 2-core machine: a
 * profile's operators summed to 193-325 ms where the steps of none around it took 176-211 ms,
 * every operator slower by about the same factor), so a plan can be made for another copy:compute
 * ratio than the one it runs at. Each Stable iteration that ran the current plan exactly gives
 * its own time: its wall time less the time inside smartswap (ctx->run_ovh_ns, measured in such
 * iterations while re-timing is on: the executor's work and its waits on copies still in
 * flight, the stalls), the quantity a detailed iteration sums over its operators. (Until
 * 2026-12-06 that time was measured in detailed iterations only: a Stable iteration's stalls
 * counted as its own time, so a plan that stalled looked slower than its profile and could be
 * re-timed slower still, the link then looking faster than it is.) When the median of the last
 * SSI_RETIME_N of them differs from the profile's sum by more than options.retime (either
 * way), the profile's operator seconds are scaled to that median and the plan is made again
 * from it, on the simulator, with no detailed iteration; it replaces the plan in its cache slot
 * (same key) from the next iteration. Profiles on cpu-sim's virtual clock carry a model, not measured seconds:
 * they are never re-timed; nor are profiles shorter than SSI_RETIME_MIN_S (timer noise). */
#define SSI_RETIME_MIN_S 1e-3

static double med3(const double *v) {
    double a = v[0], b = v[1], c = v[2];
    if (a > b) { double t = a; a = b; b = t; }
    if (b > c) b = c;
    return a > b ? a : b;
}

static int retime(ss_ctx_t *ctx, int slot, double secs) {
    ssi_stage *s = &ctx->st;
    ssi_cache_entry *e = &s->cache[slot];
    double f = ctx->opts.retime;
    if (!s->timing) return 0;   /* re-timing off, the virtual clock, or not measured (iter_begin) */
    /* the caller's own time: its wall time less the time inside smartswap since iter_begin
     * (the executor's iter_end, run since secs was taken, adds none) */
    double own = secs - (double)(atomic_load_explicit(&ctx->ovh_ns, memory_order_relaxed) +
                                 atomic_load_explicit(&ctx->run_ovh_ns, memory_order_relaxed) - s->it_ov0) * 1e-9;
    if (!(own > 0)) return 0;
    e->own[e->nown++ % SSI_RETIME_N] = own;
    if (e->nown < SSI_RETIME_N) return 0;
    /* the own time the plan predicts: the simulator's compute for it (its operators, and what it
     * recomputes, priced by their seconds: a hybrid's Stable iterations run those kernels too),
     * else the profile's operators */
    double ps = 0;
    for (uint32_t i = 0; i < e->prof->nops; i++) ps += e->prof->ops[i].seconds;
    if (e->plan->iter_s - e->plan->stall_s > ps) ps = e->plan->iter_s - e->plan->stall_s;
    if (ps < SSI_RETIME_MIN_S) return 0;
    double med = med3(e->own), r = med / ps;
    if (r <= f && r * f >= 1.0) return 0;
    e->nown = 0;   /* the next SSI_RETIME_N iterations judge the new timing (or try again) */
    ss_profile *p = NULL;
    ss_plan *pl = NULL;
    ss_status st = ssi_profile_clone(e->prof, &p);
    if (!st) {
        for (uint32_t i = 0; i < p->nops; i++) p->ops[i].seconds *= r;
        p->iter_seconds *= r;
        st = make_plan(ctx, p, &pl);
    }
    if (st) {
        ssi_profile_free(p);
        SS_WARN("stage: re-timing the plan of iteration %llu (its operators x %.2f) failed: %s; the plan stays",
                (unsigned long long)ctx->iter, r, ss_status_str(st));
        return 0;
    }
    SS_INFO("stage: iteration %llu: own time %.1f ms against its plan's %.1f ms: plan re-timed (x %.2f)",
            (unsigned long long)ctx->iter, med * 1e3, ps * 1e3, r);
    plan_free(ctx, e->plan);
    ssi_profile_free(e->prof);
    e->plan = pl;
    e->prof = p;
    ctx->stats.retimed++;
    return 1;
}

static int end_light(ss_ctx_t *ctx, uint32_t n, uint64_t h, uint32_t m, uint64_t sig,
                     double secs) {
    ssi_stage *s = &ctx->st;
    if (s->variant != SSI_REPLAN_ON && s->cur >= 0) return SS_PLAN_SAME;
    if (s->cur >= 0 && !s->diverged && !s->size_div) {
        const ssi_cache_entry *e = &s->cache[s->cur];
        if (n == e->nops && h == e->hash && m == e->prof->ntensors) {
            cache_touch(ctx, s->cur);
            bound_reset(ctx);
            if (e->derived) ctx->stats.hits_derived++;
            else ctx->stats.hits_exact++;
            if (!s->mid_switches && retime(ctx, s->cur, secs)) return SS_PLAN_NEW;
            return s->mid_switches ? SS_PLAN_HIT : SS_PLAN_SAME;
        }
    }
    /* it ran under another size's plan, or skipped some of its plan's operators: the evictions
     * do not make that plan stale (ssi_stage_mark_stale) */
    if (s->size_div || s->fuzzy) s->stale = 0;
    if (s->fuzzy && is_env(ctx, s->from_plan)) {
        /* it skipped operators of its structure's envelope (an expert with no tokens) and ran
         * under it by fuzzy matching: the envelope stays current (grown when a call site's save
         * exceeded it), no probe */
        int r = envelope_fuzzy_grow(ctx, s->from_plan);
        if (r >= 0) return r;
        s->cur = s->from_plan;
        cache_touch(ctx, s->cur);
        bound_reset(ctx);
        ctx->stats.hits_matched++;
        return s->mid_switches ? SS_PLAN_HIT : SS_PLAN_SAME;
    }
    if (s->cur >= 0 && !s->diverged && s->size_div && s->nobs == m) {
        int r = envelope_update(ctx, n, h, m);
        if (r >= 0) return r;
    }
    if (!s->diverged && !s->size_div) {
        count_divergence(ctx);
        ctx->stats.div_at_end++;
        s->diverged_at = n;
    }
    int hit = cache_find(ctx, h, sig, n);
    if (hit >= 0 && s->size_div && !s->diverged) {
        ctx->stats.hits_matched++;
    }
    if (hit >= 0) {
        ctx->stats.cache_hits++;
        if (hit != s->cur) ctx->stats.plan_switches++;
        s->cur = hit;
        cache_touch(ctx, hit);
        bound_reset(ctx);
        return SS_PLAN_HIT;
    }
    ctx->stats.cache_misses++;
    if (s->cur >= 0 && !s->diverged && s->size_div && s->nobs == m) {
        /* the plan's structure at other sizes: its profile at the sizes the saves had */
        const ssi_cache_entry *e = &s->cache[s->cur];
        ss_profile *p = NULL;
        if (n == e->nops && h == e->hash && ssi_derive_same_structure(e->prof, s->obs, m, 1) &&
            ssi_derive_profile(e->prof, s->obs, m, h, sig, &p) == SS_OK) {
            if (cache_plan(ctx, p, -1) == SS_OK) {
                s->cache[s->cur].derived = 1;
                s->cache[s->cur].len = s->it_len;
                ctx->stats.derived++;
                ctx->stats.hits_matched++;
                bound_reset(ctx);
                return SS_PLAN_NEW;
            }
            ssi_profile_free(p);
        }
    }
    if (s->cur >= 0 && !s->diverged && !s->size_div && m <= s->cache[s->cur].prof->ntensors &&
        ring_matches_plan(ctx, n)) {
        /* an exact prefix of the current plan's sequence, with a prefix of its saves (an
         * evaluation step): its profile is the plan's, cut */
        const ss_profile *src = s->cache[s->cur].prof;
        ss_profile *p = NULL;
        ss_status st = ssi_profile_new(&p);
        if (!st) st = ssi_ctx_sync_names(ctx, p, src->nnames);
        if (!st) st = ssi_profile_copy_prefix(p, src, n, m, n);
        if (!st) {
            p->seq_hash = h;
            p->size_sig = sig;
            p->iter_seconds = secs;
            ssi_fmt(p->desc, sizeof p->desc, "smartswap profile derived from a prefix, iteration %llu",
                    (unsigned long long)ctx->iter);
            st = ssi_profile_finalize(p);
        }
        if (!st) st = cache_plan(ctx, p, -1);
        if (!st) {
            s->cache[s->cur].derived = 1;
            ctx->stats.prefix_derived++;
            return SS_PLAN_NEW;
        }
        ssi_profile_free(p);
    }
    if (m == 0 && s->cur >= 0) {
        /* it saved nothing (an evaluation step whose experts routed otherwise): a plan would have
         * nothing to swap, so no probe; the current plan (its structure's envelope) stays */
        ctx->stats.fuzzy_runs++;
        bound_reset(ctx);
        return SS_PLAN_PENDING;
    }
    if (s->fuzzy) {
        /* operators of its plan skipped: it ran under that plan. The first time, no probe; a
         * structure that comes back is profiled (the next iteration, from op 0) */
        uint64_t key = h ^ ((uint64_t)n * 0x9E3779B97F4A7C15ull);
        int seen = 0;
        for (uint32_t i = 0; i < SSI_FUZZY_SEEN && !seen; i++) seen = s->fz_seen[i] == key;
        if (!seen) {
            s->fz_seen[s->fz_next++ % SSI_FUZZY_SEEN] = key;
            ctx->stats.fuzzy_runs++;
            bound_reset(ctx);
            return SS_PLAN_PENDING;
        }
    }
    if (!s->withheld) s->probe_pending = 1;
    return SS_PLAN_PENDING;
}

ss_status ssi_stage_iter_end(ss_ctx_t *ctx, ss_iter_report *rep) {
    ssi_stage *s = &ctx->st;
    uint32_t n = atomic_load_explicit(&ctx->n, memory_order_relaxed);
    uint64_t h = ctx->h;
    uint64_t sig = ssi_size_sig(ctx->saved_bytes);
    /* the caller's varying dimensions (ss_torch_set_sizes) key the sequence too */
    if (ctx->size_tag) sig = ssi_hash_fold(sig, ctx->size_tag);
    int stage = s->stage_now, next = stage, event = SS_PLAN_NONE;
    rep->detailed = s->recording;
    switch (stage) {
    case SS_STAGE_DISABLED:
        ctx->stats.iters_disabled++;
        break;
    case SS_STAGE_WARMUP:
        ctx->stats.iters_warmup++;
        if (++s->warm_done >= (uint32_t)(ctx->opts.warmup_iters > 0 ? ctx->opts.warmup_iters : 0)) {
            next = SS_STAGE_GENPOLICY;
            ctx->stats.warmup_to_genpolicy++;
        }
        break;
    case SS_STAGE_GENPOLICY:
    case SS_STAGE_STABLE:
        if (stage == SS_STAGE_GENPOLICY) ctx->stats.iters_genpolicy++;
        else ctx->stats.iters_stable++;
        event = s->recording ? end_recorded(ctx, n, h, sig, rep->seconds, rep)
                             : end_light(ctx, n, h, ctx->nsaves, sig, rep->seconds);
        if (stage == SS_STAGE_GENPOLICY) {
            next = SS_STAGE_STABLE;
            ctx->stats.genpolicy_to_stable++;
        }
        if (s->withheld) {
            ctx->stats.iters_cooldown++;
            if (s->cooldown) s->cooldown--;
        }
        break;
    default:
        break;
    }
    s->recording = 0;
    s->timing = 0;
    atomic_store(&s->stage, next);
    rep->stage = stage;
    rep->next_stage = next;
    rep->plan_event = event;
    rep->diverged_at = s->diverged_at;
    rep->mid_switches = s->mid_switches;
    rep->seq_hash = h;
    rep->size_sig = sig;
    return SS_OK;
}
