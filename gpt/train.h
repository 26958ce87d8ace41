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

#endif /* GPT_TRAIN_H */
