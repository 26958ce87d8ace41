/* plan.c: the swap plan container of plan.h (build, sort, check, compare, checkpoints) and the
 * plan file: versioned JSON Lines written and read through libcjson (format in
 * docs/trace-format.md, "Plan files"). The policy generator (policy.c) fills plans, the simulator (sim.c)
 * replays them, the `smartswap plan` command writes them and the executor reads them.
 *
 * Reader rules (as for profiles): every fault is reported as "FILE:LINE: what is wrong", a
 * version mismatch says what to re-run, and no input makes the reader crash or leak.
 */
#include "plan.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

/* ---- container --------------------------------------------------------------------------- */

ss_status ssi_plan_new(ss_plan **out) {
    if (!out) return SS_ERR_INVALID;
    ss_plan *p = calloc(1, sizeof *p);
    if (!p) return SS_ERR_HOST_OOM;
    *out = p;
    return SS_OK;
}

void ssi_plan_free(ss_plan *p) {
    if (!p) return;
    for (uint32_t i = 0; i < p->nnames; i++) free(p->names[i]);
    free(p->names);
    free(p->entries);
    free(p->ck);
    free(p);
}

void ssi_plan_clear(ss_plan *p) {
    if (!p) return;
    for (uint32_t i = 0; i < p->nnames; i++) free(p->names[i]);
    p->nnames = 0;
    p->nentries = 0;
    free(p->ck);
    p->ck = NULL;
    p->nck = p->ck_every = p->nops = 0;
    p->seq_hash = p->size_sig = p->budget_bytes = 0;
    p->peak_before = p->peak_after = p->swapped_bytes = p->host_bytes = p->peak_reserved = 0;
    p->stall_s = p->iter_s = 0;
    p->feasible = 0;
    p->min_budget_bytes = 0;
    p->desc[0] = 0;
}

ss_status ssi_plan_intern(ss_plan *p, const char *name, uint32_t *id) {
    if (!p || !name || !id) return SS_ERR_INVALID;
    for (uint32_t i = 0; i < p->nnames; i++)
        if (strcmp(p->names[i], name) == 0) { *id = i; return SS_OK; }
    if (ssi_grow(&p->names, &p->cap_names, (size_t)p->nnames + 1, sizeof *p->names))
        return SS_ERR_HOST_OOM;
    char *d = ssi_strdup(name);
    if (!d) return SS_ERR_HOST_OOM;
    p->names[p->nnames] = d;
    *id = p->nnames++;
    return SS_OK;
}

ss_status ssi_plan_add_entry(ss_plan *p, const ss_plan_entry *e) {
    if (!p || !e) return SS_ERR_INVALID;
    if (p->nentries == UINT32_MAX) return SS_ERR_INVALID;
    if (ssi_grow(&p->entries, &p->cap_entries, (size_t)p->nentries + 1, sizeof *p->entries))
        return SS_ERR_HOST_OOM;
    p->entries[p->nentries++] = *e;
    return SS_OK;
}

static int entry_cmp(const void *x, const void *y) {
    const ss_plan_entry *a = x, *b = y;
    if (a->out_op != b->out_op) return a->out_op < b->out_op ? -1 : 1;
    if (a->tensor != b->tensor) return a->tensor < b->tensor ? -1 : 1;
    return 0;
}

void ssi_plan_sort(ss_plan *p) {
    if (p && p->nentries > 1) qsort(p->entries, p->nentries, sizeof *p->entries, entry_cmp);
}

ss_status ssi_plan_entry_from_tensor(ss_plan *p, const ss_profile *prof, uint32_t t,
                                     ss_plan_entry *e) {
    if (!p || !prof || !e || t >= prof->ntensors) return SS_ERR_INVALID;
    const ss_prof_tensor *x = &prof->tensors[t];
    const ss_prof_op *op = &prof->ops[x->producer];
    memset(e, 0, sizeof *e);
    ss_status st = ssi_plan_intern(p, prof->names[op->name], &e->name);
    if (st) return st;
    e->site = op->site;
    e->dtype = x->dtype;
    e->ndim = x->ndim;
    memcpy(e->shape, x->shape, sizeof e->shape);
    e->bytes = x->bytes;
    /* ordinal: saved tensors before t with the same producer name, site and dtype. Linear in t;
     * callers that fill many entries use the policy's own counting (policy.c). */
    uint32_t ord = 0;
    for (uint32_t u = 0; u < t; u++) {
        const ss_prof_tensor *y = &prof->tensors[u];
        const ss_prof_op *yo = &prof->ops[y->producer];
        if ((y->flags & SS_TENSOR_SAVED) && yo->name == op->name && yo->site == op->site &&
            y->dtype == x->dtype)
            ord++;
    }
    e->ordinal = ord;
    e->tensor = t;
    return SS_OK;
}

