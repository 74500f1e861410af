/* sched_plans.c - the compiled plans of queued jobs and of live shared
 * jobs still being fed, cached across admission rounds (plan_entry_t,
 * sched_internal.h). Owned by the scheduler thread alone, except the
 * offers: plans the API compiled when it stored a job, handed over
 * (sched_plan_offer) so that the scheduler does not compile them again. */
#include "sched_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

static plan_entry_t *plans;
static int nplans, plans_cap;

/* Plans offered by the API threads (sched_plan_offer), not yet taken:
 * offers[(offer_next + i) % SCHED_OFFERS] for i < noffers, oldest first;
 * each owns its doc and plan. Guarded by offers_mu: the only part of this
 * file other threads touch. */
typedef struct plan_offer {
    int64_t id;
    json_t *doc;
    job_plan_t *plan;
    size_t bytes;               /* the document's text */
} plan_offer_t;
static pthread_mutex_t offers_mu = PTHREAD_MUTEX_INITIALIZER;
static plan_offer_t offers[SCHED_OFFERS];
static int offer_next, noffers;
static size_t offers_bytes;     /* sum of the waiting offers' bytes */

static void plan_entry_free(plan_entry_t *pe)
{
    job_plan_free(pe->plan);
    json_decref(pe->doc);
    free(pe->reason);
}

void sched_plan_offer(int64_t id, json_t *doc, job_plan_t *plan, size_t doc_bytes)
{
    plan_offer_t old[SCHED_OFFERS];
    int nold = 0;
    if (doc_bytes > SCHED_OFFER_BUDGET_BYTES) {
        job_plan_free(plan);
        json_decref(doc);
        return;
    }
    pthread_mutex_lock(&offers_mu);
    /* The oldest go until both bounds hold with the new one (freed below,
     * outside the lock). */
    while (noffers == SCHED_OFFERS || offers_bytes + doc_bytes > SCHED_OFFER_BUDGET_BYTES) {
        old[nold] = offers[offer_next];
        offers_bytes -= old[nold++].bytes;
        offer_next = (offer_next + 1) % SCHED_OFFERS;
        noffers--;
    }
    offers[(offer_next + noffers++) % SCHED_OFFERS] = (plan_offer_t){id, doc, plan, doc_bytes};
    offers_bytes += doc_bytes;
    pthread_mutex_unlock(&offers_mu);
    for (int i = 0; i < nold; i++) {
        job_plan_free(old[i].plan);
        json_decref(old[i].doc);
    }
}

/* Takes the offer of job id into pe (doc and plan), if there is one: 1,
 * else 0. Offers are few and taken mostly in order: a linear search. */
static int offer_take(int64_t id, plan_entry_t *pe)
{
    int found = 0;
    pthread_mutex_lock(&offers_mu);
    for (int i = 0; i < noffers && !found; i++) {
        plan_offer_t *o = &offers[(offer_next + i) % SCHED_OFFERS];
        if (o->id != id)
            continue;
        pe->doc = o->doc;
        pe->plan = o->plan;
        offers_bytes -= o->bytes;
        found = 1;
        /* Close the gap: the ones after it move one back. */
        for (int j = i; j + 1 < noffers; j++)
            offers[(offer_next + j) % SCHED_OFFERS] = offers[(offer_next + j + 1) % SCHED_OFFERS];
        noffers--;
    }
    pthread_mutex_unlock(&offers_mu);
    return found;
}

static void offers_free_all(void)
{
    pthread_mutex_lock(&offers_mu);
    for (int i = 0; i < noffers; i++) {
        plan_offer_t *o = &offers[(offer_next + i) % SCHED_OFFERS];
        job_plan_free(o->plan);
        json_decref(o->doc);
    }
    noffers = offer_next = 0;
    offers_bytes = 0;
    pthread_mutex_unlock(&offers_mu);
}

/* Index of id, or of where it would go (lower bound). */
static int plan_find(int64_t id)
{
    int lo = 0, hi = nplans;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (plans[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

plan_entry_t *sched_plan_find(int64_t id)
{
    int k = plan_find(id);
    return k < nplans && plans[k].id == id ? &plans[k] : NULL;
}

/* The job's compiled plan, compiling it on first sight. A document that no
 * longer compiles (the cluster changed, e.g. an island was removed from the
 * command line) fails its job. NULL when the job cannot be planned now. */
plan_entry_t *sched_plan_get(store_t *st, int64_t id)
{
    int k = plan_find(id);
    if (k < nplans && plans[k].id == id) {
        plans[k].seen = 1;
        return &plans[k];
    }
    err_t e = {0};
    plan_entry_t pe = {.id = id, .seen = 1};
    int offered = offer_take(id, &pe);
    if (!offered)
        pe.doc = store_sched_job_doc(st, id);
    if (!pe.doc || (!offered &&
                    compiler_job(pe.doc, sched_cfg.islands, sched_cfg.nislands, &pe.plan, &e) != 0)) {
        char why[400];
        snprintf(why, sizeof why, "no longer valid on this cluster: %s",
                 e.detail[0] ? e.detail : "its document cannot be read");
        if (pe.doc)
            store_sched_fail(st, id, why);
        plan_entry_free(&pe);
        return NULL;
    }
    pe.dev_bytes = sched_plan_bytes(pe.plan);
    if (nplans == plans_cap) {
        int cap = plans_cap ? plans_cap * 2 : 64;
        plan_entry_t *p = realloc(plans, sizeof *p * (size_t)cap);
        if (!p) {
            plan_entry_free(&pe);
            return NULL;
        }
        plans = p;
        plans_cap = cap;
    }
    memmove(&plans[k + 1], &plans[k], sizeof *plans * (size_t)(nplans - k));
    plans[k] = pe;
    nplans++;
    return &plans[k];
}

int64_t sched_plan_bytes(const job_plan_t *plan)
{
    int64_t most = 0;
    for (int c = 0; c < plan->ncomps; c++) {
        const comp_t *comp = &plan->comps[c];
        int64_t sum = 0;
        for (int i = 0; i < comp->nops; i++)
            if (comp->ops[i].shape.rank >= 0)
                sum += shape_numel(&comp->ops[i].shape) * (int64_t)sizeof(float);
        if (sum > most)
            most = sum;
    }
    return most;
}

void sched_plan_keep(int64_t id)
{
    int k = plan_find(id);
    if (k < nplans && plans[k].id == id)
        plans[k].seen = 1;
}

/* After a round: drop the plans of jobs that left the queue. */
void sched_plans_sweep(void)
{
    int w = 0;
    for (int i = 0; i < nplans; i++) {
        if (plans[i].seen) {
            plans[i].seen = 0;
            plans[w++] = plans[i];
        } else {
            plan_entry_free(&plans[i]);
        }
    }
    nplans = w;
}

void sched_plans_free_all(void)
{
    offers_free_all();
    for (int i = 0; i < nplans; i++)
        plan_entry_free(&plans[i]);
    free(plans);
    plans = NULL;
    nplans = plans_cap = 0;
}
