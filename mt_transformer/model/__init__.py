"""The Transformer of "Attention Is All You Need": masks, embeddings and positions, attention,
layers, and the encoder-decoder that joins them."""
