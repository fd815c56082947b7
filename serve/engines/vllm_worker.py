"""A vLLM worker extension (``worker_extension_cls``): new weights into a running vLLM.

vLLM mixes this class into each of its workers, and ``AsyncLLM.collective_rpc(name, ...)`` calls
its methods there. Weights travel as safetensors bytes (what vLLM's RPC carries unchanged), or by
the trainer's broadcast to a process group the workers join (:mod:`serve.collective`), and
enter through vLLM's own layer-wise reload, ``model_runner.reload_weights``, which restores the
layers a backend repacked after loading (the CPU backend does) and reruns its post-load
processing. Imported by vLLM's worker processes only, in the vLLM environment.
"""

from __future__ import annotations

from typing import Any


class WeightLoader:
    model_runner: Any  # set by vLLM's worker
    rank: int  # the worker's rank among vLLM's workers
    _forge_receiver: Any = None

    def load_weights_from_bytes(self, blob: bytes) -> int:
        """Load a safetensors blob of Hugging Face-named tensors; returns how many."""
        from safetensors.torch import load

        weights = load(blob)
        self.model_runner.reload_weights(weights_iterator=list(weights.items()))
        return len(weights)

    def receive_broadcast(self, message: dict[str, Any], base_rank: int) -> int:
        """Receive the trainer's broadcast as rank ``base_rank + self.rank`` (a process group of
        its own, :mod:`serve.collective`) and load it; returns how many tensors."""
        from serve.collective import Receiver

        if self._forge_receiver is None:
            self._forge_receiver = Receiver()
        weights = self._forge_receiver.receive(message, base_rank + int(self.rank))
        self.model_runner.reload_weights(weights_iterator=list(weights.items()))
        return len(weights)
