//! Fuzzing the rule-file loader, then matching against what it loaded: arbitrary bytes,
//! mutated corpus files, and documents made from the format's grammar (domain, descriptors,
//! key/value, rate_limit and rate_limits with every field, unlimited, shadow_mode, replaces,
//! metadata, nesting; wrong types, huge numbers, duplicate keys, unicode, deep nesting).
//!
//! Never a panic, never a hang; a file that does not load gives errors that each carry the
//! file, a line and a column inside the text, and a message; a file that loads numbers its
//! rules densely, and every descriptor written with exact keys and values is found by exactly
//! the request that names them.
//!
//! `PROPTEST_CASES` sets the number of inputs per target (256 by default; `scripts/fuzz.sh`
//! runs millions in release mode).

#[path = "../../sluicegate/tests/fuzz_harness/mod.rs"]
mod fuzz_harness;

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use fuzz_harness::{accepted, check, fuzz};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sluicegate_rules::{LoadErrors, LoadOptions, RuleSet};

// ---------------------------------------------------------------------------------------------
// A YAML document, rendered as text.

/// A YAML node as the generators build it.
#[derive(Debug, Clone)]
enum Y {
    /// A plain scalar as written (`5`, `true`, `~`, `second`), resolved by YAML's core schema.
    Plain(String),
    /// A double-quoted string: always a string.
    Quoted(String),
    Seq(Vec<Y>),
    Map(Vec<(Y, Y)>),
}

fn plain(text: &str) -> Y {
    Y::Plain(text.to_owned())
}

fn quoted(text: &str) -> Y {
    Y::Quoted(text.to_owned())
}

/// How a document is written: block style down to `flow_from` levels deep, flow style below.
#[derive(Debug, Clone, Copy)]
struct Style {
    flow_from: usize,
    /// Block lists indented under their key (`key:\n  - a`) or not (`key:\n- a`).
    indent_lists: bool,
}

fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || c == '\u{feff}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn flow(y: &Y, out: &mut String) {
    match y {
        Y::Plain(text) => out.push_str(text),
        Y::Quoted(text) => out.push_str(&quote(text)),
        Y::Seq(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                flow(item, out);
            }
            out.push(']');
        }
        Y::Map(entries) => {
            out.push('{');
            for (i, (key, value)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                flow(key, out);
                out.push_str(": ");
                flow(value, out);
            }
            out.push('}');
        }
    }
}

fn is_empty_collection(y: &Y) -> bool {
    matches!(y, Y::Seq(v) if v.is_empty()) || matches!(y, Y::Map(v) if v.is_empty())
}

/// Writes `y` in block style at `indent`, as the value after a key or a dash (`inline`: the
/// first line continues the current one).
fn block(y: &Y, indent: usize, depth: usize, style: Style, out: &mut String) {
    let pad = " ".repeat(indent);
    if depth >= style.flow_from || is_empty_collection(y) || !matches!(y, Y::Seq(_) | Y::Map(_)) {
        flow(y, out);
        out.push('\n');
        return;
    }
    match y {
        Y::Seq(items) => {
            for item in items {
                out.push_str(&pad);
                out.push_str("- ");
                match item {
                    Y::Map(entries) if !entries.is_empty() && depth + 1 < style.flow_from => {
                        // `- key: value` with the other keys under the first.
                        map_entries(entries, indent + 2, depth + 1, style, out, true);
                    }
                    Y::Seq(inner) if !inner.is_empty() && depth + 1 < style.flow_from => {
                        out.push('\n');
                        block(item, indent + 2, depth + 1, style, out);
                    }
                    _ => {
                        flow(item, out);
                        out.push('\n');
                    }
                }
            }
        }
        Y::Map(entries) => map_entries(entries, indent, depth, style, out, false),
        _ => {}
    }
}

fn map_entries(
    entries: &[(Y, Y)],
    indent: usize,
    depth: usize,
    style: Style,
    out: &mut String,
    first_inline: bool,
) {
    let pad = " ".repeat(indent);
    for (i, (key, value)) in entries.iter().enumerate() {
        if i > 0 || !first_inline {
            out.push_str(&pad);
        }
        flow(key, out);
        out.push(':');
        let nested = matches!(value, Y::Seq(_) | Y::Map(_))
            && !is_empty_collection(value)
            && depth + 1 < style.flow_from;
        if !nested {
            out.push(' ');
            flow(value, out);
            out.push('\n');
            continue;
        }
        out.push('\n');
        let inner = match value {
            Y::Seq(_) if !style.indent_lists => indent,
            _ => indent + 2,
        };
        block(value, inner, depth + 1, style, out);
    }
}

