//! `examples:` of tools, prompts and resources: a call and what its answer
//! must be. Here: the keys as written, the checked [`Example`] and
//! [`Expect::judge`], which says how an answer misses. `build/examples.rs`
//! checks them when the catalog loads; `carte test` (the top module
//! `examples`) runs them through the server's own code.

use std::sync::Arc;

use indexmap::IndexMap;
use regex_automata::nfa::thompson::pikevm::PikeVM;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::diag::Location;
use crate::effect::http::StatedAnswer;

/// An example: a call and what its answer must be. `carte check` checks it
/// against the catalog; `carte test` runs it (on a scratch copy of the
/// databases) and says how the answer differs.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "example")]
pub struct ExampleSpec {
    /// What it shows, as `carte test` names it (default: its position, `example 1`).
    #[serde(default)]
    pub name: Option<String>,
    /// The call's arguments (a tool's, checked against its `inputSchema`; a prompt's).
    #[serde(default)]
    pub arguments: Option<Map<String, Value>>,
    /// The URI read: a resource template's example names one its template matches (a fixed
    /// resource's example reads the resource's own URI).
    #[serde(default)]
    pub uri: Option<String>,
    /// Rows inserted first, by table, into a scratch copy of the database (the one the `sql`
    /// effect names, else the catalog's only database): `{ bookings: [ { room: Focus } ] }`.
    #[serde(default)]
    pub rows: Option<IndexMap<String, Vec<Map<String, Value>>>>,
    /// The answer an `http` effect's api gives in this example (needed there): `carte test`
    /// never calls the real api.
    #[serde(default)]
    pub upstream: Option<UpstreamSpec>,
    /// What the answer must be: every key given must hold. Without `expect`, the answer must
    /// not be an error.
    #[serde(default)]
    pub expect: Option<ExpectSpec>,
}

/// What an example's answer must be; every key given must hold.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "expected answer")]
pub struct ExpectSpec {
    /// The text, exactly: a tool's text content, a prompt's messages' texts, a resource's text
    /// (several joined by line breaks).
    #[serde(default)]
    pub text: Option<String>,
    /// A string the text contains, or a list of them (each must be there).
    #[serde(default)]
    pub contains: Option<Texts>,
    /// A regular expression that matches somewhere in the text (`^` and `$` anchor it).
    #[serde(default)]
    pub matches: Option<String>,
    /// A subset of the JSON answer: a tool's `structuredContent` (else its text read as JSON),
    /// a resource's text read as JSON. Objects may have more keys; lists must match item by item.
    #[serde(default)]
    pub json: Option<Value>,
    /// Whether the answer is an error (`true` to pin how a call fails).
    #[serde(default, rename = "isError")]
    pub is_error: Option<bool>,
}

/// One string or a list of them.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(title = "text or texts")]
pub enum Texts {
    /// One.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// The answer an api gives in an example, instead of calling it.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "stated upstream answer")]
pub struct UpstreamSpec {
    /// Its HTTP status (default 200).
    #[serde(default)]
    pub status: Option<u16>,
    /// A JSON body (sent as `application/json`).
    #[serde(default)]
    pub json: Option<Value>,
    /// A text body.
    #[serde(default)]
    pub body: Option<String>,
    /// Response headers.
    #[serde(default)]
    pub headers: Option<IndexMap<String, String>>,
}

/// What an example calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// `tools/call` of this tool.
    Tool(String),
    /// `prompts/get` of this prompt.
    Prompt(String),
    /// `resources/read` of this URI (a resource's, or one a template matches).
    Resource(String),
}

/// Rows an example inserts into one table first.
#[derive(Debug, Clone)]
pub struct Rows {
    /// The `databases` entry.
    pub database: String,
    /// The table.
    pub table: String,
    /// Each row, column → value.
    pub rows: Vec<Map<String, Value>>,
}

/// An example, checked.
#[derive(Debug, Clone)]
pub struct Example {
    /// What `carte test` calls it: "tool `get_quote`: focus, pro".
    pub name: String,
    /// What it calls.
    pub subject: Subject,
    /// Where it is declared.
    pub location: Location,
    /// The call's arguments.
    pub arguments: Map<String, Value>,
    /// Rows inserted first.
    pub rows: Vec<Rows>,
    /// The api's answer, stated (`http`).
    pub upstream: Option<Arc<StatedAnswer>>,
    /// What the answer must be.
    pub expect: Expect,
}

/// What an answer must be, checked.
#[derive(Debug, Clone, Default)]
pub struct Expect {
    /// The text, exactly.
    pub text: Option<String>,
    /// Strings the text contains.
    pub contains: Vec<String>,
    /// A regular expression the text matches, as written and compiled.
    pub matches: Option<(String, PikeVM)>,
    /// A subset of the JSON answer.
    pub json: Option<Value>,
    /// Whether it is an error (`None`: it must not be, unless another key was given).
    pub is_error: Option<bool>,
}

/// An answer as examples judge it.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// Its text (text blocks joined by line breaks).
    pub text: String,
    /// Its JSON: `structuredContent`, else the text read as JSON.
    pub json: Option<Value>,
    /// Whether it is an error.
    pub is_error: bool,
}

/// One way an answer missed: which key, what it expected, what came.
#[derive(Debug, Clone, PartialEq)]
pub struct Miss {
    /// The `expect` key (`text`, `contains`, `matches`, `json`, `isError`).
    pub key: &'static str,
    /// What was expected.
    pub expected: String,
    /// What came.
    pub got: String,
}

