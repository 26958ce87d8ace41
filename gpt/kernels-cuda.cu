/* kernels-cuda.cu: the trainer's operator kernels on the GPU (kernels-cuda.h), C-style CUDA with
 * extern "C" launchers, fp32. Each kernel mirrors its CPU reference in kernels-cpu.c: the same
 * formulas written in the same order, so that with --fmad=false (the Makefile's flag) the only
 * differences are the order of long sums (warp trees instead of sequential loops), the matrix
 * products (cuBLAS) and the last bits of expf/logf.
 *
 * Work split (one owner per output, no floating-point atomics):
 *   elementwise ops, rope, gather, AdamW          one thread per element
 *   rmsnorm, cross-entropy rows, flash/naive rows one warp per row; lanes stride the row, one
 *                                                 butterfly (xor) reduction, identical on all lanes
 *   rmsnorm dw                                    a block per 32 columns; 16 row lanes each sum
 *                                                 rows ty, ty+16, ...; lane 0 adds the 16 in order
 *   embedding backward                            a thread per (column, vocabulary group) walks
 *                                                 every token in order: the CPU's exact sums
 *   flash backward                                D = dout.out per row; then a warp per query row
 *                                                 owns dq (keys ascending) and a warp per key row
 *                                                 owns dk, dv (query heads, then rows ascending)
 *   naive backward                                ds (B,A,T,T) in scratch, then dq and dk/dv as flash
 */
#include "kernels-cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define KC_WORKSPACE (32u << 20)   /* cuBLAS workspace: fixed, so its algorithms are too */
#define KC_THREADS 256             /* threads per block of elementwise kernels */
#define KC_WARPS 8                 /* warps per block of row kernels */
#define KC_HDL (GPT_CUDA_HD_MAX / 32)   /* head values per lane */
#define KC_ATTN_BLOCK 64           /* = GPT_ATTN_BLOCK of kernels.h */
#define KC_MOE_MAX GPT_CUDA_MOE_MAX

static struct {
    int ready;
    cublasHandle_t blas;
    cudaStream_t stream;
    void *workspace;
    float *scratch;
    size_t scratch_n;          /* floats */
    char first_err[256];       /* the first failure since init, "" while none */
    char describe[400];
} kc;

static void kc_note(cudaError_t e, const char *what) {
    if (e == cudaSuccess || kc.first_err[0]) return;
    snprintf(kc.first_err, sizeof kc.first_err, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

static void kc_note_blas(cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS || kc.first_err[0]) return;
    snprintf(kc.first_err, sizeof kc.first_err, "%s: cuBLAS status %d", what, (int)s);
}

#define KC_LAUNCHED(name) kc_note(cudaGetLastError(), name)

static unsigned kc_blocks(size_t n, unsigned per) { return (unsigned)((n + per - 1) / per); }

/* A scratch buffer of at least n floats (grown, never shrunk; the old one freed after a device
 * synchronisation). NULL on failure (recorded). */
static float *kc_scratch(size_t n) {
    if (n <= kc.scratch_n) return kc.scratch;
    if (kc.scratch) {
        kc_note(cudaDeviceSynchronize(), "scratch: cudaDeviceSynchronize");
        cudaFree(kc.scratch);
        kc.scratch = NULL;
        kc.scratch_n = 0;
    }
    cudaError_t e = cudaMalloc((void **)&kc.scratch, n * sizeof(float));
    if (e != cudaSuccess) {
        kc_note(e, "scratch: cudaMalloc");
        kc.scratch = NULL;
        return NULL;
    }
    kc.scratch_n = n;
    return kc.scratch;
}

/* ------------------------------------------------------------------------------------------ */
/* set-up                                                                                       */

extern "C" int gpt_cuda_init(char *err, size_t len) {
    if (kc.ready) return 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(err, len, "no CUDA GPU: %s", e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
        cudaGetLastError();
        return -1;
    }
    if ((e = cudaSetDevice(0)) != cudaSuccess) {
        snprintf(err, len, "cudaSetDevice(0): %s", cudaGetErrorString(e));
        return -1;
    }
    cublasStatus_t s = cublasCreate(&kc.blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, len, "cublasCreate: status %d", (int)s);
        return -1;
    }
    if ((e = cudaMalloc(&kc.workspace, KC_WORKSPACE)) != cudaSuccess) {
        snprintf(err, len, "cudaMalloc of the cuBLAS workspace: %s", cudaGetErrorString(e));
        cublasDestroy(kc.blas);
        return -1;
    }
    /* no TF32, no atomics, one workspace: the same algorithm and bits on every run */
    if (cublasSetMathMode(kc.blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS ||
        cublasSetAtomicsMode(kc.blas, CUBLAS_ATOMICS_NOT_ALLOWED) != CUBLAS_STATUS_SUCCESS ||
        cublasSetPointerMode(kc.blas, CUBLAS_POINTER_MODE_HOST) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(kc.blas, 0) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(kc.blas, kc.workspace, KC_WORKSPACE) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, len, "cuBLAS set-up (math mode, atomics, workspace) failed");
        cudaFree(kc.workspace);
        cublasDestroy(kc.blas);
        return -1;
    }
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) snprintf(p.name, sizeof p.name, "?");
    snprintf(kc.describe, sizeof kc.describe,
             "cuda: %s, cuBLAS sgemm (fixed %u MiB workspace, no TF32, no atomics), fp32", p.name,
             KC_WORKSPACE >> 20);
    kc.stream = 0;
    kc.first_err[0] = '\0';
    kc.ready = 1;
    return 0;
}

extern "C" void gpt_cuda_shutdown(void) {
    if (!kc.ready) return;
    cudaDeviceSynchronize();
    cublasDestroy(kc.blas);
    cudaFree(kc.workspace);
    if (kc.scratch) cudaFree(kc.scratch);
    memset(&kc, 0, sizeof kc);
}

extern "C" const char *gpt_cuda_describe(void) { return kc.ready ? kc.describe : "cuda: not initialised"; }

extern "C" void gpt_cuda_set_stream(void *stream) {
    kc.stream = (cudaStream_t)stream;
    /* cublasSetStream resets the workspace to cuBLAS's pool: set ours again */
    kc_note_blas(cublasSetStream(kc.blas, kc.stream), "cublasSetStream");
    kc_note_blas(cublasSetWorkspace(kc.blas, kc.workspace, KC_WORKSPACE), "cublasSetWorkspace");
}

extern "C" int gpt_cuda_status(char *err, size_t len) {
    kc_note(cudaGetLastError(), "a kernel launch");
    if (!kc.first_err[0]) return 0;
    snprintf(err, len, "%s", kc.first_err);
    return -1;
}

