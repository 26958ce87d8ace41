/* trace.c: profile files and the JSON Lines helpers of trace.h (the trace part of DESIGN.md).
 * The format is documented field by field in docs/trace-format.md. Parsing is libcjson's, one
 * line at a time; this file adds the line reader, typed and range-checked field getters with
 * "FILE:LINE: ..." messages, a writer that prints numbers exactly (so that a profile read back
 * equals the one written) and writes files atomically, and the profile record layout.
 */
#include "trace.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#define TWO53 9007199254740992.0                 /* 2^53: larger integers are not exact doubles */
#define MAX_BYTES ((uint64_t)1 << 60)            /* 1 EiB: a larger size is absurd */
#define MAX_NAME_LEN 1024

/* ================================ JSON Lines reading ========================================= */

static void reader_init(ssi_jl_reader *r, const char *name, char *err, size_t err_len) {
    memset(r, 0, sizeof *r);
    ssi_fmt(r->name, sizeof r->name, "%s", name ? name : "(buffer)");
    r->err = err;
    r->err_len = err_len;
    r->next_line = 1;
    if (err && err_len) err[0] = 0;
}

ss_status ssi_jl_open(ssi_jl_reader *r, const char *path, char *err, size_t err_len) {
    reader_init(r, path, err, err_len);
    r->f = fopen(path, "rb");
    if (!r->f) {
        int e = errno;
        if (err && err_len) ssi_fmt(err, err_len, "%s: cannot open: %s", path, strerror(e));
        else SS_ERROR("%s: cannot open: %s", path, strerror(e));
        r->failed = SS_ERR_IO;
        return SS_ERR_IO;
    }
    return SS_OK;
}

ss_status ssi_jl_open_buffer(ssi_jl_reader *r, const char *data, size_t len, const char *name,
                             char *err, size_t err_len) {
    reader_init(r, name, err, err_len);
    r->src = data ? data : "";
    r->src_len = data ? len : 0;
    return SS_OK;
}

void ssi_jl_close(ssi_jl_reader *r) {
    if (!r) return;
    if (r->f) fclose(r->f);
    r->f = NULL;
    free(r->buf);
    r->buf = NULL;
    cJSON_Delete(r->cur);
    r->cur = NULL;
}

/* Records the first error of the reader: "NAME:LINE: message" into err (or the log). */
static ss_status reader_failv(ssi_jl_reader *r, ss_status st, unsigned long line, const char *fmt, va_list ap) {
    if (r->failed) return r->failed;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (r->err && r->err_len) {
        if (line) ssi_fmt(r->err, r->err_len, "%s:%lu: %s", r->name, line, msg);
        else ssi_fmt(r->err, r->err_len, "%s: %s", r->name, msg);
    } else {
        if (line) SS_ERROR("%s:%lu: %s", r->name, line, msg);
        else SS_ERROR("%s: %s", r->name, msg);
    }
    r->failed = st;
    return st;
}

static ss_status reader_fail_st(ssi_jl_reader *r, ss_status st, unsigned long line, const char *fmt, ...)
    SS_PRINTF(4, 5);
static ss_status reader_fail_st(ssi_jl_reader *r, ss_status st, unsigned long line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ss_status s = reader_failv(r, st, line, fmt, ap);
    va_end(ap);
    return s;
}

ss_status ssi_jl_fail(ssi_jl_reader *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ss_status s = reader_failv(r, SS_ERR_FORMAT, r->line, fmt, ap);
    va_end(ap);
    return s;
}

/* The next physical line (without its '\n') in *line and *n; 0 at the end of input, 1 on a line,
 * -1 on an error (recorded). File mode keeps only the unconsumed bytes in memory. */
static int next_raw_line(ssi_jl_reader *r, const char **line, size_t *n) {
    if (!r->f) {
        if (r->src_pos >= r->src_len) return 0;
        const char *s = r->src + r->src_pos;
        size_t left = r->src_len - r->src_pos;
        const char *nl = memchr(s, '\n', left);
        size_t len = nl ? (size_t)(nl - s) : left;
        r->src_pos += len + (nl ? 1 : 0);
        if (len > SSI_JL_MAX_LINE) {
            reader_fail_st(r, SS_ERR_FORMAT, r->next_line, "line longer than %zu bytes", SSI_JL_MAX_LINE);
            return -1;
        }
        *line = s;
        *n = len;
        return 1;
    }
    size_t scanned = 0;   /* bytes of the pending line already searched for '\n' */
    for (;;) {
        char *s = r->buf + r->beg;
        size_t left = r->end - r->beg;
        char *nl = left > scanned ? memchr(s + scanned, '\n', left - scanned) : NULL;
        if (nl) {
            *line = s;
            *n = (size_t)(nl - s);
            r->beg += *n + 1;
            return 1;
        }
        scanned = left;
        if (r->eof) {
            if (!left) return 0;
            *line = s;
            *n = left;
            r->beg = r->end;
            return 1;
        }
        if (left > SSI_JL_MAX_LINE) {
            reader_fail_st(r, SS_ERR_FORMAT, r->next_line, "line longer than %zu bytes", SSI_JL_MAX_LINE);
            return -1;
        }
        if (r->beg) {                       /* move the pending line to the front */
            memmove(r->buf, s, left);
            r->beg = 0;
            r->end = left;
        }
        if (r->end == r->cap) {
            size_t want = r->cap ? r->cap * 2 : (size_t)1 << 16;
            if (ssi_grow(&r->buf, &r->cap, want, 1)) {
                reader_fail_st(r, SS_ERR_HOST_OOM, r->next_line, "out of memory reading the file");
                return -1;
            }
        }
        size_t got = fread(r->buf + r->end, 1, r->cap - r->end, r->f);
        r->end += got;
        if (got == 0) {
            if (ferror(r->f)) {
                reader_fail_st(r, SS_ERR_IO, r->next_line, "read error: %s", strerror(errno));
                return -1;
            }
            r->eof = 1;
        }
    }
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

ss_status ssi_jl_next(ssi_jl_reader *r, const cJSON **obj) {
    *obj = NULL;
    cJSON_Delete(r->cur);
    r->cur = NULL;
    if (r->failed) return r->failed;
    for (;;) {
        const char *line;
        size_t n;
        int got = next_raw_line(r, &line, &n);
        if (got < 0) return r->failed;
        if (got == 0) { r->line = r->next_line > 1 ? r->next_line - 1 : 0; return SS_OK; }
        r->line = r->next_line++;
        size_t i = 0;
        while (i < n && is_ws(line[i])) i++;
        if (i == n) continue;                                /* blank line */
        if (memchr(line, '\0', n))
            return ssi_jl_fail(r, "binary data (a NUL byte): not a JSON Lines text file");
        if (line[i] != '{')
            return ssi_jl_fail(r, "expected a JSON object starting with '{', found '%c' (0x%02x)",
                               (line[i] >= 32 && line[i] < 127) ? line[i] : '?', (unsigned char)line[i]);
        const char *end = NULL;
        cJSON *o = cJSON_ParseWithLengthOpts(line, n, &end, 0);
        if (!o) {
            size_t col = (end && end >= line && end <= line + n) ? (size_t)(end - line) + 1 : 0;
            if (col > n) return ssi_jl_fail(r, "invalid JSON: the line ends inside the object (truncated?)");
            return ssi_jl_fail(r, "invalid JSON near column %zu", col);
        }
        r->cur = o;
        for (const char *e = end; e && e < line + n; e++)
            if (!is_ws(*e)) return ssi_jl_fail(r, "extra text after the JSON object at column %zu",
                                               (size_t)(e - line) + 1);
        if (!cJSON_IsObject(o)) return ssi_jl_fail(r, "expected a JSON object");
        *obj = o;
        return SS_OK;
    }
}

static const char *type_name(const cJSON *v) {
    if (!v) return "nothing";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an unknown value";
}

int ssi_jl_has(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v);
}

