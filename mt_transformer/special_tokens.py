"""The ids every vocabulary reserves, the same in the tokenizer, the batches, the model and the
search: padding 0, unknown 1, beginning of sentence 2, end of sentence 3."""

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
