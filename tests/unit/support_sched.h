/* support_sched.h - fixture of the scheduler unit tests that run rounds
 * on a support_worker_fixture. Its teardown frees what the scheduler keeps
 * between rounds (the device mirror, cached plans, the tenants' usage)
 * with the store, so the next test starts as a fresh atolld would.
 * Include after support_store.h and sched_internal.h. */
#ifndef SUPPORT_SCHED_H
#define SUPPORT_SCHED_H

/* A support_worker_fixture on islands[0..n) (ndev devices on the first),
 * sched_cfg set to them, no round cut short by its time (a loaded
 * machine's would be). */
static inline support_worker_fixture_t *support_sched_fixture(const island_desc_t *islands,
                                                              int n, int ndev)
{
    support_worker_fixture_t *f = support_worker_fixture(islands, n, ndev);
    sched_cfg = (sched_config_t){.islands = islands, .nislands = n,
                                 .lease_us = 60 * 1000000LL};
    sched_cfg.round_admit_us = INT64_MAX;
    return f;
}

static inline int support_sched_teardown(void **state)
{
    sched_round_cache_free();
    sched_plans_free_all();
    sched_admit_free();
    return support_store_teardown(state);
}

#endif
