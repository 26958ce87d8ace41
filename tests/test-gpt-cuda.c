/* test-gpt-cuda.c: every CUDA kernel of the trainer (gpt/kernels-cuda.cu) against the CPU
 * reference (gpt/kernels-cpu.c), and each run twice on the GPU to check bit-identical results.
 *
 * Each test draws its inputs from a seeded generator, runs the CPU kernel, then twice: uploads
 * the same inputs and initial gradients, runs the kc_ kernel, downloads every output. Checks:
 *   - the two GPU runs agree bit for bit (memcmp) on every output;
 *   - the GPU agrees with the CPU, normwise: max|gpu - cpu| <= tol * max|cpu|, where for
 *     backward kernels (which accumulate) both sides have the initial gradient subtracted:
 *       TOL_EXACT 0      no reduction and no exp/log (add, accumulate, rope, embedding forward
 *                        and backward, gather, the full cross-entropy backward, AdamW, the
 *                        loss mean); the Makefile compiles the .cu with --fmad=false. On a CPU
 *                        that contracts a*b+c (not x86-64) these use TOL_ELEM instead.
 *       TOL_ELEM 1e-6    elementwise with expf/logf (swiglu, the log-sum-exp backward, routing)
 *       TOL_FWD  1e-5    reductions in forward kernels (matmul, rmsnorm, attention, softmax)
 *       TOL_BWD  1e-4    reductions in backward kernels (the sums are longer and cancel)
 *     a wrong index gives errors of order 1, far above these.
 * Without the CUDA toolkit (the Makefile's USE_CUDA) or without a GPU every test is skipped,
 * saying why; the summary then reads "0 passed, 0 failed, N skipped". scripts/cuda-emu-check.sh
 * links this file to the kernels run on the CPU by an emulator (docs/cuda.md).
 */
#include "bf16.h"
#include "kernels.h"
#include "test.h"

#include <math.h>

#ifdef SS_GPT_CUDA
#include "kernels-cuda.h"
#ifndef SS_GPT_NO_OPS
#include "ops.h"
#endif
#endif

#define TOL_ELEM 1e-6
#define TOL_FWD 1e-5
#define TOL_BWD 1e-4
#if defined(__x86_64__)
#define TOL_EXACT 0.0
#else
#define TOL_EXACT TOL_ELEM
#endif

#ifdef SS_GPT_CUDA

static int gpu_ok;
static char gpu_why[256] = "gpt_cuda_init not called";
#define NEED_GPU() do { if (!gpu_ok) TEST_SKIP(gpu_why); } while (0)

