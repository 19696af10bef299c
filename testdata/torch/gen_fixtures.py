#!/usr/bin/env python3
"""Write checkpoint fixtures with real PyTorch, and their manifest.

Runs under any installed torch (tested with 2.6.0 and Debian's 1.13.1, which reports 1.13.0a0) and
writes into testdata/torch/v<major>.<minor>/ beside this script:

  * checkpoint files made by torch.save (zip and legacy formats) plus three files derived from a
    torch.save output: a big-endian copy (2.x only), a deflate-compressed re-zip and a file written
    through io.BytesIO;
  * manifest.json, computed by loading every written file back with torch.load (weights_only=True
    where the running torch can, see "loaded_with") and listing its tensors;
  * last, the big files of PACKED replaced by NAME.gz, their SHA-256 recorded in
    testdata/torch/packed.sha256 (make check unpacks and checks them: see unpack.sh).

What ptc must reproduce from the manifest (tests/fixtures/check_manifests.py compares them):

  tensors   depth-first in container order: dict items in insertion order, list and tuple items by
            index; a tensor reached twice is listed twice; sets and every other object are not
            descended into (an OrderedDict's _metadata attribute is not an item).
  path      the keys and indices from the root joined by '.': str keys as written, int keys in
            decimal, bool and None keys as str() writes them; a tensor at the root has path "".
  dtype     str(dtype) without "torch."; shape and stride are lists of ints, storage_offset is in
            elements; nbytes = numel * element_size.
  sha256    of the elements in row-major order as little-endian bytes (bool: one byte, 0 or 1), with
            the conj and neg bits resolved.
  storage_group  the index (in listing order) of the first tensor on the same storage (same data
            pointer after torch.load). torch.load never shares a storage of zero bytes, so such a
            tensor gets its own group; the fixtures never let two tensors share an empty storage.
  requires_grad, parameter (isinstance nn.Parameter) are listed too.

Everything is deterministic (fixed seeds, one thread, fixed zip timestamps) except what torch itself
makes non-deterministic: the legacy format names storages by their memory address.

Usage: python3 testdata/torch/gen_fixtures.py [--out DIR]
"""

import argparse
import array
import collections
import ctypes
import gzip
import hashlib
import io
import json
import os
import pickle
import platform
import struct
import sys
import tempfile
import warnings
import zipfile
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.simplefilter("ignore")  # TypedStorage deprecation, ComplexHalf experimental, ...

TORCH_MM = ".".join(torch.__version__.split("+")[0].split(".")[:2])
IS_2X = int(TORCH_MM.split(".")[0]) >= 2
NAN = float("nan")
INF = float("inf")

# ---------------------------------------------------------------------------------------------
# Small helpers


def dtype_or_none(name):
    dt = getattr(torch, name, None)
    return dt if isinstance(dt, torch.dtype) else None


def dtype_name(dt):
    return str(dt).replace("torch.", "")


class Run:
    """State of one generator run: where files go, what was skipped, what each file covers."""

    def __init__(self, out):
        self.out = out
        self.skipped = []  # [{"what", "reason"}]
        self.files = collections.OrderedDict()  # name -> {"covers": str, "notes": [..]}

    def skip(self, what, reason):
        print("  skipped: %s (%s)" % (what, reason))
        self.skipped.append({"what": what, "reason": reason})

    def path(self, name):
        return os.path.join(self.out, name)

    def add(self, name, covers, notes=None):
        self.files[name] = {"covers": covers, "notes": list(notes or [])}

    def save(self, name, obj, covers, notes=None, **kw):
        torch.save(obj, self.path(name), **kw)
        self.add(name, covers, notes)


def try_save_probe(obj, **kw):
    """Save obj to memory and return None, or the error text if torch refuses."""
    try:
        torch.save(obj, io.BytesIO(), **kw)
        return None
    except Exception as e:  # noqa: BLE001 - any refusal is recorded, not fatal
        return "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")


