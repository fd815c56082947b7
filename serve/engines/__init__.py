"""Engines behind the Policy deployment, one module per engine behind
:class:`serve.engines.base.Engine`; by name in :mod:`serve.engines.registry`."""
