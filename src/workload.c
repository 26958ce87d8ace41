/* workload.c: the synthetic decoder-transformer workload of workload.h: one training iteration,
 * operator by operator, built into a profile through the profile.h container.
 *
 * Model of one iteration (b = batch, s = seq, T = b*s tokens, h = hidden, a = heads, h_kv =
 * kv_heads*h/a, i = ffn, V = vocab, d = dtype bytes). Tensors marked (S) are saved for backward,
 * the others are temporaries; every tensor lives from the operator that produces it to its last
 * use (forward or backward).
 *
 *   embed            tokens, targets (i64 [b,s], S), x0 [b,s,h] (S: layer 0's norm input)
 *   per layer, Llama (flash attention):
 *     attn_norm      xn (S)            q_proj, k_proj -> q0, k0 temporaries; v_proj -> v (S)
 *     rope_q/rope_k  q (S), k (S)      flash_attn -> out (S), lse f32 [b,a,s] (S)
 *     o_proj         -> temporary      add -> h1 (S: mlp norm input)    mlp_norm -> hn (S)
 *     gate_proj, up_proj, silu, mul -> g, u, silu(g), g*u (S, [b,s,i])
 *     down_proj      -> temporary      add -> next layer's input (S)
 *   so a layer saves s*b*(4hd + 2hd + 2h_kv*d + 4id) + lse = s*b*(12h + 4h_kv + 8i) bytes in bf16
 *   (research/trainer-workload.md section 5) plus 4*a*s*b bytes of log-sum-exp.
 *   Naive attention (flash = 0): attn_scores -> S [b,a,s,s] temporary, softmax -> P (S, a*s^2*b*d),
 *   attn_v -> out (S); no lse.
 *   MoE (E experts, top K): router -> probs f32 [b,s,E] (S), topk -> weights f32 [b,s,K] (S) and
 *   indices i64 [b,s,K] (S), dispatch -> xp [T*K,h] (S), grouped expert_gate/expert_up/silu/mul
 *   on T*K rows (S, K*4id per token), expert_down -> [T*K,h] (S, needed for the weights' gradient),
 *   combine -> temporary. Routing is balanced (T*K/E rows per expert).
 *   GPT-2: LayerNorm, no RoPE (q0, k0 saved directly), fc -> f (S), gelu -> (S), proj.
 *   final_norm -> hf [b,s,h] (S), then the loss:
 *   chunked (the default; Cc = ssi_workload_loss_chunk: loss_chunk clamped to T, or with
 *     loss_chunk 0 the trainer's rule, the largest multiple of 64 with Cc*V <= T*h, at least 64,
 *     at most T): chunked_xent, ONE operator
 *     whatever T (so sequences of any size keep one structure): the fused LM head + cross-entropy
 *     one chunk at a time; reads hf and targets, saves lse f32 [b,s] (S); one chunk's logits
 *     [Cc,V] d are a temporary alive during the operator only. chunked_xent_bwd recomputes each
 *     chunk's logits from hf and the LM head, the probabilities from lse, and produces the hidden
 *     gradient [b,s,h] (temporary) and the head's weight gradient; temporaries during it: one
 *     chunk's logits and their gradient (2 x [Cc,V] d).
 *   full: lm_head -> logits [b,s,V] d temporary, cross_entropy -> probs f32 [b,s,V] (S);
 *     cross_entropy_bwd -> the logits' gradient [b,s,V] d, lm_head_bwd -> the hidden gradient.
 *   Backward mirrors forward in reverse; each backward op uses what its forward op saved and the
 *   gradients of its outputs, and produces gradient temporaries (released at their last use).
 *   Optimizer: one adamw op per layer and one for the rest.
 *   Recipes (ss_prof_tensor.rc_*, what the trainer registers for the hybrid): each norm output
 *   from the norm's input; v from xn (v_proj); rotary q and k from xn (q_proj + rope_q, k_proj +
 *   rope_k; GPT-2: q0, k0 from xn); gate/up/fc outputs from hn; the SiLU/GELU output from g; the
 *   SwiGLU product from g and u (silu + mul); the final norm's output from its input.
 *
 * FLOPs: a linear layer of T rows, k inputs, n outputs: 2Tkn forward, 4Tkn backward. Attention
 * products: flash (causal, tiles above the diagonal skipped) 2bs^2h forward, 5bs^2h backward
 * (recomputes QK^T); naive (full matrices) 4bs^2h forward, 8bs^2h backward. Element-wise ops
 * count a few FLOPs per element (norm 4, rope 3, silu 4, gelu 8, softmax 5, add/mul 1; backward
 * twice that); adamw 12 per parameter. Loss: full 2ThV + 5TV forward, 4ThV + 2TV backward;
 * chunked 2ThV + 5TV forward, 2ThV (the logits again) + 4ThV + 4TV (exp(z - lse), p - onehot)
 * backward. Total ~ 6*params_matmul*T + attention (+ 2ThV with the chunked loss), within 1%.
 * Durations: max(flops / device_flops, bytes touched / device_bw) + 2 us per op.
 * Memory: base_bytes = params * (2d + 8 + (d < 4 ? 4 : 0)): weights, gradients, Adam moments,
 * fp32 master weights in mixed precision (16 bytes per parameter either way); mem_after of an op
 * = base + bytes of every tensor alive after it (a tensor released at op r is not counted after r).
 */
#include "workload.h"

#include <math.h>
#include <stdio.h>

#define MAX_TENSOR_BYTES ((uint64_t)1 << 60)

/* ---- presets ------------------------------------------------------------------------------ */

