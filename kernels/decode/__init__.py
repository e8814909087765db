"""Decoding one token at a time: where §11.2 (computation cost and caching) begins.

    cache.py   KVCache: the keys and values of the tokens so far, so that each new token
               costs O(n·d) instead of recomputing the whole prefix's attention
"""
from .cache import KVCache

__all__ = ["KVCache"]