impl Expect {
    /// Whether nothing but "not an error" is expected.
    fn is_empty(&self) -> bool {
        self.text.is_none() && self.contains.is_empty() && self.matches.is_none() && self.json.is_none()
    }

    /// How `answer` misses what is expected (empty: it holds).
    pub fn judge(&self, answer: &Answer) -> Vec<Miss> {
        let mut misses = Vec::new();
        let is_error = self.is_error.or(self.is_empty().then_some(false));
        if let Some(expected) = is_error
            && expected != answer.is_error
        {
            let got = if answer.is_error { format!("an error: {}", answer.text) } else { "no error".to_owned() };
            misses.push(Miss { key: "isError", expected: expected.to_string(), got });
        }
        if let Some(text) = &self.text
            && *text != answer.text
        {
            misses.push(Miss { key: "text", expected: text.clone(), got: answer.text.clone() });
        }
        for part in &self.contains {
            if !answer.text.contains(part.as_str()) {
                misses.push(Miss { key: "contains", expected: part.clone(), got: answer.text.clone() });
            }
        }
        if let Some((source, regex)) = &self.matches {
            let mut cache = regex.create_cache();
            if !regex.is_match(&mut cache, answer.text.as_str()) {
                misses.push(Miss { key: "matches", expected: source.clone(), got: answer.text.clone() });
            }
        }
        if let Some(expected) = &self.json {
            let got = match &answer.json {
                Some(got) => got,
                None => &Value::Null,
            };
            if let Some(path) = subset_miss(expected, got, String::new()) {
                let at = if path.is_empty() { String::new() } else { format!(" at {path}") };
                let shown = |value: &Value| serde_json::to_string(value).unwrap_or_default();
                misses.push(Miss {
                    key: "json",
                    expected: format!("{}{at}", shown(expected)),
                    got: match &answer.json {
                        Some(got) => shown(got),
                        None => format!("no JSON: {}", answer.text),
                    },
                });
            }
        }
        misses
    }
}

/// Where `got` first fails to hold `expected` (a JSON pointer), if it does:
/// objects may have more keys, lists must match item by item, numbers
/// compare by value (`84` is `84.0`).
pub fn subset_miss(expected: &Value, got: &Value, at: String) -> Option<String> {
    match (expected, got) {
        (Value::Object(expected), Value::Object(got)) => expected.iter().find_map(|(key, value)| {
            let at = format!("{at}/{key}");
            match got.get(key) {
                Some(found) => subset_miss(value, found, at),
                None => Some(at),
            }
        }),
        (Value::Array(expected), Value::Array(got)) if expected.len() == got.len() => {
            expected.iter().zip(got).enumerate().find_map(|(idx, (e, g))| subset_miss(e, g, format!("{at}/{idx}")))
        }
        (Value::Number(expected), Value::Number(got)) => (expected.as_f64() != got.as_f64()).then_some(at),
        _ => (expected != got).then_some(at),
    }
}

impl UpstreamSpec {
    /// The answer it states.
    pub fn stated(&self) -> StatedAnswer {
        let mut headers: Vec<(String, String)> =
            self.headers.iter().flatten().map(|(name, value)| (name.clone(), value.clone())).collect();
        let body = match (&self.json, &self.body) {
            (Some(json), _) => {
                if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("content-type")) {
                    headers.push(("content-type".to_owned(), "application/json".to_owned()));
                }
                serde_json::to_vec(json).unwrap_or_default()
            }
            (None, Some(body)) => body.clone().into_bytes(),
            (None, None) => Vec::new(),
        };
        StatedAnswer { status: self.status.unwrap_or(200), headers, body }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(text: &str, json: Option<Value>, is_error: bool) -> Answer {
        Answer { text: text.to_owned(), json, is_error }
    }

    #[test]
    fn a_subset_may_leave_keys_out_but_lists_match_item_by_item() {
        let got = json!({"total": 84.0, "room": "Focus", "days": [1, 2]});
        assert_eq!(subset_miss(&json!({"total": 84}), &got, String::new()), None);
        assert_eq!(subset_miss(&json!({"days": [1, 2]}), &got, String::new()), None);
        assert_eq!(subset_miss(&json!({"days": [1]}), &got, String::new()), Some("/days".to_owned()));
        assert_eq!(subset_miss(&json!({"room": "Studio"}), &got, String::new()), Some("/room".to_owned()));
        assert_eq!(subset_miss(&json!({"price": 1}), &got, String::new()), Some("/price".to_owned()));
    }

    #[test]
    fn every_key_given_must_hold_and_none_means_no_error() {
        let ok = answer("Focus (pro): 3 h = 84.00", None, false);
        let expect = Expect {
            text: Some("Focus (pro): 3 h = 84.00".to_owned()),
            contains: vec!["84.00".to_owned()],
            matches: Some(("^Focus .* = [0-9.]+$".to_owned(), PikeVM::new("^Focus .* = [0-9.]+$").unwrap())),
            ..Expect::default()
        };
        assert_eq!(expect.judge(&ok), vec![]);
        let misses = expect.judge(&answer("Studio", None, false));
        let keys: Vec<&str> = misses.iter().map(|miss| miss.key).collect();
        assert_eq!(keys, ["text", "contains", "matches"]);
        assert_eq!(Expect::default().judge(&answer("boom", None, true))[0].key, "isError");
        let failing = Expect { contains: vec!["not found".to_owned()], ..Expect::default() };
        assert_eq!(failing.judge(&answer("room not found", None, true)), vec![]);
    }
}
