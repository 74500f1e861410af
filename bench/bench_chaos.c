/* bench_chaos.c - a long chaos run: N jobs (default 1000) of six kinds (a
 * cross-island edge, collectives, one device, a busy device, a chain on one
 * slice, which goes out as a run of host tasks) with results known in
 * closed form, while atolld and workers are killed with SIGKILL
 * at random moments (issue 13). Prints what was lost, counted twice or
 * wrong (all three must be 0), how many jobs failed and why, and the
 * worker-loss detection time: from the kill -9 of a worker to the moment
 * GET /v1/workers no longer lists it as live (polled every 20 ms).
 *
 *   bench_chaos [--jobs N] [--seed S] [--lease-ms MS] [--window W]
 *
 * Cluster: islands west=4x4 and east=2x4, four workers of 4 devices on
 * west and two on east, --lease-ms 2000. atolld is restarted on the same
 * database and port (the port is retried a while after kill -9, then any
 * port is taken and every client follows the new URL).
 *
 * Threads: the main thread forks, kills and restarts (PR_SET_PDEATHSIG is
 * per forking thread); a driver thread submits, each job with an
 * Idempotency-Key and retried with the same key on transport failure or
 * 5xx; a watcher thread polls accepted jobs until they are terminal. At
 * most `window` jobs are accepted but not terminal, so kills hit jobs in
 * every state. Exit status 0 only when lost, twice and wrong are 0. */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "support_faults.h"
#include "support_harness.h"

#define BC_WEST_WORKERS 4
#define BC_EAST_WORKERS 2
#define BC_WORKERS (BC_WEST_WORKERS + BC_EAST_WORKERS)
#define BC_MAX_OUT 4
#define BC_MAX_DETECT 4096
#define BC_FINISH_CAP_MS (40 * 60 * 1000)
#define BC_DETECT_POLL_MS 20

/* One expected output: every element of shard k equals c, or k when
 * by_index; `elems` elements per shard. */
typedef struct bc_out {
    char key[32];
    int nshards;
    int elems;
    double c;
    int by_index;
} bc_out_t;

typedef struct bc_job {
    char key[64];
    char *doc;                  /* owned */
    int kind;
    bc_out_t out[BC_MAX_OUT];
    int nout;
    int64_t id;                 /* -1 until accepted */
    int created;                /* 201 answers for this key */
    int id_changed;             /* a later answer named another id */
    int submits;                /* POSTs sent */
    atomic_int terminal;        /* set by the watcher */
} bc_job_t;

typedef struct bc {
    int njobs, window, lease_ms;
    unsigned seed;
    char dir[HX_DIR_MAX];
    pthread_mutex_t url_mu;
    char url[HX_URL_MAX];       /* under url_mu */
    int port;
    hx_proc_t atolld;
    hx_proc_t workers[BC_WORKERS];
    int nstarted;
    bc_job_t *jobs;
    atomic_int accepted, nterminal, driver_done, driver_failed, stop;
    atomic_int kills_worker, kills_controller, resubmits;
    int replays, replay_bad;    /* keys re-POSTed after a restart (main thread) */
    int64_t t0;
    int detect_ms[BC_MAX_DETECT];
    int ndetect, undetected;
} bc_t;

static bc_t bc;

static const char *const bc_kind_names[] = {"design", "reduce", "single", "edge", "busy",
                                            "chain"};
#define BC_KINDS 6

static void bc_url(char *out)
{
    pthread_mutex_lock(&bc.url_mu);
    snprintf(out, HX_URL_MAX, "%s", bc.url);
    pthread_mutex_unlock(&bc.url_mu);
}

/* Re-points cl at the current URL when it moved. 0 or -1. */
static int bc_client_sync(hx_client_t *cl)
{
    char u[HX_URL_MAX];
    bc_url(u);
    if (strcmp(cl->base, u) == 0)
        return 0;
    hx_client_cleanup(cl);
    return hx_client_init(cl, u);
}

static void bc_add_out(bc_job_t *j, const char *key, int n, int elems, double c, int by_index)
{
    bc_out_t *o = &j->out[j->nout++];
    snprintf(o->key, sizeof o->key, "%s", key);
    o->nshards = n;
    o->elems = elems;
    o->c = c;
    o->by_index = by_index;
}

