/* data.h: training text for the reference trainer: byte-level tokens (vocabulary 256) and
 * deterministic batches.
 *
 * Sources: any file (gpt_data_load_file); the default corpus (gpt_data_load_default): the
 * Debian packages' text, fortunes (/usr/share/games/fortunes/<name>, in name order) then the
 * Jargon File (/usr/share/doc/jargon-text/jargon.txt.gz, through gzip -dc), both installed by
 * scripts/deps.sh; when neither is there, the project's own sources (src/ gpt/ include/ docs/
 * under the current directory). d->source says which was used.
 *
 * Batches: row b of step s starts at an offset drawn from splitmix64(seed, s, b), so a batch
 * depends only on (seed, step, B, T) and the text, never on what ran before.
 * Errors: 0 or non-zero with a message in err.
 */
#ifndef GPT_DATA_H
#define GPT_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct gpt_data {
    unsigned char *bytes;
    size_t         n;
    char           source[512];
} gpt_data;

int  gpt_data_load_file(gpt_data *d, const char *path, char *err, size_t errlen);
int  gpt_data_load_default(gpt_data *d, char *err, size_t errlen);
/* A copy of n bytes of text. */
int  gpt_data_from_memory(gpt_data *d, const void *text, size_t n, const char *source, char *err, size_t errlen);
void gpt_data_free(gpt_data *d);

/* tokens, targets (B,T): targets are the next bytes. Needs d->n >= T + 1. */
void gpt_data_batch(const gpt_data *d, uint64_t seed, int step, int B, int T, int *tokens, int *targets);

#endif /* GPT_DATA_H */
