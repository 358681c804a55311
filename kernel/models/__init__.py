"""turnlog.kernel.models: providers (OpenAI-compatible HTTP, CLI agents) and iModel."""

from ._errors import (
    AuthenticationError,
    CLIError,
    CLINotFound,
    ContextLengthError,
    ProviderConnectionError,
    ProviderError,
    ProviderHTTPError,
    ProviderTimeout,
    RateLimitError,
    ResponseFormatError,
    ServerError,
)
from ._types import (
    ChatModel,
    ChunkType,
    ModelRequest,
    ModelResponse,
    StreamChunk,
    StreamingModel,
    ToolCall,
    Usage,
)

__all__ = [
    "AuthenticationError",
    "CLIError",
    "CLINotFound",
    "ChatModel",
    "ChunkType",
    "ContextLengthError",
    "ModelRequest",
    "ModelResponse",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderHTTPError",
    "ProviderTimeout",
    "RateLimitError",
    "ResponseFormatError",
    "ServerError",
    "StreamChunk",
    "StreamingModel",
    "ToolCall",
    "Usage",
]