fn render(y: &Y, style: Style) -> String {
    let mut out = String::new();
    block(y, 0, 0, style, &mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// Generators from the grammar.

/// Keys and values of descriptors: a few, so that duplicates, wildcards and matches happen.
const WORDS: &[&str] = &[
    "user", "path", "k", "a_b", "x", "v", "x*", "*", "a*b*", "", "é", "ü*z", "1.2.3.4", "_", "k_",
    "key", "value",
];

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(WORDS).prop_map(str::to_owned),
        1 => "\\PC{0,6}",
        1 => "[a-z_*.]{1,4}",
    ]
}

fn number() -> impl Strategy<Value = Y> {
    prop_oneof![
        6 => (0u32..200).prop_map(|n| Y::Plain(n.to_string())),
        1 => prop::sample::select(vec![
            "0", "4294967295", "4294967296", "-1", "-0", "9223372036854775807",
            "9223372036854775808", "99999999999999999999999", "0.5", "1e3", "0x1F", "0o17",
            ".inf", "-.inf", ".nan", "+5", "1_000", "007",
        ])
        .prop_map(plain),
        1 => any::<u64>().prop_map(|n| Y::Plain(n.to_string())),
        1 => (0u32..200).prop_map(|n| Y::Quoted(n.to_string())),
        1 => prop::sample::select(vec!["true", "~", "second", "[]", "{}"]).prop_map(plain),
    ]
}

fn boolean() -> impl Strategy<Value = Y> {
    prop_oneof![
        6 => prop::sample::select(vec!["true", "false"]).prop_map(plain),
        1 => prop::sample::select(vec![
            "True", "FALSE", "yes", "no", "on", "off", "y", "n", "~", "", "1", "maybe",
        ])
        .prop_map(plain),
        1 => prop::sample::select(vec!["true", "yes"]).prop_map(quoted),
    ]
}

/// A scalar or small collection of any kind: wrong types, metadata, junk.
fn any_yaml(depth: u32) -> BoxedStrategy<Y> {
    let leaf = prop_oneof![
        word().prop_map(Y::Quoted),
        number(),
        boolean(),
        Just(plain("~")),
        "[a-z]{1,5}".prop_map(Y::Plain),
    ];
    leaf.prop_recursive(depth, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Y::Seq),
            prop::collection::vec(
                (
                    prop_oneof![4 => word().prop_map(Y::Quoted), 1 => inner.clone()],
                    inner
                ),
                0..3
            )
            .prop_map(Y::Map),
        ]
    })
    .boxed()
}

/// A string field (key, value, name, unit, period, algorithm): mostly strings, some not.
fn text_field(pool: Vec<&'static str>) -> impl Strategy<Value = Y> {
    prop_oneof![
        6 => prop::sample::select(pool.clone()).prop_map(plain),
        3 => prop::sample::select(pool).prop_map(quoted),
        1 => word().prop_map(Y::Quoted),
        1 => number(),
        1 => any_yaml(1),
    ]
}

