/* test.h: the test harness. Each test binary includes it once, calls CHECK (and friends) inside
 * test functions, runs them with RUN, and ends main with `return test_summary();`, which prints
 * "N passed, N failed[, N skipped]" and returns non-zero on any failure.
 *
 *     static void t_basic(void) { CHECK(1 + 1 == 2); CHECK_EQ_U64(x, 4); }
 *     int main(void) { RUN(t_basic); return test_summary(); }
 *
 * A check counts as one pass or one failure; a failure prints file:line and the expression.
 * TEST_SKIP("why") marks the current test skipped (counted as skipped, not passed) and returns.
 */
#ifndef SS_TEST_H
#define SS_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_pass_n, test_fail_n, test_skip_n;
static const char *test_current = "";
static int test_current_failed;

#define CHECK(cond) \
    do { if (cond) test_pass_n++; else { test_fail_n++; test_current_failed = 1; \
        fprintf(stderr, "FAIL %s: %s:%d: %s\n", test_current, __FILE__, __LINE__, #cond); } } while (0)

#define CHECK_MSG(cond, ...) \
    do { if (cond) test_pass_n++; else { test_fail_n++; test_current_failed = 1; \
        fprintf(stderr, "FAIL %s: %s:%d: %s: ", test_current, __FILE__, __LINE__, #cond); \
        fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

#define CHECK_EQ_U64(a, b) \
    do { uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b); \
        CHECK_MSG(a_ == b_, "%" PRIu64 " != %" PRIu64, a_, b_); } while (0)

#define CHECK_EQ_INT(a, b) \
    do { long long a_ = (long long)(a), b_ = (long long)(b); \
        CHECK_MSG(a_ == b_, "%lld != %lld", a_, b_); } while (0)

#define CHECK_OK(expr) \
    do { int st_ = (int)(expr); CHECK_MSG(st_ == 0, "status %d (%s)", st_, ss_status_str((ss_status)st_)); } while (0)

#define CHECK_STATUS(expr, want) \
    do { int st_ = (int)(expr), w_ = (int)(want); \
        CHECK_MSG(st_ == w_, "status %d (%s), wanted %d (%s)", st_, ss_status_str((ss_status)st_), \
                  w_, ss_status_str((ss_status)w_)); } while (0)

#define CHECK_NEAR(a, b, tol) \
    do { double a_ = (double)(a), b_ = (double)(b), t_ = (double)(tol); \
        CHECK_MSG((a_ - b_) <= t_ && (b_ - a_) <= t_, "%.9g vs %.9g (tolerance %.3g)", a_, b_, t_); } while (0)

#define TEST_SKIP(why) \
    do { test_skip_n++; test_current_failed = -1; \
        fprintf(stderr, "skip %s: %s\n", test_current, why); return; } while (0)

#define RUN(fn) \
    do { test_current = #fn; test_current_failed = 0; fn(); \
        if (!test_current_failed) fprintf(stderr, "ok   %s\n", #fn); } while (0)

static int test_summary(void) {
    if (test_skip_n)
        printf("%d passed, %d failed, %d skipped\n", test_pass_n, test_fail_n, test_skip_n);
    else
        printf("%d passed, %d failed\n", test_pass_n, test_fail_n);
    return test_fail_n ? 1 : 0;
}

#endif /* SS_TEST_H */
