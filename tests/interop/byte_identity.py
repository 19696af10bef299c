"""byte_identity.py - ptc writes the bytes torch 2.6 writes.

Each case is an object saved by torch.save here, to <tmp>/torch/NAME.pth. ptc loads that file and
saves the tree it got, unchanged, to <tmp>/ptc/NAME.pth (`save_tool copy`, and `ptc convert` when
it exists): same file name, so the same archive prefix. The two files must then be the same bytes:
every record with the same name, in the same order, at the same offset, with the same local header
(flags, FB padding), data, CRC and data descriptor, and the same central directory and end records
- except the 40 digits of .data/serialization_id (a hash torch computes in its own way) and the
CRC-32 of that record, whose offset must still match. data.pkl is thus byte-identical to torch's:
the same opcodes, memo numbering, storage keys and record order.

On a difference the first differing byte is printed with the zip structure it falls in, and for
data.pkl the disassembly (pickletools) of both pickles around it.

The builder case compares `save_tool build-state-dict` (a state dict made with ptc_doc_*, one
shared 'version' str in _metadata) with torch.save of the same nn.Sequential state dict.

Exit status: 0 identical, 1 a difference or a failure, 77 torch or torchvision missing.
"""

import collections
import math
import os
import pickletools
import shutil
import struct
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402

torch = ic.require_torch(torchvision=True)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torchvision  # noqa: E402

warnings.filterwarnings("ignore")
SID = ".data/serialization_id"


# ---- the cases ------------------------------------------------------------------------------------

def c_linear():
    torch.manual_seed(0)
    return nn.Linear(3, 2).state_dict()


def c_batchnorm():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                      nn.Linear(4 * 4 * 4, 5))
    m.train()
    m(torch.randn(2, 3, 6, 6))  # running stats move, num_batches_tracked becomes 1
    return m.state_dict()


def c_resnet18():
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10).state_dict()


def c_dict2500():
    # 2500 pairs: SETITEMS batches of 1000, 1000 and 500; every fifth value a tensor, so that
    # 500 storages get keys 0..499 and are written in sorted() order (data/0, data/1, data/10...).
    g = torch.Generator().manual_seed(1)
    d = {}
    for i in range(2500):
        k = "k%04d" % i
        r = i % 5
        if r == 0:
            d[k] = torch.randn(1 + i % 7, generator=g)
        elif r == 1:
            d[k] = i * 1000003
        elif r == 2:
            d[k] = i / 7.0
        elif r == 3:
            d[k] = "v%d" % i
        else:
            d[k] = [i, None, True]
    return d


def c_half_bf16_scalar():
    g = torch.Generator().manual_seed(2)
    return collections.OrderedDict([
        ("half", torch.randn(3, 4, generator=g).half()),
        ("bf16", torch.randn(5, generator=g).bfloat16()),
        ("step", torch.tensor(12345, dtype=torch.int64)),
    ])


def c_uint16_v3():
    return {
        "u16": torch.arange(6, dtype=torch.int32).to(torch.uint16).view(2, 3),
        "f32": torch.linspace(0, 1, 5),
        "u32": torch.tensor([0, 1, 2**32 - 1], dtype=torch.int64).to(torch.uint32),
        "u64": torch.tensor([0, 1, 2**62], dtype=torch.int64).to(torch.uint64),
        "f8": torch.tensor([0.5, -2.0, 448.0]).to(torch.float8_e4m3fn),
        "u16_view": torch.arange(8, dtype=torch.int32).to(torch.uint16)[1::3],
    }


def c_views_shared():
    base = torch.arange(20.0).view(4, 5)
    other = torch.arange(10, dtype=torch.float64)
    return {
        "base": base,
        "t": base.t(),
        "slice": base[1:, ::2],
        "row": base[2],
        "elem": base[3, 4],
        "again": base,  # the same tensor object twice
        "partial": other[2:8:2],  # a view whose base is not saved: the whole storage is
        "expand": torch.tensor([1.5]).expand(3, 2),
        "channels_last": torch.arange(24.0).view(1, 2, 3, 4).contiguous(memory_format=torch.channels_last),
    }


# Beyond the list of the issue: other objects torch.save users write.

