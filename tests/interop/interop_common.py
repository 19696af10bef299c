"""interop_common.py - what the interop scripts of tests/interop/ share.

- require_torch(): import torch (and torchvision when asked) or exit 77 with the reason.
- Writer: runs ptc's writer: `save_tool copy IN OUT` (tests/interop/save_tool.c, public API only),
  `save_tool build-*` (the ptc_doc_* builder) and `ptc convert [OPTS] IN OUT`. With
  PTC_INTEROP_STANDIN=torch every "ptc" output is written by torch instead: that mode exists only to
  test the scripts themselves while the writer is unfinished, and every script says so loudly.
- diff(a, b): the differences between two objects torch.load returned, as readable lines: exact
  types (dict vs OrderedDict, list vs tuple, Parameter vs Tensor), keys and their order, attributes
  (an OrderedDict's _metadata), tensors (dtype, shape, stride, storage offset, conj/neg bits,
  requires_grad, device, and every byte of the storage), floats bit for bit (NaN, -0.0), and which
  tensors share a storage or are the same object.
- Zip helpers: the records of a zip archive with their local headers, data offsets and descriptors.

Paths: top_srcdir and top_builddir come from the environment (make check sets them); otherwise
both default to the source tree this file is in.
"""

import collections
import ctypes
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("top_srcdir") or os.path.normpath(os.path.join(HERE, "..", ".."))
BUILDDIR = os.environ.get("top_builddir") or SRCDIR
STANDIN = os.environ.get("PTC_INTEROP_STANDIN", "") == "torch"


def require_torch(torchvision=False):
    """Imports torch (and torchvision); exits 77 with the reason when that is impossible."""
    try:
        import torch  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        print("SKIP: %s cannot import torch: %s" % (sys.executable, e))
        sys.exit(77)
    if torchvision:
        try:
            import torchvision  # noqa: F401
        except Exception as e:
            print("SKIP: %s imports torch but not torchvision: %s" % (sys.executable, e))
            sys.exit(77)
    import torch
    # One thread: the numbers of a training step do not depend on the machine's core count.
    torch.set_num_threads(1)
    return torch


def standin_banner():
    if STANDIN:
        print("NOTE: PTC_INTEROP_STANDIN=torch: the files called ptc's below are written by torch.save,")
        print("      not by ptc. This only tests the test scripts; it proves nothing about ptc.")


def mktemp(tag):
    """A fresh temporary folder; the caller removes it (shutil.rmtree)."""
    return tempfile.mkdtemp(prefix="ptc-interop-%s." % tag)


class WriterError(Exception):
    pass


