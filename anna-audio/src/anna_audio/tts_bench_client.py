"""The speech benchmark's HTTP client (:mod:`anna_audio.tts_bench`): rounds of streamed ``POST /v1/audio/speech``
requests sent at once, each timed to its first body byte and its last.

By default a round runs in a client process of its own (:class:`BenchClient`), as a real client would: a client in
the server's process shares its interpreter lock with the server's request handling, its engine and its vocoder
threads, and its 16 streams' reading would be timed as the server's. That process is ``python -m
anna_audio.tts_bench_client`` (:func:`main`: one JSON round per line in, its results as one JSON line out); this
module imports only the standard library and httpx, so it starts without torch.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any


async def _one(client: Any, url: str, i: int) -> dict[str, float]:
    """One streamed request (``pcm``): ``{"first_audio_s", "latency_s", "bytes"}``.

    Raises:
        RuntimeError: a response other than 200.
    """
    start = time.perf_counter()
    first = None
    size = 0
    async with client.stream("POST", url, json={"input": f"request {i}", "response_format": "pcm"}) as r:
        if r.status_code != 200:
            raise RuntimeError(f"request {i}: HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for piece in r.aiter_raw():
            if piece and first is None:
                first = time.perf_counter() - start
            size += len(piece)
    return {"first_audio_s": first or float("nan"), "latency_s": time.perf_counter() - start, "bytes": size}


async def _round(url: str, n: int, offset: int) -> tuple[float, list[dict[str, float]]]:
    import httpx

    async with httpx.AsyncClient(timeout=600) as client:
        sent = time.perf_counter()
        return sent, await asyncio.gather(*(_one(client, url, offset + i) for i in range(n)))


def run_round(url: str, n: int, offset: int) -> tuple[float, list[dict[str, float]]]:
    """``n`` requests sent at once (texts ``"request <offset + i>"``), in this process: ``(sent, results)``, the
    ``time.perf_counter()`` at which the requests started (the client made; one clock for every process of a Linux
    machine) and one result per request, in order (:func:`_one`)."""
    return asyncio.run(_round(url, n, offset))


class BenchClient:
    """Where the rounds run: a client process (``own_process``, the benchmark's default) or this one.

    Use as a context manager (the process is started on entry and stopped on exit).
    """

    def __init__(self, own_process: bool = True):
        self.own_process = own_process
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> BenchClient:
        if self.own_process:
            self._proc = subprocess.Popen([sys.executable, "-m", "anna_audio.tts_bench_client"], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True, bufsize=1)
        return self

    def __exit__(self, *exc: Any) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with proc:  # closes the pipes
            try:
                proc.stdin.close()
            except OSError:  # the process is gone already
                pass
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def round(self, url: str, n: int, offset: int) -> tuple[float, list[dict[str, float]]]:
        """:func:`run_round` in the client process (or here).

        Raises:
            RuntimeError: the client process failed the round (its message) or ended.
        """
        if self._proc is None:
            return run_round(url, n, offset)
        try:
            self._proc.stdin.write(json.dumps({"url": url, "n": n, "offset": offset}) + "\n")
            self._proc.stdin.flush()
        except OSError as exc:
            raise RuntimeError(f"the benchmark's client process ended (exit status {self._proc.wait()})") from exc
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the benchmark's client process ended (exit status {self._proc.wait()})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"the benchmark's client: {reply['error']}")
        return reply["sent"], reply["results"]


def main() -> None:
    """The client process: each line of stdin a round ``{"url", "n", "offset"}``, each answered by one line of stdout,
    ``{"sent": ..., "results": [...]}`` or ``{"error": "..."}``; ends at the end of stdin."""
    for line in sys.stdin:
        round_ = json.loads(line)
        try:
            sent, results = run_round(round_["url"], round_["n"], round_["offset"])
            reply = {"sent": sent, "results": results}
        except Exception as exc:  # noqa: BLE001 - reported to the benchmark, which raises it
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
