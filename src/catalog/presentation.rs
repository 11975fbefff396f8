//! What 2026 clients show and keep of a catalog's entries, beside what
//! they do: icons (`icons:`), how long an answer may be kept (`cache:`,
//! MCP's `ttlMs` and `cacheScope`) and MCP Apps (a tool's `ui:` and a
//! resource's `app:`). Their specs, and the checks that turn them into what
//! the wire carries.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::duration::DurationSpec;

/// An icon a client may show beside the entry (MCP `icons`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "icon")]
pub struct IconSpec {
    /// Where the image is: an `https://` URL or a `data:` URI (`data:image/png;base64,…`).
    pub src: String,
    /// Its MIME type, `image/…` (`image/png`, `image/svg+xml`).
    #[serde(default, rename = "mimeType")]
    pub mime_type: Option<String>,
    /// The sizes it fits, each `WIDTHxHEIGHT` (`48x48`) or `any` (scalable images).
    #[serde(default)]
    pub sizes: Option<Vec<String>>,
    /// The background it is drawn for: `light` or `dark` (default: any).
    #[serde(default)]
    pub theme: Option<IconTheme>,
}

/// The background an icon is drawn for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(title = "icon theme")]
pub enum IconTheme {
    /// Drawn for a light background.
    Light,
    /// Drawn for a dark background.
    Dark,
}

/// How long clients may keep an answer before asking again (MCP `ttlMs`
/// and `cacheScope`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "cache")]
pub struct CacheSpec {
    /// How long an answer stays fresh, e.g. `60s`, `5m` (`0s`: ask every time); at most `24h`.
    pub ttl: DurationSpec,
    /// Who may keep it: `public` (any client or intermediary, for anyone) or
    /// `private` (only the asking user's client). Default `private`.
    #[serde(default)]
    pub scope: Option<CacheScope>,
}

/// Who may keep a cached answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(title = "cache scope")]
pub enum CacheScope {
    /// Any client or intermediary, for any user.
    Public,
    /// Only the asking user's client.
    #[default]
    Private,
}

/// A resource that is an MCP App: an HTML page a client shows in a sandbox,
/// served as `text/html;profile=mcp-app`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "app")]
pub struct AppSpec {
    /// The page: an HTML file, relative to this catalog file.
    pub file: String,
    /// The origins the page may reach (its Content Security Policy); none by default.
    #[serde(default)]
    pub csp: Option<CspSpec>,
    /// Whether the client should draw a border around the page.
    #[serde(default, rename = "prefersBorder")]
    pub prefers_border: Option<bool>,
}

/// The origins an app's page may reach, each as `https://host` (MCP Apps' `csp`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "app csp")]
pub struct CspSpec {
    /// Origins it may fetch from or connect to (`fetch`, WebSocket).
    #[serde(default, rename = "connectDomains")]
    pub connect_domains: Option<Vec<String>>,
    /// Origins it may load scripts, styles, images and fonts from.
    #[serde(default, rename = "resourceDomains")]
    pub resource_domains: Option<Vec<String>>,
    /// Origins it may embed in frames.
    #[serde(default, rename = "frameDomains")]
    pub frame_domains: Option<Vec<String>>,
}

/// The MIME type of an MCP App's page.
pub const APP_MIME: &str = "text/html;profile=mcp-app";

/// The longest `cache.ttl`.
pub const MAX_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// A cache hint as the wire carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cache {
    /// `ttlMs`.
    pub ttl_ms: u64,
    /// `cacheScope`.
    pub scope: CacheScope,
}

/// A problem with one of these keys: where (a JSON pointer below the key
/// that holds it), what, and a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Below the key: `/0/src`.
    pub pointer: String,
    /// What is wrong.
    pub message: String,
    /// What to write instead.
    pub hint: &'static str,
    /// Whether it is only a warning (the catalog still serves).
    pub warning: bool,
}

impl Problem {
    fn error(pointer: String, message: String, hint: &'static str) -> Problem {
        Problem { pointer, message, hint, warning: false }
    }
}

