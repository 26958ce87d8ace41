/* stage.h: the profiler's recording helpers (profile.c) and the stage machine with its plan
 * cache (stage.c), as the framework context (api.c) drives them.
 *
 * Light mode: every operator folds (hash of its name's text, call site) into a running 64-bit
 * hash, ssi_seq_step (profile.h); shapes stay out of it. Saved bytes enter the size signature
 * (ssi_size_sig: 16 buckets per power of two, about 4 to 6 % wide). A sequence is keyed by
 * (running hash after its last operator, operator count, size signature of its saved bytes).
 *
 * Detailed mode fills an ss_profile (profile.h) through the ssi_rec_* calls: per operator its
 * name, call site, phase and the unconstrained device bytes in use after it; per saved tensor
 * bytes, dtype, shape, producer, uses and release; the iteration's wall time.
 *
 * The stage machine: WarmUp (options.warmup_iters light iterations) -> GenPolicy (one detailed
 * iteration, then a plan) -> Stable (light, checked against the current plan's checkpoints).
 * See stage.c for the rules and docs/api.md for the counters.
 */
#ifndef SS_STAGE_H
#define SS_STAGE_H

#include "plan.h"

/* One operator in the light profiler's ring of recent operators. */
typedef struct ssi_ring_op {
    uint64_t site;
    uint32_t id;
    uint32_t pad;
} ssi_ring_op;

/* ---- profile.c: detailed recording (the running hash and its helpers: profile.h) ---------- */

typedef struct ss_ctx ss_ctx_t;
typedef struct ssi_handle ssi_handle;

/* Detailed recording into ctx->st.rec. All with the context's lock held.
 * rec_start: empties the recording profile, copies the names, sets base_bytes.
 * rec_op: the operator just counted (index p->nops): closes the previous one's mem_after.
 * rec_save: the save with ordinal `ord` (must be the next tensor index) produced by `op`.
 * rec_use / rec_release: a load / release of tensor ord at operator op.
 * rec_finish: closes the last operator, sets hash, signature and time, and finalizes. */
/* profile.c, for the recording, the stage machine and api-plans.c (lock held):
 * ctx_mem_now: unconstrained device bytes in use now (see ss_ctx_set_mem);
 * ctx_sync_names: interns names [p->nnames, upto) of the context into p so that profile name
 * ids equal the context's. */
uint64_t  ssi_ctx_mem_now(ss_ctx_t *ctx);
ss_status ssi_ctx_sync_names(ss_ctx_t *ctx, ss_profile *p, uint32_t upto);
ss_status ssi_rec_start(ss_ctx_t *ctx);
/* 1 when the context's device runs a virtual clock: operator seconds are a model there
 * (profile.c), never wall time. */
int       ssi_rec_virtual(const ss_ctx_t *ctx);
ss_status ssi_rec_op(ss_ctx_t *ctx, uint32_t id, uint64_t site);
ss_status ssi_rec_save(ss_ctx_t *ctx, uint32_t ord, uint32_t op, const ssi_handle *hd);
ss_status ssi_rec_use(ss_ctx_t *ctx, uint32_t ord, uint32_t op);
ss_status ssi_rec_release(ss_ctx_t *ctx, uint32_t ord, uint32_t op);
/* rec_recompute: tensor ord can be rebuilt from tensors src by re-running ops (ss_ctx_recomputable);
 * SS_ERR_INVALID when an index is outside the recording. */
ss_status ssi_rec_recompute(ss_ctx_t *ctx, uint32_t ord, const uint32_t *src, uint32_t nsrc,
                            const uint32_t *ops, uint32_t nop);
/* rec_span: tensor ord is the input of the span op_first..op_last (ss_ctx_recomputable_span). */
ss_status ssi_rec_span(ss_ctx_t *ctx, uint32_t ord, uint32_t op_first, uint32_t op_last);
ss_status ssi_rec_finish(ss_ctx_t *ctx, uint64_t seq_hash, uint64_t size_sig, double seconds);

