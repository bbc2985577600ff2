"""Credentials to Scopes: API keys by their SHA-256, JWTs against a JWKS served by a real
loopback HTTP server from a key generated here."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from psych_runtime.specs import Scope, SpecError
from psych_runtime.workers.serve import (
    ApiKey,
    Authenticator,
    AuthSettings,
    JwtSettings,
    NotPublisher,
    Unauthorized,
    parse_serve_section,
)
from psych_runtime.workers.serve._auth import (
    JWKS_COOLDOWN_SECONDS,
    JWKS_LIFESPAN_SECONDS,
    JWKS_RETRY_SECONDS,
    JWKS_STALE_MAX_SECONDS,
    JWKS_TIMEOUT_SECONDS,
    IssuerKeys,
    IssuerUnavailable,
)
from psych_runtime.workers.serve._problems import problem_for

from ._app import api

pytestmark = pytest.mark.long

ISSUER = "https://idp.acme.test/"
AUDIENCE = "psych"


@pytest.fixture(scope="module")
def signing_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def jwks_url(signing_key: rsa.RSAPrivateKey) -> Iterator[str]:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(signing_key.public_key()))
    document = json.dumps({"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]})

    class Jwks(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = document.encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    finally:
        server.shutdown()
        server.server_close()


def token(key: rsa.RSAPrivateKey, kid: str = "k1", **overrides: Any) -> str:
    claims = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "org": "acme",
        "exp": int(time.time()) + 300,
        **overrides,
    }
    claims = {name: value for name, value in claims.items() if value is not None}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


def authenticator(jwks_url: str, *keys: ApiKey) -> Authenticator:
    settings = JwtSettings(jwks_url, ISSUER, AUDIENCE, ("RS256",), tenant_claim="org")
    return Authenticator(AuthSettings(keys, settings))


async def test_a_verified_token_maps_its_claims_to_the_scope(
    signing_key: rsa.RSAPrivateKey, jwks_url: str
) -> None:
    scope = await authenticator(jwks_url).scope_for(f"Bearer {token(signing_key)}")
    assert scope == Scope(tenant="acme", principal="alice")


@pytest.mark.parametrize(
    ("claims", "why"),
    [
        ({"exp": int(time.time()) - 600}, "expired"),
        ({"aud": "someone-else"}, "(?i)audience"),
        ({"iss": "https://evil.test/"}, "(?i)issuer"),
        ({"org": None}, "no string claim 'org'"),
        ({"org": "acme-corp"}, "claim 'org' is not a valid tenant"),
        ({"org": "a" * 129}, "claim 'org' is not a valid tenant"),
        # Named the tenant claim, which was good: the principal is what is too long.
        ({"sub": "u" * 257}, "claim 'sub' is not a valid principal .at most 256 characters"),
    ],
)
async def test_a_token_that_does_not_verify_is_refused_naming_why(
    signing_key: rsa.RSAPrivateKey, jwks_url: str, claims: dict[str, Any], why: str
) -> None:
    with pytest.raises(Unauthorized, match=why):
        await authenticator(jwks_url).scope_for(f"Bearer {token(signing_key, **claims)}")


async def test_a_token_signed_by_another_key_or_kid_is_refused(
    signing_key: rsa.RSAPrivateKey, jwks_url: str
) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    auth = authenticator(jwks_url)
    with pytest.raises(Unauthorized, match="refused"):
        await auth.scope_for(f"Bearer {token(other)}")
    with pytest.raises(Unauthorized, match="not in the JWKS"):
        await auth.scope_for(f"Bearer {token(signing_key, kid='k2')}")
    # The public key used as an HMAC secret (algorithm confusion) is not accepted.
    forged = jwt.encode(
        {"iss": ISSUER, "aud": AUDIENCE, "org": "acme", "exp": int(time.time()) + 60},
        "an-hmac-secret-of-at-least-32-bytes!",
        algorithm="HS256",
        headers={"kid": "k1"},
    )
    with pytest.raises(Unauthorized):
        await auth.scope_for(f"Bearer {forged}")


async def test_api_keys_are_kept_hashed_and_matched_whole(jwks_url: str) -> None:
    key = ApiKey.of("s3cret-key", "globex", "bot")
    assert "s3cret" not in repr(key)
    auth = authenticator(jwks_url, key)
    assert await auth.scope_for("Bearer s3cret-key") == Scope(tenant="globex", principal="bot")
    for wrong in ("Bearer s3cret-ke", "Bearer s3cret-key2", "bearer"):
        with pytest.raises(Unauthorized):
            await auth.scope_for(wrong)
    with pytest.raises(ValueError, match="64 lowercase hex"):
        ApiKey("s3cret-key", "globex")


async def test_a_publisher_is_named_by_the_operator_never_by_default(
    signing_key: rsa.RSAPrivateKey, jwks_url: str
) -> None:
    keys = (ApiKey.of("ops-key", "acme", "ops", publisher=True), ApiKey.of("app-key", "acme"))
    auth = authenticator(jwks_url, *keys)
    assert (await auth.caller_for("Bearer ops-key")).publisher
    assert not (await auth.caller_for("Bearer app-key")).publisher
    with pytest.raises(NotPublisher, match="may not publish"):
        (await auth.caller_for("Bearer app-key")).publishing()
    # A token publishes only when the operator names a claim and the token holds true in it.
    claimed = token(signing_key, psych_publisher=True)
    assert not (await auth.caller_for(f"Bearer {claimed}")).publisher
    settings = JwtSettings(
        jwks_url,
        ISSUER,
        AUDIENCE,
        ("RS256",),
        tenant_claim="org",
        publisher_claim="psych_publisher",
    )
    with_claim = Authenticator(AuthSettings((), settings))
    assert (await with_claim.caller_for(f"Bearer {claimed}")).publisher
    for value in ("true", 1, None):
        other = token(signing_key, psych_publisher=value)
        assert not (await with_claim.caller_for(f"Bearer {other}")).publisher


def test_the_serve_section_is_checked_naming_each_path() -> None:
    digest = ApiKey.of("k", "acme").sha256
    section = parse_serve_section(
        {
            "api_keys": [
                {"sha256": digest, "tenant": "acme", "principal": "ops", "publisher": True},
                {"sha256": digest, "tenant": "globex"},
            ],
            "jwt": {"jwks_url": "http://127.0.0.1/j", "issuer": "i", "audience": "a"},
            "max_body_bytes": 1024,
        },
        "settings.yaml",
    )
    assert section.auth.api_keys == (
        ApiKey(digest, "acme", "ops", publisher=True),
        ApiKey(digest, "globex"),
    )
    assert section.auth.jwt is not None and section.auth.jwt.algorithms == ("RS256", "ES256")
    assert section.max_body_bytes == 1024
    bad = [
        ({"listen": 1}, "settings.yaml: serve.listen: unknown setting"),
        ({"api_keys": [{"sha256": digest}]}, r"serve.api_keys\[0\]: tenant is required"),
        ({"api_keys": [{"sha256": "x", "tenant": "a"}]}, "64 lowercase hex"),
        # YAML's block scalar (`sha256: |`) ends the digest with a newline: no key would
        # ever match it, so it is refused where it is written.
        ({"api_keys": [{"sha256": digest + "\n", "tenant": "a"}]}, "64 lowercase hex"),
        (
            {"api_keys": [{"sha256": digest, "tenant": "a", "publisher": "yes"}]},
            r"serve.api_keys\[0\]: publisher must be true or false",
        ),
        ({"jwt": {"issuer": "i"}}, "serve.jwt: jwks_url, issuer and audience are required"),
        (
            {"jwt": {"jwks_url": "u", "issuer": "i", "audience": "a", "algorithms": ["none"]}},
            "none",
        ),
        ({"max_body_bytes": 0}, "serve.max_body_bytes: a positive number"),
    ]
    for data, message in bad:
        with pytest.raises(SpecError, match=message):
            parse_serve_section(data, "settings.yaml")


def test_jwt_settings_of_the_wrong_type_are_refused_at_start_naming_each() -> None:
    # Accepted, each made every request with a token fail (a 500): a leeway of "30" is
    # added to the token's exp, a list is no claim's name.
    base = {"jwks_url": "http://127.0.0.1/j", "issuer": "i", "audience": "a"}
    bad: list[tuple[dict[str, Any], str]] = [
        ({"leeway_seconds": "30"}, "leeway_seconds: a number of seconds from 0, not '30'"),
        ({"leeway_seconds": -5}, "leeway_seconds: a number of seconds from 0, not -5"),
        ({"leeway_seconds": True}, "leeway_seconds: a number of seconds from 0"),
        ({"tenant_claim": ["org"]}, r"tenant_claim: a string, not \['org'\]"),
        ({"principal_claim": 7}, "principal_claim: a string, not 7"),
        ({"audience": 7}, "audience: a string, not 7"),
        ({"jwks_url": 5}, "jwks_url: a string, not 5"),
        ({"publisher_claim": 5}, "publisher_claim: a claim's name, not 5"),
        ({"algorithms": ["RS256", 5]}, "algorithms: a list of algorithm names"),
    ]
    for extra, message in bad:
        with pytest.raises(SpecError, match=message):
            parse_serve_section({"jwt": {**base, **extra}}, "settings.yaml")
    with pytest.raises(ValueError, match=r"jwt\.leeway_seconds"):
        JwtSettings("http://127.0.0.1/j", "i", "a", leeway_seconds="30")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"jwt\.algorithms: algorithm names"):
        JwtSettings("http://127.0.0.1/j", "i", "a", algorithms=(5,))  # type: ignore[arg-type]
    assert parse_serve_section({"jwt": {**base, "leeway_seconds": 0}}, "s").auth.jwt is not None


@contextmanager
def answering(body: bytes) -> Iterator[str]:
    """The URL of a loopback server answering every GET with ``body`` (200, text/html)."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def dripping() -> Iterator[str]:
    """A JWKS URL whose server answers 200 and then one byte every half second, forever:
    never silent for long enough to trip a socket timeout."""
    stop = threading.Event()

    class Drip(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", "100000")
            self.end_headers()
            try:
                while not stop.wait(0.5):
                    self.wfile.write(b" ")
                    self.wfile.flush()
            except OSError:
                pass  # the client gave up

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Drip)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


