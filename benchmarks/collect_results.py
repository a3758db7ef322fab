"""Assemble benchmarks/RESULTS.md from the per-benchmark result files in benchmarks/results/.

Each ``bench_*.py`` writes its own ``results/<name>.md`` (figures, machine, command, ratios to the baselines
measured in the same run); this script puts them in one document, in the order of the issues.

    python benchmarks/collect_results.py
"""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = [
    "ingest",
    "ingest-cpu",
    "simulate",
    "merge",
    "merge_stress",
    "merge_mechanisms",
    "flow",
    "cli_startup",
    "report",
    "archetypes",
    "predictors",
    "regression",
    "otf2",
    "openmp_wait",
    "pop",
]
HEADER = """# Benchmark results

Speed and accuracy figures of synthtrace, each with the command that reproduces it and the baselines measured in
the same run. The machine is the project's 2-core, 24 GiB sandbox; it was shared with other work while these ran,
so wall-clock figures are noisy (several sections also give CPU time or repeated rounds). Regenerate this file with
`python benchmarks/collect_results.py` after running the benchmarks.

"""


def main() -> None:
    files = {p.stem: p for p in (HERE / "results").glob("*.md")}
    names = [n for n in ORDER if n in files] + sorted(n for n in files if n not in ORDER)
    body = [HEADER] + [files[n].read_text().strip() + "\n" for n in names]
    missing = [n for n in ORDER if n not in files]
    if missing:
        body.append("Not measured yet: " + ", ".join(missing) + ".\n")
    (HERE / "RESULTS.md").write_text("\n".join(body))
    print(f"wrote {HERE / 'RESULTS.md'} from {len(names)} result files")


if __name__ == "__main__":
    main()
