#!/bin/sh
echo "hello, world" > /app/greeting.txt
