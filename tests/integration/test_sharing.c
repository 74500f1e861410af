/* test_sharing.c - devices shared between programs (DESIGN Part D) on real
 * workers.
 *
 * atolld with tokens (tenants have shares), island west=2x2 covered by one
 * sim worker of 4 devices. Shared jobs are placed on devices other shared
 * jobs hold and never with an exclusive one; their computations are
 * interleaved by the scheduler, one island sequence number each, in
 * proportion to their tenants' shares; cancelling one leaves the others
 * running and right; what is dispatched and not finished on the island
 * stays within its lookahead budget, however many shared jobs there are,
 * except for a newcomer's first computation, which does not wait for
 * room in it; a shared job joins others only where its memory fits
 * beside theirs (the worker's store cap over its devices). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "itest.h"

#define ADMIN_TOKEN "admin-token-sharing-0123456789"
#define WORKER_TOKEN "worker-token-sharing-0123456789"
/* The worker's object store: 2 MiB for each of its 4 devices. */
#define STORE_CAP_MB 8
#define STORE_CAP_MB_TEXT "8"

/* A shared chain of n computations on the whole island, each `us` µs of
 * compute and an all_reduce of the shard index plus the previous value. */
static char *chain_doc(const char *name, int n, int64_t us, int shared)
{
    json_t *comps = json_array();
    for (int i = 0; i < n; i++) {
        char cname[16], prev[24];
        snprintf(cname, sizeof cname, "c%d", i);
        json_t *ops = json_array();
        if (i > 0) {
            snprintf(prev, sizeof prev, "c%d.z", i - 1);
            json_array_append_new(ops, json_pack("{s:s, s:s, s:s}", "op", "input", "out", "p",
                                                 "from", prev));
        }
        json_array_append_new(ops, json_pack("{s:s, s:s, s:I}", "op", "compute", "out", "b",
                                             "us", (json_int_t)us));
        json_array_append_new(ops, json_pack("{s:s, s:s}", "op", "shard_index", "out", "s"));
        json_array_append_new(ops, json_pack("{s:s, s:s, s:[s], s:s}", "op", "all_reduce", "out",
                                             i > 0 ? "r" : "z", "args", "s", "reduce", "sum"));
        if (i > 0)
            json_array_append_new(ops, json_pack("{s:s, s:s, s:[s,s]}", "op", "add", "out", "z",
                                                 "args", "r", "p"));
        json_array_append_new(comps, json_pack("{s:s, s:s, s:o, s:[s]}", "name", cname, "slice",
                                               "s", "ops", ops, "outputs", "z"));
    }
    json_t *doc = json_pack("{s:s, s:s, s:{s:{s:[i,i], s:s}}, s:o}", "name", name, "sharing",
                            shared ? "shared" : "exclusive", "slices", "s", "shape", 2, 2,
                            "island", "west", "computations", comps);
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    return text;
}

static int64_t submit_as(hx_client_t *cl, const char *doc)
{
    int64_t id = -1;
    int status = hx_job_submit(cl, doc, &id, NULL);
    T_CHECK(status == 201, "submit: %d", status);
    return id;
}

static json_t *wait_done(hx_client_t *cl, int64_t id, const char *want)
{
    json_t *job = NULL;
    int rc = hx_job_wait(cl, id, 60000, ITEST_POLL_MS, &job);
    int ok = rc == 0 && job && strcmp(hx_job_state(job), want) == 0;
    if (!ok) {
        json_decref(job);
        job = NULL;
    }
    T_CHECK(ok, "job %lld did not end %s", (long long)id, want);
    return job;
}

/* The value the chain's last output must have on every shard: each of the
 * n computations adds the sum of shard indexes (0+1+2+3). */
static int chain_right(hx_client_t *cl, int64_t id, int n)
{
    char path[64], key[16];
    hx_resp_t r;
    snprintf(path, sizeof path, "/v1/jobs/%lld/result", (long long)id);
    snprintf(key, sizeof key, "c%d.z", n - 1);
    int ok = hx_request(cl, "GET", path, NULL, 0, &r) == 0 && r.status == 200;
    for (int k = 0; ok && k < 4; k++) {
        json_t *vals = json_object_get(hx_result_shard(r.json, key, k), "values");
        ok = json_number_value(json_array_get(vals, 0)) == 6.0 * n;
    }
    hx_resp_clear(&r);
    return ok;
}

