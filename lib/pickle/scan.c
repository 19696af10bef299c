/*
 * scan.c - the static scanner: walks every opcode of a pickle (protocols 0 to 5) without executing
 * anything and reports each reference to a global, each opcode outside the weights-only subset and
 * each PROTO. It is what lets ptc refuse a file for the payload it carries even when the stream is
 * broken after it (nullifAI) and list every global of every pickle (like torch's
 * get_unsafe_globals_in_checkpoint, but over all pickles).
 *
 * Argument layouts of the opcodes (pickle protocol): none; a '\n'-terminated line; two lines
 * (GLOBAL, INST); 1, 2, 4 or 8 fixed bytes; a u8 / u32 / u64 little-endian length followed by that
 * many bytes. Lengths are checked against the remaining input before anything is skipped.
 */
#include "pickle/pickle.h"

#include <string.h>

typedef enum arg_kind { A_NONE, A_LINE, A_2LINES, A_F1, A_F2, A_F4, A_F8, A_L1, A_L4, A_L8 } arg_kind;

static int arg_of(uint8_t op, arg_kind *k)
{
    switch (op) {
    case '(': case '.': case '0': case '1': case '2': case 'N': case 'Q': case 'R': case 'a':
    case 'b': case 'd': case '}': case 'e': case 'l': case ']': case 'o': case 's': case 't':
    case ')': case 'u': case 0x81: case 0x85: case 0x86: case 0x87: case 0x88: case 0x89:
    case 0x8f: case 0x90: case 0x91: case 0x92: case 0x93: case 0x94: case 0x97: case 0x98:
        *k = A_NONE; return 0;
    case 'F': case 'I': case 'L': case 'P': case 'S': case 'V': case 'g': case 'p':
        *k = A_LINE; return 0;
    case 'c': case 'i':
        *k = A_2LINES; return 0;
    case 'K': case 'h': case 'q': case 0x80: case 0x82:
        *k = A_F1; return 0;
    case 'M': case 0x83:
        *k = A_F2; return 0;
    case 'J': case 'j': case 'r': case 0x84:
        *k = A_F4; return 0;
    case 'G': case 0x95:
        *k = A_F8; return 0;
    case 'U': case 'C': case 0x8c: case 0x8a:
        *k = A_L1; return 0;
    case 'T': case 'X': case 'B': case 0x8b:
        *k = A_L4; return 0;
    case 0x8d: case 0x8e: case 0x96:
        *k = A_L8; return 0;
    default:
        return -1;
    }
}

/* Opcodes that push a string constant: the candidates for STACK_GLOBAL's module and name. */
static bool pushes_string(uint8_t op)
{
    return op == 'X' || op == 0x8c || op == 0x8d || op == 'U' || op == 'T' || op == 'S' ||
           op == 'V';
}

typedef struct strref {
    const uint8_t *p;
    size_t n;
} strref;

#define NAME_COPY 1024

static int report(ptc__scan_fn fn, void *ud, ptc__scan_kind kind, uint8_t op, uint64_t off,
                  const uint8_t *m, size_t mn, const uint8_t *nm, size_t nn, int proto)
{
    char mod[NAME_COPY], name[NAME_COPY];
    ptc__scan_item it = {.kind = kind, .opcode = op, .offset = off, .proto = proto};
    if (m) {
        size_t k = mn < NAME_COPY - 1 ? mn : NAME_COPY - 1;
        memcpy(mod, m, k);
        mod[k] = '\0';
        it.module = mod;
        it.module_len = k;
        it.truncated |= k < mn;
    }
    if (nm) {
        size_t k = nn < NAME_COPY - 1 ? nn : NAME_COPY - 1;
        memcpy(name, nm, k);
        name[k] = '\0';
        it.name = name;
        it.name_len = k;
        it.truncated |= k < nn;
    }
    return fn(ud, &it);
}

int ptc__pickle_scan(const uint8_t *data, size_t len, const char *member, uint64_t base_offset,
                     bool stop_at_first, ptc__scan_fn fn, void *ud, size_t *consumed, ptc_error *err)
{
    return ptc__pickle_scan_ex(data, len, len, member, base_offset, stop_at_first, fn, ud, consumed,
                               NULL, err);
}