static const cJSON *field(ssi_jl_reader *r, const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) ssi_jl_fail(r, "missing field '%s'", key);
    return v;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

ss_status ssi_jl_value_u64(ssi_jl_reader *r, const cJSON *v, const char *what, uint64_t lo,
                           uint64_t hi, uint64_t *out) {
    uint64_t x = 0;
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (!(d >= 0) || d != floor(d))
            return ssi_jl_fail(r, "%s: expected a non-negative integer, found %.17g", what, d);
        if (d > TWO53)
            return ssi_jl_fail(r, "%s: %.17g is larger than 2^53; such values are written as hex "
                               "strings \"0x...\"", what, d);
        x = (uint64_t)d;
    } else if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        size_t n = strlen(s);
        if (n < 3 || n > 18 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
            return ssi_jl_fail(r, "%s: expected an integer or a hex string \"0x...\" of 1 to 16 "
                               "digits, found \"%.40s\"", what, s);
        for (size_t i = 2; i < n; i++) {
            int h = hexval(s[i]);
            if (h < 0) return ssi_jl_fail(r, "%s: '%c' is not a hex digit in \"%.40s\"", what, s[i], s);
            x = (x << 4) | (uint64_t)h;
        }
    } else {
        return ssi_jl_fail(r, "%s: expected an unsigned integer, found %s", what, type_name(v));
    }
    if (x < lo || x > hi)
        return ssi_jl_fail(r, "%s: %" PRIu64 " is out of range [%" PRIu64 ", %" PRIu64 "]", what, x, lo, hi);
    *out = x;
    return SS_OK;
}

ss_status ssi_jl_u64(ssi_jl_reader *r, const cJSON *obj, const char *key, uint64_t lo, uint64_t hi, uint64_t *out) {
    const cJSON *v = field(r, obj, key);
    if (!v) return r->failed;
    char what[80];
    ssi_fmt(what, sizeof what, "field '%s'", key);
    return ssi_jl_value_u64(r, v, what, lo, hi, out);
}

ss_status ssi_jl_u32(ssi_jl_reader *r, const cJSON *obj, const char *key, uint32_t lo, uint32_t hi, uint32_t *out) {
    uint64_t x;
    ss_status st = ssi_jl_u64(r, obj, key, lo, hi, &x);
    if (!st) *out = (uint32_t)x;
    return st;
}

ss_status ssi_jl_i64(ssi_jl_reader *r, const cJSON *obj, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const cJSON *v = field(r, obj, key);
    if (!v) return r->failed;
    if (!cJSON_IsNumber(v)) return ssi_jl_fail(r, "field '%s': expected an integer, found %s", key, type_name(v));
    double d = v->valuedouble;
    if (d != floor(d) || !(fabs(d) <= TWO53))
        return ssi_jl_fail(r, "field '%s': expected an integer of magnitude at most 2^53, found %.17g", key, d);
    int64_t x = (int64_t)d;
    if (x < lo || x > hi)
        return ssi_jl_fail(r, "field '%s': %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", key, x, lo, hi);
    *out = x;
    return SS_OK;
}

ss_status ssi_jl_double(ssi_jl_reader *r, const cJSON *obj, const char *key, double lo, double hi, double *out) {
    const cJSON *v = field(r, obj, key);
    if (!v) return r->failed;
    if (!cJSON_IsNumber(v)) return ssi_jl_fail(r, "field '%s': expected a number, found %s", key, type_name(v));
    double d = v->valuedouble;
    if (!isfinite(d)) return ssi_jl_fail(r, "field '%s': not a finite number", key);
    if (!(d >= lo && d <= hi))
        return ssi_jl_fail(r, "field '%s': %.17g is out of range [%g, %g]", key, d, lo, hi);
    *out = d;
    return SS_OK;
}

ss_status ssi_jl_bool(ssi_jl_reader *r, const cJSON *obj, const char *key, int *out) {
    const cJSON *v = field(r, obj, key);
    if (!v) return r->failed;
    if (!cJSON_IsBool(v)) return ssi_jl_fail(r, "field '%s': expected true or false, found %s", key, type_name(v));
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return SS_OK;
}

ss_status ssi_jl_str(ssi_jl_reader *r, const cJSON *obj, const char *key, size_t max_len, const char **out) {
    const cJSON *v = field(r, obj, key);
    if (!v) return r->failed;
    if (!cJSON_IsString(v) || !v->valuestring)
        return ssi_jl_fail(r, "field '%s': expected a string, found %s", key, type_name(v));
    size_t n = strlen(v->valuestring);
    if (n > max_len) return ssi_jl_fail(r, "field '%s': string of %zu bytes (at most %zu)", key, n, max_len);
    *out = v->valuestring;
    return SS_OK;
}

ss_status ssi_jl_array(ssi_jl_reader *r, const cJSON *obj, const char *key, size_t max_n,
                       const cJSON **arr, size_t *n) {
    const cJSON *v = field(r, obj, key);
    if (!v) return r->failed;
    if (!cJSON_IsArray(v)) return ssi_jl_fail(r, "field '%s': expected an array, found %s", key, type_name(v));
    size_t k = 0;
    for (const cJSON *c = v->child; c; c = c->next)
        if (++k > max_n) return ssi_jl_fail(r, "field '%s': more than %zu items", key, max_n);
    *arr = v;
    *n = k;
    return SS_OK;
}

