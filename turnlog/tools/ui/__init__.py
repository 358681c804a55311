"""turnlog.tools.ui: ``turnlog ui``, a time-travel debugger for a store, in the browser.

Needs the ``ui`` extra (``pip install 'turnlog[ui]'``: Starlette and uvicorn).
"""

from ._app import UIConfig, create_app, display_url
from ._errors import TurnlogError
from ._readonly import ReadOnlyStore, WriteRefused

__all__ = ["ReadOnlyStore", "TurnlogError", "UIConfig", "WriteRefused", "create_app", "display_url"]