/// Entries of a map, each present with its weight (out of 100), in a shuffled order; now and
/// then one key twice or a key that does not belong.
fn map_of(
    fields: Vec<(u32, &'static str, BoxedStrategy<Y>)>,
    strangers: Vec<&'static str>,
) -> impl Strategy<Value = Y> {
    let present: Vec<BoxedStrategy<Option<(Y, Y)>>> = fields
        .into_iter()
        .map(|(weight, key, value)| {
            prop::option::weighted(
                f64::from(weight) / 100.0,
                value.prop_map(move |v| (plain(key), v)),
            )
            .boxed()
        })
        .collect();
    let stranger = prop::option::weighted(
        0.04,
        (prop::sample::select(strangers), any_yaml(1)).prop_map(|(k, v)| (plain(k), v)),
    );
    (
        present,
        stranger,
        prop::option::weighted(0.03, any::<prop::sample::Index>()),
    )
        .prop_flat_map(|(present, stranger, twice)| {
            let mut entries: Vec<(Y, Y)> = present.into_iter().flatten().collect();
            entries.extend(stranger);
            if let Some(index) = twice {
                if !entries.is_empty() {
                    let again = entries[index.index(entries.len())].clone();
                    entries.push(again);
                }
            }
            Just(entries).prop_shuffle()
        })
        .prop_map(Y::Map)
}

fn limit_map() -> BoxedStrategy<Y> {
    let units = vec![
        "second",
        "minute",
        "hour",
        "day",
        "week",
        "month",
        "year",
        "SECOND",
        "Minute",
        "fortnight",
        "seconds",
        "",
        "~",
    ];
    let periods = vec![
        "1s",
        "30s",
        "0s",
        "1.5m",
        "250ms",
        "1",
        "0.0000001s",
        "99999999999999999d",
        "soon",
        "-1s",
    ];
    let algorithms = vec![
        "fixed-window",
        "sliding-log",
        "sliding-window",
        "token-bucket",
        "gcra",
        "leaky-bucket",
        "leaky-queue",
        "concurrency",
        "bogus",
        "GCRA",
    ];
    let names = vec!["global", "a", "b", "", "per_user"];
    let replaces = prop_oneof![
        6 => prop::collection::vec(
            map_of(vec![(90, "name", text_field(names.clone()).boxed())], vec!["key", "bogus"]),
            0..3,
        )
        .prop_map(Y::Seq),
        1 => any_yaml(2),
    ];
    map_of(
        vec![
            (70, "unit", text_field(units).boxed()),
            (80, "requests_per_unit", number().boxed()),
            (15, "period", text_field(periods).boxed()),
            (25, "algorithm", text_field(algorithms).boxed()),
            (15, "burst", number().boxed()),
            (10, "buckets", number().boxed()),
            (10, "delay", number().boxed()),
            (10, "unlimited", boolean().boxed()),
            (20, "name", text_field(names).boxed()),
            (10, "replaces", replaces.boxed()),
        ],
        vec!["key", "descriptors", "bogus", "shadow_mode"],
    )
    .boxed()
}

fn descriptor(depth: u32) -> BoxedStrategy<Y> {
    let key_or_value = || {
        prop_oneof![
            10 => word().prop_map(Y::Quoted),
            2 => prop::sample::select(vec!["user", "path", "k", "x*", "5", "true"]).prop_map(plain),
            1 => number(),
            1 => any_yaml(1),
        ]
        .boxed()
    };
    let rate_limit = prop_oneof![
        8 => limit_map(),
        1 => Just(plain("~")),
        1 => any_yaml(1),
    ];
    let rate_limits = prop_oneof![
        6 => prop::collection::vec(limit_map(), 0..3).prop_map(Y::Seq),
        1 => any_yaml(1),
    ];
    let mut fields = vec![
        (90, "key", key_or_value()),
        (60, "value", key_or_value()),
        (55, "rate_limit", rate_limit.boxed()),
        (12, "rate_limits", rate_limits.boxed()),
        (10, "shadow_mode", boolean().boxed()),
        (5, "quota_mode", boolean().boxed()),
        (5, "detailed_metric", boolean().boxed()),
        (5, "value_to_metric", boolean().boxed()),
        (5, "share_threshold", boolean().boxed()),
        (4, "metadata", any_yaml(3)),
    ];
    if depth > 0 {
        let children = prop_oneof![
            8 => prop::collection::vec(descriptor(depth - 1), 0..4).prop_map(Y::Seq),
            1 => any_yaml(1),
        ];
        fields.push((40, "descriptors", children.boxed()));
    }
    map_of(
        fields,
        vec![
            "unit",
            "requests_per_unit",
            "domain",
            "bogus",
            "rate_limitz",
        ],
    )
    .boxed()
}

fn document() -> BoxedStrategy<Y> {
    let domain = prop_oneof![
        10 => prop::sample::select(vec!["edge", "api", "d", "é"]).prop_map(quoted),
        2 => prop::sample::select(vec!["edge", "api", "5", "~", ""]).prop_map(plain),
        1 => word().prop_map(Y::Quoted),
        1 => any_yaml(1),
    ];
    let descriptors = prop_oneof![
        10 => prop::collection::vec(descriptor(3), 0..5).prop_map(Y::Seq),
        1 => any_yaml(2),
    ];
    let root = map_of(
        vec![
            (92, "domain", domain.boxed()),
            (90, "descriptors", descriptors.boxed()),
        ],
        vec!["key", "rate_limit", "bogus", "domains"],
    );
    prop_oneof![20 => root, 1 => any_yaml(2)].boxed()
}

// Clean documents: valid by construction (but for what the pools make collide, such as two
// files of one domain), so that most load and matching is reached with every feature.

fn clean_limit() -> BoxedStrategy<Y> {
    let unit = prop::sample::select(vec![
        "second", "minute", "hour", "day", "week", "month", "year", "SECOND", "Minute",
    ])
    .prop_map(plain);
    let window = prop_oneof![
        3 => unit.prop_map(|u| vec![(plain("unit"), u)]),
        1 => prop::sample::select(vec!["1s", "30s", "1.5m", "250ms", "2", "1us", "7d"])
            .prop_map(|p| vec![(plain("period"), plain(p))]),
    ];
    let rpu = prop_oneof![
        6 => 1u32..100,
        1 => Just(0u32),
        1 => Just(u32::MAX),
    ];
    let count = |low: u64| prop_oneof![4 => low..50, 1 => Just(u64::from(u32::MAX))];
    let algorithm = prop_oneof![
        3 => Just(Vec::new()),
        1 => prop::sample::select(vec!["fixed-window", "sliding-log", "sliding-window"])
            .prop_map(|a| vec![(plain("algorithm"), plain(a))]),
        1 => (1u64..10).prop_map(|b| vec![
            (plain("algorithm"), plain("sliding-window")),
            (plain("buckets"), Y::Plain(b.to_string())),
        ]),
        2 => (prop::sample::select(vec!["token-bucket", "gcra", "leaky-bucket"]), prop::option::of(count(1)))
            .prop_map(|(a, burst)| {
                let mut e = vec![(plain("algorithm"), plain(a))];
                e.extend(burst.map(|b| (plain("burst"), Y::Plain(b.to_string()))));
                e
            }),
        1 => (count(0), prop::option::of(0u64..100)).prop_map(|(burst, delay)| {
            let mut e = vec![
                (plain("algorithm"), plain("leaky-queue")),
                (plain("burst"), Y::Plain(burst.to_string())),
            ];
            e.extend(delay.filter(|d| *d <= burst).map(|d| (plain("delay"), Y::Plain(d.to_string()))));
            e
        }),
    ];
    let name = prop::option::weighted(0.3, prop::sample::select(vec!["a", "b", "per_user"]));
    let replaces = prop::option::weighted(
        0.2,
        Just(Y::Seq(vec![Y::Map(vec![(
            plain("name"),
            quoted("global"),
        )])])),
    );
    (window, rpu, algorithm, name, replaces)
        .prop_flat_map(|(window, rpu, algorithm, name, replaces)| {
            let mut entries = window;
            entries.push((plain("requests_per_unit"), Y::Plain(rpu.to_string())));
            // A bucket of burst 0 for a limit above 0 is refused: give it one.
            let needs_burst = algorithm.iter().any(|(_, v)| {
                matches!(v, Y::Plain(a) if a == "token-bucket" || a == "gcra" || a == "leaky-bucket")
            }) && !algorithm.iter().any(|(k, _)| matches!(k, Y::Plain(b) if b == "burst"));
            entries.extend(algorithm);
            if needs_burst && rpu == 0 {
                entries.push((plain("burst"), plain("1")));
            }
            entries.extend(name.map(|n| (plain("name"), quoted(n))));
            entries.extend(replaces.map(|r| (plain("replaces"), r)));
            Just(entries).prop_shuffle()
        })
        .prop_map(Y::Map)
        .boxed()
}

fn clean_descriptor(depth: u32) -> BoxedStrategy<Y> {
    let key = prop::sample::select(WORDS)
        .prop_filter("a key", |w| !w.is_empty())
        .prop_map(quoted);
    let value = prop::option::weighted(0.7, prop::sample::select(WORDS).prop_map(quoted));
    let rule = prop_oneof![
        2 => Just(Vec::new()),
        5 => clean_limit().prop_map(|l| vec![(plain("rate_limit"), l)]),
        1 => Just(vec![(plain("rate_limit"), Y::Map(vec![(plain("unlimited"), plain("true"))]))]),
        2 => prop::collection::vec(clean_limit(), 1..4).prop_map(|limits| {
            // Names are not shared within one list (a limit cannot replace a sibling, and
            // the pool's names never replace).
            vec![(plain("rate_limits"), Y::Seq(limits))]
        }),
    ];
    let flags = prop::collection::vec(
        (
            prop::sample::select(vec![
                "shadow_mode",
                "quota_mode",
                "detailed_metric",
                "value_to_metric",
            ]),
            any::<bool>(),
        ),
        0..2,
    );
    let children = if depth == 0 {
        Just(None).boxed()
    } else {
        prop::option::weighted(0.4, clean_descriptors(depth - 1)).boxed()
    };
    let metadata = prop::option::weighted(
        0.05,
        any_yaml(2).prop_map(|m| Y::Map(vec![(plain("m"), m)])),
    );
    (key, value, rule, flags, children, metadata)
        .prop_flat_map(|(key, value, rule, flags, children, metadata)| {
            let mut entries = vec![(plain("key"), key)];
            entries.extend(value.map(|v| (plain("value"), v)));
            entries.extend(rule);
            let mut seen = HashSet::new();
            for (flag, on) in flags {
                if seen.insert(flag) {
                    entries.push((plain(flag), Y::Plain(on.to_string())));
                }
            }
            entries.extend(children.map(|c| (plain("descriptors"), c)));
            entries.extend(metadata.map(|m| (plain("metadata"), m)));
            Just(entries).prop_shuffle()
        })
        .prop_map(Y::Map)
        .boxed()
}

/// Sibling descriptors, each (key, value) once.
fn clean_descriptors(depth: u32) -> BoxedStrategy<Y> {
    prop::collection::vec(clean_descriptor(depth), 0..5)
        .prop_map(|items| {
            let mut seen = HashSet::new();
            let composite = |item: &Y| -> String {
                let Y::Map(entries) = item else {
                    return String::new();
                };
                let text = |name| match field(entries, name) {
                    Some(Y::Quoted(t)) => t.clone(),
                    _ => String::new(),
                };
                let (key, value) = (text("key"), text("value"));
                if value.is_empty() {
                    key
                } else {
                    format!("{key}_{value}")
                }
            };
            Y::Seq(
                items
                    .into_iter()
                    .filter(|item| seen.insert(composite(item)))
                    .collect(),
            )
        })
        .boxed()
}

fn clean_document() -> BoxedStrategy<Y> {
    (
        prop::sample::select(vec!["edge", "api", "d", "é"]),
        clean_descriptors(3),
    )
        .prop_map(|(domain, descriptors)| {
            Y::Map(vec![
                (plain("domain"), quoted(domain)),
                (plain("descriptors"), descriptors),
            ])
        })
        .boxed()
}

/// Deeply nested documents, in the shapes YAML allows without indentation growing
/// quadratically (flow collections, `- - -` on one line) and in block descriptors.
fn deep_document() -> impl Strategy<Value = String> {
    prop_oneof![
        // Descriptors nested `depth` levels, each with a limit.
        (1usize..120).prop_map(|depth| {
            let mut text = String::from("domain: deep\ndescriptors:\n");
            for level in 0..depth {
                let pad = "  ".repeat(2 * level);
                let _ = write!(
                    text,
                    "{pad}- key: k{level}\n{pad}  rate_limit: {{unit: second, requests_per_unit: 1}}\n{pad}  descriptors:\n"
                );
            }
            text
        }),
        // A list of lists, `- - - ... x`, as metadata and as descriptors.
        (1usize..20_000, any::<bool>()).prop_map(|(depth, metadata)| {
            let dashes = "- ".repeat(depth);
            if metadata {
                format!("domain: d\ndescriptors:\n  - key: k\n    metadata:\n      m:\n        {dashes}x\n")
            } else {
                format!("domain: d\ndescriptors:\n  {dashes}x\n")
            }
        }),
        // Flow nesting past the parser's limit.
        (1usize..400, any::<bool>()).prop_map(|(depth, map)| {
            let (open, close) = if map { ("{a: ", "}") } else { ("[", "]") };
            format!("domain: d\ndescriptors: {}x{}\n", open.repeat(depth), close.repeat(depth))
        }),
        // Mapping keys nested in one line, `a: b: c:` (not YAML) and `? ` complex keys.
        (1usize..2_000).prop_map(|depth| format!("domain: d\n{}x\n", "a: ".repeat(depth))),
        (1usize..2_000).prop_map(|depth| format!("domain: d\n{}x\n", "? ".repeat(depth))),
    ]
}

/// Byte-level damage to a text: (where, what) pairs applied in order.
fn damage() -> impl Strategy<Value = Vec<(prop::sample::Index, u8, char)>> {
    prop::collection::vec(
        (
            any::<prop::sample::Index>(),
            0u8..6,
            prop::sample::select(vec![
                ' ', '\t', '\n', ':', '-', '#', '"', '\'', '{', '}', '[', ']', '&', '*', '!', '|',
                '>', '%', '@', '\r', '\u{0}', '\u{feff}', 'é', '\u{2028}', '?', ',',
            ]),
        ),
        0..4,
    )
}

fn apply_damage(text: &str, damage: &[(prop::sample::Index, u8, char)]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for (at, what, c) in damage {
        let len = chars.len();
        let i = at.index(len + 1);
        match what {
            0 => chars.insert(i, *c),
            1 if i < len => {
                chars.remove(i);
            }
            2 if i < len => chars[i] = *c,
            // Duplicate the line around `i`.
            3 => {
                let start = chars[..i]
                    .iter()
                    .rposition(|&c| c == '\n')
                    .map_or(0, |p| p + 1);
                let end = chars[i..]
                    .iter()
                    .position(|&c| c == '\n')
                    .map_or(len, |p| i + p + 1);
                let line: Vec<char> = chars[start..end].to_vec();
                chars.splice(end..end, line);
            }
            4 => chars.truncate(i),
            // Indent the line around `i` by one more space.
            _ => {
                let start = chars[..i]
                    .iter()
                    .rposition(|&c| c == '\n')
                    .map_or(0, |p| p + 1);
                chars.insert(start, ' ');
            }
        }
    }
    chars.into_iter().collect()
}

fn style() -> impl Strategy<Value = Style> {
    (
        prop_oneof![4 => Just(usize::MAX), 1 => 0usize..8],
        any::<bool>(),
    )
        .prop_map(|(flow_from, indent_lists)| Style {
            flow_from,
            indent_lists,
        })
}

// ---------------------------------------------------------------------------------------------
// Properties.

/// What loading `sources` must give, whatever the texts: errors with file, line and column
/// inside the text and a message, or a consistent rule set. Returns the set when it loaded.
fn load_and_check(
    sources: &[(PathBuf, String)],
    options: &LoadOptions,
) -> Result<Option<RuleSet>, TestCaseError> {
    match RuleSet::from_sources(sources, options) {
        Ok(set) => {
            accepted();
            check_set(&set, sources)?;
            Ok(Some(set))
        }
        Err(errors) => {
            check_errors(&errors, sources)?;
            Ok(None)
        }
    }
}

/// The lines a position may name in `text`: its lines, and the one after a final newline.
fn lines_in(text: &str) -> usize {
    text.split(['\n', '\r']).count().max(1) + 1
}

fn check_errors(errors: &LoadErrors, sources: &[(PathBuf, String)]) -> Result<(), TestCaseError> {
    check(!errors.errors().is_empty(), || {
        "an Err with no errors".to_owned()
    })?;
    for error in errors.errors() {
        let text = error.to_string();
        let source = sources.iter().find(|(file, _)| *file == error.file);
        let Some((file, content)) = source else {
            return Err(TestCaseError::fail(format!("{text}: names no source file")));
        };
        let Some(position) = error.position else {
            return Err(TestCaseError::fail(format!("{text}: no line and column")));
        };
        check(
            position.line >= 1 && position.column >= 1 && position.line <= lines_in(content),
            || {
                format!(
                    "{text}: position {position} outside the text of {} lines",
                    lines_in(content) - 1
                )
            },
        )?;
        let prefix = format!("{}:{}:{}: ", file.display(), position.line, position.column);
        check(text.starts_with(&prefix), || {
            format!("{text:?} does not start with {prefix:?}")
        })?;
        check(!text[prefix.len()..].trim().is_empty(), || {
            format!("{text:?}: no message")
        })?;
        check(
            !text.contains("unwrap") && !text.contains("panicked"),
            || format!("{text:?}: an internal error, not a message about the file"),
        )?;
    }
    Ok(())
}

fn check_set(set: &RuleSet, sources: &[(PathBuf, String)]) -> Result<(), TestCaseError> {
    let mut indices = HashSet::new();
    for domain in set.domains() {
        check(!domain.is_empty(), || "an empty domain loaded".to_owned())?;
        for rule in set.rules(domain) {
            check(rule.id.starts_with(&format!("{domain}.")), || {
                format!("rule {} in domain {domain}", rule.id)
            })?;
            check(
                rule.index() < set.rule_count() && indices.insert(rule.index()),
                || {
                    format!(
                        "rule {} has index {} of {}",
                        rule.id,
                        rule.index(),
                        set.rule_count()
                    )
                },
            )?;
            check(rule.unlimited == rule.limits.is_empty(), || {
                format!(
                    "rule {}: unlimited {} with {} limits",
                    rule.id,
                    rule.unlimited,
                    rule.limits.len()
                )
            })?;
            check(
                sources.iter().any(|(file, _)| *file == rule.source.file),
                || format!("rule {} from an unknown file", rule.id),
            )?;
            for limit in &rule.limits {
                check(!limit.window.duration().is_zero(), || {
                    format!("rule {}: zero window", rule.id)
                })?;
            }
        }
    }
    check(indices.len() == set.rule_count(), || {
        format!(
            "{} rules numbered, rule_count {}",
            indices.len(),
            set.rule_count()
        )
    })?;
    for warning in set.warnings() {
        check(warning.position.is_some(), || {
            format!("warning {warning} has no position")
        })?;
    }
    let _ = set.to_string();
    let json = serde_json::to_value(set).map_err(|e| TestCaseError::fail(e.to_string()))?;
    check(
        json.as_array().map(Vec::len) == Some(set.domains().count()),
        || format!("the JSON dump has not one entry per domain: {json}"),
    )?;
    Ok(())
}

/// The text of a key or value as the loader reads it, for the quoted strings the oracle uses.
fn quoted_text(y: Option<&Y>) -> Option<&str> {
    match y {
        Some(Y::Quoted(text)) => Some(text),
        _ => None,
    }
}

fn field<'y>(entries: &'y [(Y, Y)], name: &str) -> Option<&'y Y> {
    entries
        .iter()
        .find(|(k, _)| matches!(k, Y::Plain(key) if key == name))
        .map(|(_, v)| v)
}

