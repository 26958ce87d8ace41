/* test-stress.c: randomized trainer configurations (issue 14 item 8, docs/testing.md). Each
 * configuration (layers, width, heads and KV heads, MoE E:K, a sequence range, batch,
 * accumulation, evaluation steps, attention and loss kinds) is trained by the smartswap command
 * twice: once with --mode none and no budget (the reference), once in a swapping or recompute
 * mode at a budget drawn between the configuration's smallest workable budget (min_budget_bytes
 * of the reference run's JSONL log) and the reference's peak, with random cpu-sim copy jitter.
 * Checks, per configuration: the budgeted run trains (no out-of-memory or any other error after
 * training has started; a refusal before step 1 is counted, and is a failure at or above the
 * smallest budget the run itself reports), every training and evaluation loss is bit-identical
 * to the reference (loss_hex), and so are the final weights (--save-weights files).
 *
 *   STRESS_N=n       configurations (default 8: the short form `make test` runs, a few seconds)
 *   STRESS_SEED=s    the PRNG seed (default 1); configuration k is a function of (s, k) only
 *   STRESS_VERBOSE=1 one line per configuration (always on when STRESS_N > 8)
 *   STRESS_HELDOUT=n held-out configurations of issue 14's acceptance (one_heldout: MoE with
 *                    accumulation, evaluation, varying length and grouped KV heads, each at the
 *                    state + 1/3, 1/4, 1/6, 1/10 of its activations; default 1)
 *   STRESS_HELDOUT_MODE=smartswap|swap-only|offload-all  their mode (default smartswap: the hybrid)
 *   STRESS_HOST_MEM=0 turns off the host-memory bullet (on by default, make test included): each
 *                    run that swapped runs a third time with --host-mem drawn either between 5 %
 *                    and 120 % of the host pool peak it reached or between 80 % and 120 % of the
 *                    trainer's host need (host_need_bytes of its log; a sixth of these exactly
 *                    it). Below the need the run must be refused before step 1 (exit 1, no log
 *                    line, the message naming the need in bytes); at or above it, it must train
 *                    bit-identical to none; an error after training has started is a failure.
 *                    Every swapping run's host pool peak must be at most its host need.
 *   SS_CLI           the smartswap binary (make test sets it; default: ../smartswap next to
 *                    this binary's directory)
 * Prints the figures (configurations by mode, refusals, the budget fractions covered) and
 * "N passed, N failed".
 */
#include "smartswap.h"
#include "test.h"

#include <errno.h>
#include <libgen.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char cli[4096];
static uint64_t host_cap;      /* non-zero: --host-mem for the next run */
static int host_mem_runs;      /* STRESS_HOST_MEM: a third run with a host-memory cap */
static char tmpdir[64];
static int verbose;

