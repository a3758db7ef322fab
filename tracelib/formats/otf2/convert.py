"""Conversion of one location's buffered events into the generic frames of :mod:`synthtrace.tracelib.formats.bursts`:
bursts between outermost MPI regions, MPI calls with their collective data and call sites, counter samples,
point-to-point records."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from synthtrace.tracelib.formats.bursts import (
    INTERVAL_SCHEMA,
    MESSAGE_SCHEMA,
    MPI_EVENT_SCHEMA,
    NEVER,
    SAMPLE_SCHEMA,
    RecordBatch,
)
from synthtrace.tracelib.errors import TraceFormatError
from synthtrace.tracelib.formats.collectives import (
    SIZE_LIMIT, first_bad_size, first_root_outside, root_reason, size_reason)
from synthtrace.tracelib.formats.paraver.event_types import USER_FUNCTION_EVENT
from synthtrace.tracelib.schema import EVENT_SCHEMA
from synthtrace.tracelib.formats.otf2.definitions import (
    _CUM, _CUM_ZERO, _DELTA_NEXT, _GAUGE, RECORDING_OFF_REGION, _Definitions, _Location)
from synthtrace.tracelib.formats.otf2.events import (
    _ENTER, _IRECV_REQ, _LEAVE, _MRECV, _TEAM_BEGIN, _TEAM_END, _EventBuffer,
                                             _np)
from synthtrace.tracelib.formats.otf2.messages import _P2P_SCHEMA

_ROOT_SPECIAL = 0xFFFFFFFD  # collective roots from here up are OTF2's THIS_GROUP / SELF / NONE, not ranks
_INF_POS = np.iinfo(np.int64).max


@dataclass
class _OpenCall:
    """An outermost MPI call whose Leave has not been read yet (-1 = unknown)."""

    time_ns: int
    ref: int
    site: int  # region ref of the innermost enclosing non-MPI region
    comm: int = -1
    root: int = -1
    sent: int = -1
    recv: int = -1


@dataclass
class _LocationState:
    """What one location carries from one chunk of events to the next."""

    depth: int = 0  # MPI nesting depth
    stack: list[int] = field(default_factory=list)  # open non-MPI regions (refs), outermost first
    open_start: int | None = None  # ns start of the burst in progress
    open_call: _OpenCall | None = None
    pending: tuple[int, int] | None = None  # (start, end) ns of a burst whose closing call is still open
    closed_until: int = -1  # ns end of the last burst handed to the assembler
    started: bool = False
    last_ns: int = 0
    team_depth: int = 0  # thread teams the location is in (ThreadTeamBegin minus ThreadTeamEnd)
    idle_from: int | None = None  # ns of the ThreadTeamEnd that left the location idle (worker threads)
    measuring_depth: int = 0  # measurement-system regions open (Enter minus Leave)
    measuring_from: int | None = None  # ns of the Enter of the outermost one still open
    idle: list[tuple[int, int]] = field(default_factory=list)  # idle (start, end) ns not yet behind closed bursts
    prev_reading: dict[int, int] = field(default_factory=dict)  # member id -> last cumulative reading
    next_pending: dict[int, int] = field(default_factory=dict)  # member id -> value waiting for the next reading
    carry_samples: pl.DataFrame | None = None
    last_record: dict[str, tuple[int, ...]] = field(default_factory=dict)  # group -> its last record's fields
    region_since: dict[str, bool] = field(default_factory=dict)  # group -> a region record came after its last one


_GROUPS = {"r": ("kind", "time", "ref", "pos"), "m": ("time", "ref", "n", "pos"),
           "p": ("kind", "time", "peer", "comm", "tag", "len", "req", "pos"),
           "c": ("time", "comm", "root", "sent", "recv", "pos")}
#: the fields that make two records of a group the same record written twice (:meth:`_LocationConverter._repeats`):
#: every field but the record's position; an Enter/Leave only when its region is an MPI call's
_TWIN_FIELDS = {"r": ("kind", "time", "ref"), "p": ("kind", "time", "peer", "comm", "tag", "len", "req"),
                "c": ("time", "comm", "root", "sent", "recv")}
_DTYPES = {"kind": np.uint8, "time": np.uint64, "ref": np.uint32, "pos": np.uint64, "n": np.uint8,
           "peer": np.uint32, "comm": np.uint32, "tag": np.uint32, "len": np.uint64, "req": np.uint64,
           "root": np.uint32, "sent": np.uint64, "recv": np.uint64}


def _union(gaps: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) ns of the union of ``gaps`` (intervals of two kinds may overlap), sorted and disjoint."""
    gs, ge = (np.array(x, dtype=np.int64) for x in zip(*sorted(gaps)))
    reach = np.maximum.accumulate(ge)
    new = np.concatenate([[True], gs[1:] > reach[:-1]])  # a gap that starts past every earlier one's end
    return gs[new], np.maximum.reduceat(ge, np.flatnonzero(new))


