/* test-workload.c: the synthetic workload generator (src/workload.c) against the formulas of
 * research/trainer-workload.md section 5: saved bytes per layer per token, category by category
 * (norm inputs and outputs 8h, Q and attention output 4h, K and V 4h_kv, MLP 8i, in bf16 with flash
 * attention), the a*s^2 score tensors without flash, GQA and MoE; FLOPs against
 * 6 * params * tokens + attention; parameter counts of the presets; the memory model; the
 * chunked loss (the default) against --loss full, and its chunk: the reference trainer's rule.
 */
#include "test.h"
#include "workload.h"
#include "trace.h"
#include "stage.h"

#include <math.h>

static ss_profile *gen(const ssi_workload_config *c, ssi_workload_info *info) {
    ss_profile *p = NULL;
    char err[256] = "";
    ss_status st = ssi_workload_generate(c, &p, info, err, sizeof err);
    CHECK_MSG(st == SS_OK && p, "generate: %s (%s)", ss_status_str(st), err);
    return st ? NULL : p;
}

static ssi_workload_config preset(const char *name, uint32_t b, uint32_t s) {
    ssi_workload_config c;
    ssi_workload_default(&c);
    CHECK_OK(ssi_workload_preset(&c, name));
    c.batch = b;
    c.seq = s;
    return c;
}

/* bytes of saved tensors of category cat in layer l */
static uint64_t cat_bytes(const ss_profile *p, const ssi_workload_info *in, int l, uint32_t cat) {
    uint64_t n = 0;
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (in->layer[t] == l && in->cat[t] == cat) {
            CHECK(p->tensors[t].flags & SS_TENSOR_SAVED);
            n += p->tensors[t].bytes;
        }
    return n;
}

static uint64_t saved_in_layer(const ss_profile *p, const ssi_workload_info *in, int l) {
    uint64_t n = 0;
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (in->layer[t] == l && (p->tensors[t].flags & SS_TENSOR_SAVED)) n += p->tensors[t].bytes;
    return n;
}

/* Checks every layer of a Llama-style config against the formula, category by category. */
static void check_llama_layers(const ssi_workload_config *c) {
    ssi_workload_info in;
    memset(&in, 0, sizeof in);
    ss_profile *p = gen(c, &in);
    if (!p) return;
    uint64_t s = c->seq, b = c->batch, h = c->hidden, a = c->heads, i = c->ffn;
    uint64_t hkv = h / a * c->kv_heads, tok = s * b, d = c->dtype_bytes;
    uint64_t K = c->moe_experts ? c->moe_topk : 1, E = c->moe_experts;
    int bad = 0;
    for (int l = 0; l < (int)c->layers; l++) {
        uint64_t norm = cat_bytes(p, &in, l, SSI_WL_NORM), qo = cat_bytes(p, &in, l, SSI_WL_QO);
        uint64_t kv = cat_bytes(p, &in, l, SSI_WL_KV), mlp = cat_bytes(p, &in, l, SSI_WL_MLP);
        uint64_t st = cat_bytes(p, &in, l, SSI_WL_ATTN_STATS), sc = cat_bytes(p, &in, l, SSI_WL_SCORES);
        uint64_t moe = cat_bytes(p, &in, l, SSI_WL_MOE), all = saved_in_layer(p, &in, l);
        /* the formula's terms, for d = 2: 8h, 4h, 4h_kv, 8i per token */
        uint64_t want_norm = tok * 4 * h * d, want_qo = tok * 2 * h * d, want_kv = tok * 2 * hkv * d;
        uint64_t want_mlp = tok * K * 4 * i * d;
        uint64_t want_st = c->flash ? tok * a * 4 : 0;
        uint64_t want_sc = c->flash ? 0 : b * a * s * s * d;
        uint64_t want_moe = E ? tok * (4 * E + 4 * K + 8 * K + 2 * K * h * d) : 0;
        if (norm != want_norm || qo != want_qo || kv != want_kv || mlp != want_mlp || st != want_st ||
            sc != want_sc || moe != want_moe || all != want_norm + want_qo + want_kv + want_mlp + want_st + want_sc + want_moe)
            bad++;
        if (l == 0 || l == (int)c->layers - 1) {
            CHECK_EQ_U64(norm, want_norm);
            CHECK_EQ_U64(qo, want_qo);
            CHECK_EQ_U64(kv, want_kv);
            CHECK_EQ_U64(mlp, want_mlp);
            CHECK_EQ_U64(st, want_st);
            CHECK_EQ_U64(sc, want_sc);
            CHECK_EQ_U64(moe, want_moe);
            CHECK_EQ_U64(all, want_norm + want_qo + want_kv + want_mlp + want_st + want_sc + want_moe);
        }
    }
    CHECK_EQ_INT(bad, 0);
    if (d == 2 && !E) {
        /* the formula itself, per layer per token: 12h + 4h_kv + 8i (+ lse / scores) */
        uint64_t per_tok = (saved_in_layer(p, &in, 0) - (c->flash ? tok * a * 4 : b * a * s * s * d)) / tok;
        CHECK_EQ_U64(per_tok, 12 * h + 4 * hkv + 8 * i);
    }
    ssi_workload_info_free(&in);
    ssi_profile_free(p);
}