static uint64_t rng_state;
static uint64_t rnd(void) {            /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int pick(int lo, int hi) { return lo + (int)(rnd() % (uint64_t)(hi - lo + 1)); }
static double unit(void) { return (double)(rnd() >> 11) * 0x1.0p-53; }

typedef struct cfg {
    int layers, hidden, heads, kv, ffn, E, K, seq_min, seq_max, batch, accum, eval_every, steps;
    int naive, full_loss;
    const char *mode;
    double gbps, jitter_us, frac;
    int headroom0;              /* smartswap: --plan-headroom 0 (the aim) */
    int virt;                   /* cpu-sim's virtual clock (SMARTSWAP_VIRTUAL_CLOCK=1) */
    int accept;                 /* > 0: the budget is state + 1/accept of none's activations (the
                                   issue's acceptance fractions 3, 4, 6, 10) instead of frac */
} cfg;

static void draw(cfg *c, uint64_t seed, int k) {
    rng_state = seed;
    uint64_t h0 = rnd();
    rng_state = (uint64_t)k ^ 0xD1B54A32D192ED03ull;
    rng_state = h0 ^ rnd();    /* configuration k: its own stream, independent of k - 1's */
    memset(c, 0, sizeof *c);
    c->layers = pick(1, 3);
    static const int widths[] = {16, 24, 32, 48, 64};
    c->hidden = widths[pick(0, 4)];
    /* heads: H/A even */
    int hs[8], nh = 0;
    for (int a = 1; a <= 8; a++) if (c->hidden % a == 0 && (c->hidden / a) % 2 == 0) hs[nh++] = a;
    c->heads = hs[pick(0, nh - 1)];
    int ks[8], nk = 0;
    for (int g = 1; g <= c->heads; g++) if (c->heads % g == 0) ks[nk++] = g;
    c->kv = ks[pick(0, nk - 1)];
    c->ffn = 8 * pick(2, 16);
    if (pick(0, 2) == 0) { c->E = 1 << pick(1, 3); c->K = pick(1, c->E < 3 ? c->E : 3); }
    c->seq_min = pick(4, 32);
    c->seq_max = pick(0, 2) ? c->seq_min + pick(0, 24) : c->seq_min;
    c->batch = pick(1, 3);
    c->accum = pick(0, 2) ? 1 : pick(2, 3);
    c->eval_every = pick(0, 1) ? 0 : pick(1, 3);
    c->steps = pick(3, 7);
    c->naive = pick(0, 4) == 0;
    c->full_loss = pick(0, 4) == 0;
    int m = pick(0, 9);
    c->mode = m < 6 ? "smartswap" : m < 8 ? "offload-all" : "recompute";
    static const double g[] = {0.05, 0.2, 1, 5};
    c->gbps = g[pick(0, 3)];
    c->jitter_us = pick(0, 1) ? 0 : (double)pick(1, 200);
    c->headroom0 = !strcmp(c->mode, "smartswap") && pick(0, 3) == 0;
    double u = unit();
    c->frac = pick(0, 3) == 0 ? 0 : pick(0, 3) == 0 ? 1 : u * u;   /* the ends, and the low end more */
    /* every even configuration: issue 14's acceptance fractions in turn, in a swapping mode
     * (so the short form, configurations 0..7, runs 1/3, 1/4, 1/6 and 1/10 once each) */
    if (k % 2 == 0) {
        static const int fr[] = {3, 4, 6, 10};
        c->accept = fr[(k / 2) % 4];
        if (!strcmp(c->mode, "recompute")) c->mode = "smartswap";
    }
}

static void describe(const cfg *c, char *buf, size_t len) {
    char moe[32] = "dense";
    if (c->E) snprintf(moe, sizeof moe, "moe %d:%d", c->E, c->K);
    snprintf(buf, len, "L%d h%d a%d kv%d ffn%d %s seq %d:%d b%d accum %d eval %d steps %d %s %s",
             c->layers, c->hidden, c->heads, c->kv, c->ffn, moe, c->seq_min, c->seq_max, c->batch, c->accum,
             c->eval_every, c->steps, c->naive ? "naive" : "flash", c->full_loss ? "full" : "chunked");
}

/* Runs the trainer; returns its exit status (-1 if it could not run); output in tag.out. */
static int train(const cfg *c, const char *tag, const char *mode, uint64_t budget, int jitter) {
    char cmd[8192], moe[32] = "", seq[32], bud[80] = "", env[128] = "", old[256];
    /* an earlier configuration's files must not pass for this run's (a refusal writes none) */
    static const char *const ext[] = {"jsonl", "w", "out"};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        snprintf(old, sizeof old, "%s/%s.%s", tmpdir, tag, ext[i]);
        unlink(old);
    }
    if (c->E) snprintf(moe, sizeof moe, "--moe %d:%d", c->E, c->K);
    if (c->seq_min == c->seq_max) snprintf(seq, sizeof seq, "%d", c->seq_min);
    else snprintf(seq, sizeof seq, "%d:%d", c->seq_min, c->seq_max);
    if (budget) snprintf(bud, sizeof bud, "--budget %llu%s", (unsigned long long)budget,
                         c->headroom0 && !strcmp(mode, "smartswap") ? " --plan-headroom 0" : "");
    if (budget && host_cap) snprintf(bud + strlen(bud), sizeof bud - strlen(bud), " --host-mem %llu", (unsigned long long)host_cap);
    if (jitter && c->jitter_us > 0) snprintf(env, sizeof env, "SMARTSWAP_SIM_JITTER_US=%g ", c->jitter_us);
    if (c->virt) snprintf(env + strlen(env), sizeof env - strlen(env), "SMARTSWAP_VIRTUAL_CLOCK=1 ");
    snprintf(cmd, sizeof cmd,
             "cd %s && %sOMP_NUM_THREADS=1 '%s' train --layers %d --hidden %d --heads %d --kv-heads %d --ffn %d %s "
             "--seq %s --batch %d --accum %d --eval-every %d --steps %d --attention %s --loss %s --mode %s %s "
             "--d2h-gbps %g --h2d-gbps %g --threads 1 --quiet --log %s.jsonl --save-weights %s.w > %s.out 2>&1",
             tmpdir, env, cli, c->layers, c->hidden, c->heads, c->kv, c->ffn, moe, seq, c->batch, c->accum,
             c->eval_every, c->steps, c->naive ? "naive" : "flash", c->full_loss ? "full" : "chunked", mode, bud,
             c->gbps, c->gbps, tag, tag, tag);
    static const char *const exts[] = {"out", "jsonl", "w"};
    for (int i = 0; i < 3; i++) {   /* a refused run writes no log: never read a stale one */
        char path[256];
        snprintf(path, sizeof path, "%s/%s.%s", tmpdir, tag, exts[i]);
        unlink(path);
    }
    int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc)) return -1;
    return WEXITSTATUS(rc);
}