/// A descriptor the oracle knows: the request's entries, the rule id, whether it has a rule.
type Exact = (Vec<(String, String)>, String, bool);

/// Every descriptor of a loaded document whose keys and values down from the top are quoted,
/// non-empty strings: its request entries, its rule id, and whether it has a rule.
fn exact_descriptors(doc: &Y) -> Option<(String, Vec<Exact>)> {
    let Y::Map(root) = doc else { return None };
    let domain = quoted_text(field(root, "domain"))?.to_owned();
    let mut found = Vec::new();
    if let Some(Y::Seq(items)) = field(root, "descriptors") {
        collect(items, &[], &domain, &mut found);
    }
    Some((domain, found))
}

fn collect(items: &[Y], path: &[(String, String)], id: &str, found: &mut Vec<Exact>) {
    for item in items {
        let Y::Map(entries) = item else { continue };
        let (Some(key), Some(value)) = (
            quoted_text(field(entries, "key")),
            quoted_text(field(entries, "value")),
        ) else {
            continue;
        };
        if key.is_empty() || value.is_empty() {
            continue;
        }
        let mut path = path.to_vec();
        path.push((key.to_owned(), value.to_owned()));
        let id = format!("{id}.{key}_{value}");
        let has_rule = matches!(field(entries, "rate_limit"), Some(Y::Map(_)))
            || field(entries, "rate_limits").is_some();
        found.push((path.clone(), id.clone(), has_rule));
        if let Some(Y::Seq(children)) = field(entries, "descriptors") {
            collect(children, &path, &id, found);
        }
    }
}

