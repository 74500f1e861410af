/* sched_place.c - the round: the cluster as the allocator sees it for one
 * admission round (sched_internal.h), gang placement of shared jobs on it,
 * and the reasons a job cannot be placed. No thread of its own: the
 * scheduler thread calls it. */
#include "sched_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Written once by sched_start() before the thread starts; read-only after
 * (sched_internal.h). */
sched_config_t sched_cfg;

void sched_round_free(round_t *r)
{
    for (int i = 0; i < r->n; i++) {
        alloc_island_free(r->isl[i]);
        free(r->devs[i]);
    }
    r->n = 0;
}

/* The round's index of the island with store id island_id, or -1. */
int sched_round_island(const round_t *r, int64_t island_id)
{
    for (int i = 0; i < r->n; i++)
        if (r->island_id[i] == island_id)
            return i;
    return -1;
}

/* The scheduler's mirror of each island's devices as store_sched_devices
 * last read them, with the store_devices_gen() noted before that read: a
 * pass re-reads an island only when the generation moved. Reading 2,048
 * devices (with their workers and shared holds) was 1-2 ms, most of a
 * pass at that scale, although most passes follow a report, which changes
 * none of it. A stale mirror costs nothing but a failed allocation: every
 * write of one re-checks the devices in its own transaction. Scheduler
 * thread only (and single-threaded unit tests); owns devs, freed by
 * sched_round_cache_free. */
typedef struct dev_mirror {
    int valid;
    uint64_t gen;
    int64_t island_id;
    int64_t n;
    sched_dev_t *devs;
    /* own_in: devs holds, besides the island as of gen, every change this
     * thread's connection committed up to its own_commits-th device
     * commit (sched_round_keep, when others committed too). While that is
     * still all of them, a refresh patches in only the others' changes
     * since gen: re-reading the scheduler's own allocations was most of
     * the passes over 1 ms under bench_passes (a whole-island one is
     * "everything" in the record, a read of all 2,048 devices). */
    int own_in;
    uint64_t own_commits;
} dev_mirror_t;

static dev_mirror_t mirrors[SCHED_MAX_ISLANDS];
static uint64_t mirror_reads, mirror_patches;
/* At most this many changed devices are read one by one (store_devlog_
 * since); more, and the whole island is read (the point reads would cost
 * about as much). */
#define MIRROR_PATCH_MAX 128

void sched_round_cache_free(void)
{
    for (int i = 0; i < SCHED_MAX_ISLANDS; i++) {
        free(mirrors[i].devs);
        memset(&mirrors[i], 0, sizeof mirrors[i]);
    }
}

void sched_round_invalidate(void)
{
    for (int i = 0; i < SCHED_MAX_ISLANDS; i++)
        mirrors[i].valid = 0;
}

uint64_t sched_round_device_reads(void) { return mirror_reads; }
uint64_t sched_round_device_patches(void) { return mirror_patches; }

/* Island i of sched_cfg (n devices) as of now into m: read again only when
 * a change was committed since the last read. 0 or -1 (m then invalid). */
static int mirror_refresh(store_t *st, dev_mirror_t *m, const island_desc_t *d, int64_t n)
{
    uint64_t gen = store_devices_gen();
    if (m->valid && m->gen == gen && m->n == n)
        return 0;
    if (m->valid && m->n == n) {
        /* Only what changed since, when it is little: the jobs that ended
         * (their devices freed here, no read) and the devices named one by
         * one (read again, after: they may have been taken since). */
        int64_t idx[MIRROR_PATCH_MAX];
        store_devlog_view_t v = {.idx = idx, .cap = MIRROR_PATCH_MAX};
        if (m->own_in && m->own_commits == store_devices_commits(st))
            v.skip_writer = store_devlog_writer(st);
        if (store_devlog_since(m->gen, m->island_id, &v) == 0) {
            for (int j = 0; j < v.njobs; j++)
                for (int64_t k = 0; k < n; k++)
                    if (m->devs[k].job == v.jobs[j])
                        m->devs[k].job = 0;
            if (store_sched_devices_patch(st, m->island_id, m->devs, n, idx, v.n) == 0) {
                m->gen = v.upto;
                m->own_in = 0;
                mirror_patches++;
                return 0;
            }
        }
    }
    m->valid = 0;
    m->own_in = 0;
    if (m->n != n || !m->devs) {
        free(m->devs);
        m->n = 0;
        if (!(m->devs = calloc((size_t)n, sizeof(sched_dev_t))))
            return -1;
        m->n = n;
    }
    m->island_id = store_island_id(st, d->name);
    if (m->island_id < 0 || store_sched_devices(st, m->island_id, m->devs, n) != 0)
        return -1;
    mirror_reads++;
    m->gen = gen;
    m->valid = 1;
    return 0;
}

