/* profile.h: the detailed profile of one iteration, as every part of the library holds it in
 * memory: the operator sequence (name, call site, phase, memory after, FLOPs, time) and the
 * tensors (saved for backward, or temporaries when the caller reports them) with their producer,
 * uses and release. The profiler fills it (profile.c), trace files store it (trace.c, format in
 * docs/trace-format.md), the synthetic generator builds it (workload.c), and the policy and the
 * simulator read it (policy.c, sim.c).
 *
 * Indices are 32-bit: an iteration of more than 4 billion operators is out of scope. Memory grows
 * with the events; there are no fixed caps.
 */
#ifndef SS_PROFILE_H
#define SS_PROFILE_H

#include "internal.h"

#define SS_MAX_DIMS 8
#define SS_NONE UINT32_MAX

typedef enum ss_phase {
    SS_PHASE_FWD = 0,
    SS_PHASE_BWD = 1,
    SS_PHASE_OPT = 2,
    SS_PHASE_OTHER = 3
} ss_phase;

enum ss_tensor_flag {
    SS_TENSOR_SAVED  = 1u << 0,  /* saved for backward (a swap candidate); else a temporary */
    SS_TENSOR_NOSWAP = 1u << 1   /* the caller opted it out of swapping */
};

typedef struct ss_prof_op {
    uint32_t name;        /* index into ss_profile.names */
    uint32_t phase;       /* ss_phase */
    uint64_t site;        /* call-site hash (0 when the caller gives none) */
    uint64_t mem_after;   /* device bytes in use after the op, as if nothing were swapped */
    uint64_t mem_peak;    /* the most device bytes in use during the op, on the same measure,
                             temporaries it allocated and freed included; 0 = not measured
                             (the op's level in the byte model stands for it) */
    double   flops;       /* FLOPs of the op; 0 = unknown */
    double   seconds;     /* measured or estimated duration; 0 = unknown */
} ss_prof_op;

typedef struct ss_prof_tensor {
    uint64_t bytes;
    uint32_t dtype;       /* ss_dtype */
    uint32_t ndim;
    int64_t  shape[SS_MAX_DIMS];
    uint32_t producer;    /* op index that produced (saved) it */
    uint32_t release;     /* op index after which it is freed; SS_NONE = alive at the end */
    uint32_t use_off;     /* its uses are uses[use_off .. use_off + nuses), ascending op indices */
    uint32_t nuses;
    uint32_t flags;       /* enum ss_tensor_flag */
    /* how to rebuild it instead of keeping or swapping it (docs/trace-format.md, "recompute"):
     * re-run the kernel calls of operators rc_op[0 .. rc_nop) on the tensors rc_src[0 ..
     * rc_nsrc) (saved tensors of this profile) and parameters; rc_nop = 0: not recomputable.
     * The caller registers it (ss_ctx_recomputable); rebuild.c and the hybrid (recompute.c) read it. */
    uint32_t rc_nop, rc_nsrc;
    uint32_t rc_op[2];
    uint32_t rc_src[2];
    /* a span this tensor is the input of (docs/trace-format.md, "rc_span"): re-running the kernel
     * calls of operators span_first .. span_first + span_nop - 1 from it alone (and parameters)
     * rebuilds every other tensor saved while they ran (a whole layer from its input);
     * span_nop = 0: none. Registered by the caller (ss_ctx_recomputable_span). */
    uint32_t span_first, span_nop;
} ss_prof_tensor;

typedef struct ss_profile {
    char      desc[160];    /* free text: what produced it ("trace gen llama-2-7b b=1 s=4096") */
    uint64_t  seq_hash;     /* light-profiler hash of the whole operator sequence */
    uint64_t  size_sig;     /* size signature (bucketed saved bytes) */
    uint64_t  base_bytes;   /* device bytes in use before the first op (weights, optimizer, ...) */
    double    iter_seconds; /* wall time of the iteration; 0 = unknown */
    uint32_t  nops, ntensors, nnames;
    size_t    nuses;
    ss_prof_op     *ops;
    ss_prof_tensor *tensors;
    char          **names;  /* interned operator names, each malloc'ed */
    uint32_t       *uses;
    size_t cap_ops, cap_tensors, cap_names, cap_uses;
    /* uses reported while recording, as (tensor, op) pairs; ssi_profile_finalize sorts them into
     * uses[] and sets each tensor's use_off/nuses. Empty after finalize. */
    uint32_t *pend;
    size_t npend, cap_pend;
} ss_profile;