/* produce: shard k makes fill(v)*k and all-reduces: v*n(n-1)/2 everywhere. */
static const char bc_produce[] =
    "{'name':'produce','slice':'a','ops':[{'op':'shard_index','out':'i'},"
    "{'op':'fill','out':'x','shape':[4],'value':%g},{'op':'mul','out':'y','args':['x','i']},"
    "{'op':'all_reduce','out':'z','args':['y'],'reduce':'sum'}],'outputs':['z']}";
static const char bc_consume[] =
    "{'name':'consume','slice':'b','ops':[{'op':'input','out':'z','from':'produce.z'},"
    "{'op':'scale','out':'w','args':['z'],'factor':0.5}],'outputs':['w']}";

/* The first five fit both islands; [4,4] fits west only. */
static const char *const bc_shapes[] = {"[2]", "[4]", "[2,2]", "[1,4]", "[2,4]", "[1,2]", "[4,4]"};
static const int bc_sizes[] = {2, 4, 4, 4, 8, 2, 16};
#define BC_NSHAPES 7

/* Builds job i's document and its expected outputs. 0 or -1 (OOM). */
static int bc_make(bc_job_t *j, int i, unsigned *seed)
{
    char buf[2048], p[512];
    double v = 1.0 + (double)(rand_r(seed) % 5);
    int s = (int)(rand_r(seed) % BC_NSHAPES), n = bc_sizes[s];
    j->kind = (int)(rand_r(seed) % BC_KINDS);
    j->id = -1;
    snprintf(j->key, sizeof j->key, "chaos-%d-%u-%d", (int)getpid(), bc.seed, i);
    snprintf(p, sizeof p, bc_produce, v);
    double red = v * n * (n - 1) / 2;
    switch (j->kind) {
    case 0: /* DESIGN's example: [2,2] on west feeding [2,2] on east */
        snprintf(buf, sizeof buf, "{'name':'design-%d','slices':{'a':{'shape':[2,2],"
                 "'island':'west'},'b':{'shape':[2,2],'island':'east'}},'computations':[%s,%s]}",
                 i, p, bc_consume);
        bc_add_out(j, "produce.z", 4, 4, 6 * v, 0);
        bc_add_out(j, "consume.w", 4, 4, 3 * v, 0);
        break;
    case 1: /* fill + all_reduce on any island */
        snprintf(buf, sizeof buf, "{'name':'reduce-%d','slices':{'a':{'shape':%s}},"
                 "'computations':[%s]}", i, bc_shapes[s], p);
        bc_add_out(j, "produce.z", n, 4, red, 0);
        break;
    case 2: /* one device */
        snprintf(buf, sizeof buf, "{'name':'single-%d','slices':{'a':{'shape':[1]}},"
                 "'computations':[{'name':'one','slice':'a','ops':[{'op':'fill','out':'x',"
                 "'shape':[3],'value':%g},{'op':'scale','out':'y','args':['x'],'factor':2}],"
                 "'outputs':['y']}]}", i, v);
        bc_add_out(j, "one.y", 1, 3, 2 * v, 0);
        break;
    case 3: { /* cross-island edge, producer on east or west, 8 devices at most */
        if (s > 4) {    /* keep the pair within 8 devices */
            s = 4;
            n = bc_sizes[s];
            red = v * n * (n - 1) / 2;
        }
        int east_first = (int)(rand_r(seed) % 2);
        snprintf(buf, sizeof buf, "{'name':'edge-%d','slices':{'a':{'shape':%s,'island':'%s'},"
                 "'b':{'shape':%s,'island':'%s'}},'computations':[%s,%s]}", i, bc_shapes[s],
                 east_first ? "east" : "west", bc_shapes[s], east_first ? "west" : "east", p,
                 bc_consume);
        bc_add_out(j, "produce.z", n, 4, red, 0);
        bc_add_out(j, "consume.w", n, 4, red * 0.5, 0);
        break;
    }
    case 5: /* a chain on one slice (a run of host tasks, schema/032): produce, then
             * three steps doubling it, the first one busy for 20 ms */
        snprintf(buf, sizeof buf, "{'name':'chain-%d','slices':{'a':{'shape':%s}},"
                 "'computations':[%s"
                 ",{'name':'s1','slice':'a','ops':[{'op':'input','out':'p','from':'produce.z'},"
                 "{'op':'compute','out':'b','us':20000},{'op':'scale','out':'w','args':['p'],"
                 "'factor':2}],'outputs':['w']}"
                 ",{'name':'s2','slice':'a','ops':[{'op':'input','out':'p','from':'s1.w'},"
                 "{'op':'scale','out':'w','args':['p'],'factor':2}],'outputs':['w']}"
                 ",{'name':'s3','slice':'a','ops':[{'op':'input','out':'p','from':'s2.w'},"
                 "{'op':'scale','out':'w','args':['p'],'factor':2}],'outputs':['w']}]}",
                 i, bc_shapes[s], p);
        bc_add_out(j, "produce.z", n, 4, red, 0);
        bc_add_out(j, "s1.w", n, 4, 2 * red, 0);
        bc_add_out(j, "s2.w", n, 4, 4 * red, 0);
        bc_add_out(j, "s3.w", n, 4, 8 * red, 0);
        break;
    default: /* a device-busy computation, then the shard index */
        snprintf(buf, sizeof buf, "{'name':'busy-%d','slices':{'a':{'shape':%s}},"
                 "'computations':[{'name':'busy','slice':'a','ops':[{'op':'compute','out':'b',"
                 "'us':%d},{'op':'shard_index','out':'i'}],'outputs':['i']}]}", i, bc_shapes[s],
                 20000 + (int)(rand_r(seed) % 5) * 40000);
        bc_add_out(j, "busy.i", n, 1, 0, 1);
        break;
    }
    j->doc = hx_text_q(buf);
    return j->doc ? 0 : -1;
}

