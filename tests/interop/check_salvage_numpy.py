"""check_salvage_numpy.py - numpy arrays inside torch.save files, salvaged by ptc, against numpy.

torch 2.6 saves a dict of numpy arrays (and numpy scalars) of every dtype ptc maps to a tensor
(bool, int8 to int64, uint8 to uint64, float16/32/64, complex64/128), little- and big-endian,
C and Fortran order, non-contiguous views (numpy pickles them as a copy), 0-d, empty and
multi-dimensional shapes, with the values at the edges of each dtype (extremes, NaN, infinities,
subnormals), beside a torch tensor and arrays ptc must leave symbolic (object and structured
dtypes, strings). Each file is written in the zip format, in the legacy format, and in the legacy
format with numpy 1's module name (numpy.core.multiarray, which numpy 2 no longer writes: the
stream is edited, which the legacy format allows since it carries no checksum).

tests/interop/f64_dump --salvage opens each file with PTC_OPEN_SALVAGE and prints every tensor's
shape and its elements as ptc_tensor_read_f64 gives them (Python's repr); this script compares
them with numpy's own values (float(), complex parts), the dtype name with numpy's, the shape,
and that exactly the expected keys became tensors. A mismatch prints the key, the element index
and both texts. The strict open (plain f64_dump) must refuse every file: numpy's globals are not
in torch's allowlist. Exit status 0, 1 on a mismatch, 99 when it cannot run.
"""
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

top_builddir = os.environ.get("top_builddir") or os.path.join(os.path.dirname(__file__), "..", "..")
dump = os.path.join(top_builddir, "tests", "interop", "f64_dump")
if not os.access(dump, os.X_OK):
    print("FAIL: %s is not built" % dump)
    sys.exit(99)

rng = np.random.default_rng(16)
arrays = {}
for code in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"):
    info = np.iinfo(code)
    vals = np.array([info.min, info.max, 0, 1, info.max // 3], dtype=code)
    arrays[code] = vals
    if np.dtype(code).itemsize > 1:
        arrays[code + "_be"] = vals.astype(">" + code)
for code in ("f2", "f4", "f8"):
    info = np.finfo(code)
    vals = np.array([0.0, -0.0, 1.5, info.max, info.min, info.tiny, info.smallest_subnormal,
                     math.inf, -math.inf, math.nan], dtype=code)
    arrays[code] = np.concatenate([vals, rng.standard_normal(7).astype(code)])
    arrays[code + "_be"] = arrays[code].astype(">" + code)
for code in ("c8", "c16"):
    vals = rng.standard_normal(6) + 1j * rng.standard_normal(6)
    arrays[code] = np.concatenate([vals, [complex(math.inf, math.nan)]]).astype(code)
    arrays[code + "_be"] = arrays[code].astype(">" + code)
arrays["b1"] = np.array([True, False, True, True])
base = rng.standard_normal((4, 5)).astype("f4")
arrays["matrix"] = base
arrays["fortran"] = np.asfortranarray(base)
arrays["fortran_be"] = np.asfortranarray(base.astype(">f8"))
arrays["transposed"] = base.T  # F-contiguous: pickled in Fortran order
arrays["strided"] = base[::2, 1::2]  # neither: pickled as a C-order copy
arrays["cube"] = rng.integers(-50, 50, (2, 3, 4)).astype("i2")
arrays["zero_d"] = np.array(3.25)
arrays["empty"] = np.zeros((0, 3), dtype="f4")
arrays["empty_be"] = np.zeros((2, 0), dtype=">i4")
arrays["scalar_f8"] = np.float64(0.125)
arrays["scalar_i4"] = np.int32(-7)
arrays["scalar_b1"] = np.bool_(True)
symbolic = {
    "object": np.array([1, "a", None], dtype=object),
    "structured": np.zeros(2, dtype=[("a", "i4"), ("b", "f4")]),
    "strings": np.array(["ab", "c"]),
    "datetimes": np.array(["2026-01-01"], dtype="M8[D]"),
}
obj = dict(arrays)
obj.update(symbolic)
obj["torch"] = torch.arange(3, dtype=torch.float32)


def expected_values(a):
    a = np.asarray(a)
    out = []
    for x in a.reshape(-1, order="C"):  # row-major, as ptc reads
        if np.iscomplexobj(a):
            out += [repr(float(x.real)), repr(float(x.imag))]
        else:
            out.append(repr(float(x)))
    return out


def dtype_name(a):
    return np.asarray(a).dtype.newbyteorder("=").name


def check(path, label):
    bad = 0
    strict = subprocess.run([dump, path], capture_output=True, text=True)
    if strict.returncode == 0:
        print("FAIL %s: the strict open loaded a file that names numpy globals" % label)
        bad += 1
    r = subprocess.run([dump, "--salvage", path], capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL %s: f64_dump --salvage exited %d: %s" % (label, r.returncode, r.stderr.strip()))
        return bad + 1
    shapes, values = {}, {}
    for line in r.stdout.splitlines():
        f = line.split(" ")
        if f[0] == "shape":
            shapes[f[1]] = tuple(int(d) for d in f[3:3 + int(f[2])])
        else:
            values[f[0]] = (f[1], f[2:])
    want_keys = set(arrays) | {"torch"}
    if set(values) != want_keys:
        print("FAIL %s: tensors %s, expected %s" % (label, sorted(values), sorted(want_keys)))
        bad += 1
    for k, a in arrays.items():
        if k not in values:
            continue
        dt, got = values[k]
        want = expected_values(a)
        if dt != dtype_name(a):
            print("FAIL %s %s: dtype %s, numpy %s" % (label, k, dt, dtype_name(a)))
            bad += 1
        if shapes.get(k) != tuple(np.shape(a)):
            print("FAIL %s %s: shape %s, numpy %s" % (label, k, shapes.get(k), np.shape(a)))
            bad += 1
        if len(got) != len(want):
            print("FAIL %s %s: %d values, numpy %d" % (label, k, len(got), len(want)))
            bad += 1
            continue
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                print("FAIL %s %s[%d]: ptc %s, numpy %s" % (label, k, i, g, w))
                bad += 1
                break
    if values.get("torch", (None, []))[1] != ["0.0", "1.0", "2.0"]:
        print("FAIL %s torch: %s" % (label, values.get("torch")))
        bad += 1
    if not bad:
        print("ok %s: %d numpy arrays and scalars equal numpy's values, %d left symbolic"
              % (label, len(arrays), len(symbolic)))
    return bad


status = 0
with tempfile.TemporaryDirectory() as tmp:
    zpath = os.path.join(tmp, "numpy-zip.pth")
    lpath = os.path.join(tmp, "numpy-legacy.pth")
    opath = os.path.join(tmp, "numpy1-legacy.pth")
    torch.save(obj, zpath)
    torch.save(obj, lpath, _use_new_zipfile_serialization=False)
    with open(lpath, "rb") as f:
        blob = f.read()
    edited = blob.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
    if edited == blob:
        print("FAIL: the legacy stream names no numpy._core.multiarray to rename")
        status = 1
    with open(opath, "wb") as f:
        f.write(edited)
    for path, label in ((zpath, "zip"), (lpath, "legacy"), (opath, "legacy, numpy 1 names")):
        if check(path, label):
            status = 1
sys.exit(status)
