/* test-trace.c: profile files and the JSON Lines helpers (src/trace.c): round trips give identical
 * structures; every kind of malformed file (truncated, wrong version or format, wrong types,
 * absurd numbers, missing fields, binary garbage, random corruption) gives SS_ERR_FORMAT with
 * "FILE:LINE:" and never a crash; writers are atomic; large files read fast. The malformed files
 * are generated here from a small valid one, each by one edit.
 */
#include "test.h"
#include "trace.h"
#include "workload.h"

#include <math.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[256];

static void path_in_tmp(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", tmpdir, name); }

/* A small hand-made profile with awkward values: 64-bit hashes, sizes above 2^53, doubles that
 * need 17 digits, names that need escaping, no-use and never-released tensors, 0 and 8 dims. */
static ss_profile *awkward_profile(void) {
    ss_profile *p;
    if (ssi_profile_new(&p)) return NULL;
    snprintf(p->desc, sizeof p->desc, "awkward \"desc\" \\ with\ttabs and \xc3\xa9");
    p->seq_hash = 0xFFFFFFFFFFFFFFFFull;
    p->size_sig = 0x8000000000000001ull;
    p->base_bytes = ((uint64_t)1 << 53) + 1;
    p->iter_seconds = 1.0 / 3.0;
    const char *names[] = {"matmul", "we\"ird\\name\n", "\xe2\x88\x91 sum", "x"};
    uint32_t id[4];
    for (int i = 0; i < 4; i++) CHECK_OK(ssi_profile_intern(p, names[i], &id[i]));
    for (uint32_t j = 0; j < 6; j++) {
        ss_prof_op o = {0};
        o.name = id[j % 4];
        o.phase = j % 4;
        o.site = 0x0123456789ABCDEFull * (j + 1);
        o.mem_after = ((uint64_t)1 << 55) + j * 12345;
        o.flops = j == 0 ? 0.1 : j == 1 ? 5e-324 : j == 2 ? 1e30 : (double)j / 7.0;
        o.seconds = j * 1e-7 + 1.0 / 3.0;
        CHECK_OK(ssi_profile_add_op(p, &o, NULL));
    }
    ss_prof_tensor t = {0};
    t.bytes = 1; t.dtype = SS_DTYPE_BF16; t.ndim = 0; t.producer = 0; t.release = SS_NONE;
    t.flags = SS_TENSOR_SAVED;
    CHECK_OK(ssi_profile_add_tensor(p, &t, NULL));
    t.bytes = ((uint64_t)1 << 59) + 7; t.dtype = SS_DTYPE_I64; t.ndim = 8;
    for (int d = 0; d < 8; d++) t.shape[d] = (int64_t)1 << (d * 6);
    t.producer = 1; t.release = 5; t.flags = SS_TENSOR_SAVED | SS_TENSOR_NOSWAP;
    CHECK_OK(ssi_profile_add_tensor(p, &t, NULL));
    t.bytes = 4096; t.dtype = SS_DTYPE_F32; t.ndim = 2; t.shape[0] = 32; t.shape[1] = 32;
    t.producer = 2; t.release = 2; t.flags = 0;
    CHECK_OK(ssi_profile_add_tensor(p, &t, NULL));
    CHECK_OK(ssi_profile_add_use(p, 1, 4));
    CHECK_OK(ssi_profile_add_use(p, 1, 1));
    CHECK_OK(ssi_profile_add_use(p, 1, 3));
    CHECK_OK(ssi_profile_add_use(p, 0, 5));
    CHECK_OK(ssi_profile_finalize(p));
    return p;
}

static void t_round_trip_buffer(void) {
    ss_profile *p = awkward_profile(), *q = NULL;
    if (!p) return;
    char *buf = NULL, *buf2 = NULL, err[300];
    size_t len = 0, len2 = 0;
    CHECK_OK(ssi_profile_to_buffer(p, &buf, &len, err, sizeof err));
    CHECK_OK(ssi_profile_read_buffer(buf, len, "awkward.jsonl", &q, err, sizeof err));
    if (q) {
        CHECK_MSG(ssi_profile_equal(p, q), "read back differs");
        CHECK_EQ_U64(q->seq_hash, 0xFFFFFFFFFFFFFFFFull);
        CHECK_EQ_U64(q->tensors[1].bytes, ((uint64_t)1 << 59) + 7);
        CHECK(q->ops[1].flops == 5e-324);
        CHECK(!strcmp(q->names[1], "we\"ird\\name\n"));
        /* writing it again gives the same bytes */
        CHECK_OK(ssi_profile_to_buffer(q, &buf2, &len2, err, sizeof err));
        CHECK(len == len2 && buf2 && !memcmp(buf, buf2, len));
    }
    /* the header says what the file is */
    CHECK(buf && !strncmp(buf, "{\"format\":\"smartswap-profile\",\"version\":1,", 42));
    free(buf);
    free(buf2);
    ssi_profile_free(p);
    ssi_profile_free(q);
}

static void t_round_trip_file(void) {
    static const char *models[] = {"gpt2-124m", "llama-3.2-1b", "llama-2-70b"};
    for (int m = 0; m < 3; m++) {
        ssi_workload_config c;
        ssi_workload_default(&c);
        CHECK_OK(ssi_workload_preset(&c, models[m]));
        c.batch = 2; c.seq = 256;
        if (m == 1) { c.flash = 0; }
        if (m == 2) { c.moe_experts = 8; c.moe_topk = 2; }
        ss_profile *p = NULL, *q = NULL;
        char err[300], path[300];
        CHECK_OK(ssi_workload_generate(&c, &p, NULL, err, sizeof err));
        if (!p) continue;
        path_in_tmp(path, sizeof path, "rt.jsonl");
        CHECK_OK(ssi_profile_write(p, path, err, sizeof err));
        CHECK_OK(ssi_profile_read(path, &q, err, sizeof err));
        CHECK_MSG(q && ssi_profile_equal(p, q), "%s: read back differs (%s)", models[m], err);
        ssi_profile_free(p);
        ssi_profile_free(q);
    }
}

static void t_write_atomic(void) {
    ss_profile *p = awkward_profile();
    if (!p) return;
    char err[300], path[300];
    /* into a folder that does not exist: SS_ERR_IO, nothing created */
    path_in_tmp(path, sizeof path, "no-such-dir/p.jsonl");
    CHECK_STATUS(ssi_profile_write(p, path, err, sizeof err), SS_ERR_IO);
    CHECK(strstr(err, "no-such-dir") != NULL);
    CHECK(access(path, F_OK) != 0);
    /* an unfinalized profile is refused and the old file stays as it was */
    path_in_tmp(path, sizeof path, "keep.jsonl");
    CHECK_OK(ssi_profile_write(p, path, err, sizeof err));
    struct stat st0, st1;
    CHECK(stat(path, &st0) == 0);
    CHECK_OK(ssi_profile_add_use(p, 0, 3));
    CHECK_STATUS(ssi_profile_write(p, path, err, sizeof err), SS_ERR_INVALID);
    CHECK(strstr(err, "finalize") != NULL);
    CHECK(stat(path, &st1) == 0 && st1.st_size == st0.st_size);
    /* an inconsistent profile is refused too */
    CHECK_OK(ssi_profile_finalize(p));
    p->tensors[0].producer = 99;
    CHECK_STATUS(ssi_profile_write(p, path, err, sizeof err), SS_ERR_INVALID);
    CHECK(strstr(err, "producer") != NULL);
    ss_profile *q = NULL;
    CHECK_OK(ssi_profile_read(path, &q, err, sizeof err));
    ssi_profile_free(q);
    /* no temporary left behind */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c tmp >/dev/null", tmpdir);
    CHECK(system(cmd) != 0);
    ssi_profile_free(p);
}

/* ---- malformed files ------------------------------------------------------------------- */

/* The valid base file: header, 2 names, 3 ops, 2 tensors (one line each). */
static const char *base_lines[] = {
    "{\"format\":\"smartswap-profile\",\"version\":1,\"desc\":\"t\",\"seq_hash\":\"0x00000000000000ab\","
    "\"size_sig\":\"0x0000000000000001\",\"base_bytes\":1000,\"iter_seconds\":0.5,\"names\":2,\"ops\":3,"
    "\"tensors\":2,\"uses\":3}",
    "{\"name\":0,\"str\":\"matmul\"}",
    "{\"name\":1,\"str\":\"relu\"}",
    "{\"op\":0,\"name\":0,\"phase\":\"fwd\",\"site\":\"0x0000000000000001\",\"mem\":2000,\"flops\":10,\"seconds\":0.1}",
    "{\"op\":1,\"name\":1,\"phase\":\"fwd\",\"site\":\"0x0000000000000002\",\"mem\":3000,\"flops\":0,\"seconds\":0.1}",
    "{\"op\":2,\"name\":0,\"phase\":\"bwd\",\"site\":\"0x0000000000000003\",\"mem\":1000,\"flops\":20,\"seconds\":0.3}",
    "{\"tensor\":0,\"bytes\":1000,\"dtype\":\"bf16\",\"shape\":[10,50],\"producer\":0,\"uses\":[1,2],\"release\":2,\"saved\":true,\"noswap\":false}",
    "{\"tensor\":1,\"bytes\":1000,\"dtype\":\"f32\",\"shape\":[250],\"producer\":1,\"uses\":[2],\"release\":null,\"saved\":false,\"noswap\":false}",
};
#define NBASE ((int)(sizeof base_lines / sizeof base_lines[0]))

/* The base file with line `at` (1-based) replaced by `repl` (NULL: removed); at 0 = unchanged. */
static char *make_file(int at, const char *repl, size_t *len) {
    size_t cap = 1;
    for (int i = 0; i < NBASE; i++) cap += strlen(i + 1 == at ? (repl ? repl : "") : base_lines[i]) + 1;
    char *b = malloc(cap);
    size_t n = 0;
    for (int i = 0; i < NBASE; i++) {
        const char *l = (i + 1 == at) ? repl : base_lines[i];
        if (!l) continue;
        n += (size_t)snprintf(b + n, cap - n, "%s\n", l);
    }
    *len = n;
    return b;
}

/* Reads text as "bad.jsonl"; checks SS_ERR_FORMAT, "bad.jsonl:LINE:" (line 0: no line) and that
 * the message contains `want`. */
static void expect_bad(const char *what, const char *text, size_t len, unsigned line, const char *want) {
    ss_profile *p = NULL;
    char err[400] = "";
    ss_status st = ssi_profile_read_buffer(text, len, "bad.jsonl", &p, err, sizeof err);
    CHECK_MSG(st == SS_ERR_FORMAT, "%s: status %s (%s)", what, ss_status_str(st), err);
    CHECK_MSG(p == NULL, "%s: profile returned", what);
    char prefix[64];
    if (line) snprintf(prefix, sizeof prefix, "bad.jsonl:%u: ", line);
    else snprintf(prefix, sizeof prefix, "bad.jsonl: ");
    CHECK_MSG(!strncmp(err, prefix, strlen(prefix)), "%s: message '%s' does not start with '%s'", what, err, prefix);
    CHECK_MSG(!want || strstr(err, want), "%s: message '%s' lacks '%s'", what, err, want);
    ssi_profile_free(p);
}

static void expect_bad_line(const char *what, int at, const char *repl, unsigned line, const char *want) {
    size_t len;
    char *b = make_file(at, repl, &len);
    expect_bad(what, b, len, line, want);
    free(b);
}

static void t_base_is_valid(void) {
    size_t len;
    char *b = make_file(0, NULL, &len);
    ss_profile *p = NULL;
    char err[300] = "";
    CHECK_OK(ssi_profile_read_buffer(b, len, "base.jsonl", &p, err, sizeof err));
    CHECK_MSG(p != NULL, "%s", err);
    if (p) {
        CHECK_EQ_INT(p->nops, 3);
        CHECK_EQ_INT(p->ntensors, 2);
        CHECK_EQ_U64(p->seq_hash, 0xab);
        CHECK_EQ_INT(p->tensors[1].release, SS_NONE);
        CHECK_EQ_INT(p->tensors[0].nuses, 2);
    }
    ssi_profile_free(p);
    free(b);
}

static void t_truncated(void) {
    size_t len;
    char *b = make_file(0, NULL, &len);
    expect_bad("empty", b, 0, 0, "empty file");
    /* cut inside each line in turn: the cut line is reported */
    size_t off = 0;
    for (int i = 0; i < NBASE; i++) {
        size_t l = strlen(base_lines[i]);
        char what[40];
        snprintf(what, sizeof what, "cut in line %d", i + 1);
        expect_bad(what, b, off + l / 2, (unsigned)i + 1, i == 0 ? NULL : NULL);
        off += l + 1;
    }
    /* cut at a line boundary: the counts in the header catch it */
    size_t six = strlen(base_lines[0]) + strlen(base_lines[1]) + strlen(base_lines[2]) +
                 strlen(base_lines[3]) + strlen(base_lines[4]) + strlen(base_lines[5]) + 6;
    expect_bad("cut after line 6", b, six, 6, "truncated?");
    expect_bad("cut before the last line", b, len - strlen(base_lines[NBASE - 1]) - 1, 7, "1 of 2 tensors");
    free(b);
}

static void t_wrong_version_and_format(void) {
    char h[600];
    snprintf(h, sizeof h, "%s", base_lines[0]);
    char *v = strstr(h, "\"version\":1");
    v[10] = '2';
    expect_bad_line("version 2", 1, h, 1, "version 2 found; this build reads version 1 only: regenerate it with `smartswap trace gen`");
    expect_bad_line("format", 1, "{\"format\":\"smartswap-plan\",\"version\":1}", 1, "\"smartswap-plan\" file; expected \"smartswap-profile\"");
    expect_bad_line("no format", 1, "{\"version\":1}", 1, "no \"format\"");
    expect_bad_line("no version", 1, "{\"format\":\"smartswap-profile\"}", 1, "no integer \"version\"");
    expect_bad_line("version string", 1, "{\"format\":\"smartswap-profile\",\"version\":\"1\"}", 1, "version");
    expect_bad_line("header is a name", 1, "{\"name\":0,\"str\":\"x\"}", 1, "\"format\"");
}

static void t_wrong_types(void) {
    expect_bad_line("bytes string", 7, "{\"tensor\":0,\"bytes\":\"lots\",\"dtype\":\"bf16\",\"shape\":[10,50],\"producer\":0,\"uses\":[1,2],\"release\":2,\"saved\":true,\"noswap\":false}",
                    7, "field 'bytes'");
    expect_bad_line("phase number", 4, "{\"op\":0,\"name\":0,\"phase\":1,\"site\":\"0x1\",\"mem\":2000,\"flops\":10,\"seconds\":0.1}",
                    4, "field 'phase': expected a string, found a number");
    expect_bad_line("phase unknown", 4, "{\"op\":0,\"name\":0,\"phase\":\"sideways\",\"site\":\"0x1\",\"mem\":2000,\"flops\":10,\"seconds\":0.1}",
                    4, "not fwd, bwd, opt or other");
    expect_bad_line("uses string", 7, "{\"tensor\":0,\"bytes\":1000,\"dtype\":\"bf16\",\"shape\":[10,50],\"producer\":0,\"uses\":\"1,2\",\"release\":2,\"saved\":true,\"noswap\":false}",
                    7, "field 'uses': expected an array");
    expect_bad_line("shape item", 7, "{\"tensor\":0,\"bytes\":1000,\"dtype\":\"bf16\",\"shape\":[10,\"x\"],\"producer\":0,\"uses\":[1,2],\"release\":2,\"saved\":true,\"noswap\":false}",
                    7, "shape[1]");
    expect_bad_line("saved number", 7, "{\"tensor\":0,\"bytes\":1000,\"dtype\":\"bf16\",\"shape\":[10,50],\"producer\":0,\"uses\":[1,2],\"release\":2,\"saved\":1,\"noswap\":false}",
                    7, "field 'saved': expected true or false");
    expect_bad_line("dtype unknown", 7, "{\"tensor\":0,\"bytes\":1000,\"dtype\":\"bf17\",\"shape\":[10,50],\"producer\":0,\"uses\":[1,2],\"release\":2,\"saved\":true,\"noswap\":false}",
                    7, "unknown dtype \"bf17\"");
    expect_bad_line("name str number", 2, "{\"name\":0,\"str\":5}", 2, "field 'str': expected a string");
    expect_bad_line("hex digits", 4, "{\"op\":0,\"name\":0,\"phase\":\"fwd\",\"site\":\"0xZZ\",\"mem\":2000,\"flops\":10,\"seconds\":0.1}",
                    4, "not a hex digit");
    expect_bad_line("array line", 3, "[1,2,3]", 3, "expected a JSON object");
    expect_bad_line("bare number", 3, "42", 3, "expected a JSON object");
    expect_bad_line("syntax", 3, "{\"name\":1,\"str\":\"relu\",}", 3, "invalid JSON");
    expect_bad_line("trailing text", 3, "{\"name\":1,\"str\":\"relu\"} x", 3, "extra text");
    expect_bad_line("unknown record", 3, "{\"nom\":1}", 3, "unknown record");
    expect_bad_line("second header", 3, base_lines[0], 3, "second header");
}

static void t_absurd_numbers(void) {
    expect_bad_line("bytes 1e300", 7, "{\"tensor\":0,\"bytes\":1e300,\"dtype\":\"bf16\",\"shape\":[10,50],\"producer\":0,\"uses\":[1,2],\"release\":2,\"saved\":true,\"noswap\":false}",
                    7, "larger than 2^53");
    expect_bad_line("bytes 2^64-1", 7, "{\"tensor\":0,\"bytes\":\"0xffffffffffffffff\",\"dtype\":\"bf16\",\"shape\":[10,50],\"producer\":0,\"uses\":[1,2],\"release\":2,\"saved\":true,\"noswap\":false}",
                    7, "out of range");
    expect_bad_line("bytes 0", 7, "{\"tensor\":0,\"bytes\":0,\"dtype\":\"bf16\",\"shape\":[10,50],\"producer\":0,\"uses\":[1,2],\"release\":2,\"saved\":true,\"noswap\":false}",
                    7, "field 'bytes': 0 is out of range");
    expect_bad_line("bytes negative", 7, "{\"tensor\":0,\"bytes\":-5,\"dtype\":\"bf16\",\"shape\":[10,50],\"producer\":0,\"uses\":[1,2],\"release\":2,\"saved\":true,\"noswap\":false}",
                    7, "non-negative integer");
    expect_bad_line("bytes fraction", 7, "{\"tensor\":0,\"bytes\":10.5,\"dtype\":\"bf16\",\"shape\":[10,50],\"producer\":0,\"uses\":[1,2],\"release\":2,\"saved\":true,\"noswap\":false}",
                    7, "non-negative integer");
    expect_bad_line("hex too long", 4, "{\"op\":0,\"name\":0,\"phase\":\"fwd\",\"site\":\"0x1ffffffffffffffff\",\"mem\":2000,\"flops\":10,\"seconds\":0.1}",
                    4, "1 to 16 digits");
    expect_bad_line("flops inf", 4, "{\"op\":0,\"name\":0,\"phase\":\"fwd\",\"site\":\"0x1\",\"mem\":2000,\"flops\":1e999,\"seconds\":0.1}",
                    4, "not a finite number");
    expect_bad_line("flops negative", 4, "{\"op\":0,\"name\":0,\"phase\":\"fwd\",\"site\":\"0x1\",\"mem\":2000,\"flops\":-1,\"seconds\":0.1}",
                    4, "out of range");
    expect_bad_line("producer", 7, "{\"tensor\":0,\"bytes\":1000,\"dtype\":\"bf16\",\"shape\":[10,50],\"producer\":999999,\"uses\":[1,2],\"release\":2,\"saved\":true,\"noswap\":false}",
                    7, "field 'producer': 999999 is out of range [0, 2]");
    expect_bad_line("use past the end", 7, "{\"tensor\":0,\"bytes\":1000,\"dtype\":\"bf16\",\"shape\":[10,50],\"producer\":0,\"uses\":[1,3],\"release\":2,\"saved\":true,\"noswap\":false}",
                    7, "uses[1]");
    expect_bad_line("uses descending", 7, "{\"tensor\":0,\"bytes\":1000,\"dtype\":\"bf16\",\"shape\":[10,50],\"producer\":0,\"uses\":[2,1],\"release\":2,\"saved\":true,\"noswap\":false}",
                    7, "ascending");
    expect_bad_line("use before producer", 8, "{\"tensor\":1,\"bytes\":1000,\"dtype\":\"f32\",\"shape\":[250],\"producer\":1,\"uses\":[0],\"release\":null,\"saved\":false,\"noswap\":false}",
                    8, "ascending");
    expect_bad_line("release before use", 7, "{\"tensor\":0,\"bytes\":1000,\"dtype\":\"bf16\",\"shape\":[10,50],\"producer\":0,\"uses\":[1,2],\"release\":1,\"saved\":true,\"noswap\":false}",
                    7, "field 'release'");
    expect_bad_line("nine dims", 7, "{\"tensor\":0,\"bytes\":1000,\"dtype\":\"bf16\",\"shape\":[1,1,1,1,1,1,1,1,1],\"producer\":0,\"uses\":[1,2],\"release\":2,\"saved\":true,\"noswap\":false}",
                    7, "more than 8 items");
    expect_bad_line("huge dim", 7, "{\"tensor\":0,\"bytes\":1000,\"dtype\":\"bf16\",\"shape\":[1e20],\"producer\":0,\"uses\":[1,2],\"release\":2,\"saved\":true,\"noswap\":false}",
                    7, "shape[0]");
    expect_bad_line("name id out of range", 4, "{\"op\":0,\"name\":7,\"phase\":\"fwd\",\"site\":\"0x1\",\"mem\":2000,\"flops\":10,\"seconds\":0.1}",
                    4, "field 'name': 7 is out of range [0, 1]");
    char h[600];
    snprintf(h, sizeof h, "%s", base_lines[0]);
    char *o = strstr(h, "\"ops\":3");
    memcpy(o, "\"ops\":9", 7);
    /* a header promising more than the file holds is caught where the tensors start */
    expect_bad_line("ops count", 1, h, 7, "3 ops before the first tensor, but the header says 9");
    expect_bad_line("names 1e10", 1,
                    "{\"format\":\"smartswap-profile\",\"version\":1,\"desc\":\"t\",\"seq_hash\":\"0x1\",\"size_sig\":\"0x1\","
                    "\"base_bytes\":1000,\"iter_seconds\":0.5,\"names\":1e10,\"ops\":3,\"tensors\":2,\"uses\":3}",
                    1, "field 'names'");
    expect_bad_line("iter_seconds huge", 1,
                    "{\"format\":\"smartswap-profile\",\"version\":1,\"desc\":\"t\",\"seq_hash\":\"0x1\",\"size_sig\":\"0x1\","
                    "\"base_bytes\":1000,\"iter_seconds\":1e300,\"names\":2,\"ops\":3,\"tensors\":2,\"uses\":3}",
                    1, "field 'iter_seconds'");
    /* nesting: 50 levels is a wrong type, 5000 levels is beyond the parser's limit */
    char deep[12000];
    int n = snprintf(deep, sizeof deep, "{\"name\":");
    for (int k = 0; k < 50; k++) deep[n++] = '[';
    for (int k = 0; k < 50; k++) deep[n++] = ']';
    snprintf(deep + n, sizeof deep - (size_t)n, ",\"str\":\"x\"}");
    expect_bad_line("nested 50", 3, deep, 3, "field 'name': expected an unsigned integer, found an array");
    n = snprintf(deep, sizeof deep, "{\"name\":");
    for (int k = 0; k < 5000; k++) deep[n++] = '[';
    for (int k = 0; k < 5000; k++) deep[n++] = ']';
    snprintf(deep + n, sizeof deep - (size_t)n, ",\"str\":\"x\"}");
    expect_bad_line("nested 5000", 3, deep, 3, "invalid JSON");
}

static void t_missing_fields(void) {
    expect_bad_line("op without mem", 4, "{\"op\":0,\"name\":0,\"phase\":\"fwd\",\"site\":\"0x1\",\"flops\":10,\"seconds\":0.1}",
                    4, "missing field 'mem'");
    expect_bad_line("tensor without release", 7, "{\"tensor\":0,\"bytes\":1000,\"dtype\":\"bf16\",\"shape\":[10,50],\"producer\":0,\"uses\":[1,2],\"saved\":true,\"noswap\":false}",
                    7, "missing field 'release'");
    expect_bad_line("tensor without shape", 7, "{\"tensor\":0,\"bytes\":1000,\"dtype\":\"bf16\",\"producer\":0,\"uses\":[1,2],\"release\":2,\"saved\":true,\"noswap\":false}",
                    7, "missing field 'shape'");
    expect_bad_line("header without desc", 1, "{\"format\":\"smartswap-profile\",\"version\":1}", 1, "missing field 'desc'");
    expect_bad_line("name line missing", 3, NULL, 3, "1 names before the first op, but the header says 2");
    expect_bad_line("op line missing", 5, NULL, 5, "op 2 out of sequence: expected op 1");
    expect_bad_line("op with null name", 4, "{\"op\":0,\"name\":null,\"phase\":\"fwd\",\"site\":\"0x1\",\"mem\":2000,\"flops\":10,\"seconds\":0.1}",
                    4, "field 'name': expected an unsigned integer, found null");
    /* order and identity */
    expect_bad_line("name after op", 6, "{\"name\":2,\"str\":\"late\"}", 6, "a name record after the op records");
    expect_bad_line("duplicate name", 3, "{\"name\":1,\"str\":\"matmul\"}", 3, "repeats name 0");
    expect_bad_line("empty name", 3, "{\"name\":1,\"str\":\"\"}", 3, "empty");
}

static void t_binary_garbage(void) {
    ssi_rng rng;
    ssi_rng_seed(&rng, 12345);
    char buf[2048];
    for (int k = 0; k < 300; k++) {
        size_t n = 1 + ssi_rng_below(&rng, sizeof buf - 1);
        for (size_t i = 0; i < n; i++) buf[i] = (char)ssi_rng_below(&rng, 256);
        if (k % 3 == 0) buf[0] = '{';           /* garbage that starts like JSON */
        ss_profile *p = NULL;
        char err[400] = "";
        ss_status st = ssi_profile_read_buffer(buf, n, "bad.jsonl", &p, err, sizeof err);
        CHECK_MSG(st == SS_ERR_FORMAT && !p && !strncmp(err, "bad.jsonl:", 10), "garbage %d: %s (%s)", k, ss_status_str(st), err);
        ssi_profile_free(p);
    }
    /* a valid file with a NUL byte in a line */
    size_t len;
    char *b = make_file(0, NULL, &len);
    size_t l1 = strlen(base_lines[0]) + 1;
    b[l1 + 3] = '\0';
    expect_bad("NUL byte", b, len, 2, "NUL byte");
    free(b);
    /* a UTF-8 byte order mark */
    expect_bad("BOM", "\xef\xbb\xbf{}", 5, 1, "expected a JSON object");
    /* an ELF-like header */
    expect_bad("elf", "\x7f" "ELF\x02\x01\x01\0\0\0", 10, 1, NULL);
}

/* Every single-byte corruption of a valid file reads as OK (and consistent) or SS_ERR_FORMAT. */
static void t_fuzz_mutations(void) {
    size_t len;
    char *b = make_file(0, NULL, &len);
    ssi_rng rng;
    ssi_rng_seed(&rng, 777);
    int ok = 0, fmt = 0, other = 0;
    static const char pool[] = "{}[]\",:0123456789-+.eE xnultrfa\\\n";
    for (int k = 0; k < 3000; k++) {
        char *m = malloc(len);
        memcpy(m, b, len);
        int edits = 1 + (int)ssi_rng_below(&rng, 3);
        for (int e = 0; e < edits; e++) {
            size_t at = ssi_rng_below(&rng, len);
            m[at] = (k & 1) ? pool[ssi_rng_below(&rng, sizeof pool - 1)] : (char)ssi_rng_below(&rng, 256);
        }
        size_t n = (k % 5 == 0) ? ssi_rng_below(&rng, len + 1) : len;
        ss_profile *p = NULL;
        char err[400] = "";
        ss_status st = ssi_profile_read_buffer(m, n, "m.jsonl", &p, err, sizeof err);
        if (st == SS_OK) {
            char cerr[200];
            ok++;
            if (ssi_profile_check(p, cerr, sizeof cerr)) other++;
        } else if (st == SS_ERR_FORMAT && !strncmp(err, "m.jsonl:", 8)) fmt++;
        else { other++; fprintf(stderr, "mutation %d: %s (%s)\n", k, ss_status_str(st), err); }
        ssi_profile_free(p);
        free(m);
    }
    CHECK_EQ_INT(other, 0);
    CHECK(fmt > 2000);
    printf("fuzz: %d mutations read as valid, %d rejected with FILE:LINE\n", ok, fmt);
    free(b);
}

static void t_file_errors(void) {
    char err[400], path[300];
    ss_profile *p = NULL;
    path_in_tmp(path, sizeof path, "does-not-exist.jsonl");
    CHECK_STATUS(ssi_profile_read(path, &p, err, sizeof err), SS_ERR_IO);
    CHECK(strstr(err, "cannot open") && strstr(err, "does-not-exist.jsonl"));
    /* a directory */
    CHECK(ssi_profile_read(tmpdir, &p, err, sizeof err) != SS_OK);
    CHECK(p == NULL);
    /* a bad file on disk reports its path and line */
    path_in_tmp(path, sizeof path, "bad-version.jsonl");
    FILE *f = fopen(path, "w");
    fputs("{\"format\":\"smartswap-profile\",\"version\":7}\n", f);
    fclose(f);
    CHECK_STATUS(ssi_profile_read(path, &p, err, sizeof err), SS_ERR_FORMAT);
    char want[400];
    snprintf(want, sizeof want, "%s:1: smartswap-profile version 7 found", path);
    CHECK_MSG(!strncmp(err, want, strlen(want)), "%s", err);
}

static void t_jl_helpers(void) {
    const char *text = "\n  \r\n{\"a\":\"0x10\",\"b\":9007199254740992,\"c\":-3,\"d\":2.5,\"e\":true,\"s\":\"hi\"}\r\n\n{\"a\":1}";
    ssi_jl_reader r;
    char err[300];
    CHECK_OK(ssi_jl_open_buffer(&r, text, strlen(text), "h.jsonl", err, sizeof err));
    const cJSON *o;
    CHECK_OK(ssi_jl_next(&r, &o));
    CHECK(o != NULL);
    CHECK_EQ_INT(r.line, 3);
    uint64_t u;
    int64_t i;
    double d;
    int bo;
    const char *s;
    CHECK_OK(ssi_jl_u64(&r, o, "a", 0, 100, &u));
    CHECK_EQ_U64(u, 16);
    CHECK_OK(ssi_jl_u64(&r, o, "b", 0, UINT64_MAX, &u));
    CHECK_EQ_U64(u, (uint64_t)1 << 53);
    CHECK_OK(ssi_jl_i64(&r, o, "c", -5, 5, &i));
    CHECK_EQ_INT(i, -3);
    CHECK_OK(ssi_jl_double(&r, o, "d", 0, 3, &d));
    CHECK(d == 2.5);
    CHECK_OK(ssi_jl_bool(&r, o, "e", &bo));
    CHECK_EQ_INT(bo, 1);
    CHECK_OK(ssi_jl_str(&r, o, "s", 2, &s));
    CHECK(!strcmp(s, "hi"));
    CHECK(ssi_jl_has(o, "a") && !ssi_jl_has(o, "zz"));
    CHECK_STATUS(ssi_jl_str(&r, o, "s", 1, &s), SS_ERR_FORMAT);
    CHECK_MSG(!strcmp(err, "h.jsonl:3: field 's': string of 2 bytes (at most 1)"), "%s", err);
    /* the first error sticks */
    CHECK_STATUS(ssi_jl_fail(&r, "second"), SS_ERR_FORMAT);
    CHECK(strstr(err, "second") == NULL);
    CHECK_STATUS(ssi_jl_next(&r, &o), SS_ERR_FORMAT);
    ssi_jl_close(&r);

    CHECK_OK(ssi_jl_open_buffer(&r, text, strlen(text), "h.jsonl", err, sizeof err));
    CHECK_OK(ssi_jl_next(&r, &o));
    CHECK_OK(ssi_jl_next(&r, &o));
    CHECK(o != NULL);
    CHECK_EQ_INT(r.line, 5);                  /* the last line has no '\n' */
    CHECK_STATUS(ssi_jl_u64(&r, o, "a", 2, 3, &u), SS_ERR_FORMAT);
    CHECK_MSG(!strcmp(err, "h.jsonl:5: field 'a': 1 is out of range [2, 3]"), "%s", err);
    ssi_jl_close(&r);
    CHECK_OK(ssi_jl_open_buffer(&r, text, strlen(text), "h.jsonl", err, sizeof err));
    for (int k = 0; k < 3; k++) CHECK_OK(ssi_jl_next(&r, &o));
    CHECK(o == NULL);                          /* end of input */
    ssi_jl_close(&r);

    /* the writer: exact numbers, hex above 2^53, atomic commit */
    ssi_jl_writer w;
    ssi_jl_writer_init(&w);
    cJSON *x = ssi_jl_obj(&w);
    ssi_jl_put_u64(&w, x, "small", 42);
    ssi_jl_put_u64(&w, x, "big", ((uint64_t)1 << 53) + 1);
    ssi_jl_put_hex(&w, x, "h", 255);
    ssi_jl_put_double(&w, x, "d", 0.1);
    ssi_jl_put_i64(&w, x, "n", -7);
    uint32_t arr[3] = {1, 2, 4000000000u};
    ssi_jl_put_u32_array(&w, x, "a", arr, 3);
    ssi_jl_line(&w, x);
    char *out;
    size_t len;
    CHECK_OK(ssi_jl_writer_take(&w, &out, &len));
    const char *want = "{\"small\":42,\"big\":\"0x20000000000001\",\"h\":\"0x00000000000000ff\",\"d\":0.1,\"n\":-7,\"a\":[1,2,4000000000]}\n";
    CHECK_MSG(!strcmp(out, want), "%s", out);
    CHECK_EQ_U64(len, strlen(want));
    free(out);
}

static void t_stats(void) {
    size_t len;
    char *b = make_file(0, NULL, &len);
    ss_profile *p = NULL;
    char err[300];
    CHECK_OK(ssi_profile_read_buffer(b, len, "base.jsonl", &p, err, sizeof err));
    if (p) {
        ssi_profile_stats s;
        ssi_profile_stats_get(p, &s);
        CHECK_EQ_INT(s.ops, 3);
        CHECK_EQ_INT(s.ops_phase[SS_PHASE_FWD], 2);
        CHECK_EQ_INT(s.ops_phase[SS_PHASE_BWD], 1);
        CHECK_EQ_INT(s.saved_tensors, 1);
        CHECK_EQ_INT(s.temp_tensors, 1);
        CHECK_EQ_U64(s.saved_bytes, 1000);
        CHECK_EQ_U64(s.peak_bytes, 3000);
        CHECK_EQ_U64(s.peak_activation_bytes, 2000);
        CHECK_EQ_INT(s.peak_op, 1);
        CHECK_EQ_U64(s.max_saved_alive_bytes, 1000);
        CHECK(s.flops == 30);
        CHECK_NEAR(s.op_seconds, 0.5, 1e-12);
        CHECK(s.iter_seconds == 0.5);
    }
    ssi_profile_free(p);
    free(b);
}

/* A "recorded" profile of L layers with generic operator names (matmul four times a layer, as
 * the reference trainer names them): forward = embedding, L x (rmsnorm, matmul, matmul, attention,
 * matmul, add, rmsnorm, matmul, add), final rmsnorm, loss; backward one op per forward op. Each
 * layer op saves one tensor of 100 * (1 + its index in the layer) bytes, the tenth a big one
 * (big bytes); the embedding saves 7, the loss 5 and 11 bytes. Call sites are the role's,
 * or distinct per layer (per_layer_sites). */
static ss_profile *layered_profile(uint32_t L, int per_layer_sites, uint64_t big) {
    static const char *const lay[] = {"rmsnorm", "matmul", "matmul", "attention", "matmul", "add",
                                      "rmsnorm", "matmul", "add"};
    const uint32_t per = sizeof lay / sizeof lay[0];
    ss_profile *p = NULL;
    if (ssi_profile_new(&p)) return NULL;
    uint32_t id, op;
    ss_prof_op o;
    ss_prof_tensor t;
    uint32_t idx;
#define OP(nm_, ph_, site_) do { memset(&o, 0, sizeof o); ssi_profile_intern(p, nm_, &id); o.name = id; \
        o.phase = ph_; o.site = site_; ssi_profile_add_op(p, &o, &op); } while (0)
#define TEN(bytes_) do { memset(&t, 0, sizeof t); t.bytes = bytes_; t.dtype = SS_DTYPE_U8; t.ndim = 1; \
        t.shape[0] = (int64_t)(bytes_); t.producer = op; t.release = SS_NONE; t.flags = SS_TENSOR_SAVED; \
        ssi_profile_add_tensor(p, &t, &idx); } while (0)
    OP("embedding", SS_PHASE_FWD, 1);
    TEN(7);
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t k = 0; k < per; k++) {
            OP(lay[k], SS_PHASE_FWD, 100 + k + (per_layer_sites ? 1000 * (uint64_t)l : 0));
            TEN(k == per - 1 ? big : 100 * (uint64_t)(1 + k));
        }
    OP("rmsnorm", SS_PHASE_FWD, 50);
    TEN(5);
    OP("lxent", SS_PHASE_FWD, 51);
    TEN(11);
    for (uint32_t j = 0, n = 3 + L * per; j < n; j++) OP("bwd", SS_PHASE_BWD, 60);
    OP("adamw", SS_PHASE_OPT, 70);
