//! Fuzzing what clients send: the `POST /json` body and the gRPC `RateLimitRequest`, as
//! arbitrary bytes and as structures near the real schema (numbers as strings, negative,
//! huge, wrong types, unknown and repeated fields, deep nesting), read into a call and
//! answered by a real in-memory engine on the example rules; then a few of each over real
//! HTTP and a real tonic client on loopback.
//!
//! Never a panic, never a hang. A request that cannot be answered is an error that says what
//! is wrong (never serde's "did not match any variant"), with its place in the body; one that
//! can is answered with one status per descriptor, consistent with the rule each matched, the
//! same over JSON and gRPC.
//!
//! `PROPTEST_CASES` sets the number of inputs per in-process target (256 by default;
//! `scripts/fuzz.sh` runs millions in release mode); `SLUICEGATE_FUZZ_SLOW_CASES` the
//! number per loopback target (32 by default).

#[path = "../../sluicegate/tests/fuzz_harness/mod.rs"]
mod fuzz_harness;
mod loopback;

use std::cell::RefCell;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use fuzz_harness::{accepted, check, fuzz, fuzz_with};
use loopback::Service;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use prost::Message;
use sluicegate_rules::{LoadOptions, RuleSet};
use sluicegate_server::serve::{
    CallError, CallVerdict, Code, EngineOptions, EnvoyUnit, HeaderOptions, LegacyHeaderNames,
    Metrics, RateLimitCall, call_from_json, call_from_proto, verdict_to_json, verdict_to_proto,
};
use sluicegate_server::serve::{CallLimits, Engine, MAX_BODY_BYTES};

// ---------------------------------------------------------------------------------------------
// The engine.

fn example_rules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/rules")
}

fn engine_options() -> EngineOptions {
    EngineOptions {
        headers: HeaderOptions {
            legacy: Some(LegacyHeaderNames::default()),
            ..HeaderOptions::default()
        },
        ..EngineOptions::default()
    }
}

fn new_engine() -> Arc<Engine> {
    let rules =
        RuleSet::load(&example_rules(), &LoadOptions::default()).expect("the example rules load");
    Arc::new(
        Engine::new(rules, engine_options(), Arc::new(Metrics::new()))
            .expect("an engine on the example rules"),
    )
}

/// An engine answering on a current-thread runtime, made afresh every 100 calls: the
/// fuzzer's keys, domains and overrides are all new, and an engine keeps what it met.
struct Answerer {
    runtime: tokio::runtime::Runtime,
    engine: RefCell<(u32, Arc<Engine>)>,
}

impl Answerer {
    fn new() -> Answerer {
        Answerer {
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime"),
            engine: RefCell::new((0, new_engine())),
        }
    }

    /// Answers `call`, checking the verdict.
    fn answer(&self, call: &RateLimitCall) -> Result<CallVerdict, TestCaseError> {
        let engine = {
            let mut slot = self.engine.borrow_mut();
            slot.0 += 1;
            // Often enough that no engine meets its cap of distinct overrides (1024), where
            // a new one is no longer applied and the oracle below would not know why.
            if slot.0 >= 100 {
                *slot = (0, new_engine());
            }
            Arc::clone(&slot.1)
        };
        let verdict = self.runtime.block_on(engine.should_rate_limit(call));
        check_verdict(&engine, call, &verdict)?;
        accepted();
        Ok(verdict)
    }
}

