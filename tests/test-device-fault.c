/* test-device-fault.c: the fault device wrapper. Every allocation, copy, event and stream site
 * of a small swap scenario fails once in turn; each run must end with that clean status and
 * nothing live (run under AddressSanitizer in CI for leaks). Also: repeat mode, re-arming, bad
 * arguments, and the call sites: counted by the library's file and line, one armed by name,
 * the "fault:" device name with SMARTSWAP_FAULT and SMARTSWAP_FAULT_REPORT.
 */
#include "smartswap-alloc.h"
#include "smartswap-device.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { SCEN_N = 64 << 10 };

/* The scenario: two streams, one event, two device blocks, two host buffers; H2D on s1, then
 * s2 waits and copies D2D and D2H; checks the data. Frees whatever it got on every path. */
static ss_status scenario(ss_device_t *dev) {
    ss_stream_t *s1 = NULL, *s2 = NULL;
    ss_event_t *e = NULL;
    void *d1 = NULL, *d2 = NULL;
    unsigned char *h1 = NULL, *h2 = NULL;
    int done = 0;
    ss_status st;
    if ((st = ss_stream_new(dev, &s1)) != SS_OK) goto out;
    if ((st = ss_stream_new(dev, &s2)) != SS_OK) goto out;
    if ((st = ss_event_new(dev, &e)) != SS_OK) goto out;
    if ((st = ss_mem_alloc(dev, SCEN_N, &d1)) != SS_OK) goto out;
    if ((st = ss_mem_alloc(dev, SCEN_N, &d2)) != SS_OK) goto out;
    if ((st = ss_host_alloc(dev, SCEN_N, (void **)&h1)) != SS_OK) goto out;
    if ((st = ss_host_alloc(dev, SCEN_N, (void **)&h2)) != SS_OK) goto out;
    memset(h1, 0x5A, SCEN_N);
    memset(h2, 0, SCEN_N);
    if ((st = ss_copy_async(dev, s1, d1, h1, SCEN_N, SS_COPY_H2D)) != SS_OK) goto out;
    if ((st = ss_event_record(dev, e, s1)) != SS_OK) goto out;
    if ((st = ss_event_wait(dev, s2, e)) != SS_OK) goto out;
    if ((st = ss_copy_async(dev, s2, d2, d1, SCEN_N, SS_COPY_D2D)) != SS_OK) goto out;
    if ((st = ss_copy_async(dev, s2, h2, d2, SCEN_N, SS_COPY_D2H)) != SS_OK) goto out;
    if ((st = ss_stream_sync(dev, s2)) != SS_OK) goto out;
    if ((st = ss_event_query(dev, e, &done)) != SS_OK) goto out;
    if ((st = ss_event_sync(dev, e)) != SS_OK) goto out;
    if (!done || memcmp(h1, h2, SCEN_N) != 0) st = SS_ERR_CORRUPT;
out:
    /* streams first: freeing a stream waits for the copies already enqueued on it */
    if (s1) ss_stream_free(dev, s1);
    if (s2) ss_stream_free(dev, s2);
    if (e) ss_event_free(dev, e);
    if (d1) ss_mem_free(dev, d1, SCEN_N);
    if (d2) ss_mem_free(dev, d2, SCEN_N);
    if (h1) ss_host_free(dev, h1, SCEN_N);
    if (h2) ss_host_free(dev, h2, SCEN_N);
    return st;
}

static ss_device_t *open_fault(int virt) {
    ss_options o = ss_options_default();
    o.sim_capacity_bytes = 16u << 20;
    o.sim_d2h_gbps = o.sim_h2d_gbps = 8;
    o.sim_virtual_clock = virt;
    ss_device_t *inner = NULL, *f = NULL;
    CHECK_OK(ss_device_open("cpu-sim", &o, &inner));
    CHECK_OK(ss_device_fault(inner, "alloc", 0, 0, SS_ERR_OOM, &f));
    CHECK(f && strcmp(ss_device_get_caps(f)->name, "fault(cpu-sim)") == 0);
    return f;
}

/* Nothing live on the fault device (the inner one is checked by close, which closes both). */
static void check_clean(ss_device_t *f) {
    ss_device_stats s;
    CHECK_OK(ss_device_get_stats(f, &s));
    CHECK_EQ_U64(s.mem_bytes_in_use, 0);
    CHECK_EQ_U64(s.host_bytes_in_use, 0);
    CHECK_EQ_U64(s.mem_allocs, s.mem_frees);
    CHECK_EQ_U64(s.host_allocs, s.host_frees);
}

