"""The five communication patterns of the simulated applications."""
from tracelib.simulator.patterns.base import AppParams, Pattern
from tracelib.simulator.patterns.cg import CG
from tracelib.simulator.patterns.halo import Halo
from tracelib.simulator.patterns.master_worker import MasterWorker
from tracelib.simulator.patterns.transpose import Transpose
from tracelib.simulator.patterns.wavefront import Wavefront

PATTERNS: dict[str, type[Pattern]] = {p.name: p for p in (Halo, CG, MasterWorker, Wavefront, Transpose)}

__all__ = ["AppParams", "Pattern", "PATTERNS", "Halo", "CG", "MasterWorker", "Wavefront", "Transpose"]