/// What any answer must be: one status per descriptor, each consistent with the rule (or
/// override) the descriptor names, the overall code their sum, and both wire forms whole.
fn check_verdict(
    engine: &Engine,
    call: &RateLimitCall,
    verdict: &CallVerdict,
) -> Result<(), TestCaseError> {
    check(verdict.statuses.len() == call.descriptors.len(), || {
        format!(
            "{} statuses for {} descriptors",
            verdict.statuses.len(),
            call.descriptors.len()
        )
    })?;
    let any_over = verdict.statuses.iter().any(|s| s.code == Code::OverLimit);
    check((verdict.overall == Code::OverLimit) == any_over, || {
        format!(
            "overall {:?} with statuses {:?}",
            verdict.overall, verdict.statuses
        )
    })?;
    let loaded = engine.rules();
    let entries: Vec<Vec<(&str, &str)>> = call
        .descriptors
        .iter()
        .map(|d| {
            d.entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect()
        })
        .collect();
    let slices: Vec<&[(&str, &str)]> = entries.iter().map(Vec::as_slice).collect();
    let matches = loaded.rules.find_all(&call.domain, &slices);
    for ((descriptor, status), found) in
        call.descriptors.iter().zip(&verdict.statuses).zip(&matches)
    {
        let limit = status.current_limit.as_ref();
        let known_domain = loaded.rules.has_domain(&call.domain);
        match (descriptor.limit_override, found) {
            // An override in a domain the rules do not name is ignored, as upstream.
            (Some(o), _) if !known_domain => check(limit.is_none(), || {
                format!("override {o:?} in unknown domain answered with {limit:?}")
            })?,
            (Some(o), _) => check(
                limit.is_some_and(|l| {
                    l.requests_per_unit == o.requests_per_unit && l.unit == o.unit
                }),
                || format!("override {o:?} answered with {limit:?}"),
            )?,
            (None, Some(m)) if !m.rule.unlimited => check(
                limit.is_some_and(|l| {
                    m.limits
                        .iter()
                        .any(|r| r.requests_per_unit == l.requests_per_unit)
                }),
                || format!("rule {} answered with {limit:?}", m.rule.id),
            )?,
            (None, _) => check(limit.is_none() && status.code == Code::Ok, || {
                format!(
                    "{:?}: no limit applies, answered {status:?}",
                    descriptor.entries
                )
            })?,
        }
        if status.code == Code::OverLimit {
            check(status.duration_until_reset.is_some(), || {
                format!("over limit without a reset: {status:?}")
            })?;
        }
    }
    let has = |name: &str| verdict.headers.iter().any(|(k, _)| k == name);
    if verdict.statuses.iter().any(|s| s.current_limit.is_some()) {
        check(
            has("RateLimit") && has("RateLimit-Policy") && has("X-RateLimit-Limit"),
            || format!("a limit applied, headers {:?}", verdict.headers),
        )?;
    }
    check(!any_over || has("Retry-After"), || {
        format!("over the limit, headers {:?}", verdict.headers)
    })?;
    let json = verdict_to_json(verdict);
    let overall = json["overallCode"].as_str();
    check(
        overall == Some(if any_over { "OVER_LIMIT" } else { "OK" }),
        || format!("JSON answer {json}"),
    )?;
    check(
        json["statuses"].as_array().map(Vec::len) == Some(call.descriptors.len()),
        || format!("JSON answer {json}"),
    )?;
    let proto = verdict_to_proto(verdict.clone());
    let bytes = proto.encode_to_vec();
    let decoded = RateLimitResponse::decode(bytes.as_slice());
    check(decoded.as_ref() == Ok(&proto), || {
        format!("the answer does not decode back: {decoded:?}")
    })?;
    Ok(())
}

/// An error names what is wrong: our own messages name the descriptor, serde's the place in
/// the body; none is serde's message for an untagged enum, which names nothing.
fn check_call_error(err: &CallError, input: &dyn std::fmt::Debug) -> Result<(), TestCaseError> {
    let message = err.to_string();
    check(!message.trim().is_empty(), || {
        format!("an empty error for {input:?}")
    })?;
    check(
        !message.contains("did not match any variant") && !message.contains("untagged"),
        || format!("{message:?} does not say what is wrong, for {input:?}"),
    )?;
    if let CallError::Malformed(detail) = err {
        check(
            detail.starts_with("descriptor ")
                || (detail.contains(" line ") && detail.contains(" column ")),
            || format!("{message:?} says neither which descriptor nor where, for {input:?}"),
        )?;
    }
    Ok(())
}

/// What a call read from either transport must be.
fn check_call(call: &RateLimitCall) -> Result<(), TestCaseError> {
    check(call.validate().is_ok(), || {
        format!("an invalid call was read: {call:?}")
    })
}

// ---------------------------------------------------------------------------------------------
// JSON near the schema.

/// A JSON value with numbers as written and keys in order, repeats allowed.
#[derive(Debug, Clone)]
enum J {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

fn write_json(j: &J, out: &mut String) {
    match j {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Num(n) => out.push_str(n),
        J::Str(s) => out.push_str(&serde_json::to_string(s).unwrap_or_default()),
        J::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(item, out);
            }
            out.push(']');
        }
        J::Obj(entries) => {
            out.push('{');
            for (i, (key, value)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{}:", serde_json::to_string(key).unwrap_or_default());
                write_json(value, out);
            }
            out.push('}');
        }
    }
}

fn json_text(j: &J) -> String {
    let mut out = String::new();
    write_json(j, &mut out);
    out
}

