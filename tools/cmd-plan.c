/* cmd-plan.c: placeholder until `smartswap plan` is written (being built now). */
#include "cli.h"

int cmd_plan(int argc, char **argv) {
    (void)argc; (void)argv;
    cli_error("plan", NULL, "not available yet in this build");
    return 1;
}
