"""The project's one error type. The CLI prints it as one line and exits; tracebacks are for bugs."""


class RooflineError(Exception):
    """A user mistake in a spec file or an input, with a message that says what was expected."""

    exit_code = 1


class UsageError(RooflineError):
    """A bad command-line value (a flag, an id, a path): exit status 2, like other usage errors.

    `param` names the library argument at fault (`memory_fraction`); the CLI shows it as its flag
    (`--memory-fraction`), a library caller sees `memory_fraction: ...`.
    """

    exit_code = 2

    def __init__(self, message: str, param: str | None = None):
        self.param, self.detail = param, message
        super().__init__(f"{param}: {message}" if param else message)