/// Keys and values the example rules name, and a few strangers.
fn entry_word() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(vec![
            "user", "path", "plan", "remote_address", "generic_key", "user_agent", "healthcheck",
            "/export", "pro", "all", "BadBot/2.1", "BadBot", "203.0.113.7", "u1", "",
        ])
        .prop_map(str::to_owned),
        1 => "\\PC{0,8}",
    ]
}

fn domain_word() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(vec!["edge", "api", "", "nope"]).prop_map(str::to_owned),
        1 => "\\PC{0,6}",
    ]
}

fn json_number() -> impl Strategy<Value = J> {
    let raw = prop_oneof![
        6 => (0u64..40).prop_map(|n| n.to_string()),
        1 => any::<u64>().prop_map(|n| n.to_string()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        2 => prop::sample::select(vec![
            "0", "-1", "-0", "1.5", "1e3", "1e400", "-1e400", "18446744073709551615",
            "18446744073709551616", "4294967295", "4294967296", "2147483648", "-2147483649",
            "99999999999999999999999", "0.0", "7E0",
        ])
        .prop_map(str::to_owned),
    ];
    prop_oneof![
        6 => raw.clone().prop_map(J::Num),
        3 => raw.clone().prop_map(J::Str),
        1 => raw.clone().prop_map(|n| J::Obj(vec![("value".into(), J::Num(n))])),
        1 => raw.prop_map(|n| J::Obj(vec![("value".into(), J::Obj(vec![("value".into(), J::Str(n))]))])),
        1 => Just(J::Null),
        1 => prop::sample::select(vec!["x", " 5", "5 ", "+5", "0x10", ""]).prop_map(|s| J::Str(s.into())),
        1 => any::<bool>().prop_map(J::Bool),
        1 => Just(J::Arr(vec![J::Num("1".into())])),
        1 => Just(J::Obj(vec![])),
        1 => Just(J::Obj(vec![("value".into(), J::Num("1".into())), ("other".into(), J::Null)])),
    ]
}

/// A scalar or small collection of any kind, for wrong types.
fn json_junk() -> BoxedStrategy<J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        json_number(),
        "\\PC{0,6}".prop_map(J::Str),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(J::Arr),
            prop::collection::vec(("[a-z]{1,5}", inner), 0..3).prop_map(J::Obj),
        ]
    })
    .boxed()
}

