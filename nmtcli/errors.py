"""The one exception type for mistakes a user can make (bad paths, bad files, bad flags).

The CLI prints it as `nmt: error: <what happened> (<what to do>)` and exits non-zero without a
traceback. Anything else that escapes is a bug and keeps its traceback. This module imports
nothing from the project, so every package may raise it.
"""


class NmtError(Exception):
    """A user-facing error: `message` says what happened, `hint` what to do about it."""

    def __init__(self, message: str, hint: str | None = None, exit_code: int = 1):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message
