/*
 * afile.c - atomic files: a file is written under a temporary name beside its destination and
 * renamed over the destination only once it is complete and on disk.
 *
 * Sequence (the contract is in base.h, "atomic files"):
 *   open    mkostemp("<folder>/.<basename>.ptc-XXXXXX") in the destination's folder, so that the
 *           final rename stays inside one file system and is atomic;
 *   write   bytes collect in a 1 MiB buffer; a write at least as large as the buffer goes to the
 *           file directly (after the buffered bytes), so big storages are not copied twice;
 *   commit  flush, fchmod to the mode a plain creation would give, fsync(file), close,
 *           rename(temporary, destination), fsync(folder) so that the rename itself survives a
 *           power loss;
 *   abort   close and unlink the temporary file.
 *
 * Invariants:
 *   - until commit's rename succeeds the destination is untouched: a crash or a kill at any earlier
 *     point leaves the previous file (or none) under the final name and at worst a stray
 *     ".<basename>.ptc-XXXXXX" beside it, which nothing ever reads;
 *   - once a write fails the handle is poisoned: every later write and the commit fail with
 *     PTC_EIO, so a caller that ignores one error can never commit a file with a hole in it;
 *   - offset counts every byte accepted, buffered or written;
 *   - heap memory (handle, names, buffer) comes from ptc__malloc only.
 *
 * Permissions: mkostemp creates the file 0600. A file created by open(path, O_CREAT, 0666) gets
 * 0666 & ~umask, and one written over an existing file (O_TRUNC) keeps that file's mode, so commit
 * applies the same rule: the destination's permission bits when it already is a regular file,
 * else 0666 & ~umask. The umask is read from /proc/self/status where Linux offers it, because the
 * only portable way, umask(2), changes process-wide state for a moment and so races with other
 * threads creating files; the portable way is used only when /proc has no answer.
 *
 * No on-disk format is interpreted here.
 */
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define AFILE_BUF (1u << 20)
/* One write(2) call at most; Linux transfers at most about 2 GiB per call anyway. */
#define AFILE_MAX_IO ((size_t)1 << 30)
/* Bytes of the basename kept in the temporary name, so that ".<name>.ptc-XXXXXX" stays within
 * NAME_MAX (255) for any destination name that itself fits. */
#define AFILE_NAME_KEEP 200

struct ptc__afile {
    int fd;
    bool failed;     /* a write failed: only abort remains */
    char *path;      /* final name, as given */
    char *tmp;       /* temporary name; "" once it no longer exists */
    char *dir;       /* folder of both, for the fsync after rename */
    char shown[256]; /* path escaped for messages */
    uint8_t *buf;    /* [AFILE_BUF] */
    size_t nbuf;
    uint64_t offset;
};

static int io_err(ptc__afile *f, ptc_error *err, const char *what, int e)
{
    return ptc__err(err, PTC_EIO, "", -1, "cannot %s %s: %s", what, f->shown, strerror(e));
}

/* Writes all of p[0, n) to fd, retrying on EINTR and short writes. Returns 0 or an errno. */
static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t r = write(fd, p, n < AFILE_MAX_IO ? n : AFILE_MAX_IO);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (r == 0)
            return EIO; /* a regular file never accepts 0 bytes of a non-empty write */
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int flush_buf(ptc__afile *f, ptc_error *err)
{
    int e = write_all(f->fd, f->buf, f->nbuf);
    f->nbuf = 0;
    if (e) {
        f->failed = true;
        return io_err(f, err, "write", e);
    }
    return 0;
}

/* The umask without changing it where possible (see the opening comment). /proc is read with
 * plain read(2) into the stack, so that no heap outside the ptc allocator is used. */
static mode_t current_umask(void)
{
    char text[4096];
    size_t n = 0;
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r;
        while (n < sizeof text - 1 && ((r = read(fd, text + n, sizeof text - 1 - n)) > 0 ||
                                       (r < 0 && errno == EINTR)))
            n += r > 0 ? (size_t)r : 0;
        close(fd);
    }
    text[n] = '\0';
    const char *line = strstr(text, "\nUmask:");
    if (line) {
        char *end;
        errno = 0;
        unsigned long m = strtoul(line + 7, &end, 8);
        if (errno == 0 && end != line + 7 && m <= 0777)
            return (mode_t)m;
    }
    mode_t m = umask(022);
    umask(m);
    return m;
}

