"""The one Python shape of the C ABI's destroy convention (doc/c_api.md): an object that owns
one library handle and releases it exactly once.

`close()` destroys the handle (later calls do nothing) and raises LlaisysError when the
library refuses it (the handle was destroyed behind the object's back); `with` closes on
exit; the finalizer closes too but never raises (the library may already be gone at exit).
"""

from __future__ import annotations

from .libllaisys import LIB, check


class OwnedHandle:
    """Base of every class that owns a handle. Subclasses name their destroy function in
    `_DESTROY` and keep the handle in the attribute `_HANDLE_ATTR` (None once closed)."""

    _DESTROY: str = ""  # the llaisys<Noun>Destroy function of the handle's type
    _HANDLE_ATTR: str = "_handle"

    def close(self) -> None:
        handle = getattr(self, self._HANDLE_ATTR, None)
        setattr(self, self._HANDLE_ATTR, None)
        if handle:
            check(getattr(LIB, self._DESTROY)(handle))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # never raise from a finalizer
            pass
