/* test_worker_jarena.c - the poll answers' arena (workers/jarena.c): a
 * tree built inside jarena_begin/jarena_end lives in the arena, its frees
 * (on any thread) count down, a reset rewinds only when nothing is live
 * and keeps at most its first chunks, a retired arena lasts as long as a
 * value from it; allocations outside the window, or
 * too large, come from the heap. Sanitizer builds bypass the arena: every
 * allocation is the heap's there, which the same checks confirm. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "jarena.h"

/* A tree of n objects of a few members, as a poll answer's tasks. */
static json_t *tasks(int n)
{
    json_t *arr = json_array();
    assert_non_null(arr);
    for (int i = 0; i < n; i++) {
        json_t *o = json_pack("{s:I, s:s, s:[i,i], s:f}", "task", (json_int_t)i, "op", "add",
                              "shards", 0, 1, "value", 1.5);
        assert_non_null(o);
        assert_int_equal(json_array_append_new(arr, o), 0);
    }
    return arr;
}

static json_t *built_in(jarena_t *a, int n)
{
    jarena_begin(a);
    json_t *t = tasks(n);
    jarena_end();
    return t;
}

static void test_tree_lives_in_arena(void **state)
{
    (void)state;
    jarena_t *a = jarena_new();
    assert_non_null(a);
    json_t *t = built_in(a, 100);
    json_t *heap = tasks(3);                   /* outside the window: the heap's */
    if (!jarena_enabled()) {
        assert_int_equal(jarena_live(a), 0);
        assert_int_equal(jarena_bytes(a), 0);
    } else {
        assert_true(jarena_live(a) > 100);
        assert_true(jarena_bytes(a) > 0);
        assert_int_equal(jarena_reset(a), 0);   /* live: left as it is */
        assert_int_equal(json_integer_value(json_object_get(json_array_get(t, 99), "task")), 99);
    }
    long live = jarena_live(a);
    json_decref(heap);
    assert_int_equal(jarena_live(a), live);      /* heap frees leave it */
    json_decref(t);
    assert_int_equal(jarena_live(a), 0);
    assert_int_equal(jarena_reset(a), 1);
    /* Rewound: the same tree again takes no more chunks. */
    size_t bytes = jarena_bytes(a);
    t = built_in(a, 100);
    assert_int_equal(jarena_bytes(a), bytes);
    json_decref(t);
    jarena_retire(a);
}

/* A string past the arena's largest block is the heap's: its free does
 * not count down the arena. */
static void test_large_value_from_heap(void **state)
{
    (void)state;
    jarena_t *a = jarena_new();
    assert_non_null(a);
    char *big = malloc(20000);
    assert_non_null(big);
    memset(big, 'x', 19999);
    big[19999] = '\0';
    jarena_begin(a);
    json_t *s = json_string(big);
    jarena_end();
    assert_non_null(s);
    long live = jarena_live(a);
    assert_true(live <= 1);                      /* the json_t itself, not its text */
    assert_int_equal(strlen(json_string_value(s)), 19999);
    json_decref(s);
    assert_int_equal(jarena_live(a), 0);
    free(big);
    jarena_retire(a);
}

static void *decref_main(void *arg)
{
    json_decref(arg);
    return NULL;
}

/* Frees tree t on a thread of its own. */
static void decref_elsewhere(json_t *t)
{
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, decref_main, t), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
}

/* A tree may be freed on another thread. */
static void test_freed_elsewhere(void **state)
{
    (void)state;
    jarena_t *a = jarena_new();
    assert_non_null(a);
    json_t *t = built_in(a, 50);
    decref_elsewhere(t);
    assert_int_equal(jarena_live(a), 0);
    assert_int_equal(jarena_reset(a), 1);
    jarena_retire(a);
}

/* An arena retired while a tree from it is live stays until the tree is
 * freed (here on another thread), which frees it: the tree stays readable
 * meanwhile (ASan builds check the order, LeakSanitizer the end). */
static void test_retired_outlived(void **state)
{
    (void)state;
    long alive = jarena_alive();
    jarena_t *a = jarena_new();
    assert_non_null(a);
    assert_int_equal(jarena_alive(), alive + 1);
    json_t *t = built_in(a, 200);
    if (jarena_enabled())
        assert_int_equal(jarena_reset(a), 0);
    jarena_retire(a);
    /* Still there while the tree is (bypassed: nothing of the tree in it). */
    assert_int_equal(jarena_alive(), alive + jarena_enabled());
    assert_int_equal(json_integer_value(json_object_get(json_array_get(t, 199), "task")), 199);
    assert_string_equal(json_string_value(json_object_get(json_array_get(t, 7), "op")), "add");
    decref_elsewhere(t);
    assert_int_equal(jarena_alive(), alive);   /* freed by the tree's last free */
}

/* One huge answer grows the arena; the reset after it keeps 4 chunks. */
static void test_reset_trims(void **state)
{
    (void)state;
    jarena_t *a = jarena_new();
    assert_non_null(a);
    json_t *t = built_in(a, 20000);
    if (jarena_enabled())
        assert_true(jarena_bytes(a) > (size_t)4 * 64 * 1024);
    json_decref(t);
    assert_int_equal(jarena_reset(a), 1);
    assert_true(jarena_bytes(a) <= (size_t)4 * 64 * 1024);
    t = built_in(a, 10);
    json_decref(t);
    jarena_retire(a);
}

int main(void)
{
    jarena_install();                            /* before any jansson value */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_lives_in_arena),
        cmocka_unit_test(test_large_value_from_heap),
        cmocka_unit_test(test_freed_elsewhere),
        cmocka_unit_test(test_reset_trims),
        cmocka_unit_test(test_retired_outlived),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
