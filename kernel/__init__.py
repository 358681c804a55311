"""turnlog.kernel: the command side (Kernel, Branch, Session, verbs, providers)."""

from ._branch import Branch, find_branch
from ._called import called_message_ids, message_ids_at
from ._composed import ComposedVerbs
from ._context import ContextProvider, ContextProviderRegistry, ProviderReport
from ._errors import (
    AmbiguousBranch,
    AmbiguousSession,
    ExecutionError,
    KernelError,
    OperationError,
    ResponseParseError,
    ScriptExhaustedError,
    UnknownBranch,
    UnknownSession,
    UsageError,
)
from ._flow import FlowResult, Graph, GraphCycleError, flow
from ._kernel import (
    AddMessages,
    AnnotateMessage,
    BindProviderSession,
    ClearMessages,
    Command,
    CreateBranch,
    EndRun,
    FailRun,
    Kernel,
    StartRun,
)
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
from ._lookup import find_session
from ._node import NodeStatus, Operation
from ._params import ChatParam, Middle, ParseParam, RunParam
from ._persist import PersistOptions, SnapshotFileError, UnsafePathError
from ._recover import BufferProblem, RecoveredRun, RecoveryReport, RunRecoveryError, recover
from ._replay import AuditReport, ExecuteReport, ReplayDivergence, ReplayModel, audit_replay, execute_replay
from ._session import OperationManager, Session
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

__all__ = [
    "ActionParam",
    "ComposedVerbs",
    "FlowResult",
    "Graph",
    "GraphCycleError",
    "NodeStatus",
    "Operation",
    "Tool",
    "ToolArgumentsError",
    "ToolError",
    "ToolInvocation",
    "ToolRegistry",
    "UnknownTool",
    "flow",
    "AuditReport",
    "ExecuteReport",
    "ReplayDivergence",
    "ReplayModel",
    "audit_replay",
    "execute_replay",
    "called_message_ids",
    "find_branch",
    "find_session",
    "AddMessages",
    "AmbiguousBranch",
    "AmbiguousSession",
    "AnnotateMessage",
    "BindProviderSession",
    "Branch",
    "ChatParam",
    "ClearMessages",
    "Command",
    "ContextProvider",
    "ContextProviderRegistry",
    "BufferProblem",
    "CreateBranch",
    "EndRun",
    "ExecutionError",
    "FailRun",
    "Kernel",
    "KernelError",
    "MessageAdded",
    "Middle",
    "OperationError",
    "OperationManager",
    "ParseParam",
    "PersistOptions",
    "ProviderReport",
    "RecoveredRun",
    "RecoveryReport",
    "ResponseParseError",
    "RunEnd",
    "RunFailed",
    "RunParam",
    "RunRecoveryError",
    "RunScope",
    "RunStart",
    "ScriptExhaustedError",
    "Session",
    "Signal",
    "SnapshotFileError",
    "StartRun",
    "UnknownBranch",
    "UnsafePathError",
    "UnknownSession",
    "UsageError",
    "current_run",
    "iModel",
    "lifecycle",
    "message_ids_at",
    "observed_run",
    "recover",
]
