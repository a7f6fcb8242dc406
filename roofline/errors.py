"""The project's one error type. The CLI prints it as one line and exits; tracebacks are for bugs."""


class RooflineError(Exception):
    """A user mistake in a spec file or an input, with a message that says what was expected."""

    exit_code = 1


class UsageError(RooflineError):
    """A bad command-line value (a flag, an id, a path): exit status 2, like other usage errors."""

    exit_code = 2
