#!/usr/bin/env python3
"""speed.py - the throughput half of tests/bench/verify/run.sh (see README.md beside this): builds
two corpora and times `ptc verify --json` (one process over all files) against picklescan
in-process (imported once, the import and a warm-up pass excluded) on each, in alternating rounds.

    speed.py run --srcdir DIR --builddir DIR --work DIR --ptc EXE [--ptc-libpath DIRS]
                 [--repeat R] [--timeout S] [--mem-mb M] [--out FILE]
    speed.py peer LISTFILE TIMEOUT MEM_MB        (one picklescan pass, in its own process)

Corpora, written into --work at bench time:
  pickle-heavy: state dicts of many small tensors written by torch.save (their data.pkl holds
    thousands of persistent ids, globals and opcodes), the same in torch's legacy format, and
    pickle-only files (pickle.dump of large dicts, lists and OrderedDicts, protocols 2 and 4);
  mixed: every file of the hostile corpus (testdata/hostile/files), the torch-written fixtures
    (testdata/torch, testdata/vectors), and real checkpoints torch writes now (a torchvision
    resnet18 state dict, a training checkpoint with its optimizer state, a small CNN).
Targets: ptc files/s >= 50x picklescan's on the pickle-heavy corpus, >= 10x on the mixed one.
"""

import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time

TARGETS = {"pickle-heavy": 50.0, "mixed": 10.0}


# ---- picklescan, in its own process -----------------------------------------------------------

class PeerTimeout(BaseException):
    """Raised by the alarm; a BaseException, so picklescan's `except Exception` cannot swallow it."""


def peer(argv):
    listfile, timeout, mem_mb = argv[0], int(float(argv[1])), int(argv[2])
    if mem_mb > 0:
        lim = mem_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    import logging
    logging.disable(logging.CRITICAL)  # picklescan logs every finding: its fastest setting is off
    from picklescan.scanner import scan_file_path

    def on_alarm(signum, frame):
        raise PeerTimeout()

    signal.signal(signal.SIGALRM, on_alarm)
    with open(listfile) as f:
        paths = [line.rstrip("\n") for line in f if line.strip()]

    def one(p):
        signal.alarm(timeout)
        try:
            scan_file_path(p)
            return True
        except PeerTimeout:
            return False
        except Exception:  # noqa: BLE001 - a file picklescan cannot read still counts as scanned
            return True
        finally:
            signal.alarm(0)

    ok = [p for p in paths if one(p)]  # warm-up pass; a file that timed out is left out
    t0, c0 = time.perf_counter(), time.process_time()
    for p in ok:
        one(p)
    s, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"n": len(ok), "s": s, "cpu": cpu, "left_out": len(paths) - len(ok)}),
          flush=True)
    return 0


# ---- the corpora --------------------------------------------------------------------------------