int ptc__pickle_scan_ex(const uint8_t *data, size_t len, size_t line_limit, const char *member,
                        uint64_t base_offset, bool stop_at_first, ptc__scan_fn fn, void *ud,
                        size_t *consumed, size_t *reach, ptc_error *err)
{
    size_t pos = 0;
    if (line_limit > len)
        line_limit = len;
    strref last[2] = {{NULL, 0}, {NULL, 0}}; /* the two most recent string pushes */
    bool ended_with_stop = false;
    int rc;
    while (pos < len) {
        size_t at = pos;
        uint64_t off = base_offset + at;
        uint8_t op = data[pos++];
        arg_kind k;
        if (arg_of(op, &k) < 0) {
            if (consumed)
                *consumed = at;
            if (reach)
                *reach = pos;
            return ptc__err(err, PTC_EFORMAT, member, (int64_t)off, "invalid opcode 0x%02x", op);
        }
        const uint8_t *arg = data + pos, *arg2 = NULL;
        size_t alen = 0, alen2 = 0;
        uint64_t n = 0;
        bool truncated = false;
        switch (k) {
        case A_NONE: break;
        case A_LINE:
        case A_2LINES: {
            const uint8_t *nl =
                pos < line_limit ? memchr(data + pos, '\n', line_limit - pos) : NULL;
            if (!nl) {
                truncated = true;
                break;
            }
            alen = (size_t)(nl - (data + pos));
            pos += alen + 1;
            if (k == A_2LINES) {
                arg2 = data + pos;
                nl = pos < line_limit ? memchr(data + pos, '\n', line_limit - pos) : NULL;
                if (!nl) {
                    truncated = true;
                    break;
                }
                alen2 = (size_t)(nl - arg2);
                pos += alen2 + 1;
            }
            break;
        }
        case A_F1: case A_F2: case A_F4: case A_F8: {
            size_t w = k == A_F1 ? 1 : k == A_F2 ? 2 : k == A_F4 ? 4 : 8;
            if (len - pos < w)
                truncated = true;
            else
                pos += w;
            alen = w;
            break;
        }
        case A_L1: case A_L4: case A_L8: {
            size_t w = k == A_L1 ? 1 : k == A_L4 ? 4 : 8;
            if (len - pos < w) {
                truncated = true;
                break;
            }
            n = w == 1 ? data[pos] : w == 4 ? ptc__le32(data + pos) : ptc__le64(data + pos);
            if (w == 4 && (op == 'T' || op == 0x8b) && (int32_t)n < 0) {
                if (consumed)
                    *consumed = at;
                if (reach)
                    *reach = pos;
                return ptc__err(err, PTC_EFORMAT, member, (int64_t)off, "%s with a negative length",
                                ptc__pickle_opname(op));
            }
            pos += w;
            if (n > len - pos) {
                truncated = true;
                break;
            }
            arg = data + pos;
            alen = (size_t)n;
            pos += (size_t)n;
            break;
        }
        }
        if (truncated) {
            if (consumed)
                *consumed = at;
            if (reach)
                *reach = pos;
            return ptc__err(err, PTC_EFORMAT, member, (int64_t)off,
                            "truncated: %s runs past the end of the pickle", ptc__pickle_opname(op));
        }

        /* Report what matters. */
        if (op == 0x80) {
            if ((rc = report(fn, ud, PTC__SCAN_PROTO, op, off, NULL, 0, NULL, 0, arg[0])) != 0)
                return rc;
        } else if (op == 'c' || op == 'i') {
            if ((rc = report(fn, ud, PTC__SCAN_GLOBAL, op, off, arg, alen, arg2, alen2, 0)) != 0)
                return rc;
        } else if (op == 0x93) {
            if (last[0].p && last[1].p)
                rc = report(fn, ud, PTC__SCAN_GLOBAL, op, off, last[0].p, last[0].n, last[1].p,
                            last[1].n, 0);
            else
                rc = report(fn, ud, PTC__SCAN_DYNAMIC, op, off, NULL, 0, NULL, 0, 0);
            if (rc != 0)
                return rc;
        } else if (op == 0x82 || op == 0x83 || op == 0x84) {
            if ((rc = report(fn, ud, PTC__SCAN_DYNAMIC, op, off, NULL, 0, NULL, 0, 0)) != 0)
                return rc;
        }
        if (!ptc__pickle_in_subset(op) && op != 0x93 && op != 'i' && op != 0x82 && op != 0x83 &&
            op != 0x84) {
            if ((rc = report(fn, ud, PTC__SCAN_OPCODE, op, off, NULL, 0, NULL, 0, 0)) != 0)
                return rc;
        }

        /* Track string pushes for STACK_GLOBAL; memo opcodes leave the stack as it is. */
        if (pushes_string(op)) {
            last[0] = last[1];
            last[1] = (strref){arg, alen}; /* text forms keep their quotes: still reportable */
        } else if (op != 'p' && op != 'q' && op != 'r' && op != 0x94 && op != 0x95) {
            last[0] = last[1] = (strref){NULL, 0};
        }

        ended_with_stop = op == '.';
        if (op == '.' && stop_at_first) {
            if (consumed)
                *consumed = pos;
            if (reach)
                *reach = pos;
            return 0;
        }
    }
    if (consumed)
        *consumed = pos;
    if (reach)
        *reach = pos;
    if (!ended_with_stop)
        return ptc__err(err, PTC_EFORMAT, member, (int64_t)(base_offset + len),
                        "truncated: the pickle ends without STOP");
    return 0;
}
