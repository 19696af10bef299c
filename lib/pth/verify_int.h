/*
 * verify_int.h - what the two halves of ptc_verify share: the report under construction, the
 * state of the static pass, and the functions each half calls in the other. verify.c holds the
 * pickle pass (scan, sweep, findings) and the verdict; verify_zip.c the containers (zip members
 * and headers, local headers found anywhere, tar members). Internal to lib/pth.
 */
#ifndef PTC_PTH_VERIFY_INT_H
#define PTC_PTH_VERIFY_INT_H

#include "pth/pth.h"

/* The most findings, and the most global references, a report keeps (then only counted). */
#define REPORT_CAP 4096
/* PROTO opcodes of one full scan remembered for ptc__verify_sweep_adds_nothing (a pickle has
 * one; a region of several pickles one each): past it, the region is swept. */
#define PROTO_KEEP 16

struct ptc_report {
    ptc_verdict verdict;
    const char *format;
    ptc_torch_answer torch;
    ptc__budget budget;
    ptc__arena *arena; /* the strings of findings and references */
    ptc_finding *f;
    size_t nf, capf;
    uint32_t *fslot; /* FINDING_SLOTS slots, 1 + an index into f, 0 empty; NULL below
                      * FINDING_LINEAR findings, or when it could not be allocated (linear then) */
    ptc_global_ref *g;
    size_t ng, capg;
    uint64_t dropped;
    /* The file position of byte 0 of the member being scanned, -1 where its bytes are not the
     * file's (inflated) or unknown: a finding's file_offset is base + offset. */
    int64_t base;
    uint64_t size; /* of the file: a file_offset equal to it is "where the file ends" */
    size_t load;   /* 1 + the index of the load's finding (0: none), placed when the scan reads
                  * its record; an index, as r->f moves when it grows */
};

/* ---- the static pass ------------------------------------------------------------------------ */

typedef struct scan_ctx {
    ptc_report *r;
    const ptc_policy *policy;
    const ptc_policy *torch_policy; /* torch 2.6's default allowlist */
    const char *member;             /* escaped label of the member being scanned */
    bool torch_runs;                /* this pickle is one torch 2.6 would run */
    bool suspect;       /* this pickle could be the one torch runs (ambiguous container) */
    bool torch_hit;     /* a pickle torch runs references something torch refuses */
    bool suspect_hit;   /* a suspect pickle does */
    unsigned refs;      /* references found in the member being scanned */
    unsigned bad;       /* ... of which outside the policy */
    bool sweep;         /* decoding from a PROTO found anywhere (see ptc__verify_sweep_region) */
    const uint8_t *map; /* the whole file */
    uint64_t size;
    ptc__span *cov; /* file bytes full scans read (sweep_file replays them quietly) */
    size_t ncov, capcov;
    int fatal; /* PTC_ENOMEM from the report, PTC_ELIMIT past COVER_CAP */
    /* The PROTO opcodes of the full scan under way while record_protos (offsets in its region),
     * for ptc__verify_sweep_adds_nothing; protos_over when there were more than PROTO_KEEP. */
    bool record_protos, protos_over;
    unsigned nprotos;
    uint64_t protos[PROTO_KEEP];
} scan_ctx;

/* verify.c: the report and the pickle pass (each function's contract is at its definition). */
int ptc__verify_add_finding(ptc_report *r, ptc_verdict v, int code, const char *kind,
                            const char *member, int64_t offset, const char *detail,
                            bool torch_refuses);
int ptc__verify_scan_pickles_at(scan_ctx *c, const uint8_t *data, size_t len, uint64_t base,
                                unsigned torch_first, unsigned max, bool suspect, size_t *end,
                                size_t *reach);
int ptc__verify_scan_pickles(scan_ctx *c, const uint8_t *data, size_t len, uint64_t base,
                             unsigned torch_first, unsigned max, bool suspect, size_t *reach);
void ptc__verify_cover(scan_ctx *c, uint64_t a, uint64_t b);
int ptc__verify_sweep_region(scan_ctx *c, const uint8_t *data, size_t len, uint64_t base,
                             size_t reach);
void ptc__verify_record_protos(scan_ctx *c);
bool ptc__verify_sweep_adds_nothing(scan_ctx *c, const uint8_t *data, size_t len, size_t end,
                                    size_t reach);
int ptc__verify_swept_finding(scan_ctx *c, const char *what);

/* verify_zip.c: the containers. */
bool ptc__verify_looks_like_pickle(const uint8_t *data, size_t len);
int ptc__verify_scan_zip_entries(scan_ctx *c, ptc__zip *z, bool check_crc, bool *constants);
int ptc__verify_scan_zip_strict(scan_ctx *c, ptc__source *src, const ptc_limits *lim,
                                bool *constants);
int ptc__verify_scan_local_headers(scan_ctx *c, const uint8_t *map, uint64_t size, bool *constants,
                                   bool *any);
int ptc__verify_scan_tar(scan_ctx *c, const uint8_t *map, uint64_t size);

#endif
