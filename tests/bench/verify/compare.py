#!/usr/bin/env python3
"""compare.py - the work behind tests/bench/verify/run.sh (see README.md beside this).

    compare.py run --srcdir DIR [--builddir DIR] --work DIR [--ptc EXE --ptc-libpath DIRS] [--repeat R]
                   [--timeout S] [--mem-mb M] [--peers LIST] [--left-out LIST] [--out FILE]
                   [--tsv FILE]
    compare.py worker PEER LISTFILE START SKIP TIMEOUT MEM_MB

`run` builds the file set (the hostile corpus with its expected verdicts read from
testdata/hostile/manifest.json now, and the benign checkpoints written by real torch), asks
`ptc verify --json` and every peer for a verdict on every file, times them, and prints the tables.

`worker` is one peer, imported once, in its own process: it scans the listed files from START on
(one JSON line per file on its stdout), then times one pass over all of them for each `pass` line
on its stdin. The parent restarts it past a file that kills or hangs it. The peers are only ever
used as scanners: nothing here unpickles or loads a file.
"""

import json
import os
import platform
import resource
import select
import signal
import statistics
import subprocess
import sys
import time

PEERS = ("picklescan", "modelscan", "fickling")


# ---- the peers, in the worker process -----------------------------------------------------------

class PeerTimeout(BaseException):
    """Raised by the alarm; a BaseException, so a peer's `except Exception` cannot swallow it."""


def _short(e):
    s = str(e).splitlines()[0] if str(e) else ""
    return ("%s: %s" % (type(e).__name__, s))[:160]


def make_picklescan():
    # picklescan's own API, as its CLI `picklescan -p FILE` calls it (default, non-strict mode):
    # exit 1 when issues_count > 0 (a dangerous global), 2 on scan_err (a pickle that stopped
    # parsing after some globals), 0 otherwise.
    from picklescan.scanner import scan_file_path

    def scan(path):
        r = scan_file_path(path)
        if r.issues_count > 0:
            bad = sorted("%s.%s" % (g.module, g.name) for g in r.globals
                         if g.safety.value == "dangerous")
            return "flagged", "dangerous: " + ", ".join(bad[:4]), {}
        sus = sorted("%s.%s" % (g.module, g.name) for g in r.globals
                     if g.safety.value == "suspicious")
        x = {"suspicious": ", ".join(sus[:4])} if sus else {}
        if r.scan_err:
            return "error", "scan_err (pickle parse error)", x
        return "clean", "", x
    return scan


def make_modelscan():
    # modelscan's own API, as its CLI `modelscan -p FILE` calls it: one ModelScan with the default
    # settings (made once; scan() resets its state), exit 1 on issues, 2 on errors, 3 when nothing
    # was scanned (every scanner skipped the file).
    import copy
    from modelscan.modelscan import ModelScan
    from modelscan.settings import DEFAULT_SETTINGS
    ms = ModelScan(settings=copy.deepcopy(DEFAULT_SETTINGS))

    def scan(path):
        ms.scan(path)
        if ms.issues.all_issues:
            ops = sorted(set("%s.%s" % (i.details.module, i.details.operator)
                             for i in ms.issues.all_issues))
            return "flagged", "unsafe operator: " + ", ".join(ops[:4]), {}
        if ms.errors:
            return "error", "; ".join(sorted(set(str(e.to_dict().get("description", e))[:80]
                                                 for e in ms.errors)))[:160], {}
        if not ms.scanned:
            why = "; ".join(sorted(set(s.message for s in ms.skipped)))[:120]
            return "error", "nothing scanned (%s)" % why, {}
        return "clean", "", {}
    return scan


def make_fickling():
    # fickling's own scanning API (fickling.loader, the one its Hugging Face scanner uses):
    # scan_zip_archive(graceful=True) for a zip (every .pkl/.pickle/.bin member), scan_file(
    # graceful=True) for anything else (the stacked pickles of the legacy format). Dispatch is on
    # the content, not on the extension (the Hugging Face path sends every .pt/.pth to the zip
    # scanner, which cannot read a legacy file). fickling's own rule: unsafe above LIKELY_SAFE.
    import zipfile
    from fickling.analysis import Severity
    from fickling.loader import scan_file, scan_zip_archive

    def scan(path):
        if zipfile.is_zipfile(path):
            results = list(scan_zip_archive(path, graceful=True).values())
        else:
            results = [scan_file(path, graceful=True)]
        worst, why = Severity.LIKELY_SAFE, ""
        for r in results:
            for a in r.results:
                if a.severity > worst:
                    worst = a.severity
                    why = "; ".join(sorted(set(str(x.analysis_name) for x in a.results
                                               if x.severity == worst)))
        errors = [e for r in results for e in r.errors]
        x = {"severity": worst.name, "errors": len(errors)}
        if worst > Severity.LIKELY_SAFE:
            return "flagged", "%s (%s)" % (worst.name, why), x
        if errors:
            return "error", errors[0][:160], x
        return "clean", "" if results else "no pickle member", x
    return scan


