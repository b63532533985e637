"""bench._options: what `python -m bench.ingest_cpu --variant` names, and how it is run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench._options import Variant, ingest_argv, parse_variant


def test_a_name_alone_is_this_checkout_with_nothing_added() -> None:
    assert parse_variant("c") == Variant("c")


def test_a_directory_and_variables_follow_the_name() -> None:
    variant = parse_variant("main@/tmp/x,ONCEONLY_PRODUCE_LINGER_MS=10,X_RDK=a=b;c=d")
    assert variant.name == "main"
    assert variant.code == Path("/tmp/x").resolve()
    # the first "=" splits: a value may hold more of them
    assert variant.env == {"ONCEONLY_PRODUCE_LINGER_MS": "10", "X_RDK": "a=b;c=d"}


@pytest.mark.parametrize("spec", ["", "a b", "x@", "x,NOVALUE", "x,1A=2", "x,=3"])
def test_a_malformed_spec_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="variant"):
        parse_variant(spec)


def test_this_checkout_runs_as_a_module() -> None:
    assert ingest_argv("py", Variant("c")) == ["py", "-m", "onceonly", "ingest"]


def test_another_checkouts_packages_shadow_this_ones(tmp_path: Path) -> None:
    # a stand-in checkout whose `onceonly` package says where it is
    package = tmp_path / "onceonly"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(
        "import sys, onceonly; print(onceonly.__file__, sys.argv[1:])\n"
    )
    argv = ingest_argv(sys.executable, Variant("other", tmp_path))
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"{package / '__init__.py'} ['ingest']"