def c_train_ckpt():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x, y = torch.randn(4, 3, 8, 8), torch.tensor([1, 2, 3, 4])
    for _ in range(2):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return {"epoch": 2, "model_state_dict": model.state_dict(),
            "optimizer_state_dict": opt.state_dict(), "loss": 0.5, "note": "r\u00e9sum\u00e9 \u2713"}


def c_parameters():
    torch.manual_seed(3)
    m = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    frozen = nn.Parameter(torch.arange(4.0), requires_grad=False)
    return {"params": list(m.parameters()), "frozen": frozen,
            "leaf": torch.ones(2, requires_grad=True)}


def c_nested_values():
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    return {
        "ints": [0, 255, 256, 65535, 65536, -1, 2**31 - 1, -2**31, 2**31, 2**63, -2**70 - 3, 2**100],
        "floats": (math.nan, math.inf, -math.inf, -0.0, 5e-324, 1.5),
        "strs": ["", "\u00e9\u2713\U0001F600", "a\x00b"],
        "bytes": b"\x00\xff data",
        "set": {3, 1, 2},
        "complex": complex(1.0, -2.5),
        "size": torch.Size([2, 3]),
        "devices": [torch.device("cpu"), torch.device("cuda", 1)],
        "dtypes": (torch.float16, torch.uint16),
        7: None, -3: True, None: False,
        "empty": ({}, [], (), collections.OrderedDict()),
        "conj": z.conj(),
        "neg": torch.tensor([1.0, -2.0])._neg_view(),
    }


CASES = [
    ("linear", "nn.Linear(3, 2).state_dict()", c_linear),
    ("batchnorm", "Conv2d+BatchNorm2d+Linear state dict with _metadata (versions 1 and 2)", c_batchnorm),
    ("resnet18", "torchvision resnet18(num_classes=10), random init: 122 tensors", c_resnet18),
    ("dict2500", "dict of 2500 entries (3 SETITEMS batches), 500 tensors", c_dict2500),
    ("half_bf16_scalar", "float16, bfloat16 and 0-d int64 tensors", c_half_bf16_scalar),
    ("uint16_v3", "uint16/uint32/uint64/float8 (UntypedStorage, _rebuild_tensor_v3)", c_uint16_v3),
    ("views_shared", "non-contiguous views, shared storage, one tensor twice, stride 0", c_views_shared),
    ("train_ckpt", "(extra) training checkpoint: SGD state, param_groups, floats, str", c_train_ckpt),
    ("parameters", "(extra) nn.Parameter list, requires_grad", c_parameters),
    ("nested_values", "(extra) ints to 2**100, NaN, bytes, set, complex, Size, device, dtype, conj/neg",
     c_nested_values),
]


# ---- comparing two files --------------------------------------------------------------------------

