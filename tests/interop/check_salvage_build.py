#!/usr/bin/env python3
"""Salvage against real torch where the pickle is not the plain one: a tensor subclass, and an
object built twice.

  subclass   torch 2.6 saves {'a': torch.arange(6).reshape(2, 3).as_subclass(Sub), 'p': an
             nn.Parameter, 'b': torch.zeros(2)} (Sub a torch.Tensor subclass defined here,
             __main__.Sub, with a Python attribute set on 'a'), zip and legacy format. torch
             writes 'a' as torch._tensor._rebuild_from_type_v2(_rebuild_tensor_v2, Sub, args,
             state): the strict reader refuses the file (a global outside the policy), `ptc
             convert --salvage` gives {'a', 'p', 'b'} with the values torch.load(weights_only=
             False) gives, 'a' a plain tensor, 'p' a Parameter as torch gives it, and `ptc
             inspect --salvage` lists __main__.Sub as a symbolic global.
  build2     a pickle assembled here (torch.save does not write it; torch._C.PyTorchFileWriter
             writes the zip as torch.save does): an nn.Module object with two BUILD opcodes,
             the second replacing _parameters and adding a buffer. torch.load(weights_only=False)
             applies both (Module.__setstate__ is __dict__.update); `ptc convert --salvage` must
             give the same state_dict().

Prints one line per file with the keys salvaged against torch's; on a difference both sides.
Exit status: 0 all equal, 1 a difference, 77 skipped (no torch), 99 cannot run (ptc not built).
Environment: top_srcdir and top_builddir (default: this source tree).
"""

import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import interop_common as ic  # noqa: E402

torch = ic.require_torch()


class Sub(torch.Tensor):
    pass


failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what)


def ptc_run(ptc, *args):
    r = subprocess.run([ptc] + list(args), capture_output=True, text=True, errors="replace")
    return r.returncode, r.stdout, r.stderr


def same(name, want, got):
    """want, got: dicts of tensors; the same keys in order, dtype, shape and values."""
    check(list(want) == list(got), "%s: keys %s, torch %s" % (name, list(got), list(want)))
    for k in want:
        if k not in got:
            continue
        w, g = want[k], got[k]
        # A subclass comes back a plain tensor; a Parameter stays one, as torch gives it.
        kind = torch.nn.Parameter if isinstance(w, torch.nn.Parameter) else torch.Tensor
        check(type(g) is kind, "%s[%s]: %s, not %s" % (name, k, type(g), kind))
        check(w.dtype == g.dtype and w.shape == g.shape and torch.equal(w.as_subclass(torch.Tensor), g),
              "%s[%s]: ptc %s %s %s, torch %s %s %s" % (name, k, g.dtype, tuple(g.shape), g.tolist(),
                                                        w.dtype, tuple(w.shape), w.tolist()))


# ---- a protocol-2 pickle assembler (the build2 file) -------------------------------------------
def G(mod, name):
    return b"c" + mod.encode() + b"\n" + name.encode() + b"\n"


