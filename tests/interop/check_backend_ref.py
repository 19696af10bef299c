#!/usr/bin/env python3
"""Compare ptc's reference backend (lib/backend/ref.c) with torch, layer by layer, forward and backward.

tests/interop/backend_dump (built from backend_dump.c) runs one layer of a ptc backend on inputs
this script writes to a temporary folder; the same layer runs in torch (autograd for the
gradients, torch.optim.SGD for the update), and the results are compared:

  conv2d            y, dx, dw                      (kernels 1/3/7, 3x2; strides 1/2; padding 0/1/3)
  batch_norm train  y, save_mean, save_invstd, running_mean, running_var (unbiased, momentum),
                    dx, dgamma, dbeta, with and without a following relu; then eval with the
                    updated running statistics
  max_pool2d        y, dx                          (3x3 s2 p1 and 2x2 s2; inputs full of ties)
  adaptive_avg_pool2d to 1x1                       y, dx
  linear            y, dx, dw, db
  add (+ relu)      y, dx
  SGD               p and the momentum buffer after several steps (momentum, dampening, nesterov,
                    weight decay)

in float32 and float64. Reductions (conv, batchnorm, linear, average pool) must agree within a
relative error (max |ptc - torch| / max |torch| over the tensor) of 1e-5 in float32 and 1e-12
in float64: ptc accumulates in double, torch in the element type, so the difference is torch's
rounding. Elementwise results and routing (max pool's output and gradient, add, relu, avgpool's
gradient, every SGD step) must be bit-identical: ptc computes them in the element type in torch's
order, including torch's fused multiply-add in `add(x, alpha=a)`.

Exit status: 0 all agree, 1 a difference, 77 skipped (torch is not importable), 99 cannot run
(backend_dump missing or failing). Takes a few seconds.

Usage: check_backend_ref.py [--backend-dump PATH] [--backend NAME] [--dtypes f32,f64] [-v]
       (default $top_builddir/tests/interop/backend_dump, backend ref, both element types)

The bit-identical SGD results assume torch's CPU kernels use fused multiply-add, as they do on
x86-64 with AVX2 or AVX-512 and on ARM (torch.backends.cpu.get_cpu_capability() says which).
"""

import argparse
import os
import subprocess
import sys
import tempfile

TOL = {"f32": 1e-5, "f64": 1e-12}


class Dump:
    """Runs backend_dump on named input tensors and reads back named outputs."""

    def __init__(self, exe, backend, folder):
        self.exe, self.backend, self.folder = exe, backend, folder

    def run(self, dt, op, args, inputs, outputs):
        import numpy as np
        import torch

        for name, t in inputs.items():
            t.detach().contiguous().numpy().tofile(os.path.join(self.folder, name))
        cmd = [self.exe, "--backend", self.backend, dt, self.folder, op] + [str(a) for a in args]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if p.returncode != 0:
            raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), p.returncode,
                                                    p.stderr.decode(errors="replace")[:500]))
        npdt = np.float32 if dt == "f32" else np.float64
        out = {}
        for name, shape in outputs.items():
            a = np.fromfile(os.path.join(self.folder, name), dtype=npdt)
            out[name] = torch.from_numpy(a).reshape(shape)
        return out


class Report:
    def __init__(self, verbose):
        self.checks = self.failures = 0
        self.worst = {}  # (dtype, layer) -> worst relative error
        self.verbose = verbose

    def compare(self, dt, layer, what, ours, ref, exact):
        import torch

        self.checks += 1
        ours, ref = ours.reshape(-1).double(), ref.detach().reshape(-1).double()
        label = "%s %s %s" % (dt, layer, what)
        if exact:
            same = (ours == ref) | (torch.isnan(ours) & torch.isnan(ref))
            # -0.0 and +0.0 compare equal above; bit-identical means the signs agree too
            same &= torch.signbit(ours) == torch.signbit(ref)
            nbad = int((~same).sum())
            if nbad:
                self.failures += 1
                i = int((~same).nonzero()[0])
                print("FAIL %s: %d of %d values differ, first at %d: ptc %r, torch %r"
                      % (label, nbad, ours.numel(), i, float(ours[i]), float(ref[i])))
            elif self.verbose:
                print("ok   %s: bit-identical (%d values)" % (label, ours.numel()))
            key = (dt, layer.split(" ")[0] + " (exact)")
            self.worst[key] = max(self.worst.get(key, 0.0), float(nbad))
            return
        scale = float(ref.abs().max()) or 1.0
        rel = float((ours - ref).abs().max()) / scale
        key = (dt, layer.split(" ")[0])
        self.worst[key] = max(self.worst.get(key, 0.0), rel)
        if not rel <= TOL[dt]:
            self.failures += 1
            i = int((ours - ref).abs().argmax())
            print("FAIL %s: relative error %.3g > %.0e (at %d: ptc %r, torch %r)"
                  % (label, rel, TOL[dt], i, float(ours[i]), float(ref[i])))
        elif self.verbose:
            print("ok   %s: relative error %.2e" % (label, rel))


