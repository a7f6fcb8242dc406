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


def shown(value: object, limit: int = 60) -> str:
    """A value as an error message quotes it: its repr, bounded in depth and length (a 25 MB YAML alias bomb
    must not become a 25 MB message)."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxdict, r.maxstring, r.maxother, r.maxlong = 2, 4, 4, limit, limit, 40
    text = r.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
