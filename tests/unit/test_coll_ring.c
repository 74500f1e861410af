/* test_coll_ring.c - the ring schedule helpers of common/coll.c, checked by
 * playing the whole ring among n in-memory members (every step's messages
 * computed before any is applied, as on real devices) and comparing with
 * the direct combine on random data. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"

/* Chunks tile [0, numel) in order, sizes differ by at most one. */
static void test_chunks_tile(void **state)
{
    (void)state;
    for (int n = 1; n <= 9; n++) {
        for (int64_t numel = 0; numel <= 40; numel++) {
            int64_t next = 0;
            for (int c = 0; c < n; c++) {
                int64_t off, len;
                coll_ring_chunk(numel, n, c, &off, &len);
                assert_int_equal(off, next);
                assert_true(len == numel / n || len == numel / n + 1);
                next = off + len;
            }
            assert_int_equal(next, numel);
        }
    }
}

/* What p sends at step s is what p+1 receives at step s. */
static void test_schedule_pairs(void **state)
{
    (void)state;
    for (int n = 1; n <= 9; n++)
        for (int p = 0; p < n; p++)
            for (int s = 0; s < n - 1; s++) {
                assert_int_equal(coll_ring_send_chunk(n, p, s),
                                 coll_ring_recv_chunk(n, (p + 1) % n, s));
                /* All-gather uses the schedule shifted by one. */
                assert_int_equal(coll_ring_send_chunk(n, p + 1, s),
                                 coll_ring_recv_chunk(n, (p + 1) % n + 1, s));
            }
    assert_int_equal(coll_ring_send_chunk(4, -1, 2), 1);
    assert_int_equal(coll_ring_owned(4, 3), 0);
}

static float frand(uint32_t *x)
{
    *x = *x * 1664525u + 1013904223u;
    return (float)(*x >> 8) / 16777216.0f * 2.0f - 1.0f;
}

/* Plays a ring all_reduce among n members holding numel floats each. */
static void ring_all_reduce(float **buf, int n, int64_t numel, reduce_kind_t k)
{
    float *msg = malloc(sizeof(float) * (size_t)(numel + 1) * (size_t)n);
    assert_non_null(msg);
    for (int phase = 0; phase < 2; phase++) {
        for (int s = 0; s < n - 1; s++) {
            /* Everyone sends first (snapshot), then everyone receives. */
            for (int p = 0; p < n; p++) {
                int64_t off, len;
                coll_ring_chunk(numel, n, coll_ring_send_chunk(n, p + phase, s), &off, &len);
                memcpy(msg + (size_t)p * (size_t)(numel + 1), buf[p] + off,
                       (size_t)len * sizeof(float));
            }
            for (int p = 0; p < n; p++) {
                int prev = (p + n - 1) % n;
                int64_t off, len;
                coll_ring_chunk(numel, n, coll_ring_recv_chunk(n, p + phase, s), &off, &len);
                const float *in = msg + (size_t)prev * (size_t)(numel + 1);
                if (phase == 0)
                    coll_reduce_into(k, buf[p] + off, in, len);
                else
                    memcpy(buf[p] + off, in, (size_t)len * sizeof(float));
            }
        }
    }
    free(msg);
}

/* Ring all_reduce equals the direct combine (within 1e-5 relative for sum,
 * exactly for max and min) on random data, for several group sizes, and
 * every member ends with the same bytes. */
static void test_ring_matches_direct(void **state)
{
    (void)state;
    static const int sizes[] = {1, 2, 3, 5, 8};
    static const reduce_kind_t kinds[] = {REDUCE_SUM, REDUCE_MAX, REDUCE_MIN};
    const int64_t numel = 1001;       /* not a multiple of any n > 1 above */
    uint32_t seed = 12345;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        for (size_t ki = 0; ki < 3; ki++) {
            int n = sizes[si];
            shape_t sh = {.rank = 1, .dim = {numel}};
            tensor_t *in[8];
            float *buf[8];
            for (int p = 0; p < n; p++) {
                in[p] = tensor_new(&sh);
                buf[p] = malloc(sizeof(float) * (size_t)numel);
                assert_non_null(in[p]);
                assert_non_null(buf[p]);
                for (int64_t e = 0; e < numel; e++)
                    in[p]->data[e] = frand(&seed);
                memcpy(buf[p], in[p]->data, sizeof(float) * (size_t)numel);
            }
            op_t op = {.code = OP_ALL_REDUCE, .reduce = kinds[ki]};
            tensor_t *want = NULL;
            assert_int_equal(coll_combine(&op, (const tensor_t *const *)in, n, 0, &want), 0);
            ring_all_reduce(buf, n, numel, kinds[ki]);
            for (int p = 0; p < n; p++) {
                assert_memory_equal(buf[p], buf[0], sizeof(float) * (size_t)numel);
                for (int64_t e = 0; e < numel; e++) {
                    double w = want->data[e], g = buf[p][e];
                    if (kinds[ki] == REDUCE_SUM)
                        assert_true(fabs(g - w) <= 1e-5 * fmax(1.0, fabs(w)));
                    else
                        assert_true(g == w);
                }
            }
            tensor_free(want);
            for (int p = 0; p < n; p++) {
                tensor_free(in[p]);
                free(buf[p]);
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks_tile),
        cmocka_unit_test(test_schedule_pairs),
        cmocka_unit_test(test_ring_matches_direct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
