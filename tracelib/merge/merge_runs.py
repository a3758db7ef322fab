"""Merge the counters of several runs of one experiment into one synthetic trace (DESIGN §6).

Pure functions on Polars frames. :func:`merge_runs` takes the runs of one experiment (:class:`RunTables`: bursts
and MPI calls as read by a trace reader or from the warehouse) and returns a :class:`MergeResult`:

- ``merged``: one row per burst of the **reference run** (``--reference``, else the first run by name) with its
  times, its closing MPI call, one column per counter of *any* run, ``match_score`` and ``estimated``;
- ``quality``: one row per counter: the run it comes from, how it got there, coverage and estimated error;
- ``matches``: provenance (merge_matches): per reference burst and other run, the other run's task, thread and
  burst (in its own numbering; NULL when unmatched), the match score and ``ambiguous``: the logical messages
  just before or after the pair disagree between the runs (the pair lies in a span the data did not place, e.g.
  around an iteration one run has and the other has not) and ``msg_mismatch``: the two bursts were opened by the
  completion of different messages (an ``MPI_Waitany`` or ``MPI_ANY_SOURCE`` receive that returned another
  partner's message in the other run), so the values come from the work on another message; ``share``: below 1, a
  piece of a phase the other run cut elsewhere (a buffer flush), given that share of the other burst's values (an
  estimate at the phase's average rates: pieces.expand).

**Before aligning**, each other run's task numbering is checked against the reference's
(:mod:`synthtrace.tracelib.merge.ranks`: renumbered when the message graph says so, refused when it cannot tell), and
the runs' call structure (per thread, consecutive calls with polling and completion loops collapsed: timing-free,
:func:`synthtrace.tracelib.merge.checks.same_structure`) must agree on at least ``min_match_rate`` of the shorter
run's (else :class:`NotSameProgramError`); a match rate below ``SAME_LENGTH`` of the *longer* run, or matched
bursts that execute other instruction counts (``merge_checks.WORK_SHIFT``), are warned about: another input deck,
another code version, or a run cut short.

**Counter transfer.** A counter the reference run recorded is kept as recorded. Any other counter comes from one
*source run*: among the runs that recorded it, the one whose bursts matched most reference bursts (ties: first by
name). A matched reference burst gets the source burst's value by the plan :mod:`synthtrace.tracelib.merge.transfer`
chooses by leave-one-out (as recorded, per instruction, or also rescaled by a co-varying counter); an unmatched
one gets NULL, or, with ``estimate_unmatched``, an estimate flagged in ``estimated`` (never a silent guess).

**Quality.** ``coverage`` is the share of reference bursts that got a value (not estimated): matched, and the
counter recorded there (a source run's multiplexed counter sets or a rank without counters leave matched bursts
NULL), ``coverage_long`` the same among bursts of at least ``min_error_duration_ns`` (polling iterations that one
run repeated more often than the other have no counterpart, so ``coverage`` is lower where polling differs);
``coverage + estimated_share`` is at most 1.
``estimated_error`` / ``estimated_error_p95``: the leave-one-out (median, p95) relative error of the counter's plan
over the common counters (the largest over them). ``cross_run_diff`` is, for a counter both runs recorded, the
median relative difference between the two runs' values of matched bursts: the natural variation a merge cannot
remove. ``misfit``, ``verdict`` (ok / suspect / bad) and ``verdict_reason`` come from
:mod:`synthtrace.tracelib.merge.checks`.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl

from synthtrace.tracelib.merge.align import (AlignConfig, align_runs, sequence_table, site_counts, sites_compared,
                                             sort_bursts)
from synthtrace.tracelib.errors import BadInputError
from synthtrace.tracelib.merge.blocks import (WIDE_COLUMNS, ScanRows, block_rows, frame_of, gathered, group_rows,
                                              written)
from synthtrace.tracelib.formats.heap import release_free_heap
from synthtrace.tracelib.merge.checks import (POSITION_BY_TIME, POSITION_BY_WORK, SAME_KINDS, WORK_SHIFT,
                                              PairSignals, arrival_tolerant, call_structure, kinds_share, opened_by,
                                              opened_differently, pair_signals, sites_named, structure_kinds,
                                              structure_share, structure_sums, unpaired, verdict)
from synthtrace.tracelib.merge.messages import logical_messages, message_counts
from synthtrace.tracelib.merge.noise import (MachineState, long_pairs, machine_invariant, rate_counters, rate_state,
                                             work_noise)
from synthtrace.tracelib.merge.arrival_order import REQUEST_SCHEMA, ArrivalPairs, follow_arrival, request_bursts
from synthtrace.tracelib.merge.pieces import CounterBatches, Units, expand, summed, units, without_untraced
from synthtrace.tracelib.merge.communicators import renamed_communicators
from synthtrace.tracelib.merge.ranks import (WORK, Correspondence, correspondence, renumber, renumber_calls,
                                             renumber_columns)
from synthtrace.tracelib.merge.transfer import (CHOICE_SAMPLE, DURATION, Choice, Plan, choose, relative_errors,
                                                transferred, work_counter)
from synthtrace.tracelib.schema import OTHER_STATE, THREAD_KEYS, UNTRACED_AFTER, counter_columns
from synthtrace.tracelib.thread_key import appl_base, task_key, task_of

#: rescaling by a co-varying reference counter unless told otherwise: None = chosen by the leave-one-out estimate
#: (:func:`synthtrace.tracelib.merge.transfer.choose`)
DEFAULT_RESCALE: bool | None = None
#: share of the longer run's bursts that must match for the runs to count as the same length (else a warning)
SAME_LENGTH = 0.9
#: reference counters preferred as alignment features (stable across runs first); at most MAX_FEATURES are used
FEATURE_PRIORITY = ("PAPI_TOT_INS", "PAPI_TOT_CYC", "PAPI_REF_CYC", "INST_RETIRED:ANY", "CPU_CLK_UNHALTED")
MAX_FEATURES = 2
BASE_COLUMNS = [*THREAD_KEYS, "burst_seq", "cpu", "start_ns", "end_ns", "duration_ns", "mpi_call", "call_site"]
KEYS = [*THREAD_KEYS, "burst_seq"]
#: the MPI calls' columns the merge reads (call structure, messages, signatures; issue 23): a stored run's calls are
#: read with these alone, not their counters, kind, cpu, root, duration nor run id (~40% of a run's calls table)
CALL_COLUMNS = [*THREAD_KEYS, "call_seq", "mpi_call", "start_ns", "end_ns", "bytes_sent", "bytes_recv", "peer",
                "n_messages", "comm", "tag", "call_site"]
#: the bursts' columns the steps before the alignment read (units, sequence table, rank correspondence, opening
#: messages) besides the counters compared and the work counters (:data:`~synthtrace.tracelib.merge.ranks.WORK`):
#: a stored run's bursts are read with these alone before it is aligned, whole after (issue 23: :func:`bursts_of`)
ALIGN_COLUMNS = (*THREAD_KEYS, "burst_seq", "start_ns", "end_ns", "duration_ns", "mpi_call", "call_site",
                 UNTRACED_AFTER)

QUALITY_SCHEMA: dict[str, pl.DataType] = {
    "experiment": pl.String(), "counter": pl.String(), "source_run": pl.String(), "source_run_id": pl.String(),
    "reference_run": pl.String(), "method": pl.String(), "rescaled_by": pl.String(), "coverage": pl.Float64(),
    "coverage_long": pl.Float64(),
    "estimated_share": pl.Float64(), "estimated_error": pl.Float64(), "estimated_error_p95": pl.Float64(),
    "cross_run_diff": pl.Float64(), "match_rate": pl.Float64(), "mean_match_score": pl.Float64(),
    "comm_agreement": pl.Float64(), "msg_agreement": pl.Float64(), "misfit": pl.Float64(), "verdict": pl.String(),
    "verdict_reason": pl.String(),
    "n_bursts": pl.Int64(),
}
MATCHES_SCHEMA: dict[str, pl.DataType] = {
    "experiment": pl.String(), "appl": pl.Int32(), "task": pl.Int32(), "thread": pl.Int32(), "burst_seq": pl.Int64(),
    "other_run": pl.String(), "other_run_id": pl.String(), "other_task": pl.Int32(), "other_thread": pl.Int32(),
    "other_burst_seq": pl.Int64(), "score": pl.Float64(), "ambiguous": pl.Boolean(), "msg_mismatch": pl.Boolean(),
    "share": pl.Float64(),  # [flush24] < 1: a piece apportioned that share of the other burst (an estimate)
}


# --------------------------------------------------------------------------------------------- errors
class MergeInputError(BadInputError):
    """The runs handed to the merge cannot be merged."""


class TooFewRunsError(MergeInputError):
    """An experiment needs at least two runs to merge."""


class UnknownReferenceError(MergeInputError):
    """``--reference`` names no run of the experiment."""


class NotSameProgramError(MergeInputError):
    """The runs are not the same program: task layout or MPI structure differ (the message says what)."""


class NoCommonCounterError(MergeInputError):
    """Two runs share no counter and no logical messages to validate matches with (``allow_timing_only`` merges
    anyway, with a warning)."""


class TimingOnlyWarning(UserWarning):
    """Runs were matched by MPI structure and timing only; their match scores are lowered."""


# --------------------------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class RunTables:
    """One run: its identity and its bursts / MPI calls (schemas of :mod:`synthtrace.tracelib.schema`)."""

    run_id: str
    run_name: str
    #: a lazy scan is read when :func:`merge_runs` aligns the run and let go once it is aligned (issue 23: a
    #: campaign's runs are not all held at once)
    bursts: pl.DataFrame | pl.LazyFrame
    #: a lazy scan is read where the merge needs the calls and not held (issue 23: :func:`merge_runs` keeps what it
    #: derives from them, not the calls, while it aligns)
    mpi_calls: pl.DataFrame | pl.LazyFrame
    #: the trace's communication records (MESSAGE_SCHEMA of :mod:`synthtrace.tracelib.formats.bursts`: both ends'
    #: task, thread and logical time, size, tag), when the reader or the warehouse kept them; else None and the
    #: logical messages come from the calls alone (:mod:`synthtrace.tracelib.merge.messages`); a lazy scan is read
    #: as the bursts are
    messages: pl.DataFrame | pl.LazyFrame | None = None
    #: the members of the communicators the trace declares (COMMUNICATOR_SCHEMA of
    #: :mod:`synthtrace.tracelib.formats.source`); None: not known, the merge compares communicator ids as numbers
    communicators: pl.DataFrame | None = None

    @property
    def counters(self) -> list[str]:
        """Counter columns with at least one recorded (non-NULL) value."""
        cols = counter_columns(self.bursts)
        if not cols:
            return []
        # a lazy scan streamed: its counter columns are never held whole (issue 23, attack 18 F2)
        got = streamed_row(self.bursts, [pl.col(c).is_not_null().any() for c in cols])
        return [c for c, has in zip(cols, got) if has]


def streamed_row(frame: pl.DataFrame | pl.LazyFrame, exprs: Sequence[pl.Expr]) -> tuple:
    """The one-row aggregates ``exprs`` of ``frame``. A lazy scan is streamed, at most ``WIDE_COLUMNS`` of them a
    pass (issue 23: a pass decodes each row group's columns it reads at once, several row groups at a time; the
    4,106 columns of a wide run's copy in row groups of 5,152 rows took 1.1 GB)."""
    if not isinstance(frame, pl.LazyFrame):
        return frame.select(exprs).row(0)
    return tuple(v for a in range(0, len(exprs), WIDE_COLUMNS)
                 for v in frame.select(exprs[a:a + WIDE_COLUMNS]).collect(engine="streaming").row(0))


def calls_of(run: RunTables) -> pl.DataFrame:
    """The run's MPI calls as a frame (read now when they are a lazy scan)."""
    calls = run.mpi_calls
    return calls.collect() if isinstance(calls, pl.LazyFrame) else calls


def messages_of(run: RunTables) -> pl.DataFrame | None:
    """The run's communication records as a frame (read now when they are a lazy scan), None when it has none."""
    m = run.messages
    return m.collect() if isinstance(m, pl.LazyFrame) else m


def loaded(run: RunTables) -> RunTables:
    """``run`` with its communication records read, its bursts sorted as :func:`sort_bursts` sorts them when they
    are a frame (a lazy scan is kept: read where the merge needs them, :func:`bursts_of`), its calls as they are
    (read where the merge derives what it needs from them)."""
    bursts = run.bursts if isinstance(run.bursts, pl.LazyFrame) else sort_bursts(run.bursts)
    return replace(run, bursts=bursts, messages=messages_of(run))


def bursts_of(run: RunTables, features: Sequence[str] | None = None) -> pl.DataFrame:
    """The bursts of ``run`` (as :func:`loaded` leaves it) sorted as :func:`sort_bursts` sorts them. A lazy scan is
    read now: with ``features`` (the counters an alignment compares), only what the steps before the alignment read
    (:data:`ALIGN_COLUMNS`, ``features``, the work counters), else whole; the row order is the same either way (the
    sort is by thread and ``burst_seq``, stable). A frame is returned as it is (a projection of it would free
    nothing: its holder keeps it whole). Issue 23: the alignment holds no run's bursts, which it never reads."""
    b = run.bursts
    if not isinstance(b, pl.LazyFrame):
        return b
    if features is not None:
        keep = {*ALIGN_COLUMNS, *features, *WORK}
        b = b.select(c for c in b.collect_schema().names() if c in keep)
    return sort_bursts(b.collect())


def narrow_read(run: RunTables, columns: Sequence[str],
                renum: dict[int, int] | None = None) -> tuple[pl.DataFrame, pl.Series]:
    """The bursts of ``run`` (a lazy scan) with ``columns`` alone (those it has), their tasks renumbered by
    ``renum``, sorted as :func:`sort_bursts` sorts them, and each row's row number in the scan (where its other
    columns are read, a block at a time: :func:`synthtrace.tracelib.merge.blocks.gathered`)."""
    b = run.bursts
    assert isinstance(b, pl.LazyFrame), "a frame's columns are all held already"
    keep = set(columns)
    got = b.with_row_index("_scan_row").select(
        *[c for c in b.collect_schema().names() if c in keep], pl.col("_scan_row").cast(pl.Int64)).collect()
    if renum:
        got = renumber_columns(got, renum, ("task",))
    got = sort_bursts(got)
    return got.drop("_scan_row"), got.get_column("_scan_row")


def narrow_columns(features: Sequence[str], common: Sequence[str]) -> list[str]:
    """The bursts' columns the steps after an alignment read of both runs besides the common counters' values on
    the choice sample and the transferred ones (:data:`ALIGN_COLUMNS`, the work counters, ``features``, the
    pairs' work and rate counters)."""
    work = work_counter(common)
    rate = next((c for c in common if c != work), None)
    return list(dict.fromkeys([*ALIGN_COLUMNS, *WORK, *features, *(c for c in (work, rate) if c)]))


@dataclass(frozen=True)
class Blockwise:
    """A merge that reads the runs' counter columns a block at a time (issue 23, attack 18 F2: a run sampling
    4,096 counter types held whole is bursts x 4,096 cells): the reference's bursts are a lazy scan and a ``spill``
    folder takes what it writes (unmatched bursts' estimates too: :class:`Estimates`).
    ``columns``: the reference's columns the steps after every other run's alignment read (:func:`narrow_columns`
    of each), read from its scan once (:meth:`reference_rows`); ``run``: the other run being aligned (its index
    among them: :meth:`of_run`), None before."""

    spill: Path
    reference: RunTables
    columns: tuple[str, ...]
    run: int | None = None

    @classmethod
    def of(cls, ref: RunTables, spill: Path | None, columns: Sequence[str]) -> Blockwise | None:
        """The blockwise merge of ``ref``, None when the merge reads the runs whole."""
        if spill is None or not isinstance(ref.bursts, pl.LazyFrame):
            return None
        return cls(spill, ref, tuple(columns))

    def of_run(self, j: int) -> Blockwise:
        """This merge as it aligns the ``j``-th other run."""
        return replace(self, run=j)

    @property
    def run_folder(self) -> Path:
        """Where the choice sample of the other run being aligned is written (made when it is:
        :func:`_wide_samples`)."""
        assert self.run is not None, "no other run is being aligned"
        return self.units_paths(self.spill, self.run)[1].parent

    @staticmethod
    def units_paths(spill: Path, run: int) -> tuple[Path, Path]:
        """Where a blockwise merge spilling to ``spill`` writes its reference's multi-piece units' sums and those of
        its ``run``-th other run (:func:`unit_sums`)."""
        return spill / "reference-units.parquet", spill / f"run-{run:04d}" / "units.parquet"

    def reference_rows(self, columns: Sequence[str]) -> tuple[pl.DataFrame, pl.Series]:
        """:func:`narrow_read` of the reference with ``columns`` (those of :attr:`columns` it has): read from its
        scan on the first call and written to the spill folder, read back from there by the later ones."""
        path = self.spill / "reference-narrow.parquet"
        if not path.is_file():
            got, rows = narrow_read(self.reference, self.columns)
            got.with_columns(rows).write_parquet(path)
        keep = set(columns)
        names = pl.scan_parquet(path, glob=False).collect_schema().names()
        got = pl.read_parquet(path, columns=[c for c in names if c in keep or c == "_scan_row"], glob=False)
        return got.drop("_scan_row"), got.get_column("_scan_row")


def _units_over(u: Units, bursts: pl.DataFrame) -> Units:
    """``u``, the units of a projection of ``bursts`` (:func:`bursts_of`), over ``bursts`` whole: the same units,
    their table with every column (rebuilt when a unit has several pieces: its counters are their sums)."""
    return units(bursts) if u.split else replace(u, table=bursts)


@dataclass(frozen=True)
class CallStructure:
    """What the same-program check reads of one run's MPI calls (:func:`synthtrace.tracelib.merge.checks.
    call_structure`), kept instead of the calls: whether it names call sites, and its structure with the call sites
    (when it names them) and without."""

    sites: bool
    with_sites: pl.DataFrame | None
    without_sites: pl.DataFrame | None

    @classmethod
    def of(cls, calls: pl.DataFrame, sites: bool | None = None) -> CallStructure:
        """``sites``: whether the structure compared will count call sites (both runs name them; None: not known
        yet, both kept when this run names them)."""
        named = sites_named(calls)
        with_sites = call_structure(calls, True) if named and sites is not False else None
        return cls(named, with_sites, call_structure(calls, False) if not (named and sites) else None)

    def table(self, sites: bool) -> pl.DataFrame:
        """The structure counted with or without call sites."""
        got = self.with_sites if sites else self.without_sites
        assert got is not None, "a structure this run's own did not keep"
        return got


@dataclass(frozen=True)
class MergeOptions:
    """How to merge. ``reference`` is a run name or id (default: first run by name)."""

    reference: str | None = None
    rescale: bool | None = DEFAULT_RESCALE
    map_ranks: bool = True  # renumber the other run's tasks when its numbering differs (see tracelib.merge.ranks)
    estimate_unmatched: bool = False
    allow_timing_only: bool = False
    min_match_rate: float = 0.5  # share of the shorter run's call structure both runs must have (same program)
    min_error_duration_ns: int = 10_000  # bursts shorter than this are left out of error statistics (ns)
    align: AlignConfig = field(default_factory=AlignConfig)


#: Polars' ``write_parquet`` options a wide :class:`PartedTable` is written with, by their pyarrow names (Polars'
#: compression "uncompressed" is pyarrow's "none")
ARROW_OPTIONS = {"compression": "compression", "compression_level": "compression_level",
                 "statistics": "write_statistics"}


class PartedTable:
    """A table written part by part as Parquet files, read or written whole without holding it in memory."""

    def __init__(self, parts: Sequence[Path]):
        self.parts = list(parts)

    @property
    def height(self) -> int:
        return sum(pl.scan_parquet(p, glob=False).select(pl.len()).collect().item() for p in self.parts)

    def lazy(self) -> pl.LazyFrame:
        return pl.scan_parquet(self.parts, glob=False)

    def collect(self) -> pl.DataFrame:
        return self.lazy().collect()

    def write_parquet(self, path: Path | str, **options) -> None:
        """The parts as one Parquet file (streamed), ``options`` Polars' (``DataFrame.write_parquet``). A table wider
        than :data:`~synthtrace.tracelib.merge.blocks.WIDE_COLUMNS` (a merged table has a column per counter of any
        run) is written a part at a time in row groups of :func:`~synthtrace.tracelib.merge.blocks.group_rows` rows
        (:func:`~synthtrace.tracelib.merge.blocks.written`: Polars' sink held its rows whole, issue 23: 725 MB for
        10,000 bursts x 6,144 columns), ``options`` passed as pyarrow's (:data:`ARROW_OPTIONS`); any other is
        refused (TypeError), not dropped."""
        scan = self.lazy()
        if (width := scan.collect_schema().len()) <= WIDE_COLUMNS:
            scan.sink_parquet(path, **options)
            return
        if unknown := sorted(set(options) - set(ARROW_OPTIONS)):
            raise TypeError(f"PartedTable.write_parquet of a wide table takes no option {', '.join(unknown)}")
        # in row groups sized for its width: the writer keeps state per column chunk until its footer
        written((pl.read_parquet(p, glob=False) for p in self.parts), Path(path), group_rows(self.height, width),
                **{ARROW_OPTIONS[k]: ("none" if (k, v) == ("compression", "uncompressed") else v)
                   for k, v in options.items()})


@dataclass
class MergeResult:
    """What :func:`merge_runs` returns (see module docstring; ``matches`` is a :class:`PartedTable` when the merge
    wrote it a run at a time, ``merged`` too when a partitioned merge wrote it a group at a time)."""

    experiment: str
    reference_run_id: str
    reference_run: str
    merged: pl.DataFrame
    quality: pl.DataFrame
    matches: pl.DataFrame
    warnings: list[str] = field(default_factory=list)


#: the signals of no pairs (the zero of their sum)
NO_PAIRS = PairSignals(None, None, None, None, 0)


@dataclass(frozen=True)
class Tally:
    """Sums over the reference bursts of one other run's alignment, additive over groups of the reference's tasks
    (the partitioned merge adds its groups' tallies; :meth:`signals` and the shares come from the sums): bursts,
    matched, match scores, agreeing closing calls, the pairs' signals
    (:class:`synthtrace.tracelib.merge.checks.PairSignals`, summable), and the same-program check's: call structure
    (each run's consecutive call pairs, those both have) and long units (matched, each run's)."""

    rows: int = 0
    matched: int = 0
    score_sum: float = 0.0
    same_sig: int = 0
    pairs: PairSignals = NO_PAIRS
    structure_ref: int = 0
    structure_other: int = 0
    structure_common: int = 0
    structure_ref_known: int = 0  # [plan22] each run's pairs of a kind the other run has (checks.structure_kinds)
    structure_other_known: int = 0
    units_long_matched: int = 0
    units_long_ref: int = 0
    units_long_other: int = 0

    def __add__(self, other: Tally) -> Tally:
        return Tally(**{k: getattr(self, k) + getattr(other, k) for k in self.__dataclass_fields__})

    @property
    def rate(self) -> float:
        """Share of reference bursts matched."""
        return self.matched / self.rows if self.rows else 0.0

    def signals(self, sampled: PairSignals | None) -> PairSignals:
        """The :class:`PairSignals` of the sums, their medians (``work_shift``, ``work_noise``, ``machine``) from the
        choice sample's (``sampled``)."""
        return replace(self.pairs, work_shift=sampled.work_shift if sampled else None,
                       work_noise=sampled.work_noise if sampled else None,
                       machine=sampled.machine if sampled else None)

    def tied(self, tie: str | None) -> Tally:
        """[ranks22] The tally with the rank correspondence's tie (:class:`Correspondence`) in its signals."""
        return replace(self, pairs=replace(self.pairs, rank_tie=tie)) if tie else self


@dataclass(frozen=True)
class Compared:
    """What the decisions (:func:`decide`) read of one other run's alignment beside its sums and samples: the
    counters both runs recorded (``common``) and those the alignment compared (``features``)."""

    common: tuple[str, ...]
    features: tuple[str, ...]


@dataclass(frozen=True)
class AlignedRun(Compared):
    """One other run aligned to the reference (what :func:`_align_other` returns), over the reference bursts it
    reports (all, or the tasks of one group of a partitioned merge).

    ``run``: the run with its tasks renumbered as the reference's (``renumbered``: {appl << ID_BITS | own task:
    reference task}, None when they correspond as numbered); ``original``: the run as given; ``matches``: the match
    table of the reference bursts (:func:`synthtrace.tracelib.merge.align.align_runs`), its ``other_row`` indexing
    ``source`` (the run's bursts followed by its multi-piece units), compared with ``reference`` (the reference
    bursts, an apportioned burst's counters replaced by its unit's) and ``share`` (a reference burst's share of its
    unit; None when no unit is split); ``common``: counters both runs recorded, ``features`` those the alignment
    compared; ``tally``: the sums the checks and shares come from; ``sample``: the pairs of the choice sample
    (:func:`choice_sample`); ``run_sample``: the choice sample of the run's own bursts (what rescaling is chosen
    on); ``partner_pairs``: in a group of a partitioned merge, the pairs of the partners' bursts it aligned too
    (reference keys and ``other_seq``), None otherwise."""

    run: RunTables
    original: RunTables
    renumbered: dict[int, int] | None
    matches: pl.DataFrame
    reference: pl.DataFrame
    source: pl.DataFrame
    share: pl.Series | None
    tally: Tally
    sample: Sample
    run_sample: pl.DataFrame
    partner_pairs: pl.DataFrame | None = None
    #: both runs' bursts read a block at a time (:class:`WideRows`), None when ``reference`` and ``source`` hold
    #: every column
    wide: WideRows | None = None

    @property
    def pairs(self) -> Pairs:
        m = self.matches
        return Pairs(self.reference, self.source, m.get_column("other_row"), m.get_column("match_score"), self.share)

    def kept_pairs(self, counters: Sequence[str]) -> Pairs:
        """:attr:`pairs` as the transfer reads them, without the runs' bursts (issue 23: what :func:`merge_runs`
        keeps of a run once the next is aligned): the reference's common counters, the matched bursts' ``counters``
        gathered (row i of ``source`` matched to reference row i; NULL when unmatched), the score and share."""
        p = self.pairs
        if self.wide is not None:
            return WidePairs(self.wide.ref, self.wide.src.gather(p.other_row), p.score, p.share)
        read = dict.fromkeys([*counters, DURATION])  # [plan22] the duration: what a per-ns plan reads
        return Pairs(p.reference.select(*dict.fromkeys([*self.common, DURATION])),
                     p.source.select(pl.col(c).gather(p.other_row) for c in read), paired_rows(p.other_row), p.score,
                     p.share)


@dataclass(frozen=True)
class WideRows:
    """Where the columns a merge does not hold of two aligned runs are read (issue 23): per row of
    :attr:`AlignedRun.reference` and of :attr:`AlignedRun.source`, its row in its run's lazy scan or its unit's
    sums' (:func:`unit_sums`: an apportioned reference burst, a multi-piece unit of the source); per burst of the
    other run (its narrow bursts, :func:`narrow_read`), its row in its scan (``run_rows``)."""

    ref: ScanRows
    src: ScanRows
    run_rows: pl.Series


@dataclass(frozen=True)
class WidePairs:
    """:class:`Pairs` whose counters are read a block of reference bursts at a time (:meth:`block`): per reference
    burst, where its values are read, where the matched source row's are (none: unmatched), the match score and
    its share of the matched unit (None: 1)."""

    ref: ScanRows
    src: ScanRows
    score: pl.Series
    share: pl.Series | None = None

    def block(self, start: int, n: int, ref_columns: Sequence[str], src_columns: Sequence[str]) -> Pairs:
        """The pairs of reference bursts ``start`` .. ``start + n - 1``: the reference's ``ref_columns``, the
        matched bursts' ``src_columns``."""
        src = self.src.slice(start, n)
        return Pairs(self.ref.slice(start, n).read(ref_columns), src.read(src_columns), paired_rows(src.found),
                     self.score.slice(start, n), self.share.slice(start, n) if self.share is not None else None)


class Pairs(NamedTuple):
    """What the values of a transferred counter come from: per reference burst (``reference``, the rows compared),
    the ``source`` row it matched (``other_row``, NULL when unmatched), the match ``score`` and its ``share`` of
    the matched unit (None: 1)."""

    reference: pl.DataFrame
    source: pl.DataFrame
    other_row: pl.Series
    score: pl.Series
    share: pl.Series | None

    def block(self, start: int, n: int, ref_columns: Sequence[str], src_columns: Sequence[str]) -> Pairs:
        """The pairs of reference bursts ``start`` .. ``start + n - 1`` (held: as :meth:`AlignedRun.kept_pairs`
        keeps them, source row i matched to reference row i)."""
        del ref_columns, src_columns
        return Pairs(self.reference.slice(start, n), self.source.slice(start, n),
                     paired_rows(self.other_row.slice(start, n)), self.score.slice(start, n),
                     self.share.slice(start, n) if self.share is not None else None)


@dataclass(frozen=True)
class Sample:
    """The choice sample of one other run's pairs: every k-th reference burst (k from the reference's size, see
    :func:`sample_rows`), with the columns the transfer plan's choice and the work-shift check read:
    ``reference`` (keys, call and site, common counters), ``source`` (the matched bursts' common counters, row i
    matched to row i; NULL when unmatched), ``matches`` (the match table's rows, ``other_row`` indexing ``source``)
    and ``long`` (bursts >= ``min_error_duration_ns``)."""

    reference: pl.DataFrame | pl.LazyFrame  # a lazy scan of the files a wide merge wrote (:func:`_wide_samples`)
    source: pl.DataFrame | pl.LazyFrame
    matches: pl.DataFrame
    long: pl.Series

    @staticmethod
    def concat(parts: Sequence[Sample]) -> Sample:
        """The samples of consecutive groups of tasks as one (``other_row`` renumbered)."""
        def joined(frames: list) -> pl.DataFrame | pl.LazyFrame:  # a wide group's are scans: all lazy then
            lazy = any(isinstance(f, pl.LazyFrame) for f in frames)
            return pl.concat([f.lazy() if lazy else f for f in frames], how="diagonal_relaxed" if lazy else "vertical")
        ref, src, m, long = (joined([getattr(p, f) for p in parts]) for f in ("reference", "source", "matches",
                                                                              "long"))
        return Sample(ref, src, _paired(m), long)


def _named(frame: pl.DataFrame | pl.LazyFrame) -> list[str]:
    """The keys, call site, call and duration of a choice sample's ``reference`` (a frame or a lazy scan)."""
    names = frame.collect_schema().names()
    return [c for c in (*THREAD_KEYS, "call_site", "mpi_call", "duration_ns") if c in names]


def paired_rows(other_row: pl.Series) -> pl.Series:
    """Row i on the matched rows of ``other_row`` (NULL on the others): the rows of a source gathered by it."""
    return pl.Series(other_row.name, np.arange(other_row.len()), pl.Int64).scatter(
        np.flatnonzero(other_row.is_null().to_numpy()), None)


def _paired(m: pl.DataFrame) -> pl.DataFrame:
    """``m`` with ``other_row`` i on its matched rows (their source is row i of the sample's ``source``)."""
    return m.with_columns(pl.when(pl.col("other_row").is_not_null()).then(pl.int_range(pl.len(), dtype=pl.Int64))
                          .alias("other_row"))


def sample_rows(n: int, offset: int = 0, total: int | None = None) -> np.ndarray:
    """The rows of a block of ``n`` rows, starting at row ``offset`` of a table of ``total`` rows (default: the
    block is the table), that belong to its choice sample: every k-th row of the table, k = total //
    CHOICE_SAMPLE + 1 (every row up to CHOICE_SAMPLE rows)."""
    k = (n if total is None else total) // CHOICE_SAMPLE + 1
    return np.arange((-offset) % k, n, k, dtype=np.int64)


@dataclass(frozen=True)
class QualityRow:
    """One row of ``merge_quality`` before the experiment's columns are added (see QUALITY_SCHEMA and the module
    docstring; shares in [0, 1], errors relative)."""

    counter: str
    source_run: str
    source_run_id: str
    method: str
    rescaled_by: str | None
    coverage: float
    coverage_long: float | None
    estimated_share: float
    estimated_error: float | None
    estimated_error_p95: float | None
    cross_run_diff: float | None
    match_rate: float
    mean_match_score: float
    comm_agreement: float | None
    msg_agreement: float | None
    misfit: float | None
    verdict: str
    verdict_reason: str | None


# --------------------------------------------------------------------------------------------- helpers
def choose_reference(runs: Sequence[RunTables], reference: str | None) -> int:
    """Index of the reference run: the run named (or with the id) ``reference``, else the first by name."""
    if reference is None:
        return min(range(len(runs)), key=lambda i: (runs[i].run_name, runs[i].run_id))
    for i, r in enumerate(runs):
        if reference in (r.run_name, r.run_id):
            return i
    names = ", ".join(sorted(r.run_name for r in runs))
    raise UnknownReferenceError(f"reference run {reference!r} is not in the experiment (runs: {names})")


def _layout(bursts: pl.DataFrame) -> pl.DataFrame:
    """The distinct (appl, task, thread) of a run's ``bursts`` (sorted as by :func:`sort_bursts`)."""
    k = bursts.select(*THREAD_KEYS)
    if k.height == 0:
        return k
    cols = [k.get_column(c).to_numpy() for c in THREAD_KEYS]
    new = np.ones(k.height, bool)
    new[1:] = np.any([c[1:] != c[:-1] for c in cols], axis=0)
    return k.filter(pl.Series(new))


def same_layout(a: pl.DataFrame, b: pl.DataFrame, name_a: str, name_b: str) -> None:
    """Raise :class:`NotSameProgramError` when two runs' thread tables (appl, task, thread) differ."""
    a, b = a.select(*THREAD_KEYS), b.select(*THREAD_KEYS)
    ta = a.select("appl", "task").unique().height
    tb = b.select("appl", "task").unique().height
    if ta != tb:
        raise NotSameProgramError(f"runs {name_a!r} and {name_b!r} are not the same program: "
                                  f"{ta} vs {tb} tasks with bursts")
    if a.height != b.height or a.join(b, on=THREAD_KEYS, how="anti").height:
        only = a.join(b, on=THREAD_KEYS, how="anti").head(3).rows()
        raise NotSameProgramError(f"runs {name_a!r} and {name_b!r} are not the same program: "
                                  f"{a.height} vs {b.height} threads with bursts"
                                  + (f" (e.g. appl/task/thread {only} only in {name_a!r})" if only else ""))


def shared_counters(ref_counters: Sequence[str], counters: Sequence[str]) -> list[str]:
    """The reference counters ``counters`` has too (in the reference's order): what an other run's alignment may
    compare and its transfer choice is tested on."""
    has = set(counters)
    return [c for c in ref_counters if c in has]


def pick_features(common: Sequence[str]) -> list[str]:
    """Reference counters used to compare bursts: up to MAX_FEATURES common counters, stable ones first."""
    first = [c for c in FEATURE_PRIORITY if c in common]
    rest = sorted(c for c in common if c not in first)
    return (first + rest)[:MAX_FEATURES]


def compared_features(ref_counters: Sequence[str], others: Sequence[Sequence[str]]) -> list[str]:
    """The reference counters some other run's alignment compares (:func:`pick_features` of the counters it shares
    with the reference; ``others``: each other run's counters)."""
    out: list[str] = []
    for counters in others:
        out += [f for f in pick_features(shared_counters(ref_counters, counters)) if f not in out]
    return out


def _call_histogram(calls: pl.DataFrame) -> str:
    if calls.height == 0:
        return "no MPI calls"
    h = calls.group_by("mpi_call").len().sort("len", descending=True).head(4)
    return ", ".join(f"{c} x{n}" for c, n in h.iter_rows())


# --------------------------------------------------------------------------------------------- merge
class SpilledSequence(NamedTuple):
    """A sequence table spilled to a Parquet file (:meth:`Reference.spilled`): the file holds its columns but
    ``from_units``, which are the units table's; ``columns``: the table's column order."""

    path: Path
    from_units: tuple[str, ...]
    columns: tuple[str, ...]


@dataclass(frozen=True)
class Reference:
    """The reference run prepared once: its units, sequence table, logical messages, opening messages, counters.
    ``run``'s bursts are a frame or a lazy scan, read again where the steps after an alignment need them
    (:meth:`whole`); ``units``' table then holds what the sequence table takes from it (issue 23)."""

    run: RunTables
    units: Units
    seq: pl.DataFrame | SpilledSequence  # its sequence table, or where it was spilled to (:meth:`spilled`)
    messages: pl.DataFrame
    opened: pl.DataFrame
    counters: list[str]
    structure: CallStructure
    #: [order22] the requests' messages of the bursts after set completions (arrival_order.request_bursts)
    requests: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=REQUEST_SCHEMA))

    def whole(self) -> tuple[pl.DataFrame, Units]:
        """The reference's bursts whole (read again from a lazy scan) and its units over them."""
        if not isinstance(self.run.bursts, pl.LazyFrame):
            return self.run.bursts, self.units
        bursts = bursts_of(self.run)
        return bursts, _units_over(self.units, bursts)

    def sequence(self) -> pl.DataFrame:
        """The reference's sequence table (read back whole when it was spilled)."""
        if isinstance(self.seq, pl.DataFrame):
            return self.seq
        own = pl.read_parquet(self.seq.path, glob=False)
        if self.seq.from_units:
            own = pl.concat([own, self.units.table.select(self.seq.from_units)], how="horizontal")
        return own.select(self.seq.columns)

    def spilled(self, folder: Path | None) -> Reference:
        """This reference with its sequence table written to ``folder`` instead of held: the other runs' sequence
        tables are built without it alive, each alignment reads it back and lets it go (issue 23: ~0.2 kB per
        reference burst); one row group, one chunk per column. When the run's bursts are a frame, the columns equal
        to the units table's (keys, times, call) are not written but taken from it again, so that the table read
        back shares their buffers as the table built did; when they are a lazy scan (read again by :meth:`whole`),
        nothing of the run is alive to share with: the table is written whole and the units keep no table.
        Itself when ``folder`` is None."""
        if folder is None or not isinstance(self.seq, pl.DataFrame):
            return self
        seq, table, lazy = self.seq, self.units.table, isinstance(self.run.bursts, pl.LazyFrame)
        shared = () if lazy else tuple(
            c for c in seq.columns if c in table.columns and table.height == seq.height
            and table.schema[c] == seq.schema[c] and seq.get_column(c).equals(table.get_column(c)))
        path = folder / "reference-sequence.parquet"
        seq.drop(shared).write_parquet(path, row_group_size=max(seq.height, 1))
        u = replace(self.units, table=pl.DataFrame()) if lazy else self.units
        return replace(self, units=u, seq=SpilledSequence(path, shared, tuple(seq.columns)))

    @classmethod
    def of(cls, ref: RunTables, options: MergeOptions, counters: list[str] | None = None,
           features: Sequence[str] | None = None) -> Reference:
        """``features``: the counters the alignments compare (:func:`compared_features`; default: ``counters``),
        the only ones the sequence table carries (issue 23: one Float64 column per counter and burst)."""
        counters = ref.counters if counters is None else counters
        features = counters if features is None else features
        calls = calls_of(ref)
        messages = logical_messages(calls, ref.messages)
        bursts = bursts_of(ref, features)  # a lazy scan's: what the steps before the alignments read
        u = units(bursts)
        release_free_heap()  # what reading the calls freed, before the sequence table's peak (issue 23)
        seq = sequence_table(u.table, calls, features, options.align, messages if ref.messages is not None else None)
        return cls(ref, u, seq, messages, opened_by(bursts, calls, messages), counters, CallStructure.of(calls),
                   request_bursts(bursts, calls, messages))


