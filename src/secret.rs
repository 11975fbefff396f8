//! Text leaving carte: the one place that hides secrets from it.
//!
//! A value that `${VAR}` read from the environment is a secret wherever it
//! ends up: a diagnostic, a log line, a trace attribute, an error result, a
//! log message to a client, `carte list`. [`remember`] learns each one, in
//! every form text can carry it: as written, JSON-escaped (also with `\/`),
//! form-encoded, and, for a URL, as a URL parser writes it back (host in
//! lower case) and its `host:port`. [`redact`] replaces each by `${NAME}`.
//!
//! # Invariants
//! - Text is redacted *before* it is cut: [`excerpt`] is how a quote of
//!   outside text (an upstream's body, a program's stderr) is shortened, so
//!   no cut can leave the start of a secret that redaction then misses.
//! - Text that arrives already cut (a body read up to `maxBytes`, a line
//!   kept up to its limit) says so ([`Cut`]): what may be a piece of a secret
//!   at that edge is hidden too.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock, RwLock};

/// Secrets shorter than this many bytes are not redacted: `${PORT}` or
/// `${DEBUG}` hold values (`8080`, `true`) that would blot out ordinary
/// text, and are no secret. The same bound holds for a piece of a secret
/// at a cut edge.
pub const MIN_SECRET_BYTES: usize = 6;

/// Every form of every secret remembered so far, and one automaton that
/// finds them all.
struct Secrets {
    /// `(form, what replaces it)`: `${NAME}`, so a message still says
    /// where the value came from. Longest form first.
    pairs: Vec<(String, String)>,
    /// Built on the first long text redacted, not at each `remember`: a
    /// start redacts only its short log lines, and building it was a
    /// fiftieth of a start's work. `None` if the set is too large for the
    /// automaton (then [`Secrets::replace_each`] does its work).
    finder: OnceLock<Option<aho_corasick::AhoCorasick>>,
}

/// Up to this many bytes of text times forms of secrets, and until a longer
/// text has built the automaton, [`redact`] looks for each form in turn (a
/// log line); past it, for all at once.
const SHORT_WORK: usize = 16 * 1024;

impl Secrets {
    /// The secrets with these `(form, replacement)` pairs, longest form first.
    fn new(mut pairs: Vec<(String, String)>) -> Secrets {
        pairs.sort_by_key(|(form, _)| std::cmp::Reverse(form.len()));
        Secrets { pairs, finder: OnceLock::new() }
    }

    fn finder(&self) -> Option<&aho_corasick::AhoCorasick> {
        self.finder
            .get_or_init(|| {
                // A contiguous NFA, not the DFA chosen by default for a few
                // patterns: it builds in less than half the instructions.
                let built = aho_corasick::AhoCorasick::builder()
                    .match_kind(aho_corasick::MatchKind::LeftmostLongest)
                    .kind(Some(aho_corasick::AhoCorasickKind::ContiguousNFA))
                    .build(self.pairs.iter().map(|(form, _)| form));
                built.map_err(|err| tracing::warn!("secrets are looked for one by one: {err}")).ok()
            })
            .as_ref()
    }

    /// `text` with every form replaced, all at once by `finder` (built from
    /// these pairs).
    fn replace_at_once<'t>(&self, finder: &aho_corasick::AhoCorasick, text: &'t str) -> Cow<'t, str> {
        if !finder.is_match(text) {
            return Cow::Borrowed(text);
        }
        let replacements: Vec<&str> = self.pairs.iter().map(|(_, replacement)| replacement.as_str()).collect();
        Cow::Owned(finder.replace_all(text, &replacements))
    }

    /// `text` with every form replaced, longest first, one form at a time.
    fn replace_each<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut out = Cow::Borrowed(text);
        for (form, replacement) in &self.pairs {
            if out.contains(form.as_str()) {
                out = Cow::Owned(out.replace(form.as_str(), replacement));
            }
        }
        out
    }
}

/// The secrets of this process. Process-wide because the environment is:
/// a value read from it through `${VAR}` is secret wherever it ends up,
/// whichever load read it. It grows only with values of the environment,
/// which does not change while carte runs, so it is bounded by the
/// environment's size.
static SECRETS: RwLock<Option<Arc<Secrets>>> = RwLock::new(None);

/// Remembers `value`, which `${name}` expanded to from the environment, as
/// a secret that [`redact`] hides in each of its forms (unless shorter than
/// [`MIN_SECRET_BYTES`]).
pub fn remember(name: &str, value: &str) {
    if value.len() < MIN_SECRET_BYTES {
        return;
    }
    let mut guard = crate::sync::write(&SECRETS);
    let mut pairs = guard.as_ref().map(|secrets| secrets.pairs.clone()).unwrap_or_default();
    if pairs.iter().any(|(known, _)| known == value) {
        return;
    }
    let replacement = format!("${{{name}}}");
    for form in forms(value) {
        if form.len() >= MIN_SECRET_BYTES && !pairs.iter().any(|(known, _)| *known == form) {
            pairs.push((form, replacement.clone()));
        }
    }
    *guard = Some(Arc::new(Secrets::new(pairs)));
}

