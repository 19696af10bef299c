#!/usr/bin/env python3
"""The PyTorch peer of bench_infer (tests/bench/infer/run.sh): one-image inference latency of
torchvision's resnet18 in eager mode, eval(), under torch.no_grad(), torch.set_num_threads(1).

    bench_infer_torch.py make    DIR            writes DIR/weights.pth and DIR/image.rgb
    bench_infer_torch.py classify WEIGHTS IMAGE [CALLS [WARMUP]]
    bench_infer_torch.py forward  WEIGHTS IMAGE [CALLS [WARMUP]]

make: resnet18(num_classes=10) initialised from torch.manual_seed(0), its BatchNorm running
statistics made non-trivial (so that eval-mode batchnorm is not the identity), saved with
torch.save(state_dict); and one 32x32 RGB image of random bytes ([32][32][3] uint8, 3072 bytes).

classify: what ptc_model_classify does, the way a torch user writes it: the uint8 HWC image as a
tensor -> ToTensor (CHW, / 255) -> Normalize (the CIFAR-10 tutorial's mean and std, ptc's
default) -> the model on a batch of one -> softmax -> topk(1). forward: the model alone on the
image normalised once beforehand. WARMUP calls (default 50) untimed, then CALLS (default 1000)
timed one by one with time.perf_counter_ns; one line of key=value pairs as bench_infer prints:
median, p99 (nearest rank) and min in microseconds, the top-1 class and its probability.
"""

import os
import sys
import time

import torch
import torchvision

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2023, 0.1994, 0.2010)
SIDE = 32


def make(out):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 2.0)
    torch.save(model.state_dict(), os.path.join(out, "weights.pth"))
    g = torch.Generator().manual_seed(1)
    img = torch.randint(0, 256, (SIDE, SIDE, 3), dtype=torch.uint8, generator=g)
    with open(os.path.join(out, "image.rgb"), "wb") as f:
        f.write(img.numpy().tobytes())


def bench(mode, weights, image, calls, warmup):
    torch.set_num_threads(1)
    model = torchvision.models.resnet18(num_classes=10)
    model.load_state_dict(torch.load(weights, weights_only=True))
    model.eval()
    with open(image, "rb") as f:
        raw = f.read()
    if len(raw) != SIDE * SIDE * 3:
        sys.exit("bench_infer_torch: %s: expected %d bytes" % (image, SIDE * SIDE * 3))
    img = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(SIDE, SIDE, 3)
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    x = ((img.permute(2, 0, 1).float() / 255 - mean) / std).unsqueeze(0)

    def classify():
        t = img.permute(2, 0, 1).float().div(255)  # ToTensor
        t = t.sub(mean).div(std)  # Normalize
        p = torch.softmax(model(t.unsqueeze(0)), dim=1)
        return p.topk(1, dim=1)

    def forward():
        return model(x)

    fn = classify if mode == "classify" else forward
    times = []
    with torch.no_grad():
        for i in range(warmup + calls):
            t0 = time.perf_counter_ns()
            r = fn()
            t1 = time.perf_counter_ns()
            if i >= warmup:
                times.append((t1 - t0) / 1e3)
    times.sort()
    n = len(times)
    median = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
    p99 = times[(n * 99 + 99) // 100 - 1]
    if mode == "classify":
        cls, prob = int(r[1][0, 0]), float(r[0][0, 0])
    else:
        cls, prob = int(r[0].argmax()), 0.0
    print("mode=%s backend=torch calls=%d median_us=%.2f p99_us=%.2f min_us=%.2f max_us=%.2f "
          "class=%d prob=%.6f threads=%d" % (mode, n, median, p99, times[0], times[-1], cls, prob,
                                              torch.get_num_threads()))


def main():
    a = sys.argv[1:]
    if len(a) == 2 and a[0] == "make":
        make(a[1])
    elif len(a) in (3, 4, 5) and a[0] in ("classify", "forward"):
        calls = int(a[3]) if len(a) > 3 else 1000
        warmup = int(a[4]) if len(a) > 4 else 50
        bench(a[0], a[1], a[2], calls, warmup)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
