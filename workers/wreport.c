/* wreport.c - see wreport.h.
 *
 * One reporting thread drains a FIFO of reports (rnode_t) that runner
 * threads fill through wreport_push(), which never blocks on the network.
 * Invariants: reports leave in the order they were pushed, batched up to
 * WREPORT_BATCH_MAX and under the controller's body cap; a report is
 * serialized once, on the reporting thread; a refused report is followed
 * by at most one "failed" report of its task (last_word), never a chain.
 * Locks: `mu` guards the queue (head, tail) and is never held while
 * sending; `stopping` and `give_up` are atomics read by the thread and
 * the retry loops.
 *
 * Ownership: a queued node owns its report body (the text pushed);
 * the thread takes a batch off the queue and frees it once sent or given
 * up on; wreport_stop() drops and logs what is still queued. The client
 * is borrowed. */
#include "wreport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_run.h"
#include "jtext.h"
#include "util.h"

typedef struct rnode {
    int64_t task;
    int32_t comp;               /* the task's computation, or -1: not named */
    char *body;                 /* owned: the report as compact JSON text, an
                                 * object without "task" and "comp" (report_text
                                 * adds them) */
    int last_word;              /* the failure sent for a refused report:
                                 * if it is refused too, nothing follows */
    int hold;                   /* may wait (wreport_exec_fn's hold) */
    int64_t queued_us;          /* util_mono_us() when pushed */
    int64_t due_us;             /* leaves no earlier (monotonic; 0: at once): the
                                   task's end on its devices (exec_report_fn) */
    struct rnode *next;
} rnode_t;

struct wreport {
    wclient_t *wc;              /* borrowed */
    int64_t hold_us;            /* longest a held report waits */
    pthread_t thread;
    pthread_mutex_t mu;         /* guards head, tail, nqueued, nprompt */
    pthread_cond_t cv;          /* CLOCK_MONOTONIC */
    rnode_t *head, *tail;       /* FIFO */
    int nqueued;                /* nodes in the FIFO */
    int nprompt;                /* of which not held: the queue goes now */
    atomic_int stopping;        /* set by wreport_stop: drain then exit */
    atomic_int give_up;         /* set when the drain deadline passed */
};

/* Most reports taken off the queue at once. They go in as few requests as
 * fit the controller's body cap (wclient_max_body): a handful of reports
 * with 4096 values per output per shard can pass it. */
#define WREPORT_BATCH_MAX 64
/* {"reports":[ ... ]} around the reports. */
#define WREPORT_ENVELOPE_BYTES 16

static void push_node(wreport_t *wr, int64_t task, int32_t comp, char *body, int last_word,
                      int hold, int64_t due_us);

/* A report the controller refused for its content can never be accepted,
 * and its job would wait for it forever: the task is reported failed
 * instead, naming the refusal (unless this was already that failure). */
static void fail_refused(wreport_t *wr, int64_t task, int32_t comp, int last_word, int status,
                         const char *detail)
{
    if (last_word || task < 1)
        return;
    char msg[512];
    snprintf(msg, sizeof msg, "the controller refused this task's report (%d: %.400s)",
             status, detail ? detail : "");
    push_node(wr, task, comp, exec_report_failed(msg), 1, 0, 0);
}

/* The tasks of one request body, in order. */
typedef struct batch_meta {
    int64_t task[WREPORT_BATCH_MAX];
    int32_t comp[WREPORT_BATCH_MAX];
    int last_word[WREPORT_BATCH_MAX];
    size_t count;
    size_t cap;                 /* the body cap the batch was built under */
} batch_meta_t;

static void send_list(wreport_t *wr, rnode_t *list);

/* A batch refused 413 by a controller whose cap is now smaller than the
 * one the batch was built under (it was restarted with a smaller
 * --max-body; its answer said the cap, wclient_report_batch learned it):
 * its reports, read back from the body in order, go again under the new
 * cap, a report alone above it without its values (send_list). 1 when done
 * so, 0 when the body cannot be read back (the caller fails its tasks). */
