//! Intake stages 1-5 (receive, unpack, structure, normalise, scan). Nothing reachable from here spawns a
//! process or loads code; a test walks the code to keep it so.