ss_status ssi_jl_header(ssi_jl_reader *r, const cJSON *obj, const char *format, int version,
                        const char *what_to_rerun) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, "format");
    if (!f || !cJSON_IsString(f))
        return ssi_jl_fail(r, "not a smartswap file: the first line has no \"format\" string "
                           "(expected \"%s\")", format);
    if (strcmp(f->valuestring, format))
        return ssi_jl_fail(r, "this is a \"%.60s\" file; expected \"%s\"", f->valuestring, format);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "version");
    if (!v || !cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || !isfinite(v->valuedouble))
        return ssi_jl_fail(r, "the header has no integer \"version\" (this build reads %s version %d)",
                           format, version);
    if (v->valuedouble != (double)version)
        return ssi_jl_fail(r, "%s version %.0f found; this build reads version %d only: %s",
                           format, v->valuedouble, version, what_to_rerun);
    return SS_OK;
}

/* ================================ JSON Lines writing ========================================= */

void ssi_jl_writer_init(ssi_jl_writer *w) { memset(w, 0, sizeof *w); }

void ssi_jl_writer_free(ssi_jl_writer *w) {
    free(w->buf);
    memset(w, 0, sizeof *w);
}

cJSON *ssi_jl_obj(ssi_jl_writer *w) {
    if (w->st) return NULL;
    cJSON *o = cJSON_CreateObject();
    if (!o) w->st = SS_ERR_HOST_OOM;
    return o;
}

static void put_raw(ssi_jl_writer *w, cJSON *o, const char *key, const char *raw) {
    if (w->st || !o) return;
    if (!cJSON_AddRawToObject(o, key, raw)) w->st = SS_ERR_HOST_OOM;
}

void ssi_jl_put_u64(ssi_jl_writer *w, cJSON *o, const char *key, uint64_t v) {
    char b[32];
    if (v <= ((uint64_t)1 << 53)) snprintf(b, sizeof b, "%" PRIu64, v);
    else snprintf(b, sizeof b, "\"0x%" PRIx64 "\"", v);
    put_raw(w, o, key, b);
}

void ssi_jl_put_hex(ssi_jl_writer *w, cJSON *o, const char *key, uint64_t v) {
    char b[32];
    snprintf(b, sizeof b, "\"0x%016" PRIx64 "\"", v);
    put_raw(w, o, key, b);
}

void ssi_jl_put_i64(ssi_jl_writer *w, cJSON *o, const char *key, int64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%" PRId64, v);
    put_raw(w, o, key, b);
}

/* The shortest of %.15g/%.16g/%.17g that reads back as exactly d; non-finite values (which
 * JSON cannot hold) become null. */
static void fmt_double(char *b, size_t n, double d) {
    if (!isfinite(d)) { snprintf(b, n, "null"); return; }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(b, n, "%.*g", prec, d);
        if (strtod(b, NULL) == d) break;
    }
}

void ssi_jl_put_double(ssi_jl_writer *w, cJSON *o, const char *key, double v) {
    char b[40];
    fmt_double(b, sizeof b, v);
    put_raw(w, o, key, b);
}

void ssi_jl_put_str(ssi_jl_writer *w, cJSON *o, const char *key, const char *v) {
    if (w->st || !o) return;
    if (!cJSON_AddStringToObject(o, key, v ? v : "")) w->st = SS_ERR_HOST_OOM;
}

void ssi_jl_put_bool(ssi_jl_writer *w, cJSON *o, const char *key, int v) {
    if (w->st || !o) return;
    if (!cJSON_AddBoolToObject(o, key, v ? 1 : 0)) w->st = SS_ERR_HOST_OOM;
}

void ssi_jl_put_null(ssi_jl_writer *w, cJSON *o, const char *key) {
    if (w->st || !o) return;
    if (!cJSON_AddNullToObject(o, key)) w->st = SS_ERR_HOST_OOM;
}

/* Arrays of integers are added as raw text "[1,2,3]" so that every value prints exactly. */
static void put_int_array(ssi_jl_writer *w, cJSON *o, const char *key, const uint32_t *u,
                          const int64_t *s, size_t n) {
    if (w->st || !o) return;
    size_t cap = 3 + n * 22;
    char *b = malloc(cap);
    if (!b) { w->st = SS_ERR_HOST_OOM; return; }
    size_t len = 0;
    b[len++] = '[';
    for (size_t i = 0; i < n; i++) {
        if (i) b[len++] = ',';
        if (u) len += (size_t)snprintf(b + len, cap - len, "%" PRIu32, u[i]);
        else len += (size_t)snprintf(b + len, cap - len, "%" PRId64, s[i]);
    }
    b[len++] = ']';
    b[len] = 0;
    put_raw(w, o, key, b);
    free(b);
}

void ssi_jl_put_u32_array(ssi_jl_writer *w, cJSON *o, const char *key, const uint32_t *v, size_t n) {
    put_int_array(w, o, key, v, NULL, n);
}

void ssi_jl_put_i64_array(ssi_jl_writer *w, cJSON *o, const char *key, const int64_t *v, size_t n) {
    put_int_array(w, o, key, NULL, v, n);
}

void ssi_jl_line(ssi_jl_writer *w, cJSON *o) {
    if (!o) { if (!w->st) w->st = SS_ERR_HOST_OOM; return; }
    if (w->st) { cJSON_Delete(o); return; }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) { w->st = SS_ERR_HOST_OOM; return; }
    size_t n = strlen(s);
    if (ssi_grow(&w->buf, &w->cap, w->len + n + 2, 1)) { free(s); w->st = SS_ERR_HOST_OOM; return; }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len++] = '\n';
    w->buf[w->len] = 0;
    free(s);
}

ss_status ssi_jl_writer_take(ssi_jl_writer *w, char **out, size_t *len) {
    ss_status st = w->st;
    if (st) { ssi_jl_writer_free(w); return st; }
    if (!w->buf && ssi_grow(&w->buf, &w->cap, 1, 1)) return SS_ERR_HOST_OOM;
    w->buf[w->len] = 0;
    *out = w->buf;
    *len = w->len;
    memset(w, 0, sizeof *w);
    return SS_OK;
}

ss_status ssi_jl_writer_commit(ssi_jl_writer *w, const char *path) {
    ss_status st = w->st;
    if (!st) st = ssi_write_file_atomic(path, w->buf ? w->buf : "", w->len);
    ssi_jl_writer_free(w);
    return st;
}

