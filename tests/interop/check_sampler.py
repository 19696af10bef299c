#!/usr/bin/env python3
"""Compare the data layer (lib/data/) with torch's DistributedSampler and torchvision's transforms.

tests/interop/sampler_dump (built from sampler_dump.c) prints what ptc computes; this script
computes the same with torch and compares:

1. DistributedSampler(shuffle=False, drop_last=False/True) for many dataset sizes and world sizes
   (n < world included): every rank's indices, in order.
2. shuffle=True: ptc's permutation cannot be torch.randperm's, so data.h specifies its generator
   (SplitMix64, Fisher-Yates); it is reimplemented here from that text and must give the same
   permutation. Then torch's DistributedSampler is run with torch.randperm replaced by that
   permutation, so everything around it (padding, truncation, striding over ranks) is torch's own.
3. The evaluation sharding: rank r gets range(r, n, world).
4. The augmentation draws (top, left, flip), reimplemented from data.h.
5. ToTensor + Normalize of every byte value in each channel, bit for bit, for the tutorial's
   CIFAR-10 constants and for others.
6. RandomCrop(32, padding=4) + RandomHorizontalFlip + ToTensor + Normalize through torchvision's
   own functional ops on PIL images (pad, crop, hflip, to_tensor, normalize), for random images and
   a spread of crops, both flips, bit for bit.

torchvision, PIL and numpy are required, like torch: without one of them the comparisons of 5 and 6
could not be made with torchvision's own code, and the script fails (exit 1) rather than pass on
what it could still compare.

Exit status: 0 all equal, 1 a difference or a missing torchvision, PIL or numpy, 77 torch is not
importable (tests/interop/run.sh counts that as a failure too), 99 cannot run (sampler_dump missing
or failing). Takes a few seconds.

Usage: check_sampler.py [--sampler-dump PATH]   (default $top_builddir/tests/interop/sampler_dump)
"""

import argparse
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common  # noqa: E402

M64 = (1 << 64) - 1
TAG_SHUFFLE = 0x7074632D73687566  # "ptc-shuf"
TAG_AUGMENT = 0x7074632D61756700  # "ptc-aug"
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)


# ---- the generator, as data.h describes it --------------------------------------------------
def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class Rng:
    def __init__(self, tag, words):
        s = mix(tag)
        for w in words:
            s = mix(s ^ (w & M64))
        self.s = s

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        return mix(self.s)

    def below(self, bound):
        t = ((1 << 64) - bound) % bound
        while True:
            r = self.next()
            if r >= t:
                return r % bound


def ptc_perm(n, seed, epoch):
    rng = Rng(TAG_SHUFFLE, [seed, epoch])
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng.below(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def ptc_draw(seed, rank, epoch, index):
    rng = Rng(TAG_AUGMENT, [seed, rank, epoch, index])
    top = rng.below(9)
    left = rng.below(9)
    flip = rng.next() >> 63
    return top, left, flip


# ---- running sampler_dump ----------------------------------------------------------------------
class Dump:
    def __init__(self, path):
        self.path = path

    def run(self, args, stdin=None):
        r = subprocess.run([self.path] + [str(a) for a in args], input=stdin,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if r.returncode != 0:
            raise RuntimeError("sampler_dump %s: exit %d: %s" % (
                " ".join(str(a) for a in args), r.returncode, r.stderr.decode(errors="replace")))
        return r.stdout

    def lists(self, args):
        lines = self.run(args).decode().split("\n")
        assert lines[-1] == ""
        return [[int(x) for x in line.split()] for line in lines[:-1]]


class Report:
    def __init__(self):
        self.failures = 0
        self.checks = 0

    def same(self, what, ours, theirs):
        self.checks += 1
        if ours != theirs:
            self.failures += 1
            print("DIFF %s\n  ptc:   %s\n  torch: %s" % (what, str(ours)[:300], str(theirs)[:300]))


def torch_sampler(torch, n, world, rank, drop_last, shuffle=False, seed=0, epoch=0):
    from torch.utils.data.distributed import DistributedSampler
    s = DistributedSampler(list(range(n)), num_replicas=world, rank=rank, shuffle=shuffle,
                           seed=seed, drop_last=drop_last)
    s.set_epoch(epoch)
    return list(iter(s))


NS = [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 15, 16, 17, 31, 100, 1001, 10000]
WORLDS = [1, 2, 3, 4, 5, 7, 8, 16]


def check_plain(torch, dump, rep):
    for n in NS:
        for world in WORLDS:
            for drop in (False, True):
                ours = dump.lists((["--drop-last"] if drop else []) + [n, world])
                for r in range(world):
                    rep.same("n=%d world=%d rank=%d drop_last=%s" % (n, world, r, drop),
                             ours[r], torch_sampler(torch, n, world, r, drop))


def check_shuffle(torch, dump, rep):
    cases = [(0, 0), (0, 1), (42, 0), (42, 7), (2**64 - 1, 3)]
    for n in (1, 2, 10, 97, 1000):
        for seed, epoch in cases:
            rep.same("permutation n=%d seed=%d epoch=%d" % (n, seed, epoch),
                     dump.lists(["--shuffle", seed, epoch, n, 1])[0], ptc_perm(n, seed, epoch))
    real_randperm = torch.randperm
    try:
        for n in (1, 2, 3, 10, 17, 97, 1000):
            for world in (1, 2, 3, 4, 8, 16):
                for drop in (False, True):
                    seed, epoch = 42 + n, world
                    perm = ptc_perm(n, seed, epoch)
                    torch.randperm = lambda k, generator=None, _p=perm: torch.tensor(_p)
                    ours = dump.lists((["--drop-last"] if drop else [])
                                      + ["--shuffle", seed, epoch, n, world])
                    for r in range(world):
                        rep.same("shuffle n=%d world=%d rank=%d drop_last=%s" % (n, world, r, drop),
                                 ours[r], torch_sampler(torch, n, world, r, drop, True, seed,
                                                        epoch))
    finally:
        torch.randperm = real_randperm


def check_eval(dump, rep):
    for n in NS:
        for world in WORLDS:
            ours = dump.lists(["--eval", n, world])
            rep.same("eval n=%d world=%d" % (n, world), ours,
                     [list(range(r, n, world)) for r in range(world)])
            rep.same("eval n=%d world=%d total" % (n, world), sum(len(x) for x in ours), n)


def check_draws(dump, rep):
    for seed, rank, epoch, index in [(0, 0, 0, 0), (1, 2, 3, 4), (123, 1, 9, 49999),
                                     (2**64 - 1, 7, 2**40, 2**62)]:
        line = dump.run(["--draw", seed, rank, epoch, index]).decode().split()
        rep.same("draw %s" % ((seed, rank, epoch, index),), tuple(int(x) for x in line),
                 ptc_draw(seed, rank, epoch, index))


def torch_normalize(torch, x, mean, std):
    """torchvision.transforms.functional.normalize on a float tensor [3, H, W]."""
    import torchvision.transforms.functional as F
    return F.normalize(x, mean, std)


def check_normalize(torch, dump, rep):
    for mean, std in [(CIFAR_MEAN, CIFAR_STD), ((0.2190, 0.2190, 0.2190), (0.3318, 0.3318, 0.3318)),
                      ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)), ((0.0, 0.1, 1.0), (1.0, 3.0, 0.01))]:
        lines = dump.run(["--normalize"] + ["%.17g" % v for v in mean + std]).decode().split("\n")
        ours = [[int(h, 16) for h in line.split()] for line in lines[:3]]
        # ToTensor: the uint8 image as float32, divided by 255; then Normalize.
        x = torch.arange(256, dtype=torch.uint8).view(1, 1, 256).expand(3, 1, 256)
        y = torch_normalize(torch, x.to(torch.float32).div(255), mean, std)
        theirs = [list(y[c, 0].contiguous().view(torch.int32).tolist()) for c in range(3)]
        theirs = [[v & 0xFFFFFFFF for v in row] for row in theirs]
        rep.same("normalize mean=%s std=%s" % (mean, std), ours, theirs)


