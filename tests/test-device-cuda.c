/* test-device-cuda.c: the cuda device next to real GPU work: copies overlap a kernel, events order
 * copies after kernels. The kernel is kc_spin (gpt/kernels-cuda.cu: one thread busy for a time by
 * the GPU's global timer) on a caller's cudaStream_t wrapped with ss_stream_wrap; the copies are
 * ss_copy_async on a stream of the device. Runs where a GPU is (bench/gpu-check.sh); without the
 * toolkit or without a GPU every test skips with the reason.
 *
 *  - t_copy_overlaps_kernel: a pinned H2D copy alone takes tc; a spin of 2 tc alone takes ts;
 *    enqueued together on two streams the copy lies inside the spin's interval and the union of
 *    both is below 0.9 (ts + tc): the copy engine ran while the kernel ran;
 *  - t_event_orders_copy: a copy waiting (ss_event_wait) on an event recorded after a spin starts
 *    after the spin ended (device clock), while the same copy without the wait ends before it;
 *  - t_event_orders_data: a kernel writes a buffer after a spin; a D2H copy that waits on the
 *    kernel's event sees the new values; one that does not wait sees the old ones (this is what
 *    makes the first check able to fail).
 */
#include "smartswap-device.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

#ifdef SS_GPT_CUDA
#include "kernels-cuda.h"
#include <cuda_runtime_api.h>

typedef struct env {
    ss_device_t *dev;
    cudaStream_t ks;       /* the kernels' stream */
    ss_stream_t *k, *x;    /* k wraps ks; x is the device's own copy stream */
} env;

static int env_open(env *e, const char **why) {
    static char msg[256];
    memset(e, 0, sizeof *e);
    if (gpt_cuda_init(msg, sizeof msg) != 0) { *why = msg; return 0; }
    ss_options o = ss_options_default();
    if (ss_device_open("cuda", &o, &e->dev) != SS_OK) { *why = "no GPU (cuda does not open)"; return 0; }
    if (cudaStreamCreateWithFlags(&e->ks, cudaStreamNonBlocking) != cudaSuccess) {
        ss_device_close(e->dev);
        *why = "cudaStreamCreateWithFlags failed";
        return 0;
    }
    CHECK_OK(ss_stream_wrap(e->dev, (void *)e->ks, &e->k));
    CHECK_OK(ss_stream_new(e->dev, &e->x));
    gpt_cuda_set_stream((void *)e->ks);
    return e->k && e->x;
}

static void env_close(env *e) {
    char err[256];
    CHECK_MSG(gpt_cuda_sync(err, sizeof err) == 0, "%s", err);
    gpt_cuda_set_stream(NULL);
    CHECK_OK(ss_stream_free(e->dev, e->k));
    CHECK_OK(ss_stream_free(e->dev, e->x));
    cudaStreamDestroy(e->ks);
    CHECK_OK(ss_device_close(e->dev));
}

static ss_event_t *rec(env *e, ss_stream_t *s) {
    ss_event_t *ev = NULL;
    CHECK_OK(ss_event_new(e->dev, &ev));
    CHECK_OK(ss_event_record(e->dev, ev, s));
    return ev;
}

static double at(env *e, ss_event_t *ev) {
    double t = 0;
    CHECK_OK(ss_event_sync(e->dev, ev));
    CHECK_OK(ss_event_time(e->dev, ev, &t));
    return t;
}

static void drop(env *e, ss_event_t **ev, int n) {
    for (int i = 0; i < n; i++) CHECK_OK(ss_event_free(e->dev, ev[i]));
}

#define COPY_BYTES (256u << 20)

static void t_copy_overlaps_kernel(void) {
    env e;
    const char *why = NULL;
    if (!env_open(&e, &why)) TEST_SKIP(why);
    void *h = NULL, *dv = NULL;
    CHECK_OK(ss_host_alloc(e.dev, COPY_BYTES, &h));
    CHECK_OK(ss_mem_alloc(e.dev, COPY_BYTES, &dv));
    if (!h || !dv) { env_close(&e); return; }
    memset(h, 1, COPY_BYTES);
    /* warm-up, then the copy alone */
    CHECK_OK(ss_copy_async(e.dev, e.x, dv, h, COPY_BYTES, SS_COPY_H2D));
    CHECK_OK(ss_stream_sync(e.dev, e.x));
    ss_event_t *c[2];
    c[0] = rec(&e, e.x);
    CHECK_OK(ss_copy_async(e.dev, e.x, dv, h, COPY_BYTES, SS_COPY_H2D));
    c[1] = rec(&e, e.x);
    double tc = at(&e, c[1]) - at(&e, c[0]);
    /* the spin alone */
    double want = tc * 2 > 0.01 ? tc * 2 : 0.01;
    ss_event_t *k[2];
    k[0] = rec(&e, e.k);
    kc_spin(want);
    k[1] = rec(&e, e.k);
    double ts = at(&e, k[1]) - at(&e, k[0]);
    CHECK_MSG(ts >= want * 0.95, "the spin took %.3f ms, asked %.3f ms", ts * 1e3, want * 1e3);
    /* together */
    ss_event_t *a[2], *b[2];
    a[0] = rec(&e, e.k);
    kc_spin(want);
    a[1] = rec(&e, e.k);
    b[0] = rec(&e, e.x);
    CHECK_OK(ss_copy_async(e.dev, e.x, dv, h, COPY_BYTES, SS_COPY_H2D));
    b[1] = rec(&e, e.x);
    double a0 = at(&e, a[0]), a1 = at(&e, a[1]), b0 = at(&e, b[0]), b1 = at(&e, b[1]);
    double lo = a0 < b0 ? a0 : b0, hi = a1 > b1 ? a1 : b1;
    printf("  copy %u MiB alone %.3f ms (%.1f GB/s), spin alone %.3f ms, together %.3f ms "
           "(serial would be %.3f ms); copy inside the spin: %s\n", COPY_BYTES >> 20, tc * 1e3,
           COPY_BYTES / tc / 1e9, ts * 1e3, (hi - lo) * 1e3, (ts + tc) * 1e3,
           b0 >= a0 && b1 <= a1 ? "yes" : "no");
    CHECK_MSG(hi - lo < 0.9 * (ts + tc), "no overlap: %.3f ms together, %.3f + %.3f ms apart",
              (hi - lo) * 1e3, ts * 1e3, tc * 1e3);
    CHECK_MSG(b1 <= a1, "the copy ended %.3f ms after the spin", (b1 - a1) * 1e3);
    drop(&e, c, 2); drop(&e, k, 2); drop(&e, a, 2); drop(&e, b, 2);
    CHECK_OK(ss_mem_free(e.dev, dv, COPY_BYTES));
    CHECK_OK(ss_host_free(e.dev, h, COPY_BYTES));
    env_close(&e);
}

