/*
 * tb.h - the table of the module tool-tensorboard.so (tools/tensorboard/writer.c), shared by the
 * module and the programs that load it (ptc train --tensorboard, tests/unit/test_tensorboard).
 *
 * The program gets the table with ptc_tool_module("tensorboard", ...) and checks version and size
 * before it calls anything: a module built from other sources of this header is refused with a
 * message that names both versions. Bump PTC__TB_OPS_VERSION whenever a member changes.
 *
 * The writer makes one event file the way TensorBoard's EventFileWriter (which torch's
 * SummaryWriter uses) makes it: the name events.out.tfevents.<time>.<host>.<pid>.<n>, a first
 * Event carrying file_version "brain.Event:2", then one Event per scalar, each a TFRecord
 * (uint64 LE length, uint32 LE masked CRC-32C of those 8 bytes, the Event, uint32 LE masked
 * CRC-32C of the Event).
 */
#ifndef PTC_TOOLS_TB_H
#define PTC_TOOLS_TB_H

#include <stddef.h>
#include <stdint.h>

#include "ptc/ptc.h"

#define PTC__TB_OPS_VERSION 1
/* The longest tag accepted, in bytes (UTF-8): TensorBoard itself has no limit, but a tag is a name
 * shown on a chart; anything longer is a caller's mistake, refused rather than written. */
#define PTC__TB_TAG_MAX 1024

typedef struct ptc__tb_writer ptc__tb_writer;

typedef struct ptc__tb_ops {
    int version; /* PTC__TB_OPS_VERSION */
    size_t size; /* sizeof(ptc__tb_ops) */
    /* Creates dir (and its parents) when missing, then a new event file in it, and writes the
     * first event. *out: the writer, for close to free. PTC_EIO (the path and errno's text),
     * PTC_ELIMIT (dir longer than PATH_MAX), PTC_ENOMEM, PTC_EINVAL (NULL arguments). */
    int (*open)(const char *dir, ptc__tb_writer **out, ptc_error *err);
    /* The event file's path; lives as long as the writer. */
    const char *(*path)(const ptc__tb_writer *w);
    /* One scalar at step, wall time now. value is written as a float32, as SummaryWriter's
     * add_scalar does, NaN and infinities as they are. The record reaches the file whole or not
     * at all: a failed write (ENOSPC...) is cut back off the file and reported (PTC_EIO). A tag
     * that is empty, longer than PTC__TB_TAG_MAX bytes or not UTF-8 is refused (PTC_EINVAL). */
    int (*scalar)(ptc__tb_writer *w, const char *tag, int64_t step, double value, ptc_error *err);
    /* What was written reaches the disk (fsync). PTC_EIO. */
    int (*flush)(ptc__tb_writer *w, ptc_error *err);
    /* Flushes, closes and frees w (NULL: nothing). Whatever it returns, w is gone; the file holds
     * every record written before. PTC_EIO. */
    int (*close)(ptc__tb_writer *w, ptc_error *err);
} ptc__tb_ops;

#endif /* PTC_TOOLS_TB_H */
