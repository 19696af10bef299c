#!/usr/bin/env python3
"""check_corpus.py - sanity checks of the hostile corpus, independent of ptc.

  python3 testdata/hostile/check_corpus.py            # structure checks (stdlib only)
  python3 testdata/hostile/check_corpus.py --torch    # also compare with torch.load(weights_only=True)

Structure checks (stdlib only, nothing is unpickled):
  * every manifest entry has a file, and every file has an entry; ids, expects and verdicts are valid;
  * every positive control (expect OK) that is a zip passes zipfile.testzip() (CRCs) and its data.pkl
    passes pickletools.dis() (stack and memo consistency); a legacy stream's five pickles pass dis()
    and its storages tile the rest of the file exactly.

--torch: loads every file with torch.load(weights_only=True, map_location='cpu') in a forked child
(address space limited to 12 GiB, 60 s alarm) and prints where torch 2.6 and ptc's expected code
disagree about accept/reject. With --write-torch FILE it also records torch's answer for every file
(testdata/hostile/torch-2.6.json, which tests/fixtures/check_verify_cli.sh holds `ptc verify`'s
"torch 2.6 would load it" prediction to). torch is only a reference here; the generator never imports it.
Payloads only name inert commands, and torch's weights-only unpickler never imports a global that is
outside its allowlist, so nothing from the corpus runs.
"""
import argparse
import io
import json
import os
import pickletools
import struct
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTS = {'OK', 'EUNSAFE', 'EFORMAT', 'ELIMIT', 'EUNSUPPORTED', 'ECRC', 'ENOTZIP'}
LEGACY_MAGIC = bytes.fromhex('80028a0a6cfc9c46f9206aa850192e')


def check_structure(man, files_dir):
    bad = 0
    listed = {e['file'] for e in man['files']}
    on_disk = set(os.listdir(files_dir))
    for f in sorted(on_disk - listed):
        print('UNLISTED', f)
        bad += 1
    for e in man['files']:
        path = os.path.join(files_dir, e['file'])
        if e['file'] not in on_disk:
            print('MISSING', e['file'])
            bad += 1
            continue
        if e['expect'] not in EXPECTS or e['verdict'] not in ('unsafe', 'malformed', 'ok'):
            print('BAD ENTRY', e)
            bad += 1
        if e['expect'] != 'OK':
            continue
        data = open(path, 'rb').read()
        try:
            if data[:4] == b'PK\x03\x04':
                z = zipfile.ZipFile(io.BytesIO(data))
                assert z.testzip() is None, 'CRC'
                pkl = [n for n in z.namelist() if n.endswith('/data.pkl')]
                assert len(pkl) == 1, pkl
                pickletools.dis(z.read(pkl[0]), out=io.StringIO())
            elif e['file'].startswith('p8-safetensors'):
                # safetensors: an 8-byte little-endian header length, then a JSON object whose
                # offsets tile the rest of the file
                n, = struct.unpack('<Q', data[:8])
                head = json.loads(data[8:8 + n])
                ends = sorted(v['data_offsets'][1] for k, v in head.items() if k != '__metadata__')
                assert ends and 8 + n + ends[-1] == len(data), (n, ends[-1:], len(data))
            else:
                assert data[:15] == LEGACY_MAGIC
                bio = io.BytesIO(data)
                for _ in range(5):
                    pickletools.dis(bio, out=io.StringIO())
                n, = struct.unpack('<q', bio.read(8))  # first storage's element count
                assert 0 <= n <= len(data)
        except Exception as ex:  # noqa: BLE001 - report any failure
            print('POSITIVE CONTROL BROKEN', e['file'], repr(ex))
            bad += 1
    return bad


def torch_child(path, wfd):
    import resource
    import signal
    import warnings
    resource.setrlimit(resource.RLIMIT_AS, (12 << 30, 12 << 30))
    signal.alarm(60)
    warnings.simplefilter('ignore')
    import torch
    try:
        torch.load(path, weights_only=True, map_location='cpu')
        msg = 'loaded'
    except BaseException as ex:  # noqa: BLE001
        msg = 'refused: %s: %s' % (type(ex).__name__, str(ex).replace('\n', ' ')[:160])
    os.write(wfd, msg.encode('utf-8', 'replace'))
    os._exit(0)


args_verbose = False


def torch_answer(path):
    """What torch.load(path, weights_only=True, map_location='cpu') does, in a forked child:
    'loaded' or 'refused: TYPE: MESSAGE' (or 'child died (status N)')."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        torch_child(path, w)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    return b''.join(chunks).decode('utf-8', 'replace') or 'child died (status %d)' % status


def check_torch(man, files_dir, write=None):
    import torch  # noqa: F401 - imported before forking so each child starts warm
    rows = []
    answers = {}
    for e in man['files']:
        msg = torch_answer(os.path.join(files_dir, e['file']))
        if args_verbose:
            print('  %-48s %s' % (e['file'], msg[:150]))
        torch_ok = msg == 'loaded'
        answers[e['file']] = {'loads': torch_ok, 'answer': msg[:200]}
        ptc_ok = e['expect'] == 'OK'
        if torch_ok != ptc_ok:
            rows.append((e['file'], e['expect'], msg))
    print('torch 2.6 and ptc disagree on %d of %d files:' % (len(rows), len(man['files'])))
    for f, exp, msg in rows:
        print('  %-48s ptc %-12s torch %s' % (f, exp, msg[:150]))
    if write:
        doc = {'written_by': 'testdata/hostile/check_corpus.py --torch --write-torch',
               'torch': torch.__version__,
               'call': "torch.load(path, weights_only=True, map_location='cpu')",
               'files': answers}
        with open(write, 'w') as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write('\n')
        print('wrote torch %s answers for %d files to %s' % (torch.__version__, len(answers), write))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--torch', action='store_true', help='compare with torch.load(weights_only=True)')
    ap.add_argument('--only', default='', help='with --torch: only files whose name contains this')
    ap.add_argument('--write-torch', metavar='FILE', default=None,
                    help='with --torch: write torch\'s answer for every file to FILE (torch-2.6.json)')
    args = ap.parse_args()
    man = json.load(open(os.path.join(HERE, 'manifest.json')))
    files_dir = os.path.join(HERE, 'files')
    bad = check_structure(man, files_dir)
    print('structure: %d files, %d problems' % (len(man['files']), bad))
    global args_verbose
    args_verbose = bool(args.only)
    if args.torch:
        check_torch({'files': [e for e in man['files'] if args.only in e['file']]}, files_dir,
                    args.write_torch)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
