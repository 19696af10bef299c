#!/usr/bin/env python3
"""check_zip64_local.py - checkpoints whose zip only Python's zipfile wrote, with zip64 local sizes.

zipfile.ZipFile.open(name, "w", force_zip64=True), what Python uses for members of unknown size,
writes 0xFFFFFFFF sizes and a zip64 extra field into the local header but plain 32-bit sizes into
the central directory. The sizes are the same values in another encoding: torch 2.6 loads such a
file, and ptc must too (DESIGN decision 3: ambiguity is judged on values, not encodings).

A small state dict is saved by torch.save (to memory); its records are then rewritten, in the
same order and under the same folder prefix, by zipfile with force_zip64=True, in three variants:

  stored     a seekable output: local sizes 0xFFFFFFFF + zip64 extra, central sizes plain;
  streamed   an output zipfile cannot seek: the same local header with zero sizes in its zip64
             extra, flag bit 3 and a 24-byte data descriptor;
  deflated   as stored, every record deflated (torch reads it without mmap).

Records written by zipfile are not 64-byte aligned, so ptc copies them rather than mapping them.
For each variant: torch.load must return tensors equal to the saved ones (else the file is not
one torch accepts and the check proves nothing); `ptc inspect --json --hash` must list the same
tensors (path, dtype, shape) with the sha256 of torch's bytes; `ptc verify --json` must give the
verdict ok without findings; `ptc convert` to safetensors must hold each tensor's bytes exactly.
A control then changes one local zip64 size: torch still loads it (it never reads local sizes),
and ptc must refuse it, naming the member and both values.

Prints one line per check ("ok ..." or "FAIL ..." with both sides). Exit status: 0 all passed,
1 a failure, 77 skipped (torch not importable), 99 cannot run (ptc not built). Environment:
top_srcdir and top_builddir (default: this source tree).
"""

import io
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402

PTC = os.path.join(ic.BUILDDIR, "tools", "ptc")
SENTINEL = 0xFFFFFFFF


class Unseekable(io.RawIOBase):
    """A write-only stream zipfile cannot seek in (so it writes data descriptors)."""

    def __init__(self):
        super().__init__()
        self.buf = bytearray()

    def writable(self):
        return True

    def write(self, b):
        self.buf += b
        return len(b)


def rewrite(src, compression, seekable):
    """src's records, in order and under the same names, rewritten by zipfile with force_zip64."""
    out = io.BytesIO() if seekable else Unseekable()
    with zipfile.ZipFile(io.BytesIO(src)) as zin, \
            zipfile.ZipFile(out, "w", compression=compression) as zout:
        for info in zin.infolist():
            with zout.open(info.filename, "w", force_zip64=True) as f:
                f.write(zin.read(info))
    return out.getvalue() if seekable else bytes(out.buf)


def layout(data):
    """(records, those with 0xFFFFFFFF local sizes + zip64 extra, those with plain central ones)."""
    n = local64 = central_plain = 0
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for zi in z.infolist():
            n += 1
            h = zi.header_offset
            csize, usize, nlen, xlen = struct.unpack("<IIHH", data[h + 18:h + 30])
            extra = data[h + 30 + nlen:h + 30 + nlen + xlen]
            if csize == usize == SENTINEL and extra[:2] == b"\x01\x00":
                local64 += 1
        # zipfile's central extra is what it parsed: none means plain 32-bit sizes.
        central_plain = sum(1 for zi in z.infolist() if not zi.extra)
    return n, local64, central_plain


