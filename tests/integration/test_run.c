/* test_run.c - users' own programs on a slice (DESIGN.md Part F), on a real
 * atolld --allow-run and two real workers (west=2x4, 4 devices each) that
 * run real processes: a PyTorch DistributedDataParallel step with gloo
 * over 8 processes whose gradients equal a single-process computation; a
 * plain-socket program (no MPI) exchanging ranks through MASTER_ADDR/PORT;
 * dataflow ops -> run -> ops through .npy files; the Part F environment;
 * logs (plain and follow); a failing rank; timeout; cancel; a worker
 * SIGKILLed while its gang runs; atolld SIGKILLed and restarted while a
 * gang runs (output and exit statuses of both attempts survive);
 * per-host processes; the limits; and a controller without --allow-run.
 *
 * "Nothing left behind" is checked by scanning /proc for any process whose
 * environment holds the job's ATOLL_JOB_ID. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <unistd.h>

#include "itest.h"
#include "support_faults.h"

#define PY "/usr/bin/python3"
#define RUN_TIMEOUT_MS 120000

/* Waits until no process of the job is left; fails after 15 s. */
static void expect_no_processes(int64_t id)
{
    int64_t end = hx_now_ms() + 15000;
    int left;
    while ((left = hx_job_processes(id)) > 0 && hx_now_ms() < end)
        hx_sleep_ms(20);
    T_CHECK(left == 0, "%d process(es) of job %lld outlived it", left, (long long)id);
}

/* Waits until `n` processes of the job run (its /processes). */
static void wait_running(int64_t id, int n)
{
    char path[96];
    int64_t end = hx_now_ms() + RUN_TIMEOUT_MS;
    int running = 0;
    snprintf(path, sizeof path, "/v1/jobs/%lld/processes", (long long)id);
    while (hx_now_ms() < end) {
        hx_resp_t r;
        running = 0;
        if (hx_request(&itest_client, "GET", path, NULL, 0, &r) == 0) {
            json_t *ps = json_object_get(r.json, "processes");
            for (size_t i = 0; i < json_array_size(ps); i++)
                running += strcmp(json_string_value(json_object_get(json_array_get(ps, i),
                                                                    "state")), "running") == 0;
            hx_resp_clear(&r);
        }
        if (running >= n && hx_job_processes(id) >= n)
            return;
        hx_sleep_ms(20);
    }
    T_CHECK(0, "job %lld: %d of %d processes running", (long long)id, running, n);
}

/* Submits doc (taken); fails unless 201. */
static int64_t submit_json(json_t *doc)
{
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    T_CHECK(text != NULL, "out of memory");
    int64_t id = -1;
    int st = hx_job_submit(&itest_client, text, &id, NULL);
    free(text);
    T_CHECK(st == 201, "submit returned %d", st);
    return id;
}

/* doc.computations[c].run.files[name] = text. Returns doc. */
static json_t *with_file(json_t *doc, int c, const char *name, const char *text)
{
    json_t *run = json_object_get(json_array_get(json_object_get(doc, "computations"),
                                                 (size_t)c), "run");
    json_t *files = json_object_get(run, "files");
    if (!files) {
        files = json_object();
        json_object_set_new(run, "files", files);
    }
    json_object_set_new(files, name, json_string(text));
    return doc;
}

static json_t *wait_done(int64_t id, int timeout_ms, const char *want)
{
    json_t *job = NULL;
    int rc = hx_job_wait(&itest_client, id, timeout_ms, ITEST_POLL_MS, &job);
    char st[32];
    snprintf(st, sizeof st, "%s", job ? hx_job_state(job) : "?");
    if (rc != 0 || strcmp(st, want) != 0) {
        const char *e = json_string_value(json_object_get(job, "error"));
        char err[600];
        snprintf(err, sizeof err, "%s", e ? e : "none");
        json_decref(job);
        T_CHECK(0, "job %lld ended %s (want %s), error: %s", (long long)id, st, want, err);
    }
    return job;
}

static char *get_text(const char *path, long *status)
{
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "GET", path, NULL, 0, &r) == 0, "GET %s failed", path);
    char *body = strdup(r.body ? r.body : "");
    *status = r.status;
    hx_resp_clear(&r);
    return body;
}

/* ops -> run (8 processes, per device) -> ops: each process checks its
 * Part F environment, reads its shard of p.x and writes y = 10 x + RANK;
 * c sums y over the slice. */
static const char dataflow_py[] =
    "import os, sys, numpy as np\n"
    "e = os.environ\n"
    "rank, world = int(e[\"RANK\"]), int(e[\"WORLD_SIZE\"])\n"
    "assert world == 8 and e[\"JAX_NUM_PROCESSES\"] == \"8\" and e[\"JAX_PROCESS_ID\"] == str(rank)\n"
    "assert e[\"LOCAL_WORLD_SIZE\"] == \"4\" and 0 <= int(e[\"LOCAL_RANK\"]) < 4\n"
    "assert e[\"JAX_COORDINATOR_ADDRESS\"] == e[\"MASTER_ADDR\"] + \":\" + e[\"MASTER_PORT\"]\n"
    "assert e[\"ATOLL_SLICE_SHAPE\"] == \"2x4\" and e[\"ATOLL_COMPUTATION\"] == \"r\"\n"
    "assert e[\"ATOLL_DEVICES\"] == \"%d,%d\" % (rank // 4, rank % 4), e[\"ATOLL_DEVICES\"]\n"
    "assert e[\"GREETING\"] == \"hi\" and os.path.exists(\"extra.txt\")\n"
    "x = np.load(e[\"ATOLL_INPUT_DIR\"] + \"/x.npy\")\n"
    "assert x.shape == (3,) and x.dtype == np.float32 and (x == rank).all()\n"
    "print(\"rank\", rank, \"of\", world, \"ok\")\n"
    "print(\"to stderr\", rank, file=sys.stderr)\n"
    "np.save(e[\"ATOLL_OUTPUT_DIR\"] + \"/y.npy\", (10 * x + rank).astype(np.float64))\n";

