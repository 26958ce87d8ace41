#pragma once
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