static void t_event_orders_copy(void) {
    env e;
    const char *why = NULL;
    if (!env_open(&e, &why)) TEST_SKIP(why);
    const size_t n = 16u << 20;
    void *h = NULL, *dv = NULL;
    CHECK_OK(ss_host_alloc(e.dev, n, &h));
    CHECK_OK(ss_mem_alloc(e.dev, n, &dv));
    if (!h || !dv) { env_close(&e); return; }
    memset(h, 2, n);
    for (int waits = 1; waits >= 0; waits--) {
        ss_event_t *a[2], *b[2];
        a[0] = rec(&e, e.k);
        kc_spin(0.02);
        a[1] = rec(&e, e.k);
        if (waits) CHECK_OK(ss_event_wait(e.dev, e.x, a[1]));
        b[0] = rec(&e, e.x);
        CHECK_OK(ss_copy_async(e.dev, e.x, dv, h, n, SS_COPY_H2D));
        b[1] = rec(&e, e.x);
        double a1 = at(&e, a[1]), b0 = at(&e, b[0]), b1 = at(&e, b[1]);
        printf("  %s: spin ends at %.3f ms, the copy runs %.3f..%.3f ms\n",
               waits ? "waiting" : "not waiting", a1 * 1e3, b0 * 1e3, b1 * 1e3);
        if (waits) CHECK_MSG(b0 >= a1 - 1e-5, "the copy started %.3f ms before the spin's event", (a1 - b0) * 1e3);
        else CHECK_MSG(b1 < a1, "without a wait the copy still ended after the spin (%.3f ms)", (b1 - a1) * 1e3);
        drop(&e, a, 2); drop(&e, b, 2);
    }
    CHECK_OK(ss_mem_free(e.dev, dv, n));
    CHECK_OK(ss_host_free(e.dev, h, n));
    env_close(&e);
}

static void t_event_orders_data(void) {
    env e;
    const char *why = NULL;
    if (!env_open(&e, &why)) TEST_SKIP(why);
    const size_t cnt = 1u << 20, n = cnt * sizeof(float);
    float *h = NULL, *dst = NULL, *src = NULL;
    CHECK_OK(ss_host_alloc(e.dev, n, (void **)&h));
    CHECK_OK(ss_mem_alloc(e.dev, n, (void **)&dst));
    CHECK_OK(ss_mem_alloc(e.dev, n, (void **)&src));
    if (!h || !dst || !src) { env_close(&e); return; }
    for (int waits = 1; waits >= 0; waits--) {
        for (size_t i = 0; i < cnt; i++) h[i] = 1.0f;
        CHECK_OK(ss_copy_async(e.dev, e.x, dst, h, n, SS_COPY_H2D));
        CHECK_OK(ss_copy_async(e.dev, e.x, src, h, n, SS_COPY_H2D));
        CHECK_OK(ss_stream_sync(e.dev, e.x));
        kc_spin(0.02);
        kc_accumulate(dst, src, cnt);   /* dst = 2 */
        ss_event_t *w = rec(&e, e.k);
        if (waits) CHECK_OK(ss_event_wait(e.dev, e.x, w));
        CHECK_OK(ss_copy_async(e.dev, e.x, h, dst, n, SS_COPY_D2H));
        CHECK_OK(ss_stream_sync(e.dev, e.x));
        size_t twos = 0;
        for (size_t i = 0; i < cnt; i++) twos += h[i] == 2.0f;
        printf("  %s: %zu of %zu values written by the kernel\n", waits ? "waiting" : "not waiting", twos, cnt);
        if (waits) CHECK_EQ_U64(twos, cnt);
        else CHECK_MSG(twos == 0, "without a wait the copy saw %zu new values", twos);
        CHECK_OK(ss_event_sync(e.dev, w));
        drop(&e, &w, 1);
    }
    CHECK_OK(ss_mem_free(e.dev, dst, n));
    CHECK_OK(ss_mem_free(e.dev, src, n));
    CHECK_OK(ss_host_free(e.dev, h, n));
    env_close(&e);
}
#else
static void t_copy_overlaps_kernel(void) { TEST_SKIP("built without the CUDA toolkit (USE_CUDA off)"); }
static void t_event_orders_copy(void) { TEST_SKIP("built without the CUDA toolkit (USE_CUDA off)"); }
static void t_event_orders_data(void) { TEST_SKIP("built without the CUDA toolkit (USE_CUDA off)"); }
#endif

int main(void) {
    RUN(t_copy_overlaps_kernel);
    RUN(t_event_orders_copy);
    RUN(t_event_orders_data);
    return test_summary();
}