/* ================================ profiles =================================================== */

static const char *const phase_names[4] = {"fwd", "bwd", "opt", "other"};

const char *ssi_phase_name(uint32_t phase) { return phase < 4 ? phase_names[phase] : "?"; }

int ssi_phase_from_name(const char *name) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(phase_names[i], name)) return i;
    return -1;
}

#define set_err ssi_report

ss_status ssi_profile_to_buffer(const ss_profile *p, char **out, size_t *len, char *err, size_t err_len) {
    if (!p || !out || !len) return SS_ERR_INVALID;
    if (p->npend) {
        set_err(err, err_len, "profile has %zu pending uses: finalize it before writing", p->npend / 2);
        return SS_ERR_INVALID;
    }
    char cerr[200];
    if (ssi_profile_check(p, cerr, sizeof cerr)) {
        set_err(err, err_len, "profile is inconsistent, not written: %s", cerr);
        return SS_ERR_INVALID;
    }
    for (uint32_t t = 0; t < p->ntensors; t++)
        if (p->tensors[t].flags & ~(uint32_t)(SS_TENSOR_SAVED | SS_TENSOR_NOSWAP)) {
            set_err(err, err_len, "tensor %u has flag bits the format does not know (0x%x)", t, p->tensors[t].flags);
            return SS_ERR_INVALID;
        }
    ssi_jl_writer w;
    ssi_jl_writer_init(&w);
    cJSON *o = ssi_jl_obj(&w);
    ssi_jl_put_str(&w, o, "format", SSI_PROFILE_FORMAT);
    ssi_jl_put_u64(&w, o, "version", SSI_PROFILE_VERSION);
    ssi_jl_put_str(&w, o, "desc", p->desc);
    ssi_jl_put_hex(&w, o, "seq_hash", p->seq_hash);
    ssi_jl_put_hex(&w, o, "size_sig", p->size_sig);
    ssi_jl_put_u64(&w, o, "base_bytes", p->base_bytes);
    ssi_jl_put_double(&w, o, "iter_seconds", p->iter_seconds);
    ssi_jl_put_u64(&w, o, "names", p->nnames);
    ssi_jl_put_u64(&w, o, "ops", p->nops);
    ssi_jl_put_u64(&w, o, "tensors", p->ntensors);
    ssi_jl_put_u64(&w, o, "uses", p->nuses);
    ssi_jl_line(&w, o);
    for (uint32_t i = 0; i < p->nnames && !w.st; i++) {
        o = ssi_jl_obj(&w);
        ssi_jl_put_u64(&w, o, "name", i);
        ssi_jl_put_str(&w, o, "str", p->names[i]);
        ssi_jl_line(&w, o);
    }
    for (uint32_t i = 0; i < p->nops && !w.st; i++) {
        const ss_prof_op *op = &p->ops[i];
        o = ssi_jl_obj(&w);
        ssi_jl_put_u64(&w, o, "op", i);
        ssi_jl_put_u64(&w, o, "name", op->name);
        ssi_jl_put_str(&w, o, "phase", ssi_phase_name(op->phase));
        ssi_jl_put_hex(&w, o, "site", op->site);
        ssi_jl_put_u64(&w, o, "mem", op->mem_after);
        if (op->mem_peak > op->mem_after) ssi_jl_put_u64(&w, o, "peak", op->mem_peak);
        ssi_jl_put_double(&w, o, "flops", op->flops);
        ssi_jl_put_double(&w, o, "seconds", op->seconds);
        ssi_jl_line(&w, o);
    }
    for (uint32_t i = 0; i < p->ntensors && !w.st; i++) {
        const ss_prof_tensor *t = &p->tensors[i];
        o = ssi_jl_obj(&w);
        ssi_jl_put_u64(&w, o, "tensor", i);
        ssi_jl_put_u64(&w, o, "bytes", t->bytes);
        ssi_jl_put_str(&w, o, "dtype", ssi_dtype_name(t->dtype));
        ssi_jl_put_i64_array(&w, o, "shape", t->shape, t->ndim);
        ssi_jl_put_u64(&w, o, "producer", t->producer);
        ssi_jl_put_u32_array(&w, o, "uses", p->uses + t->use_off, t->nuses);
        if (t->release == SS_NONE) ssi_jl_put_null(&w, o, "release");
        else ssi_jl_put_u64(&w, o, "release", t->release);
        ssi_jl_put_bool(&w, o, "saved", (t->flags & SS_TENSOR_SAVED) != 0);
        ssi_jl_put_bool(&w, o, "noswap", (t->flags & SS_TENSOR_NOSWAP) != 0);
        if (t->rc_nop) {
            ssi_jl_put_u32_array(&w, o, "rc_ops", t->rc_op, t->rc_nop);
            ssi_jl_put_u32_array(&w, o, "rc_from", t->rc_src, t->rc_nsrc);
        }
        if (t->span_nop) {
            uint32_t sp[2] = {t->span_first, t->span_first + t->span_nop - 1};
            ssi_jl_put_u32_array(&w, o, "rc_span", sp, 2);
        }
        ssi_jl_line(&w, o);
    }
    ss_status st = ssi_jl_writer_take(&w, out, len);
    if (st) set_err(err, err_len, "out of memory serializing the profile");
    return st;
}

ss_status ssi_profile_write(const ss_profile *p, const char *path, char *err, size_t err_len) {
    char *buf;
    size_t len;
    ss_status st = ssi_profile_to_buffer(p, &buf, &len, err, err_len);
    if (st) return st;
    st = ssi_write_file_atomic(path, buf, len);
    free(buf);
    if (st) set_err(err, err_len, "%s: cannot write the profile (%s)", path, ss_status_str(st));
    return st;
}

/* ---- reading ------------------------------------------------------------------------------ */

/* Open-addressing set of name ids keyed by their string, to reject duplicate names. */
typedef struct name_set { uint32_t *slot; size_t cap, n; } name_set;

/* Inserts id (whose string is names[id]); returns the id of an equal name already present,
 * SS_NONE when new, or SS_NONE - 1 when memory ran out. */
