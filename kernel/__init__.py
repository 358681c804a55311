"""turnlog.kernel: the command side (Kernel, Branch, Session, verbs, providers)."""

from ._branch import Branch
from ._context import ContextProvider, ContextProviderRegistry, ProviderReport
from ._errors import (
    AmbiguousBranch,
    ExecutionError,
    KernelError,
    OperationError,
    ResponseParseError,
    ScriptExhaustedError,
    UnknownBranch,
    UsageError,
)
from ._kernel import Kernel
from ._lifecycle import (
    MessageAdded,
    RunEnd,
    RunFailed,
    RunScope,
    RunStart,
    Signal,
    current_run,
    lifecycle,
    observed_run,
)
from ._params import ChatParam, Middle, ParseParam, RunParam
from ._session import OperationManager, Session
from .models import iModel

__all__ = [
    "AmbiguousBranch",
    "Branch",
    "ChatParam",
    "ContextProvider",
    "ContextProviderRegistry",
    "ExecutionError",
    "Kernel",
    "KernelError",
    "MessageAdded",
    "Middle",
    "OperationError",
    "OperationManager",
    "ParseParam",
    "ProviderReport",
    "ResponseParseError",
    "RunEnd",
    "RunFailed",
    "RunParam",
    "RunScope",
    "RunStart",
    "ScriptExhaustedError",
    "Session",
    "Signal",
    "UnknownBranch",
    "UsageError",
    "current_run",
    "iModel",
    "lifecycle",
    "observed_run",
]
