//! Tools: their arguments, `run` (effect, steps, result) and names.

use std::ops::Range;

use serde_json::{Map, Value, json};

use crate::catalog::assemble::{Declared, Origin};
use std::time::Duration;

use crate::catalog::model::{RunSpec, StepSpec, TaskSpec, ToolSpec};
use crate::catalog::{ResultSpec, TaskOptions, Tool};
use crate::diag::{Diagnostic, Location};
use crate::duration::{positive_at_most, show_duration};
use crate::effect::{self, Effect};

use super::steps::produced_by;
use super::{Builder, Scope, present, wire_head};
use crate::catalog::FIND_TOOLS;

/// A task's ttl without `ttl:`.
const DEFAULT_TASK_TTL: Duration = Duration::from_secs(5 * 60);
/// The longest `ttl:` a task may have.
const MAX_TASK_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// A task's poll interval without `pollInterval:`.
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// The shortest `pollInterval:`.
const MIN_POLL_INTERVAL: Duration = Duration::from_millis(100);

impl Builder<'_> {
    pub(super) fn tool(&mut self, decl: &Declared<ToolSpec>) -> Option<Tool> {
        let spec = &decl.spec;
        let origin = &decl.origin;
        self.check_name("tool", &spec.name, origin);
        let searched = self.assembled.server.as_ref().and_then(|server| server.spec.discovery)
            == Some(crate::catalog::model::Discovery::Search);
        if searched && spec.name == FIND_TOOLS {
            let location = self.assembled.locate(origin, "/name");
            self.error("duplicate", location, format!("`{FIND_TOOLS}` is carte's own tool with `discovery: search`"))
                .hint = Some("give this tool another name".to_owned());
        } else if spec.pinned.is_some() && !searched {
            let location = self.assembled.locate(origin, "/pinned");
            self.warn("pinned", location, "`pinned` matters only with `server.discovery: search`").hint = Some(
                "every tool is listed already; remove `pinned`, or set `discovery: search` under `server:`".to_owned(),
            );
        }
        self.check_description("tool", &spec.name, spec.description.as_ref(), origin);
        let input_schema = spec.input_schema.clone().unwrap_or_else(|| {
            let mut empty = Map::new();
            empty.insert("type".to_owned(), json!("object"));
            empty.insert("properties".to_owned(), json!({}));
            empty
        });
        let input = self.schema(&input_schema, origin, "inputSchema");
        if input.is_some() {
            self.check_mcp_headers(&input_schema, origin);
        }
        let output = spec.output_schema.as_ref().map(|schema| self.schema(schema, origin, "outputSchema"));
        let properties: Vec<String> = input_schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        let free_text = free_text(&input_schema);
        let run = &spec.run;
        let errors_before = self.errors();
        let owner = format!("tool {}:", spec.name);
        let mut names = properties.clone();
        names.extend(["data".to_owned(), "arguments".to_owned(), "auth".to_owned()]);
        let declared_steps = run.steps.as_deref().unwrap_or_default();
        let produced = produced_by(declared_steps);
        // The effect's templates see what the steps produced; the result's
        // also see what the effect produced.
        let mut scope = Scope::new(names.iter().chain(&produced).cloned());
        let effect = self.effect(run, (&properties, &free_text), origin, &owner, &mut scope);
        names.extend(run.effects.variables().into_iter().map(str::to_owned));
        names.extend(produced);
        scope.allowed = names;
        let steps = self.steps(declared_steps, &owner, origin, "/run/steps", &mut scope);
        let result = self.result(run, &owner, origin, &mut scope);
        if let Some(Some(effect)) = &effect {
            scope.used.extend(effect.arguments_used().iter().cloned());
        }
        let assembled = self.assembled;
        // An effect that could not be checked (its database did not open)
        // says nothing of which arguments it uses.
        if effect.is_some() {
            self.warn_unused(
                ("tool", &spec.name),
                properties.iter().map(String::as_str),
                &scope,
                errors_before,
                |_, property| assembled.locate_key(origin, &format!("/inputSchema/properties/{property}")),
                "use it in the result template or the SQL statement, or remove it",
            );
        }
        let structured = run.json == Some(true) || spec.output_schema.is_some();
        let mut wire = wire_head(&spec.name, spec.title.as_ref(), spec.description.as_ref());
        if let Some(icons) = self.icons(spec.icons.as_ref(), origin, "") {
            wire.insert("icons".to_owned(), icons);
        }
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
        if let Some(ui) = spec.ui.as_deref().filter(|ui| self.check_ui(ui, origin)) {
            wire.insert("_meta".to_owned(), super::presentation::ui_meta(ui));
        }
        let input = input?;
        let output = match output {
            Some(compiled) => Some(compiled?),
            None => None,
        };
        let task = match &spec.task {
            Some(task) => Some(self.task(task, declared_steps, origin)?),
            None => None,
        };
        let scopes = self.scopes(spec.scopes.as_deref().unwrap_or_default(), origin);
        let rate_limit = self.rate_limit(spec.rate_limit.as_ref(), origin);
        let result = result?;
        let steps = steps?;
        let effect = effect?;
        Some(Tool {
            name: spec.name.clone(),
            wire,
            input,
            output,
            structured,
            steps,
            effect,
            result,
            task,
            scopes,
            rate_limit,
            pinned: spec.pinned == Some(true),
            closed_to: std::sync::OnceLock::new(),
        })
    }

    /// A tool's `scopes:`, each a scope token (RFC 6749 §3.3: printable
    /// ASCII but space, `"` and `\`); a duplicate is dropped.
    fn scopes(&mut self, scopes: &[String], origin: &Origin) -> Vec<String> {
        let mut kept: Vec<String> = Vec::with_capacity(scopes.len());
        for (idx, scope) in scopes.iter().enumerate() {
            let token = !scope.is_empty() && scope.bytes().all(|b| matches!(b, 0x21 | 0x23..=0x5B | 0x5D..=0x7E));
            if !token {
                let location = self.assembled.locate(origin, &format!("/scopes/{idx}"));
                self.error("tool-scope", location, format!("scope {scope:?} is not a scope token")).hint = Some(
                    "a scope is one word of printable ASCII without spaces, quotes or backslashes, e.g. `orders:read`"
                        .to_owned(),
                );
            } else if !kept.contains(scope) {
                kept.push(scope.clone());
            }
        }
        kept
    }

    /// Checks a tool's `task:`: its durations, and that `askFirst` has
    /// input steps to ask.
    fn task(&mut self, spec: &TaskSpec, steps: &[StepSpec], origin: &Origin) -> Option<TaskOptions> {
        let ttl = match spec
            .ttl
            .as_ref()
            .map(|ttl| positive_at_most(ttl, MAX_TASK_TTL, "a ttl", "drop every task at once"))
        {
            None => Some(DEFAULT_TASK_TTL),
            Some(Ok(ttl)) => Some(ttl),
            Some(Err(message)) => {
                let location = self.assembled.locate(origin, "/task/ttl");
                self.error("task-ttl", location, message).hint = Some(
                    "the ttl is how long a task may run and how long its result is kept after; write e.g. `5m` or `1h`, at most `24h`".to_owned(),
                );
                None
            }
        };
        let poll_interval = match spec.poll_interval.as_ref().map(|poll| {
            let poll = positive_at_most(poll, MAX_TASK_TTL, "a pollInterval", "ask clients to poll without pause")?;
            if poll < MIN_POLL_INTERVAL {
                return Err(format!("a pollInterval of {} is shorter than 100ms", show_duration(poll)));
            }
            Ok(poll)
        }) {
            None => Some(DEFAULT_POLL_INTERVAL),
            Some(Ok(poll)) => Some(poll),
            Some(Err(message)) => {
                let location = self.assembled.locate(origin, "/task/pollInterval");
                self.error("task-poll-interval", location, message).hint = Some(
                    "clients call `tasks/get` this often while the task runs; write e.g. `1s` (at least `100ms`)"
                        .to_owned(),
                );
                None
            }
        };
        let asks = |step: &&StepSpec| {
            step.elicit.is_some() || step.sample.is_some() || step.roots.is_some() || step.ask.is_some()
        };
        let asked = steps.iter().take_while(asks).count();
        let ask_first = if spec.ask_first == Some(true) {
            if asked == 0 {
                let location = self.assembled.locate(origin, "/task/askFirst");
                self.error("task-ask-first", location, "`askFirst` asks the leading input steps (`elicit`, `sample`, `roots`, `ask`) before the task starts, but this tool's steps do not start with one").hint = Some(
                    "put the questions to ask before the task at the start of `run.steps`, or remove `askFirst`".to_owned(),
                );
                return None;
            }
            asked
        } else {
            0
        };
        Some(TaskOptions { mode: spec.mode.unwrap_or_default(), ttl: ttl?, poll_interval: poll_interval?, ask_first })
    }

    /// Checks the effect of `run`: `Some(None)` if it has none, `None` once
    /// it reported why the effect cannot run.
    fn effect(
        &mut self,
        run: &RunSpec,
        arguments: (&[String], &[String]),
        origin: &Origin,
        owner: &str,
        scope: &mut Scope,
    ) -> Option<Option<Effect>> {
        self.with_effect_host(arguments, (origin, EffectKeys::UnderRun), owner, scope, |sections, check| {
            run.effects.check(sections, check)
        })
    }

    /// Runs `check` with what an effect is checked against: the top-level
    /// blocks it may name, and this builder as its host, at `origin`.
    pub(super) fn with_effect_host<T>(
        &mut self,
        (arguments, free_text): (&[String], &[String]),
        (origin, keys): (&Origin, EffectKeys),
        owner: &str,
        scope: &mut Scope,
        check: impl FnOnce(&effect::Sections, &mut effect::Check<'_>) -> T,
    ) -> T {
        // Out of the builder while the effect is checked, which needs the builder too.
        let sections = std::mem::take(&mut self.blocks);
        let mut host = EffectHost { builder: self, origin, keys, owner, scope };
        let checked = check(&sections, &mut effect::Check { arguments, free_text, host: &mut host });
        self.blocks = sections;
        checked
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
        if run.effects.any() {
            return Some(ResultSpec::EffectJson);
        }
        let location = self.assembled.locate_key(origin, "/run");
        self.error("run", location, "`run` does nothing").hint = Some(
            "give it `text:`, `template:` or `content:` to render a result, or an effect such as `sql:`".to_owned(),
        );
        None
    }
}

