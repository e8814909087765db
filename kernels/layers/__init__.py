"""Built on the ladder: multi-head attention, similarity functions, attention analysis.

    multi_head.py   multi_head_attention, multi_head_projections, split/merge heads
    similarity.py   attention_weights, similarity_attention: dot, cosine, bilinear
    analysis.py     attention_entropy, analyse_attention, analyse_queries_and_keys
    retrieval.py    soft_vs_hard, retrieval_cost: attention as soft retrieval, measured
"""
from .analysis import AttentionAnalysis, analyse_attention, analyse_queries_and_keys, attention_entropy
from .multi_head import multi_head_attention, multi_head_projections
from .retrieval import retrieval_cost, soft_vs_hard
from .similarity import SIMILARITIES, attention_weights, similarity_attention

__all__ = ["SIMILARITIES", "AttentionAnalysis", "analyse_attention", "analyse_queries_and_keys",
           "attention_entropy", "attention_weights", "multi_head_attention", "multi_head_projections",
           "retrieval_cost", "similarity_attention", "soft_vs_hard"]
