/*
 * archive.h - the zip container of PyTorch checkpoints (read side) and the byte sources it reads.
 *
 * A source is the raw bytes of one file: a read-only mapping of a path, a caller's memory buffer, or
 * a positional read callback. The zip reader parses the container itself, strictly, and then asks
 * minizip to read the same bytes and confirms that both readers see the same members at the same
 * offsets: where two readers could disagree about which bytes are a record, ptc rejects the file
 * (property P6 of docs/security.md; the format in docs/internals/zip.md).
 *
 * What ptc__zip_open guarantees when it succeeds (everything else is PTC_EFORMAT unless noted):
 *   - the file starts with a local header at offset 0 and ends with the end-of-central-directory
 *     record (comment allowed, but no second EOCD signature inside it); zip64 end records, when
 *     present, are consistent with the classic ones; single disk;
 *   - entry counts agree (EOCD, zip64 EOCD, central directory);
 *   - every central entry's local header exists, has the same name, method and flags, and the
 *     local sizes/CRC are either equal to the central ones or zero with flag bit 3 and a data
 *     descriptor that matches the central values;
 *   - local records (header + data + descriptor) tile [0, central directory) exactly: no gap, no
 *     overlap, nothing hidden between records;
 *   - names: non-empty, no NUL, valid UTF-8, no control bytes, no backslash, no ':' , no absolute
 *     path, no "." or ".." component, no duplicates even when compared case-insensitively; all share
 *     one prefix "<prefix>/" (the prefix taken from the first central entry, as torch does);
 *     directory entries ("prefix/") are allowed only if empty;
 *   - methods 0 (stored) and 8 (deflated) only; flags: no encryption (bit 0), no patch data (5), no
 *     strong encryption (6);
 *   - stored: compressed size == size; deflated: size <= limits.max_inflated_bytes and
 *     size <= compressed size * limits.max_inflate_ratio (else PTC_ELIMIT);
 *   - entries <= limits.max_records (PTC_ELIMIT).
 * With PTC_OPEN_VERIFY_CRC every record is read (inflated) and its CRC-32 checked (PTC_ECRC).
 */
#ifndef PTC_ARCHIVE_ARCHIVE_H
#define PTC_ARCHIVE_ARCHIVE_H

#include "base/base.h"

/* ---- sources ------------------------------------------------------------------------------- */
typedef struct ptc__source ptc__source;

/* Maps the file read-only (falls back to reading it whole when it cannot be mapped: a pipe, a
 * device, a file system without mmap). _capped reads at most max_read bytes that way (PTC_ELIMIT
 * past them); the plain one up to 16 GiB. */
int ptc__source_open_path(ptc__source **out, const char *path, ptc_error *err);
int ptc__source_open_path_capped(ptc__source **out, const char *path, uint64_t max_read,
                                 ptc_error *err);
/* buf is borrowed. */
int ptc__source_open_memory(ptc__source **out, const void *buf, size_t len, ptc_error *err);
int ptc__source_open_callback(ptc__source **out, ptc_read_fn fn, void *ctx, uint64_t size,
                              ptc_error *err);
void ptc__source_close(ptc__source *s);
uint64_t ptc__source_size(const ptc__source *s);
/* The whole content when it is addressable (mapped or memory); NULL for callback sources. */
const uint8_t *ptc__source_map(const ptc__source *s);
/* Reads exactly len bytes at off; fewer available -> PTC_EFORMAT "truncated" (labelled with the
 * file offset), callback failure -> PTC_EIO. */
int ptc__source_read(ptc__source *s, uint64_t off, void *buf, size_t len, ptc_error *err);

/* ---- zip ----------------------------------------------------------------------------------- */
typedef struct ptc__zip_entry {
    const char *name; /* full name as stored, NUL-terminated (names containing NUL are rejected) */
    const char *record;     /* name after "<prefix>/" (points into name) */
    uint16_t method;        /* 0 stored, 8 deflated */
    uint16_t flags;         /* general purpose bit flags */
    uint32_t crc32;         /* from the central directory */
    uint64_t comp_size;     /* bytes in the file */
    uint64_t size;          /* bytes once inflated */
    uint64_t header_offset; /* local header */
    /* first data byte: header + 30 + local name length + local extra length */
    uint64_t data_offset;
    uint64_t end_offset; /* first byte after data and data descriptor */
    /* Where the bytes no reader takes for the record lie (ptc verify scans them too): the local
     * extra area at header_offset + 30 + name_len, the central entry at central_offset with its
     * extra area at central_offset + 46 + name_len and its comment right after that. */
    uint64_t central_offset;
    uint16_t name_len, local_extra_len, central_extra_len, comment_len;
} ptc__zip_entry;