def sites_kept(counts: Mapping[str, pl.DataFrame], reference: str, names: Mapping[str, str],
               notes: list[str]) -> bool:
    """Whether the merge compares its runs' call sites (:func:`~synthtrace.tracelib.merge.align.sites_compared` of
    their ``counts``, by run id; ``names``: the runs' names); when not, said in ``notes``."""
    compared, note = sites_compared(counts, reference, names)
    if not compared:
        notes.append(note or "call sites left out of the alignment")
    return compared


def without_sites(run: RunTables) -> RunTables:
    """``run`` as the merge compares it when its runs do not all name call sites alike (:func:`sites_kept`): its
    bursts' and calls' ``call_site`` NULL, so that no signature, structure or check compares them. The merged table
    takes the reference's call sites from the run as read."""
    def unnamed(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
        if "call_site" not in frame.collect_schema().names():
            return frame
        return frame.with_columns(pl.lit(None, pl.String).alias("call_site"))
    return replace(run, bursts=unnamed(run.bursts), mpi_calls=unnamed(run.mpi_calls))


def rank_correspondence(ref: Reference, o: RunTables, options: MergeOptions,
                        messages: pl.DataFrame | None = None) -> Correspondence:
    """The renumbering of ``o``'s tasks as the reference's (:func:`synthtrace.tracelib.merge.ranks.correspondence`),
    as numbered when ``map_ranks`` is off. ``messages``: ``o``'s logical messages when
    already derived (else derived from its calls); ``o``'s bursts a frame (a lazy scan is read)."""
    if not options.map_ranks:
        return Correspondence(None)
    if messages is None:
        messages = logical_messages(calls_of(o), o.messages)
    return correspondence(bursts_of(ref.run, ()), message_counts(ref.messages), bursts_of(o, ()),
                        message_counts(messages), (ref.run.run_name, o.run_name))


class RunRead:
    """A run's bursts as the steps before its alignment read them (:func:`bursts_of` with the ``features`` it
    compares: :func:`pick_features` of the reference counters it records, ``common``), its MPI calls read once and
    its logical messages, handed to :func:`_align_other`, which takes them (:meth:`take`): the giver holds no
    reference, so they go when the aligner lets them go (issue 23)."""

    def __init__(self, run: RunTables, common: Sequence[str]):
        self.common = list(common)
        self.features = pick_features(self.common)
        self.bursts: pl.DataFrame | None = bursts_of(run, self.features)
        self._calls: pl.DataFrame | None = calls_of(run)
        self.messages: pl.DataFrame | None = logical_messages(self._calls, run.messages)

    def take(self) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        """The bursts, calls and logical messages, no longer held here."""
        bursts, calls, messages = self.bursts, self._calls, self.messages
        if bursts is None or calls is None or messages is None:
            raise RuntimeError("the run's tables were already taken")
        self.bursts = self._calls = self.messages = None
        return bursts, calls, messages


def renumbered_note(ref: RunTables, o: RunTables, renum: dict[int, int], sure: str | None = None) -> str:
    """The note of a renumbered run; ``sure``: how sure the correspondence is (:attr:`Correspondence.note`)."""
    moved = sorted((task_of(k), v) for k, v in renum.items() if task_of(k) != v)
    return (f"run {o.run_name!r} numbers its tasks differently from {ref.run_name!r}: mapped by its "
            f"logical messages and task behaviour ({', '.join(f'{a}->{b}' for a, b in moved[:8])}"
            f"{', ...' if len(moved) > 8 else ''})" + (f"; {sure}" if sure else ""))


def timing_only_note(ref: RunTables, o: RunTables, features: Sequence[str]) -> str | None:
    """The warning (also issued as :class:`TimingOnlyWarning`) when the runs share no counter to compare with."""
    if features:
        return None
    msg = (f"runs {ref.run_name!r} and {o.run_name!r} share no counter: matched by MPI structure and "
           "timing, checked by their logical messages, with lower match scores")
    warnings.warn(msg, TimingOnlyWarning, stacklevel=3)
    return msg


def _align_other(ref: Reference, o: RunTables, renum: dict[int, int] | None, counters: list[str],
                 options: MergeOptions, own: Own = None, read: RunRead | None = None,
                 blocks: Blockwise | None = None) -> AlignedRun:
    """Align one other run (its tasks renumbered by ``renum``) to the reference: its match table, tallies and
    choice sample (:class:`AlignedRun`) over the reference bursts of the tasks ``own`` names (all when None).
    ``read``: the run's bursts, calls and logical messages already read (taken from it) with the counters it shares
    with the reference and compares, else read here. ``blocks``: the merge is blockwise (:class:`Blockwise`, as it
    aligns this run: :meth:`Blockwise.of_run`); then, when the run's bursts are a lazy scan, their counter columns
    are not read whole after the alignment but a block at a time where needed (:class:`WideRows`; the choice
    sample's written to its :attr:`~Blockwise.run_folder`, split units' sums beside it: :func:`unit_sums`; issue 23,
    attack 18 F2).

    Units (:mod:`synthtrace.tracelib.merge.pieces`) are aligned, then taken back to the reference's bursts. What
    the checks read of the run's calls is derived before its sequence table, which is handed the calls (not held
    here); the alignment holds neither the calls nor the runs' bursts (a lazy scan's are read again whole after it:
    issue 23)."""
    read = read or RunRead(o, shared_counters(ref.counters, counters))
    common, feats = read.common, read.features
    bursts, calls, messages = read.take()
    mapped = o
    if renum:
        bursts, calls, messages = renumber(bursts, calls, renum, messages)
        bursts = sort_bursts(bursts)
        mapped = replace(o, bursts=bursts, mpi_calls=calls if isinstance(o.mpi_calls, pl.DataFrame)
                         else renumber_calls(o.mpi_calls, renum))
    o_units = units(bursts)
    # [helper merge-verdict] the opening messages from the logical messages the aligner uses (one identity)
    o_opened = opened_by(bursts, calls, messages)
    o_requests = request_bursts(bursts, calls, messages)  # [order22]
    sites = ref.structure.sites and sites_named(calls)
    o_structure = CallStructure.of(calls, sites).table(sites)
    # message ends are named from the communication records when the run has them (exact pairing); from the calls,
    # the channels' counts are shifted by time instead (a window that cuts a message in flight shifts them)
    handed = [calls, messages if o.messages is not None else None]
    del calls, messages  # the sequence table holds the only reference (issue 23)
    release_free_heap()  # what reading the calls freed, before the sequence table's peak (issue 23)
    o_seq = sequence_table(o_units.table, handed.pop(0), feats, options.align, handed.pop())
    lazy = isinstance(o.bursts, pl.LazyFrame)
    wide = lazy and blocks is not None
    if lazy:  # the projection read for the steps above: read again whole after the alignment
        bursts = mapped = None
        o_units = replace(o_units, table=pl.DataFrame())
    release_free_heap()  # what the sequence table's NumPy work freed, before the alignment's own (issue 23)
    ref_seq = ref.sequence()
    m = align_runs(ref_seq, o_seq, feats, options.align)
    m = m.with_columns(arrival_tolerant(ref_seq, o_seq, m))  # receives that follow arrival say nothing
    m, untraced = without_untraced(m, ref.units, o_units)  # [flush24] P4: a phase cut where recording was off
    untraced = pl.Series(untraced[ref.units.unit])
    units_tally = _same_program_tally(ref.structure.table(sites), o_structure, ref_seq, o_seq,
                                      m.get_column("other_seq").is_not_null(), options, own)
    # the sequence tables (the reference's read back when spilled) are let go before the checks of the pairs
    del ref_seq, o_seq, o_structure
    release_free_heap()
    wide_rows: WideRows | None = None
    if wide:  # both runs' bursts with the columns read of every row; their counters where they are needed
        narrow = narrow_columns(feats, common)
        bursts, o_rows = narrow_read(o, narrow, renum)
        ref_bursts, ref_rows = blocks.reference_rows(narrow)  # type: ignore[union-attr]
        wide_rows = WideRows(ScanRows(ref.run.bursts, ref_rows), ScanRows(o.bursts, o_rows),  # type: ignore[arg-type]
                             o_rows)
        o_units, ref_units = _units_over(o_units, bursts), _units_over(ref.units, ref_bursts)
        mapped = replace(o, bursts=bursts, mpi_calls=renumber_calls(o.mpi_calls, renum) if renum else o.mpi_calls)
    elif lazy:  # both runs' bursts whole, read again
        bursts = bursts_of(o)
        if renum:
            bursts = sort_bursts(renumber_columns(bursts, renum, ("task",)))
        o_units = _units_over(o_units, bursts)
        mapped = replace(o, bursts=bursts, mpi_calls=renumber_calls(o.mpi_calls, renum) if renum else o.mpi_calls)
    if not wide:
        ref_bursts, ref_units = ref.whole()
    reference, source, share = ref_bursts, bursts, None
    if ref_units.split or o_units.split:
        ex = expand(ref_bursts, ref_units, bursts, o_units, m, common, options.min_error_duration_ns,
                    _counter_batches(wide_rows, ref_units) if wide_rows is not None else None)
        m, source, reference, share = ex.matches, ex.source, ex.reference, ex.share
        apportioned, uneven = pl.Series(ex.apportioned), pl.Series(ex.uneven)
        if wide_rows is not None:  # the units' sums the pairs read, written a block at a time
            wide_rows = _with_units(wide_rows, blocks, ref_units, o_units, ex.apportioned)  # type: ignore[arg-type]
    else:
        apportioned = uneven = pl.Series(np.zeros(ref_bursts.height, bool))
    del o_units, ref_units
    rows = own.rows(ref_bursts) if own else None
    partner_pairs = None
    if rows is not None:  # the tasks this merge reports: the others were loaded as their partners
        partner_pairs = m.filter(~own.rows_of(ref_bursts)).select(*KEYS, "other_seq")
        m, reference, share = m[rows], reference[rows], (share[rows] if share is not None else None)
        untraced, apportioned, uneven = untraced.gather(rows), apportioned.gather(rows), uneven.gather(rows)
        if wide_rows is not None:  # the scan rows of the reported bursts, in the match table's order
            wide_rows = replace(wide_rows, ref=wide_rows.ref.gather(rows))
    r_bursts = ref_bursts if rows is None else ref_bursts[rows]
    long_ref = r_bursts.get_column("duration_ns") >= options.min_error_duration_ns
    work = work_counter(common)
    rate = next((c for c in common if c != work), None)
    arrival = None
    if share is None:  # [order22] single bursts both sides: pairs that follow arrival (arrival_order)
        w = work or "duration_ns"
        m, arrival = follow_arrival(ref.opened, o_opened, ref.requests, o_requests, m, reference, source,
                                    reference.get_column(w), source.get_column(w),
                                    POSITION_BY_WORK if work else POSITION_BY_TIME)
    # [verdict23] the misfit judges the pairs before ran_on's drop, and the unpaired count leaves them to ran_on's
    judged = m if arrival is None else m.with_columns(arrival.paired)
    sig = pair_signals(reference, source, judged, work, rate, long_ref, arrival.ran_on if arrival else None)
    m, sig = _check_opened(ref.opened, o_opened, m, reference, source, work, sig, long_ref, arrival)
    sig = replace(sig, unpaired=unpaired(judged, source.select(*THREAD_KEYS, "duration_ns"),
                                         long_ref & ~untraced & ~uneven, options.min_error_duration_ns),
                  untraced=int((long_ref & untraced).sum()), uneven=int((long_ref & uneven).sum()),
                  apportioned=int((long_ref & apportioned).sum()))
    del judged
    matched = m.get_column("other_seq").is_not_null()
    tally = replace(units_tally, rows=m.height, matched=int(matched.sum()),
                    score_sum=float(m.get_column("match_score").sum() or 0.0),
                    same_sig=int(m.get_column("same_sig").fill_null(False).sum()), pairs=sig)
    at = own.sample(m, own.starts, own.total) if own else sample_rows(m.height)
    if own:  # the run's own sample: its rows of the tasks reported, as sampled in the whole run
        own_rows = np.flatnonzero(own.rows_of(bursts).to_numpy())
        run_rows = own_rows[own.sample(bursts[own_rows], own.other_starts, own.other_total)]
    else:
        run_rows = sample_rows(bursts.height)
    picked = m[at].with_columns(  # [flush24] each row's share of its unit: per_ns is tested on whole bursts only
        pl.Series("share", share.gather(at) if share is not None else np.ones(len(at)), pl.Float64))
    named = _named(reference)
    if wide_rows is not None and blocks is not None:
        sample, run_sample = _wide_samples(wide_rows, reference.select(named), at, picked, long_ref[at], bursts,
                                           run_rows, common, [c for c in counters if c not in bursts.columns],
                                           blocks.run_folder)
    else:
        sample = Sample(reference.select(*named, *common)[at],
                        source.select(pl.col(*common, "duration_ns").gather(picked.get_column("other_row"))),
                        _paired(picked.drop("other_seq")), long_ref[at])
        run_sample = bursts[run_rows]
    return AlignedRun(run=mapped, original=o, renumbered=renum, matches=m, common=tuple(common),
                      features=tuple(feats), reference=reference, source=source, share=share, tally=tally,
                      sample=sample, run_sample=run_sample, partner_pairs=partner_pairs, wide=wide_rows)


def _wide_samples(rows: WideRows, named: pl.DataFrame, at: np.ndarray, picked: pl.DataFrame, long: pl.Series,
                  bursts: pl.DataFrame, own: np.ndarray, common: Sequence[str], counters: Sequence[str],
                  spill: Path) -> tuple[Sample, pl.DataFrame]:
    """The choice sample of a pair of runs read a block at a time (:class:`WideRows`) and written to ``spill`` (its
    frames lazy scans of the files; columns read where they are compared: issue 23), and the run sample that
    rescaling is chosen on: its rows that recorded every common counter (the only rows
    :func:`synthtrace.tracelib.merge.transfer.rescale_counter` reads of it, which drops a row missing any), with
    ``bursts``' columns and the run's other ``counters`` (``own``: the rows of ``bursts`` it samples). ``named``:
    the reference bursts' keys, call and site; ``picked``: the sample's rows of the match table."""
    other = picked.get_column("other_row")
    spill.mkdir(exist_ok=True)  # made by :func:`_with_units` when a unit is split
    step = block_rows(len(common) + named.width)
    starts = range(0, max(len(at), 1), step)  # one block at least: the files hold the sample's schema
    ref = written((pl.concat([named[at[a:a + step]], rows.ref.gather(at[a:a + step]).read(common)], how="horizontal")
                   for a in starts), spill / "sample-reference.parquet")
    src = written((rows.src.gather(other.slice(a, step)).read([*common, "duration_ns"]) for a in starts),
                  spill / "sample-source.parquet")
    sample = Sample(ref, src, _paired(picked.drop("other_seq")), long)
    kept = []
    extra = [c for c in counters if c not in common]
    step = block_rows(len(common) + len(extra))
    for a in range(0, max(len(own), 1), step):
        part = own[a:a + step]
        got = gathered(rows.src.scan, rows.run_rows.gather(part), [*common, *extra])
        full = pl.concat([bursts[part].drop(common, strict=False), got], how="horizontal")
        kept.append(full.filter(pl.all_horizontal(pl.col(c).is_not_null() for c in common)) if common
                    else full.clear())
    run_sample = pl.concat(kept) if kept else bursts.clear()
    return sample, run_sample


def _counter_batches(rows: WideRows, ref_units: Units) -> CounterBatches:
    """The common counters :func:`~synthtrace.tracelib.merge.pieces.expand` judges pieces' rates on, read from the
    runs' scans (``rows``: the reference's bursts' and the run's, before the expansion) a batch of counters at a
    time, the reference units' sums of the batch taken then (issue 23: wide runs hold no counter column whole)."""
    def batches(common: Sequence[str]) -> Iterator[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]]:
        ref_names, run_names = (set(s.collect_schema().names()) for s in (rows.ref.scan, rows.src.scan))
        step = block_rows(max(rows.ref.rows.len(), rows.run_rows.len()))  # counters of a block of cells
        for a in range(0, len(common), step):
            batch = common[a:a + step]
            ref = rows.ref.read([c for c in batch if c in ref_names])
            table = (ref.with_columns(pl.Series("_unit", ref_units.unit)).group_by("_unit", maintain_order=True)
                     .agg(summed(ref.columns, ref.schema)).drop("_unit"))
            yield ref, gathered(rows.src.scan, rows.run_rows, [c for c in batch if c in run_names]), table
    return batches


