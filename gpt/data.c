/* data.c: training text and deterministic byte-level batches (data.h). */
#include "data.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FORTUNES_DIR "/usr/share/games/fortunes"
#define JARGON_GZ "/usr/share/doc/jargon-text/jargon.txt.gz"

/* Appends the whole stream f to d (grows the buffer). */
static int append_stream(gpt_data *d, FILE *f) {
    size_t cap = d->n + 65536;
    for (;;) {
        unsigned char *nb = realloc(d->bytes, cap);
        if (!nb) return 1;
        d->bytes = nb;
        size_t got = fread(d->bytes + d->n, 1, cap - d->n, f);
        d->n += got;
        if (d->n < cap) return ferror(f) ? 1 : 0;
        cap *= 2;
    }
}

static int append_file(gpt_data *d, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 1;
    int rc = append_stream(d, f);
    fclose(f);
    return rc;
}

int gpt_data_load_file(gpt_data *d, const char *path, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    if (append_file(d, path)) {
        snprintf(err, errlen, "cannot read '%s'", path);
        gpt_data_free(d);
        return 1;
    }
    if (d->n < 2) {
        snprintf(err, errlen, "'%s' holds %zu bytes; the trainer needs text longer than the sequence", path, d->n);
        gpt_data_free(d);
        return 1;
    }
    snprintf(d->source, sizeof d->source, "%s", path);
    return 0;
}

int gpt_data_from_memory(gpt_data *d, const void *text, size_t n, const char *source, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    d->bytes = malloc(n ? n : 1);
    if (!d->bytes) { snprintf(err, errlen, "out of host memory"); return 1; }
    memcpy(d->bytes, text, n);
    d->n = n;
    snprintf(d->source, sizeof d->source, "%s", source);
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends every regular file in dir whose name has no '.' (or ends in one of exts), in name
 * order; returns the number of files added. */
static int append_dir(gpt_data *d, const char *dir, const char *const *exts) {
    DIR *dp = opendir(dir);
    if (!dp) return 0;
    char **names = NULL;
    size_t nn = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        const char *dot = strrchr(e->d_name, '.');
        int ok = 0;
        if (exts) {
            for (int i = 0; exts[i]; i++) if (dot && !strcmp(dot, exts[i])) ok = 1;
        } else {
            ok = e->d_name[0] != '.' && !dot;
        }
        if (!ok) continue;
        if (nn == cap) {
            cap = cap ? 2 * cap : 64;
            char **t = realloc(names, cap * sizeof *t);
            if (!t) break;
            names = t;
        }
        names[nn] = strdup(e->d_name);
        if (names[nn]) nn++;
    }
    closedir(dp);
    qsort(names, nn, sizeof *names, cmp_str);
    int added = 0;
    for (size_t i = 0; i < nn; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && append_file(d, path) == 0) added++;
        free(names[i]);
    }
    free(names);
    return added;
}

int gpt_data_load_default(gpt_data *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    int nf = append_dir(d, FORTUNES_DIR, NULL);
    size_t fortunes = d->n;
    int jargon = 0;
    struct stat st;
    if (stat(JARGON_GZ, &st) == 0) {
        FILE *p = popen("gzip -dc " JARGON_GZ " 2>/dev/null", "r");
        if (p) {
            size_t before = d->n;
            int rc = append_stream(d, p);
            if (pclose(p) == 0 && rc == 0 && d->n > before) jargon = 1;
            else d->n = before;
        }
    }
    if (d->n > 0) {
        snprintf(d->source, sizeof d->source, "Debian text: %s%d fortune files (%zu bytes, %s)%s%s%s",
                 nf ? "" : "no fortunes, ", nf, fortunes, FORTUNES_DIR, jargon ? " + the Jargon File (" : "",
                 jargon ? JARGON_GZ : "", jargon ? ")" : " (jargon-text not found)");
        return 0;
    }
    static const char *const src_ext[] = {".c", ".h", ".md", NULL};
    static const char *const dirs[] = {"src", "gpt", "include", "docs", "tools"};
    int files = 0;
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) files += append_dir(d, dirs[i], src_ext);
    if (d->n > 0) {
        snprintf(d->source, sizeof d->source,
                 "fallback: the project's own sources (%d files under src gpt include docs tools; "
                 "fortunes and jargon-text are not installed: run scripts/deps.sh)", files);
        return 0;
    }
    gpt_data_free(d);
    snprintf(err, errlen, "no training text: neither fortunes (%s) nor jargon-text nor the project "
             "sources (run from the repository root) were found; pass --data FILE or run scripts/deps.sh",
             FORTUNES_DIR);
    return 1;
}

void gpt_data_free(gpt_data *d) {
    free(d->bytes);
    memset(d, 0, sizeof *d);
}

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void gpt_data_batch(const gpt_data *d, uint64_t seed, int step, int B, int T, int *tokens, int *targets) {
    uint64_t span = d->n - (uint64_t)T;   /* starts 0 .. n-T-1 leave room for the last target */
    for (int b = 0; b < B; b++) {
        uint64_t r = mix(mix(mix(seed) ^ (uint64_t)step) ^ ((uint64_t)b << 32));
        uint64_t off = r % span;
        for (int t = 0; t < T; t++) {
            tokens[b * T + t] = d->bytes[off + t];
            targets[b * T + t] = d->bytes[off + t + 1];
        }
    }
}