static uint64_t rng_state = 0x5eed17;
static float urand(void) {   /* exact float in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int32_t)(rng_state >> 40) - (1 << 23)) / (float)(1 << 23);
}

/* A float tensor: host values h (inputs / initial gradients), device copy d, the two GPU
 * results r[0], r[1] and the CPU result c (a copy of h the CPU kernel works on). */
typedef struct fbuf {
    size_t n;
    float *h, *d, *r[2], *c;
} fbuf;

static fbuf fb(size_t n, float amp) {
    fbuf b = {n, malloc(n * sizeof(float)), gpt_cuda_malloc(n * sizeof(float)),
              {malloc(n * sizeof(float)), malloc(n * sizeof(float))}, malloc(n * sizeof(float))};
    if (!b.h || !b.d || !b.r[0] || !b.r[1] || !b.c) { fprintf(stderr, "out of memory\n"); exit(2); }
    for (size_t i = 0; i < n; i++) b.h[i] = amp * urand();
    memcpy(b.c, b.h, n * sizeof(float));
    return b;
}
static void push(fbuf *b) { CHECK(gpt_cuda_upload(b->d, b->h, b->n * sizeof(float)) == 0); }
static void pull(fbuf *b, int rep) { CHECK(gpt_cuda_download(b->r[rep], b->d, b->n * sizeof(float)) == 0); }
static void fb_free(fbuf *b) {
    free(b->h); free(b->r[0]); free(b->r[1]); free(b->c);
    gpt_cuda_free(b->d);
}

static int *iup(const int *h, size_t n) {
    int *d = gpt_cuda_malloc(n * sizeof(int));
    CHECK(d && gpt_cuda_upload(d, h, n * sizeof(int)) == 0);
    return d;
}

/* Runs the GPU side twice (sync + sticky status after each) */
static void synced(const char *what) {
    char err[256];
    int st = gpt_cuda_sync(err, sizeof err);
    CHECK_MSG(st == 0, "%s: %s", what, err);
}

/* The checks on one output: two runs bit-identical, then against the CPU. acc: the kernel
 * accumulates into it, so the comparison is on the increments (minus b->h). */
static void check_out(const char *what, const fbuf *b, double tol, int acc) {
    CHECK_MSG(memcmp(b->r[0], b->r[1], b->n * sizeof(float)) == 0, "%s: two GPU runs differ", what);
    double md = 0, mc = 0;
    size_t at = 0;
    for (size_t i = 0; i < b->n; i++) {
        double g = b->r[0][i], c = b->c[i];
        if (acc) { g -= b->h[i]; c -= b->h[i]; }
        double d = fabs(g - c);
        if (d > md || d != d) { md = d; at = i; }
        if (fabs(c) > mc) mc = fabs(c);
    }
    double e = tol == 0.0 ? md : md / (mc > 1e-30 ? mc : 1e-30);
    if (tol == 0.0)
        CHECK_MSG(md == 0.0 && memcmp(b->r[0], b->c, b->n * sizeof(float)) == 0,
                  "%s: not bit-identical to the CPU (max abs diff %.3g at %zu: %.9g vs %.9g)", what, md, at,
                  (double)b->r[0][at], (double)b->c[at]);
    else
        CHECK_MSG(e <= tol && mc > 0, "%s: normwise error %.3g > %.3g (at %zu: %.9g vs %.9g)", what, e, tol, at,
                  (double)b->r[0][at], (double)b->c[at]);
    fprintf(stderr, "     %-26s %s %.2e (tolerance %.0e)\n", what, tol == 0.0 ? "max abs diff" : "rel err     ",
            e, tol);
}

/* ------------------------------------------------------------------------------------------ */

static void t_matmul(void) {
    NEED_GPU();
    const int M = 70, K = 48, N = 33;
    fbuf out = fb((size_t)M * N, 0), inp = fb((size_t)M * K, 1), w = fb((size_t)N * K, 0.5f);
    fbuf dout = fb((size_t)M * N, 1), dinp = fb((size_t)M * K, 0.3f), dw = fb((size_t)N * K, 0.3f);
    k_matmul_fwd(out.c, inp.h, w.h, M, K, N);
    k_matmul_bwd(dinp.c, dw.c, dout.h, inp.h, w.h, M, K, N);
    for (int rep = 0; rep < 2; rep++) {
        push(&inp); push(&w); push(&dout); push(&dinp); push(&dw);
        kc_matmul_fwd(out.d, inp.d, w.d, M, K, N);
        kc_matmul_bwd(dinp.d, dw.d, dout.d, inp.d, w.d, M, K, N);
        synced("matmul");
        pull(&out, rep); pull(&dinp, rep); pull(&dw, rep);
    }
    check_out("matmul out", &out, TOL_FWD, 0);
    check_out("matmul dinp", &dinp, TOL_BWD, 1);
    check_out("matmul dw", &dw, TOL_BWD, 1);
    fb_free(&out); fb_free(&inp); fb_free(&w); fb_free(&dout); fb_free(&dinp); fb_free(&dw);
}

static void t_rmsnorm(void) {
    NEED_GPU();
    const int M = 50, C = 72;
    fbuf out = fb((size_t)M * C, 0), rstd = fb(M, 0), x = fb((size_t)M * C, 2), w = fb(C, 1);
    fbuf dout = fb((size_t)M * C, 1), dx = fb((size_t)M * C, 0.2f), dw = fb(C, 0.2f);
    for (int c = 0; c < C; c++) w.h[c] += 1.5f;
    k_rmsnorm_fwd(out.c, rstd.c, x.h, w.h, M, C, 1e-5f);
    k_rmsnorm_bwd(dx.c, dw.c, dout.h, x.h, rstd.c, w.h, M, C);
    for (int rep = 0; rep < 2; rep++) {
        push(&x); push(&w); push(&dout); push(&dx); push(&dw);
        kc_rmsnorm_fwd(out.d, rstd.d, x.d, w.d, M, C, 1e-5f);
        kc_rmsnorm_bwd(dx.d, dw.d, dout.d, x.d, rstd.d, w.d, M, C);
        synced("rmsnorm");
        pull(&out, rep); pull(&rstd, rep); pull(&dx, rep); pull(&dw, rep);
    }
    check_out("rmsnorm out", &out, TOL_FWD, 0);
    check_out("rmsnorm rstd", &rstd, TOL_FWD, 0);
    check_out("rmsnorm dx", &dx, TOL_BWD, 1);
    check_out("rmsnorm dw", &dw, TOL_BWD, 1);
    fb_free(&out); fb_free(&rstd); fb_free(&x); fb_free(&w); fb_free(&dout); fb_free(&dx); fb_free(&dw);
}

static void t_rope(void) {
    NEED_GPU();
    const int B = 2, T = 9, H = 3, hd = 16;
    size_t n = (size_t)B * T * H * hd;
    fbuf out = fb(n, 0), x = fb(n, 1), cs = fb((size_t)T * hd / 2, 1), sn = fb((size_t)T * hd / 2, 1);
    fbuf dout = fb(n, 1), dx = fb(n, 0.5f);
    k_rope_fwd(out.c, x.h, cs.h, sn.h, B, T, H, hd);
    k_rope_bwd(dx.c, dout.h, cs.h, sn.h, B, T, H, hd);
    for (int rep = 0; rep < 2; rep++) {
        push(&x); push(&cs); push(&sn); push(&dout); push(&dx);
        kc_rope_fwd(out.d, x.d, cs.d, sn.d, B, T, H, hd);
        kc_rope_bwd(dx.d, dout.d, cs.d, sn.d, B, T, H, hd);
        synced("rope");
        pull(&out, rep); pull(&dx, rep);
    }
    check_out("rope out", &out, TOL_EXACT, 0);
    check_out("rope dx", &dx, TOL_EXACT, 0);
    fb_free(&out); fb_free(&x); fb_free(&cs); fb_free(&sn); fb_free(&dout); fb_free(&dx);
}

/* both attention forms on one shape; T crosses a 64-key block, hd is not a multiple of 32 */
static void attn_case(int B, int T, int A, int KV, int hd) {
    size_t nq = (size_t)B * T * A * hd, nk = (size_t)B * T * KV * hd;
    fbuf q = fb(nq, 1), k = fb(nk, 1), v = fb(nk, 1), dout = fb(nq, 1);
    fbuf out = fb(nq, 0), att = fb((size_t)B * A * T * T, 0), fout = fb(nq, 0), lse = fb((size_t)B * A * T, 0);
    fbuf dq = fb(nq, 0.1f), dk = fb(nk, 0.1f), dv = fb(nk, 0.1f);
    fbuf fdq = fb(nq, 0.1f), fdk = fb(nk, 0.1f), fdv = fb(nk, 0.1f);
    k_attn_fwd(out.c, att.c, q.h, k.h, v.h, B, T, A, KV, hd);
    k_attn_bwd(dq.c, dk.c, dv.c, dout.h, q.h, k.h, v.h, att.c, B, T, A, KV, hd);
    k_flash_attn_fwd(fout.c, lse.c, q.h, k.h, v.h, B, T, A, KV, hd);
    k_flash_attn_bwd(fdq.c, fdk.c, fdv.c, dout.h, q.h, k.h, v.h, lse.c, B, T, A, KV, hd);
    for (int rep = 0; rep < 2; rep++) {
        push(&q); push(&k); push(&v); push(&dout);
        push(&dq); push(&dk); push(&dv); push(&fdq); push(&fdk); push(&fdv);
        kc_attn_fwd(out.d, att.d, q.d, k.d, v.d, B, T, A, KV, hd);
        kc_attn_bwd(dq.d, dk.d, dv.d, dout.d, q.d, k.d, v.d, att.d, B, T, A, KV, hd);
        kc_flash_attn_fwd(fout.d, lse.d, q.d, k.d, v.d, B, T, A, KV, hd);
        kc_flash_attn_bwd(fdq.d, fdk.d, fdv.d, dout.d, q.d, k.d, v.d, lse.d, B, T, A, KV, hd);
        synced("attention");
        pull(&out, rep); pull(&att, rep); pull(&dq, rep); pull(&dk, rep); pull(&dv, rep);
        pull(&fout, rep); pull(&lse, rep); pull(&fdq, rep); pull(&fdk, rep); pull(&fdv, rep);
    }
    fprintf(stderr, "     attention B %d T %d A %d KV %d hd %d\n", B, T, A, KV, hd);
    check_out("attn out", &out, TOL_FWD, 0);
    check_out("attn att", &att, TOL_FWD, 0);
    check_out("attn dq", &dq, TOL_BWD, 1);
    check_out("attn dk", &dk, TOL_BWD, 1);
    check_out("attn dv", &dv, TOL_BWD, 1);
    check_out("flash out", &fout, TOL_FWD, 0);
    check_out("flash lse", &lse, TOL_FWD, 0);
    check_out("flash dq", &fdq, TOL_BWD, 1);
    check_out("flash dk", &fdk, TOL_BWD, 1);
    check_out("flash dv", &fdv, TOL_BWD, 1);
    fbuf *all[] = {&q, &k, &v, &dout, &out, &att, &fout, &lse, &dq, &dk, &dv, &fdq, &fdk, &fdv};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fb_free(all[i]);
}

static void t_attention(void) {
    NEED_GPU();
    attn_case(2, 80, 4, 2, 48);
    attn_case(1, 130, 2, 1, 64);
}

static void t_elementwise(void) {
    NEED_GPU();
    const size_t n = 1000;
    fbuf g = fb(n, 4), u = fb(n, 2), out = fb(n, 0), dout = fb(n, 1), dg = fb(n, 0.5f), du = fb(n, 0.5f);
    fbuf sum = fb(n, 0), acc = fb(n, 1);
    k_swiglu_fwd(out.c, g.h, u.h, n);
    k_swiglu_bwd(dg.c, du.c, dout.h, g.h, u.h, n);
    k_add_fwd(sum.c, g.h, u.h, n);
    k_accumulate(acc.c, g.h, n);
    for (int rep = 0; rep < 2; rep++) {
        push(&g); push(&u); push(&dout); push(&dg); push(&du); push(&acc);
        kc_swiglu_fwd(out.d, g.d, u.d, n);
        kc_swiglu_bwd(dg.d, du.d, dout.d, g.d, u.d, n);
        kc_add_fwd(sum.d, g.d, u.d, n);
        kc_accumulate(acc.d, g.d, n);
        synced("elementwise");
        pull(&out, rep); pull(&dg, rep); pull(&du, rep); pull(&sum, rep); pull(&acc, rep);
    }
    check_out("swiglu out", &out, TOL_ELEM, 0);
    check_out("swiglu dg", &dg, TOL_ELEM, 1);
    check_out("swiglu du", &du, TOL_ELEM, 1);
    check_out("add", &sum, TOL_EXACT, 0);
    check_out("accumulate", &acc, TOL_EXACT, 0);
    fb_free(&g); fb_free(&u); fb_free(&out); fb_free(&dout); fb_free(&dg); fb_free(&du); fb_free(&sum);
    fb_free(&acc);
}

static void t_embedding(void) {
    NEED_GPU();
    const int M = 300, C = 40, V = 256;
    int tok[300];
    for (int i = 0; i < M; i++) tok[i] = (int)((urand() + 1.0f) * 20.0f) % 40;   /* many repeats */
    tok[7] = V - 1;
    int *dtok = iup(tok, M);
    fbuf wte = fb((size_t)V * C, 1), out = fb((size_t)M * C, 0), dout = fb((size_t)M * C, 1);
    fbuf dwte = fb((size_t)V * C, 0.5f);
    k_embed_fwd(out.c, tok, wte.h, M, C);
    k_embed_bwd(dwte.c, dout.h, tok, M, C);
    for (int rep = 0; rep < 2; rep++) {
        push(&wte); push(&dout); push(&dwte);
        kc_embed_fwd(out.d, dtok, wte.d, M, C);
        kc_embed_bwd(dwte.d, dout.d, dtok, M, C, V);
        synced("embedding");
        pull(&out, rep); pull(&dwte, rep);
    }
    check_out("embed out", &out, 0.0, 0);
    check_out("embed dwte (CPU order)", &dwte, 0.0, 0);
    fb_free(&wte); fb_free(&out); fb_free(&dout); fb_free(&dwte);
    gpt_cuda_free(dtok);
}

static void xent_case(int M, int V) {
    int *tg = malloc((size_t)M * sizeof *tg);
    for (int i = 0; i < M; i++) tg[i] = (int)((urand() + 1.0f) * 0.5f * V) % V;
    int *dtg = iup(tg, M);
    fbuf logits = fb((size_t)M * V, 4), probs = fb((size_t)M * V, 0), losses = fb(M, 0);
    fbuf dlogits = fb((size_t)M * V, 0.1f), lse = fb(M, 0), losses2 = fb(M, 0), inplace = fb((size_t)M * V, 0);
    fbuf mean = fb(1, 0);
    float cmean = k_xent_fwd(probs.c, losses.c, logits.h, tg, M, V);
    k_xent_bwd(dlogits.c, probs.c, tg, M, V, 0.7f);
    k_xent_lse_fwd(lse.c, losses2.c, logits.h, tg, M, V);
    memcpy(inplace.h, logits.h, inplace.n * sizeof(float));
    memcpy(inplace.c, logits.h, inplace.n * sizeof(float));
    k_xent_lse_bwd(inplace.c, lse.c, tg, M, V, 0.25f);
    /* the GPU's bwd reads the CPU's probs and lse, so it is checked on its own */
    memcpy(probs.h, probs.c, probs.n * sizeof(float));
    memcpy(lse.h, lse.c, lse.n * sizeof(float));
    memcpy(losses.h, losses.c, losses.n * sizeof(float));
    double cm = 0;
    for (int i = 0; i < M; i++) cm += losses.c[i];
    mean.c[0] = (float)(cm / M);
    float gmean[2];
    fbuf glse = fb(M, 0), gprobs = fb((size_t)M * V, 0);
    memcpy(glse.c, lse.c, lse.n * sizeof(float));
    memcpy(gprobs.c, probs.c, probs.n * sizeof(float));
    for (int rep = 0; rep < 2; rep++) {
        push(&logits); push(&dlogits); push(&inplace); push(&probs); push(&lse); push(&losses);
        gmean[rep] = kc_xent_fwd(gprobs.d, losses2.d, logits.d, dtg, M, V);
        kc_xent_bwd(dlogits.d, probs.d, dtg, M, V, 0.7f);
        kc_xent_lse_fwd(glse.d, losses2.d, logits.d, dtg, M, V);
        kc_xent_lse_bwd(inplace.d, lse.d, dtg, M, V, 0.25f);
        kc_loss_mean(mean.d, losses.d, M);
        synced("cross-entropy");
        pull(&gprobs, rep); pull(&glse, rep); pull(&losses2, rep); pull(&dlogits, rep); pull(&inplace, rep);
        pull(&mean, rep);
    }
    fprintf(stderr, "     cross-entropy M %d V %d\n", M, V);
    CHECK_MSG(memcmp(&gmean[0], &gmean[1], sizeof(float)) == 0, "xent mean differs between runs");
    CHECK_MSG(fabs(gmean[0] - cmean) <= TOL_FWD * fabs(cmean), "xent mean %.9g vs %.9g", gmean[0], cmean);
    check_out("xent probs", &gprobs, TOL_FWD, 0);
    check_out("xent lse", &glse, TOL_FWD, 0);
    check_out("xent losses", &losses2, TOL_FWD, 0);
    check_out("xent dlogits", &dlogits, TOL_EXACT, 0);
    check_out("xent_lse_bwd (in place)", &inplace, TOL_ELEM, 0);
    check_out("loss mean (double, row order)", &mean, 0.0, 0);
    fbuf *all[] = {&logits, &probs, &losses, &dlogits, &lse, &losses2, &inplace, &mean, &glse, &gprobs};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fb_free(all[i]);
    gpt_cuda_free(dtg);
    free(tg);
}

static void t_cross_entropy(void) {
    NEED_GPU();
    xent_case(37, 256);
    xent_case(5, 300);
}

static void t_moe(void) {
    NEED_GPU();
    const int M = 40, E = 6, K = 2, C = 24;
    fbuf logits = fb((size_t)M * E, 3), probs = fb((size_t)M * E, 0), wts = fb((size_t)M * K, 0);
    fbuf dwts = fb((size_t)M * K, 1), dlogits = fb((size_t)M * E, 0.2f);
    int idx_c[40 * 2], idx_g[2][40 * 2];
    int *didx = gpt_cuda_malloc(sizeof idx_c);
    k_moe_route_fwd(probs.c, wts.c, idx_c, logits.h, M, E, K);
    k_moe_route_bwd(dlogits.c, dwts.h, probs.c, idx_c, M, E, K);
    /* expert batches from the CPU routing: rows ascending per expert, slot = row in the batch */
    int n_e[6] = {0}, slot[40 * 2], rows[6][40] = {{0}};
    for (int t = 0; t < M; t++)
        for (int k = 0; k < K; k++) {
            int e = idx_c[t * K + k];
            slot[t * K + k] = n_e[e];
            rows[e][n_e[e]++] = t;
        }
    int *dslot = iup(slot, (size_t)M * K), *didxc = iup(idx_c, (size_t)M * K);
    fbuf x = fb((size_t)M * C, 1), dout = fb((size_t)M * C, 1), out = fb((size_t)M * C, 0);
    fbuf dwts2 = fb((size_t)M * K, 0.3f), dx = fb((size_t)M * C, 0.2f);
    fbuf xe[6], ye[6], dye[6], dxe[6];
    int *drows[6];
    const float *yc[6], *yd[6];
    float *dyc[6], *dyd[6];
    for (int e = 0; e < E; e++) {
        size_t n = (size_t)(n_e[e] ? n_e[e] : 1) * C;
        xe[e] = fb(n, 0); ye[e] = fb(n, 1); dye[e] = fb(n, 0.2f); dxe[e] = fb(n, 1);
        drows[e] = iup(rows[e], n_e[e] ? (size_t)n_e[e] : 1);
        yc[e] = ye[e].h; yd[e] = ye[e].d; dyc[e] = dye[e].c; dyd[e] = dye[e].d;
    }
    k_moe_combine_fwd(out.c, wts.c, idx_c, slot, yc, M, C, K);
    k_moe_combine_bwd(dyc, dwts2.c, dout.h, wts.c, idx_c, slot, yc, M, C, K);
    for (int e = 0; e < E; e++) {
        k_moe_gather_fwd(xe[e].c, x.h, rows[e], n_e[e], C);
        k_moe_gather_bwd(dx.c, dxe[e].h, rows[e], n_e[e], C);
    }
    memcpy(wts.h, wts.c, wts.n * sizeof(float));   /* combine reads the CPU's routing weights */
    fbuf gw = fb((size_t)M * K, 0);
    memcpy(gw.c, wts.c, wts.n * sizeof(float));
    for (int rep = 0; rep < 2; rep++) {
        push(&logits); push(&dwts); push(&dlogits); push(&x); push(&dout); push(&dwts2); push(&dx); push(&wts);
        for (int e = 0; e < E; e++) { push(&ye[e]); push(&dye[e]); push(&dxe[e]); }
        kc_moe_route_fwd(probs.d, gw.d, didx, logits.d, M, E, K);
        kc_moe_route_bwd(dlogits.d, dwts.d, probs.d, didx, M, E, K);
        kc_moe_combine_fwd(out.d, wts.d, didxc, dslot, yd, M, C, K, E);
        kc_moe_combine_bwd(dyd, dwts2.d, dout.d, wts.d, didxc, dslot, yd, M, C, K, E);
        for (int e = 0; e < E; e++) {
            kc_moe_gather_fwd(xe[e].d, x.d, drows[e], n_e[e], C);
            kc_moe_gather_bwd(dx.d, dxe[e].d, drows[e], n_e[e], C);
        }
        synced("moe");
        CHECK(gpt_cuda_download(idx_g[rep], didx, sizeof idx_c) == 0);
        pull(&probs, rep); pull(&gw, rep); pull(&dlogits, rep); pull(&out, rep); pull(&dwts2, rep); pull(&dx, rep);
        for (int e = 0; e < E; e++) { pull(&xe[e], rep); pull(&dye[e], rep); }
    }
    CHECK_MSG(memcmp(idx_g[0], idx_g[1], sizeof idx_c) == 0, "moe idx differs between runs");
    CHECK_MSG(memcmp(idx_g[0], idx_c, sizeof idx_c) == 0, "moe idx differs from the CPU's");
    check_out("moe_route probs", &probs, TOL_ELEM, 0);
    check_out("moe_route wts", &gw, TOL_ELEM, 0);
    check_out("moe_route dlogits", &dlogits, TOL_ELEM, 1);
    check_out("moe_combine out", &out, TOL_FWD, 0);
    check_out("moe_combine dwts", &dwts2, TOL_BWD, 1);
    check_out("moe_gather dx", &dx, TOL_EXACT, 0);
    for (int e = 0; e < E; e++) {
        if (!n_e[e]) continue;
        check_out("moe_gather xe", &xe[e], 0.0, 0);
        check_out("moe_combine dye", &dye[e], TOL_EXACT, 1);
    }
    fbuf *all[] = {&logits, &probs, &wts, &dwts, &dlogits, &x, &dout, &out, &dwts2, &dx, &gw};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fb_free(all[i]);
    for (int e = 0; e < E; e++) { fb_free(&xe[e]); fb_free(&ye[e]); fb_free(&dye[e]); fb_free(&dxe[e]); gpt_cuda_free(drows[e]); }
    gpt_cuda_free(didx); gpt_cuda_free(dslot); gpt_cuda_free(didxc);
}

static void t_adamw(void) {
    NEED_GPU();
    const size_t n = 777;
    fbuf p = fb(n, 1), m = fb(n, 0.01f), v = fb(n, 0.01f), g = fb(n, 1);
    for (size_t i = 0; i < n; i++) { v.h[i] = fabsf(v.h[i]); v.c[i] = v.h[i]; }
    for (int t = 1; t <= 3; t++) k_adamw(p.c, m.c, v.c, g.h, n, 3e-3f, 0.9f, 0.95f, 1e-8f, t == 2 ? 0.0f : 0.1f, t);
    for (int rep = 0; rep < 2; rep++) {
        push(&p); push(&m); push(&v); push(&g);
        for (int t = 1; t <= 3; t++) kc_adamw(p.d, m.d, v.d, g.d, n, 3e-3f, 0.9f, 0.95f, 1e-8f, t == 2 ? 0.0f : 0.1f, t);
        synced("adamw");
        pull(&p, rep); pull(&m, rep); pull(&v, rep);
    }
    check_out("adamw p", &p, TOL_EXACT, 0);
    check_out("adamw m", &m, TOL_EXACT, 0);
    check_out("adamw v", &v, TOL_EXACT, 0);
    fb_free(&p); fb_free(&m); fb_free(&v); fb_free(&g);
}

/* the sticky error: an unsupported shape is reported, not run */
static void t_errors(void) {
    NEED_GPU();
    char err[256];
    CHECK(gpt_cuda_status(err, sizeof err) == 0);
    kc_flash_attn_fwd(NULL, NULL, NULL, NULL, NULL, 1, 4, 2, 1, GPT_CUDA_HD_MAX + 2);
    CHECK(gpt_cuda_status(err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "flash_attn_fwd") != NULL, "%s", err);
    gpt_cuda_shutdown();   /* clears it */
    CHECK(gpt_cuda_init(err, sizeof err) == 0);
    CHECK(gpt_cuda_status(err, sizeof err) == 0);
}


/* ------------------------------------------------------------------------------------------ */
/* bf16 (the kernels of --dtype bf16): conversions bit for bit against a CPU reference; the bf16
 * matrix products against the CPU fp32 products of the same bf16-rounded inputs (TOL_FWD /
 * TOL_BWD) and against the unrounded fp32 inputs (TOL_BF16: bf16 keeps 8 significant bits) */
#define TOL_BF16 1e-2

/* bf16_bits / bf16_float: gpt/bf16.h (the CPU reference of the conversions) */

static void t_bf16(void) {
    NEED_GPU();
    /* conversions: random values and the edge cases (ties both ways, signed zero, a denormal,
     * overflow to infinity, infinities, NaN) */
    const size_t n = 4096;
    fbuf x = fb(n, 3), back = fb(n, 0);
    const float special[] = {0.0f, -0.0f, 1.00390625f /* 1 + 2^-8: a tie, to even (1) */,
                             1.01171875f /* 1 + 3 x 2^-8: a tie, to even (up) */, 1e-40f, 3.4e38f,
                             INFINITY, -INFINITY, NAN, -1.5f, 65504.0f, 1.0f / 3.0f};
    memcpy(x.h, special, sizeof special);
    uint16_t *ref = malloc(n * sizeof *ref), *got = malloc(n * sizeof *got);
    uint16_t *bd = gpt_cuda_malloc(n * sizeof *bd);
    CHECK(ref && got && bd);
    if (!ref || !got || !bd) return;
    for (size_t i = 0; i < n; i++) { ref[i] = bf16_bits(x.h[i]); back.c[i] = bf16_float(ref[i]); }
    CHECK(ref[2] == 0x3f80 && ref[3] == 0x3f82 && ref[5] == 0x7f80 && ref[1] == 0x8000);
    for (int rep = 0; rep < 2; rep++) {
        push(&x);
        kc_to_bf16(bd, x.d, n);
        kc_from_bf16(back.d, bd, n);
        synced("bf16 conversions");
        CHECK(gpt_cuda_download(got, bd, n * sizeof *got) == 0);
        pull(&back, rep);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += got[i] != ref[i];
        CHECK_MSG(bad == 0, "to_bf16: %zu of %zu values differ from the CPU's rounding", bad, n);
    }
    /* back.c holds a NaN at 8: compare bits, not values */
    CHECK_MSG(memcmp(back.r[0], back.c, n * sizeof(float)) == 0 && memcmp(back.r[1], back.c, n * sizeof(float)) == 0,
              "from_bf16: not bit-identical to the CPU");
    fprintf(stderr, "     %-26s bit-identical (%zu values, %zu edge cases)\n", "bf16 conversions", n,
            sizeof special / sizeof special[0]);
    /* matrix products with bf16 inputs */
    const int M = 70, K = 48, N = 33;
    fbuf out = fb((size_t)M * N, 0), inp = fb((size_t)M * K, 1), w = fb((size_t)N * K, 0.5f), dout = fb((size_t)M * N, 1);
    fbuf dinp = fb((size_t)M * K, 0.3f), dw = fb((size_t)N * K, 0.3f);
    fbuf out32 = fb((size_t)M * N, 0), dinp32 = fb((size_t)M * K, 0.3f), dw32 = fb((size_t)N * K, 0.3f);
    memcpy(dinp32.h, dinp.h, dinp.n * sizeof(float)); memcpy(dinp32.c, dinp.h, dinp.n * sizeof(float));
    memcpy(dw32.h, dw.h, dw.n * sizeof(float)); memcpy(dw32.c, dw.h, dw.n * sizeof(float));
    float *ri = malloc(inp.n * sizeof(float)), *rw = malloc(w.n * sizeof(float)), *rd = malloc(dout.n * sizeof(float));
    uint16_t *bi = gpt_cuda_malloc(inp.n * 2), *bw = gpt_cuda_malloc(w.n * 2), *bdo = gpt_cuda_malloc(dout.n * 2);
    CHECK(ri && rw && rd && bi && bw && bdo);
    if (!ri || !rw || !rd || !bi || !bw || !bdo) return;
    for (size_t i = 0; i < inp.n; i++) ri[i] = bf16_float(bf16_bits(inp.h[i]));
    for (size_t i = 0; i < w.n; i++) rw[i] = bf16_float(bf16_bits(w.h[i]));
    for (size_t i = 0; i < dout.n; i++) rd[i] = bf16_float(bf16_bits(dout.h[i]));
    k_matmul_fwd(out.c, ri, rw, M, K, N);                    /* the same rounded inputs in fp32 */
    k_matmul_bwd(dinp.c, dw.c, rd, ri, rw, M, K, N);
    k_matmul_fwd(out32.c, inp.h, w.h, M, K, N);              /* the unrounded fp32 product */
    k_matmul_bwd(dinp32.c, dw32.c, dout.h, inp.h, w.h, M, K, N);
    for (int rep = 0; rep < 2; rep++) {
        push(&inp); push(&w); push(&dout); push(&dinp); push(&dw);
        kc_to_bf16(bi, inp.d, inp.n); kc_to_bf16(bw, w.d, w.n); kc_to_bf16(bdo, dout.d, dout.n);
        kc_matmul_fwd_bf16(out.d, bi, bw, M, K, N);
        kc_matmul_bwd_bf16(dinp.d, dw.d, bdo, bi, bw, M, K, N);
        synced("bf16 matmul");
        pull(&out, rep); pull(&dinp, rep); pull(&dw, rep);
        memcpy(out32.r[rep], out.r[rep], out.n * sizeof(float));
        memcpy(dinp32.r[rep], dinp.r[rep], dinp.n * sizeof(float));
        memcpy(dw32.r[rep], dw.r[rep], dw.n * sizeof(float));
    }
    check_out("bf16 matmul out", &out, TOL_FWD, 0);
    check_out("bf16 matmul dinp", &dinp, TOL_BWD, 1);
    check_out("bf16 matmul dw", &dw, TOL_BWD, 1);
    check_out("bf16 matmul out vs fp32", &out32, TOL_BF16, 0);
    check_out("bf16 matmul dinp vs fp32", &dinp32, TOL_BF16, 1);
    check_out("bf16 matmul dw vs fp32", &dw32, TOL_BF16, 1);
    free(ri); free(rw); free(rd); free(ref); free(got);
    gpt_cuda_free(bi); gpt_cuda_free(bw); gpt_cuda_free(bdo); gpt_cuda_free(bd);
    fb_free(&x); fb_free(&back); fb_free(&out); fb_free(&inp); fb_free(&w); fb_free(&dout); fb_free(&dinp);
    fb_free(&dw); fb_free(&out32); fb_free(&dinp32); fb_free(&dw32);
}
#ifndef SS_GPT_NO_OPS
/* The cuda table's bf16 entries (gpt/ops-cuda.c), which the model calls under --dtype bf16
 * (gpt/model.c "bf16 activations"): to_bf16 / from_bf16 bit-identical to the CPU table's, and the
 * products on bf16 operands (matmul_fwd_bf16 / matmul_bwd_bf16) against what the CPU table runs
 * for the same call (gpt_ops_cpu has no bf16 products: the model widens the operands and calls
 * the fp32 product) within TOL_FWD / TOL_BWD; backward with only dinp or only dw gives the same
 * bits as with both; each GPU run twice. Not in the lockstep emulator (it links the kernels, not
 * the table: SS_GPT_NO_OPS). */
static void t_ops_bf16(void) {
    NEED_GPU();
    char err[256];
    const gpt_ops *o = gpt_ops_cuda(err, sizeof err), *c = &gpt_ops_cpu;
    CHECK_MSG(o != NULL, "gpt_ops_cuda: %s", err);
    if (!o) return;
    CHECK(o->to_bf16 && o->from_bf16 && o->matmul_fwd_bf16 && o->matmul_bwd_bf16);
    CHECK(c->to_bf16 && c->from_bf16 && !c->matmul_fwd_bf16 && !c->matmul_bwd_bf16);
    if (!o->matmul_fwd_bf16 || !o->matmul_bwd_bf16) return;
    const int M = 70, K = 48, N = 33;
    fbuf out = fb((size_t)M * N, 0), inp = fb((size_t)M * K, 1), w = fb((size_t)N * K, 0.5f), dout = fb((size_t)M * N, 1);
    fbuf dinp = fb((size_t)M * K, 0.3f), dw = fb((size_t)N * K, 0.3f);
    fbuf dinp1 = fb((size_t)M * K, 0), dw1 = fb((size_t)N * K, 0);   /* backward with one output only */
    memcpy(dinp1.h, dinp.h, dinp.n * sizeof(float));
    memcpy(dw1.h, dw.h, dw.n * sizeof(float));
    /* the CPU table's path: round, widen, fp32 product */
    uint16_t *hi = malloc(inp.n * 2), *hw = malloc(w.n * 2), *hd = malloc(dout.n * 2), *got = malloc(inp.n * 2);
    float *ri = malloc(inp.n * sizeof(float)), *rw = malloc(w.n * sizeof(float)), *rd = malloc(dout.n * sizeof(float));
    uint16_t *bi = gpt_cuda_malloc(inp.n * 2), *bw = gpt_cuda_malloc(w.n * 2), *bd = gpt_cuda_malloc(dout.n * 2);
    CHECK(hi && hw && hd && got && ri && rw && rd && bi && bw && bd);
    if (!hi || !hw || !hd || !got || !ri || !rw || !rd || !bi || !bw || !bd) return;
    c->to_bf16(hi, inp.h, inp.n); c->to_bf16(hw, w.h, w.n); c->to_bf16(hd, dout.h, dout.n);
    c->from_bf16(ri, hi, inp.n); c->from_bf16(rw, hw, w.n); c->from_bf16(rd, hd, dout.n);
    c->matmul_fwd(out.c, ri, rw, M, K, N);
    c->matmul_bwd(dinp.c, dw.c, rd, ri, rw, M, K, N);
    memcpy(dinp1.c, dinp.c, dinp.n * sizeof(float));
    memcpy(dw1.c, dw.c, dw.n * sizeof(float));
    for (int rep = 0; rep < 2; rep++) {
        push(&inp); push(&w); push(&dout); push(&dinp); push(&dw); push(&dinp1); push(&dw1);
        o->to_bf16(bi, inp.d, inp.n); o->to_bf16(bw, w.d, w.n); o->to_bf16(bd, dout.d, dout.n);
        o->matmul_fwd_bf16(out.d, bi, bw, M, K, N);
        o->matmul_bwd_bf16(dinp.d, dw.d, bd, bi, bw, M, K, N);
        o->matmul_bwd_bf16(dinp1.d, NULL, bd, NULL, bw, M, K, N);
        o->matmul_bwd_bf16(NULL, dw1.d, bd, bi, NULL, M, K, N);
        CHECK_MSG(o->sync(err, sizeof err) == 0, "cuda table, bf16 entries: %s", err);
        CHECK(gpt_cuda_download(got, bi, inp.n * 2) == 0);
        CHECK_MSG(memcmp(got, hi, inp.n * 2) == 0, "cuda table to_bf16: not the CPU table's bits");
        pull(&out, rep); pull(&dinp, rep); pull(&dw, rep); pull(&dinp1, rep); pull(&dw1, rep);
    }
    check_out("ops bf16 matmul out", &out, TOL_FWD, 0);
    check_out("ops bf16 matmul dinp", &dinp, TOL_BWD, 1);
    check_out("ops bf16 matmul dw", &dw, TOL_BWD, 1);
    CHECK_MSG(memcmp(dinp1.r[0], dinp.r[0], dinp.n * sizeof(float)) == 0, "bf16 product: dinp alone differs from dinp with dw");
    CHECK_MSG(memcmp(dw1.r[0], dw.r[0], dw.n * sizeof(float)) == 0, "bf16 product: dw alone differs from dw with dinp");
    free(hi); free(hw); free(hd); free(got); free(ri); free(rw); free(rd);
    gpt_cuda_free(bi); gpt_cuda_free(bw); gpt_cuda_free(bd);
    fb_free(&out); fb_free(&inp); fb_free(&w); fb_free(&dout); fb_free(&dinp); fb_free(&dw); fb_free(&dinp1);
    fb_free(&dw1);
}
#else
static void t_ops_bf16(void) { TEST_SKIP("the lockstep emulator links the kernels, not gpt/ops-cuda.c's table"); }
#endif

int main(void) {
    gpt_kernels_init();
    char err[256];
    if (gpt_cuda_init(err, sizeof err) == 0) {
        gpu_ok = 1;
        fprintf(stderr, "%s\n", gpt_cuda_describe());
    } else {
        snprintf(gpu_why, sizeof gpu_why, "%s", err);
    }
#else  /* no CUDA kernels in this build */
#define NEED_GPU() TEST_SKIP("built without the CUDA toolkit (USE_CUDA off, or no nvcc): no CUDA kernels")
static void t_matmul(void) { NEED_GPU(); }
static void t_rmsnorm(void) { NEED_GPU(); }
static void t_rope(void) { NEED_GPU(); }
static void t_attention(void) { NEED_GPU(); }
static void t_elementwise(void) { NEED_GPU(); }
static void t_embedding(void) { NEED_GPU(); }
static void t_cross_entropy(void) { NEED_GPU(); }
static void t_moe(void) { NEED_GPU(); }
static void t_adamw(void) { NEED_GPU(); }
static void t_ops_bf16(void) { NEED_GPU(); }
static void t_errors(void) { NEED_GPU(); }
static void t_bf16(void) { NEED_GPU(); }
int main(void) {
#endif
    /* TEST_GPT_CUDA_ONLY=t_name runs that test alone (scripts/cuda-emu-check.sh's shim run) */
    const char *only = getenv("TEST_GPT_CUDA_ONLY");
#define RUN_SEL(fn) do { if (!only || !strcmp(only, #fn)) RUN(fn); } while (0)
    RUN_SEL(t_matmul);
    RUN_SEL(t_rmsnorm);
    RUN_SEL(t_rope);
    RUN_SEL(t_attention);
    RUN_SEL(t_elementwise);
    RUN_SEL(t_embedding);
    RUN_SEL(t_cross_entropy);
    RUN_SEL(t_moe);
    RUN_SEL(t_adamw);
    RUN_SEL(t_bf16);
    RUN_SEL(t_ops_bf16);
    RUN_SEL(t_errors);
#ifdef SS_GPT_CUDA
    if (gpu_ok) gpt_cuda_shutdown();
#endif
    return test_summary();
}