static int resend_under_cap(wreport_t *wr, const char *body, size_t len, const batch_meta_t *m)
{
    json_t *doc = json_loadb(body, len, 0, NULL), *reports = json_object_get(doc, "reports");
    rnode_t *list = NULL, **tail = &list;
    size_t i;
    json_t *r;
    if (json_array_size(reports) != m->count) {
        json_decref(doc);
        return 0;
    }
    log_warn("%zu reports refused as too large: sent again under the controller's cap of %zu"
             " bytes", m->count, wclient_max_body(wr->wc));
    json_array_foreach(reports, i, r) {
        rnode_t *n = calloc(1, sizeof *n);
        if (!n) {
            log_error("out of memory: %zu reports dropped", m->count - i);
            break;
        }
        json_object_del(r, "task");     /* report_text adds them again */
        json_object_del(r, "comp");
        *n = (rnode_t){m->task[i], m->comp[i], jtext_dump(r, NULL), m->last_word[i], 0, 0, 0,
                       NULL};
        if (!n->body) {
            free(n);
            log_error("out of memory: %zu reports dropped", m->count - i);
            break;
        }
        *tail = n;
        tail = &n->next;
    }
    json_decref(doc);
    send_list(wr, list);
    return 1;
}

/* Delivers one request body of m->count reports, retrying unreachable/5xx
 * until give_up. A refusal of the whole request for its content (400,
 * 413, 422) fails each of its tasks; 401/403/404/409 say the worker or
 * task is no longer ours (the controller requeues its work). */
static void deliver(wreport_t *wr, const char *body, size_t len, const batch_meta_t *m)
{
    int delay = 100;
    for (;;) {
        int64_t id = wclient_id(wr->wc);
        json_t *refused = NULL, *r;
        size_t i;
        int st = wclient_report_batch(wr->wc, id, body, len, m->count, &refused);
        json_array_foreach(refused, i, r) {
            json_int_t k = json_integer_value(json_object_get(r, "item"));
            if (k >= 0 && (size_t)k < m->count)
                fail_refused(wr, m->task[k], m->comp[k], m->last_word[k],
                             (int)json_integer_value(json_object_get(r, "status")),
                             json_string_value(json_object_get(r, "detail")));
        }
        json_decref(refused);
        /* Only when the cap shrank since the batch was built: a report
         * still over the new cap alone (its values already stripped)
         * would otherwise be re-sent for ever. */
        if (st == 413 && wclient_max_body(wr->wc) < m->cap &&
            resend_under_cap(wr, body, len, m))
            return;
        if (st == 400 || st == 413 || st == 422)
            for (i = 0; i < m->count; i++)
                fail_refused(wr, m->task[i], m->comp[i], m->last_word[i], st, "the whole batch");
        if (st >= 200 && st < 500)
            return;                     /* done, or final refusal (logged) */
        if (wclient_sleep_backoff(&delay, &wr->give_up)) {
            log_warn("%zu reports dropped: controller unreachable", m->count);
            return;
        }
    }
}

/* A report too large to send, read back without the "values_f32" of its
 * tensors, so that its job still ends (its shards keep their shapes and
 * sums) instead of the report being refused 413 and the job waiting for
 * it forever. Rare: a tree is built only here. New text, or NULL (OOM). */
static char *strip_values(int64_t task, const char *body, size_t bytes, size_t cap)
{
    json_t *doc = json_loads(body, 0, NULL);
    const char *name;
    json_t *arr;
    json_object_foreach(json_object_get(doc, "outputs"), name, arr) {
        size_t i;
        json_t *t;
        json_array_foreach(arr, i, t)
            json_object_del(t, "values_f32");
    }
    char *text = jtext_dump(doc, NULL);
    json_decref(doc);
    log_warn("report of task %lld is %zu bytes, above the controller's body cap of %zu: its"
             " outputs are sent without values (sums and shapes kept)",
             (long long)task, bytes, cap);
    return text;
}