extern "C" int gpt_cuda_sync(char *err, size_t len) {
    kc_note(cudaStreamSynchronize(kc.stream), "cudaStreamSynchronize");
    return gpt_cuda_status(err, len);
}

extern "C" void *gpt_cuda_malloc(size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) { kc_note(e, "cudaMalloc"); return NULL; }
    return p;
}

extern "C" void gpt_cuda_free(void *p) { if (p) cudaFree(p); }

extern "C" int gpt_cuda_upload(void *dst, const void *src, size_t bytes) {
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    kc_note(e, "cudaMemcpy host to device");
    return e == cudaSuccess ? 0 : -1;
}

extern "C" int gpt_cuda_download(void *dst, const void *src, size_t bytes) {
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
    kc_note(e, "cudaMemcpy device to host");
    return e == cudaSuccess ? 0 : -1;
}

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                      */

/* Butterfly sum and max: every lane ends with the same bits (a + b == b + a in IEEE). */
__device__ static float warp_sum(float v) {
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
}

__device__ static float warp_max(float v) {
    for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
    return v;
}

/* dot of a head row held by the lanes (r[i] = row[lane + 32 i]) with a row in memory */
__device__ static float warp_dot_hd(const float *r, const float *row, int lane, int hd) {
    float d = 0.0f;
#pragma unroll
    for (int i = 0; i < KC_HDL; i++) {
        int j = lane + 32 * i;
        if (j < hd) d += r[i] * row[j];
    }
    return warp_sum(d);
}

__device__ static void lane_load_hd(float *r, const float *row, int lane, int hd) {
#pragma unroll
    for (int i = 0; i < KC_HDL; i++) {
        int j = lane + 32 * i;
        r[i] = j < hd ? row[j] : 0.0f;
    }
}

__device__ static void lane_store_hd(float *row, const float *r, int lane, int hd) {
#pragma unroll
    for (int i = 0; i < KC_HDL; i++) {
        int j = lane + 32 * i;
        if (j < hd) row[j] = r[i];
    }
}

/* the global warp index and lane of the calling thread (blocks of KC_WARPS warps) */
#define WARP_ID ((size_t)blockIdx.x * KC_WARPS + threadIdx.x / 32)
#define LANE ((int)(threadIdx.x & 31))

static unsigned kc_warp_blocks(size_t warps) { return kc_blocks(warps, KC_WARPS); }

/* ------------------------------------------------------------------------------------------ */
/* matmul: row-major products as column-major cuBLAS calls (llm.c's mapping)                    */

extern "C" void kc_matmul_fwd(float *out, const float *inp, const float *w, int M, int K, int N) {
    const float one = 1.0f, zero = 0.0f;
    /* out^T (N,M) = w (N,K) . inp^T (K,M) */
    kc_note_blas(cublasSgemm(kc.blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w, K, inp, K, &zero, out, N),
                 "matmul_fwd sgemm");
}

extern "C" void kc_matmul_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                              int M, int K, int N) {
    const float one = 1.0f;
    if (dinp)   /* dinp^T (K,M) += w^T (K,N) . dout^T (N,M) */
        kc_note_blas(cublasSgemm(kc.blas, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, &one, w, K, dout, N, &one, dinp, K),
                     "matmul_bwd dinp sgemm");
    if (dw)     /* dw^T (K,N) += inp^T (K,M) . dout (M,N) */
        kc_note_blas(cublasSgemm(kc.blas, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, &one, inp, K, dout, N, &one, dw, K),
                     "matmul_bwd dw sgemm");
}

/* ------------------------------------------------------------------------------------------ */
/* RMSNorm                                                                                      */

__global__ static void rmsnorm_fwd_k(float *out, float *rstd, const float *x, const float *w, int M, int C,
                                     float eps) {
    size_t i = WARP_ID;
    int lane = LANE;
    if (i >= (size_t)M) return;
    const float *xr = x + i * C;
    float *o = out + i * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) ss += xr[c] * xr[c];
    ss = warp_sum(ss);
    float r = 1.0f / sqrtf(ss / (float)C + eps);
    if (lane == 0) rstd[i] = r;
    for (int c = lane; c < C; c += 32) o[c] = xr[c] * r * w[c];
}

extern "C" void kc_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w, int M, int C, float eps) {
    if (M <= 0) return;
    rmsnorm_fwd_k<<<kc_warp_blocks(M), KC_WARPS * 32, 0, kc.stream>>>(out, rstd, x, w, M, C, eps);
    KC_LAUNCHED("rmsnorm_fwd");
}

__global__ static void rmsnorm_bwd_dx_k(float *dx, const float *dout, const float *x, const float *rstd,
                                        const float *w, int M, int C) {
    size_t i = WARP_ID;
    int lane = LANE;
    if (i >= (size_t)M) return;
    const float *xr = x + i * C, *g = dout + i * C;
    float *d = dx + i * C;
    float r = rstd[i];
    float dot = 0.0f;
    for (int c = lane; c < C; c += 32) dot += g[c] * w[c] * xr[c];
    dot = warp_sum(dot);
    float k = r * r * r * dot / (float)C;
    for (int c = lane; c < C; c += 32) d[c] += r * g[c] * w[c] - k * xr[c];
}

#define KC_DW_ROWS 16   /* row lanes per column in the weight-gradient reductions */

/* block (32, KC_DW_ROWS): column c = blockIdx.x*32 + tx; row lane ty sums rows ty, ty+16, ... */
__global__ static void rmsnorm_bwd_dw_k(float *dw, const float *dout, const float *x, const float *rstd, int M,
                                        int C) {
    __shared__ float part[KC_DW_ROWS][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c = blockIdx.x * 32 + tx;
    float s = 0.0f;
    if (c < C)
        for (int i = ty; i < M; i += KC_DW_ROWS) s += dout[(size_t)i * C + c] * x[(size_t)i * C + c] * rstd[i];
    part[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && c < C) {
        float t = dw[c];
        for (int y = 0; y < KC_DW_ROWS; y++) t += part[y][tx];
        dw[c] = t;
    }
}

extern "C" void kc_rmsnorm_bwd(float *dx, float *dw, const float *dout, const float *x, const float *rstd,
                               const float *w, int M, int C) {
    if (M <= 0) return;
    if (dx) {
        rmsnorm_bwd_dx_k<<<kc_warp_blocks(M), KC_WARPS * 32, 0, kc.stream>>>(dx, dout, x, rstd, w, M, C);
        KC_LAUNCHED("rmsnorm_bwd dx");
    }
    if (dw) {
        rmsnorm_bwd_dw_k<<<kc_blocks(C, 32), dim3(32, KC_DW_ROWS), 0, kc.stream>>>(dw, dout, x, rstd, M, C);
        KC_LAUNCHED("rmsnorm_bwd dw");
    }
}

/* ------------------------------------------------------------------------------------------ */
/* rotary embedding: one thread per pair (b, t, h, j < hd/2)                                   */

__global__ static void rope_k(float *out, const float *x, const float *cos_t, const float *sin_t, int B, int T,
                              int H, int hd, int bwd) {
    int h2 = hd / 2;
    size_t n = (size_t)B * T * H * h2;
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n) return;
    int j = (int)(id % h2);
    size_t row = id / h2;                      /* (b*T + t)*H + h */
    int t = (int)((row / H) % T);
    float cs = cos_t[(size_t)t * h2 + j], sn = sin_t[(size_t)t * h2 + j];
    const float *xr = x + row * hd;
    float *o = out + row * hd;
    float x0 = xr[j], x1 = xr[j + h2];
    if (!bwd) {
        o[j] = x0 * cs - x1 * sn;
        o[j + h2] = x1 * cs + x0 * sn;
    } else {
        o[j] += x0 * cs + x1 * sn;
        o[j + h2] += x1 * cs - x0 * sn;
    }
}

