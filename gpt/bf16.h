/* bf16.h: fp32 <-> bf16 bit conversions on the host, shared by the CPU kernels (kernels-cpu.c's
 * k_to_bf16 / k_from_bf16), the cuda-emu shim and the CUDA test's reference. Round to nearest,
 * ties to even; a NaN stays a quiet NaN of the same sign; values past the largest bf16 round to
 * infinity. Widening is exact (bf16 is the top half of an fp32). Matches kernels-cuda.cu. */
#ifndef GPT_BF16_H
#define GPT_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float bf16_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif /* GPT_BF16_H */
