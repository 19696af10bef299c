#!/usr/bin/env python3
"""Write the golden conversion tables of testdata/casts/ with real PyTorch (torch 2.6 on CPU).

ptc's conversions (lib/tensor/convert.c) must give the bits torch's Tensor.to(dtype) gives. The C
unit test tests/unit/test_convert.c cannot run torch, so this script records torch's answers:

  f32_16.bin.gz  gzip of little-endian data: the magic "PTCCAST2", u32 nsections, then nsections
                 sections of float32 patterns, each: u32 count, count u32 inputs delta-coded
                 (x[i] = x[i-1] + d[i] modulo 2^32, x[-1] = 0; each section is sorted), count u16
                 torch bfloat16 results, count u16 torch float16 results. The sections:
                   1. one pattern in every block of 4096 (i * 4096 + a jitter in [0, 4096), the
                      jitter varying with i so that every low-bit position is exercised);
                   2. every pattern whose low 16 bits are 0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001
                      or 0xFFFF (the bfloat16 ties and their neighbours, all 65536 high halves);
                   3. the float16 ties and their neighbours for every float16 result (each
                      float32 exponent from 2^-24 to 2^15, every kept mantissa, both signs);
                   4. special values: +-0, float32 subnormals, +-inf, quiet and signalling NaNs of
                      both signs with several payloads, the float16 / bfloat16 overflow
                      thresholds, the float16 subnormal boundaries.
                 Then the 16-bit patterns h = 0..65535, as four columns of 65536: u32 float16 h ->
                 float32, u32 bfloat16 h -> float32, u16 float16 h -> float32 -> float16, u16
                 bfloat16 h -> float32 -> bfloat16.
  cases.txt      one line per conversion between the ten dtypes ptc converts (float64, float32,
                 float16, bfloat16, int64, int32, int16, int8, uint8, bool):
                   "<src dtype> <dst dtype> <src bits hex> <dst bits hex>"
                 for special and random source values of each dtype.
  manifest.json  versions, sample counts, sha256 of the two files above, and what torch does at
                 the edges (the NaN results of its scalar tail loops, which ptc does not follow).

torch converts contiguous tensors with vector kernels and handles the last (n mod 8 or 16)
elements of each thread's slice with a scalar loop whose NaN results differ (float32 -> float16
NaN gives 0x7FFF there). The tables record the vector kernels' results: every tensor converted here
has a length that is a multiple of 64 and torch runs on one thread.

Usage (from the top of the source tree): python3 tests/interop/gen_cast_golden.py [--out DIR]
It takes about a minute.
"""

import argparse
import gzip
import hashlib
import json
import os
import platform
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
PAD = 64

DTYPES = {
    "float64": (torch.float64, 8), "float32": (torch.float32, 4), "float16": (torch.float16, 2),
    "bfloat16": (torch.bfloat16, 2), "int64": (torch.int64, 8), "int32": (torch.int32, 4),
    "int16": (torch.int16, 2), "int8": (torch.int8, 1), "uint8": (torch.uint8, 1),
    "bool": (torch.bool, 1),
}
UINT = {8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}


def convert(x, dtype):
    """x.to(dtype) through torch's vector kernels: padded to a multiple of PAD elements."""
    n = x.numel()
    pad = (-n) % PAD
    if pad:
        x = torch.cat([x, torch.zeros(pad, dtype=x.dtype)])
    return x.to(dtype)[:n].contiguous()


def bits(t):
    """The raw little-endian bits of each element, as unsigned numpy integers."""
    size = t.element_size()
    raw = t.contiguous().view(torch.uint8).numpy().tobytes()
    return np.frombuffer(raw, dtype=np.dtype(UINT[size]).newbyteorder("<"))


def from_bits(values, name):
    """A tensor of dtype name whose elements have the given raw bits."""
    dt, size = DTYPES[name]
    raw = np.asarray(values, dtype=np.dtype(UINT[size]).newbyteorder("<")).tobytes()
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dt).clone()


