/* test_worker_exec.c - the worker executor end to end inside one process:
 * real device threads, real compiler/kernels/collectives from atoll_common,
 * the real mailbox and data plane (every peer is this process's own
 * data_addr, so data moves through the mailbox). The worker modules are
 * compiled in because unit tests link only atoll_common. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../workers/dplane.c"
#include "../../workers/shmring.c"
#include "../../workers/exec.c"
#include "../../workers/exec_run.c"
#include "../../workers/mbox.c"
#include "../../workers/ostore.c"
#include "../../workers/wtask.c"

#define MAX_REPORTS 64

typedef struct sink {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
    int64_t task[MAX_REPORTS];
    json_t *body[MAX_REPORTS];
} sink_t;

typedef struct fixture {
    ostore_t *st;
    mbox_t *mb;
    dplane_t *dp;
    exec_t *ex;
    sink_t sink;
} fixture_t;

static void sink_fn(void *ctx, int64_t task, json_t *body)
{
    sink_t *s = ctx;
    pthread_mutex_lock(&s->mu);
    if (s->n < MAX_REPORTS) {
        s->task[s->n] = task;
        s->body[s->n++] = body;
    } else {
        json_decref(body);
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Waits (up to 20 s) for n reports; returns how many arrived. */
static int sink_wait(sink_t *s, int n)
{
    int64_t deadline = util_mono_us() + 20 * 1000000;
    pthread_mutex_lock(&s->mu);
    while (s->n < n && util_mono_us() < deadline) {
        pthread_mutex_unlock(&s->mu);
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&s->mu);
    }
    int got = s->n;
    pthread_mutex_unlock(&s->mu);
    return got;
}

static const json_t *sink_find(sink_t *s, int64_t task)
{
    for (int i = 0; i < s->n; i++)
        if (s->task[i] == task)
            return s->body[i];
    return NULL;
}

static void store_acct(void *ctx, int64_t dobjects, int64_t dbytes)
{
    ostore_charge(ctx, dobjects, dbytes);
}

/* The worker's wiring (main.c): one store counts task objects and mailbox
 * messages. */
static int fixture_start_flat(void **state, int64_t peer_timeout_ms, int ndevices,
                              int64_t cap_bytes, int64_t ring_min_bytes, int flat);

static int fixture_start_with(void **state, int64_t peer_timeout_ms, int ndevices,
                              int64_t cap_bytes, int64_t ring_min_bytes)
{
    return fixture_start_flat(state, peer_timeout_ms, ndevices, cap_bytes, ring_min_bytes, 0);
}

/* flat: 1 turns the two-level (per-process leader) exchange off. */
static int fixture_start_flat(void **state, int64_t peer_timeout_ms, int ndevices,
                              int64_t cap_bytes, int64_t ring_min_bytes, int flat)
{
    fixture_t *f = calloc(1, sizeof *f);
    pthread_mutex_init(&f->sink.mu, NULL);
    pthread_cond_init(&f->sink.cv, NULL);
    f->st = ostore_new(cap_bytes);
    f->mb = mbox_new();
    mbox_set_accounting(f->mb, store_acct, f->st);
    f->dp = dplane_start("127.0.0.1:0", NULL, f->mb);
    exec_cfg_t cfg = {.ndevices = ndevices, .peer_timeout_us = peer_timeout_ms * 1000,
                      .store = f->st, .ring_min_bytes = ring_min_bytes,
                      .no_two_level = flat};
    f->ex = f->dp ? exec_start(&cfg, f->mb, f->dp, sink_fn, &f->sink) : NULL;
    *state = f;
    return f->ex ? 0 : -1;
}

static int fixture_start(void **state, int64_t peer_timeout_ms)
{
    return fixture_start_with(state, peer_timeout_ms, 4, (int64_t)64 << 20, 0);
}

static int setup_normal(void **state)
{
    return fixture_start(state, 10000);
}

static int setup_short_timeout(void **state)
{
    return fixture_start(state, 200);
}

/* 8 devices; every all_reduce / all_gather of 3+ shards takes the ring. */
static int setup_ring8(void **state)
{
    return fixture_start_with(state, 10000, 8, (int64_t)64 << 20, 1);
}

