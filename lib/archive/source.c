/*
 * source.c - the raw bytes of one checkpoint file, whatever holds them.
 *
 * Three kinds of source exist:
 *   - a path: the file is mapped read-only (MAP_PRIVATE), so stored records can be used in place.
 *     When the file cannot be mapped (a file system without mmap, a pipe, a character device) it is
 *     read whole into memory that the source owns; the caller sees no difference;
 *   - caller memory: borrowed, never copied;
 *   - a positional read callback: nothing is addressable, every byte is read on demand.
 *
 * Invariants:
 *   - data != NULL exactly when the content is addressable (map, heap copy or caller memory), and
 *     then data[0, size) is readable for the life of the source;
 *   - ptc__source_read never reads outside [0, size): a request that reaches past the end fails
 *     with PTC_EFORMAT "truncated" before any byte is read; a callback that returns fewer bytes
 *     than it promised (size) is reported the same way, one that fails is PTC_EIO.
 *
 * A mapped file that another process truncates while it is mapped raises SIGBUS on access; the
 * library cannot guard against that without installing a signal handler, which it never does.
 * Callers that open files others may rewrite should use the callback or memory source instead.
 *
 * The copy made when a path cannot be mapped is charged to no budget (the open of a checkpoint
 * creates its budget only after the source exists) but bounded: ptc__source_open_path_capped
 * stops at its caller's cap (the loader and ptc_verify pass the limits' max_heap_bytes, since the
 * copy is heap), so an endless input (/dev/zero, a FIFO that never closes) ends with PTC_ELIMIT
 * after at most that many bytes, not at the allocator.
 *
 * No on-disk format is interpreted here.
 */
#include "archive/archive.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef enum source_kind {
    SOURCE_MAP,     /* a path, mapped */
    SOURCE_HEAP,    /* a path, read whole into owned memory */
    SOURCE_MEMORY,  /* caller memory, borrowed */
    SOURCE_CALLBACK /* positional reads through the caller's function */
} source_kind;

struct ptc__source {
    source_kind kind;
    const uint8_t *data; /* [size] when addressable, else NULL */
    uint64_t size;
    void *map; /* SOURCE_MAP: the mapping, map_len bytes */
    size_t map_len;
    uint8_t *heap;  /* SOURCE_HEAP: the owned copy */
    ptc_read_fn fn; /* SOURCE_CALLBACK */
    void *ctx;
};

/* An empty file cannot be mapped (mmap rejects length 0); it is still addressable, as this. */
static const uint8_t empty_content[1];

static int source_new(ptc__source **out, source_kind kind, ptc_error *err)
{
    ptc__source *s = ptc__calloc(1, sizeof *s);
    if (!s)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory allocating a byte source");
    s->kind = kind;
    *out = s;
    return 0;
}

/* The most bytes ptc__source_open_path reads whole (its callers without limits: tests and
 * tools of the archive layer): as much as one record ptc inflates under the default limits
 * (max_inflated_bytes). */
#define SOURCE_READ_MAX ((uint64_t)16 << 30)

static int too_big(const char *path, uint64_t max, ptc_error *err)
{
    return ptc__err(err, PTC_ELIMIT, "", -1,
                    "%s cannot be mapped (not a regular file, or mmap failed) and holds more than "
                    "%llu bytes, the most ptc reads into memory from such a file (the heap limit, "
                    "max_heap_bytes)",
                    path, (unsigned long long)max);
}

/* Reads a whole descriptor into owned memory: used when mapping fails or the path is not a
 * regular file (its size is then unknown, so the buffer grows until end of file). At most max
 * bytes: one more is PTC_ELIMIT. */
