"""The PyTorch side of agentgym: losses, packing, the training loop, checkpoints, weight sync.

Importing `trainer` needs the `train` extra (torch, transformers, peft).
"""
