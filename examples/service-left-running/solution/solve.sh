#!/bin/sh
set -e
mkdir -p /srv/www
printf 'pong' > /srv/www/ping
# Detached, with its output in a file: the agent's process ends, the server keeps running.
nohup python3 -m http.server 8000 --directory /srv/www >/tmp/server.log 2>&1 &
# Wait until it answers, so the verifier never races the start-up.
for _ in $(seq 50); do
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/ping')" 2>/dev/null && exit 0
  sleep 0.1
done
echo "server did not come up" >&2
exit 1
