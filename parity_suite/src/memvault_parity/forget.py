"""read (P21) and forget by id (P22, P23) and by data subject (P13, P24)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import memvault
from memvault.contract.models import Capability
from memvault_parity.base import SuiteBase, requires, requires_absent
from memvault_parity.versions import since

__all__ = ["ForgetTests", "ReadTests", "SubjectErasureTests"]


_SCAN_FILES = """
import sys
from pathlib import Path

root, needle = Path(sys.argv[1]), bytes.fromhex(sys.argv[2])
for path in sorted(root.rglob("*")):
    try:
        if path.is_file() and needle in path.read_bytes():
            print(path.relative_to(root))
    except OSError:
        continue
"""


def _files_containing(root: Path, needle: bytes) -> list[str]:
    """The files under ``root`` whose bytes contain ``needle``, read by another process.

    Reading them here would open and close descriptors on files a provider of this
    process may hold POSIX (fcntl) locks on, and closing any descriptor of a file
    drops every such lock the process holds (SQLite's "How To Corrupt", 2.2).
    """
    done = subprocess.run(
        [sys.executable, "-c", _SCAN_FILES, str(root), needle.hex()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


class ReadTests(SuiteBase):
    """read returns the whole body; missing is empty, not an error (P21)."""

    def test_read_of_a_missing_document_is_an_empty_body(self, vault: memvault.Vault, ws: str) -> None:
        """P21: a document never written reads as "" with its label, no error."""
        result = vault.read(memvault.ReadRequest(workspace_id=ws, agent_id="agent-1", tier="peers", key="nobody"))
        assert (result.id, result.content, result.quarantine) == ("peers/nobody.md", "", None)

    def test_read_returns_the_full_body_and_label(self, vault: memvault.Vault, ws: str) -> None:
        """P21: read gives every line, not a snippet, with the P4 label as id."""
        body = "".join(f"line {i} " + "word " * 20 + "\n" for i in range(40))
        self.put(vault, ws, body, tier="pins", mode="replace")
        result = vault.read(memvault.ReadRequest(workspace_id=ws, agent_id="agent-1", tier="pins"))
        assert (result.id, result.content) == ("pins.md", body)
        assert not result.quarantined

    def test_read_of_daily_without_key_reads_today(self, vault: memvault.Vault, ws: str) -> None:
        """P21/P7: an empty daily key reads today's document, the one retain wrote."""
        written = self.put(vault, ws, "today's note\n", tier="daily")
        result = vault.read(memvault.ReadRequest(workspace_id=ws, agent_id="agent-1", tier="daily"))
        assert (result.id, result.content) == (written.id, "today's note\n")

    def test_read_of_crew_document(self, vault: memvault.Vault, ws: str) -> None:
        """P21: CREW reads by crew_id."""
        self.put(vault, ws, "crew charter\n", tier="CREW", crew="crew-3")
        result = vault.read(memvault.ReadRequest(workspace_id=ws, crew_id="crew-3", tier="CREW"))
        assert (result.id, result.content) == ("CREW.md", "crew charter\n")


class ForgetTests(SuiteBase):
    """forget by id: 1, then 0, and the text is gone (P22, P23)."""

    def test_forget_requires_exactly_one_of_id_or_subject(self) -> None:
        """P22: both or neither is InvalidRequest with the exact wording."""
        for kwargs in ({}, {"id": "AGENT.md", "data_subject_id": "subject-1"}):
            with pytest.raises(memvault.InvalidRequest, match="must set exactly one of id or data_subject_id"):
                memvault.ForgetRequest(workspace_id="w", agent_id="a", **kwargs)

    @pytest.mark.parametrize(
        "label",
        ["/tmp/AGENT.md", "AGENT", "agent.md", "daily/tomorrow.md", "peers/.md", "../AGENT.md", "peers/a/b.md", "x.md"],
    )
    def test_forget_id_of_another_shape_is_invalid(self, label: str) -> None:
        """P23: id must be one of the P4 label shapes."""
        with pytest.raises(memvault.InvalidRequest):
            memvault.ForgetRequest(workspace_id="w", agent_id="a", id=label)

    def test_forget_existing_document_removes_one(self, vault: memvault.Vault, ws: str) -> None:
        """P23: an existing document gives removed=1."""
        self.put(vault, ws, "to be forgotten\n")
        assert self.drop(vault, ws, label="AGENT.md") == 1

    def test_forget_twice_removes_zero(self, vault: memvault.Vault, ws: str) -> None:
        """P23: the second forget gives removed=0 and no error."""
        self.put(vault, ws, "once\n", tier="peers", key="hal")
        assert self.drop(vault, ws, label="peers/hal.md") == 1
        assert self.drop(vault, ws, label="peers/hal.md") == 0

    def test_forget_of_a_never_written_document_removes_zero(self, vault: memvault.Vault, ws: str) -> None:
        """P23: forgetting what does not exist is removed=0, not an error."""
        assert self.drop(vault, ws, label="daily/2020-01-01.md") == 0

    def test_forgotten_text_is_not_recalled(self, vault: memvault.Vault, ws: str) -> None:
        """P23: no hit carries any text of a forgotten document."""
        self.put(vault, ws, "vanishing okapi\nsecond okapi line\n", tier="pins")
        self.drop(vault, ws, label="pins.md")
        assert self.find(vault, ws, "okapi") == []

    def test_forgotten_document_reads_empty(self, vault: memvault.Vault, ws: str) -> None:
        """P23/P21: after forget, read returns an empty body."""
        self.put(vault, ws, "short lived\n", tier="daily", key="2026-07-07")
        self.drop(vault, ws, label="daily/2026-07-07.md")
        assert self.body(vault, ws, tier="daily", key="2026-07-07") == ""

    def test_forget_removes_only_the_named_document(self, vault: memvault.Vault, ws: str) -> None:
        """P23: sibling documents in the partition stay."""
        self.put(vault, ws, "gecko agent\n")
        self.put(vault, ws, "gecko pins\n", tier="pins")
        self.drop(vault, ws, label="AGENT.md")
        assert [h.source for h in self.find(vault, ws, "gecko")] == ["pins.md"]

    def test_forget_crew_document(self, vault: memvault.Vault, ws: str) -> None:
        """P23: CREW.md is forgotten by its crew, then reads empty."""
        self.put(vault, ws, "crew plan\n", tier="CREW", crew="crew-4")
        assert self.drop(vault, ws, label="CREW.md", agent="", crew="crew-4") == 1
        assert self.body(vault, ws, tier="CREW", crew="crew-4") == ""

    def test_append_after_forget_starts_a_new_body(self, vault: memvault.Vault, ws: str) -> None:
        """P23/P6: nothing of the forgotten body comes back on the next append."""
        self.put(vault, ws, "old text ")
        self.drop(vault, ws, label="AGENT.md")
        result = self.put(vault, ws, "new text")
        assert self.body(vault, ws) == "new text"
        assert result.bytes == len(b"new text")


class SubjectErasureTests(SuiteBase):
    """forget by data_subject_id: NotSupported, or a workspace-wide cascade (P13, P24)."""

    @since("1.0")
    @requires_absent(Capability.CASCADE_FORGET)
    def test_forget_by_subject_without_capability_is_not_supported_naming_the_provider(
        self, vault: memvault.Vault, ws: str
    ) -> None:
        """P24: a provider without cascade_forget raises NotSupported, which names the provider by its
        registered name (the Vault adds the name: a provider never learns it), and nothing is removed."""
        self.put(vault, ws, "subject data\n", subject="subject-1")
        with pytest.raises(memvault.NotSupported) as caught:
            self.drop(vault, ws, subject="subject-1")
        assert vault.name in str(caught.value)
        assert self.body(vault, ws) == "subject data\n"

    @since("1.0")
    @requires(Capability.CASCADE_FORGET)
    def test_forget_by_subject_removes_every_document_of_the_subject_and_counts(
        self, vault: memvault.Vault, ws: str
    ) -> None:
        """P13/P24: every document retained with the data_subject_id in the workspace goes; the count is returned."""
        self.put(vault, ws, "ivy agent\n", subject="subject-9")
        self.put(vault, ws, "ivy pins\n", tier="pins", subject="subject-9")
        self.put(vault, ws, "ivy peers\n", tier="peers", key="jo", agent="agent-2", subject="subject-9")
        self.put(vault, ws, "ivy crew\n", tier="CREW", crew="crew-1", subject="subject-9")
        assert self.drop(vault, ws, subject="subject-9") == 4
        assert self.find(vault, ws, "ivy", crew="crew-1") == []
        assert self.find(vault, ws, "ivy", agent="agent-2") == []
        assert self.body(vault, ws, tier="pins") == ""
        assert self.body(vault, ws, tier="peers", key="jo", agent="agent-2") == ""

    @since("1.0")
    @requires(Capability.CASCADE_FORGET)
    def test_forget_by_subject_never_touches_another_workspace(self, vault: memvault.Vault) -> None:
        """P24/P3: the same subject in another workspace, also one whose id starts with this one's, is
        untouched and not counted."""
        mine = self.new_workspace()
        others = [self.new_workspace(), mine + "0"]
        for theirs in others:
            self.put(vault, theirs, "theirs subject line\n", subject="subject-2")
        self.put(vault, mine, "mine subject line\n", subject="subject-2")
        assert self.drop(vault, mine, subject="subject-2") == 1
        for theirs in others:
            assert self.body(vault, theirs) == "theirs subject line\n"
            assert len(self.find(vault, theirs, "theirs")) == 1

    @since("1.0")
    @requires(Capability.CASCADE_FORGET)
    def test_forget_by_subject_keeps_other_subjects_and_untagged_documents(
        self, vault: memvault.Vault, ws: str
    ) -> None:
        """P13/P24: only documents tagged with that subject are removed; untagged ones stay."""
        self.put(vault, ws, "tagged\n", subject="subject-3")
        self.put(vault, ws, "other subject\n", tier="pins", subject="subject-4")
        self.put(vault, ws, "untagged\n", tier="PERSONA")
        assert self.drop(vault, ws, subject="subject-3") == 1
        assert self.body(vault, ws, tier="pins") == "other subject\n"
        assert self.body(vault, ws, tier="PERSONA") == "untagged\n"

    @since("1.0")
    @requires(Capability.CASCADE_FORGET)
    def test_forget_by_unknown_subject_removes_zero(self, vault: memvault.Vault, ws: str) -> None:
        """P24: no documents of the subject: removed=0, no error; repeating it is also 0."""
        self.put(vault, ws, "bystander\n")
        assert self.drop(vault, ws, subject="subject-none") == 0
        assert self.body(vault, ws) == "bystander\n"

    @since("1.0")
    @requires(Capability.CASCADE_FORGET)
    def test_forget_by_subject_twice_removes_zero_the_second_time(self, vault: memvault.Vault, ws: str) -> None:
        """P24: the cascade is idempotent."""
        self.put(vault, ws, "once only\n", subject="subject-5")
        assert self.drop(vault, ws, subject="subject-5") == 1
        assert self.drop(vault, ws, subject="subject-5") == 0

    @since("1.0")
    @requires(Capability.CASCADE_FORGET)
    def test_forget_by_subject_erases_the_text_from_storage_files(
        self, vault: memvault.Vault, ws: str, tmp_path: Path
    ) -> None:
        """P24: no file of a scratch store still holds the erased text (pages, journals, indexes).

        Only meaningful when the store's files live under the test's tmp_path (the
        default scratch settings); a remote store's files are out of reach here.
        """
        secret = f"erasable{uuid.uuid4().hex}"
        self.put(vault, ws, f"the code word is {secret}\n" * 20, subject="subject-6")
        self.put(vault, ws, f"pinned {secret}\n", tier="pins", subject="subject-6")
        self.drop(vault, ws, subject="subject-6")
        assert self.find(vault, ws, secret) == []
        vault.health()  # give a provider the chance to checkpoint, as a real process would
        assert _files_containing(tmp_path, secret.encode()) == []

    @since("1.0")
    @requires(Capability.CASCADE_FORGET)
    def test_an_erasure_after_a_forget_by_id_leaves_no_text_in_storage_files(
        self, vault: memvault.Vault, ws: str, tmp_path: Path
    ) -> None:
        """P24: a forget by id of a subject's document, then the subject's erasure: the erasure removes
        nothing more (``removed`` 0, complete), and no file of a scratch store holds the text, whatever
        the forget by id left behind (a provider that does not rewrite files on a forget by id must
        remember the subject and scrub then)."""
        secret = f"forgotten{uuid.uuid4().hex}"
        for i in range(5):
            self.put(vault, ws, f"turn {i}: the code word is {secret}\n", tier="peers", key="pat", subject="subject-7")
        self.put(vault, ws, "kept by another subject\n", tier="pins", subject="subject-8")
        assert self.drop(vault, ws, label="peers/pat.md") == 1
        result = vault.forget(memvault.ForgetRequest(workspace_id=ws, data_subject_id="subject-7"))
        assert (result.removed, result.pending) == (0, False)
        vault.health()  # give a provider the chance to checkpoint, as a real process would
        assert _files_containing(tmp_path, secret.encode()) == []
        assert self.body(vault, ws, tier="pins") == "kept by another subject\n"

    @since("1.0")
    @requires(Capability.CASCADE_FORGET)
    def test_an_untagged_write_never_clears_a_subject(self, vault: memvault.Vault, ws: str) -> None:
        """P13/P24: a later untagged append or replace keeps the document tagged: erasing the subject
        still removes both documents, with the untagged text."""
        self.put(vault, ws, "tagged first\n", subject="subject-a")
        self.put(vault, ws, "untagged osprey append\n")
        self.put(vault, ws, "tagged pins\n", tier="pins", subject="subject-a")
        self.put(vault, ws, "untagged osprey replace\n", tier="pins", mode="replace")
        assert self.drop(vault, ws, subject="subject-a") == 2
        assert self.find(vault, ws, "osprey") == []
        assert (self.body(vault, ws), self.body(vault, ws, tier="pins")) == ("", "")

    @since("1.0")
    @requires(Capability.CASCADE_FORGET)
    def test_a_document_carries_every_subject_that_wrote_to_it(self, vault: memvault.Vault, ws: str) -> None:
        """P13/P24: a document is tagged with every subject that wrote to it, not only the first or the
        latest: erasing either removes it, with what the other subjects wrote, and it is counted once."""
        self.put(vault, ws, "written by a\n", subject="subject-a")
        self.put(vault, ws, "written by a again\n", subject="subject-a")
        self.put(vault, ws, "written by b lapwing\n", subject="subject-b")
        self.put(vault, ws, "pins by b\n", tier="pins", subject="subject-b")
        self.put(vault, ws, "pins by a lapwing\n", tier="pins", subject="subject-a", mode="replace")
        self.put(vault, ws, "persona by b\n", tier="PERSONA", subject="subject-b")
        assert self.drop(vault, ws, subject="subject-a") == 2
        assert self.find(vault, ws, "lapwing") == []
        assert self.body(vault, ws, tier="PERSONA") == "persona by b\n"
        assert self.drop(vault, ws, subject="subject-b") == 1
        assert self.body(vault, ws, tier="PERSONA") == ""

    @requires(Capability.CASCADE_FORGET)
    def test_forget_by_id_clears_the_documents_subjects(self, vault: memvault.Vault, ws: str) -> None:
        """P13/P23: tags belong to the document, not its label: after a forget by id, a new untagged document
        at the same label is not erased with the old one's subject."""
        self.put(vault, ws, "old tagged body\n", tier="peers", key="pat", subject="subject-c")
        assert self.drop(vault, ws, label="peers/pat.md") == 1
        self.put(vault, ws, "fresh untagged body\n", tier="peers", key="pat")
        assert self.drop(vault, ws, subject="subject-c") == 0
        assert self.body(vault, ws, tier="peers", key="pat") == "fresh untagged body\n"

    @since("1.0")
    @requires(Capability.CASCADE_FORGET)
    def test_subjects_match_exactly(self, vault: memvault.Vault, ws: str) -> None:
        """P13/P24: subject ids match exactly: never by case, prefix, suffix or substring (no LIKE rules)."""
        tagged = {
            "user-1": ("AGENT", ""),
            "User-1": ("pins", ""),
            "user-10": ("PERSONA", ""),
            "xuser-1": ("daily", "2026-11-11"),
            "user-1.a": ("peers", "sam"),
        }
        for subject, (tier, key) in tagged.items():
            self.put(vault, ws, f"line of {subject}\n", tier=tier, key=key, subject=subject)
        for near_miss in ("USER-1", "user", "user-", "ser-1", "user-1.", "user-1.a.b", "1"):
            assert self.drop(vault, ws, subject=near_miss) == 0, near_miss
        assert self.drop(vault, ws, subject="user-1") == 1
        assert self.body(vault, ws) == ""
        for subject, (tier, key) in tagged.items():
            if subject != "user-1":
                assert self.body(vault, ws, tier=tier, key=key) == f"line of {subject}\n", subject

    @requires(Capability.CASCADE_FORGET)
    def test_a_refused_write_does_not_tag_the_document(self, vault: memvault.Vault, ws: str) -> None:
        """P13/P9: only accepted writes tag: a write refused by the cap adds no subject, so erasing that
        subject keeps the document."""
        self.put(vault, ws, "kept pelican\n", tier="PERSONA", subject="subject-a")
        with pytest.raises(memvault.CapExceeded):
            self.put(vault, ws, "q" * 1500, tier="PERSONA", subject="subject-b")
        assert self.drop(vault, ws, subject="subject-b") == 0
        assert self.body(vault, ws, tier="PERSONA") == "kept pelican\n"
