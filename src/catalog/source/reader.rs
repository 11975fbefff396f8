//! One pass over `yaml-rust2`'s parser events that builds the file's JSON
//! value and its [`Positions`] together, counting what aliases expand to
//! (see the parent module on "billion laughs").

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Number, Value};

use super::{MAX_LOCAL_TAGS, Mark, NodePosition, Positions, narrow, pointer_key};
use crate::diag::escape_pointer;
use crate::diag::{Diagnostic, Location};

/// What a file may expand to through aliases, in the units of
/// [`Reader::produced`]: a file without aliases uses at most about one unit
/// per byte, so this leaves room for the same again plus 1 Mi units of copies
/// (a shared schema reused by thousands of tools fits).
fn expansion_limit(text: &str) -> usize {
    text.len().saturating_mul(2).saturating_add(1 << 20)
}

/// What [`read_yaml`] made of a file.
pub(super) enum Read {
    /// The file's value, where its nodes are, and its local tags (`!name`)
    /// with where each is.
    Value(Value, Positions, Vec<LocalTag>),
    /// Aliases expand the file past [`expansion_limit`]; nothing else was read.
    TooBig(Diagnostic),
    /// Left to serde_yaml: a syntax error (its messages are the ones carte
    /// explains), a duplicate key, several documents.
    Refused,
}

/// Reads YAML into JSON and [`Positions`] in one pass over the parser's
/// events, without an intermediate tree: a 10,000-tool catalog would
/// otherwise hold two more copies of itself while loading.
pub(super) fn read_yaml(file: &Path, text: &str) -> Read {
    let mut reader = Reader::new(file, text);
    let parsed = yaml_rust2::parser::Parser::new_from_str(text).load(&mut reader, true);
    // Checked first: serde_yaml would expand the same aliases.
    if let Some(mark) = reader.too_big {
        let location = Location {
            file: file.to_path_buf(),
            line: mark.line as usize,
            column: mark.column as usize,
            width: mark.width as usize,
        };
        let diagnostic = Diagnostic::error(
            "yaml-aliases",
            location,
            format!(
                "YAML aliases expand this file past {} units (nodes plus bytes of text); this alias is where it stopped",
                reader.limit
            ),
        )
        .with_hint("an alias (`*name`) copies its anchor's whole value, aliases inside it included; write the value out or reuse it less");
        return Read::TooBig(diagnostic);
    }
    if parsed.is_err() || reader.refused || reader.documents > 1 {
        return Read::Refused;
    }
    Read::Value(reader.root.unwrap_or(Value::Null), reader.positions, reader.local_tags)
}

/// Where the quoted scalars of `text` start (line, column), sorted; events
/// up to a syntax error still count, so a scalar above a remaining error is
/// found.
pub(super) fn quoted_scalars(file: &Path, text: &str) -> Vec<(u32, u32)> {
    let mut reader = Reader::new(file, text);
    reader.quoted = Some(Vec::new());
    let _ = yaml_rust2::parser::Parser::new_from_str(text).load(&mut reader, true);
    let mut quoted = reader.quoted.unwrap_or_default();
    quoted.sort_unstable();
    quoted
}

struct Reader {
    positions: Positions,
    stack: Vec<Frame>,
    /// Finished nodes by anchor id, for aliases, with what each copy costs
    /// (the value is absent for anchors carte does not keep, such as keys).
    anchors: HashMap<usize, (Option<Value>, usize)>,
    root: Option<Value>,
    documents: usize,
    /// Set on anything left to serde_yaml (see [`read_yaml`]).
    refused: bool,
    /// What the file has expanded to so far: one per node, one per byte of
    /// scalar text (keys included), every alias counting as its anchor's copy.
    produced: usize,
    /// [`expansion_limit`] of the file.
    limit: usize,
    /// The alias that took `produced` past `limit`; from then on, events are ignored.
    too_big: Option<Mark>,
    /// Where quoted scalars start (line, column), in order, when asked for.
    quoted: Option<Vec<(u32, u32)>>,
    /// Local tags (`!name`), which carte gives no meaning, and where they are.
    local_tags: Vec<LocalTag>,
}

/// A local tag (`!name`) on a node.
pub(super) struct LocalTag {
    /// Where the node starts.
    pub(super) mark: Mark,
    /// The tag as written.
    pub(super) tag: String,
    /// Whether the node is a scalar (or a collection).
    pub(super) scalar: bool,
}

/// A collection being read. Each remembers its anchor and the value of
/// [`Reader::produced`] when it opened, to know what a copy of it costs.
enum Frame {
    /// A mapping at `pointer`; `key` is the key whose value comes next.
    Mapping {
        pointer: String,
        map: Map<String, Value>,
        key: Option<(String, Mark)>,
        first: bool,
        anchor: usize,
        start: usize,
    },
    /// A sequence at `pointer`.
    Sequence { pointer: String, items: Vec<Value>, anchor: usize, start: usize },
    /// A mapping or sequence used as a key (valid YAML, never a catalog key).
    Skipped { anchor: usize, start: usize },
}

