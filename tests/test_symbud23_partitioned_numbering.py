"""symbud23 (ranks22's leftover): the partitioned merge reads the other runs' message counts in the reference's task
numbering once the rank correspondence renumbered them. Each group of tasks is aligned with its partners loaded,
"every task they exchange messages with, in any run" (tracelib/merge/partitioned.py): a renumbered run's partners
were keyed by its tasks' bare numbers (not the packed appl/task keys), so the tasks only it exchanged messages
with were never loaded beside a group. The campaign: the simulator's ``amr`` (neighbours redrawn every 10
iterations) whose run 1 numbers its ranks by a random permutation and whose reference traces rank 3 from iteration
12 on (so run 1 alone has rank 3's first neighbours)."""
from __future__ import annotations

import warnings
from dataclasses import replace

from polars.testing import assert_frame_equal

import synthtrace
import synthtrace.simulator.mechanisms as mech
from synthtrace.tracelib.merge import partitioned
from synthtrace.tracelib.merge.merge_runs import MergeOptions, merge_runs
from synthtrace.tracelib.merge.ranks import correspondence
from synthtrace.tracelib.thread_key import appl_base, task_key
from synthtrace.warehouse.layout import Warehouse
from synthtrace.warehouse.merged import StoredRun, merge_inputs


def test_a_renumbered_run_s_partners_are_loaded_and_the_merge_is_the_whole_one(tmp_path, monkeypatch):
    spec = replace(mech.campaign("amr", 0), renumber_run=1, late_trace=(0, 3, 12))
    for t in mech.simulate(tmp_path / "sim", spec).traces:
        synthtrace.ingest(str(tmp_path / "wh"), str(t), experiment="amr")
    wh = Warehouse(tmp_path / "wh")
    exp = wh.experiment("amr")
    sources = [StoredRun(wh, r, exp.run_names[r]) for r in exp.run_ids]
    grouped: list[dict[int, set[int]]] = []
    real_groups = partitioned.task_groups
    monkeypatch.setattr(partitioned, "task_groups",
                        lambda load, partners, budget: grouped.append(partners) or real_groups(load, partners, budget))
    per_task = sum(s.threads().get_column("bursts").sum() for s in sources) // spec.ranks
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = merge_runs(merge_inputs(exp), MergeOptions(), experiment="amr")
        part = partitioned.merge_partitioned(sources, tmp_path / "spill", MergeOptions(), "amr",
                                             budget=3 * per_task)
    ref = next(s for s in sources if s.run_id == whole.reference_run_id)
    other = next(s for s in sources if s is not ref)
    mapping = correspondence(ref.profile_rows(), ref.message_counts(), other.profile_rows(),
                             other.message_counts(), (ref.run_name, other.run_name)).mapping
    assert mapping  # run 1 is renumbered
    packed = {k: appl_base(k) + v for k, v in mapping.items()}
    # every pair of tasks exchanging messages in the other run, in the reference's numbering
    pairs = other.message_counts().select(task_key("appl", "sender"), task_key("appl", "receiver").alias("r"))
    want = {(packed.get(s, s), packed.get(r, r)) for s, r in pairs.iter_rows() if s != r}
    got = grouped[0]
    missing = [(a, b) for a, b in want if b not in got.get(a, set())]
    assert not missing, f"{len(missing)} of {len(want)} partner pairs of the renumbered run not loaded"
    assert_frame_equal(part.quality, whole.quality, check_exact=False, rel_tol=1e-9)
    assert_frame_equal(part.merged.collect(), whole.merged, check_exact=False, rel_tol=1e-9)
