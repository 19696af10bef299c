#!/usr/bin/env python3
"""Salvage against real torch: weights taken out of pickles that hold whole modules, without
running them, equal module.state_dict().

torch 2.6 writes each file here, with the classes defined in this script (so the pickles name
__main__.* classes that neither ptc's policy nor torch's weights-only allowlist holds):

  resnet18        torch.save of a whole torchvision resnet18
  custom          a module with nested submodules (ModuleList, Sequential, ModuleDict), a
                  non-persistent buffer, weights tied between an Embedding and a Linear, a None
                  bias, a None parameter and a None child
  yolo            a YOLO-style dict {"model": Model (half), "ema": deepcopy(model),
                  "optimizer": optimizer.state_dict(), "epoch": 5, "train_args":
                  argparse.Namespace(...), "date": datetime.now().isoformat()}; also checked
                  with --state-dict ema
  ddp             a DistributedDataParallel-wrapped module saved whole (gloo, world size 1, a
                  FileStore in a temporary folder): keys "module.*"
  numpy           a dict of numpy arrays (a state dict once ptc reads them as tensors)
  payload         {"model": a real model that also holds, as a plain attribute, an object whose
                  __reduce__ returns (os.system, ("echo pwned > FILE",)), "extra": another such
                  object}: ptc gives the model's weights, FILE is never created, and
                  `ptc inspect --salvage --json` names posix.system with the member and offset
                  where the pickle's GLOBAL opcode for it lies (checked against the bytes)
and each again in the legacy format (_use_new_zipfile_serialization=False).

For each file, `ptc convert --salvage IN OUT.pth`, then torch.load(OUT, weights_only=True) must
equal the original object's .state_dict() (its _metadata aside, which a pickle of a module does
not carry): the same keys in the same order, per tensor the same dtype and shape and
torch.equal, plain tensors (no Parameter), and two tensors share a storage in the output exactly
when they share one in state_dict() (tied weights). `ptc convert --salvage IN OUT.safetensors`
must load with safetensors.torch.load_file equal the same way (keys as a set: safetensors sorts
them; no sharing: the format stores every tensor on its own). Every ptc run is also checked not
to have created the payload's FILE.

Prints one line per file: "FILE: K keys salvaged, K match state_dict()" (or FAIL with the
differences, both sides), and the text of `ptc inspect --salvage` for the YOLO-style file.
Exit status: 0 all equal, 1 a difference, 77 skipped (torch, torchvision or safetensors not
importable), 99 cannot run (ptc not built). Environment: top_srcdir and top_builddir (default:
this source tree).
"""

import argparse
import collections
import copy
import datetime
import json
import os
import shutil
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import interop_common as ic  # noqa: E402

torch = ic.require_torch(torchvision=True)
import torch.nn as nn  # noqa: E402
import torchvision  # noqa: E402

try:
    import numpy as np
    import safetensors
    import safetensors.torch
except Exception as e:  # ImportError, or a broken install
    print("SKIP: numpy and safetensors are needed: %s" % e)
    sys.exit(77)

PWNED = None  # the file the payload would create; set in main


# ---- the classes the pickles name (__main__.*) ------------------------------------------------

class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.lin = nn.Linear(width, width, bias=False)  # bias None in _parameters
        self.bn = nn.BatchNorm1d(width)


class Custom(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.blocks = nn.ModuleList([Block(4), Block(4)])
        self.seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 3), "b": nn.Linear(4, 2)})
        self.out = nn.Linear(4, 10, bias=False)
        self.out.weight = self.embed.weight  # tied: one Parameter under two names
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 4))
        self.register_buffer("cache", torch.arange(4.0), persistent=False)
        self.register_parameter("maybe", None)
        self.register_module("absent", None)
        self.register_buffer("nothing", None)


class Model(nn.Module):
    """A small detector-like net, as YOLO's Model is a module tree of convs and batch norms."""

    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.SiLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.SiLU())
        self.detect = nn.Conv2d(16, 6, 1)
        self.stride = torch.tensor([8.0, 16.0, 32.0])  # a plain attribute, not a buffer
        self.names = {0: "cat", 1: "dog"}

    def forward(self, x):
        return self.detect(self.model(x))


class Evil(nn.Module):
    """Unpickling this runs a shell command. ptc must never do so."""

    def __reduce__(self):
        return (os.system, ("echo pwned > %s" % PWNED,))


# ---- checking -------------------------------------------------------------------------------

def storage_groups(sd):
    """Keys grouped by the storage their tensor views (data_ptr of the untyped storage)."""
    by = collections.OrderedDict()
    for k, v in sd.items():
        by.setdefault(v.untyped_storage().data_ptr(), []).append(k)
    return sorted(sorted(g) for g in by.values())


