/* test-gpt-ops.c: every operator of the reference trainer (gpt/kernels-cpu.c) against a
 * double-precision re-implementation: the float forward against the double forward, and the
 * float backward against central finite differences of the double forward.
 *
 * For an operator f with inputs x and a fixed random r, the scalar L(x) = sum r . f(x) is
 * evaluated in double; dL/dx_i ~ (L(x + h e_i) - L(x - h e_i)) / 2h with h = 1e-6 (max(1,|x_i|)),
 * whose error (~1e-10 relative) is far below float's. The float backward kernel gets dout = r.
 * Tolerances, normwise: forward max|f32 - f64| <= 1e-6 max|f64|; gradients
 * max|g32 - g_fd| <= 1e-5 max|g_fd|. A negative control checks that the same comparison
 * rejects the float gradient scaled by 1.01 (so a 1 % error cannot pass). The "+=" contract is
 * checked by running each backward on non-zero initial gradients.
 */
#include "kernels.h"
#include "test.h"

#include <math.h>

#define FWD_TOL 1e-6
#define GRAD_TOL 1e-5

static uint64_t rng_state = 12345;
static double urand(void) {   /* exact float in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)((int32_t)(rng_state >> 40) - (1 << 23)) / (1 << 23);
}
static float *frand(size_t n, double scale) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = (float)(urand() * scale);
    return p;
}
static double *to_d(const float *f, size_t n) {
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = f[i];
    return d;
}
static float *fzeros(size_t n) { return calloc(n, sizeof(float)); }

/* normwise relative difference max|a-b| / max|b| */
static double normdiff_fd(const float *a, const double *b, size_t n, double scale_a) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] * scale_a - b[i]);
        if (d > md) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return md / (mb > 1e-30 ? mb : 1e-30);
}

static void check_fwd(const char *what, const float *a, const double *ref, size_t n) {
    double e = normdiff_fd(a, ref, n, 1.0);
    CHECK_MSG(e <= FWD_TOL, "%s forward: relative error %.3g > %.g", what, e, FWD_TOL);
    fprintf(stderr, "     %-22s forward  rel err %.2e\n", what, e);
}

/* a: float gradient computed on top of initial value init (subtracted here) */
static void check_grad(const char *what, const float *a, const float *init, const double *num, size_t n) {
    float *g = malloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++) g[i] = a[i] - (init ? init[i] : 0.0f);
    double e = normdiff_fd(g, num, n, 1.0);
    double bad = normdiff_fd(g, num, n, 1.01);
    CHECK_MSG(e <= GRAD_TOL, "%s gradient: relative error %.3g > %.g", what, e, GRAD_TOL);
    CHECK_MSG(bad > GRAD_TOL, "%s: negative control passed (error %.3g): the check cannot fail", what, bad);
    double mx = 0;
    for (size_t i = 0; i < n; i++) if (fabs(num[i]) > mx) mx = fabs(num[i]);
    CHECK_MSG(mx > 0, "%s: the gradient is identically zero: the test would be vacuous", what);
    fprintf(stderr, "     %-22s gradient rel err %.2e (control %.2e)\n", what, e, bad);
    free(g);
}

/* L = sum r . f(inputs) in double; in[] are the double inputs, which may be perturbed */
typedef double (*loss_fn)(void *ctx, double **in);

static double *numgrad(loss_fn f, void *ctx, double **in, int which, size_t n) {
    double *g = malloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++) {
        double s = in[which][i], h = 1e-6 * (fabs(s) > 1 ? fabs(s) : 1);
        in[which][i] = s + h;
        double lp = f(ctx, in);
        in[which][i] = s - h;
        double lm = f(ctx, in);
        in[which][i] = s;
        g[i] = (lp - lm) / (2 * h);
    }
    return g;
}

/* ------------------------------------------------------------------------------------------ */
/* double references                                                                            */

typedef struct ctx {
    int B, T, A, KV, hd, M, K, N, C, V, H;
    size_t n;
    const double *r;          /* output weights */
    const double *cos_t, *sin_t;
    const int *tok;
    double *out;              /* forward output buffer */
} ctx;

static double dot_r(const ctx *c, const double *o, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += c->r[i] * o[i];
    return s;
}

static void ref_matmul(const ctx *c, const double *x, const double *w, double *o) {
    for (int i = 0; i < c->M; i++)
        for (int n = 0; n < c->N; n++) {
            double s = 0;
            for (int k = 0; k < c->K; k++) s += x[i * c->K + k] * w[n * c->K + k];
            o[i * c->N + n] = s;
        }
}
static double l_matmul(void *p, double **in) {
    ctx *c = p;
    ref_matmul(c, in[0], in[1], c->out);
    return dot_r(c, c->out, (size_t)c->M * c->N);
}

static void ref_rmsnorm(const ctx *c, const double *x, const double *w, double *o) {
    for (int i = 0; i < c->M; i++) {
        double ss = 0;
        for (int k = 0; k < c->C; k++) ss += x[i * c->C + k] * x[i * c->C + k];
        double r = 1.0 / sqrt(ss / c->C + 1e-5);
        for (int k = 0; k < c->C; k++) o[i * c->C + k] = x[i * c->C + k] * r * w[k];
    }
}
static double l_rmsnorm(void *p, double **in) {
    ctx *c = p;
    ref_rmsnorm(c, in[0], in[1], c->out);
    return dot_r(c, c->out, (size_t)c->M * c->C);
}

