"""Figures of attention, and the page that walks through them (the seed's §11.1.6).

    figures.py    heatmaps of attention weights (small and annotated, or block-averaged
                  for n in the thousands), heads side by side, Q/K/V vectors, entropy
    retrieval.py  soft vs hard retrieval: accuracy against noise and temperature, cost
    examples.py   the hand-built and seeded examples the explain page reads
    explain.py    write_explanation(out_dir): every figure on those examples, and a
                  README.md that reads them with the numbers
    model_figures.py  all-MiniLM-L6-v2's heads: maps, entropy and confidence, mass on
                  [CLS]/[SEP]/punctuation, pattern classes, head ablation
    heatmap.py    write_heatmap(text, out_dir): those figures, the viewer and summary.md
    viewer.py     write_viewer(tokens, weights, path): one self-contained HTML page
                  (viewer.html inline) to pick layers and heads and inspect weights

    python -m kernels explain --out DIR [--kernel NAME]
    python -m kernels heatmap --text "The cat sat on the mat" --out DIR [--kernel NAME]

Figures are saved and tables written through ``kernels.output`` (as the report's are);
matplotlib (Agg, PNG) is imported on first draw, so that ``import kernels.viz`` stays
light.
"""