@contextmanager
def silent() -> Iterator[str]:
    """A JWKS URL whose server takes the connection and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/jwks.json"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_an_issuer_whose_keys_cannot_be_read_is_a_503_not_the_callers_fault(
    tmp_path: Path, signing_key: rsa.RSAPrivateKey
) -> None:
    # The token may be good: a 401 told the caller (the console: signed the person out)
    # that it was refused, and a JWKS answering an error page was an HTML 500.
    bearer = {"Authorization": f"Bearer {token(signing_key)}"}
    unreachable = f"http://127.0.0.1:{closed_port()}/jwks.json"
    with answering(b"<html>maintenance</html>") as html:
        for url, why in ((unreachable, "could not be fetched"), (html, "could not be read")):
            settings = JwtSettings(url, ISSUER, AUDIENCE, ("RS256",), tenant_claim="org")
            async with api(tmp_path, jwt=settings) as http:
                response = await http.get("/v1/runs", headers=bearer)
            assert response.status_code == 503, response.text
            assert response.headers["content-type"] == "application/problem+json"
            body = response.json()
            assert body["type"] == "urn:psych:problem:issuer-unavailable"
            assert why in body["detail"]
            assert url not in body["detail"]  # the operator's, not the caller's to know


async def test_an_issuer_that_never_answers_is_a_503_within_the_fetch_bound(
    tmp_path: Path, signing_key: rsa.RSAPrivateKey
) -> None:
    # From an audit: the fetch waited PyJWT's default 30 s in one of the loop's few
    # default threads, so a handful of requests under a hung issuer stalled the server.
    bearer = {"Authorization": f"Bearer {token(signing_key)}"}
    with silent() as url:
        settings = JwtSettings(url, ISSUER, AUDIENCE, ("RS256",), tenant_claim="org")
        async with api(tmp_path, jwt=settings) as http, asyncio.timeout(JWKS_TIMEOUT_SECONDS + 10):
            response = await http.get("/v1/runs", headers=bearer)
    assert response.status_code == 503, response.text
    assert "could not be fetched" in response.json()["detail"]


async def test_an_issuer_sending_a_byte_at_a_time_is_a_503_for_every_waiting_request(
    tmp_path: Path, signing_key: rsa.RSAPrivateKey
) -> None:
    # The fetch's bound was urllib's socket timeout, per read: an issuer dripping a byte
    # every half second held the fetch (and a thread) without end, and each request behind
    # it waited on PyJWT's lock in a thread of its own.
    bearer = {"Authorization": f"Bearer {token(signing_key)}"}
    with dripping() as url:
        settings = JwtSettings(url, ISSUER, AUDIENCE, ("RS256",), tenant_claim="org")
        async with api(tmp_path, jwt=settings) as http, asyncio.timeout(JWKS_TIMEOUT_SECONDS + 10):
            responses = await asyncio.gather(
                *(http.get("/v1/runs", headers=bearer) for _ in range(8))
            )
    assert [r.status_code for r in responses] == [503] * 8
    assert all("could not be fetched" in r.json()["detail"] for r in responses)


@contextmanager
def redirecting(to: str) -> Iterator[str]:
    """A JWKS URL whose server answers every GET with a 302 to ``to`` (an issuer moving its
    key set, or serving it from another path)."""

    class Moved(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("location", to)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Moved)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_jwks_url_that_redirects_is_followed_as_pyjwkclient_did(
    signing_key: rsa.RSAPrivateKey, jwks_url: str
) -> None:
    # PyJWKClient fetched with urllib, which follows redirects; httpx does not unless
    # asked: every token of an issuer whose JWKS URL redirects was a 503 'could not be read'.
    with redirecting(jwks_url) as url:
        scope = await authenticator(url).scope_for(f"Bearer {token(signing_key)}")
    assert scope == Scope(tenant="acme", principal="alice")


@pytest.mark.parametrize("body", [b"[]", b'"keys"', b'{"keys": ["k1"]}', b'{"keys": {"k1": 1}}'])
async def test_a_jwks_answer_that_is_no_key_set_object_is_a_503_naming_it(
    signing_key: rsa.RSAPrivateKey, body: bytes
) -> None:
    # JSON, but not a JWKS object: PyJWKSet.from_dict called .get on it (AttributeError),
    # and the caller got a 500 instead of the issuer's 503.
    with answering(body) as url, pytest.raises(IssuerUnavailable, match="could not be read"):
        await authenticator(url).scope_for(f"Bearer {token(signing_key)}")


class Issuer:
    """A JWKS server on loopback whose answer a test sets (``keys``, or ``status`` for an
    issuer in trouble), counting the fetches it answered (``fetches``)."""

    def __init__(self, *keys: tuple[str, rsa.RSAPrivateKey]) -> None:
        self.status = 200
        self.fetches = 0
        self.asked = threading.Event()
        """Set by each fetch as it comes (a test clears it to wait for the next)."""
        self.gate: threading.Event | None = None
        """Set: each answer waits until it is (a fetch under way while a test looks)."""
        self.keys = keys
        self.url = ""

    def document(self) -> bytes:
        entries = [
            {
                **json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key())),
                "kid": kid,
                "use": "sig",
            }
            for kid, key in self.keys
        ]
        return json.dumps({"keys": entries}).encode()

    @contextmanager
    def served(self) -> Iterator[Issuer]:
        issuer = self

        class Jwks(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.fetches += 1
                issuer.asked.set()
                if issuer.gate is not None:
                    issuer.gate.wait(10)
                body = issuer.document() if issuer.status == 200 else b"down"
                self.send_response(issuer.status)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()


class Clock:
    """A monotonic clock a test moves on (the cooldowns passed without waiting them)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_failed_fetch_answers_every_token_at_once_until_it_is_tried_again(
    signing_key: rsa.RSAPrivateKey,
) -> None:
    # From a review: each request after a failed fetch fetched again, so a flood of
    # tokens (made up or not) under an issuer in trouble became a flood of fetches to it.
    clock = Clock()
    with Issuer(("k1", signing_key)).served() as issuer:
        issuer.status = 500
        keys = IssuerKeys(issuer.url, clock=clock)
        with pytest.raises(IssuerUnavailable, match="could not be read"):
            await keys.key_for(token(signing_key))
        assert issuer.fetches == 1
        flood = [token(signing_key), token(signing_key, kid="made-up"), token(signing_key)]
        answers = await asyncio.gather(
            *(keys.key_for(t) for t in flood * 4), return_exceptions=True
        )
        assert all(isinstance(a, IssuerUnavailable) for a in answers), answers
        assert all("could not be read" in str(a) for a in answers)
        assert issuer.fetches == 1  # the failure answered them: the issuer was not asked
        clock.now += JWKS_RETRY_SECONDS - 0.5
        with pytest.raises(IssuerUnavailable):
            await keys.key_for(token(signing_key))
        assert issuer.fetches == 1
        issuer.status = 200
        clock.now += 0.5  # the retry's time has come: fetched again, and the token judged
        assert (await keys.key_for(token(signing_key))).key_id == "k1"
        assert issuer.fetches == 2


