#!/usr/bin/env python3
"""check_variants.py - what older torch releases wrote, and torch 2.6 still loads: ptc reads it.

torch.save of 2.6 writes one shape of pickle, but the files users meet were written by every torch
since 0.4, and torch 2.6's weights-only unpickler loads the older shapes too. Each case below is a
small checkpoint built here with Python's pickler (the calls named, the arguments as those writers
wrote them) around real storage records:

  hooks-none           _rebuild_tensor_v2(..., backward_hooks=None): torch 0.4 to 1.x
  parameter-hooks-none _rebuild_parameter(tensor, True, None)
  pairs-legacy         a legacy stream whose root is OrderedDict([[key, value], ...]) of
                       _rebuild_tensor(storage, offset, size, stride): Python 2 era files
  lists                size and stride as lists
  metadata-false       a false metadata argument ([]), which torch skips
  v3-other-dtype       _rebuild_tensor_v3 of a FloatStorage read as float64
  v2-untyped           _rebuild_tensor_v2 of an UntypedStorage: a uint8 tensor
  location-text        a storage location that is no device ('evil'), which map_location ignores
  values               empty bytes and bytearray, a Counter with an attribute, a Parameter and a
                       tensor with a plain attribute in their state
  cuda                 torch.save on 'cuda:0' (torch's location_tag answers 'cuda:0', as on a GPU)

For each: torch.load(f, weights_only=True, map_location="cpu") must load it (else the case proves
nothing); `ptc verify` must say ok; `ptc inspect --json --hash` must list torch's tensors (path,
dtype, shape, SHA-256 of the bytes); `ptc convert f out.pth` read back by torch must equal torch's
reading of f. For the CUDA file also: ptc inspect shows the saved location in its text and JSON,
convert keeps it, and `ptc convert --map-location cpu` writes 'cpu' for every storage, so that
torch.load without a map_location loads the result on a machine without a GPU.

Prints one line per check ("ok ..." or "FAIL ..."). Exit status: 0 all passed, 1 a failure, 77
torch is not importable (tests/interop/run.sh counts that as a failure), 99 ptc is not built.
"""

import collections
import io
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402

PTC = os.path.join(ic.BUILDDIR, "tools", "ptc")
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


class Storage:
    """A storage as the pickle names it: its class, key, location and element count."""

    def __init__(self, cls, key, location, numel, data):
        self.cls, self.key, self.location, self.numel, self.data = cls, key, location, numel, data


