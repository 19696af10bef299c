#!/usr/bin/env python3
"""make_seeds.py - regenerate the fuzz seed corpus in tests/fuzz/corpus/{archive,pickle,load}/.

The corpus is committed; run this only to refresh or extend it:

    python3 tests/fuzz/make_seeds.py --vectors /path/to/reference/vectors [--out tests/fuzz/corpus]

Seeds are small on purpose (a few KiB each): libFuzzer mutates small inputs faster, and every seed
runs in make check. What each directory gets:
  archive/  torch-written checkpoints (the reference vectors and a few more written here) and
            zip-level variants of one of them: deflated members, Python-written headers without
            torch's 64-byte alignment, an empty archive;
  load/     the same checkpoints, plus the legacy format and variants a loader must cope with
            (a cuda location, deflated storages);
  pickle/   the data.pkl of every zip seed, whole legacy files (several pickles back to back), and
            hand-made pickles of every protocol that reach opcodes torch never writes.
Torch-written seeds need torch (any 2.x); without it only the copies and hand-made pickles are made.
Nothing here is executed by the fuzz targets: the pickles that name os.system are inert bytes.
"""
import argparse
import collections
import io
import os
import pickle
import shutil
import sys
import zipfile


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def data_pkl(blob):
    """The data.pkl member of a zip checkpoint, or None when blob is not a zip."""
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as z:
            for name in z.namelist():
                if name.endswith("/data.pkl"):
                    return z.read(name)
    except zipfile.BadZipFile:
        return None
    return None


def rezip(blob, compression, edit=None):
    """Rewrites a zip checkpoint with Python's zipfile: plain local headers with sizes, no data
    descriptors, no 64-byte alignment; edit(name, bytes) may change a member."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(blob)) as src, zipfile.ZipFile(out, "w", compression) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if edit:
                data = edit(info.filename, data)
            dst.writestr(info.filename, data)
    return out.getvalue()


def torch_seeds():
    """Small checkpoints written by torch.save: name -> bytes."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    seeds = {}

    def save(name, obj, **kw):
        buf = io.BytesIO()
        torch.save(obj, buf, **kw)
        seeds[name] = buf.getvalue()

    save("sd_linear.pt", nn.Linear(3, 2).state_dict())
    save("sd_batchnorm.pt", nn.BatchNorm1d(2).state_dict())
    save("empty_dict.pt", {})
    save("scalar.pt", torch.tensor(3.5))
    save("empty_tensor.pt", torch.empty(0, 3))
    save("parameter.pt", nn.Parameter(torch.ones(2)))
    base = torch.arange(6.0)
    save("shared_views.pt", [base, base[1:4], base.view(2, 3).t(), base[:1].expand(4)])
    save("dtypes_small.pt", {
        "bf16": torch.ones(2, dtype=torch.bfloat16),
        "f16": torch.ones(2, dtype=torch.float16),
        "f64": torch.ones(1, dtype=torch.float64),
        "bool": torch.tensor([True, False]),
        "i8": torch.tensor([-1, 2], dtype=torch.int8),
        "u8": torch.tensor([255], dtype=torch.uint8),
        "c64": torch.tensor([1 + 2j], dtype=torch.complex64),
    })
    save("plain_values.pt", {
        "none": None, "true": True, "int": 7, "neg": -5, "big": 2**70, "float": 1.5,
        "str": "h\u00e9llo", "bytes": b"\x00\x01", "tuple": (1, (2, 3)), "list": [1, [2]],
        "dtype": torch.float16, "device": torch.device("cpu"), "size": torch.Size([2, 3]),
    })
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(3, 2)).sum().backward()
    opt.step()
    save("train_state.pt", {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 1})
    save("legacy_linear.pt", nn.Linear(2, 1).state_dict(), _use_new_zipfile_serialization=False)
    return seeds