/// Where an effect's keys are in the entry that names it.
#[derive(Clone, Copy)]
pub(super) enum EffectKeys {
    /// Under `run` (a tool): as the effect places them (`/run/http/api`).
    UnderRun,
    /// At the top of the entry (a resource): `/run/http/api` is `/http/api`.
    AtTop,
}

/// What an effect is checked with: the builder, at the tool (or resource)
/// being built.
pub(super) struct EffectHost<'h, 'b> {
    pub(super) builder: &'h mut Builder<'b>,
    pub(super) origin: &'h Origin,
    pub(super) keys: EffectKeys,
    /// `tool NAME:`, the start of the names of the tool's templates.
    pub(super) owner: &'h str,
    /// What the effect's templates may use.
    pub(super) scope: &'h mut Scope,
}

impl EffectHost<'_, '_> {
    /// Where the key an effect places at `pointer` is in the entry.
    fn in_entry<'p>(&self, pointer: &'p str) -> &'p str {
        match self.keys {
            EffectKeys::UnderRun => pointer,
            EffectKeys::AtTop => pointer.strip_prefix("/run").filter(|rest| rest.starts_with('/')).unwrap_or(pointer),
        }
    }
}

impl effect::Host for EffectHost<'_, '_> {
    fn locate(&self, pointer: &str) -> Location {
        self.builder.assembled.locate(self.origin, self.in_entry(pointer))
    }

