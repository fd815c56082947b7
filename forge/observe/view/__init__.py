"""``forge view RUN_DIR``: a local web application over a run, live while it runs.

Pages: the run (reward, pass rate, loss, entropy, KL, staleness, throughput per step as charts;
episodes by policy version), a policy version (its groups with rewards and advantages,
zero-variance groups flagged; dropped groups and failed attempts with their reasons), the
episodes (paged), an episode (its record, the conversation as the harness sent it, the tokens
of each training segment as trained or not, coloured by the engine's log-probability, the
services it called) and a comparison (one task's episodes at two policy versions side by side).
It reads the run through an index (:mod:`forge.observe.view.index`) and never loads every
episode; :mod:`forge.observe.view.app` is the application.
"""
