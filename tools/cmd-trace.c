/* cmd-trace.c: `smartswap trace`: synthetic profiles of training iterations and their totals.
 *
 *   smartswap trace gen (--model NAME | --layers N --hidden N --heads N --ffn N --vocab N) ... -o FILE
 *   smartswap trace stats FILE [--json] [--tokens N]
 *   smartswap trace models
 *
 * gen builds the profile with the workload generator (src/workload.c) and writes it atomically
 * in the profile format (docs/trace-format.md); stats reads any profile file (generated or
 * recorded) and prints its totals and its saved bytes by layer (trace.h, ssi_profile_layers_get).
 */
#include "cli.h"
#include "trace.h"
#include "workload.h"

#include <string.h>

static void usage_gen(FILE *f) {
    ssi_workload_config d;
    ssi_workload_default(&d);
    fprintf(f,
            "usage: smartswap trace gen (--model NAME | --layers N --hidden N --heads N --ffn N --vocab N)\n"
            "                           [flags] -o FILE\n"
            "  writes a profile of one training iteration (forward, backward, AdamW step) of a decoder\n"
            "  transformer, operator by operator: saved tensors with shapes and bytes, FLOPs, memory.\n\n"
            "model (a preset, or explicit dimensions; explicit ones override the preset's):\n"
            "  --model NAME       preset: 'smartswap trace models' lists them      (default: none)\n"
            "  --arch A           llama or gpt2                                     (default: llama)\n"
            "  --layers N         transformer layers                                (default: the preset's)\n"
            "  --hidden N         hidden size h                                     (default: the preset's)\n"
            "  --heads N          attention heads a                                 (default: the preset's)\n"
            "  --kv-heads N       key/value heads (grouped-query attention)         (default: --heads)\n"
            "  --ffn N            MLP width i (per expert with --moe)               (default: the preset's)\n"
            "  --vocab N          vocabulary size V                                 (default: the preset's)\n"
            "  --tied             the LM head shares the embedding matrix           (default: the preset's; off)\n"
            "run:\n"
            "  --batch N          micro-batch b                                     (default: %u)\n"
            "  --seq N            sequence length s                                 (default: %u)\n"
            "  --dtype-bytes N    2 (bf16) or 4 (f32) activations and weights       (default: %u)\n"
            "  --moe E:K          mixture of experts: E experts, top-K routing      (default: dense MLP)\n"
            "  --attention A      flash: saves the output and an f32 log-sum-exp per row and head;\n"
            "                     naive: softmax(QK^T) [b,a,s,s] is saved           (default: flash)\n"
            "  --no-flash         the same as --attention naive\n"
            "  --loss L           chunked: a fused LM head + cross-entropy, one chunk of tokens at a\n"
            "                     time, saving the final norm output and an f32 log-sum-exp per token;\n"
            "                     full: the [b,s,V] logits and f32 probabilities    (default: chunked)\n"
            "  --loss-chunk N     tokens per chunk (ignored with --loss full)       (default: 0)\n"
            "                     0: the trainer's rule, the largest multiple of 64 tokens whose\n"
            "                     [N,V] logits are no larger than the [b x s,h] final hidden state,\n"
            "                     at least 64; a chunk larger than b x s is b x s\n"
            "  --tflops X         effective TFLOP/s for the per-op time estimate    (default: %g)\n"
            "  --mem-bw X         effective memory bandwidth, GB/s, for the same    (default: %g)\n"
            "  -o, --output FILE  where to write the profile (atomically)           (required)\n\n"
            "example: smartswap trace gen --model llama-3.2-1b --batch 4 --seq 2048 -o llama1b.jsonl\n",
            d.batch, d.seq, d.dtype_bytes, d.device_flops / 1e12, d.device_bw / 1e9);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: smartswap trace gen ... -o FILE     a synthetic profile (smartswap trace gen --help)\n"
            "       smartswap trace stats FILE [--json] [--tokens N]\n"
            "                                           totals of a profile file: ops, saved tensors,\n"
            "                                           peak activation bytes, FLOPs, saved bytes by layer\n"
            "       smartswap trace models              the model presets and their sources\n");
}


