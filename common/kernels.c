/* kernels.c - per-shard arithmetic of the local ops.
 *
 * Every kernel checks that its arguments have the element counts the op's
 * compiled shape implies before touching memory, so a worker bug yields -1
 * instead of an out-of-bounds access. */
#include "kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

#ifdef ATOLL_HAVE_BLAS
#include <cblas.h>
#include <dlfcn.h>
#include <errno.h>
#include <unistd.h>
#endif

/* Nanoseconds on CLOCK_MONOTONIC (whole-µs rounding could end a spin early). */
static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void kernel_compute_spin(int64_t us)
{
    int64_t end = mono_ns() + us * 1000;
    /* A busy-wait on purpose: `compute` models a device that is occupied,
     * so the thread must stay on the CPU rather than sleep. */
    while (mono_ns() < end) {
    }
}

void kernel_matmul_naive(const float *a, const float *b, float *c, int64_t m, int64_t k,
                         int64_t n)
{
    memset(c, 0, (size_t)(m * n) * sizeof *c);
    /* i-k-j order: the inner loop walks rows of b and c contiguously. */
    for (int64_t i = 0; i < m; i++) {
        float *crow = c + i * n;
        for (int64_t p = 0; p < k; p++) {
            float av = a[i * k + p];
            const float *brow = b + p * n;
            for (int64_t j = 0; j < n; j++)
                crow[j] += av * brow[j];
        }
    }
}

#ifdef ATOLL_HAVE_BLAS
/* OpenBLAS is loaded here, on the first matmul, not linked: a linked
 * OpenBLAS starts its thread pool in its constructor, before main() can say
 * anything, and each pool thread spins on sched_yield for ~0.1 s. That was
 * 125 of a sim worker's 200 ms of start-up CPU (2 cores), so most of the
 * 512-worker island's registration time; loading it at start still cost
 * ~10 ms a worker. Loaded after OPENBLAS_NUM_THREADS=1
 * (kernel_blas_prepare), it starts no pool. blas_sgemm is set once
 * (blas_once) and never changes; NULL when the load failed (logged). */
typedef void blas_sgemm_fn(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE,
                           const enum CBLAS_TRANSPOSE, const blasint, const blasint,
                           const blasint, const float, const float *, const blasint,
                           const float *, const blasint, const float, float *, const blasint);
_Static_assert(__builtin_types_compatible_p(__typeof__(cblas_sgemm), blas_sgemm_fn),
               "blas_sgemm_fn is cblas_sgemm's type");
typedef void blas_threads_fn(int);
_Static_assert(__builtin_types_compatible_p(__typeof__(openblas_set_num_threads),
                                            blas_threads_fn),
               "blas_threads_fn is openblas_set_num_threads' type");
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static blas_sgemm_fn *blas_sgemm;

static void blas_load(void)
{
    /* The library the header came from (its full path, not whichever
     * libopenblas.so.0 the system's alternatives point at). */
    void *h = dlopen(ATOLL_BLAS_LIB, RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        log_error("kernels: cannot load OpenBLAS: %s", e ? e : ATOLL_BLAS_LIB);
        return;
    }
    blas_threads_fn *set_threads = (blas_threads_fn *)dlsym(h, "openblas_set_num_threads");
    blas_sgemm_fn *f = (blas_sgemm_fn *)dlsym(h, "cblas_sgemm");
    if (!f || !set_threads) {
        log_error("kernels: %s lacks cblas_sgemm or openblas_set_num_threads", ATOLL_BLAS_LIB);
        dlclose(h);
        return;
    }
    /* Each device has its own executor thread already; in a process that
     * did not prepare, the pool exists: use one thread of it. */
    set_threads(1);
    blas_sgemm = f;                 /* h stays open for the process */
}
#endif

int kernel_blas_prepare(char *err, size_t errlen)
{
#ifdef ATOLL_HAVE_BLAS
    if (setenv("OPENBLAS_NUM_THREADS", "1", 0) != 0) {
        snprintf(err, errlen, "setenv: out of memory");
        return -1;
    }
    if (access(ATOLL_BLAS_LIB, R_OK) != 0) {
        snprintf(err, errlen, "%s: %s", ATOLL_BLAS_LIB, strerror(errno));
        return -1;
    }
#else
    (void)err;
    (void)errlen;
#endif
    return 0;
}