/// The forms of `value` that text leaving carte may carry, `value` first.
fn forms(value: &str) -> Vec<String> {
    let mut forms = vec![value.to_owned()];
    // Quoted in JSON: escaped as serde writes it, and with `/` as `\/`.
    let quoted = serde_json::to_string(value).unwrap_or_default();
    let escaped = quoted.get(1..quoted.len().saturating_sub(1)).unwrap_or_default().to_owned();
    forms.push(escaped.replace('/', "\\/"));
    forms.push(escaped);
    // In a query string or a form body.
    forms.push(url::form_urlencoded::byte_serialize(value.as_bytes()).collect());
    // A URL as a parser writes it back (the host in lower case), and where
    // it points: the `host:port` connection errors name.
    if let Ok(url) = url::Url::parse(value)
        && let Some(host) = url.host_str()
    {
        // Without the `/` the parser adds to a bare host: what follows the
        // value in a URL is not part of it.
        let written = url.as_str();
        forms.push(if value.ends_with('/') { written } else { written.trim_end_matches('/') }.to_owned());
        if let Some(port) = url.port_or_known_default() {
            forms.push(format!("{host}:{port}"));
        }
    }
    forms.dedup();
    forms
}

/// `text` with every form of every remembered secret replaced by
/// `${NAME}`; borrowed when there is none in it. A long text is read once,
/// whatever the number of secrets.
pub fn redact(text: &str) -> Cow<'_, str> {
    let Some(secrets) = current() else { return Cow::Borrowed(text) };
    let built = secrets.finder.get().is_some();
    if !built && text.len().saturating_mul(secrets.pairs.len()) <= SHORT_WORK {
        return secrets.replace_each(text);
    }
    match secrets.finder() {
        Some(finder) => secrets.replace_at_once(finder, text),
        None => secrets.replace_each(text),
    }
}

fn current() -> Option<Arc<Secrets>> {
    crate::sync::read(&SECRETS).clone()
}

/// Where a text handed to [`excerpt`] was already cut before it arrived.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cut {
    /// Bytes before its start were dropped (it is the end of something).
    pub before: bool,
    /// Bytes after its end were dropped (it is the start of something).
    pub after: bool,
}

/// Which end of a text [`excerpt`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The first bytes (an upstream's answer, a log line).
    Start,
    /// The last bytes (the end of a program's stderr, where it says why).
    End,
}

/// At most `max` bytes of `text` (on character boundaries), for text that
/// leaves carte: secrets are hidden first, then the text is cut, and a
/// piece of a secret at an edge where `text` was already `cut` is hidden
/// too. With whether this cut anything.
pub fn excerpt(text: &str, max: usize, keep: Keep, cut: Cut) -> (String, bool) {
    let hidden = redact(text);
    let hidden = hide_pieces(&hidden, cut);
    if hidden.len() <= max {
        return (hidden.into_owned(), false);
    }
    let kept = match keep {
        Keep::Start => {
            let mut end = max;
            while !hidden.is_char_boundary(end) {
                end -= 1;
            }
            &hidden[..end]
        }
        Keep::End => {
            let mut start = hidden.len() - max;
            while !hidden.is_char_boundary(start) {
                start += 1;
            }
            &hidden[start..]
        }
    };
    (kept.to_owned(), true)
}

