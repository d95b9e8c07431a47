"""Frames between ragmon's own processes: an 8-byte big-endian length, then a pickle
(a "message" is a Kafka record everywhere else in ragmon).

The worker's Faust process talks to its states process (monitor/worker/states.py) and to
its page process (monitor/export/pages.py) this way, over socket pairs it made itself:
both ends are ragmon, so pickles are safe here (never for anything read from outside).
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any

__all__ = ["FRAME_LENGTH", "pack_frame", "read_frame"]

FRAME_LENGTH = struct.Struct(">Q")


def pack_frame(value: Any) -> list[bytes]:
    """`value` as a frame: its length, then its pickle."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return [FRAME_LENGTH.pack(len(data)), data]


def read_frame(sock: socket.socket) -> bytearray | None:
    """The next frame's pickle from a blocking socket (`None` at end of file)."""
    header = _read(sock, FRAME_LENGTH.size)
    return None if header is None else _read(sock, FRAME_LENGTH.unpack(header)[0])


def _read(sock: socket.socket, size: int) -> bytearray | None:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            return None
        got += n
    return buffer