extern "C" void kc_rope_fwd(float *out, const float *x, const float *cos_t, const float *sin_t,
                            int B, int T, int H, int hd) {
    size_t n = (size_t)B * T * H * (hd / 2);
    if (!n) return;
    rope_k<<<kc_blocks(n, KC_THREADS), KC_THREADS, 0, kc.stream>>>(out, x, cos_t, sin_t, B, T, H, hd, 0);
    KC_LAUNCHED("rope_fwd");
}

extern "C" void kc_rope_bwd(float *dx, const float *dout, const float *cos_t, const float *sin_t,
                            int B, int T, int H, int hd) {
    size_t n = (size_t)B * T * H * (hd / 2);
    if (!n) return;
    rope_k<<<kc_blocks(n, KC_THREADS), KC_THREADS, 0, kc.stream>>>(dx, dout, cos_t, sin_t, B, T, H, hd, 1);
    KC_LAUNCHED("rope_bwd");
}

/* ------------------------------------------------------------------------------------------ */
/* attention. Rows are numbered r = (b*A + h)*T + t (t fastest, so a block's warps read the same
 * keys); key rows (b, kh, s) likewise r = (b*KV + kh)*T + s.                                   */

#define QROW(b, t, h) (((size_t)(b) * T + (t)) * A + (h)) * hd
#define KROW(b, s, kh) (((size_t)(b) * T + (s)) * KV + (kh)) * hd

/* naive forward: a warp per (b, h, t): scores into att, softmax in place, out = att . v */
__global__ static void attn_fwd_k(float *out, float *att, const float *q, const float *k, const float *v, int B,
                                  int T, int A, int KV, int hd, float scale) {
    size_t r = WARP_ID;
    int lane = LANE;
    if (r >= (size_t)B * A * T) return;
    int t = (int)(r % T), h = (int)((r / T) % A), b = (int)(r / ((size_t)T * A));
    int kh = h / (A / KV);
    float qr[KC_HDL], o[KC_HDL];
    lane_load_hd(qr, q + QROW(b, t, h), lane, hd);
    float *ar = att + r * T;
    float mx = -INFINITY;
    for (int s = 0; s <= t; s++) {
        float d = warp_dot_hd(qr, k + KROW(b, s, kh), lane, hd);
        d *= scale;
        if (lane == 0) ar[s] = d;
        if (d > mx) mx = d;
    }
    __syncwarp();
    float sum = 0.0f;   /* the row's sum in key order, as on the CPU (every lane the same) */
    for (int s = 0; s <= t; s++) sum += expf(ar[s] - mx);
    __syncwarp();
    float inv = 1.0f / sum;
    for (int s = lane; s < T; s += 32) ar[s] = s <= t ? expf(ar[s] - mx) * inv : 0.0f;
    __syncwarp();
#pragma unroll
    for (int i = 0; i < KC_HDL; i++) o[i] = 0.0f;
    for (int s = 0; s <= t; s++) {
        const float *vr = v + KROW(b, s, kh);
        float a = ar[s];
#pragma unroll
        for (int i = 0; i < KC_HDL; i++) {
            int j = lane + 32 * i;
            if (j < hd) o[i] += a * vr[j];
        }
    }
    lane_store_hd(out + QROW(b, t, h), o, lane, hd);
}

/* naive backward, step 1: a warp per (b, h, t): ds[t][s] = att (datt - sum att datt) scale */
__global__ static void attn_bwd_ds_k(float *ds, const float *dout, const float *v, const float *att, int B, int T,
                                     int A, int KV, int hd, float scale) {
    size_t r = WARP_ID;
    int lane = LANE;
    if (r >= (size_t)B * A * T) return;
    int t = (int)(r % T), h = (int)((r / T) % A), b = (int)(r / ((size_t)T * A));
    int kh = h / (A / KV);
    float go[KC_HDL];
    lane_load_hd(go, dout + QROW(b, t, h), lane, hd);
    const float *ar = att + r * T;
    float *dr = ds + r * T;
    float sum = 0.0f;
    for (int s = 0; s <= t; s++) {
        float d = warp_dot_hd(go, v + KROW(b, s, kh), lane, hd);
        if (lane == 0) dr[s] = d;
        sum += ar[s] * d;
    }
    __syncwarp();
    for (int s = lane; s <= t; s += 32) dr[s] = ar[s] * (dr[s] - sum) * scale;
}

/* naive backward, step 2: a warp per query row owns dq: dq += sum_s ds[t][s] k[s], s ascending */
__global__ static void attn_bwd_dq_k(float *dq, const float *k, const float *ds, int B, int T, int A, int KV,
                                     int hd) {
    size_t r = WARP_ID;
    int lane = LANE;
    if (r >= (size_t)B * A * T) return;
    int t = (int)(r % T), h = (int)((r / T) % A), b = (int)(r / ((size_t)T * A));
    int kh = h / (A / KV);
    float acc[KC_HDL];
    float *dqr = dq + QROW(b, t, h);
    lane_load_hd(acc, dqr, lane, hd);
    const float *dr = ds + r * T;
    for (int s = 0; s <= t; s++) {
        const float *kr = k + KROW(b, s, kh);
        float d = dr[s];
#pragma unroll
        for (int i = 0; i < KC_HDL; i++) {
            int j = lane + 32 * i;
            if (j < hd) acc[i] += d * kr[j];
        }
    }
    lane_store_hd(dqr, acc, lane, hd);
}

/* naive backward, step 3: a warp per key row (b, kh, s) owns dk, dv: query heads of the group,
 * then rows t >= s ascending */
