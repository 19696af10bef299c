/*
 * text.c - UTF-8 validation and the escaping of bytes that came from a file before they reach a
 * message, a terminal or a log (threat model P10: no raw control bytes ever leave the library).
 */
#include "base/base.h"

#include <stdio.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (n bytes available), 0 when invalid. */
static size_t utf8_seq(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0; /* overlong or beyond Unicode */
    if (cp >= 0xD800 && cp <= 0xDFFF)
        return 0; /* surrogates are not characters */
    return len;
}

/* Code points that change how a terminal shows text: C1 controls, line and paragraph separators,
 * the bidirectional overrides and isolates (the "Trojan Source" characters), and the invisible
 * ones (soft hyphen, zero-width spaces and joiners, word joiner, byte order mark, tags) that make
 * two different texts look the same. */
static bool is_format_control(const uint8_t *s, size_t len)
{
    uint32_t cp = len == 2   ? ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F)
                  : len == 3 ? ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) |
                                   (s[2] & 0x3F)
                  : len == 4 ? ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                                   ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F)
                             : 0;
    return (cp >= 0x80 && cp <= 0x9F) || cp == 0xAD || cp == 0x061C ||
           (cp >= 0x200B && cp <= 0x200F) || cp == 0x2028 || cp == 0x2029 ||
           (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2060 && cp <= 0x2064) ||
           (cp >= 0x2066 && cp <= 0x2069) || cp == 0xFEFF || (cp >= 0xE0000 && cp <= 0xE007F);
}

bool ptc__utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = utf8_seq(s + i, n - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

char *ptc__escape(char *dst, size_t dstsz, const void *src, size_t n, bool keep_utf8)
{
    static const char hex[] = "0123456789abcdef";
    const uint8_t *s = src;
    size_t o = 0;
    if (dstsz == 0)
        return dst;
    for (size_t i = 0; i < n; i++) {
        char tmp[8];
        size_t tn = 0;
        uint8_t c = s[i];
        size_t seq = 0;
        if (c >= 0x20 && c < 0x7F) {
            if (c == '\\' || c == '"')
                tmp[tn++] = '\\';
            tmp[tn++] = (char)c;
        } else if (c == '\n') {
            tmp[tn++] = '\\';
            tmp[tn++] = 'n';
        } else if (c == '\t') {
            tmp[tn++] = '\\';
            tmp[tn++] = 't';
        } else if (keep_utf8 && c >= 0x80 && (seq = utf8_seq(s + i, n - i)) > 1 &&
                   !is_format_control(s + i, seq)) {
            memcpy(tmp, s + i, seq);
            tn = seq;
            i += seq - 1;
        } else {
            tmp[tn++] = '\\';
            tmp[tn++] = 'x';
            tmp[tn++] = hex[c >> 4];
            tmp[tn++] = hex[c & 15];
        }
        if (o + tn + 4 > dstsz) { /* keep room for "..." and the NUL */
            if (dstsz >= 4) {
                memcpy(dst + (o + 4 <= dstsz ? o : dstsz - 4), "...", 4);
            } else {
                dst[0] = '\0';
            }
            return dst;
        }
        memcpy(dst + o, tmp, tn);
        o += tn;
    }
    dst[o] = '\0';
    return dst;
}

/* ---- public escaping (ptc_escape, ptc_json_escape_hidden, ptc_utf8_valid) ---------------------
 * What ptc's commands print file text through, public so that an embedder shows file text the
 * same way. ptc__escape above stays the form of the library's own messages (always escapes '"',
 * "\x0d" for a carriage return, truncates with "..."). */

/* The code point of the valid sequence s[0..len). */
static uint32_t utf8_cp(const uint8_t *s, size_t len)
{
    return len == 2 ? ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F)
           : len == 3
               ? ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F)
               : ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                     ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

/* Escapes the character at s[0..n) into out (at most 16 bytes); returns the output length and
 * stores the number of input bytes consumed in *used. */
static size_t escape_one(const uint8_t *s, size_t n, unsigned flags, char out[16], size_t *used)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t c = s[0];
    size_t seq, o = 0;

    *used = 1;
    if ((c == '\\' && !(flags & PTC_ESC_RAW_BACKSLASH)) || (c == '"' && (flags & PTC_ESC_QUOTE))) {
        out[0] = '\\';
        out[1] = (char)c;
        return 2;
    }
    if (c >= 0x20 && c < 0x7F) {
        out[0] = (char)c;
        return 1;
    }
    if (c == '\n' || c == '\t' || c == '\r') {
        out[0] = '\\';
        out[1] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
        return 2;
    }
    seq = c >= 0x80 ? utf8_seq(s, n) : 0;
    if (seq > 1 && !is_format_control(s, seq)) {
        memcpy(out, s, seq);
        *used = seq;
        return seq;
    }
    /* A control byte, a byte of invalid UTF-8, or every byte of a hidden character (at most 4
     * bytes, so 16 output bytes). */
    if (seq < 1)
        seq = 1;
    for (size_t i = 0; i < seq; i++) {
        out[o++] = '\\';
        out[o++] = 'x';
        out[o++] = hex[s[i] >> 4];
        out[o++] = hex[s[i] & 15];
    }
    *used = seq;
    return o;
}

size_t ptc_escape(char *dst, size_t size, const void *src, size_t n, unsigned flags)
{
    const uint8_t *s = src;
    size_t i = 0, o = 0;
    if (!src)
        n = 0;
    while (i < n) {
        char out[16];
        size_t used, k = escape_one(s + i, n - i, flags, out, &used);
        if (dst && o < size) {
            size_t room = size - 1 - o < k ? size - 1 - o : k;
            memcpy(dst + o, out, room);
        }
        o += k;
        i += used;
    }
    if (dst && size)
        dst[o < size ? o : size - 1] = '\0';
    return o;
}

size_t ptc_json_escape_hidden(char *dst, size_t size, const char *json, size_t n)
{
    const uint8_t *p = (const uint8_t *)json;
    size_t i = 0, o = 0;
    if (!json)
        n = 0;
    while (i < n) {
        char out[16];
        size_t k = p[i] < 0x80 ? 1 : utf8_seq(p + i, n - i), outn;
        if (k > 1 && is_format_control(p + i, k)) {
            uint32_t cp = utf8_cp(p + i, k);
            if (cp > 0xFFFF) /* JSON spells a character past the BMP as a surrogate pair */
                outn = (size_t)snprintf(out, sizeof out, "\\u%04x\\u%04x",
                                        (unsigned)(0xD800 + ((cp - 0x10000) >> 10)),
                                        (unsigned)(0xDC00 + ((cp - 0x10000) & 0x3FF)));
            else
                outn = (size_t)snprintf(out, sizeof out, "\\u%04x", (unsigned)cp);
        } else {
            if (k == 0)
                k = 1; /* not expected in JSON text; copied as it is */
            memcpy(out, p + i, k);
            outn = k;
        }
        if (dst && o < size) {
            size_t room = size - 1 - o < outn ? size - 1 - o : outn;
            memcpy(dst + o, out, room);
        }
        o += outn;
        i += k;
    }
    if (dst && size)
        dst[o < size ? o : size - 1] = '\0';
    return o;
}

int ptc_utf8_valid(const void *s, size_t n)
{
    return s ? ptc__utf8_valid(s, n) : n == 0;
}
