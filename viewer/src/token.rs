//! The per-run token: 256 random bits from the operating system, the first path segment of every URL the viewer
//! answers. A request without it gets a 404 that says nothing about the run.

use rand::RngCore;

/// A random token, shown as 64 lower-case hex digits.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    /// A fresh token from the operating system's random source.
    pub fn random() -> Token {
        let mut b = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut b);
        Token(hex::encode(b))
    }

    /// The token as it appears in the URL.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` is this token, compared in time independent of where they differ.
    pub fn matches(&self, candidate: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), candidate.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_random_and_compared_exactly() {
        let (a, b) = (Token::random(), Token::random());
        assert_eq!(a.as_str().len(), 64);
        assert_ne!(a.as_str(), b.as_str());
        assert!(a.matches(a.as_str()));
        assert!(!a.matches(b.as_str()));
        assert!(!a.matches(&a.as_str()[..63]));
        assert!(!a.matches(""));
    }
}
