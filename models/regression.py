"""Multi-signal performance regression detection over nightly histories (DESIGN §8).

Input: the history of :func:`synthtrace.models.site_signals.site_history` — one row per (app, configuration, night, call
site) with the site's time per visit and the signals that can explain it (instructions, IPC, misses per level,
FP and vector shares, MPI bytes and bandwidth, load balance), ordered by ``started_at``.

Per series (app, configuration, call site):

1. every signal is put on a log scale (shares and balance stay linear) and its night-to-night noise is
   estimated robustly (MAD of first differences);
2. **candidates**: change points of each standardised, median-filtered signal found with ruptures (PELT, L2
   cost as its linear-kernel ``KernelCPD``, penalty proportional to log n) — time itself and every explaining
   signal, so a small change in time is localised by a precise counter;
3. **test**: around each candidate, medians before/after (local windows bounded by the time signal's own change
   points) give each signal's change and a z-score against its noise. An alert needs time to rise (relative
   change >= ``min_rel_time``) and to be **confirmed**: at least one explaining signal moved in the direction
   that slows code down (z >= ``z_signal`` and beyond its own minimum relative change), or the site's archetype
   shifted. Time itself must show the rise (z >= ``z_time``) and stay up (a share ``persistence`` of the nights
   after the change beyond the midpoint, not back down after the next change point: a passing disturbance) —
   unless an explaining signal moved clearly (z >= ``z_strong``, in a series of at least ``window`` nights: a
   noise estimated from fewer is too uncertain): then time at the site may be noisy, and the lasting change is
   judged on that signal. Unexplained changes of time (OS noise, a busy machine) are not reported. On the
   application's total, signals derived from times (MPI time and bandwidth, load balance) explain nothing: its
   waits follow every rank's OS noise; a change of communication or balance shows at its call sites;
4. ``magnitude`` = relative change of time per visit; ``score`` in (0, 1] grows with the evidence of time and
   of the strongest explaining signal.

:func:`label_archetypes` gives every (night, site) its archetype by the rules of :mod:`synthtrace.models.archetypes`
applied to the site's aggregated counters; a shift of the label at the change is itself evidence.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import numpy as np
import polars as pl
import ruptures as rpt
from scipy.ndimage import median_filter

from synthtrace.models.archetypes import ArchetypeRules
from synthtrace.tracelib.domain.machine import Machine, load_machine
from synthtrace.tracelib.domain.metrics import burst_metrics
from synthtrace.models.site_signals import APP_TOTAL


@dataclass(frozen=True)
class Signal:
    """How a signal is read: log scale or linear, which direction slows code down, smallest change that counts."""

    log: bool
    bad: int  # +1: an increase is bad; -1: a decrease is bad; 0: either way is a change of the code
    min_change: float  # relative (log signals) or absolute (linear) change below which the signal did not move
    confirms: bool  # can explain a change of time
    floor: float  # noise floor (log units or absolute)
    z_min: float | None = None  # evidence needed to count as an explanation (None: DetectorParams.z_signal)
    timing: bool = False  # derived from times (waits, balance), not from what the program executes


SIGNALS: dict[str, Signal] = {
    "time_ns": Signal(True, +1, 0.02, False, 0.003),
    "compute_ns": Signal(True, +1, 0.02, False, 0.003),
    "mpi_ns": Signal(True, +1, 0.10, True, 0.01, 6.0, True),  # time itself: noisier evidence, asks for more
    "instructions": Signal(True, +1, 0.01, True, 0.001),
    "ipc": Signal(True, -1, 0.02, True, 0.003),
    "l1_mpki": Signal(True, +1, 0.1, True, 0.01),
    "l2_mpki": Signal(True, +1, 0.1, True, 0.01),
    "l3_mpki": Signal(True, +1, 0.1, True, 0.01),
    "br_mpki": Signal(True, +1, 0.1, True, 0.01),
    "icache_mpki": Signal(True, +1, 0.1, True, 0.01),
    "fp_share": Signal(True, 0, 0.05, True, 0.003),
    "vec_share": Signal(False, -1, 0.05, True, 0.005),
    "mpi_bytes": Signal(True, +1, 0.02, True, 0.001),
    "mpi_bw": Signal(True, -1, 0.1, True, 0.01, 6.0, True),
    "load_balance": Signal(False, -1, 0.03, True, 0.005, timing=True),
}
SERIES_KEYS: tuple[str, ...] = ("app", "config", "call_site")

REGRESSION_SCHEMA: dict[str, pl.DataType] = {
    "app": pl.String(), "config": pl.String(), "call_site": pl.String(), "kernel": pl.String(),
    "archetype_before": pl.String(), "archetype_after": pl.String(),
    "changed_at": pl.Datetime("us"), "run_id": pl.String(), "point": pl.String(), "night": pl.Int64(),
    "signals": pl.List(pl.Struct({"name": pl.String(), "before": pl.Float64(), "after": pl.Float64(),
                                  "z": pl.Float64()})),
    "explained_by": pl.List(pl.String()), "magnitude": pl.Float64(), "score": pl.Float64(),
    "time_before_ns": pl.Float64(), "time_after_ns": pl.Float64(), "n_before": pl.Int64(), "n_after": pl.Int64(),
    "detected_at": pl.Datetime("us", "UTC"),
    # identity kept night after night (issue 28): the alert's id and the night it was first raised
    "alert_id": pl.String(), "first_detected_at": pl.Datetime("us", "UTC"),
}


@dataclass(frozen=True)
class DetectorParams:
    """Thresholds of the detector (defaults used by ``synthtrace detect`` and the benchmark)."""

    min_size: int = 3  # shortest segment between change points (nights)
    min_before: int = 4  # nights needed before a change
    min_after: int = 3  # nights needed after a change before it is reported
    window: int = 12  # at most this many nights on each side are compared
    penalty: float = 3.0  # PELT penalty = penalty x log(n) (standardised, filtered signals)
    min_rel_time: float = 0.02  # smallest relative rise of time per visit reported
    z_time: float = 3.0  # evidence needed on time ...
    z_strong: float = 8.0  # ... unless an explaining signal moved this clearly (then a rise of time suffices) in
    #   a series of at least ``window`` nights (fewer: the signal's noise, estimated from them, is too uncertain)
    z_signal: float = 4.0  # evidence for an explaining signal to count
    persistence: float = 0.7  # share of the nights after the change above the before/after midpoint
    merge_within: int = 3  # alerts closer than this (nights) in one series are one change
    signals: tuple[str, ...] = field(default_factory=lambda: tuple(SIGNALS))


def robust_sigma(x: np.ndarray) -> float:
    """Noise of one point estimated from first differences: 1.4826 x MAD(diff) / sqrt(2) (NaN-free input)."""
    if x.size < 3:
        return float("nan")
    d = np.diff(x)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2))


def _prepare(values: np.ndarray, spec: Signal) -> np.ndarray:
    v = values.astype(np.float64)
    if spec.log:
        v = np.where(v > 0, np.log(np.where(v > 0, v, 1.0)), np.nan)
    return v


def _fill(v: np.ndarray) -> np.ndarray:
    """NaN filled from the previous value (the next one at the start)."""
    ok = np.isfinite(v)
    if ok.all() or not ok.any():
        return v
    idx = np.where(ok, np.arange(v.size), 0)
    np.maximum.accumulate(idx, out=idx)
    out = v[idx]
    first = int(np.argmax(ok))
    out[:first] = v[first]
    return out


def change_points(z: np.ndarray, penalty: float, min_size: int) -> list[int]:
    """Indices where a new segment starts, by PELT (ruptures, L2 cost) on a median-filtered standardised signal.

    ``z`` is in units of the signal's noise; the penalty per change point is ``penalty x log(n)`` (the filter
    shrinks the noise, so this is conservative for noise and still finds shifts of ~2 noise units).
    """
    n = z.size
    if n < 2 * min_size:
        return []
    zf = median_filter(z, size=3, mode="nearest")
    # PELT with the linear kernel is PELT with the L2 cost (the same change points as rpt.Pelt(model="l2")), in
    # ruptures' C code: ~250x faster, which running detection after every night needs
    algo = rpt.KernelCPD(kernel="linear", min_size=min_size, jump=1).fit(zf.reshape(-1, 1))
    bkps = algo.predict(pen=penalty * math.log(n))
    return [b for b in bkps if 0 < b < n]


@dataclass
class _Stat:
    before: float
    after: float
    change: float  # relative (log signals) or absolute
    z: float


def _compare(v: np.ndarray, sigma: float, spec: Signal, lo: int, k: int, hi: int) -> _Stat | None:
    b, a = v[lo:k], v[k:hi]
    b, a = b[np.isfinite(b)], a[np.isfinite(a)]
    if b.size < 2 or a.size < 2:
        return None
    mb, ma = float(np.median(b)), float(np.median(a))
    se = 1.2533 * sigma * math.sqrt(1 / b.size + 1 / a.size)
    z = (ma - mb) / se if se > 0 else 0.0
    if spec.log:
        return _Stat(math.exp(mb), math.exp(ma), math.exp(ma - mb) - 1, z)
    return _Stat(mb, ma, ma - mb, z)


def _mode(labels: list[str | None]) -> tuple[str | None, float]:
    vals = [x for x in labels if x]
    if not vals:
        return None, 0.0
    u, c = np.unique(np.array(vals, dtype=object), return_counts=True)
    i = int(np.argmax(c))
    return str(u[i]), float(c[i] / len(vals))


def detect_series(series: pl.DataFrame, params: DetectorParams = DetectorParams(), *, timing_explains: bool = True
                  ) -> list[dict]:
    """Alerts of one series (rows of one app/configuration/call site sorted by ``started_at``). Without
    ``timing_explains``, signals derived from times (MPI time and bandwidth, load balance) explain nothing: the
    application total's waits follow every rank's OS noise and the machine's network, night by night; a change
    of communication or balance shows at the call sites it happens at."""
    n = series.height
    if n < params.min_before + params.min_after:
        return []
    names = [s for s in params.signals if s in series.columns and series[s].is_not_null().sum() >= n // 2]
    if "time_ns" not in names:
        return []
    vals, sig = {}, {}
    for s in names:
        v = _prepare(series[s].cast(pl.Float64).fill_null(np.nan).to_numpy(), SIGNALS[s])
        if np.isfinite(v).sum() < params.min_before + params.min_after:
            continue
        sigma = robust_sigma(_fill(v)[np.isfinite(_fill(v))])
        vals[s], sig[s] = v, max(sigma if np.isfinite(sigma) else 0.0, SIGNALS[s].floor)
    if "time_ns" not in vals:
        return []
    t = _fill(vals["time_ns"])
    time_cps = change_points((t - np.median(t)) / sig["time_ns"], params.penalty, params.min_size)
    candidates: set[int] = set(time_cps)
    for s, v in vals.items():
        if s != "time_ns" and SIGNALS[s].confirms:
            f = _fill(v)
            candidates.update(change_points((f - np.median(f)) / sig[s], params.penalty, params.min_size))
    labels = series["archetype"].to_list() if "archetype" in series.columns else [None] * n
    starts = series["started_at"].to_list()
    run_ids = series["run_id"].to_list() if "run_id" in series.columns else [None] * n
    points = series["point"].to_list() if "point" in series.columns else [None] * n
    ctx = _Context(vals, sig, time_cps, labels, n, params, timing_explains)
    found = []
    for k in sorted(candidates):
        a = ctx.evaluate(k)
        if a is None:
            continue
        k2 = ctx.refine(k, a)
        if k2 != k:
            a = ctx.evaluate(k2) or a
        a.update({"changed_at": starts[a["night"]], "run_id": run_ids[a["night"]], "point": points[a["night"]]})
        found.append(a)
    found.sort(key=lambda a: -a.pop("_evidence"))
    kept: list[dict] = []
    for a in found:
        if all(abs(a["night"] - b["night"]) >= params.merge_within for b in kept):
            kept.append(a)
    return _fold_drift(sorted(kept, key=lambda a: a["night"]), params.window)


def _fold_drift(alerts: list[dict], within: int) -> list[dict]:
    """One alert per drift: rises of one series that follow each other within ``within`` nights (of the previous
    rise) are one change that grows, dated at its first night, its magnitude from before the first to after the
    last. A 10-night drift is often seen as two change points 7-10 nights apart (its start and its end). Each
    alert's ``_last`` is the night of its last rise."""
    out: list[dict] = []
    for a in alerts:
        prev = out[-1] if out else None
        a.setdefault("_last", a["night"])
        if prev is None or a["night"] - prev["_last"] > within or a["magnitude"] <= 0 or prev["magnitude"] <= 0:
            out.append(a)
            continue
        prev["_last"] = a["night"]
        prev.update(time_after_ns=a["time_after_ns"], n_after=a["n_after"] + a["night"] - prev["night"],
                    magnitude=a["time_after_ns"] / prev["time_before_ns"] - 1.0, score=max(prev["score"], a["score"]),
                    explained_by=list(dict.fromkeys(prev["explained_by"] + a["explained_by"])),
                    archetype_after=a["archetype_after"], signals=a["signals"])
    return out


