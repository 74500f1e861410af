/* test_worker_exec.c - the worker executor end to end inside one process:
 * several "worker processes" (each its own executor, mailbox, object store
 * and data plane on loopback) run host tasks of one placement; real
 * runner threads, real compiler/kernels/collectives from atoll_common, real
 * frames between the data planes. The worker modules it reaches into are
 * compiled in (their static functions); atoll_workerlib supplies the rest.
 *
 * What it pins: exact chained results across processes, one packed message
 * per process pair and op, the fold-order rule (bits of the per-shard
 * runtime), a forged pack of the wrong size failing the task without being
 * read, attempt-exact cancel, gang order of overlapping tasks, a runner
 * that claims a task waking the next (no deadlock between procs), malformed
 * groups reported failed, and the relay through the root (large slices)
 * giving the direct exchange's bits with 2 (P - 1) messages; a gang's
 * coordinator port drawn below the kernel's ephemeral range, and free. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../workers/dplane.c"
#include "../../workers/exec.c"
#include "../../workers/exec_run.c"
#include "../../workers/exec_coll.c"
#include "../../workers/exec_gang.c"
#include "../../workers/gang.c"
#include "../../workers/runlog.c"
#include "../../workers/wclient.c"
#include "../../workers/mbox.c"
#include "../../workers/ostore.c"
#include "../../workers/wtask.c"
#include "../../workers/wtask_read.c"

#define MAX_REPORTS 256
#define MAX_PROCS 4

typedef struct sink {
    pthread_mutex_t mu;
    int n;
    int64_t task[MAX_REPORTS];
    json_t *body[MAX_REPORTS];
    int hold[MAX_REPORTS];              /* exec_report_fn's hold */
    int32_t comp[MAX_REPORTS];          /* exec_report_fn's comp */
    int64_t due[MAX_REPORTS];           /* exec_report_fn's due_us */
    int64_t at[MAX_REPORTS];            /* util_mono_us() when handed over */
} sink_t;

typedef struct proc {
    ostore_t *st;
    mbox_t *mb;
    dplane_t *dp;
    exec_t *ex;
    sink_t sink;
} proc_t;

typedef struct cluster {
    int nprocs, ndev;
    proc_t p[MAX_PROCS];
} cluster_t;

/* Keeps each report as the tree of its text: a text that is not JSON
 * becomes NULL, which every check of the report then fails. */
static void sink_fn(void *ctx, int64_t task, int32_t comp, char *text, int hold, int64_t due_us)
{
    sink_t *s = ctx;
    json_t *body = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    pthread_mutex_lock(&s->mu);
    if (s->n < MAX_REPORTS) {
        s->task[s->n] = task;
        s->comp[s->n] = comp;
        s->hold[s->n] = hold;
        s->due[s->n] = due_us;
        s->at[s->n] = util_mono_us();
        s->body[s->n++] = body;
    } else {
        json_decref(body);
    }
    pthread_mutex_unlock(&s->mu);
}

/* The executor takes a whole poll answer's JSON text (exec_take_answer);
 * the tests build its groups as trees. The answer's task count, or -1. */
static int submit_text(exec_t *ex, const json_t *jobs)
{
    json_t *ans = json_pack("{s:O, s:[], s:i}", "jobs", jobs, "cancel", "lease", 0);
    char *text = json_dumps(ans, JSON_COMPACT);
    json_decref(ans);
    assert_non_null(text);
    exec_answer_t a;
    int rc = exec_take_answer(ex, text, strlen(text), &a);
    free(text);
    return rc == 0 ? a.ntasks : -1;
}

/* One group, as the only one of an answer. */
static int submit_json(exec_t *ex, const json_t *group)
{
    json_t *jobs = json_pack("[O]", group);
    int n = submit_text(ex, jobs);
    json_decref(jobs);
    return n;
}

/* An answer's "jobs" array of groups. */
static int submit_answer_json(exec_t *ex, const json_t *jobs)
{
    return submit_text(ex, jobs);
}

