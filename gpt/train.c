/* train.c: the reference trainer's schedule (train.h). */
#include "train.h"

#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int gpt_sched_seq(const gpt_schedule *s, int step, int micro) {
    if (s->seq_max <= s->seq_min) return s->seq_max;
    uint64_t r = mix(mix(mix(s->seed ^ 0x5E9u) ^ (uint64_t)step) ^ ((uint64_t)micro << 32));
    return s->seq_min + (int)(r % (uint64_t)(s->seq_max - s->seq_min + 1));
}

int gpt_batch_buf_init(gpt_batch_buf *b, const gpt_schedule *s) {
    size_t n = (size_t)s->batch * (size_t)s->seq_max;
    b->tok = malloc(n * sizeof *b->tok);
    b->tgt = malloc(n * sizeof *b->tgt);
    if (!b->tok || !b->tgt) { gpt_batch_buf_free(b); return 1; }
    return 0;
}

void gpt_batch_buf_free(gpt_batch_buf *b) {
    free(b->tok);
    free(b->tgt);
    b->tok = b->tgt = NULL;
}

int gpt_train_step(gpt_model *m, const gpt_data *d, const gpt_schedule *s, int step, gpt_batch_buf *b,
                   float *loss) {
    int N = s->accum < 1 ? 1 : s->accum;
    if (gpt_step_begin(m, step)) return 1;
    float sum = 0.0f;
    int rc = 0;
    for (int j = 0; j < N && !rc; j++) {
        int T = gpt_sched_seq(s, step, j);
        float l = 0.0f;
        gpt_data_batch(d, s->seed, step * N + j, s->batch, T, b->tok, b->tgt);
        rc = gpt_step_micro(m, b->tok, b->tgt, s->batch, T, 1.0f / (float)N, &l);
        sum += l;
    }
    if (!rc) rc = gpt_step_update(m, s->lr);
    char msg[sizeof m->errmsg];
    memcpy(msg, m->errmsg, sizeof msg);
    int rc2 = gpt_step_end(m);
    if (rc) { m->err = 1; memcpy(m->errmsg, msg, sizeof msg); return 1; }
    if (rc2) return 1;
    *loss = sum / (float)N;
    return 0;
}

int gpt_eval_step(gpt_model *m, const gpt_data *d, const gpt_schedule *s, int k, int iter, gpt_batch_buf *b,
                  float *loss) {
    if (gpt_step_begin(m, iter)) return 1;
    gpt_data_batch(d, s->seed ^ GPT_EVAL_SALT, k, s->batch, s->seq_max, b->tok, b->tgt);
    int rc = gpt_step_eval(m, b->tok, b->tgt, s->batch, s->seq_max, loss);
    char msg[sizeof m->errmsg];
    memcpy(msg, m->errmsg, sizeof msg);
    int rc2 = gpt_step_end(m);
    if (rc) { m->err = 1; memcpy(m->errmsg, msg, sizeof msg); return 1; }
    return rc2;
}