def compare(want, got, ordered, sharing):
    """The differences between state dict want (torch's) and got (ptc's output read back)."""
    msgs = []
    wk, gk = list(want.keys()), list(got.keys())
    if ordered and wk != gk:
        msgs.append("keys differ: state_dict() %r... (%d) vs ptc %r... (%d)"
                    % (wk[:6], len(wk), gk[:6], len(gk)))
    if not ordered and sorted(wk) != sorted(gk):
        msgs.append("key sets differ: only in state_dict() %r, only in ptc %r"
                    % (sorted(set(wk) - set(gk))[:6], sorted(set(gk) - set(wk))[:6]))
    matched = 0
    for k in wk:
        if k not in got:
            continue
        a, b = want[k], got[k]
        if not isinstance(b, torch.Tensor):
            msgs.append("%s: ptc gives %s, not a tensor" % (k, type(b).__name__))
            continue
        if isinstance(b, nn.Parameter):
            msgs.append("%s: ptc gives a Parameter; state_dict() gives a plain tensor" % k)
        if a.dtype != b.dtype or a.shape != b.shape:
            msgs.append("%s: state_dict() %s %s vs ptc %s %s"
                        % (k, a.dtype, tuple(a.shape), b.dtype, tuple(b.shape)))
            continue
        if not torch.equal(a.detach(), b):
            msgs.append("%s: values differ (state_dict() %s vs ptc %s)"
                        % (k, a.flatten()[:4].tolist(), b.flatten()[:4].tolist()))
            continue
        matched += 1
    if sharing and not msgs:
        ws, gs = storage_groups(want), storage_groups(got)
        if ws != gs:
            msgs.append("storage sharing differs: state_dict() %r vs ptc %r"
                        % ([g for g in ws if len(g) > 1], [g for g in gs if len(g) > 1]))
    return matched, msgs


class Checker:
    def __init__(self, ptc, tmp):
        self.ptc = ptc
        self.tmp = tmp
        self.failures = 0

    def run(self, *args):
        p = subprocess.run([self.ptc] + list(args), capture_output=True, text=True)
        if os.path.exists(PWNED):
            self.fail("ptc %s" % " ".join(args), ["the payload ran: %s exists" % PWNED])
            os.unlink(PWNED)
        return p

    def fail(self, name, msgs):
        self.failures += 1
        print("FAIL %s: %s" % (name, "; ".join(msgs[:6])))

    def salvage(self, name, path, want, opts=()):
        """convert --salvage to .pth and .safetensors; both must equal want."""
        label = name + ("" if not opts else " (%s)" % " ".join(opts))
        out = os.path.join(self.tmp, name + ".out.pth")
        p = self.run("convert", "--salvage", *opts, path, out)
        if p.returncode != 0:
            self.fail(label, ["ptc convert --salvage exited %d: %s"
                              % (p.returncode, p.stderr.strip()[-300:])])
            return
        got = torch.load(out, weights_only=True)
        matched, msgs = compare(want, got, ordered=True, sharing=True)
        st = os.path.join(self.tmp, name + ".out.safetensors")
        p = self.run("convert", "--salvage", *opts, path, st)
        if p.returncode != 0:
            msgs.append("ptc convert --salvage to safetensors exited %d: %s"
                        % (p.returncode, p.stderr.strip()[-300:]))
        else:
            m2, msgs2 = compare(want, safetensors.torch.load_file(st), ordered=False,
                                sharing=False)
            msgs += ["safetensors: " + m for m in msgs2]
        if msgs:
            self.fail(label, msgs)
        else:
            print("%s: %d keys salvaged, %d match state_dict()" % (label, len(got), matched))

    def payload_report(self, name, path):
        """inspect --salvage --json names posix.system where its GLOBAL lies in the pickle."""
        p = self.run("inspect", "--salvage", "--json", path)
        if p.returncode != 0:
            self.fail(name + " report", ["ptc inspect --salvage --json exited %d: %s"
                                         % (p.returncode, p.stderr.strip()[-300:])])
            return
        doc = json.loads(p.stdout)
        hits = [c for c in doc.get("code", []) if c.get("global") == "posix.system"]
        if not hits:
            self.fail(name + " report", ["posix.system not among the code the file would run: %r"
                                         % [c.get("global") for c in doc.get("code", [])]])
            return
        syms = [s["global"] for s in doc.get("symbols", [])]
        msgs = []
        if "posix.system" not in syms:
            msgs.append("posix.system not among the symbols %r" % syms)
        # One wording for the place: the symbol list names the member ptc verify names (a legacy
        # file's "legacy object", not "the file").
        for sym in doc.get("symbols", []):
            if sym["global"] == "posix.system" and sym["member"] != hits[0]["member"]:
                msgs.append("the symbol list places posix.system in %r, the code list in %r"
                            % (sym["member"], hits[0]["member"]))
        if not doc.get("salvaged"):
            msgs.append("nothing salvaged: %r" % doc.get("error"))
        for h in hits:
            member, off = h["member"], h["offset"]
            if off is None:
                msgs.append("posix.system has no offset")
                continue
            if zipfile.is_zipfile(path):
                with zipfile.ZipFile(path) as z:
                    names = [n for n in z.namelist()
                             if member in (n, n.split("/", 1)[-1])]
                    data = z.read(names[0]) if names else b""
            else:  # legacy: ptc verify gives offsets in the file ("legacy object" + offset)
                with open(path, "rb") as f:
                    data = f.read()
            at = data[off:off + len(b"cposix\nsystem\n")]
            if at != b"cposix\nsystem\n":
                msgs.append("at %s offset %d the bytes are %r, not the GLOBAL posix.system"
                            % (member or "(file)", off, at))
        if msgs:
            self.fail(name + " report", msgs)
        else:
            print("%s: ptc inspect --salvage names posix.system at %s offset %s (%s), "
                  "called %d time(s); %s keys salvaged"
                  % (name, hits[0]["member"] or "(file)", hits[0]["offset"], hits[0]["opcode"],
                     hits[0]["calls"], doc["salvaged"]["keys"]))