static const ssi_workload_preset_info presets[] = {
    {"gpt2-124m", SSI_WORKLOAD_GPT2, 12, 768, 12, 12, 3072, 50257, 1024, 1,
     "openai-community/gpt2 config.json (n_layer 12, n_embd 768, n_head 12, vocab 50257, n_positions 1024)"},
    {"llama-3.2-1b", SSI_WORKLOAD_LLAMA, 16, 2048, 32, 8, 8192, 128256, 0, 1,
     "meta-llama/Llama-3.2-1B config.json (tie_word_embeddings true)"},
    {"llama-3.2-3b", SSI_WORKLOAD_LLAMA, 28, 3072, 24, 8, 8192, 128256, 0, 1,
     "meta-llama/Llama-3.2-3B config.json (tie_word_embeddings true)"},
    {"llama-2-7b", SSI_WORKLOAD_LLAMA, 32, 4096, 32, 32, 11008, 32000, 0, 0,
     "meta-llama/Llama-2-7b-hf config.json"},
    {"llama-3-8b", SSI_WORKLOAD_LLAMA, 32, 4096, 32, 8, 14336, 128256, 0, 0,
     "meta-llama/Meta-Llama-3-8B config.json"},
    {"llama-2-13b", SSI_WORKLOAD_LLAMA, 40, 5120, 40, 40, 13824, 32000, 0, 0,
     "meta-llama/Llama-2-13b-hf config.json"},
    {"llama-2-70b", SSI_WORKLOAD_LLAMA, 80, 8192, 64, 8, 28672, 32000, 0, 0,
     "meta-llama/Llama-2-70b-hf config.json (GQA, 8 KV heads)"},
};
#define NPRESETS (sizeof presets / sizeof presets[0])

const ssi_workload_preset_info *ssi_workload_preset_at(size_t i) {
    return i < NPRESETS ? &presets[i] : NULL;
}

void ssi_workload_default(ssi_workload_config *c) {
    memset(c, 0, sizeof *c);
    ssi_fmt(c->model, sizeof c->model, "custom");
    c->arch = SSI_WORKLOAD_LLAMA;
    c->batch = 1;
    c->seq = 2048;
    c->dtype_bytes = 2;
    c->flash = 1;
    c->loss = SSI_WORKLOAD_LOSS_CHUNKED;
    c->loss_chunk = SSI_WORKLOAD_LOSS_CHUNK_DEFAULT;
    c->device_flops = 400e12;
    c->device_bw = 3e12;
}

uint64_t ssi_workload_loss_chunk(const ssi_workload_config *c) {
    if (!c || !c->vocab) return 0;
    uint64_t T = (uint64_t)c->batch * c->seq, ch = c->loss_chunk;
    if (!ch) {
        uint64_t fit = T * c->hidden / c->vocab;   /* rows of V no larger than T x h */
        ch = fit < SSI_WORKLOAD_LOSS_CHUNK_ALIGN ? SSI_WORKLOAD_LOSS_CHUNK_ALIGN
                                                 : fit / SSI_WORKLOAD_LOSS_CHUNK_ALIGN * SSI_WORKLOAD_LOSS_CHUNK_ALIGN;
    }
    return ch < T ? ch : T;
}

ss_status ssi_workload_preset(ssi_workload_config *c, const char *name) {
    if (!c || !name) return SS_ERR_INVALID;
    for (size_t i = 0; i < NPRESETS; i++) {
        const ssi_workload_preset_info *m = &presets[i];
        if (strcmp(m->name, name)) continue;
        ssi_fmt(c->model, sizeof c->model, "%s", m->name);
        c->arch = m->arch;
        c->layers = m->layers;
        c->hidden = m->hidden;
        c->heads = m->heads;
        c->kv_heads = m->kv_heads;
        c->ffn = m->ffn;
        c->vocab = m->vocab;
        c->max_pos = m->max_pos;
        c->tied = m->tied;
        return SS_OK;
    }
    return SS_ERR_NOT_FOUND;
}

static const char *const cat_names[SSI_WL_CAT_COUNT] = {
    "norm", "q_attn_out", "k_v", "mlp", "attn_stats", "scores", "moe", "loss", "other", "temp"};

const char *ssi_workload_cat_name(uint32_t cat) { return cat < SSI_WL_CAT_COUNT ? cat_names[cat] : "?"; }

/* An invalid configuration: the message into err (or the log); returns 1. */
static int bad(char *err, size_t err_len, const char *fmt, ...) SS_PRINTF(3, 4);
static int bad(char *err, size_t err_len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ssi_vreport(err, err_len, fmt, ap);
    va_end(ap);
    return 1;
}

static int range(char *err, size_t err_len, const char *what, uint64_t v, uint64_t lo, uint64_t hi) {
    if (v >= lo && v <= hi) return 0;
    return bad(err, err_len, "%s = %llu is out of range [%llu, %llu]", what, (unsigned long long)v,
               (unsigned long long)lo, (unsigned long long)hi);
}

