//! Tools: their arguments, `run` (effect, steps, result) and names.

use serde_json::{Map, Value, json};

use crate::catalog::assemble::{Declared, Origin};
use crate::catalog::model::{NumberSpec, RunSpec, SleepSpec, StepSpec, ToolSpec};
use crate::catalog::{Amount, Effect, ResultSpec, Step, StepData, Tool, Wait};
use crate::diag::did_you_mean;

use super::{Builder, Scope, present, wire_head};

impl Builder<'_> {
    pub(super) fn tool(&mut self, decl: &Declared<ToolSpec>) -> Option<Tool> {
        let spec = &decl.spec;
        let origin = &decl.origin;
        self.check_name("tool", &spec.name, origin);
        self.check_description("tool", &spec.name, spec.description.as_ref(), origin);
        let input_schema = spec.input_schema.clone().unwrap_or_else(|| {
            let mut empty = Map::new();
            empty.insert("type".to_owned(), json!("object"));
            empty.insert("properties".to_owned(), json!({}));
            empty
        });
        let input = self.schema(&input_schema, origin, "inputSchema");
        let output = spec.output_schema.as_ref().map(|schema| self.schema(schema, origin, "outputSchema"));
        let properties: Vec<String> = input_schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        let run = &spec.run;
        let errors_before = self.diagnostics.iter().filter(|d| d.is_error()).count();
        let effect = self.effect(run, &properties, origin);
        let mut names = properties.clone();
        names.extend(["data".to_owned(), "arguments".to_owned()]);
        if run.sql.is_some() {
            names.extend(["rows".to_owned(), "truncated".to_owned()]);
        }
        let declared_steps = run.steps.as_deref().unwrap_or_default();
        if declared_steps.iter().any(|step| step.elicit.is_some()) {
            names.push("elicited".to_owned());
        }
        if declared_steps.iter().any(|step| step.sample.is_some()) {
            names.push("sampled".to_owned());
        }
        let mut scope = Scope::new(names);
        let owner = format!("tool {}:", spec.name);
        let steps = self.steps(declared_steps, &owner, origin, &mut scope);
        let result = self.result(run, &owner, origin, &mut scope);
        if effect.is_some()
            && let Some(sql) = &run.sql
            && let Some(probe) = self.probes.get(&sql.database)
            && let Ok(params) = probe.check(&sql.statement)
        {
            scope.used.extend(params);
        }
        // Where a template or statement could not be checked, "unused" would be a guess.
        let checked = self.diagnostics.iter().filter(|d| d.is_error()).count() == errors_before;
        if checked && !scope.used.contains("arguments") {
            for property in &properties {
                if !scope.used.contains(property) {
                    let location = self.assembled.locate_key(origin, &format!("/inputSchema/properties/{property}"));
                    self.warn(
                        "unused-argument",
                        location,
                        format!("argument `{property}` is never used by tool `{}`", spec.name),
                    )
                    .hint = Some("use it in the result template or the SQL statement, or remove it".to_owned());
                }
            }
        }
        let structured = run.json == Some(true) || spec.output_schema.is_some();
        let mut wire = wire_head(&spec.name, spec.title.as_ref(), spec.description.as_ref());
        wire.insert("inputSchema".to_owned(), Value::Object(input_schema));
        if let Some(schema) = &spec.output_schema {
            wire.insert("outputSchema".to_owned(), Value::Object(schema.clone()));
        }
        if let Some(annotations) = &spec.annotations {
            let mut map = Map::new();
            let pairs = [
                ("title", annotations.title.as_ref().map(|t| json!(t))),
                ("readOnlyHint", annotations.read_only_hint.map(Value::Bool)),
                ("destructiveHint", annotations.destructive_hint.map(Value::Bool)),
                ("idempotentHint", annotations.idempotent_hint.map(Value::Bool)),
                ("openWorldHint", annotations.open_world_hint.map(Value::Bool)),
            ];
            for (key, value) in pairs {
                if let Some(value) = value {
                    map.insert(key.to_owned(), value);
                }
            }
            wire.insert("annotations".to_owned(), Value::Object(map));
        }
        let input = input?;
        let output = match output {
            Some(compiled) => Some(compiled?),
            None => None,
        };
        let result = result?;
        let steps = steps?;
        if run.sql.is_some() && effect.is_none() {
            return None;
        }
        Some(Tool { name: spec.name.clone(), wire, input, output, structured, steps, effect, result })
    }

    pub(super) fn effect(&mut self, run: &RunSpec, properties: &[String], origin: &Origin) -> Option<Effect> {
        let sql = run.sql.as_ref()?;
        let location = self.assembled.locate(origin, "/run/sql/database");
        let (Some(entry), Some(probe)) = (self.databases.get(&sql.database), self.probes.get(&sql.database)) else {
            if self.assembled.databases.contains_key(&sql.database) || self.assembled.dropped.database(&sql.database) {
                return None; // it failed to open or to read; that error is reported already
            }
            let known: Vec<&str> = self.assembled.databases.keys().map(String::as_str).collect();
            let hint = match did_you_mean(&sql.database, known.iter().copied()) {
                Some(close) => format!("did you mean `{close}`?"),
                None if known.is_empty() => "declare it under `databases:` with a `url:`".to_owned(),
                None => format!("declared databases: {}", known.join(", ")),
            };
            self.error("unknown-database", location, format!("database `{}` is not declared", sql.database)).hint =
                Some(hint);
            return None;
        };
        let location = self.assembled.locate(origin, "/run/sql/statement");
        let (database, timeout) = (entry.database.clone(), entry.timeout);
        match probe.check(&sql.statement) {
            Ok(params) => {
                let mut ok = true;
                for param in params {
                    if !properties.contains(&param) {
                        let hint = match did_you_mean(&param, properties.iter().map(String::as_str)) {
                            Some(close) => format!("did you mean `:{close}`?"),
                            None => format!("add `{param}` to `inputSchema.properties`"),
                        };
                        self.error(
                            "sql-parameter",
                            location.clone(),
                            format!("statement uses `:{param}`, which is not an argument of this tool"),
                        )
                        .hint = Some(hint);
                        ok = false;
                    }
                }
                ok.then(|| Effect::Sql { database, statement: sql.statement.clone(), timeout })
            }
            Err(message) => {
                let hint = if message.contains("positional") {
                    "name each parameter after a property of `inputSchema`, e.g. `WHERE id = :id`".to_owned()
                } else {
                    misspelt_name(&message, probe).map_or_else(
                        || {
                            "it is checked against the database after `setup` ran; check table and column names"
                                .to_owned()
                        },
                        |(kind, close)| format!("did you mean the {kind} `{close}`?"),
                    )
                };
                self.error(
                    "sql",
                    location,
                    format!("statement does not prepare against database `{}`: {message}", sql.database),
                )
                .hint = Some(hint);
                None
            }
        }
    }

    /// Checks `run.steps` and registers their templates.
    pub(super) fn steps(
        &mut self,
        specs: &[StepSpec],
        owner: &str,
        origin: &Origin,
        scope: &mut Scope,
    ) -> Option<Vec<Step>> {
        let mut steps = Vec::new();
        let mut ok = true;
        for (idx, spec) in specs.iter().enumerate() {
            let below = format!("/run/steps/{idx}");
            let kinds = present([
                ("log", spec.log.is_some()),
                ("progress", spec.progress.is_some()),
                ("sleep", spec.sleep.is_some()),
                ("elicit", spec.elicit.is_some()),
                ("sample", spec.sample.is_some()),
            ]);
            if kinds.len() != 1 {
                let location = self.assembled.locate(origin, &below);
                let message = if kinds.is_empty() {
                    "this step does nothing".to_owned()
                } else {
                    format!("a step does one thing, but this one has `{}`", kinds.join("` and `"))
                };
                self.error("step", location, message).hint = Some(
                    "write each as its own list item: `- log: …`, `- progress: …`, `- sleep: 50ms`, `- elicit: …`, `- sample: …`"
                        .to_owned(),
                );
                ok = false;
                continue;
            }
            let name = |key: &str| format!("{owner}/run/steps/{idx}/{key}");
            let step = if let Some(log) = &spec.log {
                let data = match &log.data {
                    Value::String(text) => self
                        .inline(name("log/data"), text, origin, &format!("{below}/log/data"), scope)
                        .map(StepData::Template),
                    other => Some(StepData::Literal(other.clone())),
                };
                data.map(|data| Step::Log { level: log.level, logger: log.logger.clone(), data })
            } else if let Some(progress) = &spec.progress {
                let amount = |builder: &mut Self, value: &NumberSpec, key: &str, scope: &mut Scope| match value {
                    NumberSpec::Number(n) => Some(Amount::Number(*n)),
                    NumberSpec::Template(text) => builder
                        .inline(
                            name(&format!("progress/{key}")),
                            text,
                            origin,
                            &format!("{below}/progress/{key}"),
                            scope,
                        )
                        .map(Amount::Template),
                };
                let value = amount(self, &progress.progress, "progress", scope);
                let total = match &progress.total {
                    Some(total) => amount(self, total, "total", scope).map(Some),
                    None => Some(None),
                };
                let message = match &progress.message {
                    Some(text) => self
                        .inline(name("progress/message"), text, origin, &format!("{below}/progress/message"), scope)
                        .map(Some),
                    None => Some(None),
                };
                match (value, total, message) {
                    (Some(progress), Some(total), Some(message)) => Some(Step::Progress { progress, total, message }),
                    _ => None,
                }
            } else if let Some(SleepSpec::Text(text)) = &spec.sleep
                && ["{{", "{%", "{#"].iter().any(|open| text.contains(open))
            {
                // A template: its output is read as a duration on each call.
                let template = self.inline(name("sleep"), text, origin, &format!("{below}/sleep"), scope);
                template.map(|template| Step::Sleep(Wait::Template(template)))
            } else if let Some(sleep) = &spec.sleep {
                match parse_duration(sleep) {
                    Ok(duration) => Some(Step::Sleep(Wait::Fixed(duration))),
                    Err(message) => {
                        let location = self.assembled.locate(origin, &format!("{below}/sleep"));
                        self.error("step", location, message).hint =
                            Some("write a duration such as `50ms`, `2s` or `1m` (at most 10m)".to_owned());
                        None
                    }
                }
            } else if let Some(elicit) = &spec.elicit {
                let message = self.inline(
                    name("elicit/message"),
                    &elicit.message,
                    origin,
                    &format!("{below}/elicit/message"),
                    scope,
                );
                if elicit.requested_schema.get("type").and_then(Value::as_str) != Some("object") {
                    let location = self.assembled.locate(origin, &format!("{below}/elicit/requestedSchema"));
                    self.error("step", location, "`requestedSchema` must have `type: object` at the top").hint = Some(
                        "an elicitation form is an object of primitive properties: `type: object` with `properties:`"
                            .to_owned(),
                    );
                    None
                } else {
                    message
                        .map(|message| Step::Elicit { message, schema: Value::Object(elicit.requested_schema.clone()) })
                }
            } else if let Some(sample) = &spec.sample {
                let mut messages = Vec::new();
                let mut all = true;
                for (at, message) in sample.messages.iter().enumerate() {
                    let key = format!("sample/messages/{at}/text");
                    match self.inline(name(&key), &message.text, origin, &format!("{below}/{key}"), scope) {
                        Some(template) => messages.push((message.role, template)),
                        None => all = false,
                    }
                }
                let system = match &sample.system_prompt {
                    Some(text) => self
                        .inline(
                            name("sample/systemPrompt"),
                            text,
                            origin,
                            &format!("{below}/sample/systemPrompt"),
                            scope,
                        )
                        .map(Some),
                    None => Some(None),
                };
                match system {
                    Some(system) if all => Some(Step::Sample { messages, max_tokens: sample.max_tokens, system }),
                    _ => None,
                }
            } else {
                None
            };
            match step {
                Some(step) => steps.push(step),
                None => ok = false,
            }
        }
        ok.then_some(steps)
    }

    pub(super) fn result(
        &mut self,
        run: &RunSpec,
        owner: &str,
        origin: &Origin,
        scope: &mut Scope,
    ) -> Option<ResultSpec> {
        let renderers = present([
            ("text", run.text.is_some()),
            ("template", run.template.is_some()),
            ("content", run.content.is_some()),
        ]);
        if renderers.len() > 1 {
            let location = self.assembled.locate(origin, "/run");
            self.error("run", location, format!("`run` has both `{}` and `{}`", renderers[0], renderers[1])).hint =
                Some("a tool renders its result with one of `text`, `template` or `content`".to_owned());
            return None;
        }
        if let Some(text) = &run.text {
            return self.inline(format!("{owner}/run/text"), text, origin, "/run/text", scope).map(ResultSpec::Text);
        }
        if let Some(template) = &run.template {
            return self.file_template(template, origin, "/run/template", scope).map(ResultSpec::Text);
        }
        if let Some(blocks) = &run.content {
            let mut built = Vec::new();
            let mut ok = true;
            for (idx, block) in blocks.iter().enumerate() {
                match self.block(block, owner, origin, &format!("/run/content/{idx}"), scope) {
                    Some(block) => built.push(block),
                    None => ok = false,
                }
            }
            if blocks.is_empty() {
                let location = self.assembled.locate(origin, "/run/content");
                self.error("run", location, "`content` is empty").hint =
                    Some("list at least one block, e.g. `- text: …`".to_owned());
                return None;
            }
            return ok.then_some(ResultSpec::Content(built));
        }
        if run.sql.is_some() {
            return Some(ResultSpec::EffectJson);
        }
        let location = self.assembled.locate_key(origin, "/run");
        self.error("run", location, "`run` does nothing").hint = Some(
            "give it `text:`, `template:` or `content:` to render a result, or an effect such as `sql:`".to_owned(),
        );
        None
    }
}

