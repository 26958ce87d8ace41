/* cmd-train.c: `smartswap train`: trains the reference Llama-style model (gpt/) on byte-level
 * text, in eager mode, on a smartswap device under a memory budget, and reports one
 * fixed-format line per step. The operator sequence can vary between iterations the way real
 * training varies it (--seq S1:S2, --moe E:K, --eval-every N, --accum N, the lazily created
 * optimizer state), and the smartswap context's plans can be kept across runs (--save-plan,
 * --plan). Memory modes: none (everything resident), recompute (layers re-run in backward),
 * smartswap (saved blocks handed to a smartswap context with the executor on: plans, prefetch,
 * predicted-point release, eviction fallback) and offload-all (the save_on_cpu baseline through
 * the same executor). In the swapping modes cpu-sim's link is calibrated per run
 * (docs/performance-model.md) unless --d2h-gbps / --h2d-gbps give it.
 */
#include "calib.h"
#include "ops.h"
#include "cli.h"
#include "data.h"
#include "kernels.h"
#include "mem-ss.h"
#include "model.h"
#include "smartswap-exec.h"
#include "smartswap-plans.h"
#include "tape-ss.h"
#include "tape-swap.h"
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define CMD "train"

static void usage(FILE *f) {
    fprintf(f,
            "usage: smartswap train [flags]\n\n"
            "Trains a Llama-style decoder (RMSNorm, rotary attention with grouped KV heads, SwiGLU)\n"
            "on byte-level text in eager mode, one operator at a time, on a smartswap device.\n\n"
            "model:\n"
            "  --layers N        decoder layers (default 2)\n"
            "  --hidden H        model width (default 64)\n"
            "  --heads A         attention heads; H/A must be even (default 4)\n"
            "  --kv-heads K      key/value heads; A must be a multiple (default 2)\n"
            "  --ffn F           SwiGLU width (default 172)\n"
            "  --moe E:K         mixture-of-experts MLP: E SwiGLU experts, top-K routing (default: dense)\n"
            "  --attention A     flash (online softmax over key blocks; saves the output and the\n"
            "                    log-sum-exp) | naive (saves the T x T probabilities) (default flash)\n"
            "  --loss L          chunked (logits and cross-entropy a chunk of tokens at a time; saves the\n"
            "                    final hidden state and the log-sum-exp) | full (saves the B x T x V\n"
            "                    probabilities) (default chunked)\n"
            "  --loss-chunk N    tokens per loss chunk (default: the largest multiple of 64 whose logits\n"
            "                    are no larger than the final hidden state, at least 64)\n"
            "training:\n"
            "  --seq S|S1:S2     tokens per sequence; S1:S2 draws it per micro-batch from [S1,S2]\n"
            "                    (seeded; default 64)\n"
            "  --batch B         sequences per micro-batch (default 4)\n"
            "  --accum N         micro-batches per optimizer step (gradient accumulation; default 1)\n"
            "  --eval-every N    a forward-only evaluation iteration after every N steps (default 0: none)\n"
            "  --steps N         optimizer steps (default 20; 0 with --save-weights writes the initial weights)\n"
            "  --lr X            AdamW learning rate (default 3e-3)\n"
            "  --seed N          weights and batches (default 1)\n"
            "  --data FILE       training text (default: fortunes + Jargon File from Debian, else the\n"
            "                    project's sources)\n"
            "memory:\n"
            "  --device NAME     cpu-sim (default), or cuda / cuda:N (the CUDA kernels, built with SS_CUDA=1);\n"
            "                    fault:cpu-sim wraps cpu-sim in the fault device (SMARTSWAP_FAULT, docs/testing.md)\n"
            "  --dtype T         fp32 (default); bf16: activations stored as bf16 (half the bytes),\n"
            "                    matrix products on bf16 operands with fp32 accumulation; weights,\n"
            "                    gradients and AdamW state stay fp32\n"
            "  --budget SIZE     device bytes for everything the trainer uses: weights, gradients, AdamW\n"
            "                    moments, activations (default: the device's capacity)\n"
            "  --mode MODE       none | recompute | smartswap | offload-all (default none)\n"
            "  --plan FILE       start from the plans of an earlier run (written by --save-plan): known\n"
            "                    sequences skip warm-up and profiling\n"
            "  --save-plan FILE  write the smartswap context's cached plans after the last step\n"
            "  --swap-only       smartswap: swap only (default: the hybrid, which recomputes what the link\n"
            "                    cannot hide: norm outputs, SwiGLU products, rotary q and k, ...)\n"
            "  --no-poison       smartswap, offload-all: do not fill swapped-out blocks with NaNs (a check of\n"
            "                    cpu-sim's, not work a device does; benchmarks use it, tests do not)\n"
            "  --no-sizes        do not declare each step's sequence lengths to smartswap before the step\n"
            "                    (default: declared, so a new longest length is planned before its first save)\n"
            "  --min-swap SIZE   smartswap: saved tensors smaller than this stay resident (default: B x S1 x H\n"
            "                    bytes, at most 64KiB; SMARTSWAP_MIN_SWAP also sets it)\n"
            "  --host-mem SIZE   cap on host memory for swapped tensors (default: none)\n"
            "  --plan-headroom F smartswap: plan for the budget less F x (budget - state), a margin for what the\n"
            "                    planner does not see (default 0: none was measured necessary, docs/trainer.md)\n"
            "  --segment SIZE    allocator segment size (default with --budget: 256B below twice the smallest\n"
            "                    budget and for the hybrid, else (budget - state)/32 as a power of two,\n"
            "                    256B..2MiB; else 2MiB)\n"
            "link (cpu-sim, swapping modes):\n"
            "  --ratio-scale X   multiply the reference copy:compute ratio (Llama-2-7B on H200 over 55 GB/s,\n"
            "                    1.131); e.g. 0.122 for a 450 GB/s NVLink-C2C-class link (default 1)\n"
            "  --calib-steps N   steps of the calibration pass that measures compute time and saved bytes\n"
            "                    (the first is not measured; default 3)\n"
            "  --d2h-gbps X, --h2d-gbps X   set the link instead of calibrating it\n"
            "output:\n"
            "  --log FILE        one JSON object per step\n"
            "  --timeline FILE   smartswap/offload-all: the last step's compute, D2H and H2D lanes as a\n"
            "                    Chrome trace (Perfetto opens it; docs/executor.md)\n"
            "  --save-weights FILE  the weights after the last step (GPTW v1, docs/trainer.md)\n"
            "  --threads N       OpenMP threads (default: OMP_NUM_THREADS or all cores)\n"
            "  --quiet           no per-step lines (summary only)\n\n"
            "Documented in docs/trainer.md.\n");
}

static void progress(int step, int steps, double elapsed) {
    int width = 30, done = steps ? (int)((long)width * step / steps) : width;
    double eta = step ? elapsed / step * (steps - step) : 0;
    fprintf(stderr, "\r[");
    for (int i = 0; i < width; i++) fputc(i < done ? '=' : (i == done ? '>' : ' '), stderr);
    fprintf(stderr, "] %d/%d  %.0fs left ", step, steps, eta);
    fflush(stderr);
}

static void clear_progress(void) {
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
}

