//! The `jq` filter of templates (`{{ json | jq(".items[].id") }}`), run by
//! jaq (`jaq-core`, `jaq-std`, `jaq-json`): compiling a filter, checking one
//! at load, and running one within bounds.
//!
//! # Bounds
//! A jq filter is a program: `repeat(1)`, `range(1e18)` or `def f: f; f`
//! never end, and `def f: [f]; f` recurses without limit. jaq offers no way
//! to stop a run, so carte meters it itself:
//! - **Steps**: jaq looks up the term it is about to evaluate in its table
//!   on every step, through the run's data ([`HasLut::lut`]); carte's data
//!   counts those lookups and stops the run past its budget (at most
//!   [`STEPS`] per call, less when the render's fuel is low). `range`, the
//!   one builtin that makes values in a loop of its own, is replaced by one
//!   that counts a step per value. Stopping unwinds the run
//!   ([`std::panic::resume_unwind`], which runs no panic hook) to
//!   [`on_jq_thread`], which turns it into an error: nothing of the run
//!   survives it (its values and iterators are dropped), and the compiled
//!   filter is never written to.
//! - **Stack**: each compile and run has a thread of its own with a
//!   [`STACK_BYTES`] stack (reserved, touched only as used); a run that
//!   nests deeper than [`MAX_STACK_USE`] of it is stopped the same way.
//! - **Outputs**: at most [`MAX_OUTPUTS`]; values cross to and from jaq
//!   nested at most [`MAX_DEPTH`] deep and within the render's byte budget.
//! - **Filters**: at most [`MAX_FILTER_BYTES`]; compiled ones are cached
//!   by their text, at most [`MAX_CACHED`] of them.
//! - **What jaq can read**: `env`/`$ENV` (the server's secrets), `halt`,
//!   `input`/`inputs`, `debug` and `stderr` are not available; there are
//!   no modules.
//! - **Bytes**: the values a run builds are charged to a budget of
//!   [`BUILT_PER_BYTE`] times its byte limit (carte's patch of jaq-json,
//!   `jaq_json::budget`): a step that would build a value past it from a
//!   size the filter chooses (`"x" * 1e10`, `. + .` doubled, products of big
//!   numbers) is refused before it allocates; other values are charged as
//!   they are built and the run is stopped at its next step once the budget
//!   is spent. (`.[1e9] = 1` is an error in jaq: arrays do not grow by
//!   index, and `pow` gives a float.)

use std::cell::Cell;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, LazyLock, Mutex};

use jaq_core::box_iter::box_once;
use jaq_core::data::{DataT, HasLut};
use jaq_core::load::{Arena, File, Loader};
use jaq_core::native::{Fun, v};
use jaq_core::{Compiler, Ctx, Exn, Vars};
use jaq_json::Val;
use minijinja::Value;
use values::{Sizes, from_jaq, to_jaq};

/// The most outputs one call may give.
pub const MAX_OUTPUTS: usize = 10_000;

/// The most steps one call may take (about one per term jaq evaluates).
pub const STEPS: u64 = 1_000_000;

/// The longest filter text.
pub const MAX_FILTER_BYTES: usize = 8 << 10;

/// How deep values given to and taken from jaq may nest.
pub const MAX_DEPTH: usize = 512;

/// The stack of the thread each compile and run has.
pub const STACK_BYTES: usize = 256 << 20;

/// How much of that stack a run may use before it is stopped.
pub const MAX_STACK_USE: usize = 192 << 20;

/// The most compiled filters kept (the cache starts over when full).
pub const MAX_CACHED: usize = 1024;

/// Bytes of values a run may build, per byte it may take and give.
pub const BUILT_PER_BYTE: usize = 4;

/// Bytes a list item or map entry counts for in the byte budget (as
/// minijinja's fuel counts a list slot).
const SLOT_BYTES: usize = 32;

/// The data jaq runs with: [`Val`]s, and a [`Meter`] to count steps.
struct Metered;

impl DataT for Metered {
    type V<'a> = Val;
    type Data<'a> = Meter<'a>;
}

type Filter = jaq_core::Filter<Metered>;
type Lut = jaq_core::Lut<Metered>;

/// Why a run was stopped (the payload of the unwind).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stop {
    Steps,
    Deep,
    /// The byte budget is spent; the refusal, said on the run's thread
    /// (the budget is that thread's).
    Bytes(String),
}

/// What one run may still do.
struct Budget {
    steps: Cell<u64>,
    used: Cell<u64>,
    /// The address of a local of the run's outermost frame.
    stack_base: usize,
}

impl Budget {
    fn new(steps: u64, stack_base: usize) -> Budget {
        Budget { steps: Cell::new(steps), used: Cell::new(0), stack_base }
    }

