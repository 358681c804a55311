"""``Problem``: one finding of ``verify``.

It lives alone, importing nothing of the package, because both the records (``VerifyReport``)
and the errors (``UpgradeRefused``) name it; in either of those modules it would close an
import circle through ``_ids``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Problem"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem found by ``verify``.

    Attributes:
        stream: The stream concerned.
        version: The version concerned (0 when it concerns the stream as a whole).
        what: What is wrong, in one sentence.
        position: The global position, when known.
    """

    stream: str
    version: int
    what: str
    position: int | None = None

    def __str__(self) -> str:
        return f"{self.stream} v{self.version}: {self.what}"
