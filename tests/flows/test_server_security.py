"""The server `flows.serve` starts, over HTTP: credentials required, CORS for its own origin only, and the UI
and Prefect's own client working with the credentials; the credentials sent only to that server, never to
another process that holds its port; its files private."""
from __future__ import annotations

import base64
import http.server
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from flows import serve
from flows.serve import CREDENTIALS_FILE, load_or_create_credentials
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


class _Impostor(http.server.BaseHTTPRequestHandler):
    """Answers as the server would (/health 200, 401 without credentials, 200 with any) and records every
    request it receives, headers included."""
    received: list[str]

    def do_GET(self) -> None:
        self.received.append(self.requestline + "\n" + str(self.headers))
        status = 200 if self.path.endswith("/health") or "Authorization" in self.headers else 401
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args) -> None:
        pass


@pytest.fixture
def impostor() -> Iterator[tuple[int, list[str]]]:
    """(port, requests received): a process other than the server listening on 127.0.0.1 first."""
    received: list[str] = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_Impostor,), {"received": received}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], received
    finally:
        server.shutdown()
        server.server_close()


def leaked(auth_string: str, received: list[str]) -> bool:
    seen = "\n".join(received)
    return any(s in seen for s in (auth_string, auth_string.split(":", 1)[1], basic(auth_string)["Authorization"]))


def test_start_sends_no_credentials_to_a_process_that_took_the_port(impostor, tmp_path: Path, monkeypatch):
    """The race during the server's boot: another process binds the port first and answers like Prefect."""
    port, received = impostor
    # A stand-in for `prefect server start` that boots slowly and never binds: the impostor keeps the port.
    monkeypatch.setattr(serve, "server_command", lambda port, ui: [sys.executable, "-c", "import time; time.sleep(60)"])
    auth_string = "refinery:" + "s3cr3t-" * 6
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "home")}
    with pytest.raises(RuntimeError) as e:
        server = serve.start_server(port, auth_string, base_env=env)
        server.terminate()
    assert str(e.value) == (f"port {port} is held by another process, not the Prefect server just started; "
                            "stop it or choose another --port")
    assert received and not leaked(auth_string, received), received  # it was asked /health, nothing more
    assert not serve.state_path(tmp_path / "home", port).exists()


def test_attach_sends_no_credentials_to_a_server_refinery_serve_did_not_start(impostor, tmp_path: Path,
                                                                               monkeypatch):
    port, received = impostor
    auth_string = "refinery:" + "s3cr3t-" * 6
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    monkeypatch.setenv("PREFECT_API_AUTH_STRING", auth_string)
    api_url = f"http://127.0.0.1:{port}/api"
    state = serve.state_path(tmp_path, port)
    with pytest.raises(SystemExit) as unknown:
        serve.attach_credentials(port, api_url)
    assert str(unknown.value) == (f"--attach: no server started by `refinery serve` is recorded for port {port} "
                                  f"({state}); the credentials are not sent to an unknown server")
    # A state file naming a live process that is not the listener: the server that `refinery serve` started
    # stopped, and another process took its port.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        serve.record_server(state, other.pid)
        with pytest.raises(SystemExit) as replaced:
            serve.attach_credentials(port, api_url)
    finally:
        other.kill()
        other.wait()
    assert str(replaced.value) == (f"--attach: the process listening on port {port} is not the server `refinery "
                                   f"serve` started (pid {other.pid}, {state}); the credentials are not sent to it")
    assert not received  # not even a request without credentials
    assert stat.S_IMODE(state.stat().st_mode) == 0o600


def test_the_servers_home_database_and_files_are_private(prefect_server: PrefectServer):
    """The server made its SQLite file (and journals) under umask 077; the credentials and state file 0600."""
    home = Path(os.environ["PREFECT_HOME"])
    files = [*home.glob("prefect.db*"), home / CREDENTIALS_FILE, serve.state_path(home, prefect_server.port)]
    assert (home / "prefect.db").is_file() and all(f.is_file() for f in files)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {f.name: 0o600 for f in files}
    state = json.loads(serve.state_path(home, prefect_server.port).read_text())
    assert serve.serves_port(state["pid"], prefect_server.port)


def test_an_existing_home_and_database_are_made_private(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    for name in ("prefect.db", "prefect.db-wal"):
        (home / name).write_bytes(b"")
        os.chmod(home / name, 0o644)
    os.chmod(home, 0o755)
    serve.make_private({"PREFECT_HOME": str(home)})
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert [stat.S_IMODE((home / n).stat().st_mode) for n in ("prefect.db", "prefect.db-wal")] == [0o600, 0o600]
    elsewhere = tmp_path / "db" / "other.db"  # a database named by its connection URL
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(b"")
    os.chmod(elsewhere, 0o644)
    serve.make_private({"PREFECT_HOME": str(home),
                        "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{elsewhere}"})
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o600