ss_status ssi_workload_validate(const ssi_workload_config *c, char *err, size_t err_len) {
    if (!c) return SS_ERR_INVALID;
    if (c->arch > SSI_WORKLOAD_GPT2) { bad(err, err_len, "unknown architecture %u", c->arch); return SS_ERR_INVALID; }
    if (range(err, err_len, "layers", c->layers, 1, 4096) ||
        range(err, err_len, "hidden", c->hidden, 1, 1u << 18) ||
        range(err, err_len, "heads", c->heads, 1, c->hidden ? c->hidden : 1) ||
        range(err, err_len, "kv-heads", c->kv_heads, 1, c->heads ? c->heads : 1) ||
        range(err, err_len, "ffn", c->ffn, 1, 1u << 20) ||
        range(err, err_len, "vocab", c->vocab, 1, 1u << 22) ||
        range(err, err_len, "batch", c->batch, 1, 1u << 16) ||
        range(err, err_len, "seq", c->seq, 1, 1u << 22))
        return SS_ERR_INVALID;
    if (c->hidden % c->heads) {
        bad(err, err_len, "hidden %u is not a multiple of heads %u", c->hidden, c->heads);
        return SS_ERR_INVALID;
    }
    if (c->heads % c->kv_heads) {
        bad(err, err_len, "heads %u is not a multiple of kv-heads %u", c->heads, c->kv_heads);
        return SS_ERR_INVALID;
    }
    if (c->arch == SSI_WORKLOAD_GPT2 && c->kv_heads != c->heads) {
        bad(err, err_len, "gpt2 has no grouped-query attention: kv-heads must equal heads (%u)", c->heads);
        return SS_ERR_INVALID;
    }
    if (c->max_pos && c->seq > c->max_pos) {
        bad(err, err_len, "seq %u exceeds the model's %u learned positions", c->seq, c->max_pos);
        return SS_ERR_INVALID;
    }
    if (c->dtype_bytes != 2 && c->dtype_bytes != 4) {
        bad(err, err_len, "dtype-bytes = %u: only 2 (bf16) and 4 (f32) are modelled", c->dtype_bytes);
        return SS_ERR_INVALID;
    }
    if (c->moe_experts || c->moe_topk) {
        if (c->arch != SSI_WORKLOAD_LLAMA) { bad(err, err_len, "MoE is modelled for the llama architecture only"); return SS_ERR_INVALID; }
        if (range(err, err_len, "moe experts", c->moe_experts, 1, 4096) ||
            range(err, err_len, "moe top-k", c->moe_topk, 1, c->moe_experts ? c->moe_experts : 1))
            return SS_ERR_INVALID;
    }
    if (c->loss > SSI_WORKLOAD_LOSS_FULL) {
        bad(err, err_len, "unknown loss mode %u (chunked or full)", c->loss);
        return SS_ERR_INVALID;
    }
    if (c->loss == SSI_WORKLOAD_LOSS_CHUNKED &&
        range(err, err_len, "loss-chunk", c->loss_chunk, 0, SSI_WORKLOAD_LOSS_CHUNK_MAX))
        return SS_ERR_INVALID;
    if (!(c->device_flops > 0 && c->device_flops < 1e20) || !(c->device_bw > 0 && c->device_bw < 1e18)) {
        bad(err, err_len, "device FLOP/s and bytes/s must be positive and finite");
        return SS_ERR_INVALID;
    }
    return SS_OK;
}

void ssi_workload_count_params(const ssi_workload_config *c, ssi_workload_params *out) {
    double h = c->hidden, i = c->ffn, V = c->vocab, L = c->layers;
    double hkv = c->heads ? h / c->heads * c->kv_heads : h;
    double attn_mm = 2 * h * h + 2 * h * hkv;
    double E = c->moe_experts, K = c->moe_topk;
    double layer_mm_total, layer_mm_active, layer_other;
    if (c->arch == SSI_WORKLOAD_GPT2) {
        layer_mm_total = layer_mm_active = attn_mm + 2 * h * i;
        layer_other = 3 * h + h + i + h + 4 * h;          /* biases (qkv, o, fc, proj), 2 LayerNorms */
    } else if (E > 0) {
        layer_mm_total = attn_mm + E * 3 * h * i + h * E;
        layer_mm_active = attn_mm + K * 3 * h * i + h * E;
        layer_other = 2 * h;
    } else {
        layer_mm_total = layer_mm_active = attn_mm + 3 * h * i;
        layer_other = 2 * h;
    }
    double emb = V * h + (double)c->max_pos * h;
    double final_norm = c->arch == SSI_WORKLOAD_GPT2 ? 2 * h : h;
    double head = c->tied ? 0 : V * h;
    out->embedding = emb;
    out->total = L * (layer_mm_total + layer_other) + emb + final_norm + head;
    out->active = L * (layer_mm_active + layer_other) + emb + final_norm + head;
    out->matmul = L * layer_mm_active + V * h;           /* the head's product, tied or not */
}

/* ---- the builder -------------------------------------------------------------------------- */

typedef struct gen {
    ss_profile *p;
    const ssi_workload_config *c;
    ss_status st;
    int overflow;
    int layer;                    /* current layer, -1 outside */
    uint32_t op;                  /* current op */
    uint32_t act;                 /* activation dtype */
    uint8_t *cat;  size_t cap_cat;
    int32_t *lay;  size_t cap_lay;
    uint32_t *last; size_t cap_last;
    double *bytes_touched; size_t cap_bt;
} gen;

/* Checked a*b within MAX_TENSOR_BYTES; sets overflow otherwise. */
static uint64_t mul(gen *g, uint64_t a, uint64_t b) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r) || r > MAX_TENSOR_BYTES) { g->overflow = 1; return 1; }
    return r;
}

/* Starts operator `name`; its call site is the hash of the role, the same in every layer as in a
 * framework whose layers share code. weight_bytes counts toward the bytes the op touches. */
static void op(gen *g, const char *name, uint32_t phase, double flops, double weight_bytes) {
    if (g->st) return;
    ss_prof_op o;
    memset(&o, 0, sizeof o);
    char site[64];
    ssi_fmt(site, sizeof site, "workload.c:%s", name);
    o.site = ssi_hash_str(site);
    o.phase = phase;
    o.flops = flops;
    if ((g->st = ssi_profile_intern(g->p, name, &o.name))) return;
    if ((g->st = ssi_profile_add_op(g->p, &o, &g->op))) return;
    if ((g->st = ssi_grow(&g->bytes_touched, &g->cap_bt, (size_t)g->op + 1, sizeof *g->bytes_touched))) return;
    g->bytes_touched[g->op] = weight_bytes;
}

/* A tensor produced by the current op: saved unless cat is SSI_WL_TEMP. Dims end at 0. */
static uint32_t ten(gen *g, uint32_t cat, uint32_t dtype, uint64_t d0, uint64_t d1, uint64_t d2, uint64_t d3) {
    if (g->st) return 0;
    ss_prof_tensor t;
    memset(&t, 0, sizeof t);
    uint64_t dims[4] = {d0, d1, d2, d3}, n = 1;
    for (int k = 0; k < 4 && dims[k]; k++) { t.shape[k] = (int64_t)dims[k]; t.ndim++; n = mul(g, n, dims[k]); }
    t.bytes = mul(g, n, ssi_dtype_size(dtype));
    t.dtype = dtype;
    t.producer = g->op;
    t.release = g->op;
    t.flags = cat == SSI_WL_TEMP ? 0 : SS_TENSOR_SAVED;
    uint32_t idx;
    if ((g->st = ssi_profile_add_tensor(g->p, &t, &idx))) return 0;
    size_t need = (size_t)idx + 1;
    if (ssi_grow(&g->cat, &g->cap_cat, need, 1) || ssi_grow(&g->lay, &g->cap_lay, need, sizeof *g->lay) ||
        ssi_grow(&g->last, &g->cap_last, need, sizeof *g->last)) { g->st = SS_ERR_HOST_OOM; return 0; }
    g->cat[idx] = (uint8_t)cat;
    g->lay[idx] = g->layer;
    g->last[idx] = g->op;
    g->bytes_touched[g->op] += (double)t.bytes;
    return idx;
}

