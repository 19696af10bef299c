#!/usr/bin/env python3
"""`ptc predict` and ptc's image path (lib/data/image.c, lib/data/codecs.c, lib/nn/classify.c)
against torchvision 0.21 + torch as the oracle. Every file is made here, at test time.

1. Decoding: PNG (RGB, grey, grey+alpha, RGBA, palette, 1-bit, 16-bit grey, 16-bit RGB,
   interlaced) and JPEG (baseline, progressive, grey, 4:4:4, CMYK) at 32x32 and other sizes,
   through tests/interop/image_dump: every byte equal to torchvision.io.decode_image(mode=RGB)
   (16-bit: then ToDtype(uint8, scale=True)).
2. Resize: ptc_image_resize against transforms.v2.Resize((oh, ow), antialias=True) on the uint8
   CHW tensor, for many sizes up and down, random and smooth images: the count of bytes that
   differ (and by how much) is printed; the check is that none does.
3. `ptc predict --json` on those images with a resnet18(num_classes=10) state dict torch saved
   (BatchNorm statistics made non-trivial): top-1 equal to torch's (decode_image, Resize when the
   size differs, ToTensor, Normalize with the tutorial's constants, the model, softmax) and every
   probability within 1e-4 absolute for images that need no resize, 1e-2 for resized ones.
4. CIFAR-10 binary records (a small file written here) and Fashion-MNIST IDX records
   (/usr/share/datasets/fashion-mnist, --dataset fashion-mnist: 28x28 padded to 32x32, grey made
   RGB, Normalize with the training statistics), same tolerances as 3, and the built-in names.
5. The record in _metadata["ptc.preprocess"] (as ptc train writes it): torch 2.6 loads such a state
   dict with weights_only=True and load_state_dict(strict=True); ptc predict uses its mean and std
   (here deliberately unusual ones) and the probabilities match torch's with those constants.
   Then a real `ptc train` (Fashion-MNIST, one step) writes it: torch loads the file the same way,
   the record holds the dataset, its mean/std, input and source size, and ptc predict (without
   --dataset) uses it. Then a resnet18-cifar (3x3 stem, no max pool) of 5 classes whose record
   asks for 64x64 inputs: arch and classes taken from the checkpoint, images resized to 64x64.
6. Hostile images through `ptc predict`: truncated, corrupt, 65535x65535 and 0x10 headers, empty,
   not an image, a missing file, a record past the end: each refused with a message naming the
   input, exit status non-zero and below 128 (no crash), and the good inputs on the same command
   line still classified. 300 mutated PNG and JPEG files (random bytes changed, files cut) are
   each decoded or refused with a reason, never a crash. In a sanitizer build (ASan + UBSan) any report on stderr of any command
   run here is a failure too.
7. --labels FILE and --top K; --arch that does not fit the checkpoint: torch's error text.

Exit status: 0 all checks passed, 1 a difference, 77 torch/torchvision missing, 99 cannot run.
"""

import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common  # noqa: E402

torch = interop_common.require_torch(torchvision=True)
import numpy as np  # noqa: E402
import torchvision  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision.io import ImageReadMode, decode_image  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

BUILD = interop_common.BUILDDIR
PTC = os.path.join(BUILD, "tools", "ptc")
DUMP = os.path.join(BUILD, "tests", "interop", "image_dump")
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)
FASHION_MEAN, FASHION_STD = 0.21899983206954657, 0.33181137299995894
FASHION = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
FASHION_NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                 "Sneaker", "Bag", "Ankle boot"]
CIFAR_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
               "truck"]

fails = 0


def ok(msg):
    print("ok:   " + msg)


def bad(msg):
    global fails
    fails += 1
    print("FAIL: " + msg)


def torch_decode(path):
    t = decode_image(path, mode=ImageReadMode.RGB)
    if t.dtype != torch.uint8:
        t = v2.ToDtype(torch.uint8, scale=True)(t)
    return t  # [3][h][w] uint8


def sanitizer_check(what, r):
    """In a sanitizer build (ASan + UBSan), a report on stderr is a failure even when the exit
    status is the expected one."""
    if "Sanitizer" in r.stderr or "runtime error:" in r.stderr:
        bad("%s: sanitizer report: %s" % (what, r.stderr[-1500:]))


