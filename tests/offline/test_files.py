"""`files.batches` cuts a JSONL file alike with the compiled line cutter (`_lines.take`,
read a block at a time) and without it (the reference, line by line)."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.offline import files
from monitor.offline.progress import Progress

needs_build = pytest.mark.skipif(files.LINES is None, reason="monitor.offline._lines not built")


def _by_line(data: bytes) -> list[tuple[list[int], list[bytes]]]:
    return list(files._by_line(io.BytesIO(data), Progress(None, None)))


def _by_block(data: bytes, block: int) -> list[tuple[list[int], list[bytes]]]:
    assert files.LINES is not None
    return list(files._by_block(io.BytesIO(data), Progress(None, None), block,
                                files.LINES.take))


ODD = (b'{"a":1}\n\n  \n\t\r\n{"b":2}\r\n{"c":3}\r\r\n \x0b\x0c\n x \n\r\n{"d":4}\r'
       b'\n\n{"e":5}')


@needs_build
@pytest.mark.parametrize("block", [1, 2, 3, 7, 64, 1 << 20])
def test_blank_lines_carriage_returns_and_a_last_line_without_newline(block):
    expected = [([1, 5, 6, 8, 10, 12], [b'{"a":1}', b'{"b":2}', b'{"c":3}', b" x ",
                                       b'{"d":4}', b'{"e":5}'])]
    assert _by_line(ODD) == expected
    assert _by_block(ODD, block) == expected


@needs_build
@pytest.mark.parametrize("block", [5, 1000, 1 << 20])
def test_batches_of_a_thousand_lines_across_blocks(block):
    data = b"".join(b'{"i":%d}\n' % i + (b"\n" if i % 7 == 0 else b"") for i in range(2_500))
    expected = _by_line(data)
    assert [len(lines) for _, lines in expected] == [1_000, 1_000, 500]
    assert _by_block(data, block) == expected


@needs_build
def test_a_line_longer_than_many_blocks():
    data = b'{"a":1}\n' + b"x" * 10_000 + b"\r\n\n" + b"y" * 5_000
    assert _by_block(data, 7) == _by_line(data) == [([1, 2, 4], [b'{"a":1}', b"x" * 10_000,
                                                                  b"y" * 5_000])]


@needs_build
@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"{}", b"a", b" ", b"\t", b"\r", b"\n", b"\x0b", b"\xff",
                                 b"\r\n", b"\n\n"]), max_size=60),
       st.integers(1, 16))
def test_any_bytes_cut_alike(pieces, block):
    data = b"".join(pieces)
    assert _by_block(data, block) == _by_line(data)


def test_batches_reads_a_file_whole(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes((ODD + b"\n") * 300)
    got = list(files.batches(str(path), Progress(None, None)))
    assert got == _by_line((ODD + b"\n") * 300)
    assert sum(len(lines) for _, lines in got) == 6 * 300