static uint32_t name_set_add(name_set *s, char **names, uint32_t id) {
    if ((s->n + 1) * 2 > s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        uint32_t *ns = malloc(nc * sizeof *ns);
        if (!ns) return SS_NONE - 1;
        for (size_t i = 0; i < nc; i++) ns[i] = SS_NONE;
        for (size_t i = 0; i < s->cap; i++) {
            if (s->slot[i] == SS_NONE) continue;
            size_t j = ssi_hash_str(names[s->slot[i]]) & (nc - 1);
            while (ns[j] != SS_NONE) j = (j + 1) & (nc - 1);
            ns[j] = s->slot[i];
        }
        free(s->slot);
        s->slot = ns;
        s->cap = nc;
    }
    size_t j = ssi_hash_str(names[id]) & (s->cap - 1);
    while (s->slot[j] != SS_NONE) {
        if (!strcmp(names[s->slot[j]], names[id])) return s->slot[j];
        j = (j + 1) & (s->cap - 1);
    }
    s->slot[j] = id;
    s->n++;
    return SS_NONE;
}

typedef struct prof_hdr {
    uint32_t names, ops, tensors;
    uint64_t uses;
} prof_hdr;

static ss_status read_header(ssi_jl_reader *r, const cJSON *o, ss_profile *p, prof_hdr *h) {
    ss_status st = ssi_jl_header(r, o, SSI_PROFILE_FORMAT, SSI_PROFILE_VERSION,
                                 "regenerate it with `smartswap trace gen` or profile the run again");
    const char *desc;
    if (!st) st = ssi_jl_str(r, o, "desc", sizeof p->desc - 1, &desc);
    if (!st) memcpy(p->desc, desc, strlen(desc) + 1);
    if (!st) st = ssi_jl_u64(r, o, "seq_hash", 0, UINT64_MAX, &p->seq_hash);
    if (!st) st = ssi_jl_u64(r, o, "size_sig", 0, UINT64_MAX, &p->size_sig);
    if (!st) st = ssi_jl_u64(r, o, "base_bytes", 0, MAX_BYTES, &p->base_bytes);
    if (!st) st = ssi_jl_double(r, o, "iter_seconds", 0, 1e9, &p->iter_seconds);
    if (!st) st = ssi_jl_u32(r, o, "names", 0, SS_NONE - 1, &h->names);
    if (!st) st = ssi_jl_u32(r, o, "ops", 0, SS_NONE - 1, &h->ops);
    if (!st) st = ssi_jl_u32(r, o, "tensors", 0, SS_NONE - 1, &h->tensors);
    if (!st) st = ssi_jl_u64(r, o, "uses", 0, (uint64_t)h->ops * h->tensors, &h->uses);
    return st;
}

static ss_status read_name(ssi_jl_reader *r, const cJSON *o, ss_profile *p, const prof_hdr *h, name_set *set) {
    uint32_t id;
    const char *s;
    ss_status st = ssi_jl_u32(r, o, "name", 0, SS_NONE - 1, &id);
    if (!st && id != p->nnames) return ssi_jl_fail(r, "name %u out of sequence: expected name %u", id, p->nnames);
    if (!st && id >= h->names) return ssi_jl_fail(r, "more names than the header's %u", h->names);
    if (!st) st = ssi_jl_str(r, o, "str", MAX_NAME_LEN, &s);
    if (st) return st;
    if (!*s) return ssi_jl_fail(r, "name %u is empty", id);
    if (ssi_grow(&p->names, &p->cap_names, (size_t)p->nnames + 1, sizeof *p->names))
        return reader_fail_st(r, SS_ERR_HOST_OOM, r->line, "out of memory");
    char *d = ssi_strdup(s);
    if (!d) return reader_fail_st(r, SS_ERR_HOST_OOM, r->line, "out of memory");
    p->names[p->nnames] = d;
    uint32_t dup = name_set_add(set, p->names, id);
    if (dup == SS_NONE - 1) { free(d); return reader_fail_st(r, SS_ERR_HOST_OOM, r->line, "out of memory"); }
    if (dup != SS_NONE) { free(d); return ssi_jl_fail(r, "name %u \"%.60s\" repeats name %u", id, s, dup); }
    p->nnames++;
    return SS_OK;
}

static ss_status read_op(ssi_jl_reader *r, const cJSON *o, ss_profile *p, const prof_hdr *h) {
    uint32_t idx;
    ss_prof_op op;
    memset(&op, 0, sizeof op);
    const char *phase;
    ss_status st = ssi_jl_u32(r, o, "op", 0, SS_NONE - 1, &idx);
    if (!st && idx != p->nops) return ssi_jl_fail(r, "op %u out of sequence: expected op %u", idx, p->nops);
    if (!st && idx >= h->ops) return ssi_jl_fail(r, "more ops than the header's %u", h->ops);
    if (!st && !p->nnames) return ssi_jl_fail(r, "op %u names operator names, but the file has none", idx);
    if (!st) st = ssi_jl_u32(r, o, "name", 0, p->nnames - 1, &op.name);
    if (!st) st = ssi_jl_str(r, o, "phase", 16, &phase);
    if (!st) {
        int ph = ssi_phase_from_name(phase);
        if (ph < 0) return ssi_jl_fail(r, "field 'phase': \"%s\" is not fwd, bwd, opt or other", phase);
        op.phase = (uint32_t)ph;
    }
    if (!st) st = ssi_jl_u64(r, o, "site", 0, UINT64_MAX, &op.site);
    if (!st) st = ssi_jl_u64(r, o, "mem", 0, MAX_BYTES, &op.mem_after);
    if (!st && cJSON_GetObjectItemCaseSensitive(o, "peak"))
        st = ssi_jl_u64(r, o, "peak", op.mem_after, MAX_BYTES, &op.mem_peak);
    if (!st) st = ssi_jl_double(r, o, "flops", 0, 1e30, &op.flops);
    if (!st) st = ssi_jl_double(r, o, "seconds", 0, 1e9, &op.seconds);
    if (st) return st;
    st = ssi_profile_add_op(p, &op, NULL);
    if (st) return reader_fail_st(r, st, r->line, "out of memory");
    return SS_OK;
}

