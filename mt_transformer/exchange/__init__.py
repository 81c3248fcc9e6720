"""Exchange formats beside decoding: checkpoints exported to CTranslate2 and to `transformers`
(Marian, Pegasus), and `transformers` models imported as checkpoints."""
