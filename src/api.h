/* api.h: the framework context (struct ss_ctx) as the library's own parts see it: the handle
 * table, the action queue, the light-profiler hot fields, the detailed recorder, the stage
 * machine, and the two slots through which later parts plug in:
 *
 *  - the executor (src/exec.c, a later issue): an ssi_exec_ops table installed with
 *    ssi_ctx_set_exec. NULL (the default) means pass-through: saved tensors stay resident and
 *    loads return the caller's pointer. The executor queues actions with ssi_ctx_push_action
 *    and keeps its per-tensor state in ssi_handle.exec.
 *  - the policy (src/policy.c): a plan hook (ssi_planner in stage.h) that turns a finalized
 *    profile into a plan; the default builds a plan with no entries but with the sequence
 *    checkpoints.
 *
 * Locking: `lock` guards the handle table, the action queue, the names, the detailed
 * recorder, the stats and the cache. The light hot path (ss_ctx_op in a light iteration)
 * touches only fields the driving thread owns (h, n, ring, ck cursor) and reads the name-hash
 * table through an atomic pointer.
 */
#ifndef SS_API_H
#define SS_API_H

#include "stage.h"
#include "smartswap-alloc.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct ssi_handle {
    void       *ptr;        /* the caller's pointer (or the block's) */
    ss_block_t *block;      /* SS_MEM_SMARTSWAP: the block, owned by the context until release */
    uint64_t    bytes;
    uint64_t    iter;       /* iteration it was saved in */
    uint32_t    ord;        /* save ordinal in that iteration = tensor index in its profile */
    uint32_t    gen;        /* generation of the slot; part of the handle value */
    uint32_t    live;       /* 1 between save and release */
    uint32_t    flags;      /* SS_SAVE_* */
    uint32_t    next_free;  /* free-list link (slot index + 1; 0 = end) */
    uint32_t    dtype, ndim;
    int64_t     shape[SS_MAX_DIMS];
    void       *exec;       /* the executor's per-tensor state (NULL without one) */
} ssi_handle;

/* The executor's slots. Every slot may be NULL (pass-through for it). They are called with the
 * context's lock held, except op, which the driving thread calls lock-free. Errors are
 * returned to the caller of the API call that triggered them. */
typedef struct ssi_exec_ops {
    void *self;
    /* a new iteration starts; plan is the stage's current plan (may be NULL) */
    ss_status (*iter_begin)(void *self, ss_ctx_t *ctx, const ss_plan *plan);
    /* operator index idx is about to run (hot path: keep it cheap) */
    void      (*op)(void *self, ss_ctx_t *ctx, uint32_t idx);
    ss_status (*save)(void *self, ss_ctx_t *ctx, uint64_t handle, ssi_handle *h);
    /* sets *ptr (defaults to h->ptr before the call) and orders `stream` after any copy */
    ss_status (*load)(void *self, ss_ctx_t *ctx, uint64_t handle, ssi_handle *h,
                      ss_stream_t *stream, void **ptr);
    ss_status (*release)(void *self, ss_ctx_t *ctx, uint64_t handle, ssi_handle *h);
    ss_status (*action_done)(void *self, ss_ctx_t *ctx, uint64_t handle, ssi_handle *h, void *ptr);
    /* fills the executor's fields of the report */
    ss_status (*iter_end)(void *self, ss_ctx_t *ctx, ss_iter_report *rep);
    void      (*destroy)(void *self);
    /* the stage switched to another cached plan in mid-iteration (lock held) */
    void      (*plan_switch)(void *self, ss_ctx_t *ctx, const ss_plan *plan);
} ssi_exec_ops;

/* flags that send ss_ctx_op off its fast path */
enum { SSI_SLOW_DISABLED = 1, SSI_SLOW_NO_ITER = 2, SSI_SLOW_EXEC = 4 };

struct ss_ctx {
    /* ---- hot: the driving thread's light path -------------------------------------------- */
    uint32_t  slow;             /* SSI_SLOW_* */
    uint32_t  next_check;       /* op count at which the slow path runs next (UINT32_MAX never) */
    uint64_t  h;                /* running sequence hash */
    _Atomic uint32_t n;         /* operators so far in this iteration */
    uint32_t  ring_mask;        /* ring of the last ring_mask+1 operators (id, site) */
    ssi_ring_op *ring;
    _Atomic(uint64_t *) name_hash;   /* per name id: hash of the name's text */
    _Atomic uint32_t    nnames;
    const ssi_exec_ops *exec;   /* NULL: pass-through */

    /* ---- configuration ------------------------------------------------------------------- */
    ss_options   opts;
    int          mem_owner;
    ss_device_t *device;
    ss_stream_t *compute;
    ss_alloc_t  *alloc;