static void test_dataflow_env_logs(void **state)
{
    (void)state;
    json_t *doc = hx_json_q(
        "{'slices':{'s':{'shape':[2,4]}},'computations':["
        "{'name':'p','slice':'s','ops':[{'op':'shard_index','out':'i'},"
        "{'op':'fill','out':'o','shape':[3],'value':1},{'op':'mul','args':['o','i'],'out':'x'}],"
        "'outputs':['x']},"
        "{'name':'r','slice':'s','inputs':{'x':'p.x'},'outputs':['y'],"
        "'run':{'command':['" PY "','main.py'],'env':{'GREETING':'hi'},'shapes':{'y':[3]}}},"
        "{'name':'c','slice':'s','ops':[{'op':'input','from':'r.y','out':'y'},"
        "{'op':'all_reduce','args':['y'],'reduce':'sum','out':'z'}],'outputs':['z']}]}");
    doc = with_file(with_file(doc, 1, "main.py", dataflow_py), 1, "extra.txt", "x");
    int64_t id = submit_json(doc);
    json_decref(wait_done(id, RUN_TIMEOUT_MS, "succeeded"));
    json_t *res = hx_job_result(&itest_client, id);
    /* sum over k of (10 k + k) = 11 * 28 = 308 per element */
    for (int k = 0; k < 8; k++) {
        json_t *y = hx_result_shard(res, "r.y", k), *z = hx_result_shard(res, "c.z", k);
        double ys = json_number_value(json_object_get(y, "sum"));
        double zs = json_number_value(json_object_get(z, "sum"));
        int ok = fabs(ys - 3 * 11.0 * k) < 1e-6 && fabs(zs - 3 * 308.0) < 1e-3;
        if (!ok)
            json_decref(res);
        T_CHECK(ok, "shard %d: r.y sum %g (want %g), c.z sum %g (want %g)", k, ys, 33.0 * k,
                zs, 924.0);
    }
    json_decref(res);
    long st;
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%lld/logs?computation=r&process=5", (long long)id);
    char *log = get_text(path, &st);
    int ok = st == 200 && strstr(log, "rank 5 of 8 ok") && strstr(log, "to stderr 5");
    char shown[300];
    snprintf(shown, sizeof shown, "%s", log);
    free(log);
    T_CHECK(ok, "logs of process 5 lack its stdout/stderr (status %ld): '%s'", st, shown);
    snprintf(path, sizeof path, "/v1/jobs/%lld/processes", (long long)id);
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "GET", path, NULL, 0, &r) == 0, "GET processes");
    json_t *ps = json_object_get(r.json, "processes");
    int exited = 0, workers = 0;
    int64_t w0 = -1;
    for (size_t i = 0; i < json_array_size(ps); i++) {
        json_t *p = json_array_get(ps, i);
        const char *cn = json_string_value(json_object_get(p, "computation"));
        exited += strcmp(json_string_value(json_object_get(p, "state")), "exited") == 0 &&
                  json_integer_value(json_object_get(p, "exit_code")) == 0 && cn &&
                  strcmp(cn, "r") == 0;
        int64_t w = json_integer_value(json_object_get(p, "worker"));
        workers += w != w0;           /* sorted by process: one run per worker */
        w0 = w;
    }
    hx_resp_clear(&r);
    T_CHECK(exited == 8 && workers == 2, "want 8 processes of 'r' exited 0 on 2 workers, got %d on %d",
            exited, workers);
    expect_no_processes(id);
}

/* A PyTorch DDP training step (gloo, env://) as 8 processes over the two
 * workers: every rank's averaged gradient must equal the gradient of the
 * same model on the whole batch in one process (computed by rank 0 too),
 * and every rank must hold the same gradient. */