def worker(argv):
    peer, listfile, start, skip, timeout, mem_mb = argv
    start, timeout, mem_mb = int(start), float(timeout), int(mem_mb)
    skip = set(int(x) for x in skip.split(",") if x)
    # The protocol goes to a copy of fd 1; whatever the peers print goes nowhere.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    if mem_mb > 0:
        lim = mem_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    import logging
    logging.disable(logging.CRITICAL)  # the peers log every finding; the best case logs nothing
    import warnings
    warnings.simplefilter("ignore")

    def on_alarm(signum, frame):
        raise PeerTimeout()
    signal.signal(signal.SIGALRM, on_alarm)

    with open(listfile) as f:
        paths = [line.rstrip("\n") for line in f]
    scan = {"picklescan": make_picklescan, "modelscan": make_modelscan,
            "fickling": make_fickling}[peer]()

    def one(path):
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            return scan(path)
        except PeerTimeout:
            return "error", "timeout after %gs" % timeout, {}
        except (Exception, RecursionError, MemoryError) as e:  # noqa: BLE001
            return "error", "raised " + _short(e), {}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def send(obj):
        proto.write(json.dumps(obj) + "\n")

    for i in range(start, len(paths)):
        if i in skip:
            continue
        send({"start": i})
        t0 = time.perf_counter()
        v, d, x = one(paths[i])
        send({"i": i, "v": v, "d": d, "x": x, "t": time.perf_counter() - t0})
    # Then one timed pass over all files (less those that killed or hung a worker) per "pass" line
    # on stdin, so that the parent can take turns with the other tools.
    timed = [p for i, p in enumerate(paths) if i not in skip]
    send({"ready": True})
    for line in sys.stdin:
        if line.strip() != "pass":
            break
        t0 = time.perf_counter()
        for p in timed:
            one(p)
        send({"pass": True, "n": len(timed), "s": time.perf_counter() - t0})


# ---- the parent ----------------------------------------------------------------------------------

