#!/bin/bash
# The expected total is fixed here: the agent may have changed sales.csv.
if [ "$(tr -d ' \n' < /app/total.txt 2>/dev/null)" = "555" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "total.txt: $(head -c 80 /app/total.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