/* Computation seqs of a job (index = computation). */
static int comp_seqs(const json_t *job, int64_t *seq, int cap)
{
    json_t *cs = json_object_get(job, "computations"), *c;
    size_t i;
    int n = 0;
    json_array_foreach(cs, i, c)
        if (n < cap)
            seq[n++] = json_integer_value(json_object_get(c, "seq"));
    return n;
}

/* The worker's store cap as /v1/workers shows it (what its heartbeats
 * reported), or -1. */
static int64_t worker_cap(void)
{
    hx_resp_t r;
    int64_t cap = -1;
    if (hx_request(&itest_client, "GET", "/v1/workers", NULL, 0, &r) == 0 && r.status == 200)
        cap = json_integer_value(json_object_get(
            json_object_get(json_array_get(json_object_get(r.json, "workers"), 0), "store"),
            "cap_bytes"));
    hx_resp_clear(&r);
    return cap;
}

/* Two shared jobs on the whole island at once; an exclusive one waits for
 * both; the devices name both holders; results right. */
static void test_shared_placement(void **state)
{
    (void)state;
    char *sa = chain_doc("sa", 3, 400000, 1), *sb = chain_doc("sb", 3, 400000, 1);
    char *ex = chain_doc("ex", 1, 1000, 0);
    int64_t a = submit_as(&itest_client, sa), b = submit_as(&itest_client, sb);
    json_t *ja = NULL, *jb = NULL;
    T_CHECK(hx_job_wait_leave(&itest_client, a, "queued", 20000, ITEST_POLL_MS, &ja) == 0 &&
                hx_job_wait_leave(&itest_client, b, "queued", 20000, ITEST_POLL_MS, &jb) == 0,
            "both shared jobs should be admitted together");
    json_decref(ja);
    json_decref(jb);
    int64_t e = submit_as(&itest_client, ex);
    hx_resp_t r;
    int both = 0, memory = 0;
    if (hx_request(&itest_client, "GET", "/v1/islands/west", NULL, 0, &r) == 0) {
        json_t *d;
        size_t i;
        json_array_foreach(json_object_get(r.json, "devices"), i, d) {
            both += json_array_size(json_object_get(d, "jobs")) == 2;
            /* Each chain's largest computation defines 5 scalars. */
            memory += json_integer_value(json_object_get(d, "held_bytes")) == 2 * 5 * 4 &&
                      json_integer_value(json_object_get(d, "memory_bytes")) ==
                          STORE_CAP_MB * 1024 * 1024 / 4;
        }
    }
    hx_resp_clear(&r);
    json_t *fa = wait_done(&itest_client, a, "succeeded"), *fb = wait_done(&itest_client, b,
                                                                           "succeeded");
    json_t *fe = wait_done(&itest_client, e, "succeeded");
    int64_t e_alloc = hx_job_time_us(fe, "allocated");
    int64_t last = hx_job_time_us(fa, "finished") > hx_job_time_us(fb, "finished")
                       ? hx_job_time_us(fa, "finished") : hx_job_time_us(fb, "finished");
    int right = chain_right(&itest_client, a, 3) && chain_right(&itest_client, b, 3);
    json_decref(fa);
    json_decref(fb);
    json_decref(fe);
    free(sa);
    free(sb);
    free(ex);
    T_CHECK(both == 4, "every device should name both shared jobs (%d did)", both);
    T_CHECK(memory == 4, "every device should show both jobs' memory and its own (%d did)",
            memory);
    T_CHECK(e_alloc >= last, "the exclusive job must wait until no shared job holds a device");
    T_CHECK(right, "shared chains computed wrong values");
}

/* Two shared chains of equal share interleave: the second job's first
 * computation is dispatched before the first job's last one. */
static void test_interleaved(void **state)
{
    (void)state;
    char *da = chain_doc("ia", 8, 30000, 1), *db = chain_doc("ib", 8, 30000, 1);
    int64_t a = submit_as(&itest_client, da), b = submit_as(&itest_client, db);
    json_t *ja = wait_done(&itest_client, a, "succeeded"), *jb = wait_done(&itest_client, b,
                                                                           "succeeded");
    int64_t sa[8], sb[8];
    int na = comp_seqs(ja, sa, 8), nb = comp_seqs(jb, sb, 8);
    int right = chain_right(&itest_client, a, 8) && chain_right(&itest_client, b, 8);
    json_decref(ja);
    json_decref(jb);
    free(da);
    free(db);
    T_CHECK(na == 8 && nb == 8 && sb[0] < sa[7] && sa[0] < sb[7],
            "shared chains should interleave (a: %lld..%lld, b: %lld..%lld)", (long long)sa[0],
            (long long)sa[7], (long long)sb[0], (long long)sb[7]);
    T_CHECK(right, "interleaved chains computed wrong values");
}

