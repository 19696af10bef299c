"""recipe_torch.py - the PyTorch peer of `ptc train` on Fashion-MNIST: the same model, loss,
optimizer, batch, data presentation, augmentation and evaluation, so that the two can be compared
on speed, accuracy and memory in the same run (tests/bench/train/run.sh).

    python3 recipe_torch.py [--epochs N] [--threads N] [--batch-size B] [--max-steps N]
                            [--data DIR] [--arch resnet18|resnet18-cifar] [--seed N]
                            [--max-samples N] [--eval-every N] [--precision f32|bf16] [--json]
    python3 recipe_torch.py --mode throughput [--steps N] [--infer-batches M] ...
    python3 recipe_torch.py --mode flops [--arch ...]

The recipe (ptc's, lib/train/train.c): torchvision.models.resnet18(num_classes=10) (with
--arch resnet18-cifar: conv1 3x3 stride 1 pad 1, maxpool = Identity), CrossEntropyLoss,
SGD(lr 0.01, momentum 0.9, weight_decay 5e-4), constant lr, batch 128 with a shorter last batch
(drop_last=False), the test split evaluated after every --eval-every-th epoch (default 2, as ptc;
0: only after the last one) and after the last epoch (or the step where --max-steps stops).

The data as ptc presents it (lib/data/data.h, idx.c, dataset.c, augment.c, loader.c):
  - the IDX files (plain, or .gz when the plain one is absent) of --data
    (/usr/share/datasets/fashion-mnist); each 28x28 image zero-padded by 2 pixels on every side
    to 32x32, its gray plane replicated to 3 channels;
  - Normalize's mean and std: the population statistics of the whole train split as presented
    (the padding included), computed from integer sums of v and v^2 then in double exactly as
    ptc__split_stats does, before --max-samples takes its prefix (ptc truncates after loading);
  - ToTensor + Normalize in float32 (v / 255, minus the float32 mean, divided by the float32
    std), through a 256-entry table, which is what ptc's normalizer holds;
  - training batches augmented: RandomCrop(32, padding=4) (zero padding, i.e. the table's entry
    for 0, top and left uniform in 0..8) then RandomHorizontalFlip (p = 0.5); evaluation batches
    plain, in split order;
  - each epoch's order: DistributedSampler(shuffle=True, seed) on one process, i.e.
    torch.randperm(n) from a generator seeded seed + epoch. ptc's own permutation and crop draws
    come from its SplitMix64 streams and cannot be reproduced here; the policy (a fixed seed,
    reshuffled every epoch) is the same.
--seed S seeds everything random: the model's initialisation (torch.manual_seed(S)), each
epoch's permutation (S + epoch) and the crop and flip draws ((S + 1) * 1000003 + epoch), as
ptc's --seed seeds its initialisation and streams. --max-samples N keeps the first N images of
each split, as ptc's does (with N >= 10000 the test split stays whole).
Batches are built with whole-tensor indexing in the main thread (no DataLoader, no PIL): a few
milliseconds against a step of hundreds, counted in the throughput as ptc's loader thread is.

--precision bf16 runs every forward (training, evaluation, throughput) and the loss under
torch.autocast("cpu", dtype=torch.bfloat16), the peer of `ptc train --precision bf16`: float32
master weights and optimizer, convolutions and linear in bf16, the loss in float32.

--json prints one JSON line at the end: train_images_per_sec (the images of the steps after the
first 10, over their training time; evaluation is not counted), eval_images_per_sec (the last
evaluation: batches made and run, forward + loss), test_accuracy, test_loss, epoch_seconds (the
training part of each epoch), steps, seed, train_samples and test_samples (the split sizes after
--max-samples), evals (epoch, test_accuracy, test_loss, images of every evaluation), peak_rss_mib
(resource.getrusage, this process).

--mode throughput times --steps training steps (after --warmup of them) and --infer-batches
eval-mode forwards (after 3) on fixed random data of --batch-size, with no data pipeline at all:
the model's compute only. --mode flops prints the multiply-add FLOPs (2 per MAC) of one image's
forward through the convolutions and the linear layer, counted with hooks on the real model, both
with every kernel tap (as bench_ops counts) and without the taps that fall on zero padding (on
32x32 inputs with the torchvision stem, layer4 runs 3x3 convolutions on 1x1 maps: 8 of 9 taps
are padding).
"""
import argparse
import gzip
import json
import os
import resource
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import torchvision

WARMUP_STEPS = 10  # as ptc (lib/train/train.c)
AUTOCAST = {"enabled": False}  # --precision bf16: torch.autocast over forwards and the loss


def autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST["enabled"])
SIDE, PAD, HW = 28, 2, 32


# ---- data ------------------------------------------------------------------------------------------