def ptc_decode(path, out):
    r = subprocess.run([DUMP, "decode", path, out], capture_output=True, text=True)
    sanitizer_check("image_dump decode %s" % os.path.basename(path), r)
    if r.returncode != 0:
        return None, (r.stdout + r.stderr).strip()
    h, w = map(int, r.stdout.split())
    return np.fromfile(out, dtype=np.uint8).reshape(h, w, 3), None


def make_images(d):
    """{name: path} of the test images, made with PIL."""
    rng = np.random.default_rng(15)
    out = {}
    for (h, w) in [(32, 32), (45, 37), (64, 64), (24, 20), (300, 200)]:
        yy, xx = np.mgrid[0:h, 0:w]
        rgb = np.stack([(xx * 255 // max(w - 1, 1)), (yy * 255 // max(h - 1, 1)),
                        ((xx + yy) * 7) % 256], -1).astype(np.int64)
        rgb = np.clip(rgb + rng.integers(-40, 40, rgb.shape), 0, 255).astype(np.uint8)
        im = Image.fromarray(rgb)
        tag = "%dx%d" % (h, w)

        def save(kind, img, ext, **kw):
            p = os.path.join(d, "%s-%s.%s" % (kind, tag, ext))
            img.save(p, **kw)
            out[os.path.basename(p)] = p

        save("rgb", im, "png")
        save("grey", im.convert("L"), "png")
        save("la", im.convert("LA"), "png")
        save("rgba", Image.fromarray(np.dstack([rgb, rng.integers(0, 256, (h, w, 1), dtype=np.uint8)])), "png")
        save("palette", im.convert("P", palette=Image.ADAPTIVE, colors=64), "png")
        save("bw", im.convert("1"), "png")
        save("interlaced", im, "png")  # PIL cannot write Adam7; rewritten below
        g16 = (rgb[..., 0].astype(np.uint16) * 257 + rng.integers(0, 256, (h, w))).astype(np.uint16)
        save("grey16", Image.fromarray(g16), "png")
        save("baseline", im, "jpg", quality=90)
        save("progressive", im, "jpg", quality=75, progressive=True)
        save("greyjpeg", im.convert("L"), "jpg")
        save("s444", im, "jpg", subsampling=0, quality=95)
        save("cmyk", im.convert("CMYK"), "jpg")
        # 16-bit RGB, written by hand (PIL has no 16-bit RGB mode)
        rgb16 = (rgb.astype(np.uint16) * 257 ^ rng.integers(0, 256, rgb.shape).astype(np.uint16))
        p = os.path.join(d, "rgb16-%s.png" % tag)
        write_png(p, w, h, 16, 2, rgb16.astype(">u2").tobytes(), 6)
        out[os.path.basename(p)] = p
        p = os.path.join(d, "interlaced-%s.png" % tag)
        write_png(p, w, h, 8, 2, rgb.tobytes(), 3, interlace=True)
    return out


def png_chunk(t, data):
    return struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data) & 0xffffffff)


def write_png(path, w, h, depth, ctype, pixels, bpp, interlace=False):
    """A PNG of raw pixel bytes (row-major, bpp bytes per pixel), filter 0; Adam7 when asked."""
    stride = w * bpp
    rows = [pixels[y * stride:(y + 1) * stride] for y in range(h)]
    raw = b""
    if not interlace:
        raw = b"".join(b"\0" + r for r in rows)
    else:
        for (x0, y0, dx, dy) in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
                                 (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]:
            for y in range(y0, h, dy):
                line = b"".join(rows[y][x * bpp:(x + 1) * bpp] for x in range(x0, w, dx))
                if line:
                    raw += b"\0" + line
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 1 if interlace else 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
                png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


def check_decode(images, d):
    print("\n== 1. decoding, byte for byte against torchvision.io.decode_image(mode=RGB)")
    n = 0
    for name, path in sorted(images.items()):
        ours, why = ptc_decode(path, os.path.join(d, "dec.raw"))
        ref = torch_decode(path).permute(1, 2, 0).numpy()
        if ours is None:
            bad("%s: ptc refused it: %s" % (name, why))
        elif ours.shape != ref.shape:
            bad("%s: ptc %s, torchvision %s" % (name, ours.shape, ref.shape))
        elif not np.array_equal(ours, ref):
            diff = np.abs(ours.astype(int) - ref.astype(int))
            bad("%s: %d of %d bytes differ (max %d)" % (name, (diff > 0).sum(), diff.size, diff.max()))
        else:
            n += 1
    ok("%d of %d images decode to torchvision's bytes" % (n, len(images))) if n == len(images) else None


