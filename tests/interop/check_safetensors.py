#!/usr/bin/env python3
"""safetensors interoperability between ptc and the Python safetensors library, both directions.

For several sets of tensors (every dtype both sides know, with NaN, inf and edge values; scalars
and empty tensors; odd names; many small tensors; one large tensor) made here with fixed seeds,
plus the committed fixtures of testdata/safetensors/:

  library -> ptc   safetensors.torch.save_file writes the file; `ptc inspect --json --hash FILE`
                   must list the same tensors in header order with the same dtype, shape, nbytes
                   and sha256 (of the elements, row-major, little-endian, as the manifests of
                   testdata/torch/ compute it), every storage used in place from the mapping;
  ptc -> library   torch.save writes the tensors (in another order, some as transposed, conj and
                   neg views) to a .pt file; `ptc convert IN.pt OUT.safetensors` writes the
                   safetensors file; safetensors.torch.load_file must give bit-identical tensors,
                   and the file must equal, byte for byte, what save_file writes for the same
                   tensors (without metadata: ptc convert writes none).

Prints one line per set ("ok ..." or "FAIL ..." with the differences, both sides). Exit status:
0 all equal, 1 a difference, 77 skipped (torch or safetensors not importable), 99 cannot run
(ptc not built). Environment: top_srcdir and top_builddir (default: this source tree); --ptc CMD
replaces the ptc command.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))


def sha(t):
    import torch
    t = t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()


def tensor_sets(torch):
    """name -> (dict of tensors, dict of .pt-only views)."""
    g = torch.Generator().manual_seed(1234)

    def rnd(shape, dtype):
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=g).bool()
        if dtype.is_floating_point or dtype.is_complex:
            real = torch.float32 if dtype == torch.complex64 else torch.float64
            x = torch.randn(shape, generator=g, dtype=real) * 100
            if dtype.is_complex:
                x = torch.complex(x, torch.randn(shape, generator=g) * 3)
            return x.to(dtype)
        info = torch.iinfo(dtype)
        lo, hi = max(info.min, -2 ** 62), min(info.max, 2 ** 62)
        return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)

    dtypes = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64,
              torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool, torch.uint16,
              torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2,
              torch.float8_e4m3fnuz, torch.float8_e5m2fnuz, torch.complex64]
    shapes = [(7,), (3, 5), (2, 3, 4), (), (0,), (4, 0, 2), (1, 1, 1, 1, 9)]
    zoo = {}
    for i, dt in enumerate(dtypes):
        for j, shape in enumerate(shapes[:4] if i % 2 else shapes):
            zoo["%s.%d" % (str(dt).replace("torch.", ""), j)] = rnd(shape, dt)
    special = torch.tensor([float("nan"), -float("nan"), float("inf"), -float("inf"), -0.0, 0.0,
                            1e-45, 3.4e38, -1.0])
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        zoo["special." + str(dt).replace("torch.", "")] = special.to(dt)
    zoo["unicode \u00e9\u4e2d.weight"] = rnd((2,), torch.float32)
    zoo["quote\"back\\slash\x01"] = rnd((1,), torch.int8)
    base = rnd((4, 6), torch.float32)
    views = {"view.t": base.t(), "view.conj": rnd((3,), torch.complex64).conj(),
             "view.neg": torch._neg_view(rnd((5,), torch.float64)),
             "view.slice": base[1:3, ::2]}
    many = {"layer%d.%s" % (i // 2, "weight" if i % 2 else "bias"): rnd((i % 7 + 1,), torch.float32)
            for i in range(600)}
    big = {"big": rnd((2048, 2048), torch.float32), "small": rnd((3,), torch.int64)}
    return {"zoo": (zoo, views), "many": (many, {}), "big": (big, {}),
            "empty": ({}, {})}


class Checker:
    def __init__(self, ptc):
        self.ptc = ptc
        self.failures = 0

    def run(self, *args):
        p = subprocess.run(self.ptc + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace").strip()

    def fail(self, name, msgs):
        self.failures += 1
        print("FAIL %s: %s" % (name, "; ".join(msgs[:5])))

    def library_to_ptc(self, name, path, expect):
        """expect: [(name, dtype, shape, nbytes, sha256)] in header order."""
        rc, out, err = self.run("inspect", "--json", "--hash", path)
        if rc != 0:
            self.fail(name, ["ptc inspect exited with %d: %s" % (rc, err)])
            return
        doc = json.loads(out.decode("utf-8"))
        got = [(t["path"], t["dtype"], t["shape"], t["nbytes"], t.get("sha256"))
               for t in doc["tensors"]]
        msgs = []
        if len(got) != len(expect):
            msgs.append("%d tensors, torch sees %d" % (len(got), len(expect)))
        for g, e in zip(got, expect):
            if list(g) != list(e):
                msgs.append("ptc %s, torch %s" % (json.dumps(g), json.dumps(e)))
        unmapped = [s["key"] for s in doc["storages"] if not s["mapped"] and s["nbytes"]]
        if unmapped:
            msgs.append("storages copied instead of mapped: %s" % unmapped[:5])
        if doc.get("format") != "safetensors":
            print("note %s: ptc inspect reports format %r" % (name, doc.get("format")))
        if msgs:
            self.fail(name + " (library -> ptc)", msgs)
        else:
            print("ok %s (library -> ptc): %d tensors" % (name, len(got)))

    def ptc_to_library(self, name, tensors, views, tmp, torch, st):
        pt = os.path.join(tmp, name + ".pt")
        out = os.path.join(tmp, name + ".ptc.safetensors")
        lib = os.path.join(tmp, name + ".lib.safetensors")
        # Another order than the library's, and views that ptc must write row-major.
        order = dict(sorted(tensors.items(), key=lambda kv: kv[0], reverse=True))
        order.update(views)
        torch.save(order, pt)
        want = dict(tensors)
        want.update({k: v.resolve_conj().resolve_neg().contiguous() for k, v in views.items()})
        st.save_file(want, lib)
        rc, _, err = self.run("convert", pt, out)
        if rc != 0:
            self.fail(name + " (ptc -> library)", ["ptc convert exited with %d: %s" % (rc, err)])
            return
        msgs = []
        try:
            got = st.load_file(out)
        except Exception as e:  # the library's own error type varies across versions
            self.fail(name + " (ptc -> library)", ["load_file refused ptc's file: %s" % e])
            return
        if sorted(got) != sorted(want):
            msgs.append("names %s, expected %s" % (sorted(got)[:5], sorted(want)[:5]))
        for k in sorted(set(got) & set(want)):
            a, b = got[k], want[k]
            if a.dtype != b.dtype or a.shape != b.shape or sha(a) != sha(b):
                msgs.append("%r: %s %s vs %s %s" % (k, a.dtype, tuple(a.shape), b.dtype,
                                                    tuple(b.shape)))
        with open(out, "rb") as f:
            mine = f.read()
        with open(lib, "rb") as f:
            theirs = f.read()
        if mine != theirs:
            i = next((i for i in range(min(len(mine), len(theirs))) if mine[i] != theirs[i]),
                     min(len(mine), len(theirs)))
            msgs.append("bytes differ from save_file's at offset %d (%d vs %d bytes): ptc %r, "
                        "library %r" % (i, len(mine), len(theirs), mine[i:i + 40],
                                        theirs[i:i + 40]))
        if msgs:
            self.fail(name + " (ptc -> library)", msgs)
        else:
            print("ok %s (ptc -> library): %d tensors, byte-identical to save_file"
                  % (name, len(got)))


def main():
    top_src = os.environ.get("top_srcdir") or os.path.dirname(os.path.dirname(HERE))
    top_build = os.environ.get("top_builddir") or top_src
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ptc", default=None,
                    help="the ptc command (default: $top_builddir/tools/ptc)")
    args = ap.parse_args()
    try:
        import safetensors
        import safetensors.torch as st
        import torch
    except ImportError as e:
        print("SKIP: torch and safetensors are needed: %s" % e)
        return 77
    warnings.simplefilter("ignore")
    ptc = args.ptc.split() if args.ptc else [os.path.join(top_build, "tools", "ptc")]
    if not args.ptc and not os.access(ptc[0], os.X_OK):
        print("ERROR: %s is not built" % ptc[0])
        return 99
    chk = Checker(ptc)
    print("torch %s, safetensors %s" % (torch.__version__, safetensors.__version__))

    with tempfile.TemporaryDirectory(prefix="ptc-st-") as tmp:
        for name, (tensors, views) in tensor_sets(torch).items():
            path = os.path.join(tmp, name + ".safetensors")
            st.save_file(tensors, path, metadata={"format": "pt"})
            loaded = st.load_file(path)
            with open(path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(n))
            expect = [(k, str(loaded[k].dtype).replace("torch.", ""), list(loaded[k].shape),
                       loaded[k].numel() * loaded[k].element_size(), sha(loaded[k]))
                      for k in header if k != "__metadata__"]
            chk.library_to_ptc(name, path, expect)
            chk.ptc_to_library(name, tensors, views, tmp, torch, st)

        # The committed fixtures (library-written); nul_name must be refused.
        fixdir = os.path.join(top_src, "testdata", "safetensors")
        with open(os.path.join(fixdir, "manifest.json")) as f:
            manifest = json.load(f)
        for name, fx in sorted(manifest["files"].items()):
            path = os.path.join(fixdir, name + ".safetensors")
            if name == "nul_name":
                rc, _, err = chk.run("inspect", "--json", path)
                if rc == 0:
                    chk.fail(name, ["ptc accepted a NUL byte in a tensor name"])
                else:
                    print("ok %s: refused (%s)" % (name, err[:80]))
                continue
            expect = [(t["name"], t["dtype"], t["shape"],
                       (t["data_offsets"][1] - t["data_offsets"][0]), t["sha256"])
                      for t in fx["tensors"]]
            chk.library_to_ptc("testdata/" + name, path, expect)
    print("%s" % ("all equal" if chk.failures == 0 else "%d failures" % chk.failures))
    return 1 if chk.failures else 0


if __name__ == "__main__":
    sys.exit(main())
