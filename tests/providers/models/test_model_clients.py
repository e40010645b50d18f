"""A fresh client per model call, on one TLS context per process, closed after each call."""

from __future__ import annotations

import ssl
from typing import Any

import pytest
from providers import HISTORY, PROVIDERS, SPECS, Provider

from polyloop._run import provider as hosted


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
async def test_each_call_opens_and_closes_a_client_on_the_one_tls_context(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[Any] = []
    fresh = hosted._fresh_http_client

    def recording(sdk: Any) -> Any:
        opened.append(fresh(sdk))
        return opened[-1]

    monkeypatch.setattr(hosted, "_fresh_http_client", recording)
    built = hosted._tls_context.cache_info().misses
    with provider.server([provider.full, provider.full]) as server:
        model = provider.adapter(server)
        await model.complete(HISTORY, SPECS)
        await model.complete(HISTORY, SPECS)
        assert len(server.requests) == 2
    assert len(opened) == 2 and opened[0] is not opened[1]
    assert all(client.is_closed for client in opened)  # the SDK closed what it was given
    assert hosted._tls_context.cache_info().misses - built <= 1  # one context built, at most, for both
    assert isinstance(hosted._tls_context(type(opened[0])), ssl.SSLContext)


def test_a_client_class_whose_library_builds_no_context_leaves_the_sdk_its_own() -> None:
    class Bare:
        pass

    assert hosted._tls_context(Bare) is None