static int sink_count(sink_t *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->n;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Waits (condition polled, up to 30 s) until proc q has n reports. */
static int sink_wait(sink_t *s, int n)
{
    int64_t deadline = util_mono_us() + 30 * 1000000;
    while (sink_count(s) < n && util_mono_us() < deadline) {
        struct timespec ts = {0, 2 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return sink_count(s);
}

static const json_t *sink_find(sink_t *s, int64_t task)
{
    const json_t *b = NULL;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n; i++)
        if (s->task[i] == task)
            b = s->body[i];
    pthread_mutex_unlock(&s->mu);
    return b;
}

static const char *state_of(const json_t *b)
{
    return json_string_value(json_object_get(b, "state"));
}

static void store_acct(void *ctx, int64_t dobjects, int64_t dbytes)
{
    ostore_charge(ctx, dobjects, dbytes);
}

/* exec_cfg_t.relay_min_procs of the procs cluster_new() starts (0: default). */
static int test_relay_min;
/* exec_cfg_t.sim of the procs cluster_new() starts: devices are modelled
 * streams; and their sim_ahead_us (0: the default). */
static int test_sim;
static int64_t test_sim_ahead_us;
/* When not 0: proc q is sim when bit q is set, whatever test_sim says. */
static unsigned test_sim_mask;

static int proc_start(proc_t *p, int ndev, int64_t ring_min_bytes, int64_t timeout_ms)
{
    pthread_mutex_init(&p->sink.mu, NULL);
    p->st = ostore_new((int64_t)256 << 20);
    p->mb = mbox_new();
    mbox_set_accounting(p->mb, store_acct, p->st);
    p->dp = dplane_start("127.0.0.1:0", NULL, p->mb, DPLANE_AUTO, NULL);
    if (!p->dp)
        return -1;
    exec_cfg_t cfg = {.ndevices = ndev, .peer_timeout_us = timeout_ms * 1000, .store = p->st,
                      .ring_min_bytes = ring_min_bytes, .relay_min_procs = test_relay_min,
                      .sim = test_sim, .sim_ahead_us = test_sim_ahead_us,
                      .self_addr = dplane_addr(p->dp)};
    p->ex = exec_start(&cfg, p->mb, p->dp, sink_fn, &p->sink);
    return p->ex ? 0 : -1;
}

static void proc_stop(proc_t *p)
{
    if (p->mb)
        mbox_shutdown(p->mb);
    exec_stop(p->ex);
    dplane_stop(p->dp);
    mbox_free(p->mb);
    ostore_free(p->st);
    for (int i = 0; i < p->sink.n; i++)
        json_decref(p->sink.body[i]);
    pthread_mutex_destroy(&p->sink.mu);
}

static cluster_t *cluster_new(int nprocs, int ndev, int64_t ring_min_bytes, int64_t timeout_ms)
{
    cluster_t *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->nprocs = nprocs;
    c->ndev = ndev;
    int sim = test_sim;
    for (int i = 0; i < nprocs; i++) {
        if (test_sim_mask)
            test_sim = (int)(test_sim_mask >> i) & 1;
        assert_int_equal(proc_start(&c->p[i], ndev, ring_min_bytes, timeout_ms), 0);
    }
    test_sim = sim;
    return c;
}

/* cluster_new(nprocs, ndev, 0, 20000) of sim procs. */
static cluster_t *cluster_new_sim(int nprocs, int ndev)
{
    test_sim = 1;
    cluster_t *c = cluster_new(nprocs, ndev, 0, 20000);
    test_sim = 0;
    return c;
}

static void cluster_free(cluster_t *c)
{
    for (int i = 0; i < c->nprocs; i++)
        proc_stop(&c->p[i]);
    free(c);
}

/* Placement of slice "a" = the whole island mesh [rows, cols], proc q
 * holding devices [q * ndev, (q + 1) * ndev). New reference. */
static json_t *placement(const cluster_t *c, int rows, int cols)
{
    json_t *procs = json_array();
    for (int q = 0; q < c->nprocs; q++)
        json_array_append_new(procs, json_pack("{s:s, s:s, s:i, s:i}", "addr",
                                               dplane_addr(c->p[q].dp), "island", "w", "first",
                                               q * c->ndev, "count", c->ndev));
    return json_pack("{s:o, s:{s:{s:s, s:[i,i], s:[i,i], s:[i,i]}}}", "procs", procs, "slices",
                     "a", "island", "w", "mesh", rows, cols, "origin", 0, 0, "box", rows, cols);
}

/* The host task of proc q for computation `comp` (its ops: new reference,
 * stolen) on slice [rows, cols]. */
static json_t *host_task(const cluster_t *c, int64_t id, int64_t job, int attempt, int comp,
                         int64_t seq, int rows, int cols, int q, json_t *ops, json_t *inputs,
                         json_t *sends)
{
    json_t *shards = json_array(), *devs = json_array();
    for (int d = 0; d < c->ndev; d++) {
        json_array_append_new(shards, json_integer(q * c->ndev + d));
        json_array_append_new(devs, json_integer(d));
    }
    char name[16];
    snprintf(name, sizeof name, "c%d", comp);
    return json_pack("{s:I, s:I, s:i, s:i, s:I, s:s, s:[i,i], s:{s:s, s:s, s:o, s:[s]},"
                     " s:o, s:o, s:o, s:o}",
                     "task", (json_int_t)id, "job", (json_int_t)job, "attempt", attempt,
                     "comp", comp, "seq", (json_int_t)seq, "slice", "a", "slice_shape", rows,
                     cols, "computation", "name", name, "slice", "a", "ops", ops, "outputs",
                     "y", "input_shapes", inputs ? inputs : json_object(), "shards", shards,
                     "devices", devs, "sends", sends ? sends : json_array());
}

/* Every group's data-plane key (the controller's is per attempt). */
#define TEST_KEY_HEX "00112233445566778899aabbccddeeff"
static const mbox_key_t TEST_KEY = {{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99,
                                     0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}};

static json_t *group(int64_t job, int attempt, json_t *place, json_t *tasks)
{
    return json_pack("{s:I, s:i, s:s, s:o, s:o}", "job", (json_int_t)job, "attempt", attempt,
                     "key", TEST_KEY_HEX, "placement", place, "tasks", tasks);
}

/* Element e of output `name` of shard index l (in task order) of a report:
 * its "values_f32" decoded (f32b64.h); NaN when absent or malformed. */
static float named_value(const json_t *b, const char *name, int l, int e)
{
    const json_t *t = json_array_get(json_object_get(json_object_get(b, "outputs"), name),
                                     (size_t)l);
    const json_t *v = json_object_get(t, "values_f32");
    int64_t n = 1;
    for (size_t d = 0; d < json_array_size(json_object_get(t, "shape")); d++)
        n *= json_integer_value(json_array_get(json_object_get(t, "shape"), d));
    float *vals = malloc(sizeof *vals * (size_t)(n > 0 ? n : 1)), out = NAN;
    if (vals && e < n && f32b64_decode(json_string_value(v), json_string_length(v), vals, n) == 0)
        out = vals[e];
    free(vals);
    return out;
}

static float out_value(const json_t *b, int l, int e)
{
    return named_value(b, "y", l, e);
}

/* ---- chained all_reduce + add over 4 processes ---- */

#define CHAIN 20

static json_t *chain_ops(int k)
{
    json_t *first = k == 0 ? json_pack("{s:s, s:s}", "op", "shard_index", "out", "x")
                           : json_pack("{s:s, s:s}", "op", "input", "out", "x");
    if (k > 0) {
        char from[32];
        snprintf(from, sizeof from, "c%d.y", k - 1);
        json_object_set_new(first, "from", json_string(from));
    }
    return json_pack("[o, {s:s, s:s, s:[s], s:s}, {s:s, s:s, s:[s,s]}]", first, "op",
                     "all_reduce", "out", "r", "args", "x", "reduce", "max", "op", "add", "out",
                     "y", "args", "r", "r");
}

/* Proc q's host task (id) of step k of an n-step chain of job `job` on
 * the whole [side, side] mesh, seq 10 + k: its input is step k - 1's y,
 * its y goes to step k + 1 (shard to same shard). ops: stolen. */
static json_t *chain_task(const cluster_t *c, int64_t id, int64_t job, int k, int n, int side,
                          int q, json_t *ops)
{
    char from[32];
    snprintf(from, sizeof from, "c%d.y", k - 1);
    json_t *in = k ? json_pack("{s:[]}", from) : NULL;
    json_t *snd = k + 1 < n ? json_pack("[{s:s, s:i, s:i, s:s}]", "value", "y", "comp", k + 1,
                                        "op", 0, "slice", "a")
                            : NULL;
    return host_task(c, id, job, 0, k, 10 + k, side, side, q, ops, in, snd);
}

static void test_chain_four_procs(void **state)
{
    (void)state;
    cluster_t *c = cluster_new(4, 4, 0, 20000);
    int64_t t0 = util_mono_us();
    for (int q = 0; q < 4; q++) {
        json_t *tasks = json_array();
        for (int k = 0; k < CHAIN; k++) {
            json_array_append_new(tasks, chain_task(c, 1000 + q * CHAIN + k, 7, k, CHAIN, 4, q,
                                                    chain_ops(k)));
        }
        json_t *g = group(7, 0, placement(c, 4, 4), tasks);
        assert_int_equal(submit_json(c->p[q].ex, g), CHAIN);
        json_decref(g);
    }
    for (int q = 0; q < 4; q++)
        assert_int_equal(sink_wait(&c->p[q].sink, CHAIN), CHAIN);
    int64_t us = util_mono_us() - t0;
    printf("chain.four_procs.us_per_computation %.1f\n", (double)us / CHAIN);
    /* max over shards 0..15 = 15, doubled per computation. */
    float want = 15.0f;
    for (int k = 0; k < CHAIN; k++, want *= 2.0f)
        for (int q = 0; q < 4; q++) {
            const json_t *b = sink_find(&c->p[q].sink, 1000 + q * CHAIN + k);
            assert_non_null(b);
            assert_string_equal(state_of(b), "succeeded");
            for (int l = 0; l < 4; l++)
                assert_true(out_value(b, l, 0) == 2.0f * want);
        }
    /* 4 procs relay (EXEC_RELAY_MIN_PROCS_DEFAULT): per computation each
     * other process uploads one pack to the root (proc 0, shard 0's), which
     * forwards one to each of the 3: 6 messages, not 12. */
    for (int q = 0; q < 4; q++)
        assert_int_equal(atomic_load(&exec_counters(c->p[q].ex)->packs), (q ? 1 : 3) * CHAIN);
    cluster_free(c);
}

/* ---- fold order: ring order at and above ring_min_bytes, else position order ---- */

#define FOLD_A 16777216.0f              /* 2^24: A = 6 * 2^24 is exact */

/* Shard k contributes v_k on every element: v = [A+5, 5, -A+5, 5] (A =
 * 6 * 2^24, rounded as f32 rounds it), built from shard_index with exact
 * integer steps: (i-1)(i-2)(i-3) is -6 only at 0, i(i-1)(i-3) is -2 only
 * at 2. Sums of these in different orders round differently. */
static json_t *fold_ops(int numel)
{
    json_t *ops = json_pack("[{s:s, s:s}, {s:s, s:s, s:[i], s:f}, {s:s, s:s, s:[s,s]}]", "op",
                            "shard_index", "out", "i", "op", "fill", "out", "one", "shape",
                            numel, "value", 1.0, "op", "mul", "out", "x", "args", "one", "i");
    const char *names[] = {"c1", "c2", "c3", "c5"};
    const double vals[] = {1, 2, 3, 5};
    for (int k = 0; k < 4; k++)
        json_array_append_new(ops, json_pack("{s:s, s:s, s:[i], s:f}", "op", "fill", "out",
                                             names[k], "shape", numel, "value", vals[k]));
    json_t *more = json_pack(
        "[{s:s,s:s,s:[s,s]}, {s:s,s:s,s:[s,s]}, {s:s,s:s,s:[s,s]}, {s:s,s:s,s:[s,s]},"
        " {s:s,s:s,s:[s,s]}, {s:s,s:s,s:[s,s]}, {s:s,s:s,s:[s,s]}, {s:s,s:s,s:[s],s:f},"
        " {s:s,s:s,s:[s],s:f}, {s:s,s:s,s:[s,s]}, {s:s,s:s,s:[s,s]}, {s:s,s:s,s:[s],s:s}]",
        "op", "sub", "out", "a", "args", "x", "c1", "op", "sub", "out", "b", "args", "x", "c2",
        "op", "sub", "out", "c", "args", "x", "c3", "op", "mul", "out", "ab", "args", "a", "b",
        "op", "mul", "out", "i0", "args", "ab", "c", "op", "mul", "out", "xa", "args", "x", "a",
        "op", "mul", "out", "i2", "args", "xa", "c", "op", "scale", "out", "p", "args", "i0",
        "factor", -(double)FOLD_A, "op", "scale", "out", "q", "args", "i2", "factor",
        3.0 * FOLD_A, "op", "add", "out", "pq", "args", "p", "q", "op", "add", "out", "v",
        "args", "pq", "c5", "op", "all_reduce", "out", "y", "args", "v", "reduce", "sum");
    json_array_extend(ops, more);
    json_decref(more);
    return ops;
}

/* The same v_k in f32, step by step as the kernels compute it. */
static float fold_v(int k)
{
    float x = 1.0f * (float)k, a = x - 1.0f, b = x - 2.0f, c = x - 3.0f;
    float i0 = (a * b) * c, i2 = (x * a) * c;
    float p = i0 * -FOLD_A, q = i2 * (3.0f * FOLD_A);
    return (p + q) + 5.0f;
}

/* Runs fold_ops on a [1,4] slice of two procs of 2 devices; got: proc 0's
 * first shard's result. */
static void fold_run(int64_t ring_min_bytes, int numel, float *got)
{
    cluster_t *c = cluster_new(2, 2, ring_min_bytes, 20000);
    for (int q = 0; q < 2; q++) {
        json_t *tasks = json_pack("[o]", host_task(c, 50 + q, 9, 0, 0, 1, 1, 4, q,
                                                   fold_ops(numel), NULL, NULL));
        json_t *g = group(9, 0, placement(c, 1, 4), tasks);
        submit_json(c->p[q].ex, g);
        json_decref(g);
    }
    for (int q = 0; q < 2; q++)
        assert_int_equal(sink_wait(&c->p[q].sink, 1), 1);
    const json_t *b = sink_find(&c->p[0].sink, 50);
    assert_string_equal(state_of(b), "succeeded");
    for (int e = 0; e < numel; e++)
        got[e] = out_value(b, 0, e);
    cluster_free(c);
}

static void test_fold_order_rule(void **state)
{
    (void)state;
    enum { N = 8 };
    float small[N], ring[N];
    fold_run(INT64_MAX, N, small);     /* position order */
    fold_run(1, N, ring);              /* ring order (n = 4 >= 3, numel >= n) */
    tensor_t *pc[4];
    shape_t s = {.rank = 1, .dim = {N}};
    for (int k = 0; k < 4; k++) {
        pc[k] = tensor_new(&s);
        for (int e = 0; e < N; e++)
            pc[k]->data[e] = fold_v(k);
    }
    tensor_t *want_ring = NULL;
    assert_int_equal(coll_fold_ring(REDUCE_SUM, (const tensor_t *const *)pc, 4, &want_ring), 0);
    float pos = ((fold_v(0) + fold_v(1)) + fold_v(2)) + fold_v(3);
    int differ = 0;
    for (int e = 0; e < N; e++) {
        assert_true(small[e] == pos);
        assert_true(ring[e] == want_ring->data[e]);
        differ += ring[e] != pos;
    }
    assert_true(differ > 0);           /* the two orders really disagree here */
    tensor_free(want_ring);
    for (int k = 0; k < 4; k++)
        tensor_free(pc[k]);
}

/* ---- relay through the root: same bits, 2 (P - 1) messages ---- */

#define RELAY_N 8

/* fold_ops' v (an all_reduce sum whose order shows in the bits: s), then
 * an all_gather of v along mesh axis 1 (g) and a reduce_scatter of it over
 * the whole [2,4] slice (rs). */
static json_t *relay_ops(void)
{
    json_t *ops = fold_ops(RELAY_N);
    json_t *last = json_array_get(ops, json_array_size(ops) - 1);
    json_object_set_new(last, "out", json_string("s"));
    json_t *more = json_pack(
        "[{s:s,s:s,s:[s],s:i,s:[i]}, {s:s,s:s,s:[s],s:i,s:s}]",
        "op", "all_gather", "out", "g", "args", "v", "axis", 0, "mesh_axes", 1,
        "op", "reduce_scatter", "out", "rs", "args", "v", "axis", 0, "reduce", "sum");
    json_array_extend(ops, more);
    json_decref(more);
    return ops;
}

/* Runs relay_ops on a [2,4] slice over 4 procs of 2 devices with the given
 * relay threshold; got[q][l][e]: proc q's shard l's output; packs[q] and
 * relayed[q]: its counters. */
static void relay_run(int relay_min, float got[4][2][5 * RELAY_N + 1], long packs[4],
                      long relayed[4])
{
    test_relay_min = relay_min;
    cluster_t *c = cluster_new(4, 2, INT64_MAX, 20000);
    test_relay_min = 0;
    for (int q = 0; q < 4; q++) {
        json_t *t = host_task(c, 80 + q, 12, 0, 0, 1, 2, 4, q, relay_ops(), NULL, NULL);
        json_object_set_new(json_object_get(t, "computation"), "outputs",
                            json_pack("[s,s,s]", "s", "g", "rs"));
        json_t *tasks = json_pack("[o]", t);
        json_t *g = group(12, 0, placement(c, 2, 4), tasks);
        assert_int_equal(submit_json(c->p[q].ex, g), 1);
        json_decref(g);
    }
    for (int q = 0; q < 4; q++) {
        assert_int_equal(sink_wait(&c->p[q].sink, 1), 1);
        const json_t *b = sink_find(&c->p[q].sink, 80 + q);
        if (strcmp(state_of(b), "succeeded") != 0)
            fail_msg("proc %d: %s", q, json_string_value(json_object_get(b, "error")));
        for (int l = 0; l < 2; l++)
            for (int e = 0; e < 5 * RELAY_N + 1; e++)
                got[q][l][e] = e < RELAY_N       ? named_value(b, "s", l, e)
                               : e < 5 * RELAY_N ? named_value(b, "g", l, e - RELAY_N)
                                                 : named_value(b, "rs", l, 0);
        packs[q] = (long)atomic_load(&exec_counters(c->p[q].ex)->packs);
        relayed[q] = (long)atomic_load(&exec_counters(c->p[q].ex)->relayed);
    }
    cluster_free(c);
}

static void test_relay_same_bits(void **state)
{
    (void)state;
    static float direct[4][2][5 * RELAY_N + 1], relay[4][2][5 * RELAY_N + 1];
    long dpacks[4], drel[4], rpacks[4], rrel[4];
    relay_run(100, direct, dpacks, drel);   /* 4 procs < 100: every pair directly */
    relay_run(2, relay, rpacks, rrel);      /* 4 procs >= 2: through proc 0 */
    assert_memory_equal(direct, relay, sizeof direct);
    /* Shard k's group for the all_gather along axis 1 is its row: rows
     * live on procs {0,1} and {2,3}, so direct packs go to 3 + 1 + 3
     * peers; through the root every non-root sends 1 per op, the root 3. */
    for (int q = 0; q < 4; q++) {
        assert_int_equal(drel[q], 0);
        assert_int_equal(rrel[q], 3);
        assert_int_equal(dpacks[q], 3 + 1 + 3);
        assert_int_equal(rpacks[q], q == 0 ? 3 * 3 : 3);
    }
    /* The values themselves: y[0] is the sum in position order. */
    float pos = 0;
    for (int k = 0; k < 8; k++)
        pos = k ? pos + fold_v(k) : fold_v(0);
    assert_true(relay[3][1][0] == pos);
}

/* ---- packs that differ per peer ---- */

/* On a [4,3] slice over 3 procs of 4 devices the rows (groups of an
 * all_gather along mesh axis 1) straddle procs: proc 1 holds shards 4..7,
 * of rows 1 (4, 5) and 2 (6, 7); its pack to proc 0 (row 1's shard 3)
 * carries shards 4 and 5, its pack to proc 2 (row 2's shard 8) shards 6
 * and 7: the same size, other contents (a sender reusing one pack for
 * both fails here). Every member gathers its own row's shard indexes. */
static void test_packs_differ_per_peer(void **state)
{
    (void)state;
    cluster_t *c = cluster_new(3, 4, INT64_MAX, 20000);
    for (int q = 0; q < 3; q++) {
        json_t *ops = json_pack("[{s:s, s:s}, {s:s, s:s, s:[i], s:f}, {s:s, s:s, s:[s,s]},"
                                " {s:s, s:s, s:[s], s:i, s:[i]}]",
                                "op", "shard_index", "out", "i", "op", "fill", "out", "one",
                                "shape", 1, "value", 1.0, "op", "mul", "out", "x", "args",
                                "one", "i", "op", "all_gather", "out", "y", "args", "x",
                                "axis", 0, "mesh_axes", 1);
        json_t *tasks = json_pack("[o]", host_task(c, 90 + q, 13, 0, 0, 1, 4, 3, q, ops,
                                                   NULL, NULL));
        json_t *g = group(13, 0, placement(c, 4, 3), tasks);
        assert_int_equal(submit_json(c->p[q].ex, g), 1);
        json_decref(g);
    }
    for (int q = 0; q < 3; q++) {
        assert_int_equal(sink_wait(&c->p[q].sink, 1), 1);
        const json_t *b = sink_find(&c->p[q].sink, 90 + q);
        if (strcmp(state_of(b), "succeeded") != 0)
            fail_msg("proc %d: %s", q, json_string_value(json_object_get(b, "error")));
        for (int l = 0; l < 4; l++) {
            int row = (q * 4 + l) / 3;
            for (int e = 0; e < 3; e++)
                assert_true(out_value(b, l, e) == (float)(row * 3 + e));
        }
    }
    cluster_free(c);
}

/* ---- a forged pack of the wrong size ---- */

static void test_forged_pack_fails_task(void **state)
{
    (void)state;
    cluster_t *c = cluster_new(2, 2, 0, 3000);
    /* A pack of 3 elements where proc 1 expects 2 (two scalars of proc 0),
     * sent before proc 0's real one under proc 0 -> 1's exact tag. */
    shape_t s = {.rank = 1, .dim = {3}};
    tensor_t *junk = tensor_new(&s);
    mbox_tag_t tag = {.job = 11, .attempt = 0, .comp = 0, .op = -(1 + 1), .src = 0, .dst = 1};
    json_t *tasks = json_pack("[o]", host_task(c, 71, 11, 0, 0, 1, 1, 4, 1,
                                               json_pack("[{s:s,s:s},{s:s,s:s,s:[s],s:s}]", "op",
                                                         "shard_index", "out", "x", "op",
                                                         "all_reduce", "out", "y", "args", "x",
                                                         "reduce", "sum"),
                                               NULL, NULL));
    json_t *g = group(11, 0, placement(c, 1, 4), tasks);
    submit_json(c->p[1].ex, g);
    json_decref(g);
    assert_int_equal(dplane_send(c->p[0].dp, dplane_addr(c->p[1].dp), &tag, &TEST_KEY, junk), 0);
    tensor_free(junk);
    assert_int_equal(sink_wait(&c->p[1].sink, 1), 1);
    const json_t *b = sink_find(&c->p[1].sink, 71);
    assert_string_equal(state_of(b), "failed");
    assert_non_null(strstr(json_string_value(json_object_get(b, "error")), "pack from process 0"));
    assert_int_equal(atomic_load(&exec_counters(c->p[1].ex)->bad_size), 1);
    cluster_free(c);
}

/* ---- an input of the wrong shape ---- */

/* Runs host task `task` of job `job` on proc 1 (shards 2 and 3 of slice
 * [1, 4], computation 1: `ops`, whose input c0.y has shape `in_shape` =
 * [in_dim]), then sends shard 2 of c0.y from proc 0 as a tensor of shape
 * [3]: the task must fail saying `want` and count one bad_size. ops is
 * stolen. */
static void junk_input_fails(int64_t task, int64_t job, json_t *ops, int in_dim,
                             const char *want)
{
    cluster_t *c = cluster_new(2, 2, 0, 3000);
    shape_t s = {.rank = 1, .dim = {3}};
    tensor_t *junk = tensor_new(&s);
    mbox_tag_t tag = {.job = job, .attempt = 0, .comp = 1, .op = 0, .src = 2, .dst = 2};
    json_t *tasks = json_pack("[o]", host_task(c, task, job, 0, 1, 1, 1, 4, 1, ops,
                                               json_pack("{s:[i]}", "c0.y", in_dim), NULL));
    json_t *g = group(job, 0, placement(c, 1, 4), tasks);
    submit_json(c->p[1].ex, g);
    json_decref(g);
    assert_int_equal(dplane_send(c->p[0].dp, dplane_addr(c->p[1].dp), &tag, &TEST_KEY, junk), 0);
    tensor_free(junk);
    assert_int_equal(sink_wait(&c->p[1].sink, 1), 1);
    const json_t *b = sink_find(&c->p[1].sink, task);
    assert_string_equal(state_of(b), "failed");
    const char *err = json_string_value(json_object_get(b, "error"));
    if (!strstr(err, want))
        fail_msg("error: %s", err);
    assert_int_equal(atomic_load(&exec_counters(c->p[1].ex)->bad_size), 1);
    cluster_free(c);
}

/* A computation's `input` op takes the value the plan declares
 * (input_shapes): a tensor of another shape under its exact tag fails the
 * task, naming both shapes, and counts as bad_size. */
static void test_input_wrong_shape_fails_task(void **state)
{
    (void)state;
    json_t *ops = json_pack("[{s:s,s:s,s:s},{s:s,s:s,s:[s,s]}]", "op", "input", "out", "x",
                            "from", "c0.y", "op", "add", "out", "y", "args", "x", "x");
    junk_input_fails(72, 12, ops, 2, "input op 0 of shard 2 received shape");
}

/* The same across meshes: a piece of a cross-mesh input (its reshard
 * edge) of another shape than the box it must fill fails the task before
 * a byte is copied. Producer [4] split on its one axis, consumer [1, 4]
 * split on axis 1: consumer shard 2 takes producer shard 2's one element. */
static void test_reshard_piece_wrong_shape_fails_task(void **state)
{
    (void)state;
    json_t *edge = json_pack("{s:[i], s:[i], s:[[i]], s:[i,i], s:[[i]]}", "global", 4,
                             "from_mesh", 4, "from", 0, "to_mesh", 1, 4, "to", 1);
    json_t *ops = json_pack("[{s:s,s:s,s:s,s:o},{s:s,s:s,s:[s,s]}]", "op", "input", "out", "x",
                            "from", "c0.y", "reshard", edge, "op", "add", "out", "y", "args",
                            "x", "x");
    junk_input_fails(73, 13, ops, 1, "piece from shard 2 has the wrong shape");
}

/* ---- attempt-exact cancel ---- */

static json_t *compute_ops(int us)
{
    return json_pack("[{s:s, s:s, s:i}, {s:s, s:s, s:[s,s]}]", "op", "compute", "out", "c",
                     "us", us, "op", "add", "out", "y", "args", "c", "c");
}

/* One process of two devices, both held by a long task of job 20 (id 200,
 * seq 1) that the test's tasks queue behind. */
static cluster_t *cluster_busy(void)
{
    cluster_t *c = cluster_new(1, 2, 0, 10000);
    json_t *g = group(20, 0, placement(c, 1, 2),
                      json_pack("[o]", host_task(c, 200, 20, 0, 0, 1, 1, 2, 0,
                                                 compute_ops(300000), NULL, NULL)));
    submit_json(c->p[0].ex, g);
    json_decref(g);
    return c;
}

static void test_cancel_is_attempt_exact(void **state)
{
    (void)state;
    /* Behind the long task, attempt 0 and attempt 1 of job 21 wait. */
    cluster_t *c = cluster_busy();
    json_t *g;
    for (int a = 0; a < 2; a++) {
        g = group(21, a, placement(c, 1, 2),
                  json_pack("[o]", host_task(c, 210 + a, 21, a, 0, 2 + a, 1, 2, 0,
                                             compute_ops(1000), NULL, NULL)));
        submit_json(c->p[0].ex, g);
        json_decref(g);
    }
    assert_true(exec_cancel_attempt(c->p[0].ex, 21, 0) >= 1);
    assert_int_equal(sink_wait(&c->p[0].sink, 3), 3);
    assert_string_equal(state_of(sink_find(&c->p[0].sink, 210)), "cancelled");
    assert_string_equal(state_of(sink_find(&c->p[0].sink, 211)), "succeeded");
    assert_string_equal(state_of(sink_find(&c->p[0].sink, 200)), "succeeded");
    /* The cancel came first, then the long task, then attempt 1 (seq order). */
    assert_int_equal(c->p[0].sink.task[0], 210);
    assert_int_equal(c->p[0].sink.task[1], 200);
    assert_int_equal(c->p[0].sink.task[2], 211);
    cluster_free(c);
}

/* A run's computations (TASKs sharing their host task's id) cancelled
 * while queued: one cancelled report for the run, which ends it at the
 * controller (each further one would be a 409), naming one of its
 * computations not yet reported. */
static void test_cancel_reports_a_run_once(void **state)
{
    (void)state;
    cluster_t *c = cluster_busy();
    json_t *run = json_array();
    for (int k = 0; k < 3; k++)
        json_array_append_new(run, host_task(c, 220, 22, 0, k, 2 + k, 1, 2, 0,
                                             compute_ops(1000), NULL, NULL));
    json_t *g = group(22, 0, placement(c, 1, 2), run);
    assert_int_equal(submit_json(c->p[0].ex, g), 3);
    json_decref(g);
    assert_true(exec_cancel_attempt(c->p[0].ex, 22, 0) >= 1);
    assert_int_equal(sink_wait(&c->p[0].sink, 2), 2);
    assert_int_equal(exec_drain(c->p[0].ex, 10000), 0);
    assert_int_equal(c->p[0].sink.n, 2);
    assert_int_equal(c->p[0].sink.task[0], 220);
    assert_string_equal(state_of(sink_find(&c->p[0].sink, 220)), "cancelled");
    assert_int_equal(c->p[0].sink.comp[0], 2);
    assert_string_equal(state_of(sink_find(&c->p[0].sink, 200)), "succeeded");
    cluster_free(c);
}

/* ---- gang order: overlapping tasks submitted out of seq order ---- */

/* y = the sum of shard_index over the slice (a [1,4] or [2,2] slice: 6). */
static json_t *index_sum_ops(void)
{
    return json_pack("[{s:s,s:s},{s:s,s:s,s:[s],s:s}]", "op", "shard_index", "out", "i", "op",
                     "all_reduce", "out", "y", "args", "i", "reduce", "sum");
}

/* Both procs of c reported nreports tasks, among them jobs job0 and
 * job0 + 1 (task ids job * 10 + proc) succeeded with y = 0 + 1 + 2 + 3. */
static void assert_pair_sums(cluster_t *c, int nreports, int job0)
{
    for (int q = 0; q < 2; q++) {
        assert_int_equal(sink_wait(&c->p[q].sink, nreports), nreports);
        for (int job = job0; job <= job0 + 1; job++) {
            const json_t *b = sink_find(&c->p[q].sink, job * 10 + q);
            assert_string_equal(state_of(b), "succeeded");
            assert_true(out_value(b, 0, 0) == 6.0f);
        }
    }
}

static void test_gang_order_overlapping(void **state)
{
    (void)state;
    cluster_t *c = cluster_new(2, 2, 0, 20000);
    /* Job 30 (seq 6) and job 31 (seq 5), both on the whole [1,4] slice with
     * an all_reduce: proc 0 gets 30 first, proc 1 gets 31 first. Each
     * device must still run 31 before 30, or the collectives deadlock. */
    for (int q = 0; q < 2; q++)
        for (int x = 0; x < 2; x++) {
            int job = (q == 0) == (x == 0) ? 30 : 31;
            json_t *ops = index_sum_ops();
            json_t *g = group(job, 0, placement(c, 1, 4),
                              json_pack("[o]", host_task(c, job * 10 + q, job, 0, 0,
                                                         job == 30 ? 6 : 5, 1, 4, q, ops, NULL,
                                                         NULL)));
            submit_json(c->p[q].ex, g);
            json_decref(g);
        }
    assert_pair_sums(c, 2, 30);
    cluster_free(c);
}

/* ---- a poll answer's groups are queued as one (exec_take_answer) ----
 *
 * Jobs 40 and 41 share both procs' devices (the whole [1,4] slice, an
 * all_reduce each): 40 has computations at seq 10 and 12, 41 one at seq
 * 11. Proc 1 gets 40's seq 10 in one answer, then [41: 11] [40: 12] in the
 * next; proc 0 gets all three in one answer, grouped [40: 10, 12] [41: 11]
 * as the controller groups them, with 41's computation slow to compile
 * (4,000 more ops). Queued group by group, proc 0 would start 12 as soon
 * as 10 ended, while 41 was still compiling (11, queued ahead of it later,
 * then runs beside it on another runner): its devices would run the
 * island's computations out of seq order. Queued as one, every device
 * runs 10, 11, 12, each after the one before ended. */
static json_t *slow_sum_ops(void)
{
    json_t *ops = index_sum_ops();
    for (int k = 0; k < 4000; k++) {
        char out[16];
        snprintf(out, sizeof out, "f%d", k);
        json_array_append_new(ops, json_pack("{s:s, s:s, s:[i], s:f}", "op", "fill", "out", out,
                                             "shape", 1, "value", 1.0));
    }
    return ops;
}

static void test_answer_groups_queued_as_one(void **state)
{
    (void)state;
    cluster_t *c = cluster_new(2, 2, 0, 3000);
    json_t *ans = json_pack("[o]", group(40, 0, placement(c, 1, 4),
                                         json_pack("[o]", host_task(c, 401, 40, 0, 0, 10, 1, 4, 1,
                                                                    index_sum_ops(), NULL,
                                                                    NULL))));
    assert_int_equal(submit_answer_json(c->p[1].ex, ans), 1);
    json_decref(ans);
    ans = json_pack("[o,o]",
                    group(40, 0, placement(c, 1, 4),
                          json_pack("[o,o]",
                                    host_task(c, 400, 40, 0, 0, 10, 1, 4, 0, index_sum_ops(),
                                              NULL, NULL),
                                    host_task(c, 420, 40, 0, 1, 12, 1, 4, 0, index_sum_ops(),
                                              NULL, NULL))),
                    group(41, 0, placement(c, 1, 4),
                          json_pack("[o]", host_task(c, 410, 41, 0, 0, 11, 1, 4, 0,
                                                     slow_sum_ops(), NULL, NULL))));
    assert_int_equal(submit_answer_json(c->p[0].ex, ans), 3);
    json_decref(ans);
    ans = json_pack("[o,o]",
                    group(41, 0, placement(c, 1, 4),
                          json_pack("[o]", host_task(c, 411, 41, 0, 0, 11, 1, 4, 1,
                                                     slow_sum_ops(), NULL, NULL))),
                    group(40, 0, placement(c, 1, 4),
                          json_pack("[o]", host_task(c, 421, 40, 0, 1, 12, 1, 4, 1,
                                                     index_sum_ops(), NULL, NULL))));
    assert_int_equal(submit_answer_json(c->p[1].ex, ans), 2);
    json_decref(ans);
    for (int q = 0; q < 2; q++) {
        assert_int_equal(sink_wait(&c->p[q].sink, 3), 3);
        int64_t prev_end = 0;
        for (int k = 0; k < 3; k++) {       /* seq 10, 11, 12 */
            const json_t *b = sink_find(&c->p[q].sink, 400 + k * 10 + q);
            assert_string_equal(state_of(b), "succeeded");
            assert_true(out_value(b, 0, 0) == 6.0f);
            int64_t t0 = json_integer_value(json_object_get(b, "started_us"));
            assert_true(t0 >= prev_end - 2);    /* clocks as test_sim_devices_are_streams */
            prev_end = json_integer_value(json_object_get(b, "finished_us"));
        }
    }
    cluster_free(c);
}

/* ---- an answer is taken in whole or not at all (exec_take_answer) ----
 *
 * An answer with a group of a good task and a malformed one (no
 * computation) queues the first and reports the second failed. The same
 * text cut short, or followed by anything, queues and reports nothing: the
 * answer is not acknowledged and comes again, so a task reported or
 * queued from it would be reported or run twice. Reports go to the sink on
 * the submitting thread, so their count is known when the call returns. */
static void test_broken_answer_takes_nothing(void **state)
{
    (void)state;
    cluster_t *c = cluster_new(1, 2, 0, 3000);
    json_t *bad = host_task(c, 91, 9, 0, 1, 21, 1, 2, 0, index_sum_ops(), NULL, NULL);
    json_object_del(bad, "computation");
    json_t *g = group(9, 0, placement(c, 1, 2),
                      json_pack("[o,o]", host_task(c, 90, 9, 0, 0, 20, 1, 2, 0,
                                                   index_sum_ops(), NULL, NULL), bad));
    json_t *ans = json_pack("{s:[o], s:i}", "jobs", g, "lease", 7);
    char *text = json_dumps(ans, JSON_COMPACT);
    json_decref(ans);
    assert_non_null(text);
    size_t len = strlen(text);
    char *more = malloc(len + 3);
    assert_non_null(more);
    snprintf(more, len + 3, "%s x", text);
    exec_answer_t a;
    assert_int_equal(exec_take_answer(c->p[0].ex, text, len - 1, &a), -1);
    assert_int_equal(exec_take_answer(c->p[0].ex, more, len + 2, &a), -1);
    assert_int_equal(sink_count(&c->p[0].sink), 0);
    assert_int_equal(exec_take_answer(c->p[0].ex, text, len, &a), 0);
    assert_int_equal(a.ntasks, 2);
    assert_int_equal(a.lease, 7);
    assert_null(a.cancel);
    assert_int_equal(sink_wait(&c->p[0].sink, 2), 2);
    assert_string_equal(state_of(sink_find(&c->p[0].sink, 91)), "failed");
    assert_string_equal(state_of(sink_find(&c->p[0].sink, 90)), "succeeded");
    free(more);
    free(text);
    cluster_free(c);
}

/* ---- a runner that claims a task wakes the next (exec.c, wake_one) ----
 *
 * Two procs of 4 devices, island [2,4] (proc q: row q). Each proc first
 * runs a 300 ms blocker on all its devices; behind it, jobs 62 and 63 each
 * hold a [2,2] slice (columns 0-1 and 2-3) with an all_reduce between the
 * procs, on local devices chosen so that the procs' first runnable task
 * differs: proc 0 has 62 on devices 0-1 and 63 on 2-3, proc 1 the reverse.
 * When the blocker ends both become runnable at once and the runner that
 * ended it takes the first. Unless it wakes another runner for the second,
 * proc 0 runs only 62 and proc 1 only 63, each waiting for the other's half:
 * a deadlock until the peer timeout fails them. */
static json_t *box_placement(const cluster_t *c, int orow, int ocol, int brows, int bcols)
{
    json_t *p = placement(c, c->nprocs, c->ndev);       /* a row of devices per proc */
    json_t *a = json_object_get(json_object_get(p, "slices"), "a");
    json_object_set_new(a, "origin", json_pack("[i,i]", orow, ocol));
    json_object_set_new(a, "box", json_pack("[i,i]", brows, bcols));
    return p;
}

/* Proc q's part of job `job` on the given box, shards s0, s0+1, ... on
 * local devices d0, d0+1, ... (n of each). */
static void submit_on(cluster_t *c, int q, int64_t job, int64_t seq, const int box[4], int s0,
                      int d0, int n, json_t *ops)
{
    json_t *t = host_task(c, job * 10 + q, job, 0, 0, seq, box[2], box[3], q, ops, NULL, NULL);
    json_t *shards = json_array(), *devs = json_array();
    for (int k = 0; k < n; k++) {
        json_array_append_new(shards, json_integer(s0 + k));
        json_array_append_new(devs, json_integer(d0 + k));
    }
    json_object_set_new(t, "shards", shards);
    json_object_set_new(t, "devices", devs);
    json_t *g = group(job, 0, box_placement(c, box[0], box[1], box[2], box[3]), json_pack("[o]", t));
    assert_int_equal(submit_json(c->p[q].ex, g), 1);
    json_decref(g);
}

static void test_claim_wakes_next(void **state)
{
    (void)state;
    cluster_t *c = cluster_new_sim(2, 4);
    static const int row[2][4] = {{0, 0, 1, 4}, {1, 0, 1, 4}};
    static const int left[4] = {0, 0, 2, 2}, right[4] = {0, 2, 2, 2};
    for (int q = 0; q < 2; q++)
        submit_on(c, q, 60 + q, 1, row[q], 0, 0, 4,
                  json_pack("[{s:s,s:s}, {s:s,s:s,s:i}]", "op", "shard_index", "out", "y", "op",
                            "compute", "out", "b", "us", 300000));
    for (int q = 0; q < 2; q++)
        for (int job = 62; job <= 63; job++) {
            /* [2,2] slice: shards 0-1 in row 0 (proc 0), 2-3 in row 1. */
            int first_here = (job == 62) == (q == 0);
            submit_on(c, q, job, job - 60, job == 62 ? left : right, 2 * q, first_here ? 0 : 2,
                      2, index_sum_ops());
        }
    assert_pair_sums(c, 3, 62);
    cluster_free(c);
}

/* ---- sim devices are streams (exec_run.c: run_compute) ---- */

#define STREAM_STEPS 12
#define STREAM_US 500

/* Report i of proc q's sink, by task id; the sink's index through *at. */
static const json_t *sink_find_at(sink_t *s, int64_t task, int *at)
{
    const json_t *b = NULL;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n; i++)
        if (s->task[i] == task) {
            b = s->body[i];
            *at = i;
        }
    pthread_mutex_unlock(&s->mu);
    return b;
}

static int64_t stamp(const json_t *b, const char *key)
{
    return json_integer_value(json_object_get(b, key));
}

/* Two procs of 2 devices (island [2,2], proc q: row q), proc q sim when
 * bit q of sim_mask is set, their hosts 100 ms ahead of their devices at
 * most; proc `busy` first runs job 29 (task 291 or 290): 200 ms of compute
 * on its row, seq 1. */
static cluster_t *cluster_ahead_busy(unsigned sim_mask, int busy)
{
    test_sim_mask = sim_mask;
    test_sim_ahead_us = 100000;
    cluster_t *c = cluster_new(2, 2, 0, 20000);
    test_sim_mask = 0;
    test_sim_ahead_us = 0;
    const int row[4] = {busy, 0, 1, 2};
    submit_on(c, busy, 29, 1, row, 0, 0, 2,
              json_pack("[{s:s,s:s}, {s:s,s:s,s:i}]", "op", "shard_index", "out", "y", "op",
                        "compute", "out", "b", "us", 200000));
    return c;
}

/* A chain on sim devices, each step `compute` STREAM_US, then all_reduce
 * of the step's input, on 2 processes (rows) of 2 devices, whose hosts may
 * run 100 ms ahead of their devices; proc 1's devices are first busy for
 * 200 ms with another job's task. On each process: a step occupies its
 * devices for its whole compute time; the next starts no earlier than it
 * ends (stream order; wall stamps from one clock: 2 us for rounding);
 * reports are due STREAM_US apart at least. Across them: a step's
 * collective result exists only when every contribution does, so proc 0
 * ends each step no earlier than proc 1's devices started it, although
 * proc 1's host sent its part up to 100 ms before (the packs carry when
 * their values exist). Values are exact. */
static void test_sim_devices_are_streams(void **state)
{
    (void)state;
    cluster_t *c = cluster_ahead_busy(3, 1);
    for (int q = 0; q < 2; q++) {
        json_t *tasks = json_array();
        for (int k = 0; k < STREAM_STEPS; k++) {
            json_t *ops = chain_ops(k);
            json_array_insert_new(ops, 1, json_pack("{s:s, s:s, s:i}", "op", "compute", "out",
                                                    "w", "us", STREAM_US));
            json_array_append_new(tasks, chain_task(c, 3000 + q * 100 + k, 30, k, STREAM_STEPS,
                                                    2, q, ops));
        }
        json_t *g = group(30, 0, placement(c, 2, 2), tasks);
        assert_int_equal(submit_json(c->p[q].ex, g), STREAM_STEPS);
        json_decref(g);
    }
    for (int q = 0; q < 2; q++)
        assert_int_equal(sink_wait(&c->p[q].sink, STREAM_STEPS + q), STREAM_STEPS + q);
    assert_string_equal(state_of(sink_find(&c->p[1].sink, 291)), "succeeded");
    for (int q = 0; q < 2; q++) {
        sink_t *s = &c->p[q].sink;
        const json_t *prev = NULL;
        int pi = -1;
        float want = 3.0f;              /* max over shards 0..3, doubled each step */
        for (int k = 0; k < STREAM_STEPS; k++, want *= 2.0f) {
            int i = -1, i1 = -1;
            const json_t *b = sink_find_at(s, 3000 + q * 100 + k, &i);
            const json_t *b1 = sink_find_at(&c->p[1].sink, 3100 + k, &i1);
            assert_non_null(b);
            assert_non_null(b1);
            assert_string_equal(state_of(b), "succeeded");
            for (int l = 0; l < 2; l++)
                assert_true(out_value(b, l, 0) == 2.0f * want);
            assert_true(stamp(b, "finished_us") - stamp(b, "started_us") >= STREAM_US - 2);
            assert_true(stamp(b, "finished_us") >= stamp(b1, "started_us") - 2);
            if (prev) {
                assert_true(stamp(b, "started_us") >= stamp(prev, "finished_us") - 2);
                assert_true(s->due[i] - s->due[pi] >= STREAM_US);
            }
            prev = b;
            pi = i;
        }
    }
    cluster_free(c);
}

/* A cancel ends a sim task's device time too: the next task on its devices
 * starts when it was cancelled, not when its compute would have ended.
 * Job 40 runs a short step, then 10 s of compute on both devices of one
 * process; once the first step reported (the second is then claimed), the
 * job is cancelled; job 41's step, queued behind, starts within 5 s. */
static void test_sim_cancel_frees_devices(void **state)
{
    (void)state;
    cluster_t *c = cluster_new_sim(1, 2);
    json_t *idx = json_pack("[{s:s,s:s}]", "op", "shard_index", "out", "y");
    json_t *g = group(40, 0, placement(c, 1, 2),
                      json_pack("[o,o]", host_task(c, 400, 40, 0, 0, 1, 1, 2, 0,
                                                   json_deep_copy(idx), NULL, NULL),
                                host_task(c, 401, 40, 0, 1, 2, 1, 2, 0,
                                          json_pack("[{s:s,s:s,s:i}]", "op", "compute", "out",
                                                    "y", "us", 10000000),
                                          NULL, NULL)));
    assert_int_equal(submit_json(c->p[0].ex, g), 2);
    json_decref(g);
    g = group(41, 0, placement(c, 1, 2),
              json_pack("[o]", host_task(c, 410, 41, 0, 0, 3, 1, 2, 0, idx, NULL, NULL)));
    assert_int_equal(submit_json(c->p[0].ex, g), 1);
    json_decref(g);
    assert_int_equal(sink_wait(&c->p[0].sink, 1), 1);
    assert_true(exec_cancel_attempt(c->p[0].ex, 40, 0) >= 0);
    assert_int_equal(sink_wait(&c->p[0].sink, 3), 3);
    const json_t *first = sink_find(&c->p[0].sink, 400), *next = sink_find(&c->p[0].sink, 410);
    assert_string_equal(state_of(sink_find(&c->p[0].sink, 401)), "cancelled");
    assert_string_equal(state_of(next), "succeeded");
    assert_true(stamp(next, "started_us") < stamp(first, "finished_us") + 5000000);
    cluster_free(c);
}

/* Ready times are a sim model: a cpu process ignores them, so a sim peer's
 * (or another host's clock) never delays its results or reports. Proc 0
 * (sim, its host 100 ms ahead of its devices) is busy for 200 ms, then
 * both procs all_reduce their shard indexes: proc 0's pack says its value
 * exists ~100 ms after it arrives; proc 1 (cpu) ends when its host does:
 * its report is due no later than it is handed over. */
static void test_cpu_ignores_sim_clocks(void **state)
{
    (void)state;
    cluster_t *c = cluster_ahead_busy(1, 0);
    for (int q = 0; q < 2; q++) {
        json_t *g = group(31, 0, placement(c, 2, 2),
                          json_pack("[o]", host_task(c, 310 + q, 31, 0, 0, 2, 2, 2, q,
                                                     index_sum_ops(), NULL, NULL)));
        assert_int_equal(submit_json(c->p[q].ex, g), 1);
        json_decref(g);
    }
    assert_int_equal(sink_wait(&c->p[0].sink, 2), 2);
    assert_int_equal(sink_wait(&c->p[1].sink, 1), 1);
    int i = -1;
    const json_t *b = sink_find_at(&c->p[1].sink, 311, &i);
    assert_string_equal(state_of(b), "succeeded");
    assert_true(out_value(b, 0, 0) == 6.0f);
    assert_true(c->p[1].sink.due[i] <= c->p[1].sink.at[i]);
    cluster_free(c);
}

/* ---- malformed groups and tasks ---- */

/* gang_run() announces a process's end only after what it wrote before
 * exiting was handed over: runlog ships output before states, and a
 * follower of its logs (GET .../logs?follow=1) stops at the end, so an end
 * announced first cut the last line off (seen in test_cli under load).
 * Process 0 floods stdout (20 MB) so the gang is mostly busy reading it,
 * while 47 others write a last stderr line and exit at once during that:
 * each one's "last" must come before its end (8 rounds). */
#define GO_N 48
typedef struct go_rec {
    int last_seen[GO_N], order_bad, ended;
} go_rec_t;

static void go_output(void *ctx, int i, int stream, const char *data, size_t len)
{
    go_rec_t *r = ctx;
    if (stream == 2 && memmem(data, len, "last", 4))
        r->last_seen[i] = 1;
}

static void go_ended(void *ctx, int i, int status)
{
    go_rec_t *r = ctx;
    (void)status;
    r->order_bad += !r->last_seen[i];
    r->ended++;
}

static void test_gang_output_before_end(void **state)
{
    (void)state;
    static char *const argv[] = {"/bin/sh", "-c", "sleep 0.05; echo last >&2", NULL};
    static char *const flood[] = {"/bin/sh", "-c",
                                  "head -c 20000000 /dev/zero; echo last >&2", NULL};
    static char *const envp[] = {"PATH=/usr/bin:/bin", NULL};
    for (int round = 0; round < 8; round++) {
        go_rec_t rec = {{0}, 0, 0};
        gang_proc_t procs[GO_N];
        memset(procs, 0, sizeof procs);
        for (int i = 0; i < GO_N; i++) {
            procs[i].argv = i == 0 ? flood : argv;
            procs[i].envp = envp;
            procs[i].dir = "/";
            procs[i].rank = i;
        }
        gang_cfg_t cfg = {.timeout_us = 60000000, .kill_grace_us = 1000000,
                          .output = go_output, .ended = go_ended, .ctx = &rec};
        int culprit = -1;
        char err[256] = "";
        assert_int_equal(gang_run(&cfg, procs, GO_N, &culprit, err, sizeof err), GANG_OK);
        assert_int_equal(rec.ended, GO_N);
        assert_int_equal(rec.order_bad, 0);
    }
}

/* ---- which reports may wait (exec_report_fn's hold) ---- */

/* Proc q's task k of job `job` on the [1,2] slice of two 1-device procs,
 * with index_sum_ops (or ops, stolen, when not NULL); task id job * 10 +
 * k * 2 + q. */
static json_t *pair_task(const cluster_t *c, int64_t job, int k, int64_t seq, int q,
                         json_t *ops)
{
    return host_task(c, job * 10 + k * 2 + q, job, 0, k, seq, 1, 2, q,
                     ops ? ops : index_sum_ops(), NULL, NULL);
}

/* Submits job's ntasks tasks (seqs seq0, seq0 + 1, ...) to proc q, under a
 * placement with "hold_reports" = hold; task k_bad (or -1) does not compile. */
static void submit_pair_job(cluster_t *c, int q, int64_t job, int ntasks, int64_t seq0, int hold,
                            int k_bad)
{
    json_t *place = placement(c, 1, 2), *tasks = json_array();
    json_object_set_new(place, "hold_reports", json_boolean(hold));
    for (int k = 0; k < ntasks; k++)
        json_array_append_new(tasks, pair_task(c, job, k, seq0 + k, q,
                                               k == k_bad ? json_pack("[{s:s,s:s}]", "op",
                                                                      "nosuch", "out", "y")
                                                          : NULL));
    json_t *g = group(job, 0, place, tasks);
    assert_int_equal(submit_json(c->p[q].ex, g), ntasks);
    json_decref(g);
}

/* A succeeded report may wait only while a later task of the same attempt
 * is queued on one of its devices and its placement allows it; a failed
 * one, the last of an attempt here, one followed by another job's task and
 * one of an attempt without "hold_reports" go at once. Proc 0 gets every
 * task before proc 1 gets any, so its first (a collective with proc 1)
 * cannot end before all of its queue is there. */
static void test_report_hold_marks(void **state)
{
    (void)state;
    cluster_t *c = cluster_new(2, 1, 0, 20000);
    for (int q = 0; q < 2; q++) {
        submit_pair_job(c, q, 50, 3, 1, 1, -1);     /* seqs 1-3: hold, hold, last */
        submit_pair_job(c, q, 51, 1, 4, 1, -1);     /* seq 4: alone */
        submit_pair_job(c, q, 52, 2, 5, 0, -1);     /* seqs 5-6: not allowed */
        submit_pair_job(c, q, 53, 2, 7, 1, 0);      /* seq 7 fails; 8 is the last */
    }
    static const struct { int64_t task; int hold; const char *state; } want[] = {
        {500, 1, "succeeded"}, {502, 1, "succeeded"}, {504, 0, "succeeded"},
        {510, 0, "succeeded"}, {520, 0, "succeeded"}, {522, 0, "succeeded"},
        {530, 0, "failed"}, {532, 0, "succeeded"}};
    size_t n = sizeof want / sizeof want[0];
    for (int q = 0; q < 2; q++)
        assert_int_equal(sink_wait(&c->p[q].sink, (int)n), (int)n);
    sink_t *s = &c->p[0].sink;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(s->task[i], want[i].task);
        assert_string_equal(state_of(s->body[i]), want[i].state);
        assert_int_equal(s->hold[i], want[i].hold);
    }
    cluster_free(c);
}

