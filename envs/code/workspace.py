"""The workspace's files: the visible test file written at reset, and the files read back at submit."""

from __future__ import annotations

import textwrap

from agentgym.envs.code.runner_source import doctest_example
from agentgym.envs.code.tasks import CodeTask
from agentgym.sandboxes import AgentError, Sandbox, SandboxClosed

MAX_SUBMITTED_FILES = 500
MAX_SUBMITTED_BYTES = 8 * 1024 * 1024
MAX_FILE_BYTES = 1024 * 1024

_HELPERS = '''\
"""The visible tests of this task. run_tests() runs them; so does `python3 test_visible.py`."""
import doctest
import traceback

from {module} import *  # noqa: F401,F403


''' + doctest_example("__agentgym_example__").replace("{", "{{").replace("}", "}}") + "\n"

_MAIN = '''

if __name__ == "__main__":
    failed = 0
    for name, test in [(n, f) for n, f in list(globals().items()) if n.startswith("test_")]:
        try:
            test()
            print(name, "PASSED")
        except Exception:
            failed += 1
            print(name, "FAILED")
            traceback.print_exc()
    raise SystemExit(1 if failed else 0)
'''


def visible_test_file(task: CodeTask) -> str:
    """test_visible.py: the task's visible tests as test functions, runnable on its own."""
    body = []
    for test in task.visible:
        setup = textwrap.indent(task.setup, "    ") + "\n" if task.setup else ""
        body.append(f"def test_{test.name.removeprefix('test_')}():\n{setup}"
                    f"{textwrap.indent(test.code, '    ')}\n")
    return _HELPERS.format(module=task.module) + "\n\n".join(body) + _MAIN


def collect_files(sandbox: Sandbox) -> dict[str, bytes]:
    """Every regular file under the workspace (bounded in count and size), as submitted."""
    listing = sandbox.exec(["find", ".", "-type", "f", "-size", f"-{MAX_FILE_BYTES // 1024 + 1}k",
                            "-not", "-path", "*/__pycache__/*", "-print0"], timeout=20)
    if listing.sandbox_died:
        raise SandboxClosed(listing.error or "the sandbox died while listing the workspace")
    files: dict[str, bytes] = {}
    total = 0
    for raw in sorted(listing.stdout.split("\0"))[: MAX_SUBMITTED_FILES + 1]:
        path = raw.removeprefix("./")
        if not path or "\ufffd" in path or len(files) >= MAX_SUBMITTED_FILES:
            continue
        try:
            data = sandbox.read_file(path)
        except (OSError, AgentError):
            continue  # gone or unreadable since the listing: not part of the submission
        if total + len(data) > MAX_SUBMITTED_BYTES:
            break
        files[path] = data
        total += len(data)
    return files
