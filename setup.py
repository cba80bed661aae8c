"""Package layout: the folders envs/, trainer/ and sandboxes/ install under the agentgym namespace.

The repository keeps them as top-level folders so the data flow (envs -> collector -> data manager ->
trainer) reads from the tree, but a distribution must not take generic top-level import names such
as `envs` or `trainer`, which other installed projects also use. Everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

MAPPED = {"agentgym.envs": "envs", "agentgym.trainer": "trainer", "agentgym.sandboxes": "sandboxes"}

packages = find_packages(include=["agentgym", "agentgym.*"])
for name, folder in MAPPED.items():
    packages += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir=MAPPED)