/* ---- driver: submits with a window, retrying with the same key ---- */

static void *bc_driver(void *arg)
{
    (void)arg;
    for (int i = 0; i < bc.njobs && !atomic_load(&bc.stop); i++) {
        bc_job_t *j = &bc.jobs[i];
        while (i - atomic_load(&bc.nterminal) >= bc.window && !atomic_load(&bc.stop))
            hx_sleep_ms(20);
        for (;;) {
            char u[HX_URL_MAX];
            int64_t id = -1;
            bc_url(u);
            j->submits++;
            int st = fx_submit(u, j->doc, j->key, &id);
            if ((st == 201 || st == 200) && id > 0) {
                j->id_changed |= j->id > 0 && j->id != id;
                j->id = id;
                j->created += st == 201;
                break;
            }
            if ((st > 0 && st < 500) || atomic_load(&bc.stop)) {
                fprintf(stderr, "chaos: job %d (%s) submit answered %d: %s\n", i, j->key, st,
                        j->doc);
                atomic_store(&bc.driver_failed, 1);
                atomic_store(&bc.driver_done, 1);
                return NULL;
            }
            atomic_fetch_add(&bc.resubmits, 1);
            hx_sleep_ms(100);
        }
        atomic_fetch_add(&bc.accepted, 1);
    }
    atomic_store(&bc.driver_done, 1);
    return NULL;
}

/* ---- watcher: marks accepted jobs terminal, prints progress ---- */

static void bc_progress(int done)
{
    printf("progress: %d/%d jobs terminal, %.1f s, kills: %d worker %d controller\n", done,
           bc.njobs, (double)(hx_now_ms() - bc.t0) / 1000.0, atomic_load(&bc.kills_worker),
           atomic_load(&bc.kills_controller));
    fflush(stdout);
}

static void *bc_watcher(void *arg)
{
    (void)arg;
    hx_client_t cl;
    char u[HX_URL_MAX];
    bc_url(u);
    if (hx_client_init(&cl, u) != 0)
        return NULL;
    int from = 0;   /* jobs below are all terminal */
    while (!atomic_load(&bc.stop) && atomic_load(&bc.nterminal) < bc.njobs) {
        int acc = atomic_load(&bc.accepted);
        if (bc_client_sync(&cl) != 0)
            break;
        for (int i = from; i < acc && !atomic_load(&bc.stop); i++) {
            bc_job_t *j = &bc.jobs[i];
            if (atomic_load(&j->terminal))
                continue;
            json_t *job = hx_job_get(&cl, j->id);
            if (job && hx_state_terminal(hx_job_state(job))) {
                atomic_store(&j->terminal, 1);
                int done = atomic_fetch_add(&bc.nterminal, 1) + 1;
                if (done % 100 == 0 || done == bc.njobs)
                    bc_progress(done);
            }
            json_decref(job);
        }
        while (from < acc && atomic_load(&bc.jobs[from].terminal))
            from++;
        hx_sleep_ms(100);
    }
    hx_client_cleanup(&cl);
    return NULL;
}