# ---- float32 sample ---------------------------------------------------------------------------

def f32(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def float32_sections():
    """The four float32 sections, each sorted and without repeats (sections may overlap)."""
    i = np.arange(1 << 20, dtype=np.uint64)
    jitter = ((i * np.uint64(2654435761)) >> np.uint64(8)) % np.uint64(4096)
    dense = (i * np.uint64(4096) + jitter).astype(np.uint32)
    hi = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    low16 = np.concatenate([hi | np.uint32(lo) for lo in (0x0000, 0x0001, 0x7FFF, 0x8000,
                                                         0x8001, 0xFFFF)])
    # float16 ties: a float32 of exponent field e keeps 23 - d mantissa bits in float16, where
    # d = 13 for normal float16 results (e >= 113) and d = 13 + (113 - e) below.
    ties = []
    for e in range(102, 143):
        d = 13 if e >= 113 else 13 + (113 - e)
        if d > 23:  # e = 102: the implicit bit is the tie (2^-25); specials cover it
            continue
        k = np.arange(1 << (23 - d), dtype=np.uint32)
        base = np.uint32(e << 23) | (k << np.uint32(d))
        tie = base | np.uint32(1 << (d - 1))
        for t in (tie - np.uint32(1), tie, tie + np.uint32(1)):
            ties.append(t)
            ties.append(t | np.uint32(0x80000000))
    special = [
        0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00000002, 0x007FFFFF, 0x807FFFFF,
        0x00400000, 0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000,
        0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001, 0x7F7EFFFF, 0x7F7F0000,
        0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x477FFFFF, 0x47800000,
        f32(65504.0), f32(65519.0), f32(65520.0), f32(65536.0), f32(1e5), f32(1e38),
        0x38800000, 0x387FE000, 0x387FF000, 0x387FFFFF, 0x387FC000,  # float16 min normal
        0x33000000, 0x33000001, 0x32FFFFFF, 0x33800000, 0x33C00000, 0x33400000, 0x33400001,
        0x2F800000, 0x00000100,
    ]
    for sign in (0, 0x80000000):
        for payload in (0x400000, 0x400001, 0x7FFFFF, 0x000001, 0x200000, 0x012345, 0x412345,
                        0x001FFF, 0x002000, 0x3FE000, 0x555555, 0x2AAAAA):
            special.append(sign | 0x7F800000 | payload)
    special = np.array([v & 0xFFFFFFFF for v in special], dtype=np.uint32)
    return [np.unique(p) for p in (dense, low16, np.concatenate(ties), special)]


# ---- cross-dtype cases ------------------------------------------------------------------------

def case_values(name, rng):
    """Raw bit patterns of the source values tried for a source dtype."""
    size = DTYPES[name][1]
    if name == "float64":
        vals = [0.0, -0.0, 0.5, -0.5, 0.99, -0.99, 1.0, 1.5, -1.5, 2.5, 127.5, 128.0, 255.5, 256.0,
                -128.5, -129.0, -200.7, 32767.5, 32768.0, 65504.0, 65519.99, 65520.0, 65535.0,
                65536.0, 70000.0, 2147483520.0, 2147483647.0, 2147483647.9, 2147483648.0,
                -2147483648.0, -2147483648.9, -2147483649.0, -2147483904.0, 4294967296.0, 1e10,
                -1e10, 9.2233720368547748e18, 9.223372036854775807e18, -9.223372036854775808e18,
                -9.2233720368547779e18, 1e19, 1e30, 3.4028234663852886e38, 3.4028235677973366e38,
                3.5e38, 1e300, 5e-324, 2.2250738585072014e-308, 1.401298464324817e-45,
                7.006492321624085e-46, 7.006492321624086e-46, 1.1754943508222875e-38,
                1 + 2 ** -8 + 2 ** -30, 1 + 2 ** -8, 1 + 2 ** -8 - 2 ** -30,
                1 + 2 ** -11 + 2 ** -30,
                2.0 ** -25, 2.0 ** -25 * (1 + 2 ** -40), 2.0 ** -24 * 1.5, 6.103515625e-05,
                4294967295.0, 3000000000.5, -3000000000.5, 2.0 ** 40 + 255, -(2.0 ** 40) - 1,
                1e15 + 7, -1e15 - 7, 2.0 ** 62 + 2 ** 10 + 129, -65535.0, -65537.0, 65537.0,
                float("inf"), float("-inf"), 0.1, -0.1, 3.141592653589793]
        out = [struct.unpack("<Q", struct.pack("<d", v))[0] for v in vals]
        out += [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0xFFF0000000000001,
                0x7FF4000000000000, 0x7FF8123456789ABC, 0xFFF7FFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF,
                0x0000000000000001, 0x000FFFFFFFFFFFFF]
    elif name == "float32":
        vals = [0.0, -0.0, 0.5, -0.5, 0.99, 1.5, -1.5, 2.5, 127.9, 128.0, 255.9, 256.0, 257.3,
                -128.0, -129.0, -200.7, 32767.5, 32768.0, 65504.0, 65520.0, 65535.0, 65536.0,
                70000.0, 2147483520.0, 2147483648.0, -2147483648.0, -2147483904.0, 4294967296.0,
                1e10, -1e10, 9.2233715e18, 9.223372036854775807e18, -9.223372036854775808e18,
                -9.2233730e18, 1e19, 1e30, 3e38, 0.1, float("inf"), float("-inf")]
        out = [f32(v) for v in vals]
        out += [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FA12345, 0x7FFFFFFF, 0x00000001,
                0x007FFFFF, 0x80000001, 0x7F7FFFFF, 0x3F808000, 0x3F818000, 0x3F800FFF, 0x3F801000,
                0x3F803000, 0x33000000, 0x33000001]
    elif name in ("float16", "bfloat16"):
        out = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x3800, 0xB800,
               0x3E00, 0xBE00, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7C01, 0xFC01, 0x7E00, 0xFE00,
               0x7E55, 0x7FFF, 0xFFFF, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7F81, 0x7FC0, 0xFFC0,
               0x7FC5, 0x0080, 0x007F, 0x4300, 0x4380, 0x4700, 0x4780, 0x5800, 0x5F00, 0x5F01,
               0xCF00, 0xCF01, 0x4F00, 0x4EFF, 0x3FFF, 0x4001, 0x7800, 0x6BFF, 0x5BFF, 0x57FF]
    elif name == "bool":
        out = [0, 1]
    else:
        bitsz = 8 * size
        signed = name != "uint8"
        lo, hi = (-(1 << (bitsz - 1)), (1 << (bitsz - 1)) - 1) if signed else (0, (1 << bitsz) - 1)
        cand = [0, 1, -1, 2, -2, 127, 128, -128, -129, 255, 256, 300, -300, 32767, 32768, -32768,
                -32769, 65535, 65536, 65519, 65520, 65505, -65520, 70000, (1 << 24) + 1,
                (1 << 24) + 3, (1 << 25) + (1 << 17) + 1, 2 ** 31 - 1, -2 ** 31, 2 ** 31 + 5,
                2 ** 32, 2 ** 53 + 1, 2 ** 60 + 2 ** 36 + 1, -(2 ** 60 + 2 ** 36 + 1),
                2 ** 62 + 2 ** 38 + 1, 2 ** 63 - 1, -2 ** 63, 1000000007, -123456789]
        out = [v & ((1 << bitsz) - 1) for v in cand if lo <= v <= hi]
    mask = (1 << (8 * size)) - 1
    out += [int(r) & mask for r in rng.integers(0, 1 << min(8 * size, 63), 48, dtype=np.uint64)]
    if size == 8:
        out += [int(r) | (1 << 63) for r in rng.integers(0, 1 << 63, 16, dtype=np.uint64)]
    if name == "bool":
        out = [0, 1]
    seen, uniq = set(), []
    for v in out:
        if v not in seen:
            seen.add(v)
            uniq.append(v)
    return uniq