# ---- the layers --------------------------------------------------------------------------------

def conv_out(h, r, stride, pad):
    return (h + 2 * pad - r) // stride + 1


def check_conv(torch, F, dump, rep, dt, tdt, gen, n, c, h, w, k, r, s, stride, pad):
    layer = "conv [%d][%d][%d][%d] k%d %dx%d s%d p%d" % (n, c, h, w, k, r, s, stride, pad)
    oh, ow = conv_out(h, r, stride, pad), conv_out(w, s, stride, pad)
    x = torch.randn(n, c, h, w, generator=gen, dtype=tdt)
    wt = torch.randn(k, c, r, s, generator=gen, dtype=tdt) / (c * r * s) ** 0.5
    dy = torch.randn(n, k, oh, ow, generator=gen, dtype=tdt)
    out = dump.run(dt, "conv", [n, c, h, w, k, r, s, stride, pad], {"x": x, "w": wt, "dy": dy},
                   {"y": (n, k, oh, ow), "dx": (n, c, h, w), "dw": (k, c, r, s)})
    xr, wr = x.clone().requires_grad_(), wt.clone().requires_grad_()
    y = F.conv2d(xr, wr, None, stride, pad)
    y.backward(dy)
    rep.compare(dt, layer, "y", out["y"], y, False)
    rep.compare(dt, layer, "dx", out["dx"], xr.grad, False)
    rep.compare(dt, layer, "dw", out["dw"], wr.grad, False)


def check_bn(torch, F, dump, rep, dt, tdt, gen, n, c, h, w, relu):
    layer = "bn [%d][%d][%d][%d]%s" % (n, c, h, w, " + relu" if relu else "")
    eps, momentum = 1e-5, 0.1
    scale = torch.rand(1, c, 1, 1, generator=gen, dtype=tdt) * 3 + 0.1
    shift = torch.randn(1, c, 1, 1, generator=gen, dtype=tdt) * 2
    x = (torch.randn(n, c, h, w, generator=gen, dtype=tdt) * scale + shift).contiguous()
    gamma = torch.randn(c, generator=gen, dtype=tdt)
    beta = torch.randn(c, generator=gen, dtype=tdt)
    rmean = torch.randn(c, generator=gen, dtype=tdt)
    rvar = torch.rand(c, generator=gen, dtype=tdt) + 0.5
    dy = torch.randn(n, c, h, w, generator=gen, dtype=tdt)
    vec = (c,)
    out = dump.run(dt, "bn", [n, c, h, w, repr(eps), repr(momentum), int(relu)],
                   {"x": x, "gamma": gamma, "beta": beta, "rmean": rmean, "rvar": rvar, "dy": dy},
                   {"y": x.shape, "save_mean": vec, "save_invstd": vec, "rmean_out": vec,
                    "rvar_out": vec, "dx": x.shape, "dgamma": vec, "dbeta": vec,
                    "y_eval": x.shape})
    xr, gr, br = (t.clone().requires_grad_() for t in (x, gamma, beta))
    rm, rv = rmean.clone(), rvar.clone()
    y = F.batch_norm(xr, rm, rv, gr, br, training=True, momentum=momentum, eps=eps)
    if relu:
        y = F.relu(y)
    y.backward(dy)
    _, save_mean, save_invstd = torch.native_batch_norm(x, gamma, beta, rmean.clone(),
                                                        rvar.clone(), True, momentum, eps)
    y_eval = F.batch_norm(x, rm, rv, gamma, beta, training=False, eps=eps)
    if relu:
        y_eval = F.relu(y_eval)
    rep.compare(dt, layer, "y", out["y"], y, False)
    rep.compare(dt, layer, "save_mean", out["save_mean"], save_mean, False)
    rep.compare(dt, layer, "save_invstd", out["save_invstd"], save_invstd, False)
    rep.compare(dt, layer, "running_mean", out["rmean_out"], rm, False)
    rep.compare(dt, layer, "running_var", out["rvar_out"], rv, False)
    rep.compare(dt, layer, "dx", out["dx"], xr.grad, False)
    rep.compare(dt, layer, "dgamma", out["dgamma"], gr.grad, False)
    rep.compare(dt, layer, "dbeta", out["dbeta"], br.grad, False)
    rep.compare(dt, layer, "y (eval)", out["y_eval"], y_eval, False)