ss_status ssi_plan_set_checkpoints(ss_plan *p, const ss_profile *prof, uint32_t every) {
    if (!p || !prof) return SS_ERR_INVALID;
    if (every == 0) every = SS_PLAN_CK_EVERY_DEFAULT;
    uint32_t nck = prof->nops / every;
    uint64_t *ck = NULL, *run = NULL;
    if (nck && !(ck = malloc((size_t)nck * sizeof *ck))) return SS_ERR_HOST_OOM;
    if (prof->nops && !(run = malloc((size_t)prof->nops * sizeof *run))) { free(ck); return SS_ERR_HOST_OOM; }
    uint64_t h = ssi_profile_running_hashes(prof, run);
    for (uint32_t j = 0; j < nck; j++) ck[j] = run[(size_t)(j + 1) * every - 1];
    free(run);
    free(p->ck);
    p->ck = ck;
    p->nck = nck;
    p->ck_every = every;
    p->nops = prof->nops;
    p->seq_hash = prof->seq_hash ? prof->seq_hash : h;
    p->size_sig = prof->size_sig;
    return SS_OK;
}

ss_status ssi_plan_check(const ss_plan *p, char *err, size_t err_len) {
    if (!p) return SS_ERR_INVALID;
    if (!(p->stall_s >= 0) || !(p->iter_s >= 0) || isinf(p->stall_s) || isinf(p->iter_s)) {
        ssi_fmt(err, err_len, "predicted stall or iteration time negative, infinite or NaN");
        return SS_ERR_FORMAT;
    }
    if (p->nck && p->ck_every == 0) {
        ssi_fmt(err, err_len, "%u checkpoints but ck_every is 0", p->nck);
        return SS_ERR_FORMAT;
    }
    if (p->ck_every && p->nck != p->nops / p->ck_every) {
        ssi_fmt(err, err_len, "%u checkpoints, expected %u (%u operators, one every %u)",
                p->nck, p->nops / p->ck_every, p->nops, p->ck_every);
        return SS_ERR_FORMAT;
    }
    for (uint32_t i = 0; i < p->nentries; i++) {
        const ss_plan_entry *e = &p->entries[i];
        if (e->name >= p->nnames) {
            ssi_fmt(err, err_len, "entry %u: name id %u but only %u names", i, e->name, p->nnames);
            return SS_ERR_FORMAT;
        }
        if (e->bytes == 0) { ssi_fmt(err, err_len, "entry %u: zero bytes", i); return SS_ERR_FORMAT; }
        if (e->ndim > SS_MAX_DIMS) {
            ssi_fmt(err, err_len, "entry %u: %u dimensions (at most %d)", i, e->ndim, SS_MAX_DIMS);
            return SS_ERR_FORMAT;
        }
        if (e->dtype >= SS_DTYPE_COUNT) {
            ssi_fmt(err, err_len, "entry %u: unknown dtype %u", i, e->dtype);
            return SS_ERR_FORMAT;
        }
        if (!(e->out_op < e->free_op && e->free_op <= e->in_op && e->in_op <= e->use_op &&
              e->use_op < p->nops)) {
            ssi_fmt(err, err_len, "entry %u: points out %u, free %u, in %u, use %u are not in order "
                    "out < free <= in <= use < %u operators", i, e->out_op, e->free_op, e->in_op,
                    e->use_op, p->nops);
            return SS_ERR_FORMAT;
        }
        if (e->action > SS_PLAN_RECOMPUTE) {
            ssi_fmt(err, err_len, "entry %u: unknown action %u", i, e->action);
            return SS_ERR_FORMAT;
        }
        if (i > 0 && p->entries[i - 1].out_op > e->out_op) {
            ssi_fmt(err, err_len, "entry %u: not sorted by swap-out point (%u after %u)", i,
                    e->out_op, p->entries[i - 1].out_op);
            return SS_ERR_FORMAT;
        }
        if (!(e->t_out_done >= 0) || !(e->t_in_done >= 0) || isinf(e->t_out_done) ||
            isinf(e->t_in_done)) {
            ssi_fmt(err, err_len, "entry %u: negative, infinite or NaN predicted time", i);
            return SS_ERR_FORMAT;
        }
    }
    return SS_OK;
}

