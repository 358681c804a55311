"""turnlog.kernel.models: providers (OpenAI-compatible HTTP, Anthropic, Gemini API, CLI agents) and iModel."""

from ._anthropic import AnthropicModel
from ._claude_code import ClaudeCodeModel
from ._cli_errors import ExitStatus
from ._cli_process import CLIProcess, Diagnostic, NDJSONFramer
from ._codex import CodexModel
from ._contract import BaseChatModel, ModelProfile, as_chat_model
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
    TurnlogError,
    UsageError,
)
from ._fingerprint import canonical_request, public_params, request_fingerprint
from ._gemini import GeminiModel
from ._gemini_api import GeminiAPIModel
from ._imodel import API_PROVIDERS, CLI_PROVIDERS, iModel
from ._openai import (
    DEFAULT_TIMEOUT,
    OPENAI_BASE_URL,
    MissingAPIKey,
    ModelRequestsBlocked,
    OpenAIChatModel,
    model_requests_allowed,
)
from ._retry import RetryPolicy, parse_retry_after
from ._subprocess import CLIAgentModel, CLIEventParser, cli_agent_of
from ._types import (
    ChatModel,
    ChunkSink,
    ChunkType,
    ModelRequest,
    ModelResponse,
    StreamChunk,
    StreamingModel,
    ToolCall,
    Usage,
)

__all__ = [
    "BaseChatModel",
    "ModelProfile",
    "as_chat_model",
    "CLIAgentModel",
    "cli_agent_of",
    "CLIEventParser",
    "CLIProcess",
    "ClaudeCodeModel",
    "CodexModel",
    "Diagnostic",
    "ExitStatus",
    "GeminiModel",
    "AnthropicModel",
    "GeminiAPIModel",
    "NDJSONFramer",
    "API_PROVIDERS",
    "CLI_PROVIDERS",
    "DEFAULT_TIMEOUT",
    "OPENAI_BASE_URL",
    "MissingAPIKey",
    "ModelRequestsBlocked",
    "OpenAIChatModel",
    "RetryPolicy",
    "canonical_request",
    "iModel",
    "model_requests_allowed",
    "parse_retry_after",
    "public_params",
    "request_fingerprint",
    "AuthenticationError",
    "CLIError",
    "CLINotFound",
    "ChatModel",
    "ChunkSink",
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
    "TurnlogError",
    "Usage",
    "UsageError",
]
