/* cmd-simulate.c: `smartswap simulate`: five memory strategies side by side on a generated
 * training iteration of any model on any device preset, and how far each one scales.
 *
 *   smartswap simulate --model P|dims --device D --batch B --seq S [--budget SIZE] [--host-mem SIZE]
 *                      [--json] [--plot FILE] [--sweep batch|seq|hidden] [--min-speed X]
 *
 * The cost models are in src/strategy.c and docs/simulate.md. The plot is drawn by gnuplot from a
 * data file and a script written to a temporary folder (removed afterwards).
 */
#include "cli.h"
#include "presets.h"
#include "strategy.h"
#include "workload.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *const C = "simulate";
static const char *const HINT = "see 'smartswap simulate --help'";

static void usage(FILE *f) {
    fprintf(f,
            "usage: smartswap simulate (--model NAME | --layers N --hidden N --heads N --ffn N --vocab N)\n"
            "                          [--device D] [--batch B] [--seq S] [flags]\n"
            "  generates one training iteration (forward, backward, AdamW) and simulates five memory\n"
            "  strategies on it: no saving, full recomputation, offload of every saved tensor without\n"
            "  prefetch (torch's save_on_cpu), smartswap swapping only, and the smartswap hybrid (swap or\n"
            "  recompute per saved tensor); each with peak device memory, host memory,\n"
            "  step time, stall time and tokens/s. docs/simulate.md explains the cost models.\n\n"
            "model:\n"
            "  --model NAME        preset ('smartswap trace models' lists them)\n"
            "  --layers/--hidden/--heads/--kv-heads/--ffn/--vocab N   explicit dims (override the preset's)\n"
            "  --arch llama|gpt2   with explicit dims                         (default: llama)\n"
            "  --dtype-bytes 2|4   bf16 or f32                                (default: 2)\n"
            "  --moe E:K           mixture of experts                        (default: dense)\n"
            "  --attention A       flash or naive (saves the a*s^2 scores)   (default: flash)\n"
            "  --no-flash          the same as --attention naive\n"
            "  --loss L            chunked (fused LM head + cross-entropy, one chunk of tokens at a\n"
            "                      time) or full (the [b,s,V] logits)        (default: chunked)\n"
            "  --loss-chunk N      tokens per chunk, ignored with --loss full (default: 0)\n"
            "                      0: the trainer's rule, the largest multiple of 64 tokens whose\n"
            "                      [N,V] logits are no larger than the [b x s,h] final hidden\n"
            "                      state, at least 64; a chunk larger than b x s is b x s\n"
            "run:\n"
            "  --batch B           micro-batch                                (default: 1)\n"
            "  --seq S             sequence length                            (default: 2048)\n"
            "device:\n"
            "  --device D          preset: h200, h100, a100-80g, a100-40g, gh200 (default: h200)\n"
            "  --budget SIZE       what the device may hold, static state included (default: its memory)\n"
            "  --host-mem SIZE     host memory for swapped tensors (default: the preset's, per device)\n"
            "  --link-gbps X       host link GB/s each way                    (default: the preset's)\n"
            "output:\n"
            "  --json              one JSON object instead of the table\n"
            "  --plot FILE         .png or .svg: device memory over the iteration per strategy with the\n"
            "                      budget line; with --sweep, tokens/s against the swept value\n"
            "sweep:\n"
            "  --sweep batch|seq|hidden   per strategy, the largest value that trains, as a multiple\n"
            "                      of what trains without saving, with its step time and tokens/s\n"
            "                      (searched from --batch/--seq/the model's hidden size)\n"
            "  --min-speed X       drop values below X times the no-saving tokens/s (default: 0)\n"
            "  --points N          values on the sweep plot's curve           (default: 16)\n\n"
            "examples:\n"
            "  smartswap simulate --model llama-2-7b --device h200 --batch 4 --seq 4096\n"
            "  smartswap simulate --model llama-2-7b --device h200 --sweep seq --json\n"
            "  smartswap simulate --model llama-3.2-1b --sweep batch --seq 2048 --plot batch.png\n");
}