static ss_status read_tensor(ssi_jl_reader *r, const cJSON *o, ss_profile *p, const prof_hdr *h) {
    uint32_t idx;
    ss_prof_tensor t;
    memset(&t, 0, sizeof t);
    const char *dtype;
    const cJSON *arr;
    size_t n;
    uint64_t x;
    int saved, noswap;
    ss_status st = ssi_jl_u32(r, o, "tensor", 0, SS_NONE - 1, &idx);
    if (!st && idx != p->ntensors) return ssi_jl_fail(r, "tensor %u out of sequence: expected tensor %u", idx, p->ntensors);
    if (!st && idx >= h->tensors) return ssi_jl_fail(r, "more tensors than the header's %u", h->tensors);
    if (!st && !p->nops) return ssi_jl_fail(r, "tensor %u refers to operators, but the file has none", idx);
    if (!st) st = ssi_jl_u64(r, o, "bytes", 1, MAX_BYTES, &t.bytes);
    if (!st) st = ssi_jl_str(r, o, "dtype", 16, &dtype);
    if (!st) {
        int d = ssi_dtype_from_name(dtype);
        if (d < 0) return ssi_jl_fail(r, "field 'dtype': unknown dtype \"%s\"", dtype);
        t.dtype = (uint32_t)d;
    }
    if (!st) st = ssi_jl_array(r, o, "shape", SS_MAX_DIMS, &arr, &n);
    if (!st) {
        t.ndim = (uint32_t)n;
        uint32_t d = 0;
        for (const cJSON *c = arr->child; c && !st; c = c->next, d++) {
            char what[40];
            ssi_fmt(what, sizeof what, "shape[%u]", d);
            st = ssi_jl_value_u64(r, c, what, 0, (uint64_t)1 << 53, &x);
            t.shape[d] = (int64_t)x;
        }
    }
    if (!st) st = ssi_jl_u32(r, o, "producer", 0, p->nops - 1, &t.producer);
    if (!st) st = ssi_jl_array(r, o, "uses", p->nops, &arr, &n);
    if (st) return st;
    if (ssi_grow(&p->uses, &p->cap_uses, p->nuses + n, sizeof *p->uses))
        return reader_fail_st(r, SS_ERR_HOST_OOM, r->line, "out of memory");
    uint32_t last = t.producer, k = 0;
    for (const cJSON *c = arr->child; c; c = c->next, k++) {
        char what[40];
        ssi_fmt(what, sizeof what, "uses[%u]", k);
        if ((st = ssi_jl_value_u64(r, c, what, 0, p->nops - 1, &x))) return st;
        if (x < last || (k > 0 && x == last))
            return ssi_jl_fail(r, "uses[%u] = %" PRIu64 ": uses must be ascending, distinct and not before "
                               "the producer (op %u)", k, x, t.producer);
        last = (uint32_t)x;
        p->uses[p->nuses + k] = last;
    }
    const cJSON *rel = cJSON_GetObjectItemCaseSensitive(o, "release");
    if (!rel) return ssi_jl_fail(r, "missing field 'release' (null when the tensor is alive at the end)");
    if (cJSON_IsNull(rel)) t.release = SS_NONE;
    else {
        if ((st = ssi_jl_value_u64(r, rel, "field 'release'", 0, p->nops - 1, &x))) return st;
        if (x < last) return ssi_jl_fail(r, "field 'release': op %" PRIu64 " is before the last use or "
                                         "the producer (op %u)", x, last);
        t.release = (uint32_t)x;
    }
    if ((st = ssi_jl_bool(r, o, "saved", &saved))) return st;
    if ((st = ssi_jl_bool(r, o, "noswap", &noswap))) return st;
    t.flags = (saved ? SS_TENSOR_SAVED : 0) | (noswap ? SS_TENSOR_NOSWAP : 0);
    if (ssi_jl_has(o, "rc_ops")) {   /* optional: how to recompute it */
        const cJSON *ra;
        size_t rn;
        uint32_t rk = 0;
        if ((st = ssi_jl_array(r, o, "rc_ops", 2, &ra, &rn))) return st;
        if (rn == 0) return ssi_jl_fail(r, "field 'rc_ops': empty (leave the field out when not recomputable)");
        t.rc_nop = (uint32_t)rn;
        for (const cJSON *c = ra->child; c; c = c->next, rk++) {
            if ((st = ssi_jl_value_u64(r, c, "rc_ops item", 0, p->nops - 1, &x))) return st;
            t.rc_op[rk] = (uint32_t)x;
        }
        if ((st = ssi_jl_array(r, o, "rc_from", 2, &ra, &rn))) return st;
        t.rc_nsrc = (uint32_t)rn;
        rk = 0;
        for (const cJSON *c = ra->child; c; c = c->next, rk++) {
            if ((st = ssi_jl_value_u64(r, c, "rc_from item", 0, h->tensors - 1, &x))) return st;
            if (x == idx) return ssi_jl_fail(r, "field 'rc_from': tensor %u cannot be rebuilt from itself", idx);
            t.rc_src[rk] = (uint32_t)x;
        }
    }
    if (ssi_jl_has(o, "rc_span")) {   /* optional: the input of a span that rebuilds its saves */
        const cJSON *ra;
        size_t rn;
        uint64_t sp[2] = {0, 0};
        int sk = 0;
        if ((st = ssi_jl_array(r, o, "rc_span", 2, &ra, &rn))) return st;
        if (rn != 2) return ssi_jl_fail(r, "field 'rc_span': give [first, last] operator");
        for (const cJSON *c = ra->child; c; c = c->next, sk++)
            if ((st = ssi_jl_value_u64(r, c, "rc_span item", 0, p->nops - 1, &sp[sk]))) return st;
        if (sp[0] > sp[1]) return ssi_jl_fail(r, "field 'rc_span': first operator %" PRIu64 " after the last %" PRIu64, sp[0], sp[1]);
        t.span_first = (uint32_t)sp[0];
        t.span_nop = (uint32_t)(sp[1] - sp[0] + 1);
    }
    uint32_t ti;
    if ((st = ssi_profile_add_tensor(p, &t, &ti))) return reader_fail_st(r, st, r->line, "out of memory");
    p->tensors[ti].use_off = (uint32_t)p->nuses;
    p->tensors[ti].nuses = (uint32_t)n;
    p->nuses += n;
    if (p->nuses > h->uses) return ssi_jl_fail(r, "more uses than the header's %" PRIu64, h->uses);
    return SS_OK;
}