def _with_units(rows: WideRows, blocks: Blockwise, ref_units: Units, o_units: Units,
                apportioned: np.ndarray) -> WideRows:
    """``rows`` (before :func:`~synthtrace.tracelib.merge.pieces.expand`) as the expanded pairs read them: the
    source's rows followed by the run's multi-piece units (their sums), the reference's ``apportioned`` bursts
    read with their units' sums; each run's units' sums written where :meth:`Blockwise.units_paths` says."""
    ref_path, src_path = blocks.units_paths(blocks.spill, blocks.run)  # type: ignore[arg-type]
    multi = int((o_units.size > 1).sum())
    src = rows.src
    if multi:
        src_path.parent.mkdir(exist_ok=True)
        names = rows.src.scan.collect_schema().names()
        sums = unit_sums(rows.src.scan, rows.run_rows, o_units,
                         ["duration_ns", *counter_columns(rows.src.scan)] if "duration_ns" in names
                         else counter_columns(rows.src.scan), src_path)
        n = rows.run_rows.len()
        src = ScanRows(src.scan, pl.concat([src.rows, pl.Series([None] * multi, dtype=pl.Int64)]), sums,
                       pl.Series(np.arange(-n, multi), dtype=pl.Int64).scatter(np.arange(n), None))
    ref = rows.ref
    if apportioned.any():
        if not ref_path.is_file():  # the reference's units are the same for every other run
            unit_sums(ref.scan, ref.rows, ref_units, counter_columns(ref.scan), ref_path)
        slot = np.cumsum(ref_units.size > 1) - 1  # each multi-piece unit's row among them
        at = pl.Series(slot[ref_units.unit], dtype=pl.Int64).scatter(np.flatnonzero(~apportioned), None)
        ref = ScanRows(ref.scan, ref.rows, pl.scan_parquet(ref_path, glob=False), at)
    return WideRows(ref, src, rows.run_rows)