/* Tenants of shares 1 and 3 on the same devices: among the computations
 * dispatched while both are backlogged, the second gets about three for
 * each of the first's. Cancelling one leaves the other right. */
static void test_shares_and_cancel(void **state)
{
    (void)state;
    hx_client_t t1, t3;
    char tok1[128], tok3[128];
    static const char *const bodies[] = {"{\"name\":\"one\",\"share\":1}",
                                         "{\"name\":\"three\",\"share\":3}"};
    char *toks[] = {tok1, tok3};
    for (int i = 0; i < 2; i++) {
        hx_resp_t r;
        int ok = hx_request(&itest_client, "POST", "/v1/tenants", bodies[i], strlen(bodies[i]),
                            &r) == 0 && r.status == 201;
        const char *t = json_string_value(json_object_get(r.json, "token"));
        if (ok && t)
            snprintf(toks[i], 128, "%s", t);
        hx_resp_clear(&r);
        T_CHECK(ok && t, "tenant creation failed");
    }
    T_CHECK(hx_client_init(&t1, itest_cluster.url) == 0 && hx_client_set_auth(&t1, tok1, NULL) == 0 &&
                hx_client_init(&t3, itest_cluster.url) == 0 &&
                hx_client_set_auth(&t3, tok3, NULL) == 0, "clients");
    char *d1 = chain_doc("one", 24, 20000, 1), *d3 = chain_doc("three", 24, 20000, 1);
    int64_t j1 = submit_as(&t1, d1), j3 = submit_as(&t3, d3);
    json_t *f3 = wait_done(&t3, j3, "succeeded");
    /* tenant one still has work; cancel it mid-chain */
    char path[64];
    hx_resp_t r;
    snprintf(path, sizeof path, "/v1/jobs/%lld", (long long)j1);
    if (hx_request(&t1, "DELETE", path, NULL, 0, &r) == 0)
        hx_resp_clear(&r);
    json_t *f1 = wait_done(&t1, j1, "cancelled");
    int64_t s1[24], s3[24];
    int n1 = comp_seqs(f1, s1, 24), n3 = comp_seqs(f3, s3, 24);
    /* While both were backlogged (up to the last seq three got), count
     * the dispatched computations of each. */
    int64_t end = s3[n3 - 1];
    int c1 = 0, c3 = n3;
    for (int i = 0; i < n1; i++)
        c1 += s1[i] > 0 && s1[i] <= end;
    int right = chain_right(&t3, j3, 24);
    fprintf(stderr, "shares 1:3 -> computations %d:%d while both were backlogged\n", c1, c3);
    json_decref(f1);
    json_decref(f3);
    hx_client_cleanup(&t1);
    hx_client_cleanup(&t3);
    free(d1);
    free(d3);
    T_CHECK(c1 >= 4 && c1 <= 14,
            "share 1 vs 3: tenant one got %d computations while three got %d (want about 8)", c1,
            c3);
    T_CHECK(right, "the surviving job computed wrong values after the other was cancelled");
}

/* Equal shares, unequal costs: device time follows shares, not the count
 * of computations. "short" (5 ms computations) and "long" (20 ms) are each
 * their own tenant of share 1; while both are backlogged, short gets about
 * four computations for each of long's. Counted as in the test above: of
 * long's computations, those dispatched before short's last one (about 12
 * of 40; 40 when the scheduler counted computations). */
