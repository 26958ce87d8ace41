/* cli.h: the smartswap command's subcommands. Each cmd_* gets argv after the subcommand name
 * (argv[0] is the subcommand) and returns the process exit status: 0 success, 1 failure of the
 * work, 2 bad usage. Shared helpers for flags and errors live in cli.c.
 */
#ifndef SS_CLI_H
#define SS_CLI_H

#include "smartswap.h"
#include <stdio.h>

int cmd_info(int argc, char **argv);
int cmd_options(int argc, char **argv);
int cmd_demo_device(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_simulate(int argc, char **argv);

/* Prints "smartswap <cmd>: error: <msg>" and, when hint is non-NULL, "  hint: <hint>" to stderr. */
void cli_error(const char *cmd, const char *hint, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Loads defaults and SMARTSWAP_* variables into *o; on a bad variable prints the error and
 * returns non-zero. Sets the library's log callback to stderr at o->log_level. */
int cli_options_init(const char *cmd, ss_options *o);

/* Flag parsing: if argv[*i] is --name or --name=value, stores the value (from the same argument
 * or the next one) in *value, advances *i past it and returns 1; returns 0 when argv[*i] is
 * another flag; prints an error and returns -1 when the value is missing. */
int cli_flag(int argc, char **argv, int *i, const char *name, const char **value);

/* Parses a size flag value; prints an error naming the flag on failure (returns non-zero). */
int cli_size(const char *cmd, const char *flag, const char *value, uint64_t *out);
/* Parses a double / integer flag value within [lo, hi]; prints an error on failure. */
int cli_double(const char *cmd, const char *flag, const char *value, double lo, double hi, double *out);
int cli_int(const char *cmd, const char *flag, const char *value, long lo, long hi, long *out);
/* --segment SIZE: an allocator segment size, a multiple of 256 bytes (SS_ALLOC_ALIGN). Same
 * return convention as cli_size. */
int cli_segment(const char *cmd, const char *value, uint64_t *out);

/* Prints "<lead><floor> (<n> bytes) = state <s> + the largest working set of one operator <w>
 * (at op <op>, <op_name>); smartswap <other> prints the same": the smallest budget of a profile
 * (ssi_policy_floor), in the words plan and replay share. */
void cli_print_floor(const char *lead, uint64_t floor_bytes, uint64_t state_bytes, uint32_t op,
                     const char *op_name, const char *other);

/* ---- model and workload flags shared by trace gen and simulate (cli-model.c) ---------------- */
struct ssi_workload_config;
typedef struct cli_model {
    const char *model;          /* --model NAME, or NULL */
    uint32_t arch;              /* --arch (ssi_workload_arch) when have_arch */
    int have_arch;
    uint32_t layers, hidden, heads, kv, ffn, vocab;   /* explicit dimensions; 0 = not given */
} cli_model;
/* Consumes the model or workload flag at argv[*i] (--model --arch --layers --hidden --heads
 * --kv-heads --ffn --vocab --batch --seq --dtype-bytes --moe --attention flash|naive, --no-flash
 * (= --attention naive), --loss chunked|full, --loss-chunk TOKENS) into m and c. Returns 1 when
 * consumed (i advanced), 0 when argv[*i] is none of them, -1 after printing an error. */
int cli_model_flag(const char *cmd, int argc, char **argv, int *i, cli_model *m,
                   struct ssi_workload_config *c);
/* Sets c's model from m: the preset, else all explicit dimensions, then explicit dimensions
 * over the preset. Prints an error with a hint and returns 2 when something is missing. */
int cli_model_apply(const char *cmd, const cli_model *m, struct ssi_workload_config *c);
/* The preset names, comma separated, into buf. */
const char *cli_model_presets(char *buf, size_t n);

#endif /* SS_CLI_H */