def build_heavy(d):
    """The pickle-heavy corpus, or (None, reason) when torch is not importable."""
    import collections
    import pickle
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return None, "torch is not importable (%s): no state dicts" % e
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    files = []
    for i, n in enumerate((1000, 2000, 4000, 8000) * 2):
        sd = collections.OrderedDict()
        for k in range(n):
            sd["layer%d.block%d.conv.weight" % (k // 8, k % 8)] = torch.zeros(2 + k % 3)
        p = os.path.join(d, "sd_%02d_%d.pt" % (i, n))
        torch.save(sd, p)
        files.append(p)
        if i < 4:
            p = os.path.join(d, "sd_legacy_%02d_%d.pt" % (i, n))
            torch.save(sd, p, _use_new_zipfile_serialization=False)
            files.append(p)
    for i in range(8):
        n = 5000 * (1 + i % 4)
        obj = {"epoch": i, "names": ["param_%d" % k for k in range(n)],
               "values": [float(k) / 7 for k in range(n)],
               "pairs": [(k, "v%d" % k, k * 0.5) for k in range(n // 2)],
               "ordered": collections.OrderedDict(("k%d" % k, [k, k + 1]) for k in range(n // 2))}
        p = os.path.join(d, "pickle_%02d_p%d.pkl" % (i, 2 if i % 2 == 0 else 4))
        with open(p, "wb") as f:
            pickle.dump(obj, f, protocol=2 if i % 2 == 0 else 4)
        files.append(p)
    return files, None


def build_mixed(d, srcdir, builddir):
    files, notes = [], []
    hdir = os.path.join(srcdir, "testdata", "hostile", "files")
    files += [os.path.join(hdir, n) for n in sorted(os.listdir(hdir)) if n.endswith(".pth")]
    for sub, root in (("testdata/torch/v2.6", builddir), ("testdata/torch/v1.13", builddir),
                      ("testdata/vectors", srcdir)):
        p = os.path.join(root, sub)
        if not os.path.isdir(p):
            notes.append("%s is missing" % sub)
            continue
        files += [os.path.join(p, n) for n in sorted(os.listdir(p))
                  if os.path.isfile(os.path.join(p, n)) and not n.endswith((".json", ".md", ".py"))]
    try:
        import torch
        import torch.nn as nn
    except Exception as e:  # noqa: BLE001
        notes.append("torch is not importable (%s): no checkpoints written at bench time" % e)
        return files, notes
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    small = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.Flatten(),
                          nn.Linear(16 * 30 * 30, 10))
    opt = torch.optim.SGD(small.parameters(), lr=0.1, momentum=0.9)
    small(torch.randn(2, 3, 32, 32)).sum().backward()
    opt.step()
    p = os.path.join(d, "small_cnn.pt")
    torch.save(small.state_dict(), p)
    files.append(p)
    p = os.path.join(d, "train_ckpt.pt")
    torch.save({"epoch": 3, "model": small.state_dict(), "optimizer": opt.state_dict()}, p)
    files.append(p)
    try:
        import torchvision
        p = os.path.join(d, "resnet18.pth")
        torch.save(torchvision.models.resnet18().state_dict(), p)
        files.append(p)
    except Exception as e:  # noqa: BLE001
        notes.append("torchvision is not importable (%s): no resnet18" % e)
    return files, notes


# ---- timing -------------------------------------------------------------------------------------

def ptc_once(exe, env, paths, timeout):
    """(wall seconds, CPU seconds) of one `ptc verify --json` over all files, or None."""
    t0 = time.perf_counter()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        r = subprocess.run([exe, "verify", "--json"] + paths, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=max(120, 10 * timeout))
    except subprocess.TimeoutExpired:
        return None
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return (wall, cpu) if r.returncode in (0, 1) else None


def peer_once(listfile, timeout, mem_mb, limit, peer_path):
    env = dict(os.environ)
    if peer_path:
        env["PYTHONPATH"] = peer_path
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "peer", listfile,
                            str(timeout), str(mem_mb)], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=limit, text=True, env=env)
        return json.loads(r.stdout.strip().splitlines()[-1])
    except Exception:  # noqa: BLE001
        return None


def fmt_range(xs, f):
    return "%s (%s-%s)" % (f(statistics.median(xs)), f(min(xs)), f(max(xs)))


def main_run(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="speed.py run")
    ap.add_argument("--srcdir", required=True)
    ap.add_argument("--builddir", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--ptc", required=True)
    ap.add_argument("--ptc-libpath", default="")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--mem-mb", type=int, default=4096)
    ap.add_argument("--out", default="")
    ap.add_argument("--peer-path", default="", help="PYTHONPATH of the picklescan process (torch, "
                    "which writes the corpora, runs without it: it may hold another numpy)")
    a = ap.parse_args(argv)
    env = dict(os.environ)
    if a.ptc_libpath:
        env["LD_LIBRARY_PATH"] = a.ptc_libpath + (
            ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    corpora = []
    print("speed: writing the corpora with torch ...", flush=True)
    heavy, why = build_heavy(os.path.join(a.work, "heavy"))
    if heavy is None:
        print("speed: pickle-heavy corpus not built: " + why, flush=True)
    else:
        corpora.append(("pickle-heavy", heavy, []))
    mixed, notes = build_mixed(os.path.join(a.work, "mixed"), a.srcdir, a.builddir)
    corpora.append(("mixed", mixed, notes))

    rows = []
    for name, paths, notes in corpora:
        nbytes = sum(os.path.getsize(p) for p in paths)
        listfile = os.path.join(a.work, "speed-%s.txt" % name)
        with open(listfile, "w") as f:
            f.write("".join(p + "\n" for p in paths))
        for p in paths:  # the page cache holds every file before anybody is timed
            with open(p, "rb") as f:
                while f.read(1 << 20):
                    pass
        print("speed: %s corpus, %d files, %.1f MB" % (name, len(paths), nbytes / 1e6), flush=True)
        ptc_s, peer_s, ptc_cpu, peer_cpu, peer_n, left = [], [], [], [], None, 0
        ptc_once(a.ptc, env, paths, a.timeout)  # untimed warm-up, as picklescan gets its own
        for k in range(a.repeat):
            t = ptc_once(a.ptc, env, paths, a.timeout)
            if t is not None:
                ptc_s.append(t[0])
                ptc_cpu.append(t[1])
            m = peer_once(listfile, int(a.timeout), a.mem_mb, 20 * a.timeout + 600, a.peer_path)
            if m:
                peer_s.append(m["s"])
                peer_cpu.append(m["cpu"])
                peer_n, left = m["n"], m["left_out"]
            print("  round %d: ptc %s, picklescan %s" % (
                k + 1, "%.3f s (CPU %.3f s)" % t if t is not None else "failed",
                "%.3f s (CPU %.3f s)" % (m["s"], m["cpu"]) if m else "failed"), flush=True)
        rows.append((name, len(paths), nbytes, ptc_s, peer_n, peer_s, left, notes, ptc_cpu,
                     peer_cpu))

    out = ["### `ptc verify` throughput against picklescan in-process", "",
           "ptc: one `ptc verify --json` process over all files (start-up included), after an untimed "
           "one; picklescan: "
           "`scan_file_path` over the same files in one process, imported once, after a warm-up "
           "pass. Medians of %d alternating rounds (range in brackets); load average at the end: "
           "%s." % (a.repeat, " ".join("%.2f" % x for x in os.getloadavg())), "",
           "| corpus | files | MB | ptc files/s | ptc MB/s | picklescan files/s | picklescan MB/s "
           "| ratio (files/s) | ratio (CPU time) | target | |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, n, nbytes, ptc_s, peer_n, peer_s, left, notes, ptc_cpu, peer_cpu in rows:
        mb = nbytes / 1e6
        if ptc_s and peer_s:
            ratio = (n / statistics.median(ptc_s)) / (peer_n / statistics.median(peer_s))
            met = "met" if ratio >= TARGETS[name] else "MISSED"
            ratio_s = "%.1fx" % ratio
        else:
            ratio_s, met = "-", "not measured"
        # The same ratio over CPU seconds (ptc's process, picklescan's pass): what a busy
        # machine's scheduling does not move.
        cpu_s = "%.1fx" % ((n / statistics.median(ptc_cpu)) / (peer_n / statistics.median(
            peer_cpu))) if ptc_cpu and peer_cpu and min(ptc_cpu) > 0 else "-"
        out.append("| %s | %d | %.1f | %s | %s | %s | %s | %s | %s | >= %.0fx | %s |" % (
            name, n, mb,
            fmt_range([n / s for s in ptc_s], lambda x: "%.0f" % x) if ptc_s else "failed",
            fmt_range([mb / s for s in ptc_s], lambda x: "%.0f" % x) if ptc_s else "failed",
            fmt_range([peer_n / s for s in peer_s], lambda x: "%.1f" % x) if peer_s else "failed",
            fmt_range([mb / s for s in peer_s], lambda x: "%.1f" % x) if peer_s else "failed",
            ratio_s, cpu_s, TARGETS[name], met))
    for name, n, nbytes, ptc_s, peer_n, peer_s, left, notes, _, _ in rows:
        for x in notes + (["%d files timed out in picklescan and are left out of its pass" % left]
                          if left else []):
            out.append("")
            out.append("Note (%s): %s." % (name, x))
    text = "\n".join(out) + "\n"
    print()
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write("\n" + text)
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "peer":
        sys.exit(peer(sys.argv[2:]))
    if len(sys.argv) >= 2 and sys.argv[1] == "run":
        sys.exit(main_run(sys.argv[2:]))
    sys.exit(__doc__)
