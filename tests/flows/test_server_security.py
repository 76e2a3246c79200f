"""The server `flows.serve` starts, over HTTP: credentials required, CORS for its own origin only, and the UI
and Prefect's own client working with the credentials."""
from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import httpx
import pytest

from flows.serve import load_or_create_credentials
from tests.flows.conftest import PrefectServer

pytestmark = [pytest.mark.integration]

FOREIGN_ORIGIN = "http://evil.example"


def basic(auth_string: str) -> dict[str, str]:
    """The header the UI sends after login (`btoa` of what was typed) and Prefect's client sends."""
    return {"Authorization": "Basic " + base64.b64encode(auth_string.encode()).decode()}


def test_api_refuses_requests_without_the_credentials(prefect_server: PrefectServer):
    url = f"{prefect_server.api_url}/flow_runs/filter"
    assert httpx.post(url, json={}).status_code == 401
    assert httpx.post(url, json={}, headers=basic("refinery:wrong")).status_code == 401
    assert httpx.post(url, json={}, headers=basic(prefect_server.auth_string)).status_code == 200
    # what a hostile page can send without a preflight: still refused
    simple = httpx.post(f"{prefect_server.api_url}/deployments/filter", content=b"{}",
                        headers={"Origin": FOREIGN_ORIGIN, "Content-Type": "text/plain"})
    assert simple.status_code == 401


def test_cross_origin_requests_are_allowed_only_from_the_ui_itself(prefect_server: PrefectServer):
    url = f"{prefect_server.api_url}/flow_runs/filter"
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}

    foreign = httpx.options(url, headers={"Origin": FOREIGN_ORIGIN, **preflight})
    assert foreign.status_code == 400 and "access-control-allow-origin" not in foreign.headers
    foreign_get = httpx.get(f"{prefect_server.api_url}/admin/version",
                            headers={"Origin": FOREIGN_ORIGIN, **basic(prefect_server.auth_string)})
    assert "access-control-allow-origin" not in foreign_get.headers

    own = httpx.options(url, headers={"Origin": prefect_server.ui_url, **preflight})
    assert own.status_code == 200 and own.headers["access-control-allow-origin"] == prefect_server.ui_url


def test_the_ui_asks_for_the_credentials_and_works_with_them(prefect_server: PrefectServer):
    page = httpx.get(prefect_server.ui_url + "/", follow_redirects=True)
    assert page.status_code == 200 and "<html" in page.text.lower()
    settings = httpx.get(prefect_server.ui_url + "/ui-settings").json()
    assert settings["auth"] == "BASIC" and settings["api_url"] == prefect_server.api_url
    # the UI's own calls, from its origin, with the login it stored
    headers = {"Origin": prefect_server.ui_url, **basic(prefect_server.auth_string)}
    check = httpx.get(f"{prefect_server.api_url}/admin/version", headers=headers)
    assert check.status_code == 200 and check.headers["access-control-allow-origin"] == prefect_server.ui_url


def test_prefects_client_works_with_the_credentials(prefect_server: PrefectServer):
    from prefect import get_client

    with get_client(sync_client=True) as client:
        assert client.api_healthcheck() is None
        client.read_flows(limit=1)


def test_credentials_are_made_once_private_and_kept(tmp_path: Path):
    path = tmp_path / "home" / "refinery-server-auth"
    auth_string, created = load_or_create_credentials(path)
    assert created and auth_string.startswith("refinery:") and len(auth_string.split(":", 1)[1]) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_credentials(path) == (auth_string, False)
    os.chmod(path, 0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        load_or_create_credentials(path)