/* The current op reads tensor t. */
static void use(gen *g, uint32_t t) {
    if (g->st) return;
    if ((g->st = ssi_profile_add_use(g->p, t, g->op))) return;
    g->last[t] = g->op;
    g->bytes_touched[g->op] += (double)g->p->tensors[t].bytes;
}

enum { F_NORM = 4, F_ROPE = 3, F_SILU = 4, F_GELU = 8, F_SOFTMAX = 5, F_ADD = 1 };

/* Tensor t can be rebuilt by re-running ops o0 (and o1 unless SS_NONE) on saved tensors s0 (and
 * s1 unless SS_NONE): the recipe a trainer registers (ss_ctx_recomputable), for the hybrid. */
static void recipe(gen *g, uint32_t t, uint32_t o0, uint32_t o1, uint32_t s0, uint32_t s1) {
    if (g->st || t >= g->p->ntensors) return;
    ss_prof_tensor *x = &g->p->tensors[t];
    x->rc_op[0] = o0;
    x->rc_nop = 1;
    if (o1 != SS_NONE) x->rc_op[x->rc_nop++] = o1;
    x->rc_src[0] = s0;
    x->rc_nsrc = 1;
    if (s1 != SS_NONE) x->rc_src[x->rc_nsrc++] = s1;
}

typedef struct dims {
    uint64_t b, s, h, a, hkv, i, V, E, K, T;
    double Td, d;                    /* tokens, dtype bytes */
} dims;

/* Saved tensors of one layer's forward, for its backward. */
typedef struct layer_saved {
    uint32_t x, xn, q, k, v, out, lse, P, h1, hn;
    uint32_t g, u, a, pm;            /* MLP (dense, or the experts' rows) / GPT-2: g = fc out, a = gelu out */
    uint32_t rp, wk, idx, xp, dexp;  /* MoE */
} layer_saved;

