#!/usr/bin/env python3
"""check_model.py - the public model API (ptc_model_*) and `ptc load` against torch 2.6.

torch makes the state dicts here, at test time: torchvision's resnet18() (1000 classes),
resnet18(num_classes=7), and the CIFAR variant (resnet18(num_classes=10) with conv1 a 3x3 stride-1
convolution and maxpool an Identity, as ptc's "resnet18-cifar"), each randomly initialised by torch
and then given non-trivial BatchNorm statistics: random affine weights, and running statistics
from three training-mode forwards on random batches.

1. Logits. tests/interop/model_tool (public API only) loads each file strictly and runs
   ptc_model_forward on random normal inputs of several sizes: resnet18 at 32x32, 64x48 and
   224x224 (final maps 1x1, 2x2 and 7x7 before the average pool), resnet18-cifar at 32x32 and
   40x40 (final maps 4x4 and 5x5), on the ref backend and, when its module loads, dnnl. The
   oracle is torch's forward in float64 (the same weights, model.double()); the bound is the
   house rule for golden numerics: ptc's largest absolute error against the oracle may be at most
   twice torch float32's own (a floor of 1e-6 of the logits' largest magnitude keeps a lucky,
   nearly exact torch from making the bound meaningless). Both distances are printed.
2. `ptc load` prints what torch prints, byte for byte (str(e) of the RuntimeError, or repr of the
   result): a matching file; a 1000-class file into 10 classes (size mismatches, strict or not);
   a DDP file (keys prefixed "module.", _metadata renamed as DDP's state_dict does) with and
   without --strip-prefix; a file with an extra and a missing key, strict and --no-strict; a plain
   dict without _metadata lacking a num_batches_tracked (torch then keeps the module's own and
   reports nothing); keys at every level of the module tree that torch reports or ignores
   ("fc", "fc.weight.x", "layer1.0.relu.x", "_extra_state"). `ptc load --json` lists the same
   missing and unexpected keys as torch's result.
3. ptc_model_state_dict saved by ptc_save (model_tool save) loads strictly into
   resnet18(num_classes=N) (and the CIFAR variant) with every tensor equal to the file it was
   loaded from, keys and order as torch's state_dict().

Exit status: 0 all passed, 1 a failure, 77 torch or torchvision missing.
"""

import json
import os
import shutil
import subprocess
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402

torch = ic.require_torch(torchvision=True)
import torch.nn as nn  # noqa: E402
import torchvision  # noqa: E402

warnings.filterwarnings("ignore")

PTC = os.path.join(ic.BUILDDIR, "tools", "ptc")
TOOL = os.path.join(ic.BUILDDIR, "tests", "interop", "model_tool")

# (arch, num_classes, [(n, h, w), ...])
CASES = [
    ("resnet18", 1000, [(2, 32, 32), (2, 64, 48), (1, 224, 224)]),
    ("resnet18", 7, [(3, 32, 32), (2, 64, 48)]),
    ("resnet18-cifar", 10, [(2, 32, 32), (2, 40, 40)]),
]

failures = []


def result(name, problems, detail=""):
    if problems:
        failures.append(name)
        print("FAIL %s" % name)
        for p in problems[:20]:
            print("       " + p)
    else:
        print("ok   %s%s" % (name, ("  (" + detail + ")") if detail else ""))


def make_model(arch, classes):
    m = torchvision.models.resnet18(num_classes=classes)
    if arch == "resnet18-cifar":
        m.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        m.maxpool = nn.Identity()
    return m


def trained_bn(arch, classes, seed):
    """A model with torch's random init, random BN affine parameters and running statistics
    from three training-mode forwards."""
    torch.manual_seed(seed)
    m = make_model(arch, classes)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
        m.train()
        for _ in range(3):
            m(torch.randn(4, 3, 32, 32) * 1.5 + 0.3)
    m.eval()
    return m


def run(argv):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=900)


def backends():
    """ref always; dnnl when its module loads here (ptc --version says so)."""
    out = ["ref"]
    lines = run([PTC, "--version"]).stdout.decode(errors="replace").splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.split()[:2] == ["dnnl", "backend"] and lines[i + 1].strip() == "can run here":
            out.append("dnnl")
    return out


