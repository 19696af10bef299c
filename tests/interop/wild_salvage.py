"""wild_salvage.py - check_wild.py's salvage checks: real files that torch 2.6 refuses (whole
pickled modules, a Lightning checkpoint with OmegaConf hyperparameters) read with
`ptc inspect --salvage` and `ptc convert --salvage`, against the state dict torch computes when it
is allowed to run the file.

The reference needs the file's classes, which weights_only=True refuses:
- BeatNet's models/model-N.pt are whole `model.BDA` modules, a class the same wheel ships
  (BeatNet/model.py): the wheel is unpacked to a temporary directory, BeatNet/ put on sys.path for
  the one load, and torch.load(f, weights_only=False).state_dict() is the reference.
- pesto's mir-1k_g7.ckpt is a Lightning checkpoint whose hparams are omegaconf objects, and
  omegaconf is not installed: torch.load(f, weights_only=False, pickle_module=INERT) with an
  Unpickler whose find_class answers an inert class for any name outside torch, collections and
  builtins (a class that takes any arguments and keeps its state, and runs nothing) gives
  ckpt["state_dict"]. Its _parent pointers make cycles, which salvage cuts (ptc.h "Cycles").
Both run code from pinned files (check_wild.py checks their sha256 first), as the package's own
users do.
"""
import os
import pickle
import shutil
import sys
import tempfile
import types
import zipfile

# member -> (how the reference is computed, ptc convert's --state-dict PATH or None, what
# `ptc inspect --salvage` answers: None for a state dict (exit 0), else the text of its exit 1).
# A Lightning checkpoint keeps its weights under "state_dict" and holds no module object: the
# default choice's last rule (the first entry of the root dict that is a state dict) takes it, so
# inspect and convert salvage it with no --state-dict.
SALVAGE = {
    "BeatNet/models/model-1.pt": ("module", None, None),
    "BeatNet/models/model-2.pt": ("module", None, None),
    "BeatNet/models/model-3.pt": ("module", None, None),
    "pesto/weights/mir-1k_g7.ckpt": ("inert", None, None),
}


class _Inert:
    """What an unknown class becomes: built with any arguments, holding its state, doing
    nothing else."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        self._args = args

    def __setstate__(self, state):
        self._state = state


class _InertUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module.split(".")[0] in ("torch", "collections", "builtins", "_codecs"):
            return super().find_class(module, name)
        return type(name, (_Inert,), {"__module__": module})


INERT = types.ModuleType("ptc_inert_pickle")
INERT.Unpickler = _InertUnpickler
INERT.load = pickle.load
INERT.__name__ = "ptc_inert_pickle"


def reference(torch, how, wheel, path):
    """The state dict torch computes for the file (an OrderedDict of tensors)."""
    if how == "inert":
        ckpt = torch.load(path, weights_only=False, map_location="cpu", pickle_module=INERT)
        return ckpt["state_dict"]
    src = tempfile.mkdtemp(prefix="ptc-wild-wheel-")
    try:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(src)
        pkg = os.path.join(src, "BeatNet")
        sys.path.insert(0, pkg)
        saved = sys.modules.pop("model", None)
        try:
            return torch.load(path, weights_only=False, map_location="cpu").state_dict()
        finally:
            sys.path.remove(pkg)
            sys.modules.pop("model", None)
            if saved is not None:
                sys.modules["model"] = saved
    finally:
        shutil.rmtree(src, ignore_errors=True)


def compare(torch, got, want):
    """(keys of got that match want's in place, name, dtype, shape and torch.equal; reasons)."""
    why, match = [], 0
    gk, wk = list(got), list(want)
    if gk != wk:
        why.append("keys differ: ptc %s..., state_dict() %s..." % (gk[:4], wk[:4]))
    for k, v in zip(gk, wk):
        a, b = got[k], want[v]
        if k != v:
            continue
        if not isinstance(a, torch.Tensor):
            why.append("%s: ptc wrote a %s, not a tensor" % (k, type(a).__name__))
        elif a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b.detach()):
            why.append("%s: ptc %s %s, state_dict() %s %s%s" % (
                k, a.dtype, tuple(a.shape), b.dtype, tuple(b.shape),
                "" if a.shape != b.shape or a.dtype != b.dtype else ", values differ"))
        else:
            match += 1
    return match, why[:5]


def check(torch, run_ptc, path, member, wheel, tmp):
    """The salvage checks of a file torch refuses (not TorchScript): (ptc's answer, reasons)."""
    why = []
    entry = SALVAGE.get(member)
    rc, out, err = run_ptc("inspect", "--salvage", path)
    no_default = entry[2] if entry else None
    if no_default is None and rc != 0:
        why.append("ptc inspect --salvage exited %d: %s" % (rc, (err or out)[:300]))
    elif no_default is not None and (rc != 1 or no_default not in out + err or
                                     "symbolic globals:" not in out):
        why.append("ptc inspect --salvage exited %d (expected 1, '%s' and the symbolic globals): "
                   "%s" % (rc, no_default, (err or out)[:300]))
    args = ["--state-dict", entry[1]] if entry and entry[1] else []
    out = os.path.join(tmp, "salvaged.pth")
    rc, _, err = run_ptc("convert", "--no-progress", "--salvage", *args, path, out)
    if rc != 0:
        return "salvage refused", why + ["ptc convert --salvage exited %d: %s" % (rc, err[:300])]
    try:
        got = torch.load(out, weights_only=True, map_location="cpu")
    except Exception as e:  # torch's error types vary
        return "salvage unreadable", why + [
            "torch.load(weights_only=True) of ptc convert --salvage's output: %s" %
            str(e).strip().splitlines()[0][:200]]
    finally:
        if os.path.exists(out):
            os.unlink(out)
    if entry is None:
        return "salvage %d keys (no reference)" % len(got), why
    try:
        want = reference(torch, entry[0], wheel, path)
    except Exception as e:  # whatever the file's code raises
        return "salvage %d keys" % len(got), why + [
            "the reference state_dict() failed: %s: %s" % (type(e).__name__, str(e)[:200])]
    match, more = compare(torch, got, want)
    return ("%s: %d keys salvaged, %d match state_dict()" % (
        os.path.basename(member), len(got), match), why + more)
