/* cli-model.c: the model and workload flags that `smartswap trace gen` and `smartswap simulate`
 * share (--model or explicit dimensions, batch, sequence, dtype, MoE, attention, loss), parsed
 * once. The defaults are the reference trainer's: flash attention, chunked loss with the
 * trainer's chunk rule (--loss-chunk 0: ssi_workload_loss_chunk).
 */
#include "cli.h"
#include "workload.h"

#include <stdio.h>
#include <string.h>

static int flag_u32(const char *cmd, const char *flag, const char *v, long lo, long hi, uint32_t *out) {
    long x;
    if (cli_int(cmd, flag, v, lo, hi, &x)) return 1;
    *out = (uint32_t)x;
    return 0;
}

const char *cli_model_presets(char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; ssi_workload_preset_at(i) && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? ", " : "", ssi_workload_preset_at(i)->name);
    return buf;
}

int cli_model_flag(const char *C, int argc, char **argv, int *i, cli_model *m, ssi_workload_config *c) {
    const char *a = argv[*i], *v;
    int r;
    if (!strcmp(a, "--no-flash")) { c->flash = 0; (*i)++; return 1; }   /* = --attention naive */
#define FLAG(name) ((r = cli_flag(argc, argv, i, name, &v)) < 0 ? -1 : r)
#define U32(name, lo, hi, dst) \
    if ((r = FLAG(name)) < 0) return -1; else if (r) return flag_u32(C, name, v, lo, hi, dst) ? -1 : 1
    if ((r = FLAG("model")) < 0) return -1; else if (r) { m->model = v; return 1; }
    if ((r = FLAG("arch")) < 0) return -1; else if (r) {
        if (!strcmp(v, "llama")) m->arch = SSI_WORKLOAD_LLAMA;
        else if (!strcmp(v, "gpt2")) m->arch = SSI_WORKLOAD_GPT2;
        else { cli_error(C, "--arch is llama or gpt2", "--arch: unknown architecture '%s'", v); return -1; }
        m->have_arch = 1;
        return 1;
    }
    U32("layers", 1, 4096, &m->layers);
    U32("hidden", 1, 1 << 18, &m->hidden);
    U32("heads", 1, 1 << 18, &m->heads);
    U32("kv-heads", 1, 1 << 18, &m->kv);
    U32("ffn", 1, 1 << 20, &m->ffn);
    U32("vocab", 1, 1 << 22, &m->vocab);
    U32("batch", 1, 1 << 16, &c->batch);
    U32("seq", 1, 1 << 22, &c->seq);
    if ((r = FLAG("dtype-bytes")) < 0) return -1; else if (r) {
        if (strcmp(v, "2") && strcmp(v, "4")) {
            cli_error(C, "2 for bf16, 4 for f32", "--dtype-bytes: '%s' is not 2 or 4", v);
            return -1;
        }
        c->dtype_bytes = (uint32_t)(v[0] - '0');
        return 1;
    }
    if ((r = FLAG("attention")) < 0) return -1; else if (r) {
        if (!strcmp(v, "flash")) c->flash = 1;
        else if (!strcmp(v, "naive")) c->flash = 0;
        else {
            cli_error(C, "--attention is flash (the default) or naive", "--attention: unknown attention '%s'", v);
            return -1;
        }
        return 1;
    }
    if ((r = FLAG("loss")) < 0) return -1; else if (r) {
        if (!strcmp(v, "chunked")) c->loss = SSI_WORKLOAD_LOSS_CHUNKED;
        else if (!strcmp(v, "full")) c->loss = SSI_WORKLOAD_LOSS_FULL;
        else {
            cli_error(C, "--loss is chunked (the default) or full", "--loss: unknown loss '%s'", v);
            return -1;
        }
        return 1;
    }
    U32("loss-chunk", 0, SSI_WORKLOAD_LOSS_CHUNK_MAX, &c->loss_chunk);
    if ((r = FLAG("moe")) < 0) return -1; else if (r) {
        unsigned e = 0, k = 0;
        char extra;
        if (sscanf(v, "%u:%u%c", &e, &k, &extra) != 2 || e < 1 || e > 4096 || k < 1 || k > e) {
            cli_error(C, "--moe E:K with 1 <= K <= E <= 4096, e.g. --moe 8:2", "--moe: '%s' is not E:K", v);
            return -1;
        }
        c->moe_experts = e;
        c->moe_topk = k;
        return 1;
    }
#undef U32
#undef FLAG
    return 0;
}

int cli_model_apply(const char *C, const cli_model *m, ssi_workload_config *c) {
    char names[256], hint[400];
    if (m->model) {
        if (ssi_workload_preset(c, m->model) != SS_OK) {
            snprintf(hint, sizeof hint, "presets: %s; or give --layers --hidden --heads --ffn --vocab",
                     cli_model_presets(names, sizeof names));
            cli_error(C, hint, "unknown model '%s'", m->model);
            return 2;
        }
    } else {
        const char *missing = !m->layers ? "--layers" : !m->hidden ? "--hidden" : !m->heads ? "--heads" :
                              !m->ffn ? "--ffn" : !m->vocab ? "--vocab" : NULL;
        if (missing) {
            snprintf(hint, sizeof hint, "give --model NAME (%s) or all of --layers --hidden --heads --ffn --vocab",
                     cli_model_presets(names, sizeof names));
            cli_error(C, hint, "no model: %s is missing", missing);
            return 2;
        }
        c->arch = m->arch;
        c->tied = c->arch == SSI_WORKLOAD_GPT2;
        if (c->arch == SSI_WORKLOAD_GPT2) c->max_pos = 0;
    }
    if (m->have_arch) c->arch = m->arch;
    if (m->layers) c->layers = m->layers;
    if (m->hidden) c->hidden = m->hidden;
    if (m->heads) { c->heads = m->heads; if (!m->kv) c->kv_heads = m->heads; }
    if (m->kv) c->kv_heads = m->kv;
    if (m->ffn) c->ffn = m->ffn;
    if (m->vocab) c->vocab = m->vocab;
    if (m->model && (m->layers || m->hidden || m->heads || m->kv || m->ffn || m->vocab || m->have_arch))
        snprintf(c->model, sizeof c->model, "%.30s-custom", m->model);
    return 0;
}
