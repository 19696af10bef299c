#!/usr/bin/env python3
"""check_corpus_torch.py - `ptc verify`'s torch 2.6 predictions and ptc's allowlist, against live torch.

1. The hostile corpus: every file of testdata/hostile/files is loaded with
   torch.load(weights_only=True, map_location='cpu') in a forked child (check_corpus.py's
   torch_answer: 12 GiB address-space limit, 60 s alarm), and the answer (loads / refuses) is
   compared with
   - what `ptc verify --json` predicts for it (`torch_loads`), with the exceptions that
     tests/fixtures/check_verify_cli.py allows: the files of its KNOWN_MISPREDICTED (each must still
     be mispredicted, so the list cannot go stale) and a null prediction for an ambiguous zip;
   - the answer recorded in testdata/hostile/torch-2.6.json, which the fixture tier
     (check_verify_cli.py) holds ptc to without torch: a stale recording fails here.
2. The allowlist: ptc's built-in list of globals (tests/interop/allowlist_dump, from
   lib/pth/policy.c) is compared set-wise with torch's own: _get_allowed_globals() of
   torch/_weights_only_unpickler.py plus the globals torch registers for itself at import
   (torch.serialization.get_safe_globals()). Both counts are printed, and every difference must be
   one of INTENDED_DEVIATIONS below, each with its reason (an entry that no longer differs fails,
   so the list cannot go stale). The lookup must agree with the list (every listed name allowed;
   every torch name that ptc allows listed), and the count that README.md and docs/ptc-verify.1
   state ("128 globals") must be both ptc's and torch's built-in count.

This checks torch 2.6 (the version ptc predicts): another torch version is a failure, not a skip.
Exit status: 0 all agree, 1 a difference, 77 torch is not importable (tests/interop/run.sh counts
that as a failure), 99 cannot run (ptc or allowlist_dump not built). Takes about a minute: one fork
per file.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402

HOSTILE = os.path.join(ic.SRCDIR, "testdata", "hostile")
PTC = os.path.join(ic.BUILDDIR, "tools", "ptc")
DUMP = os.path.join(ic.BUILDDIR, "tests", "interop", "allowlist_dump")

# Where ptc's allowlist differs from torch 2.6's on purpose: name -> (side, reason). side is
# "torch" when only torch allows the name, "ptc" when only ptc does.
INTENDED_DEVIATIONS = {
    # torch.load(weights_only=True) of a jagged nested tensor works in torch 2.6; ptc refuses the
    # file as unsafe, and `ptc verify` predicts (wrongly) that torch refuses it too. No file of the
    # hostile corpus holds one, so check_corpus below cannot see that misprediction.
    "torch.nested._internal.nested_tensor.NestedTensor": (
        "torch", "registered by torch 2.6 itself (add_safe_globals when torch.nested loads), outside "
        "its built-in list; ptc does not rebuild nested jagged tensors, so it refuses the global "
        "before the pickle runs instead of failing later"),
    "torch.nested._internal.nested_tensor._rebuild_njt": (
        "torch", "the rebuild function of the same nested jagged tensors, registered the same way"),
}


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Report:
    def __init__(self):
        self.failures = []

    def check(self, cond, what):
        if not cond:
            self.failures.append(what)
            print("FAIL: " + what)
        return cond


def check_corpus(torch, corpus, known, rep):
    man = json.load(open(os.path.join(HOSTILE, "manifest.json")))
    recorded = json.load(open(os.path.join(HOSTILE, "torch-2.6.json")))["files"]
    p = subprocess.run([PTC, "verify", "--json", os.path.join(HOSTILE, "files")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        doc = json.loads(p.stdout.decode("utf-8"))
    except ValueError as e:
        rep.check(False, "ptc verify --json: output is not JSON (%s; exit %d): %r" % (
            e, p.returncode, p.stderr[-300:]))
        return
    got = {os.path.basename(f["path"]): f for f in doc["files"]}
    rep.check(len(got) == len(man["files"]),
              "ptc verify reported %d files, the manifest lists %d" % (len(got), len(man["files"])))
    loads = right = wrong = known_n = unknown = stale = 0
    for e in man["files"]:
        name = e["file"]
        answer = corpus.torch_answer(os.path.join(HOSTILE, "files", name))
        live = answer == "loaded"
        loads += live
        if name not in recorded:
            stale += 1
            rep.check(False, "%s: no answer recorded in torch-2.6.json (torch %s)" % (name, answer[:120]))
        elif recorded[name]["loads"] != live:
            stale += 1
            rep.check(False, "%s: torch-2.6.json records that torch %s it, live torch %s: %s" % (
                name, "loads" if recorded[name]["loads"] else "refuses",
                "loads it" if live else "refuses it", answer[:160]))
        f = got.get(name)
        if not rep.check(f is not None, "%s: not reported by ptc verify" % name):
            continue
        pred = f["torch_loads"]
        if pred is None:
            unknown += 1
            rep.check(f["format"] == "zip" and any(x["kind"] == "load" for x in f["findings"]),
                      "%s: ptc predicts nothing about torch outside an ambiguous zip" % name)
        elif name in known:
            known_n += 1
            rep.check(pred != live, "%s: listed in KNOWN_MISPREDICTED (%s) but now predicted right "
                      "(torch %s); remove it there" % (name, known[name], answer[:120]))
        elif pred == live:
            right += 1
        else:
            wrong += 1
            rep.check(False, "%s: ptc predicts torch 2.6 %s, live torch %s: %s" % (
                name, "loads it" if pred else "refuses it", "loads it" if live else "refuses it",
                answer[:160]))
    print("corpus: %d files; live torch %s loads %d, refuses %d; ptc's prediction right for %d, "
          "wrong for %d, %d known mispredictions, %d unknown (ambiguous zips); torch-2.6.json "
          "agrees with live torch on %d of %d" % (
              len(man["files"]), torch.__version__, loads, len(man["files"]) - loads, right, wrong,
              known_n, unknown, len(man["files"]) - stale, len(man["files"])))


def torch_globals(torch):
    """(built-in list, registered by torch itself) as sets of "module.name"."""
    import torch._weights_only_unpickler as wu
    builtin = set(wu._get_allowed_globals())
    registered = set()
    for g in torch.serialization.get_safe_globals():
        if isinstance(g, tuple):  # (object, "module.name") as add_safe_globals also takes
            registered.add(g[1])
        else:
            registered.add("%s.%s" % (g.__module__, g.__qualname__))
    return builtin, registered


def check_allowlist(torch, rep):
    p = subprocess.run([DUMP], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if not rep.check(p.returncode == 0, "allowlist_dump exited %d: %s" % (
            p.returncode, p.stderr.decode("utf-8", "replace").strip())):
        return
    listed = [line.split()[0] for line in p.stdout.decode().splitlines() if line.strip()]
    ours = set(listed)
    rep.check(len(ours) == len(listed), "allowlist_dump lists a name twice: %s" % sorted(
        n for n in ours if listed.count(n) > 1))
    builtin, registered = torch_globals(torch)
    theirs = builtin | registered
    # What the lookup answers for each of torch's names: the list must not miss one it allows.
    q = subprocess.run([DUMP, "--allows"], input="\n".join(sorted(theirs)).encode() + b"\n",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    allowed = {line.split()[1] for line in q.stdout.decode().splitlines() if line.startswith("1 ")}
    rep.check(q.returncode == 0, "allowlist_dump --allows exited %d" % q.returncode)
    rep.check(allowed == ours & theirs, "ptc_policy_allows and the listed allowlist disagree on "
              "torch's names: allowed but not listed %s, listed but not allowed %s" % (
                  sorted(allowed - ours), sorted((ours & theirs) - allowed)))
    only_torch, only_ptc = theirs - ours, ours - theirs
    print("allowlist: ptc %d globals; torch %s %d (%d built in, _get_allowed_globals(), and %d it "
          "registers itself, get_safe_globals()); in both %d" % (
              len(ours), torch.__version__, len(theirs), len(builtin), len(registered),
              len(ours & theirs)))
    for side, names in (("torch", only_torch), ("ptc", only_ptc)):
        for n in sorted(names):
            dev = INTENDED_DEVIATIONS.get(n)
            if dev and dev[0] == side:
                print("  only in %-5s %s: intended: %s" % (side, n, dev[1]))
            else:
                rep.check(False, "only %s allows %s, and INTENDED_DEVIATIONS does not explain it" % (
                    side, n))
    for n, (side, _) in sorted(INTENDED_DEVIATIONS.items()):
        rep.check(n in (only_torch if side == "torch" else only_ptc),
                  "INTENDED_DEVIATIONS says only %s allows %s, which is no longer so; remove it" % (
                      side, n))
    # The number the manual states is a tested fact: ptc's count, and torch's built-in count.
    for doc in ("README.md", os.path.join("docs", "ptc-verify.1")):
        text = open(os.path.join(ic.SRCDIR, doc), encoding="utf-8").read()
        counts = [int(c) for c in re.findall(r"(\d+) globals", text)]
        if rep.check(counts, "%s no longer states the allowlist's size ('N globals')" % doc):
            rep.check(all(c == len(ours) == len(builtin) for c in counts),
                      "%s states %s globals; ptc lists %d, torch's built-in list has %d" % (
                          doc, counts, len(ours), len(builtin)))


def main():
    torch = ic.require_torch()
    rep = Report()
    if not re.match(r"2\.6(\.|$)", torch.__version__):
        print("FAIL: this checks ptc's predictions of torch 2.6, and %s has torch %s (set TORCH_PYTHON "
              "to a Python with torch 2.6)" % (sys.executable, torch.__version__))
        return 1
    for path in (PTC, DUMP):
        if not os.access(path, os.X_OK):
            print("ERROR: %s is not built (make check builds it)" % path)
            return 99
    corpus = load_module("check_corpus", os.path.join(HOSTILE, "check_corpus.py"))
    known = load_module("check_verify_cli", os.path.join(
        ic.SRCDIR, "tests", "fixtures", "check_verify_cli.py")).KNOWN_MISPREDICTED
    check_allowlist(torch, rep)
    check_corpus(torch, corpus, known, rep)
    print("check_corpus_torch: %d failures" % len(rep.failures))
    return 1 if rep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
