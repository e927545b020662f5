"""The server's guards that need no engine: where a rollout may send the host's model key,
and tenant prefixes that must not reach each other's rollouts."""

from __future__ import annotations

import pytest

from orchestrator.service.auth import Tokens
from orchestrator.service.guards import url_under as _url_under


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://api.example.com/v1", True),
        ("https://api.example.com", True),
        ("https://api.example.com/v1/x", True),
        ("https://api.example.com.evil.example/v1", False),
        ("https://evil.example/https://api.example.com", False),
        ("http://api.example.com/v1", False),
        ("https://api.example.com:8443/v1", False),
        ("https://user:pw@api.example.com/v1", False),
        ("https://api.example.comx/v1", False),
    ],
)
def test_a_rollout_may_route_its_model_calls_only_under_an_allowed_url(
    url: str, allowed: bool
) -> None:
    assert _url_under(url, "https://api.example.com") is allowed


def test_a_path_prefix_holds_on_segment_boundaries() -> None:
    assert _url_under("http://10.0.0.5:8000/v1/chat", "http://10.0.0.5:8000/v1")
    assert not _url_under("http://10.0.0.5:8000/v10", "http://10.0.0.5:8000/v1")


@pytest.mark.parametrize(
    "tenants",
    [{"team1": "t-one", "team10": "t-ten"}, {"a": "t-a", "b": "t-b", "ab": "t-ab"}],
)
def test_overlapping_tenant_prefixes_are_refused(tenants: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="overlap"):
        Tokens(admin=None, tenants=tenants)


def test_tenant_prefixes_that_end_in_a_separator_are_fine() -> None:
    Tokens(admin=None, tenants={"team1::": "t-one", "team10::": "t-ten"})
