/* test_faults.c - nothing accepted is ever lost: worker loss and
 * controller loss (docs/architecture.md, "Faults").
 *
 * 1. lease_retry / lease_fail (deterministic, west=2x2, two workers of two
 *    devices, lease 1 s): a worker SIGSTOPped past its lease goes down, the
 *    job holding it is retried on the other worker (or fails naming the
 *    worker when max_retries is 0); its polls, heartbeats and reports are
 *    refused while gone; after SIGCONT it registers again and its devices
 *    come back free. lease_shared: the same for two shared jobs holding
 *    the same devices (DESIGN Part D): both go back and succeed, right.
 * 2. chaos (bounded, loopback): one island 2x4 covered by four workers of
 *    two devices, lease 1 s. A driver thread submits a few hundred small
 *    jobs with known results, each with an Idempotency-Key and retried on
 *    connection errors, while the main thread kill -9s random workers
 *    (starting a new one) and atolld (restarting it on the same port and
 *    database). Then every accepted job must be terminal, every succeeded
 *    one correct, no device allocated, no job created twice for one key and
 *    no shard counted twice: the job object's per-computation
 *    shards_reported (succeeded task rows of the current attempt) must equal
 *    shards_total and shards_done. Failed jobs are allowed only with a
 *    reason naming a lost worker (retries ran out). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

#include "itest.h"
#include "support_faults.h"

/* ---- helpers on the small harness cluster ---- */

/* GET path on the shared client; new reference or NULL. Sets *status. */
static json_t *get_json(const char *path, long *status)
{
    hx_resp_t r;
    *status = 0;
    if (hx_request(&itest_client, "GET", path, NULL, 0, &r) != 0)
        return NULL;
    *status = r.status;
    json_t *j = json_incref(r.json);
    hx_resp_clear(&r);
    return j;
}

static long post_status(const char *path, const char *body)
{
    hx_resp_t r;
    if (hx_request(&itest_client, "POST", path, body, body ? strlen(body) : 0, &r) != 0)
        return 0;
    long st = r.status;
    hx_resp_clear(&r);
    return st;
}

/* The live worker id of process pid, or -1. */
static int64_t worker_id_of(pid_t pid)
{
    long st;
    json_t *w = get_json("/v1/workers", &st);
    int64_t id = -1;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(w, "workers"), i, v) {
        const char *state = json_string_value(json_object_get(v, "state"));
        if (json_integer_value(json_object_get(v, "pid")) == pid && state &&
            strcmp(state, "live") == 0)
            id = json_integer_value(json_object_get(v, "id"));
    }
    json_decref(w);
    return id;
}

/* Polls island `name` until it has `free` free, `down` down devices. */
static int wait_island(const char *name, int free_n, int down_n, int timeout_ms)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/islands/%s", name);
    int64_t deadline = hx_now_ms() + timeout_ms;
    while (hx_now_ms() < deadline) {
        long st;
        json_t *isl = get_json(path, &st);
        int f = (int)json_integer_value(json_object_get(isl, "free"));
        int d = (int)json_integer_value(json_object_get(isl, "down"));
        json_decref(isl);
        if (st == 200 && f == free_n && d == down_n)
            return 0;
        hx_sleep_ms(50);
    }
    return -1;
}

/* Polls until the job's state is `want`; the job object (caller decrefs). */
static json_t *wait_job_state(int64_t id, const char *want, int timeout_ms)
{
    int64_t deadline = hx_now_ms() + timeout_ms;
    for (;;) {
        json_t *job = hx_job_get(&itest_client, id);
        if (job && strcmp(hx_job_state(job), want) == 0)
            return job;
        json_decref(job);
        if (hx_now_ms() >= deadline)
            return NULL;
        hx_sleep_ms(ITEST_POLL_MS);
    }
}

