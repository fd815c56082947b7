"""Verifiers: turn the state a harness left behind (and its final answer) into a reward. One
module per family; :mod:`rewards.registry` builds them from a task's ``verifier`` spec, and
:mod:`rewards.runner` runs them away from where the agent ran."""
