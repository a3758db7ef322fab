"""Small Paraver traces in the forms that Extrae's mpi2prv and Paraver's own tools write, each with the figures a
reader must find in it.

One resource model (2 nodes of 2 cpus; appl 1: task 1 with 2 threads and task 2, appl 2: one task) and one
timeline (each thread: three Running bursts, each ended by an MPI call that carries the burst's instruction count,
and one message from task 1 to task 2 of appl 1 per iteration) are written out in many forms: header variants
(time unit, resource model, application separators, communicator lines), record forms (many type:value pairs, global
operation records, trailing blanks, counter values Extrae prints from unsigned 64 bits), ``.pcf``/``.row`` variants
and file forms (gzip, names with dots and spaces). The expected figures (:attr:`Variant.bursts`) come from the
timeline, never from a reader. The facts each form follows are cited from paraver-kernel
(``utils/traceparser/traceheader.h``, ``processmodel.cpp``, ``resourcemodel.cpp``, ``tracebodyio_v1.*``,
``rowfileparser.cpp``) and Extrae (``src/merger/paraver/paraver_generator.c``).
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass, field, replace
from pathlib import Path

INSTR = 42000050  # PAPI_TOT_INS
CYC = 42000059  # PAPI_TOT_CYC
MPI_P2P = 50000001
MPI_SEND, MPI_RECV = 1, 2  # Extrae's MPI call ids
#: (appl, task, thread, node) of every thread; cpu = its index + 1 (4 cpus on 2 nodes)
THREADS = ((1, 1, 1, 1), (1, 1, 2, 1), (1, 2, 1, 2), (2, 1, 1, 2))
ITERATIONS = 3
PERIOD = 1000  # trace time units per iteration
END = ITERATIONS * PERIOD + 100
U64 = 1 << 64


@dataclass(frozen=True)
class Burst:
    """A Running burst as the reader must give it: thread, start/end in ns, instructions and cycles."""

    appl: int
    task: int
    thread: int
    start_ns: int
    end_ns: int
    instructions: int
    cycles: int


@dataclass(frozen=True)
class Form:
    """How the timeline is written (defaults: what Extrae 4/5 writes)."""

    unit: str = "_ns"  # "_ns", "_us", "_ms"; "" and any other suffix are microseconds to Paraver
    date: str = "21/01/2022 at 16:37"
    resources: str = "2(2,2)"  # Extrae: N(cpus,...); Paraver also reads "N" (N nodes of one cpu) and "0"
    appl_sep: str = ","  # Extrae separates applications with ',', Paraver's own writer with ':'
    communicators: tuple[str, ...] = ("c:1:1:2:1:2", "c:1:2:1:1", "c:2:1:1:1")
    count_communicators: bool = True  # Extrae writes ",N" even when N is 0
    trailing: str = ""  # appended to every record line
    line_end: str = "\n"
    extra_pairs: bool = False  # events carry other types too (Extrae's caller, user function, counters...)
    global_ops: bool = False  # type 4 records (MPI collectives), which Paraver skips
    comment_lines: bool = False  # '#' lines in the body (Paraver keeps them as trace metadata)
    signed_values: bool = False  # negative values written with a '-', as Paraver's own tools (cutter, filter) do
    header_blanks: bool = False  # blanks between the header's lists (Paraver reads its numbers with >>)
    header_nodes: tuple[int, int, int] = (1, 2, 2)  # node of appl 1 task 1, appl 1 task 2, appl 2 task 1
    cpus: tuple[int, int, int, int] = (1, 2, 3, 4)  # cpu of each thread's records (0: none)


@dataclass(frozen=True)
class Variant:
    """A trace to write: its name, form, companion files and the figures to read back."""

    name: str
    form: Form = field(default_factory=Form)
    pcf: str | None = None  # None: no .pcf beside the trace
    row: str | None = None  # None: no .row beside the trace
    stem: str = "trace"
    gzip: bool = False
    #: the burst whose cycles are written as a "negative" unsigned value: (thread index, iteration) -> value read
    overrides: dict[tuple[int, int], int] = field(default_factory=dict)

    @property
    def ns_per_unit(self) -> int:
        return {"_ns": 1, "_ms": 1_000_000}.get(self.form.unit, 1_000)

    @property
    def bursts(self) -> list[Burst]:
        """Every Running burst of the timeline, in ns, with its counters (negative where Extrae wrapped one)."""
        s = self.ns_per_unit
        out = []
        for k, (appl, task, thread, _) in enumerate(THREADS):
            for i in range(ITERATIONS):
                b, e = _running(k, i)
                cycles = self.overrides.get((k, i), _cycles(k, i))
                out.append(Burst(appl, task, thread, b * s, e * s, _instr(k, i), cycles))
        return out

    @property
    def messages(self) -> list[tuple[int, int]]:
        """(send, receive) logical times in ns of the messages from appl 1 task 1 to task 2."""
        s = self.ns_per_unit
        return [((_running(0, i)[1]) * s, (_running(2, i)[1] + 20) * s) for i in range(ITERATIONS)]


def _running(k: int, i: int) -> tuple[int, int]:
    """Begin and end (trace units) of thread ``k``'s Running burst ``i``."""
    b = i * PERIOD + 10 * k
    return b, b + 600 + 7 * k + 13 * i