/* The harness worker process holding island device `index`. */
static hx_proc_t *holder_of(int64_t index)
{
    long st;
    json_t *w = get_json("/v1/workers", &st);
    pid_t pid = 0;
    size_t i, k;
    json_t *v, *d;
    json_array_foreach(json_object_get(w, "workers"), i, v) {
        const char *state = json_string_value(json_object_get(v, "state"));
        if (!state || strcmp(state, "live") != 0)
            continue;
        json_array_foreach(json_object_get(v, "devices"), k, d) {
            json_t *idx = json_is_object(d) ? json_object_get(d, "index") : d;
            if (json_integer_value(idx) == index)
                pid = (pid_t)json_integer_value(json_object_get(v, "pid"));
        }
    }
    json_decref(w);
    for (int p = 0; p < itest_cluster.nworkers; p++)
        if (itest_cluster.workers[p].pid == pid && pid > 0)
            return &itest_cluster.workers[p];
    return NULL;
}

/* The first device index of the job's slice `name`. */
static int64_t slice_device0(const json_t *job, const char *name)
{
    json_t *devs = json_object_get(json_object_get(json_object_get(job, "slices"), name), "devices");
    return json_integer_value(json_object_get(json_array_get(devs, 0), "index"));
}

static int group_setup(void **state)
{
    static const itest_island_t isl[] = {{"west=2x2", "west", 2, 2, NULL}};
    (void)state;
    /* atolld reads ATOLL_LEASE_MS; a short lease keeps the test short. */
    setenv("ATOLL_LEASE_MS", "1000", 1);
    return itest_start(isl, 1);
}

/* Stops the worker holding the job's slice past its lease; checks fencing
 * while it is gone, then resumes it. Returns the stopped worker's old id. */
static int64_t stop_holder_past_lease(int64_t job_id, json_t *job, int down_expected)
{
    hx_proc_t *w = holder_of(slice_device0(job, "s"));
    T_CHECK(w != NULL, "no worker holds job %" PRId64 "'s first device", job_id);
    int64_t old = worker_id_of(w->pid);
    T_CHECK(old > 0, "worker pid %d not live", (int)w->pid);
    T_CHECK(kill(w->pid, SIGSTOP) == 0, "SIGSTOP failed");
    /* Lease 1 s, scheduler tick 200 ms: down well within 5 s. */
    int64_t t0 = hx_now_ms();
    int down = 0;
    while (!down && hx_now_ms() - t0 < 5000) {
        long st;
        json_t *isl = get_json("/v1/islands/west", &st);
        down = json_integer_value(json_object_get(isl, "down")) == down_expected;
        json_decref(isl);
        if (!down)
            hx_sleep_ms(50);
    }
    if (!down)
        kill(w->pid, SIGCONT);
    T_CHECK(down, "worker %" PRId64 " stopped for 5 s but its devices are not down", old);
    /* Fencing: a gone worker's poll and heartbeat get 404, its reports 409. */
    char path[96];
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks?wait_ms=0", old);
    long st;
    json_t *ans = get_json(path, &st);
    json_decref(ans);
    long hb, rep1, rep2;
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/heartbeat", old);
    hb = post_status(path, "{}");
    /* Task ids of this cluster's jobs are small; any of them reported by a
     * gone worker is refused, whatever its state. */
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks/1", old);
    rep1 = post_status(path, "{\"state\":\"succeeded\",\"outputs\":{}}");
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks/2", old);
    rep2 = post_status(path, "{\"state\":\"cancelled\"}");
    kill(w->pid, SIGCONT);
    T_CHECK(st == 404, "poll of gone worker %" PRId64 " answered %ld, expected 404", old, st);
    T_CHECK(hb == 404, "heartbeat of gone worker %" PRId64 " answered %ld, expected 404", old, hb);
    T_CHECK(rep1 == 409 && rep2 == 409, "reports of gone worker %" PRId64 " answered %ld/%ld,"
            " expected 409", old, rep1, rep2);
    return old;
}

