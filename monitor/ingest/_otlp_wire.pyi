# Types of the compiled OTLP wire scanner (_otlp_wire.pyx), for mypy.
from collections.abc import Callable
from typing import Any

def spans(raw: bytes, routes: dict[str, tuple[Any, ...]],
          route: Callable[[str], tuple[Any, ...]], kinds: tuple[str, str, str, str],
          events: frozenset[str], documents: Callable[[Any], tuple[list[Any], int]],
          make: Callable[..., Any]) -> list[tuple[str, Any, int]]: ...