static const char ddp_py[] =
    "import os, torch, numpy as np\n"
    "import torch.distributed as dist\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    "dist.init_process_group(\"gloo\", init_method=\"env://\")\n"
    "rank, world = dist.get_rank(), dist.get_world_size()\n"
    "torch.manual_seed(0)\n"
    "model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))\n"
    "ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))\n"
    "ref.load_state_dict(model.state_dict())\n"
    "g = torch.Generator().manual_seed(1)\n"
    "X, Y = torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g)\n"
    "ddp = DDP(model)\n"
    "per = 64 // world\n"
    "xs, ys = X[rank * per:(rank + 1) * per], Y[rank * per:(rank + 1) * per]\n"
    "torch.nn.functional.mse_loss(ddp(xs), ys).backward()\n"
    "torch.nn.functional.mse_loss(ref(X), Y).backward()\n"
    "got = torch.cat([p.grad.flatten() for p in model.parameters()])\n"
    "want = torch.cat([p.grad.flatten() for p in ref.parameters()])\n"
    "diff = (got - want).abs().max().item()\n"
    "print(\"rank\", rank, \"max |ddp - single| =\", diff)\n"
    "np.save(os.environ[\"ATOLL_OUTPUT_DIR\"] + \"/grad.npy\", got.numpy().astype(np.float32))\n"
    "np.save(os.environ[\"ATOLL_OUTPUT_DIR\"] + \"/diff.npy\", np.array([diff], np.float32))\n"
    "dist.destroy_process_group()\n";

static void test_ddp(void **state)
{
    (void)state;
    json_t *doc = hx_json_q(
        "{'slices':{'s':{'shape':[2,4]}},'computations':[{'name':'train','slice':'s',"
        "'outputs':['grad','diff'],'run':{'command':['" PY "','ddp.py'],'timeout_s':300}}]}");
    int64_t id = submit_json(with_file(doc, 0, "ddp.py", ddp_py));
    json_decref(wait_done(id, 300000, "succeeded"));
    json_t *res = hx_job_result(&itest_client, id);
    json_t *g0 = json_object_get(hx_result_shard(res, "train.grad", 0), "values");
    int ok = json_array_size(g0) == 8 * 16 + 16 + 16 + 1;
    for (int k = 0; ok && k < 8; k++) {
        json_t *d = json_object_get(hx_result_shard(res, "train.diff", k), "values");
        json_t *g = json_object_get(hx_result_shard(res, "train.grad", k), "values");
        ok = json_number_value(json_array_get(d, 0)) < 1e-5 && json_equal(g, g0);
    }
    json_decref(res);
    T_CHECK(ok, "DDP gradients differ from the single-process gradient or between ranks");
    expect_no_processes(id);
}

/* Plain sockets, no MPI or torch: rank 0 serves on MASTER_ADDR:MASTER_PORT,
 * every other rank connects (retrying until rank 0 listens) and sends its
 * rank; rank 0 answers everyone with the sum, and each writes it out. */
static const char socket_py[] =
    "import os, socket, time, numpy as np\n"
    "e = os.environ\n"
    "rank, world = int(e['RANK']), int(e['WORLD_SIZE'])\n"
    "addr = (e['MASTER_ADDR'], int(e['MASTER_PORT']))\n"
    "if rank == 0:\n"
    "    srv = socket.create_server(addr)\n"
    "    conns = [srv.accept()[0] for _ in range(world - 1)]\n"
    "    total = sum(int(c.recv(16)) for c in conns)\n"
    "    for c in conns:\n"
    "        c.sendall(str(total).encode())\n"
    "        c.close()\n"
    "else:\n"
    "    deadline = time.time() + 60\n"
    "    while True:\n"
    "        try:\n"
    "            c = socket.create_connection(addr)\n"
    "            break\n"
    "        except OSError:\n"
    "            if time.time() > deadline:\n"
    "                raise\n"
    "            time.sleep(0.01)\n"
    "    c.sendall(str(rank).encode())\n"
    "    total = int(c.recv(16))\n"
    "np.save(e['ATOLL_OUTPUT_DIR'] + '/s.npy', np.array([total], dtype=np.float32))\n";

static void test_plain_sockets(void **state)
{
    (void)state;
    json_t *doc = hx_json_q(
        "{'slices':{'s':{'shape':[2,4]}},'computations':[{'name':'r','slice':'s',"
        "'outputs':['s'],'run':{'command':['" PY "','sock.py'],'shapes':{'s':[1]}}}]}");
    int64_t id = submit_json(with_file(doc, 0, "sock.py", socket_py));
    json_decref(wait_done(id, RUN_TIMEOUT_MS, "succeeded"));
    json_t *res = hx_job_result(&itest_client, id);
    int good = 0;
    for (int k = 0; k < 8; k++)
        good += fabs(json_number_value(json_object_get(hx_result_shard(res, "r.s", k), "sum")) -
                     28.0) < 1e-6;
    json_decref(res);
    T_CHECK(good == 8, "%d of 8 ranks got the sum 0+1+...+7 = 28 over plain sockets", good);
    expect_no_processes(id);
}

static void test_rank_failure(void **state)
{
    (void)state;
    int64_t t0 = hx_now_ms();
    int64_t id = itest_submit(
        "{'max_retries':0,'slices':{'s':{'shape':[2,4]}},'computations':[{'name':'r',"
        "'slice':'s','run':{'command':['/bin/sh','-c','if [ $RANK = 5 ]; then echo first >&2;"
        " echo boom >&2; exit 3; fi; exec sleep 60']}}]}");
    json_t *job = wait_done(id, RUN_TIMEOUT_MS, "failed");
    const char *e = json_string_value(json_object_get(job, "error"));
    int ok = e && strstr(e, "process 5") && strstr(e, "exited with status 3") && strstr(e, "boom");
    char err[600];
    snprintf(err, sizeof err, "%s", e ? e : "(none)");
    json_decref(job);
    T_CHECK(ok, "error should name process 5, its status 3 and its stderr: %s", err);
    expect_no_processes(id);
    T_CHECK(hx_now_ms() - t0 < 30000, "the gang of sleep 60 was not ended early");
}

static void test_timeout(void **state)
{
    (void)state;
    int64_t id = itest_submit(
        "{'max_retries':0,'slices':{'s':{'shape':[1]}},'computations':[{'name':'r',"
        "'slice':'s','run':{'command':['sleep','60'],'timeout_s':1}}]}");
    json_t *job = wait_done(id, RUN_TIMEOUT_MS, "failed");
    const char *e = json_string_value(json_object_get(job, "error"));
    int ok = e && strstr(e, "timed out");
    json_decref(job);
    T_CHECK(ok, "a run past timeout_s should fail as timed out");
    expect_no_processes(id);
}

static void test_cancel(void **state)
{
    (void)state;
    /* sh forks sleep (two commands): a grandchild the group kill must reach. */
    int64_t id = itest_submit(
        "{'slices':{'s':{'shape':[2,4]}},'computations':[{'name':'r','slice':'s',"
        "'run':{'command':['/bin/sh','-c','sleep 60; echo never']}}]}");
    wait_running(id, 8);
    hx_resp_t r;
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld", (long long)id);
    T_CHECK(hx_request(&itest_client, "DELETE", path, NULL, 0, &r) == 0, "DELETE failed");
    hx_resp_clear(&r);
    json_decref(wait_done(id, RUN_TIMEOUT_MS, "cancelled"));
    expect_no_processes(id);
}

/* A worker SIGKILLed while its processes run: they die with it (the
 * shepherds' parent-death signal), the job is retried, and with a new
 * worker in its place attempt 1 succeeds. */
static void test_worker_killed(void **state)
{
    (void)state;
    int64_t id = itest_submit(
        "{'slices':{'s':{'shape':[2,4]}},'computations':[{'name':'r','slice':'s',"
        "'run':{'command':['/bin/sh','-c','if [ $ATOLL_ATTEMPT = 0 ]; then sleep 60; echo x;"
        " fi']}}]}");
    wait_running(id, 8);
    hx_proc_t *w = &itest_cluster.workers[itest_cluster.nworkers - 1];
    kill(w->pid, SIGKILL);
    T_CHECK(hx_worker_stop_last(&itest_cluster, 5000) != -1, "no worker to stop");
    static const char *const wextra[] = {"--run-as", "nobody", NULL};
    T_CHECK(hx_worker_start_args(&itest_cluster, "west", 4, geteuid() == 0 ? wextra : NULL,
                                 15000, 0) == 0, "replacement worker did not start");
    json_t *job = wait_done(id, RUN_TIMEOUT_MS, "succeeded");
    int attempt = (int)json_integer_value(json_object_get(job, "attempt"));
    json_decref(job);
    T_CHECK(attempt >= 1, "the job should have been retried after its worker died");
    expect_no_processes(id);
}

/* per host: one process per worker holding the slice, its shards' inputs
 * and outputs in per-shard directories. */
/* A process that escapes its process group (setsid) and outlives the
 * program is still ended with the job: the shepherd is its subreaper. */
static void test_escapee(void **state)
{
    (void)state;
    json_t *doc = hx_json_q(
        "{'slices':{'s':{'shape':[2]}},'computations':[{'name':'r','slice':'s',"
        "'run':{'command':['/bin/sh','-c','setsid sleep 600 < /dev/null > /dev/null 2>&1 &"
        " echo detached']}}]}");
    int64_t id = submit_json(doc);
    json_decref(wait_done(id, RUN_TIMEOUT_MS, "succeeded"));
    expect_no_processes(id);
}

/* The command's words reach the program as given, KEY=VALUE-looking ones
 * too (only the environment merges such keys). */
static void test_argv_words(void **state)
{
    (void)state;
    json_t *doc = hx_json_q(
        "{'slices':{'s':{'shape':[1]}},'computations':[{'name':'r','slice':'s',"
        "'run':{'command':['/bin/sh','-c','echo \\\"$0 $1 $2\\\"','A=1','A=2','B=3']}}]}");
    int64_t id = submit_json(doc);
    json_decref(wait_done(id, RUN_TIMEOUT_MS, "succeeded"));
    char path[96];
    long st;
    snprintf(path, sizeof path, "/v1/jobs/%lld/logs", (long long)id);
    char *log = get_text(path, &st);
    int ok = st == 200 && strcmp(log, "A=1 A=2 B=3\n") == 0;
    char shown[128];
    snprintf(shown, sizeof shown, "%s", log);
    free(log);
    T_CHECK(ok, "the program saw '%s', want 'A=1 A=2 B=3'", shown);
}

static void test_per_host(void **state)
{
    (void)state;
    int64_t id = itest_submit(
        "{'slices':{'s':{'shape':[2,4]}},'computations':["
        "{'name':'p','slice':'s','ops':[{'op':'shard_index','out':'x'}],'outputs':['x']},"
        "{'name':'r','slice':'s','inputs':{'x':'p.x'},'outputs':['y'],'run':{'per':'host',"
        "'command':['/bin/sh','-c','test $WORLD_SIZE = 2 && test $LOCAL_WORLD_SIZE = 1 &&"
        " IFS=,; for k in $ATOLL_SHARDS; do"
        " cp $ATOLL_INPUT_DIR/$k/x.npy $ATOLL_OUTPUT_DIR/$k/y.npy || exit 1; done']}}]}");
    json_decref(wait_done(id, RUN_TIMEOUT_MS, "succeeded"));
    json_t *res = hx_job_result(&itest_client, id);
    int ok = 1;
    for (int k = 0; k < 8; k++)
        ok &= json_number_value(json_object_get(hx_result_shard(res, "r.y", k), "sum")) == k;
    json_decref(res);
    T_CHECK(ok, "per-host processes should pass each shard through");
}

static void test_logs_follow(void **state)
{
    (void)state;
    int64_t id = itest_submit(
        "{'slices':{'s':{'shape':[1]}},'computations':[{'name':'r','slice':'s',"
        "'run':{'command':['/bin/sh','-c','for i in 1 2 3; do echo line$i; sleep 0.3; done']}}]}");
    wait_running(id, 1);
    char path[128];
    long st;
    snprintf(path, sizeof path, "/v1/jobs/%lld/logs?follow=1", (long long)id);
    char *log = get_text(path, &st);     /* returns once the process ended */
    int ok = st == 200 && strstr(log, "line1\nline2\nline3\n");
    free(log);
    T_CHECK(ok, "follow should stream every line and end with the process");
    json_decref(wait_done(id, RUN_TIMEOUT_MS, "succeeded"));
}

static void test_refusals(void **state)
{
    (void)state;
    itest_submit_bad("{'slices':{'s':{'shape':[1]}},'computations':[{'name':'r','slice':'s',"
                     "'run':{'command':['true'],'env':{'RANK':'3'}}}]}",
                     "computations[0].run.env.RANK");
    itest_submit_bad("{'slices':{'s':{'shape':[1]}},'computations':[{'name':'r','slice':'s',"
                     "'run':{'command':[]}}]}", "computations[0].run.command");
    itest_submit_bad("{'slices':{'s':{'shape':[1]}},'computations':[{'name':'r','slice':'s',"
                     "'run':{'command':['true'],'files':{'../x':'a'}}}]}",
                     "computations[0].run.files.../x");
    itest_submit_bad("{'slices':{'s':{'shape':[1]}},'computations':[{'name':'r','slice':'s',"
                     "'run':{'command':['true'],'colour':'red'}}]}",
                     "computations[0].run.colour");
    itest_submit_bad("{'slices':{'s':{'shape':[1]}},'computations':[{'name':'r','slice':'s',"
                     "'ops':[{'op':'shard_index','out':'i'}],'run':{'command':['true']}}]}",
                     "computations[0].run");
    itest_submit_bad("{'slices':{'s':{'shape':[1]}},'computations':[{'name':'r','slice':'s',"
                     "'outputs':['y'],'run':{'command':['true']}},{'name':'c','slice':'s',"
                     "'ops':[{'op':'input','from':'r.y','out':'y'}]}]}",
                     "computations[1].ops[0].from");
    itest_submit_bad("{'slices':{'s':{'shape':[1]}},'computations':[{'name':'r','slice':'s',"
                     "'inputs':{'x':'nope.z'},'run':{'command':['true']}}]}",
                     "computations[0].inputs.x");
    /* files: 256 KiB in all */
    json_t *doc = hx_json_q("{'slices':{'s':{'shape':[1]}},'computations':[{'name':'r',"
                            "'slice':'s','run':{'command':['true']}}]}");
    char *big = malloc(200 * 1024 + 1);
    T_CHECK(big != NULL, "out of memory");
    memset(big, 'a', 200 * 1024);
    big[200 * 1024] = '\0';
    doc = with_file(with_file(doc, 0, "a", big), 0, "b", big);
    free(big);
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    hx_resp_t r;
    T_CHECK(text && hx_request(&itest_client, "POST", "/v1/jobs", text, strlen(text), &r) == 0,
            "POST failed");
    free(text);
    const char *f = json_string_value(json_object_get(r.json, "field"));
    int ok = r.status == 400 && f && strcmp(f, "computations[0].run.files.b") == 0;
    hx_resp_clear(&r);
    T_CHECK(ok, "files over 256 KiB in all should be 400 at the file that crossed it");
}

/* Without --allow-run a run computation is 403 at its run field. */
static void test_allow_run_off(void **state)
{
    (void)state;
    static const char *const islands[] = {"west=2x2"};
    hx_cluster_t c2;
    hx_client_t cl2;
    T_CHECK(hx_cluster_start(&c2, islands, 1) == 0, "second atolld did not start");
    int ok = 0;
    if (hx_client_init(&cl2, c2.url) == 0) {
        char *doc = hx_text_q("{'slices':{'s':{'shape':[1]}},'computations':[{'name':'r',"
                              "'slice':'s','run':{'command':['true']}}]}");
        hx_resp_t r;
        if (doc && hx_request(&cl2, "POST", "/v1/jobs", doc, strlen(doc), &r) == 0) {
            const char *f = json_string_value(json_object_get(r.json, "field"));
            ok = r.status == 403 && f && strcmp(f, "computations[0].run") == 0;
            hx_resp_clear(&r);
        }
        free(doc);
        hx_client_cleanup(&cl2);
    }
    int unclean = hx_cluster_stop(&c2);
    T_CHECK(ok, "a run computation without --allow-run should be 403 at computations[0].run");
    T_CHECK(unclean == 0, "the atolld without --allow-run did not exit cleanly on SIGTERM");
}

/* A worker call's status and, for a problem, its field (into field). */
static long worker_call_field(hx_client_t *cl, const char *secret, const char *method,
                              const char *path, const char *body, size_t len, char *field,
                              size_t cap)
{
    json_t *ans = NULL;
    long st = hx_worker_call(cl, secret, method, path, body, len, &ans);
    const char *f = json_string_value(json_object_get(ans, "field"));
    snprintf(field, cap, "%s", f ? f : "");
    json_decref(ans);
    return st;
}

/* POSTs {"events": [n copies of event]} to worker wid's /procs; the status
 * and the problem's field. */
static long post_events(hx_client_t *cl, const char *secret, int64_t wid, const char *event,
                        int n, char *field, size_t cap)
{
    size_t le = strlen(event), bcap = 32 + (le + 1) * (size_t)n;
    char *body = malloc(bcap), path[96];
    T_CHECK(body != NULL, "oom");
    if (!body)      /* (T_CHECK longjmps; the compiler does not know) */
        return 0;
    size_t len = (size_t)snprintf(body, bcap, "{\"events\":[");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(body + len, bcap - len, "%s%s", i ? "," : "", event);
    len += (size_t)snprintf(body + len, bcap - len, "]}");
    snprintf(path, sizeof path, "/v1/workers/%lld/procs", (long long)wid);
    long st = worker_call_field(cl, secret, "POST", path, body, len, field, cap);
    free(body);
    return st;
}

/* What else a worker's uploads about job jr's run computation (comp 0,
 * processes 0 and 1, attempt 0) are held to, each bound at its first
 * value past it (every case fails when its check is deleted):
 *   - logs: attempt 0..1000, comp below JOB_MAX_COMPS (1024), a body of
 *     segments whose stream is 1 or 2 and whose length fits, at most
 *     4096 of them;
 *   - procs: at most 4096 events, each pid 0..INT32_MAX, a state running,
 *     exited or killed, a host of at most 255 bytes, integer exit_code and
 *     signal;
 *   - a reader's follow is 0 or 1. */
static void check_upload_fields(hx_client_t *cl, const char *secret, int64_t wid, int64_t jr)
{
    static const char seg[] = "\001\005\000\000\000hello";
    static const struct { const char *query, *field; } queries[] = {
        {"attempt=1001&comp=0&process=0", "attempt"},
        {"attempt=0&comp=1024&process=0", "comp"},
    };
    char path[256], field[128];
    for (size_t i = 0; i < sizeof queries / sizeof queries[0]; i++) {
        snprintf(path, sizeof path, "/v1/workers/%lld/logs?job=%lld&%s", (long long)wid,
                 (long long)jr, queries[i].query);
        long st = worker_call_field(cl, secret, "POST", path, seg, sizeof seg - 1, field,
                                    sizeof field);
        T_CHECK(st == 400 && strcmp(field, queries[i].field) == 0,
                "logs with %s answered %ld at '%s', want 400 at %s", queries[i].query, st, field,
                queries[i].field);
    }
    snprintf(path, sizeof path, "/v1/workers/%lld/logs?job=%lld&attempt=0&comp=0&process=0",
             (long long)wid, (long long)jr);
    static const struct { const char *body; size_t len; const char *what; } segs[] = {
        {"\003\005\000\000\000hello", 10, "a stream 3"},
        {"\001\006\000\000\000hello", 10, "a length past the body"},
        {"\001\005\000\000", 4, "a cut header"},
    };
    for (size_t i = 0; i < sizeof segs / sizeof segs[0]; i++) {
        long st = worker_call_field(cl, secret, "POST", path, segs[i].body, segs[i].len, field,
                                    sizeof field);
        T_CHECK(st == 400 && strcmp(field, "body") == 0,
                "logs with %s answered %ld at '%s', want 400 at body", segs[i].what, st, field);
    }
    /* 4096 empty segments are taken, 4097 are not. */
    char *many = calloc(4097, 5);
    T_CHECK(many != NULL, "oom");
    for (int i = 0; i < 4097; i++)
        many[5 * i] = 1;
    long st4096 = worker_call_field(cl, secret, "POST", path, many, 5 * 4096, field,
                                    sizeof field);
    long st4097 = worker_call_field(cl, secret, "POST", path, many, 5 * 4097, field,
                                    sizeof field);
    free(many);
    T_CHECK(st4096 == 200 && st4097 == 400 && strcmp(field, "body") == 0,
            "4096 segments answered %ld, 4097 %ld at '%s' (want 200, then 400 at body)", st4096,
            st4097, field);

    char ev[640];
#define EVENT(FMT, ...) \
    snprintf(ev, sizeof ev, "{\"job\":%lld,\"attempt\":0,\"comp\":0,\"process\":0," FMT "}", \
             (long long)jr, __VA_ARGS__)
    /* An exited process: nothing is left running for the drain below. */
    EVENT("\"pid\":%d,\"state\":\"exited\",\"host\":\"h\",\"exit_code\":%d", 7, 0);
    long st = post_events(cl, secret, wid, ev, 1, field, sizeof field);
    T_CHECK(st == 200, "a valid process state answered %ld", st);
    st = post_events(cl, secret, wid, ev, 4097, field, sizeof field);
    T_CHECK(st == 400 && strcmp(field, "events") == 0,
            "4097 process states answered %ld at '%s', want 400 at events", st, field);
    static const struct { const char *tail, *field; } bad[] = {
        {"\"pid\":2147483648,\"state\":\"exited\",\"host\":\"h\"", "events[0].pid"},
        {"\"pid\":7,\"state\":\"sleeping\",\"host\":\"h\"", "events[0].state"},
        {"\"pid\":7,\"state\":\"exited\",\"host\":\"h\",\"exit_code\":\"0\"",
         "events[0].exit_code"},
        {"\"pid\":7,\"state\":\"killed\",\"host\":\"h\",\"signal\":9.5", "events[0].signal"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EVENT("%s", bad[i].tail);
        st = post_events(cl, secret, wid, ev, 1, field, sizeof field);
        T_CHECK(st == 400 && strcmp(field, bad[i].field) == 0,
                "process state %s answered %ld at '%s', want 400 at %s", ev, st, field,
                bad[i].field);
    }
    char host[260];
    memset(host, 'h', 256);
    host[256] = '\0';
    EVENT("\"pid\":7,\"state\":\"exited\",\"host\":\"%s\"", host);
    st = post_events(cl, secret, wid, ev, 1, field, sizeof field);
    T_CHECK(st == 400 && strcmp(field, "events[0].host") == 0,
            "a host of 256 bytes answered %ld at '%s', want 400 at events[0].host", st, field);
#undef EVENT

    snprintf(path, sizeof path, "/v1/jobs/%lld/logs?follow=2", (long long)jr);
    st = worker_call_field(cl, NULL, "GET", path, NULL, 0, field, sizeof field);
    T_CHECK(st == 400 && strcmp(field, "follow") == 0,
            "logs?follow=2 answered %ld at '%s', want 400 at follow", st, field);
}

/* Output uploads are bounded (DESIGN Part E: every received size is
 * checked): a worker posts output only for a run computation it holds a
 * task of, only for a process that computation has (below its shard
 * count: otherwise one worker could open a million streams of 8 MiB), and
 * at most 512 KiB a request. A played worker on a fresh atolld --allow-run
 * holds a plain and a run computation of two jobs on island p=4. */
static void test_log_uploads_bounded(void **state)
{
    (void)state;
    static const char *const islands[] = {"p=4"};
    static const char *const extra[] = {"--allow-run", NULL};
    hx_cluster_t c2;
    hx_client_t cl;
    T_CHECK(hx_cluster_start_args(&c2, islands, 1, extra) == 0, "atolld did not start");
    T_CHECK(hx_client_init(&cl, c2.url) == 0, "client");
    json_t *ans = NULL;
    static const char reg[] = "{\"island\":\"p\",\"devices\":4,\"data_addr\":\"127.0.0.1:19\"}";
    long st = hx_worker_call(&cl, NULL, "POST", "/v1/workers", reg, strlen(reg), &ans);
    int64_t wid = json_integer_value(json_object_get(ans, "id"));
    char secret[256], path[256];
    const char *sec = json_string_value(json_object_get(ans, "secret"));
    snprintf(secret, sizeof secret, "%s", sec ? sec : "");
    json_decref(ans);
    T_CHECK(st == 201 && wid > 0, "the played worker's registration answered %ld", st);
    char *plain = hx_text_q("{'slices':{'s':{'shape':[2]}},'computations':[{'name':'c',"
                            "'slice':'s','ops':[{'op':'shard_index','out':'i'}],"
                            "'outputs':['i']}]}");
    char *run = hx_text_q("{'slices':{'s':{'shape':[2]}},'computations':[{'name':'r',"
                          "'slice':'s','run':{'command':['true']}}]}");
    int64_t jp = 0, jr = 0;
    int sp = plain ? hx_job_submit(&cl, plain, &jp, NULL) : 0;
    int sr = run ? hx_job_submit(&cl, run, &jr, NULL) : 0;
    free(plain);
    free(run);
    T_CHECK(sp == 201 && sr == 201, "submissions answered %d and %d", sp, sr);
    /* Both jobs' host tasks, leased at their allocation, come in one poll
     * or more. Each poll acknowledges the last answer, so that it parks
     * until something new is leased (a poll with ack=0 answers at once
     * with what it has: twenty of them went by in milliseconds, before
     * the second job's allocation, in an ASan build on a loaded machine). */
    int64_t ack = 0, deadline = hx_now_ms() + 60000;
    int seen_plain = 0, seen_run = 0;
    while (!(seen_plain && seen_run) && hx_now_ms() < deadline) {
        snprintf(path, sizeof path, "/v1/workers/%lld/tasks?wait_ms=2000&ack=%lld",
                 (long long)wid, (long long)ack);
        json_t *poll = NULL, *g;
        size_t i;
        if (hx_worker_call(&cl, secret, "GET", path, NULL, 0, &poll) == 200) {
            json_array_foreach(json_object_get(poll, "jobs"), i, g) {
                int64_t j = json_integer_value(json_object_get(g, "job"));
                seen_plain |= j == jp;
                seen_run |= j == jr;
            }
            if (json_is_integer(json_object_get(poll, "lease")))
                ack = json_integer_value(json_object_get(poll, "lease"));
        }
        json_decref(poll);
    }
    T_CHECK(seen_plain && seen_run, "the played worker did not receive both jobs' tasks"
            " (plain %d, run %d)", seen_plain, seen_run);
    static const char seg[] = "\001\005\000\000\000hello";
    struct { int64_t job; int process; long want; } cases[] = {
        {jr, 0, 200}, {jr, 1, 200},
        {jr, 2, 409},       /* past the computation's 2 processes */
        {jp, 0, 409},       /* a plain computation starts no process */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "/v1/workers/%lld/logs?job=%lld&attempt=0&comp=0&process=%d",
                 (long long)wid, (long long)cases[i].job, cases[i].process);
        st = hx_worker_call(&cl, secret, "POST", path, seg, sizeof seg - 1, NULL);
        T_CHECK(st == cases[i].want, "logs of job %lld process %d answered %ld, want %ld",
                (long long)cases[i].job, cases[i].process, st, cases[i].want);
    }
    check_upload_fields(&cl, secret, wid, jr);
    /* One segment of 512 KiB (its header makes the body 5 bytes more). */
    size_t big = (size_t)512 << 10;
    char *body = calloc(1, big + 5);
    T_CHECK(body != NULL, "oom");
    body[0] = 1;
    body[1] = (char)(big & 0xff);
    body[2] = (char)((big >> 8) & 0xff);
    body[3] = (char)((big >> 16) & 0xff);
    snprintf(path, sizeof path, "/v1/workers/%lld/logs?job=%lld&attempt=0&comp=0&process=0",
             (long long)wid, (long long)jr);
    st = hx_worker_call(&cl, secret, "POST", path, body, big + 5, NULL);
    free(body);
    T_CHECK(st == 413, "a log upload over 512 KiB answered %ld, want 413", st);
    /* Nothing left for a drain to wait on: the jobs end, the worker goes. */
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "/v1/jobs/%lld", (long long)(i ? jr : jp));
        hx_worker_call(&cl, secret, "DELETE", path, NULL, 0, NULL);
    }
    snprintf(path, sizeof path, "/v1/workers/%lld", (long long)wid);
    hx_worker_call(&cl, secret, "DELETE", path, NULL, 0, NULL);
    hx_client_cleanup(&cl);
    T_CHECK(hx_cluster_stop(&c2) == 0, "atolld did not exit cleanly");
}