int sched_round_load(store_t *st, round_t *r)
{
    memset(r, 0, sizeof *r);
    r->own_commits = store_devices_commits(st);
    for (int i = 0; i < sched_cfg.nislands && i < SCHED_MAX_ISLANDS; i++) {
        const island_desc_t *d = &sched_cfg.islands[i];
        int64_t n = shape_numel(&d->shape);
        dev_mirror_t *m = &mirrors[i];
        r->isl[i] = alloc_island_new(d->name, &d->shape);
        r->devs[i] = malloc((size_t)n * sizeof(sched_dev_t));
        r->n = i + 1;
        if (!r->isl[i] || !r->devs[i] || mirror_refresh(st, m, d, n) != 0)
            return -1;
        r->island_id[i] = m->island_id;
        r->gen[i] = m->gen;
        memcpy(r->devs[i], m->devs, (size_t)n * sizeof(sched_dev_t));
        for (int64_t k = 0; k < n; k++) {
            const sched_dev_t *dv = &r->devs[i][k];
            alloc_island_set(r->isl[i], k, dv->worker == 0 ? ALLOC_DOWN
                                           : dv->job || dv->shared ? ALLOC_BUSY : ALLOC_FREE);
        }
    }
    return 0;
}

/* The round's own commits moved the generation by `own` since it was
 * loaded; if the generation moved by exactly that since an island's
 * mirror was read, nobody else changed devices (a commit counts only
 * after it is visible) and the round's view, which recorded each of its
 * changes, is what a read would return now. Every allocation of a round
 * used to be followed by a read of the whole island in the next pass
 * (2,048 devices: 0.3 ms, 17 % of the scheduler's CPU under
 * bench_passes). When another writer committed too, the view is the
 * island as of the mirror's generation plus this connection's changes:
 * it is kept with that generation (own_in), and the next refresh patches
 * in the others' changes alone. The view only ever took devices it saw
 * free, and the others' changes come in as freed jobs (which touch only
 * devices holding those jobs) and devices read again (whatever they hold
 * now, ours included), so the patched mirror is what a read would give. */
void sched_round_keep(store_t *st, const round_t *r)
{
    uint64_t commits = store_devices_commits(st), own = commits - r->own_commits;
    uint64_t gen = store_devices_gen();
    for (int i = 0; i < r->n && own > 0; i++) {
        dev_mirror_t *m = &mirrors[i];
        int64_t n = alloc_island_size(r->isl[i]);
        if (!m->valid || m->n != n || m->island_id != r->island_id[i] || m->gen != r->gen[i])
            continue;
        memcpy(m->devs, r->devs[i], (size_t)n * sizeof(sched_dev_t));
        if (gen - m->gen == own) {
            m->gen = gen;
            m->own_in = 0;
        } else {
            m->own_in = 1;
            m->own_commits = commits;
        }
    }
}

int sched_round_current(store_t *st, const round_t *r, int i)
{
    if (r->evicted || i < 0 || i >= r->n)
        return 0;
    const dev_mirror_t *m = &mirrors[i];
    uint64_t own = store_devices_commits(st) - r->own_commits;
    return m->valid && m->island_id == r->island_id[i] && store_devices_gen() - m->gen == own;
}

/* Describes why a job cannot be placed now, for the dashboard and the
 * job object, e.g. "needs a 4x4 slice on west; largest free block is 2x4". */
