"""What the request handlers and a client's session use of the engine, and of a session.

engine/daemon/server.py's Engine owns the handlers and the sessions; they see it through these
Protocols instead of importing the server, so the daemon's modules import one way only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from engine.api.paths import Paths
    from engine.api.protocol import RpcError
    from engine.daemon.access import Access, User
    from engine.daemon.eventbus import EventBus
    from engine.daemon.hosts import Hosts
    from engine.daemon.inference import WorkerPool
    from engine.daemon.jobs import JobManager
    from engine.daemon.store import Store


class Client(Protocol):
    """One client connection (engine/daemon/session.py's Session)."""

    name: str
    user: User
    remote: str | None  # the peer's address over the network; None on the engine's own socket
    subscriptions: set[int]

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...


class Dispatcher(Protocol):
    """Answers one request (engine/daemon/handlers's Handlers)."""

    async def dispatch(self, session: Client, method: str, params: dict[str, Any]) -> Any: ...


class EngineView(Protocol):
    """The running engine (engine/daemon/server.py's Engine)."""

    paths: Paths
    started_at: float
    store: Store
    access: Access
    store_health: dict[str, Any]
    bus: EventBus
    hosts: Hosts
    jobs: JobManager
    inference: WorkerPool
    sessions: set[Any]
    token: str
    tls: dict[str, str]
    handlers: Dispatcher

    def request_stop(self, reason: str) -> None: ...

    def login_failed(self, address: str, user: str | None = None) -> None: ...

    def login_refusal(self, address: str, user: str | None = None) -> RpcError | None: ...
