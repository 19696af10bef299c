"""check_read_f64.py - ptc_tensor_read_f64 (and ptc_float_text) against torch 2.6.

torch saves one tensor of every numeric dtype: every bit pattern of the 8-bit floats (the four
float8 variants), float16 and bfloat16; extremes, NaN, infinities, subnormals and random values
of float32 and float64; the extremes of every integer dtype (uint16, uint32 and uint64 included);
complex32, complex64 and complex128; and strided views (a transpose, a slice with an offset, an
expand). tests/interop/f64_dump reads each with ptc_tensor_read_f64 and prints every double as
ptc_float_text writes it; this script compares each text with repr() of torch's own conversion
(tensor.to(float64), complex through view_as_real(tensor.to(complex128))). A mismatch prints the
path, the element index and both texts. Exit status 0, 1 on a mismatch, 99 when it cannot run.
"""
import math
import os
import subprocess
import sys
import tempfile

import torch

top_builddir = os.environ.get("top_builddir") or os.path.join(os.path.dirname(__file__), "..", "..")
dump = os.path.join(top_builddir, "tests", "interop", "f64_dump")
if not os.access(dump, os.X_OK):
    print("FAIL: %s is not built" % dump)
    sys.exit(99)

g = torch.Generator().manual_seed(15)
t = {}
u8 = torch.arange(256, dtype=torch.int32).to(torch.uint8)
for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    t[name] = u8.clone().view(getattr(torch, name))
i16 = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
t["float16"] = i16.clone().view(torch.float16)
t["bfloat16"] = i16.clone().view(torch.bfloat16)
special = [0.0, -0.0, 1.0, -1.5, math.inf, -math.inf, math.nan, 1e-45, 1e-310, 3.4028234663852886e38,
           1.7976931348623157e308, 0.1, 100.0, 1e15, 1e16, 123456.789]
t["float32"] = torch.cat([torch.tensor(special, dtype=torch.float32),
                          torch.randn(200, generator=g) * 1e3])
t["float64"] = torch.cat([torch.tensor(special, dtype=torch.float64),
                          torch.randn(200, generator=g, dtype=torch.float64) * 1e-3])
for name, lo, hi in (("int8", -128, 127), ("int16", -32768, 32767), ("int32", -2**31, 2**31 - 1),
                     ("int64", -2**63, 2**63 - 1), ("uint8", 0, 255), ("uint16", 0, 2**16 - 1),
                     ("uint32", 0, 2**32 - 1), ("uint64", 0, 2**64 - 1)):
    vals = [lo, hi, 0, 1, (lo + hi) // 2]
    if name == "uint64":  # torch.tensor cannot take 2**64 - 1 directly: through int64's bits
        t[name] = torch.tensor([0, -1, 1, 2**62, -2**63], dtype=torch.int64).view(torch.uint64).clone()
    else:
        t[name] = torch.tensor(vals, dtype=getattr(torch, name))
t["bool"] = torch.tensor([True, False, True])
c = torch.complex(torch.randn(50, generator=g, dtype=torch.float64),
                  torch.randn(50, generator=g, dtype=torch.float64))
t["complex128"] = c
t["complex64"] = c.to(torch.complex64)
t["complex32"] = c.to(torch.complex32)
base = torch.randn(6, 5, generator=g)
t["view_transpose"] = base.t()
t["view_slice"] = base[2:, 1:4]
t["view_expand"] = torch.tensor([7.0]).expand(4)
t["view_f16_step"] = t["float16"][::4093]

with tempfile.TemporaryDirectory() as tmp:
    f = os.path.join(tmp, "dtypes.pt")
    torch.save(t, f)
    p = subprocess.run([dump, f], capture_output=True, text=True)
    if p.returncode != 0:
        print("FAIL: f64_dump exited %d: %s" % (p.returncode, p.stderr.strip()))
        sys.exit(1)

lines = {}
for line in p.stdout.splitlines():
    parts = line.split(" ")
    lines[parts[0]] = parts[1:]

bad = 0
for path, x in t.items():
    got = lines.get(path)
    if got is None:
        print("FAIL: %s: not in f64_dump's output" % path)
        bad += 1
        continue
    if x.dtype.is_complex:
        want = torch.view_as_real(x.to(torch.complex128)).flatten().tolist()
    else:
        want = x.to(torch.float64).flatten().tolist()
    want = [repr(float(v)) for v in want]
    dtype = str(x.dtype).replace("torch.", "")
    if got[0] != dtype:
        print("FAIL: %s: dtype %s, torch says %s" % (path, got[0], dtype))
        bad += 1
    got = got[1:]
    if len(got) != len(want):
        print("FAIL: %s: %d values, torch has %d" % (path, len(got), len(want)))
        bad += 1
        continue
    diffs = [i for i in range(len(want)) if got[i] != want[i]]
    for i in diffs[:5]:
        print("FAIL: %s[%d]: ptc %s, torch %s" % (path, i, got[i], want[i]))
    bad += len(diffs) > 0
    if not diffs:
        print("ok   %s: %d values equal" % (path, len(want)))

print("check_read_f64: %d tensors, %d differ" % (len(t), bad))
sys.exit(1 if bad else 0)
