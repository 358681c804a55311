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


def test_signals_have_the_seeds_names_in_their_own_namespace() -> None:
    """The signals carry the seed's names (ADR-0021 D4); the older names are aliases of them."""
    import turnlog.projections

    assert turnlog.kernel.signals.__all__ == sorted(turnlog.kernel.signals.__all__)
    for name in (
        "MessageAdded",
        "MessageRecorded",
        "RunEnd",
        "RunFailed",
        "RunFailure",
        "RunStart",
        "Signal",
    ):
        assert getattr(turnlog.kernel.signals, name) is getattr(turnlog.kernel, name)
    assert turnlog.kernel.RunFailure is turnlog.kernel.RunFailed
    assert turnlog.kernel.MessageRecorded is turnlog.kernel.MessageAdded
    assert turnlog.kernel.RunFailed.__name__ == "RunFailed"
    assert turnlog.kernel.MessageAdded.__name__ == "MessageAdded"
    # Events and signals of one name are different classes: a payload is not a notification.
    assert turnlog.kernel.RunFailed is not turnlog.projections.RunFailed
    assert turnlog.kernel.MessageAdded is not turnlog.projections.MessageAdded