int ssi_plan_equal(const ss_plan *a, const ss_plan *b) {
    if (!a || !b) return 0;
    if (a->seq_hash != b->seq_hash || a->size_sig != b->size_sig || a->nops != b->nops ||
        a->ck_every != b->ck_every || a->nck != b->nck || a->budget_bytes != b->budget_bytes ||
        a->peak_before != b->peak_before || a->peak_after != b->peak_after ||
        a->swapped_bytes != b->swapped_bytes || a->host_bytes != b->host_bytes ||
        a->stall_s != b->stall_s || a->iter_s != b->iter_s || a->feasible != b->feasible ||
        a->min_budget_bytes != b->min_budget_bytes || a->nnames != b->nnames ||
        a->nentries != b->nentries || strcmp(a->desc, b->desc) != 0)
        return 0;
    for (uint32_t i = 0; i < a->nck; i++)
        if (a->ck[i] != b->ck[i]) return 0;
    for (uint32_t i = 0; i < a->nnames; i++)
        if (strcmp(a->names[i], b->names[i])) return 0;
    for (uint32_t i = 0; i < a->nentries; i++) {
        const ss_plan_entry *x = &a->entries[i], *y = &b->entries[i];
        if (x->name != y->name || x->site != y->site || x->dtype != y->dtype ||
            x->ndim != y->ndim || x->bytes != y->bytes || x->ordinal != y->ordinal ||
            x->tensor != y->tensor || x->out_op != y->out_op || x->free_op != y->free_op ||
            x->in_op != y->in_op || x->use_op != y->use_op || x->t_out_done != y->t_out_done ||
            x->t_in_done != y->t_in_done || x->action != y->action)
            return 0;
        for (uint32_t d = 0; d < x->ndim; d++)
            if (x->shape[d] != y->shape[d]) return 0;
    }
    return 1;
}

int ssi_plan_has_recompute(const ss_plan *plan) {
    if (!plan) return 0;
    for (uint32_t k = 0; k < plan->nentries; k++)
        if (plan->entries[k].action == SS_PLAN_RECOMPUTE) return 1;
    return 0;
}

/* ---- writing ----------------------------------------------------------------------------- */

typedef struct sbuf { char *s; size_t n, cap; int oom; } sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (ssi_grow(&b->s, &b->cap, b->n + n + 1, 1)) { b->oom = 1; return; }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

/* Appends item as one line (consumes item). */
static void sb_line(sbuf *b, cJSON *item) {
    if (!item) { b->oom = 1; return; }
    char *t = cJSON_PrintUnformatted(item);
    cJSON_Delete(item);
    if (!t) { b->oom = 1; return; }
    sb_put(b, t, strlen(t));
    sb_put(b, "\n", 1);
    free(t);
}

static void hex64(char out[19], uint64_t v) { snprintf(out, 19, "0x%016" PRIx64, v); }

/* cJSON helpers that flag out-of-memory instead of checking each call. */
static void add_num(cJSON *o, const char *k, double v, int *oom) {
    if (!cJSON_AddNumberToObject(o, k, v)) *oom = 1;
}
/* Doubles as %.17g text: cJSON's own printing may keep 15 digits, which does not round-trip. */
static void add_dbl(cJSON *o, const char *k, double v, int *oom) {
    char t[40];
    snprintf(t, sizeof t, "%.17g", v);
    if (!cJSON_AddRawToObject(o, k, t)) *oom = 1;
}
static void add_hex(cJSON *o, const char *k, uint64_t v, int *oom) {
    char h[19];
    hex64(h, v);
    if (!cJSON_AddStringToObject(o, k, h)) *oom = 1;
}