__global__ static void attn_bwd_dkv_k(float *dk, float *dv, const float *dout, const float *q, const float *att,
                                      const float *ds, int B, int T, int A, int KV, int hd) {
    size_t r = WARP_ID;
    int lane = LANE;
    if (r >= (size_t)B * KV * T) return;
    int s = (int)(r % T), kh = (int)((r / T) % KV), b = (int)(r / ((size_t)T * KV));
    int G = A / KV;
    float ak[KC_HDL], av[KC_HDL];
    float *dkr = dk + KROW(b, s, kh), *dvr = dv + KROW(b, s, kh);
    lane_load_hd(ak, dkr, lane, hd);
    lane_load_hd(av, dvr, lane, hd);
    for (int g = 0; g < G; g++) {
        int h = kh * G + g;
        for (int t = s; t < T; t++) {
            size_t ar = (((size_t)b * A + h) * T + t) * T + s;
            float d = ds[ar], a = att[ar];
            const float *qr = q + QROW(b, t, h), *go = dout + QROW(b, t, h);
#pragma unroll
            for (int i = 0; i < KC_HDL; i++) {
                int j = lane + 32 * i;
                if (j < hd) { ak[i] += d * qr[j]; av[i] += a * go[j]; }
            }
        }
    }
    lane_store_hd(dkr, ak, lane, hd);
    lane_store_hd(dvr, av, lane, hd);
}

static int kc_attn_shape_ok(int B, int T, int A, int KV, int hd, const char *what) {
    if (B <= 0 || T <= 0) return 0;
    if (hd > GPT_CUDA_HD_MAX || KV <= 0 || A % KV) {
        if (!kc.first_err[0])
            snprintf(kc.first_err, sizeof kc.first_err, "%s: unsupported shape (hd %d > %d or A %d not a multiple of KV %d)",
                     what, hd, GPT_CUDA_HD_MAX, A, KV);
        return 0;
    }
    return 1;
}

extern "C" void kc_attn_fwd(float *out, float *att, const float *q, const float *k, const float *v,
                            int B, int T, int A, int KV, int hd) {
    if (!kc_attn_shape_ok(B, T, A, KV, hd, "attn_fwd")) return;
    size_t rows = (size_t)B * A * T;
    attn_fwd_k<<<kc_warp_blocks(rows), KC_WARPS * 32, 0, kc.stream>>>(out, att, q, k, v, B, T, A, KV, hd,
                                                                     1.0f / sqrtf((float)hd));
    KC_LAUNCHED("attn_fwd");
}

extern "C" void kc_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                            const float *v, const float *att, int B, int T, int A, int KV, int hd) {
    if (!kc_attn_shape_ok(B, T, A, KV, hd, "attn_bwd")) return;
    size_t rows = (size_t)B * A * T;
    float *ds = kc_scratch(rows * T);
    if (!ds) return;
    float scale = 1.0f / sqrtf((float)hd);
    /* ds is filled only for s <= t; the consumers read only those */
    attn_bwd_ds_k<<<kc_warp_blocks(rows), KC_WARPS * 32, 0, kc.stream>>>(ds, dout, v, att, B, T, A, KV, hd, scale);
    KC_LAUNCHED("attn_bwd ds");
    attn_bwd_dq_k<<<kc_warp_blocks(rows), KC_WARPS * 32, 0, kc.stream>>>(dq, k, ds, B, T, A, KV, hd);
    KC_LAUNCHED("attn_bwd dq");
    size_t krows = (size_t)B * KV * T;
    attn_bwd_dkv_k<<<kc_warp_blocks(krows), KC_WARPS * 32, 0, kc.stream>>>(dk, dv, dout, q, att, ds, B, T, A, KV, hd);
    KC_LAUNCHED("attn_bwd dk dv");
}

/* flash forward: a warp per (b, h, t), the CPU's online softmax over blocks of 64 keys */
__global__ static void flash_fwd_k(float *out, float *lse, const float *q, const float *k, const float *v, int B,
                                   int T, int A, int KV, int hd, float scale) {
    __shared__ float scs[KC_WARPS][KC_ATTN_BLOCK];
    size_t r = WARP_ID;
    int lane = LANE;
    if (r >= (size_t)B * A * T) return;   /* whole warps leave together: T*A*B rows, warp-aligned */
    float *sc = scs[threadIdx.x / 32];
    int t = (int)(r % T), h = (int)((r / T) % A), b = (int)(r / ((size_t)T * A));
    int kh = h / (A / KV);
    float qr[KC_HDL], o[KC_HDL];
    lane_load_hd(qr, q + QROW(b, t, h), lane, hd);
#pragma unroll
    for (int i = 0; i < KC_HDL; i++) o[i] = 0.0f;
    float mx = -INFINITY, l = 0.0f;
    for (int s0 = 0; s0 <= t; s0 += KC_ATTN_BLOCK) {
        int s1 = s0 + KC_ATTN_BLOCK <= t + 1 ? s0 + KC_ATTN_BLOCK : t + 1;
        float bm = -INFINITY;
        for (int s = s0; s < s1; s++) {
            float d = warp_dot_hd(qr, k + KROW(b, s, kh), lane, hd);
            d *= scale;
            if (lane == 0) sc[s - s0] = d;
            if (d > bm) bm = d;
        }
        __syncwarp();
        if (bm > mx) {
            float alpha = expf(mx - bm);
            l *= alpha;
#pragma unroll
            for (int i = 0; i < KC_HDL; i++) o[i] *= alpha;
            mx = bm;
        }
        for (int s = s0; s < s1; s++) {
            const float *vr = v + KROW(b, s, kh);
            float p = expf(sc[s - s0] - mx);
            l += p;
#pragma unroll
            for (int i = 0; i < KC_HDL; i++) {
                int j = lane + 32 * i;
                if (j < hd) o[i] += p * vr[j];
            }
        }
        __syncwarp();   /* sc is rewritten by the next block */
    }
    float inv = 1.0f / l;
#pragma unroll
    for (int i = 0; i < KC_HDL; i++) o[i] *= inv;
    lane_store_hd(out + QROW(b, t, h), o, lane, hd);
    if (lane == 0) lse[r] = mx + logf(l);   /* lse (B,A,T): index r */
}

/* flash backward, step 1: D (B,A,T) = dout . out per row, as sum_s p_s (dout . v_s) over the
 * row's keys ascending (the forward's output is not kept); p = exp(score - lse) as in step 2 */