def write_cases(path):
    rng = np.random.default_rng(20250601)
    lines = []
    for src in DTYPES:
        vals = case_values(src, rng)
        x = from_bits(vals, src)
        for dst in DTYPES:
            if dst == src:
                continue
            y = bits(convert(x, DTYPES[dst][0]))
            sw, dw = 2 * DTYPES[src][1], 2 * DTYPES[dst][1]
            for v, r in zip(vals, y):
                lines.append("%s %s %0*x %0*x" % (src, dst, sw, v, dw, int(r)))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return len(lines)


def tail_behaviour():
    """What torch's scalar tail loops do with NaN (recorded, not followed by ptc)."""
    def tail(src_bits, src, dst):
        x = from_bits([src_bits] * 3, src)  # 3 elements: all in the tail
        return "0x%x" % int(bits(x.to(DTYPES[dst][0]))[0])
    return {
        "float32 0x7fc12345 -> float16 (tail)": tail(0x7FC12345, "float32", "float16"),
        "float32 0x7fc12345 -> float16 (vector)": "0x%x" % int(
            bits(convert(from_bits([0x7FC12345], "float32"), torch.float16))[0]),
        "float16 0x7e01 -> float32 (tail)": tail(0x7E01, "float16", "float32"),
        "float64 NaN -> bfloat16 (tail)": tail(0x7FF8000000000000, "float64", "bfloat16"),
        "float32 NaN -> bfloat16 (tail)": tail(0xFFC00000, "float32", "bfloat16"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(TOP, "testdata", "casts"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)

    sections = float32_sections()
    blob = b"PTCCAST2" + struct.pack("<I", len(sections))
    for x in sections:
        t = torch.from_numpy(x.view(np.float32).copy())
        bf = bits(convert(t, torch.bfloat16)).astype("<u2")
        hf = bits(convert(t, torch.float16)).astype("<u2")
        delta = np.diff(x, prepend=np.uint32(0)).astype("<u4")
        blob += struct.pack("<I", len(x)) + delta.tobytes() + bf.tobytes() + hf.tobytes()
    nrec = sum(len(x) for x in sections)

    h = np.arange(65536, dtype=np.uint16)
    h_t = torch.from_numpy(h.view(np.int16).copy())
    f16 = convert(h_t.view(torch.float16), torch.float32)
    b16 = convert(h_t.view(torch.bfloat16), torch.float32)
    blob += bits(f16).astype("<u4").tobytes() + bits(b16).astype("<u4").tobytes()
    blob += bits(convert(f16, torch.float16)).astype("<u2").tobytes()
    blob += bits(convert(b16, torch.bfloat16)).astype("<u2").tobytes()

    bin_path = os.path.join(args.out, "f32_16.bin.gz")
    # mtime=0 and no file name keep the gzip bytes reproducible.
    with open(bin_path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
            gz.write(blob)
    ncases = write_cases(os.path.join(args.out, "cases.txt"))

    def sha(p):
        with open(p, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    manifest = {
        "generator": "tests/interop/gen_cast_golden.py",
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "python_version": platform.python_version(),
        "machine": platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": 1,
        "float32_sections": [int(len(x)) for x in sections],
        "sixteen_bit_records": 65536,
        "cases": ncases,
        "sha256": {"f32_16.bin.gz": sha(bin_path),
                   "cases.txt": sha(os.path.join(args.out, "cases.txt"))},
        "uncompressed_sha256": {"f32_16.bin": hashlib.sha256(blob).hexdigest()},
        "torch_tail_nan_results": tail_behaviour(),
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote %d float32 records, 65536 16-bit records, %d cases to %s"
          % (nrec, ncases, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
