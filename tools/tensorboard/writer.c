/*
 * writer.c - the module tool-tensorboard.so: TensorBoard event files for ptc train --tensorboard
 * (the table of tools/tensorboard/tb.h).
 *
 * It is a module, not part of libptc or the ptc program, so that only ptc train --tensorboard maps
 * libprotobuf-c (DESIGN.md decision 11). The messages are tools/tensorboard/event.proto, packed by
 * the code protoc-c generates from it at build time: nothing here encodes protobuf by hand.
 *
 * The file, as TensorBoard's EventFileWriter (tensorboard/summary/writer/event_file_writer.py,
 * which torch.utils.tensorboard.SummaryWriter uses) writes it:
 *   name     <dir>/events.out.tfevents.<int(time.time()) as %010d>.<gethostname()>.<pid>.<n>,
 *            n counting the files this process opened, from 0;
 *   records  TFRecord framing, all little-endian:
 *              uint64 length of data
 *              uint32 masked CRC-32C of those 8 bytes
 *              data   (one packed Event)
 *              uint32 masked CRC-32C of data
 *            where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2^32), and CRC-32C is
 *            the Castagnoli CRC (ISA-L's crc32_iscsi, seeded and finished with 0xffffffff);
 *   first    Event{wall_time, file_version: "brain.Event:2", source_metadata{writer: "ptc"}};
 *   then     Event{wall_time, step, summary{value[{tag, simple_value}]}} per scalar.
 *
 * Invariant: the file always ends on a record boundary. A record is built whole in memory and
 * written with pwrite() at the end of what the file holds; when that fails part-way (ENOSPC, EIO)
 * the file is cut back to its previous size and the failure reported, so that a reader never meets
 * half a record. Records are not buffered in the process: a crash loses nothing already written,
 * and flush (fsync) is what puts it on the disk.
 */
#include "config.h"

#include "base/module.h"
#include "tensorboard/tb.h"
#include "tools/tensorboard/event.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <isa-l/crc.h>

/* TFRecord's header: the length (8 bytes) and its masked CRC (4); the data's CRC follows the data. */
#define TB_HEADER 12
#define TB_FOOTER 4
/* gethostname's longest answer on Linux is 64 bytes (HOST_NAME_MAX); room for more, truncated. */
#define TB_HOST_MAX 256
/* The longest path made (dir, '/', the file name): the kernel's own limit. */
#define TB_PATH_MAX PATH_MAX

struct ptc__tb_writer {
    int fd;
    int64_t size;    /* bytes of whole records in the file: where the next one goes */
    char *path;      /* the event file */
    char shown[512]; /* path, escaped, for messages */
};

/* EventFileWriter's _global_uid: the files this process opened, the first 0. */
static unsigned long tb_counter;

/* Well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF): proto3 string
 * fields must hold it, and TensorBoard's parser refuses a record whose string does not. */
static int is_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len = c < 0x80           ? 1
                     : (c >> 5) == 0x6  ? 2
                     : (c >> 4) == 0xe  ? 3
                     : (c >> 3) == 0x1e ? 4
                                        : 0;
        if (!len || i + len > n)
            return 0;
        uint32_t cp = len == 1 ? c : c & (0x7fu >> len);
        for (size_t j = 1; j < len; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + j] & 0x3fu);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += len;
    }
    return 1;
}

/* Text for a message: control bytes as \xNN, and so every byte past ASCII unless src is UTF-8;
 * cut to dstsz. The modules have no ptc__escape (lib/base/text.c is libptc's); this is its subset. */
static char *tb_escape(char *dst, size_t dstsz, const char *src, size_t n)
{
    int keep_utf8 = is_utf8((const unsigned char *)src, n);
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < dstsz; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c < 0x20 || c == 0x7f || (c >= 0x80 && !keep_utf8))
            o += (size_t)snprintf(dst + o, dstsz - o, "\\x%02x", c);
        else
            dst[o++] = (char)c;
    }
    if (dstsz)
        dst[o < dstsz ? o : dstsz - 1] = '\0';
    return dst;
}

static uint32_t crc32c(const uint8_t *p, size_t n)
{
    /* ISA-L's crc32_iscsi is the reflected Castagnoli CRC without the initial and final
     * inversion: seeded and finished with ~0 it is CRC-32C (CRC-32C("123456789") = 0xe3069283,
     * tests/unit/test_tensorboard.c). Records are at most a few kilobytes, far below INT_MAX. */
    return crc32_iscsi((unsigned char *)p, (int)n, 0xffffffffu) ^ 0xffffffffu;
}

