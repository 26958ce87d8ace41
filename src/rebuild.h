/* rebuild.h: the profile as the run has it when some saved tensors are recomputed (docs/policy.md,
 * "Swap or recompute"), below both of its readers: the simulator (sim.c), which prices a plan's
 * recompute entries on it, and the hybrid policy (recompute.c), which plans swaps on it.
 *
 * A profile's tensor may carry a recipe (ss_prof_tensor.rc_*: the operators whose kernel calls
 * rebuild it and the saved tensors it is rebuilt from), registered by the caller
 * (ss_ctx_recomputable), or be the input of a span (ss_prof_tensor.span_*: a whole layer re-run
 * from it, ss_ctx_recomputable_span). This file says which recipes and spans are usable, where
 * each tensor is rebuilt, and rewrites the profile for a choice of them (rc[t] = 1: tensor t by
 * its own recipe, 2: by re-running its span). It reads profiles and plans and calls only the
 * profile container (profile-data.c) and util.c: never the simulator or the policy.
 */
#ifndef SS_REBUILD_H
#define SS_REBUILD_H

#include "plan.h"

/* 1 when tensor t of p has a usable recipe: saved, with a first use after its producer, its
 * sources saved tensors alive (not released) at that use. */
int ssi_rebuild_candidate(const ss_profile *p, uint32_t t);

/* The first use of tensor t in the backward (the use a recompute rebuilds it for), or SS_NONE. */
uint32_t ssi_rebuild_first_use(const ss_profile *p, uint32_t t);
/* The last access of t before op u (its last use before u, else its producer): where a
 * recomputed t is dropped. */
uint32_t ssi_rebuild_last_before(const ss_profile *p, uint32_t t, uint32_t u);

/* A span of source src covers the saved tensors produced (saved) while its operators ran, src
 * excepted: its members. Taken whole, every member is dropped at its save and all are rebuilt at
 * once at `at`, the first backward use of any of them, by re-running the span's operators
 * [first, first + nop) from src (which is kept or swapped, and gets a use there). A span is
 * usable when every member is saved and swappable, src is alive at `at` (uses before it, in the
 * forward, stay: a member is dropped after its last access before `at`), no member is in another
 * span, and some member has no recipe of its own (so a plan that drops all members at `at` can
 * only mean the span: the trainer decides the same way). */
typedef struct ssi_rebuild_span {
    uint32_t src, at, first, nop;
    uint32_t mem_off, nmem;     /* members: mem[mem_off .. mem_off + nmem) */
    uint64_t bytes;             /* their bytes */
} ssi_rebuild_span;

typedef struct ssi_rebuild_spans {
    ssi_rebuild_span *g;
    uint32_t          ng;
    uint32_t         *mem;      /* members of every span */
    uint32_t         *of;       /* of[t]: the span t is a member of, or SS_NONE */
} ssi_rebuild_spans;

/* The usable spans of p into *S (none when p registers none; the caller frees them with
 * ssi_rebuild_spans_free). SS_ERR_HOST_OOM, S then holding nothing. */
ss_status ssi_rebuild_spans_find(const ss_profile *p, ssi_rebuild_spans *S);
void      ssi_rebuild_spans_free(ssi_rebuild_spans *S);

/* Where tensor t is rebuilt under rc (1: its own recipe, at its first use; 2: its span's). */
uint32_t ssi_rebuild_at(const ss_profile *p, const ssi_rebuild_spans *S, const uint8_t *rc, uint32_t t);

/* The profile the run has when the tensors with rc[t] = 1 are recomputed by their own recipe
 * and those with rc[t] = 2 by re-running their span (every member of a span 2, or none): each
 * is released at its producer (it has no uses), a temporary of its bytes (not saved) lives from
 * its rebuild (its first use; for a span, the first use of any member) to its release, that
 * operator costs the recipe's operators' seconds and FLOPs more (a span's once, with a copy of
 * its source and what the forward held in the span beside its members added to that operator's
 * peak), and the sources are used there too; mem_after/mem_peak drop by its rounded bytes in
 * between. Tensor indices of p are kept (the temporaries are appended). S: p's usable spans
 * (ssi_rebuild_spans_find). *out: a new finalized profile. SS_ERR_INVALID when some rc[t] is
 * not a candidate or a span is not taken whole. */
ss_status ssi_rebuild_derive_spans(const ss_profile *p, const ssi_rebuild_spans *S, const uint8_t *rc,
                                   ss_profile **out);
/* The same, finding p's spans itself. */
ss_status ssi_rebuild_derive(const ss_profile *p, const uint8_t *rc, ss_profile **out);

/* The swap part of a plan with recompute entries (SS_PLAN_RECOMPUTE), as the simulator replays
 * it: *q the profile derived for the rc those entries mean (ssi_rebuild_derive; the caller's),
 * ent[0 .. *m) the plan's other entries in order, map[j] the plan index of ent[j] (ent and map
 * have room for plan->nentries). A span counts as taken whole when every member has a recompute
 * entry at the span's rebuild point; every other recompute entry must be its tensor's own recipe
 * at its first use, dropped after its last access before that. SS_ERR_INVALID with the fault in
 * err when an entry does not fit p; SS_ERR_HOST_OOM. */
ss_status ssi_rebuild_of_plan(const ss_profile *p, const ss_plan *plan, ss_profile **q, ss_plan_entry *ent,
                              uint32_t *map, uint32_t *m, char *err, size_t err_len);

#endif /* SS_REBUILD_H */