def _instr(k: int, i: int) -> int:
    return 1_000_003 * (k + 1) + 77_777 * i


def _cycles(k: int, i: int) -> int:
    return 2_000_029 * (k + 1) + 55_555 * i


def _records(form: Form, overrides: dict[tuple[int, int], int]) -> list[tuple[int, str]]:
    """(time, line) of every record, in time order."""
    recs: list[tuple[int, str]] = []
    for k, (appl, task, thread, _) in enumerate(THREADS):
        cpu = form.cpus[k]
        where = f"{cpu}:{appl}:{task}:{thread}"
        for i in range(ITERATIONS):
            b, e = _running(k, i)
            nxt = (i + 1) * PERIOD + 10 * k if i + 1 < ITERATIONS else END
            call = MPI_SEND if k == 0 else MPI_RECV
            cycles = overrides.get((k, i), _cycles(k, i))
            cyc_text = str(cycles if form.signed_values else cycles % U64)  # Extrae's %lu wraps a negative delta
            pairs = [f"{INSTR}:{_instr(k, i)}", f"{CYC}:{cyc_text}", f"{MPI_P2P}:{call}"]
            if form.extra_pairs:
                pairs = ["40000018:1", "70000001:3", *pairs, "80000001:2", "60000019:3055463246813534"]
            recs.append((b, f"1:{where}:{b}:{e}:1"))
            recs.append((e, f"2:{where}:{e}:" + ":".join(pairs)))
            recs.append((e, f"1:{where}:{e}:{e + 50}:3"))
            recs.append((e + 50, f"2:{where}:{e + 50}:{MPI_P2P}:0"))
            recs.append((e + 50, f"1:{where}:{e + 50}:{nxt}:{2 if nxt == END else 0}"))
            if form.global_ops:
                recs.append((e + 50, f"4:{cpu}:{appl}:{task}:{thread}:{e + 50}:1:{8 * k}:{8 * k}:10:0"))
        if form.comment_lines:
            recs.append((0, "# a comment Paraver keeps as trace metadata"))
    for i in range(ITERATIONS):
        s_end, r_end = _running(0, i)[1], _running(2, i)[1]
        s_cpu, r_cpu = form.cpus[0], form.cpus[2]
        recs.append((s_end, f"3:{s_cpu}:1:1:1:{s_end}:{s_end + 5}:{r_cpu}:1:2:1:{r_end + 20}:{r_end + 30}:"
                            f"4096:{7 + i}"))
    recs.sort(key=lambda r: r[0])
    return recs


def header(form: Form) -> str:
    """The header line (without its line end) and the communicator lines after it."""
    appl1 = f"2(2:{form.header_nodes[0]},1:{form.header_nodes[1]})"
    appl2 = f"1(1:{form.header_nodes[2]})"
    sep = form.appl_sep + (" " if form.header_blanks else "")
    text = f"#Paraver ({form.date}):{END}{form.unit}:{form.resources}:2:{appl1}{sep}{appl2}"
    if form.count_communicators:
        text += f",{len(form.communicators)}"
    return "\n".join([text, *form.communicators])