static int flag_u32(const char *flag, const char *v, long lo, long hi, uint32_t *out) {
    long x;
    if (cli_int(C, flag, v, lo, hi, &x)) return 1;
    *out = (uint32_t)x;
    return 0;
}

static double gib(uint64_t b) { return (double)b / GIB; }

/* ---- output -------------------------------------------------------------------------------- */

static void print_header(const ssi_workload_config *c, const ssi_device_preset *d, const ssi_strategy_env *env) {
    ssi_workload_params P;
    ssi_workload_count_params(c, &P);
    char loss[48];
    if (c->loss == SSI_WORKLOAD_LOSS_FULL) snprintf(loss, sizeof loss, "full loss");
    else snprintf(loss, sizeof loss, "chunked loss (%llu tokens)", (unsigned long long)ssi_workload_loss_chunk(c));
    printf("model   %s: L=%u h=%u a=%u kv=%u i=%u V=%u%s, %.2fB params, %s, %s attention, %s\n", c->model,
           c->layers, c->hidden, c->heads, c->kv_heads, c->ffn, c->vocab, c->moe_experts ? " (MoE)" : "",
           P.total / 1e9, c->dtype_bytes == 2 ? "bf16" : "f32", c->flash ? "flash" : "naive", loss);
    printf("device  %s: %.2f GiB, %.1f TFLOP/s effective (%.0f%% of %.0f), HBM %.2f TB/s effective, "
           "link %.0f/%.0f GB/s\n", d->name, gib(env->device_bytes), env->flops_per_s / 1e12,
           SS_PRESET_MFU * 100, d->bf16_flops / 1e12, env->mem_bps / 1e12, env->d2h_bps / 1e9, env->h2d_bps / 1e9);
    printf("limits  budget %.2f GiB, host cap %.2f GiB\n", gib(env->budget_bytes),
           env->host_cap_bytes ? gib(env->host_cap_bytes) : 0.0);
}

static void print_table(const ssi_workload_config *c, const ssi_device_preset *d, const ssi_strategy_env *env,
                        const ssi_strategy_result *r) {
    print_header(c, d, env);
    printf("run     batch %u x seq %u = %llu tokens per step\n\n", c->batch, c->seq,
           (unsigned long long)r[0].tokens);
    printf("%-22s %-4s %9s %9s %9s %9s %9s %10s %8s\n", "strategy", "fits", "peak GiB", "host GiB", "step s",
           "stall s", "extra s", "tokens/s", "vs none");
    for (int k = 0; k < SSI_STRAT_COUNT; k++) {
        const ssi_strategy_result *x = &r[k];
        printf("%-22s %-4s %9.2f %9.2f %9.3f %9.3f %9.3f %10.0f %7.2fx\n", ssi_strategy_title(k), x->fits ? "yes" : "NO",
               gib(x->peak_bytes), gib(x->host_bytes), x->iter_s, x->stall_s, x->extra_compute_s, x->tokens_per_s,
               r[0].tokens_per_s > 0 ? x->tokens_per_s / r[0].tokens_per_s : 0.0);
    }
    int any = 0;
    for (int k = 0; k < SSI_STRAT_COUNT; k++)
        if (!r[k].fits) {
            if (!any) printf("\n");
            any = 1;
            printf("%s does not fit: %s (%s)\n", ssi_strategy_title(k), r[k].why,
                   r[k].prechecked ? "its figures are those without swaps: no planning was needed to rule it out"
                                   : "its figures are what it would need");
        }
    if (r[SSI_STRAT_HYBRID].evaluated)
        printf("\nhybrid: %u saved tensors (%.2f GiB) recomputed instead of swapped or kept.\n",
               r[SSI_STRAT_HYBRID].recomputed, gib(r[SSI_STRAT_HYBRID].recomputed_bytes));
    printf("\nstall: compute waiting on copies; extra: operators run again (recomputation).\n");
}

