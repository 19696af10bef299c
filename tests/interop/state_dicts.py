"""state_dicts.py - ptc-written state dicts and training checkpoints work in PyTorch.

1. `ptc convert testdata/torch/v2.6/resnet18.pth OUT.pth`: torchvision's
   resnet18(num_classes=10).load_state_dict(torch.load(OUT, weights_only=True), strict=True)
   succeeds and the model then holds exactly the tensors of the original file.
2. `ptc convert --strip-prefix module. resnet18_ddp.pth OUT.pth`: loads the same way with
   strict=True, and equals what torch's own consume_prefix_in_state_dict_if_present makes of the
   DDP file (keys, order, tensors and _metadata).
3. Resuming training: testdata/torch/v2.6/train_ckpt.pt (small CNN + SGD(lr=0.01, momentum=0.9,
   weight_decay=5e-4) after 2 steps), and a fresh checkpoint of the same kind made here by torch,
   are converted by ptc. Model and optimizer are restored from the ptc-written file and from the
   torch-written one (the optimizer is constructed with other hyper-parameters, so that they have
   to come from the file), one more step is taken on a fixed batch, and the two results must be
   bit-identical: parameters, buffers, momentum buffers and loss. The fresh case is also compared
   with the same step taken by the objects that never left memory.

Without `ptc convert` (not built yet) cases 1 and 3 use save_tool copy and case 2 fails.
Exit status: 0 all passed, 1 a failure, 77 torch or torchvision missing.
"""

import os
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
# As make check lays it out in the build tree, with the resnet18 files unpacked (testdata/torch/unpack.sh).
V26 = os.path.join(ic.BUILDDIR, "testdata", "torch", "v2.6")

failures = []


def result(name, problems, detail=""):
    if problems:
        failures.append(name)
        print("FAIL %s" % name)
        for p in problems[:30]:
            print("       " + p)
    else:
        print("ok   %s%s" % (name, ("  (" + detail + ")") if detail else ""))


def ptc_write(w, src, dst, *opts):
    """ptc convert, or save_tool copy while convert does not exist (no options then)."""
    if w.has_convert():
        w.convert(src, dst, *opts)
        return "ptc convert" + ("".join(" " + o for o in opts))
    if opts:
        raise ic.WriterError("`ptc convert %s` is needed and not available" % " ".join(opts))
    w.copy(src, dst)
    return "save_tool copy"


def load_resnet(path):
    sd = torch.load(path, weights_only=True)
    m = torchvision.models.resnet18(num_classes=10)
    r = m.load_state_dict(sd, strict=True)
    problems = []
    if r.missing_keys or r.unexpected_keys:
        problems.append("missing %s, unexpected %s" % (r.missing_keys, r.unexpected_keys))
    return sd, m, problems


def case_resnet(w, tmp):
    src = os.path.join(V26, "resnet18.pth")
    out = os.path.join(tmp, "resnet18.pth")
    try:
        how = ptc_write(w, src, out)
        ref = torch.load(src, weights_only=True)
        sd, m, problems = load_resnet(out)
        problems += ic.full_diff(ref, sd)
        problems += ["model.state_dict() after load_state_dict: " + d for d in ic.diff(ref, m.state_dict())]
    except Exception as e:  # noqa: BLE001
        how, problems = "", ["%s: %s" % (type(e).__name__, e)]
    result("resnet18.pth -> ptc -> torchvision resnet18(num_classes=10).load_state_dict(strict=True)",
           problems, "%s; 122 tensors, _metadata intact" % how)


def case_ddp(w, tmp):
    src = os.path.join(V26, "resnet18_ddp.pth")
    out = os.path.join(tmp, "resnet18_ddp.pth")
    try:
        how = ptc_write(w, src, out, "--strip-prefix", "module.")
        ref = torch.load(src, weights_only=True)
        torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(ref, "module.")
        sd, m, problems = load_resnet(out)
        problems += ["vs consume_prefix_in_state_dict_if_present: " + d for d in ic.full_diff(ref, sd)]
    except Exception as e:  # noqa: BLE001
        how, problems = "", ["%s: %s" % (type(e).__name__, e)]
    result("resnet18_ddp.pth -> ptc convert --strip-prefix module. -> load_state_dict(strict=True)",
           problems, how)