/* ---- stage.c ---------------------------------------------------------------------------- */

/* The plan hook: makes *out from a finalized profile (which stays the caller's). free_fn
 * frees such a plan (NULL: the default, which frees ck, names, entries and the struct with
 * free()). Until the policy exists, the default hook makes a plan with no entries and one
 * checkpoint per operator. A plan without checkpoints gets them from the stage. */
typedef ss_status (*ssi_plan_fn)(void *user, const ss_profile *prof, ss_plan **out);
typedef void (*ssi_plan_free_fn)(void *user, ss_plan *plan);
typedef struct ssi_planner {
    ssi_plan_fn      fn;
    ssi_plan_free_fn free_fn;
    void            *user;
} ssi_planner;

/* The default hook and the default free. */
ss_status ssi_plan_default(void *user, const ss_profile *prof, ss_plan **out);
void      ssi_plan_free_default(void *user, ss_plan *plan);

typedef struct ssi_cache_entry {
    ss_plan    *plan;
    ss_profile *prof;       /* the profile it was made from (owned) */
    uint64_t    hash, sig;  /* the key, with nops */
    uint32_t    nops;
    uint32_t    used;       /* 1 = slot holds a plan */
    uint32_t    derived;    /* 1 = its profile was derived (new sizes, or a prefix), not recorded */
    uint32_t    envelope;   /* 1 = its structure's envelope: every saved tensor at the largest size
                               seen (stage.c, "envelope") */
    uint64_t    stamp;      /* LRU clock at the last use */
    /* sizes up front (ss_ctx_sizes): the longest declared length the profile is for (0: not
     * declared), and for an envelope its tensors at a shorter declared length ref_len (ref:
     * ntensors entries, owned; NULL until two lengths were seen): each dimension of a tensor is
     * taken as linear in the length through the two, so a longer length is planned ahead */
    int64_t     len, ref_len;
    ss_prof_tensor *ref;
    uint32_t    bucket;     /* an envelope's length bucket (options.len_buckets; 0: the only one) */
    /* re-timing (stage.c, "re-timing"): the own time of the last SSI_RETIME_N Stable iterations
     * that ran this plan exactly, and how many were seen since it was (re)made */
#define SSI_RETIME_N 3
    double      own[SSI_RETIME_N];
    uint32_t    nown;
} ssi_cache_entry;

/* SMARTSWAP_REPLAN: on (default), off (the first plan is kept: no checks, probes or new plans),
 * length (a new plan, recorded in detail, only when the first saved tensor's size, the sequence
 * length's signal, has no cached plan; structure and routing changes are not looked at). */
enum { SSI_REPLAN_ON = 0, SSI_REPLAN_OFF = 1, SSI_REPLAN_LENGTH = 2 };

