/*
 * opcodes.h - the one table of pickle opcodes, as an X-macro.
 *
 * Every part of ptc that reads or writes pickle bytes (the machine in vm.c, the static scanner in
 * scan.c, the writer in writer.c and the checkpoint writer in lib/pth/save.c) takes opcode bytes,
 * argument layouts and roles from this table, so that no file spells an opcode as a raw byte and
 * the layers cannot disagree about one. docs/internals/pickle.md describes the opcodes in words.
 *
 * PTC__PICKLE_OPCODES(X) calls X(NAME, BYTE, ARG, PROTO, SUBSET, SCAN) once per opcode of pickle
 * protocols 0 to 5 (68 opcodes):
 *   NAME    the opcode's name as Python's pickletools spells it; PTC__OP_<NAME> is its byte.
 *   BYTE    the opcode byte.
 *   ARG     the layout of the argument after the byte (PTC__ARG_<ARG>):
 *             NONE   nothing;
 *             LINE   bytes up to and including a '\n';
 *             LINE2  two such lines (module, then name);
 *             F1 F2 F4 F8   1, 2, 4 or 8 fixed bytes;
 *             L1 L4 L8      a u8 / u32 LE / u64 LE length, then that many bytes;
 *             S4     an int32 LE length (negative is malformed), then that many bytes.
 *   PROTO   the protocol that introduced the opcode (a reader of protocol N knows those <= N).
 *   SUBSET  1 for the 34 opcodes that torch 2.6's weights-only unpickler executes (and vm.c with
 *           it), 0 for the others.
 *   SCAN    what the static scanner does with it (PTC__SCAN_ROLE_<SCAN>):
 *             PLAIN     nothing beyond decoding it; it ends a pair of string pushes;
 *             PROTO     reports the protocol number;
 *             STOP      ends the pickle;
 *             GLOBAL    reports the module and name read from its two lines;
 *             STACK     STACK_GLOBAL: reports the two strings pushed before it, or "dynamic";
 *             EXT       reports a global from the extension registry (always dynamic);
 *             STRING    pushes a string constant (a candidate STACK_GLOBAL operand);
 *             MEMO      touches the memo or framing only: string pushes before it still count.
 */
#ifndef PTC_PICKLE_OPCODES_H
#define PTC_PICKLE_OPCODES_H