def try_load_probe(obj):
    """Save obj to memory and load it with weights_only=True; None, or the error text."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    try:
        torch.load(buf, weights_only=True)
        return None
    except Exception as e:  # noqa: BLE001
        msg = str(e).split("WeightsUnpickler error: ", 1)[-1].strip().splitlines()[0]
        return "%s: %s" % (type(e).__name__, msg)


# ---------------------------------------------------------------------------------------------
# Values. Floats include NaN, +-inf, -0.0, subnormals and the largest finite values of the type.

F64_VALUES = [0.0, -0.0, 1.0, -1.5, 1.0 / 3.0, NAN, INF, -INF, 1.7976931348623157e308, 5e-324,
              -2.5e-5, 123456.789]
F32_VALUES = [0.0, -0.0, 1.0, -1.5, 1.0 / 3.0, NAN, INF, -INF, 3.4028234663852886e38, 1.401298464324817e-45,
              -2.5e-5, 123456.789]
F16_VALUES = [0.0, -0.0, 1.0, -1.5, 1.0 / 3.0, NAN, INF, -INF, 65504.0, 5.960464477539063e-08, -2.5e-5, 1234.5]
BF16_VALUES = [0.0, -0.0, 1.0, -1.5, 1.0 / 3.0, NAN, INF, -INF, 3.3895313892515355e38, 9.183549615799121e-41,
               -2.5e-5, 123456.789]
F8_VALUES = [0.0, -0.0, 1.0, -1.5, 0.3, NAN, INF, -INF, 448.0, 0.001953125, -0.0625, 57344.0]


def int_values(bits, signed):
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    vals = [0, 1, lo, hi, 42, hi - 7, lo + 3 if signed else 200 % (hi + 1), 7, 100, hi // 3, 3, 9]
    return [max(lo, min(hi, v)) for v in vals]


def complex_values():
    re = [0.0, -0.0, 1.0, -1.5, NAN, INF, 0.25, -INF, 3.0, 1e-3, -7.0, 2.0]
    im = [0.0, 1.0, -0.0, 2.5, 1.0, -2.0, NAN, INF, -0.5, 1e3, -INF, -0.0]
    return re, im


def make_tensor(name):
    """A (3, 4) tensor of dtype `name` with non-trivial values, or None if torch lacks the dtype."""
    dt = dtype_or_none(name)
    if dt is None:
        return None
    if name == "float64":
        return torch.tensor(F64_VALUES, dtype=torch.float64).reshape(3, 4)
    if name == "float32":
        return torch.tensor(F32_VALUES, dtype=torch.float32).reshape(3, 4)
    if name == "float16":
        return torch.tensor(F16_VALUES, dtype=torch.float32).to(torch.float16).reshape(3, 4)
    if name == "bfloat16":
        return torch.tensor(BF16_VALUES, dtype=torch.float32).to(torch.bfloat16).reshape(3, 4)
    if name.startswith("float8"):
        return torch.tensor(F8_VALUES, dtype=torch.float32).to(dt).reshape(3, 4)
    if name in ("int64", "int32", "int16", "int8", "uint8"):
        bits = int(name.lstrip("uint"))
        return torch.tensor(int_values(bits, not name.startswith("u")), dtype=dt).reshape(3, 4)
    if name in ("uint16", "uint32", "uint64"):
        # Build through the signed type of the same width and reinterpret the bits: the unsigned
        # types have few operators, but view() works everywhere.
        bits = int(name[4:])
        signed = getattr(torch, "int%d" % bits)
        vals = [v - (1 << bits) if v >= (1 << (bits - 1)) else v for v in int_values(bits, False)]
        return torch.tensor(vals, dtype=signed).view(dt).reshape(3, 4)
    if name == "bool":
        return torch.tensor([True, False, True, True, False, False, True, False, False, True, True, True]).reshape(3, 4)
    if name in ("complex128", "complex64"):
        re, im = complex_values()
        real = torch.float64 if name == "complex128" else torch.float32
        return torch.complex(torch.tensor(re, dtype=real), torch.tensor(im, dtype=real)).reshape(3, 4)
    if name == "complex32":
        re, im = complex_values()
        pairs = torch.tensor([[r, i] for r, i in zip(re, im)], dtype=torch.float32).to(torch.float16)
        return pairs.view(torch.complex32).reshape(3, 4)
    raise ValueError(name)


ALL_DTYPES = ["float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
              "complex128", "complex64", "complex32", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
              "float8_e5m2fnuz", "uint16", "uint32", "uint64"]
# Dtypes with a legacy typed storage class (torch.FloatStorage, ...): the legacy format and the
# big-endian byte swap of torch.load handle only these (see pth-format.md 4.6 and 2.5).
LEGACY_DTYPES = ALL_DTYPES[:12]


def savable_dtypes(run, names, **kw):
    """{name: tensor} for every dtype in names that this torch has and can save with kw."""
    out = collections.OrderedDict()
    for name in names:
        t = make_tensor(name)
        if t is None:
            run.skip("dtype %s" % name, "torch %s has no torch.%s" % (torch.__version__, name))
            continue
        err = try_save_probe(t, **kw)
        if err:
            fmt = "legacy format" if kw.get("_use_new_zipfile_serialization") is False else "zip format"
            run.skip("dtype %s (%s)" % (name, fmt), "torch.save refused: " + err)
            continue
        out[name] = t
    return out


# ---------------------------------------------------------------------------------------------
# Fixtures. Each function writes one or more files and registers what they cover.


def fx_dtypes(run):
    ts = savable_dtypes(run, ALL_DTYPES)
    obj = collections.OrderedDict()
    for name, t in ts.items():
        obj[name] = t
    # A strided view with an offset of each storage above: offsets count elements of the dtype
    # even where the storage is pickled as an UntypedStorage counted in bytes (float8, uint16, ...).
    obj["views"] = collections.OrderedDict((name, t[1:, ::2]) for name, t in ts.items())
    run.save("dtypes.pt", obj,
             "every dtype this torch can save as a (3, 4) tensor with NaN/inf/-0.0/subnormal/extreme values, "
             "plus a strided view with offset of each (views.<dtype>, same storage)")


def fx_views(run):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6) * 0.5 - 3.0
    src = torch.tensor([1.0, -2.0, 3.5], dtype=torch.float64)
    hidden = torch.arange(10, dtype=torch.int32) * 3 - 11  # only slices of it are saved
    obj = collections.OrderedDict([
        ("base", base),
        ("slice_offset", base[1:3, 2:5]),
        ("strided", base[:, ::2]),
        ("transposed", base.t()),
        ("row", base[2]),
        ("elem_0d", base[3, 5]),
        ("view_of_view", base.t()[1:5:2, 1:]),
        ("flat_tail", base.view(-1)[20:]),
        ("empty_view", base[2, 3:3]),
        ("overlapping", base.view(-1).unfold(0, 4, 2)),
        ("base_again", base),
        ("expanded", src.expand(4, 3)),
        ("expanded_0d_to_2d", src[1].expand(2, 2)),
        ("hidden_base_slice", hidden[3:7]),
        ("hidden_base_strided", hidden[1::4]),
        ("channels_last", (torch.arange(120, dtype=torch.float32) - 60.0).reshape(2, 3, 4, 5)
         .contiguous(memory_format=torch.channels_last)),
        ("permuted", torch.arange(24, dtype=torch.int16).reshape(2, 3, 4).permute(2, 0, 1)),
    ])
    run.save("views.pt", obj,
             "views sharing one storage: slice with offset, strided, transposed, row, 0-d element view, view of a "
             "view, empty view with offset, overlapping unfold windows, the same tensor twice; stride-0 expand "
             "(incl. of a 0-d element); slices of a storage whose base is not saved; channels_last; permuted 3-d")
    # Two views of one storage with different dtypes cannot be saved together: recorded, not fatal.
    x = torch.arange(4, dtype=torch.float32)
    err = try_save_probe({"f": x, "i": x.view(torch.int32)})
    if err:
        run.skip("two views of one storage with different dtypes", "torch.save refused: " + err)


def fx_scalars_empty(run):
    obj = collections.OrderedDict([
        ("f32", torch.tensor(3.5)),
        ("f64_nan", torch.tensor(NAN, dtype=torch.float64)),
        ("f16_negzero", torch.tensor(-0.0, dtype=torch.float16)),
        ("i64", torch.tensor(-7)),
        ("bool", torch.tensor(True)),
        ("c64", torch.tensor(1.5 - 2j, dtype=torch.complex64)),
        ("empty_1d", torch.empty(0)),
        ("empty_0x4", torch.zeros(0, 4, dtype=torch.int64)),
        ("empty_3x0x2", torch.ones(3, 0, 2, dtype=torch.float16)),
        ("empty_bool", torch.zeros(0, dtype=torch.bool)),
    ])
    if dtype_or_none("float8_e5m2") is not None:
        obj["f8_0d"] = torch.tensor(-1.5).to(torch.float8_e5m2)
        obj["u16_empty"] = torch.zeros(0, 2, dtype=torch.int16).view(torch.uint16)
    run.save("scalars_empty.pt", obj,
             "0-d tensors (float32, NaN float64, -0.0 float16, int64, bool, complex64, float8 on 2.x) and "
             "empty tensors of shape (0,), (0,4), (3,0,2), bool (0,), uint16 (0,2) on 2.x; each on its own storage")


def fx_nested(run):
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    deep = torch.tensor([4.0, 2.0])
    for _ in range(30):
        deep = [deep]
    obj = collections.OrderedDict([
        ("ints", [0, 1, -1, 255, 256, 65535, 65536, 2 ** 31 - 1, -2 ** 31, 2 ** 31, 2 ** 63 - 1, -2 ** 63,
                  2 ** 64, 2 ** 100, -2 ** 70 - 3]),
        ("floats", [0.0, -0.0, 1.5, -2.25, 1e300, 5e-324, INF, -INF, NAN]),
        ("flags", (True, False, None)),
        ("text", ["", "ascii", "h\u00e9llo w\u00f6rld", "\u65e5\u672c\u8a9e", "emoji \U0001F600", "nul\x00inside"]),
        ("blobs", [b"\x00\x01\xff\xfe\x80", b"x", bytearray(b"abc")]),
        ("set", {3, 1, 2}),
        ("complex", complex(1.5, -2.0)),
        ("size", torch.Size([2, 3, 4])),
        ("devices", [torch.device("cpu"), torch.device("cuda", 1)]),
        ("dtypes", [torch.float16, torch.bfloat16, torch.int64, torch.bool]),
        ("tensor", t),
        ("list", [t, "between", (torch.tensor([1, 2, 3], dtype=torch.int16),
                                 {"deep": [[torch.ones(2, dtype=torch.float64)]], "n": 5})]),
        ("tuple", (1, torch.zeros(2, dtype=torch.float64), None, "x", torch.tensor([True, False]))),
        ("int_keys", {0: torch.tensor([0]), 7: torch.tensor([7]), -3: torch.tensor([-3]), 2 ** 40: torch.tensor([40])}),
        ("odd_keys", collections.OrderedDict([("a.b", torch.tensor([1.0])), ("", torch.tensor([2.0])),
                                              ("\u043a\u043b\u044e\u0447", torch.tensor([3.0])),
                                              (None, torch.tensor([4.0])), (False, torch.tensor([5.0]))])),
        ("empty_containers", {"d": {}, "l": [], "t": (), "od": collections.OrderedDict()}),
        ("deep", deep),
        ("t_again", t),
        ("last", torch.tensor([9.0])),
    ])
    if IS_2X:
        # Empty bytes pickle (protocol 2) as a call of builtins.bytes, which 2.6's weights_only
        # unpickler does not allow; non-empty bytes go through _codecs.encode and load fine.
        err = try_load_probe(b"")
        if err:
            run.skip("empty bytes b'' in a checkpoint", "torch.load(weights_only=True) refused: " + err)
    run.save("nested.pt", obj,
             "nested dicts/lists/tuples mixing tensors with ints (incl. beyond 64 bits, negative), floats "
             "(NaN/inf/-0.0), bools, None, str (non-ASCII, NUL), bytes, bytearray, a set, complex, torch.Size, "
             "torch.device, dtypes; int/negative/2**40/None/False/empty/dotted/non-ASCII dict keys; empty "
             "containers; a tensor 31 lists deep; a tensor listed twice")


def fx_set_with_tensor(run):
    obj = collections.OrderedDict([
        ("before", torch.tensor([1.0, 2.0])),
        ("set", {torch.tensor([5.0, 6.0, 7.0])}),
        ("after", torch.tensor([3], dtype=torch.int32)),
    ])
    run.save("set_with_tensor.pt", obj,
             "a tensor inside a set (its storage is in the file but it is not listed), between two listed tensors")


def fx_conj_neg(run):
    x = torch.tensor([1 + 2j, -3.5 - 0.25j, complex(NAN, 1.0), complex(-0.0, -0.0)], dtype=torch.complex64)
    y = torch.tensor([1 + 2j, -3.5 - 0.25j, complex(INF, 2.0), 4 - 1j], dtype=torch.complex128)
    z = torch.tensor([0.5 + 1.5j, -2 + 0.0j, 3 - 3j], dtype=torch.complex64)
    w = torch.tensor([1.5 - 1j, -0.0 + 2j], dtype=torch.complex128)
    v = torch.tensor([1 + 1j, 2 - 2j, -3 + 0.5j], dtype=torch.complex64)
    obj = collections.OrderedDict([
        ("conj_c64", x.conj()),
        ("conj_c128_slice", y.conj()[1:]),
        ("neg_imag_of_conj", z.conj().imag),
        ("plain_complex", v),
    ])
    notes = []
    if hasattr(torch.Tensor, "_neg_view"):
        obj["neg_f64"] = torch.tensor([1.5, -0.0, INF, -2.0], dtype=torch.float64)._neg_view()
        obj["neg_c128"] = w._neg_view()
        obj["conj_neg_c64"] = v.clone().conj()._neg_view()
    else:
        run.skip("x._neg_view()", "torch %s has no Tensor._neg_view" % torch.__version__)
    if not IS_2X:
        notes.append("torch 1.13 saves conj/neg-bit tensors without the {'conj'/'neg': True} metadata, so "
                     "the file (and the manifest) holds the un-conjugated / un-negated values")
    run.save("conj_neg.pt", obj,
             "conj-bit views (complex64, complex128 slice with offset), neg-bit float32 view (x.conj().imag: offset "
             "1, stride 2 on a complex storage), _neg_view of float64 and complex128, conj+neg together",
             notes)


def fx_train(run):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 3, 8, 8, generator=g)
    y = torch.randint(0, 10, (16,), generator=g)
    loss = None
    for _ in range(2):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    ckpt = {
        "epoch": 2,
        "model_state_dict": model.state_dict(),
        "optimizer_state_dict": opt.state_dict(),
        "loss": loss.item(),
        "note": "small CNN (Conv2d+BatchNorm2d+Linear), SGD(lr=0.01, momentum=0.9, weight_decay=5e-4), 2 steps \u2713",
    }
    run.save("train_ckpt.pt", ckpt,
             "full training checkpoint {'epoch','model_state_dict' (OrderedDict+_metadata, BatchNorm buffers incl. "
             "0-d int64 num_batches_tracked),'optimizer_state_dict' (SGD momentum buffers keyed by int index, "
             "param_groups),'loss' float,'note' str} after 2 SGD steps")


def fx_resnet18(run):
    try:
        import torchvision
    except ImportError as e:
        run.skip("resnet18 state dicts", "torchvision not importable: %s" % e)
        return
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    # Every floating tensor is overwritten with a short repeating pattern BEFORE the state dict is
    # taken: random weights do not compress, and these files are 44.8 MB each; with a period of 251
    # elements each packs to about 240 KB (PACKED: the tree holds them gzipped). The pattern keeps running_var
    # positive so the state dict still makes sense for inference.
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if not t.is_floating_point():
                continue
            pattern = ((torch.arange(t.numel()) % 251) - 125).to(t.dtype) * 1e-3
            if name.endswith("running_var"):
                pattern = pattern.abs() + 1.0
            t.copy_(pattern.reshape(t.shape))
    sd = model.state_dict()
    run.save("resnet18.pth", sd,
             "torchvision resnet18(num_classes=10).state_dict(): 122 tensors (62 parameters, 60 buffers) with "
             "_metadata; weights are a deterministic pattern ((arange(n) %% 251) - 125) * 1e-3 (torchvision %s)"
             % torchvision.__version__)

    class Wrapper(nn.Module):
        """Holds the model as .module, exactly like DistributedDataParallel, so state_dict() has DDP's keys
        ('module.conv1.weight', ...) and _metadata ('', 'module', 'module.conv1', ...) without a process group."""

        def __init__(self, m):
            super().__init__()
            self.module = m

    # One DDP-prefixed copy is enough: the older layouts are covered by the plain v1.13 file, and
    # each of these adds 44.8 MB to a checkout.
    if not torch.__version__.startswith("2."):
        run.skip("resnet18_ddp.pth", "written by torch 2.x only, to keep the checkout small")
        return
    run.save("resnet18_ddp.pth", Wrapper(model).state_dict(),
             "the same resnet18 state dict as saved from a DDP-wrapped model: every key prefixed 'module.'")


def fx_parameters(run):
    torch.manual_seed(3)
    m = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    base = torch.arange(6, dtype=torch.float32) - 2.5
    obj = collections.OrderedDict([
        ("params", list(m.parameters())),
        ("p_grad", nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))),
        ("p_nograd", nn.Parameter(torch.tensor([0.5, 0.25], dtype=torch.float64), requires_grad=False)),
        ("p_int", nn.Parameter(torch.arange(3), requires_grad=False)),
        ("leaf_requires_grad", torch.ones(2, 2, requires_grad=True)),
        ("base", base),
        ("p_view_of_base", nn.Parameter(base[2:5])),
    ])
    run.save("parameters.pt", obj,
             "nn.Parameter objects: list(model.parameters()) of two Linear layers, Parameters with requires_grad "
             "True/False (float and int64), a plain leaf tensor with requires_grad=True, a Parameter viewing a "
             "plain tensor's storage at offset 2")


def fx_legacy(run):
    ts = savable_dtypes(run, LEGACY_DTYPES, _use_new_zipfile_serialization=False)
    base = torch.arange(12, dtype=torch.float64).reshape(3, 4) / 3.0
    ints = torch.arange(10, dtype=torch.int64) - 5
    obj = collections.OrderedDict()
    obj["dtypes"] = ts
    obj["base"] = base
    obj["base_view"] = base[1:, 1::2]
    obj["base_t"] = base.t()
    obj["ints_slice"] = ints[2:5]
    obj["ints_strided"] = ints[1::3]
    obj["scalar"] = torch.tensor(2.5)
    obj["empty"] = torch.empty(0, 3)
    obj["expanded"] = torch.tensor([1, 2], dtype=torch.int16).expand(3, 2)
    obj["meta"] = {"epoch": 3, "name": "legacy", "lr": 0.1, "big": 2 ** 70}
    run.save("legacy.pt", obj,
             "legacy (pre-1.6 pickle stream) format: every dtype with a typed storage, views sharing storage "
             "(slice with offset, strided, transposed), a 0-d tensor, an empty tensor, a stride-0 expand, "
             "non-tensor values", ["storage keys in the legacy format are memory addresses (str(storage._cdata)); "
                                   "they change on every run"],
             _use_new_zipfile_serialization=False)
    run.save("legacy_tensor.pt", torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float32).t(),
             "legacy format with a bare (transposed) tensor at the root (path \"\")",
             _use_new_zipfile_serialization=False)
    if IS_2X:
        t = make_tensor("uint16")
        err = None
        try:
            buf = io.BytesIO()
            torch.save(t, buf, _use_new_zipfile_serialization=False)
            buf.seek(0)
            torch.load(buf, weights_only=False)
        except Exception as e:  # noqa: BLE001
            err = "%s: %s" % (type(e).__name__, str(e).splitlines()[0])
        if err:
            run.skip("legacy format with dtypes saved as UntypedStorage (uint16, float8, ...)",
                     "torch.save writes it but torch.load cannot read it back: " + err)


def fx_many_small(run):
    g = torch.Generator().manual_seed(5)
    dts = [torch.float32, torch.float64, torch.int64, torch.int32, torch.float16, torch.uint8, torch.bool,
           torch.bfloat16]
    obj = collections.OrderedDict()
    for i in range(5000):
        n = 1 + i % 8
        v = torch.randint(-100, 100, (n,), generator=g)
        dt = dts[(i // 8) % len(dts)]
        obj["t%04d" % i] = (v > 0) if dt == torch.bool else (v.to(dt) if not dt.is_floating_point
                                                               else v.to(dt) / 8)
    run.save("many_small.pt", obj,
             "5000 tensors of 1-8 elements in 8 dtypes, each on its own storage (dict batched in SETITEMS of "
             "1000; storage records data/0..data/4999 in lexicographic order)")


def fx_custom_stem_and_bytesio(run):
    obj = collections.OrderedDict([("w", torch.tensor([[1.0, 2.0, 3.0]])), ("b", torch.tensor([0.5]))])
    run.save("custom_stem.v1.pth", obj,
             "saved to a path with a dotted stem: the archive prefix is 'custom_stem.v1' (last extension removed)")
    buf = io.BytesIO()
    torch.save(torch.tensor([1.0, 2.0]), buf)
    with open(run.path("bytesio.pt"), "wb") as f:
        f.write(buf.getvalue())
    run.add("bytesio.pt", "saved to io.BytesIO: archive prefix 'archive'; a bare tensor at the root (path \"\")")


# ---------------------------------------------------------------------------------------------
# Zip surgery: the deflated re-zip and the big-endian rewrite.


def fx_deflated(run, src_name="dtypes.pt"):
    dst = "deflated.pt"
    with zipfile.ZipFile(run.path(src_name)) as zin, \
            zipfile.ZipFile(run.path(dst), "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zi = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(zi, zin.read(info), compresslevel=9)
    a = manifest_tensors(torch.load(run.path(src_name), **load_kwargs_any()))
    b = manifest_tensors(torch.load(run.path(dst), **load_kwargs_any()))
    if strip_groups(a) != strip_groups(b):
        raise RuntimeError("deflated.pt does not load to the tensors of %s" % src_name)
    run.add(dst, "%s re-zipped by Python's zipfile with ZIP_DEFLATED (level 9), same member names and order "
                 "(prefix stays '%s'); records are compressed and unaligned" % (src_name, src_name[:-3]))


# Element size of each legacy storage type, and whether it is complex (swapped per component).
STORAGE_ELEM = {
    "DoubleStorage": (8, False), "FloatStorage": (4, False), "HalfStorage": (2, False),
    "BFloat16Storage": (2, False), "LongStorage": (8, False), "IntStorage": (4, False),
    "ShortStorage": (2, False), "CharStorage": (1, False), "ByteStorage": (1, False),
    "BoolStorage": (1, False), "ComplexDoubleStorage": (16, True), "ComplexFloatStorage": (8, True),
}


class _Stub:
    """Stands for any global while data.pkl is scanned: calling or building it yields another stub."""

    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        return _Stub(self.name + "()")

    def __setstate__(self, state):
        pass


class _StorageScanner(pickle.Unpickler):
    """Unpickles data.pkl without importing anything, recording each storage key's storage type."""

    def __init__(self, f):
        super().__init__(f)
        self.storage_types = {}

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        return _Stub(module + "." + name)

    def persistent_load(self, pid):
        typ, key = pid[1].name, pid[2]
        self.storage_types[key] = typ.rsplit(".", 1)[-1]
        return _Stub("storage")


