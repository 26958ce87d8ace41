/* timeline.c: an iteration's compute, D2H and H2D lanes as a Chrome trace event file (the JSON
 * object format with "traceEvents": complete events "ph":"X" in microseconds, plus metadata
 * events naming the processes and threads), which Perfetto and chrome://tracing open. Process 1
 * is what the executor recorded ("actual"), process 2 what the simulator predicted ("planned");
 * threads 0, 1, 2 are the compute, d2h and h2d lanes.
 */
#include "exec.h"

#include <stdio.h>

ss_status ssi_timeline_add(ssi_timeline *tl, uint32_t lane, uint32_t id, double t0, double t1,
                           const char *name) {
    if (!tl || lane >= SSI_LANE_COUNT) return SS_ERR_INVALID;
    if (ssi_grow(&tl->spans, &tl->cap, tl->n + 1, sizeof *tl->spans)) return SS_ERR_HOST_OOM;
    ssi_span *s = &tl->spans[tl->n++];
    s->lane = lane;
    s->id = id;
    s->t0 = t0;
    s->t1 = t1 < t0 ? t0 : t1;
    ssi_fmt(s->name, sizeof s->name, "%s", name ? name : "");
    return SS_OK;
}

void ssi_timeline_clear(ssi_timeline *tl) {
    if (tl) tl->n = 0;
}

void ssi_timeline_free(ssi_timeline *tl) {
    if (!tl) return;
    free(tl->spans);
    memset(tl, 0, sizeof *tl);
}

typedef struct sbuf { char *p; size_t n, cap; int oom; } sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) SS_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) { b->oom = 1; return; }
        if (b->p && b->n + (size_t)w < b->cap) { b->n += (size_t)w; return; }
        if (ssi_grow(&b->p, &b->cap, b->n + (size_t)w + 4096, 1)) { b->oom = 1; return; }
    }
}

/* Names are ours (operator names, "out t12"): escape quotes, backslashes and controls anyway. */
static void sb_str(sbuf *b, const char *s) {
    sb_printf(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') sb_printf(b, "\\%c", c);
        else if (c < 0x20) sb_printf(b, "\\u%04x", c);
        else sb_printf(b, "%c", c);
    }
    sb_printf(b, "\"");
}

static const char *const lane_names[SSI_LANE_COUNT] = {"compute", "d2h", "h2d"};

static void put_process(sbuf *b, int pid, const char *pname, const ssi_timeline *tl, double t0,
                        int *first) {
    sb_printf(b, "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
              "\"args\":{\"name\":\"%s\"}}", *first ? "" : ",", pid, pname);
    *first = 0;
    for (int l = 0; l < SSI_LANE_COUNT; l++)
        sb_printf(b, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                  "\"args\":{\"name\":\"%s\"}}", pid, l, lane_names[l]);
    for (size_t i = 0; i < tl->n; i++) {
        const ssi_span *s = &tl->spans[i];
        sb_printf(b, ",\n{\"name\":");
        sb_str(b, s->name);
        sb_printf(b, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,"
                  "\"args\":{\"id\":%u}}", lane_names[s->lane], pid, s->lane,
                  (s->t0 - t0) * 1e6, (s->t1 - s->t0) * 1e6, s->id);
    }
}

ss_status ssi_timeline_write(const char *path, const ssi_timeline *actual, double t0_actual,
                             const ssi_timeline *planned) {
    if (!path || !actual) return SS_ERR_INVALID;
    sbuf b = {0};
    int first = 1;
    sb_printf(&b, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"format\":\"smartswap-timeline\","
              "\"version\":1},\"traceEvents\":[");
    put_process(&b, 1, "actual", actual, t0_actual, &first);
    if (planned) put_process(&b, 2, "planned", planned, 0, &first);
    sb_printf(&b, "\n]}\n");
    ss_status st = b.oom ? SS_ERR_HOST_OOM : ssi_write_file_atomic(path, b.p, b.n);
    free(b.p);
    return st;
}