/* 8 devices; collectives always exchange directly. */
static int setup_direct8(void **state)
{
    return fixture_start_with(state, 10000, 8, (int64_t)64 << 20, INT64_MAX);
}

/* A 1 MiB store, 2 s peer timeout (which also bounds memory waits). */
static int setup_flat8(void **state)
{
    return fixture_start_flat(state, 10000, 8, (int64_t)64 << 20, INT64_MAX, 1);
}

static int setup_small_store(void **state)
{
    return fixture_start_with(state, 2000, 4, (int64_t)1 << 20, 0);
}

/* Every object of every ended task is gone, and no message waits. */
static void assert_store_empty(fixture_t *f)
{
    assert_int_equal(exec_drain(f->ex, 5000), 0);
    ostore_stats_t st;
    ostore_stats(f->st, &st);
    assert_int_equal(st.objects, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(mbox_count(f->mb), 0);
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    mbox_shutdown(f->mb);
    exec_stop(f->ex);
    dplane_stop(f->dp);
    mbox_free(f->mb);
    ostore_free(f->st);
    for (int i = 0; i < f->sink.n; i++)
        json_decref(f->sink.body[i]);
    pthread_mutex_destroy(&f->sink.mu);
    pthread_cond_destroy(&f->sink.cv);
    free(f);
    return 0;
}

static const char *PRODUCE =
    "{\"name\": \"produce\", \"slice\": \"a\", \"ops\": ["
    " {\"op\": \"shard_index\", \"out\": \"i\"},"
    " {\"op\": \"fill\", \"out\": \"x\", \"shape\": [4], \"value\": 1.0},"
    " {\"op\": \"mul\", \"out\": \"y\", \"args\": [\"x\", \"i\"]},"
    " {\"op\": \"all_reduce\", \"out\": \"z\", \"args\": [\"y\"], \"reduce\": \"sum\"}],"
    " \"outputs\": [\"z\"]}";

static const char *CONSUME =
    "{\"name\": \"consume\", \"slice\": \"b\", \"ops\": ["
    " {\"op\": \"input\", \"out\": \"z\", \"from\": \"produce.z\"},"
    " {\"op\": \"scale\", \"out\": \"w\", \"args\": [\"z\"], \"factor\": 0.5}],"
    " \"outputs\": [\"w\"]}";

/* A TASK object of docs/worker-protocol.md on a [2,2] slice whose every
 * peer is this process. sends_to_consumer adds the produce.z edge. */
static json_t *make_task(fixture_t *f, int64_t id, int64_t job, int comp, int seq, int shard,
                         const char *computation, int sends_to_consumer)
{
    json_error_t jerr;
    json_t *c = json_loads(computation, 0, &jerr);
    assert_non_null(c);
    const char *me = dplane_addr(f->dp);
    json_t *t = json_pack("{s:I, s:I, s:i, s:i, s:i, s:i, s:i, s:[i,i], s:o, s:{s:[i]},"
                          " s:[s,s,s,s]}",
                          "task", (json_int_t)id, "job", (json_int_t)job, "attempt", 0,
                          "comp", comp, "seq", seq, "shard", shard, "device", shard,
                          "slice_shape", 2, 2, "computation", c, "input_shapes", "produce.z", 4,
                          "peers", me, me, me, me);
    assert_non_null(t);
    if (sends_to_consumer) {
        json_t *s = json_pack("[{s:s, s:i, s:i, s:s}]", "value", "z", "comp", 1, "op", 0,
                              "to", me);
        assert_int_equal(json_object_set_new(t, "sends", s), 0);
    }
    return t;
}

static void submit(fixture_t *f, json_t *task)
{
    exec_submit(f->ex, task);
    json_decref(task);
}

static void assert_output_all(const json_t *report, const char *value, double want, double sum)
{
    assert_non_null(report);
    assert_string_equal(json_string_value(json_object_get(report, "state")), "succeeded");
    const json_t *out = json_object_get(json_object_get(report, "outputs"), value);
    assert_non_null(out);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(out, "shape"), 0)), 4);
    assert_true(json_real_value(json_object_get(out, "sum")) == sum);
    const json_t *vals = json_object_get(out, "values");
    assert_int_equal(json_array_size(vals), 4);
    for (size_t k = 0; k < 4; k++)
        assert_true(json_number_value(json_array_get(vals, k)) == want);
    int64_t started = json_integer_value(json_object_get(report, "started_us"));
    int64_t ready = json_integer_value(json_object_get(report, "inputs_ready_us"));
    int64_t finished = json_integer_value(json_object_get(report, "finished_us"));
    assert_true(started > 0 && started <= ready && ready <= finished);
}

