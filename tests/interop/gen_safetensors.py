#!/usr/bin/env python3
"""Write the safetensors fixtures of testdata/safetensors/ with the Python safetensors library.

For each fixture NAME this writes

  NAME.safetensors  written by safetensors.torch.save_file(tensors, metadata=...);
  NAME.pt           the same tensors written by torch.save as a dict in another order (some as
                    views: a transposed tensor, a conj and a neg view), so that ptc can load it
                    and write NAME.safetensors itself; tests/unit/test_safetensors.c compares
                    ptc's bytes with the library's;

and manifest.json: versions, and per fixture its metadata, its header (the JSON text) and its
tensors in header order: name, dtype (torch's name), shape, data_offsets and the sha256 of the
tensor's bytes (row-major, little-endian; what `ptc inspect --json --hash` prints), all computed
from safetensors.torch.load_file of the written file.

Everything is deterministic (fixed values, no randomness); the library keeps "__metadata__" in a
hash map, so every fixture has at most one metadata key and the header is reproducible.

Usage (from the top of the source tree): python3 tests/interop/gen_safetensors.py [--out DIR]
"""

import argparse
import hashlib
import json
import os
import platform
import struct
import sys
import warnings

import safetensors
import safetensors.torch
import torch

warnings.simplefilter("ignore")

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))


def tensor_sha256(t):
    t = t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()


def fixtures():
    """name -> (tensors in torch.save order, safetensors metadata or None, .pt views)."""
    ar = torch.arange
    basic = {
        "layer.weight": ar(12, dtype=torch.float32).reshape(3, 4) / 8,
        "layer.bias": torch.tensor([0.5, -1.25, 3.0], dtype=torch.float32),
        "double": torch.tensor([1.0, -2.0, 1e300, float("inf")], dtype=torch.float64),
        "half": torch.tensor([1.0, 65504.0, -0.0, 6e-8], dtype=torch.float16),
        "bf": torch.tensor([1.0, -3.0e38, 0.1], dtype=torch.bfloat16),
        "i64": torch.tensor([-(2 ** 63), 2 ** 63 - 1, 0, 7], dtype=torch.int64),
        "i32": ar(-3, 3, dtype=torch.int32),
        "i16": torch.tensor([-32768, 32767], dtype=torch.int16),
        "i8": torch.tensor([-128, 127, 0], dtype=torch.int8),
        "u8": ar(250, 256, dtype=torch.uint8),
        "flags": torch.tensor([True, False, True]),
        "u16": torch.tensor([0, 65535], dtype=torch.uint16),
        "u32": torch.tensor([0, 2 ** 32 - 1], dtype=torch.uint32),
        "u64": torch.tensor([0, 2 ** 63 + 5], dtype=torch.uint64),
        "f8a": torch.tensor([0.5, -448.0, 1.0], dtype=torch.float32).to(torch.float8_e4m3fn),
        "f8b": torch.tensor([0.5, -57344.0], dtype=torch.float32).to(torch.float8_e5m2),
        "cplx": torch.tensor([1 + 2j, -3 - 0.5j], dtype=torch.complex64),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.zeros(0, dtype=torch.float32),
        "empty3d": torch.zeros(2, 0, 3, dtype=torch.int16),
        "a": ar(5, dtype=torch.float32),
        "B": ar(3, dtype=torch.float32),
        "b": ar(2, dtype=torch.float32),
        "ab": ar(1, dtype=torch.float32),
    }
    # Transposed, conj and neg views in the .pt; their contiguous values in the .safetensors.
    base = ar(6, dtype=torch.float32).reshape(2, 3)
    c = torch.tensor([1 + 1j, 2 - 3j], dtype=torch.complex64)
    views = {"transposed": base.t(), "conj": c.conj(), "neg": torch._neg_view(ar(4.0))}
    basic.update({k: v.resolve_conj().resolve_neg().contiguous() for k, v in views.items()})

    escapes = {
        "quote\"back\\slash": ar(2, dtype=torch.int32),
        "ctl\x01\x1f\x7f\n\t": ar(3, dtype=torch.int8),
        "unicode \u00e9\u4e2d\U0001F600": ar(1, dtype=torch.float16),
        "slash/and space": ar(2, dtype=torch.int64),
    }
    return {
        "basic": (basic, {"format": "pt"}, views),
        "nometa": ({"x": ar(4, dtype=torch.float32), "y": ar(3, dtype=torch.int64)}, None, {}),
        "empty": ({}, None, {}),
        "empty_meta": ({}, {"k\u00e9y \"q\"": "v\x01\x1f\n\\ \u2028 end"}, {}),
        "escapes": (escapes, {"note": "tab\there \u00ff nul\x00end"}, {}),
        # jansson cannot hold a NUL in an object key: ptc refuses this file (EFORMAT).
        "nul_name": ({"nul\x00inside": ar(2, dtype=torch.uint8)}, None, {}),
        "big": ({"w": ar(16384, dtype=torch.float32).reshape(128, 128) * 0.5,
                 "idx": ar(1000, dtype=torch.int64)}, {"format": "pt"}, {}),
    }


def scrambled(d):
    """The dict in an order different from the library's (reverse of sorted names)."""
    return dict(sorted(d.items(), key=lambda kv: kv[0], reverse=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(TOP, "testdata", "safetensors"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    manifest = {
        "generator": "tests/interop/gen_safetensors.py",
        "safetensors_version": safetensors.__version__,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "files": {},
    }
    for name, (tensors, meta, views) in fixtures().items():
        st_path = os.path.join(args.out, name + ".safetensors")
        safetensors.torch.save_file(tensors, st_path, metadata=meta)
        os.chmod(st_path, 0o644)  # the library creates files 0600
        pt = scrambled(tensors)
        pt.update(views)
        torch.save(pt, os.path.join(args.out, name + ".pt"))

        with open(st_path, "rb") as f:
            raw = f.read()
        n = struct.unpack("<Q", raw[:8])[0]
        header = raw[8:8 + n].decode("utf-8")
        hdr = json.loads(header)
        loaded = safetensors.torch.load_file(st_path)
        entries = []
        for key, info in hdr.items():
            if key == "__metadata__":
                continue
            t = loaded[key]
            entries.append({"name": key, "dtype": str(t.dtype).replace("torch.", ""),
                            "st_dtype": info["dtype"], "shape": list(t.shape),
                            "data_offsets": info["data_offsets"], "sha256": tensor_sha256(t)})
        manifest["files"][name] = {
            "size": len(raw), "header_size": n, "header": header,
            "metadata": hdr.get("__metadata__"), "tensors": entries,
            "sha256": hashlib.sha256(raw).hexdigest(),
        }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=True)
        f.write("\n")
    print("wrote %d fixtures to %s" % (len(manifest["files"]), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