__global__ static void flash_bwd_d_k(float *D, const float *dout, const float *q, const float *k, const float *v,
                                     const float *lse, int B, int T, int A, int KV, int hd, float scale) {
    size_t r = WARP_ID;
    int lane = LANE;
    if (r >= (size_t)B * A * T) return;
    int t = (int)(r % T), h = (int)((r / T) % A), b = (int)(r / ((size_t)T * A));
    int kh = h / (A / KV);
    float qr[KC_HDL], go[KC_HDL];
    lane_load_hd(qr, q + QROW(b, t, h), lane, hd);
    lane_load_hd(go, dout + QROW(b, t, h), lane, hd);
    float L = lse[r], d = 0.0f;
    for (int s = 0; s <= t; s++) {
        float sc = warp_dot_hd(qr, k + KROW(b, s, kh), lane, hd);
        float dp = warp_dot_hd(go, v + KROW(b, s, kh), lane, hd);
        d += expf(sc * scale - L) * dp;
    }
    if (lane == 0) D[r] = d;
}

/* flash backward, step 2: a warp per query row owns dq; keys ascending */
__global__ static void flash_bwd_dq_k(float *dq, const float *dout, const float *q, const float *k, const float *v,
                                      const float *lse, const float *D, int B, int T, int A, int KV, int hd,
                                      float scale) {
    size_t r = WARP_ID;
    int lane = LANE;
    if (r >= (size_t)B * A * T) return;
    int t = (int)(r % T), h = (int)((r / T) % A), b = (int)(r / ((size_t)T * A));
    int kh = h / (A / KV);
    float qr[KC_HDL], go[KC_HDL], acc[KC_HDL];
    lane_load_hd(qr, q + QROW(b, t, h), lane, hd);
    lane_load_hd(go, dout + QROW(b, t, h), lane, hd);
    float *dqr = dq + QROW(b, t, h);
    if (dq == dout) for (int i = 0; i < KC_HDL; i++) acc[i] = 0.0f;   /* written over this row of dout */
    else lane_load_hd(acc, dqr, lane, hd);
    float L = lse[r], Dr = D[r];
    for (int s = 0; s <= t; s++) {
        const float *kr = k + KROW(b, s, kh);
        float d = warp_dot_hd(qr, kr, lane, hd);
        float dp = warp_dot_hd(go, v + KROW(b, s, kh), lane, hd);
        float p = expf(d * scale - L);
        float ds = p * (dp - Dr) * scale;
#pragma unroll
        for (int i = 0; i < KC_HDL; i++) {
            int j = lane + 32 * i;
            if (j < hd) acc[i] += ds * kr[j];
        }
    }
    lane_store_hd(dqr, acc, lane, hd);
}

/* flash backward, step 3: a warp per key row (b, kh, s) owns dk, dv; query heads of the group,
 * then rows t >= s ascending */
__global__ static void flash_bwd_dkv_k(float *dk, float *dv, const float *dout, const float *q, const float *k,
                                       const float *v, const float *lse, const float *D, int B, int T, int A,
                                       int KV, int hd, float scale) {
    size_t r = WARP_ID;
    int lane = LANE;
    if (r >= (size_t)B * KV * T) return;
    int s = (int)(r % T), kh = (int)((r / T) % KV), b = (int)(r / ((size_t)T * KV));
    int G = A / KV;
    float kr[KC_HDL], vr[KC_HDL], ak[KC_HDL], av[KC_HDL];
    lane_load_hd(kr, k + KROW(b, s, kh), lane, hd);
    lane_load_hd(vr, v + KROW(b, s, kh), lane, hd);
    float *dkr = dk + KROW(b, s, kh), *dvr = dv + KROW(b, s, kh);
    lane_load_hd(ak, dkr, lane, hd);
    lane_load_hd(av, dvr, lane, hd);
    for (int g = 0; g < G; g++) {
        int h = kh * G + g;
        for (int t = s; t < T; t++) {
            const float *qr = q + QROW(b, t, h), *go = dout + QROW(b, t, h);
            size_t qi = ((size_t)b * A + h) * T + t;
            float d = warp_dot_hd(kr, qr, lane, hd);
            float dp = warp_dot_hd(vr, go, lane, hd);
            float p = expf(d * scale - lse[qi]);
            float ds = p * (dp - D[qi]) * scale;
#pragma unroll
            for (int i = 0; i < KC_HDL; i++) {
                int j = lane + 32 * i;
                if (j < hd) { ak[i] += ds * qr[j]; av[i] += p * go[j]; }
            }
        }
    }
    lane_store_hd(dkr, ak, lane, hd);
    lane_store_hd(dvr, av, lane, hd);
}

extern "C" void kc_flash_attn_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                                  int B, int T, int A, int KV, int hd) {
    if (!kc_attn_shape_ok(B, T, A, KV, hd, "flash_attn_fwd")) return;
    size_t rows = (size_t)B * A * T;
    flash_fwd_k<<<kc_warp_blocks(rows), KC_WARPS * 32, 0, kc.stream>>>(out, lse, q, k, v, B, T, A, KV, hd,
                                                                      1.0f / sqrtf((float)hd));
    KC_LAUNCHED("flash_attn_fwd");
}

extern "C" void kc_flash_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                  const float *k, const float *v, const float *lse, int B, int T, int A, int KV,
                                  int hd) {
    if (!kc_attn_shape_ok(B, T, A, KV, hd, "flash_attn_bwd")) return;
    size_t rows = (size_t)B * A * T, krows = (size_t)B * KV * T;
    float scale = 1.0f / sqrtf((float)hd);
    float *D = kc_scratch(rows);
    if (!D) return;
    flash_bwd_d_k<<<kc_warp_blocks(rows), KC_WARPS * 32, 0, kc.stream>>>(D, dout, q, k, v, lse, B, T, A, KV, hd,
                                                                         scale);
    KC_LAUNCHED("flash_attn_bwd D");
    /* dk, dv before dq: dq may be dout itself (the dq kernel writes each row over the dout row it
     * has read; the dk dv kernel reads every row of dout) */
    if (dk && dv) {
        flash_bwd_dkv_k<<<kc_warp_blocks(krows), KC_WARPS * 32, 0, kc.stream>>>(dk, dv, dout, q, k, v, lse, D, B, T,
                                                                               A, KV, hd, scale);
        KC_LAUNCHED("flash_attn_bwd dk dv");
    }
    if (dq) {
        flash_bwd_dq_k<<<kc_warp_blocks(rows), KC_WARPS * 32, 0, kc.stream>>>(dq, dout, q, k, v, lse, D, B, T, A, KV,
                                                                             hd, scale);
        KC_LAUNCHED("flash_attn_bwd dq");
    }
}

/* ------------------------------------------------------------------------------------------ */
/* elementwise                                                                                  */

#define ELEMENTWISE_ID size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return