/* ---- the container (profile-data.c) ---------------------------------------------------------
 * Each call returns SS_ERR_HOST_OOM when memory runs out, leaving the profile as it was. */

ss_status ssi_profile_new(ss_profile **out);
void      ssi_profile_free(ss_profile *p);               /* NULL is fine */
/* Empties the profile, keeping its arrays for reuse. */
void      ssi_profile_clear(ss_profile *p);
/* The id of `name` in p->names, adding it if new (linear in the number of names: names are few). */
ss_status ssi_profile_intern(ss_profile *p, const char *name, uint32_t *id);
ss_status ssi_profile_add_op(ss_profile *p, const ss_prof_op *op, uint32_t *idx);
/* Adds a tensor; its use_off/nuses are ignored (uses come from ssi_profile_add_use). */
ss_status ssi_profile_add_tensor(ss_profile *p, const ss_prof_tensor *t, uint32_t *idx);
ss_status ssi_profile_add_use(ss_profile *p, uint32_t tensor, uint32_t op);
/* Moves pending uses into uses[] (per tensor, ascending, duplicates removed) and checks the
 * profile (ssi_profile_check). */
ss_status ssi_profile_finalize(ss_profile *p);
/* Checks every index and invariant (producer < nops, uses ascending and after the producer,
 * release >= last use, name ids < nnames, ndim <= SS_MAX_DIMS, bytes > 0). On failure returns
 * SS_ERR_FORMAT and describes the first fault in err. */
ss_status ssi_profile_check(const ss_profile *p, char *err, size_t err_len);
/* 1 when a and b hold the same data (names compared as strings), else 0. */
int       ssi_profile_equal(const ss_profile *a, const ss_profile *b);
ss_status ssi_profile_clone(const ss_profile *p, ss_profile **out);
/* Bytes of element type d (0 for SS_DTYPE_OTHER); its name ("f32") and back (-1 unknown). */
size_t      ssi_dtype_size(uint32_t d);
const char *ssi_dtype_name(uint32_t d);
int         ssi_dtype_from_name(const char *name);

/* ---- the light profiler's running hash and helpers (profile.c) -----------------------------
 * Every operator folds (hash of its name's text, call site) into a running 64-bit hash,
 * ssi_seq_step (ss_ctx_op in api.c inline); the stage machine keys plans by it (stage.h). */

/* The seed of the running hash, and one step of it. */
#define SSI_SEQ_SEED 0x5EC0DE5EC0DE5EC0ull
static inline uint64_t ssi_seq_step(uint64_t h, uint64_t name_hash, uint64_t site) {
    return ssi_hash_fold(h, name_hash ^ (site * 0x9E3779B97F4A7C15ull));
}

/* Size signature of a byte count: 0 for 0, else 16 buckets per power of two. */
uint64_t ssi_size_sig(uint64_t bytes);
/* The running hash after each operator of p into out[0 .. p->nops) (out has p->nops slots);
 * returns the hash after the last one (SSI_SEQ_SEED for an empty profile). */
uint64_t ssi_profile_running_hashes(const ss_profile *p, uint64_t *out);
/* Sum of the bytes of the tensors flagged SS_TENSOR_SAVED. */
uint64_t ssi_profile_saved_bytes(const ss_profile *p);
/* Appends to dst (empty, with at least src's names) the first nops operators of src and the
 * first ntensors tensors (whose producers must be < nops), with their uses before `upto`
 * (<= nops) as pending uses and releases at or past `upto` cleared; operators' mem_after lose
 * the bytes of src's tensors that were not copied. SS_ERR_HOST_OOM leaves dst partly filled
 * (clear it); SS_ERR_INVALID for out-of-range counts. */
ss_status ssi_profile_copy_prefix(ss_profile *dst, const ss_profile *src, uint32_t nops,
                                  uint32_t ntensors, uint32_t upto);

#endif /* SS_PROFILE_H */