/* ---- processes (main thread only) ---- */

static int bc_atolld_start(void)
{
    static const char *const islands[] = {"west=4x4", "east=2x4"};
    char url[HX_URL_MAX];
    /* After kill -9 the old socket may linger: retry the same port for
     * 10 s, then take any port (clients follow bc.url). */
    for (int tries = 0; tries < 45; tries++) {
        int port = 0, want = tries < 40 ? bc.port : 0;
        if (fx_atolld_start(&bc.atolld, bc.dir, "atolld", want, bc.lease_ms, islands, 2, url,
                            sizeof url, &port) == 0) {
            if (bc.port && port != bc.port)
                fprintf(stderr, "chaos: atolld moved from port %d to %d\n", bc.port, port);
            bc.port = port;
            pthread_mutex_lock(&bc.url_mu);
            snprintf(bc.url, sizeof bc.url, "%s", url);
            pthread_mutex_unlock(&bc.url_mu);
            return 0;
        }
        hx_sleep_ms(250);
    }
    return -1;
}

static int bc_worker_start(int slot)
{
    char name[32], url[HX_URL_MAX];
    const char *island = slot < BC_WEST_WORKERS ? "west" : "east";
    snprintf(name, sizeof name, "worker-%d", bc.nstarted++);
    bc_url(url);
    /* A replacement needs its predecessor's block free again: a few
     * leases; a worker that never got ready is killed and tried again. */
    for (int tries = 0; tries < 3; tries++) {
        if (fx_worker_start(&bc.workers[slot], bc.dir, name, url, island, 4, 30000) == 0)
            return 0;
        fx_kill(&bc.workers[slot]);
    }
    return -1;
}

/* The live worker id of pid per GET /v1/workers: > 0, 0 when not listed
 * live, -1 when the controller did not answer. */
static int64_t bc_live_id(hx_client_t *cl, pid_t pid, int64_t want_id)
{
    hx_resp_t r;
    if (bc_client_sync(cl) != 0 || hx_request(cl, "GET", "/v1/workers", NULL, 0, &r) != 0)
        return -1;
    int64_t id = r.status == 200 ? 0 : -1;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(r.json, "workers"), i, v) {
        const char *state = json_string_value(json_object_get(v, "state"));
        int64_t wid = json_integer_value(json_object_get(v, "id"));
        if (!state || strcmp(state, "live") != 0)
            continue;
        if ((want_id > 0 && wid == want_id) ||
            (want_id <= 0 && json_integer_value(json_object_get(v, "pid")) == pid))
            id = wid;
    }
    hx_resp_clear(&r);
    return id;
}

/* kill -9 of the worker in `slot`, timing until the controller stops
 * listing it live, then a replacement. 0 or -1 (could not restart). */
static int bc_kill_worker(hx_client_t *cl, int slot)
{
    hx_proc_t *w = &bc.workers[slot];
    int64_t id = bc_live_id(cl, w->pid, 0);
    int64_t t_kill = hx_now_ms();
    fx_kill(w);
    atomic_fetch_add(&bc.kills_worker, 1);
    if (id > 0) {
        int64_t until = t_kill + 30000, seen = -1;
        while (hx_now_ms() < until) {
            int64_t now_id = bc_live_id(cl, 0, id);
            if (now_id == 0) {
                seen = hx_now_ms();
                break;
            }
            hx_sleep_ms(BC_DETECT_POLL_MS);
        }
        if (seen < 0) {
            fprintf(stderr, "chaos: worker %" PRId64 " still live 30 s after kill -9\n", id);
            bc.undetected++;
        } else if (bc.ndetect < BC_MAX_DETECT) {
            bc.detect_ms[bc.ndetect++] = (int)(seen - t_kill);
        }
    }
    return bc_worker_start(slot);
}

