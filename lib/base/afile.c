/*
 * afile.c - atomic files: a file is written without a name (or under a temporary name) beside its
 * destination and put in place under the destination's name only once it is complete and on disk.
 *
 * Sequence (the contract is in base.h, "atomic files"):
 *   open    open(<folder>, O_TMPFILE): a file in the destination's folder that has no name at
 *           all, so that a kill at any point (SIGKILL included) leaves nothing behind; where the
 *           file system cannot (EOPNOTSUPP, EISDIR, EINVAL: any failure) or /proc/self/fd is
 *           missing, mkostemp("<folder>/.<basename>.ptc-XXXXXX"), a named temporary file. Either
 *           stays inside the destination's file system, so that the final rename is atomic;
 *   write   small writes collect in a 1 MiB buffer; a write of AFILE_DIRECT bytes or more goes to
 *           the file from the caller's memory, in one writev(2) behind the buffered bytes, so
 *           tensor data is never copied in user space (the kernel's copy into the page cache is
 *           the only one) and headers travel in the same system call as the data after them;
 *           every AFILE_WRITEBACK bytes handed to the file, sync_file_range(SYNC_FILE_RANGE_WRITE)
 *           starts writing them to the disk while the next ones are copied, so the final fsync
 *           waits for the tail only instead of for the whole file (where the system has no
 *           sync_file_range, the fsync does it all, as before);
 *   commit  flush, fchmod to the mode a plain creation would give, fsync(file); an unnamed file
 *           is then linked: linkat("/proc/self/fd/N", destination) when no destination exists
 *           (done), else linkat to a fresh ".<basename>.ptc-XXXXXX" name; close,
 *           rename(temporary, destination), fsync(folder) so that the rename itself survives a
 *           power loss;
 *   abort   close (an unnamed file vanishes with its descriptor) and unlink the temporary name.
 *
 * Temporary names that exist are listed in a fixed table that ptc_save_remove_temporaries reads:
 * it unlinks them with nothing but unlink(2), so that a SIGINT or SIGTERM handler may call it and
 * then re-raise the signal. Only a SIGKILL in the window between a name's creation and the final
 * rename (all of the write for a file system without O_TMPFILE, else a link and a rename) can
 * leave one behind.
 *
 * Invariants:
 *   - until commit's rename (or link) succeeds the destination is untouched: a crash or a kill at
 *     any earlier point leaves the previous file (or none) under the final name and at worst a
 *     stray ".<basename>.ptc-XXXXXX" beside it, which nothing ever reads;
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
#include <sys/uio.h>
#include <unistd.h>

#define AFILE_BUF (1u << 20)
/* A write at least this long bypasses the buffer (see the opening comment): below it, copying
 * costs less than the system call it saves. */
#define AFILE_DIRECT (64u << 10)
/* Bytes handed to the file between two early writebacks (see the opening comment): large enough
 * that the disk gets long requests, small enough that writing overlaps copying from the start. */
#define AFILE_WRITEBACK ((uint64_t)8 << 20)
/* One write(2) call at most; Linux transfers at most about 2 GiB per call anyway. */
#define AFILE_MAX_IO ((size_t)1 << 30)
/* Bytes of the basename kept in the temporary name, so that ".<name>.ptc-XXXXXX" stays within
 * NAME_MAX (255) for any destination name that itself fits. */
#define AFILE_NAME_KEEP 200
/* Temporary names ptc_save_remove_temporaries can reach: saves in progress at once, and the
 * longest name listed (a longer one is still removed on every path but a signal's). */
#define AFILE_SLOTS    16
#define AFILE_SLOT_LEN 4096

/* The table of temporary names that exist. state: 0 free, 1 taken (being filled or emptied),
 * 2 listed (the name is complete and may be unlinked by a signal handler). Updated with atomic
 * builtins only, so that a handler interrupting any step sees either a whole name or none. */
static struct {
    volatile int state;
    char name[AFILE_SLOT_LEN];
} live[AFILE_SLOTS];

/* Tests: nonzero forces the named temporary file, as on a file system without O_TMPFILE. */
static volatile int force_named;

void ptc__afile_force_named(bool on)
{
    force_named = on;
}

