"""``turnlog.kernel`` exports exactly the names its users need (the list is the contract).

Adding or removing a public name is a decision: change this list with it (httpx's
``tests/test_exported_members.py`` does the same).
"""

import inspect

import turnlog.kernel
import turnlog.kernel.signals

EXPORTED = [
    "ActionParam",
    "AddMessages",
    "AmbiguousBranch",
    "AmbiguousSession",
    "AnnotateMessage",
    "AuditReport",
    "BindProviderSession",
    "Branch",
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
    "MessageRecorded",
    "Middle",
    "NodeStatus",
    "Observer",
    "Operation",
    "OperationError",
    "ParseParam",
    "PersistOptions",
    "ProviderReport",
    "RecoveredRun",
    "RecoveryReport",
    "RemovedArgument",
    "ReplayMismatch",
    "ResponseParseError",
    "RunClosed",
    "RunEnd",
    "RunFailure",
    "RunParam",
    "RunRecoveryError",
    "RunScope",
    "RunStart",
    "ScriptExhaustedError",
    "Session",
    "Signal",
    "SnapshotFileError",
    "StartRun",
    "Tool",
    "ToolArgumentsError",
    "ToolError",
    "ToolInvocation",
    "ToolRegistry",
    "TurnlogError",
    "UnknownBranch",
    "UnknownSession",
    "UnknownTool",
    "UnsafePathError",
    "UsageError",
    "VerbPort",
    "audit_replay",
    "called_message_ids",
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
]


def test_the_kernel_exports_exactly_its_public_names() -> None:
    """``__all__`` is the intended list, sorted, and every name in it exists."""
    assert turnlog.kernel.__all__ == EXPORTED
    assert EXPORTED == sorted(EXPORTED)
    for name in EXPORTED:
        assert getattr(turnlog.kernel, name) is not None


def test_public_names_are_defined_in_turnlog() -> None:
    """No class or function is a re-export of a foreign library's object."""
    for name in EXPORTED:
        value = getattr(turnlog.kernel, name)
        if isinstance(value, type) or inspect.isfunction(value):
            assert value.__module__.startswith("turnlog."), (name, value.__module__)


def test_signals_have_their_own_namespace_and_names_apart_from_events() -> None:
    """The signals module exports the signals; none shares a name with a projections event."""
    import turnlog.projections

    assert turnlog.kernel.signals.__all__ == sorted(turnlog.kernel.signals.__all__)
    for name in ("MessageRecorded", "RunEnd", "RunFailure", "RunStart", "Signal"):
        assert getattr(turnlog.kernel.signals, name) is getattr(turnlog.kernel, name)
        assert not hasattr(turnlog.projections, name), name