def S(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def I(n):
    return b"J" + struct.pack("<i", n)


def T(*xs):
    return b"(" + b"".join(xs) + b"t"


def D(*kv):
    return b"}" + (b"(" + b"".join(kv) + b"u" if kv else b"")


def odict(*kv):
    return G("collections", "OrderedDict") + b")R" + (b"(" + b"".join(kv) + b"u" if kv else b"")


def tensor(key, n, param):
    sto = T(S("storage"), G("torch", "FloatStorage"), S(key), S("cpu"), I(n)) + b"Q"
    t = G("torch._utils", "_rebuild_tensor_v2") + T(sto, I(0), T(I(n)), T(I(1)), b"\x89", odict()) + b"R"
    return G("torch._utils", "_rebuild_parameter") + T(t, b"\x88", odict()) + b"R" if param else t


def build2(path):
    """Module() with BUILD {training, _parameters {w}, _buffers {}, ...}, then BUILD
    {_parameters {v}, _buffers {r}}."""
    st = D(S("training"), b"\x88", S("_parameters"), odict(S("w"), tensor("0", 4, True)),
           S("_buffers"), odict(), S("_non_persistent_buffers_set"),
           G("builtins", "set") + T(b"]") + b"R", S("_modules"), odict(),
           S("_forward_hooks"), odict(), S("_forward_pre_hooks"), odict(),
           S("_backward_hooks"), odict(), S("_state_dict_hooks"), odict(),
           S("_load_state_dict_pre_hooks"), odict())
    body = G("torch.nn.modules.module", "Module") + b")\x81" + st + b"b"
    body += D(S("_parameters"), odict(S("v"), tensor("1", 4, True)),
              S("_buffers"), odict(S("r"), tensor("2", 2, False))) + b"b"
    data = b"\x80\x02" + body + b"."
    w = torch._C.PyTorchFileWriter(path)
    w.write_record("data.pkl", data, len(data))
    w.write_record("byteorder", b"little", 6)
    for key, vals in (("0", (1, 2, 3, 4)), ("1", (5, 6, 7, 8)), ("2", (9, 10))):
        raw = struct.pack("<%df" % len(vals), *vals)
        w.write_record("data/" + key, raw, len(raw))
    w.write_end_of_file()


def main():
    ptc = os.path.join(ic.BUILDDIR, "tools", "ptc")
    if not os.path.exists(ptc):
        print("ERROR: %s is not built" % ptc)
        return 99
    print("torch %s" % torch.__version__)
    tmp = ic.mktemp("salvage-build")
    try:
        a = torch.arange(6, dtype=torch.float32).reshape(2, 3).as_subclass(Sub)
        a.note = "a Python attribute of the subclass"
        obj = {"a": a, "p": torch.nn.Parameter(torch.ones(3)),
               "b": torch.zeros(2, dtype=torch.float64)}
        for legacy in (False, True):
            name = "subclass" + ("_legacy" if legacy else "")
            src = os.path.join(tmp, name + ".pth")
            out = os.path.join(tmp, name + ".out.pth")
            torch.save(obj, src, _use_new_zipfile_serialization=not legacy)
            want = torch.load(src, weights_only=False)
            check(type(want["a"]) is Sub, "%s: torch did not rebuild Sub" % name)
            rc, o, e = ptc_run(ptc, "inspect", src)
            check(rc != 0 and "__main__.Sub" in (o + e),
                  "%s: strict inspect rc %d, %s" % (name, rc, (o + e).strip()[:300]))
            rc, o, e = ptc_run(ptc, "inspect", "--salvage", src)
            check(rc == 0 and "__main__.Sub" in o,
                  "%s: inspect --salvage rc %d, %s" % (name, rc, (o + e).strip()[:300]))
            rc, o, e = ptc_run(ptc, "convert", "--salvage", src, out)
            check(rc == 0, "%s: convert --salvage rc %d: %s" % (name, rc, e.strip()[:300]))
            if rc == 0:
                got = torch.load(out, weights_only=True)
                same(name, want, got)
                print("%s: %d keys salvaged (%s), torch: %d keys" % (name, len(got), ", ".join(got),
                                                                    len(want)))

        src = os.path.join(tmp, "build2.pth")
        out = os.path.join(tmp, "build2.out.pth")
        build2(src)
        want = torch.load(src, weights_only=False).state_dict()
        rc, o, e = ptc_run(ptc, "convert", "--salvage", src, out)
        check(rc == 0, "build2: convert --salvage rc %d: %s" % (rc, e.strip()[:300]))
        if rc == 0:
            got = torch.load(out, weights_only=True)
            same("build2", want, got)
            print("build2: %d keys salvaged %s, torch state_dict() %s" % (
                len(got), {k: v.tolist() for k, v in got.items()},
                {k: v.tolist() for k, v in want.items()}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d failures" % len(failures))
        return 1
    print("all equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
