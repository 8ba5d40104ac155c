"""A minimal HTTP/1.1 endpoint on the process's event loop, for the metrics scrape and the
dashboard: one request per connection, a request head and body of bounded size, and a handler
that turns (method, path, body) into (status, content type, body). Handlers run on the loop, so
they read the process's state without locks."""

import asyncio
import logging
from collections.abc import Awaitable, Callable

from quorumq import limits
from quorumq.errors import Error, QuorumqError

log = logging.getLogger("quorumq.http")

JSON = "application/json"  # the only body a POST may carry (serve_http says why)
READ_TIMEOUT_S = 5.0  # a client that sends no whole request is dropped
Response = tuple[str, str, bytes]  # status line ("200 OK"), content type, body
Handler = Callable[[str, str, bytes], Awaitable[Response]]


async def serve_http(host: str, port: int, handler: Handler, what: str) -> asyncio.Server:
    """Listen on host:port; `what` names the server in the error a taken port gives."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, path = (request_line.split(" ") + ["", ""])[:2]
            length = next((int(line.partition(":")[2]) for line in header_lines
                           if line.lower().startswith("content-length:")), 0)
            content_type = next((line.partition(":")[2].partition(";")[0].strip().lower() for line in header_lines
                                 if line.lower().startswith("content-type:")), "")
            if not 0 <= length <= limits.HTTP_BODY_BYTES_MAX:
                response = ("413 Content Too Large", "text/plain", b"request body too large\n")
            elif method == "POST" and content_type != JSON:
                # Another site's page can make a browser POST a form or text/plain here with no CORS
                # preflight; a JSON POST needs one, which this server never grants.
                response = ("415 Unsupported Media Type", "text/plain", b"a POST must be application/json\n")
            else:
                body = await asyncio.wait_for(reader.readexactly(length), READ_TIMEOUT_S) if length else b""
                response = await _answer(handler, method, path.partition("?")[0], body)
            status, content_type, payload = response
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(payload)}\r\n"
                         f"Connection: close\r\n\r\n".encode() + payload)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError, ValueError):
            pass  # a client that went away or sent no well-formed request
        finally:
            writer.close()

    try:
        return await asyncio.start_server(serve, host, port, limit=limits.HTTP_HEAD_BYTES_MAX)
    except OSError as error:
        raise QuorumqError(Error.CONFIG_INVALID, f"cannot listen on {host}:{port} for {what}: "
                                                 f"{error.strerror}") from None


async def _answer(handler: Handler, method: str, path: str, body: bytes) -> Response:
    try:
        return await handler(method, path, body)
    except Exception:  # a handler's bug: logged, answered 500, the process keeps serving
        log.exception("%s %s failed", method, path)
        return "500 Internal Server Error", "text/plain", b"see the log\n"