static char *slurp(const char *tag, const char *ext, size_t *len) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.%s", tmpdir, tag, ext);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    if (b) b[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return b;
}

static uint64_t json_u64(const char *s, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = s ? strstr(s, k) : NULL;
    return p ? strtoull(p + strlen(k), NULL, 10) : 0;
}

/* The "kind" and "loss_hex" of every log line, concatenated: what must match. */
static char *losses(const char *log, int *nlines) {
    size_t cap = 64, n = 0;
    char *out = malloc(cap);
    *nlines = 0;
    if (!out) return NULL;
    out[0] = 0;
    for (const char *l = log; l && *l; ) {
        const char *e = strchr(l, '\n');
        size_t ll = e ? (size_t)(e - l) : strlen(l);
        const char *kind = strstr(l, "\"kind\": \""), *hex = strstr(l, "\"loss_hex\": \"");
        if (kind && hex && kind < l + ll && hex < l + ll) {
            char item[96];
            int w = snprintf(item, sizeof item, "%.5s:%.*s;", kind + 9, (int)strcspn(hex + 13, "\""), hex + 13);
            if (n + (size_t)w + 1 > cap) { cap = 2 * (n + (size_t)w + 1); char *o2 = realloc(out, cap); if (!o2) break; out = o2; }
            memcpy(out + n, item, (size_t)w + 1);
            n += (size_t)w;
            (*nlines)++;
        }
        l = e ? e + 1 : l + ll;
    }
    return out;
}

typedef struct tally {
    int ok, refused, failed, by_mode[3], low, high, swapped, evicted;
    int cap_runs, cap_ok, cap_before, cap_mid;   /* host-memory cap runs and their outcomes */
    int cap_by[5][3];                            /* by cap / need quarter (4: >= need): runs, trained, refused */
    int accept_ok[4], accept_refused[4];         /* state + 1/3, 1/4, 1/6, 1/10: trained, refused */
    double fmin, fmax;
} tally;

/* ---- the runner both sweeps share ------------------------------------------------------- */

/* The reference of a configuration: `tag` trained with --mode none and no budget; its log, its
 * losses (losses()), its final weights and the figures budgets are drawn from (state_bytes,
 * min_budget_bytes, the largest peak_bytes). 0, or 1 after a failed check (nothing to free). */
typedef struct ref_run {
    char    *log, *losses, *w;
    size_t   wlen;
    int      nlines;
    uint64_t state, minb, peak;
} ref_run;

static void ref_close(ref_run *r) {
    free(r->log); free(r->losses); free(r->w);
    memset(r, 0, sizeof *r);
}

static int ref_open(const cfg *c, const char *tag, const char *who, ref_run *r) {
    memset(r, 0, sizeof *r);
    int rc = train(c, tag, "none", 0, 0);
    r->log = slurp(tag, "jsonl", NULL);
    if (rc != 0 || !r->log) {
        char *o = slurp(tag, "out", NULL);
        CHECK_MSG(0, "%s: the reference run failed (%d): %.400s", who, rc, o ? o : "");
        free(o);
        ref_close(r);
        return 1;
    }
    r->state = json_u64(r->log, "state_bytes");
    r->minb = json_u64(r->log, "min_budget_bytes");
    for (const char *p = r->log; (p = strstr(p, "\"peak_bytes\": ")); p++) {
        uint64_t v = strtoull(p + 14, NULL, 10);
        if (v > r->peak) r->peak = v;
    }
    CHECK_MSG(r->minb > 0 && r->peak > 0, "%s: no min_budget_bytes or peak_bytes in the log", who);
    CHECK_MSG(r->state > 0 && r->state < r->peak, "%s: state_bytes %llu, none's peak %llu", who,
              (unsigned long long)r->state, (unsigned long long)r->peak);
    r->losses = losses(r->log, &r->nlines);
    r->w = slurp(tag, "w", &r->wlen);
    return 0;
}