static int cmd_models(void) {
    printf("%-14s %-6s %6s %6s %5s %4s %6s %7s %5s  %s\n", "model", "arch", "layers", "hidden", "heads", "kv",
           "ffn", "vocab", "tied", "source");
    for (size_t i = 0; ssi_workload_preset_at(i); i++) {
        const ssi_workload_preset_info *m = ssi_workload_preset_at(i);
        printf("%-14s %-6s %6u %6u %5u %4u %6u %7u %5s  %s\n", m->name, m->arch == SSI_WORKLOAD_GPT2 ? "gpt2" : "llama",
               m->layers, m->hidden, m->heads, m->kv_heads, m->ffn, m->vocab, m->tied ? "yes" : "no", m->source);
    }
    return 0;
}

/* Parses an unsigned flag value into *out within [lo, hi]. */

static int cmd_gen(int argc, char **argv) {
    const char *C = "trace gen", *HINT = "see 'smartswap trace gen --help'";
    ssi_workload_config c;
    ssi_workload_default(&c);
    const char *out = NULL, *v;
    cli_model m = {0};
    int tied = -1;
    for (int i = 1; i < argc;) {
        const char *a = argv[i];
        int r;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage_gen(stdout); return 0; }
        if (!strcmp(a, "--tied")) { tied = 1; i++; continue; }
        if (!strcmp(a, "-o")) {
            if (i + 1 >= argc) { cli_error(C, HINT, "-o needs a file name"); return 2; }
            out = argv[i + 1];
            i += 2;
            continue;
        }
#define FLAG(name) ((r = cli_flag(argc, argv, &i, name, &v)) < 0 ? 2 : r)
        if ((r = cli_model_flag(C, argc, argv, &i, &m, &c)) < 0) return 2; else if (r) continue;
        if (FLAG("output") == 2) return 2; else if (r) { out = v; continue; }
        if (FLAG("tflops") == 2) return 2; else if (r) {
            double x;
            if (cli_double(C, "tflops", v, 1e-3, 1e6, &x)) return 2;
            c.device_flops = x * 1e12;
            continue;
        }
        if (FLAG("mem-bw") == 2) return 2; else if (r) {
            double x;
            if (cli_double(C, "mem-bw", v, 1e-3, 1e6, &x)) return 2;
            c.device_bw = x * 1e9;
            continue;
        }
#undef FLAG
        if (a[0] == '-') cli_error(C, HINT, "unknown flag '%s'", a);
        else cli_error(C, HINT, "unexpected argument '%s' (the output file is given with -o)", a);
        return 2;
    }
    if (cli_model_apply(C, &m, &c)) return 2;
    if (tied >= 0) c.tied = tied;
    if (!out) {
        cli_error(C, "add -o FILE", "no output file");
        return 2;
    }
    char err[300];
    if (ssi_workload_validate(&c, err, sizeof err) != SS_OK) {
        cli_error(C, HINT, "%s", err);
        return 2;
    }
    ss_options o;
    if (cli_options_init(C, &o)) return 1;
    ss_profile *p = NULL;
    ss_status st = ssi_workload_generate(&c, &p, NULL, err, sizeof err);
    if (st) {
        cli_error(C, st == SS_ERR_INVALID ? HINT : NULL, "%s", err);
        return st == SS_ERR_INVALID ? 2 : 1;
    }
    st = ssi_profile_write(p, out, err, sizeof err);
    if (st) {
        cli_error(C, "check that the folder exists and is writable", "%s", err);
        ssi_profile_free(p);
        return 1;
    }
    ssi_profile_stats s;
    ssi_profile_stats_get(p, &s);
    char b1[32], b2[32];
    printf("wrote %s: %s\n  %u ops, %u saved tensors (%s), peak activations %s, %.4g FLOPs\n", out, p->desc,
           s.ops, s.saved_tensors, ss_format_size(s.saved_bytes, b1, sizeof b1),
           ss_format_size(s.peak_activation_bytes, b2, sizeof b2), s.flops);
    ssi_profile_free(p);
    return 0;
}

/* The name of the operator that produced tensor t, or "-" for none. */
static const char *producer_name(const ss_profile *p, uint32_t t) {
    if (t == SS_NONE || t >= p->ntensors || p->tensors[t].producer >= p->nops) return "-";
    return p->names[p->ops[p->tensors[t].producer].name];
}

