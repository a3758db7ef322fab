"""Paraver (Extrae) traces: ``.prv`` records with ``.pcf`` names and ``.row`` resource labels."""
from synthtrace.tracelib.formats.paraver.header import ParaverHeader, parse_header
from synthtrace.tracelib.formats.paraver.pcf import PcfCatalog, read_pcf
from synthtrace.tracelib.formats.paraver.row import RowNames, read_row

__all__ = ["ParaverHeader", "parse_header", "PcfCatalog", "read_pcf", "RowNames", "read_row"]