/* One budgeted run of a configuration against its reference, and what became of it:
 *   RUN_SAME      trained; every loss (loss_hex) and the final weights equal the reference's
 *   RUN_DIFFERENT trained, but a loss or the weights differ (a failed check)
 *   RUN_REFUSED   refused before step 1 (exit non-zero, no log line, no step, the message naming
 *                 a smallest budget), below the smallest budget it named (`own`)
 *   RUN_FAILED    anything else: refused at or above its own smallest budget, or an error after
 *                 training had started (a failed check) */
enum { RUN_SAME, RUN_DIFFERENT, RUN_REFUSED, RUN_FAILED };
typedef struct budget_run {
    int      outcome, rc, nlines;
    uint64_t own;
    char    *out, *log, *losses;   /* its output, log and losses (for the caller's further checks) */
} budget_run;

static void budget_run_free(budget_run *b) {
    free(b->out); free(b->log); free(b->losses);
    memset(b, 0, sizeof *b);
}

static int run_budgeted(const cfg *c, const char *tag, const char *mode, uint64_t budget, const ref_run *ref,
                        const char *who, budget_run *b) {
    memset(b, 0, sizeof *b);
    b->rc = train(c, tag, mode, budget, 1);
    b->out = slurp(tag, "out", NULL);
    b->log = slurp(tag, "jsonl", NULL);
    b->losses = losses(b->log, &b->nlines);
    if (b->rc == 0) {
        size_t wb = 0;
        char *B = slurp(tag, "w", &wb);
        int same_loss = ref->losses && b->losses && ref->nlines == b->nlines && !strcmp(ref->losses, b->losses);
        int same_w = ref->w && B && ref->wlen == wb && wb > 0 && !memcmp(ref->w, B, wb);
        CHECK_MSG(same_loss, "%s: %s at budget %llu: losses differ from none (%d vs %d lines)", who, mode,
                  (unsigned long long)budget, b->nlines, ref->nlines);
        CHECK_MSG(same_w, "%s: %s at budget %llu: final weights differ from none", who, mode,
                  (unsigned long long)budget);
        free(B);
        b->outcome = same_loss && same_w ? RUN_SAME : RUN_DIFFERENT;
    } else if (b->nlines == 0 && b->out && strstr(b->out, "smallest budget") && !strstr(b->out, "step 1:")) {
        const char *p = strstr(b->out, "this configuration: ");   /* "...: 427.00 KiB (437248 bytes) = ..." */
        if (p) p = strchr(p, '(');
        if (p) b->own = strtoull(p + 1, NULL, 10);
        CHECK_MSG(b->own > budget, "%s (%s at %llu): refused at or above its smallest budget: %.300s", who, mode,
                  (unsigned long long)budget, b->out);
        b->outcome = b->own > budget ? RUN_REFUSED : RUN_FAILED;
    } else {
        const char *why = b->out ? strstr(b->out, "error:") : NULL;   /* stderr lands before stdout's tail */
        if (!why && b->out) why = b->out + (strlen(b->out) > 600 ? strlen(b->out) - 600 : 0);
        CHECK_MSG(0, "%s: %s at budget %llu (min %llu, peak %llu) failed after %d log lines (exit %d): %.600s", who,
                  mode, (unsigned long long)budget, (unsigned long long)ref->minb, (unsigned long long)ref->peak,
                  b->nlines, b->rc, why ? why : "");
        b->outcome = RUN_FAILED;
    }
    return b->outcome;
}

