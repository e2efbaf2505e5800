//! docs/verification.md, compiled in and served by the viewer itself (no external link), with an `id` on every
//! heading, and the map from a check name to the section that explains it.

use pulldown_cmark::{CodeBlockKind, CowStr, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use std::collections::BTreeMap;

/// The text of docs/verification.md at build time.
pub const VERIFICATION_MD: &str = include_str!("../../docs/verification.md");

/// The section used when no section names a check.
pub const FALLBACK_SECTION: &str = "evidence-verifier-lib-evidence";

/// A heading's anchor: lower case, letters and digits kept, every other run of characters one `-`.
pub fn slug(text: &str) -> String {
    let mut out = String::new();
    let mut dash = false;
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            if dash && !out.is_empty() {
                out.push('-');
            }
            dash = false;
            out.push(c);
        } else {
            dash = true;
        }
    }
    out
}

/// The rendered documentation and its sections.
#[derive(Clone, Debug)]
pub struct Docs {
    /// The HTML of the document body (headings carry ids).
    pub html: String,
    /// Every heading: (anchor, text).
    pub sections: Vec<(String, String)>,
    /// For each name in backticks, the anchor of the first section that mentions it.
    pub names: BTreeMap<String, String>,
}

impl Docs {
    /// Renders docs/verification.md.
    pub fn verification() -> Docs {
        Docs::render(VERIFICATION_MD)
    }

    /// Renders a Markdown text: raw HTML in it is shown as text, headings get ids.
    pub fn render(md: &str) -> Docs {
        let opts = Options::ENABLE_TABLES;
        let mut events: Vec<Event<'_>> = Vec::new();
        let mut sections = Vec::new();
        let mut names = BTreeMap::new();
        let mut current = String::new();
        let mut heading: Option<(usize, HeadingLevel, String)> = None;
        for ev in Parser::new_ext(md, opts) {
            match ev {
                Event::Start(Tag::Heading { level, .. }) => {
                    heading = Some((events.len(), level, String::new()));
                    events.push(Event::Text(CowStr::Borrowed("")));
                }
                Event::End(TagEnd::Heading(level)) => {
                    if let Some((at, _, text)) = heading.take() {
                        let mut id = slug(&text);
                        let mut n = 1;
                        while sections.iter().any(|(s, _)| *s == id) {
                            n += 1;
                            id = format!("{}-{n}", slug(&text));
                        }
                        let tag = match level {
                            HeadingLevel::H1 => 1,
                            HeadingLevel::H2 => 2,
                            HeadingLevel::H3 => 3,
                            HeadingLevel::H4 => 4,
                            HeadingLevel::H5 => 5,
                            HeadingLevel::H6 => 6,
                        };
                        events[at] = Event::Html(CowStr::from(format!("<h{tag} id=\"{id}\">")));
                        events.push(Event::Html(CowStr::from(format!("</h{tag}>\n"))));
                        current = id.clone();
                        sections.push((id, text));
                    }
                }
                Event::Text(t) | Event::Code(t) if heading.is_some() => {
                    if let Some((_, _, text)) = heading.as_mut() {
                        text.push_str(&t);
                    }
                    events.push(Event::Text(t));
                }
                Event::Code(t) => {
                    let name = t.trim().to_string();
                    // The "Check names" table lists every check: an index, not the section that explains one.
                    if !current.is_empty() && current != "check-names" {
                        names.entry(name).or_insert_with(|| current.clone());
                    }
                    events.push(Event::Code(t));
                }
                // The document is ours, but raw HTML in it is still shown as text, never interpreted.
                Event::Html(t) | Event::InlineHtml(t) => events.push(Event::Text(t)),
                Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_))) => {
                    events.push(Event::Start(Tag::CodeBlock(CodeBlockKind::Indented)))
                }
                other => events.push(other),
            }
        }
        let mut html = String::new();
        pulldown_cmark::html::push_html(&mut html, events.into_iter());
        Docs {
            html,
            sections,
            names,
        }
    }

    /// The anchor of the section that explains `check`: the first section naming it in backticks, else one
    /// naming its kebab-case form or a shorter prefix of it (`pck_chain.root.pin` -> `pck-chain-root`,
    /// `pck-chain`, ...), else the TDX evidence section for TDX names, else the evidence section.
    pub fn section_for(&self, check: &str) -> String {
        if let Some(s) = self.names.get(check) {
            return s.clone();
        }
        let kebab: String = check
            .chars()
            .map(|c| if c == '.' || c == '_' { '-' } else { c })
            .collect();
        let parts: Vec<&str> = kebab.split('-').collect();
        for n in (1..=parts.len()).rev() {
            let p = parts[..n].join("-");
            if let Some(s) = self.names.get(&p) {
                return s.clone();
            }
        }
        let tdx = [
            "quote",
            "pck",
            "qe",
            "tcb",
            "header",
            "td",
            "collateral",
            "root-ca",
        ];
        if tdx.iter().any(|t| kebab.starts_with(t)) {
            if let Some((s, _)) = self.sections.iter().find(|(s, _)| s == "tdx-evidence") {
                return s.clone();
            }
        }
        if self.sections.iter().any(|(s, _)| s == FALLBACK_SECTION) {
            FALLBACK_SECTION.to_string()
        } else {
            self.sections
                .first()
                .map(|(s, _)| s.clone())
                .unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_has_an_id_and_checks_map_to_their_section() {
        let d = Docs::verification();
        assert!(
            d.html
                .contains("<h2 id=\"authenticity-checks-verifier-lib-snp-chain\">"),
            "{:?}",
            d.sections
        );
        assert_eq!(
            d.section_for("root"),
            "authenticity-checks-verifier-lib-snp-chain"
        );
        assert_eq!(
            d.section_for("debug"),
            "policy-verifier-lib-snp-policy-policy"
        );
        assert_eq!(d.section_for("key-binding"), FALLBACK_SECTION);
        assert_eq!(d.section_for("pin-commit"), FALLBACK_SECTION);
        for (s, _) in &d.sections {
            assert!(d.html.contains(&format!("id=\"{s}\"")), "{s}");
        }
    }

    #[test]
    fn raw_html_in_a_document_is_text() {
        let d = Docs::render("# T\n\n<script>alert(1)</script>\n\nx <b>y</b>\n");
        assert!(
            !d.html.contains("<script>") && !d.html.contains("<b>"),
            "{}",
            d.html
        );
        assert!(d.html.contains("&lt;script&gt;"), "{}", d.html);
    }
}
