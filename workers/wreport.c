/* wreport.c - see wreport.h. */
#include "wreport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "util.h"

typedef struct rnode {
    int64_t task;
    json_t *body;               /* owned */
    size_t bytes;               /* body as sent: compact JSON plus its "task" */
    struct rnode *next;
} rnode_t;

struct wreport {
    wclient_t *wc;              /* borrowed */
    pthread_t thread;
    pthread_mutex_t mu;         /* guards head, tail */
    pthread_cond_t cv;
    rnode_t *head, *tail;       /* FIFO */
    atomic_int stopping;        /* set by wreport_stop: drain then exit */
    atomic_int give_up;         /* set when the drain deadline passed */
};

/* Most reports sent in one request. The body is bounded by bytes as well:
 * a batch's JSON stays under the controller's cap (wclient_max_body), which
 * a handful of reports with 4096 values per output per shard can pass. */
#define WREPORT_BATCH_MAX 64
/* Room for the envelope {"reports":[...]} and each report's "task" field. */
#define WREPORT_ENVELOPE_BYTES 64
#define WREPORT_TASK_BYTES 32

/* Delivers a batch in one request, retrying unreachable/5xx until give_up.
 * A batch is {"task": N, ...report} items in queue order. */
static void deliver(wreport_t *wr, const json_t *batch)
{
    int delay = 100;
    for (;;) {
        int64_t id = wclient_id(wr->wc);
        int st = wclient_report_batch(wr->wc, id, batch);
        if (st >= 200 && st < 500)
            return;                     /* done, or final refusal (logged) */
        if (wclient_sleep_backoff(&delay, &wr->give_up)) {
            log_warn("%zu reports dropped: controller unreachable", json_array_size(batch));
            return;
        }
    }
}

/* Drops the "values" of every tensor of a report too large to send, so
 * the job still ends (its shards keep their shapes and sums) instead of
 * the report being refused 413 and the job waiting for it forever. */
static void strip_values(int64_t task, json_t *body, size_t bytes, size_t cap)
{
    const char *name;
    json_t *arr;
    json_object_foreach(json_object_get(body, "outputs"), name, arr) {
        size_t i;
        json_t *t;
        json_array_foreach(arr, i, t)
            json_object_del(t, "values");
    }
    log_warn("report of task %lld is %zu bytes, above the controller's body cap of %zu: its"
             " outputs are sent without values (sums and shapes kept)",
             (long long)task, bytes, cap);
}

/* Moves queued reports into a new batch array, at most WREPORT_BATCH_MAX
 * and at most the controller's body cap in bytes, at least one (caller
 * holds mu). Each report gains its "task" field. */
static json_t *take_batch(wreport_t *wr)
{
    json_t *batch = json_array();
    size_t cap = wclient_max_body(wr->wc), used = WREPORT_ENVELOPE_BYTES;
    while (batch && wr->head && json_array_size(batch) < WREPORT_BATCH_MAX) {
        rnode_t *n = wr->head;
        if (used + n->bytes + 1 > cap) {
            if (json_array_size(batch) > 0)
                break;                  /* next batch */
            strip_values(n->task, n->body, n->bytes, cap);
        }
        used += n->bytes + 1;
        wr->head = n->next;
        if (!wr->head)
            wr->tail = NULL;
        json_object_set_new(n->body, "task", json_integer(n->task));
        json_array_append_new(batch, n->body);   /* the node's reference moves */
        free(n);
    }
    return batch;
}

static void *report_main(void *arg)
{
    wreport_t *wr = arg;
    pthread_mutex_lock(&wr->mu);
    for (;;) {
        while (!wr->head && !atomic_load(&wr->stopping))
            pthread_cond_wait(&wr->cv, &wr->mu);
        if (!wr->head || atomic_load(&wr->give_up))
            break;                      /* drained, or out of time */
        json_t *batch = take_batch(wr);
        pthread_mutex_unlock(&wr->mu);
        if (batch)
            deliver(wr, batch);
        else
            log_error("out of memory: reports dropped");
        json_decref(batch);
        pthread_mutex_lock(&wr->mu);
    }
    pthread_mutex_unlock(&wr->mu);
    return NULL;
}

wreport_t *wreport_start(wclient_t *wc)
{
    wreport_t *wr = calloc(1, sizeof *wr);
    if (!wr)
        return NULL;
    wr->wc = wc;
    pthread_mutex_init(&wr->mu, NULL);
    pthread_cond_init(&wr->cv, NULL);
    if (pthread_create(&wr->thread, NULL, report_main, wr) != 0) {
        pthread_mutex_destroy(&wr->mu);
        pthread_cond_destroy(&wr->cv);
        free(wr);
        return NULL;
    }
    return wr;
}

void wreport_push(wreport_t *wr, int64_t task, json_t *body)
{
    if (!body)
        return;
    rnode_t *n = malloc(sizeof *n);
    if (!n) {
        log_error("report of task %lld dropped: out of memory", (long long)task);
        json_decref(body);
        return;
    }
    n->task = task;
    n->body = body;
    /* Sized once here, off the reporting thread's send path; 0 only on
     * failure, and then the controller's own 413 is the backstop. */
    n->bytes = json_dumpb(body, NULL, 0, JSON_COMPACT) + WREPORT_TASK_BYTES;
    n->next = NULL;
    pthread_mutex_lock(&wr->mu);
    if (wr->tail)
        wr->tail->next = n;
    else
        wr->head = n;
    wr->tail = n;
    pthread_cond_signal(&wr->cv);
    pthread_mutex_unlock(&wr->mu);
}

void wreport_exec_fn(void *ctx, int64_t task, json_t *body)
{
    wreport_push(ctx, task, body);
}

void wreport_stop(wreport_t *wr, int64_t timeout_ms)
{
    if (!wr)
        return;
    int64_t deadline = util_mono_us() + timeout_ms * 1000;
    pthread_mutex_lock(&wr->mu);
    atomic_store(&wr->stopping, 1);
    pthread_cond_signal(&wr->cv);
    pthread_mutex_unlock(&wr->mu);
    /* Poll for the queue to empty; past the deadline, make retries give up. */
    for (;;) {
        pthread_mutex_lock(&wr->mu);
        int empty = wr->head == NULL;
        pthread_mutex_unlock(&wr->mu);
        if (empty || util_mono_us() >= deadline)
            break;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    atomic_store(&wr->give_up, 1);
    pthread_join(wr->thread, NULL);
    while (wr->head) {
        rnode_t *n = wr->head;
        wr->head = n->next;
        log_warn("report of task %lld dropped at shutdown", (long long)n->task);
        json_decref(n->body);
        free(n);
    }
    pthread_mutex_destroy(&wr->mu);
    pthread_cond_destroy(&wr->cv);
    free(wr);
}
