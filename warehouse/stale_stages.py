"""Which nightly stages a commit makes stale, said once for the commit (warehouse) and the night (pipelines).

Kept free of imports: the command line's start-up imports it through ``pipelines.jobs``.
"""

#: the nightly stages a merge's commit makes stale (their files: ``experiment.ANALYSIS_FILES``)
MERGE_INVALIDATES: tuple[str, ...] = ("archetypes",)