/* The report as sent, {"task":N (,"comp":K), then the body's members; a report that
 * could not fit a request alone loses its values. malloc'd, its length in
 * *tl; NULL on OOM. */
static char *report_text(rnode_t *n, size_t cap, size_t *tl)
{
    char head[64];
    int hl = n->comp >= 0 ? snprintf(head, sizeof head, "{\"task\":%lld,\"comp\":%d,",
                                     (long long)n->task, (int)n->comp)
                          : snprintf(head, sizeof head, "{\"task\":%lld,", (long long)n->task);
    size_t bl = strlen(n->body);
    if (bl < 2 || n->body[0] != '{')
        return NULL;                    /* never: bodies are objects with a state */
    if ((size_t)hl + bl + WREPORT_ENVELOPE_BYTES > cap) {
        char *stripped = strip_values(n->task, n->body, (size_t)hl + bl, cap);
        if (!stripped)
            return NULL;
        free(n->body);
        n->body = stripped;
        bl = strlen(stripped);
    }
    char *text = malloc((size_t)hl + bl);
    if (!text)
        return NULL;
    memcpy(text, head, (size_t)hl);
    memcpy(text + hl, n->body + 1, bl - 1);      /* the body without its '{' */
    *tl = (size_t)hl + bl - 1;
    return text;
}

/* Sends the reports of list (in order) in requests under the body cap,
 * each report serialized once, here on the reporting thread; frees list. */
static void send_list(wreport_t *wr, rnode_t *list)
{
    size_t cap = wclient_max_body(wr->wc), len = 0, bufcap = 0;
    batch_meta_t m = {.count = 0, .cap = cap};
    char *buf = NULL;
    while (list || m.count) {
        rnode_t *n = list;
        size_t tl = 0;
        char *text = n ? report_text(n, cap, &tl) : NULL;
        /* Flush what is gathered when this one does not fit, or at the end. */
        if (m.count && (!n || len + tl + 2 > cap || m.count == WREPORT_BATCH_MAX)) {
            memcpy(buf + len, "]}", 3);
            deliver(wr, buf, len + 2, &m);
            len = m.count = 0;
        }
        if (!n)
            break;
        list = n->next;
        if (text && len + tl + WREPORT_ENVELOPE_BYTES + 1 > bufcap) {
            size_t want = 2 * (len + tl + WREPORT_ENVELOPE_BYTES + 1);
            char *nb = realloc(buf, want);
            if (nb) {
                buf = nb;
                bufcap = want;
            } else {
                free(text);
                text = NULL;
            }
        }
        if (text) {
            if (!m.count)
                len = (size_t)snprintf(buf, bufcap, "{\"reports\":[");
            else
                buf[len++] = ',';
            memcpy(buf + len, text, tl);
            len += tl;
            m.task[m.count] = n->task;
            m.comp[m.count] = n->comp;
            m.last_word[m.count++] = n->last_word;
        } else {
            log_error("out of memory: report of task %lld dropped", (long long)n->task);
        }
        free(text);
        free(n->body);
        free(n);
    }
    free(buf);
}

/* Whether the queue leaves now: its oldest report is due (the task has
 * ended on its devices), and something in it may not wait, a full batch
 * is there, the oldest held report waited hold_us, or the reporter stops
 * (which sends what is queued, due or not). Holds mu. */
static int send_due(const wreport_t *wr, int64_t now)
{
    if (!wr->head)
        return 0;
    if (atomic_load(&wr->stopping))
        return 1;
    return now >= wr->head->due_us &&
           (wr->nprompt > 0 || wr->nqueued >= WREPORT_BATCH_MAX ||
            now - wr->head->queued_us >= wr->hold_us);
}

/* Sleeps until send_due may have changed: a push, a stop, the oldest
 * report's due time or its hold deadline. Holds mu. */
