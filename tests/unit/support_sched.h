/* support_sched.h - teardown of the scheduler unit tests that run rounds
 * on a support_worker_fixture: what the scheduler keeps between rounds
 * (the device mirror, cached plans, the tenants' usage) goes with the
 * store, so the next test starts as a fresh atolld would. Include after
 * support_store.h and sched_internal.h. */
#ifndef SUPPORT_SCHED_H
#define SUPPORT_SCHED_H

static inline int support_sched_teardown(void **state)
{
    sched_round_cache_free();
    sched_plans_free_all();
    sched_admit_free();
    return support_store_teardown(state);
}

#endif
