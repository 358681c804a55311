"""turnlog.kernel: the command side (Kernel, Branch, Session, verbs, providers).

What is here is what users of the kernel need: the facade (``Branch``, ``Session``), the
``Kernel`` and its commands, the branch port that operations and custom ``Middle`` adapters
are written against, the signals observers receive (also in ``turnlog.kernel.signals``),
parameter objects, tools, flows, replay, recovery and the errors. Internals (the verb
functions, the registry, snapshot helpers) stay in their private modules.
"""

from ._branch import Branch
from ._called import called_message_ids
from ._commands import (
    AddMessages,
    AnnotateMessage,
    BindProviderSession,
    ClearMessages,
    Command,
    EndRun,
    FailRun,
    StartRun,
)
from ._context import ContextProvider, ContextProviderRegistry, ProviderReport
from ._control import LoopBreak, LoopControl, LoopDirective
from ._errors import (
    AmbiguousBranch,
    AmbiguousSession,
    BranchNameTaken,
    ExecutionError,
    KernelError,
    OperationError,
    RemovedArgument,
    ReplayMismatch,
    ResponseParseError,
    RunClosed,
    ScriptExhaustedError,
    TurnlogError,
    UnknownBranch,
    UnknownOption,
    UnknownSession,
    UsageError,
)
from ._flow import FlowResult, Graph, GraphCycleError, flow
from ._kernel import Kernel
from ._lifecycle import RunScope, current_run, lifecycle, observed_run, run_lease_key
from ._lookup import find_branch, find_session
from ._node import NodeStatus, Operation
from ._params import ChatParam, Middle, ParseParam, RunParam
from ._persist import (
    PersistOptions,
    SnapshotFileError,
    SnapshotFiles,
    UnsafePathError,
    check_snapshot_files,
    verify_snapshot_files,
)
from ._port import BranchPort, ModelChoice, VerbPort
from ._recorded import RecordedCall, RecordedModel
from ._recover import BufferProblem, LiveRun, RecoveredRun, RecoveryReport, RunRecoveryError, recover
from ._replay import AuditReport, ExecuteReport, audit_replay, execute_replay
from ._session import Session
from ._tools import (
    ActionParam,
    Tool,
    ToolArgumentsError,
    ToolError,
    ToolInvocation,
    ToolRegistry,
    UnknownTool,
)
from .models import iModel
from .signals import MessageAdded, MessageRecorded, Observer, RunEnd, RunFailed, RunFailure, RunStart, Signal

__all__ = [
    "ActionParam",
    "AddMessages",
    "AmbiguousBranch",
    "AmbiguousSession",
    "AnnotateMessage",
    "AuditReport",
    "BindProviderSession",
    "Branch",
    "BranchNameTaken",
    "BranchPort",
    "BufferProblem",
    "ChatParam",
    "ClearMessages",
    "Command",
    "ContextProvider",
    "ContextProviderRegistry",
    "EndRun",
    "ExecuteReport",
    "ExecutionError",
    "FailRun",
    "FlowResult",
    "Graph",
    "GraphCycleError",
    "Kernel",
    "KernelError",
    "LiveRun",
    "LoopBreak",
    "LoopControl",
    "LoopDirective",
    "MessageAdded",
    "MessageRecorded",
    "Middle",
    "ModelChoice",
    "NodeStatus",
    "Observer",
    "Operation",
    "OperationError",
    "ParseParam",
    "PersistOptions",
    "ProviderReport",
    "RecordedCall",
    "RecordedModel",
    "RecoveredRun",
    "RecoveryReport",
    "RemovedArgument",
    "ReplayMismatch",
    "ResponseParseError",
    "RunClosed",
    "RunEnd",
    "RunFailed",
    "RunFailure",
    "RunParam",
    "RunRecoveryError",
    "RunScope",
    "RunStart",
    "ScriptExhaustedError",
    "Session",
    "Signal",
    "SnapshotFileError",
    "SnapshotFiles",
    "StartRun",
    "Tool",
    "ToolArgumentsError",
    "ToolError",
    "ToolInvocation",
    "ToolRegistry",
    "TurnlogError",
    "UnknownBranch",
    "UnknownOption",
    "UnknownSession",
    "UnknownTool",
    "UnsafePathError",
    "UsageError",
    "VerbPort",
    "audit_replay",
    "called_message_ids",
    "check_snapshot_files",
    "current_run",
    "execute_replay",
    "find_branch",
    "find_session",
    "flow",
    "iModel",
    "lifecycle",
    "observed_run",
    "recover",
    "run_lease_key",
    "verify_snapshot_files",
]
