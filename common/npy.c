/* npy.c - see npy.h. Format: "\x93NUMPY", major, minor, header length
 * (u16 for 1.x, u32 for 2.x/3.x), a Python dict literal
 * {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
 * spaces and a newline, then the data. */
#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

int npy_encode(const tensor_t *t, void **buf, size_t *len)
{
    char hdr[256];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (int i = 0; i < t->shape.rank; i++)
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%lld,%s", (long long)t->shape.dim[i],
                      i + 1 < t->shape.rank ? " " : "");
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "), }");
    /* Total header (10 bytes of preamble + dict + '\n') a multiple of 64. */
    size_t total = ((size_t)10 + (size_t)n + 1 + 63) / 64 * 64;
    size_t hlen = total - 10;
    size_t data = (size_t)shape_numel(&t->shape) * sizeof(float);
    unsigned char *b = malloc(total + data);
    if (!b)
        return -1;
    memcpy(b, npy_magic, 6);
    b[6] = 1;
    b[7] = 0;
    b[8] = (unsigned char)(hlen & 0xff);
    b[9] = (unsigned char)(hlen >> 8);
    memset(b + 10, ' ', hlen);
    memcpy(b + 10, hdr, (size_t)n);
    b[total - 1] = '\n';
    /* Little-endian hosts only (x86-64, aarch64): floats go as they are. */
    memcpy(b + total, t->data, data);
    *buf = b;
    *len = total + data;
    return 0;
}

/* The value text after 'key': in the header dict, or NULL. */
static const char *dict_value(const char *h, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    if (*p != ':')
        return NULL;
    p++;
    while (*p == ' ')
        p++;
    return p;
}

/* Parses "(2, 3)" / "()" / "(5,)" into s. 0 or -1. */
static int parse_shape(const char *p, shape_t *s)
{
    memset(s, 0, sizeof *s);
    if (*p++ != '(')
        return -1;
    for (;;) {
        while (*p == ' ')
            p++;
        if (*p == ')')
            return 0;
        if (*p < '0' || *p > '9' || s->rank >= NPY_MAX_RANK)
            return -1;
        char *end;
        errno = 0;
        long long d = strtoll(p, &end, 10);
        if (errno || d < 1 || d > TENSOR_MAX_ELEMS)
            return -1;
        s->dim[s->rank++] = d;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == ',')
            p++;
        else if (*p != ')')
            return -1;
    }
}

static int fail(char *err, size_t n, const char *why)
{
    snprintf(err, n, "%s", why);
    return -1;
}

int npy_decode(const void *vbuf, size_t len, tensor_t **out, char *err, size_t errlen)
{
    const unsigned char *b = vbuf;
    if (len < 10 || memcmp(b, npy_magic, 6) != 0)
        return fail(err, errlen, "not a .npy file (no \\x93NUMPY magic)");
    size_t hlen, off;
    if (b[6] == 1) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
        off = 10;
    } else if ((b[6] == 2 || b[6] == 3) && len >= 12) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        off = 12;
    } else {
        return fail(err, errlen, "unsupported .npy version");
    }
    if (hlen > NPY_MAX_HEADER || off + hlen > len)
        return fail(err, errlen, ".npy header longer than the file or 64 KiB");
    char *h = malloc(hlen + 1);
    if (!h)
        return fail(err, errlen, "out of memory");
    memcpy(h, b + off, hlen);
    h[hlen] = '\0';
    const char *descr = dict_value(h, "descr"), *fo = dict_value(h, "fortran_order");
    const char *sh = dict_value(h, "shape");
    int f8 = descr && strncmp(descr, "'<f8'", 5) == 0;
    int ok = descr && (f8 || strncmp(descr, "'<f4'", 5) == 0);
    int corder = fo && strncmp(fo, "False", 5) == 0;
    shape_t s;
    int shape_ok = sh && parse_shape(sh, &s) == 0 && shape_valid(&s);
    free(h);
    if (!ok)
        return fail(err, errlen, "dtype must be little-endian float32 or float64 ('<f4', "
                    "'<f8')");
    if (!corder)
        return fail(err, errlen, "array must be in C order (fortran_order False)");
    if (!shape_ok)
        return fail(err, errlen, "shape must have rank 0 to 4, dims >= 1, and at most "
                    "TENSOR_MAX_ELEMS elements");
    size_t numel = (size_t)shape_numel(&s), esz = f8 ? 8 : 4;
    if (len - off - hlen != numel * esz)
        return fail(err, errlen, "data size does not match the header's shape and dtype");
    tensor_t *t = tensor_new(&s);
    if (!t)
        return fail(err, errlen, "out of memory");
    const unsigned char *d = b + off + hlen;
    if (f8) {
        for (size_t i = 0; i < numel; i++) {
            double v;
            memcpy(&v, d + 8 * i, 8);
            t->data[i] = (float)v;
        }
    } else {
        memcpy(t->data, d, numel * 4);
    }
    *out = t;
    return 0;
}

int npy_write(const char *path, const tensor_t *t)
{
    void *buf;
    size_t len;
    if (npy_encode(t, &buf, &len) != 0) {
        errno = ENOMEM;
        return -1;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = -1;
    if (fd >= 0) {
        size_t done = 0;
        while (done < len) {
            ssize_t w = write(fd, (char *)buf + done, len - done);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            done += (size_t)w;
        }
        rc = done == len ? 0 : -1;
        close(fd);
    }
    free(buf);
    return rc;
}

int npy_read(const char *path, size_t max_bytes, tensor_t **out, char *err, size_t errlen)
{
    /* O_NOFOLLOW: the program owns the directory; do not read through its links. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0)
        return fail(err, errlen, errno == ENOENT ? "file not written" : strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > max_bytes) {
        close(fd);
        return fail(err, errlen, "not a regular file, or larger than the tensor size cap");
    }
    size_t len = (size_t)st.st_size, got = 0;
    unsigned char *b = malloc(len ? len : 1);
    if (!b) {
        close(fd);
        return fail(err, errlen, "out of memory");
    }
    while (got < len) {
        ssize_t r = read(fd, b + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    int rc = npy_decode(b, got, out, err, errlen);
    free(b);
    return rc;
}
