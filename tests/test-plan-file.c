/* test-plan-file.c: plan files (src/plan.c, docs/trace-format.md): round trip of hand-made and
 * generated plans through text and through a file, atomic writes, and malformed files rejected
 * with "FILE:LINE: what is wrong", never a crash.
 */
#include "plan.h"
#include "policy.h"
#include "test.h"

#include <stdio.h>
#include <unistd.h>

static ss_plan *sample(void) {
    ss_plan *p;
    if (ssi_plan_new(&p)) return NULL;
    uint32_t a, b;
    ssi_plan_intern(p, "aten::mm", &a);
    ssi_plan_intern(p, "aten::silu \"quoted\"\n", &b);
    p->seq_hash = 0xFEDCBA9876543210ull;
    p->size_sig = 0x8000000000000001ull;
    p->nops = 100;
    p->ck_every = 16;
    p->nck = 6;
    p->ck = calloc(6, sizeof *p->ck);
    for (int i = 0; i < 6; i++) p->ck[i] = 0xFFFFFFFFFFFFFFFFull - (uint64_t)i * 0x123456789ull;
    p->budget_bytes = 24ull << 30;
    p->peak_before = 40ull << 30;
    p->peak_after = (24ull << 30) - 512;
    p->swapped_bytes = 3ull << 30;
    p->host_bytes = 2ull << 30;
    p->stall_s = 0.0123456789012345;
    p->iter_s = 1.0 / 3.0;
    p->feasible = 1;
    p->min_budget_bytes = 20ull << 30;
    ssi_fmt(p->desc, sizeof p->desc, "test plan, \"quotes\" and \\ backslash");
    for (uint32_t i = 0; i < 3; i++) {
        ss_plan_entry e;
        memset(&e, 0, sizeof e);
        e.name = i % 2 ? b : a;
        e.site = 0xA000000000000000ull + i;
        e.dtype = SS_DTYPE_BF16;
        e.ndim = 3;
        e.shape[0] = 4; e.shape[1] = 4096; e.shape[2] = 4096 + i;
        e.bytes = 4ull * 4096 * (4096 + i) * 2;
        e.ordinal = i;
        e.tensor = 10 + i;
        e.out_op = 10 + i;
        e.free_op = 20 + i;
        e.in_op = 70 + i;
        e.use_op = 80 + i;
        e.t_out_done = 0.1 + i / 7.0;
        e.t_in_done = 0.25 + i / 3.0;
        if (i == 2) {   /* a recompute entry: dropped after its save, rebuilt at its use */
            e.action = SS_PLAN_RECOMPUTE;
            e.free_op = e.out_op + 1;
            e.in_op = e.use_op;
            e.t_out_done = e.t_in_done = 0;
        }
        ssi_plan_add_entry(p, &e);
    }
    return p;
}

static void t_roundtrip_text(void) {
    ss_plan *p = sample(), *q = NULL;
    char *text = NULL, err[256];
    size_t len = 0;
    CHECK_OK(ssi_plan_format(p, &text, &len));
    CHECK(text && len == strlen(text));
    CHECK(strncmp(text, "{\"format\":\"smartswap-plan\",\"version\":2", 38) == 0);
    CHECK_OK(ssi_plan_parse(text, len, "mem.plan", &q, err, sizeof err));
    CHECK(q && ssi_plan_equal(p, q));
    /* formatting again gives the same bytes */
    char *t2 = NULL;
    size_t l2 = 0;
    if (q) CHECK_OK(ssi_plan_format(q, &t2, &l2));
    CHECK(t2 && l2 == len && memcmp(text, t2, len) == 0);
    free(t2);
    free(text);
    ssi_plan_free(q);
    ssi_plan_free(p);
}

/* A version 1 file (no "action") still loads, every entry a swap; a version 2 file keeps the
 * recompute entry. */
static void t_version1_loads(void) {
    ss_plan *p = sample(), *q = NULL;
    char *text = NULL, err[256];
    size_t len = 0;
    CHECK_OK(ssi_plan_format(p, &text, &len));
    CHECK(p->entries[2].action == SS_PLAN_RECOMPUTE);
    CHECK(text && strstr(text, "\"action\":\"recompute\"") && strstr(text, "\"action\":\"swap\""));
    /* strip the actions and call it version 1 */
    char *v1 = malloc(len + 1), *o = v1;
    for (const char *c = text; *c;) {
        if (!strncmp(c, ",\"action\":\"swap\"", 16)) { c += 16; continue; }
        if (!strncmp(c, ",\"action\":\"recompute\"", 21)) { c += 21; continue; }
        *o++ = *c++;
    }
    *o = 0;
    char *ver = strstr(v1, "\"version\":2");
    CHECK(ver != NULL);
    if (ver) ver[10] = '1';
    CHECK(strstr(v1, "action") == NULL);
    CHECK_OK(ssi_plan_parse(v1, strlen(v1), "v1.plan", &q, err, sizeof err));
    CHECK(q && q->nentries == 3);
    for (uint32_t i = 0; q && i < q->nentries; i++) CHECK(q->entries[i].action == SS_PLAN_SWAP);
    CHECK(q && !ssi_plan_equal(p, q));   /* the recompute entry became a swap */
    ssi_plan_free(q);
    free(v1);
    free(text);
    ssi_plan_free(p);
}

