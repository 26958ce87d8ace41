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
} ss_plan_entry;

typedef struct ss_plan {
    uint64_t seq_hash, size_sig;
    uint32_t nops;              /* operators in the planned sequence */
    uint32_t ck_every;          /* a checkpoint every this many operators */
    uint32_t nck;
    uint64_t *ck;               /* ck[j] = running hash after operator (j+1)*ck_every - 1 */
    uint64_t budget_bytes;
    /* the simulator's predictions for this plan */
    uint64_t peak_before, peak_after, swapped_bytes, host_bytes;
    double   stall_s, iter_s;
    int      feasible;
    uint64_t min_budget_bytes;  /* smallest budget that fits (when infeasible, or computed) */
    uint32_t nnames;
    char   **names;
    uint32_t nentries;
    ss_plan_entry *entries;     /* sorted by out_op */
    size_t cap_names, cap_entries;
} ss_plan;

#endif /* SS_PLAN_H */