void sched_pending_reason(round_t *r, const job_plan_t *plan, const alloc_request_t *reqs,
                          char *buf, size_t len)
{
    for (int s = 0; s < plan->nslices; s++) {
        alloc_placement_t pl;
        if (alloc_gang(r->isl, r->n, &reqs[s], 1, &pl) == ALLOC_OK) {
            /* Fits alone: undo, it is the combination that does not fit. */
            for (int k = 0; k < pl.nshards; k++)
                alloc_island_set(r->isl[pl.island], pl.devices[k], ALLOC_FREE);
            alloc_placements_release(&pl, 1);
            continue;
        }
        char want[32];
        mesh_shape_format(&reqs[s].shape, want, sizeof want);
        size_t off = (size_t)snprintf(buf, len, "needs a %s slice (%s) on %s;", want,
                                      plan->slices[s].name,
                                      reqs[s].island ? reqs[s].island : "any island");
        for (int i = 0; i < r->n && off < len; i++) {
            if (reqs[s].island && strcmp(reqs[s].island, alloc_island_name(r->isl[i])) != 0)
                continue;
            shape_t big;
            char got[32];
            const char *isl = alloc_island_name(r->isl[i]);
            if (alloc_largest_free(r->isl[i], &big) > 0) {
                mesh_shape_format(&big, got, sizeof got);
                off += (size_t)snprintf(buf + off, len - off, " largest free block on %s is %s;",
                                        isl, got);
            } else {
                off += (size_t)snprintf(buf + off, len - off, " no free device on %s;", isl);
            }
        }
        if (off > 0 && off < len)
            buf[off - 1] = '\0';
        return;
    }
    snprintf(buf, len, "needs %d slices at once; they do not all fit together yet",
             plan->nslices);
}

/* An island a blocked job could use: lower-priority jobs may not take it
 * (no backfill on contended islands, so a big job is never starved). */
