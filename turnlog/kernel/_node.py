"""``Operation``: a graph node that runs one named operation on a branch.

The name resolves through ``Branch.get_operation`` exactly as ``Session.run_operation``
does: a built-in verb first, then an operation registered in the branch's (session's)
registry; the parameters are passed as keyword arguments. Invoking is total: an error
ends the node ``failed`` with the exception kept (an unknown name is an
``OperationError``), nothing is raised; a cancellation ends it ``cancelled`` and
propagates. A node runs once: a second ``invoke`` does nothing. ``ReActStream`` is drained
into a list.

Example::

    node = Operation("communicate", {"instruction": "Say hi"}, branch=branch)
    await node.invoke()
    node.status, node.response          # ("completed", "Hi!")
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import anyio
from pydantic import BaseModel

from turnlog.eventstore import uuid7
from turnlog.kernel._errors import ExecutionError, OperationError, UsageError

if TYPE_CHECKING:
    from turnlog.kernel._branch import Branch

__all__ = ["NodeStatus", "Operation", "dependency_ids"]

NodeStatus = Literal["pending", "processing", "completed", "failed", "skipped", "cancelled"]


def dependency_ids(value: Any) -> tuple[str, ...]:
    """Node ids from one node, one id, or an iterable of them."""
    items = (value,) if isinstance(value, str | Operation) else tuple(value or ())
    return tuple(d.id if isinstance(d, Operation) else str(d) for d in items)


class Operation:
    """One named operation to run on a branch, once.

    Args:
        operation: A built-in verb (``communicate``, ``operate``, ``ReAct``...) or a name
            registered on the session.
        parameters: Keyword arguments of the call (a dict or a pydantic model).
        branch: The branch to run on (a flow assigns one when None).
        node_id: The node id (default: a fresh UUIDv7).
        depends_on: Ids (or nodes) this node waits for, in a ``Graph``.
        inherit_context: In a flow, run on a fork of the first dependency's branch, so the
            node sees that conversation.
        metadata: Free-form facts about the node.

    Attributes:
        status: ``pending``, ``processing``, ``completed``, ``failed``, ``skipped`` or
            ``cancelled``.
        response: What the operation returned (None until completed).
        error: The exception of a failed or cancelled node.
        duration_ms: How long the invocation took.
    """

    def __init__(
        self,
        operation: str,
        parameters: Mapping[str, Any] | BaseModel | None = None,
        *,
        branch: Branch | None = None,
        node_id: str | None = None,
        depends_on: Any = (),
        inherit_context: bool = False,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        if not _is_name(operation):
            raise UsageError(f"an operation is named by a non-empty string, not {operation!r}")
        if parameters is not None and not isinstance(parameters, Mapping | BaseModel):
            raise UsageError(
                f"parameters must be a dict or a pydantic model, not {type(parameters).__name__}"
            )
        self.id = node_id or str(uuid7())
        self.operation = operation
        self.parameters: Mapping[str, Any] | BaseModel = parameters if parameters is not None else {}
        self.branch = branch
        self.depends_on: tuple[str, ...] = dependency_ids(depends_on)
        self.inherit_context = inherit_context
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.status: NodeStatus = "pending"
        self.response: Any = None
        self.error: BaseException | None = None
        self.duration_ms: float | None = None

    @property
    def request(self) -> dict[str, Any]:
        """The parameters as a dict."""
        if isinstance(self.parameters, BaseModel):
            return self.parameters.model_dump()
        return dict(self.parameters)

    @property
    def branch_id(self) -> str | None:
        """The id of the branch the node runs on."""
        return self.branch.id if self.branch is not None else self.metadata.get("branch_id")

    @property
    def done(self) -> bool:
        """True once the node left ``pending`` and ``processing``."""
        return self.status not in ("pending", "processing")

    def __repr__(self) -> str:
        return f"<Operation {self.id} {self.operation!r} {self.status}>"

    async def invoke(self, branch: Branch | None = None) -> None:
        """Run the operation (only from ``pending``); record the outcome on the node.

        Args:
            branch: The branch to run on (default: the node's own).

        Raises:
            BaseException: the cancellation, when the invocation is cancelled (the node
                ends ``cancelled``). Errors never propagate: they end the node ``failed``.
        """
        if self.status != "pending":
            return
        if branch is not None:
            self.branch = branch
        self.status = "processing"
        started = time.perf_counter()
        try:
            self.response = await self._invoke()
            self.status = "completed"
        except anyio.get_cancelled_exc_class() as exc:
            self.status, self.error = "cancelled", exc
            raise
        except Exception as exc:
            self.status, self.error = "failed", exc
        finally:
            self.duration_ms = (time.perf_counter() - started) * 1000

    async def _invoke(self) -> Any:
        branch = self.branch
        if branch is None:
            raise ExecutionError(f"Operation {self.id} has no branch: set branch= before invoke()")
        self.metadata["branch_id"] = branch.id
        method = branch.get_operation(self.operation)
        if method is None:
            raise OperationError(f"Unsupported operation type: {self.operation!r}", operation=self.operation)
        result = method(**self.request)
        if inspect.isasyncgen(result) or (hasattr(result, "__aiter__") and not inspect.isawaitable(result)):
            items = []
            try:
                async for item in result:
                    items.append(item)
            finally:
                close = getattr(result, "aclose", None)
                if close is not None:
                    await close()
            return items
        return await result


def _is_name(value: object) -> bool:
    """True for a non-empty string (callers may pass anything; the signature cannot stop them)."""
    return isinstance(value, str) and bool(value)