static uint32_t forward_layer(gen *g, const dims *D, uint32_t x, layer_saved *S) {
    const ssi_workload_config *c = g->c;
    uint32_t dt = g->act;
    double T = D->Td, h = (double)D->h, hkv = (double)D->hkv, i = (double)D->i, w = D->d;
    int gpt2 = c->arch == SSI_WORKLOAD_GPT2;
    double bs2h = (double)D->b * (double)D->s * (double)D->s * h;
    S->x = x;
    op(g, "attn_norm", SS_PHASE_FWD, F_NORM * T * h, 0); use(g, x);
    uint32_t span_first = g->op;
    S->xn = ten(g, SSI_WL_NORM, dt, D->b, D->s, D->h, 0);
    recipe(g, S->xn, g->op, SS_NONE, x, SS_NONE);
    op(g, "q_proj", SS_PHASE_FWD, 2 * T * h * h, h * h * w); use(g, S->xn);
    uint32_t q0 = ten(g, gpt2 ? SSI_WL_QO : SSI_WL_TEMP, dt, D->b, D->s, D->h, 0);
    uint32_t oq = g->op;
    op(g, "k_proj", SS_PHASE_FWD, 2 * T * h * hkv, h * hkv * w); use(g, S->xn);
    uint32_t k0 = ten(g, gpt2 ? SSI_WL_KV : SSI_WL_TEMP, dt, D->b, D->s, D->hkv, 0);
    uint32_t ok = g->op;
    op(g, "v_proj", SS_PHASE_FWD, 2 * T * h * hkv, h * hkv * w); use(g, S->xn);
    S->v = ten(g, SSI_WL_KV, dt, D->b, D->s, D->hkv, 0);
    recipe(g, S->v, g->op, SS_NONE, S->xn, SS_NONE);
    if (gpt2) {
        S->q = q0;
        S->k = k0;
        recipe(g, q0, oq, SS_NONE, S->xn, SS_NONE);
        recipe(g, k0, ok, SS_NONE, S->xn, SS_NONE);
    } else {
        op(g, "rope_q", SS_PHASE_FWD, F_ROPE * T * h, 0); use(g, q0);
        S->q = ten(g, SSI_WL_QO, dt, D->b, D->s, D->h, 0);
        recipe(g, S->q, oq, g->op, S->xn, SS_NONE);
        op(g, "rope_k", SS_PHASE_FWD, F_ROPE * T * hkv, 0); use(g, k0);
        S->k = ten(g, SSI_WL_KV, dt, D->b, D->s, D->hkv, 0);
        recipe(g, S->k, ok, g->op, S->xn, SS_NONE);
    }
    if (c->flash) {
        op(g, "flash_attn", SS_PHASE_FWD, 2 * bs2h, 0); use(g, S->q); use(g, S->k); use(g, S->v);
        S->out = ten(g, SSI_WL_QO, dt, D->b, D->s, D->h, 0);
        S->lse = ten(g, SSI_WL_ATTN_STATS, SS_DTYPE_F32, D->b, D->a, D->s, 0);
        S->P = SS_NONE;
    } else {
        op(g, "attn_scores", SS_PHASE_FWD, 2 * bs2h, 0); use(g, S->q); use(g, S->k);
        uint32_t sc = ten(g, SSI_WL_TEMP, dt, D->b, D->a, D->s, D->s);
        op(g, "softmax", SS_PHASE_FWD, F_SOFTMAX * (double)D->b * (double)D->a * (double)D->s * (double)D->s, 0);
        use(g, sc);
        S->P = ten(g, SSI_WL_SCORES, dt, D->b, D->a, D->s, D->s);
        op(g, "attn_v", SS_PHASE_FWD, 2 * bs2h, 0); use(g, S->P); use(g, S->v);
        S->out = ten(g, SSI_WL_QO, dt, D->b, D->s, D->h, 0);
        S->lse = SS_NONE;
    }
    op(g, "o_proj", SS_PHASE_FWD, 2 * T * h * h, h * h * w); use(g, S->out);
    uint32_t ao = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->h, 0);
    op(g, "add", SS_PHASE_FWD, F_ADD * T * h, 0); use(g, x); use(g, ao);
    S->h1 = ten(g, SSI_WL_NORM, dt, D->b, D->s, D->h, 0);
    op(g, "mlp_norm", SS_PHASE_FWD, F_NORM * T * h, 0); use(g, S->h1);
    S->hn = ten(g, SSI_WL_NORM, dt, D->b, D->s, D->h, 0);
    recipe(g, S->hn, g->op, SS_NONE, S->h1, SS_NONE);
    uint32_t d;
    if (gpt2) {
        op(g, "fc", SS_PHASE_FWD, 2 * T * h * i, h * i * w); use(g, S->hn);
        S->g = ten(g, SSI_WL_MLP, dt, D->b, D->s, D->i, 0);
        recipe(g, S->g, g->op, SS_NONE, S->hn, SS_NONE);
        op(g, "gelu", SS_PHASE_FWD, F_GELU * T * i, 0); use(g, S->g);
        S->a = ten(g, SSI_WL_MLP, dt, D->b, D->s, D->i, 0);
        recipe(g, S->a, g->op, SS_NONE, S->g, SS_NONE);
        op(g, "proj", SS_PHASE_FWD, 2 * T * h * i, h * i * w); use(g, S->a);
        d = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->h, 0);
    } else if (!c->moe_experts) {
        op(g, "gate_proj", SS_PHASE_FWD, 2 * T * h * i, h * i * w); use(g, S->hn);
        S->g = ten(g, SSI_WL_MLP, dt, D->b, D->s, D->i, 0);
        recipe(g, S->g, g->op, SS_NONE, S->hn, SS_NONE);
        op(g, "up_proj", SS_PHASE_FWD, 2 * T * h * i, h * i * w); use(g, S->hn);
        S->u = ten(g, SSI_WL_MLP, dt, D->b, D->s, D->i, 0);
        recipe(g, S->u, g->op, SS_NONE, S->hn, SS_NONE);
        op(g, "silu", SS_PHASE_FWD, F_SILU * T * i, 0); use(g, S->g);
        S->a = ten(g, SSI_WL_MLP, dt, D->b, D->s, D->i, 0);
        uint32_t os = g->op;
        recipe(g, S->a, os, SS_NONE, S->g, SS_NONE);
        op(g, "mul", SS_PHASE_FWD, T * i, 0); use(g, S->a); use(g, S->u);
        S->pm = ten(g, SSI_WL_MLP, dt, D->b, D->s, D->i, 0);
        recipe(g, S->pm, os, g->op, S->g, S->u);   /* silu(g) * u: both kernels again */
        op(g, "down_proj", SS_PHASE_FWD, 2 * T * h * i, h * i * w); use(g, S->pm);
        d = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->h, 0);
    } else {
        double E = (double)D->E, K = (double)D->K, R = T * K;    /* R: routed rows */
        uint64_t rows = mul(g, D->T, D->K);
        op(g, "router", SS_PHASE_FWD, 2 * T * h * E + F_SOFTMAX * T * E, h * E * w); use(g, S->hn);
        S->rp = ten(g, SSI_WL_MOE, SS_DTYPE_F32, D->b, D->s, D->E, 0);
        op(g, "topk", SS_PHASE_FWD, T * E, 0); use(g, S->rp);
        S->wk = ten(g, SSI_WL_MOE, SS_DTYPE_F32, D->b, D->s, D->K, 0);
        S->idx = ten(g, SSI_WL_MOE, SS_DTYPE_I64, D->b, D->s, D->K, 0);
        op(g, "moe_dispatch", SS_PHASE_FWD, 0, 0); use(g, S->hn); use(g, S->idx);
        S->xp = ten(g, SSI_WL_MOE, dt, rows, D->h, 0, 0);
        op(g, "expert_gate", SS_PHASE_FWD, 2 * R * h * i, E * h * i * w); use(g, S->xp);
        S->g = ten(g, SSI_WL_MLP, dt, rows, D->i, 0, 0);
        op(g, "expert_up", SS_PHASE_FWD, 2 * R * h * i, E * h * i * w); use(g, S->xp);
        S->u = ten(g, SSI_WL_MLP, dt, rows, D->i, 0, 0);
        op(g, "silu", SS_PHASE_FWD, F_SILU * R * i, 0); use(g, S->g);
        S->a = ten(g, SSI_WL_MLP, dt, rows, D->i, 0, 0);
        op(g, "mul", SS_PHASE_FWD, R * i, 0); use(g, S->a); use(g, S->u);
        S->pm = ten(g, SSI_WL_MLP, dt, rows, D->i, 0, 0);
        op(g, "expert_down", SS_PHASE_FWD, 2 * R * h * i, E * h * i * w); use(g, S->pm);
        S->dexp = ten(g, SSI_WL_MOE, dt, rows, D->h, 0, 0);
        op(g, "moe_combine", SS_PHASE_FWD, 2 * R * h, 0); use(g, S->dexp); use(g, S->wk); use(g, S->idx);
        d = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->h, 0);
    }
    /* the layer is a span of its input (ss_ctx_recomputable_span): re-running its operators up to
     * here rebuilds every tensor it saved; the residual add below only makes the next input */
    if (!g->st && x < g->p->ntensors) {
        g->p->tensors[x].span_first = span_first;
        g->p->tensors[x].span_nop = g->op - span_first + 1;
    }
    op(g, "add", SS_PHASE_FWD, F_ADD * T * h, 0); use(g, S->h1); use(g, d);
    /* the next layer's input (its first norm input), or the final norm's input */
    int next = g->layer + 1 < (int)c->layers ? g->layer + 1 : -1;
    int keep = g->layer;
    g->layer = next;
    uint32_t y = ten(g, next >= 0 ? SSI_WL_NORM : SSI_WL_OTHER, dt, D->b, D->s, D->h, 0);
    g->layer = keep;
    return y;
}