static void ref_rope(const ctx *c, const double *x, double *o) {
    int h2 = c->hd / 2;
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++)
            for (int h = 0; h < c->H; h++) {
                size_t off = (((size_t)b * c->T + t) * c->H + h) * c->hd;
                for (int j = 0; j < h2; j++) {
                    double cs = c->cos_t[t * h2 + j], sn = c->sin_t[t * h2 + j];
                    o[off + j] = x[off + j] * cs - x[off + j + h2] * sn;
                    o[off + j + h2] = x[off + j + h2] * cs + x[off + j] * sn;
                }
            }
}
static double l_rope(void *p, double **in) {
    ctx *c = p;
    ref_rope(c, in[0], c->out);
    return dot_r(c, c->out, c->n);
}

static void ref_attn(const ctx *c, const double *q, const double *k, const double *v, double *o) {
    int B = c->B, T = c->T, A = c->A, KV = c->KV, hd = c->hd, G = A / KV;
    double scale = 1.0 / sqrt((double)hd);
    double *a = malloc((size_t)T * sizeof *a);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < A; h++)
            for (int t = 0; t < T; t++) {
                const double *qr = q + (((size_t)b * T + t) * A + h) * hd;
                double mx = -INFINITY, sum = 0;
                for (int s = 0; s <= t; s++) {
                    const double *kr = k + (((size_t)b * T + s) * KV + h / G) * hd;
                    double d = 0;
                    for (int j = 0; j < hd; j++) d += qr[j] * kr[j];
                    a[s] = d * scale;
                    if (a[s] > mx) mx = a[s];
                }
                for (int s = 0; s <= t; s++) { a[s] = exp(a[s] - mx); sum += a[s]; }
                double *orow = o + (((size_t)b * T + t) * A + h) * hd;
                for (int j = 0; j < hd; j++) {
                    double acc = 0;
                    for (int s = 0; s <= t; s++) acc += a[s] / sum * v[(((size_t)b * T + s) * KV + h / G) * hd + j];
                    orow[j] = acc;
                }
            }
    free(a);
}
static double l_attn(void *p, double **in) {
    ctx *c = p;
    ref_attn(c, in[0], in[1], in[2], c->out);
    return dot_r(c, c->out, c->n);
}

static double l_swiglu(void *p, double **in) {
    ctx *c = p;
    for (size_t i = 0; i < c->n; i++) c->out[i] = in[0][i] / (1 + exp(-in[0][i])) * in[1][i];
    return dot_r(c, c->out, c->n);
}

static double l_add(void *p, double **in) {
    ctx *c = p;
    for (size_t i = 0; i < c->n; i++) c->out[i] = in[0][i] + in[1][i];
    return dot_r(c, c->out, c->n);
}

static double l_embed(void *p, double **in) {
    ctx *c = p;
    for (int i = 0; i < c->M; i++)
        for (int k = 0; k < c->C; k++) c->out[i * c->C + k] = in[0][c->tok[i] * c->C + k];
    return dot_r(c, c->out, (size_t)c->M * c->C);
}

/* mean cross-entropy; r is unused (dloss = 1) */
static double l_xent(void *p, double **in) {
    ctx *c = p;
    double total = 0;
    for (int i = 0; i < c->M; i++) {
        const double *l = in[0] + (size_t)i * c->V;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < c->V; j++) if (l[j] > mx) mx = l[j];
        for (int j = 0; j < c->V; j++) sum += exp(l[j] - mx);
        total += log(sum) + mx - l[c->tok[i]];
    }
    return total / c->M;
}

/* ------------------------------------------------------------------------------------------ */
/* tests                                                                                        */

static void t_matmul(void) {
    ctx c = {0};
    c.M = 70; c.K = 9; c.N = 67;       /* M, N over one 64-row block: exercises the block edges */
    size_t nx = (size_t)c.M * c.K, nw = (size_t)c.N * c.K, no = (size_t)c.M * c.N;
    float *x = frand(nx, 1), *w = frand(nw, 1), *r = frand(no, 1), *out = fzeros(no);
    float *dx0 = frand(nx, 1), *dw0 = frand(nw, 1);
    float *dx = malloc(nx * 4), *dw = malloc(nw * 4);
    memcpy(dx, dx0, nx * 4); memcpy(dw, dw0, nw * 4);
    double *in[2] = {to_d(x, nx), to_d(w, nw)}, *rd = to_d(r, no);
    c.r = rd; c.out = malloc(no * sizeof(double));
    k_matmul_fwd(out, x, w, c.M, c.K, c.N);
    ref_matmul(&c, in[0], in[1], c.out);
    check_fwd("matmul", out, c.out, no);
    k_matmul_bwd(dx, dw, r, x, w, c.M, c.K, c.N);
    double *gx = numgrad(l_matmul, &c, in, 0, nx), *gw = numgrad(l_matmul, &c, in, 1, nw);
    check_grad("matmul dx", dx, dx0, gx, nx);
    check_grad("matmul dw", dw, dw0, gw, nw);
    free(x); free(w); free(r); free(out); free(dx0); free(dw0); free(dx); free(dw);
    free(in[0]); free(in[1]); free(rd); free(c.out); free(gx); free(gw);
}