def check_resize(d):
    print("\n== 2. ptc_image_resize against v2.Resize((oh, ow), antialias=True) on uint8 CHW")
    print("   torch CPU capability: %s" % torch.backends.cpu.get_cpu_capability())
    rng = np.random.default_rng(2)
    sizes = [(32, 32, 64, 64), (64, 64, 32, 32), (100, 80, 32, 32), (28, 28, 32, 32),
             (32, 32, 224, 224), (37, 53, 32, 32), (500, 375, 32, 32), (7, 9, 32, 32),
             (224, 224, 32, 32), (33, 31, 32, 32), (48, 64, 40, 36), (1, 1, 32, 32),
             (32, 64, 32, 32), (320, 240, 224, 224), (1000, 3, 32, 32), (31, 33, 96, 40),
             (256, 256, 255, 257), (45, 37, 32, 32), (24, 20, 32, 32), (300, 200, 32, 32),
             (64, 32, 32, 32), (20, 32, 48, 32), (16000, 2, 32, 2)]
    total = differ = worst = 0
    for (h, w, oh, ow) in sizes:
        for kind in ("random", "smooth"):
            if kind == "random":
                img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            else:
                yy, xx = np.mgrid[0:h, 0:w]
                img = (np.sin(yy / 5.0)[..., None] * np.cos(xx / 7.0)[..., None] *
                       np.array([100, 80, 60]) + 128).astype(np.uint8)
            src, dst = os.path.join(d, "rs-in.raw"), os.path.join(d, "rs-out.raw")
            img.tofile(src)
            r = subprocess.run([DUMP, "resize", src, str(h), str(w), str(oh), str(ow), dst],
                               capture_output=True, text=True)
            sanitizer_check("image_dump resize", r)
            if r.returncode != 0:
                bad("resize %dx%d -> %dx%d: %s" % (h, w, oh, ow, r.stdout + r.stderr))
                continue
            ours = np.fromfile(dst, dtype=np.uint8).reshape(oh, ow, 3)
            ref = v2.Resize((oh, ow), antialias=True)(torch.from_numpy(img).permute(2, 0, 1).contiguous())
            diff = np.abs(ours.astype(int) - ref.permute(1, 2, 0).numpy().astype(int))
            total += diff.size
            differ += int((diff > 0).sum())
            worst = max(worst, int(diff.max()))
            if diff.max() > 0:
                print("   %dx%d -> %dx%d %s: %d bytes differ (max %d)" % (h, w, oh, ow, kind, (diff > 0).sum(), diff.max()))
    msg = "%d sizes x 2 images, %d bytes: %d differ (fraction %.2e), largest difference %d" % (
        len(sizes), total, differ, differ / max(total, 1), worst)
    ok(msg) if differ == 0 else bad(msg)


def make_model(d):
    torch.manual_seed(15)
    m = torchvision.models.resnet18(num_classes=10)
    m.train()
    with torch.no_grad():  # running statistics that are not the initial 0 and 1
        for _ in range(3):
            m(torch.randn(8, 3, 32, 32) * 1.5 + 0.2)
        m.fc.weight.mul_(8.0)  # confident enough that top-1 is meaningful
    m.eval()
    p = os.path.join(d, "model.pth")
    torch.save(m.state_dict(), p)
    return m, p


def torch_probs(model, chw, mean, std, size=(32, 32)):
    t = chw
    if tuple(t.shape[1:]) != size:
        t = v2.Resize(size, antialias=True)(t)
    x = t.float().div(255)
    x = v2.Normalize(mean, std)(x)
    with torch.no_grad():
        z = model(x.unsqueeze(0))[0]
    return torch.softmax(z.double(), 0).numpy()


def run_predict(args):
    r = subprocess.run([PTC, "predict"] + args, capture_output=True, text=True)
    sanitizer_check("ptc predict", r)
    lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    return r, lines


