"""Simulator of multi-run hardware-counter campaigns of MPI applications, with ground truth (issue 3).

Five applications, one per communication pattern (:mod:`.patterns`): ``halo`` (halo-exchange stencil, Testall
polling), ``cg`` (CG-like solver, three Allreduces per iteration), ``master_worker`` (task farm, Iprobe polling and
Recv from MPI_ANY_SOURCE), ``wavefront`` (pipeline sweep: serialisation) and ``transpose`` (FFT-like Alltoall).
Their kernels (:mod:`.kernels`) cover the 13 archetypes of DESIGN §7; the counter model (:mod:`.counter_model`)
derives every counter consistently from a kernel and an instruction count; each run records the fixed counters
plus N programmable ones (:mod:`.pmu`); runs differ as real ones do (:mod:`.variation`); :mod:`.campaign` writes
nightly histories with injected regressions; :mod:`.variants` gives a pattern several applications whose kernels
behave differently (``--apps-per-pattern``: ``halo_1``, ``halo_2``, ...; inputs, compilers and data layouts change
miss rates, instruction mix and core efficiency). Traces are real Paraver files written with
:mod:`synthtrace.tracelib.formats.paraver.writer`, streamed block by block (:mod:`.engine`).

:mod:`.mechanisms` (issue 22) runs campaigns call by call instead (:mod:`.mpi_exec`, an event-driven MPI executor:
completion calls complete what has arrived, polls and ``MPI_ANY_SOURCE`` matches follow arrival times), for the
run-to-run mechanisms a merge must survive (completion grouping, heavy polling, an extra / missing / repeated
iteration, a checkpoint in one run, rotation-symmetric rings and tori, no or one call site, a dynamic
master-worker farm, 8-10 runs with one or two counters, slow nodes and network jitter, iteration-dependent
kernel rates), each with its truth per burst (``truth.parquet`` in the campaign's folder; see that module).

Output layout (``synthtrace simulate OUT_DIR``)::

    OUT_DIR/<experiment>/<app>.run<k>.prv|.pcf|.row        one experiment per app (experiment = app)
    OUT_DIR/<YYYY-MM-DD>/<app>_<YYYYMMDD>/<app>.run<k>.*     campaign mode (--nights): one experiment per app and night
    OUT_DIR/ground_truth/...                                 the tables below (Parquet)

Run 0 of every experiment is the reference run. Keys use the reader's numbering (appl, task, thread 1-based;
``burst_seq``/``call_seq`` from 0 per thread in time order), so the truth joins the ingested tables on
``(run_name, appl, task, thread, burst_seq)``; ``run_name`` is the trace's stem (``halo.run0``). Times in ns.

``ground_truth/bursts/<experiment>.parquet`` — one row per computation burst of every run:
    run_name, appl, task, thread, burst_seq; ``logical_id`` (Int64, the same for the same logical burst in every
    run: ``(iteration + 1) << 32 | task << 20 | slot << 8 | sub``; a burst whose id is absent from another run
    has no counterpart there; the first piece of a burst a progress write split, :mod:`.io_split`, has the
    negated id, the second piece the burst's own); iteration (-1 = start-up, ``iterations`` = shut-down), slot,
    sub (poll index);
    ``role`` (work | poll | housekeeping | prologue | epilogue: polls and housekeeping bursts differ in number
    between runs); kernel, ``intent`` (the archetype the kernel is built for); ``phase`` (number of world
    collectives before the burst on its task); ``os_noise`` (stretched by OS noise, counts unchanged);
    start_ns, end_ns, duration_ns, mpi_call, call_site (the call closing it, as the reader renders them);
    ``archetype`` (DESIGN §7 rules on this run's true counters, NULL without a labeller); then one Int64 column
    per modelled counter (``PAPI_TOT_INS`` ... ``CYCLE_ACTIVITY:STALLS_L3_MISS``): every counter's true value
    for the reference run, NULL for the other runs (their recorded counters are in their traces, equal to the
    truth; the others are what the merge must estimate) unless ``truth_counters="all"`` (``--truth-counters all``)
    keeps every run's.
``ground_truth/mpi_calls/<experiment>.parquet`` — one row per MPI call of every run: run_name, appl, task,
    thread, call_seq, logical_id (of the burst it closes), mpi_call, mpi_kind, start_ns, end_ns, duration_ns,
    bytes_sent, bytes_recv, peer, n_messages, comm, root, tag, call_site (as the reader reports them), phase,
    ``archetype`` (rules 10-11 where they apply, else NULL).
``ground_truth/phases/<experiment>.parquet`` — one row per (run, phase): the columns of
    :func:`synthtrace.tracelib.domain.metrics.phase_metrics` (load_balance, comm_efficiency, transfer_efficiency,
    serialization_efficiency, ...), ``archetype`` (load_imbalance | serialization | balanced), ``closed``
    (False for the tail after the last world collective), experiment.
``ground_truth/experiments.parquet`` — experiment, app, pattern, ranks, iterations, runs, seed,
    counters_per_run, night, started_at, machine, ranks_per_socket, dram_share_bytes_per_s, reference_run,
    scale, msg_scale, net_slowdown, work_factors, imbalance, changed_kernels (the injected changes in force),
    variant_kernels (the application's own kernels that differ from the base ones of :mod:`.kernels`; NULL for
    none).
``ground_truth/kernels.parquet`` — one row per (experiment, kernel its application runs): experiment, app, pattern,
    night, kernel, intent (of the base kernel: a variant may show another archetype), ``own`` (the application's
    code; False for MPI's and the runtime's kernels, never varied), ``variant`` (its parameters differ from the
    base kernel's), ``injected`` (changed by a regression in force), then the parameters as simulated: ld, sr, br,
    fp (per instruction), vec, fma (shares of FP), l1_mpki, l2_mpki, l3_mpki, l1i_mpki, itlb_mpki, dtlb_mpki
    (per 1000 instructions), br_misp (per branch), cpi_base (cycles per instruction), mlp, stream_eff.
``ground_truth/runs.parquet`` — experiment, run_name, run_index, is_reference, trace, trace_bytes, counters
    (recorded, list), freq_hz, node_names, cpu_of_task, node_of_task (placement), n_bursts, n_polls,
    n_housekeeping, n_os_noise.
``ground_truth/noise.parquet`` — experiment, counter, noise_class (instructions | cycles | misses), sigma
    (relative noise size per run).
``ground_truth/oracle.parquet`` — experiment, counter, run_name (every non-reference run), recorded (whether that
    run recorded the counter), min_duration_ns (10 µs: shorter reference bursts are left out), n_bursts (logical
    bursts matched with the reference), mean_abs_rel_error, rms_rel_error, log_ratio_std: the run-to-run
    difference for the same logical burst, which no merge can beat on average (compare a merge's error for a
    counter with the rows ``recorded = true``).
``ground_truth/regressions.parquet`` (campaign mode) — app, pattern, kind, size, night, date, experiment (the
    first night affected), target (kernel, ``messages``, ``network``, or a kernel ``on one rank``).
``ground_truth/machine.json`` — the machine profile used (:meth:`synthtrace.tracelib.domain.machine.Machine.as_dict`).
"""
from synthtrace.simulator.campaign import Injection, parse_injection, simulate_campaign
from synthtrace.simulator.engine import ExperimentResult, ExperimentSpec, Labeller, simulate_experiment
from synthtrace.simulator.patterns import PATTERNS
from synthtrace.simulator.truth import TruthStore
from synthtrace.simulator.variants import app_variants, variant_kernels
from synthtrace.simulator.variation import Variation

__all__ = ["ExperimentSpec", "ExperimentResult", "Labeller", "simulate_experiment", "simulate_campaign", "Injection",
           "parse_injection", "PATTERNS", "TruthStore", "Variation", "variant_kernels", "app_variants"]