    pthread_mutex_t lock;

    /* ---- names (lock) ---------------------------------------------------------------------- */
    char    **names;
    size_t    cap_names;
    uint64_t **retired;         /* old name_hash arrays, freed at ss_ctx_free */
    size_t     nretired, cap_retired;

    /* ---- handles (lock) -------------------------------------------------------------------- */
    ssi_handle *hs;
    size_t      cap_hs;
    uint32_t    nhs;            /* slots used so far */
    uint32_t    free_head;      /* slot index + 1 of the first free slot; 0 = none */

    /* ---- actions (lock): a FIFO ring ------------------------------------------------------- */
    ss_action  *act;
    size_t      cap_act, act_head, act_n;

    /* ---- iteration state ------------------------------------------------------------------- */
    int       in_iter;
    uint64_t  iter;             /* index of the current (or next) iteration */
    double    t_begin;
    uint32_t  nsaves;           /* saves in this iteration (the next save's ordinal) */
    uint32_t  nloads, nreleases;
    uint64_t  saved_bytes;      /* saved in this iteration */
    int       phase;            /* ss_op_phase of the following operators (lock) */
    int       phase_set;        /* the caller set the phase in this iteration */
    uint64_t  size_tag;         /* the caller's varying dimensions of this iteration, hashed
                                   (0: none); folded into its size signature (stage.c) */
    int64_t   decl_len;         /* ss_ctx_sizes: the next iteration's longest declared length
                                   (0: none declared); taken and cleared by iter_begin */

    /* memory accounting for detailed profiles (lock) */
    uint64_t  saved_live;       /* bytes of saved tensors not yet released, any iteration */
    uint64_t  swapped;          /* bytes of live saved tensors swapped out (the executor's) */
    int       mem_reported;     /* ss_ctx_set_mem was called */
    uint64_t  mem_rep, mem_rep_saved, mem_rep_swapped;

    /* ---- profiler and stage machine (stage.c; lock where it says) ------------------------- */
    ssi_stage st;

    ss_ctx_stats   stats;       /* lock */
    ss_iter_report last;        /* lock */

    /* nanoseconds the driving and framework threads spent inside smartswap (API calls with an
     * executor, eviction callbacks) during detailed iterations: ssi_rec_op subtracts them so
     * that a profile's operator seconds are the caller's own time (ssi_ovh_begin/end) */
    _Atomic uint64_t ovh_ns;
    /* the same in the other iterations while re-timing is on (ssi_stage.timing): the time an
     * iteration spent waiting on copies and inside the executor, which re-timing takes out of
     * its wall time to compare the caller's own time with the plan's compute */
    _Atomic uint64_t run_ovh_ns;
};

/* Overhead timing, while a detailed iteration records (into ovh_ns) or re-timing measures a
 * plan's iterations (into run_ovh_ns); off otherwise. Nested spans on one thread (an eviction
 * inside a load) count once. */
typedef struct ssi_ovh { double t0; _Atomic uint64_t *to; } ssi_ovh;   /* to: NULL = off */
extern _Thread_local int ssi_tl_ovh;
static inline ssi_ovh ssi_ovh_begin(ss_ctx_t *ctx) {
    ssi_ovh o = {0, NULL};
    if ((ctx->st.recording || ctx->st.timing) && !ssi_tl_ovh) {
        ssi_tl_ovh = 1;
        o.to = ctx->st.recording ? &ctx->ovh_ns : &ctx->run_ovh_ns;
        o.t0 = ssi_now();
    }
    return o;
}
static inline void ssi_ovh_end(ss_ctx_t *ctx, ssi_ovh o) {
    (void)ctx;
    if (!o.to) return;
    double d = ssi_now() - o.t0;
    if (d > 0) atomic_fetch_add_explicit(o.to, (uint64_t)(d * 1e9), memory_order_relaxed);
    ssi_tl_ovh = 0;
}

/* Installs the executor (NULL: pass-through). Only between iterations. */
ss_status ssi_ctx_set_exec(ss_ctx_t *ctx, const ssi_exec_ops *ops);
/* Queues an action for the caller (lock held by the caller of this function). */
ss_status ssi_ctx_push_action(ss_ctx_t *ctx, uint32_t kind, uint64_t handle, uint64_t bytes);
/* Replaces the plan hook (stage.h); NULL fn restores the default. Only between iterations. */
ss_status ssi_ctx_set_planner(ss_ctx_t *ctx, const ssi_planner *pl);
/* The handle entry for a handle value, or NULL if not live (lock held). */
ssi_handle *ssi_ctx_handle(ss_ctx_t *ctx, uint64_t handle);

#endif /* SS_API_H */