    fn locate_key(&self, pointer: &str) -> Location {
        self.builder.assembled.locate_key(self.origin, self.in_entry(pointer))
    }

    fn locate_in(&self, pointer: &str, text: &str, range: Range<usize>) -> Location {
        let at = self.builder.assembled.locate(self.origin, self.in_entry(pointer));
        // Read again only for an error, so no cache is needed.
        let file = std::fs::read_to_string(&at.file).ok();
        file.and_then(|file| super::scalar_map::locate_in_scalar(&file, &at, text, range)).unwrap_or(at)
    }

    fn template(&mut self, pointer: &str, source: &str) -> Option<effect::Template> {
        let pointer = self.in_entry(pointer);
        let name = format!("{}{pointer}", self.owner);
        let name = self.builder.inline(name, source, self.origin, pointer, self.scope)?;
        let typed = single_expression(source).and_then(|expression| {
            let twin = format!("{name}#json");
            let twin_source = format!("{{{{ ({expression}) | tojson }}}}");
            self.builder.env.template_from_named_str(&twin, &twin_source).ok()?;
            self.builder.sources.insert(twin.clone(), twin_source);
            Some(twin)
        });
        Some(effect::Template { name, typed })
    }

    fn url_template(&mut self, pointer: &str, source: &str) -> Option<effect::Template> {
        let pointer = self.in_entry(pointer);
        let name = format!("{}{pointer}", self.owner);
        let name = self.builder.inline(name, source, self.origin, pointer, self.scope)?;
        self.builder.url_templates.insert(name.clone());
        Some(effect::Template { name, typed: None })
    }

