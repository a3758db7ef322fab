"""The five communication patterns of the simulated applications."""
from synthtrace.simulator.patterns.base import AppParams, Pattern
from synthtrace.simulator.patterns.cg import CG
from synthtrace.simulator.patterns.halo import Halo
from synthtrace.simulator.patterns.master_worker import MasterWorker
from synthtrace.simulator.patterns.transpose import Transpose
from synthtrace.simulator.patterns.wavefront import Wavefront

PATTERNS: dict[str, type[Pattern]] = {p.name: p for p in (Halo, CG, MasterWorker, Wavefront, Transpose)}

__all__ = ["AppParams", "Pattern", "PATTERNS", "Halo", "CG", "MasterWorker", "Wavefront", "Transpose"]
