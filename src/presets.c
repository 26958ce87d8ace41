/* presets.c: the device presets of presets.h. Every figure names its source; docs/policy.md
 * repeats the table. Link bandwidths are what a pinned-memory cudaMemcpyAsync typically reaches
 * (about 80-85 % of the PCIe link's nominal 64 GB/s for Gen5 x16 and 32 GB/s for Gen4 x16, as
 * CUDA's bandwidthTest / nvbandwidth report on these systems), not the nominal link rate.
 */
#include "presets.h"

#include <strings.h>

static const ssi_device_preset presets[] = {
    /* H200 SXM: 141 GB HBM3e (nvidia-smi: 143771 MiB); bf16 dense 989 TFLOP/s (the datasheet's
     * 1979 TFLOP/s is with 2:4 sparsity); PCIe Gen5 x16 to the host. DGX H200: 2 TB of system
     * memory for 8 GPUs = 256 GB each.
     * Sources: NVIDIA H200 Tensor Core GPU datasheet (2024); NVIDIA DGX H200 datasheet. */
    {"h200", "NVIDIA H200 SXM 141GB, PCIe Gen5 x16", 143771ull << 20, 989e12, 52.0, 52.0,
     256ull * 1000000000ull,
     "NVIDIA H200 datasheet (141 GB HBM3e, 989 TFLOP/s dense bf16); PCIe Gen5 x16 (64 GB/s "
     "nominal each way, ~52 GB/s pinned); DGX H200 datasheet (2 TB host for 8 GPUs)"},
    /* H100 SXM5 80GB: 80 GB HBM3 (nvidia-smi: 81559 MiB); bf16 dense 989 TFLOP/s; PCIe Gen5 x16.
     * DGX H100: 2 TB for 8 GPUs. Sources: NVIDIA H100 Tensor Core GPU datasheet; DGX H100
     * datasheet. */
    {"h100", "NVIDIA H100 SXM5 80GB, PCIe Gen5 x16", 81559ull << 20, 989e12, 52.0, 52.0,
     256ull * 1000000000ull,
     "NVIDIA H100 datasheet (80 GB HBM3, 989 TFLOP/s dense bf16); PCIe Gen5 x16 (64 GB/s "
     "nominal each way, ~52 GB/s pinned); DGX H100 datasheet (2 TB host for 8 GPUs)"},
    /* A100 SXM4 80GB: 80 GB HBM2e (nvidia-smi: 81920 MiB); bf16 dense 312 TFLOP/s; PCIe Gen4
     * x16 (32 GB/s nominal, ~25 GB/s pinned). DGX A100 (640 GB model): 2 TB for 8 GPUs.
     * Sources: NVIDIA A100 Tensor Core GPU datasheet; DGX A100 datasheet. */
    {"a100-80g", "NVIDIA A100 SXM4 80GB, PCIe Gen4 x16", 81920ull << 20, 312e12, 25.0, 25.0,
     256ull * 1000000000ull,
     "NVIDIA A100 datasheet (80 GB HBM2e, 312 TFLOP/s dense bf16); PCIe Gen4 x16 (32 GB/s "
     "nominal each way, ~25 GB/s pinned); DGX A100 640GB datasheet (2 TB host for 8 GPUs)"},
    /* A100 SXM4 40GB: 40 GB HBM2 (nvidia-smi: 40960 MiB); DGX A100 320GB: 1 TB for 8 GPUs. */
    {"a100-40g", "NVIDIA A100 SXM4 40GB, PCIe Gen4 x16", 40960ull << 20, 312e12, 25.0, 25.0,
     128ull * 1000000000ull,
     "NVIDIA A100 datasheet (40 GB HBM2, 312 TFLOP/s dense bf16); PCIe Gen4 x16 (~25 GB/s "
     "pinned); DGX A100 320GB datasheet (1 TB host for 8 GPUs)"},
    /* GH200 (96 GB HBM3): NVLink-C2C to the Grace CPU, 450 GB/s each way; 480 GB LPDDR5X.
     * Source: NVIDIA GH200 Grace Hopper Superchip datasheet. Copy rate taken as ~80 % of the
     * nominal C2C rate. */
    {"gh200", "NVIDIA GH200 96GB, NVLink-C2C", 96ull * 1000000000ull, 989e12, 360.0, 360.0,
     480ull * 1000000000ull,
     "NVIDIA GH200 datasheet (96 GB HBM3, 989 TFLOP/s dense bf16, NVLink-C2C 900 GB/s total = "
     "450 GB/s each way, ~360 GB/s assumed achieved, 480 GB LPDDR5X)"},
};

int ssi_preset_count(void) { return (int)(sizeof presets / sizeof presets[0]); }

const ssi_device_preset *ssi_preset_get(int i) {
    return i >= 0 && i < ssi_preset_count() ? &presets[i] : NULL;
}

const ssi_device_preset *ssi_preset_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < ssi_preset_count(); i++)
        if (strcasecmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}
