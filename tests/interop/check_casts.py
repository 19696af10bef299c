#!/usr/bin/env python3
"""Compare ptc's float32 -> bfloat16 / float16 conversions with torch's for all 2^32 patterns.

tests/interop/cast_dump (built from cast_dump.c) prints, for each of 256 chunks of 2^24
consecutive float32 patterns, the sha256 of ptc's bfloat16 results and of its float16 results
(16-bit little-endian, in pattern order). This script computes the same digests with torch's
Tensor.to(dtype) while cast_dump runs, and compares them. For a chunk that differs it asks
cast_dump for the chunk's raw results and prints the first differing patterns, both sides.

torch converts each thread's slice of a contiguous tensor with vector kernels and the last
(slice length mod 8) elements with a scalar loop whose NaN results differ (float16 NaN becomes
0x7FFF there; lib/tensor/convert.c follows the vector kernels). The thread count is set to a power
of two so that every slice of a 2^24-element chunk is a multiple of 8 long and no element falls in
that tail.

Exit status: 0 all 256 chunks equal, 1 a difference, 77 skipped (torch is not importable), 99
cannot run (cast_dump missing or failing). Takes about two minutes on two cores.

Usage: check_casts.py [--cast-dump PATH]   (default $top_builddir/tests/interop/cast_dump)
"""

import argparse
import hashlib
import os
import subprocess
import sys
import time

CHUNK_BITS = 24
NCHUNKS = 1 << (32 - CHUNK_BITS)
CHUNK = 1 << CHUNK_BITS


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    top_build = os.environ.get("top_builddir") or os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cast-dump", default=os.path.join(top_build, "tests", "interop", "cast_dump"))
    args = ap.parse_args()
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print("SKIP: torch (and numpy) are needed to compare with torch: %s" % e)
        return 77
    if not os.access(args.cast_dump, os.X_OK):
        print("ERROR: %s is not built (make check builds it)" % args.cast_dump)
        return 99

    threads = 1
    while threads * 2 <= torch.get_num_threads():
        threads *= 2
    torch.set_num_threads(threads)
    t0 = time.monotonic()
    proc = subprocess.Popen([args.cast_dump], stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    ours = []
    for k in range(NCHUNKS):
        x = torch.arange(k * CHUNK, (k + 1) * CHUNK, dtype=torch.int64).to(torch.int32)
        f = x.view(torch.float32)
        digests = []
        for dt in (torch.bfloat16, torch.float16):
            raw = f.to(dt).view(torch.int16).numpy().astype("<i2", copy=False).tobytes()
            digests.append(hashlib.sha256(raw).hexdigest())
        ours.append(digests)
    t_torch = time.monotonic() - t0

    out, err = proc.communicate()
    t_all = time.monotonic() - t0
    if proc.returncode != 0:
        print("ERROR: cast_dump exited with %d: %s" % (proc.returncode, err.decode()[:300]))
        return 99
    lines = out.decode().split("\n")
    bad = 0
    for k in range(NCHUNKS):
        fields = lines[k].split() if k < len(lines) else []
        if len(fields) != 3 or fields[0] != str(k):
            print("ERROR: cast_dump line %d is malformed: %r" % (k, lines[k] if k < len(lines)
                                                                  else ""))
            return 99
        for which, name in ((0, "bfloat16"), (1, "float16")):
            if fields[1 + which] != ours[k][which]:
                bad += 1
                show_difference(args.cast_dump, k, which, name, np, torch)
    print("%d chunks of %d float32 patterns, bfloat16 and float16: %s (torch %s, %d threads; "
          "torch side %.0f s, total %.0f s)"
          % (NCHUNKS, CHUNK, "all equal" if bad == 0 else "%d digests differ" % bad,
             torch.__version__, threads, t_torch, t_all))
    return 1 if bad else 0


def show_difference(cast_dump, k, which, name, np, torch):
    """Prints the first patterns of chunk k where ptc and torch disagree."""
    raw = subprocess.run([cast_dump, "--chunk", str(k)], stdout=subprocess.PIPE).stdout
    ptc = np.frombuffer(raw, dtype="<u2")[which * CHUNK:(which + 1) * CHUNK]
    x = torch.arange(k * CHUNK, (k + 1) * CHUNK, dtype=torch.int64).to(torch.int32)
    dt = torch.bfloat16 if which == 0 else torch.float16
    ref = x.view(torch.float32).to(dt).view(torch.int16).numpy().view("<u2")
    idx = np.nonzero(ptc != ref)[0]
    print("FAIL chunk %d %s: %d patterns differ" % (k, name, len(idx)))
    for i in idx[:5]:
        print("  0x%08x: ptc 0x%04x, torch 0x%04x" % (k * CHUNK + int(i), ptc[i], ref[i]))


if __name__ == "__main__":
    sys.exit(main())
