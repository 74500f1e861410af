/* test_coll.c - collectives simulated in-process.
 *
 * simulate() plays every shard of a slice: it asks coll_group() for the
 * groups, builds each shard's pieces with coll_piece(), routes them to the
 * receivers' inboxes the way a worker's data plane would, then runs
 * coll_combine() on every shard. Each test compares the results with a
 * reference written directly from the op's definition (group membership
 * spelled out by hand, not computed with coll_group). Values are small
 * integers so every reduction is exact in f32. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "coll.h"

#define MAXS 16

static shape_t shp(int rank, int64_t d0, int64_t d1, int64_t d2)
{
    shape_t s;
    memset(&s, 0, sizeof s);
    s.rank = rank;
    s.dim[0] = d0;
    s.dim[1] = d1;
    s.dim[2] = d2;
    for (int i = rank; i < TENSOR_MAX_RANK; i++)
        s.dim[i] = 0;
    return s;
}

static op_t mkop(opcode_t code, unsigned mesh_axes)
{
    op_t op;
    memset(&op, 0, sizeof op);
    op.code = code;
    op.mesh_axes = mesh_axes;
    op.nargs = 1;
    op.arg[0] = 0;
    op.arg[1] = -1;
    return op;
}

static float arg_value(int shard, int64_t i)
{
    return (float)((shard * 37 + i * 11) % 17) - 8.0f;
}

/* One argument per shard, all of shape s. */
static void make_args(const shape_t *slice, const shape_t *s, tensor_t **args)
{
    for (int k = 0; k < shape_numel(slice); k++) {
        args[k] = tensor_new(s);
        assert_non_null(args[k]);
        for (int64_t i = 0; i < shape_numel(s); i++)
            args[k]->data[i] = arg_value(k, i);
    }
}

static void free_all(tensor_t **ts, int n)
{
    for (int i = 0; i < n; i++) {
        tensor_free(ts[i]);
        ts[i] = NULL;
    }
}

/* Routes pieces as the data plane does, then combines on every shard. If
 * own_whole, each shard puts its whole argument in its own inbox slot
 * instead of coll_piece(pos -> pos). */
static void simulate(const shape_t *slice, const op_t *op, tensor_t **args, tensor_t **outs,
                     int own_whole)
{
    int nsh = (int)shape_numel(slice);
    int n[MAXS], pos[MAXS], mem[MAXS][MAXS];
    tensor_t *inbox[MAXS][MAXS];
    memset(inbox, 0, sizeof inbox);
    for (int k = 0; k < nsh; k++) {
        assert_int_equal(coll_group(slice, op->mesh_axes, k, mem[k], &n[k], &pos[k]), 0);
        assert_int_equal(mem[k][pos[k]], k);
    }
    for (int k = 0; k < nsh; k++) {
        if (op->code == OP_PPERMUTE) {
            int d = op->perm ? op->perm[n[k] + pos[k]]
                             : (int)(((pos[k] + op->shift) % n[k] + n[k]) % n[k]);
            assert_int_equal(coll_ppermute_target(op, n[k], pos[k]), d);
            if (d < 0)
                continue;                            /* pairs: this one sends nothing */
            int dst = mem[k][d];
            assert_null(inbox[dst][0]);              /* a permutation: one sender each */
            inbox[dst][0] = coll_piece(op, args[k], n[k], pos[k], d);
            assert_non_null(inbox[dst][0]);
            assert_int_equal(coll_ppermute_source(op, n[dst], d), pos[k]);
            continue;
        }
        for (int d = 0; d < n[k]; d++) {
            int dst = mem[k][d];
            inbox[dst][pos[k]] = own_whole && dst == k ? tensor_clone(args[k])
                                                       : coll_piece(op, args[k], n[k], pos[k], d);
            assert_non_null(inbox[dst][pos[k]]);
        }
    }
    for (int k = 0; k < nsh; k++) {
        outs[k] = NULL;
        assert_int_equal(coll_combine(op, (const tensor_t *const *)inbox[k], n[k], pos[k],
                                      &outs[k]), 0);
        assert_true(shape_equal(&outs[k]->shape, &op->shape));
        free_all(inbox[k], MAXS);
    }
}

static void expect_values(const tensor_t *t, const float *want, int shard)
{
    for (int64_t i = 0; i < shape_numel(&t->shape); i++) {
        if (t->data[i] != want[i])
            fail_msg("shard %d element %lld: got %g want %g", shard, (long long)i, t->data[i],
                     want[i]);
    }
}