def unit_sums(scan: pl.LazyFrame, rows: pl.Series, u: Units, columns: Sequence[str], path: Path) -> pl.LazyFrame:
    """The multi-piece units of ``u`` (over bursts whose rows in ``scan`` are ``rows``) with their ``columns``'
    sums (:func:`~synthtrace.tracelib.merge.pieces.summed`), in unit order, written to ``path`` a block of
    pieces at a time (issue 23), and a scan of it."""
    multi = np.flatnonzero(u.size > 1)
    ends = np.cumsum(u.size[multi])
    schema = scan.select(columns).collect_schema()
    step = block_rows(len(columns))

    def blocks() -> Iterator[pl.DataFrame]:
        a = 0
        while True:  # whole units of about a block of pieces (one unit at least; one empty block for no unit)
            b = max(a + 1, int(np.searchsorted(ends, (ends[a - 1] if a else 0) + step, side="right")))
            chunk = multi[a:b]
            sizes = u.size[chunk]
            piece = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
            got = gathered(scan, rows.gather(np.repeat(u.first[chunk], sizes) + piece), columns)
            yield (got.with_columns(pl.Series("_unit", np.repeat(np.arange(chunk.size), sizes)))
                   .group_by("_unit", maintain_order=True).agg(summed(columns, schema)).drop("_unit"))
            a = b
            if a >= multi.size:
                return
    return written(blocks(), path)