typedef struct flags {
    gpt_config  cfg;
    long        steps, seed, threads, accum, eval_every;
    int         seq_min;
    double      lr;
    const char *data, *device, *log, *save, *plan_in, *plan_out, *timeline;
    const char *dtype;     /* "fp32" or "bf16" (cfg.dtype: the activations' storage, gpt/model.c) */
    uint64_t    budget, min_swap, host_mem;
    int         mode, quiet, min_swap_set, host_mem_set, budget_given, swap_only, no_sizes, no_poison;
    double      ratio_scale, d2h_gbps, h2d_gbps, headroom;
    uint64_t    segment;
    long        calib_steps;
} flags;

/* "A:B" with lo <= A <= B <= hi (or a single number A when single is allowed: B = A). */
static int parse_pair(const char *flag, const char *v, long lo, long hi, int single, long *a, long *b) {
    char *end;
    long x = strtol(v, &end, 10);
    if (end != v && *end == 0 && single) {
        if (x < lo || x > hi) goto bad;
        *a = *b = x;
        return 0;
    }
    if (end == v || *end != ':') goto bad;
    const char *w = end + 1;
    long y = strtol(w, &end, 10);
    if (end == w || *end != 0 || x < lo || y < lo || x > hi || y > hi || (single && x > y)) goto bad;
    *a = x;
    *b = y;
    return 0;
bad:
    cli_error(CMD, single ? "give S or S1:S2 with 1 <= S1 <= S2" : "give E:K with 1 <= K <= E <= 64",
              "--%s: bad value '%s'", flag, v);
    return 1;
}

/* 0 ok, 2 bad usage (already reported), 3 --help */
static int parse(int argc, char **argv, flags *fl) {
    gpt_config *c = &fl->cfg;
    *c = gpt_config_default();
    fl->steps = 20; fl->seed = 1; fl->threads = 0; fl->lr = 3e-3; fl->accum = 1; fl->eval_every = 0;
    fl->seq_min = 0;
    fl->dtype = "fp32";
    fl->data = NULL; fl->device = "cpu-sim"; fl->log = NULL; fl->save = NULL;
    fl->plan_in = NULL; fl->plan_out = NULL; fl->timeline = NULL;
    fl->budget = 0; fl->mode = GPT_MODE_NONE; fl->quiet = 0; fl->swap_only = 0; fl->no_sizes = 0; fl->no_poison = 0;
    fl->min_swap = 0; fl->host_mem = 0; fl->min_swap_set = fl->host_mem_set = fl->budget_given = 0;
    fl->ratio_scale = 0; fl->d2h_gbps = fl->h2d_gbps = 0; fl->calib_steps = 3;
    fl->headroom = GPT_PLAN_HEADROOM; fl->segment = 0;
    for (int i = 1; i < argc;) {
        const char *v;
        long n;
        int r;
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 3;
        if (!strcmp(a, "--quiet")) { fl->quiet = 1; i++; continue; }
        if (!strcmp(a, "--swap-only")) { fl->swap_only = 1; i++; continue; }
        if (!strcmp(a, "--no-poison")) { fl->no_poison = 1; i++; continue; }
        if (!strcmp(a, "--no-sizes")) { fl->no_sizes = 1; i++; continue; }
        long pa, pb;
        if ((r = cli_flag(argc, argv, &i, "seq", &v))) {
            if (r < 0 || parse_pair("seq", v, 1, 1 << 20, 1, &pa, &pb)) return 2;
            fl->seq_min = (int)pa;
            c->seq = (int)pb;
            continue;
        }
        if ((r = cli_flag(argc, argv, &i, "attention", &v))) {
            if (r < 0) return 2;
            if ((c->attention = gpt_attention_parse(v)) < 0) {
                cli_error(CMD, "the attentions are flash, naive", "--attention: unknown value '%s'", v);
                return 2;
            }
            continue;
        }
        if ((r = cli_flag(argc, argv, &i, "loss", &v))) {
            if (r < 0) return 2;
            if ((c->loss = gpt_loss_parse(v)) < 0) {
                cli_error(CMD, "the losses are chunked, full", "--loss: unknown value '%s'", v);
                return 2;
            }
            continue;
        }
        if ((r = cli_flag(argc, argv, &i, "moe", &v))) {
            if (r < 0 || parse_pair("moe", v, 1, 64, 0, &pa, &pb)) return 2;
            c->moe_experts = (int)pa;
            c->moe_topk = (int)pb;
            if (pb > pa) { cli_error(CMD, "K picks among the E experts", "--moe %s: K > E", v); return 2; }
            continue;
        }
        struct { const char *name; int *dst; long lo, hi; } ints[] = {
            {"layers", &c->layers, 1, 4096}, {"hidden", &c->hidden, 2, 1 << 16}, {"heads", &c->heads, 1, 4096},
            {"kv-heads", &c->kv_heads, 1, 4096}, {"ffn", &c->ffn, 1, 1 << 18},
            {"batch", &c->batch, 1, 1 << 20}, {"loss-chunk", &c->loss_chunk, 1, 1 << 30}};
        int matched = 0;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0] && !matched; k++) {
            r = cli_flag(argc, argv, &i, ints[k].name, &v);
            if (r < 0) return 2;
            if (r == 0) continue;
            if (cli_int(CMD, ints[k].name, v, ints[k].lo, ints[k].hi, &n)) return 2;
            *ints[k].dst = (int)n;
            matched = 1;
        }
        if (matched) continue;
        if ((r = cli_flag(argc, argv, &i, "steps", &v))) {
            if (r < 0 || cli_int(CMD, "steps", v, 0, 100000000, &fl->steps)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "seed", &v))) {
            if (r < 0 || cli_int(CMD, "seed", v, 0, 0x7fffffffL, &fl->seed)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "accum", &v))) {
            if (r < 0 || cli_int(CMD, "accum", v, 1, 1 << 16, &fl->accum)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "eval-every", &v))) {
            if (r < 0 || cli_int(CMD, "eval-every", v, 0, 100000000, &fl->eval_every)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "plan", &v))) {
            if (r < 0) return 2;
            fl->plan_in = v;
        } else if ((r = cli_flag(argc, argv, &i, "timeline", &v))) {
            if (r < 0) return 2;
            fl->timeline = v;
        } else if ((r = cli_flag(argc, argv, &i, "save-plan", &v))) {
            if (r < 0) return 2;
            fl->plan_out = v;
        } else if ((r = cli_flag(argc, argv, &i, "threads", &v))) {
            if (r < 0 || cli_int(CMD, "threads", v, 1, 1024, &fl->threads)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "lr", &v))) {
            if (r < 0 || cli_double(CMD, "lr", v, 0, 10, &fl->lr)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "budget", &v))) {
            if (r < 0 || cli_size(CMD, "budget", v, &fl->budget)) return 2;
            fl->budget_given = 1;
        } else if ((r = cli_flag(argc, argv, &i, "min-swap", &v))) {
            if (r < 0 || cli_size(CMD, "min-swap", v, &fl->min_swap)) return 2;
            fl->min_swap_set = 1;
        } else if ((r = cli_flag(argc, argv, &i, "host-mem", &v))) {
            if (r < 0 || cli_size(CMD, "host-mem", v, &fl->host_mem)) return 2;
            fl->host_mem_set = 1;
        } else if ((r = cli_flag(argc, argv, &i, "plan-headroom", &v))) {
            if (r < 0 || cli_double(CMD, "plan-headroom", v, 0, 0.9, &fl->headroom)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "segment", &v))) {
            if (r < 0 || cli_segment(CMD, v, &fl->segment)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "ratio-scale", &v))) {
            if (r < 0 || cli_double(CMD, "ratio-scale", v, 0.001, 1000, &fl->ratio_scale)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "d2h-gbps", &v))) {
            if (r < 0 || cli_double(CMD, "d2h-gbps", v, 1e-6, 1e6, &fl->d2h_gbps)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "h2d-gbps", &v))) {
            if (r < 0 || cli_double(CMD, "h2d-gbps", v, 1e-6, 1e6, &fl->h2d_gbps)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "calib-steps", &v))) {
            if (r < 0 || cli_int(CMD, "calib-steps", v, 2, 1000, &fl->calib_steps)) return 2;
        } else if ((r = cli_flag(argc, argv, &i, "mode", &v))) {
            if (r < 0) return 2;
            fl->mode = gpt_mode_parse(v);
            if (fl->mode < 0) {
                cli_error(CMD, "the modes are none, recompute, smartswap, offload-all", "--mode: unknown mode '%s'", v);
                return 2;
            }
        } else if ((r = cli_flag(argc, argv, &i, "data", &v))) {
            if (r < 0) return 2;
            fl->data = v;
        } else if ((r = cli_flag(argc, argv, &i, "device", &v))) {
            if (r < 0) return 2;
            fl->device = v;
        } else if ((r = cli_flag(argc, argv, &i, "dtype", &v))) {
            if (r < 0) return 2;
            if (strcmp(v, "fp32") && strcmp(v, "bf16")) {
                cli_error(CMD, "the types are fp32 (default), bf16", "--dtype: unknown value '%s'", v);
                return 2;
            }
            fl->dtype = v;
            fl->cfg.dtype = strcmp(v, "bf16") ? GPT_DTYPE_F32 : GPT_DTYPE_BF16;
        } else if ((r = cli_flag(argc, argv, &i, "log", &v))) {
            if (r < 0) return 2;
            fl->log = v;
        } else if ((r = cli_flag(argc, argv, &i, "save-weights", &v))) {
            if (r < 0) return 2;
            fl->save = v;
        } else {
            cli_error(CMD, "smartswap train --help lists the flags", "unknown argument '%s'", a);
            return 2;
        }
    }
    if (!fl->seq_min) fl->seq_min = c->seq;
    if (fl->seq_min > c->seq) {
        cli_error(CMD, "give --seq S1:S2 with S1 <= S2", "--seq: %d > %d", fl->seq_min, c->seq);
        return 2;
    }
    return 0;
}