/* The resumed worker registers again (new id) and all devices come back. */
static void check_back(pid_t pid, int64_t old)
{
    T_CHECK(wait_island("west", 4, 0, 10000) == 0,
            "devices did not all come back free within 10 s of SIGCONT");
    int64_t now_id = worker_id_of(pid);
    T_CHECK(now_id > 0 && now_id != old, "resumed worker pid %d: live id %" PRId64
            " (old %" PRId64 "), expected a new registration", (int)pid, now_id, old);
    char path[96];
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/heartbeat", old);
    T_CHECK(post_status(path, "{}") == 404, "old id %" PRId64 " still accepted", old);
}

/* A job on one worker's two devices: the worker is stopped past its lease,
 * the job runs again on the other worker and succeeds. */
static void test_lease_retry(void **state)
{
    (void)state;
    int64_t id = itest_submit("{'name':'victim','max_retries':1,'slices':{'s':{'shape':[2]}},"
                              "'computations':[{'name':'c','slice':'s','ops':["
                              "{'op':'compute','out':'b','us':1500000},"
                              "{'op':'shard_index','out':'i'},"
                              "{'op':'all_reduce','out':'z','args':['i'],'reduce':'sum'}],"
                              "'outputs':['z']}]}");
    json_t *job = wait_job_state(id, "running", 10000);
    T_CHECK(job != NULL, "job %" PRId64 " never ran", id);
    hx_proc_t *w = holder_of(slice_device0(job, "s"));
    pid_t pid = w ? w->pid : 0;
    int64_t old = stop_holder_past_lease(id, job, 2);
    json_decref(job);
    job = itest_wait_state(id, "succeeded");
    int64_t retries = json_integer_value(json_object_get(job, "retries"));
    int64_t attempt = json_integer_value(json_object_get(job, "attempt"));
    json_decref(job);
    T_CHECK(retries == 1 && attempt == 1, "retries %" PRId64 " attempt %" PRId64 ", expected 1/1",
            retries, attempt);
    json_t *res = hx_job_result(&itest_client, id);
    json_t *z0 = hx_result_shard(res, "c.z", 0), *z1 = hx_result_shard(res, "c.z", 1);
    double s0 = json_number_value(json_object_get(z0, "sum"));
    double s1 = json_number_value(json_object_get(z1, "sum"));
    json_decref(res);
    T_CHECK(z0 && z1 && s0 == 1.0 && s1 == 1.0, "retried job's result is wrong (%g, %g)", s0, s1);
    check_back(pid, old);
}

/* Two shared jobs on the whole island, so both hold every device: the
 * worker holding device 0 is stopped past its lease; both attempts end,
 * both go back to the queue (nothing fits on the two devices left), run
 * again once the worker is back, and succeed with the right sums (0 + 1 +
 * 2 + 3 on every shard); every device is free again after. */
static void test_lease_shared(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'%s','sharing':'shared','max_retries':1,'slices':{'s':{'shape':[2,2]}},"
        "'computations':[{'name':'c','slice':'s','ops':["
        "{'op':'compute','out':'b','us':1500000},"
        "{'op':'shard_index','out':'i'},"
        "{'op':'all_reduce','out':'z','args':['i'],'reduce':'sum'}],'outputs':['z']}]}";
    char text[512];
    int64_t ids[2];
    for (int j = 0; j < 2; j++) {
        snprintf(text, sizeof text, doc, j ? "shared-b" : "shared-a");
        ids[j] = itest_submit(text);
    }
    json_t *job = wait_job_state(ids[0], "running", 10000), *other =
                                                              wait_job_state(ids[1], "running", 10000);
    T_CHECK(job && other, "shared jobs %" PRId64 " and %" PRId64 " never ran together", ids[0],
            ids[1]);
    json_decref(other);
    hx_proc_t *w = holder_of(slice_device0(job, "s"));
    pid_t pid = w ? w->pid : 0;
    int64_t old = stop_holder_past_lease(ids[0], job, 2);
    json_decref(job);
    for (int j = 0; j < 2; j++) {
        job = itest_wait_state(ids[j], "succeeded");
        int64_t retries = json_integer_value(json_object_get(job, "retries"));
        json_decref(job);
        T_CHECK(retries == 1, "shared job %" PRId64 ": retries %" PRId64 ", expected 1", ids[j],
                retries);
        json_t *res = hx_job_result(&itest_client, ids[j]);
        for (int k = 0; k < 4; k++) {
            double sum = json_number_value(json_object_get(hx_result_shard(res, "c.z", k), "sum"));
            T_CHECK(sum == 6.0, "shared job %" PRId64 " shard %d: sum %g, expected 6", ids[j], k,
                    sum);
        }
        json_decref(res);
    }
    check_back(pid, old);
}

