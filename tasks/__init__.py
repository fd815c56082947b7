"""Task suites as data (``tasks/data``), their schema (:mod:`tasks.schema`) and loaders
(:mod:`tasks.loader`)."""