async def test_an_issuer_in_trouble_is_a_503_saying_when_its_keys_are_fetched_again(
    tmp_path: Path, signing_key: rsa.RSAPrivateKey
) -> None:
    # From the known defects: the 503 had no Retry-After, though no token is judged before
    # the failed fetch's JWKS_RETRY_SECONDS have passed (each is answered that failure).
    bearer = {"Authorization": f"Bearer {token(signing_key)}"}
    with Issuer(("k1", signing_key)).served() as issuer:
        issuer.status = 500
        settings = JwtSettings(issuer.url, ISSUER, AUDIENCE, ("RS256",), tenant_claim="org")
        async with api(tmp_path, jwt=settings) as http:
            fetched = await http.get("/v1/runs", headers=bearer)
            meanwhile = await http.get("/v1/runs", headers=bearer)
        assert issuer.fetches == 1
    assert [fetched.status_code, meanwhile.status_code] == [503, 503]
    # The fetch just failed: tried again in all of JWKS_RETRY_SECONDS (whole seconds).
    assert fetched.headers["retry-after"] == str(math.ceil(JWKS_RETRY_SECONDS))
    assert 1 <= int(meanwhile.headers["retry-after"]) <= math.ceil(JWKS_RETRY_SECONDS)
    assert fetched.json()["type"] == "urn:psych:problem:issuer-unavailable"

    # As the cooldown runs down, so does the header: never 0, never less than is left.
    clock = Clock()
    with Issuer(("k1", signing_key)).served() as issuer:
        issuer.status = 503
        keys = IssuerKeys(issuer.url, clock=clock)
        headers = []
        for passed in (0.0, 3.2, 9.0, 9.9):
            clock.now = 1000.0 + passed
            with pytest.raises(IssuerUnavailable) as refused:
                await keys.key_for(token(signing_key))
            headers.append(problem_for(refused.value).headers["retry-after"])
        assert issuer.fetches == 1
    assert headers == ["10", "7", "1", "1"]


