#!/usr/bin/env python3
"""Golden test of ptc's bf16 mixed precision (`--precision bf16`, the dnnl backend) against
torch.autocast("cpu", dtype=torch.bfloat16), bounded by a float64 oracle.

torch float64 is the oracle and torch autocast bf16 the yardstick: free-running training cases
(free_run.Case, on random images, torchvision resnet18 from torch's seed-0 initialisation) run
`ptc train --backend dnnl --precision bf16` for N steps, and torch autocast over a float32 model
(2 threads). ptc passes when its update error to the oracle (free_run.update_error: every
floating entry of the state dict) is at most 2 x autocast's error + 1e-5, the measure of the
float32 tests (train_golden.py). Unlike there, one autocast run is the yardstick, and no case is
left out as chaotic: bf16's rounding moves a step by ~1e-2, and the order of float32 sums is
lost in it (autocast at 1, 2, 3 and 4 threads, batch 32, lr 0.01, 2 steps: 4.5e-2 each time).
ptc's error must also be at least a tenth of autocast's: a run that is much closer to the oracle
did not compute in bf16.

Also: the state dict ptc saved is float32 in every floating entry (float32 master weights) and
loads strictly into torchvision; `ptc eval --precision bf16` of the final weights runs and its
mean cross-entropy on the case's images is within 2 x autocast's distance to the float64
oracle's + one bf16 rounding of it; the ref backend refuses --precision bf16 with an error naming the choice.

On a processor without bf16 instructions ptc must refuse with PTC_EUNSUPPORTED naming
AVX512_BF16: that refusal is what is checked there. Without oneDNN in the build there is nothing
to check (exit 0, said so). Exit 0 when everything holds, 1 otherwise, 77 without
torch/torchvision, 99 when ptc is not built. Plain build only (not under the sanitizers).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
    import torchvision
except ImportError as ex:  # pragma: no cover
    print('SKIP: %s' % ex)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import free_run as fr  # noqa: E402

SRC = os.environ.get('top_srcdir') or os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get('top_builddir') or SRC
PTC = os.path.join(BUILD, 'tools', 'ptc')
BF16 = ['--precision', 'bf16']

CASES = [
    fr.Case(1, 16, 0.01, [2, 4], seed=20261205),
    fr.Case(1, 8, 0.05, [2], seed=20261206),
]
REFUSAL = 'AVX512_BF16'  # what a processor without bf16 instructions must be told

v = fr.Verdicts()


def built_with(feature):
    """Whether config.h of the build says PTC_HAVE_<feature>."""
    try:
        with open(os.path.join(BUILD, 'config.h')) as f:
            return ('#define PTC_HAVE_%s 1' % feature) in f.read()
    except OSError:
        return False


def run(args):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, timeout=fr.TIMEOUT)
    return p.returncode, p.stdout.decode(errors='replace')


def autocast_loss(sd, x, y, kind):
    """Mean cross-entropy of the state dict sd on x, y in eval mode: in float64 (the oracle) or
    under torch autocast bf16."""
    model = torchvision.models.resnet18(num_classes=10)
    model.load_state_dict(sd)
    model.eval()
    with torch.no_grad():
        if kind == 'f64':
            return torch.nn.functional.cross_entropy(model.double()(x.double()), y).item()
        with torch.autocast('cpu', dtype=torch.bfloat16):
            return torch.nn.functional.cross_entropy(model(x), y).item()


def check_eval(tmp, case, sd, x, y):
    """ptc eval --precision bf16 of sd on the case's test file (its first 8 images)."""
    path = os.path.join(tmp, 'final.pth')
    torch.save(sd, path)
    rc, out = run([PTC, 'eval', '--weights', path, '--dataset', 'cifar10', '--data',
                   os.path.join(tmp, 'cifar'), '--backend', 'dnnl', '--json'] + BF16)
    if not v.check(rc == 0, '%s: ptc eval --precision bf16 exited %d: %s' % (case.name, rc,
                                                                             out[-600:])):
        return
    try:
        got = json.loads(out[out.index('{'):])
    except ValueError:
        got = None
    loss = got.get('loss') if isinstance(got, dict) else None
    if not v.check(loss is not None, '%s: ptc eval --json printed no loss: %s' % (case.name,
                                                                                 out[-600:])):
        return
    n = min(8, case.n)
    oracle = autocast_loss(sd, x[:n], y[:n], 'f64')
    ac = autocast_loss(sd, x[:n], y[:n], 'bf16')
    # One scalar: autocast's distance can be small by chance; one bf16 rounding of the loss
    # (2^-8 relative) is what bf16 logits cannot avoid.
    bound = 2 * abs(ac - oracle) + abs(oracle) / 256
    ok = abs(loss - oracle) <= bound
    print('  %-52s oracle %.6f  autocast %.6f (off %.1e)  ptc %.6f (off %.1e)  bound %.1e  %s'
          % ('%s: eval loss' % case.name, oracle, ac, abs(ac - oracle), loss,
             abs(loss - oracle), bound, 'ok' if ok else 'FAIL'))
    v.check(ok, '%s: ptc eval --precision bf16 loss %.6f is %.1e from the oracle %.6f, bound %.1e'
            % (case.name, loss, abs(loss - oracle), oracle, bound))


