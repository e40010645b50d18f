"""Test support: the in-memory store and the storage contract kit.

Run the contract against your own store with pytest::

    from polyloop.testing import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store_factory(self, tmp_path):
            return lambda: MyStore(tmp_path)

or without pytest: ``polyloop.testing.check_store(lambda: MyStore(path))``.
Nothing here is loaded as a pytest plugin automatically.
"""

from ._contract import PROPERTIES, ContractViolation, StoreContract, check_store, logical
from ._memory import MemoryStore
from .fake_openai import FakeOpenAIServer, FakeResponse

__all__ = [
    "PROPERTIES",
    "ContractViolation",
    "FakeOpenAIServer",
    "FakeResponse",
    "MemoryStore",
    "StoreContract",
    "check_store",
    "logical",
]