# ---- resuming training ----------------------------------------------------------------------------

def make_model():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))


def fixed_batch(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(16, 3, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)


def step(model, opt, x, y):
    model.train()
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def resume_and_step(path, x, y):
    ck = torch.load(path, weights_only=True)
    torch.manual_seed(999)  # the fresh model's init must not matter
    model = make_model()
    model.load_state_dict(ck["model_state_dict"], strict=True)
    # Deliberately different hyper-parameters: load_state_dict must bring back the file's.
    opt = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.5, weight_decay=0.0)
    opt.load_state_dict(ck["optimizer_state_dict"])
    loss = step(model, opt, x, y)
    return ck, model, opt, loss


def bits(f):
    return struct.pack("<d", f).hex()


def compare_resumed(a, b, label_a, label_b):
    _, ma, oa, la = a
    _, mb, ob, lb = b
    problems = ["parameters/buffers %s vs %s: %s" % (label_a, label_b, d)
                for d in ic.diff(ma.state_dict(), mb.state_dict())]
    problems += ["optimizer %s vs %s: %s" % (label_a, label_b, d)
                 for d in ic.diff(oa.state_dict(), ob.state_dict())]
    if bits(la) != bits(lb):
        problems.append("loss %s %r vs %s %r" % (label_a, la, label_b, lb))
    return problems


def case_resume(w, tmp, name, src, memory=None):
    out = os.path.join(tmp, os.path.basename(src))
    try:
        how = ptc_write(w, src, out)
        x, y = fixed_batch(7)
        problems = ["checkpoint: " + d for d in ic.full_diff(torch.load(src, weights_only=True),
                                                             torch.load(out, weights_only=True))]
        from_torch = resume_and_step(src, x, y)
        from_ptc = resume_and_step(out, x, y)
        problems += compare_resumed(from_torch, from_ptc, "torch-written", "ptc-written")
        if memory is not None:
            model, opt = memory
            loss = step(model, opt, x, y)
            problems += compare_resumed((None, model, opt, loss), from_ptc, "in memory", "ptc-written")
        nparams = sum(p.numel() for p in from_ptc[1].parameters())
        detail = "%s; step 3 on a fixed batch: %d parameters, buffers, momentum buffers and loss %.6f " \
                 "bit-identical%s" % (how, nparams, from_ptc[3],
                                      " (also to the in-memory run)" if memory is not None else "")
    except Exception as e:  # noqa: BLE001
        detail, problems = "", ["%s: %s" % (type(e).__name__, e)]
    result(name, problems, detail)


def fresh_checkpoint(tmp):
    torch.manual_seed(1234)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x, y = fixed_batch(5)
    loss = None
    for _ in range(2):
        loss = step(model, opt, x, y)
    path = os.path.join(tmp, "torch", "fresh_ckpt.pt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save({"epoch": 2, "model_state_dict": model.state_dict(),
                "optimizer_state_dict": opt.state_dict(), "loss": loss}, path)
    return path, (model, opt)


def main():
    ic.standin_banner()
    w = ic.Writer()
    print("writer: " + w.describe())
    try:
        w.require()
    except ic.WriterError as e:
        print("FAIL: %s" % e)
        return 1
    tmp = ic.mktemp("state_dicts")
    try:
        case_resnet(w, tmp)
        case_ddp(w, tmp)
        case_resume(w, tmp, "train_ckpt.pt (v2.6 fixture) resumed from the ptc-written file",
                    os.path.join(V26, "train_ckpt.pt"))
        path, memory = fresh_checkpoint(tmp)
        case_resume(w, tmp, "fresh CNN + SGD checkpoint (2 steps, saved by torch) resumed from ptc's copy",
                    path, memory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d of 4 state dict checks failed" % len(failures) if failures else "4 state dict checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
