"""The template keeps every data subject that wrote to a document, until the document goes (P13, P24)."""

from __future__ import annotations

import pytest

import memvault
from memvault import ForgetRequest, ReadRequest, RetainRequest

NAME = "template-provider"


@pytest.fixture
def vault() -> memvault.Vault:
    return memvault.open(NAME, scanner="off")


def retain(vault: memvault.Vault, content: str, subject: str = "", mode: str = "append") -> None:
    vault.retain(
        RetainRequest(
            workspace_id="w1", agent_id="a1", tier="pins", content=content, mode=mode, data_subject_id=subject
        )
    )


def erase(vault: memvault.Vault, subject: str) -> int:
    return vault.forget(ForgetRequest(workspace_id="w1", data_subject_id=subject)).removed


def body(vault: memvault.Vault) -> str:
    return vault.read(ReadRequest(workspace_id="w1", agent_id="a1", tier="pins")).content


@pytest.mark.parametrize("erased", ["user-43", "user-44"])
def test_document_written_for_two_subjects_is_erased_for_either(vault: memvault.Vault, erased: str) -> None:
    retain(vault, "first\n", "user-43")
    retain(vault, "second\n", "user-44")
    assert erase(vault, erased) == 1
    assert body(vault) == ""


@pytest.mark.parametrize("mode", ["append", "replace"])
def test_untagged_later_write_never_removes_a_tag(vault: memvault.Vault, mode: str) -> None:
    retain(vault, "first\n", "user-43")
    retain(vault, "untagged\n", mode=mode)
    assert erase(vault, "user-43") == 1


def test_forget_by_id_clears_the_tags(vault: memvault.Vault) -> None:
    retain(vault, "old\n", "user-43")
    assert vault.forget(ForgetRequest(workspace_id="w1", agent_id="a1", id="pins.md")).removed == 1
    retain(vault, "new\n")
    assert erase(vault, "user-43") == 0
    assert body(vault) == "new\n"


@pytest.mark.parametrize("other", ["user-4", "user-430", "USER-43", "user"])
def test_subject_matching_is_exact(vault: memvault.Vault, other: str) -> None:
    retain(vault, "kept\n", "user-43")
    assert erase(vault, other) == 0
    assert body(vault) == "kept\n"


def test_forget_reports_complete_erasure(vault: memvault.Vault) -> None:
    retain(vault, "kept\n", "user-43")
    assert vault.forget(ForgetRequest(workspace_id="w1", data_subject_id="user-43")).pending is False