static void one(uint64_t seed, int k, tally *t) {
    cfg c;
    draw(&c, seed, k);
    char what[256], who[32];
    describe(&c, what, sizeof what);
    test_current = what;
    snprintf(who, sizeof who, "config %d", k);
    ref_run ref;
    if (ref_open(&c, "ref", who, &ref)) { t->failed++; return; }
    uint64_t minb = ref.minb, peak = ref.peak, state = ref.state;
    uint64_t accept_budget = c.accept && state < peak ? state + (peak - state) / (uint64_t)c.accept : 0;
    if (peak < minb) peak = minb;
    if (!strcmp(c.mode, "recompute")) {
        /* recompute swaps nothing: its low end is its own peak without a budget (the trainer's
         * smallest budget assumes saved tensors can be swapped out; docs/testing.md) */
        uint64_t rpeak = 0;
        char *qlog = train(&c, "rcp", "recompute", 0, 0) == 0 ? slurp("rcp", "jsonl", NULL) : NULL;
        for (const char *p = qlog; p && (p = strstr(p, "\"peak_bytes\": ")); p++) {
            uint64_t v = strtoull(p + 14, NULL, 10);
            if (v > rpeak) rpeak = v;
        }
        CHECK_MSG(qlog && rpeak > 0, "config %d: the unbudgeted recompute run failed", k);
        free(qlog);
        if (rpeak > minb) minb = rpeak;
        if (peak < minb) peak = minb;
    }
    uint64_t budget = accept_budget ? accept_budget : minb + (uint64_t)((double)(peak - minb) * c.frac);
    budget_run br;
    int oc = run_budgeted(&c, "run", c.mode, budget, &ref, who, &br);
    int rc2 = br.rc;
    char *out = br.out, *blog = br.log, *la = ref.losses;
    int mi = !strcmp(c.mode, "smartswap") ? 0 : !strcmp(c.mode, "offload-all") ? 1 : 2;
    int fail = oc == RUN_DIFFERENT || oc == RUN_FAILED;
    if (oc == RUN_REFUSED) t->refused++;
    uint64_t sw = 0, ev = 0;
    const char *tot = out ? strstr(out, "totals: ") : NULL;
    if (tot && strstr(tot, "swapped_out=")) sw = strtoull(strstr(tot, "swapped_out=") + 12, NULL, 10);
    if (tot && strstr(tot, "evictions=")) ev = strtoull(strstr(tot, "evictions=") + 10, NULL, 10);
    if (fail) t->failed++;
    else if (rc2 == 0) {
        t->ok++;
        if (sw) t->swapped++;
        if (ev) t->evicted++;
        t->by_mode[mi]++;
        if (c.frac < 0.25) t->low++;
        if (c.frac > 0.75) t->high++;
        if (c.frac < t->fmin) t->fmin = c.frac;
        if (c.frac > t->fmax) t->fmax = c.frac;
        if (c.accept) t->accept_ok[c.accept == 3 ? 0 : c.accept == 4 ? 1 : c.accept == 6 ? 2 : 3]++;
    }
    if (!fail && rc2 != 0 && c.accept) t->accept_refused[c.accept == 3 ? 0 : c.accept == 4 ? 1 : c.accept == 6 ? 2 : 3]++;
    if (host_mem_runs && !fail && rc2 == 0 && sw && out && strstr(out, "host pool peak ")) {
        /* the host-memory bullet: a cap drawn around what the run's pool reached (5 % to 120 %)
         * or around the trainer's own host need (host_need_bytes: 80 % to 120 %, a sixth of them
         * exactly it). Below the need: refused before step 1 naming it; at or above: trained
         * bit-identical to none; never an error after training has started. */
        char num[64];
        const char *hp = strstr(out, "host pool peak ") + 15;
        size_t j = 0;
        for (; *hp && *hp != '|' && j + 1 < sizeof num; hp++) if (*hp != ' ') num[j++] = *hp;
        num[j] = 0;
        uint64_t hpeak = 0, need = json_u64(blog, "host_need_bytes");
        const char *hx = tot ? strstr(tot, "host_peak=") : NULL;   /* exact; the summary's is rounded */
        if (hx) snprintf(num, sizeof num, "%llu", strtoull(hx + 10, NULL, 10));
        CHECK_MSG(need > 0, "config %d: no host_need_bytes in the log", k);
        CHECK_MSG(ss_parse_size(num, &hpeak) != SS_OK || hpeak <= need,
                  "config %d: the host pool reached %llu bytes, above the trainer's host need %llu", k,
                  (unsigned long long)hpeak, (unsigned long long)need);
        if (hpeak > need) fail = 1;
        if (need > 0 && ss_parse_size(num, &hpeak) == SS_OK && hpeak > 0) {
            double f;
            int around_need = pick(0, 1);
            if (around_need) {
                f = pick(0, 5) == 0 ? 1.0 : 0.8 + 0.4 * unit();
                host_cap = (uint64_t)((double)need * f);
                f = (double)host_cap / (double)hpeak;
            } else {
                f = 0.05 + 1.15 * unit();
                host_cap = (uint64_t)((double)hpeak * f);
            }
            if (host_cap < 1) host_cap = 1;
            uint64_t cap = host_cap;
            int rc3 = train(&c, "cap", c.mode, budget, 1);
            host_cap = 0;
            char *o3 = slurp("cap", "out", NULL), *l3 = slurp("cap", "jsonl", NULL);
            int n3 = 0;
            char *lc = losses(l3, &n3);
            t->cap_runs++;
            int b = cap >= need ? 4 : (int)(4.0 * (double)cap / (double)need);
            t->cap_by[b][0]++;
            const char *outcome;
            if (rc3 == 0) {
                size_t wc = 0;
                char *C = slurp("cap", "w", &wc);
                int same = la && lc && !strcmp(la, lc) && ref.w && C && ref.wlen == wc && !memcmp(ref.w, C, wc);
                CHECK_MSG(same, "config %d: %s with --host-mem %llu (need %llu) trained but differs from none", k,
                          c.mode, (unsigned long long)cap, (unsigned long long)need);
                CHECK_MSG(cap >= need, "config %d: --host-mem %llu below the host need %llu was not refused", k,
                          (unsigned long long)cap, (unsigned long long)need);
                free(C);
                t->cap_ok += same;
                t->cap_by[b][1] += same;
                if (!same || cap < need) fail = 1;
                outcome = same ? "trained, identical" : "trained, DIFFERENT";
            } else {
                /* below the need: exit 1 before step 1, the message naming the need in bytes */
                char want[64];
                snprintf(want, sizeof want, "(%llu bytes", (unsigned long long)need);
                int before = n3 == 0 && o3 && !strstr(o3, "step 1:") && strstr(o3, "--host-mem") && strstr(o3, want);
                CHECK_MSG(rc3 == 1 && before && !strstr(o3, "Sanitizer"),
                          "config %d: --host-mem %llu (need %llu) ended with status %d after %d log lines: %.400s", k,
                          (unsigned long long)cap, (unsigned long long)need, rc3, n3, o3 ? o3 : "");
                CHECK_MSG(cap < need, "config %d: --host-mem %llu at or above the host need %llu failed: %.400s", k,
                          (unsigned long long)cap, (unsigned long long)need, o3 ? o3 : "");
                if (before) { t->cap_before++; t->cap_by[b][2]++; outcome = "refused before step 1 naming the need"; }
                else { t->cap_mid++; outcome = "error after training started"; }
                if (!before || rc3 != 1 || cap >= need) fail = 1;
            }
            if (verbose || fail)
                fprintf(stderr, "      host-mem %llu (%.0f %% of the pool peak %llu, %.0f %% of the need %llu): %s\n",
                        (unsigned long long)cap, 100 * f, (unsigned long long)hpeak, 100.0 * (double)cap / (double)need,
                        (unsigned long long)need, outcome);
            free(o3); free(l3); free(lc);
        }
    }
    if (verbose || fail)
        fprintf(stderr, "  %3d %-11s%s budget %8llu (%s%d; min %8llu + %.3f x (peak %8llu - min)) jitter %3.0f us swapped %7llu  %s: %s\n", k,
                c.mode, c.headroom0 ? " h0" : "   ", (unsigned long long)budget, c.accept ? "state + act/" : "frac ", c.accept,
                (unsigned long long)minb, c.accept ? ((double)budget - (double)minb) / (double)(peak > minb ? peak - minb : 1) : c.frac,
                (unsigned long long)peak,
                c.jitter_us, (unsigned long long)sw, what, fail ? "FAIL" : rc2 == 0 ? "identical" : "refused before step 1");
    budget_run_free(&br);
    ref_close(&ref);
}