def check_augment(torch, dump, rep):
    import numpy as np
    import torchvision.transforms.functional as F
    from PIL import Image
    rng = np.random.default_rng(5)
    crops = [(0, 0), (8, 8), (0, 8), (8, 0), (4, 4), (1, 7), (3, 2), (6, 5)]
    for k in range(6):
        chw = rng.integers(0, 256, size=(3, 32, 32), dtype=np.uint8)
        if k == 0:
            chw[:] = 255  # the padding must stand out
        pil = Image.fromarray(np.ascontiguousarray(chw.transpose(1, 2, 0)), mode="RGB")
        for top, left in crops:
            for flip in (0, 1):
                out = dump.run(["--augment"] + ["%.17g" % v for v in CIFAR_MEAN + CIFAR_STD]
                               + [top, left, flip], stdin=chw.tobytes())
                ours = list(struct.unpack("<3072I", out))
                img = F.crop(F.pad(pil, 4, fill=0), top, left, 32, 32)
                if flip:
                    img = F.hflip(img)
                t = F.normalize(F.to_tensor(img), CIFAR_MEAN, CIFAR_STD)
                bits = t.contiguous().view(torch.int32).flatten().tolist()
                theirs = [v & 0xFFFFFFFF for v in bits]
                rep.same("augment image %d top=%d left=%d flip=%d" % (k, top, left, flip),
                         ours, theirs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sampler-dump", default=os.path.join(interop_common.BUILDDIR, "tests",
                                                           "interop", "sampler_dump"))
    args = ap.parse_args()
    torch = interop_common.require_torch()
    try:
        import numpy  # noqa: F401
        import torchvision.transforms.functional  # noqa: F401
        from PIL import Image  # noqa: F401
    except ImportError as e:
        print("FAIL: normalize, crop and flip are compared with torchvision's own ops on PIL images, "
              "and %s cannot import one of torchvision, PIL, numpy: %s" % (sys.executable, e))
        return 1
    if not os.access(args.sampler_dump, os.X_OK):
        print("ERROR: %s is not built (make check builds it)" % args.sampler_dump)
        return 99
    dump = Dump(args.sampler_dump)
    rep = Report()
    try:
        check_plain(torch, dump, rep)
        check_shuffle(torch, dump, rep)
        check_eval(dump, rep)
        check_draws(dump, rep)
        check_normalize(torch, dump, rep)
        check_augment(torch, dump, rep)
    except RuntimeError as e:
        print("ERROR: %s" % e)
        return 99
    print("check_sampler: torch %s: %d comparisons, %d differ" % (torch.__version__, rep.checks,
                                                                   rep.failures))
    return 1 if rep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