static void every_site(int virt) {
    static const struct { const char *kind; ss_status fail; int sites; } kinds[] = {
        {"alloc", SS_ERR_OOM, 4},       /* 2 device + 2 host allocations */
        {"copy", SS_ERR_DEVICE, 3},
        {"event", SS_ERR_DEVICE, 5},    /* new, record, wait, query, sync */
        {"stream", SS_ERR_DEVICE, 3},   /* new, new, sync */
    };
    ss_device_t *f = open_fault(virt);
    if (!f) return;
    CHECK_OK(scenario(f));              /* disarmed: passes */
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int failed_runs = 0;
        for (uint64_t nth = 1; nth < 100; nth++) {
            CHECK_OK(ss_device_fault_arm(f, kinds[k].kind, nth, 0, kinds[k].fail));
            ss_status st = scenario(f);
            check_clean(f);
            if (st == SS_OK) break;     /* nth is past the last site of this kind */
            CHECK_MSG(st == kinds[k].fail, "%s site %llu: %s", kinds[k].kind,
                      (unsigned long long)nth, ss_status_str(st));
            failed_runs++;
        }
        CHECK_MSG(failed_runs == kinds[k].sites, "%s: %d sites failed, expected %d",
                  kinds[k].kind, failed_runs, kinds[k].sites);
        CHECK_OK(ss_device_fault_arm(f, kinds[k].kind, 0, 0, SS_OK));
    }
    CHECK_OK(ss_device_close(f));       /* closes the inner device too; ASan checks leaks */
}

static void t_every_site_real(void) { every_site(0); }
static void t_every_site_virtual(void) { every_site(1); }

static void t_repeat(void) {
    ss_device_t *f = open_fault(0);
    if (!f) return;
    void *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(ss_device_fault_arm(f, "alloc", 2, 1, SS_ERR_OOM));
    CHECK_OK(ss_mem_alloc(f, 256, &a));
    CHECK_STATUS(ss_mem_alloc(f, 256, &b), SS_ERR_OOM);
    CHECK_STATUS(ss_host_alloc(f, 256, &c), SS_ERR_OOM);    /* repeat: every later one too */
    CHECK(b == NULL && c == NULL);                           /* out-params untouched */
    CHECK_OK(ss_device_fault_arm(f, "alloc", 0, 0, SS_OK)); /* disarm */
    CHECK_OK(ss_mem_alloc(f, 256, &b));
    /* once: the 1st copy fails, the 2nd works */
    ss_stream_t *s;
    CHECK_OK(ss_stream_new(f, &s));
    CHECK_OK(ss_device_fault_arm(f, "copy", 1, 0, SS_ERR_DEVICE));
    CHECK_STATUS(ss_copy_async(f, s, b, a, 256, SS_COPY_D2D), SS_ERR_DEVICE);
    CHECK_OK(ss_copy_async(f, s, b, a, 256, SS_COPY_D2D));
    CHECK_OK(ss_stream_sync(f, s));
    ss_device_stats st;
    CHECK_OK(ss_device_get_stats(f, &st));
    CHECK_EQ_U64(st.copies[SS_COPY_D2D], 1);                /* failed calls are not counted */
    CHECK_STATUS(ss_device_close(f), SS_ERR_STATE);          /* live blocks and a stream */
    CHECK_OK(ss_stream_free(f, s));
    CHECK_OK(ss_mem_free(f, a, 256));
    CHECK_OK(ss_mem_free(f, b, 256));
    CHECK_OK(ss_device_close(f));
}

static void t_bad_args(void) {
    ss_options o = ss_options_default();
    o.sim_capacity_bytes = 1u << 20;
    ss_device_t *inner, *f = NULL;
    CHECK_OK(ss_device_open("cpu-sim", &o, &inner));
    CHECK_STATUS(ss_device_fault(inner, "bogus", 1, 0, SS_ERR_OOM, &f), SS_ERR_INVALID);
    CHECK_STATUS(ss_device_fault(inner, NULL, 1, 0, SS_ERR_OOM, &f), SS_ERR_INVALID);
    CHECK_STATUS(ss_device_fault(inner, "alloc", 1, 0, SS_OK, &f), SS_ERR_INVALID);
    CHECK_STATUS(ss_device_fault(NULL, "alloc", 1, 0, SS_ERR_OOM, &f), SS_ERR_INVALID);
    CHECK_STATUS(ss_device_fault_arm(inner, "alloc", 1, 0, SS_ERR_OOM), SS_ERR_INVALID);
    CHECK(f == NULL);
    CHECK_OK(ss_device_fault(inner, "event", 1, 0, SS_ERR_DEVICE, &f));
    ss_event_t *e = NULL;
    CHECK_STATUS(ss_event_new(f, &e), SS_ERR_DEVICE);
    CHECK_OK(ss_event_new(f, &e));
    CHECK_STATUS(ss_device_fault_arm(f, "nope", 1, 0, SS_ERR_DEVICE), SS_ERR_INVALID);
    CHECK_OK(ss_event_free(f, e));
    CHECK_OK(ss_device_close(f));
}

/* Sites: the allocator's device allocation is a library site (src/alloc.c:LINE), the test's own
 * calls are "?:0"; arming the library site fails only that site's call. */