static void t_rmsnorm(void) {
    ctx c = {0};
    c.M = 6; c.C = 16;
    size_t n = (size_t)c.M * c.C;
    float *x = frand(n, 2), *w = frand(c.C, 1), *r = frand(n, 1), *out = fzeros(n), *rstd = fzeros(c.M);
    float *dx0 = frand(n, 1), *dw0 = frand(c.C, 1), *dx = malloc(n * 4), *dw = malloc(c.C * 4);
    memcpy(dx, dx0, n * 4); memcpy(dw, dw0, c.C * 4);
    double *in[2] = {to_d(x, n), to_d(w, c.C)}, *rd = to_d(r, n);
    c.r = rd; c.out = malloc(n * sizeof(double));
    k_rmsnorm_fwd(out, rstd, x, w, c.M, c.C, 1e-5f);
    ref_rmsnorm(&c, in[0], in[1], c.out);
    check_fwd("rmsnorm", out, c.out, n);
    k_rmsnorm_bwd(dx, dw, r, x, rstd, w, c.M, c.C);
    double *gx = numgrad(l_rmsnorm, &c, in, 0, n), *gw = numgrad(l_rmsnorm, &c, in, 1, c.C);
    check_grad("rmsnorm dx", dx, dx0, gx, n);
    check_grad("rmsnorm dw", dw, dw0, gw, c.C);
    free(x); free(w); free(r); free(out); free(rstd); free(dx0); free(dw0); free(dx); free(dw);
    free(in[0]); free(in[1]); free(rd); free(c.out); free(gx); free(gw);
}

static void t_rope(void) {
    ctx c = {0};
    c.B = 2; c.T = 5; c.H = 3; c.hd = 8;
    int h2 = c.hd / 2;
    c.n = (size_t)c.B * c.T * c.H * c.hd;
    float *cs = malloc((size_t)c.T * h2 * 4), *sn = malloc((size_t)c.T * h2 * 4);
    for (int t = 0; t < c.T; t++)
        for (int j = 0; j < h2; j++) {
            double ang = t * pow(10000.0, -2.0 * j / c.hd);
            cs[t * h2 + j] = (float)cos(ang);
            sn[t * h2 + j] = (float)sin(ang);
        }
    float *x = frand(c.n, 1), *r = frand(c.n, 1), *out = fzeros(c.n), *dx0 = frand(c.n, 1), *dx = malloc(c.n * 4);
    memcpy(dx, dx0, c.n * 4);
    double *in[1] = {to_d(x, c.n)}, *rd = to_d(r, c.n), *csd = to_d(cs, (size_t)c.T * h2), *snd = to_d(sn, (size_t)c.T * h2);
    c.r = rd; c.cos_t = csd; c.sin_t = snd; c.out = malloc(c.n * sizeof(double));
    k_rope_fwd(out, x, cs, sn, c.B, c.T, c.H, c.hd);
    ref_rope(&c, in[0], c.out);
    check_fwd("rope", out, c.out, c.n);
    k_rope_bwd(dx, r, cs, sn, c.B, c.T, c.H, c.hd);
    double *gx = numgrad(l_rope, &c, in, 0, c.n);
    check_grad("rope dx", dx, dx0, gx, c.n);
    free(cs); free(sn); free(x); free(r); free(out); free(dx0); free(dx);
    free(in[0]); free(rd); free(csd); free(snd); free(c.out); free(gx);
}

static void t_attention(void) {
    ctx c = {0};
    c.B = 2; c.T = 7; c.A = 4; c.KV = 2; c.hd = 4;
    size_t nq = (size_t)c.B * c.T * c.A * c.hd, nk = (size_t)c.B * c.T * c.KV * c.hd;
    size_t na = (size_t)c.B * c.A * c.T * c.T;
    c.n = nq;
    float *q = frand(nq, 1.5), *k = frand(nk, 1.5), *v = frand(nk, 1), *r = frand(nq, 1);
    float *out = fzeros(nq), *att = fzeros(na);
    float *dq0 = frand(nq, 1), *dk0 = frand(nk, 1), *dv0 = frand(nk, 1);
    float *dq = malloc(nq * 4), *dk = malloc(nk * 4), *dv = malloc(nk * 4);
    memcpy(dq, dq0, nq * 4); memcpy(dk, dk0, nk * 4); memcpy(dv, dv0, nk * 4);
    double *in[3] = {to_d(q, nq), to_d(k, nk), to_d(v, nk)}, *rd = to_d(r, nq);
    c.r = rd; c.out = malloc(nq * sizeof(double));
    k_attn_fwd(out, att, q, k, v, c.B, c.T, c.A, c.KV, c.hd);
    ref_attn(&c, in[0], in[1], in[2], c.out);
    check_fwd("attention", out, c.out, nq);
    /* causal: probabilities above the diagonal are exactly zero, rows sum to 1 */
    int causal_ok = 1;
    for (int bh = 0; bh < c.B * c.A; bh++)
        for (int t = 0; t < c.T; t++) {
            double s = 0;
            for (int u = 0; u < c.T; u++) {
                float p = att[((size_t)bh * c.T + t) * c.T + u];
                if (u > t && p != 0.0f) causal_ok = 0;
                s += p;
            }
            if (fabs(s - 1) > 1e-5) causal_ok = 0;
        }
    CHECK(causal_ok);
    k_attn_bwd(dq, dk, dv, r, q, k, v, att, c.B, c.T, c.A, c.KV, c.hd);
    double *gq = numgrad(l_attn, &c, in, 0, nq), *gk = numgrad(l_attn, &c, in, 1, nk), *gv = numgrad(l_attn, &c, in, 2, nk);
    check_grad("attention dq", dq, dq0, gq, nq);
    check_grad("attention dk (GQA)", dk, dk0, gk, nk);
    check_grad("attention dv (GQA)", dv, dv0, gv, nk);
    free(q); free(k); free(v); free(r); free(out); free(att); free(dq0); free(dk0); free(dv0);
    free(dq); free(dk); free(dv); free(in[0]); free(in[1]); free(in[2]); free(rd); free(c.out);
    free(gq); free(gk); free(gv);
}

