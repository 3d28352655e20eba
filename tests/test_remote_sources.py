"""`preprocess` and `index` over URL sources (issue 29): a one-line error, or the shard's rejection,
that names the URL and the cause — a 500 or a 403 is not "shard not found", a stall says it timed
out and after what, a corrupt remote shard is named by its URL, never by its spool file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from iofeed.cli.main import main

pytest.importorskip("aiohttp")
pytest.importorskip("webdataset")

from helpers.sources import write_webdataset  # noqa: E402
from helpers.storage import CountingServer  # noqa: E402

pytestmark = pytest.mark.storage
COMMANDS = ["preprocess", "index"]


@pytest.fixture()
def served(tmp_path: Path, monkeypatch):
    """Two WebDataset shards over HTTP on 127.0.0.1, under a short retry budget."""
    monkeypatch.setenv("IOFEED_RETRY_SECONDS", "1.5")
    write_webdataset(tmp_path / "wds")
    server = CountingServer(tmp_path / "wds")
    yield server, tmp_path
    server.close()


def _said(command: str, url: str, out: Path, capsys) -> str:
    """Everything the run told: its error line, or the reasons in rejected.jsonl (a shard that is
    there but cannot be read is a rejection named by its URL; the run goes on with the others)."""
    code = main([command, url, "-o", str(out)])
    err = capsys.readouterr().err.strip()
    if code != 0:
        assert "\n" not in err, err
        return err
    reasons = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
    return "\n".join(f"{r['path']}: {r['reason']}" for r in reasons)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_server_error_on_a_url_source_is_not_called_not_found(served, command: str, capsys) -> None:
    server, tmp = served
    server.failing["/shard-000001.tar"] = 10**6
    said = _said(command, f"{server.url}/shard-{{000000..000001}}.tar", tmp / "out.iof", capsys)
    line = next(x for x in said.splitlines() if f"{server.url}/shard-000001.tar" in x)
    assert "not found" not in line and "HTTP 500" in line and "attempts" in line, said


@pytest.mark.parametrize("command", COMMANDS)
def test_access_denied_on_a_url_source_is_said_so(served, command: str, capsys) -> None:
    server, tmp = served
    server.fail_status, server.failing["/shard-000000.tar"] = 403, 10**6
    said = _said(command, f"{server.url}/shard-{{000000..000001}}.tar", tmp / "out.iof", capsys)
    line = next(x for x in said.splitlines() if f"{server.url}/shard-000000.tar" in x)
    assert "not found" not in line and "access denied" in line, said
    assert server.gets["/shard-000000.tar"] + server.heads["/shard-000000.tar"] <= 3, "a 403 is final"


@pytest.mark.parametrize("command", COMMANDS)
def test_a_stalled_url_source_says_it_timed_out_and_after_what(served, command: str, capsys) -> None:
    """It ended with "FSTimeoutError:" and nothing after it."""
    server, tmp = served
    server.stall.add("/shard-000001.tar")
    said = _said(command, f"{server.url}/shard-{{000000..000001}}.tar", tmp / "out.iof", capsys)
    line = next(x for x in said.splitlines() if f"{server.url}/shard-000001.tar" in x)
    assert "timed out (" in line and ": )" not in line and "attempt" in line, said


@pytest.mark.parametrize("command", COMMANDS)
def test_a_corrupt_remote_shard_is_named_by_its_url(served, command: str, capsys) -> None:
    """It was named by the temporary spool file it had been copied into."""
    server, tmp = served
    shard = tmp / "wds" / "shard-000001.tar"
    shard.write_bytes(b"\x00garbage, not a tar" * 100)
    said = _said(command, f"{server.url}/shard-{{000000..000001}}.tar", tmp / "out.iof", capsys)
    assert f"{server.url}/shard-000001.tar" in said and "spool" not in said, said
    assert not list(tmp.glob(".out.iof.spool-*")), "the downloaded copies are removed"


def test_a_timeout_without_a_message_still_says_what_happened() -> None:
    """fsspec raises FSTimeoutError() with no text: the message ended "FSTimeoutError:"."""
    from fsspec.exceptions import FSTimeoutError

    from iofeed.sources.remote.retry import describe

    assert describe(FSTimeoutError()) == "timed out (FSTimeoutError: no answer in time)"
