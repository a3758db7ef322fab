"""What every simulated application shares: parameters (size, injected regressions), call sites, start-up and
shut-down, and the :class:`Pattern` interface the five communication patterns implement."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from synthtrace.simulator.builder import CALL, NO_CALL, PROLOGUE, EPILOGUE, BlockBuilder
from synthtrace.simulator.kernels import kid

WORLD_COMM = 1  # id of MPI_COMM_WORLD in the c: lines (each rank's MPI_COMM_SELF follows: 2, 3, ...)

#: call sites every application has: (function, file, line)
COMMON_SITES: tuple[tuple[str, str, int], ...] = (
    ("main", "main.c", 21), ("main", "main.c", 23), ("main", "main.c", 24), ("setup", "main.c", 48),
    ("main", "main.c", 97), ("check_control", "control.c", 41),
)
SITE_INIT, SITE_RANK, SITE_SIZE, SITE_SETUP, SITE_FINALIZE, SITE_CONTROL = range(len(COMMON_SITES))


@dataclass(frozen=True)
class AppParams:
    """Size and behaviour changes of one application instance (regressions act through these).

    ``work``: kernel name -> instruction multiplier; ``imbalance``: (task index, factor) applied to the main
    kernel of one rank; ``msg_scale``: multiplies message sizes; ``scale``: the problem size (all work);
    ``coll_every``: patterns that reduce every iteration (halo) reduce only every k-th one (0: never).
    """

    n_tasks: int
    scale: float = 1.0
    work: dict[str, float] = field(default_factory=dict)
    msg_scale: float = 1.0
    imbalance: tuple[int, float] | None = None
    coll_every: int = 1

    def reduces(self, its: np.ndarray) -> np.ndarray:
        """Whether iterations ``its`` end with the world reduction (every ``coll_every``-th one, the last of each
        group of ``coll_every``)."""
        return (its % self.coll_every == self.coll_every - 1) if self.coll_every else np.zeros(its.shape, bool)

    def ins(self, kernel: str, base: np.ndarray | float, main: str | None = None) -> np.ndarray:
        """Instructions of ``kernel`` on a ``(B, P)`` grid: base x scale x regression factors."""
        x = np.asarray(base, dtype=np.float64) * self.scale * self.work.get(kernel, 1.0)
        if self.imbalance is not None and kernel == main:
            task, factor = self.imbalance
            x = np.array(np.broadcast_to(x, np.broadcast_shapes(x.shape, (1, self.n_tasks))))
            x[:, task % self.n_tasks] *= factor
        return x

    def msg(self, nbytes: float) -> int:
        return int(round(nbytes * self.msg_scale))


class Pattern:
    """One communication pattern. Subclasses set ``name``, ``main_kernel``, ``kernels`` (the application's own
    computation kernels: not MPI's poll loop, start-up or shut-down), ``sites`` and implement :meth:`block`.

    ``block(b, base)`` writes iterations ``b.it0 ..`` into the builder ``b``; ``base`` draws the logical
    program (work sizes, who is heavy) and is the same for every run of an experiment.
    """

    name: str = ""
    description: str = ""
    main_kernel: str = ""
    kernels: tuple[str, ...] = ()
    sites: tuple[tuple[str, str, int], ...] = ()
    message_bytes: int = 0  # the pattern's main message size (scaled by ``AppParams.msg_scale`` into ``self.m``)
    max_ranks: int = 4095  # the most ranks whose bursts the logical ids tell apart (builder.logical_id: 12-bit task)

    def __init__(self, params: AppParams, rng: np.random.Generator):
        self.params = params
        self.P = params.n_tasks
        self.m = params.msg(self.message_bytes)

    def site(self, index: int) -> int:
        """Global call-site id of this pattern's ``index``-th site."""
        return len(COMMON_SITES) + index

    def all_sites(self) -> list[tuple[str, str, int]]:
        return [*COMMON_SITES, *self.sites]

    def pairs_per_iteration(self) -> int:
        """About how many bursts all ranks produce per iteration (for sizing blocks)."""
        raise NotImplementedError

    def block(self, b: BlockBuilder, base: np.random.Generator) -> None:
        raise NotImplementedError


def jitter(base: np.random.Generator, shape: tuple[int, ...], sigma: float) -> np.ndarray:
    """Logical size variation between ranks and iterations (identical in every run): lognormal around 1."""
    return np.exp(sigma * base.standard_normal(shape))


def prologue(b: BlockBuilder, base: np.random.Generator, p: AppParams) -> None:
    """MPI_Init (everyone waits for the slowest), Comm_rank, Comm_size, set-up work, then a world Barrier."""
    start = b.first_starts
    w = b.work(kid("startup"), p.ins("startup", 2.0e7 * jitter(base, b.shape, 0.05)))
    exit = b.close(start + w.dur, 3.0e5)
    b.pair(w, start, call=CALL["MPI_Init"], exit=exit, slot=1, role=PROLOGUE, site=SITE_INIT)
    t = b.advance(exit)
    w = b.work(kid("startup"), 4000.0)
    t = b.pair(w, t, call=CALL["MPI_Comm_rank"], call_ns=300.0, slot=2, role=PROLOGUE, site=SITE_RANK)
    w = b.work(kid("startup"), 3000.0)
    t = b.pair(w, t, call=CALL["MPI_Comm_size"], call_ns=300.0, slot=3, role=PROLOGUE, site=SITE_SIZE)
    w = b.work(kid("startup"), p.ins("startup", 4.0e6 * jitter(base, b.shape, 0.05)))
    exit = b.close(t + w.dur, b.ctx.net.barrier(b.n_tasks), last=True)
    b.pair(w, t, call=CALL["MPI_Barrier"], exit=exit, slot=4, role=PROLOGUE, site=SITE_SETUP,
           coll=(0, 0, -1, WORLD_COMM), world=True)
    b.advance(exit)


def epilogue(b: BlockBuilder, base: np.random.Generator, p: AppParams) -> None:
    """MPI_Finalize (synchronising), then the last burst up to the application's end (no closing call)."""
    start = b.first_starts
    w = b.work(kid("finalize"), p.ins("finalize", 1.5e6 * jitter(base, b.shape, 0.05)))
    exit = b.close(start + w.dur, 1.0e5, last=True)
    b.pair(w, start, call=CALL["MPI_Finalize"], exit=exit, slot=1, role=EPILOGUE, site=SITE_FINALIZE)
    t = b.advance(exit)
    w = b.work(kid("finalize"), 3.0e5 * jitter(base, b.shape, 0.05))
    b.pair(w, t, call=NO_CALL, slot=2, role=EPILOGUE)