class Call:
    """Pickles as REDUCE of fn with args: the call an older writer put in the file."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


class Pickler(pickle.Pickler):
    def __init__(self, f, legacy):
        super().__init__(f, protocol=2)
        self.legacy = legacy

    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            pid = ("storage", obj.cls, obj.key, obj.location, obj.numel)
            return pid + (None,) if self.legacy else pid
        return None


def dumps(obj, legacy=False):
    b = io.BytesIO()
    Pickler(b, legacy).dump(obj)
    return b.getvalue()


def zip_file(obj, storages):
    """A torch zip checkpoint: archive/data.pkl, the storage records, version and byteorder."""
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", dumps(obj))
        z.writestr("archive/byteorder", "little")
        for s in storages:
            z.writestr("archive/data/%s" % s.key, s.data)
        z.writestr("archive/version", "3\n")
    return b.getvalue()


def legacy_file(obj, storages):
    """A legacy stream: magic, protocol 1001, sys_info, the object, its keys, the storages."""
    b = io.BytesIO()
    for part in (LEGACY_MAGIC, 1001, {"protocol_version": 1001, "little_endian": True,
                                      "type_sizes": {"short": 2, "int": 4, "long": 4}}):
        pickle.dump(part, b, protocol=2)
    b.write(dumps(obj, legacy=True))
    pickle.dump([s.key for s in storages], b, protocol=2)
    for s in storages:
        b.write(struct.pack("<q", s.numel) + s.data)
    return b.getvalue()


def cases(torch):
    """(name, file bytes) for every case but cuda."""
    u = torch._utils
    od = collections.OrderedDict
    f32 = struct.pack("<4f", 1.0, -2.0, 3.5, 0.25)
    fs = Storage(torch.FloatStorage, "0", "cpu", 4, f32)
    hooks = Call(od)

    def v2(s, size, stride, backward_hooks, *meta):
        return Call(u._rebuild_tensor_v2, s, 0, size, stride, False, backward_hooks, *meta)

    yield "hooks-none", zip_file({"w": v2(fs, (2, 2), (2, 1), None)}, [fs])
    yield "parameter-hooks-none", zip_file(
        {"w": Call(u._rebuild_parameter, v2(fs, (4,), (1,), hooks), True, None)}, [fs])
    ls = Storage(torch.FloatStorage, "94117", "cpu", 4, f32)
    t = Call(u._rebuild_tensor, ls, 0, (4,), (1,))
    yield "pairs-legacy", legacy_file(Call(od, [["w", t], ["b", 5], ["w", t]]), [ls])
    yield "lists", zip_file({"w": v2(fs, [2, 2], [1, 2], hooks)}, [fs])
    yield "metadata-false", zip_file({"w": v2(fs, (4,), (1,), hooks, [])}, [fs])
    yield "v3-other-dtype", zip_file(
        {"w": Call(u._rebuild_tensor_v3, fs, 0, (2,), (1,), False, hooks, torch.float64),
         "f": v2(fs, (4,), (1,), hooks)}, [fs])
    us = Storage(torch.UntypedStorage, "0", "cpu", 16, f32)
    yield "v2-untyped", zip_file({"w": v2(us, (16,), (1,), hooks)}, [us])
    es = Storage(torch.FloatStorage, "0", "evil", 4, f32)
    yield "location-text", zip_file({"w": v2(es, (4,), (1,), hooks)}, [es])
    # Values beside the tensors: empty bytes and bytearray (Python pickles b'' as bytes(), which
    # torch refuses: ptc must not write that), a Counter with an attribute, a Parameter and a
    # tensor with a plain attribute in their state.
    yield "values", zip_file(
        {"w": v2(fs, (4,), (1,), hooks), "b": Call(__import__("_codecs").encode, "", "latin1"),
         "ba": Call(bytearray), "c": CounterWithAttr(),
         "p": Call(u._rebuild_parameter_with_state, v2(fs, (2,), (1,), hooks), True, hooks,
                   {"tag": "kept"}),
         "t": Call(torch._tensor._rebuild_from_type_v2, u._rebuild_tensor_v2, torch.Tensor,
                   (fs, 1, (3,), (1,), False, hooks), {"note": "t"})}, [fs])


class CounterWithAttr:
    """Counter({'a': 2}) whose instance dict holds note='x': REDUCE, then BUILD."""

    def __reduce__(self):
        return collections.Counter, ({"a": 2},), {"note": "x"}


class Checker:
    def __init__(self, torch, tmp):
        self.torch, self.tmp, self.failures = torch, tmp, 0

    def fail(self, what, msgs):
        self.failures += 1
        print("FAIL %s: %s" % (what, "; ".join(str(m) for m in msgs[:6])))

    def ptc(self, *args):
        p = subprocess.run([PTC] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return p.returncode, p.stdout.decode("utf-8", "replace"), \
            p.stderr.decode("utf-8", "replace").strip()

    def check(self, name, path):
        """The four checks on one file; returns torch's reading of it, or None."""
        torch = self.torch
        try:
            ref = torch.load(path, weights_only=True, map_location="cpu")
        except Exception as e:  # torch's error types vary
            self.fail(name + " torch.load", ["torch refused the file, so it proves nothing: %s"
                                             % e])
            return None
        rc, out, err = self.ptc("verify", "--json", path)
        try:
            f = json.loads(out)["files"][0]
        except (ValueError, KeyError, IndexError):
            f = None
        if rc != 0 or not f or f["verdict"] != "ok" or f.get("torch_loads") is not True:
            self.fail(name + " verify", ["ptc verify exited %d: %s %s"
                                         % (rc, json.dumps(f)[:400] if f else out[:200], err)])
        else:
            print("ok %s: ptc verify: ok, predicts that torch loads it" % name)
        rc, out, err = self.ptc("inspect", "--json", "--hash", path)
        if rc != 0:
            self.fail(name + " inspect", ["ptc inspect exited %d: %s" % (rc, err)])
        else:
            mine, theirs = ic.inspect_rows(json.loads(out)), ic.ptc_tensor_rows(ref)
            if mine != theirs:
                self.fail(name + " inspect", ["ptc %s" % json.dumps(mine),
                                              "torch %s" % json.dumps(theirs)])
            else:
                print("ok %s: ptc inspect --hash: %d tensors equal to torch's" % (name, len(mine)))
        out_path = os.path.join(self.tmp, name + ".out.pth")
        rc, out, err = self.ptc("convert", "--no-progress", path, out_path)
        if rc != 0:
            self.fail(name + " convert", ["ptc convert exited %d: %s" % (rc, err)])
            return ref
        try:
            back = torch.load(out_path, weights_only=True, map_location="cpu")
        except Exception as e:
            self.fail(name + " convert", ["torch refuses ptc's rewrite: %s" % e])
            return ref
        d = ic.full_diff(ref, back)
        if d:
            self.fail(name + " convert", d)
        else:
            print("ok %s: ptc convert: torch reads the rewrite equal to the original" % name)
        return ref

    def locations(self, name, path):
        rc, out, err = self.ptc("inspect", "--json", path)
        return [s["location"] for s in json.loads(out)["storages"]] if rc == 0 else ["?" + err]

    def cuda(self):
        """A file torch.save wrote as on a GPU, and --map-location cpu."""
        torch = self.torch
        name = "cuda"
        path = os.path.join(self.tmp, "cuda.pth")
        sd = collections.OrderedDict(
            [("conv.weight", torch.arange(24, dtype=torch.float32).reshape(2, 3, 2, 2)),
             ("conv.bias", torch.tensor([0.5, -1.5])),
             ("bn.num_batches_tracked", torch.tensor(7))])
        sd["view"] = sd["conv.weight"][1]
        tag = torch.serialization.location_tag
        torch.serialization.location_tag = lambda storage: "cuda:0"
        try:
            torch.save(sd, path)
        finally:
            torch.serialization.location_tag = tag
        with zipfile.ZipFile(path) as z:
            pkl = z.read([n for n in z.namelist() if n.endswith("/data.pkl")][0])
        if b"cuda:0" not in pkl or b"cpu" in pkl:
            self.fail(name, ["the file does not name cuda:0 for every storage"])
            return
        ref = self.check(name, path)
        if ref is None:
            return
        rc, out, err = self.ptc("inspect", path)
        line = [s for s in out.splitlines() if s.startswith("saved on")]
        if rc != 0 or line != ['saved on   cuda:0 (3); read to the CPU, as map_location="cpu" '
                               'would']:
            self.fail(name + " inspect text", ["exit %d, saved-on lines %r" % (rc, line)])
        else:
            print("ok %s: ptc inspect: %s" % (name, line[0]))
        locs = self.locations(name, path)
        kept = self.locations(name, os.path.join(self.tmp, name + ".out.pth"))
        if locs != ["cuda:0"] * 3 or kept != locs:
            self.fail(name + " locations", ["inspect %r, after convert %r" % (locs, kept)])
        else:
            print("ok %s: inspect --json: locations %s, kept by convert" % (name, locs))
        if not torch.cuda.is_available():
            try:
                torch.load(path, weights_only=True)
                self.fail(name + " control", ["torch loaded a cuda:0 file without a GPU or a "
                                              "map_location: the check below proves nothing"])
            except Exception as e:
                print("ok %s: control: torch.load without map_location refuses it here (%s)"
                      % (name, str(e).splitlines()[0][:80]))
        moved = os.path.join(self.tmp, "cuda-on-cpu.pth")
        rc, out, err = self.ptc("convert", "--no-progress", "--map-location", "cpu", path, moved)
        if rc != 0:
            self.fail(name + " --map-location", ["ptc convert exited %d: %s" % (rc, err)])
            return
        try:
            back = torch.load(moved, weights_only=True)
        except Exception as e:
            self.fail(name + " --map-location", ["torch.load without map_location refuses the "
                                                 "result: %s" % e])
            return
        d = ic.full_diff(ref, back)
        devs = sorted({str(v.device) for _, v in ic.walk_tensors(back)})
        if d or devs != ["cpu"] or self.locations(name, moved) != ["cpu"] * 3:
            self.fail(name + " --map-location", d + ["devices %s" % devs])
        else:
            print("ok %s: ptc convert --map-location cpu: torch.load without map_location reads "
                  "it equal, on the CPU" % name)
        rc, out, err = self.ptc("convert", "--no-progress", "--map-location", "gpu", path, moved)
        if rc == 0 or "map_location" not in err:
            self.fail(name + " --map-location gpu", ["exit %d: %s" % (rc, err)])
        else:
            print("ok %s: --map-location gpu is refused: %s" % (name, err.splitlines()[-1]))


def main():
    torch = ic.require_torch()
    if not os.access(PTC, os.X_OK):
        print("ptc is not built: %s" % PTC)
        return 99
    tmp = tempfile.mkdtemp(prefix="ptc-variants-")
    try:
        c = Checker(torch, tmp)
        n = 0
        for name, data in cases(torch):
            path = os.path.join(tmp, name + (".pt" if name.endswith("legacy") else ".pth"))
            with open(path, "wb") as f:
                f.write(data)
            c.check(name, path)
            n += 1
        c.cuda()
        print("variants: %d files, %d failures" % (n + 1, c.failures))
        return 1 if c.failures else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
