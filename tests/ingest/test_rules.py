"""The identifier formats as character tables (`rules.char_rule`), which the compiled
admission vouches for identifiers with: they must say exactly what the formats say."""

from __future__ import annotations

import re

import pytest

from monitor.ingest.contract import OTEL_SPAN_ID_FORMAT, OTEL_TRACE_ID_FORMAT, TRACE_ID_FORMAT
from monitor.ingest.rules import char_rule


@pytest.mark.parametrize("format_", [TRACE_ID_FORMAT, OTEL_TRACE_ID_FORMAT,
                                     OTEL_SPAN_ID_FORMAT, r"[a-c]{2,5}", r"[^x]{3}"])
def test_a_table_says_what_its_format_says(format_):
    rule = char_rule(format_)
    assert rule is not None
    full = re.compile(format_).fullmatch
    for c in range(128):
        for n in {rule.low, rule.high}:
            assert bool(rule.allowed[c]) == bool(full(chr(c) * n)), (format_, chr(c), n)
    ok = chr(rule.allowed.index(1))  # the bounds are the format's
    assert full(ok * rule.low) and full(ok * rule.high)
    assert not full(ok * (rule.high + 1)) and (rule.low == 1 or not full(ok * (rule.low - 1)))


@pytest.mark.parametrize("format_", [r"[a-z]+", r"(ab){2}", r"[a-z]{1,4}x"])
def test_a_format_of_another_form_has_no_table(format_):
    assert char_rule(format_) is None
