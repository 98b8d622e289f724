"""The instance type from EC2 instance metadata (IMDSv2), tested against a local HTTP server that
answers as the metadata service documents: PUT /latest/api/token returns a session token, and
GET /latest/meta-data/instance-type answers only when that token is sent back. No request ever
leaves 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from workbench.environment.instance import instance_type_from_metadata, resolve_instance_type

TOKEN = "local-test-token"


class _Metadata(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_PUT(self) -> None:
        if self.path == "/latest/api/token" and self.headers.get(
            "X-aws-ec2-metadata-token-ttl-seconds"
        ):
            self._send(200, TOKEN)
        else:
            self._send(400, "")

    def do_GET(self) -> None:
        if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
            self._send(401, "")
        elif self.path == "/latest/meta-data/instance-type":
            self._send(200, "trn1.32xlarge")
        else:
            self._send(404, "")

    def _send(self, code: int, body: str) -> None:
        self.send_response(code)
        self.end_headers()
        self.wfile.write(body.encode())


@pytest.fixture
def metadata_endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metadata)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_imdsv2_token_then_instance_type(metadata_endpoint: str, monkeypatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", metadata_endpoint)
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED", raising=False)
    found = instance_type_from_metadata()
    assert found.name == "trn1.32xlarge" and "IMDSv2" in found.source


def test_off_ec2_the_metadata_service_is_never_asked(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", raising=False)
    (tmp_path / "sys_vendor").write_text("QEMU\n")
    found = instance_type_from_metadata(dmi_dir=tmp_path)
    assert found.name is None and "not an EC2 instance" in found.source


def test_unreachable_metadata_is_unknown_not_an_error(monkeypatch) -> None:
    # A closed local port: the connection is refused at once.
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9")
    found = instance_type_from_metadata()
    assert found.name is None and "not reachable" in found.source


def test_disabled_metadata_and_a_named_instance_win(metadata_endpoint: str, monkeypatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", metadata_endpoint)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert instance_type_from_metadata().name is None
    assert resolve_instance_type("g5.xlarge").name == "g5.xlarge"
