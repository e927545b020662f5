#!/bin/sh
# Scores 1 when the server the agent left running answers /ping with "pong".
python3 - <<'PY'
import urllib.request
try:
    body = urllib.request.urlopen("http://127.0.0.1:8000/ping", timeout=5).read().decode()
except OSError as exc:
    print(f"no answer from the server: {exc}")
    body = ""
open("/logs/verifier/reward.txt", "w").write("1\n" if body.strip() == "pong" else "0\n")
PY
