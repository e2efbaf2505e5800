#!/bin/sh
# The demo repository's test suite: plain shell, prints the plain "N passed, N failed" summary line.
. ./calc.sh
passed=0
failed=0
check() {
  if [ "$2" = "$3" ]; then passed=$((passed + 1)); echo "ok   $1"
  else failed=$((failed + 1)); echo "FAIL $1: got $2, want $3"; fi
}
check "add 2 3" "$(add 2 3)" 5
check "add 0 0" "$(add 0 0)" 0
check "mul 4 5" "$(mul 4 5)" 20
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