static void test_groups(void **state)
{
    (void)state;
    int mem[MAXS], n, pos;
    shape_t s22 = shp(2, 2, 2, 0), s24 = shp(2, 2, 4, 0), s222 = shp(3, 2, 2, 2);
    assert_int_equal(coll_group(&s22, 0, 2, mem, &n, &pos), 0);
    assert_int_equal(n, 4);
    assert_int_equal(pos, 2);
    assert_int_equal(coll_group(&s24, 1u << 1, 6, mem, &n, &pos), 0);   /* row 1 */
    assert_int_equal(n, 4);
    assert_int_equal(pos, 2);
    assert_true(mem[0] == 4 && mem[1] == 5 && mem[2] == 6 && mem[3] == 7);
    assert_int_equal(coll_group(&s24, 1u << 0, 6, mem, &n, &pos), 0);   /* column 2 */
    assert_int_equal(n, 2);
    assert_int_equal(pos, 1);
    assert_true(mem[0] == 2 && mem[1] == 6);
    assert_int_equal(coll_group(&s24, 3u, 6, mem, &n, &pos), 0);        /* both = all */
    assert_int_equal(n, 8);
    assert_int_equal(pos, 6);
    /* 2x2x2, axes {0,2}: shards sharing coordinate 1 with shard 3 = (0,1,1). */
    assert_int_equal(coll_group(&s222, 5u, 3, mem, &n, &pos), 0);
    assert_int_equal(n, 4);
    assert_int_equal(pos, 1);
    assert_true(mem[0] == 2 && mem[1] == 3 && mem[2] == 6 && mem[3] == 7);
    assert_int_equal(coll_group(&s22, 1u << 2, 0, mem, &n, &pos), -1);  /* no axis 2 */
    assert_int_equal(coll_group(&s22, 0, 4, mem, &n, &pos), -1);
    assert_int_equal(coll_group(&s22, 0, -1, mem, &n, &pos), -1);
}

static void test_all_reduce(void **state)
{
    (void)state;
    shape_t slice = shp(2, 2, 2, 0), s = shp(1, 3, 0, 0);
    tensor_t *args[4], *outs[4];
    make_args(&slice, &s, args);
    reduce_kind_t kinds[] = {REDUCE_SUM, REDUCE_MAX, REDUCE_MIN};
    for (int r = 0; r < 3; r++) {
        op_t op = mkop(OP_ALL_REDUCE, 0);
        op.reduce = kinds[r];
        op.shape = s;
        simulate(&slice, &op, args, outs, 0);
        float want[3];
        for (int i = 0; i < 3; i++) {
            float acc = arg_value(0, i);
            for (int k = 1; k < 4; k++) {
                float v = arg_value(k, i);
                acc = kinds[r] == REDUCE_SUM ? acc + v
                      : kinds[r] == REDUCE_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
            }
            want[i] = acc;
        }
        for (int k = 0; k < 4; k++)
            expect_values(outs[k], want, k);
        free_all(outs, 4);
    }
    /* Hand check of element 0: (37k % 17) - 8 for k = 0..3 is -8, -5, -2, 1. */
    op_t op = mkop(OP_ALL_REDUCE, 0);
    op.shape = s;
    simulate(&slice, &op, args, outs, 0);
    assert_true(outs[3]->data[0] == -14.0f);
    free_all(outs, 4);
    free_all(args, 4);
}

static void test_all_gather(void **state)
{
    (void)state;
    shape_t slice = shp(2, 2, 2, 0), s = shp(2, 2, 3, 0);
    tensor_t *args[4], *outs[4];
    make_args(&slice, &s, args);
    op_t op = mkop(OP_ALL_GATHER, 0);
    op.axis = 0;
    op.shape = shp(2, 8, 3, 0);
    simulate(&slice, &op, args, outs, 0);
    float want[24];
    for (int p = 0; p < 4; p++) {           /* rows 2p, 2p+1 come from shard p */
        for (int i = 0; i < 6; i++)
            want[p * 6 + i] = arg_value(p, i);
    }
    for (int k = 0; k < 4; k++)
        expect_values(outs[k], want, k);
    free_all(outs, 4);

    op.axis = 1;
    op.shape = shp(2, 2, 12, 0);
    simulate(&slice, &op, args, outs, 0);
    for (int r = 0; r < 2; r++) {           /* out[r][p*3+c] = arg_p[r][c] */
        for (int p = 0; p < 4; p++) {
            for (int c = 0; c < 3; c++)
                want[r * 12 + p * 3 + c] = arg_value(p, r * 3 + c);
        }
    }
    for (int k = 0; k < 4; k++)
        expect_values(outs[k], want, k);
    free_all(outs, 4);
    free_all(args, 4);
}