/* max_retries 0: the job fails with a reason naming the lost worker. */
static void test_lease_fail(void **state)
{
    (void)state;
    int64_t id = itest_submit("{'name':'no-retry','max_retries':0,'slices':{'s':{'shape':[2,2]}},"
                              "'computations':[{'name':'c','slice':'s','ops':["
                              "{'op':'compute','out':'b','us':1500000},"
                              "{'op':'shard_index','out':'i'}],'outputs':['i']}]}");
    json_t *job = wait_job_state(id, "running", 10000);
    T_CHECK(job != NULL, "job %" PRId64 " never ran", id);
    hx_proc_t *w = holder_of(slice_device0(job, "s"));
    pid_t pid = w ? w->pid : 0;
    int64_t old = stop_holder_past_lease(id, job, 2);
    json_decref(job);
    job = itest_wait_state(id, "failed");
    char want[64], err[400];
    snprintf(want, sizeof want, "worker %" PRId64 " was lost", old);
    const char *e = json_string_value(json_object_get(job, "error"));
    snprintf(err, sizeof err, "%s", e ? e : "");
    json_decref(job);
    T_CHECK(strstr(err, want) != NULL, "error '%s' does not say '%s'", err, want);
    check_back(pid, old);
}

/* ---- chaos ---- */

#define CH_JOBS 240
#define CH_WORKERS 4
#define CH_MAX_KILLS 16
#define CH_LEASE_MS 1000
#define CH_SUBMIT_DEADLINE_MS 90000
#define CH_FINISH_DEADLINE_MS 120000

typedef struct ch_job {
    char key[64];
    char *doc;                  /* owned */
    int kind;                   /* 0 all_reduce, 1 edge, 2 busy */
    int nshards;
    double v;
    int64_t id;                 /* -1 until accepted */
    int created;                /* answers 201 seen for this key (+100: another id) */
} ch_job_t;

typedef struct chaos {
    char dir[HX_DIR_MAX];
    char url[HX_URL_MAX];
    int port;
    hx_proc_t atolld;
    hx_proc_t workers[CH_WORKERS];
    int nstarted;               /* worker processes started, for log names */
    ch_job_t jobs[CH_JOBS];
    atomic_int submitted;       /* jobs accepted so far (driver thread) */
    atomic_int driver_done;
    atomic_int driver_failed;
    int kills_worker, kills_controller;
} chaos_t;

static chaos_t ch;

static const char *const ch_shapes[] = {"[2]", "[4]", "[2,2]", "[1,4]", "[2,4]", "[1,2]"};
static const int ch_sizes[] = {2, 4, 4, 4, 8, 2};

/* A job with a known result. kind 0: shard k computes k*v on [4] and
 * all-reduces: every element v*n(n-1)/2. kind 1: the same, then an `input`
 * edge to a second slice that scales by 0.5. kind 2: a short `compute`,
 * then shard k outputs k. */