/* Held-out configurations of issue 14's acceptance (STRESS_HELDOUT=n): the kinds the issue
 * names, every one at once, drawn from ranges the rest of the suite does not use: MoE (E 2..8,
 * top 1..2) with gradient accumulation (2..3) and evaluation steps (every 1..3), a varying
 * length (S1 8..40, S2 up to 40 above), grouped KV heads (fewer KV heads than heads), 2..6
 * layers, width 32..96, SwiGLU 32..160. Each is trained by the hybrid (--mode smartswap) at
 * the state + 1/3, 1/4, 1/6 and 1/10 of none's activations (peak - state); the even ones on
 * cpu-sim's virtual clock, the odd ones on the real clock, with copy jitter on half of those. The contract: at 1/3 and 1/4 the run trains, losses and final weights
 * bit-identical to none; at 1/6 and 1/10 it does so or is refused before step 1 naming a
 * smallest budget above the one given; nothing ends with an error after training has started. */
static int hverbose;   /* a line per held-out configuration (on when more than one runs) */
/* STRESS_HELDOUT_MODE: the mode the held-out runs train in (the command's words): smartswap (the
 * hybrid, default), swap-only (smartswap --swap-only) or offload-all */
static const char *heldout_mode = "smartswap";
typedef struct htally { int ok[4], refused[4], failed[4]; } htally;