static void test_reduce_scatter(void **state)
{
    (void)state;
    shape_t slice = shp(2, 2, 2, 0), s = shp(2, 2, 8, 0);
    tensor_t *args[4], *outs[4];
    make_args(&slice, &s, args);
    op_t op = mkop(OP_REDUCE_SCATTER, 0);
    op.axis = 1;
    op.reduce = REDUCE_SUM;
    op.shape = shp(2, 2, 2, 0);
    simulate(&slice, &op, args, outs, 0);
    for (int k = 0; k < 4; k++) {           /* out_k[r][c] = sum_p arg_p[r][2k+c] */
        float want[4];
        for (int r = 0; r < 2; r++) {
            for (int c = 0; c < 2; c++) {
                float acc = 0;
                for (int p = 0; p < 4; p++)
                    acc += arg_value(p, r * 8 + 2 * k + c);
                want[r * 2 + c] = acc;
            }
        }
        expect_values(outs[k], want, k);
    }
    free_all(outs, 4);

    op.axis = 0;
    op.reduce = REDUCE_MAX;
    s = shp(1, 4, 0, 0);
    free_all(args, 4);
    make_args(&slice, &s, args);
    op.shape = shp(1, 1, 0, 0);
    simulate(&slice, &op, args, outs, 0);
    for (int k = 0; k < 4; k++) {
        float m = arg_value(0, k);
        for (int p = 1; p < 4; p++)
            m = arg_value(p, k) > m ? arg_value(p, k) : m;
        expect_values(outs[k], &m, k);
    }
    free_all(outs, 4);
    free_all(args, 4);
}

static void test_ppermute(void **state)
{
    (void)state;
    shape_t slice = shp(2, 2, 2, 0), s = shp(1, 2, 0, 0);
    tensor_t *args[4], *outs[4];
    make_args(&slice, &s, args);
    /* shift -1: shard k gets shard k+1's value; 1: k-1's; 5 behaves as 1. */
    int64_t shifts[] = {-1, 1, 5, 4};
    int src_of[][4] = {{1, 2, 3, 0}, {3, 0, 1, 2}, {3, 0, 1, 2}, {0, 1, 2, 3}};
    for (int t = 0; t < 4; t++) {
        op_t op = mkop(OP_PPERMUTE, 0);
        op.shift = shifts[t];
        op.shape = s;
        simulate(&slice, &op, args, outs, 0);
        for (int k = 0; k < 4; k++) {
            float want[2] = {arg_value(src_of[t][k], 0), arg_value(src_of[t][k], 1)};
            expect_values(outs[k], want, k);
        }
        free_all(outs, 4);
    }
    op_t op = mkop(OP_PPERMUTE, 0);
    op.shift = -7;
    assert_int_equal(coll_ppermute_source(&op, 4, 0), 3);   /* (0 + 7) mod 4 */
    op.shift = INT64_MIN;
    assert_int_equal(coll_ppermute_source(&op, 3, 0), 2);   /* -2^63 = 1 mod 3 */
    assert_int_equal(coll_ppermute_source(&op, 0, 0), -1);
    /* pairs [[0, 2], [3, 0], [2, 3]]: 1 sends nothing and gets zeros. */
    int32_t perm[8] = {3, -1, 0, 2, /* targets by source: */ 2, -1, 3, 0};
    op = mkop(OP_PPERMUTE, 0);
    op.perm = perm;
    op.nperm = 4;
    op.shape = s;
    simulate(&slice, &op, args, outs, 0);
    int from[4] = {3, -1, 0, 2};
    for (int k = 0; k < 4; k++) {
        float want[2] = {from[k] < 0 ? 0.0f : arg_value(from[k], 0),
                         from[k] < 0 ? 0.0f : arg_value(from[k], 1)};
        expect_values(outs[k], want, k);
    }
    free_all(outs, 4);
    assert_int_equal(coll_ppermute_source(&op, 4, 1), -1);
    assert_int_equal(coll_ppermute_target(&op, 4, 1), -1);
    assert_int_equal(coll_ppermute_source(&op, 2, 0), -1);   /* not the group it was made for */
    free_all(args, 4);
}

