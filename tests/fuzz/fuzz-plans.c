/* fuzz-plans.c: libFuzzer harness of the plan-cache file reader (ss_ctx_plans_load,
 * src/api-plans.c; include/smartswap-plans.h). Each input is loaded from an in-memory file into
 * a fresh context (built-in options, no device); an accepted file must save again and that file
 * must load into another fresh context with the same count. Seeds: tests/fuzz/plans/
 * (smartswap train --save-plan). */
#include "fuzz-util.h"
#include "smartswap.h"
#include "smartswap-plans.h"

static ss_ctx_t *new_ctx(void) {
    ss_ctx_config cfg = ss_ctx_config_default();
    ss_ctx_t *ctx = NULL;
    if (ss_ctx_new(&cfg, &ctx)) abort();
    return ctx;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) { ss_log_set(NULL, NULL, SS_LOG_ERROR); quiet = 1; }
    char path[64], err[512];
    int fd = mem_file(data, size, path, sizeof path);
    if (fd < 0) return 0;
    ss_ctx_t *ctx = new_ctx();
    uint32_t n = 0;
    ss_status st = ss_ctx_plans_load(ctx, path, &n, err, sizeof err);
    close(fd);
    if (st == SS_OK && n > 0) {
        char out[] = "/tmp/ss-fuzz-plans-XXXXXX";
        int ofd = mkstemp(out);
        if (ofd >= 0) {
            close(ofd);
            uint32_t saved = 0, again = 0;
            FUZZ_ASSERT(ss_ctx_plans_save(ctx, out, &saved, err, sizeof err) == SS_OK, "saving loaded plans");
            ss_ctx_t *c2 = new_ctx();
            ss_status st2 = ss_ctx_plans_load(c2, out, &again, err, sizeof err);
            if (st2) fprintf(stderr, "re-load: %s\n", err);
            FUZZ_ASSERT(st2 == SS_OK && again == saved, "saved plans do not load back");
            ss_ctx_free(c2);
            remove(out);
        }
    }
    ss_ctx_free(ctx);
    return 0;
}