/// An object: each field present with its weight (of 100) under one of its spellings; now
/// and then a stranger, or a field twice.
fn json_object(fields: Vec<(u32, Vec<&'static str>, BoxedStrategy<J>)>) -> BoxedStrategy<J> {
    let present: Vec<BoxedStrategy<Option<(String, J)>>> = fields
        .into_iter()
        .map(|(weight, names, value)| {
            prop::option::weighted(
                f64::from(weight) / 100.0,
                (prop::sample::select(names), value).prop_map(|(n, v)| (n.to_owned(), v)),
            )
            .boxed()
        })
        .collect();
    let stranger = prop::option::weighted(0.03, ("[a-zA-Z_]{1,8}", json_junk()));
    (
        present,
        stranger,
        prop::option::weighted(0.03, any::<prop::sample::Index>()),
    )
        .prop_flat_map(|(present, stranger, twice)| {
            let mut entries: Vec<(String, J)> = present.into_iter().flatten().collect();
            entries.extend(stranger);
            if let Some(i) = twice {
                if !entries.is_empty() {
                    let again = entries[i.index(entries.len())].clone();
                    entries.push(again);
                }
            }
            Just(entries).prop_shuffle()
        })
        .prop_map(J::Obj)
        .boxed()
}

fn wrong_sometimes(right: BoxedStrategy<J>) -> BoxedStrategy<J> {
    prop_oneof![12 => right, 1 => json_junk()].boxed()
}

fn json_request() -> BoxedStrategy<J> {
    let entry = json_object(vec![
        (
            95,
            vec!["key"],
            wrong_sometimes(entry_word().prop_map(J::Str).boxed()),
        ),
        (
            80,
            vec!["value"],
            wrong_sometimes(entry_word().prop_map(J::Str).boxed()),
        ),
    ]);
    let unit = prop_oneof![
        6 => prop::sample::select(vec!["SECOND", "second", "Minute", "HOUR", "day", "WEEK", "month", "YEAR", "UNKNOWN", "fortnight", ""])
            .prop_map(|u| J::Str(u.into())),
        3 => (-2i64..10).prop_map(|n| J::Num(n.to_string())),
        1 => prop::sample::select(vec!["2147483648", "-2147483649", "1.0", "1e1"]).prop_map(|n| J::Num(n.into())),
        1 => json_junk(),
    ];
    let limit = json_object(vec![
        (
            85,
            vec!["requestsPerUnit", "requests_per_unit"],
            json_number().boxed(),
        ),
        (90, vec!["unit"], unit.boxed()),
    ]);
    let descriptor = json_object(vec![
        (
            92,
            vec!["entries"],
            wrong_sometimes(prop::collection::vec(entry, 0..4).prop_map(J::Arr).boxed()),
        ),
        (15, vec!["limit"], wrong_sometimes(limit)),
        (20, vec!["hitsAddend", "hits_addend"], json_number().boxed()),
        (
            5,
            vec!["isNegativeHits", "is_negative_hits"],
            wrong_sometimes(any::<bool>().prop_map(J::Bool).boxed()),
        ),
    ]);
    json_object(vec![
        (
            92,
            vec!["domain"],
            wrong_sometimes(domain_word().prop_map(J::Str).boxed()),
        ),
        (
            92,
            vec!["descriptors"],
            wrong_sometimes(
                prop::collection::vec(descriptor, 0..4)
                    .prop_map(J::Arr)
                    .boxed(),
            ),
        ),
        (25, vec!["hitsAddend", "hits_addend"], json_number().boxed()),
    ])
}

/// Deep nesting: a request field wrapped in arrays or `{"value": ...}` many levels deep.
fn json_deep() -> impl Strategy<Value = String> {
    (1usize..2000, 0u8..3).prop_map(|(depth, how)| match how {
        0 => format!(
            r#"{{"domain":"d","descriptors":{}{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        ),
        1 => format!(
            r#"{{"domain":"d","hitsAddend":{}1{}}}"#,
            r#"{"value":"#.repeat(depth),
            "}".repeat(depth)
        ),
        _ => format!("{}{}", "[".repeat(depth), "]".repeat(depth)),
    })
}

/// Reads a JSON body; checks the call or the error.
fn read_json(body: &[u8]) -> Result<Option<RateLimitCall>, TestCaseError> {
    match call_from_json(body) {
        Ok(call) => {
            check_call(&call)?;
            Ok(Some(call))
        }
        Err(err) => {
            check_call_error(&err, &String::from_utf8_lossy(body))?;
            Ok(None)
        }
    }
}

#[test]
fn fuzz_json_arbitrary_bytes() {
    let answerer = Answerer::new();
    let bytes = prop_oneof![
        any::<Vec<u8>>(),
        "[\\[\\]{}:,\" 0-9a-zA-Z_.eE+-]{0,120}".prop_map(String::into_bytes),
        (
            json_request(),
            prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)
        )
            .prop_map(|(request, damage)| {
                let mut bytes = json_text(&request).into_bytes();
                for (at, byte) in damage {
                    let i = at.index(bytes.len() + 1);
                    if i < bytes.len() && byte % 2 == 0 {
                        bytes[i] = byte;
                    } else {
                        bytes.insert(i, byte);
                    }
                }
                bytes
            }),
    ];
    fuzz("json_arbitrary_bytes", bytes, |body| {
        if let Some(call) = read_json(&body)? {
            answerer.answer(&call)?;
        }
        Ok(())
    });
}

#[test]
fn fuzz_json_near_the_schema() {
    let answerer = Answerer::new();
    let body = prop_oneof![
        8 => json_request().prop_map(|j| json_text(&j)),
        4 => (valid_proto_request(), any::<u8>()).prop_map(|(r, spelling)| as_json(&r, spelling)),
        1 => json_deep(),
    ];
    fuzz("json_near_the_schema", body, |body| {
        if let Some(call) = read_json(body.as_bytes())? {
            answerer.answer(&call)?;
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// gRPC requests.

fn proto_request() -> impl Strategy<Value = RateLimitRequest> {
    let entry = (entry_word(), entry_word()).prop_map(|(key, value)| Entry { key, value });
    let limit = (
        prop_oneof![4 => 0u32..50, 1 => any::<u32>()],
        prop_oneof![6 => 0i32..8, 1 => any::<i32>(), 1 => Just(-1)],
    )
        .prop_map(|(requests_per_unit, unit)| RateLimitOverride {
            requests_per_unit,
            unit,
        });
    let hits =
        prop_oneof![4 => 0u64..40, 1 => any::<u64>()].prop_map(|value| UInt64Value { value });
    let descriptor = (
        prop::collection::vec(entry, 0..4),
        prop::option::weighted(0.15, limit),
        prop::option::weighted(0.25, hits),
    )
        .prop_map(|(entries, limit, hits_addend)| RateLimitDescriptor {
            entries,
            limit,
            hits_addend,
        });
    (
        domain_word(),
        prop::collection::vec(descriptor, 0..4),
        prop_oneof![4 => Just(0u32), 2 => 0u32..40, 1 => any::<u32>()],
    )
        .prop_map(|(domain, descriptors, hits_addend)| RateLimitRequest {
            domain,
            descriptors,
            hits_addend,
        })
}

/// A request the service answers: a known domain, descriptors of entries the rules name.
fn valid_proto_request() -> impl Strategy<Value = RateLimitRequest> {
    let word = || {
        prop::sample::select(vec![
            "user",
            "path",
            "plan",
            "remote_address",
            "generic_key",
            "user_agent",
            "healthcheck",
            "/export",
            "pro",
            "all",
            "BadBot/2.1",
            "203.0.113.7",
            "u1",
            "u2",
        ])
        .prop_map(str::to_owned)
    };
    let entry = (word(), word()).prop_map(|(key, value)| Entry { key, value });
    let limit = (0u32..20, 1i32..8).prop_map(|(requests_per_unit, unit)| RateLimitOverride {
        requests_per_unit,
        unit,
    });
    let descriptor = (
        prop::collection::vec(entry, 1..4),
        prop::option::weighted(0.1, limit),
        prop::option::weighted(0.2, (0u64..30).prop_map(|value| UInt64Value { value })),
    )
        .prop_map(|(entries, limit, hits_addend)| RateLimitDescriptor {
            entries,
            limit,
            hits_addend,
        });
    (
        prop::sample::select(vec!["edge", "api"]),
        prop::collection::vec(descriptor, 1..4),
        prop_oneof![3 => Just(0u32), 1 => 0u32..30],
    )
        .prop_map(|(domain, descriptors, hits_addend)| RateLimitRequest {
            domain: domain.to_owned(),
            descriptors,
            hits_addend,
        })
}

/// What `call_from_proto` must answer for `request`, from the protocol's rules alone.
fn expected_call(request: &RateLimitRequest) -> Result<RateLimitCall, CallError> {
    use sluicegate_server::serve::{DescriptorCall, LimitOverride};
    let mut descriptors = Vec::new();
    for (index, d) in request.descriptors.iter().enumerate() {
        let limit_override = match &d.limit {
            None => None,
            Some(o) => Some(LimitOverride {
                requests_per_unit: o.requests_per_unit,
                unit: EnvoyUnit::from_proto_number(o.unit).ok_or_else(|| {
                    CallError::Malformed(format!(
                        "descriptor {index}: unknown limit unit {}",
                        o.unit
                    ))
                })?,
            }),
        };
        // How the counts combine is `DescriptorCall::new`'s rule, the one place both
        // transports take it from; what is checked here is that each count reaches it.
        descriptors.push(DescriptorCall::new(
            d.entries
                .iter()
                .map(|e| (e.key.clone(), e.value.clone()))
                .collect(),
            d.hits_addend.as_ref().map(|h| h.value),
            Some(u64::from(request.hits_addend)),
            limit_override,
        ));
    }
    if request.domain.is_empty() {
        return Err(CallError::EmptyDomain);
    }
    if descriptors.is_empty() {
        return Err(CallError::NoDescriptors);
    }
    for (index, d) in descriptors.iter().enumerate() {
        if d.entries.is_empty() {
            return Err(CallError::EmptyDescriptor { index });
        }
        if d.limit_override
            .is_some_and(|o| o.unit == EnvoyUnit::Unknown)
        {
            return Err(CallError::OverrideWithoutUnit { index });
        }
    }
    Ok(RateLimitCall {
        domain: request.domain.clone(),
        descriptors,
    })
}

/// The same request in the JSON form (protobuf's JSON mapping), spelled one way or another.
fn as_json(request: &RateLimitRequest, spelling: u8) -> String {
    let number = |n: u64| {
        if spelling % 2 == 0 {
            J::Num(n.to_string())
        } else {
            J::Str(n.to_string())
        }
    };
    let name = |camel: &str, snake: &str| {
        if spelling & 2 == 0 {
            camel.to_owned()
        } else {
            snake.to_owned()
        }
    };
    let descriptors = request
        .descriptors
        .iter()
        .map(|d| {
            let mut fields = vec![(
                "entries".to_owned(),
                J::Arr(
                    d.entries
                        .iter()
                        .map(|e| {
                            J::Obj(vec![
                                ("key".into(), J::Str(e.key.clone())),
                                ("value".into(), J::Str(e.value.clone())),
                            ])
                        })
                        .collect(),
                ),
            )];
            if let Some(o) = &d.limit {
                let unit = match EnvoyUnit::from_proto_number(o.unit) {
                    Some(unit) if spelling & 4 == 0 => J::Str(unit.proto_name().to_owned()),
                    _ => J::Num(o.unit.to_string()),
                };
                fields.push((
                    "limit".into(),
                    J::Obj(vec![
                        (
                            name("requestsPerUnit", "requests_per_unit"),
                            number(u64::from(o.requests_per_unit)),
                        ),
                        ("unit".into(), unit),
                    ]),
                ));
            }
            if let Some(h) = &d.hits_addend {
                fields.push((name("hitsAddend", "hits_addend"), number(h.value)));
            }
            J::Obj(fields)
        })
        .collect();
    let mut fields = vec![
        ("domain".to_owned(), J::Str(request.domain.clone())),
        ("descriptors".to_owned(), J::Arr(descriptors)),
    ];
    if request.hits_addend > 0 {
        fields.push((
            name("hitsAddend", "hits_addend"),
            number(u64::from(request.hits_addend)),
        ));
    }
    json_text(&J::Obj(fields))
}

/// Reads a decoded request; checks it against the protocol's rules and the JSON transport.
fn read_proto(
    request: RateLimitRequest,
    spelling: u8,
) -> Result<Option<RateLimitCall>, TestCaseError> {
    let expected = expected_call(&request);
    let json = as_json(&request, spelling);
    let via_json = call_from_json(json.as_bytes());
    let call = call_from_proto(request.clone());
    match &call {
        Ok(call) => check_call(call)?,
        Err(err) => check_call_error(err, &request)?,
    }
    check(call == expected, || {
        format!("{request:?}\nread as {call:?}\nexpected {expected:?}")
    })?;
    let same = match (&call, &via_json) {
        (Ok(a), Ok(b)) => a == b,
        (Err(a), Err(b)) => std::mem::discriminant(a) == std::mem::discriminant(b),
        _ => false,
    };
    check(same, || {
        format!("gRPC reads {call:?}, JSON {json} reads {via_json:?}")
    })?;
    Ok(call.ok())
}

#[test]
fn fuzz_grpc_arbitrary_bytes() {
    let answerer = Answerer::new();
    let bytes = prop_oneof![
        1 => any::<Vec<u8>>(),
        3 => (prop_oneof![proto_request(), valid_proto_request()], prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..3))
            .prop_map(|(request, damage)| {
                let mut bytes = request.encode_to_vec();
                for (at, byte, how) in damage {
                    let i = at.index(bytes.len() + 1);
                    match how {
                        0 if i < bytes.len() => bytes[i] = byte,
                        1 if i < bytes.len() => {
                            bytes.remove(i);
                        }
                        _ => bytes.insert(i, byte),
                    }
                }
                bytes
            }),
    ];
    fuzz("grpc_arbitrary_bytes", bytes, |bytes| {
        match RateLimitRequest::decode(bytes.as_slice()) {
            Ok(request) => {
                if let Some(call) = read_proto(request, 0)? {
                    answerer.answer(&call)?;
                }
            }
            Err(err) => check(!err.to_string().trim().is_empty(), || {
                "an empty decode error".into()
            })?,
        }
        Ok(())
    });
}

#[test]
fn fuzz_grpc_requests() {
    let answerer = Answerer::new();
    let request = prop_oneof![proto_request(), valid_proto_request()];
    fuzz(
        "grpc_requests",
        (request, any::<u8>()),
        |(request, spelling)| {
            let decoded = RateLimitRequest::decode(request.encode_to_vec().as_slice());
            check(decoded.as_ref() == Ok(&request), || {
                format!("{request:?} does not decode back")
            })?;
            if let Some(call) = read_proto(request, spelling)? {
                answerer.answer(&call)?;
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Over real sockets.

fn loopback_config() -> proptest::test_runner::Config {
    let cases = std::env::var("SLUICEGATE_FUZZ_SLOW_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(32);
    proptest::test_runner::Config {
        cases,
        ..fuzz_harness::config()
    }
}

/// The service on the example rules, on a runtime of its own.
fn serve_examples() -> (tokio::runtime::Runtime, Service) {
    let runtime = sluicegate_server::serve::runtime().expect("a runtime");
    let dir = tempfile::tempdir().expect("a temporary directory");
    for file in ["api.yaml", "edge.yaml"] {
        std::fs::copy(example_rules().join(file), dir.path().join(file))
            .expect("copy the example rules");
    }
    let service = runtime
        .block_on(Service::start_in(dir, engine_options()))
        .expect("the service starts");
    (runtime, service)
}

#[test]
fn fuzz_loopback_json() {
    let (runtime, service) = serve_examples();
    let body = prop_oneof![
        4 => json_request().prop_map(|j| json_text(&j).into_bytes()),
        4 => (valid_proto_request(), any::<u8>()).prop_map(|(r, spelling)| as_json(&r, spelling).into_bytes()),
        2 => any::<Vec<u8>>(),
        1 => (MAX_BODY_BYTES - 8..MAX_BODY_BYTES + 8).prop_map(|n| {
            let mut body = br#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":""#.to_vec();
            body.resize(n.saturating_sub(6), b'x');
            body.extend_from_slice(br#""}]}]}"#);
            body
        }),
    ];
    fuzz_with("loopback_json", loopback_config(), body, |body| {
        let expected = within_caps(call_from_json(&body));
        let (status, text) = runtime
            .block_on(async {
                let response = service
                    .http
                    .post(service.url("/json"))
                    .body(body.clone())
                    .send()
                    .await?;
                let status = response.status().as_u16();
                Ok::<_, reqwest::Error>((status, response.text().await?))
            })
            .map_err(|e| TestCaseError::fail(format!("the request failed: {e}")))?;
        match expected {
            _ if body.len() > MAX_BODY_BYTES => {
                check(status == 413, || format!("{} bytes: {status}", body.len()))
            }
            Err(err) => check(status == 400 && text == format!("{err}\n"), || {
                format!("expected 400 `{err}`, got {status} `{text}`")
            }),
            Ok(_) => {
                accepted();
                let json: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| TestCaseError::fail(format!("{status} `{text}`: {e}")))?;
                let over = json["overallCode"] == "OVER_LIMIT";
                check(status == if over { 429 } else { 200 }, || {
                    format!("{status} with {json}")
                })
            }
        }
    });
    runtime
        .block_on(service.server.shutdown())
        .expect("the service stops");
}

#[test]
fn fuzz_loopback_grpc() {
    let (runtime, service) = serve_examples();
    let grpc = RefCell::new(service.grpc.clone());
    let raw = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("a client");
    let url = format!(
        "http://{}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        service.server.grpc_addr
    );
    let case = prop_oneof![
        3 => prop_oneof![proto_request(), valid_proto_request()].prop_map(|r| (Some(r), Vec::new())),
        1 => any::<Vec<u8>>().prop_map(|b| (None, b)),
    ];
    fuzz_with(
        "loopback_grpc",
        loopback_config(),
        case,
        |(request, bytes)| {
            match request {
                // A real tonic client.
                Some(request) => {
                    let expected = within_caps(call_from_proto(request.clone()));
                    let mut client = grpc.borrow().clone();
                    let answer = runtime.block_on(client.should_rate_limit(request));
                    match (expected, answer) {
                        (Ok(call), Ok(answer)) => {
                            accepted();
                            let answer = answer.into_inner();
                            check(answer.statuses.len() == call.descriptors.len(), || {
                                format!("{answer:?}")
                            })
                        }
                        (Err(err), Err(status)) => check(
                            status.code() == tonic::Code::InvalidArgument
                                && status.message() == err.to_string(),
                            || format!("expected INVALID_ARGUMENT `{err}`, got {status:?}"),
                        ),
                        (expected, answer) => Err(TestCaseError::fail(format!(
                            "expected {expected:?}, got {answer:?}"
                        ))),
                    }
                }
                // Raw bytes in a gRPC frame.
                None => {
                    let decodes = RateLimitRequest::decode(bytes.as_slice())
                        .ok()
                        .is_some_and(|r| call_from_proto(r).is_ok());
                    let mut framed = vec![0u8];
                    framed.extend_from_slice(
                        &u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes(),
                    );
                    framed.extend_from_slice(&bytes);
                    let (status, message) = runtime
                        .block_on(async {
                            let response = raw
                                .post(&url)
                                .header("content-type", "application/grpc")
                                .header("te", "trailers")
                                .body(framed)
                                .send()
                                .await?;
                            let header = |name: &str| {
                                response
                                    .headers()
                                    .get(name)
                                    .and_then(|v| v.to_str().ok())
                                    .map(str::to_owned)
                            };
                            Ok::<_, reqwest::Error>((header("grpc-status"), header("grpc-message")))
                        })
                        .map_err(|e| TestCaseError::fail(format!("the request failed: {e}")))?;
                    if decodes {
                        accepted();
                        // A success sends its status in the trailers, after the answer.
                        check(status.is_none() || status.as_deref() == Some("0"), || {
                            format!("{status:?} {message:?}")
                        })
                    } else {
                        check(
                            status.as_deref().is_some_and(|s| s != "0")
                                && message.is_some_and(|m| !m.is_empty()),
                            || format!("undecodable bytes answered {status:?}"),
                        )
                    }
                }
            }
        },
    );
    runtime
        .block_on(service.server.shutdown())
        .expect("the service stops");
}

// Inputs the fuzzer found, kept as regular tests.

/// A number field of the wrong type was "data did not match any variant of untagged enum
/// NumberOrText", which names neither the field nor what it takes.
#[test]
fn regression_wrong_number_types_name_the_field() {
    for (body, needles) in [
        (
            r#"{"descriptors":[{"hitsAddend":-1}]}"#,
            &["hits_addend", "non-negative", "-1", "column"][..],
        ),
        (
            r#"{"domain":"d","hits_addend":true}"#,
            &["hits_addend", "boolean", "column"],
        ),
        (
            r#"{"domain":"d","hitsAddend":{"value":1.5}}"#,
            &["hits_addend", "floating point", "column"],
        ),
        (
            r#"{"domain":"d","hitsAddend":{"value":null}}"#,
            &["hits_addend", "null", "column"],
        ),
        (
            r#"{"domain":"d","hitsAddend":{"other":1}}"#,
            &["value", "column"],
        ),
        (
            r#"{"domain":"d","hitsAddend":"x"}"#,
            &["hits_addend", "\"x\""],
        ),
        (
            r#"{"descriptors":[{"entries":[{"key":"k"}],"limit":{"requestsPerUnit":[],"unit":"SECOND"}}]}"#,
            &["requests_per_unit", "sequence", "column"],
        ),
        (
            r#"{"descriptors":[{"entries":[{"key":"k"}],"limit":{"requestsPerUnit":1,"unit":1.5}}]}"#,
            &["unit", "SECOND", "floating point", "column"],
        ),
        (
            r#"{"descriptors":[{"entries":[{"key":"k"}],"limit":{"requestsPerUnit":1,"unit":2147483648}}]}"#,
            &["unit", "2147483648", "column"],
        ),
        (
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"k"}],"limit":{"requestsPerUnit":1,"unit":"fortnight"}}]}"#,
            &["descriptor 0", "unit", "fortnight"],
        ),
    ] {
        let err = call_from_json(body.as_bytes()).expect_err(body);
        let message = err.to_string();
        assert!(
            !message.contains("did not match any variant"),
            "{body}: {message}"
        );
        for needle in needles {
            assert!(
                message.contains(needle),
                "{body}: {message:?} lacks {needle:?}"
            );
        }
    }
    // The forms that were accepted still are.
    for (body, hits) in [
        (
            r#"{"domain":"d","hitsAddend":"7","descriptors":[{"entries":[{"key":"k"}]}]}"#,
            7,
        ),
        (
            r#"{"domain":"d","hitsAddend":{"value":"7"},"descriptors":[{"entries":[{"key":"k"}]}]}"#,
            7,
        ),
        (
            r#"{"domain":"d","hitsAddend":{"value":{"value":7}},"descriptors":[{"entries":[{"key":"k"}]}]}"#,
            7,
        ),
        (
            r#"{"domain":"d","hitsAddend":null,"descriptors":[{"entries":[{"key":"k"}],"hits_addend":7}]}"#,
            7,
        ),
        (
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"k"}],"limit":{"requests_per_unit":"3","unit":2}}]}"#,
            1,
        ),
    ] {
        let call = call_from_json(body.as_bytes()).expect(body);
        assert_eq!(call.descriptors[0].hits, hits, "{body}");
    }
}

/// What a service with the default caps answers a call that reads as `call`: the call, or the
/// error naming the cap it exceeds.
fn within_caps(call: Result<RateLimitCall, CallError>) -> Result<RateLimitCall, CallError> {
    call.and_then(|call| call.check_size(&CallLimits::default()).map(|()| call))
}