/* Backward of one layer: gy is the gradient of the layer's output; returns that of its input. */
static uint32_t backward_layer(gen *g, const dims *D, const layer_saved *S, uint32_t gy) {
    const ssi_workload_config *c = g->c;
    uint32_t dt = g->act;
    double T = D->Td, h = (double)D->h, hkv = (double)D->hkv, i = (double)D->i, w = D->d;
    int gpt2 = c->arch == SSI_WORKLOAD_GPT2;
    double bs2h = (double)D->b * (double)D->s * (double)D->s * h;
    uint32_t ghn;
    if (gpt2) {
        op(g, "proj_bwd", SS_PHASE_BWD, 4 * T * h * i, 2 * h * i * w); use(g, S->a); use(g, gy);
        uint32_t ga = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->i, 0);
        op(g, "gelu_bwd", SS_PHASE_BWD, 2 * F_GELU * T * i, 0); use(g, S->g); use(g, ga);
        uint32_t gf = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->i, 0);
        op(g, "fc_bwd", SS_PHASE_BWD, 4 * T * h * i, 2 * h * i * w); use(g, S->hn); use(g, gf);
        ghn = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->h, 0);
    } else if (!c->moe_experts) {
        op(g, "down_proj_bwd", SS_PHASE_BWD, 4 * T * h * i, 2 * h * i * w); use(g, S->pm); use(g, gy);
        uint32_t gpm = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->i, 0);
        op(g, "mul_bwd", SS_PHASE_BWD, 2 * T * i, 0); use(g, S->a); use(g, S->u); use(g, gpm);
        uint32_t ga = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->i, 0);
        uint32_t gu = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->i, 0);
        op(g, "silu_bwd", SS_PHASE_BWD, 2 * F_SILU * T * i, 0); use(g, S->g); use(g, ga);
        uint32_t gg = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->i, 0);
        op(g, "up_proj_bwd", SS_PHASE_BWD, 4 * T * h * i, 2 * h * i * w); use(g, S->hn); use(g, gu);
        ghn = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->h, 0);
        op(g, "gate_proj_bwd", SS_PHASE_BWD, 4 * T * h * i, 2 * h * i * w); use(g, S->hn); use(g, gg); use(g, ghn);
    } else {
        double E = (double)D->E, K = (double)D->K, R = T * K;
        uint64_t rows = mul(g, D->T, D->K);
        op(g, "moe_combine_bwd", SS_PHASE_BWD, 4 * R * h, 0);
        use(g, S->dexp); use(g, S->wk); use(g, S->idx); use(g, gy);
        uint32_t gd = ten(g, SSI_WL_TEMP, dt, rows, D->h, 0, 0);
        uint32_t gwk = ten(g, SSI_WL_TEMP, SS_DTYPE_F32, D->b, D->s, D->K, 0);
        op(g, "expert_down_bwd", SS_PHASE_BWD, 4 * R * h * i, 2 * E * h * i * w); use(g, S->pm); use(g, gd);
        uint32_t gpm = ten(g, SSI_WL_TEMP, dt, rows, D->i, 0, 0);
        op(g, "mul_bwd", SS_PHASE_BWD, 2 * R * i, 0); use(g, S->a); use(g, S->u); use(g, gpm);
        uint32_t ga = ten(g, SSI_WL_TEMP, dt, rows, D->i, 0, 0);
        uint32_t gu = ten(g, SSI_WL_TEMP, dt, rows, D->i, 0, 0);
        op(g, "silu_bwd", SS_PHASE_BWD, 2 * F_SILU * R * i, 0); use(g, S->g); use(g, ga);
        uint32_t gg = ten(g, SSI_WL_TEMP, dt, rows, D->i, 0, 0);
        op(g, "expert_up_bwd", SS_PHASE_BWD, 4 * R * h * i, 2 * E * h * i * w); use(g, S->xp); use(g, gu);
        uint32_t gxp = ten(g, SSI_WL_TEMP, dt, rows, D->h, 0, 0);
        op(g, "expert_gate_bwd", SS_PHASE_BWD, 4 * R * h * i, 2 * E * h * i * w); use(g, S->xp); use(g, gg); use(g, gxp);
        op(g, "moe_dispatch_bwd", SS_PHASE_BWD, R * h, 0); use(g, S->idx); use(g, gxp);
        ghn = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->h, 0);
        op(g, "router_bwd", SS_PHASE_BWD, 4 * T * h * E + 2 * F_SOFTMAX * T * E, 2 * h * E * w);
        use(g, S->rp); use(g, gwk); use(g, S->hn); use(g, ghn);
    }
    /* mlp_norm backward: the residual gradient plus the norm's, into a new buffer */
    op(g, "mlp_norm_bwd", SS_PHASE_BWD, 2 * F_NORM * T * h + T * h, 0); use(g, S->h1); use(g, ghn); use(g, gy);
    uint32_t gh1 = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->h, 0);
    op(g, "o_proj_bwd", SS_PHASE_BWD, 4 * T * h * h, 2 * h * h * w); use(g, S->out); use(g, gh1);
    uint32_t gout = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->h, 0);
    uint32_t gq, gk, gv;
    if (c->flash) {
        op(g, "flash_attn_bwd", SS_PHASE_BWD, 5 * bs2h, 0);
        use(g, S->q); use(g, S->k); use(g, S->v); use(g, S->out); use(g, S->lse); use(g, gout);
        gq = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->h, 0);
        gk = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->hkv, 0);
        gv = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->hkv, 0);
    } else {
        double bass = (double)D->b * (double)D->a * (double)D->s * (double)D->s;
        op(g, "attn_v_bwd", SS_PHASE_BWD, 4 * bs2h, 0); use(g, S->P); use(g, S->v); use(g, gout);
        uint32_t gP = ten(g, SSI_WL_TEMP, dt, D->b, D->a, D->s, D->s);
        gv = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->hkv, 0);
        op(g, "softmax_bwd", SS_PHASE_BWD, 2 * F_SOFTMAX * bass, 0); use(g, S->P); use(g, gP);
        uint32_t gS = ten(g, SSI_WL_TEMP, dt, D->b, D->a, D->s, D->s);
        op(g, "attn_scores_bwd", SS_PHASE_BWD, 4 * bs2h, 0); use(g, S->q); use(g, S->k); use(g, gS);
        gq = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->h, 0);
        gk = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->hkv, 0);
    }
    if (!gpt2) {
        op(g, "rope_k_bwd", SS_PHASE_BWD, 2 * F_ROPE * T * hkv, 0); use(g, gk);
        gk = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->hkv, 0);
        op(g, "rope_q_bwd", SS_PHASE_BWD, 2 * F_ROPE * T * h, 0); use(g, gq);
        gq = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->h, 0);
    }
    op(g, "v_proj_bwd", SS_PHASE_BWD, 4 * T * h * hkv, 2 * h * hkv * w); use(g, S->xn); use(g, gv);
    uint32_t gxn = ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->h, 0);
    op(g, "k_proj_bwd", SS_PHASE_BWD, 4 * T * h * hkv, 2 * h * hkv * w); use(g, S->xn); use(g, gk); use(g, gxn);
    op(g, "q_proj_bwd", SS_PHASE_BWD, 4 * T * h * h, 2 * h * h * w); use(g, S->xn); use(g, gq); use(g, gxn);
    op(g, "attn_norm_bwd", SS_PHASE_BWD, 2 * F_NORM * T * h + T * h, 0); use(g, S->x); use(g, gxn); use(g, gh1);
    return ten(g, SSI_WL_TEMP, dt, D->b, D->s, D->h, 0);
}

