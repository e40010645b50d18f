"""A loopback TCP proxy the tests control: pass traffic, hold it (blackhole), or cut every connection."""

from __future__ import annotations

import selectors
import socket
import threading
from collections.abc import Callable


class Proxy:
    """Forwards 127.0.0.1:<port> to an upstream socket made by `upstream()`.

    `blackhole()` stops delivering bytes in both directions but keeps them
    (a network partition: nothing arrives, nothing is refused);
    `hold_replies()` does so only for the server's bytes (a statement
    reaches the server and runs, its answer is late); `restore()` delivers
    what was held, late, and forwards again. `cut()` closes every
    open connection at once (new ones are still accepted).
    """

    def __init__(self, upstream: Callable[[], socket.socket]) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._peers: dict[socket.socket, socket.socket] = {}
        self._held: list[tuple[socket.socket, bytes]] = []
        self._holding = False
        self._holding_replies = False
        self._servers: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._cut_done = threading.Event()
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def blackhole(self) -> None:
        with self._lock:
            self._holding = True

    def hold_replies(self) -> None:
        with self._lock:
            self._holding_replies = True

    def restore(self) -> None:
        with self._lock:
            self._holding = self._holding_replies = False
            held, self._held = self._held, []
        for sock, data in held:
            try:
                sock.sendall(data)
            except OSError:
                pass

    def cut(self) -> None:
        # Done on the proxy's thread, which owns the sockets.
        done = threading.Event()
        self._cut_done = done
        self._wake_w.send(b"c")
        done.wait(5)

    def close(self) -> None:
        self._closed = True
        self._wake_w.send(b"x")
        self._thread.join(5)
        self._cut_all()
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        self._sel.close()

    def _cut_all(self) -> None:
        with self._lock:
            socks = list(self._peers)
        for sock in socks:
            self._drop(sock)

    def _loop(self) -> None:
        while not self._closed:
            for key, _ in self._sel.select(timeout=0.2):
                if key.data == "wake":
                    self._wake_r.recv(64)
                    if self._closed:
                        return
                    self._cut_all()
                    self._cut_done.set()
                    continue
                if key.fileobj is self._listener:
                    self._accept()
                else:
                    self._pump(key.fileobj)  # type: ignore[arg-type]

    def _accept(self) -> None:
        client, _ = self._listener.accept()
        try:
            server = self._upstream()
        except OSError:
            client.close()
            return
        with self._lock:
            self._peers[client] = server
            self._peers[server] = client
            self._servers.add(server)
        self._sel.register(client, selectors.EVENT_READ, "peer")
        self._sel.register(server, selectors.EVENT_READ, "peer")

    def _pump(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        with self._lock:
            other = self._peers.get(sock)
            if other is None:
                return
            if data and (self._holding or (self._holding_replies and sock in self._servers)):
                self._held.append((other, data))
                return
        if not data:
            self._drop(sock)
            return
        try:
            other.sendall(data)
        except OSError:
            self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        with self._lock:
            other = self._peers.pop(sock, None)
            if other is not None:
                self._peers.pop(other, None)
            self._servers.difference_update((sock, other))
        for s in (sock, other):
            if s is None:
                continue
            try:
                self._sel.unregister(s)
            except (KeyError, ValueError):
                pass
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
