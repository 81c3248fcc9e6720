"""Data: load and clean parallel text, train the subword tokenizer, encode and cache, batch by tokens."""
