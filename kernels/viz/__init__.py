"""Figures of attention, and the page that walks through them (the seed's §11.1.6).

    figures.py    heatmaps of attention weights (small and annotated, or block-averaged
                  for n in the thousands), heads side by side, Q/K/V vectors, entropy
    retrieval.py  soft vs hard retrieval: accuracy against noise and temperature, cost
    explain.py    write_explanation(out_dir): every figure on seeded or hand-built
                  examples, and a README.md that reads them with the numbers

    python -m kernels explain --out DIR [--kernel NAME]

matplotlib (Agg, PNG) is imported on first draw, so that ``import kernels.viz`` stays
light.
"""