static void test_malformed_reported_failed(void **state)
{
    (void)state;
    cluster_t *c = cluster_new(1, 2, 0, 2000);
    json_t *ops = json_pack("[{s:s,s:s}]", "op", "shard_index", "out", "y");
    /* 1: box outside the mesh. */
    json_t *bad = placement(c, 1, 2);
    json_array_set_new(json_object_get(json_object_get(json_object_get(bad, "slices"), "a"),
                                       "box"), 1, json_integer(3));
    json_t *g = group(40, 0, bad, json_pack("[o]", host_task(c, 400, 40, 0, 0, 1, 1, 2, 0,
                                                             json_deep_copy(ops), NULL, NULL)));
    submit_json(c->p[0].ex, g);
    json_decref(g);
    /* 2: a device out of range. */
    json_t *t = host_task(c, 401, 41, 0, 0, 1, 1, 2, 0, json_deep_copy(ops), NULL, NULL);
    json_array_set_new(json_object_get(t, "devices"), 1, json_integer(7));
    g = group(41, 0, placement(c, 1, 2), json_pack("[o]", t));
    submit_json(c->p[0].ex, g);
    json_decref(g);
    /* 3: the task's attempt differs from its group's. */
    t = host_task(c, 402, 42, 1, 0, 1, 1, 2, 0, json_deep_copy(ops), NULL, NULL);
    g = group(42, 0, placement(c, 1, 2), json_pack("[o]", t));
    submit_json(c->p[0].ex, g);
    json_decref(g);
    /* 4: a shard this proc does not hold (the placement gives it to no one). */
    t = host_task(c, 403, 43, 0, 0, 1, 1, 2, 0, json_deep_copy(ops), NULL, NULL);
    json_array_set_new(json_object_get(t, "shards"), 1, json_integer(2));
    g = group(43, 0, placement(c, 1, 2), json_pack("[o]", t));
    submit_json(c->p[0].ex, g);
    json_decref(g);
    json_decref(ops);
    assert_int_equal(sink_wait(&c->p[0].sink, 4), 4);
    for (int id = 400; id <= 403; id++)
        assert_string_equal(state_of(sink_find(&c->p[0].sink, id)), "failed");
    cluster_free(c);
}