int kernel_matmul_blas(const float *a, const float *b, float *c, int64_t m, int64_t k,
                       int64_t n)
{
#ifdef ATOLL_HAVE_BLAS
    pthread_once(&blas_once, blas_load);
    if (!blas_sgemm)
        return -1;      /* the naive loop's bits would differ from peers' */
    /* Dims are <= TENSOR_MAX_ELEMS (2^24), so they fit an int. */
    blas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a,
               (int)k, b, (int)n, 0.0f, c, (int)n);
#else
    kernel_matmul_naive(a, b, c, m, k, n);
#endif
    return 0;
}

int kernel_have_blas(void)
{
#ifdef ATOLL_HAVE_BLAS
    pthread_once(&blas_once, blas_load);
    return blas_sgemm != NULL;
#else
    return 0;
#endif
}

static float apply_binary(opcode_t code, float x, float y)
{
    switch (code) {
    case OP_ADD: return x + y;
    case OP_SUB: return x - y;
    case OP_MUL: return x * y;
    case OP_DIV: return x / y;
    case OP_MAX: return x > y ? x : y;
    default: return x < y ? x : y;      /* OP_MIN */
    }
}

static float apply_unary(opcode_t code, float x, float factor)
{
    switch (code) {
    case OP_NEG: return -x;
    case OP_RELU: return x > 0.0f ? x : 0.0f;
    case OP_EXP: return expf(x);
    case OP_TANH: return tanhf(x);
    case OP_RSQRT: return 1.0f / sqrtf(x);
    case OP_LOG: return logf(x);
    default: return x * factor;         /* OP_SCALE */
    }
}

/* Elementwise a (op) b; a rank-0 side is broadcast (stride 0). */
static int k_binary(const op_t *op, const tensor_t *a, const tensor_t *b, tensor_t *out)
{
    int64_t n = shape_numel(&out->shape);
    int64_t na = shape_numel(&a->shape), nb = shape_numel(&b->shape);
    int64_t sa = na == 1 && a->shape.rank == 0 ? 0 : 1;
    int64_t sb = nb == 1 && b->shape.rank == 0 ? 0 : 1;
    if ((sa && na != n) || (sb && nb != n))
        return -1;
    for (int64_t i = 0; i < n; i++)
        out->data[i] = apply_binary(op->code, a->data[i * sa], b->data[i * sb]);
    return 0;
}

static int k_unary(const op_t *op, const tensor_t *a, tensor_t *out)
{
    int64_t n = shape_numel(&out->shape);
    if (shape_numel(&a->shape) != n)
        return -1;
    for (int64_t i = 0; i < n; i++)
        out->data[i] = apply_unary(op->code, a->data[i], op->factor);
    return 0;
}

static int k_matmul(const tensor_t *a, const tensor_t *b, tensor_t *out)
{
    const shape_t *sa = &a->shape, *sb = &b->shape, *so = &out->shape;
    if (sa->rank != 2 || sb->rank != 2 || so->rank != 2 || sa->dim[1] != sb->dim[0] ||
        so->dim[0] != sa->dim[0] || so->dim[1] != sb->dim[1])
        return -1;
    return kernel_matmul_blas(a->data, b->data, out->data, sa->dim[0], sa->dim[1], sb->dim[1]);
}

static int k_transpose(const tensor_t *a, tensor_t *out)
{
    if (a->shape.rank != 2 || out->shape.rank != 2 || out->shape.dim[0] != a->shape.dim[1] ||
        out->shape.dim[1] != a->shape.dim[0])
        return -1;
    int64_t r = a->shape.dim[0], c = a->shape.dim[1];
    for (int64_t i = 0; i < r; i++) {
        for (int64_t j = 0; j < c; j++)
            out->data[j * r + i] = a->data[i * c + j];
    }
    return 0;
}

/* (outer, len, inner) of `a` around `axis`: a[o][l][i]. -1 when the axis
 * is out of range. */
static int axis_split(const tensor_t *a, int axis, int64_t *outer, int64_t *len, int64_t *inner)
{
    if (axis < 0 || axis >= a->shape.rank)
        return -1;
    *len = a->shape.dim[axis];
    *inner = 1;
    for (int i = axis + 1; i < a->shape.rank; i++)
        *inner *= a->shape.dim[i];
    *outer = shape_numel(&a->shape) / (*len * *inner);
    return 0;
}