/* GET path on url into *out (new reference); 0 or -1. */
static int get_json_at(const char *url, const char *path, json_t **out)
{
    hx_client_t c;
    hx_resp_t r;
    *out = NULL;
    if (hx_client_init(&c, url) != 0)
        return -1;
    if (hx_request(&c, "GET", path, NULL, 0, &r) == 0 && r.status == 200 && r.json)
        *out = json_incref(r.json);
    hx_resp_clear(&r);
    hx_client_cleanup(&c);
    return *out ? 0 : -1;
}

/* The text of GET path on url (caller frees), "" when not 200. */
static char *get_text_at(const char *url, const char *path)
{
    hx_client_t c;
    hx_resp_t r;
    char *text = NULL;
    if (hx_client_init(&c, url) == 0 && hx_request(&c, "GET", path, NULL, 0, &r) == 0) {
        text = strdup(r.status == 200 && r.body ? r.body : "");
        hx_resp_clear(&r);
    }
    hx_client_cleanup(&c);
    return text ? text : strdup("");
}

/* "attempt/process:state:exit" of every process, e.g. "1/0:exited:0 ". */
static void process_summary(const json_t *procs, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < json_array_size(procs) && off < len; i++) {
        const json_t *p = json_array_get(procs, i);
        const json_t *code = json_object_get(p, "exit_code");
        off += (size_t)snprintf(buf + off, len - off, "%lld/%lld:%s:%lld ",
                                (long long)json_integer_value(json_object_get(p, "attempt")),
                                (long long)json_integer_value(json_object_get(p, "process")),
                                json_string_value(json_object_get(p, "state")),
                                json_is_integer(code) ? (long long)json_integer_value(code) : -1);
    }
}