class Worker:
    """One worker process and its line protocol."""

    def __init__(self, cmd, log, cwd):
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                  cwd=cwd, start_new_session=True)
        self.buf = b""

    def next(self, deadline):
        """The next message; None when the worker is gone, "hung" past the deadline."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return "hung"
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if not r:
                continue
            chunk = os.read(self.p.stdout.fileno(), 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def send(self, line):
        try:
            self.p.stdin.write(line.encode() + b"\n")
            self.p.stdin.flush()
            return True
        except OSError:
            return False

    def kill(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except OSError:
            pass
        self.p.wait()

    def close(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()


def peer_verdicts(peer, listfile, paths, timeout, mem_mb, work):
    """Every file's verdict from one peer. A worker that dies or hangs on a file is replaced by a
    new one that starts at the next file. Returns the verdicts, the worker left ready for the timed
    passes (or None), the files left out of those, notes and the seconds per file."""
    n = len(paths)
    verdicts, per_file_s, skip = {}, {}, []
    start, note = 0, []
    log = open(os.path.join(work, "%s.stderr" % peer), "ab")
    while True:
        cmd = [sys.executable, os.path.abspath(__file__), "worker", peer, listfile, str(start),
               ",".join(map(str, skip)), str(timeout), str(mem_mb)]
        w = Worker(cmd, log, work)
        current, last, ready, hung = None, None, False, False
        deadline = time.monotonic() + timeout + 60  # start-up
        while True:
            m = w.next(deadline)
            if m is None or m == "hung":
                hung = m == "hung"
                break
            if "start" in m:
                current = m["start"]
                deadline = time.monotonic() + timeout + 15  # the alarm, then a grace period
            elif "i" in m:
                verdicts[m["i"]] = (m["v"], m["d"], m["x"])
                per_file_s[m["i"]] = m["t"]
                current, last = None, m["i"]
            elif m.get("ready"):
                ready = True
                break
        if ready:
            break
        w.kill()
        why = "hung (killed)" if hung else "worker died (status %d)" % w.p.returncode
        if current is not None:
            verdicts[current] = ("error", why, {})
            skip.append(current)
            start = current + 1
            note.append("%s on %s" % (why, os.path.basename(paths[current])))
            continue
        if last is not None:  # between two files: go on with the next one
            start = last + 1
            note.append("%s after %s" % (why, os.path.basename(paths[last])))
            continue
        note.append("%s at start-up" % why)
        w = None
        break
    log.close()
    for i in range(n):
        verdicts.setdefault(i, ("error", "never scanned (worker failed)", {}))
    if skip:
        note.append("%d files left out of its timing (they killed or hung it)" % len(skip))
    return verdicts, w, skip, note, per_file_s


def peer_pass(w, limit):
    """One timed pass of a ready worker: (files, seconds), or None when it fails."""
    if not w.send("pass"):
        return None
    m = w.next(time.monotonic() + limit)
    if not isinstance(m, dict) or "pass" not in m:
        return None
    return m["n"], m["s"]


def ptc_verdicts(exe, env, paths, timeout):
    """Verdicts from one `ptc verify --json` over all files, checked against (and completed by)
    one `ptc verify --json FILE` per file. Neither run is timed."""
    result = {"verdicts": {}, "note": [], "version": "?", "one_ok": False}
    argv = [exe, "verify", "--json"]
    try:
        v = subprocess.run([exe, "--version"], env=env, capture_output=True, timeout=30)
        result["version"] = (v.stdout or v.stderr).decode(errors="replace").strip().splitlines()[0]
    except Exception as e:  # noqa: BLE001
        result["note"].append("ptc --version: " + _short(e))

    def parse(out, expect_paths):
        doc = json.loads(out)
        got = {}
        by_path = {f["path"]: f for f in doc["files"]}
        for i, p in expect_paths:
            f = by_path.get(p) or by_path.get(os.path.abspath(p))
            if f is not None:
                why = "; ".join("%s %s %s" % (x.get("code", ""), x.get("kind", ""),
                                              x.get("detail", "")) for x in f.get("findings", []))
                got[i] = (f["verdict"], why[:160], {})
        return got

    try:
        r = subprocess.run(argv + paths, env=env, capture_output=True, timeout=ptc_limit(timeout))
        if r.returncode in (0, 1):
            got = parse(r.stdout, list(enumerate(paths)))
            result["verdicts"] = got
            result["one_ok"] = len(got) == len(paths)
            if len(got) != len(paths):
                result["note"].append("one-process run: %d of %d files in the JSON"
                                      % (len(got), len(paths)))
        else:
            result["note"].append("one-process run: exit %d: %s" % (
                r.returncode, r.stderr.decode(errors="replace").strip()[-200:]))
    except Exception as e:  # noqa: BLE001
        result["note"].append("one-process run: " + _short(e))

    mismatch = []
    for i, p in enumerate(paths):
        try:
            r = subprocess.run(argv + [p], env=env, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            one = ("error", "timeout after %gs" % timeout, {})
        else:
            if r.returncode in (0, 1):
                try:
                    got = parse(r.stdout, [(i, p)])
                except ValueError:
                    got = {}
                one = got.get(i, ("error", "not in the JSON", {}))
            else:
                one = ("error", "exit %d: %s" % (r.returncode,
                                                 r.stderr.decode(errors="replace").strip()[-120:]),
                       {})
        if i in result["verdicts"] and result["verdicts"][i][0] != one[0]:
            mismatch.append("%s: %s alone, %s with the others" % (
                os.path.basename(p), one[0], result["verdicts"][i][0]))
        result["verdicts"].setdefault(i, one)
    if mismatch:
        result["note"].append("%d files get another verdict alone than in the one-process run: %s"
                              % (len(mismatch), "; ".join(mismatch[:5])))
    return result


def ptc_limit(timeout):
    return max(120, timeout * 10)


def ptc_time_one(exe, env, paths, timeout):
    """Seconds for one `ptc verify --json` over all files, or None."""
    t0 = time.perf_counter()
    try:
        r = subprocess.run([exe, "verify", "--json"] + paths, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=ptc_limit(timeout))
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - t0 if r.returncode in (0, 1) else None


def ptc_time_per_file(exe, env, paths, timeout):
    """Seconds for one `ptc verify --json FILE` per file, one after the other, or None."""
    t0 = time.perf_counter()
    for p in paths:
        try:
            subprocess.run([exe, "verify", "--json", p], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
    return time.perf_counter() - t0


def peer_versions(peers):
    from importlib import metadata
    out = {}
    for p in peers:
        try:
            out[p] = metadata.version(p)
        except Exception:  # noqa: BLE001
            out[p] = None
    return out


def build_files(srcdir, builddir):
    """[(path, set, expected)], set 'hostile' or 'benign'; expected ok|unsafe|malformed|? .
    The torch folders are read from builddir, where testdata/torch/unpack.sh lays them out with
    the packed files unpacked."""
    files = []
    notes = []
    hdir = os.path.join(srcdir, "testdata", "hostile")
    with open(os.path.join(hdir, "manifest.json")) as f:
        manifest = json.load(f)
    expect = {e["file"]: e["verdict"] for e in manifest["files"]}
    present = sorted(n for n in os.listdir(os.path.join(hdir, "files")) if n.endswith(".pth"))
    for n in present:
        files.append((os.path.join(hdir, "files", n), "hostile", expect.get(n, "?")))
    missing = sorted(set(expect) - set(present))
    if missing:
        notes.append("%d manifest entries have no file: %s" % (len(missing), ", ".join(missing[:5])))
    unknown = [n for n in present if n not in expect]
    if unknown:
        notes.append("%d files are not in the manifest (left out of the verdict counts): %s"
                     % (len(unknown), ", ".join(unknown[:5])))
    for sub in ("testdata/torch/v2.6", "testdata/torch/v1.13", "testdata/vectors"):
        d = os.path.join(builddir if sub.startswith("testdata/torch/") else srcdir, sub)
        if not os.path.isdir(d):
            notes.append("%s is missing" % sub)
            continue
        for n in sorted(os.listdir(d)):
            p = os.path.join(d, n)
            if os.path.isfile(p) and not n.endswith((".json", ".md", ".py")):
                files.append((p, "benign", "ok"))
    return files, notes


def median(xs):
    return statistics.median(xs) if xs else None


def main_run(args):
    import argparse
    ap = argparse.ArgumentParser(prog="compare.py run")
    ap.add_argument("--srcdir", required=True)
    ap.add_argument("--builddir", default="", help="where testdata/torch is laid out (default: --srcdir)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--ptc", default="")
    ap.add_argument("--ptc-libpath", default="")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--mem-mb", type=int, default=4096)
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--out", default="")
    ap.add_argument("--tsv", default="")
    ap.add_argument("--left-out", default="")
    a = ap.parse_args(args)
    a.srcdir = os.path.abspath(a.srcdir)
    a.work = os.path.abspath(a.work)
    peers = [p for p in a.peers.replace(",", " ").split() if p]
    for p in peers:
        if p not in PEERS:
            sys.exit("compare.py: unknown peer %r (known: %s)" % (p, ", ".join(PEERS)))

    files, notes = build_files(a.srcdir, a.builddir or a.srcdir)
    paths = [f[0] for f in files]
    n = len(paths)
    listfile = os.path.join(a.work, "files.txt")
    with open(listfile, "w") as f:
        for p in paths:
            if "\n" in p:
                sys.exit("compare.py: a path holds a newline: %r" % p)
            f.write(p + "\n")
    nbytes = sum(os.path.getsize(p) for p in paths)
    for p in paths:  # the page cache holds every file before anybody is timed
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass
    versions = peer_versions(peers)
    count = {}
    for _, s, e in files:
        count[(s, e)] = count.get((s, e), 0) + 1
    print("%d files, %.1f MB: hostile corpus %d (expected unsafe %d, malformed %d, ok %d), benign %d"
          % (n, nbytes / 1e6, sum(1 for f in files if f[1] == "hostile"),
             count.get(("hostile", "unsafe"), 0), count.get(("hostile", "malformed"), 0),
             count.get(("hostile", "ok"), 0), count.get(("benign", "ok"), 0)))
    for x in notes:
        print("note: " + x)

    # Verdicts first, tool after tool; then the timed rounds, each tool once per round in turn, so
    # that a drift of the machine's load hits every tool alike.
    tools = []  # [name, version, verdicts {i: (verdict, detail, extra)}, timing rows, notes]
    timers = []  # (tool entry, label, files, run() -> seconds or None)
    if a.ptc:
        env = dict(os.environ)
        if a.ptc_libpath:
            env["LD_LIBRARY_PATH"] = a.ptc_libpath + (
                ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        print("ptc verify: verdicts of %d files ..." % n, flush=True)
        t0 = time.monotonic()
        r = ptc_verdicts(a.ptc, env, paths, a.timeout)
        print("  done in %.1fs (%s)" % (time.monotonic() - t0, r["version"]), flush=True)
        entry = ["ptc", r["version"], r["verdicts"], [], r["note"]]
        tools.append(entry)
        if r["one_ok"]:
            timers.append((entry, "ptc verify, one process over all files", n,
                           lambda: ptc_time_one(a.ptc, env, paths, a.timeout)))
        timers.append((entry, "ptc verify, one process per file", n,
                       lambda: ptc_time_per_file(a.ptc, env, paths, a.timeout)))
    workers = []
    for peer in peers:
        print("%s %s: verdicts of %d files ..." % (peer, versions.get(peer), n), flush=True)
        t0 = time.monotonic()
        v, w, skip, note, per_file_s = peer_verdicts(peer, os.path.abspath(listfile), paths,
                                                     a.timeout, a.mem_mb, a.work)
        total = sum(per_file_s.values())
        slow = sorted(per_file_s.items(), key=lambda kv: -kv[1])[:3]
        print("  done in %.1fs; slowest: %s" % (time.monotonic() - t0, ", ".join(
            "%s %.2fs" % (os.path.relpath(paths[i], a.srcdir), t) for i, t in slow)), flush=True)
        entry = [peer, versions.get(peer), v, [], note]
        tools.append(entry)
        tools.extend(derived_rows(peer, versions.get(peer), v))
        if w is not None:
            workers.append(w)
            # A pass may take 5 times what the verdict pass took, plus the alarm.
            timers.append((entry, "%s, in-process (imported once) over all files" % peer,
                           n - len(skip), (w, 5 * total + a.timeout + 60)))
    times = {id(t): [] for t in timers}
    failed = set()
    for k in range(a.repeat):
        print("timed round %d of %d ..." % (k + 1, a.repeat), flush=True)
        for t in timers:
            if id(t) in failed:
                continue
            entry, label, nf, run = t
            if isinstance(run, tuple):
                got = peer_pass(*run)
                s = got[1] if got else None
            else:
                s = run()
            if s is None:
                failed.add(id(t))
                entry[4].append("timed run %d (%s) failed: no timing" % (k + 1, label.split(", ", 1)[1]))
                if isinstance(run, tuple):
                    run[0].kill()
                continue
            times[id(t)].append(s)
    for w in workers:
        w.close()
    for t in timers:
        entry, label, nf, _ = t
        if id(t) not in failed and times[id(t)]:
            entry[3].append((label, nf, times[id(t)]))
    tools = [tuple(t) for t in tools]

    out = report(files, tools, a, nbytes)
    print()
    print(out)
    if a.out:
        with open(a.out, "w") as f:
            f.write(out)
    if a.tsv:
        with open(a.tsv, "w") as f:
            f.write("file\tset\texpected\t" + "\t".join("%s\t%s detail" % (t[0], t[0]) for t in tools)
                    + "\n")
            for i, (p, s, e) in enumerate(files):
                row = [os.path.relpath(p, a.srcdir), s, e]
                for t in tools:
                    v, d = t[2].get(i, ("error", "no verdict"))[:2]
                    row += [v, d.replace("\t", " ").replace("\n", " ")]
                f.write("\t".join(row) + "\n")
    # Details on stdout only: which files each tool missed or mis-flagged.
    print()
    print("Details (hostile-corpus misses and false alarms, errors):")
    for name, _, v, _, note in tools:
        lines = []
        for i, (p, s, e) in enumerate(files):
            got, d = v.get(i, ("error", "no verdict"))[:2]
            cls = ptc_class(got) if name == "ptc" else got
            b = os.path.basename(p) if s == "hostile" else os.path.relpath(p, a.srcdir)
            if e == "unsafe" and ((name == "ptc" and got != "unsafe") or
                                  (name != "ptc" and cls != "flagged")):
                lines.append("  missed  %-44s %s %s" % (b, got, d))
            elif e == "ok" and cls == "flagged":
                lines.append("  alarm   %-44s %s %s" % (b, got, d))
            elif cls == "error" and e != "unsafe":
                lines.append("  error   %-44s %s" % (b, d))
        print("%s: %d lines%s" % (name, len(lines), "" if not note else " (" + "; ".join(note) + ")"))
        for x in lines:
            print(x)
    return 0


def derived_rows(peer, version, v):
    """Rows read from the same scan with another threshold: picklescan's --strict (its suspicious
    globals count as dangerous) and fickling at its two overtly-malicious severities only."""
    if peer == "picklescan":
        dv = {}
        for i, (verdict, d, x) in v.items():
            if verdict != "flagged" and x.get("suspicious"):
                dv[i] = ("flagged", "suspicious: " + x["suspicious"], x)
            else:
                dv[i] = (verdict, d, x)
        return [("picklescan --strict", version, dv, [],
                 ["same scan as picklescan; the globals it calls suspicious count as dangerous, as "
                  "`picklescan --strict` does"])]
    if peer == "fickling":
        overt = ("LIKELY_OVERTLY_MALICIOUS", "OVERTLY_MALICIOUS")
        dv = {}
        for i, (verdict, d, x) in v.items():
            if verdict == "flagged" and x.get("severity") not in overt:
                if x.get("errors"):
                    dv[i] = ("error", "%d scan errors (below the threshold: %s)" % (x["errors"], d), x)
                else:
                    dv[i] = ("clean", "below the threshold: " + d, x)
            else:
                dv[i] = (verdict, d, x)
        return [("fickling, overt only", version, dv, [],
                 ["same scan as fickling; flagged only at severity LIKELY_OVERTLY_MALICIOUS or "
                  "OVERTLY_MALICIOUS (fickling's own threshold is anything above LIKELY_SAFE)"])]
    return []


def ptc_class(v):
    """ptc's verdict on the flagged/clean/error scale of the peers: rejected is flagged."""
    return {"ok": "clean", "unsafe": "flagged", "malformed": "flagged"}.get(v, "error")