def prv_text(variant: Variant) -> str:
    """The whole ``.prv`` file of ``variant``."""
    form = variant.form
    lines = [*header(form).split("\n"), *(line for _, line in _records(form, variant.overrides))]
    return "".join(line + form.trailing + form.line_end for line in lines)


def write(variant: Variant, folder: Path) -> Path:
    """Write the variant's ``.prv`` (or ``.prv.gz``) and companions into ``folder``; returns the trace's path."""
    folder.mkdir(parents=True, exist_ok=True)
    prv = folder / f"{variant.stem}.prv"
    data = prv_text(variant).encode()
    if variant.gzip:
        prv = prv.with_name(prv.name + ".gz")
        prv.write_bytes(gzip.compress(data))
    else:
        prv.write_bytes(data)
    for suffix, text in ((".pcf", variant.pcf), (".row", variant.row)):
        if text is not None:
            (folder / f"{variant.stem}{suffix}").write_text(text)
    return prv


PCF_FULL = """DEFAULT_OPTIONS

LEVEL               THREAD
UNITS               NANOSEC
LOOK_BACK           100
SPEED               1
FLAG_ICONS          ENABLED
NUM_OF_STATE_COLORS 1000
YMAX_SCALE          37


DEFAULT_SEMANTIC

THREAD_FUNC          State As Is


STATES
0    Idle
1    Running
2    Not created
3    Waiting a message


STATES_COLOR
0    {117,195,255}
1    {0,0,255}
2    {255,255,255}
3    {255,0,0}


# counters: two types in one block, with a precision line
EVENT_TYPE
7  42000050 PAPI_TOT_INS [Instr completed]
7  42000059 PAPI_TOT_CYC [Total cycles]
PRECISION 0

EVENT_TYPE
9    50000001    MPI Point-to-point
VALUES
0   Outside MPI
1   MPI_Send
2   MPI_Recv


EVENT_TYPE
0    40000018    Tracing mode:
VALUES
1      Detailed
2      CPU Bursts


GRADIENT_COLOR
0    {0,255,2}
1    {0,244,13}


GRADIENT_NAMES
0    Gradient 0
1    Grad. 1/MPI Events
"""

ROW_EXTRAE = """LEVEL CPU SIZE 4
1.node-a
2.node-a
3.node-b
4.node-b

LEVEL NODE SIZE 2
node-a
node-b

LEVEL THREAD SIZE 4
THREAD 1.1.1
THREAD 1.1.2
THREAD 1.2.1
THREAD 2.1.1
"""

#: the .row levels in another order, with the process levels Paraver also reads and a comment
ROW_ALL_LEVELS = """# written by hand
LEVEL THREAD SIZE 4
THREAD 1.1.1
THREAD 1.1.2
THREAD 1.2.1
THREAD 2.1.1

LEVEL TASK SIZE 3
TASK 1.1
TASK 1.2
TASK 2.1

LEVEL APPL SIZE 2
lulesh
uncore

LEVEL WORKLOAD SIZE 1
run

LEVEL NODE SIZE 2
node-a
node-b
"""

#: a .row that does not fit the header (a trace cut to fewer threads keeps the original's names; Paraver only
#: looks names up and shows none where the .row has none)
ROW_MISFIT = """LEVEL CPU SIZE 8
1.node-a
2.node-a

LEVEL THREAD SIZE 6
THREAD 1.1.1
THREAD 1.1.2
"""

_BASE = Variant("extrae", pcf=PCF_FULL, row=ROW_EXTRAE)


