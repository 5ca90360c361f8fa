"""The content tower: an event's title, description and category -> a 64-d unit vector.

Why it exists: an event has no interaction history when it needs to be ranked (design: "the
core problem"), so the ranker cannot learn an ID embedding for it. The collaborative signal
that *does* exist lives in people: a user who RSVPs to two events within 30 days says those two
are alike to someone. Training a text tower to put such pairs close (in-batch contrastive loss)
routes that signal into content space, where a brand-new event inherits it from its words on
the day it is created.

Constraints that shape the code:

* No pretrained weights and nothing downloaded: the vocabulary is counted from our own events
  and words outside it fall into hashed buckets (stable crc32), so unseen words still carry some
  identity instead of all collapsing into one "unknown" row.
* Small and fast on two CPU cores: mean-pooled bag of words and title bigrams, a 2-layer MLP.
* Deterministic: the same events, pairs and seed give the same weights, hence the same version.
* Plain artifacts: ``weights.pt`` is a state_dict loaded with ``weights_only=True``;
  ``vocab.json`` holds tokens, categories and shape. The version is a hash of both, so every
  embedding row can say exactly which tower produced it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pandas as pd
import torch
from torch import nn
from torch.nn import functional as F

log = logging.getLogger(__name__)

FORMAT: Final = 1
WEIGHTS_FILE: Final = "weights.pt"
VOCAB_FILE: Final = "vocab.json"
PAD: Final = 0  # token id 0 pads every bag and is excluded from the mean
UNKNOWN_CATEGORY: Final = "<unknown>"
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True)
class TowerConfig:
    """Shape and training knobs; stored with the weights so a loaded tower is self-describing."""

    dim: int = 64
    hidden: int = 64
    max_vocab: int = 30_000
    min_count: int = 2
    hash_buckets: int = 4_096
    max_title_tokens: int = 32
    max_description_tokens: int = 96
    # Training
    epochs: int = 10
    batch_size: int = 256
    learning_rate: float = 3e-3
    weight_decay: float = 1e-5
    temperature: float = 0.1
    seed: int = 7
    threads: int = 1


def tokenize(text: str | None) -> list[str]:
    """Lower-cased unicode words; punctuation and underscores split words."""
    if not text:
        return []
    return _WORD.findall(text.lower())


def title_terms(title: str | None) -> list[str]:
    """Title words plus adjacent-word bigrams: "run club" carries more than "run" and "club"."""
    words = tokenize(title)
    return words + [f"{a}_{b}" for a, b in zip(words, words[1:], strict=False)]


@dataclass(frozen=True)
class Vocabulary:
    """Token -> id, counted from our own events; unseen tokens hash into fixed buckets."""

    tokens: tuple[str, ...]
    categories: tuple[str, ...]
    hash_buckets: int
    index: dict[str, int] = field(init=False, repr=False, compare=False)
    category_index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Ids: 0 = PAD, 1..V = vocabulary, V+1..V+B = hash buckets.
        object.__setattr__(self, "index", {t: i + 1 for i, t in enumerate(self.tokens)})
        object.__setattr__(self, "category_index", {c: i for i, c in enumerate(self.categories)})

    @property
    def size(self) -> int:
        return 1 + len(self.tokens) + self.hash_buckets

    def token_id(self, token: str) -> int:
        found = self.index.get(token)
        if found is not None:
            return found
        return 1 + len(self.tokens) + zlib.crc32(token.encode()) % self.hash_buckets

    def category_id(self, category: str | None) -> int:
        return self.category_index.get(category or UNKNOWN_CATEGORY, 0)

    @classmethod
    def build(
        cls,
        titles: Iterable[str | None],
        descriptions: Iterable[str | None],
        categories: Iterable[str | None],
        config: TowerConfig,
    ) -> Vocabulary:
        """Count terms over our own events; keep the ``max_vocab`` most frequent (ties by name)."""
        counts: Counter[str] = Counter()
        for t in titles:
            counts.update(title_terms(t))
        for d in descriptions:
            counts.update(tokenize(d))
        kept = sorted((t for t, n in counts.items() if n >= config.min_count), key=lambda t: (-counts[t], t))
        cats = sorted({c for c in categories if c})
        return cls(tuple(kept[: config.max_vocab]), (UNKNOWN_CATEGORY, *cats), config.hash_buckets)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens": list(self.tokens),
            "categories": list(self.categories),
            "hash_buckets": self.hash_buckets,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Vocabulary:
        return cls(tuple(raw["tokens"]), tuple(raw["categories"]), int(raw["hash_buckets"]))


@dataclass(frozen=True)
class EncodedEvents:
    """Events as padded token-id matrices, ready to index by batch."""

    title: torch.Tensor  # (N, max_title_tokens) int64, PAD-filled
    description: torch.Tensor  # (N, max_description_tokens) int64
    category: torch.Tensor  # (N,) int64

    def __len__(self) -> int:
        return int(self.category.shape[0])

    def take(self, idx: torch.Tensor) -> EncodedEvents:
        return EncodedEvents(self.title[idx], self.description[idx], self.category[idx])


def _pad(rows: Sequence[list[int]], width: int) -> torch.Tensor:
    out = np.full((len(rows), width), PAD, dtype=np.int64)
    for i, row in enumerate(rows):
        row = row[:width]
        out[i, : len(row)] = row
    return torch.from_numpy(out)


def encode_events(events: pd.DataFrame, vocab: Vocabulary, config: TowerConfig) -> EncodedEvents:
    """``events`` needs ``title``, ``description`` (nullable) and ``category``."""
    titles = [[vocab.token_id(t) for t in title_terms(x)] for x in events["title"].tolist()]
    descs = [[vocab.token_id(t) for t in tokenize(x)] for x in events["description"].tolist()]
    cats = torch.tensor([vocab.category_id(c) for c in events["category"].tolist()], dtype=torch.int64)
    return EncodedEvents(
        _pad(titles, config.max_title_tokens), _pad(descs, config.max_description_tokens), cats
    )


class ContentTower(nn.Module):
    """Mean-pooled title and description bags + a category vector -> MLP -> unit vector."""

    def __init__(self, vocab_size: int, n_categories: int, config: TowerConfig) -> None:
        super().__init__()
        # Sparse gradients: a batch touches a few hundred of the vocabulary's rows, and a dense
        # Adam step over the whole table would cost more than the rest of the step together.
        self.tokens = nn.EmbeddingBag(vocab_size, config.hidden, mode="mean", padding_idx=PAD, sparse=True)
        self.category = nn.Embedding(n_categories, config.hidden)
        self.mlp = nn.Sequential(
            nn.Linear(3 * config.hidden, config.hidden),
            nn.ReLU(),
            nn.Linear(config.hidden, config.dim),
        )

    def forward(self, batch: EncodedEvents) -> torch.Tensor:
        parts = [self.tokens(batch.title), self.tokens(batch.description), self.category(batch.category)]
        return F.normalize(self.mlp(torch.cat(parts, dim=1)), dim=1)


@dataclass(frozen=True)
class TowerArtifact:
    """A trained tower with everything needed to embed an event and name the result."""

    model: ContentTower
    vocab: Vocabulary
    config: TowerConfig
    version: str


def tower_version(model: ContentTower, vocab: Vocabulary, config: TowerConfig) -> str:
    """``ct-`` + the first 16 hex of sha256(config, vocabulary, every weight's bytes).

    Content-addressed rather than timestamped: retraining on the same data with the same seed
    yields the same version, so a retried weekly run rewrites nothing downstream.
    """
    h = hashlib.sha256()
    h.update(json.dumps({"config": asdict(config), "vocab": vocab.to_dict()}, sort_keys=True).encode())
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return "ct-" + h.hexdigest()[:16]


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """Pin torch's intra-op threads for the block (the pipeline runs on 2 cores), then restore."""
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, min(n, os.cpu_count() or 1)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def co_rsvp_pairs(
    rsvps: pd.DataFrame,
    window_days: float = 30.0,
    max_pairs_per_user: int = 50,
    seed: int = 7,
) -> pd.DataFrame:
    """(event_a, event_b, later_at) for two distinct events one user RSVPed within ``window_days``.

    ``rsvps`` has ``user_id``, ``event_id`` and ``rsvp_at`` (any sortable instant). A user's
    repeat RSVPs to one event count once (the first). Heavy users are capped at
    ``max_pairs_per_user`` pairs, chosen by a seeded hash, so one enthusiast cannot dominate the
    loss. ``later_at`` (the second RSVP's time) lets callers split pairs by time.
    """
    cols = ["event_a", "event_b", "later_at"]
    if rsvps.empty:
        return pd.DataFrame(columns=cols)
    r = (
        rsvps[["user_id", "event_id", "rsvp_at"]]
        .sort_values(["user_id", "rsvp_at", "event_id"], kind="mergesort")
        .drop_duplicates(["user_id", "event_id"], keep="first")
    )
    pairs = r.merge(r, on="user_id", suffixes=("_a", "_b"))
    pairs = pairs[
        (pairs["rsvp_at_a"] < pairs["rsvp_at_b"])
        | ((pairs["rsvp_at_a"] == pairs["rsvp_at_b"]) & (pairs["event_id_a"] < pairs["event_id_b"]))
    ]
    gap = pairs["rsvp_at_b"] - pairs["rsvp_at_a"]
    pairs = pairs[(gap <= pd.Timedelta(days=window_days)) & (pairs["event_id_a"] != pairs["event_id_b"])]
    if pairs.empty:
        return pd.DataFrame(columns=cols)
    key = pairs["user_id"] + "\x1f" + pairs["event_id_a"] + "\x1f" + pairs["event_id_b"] + f"\x1f{seed}"
    pairs = pairs.assign(_h=pd.util.hash_pandas_object(key, index=False).to_numpy())
    pairs = pairs.sort_values(["user_id", "_h"], kind="mergesort")
    pairs = pairs[pairs.groupby("user_id").cumcount() < max_pairs_per_user]
    out = pairs.rename(columns={"event_id_a": "event_a", "event_id_b": "event_b", "rsvp_at_b": "later_at"})
    return out[cols].sort_values(cols, kind="mergesort").reset_index(drop=True)


def _contrastive_loss(
    a: torch.Tensor, b: torch.Tensor, ids_b: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Symmetric InfoNCE over the batch: row i's positive is column i, the rest are negatives.

    A popular event can appear as the positive of several rows; those duplicates are masked out
    as negatives, since telling the model an event is unlike itself teaches it nothing true.
    """
    logits = a @ b.T / temperature
    n = logits.shape[0]
    same = ids_b.unsqueeze(0) == ids_b.unsqueeze(1)
    same.fill_diagonal_(False)
    logits = logits.masked_fill(same, -1e9)
    target = torch.arange(n)
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


@dataclass(frozen=True)
class TrainReport:
    pairs: int
    events: int
    vocab: int
    epochs: int
    first_epoch_loss: float
    last_epoch_loss: float
    seconds: float


def train_content_tower(
    corpus: pd.DataFrame,
    pairs: pd.DataFrame,
    config: TowerConfig | None = None,
) -> tuple[TowerArtifact, TrainReport]:
    """Fit the tower so co-RSVPed events land close together.

    ``corpus`` (``event_id``, ``title``, ``description``, ``category``) is every event the
    vocabulary is counted from; ``pairs`` (``event_a``, ``event_b``) must reference it.
    """
    import time

    config = config or TowerConfig()
    started = time.perf_counter()
    corpus = corpus.drop_duplicates("event_id").reset_index(drop=True)
    vocab = Vocabulary.build(corpus["title"], corpus["description"], corpus["category"], config)
    position = pd.Series(np.arange(len(corpus)), index=corpus["event_id"])
    known = pairs["event_a"].isin(position.index) & pairs["event_b"].isin(position.index)
    if not known.all():
        raise ValueError(f"{int((~known).sum())} training pairs reference events missing from the corpus")
    a_idx = torch.from_numpy(position.loc[pairs["event_a"]].to_numpy(dtype=np.int64))
    b_idx = torch.from_numpy(position.loc[pairs["event_b"]].to_numpy(dtype=np.int64))
    encoded = encode_events(corpus, vocab, config)

    losses: list[float] = []
    with _torch_threads(config.threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        generator = torch.Generator().manual_seed(config.seed)
        model = ContentTower(vocab.size, len(vocab.categories), config)
        dense = [p for name, p in model.named_parameters() if not name.startswith("tokens.")]
        optimizers: list[torch.optim.Optimizer] = [
            torch.optim.SparseAdam(list(model.tokens.parameters()), lr=config.learning_rate),
            torch.optim.Adam(dense, lr=config.learning_rate, weight_decay=config.weight_decay),
        ]
        model.train()
        n = len(a_idx)
        for _ in range(config.epochs if n >= 2 else 0):
            perm = torch.randperm(n, generator=generator)
            total, batches = 0.0, 0
            for start in range(0, n, config.batch_size):
                sel = perm[start : start + config.batch_size]
                if len(sel) < 2:
                    continue
                # Random direction per pair: the tower is one function, so (a, b) and (b, a)
                # are the same example; flipping keeps either side from being special.
                flip = torch.rand(len(sel), generator=generator) < 0.5
                left = torch.where(flip, b_idx[sel], a_idx[sel])
                right = torch.where(flip, a_idx[sel], b_idx[sel])
                loss = _contrastive_loss(
                    model(encoded.take(left)), model(encoded.take(right)), right, config.temperature
                )
                for opt in optimizers:
                    opt.zero_grad()
                loss.backward()
                for opt in optimizers:
                    opt.step()
                total += float(loss.detach())
                batches += 1
            losses.append(total / max(batches, 1))
        model.eval()
    if any(not math.isfinite(x) for x in losses):
        raise FloatingPointError(f"content tower loss diverged: {losses}")
    artifact = TowerArtifact(model, vocab, config, tower_version(model, vocab, config))
    report = TrainReport(
        pairs=len(pairs),
        events=len(corpus),
        vocab=len(vocab.tokens),
        epochs=len(losses),
        first_epoch_loss=losses[0] if losses else float("nan"),
        last_epoch_loss=losses[-1] if losses else float("nan"),
        seconds=time.perf_counter() - started,
    )
    log.info("content tower %s trained: %s", artifact.version, report)
    return artifact, report


def embed_events(
    artifact: TowerArtifact, events: pd.DataFrame, batch_size: int = 4096
) -> npt.NDArray[np.float32]:
    """(N, dim) float32 unit vectors for ``events`` (``title``, ``description``, ``category``)."""
    if events.empty:
        return np.zeros((0, artifact.config.dim), dtype=np.float32)
    encoded = encode_events(events, artifact.vocab, artifact.config)
    out: list[torch.Tensor] = []
    with _torch_threads(artifact.config.threads), torch.inference_mode():
        artifact.model.eval()
        for start in range(0, len(encoded), batch_size):
            idx = torch.arange(start, min(start + batch_size, len(encoded)))
            out.append(artifact.model(encoded.take(idx)))
    result: npt.NDArray[np.float32] = torch.cat(out).numpy().astype(np.float32)
    return result


def save_tower(artifact: TowerArtifact, folder: Path) -> None:
    """Write ``weights.pt`` (a state_dict) and ``vocab.json`` (vocabulary, config, version)."""
    torch.save(artifact.model.state_dict(), folder / WEIGHTS_FILE)
    meta = {
        "format": FORMAT,
        "version": artifact.version,
        "config": asdict(artifact.config),
        **artifact.vocab.to_dict(),
    }
    (folder / VOCAB_FILE).write_text(json.dumps(meta, sort_keys=True))


def load_tower(folder: Path) -> TowerArtifact:
    """Load a saved tower (``weights_only=True``: the file can hold tensors, never code).

    The version is recomputed from what was loaded and must match the recorded one, so a
    truncated or swapped weights file is refused instead of producing quietly different vectors.
    """
    meta = json.loads((folder / VOCAB_FILE).read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{folder}: tower format {meta.get('format')}, this code reads {FORMAT}")
    config = TowerConfig(**meta["config"])
    vocab = Vocabulary.from_dict(meta)
    model = ContentTower(vocab.size, len(vocab.categories), config)
    state = torch.load(folder / WEIGHTS_FILE, map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    model.eval()
    version = tower_version(model, vocab, config)
    if version != meta["version"]:
        raise ValueError(f"{folder}: weights hash to {version}, the vocabulary file says {meta['version']}")
    return TowerArtifact(model, vocab, config, version)


def group_similarity(
    vectors: npt.NDArray[np.float32],
    groups: npt.ArrayLike,
    n_pairs: int = 20_000,
    seed: int = 0,
) -> tuple[float, float]:
    """(mean cosine of random same-group pairs, mean cosine of random pairs) for unit vectors.

    How the tower is judged without a ranker: events of one series, organizer or category
    should sit closer than two events drawn at random. Rows whose group is null are skipped.
    """
    rng = np.random.default_rng(seed)
    n = len(vectors)
    if n < 2:
        return float("nan"), float("nan")
    i, j = rng.integers(0, n, n_pairs), rng.integers(0, n, n_pairs)
    keep = i != j
    rand = float(np.mean(np.sum(vectors[i[keep]] * vectors[j[keep]], axis=1)))

    codes, _ = pd.factorize(pd.Series(groups), use_na_sentinel=True)
    rows = np.flatnonzero(codes >= 0)
    rows = rows[np.argsort(codes[rows], kind="stable")]
    sizes = np.bincount(codes[rows])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    usable = np.flatnonzero(sizes >= 2)
    if len(usable) == 0:
        return float("nan"), rand
    # A group is picked in proportion to its size, then two distinct members of it.
    weights = sizes[usable] / sizes[usable].sum()
    g = usable[rng.choice(len(usable), size=n_pairs, p=weights)]
    x = rng.integers(0, sizes[g])
    y = rng.integers(0, sizes[g] - 1)
    y = y + (y >= x)
    a, b = rows[starts[g] + x], rows[starts[g] + y]
    same = float(np.mean(np.sum(vectors[a] * vectors[b], axis=1)))
    return same, rand