ss_status ssi_plan_format(const ss_plan *p, char **text, size_t *len) {
    if (!p || !text) return SS_ERR_INVALID;
    char err[200];
    if (ssi_plan_check(p, err, sizeof err) != SS_OK) {
        SS_ERROR("plan: refusing to write an invalid plan: %s", err);
        return SS_ERR_INVALID;
    }
    sbuf b = {0};
    int oom = 0;
    cJSON *h = cJSON_CreateObject();
    if (!h) return SS_ERR_HOST_OOM;
    if (!cJSON_AddStringToObject(h, "format", SS_PLAN_FORMAT)) oom = 1;
    add_num(h, "version", SS_PLAN_VERSION, &oom);
    if (!cJSON_AddStringToObject(h, "desc", p->desc)) oom = 1;
    add_hex(h, "seq_hash", p->seq_hash, &oom);
    add_hex(h, "size_sig", p->size_sig, &oom);
    add_num(h, "nops", p->nops, &oom);
    add_num(h, "ck_every", p->ck_every, &oom);
    add_num(h, "checkpoints", p->nck, &oom);
    add_num(h, "entries", p->nentries, &oom);
    add_num(h, "budget_bytes", (double)p->budget_bytes, &oom);
    add_num(h, "peak_before", (double)p->peak_before, &oom);
    add_num(h, "peak_after", (double)p->peak_after, &oom);
    add_num(h, "swapped_bytes", (double)p->swapped_bytes, &oom);
    add_num(h, "host_bytes", (double)p->host_bytes, &oom);
    add_dbl(h, "stall_s", p->stall_s, &oom);
    add_dbl(h, "iter_s", p->iter_s, &oom);
    if (!cJSON_AddBoolToObject(h, "feasible", p->feasible != 0)) oom = 1;
    add_num(h, "min_budget_bytes", (double)p->min_budget_bytes, &oom);
    cJSON *names = cJSON_AddArrayToObject(h, "names");
    if (!names) oom = 1;
    for (uint32_t i = 0; i < p->nnames && !oom; i++) {
        cJSON *s = cJSON_CreateString(p->names[i]);
        if (!s || !cJSON_AddItemToArray(names, s)) { cJSON_Delete(s); oom = 1; }
    }
    if (oom) { cJSON_Delete(h); return SS_ERR_HOST_OOM; }
    sb_line(&b, h);
    for (uint32_t i = 0; i < p->nentries && !oom && !b.oom; i++) {
        const ss_plan_entry *e = &p->entries[i];
        cJSON *o = cJSON_CreateObject();
        if (!o) { oom = 1; break; }
        add_num(o, "entry", i, &oom);
        add_num(o, "name", e->name, &oom);
        add_hex(o, "site", e->site, &oom);
        if (!cJSON_AddStringToObject(o, "dtype", ssi_dtype_name(e->dtype))) oom = 1;
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        if (!sh) oom = 1;
        for (uint32_t d = 0; d < e->ndim && !oom; d++) {
            cJSON *n = cJSON_CreateNumber((double)e->shape[d]);
            if (!n || !cJSON_AddItemToArray(sh, n)) { cJSON_Delete(n); oom = 1; }
        }
        add_num(o, "bytes", (double)e->bytes, &oom);
        add_num(o, "ordinal", e->ordinal, &oom);
        add_num(o, "tensor", e->tensor, &oom);
        add_num(o, "out_op", e->out_op, &oom);
        add_num(o, "free_op", e->free_op, &oom);
        add_num(o, "in_op", e->in_op, &oom);
        add_num(o, "use_op", e->use_op, &oom);
        add_dbl(o, "t_out_done", e->t_out_done, &oom);
        add_dbl(o, "t_in_done", e->t_in_done, &oom);
        if (!cJSON_AddStringToObject(o, "action", e->action == SS_PLAN_RECOMPUTE ? "recompute" : "swap")) oom = 1;
        sb_line(&b, o);
    }
    for (uint32_t j = 0; j < p->nck && !oom && !b.oom; j += 256) {
        cJSON *o = cJSON_CreateObject();
        if (!o) { oom = 1; break; }
        add_num(o, "ck", j, &oom);
        cJSON *arr = cJSON_AddArrayToObject(o, "hashes");
        if (!arr) oom = 1;
        for (uint32_t k = j; k < p->nck && k < j + 256 && !oom; k++) {
            char hx[19];
            hex64(hx, p->ck[k]);
            cJSON *s = cJSON_CreateString(hx);
            if (!s || !cJSON_AddItemToArray(arr, s)) { cJSON_Delete(s); oom = 1; }
        }
        sb_line(&b, o);
    }
    if (!oom && !b.oom) {
        cJSON *o = cJSON_CreateObject();
        if (o) {
            if (!cJSON_AddStringToObject(o, "end", SS_PLAN_FORMAT)) oom = 1;
            add_num(o, "entries", p->nentries, &oom);
            add_num(o, "checkpoints", p->nck, &oom);
        }
        sb_line(&b, o);
    }
    if (oom || b.oom) { free(b.s); return SS_ERR_HOST_OOM; }
    *text = b.s;
    if (len) *len = b.n;
    return SS_OK;
}