static void test_device_time_not_count(void **state)
{
    (void)state;
    enum { N = 40 };
    char *ds = chain_doc("short", N, 5000, 1), *dl = chain_doc("long", N, 20000, 1);
    int64_t js = submit_as(&itest_client, ds), jl = submit_as(&itest_client, dl);
    json_t *fs = wait_done(&itest_client, js, "succeeded");
    json_t *fl = wait_done(&itest_client, jl, "succeeded");
    int64_t ss[N], sl[N];
    int ns = comp_seqs(fs, ss, N), nl = comp_seqs(fl, sl, N), cl = 0;
    for (int i = 0; i < nl && ns == N; i++)
        cl += sl[i] > 0 && sl[i] <= ss[N - 1];
    int right = chain_right(&itest_client, js, N) && chain_right(&itest_client, jl, N);
    fprintf(stderr, "5 ms vs 20 ms computations, equal shares: long got %d of %d while short"
            " was dispatched\n", cl, N);
    json_decref(fs);
    json_decref(fl);
    free(ds);
    free(dl);
    T_CHECK(ns == N && cl >= 1 && cl <= 24, "long got %d computations while short got %d"
            " (want about %d: a quarter, device time being equal)", cl, N, N / 4 + 2);
    T_CHECK(right, "chains of unequal cost computed wrong values");
}

/* The island's feed gauges from one /metrics answer (one pass's). */
typedef struct feed_look {
    double budget_s, inflight_s, inflight;
} feed_look_t;

static double metric_in(const char *body, const char *name)
{
    const char *p = body ? strstr(body, name) : NULL;
    return p ? strtod(p + strlen(name), NULL) : -1.0;
}

static int feed_look(feed_look_t *l)
{
    hx_resp_t r;
    if (hx_request(&itest_client, "GET", "/metrics", NULL, 0, &r) != 0)
        return -1;
    int ok = r.status == 200;
    l->budget_s = metric_in(r.body, "atoll_feed_budget_seconds{island=\"west\"} ");
    l->inflight_s = metric_in(r.body, "atoll_feed_inflight_seconds{island=\"west\"} ");
    l->inflight = metric_in(r.body, "atoll_feed_inflight{island=\"west\"} ");
    hx_resp_clear(&r);
    return ok && l->budget_s >= 0 && l->inflight_s >= 0 && l->inflight >= 0 ? 0 : -1;
}

/* Within the budget: beyond one computation in flight, the expected device
 * time in flight is at most the budget, plus two computations' worth for
 * the jobs' costs as measured since those were dispatched (a loaded
 * machine's slow computations raise them), plus two more for newcomers: a
 * job none of whose computations has finished yet is fed over a full
 * budget, at most two per island (sched_feed.c), and on a loaded machine a
 * chain's first computation may still be running when a look is taken. */
static int feed_within(const feed_look_t *l)
{
    return l->inflight <= 1 || l->inflight_s <= l->budget_s + 4 * l->inflight_s / l->inflight;
}

/* Eight shared chains of 20 ms computations on the island. A per-job
 * window alone let each have up to four computations dispatched (32 in
 * flight, 640 ms ahead of a newcomer); the island's budget (at most
 * SCHED_FEED_BUDGET_MAX_US, 64 ms) bounds them all together. Once the
 * jobs' costs are measured (the first computations went out at the
 * default 1 ms estimate) and that first batch is gone, every look is
 * within the budget. */
static void test_island_lookahead(void **state)
{
    (void)state;
    enum { JOBS = 8 };
    char *doc = chain_doc("ahead", 200, 20000, 1);     /* cancelled when looked at */
    for (int i = 0; i < JOBS; i++)
        submit_as(&itest_client, doc);
    free(doc);
    feed_look_t l = {0};
    int settled = 0, looks = 0, bad = 0;
    for (int64_t end = hx_now_ms() + 30000; !settled && hx_now_ms() < end; hx_sleep_ms(20))
        settled = feed_look(&l) == 0 && l.inflight >= 1 && l.inflight_s / l.inflight > 0.010 &&
                  feed_within(&l);
    T_CHECK(settled, "the feed never kept within its budget: %.0f computations, %.1f ms in"
            " flight, budget %.1f ms", l.inflight, l.inflight_s * 1e3, l.budget_s * 1e3);
    for (; looks < 50; looks++, hx_sleep_ms(20)) {
        T_CHECK(feed_look(&l) == 0, "no feed gauges in /metrics");
        T_CHECK(l.budget_s <= 0.064 + 1e-9, "budget %.1f ms over its bound", l.budget_s * 1e3);
        if (!feed_within(&l)) {
            bad++;
            fprintf(stderr, "over budget: %.0f computations, %.1f ms in flight, budget %.1f ms\n",
                    l.inflight, l.inflight_s * 1e3, l.budget_s * 1e3);
        }
    }
    T_CHECK(bad == 0, "%d of %d looks over the island's budget", bad, looks);
}