def _first_per_slot(slot: np.ndarray, values: np.ndarray, target: np.ndarray) -> None:
    """Set ``target[s]`` to the first of ``values`` of slot s where ``target[s]`` is still -1."""
    if not slot.size:
        return
    uniq, first = np.unique(slot, return_index=True)
    unset = target[uniq] == -1
    target[uniq[unset]] = values[first[unset]]


class _LocationConverter:
    """Turns chunks of one location's raw records into the generic frames of
    :mod:`synthtrace.tracelib.formats.bursts`."""

    def __init__(self, defs: _Definitions, loc: _Location, path: Path, run_id: str = ""):
        self.defs, self.loc, self.path, self.run_id = defs, loc, path, run_id
        self.events = pl.DataFrame(schema=EVENT_SCHEMA)  # the last chunk's user-region events
        #: the last chunk's times (appl, task, thread, time_ns) recording was switched off (mergeattack23 P4)
        self.untraced_at = pl.DataFrame(schema={"time_ns": pl.Int64})
        self._recording_off = defs.region_is_measurement & (np.array(defs.region_names, dtype=object)
                                                            == RECORDING_OFF_REGION)
        self.state = _LocationState()
        self.n_out_of_order = 0
        #: MPI records (an MPI call's Enter or Leave, a message or collective record) alike in time and every field
        #: to the record of their kind before them: one record written twice, read once (attack 9 C6 for OTF2)
        self.n_repeated = 0
        self.dropped_open_call: str | None = None
        self._names = pl.Series("call", defs.region_names, dtype=pl.String)
        self._kinds = pl.Series("kind", defs.region_kind, dtype=pl.String)
        self._sites = pl.Series("call_site", defs.region_site, dtype=pl.String)
        self._counters = pl.Series("counter", defs.member_names, dtype=pl.String)
        #: communicators (sorted) and their ranks (count), read on first need
        self._n_ranks: tuple[np.ndarray, np.ndarray] | None = None

    def _with_keys(self, df: pl.DataFrame) -> pl.DataFrame:
        return df.with_columns(pl.lit(1, pl.Int32).alias("appl"), pl.lit(self.loc.task, pl.Int32).alias("task"),
                               pl.lit(self.loc.thread, pl.Int32).alias("thread"), pl.lit(None, pl.Int32).alias("cpu"))

    # -------------------------------------------------------------- ordering
    def _arrays(self, buf: _EventBuffer) -> dict[str, np.ndarray]:
        """Numpy copies of the chunk, each record kind in (timestamp, record order); times also in ns."""
        a: dict[str, np.ndarray] = {}
        for g, cols in _GROUPS.items():
            for c in cols:
                a[f"{g}_{c}"] = _np(getattr(buf, f"{g}_{c}"), _DTYPES[c]).copy()
            a[f"{g}_ns"] = self.defs.to_ns(a[f"{g}_time"])
        a["m_vals"] = _np(buf.m_vals, np.uint64).copy()
        all_ns = np.concatenate([a[f"{g}_ns"] for g in _GROUPS])
        all_pos = np.concatenate([a[f"{g}_pos"] for g in _GROUPS])
        by_pos = np.argsort(all_pos, kind="stable")
        backwards = int(np.sum(np.diff(all_ns[by_pos]) < 0)) if all_ns.size > 1 else 0
        if not backwards:
            return self._without_repeats(a)
        # timestamps that go back in record order: order by (timestamp, record order), renumber record order
        self.n_out_of_order += backwards
        seq = np.empty_like(all_pos)
        seq[np.lexsort((all_pos, all_ns))] = np.arange(all_pos.size, dtype=np.uint64)
        start = 0
        for g, cols in _GROUPS.items():
            n = a[f"{g}_pos"].size
            new_pos = seq[start:start + n]
            start += n
            idx = np.argsort(new_pos, kind="stable")
            if g == "m" and n:
                counts = a["m_n"].astype(np.int64)
                offs = np.concatenate([[0], np.cumsum(counts)[:-1]])
                lens = counts[idx]
                flat = np.repeat(offs[idx] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(lens.sum())
                a["m_vals"] = a["m_vals"][flat]
            a[f"{g}_pos"] = new_pos
            for c in (*cols, "ns"):
                a[f"{g}_{c}"] = a[f"{g}_{c}"][idx]
        return self._without_repeats(a)

    def _without_repeats(self, a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The chunk ``a`` (each group in record order) without the MPI records that repeat the record of their
        group before them (this chunk's or the last of the previous one) in every field of :data:`_TWIN_FIELDS`:
        an MPI call's Enter or Leave, and, with no Enter or Leave of any region between them (one call's), a
        message record (``MpiSend`` ... with its request id) or a collective's end. Such a pair is one record
        written twice (a location's buffer flushed twice, a copy tool's bug): an MPI call entered inside itself at
        the same timestamp, or a second send of the same message within one call, is not a program's (two calls
        sending alike within one tick of a coarse clock are kept: a region record lies between them). Kept, the
        twin Enter nested every later call inside the first (a rank "ends inside MPI_Init", its calls gone) and
        twin sends and receives paired into two messages, doubling the bytes. Counted in :attr:`n_repeated`;
        metric records are left as read (a cumulative reading twice counts 0)."""
        st = self.state
        regions = np.empty(0, dtype=np.int64)  # the region records kept, by position (after the r group's pass)
        for g, fields in _TWIN_FIELDS.items():
            cols = [a[f"{g}_{c}"].astype(np.int64) for c in fields]
            n = cols[0].size
            if not n:
                if g != "r":
                    st.region_since[g] = st.region_since.get(g, False) or regions.size > 0
                continue
            prev = st.last_record.get(g)
            same = np.ones(n, dtype=bool)
            for k, col in enumerate(cols):
                before = np.concatenate([[prev[k] if prev is not None else -1], col[:-1]])
                same &= col == before
            if prev is None:
                same[0] = False
            st.last_record[g] = tuple(int(col[-1]) for col in cols)
            if g == "r":
                ref = a["r_ref"].astype(np.int64)
                known = ref < self.defs.region_is_mpi.size
                same &= (a["r_kind"] <= _LEAVE) & known & self.defs.region_is_mpi[np.where(known, ref, 0)]
            else:  # one call's: no region record between the twins (positions compare within a chunk only)
                pos = a[f"{g}_pos"].astype(np.int64)
                between = np.searchsorted(regions, pos) - np.searchsorted(regions, np.concatenate([[-1], pos[:-1]]),
                                                                          side="right")
                same &= between == 0
                same[0] &= not st.region_since.get(g, False)
                st.region_since[g] = bool(regions.size and regions[-1] > pos[-1])
            if same.any():
                self.n_repeated += int(same.sum())
                keep = ~same
                for c in (*_GROUPS[g], "ns"):
                    a[f"{g}_{c}"] = a[f"{g}_{c}"][keep]
            if g == "r":
                regions = a["r_pos"].astype(np.int64)
        return a

    # -------------------------------------------------------------- one chunk
    def convert(self, buf: _EventBuffer, final: bool) -> tuple[RecordBatch, pl.DataFrame, int]:
        """One chunk -> (record batch, point-to-point records, assembler horizon in ns)."""
        st = self.state
        a = self._arrays(buf)
        present = [a[f"{g}_ns"] for g in _GROUPS if a[f"{g}_ns"].size]
        if present:
            if not st.started:
                st.started = True
                st.open_start = int(min(int(t.min()) for t in present))
            st.last_ns = max(st.last_ns, max(int(t.max()) for t in present))
        intervals, mpi = self._regions(a, final)
        samples = self._samples(a, final)
        batch = RecordBatch(intervals=intervals, samples=samples, mpi=mpi, messages=pl.DataFrame(schema=MESSAGE_SCHEMA))
        return batch, self._p2p(a), (NEVER if final else st.closed_until + 1)

    def _call_sites(self, ref: np.ndarray, is_region: np.ndarray, mpi: np.ndarray, kind: np.ndarray,
                    entries: np.ndarray) -> np.ndarray:
        """Region ref of the innermost open non-MPI region at each outer MPI entry (-1: none)."""
        st = self.state
        step = np.where(is_region & ~mpi & (kind == _ENTER), 1, np.where(is_region & ~mpi & (kind == _LEAVE), -1, 0))
        level = len(st.stack) + np.cumsum(step)
        enters = np.flatnonzero(step == 1)
        enter_level = level[enters]
        entry_level = level[entries]
        carried = np.asarray(st.stack, dtype=np.int64)

        def carried_at(lv: np.ndarray) -> np.ndarray:  # the open region carried from earlier chunks at level lv
            inside = (lv >= 1) & (lv <= carried.size)
            return np.where(inside, carried[np.clip(lv - 1, 0, carried.size - 1)] if carried.size else -1, -1)

        # the last enter before each entry at the entry's own level, found by one sorted search over (level,
        # position) keys: whole-array work, so a corrupt trace with deep nesting cannot make it quadratic
        width = np.int64(level.size + 1)
        order = np.argsort(enter_level.astype(np.int64) * width + enters, kind="stable")
        keys = enter_level[order].astype(np.int64) * width + enters[order]
        j = np.searchsorted(keys, entry_level.astype(np.int64) * width + entries) - 1
        jc = np.clip(j, 0, None)
        found = (j >= 0) & (enter_level[order][jc] == entry_level) if enters.size else np.zeros(entries.size, bool)
        sites = np.where(found, ref[enters[order][jc]] if enters.size else -1, carried_at(entry_level)).astype(np.int64)
        # the stack left open at the chunk's end: per level, its last enter in this chunk, else the carried one
        end_level = max(int(level[-1]) if level.size else carried.size, 0)
        stack = carried_at(np.arange(1, end_level + 1))
        if enters.size:
            last_lv, last_at = np.unique(enter_level[::-1], return_index=True)
            keep = (last_lv >= 1) & (last_lv <= end_level)
            stack[last_lv[keep] - 1] = ref[enters[::-1][last_at[keep]]]
        st.stack = stack.tolist()
        return sites

    def _user_regions(self, ref: np.ndarray, ns: np.ndarray, kind: np.ndarray, user: np.ndarray) -> pl.DataFrame:
        """Enter/Leave of the regions that are not MPI calls (user functions, OpenMP constructs: the bursts hold
        their time, the calls their names as call sites) as ``events`` rows, in Extrae's convention for user
        functions: event :data:`USER_FUNCTION_EVENT`, value = region ref + 1 at Enter, 0 at Leave."""
        rows = np.flatnonzero(user)
        if not rows.size:
            return pl.DataFrame(schema=EVENT_SCHEMA)
        enter = kind[rows] == _ENTER
        value = np.where(enter, ref[rows] + 1, 0)
        names = pl.Series("value_name", ["End", *self.defs.region_names], dtype=pl.String)
        return self._with_keys(pl.DataFrame({
            "time_ns": ns[rows].astype(np.int64), "type": np.full(rows.size, USER_FUNCTION_EVENT, np.int64),
            "value": value.astype(np.int64)})).with_columns(
            pl.lit(self.run_id, pl.String).alias("run_id"), pl.lit("User function", pl.String).alias("type_name"),
            names.gather(value).alias("value_name")).select(EVENT_SCHEMA.keys())

    def _regions(self, a: dict[str, np.ndarray], final: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Enter/Leave records -> burst intervals and outermost MPI calls (entry and exit rows)."""
        d, st = self.defs, self.state
        kind, ref, ns, pos = a["r_kind"], a["r_ref"].astype(np.int64), a["r_ns"], a["r_pos"].astype(np.int64)
        valid = ref < d.region_is_mpi.size
        if (undefined := (kind <= _LEAVE) & ~valid).any():
            i = int(np.argmax(undefined))
            self._refuse_reference(f"region {int(ref[i])}", int(ns[i]))
        is_region = (kind <= _LEAVE) & valid
        mpi = is_region & d.region_is_mpi[np.where(valid, ref, 0)]
        depth0 = st.depth
        depth = depth0 + np.cumsum(np.where(mpi & (kind == _ENTER), 1, np.where(mpi & (kind == _LEAVE), -1, 0)))
        if depth.size and depth.min() < 0:
            i = int(np.argmax(depth < 0))
            raise TraceFormatError(self.loc.evt_file, None, f"Leave of {d.region_names[ref[i]]} at {int(ns[i])} ns "
                                   f"(rank {self.loc.task - 1}) without its Enter")
        entries = np.flatnonzero(mpi & (kind == _ENTER) & (depth == 1))
        exits = np.flatnonzero(mpi & (kind == _LEAVE) & (depth == 0))
        sites = self._call_sites(ref, is_region, mpi, kind, entries)
        st.depth = int(depth[-1]) if depth.size else depth0
        self.events = self._user_regions(ref, ns, kind, is_region & ~mpi)

        # bursts: from the carried start or an outer exit to the next outer entry
        starts = ns[exits]
        if depth0 == 0 and st.open_start is not None:
            starts = np.concatenate([[st.open_start], starts])
        ends = ns[entries]
        st.open_start = int(starts[-1]) if starts.size > ends.size else None
        n = min(starts.size, ends.size)
        starts, ends = starts[:n], ends[:n]
        # a burst goes to the assembler in the same batch as the call that closes it (the assembler names a
        # burst's mpi_call from the entry rows of its batch): hold it back while that call is still open
        if st.pending is not None and exits.size:
            starts, ends = np.concatenate([[st.pending[0]], starts]), np.concatenate([[st.pending[1]], ends])
            st.pending = None
        if st.depth > 0 and entries.size and ends.size:  # the last entry opened the call still open
            st.pending = (int(starts[-1]), int(ends[-1]))
            starts, ends = starts[:-1], ends[:-1]
        if final and st.pending is not None:  # the location ends inside that call: the burst stays, unnamed
            starts, ends = np.append(starts, st.pending[0]), np.append(ends, st.pending[1])
            st.pending = None
        if final and st.open_start is not None:
            starts, ends = np.append(starts, st.open_start), np.append(ends, st.last_ns)
            st.open_start = None
        if self.loc.thread > 1:  # a worker thread between thread teams waits in the runtime: no burst there
            self._team_gaps(kind, ns)
        self._measurement_gaps(kind, ns, is_region & d.region_is_measurement[np.where(valid, ref, 0)], final)
        off = np.flatnonzero(is_region & (kind == _ENTER) & self._recording_off[np.where(valid, ref, 0)])
        self.untraced_at = self._with_keys(pl.DataFrame({"time_ns": ns[off].astype(np.int64)})).drop("cpu")
        starts, ends = self._without_gaps(starts, ends)
        if ends.size:
            st.closed_until = max(st.closed_until, int(ends.max()))
        iv = pl.DataFrame({"start_ns": starts.astype(np.int64), "end_ns": ends.astype(np.int64)})
        intervals = self._with_keys(iv.filter(pl.col("end_ns") > pl.col("start_ns"))).select(
            [pl.col(k).cast(v) for k, v in INTERVAL_SCHEMA.items()])

        # calls: slot 0 may be the call carried from the previous chunk, then one slot per outer entry
        carried = st.open_call if depth0 > 0 else None
        slot_ns, slot_ref, slot_site = ns[entries], ref[entries], sites
        slot_lo = pos[entries]
        info = np.full((4, entries.size), -1, dtype=np.int64)  # comm, root, sent, recv
        if carried is not None:
            slot_ns = np.concatenate([[carried.time_ns], slot_ns])
            slot_ref = np.concatenate([[carried.ref], slot_ref])
            slot_site = np.concatenate([[carried.site], slot_site])
            slot_lo = np.concatenate([[-1], slot_lo])
            info = np.concatenate(
                [np.array([[carried.comm], [carried.root], [carried.sent], [carried.recv]]), info], axis=1
            )
        n_slots, n_closed = slot_ns.size, exits.size
        slot_hi = np.full(n_slots, _INF_POS, dtype=np.int64)
        slot_hi[:n_closed] = pos[exits]
        self._attach(a, slot_lo, slot_hi, info)
        st.open_call = None
        if n_slots > n_closed:  # the last call is still open
            k = n_slots - 1
            st.open_call = _OpenCall(int(slot_ns[k]), int(slot_ref[k]), int(slot_site[k]), *map(int, info[:, k]))
        if final and st.open_call is not None:
            self.dropped_open_call = d.region_names[st.open_call.ref]
            st.open_call = None
        return intervals, self._mpi_rows(slot_ns[:n_closed], ns[exits], slot_ref[:n_closed], slot_site[:n_closed],
                                         info[:, :n_closed])

    def _team_gaps(self, kind: np.ndarray, ns: np.ndarray) -> None:
        """Keep the times this worker thread belongs to no thread team (from the ThreadTeamEnd that leaves its last
        team to the next ThreadTeamBegin) as gaps (:meth:`_without_gaps`)."""
        st = self.state
        team = np.flatnonzero((kind == _TEAM_BEGIN) | (kind == _TEAM_END))
        step = np.where(kind[team] == _TEAM_BEGIN, 1, -1)
        after = st.team_depth + np.cumsum(step)
        # a ThreadTeamEnd that leaves the last team opens a gap, the next ThreadTeamBegin from no team closes it
        mark = team[np.where(step < 0, after <= 0, after - step <= 0)]
        is_end = kind[mark] == _TEAM_END
        prev_end = np.concatenate([[st.idle_from is not None], is_end[:-1]])
        open_t = ns[mark[is_end & ~prev_end]]
        close_t = ns[mark[~is_end & prev_end]]
        if st.idle_from is not None:
            open_t = np.concatenate([[st.idle_from], open_t])
        st.idle.extend(zip(open_t[:close_t.size].tolist(), close_t.tolist()))
        st.idle_from = int(open_t[-1]) if open_t.size > close_t.size else None
        st.team_depth = max(int(after[-1]), 0) if after.size else st.team_depth

    def _measurement_gaps(self, kind: np.ndarray, ns: np.ndarray, measurement: np.ndarray, final: bool) -> None:
        """Keep the times inside the measurement system's own regions (Score-P's buffer flush, recording switched
        off: ``region_is_measurement``) as gaps (:meth:`_without_gaps`): the tracer's I/O is not the program's
        work, and Extrae's flush state likewise cuts a Paraver Running burst. A reading at the region's Leave
        counts the region and lands on the next burst's start, which a burst's counts leave out (start < t)."""
        st = self.state
        rows = np.flatnonzero(measurement & (kind <= _LEAVE))
        step = np.where(kind[rows] == _ENTER, 1, -1)
        # the depth never goes below 0: a Leave with no Enter (the trace begins inside a flush) is passed over, not
        # carried as a debt that kept every later flush of the batch from opening a gap (attack 23 F1)
        walk = st.measuring_depth + np.cumsum(step)
        after = walk - np.minimum(np.minimum.accumulate(walk), 0) if walk.size else walk
        before = np.concatenate([[st.measuring_depth], after[:-1]])
        open_t = ns[rows[(step > 0) & (before == 0)]]
        close_t = ns[rows[(step < 0) & (before == 1)]]
        if st.measuring_from is not None:
            open_t = np.concatenate([[st.measuring_from], open_t])
        st.idle.extend(zip(open_t[:close_t.size].tolist(), close_t.tolist()))
        st.measuring_from = int(open_t[-1]) if open_t.size > close_t.size else None
        st.measuring_depth = max(int(after[-1]), 0) if after.size else st.measuring_depth
        if final and st.measuring_from is not None:  # the location ends with recording off: nothing after it
            st.idle.append((st.measuring_from, max(st.last_ns, st.measuring_from)))
            st.measuring_from = None

    def _without_gaps(self, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bursts (sorted, disjoint ns intervals) less the gaps kept so far (:meth:`_team_gaps`,
        :meth:`_measurement_gaps`): a burst spanning a gap is cut in two. Gaps are kept until the bursts closed
        pass them (a burst can span chunks)."""
        st = self.state
        if not st.idle or not starts.size:
            return starts, ends
        gs, ge = _union(st.idle)
        lo = np.searchsorted(ge, starts, side="right")  # the first gap ending after each burst's start
        n = np.maximum(np.searchsorted(gs, ends, side="left") - lo, 0)  # gaps that begin before its end
        burst = np.repeat(np.arange(starts.size), n + 1)
        k = np.arange(burst.size) - np.repeat(np.cumsum(n + 1) - (n + 1), n + 1)  # piece k of its burst
        g = lo[burst] + k
        last = gs.size - 1
        p_start = np.maximum(np.where(k == 0, starts[burst], ge[np.clip(g - 1, 0, last)]), starts[burst])
        p_end = np.minimum(np.where(k == n[burst], ends[burst], gs[np.clip(g, 0, last)]), ends[burst])
        keep = p_end > p_start
        closed = int(ends.max())
        st.idle = [(int(a), int(b)) for a, b in zip(gs, ge) if b > closed]
        return p_start[keep], p_end[keep]

    def _attach(self, a: dict[str, np.ndarray], lo: np.ndarray, hi: np.ndarray, info: np.ndarray) -> None:
        """Fill comm/root/sizes of the call slots from the collective and point-to-point records inside them."""
        def owner(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            p = p.astype(np.int64)
            k = np.searchsorted(lo, p, side="right") - 1
            inside = (k >= 0) & (p <= hi[np.clip(k, 0, None)]) if lo.size else np.zeros(p.size, dtype=bool)
            return k[inside], inside

        k, inside = owner(a["c_pos"])
        if k.size:
            c_ns = a["c_ns"][inside]
            for row, col in ((2, "c_sent"), (3, "c_recv")):
                sizes = a[col][inside].astype(np.int64)
                self._check_collective_size(sizes, c_ns)  # each record's size, then each call's sum
                touched = np.zeros(info.shape[1], dtype=bool)
                touched[k] = True
                summed = np.where(touched & (info[row] > 0), info[row], 0)
                # several collectives of one call may sum past int64: summed in float64 first, which cannot wrap
                total = summed.astype(np.float64)
                np.add.at(total, k, sizes.astype(np.float64))
                if (over := np.flatnonzero(total >= SIZE_LIMIT)).size:
                    slot = int(over[0])
                    raise TraceFormatError(self.path, None, f"task {self.loc.task} thread {self.loc.thread}: "
                                           + size_reason("a collective", int(total[slot]),
                                                         int(c_ns[np.argmax(k == slot)])))
                np.add.at(summed, k, sizes)
                info[row] = np.where(touched, summed, info[row])
            comm = a["c_comm"][inside].astype(np.int64)
            _first_per_slot(k, comm, info[0])
            root = a["c_root"][inside].astype(np.int64)
            has_root = root < _ROOT_SPECIAL
            n_ranks = self._comm_sizes(comm[has_root])
            bad = first_root_outside(root[has_root], n_ranks)
            if bad >= 0:
                raise TraceFormatError(self.path, None, f"task {self.loc.task} thread {self.loc.thread}: "
                                       + root_reason(int(root[has_root][bad]), int(n_ranks[bad]),
                                                     int(comm[has_root][bad]), int(c_ns[has_root][bad])))
            _first_per_slot(k[has_root], root[has_root], info[1])
        p2p = ~np.isin(a["p_kind"], [_IRECV_REQ, _MRECV])  # records that name their communicator
        k, inside = owner(a["p_pos"][p2p])
        _first_per_slot(k, a["p_comm"][p2p][inside].astype(np.int64), info[0])

    def _check_collective_size(self, sizes: np.ndarray, ns: np.ndarray) -> None:
        """Refuse a collective record's size (bytes, int64: a uint64 of 2^63 or more reads negative) as a point-to-point
        message's is refused (:func:`~synthtrace.tracelib.formats.otf2.messages.check_sizes`)."""
        bad = first_bad_size(sizes)
        if bad >= 0:
            raise TraceFormatError(self.path, None, f"task {self.loc.task} thread {self.loc.thread}: "
                                   + size_reason("a collective", int(sizes[bad]) % 2**64, int(ns[bad])))

    def _comm_sizes(self, comm: np.ndarray) -> np.ndarray:
        """Ranks (count) of each communicator ``comm``: 1 for a self communicator, the world's for one with no
        definition."""
        if self._n_ranks is None:
            per = self.defs.comm_ranks.group_by("comm").agg(pl.col("rank").n_unique()).sort("comm")
            own = sorted(self.defs.self_comms)
            keys = np.concatenate([per["comm"].to_numpy(), np.array(own, dtype=np.int64)])
            order = np.argsort(keys, kind="stable")
            sizes = np.concatenate([per["rank"].to_numpy().astype(np.int64), np.ones(len(own), dtype=np.int64)])
            self._n_ranks = (keys[order], sizes[order])
        keys, sizes = self._n_ranks
        at = np.clip(np.searchsorted(keys, comm), 0, max(keys.size - 1, 0))
        known = (keys[at] == comm) if keys.size else np.zeros(comm.size, dtype=bool)
        return np.where(known, sizes[at] if keys.size else 0, self.defs.n_tasks)

    def _mpi_rows(self, entry_ns: np.ndarray, exit_ns: np.ndarray, ref: np.ndarray, site: np.ndarray,
                  info: np.ndarray) -> pl.DataFrame:
        if not entry_ns.size:
            return pl.DataFrame(schema=MPI_EVENT_SCHEMA)
        ref_s = pl.Series(ref.astype(np.int64))
        nullable = {
            name: pl.Series(info[i]).replace(-1, None)
            for i, name in enumerate(("comm", "root", "bytes_sent", "bytes_recv"))
        }
        n = entry_ns.size
        entry = pl.DataFrame(
            {
                "time_ns": entry_ns.astype(np.int64),
                "kind": self._kinds.gather(ref_s),
                "call": self._names.gather(ref_s),
                **nullable,
                "call_site": self._sites.gather(pl.Series(np.clip(site, 0, None))).zip_with(
                    pl.Series(site >= 0), pl.Series([None] * n, dtype=pl.String)
                ),
                "_i": np.arange(n),
                "_o": np.zeros(n, dtype=np.int8),
            }
        )
        exit_ = pl.DataFrame({"time_ns": exit_ns.astype(np.int64), "kind": entry["kind"], "_i": np.arange(n),
                              "_o": np.ones(n, dtype=np.int8)})
        df = pl.concat([entry, exit_], how="diagonal_relaxed").sort("_i", "_o")
        return self._with_keys(df).select([pl.col(k).cast(v) for k, v in MPI_EVENT_SCHEMA.items()])

    # -------------------------------------------------------------- counters
    def _samples(self, a: dict[str, np.ndarray], final: bool) -> pl.DataFrame:
        """Metric records -> counts at the time that closes their interval; keeps back what is not final yet."""
        d, st = self.defs, self.state
        frames: list[pl.DataFrame] = []
        if st.carry_samples is not None:
            frames.append(st.carry_samples)
            st.carry_samples = None
        refs, counts, vals = a["m_ref"].astype(np.int64), a["m_n"].astype(np.int64), a["m_vals"]
        if refs.size:
            frames.append(self._counts(refs, counts, vals, a["m_ns"], a["m_pos"].astype(np.int64)))
        if final and st.next_pending:
            frames.append(pl.DataFrame({"time_ns": [st.last_ns] * len(st.next_pending),
                                        "counter": [d.member_names[m] for m in st.next_pending],
                                        "value": list(st.next_pending.values())},
                                       schema={"time_ns": pl.Int64, "counter": pl.String, "value": pl.Int64}))
            st.next_pending.clear()
        if not frames:
            return pl.DataFrame(schema=SAMPLE_SCHEMA)
        s = pl.concat(frames, how="vertical_relaxed")
        if not final:  # a count after the last closed burst may belong to the burst in progress
            later = pl.col("time_ns") > st.closed_until
            st.carry_samples = s.filter(later)
            s = s.filter(~later)
        return self._with_keys(s).select([pl.col(k).cast(v) for k, v in SAMPLE_SCHEMA.items()])

    def _counts(self, refs: np.ndarray, counts: np.ndarray, vals: np.ndarray, t_ns: np.ndarray,
                pos: np.ndarray) -> pl.DataFrame:
        """Readings (one row per record, ``counts[i]`` values each) -> (time_ns, counter, value) counts."""
        d, st = self.defs, self.state
        rec = np.repeat(np.arange(refs.size), counts)
        within = np.arange(vals.size) - np.repeat(np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        lut_base = np.array([d.metric_base.get(int(r), -1) for r in range(int(refs.max()) + 1)], dtype=np.int64)
        lut_size = np.array([d.metric_count.get(int(r), 0) for r in range(int(refs.max()) + 1)], dtype=np.int64)
        if (undefined := lut_base[refs] < 0).any():
            i = int(np.argmax(undefined))
            self._refuse_reference(f"metric {int(refs[i])}", int(t_ns[i]))
        base, size = lut_base[refs][rec], lut_size[refs][rec]
        ok = (base >= 0) & (within < size)
        member = np.full(ok.size, -1, dtype=np.int64)  # a value past its metric's members: none
        member[ok] = d.metric_members[(base + within)[ok]]
        ok[ok] = d.member_mode[member[ok]] != _GAUGE
        member, raw, rec = member[ok], vals[ok], rec[ok]
        value = raw.view(np.int64).copy()
        fl = d.member_type[member] == 2
        if fl.any():
            doubles = raw[fl].view(np.float64)
            bad = ~(np.abs(doubles) < 2.0**63)  # NaN compares False: bad too
            if bad.any():
                self._refuse_metric(member[fl][bad][0], doubles[bad][0], t_ns[rec[fl][bad][0]])
            value[fl] = np.rint(doubles).astype(np.int64)
        order = np.lexsort((pos[rec], member))  # per member in record order
        member, value, t = member[order], value[order], t_ns[rec][order]
        mode = d.member_mode[member]
        first = np.ones(member.size, dtype=bool)
        first[1:] = member[1:] != member[:-1]
        last = np.ones(member.size, dtype=bool)
        last[:-1] = member[1:] != member[:-1]
        prev = np.concatenate([[0], value[:-1]]).astype(np.int64)
        has_prev = ~first
        for i in np.flatnonzero(first):
            m = int(member[i])
            if m in st.prev_reading:
                prev[i], has_prev[i] = st.prev_reading[m], True
            elif mode[i] == _CUM_ZERO:
                prev[i], has_prev[i] = 0, True
        cum = mode <= _CUM
        for i in np.flatnonzero(last & cum):
            st.prev_reading[int(member[i])] = int(value[i])
        out_v = np.where(cum, value - prev, value)
        out_t = t.copy()
        keep = np.where(cum, has_prev, True)
        nxt = mode == _DELTA_NEXT
        extra: list[tuple[int, int, int]] = []
        if nxt.any():  # a *_NEXT value counts until the next reading of its member: it closes there
            out_t[:-1] = np.where(nxt[:-1] & ~last[:-1], t[1:], out_t[:-1])
            for i in np.flatnonzero(nxt & first):
                if (m := int(member[i])) in st.next_pending:
                    extra.append((int(t[i]), m, st.next_pending.pop(m)))
            for i in np.flatnonzero(nxt & last):
                st.next_pending[int(member[i])] = int(value[i])
            keep &= ~(nxt & last)
        df = pl.DataFrame({"time_ns": out_t[keep].astype(np.int64), "member": member[keep].astype(np.int64),
                           "value": out_v[keep].astype(np.int64)})
        if extra:
            df = pl.concat([df, pl.DataFrame(extra, schema=df.schema, orient="row")])
        return df.select("time_ns", self._counters.gather(df["member"]).alias("counter"), "value")

    def _refuse_reference(self, what: str, time_ns: int) -> None:
        """An event that names a definition the archive does not have (an event file of another run copied in,
        attack 7 A14: rank 0's calls were read under the other run's region numbers and vanished) makes the trace
        unreadable: the otf2 library's own reader stops there too."""
        when = f" at {time_ns} ns" if time_ns >= 0 else ""  # a time before the archive's start says nothing
        raise TraceFormatError(self.loc.evt_file, None, f"an event{when} (rank {self.loc.task - 1}) names {what}, "
                               "which the archive's definitions do not define: an event file of another run?")

    def _refuse_metric(self, member: int, value: float, time_ns: int) -> None:
        """A floating-point metric reading that is no number of events (NaN, infinite, beyond 2^63) makes the trace
        unreadable, as a Paraver counter value beyond 64 bits does (it would be stored as INT64_MIN)."""
        raise TraceFormatError(self.path, None, f"metric {self.defs.member_names[member]!r} reads {value} at "
                               f"{time_ns} ns on task {self.loc.task} thread {self.loc.thread}: not a count "
                               "(NaN, infinite or beyond 2^63)")

    def _p2p(self, a: dict[str, np.ndarray]) -> pl.DataFrame:
        """Point-to-point records of the chunk, for message matching once every location is read."""
        if not a["p_kind"].size:
            return pl.DataFrame(schema=_P2P_SCHEMA)
        return pl.DataFrame({
            "task": np.full(a["p_kind"].size, self.loc.task, dtype=np.int32),
            "thread": np.full(a["p_kind"].size, self.loc.thread, dtype=np.int32),
            "kind": a["p_kind"].astype(np.int8), "time_ns": a["p_ns"], "pos": a["p_pos"].astype(np.int64),
            "peer": a["p_peer"].astype(np.int64), "comm": a["p_comm"].astype(np.int64),
            "tag": a["p_tag"].astype(np.int64), "size": a["p_len"].astype(np.int64), "req": a["p_req"],
        }, schema=_P2P_SCHEMA)

