/* workload.h: the synthetic workload generator: one training iteration (forward, backward,
 * optimizer step) of a decoder-only transformer, operator by operator, as a detailed profile
 * (profile.h). `smartswap trace gen` writes it to a file; `smartswap simulate` and the tests
 * call it directly. What each operator saves, its FLOPs and the memory model are documented in
 * docs/trace-format.md ("Synthetic workloads") and at the top of workload.c.
 *
 *     ssi_workload_config c;
 *     ssi_workload_default(&c);
 *     ssi_workload_preset(&c, "llama-3.2-1b");    // dims; batch/seq/dtype stay as set
 *     c.batch = 4; c.seq = 2048;
 *     ss_profile *p; char err[256];
 *     if (ssi_workload_generate(&c, &p, NULL, err, sizeof err)) ... err says what is wrong
 */
#ifndef SS_WORKLOAD_H
#define SS_WORKLOAD_H

#include "profile.h"

typedef enum ssi_workload_arch {
    SSI_WORKLOAD_LLAMA = 0,   /* RMSNorm, RoPE, GQA, SwiGLU MLP, no biases */
    SSI_WORKLOAD_GPT2 = 1     /* LayerNorm, learned positions, MHA, GELU MLP, biases, tied head */
} ssi_workload_arch;

/* How the loss (LM head + cross-entropy) is computed. */
typedef enum ssi_workload_loss {
    SSI_WORKLOAD_LOSS_CHUNKED = 0, /* fused LM head + cross-entropy, one chunk of tokens at a time:
                                    * saves the final norm output and an f32 log-sum-exp per token;
                                    * backward recomputes each chunk's logits */
    SSI_WORKLOAD_LOSS_FULL = 1     /* the [b,s,V] logits, then cross-entropy saving f32 probabilities */
} ssi_workload_loss;

#define SSI_WORKLOAD_LOSS_CHUNK_DEFAULT 0u      /* 0: the trainer's rule, ssi_workload_loss_chunk */
#define SSI_WORKLOAD_LOSS_CHUNK_ALIGN 64u       /* the rule's chunks are multiples of it, at least it */
#define SSI_WORKLOAD_LOSS_CHUNK_MAX (1u << 24)

typedef struct ssi_workload_config {
    char     model[48];      /* preset name, or "custom" */
    uint32_t arch;           /* ssi_workload_arch */
    uint32_t layers, hidden, heads, kv_heads, ffn, vocab;
    uint32_t max_pos;        /* learned position embeddings (GPT-2); 0 = none */
    int      tied;           /* the LM head shares the embedding matrix */
    uint32_t batch, seq;     /* micro-batch and sequence length: tokens = batch * seq */
    uint32_t dtype_bytes;    /* activations and weights: 2 (bf16) or 4 (f32) */
    uint32_t moe_experts, moe_topk;  /* 0 = dense MLP; else E experts, K routed per token */
    int      flash;          /* 1: flash attention (no s^2 tensors); 0: naive softmax(QK^T)V */
    uint32_t loss;           /* ssi_workload_loss */
    uint32_t loss_chunk;     /* tokens per chunk of the chunked loss; 0: the trainer's rule; what
                              * is used is ssi_workload_loss_chunk (clamped to batch * seq) */
    double   device_flops;   /* effective FLOP/s and bytes/s for the per-op time estimate */
    double   device_bw;
} ssi_workload_config;

/* Defaults: no model dims (set a preset or explicit dims), batch 1, seq 2048, bf16, dense, flash
 * attention, chunked loss with loss_chunk 0 (the reference trainer's defaults: the chunk of
 * ssi_workload_loss_chunk's rule), 400 TFLOP/s and
 * 3 TB/s effective (an H200-class device at a realistic fraction of peak). */
void ssi_workload_default(ssi_workload_config *c);

/* Tokens per chunk of the chunked loss that c's iteration uses, the reference trainer's
 * gpt_loss_chunk (gpt/model.c) for a micro-batch of T = batch * seq tokens: c->loss_chunk if
 * set, else (0, the default) the largest multiple of 64 tokens whose [chunk, V] logits are no
 * larger than the [T, h] final hidden state, floor(T * h / V / 64) * 64, at least 64; either way
 * at most T. E.g. llama-3.2-1b at 8 x 2048: 16384 * 2048 / 128256 = 261.6 -> 256. Whatever the
 * loss mode (the full loss ignores it); 0 when batch, seq or vocab is 0 (an unset config). */
