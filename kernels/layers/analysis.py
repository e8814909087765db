"""Reading attention weights (the seed's exercise 4): entropy, focus, where the mass goes.

    attention_entropy(weights)                (..., n_q, n_k) -> (..., n_q), in nats
    analyse_attention(weights, causal=True)   an ``AttentionAnalysis`` of the same weights
    analyse_queries_and_keys(q, k)            the same, the weights made a block at a time

The entropy of a row, H = -Σ_j p_j ln p_j (0 ln 0 = 0), is 0 when a query puts all its
weight on one key and ln(m) when it spreads evenly over the m keys it sees: low entropy
is focus.  A key's column mass Σ_i p_ij is how much attention it receives in all; the
rule for an anomaly is stated in ``analyse_attention``.  Everything works on any leading
(layer, head, ...) axes and walks the query rows in blocks, so that beyond its inputs
and results only a block of rows (two, while the next is made) is ever materialised;
for n in the thousands the weights themselves need not exist
(``analyse_queries_and_keys``).
"""
from dataclasses import dataclass

import numpy as np

from .. import dtypes
from ..api import validate
from .similarity import ROW_BLOCK_BYTES, similarity_inputs, weight_blocks

ANOMALY_FACTOR = 4.0  # a key is anomalous when it receives 4x its even share, or more


@dataclass(frozen=True)
class AttentionAnalysis:
    """What a set of attention weights (..., n_q, n_k) does, as data."""

    entropy: np.ndarray        # (..., n_q) nats per query row
    focus: np.ndarray          # (..., n_q) the key each query weighs most
    focus_weight: np.ndarray   # (..., n_q) that key's weight
    focused_rows: np.ndarray   # (..., top) the query rows of lowest entropy, lowest first
    column_mass: np.ndarray    # (..., n_k) Σ_i p_ij: the attention each key receives
    even_mass: np.ndarray      # (n_k,) what each key would receive if every query spread
                               # its weight evenly over the keys it sees
    anomalous: np.ndarray      # (..., n_k) bool: column_mass > factor · even_mass
    factor: float

    @property
    def anomalous_keys(self):
        """Index arrays (one per axis) of the anomalous keys, as ``np.nonzero`` gives them."""
        return np.nonzero(self.anomalous)


def attention_entropy(weights):
    """Entropy of each row of ``weights`` (..., n_q, n_k) in nats -> (..., n_q), in the
    weights' dtype; a row of zeros (a query that sees no key) has entropy 0.

    The weights must be non-negative (ValueError naming the most negative one): a
    negative weight has no p ln p.  A NaN weight (from a NaN score) is kept and makes
    its row's entropy NaN, so that it shows.  Rows are taken as given, not renormalised,
    and their sums are not checked: a softmax row sums to 1 only within its rounding,
    and a query that sees no key has a row of zeros."""
    _check_weights(weights)
    entropy = np.empty(weights.shape[:-1], weights.dtype)
    for row0, block in _row_blocks(weights):
        entropy[..., row0 : row0 + block.shape[-2]] = _entropy(block)
    return entropy


def analyse_attention(weights, *, causal=False, factor=ANOMALY_FACTOR, top=5):
    """Entropy, focus and column mass of ``weights`` (..., n_q, n_k) (see
    ``AttentionAnalysis``).

    Anomaly rule: key j is anomalous when its column mass exceeds ``factor`` times its
    even share, the mass it would receive if every query spread its weight evenly over
    the keys it sees (1 per key for full attention with n_q = n_k; under ``causal``
    masking, early keys are seen by more queries and their share is larger).  A sink
    that every query attends to gets about n_q times its share; a diagonal pattern none.
    ``top``: how many lowest-entropy rows to list.  The weights are checked as
    ``attention_entropy`` checks them.
    """
    _check_weights(weights)
    return _analyse(_row_blocks(weights), weights.shape, weights.dtype, causal, factor, top)