/// `text` with a piece of a secret hidden where it was cut: at its end, the
/// longest start of a secret's form it ends with; at its start, the longest
/// end of one it starts with (pieces of at least [`MIN_SECRET_BYTES`]).
fn hide_pieces(text: &str, cut: Cut) -> Cow<'_, str> {
    let Some(secrets) = current() else { return Cow::Borrowed(text) };
    if !cut.before && !cut.after {
        return Cow::Borrowed(text);
    }
    let (mut start, mut end) = (0, text.len());
    let (mut head, mut tail) = (None, None);
    for (form, replacement) in &secrets.pairs {
        let longest = form.len().saturating_sub(1);
        if cut.after {
            for len in (MIN_SECRET_BYTES..=longest).rev() {
                if form.is_char_boundary(len) && text.ends_with(&form[..len]) {
                    if text.len() - len < end {
                        (end, tail) = (text.len() - len, Some(replacement));
                    }
                    break;
                }
            }
        }
        if cut.before {
            for len in (MIN_SECRET_BYTES..=longest).rev() {
                let from = form.len() - len;
                if form.is_char_boundary(from) && text.starts_with(&form[from..]) {
                    if len > start {
                        (start, head) = (len, Some(replacement));
                    }
                    break;
                }
            }
        }
    }
    if head.is_none() && tail.is_none() {
        return Cow::Borrowed(text);
    }
    let middle = if start <= end { &text[start..end] } else { "" };
    let mut out = String::with_capacity(text.len());
    if let Some(replacement) = head {
        out.push_str(replacement);
    }
    out.push_str(middle);
    if let Some(replacement) = tail {
        out.push_str(replacement);
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_with_their_name_also_inside_json() {
        remember("SECRET_TEST_TOKEN", "s3cr3t\"value-9a1");
        remember("SECRET_TEST_SHORT", "abc");
        let text = "token s3cr3t\"value-9a1 and abc";
        assert_eq!(redact(text), "token ${SECRET_TEST_TOKEN} and abc");
        let json = serde_json::json!({ "url": "x s3cr3t\"value-9a1 y" }).to_string();
        assert_eq!(redact(&json), r#"{"url":"x ${SECRET_TEST_TOKEN} y"}"#);
        assert!(matches!(redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn one_form_at_a_time_and_all_at_once_hide_the_same() {
        let url = "https://Vault.Example.com:8443/v1/k/ey+s/";
        let secrets = Secrets::new(forms(url).into_iter().map(|form| (form, "${VAULT}".to_owned())).collect());
        let text = "GET https://vault.example.com:8443/v1/k/ey+s/ failed; vault.example.com:8443 refused";
        let automaton = secrets.finder().map(|finder| secrets.replace_at_once(finder, text));
        assert_eq!(secrets.replace_each(text), "GET ${VAULT} failed; ${VAULT} refused");
        assert_eq!(automaton.as_deref(), Some("GET ${VAULT} failed; ${VAULT} refused"));
    }

    #[test]
    fn every_form_of_a_secret_is_hidden() {
        remember("SECRET_TEST_BASE", "https://Vault.Example.com:8443/v1/k/ey+s/");
        for text in [
            // As a URL parser writes it back: the host in lower case.
            "GET https://vault.example.com:8443/v1/k/ey+s/ failed",
            // JSON with `/` escaped.
            r#"{"u":"https:\/\/Vault.Example.com:8443\/v1\/k\/ey+s\/"}"#,
            // Form-encoded.
            "next=https%3A%2F%2FVault.Example.com%3A8443%2Fv1%2Fk%2Fey%2Bs%2F",
            // Where it points, in a connection error.
            "tcp connect error: vault.example.com:8443: connection refused",
        ] {
            // Short text is searched form by form, long text all at once.
            let long = format!("{}{text}", " ".repeat(SHORT_WORK));
            let shown = redact(text);
            assert_eq!(redact(&long).trim_start(), shown);
            assert!(!shown.to_lowercase().contains("vault.example"), "{text} -> {shown}");
            assert!(!shown.contains("ey+s") && !shown.contains("ey%2Bs"), "{text} -> {shown}");
            assert!(shown.contains("${SECRET_TEST_BASE}"), "{text} -> {shown}");
        }
    }

    #[test]
    fn a_cut_never_leaves_part_of_a_secret() {
        let token = "tok-0123456789abcdefghijklmnopqrstuv";
        remember("SECRET_TEST_CUT", token);
        // The secret spans the cut: hidden before the text is cut.
        let body = format!("{}{token} and more", "x".repeat(20));
        for max in 0..body.len() {
            let (start, _) = excerpt(&body, max, Keep::Start, Cut::default());
            let (end, _) = excerpt(&body, max, Keep::End, Cut::default());
            for shown in [start, end] {
                assert!(!shown.contains("tok-0123"), "{max}: {shown}");
                assert!(!shown.contains("opqrstuv"), "{max}: {shown}");
            }
        }
        // Text that arrived cut in the middle of a secret: the piece is hidden.
        let (shown, cut) = excerpt(
            "Authorization: Bearer tok-0123456789abcd",
            100,
            Keep::Start,
            Cut { after: true, ..Cut::default() },
        );
        assert_eq!((shown.as_str(), cut), ("Authorization: Bearer ${SECRET_TEST_CUT}", false));
        let (shown, _) = excerpt("ghijklmnopqrstuv\nnext line", 100, Keep::End, Cut { before: true, ..Cut::default() });
        assert_eq!(shown, "${SECRET_TEST_CUT}\nnext line");
        // Short pieces are text, not secrets.
        let (shown, _) = excerpt("a line ending in tok-0", 100, Keep::Start, Cut { after: true, ..Cut::default() });
        assert_eq!(shown, "a line ending in tok-0");
    }
}