class _Context:
    """One series' prepared signals, and the test of a change at a given night."""

    def __init__(self, vals: dict[str, np.ndarray], sig: dict[str, float], time_cps: list[int],
                 labels: list[str | None], n: int, params: DetectorParams, timing_explains: bool = True):
        self.vals, self.sig, self.time_cps, self.labels, self.n, self.p = vals, sig, time_cps, labels, n, params
        self.timing_explains = timing_explains

    def window(self, k: int) -> tuple[int, int]:
        """Nights compared around ``k``: bounded by the time signal's other change points (those far enough)."""
        p = self.p
        lo = max([c for c in self.time_cps if c <= k - p.min_before] + [0, k - p.window])
        hi = min([c for c in self.time_cps if c >= k + p.min_after] + [self.n, k + p.window])
        return lo, hi

    def evaluate(self, k: int) -> dict | None:
        """The alert for a change starting at night ``k``, or None if the evidence is not there."""
        p, n = self.p, self.n
        if k < p.min_before or n - k < p.min_after:
            return None
        lo, hi = self.window(k)
        if k - lo < p.min_before or hi - k < p.min_after:
            return None
        st = _compare(self.vals["time_ns"], self.sig["time_ns"], SIGNALS["time_ns"], lo, k, hi)
        if st is None or st.change < p.min_rel_time:
            return None
        moved, stats = [], {"time_ns": st}
        for s, v in self.vals.items():
            if s == "time_ns":
                continue
            spec = SIGNALS[s]
            x = _compare(v, self.sig[s], spec, lo, k, hi)
            if x is None:
                continue
            stats[s] = x
            direction_ok = spec.bad == 0 or np.sign(x.change) == spec.bad
            z_min = p.z_signal if spec.z_min is None else max(spec.z_min, p.z_signal)
            explains = spec.confirms and (self.timing_explains or not spec.timing)
            if explains and direction_ok and abs(x.z) >= z_min and abs(x.change) >= spec.min_change:
                moved.append(s)
        arch_before, share_b = _mode(self.labels[lo:k])
        arch_after, share_a = _mode(self.labels[k:hi])
        shifted = (arch_before is not None and arch_after is not None and arch_before != arch_after
                   and share_b >= 0.6 and share_a >= 0.6)
        if not (moved or shifted):
            return None
        strongest = max(moved, key=lambda s: abs(stats[s].z), default=None)
        z_strongest = abs(stats[strongest].z) if strongest else 0.0
        # a lasting rise: judged on time, or (time noisy at this site) on the explaining signal that moved clearly,
        # once the series is long enough to trust that signal's noise estimate
        strong = z_strongest >= p.z_strong and n >= p.window
        lasting = strongest if strong else "time_ns"
        if not self._lasts(lasting, stats[lasting], lo, k, hi):
            return None
        if not strong and st.z < p.z_time:
            return None
        score = 1 - math.exp(-0.08 * (min(max(st.z, 0.0), 25.0) + min(z_strongest, 25.0) + (5.0 if shifted else 0.0)))
        shown = ["time_ns", "compute_ns", "mpi_ns", *moved]
        sigs = [{"name": s, "before": stats[s].before, "after": stats[s].after, "z": float(stats[s].z)}
                for s in dict.fromkeys(shown) if s in stats]
        return {"night": k, "archetype_before": arch_before, "archetype_after": arch_after, "signals": sigs,
                "explained_by": moved + (["archetype"] if shifted else []), "magnitude": st.change, "score": score,
                "time_before_ns": st.before, "time_after_ns": st.after, "n_before": k - lo, "n_after": hi - k,
                "_evidence": max(st.z, 0.0) + sum(abs(stats[s].z) for s in moved)}

    def _lasts(self, name: str, st: _Stat, lo: int, k: int, hi: int) -> bool:
        """A share ``persistence`` of the nights after ``k`` lie beyond the before/after midpoint of ``name``, and
        the signal does not come back after the window (a passing disturbance)."""
        spec = SIGNALS[name]
        mid = ((math.log(st.before) + math.log(st.after)) / 2 if spec.log else (st.before + st.after) / 2)
        up = 1.0 if st.change >= 0 else -1.0
        after = self.vals[name][k:hi]
        after = after[np.isfinite(after)]
        if np.mean(up * (after - mid) > 0) < self.p.persistence:
            return False
        later = self.vals[name][hi:hi + self.p.window]
        later = later[np.isfinite(later)]
        return not (later.size >= self.p.min_after and up * (np.median(later) - mid) < 0)

    def refine(self, k: int, alert: dict, radius: int = 2) -> int:
        """The night near ``k`` that best splits the signals that moved (largest between-segment sum of squares)."""
        names = [s for s in alert["explained_by"] if s in self.vals] or ["time_ns"]
        lo, hi = self.window(k)
        best, best_k = -1.0, k
        for j in range(max(lo + 2, k - radius), min(hi - 2, k + radius) + 1):
            ss = 0.0
            for s in names:
                v = _fill(self.vals[s][lo:hi]) / self.sig[s]
                b, a = v[: j - lo], v[j - lo:]
                ss += b.size * a.size / (b.size + a.size) * (a.mean() - b.mean()) ** 2
            if ss > best:
                best, best_k = ss, j
        return best_k


