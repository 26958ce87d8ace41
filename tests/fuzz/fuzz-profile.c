/* fuzz-profile.c: libFuzzer harness of the profile-file reader (src/trace.c,
 * docs/trace-format.md). Each input is read twice, from memory (ssi_profile_read_buffer) and
 * through the file reader (ssi_profile_read: its own line buffering); both must agree on
 * accepting it, and an accepted profile must write back (ssi_profile_to_buffer) to bytes that
 * read again. Seeds: tests/fuzz/profile/ (smartswap trace gen -o). */
#include "fuzz-util.h"
#include "trace.h"
#include "profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    ss_profile *p = NULL;
    ss_status st = ssi_profile_read_buffer((const char *)data, size, "fuzz", &p, err, sizeof err);
    char path[64];
    int fd = mem_file(data, size, path, sizeof path);
    if (fd >= 0) {
        ss_profile *q = NULL;
        ss_status st2 = ssi_profile_read(path, &q, err, sizeof err);
        FUZZ_ASSERT((st == SS_OK) == (st2 == SS_OK), "buffer and file readers disagree");
        ssi_profile_free(q);
        close(fd);
    }
    if (st == SS_OK) {
        char *text = NULL;
        size_t len = 0;
        if (ssi_profile_to_buffer(p, &text, &len, err, sizeof err) == SS_OK) {
            ss_profile *r = NULL;
            ss_status st3 = ssi_profile_read_buffer(text, len, "fuzz-rewritten", &r, err, sizeof err);
            if (st3) fprintf(stderr, "re-read: %s\n", err);
            FUZZ_ASSERT(st3 == SS_OK, "a profile written from an accepted one does not read back");
            ssi_profile_free(r);
        }
        free(text);
    }
    ssi_profile_free(p);
    return 0;
}