static ss_status read_profile(ssi_jl_reader *r, ss_profile **out) {
    ss_profile *p;
    if (ssi_profile_new(&p)) return reader_fail_st(r, SS_ERR_HOST_OOM, 0, "out of memory");
    name_set set = {0};
    prof_hdr h = {0};
    const cJSON *o;
    ss_status st = ssi_jl_next(r, &o);
    if (!st && !o) st = ssi_jl_fail(r, "empty file: expected a \"%s\" header line", SSI_PROFILE_FORMAT);
    if (!st) st = read_header(r, o, p, &h);
    int stage = 0;   /* 0 names, 1 ops, 2 tensors: records come in this order */
    while (!st) {
        if ((st = ssi_jl_next(r, &o)) || !o) break;
        int kind = ssi_jl_has(o, "op") ? 1 : ssi_jl_has(o, "tensor") ? 2 : ssi_jl_has(o, "name") ? 0 : -1;
        if (kind < 0) {
            if (cJSON_GetObjectItemCaseSensitive(o, "format"))
                st = ssi_jl_fail(r, "a second header: files cannot be concatenated");
            else
                st = ssi_jl_fail(r, "unknown record: expected a \"name\", \"op\" or \"tensor\" object");
            break;
        }
        if (kind < stage) {
            st = ssi_jl_fail(r, "%s record after the %s records (order: names, ops, tensors)",
                             kind == 0 ? "a name" : "an op", stage == 1 ? "op" : "tensor");
            break;
        }
        if (kind > stage) {
            if (p->nnames != h.names) {
                st = ssi_jl_fail(r, "%u names before the first %s, but the header says %u",
                                 p->nnames, kind == 1 ? "op" : "tensor", h.names);
                break;
            }
            if (kind == 2 && p->nops != h.ops) {
                st = ssi_jl_fail(r, "%u ops before the first tensor, but the header says %u", p->nops, h.ops);
                break;
            }
            stage = kind;
        }
        st = kind == 0 ? read_name(r, o, p, &h, &set) : kind == 1 ? read_op(r, o, p, &h) : read_tensor(r, o, p, &h);
    }
    if (!st) {
        /* r->line is the last line read: counts short of the header mean a truncated file */
        if (p->nnames != h.names || p->nops != h.ops || p->ntensors != h.tensors)
            st = ssi_jl_fail(r, "the file ends after %u of %u names, %u of %u ops and %u of %u tensors "
                             "(truncated?)", p->nnames, h.names, p->nops, h.ops, p->ntensors, h.tensors);
        else if (p->nuses != h.uses)
            st = ssi_jl_fail(r, "the tensors list %zu uses, but the header says %" PRIu64, p->nuses, h.uses);
    }
    if (!st) {
        char cerr[200];
        if (ssi_profile_check(p, cerr, sizeof cerr)) {
            r->line = 0;
            st = ssi_jl_fail(r, "inconsistent profile: %s", cerr);
        }
    }
    free(set.slot);
    if (st) { ssi_profile_free(p); return st; }
    *out = p;
    return SS_OK;
}

ss_status ssi_profile_read(const char *path, ss_profile **out, char *err, size_t err_len) {
    if (!path || !out) return SS_ERR_INVALID;
    ssi_jl_reader r;
    ss_status st = ssi_jl_open(&r, path, err, err_len);
    if (!st) st = read_profile(&r, out);
    ssi_jl_close(&r);
    return st;
}

ss_status ssi_profile_read_buffer(const char *data, size_t len, const char *name, ss_profile **out,
                                  char *err, size_t err_len) {
    if (!out) return SS_ERR_INVALID;
    ssi_jl_reader r;
    ssi_jl_open_buffer(&r, data, len, name, err, err_len);
    ss_status st = read_profile(&r, out);
    ssi_jl_close(&r);
    return st;
}

/* ---- totals ------------------------------------------------------------------------------- */

void ssi_profile_stats_get(const ss_profile *p, ssi_profile_stats *s) {
    memset(s, 0, sizeof *s);
    s->ops = p->nops;
    s->tensors = p->ntensors;
    s->uses = p->nuses;
    s->base_bytes = p->base_bytes;
    s->iter_seconds = p->iter_seconds;
    s->peak_op = SS_NONE;
    for (uint32_t i = 0; i < p->nops; i++) {
        const ss_prof_op *o = &p->ops[i];
        uint32_t ph = o->phase < 4 ? o->phase : SS_PHASE_OTHER;
        s->ops_phase[ph]++;
        s->flops += o->flops;
        s->flops_phase[ph] += o->flops;
        s->op_seconds += o->seconds;
        if (s->peak_op == SS_NONE || o->mem_after > s->peak_bytes) { s->peak_bytes = o->mem_after; s->peak_op = i; }
    }
    s->peak_activation_bytes = s->peak_bytes > p->base_bytes ? s->peak_bytes - p->base_bytes : 0;
    /* saved bytes alive after each op: a sweep over producer (+) and release (-) points (a tensor
     * released at op r is not alive after r) */
    int64_t *delta = p->nops ? calloc((size_t)p->nops + 1, sizeof *delta) : NULL;
    for (uint32_t t = 0; t < p->ntensors; t++) {
        const ss_prof_tensor *x = &p->tensors[t];
        if (x->flags & SS_TENSOR_SAVED) { s->saved_tensors++; s->saved_bytes += x->bytes; }
        else { s->temp_tensors++; s->temp_bytes += x->bytes; }
        if (x->flags & SS_TENSOR_NOSWAP) s->noswap_tensors++;
        if (delta && (x->flags & SS_TENSOR_SAVED) && x->producer < p->nops) {
            delta[x->producer] += (int64_t)x->bytes;
            if (x->release != SS_NONE && x->release < p->nops) delta[x->release] -= (int64_t)x->bytes;
        }
    }
    if (delta) {
        int64_t cur = 0;
        for (uint32_t i = 0; i < p->nops; i++) {
            cur += delta[i];
            if (cur > 0 && (uint64_t)cur > s->max_saved_alive_bytes) s->max_saved_alive_bytes = (uint64_t)cur;
        }
        free(delta);
    }
}

/* ---- saved bytes by layer ------------------------------------------------------------------ */

/* Longest run of k in [0, n - per) with id[k] == id[k + per]: its start in *start, its length
 * returned. */
static uint32_t repeat_run(const uint32_t *id, uint32_t n, uint32_t per, uint32_t *start) {
    uint32_t best = 0, run = 0;
    *start = 0;
    for (uint32_t k = 0; k + per < n; k++) {
        if (id[k] == id[k + per]) {
            if (++run > best) { best = run; *start = k + 1 - run; }
        } else {
            run = 0;
        }
    }
    return best;
}

/* The repeated block of the sequence id[0..n) (ids < nids): the block length is one of the most
 * common distances between two occurrences of one id; of the 8 most common, the one covering the
 * most positions in whole blocks wins (the shortest on a tie: a block of two layers covers as much
 * as one layer). A run counts only when it covers two thirds of the sequence or more (two matmuls in a
 * row are not two layers). *blocks = 0 when nothing repeats so. SS_ERR_HOST_OOM. */
