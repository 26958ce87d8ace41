#pragma once
#include <stdlib.h>
#include <string.h>
/* tests/cuda-emu/cublas_v2.h: the cuBLAS calls of gpt/kernels-cuda.cu for the emulator; sgemm is the
 * column-major definition of the cuBLAS documentation, plain loops. */
typedef void *cublasHandle_t;
typedef int cublasStatus_t;
enum { CUBLAS_STATUS_SUCCESS = 0 };
typedef int cublasOperation_t;
enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_ATOMICS_NOT_ALLOWED = 0, CUBLAS_POINTER_MODE_HOST = 0 };
static inline cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = (void *)1; return 0; }
static inline cublasStatus_t cublasDestroy(cublasHandle_t) { return 0; }
static inline cublasStatus_t cublasSetMathMode(cublasHandle_t, int) { return 0; }
static inline cublasStatus_t cublasSetAtomicsMode(cublasHandle_t, int) { return 0; }
static inline cublasStatus_t cublasSetPointerMode(cublasHandle_t, int) { return 0; }
static inline cublasStatus_t cublasSetStream(cublasHandle_t, void *) { return 0; }
static inline cublasStatus_t cublasSetWorkspace(cublasHandle_t, void *, size_t) { return 0; }
/* column-major, as the cuBLAS reference documents it */
static inline cublasStatus_t cublasSgemm(cublasHandle_t, int ta, int tb, int m, int n, int k, const float *alpha,
                                         const float *A, int lda, const float *B, int ldb, const float *beta,
                                         float *C, int ldc) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0;
            for (int p = 0; p < k; p++)
                s += (ta ? A[p + (size_t)i * lda] : A[i + (size_t)p * lda]) * (tb ? B[j + (size_t)p * ldb] : B[p + (size_t)j * ldb]);
            C[i + (size_t)j * ldc] = *alpha * s + (*beta != 0 ? *beta * C[i + (size_t)j * ldc] : 0);
        }
    return 0;
}
/* cublasGemmEx for bf16 inputs and fp32 outputs: the inputs widened exactly, then sgemm */
typedef int cudaDataType;
enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
typedef int cublasComputeType_t;
enum { CUBLAS_COMPUTE_32F = 68 };
typedef int cublasGemmAlgo_t;
enum { CUBLAS_GEMM_DEFAULT = -1 };
static inline float *emu_widen(const void *p, int type, size_t n) {
    float *f = (float *)malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        if (type == CUDA_R_16BF) { unsigned u = (unsigned)((const unsigned short *)p)[i] << 16; memcpy(&f[i], &u, 4); }
        else f[i] = ((const float *)p)[i];
    }
    return f;
}
static inline cublasStatus_t cublasGemmEx(cublasHandle_t h, int ta, int tb, int m, int n, int k, const void *alpha,
                                          const void *A, int at, int lda, const void *B, int bt, int ldb,
                                          const void *beta, void *C, int ct, int ldc, int compute, int algo) {
    if (ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F || algo != CUBLAS_GEMM_DEFAULT) return 7;
    size_t na = (size_t)lda * (ta ? m : k), nb = (size_t)ldb * (tb ? k : n);
    float *a = emu_widen(A, at, na), *b = emu_widen(B, bt, nb);
    cublasStatus_t st = cublasSgemm(h, ta, tb, m, n, k, (const float *)alpha, a, lda, b, ldb, (const float *)beta,
                                    (float *)C, ldc);
    free(a); free(b);
    return st;
}