/// Matching on a loaded set: the oracle for exact descriptors, and invariants for any request.
fn check_matching(
    set: &RuleSet,
    doc: Option<&Y>,
    requests: &[Vec<(String, String)>],
) -> Result<(), TestCaseError> {
    if let Some((domain, exact)) = doc.and_then(exact_descriptors) {
        for (path, id, has_rule) in exact {
            let entries: Vec<(&str, &str)> =
                path.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let found = set.find(&domain, &entries);
            check(
                found.as_ref().map(|m| m.rule.id.as_str()) == has_rule.then_some(id.as_str()),
                || {
                    format!(
                        "{entries:?} in {domain}: expected {}, found {:?}",
                        if has_rule { id.as_str() } else { "no rule" },
                        found.as_ref().map(|m| &m.rule.id)
                    )
                },
            )?;
            let one = set.find_one(&domain, &entries);
            check(
                one.as_ref().map(|m| (&m.rule.id, &m.limits))
                    == found.as_ref().map(|m| (&m.rule.id, &m.limits)),
                || format!("{entries:?}: find_one differs from find"),
            )?;
        }
    }
    let domains: Vec<String> = set
        .domains()
        .map(str::to_owned)
        .chain(["nope".to_owned()])
        .collect();
    for domain in &domains {
        let refs: Vec<Vec<(&str, &str)>> = requests
            .iter()
            .map(|r| r.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())
            .collect();
        let slices: Vec<&[(&str, &str)]> = refs.iter().map(Vec::as_slice).collect();
        let all = set.find_all(domain, &slices);
        check(all.len() == slices.len(), || {
            "find_all: not one answer per descriptor".to_owned()
        })?;
        let rules = set.rules(domain);
        for (entries, answer) in slices.iter().zip(&all) {
            let alone = set.find(domain, entries);
            if let Some(m) = answer {
                check(rules.iter().any(|r| r.id == m.rule.id), || {
                    format!("{entries:?}: matched {} outside domain {domain}", m.rule.id)
                })?;
                check(
                    alone.as_ref().is_some_and(|a| a.rule.id == m.rule.id),
                    || {
                        format!(
                            "{entries:?}: find_all found {}, find {:?}",
                            m.rule.id,
                            alone.as_ref().map(|a| &a.rule.id)
                        )
                    },
                )?;
                check(m.limits.iter().all(|l| m.rule.limits.contains(l)), || {
                    format!("{entries:?}: limits not of the rule {}", m.rule.id)
                })?;
                check(!m.limits.is_empty() || m.rule.unlimited, || {
                    format!("{entries:?}: a match with no limit left")
                })?;
                check(
                    m.counter_key.starts_with(&format!("{domain}_"))
                        && m.counter_key.ends_with('_'),
                    || format!("{entries:?}: counter key {:?}", m.counter_key),
                )?;
                check(m.stats_key.starts_with(domain.as_str()), || {
                    format!("{entries:?}: stats key {:?}", m.stats_key)
                })?;
            }
        }
    }
    Ok(())
}