typedef struct ssi_stage {
    _Atomic int stage;          /* ss_stage of the current (or next) iteration */
    int         stage_now;      /* the stage the open iteration runs in */
    uint32_t    warm_done;
    ssi_planner planner;
    /* the plan cache: cap = options.plan_cache_size slots */
    ssi_cache_entry *cache;
    uint32_t    cap;
    uint64_t    clock;
    int         cur;            /* slot of the current plan; -1 none */
    /* the checkpoint cursor of this iteration (driving thread) */
    const uint64_t *ck;
    uint32_t    nck, ck_every, ck_j, plan_nops;
    uint32_t    good_n;         /* operators verified against the plan so far */
    /* this iteration */
    int         recording;      /* 0 light, 1 detailed from op 0, 2 from diverged_at */
    int         timing;         /* the iteration's time inside smartswap is measured for
                                   re-timing (ctx->run_ovh_ns): a Stable one under a plan */
    int         withheld;       /* detail withheld by the max_detailed bound */
    int         diverged;       /* left the current plan and found no cached one in flight */
    int         div_at_save;    /* the divergence was a save's size */
    int         from_plan;      /* cur at the divergence (to tell a re-plan from a hit) */
    int         div_counted;    /* this iteration's divergence is counted */
    uint32_t    diverged_at;
    uint32_t    mid_switches;
    ss_profile *rec;            /* the recording profile (owned; handed to the cache) */
    double      rec_t;          /* ssi_now() at the last recorded operator; 0: none yet, < 0: paused */
    uint64_t    rec_ov;         /* ctx->ovh_ns then */
    /* the bound on detailed iterations */
    uint32_t    streak, cooldown, cool_len;
    int         probe_pending;
    int         stale;          /* the executor found the current plan stale (it evicted) */
    /* the saves of a light Stable iteration as seen (producer, bytes, dtype, shape): a new size
     * of the plan's structure gets a derived profile from them (derive.h) */
    ss_prof_tensor *obs;
    size_t      cap_obs;
    uint64_t   *obs_key;    /* per observed save: its producer's call site (name, site) */
    size_t      cap_obs_key;
    uint32_t    nobs;
    int         size_div;       /* a save's size left the plan, its structure did not (yet) */
    int         fuzzy;          /* the iteration skipped operators of its plan: runs under it */
#define SSI_FUZZY_SEEN 16
    uint64_t    fz_seen[SSI_FUZZY_SEEN];   /* structures met once in fuzzy runs */
    uint32_t    fz_next;
    int         variant;        /* SSI_REPLAN_*: SMARTSWAP_REPLAN, bench-varying's baselines */
    int64_t     it_len;         /* this iteration's longest declared length (ss_ctx_sizes; 0 none) */
    uint64_t    it_ov0;         /* ctx->ovh_ns + run_ovh_ns at the iteration's begin (re-timing's
                                   own time) */
} ssi_stage;

ss_status ssi_stage_init(ss_ctx_t *ctx);
void      ssi_stage_free(ss_ctx_t *ctx);
/* Sets up the iteration: stage, recording, checkpoint cursor, ctx->next_check (lock held). */
ss_status ssi_stage_iter_begin(ss_ctx_t *ctx);
/* ss_ctx_op's slow path: the operator count reached ctx->next_check with running hash ctx->h.
 * Takes the lock itself. */
ss_status ssi_stage_check(ss_ctx_t *ctx, uint32_t id, uint64_t site);
/* A save with ordinal ord at operator op: checks it against the plan, records it (lock held). */
ss_status ssi_stage_save(ss_ctx_t *ctx, uint32_t ord, uint32_t op, const ssi_handle *hd);
/* Closes the iteration: transitions, cache, plans; fills the stage fields of rep (lock held). */
ss_status ssi_stage_iter_end(ss_ctx_t *ctx, ss_iter_report *rep);
/* The executor had to evict under the current plan: the next Stable iteration is recorded in
 * detail from op 0 and its plan replaces the current one (lock held). */
void      ssi_stage_mark_stale(ss_ctx_t *ctx);
/* The current plan (NULL none); lock held or driving thread. */
const ss_plan *ssi_stage_plan(const ss_ctx_t *ctx);

/* Checks the plan's checkpoints against the profile, or fills them (one per operator) when the
 * plan has none; sets the plan's key fields (seq_hash, size_sig, nops) from the profile.
 * SS_ERR_FORMAT (logged) for checkpoints that disagree, SS_ERR_HOST_OOM. */
ss_status ssi_stage_plan_prepare(ss_plan *pl, const ss_profile *prof);
/* 1 when (hash, size signature, operators) is the key of its structure's envelope plan (stage.c,
 * "envelope"): a plans file's envelopes are known as such when loaded. */
int       ssi_stage_envelope_key(uint64_t hash, uint64_t sig, uint32_t nops);

#endif /* SS_STAGE_H */