def compare(tag, line, probs, tol, names=None):
    top = line.get("top")
    if not top:
        bad("%s: ptc gave no result: %s" % (tag, line))
        return
    want = int(np.argmax(probs))
    worst = max(abs(e["prob"] - probs[e["class"]]) for e in top)
    if top[0]["class"] != want:
        bad("%s: top-1 ptc %d (p %.6f), torch %d (p %.6f)" % (tag, top[0]["class"], top[0]["prob"], want, probs[want]))
    elif worst > tol:
        bad("%s: probabilities differ by %.2e > %.0e: ptc %s, torch %s" % (
            tag, worst, tol, [(e["class"], e["prob"]) for e in top], probs.round(6).tolist()))
    elif names and top[0]["label"] != names[want]:
        bad("%s: label %r, expected %r" % (tag, top[0]["label"], names[want]))
    else:
        return worst
    return None


def check_predict(model, weights, images):
    print("\n== 3. ptc predict --json on the images against torchvision + torch")
    paths = [images[k] for k in sorted(images)]
    r, lines = run_predict(["--weights", weights, "--json", "--top", "10"] + paths)
    if r.returncode != 0 or len(lines) != len(paths):
        bad("ptc predict exited %d with %d lines for %d inputs: %s" % (r.returncode, len(lines), len(paths), r.stderr[-2000:]))
        return
    same = resized = 0
    worst_same = worst_resized = 0.0
    for path, line in zip(paths, lines):
        chw = torch_decode(path)
        probs = torch_probs(model, chw, CIFAR_MEAN, CIFAR_STD)
        needs = tuple(chw.shape[1:]) != (32, 32)
        w = compare(os.path.basename(path), line, probs, 1e-2 if needs else 1e-4, CIFAR_NAMES)
        if w is not None:
            if needs:
                resized += 1
                worst_resized = max(worst_resized, w)
            else:
                same += 1
                worst_same = max(worst_same, w)
    ok("%d images at 32x32: top-1 equal, largest probability difference %.2e (bound 1e-4)" % (same, worst_same))
    ok("%d resized images: top-1 equal, largest probability difference %.2e (bound 1e-2)" % (resized, worst_resized))


def check_records(model, weights, d):
    print("\n== 4. dataset records: CIFAR-10 binary and Fashion-MNIST IDX")
    rng = np.random.default_rng(4)
    recs = rng.integers(0, 256, (5, 3073), dtype=np.uint8)
    recs[:, 0] = np.arange(5)
    cifar = os.path.join(d, "batch.bin")
    recs.tofile(cifar)
    r, lines = run_predict(["--weights", weights, "--json", "--top", "3"] + ["%s:%d" % (cifar, i) for i in range(5)])
    worst = 0.0
    good = 0
    for i, line in enumerate(lines):
        chw = torch.from_numpy(recs[i, 1:].reshape(3, 32, 32).copy())
        w = compare("CIFAR-10 record %d" % i, line, torch_probs(model, chw, CIFAR_MEAN, CIFAR_STD), 1e-4, CIFAR_NAMES)
        if w is not None:
            good += 1
            worst = max(worst, w)
    if r.returncode == 0 and good == 5:
        ok("5 CIFAR-10 records: top-1 and names equal, largest probability difference %.2e" % worst)
    else:
        bad("CIFAR-10 records: status %d, %d of 5 matched: %s" % (r.returncode, good, r.stderr[-500:]))
    if not os.path.exists(FASHION):
        bad("%s is missing (apt-get install dataset-fashion-mnist)" % FASHION)
        return
    data = gzip.open(FASHION).read()
    idx = [0, 1, 2, 7, 123]
    r, lines = run_predict(["--weights", weights, "--dataset", "fashion-mnist", "--json"] +
                           ["%s:%d" % (FASHION, i) for i in idx])
    worst, good = 0.0, 0
    for i, line in zip(idx, lines):
        img = np.frombuffer(data, dtype=np.uint8, count=784, offset=16 + 784 * i).reshape(28, 28)
        chw = torch.from_numpy(np.pad(img, 2)).unsqueeze(0).repeat(3, 1, 1)
        w = compare("Fashion-MNIST record %d" % i, line, torch_probs(model, chw, (FASHION_MEAN,) * 3, (FASHION_STD,) * 3), 1e-4, FASHION_NAMES)
        if w is not None:
            good += 1
            worst = max(worst, w)
    if r.returncode == 0 and good == len(idx):
        ok("%d Fashion-MNIST IDX records (padded, grey to RGB): top-1 and names equal, largest probability difference %.2e" % (good, worst))
    else:
        bad("Fashion-MNIST records: status %d, %d of %d matched: %s" % (r.returncode, good, len(idx), r.stderr[-500:]))


