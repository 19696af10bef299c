#!/bin/sh
# run-all.sh - runs every benchmark of tests/bench/ against its peer and writes docs/performance.md:
# each figure with its peer, the ratio, the command that printed it and the machine it ran on.
#
#   tests/bench/run-all.sh                       # every area, into docs/performance.md of this tree
#   tests/bench/run-all.sh load save             # only those areas (the others' sections are kept)
#   top_builddir=BUILD tests/bench/run-all.sh    # benchmark the programs of another build tree
#
# Areas, in the order they are run: train (fp32 and bf16 training and inference against PyTorch,
# with the fraction of the GEMM ceiling), infer (one-image latency), ddp (2 ranks against one
# process and PyTorch DDP), load (open and `ptc inspect --json`), verify (against picklescan),
# save (against a plain write + fsync and torch.save), hash (`ptc inspect --hash` against sha256sum,
# CRC-32 libraries against each other).
#
# Environment: BENCH_REPEAT (each area's default when unset) rounds per measurement, medians
# reported; PERF_DOC (default docs/performance.md of the source tree) the file written;
# BENCH_LOGDIR (default a temporary folder, deleted at the end) keeps each area's full output.
# Each area's own variables (see its README.md) pass through. An area whose run fails is recorded
# in the document as failed, with the last lines of its output, and the exit status is 1; the
# other areas still run. Speed is never asserted here: "MISSED" targets do not fail the run.
#
# Run it on an otherwise idle machine: the whole set takes about 30 minutes on 2 cores.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top_srcdir=$(cd "$here/../.." && pwd)
if [ -z "${top_builddir:-}" ] && [ -e "./tools/ptc" ]; then top_builddir=$(pwd); fi
: "${top_builddir:=$top_srcdir}"
top_builddir=$(cd "$top_builddir" && pwd)
export top_builddir

all_areas="train infer ddp load verify save hash"
areas=${*:-$all_areas}
for a in $areas; do
    case " $all_areas " in
    *" $a "*) ;;
    *) echo "run-all.sh: unknown area '$a' (areas: $all_areas)" >&2; exit 2 ;;
    esac
done

doc=${PERF_DOC:-$top_srcdir/docs/performance.md}
if [ -n "${BENCH_LOGDIR:-}" ]; then
    logdir=$BENCH_LOGDIR
    mkdir -p "$logdir" || exit 2
else
    logdir=$(mktemp -d "${TMPDIR:-/tmp}/ptc-bench.XXXXXX") || exit 2
    trap 'rm -rf "$logdir"' EXIT
fi

# The command that runs one area; its table goes to $BENCH_OUT.
area_command() {
    case $1 in
    train) echo "tests/bench/train/run.sh" ;;
    infer) echo "tests/bench/infer/run.sh" ;;
    ddp) echo "tests/bench/ddp/run.sh" ;;
    load) echo "tests/bench/load/run.sh" ;;
    verify) echo "tests/bench/verify/run.sh" ;;
    save) echo "tests/bench/save/run.sh" ;;
    hash) echo "tests/bench/hash/run.sh" ;;
    esac
}

status=0
for a in $areas; do
    cmd=$(area_command "$a")
    out="$logdir/$a.md"
    log="$logdir/$a.log"
    : >"$out"
    if [ ! -x "$top_srcdir/$cmd" ]; then
        printf 'not run: %s is not in this tree\n' "$cmd" >"$out.fail"
        status=1
        continue
    fi
    printf '%s: %s (log %s)\n' "$(date -u +%H:%M:%S)" "$cmd" "$log" >&2
    start=$(date +%s)
    if BENCH_OUT=$out "$top_srcdir/$cmd" >"$log" 2>&1; then
        rm -f "$out.fail"
    else
        rc=$?
        { printf 'failed (exit %s); the last lines of its output:\n\n```\n' "$rc"
          tail -n 15 "$log"
          printf '```\n'; } >"$out.fail"
        status=1
    fi
    echo $(($(date +%s) - start)) >"$out.seconds"
done

# The document: a header that names the machine, then one section per area, kept from the old
# document for the areas not run this time.
python3 - "$doc" "$logdir" "$top_srcdir" "$top_builddir" "$areas" "$all_areas" <<'EOF'
import os, platform, re, subprocess, sys, time

