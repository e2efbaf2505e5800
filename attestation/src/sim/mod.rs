//! Software stand-ins for the AMD PSP and the Intel QE, signing with a locally generated test chain.