def _zip_parse(buf):
    """Central-directory entries and end records of a torch-written zip (no zip64 extras)."""
    eocd = buf.rfind(b"PK\x05\x06")
    loc = eocd - 20
    if eocd < 0 or buf[loc:loc + 4] != b"PK\x06\x07":
        raise ValueError("not a torch zip64 archive")
    z64_off = struct.unpack_from("<Q", buf, loc + 8)[0]
    z64 = list(struct.unpack_from("<IQHHIIQQQQ", buf, z64_off))
    n, cd_off = z64[7], z64[9]
    entries = []
    p = cd_off
    for _ in range(n):
        f = list(struct.unpack_from("<IHHHHHHIIIHHHHHII", buf, p))
        nlen, xlen, clen = f[10], f[11], f[12]
        if f[8] == 0xFFFFFFFF or f[9] == 0xFFFFFFFF or f[16] == 0xFFFFFFFF or xlen:
            raise ValueError("zip64 extras are not handled here")
        name = buf[p + 46:p + 46 + nlen]
        entries.append({"cd": f, "name": name, "comment": buf[p + 46 + nlen + xlen:p + 46 + nlen + xlen + clen]})
        p += 46 + nlen + xlen + clen
    return entries, z64, buf[loc:loc + 20], buf[eocd:eocd + 22]


