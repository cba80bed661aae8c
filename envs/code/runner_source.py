"""The test runner that runs inside a sandbox (standard library only, Python >= 3.8).

It is sent as ``python3 -c SOURCE`` with the job on stdin, so nothing of it,
and none of the tests it is given, is ever written to the sandbox's disk.

Job (JSON on stdin)::

    {"suites": [{"id": "t1", "dir": "/work", "module": "solution", "setup": "",
                 "tests": [{"name": "test_1", "code": "assert f(1) == 2"}]}],
     "timeout_s": 5.0, "output_chars": 2000}

For every test it forks a child in a new session, points the child's stdout
and stderr at a pipe, imports the suite's module from ``dir`` (a file
``<module>.py``), runs the suite's ``setup`` and then the test's code in the
module's namespace, and reports back over a second pipe. The parent waits up
to ``timeout_s``, kills the child's whole process group afterwards, and prints
one JSON line per test on stdout as soon as it is known, so a runner that is
itself killed still leaves the results it had. Statuses: ``passed``,
``wrong_answer`` (AssertionError), ``crash`` (any other exception, a signal,
an exit before the test finished), ``timeout`` and ``syntax`` (the module does
not compile; then no test of the suite runs).
"""



def doctest_example(name: str) -> str:
    """Source of a function `name(source, want, globs)` that checks one doctest example (HumanEval's
    visible tests) the way doctest does; the runner and the workspace's test_visible.py both ship it."""
    return f'''def {name}(source, want, globs):
    test = doctest.DocTest([doctest.Example(source, want)], globs, "example", None, 0, None)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out = []
    runner.run(test, out=out.append, clear_globs=False)
    if runner.failures:
        raise AssertionError("".join(out).split("\\n", 2)[-1].strip())
'''


RUNNER = r'''
import doctest, json, os, select, signal, sys, time, traceback

''' + doctest_example("example") + r'''
def short_traceback(exc, files):
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in files]
    lines = traceback.format_list(frames) if frames else []
    lines += traceback.format_exception_only(type(exc), exc)
    return "Traceback (most recent call last):\n" + "".join(lines) if frames else "".join(lines)

def child(suite, test, result_w, out_w):
    os.setsid()
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    status, error = "passed", ""
    module_file = os.path.join(suite["dir"], suite["module"] + ".py") if suite.get("module") else None
    try:
        os.chdir(suite["dir"])
        sys.path.insert(0, suite["dir"])
        globs = {"__name__": "__test__", "__agentgym_example__": example}
        if module_file:
            import importlib
            module = importlib.import_module(suite["module"])
            globs.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
            globs.setdefault(suite["module"], module)  # a function named like the module wins (HumanEval/121)
        if suite.get("setup"):
            exec(compile(suite["setup"], "test_setup", "exec"), globs)
        exec(compile(test["code"], test["name"], "exec"), globs)
    except AssertionError as exc:
        status, error = "wrong_answer", short_traceback(exc, {test["name"], module_file, "test_setup"})
    except BaseException as exc:
        status, error = "crash", short_traceback(exc, {test["name"], module_file, "test_setup"})
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    os.write(result_w, json.dumps({"status": status, "error": error[-4000:]}).encode())
    os._exit(0)

def drain(caps, pid, deadline):
    """Read the child's pipes until it exits (grandchildren may keep them open) or the deadline passes."""
    got = {fd: bytearray() for fd in caps}
    open_fds, status = list(caps), None
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select(open_fds, [], [], min(left, 0.05) if status is None else 0)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.remove(fd)
            elif len(got[fd]) < caps[fd]:
                got[fd] += chunk[: caps[fd] - len(got[fd])]
        if status is not None and not ready:
            break
        if status is None:
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            status = wait_status if done else None
    return got, status

def run_one(suite, test, timeout_s, cap):
    result_r, result_w = os.pipe()
    out_r, out_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(result_r)
        os.close(out_r)
        try:
            child(suite, test, result_w, out_w)
        finally:
            os._exit(70)
    os.close(result_w)
    os.close(out_w)
    got, wait_status = drain({result_r: 65536, out_r: cap}, pid, start + timeout_s)
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if wait_status is None:
        _, wait_status = os.waitpid(pid, 0)
        timed_out = not got[result_r]
    else:
        timed_out = False
    os.close(result_r)
    os.close(out_r)
    output = got[out_r].decode("utf-8", "replace")
    record = {"suite": suite["id"], "name": test["name"], "output": output,
              "duration_s": round(time.monotonic() - start, 4)}
    if timed_out:
        record.update(status="timeout", error="the test ran past its timeout of %gs and was killed" % timeout_s)
        return record
    try:
        record.update(json.loads(got[result_r].decode()))
    except ValueError:
        how = ("was killed by signal %d" % os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status)
               else "exited with status %d" % os.WEXITSTATUS(wait_status))
        record.update(status="crash", error="the test process %s before the test finished" % how)
    return record

def compile_error(suite):
    if not suite.get("module"):
        return None
    path = os.path.join(suite["dir"], suite["module"] + ".py")
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        return "%s: %s" % (type(exc).__name__, exc)
    try:
        compile(source, path, "exec")
    except (SyntaxError, ValueError) as exc:
        return "".join(traceback.format_exception_only(type(exc), exc))
    return None

def main():
    sys.dont_write_bytecode = True
    sys.pycache_prefix = "/nonexistent/agentgym-no-pycache"  # never load a stale .pyc written by the model's runs
    job = json.loads(sys.stdin.read())
    for suite in job["suites"]:
        broken = compile_error(suite)
        for index, test in enumerate(suite["tests"]):
            if broken is not None:
                record = {"suite": suite["id"], "name": test["name"], "status": "syntax", "error": broken,
                          "output": "", "duration_s": 0.0}
            else:
                record = run_one(suite, test, float(job["timeout_s"]), int(job["output_chars"]))
            record["index"] = index
            sys.stdout.write(json.dumps(record) + "\n")
            sys.stdout.flush()

main()
'''
