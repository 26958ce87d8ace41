/* trace.h: profile files (docs/trace-format.md) and the small JSON Lines helpers that every
 * smartswap file format shares (profiles here; plan files in policy.c use the same helpers and
 * the same rules).
 *
 * The rules of every smartswap JSON Lines file:
 *  - one JSON object per line, UTF-8, '\n' line ends; blank lines are ignored;
 *  - line 1 is a header object {"format": NAME, "version": N, ...};
 *  - 64-bit values that may exceed 2^53 (hashes, sizes) are written as hex strings "0x..." and a
 *    reader accepts either form for any unsigned field (a plain number must be an exact integer
 *    no larger than 2^53);
 *  - readers parse with libcjson, one line at a time, and report "FILE:LINE: what is wrong";
 *    they never crash on any input;
 *  - writers build the whole file in memory and write it atomically (temporary file + rename),
 *    so a file is either complete or absent.
 *
 * Errors: functions that take (err, err_len) write a one-line message there on failure (err may
 * be NULL, in which case the message is logged at SS_LOG_ERROR instead). No function prints.
 */
#ifndef SS_TRACE_H
#define SS_TRACE_H

#include "profile.h"

#include <cjson/cJSON.h>
#include <stdio.h>

#define SSI_PROFILE_FORMAT "smartswap-profile"
#define SSI_PROFILE_VERSION 1

/* ---- profile files ------------------------------------------------------------------------ */

/* Writes a finalized profile (no pending uses) to path atomically. Returns SS_ERR_INVALID for a
 * profile that is not finalized or fails ssi_profile_check, SS_ERR_HOST_OOM, or SS_ERR_IO (the
 * old file, if any, is left untouched). */
ss_status ssi_profile_write(const ss_profile *p, const char *path, char *err, size_t err_len);

/* Serializes the profile into a malloc'ed buffer (*out, *len; the caller frees *out). The same
 * bytes ssi_profile_write puts in the file. */
ss_status ssi_profile_to_buffer(const ss_profile *p, char **out, size_t *len, char *err, size_t err_len);

/* Reads a profile file into a new profile (*out, freed with ssi_profile_free). Returns SS_ERR_IO
 * (cannot open/read), SS_ERR_FORMAT ("FILE:LINE: ..." in err: malformed, wrong format or version,
 * inconsistent), or SS_ERR_HOST_OOM. *out is set only on success. */
ss_status ssi_profile_read(const char *path, ss_profile **out, char *err, size_t err_len);

/* The same, from a memory buffer; `name` stands for the file name in messages. */
ss_status ssi_profile_read_buffer(const char *data, size_t len, const char *name, ss_profile **out,
                                  char *err, size_t err_len);

/* Totals of a profile, as `smartswap trace stats` prints them. */
typedef struct ssi_profile_stats {
    uint32_t ops, ops_phase[4];        /* by ss_phase */
    uint32_t tensors, saved_tensors, temp_tensors, noswap_tensors;
    uint64_t saved_bytes, temp_bytes;  /* sums over the tensors of each kind */
    uint64_t uses;
    uint64_t base_bytes;
    uint64_t peak_bytes;               /* max mem_after (base included) */
    uint64_t peak_activation_bytes;    /* peak_bytes - base_bytes (0 if below) */
    uint32_t peak_op;                  /* op index of the peak (SS_NONE without ops) */
    uint64_t max_saved_alive_bytes;    /* max over ops of the saved tensors alive after it
                                        * (0 if memory for the sweep ran out) */
    double   flops, flops_phase[4];
    double   op_seconds;               /* sum of the ops' seconds */
    double   iter_seconds;
} ssi_profile_stats;

/* Fills *s from p (any finalized profile). */
void ssi_profile_stats_get(const ss_profile *p, ssi_profile_stats *s);

/* Saved bytes by transformer layer, as `smartswap trace stats` prints them (docs/trace-format.md,
 * "Layers"). The format has no layer field: layers are found in the forward phase's operator
 * sequence, as the longest run of one block of operators repeated back to back, operators
 * compared by (name, call site) as a framework's layers share code, or by name alone when
 * nothing repeats so (call sites that differ per layer). The block's length is one of the most
 * common distances between two calls of one operator, and the run must cover two thirds of the
 * forward operators. A layer is one repetition of the block;
 * a saved tensor belongs to the layer whose forward operator produced it (so a layer holds its
 * own output, not its input). Works on any profile, recorded or generated. */