@dataclass(frozen=True)
class OwnTasks:
    """The reference tasks one group of a partitioned merge reports (packed appl/task keys), with the row each
    task's bursts start at in the whole run sorted by task (``starts``; ``total`` rows) and in the other run
    (``other_starts`` of ``other_total``): the choice sample is taken from the whole runs' row numbers."""

    keys: frozenset[int]
    starts: dict[int, int]
    total: int
    other_starts: dict[int, int]
    other_total: int

    def sample(self, frame: pl.DataFrame, starts: dict[int, int], total: int) -> np.ndarray:
        """The rows of ``frame`` (these tasks' rows of a run, sorted by task) in the choice sample of the whole run
        (:func:`sample_rows`: every k-th row of its ``total``, counted from the tasks' ``starts``)."""
        if not frame.height:
            return np.zeros(0, np.int64)
        key = frame.select(task_key().alias("k")).to_series()
        first = key.to_frame().with_row_index("i").group_by("k", maintain_order=True).agg(pl.col("i").min())
        base = (key.replace_strict(first.get_column("k"), [starts[k] - i for k, i in first.iter_rows()],
                                   return_dtype=pl.Int64).to_numpy())
        k = total // CHOICE_SAMPLE + 1
        return np.flatnonzero((base + np.arange(frame.height)) % k == 0).astype(np.int64)

    def rows_of(self, frame: pl.DataFrame) -> pl.Series:
        """Whether each row of ``frame`` (appl, task columns) is one of these tasks'."""
        return frame.select(task_key().is_in(list(self.keys))).to_series()

    def rows(self, bursts: pl.DataFrame) -> np.ndarray:
        """The row numbers of these tasks' rows of ``bursts``."""
        return np.flatnonzero(self.rows_of(bursts).to_numpy())


Own = OwnTasks | None


def _check_opened(ref_opened: pl.DataFrame, opened: pl.DataFrame, m: pl.DataFrame, reference: pl.DataFrame,
                  source: pl.DataFrame, work: str | None, sig: PairSignals, long_ref: pl.Series,
                  arrival: ArrivalPairs | None = None) -> tuple[pl.DataFrame, PairSignals]:
    """The match table with ``msg_mismatch`` (the pair's bursts were opened by the completion of different messages:
    :func:`synthtrace.tracelib.merge.checks.opened_differently`; ``opened``: the other run's, numbered as the
    reference's) and the signals with its counts."""
    w = work or "duration_ns"  # without a common work counter, the time a burst takes
    flags = opened_differently(ref_opened, opened, m, source.select(*THREAD_KEYS, "burst_seq"),
                               reference.get_column(w), source.get_column(w),
                               POSITION_BY_WORK if work else POSITION_BY_TIME)
    long_matched = long_ref & m.get_column("other_row").is_not_null()
    other = flags.get_column("opened_other").fill_null(False)
    example = flags.get_column("opened_what").filter(other & long_matched).head(1).to_list()
    ran_on = n_undecided = 0
    undecided_example = ""
    flagged = other
    if arrival is not None:  # [order22] requests whose messages arrived in another order, undecided by the work
        # [verdict23] counted apart from the pairs opened by other messages: undecided, not wrong (suspect, never bad)
        undecided = arrival.undecided & m.get_column("other_row").is_not_null() & ~other
        if (undecided & long_matched).any():
            task = m.get_column("task").filter(undecided & long_matched).head(1).item()
            undecided_example = f"task {task}'s burst after a set of requests"
        n_undecided = int((undecided & long_matched).sum())
        flagged = other | undecided
        ran_on = int((arrival.ran_on & long_ref).sum())
    m = m.with_columns(flagged.alias("msg_mismatch"))
    return m, replace(sig, opened_other=int((other & long_matched).sum()), ran_on=ran_on,
                      arrival_undecided=n_undecided, arrival_example=undecided_example,
                      opened_checked=int((flags.get_column("opened_checked").fill_null(False) & long_matched).sum()),
                      long_matched=int(long_matched.sum()), opened_example=example[0] if example else "")