static void ch_make(ch_job_t *j, int i, unsigned *seed)
{
    char buf[1024];
    int s = (int)(rand_r(seed) % 6);
    j->kind = (int)(rand_r(seed) % 3);
    j->v = 1.0 + (double)(rand_r(seed) % 5);
    j->id = -1;
    snprintf(j->key, sizeof j->key, "faults-%d-%d", (int)getpid(), i);
    const char *produce =
        "{'name':'p','slice':'a','ops':[{'op':'shard_index','out':'i'},"
        "{'op':'fill','out':'x','shape':[4],'value':%g},{'op':'mul','out':'y','args':['x','i']},"
        "{'op':'all_reduce','out':'z','args':['y'],'reduce':'sum'}],'outputs':['z']}";
    char p[512];
    snprintf(p, sizeof p, produce, j->v);
    if (j->kind == 1) {
        if (ch_sizes[s] > 4)
            s = 2;      /* two slices must fit the 8 devices together */
        snprintf(buf, sizeof buf,
                 "{'name':'edge-%d','slices':{'a':{'shape':%s},'b':{'shape':%s}},'computations':["
                 "%s,{'name':'q','slice':'b','ops':[{'op':'input','out':'z','from':'p.z'},"
                 "{'op':'scale','out':'w','args':['z'],'factor':0.5}],'outputs':['w']}]}",
                 i, ch_shapes[s], ch_shapes[s], p);
    } else if (j->kind == 0) {
        snprintf(buf, sizeof buf, "{'name':'reduce-%d','slices':{'a':{'shape':%s}},"
                 "'computations':[%s]}", i, ch_shapes[s], p);
    } else {
        snprintf(buf, sizeof buf,
                 "{'name':'busy-%d','slices':{'a':{'shape':%s}},'computations':[{'name':'p',"
                 "'slice':'a','ops':[{'op':'compute','out':'b','us':%d},"
                 "{'op':'shard_index','out':'i'}],'outputs':['i']}]}",
                 i, ch_shapes[s], 10000 + (int)(rand_r(seed) % 5) * 20000);
    }
    j->nshards = ch_sizes[s];
    j->doc = hx_text_q(buf);
}

/* Submits every job, retrying each (same key) until the controller
 * answers 200/201: connection errors and 5xx are expected while atolld is
 * down. Any other answer stops the driver (a test failure). */
static void *ch_driver(void *arg)
{
    (void)arg;
    int64_t deadline = hx_now_ms() + CH_SUBMIT_DEADLINE_MS;
    for (int i = 0; i < CH_JOBS; i++) {
        ch_job_t *j = &ch.jobs[i];
        for (;;) {
            int64_t id = -1;
            int st = fx_submit(ch.url, j->doc, j->key, &id);
            if ((st == 201 || st == 200) && id > 0) {
                if (j->id > 0 && j->id != id)
                    j->created += 100;      /* a second job for one key: duplicate */
                j->id = id;
                j->created += st == 201;
                break;
            }
            if ((st > 0 && st < 500) || hx_now_ms() > deadline) {
                fprintf(stderr, "faults: job %d (%s) submit answered %d\n", i, j->key, st);
                atomic_store(&ch.driver_failed, 1);
                atomic_store(&ch.driver_done, 1);
                return NULL;
            }
            hx_sleep_ms(50);
        }
        atomic_fetch_add(&ch.submitted, 1);
        hx_sleep_ms(100);
    }
    atomic_store(&ch.driver_done, 1);
    return NULL;
}

static int ch_worker_start(int slot)
{
    char name[32];
    snprintf(name, sizeof name, "worker-%d", ch.nstarted++);
    /* A replacement waits for the killed worker's lease to expire before
     * its block is free: allow a few leases. */
    return fx_worker_start(&ch.workers[slot], ch.dir, name, ch.url, "w", 2, 20000);
}

static int ch_atolld_start(void)
{
    static const char *const islands[] = {"w=2x4"};
    char name[32];
    snprintf(name, sizeof name, "atolld");
    /* The old socket may linger a moment after kill -9: retry the bind. */
    for (int tries = 0; tries < 20; tries++) {
        int port = 0;
        if (fx_atolld_start(&ch.atolld, ch.dir, name, ch.port, CH_LEASE_MS, islands, 1, ch.url,
                            sizeof ch.url, &port) == 0) {
            ch.port = port;
            return 0;
        }
        hx_sleep_ms(250);
    }
    return -1;
}

