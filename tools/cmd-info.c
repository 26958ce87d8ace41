/* cmd-info.c: `smartswap info` (version, build features, devices) and `smartswap options`
 * (the options table with current values, from defaults and SMARTSWAP_* variables).
 */
#include "cli.h"
#include "smartswap-device.h"

#include <string.h>

int cmd_info(int argc, char **argv) {
    ss_options o;
    (void)argv;
    if (argc > 1) {
        printf("usage: smartswap info\n  prints the version, the build features and the devices found\n");
        return strcmp(argv[1], "--help") == 0 ? 0 : 2;
    }
    if (cli_options_init("info", &o)) return 1;
    char devs[256] = "", absent[512] = "";
    ss_status st = ss_device_list(devs, sizeof devs, absent, sizeof absent);
    printf("smartswap %s\n", ss_version_str());
    printf("features: %s\n", ss_build_features()[0] ? ss_build_features() : "(none)");
    if (st != SS_OK) {
        cli_error("info", NULL, "listing devices failed: %s", ss_status_str(st));
        return 1;
    }
    printf("devices:  %s\n", devs);
    if (absent[0]) printf("absent:   %s\n", absent);
    char *save = NULL;
    for (char *name = strtok_r(devs, " ", &save); name; name = strtok_r(NULL, " ", &save)) {
        ss_device_t *dev;
        if (ss_device_open(name, &o, &dev) != SS_OK) { printf("  %-10s (could not open)\n", name); continue; }
        const ss_device_caps *c = ss_device_get_caps(dev);
        char tot[32];
        printf("  %-10s %s, %s, d2h %.3g GB/s, h2d %.3g GB/s%s\n", c->name, c->description,
               ss_format_size(c->total_bytes, tot, sizeof tot), c->d2h_gbps, c->h2d_gbps,
               c->virtual_clock ? ", virtual clock" : "");
        ss_device_close(dev);
    }
    return 0;
}

int cmd_options(int argc, char **argv) {
    ss_options o;
    int markdown = argc > 1 && strcmp(argv[1], "--markdown") == 0;
    if (argc > 1 && !markdown) {
        printf("usage: smartswap options [--markdown]\n"
               "  every option: name (--name on commands that take it), environment variable,\n"
               "  current value (defaults < SMARTSWAP_* variables), accepted range, meaning\n");
        return strcmp(argv[1], "--help") == 0 ? 0 : 2;
    }
    if (cli_options_init("options", &o)) return 1;
    if (markdown) printf("| option | environment | default | accepted | meaning |\n|---|---|---|---|---|\n");
    ss_option_info inf;
    for (int i = 0; ss_options_info(i, &inf) == SS_OK; i++) {
        char val[128];
        ss_options_value(&o, i, val, sizeof val);
        if (markdown)
            printf("| `%s` | `%s` | %s | %s | %s |\n", inf.name, inf.env, inf.def, inf.range, inf.help);
        else
            printf("%-16s %-28s = %-10s [%s]\n    %s\n", inf.name, inf.env, val, inf.range, inf.help);
    }
    return 0;
}