uint64_t ssi_workload_loss_chunk(const ssi_workload_config *c);

/* A model preset: dims and where they come from. */
typedef struct ssi_workload_preset_info {
    const char *name;
    uint32_t arch, layers, hidden, heads, kv_heads, ffn, vocab, max_pos;
    int tied;
    const char *source;      /* the config the numbers are taken from */
} ssi_workload_preset_info;

/* Preset i (0-based), or NULL past the last. */
const ssi_workload_preset_info *ssi_workload_preset_at(size_t i);
/* Sets c's model fields (name, arch, dims, tied, max_pos) from the named preset; the run fields
 * (batch, seq, dtype, moe, flash, loss, device) are left as they are. SS_ERR_NOT_FOUND if unknown. */
ss_status ssi_workload_preset(ssi_workload_config *c, const char *name);

/* Checks every field (dims divisible, within bounds, dtype 2 or 4, 1 <= K <= E, loss mode and
 * chunk); SS_ERR_INVALID with a message naming the field and its bounds. */
ss_status ssi_workload_validate(const ssi_workload_config *c, char *err, size_t err_len);

/* Parameter counts of a configuration. */
typedef struct ssi_workload_params {
    double total;            /* every parameter (all experts) */
    double active;           /* those one token uses (top-k experts, embedding, head) */
    double matmul;           /* active parameters used in matrix products: active minus the input
                              * embedding (a lookup) when the head is not tied, minus norms/biases.
                              * FLOPs of one iteration are ~ 6 * matmul * tokens + attention. */
    double embedding;        /* the token (and position) embedding tables */
} ssi_workload_params;
void ssi_workload_count_params(const ssi_workload_config *c, ssi_workload_params *out);

/* Categories of the generated tensors, for tests and `trace stats`. Per layer per token, in
 * bytes with d = dtype bytes: NORM 4hd (2 norm inputs + 2 norm outputs), QO 2hd (Q after RoPE,
 * attention output), KV 2*h_kv*d, MLP 4id (gate, up, silu(gate), product; GELU MLP: 2id;
 * MoE: K times that), ATTN_STATS 4a (flash log-sum-exp, f32), SCORES a*s*d (naive softmax
 * output), MOE 4E + 12K + 2Khd (router probabilities, top-k weights and indices, dispatched
 * inputs, expert outputs). Outside the layers, per token: LOSS 4 (chunked: the f32 log-sum-exp)
 * or 4V (full: the f32 probabilities); OTHER: token ids and targets (8 + 8), the final norm's
 * input (the last layer's output) and output (hd each). The info's layer of a tensor is the layer
 * whose norm reads it, so layer 0 holds the embedding's output and the last layer's output is in
 * no layer. */
typedef enum ssi_workload_cat {
    SSI_WL_NORM = 0, SSI_WL_QO, SSI_WL_KV, SSI_WL_MLP, SSI_WL_ATTN_STATS, SSI_WL_SCORES,
    SSI_WL_MOE, SSI_WL_LOSS, SSI_WL_OTHER, SSI_WL_TEMP, SSI_WL_CAT_COUNT
} ssi_workload_cat;
const char *ssi_workload_cat_name(uint32_t cat);

/* Optional side information about a generated profile (pass NULL when not needed). */
typedef struct ssi_workload_info {
    uint8_t *cat;            /* per tensor: ssi_workload_cat (malloc'ed) */
    int32_t *layer;          /* per tensor: its layer, or -1 outside the layers (malloc'ed) */
    uint32_t ntensors;
    ssi_workload_params params;
    double   attn_flops;     /* FLOPs of the attention products (QK^T, PV and their backward) */
} ssi_workload_info;
void ssi_workload_info_free(ssi_workload_info *info);   /* frees the arrays; NULL is fine */

/* Generates one training iteration as a finalized profile (*out, freed with ssi_profile_free):
 * desc, seq_hash and size_sig (as the light profiler computes them, stage.h), base_bytes (weights, gradients,
 * optimizer state), per op FLOPs, an estimated duration and mem_after (the unconstrained demand:
 * base + every tensor alive after the op). Returns SS_ERR_INVALID (message in err) for a bad
 * config or one whose tensors would exceed 2^60 bytes, SS_ERR_HOST_OOM. On failure *out and
 * info are untouched. */
ss_status ssi_workload_generate(const ssi_workload_config *c, ss_profile **out, ssi_workload_info *info,
                                char *err, size_t err_len);

#endif /* SS_WORKLOAD_H */