/* Flash attention against the double reference (forward, finite-difference gradients) and
 * against the naive kernel (same values within FWD_TOL). T > 2 GPT_ATTN_BLOCK, so rows walk
 * three key blocks and the online softmax rescales; the scores are scaled up so that later
 * blocks raise the running maximum. */
static void t_flash_attention(void) {
    ctx c = {0};
    c.B = 1; c.T = 2 * GPT_ATTN_BLOCK + 9; c.A = 4; c.KV = 2; c.hd = 4;
    size_t nq = (size_t)c.B * c.T * c.A * c.hd, nk = (size_t)c.B * c.T * c.KV * c.hd;
    size_t nl = (size_t)c.B * c.A * c.T, na = (size_t)c.B * c.A * c.T * c.T;
    c.n = nq;
    float *q = frand(nq, 2.5), *k = frand(nk, 2.5), *v = frand(nk, 1), *r = frand(nq, 1);
    float *out = fzeros(nq), *lse = fzeros(nl), *out2 = fzeros(nq), *att = fzeros(na);
    float *dq0 = frand(nq, 1), *dk0 = frand(nk, 1), *dv0 = frand(nk, 1);
    float *dq = malloc(nq * 4), *dk = malloc(nk * 4), *dv = malloc(nk * 4);
    memcpy(dq, dq0, nq * 4); memcpy(dk, dk0, nk * 4); memcpy(dv, dv0, nk * 4);
    double *in[3] = {to_d(q, nq), to_d(k, nk), to_d(v, nk)}, *rd = to_d(r, nq);
    c.r = rd; c.out = malloc(nq * sizeof(double));
    k_flash_attn_fwd(out, lse, q, k, v, c.B, c.T, c.A, c.KV, c.hd);
    ref_attn(&c, in[0], in[1], in[2], c.out);
    check_fwd("flash attention", out, c.out, nq);
    k_attn_fwd(out2, att, q, k, v, c.B, c.T, c.A, c.KV, c.hd);
    double *naive = to_d(out2, nq);
    check_fwd("flash vs naive", out, naive, nq);
    /* lse against the double log-sum-exp of the scaled scores */
    double lerr = 0, lmax = 0;
    int G = c.A / c.KV, rescaled = 0;
    for (int h = 0; h < c.A; h++)
        for (int t = 0; t < c.T; t++) {
            const double *qr = in[0] + ((size_t)t * c.A + h) * c.hd;
            double mx = -INFINITY, sum = 0, first = -INFINITY, sc[3 * GPT_ATTN_BLOCK];
            for (int u = 0; u <= t; u++) {
                const double *kr = in[1] + ((size_t)u * c.KV + h / G) * c.hd;
                double d = 0;
                for (int j = 0; j < c.hd; j++) d += qr[j] * kr[j];
                sc[u] = d / sqrt((double)c.hd);
                if (sc[u] > mx) mx = sc[u];
                if (u < GPT_ATTN_BLOCK && sc[u] > first) first = sc[u];
            }
            if (mx > first) rescaled++;
            for (int u = 0; u <= t; u++) sum += exp(sc[u] - mx);
            double want = mx + log(sum), e = fabs(lse[(size_t)h * c.T + t] - want);
            if (e > lerr) lerr = e;
            if (fabs(want) > lmax) lmax = fabs(want);
        }
    CHECK_MSG(lerr <= FWD_TOL * lmax, "flash lse: error %.3g of %.3g", lerr, lmax);
    CHECK_MSG(rescaled > 0, "no row's maximum came from a later key block: the rescaling is untested");
    fprintf(stderr, "     %-22s lse err %.2e, %d rows rescaled\n", "flash attention", lerr / lmax, rescaled);
    k_flash_attn_bwd(dq, dk, dv, r, q, k, v, lse, c.B, c.T, c.A, c.KV, c.hd);
    double *gq = numgrad(l_attn, &c, in, 0, nq), *gk = numgrad(l_attn, &c, in, 1, nk), *gv = numgrad(l_attn, &c, in, 2, nk);
    check_grad("flash dq", dq, dq0, gq, nq);
    check_grad("flash dk (GQA)", dk, dk0, gk, nk);
    check_grad("flash dv (GQA)", dv, dv0, gv, nk);
    {   /* in place (the model's): dq given as dout itself is q's gradient, equal to the one
         * accumulated from zero into a buffer of its own, and dk, dv are the same */
        float *z = fzeros(nq), *dk1 = fzeros(nk), *dv1 = fzeros(nk), *dk2 = fzeros(nk), *dv2 = fzeros(nk);
        float *x = malloc(nq * 4);
        memcpy(x, r, nq * 4);
        k_flash_attn_bwd(z, dk1, dv1, r, q, k, v, lse, c.B, c.T, c.A, c.KV, c.hd);
        k_flash_attn_bwd(x, dk2, dv2, x, q, k, v, lse, c.B, c.T, c.A, c.KV, c.hd);
        int same = 1, moved = 0;
        for (size_t i = 0; i < nq; i++) { same &= x[i] == z[i]; moved |= x[i] != r[i]; }
        for (size_t i = 0; i < nk; i++) same &= dk1[i] == dk2[i] && dv1[i] == dv2[i];
        CHECK_MSG(same && moved, "flash backward in place: dq %s the separate one", same ? "is dout, not" : "differs from");
        free(z); free(dk1); free(dv1); free(dk2); free(dv2); free(x);
    }
    free(q); free(k); free(v); free(r); free(out); free(lse); free(out2); free(att); free(naive);
    free(dq0); free(dk0); free(dv0); free(dq); free(dk); free(dv);
    free(in[0]); free(in[1]); free(in[2]); free(rd); free(c.out); free(gq); free(gk); free(gv);
}

