"""`python -m flows.serve`: a local Prefect server on 127.0.0.1 and the `pipeline` and `retrain` deployments.

Starts `prefect server start` (SQLite under PREFECT_HOME, ~/.prefect by default; analytics off), then
serves both deployments from this process until Ctrl-C, which also stops the server. A flow run executes
the workspace's DVC commands as the serving user, so the server is locked down:
- basic authentication on every API call (the UI asks for the string once); the credentials are made on
  first start and kept in `$PREFECT_HOME/refinery-server-auth` (mode 0600; PREFECT_HOME 0700, the SQLite
  file 0600: the server runs with umask 077);
- the credentials go only to the server this process started: the process listening on the port must be
  it or its child (read from /proc) before any request carries them, so a process that takes the port
  during the server's boot gets nothing; `--attach` checks the listener the same way against the PID a
  `refinery serve` recorded in `$PREFECT_HOME/refinery-server-<port>.json`;
- cross-origin requests only from the UI's own origin, http://127.0.0.1:<port> (Prefect has no setting
  to check the Host header; a DNS-rebinding page is still refused, as it never has the credentials);
- the deployments run only on `--workspace`: it is fixed here, not a run parameter (flows/config.py).
A server already on the port is used only with `--attach`, only if a `refinery serve` started it, and
with its credentials (PREFECT_API_AUTH_STRING, else the stored file). The `retrain` schedule is not
paused on shutdown (Prefect's default for `serve`), so it stays active across restarts of this process.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import os
import secrets
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from flows.config import ROOT, WORKSPACE_ENV

HOST = "127.0.0.1"  # loopback only
SERVER_START_TIMEOUT_S = 120
CREDENTIALS_FILE = "refinery-server-auth"
AUTH_USER = "refinery"
PRIVATE_UMASK = 0o077  # the server's files (SQLite database, its journals) readable by this user only
TCP_LISTEN = "0A"  # the state column of /proc/net/tcp

log = logging.getLogger("refinery.flows.serve")


def client_env(api_url: str, auth_string: str, workspace: Path) -> dict[str, str]:
    """Set before Prefect is imported: its settings are read from the environment at import. Flow runs,
    subprocesses of this one, inherit it."""
    return {"PREFECT_API_URL": api_url, "PREFECT_API_AUTH_STRING": auth_string, WORKSPACE_ENV: str(workspace),
            "DO_NOT_TRACK": "1", "DVC_NO_ANALYTICS": "1",
            # a run started in the UI begins within 2 s instead of Prefect's 10 s poll (a local SQLite server)
            "PREFECT_RUNNER_POLL_FREQUENCY": os.environ.get("PREFECT_RUNNER_POLL_FREQUENCY", "2"),
            # flow runs execute in subprocesses that import `flows.*` and `stages.*` from this checkout
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}


def server_env(port: int, auth_string: str) -> dict[str, str]:
    """The server's own settings: authentication, and CORS for the UI's origin only (Prefect allows `*`)."""
    return {"PREFECT_SERVER_API_HOST": HOST, "PREFECT_SERVER_API_PORT": str(port),
            "PREFECT_SERVER_API_AUTH_STRING": auth_string,
            "PREFECT_SERVER_CORS_ALLOWED_ORIGINS": f"http://{HOST}:{port}",
            "PREFECT_UI_API_URL": f"http://{HOST}:{port}/api",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}


def prefect_home(env: Mapping[str, str] = os.environ) -> Path:
    return Path(env.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()


def credentials_path() -> Path:
    return prefect_home() / CREDENTIALS_FILE


def state_path(home: Path, port: int) -> Path:
    """Where the server started on `port` is recorded (its PID and start time) for `--attach`."""
    return home / f"refinery-server-{port}.json"


def database_path(env: Mapping[str, str]) -> Path | None:
    """The server's SQLite file (Prefect's default: $PREFECT_HOME/prefect.db); None for another database."""
    url = env.get("PREFECT_SERVER_DATABASE_CONNECTION_URL") or env.get("PREFECT_API_DATABASE_CONNECTION_URL")
    if not url:
        return prefect_home(env) / "prefect.db"
    if not url.startswith("sqlite") or ":///" not in url:
        return None
    path = url.split(":///", 1)[1].split("?", 1)[0]
    return Path(path).expanduser() if path and path != ":memory:" else None


def make_private(env: Mapping[str, str]) -> None:
    """PREFECT_HOME 0700 and the SQLite database with its journals 0600, also when made by an older version
    or another tool with wider modes: the database holds every flow run's parameters and logs."""
    home = prefect_home(env)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    database = database_path(env)
    if database is not None:
        for path in (database, *(database.with_name(database.name + s) for s in ("-wal", "-shm", "-journal"))):
            if path.exists():
                os.chmod(path, 0o600)


