#!/bin/bash
# The greeting is the skill's line, which only the skill says.
if [ "$(cat /app/greeting.txt 2>/dev/null)" = "Ahoy from the forge crew!" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "greeting.txt: $(head -c 80 /app/greeting.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