static void t_swiglu(void) {
    ctx c = {0};
    c.n = 97;
    float *g = frand(c.n, 4), *u = frand(c.n, 2), *r = frand(c.n, 1), *out = fzeros(c.n);
    float *dg0 = frand(c.n, 1), *du0 = frand(c.n, 1), *dg = malloc(c.n * 4), *du = malloc(c.n * 4);
    memcpy(dg, dg0, c.n * 4); memcpy(du, du0, c.n * 4);
    double *in[2] = {to_d(g, c.n), to_d(u, c.n)}, *rd = to_d(r, c.n);
    c.r = rd; c.out = malloc(c.n * sizeof(double));
    k_swiglu_fwd(out, g, u, c.n);
    l_swiglu(&c, in);
    check_fwd("swiglu", out, c.out, c.n);
    k_swiglu_bwd(dg, du, r, g, u, c.n);
    double *gg = numgrad(l_swiglu, &c, in, 0, c.n), *gu = numgrad(l_swiglu, &c, in, 1, c.n);
    check_grad("swiglu dgate", dg, dg0, gg, c.n);
    check_grad("swiglu dup", du, du0, gu, c.n);
    {   /* in place: dg given as dout itself equals dg accumulated from zero; du the same */
        float *z = fzeros(c.n), *du1 = fzeros(c.n), *du2 = fzeros(c.n), *x = malloc(c.n * 4);
        memcpy(x, r, c.n * 4);
        k_swiglu_bwd(z, du1, r, g, u, c.n);
        k_swiglu_bwd(x, du2, x, g, u, c.n);
        int same = 1, moved = 0;
        for (size_t i = 0; i < c.n; i++) { same &= x[i] == z[i] && du1[i] == du2[i]; moved |= x[i] != r[i]; }
        CHECK_MSG(same && moved, "swiglu backward in place: dgate %s the separate one", same ? "is dout, not" : "differs from");
        free(z); free(du1); free(du2); free(x);
    }
    free(g); free(u); free(r); free(out); free(dg0); free(du0); free(dg); free(du);
    free(in[0]); free(in[1]); free(rd); free(c.out); free(gg); free(gu);
}

static void t_add(void) {
    ctx c = {0};
    c.n = 33;
    float *a = frand(c.n, 1), *b = frand(c.n, 1), *r = frand(c.n, 1), *out = fzeros(c.n);
    float *da0 = frand(c.n, 1), *da = malloc(c.n * 4);
    memcpy(da, da0, c.n * 4);
    double *in[2] = {to_d(a, c.n), to_d(b, c.n)}, *rd = to_d(r, c.n);
    c.r = rd; c.out = malloc(c.n * sizeof(double));
    k_add_fwd(out, a, b, c.n);
    l_add(&c, in);
    check_fwd("add", out, c.out, c.n);
    k_accumulate(da, r, c.n);                 /* add's backward: each input += dout */
    double *ga = numgrad(l_add, &c, in, 0, c.n);
    check_grad("add da", da, da0, ga, c.n);
    free(a); free(b); free(r); free(out); free(da0); free(da); free(in[0]); free(in[1]); free(rd); free(c.out); free(ga);
}

static void t_embed(void) {
    ctx c = {0};
    c.M = 12; c.C = 70; c.V = 5;              /* repeated tokens: the scatter must add them up */
    int tok[12] = {0, 3, 3, 1, 4, 0, 3, 2, 2, 4, 1, 3};
    c.tok = tok;
    size_t nw = (size_t)c.V * c.C, no = (size_t)c.M * c.C;
    float *w = frand(nw, 1), *r = frand(no, 1), *out = fzeros(no), *dw0 = frand(nw, 1), *dw = malloc(nw * 4);
    memcpy(dw, dw0, nw * 4);
    double *in[1] = {to_d(w, nw)}, *rd = to_d(r, no);
    c.r = rd; c.out = malloc(no * sizeof(double));
    k_embed_fwd(out, tok, w, c.M, c.C);
    l_embed(&c, in);
    check_fwd("embedding", out, c.out, no);
    k_embed_bwd(dw, r, tok, c.M, c.C);
    double *gw = numgrad(l_embed, &c, in, 0, nw);
    check_grad("embedding dwte", dw, dw0, gw, nw);
    free(w); free(r); free(out); free(dw0); free(dw); free(in[0]); free(rd); free(c.out); free(gw);
}

