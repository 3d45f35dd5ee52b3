#!/usr/bin/env python3
"""Puts `nudge serve` under the pressure an internet-facing server meets, and reports as JSON.

    http-pressure.py connections HOST PORT COUNT WAIT_SECONDS [PATH...]
        First the floor: ten rounds of real requests (GET /health, GET /unsubscribe with a bad
        token, and each PATH given) timed with nothing else open. Then COUNT connections held
        open: a third idle, a third sending a request head they never finish, a third a POST
        whose body never comes; meanwhile the same rounds of real requests are timed again.
        Reports, for both, the median and the slowest real request (its path and round), their
        statuses, how many held connections the server closed at once (to make room) and how
        long it took to close all of them.
    http-pressure.py body HOST PORT PATH chunked|length
        A 10 MB body, announced by its Content-Length or sent chunked, of which only the first
        megabyte comes: reports the status the server answered while the body was unfinished
        (0 if none), whether it reset the connection, and how many bytes were sent.

The tests of `nudge serve` run it; an operator can point it at a staging server.
"""
import json
import resource
import select
import socket
import sys
import time


def request(host, port, path):
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=10) as conn:
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
    return status, time.monotonic() - started


def is_closed(conn):
    """Whether the server closed `conn`; what it sent first (a 408, a 413) is read and dropped."""
    poller = select.poll()
    poller.register(conn, select.POLLIN | select.POLLHUP | select.POLLERR)
    if not poller.poll(0):
        return False
    try:
        while True:
            if conn.recv(65536, socket.MSG_DONTWAIT) == b"":
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def rounds(host, port, paths):
    """Ten rounds of the real requests: their statuses and (seconds, path) of each."""
    statuses, times = [], []
    for number in range(1, 11):
        for path in ["/health", "/unsubscribe?token=not-a-token"] + paths:
            status, seconds = request(host, port, path)
            statuses.append(status)
            # The path as asked, a token's value left out: /health?db=1 is not /health.
            shown = path.split("token=")[0] + "token=…" if "token=" in path else path
            times.append((seconds, f"{shown} (round {number})"))
        time.sleep(0.2)
    return statuses, times


def figures(times):
    ordered = sorted(times)
    return {"median": ordered[len(ordered) // 2][0], "slowest": ordered[-1][0], "slowest_path": ordered[-1][1]}


def connections(host, port, count, wait, paths):
    floor_statuses, floor_times = rounds(host, port, paths)
    held = []
    opened = time.monotonic()
    for n in range(count):
        conn = socket.create_connection((host, port), timeout=10)
        if n % 3 == 1:
            conn.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\nX-Never-Finished: ".encode())
        elif n % 3 == 2:
            conn.sendall(f"POST /webhooks/twilio HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                         f"Content-Length: 60000\r\n\r\nMessageSid=".encode())
        held.append(conn)
    statuses, times = rounds(host, port, paths)
    closed_at_once = sum(1 for conn in held if is_closed(conn))
    all_closed_after = None
    while time.monotonic() - opened < wait:
        if all(is_closed(conn) for conn in held):
            all_closed_after = time.monotonic() - opened
            break
        time.sleep(1)
    still_open = sum(1 for conn in held if not is_closed(conn))
    if still_open == 0 and all_closed_after is None:   # the last closed in the final second
        all_closed_after = time.monotonic() - opened
    for conn in held:
        conn.close()
    return {**figures(times), "statuses": sorted(set(statuses)), "floor": figures(floor_times),
            "floor_statuses": sorted(set(floor_statuses)), "closed_at_once": closed_at_once,
            "all_closed_after": all_closed_after, "still_open": still_open}


def body(host, port, path, how):
    """Announces (or starts chunking) a 10 MB body, sends 1 MB of it (four times the largest body
    Nudge reads) and stops there, then waits up to 60 s for the server. A server that reads a body
    to its end could only wait for the rest, or time out; one that refuses it unread answers 413
    (or resets the connection, if its close overtakes the answer) while the body is unfinished.
    The verdict waits on that event, never on how fast either side was."""
    size, limit = 10 * 1024 * 1024, 1024 * 1024
    conn = socket.create_connection((host, port), timeout=60)
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/octet-stream\r\n"
    head += f"Content-Length: {size}\r\n\r\n" if how == "length" else "Transfer-Encoding: chunked\r\n\r\n"
    sent, answer, reset, piece = 0, b"", False, b"x" * 65536
    started = time.monotonic()
    try:
        conn.sendall(head.encode())
        while sent < limit:
            data = piece if how == "length" else f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
            conn.sendall(data)
            sent += len(piece)
    except (BrokenPipeError, ConnectionResetError):
        reset = True
    except OSError:
        pass
    try:
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            answer += chunk
    except ConnectionResetError:
        reset = True
    except OSError:
        pass
    conn.close()
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return {"status": status, "reset": reset, "sent": sent, "size": size,
            "seconds": round(time.monotonic() - started, 3)}


if __name__ == "__main__":
    # One descriptor a held connection: as many as the hard limit allows.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    kind, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if kind == "connections":
        print(json.dumps(connections(host, port, int(sys.argv[4]), float(sys.argv[5]), sys.argv[6:])))
    else:
        print(json.dumps(body(host, port, sys.argv[4], sys.argv[5])))