def check_maxpool(torch, F, dump, rep, dt, tdt, gen, n, c, h, w, r, stride, pad, ties):
    layer = "maxpool [%d][%d][%d][%d] %dx%d s%d p%d%s" % (n, c, h, w, r, r, stride, pad,
                                                         " ties" if ties else "")
    oh, ow = conv_out(h, r, stride, pad), conv_out(w, r, stride, pad)
    if ties:  # few distinct values, many of them negative: ties everywhere, padding never wins
        x = torch.randint(-3, 1, (n, c, h, w), generator=gen).to(tdt)
    else:
        x = torch.randn(n, c, h, w, generator=gen, dtype=tdt)
    dy = torch.randn(n, c, oh, ow, generator=gen, dtype=tdt)
    out = dump.run(dt, "maxpool", [n, c, h, w, r, stride, pad], {"x": x, "dy": dy},
                   {"y": (n, c, oh, ow), "dx": (n, c, h, w)})
    xr = x.clone().requires_grad_()
    y = F.max_pool2d(xr, r, stride, pad)
    y.backward(dy)
    rep.compare(dt, layer, "y", out["y"], y, True)
    rep.compare(dt, layer, "dx", out["dx"], xr.grad, True)


def check_avgpool(torch, F, dump, rep, dt, tdt, gen, n, c, h, w):
    layer = "avgpool [%d][%d][%d][%d]" % (n, c, h, w)
    x = torch.randn(n, c, h, w, generator=gen, dtype=tdt)
    dy = torch.randn(n, c, generator=gen, dtype=tdt)
    out = dump.run(dt, "avgpool", [n, c, h, w], {"x": x, "dy": dy},
                   {"y": (n, c), "dx": (n, c, h, w)})
    xr = x.clone().requires_grad_()
    y = F.adaptive_avg_pool2d(xr, 1)
    y.backward(dy.reshape(n, c, 1, 1))
    rep.compare(dt, layer, "y", out["y"], y, False)
    rep.compare(dt, layer, "dx", out["dx"], xr.grad, True)


def check_linear(torch, F, dump, rep, dt, tdt, gen, n, k, m):
    layer = "linear [%d][%d] -> %d" % (n, k, m)
    x = torch.randn(n, k, generator=gen, dtype=tdt)
    w = torch.randn(m, k, generator=gen, dtype=tdt) / k ** 0.5
    b = torch.randn(m, generator=gen, dtype=tdt)
    dy = torch.randn(n, m, generator=gen, dtype=tdt)
    out = dump.run(dt, "linear", [n, k, m], {"x": x, "w": w, "b": b, "dy": dy},
                   {"y": (n, m), "dx": (n, k), "dw": (m, k), "db": (m,)})
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    y = F.linear(xr, wr, br)
    y.backward(dy)
    rep.compare(dt, layer, "y", out["y"], y, False)
    rep.compare(dt, layer, "dx", out["dx"], xr.grad, False)
    rep.compare(dt, layer, "dw", out["dw"], wr.grad, False)
    rep.compare(dt, layer, "db", out["db"], br.grad, False)


