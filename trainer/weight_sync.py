"""Push the trainer's new weights into the rollout backend after each update.

- ``hf`` (same process): `InProcessSync` hands the backend a state dict of full
  weights (LoRA deltas merged in); the backend loads it between two generation
  batches under its own lock, drops its KV caches and bumps its version.
- ``openai`` / ``vllm`` (another process or engine): `SaveAndReloadSync`
  writes the merged model with ``save_pretrained`` into
  ``<run_dir>/weights/v<version>/`` (the previous ones are pruned) and calls
  ``backend.update_weights(path, version=...)``; the backend reloads from that
  directory (vLLM: its in-process engine reloads the weights; an OpenAI-
  compatible server: the backend calls the server's reload hook, and a server
  without one is restarted on the new directory by whoever runs it).

Either way the backend's `version` is the trainer's policy version, and every
token sampled afterwards carries it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Protocol

from trainer.model import is_lora, merged_state_dict


class WeightSync(Protocol):
    """Deliver `model`'s weights as policy `version`; returns the backend's new version."""

    def push(self, model: Any, version: int) -> int: ...


class InProcessSync:
    """For the hf backend: a state dict, in memory."""

    def __init__(self, backend: Any):
        self.backend = backend

    def push(self, model: Any, version: int) -> int:
        return self.backend.update_weights(merged_state_dict(model), version=version)


class SaveAndReloadSync:
    """For openai/vllm backends: save a loadable model directory, then ask the backend to reload it."""

    def __init__(self, backend: Any, directory: str | Path, tokenizer: Any = None, keep: int = 2):
        self.backend, self.directory, self.tokenizer, self.keep = backend, Path(directory), tokenizer, keep

    def push(self, model: Any, version: int) -> int:
        target = self.directory / f"v{version:06d}"
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        base = model.get_base_model() if is_lora(model) else model
        base.save_pretrained(tmp, state_dict=merged_state_dict(model))
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(tmp)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        new_version = self.backend.update_weights(str(target), version=version)
        for old in sorted(self.directory.glob("v*"))[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return new_version