static void t_xent(void) {
    ctx c = {0};
    c.M = 9; c.V = 13;
    int tgt[9] = {0, 12, 5, 5, 7, 1, 2, 11, 3};
    c.tok = tgt;
    size_t n = (size_t)c.M * c.V;
    float *l = frand(n, 3), *p = fzeros(n), *ls = fzeros(c.M), *dl0 = frand(n, 0.1), *dl = malloc(n * 4);
    memcpy(dl, dl0, n * 4);
    double *in[1] = {to_d(l, n)};
    float loss = k_xent_fwd(p, ls, l, tgt, c.M, c.V);
    double want = l_xent(&c, in);
    CHECK_MSG(fabs(loss - want) <= FWD_TOL * want, "xent loss %.9g vs %.9g", loss, want);
    fprintf(stderr, "     %-22s forward  rel err %.2e\n", "cross_entropy", fabs(loss - want) / want);
    k_xent_bwd(dl, p, tgt, c.M, c.V, 1.0f);
    double *gl = numgrad(l_xent, &c, in, 0, n);
    check_grad("cross_entropy dlogits", dl, dl0, gl, n);
    free(l); free(p); free(ls); free(dl0); free(dl); free(in[0]); free(gl);
}

/* mean cross-entropy of h (M,C) . w (V,C)^T in double */
static double l_lxent(void *p, double **in) {
    ctx *c = p;
    double total = 0, *l = malloc((size_t)c->V * sizeof *l);
    for (int i = 0; i < c->M; i++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < c->V; j++) {
            double d = 0;
            for (int k = 0; k < c->C; k++) d += in[0][(size_t)i * c->C + k] * in[1][(size_t)j * c->C + k];
            l[j] = d;
            if (d > mx) mx = d;
        }
        for (int j = 0; j < c->V; j++) sum += exp(l[j] - mx);
        total += log(sum) + mx - l[c->tok[i]];
    }
    free(l);
    return total / c->M;
}

/* The chunked loss as the trainer composes it (model.c, op_lxent and its backward): chunks of
 * 8 rows over M = 21 (the last one short), logits from k_matmul_fwd, k_xent_lse_fwd, then in
 * backward the same k_matmul_fwd again, k_xent_lse_bwd in place and k_matmul_bwd. Loss, dh and
 * dw against the double reference and finite differences, and the loss against k_xent_fwd on
 * the full logits. */
static void t_chunked_xent(void) {
    ctx c = {0};
    c.M = 21; c.C = 6; c.V = 11;
    int tgt[21], ch = 8;
    for (int i = 0; i < c.M; i++) tgt[i] = (i * 7 + 3) % c.V;
    c.tok = tgt;
    size_t nh = (size_t)c.M * c.C, nw = (size_t)c.V * c.C;
    float *h = frand(nh, 1.5), *w = frand(nw, 1.5), *lse = fzeros(c.M), *ls = fzeros(c.M);
    float *lg = fzeros((size_t)ch * c.V), *dh0 = frand(nh, 0.1), *dw0 = frand(nw, 0.1);
    float *dh = malloc(nh * 4), *dw = malloc(nw * 4);
    memcpy(dh, dh0, nh * 4); memcpy(dw, dw0, nw * 4);
    for (int i0 = 0; i0 < c.M; i0 += ch) {
        int rows = c.M - i0 < ch ? c.M - i0 : ch;
        k_matmul_fwd(lg, h + (size_t)i0 * c.C, w, rows, c.C, c.V);
        k_xent_lse_fwd(lse + i0, ls + i0, lg, tgt + i0, rows, c.V);
    }
    double total = 0;
    for (int i = 0; i < c.M; i++) total += ls[i];
    float loss = (float)(total / c.M);
    double *in[2] = {to_d(h, nh), to_d(w, nw)};
    double want = l_lxent(&c, in);
    CHECK_MSG(fabs(loss - want) <= FWD_TOL * want, "chunked loss %.9g vs %.9g", loss, want);
    float *full = fzeros((size_t)c.M * c.V), *probs = fzeros((size_t)c.M * c.V), *ls2 = fzeros(c.M);
    k_matmul_fwd(full, h, w, c.M, c.C, c.V);
    float loss_full = k_xent_fwd(probs, ls2, full, tgt, c.M, c.V);
    CHECK_MSG(fabs(loss - loss_full) <= FWD_TOL * want, "chunked loss %.9g vs full %.9g", loss, loss_full);
    fprintf(stderr, "     %-22s forward  rel err %.2e (vs full %.2e)\n", "chunked cross_entropy",
            fabs(loss - want) / want, fabs(loss - loss_full) / want);
    for (int i0 = 0; i0 < c.M; i0 += ch) {
        int rows = c.M - i0 < ch ? c.M - i0 : ch;
        k_matmul_fwd(lg, h + (size_t)i0 * c.C, w, rows, c.C, c.V);
        k_xent_lse_bwd(lg, lse + i0, tgt + i0, rows, c.V, 1.0f / (float)c.M);
        k_matmul_bwd(dh + (size_t)i0 * c.C, dw, lg, h + (size_t)i0 * c.C, w, rows, c.C, c.V);
    }
    double *gh = numgrad(l_lxent, &c, in, 0, nh), *gw = numgrad(l_lxent, &c, in, 1, nw);
    check_grad("chunked xent dh", dh, dh0, gh, nh);
    check_grad("chunked xent dw", dw, dw0, gw, nw);
    free(h); free(w); free(lse); free(ls); free(lg); free(dh0); free(dw0); free(dh); free(dw);
    free(full); free(probs); free(ls2); free(in[0]); free(in[1]); free(gh); free(gw);
}

/* ---- mixture of experts ------------------------------------------------------------------- */

typedef struct moe_ctx {
    int M, E, K, C;
    const double *r;
    const int *idx, *slot, *off;   /* a fixed routing (the selection is piecewise constant) */
    double *out;
} moe_ctx;