/* Expected per-element value of output `key` on shard k, or NAN. */
static double ch_expect(const ch_job_t *j, const char *key, int k)
{
    double n = j->nshards, red = j->v * n * (n - 1) / 2;
    if (strcmp(key, "p.z") == 0 && j->kind != 2)
        return red;
    if (strcmp(key, "q.w") == 0 && j->kind == 1)
        return red * 0.5;
    if (strcmp(key, "p.i") == 0 && j->kind == 2)
        return k;
    return NAN;
}

/* Checks a succeeded job's result and shard accounting. 0 ok, 1 wrong
 * result, 2 duplicate shard report. */
static int ch_check_succeeded(hx_client_t *cl, const ch_job_t *j, const json_t *job)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(job, "computations"), i, c) {
        json_int_t total = json_integer_value(json_object_get(c, "shards_total"));
        json_int_t done = json_integer_value(json_object_get(c, "shards_done"));
        json_int_t rep = json_integer_value(json_object_get(c, "shards_reported"));
        if (rep != total || done != total) {
            fprintf(stderr, "faults: job %" PRId64 " comp %zu: total %lld done %lld reported"
                    " %lld\n", j->id, i, (long long)total, (long long)done, (long long)rep);
            return 2;
        }
    }
    json_t *res = hx_job_result(cl, j->id);
    const char *keys[2] = {j->kind == 2 ? "p.i" : "p.z", j->kind == 1 ? "q.w" : NULL};
    int bad = res == NULL;
    for (int q = 0; q < 2 && !bad; q++) {
        if (!keys[q])
            continue;
        json_t *arr = json_object_get(json_object_get(res, "outputs"), keys[q]);
        if (json_array_size(arr) != (size_t)j->nshards) {
            bad = 1;
            break;
        }
        for (int k = 0; k < j->nshards && !bad; k++) {
            json_t *sh = json_array_get(arr, (size_t)k);
            double want = ch_expect(j, keys[q], k);
            json_t *vals = json_object_get(sh, "values");
            size_t m;
            json_t *v;
            bad |= json_integer_value(json_object_get(sh, "shard")) != k || json_array_size(vals) == 0;
            json_array_foreach(vals, m, v)
                bad |= fabs(json_number_value(v) - want) > 1e-4 * (1 + fabs(want));
        }
    }
    if (bad)
        fprintf(stderr, "faults: job %" PRId64 " (%s) has a wrong result\n", j->id, j->key);
    json_decref(res);
    return bad;
}

/* Every job of the cluster, by listing all pages: its count. */
static int ch_count_jobs(hx_client_t *cl, int64_t *max_id)
{
    int n = 0;
    int64_t before = 0;
    *max_id = 0;
    for (;;) {
        char path[96] = "/v1/jobs?limit=500";
        if (before)
            snprintf(path, sizeof path, "/v1/jobs?limit=500&before=%" PRId64, before);
        hx_resp_t r;
        if (hx_request(cl, "GET", path, NULL, 0, &r) != 0)
            return -1;
        json_t *jobs = json_object_get(r.json, "jobs");
        size_t i;
        json_t *v;
        json_array_foreach(jobs, i, v) {
            int64_t id = json_integer_value(json_object_get(v, "id"));
            if (id > *max_id)
                *max_id = id;
            n++;
        }
        json_t *next = json_object_get(r.json, "next_before");
        before = json_is_integer(next) ? json_integer_value(next) : 0;
        hx_resp_clear(&r);
        if (!before)
            return n;
    }
}