def golden(tmp, case):
    print('case: %s, steps %s' % (case.name, ', '.join(map(str, case.steps))))
    x, y = fr.write_data(os.path.join(tmp, 'cifar'), case, case.seed)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    init = {k: t.clone() for k, t in model.state_dict().items()}
    torch.save(model.state_dict(), os.path.join(tmp, 'init.pth'))
    runs = {}
    for k in case.steps:
        try:
            runs[k] = fr.run_ptc(PTC, tmp, case, 'dnnl', k, BF16)
        except RuntimeError as ex:
            if REFUSAL in str(ex) and not runs:
                # Only a processor without bf16 instructions may refuse, and it must say which.
                print('dnnl refuses bf16 on this processor: %s' % str(ex).strip()[-300:])
                shutil.rmtree(os.path.join(tmp, 'cifar'))
                return False
            v.check(False, '%s: ptc train --precision bf16 --max-steps %d: %s' % (case.name, k, ex))
    last = case.steps[-1]
    jobs = [('free64', torch.float64, None, 0, last, 2), ('freebf', fr.AUTOCAST, None, 0, last, 2)]
    got = fr.torch_local(tmp, case, init, x, y, jobs)
    for n in case.steps:
        if n not in runs:
            continue
        sd = runs[n][0]
        o = got[('free64', n)]['model']
        v.check(fr.counters_equal(sd, o), '%s: num_batches_tracked after %d steps' % (case.name, n))
        wrong = [k for k, t in sd.items() if t.is_floating_point() and t.dtype != torch.float32]
        v.check(not wrong, '%s: saved state dict entries not float32: %s' % (case.name, wrong[:4]))
        moms = runs[n][1]['optimizer_state_dict']['state']
        v.check(all(m['momentum_buffer'].dtype == torch.float32 for m in moms.values()),
                '%s: momentum buffers in the checkpoint are not float32' % case.name)
        ac = fr.update_error(got[('freebf', n)]['model'], o, init)
        err = fr.update_error(sd, o, init)
        v.judge('%s: %d free steps' % (case.name, n), [('autocast', ac)], err, ac, chaotic=None)
        v.check(err >= 0.1 * ac, '%s: %d steps: ptc %.2e is below a tenth of autocast\'s %.2e '
                'from the oracle: not bf16 arithmetic' % (case.name, n, err, ac))
    if last in runs:
        v.check(torchvision.models.resnet18(num_classes=10).load_state_dict(runs[last][0],
                                                                            strict=True) is not None,
                '%s: the saved state dict does not load strictly' % case.name)
        check_eval(tmp, case, runs[last][0], x, y)
    shutil.rmtree(os.path.join(tmp, 'cifar'))
    for f in os.listdir(tmp):
        if f.startswith('torch-') and f.endswith('.pt'):
            os.remove(os.path.join(tmp, f))
    return True


def ref_refuses(tmp):
    case = fr.Case(1, 2, 0.01, [1], seed=2)
    fr.write_data(os.path.join(tmp, 'cifar'), case, case.seed)
    torch.save(torchvision.models.resnet18(num_classes=10).state_dict(),
               os.path.join(tmp, 'init.pth'))
    try:
        fr.run_ptc(PTC, tmp, case, 'ref', 1, BF16)
        v.check(False, 'ref: ptc train --precision bf16 succeeded; the ref backend must refuse')
    except RuntimeError as ex:
        v.check('bf16' in str(ex) and 'ref' in str(ex),
                'ref: the refusal does not name the choice: %s' % ex)
        print('ref refuses: %s' % str(ex).strip().splitlines()[-1][:200])
    shutil.rmtree(os.path.join(tmp, 'cifar'))


def main():
    if not os.access(PTC, os.X_OK):
        print('cannot run: %s not built' % PTC)
        return 99
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix='ptc-bf16-') as tmp:
        ref_refuses(tmp)
        if not built_with('DNNL'):
            print('dnnl: not built (configure found no oneDNN); nothing to compare in bf16')
            return 1 if v.failures else 0
        for case in CASES:
            if not golden(tmp, case):
                return 1 if v.failures else 0
    fr.summary(v)
    v.check(v.checked > 0, 'nothing was compared')
    return 1 if v.failures else 0


if __name__ == '__main__':
    sys.exit(main())