static void t_llama_2_7b_flash(void) {
    ssi_workload_config c = preset("llama-2-7b", 2, 128);
    check_llama_layers(&c);
    /* 37.5h per token per layer for Llama-2-7B (research/trainer-workload.md) */
    CHECK_EQ_U64(12 * 4096 + 4 * 4096 + 8 * 11008, 153600);
    CHECK(153600 == 37.5 * 4096);
}

static void t_llama_no_flash(void) {
    ssi_workload_config c = preset("llama-2-7b", 1, 256);
    c.flash = 0;
    check_llama_layers(&c);
    /* the a*s^2*b score tensor in one layer: 32 * 256^2 * 2 bytes */
    ssi_workload_info in;
    memset(&in, 0, sizeof in);
    ss_profile *p = gen(&c, &in);
    if (p) CHECK_EQ_U64(cat_bytes(p, &in, 3, SSI_WL_SCORES), 32ull * 256 * 256 * 2);
    ssi_workload_info_free(&in);
    ssi_profile_free(p);
}

static void t_gqa(void) {
    ssi_workload_config c = preset("llama-3.2-1b", 3, 96);
    check_llama_layers(&c);
    c = preset("llama-3-8b", 1, 64);
    check_llama_layers(&c);
    c = preset("llama-2-70b", 1, 32);
    c.flash = 0;
    check_llama_layers(&c);
    /* K and V of Llama-3.2-1B: h_kv = 2048/32*8 = 512: 4*512 bytes per token */
    ssi_workload_info in;
    memset(&in, 0, sizeof in);
    c = preset("llama-3.2-1b", 1, 100);
    ss_profile *p = gen(&c, &in);
    if (p) CHECK_EQ_U64(cat_bytes(p, &in, 0, SSI_WL_KV), 100ull * 4 * 512);
    ssi_workload_info_free(&in);
    ssi_profile_free(p);
}

static void t_moe(void) {
    ssi_workload_config c;
    ssi_workload_default(&c);
    c.layers = 4; c.hidden = 512; c.heads = 8; c.kv_heads = 2; c.ffn = 1024; c.vocab = 1000;
    c.batch = 2; c.seq = 64; c.moe_experts = 8; c.moe_topk = 2;
    check_llama_layers(&c);
    c.flash = 0;
    check_llama_layers(&c);
    c.flash = 1; c.moe_experts = 64; c.moe_topk = 6; c.dtype_bytes = 4;
    check_llama_layers(&c);
    /* MLP: K * 8i per token in bf16 */
    ssi_workload_info in;
    memset(&in, 0, sizeof in);
    c.dtype_bytes = 2; c.moe_experts = 8; c.moe_topk = 2;
    ss_profile *p = gen(&c, &in);
    if (p) CHECK_EQ_U64(cat_bytes(p, &in, 1, SSI_WL_MLP), 128ull * 2 * 8 * 1024);
    ssi_workload_info_free(&in);
    ssi_profile_free(p);
}

static void t_gpt2(void) {
    ssi_workload_config c = preset("gpt2-124m", 4, 256);
    ssi_workload_info in;
    memset(&in, 0, sizeof in);
    ss_profile *p = gen(&c, &in);
    if (!p) return;
    uint64_t tok = 1024, h = 768, i = 3072;
    for (int l = 0; l < 12; l++) {
        CHECK_EQ_U64(cat_bytes(p, &in, l, SSI_WL_NORM), tok * 8 * h);
        CHECK_EQ_U64(cat_bytes(p, &in, l, SSI_WL_QO), tok * 4 * h);
        CHECK_EQ_U64(cat_bytes(p, &in, l, SSI_WL_KV), tok * 4 * h);
        CHECK_EQ_U64(cat_bytes(p, &in, l, SSI_WL_MLP), tok * 4 * i);   /* fc out, gelu out */
    }
    ssi_workload_info_free(&in);
    ssi_profile_free(p);
}

