"""OpenMP wait policy on a shared node: why ``import synthtrace`` defaults ``OMP_WAIT_POLICY=PASSIVE``.

scikit-learn's gradient boosting (``train``, ``predict``) and k-means (archetype discovery) run OpenMP threads.
With OpenMP's default (active, spinning) wait, a thread that reaches a barrier burns its core while the other
thread waits for a core the machine's other jobs hold. The same fits are timed, each in a fresh interpreter, with
the default policy (the baseline) and with the passive one that synthtrace sets, on the machine as it is and with
two CPU-bound processes beside them (a login node, a CI runner, the nightly job next to a user):

    python benchmarks/bench_openmp_wait.py [--rows 20000] [--out benchmarks/results/openmp_wait.md]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.machine import machine_description
from benchmarks.results_io import emit

# the estimators and settings of models/predictors.py and models/archetype_discovery.py, on random data
FIT = """
import sys, time, numpy as np
rows = int(sys.argv[1])
rng = np.random.default_rng(0)
X = rng.normal(size=(rows, 20)); y = X[:, 0] + np.sin(X[:, 1]) + rng.normal(size=rows) * 0.1
from sklearn.cluster import KMeans
from sklearn.ensemble import HistGradientBoostingRegressor
t = time.perf_counter()
HistGradientBoostingRegressor(max_iter=300, learning_rate=0.08, max_leaf_nodes=31, min_samples_leaf=20,
                              early_stopping=False, random_state=0).fit(X, y)
hgb = time.perf_counter() - t
t = time.perf_counter()
for k in range(2, 17):
    KMeans(n_clusters=k, n_init=3, random_state=0).fit(X[:2000, :3])
print(hgb, time.perf_counter() - t)
"""
BURN = "while True: pass"


def timed(policy: str | None, rows: int) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run([sys.executable, "-c", FIT, str(rows)], env=env, capture_output=True, text=True, check=True)
    hgb, km = map(float, out.stdout.split())
    return hgb, km


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    rows = []
    for load in ("as it is", "2 CPU-bound processes beside"):
        burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(2)] if load != "as it is" else []
        try:
            time.sleep(1 if burners else 0)
            base = timed(None, args.rows)
            passive = timed("PASSIVE", args.rows)
        finally:
            for b in burners:
                b.kill()
                b.wait()
        rows.append((load, base, passive))
    lines = ["# OpenMP wait policy on a shared node", "",
             f"Machine: {machine_description()}; load average {load_before:.2f} before, "
             f"{os.getloadavg()[0]:.2f} after. `python benchmarks/bench_openmp_wait.py --rows {args.rows}`.", "",
             f"One `HistGradientBoostingRegressor` fit (the predictors' settings, {args.rows} rows x 20 features) and "
             "15 k-means fits (k = 2..16, 2,000 points x 3 features, as archetype discovery runs them), each in a "
             "fresh interpreter. Baseline: OpenMP's default wait policy; synthtrace: `OMP_WAIT_POLICY=PASSIVE`, "
             "which `import synthtrace` sets unless the user set a policy.", "",
             "| machine load | fits | default wait s | passive wait s | default / passive |", "|---|---|---|---|---|"]
    for load, base, passive in rows:
        for i, name in enumerate(("gradient boosting", "k-means x15")):
            lines.append(f"| {load} | {name} | {base[i]:.2f} | {passive[i]:.2f} | {base[i] / passive[i]:.1f}x |")
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
