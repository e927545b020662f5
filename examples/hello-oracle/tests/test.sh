#!/bin/sh
# Scores 1 when /app/hello.txt holds exactly the expected line, else 0.
if [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, trialbox!" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "hello.txt is missing or wrong: $(head -c 200 /app/hello.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
