/* mem-ss.h: a gpt_mem (mem.h) backed by the smartswap caching allocator (ss_alloc_malloc,
 * include/smartswap-alloc.h) on a smartswap device (cpu-sim now, cuda once the CUDA kernels
 * exist). The device and allocator are owned by the gpt_mem and closed by gpt_mem_destroy.
 */
#ifndef GPT_MEM_SS_H
#define GPT_MEM_SS_H

#include "mem.h"
#include "smartswap-alloc.h"

/* Opens device `name` with opts (NULL: defaults; cpu-sim's capacity is raised to the budget if
 * smaller) and an allocator whose budget is `budget` (0: the device's capacity). Returns 0, or
 * non-zero with the reason in err. */
int gpt_mem_init_ss(gpt_mem *m, const char *name, const ss_options *opts, uint64_t budget, char *err,
                    size_t errlen);

/* The same with the allocator's segment size (ss_alloc_config.segment_bytes, a multiple of 256;
 * 0: the allocator's default, 2 MiB). */
int gpt_mem_init_ss_ex(gpt_mem *m, const char *name, const ss_options *opts, uint64_t budget,
                       uint64_t segment_bytes, char *err, size_t errlen);

/* A segment size in proportion to what a budget leaves for activations, for small models on
 * cpu-sim: the largest power of two at most (budget - state) / 32, between 256 B
 * (SS_ALLOC_ALIGN) and the allocator's default 2 MiB. (A floor of 4 KiB was tried: the test
 * trainer's tightest budgets, 95 KiB above the state, then run out of memory at step 0 by
 * fragmentation; issue 14's granules are the cure.) A budget whose free room is a few MiB, carved into 2 MiB segments,
 * fragments at once (a request that fits the budget finds no segment with room, and no new
 * segment fits); large budgets keep the default. budget 0: 0 (the default). */
uint64_t gpt_mem_segment_for(uint64_t budget, uint64_t state);
/* The segment size a run uses (smartswap train, and the tests that set up runs as it does):
 * below twice the configuration's smallest budget (min_budget, gpt_min_budget_probe; 0 =
 * unknown) exact-size segments (256: one per block, never split), under which any budget at or
 * above the smallest trains; else gpt_mem_segment_for. */
uint64_t gpt_mem_segment_for_run(uint64_t budget, uint64_t state, uint64_t min_budget);
/* The same for a mode: the hybrid (smartswap's swap or recompute, hybrid != 0) gets exact-size
 * segments at every budget. Its rebuilds allocate scratch beside the tensor they rebuild (a
 * rotary q through a projection buffer as large as itself, an RMSNorm through an rstd buffer)
 * that the planner's simulated allocator does not place, and in larger segments that scratch
 * fragments what the plan counted on: measured 2026-12-06, bench-train's shape at 2x (budget
 * 18433024, 0.158 GB/s), 36-80 evictions per Stable step with the 256 KiB segments of
 * gpt_mem_segment_for, none with 256 B ones (and 205 against 250-535 ms a step); swapping only
 * evicted none with either. */
uint64_t gpt_mem_segment_for_mode(uint64_t budget, uint64_t state, uint64_t min_budget, int hybrid);

/* The smartswap policy plans for the budget less a headroom of `headroom` x (budget - state)
 * (smartswap train --plan-headroom). GPT_PLAN_HEADROOM is the default: 0, what was measured
 * necessary (2026-12-02, docs/trainer.md "Plan headroom"): with each operator's peak in the
 * profile and the simulator driving the allocator's own layout, headroom 0 gave no Stable
 * eviction where 0.05 gave none (t_modes_budgets at the state + 1/2 and 1/4, both forms;
 * bench-train --quick at 4x on both links) and as many in t_varying_exact (18 and 20 at 0, 21
 * and 18 at 0.05: new sequences, not the margin); each point of headroom is bytes swapped both
 * ways. Before: 0.05 (2026-11-30, plans from logical-layer times and a one-block state). */
#define GPT_PLAN_HEADROOM 0.0
uint64_t gpt_plan_budget(uint64_t budget, uint64_t state, double headroom);

/* The first failed ss_alloc_free of the backend (SS_OK: none, or not a smartswap gpt_mem). After
 * one, every later allocation of the gpt_mem fails, its err saying so. */
ss_status gpt_mem_ss_free_status(const gpt_mem *m);

/* The allocator and device behind a gpt_mem made by gpt_mem_init_ss (NULL otherwise). */
ss_alloc_t *gpt_mem_ss_alloc(const gpt_mem *m);
ss_device_t *gpt_mem_ss_device(const gpt_mem *m);

#endif /* GPT_MEM_SS_H */