#undef OP
#undef TEN
    char err[200];
    if (ssi_profile_finalize(p) || ssi_profile_check(p, err, sizeof err)) { ssi_profile_free(p); return NULL; }
    return p;
}

/* Layers found from the forward operators: per-layer saved bytes, the largest tensor and its
 * share, what is before and after the layers; by name alone when call sites differ per layer;
 * none in a one-layer profile. */
static void t_layers(void) {
    for (int sites = 0; sites < 2; sites++) {
        ss_profile *p = layered_profile(6, sites, 5000);
        CHECK(p != NULL);
        if (!p) return;
        ssi_profile_layers L;
        CHECK_OK(ssi_profile_layers_get(p, &L));
        CHECK_EQ_U64(L.layers, 6);
        CHECK_EQ_U64(L.block_ops, 9);
        CHECK_EQ_U64(L.first_op, 1);
        CHECK_EQ_U64(L.end_op, 1 + 6 * 9);
        uint64_t layer = 100 * (1 + 2 + 3 + 4 + 5 + 6 + 7 + 8) + 5000;
        CHECK_EQ_U64(L.saved_min, layer);
        CHECK_EQ_U64(L.saved_max, layer);
        CHECK_EQ_U64(L.saved_layers, 6 * layer);
        CHECK_EQ_U64(L.saved_before, 7);
        CHECK_EQ_U64(L.saved_after, 16);
        CHECK_EQ_U64(L.saved_elsewhere, 0);
        CHECK(L.largest != SS_NONE && p->tensors[L.largest].bytes == 5000);
        CHECK_EQ_U64(L.largest_layer, 0);
        CHECK_EQ_U64(L.largest_layer_saved, layer);
        CHECK(L.max_saved_loss != SS_NONE && p->tensors[L.max_saved_loss].bytes == 11);
        CHECK(L.max_saved == L.largest);
        ssi_profile_free(p);
    }
    /* one layer: nothing repeats */
    ss_profile *p = layered_profile(1, 0, 5000);
    CHECK(p != NULL);
    if (p) {
        ssi_profile_layers L;
        CHECK_OK(ssi_profile_layers_get(p, &L));
        CHECK_EQ_U64(L.layers, 0);
        CHECK(L.max_saved != SS_NONE && p->tensors[L.max_saved].bytes == 5000);
        ssi_profile_free(p);
    }
    /* generated profiles: the layers are the generator's, a layer's saved bytes its formula */
    static const struct { const char *model; uint32_t moe_e, moe_k; int flash, full; } cases[] = {
        {"llama-3.2-1b", 0, 0, 1, 0}, {"llama-3.2-1b", 0, 0, 0, 1}, {"gpt2-124m", 0, 0, 1, 0},
        {"llama-2-7b", 8, 2, 1, 0}};
    for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++) {
        ssi_workload_config c;
        ssi_workload_default(&c);
        CHECK_OK(ssi_workload_preset(&c, cases[q].model));
        c.layers = 5;
        c.batch = 2;
        c.seq = 128;
        c.flash = cases[q].flash;
        c.moe_experts = cases[q].moe_e;
        c.moe_topk = cases[q].moe_k;
        c.loss = cases[q].full ? SSI_WORKLOAD_LOSS_FULL : SSI_WORKLOAD_LOSS_CHUNKED;
        ssi_workload_info in;
        memset(&in, 0, sizeof in);
        char err[256];
        ss_profile *g = NULL;
        CHECK_OK(ssi_workload_generate(&c, &g, &in, err, sizeof err));
        if (!g) continue;
        ssi_profile_layers L;
        CHECK_OK(ssi_profile_layers_get(g, &L));
        CHECK_MSG(L.layers == 5, "%s: %u layers", cases[q].model, L.layers);
        /* the generator's layer 1 (its input in, its output out) holds as much as any layer */
        uint64_t want = 0, loss = 0;
        for (uint32_t t = 0; t < g->ntensors; t++)
            if (g->tensors[t].flags & SS_TENSOR_SAVED) {
                if (in.layer[t] == 1) want += g->tensors[t].bytes;
                if (in.cat[t] == SSI_WL_LOSS) loss += g->tensors[t].bytes;
            }
        CHECK_EQ_U64(L.saved_min, want);
        CHECK_EQ_U64(L.saved_max, want);
        /* after the layers: the final norm's output (2h per token in bf16) and the loss */
        CHECK_EQ_U64(L.saved_after, 256ull * c.hidden * 2 + loss);
        CHECK_EQ_U64(L.saved_before, 256ull * 16 + 256ull * c.hidden * 2);   /* ids, targets, x0 */
        CHECK_EQ_U64(ssi_profile_desc_tokens(g->desc), 256);
        ssi_workload_info_free(&in);
        ssi_profile_free(g);
    }
    CHECK_EQ_U64(ssi_profile_desc_tokens("smartswap detailed profile, iteration 3"), 0);
    CHECK_EQ_U64(ssi_profile_desc_tokens("recompute: trace gen x: L=1 b=3 s=5 bf16"), 15);
}

