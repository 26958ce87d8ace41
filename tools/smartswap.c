/* smartswap.c: the smartswap command: one binary, one subcommand per job. Each subcommand lives
 * in tools/cmd-*.c and documents its own flags in its usage text (`smartswap CMD --help`).
 */
#include "cli.h"

#include <string.h>

typedef struct command {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} command;

static const command commands[] = {
    {"info", cmd_info, "version, build features and the devices found"},
    {"options", cmd_options, "every option with its environment variable, default and range"},
    {"demo-device", cmd_demo_device, "a short demonstration of the device layer on cpu-sim"},
    {"trace", cmd_trace, "trace gen | trace stats: synthetic profiles of training iterations"},
    {"plan", cmd_plan, "plan swaps for a profile under a budget"},
    {"replay", cmd_replay, "run a profile on a device with real buffers, swapping and checking every read"},
    {"train", cmd_train, "train the reference Llama-style model (gpt/) under a memory budget"},
    {"simulate", cmd_simulate, "four memory strategies side by side, and how far each one scales"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(f, "smartswap %s: swap activations to host memory, hidden behind compute\n\n", ss_version_str());
    fprintf(f, "usage: smartswap COMMAND [ARGS]   (smartswap COMMAND --help for its flags)\n\n");
    for (size_t i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nEvery option can also be set as a SMARTSWAP_* environment variable: smartswap options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) { printf("smartswap %s\n", ss_version_str()); return 0; }
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "smartswap: error: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
