"""Counter values no PMU can produce, per counter and rule (DESIGN §5 ``counter_anomalies``).

A trace keeps its counter values as recorded; these rules say which of them are impossible, so that ingest can
report them (one warning line per counter, the ``counter_anomalies`` view) and every analysis can treat them as
missing (:func:`without_anomalies`, applied where counters are read for metrics). The rules, in the order a value
is judged (it counts under the first that flags it):

- ``negative``: a negative count (the counter read lower than before; Extrae prints such a difference as an
  unsigned 64-bit number, which reads back negative);
- ``beyond_2^62``: more than 2**62 events in one interval: no 64-bit PMU delta gets there in a run's lifetime
  (at 10 GHz and 16 events per cycle that takes 900 years); it is the unsigned wrap of a difference gone wrong;
- ``above_instructions``: more misses, branches or TLB walks than instructions retired in the same interval;
- ``above_10ghz``: cycles implying a clock above 10 GHz over the interval (judged over at least
  :data:`MIN_SPAN_NS`, the coarsest time unit traces are commonly written in);
- ``ipc_above_16``: instructions above 16 per cycle (no core retires more): the instructions are flagged.

Times in ns; counts as they are in the frame (integers as read, floats in merged frames).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from synthtrace.tracelib.domain.counters import canonical, resolve
from synthtrace.tracelib.schema import counter_columns

MAX_COUNT = 2**62  # events in one interval
MAX_CYCLES_PER_NS = 10.0  # 10 GHz
MAX_IPC = 16.0
MIN_SPAN_NS = 1_000  # intervals shorter than this are judged as this long (time-unit resolution)
#: roles that count events of a subset of the instructions (at most one per instruction)
PER_INSTRUCTION_ROLES = ("l1_dcm", "l1_icm", "l2_dcm", "l3_tcm", "br_ins", "br_msp", "itlb_miss", "dtlb_miss")
CYCLE_ROLES = ("cyc", "ref_cyc")
#: columns of the frame schemas whose counting queries :class:`AnomalyTally` keeps at most (the query of a
#: 1,043-column schema holds ~7 MB of Polars expressions): parts of calls or bursts sampling thousands of counter
#: types each hold a schema of their own, and the kept queries grew with the parts (issue 23: ~560 MB at 1 M calls of
#: 4,096 counter types); a real trace's parts share a few narrow schemas, all kept
QUERY_COLUMNS = 8192

#: rule -> what it means, as said in warnings (in the order rules are judged)
RULES: dict[str, str] = {
    "negative": "negative (read lower than before)",
    "beyond_2^62": "beyond 2^62 (an unsigned wrap)",
    "above_instructions": "more than the instructions retired",
    "above_10ghz": "cycles above 10 GHz",
    "ipc_above_16": "more than 16 instructions per cycle",
}
ANOMALY_SCHEMA: dict[str, pl.DataType] = {"run_id": pl.String(), "counter": pl.String(), "rule": pl.String(),
                                          "n_values": pl.Int64(), "example": pl.String()}


def _in_range(col: str) -> pl.Expr:
    c = pl.col(col)
    return (c >= 0) & (c <= MAX_COUNT)


def anomaly_rules(schema: pl.Schema | dict) -> dict[str, list[tuple[str, pl.Expr]]]:
    """For each counter column of a bursts-like or MPI-call frame with that ``schema``: its rules, in judging
    order, as (rule, expression true where the value breaks it). A NULL value breaks none."""
    columns = counter_columns(pl.DataFrame(schema=schema))
    cmap = resolve(columns)
    ins = (cmap.columns.get("ins") or [None])[0]
    cyc = (cmap.columns.get("cyc") or [None])[0]
    span = pl.max_horizontal(pl.col("duration_ns"), pl.lit(MIN_SPAN_NS)).cast(pl.Float64) \
        if "duration_ns" in schema else None
    out: dict[str, list[tuple[str, pl.Expr]]] = {}
    for c in columns:
        v = pl.col(c)
        rules = [("negative", v < 0), ("beyond_2^62", v > MAX_COUNT)]
        role = canonical(c)
        if ins is not None and c != ins and role in PER_INSTRUCTION_ROLES and "STALL" not in c.upper():
            rules.append(("above_instructions", _in_range(ins) & (v > pl.col(ins))))
        if role in CYCLE_ROLES and span is not None:
            rules.append(("above_10ghz", v.cast(pl.Float64) > MAX_CYCLES_PER_NS * span))
        if role == "ins" and cyc is not None:
            per_cycle = v.cast(pl.Float64) > MAX_IPC * pl.col(cyc).cast(pl.Float64)
            rules.append(("ipc_above_16", _in_range(cyc) & per_cycle))
        out[c] = rules
    return out


def _first_rule(rules: list[tuple[str, pl.Expr]]) -> pl.Expr:
    """The name of the first rule a value breaks, NULL when it breaks none."""
    expr = pl.lit(None, pl.String)
    for name, broken in reversed(rules):
        expr = pl.when(broken.fill_null(False)).then(pl.lit(name)).otherwise(expr)
    return expr


def _first_broken_counts(rules: dict[str, list[tuple[str, pl.Expr]]]) -> list[pl.Expr]:
    """Per counter and rule, in order: how many values break that rule and none before it ([helper reader] issue 27:
    each rule's mask once, where comparing :func:`_first_rule` with every rule evaluated the chain once per rule)."""
    counts = []
    for c, checks in rules.items():
        earlier = pl.lit(False)
        for r, broken in checks:
            broken = broken.fill_null(False)
            counts.append((broken & ~earlier).sum().alias(f"{c}\0{r}"))
            earlier = earlier | broken
    return counts


def sane_samples() -> pl.Expr:
    """True for counter samples (a ``value`` column of counts) that no rule of one value breaks."""
    return _in_range("value")


def without_anomalies(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """``frame`` with every counter value that breaks a rule set to NULL (a missing value to every metric);
    the judgement uses the values as recorded, so nulling one counter never changes another's verdict."""
    schema = frame.collect_schema() if isinstance(frame, pl.LazyFrame) else frame.schema
    rules = anomaly_rules(schema)
    if not rules:
        return frame
    return frame.with_columns(
        pl.when(~pl.any_horizontal([r.fill_null(False) for _, r in checks])).then(pl.col(c)).alias(c)
        for c, checks in rules.items())


@dataclass
class AnomalyTally:
    """Counts of impossible values over the parts of one trace (bursts and MPI calls), with one example of each
    (counter, rule): where it is and its value."""

    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    examples: dict[tuple[str, str], str] = field(default_factory=dict)
    #: per frame schema seen lately (the least recently used first; together at most :data:`QUERY_COLUMNS`
    #: columns, the last always kept): the first rule each counter breaks and the query counting them ([helper
    #: reader] issue 27: built once per schema, not per part: 4 % of an ingest's CPU)
    _queries: dict[tuple, tuple[dict[str, pl.Expr], list[tuple[str, str]], list[pl.Expr]]] = field(
        default_factory=dict)

    def add(self, frame: pl.DataFrame, what: str) -> None:
        """Judge the counter values of ``frame`` (``what``: ``burst`` or ``MPI call``, for the examples)."""
        first, names, query = self._query(tuple(frame.schema.items()))
        if not frame.height or not names:
            return
        counts = frame.select(query).row(0)
        for (counter, rule), n in zip(names, counts):
            if not n:
                continue
            key = (counter, rule)
            self.counts[key] = self.counts.get(key, 0) + n
            if key not in self.examples:
                row = frame.with_row_index("_row").filter(first[counter] == rule).row(0, named=True)
                self.examples[key] = _example(row, counter, rule, what)

    def _query(self, schema: tuple) -> tuple[dict[str, pl.Expr], list[tuple[str, str]], list[pl.Expr]]:
        """The rules of ``schema`` (a frame's (name, dtype) pairs): built once while it is among the schemas kept."""
        if schema in self._queries:
            self._queries[schema] = self._queries.pop(schema)  # the most recently used last
            return self._queries[schema]
        rules = anomaly_rules(dict(schema))
        # one pass counting every (counter, rule) at once; rows are looked at only where something is found
        first = {c: _first_rule(checks) for c, checks in rules.items()}
        names = [(c, r) for c, checks in rules.items() for r, _ in checks]
        while self._queries and sum(map(len, self._queries)) + len(schema) > QUERY_COLUMNS:
            del self._queries[next(iter(self._queries))]  # the least recently used
        self._queries[schema] = first, names, _first_broken_counts(rules)
        return self._queries[schema]

    def add_samples(self, samples: pl.DataFrame) -> None:
        """Judge counter samples of one counter per row (``counter``, ``value``: the uncore samples), by the
        rules that need no other counter."""
        v = pl.col("value")
        found = (samples.with_row_index("_row")
                 .with_columns(pl.when(v < 0).then(pl.lit("negative")).when(v > MAX_COUNT).then(pl.lit("beyond_2^62"))
                               .alias("rule"))
                 .drop_nulls("rule").group_by("counter", "rule").agg(pl.len().alias("n"), pl.col("_row").first()))
        for counter, rule, n, row in found.iter_rows():
            key = (counter, rule)
            self.counts[key] = self.counts.get(key, 0) + n
            if key not in self.examples:
                r = samples.row(row, named=True)
                self.examples[key] = (f"uncore sample at {r['time_ns']} ns of appl {r['appl']} task {r['task']} "
                                      f"thread {r['thread']}: {r['value']}")

    def frame(self, run_id: str) -> pl.DataFrame:
        """ANOMALY_SCHEMA rows, by counter then rule order."""
        order = list(RULES)
        keys = sorted(self.counts, key=lambda k: (k[0], order.index(k[1])))
        return pl.DataFrame([(run_id, c, r, self.counts[(c, r)], self.examples[(c, r)]) for c, r in keys],
                            schema=ANOMALY_SCHEMA, orient="row")

    def warnings(self, where: str) -> list[str]:
        """One line per counter with impossible values: how many under each rule."""
        by_counter: dict[str, list[str]] = {}
        for counter, rule in sorted(self.counts, key=lambda k: (k[0], list(RULES).index(k[1]))):
            by_counter.setdefault(counter, []).append(f"{self.counts[(counter, rule)]} {RULES[rule]}")
        return [f"{where}: counter {counter}: impossible values kept as recorded and treated as missing by the "
                f"metrics (counter_anomalies): {', '.join(parts)}" for counter, parts in by_counter.items()]


def _example(row: dict, counter: str, rule: str, what: str) -> str:
    """Where one impossible value is and what makes it so."""
    seq = row.get("burst_seq", row.get("call_seq"))
    place = f"{what} {seq} of appl {row.get('appl')} task {row.get('task')} thread {row.get('thread')}"
    value = row[counter]
    if rule == "above_instructions":
        ins = resolve(list(row)).columns["ins"][0]
        return f"{place}: {value} with {row[ins]} instructions"
    if rule == "above_10ghz":
        return f"{place}: {value} cycles in {row.get('duration_ns')} ns"
    if rule == "ipc_above_16":
        cyc = resolve(list(row)).columns["cyc"][0]
        return f"{place}: {value} instructions in {row[cyc]} cycles"
    return f"{place}: {value}"