def raw_bytes(torch, t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def safetensors_tensors(path):
    """name -> (dtype, shape, bytes) of a safetensors file, parsed here (no library needed)."""
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = (v["dtype"], v["shape"], blob[base + a:base + b])
    return out


ST_DTYPE = {"float32": "F32", "int64": "I64", "bfloat16": "BF16", "float16": "F16",
            "uint8": "U8", "bool": "BOOL", "int32": "I32", "float64": "F64"}


class Checker:
    def __init__(self, torch, tmp):
        self.torch = torch
        self.tmp = tmp
        self.failures = 0

    def fail(self, what, msgs):
        self.failures += 1
        print("FAIL %s: %s" % (what, "; ".join(msgs[:6])))

    def ptc(self, *args):
        p = subprocess.run([PTC] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return p.returncode, p.stdout.decode("utf-8", "replace"), \
            p.stderr.decode("utf-8", "replace").strip()

    def variant(self, name, data, sd, expect_local64):
        torch = self.torch
        path = os.path.join(self.tmp, name + ".pt")
        with open(path, "wb") as f:
            f.write(data)
        n, local64, central_plain = layout(data)
        print("%s: %d records, %d with zip64 local sizes, %d with plain central sizes"
              % (name, n, local64, central_plain))
        if expect_local64 and (local64 != n or central_plain != n):
            # An older or newer zipfile that writes another layout would make this check vacuous.
            self.fail(name + " layout", ["expected zip64 local sizes and plain central sizes in "
                                         "all %d records, found %d and %d"
                                         % (n, local64, central_plain)])
            return

        # torch must accept the file, or nothing below means anything.
        try:
            got = torch.load(io.BytesIO(data), weights_only=True)
        except Exception as e:  # torch's error types vary
            self.fail(name + " torch.load", ["torch refused the file: %s" % e])
            return
        bad = [k for k in sd if k not in got or got[k].dtype != sd[k].dtype
               or not torch.equal(got[k], sd[k])]
        if bad or list(got) != list(sd):
            self.fail(name + " torch.load", ["torch reads other tensors: %s (keys %s vs %s)"
                                             % (bad, list(got), list(sd))])
            return
        print("ok %s: torch.load returns the %d saved tensors" % (name, len(sd)))

        # ptc inspect --json --hash: the same tensors, with the sha256 of torch's bytes.
        rc, out, err = self.ptc("inspect", "--json", "--hash", path)
        if rc != 0:
            self.fail(name + " inspect", ["ptc inspect exited %d: %s" % (rc, err)])
        else:
            doc = json.loads(out)
            mine, theirs = ic.inspect_rows(doc), ic.ptc_tensor_rows(sd)
            if mine != theirs:
                self.fail(name + " inspect", ["ptc %s" % json.dumps(mine),
                                              "torch %s" % json.dumps(theirs)])
            else:
                mapped = sum(1 for s in doc["storages"] if s["mapped"])
                print("ok %s: ptc inspect --hash: %d tensors equal to torch's (%d of %d storages "
                      "mapped)" % (name, len(mine), mapped, len(doc["storages"])))

        # ptc verify: verdict ok, nothing found.
        rc, out, err = self.ptc("verify", "--json", path)
        try:
            f = json.loads(out)["files"][0]
        except (ValueError, KeyError, IndexError):
            f = None
        if rc != 0 or not f or f["verdict"] != "ok" or f["findings"]:
            self.fail(name + " verify", ["ptc verify exited %d: %s %s"
                                         % (rc, json.dumps(f["findings"] if f else None)[:400],
                                            err)])
        else:
            print("ok %s: ptc verify: verdict ok, no findings, torch_loads %s"
                  % (name, f.get("torch_loads")))

        # ptc convert to safetensors: every tensor's bytes, exactly.
        st = os.path.join(self.tmp, name + ".safetensors")
        rc, out, err = self.ptc("convert", path, st)
        if rc != 0:
            self.fail(name + " convert", ["ptc convert exited %d: %s" % (rc, err)])
            return
        conv = safetensors_tensors(st)
        msgs = []
        if sorted(conv) != sorted(sd):
            msgs.append("names %s, torch %s" % (sorted(conv), sorted(sd)))
        for k in sorted(set(conv) & set(sd)):
            dt, shape, b = conv[k]
            want = (ST_DTYPE.get(str(sd[k].dtype).replace("torch.", "")), list(sd[k].shape),
                    raw_bytes(torch, sd[k]))
            if (dt, shape, b) != want:
                msgs.append("%s: ptc %s %s %s, torch %s %s %s"
                            % (k, dt, shape, b[:16].hex(), want[0], want[1], want[2][:16].hex()))
        if msgs:
            self.fail(name + " convert", msgs)
        else:
            print("ok %s: ptc convert: %d tensors bit-identical to torch's" % (name, len(conv)))

    def control(self, data, sd):
        """The stored variant with one local zip64 size changed: torch loads, ptc refuses."""
        torch = self.torch
        buf = bytearray(data)
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            zi = next(zi for zi in z.infolist() if zi.filename.endswith("/data/0"))
        h = zi.header_offset
        (nlen,) = struct.unpack("<H", buf[h + 26:h + 28])
        x = h + 30 + nlen
        if buf[x:x + 4] != b"\x01\x00\x10\x00":
            self.fail("control", ["no 16-byte zip64 extra at the start of %s's local extra (%s)"
                                  % (zi.filename, bytes(buf[x:x + 4]).hex())])
            return
        usize, csize = struct.unpack("<QQ", buf[x + 4:x + 20])
        struct.pack_into("<QQ", buf, x + 4, usize + 4, csize + 4)
        path = os.path.join(self.tmp, "control.pt")
        with open(path, "wb") as f:
            f.write(buf)
        try:
            got = torch.load(io.BytesIO(bytes(buf)), weights_only=True)
            torch_says = "loads it (equal: %s)" % all(torch.equal(got[k], sd[k]) for k in sd)
        except Exception as e:
            torch_says = "refuses it (%s)" % str(e)[:80]
        rc, out, err = self.ptc("inspect", path)
        want = ["data/0", "%d/%d bytes" % (csize + 4, usize + 4), "%d/%d bytes" % (csize, usize)]
        missing = [w for w in want if w not in err]
        if rc != 1 or missing:
            self.fail("control", ["ptc inspect exited %d (expected 1), message %r lacks %s"
                                  % (rc, err, missing)])
        else:
            print("ok control: local zip64 sizes %d/%d vs central %d/%d: torch %s; ptc refuses: %s"
                  % (csize + 4, usize + 4, csize, usize, torch_says, err))


def main():
    torch = ic.require_torch()
    if not os.access(PTC, os.X_OK):
        print("ERROR: %s is not built" % PTC)
        return 99
    print("torch %s, Python %s zipfile" % (torch.__version__, sys.version.split()[0]))
    g = torch.Generator().manual_seed(11)
    sd = {
        "conv.weight": torch.randn(4, 3, 3, 3, generator=g),
        "conv.bias": torch.randn(4, generator=g),
        "bn.running_var": torch.rand(4, generator=g) + 0.5,
        "bn.num_batches_tracked": torch.tensor(17, dtype=torch.int64),
        "fc.weight": torch.randn(5, 36, generator=g).to(torch.bfloat16),
        "ids": torch.arange(-3, 10, dtype=torch.int64),
    }
    src = io.BytesIO()
    torch.save(sd, src)
    src = src.getvalue()

    tmp = ic.mktemp("zip64-local")
    try:
        chk = Checker(torch, tmp)
        stored = rewrite(src, zipfile.ZIP_STORED, True)
        chk.variant("stored", stored, sd, True)
        chk.variant("streamed", rewrite(src, zipfile.ZIP_STORED, False), sd, False)
        chk.variant("deflated", rewrite(src, zipfile.ZIP_DEFLATED, True), sd, True)
        chk.control(stored, sd)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("all passed" if chk.failures == 0 else "%d failures" % chk.failures)
    return 1 if chk.failures else 0


if __name__ == "__main__":
    sys.exit(main())