static void t_params(void) {
    static const struct { const char *name; double params; } want[] = {
        {"gpt2-124m", 124439808}, {"llama-3.2-1b", 1235814400}, {"llama-2-7b", 6738415616},
        {"llama-3-8b", 8030261248}, {"llama-2-13b", 13015864320}, {"llama-2-70b", 68976648192},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        ssi_workload_config c = preset(want[k].name, 1, 64);
        ssi_workload_params P;
        ssi_workload_count_params(&c, &P);
        CHECK_MSG(P.total == want[k].params, "%s: %.0f params, wanted %.0f", want[k].name, P.total, want[k].params);
    }
    size_t n = 0;
    while (ssi_workload_preset_at(n)) {
        CHECK(ssi_workload_preset_at(n)->source && *ssi_workload_preset_at(n)->source);
        n++;
    }
    CHECK(n >= 6);
    ssi_workload_config c;
    ssi_workload_default(&c);
    CHECK_STATUS(ssi_workload_preset(&c, "llama-9000"), SS_ERR_NOT_FOUND);
}

/* total FLOPs ~ 6 * matmul params * tokens + attention, within 1% */
static void check_flops(const ssi_workload_config *c, double attn_per_layer_coef) {
    ssi_workload_info in;
    memset(&in, 0, sizeof in);
    ss_profile *p = gen(c, &in);
    if (!p) return;
    ssi_profile_stats s;
    ssi_profile_stats_get(p, &s);
    double T = (double)c->batch * c->seq;
    double attn = attn_per_layer_coef * c->layers * c->batch * (double)c->seq * c->seq * c->hidden;
    /* the chunked loss computes the logits twice (forward, and again in its backward) */
    double relogits = c->loss == SSI_WORKLOAD_LOSS_CHUNKED ? 2 * T * c->hidden * (double)c->vocab : 0;
    double want = 6 * in.params.matmul * T + attn + relogits;
    CHECK_MSG(fabs(s.flops / want - 1) < 0.01, "%s: %.4g FLOPs vs 6*P*T + attention = %.4g (%.2f%%)",
              c->model, s.flops, want, 100 * (s.flops / want - 1));
    CHECK_MSG(fabs(in.attn_flops / attn - 1) < 1e-12, "%s: attention %.6g vs %.6g", c->model, in.attn_flops, attn);
    /* forward is a third of the matmul work: 2PT of 6PT */
    double fwd_attn = attn * (c->flash ? 2.0 : 4.0) / attn_per_layer_coef;
    CHECK_MSG(fabs(s.flops_phase[SS_PHASE_FWD] / (2 * in.params.matmul * T + fwd_attn) - 1) < 0.01,
              "%s: forward %.4g", c->model, s.flops_phase[SS_PHASE_FWD]);
    ssi_workload_info_free(&in);
    ssi_profile_free(p);
}

static void t_flops(void) {
    ssi_workload_config c = preset("llama-2-7b", 1, 4096);
    check_flops(&c, 7);            /* flash: 2 forward + 5 backward (recompute), causal */
    c.flash = 0;
    check_flops(&c, 12);           /* eager: 4 forward + 8 backward, full matrices */
    c = preset("llama-3.2-1b", 4, 2048);
    check_flops(&c, 7);
    c = preset("gpt2-124m", 8, 1024);
    check_flops(&c, 7);
    c = preset("llama-3-8b", 2, 1024);
    c.moe_experts = 8; c.moe_topk = 2;
    check_flops(&c, 7);
    c.loss = SSI_WORKLOAD_LOSS_FULL;
    check_flops(&c, 7);
    c = preset("gpt2-124m", 8, 1024);
    c.loss = SSI_WORKLOAD_LOSS_FULL;
    check_flops(&c, 7);
    /* and against 6 * all params * tokens for a tied model, where every parameter but the
     * position-free embedding lookup is a matmul weight: within 1% + attention (+ the chunked
     * loss's second pass over the logits, 2ThV) */
    for (int full = 0; full < 2; full++) {
        c = preset("llama-3.2-1b", 8, 1024);
        c.loss = full ? SSI_WORKLOAD_LOSS_FULL : SSI_WORKLOAD_LOSS_CHUNKED;
        ssi_workload_info in;
        memset(&in, 0, sizeof in);
        ss_profile *p = gen(&c, &in);
        if (p) {
            ssi_profile_stats s;
            ssi_profile_stats_get(p, &s);
            double T = 8192, want = 6 * in.params.total * T + 7.0 * 16 * 8 * 1024.0 * 1024 * 2048 +
                                    (full ? 0 : 2 * T * 2048 * 128256.0);
            CHECK_MSG(fabs(s.flops / want - 1) < 0.01, "%s loss: %.4g vs %.4g", full ? "full" : "chunked", s.flops, want);
        }
        ssi_workload_info_free(&in);
        ssi_profile_free(p);
    }
}

