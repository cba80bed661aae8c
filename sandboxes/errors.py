"""The exceptions the sandbox layer raises for caller mistakes and missing infrastructure.

How a command ended is never an exception (see `ExecResult`); these are for
problems a caller has to fix: no engine, a missing image, a closed sandbox.
"""

from __future__ import annotations


class SandboxError(RuntimeError):
    """Base class of every sandbox-layer error."""


class BackendUnavailable(SandboxError):
    """The requested backend cannot run on this machine (no engine, no bwrap, no SDK)."""


class ImageNotFound(SandboxError):
    """The image to start does not exist in the local engine."""


class SandboxClosed(SandboxError):
    """The sandbox was closed (or has died) and cannot serve this call."""


class AgentError(SandboxError):
    """The in-sandbox agent rejected a request (bad path, unreadable file...)."""