def read_idx(path):
    """The array of an IDX file, plain or gzip-compressed (ptc prefers the plain file)."""
    if not os.path.exists(path):
        path += ".gz"
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    magic = int.from_bytes(raw[0:4], "big")
    ndim = magic & 0xFF
    if magic >> 8 != 0x08 or ndim not in (1, 3):
        raise SystemExit(f"{path}: not an unsigned-byte IDX file (magic {magic:#010x})")
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise SystemExit(f"{path}: {data.size} bytes of data, the header says {dims}")
    return data.reshape(dims)


def load_split(folder, prefix):
    images = read_idx(os.path.join(folder, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(os.path.join(folder, f"{prefix}-labels-idx1-ubyte"))
    if images.shape[1:] != (SIDE, SIDE) or len(images) != len(labels):
        raise SystemExit(f"{folder}: {prefix} images {images.shape}, labels {labels.shape}")
    # 28x28 -> 32x32 with 2 zero pixels on every side. One gray plane is kept: the three
    # channels ptc presents are copies of it and get the same mean and std, so replicating the
    # plane when a batch is made gives the same tensors.
    padded = np.zeros((len(images), HW, HW), dtype=np.uint8)
    padded[:, PAD:PAD + SIDE, PAD:PAD + SIDE] = images
    return torch.from_numpy(padded), torch.from_numpy(labels.astype(np.int64))


def split_stats(images):
    """ptc__split_stats: population mean and std of every presented pixel scaled to [0, 1]."""
    v = images.numpy().reshape(-1)
    hist = np.bincount(v, minlength=256).astype(np.uint64)
    n = int(hist.sum())
    vals = np.arange(256, dtype=np.uint64)
    s1 = int((vals * hist).sum())
    s2 = int((vals * vals * hist).sum())
    m = float(s1) / (255.0 * float(n))
    var = float(s2) / (255.0 * 255.0 * float(n)) - m * m
    return m, (var ** 0.5 if var > 0 else 0.0)


def normalizer(mean, std):
    """lut[v] = (float32(v) / 255 - float32(mean)) / float32(std), in float32 step by step."""
    x = torch.arange(256, dtype=torch.float32) / torch.tensor(255.0, dtype=torch.float32)
    return (x - torch.tensor(mean, dtype=torch.float32)) / torch.tensor(std, dtype=torch.float32)


class Batches:
    """The batches of one pass over idx (a LongTensor of sample indices): [B, 3, 32, 32] float32
    normalized images and [B] int64 labels; augmented with draws from gen when gen is given."""

    def __init__(self, images, labels, lut, idx, batch, gen=None):
        self.images, self.labels, self.lut, self.idx = images, labels, lut, idx
        self.batch, self.gen = batch, gen
        self.ar = torch.arange(HW)

    def __len__(self):
        return (len(self.idx) + self.batch - 1) // self.batch

    def __iter__(self):
        for first in range(0, len(self.idx), self.batch):
            sel = self.idx[first:first + self.batch]
            planes = self.images[sel]  # [B, 32, 32] uint8
            if self.gen is not None:
                B = len(sel)
                # RandomCrop(32, padding=4): top, then left, each in 0..8, then the flip.
                top = torch.randint(0, 9, (B,), generator=self.gen)
                left = torch.randint(0, 9, (B,), generator=self.gen)
                flip = torch.rand(B, generator=self.gen) < 0.5
                padded = F.pad(planes, (4, 4, 4, 4))  # [B, 40, 40], zeros
                rows = top[:, None] + self.ar  # [B, 32]
                cols = left[:, None] + self.ar
                cols = torch.where(flip[:, None], cols.flip(1), cols)
                planes = padded[torch.arange(B)[:, None, None], rows[:, :, None], cols[:, None, :]]
            x = self.lut[planes.long()]  # [B, 32, 32] float32
            yield x.unsqueeze(1).expand(-1, 3, -1, -1).contiguous(), self.labels[sel]


# ---- model ------------------------------------------------------------------------------------------

def make_model(arch, seed):
    torch.manual_seed(seed)
    m = torchvision.models.resnet18(num_classes=10)
    if arch == "resnet18-cifar":
        m.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        torch.nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")
        m.maxpool = torch.nn.Identity()
    return m


def make_optimizer(m):
    return torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)


def train_step(m, opt, x, y):
    opt.zero_grad(set_to_none=True)
    with autocast():
        out = m(x)
        loss = F.cross_entropy(out, y)
    loss.backward()
    opt.step()
    return out, loss


def evaluate(m, images, labels, lut, batch):
    m.eval()
    right, total, seen = 0, 0.0, 0
    t0 = time.perf_counter()
    with torch.no_grad():
        for x, y in Batches(images, labels, lut, torch.arange(len(labels)), batch):
            with autocast():
                out = m(x)
                # the batch mean times its size, summed: ptc's test loss
                total += F.cross_entropy(out, y).item() * len(y)
            right += int((out.argmax(1) == y).sum())
            seen += len(y)
    dt = time.perf_counter() - t0
    m.train()
    return right / max(seen, 1), total / max(seen, 1), seen / dt if dt > 0 else 0.0, seen


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


# ---- modes --------------------------------------------------------------------------------------------

def run_recipe(a):
    tr_images, tr_labels = load_split(a.data, "train")
    te_images, te_labels = load_split(a.data, "t10k")
    mean, std = split_stats(tr_images)  # of the whole split, as ptc (it truncates afterwards)
    if a.max_samples > 0:
        tr_images, tr_labels = tr_images[:a.max_samples], tr_labels[:a.max_samples]
        te_images, te_labels = te_images[:a.max_samples], te_labels[:a.max_samples]
    lut = normalizer(mean, std)
    say = (lambda *s: print(*s, file=sys.stderr, flush=True)) if a.json else \
        (lambda *s: print(*s, flush=True))
    say(f"recipe_torch: {a.arch} on Fashion-MNIST ({a.data}), {len(tr_labels)} training and "
        f"{len(te_labels)} test images, PyTorch {torch.__version__}, {torch.get_num_threads()} "
        f"threads, batch {a.batch_size}, {a.epochs} epoch(s); mean {mean:.6f}, std {std:.6f}")

    m = make_model(a.arch, a.seed)
    opt = make_optimizer(m)
    m.train()
    step, images, warm_images, t_warm = 0, 0, 0, None
    train_after_warm = 0.0  # training seconds after the warm-up steps (evaluation excluded)
    epoch_seconds, evals, stop = [], [], False
    res = {"test_accuracy": -1.0, "test_loss": -1.0, "eval_images_per_sec": 0.0}
    for epoch in range(a.epochs):
        g = torch.Generator()
        g.manual_seed(a.seed + epoch)  # DistributedSampler's policy
        idx = torch.randperm(len(tr_labels), generator=g)
        aug = torch.Generator()
        aug.manual_seed((a.seed + 1) * 1_000_003 + epoch)  # the crop and flip draws
        t_epoch = time.perf_counter()
        t_mark = t_epoch
        loss_sum, right, seen = 0.0, 0, 0
        for x, y in Batches(tr_images, tr_labels, lut, idx, a.batch_size, aug):
            out, loss = train_step(m, opt, x, y)
            step += 1
            n = len(y)
            seen += n
            images += n
            loss_sum += loss.item() * n
            right += int((out.argmax(1) == y).sum())
            t = time.perf_counter()
            if step == WARMUP_STEPS:
                t_warm, warm_images = t, images
            elif step > WARMUP_STEPS:
                train_after_warm += t - max(t_mark, t_warm)
            t_mark = t
            if a.max_steps > 0 and step >= a.max_steps:
                stop = True
                break
        secs = time.perf_counter() - t_epoch
        epoch_seconds.append(secs)
        say(f"epoch {epoch + 1}/{a.epochs}: loss {loss_sum / max(seen, 1):.4f}, train accuracy "
            f"{100.0 * right / max(seen, 1):.2f}%, {seen / secs:.0f} images/s, {secs:.1f} s")
        last = epoch + 1 == a.epochs or stop
        if (a.eval_every > 0 and (epoch + 1) % a.eval_every == 0) or last:
            acc, tl, ips, count = evaluate(m, te_images, te_labels, lut, a.batch_size)
            res.update(test_accuracy=acc, test_loss=tl, eval_images_per_sec=ips)
            evals.append({"epoch": epoch + 1, "test_accuracy": acc, "test_loss": tl,
                          "images": count})
            say(f"epoch {epoch + 1}: test accuracy {100.0 * acc:.2f}% ({count} images), test loss "
                f"{tl:.4f}, {ips:.0f} images/s")
        if stop:
            break
    tips = (images - warm_images) / train_after_warm if t_warm and train_after_warm > 0 else 0.0
    say(f"training: {step} steps, {tips:.1f} images/s after warm-up")
    if a.json:
        res.update(mode="recipe", arch=a.arch, threads=torch.get_num_threads(),
                   batch_size=a.batch_size, epochs=len(epoch_seconds), steps=step, seed=a.seed,
                   train_samples=len(tr_labels), test_samples=len(te_labels),
                   train_images_per_sec=tips, epoch_seconds=epoch_seconds, evals=evals,
                   mean=mean, std=std, peak_rss_mib=peak_rss_mib(), torch=torch.__version__)
        print(json.dumps(res))


def run_throughput(a):
    m = make_model(a.arch, a.seed)
    opt = make_optimizer(m)
    g = torch.Generator()
    g.manual_seed(a.seed)
    x = torch.randn(a.batch_size, 3, HW, HW, generator=g)
    y = torch.randint(0, 10, (a.batch_size,), generator=g)
    m.train()
    for _ in range(a.warmup):
        train_step(m, opt, x, y)
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        train_step(m, opt, x, y)
        times.append(time.perf_counter() - t0)
    m.eval()
    itimes = []
    with torch.no_grad():
        for i in range(3 + a.infer_batches):
            t0 = time.perf_counter()
            with autocast():
                m(x)
            if i >= 3:
                itimes.append(time.perf_counter() - t0)
    res = {"mode": "throughput", "arch": a.arch, "threads": torch.get_num_threads(),
           "batch_size": a.batch_size, "steps": a.steps, "infer_batches": a.infer_batches,
           "train_images_per_sec": a.batch_size * len(times) / sum(times),
           "eval_images_per_sec": a.batch_size * len(itimes) / sum(itimes),
           "step_ms_median": 1e3 * statistics.median(times),
           "infer_ms_median": 1e3 * statistics.median(itimes),
           "peak_rss_mib": peak_rss_mib(), "torch": torch.__version__}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"PyTorch {torch.__version__}, {a.arch}, batch {a.batch_size}, "
              f"{res['threads']} threads, fixed random data:")
        print(f"training: {a.steps} steps after {a.warmup}: {res['train_images_per_sec']:.1f} "
              f"images/s (median step {res['step_ms_median']:.1f} ms)")
        print(f"inference: {a.infer_batches} batches after 3: {res['eval_images_per_sec']:.1f} "
              f"images/s (median batch {res['infer_ms_median']:.1f} ms)")