/* Shapes, bytes, phases, releases and mem_after recomputed independently on a small config. */
static void t_invariants(void) {
    ssi_workload_config c;
    ssi_workload_default(&c);
    c.layers = 3; c.hidden = 256; c.heads = 4; c.kv_heads = 2; c.ffn = 640; c.vocab = 512;
    c.batch = 2; c.seq = 32;
    for (int mode = 0; mode < 6; mode++) {
        c.flash = mode % 3 != 1;
        c.moe_experts = mode % 3 == 2 ? 4 : 0;
        c.moe_topk = mode % 3 == 2 ? 2 : 0;
        c.loss = mode < 3 ? SSI_WORKLOAD_LOSS_CHUNKED : SSI_WORKLOAD_LOSS_FULL;
        c.loss_chunk = 24;   /* 64 tokens: the last chunk is partial */
        ssi_workload_info in;
        memset(&in, 0, sizeof in);
        ss_profile *p = gen(&c, &in);
        if (!p) return;
        char err[200];
        CHECK_OK(ssi_profile_check(p, err, sizeof err));
        int bad_bytes = 0, bad_mem = 0, bad_phase = 0, bad_release = 0;
        for (uint32_t t = 0; t < p->ntensors; t++) {
            const ss_prof_tensor *x = &p->tensors[t];
            uint64_t n = ssi_dtype_size(x->dtype);
            for (uint32_t k = 0; k < x->ndim; k++) n *= (uint64_t)x->shape[k];
            if (n != x->bytes) bad_bytes++;
            /* released at the last use; saved ones are used in backward */
            uint32_t last = x->nuses ? p->uses[x->use_off + x->nuses - 1] : x->producer;
            if (x->release != last) bad_release++;
            if ((x->flags & SS_TENSOR_SAVED) && p->ops[last].phase != SS_PHASE_BWD) bad_release++;
            if ((in.cat[t] == SSI_WL_TEMP) == ((x->flags & SS_TENSOR_SAVED) != 0)) bad_release++;
        }
        uint32_t prev = 0;
        for (uint32_t j = 0; j < p->nops; j++) {
            uint64_t alive = 0;
            for (uint32_t t = 0; t < p->ntensors; t++)
                if (p->tensors[t].producer <= j && p->tensors[t].release > j) alive += p->tensors[t].bytes;
            if (p->ops[j].mem_after != p->base_bytes + alive) bad_mem++;
            if (p->ops[j].phase < prev) bad_phase++;
            prev = p->ops[j].phase;
            if (!(p->ops[j].seconds > 0)) bad_phase++;
        }
        CHECK_EQ_INT(bad_bytes, 0);
        CHECK_EQ_INT(bad_release, 0);
        CHECK_EQ_INT(bad_mem, 0);
        CHECK_EQ_INT(bad_phase, 0);
        /* after the loss (the last forward op) exactly the saved tensors are alive */
        ssi_profile_stats s;
        ssi_profile_stats_get(p, &s);
        uint32_t last_fwd = s.ops_phase[SS_PHASE_FWD] - 1;
        CHECK(!strcmp(p->names[p->ops[last_fwd].name], mode < 3 ? "chunked_xent" : "cross_entropy"));
        CHECK_EQ_U64(p->ops[last_fwd].mem_after, p->base_bytes + s.saved_bytes);
        CHECK_EQ_U64(s.max_saved_alive_bytes, s.saved_bytes);
        CHECK(s.peak_activation_bytes >= s.saved_bytes);
        /* 16 bytes per parameter of static state */
        ssi_workload_params P;
        ssi_workload_count_params(&c, &P);
        CHECK_EQ_U64(p->base_bytes, (uint64_t)(16 * P.total));
        CHECK_EQ_U64(s.ops_phase[SS_PHASE_OPT], c.layers + 1);
        /* the sequence hash is the light profiler's fold over the ops */
        uint64_t hsh = SSI_SEQ_SEED;
        for (uint32_t j = 0; j < p->nops; j++) hsh = ssi_seq_step(hsh, ssi_hash_str(p->names[p->ops[j].name]), p->ops[j].site);
        CHECK_EQ_U64(hsh, p->seq_hash);
        CHECK_EQ_U64(p->size_sig, ssi_size_sig(s.saved_bytes));
        CHECK(p->iter_seconds > 0 && fabs(p->iter_seconds - s.op_seconds) < 1e-9 * s.op_seconds);
        ssi_workload_info_free(&in);
        ssi_profile_free(p);
    }
}