static void wait_due(wreport_t *wr)
{
    if (!wr->head) {
        pthread_cond_wait(&wr->cv, &wr->mu);
        return;
    }
    int64_t at = wr->head->due_us > util_mono_us() ? wr->head->due_us
                                                   : wr->head->queued_us + wr->hold_us;
    struct timespec ts = {.tv_sec = (time_t)(at / 1000000), .tv_nsec = (long)(at % 1000000) * 1000};
    pthread_cond_timedwait(&wr->cv, &wr->mu, &ts);
}

/* Takes up to WREPORT_BATCH_MAX nodes off the head of the queue, up to
 * the first not yet due (order is kept), unless the reporter stops. Holds
 * mu. */
static rnode_t *take_batch(wreport_t *wr)
{
    rnode_t *list = wr->head, **cut = &list;
    int64_t now = atomic_load(&wr->stopping) ? INT64_MAX : util_mono_us();
    for (int k = 0; k < WREPORT_BATCH_MAX && *cut && (*cut)->due_us <= now; k++) {
        wr->nqueued--;
        wr->nprompt -= !(*cut)->hold;
        cut = &(*cut)->next;
    }
    wr->head = *cut;                    /* the rest stays queued */
    *cut = NULL;
    if (!wr->head)
        wr->tail = NULL;
    return list;
}

static void *report_main(void *arg)
{
    wreport_t *wr = arg;
    pthread_setname_np(pthread_self(), "atoll-reporter");
    pthread_mutex_lock(&wr->mu);
    for (;;) {
        while (!send_due(wr, util_mono_us()) && !atomic_load(&wr->stopping))
            wait_due(wr);
        if (!wr->head || atomic_load(&wr->give_up))
            break;                      /* drained, or out of time */
        rnode_t *list = take_batch(wr);
        pthread_mutex_unlock(&wr->mu);
        send_list(wr, list);
        pthread_mutex_lock(&wr->mu);
    }
    pthread_mutex_unlock(&wr->mu);
    return NULL;
}

wreport_t *wreport_start(wclient_t *wc, int64_t hold_ms)
{
    wreport_t *wr = calloc(1, sizeof *wr);
    pthread_condattr_t ca;
    if (!wr || pthread_condattr_init(&ca) != 0) {
        free(wr);
        return NULL;
    }
    wr->wc = wc;
    wr->hold_us = hold_ms * 1000;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&wr->mu, NULL);
    pthread_cond_init(&wr->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&wr->thread, NULL, report_main, wr) != 0) {
        pthread_mutex_destroy(&wr->mu);
        pthread_cond_destroy(&wr->cv);
        free(wr);
        return NULL;
    }
    return wr;
}

static void push_node(wreport_t *wr, int64_t task, int32_t comp, char *body, int last_word,
                      int hold, int64_t due_us)
{
    if (!body)
        return;
    rnode_t *n = malloc(sizeof *n);
    if (!n) {
        log_error("report of task %lld dropped: out of memory", (long long)task);
        free(body);
        return;
    }
    *n = (rnode_t){task, comp, body, last_word, hold, util_mono_us(), due_us, NULL};
    pthread_mutex_lock(&wr->mu);
    if (wr->tail)
        wr->tail->next = n;
    else
        wr->head = n;
    wr->tail = n;
    wr->nqueued++;
    wr->nprompt += !hold;
    /* A held report changes nothing for the thread unless it fills a
     * batch or is the first (the thread then sleeps to its deadline). */
    if (!hold || wr->nqueued == 1 || wr->nqueued >= WREPORT_BATCH_MAX)
        pthread_cond_signal(&wr->cv);
    pthread_mutex_unlock(&wr->mu);
}

void wreport_push(wreport_t *wr, int64_t task, int32_t comp, char *body)
{
    push_node(wr, task, comp, body, 0, 0, 0);
}

void wreport_exec_fn(void *ctx, int64_t task, int32_t comp, char *body, int hold,
                     int64_t due_us)
{
    push_node(ctx, task, comp, body, 0, hold, due_us);
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
        free(n->body);
        free(n);
    }
    pthread_mutex_destroy(&wr->mu);
    pthread_cond_destroy(&wr->cv);
    free(wr);
}
