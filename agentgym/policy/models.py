"""Tiny local models: the one helper that tests, benchmarks and the quickstart share.

No model hub is needed: `build_tiny_model(dir)` trains a small byte-level BPE
tokenizer on a built-in corpus, gives it a ChatML chat template (with tools,
Hermes-style ``<tool_call>`` blocks), builds a randomly initialised Qwen2-style
causal LM from a config, and saves both with `save_pretrained`. `load_model`
then loads *any* model the same way a hub model loads (`from_pretrained` on a
local directory or a hub name), so the hub path is exercised by every test.

    from agentgym.policy.models import tiny_model_dir, load_model
    model, tokenizer = load_model(tiny_model_dir())   # cached under ~/.cache/agentgym

Requires the `train` extra (torch, transformers); it lives with the policy backends, which load these
models, and is imported from its module only (never by `import agentgym`).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentgym.cache import default_cache_dir
from agentgym.errors import require

CHATML_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "You may call these tools. Reply with <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.\n"
    "<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools><|im_end|>\n"
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if not (loop.first and message.role == 'system') %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]

_CORPUS_WORDS = (
    "up down left right north south east west move wall goal maze reach open moves you enter bump into "
    "the a an of to in on at is are was were be with for from by and or not no yes this that it "
    "select from where group by order limit join on as count sum avg min max distinct insert update delete "
    "table column row rows value values null true false error hint reply call tool tools arguments name "
    "answer question result results submit query database file files run command exit code output "
    "system user assistant observation action reward turn step episode task solved failed "
    "0 1 2 3 4 5 6 7 8 9 10 100 # . A G ( ) [ ] { } , ; : ' \" = < > + - * / _ \n"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """Size of the tiny model; every field feeds the cache key."""

    vocab_size: int = 512  #: BPE vocabulary size (before special tokens)
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    max_positions: int = 4096
    seed: int = 0

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


def build_tokenizer(vocab_size: int = 512) -> Any:
    """A byte-level BPE tokenizer (any Unicode text round-trips) with a ChatML template."""
    tokenizers = require("tokenizers", extra="train", what="building the tiny tokenizer")
    transformers = require("transformers", extra="train", what="building the tiny tokenizer")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab_size + len(SPECIAL_TOKENS), special_tokens=SPECIAL_TOKENS,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    lines = [_CORPUS_WORDS] * 20 + [" ".join(_CORPUS_WORDS.split()[i::7]) for i in range(7)]
    tok.train_from_iterator(lines, trainer=trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_tiny_model(path: str | os.PathLike[str], spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """Build and save a random tiny Qwen2-style model and its tokenizer into `path`."""
    torch = require("torch", extra="train", what="building the tiny model")
    transformers = require("transformers", extra="train", what="building the tiny model")
    path = Path(path)
    tokenizer = build_tokenizer(spec.vocab_size)
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=spec.hidden_size, num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads, num_key_value_heads=spec.num_kv_heads,
        intermediate_size=spec.intermediate_size, max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None)
    torch.manual_seed(spec.seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / "agentgym_tiny.json").write_text(json.dumps(asdict(spec), indent=2))
    return path


def tiny_model_dir(spec: TinyModelSpec = TinyModelSpec(), cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The directory of the tiny model for `spec`, built on first use and cached.

    The directory is named for the installed transformers' major version too: what one major version saves,
    another may not load (a tokenizer saved by transformers 5 names a class that 4.x lacks), so a changed
    install builds its own copy instead of failing on the other's."""
    transformers = require("transformers", extra="train", what="building the tiny model")
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = root / f"tiny-qwen2-{spec.key()}-tf{transformers.__version__.split('.')[0]}"
    if not (path / "agentgym_tiny.json").exists():
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        build_tiny_model(tmp, spec)
        try:
            tmp.rename(path)
        except OSError:  # another process built it first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return path


def hub_kernel_kwargs(transformers: Any) -> dict[str, Any]:
    """`from_pretrained` keyword arguments that keep hub kernels off unless the user asks for them.

    From transformers 5, `from_pretrained` swaps layers (RoPE, RMSNorm, activations) for kernels that the
    `kernels` package (a dependency of transformers) downloads from the hub when the model is loaded on a GPU.
    Offline, that fails the load: on an H200 with `HF_HUB_OFFLINE=1`, "Version 2 of 'kernels-community/rotary'
    is not available in the local cache". Online, a run would execute code fetched at load time. A run's model
    is the one its config names, so they stay off; transformers' own switch, `USE_HUB_KERNELS=YES` (or any
    value), hands the choice back to transformers.
    """
    if "USE_HUB_KERNELS" in os.environ or int(transformers.__version__.split(".")[0]) < 5:
        return {}
    return {"use_kernels": False}


def load_model(name_or_path: str | os.PathLike[str], *, dtype: Any = None, device: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) from a local directory or a hub name, through `from_pretrained`."""
    transformers = require("transformers", extra="train", what="loading a model")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(name_or_path))
    kwargs: dict[str, Any] = hub_kernel_kwargs(transformers)
    if dtype is not None:
        kwargs["dtype"] = dtype
    model = transformers.AutoModelForCausalLM.from_pretrained(str(name_or_path), **kwargs)
    if device is not None:
        model.to(device)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def cache_keyword(model: Any) -> str:
    """The keyword a causal LM's forward takes a key/value cache by: `cache` (transformers 5.25 on; the old name
    warns and goes in 5.40) or `past_key_values` (earlier). Under a PEFT wrapper the base model decides."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def output_cache(outputs: Any) -> Any:
    """The key/value cache a forward with `use_cache=True` handed back (`cache`, or `past_key_values` before
    transformers 5.25), None if it kept none."""
    cache = getattr(outputs, "cache", None)
    return cache if cache is not None else getattr(outputs, "past_key_values", None)
