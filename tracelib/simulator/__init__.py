"""Simulator of multi-run hardware-counter campaigns (placeholder docstring; see below)."""