static void test_chaos(void **state)
{
    (void)state;
    unsigned seed = 20240611u;
    const char *s = getenv("ATOLL_FAULTS_SEED");
    if (s && *s)
        seed = (unsigned)strtoul(s, NULL, 10);
    memset(&ch, 0, sizeof ch);
    const char *tmp = getenv("TMPDIR");
    snprintf(ch.dir, sizeof ch.dir, "%s/atoll-faults-XXXXXX",
             tmp && *tmp && strlen(tmp) < HX_DIR_MAX - 32 ? tmp : "/tmp");
    assert_non_null(mkdtemp(ch.dir));
    for (int i = 0; i < CH_JOBS; i++) {
        ch_make(&ch.jobs[i], i, &seed);
        assert_non_null(ch.jobs[i].doc);
    }
    T_CHECK(ch_atolld_start() == 0, "atolld did not start (logs in %s)", ch.dir);
    for (int w = 0; w < CH_WORKERS; w++)
        T_CHECK(ch_worker_start(w) == 0, "worker %d did not start (logs in %s)", w, ch.dir);

    int64_t t_start = hx_now_ms();
    pthread_t driver;
    T_CHECK(pthread_create(&driver, NULL, ch_driver, NULL) == 0, "no driver thread");
    /* Faults from this (the forking) thread, at random moments while the
     * driver submits: about a third hit the controller. */
    int broken = 0;
    while (!atomic_load(&ch.driver_done) && !broken &&
           ch.kills_worker + ch.kills_controller < CH_MAX_KILLS) {
        hx_sleep_ms(600 + (int)(rand_r(&seed) % 1200));
        if (atomic_load(&ch.driver_done))
            break;
        if (rand_r(&seed) % 3 == 0) {
            fx_kill(&ch.atolld);
            ch.kills_controller++;
            hx_sleep_ms(50 + (int)(rand_r(&seed) % 400));
            broken = ch_atolld_start() != 0;
        } else {
            int slot = (int)(rand_r(&seed) % CH_WORKERS);
            fx_kill(&ch.workers[slot]);
            ch.kills_worker++;
            broken = ch_worker_start(slot) != 0;
        }
    }
    pthread_join(driver, NULL);
    T_CHECK(!broken, "a process could not be restarted (logs in %s)", ch.dir);
    T_CHECK(!atomic_load(&ch.driver_failed), "the driver could not submit (logs in %s)", ch.dir);

    /* Every accepted job must reach a terminal state. */
    hx_client_t cl;
    T_CHECK(hx_client_init(&cl, ch.url) == 0, "no client");
    int64_t deadline = hx_now_ms() + CH_FINISH_DEADLINE_MS;
    int succeeded = 0, failed_lost = 0, lost = 0, dup = 0, wrong = 0, restarts = 0, retries = 0;
    for (int i = 0; i < CH_JOBS; i++) {
        ch_job_t *j = &ch.jobs[i];
        /* Two 201s, or two ids, for one key would be a second job. No 201 at
         * all is fine: the first answer was lost with atolld, and the retry
         * got 200 with the job the first request created. */
        if (j->created > 1) {
            fprintf(stderr, "faults: key %s created %d jobs\n", j->key, j->created);
            dup++;
        }
        json_t *job = NULL;
        int left = (int)(deadline - hx_now_ms());
        if (hx_job_wait(&cl, j->id, left > 0 ? left : 1, 50, &job) != 0) {
            fprintf(stderr, "faults: job %" PRId64 " (%s) not terminal: %s\n", j->id, j->key,
                    job ? hx_job_state(job) : "(missing)");
            lost++;
            json_decref(job);
            continue;
        }
        const char *st = hx_job_state(job);
        const char *err = json_string_value(json_object_get(job, "error"));
        restarts += (int)json_integer_value(json_object_get(job, "restarts"));
        retries += (int)json_integer_value(json_object_get(job, "retries"));
        if (strcmp(st, "succeeded") == 0) {
            int rc = ch_check_succeeded(&cl, j, job);
            succeeded += rc == 0;
            wrong += rc == 1;
            dup += rc == 2;
        } else if (strcmp(st, "failed") == 0 && err && strstr(err, "worker ") &&
                   strstr(err, " was lost")) {
            failed_lost++;
        } else {
            fprintf(stderr, "faults: job %" PRId64 " ended %s: %s\n", j->id, st, err ? err : "");
            lost++;
        }
        json_decref(job);
    }
    /* No key made two jobs: the cluster holds exactly the accepted ones. */
    int64_t max_id = 0;
    int njobs = ch_count_jobs(&cl, &max_id);
    if (njobs != CH_JOBS) {
        fprintf(stderr, "faults: the cluster holds %d jobs for %d keys\n", njobs, CH_JOBS);
        dup++;
    }
    /* A late retry with a used key answers the first job. */
    int64_t again = -1;
    int st_again = fx_submit(ch.url, ch.jobs[0].doc, ch.jobs[0].key, &again);
    if (st_again != 200 || again != ch.jobs[0].id) {
        fprintf(stderr, "faults: resubmitting key %s answered %d id %" PRId64 "\n",
                ch.jobs[0].key, st_again, again);
        dup++;
    }
    /* Nothing left allocated; the workers cover the island again. */
    int settled = 0;
    long free_n = -1, alloc_n = -1, down_n = -1;
    for (int64_t until = hx_now_ms() + 20000; !settled && hx_now_ms() < until;) {
        hx_resp_t r;
        if (hx_request(&cl, "GET", "/v1/islands/w", NULL, 0, &r) == 0) {
            free_n = (long)json_integer_value(json_object_get(r.json, "free"));
            alloc_n = (long)json_integer_value(json_object_get(r.json, "allocated"));
            down_n = (long)json_integer_value(json_object_get(r.json, "down"));
            settled = r.status == 200 && free_n == 8;
            hx_resp_clear(&r);
        }
        if (!settled)
            hx_sleep_ms(100);
    }
    hx_client_cleanup(&cl);
    printf("faults.jobs %d faults.kills.worker %d faults.kills.controller %d faults.succeeded %d"
           " faults.failed %d faults.lost %d faults.duplicates %d\n", njobs, ch.kills_worker,
           ch.kills_controller, succeeded, failed_lost, lost, dup);
    printf("faults.wrong_results %d faults.retries %d faults.restarts %d faults.seconds %.1f\n",
           wrong, retries, restarts, (double)(hx_now_ms() - t_start) / 1000.0);
    fflush(stdout);

    int clean = 1;
    for (int w = 0; w < CH_WORKERS; w++)
        clean &= fx_term(&ch.workers[w], 8000);
    clean &= fx_term(&ch.atolld, 8000);
    for (int i = 0; i < CH_JOBS; i++)
        free(ch.jobs[i].doc);
    int ok = lost == 0 && dup == 0 && wrong == 0 && alloc_n == 0 && settled && clean &&
             succeeded + failed_lost == CH_JOBS;
    if (ok) {
        char cmd[HX_DIR_MAX + 16];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", ch.dir);
        if (system(cmd) != 0)
            fprintf(stderr, "faults: could not remove %s\n", ch.dir);
    } else {
        fprintf(stderr, "faults: logs kept in %s\n", ch.dir);
    }
    assert_int_equal(lost, 0);
    assert_int_equal(dup, 0);
    assert_int_equal(wrong, 0);
    T_CHECK(settled && alloc_n == 0, "island w: free %ld allocated %ld down %ld at the end",
            free_n, alloc_n, down_n);
    T_CHECK(clean, "a process did not exit 0 on SIGTERM (logs in %s)", ch.dir);
    T_CHECK(ch.kills_worker + ch.kills_controller >= 6, "only %d kills happened",
            ch.kills_worker + ch.kills_controller);
}

int main(void)
{
    const struct CMUnitTest lease[] = {
        cmocka_unit_test_teardown(test_lease_retry, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_lease_fail, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_lease_shared, itest_cancel_leftovers),
    };
    const struct CMUnitTest chaos[] = {
        cmocka_unit_test(test_chaos),
    };
    if (hx_init() != 0)
        return 1;
    int rc = cmocka_run_group_tests_name("lease", lease, group_setup, itest_group_teardown);
    rc |= cmocka_run_group_tests_name("chaos", chaos, NULL, NULL);
    return rc;
}
