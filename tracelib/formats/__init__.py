"""Trace formats: the reader interface (``source``), Paraver and OTF2 readers, the format-independent burst and MPI-call
assembly they share (``bursts``, ``call_store``), the Paraver writer and the exports other tools read. Format knowledge
lives here and nowhere else."""
