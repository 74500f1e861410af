/* sched_preempt.c - preemption (DESIGN Part D): which running jobs of
 * lower priority a waiting job evicts, exclusive or shared, and their
 * eviction in the round. Runs on the scheduler thread. */
#include "sched_internal.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

#define PREEMPT_CANDIDATES 64

/* The candidates of one preemption and, for shared ones, the devices they
 * hold in round coordinates (island i of the round, device d). A shared
 * device frees only when every job holding it is evicted. */
typedef struct victims {
    sched_victim_t v[PREEMPT_CANDIDATES];
    int n;
    int nheld[PREEMPT_CANDIDATES];
    int *held[PREEMPT_CANDIDATES];      /* owned: 2 ints (i, d) per device */
} victims_t;

static void victims_free(victims_t *vs)
{
    for (int c = 0; c < vs->n; c++)
        free(vs->held[c]);
}

/* Loads the devices shared victim c holds. 0 or -1. */
static int victims_load_holds(store_t *st, const round_t *r, victims_t *vs, int c)
{
    int64_t total = 0;
    for (int i = 0; i < r->n; i++)
        total += alloc_island_size(r->isl[i]);
    int64_t *isl = malloc(sizeof *isl * (size_t)(total + 1));
    int64_t *idx = malloc(sizeof *idx * (size_t)(total + 1));
    int rc = -1, m = -1;
    if (isl && idx && (m = store_sched_holds(st, vs->v[c].job, isl, idx, (int)total)) >= 0 &&
        (vs->held[c] = malloc(sizeof(int) * 2 * (size_t)(m + 1)))) {
        for (int k = 0; k < m; k++) {
            int i = sched_round_island(r, isl[k]);
            if (i >= 0 && idx[k] >= 0 && idx[k] < alloc_island_size(r->isl[i])) {
                vs->held[c][2 * vs->nheld[c]] = i;
                vs->held[c][2 * vs->nheld[c]++ + 1] = (int)idx[k];
            }
        }
        rc = 0;
    }
    free(isl);
    free(idx);
    return rc;
}

/* Is job id among the chosen victims? */
static int chosen_has(const victims_t *vs, const int *chosen, int k, int64_t id)
{
    for (int i = 0; i < k; i++)
        if (vs->v[chosen[i]].job == id)
            return 1;
    return 0;
}

/* Would the gang fit if the chosen victims' devices were free? The round's
 * islands are copied (they include this round's placements), the victims'
 * devices freed in the copies: an exclusive victim's devices, and a shared
 * device when all its holders are chosen or, for a shared gang, when its
 * memory fits beside the holders left (it may join them there: the rule
 * sched_place follows); nothing in r changes. 1, 0, or -1 (OOM). */
static int fits_without(const round_t *r, const victims_t *vs, const int *chosen, int k,
                        const sched_gang_t *g)
{
    alloc_island_t *tmp[SCHED_MAX_ISLANDS] = {0};
    int *gone[SCHED_MAX_ISLANDS] = {0};            /* chosen shared holders per device */
    int64_t *gone_bytes[SCHED_MAX_ISLANDS] = {0};  /* and the memory they hold there */
    alloc_placement_t pl[64];
    int rc = -1;
    for (int i = 0; i < r->n; i++)
        if (!(gone[i] = calloc((size_t)alloc_island_size(r->isl[i]) + 1, sizeof(int))) ||
            !(gone_bytes[i] = calloc((size_t)alloc_island_size(r->isl[i]) + 1, sizeof(int64_t))))
            goto cleanup;
    for (int c = 0; c < k; c++)
        for (int h = 0; h < vs->nheld[chosen[c]]; h++) {
            int i = vs->held[chosen[c]][2 * h], d = vs->held[chosen[c]][2 * h + 1];
            gone[i][d]++;
            gone_bytes[i][d] += vs->v[chosen[c]].bytes;
        }
    for (int i = 0; i < r->n; i++) {
        int64_t n = alloc_island_size(r->isl[i]);
        if (!(tmp[i] = alloc_island_new(alloc_island_name(r->isl[i]),
                                        alloc_island_shape(r->isl[i]))))
            goto cleanup;
        for (int64_t d = 0; d < n; d++) {
            const sched_dev_t *dv = &r->devs[i][d];
            int freed = dv->job ? chosen_has(vs, chosen, k, dv->job)
                      : dv->shared == 0 ? 0
                      : gone[i][d] >= dv->shared ||
                        (g->shared && sched_dev_fits(dv, dv->held_bytes - gone_bytes[i][d],
                                                     g->bytes));
            alloc_island_set(tmp[i], d, freed ? ALLOC_FREE : alloc_island_get(r->isl[i], d));
        }
    }
    int a = alloc_gang(tmp, r->n, g->reqs, g->nreq, pl);
    if (a == ALLOC_OK)
        alloc_placements_release(pl, g->nreq);
    rc = a == ALLOC_OK ? 1 : a == ALLOC_ENOSPACE ? 0 : -1;
cleanup:
    for (int i = 0; i < r->n; i++) {
        alloc_island_free(tmp[i]);
        free(gone[i]);
        free(gone_bytes[i]);
    }
    return rc;
}