ss_status ssi_plan_write(const ss_plan *p, const char *path) {
    if (!p || !path) return SS_ERR_INVALID;
    char *text = NULL;
    size_t len = 0;
    ss_status st = ssi_plan_format(p, &text, &len);
    if (st) return st;
    st = ssi_write_file_atomic(path, text, len);
    free(text);
    return st;
}

/* ---- reading ----------------------------------------------------------------------------- */

typedef struct rd {
    const char *fname;
    unsigned line;
    char *err;
    size_t err_len;
} rd;

static ss_status fail(rd *r, const char *fmt, ...) SS_PRINTF(2, 3);
static ss_status fail(rd *r, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->err && r->err_len) ssi_fmt(r->err, r->err_len, "%s:%u: %s", r->fname, r->line, msg);
    return SS_ERR_FORMAT;
}

/* An integral number in [0, max] (max at most 2^53: doubles are exact below it). */
static ss_status get_uint(rd *r, const cJSON *o, const char *k, uint64_t max, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v) return fail(r, "missing field \"%s\"", k);
    if (!cJSON_IsNumber(v)) return fail(r, "field \"%s\" is not a number", k);
    double d = v->valuedouble;
    if (!(d >= 0) || d != floor(d) || d > (double)max || d > 9007199254740992.0)
        return fail(r, "field \"%s\" is %g, not an integer in [0, %" PRIu64 "]", k, d, max);
    *out = (uint64_t)d;
    return SS_OK;
}

static ss_status get_u32(rd *r, const cJSON *o, const char *k, uint32_t *out) {
    uint64_t v;
    ss_status st = get_uint(r, o, k, UINT32_MAX, &v);
    if (!st) *out = (uint32_t)v;
    return st;
}

static ss_status get_time(rd *r, const cJSON *o, const char *k, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v) return fail(r, "missing field \"%s\"", k);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || isinf(v->valuedouble))
        return fail(r, "field \"%s\" is not a finite number >= 0", k);
    *out = v->valuedouble;
    return SS_OK;
}

static ss_status parse_hex(rd *r, const cJSON *v, const char *what, uint64_t *out) {
    if (!cJSON_IsString(v)) return fail(r, "%s is not a string \"0x...\"", what);
    const char *s = v->valuestring;
    if (s[0] != '0' || (s[1] != 'x' && s[1] != 'X') || !s[2] || strlen(s) > 18)
        return fail(r, "%s \"%.40s\" is not a hex value \"0x\" + up to 16 digits", what, s);
    uint64_t h = 0;
    for (const char *c = s + 2; *c; c++) {
        int d;
        if (*c >= '0' && *c <= '9') d = *c - '0';
        else if (*c >= 'a' && *c <= 'f') d = *c - 'a' + 10;
        else if (*c >= 'A' && *c <= 'F') d = *c - 'A' + 10;
        else return fail(r, "%s \"%.40s\" is not a hex value", what, s);
        h = (h << 4) | (uint64_t)d;
    }
    *out = h;
    return SS_OK;
}

static ss_status get_hex(rd *r, const cJSON *o, const char *k, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v) return fail(r, "missing field \"%s\"", k);
    char what[64];
    ssi_fmt(what, sizeof what, "field \"%s\"", k);
    return parse_hex(r, v, what, out);
}