/* After a restart, the last few accepted keys are POSTed again: each must
 * answer 200 with the job it made (the driver rarely has a POST in flight
 * at the kill, so this exercises the retry-with-the-same-key path). */
static void bc_replay_keys(void)
{
    char u[HX_URL_MAX];
    bc_url(u);
    int acc = atomic_load(&bc.accepted);
    for (int i = acc - 1; i >= 0 && i >= acc - 5; i--) {
        const bc_job_t *j = &bc.jobs[i];
        int64_t id = -1;
        int st = fx_submit(u, j->doc, j->key, &id);
        bc.replays++;
        if (st != 200 || id != j->id) {
            fprintf(stderr, "chaos: replay of key %s answered %d id %" PRId64 " (job %" PRId64
                    ")\n", j->key, st, id, j->id);
            bc.replay_bad++;
        }
    }
}

static int bc_kill_controller(unsigned *seed)
{
    fx_kill(&bc.atolld);
    atomic_fetch_add(&bc.kills_controller, 1);
    hx_sleep_ms(50 + (int)(rand_r(seed) % 1000));
    if (bc_atolld_start() != 0)
        return -1;
    bc_replay_keys();
    return 0;
}

/* ---- verification ---- */

typedef struct bc_tally {
    int succeeded, failed, cancelled, lost, unsubmitted, twice, wrong, dup_jobs;
    int restarts, retries;
    char err_text[16][160];
    int err_count[16];
    int nerr;
} bc_tally_t;

/* Counts a failure reason, digits folded to '#' so per-job ids group. */
static void bc_note_error(bc_tally_t *t, const char *err)
{
    char norm[160];
    size_t o = 0;
    for (const char *p = err ? err : "(none)"; *p && o + 1 < sizeof norm; p++) {
        if (*p >= '0' && *p <= '9') {
            if (o == 0 || norm[o - 1] != '#')
                norm[o++] = '#';
        } else {
            norm[o++] = *p;
        }
    }
    norm[o] = '\0';
    for (int k = 0; k < t->nerr; k++)
        if (strcmp(t->err_text[k], norm) == 0) {
            t->err_count[k]++;
            return;
        }
    if (t->nerr < 16) {
        snprintf(t->err_text[t->nerr], sizeof t->err_text[0], "%s", norm);
        t->err_count[t->nerr++] = 1;
    }
}

/* Progress counts never above the shard count; when succeeded, exactly
 * all shards done and reported once. 0 ok, 1 counted twice. */
static int bc_check_progress(const bc_job_t *j, const json_t *job, int succeeded)
{
    size_t i;
    json_t *c;
    int ncomp = 0;
    json_array_foreach(json_object_get(job, "computations"), i, c) {
        json_int_t total = json_integer_value(json_object_get(c, "shards_total"));
        json_int_t done = json_integer_value(json_object_get(c, "shards_done"));
        json_int_t rep = json_integer_value(json_object_get(c, "shards_reported"));
        ncomp++;
        if (done > total || rep > total || (succeeded && (done != total || rep != total))) {
            fprintf(stderr, "chaos: job %" PRId64 " computation %zu: total %lld done %lld"
                    " reported %lld\n", j->id, i, (long long)total, (long long)done,
                    (long long)rep);
            return 1;
        }
    }
    if (succeeded && ncomp != j->nout) {
        fprintf(stderr, "chaos: job %" PRId64 " has %d computations, expected %d\n", j->id,
                ncomp, j->nout);
        return 1;
    }
    return 0;
}

/* One output of a succeeded job: 0 ok, 1 wrong values, 2 a shard missing
 * or present twice. */
