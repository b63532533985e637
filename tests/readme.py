"""The commands the README shows, read from the README itself: what its tests type.

A command is *shown* when it is a line of a ``sh`` block (its ``# comment`` dropped) or an
inline code span that starts with a command word. A newcomer types them in a fresh shell
at the repository's root, with nothing activated: so each must be a make target or spell
out the checkout's virtualenv (``.venv/bin/...``), after any ``VAR=value`` assignments.
"""

from __future__ import annotations

import re

#: the first words that make an inline code span a command to type
COMMAND_WORDS = frozenset({"make", "python", "python3", "onceonly", "pytest", "pip", "mkdocs"})
#: what a fresh shell at the repository's root runs without activating anything
TYPEABLE = re.compile(r"make(\s|$)|\.venv/bin/\S")
_ASSIGNMENT = re.compile(r"[A-Z_][A-Z0-9_]*=\S*\s+")
_INLINE = re.compile(r"`([^`\n]+)`")


def section(markdown: str, heading: str) -> str:
    """The text under ``## heading``, up to the next ``## ``; ValueError if it is not there."""
    found = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", markdown, re.M | re.S)
    if found is None:
        raise ValueError(f"no '## {heading}' section: the README's tests read it")
    return found.group(1)


def blocks(markdown: str) -> tuple[list[tuple[str, str]], str]:
    """The fenced code blocks, each as (language, text), and the prose around them."""
    found: list[tuple[str, str]] = []
    prose: list[str] = []
    language: str | None = None  #: None: outside a block
    body: list[str] = []
    for line in markdown.splitlines():
        if not line.startswith("```"):
            (prose if language is None else body).append(line)
        elif language is None:
            language, body = line[3:].strip(), []
        else:
            found.append((language, "\n".join(body)))
            language = None
    return found, "\n".join(prose)


def sh_commands(markdown: str) -> list[str]:
    """Each command line of the ``sh`` blocks, in order, without its ``# comment``."""
    lines = (
        line for lang, text in blocks(markdown)[0] if lang == "sh" for line in text.split("\n")
    )
    return [cmd for line in lines if (cmd := line.split(" #", 1)[0].strip())]


def plain_blocks(markdown: str) -> list[str]:
    """The blocks with no language: console output, as the README shows it."""
    return [text for lang, text in blocks(markdown)[0] if not lang]


def inline_commands(markdown: str) -> list[str]:
    """The inline code spans outside code blocks that run a command word with arguments
    (after any ``VAR=value``): `onceonly trace` is a command, `onceonly` the package."""
    prose = blocks(markdown)[1]
    return [
        span
        for span in _INLINE.findall(prose)
        if first_word(span) in COMMAND_WORDS and len(_unassigned(span).split()) > 1
    ]


def _unassigned(command: str) -> str:
    """``command`` without its leading ``VAR=value`` assignments."""
    bare = command.strip()
    while (assignment := _ASSIGNMENT.match(bare)) is not None:
        bare = bare[assignment.end() :]
    return bare


def first_word(command: str) -> str:
    """The program a command runs: its first word after any ``VAR=value`` assignments."""
    words = _unassigned(command).split()
    return words[0] if words else ""


def typeable(command: str) -> bool:
    """Whether a fresh shell at the repository's root runs ``command`` as written: a make
    target or the virtualenv's own program, after any ``VAR=value`` assignments."""
    return TYPEABLE.match(_unassigned(command)) is not None


def shown_commands(markdown: str) -> list[str]:
    """Every command the page shows: its ``sh`` blocks' lines and its inline commands."""
    return sh_commands(markdown) + inline_commands(markdown)
