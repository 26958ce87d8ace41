/* presets.h: device presets for offline planning (`smartswap plan --device h200`): memory,
 * dense bf16 FLOP/s, host link bandwidth each way, and the host memory a typical server gives
 * each device. Values and their sources are in presets.c and docs/policy.md.
 */
#ifndef SS_PRESETS_H
#define SS_PRESETS_H

#include "internal.h"

typedef struct ssi_device_preset {
    const char *name;          /* "h200" */
    const char *desc;          /* "NVIDIA H200 SXM 141GB, PCIe Gen5 x16" */
    uint64_t    mem_bytes;     /* device memory as the driver reports it (nvidia-smi total) */
    double      bf16_flops;    /* dense bf16 tensor-core peak, FLOP/s (no sparsity) */
    double      d2h_gbps;      /* device-to-host copy bandwidth, GB/s (1e9 B/s), pinned memory */
    double      h2d_gbps;      /* host-to-device */
    uint64_t    host_mem_bytes;/* host memory per device in the vendor's reference server */
    const char *source;        /* where the figures come from */
} ssi_device_preset;

/* Fraction of the peak FLOP/s that the per-operator time estimate assumes operators reach
 * (model FLOPs utilisation of a well-tuned LLM training step). */
#define SS_PRESET_MFU 0.5

/* The preset named `name` (case-insensitive), or NULL. */
const ssi_device_preset *ssi_preset_find(const char *name);
/* Presets by index, 0 <= i < ssi_preset_count(); NULL past the end. */
int ssi_preset_count(void);
const ssi_device_preset *ssi_preset_get(int i);

#endif /* SS_PRESETS_H */
