/* exec.h: the executor's internals that tests, the replay driver and the timeline writer use:
 * the match scorer, a fixed plan (replay --plan), and the timeline spans. The executor itself
 * is src/exec.c (public calls in include/smartswap-exec.h; docs/executor.md).
 */
#ifndef SS_EXEC_H
#define SS_EXEC_H

#include "api.h"
#include "smartswap-exec.h"

/* ---- matching ------------------------------------------------------------------------------- */

/* The features a saved tensor is matched by. name is an id of the plan's names (or any id space
 * both sides share); shape points to ndim dims. */
typedef struct ssi_match_feat {
    uint32_t name;
    uint64_t site;
    uint32_t dtype, ndim;
    const int64_t *shape;
    uint64_t bytes;
    uint32_t ordinal;   /* among saved tensors with the same (name, site, dtype) */
} ssi_match_feat;

/* 1 when every feature is equal (bytes compared rounded to SS_ALLOC_ALIGN, since blocks of the
 * allocator report their rounded size). */
int    ssi_match_exact(const ssi_match_feat *t, const ssi_match_feat *e);
/* Similarity of tensor t to entry e in [0, 1]; -1 when they can never match (dtype differs).
 * Weights: name 0.40, call site 0.15, shape 0.25 (same rank: mean over dims of min/max; other
 * rank: 0), bytes 0.10 (min/max), ordinal 0.10 (1 / (1 + |difference|)). Equal features give 1. */
double ssi_match_score(const ssi_match_feat *t, const ssi_match_feat *e);
/* The best entry of cand[0..n) for t: an exact one first, else the highest score >= threshold
 * (ties: smaller ordinal difference, then lower index). Entries with taken[i] != 0 are skipped
 * (taken may be NULL). Returns the index into cand, or SS_NONE; *score (may be NULL) gets its
 * score (1 for exact). */
uint32_t ssi_match_best(const ssi_match_feat *t, const ssi_match_feat *cand, uint32_t n,
                        const uint8_t *taken, double threshold, double *score);

/* ---- fixed plan and staleness ------------------------------------------------------------- */

/* Makes every iteration run with `plan` (kept by the caller, alive until replaced or the
 * context is freed) instead of the stage machine's plan; NULL goes back to the stage's. prof
 * (may be NULL; kept by the caller too) is the profile the plan was made from: with it, saves
 * are matched against every saved tensor of the profile, so an unplanned tensor never takes a
 * planned tensor's entry. Between iterations. SS_ERR_STATE without an executor. */
ss_status ssi_exec_set_plan(ss_ctx_t *ctx, const ss_plan *plan, const ss_profile *prof);

/* SS_MEM_FRAMEWORK: frees `need` resident saved bytes now (swap-outs in flight first, then
 * the tensors used farthest away, each of at least min_bytes), handing them out as
 * SS_ACTION_DROP once their copies are done; *freed says how many bytes (exec.c). For the
 * caller's own budget in iterations whose plan did not foresee it (api-torch.c). */
ss_status ssi_exec_evict_framework(ss_ctx_t *ctx, uint64_t need, uint64_t min_bytes,
                                   uint64_t *freed);

/* The op index of the plan in use at the current iteration's start (for tests). */
const ss_plan *ssi_exec_plan(ss_ctx_t *ctx);

/* ---- timeline (timeline.c) ------------------------------------------------------------------ */

enum { SSI_LANE_COMPUTE = 0, SSI_LANE_D2H = 1, SSI_LANE_H2D = 2, SSI_LANE_COUNT = 3 };

typedef struct ssi_span {
    uint32_t lane;      /* SSI_LANE_* */
    uint32_t id;        /* operator index, or tensor ordinal for copies */
    double   t0, t1;    /* seconds */
    char     name[40];
} ssi_span;

typedef struct ssi_timeline {
    ssi_span *spans;
    size_t    n, cap;
} ssi_timeline;

ss_status ssi_timeline_add(ssi_timeline *tl, uint32_t lane, uint32_t id, double t0, double t1,
                           const char *name);
void      ssi_timeline_clear(ssi_timeline *tl);
void      ssi_timeline_free(ssi_timeline *tl);
/* Writes Chrome trace event JSON: process 1 "actual" (times relative to t0_actual) and, when
 * planned is non-NULL, process 2 "planned"; one thread per lane. Atomic; SS_ERR_IO. */
ss_status ssi_timeline_write(const char *path, const ssi_timeline *actual, double t0_actual,
                             const ssi_timeline *planned);
/* The executor's last recorded iteration (copied into *out, which the caller frees) and its
 * start time. SS_ERR_STATE when none. */
ss_status ssi_exec_timeline_get(ss_ctx_t *ctx, ssi_timeline *out, double *t0);
/* The operator index at which the current (or, between iterations, the last) iteration's
 * backward began: its first load of a tensor saved in it; 0 before any. */
uint32_t  ssi_exec_fwd_end(ss_ctx_t *ctx);

#endif /* SS_EXEC_H */
