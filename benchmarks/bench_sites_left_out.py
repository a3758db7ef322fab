"""What a pair of runs traced by one tool loses when its call sites are left out of the alignment (sites26): each
mechanism's simulator campaign (seed 0, Paraver traces with caller events) merged as is and with every run's
``call_site`` NULL (:func:`synthtrace.tracelib.merge.merge_runs.without_sites`, as a campaign mixing tools is
merged). Prints per mechanism: verdict and share of long bursts right, with sites and without.

    PYTHONPATH=. nice -n 10 python benchmarks/bench_sites_left_out.py /tmp/sites-left-out ring,torus,amr
"""
from __future__ import annotations

import sys
from pathlib import Path

import synthtrace.simulator.mechanisms as mech
from synthtrace.tracelib.merge.merge_runs import merge_runs, without_sites
from testing.simulator_campaigns import merge_campaign


def main() -> None:
    out, names = Path(sys.argv[1]), sys.argv[2].split(",")
    for name in names:
        c = mech.simulate(out / name, mech.campaign(name, 0))
        kept = merge_campaign(c)
        left = merge_campaign(c, merge=lambda runs: merge_runs([without_sites(r) for r in runs]))
        print(f"| {name} | {kept.verdict} {kept.right:.2%} | {left.verdict} {left.right:.2%} |", flush=True)


if __name__ == "__main__":
    main()
