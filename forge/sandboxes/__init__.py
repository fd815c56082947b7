"""Sandboxes, one module per backend: ``local`` (:mod:`~forge.sandboxes.local`, bubblewrap),
``docker`` (:mod:`~forge.sandboxes.docker`) and ``kubernetes``
(:mod:`~forge.sandboxes.kubernetes`), behind :class:`forge.sandboxes.base.Sandbox`. A backend by
name, the run's isolation check and the reconcile pass are :mod:`forge.sandboxes.registry`."""