def load_or_create_credentials(path: Path) -> tuple[str, bool]:
    """The stored auth string (`user:password`), made on first use; returns it and whether it is new."""
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise PermissionError(f"{path} is readable by other users (mode {mode:o}); run `chmod 600 {path}`")
        return path.read_text(encoding="utf-8").strip(), False
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    auth_string = f"{AUTH_USER}:{secrets.token_urlsafe(32)}"
    # O_EXCL + mode: the file never exists with wider permissions, and two first starts cannot both write it
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(auth_string + "\n")
    return auth_string, True


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((HOST, port)) == 0


def _proc_address(packed: bytes) -> str:
    """An address as /proc/net/tcp{,6} spells it: 32-bit words in hex, each in the host's byte order."""
    return "".join(f"{int.from_bytes(packed[i:i + 4], sys.byteorder):08X}" for i in range(0, len(packed), 4))


# The listening addresses a connection to 127.0.0.1 can reach: 127.0.0.1, 0.0.0.0, ::ffff:127.0.0.1 and ::.
_LOOPBACK_LISTENERS = {_proc_address(socket.inet_pton(family, address)) for family, address in (
    (socket.AF_INET, HOST), (socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::ffff:" + HOST), (socket.AF_INET6, "::"))}


def listening_sockets(port: int) -> set[str]:
    """The inodes of the TCP sockets listening on `port` that take connections to 127.0.0.1 (Linux /proc)."""
    if not Path("/proc/net/tcp").exists():
        raise RuntimeError(f"port {port}: cannot tell which process listens on it (no /proc/net/tcp; this "
                           "check needs Linux), so the credentials are not sent")
    inodes = set()
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        for line in table.read_text().splitlines()[1:] if table.exists() else []:  # tcp6: absent without IPv6
            fields = line.split()
            address, _, hex_port = fields[1].partition(":")
            if fields[3] == TCP_LISTEN and int(hex_port, 16) == port and address in _LOOPBACK_LISTENERS:
                inodes.add(fields[9])
    return inodes


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, ...); None once it has ended."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def process_start(pid: int) -> str | None:
    """When process `pid` started (clock ticks after boot): with the PID, names one process, as PIDs are reused."""
    stat = _proc_stat(pid)
    return stat[19] if stat else None


def process_tree(root: int) -> set[int]:
    """`root` and every process descended from it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        stat = _proc_stat(int(entry.name)) if entry.name.isdigit() else None
        if stat:
            children.setdefault(int(stat[1]), []).append(int(entry.name))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo += children.get(pid, [])
    return tree


def socket_inodes(pids: set[int]) -> set[str]:
    """The inodes of the sockets the processes `pids` hold open."""
    inodes = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # ended, or not ours: none of its sockets can count as our server's
        for fd in fds:
            with contextlib.suppress(FileNotFoundError):  # closed while we looked
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:["):-1])
    return inodes


def serves_port(pid: int, port: int) -> bool:
    """Whether every socket listening on `port` for 127.0.0.1 belongs to process `pid` or its children.
    Asked before any request that carries the credentials: a listening socket cannot change hands while it
    is open, so the answer holds for the requests that follow."""
    listening = listening_sockets(port)
    return bool(listening) and listening <= socket_inodes(process_tree(pid))


# No proxy from http_proxy and the like: a request to 127.0.0.1 carrying the credentials must go there only.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def is_healthy(api_url: str) -> bool:
    """`/health` answers without credentials (Prefect exempts it)."""
    try:
        with _DIRECT.open(f"{api_url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def api_status(api_url: str, auth_string: str | None) -> int:
    """HTTP status of an API read (`/admin/version`), with or without the credentials."""
    request = urllib.request.Request(f"{api_url}/admin/version")
    if auth_string is not None:
        token = base64.b64encode(auth_string.encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with _DIRECT.open(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def server_command(port: int, ui: bool) -> list[str]:
    return [str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", HOST, "--port", str(port),
            "--analytics-off", *([] if ui else ["--no-ui"])]


def record_server(path: Path, pid: int) -> None:
    """Write the state file `--attach` checks the listener against: the PID and its start time, mode 0600."""
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"pid": pid, "started": process_start(pid)}, f)
    os.replace(partial, path)


def start_server(port: int, auth_string: str, base_env: Mapping[str, str] = os.environ, ui: bool = True,
                 output: IO | None = None) -> subprocess.Popen:
    """`prefect server start` on the loopback interface; returns once it answers and demands `auth_string`,
    recorded in its state file under PREFECT_HOME."""
    api_url = f"http://{HOST}:{port}/api"
    args = server_command(port, ui)
    make_private(base_env)
    server = subprocess.Popen(args, env={**base_env, **server_env(port, auth_string)}, stdout=output,
                              stderr=subprocess.STDOUT if output else None, umask=PRIVATE_UMASK)
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while not is_healthy(api_url):
        if server.poll() is not None:
            raise RuntimeError(f"`{' '.join(args)}` exited with {server.returncode} (port {port} taken?)")
        if time.monotonic() > deadline:
            server.terminate()
            raise TimeoutError(f"Prefect server did not answer on {api_url} within {SERVER_START_TIMEOUT_S} s")
        time.sleep(0.5)
    # Another process may have taken the port between the caller's check and our server's bind (the boot
    # takes seconds): it answers /health, which carries nothing, but must not see the credentials. Only a
    # listener that is our server process (or its child) gets them.
    if server.poll() is not None or not serves_port(server.pid, port):
        server.terminate()
        raise RuntimeError(f"port {port} is held by another process, not the Prefect server just started; "
                           "stop it or choose another --port")
    if api_status(api_url, None) != 401 or api_status(api_url, auth_string) != 200:
        server.terminate()
        raise RuntimeError(f"port {port}: the server just started does not demand the credentials")
    record_server(state_path(prefect_home(base_env), port), server.pid)
    return server


def check_attached_server(port: int) -> None:
    """Exit with one line unless the process listening on `port` is the server a `refinery serve` started
    there (the PID and start time in its state file) or its child: only that one may see the credentials."""
    path = state_path(prefect_home(), port)
    if not path.is_file():
        sys.exit(f"--attach: no server started by `refinery serve` is recorded for port {port} ({path}); "
                 f"the credentials are not sent to an unknown server")
    state = json.loads(path.read_text(encoding="utf-8"))
    if process_start(state["pid"]) != state["started"] or not serves_port(state["pid"], port):
        sys.exit(f"--attach: the process listening on port {port} is not the server `refinery serve` started "
                 f"(pid {state['pid']}, {path}); the credentials are not sent to it")


def attach_credentials(port: int, api_url: str) -> str:
    """The credentials for `--attach`: PREFECT_API_AUTH_STRING, else the stored file; checked against the server,
    once it is known to be the one `refinery serve` started."""
    check_attached_server(port)
    auth_string = os.environ.get("PREFECT_API_AUTH_STRING")
    if not auth_string and credentials_path().is_file():
        auth_string, _ = load_or_create_credentials(credentials_path())
    if not auth_string:
        sys.exit(f"--attach: no credentials for the server on port {port}: set PREFECT_API_AUTH_STRING")
    status = api_status(api_url, auth_string)
    if status != 200:
        sys.exit(f"--attach: the server on port {port} refused the credentials (HTTP {status})")
    if api_status(api_url, None) == 200:
        log.warning("the server on port %d answers without credentials: anyone on this machine can start runs",
                    port)
    return auth_string


def deployments(workspace: Path) -> list:
    """The `pipeline` deployment (every UI run is a DVC experiment) and the scheduled `retrain`."""
    from prefect.deployments.runner import EntrypointType
    from prefect.schedules import Cron

    from flows.config import load_config
    from flows.pipeline import pipeline
    from flows.retrain import retrain

    cfg = load_config(workspace)
    common = {"entrypoint_type": EntrypointType.MODULE_PATH, "tags": ["refinery"]}
    return [
        pipeline.to_deployment(
            name="pipeline", parameters={"experiment": True}, **common,
            description=f"Reproduce every DVC stage of {workspace} as a DVC experiment (`dvc exp show`); "
                        "set_params takes `dvc exp run --set-param` overrides such as train.max_steps=50."),
        retrain.to_deployment(
            name="retrain", **common,
            schedules=[Cron(cfg.retrain.cron, timezone=cfg.retrain.timezone)],
            description=f"On new raw data in {workspace}: rebuild, score against the champion, promote only "
                        "if better."),
    ]


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("REFINERY_PREFECT_PORT", "4200")),
                        help="the server's port on 127.0.0.1 (default: $REFINERY_PREFECT_PORT, else 4200)")
    parser.add_argument("--workspace", type=Path, default=ROOT,
                        help="the DVC repository the flows run on (default: this checkout; `refinery serve`: the "
                             "current folder)")
    parser.add_argument("--attach", action="store_true",
                        help="use the server another `refinery serve` started on --port (credentials: "
                             "PREFECT_API_AUTH_STRING, else the stored file) instead of starting one")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per API request otherwise
    api_url = f"http://{HOST}:{args.port}/api"
    ui_url = f"http://{HOST}:{args.port}"
    workspace = args.workspace.resolve()
    server = None
    if args.attach:
        if not port_in_use(args.port):
            sys.exit(f"--attach: nothing answers on port {args.port}")
        auth_string = attach_credentials(args.port, api_url)
        log.info("Prefect UI: %s (attached to the server already running)", ui_url)
    else:
        if port_in_use(args.port):
            sys.exit(f"port {args.port} is already in use by a server flows.serve did not start: stop it, "
                     f"choose another --port, or pass --attach to use it")
        path = credentials_path()
        auth_string, created = load_or_create_credentials(path)
        server = start_server(args.port, auth_string)
        if created:
            log.info("Prefect UI login, shown this once (kept in %s, mode 0600): %s", path, auth_string)
        log.info("Prefect UI: %s (log in with the string in %s)", ui_url, path)
    os.environ.update(client_env(api_url, auth_string, workspace))
    try:
        from prefect import serve

        serve(*deployments(workspace), pause_on_shutdown=False)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
            state_path(prefect_home(), args.port).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