/* DESIGN.md's example: produce.z is 6 everywhere, consume.w 3. */
static void test_design_example(void **state)
{
    fixture_t *f = *state;
    for (int s = 0; s < 4; s++)
        submit(f, make_task(f, 10 + s, 1, 0, 1, s, PRODUCE, 1));
    for (int s = 0; s < 4; s++)
        submit(f, make_task(f, 20 + s, 1, 1, 2, s, CONSUME, 0));
    assert_int_equal(sink_wait(&f->sink, 8), 8);
    for (int s = 0; s < 4; s++) {
        const json_t *prod = sink_find(&f->sink, 10 + s);
        assert_output_all(prod, "z", 6.0, 24.0);
        assert_output_all(sink_find(&f->sink, 20 + s), "w", 3.0, 12.0);
        /* No `input` op: inputs were ready when it started (collective
         * pieces are not inputs). */
        assert_true(json_integer_value(json_object_get(prod, "inputs_ready_us")) ==
                    json_integer_value(json_object_get(prod, "started_us")));
    }
    assert_int_equal(mbox_count(f->mb), 0);    /* every message was consumed */
    assert_store_empty(f);
    ostore_stats_t st;
    ostore_stats(f->st, &st);
    assert_true(st.peak_bytes > 0);             /* values did live in the store */
}

/* Tasks run in seq order per device, whatever the submission order, when
 * they are queued behind a busy device. */
static void test_seq_order_per_device(void **state)
{
    fixture_t *f = *state;
    /* Keep every device busy 300 ms so the next tasks queue up. */
    const char *busy = "{\"name\": \"busy\", \"slice\": \"a\", \"ops\": ["
                       " {\"op\": \"compute\", \"out\": \"c\", \"us\": 300000}],"
                       " \"outputs\": []}";
    for (int s = 0; s < 4; s++)
        submit(f, make_task(f, 30 + s, 2, 2, 0, s, busy, 0));
    for (int s = 0; s < 4; s++)
        submit(f, make_task(f, 20 + s, 1, 1, 2, s, CONSUME, 0));
    for (int s = 0; s < 4; s++)
        submit(f, make_task(f, 10 + s, 1, 0, 1, s, PRODUCE, 1));
    assert_int_equal(sink_wait(&f->sink, 12), 12);
    for (int s = 0; s < 4; s++) {
        assert_output_all(sink_find(&f->sink, 10 + s), "z", 6.0, 24.0);
        assert_output_all(sink_find(&f->sink, 20 + s), "w", 3.0, 12.0);
    }
}

static const char *COLLS =
    "{\"name\": \"c\", \"slice\": \"a\", \"ops\": ["
    " {\"op\": \"shard_index\", \"out\": \"i\"},"
    " {\"op\": \"iota\", \"out\": \"x\", \"shape\": [4]},"
    " {\"op\": \"add\", \"out\": \"y\", \"args\": [\"x\", \"i\"]},"
    " {\"op\": \"ppermute\", \"out\": \"p\", \"args\": [\"y\"], \"shift\": 1},"
    " {\"op\": \"all_gather\", \"out\": \"g\", \"args\": [\"y\"], \"axis\": 0},"
    " {\"op\": \"all_to_all\", \"out\": \"t\", \"args\": [\"y\"], \"split_axis\": 0,"
    "  \"concat_axis\": 0},"
    " {\"op\": \"reduce_scatter\", \"out\": \"r\", \"args\": [\"y\"], \"axis\": 0,"
    "  \"reduce\": \"sum\"},"
    " {\"op\": \"all_reduce\", \"out\": \"m\", \"args\": [\"i\"], \"reduce\": \"max\","
    "  \"mesh_axes\": [1]}],"
    " \"outputs\": [\"p\", \"g\", \"t\", \"r\", \"m\"]}";