/* The coordinator port (exec_gang.c): below the ephemeral range, so no
 * outgoing connection can take it before the program binds it, at or above
 * GANG_PORT_LOW, and free when drawn; drawn at random, not the same one
 * every time. */
static void test_gang_port_below_ephemeral(void **state)
{
    (void)state;
    int lo = ephemeral_low(), seen_other = 0, first = -1;
    assert_true(lo > GANG_PORT_LOW + 1);
    for (int i = 0; i < 16; i++) {
        int port = reserve_port("127.0.0.1");
        assert_true(port >= GANG_PORT_LOW && port < lo);
        struct sockaddr_in a = {.sin_family = AF_INET};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(port_bind_check(a, port), port);
        seen_other |= first >= 0 && port != first;
        if (first < 0)
            first = port;
    }
    assert_true(seen_other);
}

int main(void)
{
    log_setup("test_worker_exec", LOG_WARN, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_four_procs),
        cmocka_unit_test(test_sim_devices_are_streams),
        cmocka_unit_test(test_sim_cancel_frees_devices),
        cmocka_unit_test(test_cpu_ignores_sim_clocks),
        cmocka_unit_test(test_gang_port_below_ephemeral),
        cmocka_unit_test(test_packs_differ_per_peer),
        cmocka_unit_test(test_fold_order_rule),
        cmocka_unit_test(test_forged_pack_fails_task),
        cmocka_unit_test(test_input_wrong_shape_fails_task),
        cmocka_unit_test(test_reshard_piece_wrong_shape_fails_task),
        cmocka_unit_test(test_cancel_is_attempt_exact),
        cmocka_unit_test(test_cancel_reports_a_run_once),
        cmocka_unit_test(test_gang_order_overlapping),
        cmocka_unit_test(test_answer_groups_queued_as_one),
        cmocka_unit_test(test_broken_answer_takes_nothing),
        cmocka_unit_test(test_claim_wakes_next),
        cmocka_unit_test(test_malformed_reported_failed),
        cmocka_unit_test(test_report_hold_marks),
        cmocka_unit_test(test_gang_output_before_end),
        cmocka_unit_test(test_relay_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
