"""A bare Faust agent that only counts raw messages: the Faust ceiling on this machine.

    python benchmarks/bare_faust.py BOOTSTRAP TOPIC N [--take 1000]

With `--take K` the agent counts batches from `stream.take_events(K, within=0.5)`, the
way ragmon's worker consumes, instead of iterating event by event.

Prints `rate <traces/s> seconds <s>` measured from the first to the N-th message.
"""

from __future__ import annotations

import os
import sys
import time

import faust

bootstrap, topic_name, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
take = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[4] == "--take" else 0
del sys.argv[1:]  # what is left goes to Faust's command line
app = faust.App(f"bare-{time.time_ns()}", broker=f"kafka://{bootstrap}", value_serializer="raw",
                key_serializer="raw", web_enabled=False, broker_session_timeout=4,
                broker_heartbeat_interval=1, consumer_auto_offset_reset="earliest")
topic = app.topic(topic_name, value_serializer="raw", key_serializer="raw")
state = {"n": 0, "first": 0.0}


def counted(n: int) -> None:
    if state["n"] == 0:
        state["first"] = time.perf_counter()
    state["n"] += n
    if state["n"] >= expected:
        seconds = time.perf_counter() - state["first"]
        print(f"rate {expected / seconds:.0f} seconds {seconds:.2f}", flush=True)
        os._exit(0)  # app.stop() from inside its own agent waits for that agent


@app.agent(topic)
async def count(stream):  # type: ignore[no-untyped-def]
    if take:
        async for events in stream.take_events(take, within=0.5):
            counted(len(events))
    async for _ in stream:
        counted(1)


if __name__ == "__main__":
    faust.Worker(app, loglevel="warning", quiet=True).execute_from_commandline()