/* wts = renormalised top-k of softmax(logits), the selection idx held fixed */
static void ref_route(const moe_ctx *c, const double *l, double *w) {
    for (int i = 0; i < c->M; i++) {
        const double *li = l + (size_t)i * c->E;
        double mx = li[0], sum = 0, s = 0;
        for (int j = 1; j < c->E; j++) if (li[j] > mx) mx = li[j];
        for (int j = 0; j < c->E; j++) sum += exp(li[j] - mx);
        for (int k = 0; k < c->K; k++) s += exp(li[c->idx[i * c->K + k]] - mx) / sum;
        for (int k = 0; k < c->K; k++) w[i * c->K + k] = exp(li[c->idx[i * c->K + k]] - mx) / sum / s;
    }
}
static double l_route(void *p, double **in) {
    moe_ctx *c = p;
    ref_route(c, in[0], c->out);
    return dot_r(&(ctx){.r = c->r}, c->out, (size_t)c->M * c->K);
}

/* out (M,C) = sum_k w[t,k] ye[idx][slot]; in[0] = w (M,K), in[1] = every expert's rows, stacked
 * in expert order (row off[e] + slot of expert e) */
static double l_combine(void *p, double **in) {
    moe_ctx *c = p;
    for (int i = 0; i < c->M; i++)
        for (int x = 0; x < c->C; x++) {
            double acc = 0;
            for (int k = 0; k < c->K; k++) {
                int e = c->idx[i * c->K + k];
                acc += in[0][i * c->K + k] * in[1][((size_t)c->off[e] + c->slot[i * c->K + k]) * c->C + x];
            }
            c->out[(size_t)i * c->C + x] = acc;
        }
    return dot_r(&(ctx){.r = c->r}, c->out, (size_t)c->M * c->C);
}

/* the rows of x listed in rows[0..n) (one expert's gather); here n rows given by c->off[1] */
static double l_gather(void *p, double **in) {
    moe_ctx *c = p;
    int n = c->off[1];
    for (int r = 0; r < n; r++)
        for (int x = 0; x < c->C; x++) c->out[(size_t)r * c->C + x] = in[0][(size_t)c->slot[r] * c->C + x];
    return dot_r(&(ctx){.r = c->r}, c->out, (size_t)n * c->C);
}

/* routing of M tokens over E experts from logits: idx, then slot/off as the model builds them */
static void build_routing(int M, int E, int K, const int *idx, int *slot, int *off) {
    int fill[64] = {0};
    memset(off, 0, sizeof(int) * (size_t)(E + 1));
    for (int i = 0; i < M * K; i++) off[idx[i] + 1]++;
    for (int e = 0; e < E; e++) off[e + 1] += off[e];
    for (int i = 0; i < M * K; i++) slot[i] = fill[idx[i]]++;
}

static void t_moe_route(void) {
    moe_ctx c = {0};
    c.M = 11; c.E = 6; c.K = 2;
    size_t nl = (size_t)c.M * c.E, nw = (size_t)c.M * c.K;
    float *l = frand(nl, 3), *p = fzeros(nl), *w = fzeros(nw), *r = frand(nw, 1);
    int *idx = malloc(nw * sizeof *idx);
    float *dl0 = frand(nl, 1), *dl = malloc(nl * 4);
    memcpy(dl, dl0, nl * 4);
    k_moe_route_fwd(p, w, idx, l, c.M, c.E, c.K);
    /* the selection: the K largest, in decreasing order; weights sum to 1 */
    int sel_ok = 1;
    for (int i = 0; i < c.M; i++) {
        double sum = 0;
        for (int k = 0; k < c.K; k++) {
            float pk = p[i * c.E + idx[i * c.K + k]];
            sum += w[i * c.K + k];
            for (int j = 0; j < c.E; j++) {
                int taken = 0;
                for (int q = 0; q <= k; q++) taken |= idx[i * c.K + q] == j;
                if (!taken && p[i * c.E + j] > pk) sel_ok = 0;
            }
        }
        if (fabs(sum - 1) > 1e-6) sel_ok = 0;
    }
    CHECK_MSG(sel_ok, "top-k selection or renormalisation wrong");
    c.idx = idx;
    double *in[1] = {to_d(l, nl)}, *rd = to_d(r, nw);
    c.r = rd; c.out = malloc(nw * sizeof(double));
    ref_route(&c, in[0], c.out);
    check_fwd("moe_route weights", w, c.out, nw);
    k_moe_route_bwd(dl, r, p, idx, c.M, c.E, c.K);
    double *gl = numgrad(l_route, &c, in, 0, nl);
    check_grad("moe_route dlogits", dl, dl0, gl, nl);
    /* ties go to the lower expert index, deterministically */
    float tl[2 * 4] = {1, 3, 3, 3, 0, 0, 0, 0}, tp[8], tw[4];
    int ti[4];
    k_moe_route_fwd(tp, tw, ti, tl, 2, 4, 2);
    CHECK_MSG(ti[0] == 1 && ti[1] == 2 && ti[2] == 0 && ti[3] == 1, "ties: picked %d %d, %d %d", ti[0], ti[1],
              ti[2], ti[3]);
    CHECK(tw[0] == 0.5f && tw[1] == 0.5f && tw[2] == 0.5f && tw[3] == 0.5f);
    free(l); free(p); free(w); free(r); free(idx); free(dl0); free(dl); free(in[0]); free(rd); free(c.out); free(gl);
}

