"""Harness adapters, one module per harness, behind :class:`forge.harnesses.base.Harness`; by
name in :mod:`forge.harnesses.registry` (``get_harness("react", temperature=1.0)``)."""
