#!/bin/sh
# The grader runs with trialbox's own venv, so the task image needs nothing extra.
cd /tests && exec /opt/trialbox/venv/bin/python -m container_runtime grade --grader grader:SumGrader
