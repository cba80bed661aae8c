"""Code-v0: write, run, test and submit Python code in a sandbox (see `agentgym.envs.code.env`)."""