int sched_touches_blocked(const alloc_request_t *reqs, int n, round_t *r, const int *blocked)
{
    for (int s = 0; s < n; s++)
        for (int i = 0; i < r->n; i++)
            if (blocked[i] && (!reqs[s].island || strcmp(reqs[s].island, alloc_island_name(r->isl[i])) == 0))
                return 1;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Shared placement (DESIGN Part D). In a round, r->isl marks every held
 * device BUSY; r->devs says by whom: job (an exclusive holder) or shared
 * (how many shared jobs). Placements made in the round update both. */

/* Places a shared job's gang on devices no exclusive job holds, least
 * loaded first: the gang is tried with only unheld devices free, then also
 * those held by at most 1 shared job, 2, ...; the first bound at which it
 * fits wins (so it lands on the least-loaded feasible devices). A held
 * device is a candidate only where the gang's memory fits beside its
 * holds, unless `memory` is 0. Works on copies of the round's islands.
 * ALLOC_OK with pl filled, ALLOC_ENOSPACE or ALLOC_ENOMEM; *kept counts
 * the candidates memory kept out. */
static int place_shared(const round_t *r, const sched_gang_t *g, alloc_placement_t *pl,
                        int memory, int *kept)
{
    int maxload = 0, a = ALLOC_ENOSPACE;
    for (int i = 0; i < r->n; i++)
        for (int64_t d = 0; d < alloc_island_size(r->isl[i]); d++)
            if (r->devs[i][d].shared > maxload && !r->devs[i][d].job)
                maxload = r->devs[i][d].shared;
    for (int load = 0; load <= maxload && a == ALLOC_ENOSPACE; load++) {
        alloc_island_t *tmp[SCHED_MAX_ISLANDS] = {0};
        int ok = 1;
        for (int i = 0; i < r->n && ok; i++) {
            if (!(tmp[i] = alloc_island_new(alloc_island_name(r->isl[i]),
                                            alloc_island_shape(r->isl[i])))) {
                ok = 0;
                break;
            }
            for (int64_t d = 0; d < alloc_island_size(r->isl[i]); d++) {
                const sched_dev_t *dv = &r->devs[i][d];
                alloc_state_t s0 = alloc_island_get(r->isl[i], d);
                int shareable = s0 == ALLOC_BUSY && !dv->job && dv->shared > 0 &&
                                dv->shared <= load;
                if (shareable && memory && !sched_dev_fits(dv, dv->held_bytes, g->bytes)) {
                    shareable = 0;
                    ++*kept;
                }
                alloc_island_set(tmp[i], d, shareable ? ALLOC_FREE : s0);
            }
        }
        a = ok ? alloc_gang(tmp, r->n, g->reqs, g->nreq, pl) : ALLOC_ENOMEM;
        for (int i = 0; i < r->n; i++)
            alloc_island_free(tmp[i]);
    }
    return a;
}

int sched_place(const round_t *r, const sched_gang_t *g, alloc_placement_t *pl, int *by_memory)
{
    int kept = 0, a;
    *by_memory = 0;
    if (!g->shared)
        return alloc_gang(r->isl, r->n, g->reqs, g->nreq, pl);
    a = place_shared(r, g, pl, 1, &kept);
    if (a == ALLOC_ENOSPACE && kept > 0) {
        /* Would it fit if memory were no bound? Then memory is the reason. */
        int b = place_shared(r, g, pl, 0, &kept);
        if (b == ALLOC_OK)
            alloc_placements_release(pl, g->nreq);
        *by_memory = b == ALLOC_OK;
        a = b == ALLOC_ENOMEM ? b : a;
    }
    return a;
}

/* n bytes as "1.5 MiB" (or KiB, or bytes) into buf. */
static const char *bytes_text(int64_t n, char *buf, size_t len)
{
    if (n >= 1024 * 1024)
        snprintf(buf, len, "%.1f MiB", (double)n / (1024.0 * 1024.0));
    else if (n >= 1024)
        snprintf(buf, len, "%.1f KiB", (double)n / 1024.0);
    else
        snprintf(buf, len, "%lld bytes", (long long)n);
    return buf;
}

void sched_memory_reason(const round_t *r, const sched_gang_t *g, char *buf, size_t len)
{
    /* The most memory left on any device it could share (on an island its
     * slices may use), and that device's memory: what the user needs to
     * see to judge the wait. */
    int64_t best = -1, cap = 0;
    int usable[SCHED_MAX_ISLANDS] = {0};
    for (int s = 0; s < g->nreq; s++)
        for (int i = 0; i < r->n; i++)
            usable[i] |= !g->reqs[s].island ||
                         strcmp(g->reqs[s].island, alloc_island_name(r->isl[i])) == 0;
    for (int i = 0; i < r->n; i++)
        for (int64_t d = 0; usable[i] && d < alloc_island_size(r->isl[i]); d++) {
            const sched_dev_t *dv = &r->devs[i][d];
            if (dv->worker && !dv->job && dv->shared > 0 && dv->cap_bytes > 0 &&
                dv->cap_bytes - dv->held_bytes > best) {
                best = dv->cap_bytes - dv->held_bytes;
                cap = dv->cap_bytes;
            }
        }
    char need[32], left[32], all[32];
    snprintf(buf, len, "waiting for device memory: needs %s on each device beside the shared"
             " jobs there; the most any shared device has left is %s of %s (its worker's object"
             " store cap over its devices)", bytes_text(g->bytes, need, sizeof need),
             bytes_text(best > 0 ? best : 0, left, sizeof left), bytes_text(cap, all, sizeof all));
}

/* Records a placement made in this round in r (see above). */
void sched_round_take(round_t *r, const alloc_placement_t *pl, const sched_gang_t *g,
                      int64_t job)
{
    for (int s = 0; s < g->nreq; s++)
        for (int k = 0; k < pl[s].nshards; k++) {
            sched_dev_t *dv = &r->devs[pl[s].island][pl[s].devices[k]];
            if (g->shared) {
                dv->shared++;
                dv->held_bytes += g->bytes;
            } else {
                dv->job = job;
            }
            alloc_island_set(r->isl[pl[s].island], pl[s].devices[k], ALLOC_BUSY);
        }
}
