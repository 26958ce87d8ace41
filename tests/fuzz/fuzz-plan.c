/* fuzz-plan.c: libFuzzer harness of the plan-file reader (src/plan.c, docs/trace-format.md
 * "Plan files"). Each input is parsed from memory (ssi_plan_parse) and through the file reader
 * (ssi_plan_read); both must agree, and an accepted plan must format (ssi_plan_format) to text
 * that parses to an equal plan (ssi_plan_equal). Seeds: tests/fuzz/plan/ (smartswap plan -o). */
#include "fuzz-util.h"
#include "plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    ss_plan *p = NULL;
    ss_status st = ssi_plan_parse((const char *)data, size, "fuzz", &p, err, sizeof err);
    char path[64];
    int fd = mem_file(data, size, path, sizeof path);
    if (fd >= 0) {
        ss_plan *q = NULL;
        ss_status st2 = ssi_plan_read(path, &q, err, sizeof err);
        FUZZ_ASSERT((st == SS_OK) == (st2 == SS_OK), "memory and file readers disagree");
        if (q) ssi_plan_free(q);
        close(fd);
    }
    if (st == SS_OK) {
        char *text = NULL;
        size_t len = 0;
        if (ssi_plan_format(p, &text, &len) == SS_OK) {
            ss_plan *r = NULL;
            ss_status st3 = ssi_plan_parse(text, len, "fuzz-rewritten", &r, err, sizeof err);
            if (st3) fprintf(stderr, "re-parse: %s\n", err);
            FUZZ_ASSERT(st3 == SS_OK, "a plan formatted from an accepted one does not parse");
            FUZZ_ASSERT(ssi_plan_equal(p, r), "a plan changes across format + parse");
            ssi_plan_free(r);
        }
        free(text);
    }
    if (p) ssi_plan_free(p);
    return 0;
}
