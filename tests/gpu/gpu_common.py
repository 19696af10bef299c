"""gpu_common.py - what the Python parts of the GPU tier (tests/gpu/run.sh) share: the rows of the
final table, the environment run.sh sets (ptc's wrapper, backend options, torch's device, the
self-test mode), a peak-memory sampler, and a main() guard that turns any exception into a FAIL
row so that a broken part is reported, never lost."""
import ctypes
import os
import subprocess
import sys
import threading
import time
import traceback

SELFTEST = os.environ.get('PTC_GPU_SELFTEST') == '1'
PTC = os.environ.get('PTC_GPU_PTC', '')
BACKEND_ARGS = os.environ.get('PTC_GPU_BACKEND_ARGS', '--backend cuda --device cuda:0').split()
DEVICE = os.environ.get('PTC_GPU_TORCH_DEVICE', 'cpu' if SELFTEST else 'cuda')
WORK = os.environ.get('PTC_GPU_WORK') or os.getcwd()
CARRY = os.environ.get('PTC_GPU_CARRY', '')
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
failed = [False]


def row(part, check, figure, verdict):
    """One row of run.sh's table (and printed here, for the part's log)."""
    if verdict == 'FAIL':
        failed[0] = True
    line = '%s\t%s\t%s\t%s' % (part, check, figure.replace('\t', ' ').replace('\n', ' '), verdict)
    print('ROW ' + line.replace('\t', ' | '))
    sys.stdout.flush()
    path = os.environ.get('PTC_GPU_RESULTS')
    if path:
        with open(path, 'a') as f:
            f.write(line + '\n')


def main(part, fn):
    """Runs fn(); exit 1 when a row FAILed or fn raised (the exception becomes a FAIL row)."""
    try:
        fn()
    except Exception as ex:  # noqa: BLE001 (reported, not lost)
        traceback.print_exc()
        row(part, 'script', '%s: %s' % (type(ex).__name__, str(ex)[-300:]), 'FAIL')
    sys.exit(1 if failed[0] else 0)


def ptc_has_option(option):
    """Whether `ptc train --help` lists option (a ptc without --precision, say, fails clearly)."""
    try:
        p = subprocess.run([PTC, 'train', '--help'], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option.encode() in p.stdout


def torch_setup_f32():
    """float32 as ptc's cuda backend computes it by default: TF32 off."""
    import torch
    if DEVICE == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def gpu_index():
    v = os.environ.get('CUDA_VISIBLE_DEVICES', '0').split(',')[0]
    return int(v) if v.isdigit() else 0


class MemorySampler:
    """Peak memory while a run lasts. On a GPU: the device's used memory (NVML from the driver,
    nvidia-smi otherwise) above what was used before the run: one run at a time on the GPU, so
    this is the run's own, CUDA context included, for ptc and torch alike (per-process figures
    need the host's process ids, which a container may not see). On the CPU (self-test): the
    process's resident set (VmHWM)."""

    def __init__(self, pid=None):
        self.pid = pid
        self.peak = 0
        self.base = 0
        self._stop = threading.Event()
        self._nvml = None
        self.how = 'VmHWM'
        if DEVICE == 'cuda':
            self._open_nvml()
            self.how = 'nvml' if self._nvml else 'nvidia-smi'
            self.base = self._used()

    def _open_nvml(self):
        try:
            lib = ctypes.CDLL('libnvidia-ml.so.1')
            if lib.nvmlInit_v2() != 0:
                return
            h = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(gpu_index(), ctypes.byref(h)) != 0:
                return
            self._nvml, self._h = lib, h
        except OSError:
            self._nvml = None

    def _used(self):
        if self._nvml:
            class Mem(ctypes.Structure):
                _fields_ = [('total', ctypes.c_ulonglong), ('free', ctypes.c_ulonglong),
                            ('used', ctypes.c_ulonglong)]
            m = Mem()
            if self._nvml.nvmlDeviceGetMemoryInfo(self._h, ctypes.byref(m)) == 0:
                return m.used
        try:
            out = subprocess.run(['nvidia-smi', '--query-gpu=memory.used', '--format=csv,noheader,'
                                  'nounits', '-i', str(gpu_index())], stdout=subprocess.PIPE,
                                 timeout=10).stdout.decode().split()
            return int(out[0]) * 1048576
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
            return 0

    def _sample(self):
        if DEVICE == 'cuda':
            return self._used() - self.base
        try:
            with open('/proc/%d/status' % self.pid) as f:
                for line in f:
                    if line.startswith('VmHWM:'):
                        return int(line.split()[1]) * 1024
        except (OSError, TypeError):
            pass
        return 0

    def _loop(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(0.05)

    def start(self, pid=None):
        if pid is not None:
            self.pid = pid
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()
        return self

    def stop(self):
        self.peak = max(self.peak, self._sample())
        self._stop.set()
        self._t.join()
        return self.peak


def run_sampled(args, timeout, log=None, env=None):
    """Runs args, sampling its peak memory. Returns (status, output, peak bytes, seconds);
    status None on a timeout."""
    t0 = time.time()
    s = MemorySampler()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, env=env)
    s.start(p.pid)
    try:
        out, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        rc = None
    peak = s.stop()
    text = out.decode(errors='replace')
    if log:
        with open(log, 'w') as f:
            f.write(' '.join(args) + '\n' + text)
    return rc, text, peak, time.time() - t0