static void print_sweep(const ssi_workload_config *c, const ssi_device_preset *d, const ssi_strategy_env *env,
                        const ssi_sweep_result *s) {
    print_header(c, d, env);
    const char *ax = ssi_sweep_axis_name(s->axis);
    if (s->axis == SSI_SWEEP_BATCH) printf("sweep   batch at seq %u\n", c->seq);
    else if (s->axis == SSI_SWEEP_SEQ) printf("sweep   seq at batch %u\n", c->batch);
    else printf("sweep   hidden (MLP width scaled with it, %u heads) at batch %u x seq %u\n", c->heads, c->batch, c->seq);
    if (s->min_speed > 0) printf("        values below %.2f x the no-saving tokens/s (%.0f) are dropped\n", s->min_speed,
                                 s->ref_tokens_per_s);
    if (c->loss == SSI_WORKLOAD_LOSS_CHUNKED && !c->loss_chunk)
        printf("        the loss chunk follows the trainer's rule at each %s (%llu tokens at batch %u x seq %u)\n", ax,
               (unsigned long long)ssi_workload_loss_chunk(c), c->batch, c->seq);
    printf("\n%-22s %9s %8s %9s %9s %9s %9s %10s %8s\n", "strategy", ax, "multiple", "peak GiB", "host GiB", "step s",
           "stall s", "tokens/s", "vs none");
    for (int k = 0; k < SSI_STRAT_COUNT; k++) {
        const ssi_sweep_best *b = &s->best[k];
        if (!b->found) {
            printf("%-22s %9s   (no %s value trains%s)\n", ssi_strategy_title(k), "-", ax,
                   s->min_speed > 0 && k ? " at the required speed" : "");
            continue;
        }
        printf("%-22s %9u %7.2fx %9.2f %9.2f %9.3f %9.3f %10.0f %7.2fx\n", ssi_strategy_title(k), b->value, b->multiple,
               gib(b->r.peak_bytes), gib(b->r.host_bytes), b->r.iter_s, b->r.stall_s, b->r.tokens_per_s,
               s->ref_tokens_per_s > 0 ? b->r.tokens_per_s / s->ref_tokens_per_s : 0.0);
    }
    printf("\n%u strategy evaluations in %.2f s\n", s->evals, s->seconds);
}

static cJSON *json_result(const ssi_strategy_result *x) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", ssi_strategy_name(x->kind));
    cJSON_AddStringToObject(o, "title", ssi_strategy_title(x->kind));
    cJSON_AddBoolToObject(o, "fits", x->fits);
    if (!x->fits) cJSON_AddStringToObject(o, "why", x->why);
    cJSON_AddNumberToObject(o, "tokens", (double)x->tokens);
    cJSON_AddNumberToObject(o, "peak_bytes", (double)x->peak_bytes);
    cJSON_AddNumberToObject(o, "host_bytes", (double)x->host_bytes);
    cJSON_AddNumberToObject(o, "d2h_bytes", (double)x->d2h_bytes);
    cJSON_AddNumberToObject(o, "h2d_bytes", (double)x->h2d_bytes);
    cJSON_AddNumberToObject(o, "copies", x->copies);
    cJSON_AddNumberToObject(o, "iter_s", x->iter_s);
    cJSON_AddNumberToObject(o, "compute_s", x->compute_s);
    cJSON_AddNumberToObject(o, "stall_s", x->stall_s);
    cJSON_AddNumberToObject(o, "extra_compute_s", x->extra_compute_s);
    cJSON_AddNumberToObject(o, "extra_flops", x->extra_flops);
    cJSON_AddNumberToObject(o, "recomputed", x->recomputed);
    cJSON_AddNumberToObject(o, "recomputed_bytes", (double)x->recomputed_bytes);
    cJSON_AddNumberToObject(o, "tokens_per_s", x->tokens_per_s);
    return o;
}