static int bc_check_output(const bc_job_t *j, const bc_out_t *o, const json_t *res)
{
    json_t *arr = json_object_get(json_object_get(res, "outputs"), o->key);
    if (json_array_size(arr) != (size_t)o->nshards) {
        fprintf(stderr, "chaos: job %" PRId64 " %s has %zu shards, expected %d\n", j->id,
                o->key, json_array_size(arr), o->nshards);
        return 2;
    }
    for (int k = 0; k < o->nshards; k++) {
        json_t *sh = json_array_get(arr, (size_t)k);
        if (json_integer_value(json_object_get(sh, "shard")) != k) {
            fprintf(stderr, "chaos: job %" PRId64 " %s entry %d is shard %lld\n", j->id,
                    o->key, k, (long long)json_integer_value(json_object_get(sh, "shard")));
            return 2;
        }
        double want = o->by_index ? (double)k : o->c;
        json_t *vals = json_object_get(sh, "values");
        size_t m;
        json_t *v;
        int bad = json_array_size(vals) != (size_t)o->elems ||
                  json_number_value(json_object_get(sh, "sum")) != want * o->elems;
        json_array_foreach(vals, m, v)
            bad |= !json_is_number(v) || json_number_value(v) != want;  /* exact */
        if (bad) {
            char *txt = json_dumps(sh, JSON_COMPACT);
            fprintf(stderr, "chaos: job %" PRId64 " (%s) %s shard %d is %s, expected %g x %d\n",
                    j->id, bc_kind_names[j->kind], o->key, k, txt ? txt : "?", want, o->elems);
            free(txt);
            return 1;
        }
    }
    return 0;
}

static void bc_check_job(hx_client_t *cl, const bc_job_t *j, bc_tally_t *t)
{
    if (j->created > 1 || j->id_changed) {
        fprintf(stderr, "chaos: key %s: %d jobs created, id changed %d\n", j->key, j->created,
                j->id_changed);
        t->dup_jobs++;
    }
    json_t *job = NULL;
    if (j->id <= 0) {
        t->unsubmitted++;   /* the driver stopped before it */
        return;
    }
    if (hx_job_wait(cl, j->id, 5000, 100, &job) != 0) {
        fprintf(stderr, "chaos: job %" PRId64 " (%s) not terminal: %s\n", j->id, j->key,
                job ? hx_job_state(job) : "(missing)");
        t->lost++;
        json_decref(job);
        return;
    }
    const char *st = hx_job_state(job);
    int ok = strcmp(st, "succeeded") == 0;
    t->restarts += (int)json_integer_value(json_object_get(job, "restarts"));
    t->retries += (int)json_integer_value(json_object_get(job, "retries"));
    int twice = bc_check_progress(j, job, ok), wrong = 0;
    if (ok) {
        json_t *res = hx_job_result(cl, j->id);
        for (int q = 0; q < j->nout && res; q++) {
            int rc = bc_check_output(j, &j->out[q], res);
            wrong |= rc == 1;
            twice |= rc == 2;
        }
        wrong |= res == NULL;
        json_decref(res);
        t->succeeded += !wrong && !twice;
    } else if (strcmp(st, "failed") == 0) {
        t->failed++;
        bc_note_error(t, json_string_value(json_object_get(job, "error")));
    } else {
        t->cancelled++;     /* nobody cancels: counted as lost below */
        t->lost++;
    }
    t->twice += twice;
    t->wrong += wrong;
    json_decref(job);
}

/* Jobs the cluster holds (all pages of GET /v1/jobs), or -1. */
static int bc_count_jobs(hx_client_t *cl)
{
    int n = 0;
    int64_t before = 0;
    for (;;) {
        char path[96] = "/v1/jobs?limit=500";
        if (before)
            snprintf(path, sizeof path, "/v1/jobs?limit=500&before=%" PRId64, before);
        hx_resp_t r;
        if (hx_request(cl, "GET", path, NULL, 0, &r) != 0 || r.status != 200) {
            hx_resp_clear(&r);      /* hx_request zeroes r first */
            return -1;
        }
        n += (int)json_array_size(json_object_get(r.json, "jobs"));
        json_t *next = json_object_get(r.json, "next_before");
        before = json_is_integer(next) ? json_integer_value(next) : 0;
        hx_resp_clear(&r);
        if (!before)
            return n;
    }
}

static int bc_cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* ---- main ---- */

