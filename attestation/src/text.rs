//! Escaping for human-readable output: every binary passes text that came from outside (certificate names,
//! report fields, repository file names and lines, command output) through here before it reaches a terminal,
//! so that no input can move the cursor, recolour, retitle or rewrite what the reader sees.
//!
//! The form (documented in docs/threat-model.md, "Human output"):
//! - C0 controls and DEL: `\t`, `\r`, `\n` for those three, `\xNN` (two lower-case hex digits) for the rest,
//!   e.g. ESC is `\x1b`, DEL is `\x7f`;
//! - C1 controls (U+0080..U+009F) and the Unicode bidirectional controls (U+200E, U+200F, U+202A..U+202E,
//!   U+2066..U+2069, which reorder what a terminal shows): `\u{9b}`, `\u{202e}`;
//! - everything else, backslash included, unchanged. The escaped form is for reading, not for parsing back: a
//!   literal `\x1b` in the input looks the same as an escaped ESC, which is harmless, since neither is a control.
//!
//! [`escape`] is for one-line values (a name, a path, a field) and escapes the newline too, so a value cannot
//! start a line of its own; [`escape_text`] is for text meant to span lines (an output tail, a message) and
//! keeps the newline only.
//!
//! JSON output stays JSON: serde_json escapes C0 as `\uXXXX` (and `"`, `\`) but writes DEL, C1 and the bidi
//! controls as raw UTF-8, which JSON allows but a terminal may act on (xterm reads UTF-8 C1 as controls).
//! [`json_safe`] rewrites those as `\u007f`, `\u009b`, `\u202e`: the same JSON value, decoded to the same
//! string by any reader, with no raw control character left. Every `--json` output passes through it.

use std::borrow::Cow;
use std::fmt::Write;

/// True for a character [`escape_text`] rewrites: C0 but newline, DEL, C1, and the bidi controls.
pub fn is_unsafe(c: char) -> bool {
    matches!(c, '\0'..='\x09' | '\x0b'..='\x1f' | '\x7f' | '\u{80}'..='\u{9f}')
        || matches!(
            c,
            '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

fn escaped(s: &str, keep_newline: bool) -> Cow<'_, str> {
    let bad = |c: char| is_unsafe(c) || (!keep_newline && c == '\n');
    if !s.chars().any(bad) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !bad(c) {
            out.push(c);
            continue;
        }
        match c {
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '\0'..='\x1f' | '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            _ => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

/// A one-line value for display: every control character escaped, the newline included.
pub fn escape(s: &str) -> Cow<'_, str> {
    escaped(s, false)
}

/// Text for display that may span lines: every control character escaped but the newline.
pub fn escape_text(s: &str) -> Cow<'_, str> {
    escaped(s, true)
}

/// A value's `Display` form escaped as one line (for paths, errors and other `Display` types).
pub fn shown(v: impl std::fmt::Display) -> String {
    escape(&v.to_string()).into_owned()
}

/// Serialised JSON (compact or pretty, from serde_json) with every DEL, C1 and bidi control written as a
/// `\uXXXX` escape. Such characters can only occur inside JSON strings (serde_json writes nothing else raw
/// but ASCII), where the escape means the same character, so the document decodes to the same value.
pub fn json_safe(json: &str) -> Cow<'_, str> {
    let bad = |c: char| is_unsafe(c) && c != '\n';
    // Printable ASCII and newlines, what a JSON text almost always is, are looked at a byte at a time.
    let plain = |b: &u8| matches!(b, b' '..=b'~' | b'\n');
    if json.as_bytes().iter().all(plain) || !json.chars().any(bad) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if bad(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// True when `bytes` holds no byte (or character) that [`escape_text`] would rewrite: what a test asserts of
/// everything a binary printed. Invalid UTF-8 counts as unsafe (C1 bytes 0x80..0x9F of an 8-bit terminal).
pub fn is_safe_output(bytes: &[u8]) -> bool {
    match std::str::from_utf8(bytes) {
        Ok(s) => !s.chars().any(is_unsafe),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_the_rest_kept() {
        assert_eq!(escape("a\x1b[31mb"), "a\\x1b[31mb");
        assert_eq!(escape("x\ny\tz\r"), "x\\ny\\tz\\r");
        assert_eq!(escape_text("x\ny\x07"), "x\ny\\x07");
        assert_eq!(escape("\u{9b}2J\u{7f}"), "\\u{9b}2J\\x7f");
        assert_eq!(escape("abc\u{202e}gpj.exe"), "abc\\u{202e}gpj.exe");
        assert_eq!(escape("naïve ℹ \\x1b"), "naïve ℹ \\x1b");
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
        assert_eq!(
            shown(std::path::Path::new("/tmp/\x1b]0;t\x07").display()),
            "/tmp/\\x1b]0;t\\x07"
        );
    }

    #[test]
    fn json_stays_the_same_json_without_raw_controls() {
        let value = serde_json::json!({ "subject": "CN=\x1b[2J\u{7f}\u{9b}31m\u{202e}x\ty" });
        for text in [value.to_string(), format!("{value:#}")] {
            let safe = json_safe(&text);
            assert!(is_safe_output(safe.as_bytes()), "{safe}");
            let back: serde_json::Value = serde_json::from_str(&safe).expect("still JSON");
            assert_eq!(back, value);
        }
        assert!(matches!(json_safe("{\"a\": \"b\"}"), Cow::Borrowed(_)));
    }

    #[test]
    fn every_char_escaped_is_safe_output() {
        for c in (0u32..0x3000).filter_map(char::from_u32) {
            let s = c.to_string();
            assert!(is_safe_output(escape_text(&s).as_bytes()), "{c:?}");
            assert!(!escape(&s).contains('\n'), "{c:?}");
        }
        assert!(!is_safe_output(b"a\x1bb"));
        assert!(!is_safe_output(b"\xc2\x9b"));
        assert!(!is_safe_output(b"\x9b"));
        assert!(is_safe_output(b"line\nline\n"));
    }
}