/* 100k+ operators write and read back in seconds (the bound is loose for sanitizer builds). */
static void t_large_fast(void) {
    ssi_workload_config c;
    ssi_workload_default(&c);
    c.layers = 3500; c.hidden = 64; c.heads = 4; c.kv_heads = 2; c.ffn = 128; c.vocab = 100;
    c.batch = 1; c.seq = 16;
    ss_profile *p = NULL, *q = NULL;
    char err[300], path[300];
    CHECK_OK(ssi_workload_generate(&c, &p, NULL, err, sizeof err));
    if (!p) return;
    CHECK(p->nops > 100000);
    path_in_tmp(path, sizeof path, "large.jsonl");
    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_OK(ssi_profile_write(p, path, err, sizeof err));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK_OK(ssi_profile_read(path, &q, err, sizeof err));
    clock_gettime(CLOCK_MONOTONIC, &t2);
    double w = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    double r = (double)(t2.tv_sec - t1.tv_sec) + (t2.tv_nsec - t1.tv_nsec) * 1e-9;
    struct stat st;
    stat(path, &st);
    printf("large: %u ops, %u tensors, %.1f MiB: write %.2f s, read %.2f s\n", p->nops, p->ntensors,
           st.st_size / 1048576.0, w, r);
    CHECK(q && ssi_profile_equal(p, q));
    CHECK_MSG(r < 10, "read took %.2f s", r);
    /* and its layers are found in linear time */
    ssi_profile_layers L;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_OK(ssi_profile_layers_get(p, &L));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double tl = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("large: layers found in %.3f s\n", tl);
    CHECK_EQ_U64(L.layers, 3500);
    CHECK_MSG(tl < 2, "layers took %.2f s", tl);
    ssi_profile_free(p);
    ssi_profile_free(q);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ss-test-trace-XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    RUN(t_round_trip_buffer);
    RUN(t_round_trip_file);
    RUN(t_write_atomic);
    RUN(t_base_is_valid);
    RUN(t_truncated);
    RUN(t_wrong_version_and_format);
    RUN(t_wrong_types);
    RUN(t_absurd_numbers);
    RUN(t_missing_fields);
    RUN(t_binary_garbage);
    RUN(t_fuzz_mutations);
    RUN(t_file_errors);
    RUN(t_jl_helpers);
    RUN(t_stats);
    RUN(t_layers);
    RUN(t_large_fast);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_summary();
}