def zip_layout(buf):
    """Regions of a zip file: (start, end, description), in file order, plus the offsets to mask
    (serialization id data and its two CRC fields) as (start, end) pairs."""
    regions, mask = [], []
    # end records
    eocd = buf.rfind(b"PK\x05\x06")
    if eocd < 0:
        raise ValueError("no end of central directory record")
    regions.append((eocd, eocd + 22, "end of central directory record"))
    cd_size, cd_off = struct.unpack("<II", buf[eocd + 12:eocd + 20])
    loc = eocd - 20
    if loc >= 0 and buf[loc:loc + 4] == b"PK\x06\x07":
        regions.append((loc, loc + 20, "zip64 end of central directory locator"))
        z64 = struct.unpack("<Q", buf[loc + 8:loc + 16])[0]
        regions.append((z64, z64 + 56, "zip64 end of central directory record"))
        cd_size, cd_off = struct.unpack("<QQ", buf[z64 + 40:z64 + 56])
    # central directory
    p = cd_off
    centrals = []
    while p < cd_off + cd_size and buf[p:p + 4] == b"PK\x01\x02":
        n, m, k = struct.unpack("<HHH", buf[p + 28:p + 34])
        name = buf[p + 46:p + 46 + n].decode("utf-8", "replace")
        lho = struct.unpack("<I", buf[p + 42:p + 46])[0]
        csize = struct.unpack("<I", buf[p + 20:p + 24])[0]
        ext = buf[p + 46 + n:p + 46 + n + m]
        if lho == 0xFFFFFFFF or csize == 0xFFFFFFFF:  # zip64 extra: sizes first, then offset
            vals = list(struct.unpack("<%dQ" % ((len(ext) - 4) // 8), ext[4:4 + ((len(ext) - 4) // 8) * 8]))
            if csize == 0xFFFFFFFF:
                vals = vals[2:]
            if lho == 0xFFFFFFFF:
                lho = vals[0]
        regions.append((p, p + 46 + n + m + k, "central directory header of %s" % name))
        centrals.append((name, p, lho))
        if name.endswith("/" + SID):
            mask.append((p + 16, p + 20))
        p += 46 + n + m + k
    # local records
    for name, cen, lho in centrals:
        n, m = struct.unpack("<HH", buf[lho + 26:lho + 30])
        csize = struct.unpack("<I", buf[cen + 20:cen + 24])[0]
        if csize == 0xFFFFFFFF:
            ext = buf[cen + 46 + len(name.encode()):]
            csize = struct.unpack("<Q", ext[12:20])[0]
        data = lho + 30 + n + m
        regions.append((lho, data, "local header of %s" % name))
        regions.append((data, data + csize, "data of %s" % name))
        flags = struct.unpack("<H", buf[lho + 6:lho + 8])[0]
        dlen = 0
        if flags & 8 and csize:
            dlen = 24 if buf[lho + 30 + n:lho + 32 + n] == b"\x01\x00" else 16
            regions.append((data + csize, data + csize + dlen, "data descriptor of %s" % name))
        if name.endswith("/" + SID):
            mask.append((data, data + csize))
            if dlen:
                mask.append((data + csize + 4, data + csize + 8))
    regions.sort()
    return regions, mask


def where(regions, off):
    for s, e, what in regions:
        if s <= off < e:
            return "%s, byte %d of it (it spans %d..%d)" % (what, off - s, s, e)
    return "outside every known zip structure"


def dis_around(pkl, off, before=10, after=4):
    """pickletools lines of the opcodes around byte offset off of a pickle."""
    ops = []
    try:
        for op, arg, pos in pickletools.genops(pkl):
            ops.append((pos, op.name, arg))
    except Exception as e:  # noqa: BLE001 - show what could be decoded
        ops.append((-1, "<error: %s>" % e, None))
    idx = 0
    for i, (pos, _, _) in enumerate(ops):
        if 0 <= pos <= off:
            idx = i
    lines = []
    for pos, name, arg in ops[max(0, idx - before):idx + after + 1]:
        a = "" if arg is None else " " + ic._short(arg, 70)
        mark = ">>" if pos == ops[idx][0] else "  "
        lines.append("%s %6d: %s%s" % (mark, pos, name, a))
    return lines


def record_data(buf, regions, name):
    for s, e, what in regions:
        if what == "data of " + name:
            return buf[s:e]
    return None


def compare_files(ref_path, new_path):
    """Problems (a list of lines, empty when the files match) and a short summary."""
    ref, new = open(ref_path, "rb").read(), open(new_path, "rb").read()
    try:
        rreg, rmask = zip_layout(ref)
        nreg, nmask = zip_layout(new)
    except Exception as e:  # noqa: BLE001
        return ["cannot parse the zip structure: %s" % e], ""
    problems = []
    rrec, nrec = ic.zip_records(ref_path), ic.zip_records(new_path)
    rnames, nnames = [r.name for r in rrec], [r.name for r in nrec]
    if rnames != nnames:
        i = ic._first_diff(rnames, nnames)
        problems.append("records differ from position %d: torch %s ... vs ptc %s ... (%d vs %d records)" % (
            i, rnames[i:i + 4], nnames[i:i + 4], len(rnames), len(nnames)))
    for a, b in zip(rrec, nrec):
        if a.name != b.name:
            break
        if a.header_offset != b.header_offset or a.data_offset != b.data_offset:
            problems.append("record %s: local header at %d, data at %d in torch's file; %d, %d in ptc's" % (
                a.name, a.header_offset, a.data_offset, b.header_offset, b.data_offset))
            break
    if rmask != nmask:
        problems.append("the serialization id is not at the same place: %s vs %s" % (rmask, nmask))
    sid = [r for r in nrec if r.name.endswith("/" + SID)]
    if sid and (sid[0].size != 40 or not read_record_bytes(new, nreg, sid[0].name).isdigit()):
        problems.append("ptc's %s is not 40 ASCII digits: %r" % (
            sid[0].name, read_record_bytes(new, nreg, sid[0].name)))
    # byte for byte, with the serialization id masked
    r2, n2 = bytearray(ref), bytearray(new)
    for s, e in rmask:
        r2[s:e] = b"\0" * (e - s)
    for s, e in (nmask if rmask == nmask else []):
        n2[s:e] = b"\0" * (e - s)
    if r2 != n2:
        off = ic._first_diff(r2, n2)
        problems.append("first differing byte at file offset %d (0x%x): %s" % (off, off, where(rreg, off)))
        problems.append("  torch: %s" % ref[max(0, off - 16):off + 16].hex(" "))
        problems.append("  ptc:   %s" % new[max(0, off - 16):off + 16].hex(" "))
        if len(ref) != len(new):
            problems.append("  file sizes: torch %d, ptc %d" % (len(ref), len(new)))
        # data.pkl: say where the pickles part, with both disassemblies
        pname = [r.name for r in rrec if r.name.endswith("/data.pkl")]
        if pname:
            rp, np_ = record_data(ref, rreg, pname[0]), record_data(new, nreg, pname[0])
            if np_ is not None and rp != np_:
                k = ic._first_diff(rp, np_)
                problems.append("data.pkl differs first at pickle offset %d (torch %d bytes, ptc %d "
                                "bytes):" % (k, len(rp), len(np_)))
                problems.append("  torch's pickle around it:")
                problems += ["    " + x for x in dis_around(rp, k)]
                problems.append("  ptc's pickle around it:")
                problems += ["    " + x for x in dis_around(np_, k)]
    summary = "%d bytes, %d records, data.pkl %d bytes" % (
        len(new), len(nrec), next((r.size for r in nrec if r.name.endswith("/data.pkl")), -1))
    return problems, summary


def read_record_bytes(buf, regions, name):
    d = record_data(buf, regions, name)
    return d if d is not None else b""


def main():
    ic.standin_banner()
    w = ic.Writer()
    print("writer: " + w.describe())
    try:
        w.require()
    except ic.WriterError as e:
        print("FAIL: %s" % e)
        return 1
    tools = (["save_tool"] if w.has_save_tool() else []) + (["convert"] if w.has_convert() else [])
    tmp = ic.mktemp("bytes")
    for sub in ["torch"] + tools:
        os.makedirs(os.path.join(tmp, sub))
    nok = nfail = 0
    try:
        cases = [(n, d, f) for n, d, f in CASES]
        cases.append(("built_state_dict", "builder: save_tool build-state-dict (ptc_doc_*) vs torch.save "
                      "of the same nn.Sequential state dict", ic.state_dict_expected))
        for name, desc, make in cases:
            ref = os.path.join(tmp, "torch", name + ".pth")
            torch.save(make(), ref)
            problems, summary = [], ""
            for tool in tools:
                out = os.path.join(tmp, tool, name + ".pth")
                try:
                    if name == "built_state_dict":
                        if tool != "save_tool":
                            continue
                        w.build("state-dict", out, standin_obj=ic.state_dict_expected())
                    elif tool == "save_tool":
                        w.copy(ref, out)
                    else:
                        w.convert(ref, out)
                except ic.WriterError as e:
                    problems.append("%s: %s" % (tool, e))
                    continue
                p, summary = compare_files(ref, out)
                problems += ["%s: %s" % (tool, x) for x in p]
                os.unlink(out)
            os.unlink(ref)
            if problems:
                nfail += 1
                print("FAIL %-18s %s" % (name, desc))
                for p in problems:
                    print("       " + p)
            else:
                nok += 1
                used = [t for t in tools if name != "built_state_dict" or t == "save_tool"]
                print("ok   %-18s %s: identical except the serialization id (%s; %s)" % (
                    name, desc, summary, "+".join(used)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d of %d cases byte-identical to torch.save" % (nok, nok + nfail))
    return 1 if nfail else 0


if __name__ == "__main__":
    sys.exit(main())