/// Where a node goes in its parent.
enum Slot {
    /// The node is a mapping key, or inside a skipped one.
    Key,
    /// The node is a value at this pointer.
    Value(String),
}

/// The pointer of `parent`'s child `token` (already escaped).
fn child(parent: &str, token: &str) -> String {
    let mut pointer = String::with_capacity(parent.len() + 1 + token.len());
    pointer.push_str(parent);
    pointer.push('/');
    pointer.push_str(token);
    pointer
}

impl Reader {
    fn new(file: &Path, text: &str) -> Reader {
        Reader {
            positions: Positions::empty(file),
            stack: Vec::new(),
            anchors: HashMap::new(),
            root: None,
            documents: 0,
            refused: false,
            produced: 0,
            limit: expansion_limit(text),
            too_big: None,
            quoted: None,
            local_tags: Vec::new(),
        }
    }

    /// Records where a node starts; says whether it is a key or a value.
    fn place(&mut self, mark: Mark, key_text: Option<&str>) -> Slot {
        let (pointer, key) = match self.stack.last_mut() {
            None => (String::new(), None),
            Some(Frame::Skipped { .. }) => return Slot::Key,
            Some(Frame::Sequence { pointer, items, .. }) => (child(pointer, &items.len().to_string()), None),
            Some(Frame::Mapping { pointer, map, key, first, .. }) => match key {
                Some((text, key_mark)) => (child(pointer, &escape_pointer(text)), Some(*key_mark)),
                None => {
                    let text = key_text.unwrap_or("?").to_owned();
                    if map.contains_key(&text) {
                        self.refused = true; // serde_yaml reports duplicate keys
                    }
                    let key_mark = Mark { width: narrow(text.chars().count().max(1)), ..mark };
                    *key = Some((text, key_mark));
                    if std::mem::take(first) {
                        // A block mapping's own mark can sit after its first
                        // key; point at the first key, where a person sees it start.
                        if let Some(node) = self.positions.nodes.get_mut(&pointer_key(pointer)) {
                            node.value = Mark { width: 1, ..mark };
                        }
                    }
                    return Slot::Key;
                }
            },
        };
        self.positions.nodes.insert(pointer_key(&pointer), NodePosition { key, value: mark });
        Slot::Value(pointer)
    }

    /// Puts a finished value into its parent (or makes it the root);
    /// `cost` is what it added to [`Reader::produced`].
    fn finish(&mut self, value: Value, anchor: usize, cost: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, (Some(value.clone()), cost));
        }
        match self.stack.last_mut() {
            None => self.root = Some(value),
            Some(Frame::Skipped { .. }) => {}
            Some(Frame::Sequence { items, .. }) => items.push(value),
            Some(Frame::Mapping { map, key, .. }) => {
                if let Some((text, _)) = key.take() {
                    map.insert(text, value);
                }
            }
        }
    }

    fn open(&mut self, mark: Mark, mapping: bool, anchor: usize) {
        let start = self.produced;
        self.produced += 1;
        let frame = match self.place(mark, None) {
            Slot::Value(pointer) if mapping => {
                Frame::Mapping { pointer, map: Map::new(), key: None, first: true, anchor, start }
            }
            Slot::Value(pointer) => Frame::Sequence { pointer, items: Vec::new(), anchor, start },
            Slot::Key => Frame::Skipped { anchor, start },
        };
        self.stack.push(frame);
    }

    fn close(&mut self) {
        match self.stack.pop() {
            Some(Frame::Mapping { map, anchor, start, .. }) => {
                self.finish(Value::Object(map), anchor, self.produced - start);
            }
            Some(Frame::Sequence { items, anchor, start, .. }) => {
                self.finish(Value::Array(items), anchor, self.produced - start);
            }
            Some(Frame::Skipped { anchor, start }) => self.remember_cost(anchor, self.produced - start),
            None => {}
        }
    }

    /// Remembers a local tag (`!name`): YAML drops it from the value, which a
    /// person who wrote `description: !important …` does not expect.
    fn note_tag(&mut self, tag: Option<&yaml_rust2::parser::Tag>, mark: Mark, scalar: bool) {
        if let Some(tag) = tag
            && tag.handle == "!"
            && self.local_tags.len() < MAX_LOCAL_TAGS
        {
            self.local_tags.push(LocalTag { mark, tag: format!("!{}", tag.suffix), scalar });
        }
    }

    /// Records what a copy of an anchored node carte does not keep costs.
    fn remember_cost(&mut self, anchor: usize, cost: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, (None, cost));
        }
    }

    /// Counts an alias as the copy of its anchor; false (and the reading
    /// stops) if that takes the file past its limit.
    fn afford(&mut self, cost: usize, mark: Mark) -> bool {
        self.produced = self.produced.saturating_add(cost);
        if self.produced > self.limit {
            self.too_big = Some(mark);
            return false;
        }
        true
    }
}

