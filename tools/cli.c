/* cli.c: helpers every subcommand of the smartswap command uses: errors with hints, flags,
 * numbers and sizes, options from the environment.
 */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void cli_error(const char *cmd, const char *hint, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "smartswap %s: error: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (hint) fprintf(stderr, "  hint: %s\n", hint);
}

int cli_options_init(const char *cmd, ss_options *o) {
    char err[256];
    *o = ss_options_default();
    if (ss_options_env(o, err, sizeof err) != SS_OK) {
        cli_error(cmd, "fix or unset the variable; 'smartswap options' lists every option", "%s", err);
        return 1;
    }
    ss_log_set(ss_log_stderr, NULL, (ss_log_level)o->log_level);
    return 0;
}

int cli_flag(int argc, char **argv, int *i, const char *name, const char **value) {
    const char *a = argv[*i];
    if (a[0] != '-' || a[1] != '-') return 0;
    size_t n = strlen(name);
    if (strncmp(a + 2, name, n) != 0) return 0;
    if (a[2 + n] == '=') { *value = a + 3 + n; (*i)++; return 1; }
    if (a[2 + n] != '\0') return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "smartswap: error: --%s needs a value\n", name);
        return -1;
    }
    *value = argv[*i + 1];
    *i += 2;
    return 1;
}

int cli_size(const char *cmd, const char *flag, const char *value, uint64_t *out) {
    if (ss_parse_size(value, out) != SS_OK) {
        cli_error(cmd, "sizes are bytes or a number with a unit: 512MiB, 24GiB, 1.5GB",
                  "--%s: '%s' is not a size", flag, value);
        return 1;
    }
    return 0;
}

int cli_segment(const char *cmd, const char *value, uint64_t *out) {
    if (cli_size(cmd, "segment", value, out)) return 1;
    if (*out < 256 || *out % 256) {
        cli_error(cmd, "give a multiple of 256 bytes, e.g. --segment 256 or --segment 2MiB",
                  "--segment: %s is not a multiple of 256 bytes", value);
        return 1;
    }
    return 0;
}

int cli_double(const char *cmd, const char *flag, const char *value, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double d = strtod(value, &end);
    if (errno || end == value || *end || !(d >= lo && d <= hi)) {
        cli_error(cmd, NULL, "--%s: '%s' is not a number in [%g, %g]", flag, value, lo, hi);
        return 1;
    }
    *out = d;
    return 0;
}

int cli_int(const char *cmd, const char *flag, const char *value, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno || end == value || *end || v < lo || v > hi) {
        cli_error(cmd, NULL, "--%s: '%s' is not an integer in [%ld, %ld]", flag, value, lo, hi);
        return 1;
    }
    *out = v;
    return 0;
}

void cli_print_floor(const char *lead, uint64_t floor_bytes, uint64_t state_bytes, uint32_t op,
                     const char *op_name, const char *other) {
    char f[32], s[32], w[32];
    printf("%ssmallest budget %s (%" PRIu64 " bytes) = state %s + the largest working set of one operator %s "
           "(at op %u, %s); smartswap %s prints the same\n",
           lead, ss_format_size(floor_bytes, f, sizeof f), floor_bytes, ss_format_size(state_bytes, s, sizeof s),
           ss_format_size(floor_bytes > state_bytes ? floor_bytes - state_bytes : 0, w, sizeof w), op, op_name,
           other);
}
