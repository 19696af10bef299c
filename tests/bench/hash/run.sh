#!/bin/sh
# run.sh - hashing and checksum speed: `ptc inspect --hash` against `sha256sum` on the same
# checkpoint, and libptc's CRC-32 against zlib's and libdeflate's (bench_crc). See README.md
# beside this. Never run by make check.
#
#   top_builddir=BUILD tests/bench/hash/run.sh   (top_builddir defaults to this tree)
#
# Environment: TORCH_PYTHON (default python3) must import torch (it writes the checkpoint and
# checks ptc's digests); BENCH_REPEAT (default 5, at least 3) timed rounds after one warm-up;
# BENCH_OUT, when set, a file that receives the markdown tables; BENCH_HASH_MIB (default 1024)
# the checkpoint's tensor data in MiB; BENCH_TMPDIR (default $TMPDIR or /tmp) holds it. Exit
# status 0 when every measurement ran, whatever the numbers.

here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/../../.." && pwd)}"
if [ -z "$top_builddir" ] && [ -e "./tools/ptc" ]; then top_builddir=$(pwd); fi
: "${top_builddir:=$top_srcdir}"
py=${TORCH_PYTHON:-python3}
repeats=${BENCH_REPEAT:-5}
mib=${BENCH_HASH_MIB:-1024}
case $repeats$mib in
'' | *[!0-9]*) echo "run.sh: BENCH_REPEAT and BENCH_HASH_MIB must be numbers" >&2; exit 2 ;;
esac
[ "$repeats" -lt 3 ] && repeats=3
ptc="$top_builddir/tools/ptc"
crc="$top_builddir/tests/bench/hash/bench_crc"
for x in "$ptc" "$crc"; do
    if [ ! -x "$x" ]; then
        echo "run.sh: $x is not built" >&2
        exit 1
    fi
done
command -v sha256sum >/dev/null || { echo "run.sh: sha256sum is not installed" >&2; exit 1; }
base=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}
tmp=$(mktemp -d "$base/ptc-bench-hash.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

"$py" - "$tmp" "$mib" "$repeats" "$ptc" "$crc" "${BENCH_OUT:-}" <<'PYEOF'
import hashlib, os, re, statistics, subprocess, sys, time
import torch

tmp, mib, repeats, ptc, crc, bench_out = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                         sys.argv[4], sys.argv[5], sys.argv[6])
# float32 tensors of 64 MiB (the last one smaller), as a large state dict holds them.
torch.manual_seed(0)
sd, left, i = {}, mib << 20, 0
while left > 0:
    n = min(left, 64 << 20)
    sd["t%03d" % i] = torch.rand(n // 4)
    left -= n
    i += 1
path = os.path.join(tmp, "big.pth")
torch.save(sd, path)
size = os.path.getsize(path)

# ptc's digests must be SHA-256 of each tensor's bytes, or the timing means nothing.
out = subprocess.run([ptc, "inspect", "--hash", path], check=True, capture_output=True,
                     text=True).stdout
got = dict(re.findall(r"^\s*(t\d+)\s.*sha256 ([0-9a-f]{64})", out, re.M))
for k, t in sd.items():
    want = hashlib.sha256(t.numpy().tobytes()).hexdigest()
    if got.get(k) != want:
        sys.exit("ptc inspect --hash gives %s for %s where hashlib gives %s" % (got.get(k), k, want))
del sd

with open(path, "rb") as f:  # in the page cache for both
    while f.read(8 << 20):
        pass


def timed(argv):
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


who = [("ptc inspect --hash", [ptc, "inspect", "--hash", path]), ("sha256sum", ["sha256sum", path])]
t = {k: [] for k, _ in who}
for rep in range(repeats + 1):
    for k, argv in (who if rep % 2 == 0 else who[::-1]):
        dt = timed(argv)
        if rep:
            t[k].append(dt)
a, b = t[who[0][0]], t[who[1][0]]
ratio = statistics.median([x / y for x, y in zip(a, b)])
crc_table = subprocess.run([crc, "256", "9"], check=True, capture_output=True, text=True).stdout


def med(v):
    return "%.3f [%.3f-%.3f]" % (statistics.median(v), min(v), max(v))


lines = ["| file | `ptc inspect --hash` s | `sha256sum` s | ptc / sha256sum | ptc GB/s |",
         "|---|---|---|---|---|",
         "| %d bytes (%d MiB of float32 tensors) | %s | %s | %.2fx | %.2f |" % (
             size, mib, med(a), med(b), ratio, size / statistics.median(a) / 1e9),
         "",
         "- `ptc inspect --hash` within 1.5x of `sha256sum` on the same bytes: %.2fx, %s" % (
             ratio, "met" if ratio <= 1.5 else "MISSED"),
         "",
         "Whole processes, the file in the page cache; medians [min-max] of %d rounds after a "
         "warm-up, alternating; the ratio is the median of the per-round ratios." % repeats,
         "",
         "CRC-32, in-process (bench_crc 256 MiB, 9 rounds):",
         "",
         crc_table.rstrip(),
         "",
         "%d CPUs; load average at the end: %s." % (
             os.cpu_count(), " ".join("%.2f" % x for x in os.getloadavg()))]
text = "\n".join(lines) + "\n"
print(text, end="")
if bench_out:
    with open(bench_out, "w") as f:
        f.write(text)
PYEOF