def run_flops(a):
    m = make_model(a.arch, a.seed)
    m.eval()
    total = [0, 0]  # every tap; only the taps that fall inside the input (not on padding)

    def conv_hook(mod, inp, out):
        k = mod.kernel_size[0] * mod.kernel_size[1] * mod.in_channels // mod.groups
        total[0] += 2 * k * out.numel()
        # (output position, tap) pairs that read a real input pixel: a ones kernel over a ones
        # image with the same geometry counts them
        ones = torch.ones(1, 1, *inp[0].shape[2:])
        valid = F.conv2d(ones, torch.ones(1, 1, *mod.kernel_size), None, mod.stride, mod.padding,
                         mod.dilation).sum().item()
        total[1] += int(2 * mod.out_channels * (mod.in_channels // mod.groups) * valid)

    def linear_hook(mod, inp, out):
        total[0] += 2 * mod.in_features * out.numel()
        total[1] += 2 * mod.in_features * out.numel()

    for mod in m.modules():
        if isinstance(mod, torch.nn.Conv2d):
            mod.register_forward_hook(conv_hook)
        elif isinstance(mod, torch.nn.Linear):
            mod.register_forward_hook(linear_hook)
    with torch.no_grad():
        m(torch.zeros(1, 3, HW, HW))
    res = {"mode": "flops", "arch": a.arch, "forward_flops_per_image": total[0],
           "train_flops_per_image": 3 * total[0], "forward_flops_nopad_per_image": total[1],
           "train_flops_nopad_per_image": 3 * total[1]}
    print(json.dumps(res) if a.json else
          f"{a.arch} on 3x32x32: {total[0] / 1e6:.2f} MFLOP forward per image (convolutions and "
          f"linear, 2 per multiply-add), {3 * total[0] / 1e6:.2f} MFLOP per training image (3x); "
          f"without the taps on padding {total[1] / 1e6:.2f} and {3 * total[1] / 1e6:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["recipe", "throughput", "flops"], default="recipe")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: no limit)")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--arch", choices=["resnet18", "resnet18-cifar"], default="resnet18")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-samples", type=int, default=0, help="a prefix of each split")
    ap.add_argument("--eval-every", type=int, default=2, help="0: only after the last epoch")
    ap.add_argument("--json", action="store_true", help="one JSON line at the end (logs to stderr)")
    ap.add_argument("--precision", choices=["f32", "bf16"], default="f32",
                    help="bf16: torch.autocast('cpu', dtype=torch.bfloat16)")
    ap.add_argument("--steps", type=int, default=50, help="throughput: timed training steps")
    ap.add_argument("--warmup", type=int, default=WARMUP_STEPS, help="throughput: untimed steps")
    ap.add_argument("--infer-batches", type=int, default=20, help="throughput: timed forwards")
    a = ap.parse_args()
    if a.epochs < 1 or a.batch_size < 1 or a.threads < 1 or a.eval_every < 0:
        ap.error("epochs, batch size and threads must be at least 1, eval-every at least 0")
    torch.set_num_threads(a.threads)
    AUTOCAST["enabled"] = a.precision == "bf16"
    {"recipe": run_recipe, "throughput": run_throughput, "flops": run_flops}[a.mode](a)


if __name__ == "__main__":
    main()