impl yaml_rust2::parser::MarkedEventReceiver for Reader {
    fn on_event(&mut self, event: yaml_rust2::Event, marker: yaml_rust2::scanner::Marker) {
        if self.too_big.is_some() {
            return;
        }
        // yaml-rust2 columns count from 0.
        let mark = Mark { line: narrow(marker.line()), column: narrow(marker.col() + 1), width: 1 };
        match event {
            yaml_rust2::Event::DocumentStart => self.documents += 1,
            yaml_rust2::Event::Scalar(text, style, anchor, tag) => {
                self.note_tag(tag.as_ref(), mark, true);
                if let Some(quoted) = &mut self.quoted
                    && matches!(
                        style,
                        yaml_rust2::scanner::TScalarStyle::SingleQuoted
                            | yaml_rust2::scanner::TScalarStyle::DoubleQuoted
                    )
                {
                    quoted.push((mark.line, mark.column));
                }
                let cost = 1 + text.len();
                self.produced += cost;
                let width = if text.contains('\n') { 1 } else { narrow(text.chars().count().max(1)) };
                if let Slot::Value(_) = self.place(Mark { width, ..mark }, Some(&text)) {
                    let value = scalar(text, style, tag.as_ref());
                    self.finish(value, anchor, cost);
                } else {
                    self.remember_cost(anchor, cost);
                }
            }
            yaml_rust2::Event::Alias(id) => {
                // Counted before anything is copied.
                let cost = self.anchors.get(&id).map_or(0, |(_, cost)| *cost);
                if !self.afford(cost, mark) {
                    return;
                }
                if let Slot::Value(_) = self.place(mark, None) {
                    match self.anchors.get(&id).and_then(|(value, _)| value.clone()) {
                        Some(value) => self.finish(value, 0, cost),
                        None => self.refused = true,
                    }
                }
            }
            yaml_rust2::Event::MappingStart(anchor, tag) => {
                self.note_tag(tag.as_ref(), mark, false);
                self.open(mark, true, anchor);
            }
            yaml_rust2::Event::SequenceStart(anchor, tag) => {
                self.note_tag(tag.as_ref(), mark, false);
                self.open(mark, false, anchor);
            }
            yaml_rust2::Event::MappingEnd | yaml_rust2::Event::SequenceEnd => self.close(),
            _ => {}
        }
    }
}

/// A scalar's JSON value, by the YAML 1.2 core schema as serde_yaml reads
/// it: plain scalars may be null, booleans or numbers; quoted and block
/// scalars are strings; `!!str` forces a string.
fn scalar(text: String, style: yaml_rust2::scanner::TScalarStyle, tag: Option<&yaml_rust2::parser::Tag>) -> Value {
    let forced_string = tag.is_some_and(|tag| tag.handle == "tag:yaml.org,2002:" && tag.suffix == "str");
    if style != yaml_rust2::scanner::TScalarStyle::Plain || forced_string {
        return Value::String(text);
    }
    match text.as_str() {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Some(number) = yaml_number(&text) {
        return Value::Number(number);
    }
    Value::String(text)
}

fn yaml_number(text: &str) -> Option<Number> {
    let first = text.chars().next()?;
    if !(first.is_ascii_digit() || matches!(first, '-' | '+' | '.')) {
        return None;
    }
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let radix = if let Some(hex) = digits.strip_prefix("0x") {
        Some((hex, 16))
    } else {
        digits.strip_prefix("0o").map(|octal| (octal, 8))
    };
    if let Some((digits, radix)) = radix {
        let magnitude = u64::from_str_radix(digits, radix).ok()?;
        return if negative {
            i64::try_from(magnitude).ok().map(|n| Number::from(-n))
        } else {
            Some(Number::from(magnitude))
        };
    }
    if digits.bytes().all(|b| b.is_ascii_digit()) {
        return if negative {
            text.parse::<i64>().ok().map(Number::from)
        } else {
            digits.parse::<u64>().ok().map(Number::from)
        };
    }
    match digits {
        ".inf" | ".Inf" | ".INF" | ".nan" | ".NaN" | ".NAN" => return None, // not representable in JSON
        _ => {}
    }
    let float_like = digits.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
        && digits.bytes().any(|b| b.is_ascii_digit());
    if !float_like {
        return None;
    }
    text.parse::<f64>().ok().and_then(Number::from_f64)
}