/// `icons` as the wire carries them (none if one is wrong), and the
/// problems found (warnings too).
pub fn icons(icons: &[IconSpec]) -> (Option<Value>, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut wire = Vec::with_capacity(icons.len());
    for (idx, icon) in icons.iter().enumerate() {
        let at = |key: &str| format!("/{idx}/{key}");
        let src = icon.src.trim();
        let scheme = src.split_once(':').map(|(scheme, _)| scheme.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("https") => {}
            Some("data") => {
                if !src.contains(',') || !src[5..].starts_with("image/") {
                    problems.push(Problem::error(
                        at("src"),
                        format!("icon `{}` is not a data URI of an image", shorten(src)),
                        "write `data:image/png;base64,…` (or image/svg+xml, image/jpeg, image/webp)",
                    ));
                }
            }
            Some("http") => problems.push(Problem {
                pointer: at("src"),
                message: format!("icon `{src}` is fetched over plain http"),
                hint: "clients may refuse it: serve it over https, or inline it as a data: URI",
                warning: true,
            }),
            _ => problems.push(Problem::error(
                at("src"),
                format!("icon `{}` is neither an https URL nor a data URI", shorten(src)),
                "write `https://…/icon.png`, or inline the image as `data:image/png;base64,…`",
            )),
        }
        if let Some(mime) = &icon.mime_type
            && !mime.starts_with("image/")
        {
            problems.push(Problem::error(
                at("mimeType"),
                format!("icon MIME type `{mime}` is not an image type"),
                "write an `image/…` type, e.g. image/png or image/svg+xml",
            ));
        }
        for (n, size) in icon.sizes.iter().flatten().enumerate() {
            if !is_size(size) {
                problems.push(Problem::error(
                    format!("/{idx}/sizes/{n}"),
                    format!("icon size `{size}` is not WIDTHxHEIGHT"),
                    "write sizes such as `48x48`, or `any` for a scalable image",
                ));
            }
        }
        let mut entry = Map::new();
        entry.insert("src".to_owned(), json!(src));
        if let Some(mime) = &icon.mime_type {
            entry.insert("mimeType".to_owned(), json!(mime));
        }
        if let Some(sizes) = &icon.sizes {
            entry.insert("sizes".to_owned(), json!(sizes));
        }
        if let Some(theme) = icon.theme {
            entry.insert("theme".to_owned(), json!(if theme == IconTheme::Light { "light" } else { "dark" }));
        }
        wire.push(Value::Object(entry));
    }
    let wrong = problems.iter().any(|p| !p.warning);
    ((!wrong).then_some(Value::Array(wire)), problems)
}