    fn report(&mut self, diagnostic: Diagnostic) -> &mut Diagnostic {
        let idx = self.builder.diagnostics.len();
        self.builder.diagnostics.push(diagnostic);
        &mut self.builder.diagnostics[idx]
    }
}

/// The expression of a template that is nothing but one `{{ expression }}`
/// (`"{{ count }}"`, `"{{- n + 1 }}"`), whose value can keep its type.
fn single_expression(source: &str) -> Option<&str> {
    let inner = source.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    let inner = inner.strip_prefix(['-', '+']).unwrap_or(inner);
    let inner = inner.strip_suffix(['-', '+']).unwrap_or(inner).trim();
    let nested = ["{{", "}}", "{%", "%}", "{#", "#}"].iter().any(|mark| inner.contains(mark));
    (!inner.is_empty() && !nested).then_some(inner)
}

/// The properties of `input_schema` a client may send as any text: typed
/// `string` (or untyped), without `enum`, `const` or `pattern`.
fn free_text(input_schema: &Map<String, Value>) -> Vec<String> {
    let Some(properties) = input_schema.get("properties").and_then(Value::as_object) else { return Vec::new() };
    let texts = |schema: &Map<String, Value>| match schema.get("type") {
        None => true,
        Some(Value::String(kind)) => kind == "string",
        Some(Value::Array(kinds)) => kinds.iter().any(|kind| kind == "string"),
        Some(_) => false,
    };
    properties
        .iter()
        .filter(|(_, schema)| {
            schema.as_object().is_none_or(|schema| {
                texts(schema) && !["enum", "const", "pattern"].iter().any(|key| schema.contains_key(*key))
            })
        })
        .map(|(name, _)| name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::single_expression;

    #[test]
    fn a_template_of_one_expression_is_told_from_others() {
        assert_eq!(single_expression("{{ count }}"), Some("count"));
        assert_eq!(single_expression(" {{- n + 1 -}} "), Some("n + 1"));
        assert_eq!(single_expression("{{ a }}-{{ b }}"), None);
        assert_eq!(single_expression("id {{ a }}"), None);
        assert_eq!(single_expression("{% if a %}x{% endif %}"), None);
        assert_eq!(single_expression("{{ }}"), None);
    }
}