def check_logits(tmp, bes):
    for ci, (arch, classes, sizes) in enumerate(CASES):
        m = trained_bn(arch, classes, 100 + ci)
        path = os.path.join(tmp, "%s-%d.pth" % (arch, classes))
        torch.save(m.state_dict(), path)
        m64 = make_model(arch, classes).double().eval()
        m64.load_state_dict(m.state_dict())
        for (n, h, w) in sizes:
            g = torch.Generator().manual_seed(1000 * h + w)
            x = torch.randn(n, 3, h, w, generator=g)
            xin = os.path.join(tmp, "x.f32")
            x.numpy().tofile(xin)
            with torch.no_grad():
                oracle = m64(x.double())
                t32 = m(x).double()
            scale = float(oracle.abs().max())
            e_torch = float((t32 - oracle).abs().max())
            bound = max(2 * e_torch, 1e-6 * scale)
            for be in bes:
                name = "logits %s(num_classes=%d) %dx3x%dx%d on %s" % (arch, classes, n, h, w, be)
                out = os.path.join(tmp, "logits.f32")
                r = run([TOOL, "forward", path, arch, be, str(n), str(h), str(w), xin, out])
                if r.returncode != 0:
                    result(name, ["model_tool exit %d: %s" % (r.returncode,
                                                               r.stderr.decode(errors="replace"))])
                    continue
                import numpy as np
                got = torch.from_numpy(np.fromfile(out, dtype=np.float32)).double()
                if got.numel() != n * classes:
                    result(name, ["%d logits, want %d" % (got.numel(), n * classes)])
                    continue
                got = got.reshape(n, classes)
                e_ptc = float((got - oracle).abs().max())
                same_top = bool((got.argmax(1) == oracle.argmax(1)).all())
                problems = []
                if not e_ptc <= bound:
                    problems.append("max |ptc - f64 oracle| %.3g > bound %.3g (2 x torch f32's "
                                    "%.3g; logits up to %.3g)" % (e_ptc, bound, e_torch, scale))
                if not same_top:
                    problems.append("top-1 differs from the oracle's: %s vs %s" %
                                    (got.argmax(1).tolist(), oracle.argmax(1).tolist()))
                result(name, problems, "max |logit| %.3g; error vs float64: torch f32 %.3g, "
                       "ptc %.3g (%.2fx)" % (scale, e_torch, e_ptc,
                                             e_ptc / e_torch if e_torch else float("nan")))


def torch_load_text(path, classes, strict, arch="resnet18"):
    m = make_model(arch, classes)
    try:
        return repr(m.load_state_dict(torch.load(path, weights_only=True), strict=strict)), 0, m
    except RuntimeError as e:
        return str(e), 1, None