async def test_a_refetch_for_an_unknown_key_that_fails_keeps_the_keys_held(
    signing_key: rsa.RSAPrivateKey,
) -> None:
    clock = Clock()
    rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with Issuer(("k1", signing_key)).served() as issuer:
        keys = IssuerKeys(issuer.url, clock=clock)
        assert (await keys.key_for(token(signing_key))).key_id == "k1"
        assert issuer.fetches == 1
        issuer.status = 503
        clock.now += JWKS_COOLDOWN_SECONDS
        # An unknown key fetches again; the issuer fails: that token cannot be judged.
        with pytest.raises(IssuerUnavailable):
            await keys.key_for(token(rotated, kid="k2"))
        assert issuer.fetches == 2
        # The keys held still verify their tokens, and the unknown key is not fetched for
        # again while the failure stands.
        for _ in range(3):
            assert (await keys.key_for(token(signing_key))).key_id == "k1"
            with pytest.raises(IssuerUnavailable):
                await keys.key_for(token(rotated, kid="k2"))
        assert issuer.fetches == 2
        # The issuer is back, and publishes k2 just after the fetch: a token of k2 is
        # refused until JWKS_COOLDOWN_SECONDS have passed (the documented trade-off).
        issuer.status = 200
        clock.now += JWKS_RETRY_SECONDS
        with pytest.raises(Unauthorized, match="no key 'k2'"):
            await keys.key_for(token(rotated, kid="k2"))
        assert issuer.fetches == 3
        issuer.keys = (("k1", signing_key), ("k2", rotated))
        with pytest.raises(Unauthorized, match="no key 'k2'"):
            await keys.key_for(token(rotated, kid="k2"))
        assert issuer.fetches == 3
        clock.now += JWKS_COOLDOWN_SECONDS
        assert (await keys.key_for(token(rotated, kid="k2"))).key_id == "k2"
        assert issuer.fetches == 4


