"""The by-path query family of benchmarks/bench_attack.py queries a warehouse that a writer keeps changing (its
``.staging`` made a symbolic link stopped the writer at its first commit since attack 6 F2, so the family's queries
read a warehouse nobody changed, and counted no violation)."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.real_traces, pytest.mark.slow]  # a real trace ingested, a writer forked


@pytest.mark.parametrize("by_path", [False, True], ids=["linked", "by_path"])
def test_the_query_families_writer_churns_until_the_last_query(tmp_path, by_path):
    from benchmarks.bench_attack import query_family
    from synthtrace.warehouse import snapshot

    links_folder = snapshot._links_folder
    out = query_family(tmp_path, 20, by_path, pause_s=0.05)
    assert out["queries"] == 20 and not out["violations"], out["violations"]
    assert snapshot._links_folder is links_folder  # the readers' patch is undone for whatever runs next
