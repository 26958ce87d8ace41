/* cmd-trace.c: placeholder until `smartswap trace` is written (being built now). */
#include "cli.h"

int cmd_trace(int argc, char **argv) {
    (void)argc; (void)argv;
    cli_error("trace", NULL, "not available yet in this build");
    return 1;
}