static ss_status find_block(const uint32_t *id, uint32_t n, uint32_t nids, uint32_t *per_out,
                            uint32_t *blocks_out, uint32_t *start_out) {
    *per_out = *blocks_out = *start_out = 0;
    uint32_t *last = malloc(((size_t)nids + 1) * sizeof *last);
    uint32_t *hist = calloc((size_t)n + 1, sizeof *hist);         /* distance -> count */
    if (!last || !hist) { free(last); free(hist); return SS_ERR_HOST_OOM; }
    for (uint32_t j = 0; j < nids; j++) last[j] = SS_NONE;
    for (uint32_t k = 0; k < n; k++) {
        if (last[id[k]] != SS_NONE) hist[k - last[id[k]]]++;
        last[id[k]] = k;
    }
    for (int c = 0; c < 8; c++) {
        uint32_t per = 0;
        for (uint32_t d = 1; d <= n; d++)
            if (hist[d] && (!per || hist[d] > hist[per])) per = d;
        if (!per) break;
        hist[per] = 0;
        uint32_t start, run = repeat_run(id, n, per, &start);
        uint32_t blocks = (run + per) / per;
        if (blocks < 2 || 3 * (uint64_t)blocks * per < 2 * (uint64_t)n) continue;   /* layers: most of the forward */
        uint64_t cover = (uint64_t)blocks * per, best = (uint64_t)*blocks_out * *per_out;
        if (cover > best || (cover == best && per < *per_out)) {
            *per_out = per; *blocks_out = blocks; *start_out = start;
        }
    }
    free(last);
    free(hist);
    return SS_OK;
}

static int cmp_key(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

ss_status ssi_profile_layers_get(const ss_profile *p, ssi_profile_layers *out) {
    memset(out, 0, sizeof *out);
    out->largest = out->largest_layer = out->max_saved = out->max_saved_loss = SS_NONE;
    uint32_t n = 0, nops = p->nops;
    for (uint32_t i = 0; i < nops; i++) n += p->ops[i].phase == SS_PHASE_FWD;
    uint32_t *fwd = malloc(((size_t)n + 1) * sizeof *fwd);        /* forward position -> op */
    uint32_t *id = malloc(((size_t)n + 1) * sizeof *id);          /* forward position -> key id */
    uint32_t *pos = malloc(((size_t)nops + 1) * sizeof *pos);     /* op -> forward position */
    uint64_t *key = malloc(((size_t)n + 1) * sizeof *key), *uniq = malloc(((size_t)n + 1) * sizeof *uniq);
    uint64_t *lay = NULL;
    ss_status st = SS_OK;
    if (!fwd || !id || !pos || !key || !uniq) { st = SS_ERR_HOST_OOM; goto done; }
    for (uint32_t i = 0, k = 0; i < nops; i++) {
        pos[i] = SS_NONE;
        if (p->ops[i].phase != SS_PHASE_FWD) continue;
        fwd[k] = i;
        key[k] = (p->ops[i].site ^ ((uint64_t)p->ops[i].name * 0x9e3779b97f4a7c15ull)) + p->ops[i].name;
        pos[i] = k++;
    }
    /* first by (name, call site), as a framework's layers share code; where nothing repeats so
     * (call sites that differ per layer), by name alone */
    uint32_t per = 0, blocks = 0, start = 0;
    memcpy(uniq, key, (size_t)n * sizeof *uniq);
    qsort(uniq, n, sizeof *uniq, cmp_key);
    uint32_t nu = 0;
    for (uint32_t k = 0; k < n; k++) if (!nu || uniq[nu - 1] != uniq[k]) uniq[nu++] = uniq[k];
    for (uint32_t k = 0; k < n; k++) {
        const uint64_t *f = bsearch(&key[k], uniq, nu, sizeof *uniq, cmp_key);
        id[k] = (uint32_t)(f - uniq);
    }
    if ((st = find_block(id, n, nu, &per, &blocks, &start))) goto done;
    if (blocks < 2) {
        for (uint32_t k = 0; k < n; k++) id[k] = p->ops[fwd[k]].name < p->nnames ? p->ops[fwd[k]].name : 0;
        if ((st = find_block(id, n, p->nnames ? p->nnames : 1, &per, &blocks, &start))) goto done;
    }
    if (blocks >= 2) {
        out->layers = blocks;
        out->block_ops = per;
        out->first_op = fwd[start];
        uint32_t end = start + blocks * per;                     /* forward position after them */
        out->end_op = end < n ? fwd[end] : fwd[end - 1] + 1;
        lay = calloc(blocks, sizeof *lay);
        if (!lay) { st = SS_ERR_HOST_OOM; goto done; }
    }
    uint64_t max_bytes = 0, largest_bytes = 0, loss_bytes = 0;
    for (uint32_t t = 0; t < p->ntensors; t++) {
        const ss_prof_tensor *x = &p->tensors[t];
        if (!(x->flags & SS_TENSOR_SAVED)) continue;
        if (out->max_saved == SS_NONE || x->bytes > max_bytes) { out->max_saved = t; max_bytes = x->bytes; }
        uint32_t k = x->producer < nops ? pos[x->producer] : SS_NONE;
        if (k == SS_NONE) { out->saved_elsewhere += x->bytes; continue; }
        if (!lay || k < start) { out->saved_before += x->bytes; continue; }
        uint32_t l = (k - start) / per;
        if (l >= blocks) {
            out->saved_after += x->bytes;
            if (out->max_saved_loss == SS_NONE || x->bytes > loss_bytes) { out->max_saved_loss = t; loss_bytes = x->bytes; }
            continue;
        }
        lay[l] += x->bytes;
        out->saved_layers += x->bytes;
        if (out->largest == SS_NONE || x->bytes > largest_bytes) {
            out->largest = t;
            out->largest_layer = l;
            largest_bytes = x->bytes;
        }
    }
    if (lay) {
        out->saved_min = out->saved_max = lay[0];
        for (uint32_t l = 1; l < blocks; l++) {
            if (lay[l] < out->saved_min) out->saved_min = lay[l];
            if (lay[l] > out->saved_max) out->saved_max = lay[l];
        }
        if (out->largest != SS_NONE) out->largest_layer_saved = lay[out->largest_layer];
    }
done:
    free(lay); free(fwd); free(id); free(pos); free(key); free(uniq);
    if (st) {
        memset(out, 0, sizeof *out);
        out->largest = out->largest_layer = out->max_saved = out->max_saved_loss = SS_NONE;
    }
    return st;
}

uint64_t ssi_profile_desc_tokens(const char *desc) {
    const char *g = desc ? strstr(desc, "trace gen ") : NULL;
    const char *q = g ? strstr(g, " b=") : NULL;
    unsigned long long b = 0, s = 0;
    if (!q || sscanf(q, " b=%llu s=%llu", &b, &s) != 2) return 0;
    return b * s;
}