    /// Counts a step; stops the run when the budget or the stack is spent.
    fn step(&self) {
        let left = self.steps.get();
        if left == 0 {
            std::panic::resume_unwind(Box::new(Stop::Steps));
        }
        self.steps.set(left - 1);
        self.used.set(self.used.get() + 1);
        if jaq_json::budget::spent() {
            std::panic::resume_unwind(Box::new(Stop::Bytes(jaq_json::budget::refusal())));
        }
        if stack_address().abs_diff(self.stack_base) > MAX_STACK_USE {
            std::panic::resume_unwind(Box::new(Stop::Deep));
        }
    }
}

/// About where the stack is now.
#[inline(never)]
fn stack_address() -> usize {
    let here = 0u8;
    std::hint::black_box(&here) as *const u8 as usize
}

/// The run's data: the compiled filter's table, and the budget charged
/// each time jaq looks a term up in it (once per step).
#[derive(Clone)]
struct Meter<'a> {
    lut: &'a Lut,
    budget: &'a Budget,
}

impl<'a> HasLut<'a, Metered> for Meter<'a> {
    fn lut(&self) -> &'a Lut {
        self.budget.step();
        self.lut
    }
}

/// A filter that does not compile, for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// What is wrong.
    pub message: String,
    /// The bytes of the filter text at fault, when known.
    pub at: Option<Range<usize>>,
    /// Whether it reads the server's environment (`$ENV`), which carte withholds.
    pub reads_environment: bool,
}

impl Invalid {
    /// A filter that does not compile, `message` saying why.
    fn new(message: String, at: Option<Range<usize>>) -> Invalid {
        Invalid { message, at, reads_environment: false }
    }
}

/// Why a run gave no value. Its text is what the template's error says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JqError {
    /// The filter does not compile.
    #[error("the jq filter is not valid: {0}")]
    Invalid(String),
    /// The run used every step it had.
    #[error("the jq filter did too much work (more than {steps} steps; a runaway loop?) and was stopped", steps = group(STEPS))]
    OutOfSteps,
    /// The run recursed past the thread's stack.
    #[error("the jq filter recursed too deeply and was stopped")]
    TooDeep,
    /// The values the run built, or gave and took, were past its byte budget.
    #[error("{0}")]
    TooBig(String),
    /// More outputs than [`MAX_OUTPUTS`].
    #[error("the jq filter gave more than {most} outputs", most = group(MAX_OUTPUTS as u64))]
    TooManyOutputs,
    /// The filter raised an error (`error("text")`, `.a` of a list …).
    #[error("jq: {0}")]
    Raised(String),
    /// The run could not start, or stopped for another reason.
    #[error("{0}")]
    Failed(String),
}

/// What a run gave, and the steps it took.
#[derive(Debug)]
pub struct Ran {
    /// The outputs, or why there are none.
    pub result: Result<Value, JqError>,
    /// Steps taken.
    pub steps: u64,
    /// Bytes of values given to and taken from jaq.
    pub bytes: usize,
    /// Whether the run was stopped for want of steps or bytes (its
    /// budgets, not an error of the filter).
    pub spent: bool,
}

/// Builtins a catalog's filter may not use: what reads the server's
/// environment, ends or reads the process, or writes to its stderr.
const WITHHELD: &[&str] = &["env", "halt", "halt_error", "input", "inputs", "debug_empty", "stderr_empty"];

fn withheld<'a>(cv: jaq_core::Cv<'a, Metered>) -> jaq_core::ValXs<'a, Val> {
    let _ = cv;
    box_once(Err(Exn::from(jaq_core::Error::str(
        "this builtin is not available in carte (no env, $ENV, halt, input, debug or stderr)",
    ))))
}

/// `range($from; $to; $by)`, a step per value (jaq's makes them in a loop
/// of its own, where no step is counted).
fn range<'a>(mut cv: jaq_core::Cv<'a, Metered>) -> jaq_core::ValXs<'a, Val> {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let by = cv.0.pop_var();
    let to = cv.0.pop_var();
    let from = cv.0.pop_var();
    let meter = cv.0.data().clone();
    let direction = by.partial_cmp(&Val::from(0isize)).unwrap_or(Equal);
    let mut next: Option<Val> = Some(from);
    Box::new(std::iter::from_fn(move || {
        let current = next.take()?;
        meter.budget.step();
        let more = match direction {
            Greater => current < to,
            Less => current > to,
            Equal => current != to,
        };
        if !more {
            return None;
        }
        match current.clone() + by.clone() {
            Ok(after) => next = Some(after),
            Err(err) => return Some(Err(Exn::from(err))),
        }
        Some(Ok(current))
    }))
}

