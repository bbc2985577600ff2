"""A scriptable fake OpenAI-compatible model server, for tests (psych-runtime's and users').

`FakeModel` is a real HTTP/1.1 server on loopback that speaks the chat-completions protocol
(`POST /v1/chat/completions`, JSON or SSE streaming, and `GET /v1/models`). A test scripts
what the model says with `Reply` values queued in order, or with a `responder` callable, and
afterwards inspects every request the server received (unless made with `record=False`)::

    async with FakeModel() as model:
        model.enqueue(
            Reply.tool_calls(ToolCall("get_weather", {"city": "Paris"})),
            Reply.text("It is sunny."),
        )
        ...  # point the code under test at model.base_url
        assert model.requests[1]["messages"][-1]["role"] == "tool"

Besides answers, a script can fail the way real providers do: HTTP errors with Retry-After,
tool calls whose arguments are not JSON, streams that stall or drop mid-way.

The server is a raw asyncio socket server driven by h11 rather than uvicorn/starlette:
dropping a connection mid-stream or without any response, which `Reply.abort` needs, is not
expressible through ASGI (uvicorn answers 500 instead), and uvicorn would also take over the
process's signal handlers and logging configuration when started from a test. h11 is the
HTTP/1.1 parser httpx itself is built on, so it costs no extra install.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, Self

import h11

from psych_runtime.testing._http import _Drop, _read_request, _Response, _send
from psych_runtime.testing._openai import _error, _usage
from psych_runtime.testing._replies import Reply

_CHAT_PATH = "/v1/chat/completions"
_MODELS_PATH = "/v1/models"


class FakeModel:
    """A scriptable OpenAI-compatible chat-completions server on loopback.

    Start it in the running loop with `async with FakeModel() as model:`, or in a
    background thread for sync code with `start_in_thread()` / `stop()` (or
    `with FakeModel() as model:`). Point the client under test at `base_url`.

    Each chat-completions request is answered by, in order: the next reply queued for the
    requested model, the next reply in the shared queue, then `responder`. With none of
    these the server answers 500 `fake model: script exhausted (request N)`, so a test
    whose script is too short fails loudly instead of hanging. A model id not in `models`
    gets 404 `model_not_found` without consuming a reply.

    Attributes:
        responder: called with the parsed request body when no queued reply matches;
            returns the `Reply` to act out. Lets tests and benchmarks script dynamically.
        requests: every chat-completions request body received while `record` is true, in
            order, including those answered with errors. Bodies that are not a JSON object
            get 400 and are not recorded. The N in an error's "(request N)" counts every
            chat request with a JSON body since the server was made, recorded or not.
        headers: the request headers, parallel to `requests`, with lowercased names.
        streams_whole: how many streamed replies were sent to their end.
        streams_cut: how many streamed replies the client went away from before their
            end (a model call cancelled, or its worker lost, mid-answer); during a
            `Reply.stall`'s silence a client leaving is seen within 50 ms, as a provider
            would see it, not when the silence ends.
        reports_usage: whether answers carry a `usage` object (and a stream its usage
            chunk); set it false to act a provider that reports none.
        record: whether requests and their headers are kept (set it false in a server
            that serves many requests, e.g. `psych dev --fake-model` or a benchmark, or its
            process holds every body it was ever sent). Switching it, or reading or
            clearing the lists, while a request is in flight may count that request on
            either side.
    """

    def __init__(
        self,
        *,
        models: Iterable[str] = ("fake-model",),
        host: str = "127.0.0.1",
        record: bool = True,
    ) -> None:
        """Create a stopped server.

        Args:
            models: the model ids the server knows; others get 404.
            host: the address to bind; the port is chosen by the OS.
            record: keep each request body and its headers (`requests`, `headers`).
        """
        self.models: tuple[str, ...] = tuple(models)
        self.host = host
        self.record = record
        self.reports_usage = True
        self.responder: Callable[[dict[str, Any]], Reply] | None = None
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.streams_whole = 0
        self.streams_cut = 0
        self._received = 0
        self._shared: deque[Reply] = deque()
        self._per_model: dict[str, deque[Reply]] = {}
        # Tests enqueue from their own thread while a thread-mode server consumes.
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._call_ids = itertools.count(1)
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self._thread_stop: asyncio.Event | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. `http://127.0.0.1:43211/v1`; valid once started."""
        if self._port is None:
            raise RuntimeError("FakeModel is not running; start it first")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}/v1"

    @contextlib.contextmanager
    def recorded(self) -> Iterator[list[dict[str, Any]]]:
        """Record the request bodies received inside the block, whatever `record` says.

        Yields a list that holds them once the block has ended. Afterwards `record` is
        what it was; a server that was not recording keeps none of them in `requests`.
        """
        bodies: list[dict[str, Any]] = []
        recording, first = self.record, len(self.requests)
        self.record = True
        try:
            yield bodies
        finally:
            with self._lock:
                bodies.extend(self.requests[first:])
                self.record = recording
                if not recording:
                    del self.requests[first:], self.headers[first:]

    def enqueue(self, *replies: Reply, model: str | None = None) -> None:
        """Queue replies, answered first in, first out.

        Args:
            *replies: the replies, in the order requests will get them.
            model: queue them for requests naming this model only; None queues them for
                any model, after that model's own queue is empty.
        """
        with self._lock:
            if model is None:
                self._shared.extend(replies)
            else:
                self._per_model.setdefault(model, deque()).extend(replies)

    async def __aenter__(self) -> Self:
        """Start serving in the running loop."""
        if self._server is not None:
            raise RuntimeError("FakeModel is already running")
        self._server = await asyncio.start_server(self._serve_connection, self.host, 0)
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop serving, cutting open connections (a stalled stream would hold them)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
        self._port = None

    def start_in_thread(self) -> Self:
        """Start serving from a background thread with its own event loop, for sync code.

        Returns once the server accepts connections. Stop it with `stop()`.
        """
        if self._thread is not None or self._server is not None:
            raise RuntimeError("FakeModel is already running")
        started = threading.Event()
        failure: list[BaseException] = []

        async def serve() -> None:
            self._thread_loop = asyncio.get_running_loop()
            self._thread_stop = asyncio.Event()
            async with self:
                started.set()
                await self._thread_stop.wait()

        def run() -> None:
            try:
                asyncio.run(serve())
            except BaseException as err:  # handed to the starting thread, not lost
                failure.append(err)
            finally:
                started.set()

        self._thread = threading.Thread(target=run, name="fake-model", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise RuntimeError("FakeModel failed to start") from failure[0]
        return self

    def stop(self) -> None:
        """Stop a server started with `start_in_thread()`; a no-op when it is not running."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        loop, stop = self._thread_loop, self._thread_stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop.set)
        thread.join()
        self._thread_loop = self._thread_stop = None

    def __enter__(self) -> Self:
        """Start serving in a background thread; see `start_in_thread()`."""
        return self.start_in_thread()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the background server."""
        self.stop()

    # --- HTTP plumbing -------------------------------------------------------------------

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        conn = h11.Connection(h11.SERVER)
        streaming = False
        try:
            while True:
                received = await _read_request(conn, reader)
                if received is None:
                    return
                request, body = received
                response = self._handle(request, body)
                streaming = response.chunks is not None
                await _send(conn, reader, writer, response)
                self.streams_whole += streaming
                streaming = False
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except _Drop:
            # The `finally` closes rather than aborts the transport: abort() would discard
            # chunks still buffered, and the client sees a truncated message either way.
            pass
        except ConnectionError:
            # The client went away; nothing useful left to say.
            self.streams_cut += streaming
        except h11.ProtocolError:
            # The client spoke broken HTTP.
            pass
        except asyncio.CancelledError:
            # Only `__aexit__` cancels these tasks, and waits for them. Re-raising would make
            # asyncio's stream machinery log the cancellation as an error (Python 3.11).
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _handle(self, request: h11.Request, body: bytes) -> _Response:
        method = request.method.decode()
        path = request.target.decode().split("?", 1)[0].rstrip("/")
        if path == _MODELS_PATH and method == "GET":
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models
            ]
            return _Response(200, {"object": "list", "data": data})
        if path != _CHAT_PATH or method != "POST":
            return _error(404, f"fake model: no route for {method} {path}", code="not_found")
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            return _error(400, "fake model: request body is not a JSON object")
        self._received += 1
        if self.record:
            headers: dict[str, str] = {}
            for name, value in request.headers:
                key = name.decode().lower()
                headers[key] = (
                    f"{headers[key]}, {value.decode()}" if key in headers else value.decode()
                )
            with self._lock:  # a thread-mode server: the two lists change together
                self.requests.append(parsed)
                self.headers.append(headers)
        return self._answer(parsed, self._received)

    def _answer(self, body: dict[str, Any], number: int) -> _Response:
        model = body.get("model")
        if not isinstance(model, str):
            return _error(400, "you must provide a model parameter", code="missing_model")
        if model not in self.models:
            return _error(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                code="model_not_found",
                type_="invalid_request_error",
            )
        try:
            reply = self._next_reply(body, model)
        except Exception as err:  # a broken responder should fail the test, not the server
            return _error(500, f"fake model: responder raised {err!r} (request {number})")
        if reply is None:
            return _error(500, f"fake model: script exhausted (request {number})")
        return self._act_out(reply, body, model)

    def _next_reply(self, body: dict[str, Any], model: str) -> Reply | None:
        with self._lock:
            own = self._per_model.get(model)
            if own:
                return own.popleft()
            if self._shared:
                return self._shared.popleft()
        return None if self.responder is None else self.responder(body)

    def _act_out(self, reply: Reply, body: dict[str, Any], model: str) -> _Response:
        streaming = body.get("stream") is True
        if reply.kind == "error":
            response = _error(reply.status, reply.message)
            if reply.retry_after is not None:
                response.headers += [
                    ("retry-after", f"{reply.retry_after:g}"),
                    ("retry-after-ms", str(round(reply.retry_after * 1000))),
                ]
            return response
        if reply.kind == "abort" and not streaming:
            raise _Drop
        inner = reply.then if reply.then is not None else reply
        if not streaming:
            response = _Response(200, self._completion(inner, body, model))
            if reply.kind == "stall":
                response.delay = reply.seconds
            return response
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        include_usage = include_usage and self.reports_usage
        chunks = self._chunks(inner, body, model, include_usage=include_usage)
        response = _Response(
            200, headers=[("content-type", "text/event-stream"), ("cache-control", "no-cache")]
        )
        response.chunks = chunks
        response.chunk_delay = inner.chunk_seconds
        if reply.kind == "stall":
            response.pause_after = min(reply.after_chunks, len(chunks))
            response.pause_seconds = reply.seconds
        elif reply.kind == "abort":
            response.drop_after = reply.after_chunks
        return response

    # --- OpenAI payloads -----------------------------------------------------------------

    def _tool_calls(self, reply: Reply) -> list[tuple[str, str, str]]:
        return [
            (
                call.id if call.id is not None else f"call_{next(self._call_ids)}",
                call.name,
                call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments),
            )
            for call in reply.calls
        ]

    def _completion(self, reply: Reply, body: dict[str, Any], model: str) -> dict[str, Any]:
        calls = self._tool_calls(reply)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.content if reply.content or not calls else None,
            "refusal": None,
        }
        if calls:
            message["tool_calls"] = [
                {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}
                for id_, name, args in calls
            ]
        return {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": _finish(reply, calls),
                }
            ],
            **({"usage": _usage(reply, calls, body)} if self.reports_usage else {}),
        }

    def _chunks(
        self, reply: Reply, body: dict[str, Any], model: str, *, include_usage: bool
    ) -> list[dict[str, Any]]:
        calls = self._tool_calls(reply)
        size = reply.chunk_size
        deltas: list[dict[str, Any]] = [
            {"content": reply.content[i : i + size]} for i in range(0, len(reply.content), size)
        ]
        for index, (id_, name, args) in enumerate(calls):
            deltas.append(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": id_,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
            deltas += [
                {"tool_calls": [{"index": index, "function": {"arguments": args[i : i + size]}}]}
                for i in range(0, len(args), size)
            ]
        if not deltas:
            deltas.append({"content": ""})
        # Real providers announce the role once, in the first delta.
        deltas[0] = {"role": "assistant", **deltas[0]}
        base = {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        # With include_usage every chunk carries `usage: null` until the final usage chunk.
        extra: dict[str, Any] = {"usage": None} if include_usage else {}
        chunks = [
            {
                **base,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}],
                **extra,
            }
            for delta in deltas
        ]
        finish = _finish(reply, calls)
        chunks.append(
            {
                **base,
                "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}],
                **extra,
            }
        )
        if include_usage:
            chunks.append({**base, "choices": [], "usage": _usage(reply, calls, body)})
        return chunks


def _finish(reply: Reply, calls: object) -> str:
    """The finish reason of ``reply``'s answer (``calls``: the tool calls it makes)."""
    return "tool_calls" if calls else "length" if reply.cut_off else "stop"