# ---- the files ------------------------------------------------------------------------------

def make_custom():
    torch.manual_seed(1)
    m = Custom()
    with torch.no_grad():
        for b in m.blocks:
            b.bn.running_mean.uniform_(-1, 1)
            b.bn.num_batches_tracked += 3
    return m


def make_yolo():
    """A model after one SGD step (so the optimizer holds momentum buffers) and its optimizer."""
    torch.manual_seed(2)
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model(torch.randn(2, 3, 16, 16)).sum().backward()
    opt.step()
    return model, opt


def main():
    global PWNED
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    ptc = os.path.join(ic.BUILDDIR, "tools", "ptc")
    if not os.path.exists(ptc):
        print("ERROR: %s is not built" % ptc)
        return 99
    print("torch %s, torchvision %s, numpy %s, safetensors %s"
          % (torch.__version__, torchvision.__version__, np.__version__, safetensors.__version__))
    tmp = ic.mktemp("salvage")
    PWNED = os.path.join(tmp, "PWNED")
    chk = Checker(ptc, tmp)
    try:
        files = []  # (name, object to save, [(opts, state dict wanted)])

        torch.manual_seed(0)
        r18 = torchvision.models.resnet18()
        files.append(("resnet18", r18, [((), r18.state_dict())]))

        custom = make_custom()
        files.append(("custom", custom, [((), custom.state_dict())]))

        model, opt = make_yolo()
        half = copy.deepcopy(model).half()
        ema = copy.deepcopy(model)
        yolo = {"model": half, "ema": ema, "optimizer": opt.state_dict(), "epoch": 5,
                "train_args": argparse.Namespace(epochs=100, imgsz=640, batch=16, data="coco.yaml"),
                "date": datetime.datetime.now().isoformat()}
        files.append(("yolo", yolo, [((), half.state_dict()),
                                     (("--state-dict", "ema"), ema.state_dict())]))

        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "store"),
                                rank=0, world_size=1)
        try:
            torch.manual_seed(3)
            ddp = DDP(nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.Linear(6, 2)))
            ddp_want = ddp.state_dict()
            for legacy in (False, True):
                path = os.path.join(tmp, "ddp%s.pth" % ("_legacy" if legacy else ""))
                torch.save(ddp, path, _use_new_zipfile_serialization=not legacy)
            files.append(("ddp", None, [((), ddp_want), (("--state-dict", "module"),
                                                         ddp.module.state_dict())]))
        finally:
            dist.destroy_process_group()

        # 2,000 buffers, 1,500 of them non-persistent: the set is looked up hashed (a linear scan
        # per buffer, 3 million compares, once ran past the work budget).
        many = nn.Module()
        for i in range(2000):
            many.register_buffer("b%d" % i, torch.full((1,), float(i)), persistent=(i % 4 == 0))
        files.append(("nonpersistent", many, [((), many.state_dict())]))

        arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3),
                  "b": np.array([1, -2, 3], dtype=np.int64),
                  "c": np.linspace(0, 1, 5, dtype=np.float64)}
        files.append(("numpy", arrays,
                      [((), collections.OrderedDict((k, torch.from_numpy(v))
                                                    for k, v in arrays.items()))]))

        torch.manual_seed(4)
        victim = Model()
        object.__setattr__(victim, "hook", Evil())  # a plain attribute: not a submodule
        files.append(("payload", {"model": victim, "extra": Evil()},
                      [((), victim.state_dict())]))

        for name, obj, checks in files:
            for legacy in (False, True):
                fname = name + ("_legacy" if legacy else "")
                path = os.path.join(tmp, fname + ".pth")
                if obj is not None:
                    torch.save(obj, path, _use_new_zipfile_serialization=not legacy)
                for opts, want in checks:
                    chk.salvage(fname, path, want, opts)
                if name == "payload":
                    chk.payload_report(fname, path)
                if os.path.exists(PWNED):
                    chk.fail(fname, ["the payload ran"])

        print("\n$ ptc inspect --salvage yolo.pth")
        p = chk.run("inspect", "--salvage", os.path.join(tmp, "yolo.pth"))
        sys.stdout.write(p.stdout.replace(tmp + "/", ""))
        if p.returncode != 0:
            chk.fail("yolo report", ["ptc inspect --salvage exited %d: %s"
                                     % (p.returncode, p.stderr.strip()[-300:])])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%s" % ("all equal" if chk.failures == 0 else "%d failures" % chk.failures))
    return 1 if chk.failures else 0


if __name__ == "__main__":
    sys.exit(main())