static ss_status read_header(rd *r, const cJSON *h, ss_plan *p, uint32_t *nent) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(h, "format");
    if (!cJSON_IsString(f) || strcmp(f->valuestring, SS_PLAN_FORMAT) != 0)
        return fail(r, "not a smartswap plan file (the first line must be a header with "
                       "\"format\": \"%s\"); plans are written by 'smartswap plan'", SS_PLAN_FORMAT);
    uint64_t ver;
    ss_status st = get_uint(r, h, "version", UINT32_MAX, &ver);
    if (st) return st;
    if (ver != 1 && ver != SS_PLAN_VERSION)
        return fail(r, "plan format version %" PRIu64 ", this build reads versions 1 and %d: re-run "
                       "'smartswap plan' with this build", ver, SS_PLAN_VERSION);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(h, "desc");
    if (d && !cJSON_IsString(d)) return fail(r, "field \"desc\" is not a string");
    if (d) ssi_fmt(p->desc, sizeof p->desc, "%s", d->valuestring);
    if ((st = get_hex(r, h, "seq_hash", &p->seq_hash))) return st;
    if ((st = get_hex(r, h, "size_sig", &p->size_sig))) return st;
    if ((st = get_u32(r, h, "nops", &p->nops))) return st;
    if ((st = get_u32(r, h, "ck_every", &p->ck_every))) return st;
    if ((st = get_u32(r, h, "checkpoints", &p->nck))) return st;
    if ((st = get_u32(r, h, "entries", nent))) return st;
    if ((st = get_uint(r, h, "budget_bytes", UINT64_MAX, &p->budget_bytes))) return st;
    if ((st = get_uint(r, h, "peak_before", UINT64_MAX, &p->peak_before))) return st;
    if ((st = get_uint(r, h, "peak_after", UINT64_MAX, &p->peak_after))) return st;
    if ((st = get_uint(r, h, "swapped_bytes", UINT64_MAX, &p->swapped_bytes))) return st;
    if ((st = get_uint(r, h, "host_bytes", UINT64_MAX, &p->host_bytes))) return st;
    if ((st = get_uint(r, h, "min_budget_bytes", UINT64_MAX, &p->min_budget_bytes))) return st;
    if ((st = get_time(r, h, "stall_s", &p->stall_s))) return st;
    if ((st = get_time(r, h, "iter_s", &p->iter_s))) return st;
    const cJSON *fe = cJSON_GetObjectItemCaseSensitive(h, "feasible");
    if (!cJSON_IsBool(fe)) return fail(r, "field \"feasible\" is missing or not true/false");
    p->feasible = cJSON_IsTrue(fe);
    if (p->ck_every == 0 && p->nck) return fail(r, "%u checkpoints but ck_every is 0", p->nck);
    if (p->ck_every && p->nck != p->nops / p->ck_every)
        return fail(r, "%u checkpoints, expected %u for %u operators, one every %u", p->nck,
                    p->nops / p->ck_every, p->nops, p->ck_every);
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(h, "names");
    if (!cJSON_IsArray(names)) return fail(r, "field \"names\" is missing or not an array");
    const cJSON *n;
    cJSON_ArrayForEach(n, names) {
        if (!cJSON_IsString(n)) return fail(r, "\"names\" holds a value that is not a string");
        uint32_t id;
        if (ssi_plan_intern(p, n->valuestring, &id)) return SS_ERR_HOST_OOM;
        if (id != p->nnames - 1) return fail(r, "\"names\" lists \"%.60s\" twice", n->valuestring);
    }
    if (p->nck) {
        p->ck = calloc(p->nck, sizeof *p->ck);
        if (!p->ck) return SS_ERR_HOST_OOM;
    }
    if (*nent && ssi_grow(&p->entries, &p->cap_entries, *nent, sizeof *p->entries))
        return SS_ERR_HOST_OOM;
    return SS_OK;
}