static void draw_heldout(cfg *c, uint64_t seed, int k) {
    rng_state = seed ^ 0x5EEDF00Dull;
    uint64_t h0 = rnd();
    rng_state = (uint64_t)k ^ 0xA0761D6478BD642Full;
    rng_state = h0 ^ rnd();
    memset(c, 0, sizeof *c);
    c->layers = pick(2, 6);
    c->hidden = 16 * pick(2, 6);
    static const int hs[] = {2, 4, 8};
    do c->heads = hs[pick(0, 2)]; while ((c->hidden / c->heads) % 2 || c->hidden % c->heads);
    c->kv = c->heads / (c->heads == 2 ? 2 : pick(0, 1) ? 2 : 4);
    c->ffn = 16 * pick(2, 10);
    c->E = pick(2, 8);
    c->K = pick(1, 2);
    c->seq_min = pick(8, 40);
    c->seq_max = c->seq_min + pick(1, 40);
    c->batch = pick(1, 4);
    c->accum = pick(2, 3);
    c->eval_every = pick(1, 3);
    c->steps = pick(6, 14);
    c->mode = "smartswap";
    /* even ones on the virtual clock (the same run every time; make test's short form), odd
     * ones on the real clock with copy jitter half the time (links fast enough that the
     * simulated copies' sleeps stay short) */
    static const double g[] = {0.05, 0.5, 2, 8};
    c->virt = k % 2 == 0;
    c->gbps = g[c->virt ? pick(0, 3) : pick(1, 3)];
    c->jitter_us = c->virt || pick(0, 1) ? 0 : (double)pick(1, 200);
}

static void one_heldout(uint64_t seed, int k, htally *t) {
    cfg c;
    draw_heldout(&c, seed, k);
    char what[256], who[32];
    describe(&c, what, sizeof what);
    snprintf(what + strlen(what), sizeof what - strlen(what), " %g GB/s%s", c.gbps,
             c.virt ? " virtual clock" : c.jitter_us > 0 ? " jitter" : "");
    test_current = what;
    snprintf(who, sizeof who, "held-out %d", k);
    ref_run ref;
    if (ref_open(&c, "href", who, &ref)) {
        for (int i = 0; i < 4; i++) t->failed[i]++;
        return;
    }
    uint64_t state = ref.state, peak = ref.peak;
    static const int fr[4] = {3, 4, 6, 10};
    char res[4][48] = {"not run", "not run", "not run", "not run"};
    for (int i = 0; i < 4 && state < peak; i++) {
        uint64_t budget = state + (peak - state) / (uint64_t)fr[i];
        char at[48];
        snprintf(at, sizeof at, "%s at state + 1/%d", who, fr[i]);
        budget_run br;
        const char *verdict;
        switch (run_budgeted(&c, "hrun", heldout_mode, budget, &ref, at, &br)) {
        case RUN_SAME: t->ok[i]++; verdict = "identical"; break;
        case RUN_DIFFERENT: t->failed[i]++; verdict = "DIFFERENT"; break;
        case RUN_REFUSED:
            /* issue 14 acceptance 1: at 1/3 and 1/4 a refusal is a failure */
            CHECK_MSG(fr[i] >= 6, "%s: refused at state + 1/%d (%llu B; smallest budget %llu B), which must train "
                      "(issue 14 acceptance 1)", who, fr[i], (unsigned long long)budget, (unsigned long long)br.own);
            if (fr[i] >= 6) { t->refused[i]++; verdict = "refused before step 1"; }
            else { t->failed[i]++; verdict = "REFUSED (must train)"; }
            break;
        default:
            t->failed[i]++;
            verdict = br.nlines == 0 && br.out && strstr(br.out, "smallest budget") ? "refused at or above its figure"
                                                                                  : "FAILED after training started";
        }
        snprintf(res[i], sizeof res[i], "%s", verdict);
        budget_run_free(&br);
    }
    if (verbose || hverbose)
        fprintf(stderr, "  h%3d state %8llu min %8llu peak %8llu  %s: 1/3 %s, 1/4 %s, 1/6 %s, 1/10 %s\n", k,
                (unsigned long long)state, (unsigned long long)ref.minb, (unsigned long long)peak, what, res[0], res[1],
                res[2], res[3]);
    ref_close(&ref);
}