/* Computation i's state in a job object ("" if none). */
static const char *comp_state(const json_t *job, int i)
{
    const json_t *c = json_array_get(json_object_get(job, "computations"), (size_t)i);
    const char *s = json_string_value(json_object_get(c, "state"));
    return s ? s : "";
}

/* A chain of 0.8 s computations: its first four go out together (not
 * measured yet, they are costed at 1 ms), and once the first has ended
 * the three left in flight are 2.4 s of expected device time, over any
 * budget, so its fifth waits until they end. A one-computation job
 * submitted meanwhile is fed at once, over the budget: its computation's
 * seq comes before the chain's fifth. Made to wait for room, it would
 * come after it (both are the admin's: one virtual time, and the chain's
 * lower id wins the tie once the island is empty). On a loaded machine
 * the chain's fourth may go out only after its first ended (after the
 * newcomer, then): the newcomer is still before the fifth. */
static void test_newcomer_over_budget(void **state)
{
    (void)state;
    char *chain = chain_doc("long", 6, 800000, 1), *one = chain_doc("newcomer", 1, 1000, 1);
    int64_t c = submit_as(&itest_client, chain), n = -1;
    json_t *job = NULL;
    int ready = 0;
    for (int64_t end = hx_now_ms() + 60000; !ready && hx_now_ms() < end; hx_sleep_ms(20)) {
        json_decref(job);
        job = hx_job_get(&itest_client, c);
        ready = job && strcmp(comp_state(job, 0), "succeeded") == 0;
    }
    json_decref(job);
    T_CHECK(ready, "the chain's first computation never ended");
    n = submit_as(&itest_client, one);
    json_t *jn = wait_done(&itest_client, n, "succeeded"), *jc = wait_done(&itest_client, c,
                                                                           "succeeded");
    int64_t sc[6], sn[1];
    int nc = comp_seqs(jc, sc, 6), nn = comp_seqs(jn, sn, 1);
    int right = chain_right(&itest_client, c, 6) && chain_right(&itest_client, n, 1);
    json_decref(jn);
    json_decref(jc);
    free(chain);
    free(one);
    T_CHECK(nc == 6 && nn == 1 && sn[0] > sc[0] && sn[0] < sc[4],
            "the newcomer's computation (seq %lld) should go between the chain's first and"
            " fifth (%lld, %lld)", (long long)sn[0], (long long)sc[0], (long long)sc[4]);
    T_CHECK(right, "the chain or the newcomer computed wrong values");
}

/* A shared job of one computation on the whole island: `us` of compute,
 * then a fill of n floats per shard and their sum (n on every shard). */
static char *memory_doc(const char *name, int64_t us, int64_t n)
{
    json_t *doc = json_pack(
        "{s:s, s:s, s:{s:{s:[i,i], s:s}}, s:[{s:s, s:s, s:[{s:s, s:s, s:I}, {s:s, s:s, s:[I],"
        " s:f}, {s:s, s:s, s:[s]}], s:[s]}]}",
        "name", name, "sharing", "shared", "slices", "s", "shape", 2, 2, "island", "west",
        "computations", "name", "c", "slice", "s", "ops", "op", "compute", "out", "b", "us",
        (json_int_t)us, "op", "fill", "out", "x", "shape", (json_int_t)n, "value", 1.0, "op",
        "reduce_sum", "out", "z", "args", "x", "outputs", "z");
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    return text;
}

/* Every shard of the job's c.z holds want. */
static int sum_right(hx_client_t *cl, int64_t id, double want)
{
    char path[64];
    hx_resp_t r;
    snprintf(path, sizeof path, "/v1/jobs/%lld/result", (long long)id);
    int ok = hx_request(cl, "GET", path, NULL, 0, &r) == 0 && r.status == 200;
    for (int k = 0; ok && k < 4; k++) {
        json_t *vals = json_object_get(hx_result_shard(r.json, "c.z", k), "values");
        ok = json_number_value(json_array_get(vals, 0)) == want;
    }
    hx_resp_clear(&r);
    return ok;
}

/* Device memory: the worker's 8 MiB store is 2 MiB per device. A shared
 * job taking 1 MiB of each device runs for 2 s; a small shared job joins
 * it at once, a second 1 MiB one does not fit beside it: it waits, its
 * pending_reason naming device memory, and is allocated only once the
 * first has ended. All three right. */