static void build(gen *g, layer_saved *S) {
    const ssi_workload_config *c = g->c;
    dims D;
    D.b = c->batch; D.s = c->seq; D.h = c->hidden; D.a = c->heads;
    D.hkv = (uint64_t)c->hidden / c->heads * c->kv_heads;
    D.i = c->ffn; D.V = c->vocab; D.E = c->moe_experts; D.K = c->moe_topk;
    D.T = (uint64_t)c->batch * c->seq;
    D.Td = (double)D.T;
    D.d = c->dtype_bytes;
    double T = D.Td, h = (double)D.h, V = (double)D.V, w = D.d;
    uint32_t dt = g->act;
    ssi_workload_params P;
    ssi_workload_count_params(c, &P);

    g->layer = -1;
    op(g, "embed", SS_PHASE_FWD, c->max_pos ? T * h : 0, T * h * w);
    uint32_t tokens = ten(g, SSI_WL_OTHER, SS_DTYPE_I64, D.b, D.s, 0, 0);
    uint32_t targets = ten(g, SSI_WL_OTHER, SS_DTYPE_I64, D.b, D.s, 0, 0);
    g->layer = 0;
    uint32_t x = ten(g, SSI_WL_NORM, dt, D.b, D.s, D.h, 0);
    for (uint32_t l = 0; l < c->layers && !g->st; l++) {
        g->layer = (int)l;
        x = forward_layer(g, &D, x, &S[l]);
    }
    g->layer = -1;
    op(g, "final_norm", SS_PHASE_FWD, F_NORM * T * h, 0); use(g, x);
    uint32_t hf = ten(g, SSI_WL_OTHER, dt, D.b, D.s, D.h, 0);
    recipe(g, hf, g->op, SS_NONE, x, SS_NONE);
    uint32_t ghf;
    if (c->loss == SSI_WORKLOAD_LOSS_FULL) {
        op(g, "lm_head", SS_PHASE_FWD, 2 * T * h * V, h * V * w); use(g, hf);
        uint32_t logits = ten(g, SSI_WL_TEMP, dt, D.b, D.s, D.V, 0);
        op(g, "cross_entropy", SS_PHASE_FWD, F_SOFTMAX * T * V, 0); use(g, logits); use(g, targets);
        uint32_t probs = ten(g, SSI_WL_LOSS, SS_DTYPE_F32, D.b, D.s, D.V, 0);

        op(g, "cross_entropy_bwd", SS_PHASE_BWD, 2 * T * V, 0); use(g, probs); use(g, targets);
        uint32_t glogits = ten(g, SSI_WL_TEMP, dt, D.b, D.s, D.V, 0);
        op(g, "lm_head_bwd", SS_PHASE_BWD, 4 * T * h * V, 2 * h * V * w); use(g, hf); use(g, glogits);
        ghf = ten(g, SSI_WL_TEMP, dt, D.b, D.s, D.h, 0);
    } else {
        /* one chunk's logits [Cc, V] exist at a time; every chunk's are written and read once,
         * so the op touches 2*T*V*d bytes of logits although only one chunk is alive */
        uint64_t Cc = ssi_workload_loss_chunk(c);
        double logit_bytes = 2 * T * V * w - (double)Cc * V * w;
        op(g, "chunked_xent", SS_PHASE_FWD, 2 * T * h * V + F_SOFTMAX * T * V, h * V * w + logit_bytes);
        use(g, hf); use(g, targets);
        uint32_t lse = ten(g, SSI_WL_LOSS, SS_DTYPE_F32, D.b, D.s, 0, 0);   /* lse [b,s] f32 (S) */
        (void)ten(g, SSI_WL_TEMP, dt, Cc, D.V, 0, 0);                       /* chunk logits [Cc,V] */

        op(g, "chunked_xent_bwd", SS_PHASE_BWD, 6 * T * h * V + 4 * T * V, 2 * h * V * w + 2 * logit_bytes);
        use(g, hf); use(g, lse); use(g, targets);
        ghf = ten(g, SSI_WL_TEMP, dt, D.b, D.s, D.h, 0);                    /* d hf [b,s,h] */
        (void)ten(g, SSI_WL_TEMP, dt, Cc, D.V, 0, 0);                       /* chunk logits [Cc,V] */
        (void)ten(g, SSI_WL_TEMP, dt, Cc, D.V, 0, 0);                       /* their gradient [Cc,V] */
    }
    op(g, "final_norm_bwd", SS_PHASE_BWD, 2 * F_NORM * T * h, 0); use(g, x); use(g, ghf);
    uint32_t gx = ten(g, SSI_WL_TEMP, dt, D.b, D.s, D.h, 0);
    for (uint32_t l = c->layers; l-- > 0 && !g->st;) {
        g->layer = (int)l;
        gx = backward_layer(g, &D, &S[l], gx);
    }
    g->layer = -1;
    op(g, "embed_bwd", SS_PHASE_BWD, c->max_pos ? T * h : 0, 2 * T * h * w); use(g, tokens); use(g, gx);

    /* optimizer: one adamw per layer, one for embeddings, final norm and head */
    double per_layer = (P.total - P.embedding - (c->tied ? 0 : V * h)) / c->layers;  /* includes the final norm: negligible */
    double rest = P.total - per_layer * c->layers;
    for (uint32_t l = 0; l < c->layers; l++) op(g, "adamw", SS_PHASE_OPT, 12 * per_layer, 32 * per_layer);
    op(g, "adamw", SS_PHASE_OPT, 12 * rest, 32 * rest);
}