static int bc_parse(int argc, char **argv)
{
    bc.njobs = 1000;
    bc.window = 48;
    bc.lease_ms = 2000;
    bc.seed = (unsigned)time(NULL);
    for (int i = 1; i < argc; i += 2) {       /* options come as pairs */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "usage: %s [--jobs N] [--seed S] [--lease-ms MS] [--window W]\n",
                    argv[0]);
            return -1;
        }
        if (strcmp(a, "--jobs") == 0)
            bc.njobs = atoi(v);
        else if (strcmp(a, "--seed") == 0)
            bc.seed = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--lease-ms") == 0)
            bc.lease_ms = atoi(v);
        else if (strcmp(a, "--window") == 0)
            bc.window = atoi(v);
        else
            v = NULL;
        if (!v) {
            fprintf(stderr, "chaos: unknown option '%s'\n", a);
            return -1;
        }
    }
    if (bc.njobs < 1 || bc.window < 1 || bc.lease_ms < 200) {
        fprintf(stderr, "chaos: --jobs, --window >= 1, --lease-ms >= 200\n");
        return -1;
    }
    return 0;
}

static int bc_setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(bc.dir, sizeof bc.dir, "%s/atoll-chaos-XXXXXX",
             tmp && *tmp && strlen(tmp) < HX_DIR_MAX - 32 ? tmp : "/tmp");
    if (!mkdtemp(bc.dir)) {
        perror("chaos: mkdtemp");
        return -1;
    }
    bc.jobs = calloc((size_t)bc.njobs, sizeof *bc.jobs);
    if (!bc.jobs)
        return -1;
    unsigned seed = bc.seed;
    for (int i = 0; i < bc.njobs; i++)
        if (bc_make(&bc.jobs[i], i, &seed) != 0)
            return -1;
    if (bc_atolld_start() != 0) {
        fprintf(stderr, "chaos: atolld did not start (logs in %s)\n", bc.dir);
        return -1;
    }
    for (int w = 0; w < BC_WORKERS; w++)
        if (bc_worker_start(w) != 0) {
            fprintf(stderr, "chaos: worker %d did not start (logs in %s)\n", w, bc.dir);
            return -1;
        }
    return 0;
}

/* Kills at random moments until every job is terminal. 0, or -1 when a
 * process could not be restarted. */
static int bc_chaos(unsigned *seed)
{
    hx_client_t cl;
    char u[HX_URL_MAX];
    bc_url(u);
    if (hx_client_init(&cl, u) != 0)
        return -1;
    int rc = 0;
    int64_t cap = hx_now_ms() + BC_FINISH_CAP_MS;
    while (atomic_load(&bc.nterminal) < bc.njobs && !atomic_load(&bc.driver_failed) &&
           hx_now_ms() < cap) {
        int64_t until = hx_now_ms() + 1000 + (int)(rand_r(seed) % 3000);
        while (hx_now_ms() < until && atomic_load(&bc.nterminal) < bc.njobs)
            hx_sleep_ms(20);
        if (atomic_load(&bc.nterminal) >= bc.njobs)
            break;
        int r = rand_r(seed) % 4 == 0 ? bc_kill_controller(seed)
                                       : bc_kill_worker(&cl, (int)(rand_r(seed) % BC_WORKERS));
        if (r != 0) {
            fprintf(stderr, "chaos: a process could not be restarted (logs in %s)\n", bc.dir);
            rc = -1;
            break;
        }
    }
    hx_client_cleanup(&cl);
    return rc;
}

static void bc_print_detect(void)
{
    if (bc.ndetect == 0) {
        printf("| worker-loss detection       | no samples |\n");
        return;
    }
    qsort(bc.detect_ms, (size_t)bc.ndetect, sizeof bc.detect_ms[0], bc_cmp_int);
    printf("| worker-loss detection (ms)  | min %d  median %d  max %d  (n=%d, lease %d ms,"
           " goal <= 5000) |\n", bc.detect_ms[0], bc.detect_ms[bc.ndetect / 2],
           bc.detect_ms[bc.ndetect - 1], bc.ndetect, bc.lease_ms);
}

