"""The processes of a chaos run: one supervised process, its output in a log file."""

from __future__ import annotations

from pathlib import Path

from chaos.common import ChaosError
from testkit.processes import Supervised

# --------------------------------------------------------------------------- processes


class Proc(Supervised):
    """One real process in its own session, output appended to a log file; one that does
    not become ready is a :class:`ChaosError`."""

    error = ChaosError

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        super().__init__(name, argv, env, log_path, append=True)

    @property
    def pid(self) -> int | None:  # type: ignore[override]
        return self.process.pid if self.process is not None else None