/* The smallest budgets of a run in `unit` (256 B with plain segments, else the granule): the
 * swapping modes' (mb) and, in none and recompute, the mode's own (mbm; else mbm = mb). */
static int probe_floors(const gpt_config *c, const gpt_schedule *psch, int mode, int swapping, uint64_t min_swap,
                        uint64_t unit, gpt_min_budget *mb, gpt_min_budget *mbm, char *err, size_t errlen) {
    if (gpt_min_budget_probe(c, psch, min_swap, unit, mb, err, errlen) ||
        (!swapping && gpt_min_budget_probe_mode(c, psch, mode, min_swap, unit, mbm, err, errlen)))
        return 1;
    if (swapping) *mbm = *mb;
    return 0;
}

/* probe_floors at the run's min-swap, and the floor printed as the smallest budget (fb). Without
 * --min-swap and SMARTSWAP_MIN_SWAP (auto_ms) the trainer's default min-swap is a preference, not
 * a floor: fb is the figure with every saved tensor swappable (min-swap 1 B), and a budget below
 * the default's own figure (dflt) lowers *min_swap to 1 B, whose figures mb and mbm then are. */
static int probe_run_floors(const gpt_config *c, const gpt_schedule *psch, int mode, int swapping, int auto_ms,
                            uint64_t budget, uint64_t *min_swap, uint64_t unit, gpt_min_budget *mb,
                            gpt_min_budget *mbm, gpt_min_budget *fb, gpt_min_budget *dflt, char *err,
                            size_t errlen) {
    if (probe_floors(c, psch, mode, swapping, *min_swap, unit, mb, mbm, err, errlen)) return 1;
    *fb = *dflt = *mb;
    if (!swapping || !auto_ms || *min_swap <= 1) return 0;
    gpt_min_budget lo, lom;
    if (probe_floors(c, psch, mode, swapping, 1, unit, &lo, &lom, err, errlen)) return 1;
    *fb = lo;
    if (budget < mbm->min_budget_bytes) {
        *mb = lo;
        *mbm = lom;
        *min_swap = 1;
    }
    return 0;
}

