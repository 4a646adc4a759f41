"""Exception hierarchy.

Every error a user can cause or fix is a :class:`KForgeError` whose message says what went
wrong, where (file, JSON path, kernel line) and what to do.  The CLI is the only place these
become exit codes: ``exit_code`` on each class says which.
"""
from __future__ import annotations


class KForgeError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class InputError(KForgeError):
    """Bad input: a manifest, a kernel file, a command-line argument (exit 2)."""

    exit_code = 2


class ManifestError(InputError):
    """A manifest is malformed or meaningless. Carries the file and the JSON path."""

    def __init__(self, message: str, *, file: str | None = None, json_path: str = "$",
                 hint: str | None = None):
        self.file = file
        self.json_path = json_path
        where = f"{file}: " if file else ""
        super().__init__(f"{where}{json_path}: {message}", hint=hint)


class ExpressionError(InputError):
    """An expression could not be parsed or evaluated."""

    def __init__(self, message: str, *, expression: str, column: int | None = None):
        self.expression = expression
        self.column = column
        text = f"{message} in expression {expression!r}"
        if column is not None:
            text += f"\n    {expression}\n    {' ' * column}^"
        super().__init__(text)


class SignatureError(InputError):
    """A kernel signature uses syntax kernel_forge does not support, or does not match."""

    def __init__(self, message: str, *, signature: str = "", column: int | None = None,
                 hint: str | None = None):
        self.signature = signature
        self.column = column
        text = message
        if signature and column is not None:
            text += f"\n    {signature}\n    {' ' * column}^"
        super().__init__(text, hint=hint)


class CandidateError(InputError):
    """A candidate kernel file is unusable (bad header, missing entry point, static rule)."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 hint: str | None = None):
        self.file = file
        self.line = line
        where = ""
        if file:
            where = f"{file}:{line}: " if line else f"{file}: "
        super().__init__(f"{where}{message}", hint=hint)


class CompileError(InputError):
    """NVRTC rejected the source. ``log`` is NVRTC's full log; ``lines`` the kernel lines named."""

    def __init__(self, message: str, *, log: str = "", lines: tuple[int, ...] = (), hint: str | None = None):
        self.log = log
        self.lines = lines
        super().__init__(message, hint=hint)


class IncludeRefused(CompileError):
    """A kernel includes (or made NVRTC open) a file outside the allow-list: the CUDA toolkit's
    and CCCL's headers and the task's named headers.  The message names the line and the file,
    never its contents; ``log`` is empty."""


class ReferenceError_(InputError):
    """A reference or baseline callable failed or could not be loaded."""


class EnvironmentProblem(KForgeError):
    """The machine lacks something: a GPU, a driver, a library (exit 3)."""

    exit_code = 3


#: the commands that work without a GPU (``kforge doctor`` and the no-GPU error list the same)
NO_GPU_COMMANDS = ("kforge validate", "kforge compile --arch sm_90", "kforge init", "kforge optimize --dry-run",
                   "kforge report", "kforge approve", "kforge archive", "kforge doctor")


class NoGPUError(EnvironmentProblem):
    """No usable NVIDIA GPU or driver."""

    def __init__(self, detail: str):
        super().__init__(f"no usable NVIDIA GPU: {detail}",
                         hint="commands that work without a GPU: " + ", ".join(NO_GPU_COMMANDS))


class CudaError(KForgeError):
    """A CUDA driver call failed. ``code`` is the driver's name for the error."""

    exit_code = 3

    def __init__(self, call: str, code: str, description: str = ""):
        self.call = call
        self.code = code
        self.description = description
        msg = f"{call} failed: {code}"
        if description:
            msg += f" ({description})"
        super().__init__(msg)


class InternalError(KForgeError):
    """kforge's own fault, found and described (exit 4, like an unexpected exception)."""

    exit_code = 4


class CaseFailed(KForgeError):
    """Used by the CLI: at least one case failed (exit 1)."""

    exit_code = 1


def caused_by_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was raised while handling or because of, a KeyboardInterrupt (Ctrl-C
    while a class is being created comes back as Python 3.11's RuntimeError "Error calling
    __set_name__ ...", caused by the KeyboardInterrupt)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False