static void bc_report(const bc_tally_t *t, int held, int second_key_ok, int clean)
{
    double wall = (double)(hx_now_ms() - bc.t0) / 1000.0;
    int sent = 0;
    for (int i = 0; i < bc.njobs; i++)
        sent += bc.jobs[i].submits;
    printf("\n| chaos run (seed %u)         | value |\n|---|---|\n", bc.seed);
    printf("| jobs submitted (keys)       | %d |\n", bc.njobs);
    printf("| POSTs sent / retried        | %d / %d |\n", sent, atomic_load(&bc.resubmits));
    printf("| jobs held by the cluster    | %d |\n", held);
    printf("| kill -9 worker / controller | %d / %d |\n", atomic_load(&bc.kills_worker),
           atomic_load(&bc.kills_controller));
    printf("| succeeded                   | %d |\n", t->succeeded);
    printf("| failed                      | %d |\n", t->failed);
    printf("| jobs lost                   | %d |\n", t->lost);
    if (t->unsubmitted)
        printf("| never accepted (driver stop)| %d |\n", t->unsubmitted);
    printf("| jobs created twice          | %d |\n", t->dup_jobs);
    printf("| shards counted twice        | %d |\n", t->twice);
    printf("| wrong results               | %d |\n", t->wrong);
    printf("| retries / restarts (sum)    | %d / %d |\n", t->retries, t->restarts);
    printf("| keys replayed after restart | %d (wrong answers %d) |\n", bc.replays, bc.replay_bad);
    printf("| late resubmit -> same job   | %s |\n", second_key_ok ? "yes" : "NO");
    printf("| clean SIGTERM exit at end   | %s |\n", clean ? "yes" : "NO");
    bc_print_detect();
    if (bc.undetected)
        printf("| workers never detected lost | %d |\n", bc.undetected);
    printf("| wall time                   | %.1f s |\n", wall);
    for (int k = 0; k < t->nerr; k++)
        printf("failed x%d: %s\n", t->err_count[k], t->err_text[k]);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (bc_parse(argc, argv) != 0)
        return 2;
    if (hx_init() != 0)
        return 1;
    pthread_mutex_init(&bc.url_mu, NULL);
    printf("chaos: %d jobs, seed %u, lease %d ms, window %d\n", bc.njobs, bc.seed, bc.lease_ms,
           bc.window);
    fflush(stdout);
    if (bc_setup() != 0)
        return 1;
    printf("chaos: cluster up in %s (%s)\n", bc.dir, bc.url);
    fflush(stdout);
    unsigned seed = bc.seed ^ 0x9e3779b9u;
    bc.t0 = hx_now_ms();
    pthread_t driver, watcher;
    if (pthread_create(&driver, NULL, bc_driver, NULL) != 0 ||
        pthread_create(&watcher, NULL, bc_watcher, NULL) != 0)
        return 1;
    int broken = bc_chaos(&seed);
    atomic_store(&bc.stop, 1);
    pthread_join(driver, NULL);
    pthread_join(watcher, NULL);

    bc_tally_t t;
    memset(&t, 0, sizeof t);
    hx_client_t cl;
    char u[HX_URL_MAX];
    bc_url(u);
    if (hx_client_init(&cl, u) != 0)
        return 1;
    for (int i = 0; i < bc.njobs; i++)
        bc_check_job(&cl, &bc.jobs[i], &t);
    int held = bc_count_jobs(&cl);
    if (held != bc.njobs)
        t.dup_jobs += held > bc.njobs ? held - bc.njobs : 0;
    int64_t again = -1;
    int st = fx_submit(u, bc.jobs[0].doc, bc.jobs[0].key, &again);
    int second_ok = st == 200 && again == bc.jobs[0].id;
    hx_client_cleanup(&cl);

    int clean = 1;
    for (int w = 0; w < BC_WORKERS; w++)
        clean &= fx_term(&bc.workers[w], 8000);
    clean &= fx_term(&bc.atolld, 8000);
    bc_report(&t, held, second_ok, clean);
    int ok = !broken && !atomic_load(&bc.driver_failed) && t.lost == 0 && t.twice == 0 &&
             t.wrong == 0 && t.dup_jobs == 0 && t.unsubmitted == 0 && held == bc.njobs && second_ok &&
             bc.replay_bad == 0;
    if (ok) {
        char cmd[HX_DIR_MAX + 16];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", bc.dir);
        if (system(cmd) != 0)
            fprintf(stderr, "chaos: could not remove %s\n", bc.dir);
    } else {
        printf("chaos: FAILED; logs kept in %s\n", bc.dir);
    }
    for (int i = 0; i < bc.njobs; i++)
        free(bc.jobs[i].doc);
    free(bc.jobs);
    return ok ? 0 : 1;
}