def _same_program_tally(r_structure: pl.DataFrame, o_structure: pl.DataFrame, ref_seq: pl.DataFrame,
                        o_seq: pl.DataFrame, matched: pl.Series, options: MergeOptions, own: Own) -> Tally:
    """The same-program check's sums over ``own``'s tasks: their timing-free call structure in both runs
    (:func:`synthtrace.tracelib.merge.checks.call_structure`, per thread, counted with call sites when both runs
    name them: ``o_structure`` the other run's, numbered as the reference's) and the aligned units (``matched``:
    per row of ``ref_seq``)."""
    r_long = ref_seq.get_column("duration_ns") >= options.min_error_duration_ns
    o_long = o_seq.get_column("duration_ns") >= options.min_error_duration_ns
    if own:  # the structure is per thread: its rows of these tasks are the structure of their calls
        r_own, o_own = own.rows_of(ref_seq), own.rows_of(o_seq)
        matched, r_long, o_long = matched.filter(r_own), r_long.filter(r_own), o_long.filter(o_own)
        r_structure, o_structure = (c.filter(own.rows_of(c)) if c.height else c for c in (r_structure, o_structure))
    # [helper merge-verdict] consecutive calls per thread, polls and completion calls collapsed; sites count when
    # both runs name them
    n_ref, n_other, n_common = structure_sums(r_structure, o_structure)
    r_known, o_known = structure_kinds(r_structure, o_structure)
    return Tally(units_long_matched=int((matched & r_long).sum()), units_long_ref=int(r_long.sum()),
                 units_long_other=int(o_long.sum()), structure_ref=n_ref, structure_other=n_other,
                 structure_common=n_common, structure_ref_known=r_known, structure_other_known=o_known)


def other_structure(ref: RunTables, o: RunTables, t: Tally) -> str | None:
    """Why the runs look like two versions of the program (mergeattack22 N3: a collective more per iteration in
    one run, every other call alike), or None: less than ``SAME_KINDS`` of one run's consecutive MPI calls
    (per thread, polling and completion loops collapsed) follow each other in a way the other run ever does."""
    share = kinds_share(t.structure_ref, t.structure_other, t.structure_ref_known, t.structure_other_known)
    if share is None or share >= SAME_KINDS:
        return None
    return (f"another call structure: {1 - share:.0%} of the MPI calls of {ref.run_name!r} or {o.run_name!r} "
            "(per thread, polling and completion loops collapsed) follow each other in a way the other run never "
            "does: another code version (a call more per iteration)?")


def check_same_program(ref: RunTables, o: RunTables, t: Tally, options: MergeOptions, notes: list[str],
                       calls: str = "") -> None:
    """Refuse runs whose call structure agrees on less than ``min_match_rate`` of the shorter run's; warn (in
    ``notes``) when less than ``SAME_LENGTH`` of the longer run's bursts >= 10 us match (``t``: the tallies of the
    call structure and the aligned units; ``calls``: the runs' call histograms for the refusal, computed when
    empty)."""
    # [helper merge-verdict] the structure is judged timing-free on the shorter run (chopped windows differ in
    # length), the length on the longer run
    same = structure_share(t.structure_ref, t.structure_other, t.structure_common)
    if same is not None and same < options.min_match_rate:
        calls = calls or (f"calls of {ref.run_name}: {_call_histogram(calls_of(ref))}; "
                          f"of {o.run_name}: {_call_histogram(calls_of(o))}")
        raise NotSameProgramError(
            f"runs {ref.run_name!r} and {o.run_name!r} are not the same program: only {same:.0%} of the shorter "
            f"run's MPI call sequence (polling and completion loops collapsed) align by MPI structure ({calls})")
    # the length on the longer run, over bursts of at least 10 us (polling loops differ in length, not the run)
    n_long = max(t.units_long_ref, t.units_long_other)
    on_longer = t.units_long_matched / n_long if n_long else 1.0
    if on_longer < SAME_LENGTH:
        notes.append(f"runs {ref.run_name!r} and {o.run_name!r} cover different lengths: {on_longer:.0%} of the "
                     "longer run's bursts >= 10 us matched (chopped windows, or a run cut short or on another input)")


@dataclass(frozen=True)
class Recorded:
    """The reference's bursts (``rows``, ``long``: >= ``min_error_duration_ns``) and per counter it recorded, its
    non-NULL values (all, long): sums, additive over groups of tasks."""

    rows: int
    long: int
    values: dict[str, tuple[int, int]]

    @classmethod
    def of(cls, bursts: pl.DataFrame, counters: Sequence[str], long: pl.Series) -> Recorded:
        got = bursts.select(*[pl.col(c).is_not_null().sum().alias(c) for c in counters],
                            *[(pl.col(c).is_not_null() & long).sum().alias(f"_l_{c}") for c in counters])
        return cls(bursts.height, int(long.sum()),
                   {c: (int(got.get_column(c)[0]), int(got.get_column(f"_l_{c}")[0])) for c in counters})

    @classmethod
    def scanned(cls, bursts: pl.LazyFrame, counters: Sequence[str], min_duration_ns: int) -> Recorded:
        """:meth:`of` a lazy scan, streamed (its counter columns are never held whole: issue 23), ``long`` the bursts
        of at least ``min_duration_ns``."""
        long = pl.col("duration_ns") >= min_duration_ns
        exprs = [pl.len().alias("_rows"), long.sum().alias("_long"),
                 *[pl.col(c).is_not_null().sum().alias(c) for c in counters],
                 *[(pl.col(c).is_not_null() & long).sum().alias(f"_l_{c}") for c in counters]]
        got = dict(zip((e.meta.output_name() for e in exprs), streamed_row(bursts, exprs)))
        return cls(int(got["_rows"]), int(got["_long"]), {c: (int(got[c]), int(got[f"_l_{c}"])) for c in counters})

    @classmethod
    def valued(cls, merged: pl.DataFrame, transfer: Transfer, min_duration_ns: int) -> Recorded:
        """The transferred counters of ``merged`` (merged rows, before estimates) that got a value: a counter the
        source run recorded only part of the time (multiplexed counter sets, a rank without counters) is NULL on
        matched bursts too (mergeattack22 N5)."""
        moved = [c for c in transfer.counters if transfer.source[c] is not None]
        return cls.of(merged, moved, merged.get_column("duration_ns") >= min_duration_ns)

    def __add__(self, other: Recorded) -> Recorded:
        return Recorded(self.rows + other.rows, self.long + other.long,
                        {c: (a + other.values[c][0], b + other.values[c][1]) for c, (a, b) in self.values.items()})

    def coverage(self, counter: str) -> tuple[float, float | None]:
        """(coverage, coverage_long) of ``counter``: the shares of bursts (all, long) with a value."""
        got, got_long = self.values[counter]
        return got / self.rows if self.rows else 0.0, got_long / self.long if self.long else None

    def covered(self, rows: Sequence[QualityRow]) -> list[QualityRow]:
        """The quality ``rows`` with the coverage of the counters counted here."""
        return [replace(q, **dict(zip(("coverage", "coverage_long"), self.coverage(q.counter))))
                if q.counter in self.values else q for q in rows]


def unverified(plan: Plan, common: bool) -> tuple[str, str]:
    """(verdict, reason) of a counter whose plan nothing tests: from a run sharing no counter with the reference
    (``common`` False), whose pairs the logical messages validated (mergeattack22 N2), ``ok`` means the matched
    burst's count, which does not depend on timing, copied; a count of time (cycles) at the reference burst's
    duration (``per_ns`` with no common count of time carrying its clock to test it, whatever else is common) rests
    on the two runs' clocks alike: ``suspect`` (review22: it was ``ok`` with no reason when instructions were
    common)."""
    if plan.per_ns:
        none_common = "no counter in common with the reference to estimate the error; " if not common else ""
        return "suspect", (f"unverified: {none_common}a count of time taken at the other run's rate per ns over the "
                           "reference burst's duration, no common count of time to test it (right only where both "
                           "runs' clocks ran alike)")
    return "ok", ("unverified: no counter in common with the reference to estimate the error; the pairs are "
                  "validated by the logical messages and the values are the matched bursts' counts")


@dataclass(frozen=True)
class Transfer:
    """How the counters move, decided once over the whole runs: per counter the source run (None: recorded by the
    reference) and its plan, and the quality rows."""

    counters: list[str]
    source: dict[str, str | None]
    plans: dict[str, Plan]
    quality: list[QualityRow]
    #: the source runs some or all of whose tasks ran in another machine state (their bursts are flagged in
    #: ``other_machine_state``)
    states: dict[str, MachineState] = field(default_factory=dict)


def decide(ref: RunTables, ref_counters: list[str], others: Sequence[RunTables], counters_of: dict[str, list[str]],
           aligned: Mapping[str, Compared], tallies: dict[str, Tally], samples: dict[str, Sample],
           run_samples: dict[str, pl.DataFrame], recorded: Recorded, options: MergeOptions,
           notes: list[str], on_step: Callable[[str, int], None] | None = None, n_steps: int = 0) -> Transfer:
    """Source run and plan of every counter and the quality rows, from the tallies (sums over every reference
    burst) and choice samples of the aligned runs (``aligned``: one group's, for the counters' lists of common
    counters and features). ``recorded``: the reference's bursts and its counters' recorded values."""
    all_counters: list[str] = list(ref_counters)
    for o in others:
        all_counters += [c for c in counters_of[o.run_id] if c not in all_counters]
    quality: list[QualityRow] = []
    plans: dict[str, Plan] = {}
    source: dict[str, str | None] = {}
    choices: dict[str, Choice] = {}
    # per other run: its signals, its verdict, and its verdict for counts the machine state cannot change
    verdicts: dict[str, tuple[PairSignals, tuple[str, str], tuple[str, str]]] = {}
    for o in others:
        info, s = aligned[o.run_id], samples[o.run_id]
        work = work_counter(info.common)
        rate = next((c for c in info.common if c != work), None)
        rates = rate_counters(info.common)
        read = [c for c in dict.fromkeys([work, rate, *rates]) if c]  # what the signals read of a sample on disk
        ref_sample, src_sample = frame_of(s.reference, [*_named(s.reference), *read]), frame_of(s.source, read)
        sampled = pair_signals(ref_sample, src_sample, s.matches, work, rate, s.long) if work else None
        if sampled and work and "thread" in ref_sample.columns:  # [verdict23] the sample's noise, read once here
            other_row = s.matches.get_column("other_row")
            noise = work_noise(long_pairs(ref_sample, src_sample, other_row, work, s.long))
            state = rate_state(ref_sample, src_sample, other_row, work, rates, s.long) if rates else None
            sampled = replace(sampled, work_noise=noise, machine=state)  # [verdict24] the tasks' machine state
        sig = tallies[o.run_id].signals(sampled)
        judged = verdict(sig, not info.features)
        retired = verdict(replace(sig, machine=None), not info.features) if sig.machine is not None else judged
        if "ok" in (judged[0], retired[0]) and (why := other_structure(ref, o, tallies[o.run_id])):
            judged, retired = (("suspect", why) if v[0] == "ok" else v for v in (judged, retired))
            notes.append(why)
        verdicts[o.run_id] = (sig, judged, retired)
        if sig.work_shift is not None and abs(sig.work_shift) > WORK_SHIFT:
            notes.append(f"matched bursts of {o.run_name!r} execute x{math.exp(sig.work_shift):.3f} the "
                         f"instructions of {ref.run_name!r}'s: not the same input or code version?")
    for i, c in enumerate(all_counters):
        if on_step and i:  # the step of the counter before has ended (the loop body has several exits)
            on_step(f"merged {all_counters[i - 1]}", n_steps)
        if c in ref_counters:
            partner = next((o for o in others if c in aligned[o.run_id].common), None)
            cross = None
            if partner:
                s = samples[partner.run_id]
                e = relative_errors(transferred(s.reference, s.source, s.matches.get_column("other_row"), c, Plan()),
                                    frame_of(s.reference, [c]).to_series(), s.long)
                cross = float(e.median()) if e.len() else None
            source[c] = None
            quality.append(QualityRow(
                counter=c, source_run=ref.run_name, source_run_id=ref.run_id, method="recorded", rescaled_by=None,
                coverage=recorded.coverage(c)[0], coverage_long=recorded.coverage(c)[1], estimated_share=0.0,
                estimated_error=0.0, estimated_error_p95=0.0, cross_run_diff=cross,
                match_rate=1.0, mean_match_score=1.0, comm_agreement=1.0, msg_agreement=None, misfit=None,
                verdict="ok", verdict_reason=None))
            continue
        sources = [o for o in others if c in counters_of[o.run_id]]
        src = max(sources, key=lambda o: tallies[o.run_id].rate)  # first by name among the best
        info, t, s = aligned[src.run_id], tallies[src.run_id], samples[src.run_id]
        if src.run_id not in choices:
            choices[src.run_id] = choose(s.reference, s.source, s.matches.get_column("other_row"), list(info.common),
                                         s.long, options.rescale, run_samples[src.run_id],
                                         options.min_error_duration_ns, s.matches.get_column("share"))
        plan = choices[src.run_id].plan(run_samples[src.run_id], c, list(info.common))
        plans[c], source[c] = plan, src.run_id
        err, err95 = choices[src.run_id].error(plan, c)
        sig, judged, retired = verdicts[src.run_id]
        v, why = retired if machine_invariant(c, plan.per_ns) else judged
        if v == "ok" and ((plan.per_ns and err is None) or not info.common):
            v, why = unverified(plan, bool(info.common))
        quality.append(QualityRow(
            counter=c, source_run=src.run_name, source_run_id=src.run_id, method=plan.method,
            rescaled_by=plan.label, coverage=t.rate, coverage_long=sig.coverage_long, estimated_share=0.0,
            estimated_error=err, estimated_error_p95=err95, cross_run_diff=None, match_rate=t.rate,
            mean_match_score=t.score_sum / t.matched if t.matched else 0.0,
            comm_agreement=t.same_sig / t.matched if t.matched else None, msg_agreement=sig.msg_agreement,
            misfit=sig.misfit, verdict=v, verdict_reason=why or None))
    if on_step and all_counters:
        on_step(f"merged {all_counters[-1]}", n_steps)
    states = {r: v[0].machine for r, v in verdicts.items() if v[0].machine is not None and v[0].machine.suspect}
    return Transfer(all_counters, source, plans, quality, states)