/// The builtins: jaq's core, standard and JSON ones, less [`WITHHELD`],
/// with a metered `range`.
fn builtins() -> Vec<Fun<Metered>> {
    jaq_core::funs::<Metered>()
        .chain(jaq_std::funs::<Metered>())
        .chain(jaq_json::funs::<Metered>())
        .map(|(name, args, native)| {
            if WITHHELD.contains(&name) {
                (name, args, jaq_core::Native::<Metered>::new(withheld))
            } else if name == "range" && args.len() == 3 {
                (name, v(3), jaq_core::Native::<Metered>::new(range))
            } else {
                (name, args, native)
            }
        })
        .collect()
}

/// Compiles `text` (on the current thread: see [`on_jq_thread`]).
fn compile_here(text: &str) -> Result<Filter, Invalid> {
    if text.len() > MAX_FILTER_BYTES {
        return Err(Invalid::new(format!("the jq filter is longer than {} KiB", MAX_FILTER_BYTES >> 10), None));
    }
    let defs = jaq_core::defs().chain(jaq_std::defs()).chain(jaq_json::defs());
    let arena = Arena::default();
    let modules = Loader::new(defs).load(&arena, File { code: text, path: () }).map_err(|errors| {
        let mut first = None;
        for (_, error) in errors {
            let found = match error {
                jaq_core::load::Error::Io(errs) => {
                    errs.into_iter().next().map(|(at, why)| (format!("cannot load a module: {why}"), at))
                }
                jaq_core::load::Error::Lex(errs) => errs.into_iter().next().map(|(expected, at)| {
                    let at = token_at(at);
                    (format!("expected {}, found {}", expected.as_str(), found(at)), at)
                }),
                jaq_core::load::Error::Parse(errs) => errs
                    .into_iter()
                    .next()
                    .map(|(expected, at)| (format!("expected {}, found {}", expected.as_str(), found(at)), at)),
            };
            if first.is_none() {
                first = found;
            }
        }
        match first {
            Some((message, at)) => Invalid::new(message, offset_in(text, at)),
            None => Invalid::new("the jq filter does not parse".to_owned(), None),
        }
    })?;
    Compiler::default().with_funs(builtins()).compile(modules).map_err(|errors| {
        let first = errors.into_iter().flat_map(|(_, errs)| errs).next();
        match first {
            Some((name, undefined)) => {
                let what = match undefined {
                    jaq_core::compile::Undefined::Filter(arity) => format!("`{name}/{arity}`"),
                    _ => format!("`{name}`"),
                };
                let reads_environment = name == "$ENV";
                let hint = if reads_environment { " (carte gives jq no environment)" } else { "" };
                Invalid {
                    message: format!("undefined {} {what}{hint}", undefined.as_str()),
                    at: offset_in(text, name),
                    reads_environment,
                }
            }
            None => Invalid::new("the jq filter does not compile".to_owned(), None),
        }
    })
}

/// What a parser found: `token`, or the end.
fn found(at: &str) -> String {
    if at.is_empty() { "the end of the filter".to_owned() } else { format!("`{at}`") }
}

/// The first token of the rest of the input a lexer error points at.
fn token_at(rest: &str) -> &str {
    let end = rest.char_indices().find(|(_, c)| c.is_whitespace()).map_or(rest.len(), |(idx, _)| idx);
    let end = if end == 0 { rest.chars().next().map_or(0, char::len_utf8) } else { end };
    &rest[..end]
}

/// Where `part` (a slice of `text`, as jaq's errors hold) is in `text`.
fn offset_in(text: &str, part: &str) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= text.len()).then_some(start..end)
}

/// Runs `work` on a thread of its own with a [`STACK_BYTES`] stack,
/// turning a stopped run into an error.
fn on_jq_thread<T: Send>(work: impl FnOnce() -> Result<T, JqError> + Send) -> Result<T, JqError> {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("carte-jq".to_owned())
            .stack_size(STACK_BYTES)
            .spawn_scoped(scope, || std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)))
            .map_err(|err| JqError::Failed(format!("cannot start jq: {err}")))?;
        match thread.join() {
            Ok(Ok(done)) => done,
            Ok(Err(payload)) | Err(payload) => Err(match payload.downcast_ref::<Stop>() {
                Some(Stop::Steps) => JqError::OutOfSteps,
                Some(Stop::Deep) => JqError::TooDeep,
                Some(Stop::Bytes(refusal)) => JqError::TooBig(refusal.clone()),
                None => JqError::Failed("jq stopped unexpectedly".to_owned()),
            }),
        }
    })
}