def variants() -> dict[str, Variant]:
    """Every variant by name."""
    f = Form()
    vs = [
        _BASE,
        replace(_BASE, name="paraver_appl_separator", form=replace(f, appl_sep=":", communicators=(),
                                                                    count_communicators=False)),
        replace(_BASE, name="no_communicator_count", form=replace(f, communicators=(), count_communicators=False)),
        replace(_BASE, name="interc_lines", form=replace(f, communicators=(*f.communicators, "i:1:7:1:1:2:1"))),
        replace(_BASE, name="microseconds_us", form=replace(f, unit="_us")),
        replace(_BASE, name="microseconds_no_unit", form=replace(f, unit="")),
        replace(_BASE, name="milliseconds", form=replace(f, unit="_ms")),
        replace(_BASE, name="unit_paraver_does_not_know", form=replace(f, unit="_s")),
        replace(_BASE, name="two_digit_year", form=replace(f, date="21/01/22 at 16:37")),
        replace(_BASE, name="header_blanks", form=replace(f, header_blanks=True)),
        replace(_BASE, name="nodes_without_cpu_list", row=None, form=replace(f, resources="4", header_nodes=(1, 3, 4),
                                                                              cpus=(1, 1, 3, 4))),
        replace(_BASE, name="no_resources", row=None, form=replace(f, resources="0", cpus=(0, 0, 0, 0),
                                                                    header_nodes=(0, 0, 0))),
        replace(_BASE, name="no_resources_extrae", row=None, form=replace(f, resources="0()", cpus=(0, 0, 0, 0),
                                                                           header_nodes=(0, 0, 0))),
        replace(_BASE, name="many_pairs", form=replace(f, extra_pairs=True)),
        replace(_BASE, name="global_op_records", form=replace(f, global_ops=True)),
        replace(_BASE, name="comment_records", form=replace(f, comment_lines=True)),
        replace(_BASE, name="trailing_space", form=replace(f, trailing=" ")),
        replace(_BASE, name="trailing_spaces_crlf", form=replace(f, trailing="  ", line_end="\r\n")),
        replace(_BASE, name="counter_wrapped_u64", overrides={(2, 1): -5}),
        replace(_BASE, name="counter_negative_signed", overrides={(2, 1): -5}, form=replace(f, signed_values=True)),
        replace(_BASE, name="no_pcf", pcf=None),
        replace(_BASE, name="no_row", row=None),
        replace(_BASE, name="no_pcf_no_row", pcf=None, row=None),
        replace(_BASE, name="row_all_levels_any_order", row=ROW_ALL_LEVELS),
        replace(_BASE, name="row_misfit", row=ROW_MISFIT),
        replace(_BASE, name="gzip", gzip=True),
        replace(_BASE, name="dots_and_spaces", stem="my app.run 2.v1.2"),
        replace(_BASE, name="dots_and_spaces_gzip", stem="my app.run 2.v1.2", gzip=True),
    ]
    return {v.name: v for v in vs}


def write_many_tasks(folder: Path, n_tasks: int, tasks_per_node: int = 48) -> tuple[Path, dict[tuple[int, int, int],
                                                                                                 int]]:
    """A trace of ``n_tasks`` one-thread tasks over nodes of ``tasks_per_node`` cpus, as Extrae writes a large
    job's (a header line of about 4 bytes per task); each task runs twice, for a time of its own, with its
    instructions at the end of each burst. Returns the trace and each thread's Running time in ns."""
    folder.mkdir(parents=True, exist_ok=True)
    n_nodes = -(-n_tasks // tasks_per_node)
    cpus = ",".join(str(min(tasks_per_node, n_tasks - i * tasks_per_node)) for i in range(n_nodes))
    tasks = ",".join(f"1:{t // tasks_per_node + 1}" for t in range(n_tasks))
    lines = [f"#Paraver (01/06/2024 at 10:00):{END}_ns:{n_nodes}({cpus}):1:{n_tasks}({tasks}),0"]
    running = {}
    for t in range(n_tasks):
        w = 100 + t % 97
        where = f"{t + 1}:1:{t + 1}:1"
        lines += [f"1:{where}:0:{w}:1", f"2:{where}:{w}:{INSTR}:{1000 + t}", f"1:{where}:{w}:1000:3",
                  f"1:{where}:1000:{1000 + w}:1", f"2:{where}:{1000 + w}:{INSTR}:{2000 + t}",
                  f"1:{where}:{1000 + w}:{END}:3"]
        running[(1, t + 1, 1)] = 2 * w
    prv = folder / f"many_{n_tasks}.prv"
    prv.write_text("\n".join(lines) + "\n")
    return prv, running
