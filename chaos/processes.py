"""The processes of a chaos run: one supervised process, its output in a log file."""

from __future__ import annotations

from pathlib import Path

from testkit.processes import Supervised

# --------------------------------------------------------------------------- processes


class Proc(Supervised):
    """One real process in its own session, output appended to a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        super().__init__(name, argv, env, log_path, append=True)

    def start(self) -> Proc:
        super().start()
        return self

    @property
    def pid(self) -> int | None:  # type: ignore[override]
        return self.process.pid if self.process is not None else None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 25) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])
