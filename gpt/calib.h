/* calib.h: cpu-sim settings of the swapping modes that depend on the workload: the link
 * bandwidth calibrated per run (docs/performance-model.md, "Calibrating a run") and the
 * smallest saved tensor worth a copy (options.min_swap_bytes) scaled to the model.
 *
 * Calibration runs a few steps of the very schedule the run will train (same configuration,
 * seed, batches and sequence lengths) on a fresh model, in mode none, on cpu-sim without a
 * budget, with every saved block handed to a pass-through smartswap context, and measures per
 * step the distinct bytes saved for backward (B) and the wall time (T). The bandwidth is then
 * ss_calib_bandwidth(ss_calib_default(), B, T, scale): the link makes moving every saved byte
 * take `ratio x scale` times the compute, as for Llama-2-7B on an H200 over PCIe Gen5.
 */
#ifndef GPT_CALIB_H
#define GPT_CALIB_H

#include "data.h"
#include "model.h"
#include "train.h"

#include "smartswap-device.h"

typedef struct gpt_calib {
    int    steps;          /* steps measured (the first step, which creates the optimizer
                              state and warms the caches, is run but not measured) */
    double saved_bytes;    /* mean distinct bytes saved for backward per measured step */
    double compute_s;      /* mean wall time per measured step, forward + backward + update */
    double ratio;          /* the reference ratio (copy / compute of the reference pairing) */
    double scale;          /* options.sim_ratio_scale used */
    double gbps;           /* the bandwidth that gives this workload ratio x scale */
} gpt_calib;

/* Runs steps 0 .. n-1 (n >= 2) of schedule s for configuration c on data d, measures steps
 * 1 .. n-1, and fills *out (gbps for `scale`). Threads: whatever OpenMP is set to. 0, or
 * non-zero with the reason in err (the device, the context, a step). Leaves nothing behind. */
int gpt_calib_measure(const gpt_config *c, const gpt_data *d, const gpt_schedule *s, uint64_t seed, int n,
                      double scale, gpt_calib *out, char *err, size_t errlen);

/* The reference ratio of ss_calib_default() (copy time / compute time per token). */
double gpt_calib_ref_ratio(void);

/* The trainer's default options.min_swap_bytes: the bytes of one (B, seq_min) row-block of
 * width C (a hidden-state activation at the shortest sequence, B * seq_min * C float32
 * divided by 4, i.e. B * seq_min * C bytes; half that with bf16 activations, whose elements are
 * 2 bytes), capped at the library's default (64 KiB). Per-row
 * statistics (B, T) stay resident; hidden states, Q/K/V, attention probabilities, MLP
 * activations and the busier experts' batches are candidates. */
uint64_t gpt_min_swap_default(const gpt_config *c, int seq_min);

#endif /* GPT_CALIB_H */