def jwks_log(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name.endswith("serve._auth")]


def rotated_key() -> rsa.RSAPrivateKey:
    """A second signing key, for a key the issuer rotates in (``k2``)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


async def fetched_once(issuer: Issuer, clock: Clock, signing_key: rsa.RSAPrivateKey) -> IssuerKeys:
    """Keys for ``issuer`` on ``clock``, its set fetched once (``k1`` verifies)."""
    keys = IssuerKeys(issuer.url, clock=clock)
    assert (await keys.key_for(token(signing_key))).key_id == "k1"
    return keys


async def test_a_stale_set_whose_refresh_fails_verifies_its_keys_for_a_bounded_time(
    signing_key: rsa.RSAPrivateKey, caplog: pytest.LogCaptureFixture
) -> None:
    # From a review: a set past its lifespan whose refresh failed answered every token 503,
    # those of the keys it held too, so an issuer's outage of a minute took the API down
    # for that minute though the keys held verified the tokens signed with them.
    caplog.set_level(logging.INFO, logger="psych_runtime.workers.serve._auth")
    clock, rotated = Clock(), rotated_key()
    with Issuer(("k1", signing_key)).served() as issuer:
        keys = await fetched_once(issuer, clock, signing_key)
        issuer.status = 503
        clock.now += JWKS_LIFESPAN_SECONDS
        assert (await keys.key_for(token(signing_key))).key_id == "k1"
        assert issuer.fetches == 2
        # The back-off holds: the keys held answer at once, an unknown key is a 503 (a key
        # rotated in, maybe), and neither asks the issuer again.
        for _ in range(3):
            assert (await keys.key_for(token(signing_key))).key_id == "k1"
            with pytest.raises(IssuerUnavailable, match="could not be read"):
                await keys.key_for(token(rotated, kid="k2"))
        assert issuer.fetches == 2
        clock.now += JWKS_RETRY_SECONDS
        assert (await keys.key_for(token(signing_key))).key_id == "k1"
        assert issuer.fetches == 3
        # One warning for the whole outage, not one per request or per fetch.
        logged = jwks_log(caplog)
        assert [level for level, _ in logged] == [logging.WARNING], logged
        assert "cannot be fetched" in logged[0][1] and "3600 s more" in logged[0][1]

        # To the bound, and no further: then every token is a 503, logged once as an error.
        clock.now = 1000.0 + JWKS_LIFESPAN_SECONDS + JWKS_STALE_MAX_SECONDS - 1
        assert (await keys.key_for(token(signing_key))).key_id == "k1"
        clock.now += 1
        with pytest.raises(IssuerUnavailable, match="could not be read") as refused:
            await keys.key_for(token(signing_key))
        # Answered by the fetch of a second ago, still in its back-off.
        assert refused.value.retry_after == JWKS_RETRY_SECONDS - 1
        with pytest.raises(IssuerUnavailable):
            await keys.key_for(token(signing_key))
        assert issuer.fetches == 4
        assert [level for level, _ in jwks_log(caplog)] == [logging.WARNING, logging.ERROR]

        # The issuer is back: its set is used, and the log says so once.
        issuer.status = 200
        issuer.keys = (("k2", rotated),)
        clock.now += JWKS_RETRY_SECONDS
        assert (await keys.key_for(token(rotated, kid="k2"))).key_id == "k2"
        with pytest.raises(Unauthorized, match="no key 'k1'"):  # withdrawn meanwhile
            await keys.key_for(token(signing_key))
        assert issuer.fetches == 5
        logged = jwks_log(caplog)
        assert [level for level, _ in logged][2:] == [logging.INFO]
        assert "fetched again" in logged[2][1]


async def test_a_stale_sets_keys_answer_without_waiting_for_a_refresh_under_way(
    signing_key: rsa.RSAPrivateKey, caplog: pytest.LogCaptureFixture
) -> None:
    # A hung issuer would otherwise hold every request queued behind each refresh for the
    # fetch's whole bound, once every JWKS_RETRY_SECONDS for the length of its outage.
    caplog.set_level(logging.INFO, logger="psych_runtime.workers.serve._auth")
    clock, rotated = Clock(), rotated_key()
    with Issuer(("k1", signing_key)).served() as issuer:
        keys = await fetched_once(issuer, clock, signing_key)
        issuer.gate = threading.Event()
        clock.now += JWKS_LIFESPAN_SECONDS
        issuer.asked.clear()
        refreshing = asyncio.create_task(keys.key_for(token(signing_key)))
        assert await asyncio.to_thread(issuer.asked.wait, 5)
        async with asyncio.timeout(1):  # answered while the fetch is held
            assert (await keys.key_for(token(signing_key))).key_id == "k1"
        unknown = asyncio.create_task(keys.key_for(token(rotated, kid="k2")))
        await asyncio.sleep(0.1)
        assert not refreshing.done() and not unknown.done()  # these wait for the answer
        issuer.keys = (("k1", signing_key), ("k2", rotated))
        clock.now += 1  # the fetch ends after the waiting request came
        issuer.gate.set()
        assert (await refreshing).key_id == "k1"
        assert (await unknown).key_id == "k2"
        assert issuer.fetches == 2
    assert jwks_log(caplog) == []  # a refresh that worked: nothing served stale
