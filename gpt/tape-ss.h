/* tape-ss.h: gpt_hooks (tape.h) that report every iteration, operator, save, load and release
 * to a smartswap framework context (ss_ctx_* in include/smartswap.h) while the saved buffers
 * stay resident in a gpt_keep store. This is the profiling half of the smartswap mode: the
 * context hashes the operator sequence, runs its stage machine (warmup -> genpolicy -> stable)
 * and reports per iteration. The context is created in framework-memory mode
 * (SS_MEM_FRAMEWORK: the trainer keeps owning its buffers), so nothing is swapped.
 *
 * Next step, when the executor lands: create the context with SS_MEM_SMARTSWAP, the device and
 * the allocator of gpt_mem_init_ss, and save with ss_ctx_save_block (the block then belongs to
 * the context until release) instead of keeping a reference.
 */
#ifndef GPT_TAPE_SS_H
#define GPT_TAPE_SS_H

#include "smartswap.h"
#include "tape.h"

typedef struct gpt_ssprof {
    gpt_keep        keep;
    gpt_hooks       inner;       /* the keep store's hooks */
    ss_ctx_t       *ctx;
    const char     *names[32];   /* interned operator names (static strings) */
    uint32_t        ids[32];
    int             nnames;
    uint64_t       *sh;          /* keep handle - 1 -> context handle */
    size_t          nsh;
    ss_iter_report  last;        /* of the last finished iteration */
    int             failed;      /* a context call failed: profiling stopped (training goes on) */
    char            err[256];
} gpt_ssprof;

/* Creates the context (opts: NULL for defaults) and the keep store on mem. 0 or non-zero with a
 * message in p->err. */
int gpt_ssprof_init(gpt_ssprof *p, gpt_mem *mem, const ss_options *opts);
gpt_hooks gpt_hooks_ssprof(gpt_ssprof *p);
void gpt_ssprof_free(gpt_ssprof *p);

#endif /* GPT_TAPE_SS_H */
