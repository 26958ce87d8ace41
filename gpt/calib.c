/* calib.c: per-run cpu-sim settings of the swapping modes (calib.h). */
#include "calib.h"

#include "mem-ss.h"
#include "tape-swap.h"

#include <stdio.h>
#include <string.h>

double gpt_calib_ref_ratio(void) {
    ss_calib_ref r = ss_calib_default();
    return (r.saved_bytes_per_token / (r.link_gbps * 1e9)) / (r.flops_per_token / r.device_flops);
}

int gpt_calib_measure(const gpt_config *c, const gpt_data *d, const gpt_schedule *s, uint64_t seed, int n,
                      double scale, gpt_calib *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (n < 2) { snprintf(err, errlen, "calibration needs at least 2 steps (got %d)", n); return 1; }
    gpt_mem mem;
    gpt_ssswap sw;
    gpt_model m;
    gpt_batch_buf bb = {NULL, NULL};
    int rc = 1, have_sw = 0, have_m = 0;
    if (gpt_mem_init_ss(&mem, "cpu-sim", NULL, 0, err, errlen)) return 1;
    if (gpt_ssswap_init(&sw, &mem, NULL)) { snprintf(err, errlen, "calibration: %s", sw.err); goto out; }
    have_sw = 1;
    gpt_hooks h = gpt_hooks_ssswap(&sw);
    if (gpt_model_init(&m, c, &mem, &h, GPT_MODE_NONE, seed)) {
        snprintf(err, errlen, "calibration: %s", m.errmsg);
        goto out;
    }
    have_m = 1;
    if (gpt_batch_buf_init(&bb, s)) { snprintf(err, errlen, "calibration: out of host memory"); goto out; }
    double bytes = 0, secs = 0;
    for (int st = 0; st < n; st++) {
        float loss;
        double t0 = gpt_now_s();
        if (gpt_train_step(&m, d, s, st, &bb, &loss)) {
            snprintf(err, errlen, "calibration step %d: %s", st, m.errmsg);
            goto out;
        }
        double t = gpt_now_s() - t0;
        if (sw.err[0]) { snprintf(err, errlen, "calibration step %d: %s", st, sw.err); goto out; }
        if (st == 0) continue;
        bytes += (double)sw.block_bytes;
        secs += t;
    }
    out->steps = n - 1;
    out->saved_bytes = bytes / (n - 1);
    out->compute_s = secs / (n - 1);
    out->ratio = gpt_calib_ref_ratio();
    out->scale = scale;
    ss_calib_ref ref = ss_calib_default();
    ss_status st = ss_calib_bandwidth(&ref, out->saved_bytes, out->compute_s, scale, &out->gbps);
    if (st) {
        snprintf(err, errlen, "ss_calib_bandwidth (%.0f bytes, %.6f s, scale %g): %s", out->saved_bytes,
                 out->compute_s, scale, ss_status_str(st));
        goto out;
    }
    rc = 0;
out:
    gpt_batch_buf_free(&bb);
    if (have_m) gpt_model_free(&m);
    if (have_sw) gpt_ssswap_free(&sw);
    gpt_mem_destroy(&mem);
    return rc;
}

uint64_t gpt_min_swap_default(const gpt_config *c, int seq_min) {
    uint64_t lib = ss_options_default().min_swap_bytes;
    uint64_t b = (uint64_t)c->batch * (uint64_t)(seq_min > 0 ? seq_min : c->seq) * (uint64_t)c->hidden;
    if (c->dtype == GPT_DTYPE_BF16) b /= 2;   /* a quarter of a hidden state of 2-byte elements */
    if (b < 256) b = 256;
    return b < lib ? b : lib;
}
