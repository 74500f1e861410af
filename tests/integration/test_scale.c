/* test_scale.c - the small version of issue 9's scale run: one island of
 * 128 devices (8x16) covered by 32 `sim` workers of 4 devices, and a burst
 * of jobs of every slice size from 1 device to the whole island submitted
 * at once. Every job must succeed with exact values: with 32 processes a
 * slice's collectives cross many process pairs, mesh_axes groups cut
 * across worker blocks, and a wrong pack layout or a shard mapped to the
 * wrong process changes the numbers. The scheduler-pass histogram must
 * have counted the passes. Behaviour only: no timing is asserted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "itest.h"

#define ROUNDS 3
#define SCALE_TIMEOUT_MS 180000

typedef struct shape2 {
    int rows, cols;             /* rows 0: a 1-D slice of `cols` devices */
} shape2_t;

static const shape2_t shapes[] = {{0, 1}, {0, 4}, {0, 16}, {2, 2},  {2, 4}, {4, 4},
                                  {4, 8}, {8, 8}, {1, 16}, {8, 1},  {8, 16}};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* shard_index i; y = [i, i]; z = all_reduce(y) over the slice; on 2-D
 * slices also w = all_reduce(y) over axis 1 (each row). */
static char *doc_for(const shape2_t *s, int round)
{
    char slice[32], extra[160] = "", outs[16] = "'z'";
    if (s->rows) {
        snprintf(slice, sizeof slice, "[%d,%d]", s->rows, s->cols);
        snprintf(extra, sizeof extra,
                 ",{'op':'all_reduce','out':'w','args':['y'],'reduce':'sum','mesh_axes':[1]}");
        snprintf(outs, sizeof outs, "'z','w'");
    } else {
        snprintf(slice, sizeof slice, "[%d]", s->cols);
    }
    char q[768];
    snprintf(q, sizeof q,
             "{'name':'scale-%d-%s','slices':{'a':{'shape':%s}},'computations':[{'name':'c',"
             "'slice':'a','ops':[{'op':'shard_index','out':'i'},"
             "{'op':'fill','out':'one','shape':[2],'value':1.0},"
             "{'op':'mul','out':'y','args':['one','i']},"
             "{'op':'all_reduce','out':'z','args':['y'],'reduce':'sum'}%s],'outputs':[%s]}]}",
             round, slice, slice, extra, outs);
    return hx_text_q(q);
}

/* Both elements of one shard's output equal `want`. */
static int shard_is(const json_t *res, const char *key, int k, double want)
{
    const json_t *v = json_object_get(hx_result_shard(res, key, k), "values");
    return json_array_size(v) == 2 && json_number_value(json_array_get(v, 0)) == want &&
           json_number_value(json_array_get(v, 1)) == want;
}

static void check_job(int64_t id, const shape2_t *s)
{
    json_t *job = itest_wait_state(id, "succeeded");
    json_decref(job);
    json_t *res = hx_job_result(&itest_client, id);
    int rows = s->rows ? s->rows : 1, n = rows * s->cols, bad = -1;
    for (int k = 0; k < n && bad < 0; k++) {
        int r = k / s->cols;
        double row_sum = (double)s->cols * r * s->cols + s->cols * (s->cols - 1) / 2.0;
        if (!shard_is(res, "c.z", k, n * (n - 1) / 2.0) ||
            (s->rows && !shard_is(res, "c.w", k, row_sum)))
            bad = k;
    }
    json_decref(res);
    T_CHECK(bad < 0, "job %" PRId64 " (%dx%d): shard %d holds a wrong sum", id, rows, s->cols,
            bad);
}

static void test_burst_every_size(void **state)
{
    (void)state;
    int64_t ids[ROUNDS * NSHAPES];
    for (int x = 0; x < ROUNDS * NSHAPES; x++) {
        char *doc = doc_for(&shapes[x % NSHAPES], x / NSHAPES);
        T_CHECK(doc != NULL, "out of memory");
        int status = hx_job_submit(&itest_client, doc, &ids[x], NULL);
        free(doc);
        T_CHECK(status == 201, "submit %d returned %d", x, status);
    }
    for (int x = 0; x < ROUNDS * NSHAPES; x++)
        check_job(ids[x], &shapes[x % NSHAPES]);
    double passes = hx_metric(&itest_client, "atoll_scheduler_pass_seconds_count");
    T_CHECK(passes >= 1, "atoll_scheduler_pass_seconds_count is %g", passes);
}

static int setup(void **state)
{
    (void)state;
    static const char *const sim[] = {"--backend", "sim", NULL};
    const char *specs[] = {"big=8x16"};
    if (hx_init() != 0 || hx_cluster_start(&itest_cluster, specs, 1) != 0)
        return -1;
    for (int w = 0; w < 32; w++)
        if (hx_worker_start_args(&itest_cluster, "big", 4, sim, 60000, 0) != 0)
            goto fail;
    if (hx_client_init(&itest_client, itest_cluster.url) != 0)
        goto fail;
    return 0;
fail:
    hx_cluster_stop(&itest_cluster);
    return -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_burst_every_size, itest_cancel_leftovers),
    };
    return cmocka_run_group_tests(tests, setup, itest_group_teardown);
}