static cJSON *json_head(const ssi_workload_config *c, const ssi_device_preset *d, const ssi_strategy_env *env) {
    cJSON *o = cJSON_CreateObject();
    cJSON *m = cJSON_AddObjectToObject(o, "model");
    cJSON_AddStringToObject(m, "name", c->model);
    cJSON_AddNumberToObject(m, "layers", c->layers);
    cJSON_AddNumberToObject(m, "hidden", c->hidden);
    cJSON_AddNumberToObject(m, "heads", c->heads);
    cJSON_AddNumberToObject(m, "kv_heads", c->kv_heads);
    cJSON_AddNumberToObject(m, "ffn", c->ffn);
    cJSON_AddNumberToObject(m, "vocab", c->vocab);
    cJSON_AddNumberToObject(m, "dtype_bytes", c->dtype_bytes);
    cJSON_AddBoolToObject(m, "flash", c->flash);
    cJSON_AddStringToObject(m, "attention", c->flash ? "flash" : "naive");
    cJSON_AddStringToObject(m, "loss", c->loss == SSI_WORKLOAD_LOSS_FULL ? "full" : "chunked");
    if (c->loss == SSI_WORKLOAD_LOSS_FULL) cJSON_AddNullToObject(m, "loss_chunk");
    else cJSON_AddNumberToObject(m, "loss_chunk", (double)ssi_workload_loss_chunk(c));
    cJSON *dv = cJSON_AddObjectToObject(o, "device");
    cJSON_AddStringToObject(dv, "name", d->name);
    cJSON_AddNumberToObject(dv, "memory_bytes", (double)env->device_bytes);
    cJSON_AddNumberToObject(dv, "flops_per_s", env->flops_per_s);
    cJSON_AddNumberToObject(dv, "mem_bytes_per_s", env->mem_bps);
    cJSON_AddNumberToObject(dv, "d2h_bytes_per_s", env->d2h_bps);
    cJSON_AddNumberToObject(dv, "h2d_bytes_per_s", env->h2d_bps);
    cJSON_AddNumberToObject(o, "budget_bytes", (double)env->budget_bytes);
    cJSON_AddNumberToObject(o, "host_cap_bytes", (double)env->host_cap_bytes);
    cJSON_AddNumberToObject(o, "batch", c->batch);
    cJSON_AddNumberToObject(o, "seq", c->seq);
    return o;
}

static int print_json(cJSON *o) {
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    if (!s) { cli_error(C, NULL, "out of memory writing JSON"); return 1; }
    printf("%s\n", s);
    cJSON_free(s);
    return 0;
}

/* ---- plots --------------------------------------------------------------------------------- */

/* Runs gnuplot on dir/plot.gp; 0 on success, else prints the error. */
static int run_gnuplot(const char *dir, const char *out) {
    char script[512];
    snprintf(script, sizeof script, "%s/plot.gp", dir);
    pid_t pid = fork();
    if (pid < 0) { cli_error(C, NULL, "cannot start gnuplot: %s", strerror(errno)); return 1; }
    if (pid == 0) {
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {}
    if (WIFEXITED(ws) && WEXITSTATUS(ws) == 127) {
        cli_error(C, "install gnuplot (Debian: apt-get install gnuplot-nox) or drop --plot",
                  "gnuplot was not found");
        return 1;
    }
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        cli_error(C, "gnuplot's own message is above; check that the folder of the plot file exists",
                  "gnuplot failed drawing %s", out);
        return 1;
    }
    return 0;
}

/* The terminal line for out's extension, or NULL. */
static const char *terminal_for(const char *out) {
    const char *dot = strrchr(out, '.');
    if (dot && !strcasecmp(dot, ".png")) return "set terminal pngcairo size 1000,700 noenhanced font 'sans,10'";
    if (dot && !strcasecmp(dot, ".svg")) return "set terminal svg size 1000,700 dynamic noenhanced font 'sans,10'";
    return NULL;
}