/* The operators whose FLOPs are attention products (QK^T, PV and their gradients). */
static int is_attention_product(const char *name) {
    static const char *const names[] = {"flash_attn", "flash_attn_bwd", "attn_scores", "attn_v",
                                        "attn_scores_bwd", "attn_v_bwd"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i])) return 1;
    return 0;
}

void ssi_workload_info_free(ssi_workload_info *info) {
    if (!info) return;
    free(info->cat);
    free(info->layer);
    info->cat = NULL;
    info->layer = NULL;
}

ss_status ssi_workload_generate(const ssi_workload_config *c, ss_profile **out, ssi_workload_info *info,
                                char *err, size_t err_len) {
    if (!c || !out) return SS_ERR_INVALID;
    ss_status st = ssi_workload_validate(c, err, err_len);
    if (st) return st;
    gen g;
    memset(&g, 0, sizeof g);
    g.c = c;
    g.act = c->dtype_bytes == 4 ? SS_DTYPE_F32 : SS_DTYPE_BF16;
    layer_saved *S = calloc(c->layers, sizeof *S);
    if (!S || ssi_profile_new(&g.p)) { free(S); return SS_ERR_HOST_OOM; }
    build(&g, S);
    free(S);
    ss_profile *p = g.p;
    if (!g.st && g.overflow) {
        bad(err, err_len, "workload too large: a tensor would exceed 2^60 bytes (reduce batch, seq or dims)");
        g.st = SS_ERR_INVALID;
    }
    /* releases at the last use, then uses sorted into place */
    if (!g.st) {
        for (uint32_t t = 0; t < p->ntensors; t++) p->tensors[t].release = g.last[t];
        g.st = ssi_profile_finalize(p);
    }
    ssi_workload_params P;
    ssi_workload_count_params(c, &P);
    if (!g.st) {
        /* mem_after: base + tensors alive after each op: a sweep of +bytes at the producer and
         * -bytes at the release (freed when its releasing op ends, so not counted after it) */
        double w = c->dtype_bytes;
        p->base_bytes = (uint64_t)(P.total * (2 * w + 8 + (w < 4 ? 4 : 0)));
        int64_t *delta = calloc((size_t)p->nops + 1, sizeof *delta);
        if (!delta) g.st = SS_ERR_HOST_OOM;
        else {
            for (uint32_t t = 0; t < p->ntensors; t++) {
                delta[p->tensors[t].producer] += (int64_t)p->tensors[t].bytes;
                delta[p->tensors[t].release] -= (int64_t)p->tensors[t].bytes;
            }
            int64_t cur = 0;
            double total_s = 0, attn = 0;
            for (uint32_t j = 0; j < p->nops; j++) {
                cur += delta[j];
                ss_prof_op *o = &p->ops[j];
                o->mem_after = p->base_bytes + (uint64_t)cur;
                double tc = o->flops / c->device_flops, tm = g.bytes_touched[j] / c->device_bw;
                o->seconds = (tc > tm ? tc : tm) + 2e-6;
                total_s += o->seconds;
                if (is_attention_product(p->names[o->name])) attn += o->flops;
            }
            free(delta);
            p->iter_seconds = total_s;
            p->seq_hash = ssi_profile_running_hashes(p, NULL);
            p->size_sig = ssi_size_sig(ssi_profile_saved_bytes(p));
            char loss[32];
            if (c->loss == SSI_WORKLOAD_LOSS_FULL) ssi_fmt(loss, sizeof loss, "full");
            else ssi_fmt(loss, sizeof loss, "chunked:%llu", (unsigned long long)ssi_workload_loss_chunk(c));
            ssi_fmt(p->desc, sizeof p->desc, "trace gen %s: L=%u h=%u a=%u kv=%u i=%u V=%u%s b=%u s=%u %s%s loss=%s",
                    c->model, c->layers, c->hidden, c->heads, c->kv_heads, c->ffn, c->vocab,
                    c->moe_experts ? " moe" : "", c->batch, c->seq, c->dtype_bytes == 2 ? "bf16" : "f32",
                    c->flash ? " flash" : " naive", loss);
            if (c->moe_experts) {
                size_t n = strlen(p->desc);
                ssi_fmt(p->desc + n, sizeof p->desc - n, " E=%u K=%u", c->moe_experts, c->moe_topk);
            }
            if (info) info->attn_flops = attn;
        }
    }
    if (g.st) {
        if (g.st == SS_ERR_HOST_OOM) bad(err, err_len, "out of memory generating the workload");
        ssi_profile_free(p);
        free(g.cat); free(g.lay); free(g.last); free(g.bytes_touched);
        return g.st;
    }
    free(g.last);
    free(g.bytes_touched);
    if (info) {
        info->cat = g.cat;
        info->layer = g.lay;
        info->ntensors = p->ntensors;
        info->params = P;
    } else {
        free(g.cat);
        free(g.lay);
    }
    *out = p;
    return SS_OK;
}
