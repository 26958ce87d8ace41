/* fuzz-options.c: libFuzzer harness of the option and size strings (src/options.c:
 * ss_options_set, ss_parse_size, ss_format_size). The first byte picks an option of the table
 * (ss_options_info), the rest is the value. Properties: an accepted value prints
 * (ss_options_value) to text that is accepted again and prints the same; a size that parses
 * formats without overflow. Seeds: tests/fuzz/options/ (values from docs/options.md). */
#include "fuzz-util.h"
#include "smartswap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet, nopts;
    if (!quiet) {
        ss_log_set(NULL, NULL, SS_LOG_ERROR);
        ss_option_info info;
        while (ss_options_info(nopts, &info) == SS_OK) nopts++;
        quiet = 1;
    }
    if (size < 1 || nopts == 0) return 0;
    int i = data[0] % nopts;
    char *v = malloc(size);
    if (!v) return 0;
    memcpy(v, data + 1, size - 1);
    v[size - 1] = 0;
    uint64_t bytes = 0;
    if (ss_parse_size(v, &bytes) == SS_OK) {
        char buf[64];
        ss_format_size(bytes, buf, sizeof buf);
        FUZZ_ASSERT(memchr(buf, 0, sizeof buf) != NULL, "format_size unterminated");
    }
    ss_option_info info;
    ss_options_info(i, &info);
    ss_options o = ss_options_default();
    char err[512], a[256], b[256];
    if (ss_options_set(&o, info.name, v, err, sizeof err) == SS_OK) {
        FUZZ_ASSERT(ss_options_value(&o, i, a, sizeof a) == SS_OK, "value of an accepted option");
        ss_options o2 = ss_options_default();
        ss_status st = ss_options_set(&o2, info.name, a, err, sizeof err);
        if (st) fprintf(stderr, "option %s: \"%s\" accepted, its printed value \"%s\" is not: %s\n", info.name, v, a, err);
        FUZZ_ASSERT(st == SS_OK, "an option's printed value is refused");
        FUZZ_ASSERT(ss_options_value(&o2, i, b, sizeof b) == SS_OK && !strcmp(a, b), "an option's value changes when read back");
    }
    free(v);
    return 0;
}