typedef struct ptc__zip ptc__zip;

/* An internal open flag (no public PTC_OPEN_* uses this bit), passed through ptc_open_params.flags
 * by ptc_verify: the archive keeps data.pkl's bytes, once read into a buffer of its own (inflated,
 * with its size and CRC-32 checked), until ptc__zip_close, and every later ptc__zip_read of it
 * returns those bytes instead of inflating again. The budget is charged while a reader holds
 * them, exactly as for a fresh buffer, so limits act as without the flag. */
#define PTC__ZIP_KEEP_PICKLE (1u << 31)

/* Parses and validates the container. Reads headers only (and all data with PTC_OPEN_VERIFY_CRC).
 * budget (may be NULL) is charged for the entry table. The source must outlive the zip. */
int ptc__zip_open(ptc__zip **out, ptc__source *src, const ptc_limits *limits, ptc__budget *budget,
                  unsigned flags, ptc_error *err);
void ptc__zip_close(ptc__zip *z);
const char *ptc__zip_prefix(const ptc__zip *z);
size_t ptc__zip_count(const ptc__zip *z);
/* The archive comment: file offset and length (0 when there is none). */
void ptc__zip_comment(const ptc__zip *z, uint64_t *offset, uint64_t *len);
/* Entries in central-directory order. */
const ptc__zip_entry *ptc__zip_entry_at(const ptc__zip *z, size_t i);
/* Exact, case-sensitive lookup of a record name after the prefix ("data.pkl", "data/0"). */
const ptc__zip_entry *ptc__zip_find(const ptc__zip *z, const char *record);
/* The bytes of a record. A stored record of an addressable source is returned in place (*owned
 * set to NULL). Otherwise the bytes are read or inflated into a new buffer charged to the budget
 * given at open, returned in both *data and *owned; release it with ptc__zip_release. Inflating
 * checks the exact size and the CRC-32. */
int ptc__zip_read(ptc__zip *z, const ptc__zip_entry *e, const uint8_t **data, void **owned,
                  ptc_error *err);
void ptc__zip_release(ptc__zip *z, const ptc__zip_entry *e, void *owned);
/* Computes the CRC-32 of a record's (inflated) bytes and compares it with the central directory. */
int ptc__zip_check_crc(ptc__zip *z, const ptc__zip_entry *e, ptc_error *err);

/* ---- zip writer ----------------------------------------------------------------------------
 * Writes a checkpoint container byte for byte as torch 2.6 does (docs/internals/zip.md): every
 * record stored, named "<prefix>/<record>", its data aligned to 64 bytes by an 'FB' extra field
 * in the local header (zip64 extra first when the size or the header offset needs it, counted in
 * the padding), local CRC and sizes zero with flags 0x0808 (0x0800 for an empty record), a data
 * descriptor after non-empty data (16 bytes, 24 with a local zip64 extra), the central directory
 * with the real values, then a zip64 end record, its locator and the end record (always, as torch
 * does). Records are written in the order they are added; the caller adds them in torch's order.
 * The file is written atomically (ptc__afile). */
typedef struct ptc__zipw ptc__zipw;

/* The most records the writer lists: as many 46-byte central entries as the 4 GiB central
 * directory it writes can hold (names make it fewer; that is checked as it grows). More is
 * PTC_ELIMIT. */
#define PTC__ZIPW_MAX_RECORDS ((size_t)0xFFFFFFFFu / 46u)

int ptc__zipw_open(ptc__zipw **out, const char *path, const char *prefix, ptc_error *err);
/* One whole record. */
int ptc__zipw_add(ptc__zipw *w, const char *record, const void *data, uint64_t len, ptc_error *err);
/* A record written in pieces (large storages, converted data): begin with its exact size, write
 * exactly that many bytes, end. */
int ptc__zipw_begin(ptc__zipw *w, const char *record, uint64_t len, ptc_error *err);
int ptc__zipw_write(ptc__zipw *w, const void *data, size_t n, ptc_error *err);
int ptc__zipw_end(ptc__zipw *w, ptc_error *err);
/* CRC-32s of the records so far, in order (torch's serialization id hashes them). */
size_t ptc__zipw_count(const ptc__zipw *w);
uint32_t ptc__zipw_crc(const ptc__zipw *w, size_t i);
/* Writes the central directory and end records and commits the file; frees w. */
int ptc__zipw_finish(ptc__zipw *w, ptc_error *err);
/* Discards everything (no file is left); frees w. Accepts NULL. */
void ptc__zipw_abort(ptc__zipw *w);

#endif /* PTC_ARCHIVE_ARCHIVE_H */
