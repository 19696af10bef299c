#!/usr/bin/env python3
"""make_salvage_seeds.py - write the seeds of the salvage fuzz target (tests/fuzz/corpus/salvage/).

    python3 tests/fuzz/make_salvage_seeds.py [--out tests/fuzz/corpus/salvage]

Checkpoints that the strict reader refuses and PTC_OPEN_SALVAGE reads: whole modules saved with
torch.save (zip and legacy), a class whose __reduce__ names os.system, numpy arrays of every dtype
ptc maps (big-endian, Fortran order, 0-d, empty, a scalar) and some it leaves symbolic (object,
structured), an enum as a dict key, a YOLO-style training dict, cycles (OmegaConf-like parent
pointers in a Lightning-style dict, a module that holds its parent). Needs torch and numpy. Seeds are
kept small (a few KiB). Nothing here is run by the fuzz target: the payload is inert bytes, and
its __reduce__ is only called by pickle while writing (it returns the tuple, it runs nothing).
"""
import argparse
import argparse as ap_mod
import enum
import os

import numpy as np
import torch
from torch import nn


class Payload:
    def __reduce__(self):
        return (os.system, ("echo salvage-seed",))


class Color(enum.Enum):
    RED = 1
    GREEN = 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 1, bias=False)
        self.bn = nn.BatchNorm2d(2)
        self.register_buffer("scratch", torch.zeros(2), persistent=False)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(Block(), nn.ReLU())
        self.head = nn.Linear(2, 2)
        self.tied = self.head  # a module reached twice


class Node:
    """An OmegaConf node as Lightning checkpoints pickle them: _parent points to the container."""

    def __init__(self, parent, content):
        self._parent = parent
        self._content = content


def parented():
    root = Node(None, {})
    layers = Node(root, [])
    layers._content.append(Node(layers, 3))
    root._content["layers"] = layers
    root._content["lr"] = Node(root, 0.01)
    return root


class Owned(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.fc.__dict__["owner"] = self  # a plain attribute pointing back, not a child


def arrays():
    return {
        "f4": np.arange(6, dtype="<f4").reshape(2, 3),
        "i2be": np.arange(6, dtype=">i2").reshape(3, 2),
        "f8fortran": np.asfortranarray(np.arange(6, dtype="f8").reshape(2, 3)),
        "b1": np.array([True, False, True]),
        "u1": np.arange(4, dtype="u1"),
        "c8": np.array([1 + 2j], dtype="c8"),
        "zero_d": np.array(2.5),
        "empty": np.zeros((0, 3), dtype="f4"),
        "scalar": np.float64(1.25),
        "object": np.array([1, "a"], dtype=object),
        "structured": np.zeros(2, dtype=[("a", "i4"), ("b", "f4")]),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "corpus", "salvage"))
    out = p.parse_args().out
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    seeds = {
        "module-zip.pth": (Net(), {}),
        "module-legacy.pth": (Net(), {"_use_new_zipfile_serialization": False}),
        "payload.pth": ({"w": torch.ones(2), "x": Payload()}, {}),
        "payload-legacy.pth": ({"w": torch.ones(2), "x": Payload()}, {"_use_new_zipfile_serialization": False}),
        "numpy.pth": (arrays(), {}),
        "numpy-legacy.pth": (arrays(), {"_use_new_zipfile_serialization": False}),
        "enum-key.pth": ({Color.RED: torch.zeros(1), "c": Color.GREEN}, {}),
        "cycle-lightning.pth": ({"state_dict": nn.Linear(2, 1).state_dict(), "hparams": parented(),
                                 "epoch": 3}, {}),
        "cycle-lightning-legacy.pth": ({"state_dict": nn.Linear(2, 1).state_dict(),
                                        "hparams": parented()},
                                       {"_use_new_zipfile_serialization": False}),
        "cycle-module.pth": (Owned(), {}),
        "yolo-style.pth": (
            {
                "model": nn.Linear(2, 1),
                "epoch": 5,
                "best_fitness": np.float64(0.5),
                "train_args": ap_mod.Namespace(lr=0.01, imgsz=64),
                "date": "2026-01-01",
            },
            {},
        ),
    }
    for name, (obj, kw) in seeds.items():
        path = os.path.join(out, name)
        torch.save(obj, path, **kw)
        print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