static int read_whole(int fd, const char *path, uint64_t hint, uint64_t max, uint8_t **out,
                      uint64_t *len, ptc_error *err)
{
    if (max > SIZE_MAX - 1)
        max = SIZE_MAX - 1;
    /* One byte more than the expected size lets the final read see end of file without growing. */
    if (hint > max)
        return too_big(path, max, err);
    size_t cap = hint > 0 ? (size_t)hint + 1 : (max < 64u * 1024u ? (size_t)max + 1 : 64u * 1024u);
    size_t n = 0;
    uint8_t *buf = ptc__malloc(cap);
    if (!buf)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory reading %s", path);
    for (;;) {
        if (n == cap) {
            if (n > max) {
                ptc__free(buf);
                return too_big(path, max, err);
            }
            /* One byte past the cap tells a file of exactly max bytes from more. */
            size_t ncap = cap > max / 2 ? (size_t)max + 1 : cap * 2;
            uint8_t *bigger = ptc__realloc(buf, ncap);
            if (!bigger) {
                ptc__free(buf);
                return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory reading %s", path);
            }
            buf = bigger;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            ptc__free(buf);
            return ptc__err(err, PTC_EIO, "", -1, "cannot read %s: %s", path, strerror(e));
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    *out = buf;
    *len = n;
    return 0;
}

int ptc__source_open_path(ptc__source **out, const char *path, ptc_error *err)
{
    return ptc__source_open_path_capped(out, path, SOURCE_READ_MAX, err);
}

int ptc__source_open_path_capped(ptc__source **out, const char *path, uint64_t max_read,
                                 ptc_error *err)
{
    if (!out || !path)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__source_open_path: NULL argument");
    *out = NULL;
    /* The path is the caller's, not the file's, but it may still hold control bytes. */
    char shown[256];
    ptc__escape(shown, sizeof shown, path, strlen(path), true);

    int fd;
    do {
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return ptc__err(err, PTC_EIO, "", -1, "cannot open %s: %s", shown, strerror(errno));

    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ptc__err(err, PTC_EIO, "", -1, "cannot stat %s: %s", shown, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return ptc__err(err, PTC_EIO, "", -1, "%s is a directory", shown);
    }

    ptc__source *s = NULL;
    int rc;
    if (S_ISREG(st.st_mode) && st.st_size == 0) {
        rc = source_new(&s, SOURCE_MEMORY, err);
        if (rc == 0) {
            s->data = empty_content;
            s->size = 0;
        }
        close(fd);
        if (rc == 0)
            *out = s;
        return rc;
    }
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size <= SIZE_MAX) {
        size_t len = (size_t)st.st_size;
        void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map != MAP_FAILED) {
            close(fd);
            rc = source_new(&s, SOURCE_MAP, err);
            if (rc < 0) {
                munmap(map, len);
                return rc;
            }
            s->map = map;
            s->map_len = len;
            s->data = map;
            s->size = len;
            *out = s;
            return 0;
        }
        /* Fall through: some file systems cannot map; reading the file whole still works. */
    }

    uint8_t *heap = NULL;
    uint64_t len = 0;
    rc = read_whole(fd, shown, S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0, max_read, &heap,
                    &len, err);
    close(fd);
    if (rc < 0)
        return rc;
    rc = source_new(&s, SOURCE_HEAP, err);
    if (rc < 0) {
        ptc__free(heap);
        return rc;
    }
    s->heap = heap;
    s->data = heap;
    s->size = len;
    *out = s;
    return 0;
}

int ptc__source_open_memory(ptc__source **out, const void *buf, size_t len, ptc_error *err)
{
    if (!out || (!buf && len > 0))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__source_open_memory: NULL argument");
    *out = NULL;
    ptc__source *s = NULL;
    int rc = source_new(&s, SOURCE_MEMORY, err);
    if (rc < 0)
        return rc;
    s->data = buf ? buf : empty_content;
    s->size = len;
    *out = s;
    return 0;
}

int ptc__source_open_callback(ptc__source **out, ptc_read_fn fn, void *ctx, uint64_t size,
                              ptc_error *err)
{
    if (!out || !fn)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__source_open_callback: NULL argument");
    *out = NULL;
    ptc__source *s = NULL;
    int rc = source_new(&s, SOURCE_CALLBACK, err);
    if (rc < 0)
        return rc;
    s->fn = fn;
    s->ctx = ctx;
    s->size = size;
    *out = s;
    return 0;
}

void ptc__source_close(ptc__source *s)
{
    if (!s)
        return;
    if (s->kind == SOURCE_MAP)
        munmap(s->map, s->map_len);
    ptc__free(s->heap);
    ptc__free(s);
}

uint64_t ptc__source_size(const ptc__source *s)
{
    return s ? s->size : 0;
}

const uint8_t *ptc__source_map(const ptc__source *s)
{
    return s ? s->data : NULL;
}

int ptc__source_read(ptc__source *s, uint64_t off, void *buf, size_t len, ptc_error *err)
{
    if (!s || (!buf && len > 0))
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__source_read: NULL argument");
    if (!ptc__range_ok(off, len, s->size))
        return ptc__err(err, PTC_EFORMAT, "", (int64_t)(off <= INT64_MAX ? off : INT64_MAX),
                        "truncated: %zu bytes at offset 0x%llx lie beyond the end of the file "
                        "(%llu bytes)",
                        len, (unsigned long long)off, (unsigned long long)s->size);
    if (len == 0)
        return 0;
    if (s->data) {
        memcpy(buf, s->data + off, len);
        return 0;
    }
    uint8_t *p = buf;
    while (len > 0) {
        int64_t r = s->fn(s->ctx, off, p, len);
        if (r < 0)
            return ptc__err(err, PTC_EIO, "", (int64_t)off,
                            "read callback failed (%lld) reading %zu bytes", (long long)r, len);
        if (r == 0)
            return ptc__err(err, PTC_EFORMAT, "", (int64_t)off,
                            "truncated: the read callback ended %zu bytes before the declared "
                            "size of %llu bytes",
                            len, (unsigned long long)s->size);
        if ((uint64_t)r > len)
            return ptc__err(err, PTC_EIO, "", (int64_t)off,
                            "read callback returned %lld bytes, more than the %zu asked for",
                            (long long)r, len);
        p += r;
        off += (uint64_t)r;
        len -= (size_t)r;
    }
    return 0;
}