static void t_deterministic(void) {
    ssi_workload_config c = preset("llama-3.2-1b", 2, 512);
    ss_profile *a = gen(&c, NULL), *b = gen(&c, NULL);
    if (a && b) {
        CHECK(ssi_profile_equal(a, b));
        CHECK(a->seq_hash == b->seq_hash);
    }
    /* a different size keeps the sequence (same hash) but not the size signature */
    c.seq = 1024;
    ss_profile *d = gen(&c, NULL);
    if (a && d) {
        CHECK_EQ_U64(a->seq_hash, d->seq_hash);
        CHECK(a->size_sig != d->size_sig);
    }
    ssi_profile_free(a);
    ssi_profile_free(b);
    ssi_profile_free(d);
}

/* index of the only op named `name`, SS_NONE when absent; *count = how many there are */
static uint32_t find_op(const ss_profile *p, const char *name, uint32_t *count) {
    uint32_t at = SS_NONE, n = 0;
    for (uint32_t j = 0; j < p->nops; j++)
        if (!strcmp(p->names[p->ops[j].name], name)) { at = j; n++; }
    if (count) *count = n;
    return at;
}

/* The chunked loss (the default): one forward and one backward operator whatever the tokens,
 * saving the final norm output and an f32 log-sum-exp per token; one chunk's logits alive only
 * inside the forward op, a chunk's logits and their gradient inside the backward op; FLOPs as
 * documented. --loss full keeps the [b,s,V] logits and probabilities. */