/* atolld is SIGKILLed while a gang runs and restarted on the same database
 * and port: the job goes on in a new attempt (the old gang is ended), and
 * what the old attempt wrote and how its processes ended are still there,
 * beside the new attempt's exit statuses (rank 0 exits 0, then rank 1
 * exits 1: the job fails). */
static void test_controller_restart(void **state)
{
    (void)state;
    char dir[] = "/tmp/atoll-run-restart.XXXXXX", url[128], go[HX_PATH_MAX], doc[2 * HX_PATH_MAX + 512];
    char pid0[HX_PATH_MAX], stale[HX_PATH_MAX + 8];
    static const char *const islands[] = {"r=2"};
    hx_proc_t a, w;
    int port = 0;
    T_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(go, sizeof go, "/tmp/atoll-run-go-%d", (int)getpid());
    unlink(go);
    /* Rank 1 exits (1, failing the job) only once rank 0 has exited and
     * been reaped (its pid, written to pid0-ATTEMPT, is gone): otherwise
     * the job's failure may end rank 0 first on a loaded machine, and the
     * exit statuses checked below would be a race. */
    snprintf(pid0, sizeof pid0, "/tmp/atoll-run-pid0-%d", (int)getpid());
    for (int k = 0; k < 2; k++) {
        snprintf(stale, sizeof stale, "%s-%d", pid0, k);
        unlink(stale);
    }
    setenv("ATOLL_ALLOW_RUN", "1", 1);          /* both inherit these */
    if (geteuid() == 0)
        setenv("ATOLL_RUN_AS", "nobody", 1);
    int up = fx_atolld_start(&a, dir, "atolld", 0, 2000, islands, 1, url, sizeof url, &port) == 0 &&
             fx_worker_start(&w, dir, "worker", url, "r", 2, 20000) == 0;
    unsetenv("ATOLL_ALLOW_RUN");
    unsetenv("ATOLL_RUN_AS");
    T_CHECK(up, "cannot start the restart cluster");
    snprintf(doc, sizeof doc,
             "{\"max_retries\":0,\"slices\":{\"s\":{\"shape\":[2]}},\"computations\":[{"
             "\"name\":\"r\",\"slice\":\"s\",\"run\":{\"command\":[\"/bin/sh\",\"-c\","
             "\"echo before $RANK a$ATOLL_ATTEMPT; P=%s-$ATOLL_ATTEMPT;"
             " [ $RANK = 0 ] && echo $$ > $P; while [ ! -e %s ]; do sleep 0.02; done;"
             " if [ $RANK = 1 ]; then while [ ! -s $P ] || kill -0 $(cat $P) 2>/dev/null;"
             " do sleep 0.02; done; fi; echo after $RANK; exit $RANK\"]}}]}", pid0, go);
    int64_t id = 0;
    T_CHECK(fx_submit(url, doc, NULL, &id) == 201, "submit of the run job");
    /* Both processes' first lines stored before the kill: what the test
     * checks after the restart is what atolld had (a line still on its
     * way when atolld dies is refused afterwards: its attempt is over). */
    char path[128], *log = NULL;
    int64_t end = hx_now_ms() + RUN_TIMEOUT_MS;
    for (int k = 0; k < 2; k++) {
        char want[32];
        snprintf(want, sizeof want, "before %d a0", k);
        snprintf(path, sizeof path, "/v1/jobs/%lld/logs?process=%d", (long long)id, k);
        while (free(log), log = get_text_at(url, path), !strstr(log, want) && hx_now_ms() < end)
            hx_sleep_ms(20);
        int wrote = strstr(log, want) != NULL;
        free(log);
        log = NULL;
        T_CHECK(wrote, "process %d of attempt 0 never wrote its first line", k);
    }
    fx_kill(&a);
    T_CHECK(fx_atolld_start(&a, dir, "atolld", port, 2000, islands, 1, url, sizeof url, &port) == 0,
            "atolld did not restart on its database");
    FILE *f = fopen(go, "w");
    T_CHECK(f != NULL, "cannot create %s", go);
    fclose(f);
    json_t *job = NULL, *procs = NULL;
    snprintf(path, sizeof path, "/v1/jobs/%lld", (long long)id);
    end = hx_now_ms() + RUN_TIMEOUT_MS;
    while (get_json_at(url, path, &job), !job || !hx_state_terminal(hx_job_state(job))) {
        json_decref(job);
        job = NULL;
        T_CHECK(hx_now_ms() < end, "job %lld did not end after the restart", (long long)id);
        hx_sleep_ms(20);
    }
    char st[32], sum[512] = "";
    snprintf(st, sizeof st, "%s", hx_job_state(job));
    json_decref(job);
    /* attempt 0's processes are reported ended by the worker once it has
     * re-registered: wait for that too */
    snprintf(path, sizeof path, "/v1/jobs/%lld/processes", (long long)id);
    end = hx_now_ms() + RUN_TIMEOUT_MS;
    for (;;) {
        if (get_json_at(url, path, &procs) == 0)
            process_summary(json_object_get(procs, "processes"), sum, sizeof sum);
        json_decref(procs);
        if (!strstr(sum, ":running:") || hx_now_ms() > end)
            break;
        hx_sleep_ms(20);
    }
    snprintf(path, sizeof path, "/v1/jobs/%lld/logs?process=0&attempt=0", (long long)id);
    char *old = get_text_at(url, path);
    snprintf(path, sizeof path, "/v1/jobs/%lld/logs?process=1&attempt=1", (long long)id);
    char *newer = get_text_at(url, path);
    int kept = strstr(old, "before 0 a0") != NULL, again = strstr(newer, "before 1 a1") &&
                                                            strstr(newer, "after 1");
    free(old);
    free(newer);
    unlink(go);
    for (int k = 0; k < 2; k++) {
        snprintf(stale, sizeof stale, "%s-%d", pid0, k);
        unlink(stale);
    }
    fx_kill(&w);
    fx_kill(&a);
    T_CHECK(strcmp(st, "failed") == 0, "job %lld ended %s, want failed (rank 1 exits 1)",
            (long long)id, st);
    T_CHECK(kept, "attempt 0's output did not survive the restart");
    T_CHECK(again, "attempt 1's output of process 1 is incomplete");
    T_CHECK(strstr(sum, "0/0:") && strstr(sum, "0/1:") && !strstr(sum, ":running:") &&
                strstr(sum, "1/0:exited:0 ") && strstr(sum, "1/1:exited:1 "),
            "processes after the restart: %s (want attempt 0 ended, attempt 1 exited 0 and 1)",
            sum);
    expect_no_processes(id);
    hx_remove_dir(dir);                 /* kept when a check failed: its logs */
}

static int group_setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"west=2x4"};
    static const char *const extra[] = {"--allow-run", NULL};
    static const char *const wextra[] = {"--run-as", "nobody", NULL};
    const char *const *w = geteuid() == 0 ? wextra : NULL;
    if (hx_init() != 0 || hx_cluster_start_args(&itest_cluster, islands, 1, extra) != 0)
        return -1;
    if (hx_worker_start_args(&itest_cluster, "west", 4, w, 15000, 0) != 0 ||
        hx_worker_start_args(&itest_cluster, "west", 4, w, 15000, 0) != 0 ||
        hx_client_init(&itest_client, itest_cluster.url) != 0) {
        hx_cluster_stop(&itest_cluster);
        return -1;
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_dataflow_env_logs, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_ddp, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_plain_sockets, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_rank_failure, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_timeout, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_cancel, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_per_host, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_escapee, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_argv_words, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_logs_follow, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_refusals, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_allow_run_off, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_log_uploads_bounded, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_worker_killed, itest_cancel_leftovers),
        cmocka_unit_test(test_controller_restart),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