static void json_layers(ssi_jl_writer *w, cJSON *o, const ss_profile *p, const ssi_profile_layers *L,
                        uint64_t tokens, const char *tokens_from) {
    if (tokens) ssi_jl_put_u64(w, o, "tokens", tokens); else ssi_jl_put_null(w, o, "tokens");
    if (tokens_from) ssi_jl_put_str(w, o, "tokens_from", tokens_from); else ssi_jl_put_null(w, o, "tokens_from");
    ssi_jl_put_u64(w, o, "layers", L->layers);
    if (L->layers) {
        ssi_jl_put_u64(w, o, "layer_ops", L->block_ops);
        ssi_jl_put_u64(w, o, "layers_first_op", L->first_op);
        ssi_jl_put_u64(w, o, "layers_end_op", L->end_op);
        ssi_jl_put_u64(w, o, "layer_saved_bytes", L->saved_max);
        ssi_jl_put_u64(w, o, "layer_saved_bytes_min", L->saved_min);
        ssi_jl_put_u64(w, o, "layers_saved_bytes", L->saved_layers);
        if (tokens) ssi_jl_put_double(w, o, "layer_saved_bytes_per_token", (double)L->saved_max / (double)tokens);
        else ssi_jl_put_null(w, o, "layer_saved_bytes_per_token");
        if (L->largest != SS_NONE) {
            ssi_jl_put_u64(w, o, "layer_largest_saved_bytes", p->tensors[L->largest].bytes);
            ssi_jl_put_u64(w, o, "layer_largest_saved_tensor", L->largest);
            ssi_jl_put_str(w, o, "layer_largest_saved_op", producer_name(p, L->largest));
            ssi_jl_put_double(w, o, "layer_largest_saved_share",
                              L->largest_layer_saved ? (double)p->tensors[L->largest].bytes / (double)L->largest_layer_saved : 0);
        }
    }
    ssi_jl_put_u64(w, o, "before_layers_saved_bytes", L->saved_before);
    ssi_jl_put_u64(w, o, "loss_saved_bytes", L->saved_after);
    if (tokens) ssi_jl_put_double(w, o, "loss_saved_bytes_per_token", (double)L->saved_after / (double)tokens);
    else ssi_jl_put_null(w, o, "loss_saved_bytes_per_token");
    if (L->max_saved_loss != SS_NONE) {
        ssi_jl_put_u64(w, o, "loss_largest_saved_bytes", p->tensors[L->max_saved_loss].bytes);
        ssi_jl_put_str(w, o, "loss_largest_saved_op", producer_name(p, L->max_saved_loss));
    }
    ssi_jl_put_u64(w, o, "elsewhere_saved_bytes", L->saved_elsewhere);
    if (L->max_saved != SS_NONE) {
        ssi_jl_put_u64(w, o, "largest_saved_bytes", p->tensors[L->max_saved].bytes);
        ssi_jl_put_u64(w, o, "largest_saved_tensor", L->max_saved);
        ssi_jl_put_str(w, o, "largest_saved_op", producer_name(p, L->max_saved));
    }
}

static int print_json(const char *file, const ss_profile *p, const ssi_profile_stats *s, const ssi_profile_layers *L,
                      uint64_t tokens, const char *tokens_from) {
    ssi_jl_writer w;
    ssi_jl_writer_init(&w);
    cJSON *o = ssi_jl_obj(&w);
    ssi_jl_put_str(&w, o, "file", file);
    ssi_jl_put_str(&w, o, "desc", p->desc);
    ssi_jl_put_u64(&w, o, "ops", s->ops);
    ssi_jl_put_u64(&w, o, "ops_fwd", s->ops_phase[SS_PHASE_FWD]);
    ssi_jl_put_u64(&w, o, "ops_bwd", s->ops_phase[SS_PHASE_BWD]);
    ssi_jl_put_u64(&w, o, "ops_opt", s->ops_phase[SS_PHASE_OPT]);
    ssi_jl_put_u64(&w, o, "ops_other", s->ops_phase[SS_PHASE_OTHER]);
    ssi_jl_put_u64(&w, o, "tensors", s->tensors);
    ssi_jl_put_u64(&w, o, "saved_tensors", s->saved_tensors);
    ssi_jl_put_u64(&w, o, "temp_tensors", s->temp_tensors);
    ssi_jl_put_u64(&w, o, "noswap_tensors", s->noswap_tensors);
    ssi_jl_put_u64(&w, o, "saved_bytes", s->saved_bytes);
    ssi_jl_put_u64(&w, o, "temp_bytes", s->temp_bytes);
    ssi_jl_put_u64(&w, o, "base_bytes", s->base_bytes);
    ssi_jl_put_u64(&w, o, "peak_bytes", s->peak_bytes);
    ssi_jl_put_u64(&w, o, "peak_activation_bytes", s->peak_activation_bytes);
    if (s->peak_op == SS_NONE) ssi_jl_put_null(&w, o, "peak_op");
    else ssi_jl_put_u64(&w, o, "peak_op", s->peak_op);
    ssi_jl_put_u64(&w, o, "max_saved_alive_bytes", s->max_saved_alive_bytes);
    ssi_jl_put_double(&w, o, "flops", s->flops);
    ssi_jl_put_double(&w, o, "flops_fwd", s->flops_phase[SS_PHASE_FWD]);
    ssi_jl_put_double(&w, o, "flops_bwd", s->flops_phase[SS_PHASE_BWD]);
    ssi_jl_put_double(&w, o, "flops_opt", s->flops_phase[SS_PHASE_OPT]);
    ssi_jl_put_double(&w, o, "op_seconds", s->op_seconds);
    ssi_jl_put_double(&w, o, "iter_seconds", s->iter_seconds);
    ssi_jl_put_hex(&w, o, "seq_hash", p->seq_hash);
    ssi_jl_put_hex(&w, o, "size_sig", p->size_sig);
    json_layers(&w, o, p, L, tokens, tokens_from);
    ssi_jl_line(&w, o);
    char *buf;
    size_t len;
    if (ssi_jl_writer_take(&w, &buf, &len)) { cli_error("trace stats", NULL, "out of memory"); return 1; }
    fwrite(buf, 1, len, stdout);
    if (!len || buf[len - 1] != '\n') putchar('\n');
    free(buf);
    return 0;
}