int main(int argc, char **argv) {
    (void)argc;
    const char *e = getenv("SS_CLI");
    if (e && *e) snprintf(cli, sizeof cli, "%s", e);
    else {
        char self[4096];
        snprintf(self, sizeof self, "%s", argv[0]);
        snprintf(cli, sizeof cli, "%s/../smartswap", dirname(self));
    }
    if (cli[0] != '/') {   /* the runs cd into the temporary directory */
        char cwd[2048], rel[8192];
        if (getcwd(cwd, sizeof cwd)) { snprintf(rel, sizeof rel, "%s/%s", cwd, cli); snprintf(cli, sizeof cli, "%.4000s", rel); }
    }
    test_current = "setup";
    CHECK_MSG(access(cli, X_OK) == 0, "no smartswap binary at %s (set SS_CLI)", cli);
    if (access(cli, X_OK) != 0) return test_summary();
    int n = getenv("STRESS_N") ? atoi(getenv("STRESS_N")) : 8;
    uint64_t seed = getenv("STRESS_SEED") ? strtoull(getenv("STRESS_SEED"), NULL, 10) : 1;
    host_mem_runs = !getenv("STRESS_HOST_MEM") || atoi(getenv("STRESS_HOST_MEM"));   /* on unless 0 */
    verbose = n > 8 || (getenv("STRESS_VERBOSE") && atoi(getenv("STRESS_VERBOSE")));
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ss-stress-XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    tally t = {0};
    t.fmin = 2; t.fmax = -1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int k = 0; k < n; k++) one(seed, k, &t);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* the held-out configurations (default 1: make test's short form) */
    int nh = getenv("STRESS_HELDOUT") ? atoi(getenv("STRESS_HELDOUT")) : 1;
    const char *hm = getenv("STRESS_HELDOUT_MODE");
    if (hm && *hm) {
        if (!strcmp(hm, "swap-only")) heldout_mode = "smartswap --swap-only";
        else if (!strcmp(hm, "offload-all")) heldout_mode = "offload-all";
        else if (strcmp(hm, "smartswap")) {
            fprintf(stderr, "STRESS_HELDOUT_MODE=%s: use smartswap, swap-only or offload-all\n", hm);
            return 2;
        }
    }
    if (nh > 0) {
        struct timespec h0, h1;
        htally ht;
        memset(&ht, 0, sizeof ht);
        clock_gettime(CLOCK_MONOTONIC, &h0);
        hverbose = nh > 1;
        for (int k = 0; k < nh; k++) one_heldout(seed, k, &ht);
        clock_gettime(CLOCK_MONOTONIC, &h1);
        fprintf(stderr, "held-out: %d configurations (MoE + accumulation + evaluation + varying length + grouped KV, "
                "--mode %s; seed %llu) in %.1f s; trained bit-identical / refused before step 1 / failed: "
                "1/3 %d/%d/%d, 1/4 %d/%d/%d, 1/6 %d/%d/%d, 1/10 %d/%d/%d\n", nh, heldout_mode, (unsigned long long)seed,
                (double)(h1.tv_sec - h0.tv_sec) + 1e-9 * (double)(h1.tv_nsec - h0.tv_nsec), ht.ok[0], ht.refused[0],
                ht.failed[0], ht.ok[1], ht.refused[1], ht.failed[1], ht.ok[2], ht.refused[2], ht.failed[2], ht.ok[3],
                ht.refused[3], ht.failed[3]);
    }
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    fprintf(stderr, "stress: %d configurations (seed %llu) in %.1f s: %d trained bit-identical to none "
            "(smartswap %d, offload-all %d, recompute %d; %d in the lowest quarter of [min, peak], %d in the top; "
            "%d swapped bytes out, %d used the eviction fallback), "
            "%d refused before step 1 below their own smallest budget, %d failed\n",
            n, (unsigned long long)seed, s, t.ok, t.by_mode[0], t.by_mode[1], t.by_mode[2], t.low, t.high, t.swapped, t.evicted, t.refused,
            t.failed);
    fprintf(stderr, "acceptance fractions (state + 1/N of none's activations, a swapping mode; trained bit-identical / "
            "refused before step 1 below the smallest budget): 1/3 %d/%d, 1/4 %d/%d, 1/6 %d/%d, 1/10 %d/%d\n",
            t.accept_ok[0], t.accept_refused[0], t.accept_ok[1], t.accept_refused[1], t.accept_ok[2], t.accept_refused[2],
            t.accept_ok[3], t.accept_refused[3]);
    if (host_mem_runs)
        fprintf(stderr, "host-mem: %d capped runs (half 5 %% to 120 %% of the pool peak, half 80 %% to 120 %% of host_need_bytes): "
                "%d trained identical to none, %d refused before step 1 naming the need, %d with an error after "
                "training had started\n",
                t.cap_runs, t.cap_ok, t.cap_before, t.cap_mid);
    if (host_mem_runs && t.cap_runs)
        for (int b = 0; b < 5; b++)
            fprintf(stderr, "  cap %s of the host need: %3d runs, %3d trained identical, %3d refused before step 1\n",
                    b == 0 ? "   0- 25 %" : b == 1 ? "  25- 50 %" : b == 2 ? "  50- 75 %" : b == 3 ? "  75-100 %" : "at least  ",
                    t.cap_by[b][0], t.cap_by[b][1], t.cap_by[b][2]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_summary();
}