def handmade_pickles():
    """Pickles written without torch: every protocol, and opcodes torch never emits."""
    plain = {"i": 1, "neg": -300, "big": 2**80, "f": 0.25, "s": "x\u00e9", "l": [1, 2, [3]],
             "t": (None, True, False), "b": b"\x00\xff"}
    shared = [1, 2]
    memo = [shared, shared, shared]

    class Evil:  # pickled as GLOBAL posix.system + REDUCE; never unpickled here
        def __reduce__(self):
            return (os.system, ("true",))

    seeds = {}
    for proto in range(0, 6):
        seeds["plain_p%d.pkl" % proto] = pickle.dumps(plain, protocol=proto)
    seeds["ordered_dict_p2.pkl"] = pickle.dumps(collections.OrderedDict(a=1, b=[2]), protocol=2)
    seeds["memo_shared_p2.pkl"] = pickle.dumps(memo, protocol=2)
    seeds["set_p4.pkl"] = pickle.dumps({1, 2, frozenset([3])}, protocol=4)
    seeds["bytearray_p5.pkl"] = pickle.dumps(bytearray(b"ab"), protocol=5)
    seeds["reduce_system_p2.pkl"] = pickle.dumps(Evil(), protocol=2)
    seeds["reduce_system_p4.pkl"] = pickle.dumps(Evil(), protocol=4)
    # INST with its arguments after a MARK (protocol 0 only).
    seeds["inst_p0.pkl"] = b"(S'true'\nios\nsystem\n."
    # STACK_GLOBAL whose module comes from the memo: a global a scanner cannot name statically.
    seeds["stack_global_memo.pkl"] = (b"\x80\x04\x8c\x02os\x940\x8c\x06system\x940h\x00h\x01"
                                      b"\x93\x8c\x04true\x85R.")
    # Extension registry codes.
    seeds["ext1.pkl"] = b"\x80\x02\x82\x01)R."
    seeds["ext4.pkl"] = b"\x80\x02\x84\x01\x00\x00\x00)R."
    # Two pickles back to back, as in a legacy file.
    seeds["two_pickles.pkl"] = b"\x80\x02K\x01.\x80\x02K\x02."
    # Bytes after STOP.
    seeds["trailing_bytes.pkl"] = b"\x80\x02N.garbage"
    # Nesting just above the default depth limit (1000), built from EMPTY_LIST and APPEND.
    seeds["deep_lists.pkl"] = b"\x80\x02" + b"]" * 1002 + b"a" * 1001 + b"."
    # Marks nested past the limit.
    seeds["deep_marks.pkl"] = b"\x80\x02" + b"(" * 1002 + b"t" * 1002 + b"."
    # Memo index far beyond anything stored.
    seeds["long_binget_huge.pkl"] = b"\x80\x02j\xff\xff\xff\xff."
    # A BINUNICODE whose length runs past the end.
    seeds["binunicode_overrun.pkl"] = b"\x80\x02X\xff\xff\xff\x7fabc."
    # BINPERSID of a torch-like storage tuple with a huge element count.
    seeds["persid_huge.pkl"] = (b"\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
                                b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpu\x8a\x08\xff\xff\xff\xff"
                                b"\xff\xff\xff\x7ftQ.")
    return seeds


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vectors", help="directory of reference .pt vectors to copy")
    ap.add_argument("--out", default=os.path.join(here, "corpus"))
    args = ap.parse_args()

    checkpoints = {}
    if args.vectors:
        for name in sorted(os.listdir(args.vectors)):
            if name.endswith(".pt"):
                with open(os.path.join(args.vectors, name), "rb") as f:
                    checkpoints["vec_" + name] = f.read()
    try:
        checkpoints.update(torch_seeds())
    except ImportError:
        print("torch not importable: skipping torch-written seeds", file=sys.stderr)

    for name in ("archive", "pickle", "load"):
        shutil.rmtree(os.path.join(args.out, name), ignore_errors=True)

    for name, blob in checkpoints.items():
        write(os.path.join(args.out, "archive", name), blob)
        write(os.path.join(args.out, "load", name), blob)
        pkl = data_pkl(blob)
        if pkl is not None:
            write(os.path.join(args.out, "pickle", name[:-3] + "_data.pkl"), pkl)
        else:
            # A legacy file is a run of pickles followed by raw storage bytes.
            write(os.path.join(args.out, "pickle", name[:-3] + "_legacy_stream.pkl"), blob)

    # Zip-level variants of one small torch checkpoint.
    base = checkpoints.get("sd_linear.pt") or checkpoints.get("vec_tensor_bytesio.pt")
    if base:
        deflated = rezip(base, zipfile.ZIP_DEFLATED)
        stored = rezip(base, zipfile.ZIP_STORED)
        for d in ("archive", "load"):
            write(os.path.join(args.out, d, "variant_deflated.pt"), deflated)
            write(os.path.join(args.out, d, "variant_pyzip_unaligned.pt"), stored)

        def to_cuda(name, data):
            if name.endswith("/data.pkl"):
                return data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            return data

        write(os.path.join(args.out, "load", "variant_cuda_location.pt"),
              rezip(base, zipfile.ZIP_STORED, to_cuda))
    empty = io.BytesIO()
    zipfile.ZipFile(empty, "w").close()
    write(os.path.join(args.out, "archive", "empty.zip"), empty.getvalue())

    for name, blob in handmade_pickles().items():
        write(os.path.join(args.out, "pickle", name), blob)

    for d in ("archive", "pickle", "load"):
        files = os.listdir(os.path.join(args.out, d))
        total = sum(os.path.getsize(os.path.join(args.out, d, f)) for f in files)
        print("%s: %d seeds, %d bytes" % (d, len(files), total))


if __name__ == "__main__":
    main()
