"""scripts/unseen_characters.py: characters training never had, inserted and looked for in the output."""

import unseen_characters


def test_each_line_gets_an_unseen_mark_and_the_share_kept_is_counted(trained_run, corpus):
    train = [f"{corpus}/train.en", f"{corpus}/train.de"]
    (row,) = unseen_characters.main(
        ["--train", *train, "--src", f"{corpus}/valid.en", "--checkpoints", trained_run, "--beam", "1"]
    )
    assert row["lines"] == 60 and 0 <= row["characters_kept"] <= 1
    assert set(row["by_mark"]) <= set(unseen_characters.MARKS)
    assert sum(int(count.split("/")[1]) for count in row["by_mark"].values()) == 60