/* Lists name; the slot, or -1 when the table is full or the name too long. */
static int slot_take(const char *name)
{
    size_t n = strlen(name);
    if (n >= AFILE_SLOT_LEN)
        return -1;
    for (int i = 0; i < AFILE_SLOTS; i++) {
        int expected = 0;
        if (__atomic_compare_exchange_n(&live[i].state, &expected, 1, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            memcpy(live[i].name, name, n + 1);
            __atomic_store_n(&live[i].state, 2, __ATOMIC_RELEASE);
            return i;
        }
    }
    return -1;
}

static void slot_give(int *slot)
{
    if (*slot < 0)
        return;
    __atomic_store_n(&live[*slot].state, 1, __ATOMIC_RELEASE);
    live[*slot].name[0] = '\0';
    __atomic_store_n(&live[*slot].state, 0, __ATOMIC_RELEASE);
    *slot = -1;
}

void ptc_save_remove_temporaries(void)
{
    int saved = errno;
    for (int i = 0; i < AFILE_SLOTS; i++)
        if (__atomic_load_n(&live[i].state, __ATOMIC_ACQUIRE) == 2)
            unlink(live[i].name);
    errno = saved;
}

struct ptc__afile {
    int fd;
    bool failed;     /* a write failed: only abort remains */
    bool unnamed;    /* fd is an O_TMPFILE file, not linked anywhere yet */
    int slot;        /* tmp's place in the table of live names, or -1 */
    char *path;      /* final name, as given */
    char *tmp;       /* temporary name; "" once it no longer exists */
    char *dir;       /* folder of both, for the fsync after rename */
    char shown[256]; /* path escaped for messages */
    uint8_t *buf;    /* [AFILE_BUF] */
    size_t nbuf;
    uint64_t offset;
    uint64_t wb_from; /* bytes before it were handed to writeback early */
};

static int io_err(ptc__afile *f, ptc_error *err, const char *what, int e)
{
    return ptc__err(err, PTC_EIO, "", -1, "cannot %s %s: %s", what, f->shown, strerror(e));
}

/* Writes all of a[0, na) then all of b[0, nb) to fd in writev(2) calls, retrying on EINTR and
 * short writes. Returns 0 or an errno. */
static int writev_all(int fd, const uint8_t *a, size_t na, const uint8_t *b, size_t nb)
{
    while (na + nb > 0) {
        struct iovec v[2];
        int nv = 0;
        if (na)
            v[nv++] = (struct iovec){(void *)a, na};
        size_t room = AFILE_MAX_IO - na; /* na < AFILE_BUF <= AFILE_MAX_IO */
        if (nb)
            v[nv++] = (struct iovec){(void *)b, nb < room ? nb : room};
        ssize_t r = writev(fd, v, nv);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (r == 0)
            return EIO; /* a regular file never accepts 0 bytes of a non-empty write */
        size_t done = (size_t)r, from_a = done < na ? done : na;
        if (from_a) { /* a may be NULL (write_all) */
            a += from_a;
            na -= from_a;
        }
        b += done - from_a;
        nb -= done - from_a;
    }
    return 0;
}

/* Writes all of p[0, n) to fd, retrying on EINTR and short writes. Returns 0 or an errno. */
static int write_all(int fd, const uint8_t *p, size_t n)
{
    return writev_all(fd, NULL, 0, p, n);
}

/* Starts writing back what the file holds since the last call, every AFILE_WRITEBACK bytes. Only
 * advice: a failure here is left for the fsync at commit to report. */
static void early_writeback(ptc__afile *f)
{
#ifdef SYNC_FILE_RANGE_WRITE
    uint64_t written = f->offset - f->nbuf;
    if (written - f->wb_from < AFILE_WRITEBACK)
        return;
    (void)sync_file_range(f->fd, (off_t)f->wb_from, (off_t)(written - f->wb_from),
                          SYNC_FILE_RANGE_WRITE);
    f->wb_from = written;
#else
    (void)f;
#endif
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
        while (n < sizeof text - 1 &&
               ((r = read(fd, text + n, sizeof text - 1 - n)) > 0 || (r < 0 && errno == EINTR)))
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

/* "/proc/self/fd/N", the name through which an unnamed file is linked. */
static void proc_fd_path(char *buf, size_t n, int fd)
{
    snprintf(buf, n, "/proc/self/fd/%d", fd);
}

/* Opens an unnamed file in f->dir: true on success (f->fd set), false when the named temporary
 * file is to be used instead. */
static bool open_unnamed(ptc__afile *f)
{
#ifdef O_TMPFILE
    if (force_named)
        return false;
    int fd = open(f->dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0)
        return false; /* EOPNOTSUPP, EISDIR (no O_TMPFILE in the kernel), EINVAL, ... */
    /* The link at commit goes through /proc; without it the file could never get a name. */
    char proc[64];
    struct stat st;
    proc_fd_path(proc, sizeof proc, fd);
    if (stat(proc, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return false;
    }
    f->fd = fd;
    f->unnamed = true;
    return true;
#else
    (void)f;
    return false;
#endif
}

/* Gives the unnamed file f->fd the name f->tmp, a fresh ".<basename>.ptc-XXXXXX" (the pattern
 * rebuilt from f->path), listed in the table before it exists. 0 or an errno. */
static int link_temporary(ptc__afile *f, const char *proc)
{
    static const char letters[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static unsigned counter;
    const char *slash = strrchr(f->path, '/');
    const char *base = slash ? slash + 1 : f->path;
    size_t nbase = strlen(base) > AFILE_NAME_KEEP ? AFILE_NAME_KEEP : strlen(base);
    size_t ntmp = strlen(f->dir) + 1 + 1 + nbase + strlen(".ptc-XXXXXX") + 1;
    snprintf(f->tmp, ntmp, "%s%s.%.*s.ptc-XXXXXX", f->dir, strcmp(f->dir, "/") ? "/" : "",
             (int)nbase, base);
    char *x = f->tmp + strlen(f->tmp) - 6;
    uint64_t seed = (uint64_t)getpid() * 0x9E3779B97F4A7C15ULL ^ (uint64_t)(uintptr_t)f;
    for (int attempt = 0; attempt < 100; attempt++) {
        uint64_t h = seed + (uint64_t)__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) *
                                0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
        for (int i = 0; i < 6; i++, h /= 62)
            x[i] = letters[h % 62];
        f->slot = slot_take(f->tmp);
        if (linkat(AT_FDCWD, proc, AT_FDCWD, f->tmp, AT_SYMLINK_FOLLOW) == 0)
            return 0;
        int e = errno;
        slot_give(&f->slot);
        if (e != EEXIST) {
            f->tmp[0] = '\0';
            return e;
        }
    }
    f->tmp[0] = '\0';
    return EEXIST;
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
    f->slot = -1;
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

    if (open_unnamed(f)) {
        f->tmp[0] = '\0'; /* the pattern is made again at commit, if a name is needed */
        *out = f;
        return 0;
    }
    int fd = mkostemp(f->tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        f->tmp[0] = '\0'; /* nothing to unlink */
        int rc = ptc__err(err, PTC_EIO, "", -1, "cannot create a temporary file for %s: %s", shown,
                          strerror(e));
        ptc__afile_abort(f);
        return rc;
    }
    f->fd = fd;
    f->slot = slot_take(f->tmp);
    *out = f;
    return 0;
}

bool ptc__afile_unnamed(const ptc__afile *f)
{
    return f && f->unnamed;
}

int ptc__afile_write(ptc__afile *f, const void *p, size_t n, ptc_error *err)
{
    if (f->failed)
        return ptc__err(err, PTC_EIO, "", -1, "%s: an earlier write failed", f->shown);
    uint64_t end;
    if (!ptc__add_u64_ok(f->offset, n, &end))
        return ptc__err(err, PTC_EINVAL, "", -1, "%s: file offset overflows", f->shown);
    const uint8_t *src = p;
    if (n < AFILE_DIRECT) {
        if (n > AFILE_BUF - f->nbuf) {
            int rc = flush_buf(f, err);
            if (rc < 0)
                return rc;
            early_writeback(f);
        }
        memcpy(f->buf + f->nbuf, src, n);
        f->nbuf += n;
        f->offset = end;
        return 0;
    }
    /* The buffered bytes, then the caller's, in one system call and no copy. */
    int e = writev_all(f->fd, f->buf, f->nbuf, src, n);
    f->nbuf = 0;
    if (e) {
        f->failed = true;
        return io_err(f, err, "write", e);
    }
    f->offset = end;
    early_writeback(f);
    return 0;
}

uint64_t ptc__afile_offset(const ptc__afile *f)
{
    return f->offset;
}

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
    bool in_place = false;
    if (f->unnamed) {
        /* A new destination gets the file's first name directly: linkat never replaces, so a
         * destination that appeared meanwhile (EEXIST) takes the rename path below, as an
         * existing one does. */
        char proc[64];
        struct stat st;
        proc_fd_path(proc, sizeof proc, f->fd);
        if (lstat(f->path, &st) != 0 && errno == ENOENT) {
            if (linkat(AT_FDCWD, proc, AT_FDCWD, f->path, AT_SYMLINK_FOLLOW) == 0)
                in_place = true;
            else if (errno != EEXIST) {
                rc = io_err(f, err, "link the new file as", errno);
                goto fail;
            }
        }
        int e = in_place ? 0 : link_temporary(f, proc);
        if (e) {
            rc = io_err(f, err, "link a temporary file for", e);
            goto fail;
        }
        f->unnamed = false;
    }
    /* close can report a delayed write error (NFS); after fsync it should not, but a failing
     * close still means the content is in doubt. EINTR leaves the descriptor closed on Linux.
     * (A file already in place stays: its content was synced.) */
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0 && errno != EINTR && !in_place) {
        rc = io_err(f, err, "close", errno);
        goto fail;
    }
    if (!in_place && rename(f->tmp, f->path) != 0) {
        rc = io_err(f, err, "rename a temporary file to", errno);
        goto fail;
    }
    f->tmp[0] = '\0'; /* the temporary name no longer exists */
    slot_give(&f->slot);

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
    slot_give(&f->slot);
    ptc__free(f->buf);
    ptc__free(f->tmp);
    ptc__free(f->dir);
    ptc__free(f->path);
    ptc__free(f);
}
