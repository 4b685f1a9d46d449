#!/usr/bin/env python3
"""Independent reference for tokpos's initialiser (include/tokpos/random.h).

A separate implementation, in another language, of the documented mapping:
Philox4x32-10 (Random123) -> Box-Muller with Python's own math.log/cos/sin
in double -> float32. tests/random_test.cc pins the values printed here,
so the pins do not come from the code under test.

Usage: python3 tools/philox_reference.py [seed stream count std]
"""
import math
import struct
import sys

M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK, p1 & MASK, ((p0 >> 32) ^ c3 ^ k1) & MASK, p0 & MASK
    return c0, c1, c2, c3


def normals(seed, stream, count):
    out = []
    j = 0
    while len(out) < count:
        x = philox4x32_10((j & MASK, j >> 32, stream & MASK, stream >> 32), (seed & MASK, seed >> 32))
        for a, b in ((x[0], x[1]), (x[2], x[3])):
            u1 = (a + 1.0) / 2.0**32
            u2 = b / 2.0**32
            r = math.sqrt(-2.0 * math.log(u1))
            out += [r * math.cos(2.0 * math.pi * u2), r * math.sin(2.0 * math.pi * u2)]
        j += 1
    return out[:count]


def f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


if __name__ == "__main__":
    # Random123's published known-answer vectors, checked here first.
    assert philox4x32_10((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    assert philox4x32_10((MASK,) * 4, (MASK, MASK)) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)
    seed, stream, count, std = 0, 0, 8, 0.02
    if len(sys.argv) == 5:
        seed, stream, count, std = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    for i, z in enumerate(normals(seed, stream, count)):
        v = 0.0 + std * z
        print(f"{i:3d} z={z:+.17f} value=0x{f32_bits(v):08x} ({struct.unpack('<f', struct.pack('<f', v))[0]:+.9g})")
