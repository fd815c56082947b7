#!/bin/bash
# reward.json: the reward and how many of the cases passed
passed=0
total=0
IFS=, read -ra cases <<< "$GREETING_CASES"
for name in "${cases[@]}"; do
  total=$((total + 1))
  got=$(/app/greet.sh "$name" 2>&1)
  if [ "$got" = "Hello, $name!" ]; then passed=$((passed + 1)); else echo "case $name: got '$got'"; fi
done
reward=0
[ "$total" -gt 0 ] && [ "$passed" = "$total" ] && reward=1
printf '{"reward": %s, "cases_passed": %s}\n' "$reward" "$passed" > /logs/verifier/reward.json