/* The values of output `name` of a report, as doubles; returns the count. */
static size_t output_values(const json_t *report, const char *name, double *v, size_t cap)
{
    const json_t *vals = json_object_get(json_object_get(json_object_get(report, "outputs"),
                                                         name), "values");
    size_t n = json_array_size(vals);
    for (size_t k = 0; k < n && k < cap; k++)
        v[k] = json_number_value(json_array_get(vals, k));
    return n;
}

/* Every collective's exchange pattern through the executor. With
 * y_k = [k, k+1, k+2, k+3] on shard k of a [2,2] slice:
 * ppermute(1) -> y_{k-1}; all_gather -> y_0..y_3; all_to_all -> [k..k+3];
 * reduce_scatter(sum) -> [6 + 4k]; all_reduce(max) along mesh axis 1 ->
 * the larger shard index of k's row. */
static void test_collectives(void **state)
{
    fixture_t *f = *state;
    for (int s = 0; s < 4; s++)
        submit(f, make_task(f, 70 + s, 6, 0, 1, s, COLLS, 0));
    assert_int_equal(sink_wait(&f->sink, 4), 4);
    for (int k = 0; k < 4; k++) {
        const json_t *r = sink_find(&f->sink, 70 + k);
        assert_non_null(r);
        assert_string_equal(json_string_value(json_object_get(r, "state")), "succeeded");
        double v[16];
        int prev = (k + 3) % 4;
        assert_int_equal(output_values(r, "p", v, 16), 4);
        for (int e = 0; e < 4; e++)
            assert_true(v[e] == prev + e);
        assert_int_equal(output_values(r, "g", v, 16), 16);
        for (int e = 0; e < 16; e++)
            assert_true(v[e] == e / 4 + e % 4);
        assert_int_equal(output_values(r, "t", v, 16), 4);
        for (int e = 0; e < 4; e++)
            assert_true(v[e] == k + e);
        assert_int_equal(output_values(r, "r", v, 16), 1);
        assert_true(v[0] == 6 + 4 * k);
        assert_int_equal(output_values(r, "m", v, 16), 1);
        assert_true(v[0] == (k < 2 ? 1 : 3));
    }
}

static const char *report_state(fixture_t *f, int64_t task)
{
    const json_t *r = sink_find(&f->sink, task);
    return r ? json_string_value(json_object_get(r, "state")) : "(none)";
}

/* A consumer whose input never comes fails with a timeout, not a hang. */
static void test_peer_timeout(void **state)
{
    fixture_t *f = *state;
    submit(f, make_task(f, 40, 3, 1, 2, 0, CONSUME, 0));
    assert_int_equal(sink_wait(&f->sink, 1), 1);
    assert_string_equal(report_state(f, 40), "failed");
    const char *err = json_string_value(json_object_get(sink_find(&f->sink, 40), "error"));
    assert_non_null(strstr(err, "timed out"));
    assert_store_empty(f);
}

/* Cancel wakes a running waiter and reports queued tasks cancelled. */
static void test_cancel(void **state)
{
    fixture_t *f = *state;
    submit(f, make_task(f, 50, 4, 1, 2, 0, CONSUME, 0));     /* waits for input */
    submit(f, make_task(f, 51, 4, 1, 3, 0, CONSUME, 0));     /* queued behind it */
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
    assert_int_equal(exec_pending(f->ex), 2);
    int64_t t0 = util_mono_us();
    exec_cancel_job(f->ex, 4);
    assert_int_equal(sink_wait(&f->sink, 2), 2);
    assert_true(util_mono_us() - t0 < 2000000);
    assert_string_equal(report_state(f, 50), "cancelled");
    assert_string_equal(report_state(f, 51), "cancelled");
    assert_store_empty(f);
}

/* A long `compute` stops soon after its job is cancelled; a repeated
 * cancel of the same job is recognised as nothing new. */