def check_metadata(model, d, images):
    print("\n== 5. the preprocessing recorded in _metadata[\"ptc.preprocess\"]")
    sd = model.state_dict()
    mean, std = [0.3, 0.5, 0.6], [0.25, 0.3, 0.2]
    sd._metadata["ptc.preprocess"] = {"dataset": "fashion-mnist", "mean": mean, "std": std,
                                      "input_size": [32, 32], "source_size": [28, 28], "pad": 2,
                                      "channels": "grey replicated to RGB"}
    p = os.path.join(d, "recorded.pth")
    torch.save(sd, p)
    loaded = torch.load(p, weights_only=True)
    m2 = torchvision.models.resnet18(num_classes=10)
    res = m2.load_state_dict(loaded, strict=True)
    rec = getattr(loaded, "_metadata", {}).get("ptc.preprocess")
    if rec != sd._metadata["ptc.preprocess"]:
        bad("torch.load(weights_only=True) did not keep the record: %r" % (rec,))
    else:
        ok("torch 2.6 loads it with weights_only=True (record kept) and strictly: %s" % (res,))
    img = images["rgb-32x32.png"]
    r, lines = run_predict(["--weights", p, "--json", img])
    probs = torch_probs(model, torch_decode(img), mean, std)
    w = compare("recorded preprocessing", lines[0] if lines else {}, probs, 1e-4, FASHION_NAMES)
    if w is not None:
        ok("ptc predict used the recorded mean/std and dataset names: difference %.2e" % w)


def check_train_record(d):
    print("\n== 5b. what ptc train records, read by torch and by ptc predict")
    if not os.path.exists(FASHION):
        bad("%s is missing (apt-get install dataset-fashion-mnist)" % FASHION)
        return
    p = os.path.join(d, "trained.pth")
    r = subprocess.run([PTC, "train", "--dataset", "fashion-mnist", "--max-samples", "64",
                        "--epochs", "1", "--max-steps", "1", "--batch-size", "16", "--eval-every",
                        "0", "--save", p], capture_output=True, text=True)
    if r.returncode != 0:
        bad("ptc train exited %d: %s" % (r.returncode, r.stderr[-1000:]))
        return
    sd = torch.load(p, weights_only=True)
    rec = getattr(sd, "_metadata", {}).get("ptc.preprocess")
    m = torchvision.models.resnet18(num_classes=10)
    res = m.load_state_dict(sd, strict=True)
    want = {"dataset": "fashion-mnist", "input_size": [32, 32], "source_size": [28, 28], "pad": 2,
            "channels": "grey replicated to RGB"}
    if not rec or any(rec.get(k) != v for k, v in want.items()) or \
            max(abs(x - FASHION_MEAN) for x in rec["mean"]) > 1e-12 or \
            max(abs(x - FASHION_STD) for x in rec["std"]) > 1e-12:
        bad("the record ptc train wrote: %r (expected %r and the Fashion-MNIST mean/std)" % (rec, want))
        return
    ok("ptc train recorded %r; torch.load(weights_only=True) + strict load: %s" % (rec, res))
    m.eval()
    data = gzip.open(FASHION).read()
    r, lines = run_predict(["--weights", p, "--json", "--top", "10", FASHION + ":3"])
    img = np.frombuffer(data, dtype=np.uint8, count=784, offset=16 + 784 * 3).reshape(28, 28)
    chw = torch.from_numpy(np.pad(img, 2)).unsqueeze(0).repeat(3, 1, 1)
    w = compare("trained model, record 3", lines[0] if lines else {},
                torch_probs(m, chw, rec["mean"], rec["std"]), 1e-4, FASHION_NAMES)
    if w is not None:
        ok("ptc predict without --dataset used the record (Fashion-MNIST names, its mean/std): difference %.2e" % w)


