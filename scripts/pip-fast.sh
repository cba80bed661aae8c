# Sourced by venv.sh and vllm-venv.sh: `fast_install VENV ARGS...` installs packages into VENV with uv when
# it can (uv resolves and installs the same versions as pip, in seconds instead of minutes), else with pip.
#
# uv is installed into the venv itself with pip (a single wheel); AGENTGYM_NO_UV=1, or a uv that cannot be
# installed (no package index), falls back to pip. torch is never installed through uv: uv ignores pip's
# --find-links configuration, and the CPU build on this machine's disk is found only by pip.
fast_install() {
    local venv="$1"; shift
    if [[ "${AGENTGYM_NO_UV:-}" != 1 ]] && { [[ -x "$venv/bin/uv" ]] ||
            "$venv/bin/python" -m pip install -q --disable-pip-version-check uv >/dev/null 2>&1; }; then
        "$venv/bin/uv" pip install -q --python "$venv/bin/python" "$@"
    else
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@"
    fi
}