typedef struct ssi_profile_layers {
    uint32_t layers;               /* repetitions found; 0: no block repeats (then only the
                                    * totals below and max_saved are set) */
    uint32_t block_ops;            /* forward operators per layer */
    uint32_t first_op, end_op;     /* the layers' operators are [first_op, end_op) */
    uint64_t saved_min, saved_max; /* saved bytes produced by one layer, smallest and largest */
    uint64_t saved_layers;         /* by all the layers together */
    uint64_t saved_before;         /* by forward operators before the first layer (embedding) */
    uint64_t saved_after;          /* by forward operators after the last layer (final norm, loss) */
    uint64_t saved_elsewhere;      /* by operators outside the forward phase */
    uint32_t largest;              /* the largest saved tensor produced in a layer (SS_NONE: none) */
    uint32_t largest_layer;        /* its layer */
    uint64_t largest_layer_saved;  /* that layer's saved bytes */
    uint32_t max_saved;            /* the largest saved tensor of the profile (SS_NONE: none) */
    uint32_t max_saved_loss;       /* the largest saved tensor after the layers (SS_NONE: none) */
} ssi_profile_layers;

/* Fills *out from p (finalized). SS_ERR_HOST_OOM (out zeroed) when memory runs out. */
ss_status ssi_profile_layers_get(const ss_profile *p, ssi_profile_layers *out);

/* Tokens of one iteration from a desc of `smartswap trace gen` ("... b=B s=S ..."): B * S, or 0
 * when the desc does not say. */
uint64_t ssi_profile_desc_tokens(const char *desc);

/* "fwd" "bwd" "opt" "other" and back (-1 for an unknown name). */
const char *ssi_phase_name(uint32_t phase);
int         ssi_phase_from_name(const char *name);

/* ---- JSON Lines reading ---------------------------------------------------------------------
 * A reader yields one parsed object per non-blank line, with its line number, from a file or a
 * buffer. Lines are parsed with cJSON_ParseWithLength; any line that is not a JSON object (bad
 * syntax, a NUL byte, a bare number, binary garbage) is a format error naming the line.
 *
 *     ssi_jl_reader r;
 *     if ((st = ssi_jl_open(&r, path, err, sizeof err))) return st;
 *     const cJSON *o;
 *     while ((st = ssi_jl_next(&r, &o)) == SS_OK && o) { ... ssi_jl_u32(&r, o, "op", 0, n, &x) ... }
 *     ssi_jl_close(&r);
 *
 * Every getter returns SS_OK or SS_ERR_FORMAT with "FILE:LINE: field 'key': ..." in the reader's
 * error buffer; once a reader has failed, its error stays (the first fault is the one reported).
 */
typedef struct ssi_jl_reader {
    char name[256];          /* file name for messages */
    FILE *f;                 /* NULL when reading a buffer */
    const char *src;         /* buffer being read (not owned), when f is NULL */
    size_t src_len, src_pos;
    char *buf;               /* file mode: bytes read but not consumed */
    size_t cap, beg, end;
    int eof;
    unsigned long line;      /* line number of the current object (1-based), 0 before the first */
    unsigned long next_line; /* number of the next line to read */
    cJSON *cur;              /* the current object (owned; freed by the next call) */
    char *err;               /* caller's error buffer (may be NULL: messages are then logged) */
    size_t err_len;
    ss_status failed;        /* first error status, SS_OK while none */
} ssi_jl_reader;

/* Longest line a reader accepts (a longer one is a format error, not an allocation). */
#define SSI_JL_MAX_LINE ((size_t)64 << 20)

/* Opens path for reading; SS_ERR_IO (message in err) when it cannot be opened. */
ss_status ssi_jl_open(ssi_jl_reader *r, const char *path, char *err, size_t err_len);
/* Reads from a buffer (not copied: it must outlive the reader). Always SS_OK. */
ss_status ssi_jl_open_buffer(ssi_jl_reader *r, const char *data, size_t len, const char *name,
                             char *err, size_t err_len);
/* The next object (*obj, owned by the reader, valid until the next call or close), or *obj = NULL
 * at the end of the input. Errors: SS_ERR_FORMAT (not a JSON object, line too long), SS_ERR_IO,
 * SS_ERR_HOST_OOM. */
ss_status ssi_jl_next(ssi_jl_reader *r, const cJSON **obj);
void      ssi_jl_close(ssi_jl_reader *r);

/* Records a format error "NAME:LINE: <message>" (the current line; line 0 = the file as a whole)
 * unless an error is already recorded, and returns SS_ERR_FORMAT. For checks the caller makes. */
ss_status ssi_jl_fail(ssi_jl_reader *r, const char *fmt, ...) SS_PRINTF(2, 3);

/* Checks line 1's header: {"format": format, "version": version, ...}. A different format or
 * version is an error that says what was found, what is supported and `what_to_rerun`. */
ss_status ssi_jl_header(ssi_jl_reader *r, const cJSON *obj, const char *format, int version,
                        const char *what_to_rerun);