static void test_cancel_compute(void **state)
{
    fixture_t *f = *state;
    const char *slow = "{\"name\": \"slow\", \"slice\": \"a\", \"ops\": ["
                       " {\"op\": \"compute\", \"out\": \"c\", \"us\": 5000000}],"
                       " \"outputs\": [\"c\"]}";
    submit(f, make_task(f, 80, 7, 0, 1, 0, slow, 0));
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
    int64_t t0 = util_mono_us();
    assert_int_equal(exec_cancel_job(f->ex, 7), 1);
    assert_int_equal(exec_cancel_job(f->ex, 7), 0);
    assert_int_equal(sink_wait(&f->sink, 1), 1);
    assert_true(util_mono_us() - t0 < 1000000);
    assert_string_equal(report_state(f, 80), "cancelled");
    assert_int_equal(exec_cancel_job(f->ex, 7), 0);
    assert_store_empty(f);
}

/* Bad tasks are reported failed, never crash the worker. */
static void test_bad_tasks(void **state)
{
    fixture_t *f = *state;
    json_t *t = make_task(f, 60, 5, 0, 1, 0, PRODUCE, 0);
    json_object_del(t, "peers");
    submit(f, t);
    t = make_task(f, 61, 5, 0, 1, 0, PRODUCE, 0);
    json_object_set_new(t, "device", json_integer(9));      /* no such device */
    submit(f, t);
    const char *bogus = "{\"name\": \"x\", \"slice\": \"a\", \"ops\": ["
                        " {\"op\": \"frobnicate\", \"out\": \"q\"}], \"outputs\": [\"q\"]}";
    submit(f, make_task(f, 62, 5, 0, 1, 0, bogus, 0));
    assert_int_equal(sink_wait(&f->sink, 3), 3);
    assert_string_equal(report_state(f, 60), "failed");
    assert_string_equal(report_state(f, 61), "failed");
    assert_string_equal(report_state(f, 62), "failed");
    const char *err = json_string_value(json_object_get(sink_find(&f->sink, 62), "error"));
    assert_non_null(strstr(err, "compile"));
}

/* A TASK on a 1-D slice of n shards, every peer this process, shard k on
 * device k. */
static json_t *make_task_n(fixture_t *f, int64_t id, int64_t job, int seq, int shard, int n,
                           const char *computation)
{
    json_error_t jerr;
    json_t *c = json_loads(computation, 0, &jerr);
    assert_non_null(c);
    json_t *peers = json_array();
    for (int k = 0; k < n; k++)
        json_array_append_new(peers, json_string(dplane_addr(f->dp)));
    json_t *t = json_pack("{s:I, s:I, s:i, s:i, s:i, s:i, s:i, s:[i], s:o, s:{}, s:o}",
                          "task", (json_int_t)id, "job", (json_int_t)job, "attempt", 0,
                          "comp", 0, "seq", seq, "shard", shard, "device", shard,
                          "slice_shape", n, "computation", c, "input_shapes", "peers", peers);
    assert_non_null(t);
    return t;
}

/* y_k[e] = tanh(0.001 (e + k)^2) on shard k: irregular data whose every
 * element differs per shard; then sum and max all_reduce of it, and an
 * all_gather along axis 1 of a [2, 256] value (kept small enough for the
 * report to carry every value). */
#define RING_LEN 3000
static const char *RING_COMP =
    "{\"name\": \"r\", \"slice\": \"a\", \"ops\": ["
    " {\"op\": \"shard_index\", \"out\": \"i\"},"
    " {\"op\": \"iota\", \"out\": \"x\", \"shape\": [3000]},"
    " {\"op\": \"add\", \"out\": \"a\", \"args\": [\"x\", \"i\"]},"
    " {\"op\": \"mul\", \"out\": \"b\", \"args\": [\"a\", \"a\"]},"
    " {\"op\": \"scale\", \"out\": \"c\", \"args\": [\"b\"], \"factor\": 0.001},"
    " {\"op\": \"tanh\", \"out\": \"y\", \"args\": [\"c\"]},"
    " {\"op\": \"all_reduce\", \"out\": \"s\", \"args\": [\"y\"], \"reduce\": \"sum\"},"
    " {\"op\": \"all_reduce\", \"out\": \"m\", \"args\": [\"y\"], \"reduce\": \"max\"},"
    " {\"op\": \"iota\", \"out\": \"x2\", \"shape\": [2, 256]},"
    " {\"op\": \"add\", \"out\": \"q\", \"args\": [\"x2\", \"i\"]},"
    " {\"op\": \"all_gather\", \"out\": \"g\", \"args\": [\"q\"], \"axis\": 1}],"
    " \"outputs\": [\"s\", \"m\", \"g\"]}";