static void print_layers(const ss_profile *p, const ssi_profile_layers *L, uint64_t tokens, const char *tokens_from) {
    char a[32], b[32];
    if (tokens) printf("tokens:       %llu (%s)\n", (unsigned long long)tokens, tokens_from);
    else printf("tokens:       unknown (give --tokens N for per-token figures)\n");
    if (!L->layers) {
        printf("layers:       no repeated block of forward operators found (per-layer figures need 2 or more)\n");
    } else {
        printf("layers:       %u, a block of %u forward operators repeated (ops %u..%u)\n", L->layers, L->block_ops,
               L->first_op, L->end_op - 1);
        printf("per layer:    %s saved", ss_format_size(L->saved_max, a, sizeof a));
        if (L->saved_min != L->saved_max) printf(" (the smallest layer %s)", ss_format_size(L->saved_min, b, sizeof b));
        if (tokens) printf(", %.6g bytes per token", (double)L->saved_max / (double)tokens);
        printf("; all layers %s\n", ss_format_size(L->saved_layers, a, sizeof a));
        if (L->largest != SS_NONE)
            printf("largest:      %s (%s, layer %u), %.1f %% of its layer's saved bytes\n",
                   ss_format_size(p->tensors[L->largest].bytes, a, sizeof a), producer_name(p, L->largest),
                   L->largest_layer,
                   L->largest_layer_saved ? 100.0 * (double)p->tensors[L->largest].bytes / (double)L->largest_layer_saved : 0);
    }
    printf("outside:      %s saved before the layers, %s after them (final norm and loss", ss_format_size(L->saved_before, a, sizeof a),
           ss_format_size(L->saved_after, b, sizeof b));
    if (tokens) printf(", %.6g bytes per token", (double)L->saved_after / (double)tokens);
    if (L->max_saved_loss != SS_NONE)
        printf("; largest %s from %s", ss_format_size(p->tensors[L->max_saved_loss].bytes, a, sizeof a),
               producer_name(p, L->max_saved_loss));
    printf(")");
    if (L->saved_elsewhere) printf(", %s outside the forward phase", ss_format_size(L->saved_elsewhere, a, sizeof a));
    printf("\n");
    if (L->max_saved != SS_NONE)
        printf("largest saved: %s (tensor %u, from %s)\n", ss_format_size(p->tensors[L->max_saved].bytes, a, sizeof a),
               L->max_saved, producer_name(p, L->max_saved));
}

