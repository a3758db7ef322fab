"""Run-to-run variation: placement, clock, OS noise, housekeeping calls, polling — what differs between runs.

Per-burst timing noise and per-counter noise come from the counter model (:mod:`counter_model`); this module
holds the knobs and the per-run draws: which nodes and cores the ranks get (block or cyclic rank order over a
random set of nodes, random cores), the run's clock (turbo jitter), OS-noise outliers (a burst stretched in time,
its counts unchanged), occasional housekeeping calls (an extra ``MPI_Iprobe`` burst in some runs, missing in
others), the work each burst does (``work_sigma``: off by default; dynamic load balancing moves work between
runs), progress writes that split compute bursts at run-dependent points (``io_every_ns``: off by default),
and the polling period of ``MPI_Test``/``MPI_Iprobe`` loops (so poll counts differ between runs).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from synthtrace.tracelib.errors import BadInputError

_RACKS, _ROWS, _BLADES = 8, 4, 12  # node names gs{rack}r{row}b{blade}, like MareNostrum's


@dataclass(frozen=True)
class Variation:
    """Sizes of the run-to-run differences (defaults: what real clusters show)."""

    noise_scale: float = 1.0  # multiplies every counter's relative noise size
    os_noise_p: float = 0.004  # probability that a burst longer than 20 µs is stretched by the OS
    os_noise_stretch: tuple[float, float] = (1.3, 4.0)  # duration factor of a stretched burst
    housekeeping_p: float = 0.03  # probability of an extra MPI_Iprobe burst per rank and iteration
    freq_jitter: float = 0.004  # relative spread of the run's clock
    poll_ins: float = 2500.0  # instructions of one polling-loop iteration
    exit_skew_ns: float = 400.0  # spread of the exit times of a collective over ranks
    work_sigma: float = 0.0  # sigma of a per-run lognormal factor on every burst's work (dynamic load balancing)
    io_every_ns: float = 0.0  # mean compute time between a rank's progress writes (0: none), see :mod:`.io_split`
    io_write_ns: float = 4_000.0  # duration of one write (ns)

    def __post_init__(self) -> None:
        for name in ("noise_scale", "os_noise_p", "housekeeping_p", "freq_jitter", "poll_ins", "exit_skew_ns",
                     "work_sigma", "io_every_ns", "io_write_ns"):
            if getattr(self, name) < 0:
                raise BadInputError(f"variation {name} must not be negative")


@dataclass(frozen=True)
class Placement:
    """Where the ranks of one run sit: node names (header order), node and cpu (1-based, global) per task."""

    node_names: tuple[str, ...]
    node_of_task: np.ndarray  # 0-based node index per task index
    cpu_of_task: np.ndarray  # 1-based cpu id in the trace's resource list
    cores_per_node: int

    @property
    def cpus_per_node(self) -> tuple[int, ...]:
        return (self.cores_per_node,) * len(self.node_names)


def node_count(n_tasks: int, ranks_per_node: int) -> int:
    return max(1, math.ceil(n_tasks / ranks_per_node))


def place(n_tasks: int, ranks_per_node: int, cores_per_node: int, rng: np.random.Generator) -> Placement:
    """A random allocation: nodes from the cluster, block or cyclic rank order, distinct random cores."""
    if ranks_per_node < 1 or ranks_per_node > cores_per_node:
        raise BadInputError(f"ranks per node must be between 1 and the node's {cores_per_node} cores")
    n_nodes = node_count(n_tasks, ranks_per_node)
    pool = _RACKS * _ROWS * _BLADES
    picked = np.sort(rng.choice(pool, size=min(n_nodes, pool), replace=False))
    names = tuple(
        f"gs{p // (_ROWS * _BLADES) + 1:02d}r{p // _BLADES % _ROWS + 1}b{p % _BLADES + 1:02d}" for p in picked
    )
    tasks = np.arange(n_tasks)
    cyclic = n_nodes > 1 and rng.random() < 0.5
    node = tasks % n_nodes if cyclic else np.minimum(tasks // ranks_per_node, n_nodes - 1)
    cpu = np.empty(n_tasks, dtype=np.int64)
    for n in range(n_nodes):
        members = np.flatnonzero(node == n)
        cores = np.sort(rng.choice(cores_per_node, size=members.size, replace=False))
        cpu[members] = n * cores_per_node + cores + 1
    return Placement(names, node.astype(np.int64), cpu, cores_per_node)


def run_clock(nominal_hz: float, jitter: float, rng: np.random.Generator) -> float:
    """The run's core clock (Hz): the nominal one with a small turbo/thermal jitter."""
    return float(nominal_hz * (1.0 + jitter * rng.standard_normal()))