def check_load_text(tmp):
    torch.manual_seed(7)
    m10 = torchvision.models.resnet18(num_classes=10)
    sd10 = m10.state_dict()
    files = {}

    def save(name, obj):
        p = os.path.join(tmp, name)
        torch.save(obj, p)
        files[name] = p
        return p

    save("match.pth", sd10)
    torch.manual_seed(8)
    save("r1000.pth", torchvision.models.resnet18().state_dict())
    # DDP needs a process group; its state_dict is what a wrapper holding the model under the
    # attribute "module" returns: keys and _metadata under "module."
    wrapped = nn.Module()
    wrapped.module = m10
    save("ddp.pth", wrapped.state_dict())
    odd = m10.state_dict()
    odd["extra.weight"] = torch.zeros(3)
    del odd["layer2.0.bn1.running_var"]
    save("extra_missing.pth", odd)
    plain = {k: v for k, v in sd10.items() if k != "layer1.1.bn2.num_batches_tracked"}
    save("plain_no_nbt.pth", plain)
    tree = m10.state_dict()
    for k in ["fc", "fc.weight.x", "layer1.0.relu.x", "_extra_state", "fc._extra_state",
              "layer4.1.downsample.0.weight", "avgpool.y", "maxpool.z", "layer3.0.downsample.x",
              "module.conv1.weight"]:
        tree[k] = torch.zeros(1)
    del tree["bn1.num_batches_tracked"]
    save("tree.pth", tree)
    notensor = m10.state_dict()
    notensor["fc.bias"] = 3
    save("not_tensor.pth", notensor)
    nbt1d = m10.state_dict()
    nbt1d["bn1.num_batches_tracked"] = torch.tensor([5])
    save("nbt_1d.pth", nbt1d)

    cases = [
        ("match.pth", [], True, files["match.pth"]),
        ("match.pth", ["--no-strict"], False, files["match.pth"]),
        ("r1000.pth", ["--num-classes", "10"], True, files["r1000.pth"]),
        ("r1000.pth", ["--num-classes", "10", "--no-strict"], False, files["r1000.pth"]),
        ("r1000.pth", [], True, files["r1000.pth"]),  # 1000 classes from the file
        ("ddp.pth", [], True, files["ddp.pth"]),
        ("ddp.pth", ["--no-strict"], False, files["ddp.pth"]),
        ("ddp.pth", ["--strip-prefix"], True, None),
        ("extra_missing.pth", ["--no-strict"], False, files["extra_missing.pth"]),
        ("extra_missing.pth", [], True, files["extra_missing.pth"]),
        ("plain_no_nbt.pth", [], True, files["plain_no_nbt.pth"]),
        ("tree.pth", [], True, files["tree.pth"]),
        ("tree.pth", ["--no-strict"], False, files["tree.pth"]),
        ("not_tensor.pth", ["--no-strict"], False, files["not_tensor.pth"]),
        ("nbt_1d.pth", [], True, files["nbt_1d.pth"]),
    ]
    for fname, opts, strict, torch_path in cases:
        name = "ptc load %s %s" % (" ".join(opts), fname)
        if torch_path is None:  # what torch does after consume_prefix_in_state_dict_if_present
            sd = torch.load(files[fname], weights_only=True)
            nn.modules.utils.consume_prefix_in_state_dict_if_present(sd, "module.")
            torch_path = save("stripped-" + fname, sd)
        classes = 1000 if fname == "r1000.pth" and "--num-classes" not in opts else 10
        want, want_rc, model = torch_load_text(torch_path, classes, strict)
        r = run([PTC, "load", files[fname]] + opts)
        got = r.stdout.decode("utf-8", errors="replace")
        problems = []
        if got != want + "\n":
            problems.append("torch: %r" % want[:1500])
            problems.append("ptc:   %r" % got[:1500])
            if r.stderr:
                problems.append("stderr: %r" % r.stderr.decode(errors="replace")[:300])
        if r.returncode != want_rc:
            problems.append("exit %d, want %d" % (r.returncode, want_rc))
        # --json: the same lists as torch's result
        rj = run([PTC, "load", "--json", files[fname]] + opts)
        try:
            j = json.loads(rj.stdout.decode())
            if j["ok"] != (want_rc == 0) or j["message"] != want:
                problems.append("--json: ok %r / message differs" % j["ok"])
            if want_rc == 0:
                res = make_model("resnet18", classes).load_state_dict(
                    torch.load(torch_path, weights_only=True), strict=False)
                if j["missing"] != list(res.missing_keys) or \
                        j["unexpected"] != list(res.unexpected_keys):
                    problems.append("--json lists %r %r, torch %r %r" % (
                        j["missing"], j["unexpected"], res.missing_keys, res.unexpected_keys))
        except (ValueError, KeyError) as e:
            problems.append("--json: %s: %r" % (e, rj.stdout[:300]))
        result(name, problems, "exit %d, %d bytes equal" % (r.returncode, len(got)))


def check_state_dict(tmp):
    for ci, (arch, classes, _) in enumerate(CASES):
        m = trained_bn(arch, classes, 200 + ci)
        src = os.path.join(tmp, "sd-src.pth")
        sd = m.state_dict()
        sd["bn1.num_batches_tracked"] = torch.tensor(12345)
        torch.save(sd, src)
        out = os.path.join(tmp, "sd-ptc.pth")
        name = "ptc_model_state_dict of %s(num_classes=%d) -> load_state_dict(strict=True)" % (
            arch, classes)
        r = run([TOOL, "save", src, arch, out])
        if r.returncode != 0:
            result(name, ["model_tool save exit %d: %s" % (r.returncode,
                                                            r.stderr.decode(errors="replace"))])
            continue
        problems = []
        got = torch.load(out, weights_only=True)
        fresh = make_model(arch, classes)
        try:
            fresh.load_state_dict(got, strict=True)
        except RuntimeError as e:
            problems.append(str(e)[:500])
        if list(got.keys()) != list(sd.keys()):
            problems.append("keys or order differ from torch's state_dict()")
        for k, v in sd.items():
            if k not in got:
                continue
            g = got[k]
            if g.dtype != v.dtype or g.shape != v.shape or not torch.equal(g, v):
                problems.append("%s: %s %s differs from %s %s" % (k, g.dtype, tuple(g.shape),
                                                                 v.dtype, tuple(v.shape)))
        if getattr(got, "_metadata", None) != getattr(sd, "_metadata", None):
            problems.append("_metadata differs from torch's")
        result(name, problems, "%d tensors equal" % len(sd))


def main():
    for exe in (PTC, TOOL):
        if not os.access(exe, os.X_OK):
            print("FAIL: %s is not built" % exe)
            return 1
    tmp = ic.mktemp("model")
    try:
        bes = backends()
        print("backends: %s" % ", ".join(bes))
        check_logits(tmp, bes)
        check_load_text(tmp)
        check_state_dict(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("check_model: %d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