__global__ static void swiglu_fwd_k(float *out, const float *g, const float *u, size_t n) {
    ELEMENTWISE_ID;
    float x = g[i];
    float sig = 1.0f / (1.0f + expf(-x));
    out[i] = x * sig * u[i];
}

__global__ static void swiglu_bwd_k(float *dg, float *du, const float *dout, const float *g, const float *u,
                                    size_t n) {
    ELEMENTWISE_ID;
    float x = g[i];
    float sig = 1.0f / (1.0f + expf(-x));
    float silu = x * sig;
    float go = dout[i], d = go * u[i] * (sig * (1.0f + x * (1.0f - sig)));
    if (du) du[i] += go * silu;
    if (dg == dout) dg[i] = d;   /* dg written over dout */
    else if (dg) dg[i] += d;
}

__global__ static void add_k(float *out, const float *a, const float *b, size_t n) {
    ELEMENTWISE_ID;
    out[i] = a[i] + b[i];
}

__global__ static void accumulate_k(float *dst, const float *src, size_t n) {
    ELEMENTWISE_ID;
    dst[i] += src[i];
}

#define LAUNCH_1D(kernel, n, name, ...) do { \
        if ((n) == 0) break; \
        kernel<<<kc_blocks((n), KC_THREADS), KC_THREADS, 0, kc.stream>>>(__VA_ARGS__); \
        KC_LAUNCHED(name); } while (0)

extern "C" void kc_swiglu_fwd(float *out, const float *g, const float *u, size_t n) {
    LAUNCH_1D(swiglu_fwd_k, n, "swiglu_fwd", out, g, u, n);
}

extern "C" void kc_swiglu_bwd(float *dg, float *du, const float *dout, const float *g, const float *u, size_t n) {
    if (!dg && !du) return;
    LAUNCH_1D(swiglu_bwd_k, n, "swiglu_bwd", dg, du, dout, g, u, n);
}

extern "C" void kc_add_fwd(float *out, const float *a, const float *b, size_t n) {
    LAUNCH_1D(add_k, n, "add_fwd", out, a, b, n);
}

extern "C" void kc_accumulate(float *dst, const float *src, size_t n) {
    LAUNCH_1D(accumulate_k, n, "accumulate", dst, src, n);
}

/* ------------------------------------------------------------------------------------------ */
/* embedding                                                                                    */

__global__ static void embed_fwd_k(float *out, const int *tok, const float *wte, int M, int C) {
    size_t n = (size_t)M * C;
    ELEMENTWISE_ID;
    size_t row = i / C;
    int c = (int)(i % C);
    out[i] = wte[(size_t)tok[row] * C + c];
}

/* grid (column blocks, vocabulary groups): thread (c, g) owns dwte[v][c] for v in group g and
 * adds the tokens' rows in order: the CPU's sums, bit for bit */
__global__ static void embed_bwd_k(float *dwte, const float *dout, const int *tok, int M, int C, int V, int vper) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int v0 = blockIdx.y * vper, v1 = v0 + vper < V ? v0 + vper : V;
    if (c >= C) return;
    for (int i = 0; i < M; i++) {
        int v = tok[i];
        if (v >= v0 && v < v1) dwte[(size_t)v * C + c] += dout[(size_t)i * C + c];
    }
}

extern "C" void kc_embed_fwd(float *out, const int *tok, const float *wte, int M, int C) {
    size_t n = (size_t)M * C;
    LAUNCH_1D(embed_fwd_k, n, "embed_fwd", out, tok, wte, M, C);
}

extern "C" void kc_embed_bwd(float *dwte, const float *dout, const int *tok, int M, int C, int V) {
    if (M <= 0 || C <= 0 || V <= 0) return;
    /* about 64k threads: groups of vper vocabulary rows (a function of the shape only) */
    int groups = (int)((65536 + C - 1) / C);
    if (groups > V) groups = V;
    if (groups > 65535) groups = 65535;   /* gridDim.y */
    if (groups < 1) groups = 1;
    int vper = (V + groups - 1) / groups;
    groups = (V + vper - 1) / vper;
    dim3 grid(kc_blocks(C, 128), groups);
    embed_bwd_k<<<grid, 128, 0, kc.stream>>>(dwte, dout, tok, M, C, V, vper);
    KC_LAUNCHED("embed_bwd");
}

/* ------------------------------------------------------------------------------------------ */
/* cross-entropy                                                                                */

__global__ static void loss_mean_k(float *mean, const float *losses, int M) {
    double total = 0.0;
    for (int i = 0; i < M; i++) total += losses[i];
    *mean = (float)(total / M);
}

extern "C" void kc_loss_mean(float *mean, const float *losses, int M) {
    if (M <= 0) return;
    loss_mean_k<<<1, 1, 0, kc.stream>>>(mean, losses, M);
    KC_LAUNCHED("loss_mean");
}

