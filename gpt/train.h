/* train.h: the training schedule of the reference trainer, shared by `smartswap train` and the
 * tests so that both run exactly the same iterations.
 *
 * One training iteration (one smartswap iteration) = gpt_step_begin, `accum` micro-batches, one
 * AdamW update, gpt_step_end. Micro-batch j of step s reads batch number s*accum + j of the data
 * (gpt_data_batch) with a sequence length drawn from [seq_min, seq_max] by splitmix64 of
 * (seed, s, j): the operator sequence changes with it, deterministically. After every
 * `eval_every`-th training step comes an evaluation iteration: forward only, seq_max tokens per
 * row, batches from a separate stream (seed ^ GPT_EVAL_SALT, number k for the k-th evaluation).
 */
#ifndef GPT_TRAIN_H
#define GPT_TRAIN_H

#include "data.h"
#include "model.h"

#define GPT_EVAL_SALT 0xE7A1E7A1E7A1E7A1ull

typedef struct gpt_schedule {
    int      batch;             /* rows per micro-batch */
    int      seq_min, seq_max;  /* tokens per row, drawn per micro-batch (equal: fixed) */
    int      accum;             /* micro-batches per step (>= 1) */
    int      eval_every;        /* 0: no evaluation */
    uint64_t seed;
    float    lr;
} gpt_schedule;

/* Sequence length of micro-batch j of step s. */
int gpt_sched_seq(const gpt_schedule *s, int step, int micro);

/* Host buffers for one micro-batch of seq_max tokens: tokens and targets, batch * seq_max each. */
typedef struct gpt_batch_buf {
    int *tok, *tgt;
} gpt_batch_buf;
int  gpt_batch_buf_init(gpt_batch_buf *b, const gpt_schedule *s);
void gpt_batch_buf_free(gpt_batch_buf *b);

/* Training step `step` (0-based): *loss = the mean of its micro-batch losses (float sum in
 * micro-batch order, divided by accum). 0, or non-zero with m->errmsg (the step is closed). */
int gpt_train_step(gpt_model *m, const gpt_data *d, const gpt_schedule *s, int step, gpt_batch_buf *b,
                   float *loss);
/* The k-th evaluation iteration (0-based), reported to the hooks as iteration `iter`. */
int gpt_eval_step(gpt_model *m, const gpt_data *d, const gpt_schedule *s, int k, int iter, gpt_batch_buf *b,
                  float *loss);

/* The smallest budget that can train a configuration (issue 14 item 5): the model's state
 * (gpt_state_bytes) plus the largest working set of any single operator, forward, backward or
 * update: what must be resident while it runs however the saved tensors are swapped. Measured
 * by an exact probe: one training iteration (forward, backward, AdamW; then an evaluation
 * forward when the schedule has them) of `batch` rows at the longest sequence (seq_max), with
 * every token routed to experts 0..K-1 (MoE: the largest per-expert batch with every earlier
 * expert's output still held), on host memory; the probe counts, at every allocation, save and
 * load, the non-state bytes live (256-byte granules, as gpt_mem charges them) less the saved
 * tensors that the executor could have swapped out at that moment: those of at least
 * `min_swap` bytes that the current operator neither saved nor loaded (the eviction fallback
 * takes any other; smaller ones are counted as resident, as smartswap keeps them). The result is
 * rounded up to `unit` (the allocator's: 256 B segments, else the granule). */
typedef struct gpt_min_budget {
    uint64_t state_bytes;        /* gpt_state_bytes */
    uint64_t work_bytes;         /* the largest working set above the state */
    uint64_t min_budget_bytes;   /* state + work, rounded up to unit */
    uint64_t unit;
    int      seq;                /* tokens per row probed (seq_max) */
    int      backward;           /* the peak operator runs in backward */
    char     op[40];             /* its name (the hooks' operator name) */
    int      op_index;           /* its index in the probed iteration */
    /* The most pinned host memory a swapping run of this configuration can hold: the peak over
     * the probed iteration of the host-pool size class (ss_hostpool_class_bytes) of every saved
     * buffer live at once (the executor keeps at most one host copy per saved block, whatever it
     * swaps); with MoE each per-expert buffer is charged 1.25 x its class + 4 KiB x ceil(E/K), which bounds
     * any routing of the same rows. A --host-mem cap at or above it cannot be reached. */
    uint64_t host_bytes;
    int      host_moe;           /* host_bytes carries the MoE routing bound */
    int      mode;               /* GPT_MODE_SMARTSWAP (the swapping modes), _NONE or _RECOMPUTE */
} gpt_min_budget;
int gpt_min_budget_probe(const gpt_config *c, const gpt_schedule *s, uint64_t min_swap, uint64_t unit,
                         gpt_min_budget *out, char *err, size_t errlen);
/* The same for one mode's run: smartswap and offload-all as above; none and recompute swap
 * nothing, so every saved tensor counts as resident, and recompute's iteration is probed in
 * recompute mode (its backward re-runs each layer's forward). gpt_min_budget_probe is the
 * swapping modes' figure. */
int gpt_min_budget_probe_mode(const gpt_config *c, const gpt_schedule *s, int mode, uint64_t min_swap,
                              uint64_t unit, gpt_min_budget *out, char *err, size_t errlen);
/* The smartswap hybrid's figure (swap or recompute per tensor): the larger of
 * gpt_min_budget_probe's and the same probe with every rebuildable save dropped at its save and
 * rebuilt in backward, as the hybrid does for what it plans to recompute. A rebuilt tensor is
 * held, not swappable, from its first load to its last save's release, and its sources are
 * loaded beside the operator that needs it: a working set the swap-only probe does not see
 * (measured: a 5-layer MoE 4:2 model at its swap-only figure ran out of memory at step 8 or 14
 * under the hybrid, and trained with --swap-only and offload-all). The host need is the larger
 * of the two. */
int gpt_min_budget_probe_hybrid(const gpt_config *c, const gpt_schedule *s, uint64_t min_swap, uint64_t unit,
                                gpt_min_budget *out, char *err, size_t errlen);
/* 0 if budget >= mb->min_budget_bytes; else 1 with the refusal (the figure, its parts, the
 * operator) in msg. `smartswap train` refuses such a budget before step 1. */
int gpt_min_budget_refuse(const gpt_min_budget *mb, uint64_t budget, char *msg, size_t len);
/* 0 if host_mem is 0 (no cap) or at least mb->host_bytes; else 1 with the refusal (the figure
 * and what it counts) in msg. `smartswap train` refuses such a cap in the swapping modes before
 * step 1, so that a capped run never runs out of host memory after training has started. */
int gpt_host_mem_refuse(const gpt_min_budget *mb, uint64_t host_mem, char *msg, size_t len);

#endif /* GPT_TRAIN_H */