/// `n` with thousands separated: 1,000,000.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (idx, c) in digits.chars().enumerate() {
        if idx > 0 && (digits.len() - idx).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

static CACHE: LazyLock<Mutex<HashMap<String, Arc<Filter>>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// The compiled `text`, from the cache or compiled now (on its own thread).
fn compiled(text: &str) -> Result<Arc<Filter>, Invalid> {
    if let Some(found) = CACHE.lock().ok().and_then(|cache| cache.get(text).cloned()) {
        return Ok(found);
    }
    let filter =
        on_jq_thread(|| Ok(compile_here(text))).map_err(|err| Invalid::new(err.to_string(), None))?.map(Arc::new)?;
    if let Ok(mut cache) = CACHE.lock() {
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(text.to_owned(), Arc::clone(&filter));
    }
    Ok(filter)
}

/// Checks that `text` compiles (for `carte check`).
pub fn check(text: &str) -> Result<(), Invalid> {
    compiled(text).map(|_| ())
}

/// Runs the filter `text` on `input` with at most `steps` steps, taking
/// values within `byte_limit` bytes each way: one output is returned as it
/// is, several (or none) as a list.
pub fn run(text: &str, input: &Value, steps: u64, byte_limit: usize) -> Ran {
    let filter = match compiled(text) {
        Ok(filter) => filter,
        Err(invalid) => {
            return Ran { result: Err(JqError::Invalid(invalid.message)), steps: 0, bytes: 0, spent: false };
        }
    };
    let used = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let spent = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spent_in = Arc::clone(&spent);
    let bytes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (used_in, bytes_in) = (Arc::clone(&used), Arc::clone(&bytes));
    let result = on_jq_thread(move || {
        // The thread is this run's alone: its budget starts here, and it
        // is read back when the run ends, stopped or not.
        jaq_json::budget::set(Some(byte_limit.saturating_mul(BUILT_PER_BYTE)));
        struct ReadBack(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for ReadBack {
            fn drop(&mut self) {
                self.0.store(jaq_json::budget::spent(), std::sync::atomic::Ordering::Relaxed);
            }
        }
        let _read_back = ReadBack(spent_in);
        let mut sizes = Sizes { bytes: 0, limit: byte_limit };
        let converted = to_jaq(input, 0, &mut sizes);
        bytes_in.store(sizes.bytes, std::sync::atomic::Ordering::Relaxed);
        let input = converted.map_err(JqError::TooBig)?;
        let budget = Budget::new(steps, stack_address());
        let meter = Meter { lut: &filter.lut, budget: &budget };
        let ctx = Ctx::<Metered>::new(meter, Vars::new([]));
        let mut outputs = Vec::new();
        let mut failed = None;
        for output in filter.id.run((ctx, input)) {
            match output {
                Ok(value) if outputs.len() < MAX_OUTPUTS => outputs.push(value),
                Ok(_) => {
                    failed = Some(JqError::TooManyOutputs);
                    break;
                }
                Err(_) if jaq_json::budget::spent() => {
                    failed = Some(JqError::TooBig(jaq_json::budget::refusal()));
                    break;
                }
                Err(exn) => {
                    failed = Some(JqError::Raised(match exn.get_err() {
                        // `error("text")` says the text as it is.
                        Ok(err) => match err.into_val() {
                            Val::TStr(text) => String::from_utf8_lossy(&text).into_owned(),
                            other => other.to_string(),
                        },
                        Err(_) => "the filter stopped without an error value".to_owned(),
                    }));
                    break;
                }
            }
        }
        used_in.store(budget.used.get(), std::sync::atomic::Ordering::Relaxed);
        if let Some(message) = failed {
            return Err(message);
        }
        let mut sizes = Sizes { bytes: 0, limit: byte_limit };
        let mut values = Vec::with_capacity(outputs.len());
        for output in &outputs {
            values.push(from_jaq(output, 0, &mut sizes).map_err(JqError::TooBig)?);
        }
        bytes_in.fetch_add(sizes.bytes, std::sync::atomic::Ordering::Relaxed);
        Ok(if values.len() == 1 { values.pop().unwrap_or_default() } else { Value::from(values) })
    });
    // A run stopped midway used its whole budget.
    let out_of_steps = matches!(&result, Err(JqError::OutOfSteps));
    let steps_used = if out_of_steps { steps } else { used.load(std::sync::atomic::Ordering::Relaxed) };
    Ran {
        result,
        steps: steps_used,
        bytes: bytes.load(std::sync::atomic::Ordering::Relaxed),
        spent: out_of_steps || spent.load(std::sync::atomic::Ordering::Relaxed),
    }
}

mod values;

#[cfg(test)]
mod tests;
