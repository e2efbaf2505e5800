//! SEV-SNP verification: authenticity (chain, signature) in `chain`, acceptability (policy) in `policy`.