int cmd_train(int argc, char **argv) {
    flags fl;
    int pr = parse(argc, argv, &fl);
    if (pr == 3) { usage(stdout); return 0; }
    if (pr) return 2;
    gpt_config *c = &fl.cfg;
    char err[512], a[32], b[32], d[32];
    if (gpt_config_check(c, err, sizeof err)) {
        cli_error(CMD, "check --hidden, --heads, --kv-heads", "%s", err);
        return 2;
    }
    /* --device cuda: the kernels of gpt/ops-cuda.c on the cuda device; without the CUDA build or
     * without a GPU, one line naming CUDA, exit 1 (issue 17) */
    const gpt_ops *ops = NULL;
    int on_cuda = !strncmp(fl.device, "cuda", 4);
    if (on_cuda) {
        char why[560] = "";
#ifdef SS_GPT_CUDA
        char have[256], absent[512];
        const char *nogpu;
        if (ss_device_list(have, sizeof have, absent, sizeof absent) == SS_OK &&
            (nogpu = strstr(absent, "cuda (")) != NULL)
            snprintf(why, sizeof why, "%.*s", (int)strcspn(nogpu + 6, ")"), nogpu + 6);
        else if (!(ops = gpt_ops_cuda(err, sizeof err)))
            snprintf(why, sizeof why, "%s", err);
#else
        snprintf(why, sizeof why, "%s", !strstr(ss_build_features(), "cuda")
                 ? "this smartswap was built without the CUDA toolkit (use --device cpu-sim)"
                 : "this smartswap was built without nvcc, so without the trainer's CUDA kernels (use --device cpu-sim)");
#endif
        if (!ops) {
            cli_error(CMD, NULL, "--device %s: CUDA: %s", fl.device, why);
            return 1;
        }
        /* a routing makes up to E + E/2 expert runs; the cuda combine takes a bounded number */
        if (c->moe_experts && ops->moe_runs_max && c->moe_experts + c->moe_experts / 2 > ops->moe_runs_max) {
            cli_error(CMD, "use fewer experts, or --device cpu-sim",
                      "--moe %d: on --device %s at most %d experts (%d expert runs, the combine kernel's limit)",
                      c->moe_experts, fl.device, (2 * ops->moe_runs_max + 1) / 3, ops->moe_runs_max);
            return 2;
        }
    }
    if (strcmp(fl.device, "cpu-sim") && strcmp(fl.device, "fault:cpu-sim") && !on_cuda) {
        cli_error(CMD, "the trainer runs on --device cpu-sim, cuda (or fault:cpu-sim, the fault sweep's)",
                  "--device: unknown device '%s'", fl.device);
        return 2;
    }
    int swapping = fl.mode == GPT_MODE_SMARTSWAP || fl.mode == GPT_MODE_OFFLOAD_ALL;
    if (fl.timeline && !swapping) {
        cli_error(CMD, "use --mode smartswap or offload-all, or drop --timeline",
                  "--timeline: the %s mode has no executor whose copies it could record", gpt_mode_name((gpt_mode)fl.mode));
        return 2;
    }
    ss_options opts;
    if (cli_options_init(CMD, &opts)) return 2;
    if (fl.ratio_scale > 0) opts.sim_ratio_scale = fl.ratio_scale;
    if (fl.host_mem_set) opts.host_mem_bytes = fl.host_mem;
    int auto_ms = !fl.min_swap_set && !getenv("SMARTSWAP_MIN_SWAP");   /* the trainer's default */
    if (fl.min_swap_set) opts.min_swap_bytes = fl.min_swap;
    else if (auto_ms) opts.min_swap_bytes = gpt_min_swap_default(c, fl.seq_min);
    uint64_t ms_default = opts.min_swap_bytes;
    if (fl.threads > 0) {
#ifdef _OPENMP
        omp_set_num_threads((int)fl.threads);
#endif
    }
    /* the budget: everything the trainer puts on the device */
    uint64_t state = gpt_state_bytes(c);
    if (!fl.budget) fl.budget = opts.budget_bytes ? opts.budget_bytes : opts.sim_capacity_bytes;
    if (fl.budget < state) {
        cli_error(CMD, "raise --budget (activations need room on top of the state) or make the model smaller",
                  "--budget %s is below the model's own state: %s (weights, gradients and AdamW moments of "
                  "%llu parameters, RoPE tables); the minimum is %llu bytes",
                  gpt_fmt_bytes(fl.budget, a, sizeof a), gpt_fmt_bytes(state, b, sizeof b),
                  (unsigned long long)gpt_param_count(c), (unsigned long long)state);
        return 1;
    }
    /* the smallest budget that trains this configuration in this mode (gpt_min_budget_probe_mode):
     * refused below it before anything runs, in every mode (none and recompute swap nothing: their
     * figure counts every saved tensor resident, recompute's with its re-run layers) */
    gpt_schedule psch = {c->batch, fl.seq_min, c->seq, (int)fl.accum, (int)fl.eval_every, (uint64_t)fl.seed,
                         (float)fl.lr};
    gpt_min_budget mb;
    gpt_min_budget mbm;   /* this mode's own: none and recompute keep their saved tensors */
    gpt_min_budget mbf;   /* the floor printed and logged (probe_run_floors) */
    gpt_min_budget mbd;   /* the default min-swap's figure, when the budget lowered it */
    /* counted in the allocator's unit: 256 B with plain segments; with granules (option
     * granule) the granule this budget's allocator will use (ss_alloc_granule_for: raised to
     * budget / 16384 and to the device's page). The device is not open yet, so the page assumed
     * here is the host's, the smallest any device has; the cuda device's own (the driver's
     * allocation granularity, 2 MiB on current GPUs) is known once the allocator exists, and
     * the figures are counted again in it before step 1 (below). Assuming 2 MiB here refused
     * runs that the device's real granule trains. With no budget given, the granule of the
     * figure itself, so that a run at the printed figure counts as this one did */
    int have_budget = fl.budget_given || opts.budget_bytes;
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t vmg = pg > 0 ? (uint64_t)pg : 4096;
    uint64_t unit = opts.granule_bytes ? ss_alloc_granule_for(opts.granule_bytes, have_budget ? fl.budget : state, vmg)
                                       : 256;
    for (int round = 0;; round++) {
        opts.min_swap_bytes = ms_default;
        if (probe_run_floors(c, &psch, fl.mode, swapping, auto_ms, fl.budget, &opts.min_swap_bytes, unit, &mb, &mbm,
                             &mbf, &mbd, err, sizeof err)) {
            cli_error(CMD, NULL, "the smallest-budget probe failed: %s", err);
            return 1;
        }
        uint64_t u2 = opts.granule_bytes && !have_budget ? ss_alloc_granule_for(opts.granule_bytes, mbm.min_budget_bytes, vmg) : unit;
        if (u2 <= unit || round == 8) break;
        unit = u2;
    }
    char refusal[512];
    if (gpt_min_budget_refuse(&mbm, fl.budget, refusal, sizeof refusal)) {
        cli_error(CMD,
                  swapping ? (auto_ms ? "raise --budget to at least the smallest budget, or lower --batch or --seq"
                                      : "raise --budget to at least the smallest budget, or lower --min-swap, --batch or --seq")
                           : "raise --budget to at least the smallest budget, or use --mode smartswap or offload-all (they swap saved tensors out, so theirs is lower)",
                  "%s", refusal);
        return 1;
    }
    /* the hybrid (swap or recompute per tensor) holds what it rebuilds, unswappable, beside the
     * operator that needs it: its own smallest budget (gpt_min_budget_probe_hybrid) is higher.
     * Between the two figures the run goes on as --swap-only, which the lower one covers (a
     * budget at or above the smallest trains), and says so */
    gpt_min_budget mbh = mb;
    int demoted = 0;
    if (fl.mode == GPT_MODE_SMARTSWAP && !fl.swap_only) {
        if (gpt_min_budget_probe_hybrid(c, &psch, opts.min_swap_bytes, unit, &mbh, err, sizeof err)) {
            cli_error(CMD, NULL, "the smallest-budget probe failed: %s", err);
            return 1;
        }
        if (fl.budget < mbh.min_budget_bytes) { fl.swap_only = 1; demoted = 1; }
        if (mbh.host_bytes > mb.host_bytes) mb.host_bytes = mbh.host_bytes;
    }
    /* a pinned-host cap below what swapping may hold: refused here, never a host-pool error
     * after training has started (docs/trainer.md, "Host memory") */
    if (swapping && gpt_host_mem_refuse(&mb, opts.host_mem_bytes, refusal, sizeof refusal)) {
        char hint[128];
        snprintf(hint, sizeof hint, "raise --host-mem to at least %llu (or give no cap), or use --mode recompute",
                 (unsigned long long)mb.host_bytes);
        cli_error(CMD, hint, "%s", refusal);
        return 1;
    }
    /* data */
    gpt_data data;
    if (fl.data ? gpt_data_load_file(&data, fl.data, err, sizeof err) : gpt_data_load_default(&data, err, sizeof err)) {
        cli_error(CMD, "pass a readable text file with --data", "%s", err);
        return 1;
    }
    if (data.n < (size_t)c->seq + 2) {
        cli_error(CMD, "use a longer text or a smaller --seq", "the text has %zu bytes; --seq %d needs at least %d",
                  data.n, c->seq, c->seq + 2);
        gpt_data_free(&data);
        return 1;
    }
    gpt_schedule sch = {c->batch, fl.seq_min, c->seq, (int)fl.accum, (int)fl.eval_every, (uint64_t)fl.seed,
                        (float)fl.lr};
    /* the swapping modes: cpu-sim's link, calibrated on this machine for this workload unless
     * both directions are given (docs/performance-model.md) */
    gpt_calib cal;
    memset(&cal, 0, sizeof cal);
    double calib_s = 0;
    if (swapping && !on_cuda && (fl.d2h_gbps <= 0 || fl.h2d_gbps <= 0)) {   /* cuda: the real link */
        double t0 = gpt_now_s();
        if (gpt_calib_measure(c, &data, &sch, (uint64_t)fl.seed, (int)fl.calib_steps, opts.sim_ratio_scale, &cal, err,
                              sizeof err)) {
            cli_error(CMD, "give the link with --d2h-gbps and --h2d-gbps to skip the calibration", "%s", err);
            gpt_data_free(&data);
            return 1;
        }
        calib_s = gpt_now_s() - t0;
    }
    if (swapping) {
        if (fl.d2h_gbps > 0 || cal.steps) opts.sim_d2h_gbps = fl.d2h_gbps > 0 ? fl.d2h_gbps : cal.gbps;
        if (fl.h2d_gbps > 0 || cal.steps) opts.sim_h2d_gbps = fl.h2d_gbps > 0 ? fl.h2d_gbps : cal.gbps;
        /* the policy plans for the budget less a headroom (as the replay driver does): the
         * recorded profile folds each operator's temporaries into one block, and the real
         * allocator fragments more than the simulated one */
        opts.budget_bytes = gpt_plan_budget(fl.budget, state, fl.headroom);
    }
    gpt_mem mem;
    /* below twice the smallest budget, and for the hybrid at any budget: exact-size segments
     * (256 B: one per block, never split), under which 'any budget at or above the smallest
     * trains' holds (no fragmentation; gpt_mem_segment_for_mode says why the hybrid) */
    uint64_t segment = fl.segment ? fl.segment
                       : !(fl.budget_given || opts.budget_bytes) ? 0
                       : opts.granule_bytes ? gpt_mem_segment_for(fl.budget, state)   /* granules: not the rule */
                       : gpt_mem_segment_for_mode(fl.budget, state, mbm.min_budget_bytes,
                                                  fl.mode == GPT_MODE_SMARTSWAP && !fl.swap_only);
    if (gpt_mem_init_ss_ex(&mem, fl.device, &opts, fl.budget, segment, err, sizeof err)) {
        cli_error(CMD, NULL, "%s", err);
        gpt_data_free(&data);
        return 1;
    }
    ss_alloc_config eff;
    if (opts.granule_bytes && have_budget && ss_alloc_get_config(gpt_mem_ss_alloc(&mem), &eff) == SS_OK &&
        eff.granule_bytes && eff.granule_bytes != unit) {
        /* the device's granule is not the one the figures were counted in: count again */
        unit = eff.granule_bytes;
        opts.min_swap_bytes = ms_default;
        int bad = probe_run_floors(c, &psch, fl.mode, swapping, auto_ms, fl.budget, &opts.min_swap_bytes, unit, &mb,
                                   &mbm, &mbf, &mbd, err, sizeof err);
        if (!bad && fl.mode == GPT_MODE_SMARTSWAP && !fl.swap_only && !demoted)
            bad = gpt_min_budget_probe_hybrid(c, &psch, opts.min_swap_bytes, unit, &mbh, err, sizeof err);
        if (bad) cli_error(CMD, NULL, "the smallest-budget probe failed: %s", err);
        else if (gpt_min_budget_refuse(&mbm, fl.budget, refusal, sizeof refusal))
            cli_error(CMD, "raise --budget to at least the smallest budget", "%s (in granules of %llu bytes)", refusal,
                      (unsigned long long)unit);
        if (bad || fl.budget < mbm.min_budget_bytes) {
            gpt_mem_destroy(&mem);
            gpt_data_free(&data);
            return 1;
        }
        if (fl.mode == GPT_MODE_SMARTSWAP && !fl.swap_only && fl.budget < mbh.min_budget_bytes) { fl.swap_only = 1; demoted = 1; }
    }
    mem.ops = ops;   /* NULL: host memory and the CPU kernels (cpu-sim) */
    /* none, recompute: saved tensors stay resident (gpt_keep); every call is also reported to a
     * smartswap framework context, which profiles the operator sequence and runs its stage
     * machine. smartswap, offload-all: every saved block is handed to a context with the
     * executor on (tape-swap.c), which may copy it out, free it and bring it back. */
    gpt_ssprof prof;
    gpt_ssswap sw;
    memset(&prof, 0, sizeof prof);
    memset(&sw, 0, sizeof sw);
    gpt_hooks hooks;
    ss_ctx_t *ctx;
    if (swapping) {
        mem.budget = 0;   /* the allocator's budget rules: gpt_mem still counts swapped-out blocks */
        ss_status est = SS_OK;
        ss_exec_config ec = ss_exec_config_default();
        ec.mode = fl.mode == GPT_MODE_SMARTSWAP ? SS_SWAP_SMARTSWAP : SS_SWAP_OFFLOAD_ALL;
        ec.hybrid = fl.mode == GPT_MODE_SMARTSWAP && !fl.swap_only;   /* swap or recompute per tensor */
        if (fl.no_poison) ec.poison = 0;
        if (gpt_ssswap_init(&sw, &mem, &opts) ||
            (est = ss_ctx_enable_swap_ex(sw.ctx, &ec))) {
            if (est) cli_error(CMD, NULL, "ss_ctx_enable_swap: %s", ss_status_str(est));
            else cli_error(CMD, NULL, "%s", sw.err);
            gpt_ssswap_free(&sw);
            gpt_mem_destroy(&mem);
            gpt_data_free(&data);
            return 1;
        }
        hooks = gpt_hooks_ssswap(&sw);
        ctx = sw.ctx;
    } else {
        if (gpt_ssprof_init(&prof, &mem, &opts)) {
            cli_error(CMD, NULL, "%s", prof.err);
            gpt_mem_destroy(&mem);
            gpt_data_free(&data);
            return 1;
        }
        hooks = gpt_hooks_ssprof(&prof);
        ctx = prof.ctx;
    }
    const ss_iter_report *lastrep = swapping ? &sw.last : &prof.last;
    gpt_model m;
    memset(&m, 0, sizeof m);
    int rc = 0, have_model = 0;
    FILE *log = NULL;
    gpt_batch_buf bb = {NULL, NULL};
    if (gpt_batch_buf_init(&bb, &sch)) { cli_error(CMD, NULL, "out of host memory"); rc = 1; goto out; }
    have_model = 1;
    if (gpt_model_init(&m, c, &mem, &hooks, (gpt_mode)fl.mode, (uint64_t)fl.seed)) {
        cli_error(CMD, "raise --budget", "%s", m.errmsg);
        rc = 1;
        goto out_model;
    }
    uint32_t plans_loaded = 0;
    if (fl.plan_in) {
        ss_status pst = ss_ctx_plans_load(ctx, fl.plan_in, &plans_loaded, err, sizeof err);
        if (pst) {
            cli_error(CMD, "pass a file written by smartswap train --save-plan, or drop --plan",
                      "--plan: %s (%s)", err, ss_status_str(pst));
            rc = 1;
            goto out_model;
        }
    }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("smartswap train: Llama-style decoder, eager mode, byte-level tokens\n");
    printf("  model    layers %d  hidden %d  heads %d  kv-heads %d  head %d  ffn %d  vocab %d  params %llu\n",
           c->layers, c->hidden, c->heads, c->kv_heads, c->hidden / c->heads, c->ffn, c->vocab,
           (unsigned long long)gpt_param_count(c));
    if (c->loss == GPT_LOSS_CHUNKED && c->loss_chunk)
        printf("  ops      attention %s  loss chunked (%d tokens a chunk)\n", gpt_attention_name(c->attention), c->loss_chunk);
    else if (c->loss == GPT_LOSS_CHUNKED)
        printf("  ops      attention %s  loss chunked (%d tokens a chunk at %d x %d)\n", gpt_attention_name(c->attention),
               gpt_loss_chunk(c, c->batch * c->seq), c->batch, c->seq);
    else
        printf("  ops      attention %s  loss full\n", gpt_attention_name(c->attention));
    if (c->dtype == GPT_DTYPE_BF16)
        printf("  dtype    bf16 activations (2 bytes an element; per-row statistics fp32), matrix products on bf16 "
               "operands with fp32 accumulation; weights, gradients, AdamW state fp32\n");
    else
        printf("  dtype    fp32\n");
    if (c->moe_experts)
        printf("  moe      %d experts, top-%d routing (softmax gate, renormalised top-k weights; idle experts "
               "run no operator)\n", c->moe_experts, c->moe_topk);
    if (fl.seq_min < c->seq)
        printf("  batch    %d x %d..%d tokens (drawn per micro-batch)", c->batch, fl.seq_min, c->seq);
    else
        printf("  batch    %d x %d tokens", c->batch, c->seq);
    printf("  accum %ld  steps %ld  lr %g  seed %ld  AdamW(%.2f, %.3f, wd %.2f, state created at step 1)\n",
           fl.accum, fl.steps, fl.lr, fl.seed, c->beta1, c->beta2, c->weight_decay);
    if (fl.eval_every) printf("  eval     forward-only iteration after every %ld steps\n", fl.eval_every);
    printf("  memory   device %s  budget %s  state %s  mode %s  allocator %s (segments %s)\n", fl.device,
           gpt_fmt_bytes(fl.budget, a, sizeof a), gpt_fmt_bytes(state, b, sizeof b), gpt_mode_name((gpt_mode)fl.mode),
           mem.be.name, gpt_fmt_bytes(segment ? segment : ss_alloc_config_default().segment_bytes, d, sizeof d));
    if (swapping) {
        printf("  swap     %s executor  min-swap %s  host-mem %s  release %s  plan headroom %.0f %% of the room above the state%s\n",
               fl.mode == GPT_MODE_SMARTSWAP ? (fl.swap_only ? "smartswap --swap-only (plans, prefetch, eviction fallback)"
                                                             : "smartswap (plans: swap or recompute, prefetch, eviction fallback)")
                                             : "offload-all (every saved tensor out at save, back at load)",
               gpt_fmt_bytes(opts.min_swap_bytes, a, sizeof a),
               opts.host_mem_bytes ? gpt_fmt_bytes(opts.host_mem_bytes, b, sizeof b) : "no cap",
               opts.release_mode ? "stock" : "predicted", 100.0 * fl.headroom,
               fl.no_poison ? "  poisoning of swapped-out blocks off (--no-poison)" : "");
        if (demoted)
            printf("  hybrid   off: the budget is below the hybrid's own smallest budget %s (%llu bytes; what it "
                   "rebuilds stays resident, working set %s at %s), so this run swaps only (--swap-only)\n",
                   gpt_fmt_bytes(mbh.min_budget_bytes, a, sizeof a), (unsigned long long)mbh.min_budget_bytes,
                   gpt_fmt_bytes(mbh.work_bytes, d, sizeof d), mbh.op);
        if (on_cuda)
            printf("  link     %s: the real host link (copies on the device's copy streams)\n", fl.device);
        else if (cal.steps)
            printf("  link     cpu-sim d2h %.4g GB/s  h2d %.4g GB/s  (calibrated: a step saves %s and computes "
                   "%.1f ms here, mean of %d steps; copy:compute %.3f x ratio-scale %g as for %s; pass took %.1f s)\n",
                   opts.sim_d2h_gbps, opts.sim_h2d_gbps, gpt_fmt_bytes((uint64_t)cal.saved_bytes, d, sizeof d),
                   cal.compute_s * 1e3, cal.steps, cal.ratio, cal.scale, ss_calib_default().name, calib_s);
        else
            printf("  link     cpu-sim d2h %.4g GB/s  h2d %.4g GB/s  (given by --d2h-gbps/--h2d-gbps)\n",
                   opts.sim_d2h_gbps, opts.sim_h2d_gbps);
    }
    printf("  smallest budget %s (%llu bytes) = state %s + the largest working set of one operator %s (%s%s, at "
           "%d tokens a row%s)\n", gpt_fmt_bytes(mbf.min_budget_bytes, a, sizeof a),
           (unsigned long long)mbf.min_budget_bytes, gpt_fmt_bytes(mbf.state_bytes, b, sizeof b),
           gpt_fmt_bytes(mbf.work_bytes, d, sizeof d), mbf.op, mbf.backward ? ", backward" : "", mbf.seq,
           c->moe_experts ? ", every token routed to one expert" : "");
    if (swapping && auto_ms && opts.min_swap_bytes < ms_default)
        printf("  min-swap lowered to 1 B (every saved tensor may be swapped): the budget is below %s (%llu bytes), "
               "the smallest budget at the default min-swap %s\n", gpt_fmt_bytes(mbd.min_budget_bytes, b, sizeof b),
               (unsigned long long)mbd.min_budget_bytes, gpt_fmt_bytes(ms_default, a, sizeof a));
    else if (swapping && auto_ms && mbf.min_budget_bytes < mbd.min_budget_bytes)
        printf("  min-swap %s by default; a budget below %s (%llu bytes) lowers it to 1 B (every saved tensor may be "
               "swapped)\n", gpt_fmt_bytes(ms_default, a, sizeof a), gpt_fmt_bytes(mbd.min_budget_bytes, b, sizeof b),
               (unsigned long long)mbd.min_budget_bytes);
    if (swapping)
        printf("  host need %s (%llu bytes): the most pinned host memory swapping can hold (every saved tensor's "
               "host copy at once); a --host-mem cap below it is refused\n", gpt_fmt_bytes(mb.host_bytes, a, sizeof a),
               (unsigned long long)mb.host_bytes);
    if (!swapping)
        printf("  smallest budget in mode %s %s (%llu bytes: saved tensors stay resident; working set %s at %s)\n",
               gpt_mode_name((gpt_mode)fl.mode), gpt_fmt_bytes(mbm.min_budget_bytes, a, sizeof a),
               (unsigned long long)mbm.min_budget_bytes, gpt_fmt_bytes(mbm.work_bytes, d, sizeof d), mbm.op);
    if (fl.plan_in) printf("  plans    %u loaded from %s\n", plans_loaded, fl.plan_in);
    printf("  data     %s, %zu bytes\n", data.source, data.n);
    if (on_cuda) printf("  kernels  %s (on the device's compute stream)\n", ops->describe());
    else printf("  kernels  %s, %d thread%s\n", gpt_kernels_describe(), threads, threads == 1 ? "" : "s");
    fflush(stdout);
    if (fl.log && !(log = fopen(fl.log, "w"))) {
        cli_error(CMD, "check the directory exists and is writable", "--log: cannot write '%s'", fl.log);
        rc = 1;
        goto out_model;
    }
    int bar = isatty(2) && !fl.quiet;
    double t_start = gpt_now_s(), t_steady = 0, first_loss = 0, last_loss = 0, last_eval = 0;
    uint64_t peak_max = 0, act_peak_max = 0, tok_steady = 0, evals = 0;
    int steady_n = 0, prof_warned = 0, iter = 0;
    static const char *const events[] = {"-", "same", "hit", "new", "pending"};
    long total = fl.steps + (fl.eval_every ? fl.steps / fl.eval_every : 0);
    for (long s = 0, done = 0; s < fl.steps; s++) {
        for (int ev = 0; ev < 2; ev++) {
            if (ev == 1 && !(fl.eval_every && (s + 1) % fl.eval_every == 0)) break;
            if (fl.timeline && swapping && s == fl.steps - 1 && ev == 0) ss_ctx_exec_timeline(ctx, 1);
            /* sizes up front: the step's sequence lengths, one per micro-batch (an evaluation:
             * the longest), before its iteration begins (ss_ctx_sizes) */
            if (!fl.no_sizes) {
                uint32_t nl = ev ? 1 : (uint32_t)(sch.accum < 1 ? 1 : sch.accum);
                int64_t *lens = malloc(nl * sizeof *lens);
                for (uint32_t j = 0; lens && j < nl; j++) lens[j] = ev ? sch.seq_max : gpt_sched_seq(&sch, (int)s, (int)j);
                ss_status zst = lens ? ss_ctx_sizes(ctx, lens, nl) : SS_ERR_HOST_OOM;
                free(lens);
                if (zst) { cli_error(CMD, NULL, "ss_ctx_sizes: %s", ss_status_str(zst)); rc = 1; goto out_model; }
            }
            double t0 = gpt_now_s();
            float loss;
            int e = ev ? gpt_eval_step(&m, &data, &sch, (int)evals, iter, &bb, &loss)
                       : gpt_train_step(&m, &data, &sch, (int)s, &bb, &loss);
            iter++;
            done++;
            if (!e && swapping && sw.err[0]) {
                snprintf(m.errmsg, sizeof m.errmsg, "smartswap context: %s", sw.err);
                e = 1;
            }
            if (e) {
                if (bar) clear_progress();
                cli_error(CMD, swapping ? "raise --budget (or --host-mem), or lower --min-swap so that more can be swapped"
                                        : "raise --budget, or use --mode smartswap or recompute to keep fewer activations",
                          "%s %ld: %s", ev ? "evaluation after step" : "step", ev ? s + 1 : s, m.errmsg);
                rc = 1;
                goto out_model;
            }
            double ms = (gpt_now_s() - t0) * 1e3;
            const char *stage = prof.failed ? "off" : ss_stage_name(lastrep->stage);
            const char *pev = prof.failed || (unsigned)lastrep->plan_event > 4 ? "-" : events[lastrep->plan_event];
            ss_exec_report er;
            memset(&er, 0, sizeof er);
            if (swapping) ss_ctx_exec_report(ctx, &er);
            if (prof.failed && !prof_warned) {
                if (bar) clear_progress();
                fprintf(stderr, "smartswap train: warning: %s\n", prof.err);
                prof_warned = 1;
            }
            double tps = (double)m.stats.tokens / (ms * 1e-3);
            /* device peak: the trainer's own count, or, when blocks are swapped out, the allocator's
             * bytes in use as the executor saw them (gpt_mem still counts swapped-out blocks) */
            uint64_t peak = swapping ? er.peak_bytes : m.stats.peak_bytes;
            if (peak > peak_max) peak_max = peak;
            if (m.stats.act_peak_bytes > act_peak_max) act_peak_max = m.stats.act_peak_bytes;
            if (ev) {
                evals++;
                last_eval = loss;
            } else {
                if (s == 0) first_loss = loss;
                else { t_steady += ms; steady_n++; tok_steady += m.stats.tokens; }
                last_loss = loss;
            }
            if (!fl.quiet) {
                if (bar) clear_progress();
                if (ev)
                    printf("eval  %5ld/%ld | loss %.6f | %8.1f ms | %9.0f tok/s | peak %10s | swapped %10s | stage %s | plan %s",
                           s + 1, fl.steps, loss, ms, tps, gpt_fmt_bytes(peak, a, sizeof a),
                           gpt_fmt_bytes(er.swapped_out_bytes, d, sizeof d), stage, pev);
                else
                    printf("step  %5ld/%ld | loss %.6f | %8.1f ms | %9.0f tok/s | peak %10s | swapped %10s | stage %s | plan %s",
                           s + 1, fl.steps, loss, ms, tps, gpt_fmt_bytes(peak, a, sizeof a),
                           gpt_fmt_bytes(er.swapped_out_bytes, d, sizeof d), stage, pev);
                if (swapping) printf(" | evict %u | stall %u", er.evictions, er.stalls);
                printf("\n");
                fflush(stdout);
            }
            if (log) {
                fprintf(log, "{\"step\": %ld, \"kind\": \"%s\", \"iter\": %d, \"loss\": %.9g, \"loss_hex\": \"%a\", "
                             "\"ms\": %.3f, \"tokens\": %llu, \"tokens_per_s\": %.1f, \"micro\": %llu, "
                             "\"peak_bytes\": %llu, \"act_peak_bytes\": %llu, \"swapped_bytes\": %llu, "
                             "\"swapped_in_bytes\": %llu, \"evictions\": %u, \"evicted_bytes\": %llu, \"stalls\": %u, "
                             "\"stall_ms\": %.3f, \"misses\": %u, \"stage\": \"%s\", "
                             "\"mode\": \"%s\", \"ops\": %llu, \"saved_bytes\": %llu, \"experts_run\": %llu, "
                             "\"experts_idle\": %llu, \"op_hash\": \"%016llx\", \"ss_seq_hash\": \"%016llx\", "
                             "\"ss_plan_event\": %d, \"detailed\": %s, \"state_bytes\": %llu, \"min_budget_bytes\": %llu, "
                             "\"host_need_bytes\": %llu, \"recomputed_tensors\": %llu, \"recomputed_bytes\": %llu}\n",
                        s + 1, ev ? "eval" : "train", iter - 1, loss, loss, ms, (unsigned long long)m.stats.tokens, tps,
                        (unsigned long long)m.stats.micro, (unsigned long long)peak,
                        (unsigned long long)m.stats.act_peak_bytes, (unsigned long long)er.swapped_out_bytes,
                        (unsigned long long)er.swapped_in_bytes, er.evictions, (unsigned long long)er.evicted_bytes,
                        er.stalls, er.stall_s * 1e3, er.misses, stage, gpt_mode_name((gpt_mode)fl.mode),
                        (unsigned long long)m.stats.ops, (unsigned long long)m.stats.saved_bytes,
                        (unsigned long long)m.stats.experts_run, (unsigned long long)m.stats.experts_idle,
                        (unsigned long long)(swapping ? sw.op_hash : prof.keep.op_hash),
                        (unsigned long long)lastrep->seq_hash, (int)lastrep->plan_event,
                        !prof.failed && lastrep->detailed ? "true" : "false", (unsigned long long)state,
                        (unsigned long long)mbf.min_budget_bytes, (unsigned long long)mb.host_bytes,
                        (unsigned long long)m.stats.rebuilt, (unsigned long long)m.stats.rebuilt_bytes);
                fflush(log);
            }
            if (bar) progress((int)done, (int)total, gpt_now_s() - t_start);
        }
    }
    if (bar) clear_progress();
    if (fl.save && gpt_save_weights(&m, fl.save)) {
        cli_error(CMD, "check the path", "--save-weights: %s", m.errmsg);
        rc = 1;
        goto out_model;
    }
    if (fl.timeline) {
        ss_status tst = ss_ctx_exec_timeline_write(ctx, fl.timeline);
        if (tst) {
            cli_error(CMD, "check the directory exists and is writable", "--timeline: cannot write '%s' (%s)",
                      fl.timeline, ss_status_str(tst));
            rc = 1;
            goto out_model;
        }
    }
    uint32_t plans_saved = 0;
    if (fl.plan_out) {
        ss_status pst = ss_ctx_plans_save(ctx, fl.plan_out, &plans_saved, err, sizeof err);
        if (pst) {
            cli_error(CMD, "check the path", "--save-plan: %s (%s)", err, ss_status_str(pst));
            rc = 1;
            goto out_model;
        }
    }
    {
        ss_alloc_stats as;
        memset(&as, 0, sizeof as);
        ss_alloc_get_stats(gpt_mem_ss_alloc(&mem), &as);
        ss_ctx_stats cs;
        memset(&cs, 0, sizeof cs);
        ss_ctx_get_stats(ctx, &cs);
        ss_exec_report tot;
        memset(&tot, 0, sizeof tot);
        if (swapping) ss_ctx_exec_totals(ctx, &tot);
        /* the true peak: the allocator's bytes in use at its highest, everything included */
        if (swapping && as.peak_in_use_bytes > peak_max) peak_max = as.peak_in_use_bytes;
        double mean = steady_n ? t_steady / steady_n : 0;
        printf("summary: %ld steps in %.2f s | loss %.6f -> %.6f | %.1f ms/step, %.0f tok/s (after step 1)\n", fl.steps,
               gpt_now_s() - t_start, first_loss, last_loss, mean, t_steady > 0 ? tok_steady / (t_steady * 1e-3) : 0);
        if (evals) printf("  %llu evaluation iterations, last eval loss %.6f\n", (unsigned long long)evals, last_eval);
        printf("  device peak %s of %s budget (state %s, activations %s %s; allocator reserved peak %s) | "
               "swapped %s | mode %s\n", gpt_fmt_bytes(peak_max, a, sizeof a), gpt_fmt_bytes(fl.budget, b, sizeof b),
               gpt_fmt_bytes(state, d, sizeof d), swapping ? "demand" : "peak", gpt_fmt_bytes(act_peak_max, err, 32),
               gpt_fmt_bytes(as.peak_reserved_bytes, err + 64, 32), gpt_fmt_bytes(tot.swapped_out_bytes, err + 128, 32),
               gpt_mode_name((gpt_mode)fl.mode));
        printf("  smallest budget %s (%llu bytes; state %s + working set %s at %s)\n",
               gpt_fmt_bytes(mbf.min_budget_bytes, a, sizeof a), (unsigned long long)mbf.min_budget_bytes,
               gpt_fmt_bytes(mbf.state_bytes, b, sizeof b), gpt_fmt_bytes(mbf.work_bytes, d, sizeof d), mbf.op);
        if (swapping)
            printf("  executor: swapped out %s, in %s (%u out, %u in) | evictions %u (%s) | stalls %u (%.1f ms) | "
                   "misses %u | host pool peak %s | host-full %u\n",
                   gpt_fmt_bytes(tot.swapped_out_bytes, a, sizeof a), gpt_fmt_bytes(tot.swapped_in_bytes, b, sizeof b),
                   tot.swap_outs, tot.swap_ins, tot.evictions, gpt_fmt_bytes(tot.evicted_bytes, d, sizeof d), tot.stalls,
                   tot.stall_s * 1e3, tot.misses, gpt_fmt_bytes(tot.host_peak_bytes, err, 32), tot.host_full);
        printf("  smartswap context: %llu iterations (%llu warmup, %llu detailed), plans made %llu, cached %llu, "
               "cache hits %llu at iteration end + %llu in flight, misses %llu%s\n", (unsigned long long)cs.iters,
               (unsigned long long)cs.iters_warmup, (unsigned long long)cs.detailed_iters,
               (unsigned long long)cs.plans_made, (unsigned long long)cs.cache_entries,
               (unsigned long long)cs.cache_hits, (unsigned long long)cs.mid_switches,
               (unsigned long long)cs.cache_misses, prof.failed ? " (profiling stopped: see the warning)" : "");
        printf("  plans by kind: %llu iterations under their own detailed plan (exact), %llu under a derived one "
               "(derived: the structure's envelope, or their sizes' plan), %llu matched (under the envelope by fuzzy "
               "matching, experts skipped; or growing it; or under another size's plan); %llu plans derived "
               "from new sizes without detail (%llu of them ahead, for a declared longest length), %llu missed live; "
               "%llu re-timed (made again with their profile's operator seconds scaled to their Stable iterations' "
               "own time)\n",
               (unsigned long long)cs.hits_exact,
               (unsigned long long)cs.hits_derived, (unsigned long long)cs.hits_matched,
               (unsigned long long)cs.derived, (unsigned long long)cs.sized_ahead, (unsigned long long)cs.derive_misses,
               (unsigned long long)cs.retimed);
        if (swapping) {
            /* machine-readable totals for scripts (make demo) */
            printf("totals: mode=%s budget=%llu peak=%llu swapped_out=%llu swapped_in=%llu evictions=%u stalls=%u "
                   "stall_ms=%.3f misses=%u plans_cached=%llu plans_made=%llu cache_hits=%llu mid_switches=%llu "
                   "tok_per_s=%.1f d2h_gbps=%.6g host_peak=%llu detailed=%llu warmup=%llu hits_exact=%llu "
                   "hits_derived=%llu hits_matched=%llu derived=%llu swap_outs=%u\n", gpt_mode_name((gpt_mode)fl.mode),
                   (unsigned long long)fl.budget,
                   (unsigned long long)peak_max, (unsigned long long)tot.swapped_out_bytes,
                   (unsigned long long)tot.swapped_in_bytes, tot.evictions, tot.stalls, tot.stall_s * 1e3, tot.misses,
                   (unsigned long long)cs.cache_entries, (unsigned long long)cs.plans_made,
                   (unsigned long long)cs.cache_hits, (unsigned long long)cs.mid_switches,
                   t_steady > 0 ? tok_steady / (t_steady * 1e-3) : 0,
                   opts.sim_d2h_gbps, (unsigned long long)tot.host_peak_bytes, (unsigned long long)cs.detailed_iters,
                   (unsigned long long)cs.iters_warmup, (unsigned long long)cs.hits_exact,
                   (unsigned long long)cs.hits_derived, (unsigned long long)cs.hits_matched,
                   (unsigned long long)cs.derived, tot.swap_outs);
        } else {
            printf("totals: mode=%s budget=%llu peak=%llu swapped_out=0 swapped_in=0 evictions=0 stalls=0 stall_ms=0 "
                   "misses=0 plans_cached=%llu plans_made=%llu cache_hits=%llu mid_switches=%llu tok_per_s=%.1f "
                   "d2h_gbps=0\n", gpt_mode_name((gpt_mode)fl.mode), (unsigned long long)fl.budget,
                   (unsigned long long)peak_max, (unsigned long long)cs.cache_entries, (unsigned long long)cs.plans_made,
                   (unsigned long long)cs.cache_hits, (unsigned long long)cs.mid_switches,
                   t_steady > 0 ? tok_steady / (t_steady * 1e-3) : 0);
        }
        if (fl.plan_out) printf("  %u plans written to %s\n", plans_saved, fl.plan_out);
        printf("  last iteration: %llu operators reported, %llu tensors saved (%s)%s%s\n", (unsigned long long)m.stats.ops,
               (unsigned long long)m.stats.saves, gpt_fmt_bytes(m.stats.saved_bytes, a, sizeof a),
               fl.save ? "; weights written to " : "", fl.save ? fl.save : "");
    }
out_model:
    if (have_model) gpt_model_free(&m);
out:
    if (log && fclose(log)) { cli_error(CMD, NULL, "--log: writing '%s' failed", fl.log); rc = 1; }
    if (swapping) gpt_ssswap_free(&sw);
    else gpt_ssprof_free(&prof);
    gpt_mem_destroy(&mem);
    gpt_data_free(&data);
    gpt_batch_buf_free(&bb);
    return rc;
}