static void t_sites(void) {
    ss_options o = ss_options_default();
    o.sim_capacity_bytes = 8u << 20;
    ss_device_t *inner, *f = NULL;
    CHECK_OK(ss_device_open("cpu-sim", &o, &inner));
    CHECK_OK(ss_device_fault(inner, "alloc", 0, 0, SS_ERR_OOM, &f));
    void *p = NULL;
    CHECK_OK(ss_mem_alloc(f, 4096, &p));
    ss_alloc_config ac = ss_alloc_config_default();
    ac.budget_bytes = 1u << 20;
    ac.segment_bytes = 256u << 10;
    ss_alloc_t *al = NULL;
    ss_block_t *b = NULL;
    CHECK_OK(ss_alloc_new(f, &ac, &al));
    CHECK_OK(ss_alloc_malloc(al, 1000, &b));
    ss_fault_site sites[8];
    size_t n = ss_device_fault_sites(f, sites, 8), lib = SIZE_MAX;
    CHECK_EQ_U64(n, 2);
    for (size_t i = 0; i < n && i < 8; i++) {
        if (!strcmp(sites[i].file, "?")) CHECK(sites[i].line == 0 && sites[i].calls == 1);
        else lib = i;
    }
    CHECK_MSG(lib < n && strstr(sites[lib].file, "alloc.c") && sites[lib].line > 0 &&
              !strcmp(sites[lib].kind, "alloc") && sites[lib].calls == 1, "the allocator's site was not listed");
    if (lib < n) {
        char site[300];
        snprintf(site, sizeof site, "%s:%d", sites[lib].file, sites[lib].line);
        CHECK_OK(ss_device_fault_arm_site(f, site, 1, SS_ERR_DEVICE));
        void *q = NULL;
        CHECK_OK(ss_mem_alloc(f, 4096, &q));          /* another site: not failed */
        CHECK_OK(ss_mem_free(f, q, 4096));
        ss_block_t *c = NULL;
        CHECK(ss_alloc_malloc(al, 512u << 10, &c) != SS_OK);   /* a new segment from the armed site */
        CHECK_EQ_U64(ss_device_fault_injected(f), 1);
        if (c) ss_alloc_free(al, c);
    }
    CHECK_STATUS(ss_device_fault_arm_site(f, "no-line", 1, SS_OK), SS_ERR_INVALID);
    CHECK_STATUS(ss_device_fault_arm_site(f, "src/alloc.c:x", 1, SS_OK), SS_ERR_INVALID);
    CHECK_STATUS(ss_device_fault_arm_site(inner, "src/alloc.c:1", 1, SS_OK), SS_ERR_INVALID);
    CHECK_OK(ss_alloc_free(al, b));
    CHECK_OK(ss_alloc_destroy(al));
    CHECK_OK(ss_mem_free(f, p, 4096));
    CHECK_OK(ss_device_close(f));
}

/* "fault:cpu-sim": armed from SMARTSWAP_FAULT (malformed values refused), report at close. */
static void t_fault_name(void) {
    ss_options o = ss_options_default();
    o.sim_capacity_bytes = 1u << 20;
    ss_device_t *f = NULL;
    static const char *bad[] = {"copy", "copy:0", "copy:x", ":3", "alloc:-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("SMARTSWAP_FAULT", bad[i], 1);
        CHECK_MSG(ss_device_open("fault:cpu-sim", &o, &f) == SS_ERR_INVALID, "SMARTSWAP_FAULT=%s accepted", bad[i]);
    }
    char rep[] = "/tmp/ss-fault-report-XXXXXX";
    int fd = mkstemp(rep);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    setenv("SMARTSWAP_FAULT", "alloc:2", 1);
    setenv("SMARTSWAP_FAULT_REPORT", rep, 1);
    CHECK_OK(ss_device_open("fault:cpu-sim", &o, &f));
    unsetenv("SMARTSWAP_FAULT");
    unsetenv("SMARTSWAP_FAULT_REPORT");
    if (!f) return;
    CHECK(strncmp(ss_device_get_caps(f)->name, "fault(cpu-sim", 13) == 0);
    void *a = NULL, *b = NULL;
    CHECK_OK(ss_host_alloc(f, 4096, &a));
    CHECK_STATUS(ss_host_alloc(f, 4096, &b), SS_ERR_OOM);
    CHECK_OK(ss_host_free(f, a, 4096));
    CHECK_OK(ss_device_close(f));
    FILE *r = fopen(rep, "r");
    char text[512] = "";
    if (r) { size_t k = fread(text, 1, sizeof text - 1, r); text[k] = 0; fclose(r); }
    CHECK_MSG(strstr(text, "smartswap-fault-sites v1\ninjected 1\nsite ?:0 alloc 2\n") != NULL, "report: %s", text);
    remove(rep);
    CHECK_STATUS(ss_device_open("fault:nosuch", &o, &f), SS_ERR_NOT_FOUND);
}

int main(void) {
    RUN(t_every_site_real);
    RUN(t_every_site_virtual);
    RUN(t_repeat);
    RUN(t_bad_args);
    RUN(t_sites);
    RUN(t_fault_name);
    return test_summary();
}