/* Removes dir and the files named in it. */
static void cleanup_dir(const char *dir, const char *const *files, int n) {
    char path[600];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* Makes the temporary folder dir (a mkdtemp template) and opens files[0] in it for writing;
 * prints the error and returns NULL (nothing left behind) on failure. */
static FILE *plot_begin(char *dir, const char *const *files, char *path, size_t n) {
    if (!mkdtemp(dir)) {
        cli_error(C, "check that /tmp is writable", "cannot create a temporary folder: %s", strerror(errno));
        return NULL;
    }
    snprintf(path, n, "%s/%s", dir, files[0]);
    FILE *f = fopen(path, "w");
    if (!f) { cli_error(C, NULL, "cannot write %s: %s", path, strerror(errno)); cleanup_dir(dir, files, 2); }
    return f;
}

/* Closes the data file f (checking it was written) and opens files[1], the gnuplot script, in
 * dir; prints the error, removes the folder and returns NULL on failure. */
static FILE *plot_script(FILE *f, const char *dir, const char *const *files, char *path, size_t n) {
    int bad = ferror(f);
    if (fclose(f) || bad) { cli_error(C, NULL, "cannot write %s", path); cleanup_dir(dir, files, 2); return NULL; }
    snprintf(path, n, "%s/%s", dir, files[1]);
    f = fopen(path, "w");
    if (!f) { cli_error(C, NULL, "cannot write %s: %s", path, strerror(errno)); cleanup_dir(dir, files, 2); }
    return f;
}

/* Writes gnuplot's string literal for s (single quotes doubled). */
static void gp_str(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static int plot_memory(const char *out, const ssi_workload_config *c, const ssi_device_preset *d,
                       const ssi_strategy_env *env, const ssi_strategy_result *r) {
    static const char *const files[] = {"mem.dat", "plot.gp"};
    char dir[] = "/tmp/smartswap-plot-XXXXXX", path[600];
    FILE *f = plot_begin(dir, files, path, sizeof path);
    if (!f) return 1;
    for (int k = 0; k < SSI_STRAT_COUNT; k++) {
        fprintf(f, "# %s\n", ssi_strategy_title(k));
        for (uint32_t i = 0; i < r[k].npoints; i++) fprintf(f, "%.6f %.4f\n", r[k].t[i], gib(r[k].mem[i]));
        if (r[k].npoints) fprintf(f, "%.6f %.4f\n", r[k].iter_s, gib(r[k].mem[r[k].npoints - 1]));
        fprintf(f, "\n\n");
    }
    if (!(f = plot_script(f, dir, files, path, sizeof path))) return 1;
    fprintf(f, "%s\nset output ", terminal_for(out));
    gp_str(f, out);
    char title[300];
    snprintf(title, sizeof title, "%s, batch %u x seq %u on %s: device memory over one iteration", c->model, c->batch,
             c->seq, d->name);
    fprintf(f, "\nset title ");
    gp_str(f, title);
    fprintf(f, "\nset xlabel 'time in the iteration (s)'\nset ylabel 'device memory (GiB)'\n"
               "set grid\nset key below maxrows 3\nset yrange [0:*]\n");
    fprintf(f, "plot ");
    static const char *const colors[SSI_STRAT_COUNT] = {"#1f77b4", "#2ca02c", "#ff7f0e", "#d62728", "#9467bd"};
    for (int k = 0; k < SSI_STRAT_COUNT; k++) {
        char lab[120];
        snprintf(lab, sizeof lab, "%s%s (%.2f s)", ssi_strategy_title(k), r[k].fits ? "" : " - does not fit",
                 r[k].iter_s);
        fprintf(f, "'%s/mem.dat' index %d using 1:2 with steps lw 2 lc rgb '%s' title ", dir, k, colors[k]);
        gp_str(f, lab);
        fprintf(f, ", \\\n     ");
    }
    fprintf(f, "%.4f with lines dt 2 lw 2 lc rgb 'black' title 'budget %.2f GiB'\n", gib(env->budget_bytes),
            gib(env->budget_bytes));
    int bad = ferror(f);
    if (fclose(f) || bad) { cli_error(C, NULL, "cannot write %s", path); cleanup_dir(dir, files, 2); return 1; }
    int rc = run_gnuplot(dir, out);
    cleanup_dir(dir, files, 2);
    return rc;
}

static int plot_sweep(const char *out, const ssi_workload_config *c, const ssi_device_preset *d,
                      const ssi_sweep_result *s) {
    static const char *const files[] = {"sweep.dat", "plot.gp"};
    char dir[] = "/tmp/smartswap-plot-XXXXXX", path[600];
    FILE *f = plot_begin(dir, files, path, sizeof path);
    if (!f) return 1;
    for (int k = 0; k < SSI_STRAT_COUNT; k++) {
        fprintf(f, "# %s\n", ssi_strategy_title(k));
        int any = 0;
        for (uint32_t i = 0; i < s->npoints; i++)
            if (s->tps[k][i] > 0) { fprintf(f, "%u %.2f\n", s->values[i], s->tps[k][i]); any = 1; }
        if (s->best[k].found) { fprintf(f, "%u %.2f\n", s->best[k].value, s->best[k].r.tokens_per_s); any = 1; }
        if (!any) fprintf(f, "NaN NaN\n");
        fprintf(f, "\n\n");
    }
    if (!(f = plot_script(f, dir, files, path, sizeof path))) return 1;
    const char *ax = ssi_sweep_axis_name(s->axis);
    fprintf(f, "%s\nset output ", terminal_for(out));
    gp_str(f, out);
    char title[300];
    if (s->axis == SSI_SWEEP_BATCH) snprintf(title, sizeof title, "%s on %s, seq %u: tokens/s against batch", c->model, d->name, c->seq);
    else if (s->axis == SSI_SWEEP_SEQ) snprintf(title, sizeof title, "%s on %s, batch %u: tokens/s against seq", c->model, d->name, c->batch);
    else snprintf(title, sizeof title, "%s on %s, batch %u x seq %u: tokens/s against hidden", c->model, d->name, c->batch, c->seq);
    fprintf(f, "\nset title ");
    gp_str(f, title);
    fprintf(f, "\nset xlabel '%s'\nset ylabel 'tokens/s (where it trains)'\nset grid\nset key below maxrows 2\n"
               "set yrange [0:*]\nset xrange [0:*]\n", ax);
    static const char *const colors[SSI_STRAT_COUNT] = {"#1f77b4", "#2ca02c", "#ff7f0e", "#d62728", "#9467bd"};
    fprintf(f, "plot ");
    /* no saving last, with open circles: where smartswap swaps nothing the two coincide */
    static const int order[SSI_STRAT_COUNT] = {SSI_STRAT_RECOMPUTE, SSI_STRAT_OFFLOAD, SSI_STRAT_SMARTSWAP, SSI_STRAT_HYBRID,
                                               SSI_STRAT_NONE};
    for (int q = 0; q < SSI_STRAT_COUNT; q++) {
        int k = order[q];
        char lab[120];
        if (s->best[k].found) snprintf(lab, sizeof lab, "%s: up to %u (%.2fx)", ssi_strategy_title(k), s->best[k].value, s->best[k].multiple);
        else snprintf(lab, sizeof lab, "%s: none", ssi_strategy_title(k));
        fprintf(f, "%s'%s/sweep.dat' index %d using 1:2 with linespoints lw 2 pt %d ps %.1f lc rgb '%s' title ",
                q ? ", \\\n     " : "", dir, k, k == SSI_STRAT_NONE ? 6 : 7, k == SSI_STRAT_NONE ? 1.8 : 0.8, colors[k]);
        gp_str(f, lab);
    }
    fprintf(f, "\n");
    int bad = ferror(f);
    if (fclose(f) || bad) { cli_error(C, NULL, "cannot write %s", path); cleanup_dir(dir, files, 2); return 1; }
    int rc = run_gnuplot(dir, out);
    cleanup_dir(dir, files, 2);
    return rc;
}

/* ---- the command --------------------------------------------------------------------------- */

int cmd_simulate(int argc, char **argv) {
    ssi_workload_config c;
    ssi_workload_default(&c);
    const char *device = "h200", *plot = NULL, *v;
    cli_model m = {0};
    uint32_t points = 16;
    int json = 0, axis = -1;
    uint64_t budget = 0, host = 0;
    int have_host = 0;
    double min_speed = 0, link = 0;
    for (int i = 1; i < argc;) {
        const char *a = argv[i];
        int r;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--json")) { json = 1; i++; continue; }
#define FLAG(name) ((r = cli_flag(argc, argv, &i, name, &v)) < 0 ? 2 : r)
        if ((r = cli_model_flag(C, argc, argv, &i, &m, &c)) < 0) return 2; else if (r) continue;
        if (FLAG("device") == 2) return 2; else if (r) { device = v; continue; }
        if (FLAG("plot") == 2) return 2; else if (r) { plot = v; continue; }
        if (FLAG("points") == 2) return 2; else if (r) { if (flag_u32("points", v, 2, 256, &points)) return 2; continue; }
        if (FLAG("budget") == 2) return 2; else if (r) {
            if (cli_size(C, "budget", v, &budget)) return 2;
            if (!budget) { cli_error(C, "give a size such as 80GiB", "--budget must be > 0"); return 2; }
            continue;
        }
        if (FLAG("host-mem") == 2) return 2; else if (r) { if (cli_size(C, "host-mem", v, &host)) return 2; have_host = 1; continue; }
        if (FLAG("link-gbps") == 2) return 2; else if (r) { if (cli_double(C, "link-gbps", v, 0.001, 1e6, &link)) return 2; continue; }
        if (FLAG("min-speed") == 2) return 2; else if (r) { if (cli_double(C, "min-speed", v, 0, 100, &min_speed)) return 2; continue; }
        if (FLAG("sweep") == 2) return 2; else if (r) {
            axis = ssi_sweep_axis_from_name(v);
            if (axis < 0) { cli_error(C, "--sweep batch, --sweep seq or --sweep hidden", "--sweep: unknown axis '%s'", v); return 2; }
            continue;
        }
#undef FLAG
        if (a[0] == '-') cli_error(C, HINT, "unknown flag '%s'", a);
        else cli_error(C, HINT, "unexpected argument '%s'", a);
        return 2;
    }
    if (cli_model_apply(C, &m, &c)) return 2;
    const ssi_device_preset *d = ssi_preset_find(device);
    if (!d) {
        char hint[300];
        size_t len = (size_t)snprintf(hint, sizeof hint, "presets:");
        for (int i = 0; ssi_preset_get(i) && len < sizeof hint; i++)
            len += (size_t)snprintf(hint + len, sizeof hint - len, " %s", ssi_preset_get(i)->name);
        cli_error(C, hint, "unknown device '%s'", device);
        return 2;
    }
    if (plot && !terminal_for(plot)) {
        cli_error(C, "name the plot file .png or .svg", "--plot %s: unknown image type", plot);
        return 2;
    }
    char err[300];
    if (ssi_workload_validate(&c, err, sizeof err) != SS_OK) {
        cli_error(C, HINT, "%s", err);
        return 2;
    }
    if (axis == SSI_SWEEP_HIDDEN && c.moe_experts) {
        cli_error(C, "sweep batch or seq for MoE models", "--sweep hidden is not modelled with --moe");
        return 2;
    }
    ss_options o;
    if (cli_options_init(C, &o)) return 1;
    ssi_strategy_env env;
    ssi_strategy_env_from_preset(d, &env);
    if (budget) env.budget_bytes = budget;
    if (have_host) env.host_cap_bytes = host;
    if (link > 0) env.d2h_bps = env.h2d_bps = link * 1e9;
    if (env.budget_bytes > env.device_bytes) {
        char b1[32];
        cli_error(C, "a budget is at most the device's memory", "--budget %s is larger than %s's %s", ss_format_size(budget, b1, sizeof b1) ? b1 : "?",
                  d->name, "memory");
        return 2;
    }

    if (axis >= 0) {
        ssi_sweep_result s;
        ss_status st = ssi_strategy_sweep(&c, &env, axis, SSI_STRAT_ALL, min_speed, plot ? points : 0, &s, err, sizeof err);
        if (st) {
            cli_error(C, st == SS_ERR_INVALID ? HINT : NULL, "%s", err);
            return st == SS_ERR_INVALID ? 2 : 1;
        }
        int rc = 0;
        if (json) {
            cJSON *o2 = json_head(&c, d, &env);
            cJSON_AddStringToObject(o2, "sweep", ssi_sweep_axis_name(axis));
            cJSON_AddNumberToObject(o2, "min_speed", min_speed);
            cJSON_AddNumberToObject(o2, "ref_tokens_per_s", s.ref_tokens_per_s);
            cJSON *arr = cJSON_AddArrayToObject(o2, "strategies");
            for (int k = 0; k < SSI_STRAT_COUNT; k++) {
                const ssi_sweep_best *b = &s.best[k];
                cJSON *x = b->found ? json_result(&b->r) : cJSON_CreateObject();
                if (!b->found) {
                    cJSON_AddStringToObject(x, "name", ssi_strategy_name(k));
                    cJSON_AddStringToObject(x, "title", ssi_strategy_title(k));
                }
                cJSON_AddBoolToObject(x, "found", b->found);
                cJSON_AddNumberToObject(x, "value", b->value);
                cJSON_AddNumberToObject(x, "multiple", b->multiple);
                cJSON_AddItemToArray(arr, x);
            }
            if (s.npoints) {
                cJSON *cv = cJSON_AddObjectToObject(o2, "curve");
                cJSON *vals = cJSON_AddArrayToObject(cv, "values");
                for (uint32_t i = 0; i < s.npoints; i++) cJSON_AddItemToArray(vals, cJSON_CreateNumber(s.values[i]));
                for (int k = 0; k < SSI_STRAT_COUNT; k++) {
                    cJSON *t = cJSON_AddArrayToObject(cv, ssi_strategy_name(k));
                    for (uint32_t i = 0; i < s.npoints; i++) cJSON_AddItemToArray(t, cJSON_CreateNumber(s.tps[k][i]));
                }
            }
            cJSON_AddNumberToObject(o2, "evaluations", s.evals);
            cJSON_AddNumberToObject(o2, "seconds", s.seconds);
            rc = print_json(o2);
        } else {
            print_sweep(&c, d, &env, &s);
        }
        if (!rc && plot) {
            rc = plot_sweep(plot, &c, d, &s);
            if (!rc && !json) printf("plot: %s\n", plot);
        }
        ssi_sweep_result_free(&s);
        return rc;
    }

    ssi_strategy_result r[SSI_STRAT_COUNT];
    ss_status st = ssi_strategy_eval(&c, &env, SSI_STRAT_ALL, plot != NULL, r, err, sizeof err);
    if (st) {
        cli_error(C, st == SS_ERR_INVALID ? HINT : NULL, "%s", err);
        return st == SS_ERR_INVALID ? 2 : 1;
    }
    int rc = 0;
    if (json) {
        cJSON *o2 = json_head(&c, d, &env);
        cJSON *arr = cJSON_AddArrayToObject(o2, "strategies");
        for (int k = 0; k < SSI_STRAT_COUNT; k++) cJSON_AddItemToArray(arr, json_result(&r[k]));
        rc = print_json(o2);
    } else {
        print_table(&c, d, &env, r);
    }
    if (!rc && plot) {
        rc = plot_memory(plot, &c, d, &env, r);
        if (!rc && !json) printf("plot: %s\n", plot);
    }
    for (int k = 0; k < SSI_STRAT_COUNT; k++) ssi_strategy_result_free(&r[k]);
    return rc;
}
