//! How the walker follows a path into `data` (`data.menu[product].name`):
//! each part looked up in the values the path so far stands for, a part
//! that is an expression standing for every value there, and the first part
//! that leads nowhere reported with what was there instead.

use super::*;

impl<'d> Walker<'d> {
    /// Resolves a path expression to the `data` values it stands for,
    /// reporting the first part that leads nowhere when `report`.
    pub(super) fn resolve(&mut self, expr: &Expr<'_>, report: bool) -> Option<Resolved<'d>> {
        match expr {
            Expr::Var(var) => match self.lookup(var.id) {
                Some(bound) => bound.clone().map(|bound| Resolved { written: var.id.to_owned(), ..bound }),
                None if var.id == "data" => Some(Resolved {
                    values: Vec::new(),
                    root: true,
                    path: "data".to_owned(),
                    written: "data".to_owned(),
                    dynamic: false,
                }),
                None => None,
            },
            Expr::GetAttr(attr) => {
                let base = self.resolve(&attr.expr, report)?;
                let span = attr.span();
                let end = span.end_offset as usize;
                let name_range = end.saturating_sub(attr.name.len())..end;
                self.key(base, attr.name, name_range, report)
            }
            Expr::GetItem(item) => {
                let base = self.resolve(&item.expr, report)?;
                match &item.subscript_expr {
                    Expr::Const(constant) => {
                        let key_range = range(constant.span());
                        if let Some(key) = constant.value.as_str() {
                            self.key(base, key, key_range, report)
                        } else {
                            let index = i64::try_from(constant.value.clone()).ok()?;
                            self.index(base, index, key_range, report)
                        }
                    }
                    _ => self.every(base),
                }
            }
            _ => None,
        }
    }

    /// The values of a map key on each of `base`'s values.
    pub(super) fn key(
        &mut self,
        base: Resolved<'d>,
        key: &str,
        at: Range<usize>,
        report: bool,
    ) -> Option<Resolved<'d>> {
        let path = key_path(&base.path, key);
        let written = key_path(&base.written, key);
        let mut maps: Vec<&'d Map<String, Value>> = Vec::new();
        if base.root {
            maps.push(self.data);
        }
        for value in &base.values {
            match value {
                Value::Object(map) => maps.push(map),
                // Strings, numbers, lists: attributes mean something else there.
                _ => return None,
            }
        }
        let found: Vec<&'d Value> = maps.iter().filter_map(|map| map.get(key)).collect();
        if found.is_empty() {
            if report && !self.guarded(&written) && !maps.is_empty() {
                let subject = base.subject();
                let mut keys: Vec<&str> = Vec::new();
                for map in &maps {
                    for k in map.keys() {
                        if !keys.contains(&k.as_str()) && keys.len() <= FEW_KEYS {
                            keys.push(k);
                        }
                    }
                }
                let message = if base.dynamic {
                    match maps.len() {
                        1 => format!("{subject} has no key `{key}`: the one value it can be has none"),
                        n => format!("{subject} has no key `{key}`: none of the {n} values it can be has one"),
                    }
                } else {
                    format!("{subject} has no key `{key}`")
                };
                let listed = if keys.is_empty() && base.root {
                    format!("the catalog's `data:` is empty; add `{key}` there")
                } else if keys.is_empty() {
                    format!("`{}` is empty", base.path)
                } else if keys.len() <= FEW_KEYS {
                    format!("`{}` has: {}", base.path, keys.join(", "))
                } else {
                    format!("see the `data:` block for the keys of `{}`", base.path)
                };
                let hint = match did_you_mean(key, keys.iter().copied()) {
                    Some(close) => format!("did you mean `{close}`? {listed}"),
                    None => format!("{listed}; to allow a missing key, test it: `{written} is defined`"),
                };
                self.out.data.push(DataProblem { range: at, message, hint });
            }
            return None;
        }
        Some(Resolved { values: found, root: false, path, written, dynamic: base.dynamic })
    }

    /// The item at `index` of each of `base`'s lists.
    pub(super) fn index(
        &mut self,
        base: Resolved<'d>,
        index: i64,
        at: Range<usize>,
        report: bool,
    ) -> Option<Resolved<'d>> {
        if base.root {
            return None;
        }
        let path = format!("{}[{index}]", base.path);
        let written = format!("{}[{index}]", base.written);
        let mut found = Vec::new();
        let mut shortest = usize::MAX;
        for value in &base.values {
            let Value::Array(items) = value else { return None };
            shortest = shortest.min(items.len());
            let position = if index < 0 { i64::try_from(items.len()).ok()? + index } else { index };
            if let Some(item) = usize::try_from(position).ok().and_then(|p| items.get(p)) {
                found.push(item);
            }
        }
        if found.is_empty() {
            if report && !self.guarded(&written) && !base.values.is_empty() {
                let count = if base.values.len() == 1 {
                    format!("it has {shortest}")
                } else {
                    "none of its values has that many".to_owned()
                };
                self.out.data.push(DataProblem {
                    range: at,
                    message: format!("{} has no item {index} ({count})", base.subject()),
                    hint: "items are counted from 0".to_owned(),
                });
            }
            return None;
        }
        Some(Resolved { values: found, root: false, path, written, dynamic: base.dynamic })
    }

    /// Every value (of a map) or item (of a list) of `base`'s values.
    pub(super) fn every(&mut self, base: Resolved<'d>) -> Option<Resolved<'d>> {
        let mut found: Vec<&'d Value> = Vec::new();
        if base.root {
            found.extend(self.data.values());
        }
        for value in &base.values {
            match value {
                Value::Object(map) => found.extend(map.values()),
                Value::Array(items) => found.extend(items.iter()),
                _ => return None,
            }
            if found.len() > MAX_VALUES {
                return None;
            }
        }
        Some(Resolved {
            values: found,
            root: false,
            path: format!("{}[…]", base.path),
            written: format!("{}[…]", base.written),
            dynamic: true,
        })
    }
}

/// A path as written (`item.name`, `data.menu[…]`), as [`Resolved::written`] spells it.
pub(super) fn static_path(expr: &Expr<'_>) -> Option<String> {
    match expr {
        Expr::Var(var) => Some(var.id.to_owned()),
        Expr::GetAttr(attr) => Some(key_path(&static_path(&attr.expr)?, attr.name)),
        Expr::GetItem(item) => {
            let base = static_path(&item.expr)?;
            match &item.subscript_expr {
                Expr::Const(constant) => match constant.value.as_str() {
                    Some(key) => Some(key_path(&base, key)),
                    None => Some(format!("{base}[{}]", constant.value)),
                },
                _ => Some(format!("{base}[…]")),
            }
        }
        _ => None,
    }
}

/// `base.key`, or `base["key"]` where the key is not a name.
fn key_path(base: &str, key: &str) -> String {
    if is_identifier(key) { format!("{base}.{key}") } else { format!("{base}[{key:?}]") }
}

impl Resolved<'_> {
    /// What a message calls it: as written, and where it is in `data` when
    /// that differs (`room` (`data.rooms[…]`)).
    pub(super) fn subject(&self) -> String {
        if self.written == self.path {
            format!("`{}`", self.path)
        } else {
            format!("`{}` (`{}`)", self.written, self.path)
        }
    }
}

fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