static ss_status read_entry(rd *r, const cJSON *o, ss_plan *p, uint32_t idx) {
    uint32_t k;
    ss_status st;
    if ((st = get_u32(r, o, "entry", &k))) return st;
    if (k != idx) return fail(r, "entry %u where entry %u was expected (entries are numbered "
                                 "in order from 0)", k, idx);
    ss_plan_entry e;
    memset(&e, 0, sizeof e);
    if ((st = get_u32(r, o, "name", &e.name))) return st;
    if (e.name >= p->nnames)
        return fail(r, "entry %u: name id %u, but the header lists %u names", idx, e.name, p->nnames);
    if ((st = get_hex(r, o, "site", &e.site))) return st;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype");
    int d = cJSON_IsString(dt) ? ssi_dtype_from_name(dt->valuestring) : -1;
    if (d < 0) return fail(r, "entry %u: \"dtype\" is missing or not a known type (f32, bf16, ...)", idx);
    e.dtype = (uint32_t)d;
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "shape");
    if (!cJSON_IsArray(sh)) return fail(r, "entry %u: \"shape\" is missing or not an array", idx);
    int nd = cJSON_GetArraySize(sh);
    if (nd > SS_MAX_DIMS) return fail(r, "entry %u: %d dimensions (at most %d)", idx, nd, SS_MAX_DIMS);
    e.ndim = (uint32_t)nd;
    const cJSON *dim;
    uint32_t di = 0;
    cJSON_ArrayForEach(dim, sh) {
        if (!cJSON_IsNumber(dim) || !(dim->valuedouble >= 0) || dim->valuedouble != floor(dim->valuedouble) ||
            dim->valuedouble > 9007199254740992.0)
            return fail(r, "entry %u: dimension %u is not an integer >= 0", idx, di);
        e.shape[di++] = (int64_t)dim->valuedouble;
    }
    if ((st = get_uint(r, o, "bytes", UINT64_MAX, &e.bytes))) return st;
    if (e.bytes == 0) return fail(r, "entry %u: \"bytes\" is 0", idx);
    if ((st = get_u32(r, o, "ordinal", &e.ordinal))) return st;
    if ((st = get_u32(r, o, "tensor", &e.tensor))) return st;
    if ((st = get_u32(r, o, "out_op", &e.out_op))) return st;
    if ((st = get_u32(r, o, "free_op", &e.free_op))) return st;
    if ((st = get_u32(r, o, "in_op", &e.in_op))) return st;
    if ((st = get_u32(r, o, "use_op", &e.use_op))) return st;
    if ((st = get_time(r, o, "t_out_done", &e.t_out_done))) return st;
    if ((st = get_time(r, o, "t_in_done", &e.t_in_done))) return st;
    const cJSON *ac = cJSON_GetObjectItemCaseSensitive(o, "action");   /* version 1: absent (swap) */
    if (ac) {
        if (!cJSON_IsString(ac) || (strcmp(ac->valuestring, "swap") && strcmp(ac->valuestring, "recompute")))
            return fail(r, "entry %u: \"action\" must be \"swap\" or \"recompute\"", idx);
        e.action = strcmp(ac->valuestring, "recompute") ? SS_PLAN_SWAP : SS_PLAN_RECOMPUTE;
    }
    if (!(e.out_op < e.free_op && e.free_op <= e.in_op && e.in_op <= e.use_op && e.use_op < p->nops))
        return fail(r, "entry %u: points out_op %u, free_op %u, in_op %u, use_op %u must satisfy "
                       "out_op < free_op <= in_op <= use_op < nops (%u)", idx, e.out_op, e.free_op,
                    e.in_op, e.use_op, p->nops);
    if (idx > 0 && p->entries[idx - 1].out_op > e.out_op)
        return fail(r, "entry %u: out_op %u is before the previous entry's %u (entries are sorted "
                       "by out_op)", idx, e.out_op, p->entries[idx - 1].out_op);
    p->entries[p->nentries++] = e;
    return SS_OK;
}

static ss_status read_ck(rd *r, const cJSON *o, ss_plan *p, uint32_t *filled) {
    uint32_t j;
    ss_status st;
    if ((st = get_u32(r, o, "ck", &j))) return st;
    if (j != *filled)
        return fail(r, "checkpoints start at %u where %u was expected (in order from 0)", j, *filled);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "hashes");
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0)
        return fail(r, "field \"hashes\" is missing or not a non-empty array");
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) {
        if (*filled >= p->nck) return fail(r, "more checkpoints than the %u the header announces", p->nck);
        if ((st = parse_hex(r, v, "a checkpoint hash", &p->ck[*filled]))) return st;
        (*filled)++;
    }
    return SS_OK;
}