/* clang-format off */
#define PTC__PICKLE_OPCODES(X)                                   \
    /* protocol 0 */                                             \
    X(MARK,             0x28, NONE,  0, 1, PLAIN)  /* '(' */     \
    X(STOP,             0x2e, NONE,  0, 1, STOP)   /* '.' */     \
    X(POP,              0x30, NONE,  0, 0, PLAIN)  /* '0' */     \
    X(DUP,              0x32, NONE,  0, 0, PLAIN)  /* '2' */     \
    X(FLOAT,            0x46, LINE,  0, 0, PLAIN)  /* 'F' */     \
    X(INT,              0x49, LINE,  0, 0, PLAIN)  /* 'I' */     \
    X(LONG,             0x4c, LINE,  0, 0, PLAIN)  /* 'L' */     \
    X(NONE,             0x4e, NONE,  0, 1, PLAIN)  /* 'N' */     \
    X(PERSID,           0x50, LINE,  0, 0, PLAIN)  /* 'P' */     \
    X(REDUCE,           0x52, NONE,  0, 1, PLAIN)  /* 'R' */     \
    X(STRING,           0x53, LINE,  0, 0, STRING) /* 'S' */     \
    X(UNICODE,          0x56, LINE,  0, 0, STRING) /* 'V' */     \
    X(APPEND,           0x61, NONE,  0, 1, PLAIN)  /* 'a' */     \
    X(BUILD,            0x62, NONE,  0, 1, PLAIN)  /* 'b' */     \
    X(GLOBAL,           0x63, LINE2, 0, 1, GLOBAL) /* 'c' */     \
    X(DICT,             0x64, NONE,  0, 0, PLAIN)  /* 'd' */     \
    X(GET,              0x67, LINE,  0, 0, PLAIN)  /* 'g' */     \
    X(INST,             0x69, LINE2, 0, 0, GLOBAL) /* 'i' */     \
    X(LIST,             0x6c, NONE,  0, 0, PLAIN)  /* 'l' */     \
    X(PUT,              0x70, LINE,  0, 0, MEMO)   /* 'p' */     \
    X(SETITEM,          0x73, NONE,  0, 1, PLAIN)  /* 's' */     \
    X(TUPLE,            0x74, NONE,  0, 1, PLAIN)  /* 't' */     \
    /* protocol 1 */                                             \
    X(EMPTY_TUPLE,      0x29, NONE,  1, 1, PLAIN)  /* ')' */     \
    X(POP_MARK,         0x31, NONE,  1, 0, PLAIN)  /* '1' */     \
    X(BINFLOAT,         0x47, F8,    1, 1, PLAIN)  /* 'G' */     \
    X(BININT,           0x4a, F4,    1, 1, PLAIN)  /* 'J' */     \
    X(BININT1,          0x4b, F1,    1, 1, PLAIN)  /* 'K' */     \
    X(BININT2,          0x4d, F2,    1, 1, PLAIN)  /* 'M' */     \
    X(BINPERSID,        0x51, NONE,  1, 1, PLAIN)  /* 'Q' */     \
    X(BINSTRING,        0x54, S4,    1, 0, STRING) /* 'T' */     \
    X(SHORT_BINSTRING,  0x55, L1,    1, 1, STRING) /* 'U' */     \
    X(BINUNICODE,       0x58, L4,    1, 1, STRING) /* 'X' */     \
    X(EMPTY_LIST,       0x5d, NONE,  1, 1, PLAIN)  /* ']' */     \
    X(APPENDS,          0x65, NONE,  1, 1, PLAIN)  /* 'e' */     \
    X(BINGET,           0x68, F1,    1, 1, PLAIN)  /* 'h' */     \
    X(LONG_BINGET,      0x6a, F4,    1, 1, PLAIN)  /* 'j' */     \
    X(OBJ,              0x6f, NONE,  1, 0, PLAIN)  /* 'o' */     \
    X(BINPUT,           0x71, F1,    1, 1, MEMO)   /* 'q' */     \
    X(LONG_BINPUT,      0x72, F4,    1, 1, MEMO)   /* 'r' */     \
    X(SETITEMS,         0x75, NONE,  1, 1, PLAIN)  /* 'u' */     \
    X(EMPTY_DICT,       0x7d, NONE,  1, 1, PLAIN)  /* '}' */     \
    /* protocol 2 */                                             \
    X(PROTO,            0x80, F1,    2, 1, PROTO)                \
    X(NEWOBJ,           0x81, NONE,  2, 1, PLAIN)                \
    X(EXT1,             0x82, F1,    2, 0, EXT)                  \
    X(EXT2,             0x83, F2,    2, 0, EXT)                  \
    X(EXT4,             0x84, F4,    2, 0, EXT)                  \
    X(TUPLE1,           0x85, NONE,  2, 1, PLAIN)                \
    X(TUPLE2,           0x86, NONE,  2, 1, PLAIN)                \
    X(TUPLE3,           0x87, NONE,  2, 1, PLAIN)                \
    X(NEWTRUE,          0x88, NONE,  2, 1, PLAIN)                \
    X(NEWFALSE,         0x89, NONE,  2, 1, PLAIN)                \
    X(LONG1,            0x8a, L1,    2, 1, PLAIN)                \
    X(LONG4,            0x8b, S4,    2, 0, PLAIN)                \
    /* protocol 3 */                                             \
    X(BINBYTES,         0x42, L4,    3, 0, PLAIN)  /* 'B' */     \
    X(SHORT_BINBYTES,   0x43, L1,    3, 0, PLAIN)  /* 'C' */     \
    /* protocol 4 */                                             \
    X(SHORT_BINUNICODE, 0x8c, L1,    4, 0, STRING)               \
    X(BINUNICODE8,      0x8d, L8,    4, 0, STRING)               \
    X(BINBYTES8,        0x8e, L8,    4, 0, PLAIN)                \
    X(EMPTY_SET,        0x8f, NONE,  4, 1, PLAIN)                \
    X(ADDITEMS,         0x90, NONE,  4, 0, PLAIN)                \
    X(FROZENSET,        0x91, NONE,  4, 0, PLAIN)                \
    X(NEWOBJ_EX,        0x92, NONE,  4, 0, PLAIN)                \
    X(STACK_GLOBAL,     0x93, NONE,  4, 0, STACK)                \
    X(MEMOIZE,          0x94, NONE,  4, 0, MEMO)                 \
    X(FRAME,            0x95, F8,    4, 0, MEMO)                 \
    /* protocol 5 */                                             \
    X(BYTEARRAY8,       0x96, L8,    5, 0, PLAIN)                \
    X(NEXT_BUFFER,      0x97, NONE,  5, 0, PLAIN)                \
    X(READONLY_BUFFER,  0x98, NONE,  5, 0, PLAIN)
/* clang-format on */

/* PTC__OP_MARK = 0x28, ... */
typedef enum ptc__op {
#define PTC__X_ENUM(name, byte, arg, proto, subset, scan) PTC__OP_##name = byte,
    PTC__PICKLE_OPCODES(PTC__X_ENUM)
#undef PTC__X_ENUM
} ptc__op;

typedef enum ptc__op_arg {
    PTC__ARG_NONE,
    PTC__ARG_LINE,
    PTC__ARG_LINE2,
    PTC__ARG_F1,
    PTC__ARG_F2,
    PTC__ARG_F4,
    PTC__ARG_F8,
    PTC__ARG_L1,
    PTC__ARG_L4,
    PTC__ARG_S4,
    PTC__ARG_L8
} ptc__op_arg;

typedef enum ptc__scan_role {
    PTC__SCAN_ROLE_PLAIN,
    PTC__SCAN_ROLE_PROTO,
    PTC__SCAN_ROLE_STOP,
    PTC__SCAN_ROLE_GLOBAL,
    PTC__SCAN_ROLE_STACK,
    PTC__SCAN_ROLE_EXT,
    PTC__SCAN_ROLE_STRING,
    PTC__SCAN_ROLE_MEMO
} ptc__scan_role;

#endif /* PTC_PICKLE_OPCODES_H */