class Writer:
    """ptc's writer, as the tests run it."""

    def __init__(self):
        self.save_tool = os.path.join(BUILDDIR, "tests", "interop", "save_tool")
        self.ptc = os.path.join(BUILDDIR, "tools", "ptc")
        self._has_convert = None

    def describe(self):
        if STANDIN:
            return "torch.save standing in for ptc (PTC_INTEROP_STANDIN=torch)"
        parts = []
        parts.append("save_tool: %s" % (self.save_tool if self.has_save_tool() else "NOT BUILT"))
        parts.append("ptc convert: %s" % (self.ptc if self.has_convert() else "not available"))
        return "; ".join(parts)

    def has_save_tool(self):
        return STANDIN or os.access(self.save_tool, os.X_OK)

    def has_convert(self):
        if STANDIN:
            return True
        if self._has_convert is None:
            ok = False
            if os.access(self.ptc, os.X_OK):
                r = subprocess.run([self.ptc, "help", "convert"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
                ok = r.returncode == 0
            self._has_convert = ok
        return self._has_convert

    def require(self):
        """Raises WriterError unless at least save_tool (or, failing it, ptc convert) is there."""
        if not self.has_save_tool() and not self.has_convert():
            raise WriterError(
                "neither %s nor `%s convert` is built (make check builds save_tool; is it in "
                "check_PROGRAMS?)" % (self.save_tool, self.ptc))

    @staticmethod
    def _run(argv, timeout=600):
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        if r.returncode != 0:
            raise WriterError("`%s` exited %d: %s" % (
                " ".join(argv), r.returncode,
                (r.stderr.decode("utf-8", "replace").strip() or r.stdout.decode("utf-8", "replace").strip())))
        return r

    def copy(self, src, dst, *opts):
        """save_tool copy: open src, ptc_save its root unchanged to dst."""
        if STANDIN:
            return _standin_save(src, dst)
        if not self.has_save_tool():
            raise WriterError("%s is not built" % self.save_tool)
        self._run([self.save_tool, "copy", src, dst] + list(opts))

    def convert(self, src, dst, *opts):
        """ptc convert [opts] src dst."""
        if STANDIN:
            prefix = None
            if "--strip-prefix" in opts:
                prefix = opts[list(opts).index("--strip-prefix") + 1]
            return _standin_save(src, dst, strip_prefix=prefix)
        if not self.has_convert():
            raise WriterError("`%s convert` is not available" % self.ptc)
        self._run([self.ptc, "convert"] + list(opts) + [src, dst])

    def convert_argv(self, src, dst, *opts):
        """The command line of a convert, for tests that run it themselves."""
        if STANDIN:
            code = ("import sys; sys.path.insert(0, %r); import interop_common as c; "
                    "c._standin_save(sys.argv[1], sys.argv[2])" % HERE)
            return [sys.executable, "-c", code, src, dst]
        return [self.ptc, "convert"] + list(opts) + [src, dst]

    def build(self, mode, dst, standin_obj=None):
        """save_tool build-MODE dst (the ptc_doc_* builder)."""
        if STANDIN:
            if standin_obj is None:
                raise WriterError("no stand-in object for build-%s" % mode)
            return _atomic_torch_save(standin_obj, dst)
        if not self.has_save_tool():
            raise WriterError("%s is not built" % self.save_tool)
        self._run([self.save_tool, "build-" + mode, dst])


def _atomic_torch_save(obj, dst):
    import torch
    d, name = os.path.split(os.path.abspath(dst))
    fd, tmp = tempfile.mkstemp(prefix="." + name + ".ptc-", dir=d)
    os.close(fd)
    # torch.save names the archive after the file it is given: save under the final name in a
    # private folder so that the prefix is what ptc would write, then move it into place.
    sub = tempfile.mkdtemp(dir=d, prefix="." + name + ".ptc-dir-")
    try:
        p = os.path.join(sub, name)
        torch.save(obj, p)
        with open(p, "rb") as f:
            os.fsync(f.fileno())
        os.replace(p, tmp)
        os.replace(tmp, dst)
    finally:
        shutil.rmtree(sub, ignore_errors=True)
        if os.path.exists(tmp):
            os.unlink(tmp)


def _standin_save(src, dst, strip_prefix=None):
    import torch
    obj = torch.load(src, weights_only=True)
    if strip_prefix:
        torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(obj, strip_prefix)
    _atomic_torch_save(obj, dst)


# ---- what save_tool builds ------------------------------------------------------------------------

def sd_value(k, i):
    """The numbers save_tool.c's sd_value() puts in the built state dict."""
    if k == 5:
        return 1.0 + 0.5 * i
    return 0.25 * (10 * k + i) - 1.0


def state_dict_expected():
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    sd = m.state_dict()
    with torch.no_grad():
        for k, (name, t) in enumerate(sd.items()):
            if t.dtype == torch.int64:
                t.fill_(7)
            else:
                t.copy_(torch.tensor([sd_value(k, i) for i in range(t.numel())]).view_as(t))
    return m.state_dict()


# ---- comparing loaded objects ---------------------------------------------------------------------

def storage_bytes(t):
    """Every byte of the storage under a tensor (not only the elements it views)."""
    s = t.untyped_storage()
    n = s.nbytes()
    return ctypes.string_at(s.data_ptr(), n) if n else b""


def _tensor_facts(t):
    return collections.OrderedDict([
        ("type", type(t).__name__), ("dtype", str(t.dtype)), ("shape", tuple(t.shape)),
        ("stride", tuple(t.stride())), ("storage_offset", t.storage_offset()),
        ("requires_grad", t.requires_grad), ("is_conj", t.is_conj()), ("is_neg", t.is_neg()),
        ("device", str(t.device)), ("layout", str(t.layout)),
        ("storage_nbytes", t.untyped_storage().nbytes())])


def _short(v, n=120):
    s = repr(v)
    return s if len(s) <= n else s[:n] + "..."


def _first_diff(a, b):
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            return i
    return min(len(a), len(b))


def _keyrepr(k):
    return "[%r]" % (k,)


def diff(a, b, path="root", out=None, limit=30):
    """Differences between a (the reference) and b, as lines 'path: what'."""
    import torch
    if out is None:
        out = []
    if len(out) >= limit:
        return out

    def add(msg):
        if len(out) < limit:
            out.append("%s: %s" % (path, msg))

    if type(a) is not type(b):
        add("type %s vs %s" % (type(a).__qualname__, type(b).__qualname__))
        return out
    if isinstance(a, torch.Tensor):
        fa, fb = _tensor_facts(a), _tensor_facts(b)
        for k in fa:
            if fa[k] != fb[k]:
                add("%s %r vs %r" % (k, fa[k], fb[k]))
        if fa["storage_nbytes"] == fb["storage_nbytes"] and fa["device"] == "cpu":
            ba, bb = storage_bytes(a), storage_bytes(b)
            if ba != bb:
                i = _first_diff(ba, bb)
                add("storage bytes differ first at byte %d of %d: %s vs %s" % (
                    i, len(ba), ba[i:i + 16].hex(), bb[i:i + 16].hex()))
        da, db = getattr(a, "__dict__", {}), getattr(b, "__dict__", {})
        if da or db:
            diff(dict(da), dict(db), path + ".__dict__", out, limit)
        return out
    if isinstance(a, dict):  # dict, OrderedDict, Counter
        ka = [(type(k).__name__, k) for k in a]
        kb = [(type(k).__name__, k) for k in b]
        if ka != kb:
            if sorted(map(repr, ka)) == sorted(map(repr, kb)):
                add("same keys, different order: first difference at position %d: %r vs %r" % (
                    _first_diff(ka, kb), ka[_first_diff(ka, kb)][1], kb[_first_diff(ka, kb)][1]))
            else:
                only_a = [k for k in ka if k not in kb]
                only_b = [k for k in kb if k not in ka]
                add("keys differ: only in reference %s; only in other %s" % (
                    _short([k for _, k in only_a]), _short([k for _, k in only_b])))
            return out
        for k in a:
            diff(a[k], b[k], path + _keyrepr(k), out, limit)
        da, db = getattr(a, "__dict__", None), getattr(b, "__dict__", None)
        if da or db:
            diff(dict(da or {}), dict(db or {}), path + ".__dict__", out, limit)
        return out
    if isinstance(a, (list, tuple)):  # also torch.Size
        if len(a) != len(b):
            add("length %d vs %d" % (len(a), len(b)))
            return out
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, "%s[%d]" % (path, i), out, limit)
        return out
    if isinstance(a, (set, frozenset)):
        if len(a) != len(b):
            add("set of %d vs %d items" % (len(a), len(b)))
            return out
        rest = list(b)
        for x in a:
            for j, y in enumerate(rest):
                if not diff(x, y, path, [], 1):
                    del rest[j]
                    break
            else:
                add("set item %s has no equal in the other set" % _short(x))
        return out
    if isinstance(a, float):
        if struct.pack("<d", a) != struct.pack("<d", b):
            add("float %r vs %r (bits %s vs %s)" % (a, b, struct.pack(">d", a).hex(),
                                                   struct.pack(">d", b).hex()))
        return out
    if isinstance(a, complex):
        if struct.pack("<dd", a.real, a.imag) != struct.pack("<dd", b.real, b.imag):
            add("complex %r vs %r" % (a, b))
        return out
    try:
        same = a == b
        same = bool(same)
    except Exception as e:  # noqa: BLE001 - anything that cannot be compared is a difference
        add("cannot compare %s: %s" % (type(a).__qualname__, e))
        return out
    if not same:
        add("%s vs %s" % (_short(a), _short(b)))
    return out


def _ptc_key(k):
    """A dictionary key as a ptc path names it (ptc-inspect(1), Paths)."""
    return k if isinstance(k, str) else str(k) if isinstance(k, int) else repr(k)


def _ptc_walk(obj, path, out):
    import torch
    if isinstance(obj, torch.Tensor):
        out.append((path, obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _ptc_walk(v, path + "." + _ptc_key(k) if path else _ptc_key(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _ptc_walk(v, "%s.%d" % (path, i) if path else str(i), out)
    return out


def tensor_row(path, t):
    """(path, dtype, shape, sha256 of the elements, row-major, little-endian) as ptc hashes them."""
    import hashlib
    import torch
    flat = t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return (path, str(t.dtype).replace("torch.", ""), list(t.shape),
            hashlib.sha256(raw).hexdigest())


def inspect_rows(doc):
    """The same rows from a `ptc inspect --json --hash` document, each {"$ref"} entry (a shared
    container met again) expanded into the rows listed under the path it names."""
    rows = []
    for t in doc["tensors"]:
        if "$ref" in t:
            ref, path = t["$ref"], t["path"]
            under = [r for r in rows if r[0].startswith(ref + ".") or (ref == "" and r[0])]
            rows += [(path + r[0][len(ref):] if ref else path + "." + r[0],) + r[1:] for r in under]
        else:
            rows.append((t["path"], t["dtype"], t["shape"], t.get("sha256")))
    return rows


def ptc_tensor_rows(obj):
    """The rows `ptc inspect --json --hash` gives for what torch.load returned: (path, dtype,
    shape, sha256) of every tensor, depth first, containers in their order, paths as ptc names
    them."""
    return [tensor_row(p, t) for p, t in _ptc_walk(obj, "", [])]


def walk_tensors(obj, path="root", out=None):
    """(path, tensor) depth-first in container order; sets are not entered (their order is not
    stable across loads)."""
    import torch
    if out is None:
        out = []
    if isinstance(obj, torch.Tensor):
        out.append((path, obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            walk_tensors(v, path + _keyrepr(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            walk_tensors(v, "%s[%d]" % (path, i), out)
    return out


def walk_containers(obj, out=None):
    """Every list and dict, depth-first, for the identity check."""
    if out is None:
        out = []
    if isinstance(obj, (list, dict)):
        out.append(obj)
    if isinstance(obj, dict):
        for v in obj.values():
            walk_containers(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            walk_containers(v, out)
    return out


def _groups(keys):
    first = {}
    return [first.setdefault(k, i) for i, k in enumerate(keys)]


def storage_groups(tensors):
    """For each tensor, the index of the first tensor on the same storage (torch.load never shares
    a storage of zero bytes: each such tensor is its own group)."""
    keys = []
    for i, (_, t) in enumerate(tensors):
        s = t.untyped_storage()
        keys.append(("ptr", s.data_ptr()) if s.nbytes() else ("empty", i))
    return _groups(keys)


def sharing_diff(a, b):
    """Storage sharing and object identity of a against b."""
    out = []
    ta, tb = walk_tensors(a), walk_tensors(b)
    if len(ta) != len(tb):
        return ["tensor count %d vs %d" % (len(ta), len(tb))]
    ga, gb = storage_groups(ta), storage_groups(tb)
    for i, (x, y) in enumerate(zip(ga, gb)):
        if x != y:
            out.append("%s: shares the storage of tensor #%d (%s) in the reference, of #%d (%s) here" % (
                ta[i][0], x, ta[x][0], y, tb[y][0]))
            break
    ia, ib = _groups([id(t) for _, t in ta]), _groups([id(t) for _, t in tb])
    for i, (x, y) in enumerate(zip(ia, ib)):
        if x != y:
            out.append("%s: is the same object as tensor #%d in the reference, as #%d here" % (
                ta[i][0], x, y))
            break
    ca, cb = walk_containers(a), walk_containers(b)
    if len(ca) == len(cb):
        xa, xb = _groups([id(c) for c in ca]), _groups([id(c) for c in cb])
        if xa != xb:
            out.append("containers (lists, dicts) are shared differently: identity groups %s vs %s" % (
                _short(xa), _short(xb)))
    return out


def full_diff(a, b):
    return diff(a, b) + sharing_diff(a, b)


def count_storages(obj):
    t = walk_tensors(obj)
    return len(t), len(set(storage_groups(t)))


# ---- zip records ----------------------------------------------------------------------------------

Record = collections.namedtuple(
    "Record", "name header_offset local_header data_offset size crc flags descriptor")


def zip_records(path):
    """The records of a zip file in central-directory order, with their raw local headers, data
    offsets and data descriptors (None when flag bit 3 is clear)."""
    recs = []
    with open(path, "rb") as f, zipfile.ZipFile(path) as z:
        for zi in z.infolist():
            f.seek(zi.header_offset)
            fixed = f.read(30)
            if fixed[:4] != b"PK\x03\x04":
                raise ValueError("%s: no local header at %d" % (zi.filename, zi.header_offset))
            nlen, xlen = struct.unpack("<HH", fixed[26:30])
            rest = f.read(nlen + xlen)
            data_offset = zi.header_offset + 30 + nlen + xlen
            desc = None
            if zi.flag_bits & 0x08 and zi.file_size:
                f.seek(data_offset + zi.compress_size)
                desc = f.read(16)
                if desc[:4] == b"PK\x07\x08":
                    # 24 bytes when the local header has a zip64 extra (sizes >= 4 GiB)
                    if b"\x01\x00" in rest[nlen:nlen + 2]:
                        f.seek(data_offset + zi.compress_size)
                        desc = f.read(24)
            recs.append(Record(zi.filename, zi.header_offset, fixed + rest, data_offset, zi.file_size,
                               zi.CRC, zi.flag_bits, desc))
    return recs


def read_record(path, rec):
    with open(path, "rb") as f:
        f.seek(rec.data_offset)
        return f.read(rec.size)
