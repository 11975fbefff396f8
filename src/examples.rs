//! Running a catalog's `examples:` (`carte test`, and `serve --examples`
//! before a reload is accepted) through the server's own code: the same
//! `tools/call`, `prompts/get` and `resources/read` a client gets.
//!
//! Each example runs on databases of its own: a fresh scratch copy of each
//! SQLite database (its rows copied into memory, `setup` run on it, the
//! example's `rows` inserted), and on PostgreSQL one transaction per
//! statement that runs `setup` and the rows first and is rolled back. An
//! `http` effect takes the example's `upstream` answer instead of calling
//! its api. Nothing a catalog serves is changed.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::catalog::Catalog;
use crate::catalog::examples::{Answer, Example, Miss, Subject};
use crate::diag::{Diagnostic, Location};
use crate::run::steps::NoClient;
use crate::server::{Snapshot, View};

/// How one example went.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The example's name ("tool `get_quote`: focus, pro").
    pub name: String,
    /// Where it is declared.
    pub location: Location,
    /// How its answer missed what it expects (empty: it passed).
    pub misses: Vec<Miss>,
    /// Why it could not run at all (its databases could not be prepared).
    pub broken: Option<String>,
}

impl Verdict {
    /// Whether the example holds.
    pub fn passed(&self) -> bool {
        self.misses.is_empty() && self.broken.is_none()
    }

    /// As `carte test --format json` prints it.
    pub fn to_json(&self) -> Value {
        let misses: Vec<Value> = self
            .misses
            .iter()
            .map(|miss| json!({ "key": miss.key, "expected": miss.expected, "got": miss.got }))
            .collect();
        let mut value = json!({
            "name": self.name,
            "file": self.location.file.display().to_string(),
            "line": self.location.line,
            "column": self.location.column,
            "passed": self.passed(),
            "misses": misses,
        });
        if let Some(broken) = &self.broken {
            value["error"] = Value::String(broken.clone());
        }
        value
    }

    /// As a diagnostic at the example (`serve --examples` refuses a
    /// catalog with it).
    pub fn diagnostic(&self) -> Diagnostic {
        let mut text = self.to_human();
        let first = text.find('\n').map_or(text.len(), |end| end + 1);
        let details = text.split_off(first);
        let mut diagnostic = Diagnostic::error(
            "example-failed",
            self.location.clone(),
            format!("example failed: {}\n{}", self.name, details.trim_end()),
        );
        diagnostic.hint =
            Some("run `carte test` on the catalog to see every example; fix the catalog or the example".to_owned());
        diagnostic
    }

    /// For a person: `PASS name`, or `FAIL name (file:line:column)` and
    /// each miss as expected / got.
    pub fn to_human(&self) -> String {
        if self.passed() {
            return format!("PASS {}\n", self.name);
        }
        let at = &self.location;
        let mut text = format!("FAIL {} ({}:{}:{})\n", self.name, at.file.display(), at.line, at.column);
        if let Some(broken) = &self.broken {
            text.push_str(&format!("  could not run: {broken}\n"));
        }
        for miss in &self.misses {
            text.push_str(&format!("  {}\n", miss.key));
            text.push_str(&indented("expected: ", &miss.expected));
            text.push_str(&indented("got:      ", &miss.got));
        }
        text
    }
}

/// What `carte test` prints of a run: each verdict, the catalogs that
/// could not run, and the count.
pub struct Report<'a> {
    /// Every example's verdict, in order.
    pub verdicts: &'a [Verdict],
    /// The catalogs that did not load (their diagnostics say why).
    pub not_run: &'a [String],
    /// The `--filter` text, if any.
    pub filter: Option<&'a str>,
}

impl Report<'_> {
    fn passed(&self) -> usize {
        self.verdicts.iter().filter(|v| v.passed()).count()
    }

    /// For a person: `PASS`/`FAIL` lines, then `N examples: P passed, F failed`.
    pub fn human(&self) -> String {
        let mut out = String::new();
        for path in self.not_run {
            out.push_str(&format!("{path}: not valid, so its examples did not run (see above)\n"));
        }
        for verdict in self.verdicts {
            out.push_str(&verdict.to_human());
        }
        let (total, passed) = (self.verdicts.len(), self.passed());
        let what = if total == 1 { "example" } else { "examples" };
        out.push_str(&format!("{total} {what}: {passed} passed, {} failed\n", total - passed));
        if total == 0 && self.not_run.is_empty() {
            out.push_str(match self.filter {
                Some(_) => "no example's name contains the --filter text\n",
                None => "add `examples:` to a tool, prompt or resource to pin what it answers\n",
            });
        }
        out
    }

    /// For a program (`--format json`), with the catalogs' `diagnostics`.
    pub fn json(&self, diagnostics: &[Diagnostic]) -> Value {
        let passed = self.passed();
        let diagnostics: Vec<Value> = diagnostics.iter().map(|d| serde_json::to_value(d).unwrap_or_default()).collect();
        json!({
            "examples": self.verdicts.iter().map(Verdict::to_json).collect::<Vec<Value>>(),
            "passed": passed,
            "failed": self.verdicts.len() - passed,
            "notRun": self.not_run,
            "diagnostics": diagnostics,
        })
    }
}

/// `label` then `value`, its later lines lined up under the first.
fn indented(label: &str, value: &str) -> String {
    let pad = " ".repeat(4 + label.len());
    let mut lines = value.lines();
    let mut text = format!("    {label}{}\n", lines.next().unwrap_or_default());
    for line in lines {
        text.push_str(&format!("{pad}{line}\n"));
    }
    text
}

