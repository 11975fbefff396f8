//! Checking the part-13 keys: what clients show and keep of an entry
//! (`icons`, `cache`, a tool's `ui`, a resource's `app`:
//! [`crate::catalog::presentation`]'s checks, reported at their place), and
//! what a server gives each caller (`rateLimit`) and all (`skills:`).

use serde_json::{Value, json};

use super::Builder;
use crate::catalog::assemble::Origin;
use crate::catalog::presentation::{self, AppSpec, Cache, CacheSpec, IconSpec, Problem};
use crate::catalog::rate_limit::{RateLimit, RateLimitSpec};

impl Builder<'_> {
    /// An entry's `icons` for its wire form (`None`: none, or wrong).
    pub(super) fn icons(&mut self, icons: Option<&Vec<IconSpec>>, origin: &Origin, below: &str) -> Option<Value> {
        let (wire, problems) = presentation::icons(icons?);
        self.report("icon", problems, origin, &format!("{below}/icons"));
        wire
    }

    /// An entry's `cache`, checked (`None`: none, or wrong).
    pub(super) fn cache(&mut self, cache: Option<&CacheSpec>, origin: &Origin, below: &str) -> Option<Cache> {
        match presentation::cache(cache?) {
            Ok(cache) => Some(cache),
            Err(problem) => {
                self.report("cache", vec![problem], origin, &format!("{below}/cache"));
                None
            }
        }
    }

    /// Whether a tool's `ui` names an app this catalog serves (a resource
    /// with `app:` at that `ui://` URI); reported at `/ui` if not.
    pub(super) fn check_ui(&mut self, ui: &str, origin: &Origin) -> bool {
        let declared = self.assembled.resources.iter().find(|decl| decl.spec.uri == ui);
        let (message, hint) = match declared {
            _ if !ui.starts_with("ui://") => (
                format!("`ui: {ui}` is not a `ui://` URI"),
                "an MCP App is a resource at a `ui://` URI, e.g. `ui://shop/cart.html`",
            ),
            Some(decl) if decl.spec.app.is_some() => return true,
            Some(_) => (
                format!("resource `{ui}` is not an app"),
                "give that resource `app: { file: page.html }` (an HTML file beside the catalog)",
            ),
            None => (
                format!("no resource has the URI `{ui}`"),
                "declare it under `resources:` with `app: { file: page.html }`",
            ),
        };
        let location = self.assembled.locate(origin, "/ui");
        self.error("ui", location, message).hint = Some(hint.to_owned());
        false
    }

    /// A resource's `app`: its `_meta.ui` (CSP, border), or `None` with the
    /// problems reported (an app is at a `ui://` URI and is HTML).
    pub(super) fn app(&mut self, app: &AppSpec, uri: &str, mime: Option<&str>, origin: &Origin) -> Option<Value> {
        let mut ok = true;
        if !uri.starts_with("ui://") {
            let location = self.assembled.locate(origin, "/uri");
            self.error("app", location, format!("app `{uri}` is not at a `ui://` URI")).hint =
                Some("MCP Apps are resources at `ui://` URIs, e.g. `ui://shop/cart.html`".to_owned());
            ok = false;
        }
        if let Some(mime) = mime.filter(|mime| *mime != presentation::APP_MIME) {
            let location = self.assembled.locate(origin, "/mimeType");
            self.error("app", location, format!("an app is served as `{}`, not `{mime}`", presentation::APP_MIME))
                .hint = Some("leave out `mimeType:`: carte sets it".to_owned());
            ok = false;
        }
        match presentation::app_meta(app) {
            Ok(meta) => ok.then_some(meta),
            Err(problems) => {
                self.report("app", problems, origin, "/app");
                None
            }
        }
    }

    /// An entry's `rateLimit`, checked (`None`: none, or wrong).
    pub(super) fn rate_limit(&mut self, spec: Option<&RateLimitSpec>, origin: &Origin) -> Option<RateLimit> {
        match spec?.check() {
            Ok(limit) => Some(limit),
            Err((key, message)) => {
                let location = self.assembled.locate(origin, &format!("/rateLimit/{key}"));
                self.error("rate-limit", location, message).hint =
                    Some("write e.g. `rateLimit: { calls: 120, per: 1m }`".to_owned());
                None
            }
        }
    }

    /// The `skills:` folder, which must exist; watched for changes.
    pub(super) fn skills(&mut self) -> Option<std::path::PathBuf> {
        let declared = self.assembled.skills.as_ref()?;
        let folder = self.assembled.base_dir(&declared.origin).join(&declared.spec);
        if !folder.is_dir() {
            let location = self.assembled.locate(&declared.origin, "");
            self.error("skills", location, format!("the skills folder `{}` does not exist", declared.spec)).hint = Some(
                "paths are relative to the catalog file; each skill is a folder in it with a `SKILL.md`".to_owned(),
            );
            return None;
        }
        self.inputs.trees.push(folder.clone());
        Some(folder)
    }

    /// Reports `problems` found below `below` (an entry's key).
    pub(super) fn report(&mut self, code: &'static str, problems: Vec<Problem>, origin: &Origin, below: &str) {
        for problem in problems {
            let location = self.assembled.locate(origin, &format!("{below}{}", problem.pointer));
            let diagnostic = if problem.warning {
                self.warn(code, location, problem.message)
            } else {
                self.error(code, location, problem.message)
            };
            diagnostic.hint = Some(problem.hint.to_owned());
        }
    }
}

/// `_meta` of a tool shown by the app at `uri` (MCP Apps).
pub(super) fn ui_meta(uri: &str) -> Value {
    json!({ "ui": { "resourceUri": uri } })
}