def label_archetypes(history: pl.DataFrame, machine: Machine | None = None) -> pl.DataFrame:
    """``history`` with an ``archetype`` column: the rules applied to each (night, site)'s aggregated counters.

    Each row becomes one burst-like row (per-visit duration and counters rebuilt from the rates); the DRAM
    share assumes the configuration's tasks spread over the sockets of one node (see
    :mod:`synthtrace.tracelib.domain.metrics`).
    """
    if history.height == 0:
        return history.with_columns(pl.lit(None, pl.String).alias("archetype"))
    machine = machine or load_machine()
    ins = pl.col("instructions")
    frame = history.select(
        pl.col("compute_ns").round().cast(pl.Int64).clip(lower_bound=1).alias("duration_ns"),
        ins.alias("PAPI_TOT_INS"),
        (ins / pl.col("ipc")).alias("PAPI_TOT_CYC"),
        (pl.col("l1_mpki") * ins / 1000).alias("PAPI_L1_DCM"),
        (pl.col("l2_mpki") * ins / 1000).alias("PAPI_L2_DCM"),
        (pl.col("l3_mpki") * ins / 1000).alias("PAPI_L3_TCM"),
        (pl.col("br_mpki") * ins / 1000).alias("PAPI_BR_MSP"),
        (pl.col("br_mpki") * ins / 1000 / pl.col("br_misp_rate")).alias("PAPI_BR_INS"),
        (pl.col("icache_mpki") * ins / 1000).alias("PAPI_L1_ICM"),
        (pl.col("fp_share") * ins).alias("PAPI_FP_INS"),
        (pl.col("vec_share") * pl.col("fp_share") * ins).alias("PAPI_VEC_INS"),
        pl.col("config").str.split("x").list.first().cast(pl.Int64, strict=False).alias("_tasks"),
    )
    out = []
    for tasks, part in frame.with_row_index("_i").group_by("_tasks", maintain_order=True):
        rps = float(min(machine.cores_per_socket, max(1, (tasks[0] or 1) // max(1, machine.sockets))))
        bm = burst_metrics(part.drop("_tasks"), machine, ranks_per_socket=rps)
        lab = ArchetypeRules(machine, ranks_per_socket=rps).fit().classify_bursts(bm)
        out.append(part.select("_i").with_columns(
            pl.when(lab["archetype"] == "insufficient_counters").then(lab["provisional"])
            .otherwise(lab["archetype"]).alias("archetype")))
    labels = pl.concat(out).sort("_i")["archetype"]
    return history.with_columns(labels.alias("archetype"))


def detect(history: pl.DataFrame, params: DetectorParams = DetectorParams(), *, archetypes: bool = True,
           now: datetime | None = None) -> pl.DataFrame:
    """Alerts of every series of a history, as a frame with :data:`REGRESSION_SCHEMA` columns."""
    if history.height == 0:
        return pl.DataFrame(schema=REGRESSION_SCHEMA)
    if archetypes and "archetype" not in history.columns:
        history = label_archetypes(history)
    rows = []
    for key, part in history.sort(*SERIES_KEYS, "started_at").group_by(*SERIES_KEYS, maintain_order=True):
        for a in detect_series(part, params, timing_explains=key[2] != APP_TOTAL):
            site = key[2]
            rows.append({"app": key[0], "config": key[1], "call_site": site,
                         "kernel": site.split(" (")[0] if site else None, **a})
    rows = _fold_app_total(rows, params.merge_within, params.window // 2)
    stamp = now or datetime.now(UTC)
    if not rows:
        return pl.DataFrame(schema=REGRESSION_SCHEMA)
    return pl.DataFrame([{**r, "detected_at": stamp, "first_detected_at": stamp, "alert_id": alert_id(r)}
                         for r in rows], schema=REGRESSION_SCHEMA)


def alert_id(alert: dict) -> str:
    """A stable identity: the series and the night the change started."""
    key = "|".join(str(alert.get(k)) for k in (*SERIES_KEYS, "changed_at"))
    return hashlib.sha1(key.encode()).hexdigest()[:12]


@dataclass
class Reconciled:
    """Tonight's alerts against the stored ones: ``alerts`` to store (open), and which of them are ``new``, which
    stored ones were ``updated`` (same change, grown or confirmed) and which were ``withdrawn`` (later nights
    contradict them: detection on the longer history no longer finds them)."""

    alerts: pl.DataFrame
    new: list[str]
    updated: list[str]
    withdrawn: pl.DataFrame


def reconcile(before: pl.DataFrame, tonight: pl.DataFrame, params: DetectorParams = DetectorParams()) -> Reconciled:
    """Stable alerts night by night (issue 28): a change detected tonight that a stored alert of the same series
    already reports (its change night within ``params.window // 2`` nights) keeps that alert's id, change date and
    first detection, with tonight's figures (a drift grows in one alert, a step is never re-dated); a stored alert
    tonight's detection no longer finds is withdrawn; the rest are new."""
    if before.height == 0 or "alert_id" not in before.columns:
        return Reconciled(tonight, tonight["alert_id"].to_list(), [], pl.DataFrame(schema=REGRESSION_SCHEMA))
    within = params.window // 2
    old = before.filter(pl.col("alert_id").is_not_null()).to_dicts()
    kept, new, updated, used = [], [], [], set()
    for a in tonight.to_dicts():
        match = min((b for b in old if b["alert_id"] not in used and all(a[k] == b[k] for k in SERIES_KEYS)
                     and abs(a["night"] - b["night"]) <= within), key=lambda b: abs(a["night"] - b["night"]),
                    default=None)
        if match is None:
            kept.append(a)
            new.append(a["alert_id"])
            continue
        used.add(match["alert_id"])
        since = {k: match[k] for k in ("alert_id", "changed_at", "night", "run_id", "point", "first_detected_at")}
        a = {**a, **since, "time_before_ns": match["time_before_ns"]}
        a["magnitude"] = a["time_after_ns"] / a["time_before_ns"] - 1.0 if a["time_before_ns"] else a["magnitude"]
        kept.append(a)
        updated.append(a["alert_id"])
    gone = [b for b in old if b["alert_id"] not in used]
    return Reconciled(pl.DataFrame(kept, schema=REGRESSION_SCHEMA), new, updated,
                      pl.DataFrame(gone, schema=REGRESSION_SCHEMA))


def replay_nights(history: pl.DataFrame, params: DetectorParams = DetectorParams(), *, first: int = 7,
                  archetypes: bool = False) -> list[dict]:
    """Detection run after each night (calendar day of ``started_at``) as the nightly does, on the history up to
    that night, reconciled with the previous night's alerts. One row per night from the ``first``-th on: night
    (0-based index), open alerts, and the ids raised, updated, withdrawn, and re-dated (an alert whose change date
    moved: never, by construction of :func:`reconcile`, counted to prove it); ``alerts``: the open alerts (series
    keys, ``alert_id``, change ``night``); ``raw``: tonight's detection before reconciling (series keys, change
    ``night``)."""
    # one detection per calendar night (every app's runs of a night are in before the night's detection runs)
    points = history.select(pl.col("started_at").dt.date().unique().sort())["started_at"]
    stored = pl.DataFrame(schema=REGRESSION_SCHEMA)
    dates: dict[str, object] = {}
    out = []
    for k in range(first, points.len() + 1):
        upto = history.filter(pl.col("started_at").dt.date() <= points[k - 1])
        tonight = detect(upto, params, archetypes=archetypes, now=datetime(2000, 1, 1, tzinfo=UTC))
        r = reconcile(stored, tonight, params)
        redated = [i for i, d in zip(r.alerts["alert_id"], r.alerts["changed_at"]) if i in dates and dates[i] != d]
        dates.update(zip(r.alerts["alert_id"].to_list(), r.alerts["changed_at"].to_list()))
        out.append({"night": k - 1, "open": r.alerts["alert_id"].to_list(), "new": r.new, "updated": r.updated,
                    "withdrawn": r.withdrawn["alert_id"].to_list(), "redated": redated,
                    "alerts": r.alerts.select(*SERIES_KEYS, "alert_id", "night").to_dicts(),
                    "raw": tonight.select(*SERIES_KEYS, "night").to_dicts()})
        stored = r.alerts
    return out


def _fold_app_total(rows: list[dict], within: int, after: int) -> list[dict]:
    """One alert per change: an alert of the application's total time near a call site's alert of the same app and
    configuration (dated from ``within`` nights before the site's change to ``after`` nights after it, or to
    ``within`` nights after its last rise: the total, noisier, is often seen later in a drift) is folded into the
    site's (as its ``app_time_ns`` signal); alone, it stays (the change is spread over sites)."""
    sites = [r for r in rows if r["call_site"] != APP_TOTAL]
    out = list(sites)
    for t in (r for r in rows if r["call_site"] == APP_TOTAL):
        near = [s for s in sites if (s["app"], s["config"]) == (t["app"], t["config"])
                and s["night"] - within < t["night"] < max(s["night"] + after, s.get("_last", s["night"]) + within)]
        if not near:
            out.append(t)
            continue
        time = next(x for x in t["signals"] if x["name"] == "time_ns")
        for s in near:
            s["signals"] = [*s["signals"], {**time, "name": "app_time_ns"}]
    for r in out:
        r.pop("_last", None)
    return out


def params_dict(params: DetectorParams) -> dict:
    return asdict(params)
