"""alpha27 (note26 Open 5): above 16 tasks the machine-state check's chance of calling a campaign of no machine-state
difference ``suspect`` stays at its 1 %.

The statistic judged is each measure's largest |d - median| / robust sigma over the tasks (:func:`off_state`, the
expression ``state_of`` filters by); its threshold, Student's t at (n - 1) / 2 degrees of freedom above 16 tasks, sat
2-4 % under the statistic's null quantile from 20 to 128 tasks: 1.45 % of noise-only campaigns of 64 tasks and four
measures suspect (10^6 simulated, benchmarks/bench_state_noise.py). Campaigns here: four measures' per-task log
ratios of pure normal noise (a spread of 5 %, far above ``RATE_FLOOR``'s 8 % divided by the threshold), 40,000
campaigns judged at once by the merge's own expression over each campaign's tasks: the binomial spread of the count
is ~0.05 %, so the band [0.8 %, 1.2 %] tells 1.0 % from 1.3-1.5 %.
"""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from synthtrace.tracelib.merge.noise import off_state

CAMPAIGNS, MEASURES, SPREAD = 40_000, 4, 0.05


def _suspect_share(tasks: int, seed: int) -> float:
    """The share of ``CAMPAIGNS`` noise-only campaigns of ``tasks`` tasks x ``MEASURES`` measures in which some
    measure names a task (:func:`off_state` over each campaign's and measure's tasks)."""
    rng = np.random.default_rng(seed)
    groups = CAMPAIGNS * MEASURES
    frame = pl.DataFrame({"group": np.repeat(np.arange(groups, dtype=np.int32), tasks),
                          "dw": rng.normal(0.0, SPREAD, groups * tasks)})
    named = (frame.select(pl.col("group") // MEASURES,
                          off_state(pl.col("dw"), tasks, MEASURES).over("group").alias("off"))
             .group_by("group").agg(pl.col("off").any())
             .get_column("off").sum())
    return named / CAMPAIGNS


@pytest.mark.parametrize("tasks", [17, 24, 64])
def test_noise_only_campaigns_above_16_tasks_are_suspect_one_percent_of_the_time(tasks):
    """Failed first (t at (n - 1) / 2 degrees of freedom): 24 tasks 1.27 %, 64 tasks 1.50 % of these campaigns
    suspect; now 0.94 % and 1.06 %. 17 tasks (an odd count, review27 R10) failed first at 0.4 n + 1 degrees of
    freedom (1.25 %, the odd count's MAD being as uncertain as the even count's below it)."""
    share = _suspect_share(tasks, 2700 + tasks)
    assert 0.008 <= share <= 0.012, f"{share:.2%} of {CAMPAIGNS} noise-only campaigns of {tasks} tasks suspect"
