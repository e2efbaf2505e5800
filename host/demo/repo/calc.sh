# A tiny calculator library, the repository of the fenced-run demo bounty.
add() { echo $(( $1 - $2 )); }
mul() { echo $(( $1 * $2 )); }