def merged_rows(ref_bursts: pl.DataFrame, aligned: dict[str, Pairs], transfer: Transfer, experiment: str,
                ref: RunTables) -> pl.DataFrame:
    """The merged rows of the reference bursts ``ref_bursts`` (``aligned``: per other run, the pairs of those rows):
    recorded counters kept, the others transferred by ``transfer``'s plans, the match score (lowest over the source
    runs that supplied a counter; NULL where one left the burst unmatched), ``estimated`` False."""
    rec = [c for c in transfer.counters if transfer.source[c] is None]
    values = []
    for c in transfer.counters:
        run_id = transfer.source[c]
        if run_id is None:
            continue
        info = aligned[run_id]
        v = transferred(info.reference, info.source, info.other_row, c, transfer.plans[c])
        # a piece's share of the other run's whole unit (tracelib.merge.pieces); per ns, its own duration is
        if info.share is not None and not transfer.plans[c].per_ns:
            v = v * info.share
        values.append(v.round().cast(pl.Int64).alias(c))
    used = sorted({r for r in transfer.source.values() if r is not None}, key=list(aligned).index)
    scores = [aligned[r].score.alias(f"_score_{i}") for i, r in enumerate(used)]
    out = pl.concat([ref_bursts.select(BASE_COLUMNS), ref_bursts.select(rec)], how="horizontal").with_columns(
        *values, *scores)
    cols = [f"_score_{i}" for i in range(len(used))]
    score = (pl.when(pl.any_horizontal(pl.col(x).is_null() for x in cols)).then(None)
             .otherwise(pl.min_horizontal(cols))) if cols else pl.lit(1.0)
    return out.select(pl.lit(experiment).alias("experiment"), pl.lit(ref.run_id).alias("run_id"),
                      pl.lit(ref.run_name).alias("run_name"), *BASE_COLUMNS, *transfer.counters,
                      score.cast(pl.Float64).alias("match_score"), pl.lit(False).alias("estimated"),
                      other_state(transfer).alias(OTHER_STATE))


def other_state(transfer: Transfer, taken: Callable[[str], pl.Expr] = lambda c: pl.col(c).is_not_null()) -> pl.Expr:
    """[contention25] True on a merged burst (columns appl, task and the counters) whose values came from a run in
    another machine state on its task (:attr:`Transfer.states`): a value (``taken(counter)`` True: transferred, or
    estimated from that run's bursts, sites26) of a counter that state moves
    (:func:`~synthtrace.tracelib.merge.noise.machine_invariant`: not a count of retired instructions)."""
    flags = []
    for run_id, state in transfer.states.items():
        moved = [c for c in transfer.counters
                 if transfer.source[c] == run_id and not machine_invariant(c, transfer.plans[c].per_ns)]
        if moved:
            flags.append(state.flagged() & pl.any_horizontal(taken(c) for c in moved))
    return pl.any_horizontal(flags) if flags else pl.lit(False)


def check_counters(ref: RunTables, others: Sequence[RunTables], counters_of: dict[str, list[str]],
                   has_messages: Callable[[RunTables], bool], options: MergeOptions) -> None:
    """Raise :class:`NoCommonCounterError` when a run shares no counter with the reference and either run has no
    point-to-point message to validate the match by (unless ``allow_timing_only``)."""
    for o in others:
        if set(counters_of[ref.run_id]) & set(counters_of[o.run_id]) or options.allow_timing_only:
            continue
        # no counter to validate the match by: the logical messages (timing-free structure) do, when both runs have
        if has_messages(ref) and has_messages(o):
            continue
        raise NoCommonCounterError(
            f"runs {ref.run_name!r} ({', '.join(counters_of[ref.run_id]) or 'no counters'}) and {o.run_name!r} "
            f"({', '.join(counters_of[o.run_id]) or 'no counters'}) have no counter in common and no point-to-point "
            "messages to validate the match by; use --allow-timing-only to match by MPI structure and timing alone")


def merge_runs(runs: Sequence[RunTables], options: MergeOptions = MergeOptions(),
               experiment: str = "", on_step: Callable[[str, int], None] | None = None,
               spill: Path | None = None) -> MergeResult:
    """Align every run to the reference run and merge all counters into the reference run's bursts.
    ``on_step(what, total)`` is called as each step ends (one per other run aligned, one per counter merged;
    ``total``: the number of steps).

    The other runs are aligned one at a time, each read then (when its tables are lazy scans) and let go once
    aligned: what the later steps read of it is kept (its sums, choice samples and, when it recorded a counter the
    reference did not, its pairs with the matched bursts' counters: :meth:`AlignedRun.kept_pairs`), its provenance
    rows written to ``spill`` (an empty folder: the result's ``matches`` is then a :class:`PartedTable` over files
    in it, to commit before removing it) or else held. Issue 23: memory does not grow with the number of runs but
    by what the output holds.

    Raises :class:`TooFewRunsError` (fewer than two runs), :class:`UnknownReferenceError`,
    :class:`NotSameProgramError` (different tasks/threads, or runs whose call structure agrees on less than
    ``min_match_rate`` of the shorter run's), :class:`RankCorrespondenceError` (task numbering differs and
    cannot be mapped) and :class:`NoCommonCounterError` (a run shares no counter with the reference, either run has
    no point-to-point message to check the match by and ``allow_timing_only`` is off).
    """
    if len(runs) < 2:
        raise TooFewRunsError(f"experiment {experiment!r} has {len(runs)} run(s); merging needs at least two")
    ri = choose_reference(runs, options.reference)
    # every frame below shares the row order of its run's sorted bursts: values move by row index, not by joins;
    # a run's bursts given as a lazy scan are read where they are needed (bursts_of), not held (issue 23)
    ref_run = loaded(runs[ri])
    others = sorted((r for i, r in enumerate(runs) if i != ri), key=lambda r: (r.run_name, r.run_id))
    notes: list[str] = []
    sites = sites_kept({r.run_id: site_counts(r.mpi_calls) for r in (ref_run, *others)}, ref_run.run_id,
                       {r.run_id: r.run_name for r in (ref_run, *others)}, notes)
    counters_of = {r.run_id: r.counters for r in (ref_run, *others)}
    ref = Reference.of(ref_run if sites else without_sites(ref_run), options, counters_of[ref_run.run_id],
                       compared_features(counters_of[ref_run.run_id], [counters_of[o.run_id] for o in others])
                       ).spilled(spill)  # not held while the other runs' sequence tables are built
    check_counters(ref_run, others, counters_of,
                   lambda r: (ref.messages if r is ref_run
                              else logical_messages(calls_of(r), messages_of(r))).height > 0, options)
    if isinstance(ref_run.bursts, pl.LazyFrame):  # its counters counted streaming, never held whole (issue 23)
        head = bursts_of(ref_run, ())
        recorded = Recorded.scanned(ref_run.bursts, ref.counters, options.min_error_duration_ns)
    else:
        head = ref_run.bursts
        recorded = Recorded.of(head, ref.counters, head.get_column("duration_ns") >= options.min_error_duration_ns)
    n_ref, ref_layout = head.height, _layout(head)
    del head
    blocks = Blockwise.of(ref_run, spill, list(dict.fromkeys(
        c for o in others for common in [shared_counters(ref.counters, counters_of[o.run_id])]
        for c in narrow_columns(pick_features(common), common))))
    n_counters = len({c for r in (ref_run, *others) for c in counters_of[r.run_id]})
    n_steps = len(others) + n_counters
    compared: dict[str, Compared] = {}
    tallies: dict[str, Tally] = {}
    samples: dict[str, Sample] = {}
    run_samples: dict[str, pl.DataFrame] = {}
    pairs: dict[str, Pairs | WidePairs] = {}  # the runs that recorded a counter the reference did not: a source
    whole: dict[str, AlignedRun] = {}  # estimate_unmatched reads the source runs' bursts and calls again
    matches: list[pl.DataFrame | Path] = []
    for j, lazy in enumerate(others):
        raw = loaded(lazy) if sites else without_sites(loaded(lazy))
        ids = renamed_communicators(raw, ref_run)  # communicator ids are per-run handles: matched by members
        o = ids.run
        # its bursts as the steps before the alignment read them and its calls, read once for the rank
        # correspondence and the alignment
        read = RunRead(o, shared_counters(ref.counters, counters_of[o.run_id]))
        # the same tasks and threads, whatever their numbering
        same_layout(ref_layout, _layout(read.bursts), ref_run.run_name, o.run_name)
        corr = rank_correspondence(ref, replace(o, bursts=read.bursts), options, read.messages)
        renum = corr.mapping
        if renum and not ids.same_ids(again := renamed_communicators(raw, ref_run, renum)):  # members renumbered
            ids, o = again, again.run
            read = RunRead(o, shared_counters(ref.counters, counters_of[o.run_id]))
        notes.extend(ids.notes)
        del raw
        release_free_heap()  # what its reading of the run's calls freed
        if renum:
            notes.append(renumbered_note(ref_run, o, renum, corr.note))
        if msg := timing_only_note(ref_run, o, read.features):
            notes.append(msg)
        info = _align_other(ref, o, renum, counters_of[o.run_id], options, read=read,
                            blocks=blocks.of_run(j) if blocks else None)
        check_same_program(ref_run, info.run, info.tally, options, notes)
        compared[o.run_id] = Compared(info.common, info.features)
        tallies[o.run_id], samples[o.run_id], run_samples[o.run_id] = info.tally.tied(corr.tie), info.sample, \
            info.run_sample
        if set(counters_of[o.run_id]) - set(ref.counters):
            pairs[o.run_id] = info.kept_pairs(counters_of[o.run_id])
        if options.estimate_unmatched:
            whole[o.run_id] = info
        rows = provenance(experiment, info)
        if spill is not None:
            matches.append(spill / f"matches-{j:04d}.parquet")
            rows.write_parquet(matches[-1])
        else:
            matches.append(rows)
        del o, read, info, rows  # the run's tables, its match table and source: not held while the next is aligned
        release_free_heap()  # and what they took handed back before the next is read
        if on_step:
            on_step(f"aligned {lazy.run_name}", n_steps)
    transfer = decide(ref_run, ref.counters, others, counters_of, compared, tallies, samples, run_samples,
                      recorded, options, notes, on_step, n_steps)
    estimates = Estimates.of(ref, whole, transfer, options) if options.estimate_unmatched else None
    if blocks is not None:
        merged: pl.DataFrame | PartedTable
        merged, estimated, valued = _merged_blocks(blocks, pairs, transfer, experiment, estimates,
                                                   options.min_error_duration_ns)
    else:
        ref_bursts = bursts_of(ref_run)  # a lazy scan's read once, for the merged rows
        merged = merged_rows(ref_bursts, pairs, transfer, experiment, ref_run)  # type: ignore[arg-type]
        del ref_bursts
        valued = Recorded.valued(merged, transfer, options.min_error_duration_ns)
        if estimates is not None:
            merged, estimated = estimates.block(merged, 0)
    quality_rows = valued.covered(transfer.quality)
    if estimates is not None:
        quality_rows = estimates.quality(quality_rows, estimated, n_ref)
    quality = pl.DataFrame([{**asdict(q), "experiment": experiment, "reference_run": ref_run.run_name,
                             "n_bursts": n_ref} for q in quality_rows], schema=QUALITY_SCHEMA)
    return MergeResult(experiment, ref_run.run_id, ref_run.run_name, merged, quality,  # type: ignore[arg-type]
                       PartedTable(matches) if spill is not None else pl.concat(matches), notes)


