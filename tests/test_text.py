"""Text as every command reads it (data/text.py)."""

import pytest

from mt_transformer.data.text import in_capitals, read_lines, with_case_of
from mt_transformer.errors import UserError


def test_read_lines_handles_crlf_bom_and_missing_final_newline(tmp_path):
    path = tmp_path / "x.txt"
    path.write_bytes("\ufeffone\r\ntwo\r\n\r\nfour".encode())
    assert read_lines(str(path)) == ["one", "two", "", "four"]
    with pytest.raises(UserError, match="nope.txt: file not found"):
        read_lines(str(tmp_path / "nope.txt"))


def test_a_source_in_capitals_gets_its_translation_in_capitals():
    assert in_capitals("EIN MANN LÄUFT.") and in_capitals("OK") and in_capitals("<B>STOP</B>")
    assert not any(in_capitals(text) for text in ("Ein Mann", "A", "42 %", "<2en> HI"))
    assert with_case_of("EIN MANN LÄUFT.", "A man runs.") == "A MAN RUNS."
    assert with_case_of("Ein Mann läuft.", "A man runs.") == "A man runs."
    assert with_case_of("ΈΝΑΣ ΆΝΤΡΑΣ", "ein Mann") == "EIN MANN" and with_case_of("男人", "Mann") == "Mann"