def check_other_models(d, images):
    print("\n== 5c. other models: resnet18-cifar, 5 classes, a 64x64 input size")
    torch.manual_seed(5)
    m = torchvision.models.resnet18(num_classes=5)
    m.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = torch.nn.Identity()
    m.train()
    with torch.no_grad():
        for _ in range(2):
            m(torch.randn(8, 3, 32, 32))
        m.fc.weight.mul_(8.0)
    m.eval()
    sd = m.state_dict()
    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    sd._metadata["ptc.preprocess"] = {"dataset": "cifar10", "mean": mean, "std": std,
                                      "input_size": [64, 64]}
    p = os.path.join(d, "cifar5.pth")
    torch.save(sd, p)
    names = ["rgb-32x32.png", "baseline-45x37.jpg", "grey-64x64.png", "rgb-300x200.png"]
    r, lines = run_predict(["--weights", p, "--json", "--top", "10"] + [images[n] for n in names])
    good, worst = 0, 0.0
    for n, line in zip(names, lines):
        chw = torch_decode(images[n])
        probs = torch_probs(m, chw, mean, std, (64, 64))
        needs = tuple(chw.shape[1:]) != (64, 64)
        w = compare("resnet18-cifar/5 classes/64x64 " + n, line, probs, 1e-2 if needs else 1e-4)
        if w is None:
            continue
        if len(line["top"]) != 5 or any(e["label"] is not None for e in line["top"]):
            bad("%s: expected 5 classes without names (--top 10 on a 5-class model): %s" % (n, line))
            continue
        good += 1
        worst = max(worst, w)
    if r.returncode == 0 and good == len(names):
        ok("resnet18-cifar (3x3 stem, no max pool) with 5 classes and a recorded 64x64 input: %d images, "
           "top-1 equal, 5 classes shown without names, largest probability difference %.2e" % (good, worst))
    elif r.returncode != 0:
        bad("resnet18-cifar/5 classes: status %d: %s" % (r.returncode, r.stderr[-1000:]))