/// Runs the examples of `catalog` whose name contains `filter` (all
/// without one), in file order. `catalog` must not serve anyone: its
/// databases are switched to scratch copies (see [`Catalog`]'s
/// `blocks.databases`), its `setup` applied only there.
pub async fn run(catalog: Catalog, filter: Option<&str>) -> Vec<Verdict> {
    let chosen: Vec<Example> = catalog
        .examples
        .iter()
        .filter(|example| filter.is_none_or(|filter| example.name.contains(filter)))
        .cloned()
        .collect();
    let snapshot = Arc::new(Snapshot::new(catalog));
    let mut verdicts = Vec::with_capacity(chosen.len());
    for example in chosen {
        let verdict = match prepare(&snapshot.catalog, &example).await {
            Err(broken) => Verdict {
                name: example.name.clone(),
                location: example.location.clone(),
                misses: Vec::new(),
                broken: Some(broken),
            },
            Ok(()) => {
                let answer = ask(&snapshot, &example).await;
                Verdict {
                    name: example.name.clone(),
                    location: example.location.clone(),
                    misses: example.expect.judge(&answer),
                    broken: None,
                }
            }
        };
        verdicts.push(verdict);
    }
    verdicts
}

/// Loads the catalog at `root` afresh (on the blocking pool: its databases
/// are its own, never those of a catalog being served) and runs its
/// examples; the catalog's diagnostics if it does not load.
pub async fn run_at(root: &std::path::Path) -> Result<Vec<Verdict>, Vec<Diagnostic>> {
    let path = root.to_path_buf();
    let loaded = match tokio::task::spawn_blocking(move || crate::catalog::load(&path)).await {
        Ok(loaded) => loaded,
        Err(err) => {
            let location = Location::file_start(root);
            return Err(vec![Diagnostic::error(
                "example-failed",
                location,
                format!("loading for the examples failed: {err}"),
            )]);
        }
    };
    match loaded.catalog {
        Some(catalog) => Ok(run(catalog, None).await),
        None => Err(loaded.diagnostics),
    }
}

/// Fresh scratch databases for `example`, with `setup` applied and its rows
/// inserted.
async fn prepare(catalog: &Catalog, example: &Example) -> Result<(), String> {
    for (name, entry) in &catalog.blocks.databases {
        entry.database.rehearse().map_err(|err| format!("database `{name}`: {err}"))?;
    }
    catalog
        .apply_setup()
        .map_err(|diagnostics| diagnostics.iter().map(|d| d.message.clone()).collect::<Vec<_>>().join("; "))?;
    for rows in &example.rows {
        let Some(entry) = catalog.blocks.databases.get(&rows.database) else {
            return Err(format!("there is no database `{}`", rows.database));
        };
        entry
            .database
            .insert_rows(&rows.table, &rows.rows, entry.timeout)
            .await
            .map_err(|err| format!("inserting the example's rows into database `{}`: {err}", rows.database))?;
    }
    Ok(())
}

/// The answer `example`'s call gets, as its expectations read it.
async fn ask(snapshot: &Arc<Snapshot>, example: &Example) -> Answer {
    // Nobody to ask, logs kept quiet, the api's answer stated.
    let client = NoClient { quiet: true, stated: example.upstream.clone() };
    let arguments = Some(example.arguments.clone());
    let answered = match &example.subject {
        Subject::Tool(name) => View::all(Arc::clone(snapshot)).call_tool_json(name, arguments, &client).await,
        Subject::Prompt(name) => snapshot.get_prompt_json(name, arguments, &client).await,
        Subject::Resource(uri) => snapshot.read_resource_with(uri, &client).await,
    };
    match answered {
        Err(err) => Answer { text: err.message, json: None, is_error: true },
        Ok(result) => answer_of(&result),
    }
}

/// What an answer says: the text of a tool's content blocks, a prompt's
/// messages or a resource's contents (joined by line breaks); the JSON:
/// `structuredContent`, else the text read as JSON.
fn answer_of(result: &Value) -> Answer {
    let texts: Vec<&str> = if let Some(content) = result.get("content").and_then(Value::as_array) {
        content.iter().filter_map(|block| block.get("text").and_then(Value::as_str)).collect()
    } else if let Some(messages) = result.get("messages").and_then(Value::as_array) {
        messages.iter().filter_map(|message| message.pointer("/content/text").and_then(Value::as_str)).collect()
    } else if let Some(contents) = result.get("contents").and_then(Value::as_array) {
        contents.iter().filter_map(|content| content.get("text").and_then(Value::as_str)).collect()
    } else {
        Vec::new()
    };
    let text = texts.join("\n");
    let json = result.get("structuredContent").cloned().or_else(|| serde_json::from_str(&text).ok());
    let is_error = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
    Answer { text, json, is_error }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_every_text_block_and_the_json_is_structured_content_first() {
        let tool = json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "structuredContent": {"n": 1}, "isError": false});
        let answer = answer_of(&tool);
        assert_eq!(answer.text, "a\nb");
        assert_eq!(answer.json, Some(json!({"n": 1})));
        let resource = json!({"contents": [{"uri": "x://y", "text": "{\"n\": 2}"}]});
        assert_eq!(answer_of(&resource).json, Some(json!({"n": 2})));
        let prompt = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "Plan Studio"}}]});
        assert_eq!(answer_of(&prompt).text, "Plan Studio");
    }
}