static void t_chunked_loss(void) {
    ssi_workload_config c = preset("llama-3.2-1b", 2, 1024);
    CHECK_EQ_INT(c.loss, SSI_WORKLOAD_LOSS_CHUNKED);
    CHECK_EQ_U64(c.loss_chunk, 0);                /* the trainer's rule */
    const uint64_t Cc = 64;                       /* 2048 x 2048 / 128256 = 32.7 tokens: the floor, 64 */
    CHECK_EQ_U64(ssi_workload_loss_chunk(&c), Cc);
    CHECK(c.flash);
    ssi_workload_info in;
    memset(&in, 0, sizeof in);
    ss_profile *p = gen(&c, &in);
    if (!p) return;
    uint64_t T = 2048, h = 2048, V = 128256;
    double Td = (double)T, hd = (double)h, Vd = (double)V;
    uint32_t nf, nb, nl, nc;
    uint32_t f = find_op(p, "chunked_xent", &nf), b = find_op(p, "chunked_xent_bwd", &nb);
    find_op(p, "lm_head", &nl);
    find_op(p, "cross_entropy", &nc);
    CHECK(nf == 1 && nb == 1 && nl == 0 && nc == 0);
    if (f == SS_NONE || b == SS_NONE) { ssi_workload_info_free(&in); ssi_profile_free(p); return; }
    CHECK_EQ_INT(p->ops[f].phase, SS_PHASE_FWD);
    CHECK_EQ_INT(p->ops[b].phase, SS_PHASE_BWD);
    CHECK_EQ_U64(b, f + 1);                       /* the forward's last op, the backward's first */
    CHECK_NEAR(p->ops[f].flops, 2 * Td * hd * Vd + 5 * Td * Vd, 1);
    CHECK_NEAR(p->ops[b].flops, 6 * Td * hd * Vd + 4 * Td * Vd, 1);
    /* what the two ops produce */
    uint64_t loss_saved = 0, fwd_temp = 0, bwd_temp = 0;
    int lse_ok = 0, nfwd_temp = 0, nbwd_temp = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) {
        const ss_prof_tensor *x = &p->tensors[t];
        if (in.cat[t] == SSI_WL_LOSS) {
            loss_saved += x->bytes;
            lse_ok = x->producer == f && x->dtype == SS_DTYPE_F32 && x->ndim == 2 && x->shape[0] == 2 &&
                     x->shape[1] == 1024 && (x->flags & SS_TENSOR_SAVED) && x->release == b;
        }
        if (x->producer == f && !(x->flags & SS_TENSOR_SAVED)) {
            nfwd_temp++;
            fwd_temp += x->bytes;
            CHECK_EQ_U64(x->release, f);           /* alive during the op only */
            CHECK(x->ndim == 2 && x->shape[0] == (int64_t)Cc && x->shape[1] == (int64_t)V);
        }
        if (x->producer == b && !(x->flags & SS_TENSOR_SAVED)) { nbwd_temp++; bwd_temp += x->bytes; }
    }
    CHECK(lse_ok);
    CHECK_EQ_U64(loss_saved, 4 * T);
    CHECK_EQ_INT(nfwd_temp, 1);
    CHECK_EQ_U64(fwd_temp, Cc * V * 2);
    CHECK_EQ_INT(nbwd_temp, 3);                   /* d hf [b,s,h], a chunk's logits and their gradient */
    CHECK_EQ_U64(bwd_temp, 2 * Cc * V * 2 + T * h * 2);
    /* saved outside the layers: tokens, targets (8 each), last layer output, final norm output (2h each), lse */
    uint64_t outside = 0;
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (in.layer[t] < 0 && (p->tensors[t].flags & SS_TENSOR_SAVED)) outside += p->tensors[t].bytes;
    CHECK_EQ_U64(outside, T * (16 + 4 * h + 4));
    CHECK(strstr(p->desc, "flash loss=chunked:64") != NULL);
    ssi_profile_stats s;
    ssi_profile_stats_get(p, &s);
    /* the same structure for any batch x seq, and for a chunk larger than the tokens */
    ssi_workload_config c2 = preset("llama-3.2-1b", 1, 100);
    c2.loss_chunk = 4096;
    ss_profile *q = gen(&c2, NULL);
    if (q) {
        CHECK_EQ_U64(q->nops, p->nops);
        CHECK_EQ_U64(q->seq_hash, p->seq_hash);
        uint32_t qf = find_op(q, "chunked_xent", NULL);
        for (uint32_t t = 0; t < q->ntensors; t++)
            if (qf != SS_NONE && q->tensors[t].producer == qf && !(q->tensors[t].flags & SS_TENSOR_SAVED))
                CHECK_EQ_U64(q->tensors[t].shape[0], 100);   /* min(chunk, tokens) */
        CHECK(strstr(q->desc, "flash loss=chunked:100") != NULL);   /* the chunk used */
    }
    ssi_profile_free(q);
    /* --loss full: the [b,s,V] logits temporary, f32 probabilities saved, two ops each way */
    c.loss = SSI_WORKLOAD_LOSS_FULL;
    ssi_workload_info inf;
    memset(&inf, 0, sizeof inf);
    ss_profile *r = gen(&c, &inf);
    if (r) {
        uint32_t n1, n2, n3, n4;
        find_op(r, "lm_head", &n1); find_op(r, "cross_entropy", &n2);
        find_op(r, "cross_entropy_bwd", &n3); find_op(r, "lm_head_bwd", &n4);
        CHECK(n1 == 1 && n2 == 1 && n3 == 1 && n4 == 1);
        find_op(r, "chunked_xent", &n1);
        CHECK_EQ_INT(n1, 0);
        uint64_t probs = 0;
        for (uint32_t t = 0; t < r->ntensors; t++) if (inf.cat[t] == SSI_WL_LOSS) probs += r->tensors[t].bytes;
        CHECK_EQ_U64(probs, 4 * T * V);
        CHECK_EQ_U64(r->nops, p->nops + 2);
        CHECK(strstr(r->desc, "flash loss=full") != NULL);
        ssi_profile_stats sf;
        ssi_profile_stats_get(r, &sf);
        /* the loss no longer dominates: the full model's demand is above the chunked one's by
         * the probabilities minus the lse at least */
        CHECK(sf.peak_activation_bytes >= s.peak_activation_bytes + 4 * T * V - 4 * T);
        CHECK_EQ_U64(sf.saved_bytes - s.saved_bytes, 4 * T * V - 4 * T);
    }
    ssi_workload_info_free(&inf);
    ssi_profile_free(r);
    ssi_workload_info_free(&in);
    ssi_profile_free(p);
}