static float ring_y(int k, int e)
{
    float a = (float)e + (float)k;
    return tanhf((a * a) * 0.001f);
}

static int close_rel(double got, double want)
{
    return fabs(got - want) <= 1e-5 * fmax(1.0, fabs(want));
}

/* all_reduce and all_gather agree with the definition for groups of 1, 3
 * and 8 shards, whichever algorithm the fixture forces (ring or direct). */
static void test_ring_vs_direct(void **state)
{
    fixture_t *f = *state;
    static const int sizes[3] = {1, 3, 8};
    double *v = malloc(sizeof(double) * 8 * RING_LEN);
    assert_non_null(v);
    int64_t id = 100;
    for (int j = 0; j < 3; j++)
        for (int k = 0; k < sizes[j]; k++)
            submit(f, make_task_n(f, id + 10 * j + k, 20 + j, 1 + j, k, sizes[j], RING_COMP));
    assert_int_equal(sink_wait(&f->sink, 12), 12);
    for (int j = 0; j < 3; j++) {
        int n = sizes[j];
        for (int k = 0; k < n; k++) {
            const json_t *r = sink_find(&f->sink, id + 10 * j + k);
            assert_non_null(r);
            assert_string_equal(json_string_value(json_object_get(r, "state")), "succeeded");
            assert_int_equal(output_values(r, "s", v, RING_LEN), RING_LEN);
            for (int e = 0; e < RING_LEN; e++) {
                double want = 0;
                for (int p = 0; p < n; p++)
                    want += ring_y(p, e);
                assert_true(close_rel(v[e], want));
            }
            assert_int_equal(output_values(r, "m", v, RING_LEN), RING_LEN);
            for (int e = 0; e < RING_LEN; e++)
                assert_true(v[e] == ring_y(n - 1, e));   /* tanh grows with e + k */
            /* g: [2, 256 n], row r = the row-r blocks of shards 0..n-1,
             * block p holding 256 r + e + p. */
            assert_int_equal(output_values(r, "g", v, 8 * RING_LEN), (size_t)(512 * n));
            for (int row = 0; row < 2; row++)
                for (int p = 0; p < n; p++)
                    for (int e = 0; e < 256; e++)
                        assert_true(v[row * 256 * n + p * 256 + e] == row * 256 + e + p);
        }
    }
    free(v);
    assert_store_empty(f);
    /* 3 collectives per job; the groups of 3 and 8 took the ring when the
     * fixture asks for it (threshold 1 byte), never otherwise. A group of
     * one is always direct (nothing to exchange). */
    exec_counters_t *c = exec_counters(f->ex);
    int64_t ring = atomic_load(&c->ring), direct = atomic_load(&c->direct);
    assert_int_equal(ring + direct, 3 * 12);
    assert_int_equal(ring, f->ex->env.ring_min_bytes == 1 ? 3 * 11 : 0);
    /* Every shard here lives in this one process: without the ring, the
     * groups of 3 and 8 go through the process leader unless that is off. */
    int64_t two_level = atomic_load(&c->two_level);
    int want = f->ex->env.ring_min_bytes == 1 || f->ex->env.no_two_level ? 0 : 3 * 11;
    assert_int_equal(two_level, want);
}

/* A value larger than the whole store fails its task with a clear error. */
static void test_store_too_small(void **state)
{
    fixture_t *f = *state;
    const char *big = "{\"name\": \"big\", \"slice\": \"a\", \"ops\": ["
                      " {\"op\": \"fill\", \"out\": \"x\", \"shape\": [1048576],"
                      "  \"value\": 1.0}], \"outputs\": [\"x\"]}";
    submit(f, make_task_n(f, 90, 30, 1, 0, 1, big));
    assert_int_equal(sink_wait(&f->sink, 1), 1);
    assert_string_equal(report_state(f, 90), "failed");
    const char *err = json_string_value(json_object_get(sink_find(&f->sink, 90), "error"));
    assert_non_null(strstr(err, "object store cap"));
    assert_store_empty(f);
}

