"""Errors a page answers with: a status and a one-sentence message, never a traceback.

They are HTTP answers in the form of exceptions, not turnlog errors: a request handler
raises one, the app's own exception handler turns it into an error page, and none ever
reaches a caller of ``create_app``, who sees a status code. So they derive from
``Exception``, not ``TurnlogError``, and are not exported (``docs/errors.md`` says so too).
"""

from __future__ import annotations

__all__ = ["BadRequest", "Forbidden", "NotFound", "PageError"]


class PageError(Exception):
    """A request the app cannot answer; ``status`` is the HTTP status of the error page."""

    status = 500
    title = "Error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(PageError):
    """Malformed input: a version that is not a number, an unknown grouping."""

    status = 400
    title = "Bad request"


class Forbidden(PageError):
    """An action the app was not started to allow, or a request without its token."""

    status = 403
    title = "Forbidden"


class NotFound(PageError):
    """An unknown branch or run, or a version outside the branch."""

    status = 404
    title = "Not found"
