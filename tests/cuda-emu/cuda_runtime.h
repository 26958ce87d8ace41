/* tests/cuda-emu/cuda_runtime.h: just enough of the CUDA runtime to run gpt/kernels-cuda.cu on the CPU
 * (scripts/cuda-emu-check.sh): every GPU thread is a ucontext fiber; the fibers of a block run in
 * turn and meet at __shfl_xor_sync / __syncwarp / __syncthreads, so warps work in lockstep there.
 * Checks indexing, ownership, the warp reductions and the cuBLAS mapping; it cannot see memory
 * races between sync points, timing, or the real expf/logf (glibc is used). */
#pragma once
#include <ucontext.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <math.h>
#include <functional>
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
typedef void *cudaStream_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost };
struct cudaDeviceProp { char name[256]; };
static inline cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return 0; }
static inline cudaError_t cudaSetDevice(int) { return 0; }
static inline cudaError_t cudaGetLastError(void) { return 0; }
static inline const char *cudaGetErrorString(cudaError_t) { return "emu error"; }
static inline const char *cudaGetErrorName(cudaError_t) { return "emuError"; }
static inline cudaError_t cudaMalloc(void **p, size_t n) { *p = aligned_alloc(256, (n + 255) / 256 * 256); if (*p) memset(*p, 0xcd, n); return *p ? 0 : 2; }
static inline cudaError_t cudaFree(void *p) { free(p); return 0; }
static inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) { memcpy(d, s, n); return 0; }
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) { memcpy(d, s, n); return 0; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return 0; }
static inline cudaError_t cudaDeviceSynchronize(void) { return 0; }
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) { strcpy(p->name, "cuda-emu (CPU fibers)"); return 0; }
#include <time.h>
static inline unsigned long long emu_clock_ns(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}
#define CUDA_EMU_CLOCK_NS emu_clock_ns
#include <stdint.h>
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
#define __global__
#define __device__
#define __shared__ static

struct emu_fiber { ucontext_t ctx; dim3 tid; int done; };
struct emu_bar { int arrived, gen; float vals[2][32]; };
static emu_fiber *emu_f; static int emu_nf, emu_cur; static ucontext_t emu_sched;
static dim3 emu_bidx, emu_bdim, emu_gdim;
static emu_bar emu_warps[64], emu_block_bar;
static std::function<void()> *emu_body;
static char *emu_stacks;
#define EMU_STACK (64 * 1024)
#define threadIdx (emu_f[emu_cur].tid)
#define blockIdx emu_bidx
#define blockDim emu_bdim
#define gridDim emu_gdim
static void emu_yield(void) { int me = emu_cur; swapcontext(&emu_f[me].ctx, &emu_sched); }
static void emu_entry(void) { (*emu_body)(); emu_f[emu_cur].done = 1; }
static int emu_lin(void) { return (int)(threadIdx.x + threadIdx.y * emu_bdim.x); }
static float emu_barrier(emu_bar *b, int count, float v, int lane, int src) {
    int g = b->gen;
    b->vals[g & 1][lane] = v;
    if (++b->arrived == count) { b->arrived = 0; b->gen++; }
    else while (b->gen == g) emu_yield();
    return b->vals[g & 1][src];
}
static inline float __shfl_xor_sync(unsigned, float v, int m) {
    int l = emu_lin(); return emu_barrier(&emu_warps[l / 32], 32, v, l & 31, (l & 31) ^ m);
}
static inline void __syncwarp(void) { int l = emu_lin(); emu_barrier(&emu_warps[l / 32], 32, 0, l & 31, l & 31); }
static inline void __syncthreads(void) { emu_barrier(&emu_block_bar, emu_nf, 0, 0, 0); }
template <class F> static void emu_launch(F f, dim3 g, dim3 b, size_t = 0, cudaStream_t = 0) {
    std::function<void()> body = f;
    emu_body = &body;
    emu_gdim = g; emu_bdim = b;
    int n = (int)(b.x * b.y * b.z);
    if (!emu_stacks) { emu_stacks = (char *)malloc((size_t)1024 * EMU_STACK); emu_f = new emu_fiber[1024]; }
    for (unsigned by = 0; by < g.y; by++)
        for (unsigned bx = 0; bx < g.x; bx++) {
            emu_bidx = dim3(bx, by, 0);
            memset(emu_warps, 0, sizeof emu_warps); memset(&emu_block_bar, 0, sizeof emu_block_bar);
            emu_nf = n;
            for (int i = 0; i < n; i++) {
                emu_f[i].tid = dim3(i % b.x, i / b.x, 0); emu_f[i].done = 0;
                getcontext(&emu_f[i].ctx);
                emu_f[i].ctx.uc_stack.ss_sp = emu_stacks + (size_t)i * EMU_STACK;
                emu_f[i].ctx.uc_stack.ss_size = EMU_STACK;
                emu_f[i].ctx.uc_link = &emu_sched;
                makecontext(&emu_f[i].ctx, emu_entry, 0);
            }
            /* CUDA_EMU_ORDER=reverse runs the fibers last to first: a missing __syncwarp between a
             * write by lane 0 and reads by the others then shows as wrong results */
            static int rev = -1;
            if (rev < 0) rev = getenv("CUDA_EMU_ORDER") && !strcmp(getenv("CUDA_EMU_ORDER"), "reverse");
            for (int alive = n; alive;) {
                alive = 0;
                for (int k = 0; k < n; k++) {
                    int i = rev ? n - 1 - k : k;
                    if (!emu_f[i].done) { emu_cur = i; swapcontext(&emu_sched, &emu_f[i].ctx); alive += !emu_f[i].done; }
                }
            }
        }
}