/* The chunk of the chunked loss is the reference trainer's (gpt_loss_chunk, gpt/model.c): with
 * loss_chunk 0 (the default) the largest multiple of 64 tokens whose [chunk, V] logits are no
 * larger than the [T, h] final hidden state, at least 64, at most T; an explicit chunk is kept,
 * clamped to T. The generated chunk tensors and the desc use it. */
static void t_loss_chunk_rule(void) {
    static const struct { const char *model; uint32_t b, s, chunk; uint64_t want; } cases[] = {
        {"llama-3.2-1b", 8, 2048, 0, 256},    /* 16384 x 2048 / 128256 = 261.6 */
        {"llama-2-7b", 1, 4096, 0, 512},      /* 4096 x 4096 / 32000 = 524.3 */
        {"llama-2-7b", 4, 4096, 0, 2048},     /* 2097.2 */
        {"llama-3.2-1b", 2, 1024, 0, 64},     /* 32.7: the floor */
        {"gpt2-124m", 1, 32, 0, 32},          /* fewer tokens than the floor: all of them */
        {"llama-3.2-1b", 8, 2048, 100, 100},  /* explicit: kept, not rounded */
        {"llama-3.2-1b", 1, 100, 4096, 100},  /* explicit: clamped to the tokens */
        {"llama-2-7b", 1, 4096, 1, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ssi_workload_config c = preset(cases[k].model, cases[k].b, cases[k].s);
        c.loss_chunk = cases[k].chunk;
        uint64_t got = ssi_workload_loss_chunk(&c), T = (uint64_t)c.batch * c.seq;
        CHECK_MSG(got == cases[k].want, "%s %ux%u chunk %u: %llu, want %llu", cases[k].model, c.batch, c.seq,
                  cases[k].chunk, (unsigned long long)got, (unsigned long long)cases[k].want);
        CHECK(got <= T && (got * c.vocab <= T * c.hidden || got == 64 || got == T || cases[k].chunk));
        c.loss = SSI_WORKLOAD_LOSS_FULL;   /* the same number whatever the mode */
        CHECK_EQ_U64(ssi_workload_loss_chunk(&c), got);
    }
    /* the rule's definition on a tiny config and on a sweep of token counts: a multiple of 64, its
     * logits within the hidden state, the next multiple's not (unless at the floor or the tokens) */
    ssi_workload_config c;
    ssi_workload_default(&c);
    c.layers = 1; c.hidden = 64; c.heads = 4; c.kv_heads = 2; c.ffn = 128; c.vocab = 1000;
    c.batch = 2; c.seq = 64;
    CHECK_EQ_U64(ssi_workload_loss_chunk(&c), 64);   /* 128 x 64 / 1000 = 8 */
    c.vocab = 64;
    for (uint32_t s = 1; s <= 3000; s += 7) {
        c.batch = 1; c.seq = s;
        uint64_t ch = ssi_workload_loss_chunk(&c);
        CHECK_MSG(ch >= 1 && ch <= s, "seq %u: chunk %llu", s, (unsigned long long)ch);
        if (ch < s) CHECK_MSG(ch % 64 == 0 && (ch == 64 || ch * c.vocab <= (uint64_t)s * c.hidden) &&
                              (ch + 64) * c.vocab > (uint64_t)s * c.hidden, "seq %u: chunk %llu", s,
                              (unsigned long long)ch);
    }
    c.vocab = 0;                                     /* an unset config */
    CHECK_EQ_U64(ssi_workload_loss_chunk(&c), 0);
    CHECK_EQ_U64(ssi_workload_loss_chunk(NULL), 0);
    /* the generated profile uses it: the chunk tensors and the desc */
    ssi_workload_config g = preset("llama-3.2-1b", 8, 2048);
    ss_profile *p = gen(&g, NULL);
    if (p) {
        uint32_t f = find_op(p, "chunked_xent", NULL), n = 0;
        for (uint32_t t = 0; t < p->ntensors; t++)
            if (f != SS_NONE && p->tensors[t].producer == f && !(p->tensors[t].flags & SS_TENSOR_SAVED)) {
                CHECK_EQ_U64(p->tensors[t].shape[0], 256);
                CHECK_EQ_U64(p->tensors[t].shape[1], 128256);
                n++;
            }
        CHECK_EQ_INT(n, 1);
        CHECK_MSG(strstr(p->desc, " flash loss=chunked:256") != NULL, "%s", p->desc);
    }
    ssi_profile_free(p);
}

static void t_bad_config(void) {
    char err[256];
    ss_profile *p = NULL;
    ssi_workload_config c = preset("llama-2-7b", 1, 64);
    c.layers = 0;
    CHECK_STATUS(ssi_workload_generate(&c, &p, NULL, err, sizeof err), SS_ERR_INVALID);
    CHECK_MSG(strstr(err, "layers"), "%s", err);
    c = preset("llama-2-7b", 1, 64);
    c.heads = 33;
    CHECK_STATUS(ssi_workload_generate(&c, &p, NULL, err, sizeof err), SS_ERR_INVALID);
    CHECK_MSG(strstr(err, "multiple of heads"), "%s", err);
    c = preset("llama-2-7b", 1, 64);
    c.kv_heads = 5;
    CHECK_STATUS(ssi_workload_generate(&c, &p, NULL, err, sizeof err), SS_ERR_INVALID);
    c = preset("llama-2-7b", 1, 64);
    c.dtype_bytes = 3;
    CHECK_STATUS(ssi_workload_generate(&c, &p, NULL, err, sizeof err), SS_ERR_INVALID);
    CHECK_MSG(strstr(err, "dtype"), "%s", err);
    c = preset("llama-2-7b", 1, 64);
    c.moe_experts = 4; c.moe_topk = 5;
    CHECK_STATUS(ssi_workload_generate(&c, &p, NULL, err, sizeof err), SS_ERR_INVALID);
    CHECK_MSG(strstr(err, "top-k"), "%s", err);
    c = preset("gpt2-124m", 1, 2048);   /* beyond its 1024 positions */
    CHECK_STATUS(ssi_workload_generate(&c, &p, NULL, err, sizeof err), SS_ERR_INVALID);
    /* a score matrix beyond 2^60 bytes: 64 heads * (2^22)^2 * 2^16 batch */
    c = preset("llama-2-70b", 1u << 16, 1u << 22);
    c.flash = 0;
    c.layers = 1;
    CHECK_STATUS(ssi_workload_generate(&c, &p, NULL, err, sizeof err), SS_ERR_INVALID);
    CHECK_MSG(strstr(err, "too large"), "%s", err);
    c = preset("llama-2-7b", 1, 64);
    c.loss = 2;
    CHECK_STATUS(ssi_workload_generate(&c, &p, NULL, err, sizeof err), SS_ERR_INVALID);
    CHECK_MSG(strstr(err, "chunked or full"), "%s", err);
    c = preset("llama-2-7b", 1, 64);
    c.loss_chunk = SSI_WORKLOAD_LOSS_CHUNK_MAX + 1;   /* 0 is the trainer's rule, valid */
    CHECK_STATUS(ssi_workload_generate(&c, &p, NULL, err, sizeof err), SS_ERR_INVALID);
    CHECK_MSG(strstr(err, "loss-chunk") && strstr(err, "[0, "), "%s", err);
    c.loss = SSI_WORKLOAD_LOSS_FULL;   /* the chunk does not matter with the full loss */
    CHECK_OK(ssi_workload_generate(&c, &p, NULL, err, sizeof err));
    ssi_profile_free(p);
    p = NULL;
    CHECK(p == NULL);
}

int main(void) {
    RUN(t_llama_2_7b_flash);
    RUN(t_llama_no_flash);
    RUN(t_gqa);
    RUN(t_moe);
    RUN(t_gpt2);
    RUN(t_params);
    RUN(t_flops);
    RUN(t_invariants);
    RUN(t_deterministic);
    RUN(t_chunked_loss);
    RUN(t_loss_chunk_rule);
    RUN(t_bad_config);
    return test_summary();
}
