"""Flags that were renamed to one name per idea (docs/architecture.md, Names): the old ones keep working.

`nmt` rewrites an old flag to its new name before the command parses its arguments, and says so in one
line on stderr; the old names appear in no --help and no completion. Each entry says why the new
name won: CHANGELOG.md lists them with the version that renamed them.
"""

from __future__ import annotations

from collections.abc import Callable

# {command: {old flag: new flag}}
RENAMED_FLAGS: dict[str, dict[str, str]] = {
    # `--precision` is what train called the same fp32/bf16/fp16 choice, and it covers int8, which is no dtype
    "translate": {"--dtype": "--precision", "--score-only": "--forced-decoding"},
    "serve": {"--dtype": "--precision"},
    # translate and serve say `--batch-tokens` for padded tokens per batch; prepare's `--max-tokens` is per sentence
    "train": {"--max-tokens": "--batch-tokens"},
}


def current_args(args: list[str], notice: Callable[[str], None]) -> list[str]:
    """`args` (nmt's, after the program name) with each renamed flag of its command in its new name;
    `notice(message)` hears of each one. Nothing after a bare `--` is touched."""
    command = next((a for a in args if not a.startswith("-")), None)
    renamed = RENAMED_FLAGS.get(command or "", {})
    if not renamed:
        return args
    out = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        flag, eq, value = arg.partition("=")
        if flag in renamed:
            notice(f"{flag} is now {renamed[flag]} (the old name still works, for now)")
            arg = renamed[flag] + eq + value
        out.append(arg)
    return out