static void t_roundtrip_file(void) {
    char dir[] = "/tmp/ss-plan-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/a.plan", dir);
    ss_plan *p = sample(), *q = NULL;
    CHECK_OK(ssi_plan_write(p, path));
    CHECK_OK(ssi_plan_read(path, &q, err, sizeof err));
    CHECK(q && ssi_plan_equal(p, q));
    ssi_plan_free(q);
    /* an empty plan (no entries, no checkpoints) */
    ss_plan *e;
    ssi_plan_new(&e);
    e->nops = 5;
    CHECK_OK(ssi_plan_write(e, path));
    CHECK_OK(ssi_plan_read(path, &q, err, sizeof err));
    CHECK(q && ssi_plan_equal(e, q));
    ssi_plan_free(q);
    ssi_plan_free(e);
    /* a write into a missing folder fails and leaves nothing */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/missing/b.plan", dir);
    CHECK_STATUS(ssi_plan_write(p, bad), SS_ERR_IO);
    CHECK(access(bad, F_OK) != 0);
    /* an invalid plan is refused before anything is written */
    char other[300];
    snprintf(other, sizeof other, "%s/c.plan", dir);
    p->entries[1].free_op = p->entries[1].out_op;
    CHECK_STATUS(ssi_plan_write(p, other), SS_ERR_INVALID);
    CHECK(access(other, F_OK) != 0);
    CHECK_STATUS(ssi_plan_read(other, &q, err, sizeof err), SS_ERR_IO);
    CHECK(strstr(err, "cannot open") != NULL);
    ssi_plan_free(p);
    unlink(path);
    rmdir(dir);
}

/* A plan from the policy round-trips too. */
static void t_roundtrip_policy(void) {
    ss_profile *pr;
    ssi_profile_new(&pr);
    uint32_t id;
    ssi_profile_intern(pr, "layer", &id);
    for (uint32_t i = 0; i < 40; i++) {
        ss_prof_op o = {0};
        o.name = id;
        o.phase = i < 20 ? SS_PHASE_FWD : SS_PHASE_BWD;
        o.site = i;
        ssi_profile_add_op(pr, &o, NULL);
    }
    pr->iter_seconds = 4;
    for (uint32_t l = 0; l < 10; l++) {
        ss_prof_tensor t = {0};
        t.bytes = 1 << 20;
        t.dtype = SS_DTYPE_F32;
        t.ndim = 1;
        t.shape[0] = 1 << 18;
        t.producer = 2 * l;
        t.release = 39 - 2 * l;
        t.flags = SS_TENSOR_SAVED;
        uint32_t ti;
        ssi_profile_add_tensor(pr, &t, &ti);
        ssi_profile_add_use(pr, ti, 39 - 2 * l);
    }
    CHECK_OK(ssi_profile_finalize(pr));
    ssi_policy_config c;
    memset(&c, 0, sizeof c);
    c.budget_bytes = 5 << 20;
    c.d2h_bps = c.h2d_bps = 100e6;
    c.time.mode = SSI_TIME_LAYER;
    c.ck_every = 8;
    ss_plan *p = NULL, *q = NULL;
    char err[256], *text = NULL;
    size_t len;
    CHECK_OK(ssi_policy_plan(pr, &c, &p, NULL, err, sizeof err));
    CHECK(p && p->nentries > 0 && p->nck > 0);
    CHECK_OK(ssi_plan_format(p, &text, &len));
    CHECK_OK(ssi_plan_parse(text, len, "policy.plan", &q, err, sizeof err));
    CHECK(q && ssi_plan_equal(p, q));
    free(text);
    ssi_plan_free(p);
    ssi_plan_free(q);
    ssi_profile_free(pr);
}

/* Replaces the first occurrence of `from` in s by `to` (into a malloc'ed copy). */
static char *subst(const char *s, const char *from, const char *to) {
    const char *at = strstr(s, from);
    if (!at) return NULL;
    size_t n = strlen(s) - strlen(from) + strlen(to);
    char *r = malloc(n + 1);
    size_t k = (size_t)(at - s);
    memcpy(r, s, k);
    strcpy(r + k, to);
    strcat(r, at + strlen(from));
    return r;
}

static void expect_bad(const char *text, size_t len, const char *want_line, const char *want) {
    ss_plan *q = NULL;
    char err[300] = "";
    ss_status st = ssi_plan_parse(text, len, "bad.plan", &q, err, sizeof err);
    CHECK_MSG(st == SS_ERR_FORMAT, "status %d for a file that should fail with \"%s\"", st, want);
    CHECK(q == NULL);
    CHECK_MSG(strstr(err, want_line) == err, "error \"%s\" does not start with \"%s\"", err, want_line);
    CHECK_MSG(strstr(err, want) != NULL, "error \"%s\" does not say \"%s\"", err, want);
    ssi_plan_free(q);
}

