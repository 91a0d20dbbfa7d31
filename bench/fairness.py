"""Does one client sending drawings as fast as it likes shut an honest visitor out?

    python -m bench.fairness [--seconds 30] [--rate 10]

Starts `python app.py` on a loopback port. Two visitors, told apart as a Space's proxy tells
them apart (their own `X-Forwarded-For` hop): a greedy one sends `--rate` drawings a second to
the public analyse_drawing over the raw queue protocol and never waits for an answer; an honest
one sends a drawing a second and waits for its answer. Prints the honest visitor's answers,
refusals ("Queue is full", HTTP 429) and round-trip times (p50, p90), and what the greedy one
got. Before issue 36 (one run, this machine): the honest visitor's drawing failed "Queue is full"
11 times in 60, p50 153 → 373 ms.
"""
from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import urllib.error
import urllib.request
import uuid

from bench.app_latency import start
from bench.attack import drawing


def join(base: str, fn: int, data: list, who: str, sid: str | None = None) -> tuple[str, float]:
    """One event (of session `sid`, else a new one): ("ok" | "refused: …" | "error: …", seconds
    to its answer)."""
    sid = sid or uuid.uuid4().hex[:16]
    body = json.dumps({"data": [*data, None], "fn_index": fn, "event_data": None,
                       "session_hash": sid, "trigger_id": None}).encode()
    headers = {"Content-Type": "application/json", "X-Forwarded-For": who}
    t = time.perf_counter()
    try:
        urllib.request.urlopen(urllib.request.Request(base + "gradio_api/queue/join", body,
                                                      headers), timeout=30).read()
    except urllib.error.HTTPError as e:
        return f"refused: HTTP {e.code}", time.perf_counter() - t
    req = urllib.request.Request(f"{base}gradio_api/queue/data?session_hash={sid}",
                                 headers={"X-Forwarded-For": who})
    for line in urllib.request.urlopen(req, timeout=60):
        if line.startswith(b"data:"):
            msg = json.loads(line[5:])
            if msg.get("msg") == "queue_full":
                return "refused: queue full", time.perf_counter() - t
            if msg.get("msg") == "process_completed":
                ok = msg.get("success")
                return ("ok" if ok else "error: " + str(msg.get("output"))[:80],
                        time.perf_counter() - t)
    return "error: no answer", time.perf_counter() - t


def greedy(base, fn, value, rate, until, said):
    def one():
        said.append(join(base, fn, [value, "mnist", True, 6, 1], "203.0.113.7")[0])
    while time.monotonic() < until:
        threading.Thread(target=one, daemon=True).start()
        time.sleep(1 / rate)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rate", type=float, default=10)
    args = ap.parse_args()
    proc, base, took = start(["app.py"], env={"VIT_WARM": "0"})
    try:
        config = json.loads(urllib.request.urlopen(base + "config", timeout=30).read())
        fn = next(d["id"] for d in config["dependencies"] if d.get("api_name") == "analyse_drawing")
        value = drawing()
        join(base, fn, [value, "mnist", True, 6, 1], "198.51.100.1")            # warm
        until = time.monotonic() + args.seconds
        flood: list[str] = []
        threading.Thread(target=greedy, args=(base, fn, value, args.rate, until, flood),
                         daemon=True).start()
        honest = []
        while time.monotonic() < until:
            t = time.monotonic()
            honest.append(join(base, fn, [value, "mnist", True, 6, 1], "198.51.100.1"))
            time.sleep(max(0.0, 1 - (time.monotonic() - t)))
        time.sleep(3)
        ok = sorted(s for r, s in honest if r == "ok")
        print(f"app.py on {base} (started in {took:.1f} s); {args.rate:g} drawings a second from "
              f"one visitor for {args.seconds:g} s")
        print(f"  honest visitor: {len(ok)} of {len(honest)} answered, "
              f"{sum(r.startswith('refused') for r, _ in honest)} refused, "
              f"{sum(r.startswith('error') for r, _ in honest)} errors; round trip p50 "
              f"{1000 * statistics.median(ok):.0f} ms, p90 "
              f"{1000 * ok[int(0.9 * (len(ok) - 1))]:.0f} ms" if ok else "  honest visitor: none answered")
        print(f"  greedy visitor: {len(flood)} sent and finished, {flood.count('ok')} answered, "
              f"{sum(r.startswith('refused') for r in flood)} refused")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


if __name__ == "__main__":
    main()