/* Back-pressure: with a 1 MiB store, the second of two 600 KB values waits
 * until the first task freed its memory, then succeeds. A third task whose
 * memory never comes fails after the bound with a clear error. */
static void test_store_backpressure(void **state)
{
    fixture_t *f = *state;
    const char *hold = "{\"name\": \"h\", \"slice\": \"a\", \"ops\": ["
                       " {\"op\": \"fill\", \"out\": \"x\", \"shape\": [150000],"
                       "  \"value\": 2.0},"
                       " {\"op\": \"compute\", \"out\": \"c\", \"us\": 300000}],"
                       " \"outputs\": [\"x\"]}";
    submit(f, make_task_n(f, 91, 31, 1, 0, 1, hold));
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
    json_t *t = make_task_n(f, 92, 32, 1, 0, 1, hold);
    json_object_set_new(t, "device", json_integer(1));
    submit(f, t);
    assert_int_equal(sink_wait(&f->sink, 2), 2);
    assert_string_equal(report_state(f, 91), "succeeded");
    assert_string_equal(report_state(f, 92), "succeeded");
    ostore_stats_t st;
    ostore_stats(f->st, &st);
    assert_true(st.waits >= 1);
    assert_true(st.peak_bytes <= st.cap_bytes);
    assert_store_empty(f);

    /* Memory held by a message nobody takes (a forced charge) never frees:
     * the waiting task fails after the peer timeout, the worker lives on. */
    shape_t s900k = {.rank = 1, .dim = {225000}};
    mbox_tag_t stray = {.job = 99, .op = 1};
    mbox_put(f->mb, &stray, tensor_new(&s900k));
    submit(f, make_task_n(f, 93, 33, 1, 0, 1, hold));
    assert_int_equal(sink_wait(&f->sink, 3), 3);
    assert_string_equal(report_state(f, 93), "failed");
    const char *err = json_string_value(json_object_get(sink_find(&f->sink, 93), "error"));
    assert_non_null(strstr(err, "object store full"));
    mbox_drop_job(f->mb, 99, 0);
    assert_store_empty(f);
}

/* A cancelled task frees the values it held. */
static void test_cancel_frees_values(void **state)
{
    fixture_t *f = *state;
    const char *slow = "{\"name\": \"s\", \"slice\": \"a\", \"ops\": ["
                       " {\"op\": \"fill\", \"out\": \"x\", \"shape\": [1000],"
                       "  \"value\": 1.0},"
                       " {\"op\": \"compute\", \"out\": \"c\", \"us\": 5000000}],"
                       " \"outputs\": [\"x\", \"c\"]}";
    submit(f, make_task_n(f, 95, 40, 1, 0, 1, slow));
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
    ostore_stats_t st;
    ostore_stats(f->st, &st);
    assert_int_equal(st.objects, 1);                /* x, held for the report */
    assert_int_equal(ostore_job_objects(f->st, 40), 1);
    exec_cancel_job(f->ex, 40);
    assert_int_equal(sink_wait(&f->sink, 1), 1);
    assert_string_equal(report_state(f, 95), "cancelled");
    assert_int_equal(ostore_job_objects(f->st, 40), 0);
    assert_store_empty(f);
}

/* Finding 3: a leader's pack shorter than the plan says (here 1 element
 * instead of 2 members x 4) fails the shard with a clear error and is
 * counted; it is never unpacked past its end (ASan caught that read). The
 * other process (shards 2 and 3) is a second data plane nobody serves, so
 * the pack this process's leader sends it just waits there. */