fn request() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec((word(), word()), 0..5)
}

fn source_name(i: usize) -> PathBuf {
    PathBuf::from(format!("rules-{i}.yaml"))
}

/// The seeds for mutation: the shared corpus of envoyproxy/ratelimit files when it is there,
/// and the project's example rules.
fn seeds() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in [
        root.join("../../../shared/envoy-configs"),
        root.join("../../examples/rules"),
    ] {
        collect_yaml(&dir, &mut files);
    }
    files.sort();
    let texts: Vec<String> = files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .collect();
    assert!(
        !texts.is_empty(),
        "no seed rule files found (examples/rules)"
    );
    texts
}

fn collect_yaml(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_yaml(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

#[test]
fn fuzz_rules_arbitrary_bytes() {
    let bytes = prop_oneof![
        any::<Vec<u8>>(),
        "[ \\n\\t:{}\\[\\],'\"#&*!|>%@`a-z0-9_.~?-]{0,200}".prop_map(String::into_bytes),
    ];
    fuzz(
        "rules_arbitrary_bytes",
        (bytes, request()),
        |(bytes, request)| {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let sources = [(source_name(0), text)];
            if let Some(set) = load_and_check(&sources, &LoadOptions::default())? {
                check_matching(&set, None, &[request])?;
            }
            Ok(())
        },
    );
}

#[test]
fn fuzz_rules_mutated_corpus() {
    let seeds = seeds();
    let case = (
        prop::sample::select(seeds),
        damage(),
        prop::collection::vec(request(), 1..3),
    );
    fuzz("rules_mutated_corpus", case, |(seed, damage, requests)| {
        let sources = [(source_name(0), apply_damage(&seed, &damage))];
        if let Some(set) = load_and_check(&sources, &LoadOptions::default())? {
            check_matching(&set, None, &requests)?;
        }
        Ok(())
    });
}

#[test]
fn fuzz_rules_from_the_grammar() {
    let case = (
        prop::collection::vec((prop_oneof![document(), clean_document()], style()), 1..3),
        any::<bool>(),
        prop_oneof![6 => Just(Vec::new()), 1 => damage()],
        prop::collection::vec(request(), 0..3),
    );
    fuzz(
        "rules_from_the_grammar",
        case,
        |(docs, merge, damage, requests)| {
            let mut sources: Vec<(PathBuf, String)> = docs
                .iter()
                .enumerate()
                .map(|(i, (doc, style))| (source_name(i), render(doc, *style)))
                .collect();
            if let Some((_, first)) = sources.first_mut() {
                *first = apply_damage(first, &damage);
            }
            let options = LoadOptions::default().merge_domains(merge);
            let Some(set) = load_and_check(&sources, &options)? else {
                return Ok(());
            };
            // The oracle knows one document's descriptors exactly, undamaged.
            let doc = (docs.len() == 1 && damage.is_empty()).then(|| &docs[0].0);
            // Requests made of the document's own keys and values reach past the first level.
            let mut requests = requests;
            if let Some((_, exact)) = doc.and_then(exact_descriptors) {
                requests.extend(exact.into_iter().map(|(path, _, _)| path));
            }
            check_matching(&set, doc, &requests)
        },
    );
}

#[test]
fn fuzz_rules_deep_nesting() {
    fuzz("rules_deep_nesting", deep_document(), |text| {
        let sources = [(source_name(0), text)];
        load_and_check(&sources, &LoadOptions::default()).map(drop)
    });
}

// Inputs the fuzzer found, kept as regular tests.

/// A line of `- - - ...` nests lists as deep as it is long: the parser's recursive loader
/// overflowed the stack (an abort, not even a panic). Deep nesting is now an error with its
/// place, and nesting within the bound still loads.
#[test]
fn regression_deep_nesting_is_an_error_not_a_stack_overflow() {
    for text in [
        format!("domain: d\ndescriptors:\n  {}x\n", "- ".repeat(20_000)),
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    metadata:\n      m:\n        {}x\n",
            "- ".repeat(5_000)
        ),
        format!("{}x\n", "? ".repeat(20_000)),
    ] {
        let errors =
            RuleSet::from_sources(&[(source_name(0), text.clone())], &LoadOptions::default())
                .expect_err("too deep");
        let message = errors.to_string();
        assert!(
            message.contains("nested more than 256 levels deep"),
            "{message}"
        );
        assert!(
            errors.errors().iter().all(|e| e.position.is_some()),
            "{message}"
        );
    }
    let shallow = format!(
        "domain: d\ndescriptors:\n  - key: k\n    metadata:\n      m:\n        {}x\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n",
        "- ".repeat(200)
    );
    let set = RuleSet::from_sources(&[(source_name(0), shallow)], &LoadOptions::default())
        .expect("within the bound");
    assert_eq!(set.rule_count(), 1);
}