def check_hostile(weights, d, images):
    print("\n== 6. hostile inputs through ptc predict")
    good = open(images["rgb-45x37.png"], "rb").read()
    jpg = open(images["baseline-45x37.jpg"], "rb").read()
    cases = {}

    def put(name, data, want):
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            f.write(data)
        cases[p] = want

    ihdr = lambda w, h: b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    put("huge.png", ihdr(65535, 65535) + png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + png_chunk(b"IEND", b""), "more than the 268435456 pixels")
    put("big.png", ihdr(16000, 16000) + png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + png_chunk(b"IEND", b""), "cannot be held by a file of")
    put("zero.png", ihdr(0, 10) + png_chunk(b"IEND", b""), "corrupt PNG")
    put("truncated.png", good[:len(good) // 2], "truncated")
    c = bytearray(good)
    c[70:90] = b"\x55" * 20
    put("corrupt.png", bytes(c), "corrupt PNG")
    put("truncated.jpg", jpg[:len(jpg) // 2], "Premature end of JPEG file")
    c = bytearray(jpg)
    i = c.find(b"\xff\xc0")
    c[i + 5:i + 9] = struct.pack(">HH", 65535, 65535)
    put("huge.jpg", bytes(c), "65500")
    c = bytearray(jpg)
    c[i + 5:i + 9] = struct.pack(">HH", 20000, 20000)
    put("big.jpg", bytes(c), "JPEG of 20000x20000 pixels: more than the 268435456 pixels")
    # a progressive JPEG of 13500x13500 (2 MB): libjpeg would keep 1.09 GB of coefficients
    p = os.path.join(d, "progressive-big.jpg")
    Image.new("RGB", (13500, 13500), (10, 200, 30)).save(p, progressive=True, subsampling=0, quality=50)
    cases[p] = "working memory a JPEG may use"
    c = bytearray(jpg)
    c[i + 5:i + 9] = struct.pack(">HH", 0, 10)
    put("zero.jpg", bytes(c), "Empty JPEG image")
    put("empty.png", b"", "empty file")
    put("text.png", b"hello\n", "not a PNG or JPEG")
    cases[os.path.join(d, "missing.png")] = "No such file"
    cases[os.path.join(d, "batch.bin") + ":5"] = "the file has 5 records"
    args = [images["rgb-32x32.png"]] + list(cases) + [images["baseline-32x32.jpg"]]
    r, lines = run_predict(["--weights", weights, "--json"] + args)
    if r.returncode <= 0 or r.returncode >= 128:
        bad("ptc predict exited %d (expected a refusal's status, 1..3)" % r.returncode)
    else:
        ok("ptc predict exited %d (not a crash)" % r.returncode)
    by = {l["input"]: l for l in lines}
    for p, want in cases.items():
        l = by.get(p, {})
        msg = l.get("message", "")
        base = os.path.basename(p.split(":")[0])
        if "error" in l and want in msg and base in msg and base in r.stderr:
            ok("%s refused: %s: %s" % (os.path.basename(p), l["error"], msg))
        else:
            bad("%s: expected a refusal naming it and saying %r; got %r" % (os.path.basename(p), want, l))
    for p in (args[0], args[-1]):
        if "top" not in by.get(p, {}):
            bad("%s (a good input beside the bad ones) was not classified" % os.path.basename(p))


def check_mutations(d, images):
    print("\n== 6b. mutated PNG and JPEG files (flipped bytes, cut files) through image_dump")
    rng = np.random.default_rng(66)
    counts = {"decoded": 0, "refused": 0}
    for name in ("rgb-45x37.png", "palette-45x37.png", "interlaced-45x37.png", "baseline-45x37.jpg",
                 "progressive-45x37.jpg", "cmyk-45x37.jpg"):
        base = bytearray(open(images[name], "rb").read())
        for i in range(50):
            m = bytearray(base)
            for _ in range(int(rng.integers(1, 6))):
                m[int(rng.integers(0, len(m)))] = int(rng.integers(0, 256))
            if i % 5 == 4:
                m = m[:int(rng.integers(1, len(m)))]
            p = os.path.join(d, "mut" + os.path.splitext(name)[1])
            with open(p, "wb") as f:
                f.write(m)
            r = subprocess.run([DUMP, "decode", p, os.path.join(d, "mut.raw")], capture_output=True, text=True)
            sanitizer_check("mutated %s #%d" % (name, i), r)
            if r.returncode == 0:
                counts["decoded"] += 1
            elif r.returncode == 1 and r.stdout.startswith("error E") and "mut" in r.stdout:
                counts["refused"] += 1
            else:
                bad("mutated %s #%d: exit status %d (expected 0 or a refusal): %s %s" % (
                    name, i, r.returncode, r.stdout, r.stderr[-500:]))
    ok("300 mutated files: %d decoded, %d refused with a reason naming the file, no crash" % (
        counts["decoded"], counts["refused"]))


def check_options(weights, d, images):
    print("\n== 7. --labels and --top, text output")
    lab = os.path.join(d, "labels.txt")
    with open(lab, "w") as f:
        f.write("".join("class number %d\n" % i for i in range(10)))
    r = subprocess.run([PTC, "predict", "--weights", weights, "--labels", lab, "--top", "2",
                        images["rgb-32x32.png"]], capture_output=True, text=True)
    line = r.stdout.strip()
    if r.returncode == 0 and line.startswith(images["rgb-32x32.png"] + ":") and line.count("class number") == 2:
        ok("--labels --top 2: %s" % line)
    else:
        bad("--labels --top 2: status %d, output %r %r" % (r.returncode, r.stdout, r.stderr))
    with open(lab, "w") as f:
        f.write("a\nb\n")
    r = subprocess.run([PTC, "predict", "--weights", weights, "--labels", lab, images["rgb-32x32.png"]],
                       capture_output=True, text=True)
    if r.returncode == 2 and "has 2 names; the model has 10 classes" in r.stderr:
        ok("a labels file with too few names: usage error: %s" % r.stderr.strip().splitlines()[0])
    else:
        bad("short labels file: status %d, %r" % (r.returncode, r.stderr))
    r = subprocess.run([PTC, "predict", "--weights", weights, "--arch", "resnet18-cifar",
                        images["rgb-32x32.png"]], capture_output=True, text=True)
    want = "\tsize mismatch for conv1.weight: copying a param with shape torch.Size([64, 3, 7, 7])"
    if r.returncode == 1 and want in r.stderr and not r.stdout:
        ok("--arch resnet18-cifar on a resnet18 state dict: status 1, torch's text: %s" % want.strip())
    else:
        bad("--arch mismatch: status %d (expected 1), stderr %r (expected %r)" % (r.returncode, r.stderr, want))


def main():
    for exe in (PTC, DUMP):
        if not os.access(exe, os.X_OK):
            print("ERROR: %s is not built" % exe)
            return 99
    d = interop_common.mktemp("predict")
    try:
        images = make_images(d)
        check_decode(images, d)
        check_resize(d)
        model, weights = make_model(d)
        check_predict(model, weights, images)
        check_records(model, weights, d)
        check_metadata(model, d, images)
        check_train_record(d)
        check_other_models(d, images)
        check_hostile(weights, d, images)
        check_mutations(d, images)
        check_options(weights, d, images)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("\ncheck_predict: %s" % ("all checks passed" if fails == 0 else "%d check(s) failed" % fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
