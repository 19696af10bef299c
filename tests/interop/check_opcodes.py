#!/usr/bin/env python3
"""check_opcodes.py - lib/pickle/opcodes.h against Python's own description of the pickle opcodes.

The X-macro table in lib/pickle/opcodes.h is what ptc's machine, scanner and writers take opcode
bytes and argument layouts from. This checks it against pickletools.opcodes of the Python that
runs it (the reference implementation's table): the same set of opcodes, and for each one the same
byte, the protocol that introduced it and an argument layout that reads the same bytes. It also
checks that the subset column holds 34 opcodes, the ones torch's weights-only unpickler names
(torch/_weights_only_unpickler.py imports them from pickle, so each must be a real opcode with
the byte the table gives).

Prints one line per disagreement with both sides, then a summary. Exit status: 0 all agree, 1 a
disagreement, 99 cannot run (the header cannot be read). Environment: top_srcdir (default: this
source tree).
"""

import os
import pickletools
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.environ.get("top_srcdir") or os.path.normpath(os.path.join(HERE, "..", ".."))

# pickletools' argument descriptors, by name, to the layouts of opcodes.h.
ARG_OF = {
    None: "NONE",
    "stringnl": "LINE", "stringnl_noescape": "LINE", "decimalnl_short": "LINE",
    "decimalnl_long": "LINE", "floatnl": "LINE", "unicodestringnl": "LINE",
    "stringnl_noescape_pair": "LINE2",
    "uint1": "F1", "uint2": "F2", "int4": "F4", "uint4": "F4", "float8": "F8", "uint8": "F8",
    "string1": "L1", "bytes1": "L1", "unicodestring1": "L1", "long1": "L1",
    "bytes4": "L4", "unicodestring4": "L4",
    "string4": "S4", "long4": "S4",  # int32 lengths: a negative one is malformed
    "bytes8": "L8", "unicodestring8": "L8", "bytearray8": "L8",
}

# The opcodes torch 2.6's weights-only unpickler executes (pth-format notes, torch source).
TORCH_SUBSET = {
    "GLOBAL", "NEWOBJ", "REDUCE", "BUILD", "APPEND", "APPENDS", "SETITEM", "SETITEMS", "MARK",
    "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NONE", "NEWFALSE", "NEWTRUE", "EMPTY_TUPLE",
    "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "BININT", "BININT1", "BININT2", "BINFLOAT",
    "BINUNICODE", "SHORT_BINSTRING", "BINPERSID", "BINGET", "LONG_BINGET", "BINPUT",
    "LONG_BINPUT", "LONG1", "PROTO", "STOP",
}


def main():
    path = os.path.join(TOP, "lib", "pickle", "opcodes.h")
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        print(f"cannot read {path}: {e}")
        return 99
    rows = re.findall(r"X\((\w+),\s*(0x[0-9a-fA-F]+),\s*(\w+),\s*(\d),\s*(\d),\s*(\w+)\)", text)
    ours = {name: (int(byte, 16), arg, int(proto), int(subset))
            for name, byte, arg, proto, subset, _ in rows}
    theirs = {op.name: op for op in pickletools.opcodes}
    failures = 0

    def fail(msg):
        nonlocal failures
        failures += 1
        print("FAIL " + msg)

    if len(rows) != len(ours):
        fail(f"opcodes.h names an opcode twice ({len(rows)} rows, {len(ours)} names)")
    for name in sorted(set(theirs) - set(ours)):
        fail(f"{name}: in pickletools, missing from opcodes.h")
    for name in sorted(set(ours) - set(theirs)):
        fail(f"{name}: in opcodes.h, unknown to pickletools")
    for name in sorted(set(ours) & set(theirs)):
        byte, arg, proto, _ = ours[name]
        op = theirs[name]
        argname = op.arg.name if op.arg else None
        want_arg = ARG_OF.get(argname, f"? ({argname})")
        if byte != ord(op.code):
            fail(f"{name}: byte 0x{byte:02x} in opcodes.h, 0x{ord(op.code):02x} in pickletools")
        if arg != want_arg:
            fail(f"{name}: argument {arg} in opcodes.h, {want_arg} in pickletools "
                 f"({argname or 'none'})")
        if proto != op.proto:
            fail(f"{name}: protocol {proto} in opcodes.h, {op.proto} in pickletools")
    subset = {name for name, (_, _, _, s) in ours.items() if s}
    if subset != TORCH_SUBSET:
        fail(f"subset: opcodes.h has {sorted(subset - TORCH_SUBSET)} beyond torch's and lacks "
             f"{sorted(TORCH_SUBSET - subset)}")
    print(f"opcodes: {len(ours)} in opcodes.h, {len(theirs)} in pickletools of Python "
          f"{sys.version.split()[0]}, {len(subset)} in the subset; {failures} disagreements")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
