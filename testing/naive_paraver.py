"""A deliberately naive, line-by-line reading of a .prv file, independent of tracelib, used as the oracle
in tests: bursts per thread (maximal Running intervals) and the sum of one counter over them."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path


def naive_bursts(prv: Path, counter_type: int) -> dict[tuple[int, int, int], tuple[int, int]]:
    """{(appl, task, thread): (number of bursts, sum of the counter over them)}."""
    running: dict[tuple, list[list[int]]] = defaultdict(list)
    samples: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    with open(prv) as fh:
        fh.readline()
        for line in fh:
            if not line.strip() or line[0] in "#c":
                continue
            f = line.strip().split(":")
            key = (int(f[2]), int(f[3]), int(f[4]))
            if f[0] == "1" and f[7] == "1":
                begin, end = int(f[5]), int(f[6])
                ivs = running[key]
                if ivs and ivs[-1][1] == begin:
                    ivs[-1][1] = end
                else:
                    ivs.append([begin, end])
            elif f[0] == "2":
                t = int(f[5])
                for i in range(6, len(f), 2):
                    if int(f[i]) == counter_type:
                        samples[key].append((t, int(f[i + 1])))
    out = {}
    for key, ivs in running.items():
        total = 0
        for t, v in samples.get(key, []):
            if any(b < t <= e for b, e in ivs):
                total += v
        out[key] = (len(ivs), total)
    return out