int ptc__afile_open(ptc__afile **out, const char *path, ptc_error *err)
{
    if (!out || !path)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__afile_open: NULL argument");
    *out = NULL;
    char shown[256];
    ptc__escape(shown, sizeof shown, path, strlen(path), true);

    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t nbase = strlen(base);
    if (nbase == 0 || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return ptc__err(err, PTC_EINVAL, "", -1, "%s does not name a file", shown);
    if (nbase > AFILE_NAME_KEEP)
        nbase = AFILE_NAME_KEEP;
    /* The rename would fail at the very end; say so before anything is written. */
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return ptc__err(err, PTC_EIO, "", -1, "%s is a directory", shown);

    ptc__afile *f = ptc__calloc(1, sizeof *f);
    if (!f)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory opening %s", shown);
    f->fd = -1;
    memcpy(f->shown, shown, sizeof shown);

    /* The folder: "." without a slash, "/" for a file at the root, else everything before the
     * last slash. */
    size_t ndir = slash ? (size_t)(slash - path) : 1;
    if (slash && ndir == 0)
        ndir = 1;
    f->path = ptc__strdup(path);
    f->dir = slash ? ptc__strndup(path, ndir) : ptc__strdup(".");
    size_t ntmp = ndir + 1 + 1 + nbase + strlen(".ptc-XXXXXX") + 1;
    f->tmp = ptc__calloc(1, ntmp); /* empty until named: abort unlinks only a real name */
    f->buf = ptc__malloc(AFILE_BUF);
    if (!f->path || !f->dir || !f->tmp || !f->buf) {
        ptc__afile_abort(f);
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory opening %s", shown);
    }
    snprintf(f->tmp, ntmp, "%s%s.%.*s.ptc-XXXXXX", f->dir, strcmp(f->dir, "/") ? "/" : "",
             (int)nbase, base);

    int fd = mkostemp(f->tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        f->tmp[0] = '\0'; /* nothing to unlink */
        int rc = ptc__err(err, PTC_EIO, "", -1, "cannot create a temporary file for %s: %s",
                          shown, strerror(e));
        ptc__afile_abort(f);
        return rc;
    }
    f->fd = fd;
    *out = f;
    return 0;
}

int ptc__afile_write(ptc__afile *f, const void *p, size_t n, ptc_error *err)
{
    if (f->failed)
        return ptc__err(err, PTC_EIO, "", -1, "%s: an earlier write failed", f->shown);
    uint64_t end;
    if (!ptc__add_u64_ok(f->offset, n, &end))
        return ptc__err(err, PTC_EINVAL, "", -1, "%s: file offset overflows", f->shown);
    const uint8_t *src = p;
    if (n < AFILE_BUF - f->nbuf) {
        memcpy(f->buf + f->nbuf, src, n);
        f->nbuf += n;
        f->offset = end;
        return 0;
    }
    /* Top up a partly filled buffer and send it, so that every write(2) but the last one is at
     * least AFILE_BUF long; then the rest goes out directly when large, or starts the buffer. */
    if (f->nbuf) {
        size_t fill = AFILE_BUF - f->nbuf;
        memcpy(f->buf + f->nbuf, src, fill);
        f->nbuf = AFILE_BUF;
        src += fill;
        n -= fill;
        int rc = flush_buf(f, err);
        if (rc < 0)
            return rc;
    }
    if (n >= AFILE_BUF) {
        int e = write_all(f->fd, src, n);
        if (e) {
            f->failed = true;
            return io_err(f, err, "write", e);
        }
    } else {
        memcpy(f->buf, src, n);
        f->nbuf = n;
    }
    f->offset = end;
    return 0;
}

uint64_t ptc__afile_offset(const ptc__afile *f) { return f->offset; }

/* The permission bits commit gives the file (see the opening comment). */
static mode_t target_mode(const ptc__afile *f)
{
    struct stat st;
    if (stat(f->path, &st) == 0 && S_ISREG(st.st_mode))
        return st.st_mode & 0777;
    return 0666 & ~current_umask();
}

int ptc__afile_commit(ptc__afile *f, ptc_error *err)
{
    int rc;
    if (f->failed) {
        rc = ptc__err(err, PTC_EIO, "", -1, "%s: an earlier write failed", f->shown);
        goto fail;
    }
    if (f->nbuf && (rc = flush_buf(f, err)) < 0)
        goto fail;
    if (fchmod(f->fd, target_mode(f)) != 0) {
        rc = io_err(f, err, "set the permissions of", errno);
        goto fail;
    }
    while (fsync(f->fd) != 0) {
        if (errno != EINTR) {
            rc = io_err(f, err, "sync", errno);
            goto fail;
        }
    }
    /* close can report a delayed write error (NFS); after fsync it should not, but a failing
     * close still means the content is in doubt. EINTR leaves the descriptor closed on Linux. */
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0 && errno != EINTR) {
        rc = io_err(f, err, "close", errno);
        goto fail;
    }
    if (rename(f->tmp, f->path) != 0) {
        rc = io_err(f, err, "rename a temporary file to", errno);
        goto fail;
    }
    f->tmp[0] = '\0'; /* the temporary name no longer exists */

    /* The new directory entry is durable only once the folder is synced. The file is already in
     * place, so a failure here is reported but nothing is removed. Some file systems cannot sync
     * a folder (EINVAL); there the rename is as durable as they allow. */
    rc = 0;
    int dfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        rc = io_err(f, err, "open the folder of", errno);
    } else {
        int r;
        while ((r = fsync(dfd)) != 0 && errno == EINTR)
            ;
        if (r != 0 && errno != EINVAL && errno != ENOTSUP)
            rc = io_err(f, err, "sync the folder of", errno);
        close(dfd);
    }
    ptc__afile_abort(f);
    return rc;

fail:
    ptc__afile_abort(f);
    return rc;
}

void ptc__afile_abort(ptc__afile *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp && f->tmp[0])
        unlink(f->tmp);
    ptc__free(f->buf);
    ptc__free(f->tmp);
    ptc__free(f->dir);
    ptc__free(f->path);
    ptc__free(f);
}
