"""Campaign mode: nightly histories of several applications with injected regressions of known kind, size and night.

Every night each application runs once as an experiment (its runs recorded with the usual counter sets) in
``OUT_DIR/<YYYY-MM-DD>/<app>_<YYYYMMDD>/<app>.run<k>.prv``; nights differ by placement, clock and noise (their
seeds include the night). A regression injected at night ``n`` stays from ``n`` on (a step change, like a bad
commit). Kinds and what they change:

- ``more_instructions``: the main kernel executes ``size`` x more instructions;
- ``lost_vectorisation``: the vector kernel loses ``size`` of its vector FP instructions (the same FLOPs then take
  more, scalar, instructions);
- ``worse_locality``: the main kernel's cache misses per instruction grow by ``size`` (L1, L2, L3);
- ``more_mpi_bytes``: every message grows by ``size``;
- ``new_imbalance``: one rank's main kernel does ``size`` more work;
- ``network_slowdown``: network latency x (1 + size), bandwidth / (1 + size).
"""
from __future__ import annotations

import math

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.domain.machine import load_machine
from synthtrace.simulator.engine import ExperimentResult, ExperimentSpec, LabellerFactory, simulate_experiment
from synthtrace.simulator.kernels import Kernel
from synthtrace.simulator.patterns import PATTERNS
from synthtrace.simulator.truth import TruthStore

#: kind -> (smallest, largest) size drawn for random injections
REGRESSION_KINDS: dict[str, tuple[float, float]] = {
    "more_instructions": (0.10, 0.30), "lost_vectorisation": (0.6, 0.95), "worse_locality": (0.4, 1.0),
    "more_mpi_bytes": (0.5, 2.0), "new_imbalance": (0.25, 0.6), "network_slowdown": (0.5, 2.0),
}
#: the kernel each pattern's vectorisation regression hits (patterns without a vectorised kernel have none)
VECTOR_KERNEL = {"halo": "stencil_interior", "cg": "axpy", "transpose": "fft_local"}


@dataclass(frozen=True)
class Injection:
    """A regression: ``kind`` applied to ``app`` from ``night`` (0-based) on, with relative ``size``."""

    kind: str
    app: str
    night: int
    size: float

    def __post_init__(self) -> None:
        if self.kind not in REGRESSION_KINDS:
            raise BadInputError(f"unknown regression kind {self.kind!r} (known: {', '.join(REGRESSION_KINDS)})")
        if self.night < 0 or self.size <= 0:
            raise BadInputError(f"regression {self.kind} on {self.app}: night must be >= 0 and size > 0")
        if self.kind == "lost_vectorisation" and self.size > 1:
            raise BadInputError("lost_vectorisation size is the lost fraction of vector instructions (0-1]")


def parse_injection(text: str) -> Injection:
    """``KIND:APP:NIGHT[:SIZE]`` (size defaults to the middle of the kind's range)."""
    parts = text.split(":")
    if len(parts) not in (3, 4):
        raise BadInputError(f"--inject {text!r}: expected KIND:APP:NIGHT[:SIZE]")
    kind, app, night = parts[0], parts[1], parts[2]
    if kind not in REGRESSION_KINDS:
        raise BadInputError(f"--inject {text!r}: unknown kind {kind!r} (known: {', '.join(REGRESSION_KINDS)})")
    try:
        n = int(night)
        size = float(parts[3]) if len(parts) == 4 else sum(REGRESSION_KINDS[kind]) / 2
    except ValueError:
        raise BadInputError(f"--inject {text!r}: NIGHT must be an integer and SIZE a number") from None
    if not (math.isfinite(size) and size > 0):  # attack 7 A24: a NaN size was stored in the ground truth
        raise BadInputError(f"--inject {text!r}: SIZE must be a positive number (got {parts[3]})")
    return Injection(kind, app, n, size)


def applicable(kind: str, pattern: str) -> bool:
    """Whether a regression kind changes anything in an application of ``pattern``."""
    if kind == "lost_vectorisation":
        return pattern in VECTOR_KERNEL
    return True


