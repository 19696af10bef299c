"""roundtrip.py - files ptc writes load in PyTorch as if PyTorch had written them.

Every fixture of testdata/torch/v2.6/, testdata/torch/v1.13/ and testdata/vectors/ is written again
by ptc (`save_tool copy IN OUT`: open, then ptc_save of the root unchanged; and `ptc convert IN
OUT.pth` when the command exists) under its own file name in a temporary folder. The output must
load with torch.load(weights_only=True), and with mmap=True as well, into an object equal to what
torch.load returns for the original: the same types (dict vs OrderedDict, list vs tuple, Parameter
vs Tensor), keys in the same order, attributes (_metadata), tensors with the same dtype, shape,
stride, storage offset, conj/neg bits and requires_grad over a storage with the same bytes (NaN
and -0.0 compared as bits), the same storage sharing and object identity, and equal non-tensor
values. Python's zipfile must also find every CRC right and every record 64-byte aligned.

Two documents built from scratch with the ptc_doc_* builder (`save_tool build-mixed`,
`save_tool build-state-dict`) are loaded and compared with the same objects built in Python.

torch 2.6 loads every fixture with weights_only=True; if one ever does not, its original is loaded
with weights_only=False and the line says so (the ptc output must still load with
weights_only=True).

Exit status: 0 all equal, 1 a difference or a failure, 77 torch missing.
"""

import collections
import glob
import math
import os
import shutil
import sys
import warnings
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402

torch = ic.require_torch()
warnings.filterwarnings("ignore")


def fixtures():
    out = []
    for sub in ("torch/v2.6", "torch/v1.13", "vectors"):
        # The torch folders as make check lays them out, with the packed files unpacked
        # (testdata/torch/unpack.sh).
        d = os.path.join(ic.BUILDDIR if sub.startswith("torch/") else ic.SRCDIR, "testdata", sub)
        for p in sorted(glob.glob(os.path.join(d, "*"))):
            if p.endswith((".pt", ".pth")):
                out.append((sub.replace("torch/", "") + "/" + os.path.basename(p), p))
    return out


def load_original(path):
    try:
        return torch.load(path, weights_only=True), "weights_only=True"
    except Exception as e:  # noqa: BLE001
        return torch.load(path, weights_only=False), "weights_only=False (%s)" % str(e).splitlines()[0][:80]


def check_zip(path):
    """zipfile's CRC check and torch's 64-byte alignment of every record."""
    problems = []
    with zipfile.ZipFile(path) as z:
        bad = z.testzip()
        if bad is not None:
            problems.append("zipfile: bad CRC in %s" % bad)
    for r in ic.zip_records(path):
        if r.data_offset % 64:
            problems.append("record %s: data at offset %d, not 64-byte aligned" % (r.name, r.data_offset))
    return problems


def check_output(orig, out_path):
    problems = check_zip(out_path)
    for mmap in (False, True):
        tag = "mmap=True: " if mmap else ""
        try:
            new = torch.load(out_path, weights_only=True, mmap=mmap)
        except Exception as e:  # noqa: BLE001
            problems.append("%storch.load(weights_only=True) failed: %s" % (tag, str(e).strip()[:400]))
            continue
        problems += [tag + d for d in ic.full_diff(orig, new)]
    return problems


# ---- the builder's documents, as Python objects ---------------------------------------------------

def mixed_expected():
    base = torch.arange(12, dtype=torch.float32).view(3, 4)
    bf_bits = torch.tensor([0x3F80, 0xC000, 0x7FC0, 0x0001], dtype=torch.int32)  # 1, -2, NaN, tiny
    bf = bf_bits.to(torch.uint16).view(torch.bfloat16)
    tensors = {
        "base": base,
        "t": base.t(),
        "slice": base[1:, ::2],
        "u16": torch.tensor([[0, 1, 255], [256, 65534, 65535]], dtype=torch.int32).to(torch.uint16),
        "bf16": bf.clone(),
        "scalar": torch.tensor(42, dtype=torch.int64),
        "empty": torch.zeros(0, 4),
        "flag": torch.tensor([True, False, True]),
        "grad": torch.tensor([0.5, -1.25, 3.0], dtype=torch.float64, requires_grad=True),
    }
    root = {
        "ints": [0, 1, -1, 255, 256, 65535, 65536, 2**31 - 1, -2**31, 2**31, 2**63 - 1, -2**63,
                 2**100, -2**70 - 3],
        "floats": (1.5, -0.0, math.nan, math.inf, -math.inf, 5e-324),
        "str": "h\u00e9llo \u2713 \x00 end",
        "bytes": b"\x00\x01\xffabc",
        "none": None,
        "true": True,
        "false": False,
        "complex": complex(1.5, -2.0),
        "dtype": torch.bfloat16,
        "device": torch.device("cuda", 1),
        "device_cpu": torch.device("cpu"),
        "size": torch.Size([2, 3]),
        "set": {1, 2, 3},
        7: "int key",
        None: "none key",
        -3: "neg key",
        "tensors": tensors,
        "od": collections.OrderedDict([("b", 1), ("a", 2)]),
    }
    return root


def main():
    ic.standin_banner()
    w = ic.Writer()
    print("writer: " + w.describe())
    try:
        w.require()
    except ic.WriterError as e:
        print("FAIL: %s" % e)
        return 1
    tools = []
    if w.has_save_tool():
        tools.append("save_tool")
    if w.has_convert():
        tools.append("convert")
    tmp = ic.mktemp("roundtrip")
    nfail = nok = 0
    try:
        for label, path in fixtures():
            orig, how = load_original(path)
            ntensors, nstorages = ic.count_storages(orig)
            problems = []
            for tool in tools:
                sub = os.path.join(tmp, tool)
                os.makedirs(sub, exist_ok=True)
                out = os.path.join(sub, os.path.basename(path))
                try:
                    if tool == "save_tool":
                        w.copy(path, out)
                    else:
                        w.convert(path, out)
                except ic.WriterError as e:
                    problems.append("%s: %s" % (tool, e))
                    continue
                problems += ["%s: %s" % (tool, p) for p in check_output(orig, out)]
                os.unlink(out)
            if problems:
                nfail += 1
                print("FAIL %-32s (original loaded with %s)" % (label, how))
                for p in problems:
                    print("       " + p)
            else:
                nok += 1
                print("ok   %-32s %s; %d tensors, %d storages; loaded with weights_only=True and "
                      "mmap=True%s" % (
                    label, "+".join(tools), ntensors, nstorages,
                    "" if how == "weights_only=True" else "; original loaded with " + how))
        print("%d fixtures round-tripped, %d failed" % (nok, nfail))

        # The builder (ptc_doc_*), compared with the same objects built in Python.
        nbuilt = 0
        if w.has_save_tool():
            for mode, expected in (("mixed", mixed_expected()), ("state-dict", ic.state_dict_expected())):
                out = os.path.join(tmp, "built_%s.pth" % mode.replace("-", "_"))
                label = "save_tool build-%s" % mode
                try:
                    w.build(mode, out, standin_obj=expected)
                    problems = check_output(expected, out)
                except ic.WriterError as e:
                    problems = [str(e)]
                if problems:
                    nfail += 1
                    print("FAIL %s" % label)
                    for p in problems:
                        print("       " + p)
                else:
                    nbuilt += 1
                    print("ok   %-32s loads equal to the same object built in Python (also with "
                          "mmap=True)" % label)
            print("%d builder documents loaded as expected" % nbuilt)
        else:
            nfail += 1
            print("FAIL builder documents not checked: %s is not built" % w.save_tool)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if nfail else 0


if __name__ == "__main__":
    sys.exit(main())
