/* cmd-demo-device.c: placeholder until `smartswap demo-device` is written (being built now). */
#include "cli.h"

int cmd_demo_device(int argc, char **argv) {
    (void)argc; (void)argv;
    cli_error("demo-device", NULL, "not available yet in this build");
    return 1;
}