def random_injections(apps: dict[str, str], nights: int, rng: np.random.Generator) -> list[Injection]:
    """One regression per application (``apps``: app -> pattern) at a night in the second half of the history."""
    if nights < 4:
        return []
    out = []
    for app, pattern in apps.items():
        kinds = [k for k in REGRESSION_KINDS if applicable(k, pattern)]
        kind = kinds[int(rng.integers(len(kinds)))]
        lo, hi = REGRESSION_KINDS[kind]
        night = int(rng.integers(max(2, nights // 3), nights - 1))
        out.append(Injection(kind, app, night, round(float(rng.uniform(lo, hi)), 3)))
    return out


def _devectorised(k: Kernel, lost: float, lanes: float) -> tuple[Kernel, float]:
    """Kernel ``k`` with a fraction ``lost`` of its vector FP instructions turned scalar; returns it and the factor
    by which its instruction count grows. Per element of data nothing else changes (same FLOPs, loads, misses,
    branches), so those per-instruction rates shrink by that factor; one lost vector instruction becomes
    ``lanes`` scalar ones."""
    vec = k.fp * k.vec  # vector FP instructions per original instruction
    moved = lost * vec
    grow = 1.0 + moved * (lanes - 1.0)
    fp_new = (k.fp - moved + moved * lanes) / grow
    per_element = {f: getattr(k, f) / grow for f in ("ld", "sr", "br", "l1_mpki", "l2_mpki", "l3_mpki", "l1i_mpki",
                                                     "itlb_mpki", "dtlb_mpki")}
    return replace(k, fp=fp_new, vec=((vec - moved) / grow) / fp_new if fp_new else 0.0, **per_element), grow


def apply_injections(
    spec: ExperimentSpec, injections: list[Injection], night: int
) -> tuple[ExperimentSpec, list[Injection]]:
    """``spec`` with every regression of its app injected at or before ``night``; returns the active ones too.
    Kernel changes act on the application's own kernels (its variants, ``spec.app_kernels``)."""
    active = [i for i in injections if i.app == spec.app and i.night <= night]
    pattern = PATTERNS[spec.pattern]
    main = pattern.main_kernel
    work, kernels = dict(spec.work), dict(spec.kernels)
    msg, net, imb = spec.msg_scale, spec.net_slowdown, spec.imbalance
    lanes = load_machine(spec.machine).vector_lanes
    for inj in active:
        s = inj.size
        if inj.kind == "more_instructions":
            work[main] = work.get(main, 1.0) * (1 + s)
        elif inj.kind == "lost_vectorisation" and pattern.name in VECTOR_KERNEL:
            name = VECTOR_KERNEL[pattern.name]
            k, grow = _devectorised(kernels.get(name) or spec.app_kernel(name), s, lanes)
            kernels[name] = k
            work[name] = work.get(name, 1.0) * grow
        elif inj.kind == "worse_locality":
            k = kernels.get(main) or spec.app_kernel(main)
            kernels[main] = k.scaled(l1_mpki=1 + s, l2_mpki=1 + s, l3_mpki=1 + s)
        elif inj.kind == "more_mpi_bytes":
            msg *= 1 + s
        elif inj.kind == "new_imbalance":
            imb = (spec.ranks // 2, 1 + s)
        elif inj.kind == "network_slowdown":
            net *= 1 + s
    return replace(spec, work=work, kernels=kernels, msg_scale=msg, net_slowdown=net, imbalance=imb), active


def regression_labels(injections: list[Injection], apps: dict[str, str], start: datetime) -> pl.DataFrame:
    """The injected regressions as labels for the detector benchmark."""
    rows = []
    for i in injections:
        pattern = apps.get(i.app, "")
        p = PATTERNS.get(pattern)
        target = {"lost_vectorisation": VECTOR_KERNEL.get(pattern), "more_mpi_bytes": "messages",
                  "network_slowdown": "network"}.get(i.kind, p.main_kernel if p else None)
        if i.kind == "new_imbalance":
            target = f"{p.main_kernel if p else 'main'} on one rank"
        date = start + timedelta(days=i.night)
        rows.append({"app": i.app, "pattern": pattern, "kind": i.kind, "size": i.size, "night": i.night,
                     "date": date.date(), "experiment": f"{i.app}_{date:%Y%m%d}", "target": target})
    return pl.DataFrame(rows, schema={"app": pl.String, "pattern": pl.String, "kind": pl.String, "size": pl.Float64,
                                      "night": pl.Int64, "date": pl.Date, "experiment": pl.String, "target": pl.String})


def simulate_campaign(out_dir, template: ExperimentSpec, apps: dict[str, str], nights: int, injections: list[Injection],
                      truth: TruthStore, *, start: datetime | None = None, labeller: LabellerFactory | None = None,
                      progress: Callable[[int], None] | None = None,
                      app_kernels: dict[str, dict[str, Kernel]] | None = None) -> list[ExperimentResult]:
    """Nightly experiments of every app (``apps``: app -> pattern) for ``nights`` nights, regressions injected.
    ``app_kernels``: app -> its own kernels where they differ from the base ones (:mod:`.variants`)."""
    unknown = sorted({i.app for i in injections} - set(apps))
    if unknown:
        raise BadInputError(f"--inject names app(s) not simulated: {', '.join(unknown)} (apps: {', '.join(apps)})")
    late = [i for i in injections if i.night >= nights]
    if late:
        raise BadInputError(f"--inject night {late[0].night} is beyond the last night ({nights - 1})")
    start = start or template.started_at
    results = []
    for night in range(nights):
        day = start + timedelta(days=night)
        for k, (app, pattern) in enumerate(apps.items()):
            spec = replace(template, app=app, pattern=pattern, night=night, experiment=f"{app}_{day:%Y%m%d}",
                           started_at=day + timedelta(minutes=7 * k), app_kernels=(app_kernels or {}).get(app, {}))
            spec, _ = apply_injections(spec, injections, night)
            results.append(simulate_experiment(f"{out_dir}/{day:%Y-%m-%d}", spec, truth, labeller=labeller,
                                               progress=progress))
    truth.add("regressions", regression_labels(injections, apps, start))
    return results