static uint32_t masked_crc(const uint8_t *p, size_t n)
{
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* mkdir -p: each missing component made 0777 (less the umask), as os.makedirs does. */
static int make_dirs(const char *dir, const char *shown, ptc_error *err)
{
    size_t n = strlen(dir);
    char *p = ptc__malloc(n + 1);
    if (!p)
        return ptc__err(err, PTC_ENOMEM, "", -1, "tensorboard: out of memory");
    memcpy(p, dir, n + 1);
    int rc = 0;
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            int e = errno;
            char part[256];
            rc = ptc__err(err, PTC_EIO, "", -1,
                          "tensorboard: cannot create directory %s (for %s): %s",
                          tb_escape(part, sizeof part, p, strlen(p)), shown, strerror(e));
            goto done;
        }
        p[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0) {
        int e = errno;
        rc = ptc__err(err, PTC_EIO, "", -1, "tensorboard: cannot use directory %s: %s", shown,
                      strerror(e));
    } else if (!S_ISDIR(st.st_mode)) {
        rc = ptc__err(err, PTC_EIO, "", -1, "tensorboard: %s exists and is not a directory", shown);
    }
done:
    ptc__free(p);
    return rc;
}

/* Packs ev into one TFRecord and appends it whole, or cuts the file back and reports why. */
static int write_event(ptc__tb_writer *w, const Ptctb__Event *ev, ptc_error *err)
{
    size_t n = protobuf_c_message_get_packed_size(&ev->base);
    size_t total = TB_HEADER + n + TB_FOOTER;
    uint8_t *rec = ptc__malloc(total);
    if (!rec)
        return ptc__err(err, PTC_ENOMEM, "", -1, "tensorboard: out of memory for a %zu-byte record",
                        total);
    ptc__put_le64(rec, (uint64_t)n);
    ptc__put_le32(rec + 8, masked_crc(rec, 8));
    if (protobuf_c_message_pack(&ev->base, rec + TB_HEADER) != n) {
        ptc__free(rec);
        return ptc__err(err, PTC_EIO, "", -1,
                        "tensorboard: protobuf-c packed another size than "
                        "it had computed (%zu bytes)",
                        n);
    }
    ptc__put_le32(rec + TB_HEADER + n, masked_crc(rec + TB_HEADER, n));
    int rc = 0;
    for (size_t done = 0; done < total;) {
        ssize_t k = pwrite(w->fd, rec + done, total - done, (off_t)(w->size + (int64_t)done));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int e = k < 0 ? errno : ENOSPC;
            /* Whatever part of the record went out is taken back, so that the file still ends
             * on a record boundary; if even that fails, the message says so. */
            int cut = ftruncate(w->fd, (off_t)w->size) == 0;
            rc = ptc__err(err, PTC_EIO, "", -1, "tensorboard: cannot write %s at byte %lld: %s%s",
                          w->shown, (long long)w->size, strerror(e),
                          cut ? "" : " (and the partial record could not be cut off)");
            goto done;
        }
        done += (size_t)k;
    }
    w->size += (int64_t)total;
done:
    ptc__free(rec);
    return rc;
}

static int tb_close(ptc__tb_writer *w, ptc_error *err);

static int tb_open(const char *dir, ptc__tb_writer **out, ptc_error *err)
{
    ptc__err_clear(err);
    if (!out || !dir || !*dir) {
        if (out)
            *out = NULL;
        return ptc__err(err, PTC_EINVAL, "", -1, "tensorboard: open: missing directory");
    }
    *out = NULL;
    char dshown[256];
    tb_escape(dshown, sizeof dshown, dir, strlen(dir));
    size_t dn = strlen(dir);
    if (dn >= TB_PATH_MAX)
        return ptc__err(err, PTC_ELIMIT, "", -1,
                        "tensorboard: directory %s: its path has %zu bytes, the limit is %d",
                        dshown, dn, TB_PATH_MAX - 1);
    int rc = make_dirs(dir, dshown, err);
    if (rc)
        return rc;

    double t = now();
    char host[TB_HOST_MAX];
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    /* A host name never holds '/', but if one did it would make the name a path. */
    for (char *h = host; *h; h++)
        if (*h == '/')
            *h = '_';
    unsigned long uid = __atomic_fetch_add(&tb_counter, 1, __ATOMIC_RELAXED);

    ptc__tb_writer *w = ptc__malloc(sizeof *w);
    if (!w)
        return ptc__err(err, PTC_ENOMEM, "", -1, "tensorboard: out of memory");
    memset(w, 0, sizeof *w);
    w->fd = -1;
    size_t cap = dn + 1 + 40 + strlen(host) + 2 * 24;
    if (cap > TB_PATH_MAX)
        cap = TB_PATH_MAX;
    w->path = ptc__malloc(cap);
    if (!w->path) {
        rc = ptc__err(err, PTC_ENOMEM, "", -1, "tensorboard: out of memory");
        goto fail;
    }
    int k = snprintf(w->path, cap, "%s%sevents.out.tfevents.%010lld.%s.%ld.%lu", dir,
                     dir[dn - 1] == '/' ? "" : "/", (long long)floor(t), host, (long)getpid(), uid);
    if (k < 0 || (size_t)k >= cap) {
        rc = ptc__err(err, PTC_ELIMIT, "", -1,
                      "tensorboard: the event file's path in %s would be longer than %d bytes",
                      dshown, TB_PATH_MAX - 1);
        goto fail;
    }
    tb_escape(w->shown, sizeof w->shown, w->path, strlen(w->path));
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (w->fd < 0) {
        int e = errno;
        rc = ptc__err(err, PTC_EIO, "", -1, "tensorboard: cannot create %s: %s", w->shown,
                      strerror(e));
        goto fail;
    }

    Ptctb__SourceMetadata src = PTCTB__SOURCE_METADATA__INIT;
    src.writer = (char *)"ptc";
    Ptctb__Event ev = PTCTB__EVENT__INIT;
    ev.wall_time = t;
    ev.what_case = PTCTB__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)"brain.Event:2";
    ev.source_metadata = &src;
    if ((rc = write_event(w, &ev, err)) != 0) {
        /* An empty file would only be a stray run in TensorBoard's list. */
        unlink(w->path);
        goto fail;
    }
    *out = w;
    return 0;