/* Max over one axis (or all, axis -1). Exact: no rounding involved. */
static int k_reduce_max(const op_t *op, const tensor_t *a, tensor_t *out)
{
    int64_t outer = 1, len = shape_numel(&a->shape), inner = 1;
    if (op->axis >= 0 && axis_split(a, op->axis, &outer, &len, &inner) != 0)
        return -1;
    if (shape_numel(&out->shape) != outer * inner)
        return -1;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *p = a->data + o * len * inner + i;
            float m = p[0];
            for (int64_t l = 1; l < len; l++)
                m = p[l * inner] > m ? p[l * inner] : m;
            out->data[o * inner + i] = m;
        }
    return 0;
}

/* softmax along op->axis: exp(a - max) / sum(exp(a - max)), the sum in
 * double, each exp in f32 (expf of the f32 difference). */
static int k_softmax(const op_t *op, const tensor_t *a, tensor_t *out)
{
    int64_t outer, len, inner;
    if (axis_split(a, op->axis, &outer, &len, &inner) != 0 ||
        shape_numel(&out->shape) != shape_numel(&a->shape))
        return -1;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *p = a->data + o * len * inner + i;
            float *q = out->data + o * len * inner + i;
            float m = p[0];
            for (int64_t l = 1; l < len; l++)
                m = p[l * inner] > m ? p[l * inner] : m;
            double s = 0;
            for (int64_t l = 0; l < len; l++)
                s += (q[l * inner] = expf(p[l * inner] - m));
            for (int64_t l = 0; l < len; l++)
                q[l * inner] = (float)(q[l * inner] / s);
        }
    return 0;
}

/* einsum: every output element sums, in double, the product of the
 * operands over the letters absent from the output (odometer over them). */
static int k_einsum(const op_t *op, const tensor_t *const *args, tensor_t *out)
{
    const einsum_t *e = &op->ein;
    int64_t size[26] = {0}, stride[2][26] = {{0}};
    for (int k = 0; k < op->nargs; k++) {
        const shape_t *s = &args[k]->shape;
        if (s->rank != e->n[k])
            return -1;
        int64_t st = 1;
        for (int i = s->rank - 1; i >= 0; i--) {
            size[e->l[k][i]] = s->dim[i];
            stride[k][e->l[k][i]] = st;
            st *= s->dim[i];
        }
    }
    unsigned in_out = 0;
    for (int i = 0; i < e->n[2]; i++)
        in_out |= 1u << e->l[2][i];
    uint8_t sum_l[2 * TENSOR_MAX_RANK];
    int nsum = 0;
    for (int l = 0; l < 26; l++)
        if (size[l] && !(in_out & (1u << l)))
            sum_l[nsum++] = (uint8_t)l;
    int64_t n = shape_numel(&out->shape), idx[26] = {0};
    for (int64_t o = 0; o < n; o++) {
        int64_t r = o, base[2] = {0, 0};
        for (int i = e->n[2] - 1; i >= 0; i--) {     /* output coordinates */
            idx[e->l[2][i]] = r % out->shape.dim[i];
            r /= out->shape.dim[i];
        }
        for (int k = 0; k < op->nargs; k++)
            for (int i = 0; i < e->n[2]; i++)
                base[k] += idx[e->l[2][i]] * stride[k][e->l[2][i]];
        int64_t sidx[2 * TENSOR_MAX_RANK] = {0};
        double acc = 0;
        while (1) {
            int64_t off[2] = {base[0], base[1]};
            for (int j = 0; j < nsum; j++)
                for (int k = 0; k < op->nargs; k++)
                    off[k] += sidx[j] * stride[k][sum_l[j]];
            double v = args[0]->data[off[0]];
            if (op->nargs == 2)
                v *= args[1]->data[off[1]];
            acc += v;
            int j = nsum - 1;
            while (j >= 0 && ++sidx[j] == size[sum_l[j]])
                sidx[j--] = 0;
            if (j < 0)
                break;
        }
        out->data[o] = (float)acc;
    }
    return 0;
}

/* Sum over one axis: for each (outer, inner) pair, add the `len` rows of
 * the axis into a double accumulator row, then round once to f32. */
