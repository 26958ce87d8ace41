/* plan.h: a swap plan, as the policy generator writes it, the simulator checks it, the executor
 * follows it and plan files store it (docs/trace-format.md). Operator indices refer to the
 * operator sequence of the profile the plan was made from; the sequence-hash checkpoints let the
 * stage machine notice, at the operator where it happens, that the running sequence has left it.
 */
#ifndef SS_PLAN_H
#define SS_PLAN_H

#include "profile.h"

typedef struct ss_plan_entry {
    /* match features (the executor matches saved tensors to entries by these) */
    uint32_t name;          /* index into ss_plan.names: the name of the producing operator */
    uint64_t site;          /* call site of the producing operator */
    uint32_t dtype, ndim;
    int64_t  shape[SS_MAX_DIMS];
    uint64_t bytes;
    uint32_t ordinal;       /* among saved tensors with the same (name, site, dtype) */
    uint32_t tensor;        /* index of the tensor in the planned profile */
    /* schedule, as operator indices of the planned sequence */
    uint32_t out_op;        /* swap-out issued right after this operator */
    uint32_t free_op;       /* device block released when this operator is reached */
    uint32_t in_op;         /* swap-in issued when this operator is reached */
    uint32_t use_op;        /* first use after the swap-in: its load waits on the copy */
    double   t_out_done;    /* predicted completion of the swap-out, s from iteration start */
    double   t_in_done;     /* predicted completion of the swap-in */
    uint32_t action;        /* ss_plan_action: what is done with the tensor (a tensor without an
                               entry is kept resident). SS_PLAN_RECOMPUTE: no copy; the caller
                               drops it at its save (out_op) and rebuilds it at use_op by
                               re-running its producer's kernel call (rebuild.h); free_op =
                               out_op + 1, in_op = use_op, t_out_done = t_in_done = 0 */
} ss_plan_entry;

typedef enum ss_plan_action {
    SS_PLAN_SWAP = 0,       /* swapped out after out_op, back in at in_op */
    SS_PLAN_RECOMPUTE = 1   /* dropped after out_op, rebuilt at use_op */
} ss_plan_action;

typedef struct ss_plan {
    uint64_t seq_hash, size_sig;
    uint32_t nops;              /* operators in the planned sequence */
    uint32_t ck_every;          /* a checkpoint every this many operators */
    uint32_t nck;
    uint64_t *ck;               /* ck[j] = running hash after operator (j+1)*ck_every - 1 */
    uint64_t budget_bytes;
    /* the simulator's predictions for this plan */
    uint64_t peak_before, peak_after, swapped_bytes, host_bytes;
    uint64_t peak_reserved;     /* the allocator's peak reserved in the simulation (not stored
                                   in plan files: 0 after a read) */
    double   stall_s, iter_s;
    int      feasible;
    uint64_t min_budget_bytes;  /* smallest budget that fits (when infeasible, or computed) */
    uint32_t nnames;
    char   **names;
    uint32_t nentries;
    ss_plan_entry *entries;     /* sorted by out_op */
    size_t cap_names, cap_entries;
    char   desc[160];           /* free text: what it was planned from and with which settings */
} ss_plan;

/* ---- the container (plan.c) -----------------------------------------------------------------
 * Each call returns SS_ERR_HOST_OOM when memory runs out, leaving the plan as it was. */

#define SS_PLAN_FORMAT  "smartswap-plan"
#define SS_PLAN_VERSION 2      /* 2: entries carry "action"; version 1 files load as all-swap */
#define SS_PLAN_CK_EVERY_DEFAULT 64

ss_status ssi_plan_new(ss_plan **out);
void      ssi_plan_free(ss_plan *p);                      /* NULL is fine */
/* Empties the plan (entries, names, checkpoints, predictions), keeping its arrays. */
void      ssi_plan_clear(ss_plan *p);
/* The id of `name` in p->names, adding it if new (linear: names are few). */
ss_status ssi_plan_intern(ss_plan *p, const char *name, uint32_t *id);
/* Appends a copy of e (its name must already be an id of p). Order is not checked here; call
 * ssi_plan_sort before writing if entries were added out of out_op order. */
ss_status ssi_plan_add_entry(ss_plan *p, const ss_plan_entry *e);
/* Sorts entries by (out_op, tensor). */
void      ssi_plan_sort(ss_plan *p);
/* Fills an entry's match features (name interned into p, site, dtype, shape, bytes, ordinal
 * among saved tensors with the same producer name, site and dtype) from tensor t of prof. */
ss_status ssi_plan_entry_from_tensor(ss_plan *p, const ss_profile *prof, uint32_t t,
                                     ss_plan_entry *e);

/* Sets nops, seq_hash (when prof has none, the running hash after its last operator) and the
 * checkpoints of p from prof: ck[j] = the light profiler's running hash (ssi_profile_running_hashes
 * of profile.h: SSI_SEQ_SEED folded with ssi_seq_step per operator) after operator
 * (j+1)*every - 1 (every 0 = the default). */
ss_status ssi_plan_set_checkpoints(ss_plan *p, const ss_profile *prof, uint32_t every);

/* Checks every index and invariant: names valid, entries sorted by out_op, for each entry
 * out_op < free_op <= in_op <= use_op < nops, bytes > 0, ndim <= SS_MAX_DIMS, nck consistent
 * with nops and ck_every. SS_ERR_FORMAT with the first fault described in err. */
ss_status ssi_plan_check(const ss_plan *p, char *err, size_t err_len);
/* 1 when a and b hold the same data (names compared as strings), else 0. */
int       ssi_plan_equal(const ss_plan *a, const ss_plan *b);
/* 1 when plan (may be NULL) has an SS_PLAN_RECOMPUTE entry. */
int       ssi_plan_has_recompute(const ss_plan *plan);

/* ---- plan files (plan.c; format in docs/trace-format.md, "Plan files") -------------------------------------
 * Writing is atomic (nothing half-written: a temporary file renamed over path). Reading never
 * crashes on bad input: it returns SS_ERR_FORMAT (or SS_ERR_IO when the file cannot be read)
 * and writes "FILE:LINE: what is wrong" into err. *out is set only on success. */
ss_status ssi_plan_write(const ss_plan *p, const char *path);
/* The file's text into a malloc'ed buffer *text (NUL-terminated), for tests and pipes. */
ss_status ssi_plan_format(const ss_plan *p, char **text, size_t *len);
ss_status ssi_plan_read(const char *path, ss_plan **out, char *err, size_t err_len);
/* Parses text[0..len) as a plan file named `fname` (only used in messages). */
ss_status ssi_plan_parse(const char *text, size_t len, const char *fname, ss_plan **out,
                         char *err, size_t err_len);

#endif /* SS_PLAN_H */
