"""Looking at runs: the analyses (``forge analyze``, GUI and service use, harness fidelity), the
run's metrics and loggers, the live progress display, plots, exports (ATIF), screenshots with
the model's actions drawn on them, and the web viewer (:mod:`forge.observe.view`)."""