def _local_record(buf, off):
    h = list(struct.unpack_from("<IHHHHHIIIHH", buf, off))
    if h[0] != 0x04034B50:
        raise ValueError("bad local header at %d" % off)
    nlen, xlen = h[9], h[10]
    name = buf[off + 30:off + 30 + nlen]
    extra = buf[off + 30 + nlen:off + 30 + nlen + xlen]
    fields, q = [], 0
    while q < len(extra):
        fid, flen = struct.unpack_from("<HH", extra, q)
        fields.append((fid, extra[q + 4:q + 4 + flen]))
        q += 4 + flen
    return h, name, fields, off + 30 + nlen + xlen


def byteswap(data, elem, is_complex):
    size = elem // 2 if is_complex else elem
    if size == 1:
        return bytes(data)
    code = {2: "H", 4: "I", 8: "Q"}[size]
    if array.array(code).itemsize != size:
        code = {4: "L"}[size]
    a = array.array(code, bytes(data))
    a.byteswap()
    return a.tobytes()


def rewrite_big_endian(src, dst):
    """Copy torch zip src to dst with every storage byte-swapped and byteorder 'big'.

    Records are written in the same order with the same header fields; only the byteorder record
    shrinks (6 -> 3 bytes), so the 'FB' padding of later records is recomputed with torch's rule
    (data of every record on a 64-byte boundary), and CRCs, sizes and offsets follow."""
    with open(src, "rb") as f:
        buf = f.read()
    entries, z64, _loc, eocd = _zip_parse(buf)
    prefix = entries[0]["name"].split(b"/", 1)[0].decode()
    with zipfile.ZipFile(src) as z:
        scanner = _StorageScanner(io.BytesIO(z.read(prefix + "/data.pkl")))
    scanner.load()
    out = bytearray()
    new_offsets = {}
    for e in sorted(entries, key=lambda e: e["cd"][16]):
        h, name, fields, data_off = _local_record(buf, e["cd"][16])
        size = e["cd"][9]
        data = buf[data_off:data_off + size]
        rec = name.decode()[len(prefix) + 1:]
        if rec == "byteorder":
            if data != b"little":
                raise ValueError("source is not little-endian")
            data = b"big"
        elif rec.startswith("data/"):
            typ = scanner.storage_types[rec[5:]]
            if typ not in STORAGE_ELEM:
                raise ValueError("storage type %s of %s has no byte swap in torch.load" % (typ, rec))
            data = byteswap(data, *STORAGE_ELEM[typ])
        if h[6] or h[7] or h[8] or ((h[2] & 8) == 0) != (size == 0):
            raise ValueError("unexpected local header for %s" % name)
        offset = len(out)
        new_offsets[name] = offset
        kept = b"".join(struct.pack("<HH", fid, len(fd)) + fd for fid, fd in fields if fid != 0x4246)
        start = offset + 30 + len(name) + len(kept) + 4
        pad = (64 - start % 64) % 64
        extra = kept + struct.pack("<HH", 0x4246, pad) + b"Z" * pad
        h[10] = len(extra)
        out += struct.pack("<IHHHHHIIIHH", *h) + name + extra + data
        crc = zlib.crc32(data) & 0xFFFFFFFF
        e["crc"], e["size"] = crc, len(data)
        if h[2] & 8:
            out += struct.pack("<IIII", 0x08074B50, crc, len(data), len(data))
    cd_off = len(out)
    for e in entries:
        f = list(e["cd"])
        f[7], f[8], f[9], f[16] = e["crc"], e["size"], e["size"], new_offsets[e["name"]]
        out += struct.pack("<IHHHHHHIIIHHHHHII", *f) + e["name"] + e["comment"]
    cd_size = len(out) - cd_off
    z64_off = len(out)
    z64[8], z64[9] = cd_size, cd_off
    out += struct.pack("<IQHHIIQQQQ", *z64)
    out += struct.pack("<IIQI", 0x07064B50, 0, z64_off, 1)
    e = list(struct.unpack("<IHHHHIIH", eocd))
    e[5], e[6] = min(cd_size, 0xFFFFFFFF), min(cd_off, 0xFFFFFFFF)
    out += struct.pack("<IHHHHIIH", *e)
    with open(dst, "wb") as f:
        f.write(out)