/* a warp per row: full softmax into probs (probs may be NULL: the log-sum-exp form) */
__global__ static void xent_fwd_k(float *probs, float *lse, float *losses, const float *logits, const int *targets,
                                  int M, int V) {
    size_t i = WARP_ID;
    int lane = LANE;
    if (i >= (size_t)M) return;
    const float *l = logits + i * V;
    float mx = -INFINITY;
    for (int j = lane; j < V; j += 32) mx = fmaxf(mx, l[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j < V; j += 32) {
        float e = expf(l[j] - mx);
        if (probs) probs[i * V + j] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    if (probs) {
        float inv = 1.0f / sum;
        for (int j = lane; j < V; j += 32) probs[i * V + j] *= inv;
    }
    if (lane == 0) {
        float ls = logf(sum);
        if (lse) lse[i] = mx + ls;
        losses[i] = ls - (l[targets[i]] - mx);
    }
}

extern "C" float kc_xent_fwd(float *probs, float *losses, const float *logits, const int *targets, int M, int V) {
    if (M <= 0) return 0.0f;
    xent_fwd_k<<<kc_warp_blocks(M), KC_WARPS * 32, 0, kc.stream>>>(probs, NULL, losses, logits, targets, M, V);
    KC_LAUNCHED("xent_fwd");
    float *mean = kc_scratch(1), h = NAN;
    if (!mean) return NAN;
    kc_loss_mean(mean, losses, M);
    kc_note(cudaMemcpyAsync(&h, mean, sizeof h, cudaMemcpyDeviceToHost, kc.stream), "xent_fwd: copy of the mean");
    kc_note(cudaStreamSynchronize(kc.stream), "xent_fwd: cudaStreamSynchronize");
    return h;
}

/* d (M,V): bwd: d += (p - onehot) s; lse_bwd (p NULL): d = (exp(d - lse) - onehot) s */
__global__ static void xent_bwd_k(float *d, const float *probs, const float *lse, const int *targets, int M, int V,
                                  float s) {
    size_t n = (size_t)M * V;
    ELEMENTWISE_ID;
    size_t row = i / V;
    int j = (int)(i % V);
    float oh = j == targets[row] ? 1.0f : 0.0f;
    if (probs) d[i] += (probs[i] - oh) * s;
    else d[i] = (expf(d[i] - lse[row]) - oh) * s;
}

extern "C" void kc_xent_bwd(float *dlogits, const float *probs, const int *targets, int M, int V, float dloss) {
    size_t n = (size_t)M * V;
    float s = dloss / (float)M;
    LAUNCH_1D(xent_bwd_k, n, "xent_bwd", dlogits, probs, (const float *)NULL, targets, M, V, s);
}

extern "C" void kc_xent_lse_fwd(float *lse, float *losses, const float *logits, const int *targets, int M, int V) {
    if (M <= 0) return;
    xent_fwd_k<<<kc_warp_blocks(M), KC_WARPS * 32, 0, kc.stream>>>(NULL, lse, losses, logits, targets, M, V);
    KC_LAUNCHED("xent_lse_fwd");
}

extern "C" void kc_xent_lse_bwd(float *logits, const float *lse, const int *targets, int M, int V, float scale) {
    size_t n = (size_t)M * V;
    LAUNCH_1D(xent_bwd_k, n, "xent_lse_bwd", logits, (const float *)NULL, lse, targets, M, V, scale);
}

/* ------------------------------------------------------------------------------------------ */
/* mixture of experts                                                                           */

typedef struct { const float *p[KC_MOE_MAX]; } kc_cptrs;
typedef struct { float *p[KC_MOE_MAX]; } kc_ptrs;

/* a thread per token: the CPU's code */
__global__ static void moe_route_fwd_k(float *probs, float *wts, int *idx, const float *logits, int M, int E, int K) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M) return;
    const float *l = logits + (size_t)i * E;
    float *p = probs + (size_t)i * E;
    float mx = l[0], sum = 0.0f;
    for (int j = 1; j < E; j++) if (l[j] > mx) mx = l[j];
    for (int j = 0; j < E; j++) { p[j] = expf(l[j] - mx); sum += p[j]; }
    for (int j = 0; j < E; j++) p[j] /= sum;
    int *ix = idx + (size_t)i * K;
    float s = 0.0f;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int j = 0; j < E; j++) {
            int taken = 0;
            for (int q = 0; q < k; q++) taken |= ix[q] == j;
            if (!taken && (best < 0 || p[j] > p[best])) best = j;   /* ties: lower index */
        }
        ix[k] = best;
        s += p[best];
    }
    for (int k = 0; k < K; k++) wts[(size_t)i * K + k] = p[ix[k]] / s;
}

__global__ static void moe_route_bwd_k(float *dlogits, const float *dwts, const float *probs, const int *idx, int M,
                                       int E, int K) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M) return;
    const float *p = probs + (size_t)i * E, *dw = dwts + (size_t)i * K;
    const int *ix = idx + (size_t)i * K;
    float s = 0.0f, wdw = 0.0f, pdp = 0.0f;
    for (int k = 0; k < K; k++) s += p[ix[k]];
    for (int k = 0; k < K; k++) wdw += dw[k] * (p[ix[k]] / s);
    float dp[KC_MOE_MAX];
    for (int k = 0; k < K; k++) { dp[k] = (dw[k] - wdw) / s; pdp += p[ix[k]] * dp[k]; }
    float *d = dlogits + (size_t)i * E;
    for (int j = 0; j < E; j++) {
        float dpj = 0.0f;
        for (int k = 0; k < K; k++) if (ix[k] == j) dpj = dp[k];
        d[j] += p[j] * (dpj - pdp);
    }
}

extern "C" void kc_moe_route_fwd(float *probs, float *wts, int *idx, const float *logits, int M, int E, int K) {
    if (M <= 0) return;
    moe_route_fwd_k<<<kc_blocks(M, 128), 128, 0, kc.stream>>>(probs, wts, idx, logits, M, E, K);
    KC_LAUNCHED("moe_route_fwd");
}

extern "C" void kc_moe_route_bwd(float *dlogits, const float *dwts, const float *probs, const int *idx, int M, int E,
                                 int K) {
    if (M <= 0) return;
    moe_route_bwd_k<<<kc_blocks(M, 128), 128, 0, kc.stream>>>(dlogits, dwts, probs, idx, M, E, K);
    KC_LAUNCHED("moe_route_bwd");
}

__global__ static void moe_gather_k(float *dst, const float *src, const int *rows, int n, int C, int bwd) {
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (size_t)n * C) return;
    size_t r = id / C;
    int c = (int)(id % C);
    if (!bwd) dst[id] = src[(size_t)rows[r] * C + c];            /* xe[r] = x[rows[r]] */
    else dst[(size_t)rows[r] * C + c] += src[id];                /* dx[rows[r]] += dxe[r] */
}

extern "C" void kc_moe_gather_fwd(float *xe, const float *x, const int *rows, int n, int C) {
    size_t m = (size_t)n * C;
    LAUNCH_1D(moe_gather_k, m, "moe_gather_fwd", xe, x, rows, n, C, 0);
}

extern "C" void kc_moe_gather_bwd(float *dx, const float *dxe, const int *rows, int n, int C) {
    size_t m = (size_t)n * C;
    LAUNCH_1D(moe_gather_k, m, "moe_gather_bwd", dx, dxe, rows, n, C, 1);
}

__global__ static void moe_combine_fwd_k(float *out, const float *wts, const int *idx, const int *slot, kc_cptrs ye,
                                         int M, int C, int K) {
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (size_t)M * C) return;
    size_t i = id / C;
    int c = (int)(id % C);
    float o = 0.0f;
    for (int k = 0; k < K; k++) {
        size_t ik = i * K + k;
        o += wts[ik] * ye.p[idx[ik]][(size_t)slot[ik] * C + c];
    }
    out[id] = o;
}

/* a warp per (token, k): the (expert, row) it writes belongs to it alone */
__global__ static void moe_combine_bwd_k(kc_ptrs dye, int has_dye, float *dwts, const float *dout, const float *wts,
                                         const int *idx, const int *slot, kc_cptrs ye, int M, int C, int K) {
    size_t ik = WARP_ID;
    int lane = LANE;
    if (ik >= (size_t)M * K) return;
    size_t i = ik / K;
    int e = idx[ik];
    const float *g = dout + i * C;
    const float *y = ye.p[e] + (size_t)slot[ik] * C;
    if (dwts) {
        float s = 0.0f;
        for (int c = lane; c < C; c += 32) s += g[c] * y[c];
        s = warp_sum(s);
        if (lane == 0) dwts[ik] += s;
    }
    if (has_dye && dye.p[e]) {
        float *d = dye.p[e] + (size_t)slot[ik] * C;
        float w = wts[ik];
        for (int c = lane; c < C; c += 32) d[c] += w * g[c];
    }
}