def _merged_blocks(blocks: Blockwise, pairs: Mapping[str, Pairs | WidePairs], transfer: Transfer,
                   experiment: str, estimates: Estimates | None,
                   min_duration_ns: int) -> tuple[PartedTable, dict[str, int], Recorded]:
    """:func:`merged_blocks` of the reference's bursts (a lazy scan) whole, written to the ``spill`` folder."""
    files, estimated, valued = merged_blocks(blocks.reference, blocks.reference_rows(KEYS)[1], pairs, transfer,
                                             experiment, blocks.spill / "merged", min_duration_ns, estimates)
    return PartedTable(files), estimated, valued


def merged_blocks(ref_run: RunTables, rows: pl.Series, pairs: Mapping[str, Pairs | WidePairs], transfer: Transfer,
                  experiment: str, stem: Path, min_duration_ns: int, estimates: Estimates | None = None
                  ) -> tuple[list[Path], dict[str, int], Recorded]:
    """The merged rows (:func:`merged_rows`) of the reference's bursts at ``rows`` of its lazy scan (``pairs``: per
    other run, the pairs of those rows), a block of bursts at a time, each block's counters read then, its unmatched
    bursts estimated with ``estimates`` (when given), and written as ``<stem>-<block>.parquet`` (issue 23, attack
    18 F2: the merged table has a column per counter of any run; held whole it is bursts x counter types); per
    transferred counter, its bursts estimated (:meth:`Estimates.block`), and the transferred values
    (:meth:`Recorded.valued`, bursts of at least ``min_duration_ns`` long)."""
    rec = [c for c in transfer.counters if transfer.source[c] is None]
    by_run: dict[str, tuple[list[str], list[str]]] = {}  # per source run: the reference's and its columns read
    for c in transfer.counters:
        run_id = transfer.source[c]
        if run_id is None:
            continue
        plan = transfer.plans[c]
        ref_cols, src_cols = by_run.setdefault(run_id, ([], []))
        ref_cols += [x for x in plan.reads if x not in ref_cols]
        src_cols += [x for x in (c, *plan.reads) if x not in src_cols]
    # an estimate's medians of three groups are joined to each row beside the guess
    guesses = 4 * (len(transfer.counters) - len(rec)) if estimates is not None else 0
    step = block_rows(len(BASE_COLUMNS) + len(rec) + sum(len(a) + len(b) for a, b in by_run.values())
                      + len(transfer.counters) + guesses)
    files: list[Path] = []
    estimated: dict[str, int] = {}
    valued: list[Recorded] = []
    for k, a in enumerate(range(0, max(rows.len(), 1), step)):
        n = min(step, rows.len() - a)
        block = gathered(ref_run.bursts, rows.slice(a, n), [*BASE_COLUMNS, *rec])  # type: ignore[arg-type]
        got = {r: p.block(a, n, *by_run[r]) for r, p in pairs.items() if r in by_run}
        files.append(stem.with_name(f"{stem.name}-{k:05d}.parquet"))
        out = merged_rows(block, got, transfer, experiment, ref_run)
        valued.append(Recorded.valued(out, transfer, min_duration_ns))
        if estimates is not None:
            out, counts = estimates.block(out, a)
            estimated = {c: estimated.get(c, 0) + v for c, v in counts.items()}
        out.write_parquet(files[-1])
    return files, estimated, sum(valued[1:], valued[0])  # one block at least


def provenance(experiment: str, info: AlignedRun) -> pl.DataFrame:
    """merge_matches rows of one other run: where each reference burst's values came from, in the other run's own
    task numbering (MATCHES_SCHEMA)."""
    m, orig = info.matches, info.original
    row = m.get_column("other_row")
    sel = info.source.select(pl.col("appl", "task", "thread").gather(row))
    if info.renumbered:  # back to the other run's own numbering
        back = {appl_base(k) + v: task_of(k) for k, v in info.renumbered.items()}
        sel = sel.with_columns(
            task_key()
            .replace_strict(back, default=pl.col("task").cast(pl.Int64))
            .cast(pl.Int32)
            .alias("task")
        )
    sel = sel.select(pl.col("task").alias("other_task"), pl.col("thread").alias("other_thread"))
    return pl.concat([m.select(*KEYS), sel, m.select(pl.col("other_seq").alias("other_burst_seq"),
                                                     pl.col("match_score").alias("score"),
                                                     # [helper merge-iter] or an undecidable iteration span
                                                     ((~pl.col("msg_consistent")).fill_null(False)
                                                      | pl.col("ambiguous_span").fill_null(False)).alias("ambiguous"),
                                                     "msg_mismatch")],
                     how="horizontal").select(
        pl.lit(experiment).alias("experiment"), *KEYS, pl.lit(orig.run_name).alias("other_run"),
        pl.lit(orig.run_id).alias("other_run_id"), "other_task", "other_thread", "other_burst_seq", "score",
        "ambiguous", "msg_mismatch",
        (info.share if info.share is not None else pl.repeat(1.0, m.height, eager=True)).cast(pl.Float64)
        .alias("share"))


def _share(flags: pl.Series, among: pl.Series) -> float | None:
    """Share of True ``flags`` among the rows where ``among`` is True (None when there are none)."""
    k = int(among.sum())
    return float((flags & among).sum()) / k if k else None


#: the groups of bursts an unmatched burst's estimate is the median of, the first with a value
ESTIMATE_GROUPS = ((*THREAD_KEYS, "lsig"), ("appl", "lsig"), tuple(THREAD_KEYS))


@dataclass(frozen=True)
class Estimates:
    """``estimate_unmatched``'s flagged estimate of a transferred counter for a reference burst: with the counter's
    work counter w, the median of counter / w over the source bursts of the same thread and loose signature, times
    the reference burst's w; without, the median of the counter over those bursts. Falls back to the same loose
    signature on any thread, then to the thread's median.

    ``groups``: per reference burst (sorted), its keys and loose signature; ``medians``: per source run, per group
    of :data:`ESTIMATE_GROUPS`, its groups' keys and a column of medians per counter it is the source of (small:
    groups x counters, read from the source's bursts a few counters at a time: issue 23); ``plans``: the
    transferred counters' plans; ``transfer``: whose source runs' machine states flag the estimates too (an
    estimate is the medians of the source run's bursts, of the burst's own thread first: its state's values)."""

    groups: pl.DataFrame
    medians: dict[str, list[pl.DataFrame]]
    plans: dict[str, Plan]
    transfer: Transfer

    @classmethod
    def of(cls, ref: Reference, aligned: Mapping[str, AlignedRun], transfer: Transfer,
           options: MergeOptions) -> Estimates:
        """The estimates of the counters ``transfer`` takes from the runs ``aligned`` (their bursts as aligned:
        whole, or narrow with :class:`WideRows`)."""
        keys = [*THREAD_KEYS, "lsig"]
        if ref.units.split:  # the reference's sequence table is its units': one of its bursts is needed
            own = sequence_table(bursts_of(ref.run, ()), calls_of(ref.run), [], options.align)
        else:
            own = ref.sequence()
        plans = {c: transfer.plans[c] for c in transfer.counters if transfer.source[c] is not None}
        medians = {}
        for run_id in dict.fromkeys(transfer.source[c] for c in plans):
            info = aligned[run_id]  # type: ignore[index]
            counters = [c for c in plans if transfer.source[c] == run_id]
            seq = sequence_table(info.run.bursts, calls_of(info.run), [], options.align).select(keys)  # type: ignore[arg-type]
            medians[run_id] = _medians(seq, info, counters, plans)  # type: ignore[index]
        return cls(own.select(keys), medians, plans, transfer)

    def block(self, merged: pl.DataFrame, start: int) -> tuple[pl.DataFrame, dict[str, int]]:
        """``merged`` (the merged rows of the reference bursts ``start`` .. ``start + merged.height - 1``) with each
        transferred counter's estimate where it is NULL and estimated, ``estimated`` set where any is,
        ``other_machine_state`` where an estimate came from a run in another state on the burst's task
        (:func:`other_state`); and per counter, its bursts estimated."""
        if not self.plans:
            return merged, {}
        works = list(dict.fromkeys(p.work for p in self.plans.values() if p.work))
        r = pl.concat([self.groups.slice(start, merged.height), merged.select(works)], how="horizontal")
        guess = []
        for m in self.medians.values():
            counters = [c for c in m[0].columns if c in self.plans]
            got = r
            for i, (group, frame) in enumerate(zip(ESTIMATE_GROUPS, m)):
                got = got.join(frame.rename({c: f"_{i}_{c}" for c in counters}), on=list(group), how="left",
                               maintain_order="left")
            guess.append(got.select(self._guess(c) for c in counters))
        g = pl.concat(guess, how="horizontal")
        est = {c: merged.get_column(c).is_null() & g.get_column(c).is_not_null() for c in self.plans}
        out = merged.with_columns(*[pl.when(est[c]).then(g.get_column(c)).otherwise(pl.col(c)).alias(c)
                                    for c in self.plans],
                                  pl.any_horizontal(list(est.values())).alias("estimated"),
                                  pl.col(OTHER_STATE) | other_state(self.transfer, lambda c: pl.lit(est[c])))
        return out, {c: int(e.sum()) for c, e in est.items()}

    def _guess(self, counter: str) -> pl.Expr:
        """A burst's estimate of ``counter`` from its groups' medians (columns ``_<group>_<counter>``)."""
        est = pl.coalesce(*[f"_{i}_{counter}" for i in range(len(ESTIMATE_GROUPS))])
        if work := self.plans[counter].work:
            est = est * pl.col(work).cast(pl.Float64)
        return est.round().cast(pl.Int64).alias(counter)

    def quality(self, rows: Sequence[QualityRow], estimated: Mapping[str, int], n_ref: int) -> list[QualityRow]:
        """The quality ``rows`` with each transferred counter's ``estimated_share`` (``estimated``: its bursts
        estimated, of ``n_ref``)."""
        return [replace(q, estimated_share=estimated.get(q.counter, 0) / n_ref if n_ref else 0.0)
                if q.counter in self.plans else q for q in rows]


def _medians(seq: pl.DataFrame, info: AlignedRun, counters: Sequence[str],
             plans: Mapping[str, Plan]) -> list[pl.DataFrame]:
    """Per group of :data:`ESTIMATE_GROUPS`, the medians of ``counters`` (per their plans: over their work counter)
    over a source run's bursts (``seq``: their keys and loose signatures, in the order of ``info.run``'s bursts),
    its counter columns read a block at a time (:class:`WideRows`) or taken from its bursts whole."""
    works = list(dict.fromkeys(plans[c].work for c in counters if plans[c].work))
    step = max(1, block_rows(seq.height) - len(works))  # columns of a block of cells of seq.height rows
    parts: list[list[pl.DataFrame]] = [[] for _ in ESTIMATE_GROUPS]
    for a in range(0, len(counters), step):
        chunk = list(counters[a:a + step])
        read = [*chunk, *(w for w in works if w not in chunk)]
        if info.wide is not None:
            values = gathered(info.wide.src.scan, info.wide.run_rows, read)
        else:
            values = info.run.bursts.select(read)  # type: ignore[union-attr]
        s = pl.concat([seq, values], how="horizontal")
        v = {c: pl.col(c).cast(pl.Float64) / pl.col(w).cast(pl.Float64).replace(0, None) if (w := plans[c].work)
             else pl.col(c).cast(pl.Float64) for c in chunk}
        for i, group in enumerate(ESTIMATE_GROUPS):
            got = s.group_by(*group, maintain_order=True).agg(v[c].median().alias(c) for c in chunk)
            parts[i].append(got if a == 0 else got.drop(group))
    return [pl.concat(p, how="horizontal") for p in parts]