/* Typed getters of obj[key], each with a range check [lo, hi] (inclusive). A missing key, the
 * wrong type or a value out of range is an error naming the key. Unsigned getters accept an
 * exact integer number <= 2^53 or a hex string "0x...". */
int       ssi_jl_has(const cJSON *obj, const char *key);  /* present and not null */
ss_status ssi_jl_u64(ssi_jl_reader *r, const cJSON *obj, const char *key, uint64_t lo, uint64_t hi, uint64_t *out);
ss_status ssi_jl_u32(ssi_jl_reader *r, const cJSON *obj, const char *key, uint32_t lo, uint32_t hi, uint32_t *out);
ss_status ssi_jl_i64(ssi_jl_reader *r, const cJSON *obj, const char *key, int64_t lo, int64_t hi, int64_t *out);
/* A finite number (NaN and infinities are rejected). */
ss_status ssi_jl_double(ssi_jl_reader *r, const cJSON *obj, const char *key, double lo, double hi, double *out);
ss_status ssi_jl_bool(ssi_jl_reader *r, const cJSON *obj, const char *key, int *out);
/* A string of at most max_len bytes; *out points into the parsed object (valid until next). */
ss_status ssi_jl_str(ssi_jl_reader *r, const cJSON *obj, const char *key, size_t max_len, const char **out);
/* An array of at most max_n items; *arr is the array (iterate with cJSON_ArrayForEach), *n its
 * length. */
ss_status ssi_jl_array(ssi_jl_reader *r, const cJSON *obj, const char *key, size_t max_n,
                       const cJSON **arr, size_t *n);
/* The same checks for a value already in hand (an array item); `what` names it in messages. */
ss_status ssi_jl_value_u64(ssi_jl_reader *r, const cJSON *v, const char *what, uint64_t lo, uint64_t hi, uint64_t *out);

/* ---- JSON Lines writing ---------------------------------------------------------------------
 * A writer accumulates lines in memory; each line is a cJSON object printed unformatted. Errors
 * are sticky: after the first failure (out of memory) every call is a no-op and
 * ssi_jl_writer_commit returns it.
 *
 *     ssi_jl_writer w; ssi_jl_writer_init(&w);
 *     cJSON *o = ssi_jl_obj(&w);
 *     ssi_jl_put_str(&w, o, "format", "smartswap-plan"); ssi_jl_put_u64(&w, o, "bytes", n);
 *     ssi_jl_line(&w, o);                      // prints o as one line and deletes it
 *     st = ssi_jl_writer_commit(&w, path);     // atomic write; frees the writer's memory
 */
typedef struct ssi_jl_writer {
    char *buf;
    size_t len, cap;
    ss_status st;
} ssi_jl_writer;

void   ssi_jl_writer_init(ssi_jl_writer *w);
void   ssi_jl_writer_free(ssi_jl_writer *w);
/* A new empty object (NULL after an error; the put functions accept NULL and do nothing). */
cJSON *ssi_jl_obj(ssi_jl_writer *w);
/* Unsigned value: a number when <= 2^53, else a hex string "0x...". */
void   ssi_jl_put_u64(ssi_jl_writer *w, cJSON *o, const char *key, uint64_t v);
/* Always a hex string "0x..." (hashes). */
void   ssi_jl_put_hex(ssi_jl_writer *w, cJSON *o, const char *key, uint64_t v);
void   ssi_jl_put_i64(ssi_jl_writer *w, cJSON *o, const char *key, int64_t v);  /* |v| <= 2^53 */
void   ssi_jl_put_double(ssi_jl_writer *w, cJSON *o, const char *key, double v); /* round-trips */
void   ssi_jl_put_str(ssi_jl_writer *w, cJSON *o, const char *key, const char *v);
void   ssi_jl_put_bool(ssi_jl_writer *w, cJSON *o, const char *key, int v);
void   ssi_jl_put_null(ssi_jl_writer *w, cJSON *o, const char *key);
/* Adds an array of n unsigned / signed values under key. */
void   ssi_jl_put_u32_array(ssi_jl_writer *w, cJSON *o, const char *key, const uint32_t *v, size_t n);
void   ssi_jl_put_i64_array(ssi_jl_writer *w, cJSON *o, const char *key, const int64_t *v, size_t n);
/* Appends o as one line and deletes o (also on error). */
void   ssi_jl_line(ssi_jl_writer *w, cJSON *o);
/* Hands the buffer over: *out (caller frees), *len. The writer is left empty. */
ss_status ssi_jl_writer_take(ssi_jl_writer *w, char **out, size_t *len);
/* Writes the lines to path atomically (ssi_write_file_atomic) and frees the writer's memory.
 * SS_ERR_HOST_OOM from an earlier failure, SS_ERR_IO. */
ss_status ssi_jl_writer_commit(ssi_jl_writer *w, const char *path);

#endif /* SS_TRACE_H */