static void test_short_leader_pack(void **state)
{
    fixture_t *f = *state;
    mbox_t *mb2 = mbox_new();
    dplane_t *dp2 = dplane_start("127.0.0.1:0", NULL, mb2);
    assert_non_null(dp2);
    const char *me = dplane_addr(f->dp), *other = dplane_addr(dp2);
    /* all_reduce is op 3 of PRODUCE; the pack of shards 2-3 comes from 2. */
    shape_t one = {.rank = 1, .dim = {1}};
    tensor_t *shortp = tensor_new(&one);
    assert_non_null(shortp);
    shortp->data[0] = 7.0f;
    mbox_tag_t tag = {.job = 60, .attempt = 0, .comp = 0, .op = hier_op_tag(3, HIER_LEADERS),
                      .src = 2, .dst = 0};
    mbox_put(f->mb, &tag, shortp);
    for (int shard = 0; shard < 2; shard++) {
        json_error_t jerr;
        json_t *c = json_loads(PRODUCE, 0, &jerr);
        assert_non_null(c);
        json_t *t = json_pack("{s:I, s:I, s:i, s:i, s:i, s:i, s:i, s:[i,i], s:o, s:{},"
                              " s:[s,s,s,s]}", "task", (json_int_t)(600 + shard), "job",
                              (json_int_t)60, "attempt", 0, "comp", 0, "seq", 1, "shard",
                              shard, "device", shard, "slice_shape", 2, 2, "computation", c,
                              "input_shapes", "peers", me, me, other, other);
        assert_non_null(t);
        submit(f, t);
    }
    assert_int_equal(sink_wait(&f->sink, 2), 2);
    const json_t *lead = sink_find(&f->sink, 600);
    assert_non_null(lead);
    assert_string_equal(json_string_value(json_object_get(lead, "state")), "failed");
    const char *err = json_string_value(json_object_get(lead, "error"));
    assert_non_null(strstr(err, "expected 8 elements"));
    assert_int_equal(atomic_load(&exec_counters(f->ex)->bad_size), 1);
    const json_t *member = sink_find(&f->sink, 601);
    assert_non_null(member);
    assert_string_equal(json_string_value(json_object_get(member, "state")), "failed");
    assert_store_empty(f);
    dplane_stop(dp2);
    mbox_free(mb2);
}

/* Finding 3: a direct-exchange piece of the wrong shape (3 elements where
 * every member's argument has 4) fails the shard instead of being reduced
 * past its end. */
static void test_short_direct_piece(void **state)
{
    fixture_t *f = *state;
    shape_t three = {.rank = 1, .dim = {3}};
    tensor_t *bad = tensor_new(&three);
    assert_non_null(bad);
    /* Shard 1 expects its piece from shard 0 under op 3 (flat exchange). */
    mbox_tag_t tag = {.job = 61, .attempt = 0, .comp = 0, .op = 3, .src = 0, .dst = 1};
    mbox_put(f->mb, &tag, bad);
    for (int shard = 0; shard < 4; shard++)
        submit(f, make_task(f, 610 + shard, 61, 0, 1, shard, PRODUCE, 0));
    assert_int_equal(sink_wait(&f->sink, 4), 4);
    const json_t *rep = sink_find(&f->sink, 611);
    assert_string_equal(json_string_value(json_object_get(rep, "state")), "failed");
    assert_non_null(strstr(json_string_value(json_object_get(rep, "error")), "expected [4]"));
    assert_true(atomic_load(&exec_counters(f->ex)->bad_size) >= 1);
    assert_store_empty(f);
}

static int setup_flat_short(void **state)
{
    return fixture_start_flat(state, 300, 4, (int64_t)64 << 20, INT64_MAX, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_design_example, setup_normal, teardown),
        cmocka_unit_test_setup_teardown(test_seq_order_per_device, setup_normal, teardown),
        cmocka_unit_test_setup_teardown(test_collectives, setup_normal, teardown),
        cmocka_unit_test_setup_teardown(test_peer_timeout, setup_short_timeout, teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup_normal, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_compute, setup_normal, teardown),
        cmocka_unit_test_setup_teardown(test_bad_tasks, setup_normal, teardown),
        cmocka_unit_test_setup_teardown(test_ring_vs_direct, setup_ring8, teardown),
        cmocka_unit_test_setup_teardown(test_ring_vs_direct, setup_direct8, teardown),
        cmocka_unit_test_setup_teardown(test_ring_vs_direct, setup_flat8, teardown),
        cmocka_unit_test_setup_teardown(test_store_too_small, setup_small_store, teardown),
        cmocka_unit_test_setup_teardown(test_store_backpressure, setup_small_store, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_frees_values, setup_normal, teardown),
        cmocka_unit_test_setup_teardown(test_short_leader_pack, setup_short_timeout, teardown),
        cmocka_unit_test_setup_teardown(test_short_direct_piece, setup_flat_short, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