/// The name SQLite's "no such column: x" or "no such table: x" probably
/// meant, among the database's columns or tables (a qualified `o.x` keeps
/// its qualifier).
fn misspelt_name(message: &str, probe: &crate::run::sql::Probe) -> Option<(&'static str, String)> {
    let (tables, columns) = probe.names();
    let (kind, written, candidates) = if let Some(column) = message.strip_prefix("no such column: ") {
        ("column", column, columns)
    } else if let Some(table) = message.strip_prefix("no such table: ") {
        ("table", table, tables)
    } else {
        return None;
    };
    let written = written.trim();
    let (qualifier, name) = written.rsplit_once('.').map_or(("", written), |(q, n)| (q, n));
    let close = did_you_mean(name, candidates.iter().map(String::as_str))?;
    Some((kind, if qualifier.is_empty() { close.to_owned() } else { format!("{qualifier}.{close}") }))
}

/// Reads a `sleep` duration: milliseconds, or `250ms`, `2s`, `1m`.
pub(super) fn parse_duration(spec: &SleepSpec) -> Result<std::time::Duration, String> {
    match spec {
        SleepSpec::Millis(ms) => crate::catalog::sleep::sleep_of(*ms),
        SleepSpec::Text(text) => crate::catalog::sleep::parse_sleep(text),
    }
}

/// Milliseconds of `250ms`, `2s`, `1.5m`, `1h` (no unit: milliseconds).
pub(crate) fn millis_of(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len()));
    let number: f64 = number.parse().map_err(|_| format!("`{text}` is not a duration"))?;
    let factor = match unit.trim() {
        "ms" | "" => 1.0,
        "s" => 1000.0,
        "m" | "min" => 60_000.0,
        "h" => 3_600_000.0,
        other => return Err(format!("unknown unit `{other}` in `{text}`")),
    };
    Ok((number * factor).round() as u64)
}
