"""bench_ops_torch.py - the PyTorch peer of bench_ops: the same ResNet-18 convolutions, batchnorms
and whole-network steps, timed the same way (median of repeated calls), on the same threads.

    python3 bench_ops_torch.py [--threads N] [--batch N] [--stem tv|cifar] [--min-ms T]
                               [--stat median|min]

Per convolution: forward (F.conv2d) and the two backward halves (aten.convolution_backward with
the output mask of one gradient each), on contiguous NCHW float32 tensors as a torchvision model
holds them. Then a whole training step of torchvision.models.resnet18 (forward, cross-entropy,
backward, SGD lr 0.01 momentum 0.9 weight decay 5e-4) and an eval-mode forward, which is what the
project's throughput targets compare against. Prints the same key=value summary as bench_ops.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

TV = [
    ("conv1 7x7/2", 3, 32, 64, 7, 2, 3, 1),
    ("layer1 3x3", 64, 8, 64, 3, 1, 1, 4),
    ("layer2.0 3x3/2", 64, 8, 128, 3, 2, 1, 1),
    ("layer2 3x3", 128, 4, 128, 3, 1, 1, 3),
    ("layer2.0 down 1x1/2", 64, 8, 128, 1, 2, 0, 1),
    ("layer3.0 3x3/2", 128, 4, 256, 3, 2, 1, 1),
    ("layer3 3x3", 256, 2, 256, 3, 1, 1, 3),
    ("layer3.0 down 1x1/2", 128, 4, 256, 1, 2, 0, 1),
    ("layer4.0 3x3/2", 256, 2, 512, 3, 2, 1, 1),
    ("layer4 3x3", 512, 1, 512, 3, 1, 1, 3),
    ("layer4.0 down 1x1/2", 256, 2, 512, 1, 2, 0, 1),
]
CIFAR = [
    ("conv1 3x3", 3, 32, 64, 3, 1, 1, 1),
    ("layer1 3x3", 64, 32, 64, 3, 1, 1, 4),
    ("layer2.0 3x3/2", 64, 32, 128, 3, 2, 1, 1),
    ("layer2 3x3", 128, 16, 128, 3, 1, 1, 3),
    ("layer2.0 down 1x1/2", 64, 32, 128, 1, 2, 0, 1),
    ("layer3.0 3x3/2", 128, 16, 256, 3, 2, 1, 1),
    ("layer3 3x3", 256, 8, 256, 3, 1, 1, 3),
    ("layer3.0 down 1x1/2", 128, 16, 256, 1, 2, 0, 1),
    ("layer4.0 3x3/2", 256, 8, 512, 3, 2, 1, 1),
    ("layer4 3x3", 512, 4, 512, 3, 1, 1, 3),
    ("layer4.0 down 1x1/2", 256, 8, 512, 1, 2, 0, 1),
]


USE_MIN = False


def timed(fn, min_ms):
    fn()
    fn()
    ts = []
    start = time.perf_counter()
    while len(ts) < 5 or (time.perf_counter() - start) * 1e3 < min_ms:
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return min(ts) if USE_MIN else statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--stem", choices=["tv", "cifar"], default="tv")
    ap.add_argument("--min-ms", type=float, default=300)
    ap.add_argument("--stat", choices=["median", "min"], default="median")
    a = ap.parse_args()
    global USE_MIN
    USE_MIN = a.stat == "min"
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    N = a.batch
    layers = CIFAR if a.stem == "cifar" else TV
    print(f"PyTorch {torch.__version__} ({a.stem} stem), batch {N}, {torch.get_num_threads()} threads")
    print(f"{'conv layer':20s} {'x':>3s} | {'fwd ms':>8s} | {'bwd_d ms':>8s} | {'bwd_w ms':>8s}")
    step_conv = infer_conv = 0.0
    for i, (name, c, hw, k, r, st, pad, count) in enumerate(layers):
        x = torch.randn(N, c, hw, hw)
        w = torch.randn(k, c, r, r) * 0.05
        y = F.conv2d(x, w, None, st, pad)
        dy = torch.randn_like(y)
        fwd = timed(lambda: F.conv2d(x, w, None, st, pad), a.min_ms)

        def bwd(mask):
            return lambda: torch.ops.aten.convolution_backward(
                dy, x, w, None, [st, st], [pad, pad], [1, 1], False, [0, 0], 1, mask)

        bd = timed(bwd([True, False, False]), a.min_ms)
        bw = timed(bwd([False, True, False]), a.min_ms)
        print(f"{name:20s} {count:3d} | {fwd:8.3f} | {bd:8.3f} | {bw:8.3f}")
        infer_conv += count * fwd
        step_conv += count * (fwd + bw + (0 if i == 0 else bd))
    print(f"convolutions of one step: {step_conv:.1f} ms; inference: {infer_conv:.1f} ms")

    import torchvision
    m = torchvision.models.resnet18(num_classes=10)
    if a.stem == "cifar":
        m.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        m.maxpool = torch.nn.Identity()
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    xb = torch.randn(N, 3, 32, 32)
    yb = torch.randint(0, 10, (N,))

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(m(xb), yb).backward()
        opt.step()

    m.train()
    t_step = timed(step, max(a.min_ms, 2000))
    m.eval()
    with torch.no_grad():
        t_inf = timed(lambda: m(xb), max(a.min_ms, 1000))
    print(f"whole step {t_step:.1f} ms -> {N / t_step * 1e3:.0f} img/s; "
          f"eval forward {t_inf:.1f} ms -> {N / t_inf * 1e3:.0f} img/s")
    print(f"step_conv_ms={step_conv:.2f} train_img_s={N / t_step * 1e3:.0f} "
          f"infer_img_s={N / t_inf * 1e3:.0f}")


if __name__ == "__main__":
    main()
