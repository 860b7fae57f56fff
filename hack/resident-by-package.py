#!/usr/bin/env python3
"""Where a running Go binary's resident file-backed memory is: the resident
MiB of each mapping of its executable and the top packages by resident
pages, from /proc/PID/pagemap (the present bit needs no privilege) and
`go tool nm -size -sort address` of the binary.

    python3 hack/resident-by-package.py PID [TOP]

A page is counted for the symbol its first byte belongs to. In the
read-only mapping, "runtime" is mostly the pclntab (function tables) and
"type:"/"go:" the type descriptors.
"""
import bisect
import collections
import os
import struct
import subprocess
import sys

pid = sys.argv[1]
top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
exe = os.readlink(f"/proc/{pid}/exe")
syms = []
for line in subprocess.run(["go", "tool", "nm", "-size", "-sort", "address", exe], capture_output=True, text=True, check=True).stdout.splitlines():
    f = line.split()
    if len(f) >= 4:
        syms.append((int(f[0], 16), " ".join(f[3:])))
syms.sort()
addrs = [a for a, _ in syms]


def package(name):
    if name.startswith(("type:", "go:")):
        return name.split(":")[0] + ":"
    i = name.rfind("/")
    j = name.find(".", i + 1)
    return name[:j] if j > 0 else name


resident, total, by_pkg = collections.Counter(), collections.Counter(), collections.Counter()
with open(f"/proc/{pid}/pagemap", "rb") as pm:
    for line in open(f"/proc/{pid}/maps"):
        f = line.split()
        if len(f) < 6 or f[5] != exe:
            continue
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        for page in range(lo, hi, 4096):
            pm.seek(page // 4096 * 8)
            total[f[1]] += 1
            if struct.unpack("Q", pm.read(8))[0] >> 63 & 1:
                resident[f[1]] += 1
                i = bisect.bisect_right(addrs, page) - 1
                by_pkg[(f[1], package(syms[i][1]) if i >= 0 else "?")] += 1
mib = 4096 / 2**20
for perm in total:
    print(f"{perm}: {resident[perm] * mib:.1f} of {total[perm] * mib:.1f} MiB resident")
for (perm, pkg), n in by_pkg.most_common(top):
    print(f"{n * mib:6.2f} MiB  {perm}  {pkg}")
