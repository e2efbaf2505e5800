//! Intel TDX quote verification: authenticity, collateral, TCB status, policy.