static int k_reduce_sum(const op_t *op, const tensor_t *a, tensor_t *out)
{
    if (op->axis < 0) {
        if (shape_numel(&out->shape) != 1)
            return -1;
        out->data[0] = (float)tensor_sum(a);
        return 0;
    }
    int64_t outer, len, inner;
    if (axis_split(a, op->axis, &outer, &len, &inner) != 0 ||
        shape_numel(&out->shape) != outer * inner)
        return -1;
    double *acc = malloc((size_t)inner * sizeof *acc);
    if (!acc)
        return -1;
    for (int64_t o = 0; o < outer; o++) {
        memset(acc, 0, (size_t)inner * sizeof *acc);
        const float *base = a->data + o * len * inner;
        for (int64_t l = 0; l < len; l++) {
            for (int64_t i = 0; i < inner; i++)
                acc[i] += base[l * inner + i];
        }
        for (int64_t i = 0; i < inner; i++)
            out->data[o * inner + i] = (float)acc[i];
    }
    free(acc);
    return 0;
}

/* Ops with no tensor argument. */
static int k_source(const op_t *op, int shard_index, tensor_t *out)
{
    int64_t n = shape_numel(&out->shape);
    switch (op->code) {
    case OP_FILL:
        for (int64_t i = 0; i < n; i++)
            out->data[i] = op->value;
        return 0;
    case OP_IOTA:
        for (int64_t i = 0; i < n; i++)
            out->data[i] = (float)i;
        return 0;
    case OP_SHARD_INDEX:
        out->data[0] = (float)shard_index;
        return 0;
    case OP_COMPUTE:
        kernel_compute_spin(op->us);
        out->data[0] = 0.0f;
        return 0;
    default:
        return -1;
    }
}

/* This shard's chunk of one axis (the partitioner's local slicing). */
static int k_shard_slice(const op_t *op, const tensor_t *a, int shard_index, tensor_t *out)
{
    int64_t outer, len, inner, chunk = 0;
    if (axis_split(a, op->axis, &outer, &len, &inner) != 0)
        return -1;
    for (int i = 0; i < op->nslice; i++)
        chunk = chunk * op->slice_dim[i] + (shard_index / op->slice_stride[i]) % op->slice_dim[i];
    int64_t olen = out->shape.dim[op->axis];
    if ((chunk + 1) * olen > len)
        return -1;
    for (int64_t o = 0; o < outer; o++)
        memcpy(out->data + o * olen * inner, a->data + (o * len + chunk * olen) * inner,
               (size_t)(olen * inner) * sizeof *out->data);
    return 0;
}

static int k_dispatch(const op_t *op, const tensor_t *const *args, int shard_index,
                      tensor_t *out)
{
    switch (op->code) {
    case OP_FILL: case OP_IOTA: case OP_SHARD_INDEX: case OP_COMPUTE:
        return k_source(op, shard_index, out);
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_MAX: case OP_MIN:
        return k_binary(op, args[0], args[1], out);
    case OP_NEG: case OP_RELU: case OP_EXP: case OP_TANH: case OP_SCALE: case OP_RSQRT:
    case OP_LOG:
        return k_unary(op, args[0], out);
    case OP_REDUCE_MAX:
        return k_reduce_max(op, args[0], out);
    case OP_SOFTMAX:
        return k_softmax(op, args[0], out);
    case OP_EINSUM:
        return k_einsum(op, args, out);
    case OP_MATMUL:
        return k_matmul(args[0], args[1], out);
    case OP_TRANSPOSE:
        return k_transpose(args[0], out);
    case OP_RESHAPE:
        if (shape_numel(&args[0]->shape) != shape_numel(&out->shape))
            return -1;
        memcpy(out->data, args[0]->data, (size_t)shape_numel(&out->shape) * sizeof *out->data);
        return 0;
    case OP_REDUCE_SUM:
        return k_reduce_sum(op, args[0], out);
    case OP_SHARD_SLICE:
        return k_shard_slice(op, args[0], shard_index, out);
    default:
        return -1;      /* input and collectives are not kernels */
    }
}

int kernel_run(const op_t *op, const tensor_t *const *args, int shard_index, tensor_t **out)
{
    if (!op || !out || op->code == OP_INPUT || opcode_is_collective(op->code))
        return -1;
    for (int i = 0; i < op->nargs; i++) {
        if (!args || !args[i])
            return -1;
    }
    tensor_t *t = tensor_new(&op->shape);
    if (!t)
        return -1;
    if (k_dispatch(op, args, shard_index, t) != 0) {
        tensor_free(t);
        return -1;
    }
    *out = t;
    return 0;
}