/* Records victim c's eviction in the round: its devices (exclusive) or its
 * holds (shared) are released; a device no one holds any more is free. */
static void round_evict(round_t *r, const victims_t *vs, int c)
{
    for (int i = 0; i < r->n; i++)
        for (int64_t d = 0; !vs->v[c].shared && d < alloc_island_size(r->isl[i]); d++)
            if (r->devs[i][d].job == vs->v[c].job) {
                r->devs[i][d].job = 0;
                if (!r->devs[i][d].shared)
                    alloc_island_set(r->isl[i], d, ALLOC_FREE);
            }
    for (int h = 0; h < vs->nheld[c]; h++) {
        sched_dev_t *dv = &r->devs[vs->held[c][2 * h]][vs->held[c][2 * h + 1]];
        dv->held_bytes -= dv->shared > 0 ? vs->v[c].bytes : 0;
        if (dv->shared > 0 && --dv->shared == 0 && !dv->job)
            alloc_island_set(r->isl[vs->held[c][2 * h]], vs->held[c][2 * h + 1], ALLOC_FREE);
    }
}

/* The fewest of vs (lowest priority first) whose eviction lets the gang
 * fit, into chosen. Count (0: none does), or -1 on OOM. */
static int choose_victims(const round_t *r, const victims_t *vs, int *chosen,
                          const sched_gang_t *g)
{
    int k = 0, fit = 0;
    for (int i = 0; i < vs->n && fit == 0; i++) {
        chosen[k++] = i;
        fit = fits_without(r, vs, chosen, k, g);
    }
    if (fit != 1)
        return fit < 0 ? -1 : 0;
    for (int c = k - 1; c >= 0 && k > 1; c--) {    /* spare the unnecessary */
        int save = chosen[c];
        memmove(&chosen[c], &chosen[c + 1], sizeof *chosen * (size_t)(k - c - 1));
        if (fits_without(r, vs, chosen, k - 1, g) == 1) {
            k--;
            continue;
        }
        memmove(&chosen[c + 1], &chosen[c], sizeof *chosen * (size_t)(k - c - 1));
        chosen[c] = save;
    }
    return k;
}

/* A job that cannot be placed evicts the fewest, lowest-priority
 * preemptible jobs of lower priority that make room, exclusive or shared
 * (a shared gang evicts shared jobs only to make room in the devices'
 * memory, never to join devices it could join as they are):
 * candidates are added lowest priority first until the gang fits, then any
 * whose eviction turns out unnecessary is kept. The evicted jobs are
 * requeued (store) and their devices freed in the round. 1 when room was
 * made, 0 when none can be, -1 on a store error. */
int sched_try_preempt(store_t *st, round_t *r, const sched_job_t *job, const sched_gang_t *g)
{
    victims_t vs = {.n = 0};
    int chosen[PREEMPT_CANDIDATES], rc = -1;
    int n = store_sched_victims(st, job->priority, vs.v, PREEMPT_CANDIDATES);
    if (n <= 0)
        return n < 0 ? -1 : 0;
    for (; vs.n < n; vs.n++)
        if (vs.v[vs.n].shared && victims_load_holds(st, r, &vs, vs.n) != 0) {
            vs.n++;
            goto cleanup;
        }
    int k = choose_victims(r, &vs, chosen, g);
    if (k <= 0) {
        rc = k;
        goto cleanup;
    }
    for (int c = 0; c < k; c++) {
        int64_t victim = vs.v[chosen[c]].job;
        int prc = store_sched_preempt(st, victim, job->id, job->priority);
        if (prc < 0)
            goto cleanup;
        if (prc == 0)   /* 1: it ended meanwhile; its devices are free all the same */
            log_info("job %lld preempted by job %lld", (long long)victim, (long long)job->id);
        round_evict(r, &vs, chosen[c]);
    }
    rc = 1;
cleanup:
    victims_free(&vs);
    return rc;
}