static int kc_moe_ok(int E, const char *what) {
    if (E > 0 && E <= KC_MOE_MAX) return 1;
    if (!kc.first_err[0]) snprintf(kc.first_err, sizeof kc.first_err, "%s: E %d outside 1..%d", what, E, KC_MOE_MAX);
    return 0;
}

extern "C" void kc_moe_combine_fwd(float *out, const float *wts, const int *idx, const int *slot,
                                   const float *const *ye, int M, int C, int K, int E) {
    if (!kc_moe_ok(E, "moe_combine_fwd")) return;
    kc_cptrs y;
    memset(&y, 0, sizeof y);
    for (int e = 0; e < E; e++) y.p[e] = ye[e];
    size_t n = (size_t)M * C;
    LAUNCH_1D(moe_combine_fwd_k, n, "moe_combine_fwd", out, wts, idx, slot, y, M, C, K);
}

extern "C" void kc_moe_combine_bwd(float *const *dye, float *dwts, const float *dout, const float *wts,
                                   const int *idx, const int *slot, const float *const *ye, int M, int C, int K,
                                   int E) {
    if (!kc_moe_ok(E, "moe_combine_bwd") || M <= 0 || K <= 0) return;
    kc_cptrs y;
    kc_ptrs d;
    memset(&y, 0, sizeof y);
    memset(&d, 0, sizeof d);
    for (int e = 0; e < E; e++) {
        y.p[e] = ye[e];
        d.p[e] = dye ? dye[e] : NULL;
    }
    size_t warps = (size_t)M * K;
    moe_combine_bwd_k<<<kc_warp_blocks(warps), KC_WARPS * 32, 0, kc.stream>>>(d, dye != NULL, dwts, dout, wts, idx,
                                                                             slot, y, M, C, K);
    KC_LAUNCHED("moe_combine_bwd");
}

/* ------------------------------------------------------------------------------------------ */
/* optimizer                                                                                    */

__global__ static void adamw_k(float *p, float *m, float *v, const float *g, size_t n, float b1, float b2, float eps,
                               int decay_on, float decay, float bc2s, float step) {
    ELEMENTWISE_ID;
    float gi = g[i];
    float pi = decay_on ? p[i] * decay : p[i];
    float mi = m[i] * b1 + gi * (1.0f - b1);
    float vi = v[i] * b2 + gi * gi * (1.0f - b2);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step * (mi / (sqrtf(vi) / bc2s + eps));
}

extern "C" void kc_adamw(float *p, float *m, float *v, const float *g, size_t n, float lr, float b1, float b2,
                         float eps, float wd, int t) {
    /* the step constants on the host, in double, exactly as k_adamw */
    float decay = (float)(1.0 - (double)lr * wd);
    float bc1 = (float)(1.0 - pow(b1, t));
    float bc2s = (float)sqrt(1.0 - pow(b2, t));
    float step = lr / bc1;
    LAUNCH_1D(adamw_k, n, "adamw", p, m, v, g, n, b1, b2, eps, wd != 0.0f, decay, bc2s, step);
}

/* ------------------------------------------------------------------------------------------ */
/* bf16 (issue 17 item 5, the kernels only: no trainer uses them yet)                           */

/* fp32 -> bf16 bits, round to nearest, ties to even; a NaN stays a (quiet) NaN */
__device__ static uint16_t kc_bf16_bits(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__global__ static void to_bf16_k(uint16_t *dst, const float *src, size_t n) {
    ELEMENTWISE_ID;
    dst[i] = kc_bf16_bits(src[i]);
}

__global__ static void from_bf16_k(float *dst, const uint16_t *src, size_t n) {
    ELEMENTWISE_ID;
    dst[i] = __uint_as_float((unsigned)src[i] << 16);
}

extern "C" void kc_to_bf16(uint16_t *dst, const float *src, size_t n) {
    LAUNCH_1D(to_bf16_k, n, "to_bf16", dst, src, n);
}

extern "C" void kc_from_bf16(float *dst, const uint16_t *src, size_t n) {
    LAUNCH_1D(from_bf16_k, n, "from_bf16", dst, src, n);
}

/* the products of kc_matmul_fwd/bwd with bf16 inputs, fp32 outputs and fp32 accumulation */
extern "C" void kc_matmul_fwd_bf16(float *out, const uint16_t *inp, const uint16_t *w, int M, int K, int N) {
    const float one = 1.0f, zero = 0.0f;
    kc_note_blas(cublasGemmEx(kc.blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w, CUDA_R_16BF, K, inp, CUDA_R_16BF,
                              K, &zero, out, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "matmul_fwd_bf16 gemmex");
}

extern "C" void kc_matmul_bwd_bf16(float *dinp, float *dw, const uint16_t *dout, const uint16_t *inp,
                                   const uint16_t *w, int M, int K, int N) {
    const float one = 1.0f;
    if (dinp)
        kc_note_blas(cublasGemmEx(kc.blas, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, &one, w, CUDA_R_16BF, K, dout,
                                  CUDA_R_16BF, N, &one, dinp, CUDA_R_32F, K, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "matmul_bwd_bf16 dinp gemmex");
    if (dw)
        kc_note_blas(cublasGemmEx(kc.blas, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, &one, inp, CUDA_R_16BF, K, dout,
                                  CUDA_R_16BF, N, &one, dw, CUDA_R_32F, K, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "matmul_bwd_bf16 dw gemmex");
}

/* ------------------------------------------------------------------------------------------ */
/* a spin kernel (the overlap tests of tests/test-device-cuda.c)                                */

__device__ static unsigned long long kc_now_ns(void) {
#if defined(__CUDA_ARCH__)
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));   /* nanoseconds, the GPU's wall clock */
    return t;
#elif defined(CUDA_EMU_CLOCK_NS)
    return CUDA_EMU_CLOCK_NS();
#else
    return ~0ull;   /* nvcc's host pass: never executed */
#endif
}

__global__ static void spin_k(unsigned long long ns) {
    unsigned long long t0 = kc_now_ns();
    while (kc_now_ns() - t0 < ns) {
    }
}

extern "C" void kc_spin(double seconds) {
    unsigned long long ns = seconds > 0 ? (unsigned long long)(seconds * 1e9) : 0;
    spin_k<<<1, 1, 0, kc.stream>>>(ns);
    KC_LAUNCHED("spin");
}