def analyse_queries_and_keys(q, k, *, similarity="dot", bilinear=None, causal=False, scale=None,
                             factor=ANOMALY_FACTOR, top=5, block_rows=None):
    """``analyse_attention`` of ``attention_weights(q, k, ...)`` without ever holding the
    n_q × n_k weights: q (..., n_q, d), k (..., n_k, d); the weights are made
    ``block_rows`` query rows at a time (by default a block of about 16 MiB)."""
    q, k, scale = similarity_inputs(q, k, similarity, bilinear, scale)
    problem = validate(q, k, k, causal, scale)
    shape = problem.batch_shape + (problem.n_q, problem.n_k)
    blocks = weight_blocks(q, k, causal=problem.causal, scale=problem.scale, block_rows=block_rows)
    return _analyse(blocks, shape, problem.dtype, problem.causal, factor, top)


def _analyse(blocks, shape, dtype, causal, factor, top):
    *lead, n_q, n_k = shape
    entropy = np.empty((*lead, n_q), dtype)
    focus = np.empty((*lead, n_q), np.int64)
    focus_weight = np.empty((*lead, n_q), dtype)
    column_mass = np.zeros((*lead, n_k), dtype)
    for row0, block in blocks:
        rows = slice(row0, row0 + block.shape[-2])
        entropy[..., rows] = _entropy(block)
        focus[..., rows] = block.argmax(axis=-1)
        focus_weight[..., rows] = block.max(axis=-1)
        column_mass += block.sum(axis=-2)
    even_mass = _even_mass(n_q, n_k, causal)
    order = np.argsort(entropy, axis=-1, kind="stable")[..., :top]
    return AttentionAnalysis(entropy, focus, focus_weight, order, column_mass, even_mass,
                             column_mass > factor * even_mass, float(factor))


def _even_mass(n_q, n_k, causal):
    """(n_k,): Σ over the queries that see key j of 1 / (number of keys that query sees)."""
    seen = np.full(n_q, n_k) if not causal else np.clip(np.arange(n_q) + (n_k - n_q) + 1, 0, n_k)
    share = np.divide(1.0, seen, out=np.zeros(n_q), where=seen > 0)
    # key j is seen by the queries with seen > j: a reversed cumulative sum over seen counts
    per_count = np.bincount(seen, weights=share, minlength=n_k + 1)
    return np.cumsum(per_count[::-1])[::-1][1:]


def _entropy(block):
    """-Σ p ln p over the last axis, 0 ln 0 = 0, NaN staying NaN; one temporary the size
    of the block."""
    terms = np.zeros_like(block)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.log(block, out=terms, where=block != 0)
    terms *= block
    return -terms.sum(axis=-1)


def _row_blocks(weights):
    """(first row, view of a block of rows) over weights (..., n_q, n_k), ~ROW_BLOCK_BYTES each."""
    n_q, n_k = weights.shape[-2:]
    per_row = max(1, weights[..., 0, :].size * weights.itemsize)
    block_rows = max(1, ROW_BLOCK_BYTES // per_row)
    for row0 in range(0, n_q, block_rows):
        yield row0, weights[..., row0 : row0 + block_rows, :]


def _check_weights(weights):
    if not isinstance(weights, np.ndarray):
        raise TypeError(f"weights must be a NumPy array, got {type(weights).__name__}")
    dtypes.require(weights.dtype, "weights", "attention analysis", dtypes.WIDE)
    if weights.ndim < 2 or 0 in weights.shape[-2:]:
        raise ValueError(f"weights must have shape (..., n_q, n_k) with n_q, n_k >= 1, got {weights.shape}")
    lowest = np.fmin.reduce(weights, axis=None)  # NaN ignored; no copy of the weights
    if lowest < 0:
        index = _first_index_of(weights, lowest)
        where = ", ".join(map(str, index))
        raise ValueError(f"weights must be non-negative (attention weights are probabilities), but the "
                         f"most negative is weights[{where}] = {float(lowest)} (weights {weights.shape})")


def _first_index_of(weights, value):
    """The first index (a tuple) at which ``weights`` holds ``value``, a block of rows at a time."""
    for row0, block in _row_blocks(weights):
        found = np.argwhere(block == value)
        if len(found):
            index = found[0].tolist()
            index[-2] += row0
            return tuple(index)
