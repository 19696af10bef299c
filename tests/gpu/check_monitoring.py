#!/usr/bin/env python3
"""check_monitoring.py - part f of the GPU tier (tests/gpu/run.sh): the GPU monitoring of a
`ptc train --backend cuda --metrics FILE --progress` run (part d's).

  metrics  some JSON line of FILE carries gpu_util, gpu_mem_used_bytes, gpu_power_w and gpu_temp_c,
           each plausible: utilisation 0..100 and above 0 in at least one line (it trained),
           memory used above 64 MiB and below 4 TiB, power 10..2000 W, temperature 5..120 C;
  progress the progress line (on stderr, forced on a file by --progress) shows the gpu field,
           `gpu 97% 31.2/139.8 GiB 512 W 61C`, with the same plausibility.
Usage: check_monitoring.py METRICS LOG. In the self-test (ptc on the CPU) there is no GPU to
monitor: the rows say "not run".
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_common as g  # noqa: E402

PART = 'f'
FIELDS = ('gpu_util', 'gpu_mem_used_bytes', 'gpu_power_w', 'gpu_temp_c')
PROGRESS = re.compile(r'gpu (\d+)% ([\d.]+)/([\d.]+) GiB (\d+) W (\d+)C')


def plausible(util, mem, power, temp):
    bad = []
    if not 0 <= util <= 100:
        bad.append('util %s' % util)
    if not 64 * 2**20 < mem < 4 * 2**40:
        bad.append('memory %s' % mem)
    if not 10 <= power <= 2000:
        bad.append('power %s' % power)
    if not 5 <= temp <= 120:
        bad.append('temperature %s' % temp)
    return bad


def check(metrics, log):
    if g.SELFTEST:
        g.row(PART, 'monitoring fields in metrics', '', 'not run: selftest (no GPU)')
        g.row(PART, 'gpu field in the progress line', '', 'not run: selftest (no GPU)')
        return
    lines, rows = 0, []
    with open(metrics) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            lines += 1
            d = json.loads(line)
            if all(k in d for k in FIELDS):
                rows.append(d)
    if not rows:
        g.row(PART, 'monitoring fields in metrics', 'no line of %d has %s' % (lines, ', '.join(FIELDS)),
              'FAIL')
    else:
        bad = []
        for d in rows:
            bad += plausible(*(float(d[k]) for k in FIELDS))
        busy = max(float(d['gpu_util']) for d in rows)
        if busy <= 0:
            bad.append('gpu_util 0 in every line')
        last = rows[-1]
        fig = '%d of %d lines; last: util %s%%, %.1f GiB, %s W, %s C' % (
            len(rows), lines, last['gpu_util'], float(last['gpu_mem_used_bytes']) / 2**30,
            last['gpu_power_w'], last['gpu_temp_c'])
        g.row(PART, 'monitoring fields in metrics', fig + ('; implausible: ' + ', '.join(bad)
                                                           if bad else ''),
              'FAIL' if bad else 'PASS')
    with open(log, 'rb') as f:
        text = f.read().decode(errors='replace').replace('\r', '\n')
    found = PROGRESS.findall(text)
    if not found:
        g.row(PART, 'gpu field in the progress line', 'no "gpu N% U/T GiB P W TC" in the progress '
              'output (%d lines)' % text.count('\n'), 'FAIL')
        return
    util, used, total, power, temp = found[-1]
    bad = plausible(float(util), float(used) * 2**30, float(power), float(temp))
    if float(used) > float(total):
        bad.append('used > total')
    g.row(PART, 'gpu field in the progress line', '%d lines; last "gpu %s%% %s/%s GiB %s W %sC"%s'
          % (len(found), util, used, total, power, temp,
             '; implausible: ' + ', '.join(bad) if bad else ''), 'FAIL' if bad else 'PASS')


if __name__ == '__main__':
    if len(sys.argv) != 3:
        sys.exit('usage: check_monitoring.py METRICS LOG')
    g.main(PART, lambda: check(sys.argv[1], sys.argv[2]))
