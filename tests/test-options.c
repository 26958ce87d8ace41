/* test-options.c: the options table (defaults, environment, names, bad values), size parsing
 * and formatting, status strings, and the small shared utilities (PRNG, hashing, atomic writes).
 */
#include "test.h"
#include "internal.h"

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static void t_parse_size(void) {
    uint64_t v;
    CHECK_OK(ss_parse_size("1048576", &v)); CHECK_EQ_U64(v, 1048576);
    CHECK_OK(ss_parse_size("512MiB", &v));  CHECK_EQ_U64(v, 512ull << 20);
    CHECK_OK(ss_parse_size("24GiB", &v));   CHECK_EQ_U64(v, 24ull << 30);
    CHECK_OK(ss_parse_size("1.5GB", &v));   CHECK_EQ_U64(v, 1500000000ull);
    CHECK_OK(ss_parse_size("64k", &v));     CHECK_EQ_U64(v, 65536);
    CHECK_OK(ss_parse_size("2M", &v));      CHECK_EQ_U64(v, 2ull << 20);
    CHECK_OK(ss_parse_size("100B", &v));    CHECK_EQ_U64(v, 100);
    CHECK_OK(ss_parse_size("0", &v));       CHECK_EQ_U64(v, 0);
    CHECK_STATUS(ss_parse_size("-1", &v), SS_ERR_INVALID);
    CHECK_STATUS(ss_parse_size("12XB", &v), SS_ERR_INVALID);
    CHECK_STATUS(ss_parse_size("GiB", &v), SS_ERR_INVALID);
    CHECK_STATUS(ss_parse_size("", &v), SS_ERR_INVALID);
    CHECK_STATUS(ss_parse_size("1.5", &v), SS_ERR_INVALID);
    CHECK_STATUS(ss_parse_size("99999999999TiB", &v), SS_ERR_INVALID);
    CHECK_STATUS(ss_parse_size("5MiBx", &v), SS_ERR_INVALID);
    CHECK_STATUS(ss_parse_size(NULL, &v), SS_ERR_INVALID);
    char buf[32];
    CHECK(strcmp(ss_format_size(3ull << 29, buf, sizeof buf), "1.50 GiB") == 0);
    CHECK(strcmp(ss_format_size(17, buf, sizeof buf), "17 B") == 0);
}

static void t_defaults_and_set(void) {
    ss_options o = ss_options_default();
    char err[256];
    CHECK_EQ_INT(o.warmup_iters, 2);
    CHECK(strcmp(o.device, "cpu-sim") == 0);
    CHECK_EQ_U64(o.min_swap_bytes, 64 << 10);
    CHECK_EQ_INT(o.release_mode, SS_RELEASE_MODE_PREDICTED);
    CHECK_OK(ss_options_set(&o, "budget", "1.5GiB", err, sizeof err));
    CHECK_EQ_U64(o.budget_bytes, 3ull << 29);
    CHECK_OK(ss_options_set(&o, "release_mode", "stock", err, sizeof err));
    CHECK_EQ_INT(o.release_mode, SS_RELEASE_MODE_STOCK);
    CHECK_OK(ss_options_set(&o, "virtual-clock", "yes", err, sizeof err));
    CHECK_EQ_INT(o.sim_virtual_clock, 1);
    ss_options keep = o;
    CHECK_STATUS(ss_options_set(&o, "warmup", "-3", err, sizeof err), SS_ERR_INVALID);
    CHECK(strstr(err, "warmup") != NULL && strstr(err, "0..1000") != NULL);
    CHECK_STATUS(ss_options_set(&o, "sim-d2h-gbps", "fast", err, sizeof err), SS_ERR_INVALID);
    CHECK_STATUS(ss_options_set(&o, "no-such-option", "1", err, sizeof err), SS_ERR_NOT_FOUND);
    CHECK(strstr(err, "no-such-option") != NULL);
    CHECK(memcmp(&keep, &o, sizeof o) == 0);   /* failures change nothing */
}

static void t_env(void) {
    ss_options o = ss_options_default();
    char err[256];
    setenv("SMARTSWAP_BUDGET", "8GiB", 1);
    setenv("SMARTSWAP_DISABLE", "true", 1);
    CHECK_OK(ss_options_env(&o, err, sizeof err));
    CHECK_EQ_U64(o.budget_bytes, 8ull << 30);
    CHECK_EQ_INT(o.disable, 1);
    setenv("SMARTSWAP_PLAN_CACHE", "0", 1);  /* below its minimum of 1 */
    ss_options before = o;
    CHECK_STATUS(ss_options_env(&o, err, sizeof err), SS_ERR_INVALID);
    CHECK(strstr(err, "SMARTSWAP_PLAN_CACHE") != NULL);
    CHECK(memcmp(&before, &o, sizeof o) == 0);  /* all or nothing */
    unsetenv("SMARTSWAP_BUDGET");
    unsetenv("SMARTSWAP_DISABLE");
    unsetenv("SMARTSWAP_PLAN_CACHE");
}

static void t_info_table(void) {
    ss_option_info inf;
    int n = 0;
    ss_options o = ss_options_default();
    for (; ss_options_info(n, &inf) == SS_OK; n++) {
        char val[64];
        CHECK(inf.name && inf.env && inf.help && inf.def && inf.range);
        CHECK(strncmp(inf.env, "SMARTSWAP_", 10) == 0);
        CHECK_OK(ss_options_value(&o, n, val, sizeof val));
    }
    CHECK(n >= 15);
    CHECK_STATUS(ss_options_info(n, &inf), SS_ERR_NOT_FOUND);
}

static void t_status_and_util(void) {
    for (int s = 0; s < SS_STATUS_COUNT; s++) CHECK(strcmp(ss_status_str((ss_status)s), "unknown status") != 0);
    CHECK(strcmp(ss_status_str((ss_status)999), "unknown status") == 0);
    ssi_rng a, b;
    ssi_rng_seed(&a, 42); ssi_rng_seed(&b, 42);
    int same = 1;
    for (int i = 0; i < 100; i++) same &= ssi_rng_next(&a) == ssi_rng_next(&b);
    CHECK(same);
    double u = ssi_rng_unit(&a);
    CHECK(u >= 0 && u < 1);
    CHECK(ssi_hash_str("matmul") != ssi_hash_str("matmuk"));
    CHECK(ssi_hash_fold(1, 2) != ssi_hash_fold(2, 1));   /* order matters */
}

static void t_atomic_write(void) {
    char path[] = "/tmp/ss-test-atomic-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_OK(ssi_write_file_atomic(path, "hello\n", 6));
    FILE *f = fopen(path, "r");
    char buf[16] = {0};
    CHECK(f && fread(buf, 1, sizeof buf, f) == 6 && strcmp(buf, "hello\n") == 0);
    if (f) fclose(f);
    unlink(path);
    CHECK_STATUS(ssi_write_file_atomic("/nonexistent-dir/x", "a", 1), SS_ERR_IO);
}

int main(void) {
    RUN(t_parse_size);
    RUN(t_defaults_and_set);
    RUN(t_env);
    RUN(t_info_table);
    RUN(t_status_and_util);
    RUN(t_atomic_write);
    return test_summary();
}