def fx_big_endian(run):
    if not IS_2X:
        run.skip("big-endian file", "made from torch 2.x output only: torch %s neither writes nor reads the "
                 "byteorder record, so it could not verify the file" % torch.__version__)
        return
    ts = savable_dtypes(run, LEGACY_DTYPES)
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) * 1.25 - 4
    obj = collections.OrderedDict()
    obj["dtypes"] = ts
    obj["base"] = base
    obj["base_view"] = base[1:, 1::2]
    obj["base_t"] = base.t()
    obj["c128_view"] = ts["complex128"][1:, ::3] if "complex128" in ts else None
    obj["scalar_f64"] = torch.tensor(-1234.5678, dtype=torch.float64)
    obj["scalar_i32"] = torch.tensor(0x01020304, dtype=torch.int32)
    obj["empty_f32"] = torch.empty(0, 2)
    obj["expanded_i16"] = torch.tensor([0x0102, -2], dtype=torch.int16).expand(2, 2)
    # The little-endian source is written under the same file name in a scratch folder, so that the
    # archive prefix is 'big_endian' as if torch had written the big-endian file itself.
    scratch = tempfile.mkdtemp(prefix="ptc-fixtures-")
    little = os.path.join(scratch, "big_endian.pt")
    torch.save(obj, little)
    try:
        rewrite_big_endian(little, run.path("big_endian.pt"))
        with zipfile.ZipFile(run.path("big_endian.pt")) as z:
            bad = z.testzip()
            if bad:
                raise RuntimeError("CRC mismatch in %s" % bad)
        a = manifest_tensors(torch.load(little, weights_only=True))
        b = manifest_tensors(torch.load(run.path("big_endian.pt"), weights_only=True))
        if strip_groups(a) != strip_groups(b) or [t["storage_group"] for t in a] != [t["storage_group"] for t in b]:
            raise RuntimeError("big_endian.pt does not load to the tensors of its little-endian source")
    finally:
        os.remove(little)
        os.rmdir(scratch)
    run.add("big_endian.pt",
            "byteorder 'big': a torch 2.6 file of every typed-storage dtype (+ views with offsets, 0-d, empty, "
            "stride-0 expand) with every storage byte-swapped by element size (complex per component) and the "
            "zip re-assembled (same records and order, 64-byte alignment); torch 2.6 loads it to the same tensors",
            ["dtypes stored as UntypedStorage (float8, uint16/32/64, complex32) are left out: torch 2.6 does "
             "not byte-swap them when loading a big-endian file"])
    # Show the reason for the exclusion above with torch itself, so the note stays true.
    probe_big_endian_untyped(run)


