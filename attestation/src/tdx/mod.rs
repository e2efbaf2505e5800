//! Intel TDX DCAP quotes (v4, v5): typed parsing and byte-exact serialisation.
