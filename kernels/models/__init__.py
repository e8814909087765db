"""Pretrained models run on our kernels.

    minilm.py   all-MiniLM-L6-v2 (BERT, 6 layers × 12 heads, width 384): sentence
                embeddings exactly as sentence-transformers makes them, and every
                layer's attention weights; installed by ``make model``
    fidelity.py how far half-precision attention moves its sentence embeddings
"""
