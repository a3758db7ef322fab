"""Progress bars: a step that runs longer than the delay shows its bar while it runs, not only once it ends; a
short command prints none; ``detect`` reports its steps."""
from __future__ import annotations

import threading

from synthtrace.pipelines.cli_base import StepProgress


def test_bar_appears_during_a_long_first_step():
    """No step has ended yet (the import of the models, a merge), and the bar is already there."""
    shown = threading.Event()
    with StepProgress(2, "long", delay_s=0.01) as step:
        for _ in range(1000):  # the bar appears by a timer; wait for it without asserting any duration
            if step.bar is not None:
                shown.set()
                break
            shown.wait(0.01)
        assert shown.is_set() and step.bar.tasks[0].completed == 0
        step("one")
        assert step.bar.tasks[0].completed == 1 and step.bar.tasks[0].description == "long: one"


def test_detection_tells_each_of_its_steps(tmp_path):
    from synthtrace.pipelines.jobs import DETECTION_STEPS, detection
    from synthtrace.warehouse.layout import Warehouse
    from testing.model_campaigns import regression_campaign

    regression_campaign(tmp_path / "wh", n_apps=1, n_nights=12, n_kernels=3, n_iters=3, first_night=7, seed=1)
    told: list[str] = []
    found = detection(Warehouse(tmp_path / "wh"), on_step=told.append)
    assert told == list(DETECTION_STEPS) and found.apps == ["app000"]


def test_merge_tells_each_of_its_steps_with_their_total(tmp_path):
    """Reading the runs, aligning each other run, merging each counter, writing: one call each, every call
    knowing the total, so that `synthtrace merge` shows a bar that ends where the merge ends."""
    from synthtrace.warehouse.ingest import ingest_trace
    from synthtrace.warehouse.layout import Warehouse
    from synthtrace.pipelines.jobs import merge_experiment
    from testing.traces import LULESH_A, LULESH_B

    wh = Warehouse(tmp_path / "wh")
    for prv in (LULESH_A, LULESH_B):
        ingest_trace(wh, prv, experiment="lulesh")
    told: list[tuple[str, int]] = []
    result = merge_experiment(wh.experiment("lulesh"), on_step=lambda what, total: told.append((what, total)))
    counters = result.quality.get_column("counter").to_list()
    assert told[1][0].startswith("aligned ")
    assert [what for what, _ in told] == ["read 2 runs", told[1][0], *(f"merged {c}" for c in counters), "written"]
    assert {total for _, total in told} == {len(told)}


def test_bar_takes_a_total_learnt_on_the_way():
    with StepProgress(1, "merge", delay_s=0.0) as step:
        step("read", 3)
        step("aligned", 3)
        assert step.bar.tasks[0].total == 3 and step.bar.tasks[0].completed == 2