/// Whether `size` is `WIDTHxHEIGHT` or `any`.
fn is_size(size: &str) -> bool {
    size == "any"
        || size.split_once('x').is_some_and(|(w, h)| {
            [w, h].iter().all(|n| !n.is_empty() && n.len() <= 5 && n.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// The start of a long `data:` URI, for a message.
fn shorten(src: &str) -> String {
    match src.char_indices().nth(48) {
        Some((end, _)) => format!("{}…", &src[..end]),
        None => src.to_owned(),
    }
}

/// `cache` as the wire carries it, or what is wrong with it.
pub fn cache(spec: &CacheSpec) -> Result<Cache, Problem> {
    let ttl_ms = spec
        .ttl
        .millis()
        .map_err(|message| Problem::error("/ttl".to_owned(), message, "write a duration such as `60s` or `5m`"))?;
    if ttl_ms > MAX_TTL_MS {
        return Err(Problem::error(
            "/ttl".to_owned(),
            format!("`cache.ttl` is longer than 24h ({ttl_ms} ms)"),
            "clients ask again at least daily: write at most `24h`",
        ));
    }
    Ok(Cache { ttl_ms, scope: spec.scope.unwrap_or_default() })
}

/// The `_meta.ui` of an app's resource: its CSP and border, as MCP Apps
/// reads them; what is wrong with a domain.
pub fn app_meta(app: &AppSpec) -> Result<Value, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut ui = Map::new();
    if let Some(csp) = &app.csp {
        let mut wire = Map::new();
        let lists = [
            ("connectDomains", &csp.connect_domains),
            ("resourceDomains", &csp.resource_domains),
            ("frameDomains", &csp.frame_domains),
        ];
        for (key, domains) in lists {
            let Some(domains) = domains else { continue };
            for (idx, domain) in domains.iter().enumerate() {
                let bare = domain.strip_prefix("https://").or_else(|| domain.strip_prefix("wss://"));
                if bare.is_none_or(|host| host.is_empty() || host.contains(['/', ' ', '\'', ';'])) {
                    problems.push(Problem::error(
                        format!("/csp/{key}/{idx}"),
                        format!("`{domain}` is not an origin"),
                        "write an origin such as `https://api.example.com` (scheme and host, no path)",
                    ));
                }
            }
            wire.insert(key.to_owned(), json!(domains));
        }
        ui.insert("csp".to_owned(), Value::Object(wire));
    }
    if let Some(border) = app.prefers_border {
        ui.insert("prefersBorder".to_owned(), json!(border));
    }
    if problems.is_empty() { Ok(Value::Object(ui)) } else { Err(problems) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn icon(src: &str) -> IconSpec {
        IconSpec { src: src.to_owned(), mime_type: None, sizes: None, theme: None }
    }

    #[test]
    fn icons_are_https_or_data_images_with_sizes_and_a_theme() {
        let mut good = icon("https://shop.example/icon.png");
        good.mime_type = Some("image/png".to_owned());
        good.sizes = Some(vec!["48x48".to_owned(), "any".to_owned()]);
        good.theme = Some(IconTheme::Dark);
        let (wire, problems) = icons(&[good, icon("data:image/svg+xml;base64,PHN2Zy8+")]);
        assert_eq!(problems, []);
        assert_eq!(
            wire.unwrap(),
            json!([
                {"src": "https://shop.example/icon.png", "mimeType": "image/png", "sizes": ["48x48", "any"], "theme": "dark"},
                {"src": "data:image/svg+xml;base64,PHN2Zy8+"}
            ])
        );
        let mut bad = icon("ftp://x/icon.png");
        bad.sizes = Some(vec!["48".to_owned()]);
        bad.mime_type = Some("text/plain".to_owned());
        let (wire, problems) = icons(&[bad, icon("data:text/plain,hi")]);
        assert_eq!(wire, None);
        let pointers: Vec<&str> = problems.iter().map(|p| p.pointer.as_str()).collect();
        assert_eq!(pointers, ["/0/src", "/0/mimeType", "/0/sizes/0", "/1/src"]);
        // Plain http is served, with a warning.
        let (wire, problems) = icons(&[icon("http://shop.example/icon.png")]);
        assert!(wire.is_some());
        assert!(problems[0].warning);
    }

    #[test]
    fn a_cache_is_at_most_a_day_and_private_unless_said() {
        let spec = |ttl: &str, scope| CacheSpec { ttl: DurationSpec::Text(ttl.to_owned()), scope };
        assert_eq!(cache(&spec("60s", None)).unwrap(), Cache { ttl_ms: 60_000, scope: CacheScope::Private });
        assert_eq!(cache(&spec("5m", Some(CacheScope::Public))).unwrap().scope, CacheScope::Public);
        assert_eq!(cache(&spec("25h", None)).unwrap_err().pointer, "/ttl");
        assert_eq!(cache(&spec("soon", None)).unwrap_err().pointer, "/ttl");
    }

    #[test]
    fn an_apps_csp_lists_origins() {
        let app = |domains: Vec<&str>| AppSpec {
            file: "ui/cart.html".to_owned(),
            csp: Some(CspSpec {
                connect_domains: Some(domains.into_iter().map(str::to_owned).collect()),
                ..CspSpec::default()
            }),
            prefers_border: Some(true),
        };
        assert_eq!(
            app_meta(&app(vec!["https://api.shop.example"])).unwrap(),
            json!({"csp": {"connectDomains": ["https://api.shop.example"]}, "prefersBorder": true})
        );
        let problems = app_meta(&app(vec!["api.shop.example", "https://x/path"])).unwrap_err();
        assert_eq!(problems.len(), 2);
        assert_eq!(problems[0].pointer, "/csp/connectDomains/0");
    }
}