def report(files, tools, a, nbytes):
    cats = [("hostile", "unsafe"), ("hostile", "malformed"), ("hostile", "ok"), ("benign", "ok")]
    size = {c: sum(1 for f in files if (f[1], f[2]) == c) for c in cats}
    L = []
    L.append("## ptc verify against Python pickle scanners")
    L.append("")
    L.append("%d files (%.1f MB): the hostile corpus `testdata/hostile/files` (%d; expected verdicts "
             "from its manifest.json at run time) and %d benign checkpoints written by real torch "
             "(`testdata/torch/v2.6`, `testdata/torch/v1.13`, `testdata/vectors`). "
             "Python %s; %d CPUs; per-file limit %gs%s."
             % (len(files), nbytes / 1e6, sum(1 for f in files if f[1] == "hostile"),
                size[("benign", "ok")], platform.python_version(), os.cpu_count() or 0, a.timeout,
                ", peer address space %d MiB" % a.mem_mb if a.mem_mb > 0 else ""))
    L.append("")
    L.append("| tool | version |")
    L.append("|---|---|")
    for name, ver, _, _, _ in tools:
        L.append("| %s | %s |" % (name, ver))
    L.append("")

    def tally(name, v, cat):
        t = {"flagged": 0, "clean": 0, "error": 0}
        exact = 0
        for i, f in enumerate(files):
            if (f[1], f[2]) != cat:
                continue
            got = v.get(i, ("error", ""))[0]
            t[ptc_class(got) if name == "ptc" else got] += 1
            exact += got == f[2]
        return t, exact

    L.append("### Hostile corpus (flagged / clean / error)")
    L.append("")
    L.append("| tool | expected unsafe (%d) | missed payloads | expected malformed (%d) "
             "| accepted malformed | expected ok (%d) | false alarms | exact agreement |"
             % (size[("hostile", "unsafe")], size[("hostile", "malformed")], size[("hostile", "ok")]))
    L.append("|---|---|---|---|---|---|---|---|")
    for name, _, v, _, _ in tools:
        tu, eu = tally(name, v, ("hostile", "unsafe"))
        tm, em = tally(name, v, ("hostile", "malformed"))
        to, eo = tally(name, v, ("hostile", "ok"))
        fmt = lambda t: "%d / %d / %d" % (t["flagged"], t["clean"], t["error"])  # noqa: E731
        if name == "ptc":
            missed = "%d (%d ok, %d malformed, %d error)" % (
                size[("hostile", "unsafe")] - eu,
                *[sum(1 for i, f in enumerate(files) if (f[1], f[2]) == ("hostile", "unsafe")
                      and v.get(i, ("error",))[0] == k) for k in ("ok", "malformed", "error")])
            exact = "%d / %d" % (eu + em + eo, sum(size[c] for c in cats[:3]))
        else:
            missed = "%d (%d clean, %d error)" % (tu["clean"] + tu["error"], tu["clean"], tu["error"])
            exact = "n/a"
        L.append("| %s | %s | %s | %s | %d | %s | %d | %s |" % (
            name, fmt(tu), missed, fmt(tm), tm["clean"], fmt(to), to["flagged"], exact))
    L.append("")
    L.append("### Benign checkpoints written by torch (%d)" % size[("benign", "ok")])
    L.append("")
    L.append("| tool | flagged / clean / error | false alarms |")
    L.append("|---|---|---|")
    for name, _, v, _, _ in tools:
        t, _ = tally(name, v, ("benign", "ok"))
        L.append("| %s | %d / %d / %d | %d |" % (name, t["flagged"], t["clean"], t["error"],
                                               t["flagged"]))
    L.append("")
    L.append("### Throughput over all %d files (median of %d runs)" % (len(files), a.repeat))
    L.append("")
    L.append("| tool | how | files | median s | files/s |")
    L.append("|---|---|---|---|---|")
    rates = {}
    for name, _, _, timing, _ in tools:
        for how, nf, ts in timing:
            m = median(ts)
            rate = nf / m if m else 0.0
            rates[how] = (name, rate)
            L.append("| %s | %s | %d | %.3f | %.1f |" % (name, how.split(", ", 1)[1], nf, m, rate))
    peer_rates = [(r, how) for how, (name, r) in rates.items() if name != "ptc"]
    fastest = max(peer_rates) if peer_rates else None
    L.append("")
    if fastest:
        L.append("Fastest peer: %s, %.1f files/s." % (fastest[1].split(",")[0], fastest[0]))
        for how, (name, r) in rates.items():
            if name == "ptc":
                ratio = r / fastest[0]
                L.append("- %s: %.1f files/s, **%.1fx** the fastest peer (target >= 50x: %s)"
                         % (how, r, ratio, "met" if ratio >= 50 else "MISS"))
    for p in [x for x in a.left_out.split(",") if x]:
        L.append("- %s: not measured (pip could not install it for this Python)" % p)
    if not any(t[0] == "ptc" for t in tools):
        L.append("- ptc: not measured (`ptc verify` is not built); the target is ptc files/s >= 50x "
                 "the fastest peer's.")
    L.append("")
    L.append("flagged: the tool calls the file dangerous (ptc: `unsafe` or `malformed`, i.e. rejected); "
             "error: it failed to scan the file (raised, timed out, could not parse, or scanned "
             "nothing); a file with both a finding and an error counts as flagged. Missed payloads: "
             "expected-`unsafe` files not flagged (for ptc: any verdict but `unsafe`). Exact "
             "agreement: ptc's verdict equals the manifest's. Peers run in-process (imported once, "
             "import time excluded); ptc runs as a process, once over all files and once per file.")
    notes = [(name, n) for name, _, _, _, nn in tools for n in nn]
    if notes:
        L.append("")
        for name, x in notes:
            L.append("- %s: %s" % (name, x))
    L.append("")
    if any(t[0] == "ptc" for t in tools):
        L.append("ptc verdicts against the manifest (rows expected, columns ptc):")
        L.append("")
        name, _, v, _, _ = [t for t in tools if t[0] == "ptc"][0]
        got_k = ("ok", "unsafe", "malformed", "error")
        L.append("| expected | " + " | ".join(got_k) + " |")
        L.append("|---|" + "---|" * len(got_k))
        for c in cats:
            row = [sum(1 for i, f in enumerate(files) if (f[1], f[2]) == c
                       and v.get(i, ("error",))[0] == k) for k in got_k]
            L.append("| %s %s (%d) | %s |" % (c[0], c[1], size[c], " | ".join(map(str, row))))
        L.append("")
    return "\n".join(L)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "run":
        sys.exit(main_run(sys.argv[2:]))
    else:
        sys.exit(__doc__)