static void t_moe_combine(void) {
    moe_ctx c = {0};
    c.M = 3; c.E = 8; c.K = 2; c.C = 6;      /* at most 6 of 8 experts used: some get no token */
    size_t nw = (size_t)c.M * c.K;
    float *l = frand((size_t)c.M * c.E, 3), *p = fzeros((size_t)c.M * c.E), *w = fzeros(nw);
    int *idx = malloc(nw * sizeof *idx), *slot = malloc(nw * sizeof *slot), off[9];
    k_moe_route_fwd(p, w, idx, l, c.M, c.E, c.K);
    build_routing(c.M, c.E, c.K, idx, slot, off);
    size_t ny = (size_t)off[c.E] * c.C, no = (size_t)c.M * c.C;
    float *y = frand(ny, 1), *r = frand(no, 1), *out = fzeros(no);
    float *dw0 = frand(nw, 1), *dy0 = frand(ny, 1), *dw = malloc(nw * 4), *dy = malloc(ny * 4);
    memcpy(dw, dw0, nw * 4); memcpy(dy, dy0, ny * 4);
    const float *ye[8];
    float *dye[8];
    int empty = 0;
    for (int e = 0; e < c.E; e++) {
        ye[e] = off[e + 1] > off[e] ? y + (size_t)off[e] * c.C : NULL;
        dye[e] = off[e + 1] > off[e] ? dy + (size_t)off[e] * c.C : NULL;
        empty += off[e + 1] == off[e];
    }
    c.idx = idx; c.slot = slot; c.off = off;
    double *in[2] = {to_d(w, nw), to_d(y, ny)}, *rd = to_d(r, no);
    c.r = rd; c.out = malloc(no * sizeof(double));
    k_moe_combine_fwd(out, w, idx, slot, ye, c.M, c.C, c.K);
    l_combine(&c, in);
    check_fwd("moe_combine", out, c.out, no);
    k_moe_combine_bwd(dye, dw, r, w, idx, slot, ye, c.M, c.C, c.K);
    double *gw = numgrad(l_combine, &c, in, 0, nw), *gy = numgrad(l_combine, &c, in, 1, ny);
    check_grad("moe_combine dweights", dw, dw0, gw, nw);
    check_grad("moe_combine dexperts", dy, dy0, gy, ny);
    CHECK_MSG(empty > 0, "the case must include experts without tokens");
    fprintf(stderr, "     %d of %d experts received no token\n", empty, c.E);
    free(l); free(p); free(w); free(idx); free(slot); free(y); free(r); free(out); free(dw0); free(dy0);
    free(dw); free(dy); free(in[0]); free(in[1]); free(rd); free(c.out); free(gw); free(gy);
}

static void t_moe_gather(void) {
    moe_ctx c = {0};
    c.M = 10; c.C = 7;
    int rows[4] = {1, 4, 5, 9}, off[2] = {0, 4};
    c.slot = rows; c.off = off;
    size_t nx = (size_t)c.M * c.C, ne = 4 * (size_t)c.C;
    float *x = frand(nx, 1), *r = frand(ne, 1), *xe = fzeros(ne), *dx0 = frand(nx, 1), *dx = malloc(nx * 4);
    memcpy(dx, dx0, nx * 4);
    double *in[1] = {to_d(x, nx)}, *rd = to_d(r, ne);
    c.r = rd; c.out = malloc(ne * sizeof(double));
    k_moe_gather_fwd(xe, x, rows, 4, c.C);
    l_gather(&c, in);
    check_fwd("moe_gather", xe, c.out, ne);
    k_moe_gather_bwd(dx, r, rows, 4, c.C);
    double *gx = numgrad(l_gather, &c, in, 0, nx);
    check_grad("moe_gather dx", dx, dx0, gx, nx);
    free(x); free(r); free(xe); free(dx0); free(dx); free(in[0]); free(rd); free(c.out); free(gx);
}

/* AdamW against the torch formula in double, over 3 steps */
static void t_adamw(void) {
    size_t n = 50;
    float *p = frand(n, 1), *m = fzeros(n), *v = fzeros(n);
    double *pd = to_d(p, n), *md = calloc(n, 8), *vd = calloc(n, 8);
    double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    for (int t = 1; t <= 3; t++) {
        float *g = frand(n, 1);
        k_adamw(p, m, v, g, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, t);
        for (size_t i = 0; i < n; i++) {
            pd[i] *= 1 - lr * wd;
            md[i] = b1 * md[i] + (1 - b1) * g[i];
            vd[i] = b2 * vd[i] + (1 - b2) * (double)g[i] * g[i];
            double denom = sqrt(vd[i]) / sqrt(1 - pow(b2, t)) + eps;
            pd[i] -= lr / (1 - pow(b1, t)) * md[i] / denom;
        }
        free(g);
    }
    check_fwd("adamw params", p, pd, n);
    free(p); free(m); free(v); free(pd); free(md); free(vd);
}

int main(void) {
    gpt_kernels_init();
    fprintf(stderr, "kernels: %s\n", gpt_kernels_describe());
    RUN(t_matmul);
    RUN(t_rmsnorm);
    RUN(t_rope);
    RUN(t_attention);
    RUN(t_flash_attention);
    RUN(t_swiglu);
    RUN(t_add);
    RUN(t_embed);
    RUN(t_xent);
    RUN(t_chunked_xent);
    RUN(t_moe_route);
    RUN(t_moe_combine);
    RUN(t_moe_gather);
    RUN(t_adamw);
    return test_summary();
}
