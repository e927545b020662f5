#!/bin/sh
set -e
printf 'Hello, trialbox!\n' > /app/hello.txt
