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

/* The allocator and device behind a gpt_mem made by gpt_mem_init_ss (NULL otherwise). */
ss_alloc_t *gpt_mem_ss_alloc(const gpt_mem *m);
ss_device_t *gpt_mem_ss_device(const gpt_mem *m);

#endif /* GPT_MEM_SS_H */