static void t_malformed(void) {
    ss_plan *p = sample();
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(ssi_plan_format(p, &text, &len));
    ssi_plan_free(p);
    if (!text) return;
    struct { const char *from, *to, *line, *want; } cases[] = {
        {"\"format\":\"smartswap-plan\"", "\"format\":\"smartswap-profile\"", "bad.plan:1:", "not a smartswap plan"},
        {"\"version\":2", "\"version\":3", "bad.plan:1:", "re-run"},
        {"\"version\":2", "\"version\":\"2\"", "bad.plan:1:", "\"version\" is not a number"},
        {"\"action\":\"swap\"", "\"action\":\"keep\"", "bad.plan:2:", "\"action\" must be"},
        {"\"nops\":100", "\"nops\":-1", "bad.plan:1:", "\"nops\""},
        {"\"seq_hash\":\"0x", "\"seq_hash\":\"1x", "bad.plan:1:", "hex"},
        {"\"budget_bytes\":", "\"budget_byte\":", "bad.plan:1:", "missing field \"budget_bytes\""},
        {"\"feasible\":true", "\"feasible\":1", "bad.plan:1:", "feasible"},
        {"\"entry\":1", "\"entry\":2", "bad.plan:3:", "entry 2 where entry 1"},
        {"\"dtype\":\"bf16\"", "\"dtype\":\"bf17\"", "bad.plan:2:", "dtype"},
        {"\"free_op\":21", "\"free_op\":11", "bad.plan:3:", "out_op < free_op"},
        {"\"use_op\":82", "\"use_op\":100", "bad.plan:4:", "use_op"},
        {"\"out_op\":12", "\"out_op\":5", "bad.plan:4:", "sorted"},
        {"\"name\":1", "\"name\":9", "bad.plan:3:", "name id 9"},
        {"\"shape\":[4,4096,4096]", "\"shape\":[4,-1,4096]", "bad.plan:2:", "dimension 1"},
        {"\"bytes\":134217728", "\"bytes\":0", "bad.plan:2:", "\"bytes\" is 0"},
        {"\"t_in_done\":0.25", "\"t_in_done\":-0.25", "bad.plan:2:", "t_in_done"},
        {"\"checkpoints\":6,\"entries\"", "\"checkpoints\":7,\"entries\"", "bad.plan:1:", "expected 6"},
        {"{\"end\":\"smartswap-plan\",\"entries\":3", "{\"end\":\"smartswap-plan\",\"entries\":2", "bad.plan:6:", "truncated"},
        {"{\"entry\":2", "[1,2,3]\n{\"entry\":2", "bad.plan:4:", "not a JSON object"},
        {"{\"entry\":2", "{\"entry\":2,", "bad.plan:4:", "not valid JSON"},
        {"{\"ck\":0", "{\"what\":0", "bad.plan:5:", "neither an entry"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *t = subst(text, cases[i].from, cases[i].to);
        CHECK_MSG(t != NULL, "case %zu: '%s' not in the sample", i, cases[i].from);
        if (t) expect_bad(t, strlen(t), cases[i].line, cases[i].want);
        free(t);
    }
    /* truncations at every line boundary and in the middle of lines never pass or crash */
    for (size_t cut = 0; cut + 1 < len; cut += 7) {
        ss_plan *q = NULL;
        char err[300];
        ss_status st = ssi_plan_parse(text, cut, "cut.plan", &q, err, sizeof err);
        CHECK_MSG(st == SS_ERR_FORMAT && q == NULL, "cut at %zu accepted", cut);
        CHECK(strncmp(err, "cut.plan:", 9) == 0);
        ssi_plan_free(q);
    }
    /* text after the end line; an empty file */
    size_t n2 = len + 32;
    char *more = malloc(n2 + 1);
    snprintf(more, n2 + 1, "%s{\"entry\":0}\n", text);
    expect_bad(more, strlen(more), "bad.plan:7:", "after the end");
    free(more);
    expect_bad("", 0, "bad.plan:1:", "empty");
    expect_bad("\n\n", 2, "bad.plan:1:", "empty");
    free(text);
    /* a NUL byte in a file */
    char path[] = "/tmp/ss-nul-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(write(fd, "{\"format\"\0}", 11) == 11);
        close(fd);
        ss_plan *q = NULL;
        char err[300];
        CHECK_STATUS(ssi_plan_read(path, &q, err, sizeof err), SS_ERR_FORMAT);
        CHECK(strstr(err, "NUL") != NULL);
        unlink(path);
    }
}

int main(void) {
    RUN(t_version1_loads);
    RUN(t_roundtrip_text);
    RUN(t_roundtrip_file);
    RUN(t_roundtrip_policy);
    RUN(t_malformed);
    return test_summary();
}
