"""Network model: point-to-point transfer and collective costs from the machine profile and rank placement.

Inter-node messages pay the profile's latency and link bandwidth; intra-node ones a shared-memory latency and
bandwidth. Collectives use textbook tree / pairwise-exchange costs. Units: ns, bytes, bytes/ns (= GB/s).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from synthtrace.tracelib.domain.machine import Machine

INTRA_LATENCY_NS = 300.0
INTRA_BW_FACTOR = 0.8  # intra-node copy bandwidth relative to one network link


@dataclass(frozen=True)
class Network:
    """Costs for one run: ``node`` maps task index (0-based) to node index (its placement)."""

    node: np.ndarray
    latency_ns: float  # inter-node latency
    bw: float  # inter-node link bandwidth, bytes/ns
    call_ns: float = 600.0  # software overhead of an MPI call
    test_ns: float = 250.0  # one MPI_Test/Iprobe that finds nothing

    @classmethod
    def from_machine(cls, machine: Machine, node: np.ndarray, slowdown: float = 1.0) -> Network:
        """The machine's network, ``slowdown`` times slower (latency x s, bandwidth / s)."""
        return cls(node=np.asarray(node), latency_ns=machine.network_latency_us * 1e3 * slowdown,
                   bw=machine.link_bw() * 1e-9 / slowdown)

    @property
    def n_nodes(self) -> int:
        return int(self.node.max()) + 1 if self.node.size else 1

    def p2p(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray | float) -> np.ndarray:
        """Transfer time (ns) of messages from task index ``src`` to ``dst`` (arrays broadcast)."""
        same = self.node[src] == self.node[dst]
        lat = np.where(same, INTRA_LATENCY_NS, self.latency_ns)
        bw = np.where(same, INTRA_BW_FACTOR * self.bw, self.bw)
        return lat + np.asarray(nbytes, dtype=np.float64) / bw

    def _hop(self) -> tuple[float, float]:
        """(latency ns, bandwidth bytes/ns) of the slowest hop a collective crosses."""
        if self.n_nodes > 1:
            return self.latency_ns, self.bw
        return INTRA_LATENCY_NS, INTRA_BW_FACTOR * self.bw

    def allreduce(self, nbytes: float, p: int) -> float:
        """Recursive doubling: 2 log2(p) steps of latency + size / bandwidth (ns)."""
        lat, bw = self._hop()
        steps = max(1.0, np.ceil(np.log2(max(p, 2))))
        return self.call_ns + 2 * steps * (lat + nbytes / bw)

    def bcast(self, nbytes: float, p: int) -> float:
        lat, bw = self._hop()
        return self.call_ns + max(1.0, np.ceil(np.log2(max(p, 2)))) * (lat + nbytes / bw)

    def barrier(self, p: int) -> float:
        return self.allreduce(0.0, p)

    def alltoall(self, nbytes_per_peer: float, p: int) -> float:
        """Pairwise exchange: p - 1 steps of latency + block / bandwidth (ns)."""
        lat, bw = self._hop()
        return self.call_ns + (p - 1) * (lat + nbytes_per_peer / bw)
