"""Text as every command reads it (data/text.py)."""

import pytest

from mt_transformer.data.text import read_lines
from mt_transformer.errors import UserError


def test_read_lines_handles_crlf_bom_and_missing_final_newline(tmp_path):
    path = tmp_path / "x.txt"
    path.write_bytes("\ufeffone\r\ntwo\r\n\r\nfour".encode())
    assert read_lines(str(path)) == ["one", "two", "", "four"]
    with pytest.raises(UserError, match="nope.txt: file not found"):
        read_lines(str(tmp_path / "nope.txt"))