static void test_memory_bounds_sharing(void **state)
{
    (void)state;
    char *d1 = memory_doc("big1", 2000000, 262144), *d2 = memory_doc("big2", 1000, 262144);
    char *ds = chain_doc("small", 1, 1000, 1);
    int64_t b1 = submit_as(&itest_client, d1);
    json_t *j = NULL;
    T_CHECK(hx_job_wait_leave(&itest_client, b1, "queued", 20000, ITEST_POLL_MS, &j) == 0,
            "the first big job was never allocated");
    json_decref(j);
    int64_t sm = submit_as(&itest_client, ds), b2 = submit_as(&itest_client, d2);
    char reason[512] = "";
    for (int64_t end = hx_now_ms() + 20000; !reason[0] && hx_now_ms() < end;
         hx_sleep_ms(ITEST_POLL_MS)) {
        json_t *job = hx_job_get(&itest_client, b2);
        const char *why = json_string_value(json_object_get(job, "pending_reason"));
        if (why && strstr(why, "device memory"))
            snprintf(reason, sizeof reason, "%s", why);
        else if (job && strcmp(hx_job_state(job), "queued") != 0)
            snprintf(reason, sizeof reason, "(left the queue: %s)", hx_job_state(job));
        json_decref(job);
    }
    json_t *f1 = wait_done(&itest_client, b1, "succeeded");
    json_t *fs = wait_done(&itest_client, sm, "succeeded");
    json_t *f2 = wait_done(&itest_client, b2, "succeeded");
    int64_t b1_end = hx_job_time_us(f1, "finished");
    int64_t sm_alloc = hx_job_time_us(fs, "allocated"), b2_alloc = hx_job_time_us(f2, "allocated");
    int right = sum_right(&itest_client, b1, 262144.0) && sum_right(&itest_client, b2, 262144.0) &&
                chain_right(&itest_client, sm, 1);
    json_decref(f1);
    json_decref(fs);
    json_decref(f2);
    free(d1);
    free(d2);
    free(ds);
    T_CHECK(strstr(reason, "device memory") != NULL,
            "the second big job should wait for device memory (reason: %s)", reason);
    T_CHECK(sm_alloc < b1_end, "the small shared job should join the first big one");
    T_CHECK(b2_alloc >= b1_end, "the second big job must wait until the first ends");
    T_CHECK(right, "jobs bounded by memory computed wrong values");
}

static void test_bad_field(void **state)
{
    (void)state;
    itest_submit_bad("{'sharing':'sometimes','slices':{'s':{'shape':[1]}},'computations':"
                     "[{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'i'}]}]}",
                     "sharing");
}

static int group_setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"west=2x2"};
    static const char *const extra[] = {"--admin-token", ADMIN_TOKEN, "--worker-token",
                                        WORKER_TOKEN, NULL};
    static const char *const wextra[] = {"--token", WORKER_TOKEN, "--backend", "sim",
                                         "--store-cap-mb", STORE_CAP_MB_TEXT, NULL};
    if (hx_init() != 0 || hx_cluster_start_args(&itest_cluster, islands, 1, extra) != 0)
        return -1;
    if (hx_worker_start_args(&itest_cluster, "west", 4, wextra, 15000, 0) != 0 ||
        hx_client_init(&itest_client, itest_cluster.url) != 0 ||
        hx_client_set_auth(&itest_client, ADMIN_TOKEN, NULL) != 0) {
        hx_cluster_stop(&itest_cluster);
        return -1;
    }
    /* Device memory is known once the worker's first heartbeat reported
     * its store cap: every test runs with it. */
    int64_t cap = -1;
    for (int64_t end = hx_now_ms() + 30000; cap != STORE_CAP_MB * 1024 * 1024 &&
                                            hx_now_ms() < end; hx_sleep_ms(50))
        cap = worker_cap();
    if (cap != STORE_CAP_MB * 1024 * 1024) {
        fprintf(stderr, "the worker's store cap never showed (%lld)\n", (long long)cap);
        itest_stop();
        return -1;
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_shared_placement, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_interleaved, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_shares_and_cancel, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_device_time_not_count, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_island_lookahead, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_newcomer_over_budget, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_memory_bounds_sharing, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_bad_field, itest_cancel_leftovers),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
