"""``interpret``: rewrite a user's raw input into a clearer prompt, through ``chat``.

Nothing is recorded as a message; the model call is recorded (``model.called`` with verb
``interpret``) like every call ``chat`` makes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from turnlog.kernel._params import build_chat_param
from turnlog.kernel.models import as_chat_model

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort

__all__ = ["INTERPRET_INSTRUCTION", "interpret"]

#: Parameters that rule out interpret's own low temperature.
_SAMPLING = frozenset({"temperature", "top_p", "thinking"})

INTERPRET_INSTRUCTION = (
    "Rewrite the user's input into a clear, structured prompt for a language model. Keep the "
    "user's intent; add missing details only when they are implied. Return only the rewritten prompt."
)


async def interpret(
    branch: BranchPort,
    text: str,
    *,
    domain: str | None = None,
    style: str | None = None,
    sample_writing: str | None = None,
    interpret_model: Any = None,
    **kwargs: Any,
) -> str:
    """The rewritten prompt for ``text``.

    Args:
        branch: The branch whose history is sent.
        text: The user's raw input.
        domain: A domain hint (default ``"general"``).
        style: The desired style (default ``"concise"``).
        sample_writing: An example of the wanted writing.
        interpret_model: The model to use (default: the branch's chat model).
        **kwargs: Request parameters; ``temperature`` defaults to 0.1 unless ``top_p`` or
            ``thinking`` is set (here or as the model's default): Claude 4.1 and later refuse
            ``temperature`` with ``top_p``, and extended thinking refuses any temperature.
    """
    from turnlog.kernel._model_config import resolve_model
    from turnlog.kernel.operations.chat import chat

    guidance = f"Domain hint: {domain or 'general'}. Desired style: {style or 'concise'}."
    if sample_writing:
        guidance += f" Sample writing: {sample_writing}"
    model = resolve_model(interpret_model)
    chosen = model if model is not None else branch.models.chat
    defaults = as_chat_model(chosen).profile.default_params if chosen is not None else {}
    given = {*kwargs, *defaults}
    params = dict(kwargs)
    if not given & _SAMPLING:
        params["temperature"] = 0.1
    param = build_chat_param(
        guidance=guidance, context=[f"User input: {text}"], imodel=model, imodel_kw=params
    )
    return str(await chat(branch, INTERPRET_INSTRUCTION, param, verb="interpret"))