doc, logdir, srcdir, builddir, ran, every = sys.argv[1:7]
ran, every = ran.split(), every.split()

titles = {
    "train": "Training and batch inference (fp32 and bf16) against PyTorch 2.6",
    "infer": "One image through the model API against torch eager",
    "ddp": "Data-parallel training: 2 ranks against 1 process and PyTorch DDP",
    "load": "Opening a checkpoint and `ptc inspect --json` against torch.load",
    "verify": "`ptc verify` against picklescan",
    "save": "Saving against a plain write + fsync and torch.save",
    "hash": "`ptc inspect --hash` against sha256sum; CRC-32 implementations",
}
commands = {
    "train": "tests/bench/train/run.sh", "infer": "tests/bench/infer/run.sh",
    "ddp": "tests/bench/ddp/run.sh", "load": "tests/bench/load/run.sh",
    "verify": "tests/bench/verify/run.sh", "save": "tests/bench/save/run.sh",
    "hash": "tests/bench/hash/run.sh",
}


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              timeout=20).stdout.strip()
    except Exception:
        return ""


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def flags():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                have = line.split(":", 1)[1].split()
                want = ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "sha_ni"]
                return ", ".join(f for f in want if f in have) or "none of avx2/avx512/sha"
    except OSError:
        pass
    return "unknown"


# Old sections, by area, to keep those not run now.
old = {}
if os.path.exists(doc):
    text = open(doc).read()
    parts = re.split(r"^<!-- area: (\w+) -->\n", text, flags=re.M)
    for i in range(1, len(parts) - 1, 2):
        old[parts[i]] = parts[i + 1].split("\n<!-- end area -->", 1)[0]

try:
    import torch
    torch_v = torch.__version__
except Exception:
    torch_v = "not importable"

commit = sh(f"git -C '{srcdir}' rev-parse --short HEAD") or "unknown"
dirty = " (with uncommitted changes)" if sh(f"git -C '{srcdir}' status --porcelain --untracked-files=no") else ""
now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30

out = []
out.append("# Performance\n")
out.append("How fast ptc is on the paths a user times, each against its peer measured in the same run on the\n"
           "same machine. Only ratios between figures measured together mean anything; every table below\n"
           "names the command that printed it. `tests/bench/run-all.sh` regenerates this file (`make check`\n"
           "never runs a benchmark: speed is measured, not asserted). Targets are the project's (issue 17);\n"
           "a MISSED target has its gap explained in the area's README under \"Gap\".\n")
out.append(f"Sections regenerated {now} from commit {commit}{dirty}: {', '.join(ran)}.\n")
out.append(f"- machine: {cpu_model()}, {os.cpu_count()} cores, {mem:.0f} GiB; CPU features: {flags()}\n"
           f"- load average when the document was written: {' '.join(open('/proc/loadavg').read().split()[:3])}\n"
           f"- peers: PyTorch {torch_v} (CPU); kernel {platform.release()}\n")

for a in every:
    out.append(f"<!-- area: {a} -->\n")
    if a in ran:
        body = [f"## {titles[a]}\n", f"Command: `{commands[a]}` (details in its README.md)"]
        secs = os.path.join(logdir, a + ".md.seconds")
        if os.path.exists(secs):
            body[-1] += f", {int(open(secs).read())} s, {now}."
        body[-1] += "\n"
        fail = os.path.join(logdir, a + ".md.fail")
        table = os.path.join(logdir, a + ".md")
        if os.path.exists(table) and open(table).read().strip():
            body.append(open(table).read().strip() + "\n")
        if os.path.exists(fail):
            body.append(open(fail).read().strip() + "\n")
        out.append("\n".join(body) + "\n")
    elif a in old:
        out.append(old[a].rstrip("\n") + "\n")
    else:
        out.append(f"## {titles[a]}\n\nNot measured yet: run `tests/bench/run-all.sh {a}`.\n")
    out.append("<!-- end area -->\n")

with open(doc + ".tmp", "w") as f:
    f.write("\n".join(out))
os.replace(doc + ".tmp", doc)
print(f"run-all.sh: wrote {doc}")
EOF
[ $? -eq 0 ] || status=1
exit $status