ss_status ssi_plan_parse(const char *text, size_t len, const char *fname, ss_plan **out,
                         char *err, size_t err_len) {
    if (!text || !out) return SS_ERR_INVALID;
    rd r = {fname ? fname : "<plan>", 0, err, err_len};
    /* as ssi_plan_read: cJSON would stop at a NUL inside a line and take the rest as read */
    if (memchr(text, 0, len)) { r.line = 1; return fail(&r, "a NUL byte: not a text plan file"); }
    ss_plan *p;
    if (ssi_plan_new(&p)) return SS_ERR_HOST_OOM;
    ss_status st = SS_OK;
    uint32_t nent = 0, nck_filled = 0;
    int have_header = 0, have_end = 0;
    size_t pos = 0;
    while (pos < len && st == SS_OK) {
        size_t e = pos;
        while (e < len && text[e] != '\n') e++;
        r.line++;
        size_t ln = e - pos;
        const char *s = text + pos;
        pos = e + 1;
        if (ln && s[ln - 1] == '\r') ln--;
        int blank = 1;
        for (size_t i = 0; i < ln; i++)
            if (s[i] != ' ' && s[i] != '\t') { blank = 0; break; }
        if (blank) continue;
        if (have_end) { st = fail(&r, "text after the end line"); break; }
        cJSON *o = cJSON_ParseWithLength(s, ln);
        if (!o) { st = fail(&r, "not valid JSON"); break; }
        if (!cJSON_IsObject(o)) {
            st = fail(&r, "not a JSON object");
        } else if (!have_header) {
            st = read_header(&r, o, p, &nent);
            have_header = 1;
        } else if (cJSON_GetObjectItemCaseSensitive(o, "entry")) {
            if (p->nentries >= nent)
                st = fail(&r, "more entries than the %u the header announces", nent);
            else if (nck_filled)
                st = fail(&r, "an entry after the checkpoints (entries come first)");
            else
                st = read_entry(&r, o, p, p->nentries);
        } else if (cJSON_GetObjectItemCaseSensitive(o, "ck")) {
            if (p->nentries != nent)
                st = fail(&r, "checkpoints after %u of the %u entries the header announces",
                          p->nentries, nent);
            else
                st = read_ck(&r, o, p, &nck_filled);
        } else if (cJSON_GetObjectItemCaseSensitive(o, "end")) {
            const cJSON *en = cJSON_GetObjectItemCaseSensitive(o, "end");
            uint32_t ce = 0, cc = 0;
            if (!cJSON_IsString(en) || strcmp(en->valuestring, SS_PLAN_FORMAT))
                st = fail(&r, "the end line must say \"end\": \"%s\"", SS_PLAN_FORMAT);
            else if (!(st = get_u32(&r, o, "entries", &ce)) && !(st = get_u32(&r, o, "checkpoints", &cc))) {
                if (ce != p->nentries || ce != nent || cc != nck_filled || cc != p->nck)
                    st = fail(&r, "the file ends after %u entries and %u checkpoints, but the header "
                                  "announces %u and %u: the file is truncated or edited",
                              p->nentries, nck_filled, nent, p->nck);
            }
            have_end = 1;
        } else {
            st = fail(&r, "a line that is neither an entry, checkpoints nor the end line");
        }
        cJSON_Delete(o);
    }
    if (st == SS_OK && !have_header) { r.line = 1; st = fail(&r, "empty file: no plan header"); }
    if (st == SS_OK && !have_end) {
        r.line++;
        st = fail(&r, "no end line: the file is truncated (re-run 'smartswap plan')");
    }
    if (st == SS_OK) {
        char e2[200];
        if (ssi_plan_check(p, e2, sizeof e2) != SS_OK) { r.line = 1; st = fail(&r, "%s", e2); }
    }
    if (st != SS_OK) { ssi_plan_free(p); return st; }
    *out = p;
    return SS_OK;
}

ss_status ssi_plan_read(const char *path, ss_plan **out, char *err, size_t err_len) {
    if (!path || !out) return SS_ERR_INVALID;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (err && err_len) ssi_fmt(err, err_len, "%s: cannot open: %s", path, strerror(errno));
        return SS_ERR_IO;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    ss_status st = SS_OK;
    for (;;) {
        if (ssi_grow(&buf, &cap, n + 65536 + 1, 1)) { st = SS_ERR_HOST_OOM; break; }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                if (err && err_len) ssi_fmt(err, err_len, "%s: read error: %s", path, strerror(errno));
                st = SS_ERR_IO;
            }
            break;
        }
    }
    fclose(f);
    if (st == SS_OK) {
        if (memchr(buf, 0, n)) {
            if (err && err_len) ssi_fmt(err, err_len, "%s:1: a NUL byte: not a text plan file", path);
            st = SS_ERR_FORMAT;
        } else {
            buf[n] = 0;
            st = ssi_plan_parse(buf, n, path, out, err, err_len);
        }
    }
    free(buf);
    return st;
}
