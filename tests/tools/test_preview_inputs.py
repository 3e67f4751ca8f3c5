"""The files a preview read: their states and digests, and the check the run makes first."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bot.tools.preview import (
    DIRECTORY_FILES,
    bound_digest,
    changed_inputs,
    read_input,
    read_inputs,
    unshown_inputs,
)


def test_a_file_a_directory_and_an_absent_path(tmp_path: Path) -> None:
    (tmp_path / "web.yaml").write_bytes(b"replicas: 3\n")
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text("resources: []\n")
    file = read_input("web.yaml", tmp_path)
    assert file.state == "file" and file.resolved == str(tmp_path / "web.yaml")
    assert file.digest == hashlib.sha256(b"replicas: 3\n").hexdigest()
    directory = read_input("overlay", tmp_path)
    assert directory.state == "directory" and directory.digest
    absent = read_input("nope.yaml", tmp_path)
    assert absent.state == "absent" and absent.digest is None


def test_any_change_is_found_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "web.yaml").write_text("a\n")
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "patch.yaml").write_text("p\n")
    bound = read_inputs(["web.yaml", "overlay", "new.yaml"], (), tmp_path)
    assert changed_inputs(bound) == []
    (tmp_path / "overlay" / "patch.yaml").write_text("q\n")  # a file inside the directory
    assert changed_inputs(bound) == ["overlay"]
    (tmp_path / "new.yaml").write_text("appeared\n")
    (tmp_path / "web.yaml").unlink()
    assert changed_inputs(bound) == ["web.yaml", "overlay", "new.yaml"]


def test_a_directory_too_large_to_bind_cannot_pass(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.mkdir()
    for n in range(DIRECTORY_FILES + 1):
        (big / f"{n}.yaml").write_text("")
    [read] = read_inputs(["big"], (), tmp_path)
    assert read.state == "unreadable" and read.why and "files" in read.why
    assert changed_inputs([read]) == ["big"]  # nothing to compare with: the run refuses


def test_the_preview_argv_names_files_too(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("a\n")
    (tmp_path / "b.yaml").write_text("b\n")
    argv = ("kubectl", "diff", "--filename=a.yaml", "b.yaml", "deploy/web", "-o")
    read = read_inputs([], argv, tmp_path)
    assert [i.path for i in read] == ["a.yaml", "b.yaml"]
    named = read_inputs(["c.yaml", "a.yaml"], argv, tmp_path)
    assert [i.path for i in named] == ["c.yaml", "a.yaml", "b.yaml"]
    assert unshown_inputs(named, ["c.yaml", "a.yaml"], argv, tmp_path) == ["c.yaml"]


def test_the_bound_digest_covers_output_and_files(tmp_path: Path) -> None:
    output = hashlib.sha256(b"out").hexdigest()
    assert bound_digest(output, []) == output
    (tmp_path / "web.yaml").write_text("a\n")
    before = read_inputs(["web.yaml"], (), tmp_path)
    (tmp_path / "web.yaml").write_text("b\n")
    after = read_inputs(["web.yaml"], (), tmp_path)
    assert bound_digest(output, before) != bound_digest(output, after) != output


def test_a_file_too_large_to_bind_cannot_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bot.tools.preview.INPUT_BYTES", 4)
    (tmp_path / "big.yaml").write_text("12345")
    [read] = read_inputs(["big.yaml"], (), tmp_path)
    assert read.state == "unreadable" and (read.why or "").startswith("larger than")
    assert changed_inputs([read]) == ["big.yaml"]