fail:
    tb_close(w, NULL);
    return rc;
}

static const char *tb_path(const ptc__tb_writer *w)
{
    return w ? w->path : NULL;
}

static int tb_scalar(ptc__tb_writer *w, const char *tag, int64_t step, double value, ptc_error *err)
{
    ptc__err_clear(err);
    if (!w || !tag)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensorboard: scalar: missing writer or tag");
    size_t n = strnlen(tag, PTC__TB_TAG_MAX + 1);
    char shown[96];
    if (n == 0 || n > PTC__TB_TAG_MAX)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "tensorboard: tag '%s%s' refused: a tag has 1 to %d bytes",
                        tb_escape(shown, sizeof shown, tag, n < 64 ? n : 64), n > 64 ? "..." : "",
                        PTC__TB_TAG_MAX);
    if (!is_utf8((const unsigned char *)tag, n))
        return ptc__err(err, PTC_EINVAL, "", -1, "tensorboard: tag '%s' refused: it is not UTF-8",
                        tb_escape(shown, sizeof shown, tag, n));
    Ptctb__Summary__Value v = PTCTB__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;
    v.value_case = PTCTB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = (float)value; /* NaN and the infinities stay what they are */
    Ptctb__Summary__Value *vs[1] = {&v};
    Ptctb__Summary s = PTCTB__SUMMARY__INIT;
    s.n_value = 1;
    s.value = vs;
    Ptctb__Event ev = PTCTB__EVENT__INIT;
    ev.wall_time = now();
    ev.step = step;
    ev.what_case = PTCTB__EVENT__WHAT_SUMMARY;
    ev.summary = &s;
    return write_event(w, &ev, err);
}

static int tb_flush(ptc__tb_writer *w, ptc_error *err)
{
    ptc__err_clear(err);
    if (!w)
        return ptc__err(err, PTC_EINVAL, "", -1, "tensorboard: flush: missing writer");
    if (fsync(w->fd) != 0 && errno != EINVAL && errno != EROFS) {
        int e = errno;
        return ptc__err(err, PTC_EIO, "", -1, "tensorboard: cannot flush %s: %s", w->shown,
                        strerror(e));
    }
    return 0;
}

static int tb_close(ptc__tb_writer *w, ptc_error *err)
{
    ptc__err_clear(err);
    if (!w)
        return 0;
    int rc = 0;
    if (w->fd >= 0) {
        rc = tb_flush(w, err);
        if (close(w->fd) != 0 && rc == 0) {
            int e = errno;
            rc = ptc__err(err, PTC_EIO, "", -1, "tensorboard: cannot close %s: %s", w->shown,
                          strerror(e));
        }
    }
    ptc__free(w->path);
    ptc__free(w);
    return rc;
}

static const ptc__tb_ops ops = {
    .version = PTC__TB_OPS_VERSION,
    .size = sizeof(ptc__tb_ops),
    .open = tb_open,
    .path = tb_path,
    .scalar = tb_scalar,
    .flush = tb_flush,
    .close = tb_close,
};

static const ptc__plugin desc = {
    .abi = PTC__PLUGIN_ABI,
    .kind = PTC__PLUGIN_TOOL,
    .name = "tensorboard",
    .summary = "TensorBoard event files for ptc train --tensorboard (protobuf-c)",
    .experimental = 0,
    .ops = &ops,
    .probe = NULL,
};

PTC__DEFINE_PLUGIN_ENTRY(desc)
