"""Orchestration: the command line and the Prefect flows. The only layer that imports Prefect."""
