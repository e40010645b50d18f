"""Test support: the in-memory store, the storage contract kit and the rollback rehearsal.

Run the contract against your own store with pytest::

    from polyloop.testing import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store_factory(self, tmp_path):
            return lambda: MyStore(tmp_path)

or without pytest: ``polyloop.testing.check_store(lambda: MyStore(path))``.
Nothing here is loaded as a pytest plugin automatically.

The fake model servers (`FakeOpenAIServer`, `FakeAnthropicServer`,
`FakeResponse`, `FakeRequest`) are test helpers of this repository, not a
supported API: they can be imported from here, but only on first use (so
`import polyloop.testing` does not load an HTTP server), and they may change
without notice.
"""

from typing import Any

from ._contract import PROPERTIES, ContractViolation, StoreContract, check_store
from ._samples import logical
from ._memory import MemoryStore
from ._rehearse import Rehearsal, rehearse_rollback

__all__ = [
    "PROPERTIES",
    "ContractViolation",
    "MemoryStore",
    "Rehearsal",
    "StoreContract",
    "check_store",
    "logical",
    "rehearse_rollback",
]

_LAZY = {
    "FakeAnthropicServer": "._fake_anthropic",
    "FakeOpenAIServer": "._fake_openai",
    "FakeRequest": "._fake_http",
    "FakeResponse": "._fake_http",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