static int cmd_stats(int argc, char **argv) {
    const char *C = "trace stats", *file = NULL;
    int json = 0;
    uint64_t tokens = 0;
    for (int i = 1; i < argc;) {
        const char *v;
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: smartswap trace stats FILE [--json] [--tokens N]\n"
                   "  prints the totals of a profile file: operators by phase, saved tensors and bytes,\n"
                   "  peak activation bytes, FLOPs, estimated time; and saved bytes by layer (layers are\n"
                   "  found as the repeated block of forward operators): per layer, per token, the largest\n"
                   "  saved tensor and its share of its layer, what the loss saves.\n"
                   "  --json      one JSON object instead of text              (default: text)\n"
                   "  --tokens N  tokens of the iteration, for per-token figures (default: b x s from a\n"
                   "              'trace gen' profile's desc; else none)\n");
            return 0;
        }
        if (!strcmp(argv[i], "--json")) { json = 1; i++; continue; }
        if ((r = cli_flag(argc, argv, &i, "tokens", &v))) {
            long x;
            if (r < 0 || cli_int(C, "tokens", v, 1, 1L << 62, &x)) return 2;
            tokens = (uint64_t)x;
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            cli_error(C, "the flags are --json and --tokens N", "unknown flag '%s'", argv[i]);
            return 2;
        }
        if (file) { cli_error(C, "give one profile file", "more than one file ('%s', '%s')", file, argv[i]); return 2; }
        file = argv[i++];
    }
    if (!file) { cli_error(C, "smartswap trace stats FILE [--json]", "no profile file given"); return 2; }
    ss_options o;
    if (cli_options_init(C, &o)) return 1;
    ss_profile *p = NULL;
    char err[400];
    ss_status st = ssi_profile_read(file, &p, err, sizeof err);
    if (st) {
        cli_error(C, st == SS_ERR_FORMAT ? "the file is not a valid smartswap profile (docs/trace-format.md)" : NULL,
                  "%s", err);
        return 1;
    }
    ssi_profile_stats s;
    ssi_profile_stats_get(p, &s);
    ssi_profile_layers L;
    if (ssi_profile_layers_get(p, &L)) {
        cli_error(C, NULL, "out of memory finding the layers of %s", file);
        ssi_profile_free(p);
        return 1;
    }
    const char *tokens_from = tokens ? "--tokens" : NULL;
    if (!tokens && (tokens = ssi_profile_desc_tokens(p->desc))) tokens_from = "b x s in the desc";
    int rc = 0;
    if (json) rc = print_json(file, p, &s, &L, tokens, tokens_from);
    else {
        char a[32], b[32], d[32];
        printf("profile:      %s\n", file);
        printf("desc:         %s\n", p->desc[0] ? p->desc : "(none)");
        printf("ops:          %u (forward %u, backward %u, optimizer %u, other %u)\n", s.ops,
               s.ops_phase[0], s.ops_phase[1], s.ops_phase[2], s.ops_phase[3]);
        printf("tensors:      %u saved (%s), %u temporaries (%s), %u not swappable\n", s.saved_tensors,
               ss_format_size(s.saved_bytes, a, sizeof a), s.temp_tensors, ss_format_size(s.temp_bytes, b, sizeof b),
               s.noswap_tensors);
        printf("peak:         %s of activations", ss_format_size(s.peak_activation_bytes, a, sizeof a));
        if (s.peak_op != SS_NONE)
            printf(" after op %u (%s)", s.peak_op, p->names[p->ops[s.peak_op].name]);
        printf("; %s with the base %s\n", ss_format_size(s.peak_bytes, b, sizeof b),
               ss_format_size(s.base_bytes, d, sizeof d));
        printf("saved alive:  at most %s\n", ss_format_size(s.max_saved_alive_bytes, a, sizeof a));
        printf("flops:        %.4g (forward %.4g, backward %.4g, optimizer %.4g)\n", s.flops,
               s.flops_phase[0], s.flops_phase[1], s.flops_phase[2]);
        printf("time:         %.4g s per iteration (sum over ops %.4g s)\n", s.iter_seconds, s.op_seconds);
        printf("sequence:     hash 0x%016llx, size signature 0x%llx\n", (unsigned long long)p->seq_hash,
               (unsigned long long)p->size_sig);
        print_layers(p, &L, tokens, tokens_from);
    }
    ssi_profile_free(p);
    return rc;
}

int cmd_trace(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) { usage(stdout); return 0; }
    if (!strcmp(sub, "gen")) return cmd_gen(argc - 1, argv + 1);
    if (!strcmp(sub, "stats")) return cmd_stats(argc - 1, argv + 1);
    if (!strcmp(sub, "models")) return cmd_models();
    cli_error("trace", "the subcommands are gen, stats and models", "unknown subcommand '%s'", sub);
    usage(stderr);
    return 2;
}
