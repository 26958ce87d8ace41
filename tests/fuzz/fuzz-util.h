/* fuzz-util.h: shared helpers of the libFuzzer harnesses (tests/fuzz/fuzz-*.c, `make fuzz`,
 * docs/testing.md). mem_file puts the input in an anonymous in-memory file and returns a path to
 * it (/proc/self/fd/N), so that the readers that take a path are fuzzed through their real
 * open/read code; the caller closes the returned descriptor. */
#ifndef SS_FUZZ_UTIL_H
#define SS_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* -1 when no in-memory file can be made (then the path-based reader is not exercised). */
static inline int mem_file(const uint8_t *data, size_t size, char *path, size_t path_len) {
    int fd = memfd_create("ss-fuzz", MFD_CLOEXEC);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) { close(fd); return -1; }
        done += (size_t)w;
    }
    snprintf(path, path_len, "/proc/self/fd/%d", fd);
    return fd;
}

/* A hard failure of a property the harness checks: libFuzzer records the input as a crash. */
#define FUZZ_ASSERT(cond, what) \
    do { if (!(cond)) { fprintf(stderr, "fuzz property failed: %s (%s:%d)\n", what, __FILE__, __LINE__); abort(); } } while (0)

#endif /* SS_FUZZ_UTIL_H */
