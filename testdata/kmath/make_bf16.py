#!/usr/bin/env python3
"""make_bf16.py - the fixture of tests/unit/test_kmath's bfloat16 rounding check.

Writes bf16.txt: one line per float32 bit pattern, "FFFFFFFF BBBB" (hex), BBBB being the bits
torch gives for tensor.to(torch.bfloat16). Made with torch 2.6.0 (CPU); rerun it with
`python3 testdata/kmath/make_bf16.py > testdata/kmath/bf16.txt`. The patterns cover every class
that rounding treats apart: exact ties (low half 0x8000) with an even and an odd kept bit, one
ulp either side of a tie, carries into the exponent and up to infinity, subnormals, signed zeros,
infinities, quiet and signalling NaNs of both signs with payloads, and random words. The script
also checks that torch's bfloat16 -> float32 is the 16-bit shift for all 65536 patterns, which
the test then asserts of kmath.h without a fixture.
"""
import random
import sys

import torch


def main():
    rnd = random.Random(20261204)
    pats = []
    specials = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC08000,
                0x7F808000, 0x7F80FFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F7F7FFF,
                0x7F7FC000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00008000,
                0x00018000, 0x00007FFF, 0x0000FFFF, 0x00800000, 0x3F800000, 0x3F808000,
                0x3F818000, 0x3F807FFF, 0x3F808001, 0xBF808000, 0xBF818000]
    pats += specials
    exps = [0x00, 0x01, 0x7F, 0x80, 0xFE, 0x3C, 0x43]
    for _ in range(180):
        e = rnd.choice(exps + [rnd.randrange(256)])
        hi = rnd.randrange(128)  # the 7 mantissa bits bf16 keeps
        s = rnd.randrange(2)
        base = (s << 31) | (e << 23) | (hi << 16)
        for lo in (0x8000, 0x7FFF, 0x8001, 0x0000, 0xFFFF):  # tie, below, above, exact, max
            pats.append(base | lo)
    # NaN payloads of both signs, quiet and signalling
    for _ in range(100):
        s = rnd.randrange(2)
        m = rnd.randrange(1, 1 << 23)
        pats.append((s << 31) | (0xFF << 23) | m)
    # subnormals
    for _ in range(150):
        pats.append((rnd.randrange(2) << 31) | rnd.randrange(1, 1 << 23))
    while len(pats) < 2100:
        pats.append(rnd.getrandbits(32))
    seen = set()
    pats = [p for p in pats if not (p in seen or seen.add(p))]

    x = torch.tensor(pats, dtype=torch.int64).to(torch.int32).view(torch.float32)
    # one element at a time too: the scalar and the vectorised paths must agree
    b = x.to(torch.bfloat16).view(torch.int16).to(torch.int64) & 0xFFFF
    for i in range(0, len(pats), 97):
        one = x[i:i + 1].clone().to(torch.bfloat16).view(torch.int16).item() & 0xFFFF
        assert one == b[i].item(), (hex(pats[i]), hex(one), hex(b[i].item()))

    allb = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    f = allb.to(torch.float32).view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    want = torch.arange(65536, dtype=torch.int64) << 16
    assert torch.equal(f, want), "bfloat16 -> float32 is not the 16-bit shift"

    out = sys.stdout
    out.write("# float32 -> bfloat16 bits, torch %s (made by make_bf16.py)\n" % torch.__version__)
    for p, q in zip(pats, b.tolist()):
        out.write("%08X %04X\n" % (p, q))


if __name__ == "__main__":
    main()
