"""The five communication patterns of the simulated applications."""
from synthtrace.tracelib.simulator.patterns.base import AppParams, Pattern
from synthtrace.tracelib.simulator.patterns.cg import CG
from synthtrace.tracelib.simulator.patterns.halo import Halo
from synthtrace.tracelib.simulator.patterns.master_worker import MasterWorker
from synthtrace.tracelib.simulator.patterns.transpose import Transpose
from synthtrace.tracelib.simulator.patterns.wavefront import Wavefront

PATTERNS: dict[str, type[Pattern]] = {p.name: p for p in (Halo, CG, MasterWorker, Wavefront, Transpose)}

__all__ = ["AppParams", "Pattern", "PATTERNS", "Halo", "CG", "MasterWorker", "Wavefront", "Transpose"]