def check_add(torch, F, dump, rep, dt, tdt, gen, n, relu):
    layer = "add%s [%d]" % (" + relu" if relu else "", n)
    a = torch.randn(n, generator=gen, dtype=tdt)
    b = torch.randn(n, generator=gen, dtype=tdt)
    b[: n // 8] = -a[: n // 8]  # exact cancellations: +0, where relu's gradient stops
    dy = torch.randn(n, generator=gen, dtype=tdt)
    outs = {"y": (n,), "dx": (n,)} if relu else {"y": (n,)}
    out = dump.run(dt, "add", [n, int(relu)], {"a": a, "b": b, "dy": dy}, outs)
    ar = a.clone().requires_grad_()
    y = ar + b  # torchvision's BasicBlock: out += identity; out = relu(out)
    if relu:
        y = F.relu(y)
        y.backward(dy)
    rep.compare(dt, layer, "y", out["y"], y, True)
    if relu:
        rep.compare(dt, layer, "dx", out["dx"], ar.grad, True)


def check_sgd(torch, F, dump, rep, dt, tdt, gen, n, steps, lr, momentum, dampening, wd, nesterov):
    layer = "sgd lr=%g momentum=%g dampening=%g wd=%g%s" % (lr, momentum, dampening, wd,
                                                           " nesterov" if nesterov else "")
    p0 = torch.randn(n, generator=gen, dtype=tdt)
    g = torch.randn(steps, n, generator=gen, dtype=tdt)
    outs = {"p_out": (n,)}
    if momentum != 0:
        outs["buf_out"] = (n,)
    out = dump.run(dt, "sgd", [n, steps, repr(lr), repr(momentum), repr(dampening), repr(wd),
                               int(nesterov)], {"p": p0, "g": g}, outs)
    p = torch.nn.Parameter(p0.clone())
    opt = torch.optim.SGD([p], lr=lr, momentum=momentum, dampening=dampening, weight_decay=wd,
                          nesterov=nesterov)
    for s in range(steps):
        p.grad = g[s].clone()
        opt.step()
    rep.compare(dt, layer, "p", out["p_out"], p, True)
    if momentum != 0:
        rep.compare(dt, layer, "momentum_buffer", out["buf_out"], opt.state[p]["momentum_buffer"],
                    True)


def run_all(torch, dump, rep, dtypes):
    import torch.nn.functional as F

    for dt, tdt in (("f32", torch.float32), ("f64", torch.float64)):
        if dt not in dtypes:
            continue
        gen = torch.Generator().manual_seed(20240611)
        a = (torch, F, dump, rep, dt, tdt, gen)
        # ResNet-18's convolutions at CIFAR size (batch 4), then odd shapes
        check_conv(*a, 4, 3, 32, 32, 16, 7, 7, 2, 3)
        check_conv(*a, 4, 16, 8, 8, 16, 3, 3, 1, 1)
        check_conv(*a, 4, 16, 8, 8, 32, 3, 3, 2, 1)
        check_conv(*a, 4, 16, 8, 8, 32, 1, 1, 2, 0)
        check_conv(*a, 3, 64, 2, 2, 64, 3, 3, 1, 1)
        check_conv(*a, 2, 5, 9, 7, 6, 3, 3, 2, 1)
        check_conv(*a, 2, 3, 6, 9, 4, 3, 2, 1, 1)
        check_conv(*a, 2, 4, 7, 5, 3, 3, 3, 1, 0)
        check_conv(*a, 5, 4, 10, 10, 6, 3, 3, 1, 1)  # blocks of 3 images, the last one partial
        for relu in (False, True):
            check_bn(*a, 8, 16, 8, 8, relu)
            check_bn(*a, 4, 6, 5, 3, relu)
            check_bn(*a, 16, 32, 1, 1, relu)
        for ties in (False, True):
            check_maxpool(*a, 4, 8, 16, 16, 3, 2, 1, ties)
            check_maxpool(*a, 2, 3, 7, 9, 3, 2, 1, ties)
            check_maxpool(*a, 2, 3, 6, 7, 2, 2, 0, ties)
        check_avgpool(*a, 8, 32, 4, 4)
        check_avgpool(*a, 3, 5, 7, 7)
        check_avgpool(*a, 16, 64, 1, 1)
        check_linear(*a, 16, 512, 10)
        check_linear(*a, 5, 7, 3)
        check_add(*a, 1000, False)
        check_add(*a, 1000, True)
        for hp in ((0.1, 0, 0, 0, False), (0.1, 0.9, 0, 5e-4, False), (0.05, 0.9, 0, 5e-4, True),
                   (0.01, 0.5, 0.3, 1e-3, False), (0.2, 0.9, 0.1, 0, False),
                   (0.1, 0, 0, 1e-2, False)):
            check_sgd(*a, 1037, 6, *hp)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    top_build = os.environ.get("top_builddir") or os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend-dump",
                    default=os.path.join(top_build, "tests", "interop", "backend_dump"))
    ap.add_argument("--backend", default="ref")
    ap.add_argument("--dtypes", default="f32,f64", help="element types to run (comma-separated)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    try:
        import numpy  # noqa: F401
        import torch
    except ImportError as e:
        print("SKIP: torch (and numpy) are needed to compare with torch: %s" % e)
        return 77
    if not os.access(args.backend_dump, os.X_OK):
        print("ERROR: %s is not built (make check builds it)" % args.backend_dump)
        return 99
    rep = Report(args.verbose)
    with tempfile.TemporaryDirectory(prefix="ptc-backend-") as folder:
        try:
            run_all(torch, Dump(args.backend_dump, args.backend, folder), rep,
                    args.dtypes.split(","))
        except RuntimeError as e:
            print("ERROR: %s" % e)
            return 99
    for (dt, layer), v in sorted(rep.worst.items()):
        if layer.endswith("(exact)"):
            print("  %s %-22s %s" % (dt, layer, "bit-identical" if v == 0 else "DIFFERS"))
        else:
            print("  %s %-22s worst relative error %.2e" % (dt, layer, v))
    print("check_backend_ref: backend %s against torch %s: %d comparisons, %d differ"
          % (args.backend, torch.__version__, rep.checks, rep.failures))
    return 1 if rep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