static void check_all_to_all(int own_whole)
{
    shape_t slice = shp(2, 2, 2, 0), s = shp(2, 4, 2, 0);
    tensor_t *args[4], *outs[4];
    make_args(&slice, &s, args);
    /* split rows (4 -> 1 each), concat columns (2 -> 8):
     * out_k[0][2p+c] = arg_p[k][c] (chunk k of shard p). */
    op_t op = mkop(OP_ALL_TO_ALL, 0);
    op.split_axis = 0;
    op.concat_axis = 1;
    op.shape = shp(2, 1, 8, 0);
    simulate(&slice, &op, args, outs, own_whole);
    for (int k = 0; k < 4; k++) {
        float want[8];
        for (int p = 0; p < 4; p++) {
            for (int c = 0; c < 2; c++)
                want[2 * p + c] = arg_value(p, k * 2 + c);
        }
        expect_values(outs[k], want, k);
    }
    free_all(outs, 4);
    /* split columns (4 -> 1 each), concat rows (2 -> 8). */
    free_all(args, 4);
    s = shp(2, 2, 4, 0);
    make_args(&slice, &s, args);
    op.split_axis = 1;
    op.concat_axis = 0;
    op.shape = shp(2, 8, 1, 0);
    simulate(&slice, &op, args, outs, own_whole);
    for (int k = 0; k < 4; k++) {           /* out_k[2p+r][0] = arg_p[r][k] */
        float want[8];
        for (int p = 0; p < 4; p++) {
            for (int r = 0; r < 2; r++)
                want[2 * p + r] = arg_value(p, r * 4 + k);
        }
        expect_values(outs[k], want, k);
    }
    free_all(outs, 4);
    free_all(args, 4);
}

static void test_all_to_all(void **state)
{
    (void)state;
    check_all_to_all(0);
    check_all_to_all(1);    /* own slot holding the whole argument works too */
}

/* Groups along mesh axes of 2x2 and 2x4 slices. */
static void test_mesh_axes(void **state)
{
    (void)state;
    shape_t s24 = shp(2, 2, 4, 0), s = shp(1, 2, 0, 0);
    tensor_t *args[8], *outs[8];
    make_args(&s24, &s, args);
    /* Rows (mesh axis 1): shard k sums shards of row k/4. */
    op_t op = mkop(OP_ALL_REDUCE, 1u << 1);
    op.shape = s;
    simulate(&s24, &op, args, outs, 0);
    for (int k = 0; k < 8; k++) {
        float want[2] = {0, 0};
        for (int c = 0; c < 4; c++) {
            for (int i = 0; i < 2; i++)
                want[i] += arg_value((k / 4) * 4 + c, i);
        }
        expect_values(outs[k], want, k);
    }
    free_all(outs, 8);
    /* Columns (mesh axis 0): gather shard k%4 then k%4+4 along axis 0. */
    op = mkop(OP_ALL_GATHER, 1u << 0);
    op.axis = 0;
    op.shape = shp(1, 4, 0, 0);
    simulate(&s24, &op, args, outs, 0);
    for (int k = 0; k < 8; k++) {
        int c = k % 4;
        float want[4] = {arg_value(c, 0), arg_value(c, 1), arg_value(c + 4, 0),
                         arg_value(c + 4, 1)};
        expect_values(outs[k], want, k);
    }
    free_all(outs, 8);
    free_all(args, 8);

    /* 2x2, mesh axis 0, ppermute by 1: each shard gets the other row's
     * shard of its column. */
    shape_t s22 = shp(2, 2, 2, 0);
    make_args(&s22, &s, args);
    op = mkop(OP_PPERMUTE, 1u << 0);
    op.shift = 1;
    op.shape = s;
    simulate(&s22, &op, args, outs, 0);
    int other[4] = {2, 3, 0, 1};
    for (int k = 0; k < 4; k++) {
        float want[2] = {arg_value(other[k], 0), arg_value(other[k], 1)};
        expect_values(outs[k], want, k);
    }
    free_all(outs, 4);
    /* 2x2, mesh axis 1, reduce_scatter min over the row pairs. */
    op = mkop(OP_REDUCE_SCATTER, 1u << 1);
    op.axis = 0;
    op.reduce = REDUCE_MIN;
    op.shape = shp(1, 1, 0, 0);
    simulate(&s22, &op, args, outs, 0);
    for (int k = 0; k < 4; k++) {   /* row r = k/2, position c = k%2 keeps element c */
        int r = k / 2, c = k % 2;
        float a = arg_value(2 * r, c), b = arg_value(2 * r + 1, c);
        float want = a < b ? a : b;
        expect_values(outs[k], &want, k);
    }
    free_all(outs, 4);
    free_all(args, 4);
}