def probe_big_endian_untyped(run):
    t = make_tensor("uint16")
    if t is None:
        return
    little = run.path("probe.little")
    big = run.path("probe.big")
    try:
        torch.save({"u16": t}, little)
        # Swap as if uint16: patch the storage type table for this probe only.
        STORAGE_ELEM["UntypedStorage"] = (2, False)
        try:
            rewrite_big_endian(little, big)
        finally:
            del STORAGE_ELEM["UntypedStorage"]
        u = torch.load(big, weights_only=True)["u16"]
        if not torch.equal(u.view(torch.int16), t.view(torch.int16)):
            run.skip("big-endian file with UntypedStorage dtypes (uint16 probe)",
                     "torch %s loads byte-swapped uint16 data without swapping it back" % torch.__version__)
    finally:
        for p in (little, big):
            if os.path.exists(p):
                os.remove(p)


# ---------------------------------------------------------------------------------------------
# Manifest: computed from torch.load of the written files.


def storage_ptr(t):
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage().data_ptr()
    return t.storage().data_ptr()


def path_key(k):
    return str(k)  # str as is, int in decimal, True/False/None as Python writes them


def walk(obj, parts, out):
    if isinstance(obj, torch.Tensor):
        out.append((".".join(parts), obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            walk(v, parts + [path_key(k)], out)
    elif isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        for i, v in enumerate(obj):
            walk(v, parts + [str(i)], out)


def tensor_bytes(t):
    r = t.detach()
    if hasattr(r, "resolve_conj"):
        r = r.resolve_conj()
    if hasattr(r, "resolve_neg"):
        r = r.resolve_neg()
    c = r.clone(memory_format=torch.contiguous_format)
    n = c.numel() * c.element_size()
    if n == 0:
        return b""
    if sys.byteorder != "little":
        raise RuntimeError("the manifest hashes little-endian bytes; run on a little-endian host")
    return ctypes.string_at(c.data_ptr(), n)


def manifest_tensors(root):
    listed = []
    walk(root, [], listed)
    out, first_by_ptr = [], {}
    for i, (path, t) in enumerate(listed):
        ptr = storage_ptr(t)
        if ptr == 0:
            group = i  # torch.load never shares a zero-byte storage
        else:
            group = first_by_ptr.setdefault(ptr, i)
        out.append(collections.OrderedDict([
            ("path", path),
            ("dtype", dtype_name(t.dtype)),
            ("shape", list(t.shape)),
            ("stride", list(t.stride())),
            ("storage_offset", t.storage_offset()),
            ("nbytes", t.numel() * t.element_size()),
            ("sha256", hashlib.sha256(tensor_bytes(t)).hexdigest()),
            ("storage_group", group),
            ("requires_grad", bool(t.requires_grad)),
            ("parameter", isinstance(t, nn.Parameter)),
        ]))
    return out


def strip_groups(tensors):
    return [{k: v for k, v in t.items() if k != "storage_group"} for t in tensors]


def load_kwargs_any():
    return {"weights_only": True} if IS_2X else {"weights_only": False}


def load_for_manifest(path):
    """torch.load with weights_only=True; on torch 1.x fall back to weights_only=False (recorded)."""
    try:
        return torch.load(path, weights_only=True), "weights_only=True", None
    except Exception as e:  # noqa: BLE001
        if IS_2X:
            raise
        msg = str(e)
        msg = msg.split("WeightsUnpickler error: ", 1)[-1].strip().splitlines()[0]
        return torch.load(path, weights_only=False), "weights_only=False", msg


def file_facts(path):
    with open(path, "rb") as f:
        head = f.read(4)
    if head != b"PK\x03\x04":
        return "legacy", "", "little"
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        prefix = names[0].split("/", 1)[0]
        bo = z.read(prefix + "/byteorder").decode() if prefix + "/byteorder" in names else "little"
    return "zip", prefix, bo


def write_manifest(run):
    files = collections.OrderedDict()
    for name, info in run.files.items():
        p = run.path(name)
        fmt, prefix, bo = file_facts(p)
        root, how, why = load_for_manifest(p)
        entry = collections.OrderedDict([
            ("format", fmt), ("prefix", prefix), ("byteorder", bo)])
        if fmt == "zip":  # a legacy file's size varies with the digits of its address-named storages
            entry["size"] = os.path.getsize(p)
        entry["loaded_with"] = how
        if why:
            entry["weights_only_error"] = why
        entry["covers"] = info["covers"]
        if info["notes"]:
            entry["notes"] = info["notes"]
        entry["tensors"] = manifest_tensors(root)
        files[name] = entry
        print("  %-22s %-6s %9d bytes %5d tensors  %s" % (name, fmt, os.path.getsize(p), len(entry["tensors"]), how))
    try:
        import torchvision
        tv = torchvision.__version__
    except ImportError:
        tv = None
    doc = collections.OrderedDict([
        ("generator", "testdata/torch/gen_fixtures.py"),
        ("torch_version", torch.__version__),
        ("torchvision_version", tv),
        ("python_version", platform.python_version()),
        ("skipped", run.skipped),
        ("files", files),
    ])
    with open(run.path("manifest.json"), "w", encoding="utf-8") as f:
        f.write(dump_manifest(doc))


# The files kept gzipped in the tree (44.8 MB each, a few hundred KB packed); make check unpacks them
# into the build tree (unpack.sh) and checks each against packed.sha256.
PACKED = ("resnet18.pth", "resnet18_ddp.pth")


def pack(out, names):
    """Replaces each file out/NAME by out/NAME.gz (level 9, no name, time 0: the same bytes on every
    run) and records its SHA-256 in packed.sha256 beside out, as `HASH  <folder>/NAME` (sha256sum's
    format), where the lines of this folder are replaced and those of other folders kept."""
    out = os.path.abspath(out)
    sub = os.path.basename(out)
    sums_path = os.path.join(os.path.dirname(out), "packed.sha256")
    sums = {}
    if os.path.exists(sums_path):
        with open(sums_path, encoding="utf-8") as f:
            for line in f:
                h, n = line.split()
                if not n.startswith(sub + "/"):
                    sums[n] = h
    for name in names:
        p = os.path.join(out, name)
        if not os.path.exists(p):
            continue
        with open(p, "rb") as f:
            data = f.read()
        packed = gzip.compress(data, compresslevel=9, mtime=0)
        with open(p + ".gz", "wb") as f:
            f.write(packed)
        os.remove(p)
        sums[sub + "/" + name] = hashlib.sha256(data).hexdigest()
        print("  packed %s: %d -> %d bytes" % (name, len(data), len(packed)))
    with open(sums_path, "w", encoding="utf-8") as f:
        for n in sorted(sums):
            f.write("%s  %s\n" % (sums[n], n))


def dump_manifest(doc):
    """JSON with one tensor per line: readable, and diffs stay small."""
    def j(v):
        return json.dumps(v, ensure_ascii=False)

    lines = ["{"]
    head = [k for k in doc if k != "files"]
    for k in head:
        lines.append("  %s: %s," % (j(k), j(doc[k])))
    lines.append('  "files": {')
    names = list(doc["files"])
    for i, name in enumerate(names):
        e = doc["files"][name]
        lines.append("    %s: {" % j(name))
        for k, v in e.items():
            if k != "tensors":
                lines.append("      %s: %s," % (j(k), j(v)))
        lines.append('      "tensors": [')
        ts = e["tensors"]
        for n, t in enumerate(ts):
            lines.append("        %s%s" % (j(t), "," if n + 1 < len(ts) else ""))
        lines.append("      ]")
        lines.append("    }%s" % ("," if i + 1 < len(names) else ""))
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "v" + TORCH_MM),
                    help="output folder (default: %(default)s)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for f in os.listdir(args.out):  # regenerate from scratch: drop files of an earlier run
        if f.endswith((".pt", ".pth", ".json", ".little", ".big", ".gz")):
            os.remove(os.path.join(args.out, f))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    run = Run(args.out)
    print("torch %s, python %s -> %s" % (torch.__version__, platform.python_version(), args.out))
    for fx in (fx_dtypes, fx_views, fx_scalars_empty, fx_nested, fx_set_with_tensor, fx_conj_neg, fx_train,
               fx_parameters, fx_legacy, fx_many_small, fx_custom_stem_and_bytesio, fx_deflated, fx_big_endian,
               fx_resnet18):
        fx(run)
    write_manifest(run)
    total = sum(os.path.getsize(run.path(n)) for n in run.files)
    print("%d files, %d bytes" % (len(run.files), total))
    pack(args.out, [n for n in PACKED if n in run.files])


if __name__ == "__main__":
    main()