static void test_bad_combine(void **state)
{
    (void)state;
    shape_t s = shp(1, 4, 0, 0), s3 = shp(1, 3, 0, 0);
    tensor_t *a = tensor_new(&s), *b = tensor_new(&s3), *out = NULL;
    const tensor_t *pieces[2] = {a, b};
    op_t op = mkop(OP_ALL_REDUCE, 0);
    assert_int_equal(coll_combine(&op, pieces, 2, 0, &out), -1);   /* shapes differ */
    pieces[1] = NULL;
    assert_int_equal(coll_combine(&op, pieces, 2, 0, &out), -1);   /* missing piece */
    op = mkop(OP_REDUCE_SCATTER, 0);
    op.axis = 0;
    pieces[0] = b;
    pieces[1] = b;
    assert_int_equal(coll_combine(&op, pieces, 2, 0, &out), -1);   /* 3 not divisible by 2 */
    op = mkop(OP_ALL_TO_ALL, 0);
    assert_null(coll_piece(&op, b, 2, 0, 1));                       /* 3 rows into 2 chunks */
    assert_null(out);
    tensor_free(a);
    tensor_free(b);
}

/* coll_group_of / coll_group_member (O(rank)) agree with coll_group for
 * every shard of 1-D to 3-D slices and every mesh_axes subset. */
static void test_group_of_agrees(void **state)
{
    (void)state;
    const shape_t shapes[] = {{.rank = 1, .dim = {6}}, {.rank = 2, .dim = {2, 4}},
                              {.rank = 2, .dim = {3, 1}}, {.rank = 3, .dim = {2, 3, 2}}};
    int members[64];
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape_t *ss = &shapes[si];
        for (unsigned axes = 0; axes < (1u << ss->rank); axes++)
            for (int k = 0; k < shape_numel(ss); k++) {
                int n, pos, lead, n2, pos2;
                assert_int_equal(coll_group(ss, axes, k, members, &n, &pos), 0);
                assert_int_equal(coll_group_of(ss, axes, k, &lead, &n2, &pos2), 0);
                assert_int_equal(n2, n);
                assert_int_equal(pos2, pos);
                assert_int_equal(lead, members[0]);
                for (int p = 0; p < n; p++)
                    assert_int_equal(coll_group_member(ss, axes, lead, p), members[p]);
                assert_int_equal(coll_group_member(ss, axes, lead, n), -1);
            }
    }
}

/* coll_fold_ring: chunk c is the left fold from position c on. */
static void test_fold_ring(void **state)
{
    (void)state;
    const float v[4] = {100663296.0f, 5.0f, -100663296.0f, 5.0f};
    shape_t s = {.rank = 1, .dim = {4}};
    tensor_t *pc[4], *out = NULL;
    for (int k = 0; k < 4; k++) {
        pc[k] = tensor_new(&s);
        for (int e = 0; e < 4; e++)
            pc[k]->data[e] = v[k];
    }
    assert_int_equal(coll_fold_ring(REDUCE_SUM, (const tensor_t *const *)pc, 4, &out), 0);
    for (int c = 0; c < 4; c++) {        /* 4 elements over 4 chunks: chunk c = element c */
        float want = v[c];
        for (int m = 1; m < 4; m++)
            want += v[(c + m) % 4];
        assert_true(out->data[c] == want);
    }
    assert_true(out->data[0] != out->data[1]);  /* the orders round differently */
    tensor_free(out);
    for (int k = 0; k < 4; k++)
        tensor_free(pc[k]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_group_of_agrees),
        cmocka_unit_test(test_fold_ring),
        cmocka_unit_test(test_all_reduce),
        cmocka_unit_test(test_all_gather),
        cmocka_unit_test(test_reduce_scatter),
        cmocka_unit_test(test_ppermute),
        cmocka_unit_test(test_all_to_all),
        cmocka_unit_test(test_mesh_axes),
        cmocka_unit_test(test_bad_combine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
